//! The demo's topics part: a fresh 3-node loopback mesh with writers and readers on a few
//! topics and partitions, some meant to match and some not. It waits until every same-topic
//! (writer, reader) pair has a verdict from the mesh (in the match table, or reported
//! incompatible), lets the writers write for a while, and reports who matched whom, what did
//! not match and why (as the mesh said it), and per-topic rates from `Mesh::topics()`.
//!
//! Length: the layout, the wait for the mesh's verdicts, the write phase and the report (its
//! rows and text) belong together and come to about 600 lines.
//!
//! **Owns:** the demo's endpoint layout and its report. **Must not touch:** matching (the
//! verdicts are the mesh's, read from its events and snapshots, never computed here).

use crate::demo::{start_mesh, RunError};
use crate::shoal::{NodeArgs, SetupError};
use crate::topic_report::{counts_since, topic_counts, TopicCounts};
use crate::topics::{self, ReaderState, TopicSink, WriterSeqs};
use crate::traffic::{self, Live, Receiver, Shape};
use shoal_mesh::topics::{EndpointGuid, EndpointKind, Reader, Topic, Writer};
use shoal_mesh::{Event, EventReceiver, Mesh};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Nodes of the topics part.
const NODES: usize = 3;
/// Longest wait for every pair's verdict.
const VERDICT_SECS: u64 = 10;
/// Extra time readers wait for end markers after the writers stop.
const DRAIN: Duration = Duration::from_secs(5);

/// One endpoint of the layout.
struct Spec {
    label: &'static str,
    node: usize,
    kind: EndpointKind,
    topic: Topic,
}

/// The layout: a partition pattern that matches one reader and not another, a reliable
/// reader against a best-effort writer, and a type mismatch.
fn layout() -> Vec<Spec> {
    let imu = || Topic::new("sensors/imu", "Imu");
    let vel = || Topic::new("cmd/vel", "Twist");
    let w = EndpointKind::Writer;
    let r = EndpointKind::Reader;
    let spec = |label, node, kind, topic| Spec {
        label,
        node,
        kind,
        topic,
    };
    vec![
        spec("imu-writer@n0", 0, w, imu().partition("robot/*")),
        spec("imu-arm@n1", 1, r, imu().partition("robot/arm")),
        spec("imu-telemetry@n2", 2, r, imu().partition("telemetry")),
        spec("vel-writer@n1", 1, w, vel().best_effort()),
        spec("vel-reader@n0", 0, r, vel()),
        spec("vel-reliable@n2", 2, r, vel().reliable()),
        spec("odom-writer@n2", 2, w, Topic::new("odom", "Odometry")),
        spec("odom-v2@n0", 0, r, Topic::new("odom", "OdometryV2")),
    ]
}

/// One endpoint as reported.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EndpointRow {
    /// Its label (`name@node`).
    pub label: String,
    /// Its node's index.
    pub node: usize,
    /// `writer` or `reader`.
    pub kind: String,
    /// Topic.
    pub topic: String,
    /// Type name.
    pub type_name: String,
    /// Partitions (empty: the default partition).
    pub partitions: Vec<String>,
    /// Reliability kind.
    pub reliability: String,
}

/// A matched pair.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PairRow {
    /// Topic.
    pub topic: String,
    /// The writer's label.
    pub writer: String,
    /// The reader's label.
    pub reader: String,
}

/// A pair the mesh reported incompatible.
#[derive(Debug, Clone, serde::Serialize)]
pub struct IncompatibleRow {
    /// Topic.
    pub topic: String,
    /// The writer's label.
    pub writer: String,
    /// The reader's label.
    pub reader: String,
    /// Every reason, in one line (the mesh's wording).
    pub reasons: String,
    /// The QoS policies responsible.
    pub policies: Vec<String>,
    /// The partitions do not overlap.
    pub partitions: bool,
    /// The types differ.
    pub type_mismatch: bool,
}

