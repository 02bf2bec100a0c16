//! Running the traffic shape over Shoal mesh nodes: node settings from the command line, a
//! publishing sink and a subscribing loop.

use crate::traffic::{Receiver, Sink, SinkError};
use bytes::BytesMut;
use shoal_mesh::crypto::RecordSuitePolicy;
use shoal_mesh::{
    ErrorLog, Event, EventReceiver, Mesh, MeshBuilder, MeshConfig, OverflowPolicy, PublishError,
    Publisher,
};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Full-queue policy names accepted on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Policy {
    /// Publishers wait for room (no loss on the direct path).
    Block,
    /// New frames are dropped and counted.
    DropNewest,
}

/// Node settings shared by every role.
#[derive(Debug, Clone, clap::Args)]
pub struct NodeArgs {
    /// Mesh group name.
    #[arg(long, default_value = "default")]
    pub group: String,
    /// TCP listen address `ip:port` (port 0 picks a free one).
    #[arg(long, default_value = "0.0.0.0:0")]
    pub listen: SocketAddr,
    /// Static peer `host:port` (repeatable; kept connected).
    #[arg(long = "static-peer")]
    pub static_peers: Vec<String>,
    /// Seed peer `host:port` (repeatable; dialed at start and while isolated).
    #[arg(long = "seed-peer")]
    pub seed_peers: Vec<String>,
    /// Enable multicast scouting (peer finding) (off by default: use static/seed peers).
    #[arg(long)]
    pub scouting: bool,
    /// IPv4 address of the interface for multicast scouting (implies --scouting).
    #[arg(long)]
    pub multicast_interface: Option<Ipv4Addr>,
    /// Data shards per node.
    #[arg(long, default_value_t = 1)]
    pub shards: usize,
    /// Pin shard i to CPU pin[i % len] (comma-separated CPU numbers).
    #[arg(long, value_delimiter = ',')]
    pub pin: Vec<usize>,
    /// Publisher: hand messages to the node in batches of this many bytes (a
    /// `shoal_mesh::Publisher`, flushed when full and before any wait, as raw TCP's
    /// `BufWriter`); 0 = one `broadcast_blocking` call per message.
    #[arg(long, default_value_t = shoal_mesh::node::DEFAULT_BATCH_BYTES)]
    pub batch_bytes: usize,
    /// Pre-shared key (secured mode: records on every link, AES-256-GCM between Shoal nodes
    /// that both offer it, ChaCha20-Poly1305 otherwise; see `--record-suite`).
    #[arg(long)]
    pub psk: Option<String>,
    /// Secured mode: the record suite this node offers (`record_suite`: auto,
    /// chacha20-poly1305, aes-256-gcm); overrides the settings file.
    #[arg(long)]
    pub record_suite: Option<RecordSuitePolicy>,
    /// Secured mode: plaintext bytes after which a writer cuts a record (the node option
    /// `record_bytes`; default the library's).
    #[arg(long)]
    pub record_bytes: Option<usize>,
    /// Full-queue policy.
    #[arg(long, value_enum, default_value = "block")]
    pub overflow: Policy,
    /// Keep each executor, and an application thread waiting for an event, polling this
    /// many microseconds before it parks (0 = park at once). Lower latency for a busier
    /// CPU; see tuning/README.md.
    #[arg(long = "spin-us", default_value_t = 0)]
    pub spin_us: u64,
    /// How long stopping lets a link send what is still queued on it (to a receiver slower
    /// than the sender) before closing it, ms. Longer than the library's 1000 so that a
    /// run's last messages and its end marker reach a loaded receiver.
    #[arg(long = "stop-grace-ms", default_value_t = 10_000)]
    pub stop_grace_ms: u64,
    /// Mesh settings file (TOML, `MeshConfig` keys); flags above override it.
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
}

