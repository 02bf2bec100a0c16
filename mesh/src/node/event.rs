//! What the node tells the application, and the bounded queue that carries it.
//!
//! Queue policy: one bounded queue of `event_queue_capacity` entries, fed only while at least
//! one [`EventReceiver`] exists. Message events may fill it only up to three quarters; a shard
//! that finds no room waits (backpressure: it stops reading that link, TCP pushes back on the
//! sender, whose outbound policy then applies) and counts the wait. Control events (peers,
//! members, errors) never wait: they may use the whole queue, and one that finds it full is
//! dropped and counted (`dropped_event_queue_full`). Order is kept within each class.

use super::stats::{inc, Counters};
use crate::PeerId;
use bytes::Bytes;
use crossbeam_queue::ArrayQueue;
use event_listener::{Event as Signal, EventListener, Listener};
use std::cell::Cell;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Why an [`Event::Error`] was raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A peer sent bytes that do not decode; its link was closed.
    Malformed,
    /// A peer announced a frame longer than `max_message_bytes`; its link was closed.
    Oversize,
    /// A peer stayed blocked past the Disconnect policy's limit; its link was closed.
    SlowPeer,
    /// Multicast discovery could not be set up or failed (not fatal: static/seed peers work).
    Discovery,
    /// A socket operation failed.
    Io,
    /// The peer runs the other mode (secured vs plaintext); the connection was refused.
    ModeMismatch,
    /// Secured mesh: a handshake failed its cryptographic checks (AuthConfirm tag: another
    /// PSK or a tampered handshake; a low-order key), or a record did not authenticate
    /// (tampered, reordered, replayed, truncated). The link was closed.
    Crypto,
    /// Identity mesh: the peer's identity was refused (missing, unsigned, node id not the
    /// hash of its key, bad signature, key not trusted or revoked).
    Identity,
}

/// Something the node reports to the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A peer announced itself for the first time (or again after being Lost).
    PeerDiscovered {
        /// The peer.
        peer: PeerId,
        /// Its dial-back address.
        addr: SocketAddr,
    },
    /// A link to the peer is established.
    PeerConnected {
        /// The peer.
        peer: PeerId,
    },
    /// The peer's link went away (a dial-race switch is not a disconnect).
    PeerDisconnected {
        /// The peer.
        peer: PeerId,
    },
    /// The peer was neither announced nor connected for `peer_lost_timeout`: forgotten.
    /// Static peers are never lost.
    PeerLost {
        /// The peer.
        peer: PeerId,
    },
    /// A node became reachable through the mesh.
    MemberJoined {
        /// The node.
        peer: PeerId,
    },
    /// A node is no longer reachable.
    MemberLeft {
        /// The node.
        peer: PeerId,
    },
    /// Application bytes arrived.
    Message {
        /// The originator.
        from: PeerId,
        /// The payload (a slice of the read buffer: no copy).
        payload: Bytes,
        /// True for a broadcast, false for a message targeted at this node.
        broadcast: bool,
    },
    /// Something went wrong that the node survived.
    Error {
        /// The peer concerned, if known.
        peer: Option<PeerId>,
        /// The class of failure.
        kind: ErrorKind,
        /// Human-readable detail.
        message: String,
    },
}

/// An event callback: runs on the executor thread that raised the event (see the module docs
/// of [`crate::node`]); it must return quickly and never block.
pub type Callback = Arc<dyn Fn(&Event) + Send + Sync + 'static>;

/// The node's side of event delivery, shared by every executor.
pub(crate) struct EventHub {
    callbacks: Vec<Callback>,
    receivers: AtomicUsize,
    queue: ArrayQueue<Event>,
    message_limit: usize,
    ready: Signal,
    room: Signal,
    closed: AtomicBool,
}

