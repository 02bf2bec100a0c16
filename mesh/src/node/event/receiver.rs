//! [`EventReceiver`]: the application's end of the event queue, which hands a shard's batch
//! out event by event and a run of samples sample by sample.
//!
//! **Owns:** taking entries off the queue, expanding them, and handing back what a dropped
//! receiver held. **Must not touch:** what is queued or when (the hub and the shards).

use super::batch::{Received, SampleBatch};
use super::Event;
use super::{EventHub, Item, Queued};
use crate::topics::EndpointGuid;
use event_listener::{EventListener, Listener};
use shoal_proto::shard::SampleRun;
use shoal_proto::wire::Samples;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The rest of a run a receiver is handing out.
struct RunCursor {
    reader: EndpointGuid,
    samples: Samples,
}

impl RunCursor {
    fn new(r: SampleRun) -> RunCursor {
        RunCursor {
            reader: r.reader,
            samples: r.samples,
        }
    }

    fn next(&mut self) -> Option<Event> {
        let (seq, payload) = self.samples.pop_front()?;
        Some(Event::Sample {
            reader: self.reader,
            writer: self.samples.writer,
            seq,
            payload,
        })
    }

    /// What is left, as a run again (for another receiver).
    fn rest(&self) -> Option<SampleRun> {
        (self.samples.count > 0).then(|| SampleRun {
            reader: self.reader,
            samples: self.samples.clone(),
        })
    }
}

/// Receives the node's events, from async code (`recv().await`, or as a
/// [`futures_core::Stream`]) or from a plain thread ([`EventReceiver::recv_timeout`]). Works
/// with any executor: waiting uses only `std::task::Waker`s.
///
/// Events are queued only while at least one receiver exists; clones share one queue (each
/// event goes to one of them). A receiver takes the Message events of one shard batch at a
/// time and hands out the rest of that batch before looking at the queue again. Dropping
/// the last receiver stops queueing and releases any shard waiting for room.
pub struct EventReceiver {
    hub: Arc<EventHub>,
    listener: Option<EventListener>,
    /// The rest of the batch taken last.
    batch: std::vec::IntoIter<Queued>,
    /// The rest of the run being handed out.
    run: Option<RunCursor>,
}

impl std::fmt::Debug for EventReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventReceiver")
            .field("queued", &self.hub.events.load(Ordering::Relaxed))
            .field("in_hand", &self.batch.len())
            .finish()
    }
}

impl EventReceiver {
    pub(crate) fn new(hub: Arc<EventHub>) -> EventReceiver {
        hub.receivers.fetch_add(1, Ordering::AcqRel);
        EventReceiver {
            hub,
            listener: None,
            batch: Vec::new().into_iter(),
            run: None,
        }
    }

    /// The next event of the batch in hand (expanding runs).
    fn next_in_hand(&mut self) -> Option<Event> {
        loop {
            if let Some(c) = &mut self.run {
                if let Some(ev) = c.next() {
                    return Some(ev);
                }
                self.run = None;
            }
            match self.batch.next()? {
                Queued::Ev(ev) => return Some(ev),
                Queued::Run(r) => self.run = Some(RunCursor::new(r)),
            }
        }
    }

    /// What is in hand next, with a run handed out whole (the rest of one begun by `pop`).
    fn next_in_hand_whole(&mut self) -> Option<Received> {
        if let Some(c) = self.run.take() {
            if let Some(rest) = c.rest() {
                return Some(Received::Samples(SampleBatch::new(rest)));
            }
        }
        Some(match self.batch.next()? {
            Queued::Ev(ev) => Received::Event(ev),
            Queued::Run(r) => Received::Samples(SampleBatch::new(r)),
        })
    }

    /// Takes the next queue entry: an event of its own (`Some(Some)`), or a batch put in
    /// hand (`Some(None)`); `None` when the queue is empty.
    fn take_entry(&mut self) -> Option<Option<Event>> {
        let item = self.hub.queue.pop()?;
        // The whole entry leaves the queue now: its room goes back at once (a receiver holds
        // at most one batch beyond the queue's bound).
        self.hub.release(item.len(), item.bytes());
        match item {
            Item::One(ev) => Some(Some(ev)),
            Item::Batch(v, _, _) => {
                self.batch = v.into_iter();
                Some(None)
            }
        }
    }

