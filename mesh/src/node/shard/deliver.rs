//! The one way what the shard core delivers reaches the application: the event callbacks,
//! then the event queue.
//!
//! Every delivery ([`Delivered`]: a message, a run of samples for a local reader, a loss
//! report) is offered to the core's sink, [`HubSink`], the moment the core decides it. The
//! callbacks run there, once per delivery (each sample of a run is one event), before it is
//! queued; the delivery then goes into the shard's outbox if the event queue has room. Without
//! room the sink gives it back, and, so that order holds, every later one until the core's
//! next call (their callbacks still run as they are offered); the core returns what came back
//! as [`ShardAction::Deliver`](shoal_proto::shard::ShardAction::Deliver), which the driver
//! carries out with [`try_queue`] (no wait, from `try_carry`) or [`queue_waiting`] (waits for
//! room, from `settle`). The queue has one shape whichever way a delivery goes in: a message
//! or a loss report is one event, a run of samples one entry whatever its length (the receiver
//! cuts it into Sample events), split only where the room ran out.
//!
//! While a shard task holds the node's inbox (`task::Tap`, on the origin shard), the same
//! path ends in the tap instead of the event queue: callbacks first, then the tap's queue
//! while it has room, what found none given back and waited for in order
//! (`task::place_waiting`). On the other shards the sink then gives every delivery back after
//! its callbacks, and the driver hands it to the origin shard (`super::forward`).
//!
//! **Owns:** the callbacks' and the queue's view of a delivery. **Must not touch:** what is
//! delivered or when (the core's), the queue's room (the hub's).

use super::super::event::{Event, EventHub, Outbox, Room};
use super::super::shared::NodeShared;
use super::super::stats::Counters;
use shoal_proto::shard::{Delivered, DeliverySink, SamplesLost};
use std::rc::Rc;
use std::sync::Arc;

/// The core's [`DeliverySink`]: the callbacks, then the shard's outbox while the event queue
/// has room; what it gives back is queued by the driver (see the [module docs](self)).
pub(super) struct HubSink {
    pub(super) ns: Arc<NodeShared>,
    pub(super) outbox: Rc<Outbox>,
    /// A shard task's inbox: while it is open, deliveries go there instead of the outbox.
    pub(super) tap: Rc<super::task::Tap>,
    /// Not the origin shard: while the inbox is open, deliveries are given back, and the
    /// driver hands them to the origin shard (`super::forward`).
    pub(super) forwards: bool,
    /// Something was given back in this core call: so is everything after it.
    pub(super) refused: bool,
}

impl DeliverySink for HubSink {
    fn begin_call(&mut self) {
        self.refused = false;
    }

    #[inline]
    fn try_deliver(&mut self, d: Delivered) -> Result<(), Delivered> {
        let hub = &self.ns.hub;
        if hub.has_callbacks() {
            // Callbacks see every delivery, also those given back (see the module docs).
            run_callbacks(hub, &d);
        }
        if self.refused {
            return Err(d);
        }
        if self.tap.is_open() {
            return self.tap.try_push(d).inspect_err(|_| self.refused = true);
        }
        if self.forwards && self.ns.forwarding.active() {
            self.refused = true;
            return Err(d);
        }
        try_queue(hub, &self.outbox, d).inspect_err(|_| self.refused = true)
    }
}

/// Runs the callbacks on the events `d` stands for.
fn run_callbacks(hub: &EventHub, d: &Delivered) {
    match d {
        Delivered::Message(m) => hub.run_callbacks(&Event::Message {
            from: m.from,
            broadcast: m.broadcast,
            payload: m.payload.clone(),
        }),
        Delivered::Samples(run) => {
            for (seq, payload) in run.samples.seqs().zip(run.samples.payloads()) {
                hub.run_callbacks(&Event::Sample {
                    reader: run.reader,
                    writer: run.samples.writer,
                    seq,
                    payload,
                });
            }
        }
        Delivered::Lost(l) => hub.run_callbacks(&lost_event(*l)),
    }
}

/// Puts `d` in `outbox` as far as the event queue has room now (its callbacks ran in the
/// sink); gives back what did not go in: all of it, or a run's tail. Always inlined into the
/// sink: a call would move `d` and the result through memory on every delivered message
/// (without it, the first A/B read broadcast delivery ~8% lower; `bench/notes/house.md`).
#[inline(always)]
pub(super) fn try_queue(hub: &EventHub, outbox: &Outbox, d: Delivered) -> Result<(), Delivered> {
    match d {
        // The event is built where it is queued (see `EventHub::message_room`).
        Delivered::Message(m) => match hub.message_room(outbox, m.payload.len()) {
            Room::Discard => Ok(()),
            Room::Full => Err(Delivered::Message(m)),
            Room::Queue => {
                outbox.push_message(m.from, m.broadcast, m.payload);
                Ok(())
            }
        },
        Delivered::Samples(run) => hub.try_queue_run(run, outbox).map_err(Delivered::Samples),
        Delivered::Lost(l) => hub
            .try_queue_message(lost_event(l), outbox)
            .map_err(|_| Delivered::Lost(l)),
    }
}

/// [`try_queue`], waiting for room as long as it takes (a delivery is never dropped for want
/// of room).
pub(super) async fn queue_waiting(
    ns: &NodeShared,
    counters: &Counters,
    outbox: &Outbox,
    d: Delivered,
) {
    let hub = &ns.hub;
    hub.queue_waiting(d, counters, outbox, |_| {}, |d, o| try_queue(hub, o, d))
        .await
}

/// The application's event for a loss report.
fn lost_event(l: SamplesLost) -> Event {
    Event::SamplesLost {
        reader: l.reader,
        writer: l.writer,
        first: l.first,
        last: l.last,
    }
}
