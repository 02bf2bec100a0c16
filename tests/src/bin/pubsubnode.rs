//! `pubsubnode`: one Shoal node that publishes numbered broadcasts and/or checks the ones it
//! receives, for the multi-host fault tests. It prints one line per fact on stdout:
//!
//! - `ready id=<hex> port=<tcp port>`, `connected peer=<hex>`, `disconnected peer=<hex>`,
//!   `error kind=<kind> msg=<text>`
//! - `pub t_ms=<ms since start> sent=<n>` every report period while publishing, then
//!   `pub done sent=<n>`
//! - `sub t_ms=<ms> got=<n> dup=<d> max=<highest seq> missing=<seqs below max not received>
//!   last_missing=<highest such seq, or -1>` every report period once something arrived
//! - `stats <counter>=<value> ... rss_kib=<resident set>`: every counter of the node's stats
//!   (summed over its executors) and its memory, every report period
//!
//! A payload starts with the publisher's sequence number (u64, big-endian); `dup` counts
//! sequence numbers that reached the application twice, which must never happen. It exits by
//! itself after `--run-for` seconds.

use std::io::Write;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use clap::Parser;
use shoal_mesh::{Event, Mesh, ShardStats};

#[derive(Parser, Debug)]
#[command(about = "A Shoal node that publishes and checks numbered broadcasts (fault tests)")]
struct Args {
    /// IPv4 address of the interface to send and join multicast on (and listen on).
    #[arg(long)]
    interface: Ipv4Addr,
    /// Mesh group name.
    #[arg(long, default_value = "faults")]
    group: String,
    /// Beacon interval in milliseconds.
    #[arg(long, default_value_t = 250)]
    announce_ms: u64,
    /// Publish this many messages per second (0: do not publish).
    #[arg(long, default_value_t = 0)]
    publish_rate: u64,
    /// Publish for this many seconds.
    #[arg(long, default_value_t = 10)]
    publish_secs: u64,
    /// Start publishing once linked to this many peers (waits up to 60 s).
    #[arg(long, default_value_t = 1)]
    publish_after_peers: usize,
    /// Payload bytes (at least 8).
    #[arg(long, default_value_t = 256)]
    payload: usize,
    /// `max_outbound_queue_bytes` of every link.
    #[arg(long, default_value_t = 64 * 1024)]
    queue_bytes: usize,
    /// `max_dedup_entries`.
    #[arg(long, default_value_t = 100_000)]
    dedup_entries: usize,
    /// `heartbeat_timeout` in milliseconds (a link that reads nothing this long is closed,
    /// unless its peer still acknowledges what it is sent).
    #[arg(long, default_value_t = 3000)]
    heartbeat_timeout_ms: u64,
    /// Report period in milliseconds.
    #[arg(long, default_value_t = 250)]
    report_ms: u64,
    /// Exit after this many seconds.
    #[arg(long, default_value_t = 120)]
    run_for: u64,
    /// Take every link's copy of a Data frame (`reverse_path_check = false`).
    #[arg(long)]
    no_reverse_path_check: bool,
    /// Relays send every broadcast on every link (`relay_pruning = false`), as mesh-v1 does.
    #[arg(long)]
    no_relay_pruning: bool,
}

/// Which sequence numbers arrived, and how often one arrived again.
#[derive(Default)]
struct Seen {
    bits: Vec<u64>,
    got: u64,
    dup: u64,
    max: Option<u64>,
}

impl Seen {
    fn add(&mut self, seq: u64) {
        let (w, b) = ((seq / 64) as usize, seq % 64);
        if self.bits.len() <= w {
            self.bits.resize(w + 1, 0);
        }
        if self.bits[w] & (1 << b) != 0 {
            self.dup += 1;
            return;
        }
        self.bits[w] |= 1 << b;
        self.got += 1;
        self.max = Some(self.max.map_or(seq, |m| m.max(seq)));
    }

    fn has(&self, seq: u64) -> bool {
        self.bits
            .get((seq / 64) as usize)
            .is_some_and(|w| w & (1 << (seq % 64)) != 0)
    }

    /// Sequence numbers below the highest received that never arrived, and the highest one.
    fn missing(&self) -> (u64, i64) {
        let Some(max) = self.max else { return (0, -1) };
        let mut n = 0;
        let mut last = -1i64;
        for s in 0..max {
            if !self.has(s) {
                n += 1;
                last = s as i64;
            }
        }
        (n, last)
    }
}

