//! `topicnode`: one Shoal node with the topic writers and readers named on its command line,
//! for the multi-host topic tests. Writers write numbered samples at a steady rate; readers
//! count what they receive per writer. It prints one line per fact on stdout:
//!
//! - `ready id=<hex> port=<tcp port>`, then `writer topic=<t> guid=<hex>` and
//!   `reader topic=<t> guid=<hex>` for each endpoint it opened
//! - `connected peer=<hex>`, `disconnected peer=<hex>`, `error kind=<kind> msg=<text>`
//! - `matched topic=<t> writer=<hex> reader=<hex> local=<writer|reader|both>`, `unmatched ...`
//!   (same fields), `incompatible topic=<t> writer=<hex> reader=<hex> why=<reasons>`
//! - every report period, per (topic, remote writer) heard from: `recv topic=<t>
//!   writer=<hex> seq=<highest seq> n=<samples received> dup=<samples whose seq was not above
//!   the highest before it>` (a reader gets a writer's samples once each and in order, so
//!   `dup` must stay 0) `first=<lowest seq received> lost=<samples reported lost by
//!   SamplesLost> order_errors=<samples whose seq was not highest + 1 although no loss was
//!   reported in between; counted for reliable readers only, after their first sample>`
//! - every report period, per topic: `topic name=<t> written=.. delivered=.. forwarded=..
//!   dropped_duplicate=.. missed=.. dropped_queue_full=.. dropped_no_route=..`
//! - with `--reliable`, every report period: `reliable samples_repaired=.. samples_lost=..
//!   reliable_acknacks=.. reliable_heartbeats=.. reliable_gaps=.. reliable_unrouted=..
//!   history_refused=.. dropped_unrouted_samples=.. dropped_link_closed=..
//!   reliable_wrong_link=.. slow_links=.. slow_links_unlisted=.. dropped_slow_link=..
//!   reliable_readers_released=.. links_unanswered=..` (the node's totals; the last six say
//!   whether reliability frames came off their path, whether a link was given up on when a
//!   reader fell behind, whether a keep-all writer stopped waiting for a reader, and whether
//!   a link's peer stopped acknowledging what it is sent)
//! - with `--count N`, per writer: `blocked writer=<hex> seq=<seq>` when a write failed with
//!   `HistoryFull` (once per episode; the same sample is written again),
//!   `unblocked writer=<hex> seq=<seq> after_ms=<ms>` when it went through, and
//!   `done writer=<hex> last=<N>` once samples 1..=N are written (the writer stays open)
//!
//! Reliability options (all optional; without them endpoints are best-effort and volatile,
//! writers keep the last sample and write for ever): `--reliable`, `--keep-all N`,
//! `--keep-last N`, `--transient-local`, `--transient-local-reader T`, `--max-blocking-ms`,
//! `--count N`, `--start-file PATH` (writers wait for it), `--heartbeat-timeout-ms`.
//!
//! Every line ends with `t=<ms since the Unix epoch>`, when it was printed.
//!
//! It exits by itself after `--run-for` seconds.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use shoal_mesh::topics::{
    guid_hex, DurabilityKind, EndpointGuid, Limit, LocalSide, QosDuration, Reliability,
    ReliabilityKind, ResourceLimits, Topic, TopicsConfig,
};
use shoal_mesh::{Event, Mesh, PublishError};

