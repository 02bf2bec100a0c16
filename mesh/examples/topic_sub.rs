//! A topic subscriber, in the style of Zenoh's `z_sub`: opens a reader and prints every
//! sample (writer, sequence number, length) and every match event.
//!
//! ```sh
//! cargo run -p shoal-mesh --example topic_sub -- --topic demo/topic --partition 'robot/*'
//! cargo run -p shoal-mesh --example topic_sub -- --no-multicast --listen 127.0.0.1:7447
//! ```
//!
//! Pair it with `topic_pub` (same topic and type; partitions that overlap). Without
//! `--no-multicast` the nodes find each other by multicast scouting; `--peer host:port`
//! dials a node directly.

use clap::Parser;
use shoal_mesh::topics::{guid_hex, Topic};
use shoal_mesh::{ErrorLog, Event, Mesh};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Subscribe to a topic and print what arrives.
#[derive(Debug, Clone, Parser)]
#[command(name = "topic_sub")]
pub struct Args {
    /// Topic name.
    #[arg(long, default_value = "demo/topic")]
    pub topic: String,
    /// Type name (must equal the writer's).
    #[arg(long = "type", default_value = "Demo")]
    pub type_name: String,
    /// A partition name or `*` / `?` pattern (repeatable; none: the default partition).
    #[arg(long)]
    pub partition: Vec<String>,
    /// Ask for reliable writers only (a best-effort writer is then incompatible).
    #[arg(long)]
    pub reliable: bool,
    /// A node to dial (`host:port`, repeatable).
    #[arg(long)]
    pub peer: Vec<String>,
    /// Turn multicast scouting off (then only `--peer` and inbound links connect).
    #[arg(long)]
    pub no_multicast: bool,
    /// TCP listen address (port 0: any).
    #[arg(long, default_value = "0.0.0.0:0")]
    pub listen: SocketAddr,
    /// The node's name, as observers (`shoal nodes`) show it (default: its id in hex).
    #[arg(long, default_value = "")]
    pub name: String,
    /// Exit after this many samples (0: never).
    #[arg(long, default_value_t = 0)]
    pub count: u64,
}

/// Runs the subscriber until `count` samples arrived or `stop` is set; prints to `out`;
/// returns the samples received.
pub fn run(
    args: &Args,
    stop: &AtomicBool,
    out: &mut dyn Write,
) -> Result<u64, Box<dyn std::error::Error>> {
    let mut b = Mesh::builder()
        .scouting(!args.no_multicast)
        .listen_addr(args.listen.ip())
        .listen_port(args.listen.port())
        .node_name(args.name.clone());
    for p in &args.peer {
        b = b.static_peer(p.clone());
    }
    let mesh = b.build()?;
    let mut events = mesh.events();
    mesh.start()?;
    let mut topic = Topic::new(args.topic.as_str(), args.type_name.as_str())
        .partitions(args.partition.iter().cloned());
    if args.reliable {
        topic = topic.reliable();
    }
    let reader = mesh.reader(topic)?;
    writeln!(
        out,
        "listening on port {}: reader {} on {:?}",
        mesh.listen_port(),
        guid_hex(&reader.guid()),
        args.topic
    )?;
    let mut got = 0u64;
    // Error events (one per garbage connection a stranger opens) are logged aggregated, a
    // line per kind and 10 s, as the node logs its own warnings.
    let mut errors = ErrorLog::new();
    while !stop.load(Ordering::Relaxed) && (args.count == 0 || got < args.count) {
        errors.flush();
        let Some(ev) = events.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        if errors.note(&ev) || !reader.is_for(&ev) {
            continue;
        }
        match ev {
            Event::Sample {
                writer,
                seq,
                payload,
                ..
            } => {
                got += 1;
                writeln!(
                    out,
                    "sample writer={} seq={seq} len={}",
                    guid_hex(&writer),
                    payload.len()
                )?;
            }
            Event::Matched { writer, local, .. } => writeln!(
                out,
                "matched writer={} ({local:?} local)",
                guid_hex(&writer)
            )?,
            Event::Unmatched { writer, .. } => {
                writeln!(out, "unmatched writer={}", guid_hex(&writer))?
            }
            Event::Incompatible {
                writer, reasons, ..
            } => writeln!(out, "incompatible writer={}: {reasons}", guid_hex(&writer))?,
            _ => {}
        }
    }
    drop(reader);
    mesh.stop();
    Ok(got)
}

#[allow(dead_code)] // the end-to-end test includes this file for `run`
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    let args = Args::parse();
    run(
        &args,
        &AtomicBool::new(false),
        &mut std::io::stdout().lock(),
    )?;
    Ok(())
}
