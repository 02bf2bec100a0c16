//! A topic publisher, in the style of Zenoh's `z_pub`: opens a writer and writes a numbered
//! sample at a fixed rate, printing each and every match event.
//!
//! ```sh
//! cargo run -p shoal-mesh --example topic_pub -- --topic demo/topic --partition robot/1
//! cargo run -p shoal-mesh --example topic_pub -- --no-multicast --peer 127.0.0.1:7447 --rate 100
//! ```
//!
//! Pair it with `topic_sub`. Samples are written whether or not a reader matches (as in
//! DDS); `--wait-match` holds the first one until a reader matched.

use clap::Parser;
use shoal_mesh::topics::{guid_hex, Topic};
use shoal_mesh::{ErrorLog, Event, Mesh};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Publish numbered samples on a topic.
#[derive(Debug, Clone, Parser)]
#[command(name = "topic_pub")]
pub struct Args {
    /// Topic name.
    #[arg(long, default_value = "demo/topic")]
    pub topic: String,
    /// Type name (must equal the readers').
    #[arg(long = "type", default_value = "Demo")]
    pub type_name: String,
    /// A partition name or `*` / `?` pattern (repeatable; none: the default partition).
    #[arg(long)]
    pub partition: Vec<String>,
    /// Offer reliable delivery (the default for writers); `--best-effort` offers less.
    #[arg(long, conflicts_with = "best_effort")]
    pub reliable: bool,
    /// Offer best effort only (a reliable reader is then incompatible).
    #[arg(long)]
    pub best_effort: bool,
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
    /// Samples per second (0: as fast as the mesh takes them).
    #[arg(long, default_value_t = 1.0)]
    pub rate: f64,
    /// Samples to write (0: until interrupted).
    #[arg(long, default_value_t = 0)]
    pub count: u64,
    /// Payload bytes (at least the text `[seq] shoal topic sample`, padded with dots).
    #[arg(long, default_value_t = 0)]
    pub size: usize,
    /// Wait until a reader matched before the first sample.
    #[arg(long)]
    pub wait_match: bool,
}

/// Runs the publisher until `count` samples are written or `stop` is set; prints to `out`;
/// returns the samples written.
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
    topic = if args.best_effort {
        topic.best_effort()
    } else {
        topic.reliable()
    };
    // Each sample goes out at once: a publisher at a human rate wants no batching delay.
    let mut writer = mesh.writer(topic)?.with_batch_bytes(0);
    writeln!(
        out,
        "listening on port {}: writer {} on {:?}",
        mesh.listen_port(),
        guid_hex(&writer.guid()),
        args.topic
    )?;
    let period = (args.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / args.rate));
    let mut matched = 0usize;
    let mut next = Instant::now();
    let mut written = 0u64;
    // Error events (one per garbage connection a stranger opens) are logged aggregated, a
    // line per kind and 10 s, as the node logs its own warnings.
    let mut errors = ErrorLog::new();
    while !stop.load(Ordering::Relaxed) && (args.count == 0 || written < args.count) {
        errors.flush();
        while let Some(ev) = events.try_recv() {
            if !errors.note(&ev) {
                note(&ev, &writer, &mut matched, out)?;
            }
        }
        if args.wait_match && matched == 0 {
            if let Some(ev) = events.recv_timeout(Duration::from_millis(100)) {
                if !errors.note(&ev) {
                    note(&ev, &writer, &mut matched, out)?;
                }
            }
            continue;
        }
        if let Some(p) = period {
            let now = Instant::now();
            if now < next {
                std::thread::sleep((next - now).min(Duration::from_millis(100)));
                continue;
            }
            next += p;
        }
        let mut payload = format!("[{:4}] shoal topic sample", writer.next_seq()).into_bytes();
        if payload.len() < args.size {
            payload.resize(args.size, b'.');
        }
        let seq = writer.write_blocking(&payload)?;
        written += 1;
        if period.is_some() {
            writeln!(out, "wrote seq={seq} len={}", payload.len())?;
        }
    }
    writer.flush_blocking()?;
    drop(writer);
    mesh.stop();
    Ok(written)
}

/// Prints a match event about `writer` and keeps `matched` (its matched readers) current.
fn note(
    ev: &Event,
    writer: &shoal_mesh::topics::Writer,
    matched: &mut usize,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    match ev {
        Event::Matched {
            writer: w, reader, ..
        } if *w == writer.guid() => {
            *matched += 1;
            writeln!(out, "matched reader={}", guid_hex(reader))
        }
        Event::Unmatched {
            writer: w, reader, ..
        } if *w == writer.guid() => {
            *matched = matched.saturating_sub(1);
            writeln!(out, "unmatched reader={}", guid_hex(reader))
        }
        Event::Incompatible {
            writer: w,
            reader,
            reasons,
            ..
        } if *w == writer.guid() => {
            writeln!(out, "incompatible reader={}: {reasons}", guid_hex(reader))
        }
        _ => Ok(()),
    }
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
