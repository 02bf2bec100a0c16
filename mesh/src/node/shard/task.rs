//! Shard tasks, the driver side: application code running on the origin shard's executor
//! (see [`crate::node::shard_task`] for the API and its rules), publishing through the core
//! call the ingress task makes and receiving through a local queue the delivery sink fills.
//!
//! - **Publishing** ([`ShardContext`], [`ShardWriter`], each an [`Origin`] stream):
//!   [`ShardCore::publish`] is called in the task's own poll, then the actions are carried
//!   out as the ingress task carries them out ([`carry`]); what must wait (a Block-policy
//!   publish without link room, a full ring to another shard) is settled by a helper task
//!   ([`settle`]) that the publishing call awaits, so a cancelled call loses nothing and a
//!   `try_` call can leave it behind. Endpoints are opened through the control plane, their
//!   answer awaited.
//! - **Receiving** ([`Tap`], [`ShardInbox`]): while a shard task holds the inbox, the sink
//!   (`deliver::HubSink`) moves every delivery of this shard into the tap's queue instead of
//!   the event queue (callbacks still run first), and the other shards hand theirs over
//!   (`super::forward`); the task takes the queue whole, by swapping vectors. A full tap
//!   gives deliveries back as a full event queue does, and the driver waits for room in
//!   order ([`place_waiting`]): the reading links are held back, nothing is dropped.
//!
//! **Owns:** the origin shard's registration for shard tasks, the shard-task publish path
//! (`task/writer.rs`: the topic writer) and the tap. **Must not touch:** what is published, routed or delivered (the core's), the
//! event queue (the hub's).
//!
//! [`ShardCore::publish`]: shoal_proto::shard::ShardCore::publish

mod writer;

pub use writer::ShardWriter;

