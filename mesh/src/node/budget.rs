//! The byte bound of one link's outbound queue, shared by every shard that sends on the link.
//!
//! The queue itself (whole frames, waiting for the writer) lives on the link's shard; this is
//! only its size in bytes, reserved *before* a frame is queued, by whichever shard queues it,
//! and released by the link's writer once the frame is on the socket. A policy therefore
//! always acts on a whole new frame and never touches a frame already queued or half written.

use event_listener::Event as Signal;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What happens to a frame when its link's outbound queue is at `max_outbound_queue_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OverflowPolicy {
    /// Messages the application originates wait for room (the publisher API blocks or awaits).
    /// Relayed messages cannot wait without stalling every other link of the shard: they are
    /// dropped and counted as under `DropNewest`.
    #[default]
    Block,
    /// The new frame is dropped and counted (`dropped_queue_full`).
    DropNewest,
    /// Like `DropNewest`, and a link whose queue stays full for longer than `after` is closed
    /// with an [`super::ErrorKind::SlowPeer`] error.
    Disconnect {
        /// How long a link may stay full before it is dropped.
        after: Duration,
    },
}

/// The shared byte budget and wake-ups of one link.
#[derive(Debug)]
pub(crate) struct LinkBudget {
    queued: AtomicUsize,
    max: usize,
    /// Room appeared (writer flushed) or the link closed.
    room: Signal,
    /// Work for the writer (frames queued, link closing, kill requested).
    pub(crate) wake: Signal,
    closed: AtomicBool,
    kill: AtomicBool,
    /// Milliseconds since `epoch` (+1) when the queue was first found full; 0 = not full.
    full_since: AtomicU64,
    epoch: Instant,
}

impl LinkBudget {
    pub(crate) fn new(max: usize, epoch: Instant) -> LinkBudget {
        LinkBudget {
            queued: AtomicUsize::new(0),
            max: max.max(1),
            room: Signal::new(),
            wake: Signal::new(),
            closed: AtomicBool::new(false),
            kill: AtomicBool::new(false),
            full_since: AtomicU64::new(0),
            epoch,
        }
    }

    /// Reserves `n` bytes if they fit (a frame larger than the whole bound is admitted only
    /// into an empty queue, so it cannot be stuck forever). Returns the new queued total.
    pub(crate) fn try_reserve(&self, n: usize) -> Option<usize> {
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

    /// Waits until `n` bytes fit; `None` if the link closed meanwhile.
    pub(crate) async fn reserve(&self, n: usize) -> Option<usize> {
        loop {
            if let Some(t) = self.try_reserve(n) {
                return Some(t);
            }
            if self.is_closed() {
                return None;
            }
            let l = self.room.listen();
            if let Some(t) = self.try_reserve(n) {
                return Some(t);
            }
            if self.is_closed() {
                return None;
            }
            l.await;
        }
    }

    /// The writer put `n` reserved bytes on the socket (or discarded them). Progress ends a
    /// "full" period; a small frame squeezing into the last bytes of a stuck queue does not.
    pub(crate) fn release(&self, n: usize) {
        if n > 0 {
            self.queued.fetch_sub(n, Ordering::AcqRel);
            self.full_since.store(0, Ordering::Relaxed);
            self.room.notify(usize::MAX);
        }
    }

    /// Disconnect policy bookkeeping after a failed reservation: true once the queue has been
    /// full for longer than `after` (the link is then marked for killing and its writer woken).
    pub(crate) fn note_full(&self, after: Duration) -> bool {
        let now_ms = self.epoch.elapsed().as_millis() as u64 + 1;
        let since =
            match self
                .full_since
                .compare_exchange(0, now_ms, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => now_ms,
                Err(s) => s,
            };
        if now_ms.saturating_sub(since) > after.as_millis() as u64
            && !self.kill.swap(true, Ordering::AcqRel)
        {
            self.wake.notify(usize::MAX);
            return true;
        }
        false
    }

    /// True once a Disconnect-policy kill was requested.
    pub(crate) fn kill_requested(&self) -> bool {
        self.kill.load(Ordering::Acquire)
    }

    /// Marks the link gone: reservations fail and waiting publishers give up.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.room.notify(usize::MAX);
        self.wake.notify(usize::MAX);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Bytes currently reserved.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// True when a frame of `n` bytes would not fit now (the non-waiting `try_*` check).
    pub(crate) fn is_full_for(&self, n: usize) -> bool {
        let q = self.queued();
        q != 0 && q + n > self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn disconnect_policy_fires_once_after_the_limit() {
        let b = LinkBudget::new(10, Instant::now());
        assert!(!b.note_full(Duration::from_millis(20)));
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.note_full(Duration::from_millis(20)));
        assert!(b.kill_requested());
        assert!(!b.note_full(Duration::from_millis(20)));
    }
}
