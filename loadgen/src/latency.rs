//! `latency`: round-trip (ping-pong) and one-way latency over Shoal and over raw TCP, at max
//! rate or at a fixed rate with coordinated-omission correction.

use crate::demo::{run_raw, run_shoal, start_mesh, LocalRun, RunError};
use crate::latency_hist::{Latency, Percentiles};
use crate::raw::{write_frame, FrameReader, Framer};
use crate::shoal::NodeArgs;
use crate::stamp::{now_ns, Stamp, STAMP_LEN};
use crate::traffic::{wait_until, Progress, Shape};
use crate::usage::Usage;
use bytes::Bytes;
use shoal_mesh::{Event, EventReceiver, Mesh, PeerId};
use std::io::{ErrorKind, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How latency is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// A sends to B, B echoes back to A; one message in flight; round-trip time.
    PingPong,
    /// A streams to B; B measures send-to-receive time (one clock: same process).
    OneWay,
}

/// A reply slower than this counts as a timeout (and the run goes on; the inline pinger
/// sends the next ping itself).
pub(crate) const REPLY_TIMEOUT: Duration = Duration::from_secs(1);

/// The `publisher` field of every ping's stamp (here, in `latency_inline` and `pingpong`):
/// replies carrying anything else (probes, goodbyes) are not round trips.
pub(crate) const PING_PUBLISHER: u64 = 1;

/// The result of one latency run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LatencyRun {
    /// `shoal` or `raw-tcp`.
    pub transport: String,
    /// Mode.
    pub mode: Mode,
    /// Payload bytes.
    pub payload_bytes: usize,
    /// Target rate (0 = max).
    pub rate: f64,
    /// Messages (one-way) or round trips (ping-pong) measured, before correction.
    pub measured: u64,
    /// Round trips whose reply did not come within a second (ping-pong only).
    pub timeouts: u64,
    /// Pings sent in total, warm-up included (ping-pong only; one-way: messages received).
    pub round_trips: u64,
    /// The answering process's report (two-process `ping`, once the pong said goodbye).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pong: Option<PongReport>,
    /// Percentiles (corrected for coordinated omission at a fixed rate).
    pub percentiles: Percentiles,
    /// CPU and memory of the process.
    pub usage: Usage,
    /// The histogram.
    #[serde(skip)]
    pub histogram: Latency,
}

/// What the pong of a two-process ping-pong reports back to the ping (its payload format is
/// `pingpong`'s).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct PongReport {
    /// Pings echoed (probes not included).
    pub echoed: u64,
    /// The pong process's CPU time from its first probe to the goodbye, user mode.
    pub cpu_user_s: f64,
    /// Same, kernel.
    pub cpu_sys_s: f64,
    /// The pong process's peak RSS, KiB.
    pub peak_rss_kib: u64,
}

/// Settings of a latency run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Mode.
    pub mode: Mode,
    /// Payload size, rate, duration, warm-up.
    pub shape: Shape,
    /// Node settings template.
    pub node: NodeArgs,
    /// Hide the progress line.
    pub quiet: bool,
}

fn record(h: &mut Latency, ns: u64, interval: Option<Duration>) {
    match interval {
        Some(iv) => h.record_corrected(ns, iv.as_nanos() as u64),
        None => h.record(ns),
    }
}

pub(crate) fn finish(
    s: &Settings,
    transport: &str,
    h: Latency,
    measured: u64,
    timeouts: u64,
    u: Usage,
) -> LatencyRun {
    LatencyRun {
        transport: transport.into(),
        mode: s.mode,
        payload_bytes: s.shape.size,
        rate: s.shape.rate,
        measured,
        timeouts,
        round_trips: measured + timeouts,
        pong: None,
        percentiles: h.percentiles(),
        usage: u,
        histogram: h,
    }
}

/// What a loop of round trips measured.
pub(crate) struct Trips {
    /// Round-trip times after the warm-up (corrected at a fixed rate).
    pub hist: Latency,
    /// Round trips measured.
    pub measured: u64,
    /// Round trips without a reply in time.
    pub timeouts: u64,
    /// Pings sent (warm-up included).
    pub sent: u64,
}

impl Trips {
    /// The run's result, labelled `transport`.
    pub(crate) fn finish(self, s: &Settings, transport: &str, usage: Usage) -> LatencyRun {
        let mut r = finish(s, transport, self.hist, self.measured, self.timeouts, usage);
        r.round_trips = self.sent;
        r
    }
}

