//! Ping-pong driven from the nodes' data shards: both ends answer in an event callback
//! ([`shoal_mesh::MeshBuilder::on_event`]), which runs on the shard thread that read the
//! message, before any application thread is involved. A round trip then crosses the two
//! sockets and nothing else, as raw TCP ping-pong does; the default ping-pong adds four thread
//! hand-offs per round trip (application → shard and shard → application, at both ends).
//!
//! This is the latency an application gets when it does its latency-critical work in a
//! callback (which must return quickly and never block: `try_send` only). Max rate only: the
//! next ping leaves from the callback that received the last pong.
//!
//! [`InlinePinger`] is the pinging end, used by `latency --inline` (both nodes in this
//! process) and by the `ping --inline` role (the pong in another process).

use crate::demo::RunError;
use crate::latency::{finish, LatencyRun, Settings, PING_PUBLISHER, REPLY_TIMEOUT};
use crate::latency_hist::Latency;
use crate::shoal::{wait_for, NodeArgs, SetupError};
use crate::stamp::{wall_ns, Stamp, STAMP_LEN};
use crate::traffic::Progress;
use crate::usage::Usage;
use bytes::Bytes;
use shoal_mesh::{Event, Mesh, PeerId};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// A node's handle for its own callback. Set once the node is built; cleared before the nodes
/// stop, so no callback keeps its node alive (the callback lives inside the node).
type Slot = Arc<RwLock<Option<Mesh>>>;

/// What the callback and the driving thread share. One round trip is in flight, so the lock
/// is never contended on the measured path (the driver looks only every few milliseconds).
struct Pings {
    hist: Latency,
    /// The sequence number of the ping in flight.
    seq: u64,
    measured: u64,
    /// When the last pong arrived (or the last ping was sent by the driver).
    last: Instant,
    /// Set by [`InlinePinger::run`]; before that every reply is ignored.
    running: bool,
    done: bool,
    measure_from: Instant,
    end: Instant,
    /// Where pings go.
    to: PeerId,
}

/// The pinging end of an inline ping-pong: register [`InlinePinger::callback`] on the node,
/// [`attach`](InlinePinger::attach) the built node, [`run`](InlinePinger::run), then
/// [`detach`](InlinePinger::detach) before stopping the node.
#[derive(Clone)]
pub struct InlinePinger {
    pings: Arc<Mutex<Pings>>,
    slot: Slot,
    failed: Arc<AtomicU64>,
    size: usize,
    /// Other replies (not pings) go here, on the shard thread: probes and goodbyes.
    other: Arc<dyn Fn(&Event) + Send + Sync>,
}

/// What an inline run measured.
pub struct InlineResult {
    /// Round-trip times after the warm-up.
    pub hist: Latency,
    /// Round trips measured.
    pub measured: u64,
    /// Pings sent in total (warm-up included).
    pub sent: u64,
    /// Round trips given up after [`REPLY_TIMEOUT`].
    pub timeouts: u64,
}

/// A ping: the stamp of `seq` sent at `at`, filled up to `size` bytes.
pub fn ping(size: usize, seq: u64, at: Instant) -> Bytes {
    let mut buf = vec![0u8; size.max(STAMP_LEN)];
    Stamp::Data {
        publisher: PING_PUBLISHER,
        seq,
        sent_ns: wall_ns(at),
    }
    .write(&mut buf)
    .expect("buffer holds a stamp");
    Bytes::from(buf)
}

fn try_send(slot: &Slot, to: PeerId, payload: Bytes, failed: &AtomicU64) {
    let sent = match slot.read().expect("slot lock").as_ref() {
        Some(m) => m.try_send(to, payload).is_ok(),
        None => false,
    };
    if !sent {
        failed.fetch_add(1, Ordering::Relaxed);
    }
}

