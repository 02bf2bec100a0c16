//! [`EventHub`]: the node's side of the event queue, shared by every executor: the room
//! Message events reserve (events and payload bytes, in per-shard credit chunks), each shard's
//! [`Outbox`] of admitted events, and the hand-over of an outbox as one queue entry. A
//! delivery goes in without waiting ([`EventHub::try_queue_message`],
//! [`EventHub::try_queue_run`]) or, when that found no room, through
//! [`EventHub::queue_waiting`], in the same shape either way (a run of samples stays one
//! entry). The shard's `deliver` module is their one caller for deliveries. The queue policy
//! is in the [module docs](super).
//!
//! **Owns:** admission, reservation and release of queue room. **Must not touch:** how a
//! receiver expands entries (`receiver`).

use super::{Callback, Event};
use crate::node::stats::{inc, Counters};
use crate::PeerId;
use bytes::Bytes;
use crossbeam_queue::SegQueue;
use event_listener::Event as Signal;
use shoal_proto::shard::SampleRun;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// One entry of the queue: a control event alone, or a shard's batch of Message-class events
/// (with the number of events and the payload bytes it holds).
pub(super) enum Item {
    One(Event),
    Batch(Vec<Queued>, usize, usize),
}

impl Item {
    pub(super) fn len(&self) -> usize {
        match self {
            Item::One(_) => 1,
            Item::Batch(_, n, _) => *n,
        }
    }

    /// Bytes reserved for it (see [`event_bytes`]; most control events reserve none).
    pub(super) fn bytes(&self) -> usize {
        match self {
            Item::One(ev) => event_bytes(ev),
            Item::Batch(_, _, b) => *b,
        }
    }
}

/// An entry of a shard's batch: one event, or a run of one writer's samples for one reader,
/// which a receiver hands out as one [`Event::Sample`] per sample. A run costs the shard one
/// entry whatever its length; the payload slices (a reference count each) are cut on the
/// application's thread as it takes them, so the read buffer's count is not bounced between
/// the two threads per sample.
pub(crate) enum Queued {
    Ev(Event),
    Run(SampleRun),
}

impl Queued {
    /// Events it stands for.
    pub(super) fn events(&self) -> usize {
        match self {
            Queued::Ev(_) => 1,
            Queued::Run(r) => usize::from(r.samples.count),
        }
    }

    /// Bytes it holds (see [`event_bytes`]).
    pub(super) fn bytes(&self) -> usize {
        match self {
            Queued::Ev(ev) => event_bytes(ev),
            Queued::Run(r) => r.samples.body.len(),
        }
    }
}

/// Bytes an event counts against `event_queue_bytes`: the payload of a Message or Sample
/// event, and what an `Incompatible` event holds on the heap (its topic and every reason:
/// partition lists of up to 64 names of 256 bytes on each side, which a stranger's
/// announcements choose). The other events hold a peer id, a topic name or a short message:
/// their count alone bounds them.
pub(super) fn event_bytes(ev: &Event) -> usize {
    match ev {
        Event::Message { payload, .. } | Event::Sample { payload, .. } => payload.len(),
        Event::Incompatible { topic, reasons, .. } => topic.len() + reasons_bytes(reasons),
        _ => 0,
    }
}

/// The heap an `Incompatible` event's reasons hold: each reason, and the strings it owns.
fn reasons_bytes(reasons: &crate::topics::Reasons) -> usize {
    use crate::topics::Incompatibility as I;
    let names = |v: &[String]| -> usize {
        v.iter()
            .map(|s| std::mem::size_of::<String>() + s.len())
            .sum()
    };
    reasons
        .iter()
        .map(|r| {
            std::mem::size_of::<I>()
                + match r {
                    I::Topic { writer, reader } | I::TypeName { writer, reader } => {
                        writer.len() + reader.len()
                    }
                    I::Qos {
                        offered, requested, ..
                    } => offered.len() + requested.len(),
                    I::Partitions { writer, reader } => names(writer) + names(reader),
                    _ => 0,
                }
        })
        .sum()
}

