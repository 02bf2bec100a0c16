//! The byte bound of one link's outbound queue, shared by every shard that sends on the link.
//!
//! The queue itself (whole frames, waiting for the writer) lives on the link's shard; this is
//! only its size in bytes, reserved *before* a frame is queued, by whichever shard queues it,
//! and released by the link's writer once the frame is on the socket. A policy therefore
//! always acts on a whole new frame and never touches a frame already queued or half written.
//!
//! It also carries the link's last measured round-trip time ([`LinkBudget::rtt`]), whether
//! its peer acknowledges what is sent ([`LinkBudget::is_unanswered`]) and how much the kernel
//! still holds for the link ([`LinkBudget::send_queue`]): the per-link state the link's shard
//! and the control plane already share, so the control plane reads it without a message to
//! the shard.
//!
//! **Owns:** the byte bound of a link queue, the slow-link clock and marks, (in `lag.rs`) a
//! deep queue's backlog clock and lagging mark, and (in `kernel.rs`) what the link's kernel
//! said last: its RTT, its send queue, whether the peer acknowledges anything. **Must not
//! touch:** the queue itself (the shard core), the clock (every time-dependent method takes
//! `now`) or any executor: waiting is an `event-listener` notification.

mod kernel;
mod lag;

pub use kernel::{
    SEND_QUEUE_FLOOR, SEND_QUEUE_LAG, SEND_QUEUE_SAMPLE, UNANSWERED_AFTER, UNANSWERED_TIMEOUTS,
};
pub use lag::{LAG_FLOOR, LAG_LOOKS};

use event_listener::Event as Signal;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long, in multiples of [`SlowLinkPolicy::after`], a link that stopped being slow is
/// remembered: a congestion within it is a relapse, and the publisher does not wait for the
/// link again (see [`SlowLinkPolicy`]).
pub const RELAPSE_WINDOW: u32 = 10;

/// A relapse is waited for `after / RELAPSE_ALLOWANCE`, not `after`: long enough that its rate
/// since the jam (what "another link drains twice as fast" compares) means something. Judged
/// at its first instant, when it has written nothing yet, every relapse looked outpaced, and a
/// recovered link caught in a burst that filled every link was dropped for.
pub const RELAPSE_ALLOWANCE: u32 = 4;

/// A Block publisher's link that is outpaced with `1 / UNLIST_LEAD` of its allowance left (a
/// relapse: at its first look) is marked slow soon ([`LinkBudget::mark_slow_soon`]), and its
/// peer unlisted from the own record then (`control::slow`), ahead of the declaration: the
/// publisher's backlog from the wait goes out in one burst when the link is declared slow,
/// and what of it did not fit the link reached the peer only if the relays already had the
/// record that sends it there.
pub const UNLIST_LEAD: u32 = 5;

/// What happens to a frame when its link's outbound queue is at `max_outbound_queue_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OverflowPolicy {
    /// Messages the application originates wait for room (the publisher API blocks or awaits).
    /// Relayed messages cannot wait without stalling every other link of the shard: they are
    /// dropped and counted as under `DropNewest`. No single link holds the publisher hostage:
    /// a link that stays congested for [`SlowLinkPolicy::after`] is declared slow and handled
    /// by [`SlowLinkPolicy::action`] (see [`SlowLinkPolicy`]).
    #[default]
    Block,
    /// The new frame is dropped and counted (`dropped_queue_full`).
    DropNewest,
    /// Like `DropNewest`, and a link whose queue stays full for longer than `after` is closed
    /// with an `SlowPeer` error event error.
    Disconnect {
        /// How long a link may stay full before it is dropped.
        after: Duration,
    },
}