impl InlinePinger {
    /// A pinger of `size`-byte pings; `other` sees every event that is not a pong.
    pub fn new(size: usize, other: impl Fn(&Event) + Send + Sync + 'static) -> InlinePinger {
        let now = Instant::now();
        InlinePinger {
            pings: Arc::new(Mutex::new(Pings {
                hist: Latency::default(),
                seq: 0,
                measured: 0,
                last: now,
                running: false,
                done: false,
                measure_from: now,
                end: now,
                to: PeerId::ZERO,
            })),
            slot: Arc::default(),
            failed: Arc::default(),
            size,
            other: Arc::new(other),
        }
    }

    /// The event callback for the pinging node: measures each pong and sends the next ping,
    /// on the shard thread that read the pong.
    pub fn callback(&self) -> impl Fn(&Event) + Send + Sync + 'static {
        let me = self.clone();
        move |ev| me.on_event(ev)
    }

    fn on_event(&self, ev: &Event) {
        let Event::Message { payload, .. } = ev else {
            (self.other)(ev);
            return;
        };
        let now = Instant::now();
        let (seq, sent_ns) = match Stamp::read(payload) {
            Ok(Stamp::Data {
                publisher: PING_PUBLISHER,
                seq,
                sent_ns,
            }) => (seq, sent_ns),
            _ => {
                (self.other)(ev);
                return;
            }
        };
        let mut p = self.pings.lock().expect("pings lock");
        if !p.running || seq != p.seq || p.done {
            return; // a pong the driver already gave up on
        }
        if now >= p.measure_from {
            p.hist.record(wall_ns(now).saturating_sub(sent_ns));
            p.measured += 1;
        }
        p.last = now;
        p.seq += 1;
        if now >= p.end {
            p.done = true;
            return;
        }
        let next = ping(self.size, p.seq, now);
        let to = p.to;
        drop(p);
        try_send(&self.slot, to, next, &self.failed);
    }

    /// Gives the callback its node (call once the node is built).
    pub fn attach(&self, mesh: &Mesh) {
        *self.slot.write().expect("slot lock") = Some(mesh.clone());
    }

    /// A node of `node`'s settings whose events go to this pinger, attached (not started).
    pub fn node(&self, node: &NodeArgs) -> Result<Mesh, SetupError> {
        let mesh = node
            .builder()?
            .on_event(self.callback())
            .build()
            .map_err(SetupError::from)?;
        self.attach(&mesh);
        Ok(mesh)
    }

    /// Takes the node back from the callback, so it can stop.
    pub fn detach(&self) {
        self.slot.write().expect("slot lock").take();
    }

    /// Pings `to` for `warmup + duration` (each ping from the callback that received the
    /// last pong; a ping lost for [`REPLY_TIMEOUT`] is replaced by the driver).
    pub fn run(
        &self,
        to: PeerId,
        warmup: Duration,
        duration: Duration,
        label: &str,
        quiet: bool,
    ) -> InlineResult {
        let progress = Progress::new(label, quiet);
        let mut timeouts = 0u64;
        let end = {
            let mut p = self.pings.lock().expect("pings lock");
            let now = Instant::now();
            p.measure_from = now + warmup;
            p.end = p.measure_from + duration;
            p.to = to;
            p.running = true;
            p.last = now;
            let first = ping(self.size, p.seq, now);
            let end = p.end;
            drop(p);
            try_send(&self.slot, to, first, &self.failed);
            end
        };
        loop {
            std::thread::sleep(Duration::from_millis(5));
            let now = Instant::now();
            let mut p = self.pings.lock().expect("pings lock");
            if p.done {
                break;
            }
            if now >= end + REPLY_TIMEOUT {
                p.done = true;
                break;
            }
            if now.duration_since(p.last) >= REPLY_TIMEOUT {
                // Lost (a failed try_send, or a dropped link): the next ping replaces it.
                timeouts += 1;
                p.seq += 1;
                p.last = now;
                let next = ping(self.size, p.seq, now);
                drop(p);
                try_send(&self.slot, to, next, &self.failed);
                continue;
            }
            let pct = p.hist.percentiles();
            let seq = p.seq;
            drop(p);
            progress.update(format!(
                "{seq} round trips | p50 {:.1} µs | p99 {:.1} µs",
                pct.p50_us, pct.p99_us
            ));
        }
        progress.finish();
        let mut p = self.pings.lock().expect("pings lock");
        let failed = self.failed.load(Ordering::Relaxed);
        if failed > 0 {
            tracing::warn!(failed, "some try_send calls failed");
        }
        InlineResult {
            hist: std::mem::take(&mut p.hist),
            measured: p.measured,
            sent: p.seq,
            timeouts,
        }
    }
}