/// Why a node could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The settings file could not be read.
    #[error("cannot read {path}: {source}")]
    ReadConfig {
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The settings file is invalid.
    #[error("invalid mesh settings: {0}")]
    Config(#[from] shoal_mesh::config::ConfigError),
    /// The node refused the settings or could not start.
    #[error("mesh node: {0}")]
    Mesh(#[from] shoal_mesh::MeshError),
    /// Peers did not connect in time.
    #[error("timed out after {secs} s waiting for {what}")]
    Timeout {
        /// Seconds waited.
        secs: u64,
        /// What was awaited.
        what: String,
    },
}

impl NodeArgs {
    /// Loopback settings for in-process meshes: nothing from the command line.
    pub fn loopback() -> NodeArgs {
        NodeArgs {
            group: "shoal-loadgen".into(),
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            static_peers: Vec::new(),
            seed_peers: Vec::new(),
            scouting: false,
            multicast_interface: None,
            shards: 1,
            pin: Vec::new(),
            batch_bytes: shoal_mesh::node::DEFAULT_BATCH_BYTES,
            psk: None,
            record_suite: None,
            record_bytes: None,
            overflow: Policy::Block,
            spin_us: 0,
            stop_grace_ms: 10_000,
            config: None,
        }
    }

    /// A builder with these settings.
    pub fn builder(&self) -> Result<MeshBuilder, SetupError> {
        let mut cfg = match &self.config {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| SetupError::ReadConfig {
                        path: path.clone(),
                        source,
                    })?;
                MeshConfig::from_toml_str(&text)?
            }
            None => MeshConfig::default(),
        };
        if let Some(psk) = &self.psk {
            cfg.psk = psk.clone();
        }
        if let Some(suite) = self.record_suite {
            cfg.record_suite = suite;
        }
        let mut b = Mesh::builder()
            .config(cfg)
            .group_name(self.group.clone())
            .listen_addr(self.listen.ip())
            .listen_port(self.listen.port())
            .scouting(self.scouting || self.multicast_interface.is_some())
            .shards(self.shards)
            .spin_before_park(std::time::Duration::from_micros(self.spin_us))
            .stop_grace(std::time::Duration::from_millis(self.stop_grace_ms))
            .overflow_policy(match self.overflow {
                Policy::Block => OverflowPolicy::Block,
                Policy::DropNewest => OverflowPolicy::DropNewest,
            });
        if let Some(n) = self.record_bytes {
            b = b.record_bytes(n);
        }
        if let Some(ifa) = self.multicast_interface {
            b = b.multicast_interface(ifa);
        }
        if !self.pin.is_empty() {
            b = b.pin_to_cpus(self.pin.clone());
        }
        for p in &self.static_peers {
            b = b.static_peer(p.clone());
        }
        for p in &self.seed_peers {
            b = b.seed_peer(p.clone());
        }
        Ok(b)
    }

    /// Builds and starts a node; the event receiver is taken before start so nothing is missed.
    pub fn start(&self) -> Result<(Mesh, EventReceiver), SetupError> {
        let mesh = self.builder()?.build()?;
        let events = mesh.events();
        mesh.start()?;
        Ok((mesh, events))
    }
}

