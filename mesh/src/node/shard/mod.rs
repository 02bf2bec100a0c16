//! A data shard's driver: the tasks, sockets and channels around one
//! [`ShardCore`], which takes every decision.
//!
//! A shard runs these tasks on its executor:
//! - the **inbox** ([`run`]): commands of the control plane and messages of the other shards,
//!   fed to the core in batches, each batch's commands first (see [`super::msg`] for why);
//! - the **ingress** (`ingress`, on the shard owning this node's id only): what the
//!   application publishes;
//! - the **timer**: the core's dedup sweep and stop grace;
//! - **shard tasks** (`task`, on the origin shard only): application code of
//!   [`Mesh::spawn_on_shard`](crate::Mesh::spawn_on_shard), publishing through the same core
//!   call as the ingress and receiving through the tap, which the other shards' deliveries
//!   reach over the shards' ring while it is open (`forward`);
//! - per link (`link`): a **reader** (reads into the buffer the core hands out, then lets the
//!   core parse and route what arrived), a **writer** (writes the iovecs the core gathers or
//!   seals) and a **timer** (heartbeat, liveness, slow-peer kill).
//!
//! What the core delivers (messages, sample runs, loss reports) reaches the application one
//! way only, through [`deliver`]: the core offers each delivery to the sink there as it
//! decides it (callbacks, then the event queue), and what found no room comes back as an
//! action. After every call the driver carries out the core's [`ShardAction`]s in order
//! ([`carry`]): posting to another executor's ring, queueing deliveries the sink gave back,
//! reporting errors, stopping a link's tasks. What cannot be done at once (a full ring, a full
//! event queue, link room for a Block-policy publish) is awaited in order by [`settle`]
//! before the task goes on, so the common case builds no future per message. The clock is
//! read once per batch (a read, an inbox or ingress batch) and the application's receivers
//! are woken once per batch (and before any wait).
//!
//! **Owns:** the shard's tasks, sockets and channel ends. **Must not touch:** any protocol
//! decision (what to send, route, count, drop or close is the core's).

mod deliver;
pub(crate) mod forward;
mod ingress;
mod link;
pub(crate) mod task;

use super::event::{ErrorKind, Event, Outbox};
use super::msg::{ShardCmd, ShardEndpoint};
use super::recycle::Recycler;
use super::shared::{Lane, NodeShared, Offer, ShardLanes};
use super::stats::Counters;
use super::yield_now::YieldNow;
use ahash::AHashMap;
use deliver::HubSink;
use event_listener::Event as Signal;
use shoal_proto::cmd::{ShardToShard, ToControl};
use shoal_proto::shard::{
    IfBusy, LinkError, LinkFault, ShardAction, ShardConfig, ShardCore, Unblock,
};
use shoal_proto::LinkId;
use shoal_runtime::channel::IngressReceiver;
use shoal_runtime::net::MAX_IOVECS;
use shoal_runtime::{spawn_local, LocalJoinHandle};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

pub(crate) use shoal_proto::shard::Publish;

/// Read buffer blocks a shard keeps for reuse (see [`super::recycle`]); in steady state the
/// spares are about as many as the blocks whose payloads wait in the event queue (bounded by
/// `event_queue_capacity`), this caps them besides.
const SPARE_READ_BLOCKS: usize = 256;
/// After a quiet spell, a link's read buffer leaves a block more than this many times larger
/// than its next read (kept from busier times: a large frame, a burst's reads) for one of the
/// read's size (see [`super::recycle`]).
const REST_BLOCK_FACTOR: usize = 16;

/// What a shard task starts with.
pub(crate) struct ShardStart {
    pub(crate) idx: usize,
    pub(crate) ns: Arc<NodeShared>,
    pub(crate) endpoint: ShardEndpoint,
    /// Only on the shard that owns this node's own id (it originates every message).
    pub(crate) publish: Option<IngressReceiver<Publish>>,
    pub(crate) seed: u64,
}

/// A link's reader and writer tasks (its timer ends by itself).
#[derive(Default)]
struct LinkTasks {
    reader: Option<LocalJoinHandle<()>>,
    writer: Option<LocalJoinHandle<()>>,
    /// Raised while the reader carries out what a read produced (messages it may hold while
    /// it waits for event-queue room): cancelling it then would lose them uncounted.
    reader_busy: Rc<Cell<bool>>,
    /// Wakes the reader the core told to hold (a dial race's winner waiting for its loser's
    /// end) when the core says it reads on ([`ShardAction::ReadOn`]).
    read_on: Rc<Signal>,
    /// The link timer's look at the connection's kernel state: taken away when the link
    /// ends, so the connection closes with its halves.
    probe: Rc<RefCell<Option<shoal_runtime::net::TcpProbe>>>,
}