/// What a [`OverflowPolicy::Block`] publisher does about a link that cannot take its share.
///
/// A link is **congested** from the first reservation that finds its queue full (or, when a
/// publisher begins to wait for another link, from then if it is more than half full: links
/// jammed together are waited out together) until its writer drains it to half the bound. A
/// link congested for longer than `after` while another link drains at least twice as fast
/// (the others take their share, this one does not; rates averaged over about a second, so a
/// peer stalled for a moment is not slow) is declared **slow** (counted in `slow_links`, with
/// a `SlowPeer` error event). One lossy link used to hold a Block publisher to its pace for as
/// long as the loss lasted (~15 % of the rate for ~30 s in the fault test); now the publisher
/// waits for one link at most about `after` per congestion episode. A **relapse**, an episode
/// beginning within [`RELAPSE_WINDOW`] times `after` of the end of the link's last slow period
/// (or of a closed link's to the same peer: [`LinkBudget::remember_slow`]), is not waited out
/// again: the link is slow after a quarter of `after` ([`RELAPSE_ALLOWANCE`]) if another link
/// drains twice as fast. A link outpaced with a fifth of its allowance left (a relapse: at
/// its first look) is marked **slow soon** ([`UNLIST_LEAD`]): nothing is dropped for it yet,
/// but its peer is unlisted from the own record then, so the relays carry for it by the time
/// it is slow. Every wait holds every
/// other link of the publisher too (a broadcast goes to all or waits), so a lossy link that
/// drains and jams again cost the whole mesh a second each time: the fault suite's healthy
/// subscriber stood still for a median 4.1–4.5 s of its 24 s, in stalls of ~1 s. When the
/// links drain alike, or there is only one, nothing is slow: the publisher is faster than the
/// mesh and Block paces it, as before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowLinkPolicy {
    /// How long a link may stay congested before it is slow. Default 1 s.
    pub after: std::time::Duration,
    /// What happens to a slow link. Default [`SlowLinkAction::Drop`].
    pub action: SlowLinkAction,
}

impl Default for SlowLinkPolicy {
    fn default() -> Self {
        SlowLinkPolicy {
            after: std::time::Duration::from_secs(1),
            action: SlowLinkAction::Drop,
        }
    }
}

/// See [`SlowLinkPolicy::action`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SlowLinkAction {
    /// The link is treated as under `DropNewest` while it is slow: a message that fits its
    /// queue is queued, one that does not is dropped and counted (`dropped_slow_link`), and
    /// nobody waits for it. It is Block again once its writer drained it to half the bound.
    /// The default: a slow link (a lossy path, a peer briefly starved of CPU) still carries
    /// what it can, keeps its membership and targeted traffic, and recovers by itself; closing
    /// it would lose its queue too and add reconnect churn over the same bad path, while a
    /// peer that is really gone is closed by the heartbeat timeout anyway.
    #[default]
    Drop,
    /// The link is closed (counted in `slow_peer_disconnects`, `SlowPeer` error event)
    /// and redialed with backoff like any lost link.
    Disconnect,
}