/// A paced loop of round trips: `one(seq)` performs one and returns its time (None on
/// timeout). Measures after the warm-up; bounded by warm-up + duration. At a fixed rate the
/// correction for coordinated omission happens here, where the pacing is.
pub(crate) fn round_trips(
    s: &Settings,
    label: &str,
    mut one: impl FnMut(u64) -> Result<Option<Duration>, RunError>,
) -> Result<Trips, RunError> {
    let interval = (s.shape.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / s.shape.rate));
    let start = Instant::now();
    let measure_from = start + s.shape.warmup;
    let end = measure_from + s.shape.duration;
    let progress = Progress::new(label, s.quiet);
    let mut hist = Latency::default();
    let (mut seq, mut measured, mut timeouts) = (0u64, 0u64, 0u64);
    let mut next_report = start;
    while Instant::now() < end {
        if let Some(iv) = interval {
            wait_until((start + iv.mul_f64(seq as f64)).min(end));
        }
        let rtt = one(seq)?;
        seq += 1;
        let now = Instant::now();
        match rtt {
            Some(rtt) if now >= measure_from => {
                record(&mut hist, rtt.as_nanos() as u64, interval);
                measured += 1;
            }
            Some(_) => {}
            None => timeouts += 1,
        }
        if now >= next_report {
            let p = hist.percentiles();
            progress.update(format!(
                "{seq} round trips | p50 {:.1} µs | p99 {:.1} µs",
                p.p50_us, p.p99_us
            ));
            next_report = now + Duration::from_millis(250);
        }
    }
    progress.finish();
    Ok(Trips {
        hist,
        measured,
        timeouts,
        sent: seq,
    })
}

/// A ping of `size` bytes: the stamp of `seq`, now.
pub(crate) fn stamped(size: usize, seq: u64) -> Vec<u8> {
    let mut buf = vec![0u8; size.max(STAMP_LEN)];
    Stamp::Data {
        publisher: PING_PUBLISHER,
        seq,
        sent_ns: now_ns(),
    }
    .write(&mut buf)
    .expect("buffer holds a stamp");
    buf
}

/// The sequence number of a ping (or of its echo); `None` for anything else.
pub(crate) fn seq_of(payload: &[u8]) -> Option<u64> {
    match Stamp::read(payload) {
        Ok(Stamp::Data {
            publisher: PING_PUBLISHER,
            seq,
            ..
        }) => Some(seq),
        _ => None,
    }
}

/// One application-thread round trip over Shoal: a targeted send to `to`, then events until
/// the echo of `seq` (or [`REPLY_TIMEOUT`]). `other` sees every other event meanwhile.
pub(crate) fn shoal_round_trip(
    mesh: &Mesh,
    events: &mut EventReceiver,
    to: PeerId,
    size: usize,
    seq: u64,
    other: &mut dyn FnMut(Event),
) -> Result<Option<Duration>, RunError> {
    let t0 = Instant::now();
    mesh.send_blocking(to, Bytes::from(stamped(size, seq)))
        .map_err(|e| RunError::Usage(format!("shoal send: {e}")))?;
    let deadline = t0 + REPLY_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        match events.recv_timeout(left) {
            Some(Event::Message { payload, .. }) if seq_of(&payload) == Some(seq) => {
                return Ok(Some(t0.elapsed()));
            }
            Some(ev) => other(ev),
            None => {}
        }
    }
}

