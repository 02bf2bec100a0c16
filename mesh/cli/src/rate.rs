//! `shoal hz` and `shoal bw`: per window, the sample rate, bandwidth, sizes, inter-arrival
//! jitter percentiles and losses (sequence gaps per writer), as `ros2 topic hz` / `bw` do.
//!
//! [`Meter`] is pure (arrival times come in), so its arithmetic is tested without a mesh;
//! [`run`] feeds it from the observer's readers, taking whole runs of samples at a time
//! (`recv_batch_timeout`) so that the observer keeps up with a fast writer instead of
//! pushing back on it.
//!
//! **Owns:** the statistics and their lines. **Must not touch:** which readers are opened
//! (`reading`).

use crate::observer::Observer;
use crate::text::{micros, rate_bytes};
use crate::CliError;
use serde::Serialize;
use shoal_mesh::topics::{EndpointGuid, Reader};
use shoal_mesh::{Event, Received};
use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

/// Inter-arrival times of one window, µs.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Jitter {
    /// Smallest.
    pub min_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Largest.
    pub max_us: f64,
    /// Standard deviation.
    pub std_us: f64,
}

/// One window's figures (`--json`: one object per line).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Window {
    /// Samples received.
    pub samples: u64,
    /// The window's length, s.
    pub seconds: f64,
    /// Samples per second.
    pub rate_hz: f64,
    /// Payload bytes per second.
    pub bytes_per_sec: f64,
    /// Mean payload size, bytes.
    pub mean_size: f64,
    /// Largest payload, bytes.
    pub max_size: u64,
    /// Inter-arrival times (`None` under two samples).
    pub jitter: Option<Jitter>,
    /// Samples missing by sequence gaps (and reliable readers' lost samples) this window.
    pub lost: u64,
    /// Samples that came again or out of order this window.
    pub out_of_order: u64,
    /// Writers heard this window.
    pub writers: usize,
    /// Since the start: samples, seconds, rate, lost.
    pub total_samples: u64,
    /// Since the start: seconds.
    pub total_seconds: f64,
    /// Since the start: samples per second.
    pub total_rate_hz: f64,
    /// Since the start: samples lost.
    pub total_lost: u64,
}

/// Counts arrivals and sequence gaps; [`Meter::window`] closes a window.
#[derive(Debug)]
pub struct Meter {
    started: Instant,
    window_start: Instant,
    last_arrival: Option<Instant>,
    gaps_ns: Vec<u64>,
    /// Samples that arrived in the same run as the one before them (inter-arrival zero),
    /// counted rather than stored: at millions of samples a second most arrive so.
    same_run: u64,
    samples: u64,
    bytes: u64,
    max_size: u64,
    lost: u64,
    out_of_order: u64,
    last_seq: HashMap<EndpointGuid, u64>,
    writers_now: HashMap<EndpointGuid, ()>,
    total_samples: u64,
    total_lost: u64,
}

/// Most inter-arrival times kept per window (a bound on memory at any rate; past it the
/// percentiles come from the window's first ones).
const MAX_GAPS: usize = 1 << 20;

impl Meter {
    /// A meter whose first window starts at `now`.
    pub fn new(now: Instant) -> Meter {
        Meter {
            started: now,
            window_start: now,
            last_arrival: None,
            gaps_ns: Vec::new(),
            same_run: 0,
            samples: 0,
            bytes: 0,
            max_size: 0,
            lost: 0,
            out_of_order: 0,
            last_seq: HashMap::new(),
            writers_now: HashMap::new(),
            total_samples: 0,
            total_lost: 0,
        }
    }

    /// A sample of `writer` numbered `seq`, `size` bytes, arrived at `now`. A sequence gap
    /// counts the samples in it as lost (the first sample of a writer counts none: what
    /// came before the observer joined is not its loss).
    pub fn sample(&mut self, now: Instant, writer: EndpointGuid, seq: u64, size: usize) {
        self.run(now, writer, seq, 1, size as u64, size as u64);
    }

    /// A run of `count` consecutive samples of `writer` from `first_seq` that arrived
    /// together at `now`, `bytes` in all, the largest `max_size`: one lookup per run, and
    /// the samples after its first count as arriving with no gap.
    pub fn run(
        &mut self,
        now: Instant,
        writer: EndpointGuid,
        first_seq: u64,
        count: u64,
        bytes: u64,
        max_size: u64,
    ) {
        if count == 0 {
            return;
        }
        if let Some(last) = self.last_arrival {
            if self.gaps_ns.len() < MAX_GAPS {
                self.gaps_ns
                    .push(now.saturating_duration_since(last).as_nanos() as u64);
            }
        }
        self.same_run += count - 1;
        self.last_arrival = Some(now);
        self.samples += count;
        self.bytes += bytes;
        self.max_size = self.max_size.max(max_size);
        let last_seq = first_seq + (count - 1);
        match self.last_seq.get_mut(&writer) {
            Some(last) if first_seq > *last => {
                self.lost += first_seq - *last - 1;
                *last = last_seq;
            }
            Some(last) => {
                self.out_of_order += count;
                *last = (*last).max(last_seq);
            }
            None => {
                self.writers_now.insert(writer, ());
                self.last_seq.insert(writer, last_seq);
                return;
            }
        }
        self.writers_now.insert(writer, ());
    }