impl EventHub {
    pub(crate) fn new(capacity: usize, callbacks: Vec<Callback>) -> EventHub {
        let capacity = capacity.max(4);
        EventHub {
            callbacks,
            receivers: AtomicUsize::new(0),
            queue: ArrayQueue::new(capacity),
            message_limit: (capacity * 3 / 4).max(1),
            ready: Signal::new(),
            room: Signal::new(),
            closed: AtomicBool::new(false),
        }
    }

    fn subscribed(&self) -> bool {
        self.receivers.load(Ordering::Acquire) > 0
    }

    fn run_callbacks(&self, ev: &Event) {
        for cb in &self.callbacks {
            cb(ev);
        }
    }

    /// A peer/member/error event: never waits; dropped and counted when the queue is full.
    pub(crate) fn emit_control(&self, ev: Event, counters: &Counters) {
        tracing::debug!(?ev, "event");
        self.run_callbacks(&ev);
        if !self.subscribed() || self.closed.load(Ordering::Acquire) {
            return;
        }
        if self.queue.push(ev).is_err() {
            inc(&counters.dropped_event_queue_full);
        } else {
            self.ready.notify(1);
        }
    }

    /// A Message event: waits for room below the message share of the queue. `on_wait` is
    /// called before the first wait (the caller marks its link as busy, not dead).
    ///
    /// The receivers are not woken here: the event is counted in `unwoken`, and the caller
    /// wakes them once per batch with [`EventHub::wake_receivers`] (and must do so before it
    /// parks). This function does it itself before waiting for room.
    #[cfg(test)]
    pub(crate) async fn emit_message(
        &self,
        ev: Event,
        counters: &Counters,
        unwoken: &Cell<usize>,
        on_wait: impl FnMut(bool),
    ) {
        if let Err(ev) = self.try_emit_message(ev, unwoken) {
            self.queue_message(ev, counters, unwoken, on_wait).await;
        }
    }

    /// The first half of [`emit_message`](Self::emit_message), which never waits: runs the
    /// callbacks and queues the event if there is room (or drops it if nobody listens). `Err`
    /// hands the event back when the caller must wait with [`EventHub::queue_message`].
    /// Kept apart so the common case costs a shard no future at all.
    pub(crate) fn try_emit_message(&self, ev: Event, unwoken: &Cell<usize>) -> Result<(), Event> {
        self.run_callbacks(&ev);
        self.try_queue_message(ev, unwoken)
    }

    fn try_queue_message(&self, ev: Event, unwoken: &Cell<usize>) -> Result<(), Event> {
        if !self.subscribed() || self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.queue.len() >= self.message_limit {
            return Err(ev);
        }
        self.queue.push(ev)?;
        unwoken.set(unwoken.get() + 1);
        Ok(())
    }

    /// The second half of [`emit_message`](Self::emit_message): waits for room, then queues.
    pub(crate) async fn queue_message(
        &self,
        ev: Event,
        counters: &Counters,
        unwoken: &Cell<usize>,
        mut on_wait: impl FnMut(bool),
    ) {
        let mut ev = ev;
        let mut waited = false;
        loop {
            ev = match self.try_queue_message(ev, unwoken) {
                Ok(()) => break,
                Err(ev) => ev,
            };
            // The receivers must hear of what is queued, or they may never make room.
            self.wake_receivers(unwoken);
            let listener = self.room.listen();
            if self.queue.len() < self.message_limit
                || !self.subscribed()
                || self.closed.load(Ordering::Acquire)
            {
                continue;
            }
            if !waited {
                waited = true;
                inc(&counters.event_queue_waits);
                on_wait(true);
            }
            listener.await;
        }
        if waited {
            on_wait(false);
        }
    }

    /// Wakes receivers for the `unwoken` events queued since the last call (one wake per
    /// event at most, so clones of the receiver share the work as before).
    pub(crate) fn wake_receivers(&self, unwoken: &Cell<usize>) {
        let n = unwoken.replace(0);
        if n > 0 {
            self.ready.notify(n);
        }
    }

    /// Ends delivery: receivers drain what is queued, then see the end; no one waits anymore.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.ready.notify(usize::MAX);
        self.room.notify(usize::MAX);
    }

    fn pop(&self) -> Option<Event> {
        let ev = self.queue.pop()?;
        self.room.notify(1);
        Some(ev)
    }
}