/// The shard's driver state, shared by its tasks.
struct Ctx {
    idx: usize,
    ns: Arc<NodeShared>,
    /// Lanes to the other shards.
    to_shards: ShardLanes<ShardToShard>,
    /// The lane to the control plane.
    to_control: Lane<ToControl>,
    core: RefCell<ShardCore>,
    tasks: RefCell<AHashMap<LinkId, LinkTasks>>,
    /// The shard's clock, read once per batch rather than once per frame: a clock read costs
    /// ~75 ns on this class of VM, more than the rest of routing a frame, and liveness and
    /// dedup ages need milliseconds, not nanoseconds. Only ever set to a fresh
    /// `Instant::now()`, so it never goes backwards.
    clock: Cell<Instant>,
    /// Deliveries of the current batch, handed to the application as one queue entry with
    /// one wake-up (see [`Ctx::wake_receivers`]); filled through [`deliver`].
    outbox: Rc<Outbox>,
    /// Read buffer blocks of this shard's links, reused once the application has dropped
    /// every payload sliced from them (see [`super::recycle`]).
    read_blocks: RefCell<Recycler>,
    /// The core's next deadline may have moved earlier (a command arrived, or an input set
    /// a reliable topic's timer).
    rearm: Signal,
    /// The deadline the timer task sleeps until.
    armed: Cell<Instant>,
    /// Where deliveries go while a shard task holds the inbox (see [`task`]).
    tap: Rc<task::Tap>,
}

impl Ctx {
    fn counters(&self) -> &Counters {
        &self.ns.counters[self.idx]
    }

    /// The batch's time (see [`Ctx::clock`]).
    fn now(&self) -> Instant {
        self.clock.get()
    }

    /// Reads the clock for a new batch.
    fn tick(&self) -> Instant {
        let now = Instant::now();
        self.clock.set(now);
        now
    }

    /// Wakes the application's receivers for the events queued since the last call. Called
    /// at the end of every batch and before any wait, so an event never sits unannounced
    /// while this shard is parked.
    fn wake_receivers(&self) {
        self.ns.hub.wake_receivers(&self.outbox);
    }
}

/// Which task carries out actions: a link's own task is not stopped by its link's end
/// (it returns by itself).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Who {
    Reader(LinkId),
    Writer(LinkId),
    Other,
}

/// The shard's main task: the inbox.
pub(crate) async fn run(init: ShardStart) {
    let ShardStart {
        idx,
        ns,
        endpoint,
        publish,
        seed,
    } = init;
    let (senders, up, mut rx) = endpoint.split();
    let now = Instant::now();
    let mut cfg = ShardConfig::new(ns.me, &ns.cfg);
    cfg.policy = ns.policy;
    cfg.slow_link = ns.slow_link;
    cfg.secure = ns.secure.is_some();
    cfg.max_iovecs = MAX_IOVECS;
    cfg.record_bytes = ns.record_bytes;
    let outbox = Rc::new(Outbox::default());
    let tap = Rc::new(task::Tap::default());
    let sink = HubSink {
        ns: ns.clone(),
        outbox: outbox.clone(),
        tap: tap.clone(),
        forwards: publish.is_none(),
        refused: false,
    };
    let counters = ns.counters[idx].clone();
    let core = ShardCore::new(idx, ns.shards, cfg, counters, seed, now, Box::new(sink));
    let ctx = Rc::new(Ctx {
        idx,
        to_shards: ShardLanes::new(senders, ns.shards),
        to_control: Lane::new(up),
        core: RefCell::new(core),
        tasks: RefCell::new(AHashMap::new()),
        ns,
        clock: Cell::new(now),
        outbox,
        read_blocks: RefCell::new(Recycler::new(SPARE_READ_BLOCKS)),
        rearm: Signal::new(),
        armed: Cell::new(now),
        tap,
    });
    if let Some(p) = publish {
        task::register(&ctx);
        spawn_local(ingress::ingress_loop(ctx.clone(), p)).detach();
    }
    spawn_local(timer(ctx.clone())).detach();
    let (mut cmds, mut msgs) = (Vec::with_capacity(64), Vec::with_capacity(64));
    let (mut actions, mut waits) = (Vec::new(), Vec::new());
    while rx.recv_batch(&mut cmds, &mut msgs, 64).await.is_ok() {
        ctx.tick();
        // Commands first: the batch holds every command sent before its shard messages were
        // (see `super::msg`).
        for c in cmds.drain(..) {
            command(&ctx, c, ctx.now(), &mut actions);
            carry(&ctx, &mut actions, &mut waits, Who::Other);
            if !waits.is_empty() {
                settle(&ctx, &mut waits, Who::Other).await;
            }
        }
        let mut forwarded = 0;
        for (_, m) in msgs.drain(..) {
            forwarded += usize::from(matches!(m, ShardToShard::Deliver(_)));
            ctx.core.borrow_mut().on_hop(m, ctx.now(), &mut actions);
            carry(&ctx, &mut actions, &mut waits, Who::Other);
            if !waits.is_empty() {
                settle(&ctx, &mut waits, Who::Other).await;
            }
        }
        ctx.wake_receivers();
        // Placed and announced: the other shards may stop forwarding (see `forward`).
        ctx.ns.forwarding.placed(forwarded);
        YieldNow(false).await;
    }
}

