//! A deep backlog that lags: the link keeps taking frames (its queue is far from full) but
//! delivers them seconds late, so its peer is served by the relays instead.
//!
//! The slow-link rule ([`super::SlowLinkPolicy`]) starts only when a queue is *full*. With the
//! node's default bound (8 MiB, the wire's) a 30 %-lossy link's queue took many seconds of a
//! 4 000 msg/s stream to fill: in the fault suite run at the node's defaults its subscriber
//! got the stream seconds late, nothing reached it from anyone else (its origin still listed
//! it, so no relay carried), and when the heartbeat timeout closed the link the whole
//! backlog was lost (28–59 k messages in the runs that lost; the lossy subscribers got
//! 0.93× what flooding gave them, where flooding's relays carried all along; a link still
//! delivering is no longer closed for its silence: `link::DELIVERING_GRACE`).
//!
//! The backlog is what the queue here holds *and* what the link's kernel holds unacknowledged
//! (its send queue, sampled by the link's driver: [`LinkBudget::set_send_queue`]). The kernel
//! comes first: a write returns once the kernel took the bytes, so while a lossy link's
//! kernel buffer fills (1.9 MB, 1.5 s of the fault suite's stream, with nothing queued here)
//! the queue here stays empty. A link whose backlog has stayed above [`LAG_FLOOR`] for
//! `after` (a quarter of it on a relapse, or on a new link to a peer whose last link lagged:
//! [`LinkBudget::last_slow`]), while originated frames go on it and another link drains at
//! least twice as fast as it delivers, is **lagging**: counted (`links_lagging`), reported like a slow link,
//! and its peer unlisted from the own record (`control::slow`) until the backlog drains below
//! the floor again and the kernel caught up. Nothing is dropped for it: the queue goes on
//! draining (what the relays already delivered is a duplicate there), and if it fills the
//! slow-link rule takes over as before.
//!
//! Looked at only when the driver samples the kernel (after a write, at most every
//! [`super::SEND_QUEUE_SAMPLE`]; each time the link's timer fires, so a writer stuck on a full
//! socket is looked at too), never on a publish: a saturated link's publishes pay nothing for
//! it.
//!
//! **Owns:** the backlog clock and the lagging mark. **Must not touch:** the decision that
//! another link outpaces this one or that originated frames go on it (the shard's, which
//! sees every link and every queued frame) or the unlisting (the control core's).

use super::LinkBudget;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A backlog (queued here and in the kernel) deeper than this (bytes) may lag: a quarter of a
/// second of a 1 MB/s stream, far more than a link keeping up holds between two writes.
pub const LAG_FLOOR: usize = 256 * 1024;

/// A backlog's pace is judged at most this many times per `after` (each look walks the
/// shard's links).
pub const LAG_LOOKS: u32 = 10;

impl LinkBudget {
    /// The link's backlog: bytes queued here and the kernel's send queue at its last sample.
    pub fn backlog(&self) -> usize {
        self.queued() + self.send_queue()
    }