/// A shard's Message events admitted to the queue (their room is reserved) but not handed
/// over yet: [`EventHub::wake_receivers`] moves them as one entry, so a read of many frames
/// costs the application thread one queue operation and one wake-up, not one per message.
///
/// The outbox also holds room reserved ahead (`credit`), taken from the shared count in
/// chunks of up to [`CREDIT_CHUNK`] and given back when the outbox is handed over, so a shard
/// pays one atomic update per chunk rather than one per message, on a counter the application
/// thread also writes. Credit counts as reserved, so the bound holds as before.
#[derive(Default)]
pub(crate) struct Outbox {
    pub(super) events: RefCell<Vec<Queued>>,
    /// Events `events` stands for (a run counts each of its samples).
    pub(super) held: Cell<usize>,
    /// Payload bytes `events` holds.
    pub(super) held_bytes: Cell<usize>,
    pub(super) credit: Cell<usize>,
    /// Payload bytes reserved ahead, as `credit` is for events.
    pub(super) byte_credit: Cell<usize>,
    /// Length of the last batch handed over: the next batch's allocation, so it is not
    /// regrown (and copied) from empty on every read.
    pub(super) last_len: Cell<usize>,
}

impl Outbox {
    /// Queues one event whose room [`EventHub::message_room`] took.
    #[inline]
    fn push(&self, ev: Event) {
        self.events.borrow_mut().push(Queued::Ev(ev));
        self.held.set(self.held.get() + 1);
    }

    /// [`Outbox::push`] of a Message event, built where it is queued.
    #[inline]
    pub(crate) fn push_message(&self, from: PeerId, broadcast: bool, payload: Bytes) {
        self.events.borrow_mut().push(Queued::Ev(Event::Message {
            from,
            broadcast,
            payload,
        }));
        self.held.set(self.held.get() + 1);
    }
}

/// See [`EventHub::message_room`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Room {
    /// Room taken: push the event.
    Queue,
    /// No room below the message share of the queue: wait, or give the event back.
    Full,
    /// No receiver (or delivery ended): the event is dropped.
    Discard,
}

/// Most room a shard reserves ahead for its outbox in one atomic update.
pub(super) const CREDIT_CHUNK: usize = 64;
/// Payload bytes a shard reserves ahead at least, in one atomic update.
pub(super) const BYTE_CREDIT_CHUNK: usize = 64 * 1024;

/// The node's side of event delivery, shared by every executor.
pub(crate) struct EventHub {
    pub(super) callbacks: Vec<Callback>,
    pub(super) receivers: AtomicUsize,
    /// The entries, in blocks allocated as they fill: the bound is `events` against
    /// `capacity`, not the queue's own. A queue of preallocated entries (crossbeam's
    /// `ArrayQueue`) wrote all `capacity` of them at start, ~5.8 MB at the default (42 % of an
    /// idle node's memory) for a queue that rarely holds more than a few batches.
    pub(super) queue: SegQueue<Item>,
    /// Events the queue holds at most (`event_queue_capacity`).
    pub(super) capacity: usize,
    /// Events reserved: queued (each event of a batch counts) or in a shard's outbox. At most
    /// `capacity`, but for what a dropped receiver hands back (at most one batch each).
    pub(super) events: AtomicUsize,
    pub(super) message_limit: usize,
    /// Bytes reserved (payloads queued or in an outbox, credit included, and queued
    /// `Incompatible` events' reasons; see [`event_bytes`]), against `bytes_limit`.
    pub(super) bytes: AtomicUsize,
    pub(super) bytes_limit: usize,
    pub(super) ready: Signal,
    pub(super) room: Signal,
    pub(super) closed: AtomicBool,
    /// Peers whose `PeerConnected` the queue dropped: their `PeerDisconnected` is dropped
    /// too, so queued peer events stay paired. At most the connected peers.
    pub(super) unpaired: Mutex<ahash::AHashSet<PeerId>>,
    /// How long a blocking receive polls the queue before it parks (the node's
    /// `spin_before_park`; zero parks at once).
    pub(super) spin: Duration,
}