/// Feeds a control-plane command to the core; serves the connection of a new link.
fn command(ctx: &Rc<Ctx>, c: ShardCmd, now: Instant, actions: &mut Vec<ShardAction>) {
    let added = ctx.core.borrow_mut().on_command(c, now, actions);
    if let Some((link, stream)) = added {
        link::attach(ctx, link, stream, actions);
    }
    ctx.rearm.notify(1);
}

/// The core's own timer: the dedup sweep and a stop's grace.
async fn timer(ctx: Rc<Ctx>) {
    let (mut actions, mut waits) = (Vec::new(), Vec::new());
    loop {
        let rearmed = ctx.rearm.listen();
        let at = ctx.core.borrow().poll_timeout();
        ctx.armed.set(at);
        let sleep = shoal_runtime::time::sleep_until(at);
        futures_util::future::select(std::pin::pin!(sleep), rearmed).await;
        let now = ctx.tick();
        ctx.core.borrow_mut().handle_timeout(now, &mut actions);
        // Spares unused for a round go (this timer runs at least every quarter of the dedup
        // lifetime, and often far more: the recycler keeps its rounds apart).
        ctx.read_blocks.borrow_mut().trim(now);
        carry(&ctx, &mut actions, &mut waits, Who::Other);
        settle(&ctx, &mut waits, Who::Other).await;
    }
}

/// Carries out `actions` in order, as far as nothing must wait; from the first that must, the
/// rest goes to `waits` (for [`settle`]).
fn carry(ctx: &Rc<Ctx>, actions: &mut Vec<ShardAction>, waits: &mut Vec<ShardAction>, who: Who) {
    // Every core call ends here: an input that moved the core's next deadline earlier (a
    // reliable reader's acknowledgement, a writer's heartbeat) wakes the timer task.
    if ctx.core.borrow().poll_timeout() < ctx.armed.get() {
        ctx.rearm.notify(1);
    }
    for a in actions.drain(..) {
        if !waits.is_empty() {
            waits.push(a);
            continue;
        }
        if let Some(a) = try_carry(ctx, a, who) {
            waits.push(a);
        }
    }
}

/// Carries out one action if that needs no waiting; hands it back (`Some`) otherwise.
fn try_carry(ctx: &Rc<Ctx>, a: ShardAction, who: Who) -> Option<ShardAction> {
    match a {
        ShardAction::Post { to, msg, busy } => match ctx.to_shards.offer(to, msg) {
            Offer::Sent => {}
            Offer::Gone(msg) => ctx.core.borrow_mut().unposted(msg, false),
            Offer::Busy(msg) if busy == IfBusy::Drop => ctx.core.borrow_mut().unposted(msg, true),
            Offer::Busy(msg) => return Some(ShardAction::Post { to, msg, busy }),
        },
        ShardAction::Report { msg, busy } => match busy {
            IfBusy::Detach => {
                let lane = ctx.to_control.clone();
                spawn_local(async move {
                    lane.send(msg).await;
                })
                .detach();
            }
            _ => match ctx.to_control.offer(msg) {
                Offer::Sent | Offer::Gone(_) => {}
                Offer::Busy(_) if busy == IfBusy::Drop => {}
                Offer::Busy(msg) => return Some(ShardAction::Report { msg, busy }),
            },
        },
        // Its callbacks ran in the sink (see `deliver`).
        ShardAction::Deliver(d) => {
            let placed = if ctx.tap.is_open() {
                ctx.tap.try_push(d)
            } else if forward::forwards(ctx) {
                forward::try_forward(ctx, d)
            } else {
                deliver::try_queue(&ctx.ns.hub, &ctx.outbox, d)
            };
            if let Err(rest) = placed {
                return Some(ShardAction::Deliver(rest));
            }
        }
        ShardAction::Error(e) => error_event(ctx, e),
        ShardAction::Block(b) => return Some(ShardAction::Block(b)),
        ShardAction::Ended(link, _) => ended(ctx, link, who),
        ShardAction::ReadOn(link) => {
            if let Some(t) = ctx.tasks.borrow().get(&link) {
                t.read_on.notify(usize::MAX);
            }
        }
    }
    None
}