    fn pop(&mut self) -> Option<Event> {
        loop {
            if let Some(ev) = self.next_in_hand() {
                return Some(ev);
            }
            if let Some(ev) = self.take_entry()? {
                return Some(ev);
            }
        }
    }

    fn pop_whole(&mut self) -> Option<Received> {
        loop {
            if let Some(r) = self.next_in_hand_whole() {
                return Some(r);
            }
            if let Some(ev) = self.take_entry()? {
                return Some(Received::Event(ev));
            }
        }
    }

    /// The next event without waiting.
    pub fn try_recv(&mut self) -> Option<Event> {
        self.pop()
    }

    /// [`try_recv`](Self::try_recv), with a run of samples handed out whole as a
    /// [`SampleBatch`] (payloads borrowed from it: no event and no reference count per
    /// sample).
    pub fn try_recv_batch(&mut self) -> Option<Received> {
        self.pop_whole()
    }

    /// Waits for the next event; `None` once the node stopped and the queue is drained.
    pub async fn recv(&mut self) -> Option<Event> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// Blocks this thread for at most `timeout`; `None` on timeout or once the node stopped
    /// and the queue is drained. Never call it on an executor thread (e.g. in a callback).
    ///
    /// With the node's `spin_before_park` set, it first polls the queue for that long (never
    /// past `timeout`), yielding the core between polls, and only then sleeps: a sleeping
    /// thread's wake-up costs a system call on the shard and a scheduler wake-up here.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Option<Event> {
        self.wait_for(timeout, Self::pop)
    }

    /// [`recv_timeout`](Self::recv_timeout), with a run of samples handed out whole as a
    /// [`SampleBatch`]: for subscribers of high sample rates. Events and batches come in the
    /// order `recv_timeout` would hand out their events.
    pub fn recv_batch_timeout(&mut self, timeout: Duration) -> Option<Received> {
        self.wait_for(timeout, Self::pop_whole)
    }

    fn wait_for<T>(&mut self, timeout: Duration, pop: fn(&mut Self) -> Option<T>) -> Option<T> {
        let start = Instant::now();
        let deadline = start + timeout;
        if let Some(x) = self.spin_for(start + self.hub.spin.min(timeout), pop) {
            return Some(x);
        }
        loop {
            if let Some(x) = pop(self) {
                return Some(x);
            }
            if self.hub.closed.load(Ordering::Acquire) {
                return None;
            }
            let listener = self.hub.ready.listen();
            if let Some(x) = pop(self) {
                return Some(x);
            }
            if self.hub.closed.load(Ordering::Acquire) {
                return None;
            }
            listener.wait_deadline(deadline)?;
        }
    }

    /// Polls the queue until `until` (yielding the core between polls); `None` at `until`
    /// or once the node stopped with nothing queued.
    fn spin_for<T>(&mut self, until: Instant, pop: fn(&mut Self) -> Option<T>) -> Option<T> {
        if until <= Instant::now() {
            return None;
        }
        loop {
            if let Some(x) = pop(self) {
                return Some(x);
            }
            if self.hub.closed.load(Ordering::Acquire) || Instant::now() >= until {
                return None;
            }
            std::thread::yield_now();
        }
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        loop {
            if let Some(ev) = self.pop() {
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
        let mut rest: Vec<Queued> = Vec::new();
        if let Some(r) = self.run.take().and_then(|c| c.rest()) {
            rest.push(Queued::Run(r));
        }
        rest.extend(std::mem::take(&mut self.batch));
        if self.hub.receivers.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Nobody listens any more: what is queued is dropped, as events raised from now
            // on are not queued at all.
            while let Some(item) = self.hub.queue.pop() {
                self.hub.release(item.len(), item.bytes());
            }
            self.hub.room.notify(usize::MAX);
        } else if !rest.is_empty() {
            // Another receiver gets what this one took but did not hand out. Its room was
            // given back when the batch was taken, so it is taken again, past the bound if
            // need be (by at most one batch): these events were admitted once already.
            let n = rest.iter().map(Queued::events).sum();
            let bytes = rest.iter().map(Queued::bytes).sum();
            self.hub.events.fetch_add(n, Ordering::AcqRel);
            self.hub.bytes.fetch_add(bytes, Ordering::AcqRel);
            self.hub.queue.push(Item::Batch(rest, n, bytes));
            self.hub.ready.notify(n);
        }
    }
}

impl futures_core::Stream for EventReceiver {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.poll_event(cx)
    }
}