/// The shared byte budget and wake-ups of one link.
#[derive(Debug)]
pub struct LinkBudget {
    queued: AtomicUsize,
    max: usize,
    /// Room appeared (writer flushed) or the link closed.
    room: Signal,
    /// Work for the writer (frames queued, link closing, kill requested).
    pub wake: Signal,
    /// A Disconnect-policy kill was requested: the link's timer acts on it at once, also
    /// while the writer is stuck on a full socket (the timer does not poll for it).
    pub killed: Signal,
    closed: AtomicBool,
    kill: AtomicBool,
    /// Milliseconds since `epoch` (+1) when the queue was first found full; 0 = not full.
    full_since: AtomicU64,
    /// Milliseconds since `epoch` (+1) when a reservation first found the queue full since it
    /// was last drained to half the bound; 0 = not congested (see [`SlowLinkPolicy`]).
    congested_since: AtomicU64,
    /// Declared slow (see [`SlowLinkPolicy`]); cleared when drained to half the bound.
    slow: AtomicBool,
    /// About to be declared slow ([`UNLIST_LEAD`]); cleared when drained to half the bound.
    slow_soon: AtomicBool,
    /// Milliseconds since `epoch` (+1) when the link last stopped being slow, or the one a
    /// link to the same peer did ([`LinkBudget::remember_slow`]); 0 = never slow (see
    /// [`LinkBudget::slow_ended`]).
    slow_ended: AtomicU64,
    /// Milliseconds since `epoch` (+1) when the link was last declared slow; 0 = never.
    slow_since: AtomicU64,
    /// How fast the writer puts bytes on the socket (see [`LinkBudget::written`]; written by
    /// the link's writer only): bytes since the last update, its time (ms since `epoch`), and
    /// the rate in bytes per ms (`f64` bits), smoothed over about a second.
    drain_acc: AtomicU64,
    drain_at: AtomicU64,
    drain_rate: AtomicU64,
    /// Bytes written in all, and that total when the current congestion episode began.
    written_total: AtomicU64,
    written_at_congestion: AtomicU64,
    /// The link's round-trip time in µs as its writer last sampled it; 0 = not measured.
    rtt_us: AtomicU32,
    /// The control plane wants the kernel's send queue sampled after each write
    /// ([`LinkBudget::watch_send_queue`]).
    watch_send_queue: AtomicBool,
    /// Bytes the kernel held unacknowledged at the driver's last look.
    send_queue: AtomicUsize,
    /// The peer acknowledged nothing for [`UNANSWERED_AFTER`] at the driver's last look
    /// ([`LinkBudget::ack_sample`]).
    unanswered: AtomicBool,
    /// Milliseconds since `epoch` (+1) when a look first found the backlog (queued here and in
    /// the kernel) above [`LAG_FLOOR`] since it last drained below it; 0 = no backlog (see
    /// `lag.rs`).
    backlog_since: AtomicU64,
    /// [`LinkBudget::delivered`] when the backlog began.
    delivered_at_backlog: AtomicU64,
    /// When the backlog's pace may next be judged (milliseconds since `epoch`, +1).
    lag_look_at: AtomicU64,
    /// Lagging ([`LinkBudget::mark_lagging`]); cleared when the backlog drains below
    /// [`LAG_FLOOR`].
    lagging: AtomicBool,
    /// Milliseconds since `epoch` (+1) when the link was last marked lagging; 0 = never.
    lagging_since: AtomicU64,
    epoch: Instant,
}

impl LinkBudget {
    /// A budget of `max` bytes (at least 1); congestion times are measured from `epoch`.
    pub fn new(max: usize, epoch: Instant) -> LinkBudget {
        LinkBudget {
            queued: AtomicUsize::new(0),
            max: max.max(1),
            room: Signal::new(),
            wake: Signal::new(),
            killed: Signal::new(),
            closed: AtomicBool::new(false),
            kill: AtomicBool::new(false),
            full_since: AtomicU64::new(0),
            congested_since: AtomicU64::new(0),
            slow: AtomicBool::new(false),
            slow_soon: AtomicBool::new(false),
            slow_ended: AtomicU64::new(0),
            slow_since: AtomicU64::new(0),
            drain_acc: AtomicU64::new(0),
            drain_at: AtomicU64::new(0),
            drain_rate: AtomicU64::new(0f64.to_bits()),
            written_total: AtomicU64::new(0),
            written_at_congestion: AtomicU64::new(0),
            rtt_us: AtomicU32::new(0),
            watch_send_queue: AtomicBool::new(false),
            send_queue: AtomicUsize::new(0),
            unanswered: AtomicBool::new(false),
            backlog_since: AtomicU64::new(0),
            delivered_at_backlog: AtomicU64::new(0),
            lag_look_at: AtomicU64::new(0),
            lagging: AtomicBool::new(false),
            lagging_since: AtomicU64::new(0),
            epoch,
        }
    }