/// Awaits what [`carry`] left, in order.
async fn settle(ctx: &Rc<Ctx>, waits: &mut Vec<ShardAction>, who: Who) {
    if waits.is_empty() {
        return;
    }
    // The application must hear of what is queued before this task parks.
    ctx.wake_receivers();
    for a in waits.drain(..) {
        match a {
            ShardAction::Post {
                to,
                msg,
                busy: IfBusy::Wait,
            } => post_waiting(ctx, to, msg).await,
            ShardAction::Report {
                msg,
                busy: IfBusy::Wait,
            } => {
                ctx.to_control.send(msg).await;
            }
            ShardAction::Deliver(d) => task::place_waiting(ctx, d).await,
            ShardAction::Block(b) => {
                let mut later = Vec::new();
                unblock(ctx, b, &mut later).await;
                // A reservation on the Origin path queues nothing but posts to other shards.
                for a in later {
                    match a {
                        ShardAction::Post { to, msg, .. } => post_waiting(ctx, to, msg).await,
                        other => {
                            let done = try_carry(ctx, other, who);
                            debug_assert!(done.is_none(), "only posts wait");
                        }
                    }
                }
            }
            // Never waits.
            other => {
                let done = try_carry(ctx, other, who);
                debug_assert!(done.is_none(), "what may wait is handled above");
            }
        }
    }
}

/// Posts `msg` to shard `to`, waiting for ring room; gives it back to the core if that shard
/// is gone.
async fn post_waiting(ctx: &Rc<Ctx>, to: usize, msg: ShardToShard) {
    if let Err(msg) = ctx.to_shards.send_or_return(to, msg).await {
        ctx.core.borrow_mut().unposted(msg, false);
    }
}

/// Waits for room on a link for a Block-policy publish, as long as the core says to.
async fn unblock(
    ctx: &Rc<Ctx>,
    mut b: Box<shoal_proto::shard::Blocked>,
    out: &mut Vec<ShardAction>,
) {
    loop {
        let room = b.listen();
        let now = ctx.tick();
        let step = ctx.core.borrow_mut().unblock(b, now, out);
        match step {
            Unblock::Done => return,
            Unblock::Wait(next, until) => {
                b = next;
                let sleep = shoal_runtime::time::sleep_until(until);
                futures_util::future::select(std::pin::pin!(sleep), room).await;
            }
        }
    }
}

/// The core forgot `link`: its receivers hear of what it delivered, and its tasks stop.
fn ended(ctx: &Rc<Ctx>, link: LinkId, who: Who) {
    // Whatever this link's reader queued must not wait for another batch to be announced.
    ctx.wake_receivers();
    let Some(t) = ctx.tasks.borrow_mut().remove(&link) else {
        return;
    };
    t.probe.borrow_mut().take();
    if who != Who::Reader(link) {
        if let Some(r) = t.reader {
            if t.reader_busy.get() {
                // It finishes handing out what it holds, then finds the link gone and
                // returns (dropping the handle lets it run).
                drop(r);
            } else {
                r.abort();
            }
        }
    }
    if who != Who::Writer(link) {
        if let Some(w) = t.writer {
            w.abort();
        }
    }
}

/// Raises the application's `Error` event for a link error.
fn error_event(ctx: &Ctx, e: LinkError) {
    let ev = Event::Error {
        peer: e.peer,
        kind: error_kind(e.fault),
        message: e.message,
    };
    ctx.ns.hub.emit_control(ev, ctx.counters());
}

fn error_kind(f: LinkFault) -> ErrorKind {
    match f {
        LinkFault::Malformed => ErrorKind::Malformed,
        LinkFault::Oversize => ErrorKind::Oversize,
        LinkFault::Crypto => ErrorKind::Crypto,
        LinkFault::Stalled => ErrorKind::Stalled,
        LinkFault::SlowPeer => ErrorKind::SlowPeer,
    }
}
