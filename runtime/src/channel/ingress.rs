//! Multi-producer ingress from plain (application) threads into one executor.
//!
//! Messages go through a lock-free bounded `crossbeam_queue::ArrayQueue`. The receiving
//! executor is woken through the same fence-based [`Notify`] as the SPSC rings. Senders
//! waiting for room park on an `event_listener::Event`. Its wait list sits behind a short
//! `std` mutex that `event-listener` (5.4.2 here; smol-rs/event-listener#139) takes on every
//! `notify`, waiters or not: the receiver takes it once per batch it drains while the queue
//! is at most half full, uncontended unless a sender is registering to wait at that moment.
//!
//! Blocked senders are woken only once the queue has drained to half its capacity, not
//! after every message taken: a publisher faster than its executor then parks and wakes
//! once per half queue instead of once per receive batch (each wake is a futex call and
//! two context switches, which on two cores cost more than the messages themselves).
//!
//! A **weighted** ingress ([`ingress_weighted`]) bounds the sum of its entries' weights
//! instead of their number: a producer that hands over many messages in one entry (a batch)
//! then cannot run further ahead of the executor than one that hands them over one by one.
//! The bound is checked with one compare-and-swap per entry on a counter the receiver updates
//! once per received batch.

use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use crossbeam_queue::ArrayQueue;
use event_listener::{Event, Listener};

use super::notify::Notify;
use crate::error::{Closed, SendError, TryRecvError, TrySendError};

struct Shared<T> {
    queue: ArrayQueue<T>,
    /// Weighted mode: the weight of an entry (at least 1 counts) and the sum queued; the
    /// ceiling is the queue's capacity (every entry weighs at least 1).
    weigh: Option<fn(&T) -> usize>,
    load: AtomicUsize,
    rx_notify: Notify,
    /// Wakes senders waiting for room.
    room: Event,
    senders: AtomicUsize,
    rx_closed: AtomicBool,
    full_events: AtomicU64,
}

impl<T> Shared<T> {
    /// The weight `value` counts for (0 when the ingress is not weighted).
    fn weight(&self, value: &T) -> usize {
        self.weigh.map_or(0, |f| f(value).max(1))
    }

    /// Called by the receiver after taking messages weighing `w` in all.
    fn taken(&self, w: usize) {
        // Blocked senders are woken once at most half the queue is taken.
        let half = if self.weigh.is_some() {
            self.load.fetch_sub(w, Ordering::AcqRel) - w <= self.queue.capacity() / 2
        } else {
            self.queue.len() <= self.queue.capacity() / 2
        };
        if half {
            self.room.notify(usize::MAX);
        }
    }

    /// Weighted mode: claims room for `w`; an entry heavier than the whole bound is admitted
    /// only into an empty queue, so it cannot be refused forever.
    fn claim(&self, w: usize) -> bool {
        let mut cur = self.load.load(Ordering::Relaxed);
        loop {
            if cur != 0 && cur + w > self.queue.capacity() {
                return false;
            }
            match self
                .load
                .compare_exchange_weak(cur, cur + w, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }
}

/// Creates a bounded multi-producer channel of `capacity` messages into one consumer.
pub fn ingress<T: Send>(capacity: usize) -> (IngressSender<T>, IngressReceiver<T>) {
    make(capacity, None)
}

/// Creates a bounded multi-producer channel into one consumer that holds entries weighing
/// at most `max_weight` in all, `weigh` giving each entry's weight (0 counts as 1). An entry
/// heavier than `max_weight` is accepted only when the queue is empty.
pub fn ingress_weighted<T: Send>(
    max_weight: usize,
    weigh: fn(&T) -> usize,
) -> (IngressSender<T>, IngressReceiver<T>) {
    make(max_weight, Some(weigh))
}

fn make<T: Send>(
    capacity: usize,
    weigh: Option<fn(&T) -> usize>,
) -> (IngressSender<T>, IngressReceiver<T>) {
    let shared = Arc::new(Shared {
        // Every entry weighs at least 1, so the weight bound is also an entry bound.
        queue: ArrayQueue::new(capacity.max(1)),
        weigh,
        load: AtomicUsize::new(0),
        rx_notify: Notify::default(),
        room: Event::new(),
        senders: AtomicUsize::new(1),
        rx_closed: AtomicBool::new(false),
        full_events: AtomicU64::new(0),
    });
    (
        IngressSender {
            shared: shared.clone(),
        },
        IngressReceiver { shared },
    )
}

/// A `Send + Clone` handle for any thread to feed one executor.
pub struct IngressSender<T> {
    shared: Arc<Shared<T>>,
}

impl<T> std::fmt::Debug for IngressSender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngressSender")
            .field("capacity", &self.shared.queue.capacity())
            .finish()
    }
}