#[derive(Parser, Debug)]
#[command(about = "A Shoal node with topic writers and readers (multi-host topic tests)")]
struct Args {
    /// IPv4 address of the interface to send and join multicast on (and listen on).
    #[arg(long)]
    interface: Ipv4Addr,
    /// Mesh group name.
    #[arg(long, default_value = "topics")]
    group: String,
    /// Scouting beacon interval in milliseconds.
    #[arg(long, default_value_t = 250)]
    announce_ms: u64,
    /// Topic announce period in milliseconds.
    #[arg(long, default_value_t = 500)]
    topic_announce_ms: u64,
    /// Participant lease in milliseconds (a silent node's endpoints expire after it).
    #[arg(long, default_value_t = 2000)]
    lease_ms: u64,
    /// Open a writer on this topic (repeatable).
    #[arg(long = "writer")]
    writers: Vec<String>,
    /// Open a reader on this topic (repeatable).
    #[arg(long = "reader")]
    readers: Vec<String>,
    /// Samples per second written by each writer.
    #[arg(long, default_value_t = 50)]
    rate: u64,
    /// Payload bytes (at least 8: the sample's own number comes first).
    #[arg(long, default_value_t = 64)]
    payload: usize,
    /// Report period in milliseconds.
    #[arg(long, default_value_t = 250)]
    report_ms: u64,
    /// Exit after this many seconds.
    #[arg(long, default_value_t = 120)]
    run_for: u64,
    /// Writers and readers are reliable.
    #[arg(long)]
    reliable: bool,
    /// Writers keep all their history, at most this many samples (`max_samples`).
    #[arg(long, conflicts_with = "keep_last")]
    keep_all: Option<u32>,
    /// Writers keep the last this many samples.
    #[arg(long)]
    keep_last: Option<u32>,
    /// Writers and readers are transient-local.
    #[arg(long)]
    transient_local: bool,
    /// The reader of this topic is transient-local (repeatable).
    #[arg(long = "transient-local-reader")]
    transient_local_readers: Vec<String>,
    /// A reliable writer's `max_blocking_time` in milliseconds.
    #[arg(long)]
    max_blocking_ms: Option<u64>,
    /// Each writer writes samples 1..=N, then stops writing (and stays open).
    #[arg(long)]
    count: Option<u64>,
    /// Writers write nothing until this file exists.
    #[arg(long)]
    start_file: Option<PathBuf>,
    /// A link with nothing received for this long is dead (the mesh's `heartbeat_timeout`).
    #[arg(long)]
    heartbeat_timeout_ms: Option<u64>,
}

impl Args {
    /// The topic as this node's writers (`writer`) or readers declare it.
    fn topic(&self, name: &str, writer: bool) -> Topic {
        let mut t = Topic::new(name, TYPE);
        if self.reliable {
            t = t.reliable();
            if let Some(ms) = self.max_blocking_ms {
                t = t.reliability(Reliability {
                    kind: ReliabilityKind::Reliable,
                    max_blocking_time: QosDuration::from_millis(ms),
                });
            }
        }
        let durable = self.transient_local
            || (!writer && self.transient_local_readers.iter().any(|r| r == name));
        if durable {
            t = t.durability(DurabilityKind::TransientLocal);
        }
        if writer {
            if let Some(n) = self.keep_all {
                t = t.history_keep_all().resource_limits(ResourceLimits {
                    max_samples: Limit::AtMost(n),
                    ..ResourceLimits::default()
                });
            } else if let Some(n) = self.keep_last {
                t = t.history_keep_last(n);
            }
        }
        t
    }
}

/// What one reader heard from one writer.
#[derive(Default)]
struct Heard {
    max: u64,
    n: u64,
    dup: u64,
    /// Lowest seq received (0: none yet).
    first: u64,
    /// Samples reported lost (`SamplesLost`).
    lost: u64,
    /// Highest seq reported lost.
    lost_upto: u64,
    /// Seqs other than highest + 1 with no loss reported for what lies between.
    order_errors: u64,
}

const TYPE: &str = "Blob";

