//! The traffic shape shared by every transport: a paced publisher that stamps each payload,
//! and a receiver that turns stamps into rates, loss and latency.

use crate::gaps::LossTracker;
use crate::latency_hist::Latency;
use crate::stamp::{wall_ns, Stamp, STAMP_LEN};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The shape of a publishing run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// Payload bytes per message (at least [`STAMP_LEN`]).
    pub size: usize,
    /// When above `size`, each message's size is drawn uniformly from `size..=size_max`.
    pub size_max: usize,
    /// Target messages per second; 0 = as fast as backpressure allows.
    pub rate: f64,
    /// Measured time after the warm-up.
    pub duration: Duration,
    /// Time sent before measuring.
    pub warmup: Duration,
}

/// Why a message could not be handed to a transport.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// Refused this once (e.g. no route right now); the run goes on.
    #[error("publish refused: {0}")]
    Refused(String),
    /// The transport is gone; the run stops.
    #[error("transport failed: {0}")]
    Fatal(String),
}

/// Where a publisher's messages go.
pub trait Sink {
    /// Hands over one payload (may buffer).
    fn send(&mut self, payload: &[u8]) -> Result<(), SinkError>;
    /// Pushes out anything buffered (called whenever the publisher is ahead of its schedule).
    fn flush(&mut self) -> Result<(), SinkError>;
}

/// What a publisher did.
#[derive(Debug, Clone, Copy, Default)]
pub struct PubReport {
    /// Data messages sent in total (warm-up included).
    pub sent: u64,
    /// Data messages sent in the measured window.
    pub sent_in_window: u64,
    /// Length of the measured window.
    pub window: Duration,
    /// Refused publish calls.
    pub refused: u64,
}

/// Counters a publisher shares with a progress reporter.
#[derive(Debug, Default)]
pub struct Live {
    /// Messages sent or received so far.
    pub count: AtomicU64,
}

/// Sleeps until `due`: parks for the bulk of long waits, yields for the last stretch so a
/// fixed rate is kept to a few microseconds.
pub fn wait_until(due: Instant) {
    loop {
        let now = Instant::now();
        if now >= due {
            return;
        }
        let left = due - now;
        if left > Duration::from_micros(200) {
            std::thread::sleep(left - Duration::from_micros(100));
        } else {
            std::thread::yield_now();
        }
    }
}

/// What a [`Pacing`] publisher does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Send [`Pacing::payload`], this many bytes of it (stamped already).
    Send(usize),
    /// Ahead of schedule: flush, then wait until this instant.
    Wait(Instant),
    /// The run is over: send [`Pacing::end_marker`].
    Done,
}

/// The publishing loop of [`publish`] as a state machine, so that a blocking thread and a
/// shard task ([`crate::shard_roles`]) drive the same schedule, stamps and counts.
pub struct Pacing {
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    rng: u64,
    id: u64,
    start: Instant,
    measure_from: Instant,
    end: Instant,
    interval: Option<Duration>,
    report: PubReport,
    seq: u64,
    at_window_start: Option<(u64, Instant)>,
    stopped: Option<Instant>,
}