/// Receives the node's events, from async code (`recv().await`, or as a
/// [`futures_core::Stream`]) or from a plain thread ([`EventReceiver::recv_timeout`]). Works
/// with any executor: waiting uses only `std::task::Waker`s.
///
/// Events are queued only while at least one receiver exists; clones share one queue (each
/// event goes to one of them). Dropping the last receiver stops queueing and releases any
/// shard waiting for room.
pub struct EventReceiver {
    hub: Arc<EventHub>,
    listener: Option<EventListener>,
}

impl std::fmt::Debug for EventReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventReceiver")
            .field("queued", &self.hub.queue.len())
            .finish()
    }
}

impl EventReceiver {
    pub(crate) fn new(hub: Arc<EventHub>) -> EventReceiver {
        hub.receivers.fetch_add(1, Ordering::AcqRel);
        EventReceiver {
            hub,
            listener: None,
        }
    }

    /// The next event without waiting.
    pub fn try_recv(&mut self) -> Option<Event> {
        self.hub.pop()
    }

    /// Waits for the next event; `None` once the node stopped and the queue is drained.
    pub async fn recv(&mut self) -> Option<Event> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// Blocks this thread for at most `timeout`; `None` on timeout or once the node stopped
    /// and the queue is drained. Never call it on an executor thread (e.g. in a callback).
    pub fn recv_timeout(&mut self, timeout: Duration) -> Option<Event> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(ev) = self.hub.pop() {
                return Some(ev);
            }
            if self.hub.closed.load(Ordering::Acquire) {
                return None;
            }
            let listener = self.hub.ready.listen();
            if let Some(ev) = self.hub.pop() {
                return Some(ev);
            }
            if self.hub.closed.load(Ordering::Acquire) {
                return None;
            }
            listener.wait_deadline(deadline)?;
        }
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        loop {
            if let Some(ev) = self.hub.pop() {
                self.listener = None;
                return Poll::Ready(Some(ev));
            }
            if self.hub.closed.load(Ordering::Acquire) {
                return Poll::Ready(None);
            }
            match self.listener.as_mut() {
                None => self.listener = Some(self.hub.ready.listen()),
                Some(l) => match Pin::new(l).poll(cx) {
                    Poll::Ready(()) => self.listener = None,
                    Poll::Pending => return Poll::Pending,
                },
            }
        }
    }
}

impl Clone for EventReceiver {
    fn clone(&self) -> Self {
        EventReceiver::new(self.hub.clone())
    }
}

impl Drop for EventReceiver {
    fn drop(&mut self) {
        if self.hub.receivers.fetch_sub(1, Ordering::AcqRel) == 1 {
            while self.hub.queue.pop().is_some() {}
            self.hub.room.notify(usize::MAX);
        }
    }
}