fn main() {
    let args = Args::parse();
    let topics = TopicsConfig {
        announce_period: Duration::from_millis(args.topic_announce_ms),
        participant_lease: Duration::from_millis(args.lease_ms),
        ..TopicsConfig::default()
    };
    let mut builder = Mesh::builder()
        .group_name(args.group.clone())
        .listen_addr(args.interface.into())
        .multicast_interface(args.interface)
        .scouting(true)
        .announce_interval(Duration::from_millis(args.announce_ms))
        .topics(topics);
    if let Some(ms) = args.heartbeat_timeout_ms {
        builder = builder.heartbeat_timeout(Duration::from_millis(ms));
    }
    let mesh = builder
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

    // Reader GUID -> its topic, to name the topic of each sample.
    let mut reader_topic: BTreeMap<EndpointGuid, String> = BTreeMap::new();
    let mut keep = Vec::new();
    for t in &args.readers {
        let r = mesh
            .reader(args.topic(t, false))
            .unwrap_or_else(|e| fail(&format!("reader {t}: {e}")));
        say(&format!("reader topic={t} guid={}", guid_hex(&r.guid())));
        reader_topic.insert(r.guid(), t.clone());
        keep.push(r);
    }
    for t in &args.writers {
        let w = mesh
            .writer(args.topic(t, true))
            .unwrap_or_else(|e| fail(&format!("writer {t}: {e}")))
            .with_batch_bytes(0);
        say(&format!("writer topic={t} guid={}", guid_hex(&w.guid())));
        let (rate, size) = (args.rate.max(1), args.payload.max(8));
        let (count, start) = (args.count, args.start_file.clone());
        std::thread::spawn(move || {
            if let Some(f) = start {
                wait_for_file(&f);
            }
            match count {
                Some(n) => write_count(w, rate, size, n),
                None => write_forever(w, rate, size),
            }
        });
    }

    let start = Instant::now();
    let end = start + Duration::from_secs(args.run_for);
    let report = Duration::from_millis(args.report_ms);
    let mut next_report = Instant::now() + report;
    let mut heard: BTreeMap<(String, EndpointGuid), Heard> = BTreeMap::new();
    while Instant::now() < end {
        if let Some(ev) = events.recv_timeout(Duration::from_millis(50)) {
            on_event(ev, &reader_topic, &mut heard, args.reliable);
        }
        if Instant::now() >= next_report {
            next_report += report;
            for ((topic, writer), h) in &heard {
                say(&format!(
                    "recv topic={topic} writer={} seq={} n={} dup={} first={} lost={} \
                     order_errors={}",
                    guid_hex(writer),
                    h.max,
                    h.n,
                    h.dup,
                    h.first,
                    h.lost,
                    h.order_errors
                ));
            }
            if args.reliable {
                let s = mesh.stats().total;
                say(&format!(
                    "reliable samples_repaired={} samples_lost={} reliable_acknacks={} \
                     reliable_heartbeats={} reliable_gaps={} reliable_unrouted={} \
                     history_refused={} dropped_unrouted_samples={} dropped_link_closed={} \
                     reliable_wrong_link={} slow_links={} slow_links_unlisted={} \
                     dropped_slow_link={} reliable_readers_released={} links_unanswered={}",
                    s.samples_repaired,
                    s.samples_lost,
                    s.reliable_acknacks,
                    s.reliable_heartbeats,
                    s.reliable_gaps,
                    s.reliable_unrouted,
                    s.history_refused,
                    s.dropped_unrouted_samples,
                    s.dropped_link_closed,
                    s.reliable_wrong_link,
                    s.slow_links,
                    s.slow_links_unlisted,
                    s.dropped_slow_link,
                    s.reliable_readers_released,
                    s.links_unanswered
                ));
            }
            for t in mesh.topics().topics {
                let s = t.stats;
                say(&format!(
                    "topic name={} written={} delivered={} forwarded={} dropped_duplicate={} \
                     missed={} dropped_queue_full={} dropped_no_route={}",
                    t.name,
                    s.written,
                    s.delivered,
                    s.forwarded,
                    s.dropped_duplicate,
                    s.missed,
                    s.dropped_queue_full,
                    s.dropped_no_route
                ));
            }
        }
    }
    drop(keep);
    mesh.stop();
}

fn side(local: LocalSide) -> &'static str {
    match local {
        LocalSide::Writer => "writer",
        LocalSide::Reader => "reader",
        LocalSide::Both => "both",
    }
}

