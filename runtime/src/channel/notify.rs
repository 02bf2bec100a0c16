//! A single-waiter wake-up slot shared by lock-free queues.
//!
//! The waiter registers its waker, raises `waiting`, then re-checks its condition; the
//! notifier publishes its change, then checks `waiting`. Both sides put a `SeqCst` fence
//! between their store and their load, so at least one of them sees the other's store
//! (the classic store-buffer pattern): either the waiter sees the new data and does not
//! sleep, or the notifier sees `waiting` and wakes it. No wake-up is lost, and a
//! notifier whose peer is busy pays one fence and one relaxed load, not an atomic RMW.

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::task::Waker;

use futures_util::task::AtomicWaker;

use crate::unwind::wake_or_defer;

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