use super::{carry, deliver, forward, settle, Ctx, Publish, Who};
use crate::node::shared::NodeShared;
use crate::node::topics::Reader;
use crate::node::yield_now::YieldNow;
use crate::node::{Inner, Mesh, MeshError, PublishError, DATA_FRAME_OVERHEAD};
use crate::topics::Topic;
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
use std::sync::Arc;
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
pub(crate) async fn origin_context(node: std::sync::Weak<Inner>) -> Option<ShardContext> {
    for _ in 0..REGISTER_PASSES {
        match ORIGIN.with(|o| o.borrow().clone()) {
            Some(weak) => return weak.upgrade().map(|ctx| ShardContext::new(ctx, node)),
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

/// Places `d` where deliveries go now (the tap, the origin shard, or the event queue),
/// waiting for room as long as it takes.
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
    if forward::forwards(ctx) {
        return forward::forward_waiting(ctx, d).await;
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

/// One publishing stream's handle on the origin shard's core (a [`ShardContext`]'s messages,
/// or one [`ShardWriter`]'s samples): what it publishes goes into the core in the caller's
/// own poll; what must wait is settled by a helper task the stream's later publishes wait
/// for, so the stream keeps its order and a cancelled call loses nothing it handed over.
pub(crate) struct Origin {
    ctx: Rc<Ctx>,
    actions: Vec<ShardAction>,
    waits: Vec<ShardAction>,
    pending: Rc<Pending>,
    /// Publishes since this stream last yielded (see [`PUBLISHES_PER_YIELD`]).
    run: u32,
}

impl Origin {
    fn new(ctx: Rc<Ctx>) -> Origin {
        Origin {
            ctx,
            actions: Vec::new(),
            waits: Vec::new(),
            pending: Rc::default(),
            run: 0,
        }
    }

    /// Another stream on the same shard (its own order, its own pending wait).
    fn stream(&self) -> Origin {
        Origin::new(self.ctx.clone())
    }

    pub(crate) fn ns(&self) -> &NodeShared {
        &self.ctx.ns
    }

    /// `Stopped` once the node stops.
    pub(crate) fn running(&self) -> Result<(), PublishError> {
        if self.ctx.ns.stopping.load(Ordering::Acquire) {
            return Err(PublishError::Stopped);
        }
        Ok(())
    }

    /// Whether a publish of `bytes` may go in now without waiting: nothing of this stream is
    /// being settled and, under the Block policy, every link has room for it.
    pub(crate) fn has_room(&self, bytes: usize) -> bool {
        let ns = &self.ctx.ns;
        let link_full = ns.policy == OverflowPolicy::Block && ns.snapshot.any_link_full_for(bytes);
        !(self.pending.busy.get() || link_full)
    }

    /// Originates `p` in the core and carries out what needs no wait; true if something was
    /// left to wait for (in `waits`).
    fn originate(&mut self, p: Publish) -> bool {
        let ctx = &self.ctx;
        let now = ctx.tick();
        ctx.core.borrow_mut().publish(p, now, &mut self.actions);
        carry(ctx, &mut self.actions, &mut self.waits, Who::Other);
        // A message for this node itself (or a sample for a local reader) was delivered.
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

    /// Waits until nothing of this stream's is being settled.
    pub(crate) async fn settled(&self) {
        while self.pending.busy.get() {
            let done = self.pending.done.listen();
            if !self.pending.busy.get() {
                break;
            }
            done.await;
        }
    }

    /// Publishes `p` after what this stream left waiting, and waits until it is carried out
    /// (link room under the Block policy, ring room toward another shard), letting the
    /// shard's other tasks run meanwhile. If the call is dropped before `p` went into the
    /// core, `p` is dropped with it (see [`settled`](Self::settled) for a caller that counts
    /// that); once in, it goes out whatever happens to the call.
    pub(crate) async fn submit(&mut self, p: Publish) {
        self.settled().await;
        if self.originate(p) {
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
    }

    /// Publishes `p` now, leaving what must wait to a helper task (later publishes of this
    /// stream wait for it). The caller checked [`has_room`](Self::has_room) if it must not
    /// overtake: with something pending, `p` would go ahead of it.
    pub(crate) fn submit_now(&mut self, p: Publish) {
        if self.originate(p) {
            self.settle_behind();
        }
    }

    /// Publishes `p` behind what this stream left waiting, from a helper task of its own:
    /// for a handle that goes away and must not wait (a dropped writer).
    pub(crate) fn submit_behind(&mut self, p: Publish) {
        if !self.pending.busy.get() {
            return self.submit_now(p);
        }
        let mut o = Origin {
            ctx: self.ctx.clone(),
            actions: Vec::new(),
            waits: Vec::new(),
            pending: self.pending.clone(),
            run: 0,
        };
        spawn_local(async move { o.submit(p).await }).detach();
    }

    /// Lets the shard's other tasks (link readers and writers) run once.
    pub(crate) async fn yield_now(&mut self) {
        self.run = 0;
        self.ctx.wake_receivers();
        YieldNow(false).await;
    }
}

/// A shard task's handle on its shard: publishes straight into the shard's core and takes
/// the shard's deliveries (see [`crate::node::shard_task`]). Lives on the shard's thread
/// only (not `Send`).
pub struct ShardContext {
    origin: Origin,
    /// The node, for what goes through its control plane (endpoints); weak, so a task
    /// holding its context does not keep a dropped node running.
    node: std::sync::Weak<Inner>,
}

impl std::fmt::Debug for ShardContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardContext")
            .field("shard", &self.origin.ctx.idx)
            .finish()
    }
}

impl ShardContext {
    fn new(ctx: Rc<Ctx>, node: std::sync::Weak<Inner>) -> ShardContext {
        ShardContext {
            origin: Origin::new(ctx),
            node,
        }
    }

    /// This node's id.
    pub fn id(&self) -> PeerId {
        self.origin.ctx.ns.me
    }

    /// The shard this task runs on (the one that originates this node's messages).
    pub fn shard(&self) -> usize {
        self.origin.ctx.idx
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
        self.origin.yield_now().await
    }

    /// The inbox of the node's deliveries, holding up to `capacity` entries (a message, a
    /// run of samples or a loss report each; at least 1). From now until it is dropped,
    /// every message and sample the node delivers goes to it instead of the event queue
    /// (callbacks still run first, on the shard that delivers): this shard's own deliveries
    /// and, with several shards, those of the others, which hand them over to this one
    /// (bounded by the ring between them; a delivering shard waits for room, as for the event
    /// queue, counted in `event_queue_waits`). Each link's and each writer's deliveries keep
    /// their order. `None` if another shard task holds it.
    pub fn inbox(&self, capacity: usize) -> Option<ShardInbox> {
        let ctx = &self.origin.ctx;
        let tap = &ctx.tap;
        if tap.is_open() {
            return None;
        }
        tap.capacity.set(capacity.max(1));
        tap.open.set(true);
        // The other shards hand their deliveries over from now on (see `forward`).
        ctx.ns.forwarding.open(true);
        Some(ShardInbox {
            tap: tap.clone(),
            ns: ctx.ns.clone(),
        })
    }

    /// A live handle on the node, for its control plane.
    fn mesh(&self) -> Result<Mesh, MeshError> {
        let inner = self.node.upgrade().ok_or(MeshError::NotRunning)?;
        Ok(Mesh { inner })
    }

    /// Opens a writer on `topic` whose samples this task writes straight into the shard's
    /// core (see [`ShardWriter`]). Declared, validated and admitted as by
    /// [`Mesh::writer`](crate::Mesh::writer), with the same errors. The admission is a
    /// command to the control plane, which answers a writer once its route table reached
    /// every shard (so its first samples find it), this one included: the call awaits the
    /// answer while the shard runs on (milliseconds; open writers when the task starts).
    pub async fn writer(&self, topic: Topic) -> Result<ShardWriter, MeshError> {
        let mesh = self.mesh()?;
        let sleep = shoal_runtime::time::sleep_until;
        let (ep, credit, max_blocking) = mesh.writer_endpoint_async(topic, sleep).await?;
        Ok(ShardWriter::new(
            ep,
            credit,
            max_blocking,
            self.origin.stream(),
        ))
    }

    /// Opens a reader on `topic`, as [`Mesh::reader`](crate::Mesh::reader) does (the same
    /// checks and errors; the answer awaited as for [`writer`](Self::writer)). While this task holds the
    /// [`inbox`](Self::inbox), the reader's samples arrive there as
    /// [`Delivered::Samples`] runs (one entry per run of a writer's consecutive samples, the
    /// payloads slices of the buffer they were read into, never copied per sample) and its
    /// loss reports as [`Delivered::Lost`]; [`Reader::owns`] tells which entries are its.
    /// Without the inbox they are [`Event::Sample`](crate::Event::Sample) events, as for
    /// any reader.
    pub async fn reader(&self, topic: Topic) -> Result<Reader, MeshError> {
        let mesh = self.mesh()?;
        mesh.reader_async(topic, shoal_runtime::time::sleep_until)
            .await
    }

    /// What `Mesh::admit` checks, for the shard.
    fn admit(&self, dst: PeerId, len: usize) -> Result<(), PublishError> {
        self.origin.running()?;
        let ns = &self.origin.ctx.ns;
        let max = (ns.cfg.max_message_bytes as usize).saturating_sub(DATA_FRAME_OVERHEAD);
        if len > max {
            return Err(PublishError::TooLarge { len, max });
        }
        if dst != ns.me && ns.connected.load(Ordering::Acquire) == 0 {
            return Err(PublishError::NoRoute);
        }
        Ok(())
    }

    async fn publish(&mut self, dst: PeerId, payload: Bytes) -> Result<(), PublishError> {
        self.admit(dst, payload.len())?;
        self.origin.submit(Publish::One { dst, payload }).await;
        Ok(())
    }

    fn try_publish(&mut self, dst: PeerId, payload: Bytes) -> Result<(), PublishError> {
        self.admit(dst, payload.len())?;
        if !self.origin.has_room(DATA_HEADER_LEN + payload.len()) {
            return Err(PublishError::Full);
        }
        self.origin.submit_now(Publish::One { dst, payload });
        Ok(())
    }
}

/// A shard task's inbox: every delivery of its shard (see [`ShardContext::inbox`]), taken in
/// batches. Dropping it sends deliveries back to the event queue and drops what it still
/// held, as events queued when the last event receiver goes.
pub struct ShardInbox {
    tap: Rc<Tap>,
    ns: Arc<NodeShared>,
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
        self.ns.forwarding.open(false);
        self.tap.close();
    }
}