impl futures_core::Stream for EventReceiver {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.poll_event(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn joined(n: u8) -> Event {
        Event::MemberJoined {
            peer: PeerId([n; 16]),
        }
    }

    fn message(n: u8) -> Event {
        Event::Message {
            from: PeerId([n; 16]),
            payload: Bytes::from_static(b"x"),
            broadcast: true,
        }
    }

    #[test]
    fn nothing_is_queued_without_a_receiver_and_overflow_is_counted() {
        let hub = Arc::new(EventHub::new(4, Vec::new()));
        let c = Counters::default();
        hub.emit_control(joined(1), &c);
        let mut rx = EventReceiver::new(hub.clone());
        assert_eq!(
            rx.try_recv(),
            None,
            "events before subscribing are not queued"
        );
        for n in 0..10 {
            hub.emit_control(joined(n), &c);
        }
        assert_eq!(c.snapshot().dropped_event_queue_full, 6);
        assert_eq!(rx.try_recv(), Some(joined(0)), "order kept, newest dropped");
        assert_eq!(rx.recv_timeout(Duration::from_millis(1)), Some(joined(1)));
    }

    #[test]
    fn messages_wait_for_room_below_three_quarters_and_control_events_pass() {
        let hub = Arc::new(EventHub::new(4, Vec::new()));
        let c = Counters::default();
        let mut rx = EventReceiver::new(hub.clone());
        let mut cx = Context::from_waker(Waker::noop());
        let unwoken = Cell::new(0);
        for n in 0..3 {
            let mut f = std::pin::pin!(hub.emit_message(message(n), &c, &unwoken, |_| {}));
            assert!(f.as_mut().poll(&mut cx).is_ready());
        }
        let mut waited = Vec::new();
        {
            let mut f =
                std::pin::pin!(hub.emit_message(message(3), &c, &unwoken, |w| waited.push(w)));
            assert!(
                f.as_mut().poll(&mut cx).is_pending(),
                "three quarters full: wait"
            );
            hub.emit_control(joined(9), &c);
            assert_eq!(
                c.snapshot().dropped_event_queue_full,
                0,
                "control events use the rest"
            );
            assert_eq!(rx.try_recv(), Some(message(0)));
            assert_eq!(rx.try_recv(), Some(message(1)));
            assert!(f.as_mut().poll(&mut cx).is_ready(), "room again");
        }
        assert_eq!(waited, vec![true, false]);
        assert_eq!(c.snapshot().event_queue_waits, 1);
        hub.close();
        let rest: Vec<Event> =
            std::iter::from_fn(|| rx.recv_timeout(Duration::from_millis(1))).collect();
        assert_eq!(rest, vec![message(2), joined(9), message(3)]);
    }

    #[test]
    fn a_closed_hub_never_makes_a_shard_wait() {
        let hub = Arc::new(EventHub::new(4, Vec::new()));
        let c = Counters::default();
        let _rx = EventReceiver::new(hub.clone());
        hub.close();
        let mut cx = Context::from_waker(Waker::noop());
        let unwoken = Cell::new(0);
        for n in 0..10 {
            let mut f = std::pin::pin!(hub.emit_message(message(n), &c, &unwoken, |_| {}));
            assert!(f.as_mut().poll(&mut cx).is_ready());
        }
    }

    #[test]
    fn receivers_are_woken_once_per_batch_and_always_before_a_wait() {
        let hub = Arc::new(EventHub::new(8, Vec::new()));
        let c = Counters::default();
        let mut rx = EventReceiver::new(hub.clone());
        let mut cx = Context::from_waker(Waker::noop());
        let unwoken = Cell::new(0);
        let mut parked = hub.ready.listen();
        for n in 0..3 {
            let mut f = std::pin::pin!(hub.emit_message(message(n), &c, &unwoken, |_| {}));
            assert!(f.as_mut().poll(&mut cx).is_ready());
        }
        assert_eq!(unwoken.get(), 3);
        assert!(
            Pin::new(&mut parked).poll(&mut cx).is_pending(),
            "no wake per event"
        );
        hub.wake_receivers(&unwoken);
        assert_eq!(unwoken.get(), 0);
        assert!(
            Pin::new(&mut parked).poll(&mut cx).is_ready(),
            "one wake for the batch"
        );

        // A shard about to wait for room wakes the receivers first, or nobody would ever
        // drain the queue (the message limit is 6 of 8).
        let mut parked = hub.ready.listen();
        for n in 3..6 {
            let mut f = std::pin::pin!(hub.emit_message(message(n), &c, &unwoken, |_| {}));
            assert!(f.as_mut().poll(&mut cx).is_ready());
        }
        let mut f = std::pin::pin!(hub.emit_message(message(6), &c, &unwoken, |_| {}));
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert_eq!(unwoken.get(), 0);
        assert!(Pin::new(&mut parked).poll(&mut cx).is_ready());
        assert_eq!(rx.try_recv(), Some(message(0)));
        assert!(f.as_mut().poll(&mut cx).is_ready());
    }
}