/// One topic's rates over the writing time, from the nodes' counters.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TopicRate {
    /// Topic.
    pub topic: String,
    /// Counters summed over the 3 nodes, over the writing time and drain.
    pub counts: TopicCounts,
    /// `counts.written` per second of writing.
    pub written_per_s: f64,
    /// `counts.delivered` per second of writing.
    pub delivered_per_s: f64,
    /// The same counters node by node (index = node).
    pub per_node: Vec<TopicCounts>,
}

/// One reader's samples.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReaderRow {
    /// The reader's label.
    pub reader: String,
    /// Topic.
    pub topic: String,
    /// Writers it matched.
    pub matched_writers: usize,
    /// Writers it received samples from.
    pub writers_seen: usize,
    /// Samples received.
    pub samples: u64,
    /// Sequence gaps over its writers.
    pub gaps: u64,
    /// Samples out of order (or repeated).
    pub reorders: u64,
    /// Samples missing by the payloads' stamps (gaps and tail after the end marker).
    pub lost: u64,
    /// End markers received (one per writer that finished while matched).
    pub end_markers: u64,
}

/// The topics part's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TopicsDemo {
    /// Nodes.
    pub nodes: usize,
    /// Every endpoint.
    pub endpoints: Vec<EndpointRow>,
    /// Matched pairs.
    pub matched: Vec<PairRow>,
    /// Pairs that did not match, with the mesh's reasons.
    pub incompatible: Vec<IncompatibleRow>,
    /// Seconds the writers wrote.
    pub window_s: f64,
    /// Per topic.
    pub topics: Vec<TopicRate>,
    /// Samples the nodes dropped for a writer they had no route for (node counter
    /// `dropped_unrouted_samples`, all nodes, over the writing time).
    pub unrouted_samples: u64,
    /// Per writer.
    pub writers: Vec<WriterRow>,
    /// Per reader.
    pub readers: Vec<ReaderRow>,
}

/// One writer's run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WriterRow {
    /// The writer's label.
    pub writer: String,
    /// Topic.
    pub topic: String,
    /// Data samples it wrote (its end marker not counted).
    pub sent: u64,
    /// Readers it matched.
    pub matched_readers: usize,
}

enum Handle {
    W(Box<Writer>),
    R(Reader),
}

impl Handle {
    fn guid(&self) -> EndpointGuid {
        match self {
            Handle::W(w) => w.guid(),
            Handle::R(r) => r.guid(),
        }
    }
}

fn mesh_err(e: shoal_mesh::MeshError) -> RunError {
    RunError::Setup(SetupError::Mesh(e))
}

