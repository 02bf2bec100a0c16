//! Shard tasks, the driver side: application code running on the origin shard's executor
//! (see [`crate::node::shard_task`] for the API and its rules), publishing through the core
//! call the ingress task makes and receiving through a local queue the delivery sink fills.
//!
//! - **Publishing** ([`ShardContext`]): [`ShardCore::publish`] is called in the task's own
//!   poll, then the actions are carried out as the ingress task carries them out ([`carry`]);
//!   what must wait (a Block-policy publish without link room, a full ring to another shard)
//!   is settled by a helper task ([`settle`]) that the publishing call awaits, so a cancelled
//!   call loses nothing and a `try_` call can leave it behind.
//! - **Receiving** ([`Tap`], [`ShardInbox`]): while a shard task holds the inbox, the sink
//!   (`deliver::HubSink`) moves every delivery of this shard into the tap's queue instead of
//!   the event queue (callbacks still run first); the task takes the queue whole, by swapping
//!   vectors. A full tap gives deliveries back as a full event queue does, and the driver
//!   waits for room in order ([`place_waiting`]): the reading links are held back, nothing is
//!   dropped.
//!
//! **Owns:** the origin shard's registration for shard tasks, the shard-task publish path and
//! the tap. **Must not touch:** what is published, routed or delivered (the core's), the
//! event queue (the hub's).
//!
//! [`ShardCore::publish`]: shoal_proto::shard::ShardCore::publish

use super::{carry, deliver, settle, Ctx, Publish, Who};
use crate::node::yield_now::YieldNow;
use crate::node::{PublishError, DATA_FRAME_OVERHEAD};
use crate::wire::DATA_HEADER_LEN;
use crate::PeerId;
use bytes::Bytes;
use event_listener::Event as Signal;
use shoal_proto::shard::{Delivered, ShardAction};
use shoal_proto::stats::inc;
use shoal_proto::OverflowPolicy;
use shoal_runtime::spawn_local;
use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::sync::atomic::Ordering;
use std::task::{Poll, Waker};

/// Publishes a shard task makes in a row without being suspended before it yields once, as
/// the ingress task does after a full batch (`ingress::PUBLISH_BATCH`): a task that always
/// finds link room would otherwise never let the link writers run, and every link queue
/// would fill before the first byte went out.
const PUBLISHES_PER_YIELD: u32 = 256;

/// Executor passes a new shard task waits for the origin shard's driver to register (it is
/// spawned before any shard task, so one pass is enough unless the node is stopping).
const REGISTER_PASSES: u32 = 64;

thread_local! {
    /// The origin shard's driver on this executor thread (a node's runtime has its own
    /// threads, so one thread serves one node): `None` until it registered.
    static ORIGIN: RefCell<Option<Weak<Ctx>>> = const { RefCell::new(None) };
}

/// Makes `ctx` (the origin shard's driver) reachable by the shard tasks of this thread.
pub(super) fn register(ctx: &Rc<Ctx>) {
    ORIGIN.with(|o| *o.borrow_mut() = Some(Rc::downgrade(ctx)));
}

/// A context on the origin shard's driver, for a shard task starting on this thread; `None`
/// when this thread has none (not the origin shard) or it has ended (the node stops).
pub(crate) async fn origin_context() -> Option<ShardContext> {
    for _ in 0..REGISTER_PASSES {
        match ORIGIN.with(|o| o.borrow().clone()) {
            Some(weak) => return weak.upgrade().map(ShardContext::new),
            None => YieldNow(false).await,
        }
    }
    None
}

/// The shard-task inbox's queue, filled by the delivery sink (see the [module docs](self)).
pub(crate) struct Tap {
    /// A shard task holds the inbox: deliveries come here instead of the event queue.
    open: Cell<bool>,
    queue: RefCell<Vec<Delivered>>,
    /// Entries the queue may hold (a run of samples is one entry).
    capacity: Cell<usize>,
    /// The inbox's task, while it waits for deliveries.
    waker: Cell<Option<Waker>>,
    /// The inbox took the queue, or closed.
    room: Signal,
}

impl Default for Tap {
    fn default() -> Tap {
        Tap {
            open: Cell::new(false),
            queue: RefCell::new(Vec::new()),
            capacity: Cell::new(0),
            waker: Cell::new(None),
            room: Signal::new(),
        }
    }
}

impl Tap {
    /// Whether deliveries go to a shard task.
    #[inline(always)]
    pub(super) fn is_open(&self) -> bool {
        self.open.get()
    }