/// The record suites of the links of `meshes` now, each once, sorted (`plaintext` for the
/// links of a plaintext mesh); read before the nodes stop.
pub fn record_suites<'a>(meshes: impl IntoIterator<Item = &'a Mesh>) -> Vec<String> {
    let mut names: Vec<String> = meshes
        .into_iter()
        .flat_map(|m| m.links())
        .map(|l| l.suite.map_or("plaintext", |s| s.name()).to_owned())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Waits until `cond` holds, polling every 5 ms, for at most `secs` seconds.
pub fn wait_for(secs: u64, what: &str, mut cond: impl FnMut() -> bool) -> Result<(), SetupError> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        if Instant::now() >= deadline {
            return Err(SetupError::Timeout {
                secs,
                what: what.to_string(),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Publishes broadcasts through a node: through a batching [`Publisher`] (the default:
/// frames packed into batches of [`Publisher::batch_bytes`], handed over when full and at
/// every `flush`, as raw TCP's `BufWriter` does), or message by message with
/// [`Mesh::broadcast_blocking`].
pub struct MeshSink {
    how: How,
}

enum How {
    Batched(Publisher),
    Single { mesh: Mesh, arena: Arena },
}

/// Bytes per [`Arena`] block.
const ARENA_BLOCK: usize = 64 * 1024;

/// Small payloads cut from a block, one allocation per block instead of one per message, as
/// a high-rate publisher would do it for the message-by-message calls that take owned
/// `Bytes`.
#[derive(Default)]
pub(crate) struct Arena(BytesMut);

impl Arena {
    /// `payload`'s copy, cut from the current block.
    #[inline]
    pub(crate) fn bytes(&mut self, payload: &[u8]) -> bytes::Bytes {
        if self.0.capacity() - self.0.len() < payload.len() {
            self.0 = BytesMut::with_capacity(ARENA_BLOCK.max(payload.len()));
        }
        self.0.extend_from_slice(payload);
        self.0.split().freeze()
    }
}

impl MeshSink {
    /// Broadcasts through `mesh` in batches of `batch_bytes`, or one message per call when
    /// it is 0.
    pub fn broadcast(mesh: &Mesh, batch_bytes: usize) -> MeshSink {
        let how = if batch_bytes == 0 {
            How::Single {
                mesh: mesh.clone(),
                arena: Arena::default(),
            }
        } else {
            How::Batched(mesh.publisher().with_batch_bytes(batch_bytes))
        };
        MeshSink { how }
    }
}

/// A publish error as the traffic loop sees it (fatal or refused this once).
pub(crate) fn sink_error(e: PublishError) -> SinkError {
    match e {
        PublishError::Stopped => SinkError::Fatal("node stopped".into()),
        e @ PublishError::TooLarge { .. } => SinkError::Fatal(e.to_string()),
        e => SinkError::Refused(e.to_string()),
    }
}

impl Sink for MeshSink {
    fn send(&mut self, payload: &[u8]) -> Result<(), SinkError> {
        match &mut self.how {
            How::Batched(p) => p.broadcast_blocking(payload),
            How::Single { mesh, arena } => mesh.broadcast_blocking(arena.bytes(payload)),
        }
        .map_err(sink_error)
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        match &mut self.how {
            How::Batched(p) => p.flush_blocking().map_err(sink_error),
            // The node's writers flush on their own as soon as frames are queued.
            How::Single { .. } => Ok(()),
        }
    }
}

/// Receives Message events into `recv` until `until` passes, `stop` is set, or `publishers`
/// end-of-stream markers arrived. `live` counts messages for a progress line.
pub fn subscribe(
    events: &mut EventReceiver,
    recv: &mut Receiver,
    publishers: usize,
    until: Instant,
    stop: &AtomicBool,
    live: &AtomicU64,
) {
    let mut n = 0u64;
    // Hostile input raises an error event each (a garbage connection, a junk frame): logged
    // as the node logs its own warnings, a line per kind and window, not one each.
    let mut errors = ErrorLog::new();
    loop {
        errors.flush();
        if Instant::now() >= until || stop.load(Ordering::Relaxed) || recv.done(publishers) {
            return;
        }
        let mut next = events.recv_timeout(Duration::from_millis(50));
        // Drain a batch of what is queued before looking at the clock again.
        let mut batch = 0;
        while let Some(ev) = next {
            match ev {
                Event::Message { payload, .. } => {
                    recv.on_payload(&payload);
                    n += 1;
                }
                ev if errors.note(&ev) => {}
                other => tracing::debug!(?other, "mesh event"),
            }
            batch += 1;
            if batch == 4096 {
                break;
            }
            next = events.try_recv();
        }
        live.store(n, Ordering::Relaxed);
    }
}
