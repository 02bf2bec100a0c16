//! Ping-pong driven from the nodes' data shards: both ends answer in an event callback
//! ([`shoal_mesh::MeshBuilder::on_event`]), which runs on the shard thread that read the
//! message, before any application thread is involved. A round trip then crosses the two
//! sockets and nothing else, as raw TCP ping-pong does; the default ping-pong adds four thread
//! hand-offs per round trip (application → shard and shard → application, at both ends).
//!
//! This is the latency an application gets when it does its latency-critical work in a
//! callback (which must return quickly and never block: `try_send` only). Max rate only: the
//! next ping leaves from the callback that received the last pong.

use crate::demo::RunError;
use crate::latency::{finish, LatencyRun, Settings};
use crate::latency_hist::Latency;
use crate::shoal::{wait_for, SetupError};
use crate::stamp::{wall_ns, Stamp, STAMP_LEN};
use crate::traffic::Progress;
use crate::usage::Usage;
use bytes::Bytes;
use shoal_mesh::{Event, Mesh, PeerId};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// A pong later than this is taken as lost: the driver sends the next ping itself.
const REPLY_TIMEOUT: Duration = Duration::from_secs(1);

/// A node's handle for its own callback. Set once the node is built; cleared before the nodes
/// stop, so no callback keeps its node alive (the callback lives inside the node).
type Slot = Arc<RwLock<Option<Mesh>>>;

/// What A's callback and the driving thread share. One round trip is in flight, so the lock
/// is never contended on the measured path (the driver looks only every few milliseconds).
struct Pings {
    hist: Latency,
    /// The sequence number of the ping in flight.
    seq: u64,
    measured: u64,
    /// When the last pong arrived (or the last ping was sent by the driver).
    last: Instant,
    done: bool,
}

fn ping(size: usize, seq: u64, at: Instant) -> Bytes {
    let mut buf = vec![0u8; size.max(STAMP_LEN)];
    Stamp::Data {
        publisher: 1,
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

/// Ping-pong between two loopback nodes, both ends answering on their shard threads.
pub fn pingpong_shoal_inline(s: &Settings) -> Result<LatencyRun, RunError> {
    if s.shape.rate > 0.0 {
        return Err(RunError::Usage(
            "--inline ping-pong runs at max rate only (each ping leaves from the callback that \
             received the last pong)"
                .into(),
        ));
    }
    let size = s.shape.size;
    let start = Instant::now();
    let measure_from = start + s.shape.warmup;
    let end = measure_from + s.shape.duration;
    let failed = Arc::new(AtomicU64::new(0));
    let pings = Arc::new(Mutex::new(Pings {
        hist: Latency::default(),
        seq: 0,
        measured: 0,
        last: start,
        done: false,
    }));
    let (a_slot, b_slot): (Slot, Slot) = (Arc::default(), Arc::default());
    let b_id = Arc::new(RwLock::new(PeerId::ZERO));

    // A: measures the round trip and sends the next ping, on its shard thread.
    let a = {
        let (slot, pings, failed, b_id) =
            (a_slot.clone(), pings.clone(), failed.clone(), b_id.clone());
        s.node
            .builder()?
            .on_event(move |ev| {
                let Event::Message { payload, .. } = ev else {
                    return;
                };
                let now = Instant::now();
                let Ok(Stamp::Data { seq, sent_ns, .. }) = Stamp::read(payload) else {
                    return;
                };
                let mut p = pings.lock().expect("pings lock");
                if seq != p.seq || p.done {
                    return; // a pong the driver already gave up on
                }
                if now >= measure_from {
                    p.hist.record(wall_ns(now).saturating_sub(sent_ns));
                    p.measured += 1;
                }
                p.last = now;
                p.seq += 1;
                if now >= end {
                    p.done = true;
                    return;
                }
                let next = ping(size, p.seq, now);
                drop(p);
                let to = *b_id.read().expect("b id lock");
                try_send(&slot, to, next, &failed);
            })
            .build()
            .map_err(SetupError::from)?
    };
    *a_slot.write().expect("slot lock") = Some(a.clone());
    let stop = |a: &Mesh, b: Option<&Mesh>| {
        a_slot.write().expect("slot lock").take();
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
    let b = {
        let (slot, failed) = (b_slot.clone(), failed.clone());
        s.node
            .builder()?
            .static_peer(format!("127.0.0.1:{}", a.listen_port()))
            .on_event(move |ev| {
                if let Event::Message { from, payload, .. } = ev {
                    try_send(&slot, *from, payload.clone(), &failed);
                }
            })
            .build()
            .map_err(SetupError::from)
    };
    let b = match b {
        Ok(b) => b,
        Err(e) => {
            stop(&a, None);
            return Err(e.into());
        }
    };
    // Nobody takes `events()`: Message events are then not queued at all, only called back.
    *b_slot.write().expect("slot lock") = Some(b.clone());
    *b_id.write().expect("b id lock") = b.id();
    let started = b.start().map_err(SetupError::from).and_then(|()| {
        wait_for(10, "the two nodes connected", || {
            a.connected_peers().contains(&b.id())
        })
    });
    if let Err(e) = started {
        stop(&a, Some(&b));
        return Err(e.into());
    }

    let before = Usage::now();
    let progress = Progress::new("latency shoal-inline", s.quiet);
    let mut timeouts = 0u64;
    {
        let mut p = pings.lock().expect("pings lock");
        p.last = Instant::now();
        let first = ping(size, p.seq, p.last);
        drop(p);
        try_send(&a_slot, b.id(), first, &failed);
    }
    loop {
        std::thread::sleep(Duration::from_millis(5));
        let now = Instant::now();
        let mut p = pings.lock().expect("pings lock");
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
            let next = ping(size, p.seq, now);
            drop(p);
            try_send(&a_slot, b.id(), next, &failed);
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
    let usage = Usage::now().since(&before);
    stop(&a, Some(&b));
    let (hist, measured) = {
        let mut p = pings.lock().expect("pings lock");
        (std::mem::take(&mut p.hist), p.measured)
    };
    if failed.load(Ordering::Relaxed) > 0 {
        tracing::warn!(
            failed = failed.load(Ordering::Relaxed),
            "some try_send calls failed"
        );
    }
    Ok(finish(s, "shoal-inline", hist, measured, timeouts, usage))
}