    /// Queues `d` for the shard task if there is room; gives it back otherwise.
    #[inline]
    pub(super) fn try_push(&self, d: Delivered) -> Result<(), Delivered> {
        let mut q = self.queue.borrow_mut();
        if q.len() >= self.capacity.get() {
            return Err(d);
        }
        q.push(d);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
        Ok(())
    }

    fn close(&self) {
        self.open.set(false);
        // Nobody reads them any more (as events queued when the last receiver leaves).
        self.queue.borrow_mut().clear();
        self.waker.take();
        self.room.notify(usize::MAX);
    }
}

/// Places `d` where deliveries go now (the tap or the event queue), waiting for room as long
/// as it takes.
pub(super) async fn place_waiting(ctx: &Rc<Ctx>, d: Delivered) {
    let mut d = d;
    let mut waited = false;
    while ctx.tap.is_open() {
        let room = ctx.tap.room.listen();
        d = match ctx.tap.try_push(d) {
            Ok(()) => return,
            Err(d) => d,
        };
        if !waited {
            waited = true;
            inc(&ctx.counters().event_queue_waits);
        }
        room.await;
    }
    deliver::queue_waiting(&ctx.ns, ctx.counters(), &ctx.outbox, d).await
}

/// What a shard task's `try_` call left waiting, settled by a helper task; later publishes
/// of that task wait for it, so its messages keep their order.
#[derive(Default)]
struct Pending {
    busy: Cell<bool>,
    done: Signal,
}

/// A shard task's handle on its shard: publishes straight into the shard's core and takes
/// the shard's deliveries (see [`crate::node::shard_task`]). Lives on the shard's thread
/// only (not `Send`).
pub struct ShardContext {
    ctx: Rc<Ctx>,
    actions: Vec<ShardAction>,
    waits: Vec<ShardAction>,
    pending: Rc<Pending>,
    /// Publishes since this task last yielded (see [`PUBLISHES_PER_YIELD`]).
    run: u32,
}

impl std::fmt::Debug for ShardContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardContext")
            .field("shard", &self.ctx.idx)
            .finish()
    }
}

impl ShardContext {
    fn new(ctx: Rc<Ctx>) -> ShardContext {
        ShardContext {
            ctx,
            actions: Vec::new(),
            waits: Vec::new(),
            pending: Rc::default(),
            run: 0,
        }
    }

    /// This node's id.
    pub fn id(&self) -> PeerId {
        self.ctx.ns.me
    }

    /// The shard this task runs on (the one that originates this node's messages).
    pub fn shard(&self) -> usize {
        self.ctx.idx
    }

    /// Broadcasts `payload` to every node. Waits (Block policy) for room on the links,
    /// letting the shard's link writers run meanwhile; the same checks and errors as
    /// [`Mesh::broadcast`](crate::Mesh::broadcast). Cancelling the call after it has
    /// started waiting does not take the message back: it still goes out (or is counted).
    pub async fn broadcast(&mut self, payload: impl Into<Bytes>) -> Result<(), PublishError> {
        self.publish(PeerId::ZERO, payload.into()).await
    }

    /// Sends `payload` to `peer` only (relayed if it is not a neighbour); as
    /// [`broadcast`](Self::broadcast).
    pub async fn send(
        &mut self,
        peer: PeerId,
        payload: impl Into<Bytes>,
    ) -> Result<(), PublishError> {
        self.publish(peer, payload.into()).await
    }

    /// Broadcasts without waiting: [`PublishError::Full`] when a link has no room now (Block
    /// policy) or an earlier `try_` call of this task still waits to go out.
    pub fn try_broadcast(&mut self, payload: impl Into<Bytes>) -> Result<(), PublishError> {
        self.try_publish(PeerId::ZERO, payload.into())
    }

    /// Sends to `peer` without waiting; as [`try_broadcast`](Self::try_broadcast).
    pub fn try_send(
        &mut self,
        peer: PeerId,
        payload: impl Into<Bytes>,
    ) -> Result<(), PublishError> {
        self.try_publish(peer, payload.into())
    }

    /// Lets the shard's other tasks (link readers and writers) run once.
    pub async fn yield_now(&mut self) {
        self.run = 0;
        self.ctx.wake_receivers();
        YieldNow(false).await;
    }

    /// The inbox of this shard's deliveries, holding up to `capacity` entries (a message, a
    /// run of samples or a loss report each; at least 1). From now until it is dropped,
    /// every message and sample this shard delivers goes to it instead of the event queue
    /// (callbacks still run first); deliveries on other shards still go to the event queue.
    /// `None` if another shard task holds it.
    pub fn inbox(&self, capacity: usize) -> Option<ShardInbox> {
        let tap = &self.ctx.tap;
        if tap.is_open() {
            return None;
        }
        tap.capacity.set(capacity.max(1));
        tap.open.set(true);
        Some(ShardInbox {
            tap: self.ctx.tap.clone(),
        })
    }

