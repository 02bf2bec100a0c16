//! The pinging end: finds the pong, runs the round trips over Shoal, inline or raw TCP, and
//! says goodbye.

use super::{goodbye, is_probe_echo, probe, PingPongRun, PongReport, GOODBYE_WAIT};
use crate::demo::RunError;
use crate::latency::{self, read_one, round_trips, shoal_round_trip, LatencyRun};
use crate::latency_inline::InlinePinger;
use crate::raw::{write_frame, FrameReader, Framer};
use crate::shoal::{wait_for, SetupError};
use crate::usage::Usage;
use shoal_mesh::{Event, EventReceiver, Mesh, PeerId, PublishError};
use std::io::Write;
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Time between probes.
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// How long the ping looks for a pong (links up, a probe answered).
const FIND_PONG: Duration = Duration::from_secs(30);

/// Broadcasts probes until one is echoed; returns the echoing node (the pong). Waits first
/// for a connected peer (a broadcast needs one).
pub(super) fn find_pong(
    mesh: &Mesh,
    events: &mut EventReceiver,
    size: usize,
) -> Result<PeerId, RunError> {
    let deadline = Instant::now() + FIND_PONG;
    wait_for(FIND_PONG.as_secs(), "a connected peer", || {
        !mesh.connected_peers().is_empty()
    })?;
    let mut n = 0u64;
    while Instant::now() < deadline {
        match mesh.try_broadcast(probe(size, n)) {
            Ok(()) | Err(PublishError::NoRoute) | Err(PublishError::Full) => {}
            Err(e) => return Err(RunError::Usage(format!("probe: {e}"))),
        }
        n += 1;
        let next = Instant::now() + PROBE_EVERY;
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if let Some(Event::Message { from, payload, .. }) = events.recv_timeout(left) {
                if is_probe_echo(&payload) {
                    tracing::info!(pong = %from, probes = n, "pong found");
                    return Ok(from);
                }
            }
        }
    }
    Err(SetupError::Timeout {
        secs: FIND_PONG.as_secs(),
        what: "a pong to answer a probe".into(),
    }
    .into())
}

/// Runs the `ping` role: round trips to a pong in another process.
/// Sends the pong its goodbye (the count of round trips sent) and waits up to
/// [`GOODBYE_WAIT`] for its report.
pub(super) fn goodbye_report(
    mesh: &Mesh,
    pong: PeerId,
    sent: u64,
    events: &mut EventReceiver,
) -> Option<PongReport> {
    mesh.send_blocking(pong, goodbye(sent)).ok()?;
    let deadline = Instant::now() + GOODBYE_WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        if let Some(Event::Message { payload, .. }) = events.recv_timeout(left) {
            if let Some(report) = PongReport::decode(&payload) {
                return Some(report);
            }
        }
    }
}

pub fn run_ping(r: &PingPongRun) -> Result<LatencyRun, RunError> {
    if r.raw {
        return ping_raw(r);
    }
    if r.on_shard {
        return super::on_shard::ping_on_shard(r);
    }
    if r.inline {
        if r.settings.shape.rate > 0.0 {
            return Err(RunError::Usage(
                "ping --inline runs at max rate only (each ping leaves from the callback that \
                 received the last pong)"
                    .into(),
            ));
        }
        return ping_inline(r);
    }
    let s = &r.settings;
    let (mesh, mut events) = s.node.start()?;
    let _metrics = r.metrics_for(&mesh)?;
    let result = (|| {
        let pong = find_pong(&mesh, &mut events, s.shape.size)?;
        let before = Usage::now();
        let trips = round_trips(s, "ping shoal", |seq| {
            shoal_round_trip(&mesh, &mut events, pong, s.shape.size, seq, &mut |_| {})
        })?;
        let usage = Usage::now().since(&before);
        // The goodbye and the pong's answer to it.
        let report = goodbye_report(&mesh, pong, trips.sent, &mut events);
        let mut run = trips.finish(s, &r.transport(), usage);
        run.pong = report;
        Ok(run)
    })();
    mesh.stop();
    result
}

fn ping_inline(r: &PingPongRun) -> Result<LatencyRun, RunError> {
    let s = &r.settings;
    let report: Arc<Mutex<Option<PongReport>>> = Arc::default();
    let pinger = {
        let report = report.clone();
        InlinePinger::new(s.shape.size, move |ev| {
            if let Event::Message { payload, .. } = ev {
                if let Some(rep) = PongReport::decode(payload) {
                    *report.lock().expect("report lock") = Some(rep);
                }
            }
        })
    };
    let mesh = pinger.node(&s.node)?;
    let mut events = mesh.events();
    let result = (|| {
        mesh.start().map_err(SetupError::from)?;
        let _metrics = r.metrics_for(&mesh)?;
        let pong = find_pong(&mesh, &mut events, s.shape.size)?;
        // From now on Message events go to the callback only, never to a queue.
        drop(events);
        let before = Usage::now();
        let res = pinger.run(
            pong,
            s.shape.warmup,
            s.shape.duration,
            "ping shoal-inline",
            s.quiet,
        );
        let usage = Usage::now().since(&before);
        if mesh.send_blocking(pong, goodbye(res.sent)).is_ok() {
            let _ = wait_for(GOODBYE_WAIT.as_secs(), "the pong's report", || {
                report.lock().expect("report lock").is_some()
            });
        }
        let mut run = latency::finish(
            s,
            &r.transport(),
            res.hist,
            res.measured,
            res.timeouts,
            usage,
        );
        run.round_trips = res.sent;
        run.pong = *report.lock().expect("report lock");
        Ok(run)
    })();
    pinger.detach();
    mesh.stop();
    result
}

fn connect_raw(r: &PingPongRun) -> Result<TcpStream, RunError> {
    let Some(peer) = r.settings.node.static_peers.first() else {
        return Err(RunError::Usage(
            "ping --raw needs --static-peer host:port of the raw pong".into(),
        ));
    };
    let deadline = Instant::now() + FIND_PONG;
    loop {
        match TcpStream::connect(peer.as_str()) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(%peer, error = %e, "raw pong not up yet");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn ping_raw(r: &PingPongRun) -> Result<LatencyRun, RunError> {
    let s = &r.settings;
    let mut a = connect_raw(r)?;
    a.set_nodelay(true)?;
    a.set_read_timeout(Some(Duration::from_millis(50)))?;
    let (mut fr, mut framer) = (FrameReader::default(), Framer::default());
    let (mut out, mut reply) = (Vec::new(), Vec::new());
    let before = Usage::now();
    let trips = round_trips(s, "ping raw", |seq| {
        latency::raw_round_trip(
            &mut a,
            &mut fr,
            &mut framer,
            &mut out,
            &mut reply,
            s.shape.size,
            seq,
        )
    })?;
    let usage = Usage::now().since(&before);
    let bye = goodbye(trips.sent);
    out.clear();
    write_frame(&mut out, &framer.next_header(bye.len()), &bye)?;
    a.write_all(&out)?;
    let deadline = Instant::now() + GOODBYE_WAIT;
    let mut report = None;
    while report.is_none() && read_one(&mut a, &mut fr, &mut reply, deadline)? {
        report = PongReport::decode(&reply);
    }
    let mut run = trips.finish(s, "raw-tcp", usage);
    run.pong = report;
    Ok(run)
}
