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
//!   `dup` must stay 0)
//! - every report period, per topic: `topic name=<t> written=.. delivered=.. forwarded=..
//!   dropped_duplicate=.. missed=.. dropped_queue_full=.. dropped_no_route=..`
//!
//! It exits by itself after `--run-for` seconds.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use clap::Parser;
use shoal_mesh::topics::{guid_hex, EndpointGuid, LocalSide, Topic, TopicsConfig};
use shoal_mesh::{Event, Mesh};

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
}

/// What one reader heard from one writer.
#[derive(Default)]
struct Heard {
    max: u64,
    n: u64,
    dup: u64,
}

const TYPE: &str = "Blob";

fn main() {
    let args = Args::parse();
    let topics = TopicsConfig {
        announce_period: Duration::from_millis(args.topic_announce_ms),
        participant_lease: Duration::from_millis(args.lease_ms),
        ..TopicsConfig::default()
    };
    let mesh = Mesh::builder()
        .group_name(args.group.clone())
        .listen_addr(args.interface.into())
        .multicast_interface(args.interface)
        .scouting(true)
        .announce_interval(Duration::from_millis(args.announce_ms))
        .topics(topics)
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
            .reader(Topic::new(t.as_str(), TYPE))
            .unwrap_or_else(|e| fail(&format!("reader {t}: {e}")));
        say(&format!("reader topic={t} guid={}", guid_hex(&r.guid())));
        reader_topic.insert(r.guid(), t.clone());
        keep.push(r);
    }
    for t in &args.writers {
        let w = mesh
            .writer(Topic::new(t.as_str(), TYPE))
            .unwrap_or_else(|e| fail(&format!("writer {t}: {e}")))
            .with_batch_bytes(0);
        say(&format!("writer topic={t} guid={}", guid_hex(&w.guid())));
        let (rate, size) = (args.rate.max(1), args.payload.max(8));
        std::thread::spawn(move || write_forever(w, rate, size));
    }

    let start = Instant::now();
    let end = start + Duration::from_secs(args.run_for);
    let report = Duration::from_millis(args.report_ms);
    let mut next_report = Instant::now() + report;
    let mut heard: BTreeMap<(String, EndpointGuid), Heard> = BTreeMap::new();
    while Instant::now() < end {
        if let Some(ev) = events.recv_timeout(Duration::from_millis(50)) {
            on_event(ev, &reader_topic, &mut heard);
        }
        if Instant::now() >= next_report {
            next_report += report;
            for ((topic, writer), h) in &heard {
                say(&format!(
                    "recv topic={topic} writer={} seq={} n={} dup={}",
                    guid_hex(writer),
                    h.max,
                    h.n,
                    h.dup
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
                h.max = seq;
                h.n += 1;
            }
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

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn fail(msg: &str) -> ! {
    eprintln!("topicnode: {msg}");
    std::process::exit(1)
}
