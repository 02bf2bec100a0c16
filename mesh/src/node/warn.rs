//! Aggregated warnings: input an attacker or a broken peer controls (refused connections,
//! junk datagrams, bad handshakes) must not turn into one log line each, or a flood of it
//! becomes a flood of disk writes. Per kind of warning, the first occurrence is logged with
//! its detail; later ones within [`WARN_INTERVAL`] are only counted, and the count is logged
//! once the interval is over ("N more 'connection table full' in the last 10 s"). So each kind
//! writes at most two lines per interval, whatever the input rate.
//!
//! [`WarnLimiter`] is pure logic over a caller-supplied clock; the control plane owns one and
//! flushes it on its timer, at [`WarnLimiter::next_flush`].

use std::time::{Duration, Instant};

/// Length of one aggregation window.
pub(crate) const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// What to do with one occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Log this occurrence. `earlier` occurrences of a window that ended without a
    /// [`WarnLimiter::flush`] are to be reported first.
    Log {
        /// Suppressed occurrences not reported yet.
        earlier: u64,
    },
    /// Count it only.
    Quiet,
}

/// A count of suppressed occurrences of one kind, due for its summary line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Summary {
    /// The kind of warning.
    pub(crate) key: &'static str,
    /// Occurrences not logged in the window.
    pub(crate) count: u64,
}

#[derive(Debug)]
struct Window {
    key: &'static str,
    ends: Instant,
    suppressed: u64,
}

/// Per-kind aggregation windows (a handful of kinds: a linear scan is enough).
#[derive(Debug)]
pub(crate) struct WarnLimiter {
    interval: Duration,
    windows: Vec<Window>,
}

impl WarnLimiter {
    pub(crate) fn new(interval: Duration) -> WarnLimiter {
        WarnLimiter {
            interval,
            windows: Vec::new(),
        }
    }

    /// One occurrence of `key` at `now`.
    pub(crate) fn admit(&mut self, key: &'static str, now: Instant) -> Admit {
        let interval = self.interval;
        match self.windows.iter_mut().find(|w| w.key == key) {
            Some(w) if now < w.ends => {
                w.suppressed += 1;
                Admit::Quiet
            }
            Some(w) => {
                let earlier = std::mem::take(&mut w.suppressed);
                w.ends = now + interval;
                Admit::Log { earlier }
            }
            None => {
                self.windows.push(Window {
                    key,
                    ends: now + interval,
                    suppressed: 0,
                });
                Admit::Log { earlier: 0 }
            }
        }
    }

    /// Closes the windows that ended by `now`: their counts, where non-zero, are due as
    /// summary lines. The next occurrence of a closed kind is logged again.
    pub(crate) fn flush(&mut self, now: Instant) -> Vec<Summary> {
        let mut due = Vec::new();
        self.windows.retain(|w| {
            if now < w.ends {
                return true;
            }
            if w.suppressed > 0 {
                due.push(Summary {
                    key: w.key,
                    count: w.suppressed,
                });
            }
            false
        });
        due
    }

    /// When [`flush`](Self::flush) next has something to do (`None`: no window open), so
    /// the owner's timer wakes for it and not on a period.
    pub(crate) fn next_flush(&self) -> Option<Instant> {
        self.windows.iter().map(|w| w.ends).min()
    }

    /// The window length (for the summary line).
    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }
}

/// Logs one occurrence of `key` through `limiter` at warn level with `detail`.
macro_rules! warn_limited {
    ($limiter:expr, $key:expr, $($detail:tt)*) => {{
        let key: &'static str = $key;
        let mut l = $limiter;
        match l.admit(key, std::time::Instant::now()) {
            $crate::node::warn::Admit::Log { earlier } => {
                if earlier > 0 {
                    tracing::warn!(
                        "{earlier} more '{key}' in the last {} s",
                        l.interval().as_secs()
                    );
                }
                tracing::warn!($($detail)*, "{key}");
            }
            $crate::node::warn::Admit::Quiet => {}
        }
    }};
}
pub(crate) use warn_limited;

/// Writes the summary lines due at `now`.
pub(crate) fn flush_summaries(limiter: &mut WarnLimiter, now: Instant) {
    let secs = limiter.interval().as_secs();
    for s in limiter.flush(now) {
        tracing::warn!("{} more '{}' in the last {secs} s", s.count, s.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn first_is_logged_repeats_are_counted_then_summarised() {
        let t0 = Instant::now();
        let mut l = WarnLimiter::new(10 * S);
        assert_eq!(l.admit("full", t0), Admit::Log { earlier: 0 });
        for i in 0..1000 {
            assert_eq!(l.admit("full", t0 + S * i / 200), Admit::Quiet);
        }
        // Another kind has its own window.
        assert_eq!(l.admit("junk", t0 + S), Admit::Log { earlier: 0 });
        assert_eq!(l.flush(t0 + 9 * S), vec![]);
        assert_eq!(
            l.flush(t0 + 10 * S),
            vec![Summary {
                key: "full",
                count: 1000
            }]
        );
        // Closed: the next one is logged again; "junk" had nothing to summarise.
        assert_eq!(l.admit("full", t0 + 12 * S), Admit::Log { earlier: 0 });
        assert_eq!(l.flush(t0 + 11 * S + 10 * S), vec![]);
    }

    #[test]
    fn the_next_flush_is_the_earliest_open_window_and_none_when_all_closed() {
        let t0 = Instant::now();
        let mut l = WarnLimiter::new(10 * S);
        assert_eq!(l.next_flush(), None, "nothing to flush: no timer needed");
        l.admit("a", t0 + 2 * S);
        l.admit("b", t0 + S);
        assert_eq!(l.next_flush(), Some(t0 + 11 * S));
        l.flush(t0 + 11 * S);
        assert_eq!(l.next_flush(), Some(t0 + 12 * S));
        l.flush(t0 + 12 * S);
        assert_eq!(l.next_flush(), None);
    }

    #[test]
    fn a_window_that_ended_unflushed_reports_its_count_with_the_next_line() {
        let t0 = Instant::now();
        let mut l = WarnLimiter::new(10 * S);
        assert_eq!(l.admit("k", t0), Admit::Log { earlier: 0 });
        assert_eq!(l.admit("k", t0 + S), Admit::Quiet);
        assert_eq!(l.admit("k", t0 + 2 * S), Admit::Quiet);
        assert_eq!(l.admit("k", t0 + 10 * S), Admit::Log { earlier: 2 });
        assert_eq!(l.admit("k", t0 + 11 * S), Admit::Quiet);
    }

    #[test]
    fn lines_stay_bounded_whatever_the_rate() {
        // 100 000 occurrences per second for a minute, flushed every 100 ms: at most two
        // lines per 10 s window.
        let t0 = Instant::now();
        let mut l = WarnLimiter::new(10 * S);
        let mut lines = 0u64;
        let mut counted = 0u64;
        for ms in 0..60_000u64 {
            let now = t0 + Duration::from_millis(ms);
            for _ in 0..100 {
                if let Admit::Log { earlier } = l.admit("flood", now) {
                    lines += 1 + u64::from(earlier > 0);
                    counted += 1 + earlier;
                }
            }
            if ms % 100 == 0 {
                for s in l.flush(now) {
                    lines += 1;
                    counted += s.count;
                }
            }
        }
        for s in l.flush(t0 + Duration::from_secs(3600)) {
            lines += 1;
            counted += s.count;
        }
        assert!(lines <= 2 * 7, "{lines} lines");
        assert_eq!(counted, 6_000_000, "every occurrence is accounted for");
    }
}