fn main() {
    let args = Args::parse();
    let mesh = Mesh::builder()
        .group_name(args.group.clone())
        .listen_addr(args.interface.into())
        .multicast_interface(args.interface)
        .scouting(true)
        .announce_interval(Duration::from_millis(args.announce_ms))
        .max_outbound_queue_bytes(args.queue_bytes)
        .max_dedup_entries(args.dedup_entries)
        .heartbeat_timeout(Duration::from_millis(args.heartbeat_timeout_ms))
        .reverse_path_check(!args.no_reverse_path_check)
        .relay_pruning(!args.no_relay_pruning)
        .build()
        .unwrap_or_else(|e| fail(&format!("build: {e}")));
    let mut events = mesh.events();
    mesh.start()
        .unwrap_or_else(|e| fail(&format!("start: {e}")));
    say(&format!(
        "ready id={} port={}",
        mesh.id(),
        mesh.listen_port()
    ));
    let start = Instant::now();
    let end = start + Duration::from_secs(args.run_for);

    if args.publish_rate > 0 {
        let m = mesh.clone();
        let (rate, secs, size, report, peers) = (
            args.publish_rate,
            args.publish_secs,
            args.payload.max(8),
            Duration::from_millis(args.report_ms),
            args.publish_after_peers,
        );
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while m.connected_peers().len() < peers && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            publish(&m, rate, secs, size, report, start)
        });
    }

    let report = Duration::from_millis(args.report_ms);
    let mut next_report = Instant::now() + report;
    let mut seen = Seen::default();
    while Instant::now() < end {
        if let Some(ev) = events.recv_timeout(Duration::from_millis(50)) {
            match ev {
                Event::PeerConnected { peer } => say(&format!("connected peer={peer}")),
                Event::PeerDisconnected { peer } => say(&format!("disconnected peer={peer}")),
                Event::Error { kind, message, .. } => {
                    say(&format!("error kind={kind:?} msg={message}"))
                }
                Event::Message { payload, .. } if payload.len() >= 8 => {
                    let seq = u64::from_be_bytes(payload[..8].try_into().expect("8 bytes"));
                    seen.add(seq);
                }
                _ => {}
            }
        }
        if Instant::now() >= next_report {
            next_report += report;
            let t_ms = start.elapsed().as_millis();
            if seen.got > 0 {
                let (missing, last) = seen.missing();
                say(&format!(
                    "sub t_ms={t_ms} got={} dup={} max={} missing={missing} last_missing={last}",
                    seen.got,
                    seen.dup,
                    seen.max.unwrap_or(0)
                ));
            }
            say(&format!(
                "{} rss_kib={}",
                stats_line(&mesh.stats().total),
                rss_kib()
            ));
        }
    }
    mesh.stop();
}

/// Publishes `rate` numbered messages per second for `secs` seconds through the blocking
/// API (Block policy): when the mesh holds the publisher back, it falls behind its schedule
/// and the `pub` lines show it.
fn publish(m: &Mesh, rate: u64, secs: u64, size: usize, report: Duration, start: Instant) {
    let begin = Instant::now();
    let total = rate * secs;
    let mut next_report = begin + report;
    let mut payload = vec![0x5au8; size];
    for seq in 0..total {
        let due = begin + Duration::from_nanos(seq * 1_000_000_000 / rate);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        payload[..8].copy_from_slice(&seq.to_be_bytes());
        // NoRoute while the node has no link yet: that message is simply not sent.
        let _ = m.broadcast_blocking(payload.clone());
        if Instant::now() >= next_report {
            next_report += report;
            say(&format!(
                "pub t_ms={} sent={}",
                start.elapsed().as_millis(),
                seq + 1
            ));
        }
    }
    say(&format!("pub done sent={total}"));
}

fn stats_line(t: &ShardStats) -> String {
    let mut line = String::from("stats");
    for c in t.counters() {
        line.push_str(&format!(" {}={}", c.name, c.value));
    }
    line
}

/// The resident set of this process, from procfs (0 if unreadable).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn fail(msg: &str) -> ! {
    eprintln!("pubsubnode: {msg}");
    std::process::exit(1)
}