fn on_event(
    ev: Event,
    reader_topic: &BTreeMap<EndpointGuid, String>,
    heard: &mut BTreeMap<(String, EndpointGuid), Heard>,
    reliable: bool,
) {
    match ev {
        Event::PeerConnected { peer } => say(&format!("connected peer={peer}")),
        Event::PeerDisconnected { peer } => say(&format!("disconnected peer={peer}")),
        Event::Error { kind, message, .. } => say(&format!("error kind={kind:?} msg={message}")),
        Event::Matched {
            writer,
            reader,
            topic,
            local,
        } => say(&format!(
            "matched topic={topic} writer={} reader={} local={}",
            guid_hex(&writer),
            guid_hex(&reader),
            side(local)
        )),
        Event::Unmatched {
            writer,
            reader,
            topic,
            local,
        } => say(&format!(
            "unmatched topic={topic} writer={} reader={} local={}",
            guid_hex(&writer),
            guid_hex(&reader),
            side(local)
        )),
        Event::Incompatible {
            writer,
            reader,
            topic,
            reasons,
        } => say(&format!(
            "incompatible topic={topic} writer={} reader={} why={reasons}",
            guid_hex(&writer),
            guid_hex(&reader)
        )),
        Event::Sample {
            reader,
            writer,
            seq,
            ..
        } => {
            let topic = reader_topic.get(&reader).cloned().unwrap_or_default();
            let h = heard.entry((topic, writer)).or_default();
            if seq <= h.max {
                h.dup += 1;
            } else {
                // A reliable reader's first sample may be any seq (a volatile reader is owed
                // what was written after it matched); after it, only the next one, unless
                // what lies between was reported lost.
                if reliable && h.n > 0 && seq != h.max + 1 && h.lost_upto < seq - 1 {
                    h.order_errors += 1;
                }
                h.max = seq;
                h.n += 1;
            }
            if h.first == 0 || seq < h.first {
                h.first = seq;
            }
        }
        Event::SamplesLost {
            reader,
            writer,
            first,
            last,
        } => {
            let topic = reader_topic.get(&reader).cloned().unwrap_or_default();
            say(&format!(
                "lost topic={topic} writer={} first={first} last={last}",
                guid_hex(&writer)
            ));
            let h = heard.entry((topic, writer)).or_default();
            h.lost += last.saturating_sub(first) + 1;
            h.lost_upto = h.lost_upto.max(last);
        }
        _ => {}
    }
}

/// Writes `rate` samples per second for ever (a sample with no route yet is dropped by the
/// node and counted there: this loop does not wait for matches).
fn write_forever(mut w: shoal_mesh::topics::Writer, rate: u64, size: usize) {
    let begin = Instant::now();
    let mut payload = vec![0x5au8; size];
    for i in 0u64.. {
        let due = begin + Duration::from_nanos(i * 1_000_000_000 / rate);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        payload[..8].copy_from_slice(&i.to_be_bytes());
        if w.write_blocking(&payload).is_err() || w.flush_blocking().is_err() {
            return;
        }
    }
}

/// Waits until `f` exists (the test's signal that every pair matched).
fn wait_for_file(f: &Path) {
    while !f.exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes samples `1..=count` at `rate` per second (seq `s` carries `s` first), then says
/// `done` and keeps the writer open: its history still answers repairs and late joiners.
/// A write refused with `HistoryFull` (a keep-all history waiting for acknowledgements) is
/// tried again with the same sample, never skipped; the schedule restarts after the wait so
/// the rate stays `rate`.
fn write_count(mut w: shoal_mesh::topics::Writer, rate: u64, size: usize, count: u64) {
    let g = guid_hex(&w.guid());
    let mut begin = Instant::now();
    let mut base = 0u64;
    let mut payload = vec![0x5au8; size];
    while w.next_seq() <= count {
        let seq = w.next_seq();
        let due = begin + Duration::from_nanos((seq - 1 - base) * 1_000_000_000 / rate);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        payload[..8].copy_from_slice(&seq.to_be_bytes());
        let mut blocked: Option<Instant> = None;
        loop {
            match w.write_blocking(&payload) {
                Ok(s) => {
                    if s != seq {
                        fail(&format!("writer {g} wrote seq {s}, expected {seq}"));
                    }
                    break;
                }
                Err(PublishError::HistoryFull { .. }) => {
                    if blocked.is_none() {
                        say(&format!("blocked writer={g} seq={seq}"));
                        blocked = Some(Instant::now());
                    }
                }
                Err(e) => {
                    say(&format!("error kind=write msg={e}"));
                    return;
                }
            }
        }
        if let Some(t) = blocked {
            say(&format!(
                "unblocked writer={g} seq={seq} after_ms={}",
                t.elapsed().as_millis()
            ));
            begin = Instant::now();
            base = seq;
        }
        if let Err(e) = w.flush_blocking() {
            say(&format!("error kind=write msg={e}"));
            return;
        }
    }
    say(&format!("done writer={g} last={count}"));
    // Dropping the writer would withdraw it (and its history) from the readers.
    loop {
        std::thread::park();
    }
}

/// Prints `line` with the wall clock (`t=<ms since the Unix epoch>`): the hosts of a lab run
/// on one machine, so a failing test's logs line up across hosts by it.
fn say(line: &str) {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line} t={t}");
    let _ = out.flush();
}

fn fail(msg: &str) -> ! {
    eprintln!("topicnode: {msg}");
    std::process::exit(1)
}
