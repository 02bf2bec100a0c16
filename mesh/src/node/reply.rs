//! A one-value answer from the control plane that the asker may wait for either way: a
//! plain thread blocks on it ([`Answer::recv_timeout`]), a shard task awaits it
//! ([`Answer::recv`]) so that its shard, which the control plane may need meanwhile (a new
//! writer is answered once its route table reached every shard), runs on.
//!
//! **Owns:** the answer slot. **Must not touch:** what is answered (the control plane's).

use event_listener::{Event, Listener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Slot<T> {
    value: Mutex<Option<T>>,
    /// The replier is gone (answered or not).
    closed: AtomicBool,
    ready: Event,
}

/// The replying end (the control plane never waits on it: there is room for the one answer).
pub(crate) struct Reply<T>(Arc<Slot<T>>);

/// The asking end.
pub(crate) struct Answer<T>(Arc<Slot<T>>);

impl<T> std::fmt::Debug for Reply<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reply")
    }
}

/// Why no answer came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoAnswer {
    /// The replier went without answering (the control plane stopped).
    Gone,
    /// Not within the time given.
    Timeout,
}

/// A reply slot: the replying end for the control plane, the answer for the asker.
pub(crate) fn reply<T>() -> (Reply<T>, Answer<T>) {
    let slot = Arc::new(Slot {
        value: Mutex::new(None),
        closed: AtomicBool::new(false),
        ready: Event::new(),
    });
    (Reply(slot.clone()), Answer(slot))
}

impl<T> Reply<T> {
    /// Answers (never waits); the asker may have gone, then the answer is dropped.
    pub(crate) fn send(self, v: T) {
        *self.0.value.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
        // Dropping `self` wakes the asker.
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.ready.notify(usize::MAX);
    }
}

impl<T> Answer<T> {
    fn take(&self) -> Option<Result<T, NoAnswer>> {
        if !self.0.closed.load(Ordering::Acquire) {
            return None;
        }
        let v = self
            .0
            .value
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        Some(v.ok_or(NoAnswer::Gone))
    }

    /// Blocks this thread until the answer comes, at most `timeout`.
    pub(crate) fn recv_timeout(&self, timeout: Duration) -> Result<T, NoAnswer> {
        let deadline = Instant::now() + timeout;
        loop {
            let l = self.0.ready.listen();
            if let Some(r) = self.take() {
                return r;
            }
            if l.wait_deadline(deadline).is_none() {
                return self.take().unwrap_or(Err(NoAnswer::Timeout));
            }
        }
    }

    /// Waits for the answer asynchronously, at most `timeout` (`sleep_until` is the
    /// caller's timer).
    pub(crate) async fn recv<F: std::future::Future<Output = ()>>(
        &self,
        timeout: Duration,
        sleep_until: impl Fn(Instant) -> F,
    ) -> Result<T, NoAnswer> {
        let deadline = Instant::now() + timeout;
        let timer = std::pin::pin!(sleep_until(deadline));
        let mut timer = timer;
        loop {
            let l = self.0.ready.listen();
            if let Some(r) = self.take() {
                return r;
            }
            match futures_util::future::select(l, timer.as_mut()).await {
                futures_util::future::Either::Left(_) => {}
                futures_util::future::Either::Right(_) => {
                    return self.take().unwrap_or(Err(NoAnswer::Timeout));
                }
            }
        }
    }
}