    /// `now` as milliseconds since `epoch`, +1 (0 means "not running" in the clocks).
    fn ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_millis() as u64 + 1
    }

    /// A reservation found the queue full: starts the congestion clock if it is not running.
    /// Returns how long the link may still stay congested before it is slow (zero once it is,
    /// or when `after` has passed; for a relapse, an episode that began within
    /// [`RELAPSE_WINDOW`] times `after` of the end of the link's last slow period, when
    /// `after / RELAPSE_ALLOWANCE` has).
    pub fn congested(&self, after: Duration, now: Instant) -> Duration {
        if self.is_slow() {
            return Duration::ZERO;
        }
        let now = self.ms(now);
        let since = self.start_congestion(now);
        self.allowance_from(since, after)
            .saturating_sub(Duration::from_millis(now.saturating_sub(since)))
    }

    /// How long the current congestion episode may last before the link is slow: `after`, or
    /// `after / RELAPSE_ALLOWANCE` for a relapse (`after` when no episode runs).
    pub fn allowance(&self, after: Duration) -> Duration {
        match self.congested_since.load(Ordering::Relaxed) {
            0 => after,
            since => self.allowance_from(since, after),
        }
    }

    fn allowance_from(&self, since: u64, after: Duration) -> Duration {
        // A slow period ends only with a drain that also ends the episode, so its end cannot
        // move while an episode lasts: whether this one is a relapse follows from its start.
        let ended = self.slow_ended.load(Ordering::Relaxed);
        let window = after.as_millis() as u64 * u64::from(RELAPSE_WINDOW);
        if ended != 0 && since.saturating_sub(ended) <= window {
            after / RELAPSE_ALLOWANCE
        } else {
            after
        }
    }

    /// Starts the congestion clock at `now` (the budget's milliseconds) if it is not running;
    /// returns when it started.
    fn start_congestion(&self, now: u64) -> u64 {
        let written = self.written_total.load(Ordering::Relaxed);
        self.start_clock(
            &self.congested_since,
            &self.written_at_congestion,
            written,
            now,
        )
    }

    /// Starts `clock` (milliseconds since `epoch`, +1; 0 = not running) at `now` if it is not
    /// running, noting in `progress_at` the link's `progress` by then (bytes written, or
    /// delivered); returns when it started. The congestion and backlog clocks are both this.
    fn start_clock(
        &self,
        clock: &AtomicU64,
        progress_at: &AtomicU64,
        progress: u64,
        now: u64,
    ) -> u64 {
        match clock.compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                progress_at.store(progress, Ordering::Relaxed);
                now
            }
            Err(s) => s,
        }
    }

    /// Bytes per millisecond of `progress` since `clock` started (0 while it is not running).
    fn rate_since(
        &self,
        clock: &AtomicU64,
        progress_at: &AtomicU64,
        progress: u64,
        now: Instant,
    ) -> f64 {
        let since = clock.load(Ordering::Relaxed);
        if since == 0 {
            return 0.0;
        }
        let bytes = progress.saturating_sub(progress_at.load(Ordering::Relaxed));
        bytes as f64 / self.ms(now).saturating_sub(since).max(1) as f64
    }

    /// A publisher began to wait for another link and found this one more than half full:
    /// it is backed up as well, so its congestion clock starts now, as if a reservation had
    /// found it full. Without this, a link that jammed with another (not quite full when the
    /// publisher stopped sending) was found full only once the publisher resumed, and waited
    /// out for a whole `after` of its own, every other link held again. A link that drains to
    /// half meanwhile ends the episode as always. True if the clock runs.
    pub fn congested_if_backed_up(&self, now: Instant) -> bool {
        if self.queued() <= self.max / 2 || self.is_slow() || self.is_closed() {
            return false;
        }
        self.start_congestion(self.ms(now));
        true
    }

    /// Records that the link stopped being slow at `now` (its writer calls it when
    /// [`release`](Self::release) says so): a congestion that comes back soon after is a
    /// relapse ([`congested`](Self::congested)).
    pub fn slow_ended(&self, now: Instant) {
        self.slow_ended.store(self.ms(now), Ordering::Relaxed);
    }

    /// Bytes per millisecond written since the current congestion episode began (0 when not
    /// congested).
    pub fn congested_rate(&self, now: Instant) -> f64 {
        let written = self.written_total.load(Ordering::Relaxed);
        self.rate_since(
            &self.congested_since,
            &self.written_at_congestion,
            written,
            now,
        )
    }

    /// Starts the clock `since` (milliseconds since `epoch`, +1; 0 = not running) if it is not
    /// running, and returns the milliseconds it has been running.
    fn elapsed_since(&self, since: &AtomicU64, now: Instant) -> u64 {
        let now = self.ms(now);
        let start = match since.compare_exchange(0, now, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => now,
            Err(s) => s,
        };
        now.saturating_sub(start)
    }

    /// Declares the link slow at `now`; true if it was not already.
    pub fn mark_slow(&self, now: Instant) -> bool {
        let first = !self.slow.swap(true, Ordering::AcqRel);
        if first {
            self.slow_since.store(self.ms(now), Ordering::Relaxed);
        }
        first
    }

    /// The last moment the link is known to have been slow, in the budget's milliseconds
    /// (comparable between budgets of one epoch): when it was declared slow if it still is,
    /// else when it stopped being; `None` if it never was. A link that closes hands it to the
    /// next link to the same peer ([`remember_slow`](Self::remember_slow)): lossy links are
    /// often closed by the heartbeat timeout and dialed again, and each new link would
    /// otherwise be waited out for a whole `after` at its first jam.
    ///
    /// A lagging link ([`is_lagging`](Self::is_lagging)) counts as slow here: a lossy link
    /// is usually closed while it lags, and its successor should not lag unseen for a whole
    /// `after` again.
    pub fn last_slow(&self) -> Option<u64> {
        let ms = if self.is_slow() {
            self.slow_since.load(Ordering::Relaxed)
        } else if self.is_lagging() {
            self.lagging_since.load(Ordering::Relaxed)
        } else {
            self.slow_ended.load(Ordering::Relaxed)
        };
        (ms != 0).then_some(ms)
    }

    /// Takes a previous link's [`last_slow`](Self::last_slow) (same epoch) as this link's own
    /// slow period's end, so a jam soon after is a relapse.
    pub fn remember_slow(&self, ms: u64) {
        self.slow_ended.fetch_max(ms, Ordering::Relaxed);
    }

    /// True while the link is slow (see [`SlowLinkPolicy`]).
    pub fn is_slow(&self) -> bool {
        self.slow.load(Ordering::Acquire)
    }

    /// Marks the link about to be declared slow ([`UNLIST_LEAD`]); true if it was not
    /// already. Nothing is dropped for it yet: only its peer is unlisted.
    pub fn mark_slow_soon(&self) -> bool {
        !self.slow_soon.swap(true, Ordering::AcqRel)
    }

    /// True while the link is slow or marked slow soon, until it drains to half the bound.
    pub fn is_slow_or_soon(&self) -> bool {
        self.is_slow() || self.slow_soon.load(Ordering::Acquire)
    }

    /// True while the link is slow, marked slow soon ([`is_slow_or_soon`](Self::is_slow_or_soon))
    /// or lagging ([`is_lagging`](Self::is_lagging)): its peer is not listed in the own record
    /// meanwhile (`control::slow`).
    pub fn unlists_peer(&self) -> bool {
        self.is_slow_or_soon() || self.is_lagging()
    }

    /// Reserves `n` bytes if they fit (a frame larger than the whole bound is admitted only
    /// into an empty queue, so it cannot be stuck forever). Returns the new queued total.
    pub fn try_reserve(&self, n: usize) -> Option<usize> {
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        let mut cur = self.queued.load(Ordering::Relaxed);
        loop {
            if cur + n > self.max && cur != 0 {
                return None;
            }
            match self.queued.compare_exchange_weak(
                cur,
                cur + n,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(cur + n),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Adds `n` bytes moved here from another link's queue (a dial race's loser hands its
    /// queue to the winner): admitted whatever the bound, as they were admitted under the
    /// loser's, and refused only when this link is closed.
    pub fn take_moved(&self, n: usize) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        self.queued.fetch_add(n, Ordering::AcqRel);
        true
    }

    /// A listener notified when room appears (the writer released bytes) or the link closes.
    /// Take it *before* the check that failed, so a release in between is not missed.
    pub fn listen_room(&self) -> event_listener::EventListener {
        self.room.listen()
    }

    /// The writer put `n` reserved bytes on the socket (or discarded them). Progress ends a
    /// "full" period; a small frame squeezing into the last bytes of a stuck queue does not.
    /// True when this ended a slow or a lagging period (the caller with a clock records when:
    /// [`slow_ended`](Self::slow_ended)).
    pub fn release(&self, n: usize) -> bool {
        let mut ended = false;
        if n > 0 {
            let left = self.queued.fetch_sub(n, Ordering::AcqRel) - n;
            self.full_since.store(0, Ordering::Relaxed);
            if left <= self.max / 2 {
                // Caught up: no longer congested, and no longer slow.
                self.congested_since.store(0, Ordering::Relaxed);
                self.slow_soon.store(false, Ordering::Release);
                ended = self.slow.swap(false, Ordering::AcqRel);
            }
            if self.backlog_drained(left) {
                ended = true;
            }
            self.room.notify(usize::MAX);
        }
        ended
    }

    /// The link's writer put `n` bytes on the socket: updates the drain rate (every 10 ms at
    /// most, an average weighted over about the last second). One writer per link, so plain
    /// loads and stores.
    pub fn written(&self, n: usize, now: Instant) {
        self.written_total.fetch_add(n as u64, Ordering::Relaxed);
        let now = self.ms(now);
        let acc = self.drain_acc.load(Ordering::Relaxed) + n as u64;
        let dt = now.saturating_sub(self.drain_at.load(Ordering::Relaxed));
        if dt < 10 {
            self.drain_acc.store(acc, Ordering::Relaxed);
            return;
        }
        let rate = f64::from_bits(self.drain_rate.load(Ordering::Relaxed));
        let weight = (dt as f64 / 1000.0).min(1.0);
        let rate = rate + weight * (acc as f64 / dt as f64 - rate);
        self.drain_rate.store(rate.to_bits(), Ordering::Relaxed);
        self.drain_acc.store(0, Ordering::Relaxed);
        self.drain_at.store(now, Ordering::Relaxed);
    }

    /// Bytes per millisecond the link has been draining lately. A link with bytes queued that
    /// wrote nothing for a while decays toward zero; one with nothing queued keeps its rate (it
    /// took all it was given, so it is not slow).
    pub fn drain_rate(&self, now: Instant) -> f64 {
        let rate = f64::from_bits(self.drain_rate.load(Ordering::Relaxed));
        if self.queued() == 0 {
            return rate;
        }
        let idle = self
            .ms(now)
            .saturating_sub(self.drain_at.load(Ordering::Relaxed));
        if idle > 1000 {
            rate * 1000.0 / idle as f64
        } else {
            rate
        }
    }

    /// Disconnect policy bookkeeping after a failed reservation: true once the queue has been
    /// full for longer than `after` (the link is then marked for killing and its writer woken).
    pub fn note_full(&self, after: Duration, now: Instant) -> bool {
        if self.elapsed_since(&self.full_since, now) > after.as_millis() as u64
            && !self.kill.swap(true, Ordering::AcqRel)
        {
            self.wake.notify(usize::MAX);
            self.killed.notify(usize::MAX);
            return true;
        }
        false
    }

    /// Asks the link's writer to close the link as a slow peer.
    pub fn kill(&self) {
        if !self.kill.swap(true, Ordering::AcqRel) {
            self.wake.notify(usize::MAX);
            self.killed.notify(usize::MAX);
        }
    }

    /// True once a Disconnect-policy kill was requested.
    pub fn kill_requested(&self) -> bool {
        self.kill.load(Ordering::Acquire)
    }

    /// Marks the link gone: reservations fail and waiting publishers give up.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.room.notify(usize::MAX);
        self.wake.notify(usize::MAX);
    }

    /// Wakes the publishers waiting on this link: a shard's table no longer routes over it
    /// (a Block wait on a closed link waits for that: `ShardCore::unblock`).
    pub fn route_changed(&self) {
        self.room.notify(usize::MAX);
    }

    /// Whether the link closed (reservations fail from then on).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Bytes currently reserved.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// True when a frame of `n` bytes would not fit now and would be waited for (the
    /// non-waiting `try_*` check): a slow link is not waited for, so it never makes the
    /// application's `try_*` calls fail.
    pub fn is_full_for(&self, n: usize) -> bool {
        let q = self.queued();
        q != 0 && q + n > self.max && !self.is_slow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    #[test]
    fn rtt_is_unknown_until_sampled_and_a_sample_under_a_microsecond_still_counts() {
        let b = LinkBudget::new(100, Instant::now());
        assert_eq!(b.rtt(), None);
        b.set_rtt(Duration::from_micros(250));
        assert_eq!(b.rtt(), Some(Duration::from_micros(250)));
        b.set_rtt(Duration::from_nanos(300));
        assert_eq!(b.rtt(), Some(Duration::from_micros(1)));
    }

    #[test]
    fn reserve_respects_bound_and_admits_big_frame_only_when_empty() {
        let b = LinkBudget::new(100, Instant::now());
        assert_eq!(b.try_reserve(60), Some(60));
        assert_eq!(b.try_reserve(41), None);
        assert_eq!(b.try_reserve(40), Some(100));
        b.release(100);
        assert_eq!(b.try_reserve(500), Some(500));
        assert_eq!(b.try_reserve(1), None);
        b.close();
        b.release(500);
        assert_eq!(b.try_reserve(1), None);
    }

    #[test]
    fn a_link_congested_past_the_limit_is_slow_until_drained_to_half() {
        let t0 = Instant::now();
        let b = LinkBudget::new(100, t0);
        let after = Duration::from_millis(30);
        assert_eq!(b.try_reserve(90), Some(90));
        assert_eq!(b.congested(after, ms(t0, 5)), after);
        assert_eq!(b.congested(after, ms(t0, 15)), Duration::from_millis(20));
        // Slow draining (never below half) does not end congestion.
        b.release(20);
        assert_eq!(b.try_reserve(20), Some(90));
        assert_eq!(
            b.congested(after, ms(t0, 45)),
            Duration::ZERO,
            "congested past the limit"
        );
        assert!(b.mark_slow(ms(t0, 45)));
        assert!(!b.mark_slow(ms(t0, 45)), "declared once per episode");
        assert!(b.is_slow());
        assert!(!b.is_full_for(50), "a slow link is not waited for");
        b.release(39);
        assert!(b.is_slow(), "51 of 100 queued: not caught up yet");
        b.release(1);
        assert!(!b.is_slow(), "drained to half: Block again");
        assert_eq!(
            b.congested(after, ms(t0, 50)),
            after,
            "a new episode starts afresh"
        );
    }

    #[test]
    fn a_link_marked_slow_soon_is_not_slow_and_the_mark_ends_with_the_episode() {
        let t0 = Instant::now();
        let b = LinkBudget::new(100, t0);
        assert_eq!(b.try_reserve(90), Some(90));
        assert!(b.mark_slow_soon());
        assert!(!b.mark_slow_soon(), "marked once per episode");
        assert!(b.is_slow_or_soon() && !b.is_slow());
        assert!(
            b.is_full_for(50),
            "still waited for: nothing is dropped for it yet"
        );
        b.release(39);
        assert!(b.is_slow_or_soon(), "51 of 100 queued: still jammed");
        assert!(!b.release(1), "ended no slow period");
        assert!(!b.is_slow_or_soon(), "drained to half");
        // Declared slow after the mark: both end with the drain.
        assert_eq!(b.try_reserve(40), Some(90));
        b.mark_slow_soon();
        b.mark_slow(ms(t0, 10));
        assert!(b.release(90));
        assert!(!b.is_slow_or_soon());
    }

    #[test]
    fn a_relapse_soon_after_a_slow_period_has_a_quarter_allowance_and_a_late_one_has_all() {
        let t0 = Instant::now();
        let b = LinkBudget::new(100, t0);
        let after = Duration::from_millis(40);
        assert_eq!(b.try_reserve(90), Some(90));
        assert_eq!(
            b.congested(after, ms(t0, 0)),
            after,
            "never slow: the full allowance"
        );
        assert!(b.mark_slow(ms(t0, 40)));
        assert_eq!(b.last_slow(), Some(41), "slow since 40 ms (+1)");
        assert!(!b.release(10), "still above half: still slow");
        assert!(b.release(40), "drained to half: the slow period ends here");
        assert!(!b.release(10), "only once");
        b.slow_ended(ms(t0, 100));
        assert_eq!(b.last_slow(), Some(101));
        // A new link to the same peer takes it over.
        let next = LinkBudget::new(100, t0);
        assert_eq!(next.last_slow(), None);
        next.remember_slow(101);
        assert_eq!(next.try_reserve(90), Some(90));
        let quarter = after / RELAPSE_ALLOWANCE;
        assert_eq!(next.allowance(after), after, "no episode yet");
        assert_eq!(next.congested(after, ms(t0, 110)), quarter, "a relapse");
        assert_eq!(next.allowance(after), quarter);
        assert_eq!(
            next.congested(after, ms(t0, 110) + quarter),
            Duration::ZERO,
            "and its allowance runs out"
        );
        assert_eq!(b.try_reserve(70), Some(100));
        let window = u64::from(RELAPSE_WINDOW) * 40;
        assert_eq!(b.congested(after, ms(t0, 100 + window)), quarter);
        assert!(!b.release(100), "not declared slow: no slow period ended");
        assert_eq!(b.try_reserve(90), Some(90));
        assert_eq!(
            b.congested(after, ms(t0, 101 + window)),
            after,
            "past the window: the full allowance again"
        );
    }

    #[test]
    fn the_drain_rate_follows_what_is_written_and_decays_when_nothing_is() {
        let t0 = Instant::now();
        let b = LinkBudget::new(100, t0);
        assert_eq!(b.drain_rate(t0), 0.0);
        assert_eq!(b.try_reserve(50), Some(50), "a backlog, so idleness counts");
        for i in 1..=30 {
            b.written(12_000, ms(t0, 12 * i));
        }
        let busy = b.drain_rate(ms(t0, 360));
        assert!(busy > 100.0, "about 1000 bytes per ms: {busy}");
        let idle = b.drain_rate(ms(t0, 1900));
        assert!(
            idle < busy * 0.9,
            "a link that writes nothing slows down: {idle} vs {busy}"
        );
        b.release(50);
        assert_eq!(
            b.drain_rate(ms(t0, 5000)),
            busy,
            "a link with nothing queued took all it was given"
        );
    }

    #[test]
    fn disconnect_policy_fires_once_after_the_limit() {
        let t0 = Instant::now();
        let b = LinkBudget::new(10, t0);
        let after = Duration::from_millis(20);
        assert!(!b.note_full(after, ms(t0, 1)));
        assert!(!b.note_full(after, ms(t0, 20)));
        assert!(b.note_full(after, ms(t0, 41)));
        assert!(b.kill_requested());
        assert!(!b.note_full(after, ms(t0, 60)));
    }

    #[test]
    fn a_kill_wakes_the_links_timer() {
        use event_listener::Listener;
        // The link's timer sleeps until the link's own deadline (no polling): a kill must
        // wake it, by `note_full` and by `kill` alike, and only the first time.
        let t0 = Instant::now();
        let b = LinkBudget::new(10, t0);
        let l = b.killed.listen();
        assert!(b.note_full(Duration::ZERO, ms(t0, 1)) || b.note_full(Duration::ZERO, ms(t0, 2)));
        assert!(
            l.wait_timeout(Duration::ZERO).is_some(),
            "note_full woke it"
        );
        let b = LinkBudget::new(10, t0);
        let l = b.killed.listen();
        b.kill();
        assert!(l.wait_timeout(Duration::ZERO).is_some(), "kill woke it");
        let l = b.killed.listen();
        b.kill();
        assert!(
            l.wait_timeout(Duration::ZERO).is_none(),
            "a second kill is no news"
        );
    }
}
