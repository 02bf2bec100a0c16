//! Deliveries of the other shards handed to the origin shard while a shard task holds its
//! inbox, so the inbox sees every delivery of the node.
//!
//! A message or a run of samples is delivered by the shard that routes it (a message on the
//! shard of the link it came in on, a run on its writer's shard), often not the origin
//! shard. While the inbox is open ([`Forwarding::open`]), the sink of every other shard runs
//! the callbacks as always, then gives the delivery back (`deliver::HubSink`), as it does
//! when the event queue is full; the driver carries out the [`ShardAction::Deliver`] the core
//! returns for it by posting it to the origin shard over the shards' ring
//! ([`ShardToShard::Deliver`]): [`try_forward`] when there is room, [`forward_waiting`]
//! (from `settle`, in order after whatever waited before it) when the ring is full. Nothing is
//! dropped: a full ring holds the delivering task back, as a full event queue does, and the
//! wait is counted in `event_queue_waits`. The origin shard places what arrives as it places
//! its own deliveries (the tap, or the event queue once the inbox is gone): one ring per
//! sending shard keeps each shard's order, so each link's and each writer's.
//!
//! Closing: forwards still on the ring when the inbox goes reach the event queue from the
//! origin shard. Until they are placed (the count in [`Forwarding`]), the other shards keep
//! forwarding, so what they deliver after the inbox went does not overtake them.
//!
//! A shard's inbox never waits for another shard's ring (both could wait for each other);
//! here only the other shards wait, for the origin's ring, and the origin shard never
//! forwards, so no two shards wait for each other.
//!
//! **Owns:** the hand-over of deliveries to the origin shard. **Must not touch:** what is
//! delivered (the core's), the tap and the event queue (`task`, `deliver`).
//!
//! [`ShardAction::Deliver`]: shoal_proto::shard::ShardAction::Deliver

use super::{deliver, Ctx};
use crate::proto::link_shard;
use shoal_proto::cmd::ShardToShard;
use shoal_proto::shard::Delivered;
use shoal_proto::stats::inc;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::super::shared::Offer;

/// The top bit: the inbox is open.
const OPEN: usize = 1 << (usize::BITS - 1);

/// Whether the other shards hand their deliveries to the origin shard: the inbox is open, or
/// forwards are still on their way (see the [module docs](self)). One word, read by every
/// delivering shard per delivery (a load of a line that only changes when the inbox opens or
/// closes, or per forward while forwarding); on its own cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Forwarding(AtomicUsize);

impl Forwarding {
    /// True while the other shards must forward.
    #[inline(always)]
    pub(crate) fn active(&self) -> bool {
        self.0.load(Ordering::Acquire) != 0
    }

    /// The inbox opened (`true`) or closed.
    pub(crate) fn open(&self, open: bool) {
        if open {
            self.0.fetch_or(OPEN, Ordering::AcqRel);
        } else {
            self.0.fetch_and(!OPEN, Ordering::AcqRel);
        }
    }

    fn sent(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    fn unsent(&self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }

    /// The origin shard placed `n` forwards.
    pub(super) fn placed(&self, n: usize) {
        if n > 0 {
            self.0.fetch_sub(n, Ordering::AcqRel);
        }
    }
}

/// The origin shard of this node (where the inbox is).
fn origin(ctx: &Ctx) -> usize {
    link_shard(&ctx.ns.me, ctx.ns.shards)
}

/// Whether `ctx`'s deliveries go to the origin shard now (never the origin's own).
#[inline(always)]
pub(super) fn forwards(ctx: &Ctx) -> bool {
    ctx.ns.forwarding.active() && ctx.idx != origin(ctx)
}

/// Posts `d` to the origin shard if its ring has room; gives it back otherwise. The origin
/// gone (the node stops): into this shard's event queue.
pub(super) fn try_forward(ctx: &Rc<Ctx>, d: Delivered) -> Result<(), Delivered> {
    let f = &ctx.ns.forwarding;
    f.sent();
    match ctx.to_shards.offer(origin(ctx), ShardToShard::Deliver(d)) {
        Offer::Sent => Ok(()),
        Offer::Busy(ShardToShard::Deliver(d)) => {
            f.unsent();
            Err(d)
        }
        Offer::Gone(ShardToShard::Deliver(d)) => {
            f.unsent();
            deliver::try_queue(&ctx.ns.hub, &ctx.outbox, d)
        }
        // `offer` gives back what it was given.
        Offer::Busy(_) | Offer::Gone(_) => {
            f.unsent();
            Ok(())
        }
    }
}

/// Posts `d` to the origin shard, waiting for ring room (counted as an event-queue wait).
pub(super) async fn forward_waiting(ctx: &Rc<Ctx>, d: Delivered) {
    let d = match try_forward(ctx, d) {
        Ok(()) => return,
        Err(d) => d,
    };
    inc(&ctx.counters().event_queue_waits);
    ctx.wake_receivers();
    let f = &ctx.ns.forwarding;
    f.sent();
    let msg = ShardToShard::Deliver(d);
    if let Err(msg) = ctx.to_shards.send_or_return(origin(ctx), msg).await {
        f.unsent();
        if let ShardToShard::Deliver(d) = msg {
            deliver::queue_waiting(&ctx.ns, ctx.counters(), &ctx.outbox, d).await;
        }
    }
}