impl EventHub {
    /// A hub of `capacity` events whose Message events hold at most about `bytes` of
    /// payload (see the module docs).
    pub(crate) fn new(capacity: usize, bytes: usize, callbacks: Vec<Callback>) -> EventHub {
        let capacity = capacity.max(4);
        EventHub {
            callbacks,
            receivers: AtomicUsize::new(0),
            queue: SegQueue::new(),
            capacity,
            events: AtomicUsize::new(0),
            message_limit: (capacity * 3 / 4).max(1),
            bytes: AtomicUsize::new(0),
            bytes_limit: bytes.max(1),
            ready: Signal::new(),
            room: Signal::new(),
            closed: AtomicBool::new(false),
            unpaired: Mutex::new(ahash::AHashSet::new()),
            spin: Duration::ZERO,
        }
    }

    /// Blocking receives poll for up to `spin` before they park.
    pub(crate) fn with_receive_spin(mut self, spin: Duration) -> EventHub {
        self.spin = spin;
        self
    }

    pub(super) fn subscribed(&self) -> bool {
        self.receivers.load(Ordering::Acquire) > 0
    }

    pub(crate) fn run_callbacks(&self, ev: &Event) {
        for cb in &self.callbacks {
            cb(ev);
        }
    }

    /// Reserves room for one event if fewer than `limit` are reserved.
    pub(super) fn reserve(&self, limit: usize) -> bool {
        self.reserve_up_to(limit, 1) == 1
    }