    /// The driver just sampled the kernel ([`set_send_queue`](Self::set_send_queue)): if the
    /// backlog is past [`LAG_FLOOR`], starts the backlog clock if it is not running, and
    /// returns true when the link is due a look at its pace: backlogged for `after` at least,
    /// not lagging yet, and not looked at in the last `after / LAG_LOOKS`.
    pub fn backlog_due(&self, after: Duration, now: Instant) -> bool {
        if self.backlog() <= LAG_FLOOR || self.is_lagging() {
            return false;
        }
        let now = self.ms(now);
        let look_at = self.lag_look_at.load(Ordering::Relaxed);
        if look_at != 0 && now < look_at {
            return false;
        }
        let since = match self.backlog_since.load(Ordering::Acquire) {
            0 => self.start_clock(
                &self.backlog_since,
                &self.delivered_at_backlog,
                self.delivered(),
                now,
            ),
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

    /// Bytes per millisecond delivered since the backlog began (0 without one): what the
    /// link's peer acknowledged, not what the writer handed the kernel, which takes a
    /// lossy link's stream at the publisher's pace until its buffer is full (1.5 s of the
    /// fault suite's stream), so by that pace no link lagged before.
    pub fn backlog_rate(&self, now: Instant) -> f64 {
        self.rate_since(
            &self.backlog_since,
            &self.delivered_at_backlog,
            self.delivered(),
            now,
        )
    }

    /// Bytes the link's peer has acknowledged, as far as the driver's samples tell: written
    /// to the socket, less what the kernel held at the last sample.
    pub fn delivered(&self) -> u64 {
        let written = self.written_total.load(Ordering::Relaxed);
        written.saturating_sub(self.send_queue() as u64)
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
    /// backlog drains below [`LAG_FLOOR`].
    pub fn is_lagging(&self) -> bool {
        self.lagging.load(Ordering::Acquire)
    }

    /// Ends the backlog, and any lag, if what is queued here (`queued`) and in the kernel at
    /// its last sample is below the floor (the writer's release, the driver's sample). True if
    /// a lagging period ended (its end is then recorded as a slow period's by the caller: a
    /// lag soon after is a relapse).
    pub(super) fn backlog_drained(&self, queued: usize) -> bool {
        if queued + self.send_queue() >= LAG_FLOOR {
            return false;
        }
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
        assert!(!b.set_send_queue(LAG_FLOOR));
        assert!(!b.backlog_due(AFTER, at(0)), "at the floor: no backlog");
        // Nothing queued here, the kernel holds more than the floor (a write returns once the
        // kernel took the bytes): a backlog, and its clock starts.
        b.written(LAG_FLOOR + 1, at(5));
        assert!(!b.set_send_queue(LAG_FLOOR + 1));
        assert_eq!(b.delivered(), 0);
        assert_eq!(b.backlog(), LAG_FLOOR + 1);
        assert!(!b.backlog_due(AFTER, at(10)), "the clock starts");
        assert!(!b.backlog_due(AFTER, at(1009)));
        // Half here, half in the kernel: still one backlog.
        let half = b.try_reserve(LAG_FLOOR / 2 + 1).unwrap();
        assert!(!b.set_send_queue(LAG_FLOOR / 2));
        assert!(b.backlog_due(AFTER, at(1010)), "deep for `after`");
        assert!(!b.backlog_due(AFTER, at(1050)), "looked at 40 ms ago");
        assert!(b.backlog_due(AFTER, at(1110)), "a tenth of `after` later");
        // Its pace is what it delivered since the backlog began: not what the kernel took
        // and holds.
        b.written(100_000, at(1110));
        assert!(!b.set_send_queue(LAG_FLOOR / 2 + 100_000));
        let delivered = (LAG_FLOOR + 1 - LAG_FLOOR / 2) as f64;
        assert!((b.backlog_rate(at(1110)) - delivered / 1100.0).abs() < 0.01);
        assert!(
            b.mark_lagging(at(1110)) && !b.mark_lagging(at(1110)),
            "marked once"
        );
        assert!(b.is_lagging() && b.unlists_peer() && !b.is_slow_or_soon());
        assert!(
            !b.backlog_due(AFTER, at(2000)),
            "lagging: nothing to look at"
        );
        assert_eq!(
            b.last_slow(),
            Some(1111),
            "a successor remembers a lag like a slow period"
        );
        // Written out here, but the kernel still holds it: still lagging.
        assert!(!b.set_send_queue(LAG_FLOOR + 1));
        assert!(!b.release(half), "the kernel still holds the backlog");
        assert!(b.is_lagging());
        // The kernel delivered it: the backlog and the lag end (reported like the end of a
        // slow period), and the clock starts again.
        assert!(b.set_send_queue(1000), "a lagging period ended");
        b.slow_ended(at(2000));
        assert!(!b.is_lagging() && !b.unlists_peer());
        assert_eq!(b.backlog_rate(at(2000)), 0.0);
        // A backlog again within the relapse window: judged after a quarter of `after`.
        let deep = b.try_reserve(LAG_FLOOR + 1).unwrap();
        assert!(!b.backlog_due(AFTER, at(2100)));
        assert!(!b.backlog_due(AFTER, at(2349)));
        assert!(b.backlog_due(AFTER, at(2350)), "a relapse");
        // Long after: a whole `after` again.
        b.release(deep);
        b.try_reserve(LAG_FLOOR + 1).unwrap();
        assert!(!b.backlog_due(AFTER, at(20_000)));
        assert!(!b.backlog_due(AFTER, at(20_999)));
        assert!(b.backlog_due(AFTER, at(21_000)));
    }

    #[test]
    fn a_backlog_that_dips_below_the_floor_starts_its_clock_again() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let b = LinkBudget::new(8 << 20, t0);
        b.set_send_queue(LAG_FLOOR + 1000);
        assert!(!b.backlog_due(AFTER, at(0)));
        // The kernel caught up meanwhile (a sample the writer or the timer took).
        b.set_send_queue(2000);
        b.set_send_queue(LAG_FLOOR + 1000);
        assert!(!b.backlog_due(AFTER, at(1500)), "caught up meanwhile");
        assert!(b.backlog_due(AFTER, at(2500)));
        // The queue here drained below the floor too (the writer's release).
        b.set_send_queue(0);
        let deep = b.try_reserve(LAG_FLOOR + 1000).unwrap();
        assert!(!b.backlog_due(AFTER, at(3000)));
        b.release(deep);
        b.try_reserve(LAG_FLOOR + 1000).unwrap();
        assert!(!b.backlog_due(AFTER, at(4500)), "caught up meanwhile");
        assert!(b.backlog_due(AFTER, at(5500)));
    }
}
