//! Resident memory of this process during a run, sampled from `/proc/self/statm` on a light
//! helper thread, next to the configured queue bounds: the evidence for "sender RSS stays flat
//! (within the configured queue bound) during a blast".
//!
//! The sample is process-wide: when several nodes run in one process (`demo`, `bench`) it
//! covers all of them, senders and receivers alike.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::traffic::Shape;

/// Time between two samples.
pub const PERIOD: Duration = Duration::from_millis(250);

/// Why a `statm` text could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StatmError {
    /// Fewer than two fields.
    #[error("statm has no resident field")]
    Missing,
    /// The resident field is not a number.
    #[error("statm resident field is not a number: {0:?}")]
    NotANumber(String),
}

/// Resident KiB from the text of `/proc/<pid>/statm` (`size resident shared ...`, in pages).
pub fn parse_statm_kib(text: &str, page_bytes: u64) -> Result<u64, StatmError> {
    let field = text
        .split_ascii_whitespace()
        .nth(1)
        .ok_or(StatmError::Missing)?;
    let pages: u64 = field
        .parse()
        .map_err(|_| StatmError::NotANumber(field.to_owned()))?;
    Ok(pages.saturating_mul(page_bytes) / 1024)
}

/// Reads this process's RSS; the file stays open and is re-read from offset 0, so a sample
/// allocates nothing.
struct StatmReader {
    file: File,
    page_bytes: u64,
    buf: [u8; 256],
}

impl StatmReader {
    fn open() -> std::io::Result<StatmReader> {
        // SAFETY: sysconf only reads a system constant; _SC_PAGESIZE is a valid name.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        Ok(StatmReader {
            file: File::open("/proc/self/statm")?,
            page_bytes: if page > 0 { page as u64 } else { 4096 },
            buf: [0; 256],
        })
    }

    fn read_kib(&mut self) -> Option<u64> {
        let n = self.file.read_at(&mut self.buf, 0).ok()?;
        let text = std::str::from_utf8(&self.buf[..n]).ok()?;
        parse_statm_kib(text, self.page_bytes).ok()
    }
}

/// What the run's queues may hold at most, from the nodes' settings: the reference for RSS
/// growth. It counts queued message bytes only (no allocator or buffer-sharing overhead).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct QueueBound {
    /// `max_outbound_queue_bytes` of the nodes (one queue per link end).
    pub max_outbound_queue_bytes: usize,
    /// Outbound queues in this process (each link has one at each end it has here).
    pub outbound_queues: usize,
    /// Ingress (publish) queue capacity, messages, per publishing node.
    pub publish_queue_msgs: usize,
    /// Publishing nodes in this process.
    pub publishers: usize,
    /// Event queue capacity, messages, per subscribing node.
    pub event_queue_msgs: usize,
    /// Subscribing nodes in this process.
    pub subscribers: usize,
    /// Sum of the above in bytes: outbound queues, plus the message queues filled with
    /// messages of `wire_bytes` (a subscriber's at most its `event_queue_bytes`).
    pub total_bytes: u64,
}

impl QueueBound {
    /// The bound for a run whose nodes use `max_outbound_queue_bytes` and loadgen's node
    /// options (the `NodeOptions` defaults: loadgen does not change the queue capacities).
    pub fn new(
        max_outbound_queue_bytes: usize,
        outbound_queues: usize,
        publishers: usize,
        subscribers: usize,
        shape: &Shape,
    ) -> QueueBound {
        let wire_bytes = shape.size_max.max(shape.size) + shoal_mesh::wire::DATA_HEADER_LEN;
        let opts = shoal_mesh::NodeOptions::default();
        // A subscriber's queue is full at its event count or at its payload bytes.
        let event_queue = (opts.event_queue_capacity as u64 * wire_bytes as u64)
            .min(opts.event_queue_bytes as u64);
        QueueBound {
            max_outbound_queue_bytes,
            outbound_queues,
            publish_queue_msgs: opts.publish_queue_capacity,
            publishers,
            event_queue_msgs: opts.event_queue_capacity,
            subscribers,
            total_bytes: max_outbound_queue_bytes as u64 * outbound_queues as u64
                + opts.publish_queue_capacity as u64 * publishers as u64 * wire_bytes as u64
                + event_queue * subscribers as u64,
        }
    }
}