    /// Reserves room for up to `want` events, as many as stay within `limit`; returns how
    /// many (0 when `limit` is reached).
    pub(super) fn reserve_up_to(&self, limit: usize, want: usize) -> usize {
        match self
            .events
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then(|| n + want.min(limit - n))
            }) {
            Ok(n) => want.min(limit - n),
            Err(_) => 0,
        }
    }

    /// Gives back the room of `n` events holding `bytes` of payload, taken out of the queue
    /// (or discarded, or credit unused).
    pub(super) fn release(&self, n: usize, bytes: usize) {
        if bytes > 0 {
            self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        }
        if n > 0 {
            self.events.fetch_sub(n, Ordering::AcqRel);
        }
        if n > 0 || bytes > 0 {
            self.room.notify(n.max(1));
        }
    }

    /// Takes `want` payload bytes for `outbox`: from its credit, or from the shared count
    /// while that is below the limit (in chunks, so a shard pays one atomic update per
    /// chunk). False when the limit is reached: nothing taken.
    pub(super) fn reserve_bytes(&self, outbox: &Outbox, want: usize) -> bool {
        let credit = outbox.byte_credit.get();
        if credit >= want {
            outbox.byte_credit.set(credit - want);
            return true;
        }
        let chunk = (want - credit).max(BYTE_CREDIT_CHUNK);
        let limit = self.bytes_limit;
        let got = self
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b < limit).then(|| b + chunk)
            });
        if got.is_err() {
            return false;
        }
        outbox.byte_credit.set(credit + chunk - want);
        true
    }

    /// Reserves `bytes` for a control event while the reserved bytes are below the limit.
    fn reserve_control_bytes(&self, bytes: usize) -> bool {
        let limit = self.bytes_limit;
        self.bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b < limit).then(|| b + bytes)
            })
            .is_ok()
    }

    /// True while Message events have room of both kinds.
    pub(super) fn message_room_left(&self) -> bool {
        self.events.load(Ordering::Acquire) < self.message_limit
            && self.bytes.load(Ordering::Acquire) < self.bytes_limit
    }

    /// A peer/member/error/topic event: never waits; dropped and counted when the queue is
    /// full, or when it holds bytes ([`event_bytes`]: an `Incompatible` event) and the queue's
    /// reserved bytes have reached `event_queue_bytes` (checked before admission, as for
    /// Message events: passed by at most one event).
    pub(crate) fn emit_control(&self, ev: Event, counters: &Counters) {
        tracing::debug!(?ev, "event");
        self.run_callbacks(&ev);
        if !self.subscribed() || self.closed.load(Ordering::Acquire) {
            return;
        }
        if let Event::PeerDisconnected { peer } = &ev {
            if self.unpaired().remove(peer) {
                inc(&counters.dropped_event_queue_full);
                return;
            }
        }
        let bytes = event_bytes(&ev);
        if bytes > 0 && !self.reserve_control_bytes(bytes) {
            // Not a PeerConnected (those hold no bytes): nothing to unpair.
            self.dropped_control(None, counters);
            return;
        }
        if !self.reserve(self.capacity) {
            self.release(0, bytes);
            let connected = match ev {
                Event::PeerConnected { peer } => Some(peer),
                _ => None,
            };
            self.dropped_control(connected, counters);
            return;
        }
        self.queue.push(Item::One(ev));
        self.ready.notify(1);
    }

    pub(super) fn unpaired(&self) -> std::sync::MutexGuard<'_, ahash::AHashSet<PeerId>> {
        self.unpaired.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A control event was dropped; `connected` is its peer if it was a `PeerConnected`.
    pub(super) fn dropped_control(&self, connected: Option<PeerId>, counters: &Counters) {
        inc(&counters.dropped_event_queue_full);
        if let Some(peer) = connected {
            self.unpaired().insert(peer);
        }
    }

    /// A Message event, first step, which never waits: puts the event in `outbox` if there
    /// is room below the message share of the queue (or drops it if nobody listens). `Err`
    /// hands the event back when the caller must wait for room with
    /// [`EventHub::queue_waiting`]. Kept apart so the common case costs a shard no future.
    /// The caller runs the callbacks first ([`EventHub::run_callbacks`]; the shard's
    /// delivery sink does).
    ///
    /// The caller hands its outbox over once per batch with [`EventHub::wake_receivers`] (and
    /// must do so before it parks).
    pub(crate) fn try_queue_message(&self, ev: Event, outbox: &Outbox) -> Result<(), Event> {
        match self.message_room(outbox, event_bytes(&ev)) {
            Room::Discard => Ok(()),
            Room::Full => Err(ev),
            Room::Queue => {
                outbox.push(ev);
                Ok(())
            }
        }
    }

    /// Whether one more Message event, holding `bytes` of payload, can go into `outbox` now
    /// ([`Room::Queue`], its room taken), must wait ([`Room::Full`]) or has nobody to go to
    /// ([`Room::Discard`]): the first half of [`EventHub::try_queue_message`], for a caller
    /// that then builds the event where it is queued ([`Outbox::push_message`], the delivery
    /// sink): an event built on the sink's stack and moved into the outbox was read back with
    /// loads wider than its stores, a stall that was most of the sink's own time at 64 B.
    #[inline]
    pub(crate) fn message_room(&self, outbox: &Outbox, bytes: usize) -> Room {
        if !self.subscribed() || self.closed.load(Ordering::Acquire) {
            return Room::Discard;
        }
        let mut credit = outbox.credit.get();
        if credit == 0 {
            credit = self.reserve_up_to(self.message_limit, CREDIT_CHUNK);
            if credit == 0 {
                return Room::Full;
            }
        }
        if !self.reserve_bytes(outbox, bytes) {
            // The event room taken stays this outbox's credit.
            outbox.credit.set(credit);
            return Room::Full;
        }
        outbox.credit.set(credit - 1);
        outbox.held_bytes.set(outbox.held_bytes.get() + bytes);
        Room::Queue
    }

    /// True when callbacks are registered (then every event must be built to run them).
    pub(crate) fn has_callbacks(&self) -> bool {
        !self.callbacks.is_empty()
    }

    /// [`EventHub::try_queue_message`] for a run of samples (callbacks not run): queues as
    /// much of it as the message share of the queue has room for, as one entry, and gives
    /// back the rest (for [`EventHub::queue_waiting`], which queues it as room frees).
    pub(crate) fn try_queue_run(&self, run: SampleRun, outbox: &Outbox) -> Result<(), SampleRun> {
        if !self.subscribed() || self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let need = usize::from(run.samples.count);
        let mut credit = outbox.credit.get();
        while credit < need {
            let got = self.reserve_up_to(self.message_limit, (need - credit).max(CREDIT_CHUNK));
            if got == 0 {
                break;
            }
            credit += got;
        }
        let take = credit.min(need);
        // The whole run's bytes are taken; what a cut leaves over stays credit.
        let bytes = run.samples.body.len();
        if take == 0 || !self.reserve_bytes(outbox, bytes) {
            outbox.credit.set(credit);
            return Err(run);
        }
        outbox.credit.set(credit - take);
        outbox.held.set(outbox.held.get() + take);
        let mut v = outbox.events.borrow_mut();
        if take == need {
            outbox.held_bytes.set(outbox.held_bytes.get() + bytes);
            v.push(Queued::Run(run));
            return Ok(());
        }
        // `take < need <= u16::MAX`.
        let (head, rest) = run.split_at(take as u16);
        let head_bytes = head.samples.body.len();
        outbox.held_bytes.set(outbox.held_bytes.get() + head_bytes);
        outbox
            .byte_credit
            .set(outbox.byte_credit.get() + (bytes - head_bytes));
        v.push(Queued::Run(head));
        Err(rest)
    }

    /// A Message-class delivery (an event, or a run of samples) that found no room in a first
    /// try that never waits (`try_queue`: [`EventHub::try_queue_message`],
    /// [`EventHub::try_queue_run`], or the shard's own built on them): hands the outbox over,
    /// waits for room, and tries again, until `try_queue` took all of it (a run may go in
    /// parts as room frees, each part one entry of the outbox). `on_wait` is called before the
    /// first wait (the caller marks its link as busy, not dead).
    pub(crate) async fn queue_waiting<T>(
        &self,
        item: T,
        counters: &Counters,
        outbox: &Outbox,
        mut on_wait: impl FnMut(bool),
        mut try_queue: impl FnMut(T, &Outbox) -> Result<(), T>,
    ) {
        let mut item = item;
        let mut waited = false;
        loop {
            item = match try_queue(item, outbox) {
                Ok(()) => break,
                Err(rest) => rest,
            };
            // The receivers must get what is reserved, or they may never make room.
            self.wake_receivers(outbox);
            let listener = self.room.listen();
            if self.message_room_left() || !self.subscribed() || self.closed.load(Ordering::Acquire)
            {
                continue;
            }
            if !waited {
                waited = true;
                inc(&counters.event_queue_waits);
                if self.bytes.load(Ordering::Acquire) >= self.bytes_limit {
                    inc(&counters.event_queue_byte_waits);
                }
                on_wait(true);
            }
            listener.await;
        }
        if waited {
            on_wait(false);
        }
    }

    /// Hands `outbox` to the receivers as one queue entry and wakes them.
    pub(crate) fn wake_receivers(&self, outbox: &Outbox) {
        // Room reserved ahead but not used goes back first: another shard may be waiting.
        self.release(outbox.credit.replace(0), outbox.byte_credit.replace(0));
        let batch = {
            let mut v = outbox.events.borrow_mut();
            if v.is_empty() {
                return;
            }
            let next = Vec::with_capacity(outbox.last_len.get().max(v.len()));
            std::mem::replace(&mut *v, next)
        };
        outbox.last_len.set(batch.len());
        let n = outbox.held.replace(0);
        let bytes = outbox.held_bytes.replace(0);
        if !self.subscribed() {
            // The last receiver left (it emptied the queue): nobody will read these.
            self.release(n, bytes);
            return;
        }
        self.queue.push(Item::Batch(batch, n, bytes));
        self.ready.notify(n);
    }

    /// Ends delivery: receivers drain what is queued, then see the end; no one waits anymore.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.ready.notify(usize::MAX);
        self.room.notify(usize::MAX);
    }
}
