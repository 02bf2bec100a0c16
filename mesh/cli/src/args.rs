//! The command line: every command, its options and their help text (`shoal --help`,
//! `shoal <command> --help`).
//!
//! **Owns:** names, defaults and help of the options. **Must not touch:** what a command
//! does with them.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

/// See the mesh: the nodes, the topics and who matches whom (and why not), a topic's
/// samples, rate and bandwidth, the graph, and a live view.
///
/// `shoal` joins the mesh as an observer node, named `shoal-observer/<command>@<host>` so
/// that other nodes (and other observers) can tell it apart; it finds the mesh by multicast
/// scouting (the library's defaults, or `--group`, `--multicast-interface`) or by
/// `--static-peer`. A secured mesh needs `--psk` (and for an identity mesh
/// `--identity-file`). Human output by default; `--json` prints one JSON document (echo,
/// hz and bw: one JSON object per line).
#[derive(Debug, Parser)]
#[command(name = "shoal", version, propagate_version = true)]
pub struct Cli {
    /// How to join the mesh.
    #[command(flatten)]
    pub mesh: MeshArgs,
    /// The command.
    #[command(subcommand)]
    pub cmd: Command,
}

/// How the observer joins the mesh (every command takes these).
#[derive(Debug, Clone, Args)]
pub struct MeshArgs {
    /// Mesh group name (must equal the mesh's).
    #[arg(long, global = true, default_value = "default")]
    pub group: String,
    /// Dial this node `host:port` instead of (or besides) finding nodes by multicast
    /// (repeatable).
    #[arg(long = "static-peer", value_name = "HOST:PORT", global = true)]
    pub static_peers: Vec<String>,
    /// IPv4 address of the interface multicast scouting joins and sends on (the library's
    /// default otherwise; 127.0.0.1 for a mesh on one machine).
    #[arg(long, value_name = "IP", global = true)]
    pub multicast_interface: Option<Ipv4Addr>,
    /// Multicast group of scouting (default 239.255.42.99).
    #[arg(long, value_name = "IP", global = true)]
    pub multicast_group: Option<Ipv4Addr>,
    /// UDP port of scouting (default 45454).
    #[arg(long, value_name = "PORT", global = true)]
    pub multicast_port: Option<u16>,
    /// No multicast scouting: only the static peers.
    #[arg(long, global = true)]
    pub no_multicast: bool,
    /// TCP listen address of the observer (port 0 picks a free one).
    #[arg(
        long,
        value_name = "IP:PORT",
        global = true,
        default_value = "0.0.0.0:0"
    )]
    pub listen: SocketAddr,
    /// Pre-shared key of a secured mesh.
    #[arg(long, value_name = "KEY", global = true)]
    pub psk: Option<String>,
    /// Identity mesh: the observer's Ed25519 seed file (created when absent; needs --psk).
    #[arg(long, value_name = "PATH", global = true)]
    pub identity_file: Option<PathBuf>,
    /// Mesh settings file (TOML, the library's `MeshConfig` keys); the flags override it.
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// The observer's node name (default `shoal-observer/<command>@<host>`).
    #[arg(long, value_name = "NAME", global = true)]
    pub name: Option<String>,
    /// How long to look for the mesh before giving up, ms.
    #[arg(long, value_name = "MS", global = true, default_value_t = 5000)]
    pub wait_ms: u64,
    /// Once linked, how long the view must stay unchanged before it is shown (membership
    /// and topic records arrive over about one announce period), ms.
    #[arg(long, value_name = "MS", global = true, default_value_t = 1500)]
    pub settle_ms: u64,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Every member: id, name, addresses, identity, protocol (Shoal extensions or
    /// multimaster v1 only, and whose word that is), uptime, and its links with round-trip
    /// times.
    Nodes,
    /// Every topic (or those matching PATTERN) with its writers and readers (node, type,
    /// QoS, partitions), the matched pairs, every pair that does not match with the reason,
    /// and the silent causes: members whose topic records never arrive, topics with writers
    /// and no readers (or the reverse), one topic under two types.
    Topics(TopicsArgs),
    /// Print each sample of a topic: writer, sequence number, size and the payload as
    /// UTF-8, JSON (when it parses) or hex.
    Echo(EchoArgs),
    /// A topic's sample rate, inter-arrival jitter percentiles and losses (sequence gaps per
    /// writer) per window.
    Hz(RateArgs),
    /// A topic's bandwidth (bytes/s, mean and largest sample size) and losses per window.
    Bw(RateArgs),
    /// Draw the membership graph with its links (and a topic's tree from each writer) as
    /// SVG, or as Graphviz DOT.
    Graph(GraphArgs),
    /// A live terminal view: nodes, links, topics with rates, drops by cause; refreshed
    /// each second. `q` or Esc quits.
    Watch(WatchArgs),
}

