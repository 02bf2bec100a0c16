//! The roles of multi-process and multi-host runs: `pub`, `sub` and `relay`, over Shoal or
//! (`--raw`) over bare TCP. Every role is bounded in time and stops by itself.

use crate::demo::{progress_ticker, summarise, LocalRun, RunError};
use crate::metrics::MetricsServer;
use crate::raw::{self, RawSink};
use crate::report::{Drops, Summary};
use crate::rss::{QueueBound, RssSampler};
use crate::shard_roles::{self, TopicWriter, Wanted};
use crate::shoal::{self, MeshSink, NodeArgs, SetupError};
use crate::topic_report::{counts_since, topic_counts, SampleReport};
use crate::topics::{self, ReaderState, TopicArgs, WriterSeqs};
use crate::traffic::{self, Live, PubReport, Receiver, Shape};
use crate::usage::Usage;
use shoal_mesh::Mesh;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which role this process plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Publishes the traffic shape.
    Pub,
    /// Receives and measures.
    Sub,
    /// Only forwards (a mesh node with no application).
    Relay,
}

/// Settings of a role run.
#[derive(Debug, Clone)]
pub struct RoleRun {
    /// The role.
    pub role: Role,
    /// Traffic shape (the subscriber uses its warm-up and bounds).
    pub shape: Shape,
    /// Node settings.
    pub node: NodeArgs,
    /// Peers to wait for before publishing (publisher) or to count as connected.
    pub wait_peers: usize,
    /// Subscriber: stop after this many publishers sent their end marker.
    pub publishers: usize,
    /// Extra time after warm-up + duration (subscriber and relay), so late starters fit.
    pub linger: Duration,
    /// Over raw TCP instead of Shoal.
    pub raw: bool,
    /// The raw stream's framing.
    pub framing: raw::Framing,
    /// The application's side in a shard task ([`crate::shard_roles`]).
    pub on_shard: bool,
    /// Hide the progress line.
    pub quiet: bool,
    /// Serve the node's counters in the Prometheus text format here.
    pub metrics: Option<std::net::SocketAddr>,
    /// Topic mode (`--topic`): a writer (pub) or readers (sub) instead of broadcasts.
    pub topic: TopicArgs,
}

impl RoleRun {
    fn local(&self, mode: &'static str) -> LocalRun {
        LocalRun {
            nodes: 1,
            shape: self.shape,
            node: self.node.clone(),
            quiet: self.quiet,
            mode,
        }
    }

    fn serve_metrics(&self, mesh: &Mesh) -> Result<Option<MetricsServer>, RunError> {
        match self.metrics {
            Some(addr) => Ok(Some(crate::metrics::serve_mesh(addr, mesh)?)),
            None => Ok(None),
        }
    }