impl<T> Clone for IngressSender<T> {
    fn clone(&self) -> Self {
        self.shared.senders.fetch_add(1, Ordering::Relaxed);
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for IngressSender<T> {
    fn drop(&mut self) {
        if self.shared.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.rx_notify.notify_always();
        }
    }
}

impl<T> IngressSender<T> {
    /// Queues `value` if there is room, without waiting; says why not otherwise.
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        let s = &*self.shared;
        if s.rx_closed.load(Ordering::Acquire) {
            return Err(TrySendError::Closed(value));
        }
        let w = s.weight(&value);
        if w > 0 && !s.claim(w) {
            s.full_events.fetch_add(1, Ordering::Relaxed);
            return Err(TrySendError::Full(value));
        }
        match s.queue.push(value) {
            Ok(()) => {
                s.rx_notify.notify();
                Ok(())
            }
            Err(value) => {
                if w > 0 {
                    s.taken(w);
                }
                s.full_events.fetch_add(1, Ordering::Relaxed);
                Err(TrySendError::Full(value))
            }
        }
    }

    /// Queues `value`, waiting asynchronously for room. Fails only when the receiver is gone.
    pub async fn send(&self, value: T) -> Result<(), SendError<T>> {
        let mut value = value;
        loop {
            value = match self.try_send(value) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Closed(v)) => return Err(SendError(v)),
                Err(TrySendError::Full(v)) => v,
            };
            let listener = self.shared.room.listen();
            value = match self.try_send(value) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Closed(v)) => return Err(SendError(v)),
                Err(TrySendError::Full(v)) => v,
            };
            listener.await;
        }
    }

    /// Queues `value`, blocking this thread while the queue is full. Never call this on an
    /// executor thread: it would stall every task of that executor.
    pub fn send_blocking(&self, value: T) -> Result<(), SendError<T>> {
        let mut value = value;
        loop {
            value = match self.try_send(value) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Closed(v)) => return Err(SendError(v)),
                Err(TrySendError::Full(v)) => v,
            };
            let listener = self.shared.room.listen();
            value = match self.try_send(value) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Closed(v)) => return Err(SendError(v)),
                Err(TrySendError::Full(v)) => v,
            };
            listener.wait();
        }
    }

    /// True when the receiver has been dropped.
    pub fn is_closed(&self) -> bool {
        self.shared.rx_closed.load(Ordering::Acquire)
    }

    /// How many sends found the queue full, across all clones.
    pub fn full_events(&self) -> u64 {
        self.shared.full_events.load(Ordering::Relaxed)
    }
}

/// The single consumer of an ingress queue, living on one executor.
pub struct IngressReceiver<T> {
    shared: Arc<Shared<T>>,
}

impl<T> std::fmt::Debug for IngressReceiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngressReceiver")
            .field("len", &self.shared.queue.len())
            .finish()
    }
}

impl<T> IngressReceiver<T> {
    /// Takes one message without waiting.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        match self.shared.queue.pop() {
            Some(v) => {
                self.shared.taken(self.shared.weight(&v));
                Ok(v)
            }
            None if self.senders_gone() => Err(TryRecvError::Closed),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Waits for the next message; `Closed` once every sender is gone and the queue drained.
    pub async fn recv(&mut self) -> Result<T, Closed> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Waits until something is queued, then moves up to `max` messages into `out`.
    pub async fn recv_batch(&mut self, out: &mut Vec<T>, max: usize) -> Result<usize, Closed> {
        let first = poll_fn(|cx| self.poll_take(cx)).await?;
        let s = &*self.shared;
        let mut w = s.weight(&first);
        out.push(first);
        let mut n = 1;
        while n < max {
            match s.queue.pop() {
                Some(v) => {
                    w += s.weight(&v);
                    out.push(v);
                    n += 1;
                }
                None => break,
            }
        }
        s.taken(w);
        Ok(n)
    }

    fn senders_gone(&self) -> bool {
        self.shared.senders.load(Ordering::Acquire) == 0 && self.shared.queue.is_empty()
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, Closed>> {
        let r = self.poll_take(cx);
        if let Poll::Ready(Ok(v)) = &r {
            self.shared.taken(self.shared.weight(v));
        }
        r
    }

    /// Pops one message (registering for a wake-up when there is none) without giving its
    /// room back: the caller calls `taken`.
    fn poll_take(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, Closed>> {
        let s = &*self.shared;
        if let Some(v) = s.queue.pop() {
            return Poll::Ready(Ok(v));
        }
        s.rx_notify.prepare_wait(cx.waker());
        if let Some(v) = s.queue.pop() {
            s.rx_notify.cancel_wait();
            return Poll::Ready(Ok(v));
        }
        if self.senders_gone() {
            s.rx_notify.cancel_wait();
            return Poll::Ready(Err(Closed));
        }
        Poll::Pending
    }
}

impl<T> Drop for IngressReceiver<T> {
    fn drop(&mut self) {
        self.shared.rx_closed.store(true, Ordering::Release);
        while self.shared.queue.pop().is_some() {}
        // Senders may be tasks of other executors, and this drop may be a panicking task's.
        let room = &self.shared.room;
        crate::unwind::outside_unwind(|| room.notify(usize::MAX));
    }
}