    /// A reliable reader will never get `n` samples (the writer no longer holds them).
    pub fn lost(&mut self, n: u64) {
        self.lost += n;
    }

    /// Closes the window at `now` and starts the next one.
    pub fn window(&mut self, now: Instant) -> Window {
        let seconds = now
            .saturating_duration_since(self.window_start)
            .as_secs_f64()
            .max(1e-9);
        let zeros = self.same_run;
        let jitter = (self.gaps_ns.len() as u64 + zeros > 0).then(|| {
            let g = &mut self.gaps_ns;
            g.sort_unstable();
            // The sorted inter-arrival times are `zeros` zeros, then `g`.
            let n = g.len() as u64 + zeros;
            let at = |i: u64| {
                if i < zeros {
                    0.0
                } else {
                    g[(i - zeros) as usize] as f64 / 1000.0
                }
            };
            let pct = |p: f64| at(((n - 1) as f64 * p).round() as u64);
            let mean = g.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
            let var = (g.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>()
                + zeros as f64 * mean * mean)
                / n as f64;
            Jitter {
                min_us: at(0),
                p50_us: pct(0.5),
                p90_us: pct(0.9),
                p99_us: pct(0.99),
                max_us: at(n - 1),
                std_us: var.sqrt() / 1000.0,
            }
        });
        self.total_samples += self.samples;
        self.total_lost += self.lost;
        let total_seconds = now
            .saturating_duration_since(self.started)
            .as_secs_f64()
            .max(1e-9);
        let w = Window {
            samples: self.samples,
            seconds,
            rate_hz: self.samples as f64 / seconds,
            bytes_per_sec: self.bytes as f64 / seconds,
            mean_size: if self.samples == 0 {
                0.0
            } else {
                self.bytes as f64 / self.samples as f64
            },
            max_size: self.max_size,
            jitter,
            lost: self.lost,
            out_of_order: self.out_of_order,
            writers: self.writers_now.len(),
            total_samples: self.total_samples,
            total_seconds,
            total_rate_hz: self.total_samples as f64 / total_seconds,
            total_lost: self.total_lost,
        };
        self.window_start = now;
        self.gaps_ns.clear();
        self.same_run = 0;
        self.samples = 0;
        self.bytes = 0;
        self.max_size = 0;
        self.lost = 0;
        self.out_of_order = 0;
        self.writers_now.clear();
        w
    }
}

/// Which figures a line shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    /// `hz`: rate, jitter, losses.
    Hz,
    /// `bw`: bandwidth, sizes, losses.
    Bw,
}

/// One window as text.
pub fn line(w: &Window, show: Show) -> String {
    let lost = format!(
        "lost {} ({} since start){}",
        w.lost,
        w.total_lost,
        if w.out_of_order > 0 {
            format!(", {} out of order", w.out_of_order)
        } else {
            String::new()
        }
    );
    match show {
        Show::Hz => {
            let jitter = w.jitter.map_or_else(
                || "inter-arrival: under two samples".to_owned(),
                |j| {
                    format!(
                        "inter-arrival min {} p50 {} p90 {} p99 {} max {} std {}",
                        micros(j.min_us as u64),
                        micros(j.p50_us as u64),
                        micros(j.p90_us as u64),
                        micros(j.p99_us as u64),
                        micros(j.max_us as u64),
                        micros(j.std_us as u64)
                    )
                },
            );
            format!(
                "rate {:.2} Hz over {:.2} s ({} samples, {} writer(s); average {:.2} Hz)  {jitter}  {lost}",
                w.rate_hz, w.seconds, w.samples, w.writers, w.total_rate_hz
            )
        }
        Show::Bw => format!(
            "bandwidth {} over {:.2} s ({} samples, mean {:.0} B, max {} B)  {lost}",
            rate_bytes(w.bytes_per_sec),
            w.seconds,
            w.samples,
            w.mean_size,
            w.max_size
        ),
    }
}