    /// `base`, with `-onshard` when the application's side is a shard task (so its rows
    /// do not read as the thread API's).
    fn transport(&self, base: &'static str) -> &'static str {
        match (self.on_shard, base) {
            (false, b) => b,
            (true, "shoal-topic") => "shoal-topic-onshard",
            (true, _) => "shoal-onshard",
        }
    }

    fn bound(&self) -> Instant {
        Instant::now() + self.shape.warmup + self.shape.duration + self.linger
    }
}

/// Runs the role; returns its summary.
pub fn run(r: &RoleRun) -> Result<Summary, RunError> {
    if r.topic.enabled() {
        return match (r.role, r.raw) {
            (_, true) => Err(RunError::Usage(
                "--topic is Shoal's: raw TCP has no topics".into(),
            )),
            (Role::Pub, false) if r.topic.topics.len() > 1 => Err(RunError::Usage(
                "pub opens one writer: give one --topic".into(),
            )),
            (Role::Pub, false) => topic_pub(r),
            (Role::Sub, false) => topic_sub(r),
            (Role::Relay, false) => Err(RunError::Usage(
                "relay opens no endpoint (it forwards the samples of every topic): drop --topic"
                    .into(),
            )),
        };
    }
    if r.on_shard && r.role == Role::Relay {
        return Err(RunError::Usage(
            "relay runs no application code: drop --on-shard".into(),
        ));
    }
    match (r.role, r.raw) {
        (Role::Pub, false) => shoal_pub(r),
        (Role::Sub, false) => shoal_sub(r),
        (Role::Relay, false) => shoal_relay(r),
        (Role::Pub, true) => raw_pub(r),
        (Role::Sub, true) => raw_sub(r),
        (Role::Relay, true) => Err(RunError::Usage(
            "relay has no raw TCP form: raw TCP connects publisher and subscriber directly".into(),
        )),
    }
}

/// Says where this node listens, on stderr, so scripts can start its peers.
fn ready(role: &str, mesh: &Mesh, r: &RoleRun) {
    eprintln!(
        "{role} ready: id={} listen={}",
        mesh.id(),
        std::net::SocketAddr::new(r.node.listen.ip(), mesh.listen_port())
    );
}

fn node_drops(m: &Mesh) -> Drops {
    let mut d = Drops::default();
    d.add(&m.stats().total);
    d
}

fn with_send_rate(mut s: Summary, rep: &PubReport, size: usize) -> Summary {
    s.window_s = rep.window.as_secs_f64();
    if rep.window > Duration::ZERO {
        s.mb_per_s = rep.sent_in_window as f64 * size as f64 / rep.window.as_secs_f64() / 1e6;
    }
    s
}

fn wait_peers(m: &Mesh, n: usize, deadline: Instant) -> Result<(), RunError> {
    let secs = deadline
        .saturating_duration_since(Instant::now())
        .as_secs()
        .max(1);
    shoal::wait_for(secs, &format!("{n} connected peer(s)"), || {
        m.connected_peers().len() >= n
    })?;
    Ok(())
}

fn shoal_pub(r: &RoleRun) -> Result<Summary, RunError> {
    let (mesh, events) = r.node.start()?;
    // The publisher does not subscribe: nothing should queue for it.
    drop(events);
    let _metrics = r.serve_metrics(&mesh)?;
    ready("pub", &mesh, r);
    wait_peers(
        &mesh,
        r.wait_peers.max(1),
        Instant::now() + Duration::from_secs(30),
    )?;
    // Counted now: subscribers leave as soon as they have the end marker.
    let links = mesh.connected_peers().len();
    let before = Usage::now();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(Live::default());
    let (progress, ticker) = progress_ticker("pub", r.quiet, sent.clone(), Vec::new());
    // One node in this process: this is the sender's RSS alone.
    let sampler = RssSampler::start_run(&r.shape, 1);
    let rep = if r.on_shard {
        shard_roles::publish_broadcasts(&mesh, r.shape, sent.clone(), stop.clone())
    } else {
        let mut sink = MeshSink::broadcast(&mesh, r.node.batch_bytes);
        traffic::publish(&mut sink, &r.shape, rand::random(), &sent, &stop).map_err(Into::into)
    };
    let bound = QueueBound::new(
        mesh.config().max_outbound_queue_bytes,
        links,
        1,
        0,
        &r.shape,
    );
    let memory = sampler.and_then(|s| s.finish(Some(bound)));
    drop(ticker);
    progress.finish();
    let usage = Usage::now().since(&before);
    let drops = node_drops(&mesh);
    let suites = shoal::record_suites([&mesh]);
    mesh.stop();
    let rep = rep?;
    let mut s = with_send_rate(
        summarise(
            &r.local("pub"),
            r.transport("shoal"),
            links,
            rep,
            &[],
            Some(drops),
            usage,
        ),
        &rep,
        r.shape.size,
    );
    s.memory = memory;
    s.record_suites = suites;
    Ok(s)
}

fn shoal_sub(r: &RoleRun) -> Result<Summary, RunError> {
    let (mesh, mut events) = r.node.start()?;
    let _metrics = r.serve_metrics(&mesh)?;
    let live = Arc::new(AtomicU64::new(0));
    let mut recv = Receiver::new(&r.shape);
    let on_shard = if r.on_shard {
        let wanted = Wanted::Messages {
            recv: Box::new(recv),
            publishers: r.publishers,
        };
        recv = Receiver::new(&r.shape);
        Some(shard_roles::start_receiving(
            &mesh,
            wanted,
            r.bound(),
            live.clone(),
        )?)
    } else {
        None
    };
    ready("sub", &mesh, r);
    let before = Usage::now();
    let stop = AtomicBool::new(false);
    let (progress, ticker) = progress_ticker(
        "sub",
        r.quiet,
        Arc::new(Live::default()),
        vec![live.clone()],
    );
    match on_shard {
        Some(task) => {
            if let Wanted::Messages { recv: got, .. } = task.finish(&mut events)?.wanted {
                recv = *got;
            }
        }
        None => shoal::subscribe(
            &mut events,
            &mut recv,
            r.publishers,
            r.bound(),
            &stop,
            &live,
        ),
    }
    drop(ticker);
    progress.finish();
    let usage = Usage::now().since(&before);
    let links = mesh.connected_peers().len();
    let drops = node_drops(&mesh);
    let suites = shoal::record_suites([&mesh]);
    mesh.stop();
    let mut s = summarise(
        &r.local("sub"),
        r.transport("shoal"),
        links,
        PubReport::default(),
        &[recv],
        Some(drops),
        usage,
    );
    s.record_suites = suites;
    Ok(s)
}

fn shoal_relay(r: &RoleRun) -> Result<Summary, RunError> {
    let (mesh, events) = r.node.start()?;
    drop(events);
    let _metrics = r.serve_metrics(&mesh)?;
    ready("relay", &mesh, r);
    let before = Usage::now();
    let end = r.bound();
    let progress = crate::traffic::Progress::new("relay", r.quiet);
    let mut links = 0;
    while Instant::now() < end {
        links = links.max(mesh.connected_peers().len());
        let t = mesh.stats().total;
        progress.update(format!(
            "peers {} | frames in {} | queued out {} | dropped dup {} full {}",
            mesh.connected_peers().len(),
            t.frames_in,
            t.frames_queued,
            t.dropped_duplicate,
            t.dropped_queue_full
        ));
        std::thread::sleep(Duration::from_millis(250));
    }
    progress.finish();
    let usage = Usage::now().since(&before);
    let drops = node_drops(&mesh);
    let suites = shoal::record_suites([&mesh]);
    let total = mesh.stats().total;
    mesh.stop();
    let mut s = summarise(
        &r.local("relay"),
        "shoal",
        links,
        PubReport::default(),
        &[],
        Some(drops),
        usage,
    );
    s.window_s = (r.shape.warmup + r.shape.duration + r.linger).as_secs_f64();
    s.frames_in = total.frames_in;
    s.frames_out = total.frames_queued;
    s.record_suites = suites;
    Ok(s)
}

fn mesh_err(e: shoal_mesh::MeshError) -> RunError {
    RunError::Setup(SetupError::Mesh(e))
}

/// `pub --topic`: one writer; waits for `--wait-peers` peers and as many matched readers.
fn topic_pub(r: &RoleRun) -> Result<Summary, RunError> {
    let (mesh, events) = r.node.start()?;
    drop(events);
    let _metrics = r.serve_metrics(&mesh)?;
    let decl = r.topic.declaration(&r.topic.topics[0]);
    let mut writer = TopicWriter::open(&mesh, decl, r.node.batch_bytes, r.on_shard)?;
    ready("pub", &mesh, r);
    let deadline = Instant::now() + Duration::from_secs(30);
    let want = r.wait_peers.max(1);
    wait_peers(&mesh, want, deadline)?;
    let guid = writer.guid();
    let secs = deadline
        .saturating_duration_since(Instant::now())
        .as_secs()
        .max(1);
    let what = format!(
        "{want} matched reader(s) on topic {:?} (`shoal topics {}` says why a reader does \
         not match, or why its node's endpoints cannot be seen)",
        r.topic.topics[0], r.topic.topics[0]
    );
    shoal::wait_for(secs, &what, || {
        mesh.topics()
            .matches()
            .iter()
            .filter(|(w, _)| *w == guid)
            .count()
            >= want
    })?;
    let links = mesh.connected_peers().len();
    let me = [&mesh];
    let counts_before = topic_counts(&me);
    let bytes_before = topics::bytes_out(&me);
    let before = Usage::now();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(Live::default());
    let (progress, ticker) = progress_ticker("pub", r.quiet, sent.clone(), Vec::new());
    let sampler = RssSampler::start_run(&r.shape, 1);
    let t0 = Instant::now();
    let rep = writer.publish(&r.shape, &sent, &stop);
    let writing_s = t0.elapsed().as_secs_f64();
    let memory = sampler.and_then(|s| s.finish(None));
    drop(ticker);
    progress.finish();
    let usage = Usage::now().since(&before);
    let drops = node_drops(&mesh);
    let suites = shoal::record_suites([&mesh]);
    let counts = counts_since(&topic_counts(&me), &counts_before);
    let bytes = topics::bytes_out(&me).saturating_sub(bytes_before);
    // Stopped with the writer alive: its queued samples go out before the links close, and
    // no withdrawal overtakes them (a receiver drops samples of a writer it stopped routing).
    mesh.stop();
    writer.close();
    let rep = rep?;
    let mut s = with_send_rate(
        summarise(
            &r.local("pub"),
            r.transport("shoal-topic"),
            links,
            rep,
            &[],
            Some(drops),
            usage,
        ),
        &rep,
        r.shape.size,
    );
    s.memory = memory;
    s.samples = Some(SampleReport::of(&[], &counts, writing_s, 0).with_bytes_out(bytes));
    s.record_suites = suites;
    Ok(s)
}

/// `sub --topic`: a reader per topic; per writer counts and sequence checks, per topic rates.
fn topic_sub(r: &RoleRun) -> Result<Summary, RunError> {
    let (mesh, mut events) = r.node.start()?;
    let _metrics = r.serve_metrics(&mesh)?;
    let mut handles = Vec::new();
    let mut states = Vec::new();
    for name in &r.topic.topics {
        let reader = mesh.reader(r.topic.declaration(name)).map_err(mesh_err)?;
        states.push(ReaderState {
            guid: reader.guid(),
            topic: name.clone(),
            recv: Receiver::new(&r.shape),
            seqs: WriterSeqs::default(),
            // Run the full time when told to wait for no end marker.
            expect_writers: if r.publishers == 0 {
                usize::MAX
            } else {
                r.publishers
            },
        });
        handles.push(reader);
    }
    let live = Arc::new(AtomicU64::new(0));
    let on_shard = if r.on_shard {
        let wanted = Wanted::Samples(std::mem::take(&mut states));
        Some(shard_roles::start_receiving(
            &mesh,
            wanted,
            r.bound(),
            live.clone(),
        )?)
    } else {
        None
    };
    ready("sub", &mesh, r);
    let me = [&mesh];
    let counts_before = topic_counts(&me);
    let unrouted_before = topics::unrouted(&me);
    let before = Usage::now();
    let started = Instant::now();
    let stop = AtomicBool::new(false);
    let (progress, ticker) = progress_ticker(
        "sub",
        r.quiet,
        Arc::new(Live::default()),
        vec![live.clone()],
    );
    let foreign = match on_shard {
        Some(task) => {
            let got = task.finish(&mut events)?;
            if let Wanted::Samples(s) = got.wanted {
                states = s;
            }
            got.foreign
        }
        None => topics::subscribe_samples(&mut events, &mut states, r.bound(), &stop, &live),
    };
    drop(ticker);
    progress.finish();
    let usage = Usage::now().since(&before);
    let links = mesh.connected_peers().len();
    let drops = node_drops(&mesh);
    let suites = shoal::record_suites([&mesh]);
    let counts = counts_since(&topic_counts(&me), &counts_before);
    let unrouted = topics::unrouted(&me).saturating_sub(unrouted_before);
    drop(handles);
    mesh.stop();
    // The nodes' rates are over the readers' longest measured window (the whole run when
    // nothing arrived in a window).
    let window = states
        .iter()
        .map(|s| s.recv.window().2)
        .fold(0.0f64, f64::max);
    let window = if window > 0.0 {
        window
    } else {
        started.elapsed().as_secs_f64()
    };
    let report = SampleReport::of(&states, &counts, window, foreign).with_unrouted(unrouted);
    let recvs: Vec<Receiver> = states.into_iter().map(|s| s.recv).collect();
    let mut s = summarise(
        &r.local("sub"),
        r.transport("shoal-topic"),
        links,
        PubReport::default(),
        &recvs,
        Some(drops),
        usage,
    );
    s.samples = Some(report);
    s.record_suites = suites;
    Ok(s)
}

fn raw_pub(r: &RoleRun) -> Result<Summary, RunError> {
    if r.node.static_peers.is_empty() {
        return Err(RunError::Usage(
            "pub --raw needs --static-peer host:port of each raw subscriber".into(),
        ));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut conns = Vec::new();
    for p in &r.node.static_peers {
        loop {
            match TcpStream::connect(p.as_str()) {
                Ok(s) => break conns.push(s),
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(peer = %p, error = %e, "raw subscriber not up yet");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    let links = conns.len();
    let before = Usage::now();
    let stop = AtomicBool::new(false);
    let sent = Arc::new(Live::default());
    let (progress, ticker) = progress_ticker("pub --raw", r.quiet, sent.clone(), Vec::new());
    let mut sink = RawSink::with_framing(conns, r.framing);
    let rep = traffic::publish(&mut sink, &r.shape, rand::random(), &sent, &stop);
    drop(sink);
    drop(ticker);
    progress.finish();
    let usage = Usage::now().since(&before);
    let rep = rep?;
    Ok(with_send_rate(
        summarise(
            &r.local("pub"),
            r.framing.label(),
            links,
            rep,
            &[],
            None,
            usage,
        ),
        &rep,
        r.shape.size,
    ))
}

fn raw_sub(r: &RoleRun) -> Result<Summary, RunError> {
    let listener = TcpListener::bind(r.node.listen)?;
    eprintln!("sub ready: id=raw listen={}", listener.local_addr()?);
    listener.set_nonblocking(true)?;
    let until = r.bound();
    let before = Usage::now();
    let stop = Arc::new(AtomicBool::new(false));
    let mut counters = Vec::new();
    let mut handles = Vec::new();
    let publishers = r.publishers.max(1);
    while handles.len() < publishers && Instant::now() < until {
        match listener.accept() {
            Ok((stream, from)) => {
                tracing::info!(%from, "raw publisher connected");
                stream.set_nonblocking(false)?;
                let live = Arc::new(AtomicU64::new(0));
                counters.push(live.clone());
                let stop = stop.clone();
                let (shape, framing) = (r.shape, r.framing);
                handles.push(std::thread::spawn(
                    move || -> Result<Receiver, raw::FrameError> {
                        let mut recv = Receiver::new(&shape);
                        raw::subscribe_framed(stream, framing, &mut recv, 1, until, &stop, &live)?;
                        Ok(recv)
                    },
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => return Err(e.into()),
        }
    }
    let (progress, ticker) =
        progress_ticker("sub --raw", r.quiet, Arc::new(Live::default()), counters);
    let mut receivers = Vec::new();
    for h in handles {
        receivers.push(h.join().map_err(|_| RunError::Panicked)??);
    }
    drop(ticker);
    progress.finish();
    let usage = Usage::now().since(&before);
    let links = receivers.len();
    Ok(summarise(
        &r.local("sub"),
        r.framing.label(),
        links,
        PubReport::default(),
        &receivers,
        None,
        usage,
    ))
}
