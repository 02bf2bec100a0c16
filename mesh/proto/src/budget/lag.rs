//! A deep queue that lags: the link keeps taking frames (its queue is far from full) but
//! delivers them seconds late, so its peer is served by the relays instead.
//!
//! The slow-link rule ([`super::SlowLinkPolicy`]) starts only when a queue is *full*. With the
//! node's default bound (8 MiB, the wire's) a 30 %-lossy link's queue took many seconds of a
//! 4 000 msg/s stream to fill: in the fault suite run at the node's defaults its subscriber
//! got the stream seconds late, nothing reached it from anyone else (its origin still listed
//! it, so no relay carried), and when the heartbeat timeout closed the link the whole
//! backlog was lost (28–59 k messages in the runs that lost; the lossy subscribers got
//! 0.93× what flooding gave them, where flooding's relays carried all along). So an origin's
//! link whose queue has stayed above [`LAG_FLOOR`] for `after` (a quarter of it on a
//! relapse, or on a new link to a peer whose last link lagged: [`LinkBudget::last_slow`]),
//! while another link drains at least twice as fast, is **lagging**: counted
//! (`links_lagging`), reported like a slow
//! link, and its peer unlisted from the own record (`control::slow`) until the queue drains
//! below the floor again and the kernel caught up. Nothing is dropped for it: the queue goes
//! on draining (what the relays already delivered is a duplicate there), and if it fills the
//! slow-link rule takes over as before. Only a queue deeper than the floor can lag, so a
//! bound at or below it (the fault suite's 64 KiB) behaves as before.
//!
//! **Owns:** the backlog clock and the lagging mark. **Must not touch:** the decision that
//! another link outpaces this one (the shard's, which sees every link) or the unlisting
//! (the control core's).

use super::LinkBudget;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A queue deeper than this (bytes) has a backlog: a quarter of a second of a 1 MB/s
/// stream, far more than a link keeping up holds between two writes.
pub const LAG_FLOOR: usize = 256 * 1024;

/// A backlog's pace is judged at most this many times per `after` (each look walks the
/// shard's links).
pub const LAG_LOOKS: u32 = 10;

/// The backlog clock is looked at only by a reservation that takes the queue across a
/// multiple of this many bytes: arithmetic on what the reservation returned, so a saturated
/// link's publishes (64-byte samples at millions a second) pay no atomic load or clock read
/// for it between two crossings.
pub const LAG_STEP: usize = 16 * 1024;

impl LinkBudget {
    /// An originated frame of `n` bytes was queued and the queue now holds `total`: if that
    /// took the queue across a multiple of [`LAG_STEP`] above [`LAG_FLOOR`], starts the
    /// backlog clock if it is not running, and returns true when the link is due a look at
    /// its pace: backlogged for `after` at least, not lagging yet, and not looked at in the
    /// last `after / LAG_LOOKS`.
    pub fn backlog_due(&self, total: usize, n: usize, after: Duration, now: Instant) -> bool {
        if total <= LAG_FLOOR
            || total.saturating_sub(n) / LAG_STEP == total / LAG_STEP
            || self.is_lagging()
        {
            return false;
        }
        let now = self.ms(now);
        let look_at = self.lag_look_at.load(Ordering::Relaxed);
        if look_at != 0 && now < look_at {
            return false;
        }
        let since = match self.backlog_since.load(Ordering::Acquire) {
            0 => self.start_clock(&self.backlog_since, &self.written_at_backlog, now),
            s => s,
        };
        // A relapse (within the relapse window of the end of a slow or lagging period, this
        // link's or its predecessor's: `remember_slow`) waits a quarter as long.
        let due = since + self.allowance_from(since, after).as_millis() as u64;
        if now < due {
            self.lag_look_at.store(due, Ordering::Relaxed);
            return false;
        }
        let step = (after.as_millis() as u64 / u64::from(LAG_LOOKS)).max(1);
        self.lag_look_at.store(now + step, Ordering::Relaxed);
        true
    }

    /// Bytes per millisecond written since the backlog began (0 without one).
    pub fn backlog_rate(&self, now: Instant) -> f64 {
        self.rate_since(&self.backlog_since, &self.written_at_backlog, now)
    }

    /// Marks the link lagging at `now`; true if it was not already.
    pub fn mark_lagging(&self, now: Instant) -> bool {
        let first = !self.lagging.swap(true, Ordering::AcqRel);
        if first {
            self.lagging_since.store(self.ms(now), Ordering::Relaxed);
        }
        first
    }