/// An event callback that echoes every message back to its originator as it came (no copy),
/// on the shard thread that read it; the node is taken from `slot`.
pub fn echo_callback(
    slot: Arc<RwLock<Option<Mesh>>>,
    failed: Arc<AtomicU64>,
) -> impl Fn(&Event) + Send + Sync + 'static {
    move |ev| {
        if let Event::Message { from, payload, .. } = ev {
            try_send(&slot, *from, payload.clone(), &failed);
        }
    }
}

/// True once `a` and `b` each list the other as connected: a message either sends can be
/// answered (a node routes a reply only once its own side of the link is up).
pub fn linked_both_ways(a: &Mesh, b: &Mesh) -> bool {
    a.connected_peers().contains(&b.id()) && b.connected_peers().contains(&a.id())
}

/// Ping-pong between two loopback nodes, both ends answering on their shard threads.
pub fn pingpong_shoal_inline(s: &Settings) -> Result<LatencyRun, RunError> {
    if s.shape.rate > 0.0 {
        return Err(RunError::Usage(
            "--inline ping-pong runs at max rate only (each ping leaves from the callback that \
             received the last pong)"
                .into(),
        ));
    }
    let pinger = InlinePinger::new(s.shape.size, |_| {});
    // A: measures the round trip and sends the next ping, on its shard thread.
    let a = pinger.node(&s.node)?;
    let b_slot: Slot = Arc::default();
    let stop = |a: &Mesh, b: Option<&Mesh>| {
        pinger.detach();
        b_slot.write().expect("slot lock").take();
        a.stop();
        if let Some(b) = b {
            b.stop();
        }
    };
    // B dials A, so A must be listening first.
    if let Err(e) = a.start() {
        stop(&a, None);
        return Err(SetupError::from(e).into());
    }
    // B: echoes every message back as it came (no copy), on its shard thread.
    let failed = Arc::new(AtomicU64::new(0));
    let b = s
        .node
        .builder()?
        .static_peer(format!("127.0.0.1:{}", a.listen_port()))
        .on_event(echo_callback(b_slot.clone(), failed.clone()))
        .build()
        .map_err(SetupError::from);
    let b = match b {
        Ok(b) => b,
        Err(e) => {
            stop(&a, None);
            return Err(e.into());
        }
    };
    // Nobody takes `events()`: Message events are then not queued at all, only called back.
    *b_slot.write().expect("slot lock") = Some(b.clone());
    // Both ends: A may list B while B's side of the link is not up yet, and a ping that
    // arrives then cannot be answered (issue 15 item 15: the first ping was lost and the run
    // stalled a full reply timeout).
    let started = b.start().map_err(SetupError::from).and_then(|()| {
        wait_for(10, "the two nodes connected both ways", || {
            linked_both_ways(&a, &b)
        })
    });
    if let Err(e) = started {
        stop(&a, Some(&b));
        return Err(e.into());
    }

    let before = Usage::now();
    let r = pinger.run(
        b.id(),
        s.shape.warmup,
        s.shape.duration,
        "latency shoal-inline",
        s.quiet,
    );
    let usage = Usage::now().since(&before);
    stop(&a, Some(&b));
    if failed.load(Ordering::Relaxed) > 0 {
        tracing::warn!(
            failed = failed.load(Ordering::Relaxed),
            "some echo try_send calls failed"
        );
    }
    let mut run = finish(s, "shoal-inline", r.hist, r.measured, r.timeouts, usage);
    run.round_trips = r.sent;
    Ok(run)
}