/// RSS over a run, KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Memory {
    /// RSS when the warm-up ended (the first sample of the measured window).
    pub rss_warmup_kib: u64,
    /// Largest RSS in the measured window (end of warm-up to end of publishing).
    pub rss_max_kib: u64,
    /// Largest RSS in the first half of the window.
    pub rss_max_first_half_kib: Option<u64>,
    /// Largest RSS in the second half of the window: about the first half's when memory is
    /// flat, above it when it keeps growing.
    pub rss_max_second_half_kib: Option<u64>,
    /// RSS at the end of the run (after the subscribers drained, nodes still up).
    pub rss_end_kib: u64,
    /// `rss_max_kib - rss_warmup_kib`: what the measured window added.
    pub rss_growth_kib: u64,
    /// Samples taken (one every `sample_period_ms`, plus one at the end of the warm-up, at
    /// the middle and end of the window, and at the end of the run).
    pub samples: u64,
    /// Sampling period, ms.
    pub sample_period_ms: u64,
    /// Nodes in the process the samples cover (RSS is process-wide).
    pub nodes_in_process: usize,
    /// What the queues may hold (Shoal runs only).
    pub queue_bound: Option<QueueBound>,
}

impl Memory {
    /// One human-readable line (two with a queue bound).
    pub fn line(&self) -> String {
        let half = |v: Option<u64>| v.map_or("-".to_owned(), |k| k.to_string());
        let mut s = format!(
            "rss KiB (whole process, {} node(s)): warm-up {} | max {} (1st half {}, 2nd half {}) | end {} | growth +{} ({} samples, every {} ms)",
            self.nodes_in_process,
            self.rss_warmup_kib,
            self.rss_max_kib,
            half(self.rss_max_first_half_kib),
            half(self.rss_max_second_half_kib),
            self.rss_end_kib,
            self.rss_growth_kib,
            self.samples,
            self.sample_period_ms
        );
        if let Some(b) = &self.queue_bound {
            s.push_str(&format!(
                "\n   queue bound: {} KiB per outbound queue x {} + ingress {} msgs x {} + events {} msgs x {} = {} KiB",
                b.max_outbound_queue_bytes / 1024,
                b.outbound_queues,
                b.publish_queue_msgs,
                b.publishers,
                b.event_queue_msgs,
                b.subscribers,
                b.total_bytes / 1024
            ));
        }
        s
    }
}

/// Where a sample falls in the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Warmup,
    FirstHalf,
    SecondHalf,
    /// After publishing ended (drain).
    After,
}

/// The samples' running totals (no per-sample storage: a run of any length costs the same).
#[derive(Debug, Default, Clone, Copy)]
struct Track {
    warmup: Option<u64>,
    first: Option<u64>,
    second: Option<u64>,
    last: Option<u64>,
    samples: u64,
}

impl Track {
    fn record(&mut self, kib: u64, phase: Phase) {
        self.samples += 1;
        self.last = Some(kib);
        let half = match phase {
            Phase::Warmup | Phase::After => return,
            Phase::FirstHalf => &mut self.first,
            Phase::SecondHalf => &mut self.second,
        };
        self.warmup.get_or_insert(kib);
        *half = Some(half.map_or(kib, |m| m.max(kib)));
    }

    /// The totals, if the window was reached and sampled.
    fn memory(&self, nodes_in_process: usize) -> Option<Memory> {
        let warm = self.warmup?;
        let max = self.first.max(self.second).unwrap_or(warm);
        Some(Memory {
            rss_warmup_kib: warm,
            rss_max_kib: max,
            rss_max_first_half_kib: self.first,
            rss_max_second_half_kib: self.second,
            rss_end_kib: self.last.unwrap_or(max),
            rss_growth_kib: max.saturating_sub(warm),
            samples: self.samples,
            sample_period_ms: PERIOD.as_millis() as u64,
            nodes_in_process,
            queue_bound: None,
        })
    }
}