/// Measures the readers' samples for `windows` windows of `window` (for ever if `None`),
/// printing a line (or a JSON object) per window. Returns the windows.
pub fn run(
    o: &mut Observer,
    readers: &[Reader],
    window: Duration,
    windows: Option<u64>,
    show: Show,
    json: bool,
    out: &mut dyn Write,
) -> Result<Vec<Window>, CliError> {
    let ours = |r: &EndpointGuid| readers.iter().any(|x| x.guid() == *r);
    let mut m = Meter::new(Instant::now());
    let mut next = Instant::now() + window;
    let mut done = Vec::new();
    loop {
        let now = Instant::now();
        if now >= next {
            let w = m.window(now);
            if json {
                writeln!(out, "{}", serde_json::to_string(&w)?)?;
            } else {
                writeln!(out, "{}", line(&w, show))?;
            }
            out.flush()?;
            done.push(w);
            if windows.is_some_and(|n| done.len() as u64 >= n) {
                return Ok(done);
            }
            next += window;
            continue;
        }
        let Some(got) = o.events.recv_batch_timeout(next - now) else {
            continue;
        };
        let at = Instant::now();
        match got {
            Received::Samples(b) if ours(&b.reader()) => {
                let (mut bytes, mut max) = (0u64, 0u64);
                for (_, p) in b.iter() {
                    bytes += p.len() as u64;
                    max = max.max(p.len() as u64);
                }
                m.run(at, b.writer(), b.first_seq(), b.len() as u64, bytes, max);
            }
            Received::Event(Event::Sample {
                reader,
                writer,
                seq,
                payload,
            }) if ours(&reader) => m.sample(at, writer, seq, payload.len()),
            Received::Event(Event::SamplesLost {
                reader,
                first,
                last,
                ..
            }) if ours(&reader) => m.lost(last.saturating_sub(first) + 1),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_counts_rate_sizes_jitter_and_gaps_per_writer() {
        let t0 = Instant::now();
        let mut m = Meter::new(t0);
        let (a, b) = ([1; 16], [2; 16]);
        // Writer a: 1, 2, 5 (3 and 4 lost); writer b starts at 10 (nothing lost before it).
        for (i, (w, seq, size)) in [(a, 1, 10), (a, 2, 20), (b, 10, 30), (a, 5, 40), (a, 4, 1)]
            .into_iter()
            .enumerate()
        {
            m.sample(t0 + Duration::from_millis(100 * i as u64), w, seq, size);
        }
        let w = m.window(t0 + Duration::from_secs(1));
        assert_eq!((w.samples, w.lost, w.out_of_order, w.writers), (5, 2, 1, 2));
        assert!((w.rate_hz - 5.0).abs() < 1e-9);
        assert!((w.bytes_per_sec - 101.0).abs() < 1e-9);
        assert_eq!(w.max_size, 40);
        let j = w.jitter.unwrap();
        assert_eq!(
            (j.min_us, j.p50_us, j.max_us),
            (100_000.0, 100_000.0, 100_000.0)
        );
        assert_eq!(j.std_us, 0.0);
        // The next window starts empty; the totals go on.
        m.sample(t0 + Duration::from_millis(1500), a, 8, 1);
        let w2 = m.window(t0 + Duration::from_secs(2));
        assert_eq!(
            (w2.samples, w2.lost, w2.total_samples, w2.total_lost),
            (1, 2, 6, 4)
        );
        assert!((w2.total_rate_hz - 3.0).abs() < 1e-9);
        assert!(line(&w2, Show::Hz).contains("rate 1.00 Hz"));
        assert!(line(&w2, Show::Bw).contains("bandwidth 1 B/s"));
    }

    #[test]
    fn a_run_counts_as_its_samples_arriving_together() {
        let t0 = Instant::now();
        let mut m = Meter::new(t0);
        let w = [3; 16];
        m.run(t0, w, 1, 4, 40, 10);
        // 5..=7 after 1..=4: no gap; then 10..=11: 8 and 9 lost.
        m.run(t0 + Duration::from_millis(10), w, 5, 3, 30, 10);
        m.run(t0 + Duration::from_millis(30), w, 10, 2, 20, 10);
        let win = m.window(t0 + Duration::from_secs(1));
        assert_eq!((win.samples, win.lost, win.max_size), (9, 2, 10));
        let j = win.jitter.unwrap();
        // Eight inter-arrival times: six zeros (within runs), 10 ms and 20 ms.
        assert_eq!((j.min_us, j.p50_us, j.max_us), (0.0, 0.0, 20_000.0));
        let mean = 30_000.0 / 8.0;
        let var =
            (6.0 * mean * mean + (10_000.0f64 - mean).powi(2) + (20_000.0f64 - mean).powi(2)) / 8.0;
        assert!((j.std_us - var.sqrt()).abs() < 1e-6);
        // Run 10..=11 again: out of order, nothing more lost.
        m.run(t0 + Duration::from_millis(40), w, 10, 2, 20, 10);
        let win = m.window(t0 + Duration::from_secs(2));
        assert_eq!((win.out_of_order, win.lost), (2, 0));
    }

    #[test]
    fn an_empty_window_says_so() {
        let t0 = Instant::now();
        let mut m = Meter::new(t0);
        let w = m.window(t0 + Duration::from_secs(1));
        assert_eq!((w.samples, w.rate_hz, w.jitter), (0, 0.0, None));
        assert!(line(&w, Show::Hz).contains("under two samples"));
    }
}
