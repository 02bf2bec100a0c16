//! What the link's kernel said last, as the link's driver read it: the round trip, the send
//! queue, and whether the peer acknowledges anything. The budget carries them because it is
//! the per-link state the shard and the control plane already share.
//!
//! **Owns:** the rules read from those samples (a send queue that lags, a link unanswered).
//! **Must not touch:** the socket (the driver reads it and hands the numbers over).

use super::LinkBudget;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How often a link's writer samples the kernel's send queue after a write (every write while
/// the control plane watches it: [`LinkBudget::watch_send_queue`]): one system call per link
/// per period at most, and the backlog clock (`lag.rs`) is that precise.
pub const SEND_QUEUE_SAMPLE: Duration = Duration::from_millis(50);

/// A link whose kernel send queue ([`LinkBudget::set_send_queue`]) holds no more than this
/// many bytes has caught up whatever its pace.
pub const SEND_QUEUE_FLOOR: usize = 64 * 1024;

/// How far behind its writes a link may deliver beyond its round trip and still count as
/// caught up ([`LinkBudget::send_queue_lags`]).
pub const SEND_QUEUE_LAG: Duration = Duration::from_millis(100);

/// A link whose peer has acknowledged nothing new for this long while the oldest segment
/// outstanding waited out [`UNANSWERED_TIMEOUTS`] retransmission timeouts in a row is
/// *unanswered* ([`LinkBudget::ack_sample`], counted in `links_unanswered`): the path drops
/// what is sent, and whatever is written reaches the peer only when TCP gets through again,
/// seconds later under heavy loss, or never if the heartbeat timeout closes the link first.
/// The peer may still be sending meanwhile (its segments repeat the same acknowledgement): the
/// path is stalled one way. A peer that reads nothing is not unanswered: its closed window is
/// acknowledged.
pub const UNANSWERED_AFTER: Duration = Duration::from_secs(1);

/// Retransmission timeouts in a row (200 ms and more each, doubling) before a link can be
/// unanswered: at least 0.6 s without progress on what is outstanding, so a link that was
/// idle (its last acknowledgement long ago) and lost one segment is not.
pub const UNANSWERED_TIMEOUTS: u8 = 2;

impl LinkBudget {
    /// Records the link's round-trip time (its shard samples the kernel's estimate at most
    /// about once a second, from its first write; microsecond resolution, at least 1 µs once
    /// measured).
    pub fn set_rtt(&self, rtt: Duration) {
        let us = u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX).max(1);
        self.rtt_us.store(us, Ordering::Relaxed);
    }

    /// The link's last measured round-trip time; `None` before the first sample.
    pub fn rtt(&self) -> Option<Duration> {
        match self.rtt_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(u64::from(us))),
        }
    }

    /// Starts (`true`) or stops asking the link's writer to sample the kernel's send queue
    /// after each write, not only every [`SEND_QUEUE_SAMPLE`]: for a link whose peer the
    /// control plane has withdrawn (`control::slow`), listed again as soon as the kernel
    /// caught up.
    pub fn watch_send_queue(&self, on: bool) {
        self.watch_send_queue.store(on, Ordering::Release);
    }

    /// True while the writer should sample the kernel's send queue after each write.
    #[inline]
    pub fn send_queue_watched(&self) -> bool {
        self.watch_send_queue.load(Ordering::Acquire)
    }

    /// Records the bytes the kernel holds for the link and its peer has not acknowledged, as
    /// the driver sampled them (the writer after a write, before reporting it, so a slow mark
    /// that write clears is never seen with an older sample; the timer each time it fires).
    /// If the backlog (queued here and this) is below [`super::LAG_FLOOR`], the backlog ends:
    /// true if that ended a lagging period (the caller records when:
    /// [`slow_ended`](Self::slow_ended)).
    pub fn set_send_queue(&self, bytes: usize) -> bool {
        self.send_queue.store(bytes, Ordering::Release);
        self.backlog_drained(self.queued())
    }

    /// The last sample of [`set_send_queue`](Self::set_send_queue) (0 before the first).
    pub fn send_queue(&self) -> usize {
        self.send_queue.load(Ordering::Acquire)
    }

    /// True when the kernel's send queue at the last sample holds more than the link
    /// delivers in its round trip plus [`SEND_QUEUE_LAG`] at its recent pace (and more than
    /// [`SEND_QUEUE_FLOOR`]): what is written now reaches the peer that much later. A write
    /// returns once the kernel took the bytes, so a link whose queue here drained can still
    /// be seconds behind: a lossy path in retransmission backoff holds megabytes of the
    /// kernel's buffer after the loss has ended.
    pub fn send_queue_lags(&self, now: Instant) -> bool {
        let queued = self.send_queue();
        if queued <= SEND_QUEUE_FLOOR {
            return false;
        }
        let window = self.rtt().unwrap_or_default() + SEND_QUEUE_LAG;
        // Bytes per ms times ms.
        let in_time = self.drain_rate(now) * window.as_secs_f64() * 1000.0;
        queued as f64 > in_time
    }

    /// Records the driver's look at the link's acknowledgements: `unacked` segments in
    /// flight, the oldest of them past `timeouts` retransmission timeouts in a row, the last
    /// acknowledgement of new data `since_ack` ago (the kernel's `TCP_INFO`, and the shard's
    /// record of when the count of acknowledged bytes last grew). The link is unanswered
    /// while segments are outstanding, [`UNANSWERED_TIMEOUTS`] timeouts passed and nothing was
    /// acknowledged for [`UNANSWERED_AFTER`]; any look that says otherwise ends it. Returns
    /// true if this look made the link unanswered.
    pub fn ack_sample(&self, unacked: u32, timeouts: u8, since_ack: Duration) -> bool {
        let unanswered =
            unacked > 0 && timeouts >= UNANSWERED_TIMEOUTS && since_ack >= UNANSWERED_AFTER;
        let was = self.unanswered.swap(unanswered, Ordering::AcqRel);
        unanswered && !was
    }

    /// True while the peer acknowledges nothing ([`ack_sample`](Self::ack_sample)).
    pub fn is_unanswered(&self) -> bool {
        self.unanswered.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    #[test]
    fn a_link_is_unanswered_while_segments_wait_out_timeouts_for_a_second_without_an_ack() {
        let t0 = Instant::now();
        let b = LinkBudget::new(100, t0);
        let sec = Duration::from_secs(1);
        assert!(!b.is_unanswered());
        // Idle a minute, then one segment out: the last acknowledgement is old, but nothing
        // outstanding has waited out a timeout yet (and a lost one alone is not enough).
        assert!(!b.ack_sample(1, 0, 60 * sec));
        assert!(!b.ack_sample(1, 1, 60 * sec));
        // A closed window's probes: nothing unacknowledged.
        assert!(!b.ack_sample(0, 0, 30 * sec));
        // Timeouts in a row but an acknowledgement within the second: a lossy path getting
        // through.
        assert!(!b.ack_sample(12, 3, UNANSWERED_AFTER - Duration::from_millis(1)));
        assert!(!b.is_unanswered());
        assert!(b.ack_sample(12, UNANSWERED_TIMEOUTS, UNANSWERED_AFTER));
        assert!(b.is_unanswered());
        assert!(!b.ack_sample(12, 5, 4 * sec), "made unanswered once");
        assert!(b.is_unanswered());
        // An acknowledgement of new data ends the timeouts in a row: answered again.
        assert!(!b.ack_sample(3, 0, Duration::from_millis(5)));
        assert!(!b.is_unanswered());
        assert!(b.ack_sample(3, 4, 2 * sec), "a second episode");
        assert!(!b.ack_sample(0, 0, 3 * sec), "everything acknowledged");
        assert!(!b.is_unanswered());
    }

    #[test]
    fn a_send_queue_lags_past_a_round_trip_and_a_tenth_of_a_second_of_delivery() {
        let t0 = Instant::now();
        let b = LinkBudget::new(100, t0);
        assert!(!b.send_queue_watched(), "off by default");
        b.watch_send_queue(true);
        assert!(b.send_queue_watched());
        // 1 000 bytes per ms for ~5 s (the rate is smoothed over about a second), 10 ms
        // round trip: 110 000 bytes in time.
        for i in 1..=400 {
            b.written(12_000, ms(t0, 12 * i));
        }
        b.set_rtt(Duration::from_millis(10));
        let now = ms(t0, 4800);
        let rate = b.drain_rate(now);
        assert!((900.0..1100.0).contains(&rate), "{rate}");
        let in_time = (rate * 110.0) as usize;
        assert!(!b.send_queue_lags(now), "no sample yet");
        b.set_send_queue(in_time - 1_000);
        assert!(!b.send_queue_lags(now), "delivered within the window");
        b.set_send_queue(in_time + 1_000);
        assert!(b.send_queue_lags(now), "behind by more than the window");
        b.set_send_queue(4 << 20);
        assert!(b.send_queue_lags(now), "seconds behind");
        // A link that took nothing lately lags with anything past the floor, and none with
        // the floor's worth.
        let idle = LinkBudget::new(100, t0);
        idle.set_send_queue(SEND_QUEUE_FLOOR);
        assert!(!idle.send_queue_lags(t0));
        idle.set_send_queue(SEND_QUEUE_FLOOR + 1);
        assert!(idle.send_queue_lags(t0));
    }
}