    /// True while the link is lagging: from [`mark_lagging`](Self::mark_lagging) until its
    /// queue drains below [`LAG_FLOOR`].
    pub fn is_lagging(&self) -> bool {
        self.lagging.load(Ordering::Acquire)
    }

    /// The queue drained below the floor (the writer's release): the backlog, and any lag,
    /// ended. True if a lagging period did (its end is then recorded as a slow period's:
    /// a lag soon after is a relapse).
    pub(super) fn backlog_ended(&self) -> bool {
        if self.backlog_since.load(Ordering::Relaxed) != 0 {
            self.backlog_since.store(0, Ordering::Relaxed);
            self.lag_look_at.store(0, Ordering::Relaxed);
        }
        self.lagging.load(Ordering::Relaxed) && self.lagging.swap(false, Ordering::AcqRel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_millis(1000);

    #[test]
    fn a_backlog_past_the_floor_is_due_a_look_after_a_whole_after_and_then_every_tenth() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let b = LinkBudget::new(8 << 20, t0);
        let deep = b.try_reserve(LAG_FLOOR + 1).unwrap();
        assert!(
            !b.backlog_due(LAG_FLOOR, LAG_FLOOR, AFTER, at(0)),
            "at the floor: no backlog"
        );
        assert!(
            !b.backlog_due(deep, deep, AFTER, at(10)),
            "the clock starts"
        );
        assert!(!b.backlog_due(deep, deep, AFTER, at(1009)));
        assert!(
            !b.backlog_due(LAG_FLOOR + 2000, 100, AFTER, at(1010)),
            "no multiple of LAG_STEP crossed: not looked at"
        );
        assert!(
            b.backlog_due(deep, deep, AFTER, at(1010)),
            "deep for `after`"
        );
        assert!(
            !b.backlog_due(deep, deep, AFTER, at(1050)),
            "looked at 40 ms ago"
        );
        assert!(
            b.backlog_due(deep, deep, AFTER, at(1110)),
            "a tenth of `after` later"
        );
        // What it wrote since the backlog began is its pace.
        b.written(100_000, at(1110));
        assert!((b.backlog_rate(at(1110)) - 100_000.0 / 1100.0).abs() < 1.0);
        assert!(
            b.mark_lagging(at(1110)) && !b.mark_lagging(at(1110)),
            "marked once"
        );
        assert!(b.is_lagging() && b.unlists_peer() && !b.is_slow_or_soon());
        assert!(
            !b.backlog_due(deep, deep, AFTER, at(2000)),
            "lagging: nothing to look at"
        );
        assert_eq!(
            b.last_slow(),
            Some(1111),
            "a successor remembers a lag like a slow period"
        );
        // Drained below the floor: the backlog and the lag end (reported like the end of a
        // slow period), and the clock starts again.
        assert!(b.release(LAG_FLOOR + 1), "a lagging period ended");
        b.slow_ended(at(2000));
        assert!(!b.is_lagging() && !b.unlists_peer());
        assert_eq!(b.backlog_rate(at(2000)), 0.0);
        // A backlog again within the relapse window: judged after a quarter of `after`.
        let deep = b.try_reserve(LAG_FLOOR + 1).unwrap();
        assert!(!b.backlog_due(deep, deep, AFTER, at(2100)));
        assert!(!b.backlog_due(deep, deep, AFTER, at(2349)));
        assert!(b.backlog_due(deep, deep, AFTER, at(2350)), "a relapse");
        // Long after: a whole `after` again.
        b.release(LAG_FLOOR + 1);
        let deep = b.try_reserve(LAG_FLOOR + 1).unwrap();
        assert!(!b.backlog_due(deep, deep, AFTER, at(20_000)));
        assert!(!b.backlog_due(deep, deep, AFTER, at(20_999)));
        assert!(b.backlog_due(deep, deep, AFTER, at(21_000)));
    }

    #[test]
    fn a_backlog_that_dips_below_the_floor_starts_its_clock_again() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let b = LinkBudget::new(8 << 20, t0);
        let deep = b.try_reserve(LAG_FLOOR + 1000).unwrap();
        assert!(!b.backlog_due(deep, deep, AFTER, at(0)));
        b.release(2000);
        let deep = b.try_reserve(2000).unwrap();
        assert!(
            !b.backlog_due(deep, deep, AFTER, at(1500)),
            "a queue that drained below the floor caught up meanwhile"
        );
        assert!(b.backlog_due(deep, deep, AFTER, at(2500)));
    }
}