/// The instants that split a run: end of warm-up, middle and end of the measured window.
#[derive(Debug, Clone, Copy)]
struct Marks {
    warmup_end: Instant,
    mid: Instant,
    window_end: Instant,
}

impl Marks {
    fn phase(&self, now: Instant, window_end_taken: bool) -> Phase {
        if now < self.warmup_end {
            Phase::Warmup
        } else if now < self.mid {
            Phase::FirstHalf
        } else if now < self.window_end || !window_end_taken {
            // The first sample at or past the end closes the window.
            Phase::SecondHalf
        } else {
            Phase::After
        }
    }

    /// The next mark not yet sampled.
    fn next(&self, taken: usize) -> Option<Instant> {
        [self.warmup_end, self.mid, self.window_end]
            .get(taken)
            .copied()
    }
}

/// Samples RSS every [`PERIOD`] on a helper thread until [`RssSampler::finish`], plus one
/// sample exactly at the end of the warm-up, the middle and the end of the window.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Track>>,
    nodes_in_process: usize,
}

impl RssSampler {
    /// Starts sampling a run whose measured window is `duration` from `warmup_end`. `None`
    /// (with a warning) when `/proc/self/statm` cannot be opened (not Linux, no procfs).
    pub fn start(
        warmup_end: Instant,
        duration: Duration,
        nodes_in_process: usize,
    ) -> Option<RssSampler> {
        let mut reader = match StatmReader::open() {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "no /proc/self/statm: RSS not sampled");
                return None;
            }
        };
        let marks = Marks {
            warmup_end,
            mid: warmup_end + duration / 2,
            window_end: warmup_end + duration,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let spawned = std::thread::Builder::new()
            .name("rss-sampler".into())
            .spawn(move || {
                let mut track = Track::default();
                let mut next = Instant::now();
                let mut marks_taken = 0;
                loop {
                    let now = Instant::now();
                    let finishing = s.load(Ordering::Acquire);
                    let mark_due = marks.next(marks_taken).is_some_and(|m| now >= m);
                    if finishing || mark_due || now >= next {
                        if let Some(kib) = reader.read_kib() {
                            track.record(kib, marks.phase(now, marks_taken >= 3));
                        }
                        while marks.next(marks_taken).is_some_and(|m| now >= m) {
                            marks_taken += 1;
                        }
                        if finishing {
                            return track;
                        }
                        while next <= now {
                            next += PERIOD;
                        }
                    }
                    let due = marks.next(marks_taken).map_or(next, |m| m.min(next));
                    // `finish` unparks the thread, so it does not wait out the period.
                    std::thread::park_timeout(due.saturating_duration_since(Instant::now()));
                }
            });
        match spawned {
            Ok(h) => Some(RssSampler {
                stop,
                handle: Some(h),
                nodes_in_process,
            }),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the RSS sampler");
                None
            }
        }
    }

    /// [`start`](Self::start) for a run of `shape` beginning now.
    pub fn start_run(shape: &Shape, nodes_in_process: usize) -> Option<RssSampler> {
        RssSampler::start(
            Instant::now() + shape.warmup,
            shape.duration,
            nodes_in_process,
        )
    }

    /// Takes a last sample, stops the thread and returns the totals, compared to `bound`
    /// (`None` if the run ended before its warm-up did, or no sample could be read).
    pub fn finish(mut self, bound: Option<QueueBound>) -> Option<Memory> {
        let h = self.handle.take()?;
        self.stop.store(true, Ordering::Release);
        h.thread().unpark();
        let mut m = h.join().ok()?.memory(self.nodes_in_process)?;
        m.queue_bound = bound;
        Some(m)
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            self.stop.store(true, Ordering::Release);
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statm_resident_field_in_kib() {
        assert_eq!(parse_statm_kib("1000 250 30 5 0 400 0\n", 4096), Ok(1000));
        assert_eq!(parse_statm_kib("9 3", 16384), Ok(48));
        assert_eq!(parse_statm_kib("1000", 4096), Err(StatmError::Missing));
        assert_eq!(parse_statm_kib("", 4096), Err(StatmError::Missing));
        assert_eq!(
            parse_statm_kib("1000 x12 3", 4096),
            Err(StatmError::NotANumber("x12".into()))
        );
    }

    #[test]
    fn track_reports_window_only() {
        let mut t = Track::default();
        t.record(900, Phase::Warmup);
        t.record(5000, Phase::Warmup); // warm-up peak: not part of the window
        assert_eq!(t.memory(2), None);
        t.record(1000, Phase::FirstHalf);
        t.record(1300, Phase::FirstHalf);
        t.record(1100, Phase::SecondHalf);
        t.record(1200, Phase::SecondHalf);
        t.record(7000, Phase::After); // drain: only the end value
        t.record(800, Phase::After);
        let m = t.memory(2).expect("window sampled");
        assert_eq!(m.rss_warmup_kib, 1000);
        assert_eq!(m.rss_max_kib, 1300);
        assert_eq!(m.rss_max_first_half_kib, Some(1300));
        assert_eq!(m.rss_max_second_half_kib, Some(1200));
        assert_eq!(m.rss_end_kib, 800);
        assert_eq!(m.rss_growth_kib, 300);
        assert_eq!(m.samples, 8);
        assert_eq!(m.nodes_in_process, 2);
    }

    #[test]
    fn marks_split_the_window() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let m = Marks {
            warmup_end: t0 + s,
            mid: t0 + 2 * s,
            window_end: t0 + 3 * s,
        };
        assert_eq!(m.phase(t0, false), Phase::Warmup);
        assert_eq!(m.phase(t0 + s, false), Phase::FirstHalf);
        assert_eq!(m.phase(t0 + 2 * s, false), Phase::SecondHalf);
        // The first sample past the end still closes the window; later ones are drain.
        assert_eq!(m.phase(t0 + 4 * s, false), Phase::SecondHalf);
        assert_eq!(m.phase(t0 + 4 * s, true), Phase::After);
        assert_eq!(m.next(0), Some(t0 + s));
        assert_eq!(m.next(2), Some(t0 + 3 * s));
        assert_eq!(m.next(3), None);
    }

    #[test]
    fn queue_bound_adds_queues() {
        let d = shoal_mesh::NodeOptions::default();
        let shape = Shape {
            size: 1024,
            size_max: 1024,
            rate: 0.0,
            duration: Duration::from_secs(1),
            warmup: Duration::ZERO,
        };
        let b = QueueBound::new(8 << 20, 2, 1, 1, &shape);
        assert_eq!(b.outbound_queues, 2);
        assert_eq!(
            b.total_bytes,
            2 * (8 << 20)
                + d.publish_queue_capacity as u64 * 1082
                + (d.event_queue_capacity as u64 * 1082).min(d.event_queue_bytes as u64)
        );
    }

    #[test]
    fn sampler_sees_this_process() {
        // Warm-up already over: every sample is in the window, and finish takes one at once.
        let s = RssSampler::start(Instant::now(), Duration::from_secs(3600), 1)
            .expect("procfs on Linux");
        let m = s.finish(None).expect("sampled");
        assert!(m.samples >= 1);
        assert!(m.rss_warmup_kib > 0);
        assert!(m.rss_max_kib >= m.rss_warmup_kib);
        assert!(m.rss_end_kib > 0);
    }

    #[test]
    fn sampler_warmup_not_reached() {
        let s = RssSampler::start(
            Instant::now() + Duration::from_secs(3600),
            Duration::from_secs(1),
            1,
        )
        .expect("procfs");
        assert_eq!(s.finish(None), None);
    }
}
