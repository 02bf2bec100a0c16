//! `bench --topics`: topic samples A→B against the same build's broadcast A→B and a bare TCP
//! stream of length-prefixed payloads, per payload size, in one process and one run, with the
//! two ratios issue 12 sets targets for; and a fan-out to readers on several nodes
//! (delivered samples/s, bytes on the wire per sample from the nodes' counters).
//!
//! **Owns:** the in-process topic run ([`run_topic`]) and the comparison table.
//! **Must not touch:** the mesh's internals (public API only); it never hard-codes a result.

use crate::demo::{progress_ticker, run_raw_framed, run_shoal, start_mesh, summarise};
use crate::demo::{LocalRun, RunError};
use crate::raw::Framing;
use crate::report::{Drops, Summary};
use crate::rss::{QueueBound, RssSampler};
use crate::shard_roles::{self, ShardReceiver, TopicWriter, Wanted};
use crate::shoal::SetupError;
use crate::topic_report::{counts_since, topic_counts, SampleReport};
use crate::topics::{self, ReaderState, WriterSeqs};
use crate::traffic::{Live, Receiver};
use crate::usage::Usage;
use shoal_mesh::topics::Topic;
use shoal_mesh::{EventReceiver, Mesh, MeshError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Extra time readers wait for the end marker after the writer's run.
const DRAIN: Duration = Duration::from_secs(5);

/// The topic every benchmark writer and reader uses (default QoS: a reliable writer, a
/// best-effort reader, which match).
pub fn bench_topic() -> Topic {
    Topic::new("bench/samples", "shoal-loadgen/Payload")
}

fn mesh_err(e: MeshError) -> RunError {
    RunError::Setup(SetupError::Mesh(e))
}

/// Node 0 writes `decl` samples, one reader on each of nodes 1.. receives them (after every
/// pair matched), over a full mesh of `run.nodes` loopback nodes; the writer and the readers'
/// side are shard tasks when `on_shard`, application threads otherwise.
pub fn run_topic(run: &LocalRun, decl: &Topic, on_shard: bool) -> Result<Summary, RunError> {
    if run.nodes < 2 {
        return Err(RunError::Usage("a run needs at least 2 nodes".into()));
    }
    let nodes = start_mesh(run.nodes, &run.node)?;
    let links = nodes
        .iter()
        .map(|(m, _)| m.connected_peers().len())
        .sum::<usize>()
        / 2;
    let (meshes, receivers): (Vec<Mesh>, Vec<EventReceiver>) = nodes.into_iter().unzip();
    let mut writer = TopicWriter::open(&meshes[0], decl.clone(), run.node.batch_bytes, on_shard)?;
    let readers = meshes[1..]
        .iter()
        .map(|m| m.reader(decl.clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(mesh_err)?;
    let pairs: Vec<_> = readers.iter().map(|r| (writer.guid(), r.guid())).collect();
    let all: Vec<&Mesh> = meshes.iter().collect();
    topics::wait_matched(&all[..1], &pairs, 10)?;
    for (m, p) in meshes[1..].iter().zip(&pairs) {
        topics::wait_matched(&[m], std::slice::from_ref(p), 10)?;
    }
    let bound = QueueBound::new(
        meshes[0].config().max_outbound_queue_bytes,
        2 * links,
        1,
        run.nodes - 1,
        &run.shape,
    );
    let counts_before = topic_counts(&all);
    let bytes_before = topics::bytes_out(&all);
    let reader_bytes_before = topics::bytes_out(&all[1..]);
    let unrouted_before = topics::unrouted(&all);
    let before = Usage::now();
    let stop = Arc::new(AtomicBool::new(false));
    let until = Instant::now() + run.shape.warmup + run.shape.duration + DRAIN;
    let mut counters = Vec::new();
    let mut handles = Vec::new();
    // Node 0's receiver is dropped: it has no reader, so nothing queues for it.
    let reader_nodes = meshes[1..].iter().zip(receivers.into_iter().skip(1));
    for ((m, mut events), r) in reader_nodes.zip(&readers) {
        let live = Arc::new(AtomicU64::new(0));
        counters.push(live.clone());
        let stop = stop.clone();
        let mut state = vec![ReaderState {
            guid: r.guid(),
            topic: decl.name().to_owned(),
            recv: Receiver::new(&run.shape),
            seqs: WriterSeqs::default(),
            expect_writers: 1,
        }];
        handles.push(if on_shard {
            let wanted = Wanted::Samples(state);
            let task = shard_roles::start_receiving(m, wanted, until, live)?;
            ReaderSide::Shard(task, events)
        } else {
            ReaderSide::Thread(std::thread::spawn(move || {
                let foreign =
                    topics::subscribe_samples(&mut events, &mut state, until, &stop, &live);
                (state, foreign)
            }))
        });
    }
    let sent = Arc::new(Live::default());
    let (progress, ticker) = progress_ticker(run.mode, run.quiet, sent.clone(), counters);
    let sampler = RssSampler::start_run(&run.shape, run.nodes);
    let t0 = Instant::now();
    let published = writer.publish(&run.shape, &sent, &stop);
    // The nodes' counters cover the whole writing time (warm-up included) and the drain.
    let writing_s = t0.elapsed().as_secs_f64();
    if published.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    let mut states = Vec::new();
    let mut foreign = 0;
    for h in handles {
        let (s, f) = h.join()?;
        states.extend(s);
        foreign += f;
    }
    let memory = sampler.and_then(|s| s.finish(Some(bound)));
    drop(ticker);
    progress.finish();
    let usage = Usage::now().since(&before);
    let counts = counts_since(&topic_counts(&all), &counts_before);
    let bytes = topics::bytes_out(&all).saturating_sub(bytes_before);
    let reader_bytes = topics::bytes_out(&all[1..]).saturating_sub(reader_bytes_before);
    let unrouted = topics::unrouted(&all).saturating_sub(unrouted_before);
    let mut drops = Drops::default();
    for m in &meshes {
        drops.add(&m.stats().total);
    }
    let suites = crate::shoal::record_suites(&meshes);
    writer.close();
    drop(readers);
    for m in &meshes {
        m.stop();
    }
    let published = published?;
    let report = SampleReport::of(&states, &counts, writing_s, foreign)
        .with_bytes_out(bytes)
        .with_reader_bytes_out(reader_bytes)
        .with_unrouted(unrouted);
    let recvs: Vec<Receiver> = states.into_iter().map(|s| s.recv).collect();
    let mut summary = summarise(
        run,
        if on_shard {
            "shoal-topic-onshard"
        } else {
            "shoal-topic"
        },
        links,
        published,
        &recvs,
        Some(drops),
        usage,
    );
    summary.memory = memory;
    summary.record_suites = suites;
    summary.wire_bytes = report.bytes_out_per_sample.round() as usize;
    summary.samples = Some(report);
    Ok(summary)
}

/// A reader node's receiving side: an application thread or a shard task.
enum ReaderSide {
    Thread(std::thread::JoinHandle<(Vec<ReaderState>, u64)>),
    Shard(ShardReceiver, EventReceiver),
}

impl ReaderSide {
    /// What it received, and the samples of other readers.
    fn join(self) -> Result<(Vec<ReaderState>, u64), RunError> {
        match self {
            ReaderSide::Thread(h) => h.join().map_err(|_| RunError::Panicked),
            ReaderSide::Shard(task, mut events) => {
                let got = task.finish(&mut events)?;
                match got.wanted {
                    Wanted::Samples(s) => Ok((s, got.foreign)),
                    Wanted::Messages { .. } => unreachable!("asked for samples"),
                }
            }
        }
    }
}

/// One size's runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TopicComparison {
    /// Payload bytes.
    pub payload_bytes: usize,
    /// Broadcast A→B.
    pub broadcast: Summary,
    /// Topic samples A→B (one writer, one matched reader).
    pub topic: Summary,
    /// Bare TCP, `u32 length | payload`, each parsed and counted by the receiver.
    pub raw_lp: Summary,
    /// Topic samples/s over broadcast msg/s.
    pub topic_per_broadcast: f64,
    /// Topic samples/s over raw length-prefixed msg/s.
    pub topic_per_raw_lp: f64,
    /// Fan-out: one writer, a reader on each of `fanout_readers` other nodes.
    pub fanout: Option<Summary>,
    /// Reader nodes of the fan-out run.
    pub fanout_readers: usize,
}

fn ratio(a: &Summary, b: &Summary) -> f64 {
    if b.msgs_per_s > 0.0 {
        a.msgs_per_s / b.msgs_per_s
    } else {
        0.0
    }
}

/// For each size: broadcast, topic and raw length-prefixed A→B back to back (interleaved per
/// size, so the three share the machine's state), then the fan-out to `fanout` reader nodes
/// (0: none); the topic runs' writer and readers' side are shard tasks when `on_shard`.
pub fn compare(
    template: &LocalRun,
    sizes: &[usize],
    fanout: usize,
    on_shard: bool,
) -> Result<Vec<TopicComparison>, RunError> {
    let mut out = Vec::new();
    for &size in sizes {
        let mut run = template.clone();
        run.nodes = 2;
        run.shape.size = size;
        run.shape.size_max = size;
        let broadcast = run_shoal(&run)?;
        let topic = run_topic(&run, &bench_topic(), on_shard)?;
        let raw_lp = run_raw_framed(&run, Framing::LengthPrefixed)?;
        let fan = if fanout > 0 {
            run.nodes = fanout + 1;
            Some(run_topic(&run, &bench_topic(), on_shard)?)
        } else {
            None
        };
        out.push(TopicComparison {
            payload_bytes: size,
            topic_per_broadcast: ratio(&topic, &broadcast),
            topic_per_raw_lp: ratio(&topic, &raw_lp),
            broadcast,
            topic,
            raw_lp,
            fanout: fan,
            fanout_readers: fanout,
        });
    }
    Ok(out)
}

/// The reliable benchmark's topic: a reliable keep-all writer and reliable readers.
pub fn reliable_topic() -> Topic {
    bench_topic().reliable().history_keep_all()
}

/// One size's best-effort and reliable runs (`bench --reliable`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReliableComparison {
    /// Payload bytes.
    pub payload_bytes: usize,
    /// Best-effort topic samples A→B (a reliable writer, a best-effort reader).
    pub best_effort: Summary,
    /// Reliable topic samples A→B (a reliable keep-all writer, a reliable reader).
    pub reliable: Summary,
    /// Reliable samples/s over best-effort samples/s.
    pub reliable_per_best_effort: f64,
    /// Bytes the reader's node wrote (its acknowledgements, and its links' own heartbeats)
    /// per sample it delivered, in the reliable run.
    pub ack_bytes_per_sample: f64,
}

/// For each size: best-effort then reliable topic samples A→B, back to back.
pub fn compare_reliable(
    template: &LocalRun,
    sizes: &[usize],
) -> Result<Vec<ReliableComparison>, RunError> {
    let mut out = Vec::new();
    for &size in sizes {
        let mut run = template.clone();
        run.nodes = 2;
        run.shape.size = size;
        run.shape.size_max = size;
        let best_effort = run_topic(&run, &bench_topic(), false)?;
        let reliable = run_topic(&run, &reliable_topic(), false)?;
        let ack = reliable
            .samples
            .as_ref()
            .map_or(0.0, |s| s.reader_bytes_out_per_sample);
        out.push(ReliableComparison {
            payload_bytes: size,
            reliable_per_best_effort: ratio(&reliable, &best_effort),
            ack_bytes_per_sample: ack,
            best_effort,
            reliable,
        });
    }
    Ok(out)
}

/// Prints `bench --reliable` as a markdown table.
pub fn print_reliable_table(rows: &[ReliableComparison]) {
    println!(
        "| payload | best-effort samples/s | reliable samples/s | reliable/best-effort | reliable lost | reliable gaps / reorders | ack bytes/sample |"
    );
    println!("|---|---|---|---|---|---|---|");
    for c in rows {
        let t = c.reliable.samples.clone().unwrap_or_default();
        let (gaps, reorders) = t
            .topics
            .iter()
            .fold((0, 0), |(g, r), row| (g + row.gaps, r + row.reorders));
        println!(
            "| {} B | {:.0} | {:.0} | **{:.2}x** | {} | {gaps} / {reorders} | {:.3} |",
            c.payload_bytes,
            c.best_effort.msgs_per_s,
            c.reliable.msgs_per_s,
            c.reliable_per_best_effort,
            c.reliable.lost,
            c.ack_bytes_per_sample,
        );
    }
    println!();
    println!("Issue 13's target: reliable/best-effort >= 0.85x at 64 B and 1 KiB.");
}

/// Prints the comparison as markdown tables, then the memory table.
pub fn print_table(rows: &[TopicComparison]) {
    println!(
        "| payload | broadcast msg/s | topic samples/s | raw-lp msg/s | topic/broadcast | topic/raw-lp | topic lost | topic gaps / reorders | topic bytes out/sample |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let samples = |s: &Summary| s.samples.clone().unwrap_or_default();
    for c in rows {
        let t = samples(&c.topic);
        let (gaps, reorders) = t
            .topics
            .iter()
            .fold((0, 0), |(g, r), row| (g + row.gaps, r + row.reorders));
        println!(
            "| {} B | {:.0} | {:.0} | {:.0} | **{:.2}x** | **{:.2}x** | {} | {gaps} / {reorders} | {:.1} |",
            c.payload_bytes,
            c.broadcast.msgs_per_s,
            c.topic.msgs_per_s,
            c.raw_lp.msgs_per_s,
            c.topic_per_broadcast,
            c.topic_per_raw_lp,
            c.topic.lost,
            t.bytes_out_per_sample
        );
    }
    if rows.iter().any(|c| c.fanout.is_some()) {
        println!();
        println!(
            "| payload | fan-out reader nodes | delivered samples/s (all readers) | lost | bytes out/sample (all nodes) |"
        );
        println!("|---|---|---|---|---|");
        for c in rows {
            if let Some(f) = &c.fanout {
                println!(
                    "| {} B | {} | {:.0} | {} | {:.1} |",
                    c.payload_bytes,
                    c.fanout_readers,
                    f.msgs_per_s,
                    f.lost,
                    samples(f).bytes_out_per_sample
                );
            }
        }
    }
    if rows
        .first()
        .is_some_and(|c| c.topic.transport.ends_with("onshard"))
    {
        println!();
        println!(
            "Topic runs in shard tasks (`--on-shard`): the writer and each reader's side run on \
             their node's origin shard."
        );
    }
    println!();
    println!(
        "Issue 12's targets: topic/broadcast >= 1.5x at 64 B; topic/raw-lp >= 0.8x at 64 B and \
         >= 0.75x at 1 KiB (raw-lp = bare TCP, `u32 length | payload`, each message parsed and \
         counted by the receiver as the raw baseline does)."
    );
    let mut mem = Vec::new();
    for c in rows {
        mem.push((c.payload_bytes, "broadcast", &c.broadcast));
        mem.push((c.payload_bytes, "topic", &c.topic));
        mem.push((c.payload_bytes, "raw-lp", &c.raw_lp));
        if let Some(f) = &c.fanout {
            mem.push((c.payload_bytes, "fan-out", f));
        }
    }
    crate::bench::print_memory_table(&mem);
}