    /// What `Mesh::admit` checks, for the shard.
    fn admit(&self, dst: PeerId, len: usize) -> Result<(), PublishError> {
        let ns = &self.ctx.ns;
        if ns.stopping.load(Ordering::Acquire) {
            return Err(PublishError::Stopped);
        }
        let max = (ns.cfg.max_message_bytes as usize).saturating_sub(DATA_FRAME_OVERHEAD);
        if len > max {
            return Err(PublishError::TooLarge { len, max });
        }
        if dst != ns.me && ns.connected.load(Ordering::Acquire) == 0 {
            return Err(PublishError::NoRoute);
        }
        Ok(())
    }

    /// Originates one message in the core and carries out what needs no wait; true if
    /// something was left to wait for (in `waits`).
    fn originate(&mut self, dst: PeerId, payload: Bytes) -> bool {
        let ctx = &self.ctx;
        let now = ctx.tick();
        ctx.core
            .borrow_mut()
            .publish(Publish::One { dst, payload }, now, &mut self.actions);
        carry(ctx, &mut self.actions, &mut self.waits, Who::Other);
        // A message for this node itself was delivered into the outbox.
        ctx.wake_receivers();
        !self.waits.is_empty()
    }

    /// Hands what [`originate`](Self::originate) left to a helper task that settles it.
    fn settle_behind(&mut self) {
        let waits = std::mem::take(&mut self.waits);
        let (ctx, pending) = (self.ctx.clone(), self.pending.clone());
        pending.busy.set(true);
        spawn_local(async move {
            let mut waits = waits;
            settle(&ctx, &mut waits, Who::Other).await;
            pending.busy.set(false);
            pending.done.notify(usize::MAX);
        })
        .detach();
    }

    /// Waits until nothing of this task's is being settled.
    async fn settled(&self) {
        while self.pending.busy.get() {
            let done = self.pending.done.listen();
            if !self.pending.busy.get() {
                break;
            }
            done.await;
        }
    }

    async fn publish(&mut self, dst: PeerId, payload: Bytes) -> Result<(), PublishError> {
        self.admit(dst, payload.len())?;
        self.settled().await;
        if self.originate(dst, payload) {
            self.settle_behind();
            self.settled().await;
            self.run = 0;
        } else {
            self.run += 1;
            if self.run >= PUBLISHES_PER_YIELD {
                self.run = 0;
                YieldNow(false).await;
            }
        }
        Ok(())
    }

    fn try_publish(&mut self, dst: PeerId, payload: Bytes) -> Result<(), PublishError> {
        self.admit(dst, payload.len())?;
        let ns = &self.ctx.ns;
        if self.pending.busy.get()
            || (ns.policy == OverflowPolicy::Block
                && ns
                    .snapshot
                    .any_link_full_for(DATA_HEADER_LEN + payload.len()))
        {
            return Err(PublishError::Full);
        }
        if self.originate(dst, payload) {
            self.settle_behind();
        }
        Ok(())
    }
}

/// A shard task's inbox: every delivery of its shard (see [`ShardContext::inbox`]), taken in
/// batches. Dropping it sends deliveries back to the event queue and drops what it still
/// held, as events queued when the last event receiver goes.
pub struct ShardInbox {
    tap: Rc<Tap>,
}

impl std::fmt::Debug for ShardInbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardInbox")
            .field("queued", &self.tap.queue.borrow().len())
            .finish()
    }
}

impl ShardInbox {
    /// Waits for deliveries and puts all that are queued into `batch` (emptied first), in
    /// the order the shard delivered them. No delivery is copied: the vectors are swapped,
    /// so passing the same `batch` again reuses its memory.
    pub async fn recv_batch(&mut self, batch: &mut Vec<Delivered>) -> usize {
        std::future::poll_fn(|cx| match self.try_recv_batch(batch) {
            0 => {
                self.tap.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
            n => Poll::Ready(n),
        })
        .await
    }

    /// [`recv_batch`](Self::recv_batch) without waiting: 0 when nothing is queued.
    pub fn try_recv_batch(&mut self, batch: &mut Vec<Delivered>) -> usize {
        batch.clear();
        let mut q = self.tap.queue.borrow_mut();
        if q.is_empty() {
            return 0;
        }
        std::mem::swap(&mut *q, batch);
        drop(q);
        self.tap.room.notify(usize::MAX);
        batch.len()
    }
}

impl Drop for ShardInbox {
    fn drop(&mut self) {
        self.tap.close();
    }
}