impl Pacing {
    /// Publisher `id` of `shape`, starting now.
    pub fn new(shape: &Shape, id: u64) -> Pacing {
        let (lo, hi) = (
            shape.size.max(STAMP_LEN),
            shape.size_max.max(shape.size).max(STAMP_LEN),
        );
        let mut buf = vec![0u8; hi];
        for (i, b) in buf.iter_mut().enumerate().skip(STAMP_LEN) {
            *b = i as u8;
        }
        let start = Instant::now();
        let measure_from = start + shape.warmup;
        Pacing {
            buf,
            lo,
            hi,
            // xorshift64: sizes need to vary, not to be unpredictable; no allocation, no lock.
            rng: id | 1,
            id,
            start,
            measure_from,
            end: measure_from + shape.duration,
            interval: (shape.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / shape.rate)),
            report: PubReport::default(),
            seq: 0,
            at_window_start: None,
            stopped: None,
        }
    }

    fn next_len(&mut self) -> usize {
        if self.hi == self.lo {
            return self.lo;
        }
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.lo + (self.rng % (self.hi - self.lo + 1) as u64) as usize
    }

    /// The next step; a [`Step::Send`] has stamped the payload.
    #[inline]
    pub fn next(&mut self, stop: &AtomicBool) -> Step {
        let now = Instant::now();
        if now >= self.end || stop.load(Ordering::Relaxed) {
            return Step::Done;
        }
        if self.at_window_start.is_none() && now >= self.measure_from {
            self.at_window_start = Some((self.seq, now));
        }
        // At a fixed rate the stamp is the time the message was due, not the time it left:
        // a stalled sender's backlog then shows its wait in every message's latency, which
        // corrects for coordinated omission where the pacing happens, at one sample per
        // message on the receiving side.
        let stamped_at = match self.interval {
            Some(iv) => {
                let due = self.start + iv.mul_f64(self.seq as f64);
                if due > now {
                    return Step::Wait(due.min(self.end));
                }
                due
            }
            None => now,
        };
        Stamp::Data {
            publisher: self.id,
            seq: self.seq,
            sent_ns: wall_ns(stamped_at),
        }
        .write(&mut self.buf)
        .expect("buffer holds a stamp");
        Step::Send(self.next_len())
    }

    /// The buffer a [`Step::Send`] refers to.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buf
    }

    /// The payload of the last [`Step::Send`] was taken.
    #[inline]
    pub fn sent(&mut self, live: &Live) {
        self.seq += 1;
        live.count.store(self.seq, Ordering::Relaxed);
    }

    /// The payload of the last [`Step::Send`] was refused this once (the caller backs off).
    pub fn refused(&mut self, why: &str) {
        self.report.refused += 1;
        tracing::debug!(%why, "publish refused");
    }

    /// The end-of-stream marker (after [`Step::Done`]); the run's window ends now.
    pub fn end_marker(&mut self) -> &[u8] {
        self.stopped.get_or_insert_with(Instant::now);
        Stamp::End {
            publisher: self.id,
            total: self.seq,
        }
        .write(&mut self.buf)
        .expect("buffer holds a stamp");
        &self.buf[..self.lo]
    }

    /// What was sent.
    pub fn report(&self) -> PubReport {
        let mut report = self.report;
        report.sent = self.seq;
        if let (Some((first, t0)), Some(stopped)) = (self.at_window_start, self.stopped) {
            report.sent_in_window = self.seq - first;
            report.window = stopped - t0;
        }
        report
    }
}

/// How long the end marker may be refused (momentarily: no route) before the run fails.
pub const END_MARKER_RETRY: Duration = Duration::from_secs(2);

