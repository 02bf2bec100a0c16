//! A single-waiter wake-up slot shared by lock-free queues.
//!
//! The waiter registers its waker, raises `waiting`, then re-checks its condition; the
//! notifier publishes its change, then checks `waiting`. Both sides put a `SeqCst` fence
//! between their store and their load, so at least one of them sees the other's store
//! (the classic store-buffer pattern): either the waiter sees the new data and does not
//! sleep, or the notifier sees `waiting` and wakes it. No wake-up is lost, and a
//! notifier whose peer is busy pays one fence and one relaxed load, not an atomic RMW.

use std::cell::RefCell;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::task::Waker;

use futures_util::task::AtomicWaker;

/// One parked waiter (a task on one executor, or nothing).
#[derive(Debug, Default)]
pub(crate) struct Notify {
    waker: AtomicWaker,
    waiting: AtomicBool,
}

impl Notify {
    /// Waiter side: register `waker`, announce it. The caller must re-check its condition
    /// after this returns and before returning `Pending`.
    pub(crate) fn prepare_wait(&self, waker: &Waker) {
        self.waker.register(waker);
        self.waiting.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// Waiter side: the condition turned true after `prepare_wait`; stop asking for wakes.
    pub(crate) fn cancel_wait(&self) {
        self.waiting.store(false, Ordering::Relaxed);
    }

    /// Notifier side: call after publishing the change the waiter is looking for.
    #[inline]
    pub(crate) fn notify(&self) {
        fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::Relaxed) && self.waiting.swap(false, Ordering::AcqRel) {
            if let Some(w) = self.waker.take() {
                wake_or_defer(w);
            }
        }
    }

    /// Wake unconditionally (used on close, where a spurious wake is harmless).
    pub(crate) fn notify_always(&self) {
        fence(Ordering::SeqCst);
        self.waiting.store(false, Ordering::Relaxed);
        if let Some(w) = self.waker.take() {
            wake_or_defer(w);
        }
    }
}

/// Wakers whose wake had to wait until this thread stopped unwinding.
struct Deferred(RefCell<Vec<Waker>>);

impl Drop for Deferred {
    fn drop(&mut self) {
        for w in self.0.get_mut().drain(..) {
            w.wake();
        }
    }
}

thread_local! {
    static DEFERRED: Deferred = const { Deferred(RefCell::new(Vec::new())) };
}

/// Wakes `w`, unless this thread is unwinding from a panic.
///
/// compio aborts the process when one of its task wakers is woken while the waking
/// thread is panicking (its remote-schedule path has an abort-on-panic guard). Channel
/// ends are dropped during exactly such unwinds (a task panics, its locals drop, each
/// drop wakes the peer), so those wakes are parked in a thread-local list and delivered
/// by [`flush_deferred_wakes`] once the unwind was caught, or when the thread exits.
fn wake_or_defer(w: Waker) {
    if !std::thread::panicking() {
        w.wake();
        return;
    }
    if let Err(err) = DEFERRED.try_with(|d| d.0.borrow_mut().push(w.clone())) {
        // Thread-local storage is being torn down: hand the wake to a fresh thread,
        // which is not panicking.
        tracing::debug!(%err, "deferring a wake to a helper thread");
        let _ = std::thread::Builder::new()
            .name("shoal-late-wake".into())
            .spawn(move || w.wake());
    }
}

/// Delivers wakes deferred by [`wake_or_defer`]; call after a caught panic.
pub(crate) fn flush_deferred_wakes() {
    let pending = DEFERRED.try_with(|d| std::mem::take(&mut *d.0.borrow_mut()));
    for w in pending.into_iter().flatten() {
        w.wake();
    }
}
