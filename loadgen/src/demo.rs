//! `demo`: a small mesh in one process on loopback, one publisher and the other nodes
//! subscribing, with everything a newcomer wants to see; `--compare` adds the same shape over
//! raw TCP.

use crate::raw::{self, RawSink};
use crate::report::{Drops, NodeInfo, Summary};
use crate::rss::{QueueBound, RssSampler};
use crate::shoal::{self, MeshSink, NodeArgs, SetupError};
use crate::traffic::{self, Live, Progress, PubReport, Receiver, Shape, SinkError};
use crate::usage::Usage;
use shoal_mesh::{EventReceiver, Mesh};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A node could not be set up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The publisher's transport failed.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// A raw socket failed.
    #[error("raw tcp: {0}")]
    Io(#[from] std::io::Error),
    /// A raw stream carried something else than Data frames.
    #[error("raw tcp: {0}")]
    Frame(#[from] raw::FrameError),
    /// A worker thread panicked.
    #[error("a worker thread panicked")]
    Panicked,
    /// The arguments make no sense.
    #[error("{0}")]
    Usage(String),
    /// A raw TCP peer closed its connection.
    #[error("raw tcp: the peer closed the connection")]
    PeerClosed,
}

/// Extra time subscribers wait for the end markers after the publisher's run.
const DRAIN: Duration = Duration::from_secs(5);

/// Settings of an in-process run.
#[derive(Debug, Clone)]
pub struct LocalRun {
    /// Nodes (1 publisher, the rest subscribe).
    pub nodes: usize,
    /// Traffic shape.
    pub shape: Shape,
    /// Template for every node's settings (listen address and peers are set per node).
    pub node: NodeArgs,
    /// Hide the progress line.
    pub quiet: bool,
    /// Label in the summary.
    pub mode: &'static str,
}

fn collect_subscribers(
    handles: Vec<std::thread::JoinHandle<Receiver>>,
) -> Result<Vec<Receiver>, RunError> {
    handles
        .into_iter()
        .map(|h| h.join().map_err(|_| RunError::Panicked))
        .collect()
}

pub(crate) fn summarise(
    run: &LocalRun,
    transport: &str,
    links: usize,
    report: PubReport,
    receivers: &[Receiver],
    drops: Option<Drops>,
    usage: Usage,
) -> Summary {
    let mut s = Summary {
        mode: run.mode.into(),
        transport: transport.into(),
        nodes: run.nodes,
        links,
        payload_bytes: run.shape.size,
        payload_bytes_max: run.shape.size_max.max(run.shape.size),
        wire_bytes: run.shape.size + shoal_mesh::wire::DATA_HEADER_LEN,
        sent: report.sent,
        publish_errors: report.refused,
        drops,
        usage,
        ..Summary::default()
    };
    if report.window > Duration::ZERO {
        s.sent_msgs_per_s = report.sent_in_window as f64 / report.window.as_secs_f64();
    }
    let mut lat = crate::latency_hist::Latency::default();
    let mut window = 0.0f64;
    for r in receivers {
        let t = r.loss.totals();
        s.loss.publishers = s.loss.publishers.max(t.publishers);
        s.loss.received += t.received;
        s.loss.lost += t.lost;
        s.loss.duplicates += t.duplicates;
        s.loss.late += t.late;
        s.loss.gaps += t.gaps;
        s.loss.too_old += t.too_old;
        s.loss.ended += t.ended;
        s.loss.untracked += t.untracked;
        // A subscriber that never heard from the publisher lost everything it sent.
        let missing = if t.publishers == 0 { report.sent } else { 0 };
        s.lost += t.lost + missing;
        s.delivered += t.received;
        let (n, bytes, secs) = r.window();
        if secs > 0.0 {
            s.msgs_per_s += n as f64 / secs;
            s.mb_per_s += bytes as f64 / secs / 1e6;
        }
        window = window.max(secs);
        lat.merge(&r.latency);
    }
    s.window_s = window;
    // A subscriber reports what it saw, not what it was told.
    if let Some(r) = receivers.iter().find(|r| r.sizes.1 > 0) {
        s.payload_bytes = r.sizes.0;
        s.payload_bytes_max = r.sizes.1;
        s.wire_bytes = r.sizes.0 + shoal_mesh::wire::DATA_HEADER_LEN;
    }
    s.latency = lat.percentiles();
    s.histogram = lat;
    s
}

pub(crate) fn progress_ticker(
    label: &str,
    quiet: bool,
    sent: Arc<Live>,
    received: Vec<Arc<AtomicU64>>,
) -> (Arc<Progress>, traffic::Ticker) {
    let progress = Arc::new(Progress::new(label, quiet));
    let p = progress.clone();
    let start = Instant::now();
    let ticker = traffic::every_quarter_second(move || {
        let secs = start.elapsed().as_secs_f64().max(1e-3);
        let s = sent.count.load(Ordering::Relaxed);
        let r: u64 = received.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        p.update(format!(
            "sent {s} ({:.0}/s) | received {r} ({:.0}/s)",
            s as f64 / secs,
            r as f64 / secs
        ));
    });
    (progress, ticker)
}

/// Starts `n` loopback nodes, each listing every earlier node as a static peer (a full mesh),
/// and waits until every node is connected to every other.
pub fn start_mesh(n: usize, template: &NodeArgs) -> Result<Vec<(Mesh, EventReceiver)>, SetupError> {
    let mut nodes: Vec<(Mesh, EventReceiver)> = Vec::with_capacity(n);
    for _ in 0..n {
        let mut args = template.clone();
        args.static_peers = nodes
            .iter()
            .map(|(m, _)| format!("127.0.0.1:{}", m.listen_port()))
            .collect();
        nodes.push(args.start()?);
    }
    shoal::wait_for(10, "every node connected to every other", || {
        nodes
            .iter()
            .all(|(m, _)| m.connected_peers().len() + 1 >= n)
    })?;
    Ok(nodes)
}

/// Node 0 publishes, nodes 1.. subscribe, over Shoal.
pub fn run_shoal(run: &LocalRun) -> Result<Summary, RunError> {
    if run.nodes < 2 {
        return Err(RunError::Usage("a run needs at least 2 nodes".into()));
    }
    let nodes = start_mesh(run.nodes, &run.node)?;
    let links = nodes
        .iter()
        .map(|(m, _)| m.connected_peers().len())
        .sum::<usize>()
        / 2;
    let ids: Vec<_> = nodes.iter().map(|(m, _)| m.id()).collect();
    let topology: Vec<NodeInfo> = nodes
        .iter()
        .enumerate()
        .map(|(index, (m, _))| {
            let peers = m.connected_peers();
            NodeInfo {
                index,
                id: m.id().to_string(),
                port: m.listen_port(),
                linked_to: (0..ids.len())
                    .filter(|&j| peers.contains(&ids[j]))
                    .collect(),
            }
        })
        .collect();
    let (meshes, receivers): (Vec<Mesh>, Vec<EventReceiver>) = nodes.into_iter().unzip();
    // Each link has an outbound queue at both ends, and both ends are in this process.
    let bound = QueueBound::new(
        meshes[0].config().max_outbound_queue_bytes,
        2 * links,
        1,
        run.nodes - 1,
        &run.shape,
    );
    let before = Usage::now();
    let stop = Arc::new(AtomicBool::new(false));
    let until = Instant::now() + run.shape.warmup + run.shape.duration + DRAIN;
    let mut counters = Vec::new();
    let mut handles = Vec::new();
    // Node 0's own receiver is dropped: it does not subscribe, so nothing queues for it.
    for mut events in receivers.into_iter().skip(1) {
        let live = Arc::new(AtomicU64::new(0));
        counters.push(live.clone());
        let stop = stop.clone();
        let shape = run.shape;
        handles.push(std::thread::spawn(move || {
            let mut r = Receiver::new(&shape);
            shoal::subscribe(&mut events, &mut r, 1, until, &stop, &live);
            r
        }));
    }
    let sent = Arc::new(Live::default());
    let (progress, ticker) = progress_ticker(run.mode, run.quiet, sent.clone(), counters);
    let mut sink = MeshSink::broadcast(&meshes[0], run.node.batch_bytes);
    let sampler = RssSampler::start_run(&run.shape, run.nodes);
    let published = traffic::publish(&mut sink, &run.shape, rand::random(), &sent, &stop);
    if published.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    let subscribers = collect_subscribers(handles);
    let memory = sampler.and_then(|s| s.finish(Some(bound)));
    drop(ticker);
    progress.finish();
    let usage = Usage::now().since(&before);
    let mut drops = Drops::default();
    for m in &meshes {
        drops.add(&m.stats().total);
    }
    let suites = shoal::record_suites(&meshes);
    let (mut records, mut written) = (0, 0);
    for m in &meshes {
        let t = m.stats().total;
        records += t.records_sealed;
        written += t.bytes_out;
    }
    for m in &meshes {
        m.stop();
    }
    let mut summary = summarise(
        run,
        "shoal",
        links,
        published?,
        &subscribers?,
        Some(drops),
        usage,
    );
    summary.topology = topology;
    summary.record_suites = suites;
    summary.records_sealed = records;
    summary.bytes_written = written;
    summary.memory = memory;
    Ok(summary)
}

/// The same shape over raw TCP: one publisher thread writing every frame to a connection per
/// subscriber (as a broadcast to its neighbours), one reader thread per subscriber.
pub fn run_raw(run: &LocalRun) -> Result<Summary, RunError> {
    run_raw_framed(run, raw::Framing::Data)
}

/// [`run_raw`] with the messages framed as `framing` (transport label `framing.label()`).
pub fn run_raw_framed(run: &LocalRun, framing: raw::Framing) -> Result<Summary, RunError> {
    if run.nodes < 2 {
        return Err(RunError::Usage("a run needs at least 2 nodes".into()));
    }
    let before = Usage::now();
    let stop = Arc::new(AtomicBool::new(false));
    let until = Instant::now() + run.shape.warmup + run.shape.duration + DRAIN;
    let mut conns = Vec::new();
    let mut counters = Vec::new();
    let mut handles = Vec::new();
    for _ in 1..run.nodes {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        conns.push(TcpStream::connect(listener.local_addr()?)?);
        let (stream, _) = listener.accept()?;
        let live = Arc::new(AtomicU64::new(0));
        counters.push(live.clone());
        let stop = stop.clone();
        let shape = run.shape;
        handles.push(std::thread::spawn(
            move || -> Result<Receiver, raw::FrameError> {
                let mut r = Receiver::new(&shape);
                raw::subscribe_framed(stream, framing, &mut r, 1, until, &stop, &live)?;
                Ok(r)
            },
        ));
    }
    let sent = Arc::new(Live::default());
    let (progress, ticker) = progress_ticker(run.mode, run.quiet, sent.clone(), counters);
    let mut sink = RawSink::with_framing(conns, framing);
    let sampler = RssSampler::start_run(&run.shape, run.nodes);
    let published = traffic::publish(&mut sink, &run.shape, rand::random(), &sent, &stop);
    if published.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    let mut subscribers = Vec::new();
    for h in handles {
        subscribers.push(h.join().map_err(|_| RunError::Panicked)??);
    }
    let memory = sampler.and_then(|s| s.finish(None));
    drop(sink);
    drop(ticker);
    progress.finish();
    let usage = Usage::now().since(&before);
    let mut summary = summarise(
        run,
        framing.label(),
        run.nodes - 1,
        published?,
        &subscribers,
        None,
        usage,
    );
    summary.memory = memory;
    if framing == raw::Framing::LengthPrefixed {
        summary.wire_bytes = summary.payload_bytes + shoal_mesh::wire::LENGTH_PREFIX_LEN;
    }
    Ok(summary)
}