/// Echoes every message back to its originator as it came (no copy) from this thread until
/// `stop`; a refused reply (no route yet) is counted in `failed`, not fatal.
pub(crate) fn echo_events(
    mesh: &Mesh,
    events: &mut EventReceiver,
    stop: &AtomicBool,
    failed: &AtomicU64,
) {
    while !stop.load(Ordering::Relaxed) {
        if let Some(Event::Message { from, payload, .. }) =
            events.recv_timeout(Duration::from_millis(50))
        {
            if mesh.send_blocking(from, payload).is_err() {
                failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Ping-pong over two Shoal nodes: targeted send, targeted echo.
pub fn pingpong_shoal(s: &Settings) -> Result<LatencyRun, RunError> {
    // Waits until every node lists every other: both ends of the link are up.
    let nodes = start_mesh(2, &s.node)?;
    let mut it = nodes.into_iter();
    let (a, mut a_events) = it.next().expect("node a");
    let (b, mut b_events) = it.next().expect("node b");
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let echo = {
        let (b, stop, failed) = (b.clone(), stop.clone(), failed.clone());
        std::thread::spawn(move || echo_events(&b, &mut b_events, &stop, &failed))
    };
    let before = Usage::now();
    let b_id = b.id();
    let size = s.shape.size;
    let result = round_trips(s, "latency shoal", |seq| {
        shoal_round_trip(&a, &mut a_events, b_id, size, seq, &mut |_| {})
    });
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    let usage = Usage::now().since(&before);
    a.stop();
    b.stop();
    if failed.load(Ordering::Relaxed) > 0 {
        tracing::warn!(
            failed = failed.load(Ordering::Relaxed),
            "some echoes failed"
        );
    }
    Ok(result?.finish(s, "shoal", usage))
}

/// Reads the next frame's payload into `out`; `Ok(false)` when `deadline` passed first,
/// [`RunError::PeerClosed`] when the peer closed.
pub(crate) fn read_one(
    stream: &mut TcpStream,
    fr: &mut FrameReader,
    out: &mut Vec<u8>,
    deadline: Instant,
) -> Result<bool, RunError> {
    loop {
        if let Some(p) = fr.next_payload()? {
            out.clear();
            out.extend_from_slice(p);
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        match fr.fill(stream) {
            Ok(0) => return Err(RunError::PeerClosed),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Ping-pong over one raw TCP connection with the same frames.
pub fn pingpong_raw(s: &Settings) -> Result<LatencyRun, RunError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let mut a = TcpStream::connect(listener.local_addr()?)?;
    let (mut b, _) = listener.accept()?;
    for st in [&a, &b] {
        st.set_nodelay(true)?;
        st.set_read_timeout(Some(Duration::from_millis(50)))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let echo = {
        let stop = stop.clone();
        std::thread::spawn(move || -> Result<(), RunError> {
            let mut fr = FrameReader::default();
            let mut framer = Framer::default();
            let mut payload = Vec::new();
            let mut out = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if read_one(
                    &mut b,
                    &mut fr,
                    &mut payload,
                    Instant::now() + Duration::from_millis(50),
                )? {
                    out.clear();
                    write_frame(&mut out, &framer.next_header(payload.len()), &payload)?;
                    b.write_all(&out)?;
                }
            }
            Ok(())
        })
    };
    let before = Usage::now();
    let size = s.shape.size;
    let mut fr = FrameReader::default();
    let mut framer = Framer::default();
    let (mut out, mut reply) = (Vec::new(), Vec::new());
    let result = round_trips(s, "latency raw", |seq| {
        raw_round_trip(
            &mut a,
            &mut fr,
            &mut framer,
            &mut out,
            &mut reply,
            size,
            seq,
        )
    });
    stop.store(true, Ordering::Relaxed);
    let echoed = echo.join().map_err(|_| RunError::Panicked)?;
    let usage = Usage::now().since(&before);
    let trips = result?;
    echoed?;
    Ok(trips.finish(s, "raw-tcp", usage))
}

/// One raw TCP round trip: the ping of `seq` as one Data frame, then frames until its echo
/// (or [`REPLY_TIMEOUT`]).
pub(crate) fn raw_round_trip(
    a: &mut TcpStream,
    fr: &mut FrameReader,
    framer: &mut Framer,
    out: &mut Vec<u8>,
    reply: &mut Vec<u8>,
    size: usize,
    seq: u64,
) -> Result<Option<Duration>, RunError> {
    let t0 = Instant::now();
    let p = stamped(size, seq);
    out.clear();
    write_frame(out, &framer.next_header(p.len()), &p)?;
    a.write_all(out)?;
    let deadline = t0 + REPLY_TIMEOUT;
    while read_one(a, fr, reply, deadline)? {
        if seq_of(reply) == Some(seq) {
            return Ok(Some(t0.elapsed()));
        }
    }
    Ok(None)
}

fn one_way(s: &Settings, raw: bool) -> Result<LatencyRun, RunError> {
    let run = LocalRun {
        nodes: 2,
        shape: s.shape,
        node: s.node.clone(),
        quiet: s.quiet,
        mode: "latency one-way",
    };
    let sum = if raw {
        run_raw(&run)?
    } else {
        run_shoal(&run)?
    };
    Ok(LatencyRun {
        transport: sum.transport.clone(),
        mode: Mode::OneWay,
        payload_bytes: s.shape.size,
        rate: s.shape.rate,
        measured: sum.loss.received,
        timeouts: sum.lost,
        round_trips: sum.loss.received,
        pong: None,
        percentiles: sum.latency,
        usage: sum.usage,
        histogram: sum.histogram,
    })
}

/// Runs the configured mode over Shoal (`raw == false`) or raw TCP.
pub fn run(s: &Settings, raw: bool) -> Result<LatencyRun, RunError> {
    match (s.mode, raw) {
        (Mode::PingPong, false) => pingpong_shoal(s),
        (Mode::PingPong, true) => pingpong_raw(s),
        (Mode::OneWay, raw) => one_way(s, raw),
    }
}

/// Prints one run's percentiles.
pub fn print(r: &LatencyRun) {
    let p = &r.percentiles;
    let rate = if r.rate > 0.0 {
        format!("{:.0}/s (CO-corrected)", r.rate)
    } else {
        "max".into()
    };
    println!(
        "== latency {:?} over {}: {} B, rate {rate}, {} measured, {} timeouts/lost",
        r.mode, r.transport, r.payload_bytes, r.measured, r.timeouts
    );
    println!(
        "   µs: p50 {:.1} | p90 {:.1} | p99 {:.1} | p99.9 {:.1} | p99.99 {:.1} | max {:.1}",
        p.p50_us, p.p90_us, p.p99_us, p.p999_us, p.p9999_us, p.max_us
    );
    println!(
        "   cpu user {:.2} s | sys {:.2} s | peak rss {} KiB",
        r.usage.cpu_user_s, r.usage.cpu_sys_s, r.usage.peak_rss_kib
    );
    if let Some(q) = &r.pong {
        println!(
            "   pong: echoed {} of {} pings | cpu user {:.2} s | sys {:.2} s | peak rss {} KiB",
            q.echoed, r.round_trips, q.cpu_user_s, q.cpu_sys_s, q.peak_rss_kib
        );
    }
}
