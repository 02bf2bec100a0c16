//! Point-to-point channel: one [`Sender`], one [`Receiver`], one SPSC ring.

use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::notify::Notify;
use super::spsc::{Consumer, Producer, Ring};
use crate::error::{Closed, SendError, TryRecvError, TrySendError};

/// Creates a bounded single-producer single-consumer channel holding at least `capacity`
/// messages (rounded up to a power of two).
///
/// Either end may be moved to any thread or executor; neither is `Clone`, which is what
/// makes the ring lock-free without a CAS.
pub fn channel<T: Send>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let ring = Arc::new(Ring::new(capacity, Arc::new(Notify::default())));
    (
        Sender::new(ring.clone()),
        Receiver {
            rx: Consumer::new(ring),
        },
    )
}

/// The producing end of one ring.
pub struct Sender<T> {
    tx: Producer<T>,
    full_events: u64,
}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("capacity", &self.tx.ring.capacity())
            .field("full_events", &self.full_events)
            .finish()
    }
}

impl<T> Sender<T> {
    pub(crate) fn new(ring: Arc<Ring<T>>) -> Self {
        Self {
            tx: Producer::new(ring),
            full_events: 0,
        }
    }

    /// Queues `value` if there is room, without waiting.
    #[inline]
    pub fn try_send(&mut self, value: T) -> Result<(), TrySendError<T>> {
        let ring = &self.tx.ring;
        if ring.rx_closed.load(Ordering::Acquire) {
            return Err(TrySendError::Closed(value));
        }
        match self.tx.push(value) {
            Ok(()) => {
                ring.rx_notify.notify();
                Ok(())
            }
            Err(value) => {
                self.full_events += 1;
                Err(TrySendError::Full(value))
            }
        }
    }

    /// Queues `value`, waiting for room while the ring is full.
    ///
    /// Fails only when the receiver is gone. Cancel-safe in the sense that dropping the
    /// future drops the message, never queues it twice.
    pub async fn send(&mut self, value: T) -> Result<(), SendError<T>> {
        let mut slot = Some(value);
        poll_fn(|cx| self.poll_send(cx, &mut slot)).await
    }

    fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        slot: &mut Option<T>,
    ) -> Poll<Result<(), SendError<T>>> {
        let value = slot.take().expect("send polled after completion");
        let value = match self.try_send(value) {
            Ok(()) => return Poll::Ready(Ok(())),
            Err(TrySendError::Closed(v)) => return Poll::Ready(Err(SendError(v))),
            Err(TrySendError::Full(v)) => v,
        };
        let ring = &self.tx.ring;
        ring.tx_notify.prepare_wait(cx.waker());
        if !self.tx.is_full() || ring.rx_closed.load(Ordering::Acquire) {
            // Room appeared (or the receiver left) between the push and the registration.
            ring.tx_notify.cancel_wait();
            cx.waker().wake_by_ref();
        }
        *slot = Some(value);
        Poll::Pending
    }

    /// True when the receiver has been dropped.
    pub fn is_closed(&self) -> bool {
        self.tx.ring.rx_closed.load(Ordering::Acquire)
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> usize {
        self.tx.ring.capacity()
    }

    /// How many times a send found the ring full (the ceiling was hit).
    pub fn full_events(&self) -> u64 {
        self.full_events
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.tx.ring.tx_closed.store(true, Ordering::Release);
        self.tx.ring.rx_notify.notify_always();
    }
}

/// The consuming end of one ring.
pub struct Receiver<T> {
    rx: Consumer<T>,
}

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("capacity", &self.rx.ring.capacity())
            .finish()
    }
}

impl<T> Receiver<T> {
    /// Takes the oldest message without waiting.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        match self.rx.pop_quiet() {
            Some(v) => {
                self.rx.release();
                Ok(v)
            }
            None if self.sender_gone() => Err(TryRecvError::Closed),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Waits for the next message; `Closed` once the sender is gone and the ring drained.
    pub async fn recv(&mut self) -> Result<T, Closed> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Waits until at least one message is queued, then moves up to `max` of them into
    /// `out` (appending). Returns how many were moved; `Closed` once drained and closed.
    pub async fn recv_batch(&mut self, out: &mut Vec<T>, max: usize) -> Result<usize, Closed> {
        poll_fn(|cx| {
            let n = self.drain(out, max);
            if n > 0 {
                return Poll::Ready(Ok(n));
            }
            match self.poll_recv(cx) {
                Poll::Ready(Ok(v)) => {
                    out.push(v);
                    Poll::Ready(Ok(1 + self.drain(out, max.saturating_sub(1))))
                }
                Poll::Ready(Err(c)) => Poll::Ready(Err(c)),
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }

    fn drain(&mut self, out: &mut Vec<T>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            match self.rx.pop_quiet() {
                Some(v) => {
                    out.push(v);
                    n += 1;
                }
                None => break,
            }
        }
        if n > 0 {
            self.rx.release();
        }
        n
    }

    fn sender_gone(&self) -> bool {
        // Acquire on the flag, then re-read `tail`: a push that happened before the close
        // is visible, so "closed and empty" really means drained.
        self.rx.ring.tx_closed.load(Ordering::Acquire) && self.rx.is_empty()
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, Closed>> {
        if let Some(v) = self.rx.pop_quiet() {
            self.rx.release();
            return Poll::Ready(Ok(v));
        }
        let notify = &*self.rx.ring.rx_notify;
        notify.prepare_wait(cx.waker());
        if let Some(v) = self.rx.pop_quiet() {
            notify.cancel_wait();
            self.rx.release();
            return Poll::Ready(Ok(v));
        }
        if self.sender_gone() {
            notify.cancel_wait();
            return Poll::Ready(Err(Closed));
        }
        Poll::Pending
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.rx.ring.rx_closed.store(true, Ordering::Release);
        self.rx.ring.tx_notify.notify_always();
    }
}