/// Publishes `shape` into `sink` as publisher `id`, then the end-of-stream marker. Stops early
/// when `stop` is set. Bounded by `warmup + duration`. At a fixed rate each message is
/// stamped with the time it was due (start + seq × interval), at max rate with the time it
/// was handed to the sink.
pub fn publish(
    sink: &mut dyn Sink,
    shape: &Shape,
    id: u64,
    live: &Live,
    stop: &AtomicBool,
) -> Result<PubReport, SinkError> {
    let mut p = Pacing::new(shape, id);
    loop {
        match p.next(stop) {
            Step::Done => break,
            Step::Wait(due) => {
                sink.flush()?;
                wait_until(due);
            }
            Step::Send(len) => match sink.send(&p.payload()[..len]) {
                Ok(()) => p.sent(live),
                Err(SinkError::Refused(why)) => {
                    p.refused(&why);
                    // Usually no route (peer reconnecting): don't spin on it.
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(e),
            },
        }
    }
    // The marker must not be lost to a momentary refusal: retry for a short, bounded time.
    let give_up = Instant::now() + END_MARKER_RETRY;
    loop {
        match sink.send(p.end_marker()) {
            Ok(()) => break,
            Err(SinkError::Refused(_)) if Instant::now() < give_up => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => return Err(e),
        }
    }
    sink.flush()?;
    Ok(p.report())
}

/// Rates, loss and latency of what one subscriber received.
#[derive(Debug)]
pub struct Receiver {
    warmup: Duration,
    /// Loss per publisher.
    pub loss: LossTracker,
    /// One-way latency of in-window messages.
    pub latency: Latency,
    first: Option<Instant>,
    last: Option<Instant>,
    in_window: u64,
    bytes_in_window: u64,
    /// Payloads too short to carry a stamp.
    pub unstamped: u64,
    /// Smallest and largest payload seen (0, 0 before any).
    pub sizes: (usize, usize),
    /// Set when every expected end marker is in but messages are still missing.
    drain_until: Option<Instant>,
}

/// How long a receiver keeps listening after the last end marker for messages still missing:
/// in a mesh a relayed copy of the marker can overtake direct copies of earlier messages.
const END_DRAIN: Duration = Duration::from_secs(1);

impl Receiver {
    /// A receiver of `shape`'s traffic: it starts measuring `warmup` after its first
    /// message. One sample per message, whatever its latency: at a fixed rate the publisher
    /// stamps each message with the time it was due ([`publish`]), so the correction for
    /// coordinated omission is already in the stamp.
    pub fn new(shape: &Shape) -> Receiver {
        Receiver {
            warmup: shape.warmup,
            loss: LossTracker::default(),
            latency: Latency::default(),
            first: None,
            last: None,
            in_window: 0,
            bytes_in_window: 0,
            unstamped: 0,
            drain_until: None,
            sizes: (0, 0),
        }
    }

    /// True once `publishers` (> 0) end markers arrived and either nothing is missing or the
    /// drain time after the last marker passed.
    pub fn done(&mut self, publishers: usize) -> bool {
        if publishers == 0 || self.loss.ended() < publishers {
            return false;
        }
        if self.loss.totals().lost == 0 {
            return true;
        }
        let until = *self
            .drain_until
            .get_or_insert_with(|| Instant::now() + END_DRAIN);
        Instant::now() >= until
    }

    /// Accounts one received payload.
    pub fn on_payload(&mut self, payload: &[u8]) {
        match Stamp::read(payload) {
            Ok(Stamp::Data {
                publisher,
                seq,
                sent_ns,
            }) => {
                let now = Instant::now();
                let len = payload.len();
                self.sizes = match self.first {
                    None => (len, len),
                    Some(_) => (self.sizes.0.min(len), self.sizes.1.max(len)),
                };
                let first = *self.first.get_or_insert(now);
                self.loss.record(publisher, seq);
                if now >= first + self.warmup {
                    self.latency.record(wall_ns(now).saturating_sub(sent_ns));
                    self.in_window += 1;
                    self.bytes_in_window += payload.len() as u64;
                    self.last = Some(now);
                }
            }
            Ok(Stamp::End { publisher, total }) => self.loss.end(publisher, total),
            Err(_) => self.unstamped += 1,
        }
    }

    /// `(messages, payload bytes, seconds)` of the measured window.
    pub fn window(&self) -> (u64, u64, f64) {
        let secs = match (self.first, self.last) {
            (Some(f), Some(l)) => l.saturating_duration_since(f + self.warmup).as_secs_f64(),
            _ => 0.0,
        };
        (self.in_window, self.bytes_in_window, secs)
    }
}

/// A live progress line on stderr (hidden when quiet or when stderr is not a terminal).
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A spinner with `prefix`; hidden when `quiet`.
    pub fn new(prefix: &str, quiet: bool) -> Progress {
        let bar = if quiet {
            ProgressBar::hidden()
        } else {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
            b.set_style(
                ProgressStyle::with_template("{spinner} {prefix} [{elapsed}] {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b.set_prefix(prefix.to_string());
            b
        };
        Progress { bar }
    }

    /// Replaces the message.
    pub fn update(&self, msg: String) {
        self.bar.set_message(msg);
        self.bar.tick();
    }

    /// Removes the line.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Runs `f` every 250 ms on a helper thread until the returned guard is dropped.
pub fn every_quarter_second(mut f: impl FnMut() + Send + 'static) -> Ticker {
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let handle = std::thread::spawn(move || {
        while !s.load(Ordering::Acquire) {
            f();
            std::thread::sleep(Duration::from_millis(250));
        }
    });
    Ticker {
        stop,
        handle: Some(handle),
    }
}

/// Stops its helper thread when dropped.
pub struct Ticker {
    stop: std::sync::Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stamp::now_ns;

    fn shape(rate: f64, duration_ms: u64) -> Shape {
        Shape {
            size: 64,
            size_max: 64,
            rate,
            duration: Duration::from_millis(duration_ms),
            warmup: Duration::ZERO,
        }
    }

    /// Issue 15 item 13: a late message costs the receiver one sample, not latency ÷ interval
    /// back-filled ones (a 2 s pause at 20 000 msg/s used to cost 40 000 per message).
    #[test]
    fn a_receiver_records_one_sample_per_message_whatever_its_latency() {
        let mut r = Receiver::new(&shape(20_000.0, 1000));
        let mut buf = [0u8; 64];
        Stamp::Data {
            publisher: 1,
            seq: 0,
            sent_ns: now_ns() - 2_000_000_000,
        }
        .write(&mut buf)
        .unwrap();
        r.on_payload(&buf);
        let p = r.latency.percentiles();
        assert_eq!(p.count, 1, "one message, one sample: {p:?}");
        assert!(p.p50_us >= 2_000_000.0, "{p:?}");
    }

    /// Records the stamps it is given; stalls once, at message `stall_at`; raises `stop` once
    /// it holds `stop_after` stamps (0: never), so a run can end by count, not by the clock.
    struct StallingSink {
        stamps: Vec<u64>,
        stall_at: usize,
        stall: Duration,
        stop: std::sync::Arc<AtomicBool>,
        stop_after: usize,
    }

    impl Sink for StallingSink {
        fn send(&mut self, payload: &[u8]) -> Result<(), SinkError> {
            if let Ok(Stamp::Data { sent_ns, .. }) = Stamp::read(payload) {
                if self.stamps.len() >= 1000 {
                    return Ok(());
                }
                if self.stamps.len() == self.stall_at {
                    std::thread::sleep(self.stall);
                }
                self.stamps.push(sent_ns);
                if self.stamps.len() == self.stop_after {
                    self.stop.store(true, Ordering::Relaxed);
                }
            }
            Ok(())
        }

        fn flush(&mut self) -> Result<(), SinkError> {
            Ok(())
        }
    }

    /// Issue 15 item 13, the publishing side: at a fixed rate the stamps are the due times,
    /// so the messages held up behind a stall carry the wait in their latency.
    #[test]
    fn a_paced_publisher_stamps_the_time_each_message_was_due() {
        let mut sink = StallingSink {
            stamps: Vec::new(),
            stall_at: 3,
            stall: Duration::from_millis(40),
            stop: Default::default(),
            stop_after: 0,
        };
        let rep = publish(
            &mut sink,
            &shape(1000.0, 80),
            7,
            &Live::default(),
            &AtomicBool::new(false),
        )
        .unwrap();
        assert!(rep.sent >= 10, "{rep:?}");
        let s = &sink.stamps;
        for (k, w) in s.windows(2).enumerate() {
            let step = w[1] as i64 - w[0] as i64;
            assert!(
                (step - 1_000_000).abs() <= 1_000,
                "stamps {k} -> {}: {step} ns apart, not the 1 ms interval: {s:?}",
                k + 1
            );
        }
    }

    #[test]
    fn at_max_rate_stamps_are_send_times() {
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let mut sink = StallingSink {
            stamps: Vec::new(),
            stall_at: 2,
            stall: Duration::from_millis(20),
            stop: stop.clone(),
            stop_after: 5,
        };
        let before = now_ns();
        // A run far longer than it needs, ended by the sink after five messages: it used to
        // last 30 ms, and a loaded machine that ran this thread 10 ms late (or overslept the
        // stall) ended it before the fourth message.
        publish(&mut sink, &shape(0.0, 60_000), 7, &Live::default(), &stop).unwrap();
        let s = &sink.stamps;
        assert!(s.len() == 5 && s[0] >= before, "{s:?}");
        assert!(s.windows(2).all(|w| w[1] >= w[0]));
        assert!(s[3] - s[2] >= 20_000_000, "the stall is between 2 and 3");
    }
}