/// `shoal topics`.
#[derive(Debug, Clone, Args)]
pub struct TopicsArgs {
    /// Only topics whose name matches this pattern (`*` any run of characters, `?` one).
    pub pattern: Option<String>,
}

/// Which reader(s) to open on a topic (echo, hz, bw).
#[derive(Debug, Clone, Args)]
pub struct ReaderArgs {
    /// The topic.
    pub topic: String,
    /// Type name of the reader (default: each writer's, as announced, with its type hash).
    #[arg(long = "type", value_name = "NAME")]
    pub type_name: Option<String>,
    /// Partition name or pattern of the reader (repeatable; default: each writer's own).
    #[arg(long = "partition", value_name = "P")]
    pub partitions: Vec<String>,
    /// A reliable reader (matches only reliable writers; gets every sample, in order).
    #[arg(long)]
    pub reliable: bool,
}

/// How `echo` prints payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PayloadFormat {
    /// JSON when the payload parses as JSON, else UTF-8 when it is text, else hex.
    Auto,
    /// UTF-8 (invalid bytes replaced).
    Utf8,
    /// Hex.
    Hex,
    /// JSON (hex when it does not parse).
    Json,
}

/// `shoal echo`.
#[derive(Debug, Clone, Args)]
pub struct EchoArgs {
    /// The reader.
    #[command(flatten)]
    pub reader: ReaderArgs,
    /// Stop after this many samples.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Payload rendering.
    #[arg(long, value_enum, default_value = "auto")]
    pub format: PayloadFormat,
    /// Show at most this many payload bytes (the size is always the whole sample's).
    #[arg(long, value_name = "BYTES", default_value_t = 256)]
    pub max_bytes: usize,
}

/// `shoal hz` and `shoal bw`.
#[derive(Debug, Clone, Args)]
pub struct RateArgs {
    /// The reader.
    #[command(flatten)]
    pub reader: ReaderArgs,
    /// Length of one measuring window, ms (a line per window).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub window_ms: u64,
    /// Stop after this many windows (default: run until interrupted).
    #[arg(long, value_name = "N")]
    pub windows: Option<u64>,
}

/// `shoal graph`.
#[derive(Debug, Clone, Args)]
pub struct GraphArgs {
    /// Also draw this topic: each writer's tree toward its matched readers.
    #[arg(long, value_name = "TOPIC")]
    pub topic: Option<String>,
    /// Where to write the drawing (`-`: standard output).
    #[arg(long, value_name = "FILE", default_value = "mesh.svg")]
    pub out: PathBuf,
    /// Write Graphviz DOT instead of SVG.
    #[arg(long)]
    pub dot: bool,
}

/// `shoal watch`.
#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// Refresh period, ms.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub refresh_ms: u64,
    /// Open no readers: no rates, and the mesh sends the observer no samples.
    #[arg(long)]
    pub no_subscribe: bool,
}

impl Command {
    /// The command's name (the observer's node name says it).
    pub fn name(&self) -> &'static str {
        match self {
            Command::Nodes => "nodes",
            Command::Topics(_) => "topics",
            Command::Echo(_) => "echo",
            Command::Hz(_) => "hz",
            Command::Bw(_) => "bw",
            Command::Graph(_) => "graph",
            Command::Watch(_) => "watch",
        }
    }
}