/// Runs the topics part: nodes from `template`, writers writing 64 B samples as fast as
/// backpressure allows for `duration`.
pub fn run(template: &NodeArgs, duration: Duration, quiet: bool) -> Result<TopicsDemo, RunError> {
    let specs = layout();
    let nodes = start_mesh(NODES, template)?;
    let (meshes, mut receivers): (Vec<Mesh>, Vec<EventReceiver>) = nodes.into_iter().unzip();
    let mut handles = Vec::new();
    for s in &specs {
        let m = &meshes[s.node];
        handles.push(match s.kind {
            EndpointKind::Writer => {
                Handle::W(Box::new(m.writer(s.topic.clone()).map_err(mesh_err)?))
            }
            EndpointKind::Reader => Handle::R(m.reader(s.topic.clone()).map_err(mesh_err)?),
        });
    }
    let guids: Vec<EndpointGuid> = handles.iter().map(Handle::guid).collect();
    let label = |g: &EndpointGuid| -> String {
        guids.iter().position(|x| x == g).map_or_else(
            || shoal_mesh::topics::guid_hex(g),
            |i| specs[i].label.into(),
        )
    };
    // Every same-topic (writer, reader) pair, by index into `specs`.
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for (w, ws) in specs.iter().enumerate() {
        for (r, rs) in specs.iter().enumerate() {
            if ws.kind == EndpointKind::Writer
                && rs.kind == EndpointKind::Reader
                && rs.topic.name() == ws.topic.name()
            {
                pairs.push((w, r));
            }
        }
    }
    if !quiet {
        eprintln!(
            "topics: {} endpoints on {NODES} nodes; waiting for the mesh's verdict on {} pairs",
            specs.len(),
            pairs.len()
        );
    }
    let (matched, incompatible) = verdicts(&meshes, &mut receivers, &specs, &guids, &pairs)?;
    let matched_rows = matched
        .iter()
        .map(|&(w, r)| PairRow {
            topic: specs[w].topic.name().into(),
            writer: specs[w].label.into(),
            reader: specs[r].label.into(),
        })
        .collect();
    let incompatible_rows: Vec<IncompatibleRow> = incompatible
        .iter()
        .map(|(w, r, topic, reasons)| IncompatibleRow {
            topic: topic.clone(),
            writer: label(w),
            reader: label(r),
            reasons: reasons.to_string(),
            policies: reasons
                .policies()
                .iter()
                .map(|p| format!("{p:?}"))
                .collect(),
            partitions: reasons.partitions(),
            type_mismatch: reasons.type_mismatch(),
        })
        .collect();

    // Write: one thread per writer, one per node for its readers.
    let all: Vec<&Mesh> = meshes.iter().collect();
    let counts_before = topic_counts(&all);
    let per_node_before: Vec<_> = meshes.iter().map(|m| topic_counts(&[m])).collect();
    let unrouted_before = topics::unrouted(&all);
    let shape = Shape {
        size: 64,
        size_max: 64,
        rate: 0.0,
        duration,
        warmup: Duration::ZERO,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let until = Instant::now() + duration + DRAIN;
    let mut reader_threads = Vec::new();
    for (node, mut events) in receivers.into_iter().enumerate() {
        let mut states: Vec<ReaderState> = (0..specs.len())
            .filter(|&i| specs[i].node == node && specs[i].kind == EndpointKind::Reader)
            .map(|i| ReaderState {
                guid: guids[i],
                topic: specs[i].topic.name().into(),
                recv: Receiver::new(&shape),
                seqs: WriterSeqs::default(),
                expect_writers: matched.iter().filter(|&&(_, r)| r == i).count(),
            })
            .collect();
        let stop = stop.clone();
        reader_threads.push(std::thread::spawn(move || {
            let live = AtomicU64::new(0);
            topics::subscribe_samples(&mut events, &mut states, until, &stop, &live);
            states
        }));
    }
    let batch = template.batch_bytes;
    let mut writer_threads = Vec::new();
    let mut writer_index = Vec::new();
    let mut kept = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        match h {
            Handle::W(w) => {
                writer_index.push(i);
                let stop = stop.clone();
                writer_threads.push(std::thread::spawn(move || {
                    let mut sink = TopicSink::new(*w, batch);
                    let live = Live::default();
                    let rep = traffic::publish(&mut sink, &shape, rand::random(), &live, &stop);
                    (rep, sink)
                }));
            }
            Handle::R(r) => kept.push(r),
        }
    }
    let mut window_s = 0.0f64;
    let mut failed = None;
    let mut writers = Vec::new();
    let mut sinks = Vec::new();
    for (t, i) in writer_threads.into_iter().zip(writer_index) {
        let (rep, sink) = t.join().map_err(|_| RunError::Panicked)?;
        sinks.push(sink);
        match rep {
            Ok(rep) => {
                window_s = window_s.max(rep.window.as_secs_f64());
                writers.push(WriterRow {
                    writer: specs[i].label.into(),
                    topic: specs[i].topic.name().into(),
                    sent: rep.sent,
                    matched_readers: matched.iter().filter(|&&(w, _)| w == i).count(),
                });
            }
            Err(e) => failed = Some(e),
        }
    }
    if failed.is_some() {
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let mut states = Vec::new();
    for t in reader_threads {
        states.extend(t.join().map_err(|_| RunError::Panicked)?);
    }
    let counts = counts_since(&topic_counts(&all), &counts_before);
    let per_node: Vec<Vec<(String, TopicCounts)>> = meshes
        .iter()
        .zip(&per_node_before)
        .map(|(m, b)| counts_since(&topic_counts(&[m]), b))
        .collect();
    let unrouted = topics::unrouted(&all).saturating_sub(unrouted_before);
    // Writers go only now: a writer dropped while its last samples are in flight is
    // withdrawn, and a receiving node drops samples of a writer it no longer routes
    // (`dropped_unrouted_samples`).
    drop(sinks);
    drop(kept);
    for m in &meshes {
        m.stop();
    }
    if let Some(e) = failed {
        return Err(e.into());
    }
    let per_s = |n: u64| {
        if window_s > 0.0 {
            n as f64 / window_s
        } else {
            0.0
        }
    };
    let rates = counts
        .into_iter()
        .map(|(topic, counts)| TopicRate {
            per_node: per_node
                .iter()
                .map(|n| {
                    n.iter()
                        .find(|(t, _)| *t == topic)
                        .map(|(_, c)| *c)
                        .unwrap_or_default()
                })
                .collect(),
            topic,
            written_per_s: per_s(counts.written),
            delivered_per_s: per_s(counts.delivered),
            counts,
        })
        .collect();
    let readers = states
        .iter()
        .map(|s| {
            let t = s.seqs.total();
            ReaderRow {
                reader: label(&s.guid),
                topic: s.topic.clone(),
                matched_writers: s.expect_writers,
                writers_seen: s.seqs.writers().len(),
                samples: t.samples,
                gaps: t.gaps,
                reorders: t.reorders,
                lost: s.recv.loss.totals().lost,
                end_markers: s.recv.loss.totals().ended,
            }
        })
        .collect();
    let endpoints = specs
        .iter()
        .map(|s| EndpointRow {
            label: s.label.into(),
            node: s.node,
            kind: match s.kind {
                EndpointKind::Writer => "writer".into(),
                EndpointKind::Reader => "reader".into(),
            },
            topic: s.topic.name().into(),
            type_name: s.topic.type_name().into(),
            partitions: s
                .topic
                .validate(s.kind)
                .map(|v| v.partitions)
                .unwrap_or_default(),
            reliability: format!("{:?}", s.topic.qos_for(s.kind).reliability.kind),
        })
        .collect();
    Ok(TopicsDemo {
        nodes: NODES,
        endpoints,
        matched: matched_rows,
        incompatible: incompatible_rows,
        window_s,
        topics: rates,
        unrouted_samples: unrouted,
        writers,
        readers,
    })
}

type Incompatible = (
    EndpointGuid,
    EndpointGuid,
    String,
    shoal_mesh::topics::Reasons,
);

/// The matched pairs (by spec index) and the reported incompatibilities.
type Verdicts = (Vec<(usize, usize)>, Vec<Incompatible>);

/// Waits until each pair is in the match table of both its nodes or was reported
/// incompatible by one of them; returns the matched pairs (by spec index) and the reported
/// incompatibilities (deduplicated).
fn verdicts(
    meshes: &[Mesh],
    receivers: &mut [EventReceiver],
    specs: &[Spec],
    guids: &[EndpointGuid],
    pairs: &[(usize, usize)],
) -> Result<Verdicts, RunError> {
    let deadline = Instant::now() + Duration::from_secs(VERDICT_SECS);
    let mut incompatible: Vec<Incompatible> = Vec::new();
    loop {
        for rx in receivers.iter_mut() {
            while let Some(ev) = rx.try_recv() {
                if let Event::Incompatible {
                    writer,
                    reader,
                    topic,
                    reasons,
                } = ev
                {
                    if !incompatible
                        .iter()
                        .any(|(w, r, _, _)| *w == writer && *r == reader)
                    {
                        incompatible.push((writer, reader, topic, reasons));
                    }
                }
            }
        }
        let snaps: Vec<_> = meshes.iter().map(Mesh::topics).collect();
        let mut matched = Vec::new();
        let mut open = 0;
        for &(w, r) in pairs {
            let key = (guids[w], guids[r]);
            let in_table = |n: usize| snaps[n].matches().contains(&key);
            if in_table(specs[w].node) && in_table(specs[r].node) {
                matched.push((w, r));
            } else if !incompatible.iter().any(|(a, b, _, _)| (*a, *b) == key) {
                open += 1;
            }
        }
        if open == 0 {
            return Ok((matched, incompatible));
        }
        if Instant::now() >= deadline {
            return Err(RunError::Setup(SetupError::Timeout {
                secs: VERDICT_SECS,
                what: format!("the mesh's verdict on {open} topic pair(s)"),
            }));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl TopicsDemo {
    /// Prints [`TopicsDemo::text`].
    pub fn print(&self) {
        print!("{}", self.text());
    }

    /// The human-readable report.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let writers = self.endpoints.iter().filter(|e| e.kind == "writer").count();
        let _ = writeln!(
            out,
            "== topics: {} nodes, {} writers and {} readers on {} topics",
            self.nodes,
            writers,
            self.endpoints.len() - writers,
            self.topics.len()
        );
        for e in &self.endpoints {
            let _ = writeln!(
                out,
                "   {:<17} {:<6} {:<12} type {:<11} partitions {:<14} {}",
                e.label,
                e.kind,
                e.topic,
                e.type_name,
                format!("{:?}", e.partitions),
                e.reliability
            );
        }
        let _ = writeln!(out, "   matched (writer -> reader):");
        for p in &self.matched {
            let _ = writeln!(out, "     {:<12} {} -> {}", p.topic, p.writer, p.reader);
        }
        let _ = writeln!(out, "   did not match, as the mesh reported:");
        for i in &self.incompatible {
            let _ = writeln!(
                out,
                "     {:<12} {} -> {}: {}",
                i.topic, i.writer, i.reader, i.reasons
            );
        }
        let _ = writeln!(
            out,
            "   per topic over {:.2} s of writing 64 B samples as fast as backpressure allows \
             (Mesh::topics() counters, all nodes):",
            self.window_s
        );
        for t in &self.topics {
            let c = &t.counts;
            let _ = writeln!(
                out,
                "     {:<12} written {} ({:.0}/s) | delivered {} ({:.0} samples/s) | forwarded {} \
                 | missed {} | dropped duplicate {} queue_full {} no_route {} slow_link {} wrong_link {}",
                t.topic,
                c.written,
                t.written_per_s,
                c.delivered,
                t.delivered_per_s,
                c.forwarded,
                c.missed,
                c.dropped_duplicate,
                c.dropped_queue_full,
                c.dropped_no_route,
                c.dropped_slow_link,
                c.dropped_wrong_link
            );
        }
        if self.unrouted_samples > 0 {
            let _ = writeln!(
                out,
                "     samples dropped for want of a writer's route (all nodes): {}",
                self.unrouted_samples
            );
        }
        let _ = writeln!(out, "   per writer:");
        for w in &self.writers {
            let _ = writeln!(
                out,
                "     {:<17} {:<12} wrote {} samples, matched {} reader(s)",
                w.writer, w.topic, w.sent, w.matched_readers
            );
        }
        let _ = writeln!(out, "   per reader:");
        for r in &self.readers {
            let _ = writeln!(
                out,
                "     {:<17} {:<12} {} samples from {} of {} matched writer(s) | gaps {} | \
                 reorders {} | lost {} | end markers {}",
                r.reader,
                r.topic,
                r.samples,
                r.writers_seen,
                r.matched_writers,
                r.gaps,
                r.reorders,
                r.lost,
                r.end_markers
            );
        }
        out
    }
}
