//! A data shard: serves the links it owns and routes the Data frames whose dedup state it
//! owns.
//!
//! Every link runs three tasks on its shard: a reader (parses every complete frame of each
//! read, Data frames through a fast lane that builds no `Frame`; Data payloads are slices of
//! the read buffer; reads grow while the link is busy), a writer (drains the link's queue of
//! whole frames into one vectored write per batch: runs of frames up to 2 KiB copied into one
//! arena slice, larger payloads as their own `Bytes`, uncopied) and a timer (heartbeat,
//! liveness, slow-peer kill). One inbox task takes the messages of the control plane and of
//! the other shards. A Data frame is
//! routed on the shard that owns its originator's dedup state (`dedup_shard`): when that is
//! the reading shard — always for a message straight from its originator — nothing leaves the
//! shard; otherwise the frame hops once. Sending on a link of another shard is one more hop
//! (`Transmit`) with the bytes already reserved in the link's [`LinkBudget`].
//!
//! The per-frame path (route, fan-out, deliver) is synchronous: what has to wait (a full ring
//! to another executor, a full event queue, link room for a Block-policy publish) is
//! collected as [`Wait`]s and awaited in order by [`settle`] before the next frame, so the
//! common case builds no future per frame. The clock is read once per batch and the
//! application's receivers are woken once per batch (and before any wait).
//!
//! Secured mode: the reader reads ciphertext straight into its [`RecordReader`]'s buffer,
//! opens the records in place, one as the parser needs it, and parses frames from the
//! plaintext where it was decrypted, exactly as in plaintext mode (frames may span records;
//! Data payloads still share the buffer). The writer seals each
//! batch of queued frames into as few records as fit, in its own reusable buffer, then writes
//! it with one `write_all`; sealing is the commit, so a frame the queue policy dropped never
//! consumes a nonce. A record that does not authenticate closes that link only (Crypto error).
//! The mode is decided once per batch, so the plaintext path pays nothing for it.

use super::event::{ErrorKind, Event, Outbox};
use super::msg::{Msg, ShardCmd};
use super::recycle::Recycler;
use super::shared::{Channels, NodeShared, Offer};
use super::stats::{add, inc, raise, Counters};
use crate::crypto::{OpenError, RecordReader, RecordSealer, SealError};
use crate::proto::{
    dedup_shard, CloseReason, DataMeta, DataVerdict, DedupCache, DropReason, FrameAction, Link,
    LinkEvent, LinkId, MsgIdGen, NeighbourLinks, Router,
};
use crate::wire::{
    peek_frame_len, take_data, take_frame, Data, DataHeader, DecodeError, DecodeStatus, Frame,
    DATA_HEADER_LEN,
};
use crate::{MsgId, PeerId};
use ahash::AHashMap;
use bytes::{Bytes, BytesMut};
use shoal_proto::cmd::{NewLink, Out, ShardToShard, ToControl, ToShard};
use shoal_proto::{LinkBudget, OverflowPolicy, SlowLinkAction};
use shoal_runtime::channel::{IngressReceiver, MeshEndpoint};
use shoal_runtime::net::{TcpReadHalf, TcpStream, TcpWriteHalf, MAX_IOVECS};
use shoal_runtime::{spawn_local, LocalJoinHandle};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes reserved for a read when the buffer has less room: from [`READ_CHUNK`], doubled
/// up to [`READ_CHUNK_MAX`] while reads fill what was asked (a busy link), back to the
/// minimum when a read comes back small, so idle links keep small buffers. Reads of 256 KiB
/// made 1 KiB throughput ~15 % higher than reads of 64 KiB (BENCHMARKS.md).
const READ_CHUNK: usize = 64 * 1024;
/// The largest read a busy link grows to.
const READ_CHUNK_MAX: usize = 256 * 1024;

/// Room for the next read: a chunk, or inside a frame (a record) that still needs `rest`
/// bytes, up to as much as is already buffered. The buffer grows with what arrives (at most
/// doubling per read, so copying stays linear), never to a length a peer merely announced: a
/// 5-byte header announcing 16 MiB used to reserve 16 MiB for that link.
fn read_room(rest: usize, buffered: usize, chunk: usize) -> usize {
    chunk.max(rest.min(buffered))
}

/// The size of the next read, given the last one: see [`READ_CHUNK`].
fn next_chunk(chunk: usize, read: usize) -> usize {
    if read >= chunk {
        (chunk * 2).min(READ_CHUNK_MAX)
    } else if read < chunk / 4 {
        READ_CHUNK
    } else {
        chunk
    }
}
/// Secured writer: stop adding frames to a batch once this much plaintext is in it (records
/// are cut at the receiver's limit, far above this, so a batch is usually one record).
const SEAL_BATCH: usize = 256 * 1024;
/// Read buffer blocks a shard keeps for reuse (see [`super::recycle`]); in steady state the
/// spares are about as many as the blocks whose payloads wait in the event queue (bounded by
/// `event_queue_capacity`), this caps them besides.
const SPARE_READ_BLOCKS: usize = 256;
/// Secured writer: a reusable buffer that grew past this for one huge frame is released.
const SEAL_BUF_KEEP: usize = 1024 * 1024;
/// Longest a link's timer sleeps, so a Disconnect-policy kill is acted on promptly even while
/// the writer is stuck on a full socket.
const TIMER_CAP: Duration = Duration::from_millis(200);

/// What the application hands over, entering through the origin shard's ingress queue.
#[derive(Debug)]
pub(crate) enum Publish {
    /// One message ([`crate::Mesh::broadcast`] and friends).
    One {
        /// Destination, [`PeerId::ZERO`] for a broadcast.
        dst: PeerId,
        payload: Bytes,
    },
    /// `count` whole Data frames for `dst`, encoded back to back (ids and ttl included) by
    /// a [`super::Publisher`].
    Batch {
        dst: PeerId,
        frames: BytesMut,
        count: usize,
    },
}

impl Publish {
    /// Messages it carries: the ingress bounds their sum, so a batching publisher runs no
    /// further ahead of its shard than one publishing message by message.
    pub(crate) fn weight(&self) -> usize {
        match self {
            Publish::One { .. } => 1,
            Publish::Batch { count, .. } => *count,
        }
    }
}

/// What a shard task starts with.
pub(crate) struct ShardInit {
    pub(crate) idx: usize,
    pub(crate) ns: Arc<NodeShared>,
    pub(crate) endpoint: MeshEndpoint<Msg>,
    /// Only on the shard that owns this node's own id (it originates every message).
    pub(crate) publish: Option<IngressReceiver<Publish>>,
    pub(crate) seed: u64,
}

/// Which task routes a frame, which decides what it may wait for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    /// The publisher: an originated message; may wait for link room (Block) and ring room.
    Origin,
    /// A link's reader: may wait for ring room (that only stalls this link).
    Reader,
    /// The shard's inbox: never waits for another shard's ring, since that shard's inbox
    /// may be waiting for ours; a hop that does not fit is dropped and counted.
    Inbox,
}

struct LinkCtx {
    id: LinkId,
    peer: PeerId,
    state: Link,
    queue: VecDeque<Out>,
    budget: Arc<LinkBudget>,
    /// `Some(flush)` once closing: flush the queue first (then Goodbye) or discard it.
    closing: Option<bool>,
    /// The reader waits on something other than its socket (event room, a hop): it is busy,
    /// not dead, so the timer refreshes its liveness.
    stalled: bool,
    /// What the writer took off `queue` for the write in progress: lost with the link if it
    /// closes before the write completes (counted then, with what is still queued).
    in_flight: Taken,
    finished: bool,
    reader: Option<LocalJoinHandle<()>>,
    writer: Option<LocalJoinHandle<()>>,
}

type LinkRc = Rc<RefCell<LinkCtx>>;

struct Shard {
    router: Router,
    table: NeighbourLinks,
    owners: AHashMap<LinkId, (usize, Arc<LinkBudget>)>,
    links: AHashMap<LinkId, LinkRc>,
    gen: MsgIdGen,
}

struct Ctx {
    idx: usize,
    ns: Arc<NodeShared>,
    ch: Channels,
    st: RefCell<Shard>,
    /// The shard's clock, read once per batch (a read, an inbox or publisher batch) rather
    /// than once per frame: a clock read costs ~75 ns on this class of VM, more than the
    /// rest of routing a frame, and liveness and dedup ages need milliseconds, not
    /// nanoseconds. Only ever set to a fresh `Instant::now()`, so it never goes backwards.
    clock: Cell<Instant>,
    /// Message events of the current batch, handed to the application as one queue entry
    /// with one wake-up (see [`Ctx::wake_receivers`]) instead of one queue operation and,
    /// whenever the application drains faster than the shard fills, one futex wake each.
    outbox: Outbox,
    /// Read buffer blocks of this shard's links, reused once the application has dropped
    /// every payload sliced from them (see [`super::recycle`]).
    read_blocks: RefCell<Recycler>,
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

    fn control(&self) -> usize {
        self.ns.shards
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Who {
    Reader,
    Writer,
    Other,
}

/// The shard's main task.
pub(crate) async fn run(init: ShardInit) {
    let ShardInit {
        idx,
        ns,
        endpoint,
        publish,
        seed,
    } = init;
    let (senders, mut rx) = endpoint.split();
    let now = Instant::now();
    let cfg = &ns.cfg;
    let dedup = DedupCache::with_streams(
        (cfg.max_dedup_entries / ns.shards).max(1),
        cfg.dedup_ttl,
        (cfg.max_dedup_streams / ns.shards).max(1),
        now,
    );
    let ctx = Rc::new(Ctx {
        idx,
        ch: Channels::new(senders, ns.shards),
        st: RefCell::new(Shard {
            router: Router::with_dedup(ns.me, cfg.initial_ttl, dedup),
            table: NeighbourLinks::new(),
            owners: AHashMap::new(),
            links: AHashMap::new(),
            gen: MsgIdGen::new(ns.me, seed),
        }),
        ns,
        clock: Cell::new(now),
        outbox: Outbox::default(),
        read_blocks: RefCell::new(Recycler::new(SPARE_READ_BLOCKS)),
    });
    if let Some(p) = publish {
        spawn_local(ingress_loop(ctx.clone(), p)).detach();
    }
    spawn_local(dedup_sweeper(ctx.clone())).detach();
    let mut batch = Vec::with_capacity(64);
    while rx.recv_batch(&mut batch, 64).await.is_ok() {
        ctx.tick();
        for (_, m) in batch.drain(..) {
            handle(&ctx, m).await;
        }
        ctx.wake_receivers();
        YieldNow(false).await;
    }
}

async fn dedup_sweeper(ctx: Rc<Ctx>) {
    loop {
        let at = ctx.st.borrow().router.poll_timeout();
        shoal_runtime::time::sleep_until(at).await;
        ctx.st.borrow_mut().router.handle_timeout(Instant::now());
    }
}

async fn handle(ctx: &Rc<Ctx>, m: Msg) {
    match m {
        Msg::ToShard(c) => command(ctx, c),
        Msg::Peer(ShardToShard::Relay { from, data }) => {
            let mut waits = Vec::new();
            route(ctx, from, data, Path::Inbox, &mut waits);
            if !waits.is_empty() {
                settle(ctx, &mut waits).await;
            }
        }
        Msg::Peer(ShardToShard::Transmit { link, out, frames }) => {
            enqueue_reserved(ctx, link, out, frames, None)
        }
        // Reports go to the control plane only.
        Msg::ToControl(_) => {}
    }
}

/// Carries out a control-plane command.
fn command(ctx: &Rc<Ctx>, c: ShardCmd) {
    match c {
        ToShard::AddLink(nl) => add_link(ctx, *nl),
        ToShard::Install {
            peer,
            link,
            owner,
            budget,
        } => {
            let mut s = ctx.st.borrow_mut();
            if let Some(old) = s.table.link_to(&peer).filter(|old| *old != link) {
                s.owners.remove(&old);
            }
            s.table.insert(peer, link);
            s.owners.insert(link, (owner, budget));
        }
        ToShard::Uninstall { peer, link } => {
            let mut s = ctx.st.borrow_mut();
            s.table.remove(&peer, link);
            s.owners.remove(&link);
        }
        ToShard::Close { link, goodbye } => {
            let l = ctx.st.borrow().links.get(&link).cloned();
            if let Some(l) = l {
                let mut c = l.borrow_mut();
                c.state.close(goodbye, ctx.now());
                c.closing = Some(true);
                c.budget.wake.notify(usize::MAX);
            }
        }
        ToShard::SendRaw { link, frame } => {
            let l = ctx.st.borrow().links.get(&link).cloned();
            if let Some(l) = l {
                let mut c = l.borrow_mut();
                let n = frame.len();
                if c.closing.is_some() {
                    inc(&ctx.counters().dropped_no_route);
                } else if c.budget.try_reserve(n).is_none() {
                    inc(&ctx.counters().dropped_queue_full);
                } else {
                    c.queue.push_back(Out::Raw(frame, n, 0));
                    c.state.on_sent(ctx.now());
                    c.budget.wake.notify(1);
                }
            }
        }
        ToShard::Stop => {
            spawn_local(stop(ctx.clone())).detach();
        }
        ToShard::Sync(token) => {
            let c2 = ctx.clone();
            spawn_local(async move {
                let to = c2.control();
                c2.ch
                    .send(to, Msg::ToControl(ToControl::Synced(token)))
                    .await;
            })
            .detach();
        }
    }
}

fn add_link(ctx: &Rc<Ctx>, nl: NewLink<std::net::TcpStream>) {
    let NewLink {
        link,
        peer,
        conn: stream,
        leftover,
        state,
        secure,
        budget,
    } = nl;
    let (sealer, opener) = match secure {
        Some((s, o)) => (Some(s), Some(o)),
        None => (None, None),
    };
    let stream = match TcpStream::from_std(stream) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(?link, %peer, error = %e, "could not attach connection to its shard");
            budget.close();
            let c2 = ctx.clone();
            spawn_local(async move {
                let to = c2.control();
                c2.ch
                    .send(to, Msg::ToControl(ToControl::LinkClosed { link }))
                    .await;
            })
            .detach();
            return;
        }
    };
    let (rd, wr) = stream.into_split();
    let lc = Rc::new(RefCell::new(LinkCtx {
        id: link,
        peer,
        state,
        queue: VecDeque::new(),
        budget,
        closing: None,
        in_flight: Taken::default(),
        stalled: false,
        finished: false,
        reader: None,
        writer: None,
    }));
    ctx.st.borrow_mut().links.insert(link, lc.clone());
    inc(&ctx.counters().links_opened);
    let r = match opener {
        None => spawn_local(reader(ctx.clone(), lc.clone(), rd, leftover)),
        Some(o) => {
            let rr = RecordReader::new(o, &leftover);
            spawn_local(reader_secure(ctx.clone(), lc.clone(), rd, rr))
        }
    };
    let w = spawn_local(writer(ctx.clone(), lc.clone(), wr, sealer));
    {
        let mut c = lc.borrow_mut();
        c.reader = Some(r);
        c.writer = Some(w);
    }
    spawn_local(timer(ctx.clone(), lc)).detach();
    tracing::debug!(shard = ctx.idx, ?link, %peer, "link attached");
}

/// Moves the link state machine's control frames into the queue; returns a close reason if
/// the state machine closed the link.
fn pull(c: &mut LinkCtx) -> Option<CloseReason> {
    while let Some(f) = c.state.poll_transmit() {
        let mut b = BytesMut::with_capacity(f.encoded_len());
        if f.encode(&mut b).is_ok() {
            c.queue.push_back(Out::Raw(b.freeze(), 0, 0));
        }
    }
    let mut closed = None;
    while let Some(ev) = c.state.poll_event() {
        if let LinkEvent::Closed(r) = ev {
            closed = Some(r);
        }
    }
    if !c.queue.is_empty() {
        c.budget.wake.notify(1);
    }
    closed
}

async fn reader(ctx: Rc<Ctx>, l: LinkRc, mut rd: TcpReadHalf, mut buf: BytesMut) {
    let max = ctx.ns.cfg.max_message_bytes;
    let mut waits = Vec::new();
    let mut chunk = READ_CHUNK;
    loop {
        loop {
            match take_and_handle(&ctx, &l, &mut buf, max, &mut waits) {
                Ok(Some(true)) => {}
                Ok(Some(false)) => return,
                Ok(None) => break,
                Err(e) => return decode_failure(&ctx, &l, e),
            }
            if !waits.is_empty() && !settle_reader(&ctx, &l, &mut waits).await {
                return;
            }
        }
        ctx.wake_receivers();
        let needed = match peek_frame_len(&buf, max) {
            Ok(DecodeStatus::NeedMore { needed }) => needed,
            _ => 0,
        };
        let want = read_room(needed.saturating_sub(buf.len()), buf.len(), chunk);
        ctx.read_blocks.borrow_mut().make_room(&mut buf, want, want);
        let (res, b) = rd.read(buf).await;
        buf = b;
        match res {
            Ok(0) => {
                let err = closed_inside_frame(&ctx, buf.len());
                teardown(&ctx, &l, Who::Reader, err);
                return;
            }
            Ok(n) => {
                chunk = next_chunk(chunk, n);
                on_read(&ctx, &l, n)
            }
            Err(e) => return read_failed(&ctx, &l, e),
        }
    }
}

/// The reader of a secured link: records are opened in place in `rr`'s buffer (the socket
/// reads straight into it), one at a time as the frame parser runs out of plaintext, and frames
/// are parsed from the plaintext where it lies, as in [`reader`].
async fn reader_secure(ctx: Rc<Ctx>, l: LinkRc, mut rd: TcpReadHalf, mut rr: RecordReader) {
    let max = ctx.ns.cfg.max_message_bytes;
    let mut waits = Vec::new();
    let mut chunk = READ_CHUNK;
    loop {
        loop {
            let len = match peek_frame_len(rr.plaintext(), max) {
                Ok(DecodeStatus::Complete { len, .. }) => len,
                // Frames that fit their records are never moved: the next record is opened
                // only once the plaintext before it holds no whole frame.
                Ok(DecodeStatus::NeedMore { .. }) => match rr.open_next() {
                    Ok(true) => continue,
                    Ok(false) => break,
                    Err(e) => return record_failure(&ctx, &l, e),
                },
                Err(e) => return decode_failure(&ctx, &l, e),
            };
            // The frame is split off the buffer, so Data payloads share it (no copy).
            let mut raw = rr.split_plaintext(len);
            match take_and_handle(&ctx, &l, &mut raw, max, &mut waits) {
                Ok(Some(true)) => {}
                Ok(Some(false)) => return,
                Ok(None) => unreachable!("peek_frame_len said the frame is complete"),
                Err(e) => return decode_failure(&ctx, &l, e),
            }
            if !waits.is_empty() && !settle_reader(&ctx, &l, &mut waits).await {
                return;
            }
        }
        ctx.wake_receivers();
        let rest = rr.pending_record_bytes();
        let mut buf = rr.take_buffer();
        let want = read_room(rest, buf.len(), chunk);
        // Moved whole (same layout) if it must move, so the reader's offsets stay valid.
        ctx.read_blocks.borrow_mut().make_room(&mut buf, want, want);
        let (res, b) = rd.read(buf).await;
        rr.restore_buffer(b);
        match res {
            Ok(0) => {
                let err = match rr.finish() {
                    Err(e) => {
                        inc(&ctx.counters().record_failures);
                        Some((ErrorKind::Crypto, e.to_string()))
                    }
                    Ok(()) => closed_inside_frame(&ctx, rr.plaintext().len()),
                };
                teardown(&ctx, &l, Who::Reader, err);
                return;
            }
            Ok(n) => {
                chunk = next_chunk(chunk, n);
                on_read(&ctx, &l, n)
            }
            Err(e) => return read_failed(&ctx, &l, e),
        }
    }
}

/// A record did not open: the stream can no longer be trusted; only this link goes.
fn record_failure(ctx: &Rc<Ctx>, l: &LinkRc, e: OpenError) {
    inc(&ctx.counters().record_failures);
    teardown(
        ctx,
        l,
        Who::Reader,
        Some((ErrorKind::Crypto, e.to_string())),
    );
}

/// The peer closed the connection with `partial` bytes of a frame still unparsed: an error
/// (counted as malformed) unless nothing was pending.
fn closed_inside_frame(ctx: &Ctx, partial: usize) -> Option<(ErrorKind, String)> {
    (partial > 0).then(|| {
        inc(&ctx.counters().malformed_frames);
        let msg = format!("connection closed inside a frame ({partial} bytes of it received)");
        (ErrorKind::Malformed, msg)
    })
}

/// Accounts `n` bytes read on a link: a new batch begins (see [`Ctx::tick`]).
fn on_read(ctx: &Ctx, l: &LinkRc, n: usize) {
    add(&ctx.counters().bytes_in, n as u64);
    let now = ctx.tick();
    l.borrow_mut().state.on_bytes_read(n, now);
}

/// The socket failed (reset, or gone): the link goes quietly.
fn read_failed(ctx: &Rc<Ctx>, l: &LinkRc, e: std::io::Error) {
    tracing::debug!(error = %e, "link read failed");
    teardown(ctx, l, Who::Reader, None);
}

/// A frame did not decode: only this link goes, with the error.
fn decode_failure(ctx: &Rc<Ctx>, l: &LinkRc, e: DecodeError) {
    let kind = decode_error_kind(&e, ctx.counters());
    teardown(ctx, l, Who::Reader, Some((kind, e.to_string())));
}

/// Awaits what the reader's last frame left in `waits`, with the link marked busy (not
/// dead) meanwhile; false when the link closed in the meantime.
async fn settle_reader(ctx: &Rc<Ctx>, l: &LinkRc, waits: &mut Vec<Wait>) -> bool {
    l.borrow_mut().stalled = true;
    settle(ctx, waits).await;
    l.borrow_mut().stalled = false;
    !l.borrow().finished
}

/// Counts a decode failure and classifies it.
pub(crate) fn decode_error_kind(e: &DecodeError, counters: &Counters) -> ErrorKind {
    if matches!(e, DecodeError::TooLarge { .. }) {
        inc(&counters.oversize_frames);
        ErrorKind::Oversize
    } else {
        inc(&counters.malformed_frames);
        ErrorKind::Malformed
    }
}

/// What a frame or a publish left to do that must wait: the per-message path is plain
/// synchronous code that only collects these, and [`settle`] awaits them (in order) when
/// there are any. Keeping awaits off the common path keeps the reader's and the publisher's
/// futures from being copied (hundreds of bytes each, nested) once per frame.
enum Wait {
    /// A message for another executor whose ring is full; `reserved` is released if that
    /// executor is gone.
    Hop {
        to: usize,
        msg: Msg,
        reserved: Option<(Arc<LinkBudget>, usize)>,
    },
    /// A Message event that waits for room in the application's event queue.
    Deliver(Event),
    /// An originated frame (or batch of `frames`) that waits for room on a link (Block
    /// policy).
    Reserve {
        link: LinkId,
        owner: usize,
        budget: Arc<LinkBudget>,
        out: Out,
        frames: u64,
    },
}

/// Awaits what the last frame or publish left in `waits`, in order.
async fn settle(ctx: &Rc<Ctx>, waits: &mut Vec<Wait>) {
    // The application must hear of what is queued before this task parks.
    ctx.wake_receivers();
    for w in waits.drain(..) {
        match w {
            Wait::Hop { to, msg, reserved } => hop_waiting(ctx, to, msg, reserved).await,
            Wait::Deliver(ev) => {
                ctx.ns
                    .hub
                    .queue_message(ev, ctx.counters(), &ctx.outbox, |_| {})
                    .await
            }
            Wait::Reserve {
                link,
                owner,
                budget,
                out,
                frames,
            } => {
                match reserve_or_slow(ctx, link, &budget, out.held()).await {
                    Some(total) => {
                        let mut later = Vec::new();
                        transmit(
                            ctx,
                            link,
                            owner,
                            &budget,
                            out,
                            frames,
                            total,
                            Path::Origin,
                            &mut later,
                        );
                        // `transmit` on the Origin path leaves nothing but hops.
                        for w in later {
                            if let Wait::Hop { to, msg, reserved } = w {
                                hop_waiting(ctx, to, msg, reserved).await;
                            }
                        }
                    }
                    None if budget.is_closed() => add(&ctx.counters().dropped_no_route, frames),
                    None => add(&ctx.counters().dropped_slow_link, frames),
                }
            }
        }
    }
}

/// Waits for room for `n` bytes on a link under the Block policy, but not for a link that
/// holds the rest hostage ([`SlowLinkPolicy`]): once it has been congested for `after` while
/// another link drains at least twice as fast, it is declared slow, once: counted, reported,
/// and closed if the policy says so. `None` when the link closed or is slow. When the links
/// drain alike the publisher is simply faster than the mesh and waits (plain backpressure; a
/// single link is never slow).
async fn reserve_or_slow(
    ctx: &Rc<Ctx>,
    link: LinkId,
    budget: &Arc<LinkBudget>,
    n: usize,
) -> Option<usize> {
    let policy = ctx.ns.slow_link;
    let recheck = (policy.after / 4).max(Duration::from_millis(10));
    loop {
        let left = budget.congested(policy.after);
        let wait = if left.is_zero() { recheck } else { left };
        if let Ok(got) = shoal_runtime::time::timeout(wait, budget.reserve(n)).await {
            return got;
        }
        if budget.is_closed() || budget.is_slow() {
            return None;
        }
        if budget.congested(policy.after).is_zero() && outpaced(ctx, link, budget) {
            break;
        }
    }
    if budget.mark_slow() {
        let c = ctx.counters();
        inc(&c.slow_links);
        match policy.action {
            // The link's writer closes it and reports the SlowPeer error.
            SlowLinkAction::Disconnect => budget.kill(),
            SlowLinkAction::Drop => {
                let peer = ctx.st.borrow().table.peer_on(link);
                let message = format!(
                    "link congested for {:?}: dropping for it until it catches up",
                    policy.after
                );
                tracing::warn!(shard = ctx.idx, ?peer, %message, "slow link");
                let kind = ErrorKind::SlowPeer;
                ctx.ns.hub.emit_control(
                    Event::Error {
                        peer,
                        kind,
                        message,
                    },
                    c,
                );
            }
        }
    }
    None
}

/// True if some other open link drains at least twice as fast as `link` has since its
/// congestion began (see [`SlowLinkPolicy`]).
fn outpaced(ctx: &Ctx, link: LinkId, budget: &LinkBudget) -> bool {
    let mine = budget.congested_rate();
    ctx.st
        .borrow()
        .owners
        .iter()
        .any(|(l, (_, b))| *l != link && !b.is_closed() && b.drain_rate() >= 2.0 * mine.max(0.001))
}

/// Sends `msg` to executor `to`, waiting for ring room; `reserved` link bytes are given back
/// if that executor is gone.
async fn hop_waiting(ctx: &Ctx, to: usize, msg: Msg, reserved: Option<(Arc<LinkBudget>, usize)>) {
    if !ctx.ch.send(to, msg).await {
        if let Some((budget, n)) = reserved {
            budget.release(n);
        }
    }
}

/// Takes the frame at the front of `buf` and handles it: `Some(keep reading)`, or `None` when
/// no whole frame is buffered. Data frames take the fast lane (no `Frame` built); anything
/// else goes through `take_frame`, which decides. What must wait is left in `waits`.
fn take_and_handle(
    ctx: &Rc<Ctx>,
    l: &LinkRc,
    buf: &mut BytesMut,
    max: u32,
    waits: &mut Vec<Wait>,
) -> Result<Option<bool>, DecodeError> {
    if let Some(d) = take_data(buf, max) {
        return Ok(Some(on_data(ctx, l, d, waits)));
    }
    Ok(take_frame(buf, max)?.map(|frame| on_frame(ctx, l, frame, waits)))
}

/// What a received frame does to its link.
enum Step {
    /// Established: route or hand over the frame, which came on this link.
    Process(LinkId),
    /// Consumed by the link (or moot while it closes); keep reading.
    Keep,
    /// The link is closed: the reader must stop.
    Stop,
}

/// Runs a received frame through the link's state machine (`step`), closing the link when it
/// says so.
fn link_step(
    ctx: &Rc<Ctx>,
    l: &LinkRc,
    step: impl FnOnce(&mut Link, Instant) -> FrameAction,
) -> Step {
    inc(&ctx.counters().frames_in);
    let (action, closed, link) = {
        let mut c = l.borrow_mut();
        if c.finished {
            return Step::Stop;
        }
        if c.closing.is_some() {
            // Closing politely: let the writer flush and say Goodbye; what the peer still
            // sends is moot.
            return Step::Keep;
        }
        let a = step(&mut c.state, ctx.now());
        let closed = pull(&mut c);
        (a, closed, c.id)
    };
    match action {
        FrameAction::Consumed => Step::Keep,
        FrameAction::Close => {
            let err = match closed {
                None | Some(CloseReason::Goodbye) | Some(CloseReason::Local) => None,
                Some(r) => {
                    inc(&ctx.counters().malformed_frames);
                    Some((ErrorKind::Malformed, r.to_string()))
                }
            };
            teardown(ctx, l, Who::Reader, err);
            Step::Stop
        }
        FrameAction::Process => Step::Process(link),
    }
}

/// Handles one Data frame taken by the fast lane; false when the link is closed and the
/// reader must stop. What must wait is left in `waits` (see [`Wait`]).
fn on_data(ctx: &Rc<Ctx>, l: &LinkRc, d: Data, waits: &mut Vec<Wait>) -> bool {
    match link_step(ctx, l, |s, now| s.on_data(now)) {
        Step::Process(link) => {
            route_in(ctx, link, d, waits);
            true
        }
        Step::Keep => true,
        Step::Stop => false,
    }
}

/// Handles one frame; false when the link is closed and the reader must stop. What must
/// wait is left in `waits` (see [`Wait`]).
fn on_frame(ctx: &Rc<Ctx>, l: &LinkRc, frame: Frame, waits: &mut Vec<Wait>) -> bool {
    let link = match link_step(ctx, l, |s, now| s.on_frame(&frame, now)) {
        Step::Process(link) => link,
        Step::Keep => return true,
        Step::Stop => return false,
    };
    match frame {
        Frame::Data(d) => route_in(ctx, link, d, waits),
        Frame::Membership(record) => {
            let to = ctx.control();
            hop(
                ctx,
                to,
                Msg::ToControl(ToControl::MembershipIn { link, record }),
                None,
                waits,
            );
        }
        Frame::IdentityRecord(record) if ctx.ns.secure.is_some() => {
            let to = ctx.control();
            let record = Box::new(record);
            hop(
                ctx,
                to,
                Msg::ToControl(ToControl::IdentityIn { link, record }),
                None,
                waits,
            );
        }
        // AuthConfirm cannot pass an established link; a plaintext mesh has no
        // identity records to learn from.
        _ => {}
    }
    true
}

/// Sends `msg` to executor `to` now, or leaves it in `waits` when its ring is full.
fn hop(
    ctx: &Ctx,
    to: usize,
    msg: Msg,
    reserved: Option<(Arc<LinkBudget>, usize)>,
    waits: &mut Vec<Wait>,
) {
    match ctx.ch.offer(to, msg) {
        Offer::Sent => {}
        Offer::Gone => {
            if let Some((budget, n)) = reserved {
                budget.release(n);
            }
        }
        Offer::Busy(msg) => waits.push(Wait::Hop { to, msg, reserved }),
    }
}

fn route_in(ctx: &Rc<Ctx>, from: LinkId, d: Data, waits: &mut Vec<Wait>) {
    let owner = dedup_shard(&d.msg_id, ctx.ns.shards);
    if owner != ctx.idx {
        inc(&ctx.counters().hops_out);
        hop(
            ctx,
            owner,
            Msg::Peer(ShardToShard::Relay { from, data: d }),
            None,
            waits,
        );
        return;
    }
    route(ctx, from, d, Path::Reader, waits);
}

fn route(ctx: &Rc<Ctx>, from: LinkId, d: Data, path: Path, waits: &mut Vec<Wait>) {
    let meta = DataMeta {
        src: d.src,
        dst: d.dst,
        msg_id: d.msg_id,
        ttl: d.ttl,
    };
    let r = {
        let mut s = ctx.st.borrow_mut();
        let s = &mut *s;
        s.router.on_data(&s.table, from, &meta, ctx.now())
    };
    let c = ctx.counters();
    match r {
        DataVerdict::Deliver => deliver(ctx, d, waits),
        DataVerdict::DeliverAndForward { except, ttl } => {
            fan_out(ctx, &meta, &d.payload, Some(except), None, ttl, path, waits);
            deliver(ctx, d, waits);
        }
        DataVerdict::Forward { except, ttl } => {
            fan_out(ctx, &meta, &d.payload, except, None, ttl, path, waits)
        }
        DataVerdict::Unicast { link, ttl } => {
            fan_out(ctx, &meta, &d.payload, None, Some(link), ttl, path, waits)
        }
        DataVerdict::Drop(DropReason::Duplicate) => inc(&c.dropped_duplicate),
        DataVerdict::Drop(DropReason::TtlExpired) => inc(&c.dropped_ttl),
        DataVerdict::Drop(DropReason::NoRoute) => inc(&c.dropped_no_route),
        DataVerdict::Drop(DropReason::TooOld) => inc(&c.dropped_too_old),
    }
}

fn deliver(ctx: &Rc<Ctx>, d: Data, waits: &mut Vec<Wait>) {
    inc(&ctx.counters().delivered);
    let ev = Event::Message {
        from: d.src,
        broadcast: d.dst.is_zero(),
        payload: d.payload,
    };
    if let Err(ev) = ctx.ns.hub.try_emit_message(ev, &ctx.outbox) {
        waits.push(Wait::Deliver(ev));
    }
}

/// Sends one Data frame (with `ttl`) on `only`, or on every routed link except `except`.
/// Reserves each link's bytes first; what does not fit is dropped and counted, except that
/// an originated message under the Block policy waits for room (in `waits`). See [`Path`]
/// for hops.
#[allow(clippy::too_many_arguments)]
fn fan_out(
    ctx: &Rc<Ctx>,
    meta: &DataMeta,
    payload: &Bytes,
    except: Option<LinkId>,
    only: Option<LinkId>,
    ttl: u8,
    path: Path,
    waits: &mut Vec<Wait>,
) {
    let Ok(header) = DataHeader::new(&meta.src, &meta.dst, &meta.msg_id, ttl, payload.len()) else {
        inc(&ctx.counters().oversize_frames);
        return;
    };
    let n = DATA_HEADER_LEN + payload.len();
    fan_out_with(ctx, n, 1, except, only, path, waits, || {
        Out::Data(header, payload.clone())
    });
}

/// Queues what `make` builds (`n` bytes holding `frames` Data frames) on `only`, or on every
/// routed link except `except`, as [`fan_out`] describes.
#[allow(clippy::too_many_arguments)]
fn fan_out_with(
    ctx: &Rc<Ctx>,
    n: usize,
    frames: u64,
    except: Option<LinkId>,
    only: Option<LinkId>,
    path: Path,
    waits: &mut Vec<Wait>,
    make: impl Fn() -> Out,
) {
    let c = ctx.counters();
    let policy = ctx.ns.policy;
    // Read-only borrow for the whole fan-out: nothing below mutates the shard tables
    // (`enqueue_reserved` only reads them), so no budget `Arc` is cloned per target.
    let s = ctx.st.borrow();
    let mut send = |link: LinkId| {
        let Some((owner, budget)) = s.owners.get(&link) else {
            return;
        };
        let Some(total) = budget.try_reserve(n) else {
            let may_wait =
                path == Path::Origin && policy == OverflowPolicy::Block && !budget.is_closed();
            if may_wait && budget.is_slow() {
                // Nobody waits for a slow link (see `SlowLinkPolicy`).
                add(&c.dropped_slow_link, frames);
            } else if may_wait {
                waits.push(Wait::Reserve {
                    link,
                    owner: *owner,
                    budget: budget.clone(),
                    out: make(),
                    frames,
                });
            } else if budget.is_closed() {
                add(&c.dropped_no_route, frames);
            } else {
                add(&c.dropped_queue_full, frames);
                if let OverflowPolicy::Disconnect { after } = policy {
                    budget.note_full(after);
                }
            }
            return;
        };
        transmit(
            ctx,
            link,
            *owner,
            budget,
            make(),
            frames,
            total,
            path,
            waits,
        );
    };
    match only {
        Some(l) => send(l),
        None => {
            for &l in s.table.links() {
                if Some(l) != except {
                    send(l);
                }
            }
        }
    }
}

/// Queues reserved bytes holding `frames` Data frames (`total` now queued on the link): on
/// this shard directly, or as a hop to the link's shard.
#[allow(clippy::too_many_arguments)]
fn transmit(
    ctx: &Rc<Ctx>,
    link: LinkId,
    owner: usize,
    budget: &Arc<LinkBudget>,
    out: Out,
    frames: u64,
    total: usize,
    path: Path,
    waits: &mut Vec<Wait>,
) {
    let c = ctx.counters();
    let n = out.held();
    raise(&c.peak_queued_bytes, total as u64);
    add(&c.frames_queued, frames);
    if owner == ctx.idx {
        enqueue_reserved(ctx, link, out, frames, Some(budget));
        return;
    }
    inc(&c.hops_out);
    let m = Msg::Peer(ShardToShard::Transmit { link, out, frames });
    match ctx.ch.offer(owner, m) {
        Offer::Sent => {}
        Offer::Gone => budget.release(n),
        // The inbox never waits for another shard's ring: that shard's inbox may be
        // waiting for ours.
        Offer::Busy(_) if path == Path::Inbox => {
            add(&c.dropped_queue_full, frames);
            budget.release(n);
        }
        Offer::Busy(msg) => waits.push(Wait::Hop {
            to: owner,
            msg,
            reserved: Some((budget.clone(), n)),
        }),
    }
}

/// Queues bytes holding `frames` Data frames, already reserved on a link of this shard; if the
/// link is gone meanwhile, gives the bytes back and counts the frames as dropped.
fn enqueue_reserved(
    ctx: &Rc<Ctx>,
    link: LinkId,
    out: Out,
    frames: u64,
    budget: Option<&Arc<LinkBudget>>,
) {
    let n = out.held();
    {
        // Read-only: the link is looked up without cloning its `Rc` (see `fan_out`).
        let st = ctx.st.borrow();
        if let Some(l) = st.links.get(&link) {
            let mut c = l.borrow_mut();
            if c.closing.is_none() && !c.finished {
                c.queue.push_back(out);
                c.state.on_sent(ctx.now());
                c.budget.wake.notify(1);
                return;
            }
            c.budget.release(n);
        } else if let Some(b) = budget {
            b.release(n);
        } else if let Some((_, b)) = st.owners.get(&link) {
            b.release(n);
        }
    }
    add(&ctx.counters().dropped_no_route, frames);
}

/// Frames (header + payload) at most this long are copied into the batch's arena; longer
/// payloads go to the socket as their own iovec, uncopied. The kernel walks iovecs one by
/// one, and for small frames that walk costs more than the copy: two iovecs per 64-byte
/// message made `_copy_from_iter` the largest cost of a publishing shard. At 1024 a 1 KiB
/// message (1082 bytes with its header) still went as two iovecs; copying frames up to 2 KiB
/// made 1 KiB throughput 20-25 % higher (BENCHMARKS.md).
const COPY_MAX: usize = 2048;
/// Most bytes gathered into one write (the link budget bounds what is queued anyway).
const BATCH_MAX: usize = 1 << 20;

/// Moves queued frames into `bufs` for one vectored write: runs of small frames as one
/// contiguous arena slice, large payloads as their own `Bytes`. Returns what the taken
/// frames hold.
fn gather(queue: &mut VecDeque<Out>, bufs: &mut Vec<Bytes>) -> Taken {
    let mut taken = Taken::default();
    let mut total = 0;
    let mut arena = BytesMut::new();
    // Room for two iovecs (a flushed arena run, then a large payload) is kept at all times.
    while bufs.len() + 3 <= MAX_IOVECS && total < BATCH_MAX {
        let Some(out) = queue.pop_front() else { break };
        taken.add(&out);
        let large = match out {
            Out::Data(h, p) => {
                let held = DATA_HEADER_LEN + p.len();
                total += held;
                if held <= COPY_MAX {
                    reserve_arena(&mut arena, queue.len(), held);
                    arena.extend_from_slice(&h.0);
                    arena.extend_from_slice(&p);
                    continue;
                }
                reserve_arena(&mut arena, queue.len(), DATA_HEADER_LEN);
                arena.extend_from_slice(&h.0);
                p
            }
            Out::Raw(b, ..) => {
                total += b.len();
                if b.len() <= COPY_MAX {
                    reserve_arena(&mut arena, queue.len(), b.len());
                    arena.extend_from_slice(&b);
                    continue;
                }
                b
            }
        };
        if !arena.is_empty() {
            bufs.push(arena.split().freeze());
        }
        bufs.push(large);
    }
    if !arena.is_empty() {
        bufs.push(arena.split().freeze());
    }
    taken
}

/// What a batch taken off a link's queue holds: the budget bytes to release once written, and
/// the Data frames to count as lost if the write fails.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Taken {
    held: usize,
    frames: u64,
}

impl Taken {
    fn add(&mut self, o: &Out) {
        self.held += o.held();
        self.frames += o.frames();
    }
}

/// Makes room for `n` more bytes in the arena, sized once per batch for what is queued
/// (assuming the rest is like this frame, and at least a small frame each) rather than grown
/// frame by frame: growing copies what the arena already holds.
fn reserve_arena(arena: &mut BytesMut, queued: usize, n: usize) {
    if arena.capacity() - arena.len() < n {
        let want = (queued + 1)
            .saturating_mul(n.max(DATA_HEADER_LEN + 128))
            .min(BATCH_MAX);
        arena.reserve(want.max(n));
    }
}

/// Seals frames from the front of `queue` into records appended to `out` until the queue is
/// empty or the batch holds [`SEAL_BATCH`] plaintext bytes; what they held is added to `taken`
/// (also when sealing fails, so the caller can count them as lost).
/// A record is cut when the next frame does not fit it; a frame larger than a whole record
/// (only possible if the peer's limit is below ours) is split across records.
fn seal_batch(
    queue: &mut VecDeque<Out>,
    sealer: &mut RecordSealer,
    out: &mut BytesMut,
    taken: &mut Taken,
) -> Result<(), SealError> {
    let mut batch = 0usize;
    let mut rec = sealer.begin(out);
    while batch < SEAL_BATCH {
        let Some(o) = queue.pop_front() else { break };
        taken.add(&o);
        let (head, body): (&[u8], &[u8]) = match &o {
            Out::Data(h, p) => (&h.0[..], &p[..]),
            Out::Raw(b, ..) => (&b[..], &[]),
        };
        let flen = head.len() + body.len();
        batch += flen;
        // A frame that does not fit the rest of this record starts the next one.
        if rec.plaintext_len() > 0 && flen > rec.remaining() {
            rec.seal()?;
            rec = sealer.begin(out);
        }
        for mut part in [head, body] {
            while !part.is_empty() {
                if rec.remaining() == 0 {
                    rec.seal()?;
                    rec = sealer.begin(out);
                }
                part = &part[rec.push_some(part)..];
            }
        }
    }
    if rec.plaintext_len() > 0 {
        rec.seal()?;
    }
    // An empty builder removes its header when dropped.
    Ok(())
}

async fn writer(ctx: Rc<Ctx>, l: LinkRc, mut wr: TcpWriteHalf, mut sealer: Option<RecordSealer>) {
    let mut bufs: Vec<Bytes> = Vec::with_capacity(MAX_IOVECS);
    // Secured: the batch's records, sealed in place; its allocation is reclaimed for the next
    // batch once the write is done (reserve on a unique buffer), so no allocation per record.
    let mut sealed = BytesMut::new();
    loop {
        let mut taken = Taken::default();
        let idle = {
            let mut c = l.borrow_mut();
            if c.finished {
                return;
            }
            if c.budget.kill_requested() {
                drop(c);
                slow_peer(&ctx, &l, Who::Writer);
                return;
            }
            pull(&mut c);
            if c.queue.is_empty() {
                if c.closing.is_some() {
                    break;
                }
                true
            } else if let Some(sealer) = sealer.as_mut() {
                sealed.reserve(SEAL_BATCH + 4096);
                if sealed.capacity() > SEAL_BUF_KEEP {
                    sealed = BytesMut::with_capacity(SEAL_BATCH);
                }
                let sealed_ok = seal_batch(&mut c.queue, sealer, &mut sealed, &mut taken);
                c.in_flight = taken;
                match sealed_ok {
                    Ok(()) => {}
                    Err(e) => {
                        drop(c);
                        inc(&ctx.counters().record_failures);
                        let err = Some((ErrorKind::Crypto, e.to_string()));
                        teardown(&ctx, &l, Who::Writer, err);
                        return;
                    }
                }
                bufs.push(sealed.split().freeze());
                false
            } else {
                taken = gather(&mut c.queue, &mut bufs);
                c.in_flight = taken;
                false
            }
        };
        if idle {
            let listener = l.borrow().budget.wake.listen();
            let work = {
                let c = l.borrow();
                !c.queue.is_empty()
                    || c.closing.is_some()
                    || c.finished
                    || c.budget.kill_requested()
            };
            if !work {
                listener.await;
            }
            continue;
        }
        let bytes: usize = bufs.iter().map(Bytes::len).sum();
        let (res, v) = wr.write_all_vectored(std::mem::take(&mut bufs)).await;
        bufs = v;
        bufs.clear();
        match res {
            Ok(()) => {
                let mut c = l.borrow_mut();
                c.in_flight = Taken::default();
                c.budget.written(bytes);
                c.budget.release(taken.held);
                add(&ctx.counters().bytes_out, bytes as u64);
            }
            Err(e) => {
                tracing::debug!(error = %e, "link write failed");
                teardown(&ctx, &l, Who::Writer, None);
                return;
            }
        }
    }
    let _ = wr.shutdown().await;
    teardown(&ctx, &l, Who::Writer, None);
}

async fn timer(ctx: Rc<Ctx>, l: LinkRc) {
    loop {
        let deadline = {
            let c = l.borrow();
            if c.finished {
                return;
            }
            c.state.poll_timeout()
        };
        let Some(deadline) = deadline else { return };
        shoal_runtime::time::sleep_until(deadline.min(Instant::now() + TIMER_CAP)).await;
        let now = Instant::now();
        let closed = {
            let mut c = l.borrow_mut();
            if c.finished {
                return;
            }
            if c.budget.kill_requested() {
                drop(c);
                slow_peer(&ctx, &l, Who::Other);
                return;
            }
            if c.stalled {
                c.state.on_bytes_received(now);
            }
            c.state.handle_timeout(now);
            pull(&mut c)
        };
        if let Some(reason) = closed {
            if reason == CloseReason::Stalled {
                inc(&ctx.counters().stalled_links);
                let err = Some((ErrorKind::Stalled, reason.to_string()));
                teardown(&ctx, &l, Who::Other, err);
                return;
            }
            if reason != CloseReason::Local {
                tracing::info!(shard = ctx.idx, peer = %l.borrow().peer, %reason, "link closed");
                teardown(&ctx, &l, Who::Other, None);
                return;
            }
        }
    }
}

fn slow_peer(ctx: &Rc<Ctx>, l: &LinkRc, who: Who) {
    inc(&ctx.counters().slow_peer_disconnects);
    let msg = "peer stayed blocked past the policy's limit (slow link)".to_owned();
    teardown(ctx, l, who, Some((ErrorKind::SlowPeer, msg)));
}

/// The single exit of a link: stops its tasks (except the caller), discards what is still
/// queued, releases the budget, reports the close to the control plane.
fn teardown(ctx: &Rc<Ctx>, l: &LinkRc, who: Who, err: Option<(ErrorKind, String)>) {
    // Whatever this link's reader queued must not wait for another batch to be announced.
    ctx.wake_receivers();
    let (link, peer, reader, writer) = {
        let mut c = l.borrow_mut();
        if c.finished {
            return;
        }
        c.finished = true;
        let mut lost = std::mem::take(&mut c.in_flight);
        for o in c.queue.drain(..) {
            lost.add(&o);
        }
        add(&ctx.counters().dropped_link_closed, lost.frames);
        c.budget.release(lost.held);
        c.budget.close();
        c.state.close(false, Instant::now());
        (c.id, c.peer, c.reader.take(), c.writer.take())
    };
    if who != Who::Reader {
        if let Some(r) = reader {
            r.abort();
        }
    }
    if who != Who::Writer {
        if let Some(w) = writer {
            w.abort();
        }
    }
    ctx.st.borrow_mut().links.remove(&link);
    inc(&ctx.counters().links_closed);
    if let Some((kind, message)) = err {
        tracing::warn!(shard = ctx.idx, %peer, ?kind, %message, "link closed on error");
        ctx.ns.hub.emit_control(
            Event::Error {
                peer: Some(peer),
                kind,
                message,
            },
            ctx.counters(),
        );
    }
    let c2 = ctx.clone();
    spawn_local(async move {
        let to = c2.control();
        c2.ch
            .send(to, Msg::ToControl(ToControl::LinkClosed { link }))
            .await;
    })
    .detach();
}

async fn stop(ctx: Rc<Ctx>) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while !ctx.st.borrow().links.is_empty() && Instant::now() < deadline {
        shoal_runtime::time::sleep(Duration::from_millis(5)).await;
    }
    let rest: Vec<LinkRc> = ctx.st.borrow().links.values().cloned().collect();
    for l in rest {
        teardown(&ctx, &l, Who::Other, None);
    }
    let to = ctx.control();
    ctx.ch
        .send(to, Msg::ToControl(ToControl::Stopped(ctx.idx)))
        .await;
}

/// Messages the publisher task takes from the ingress per turn. Each turn ends with a yield,
/// and each yield is a pass of the executor (an `io_uring_enter`); 256 frames of 64 bytes
/// are ~50 µs of work, short enough for the link tasks to run in time.
const PUBLISH_BATCH: usize = 256;

async fn ingress_loop(ctx: Rc<Ctx>, mut rx: IngressReceiver<Publish>) {
    let mut batch = Vec::with_capacity(PUBLISH_BATCH);
    let mut waits = Vec::new();
    while let Ok(n) = rx.recv_batch(&mut batch, PUBLISH_BATCH).await {
        ctx.tick();
        for p in batch.drain(..) {
            originate(&ctx, p, &mut waits);
            if !waits.is_empty() {
                settle(&ctx, &mut waits).await;
            }
        }
        ctx.wake_receivers();
        // A publisher that always finds its ingress non-empty would otherwise never let the
        // writers run, and every queue would look full to it. A short batch drained the
        // ingress, so the next receive parks this task anyway and a yield would only cost
        // the executor another round.
        if n == PUBLISH_BATCH {
            YieldNow(false).await;
        }
    }
}

/// Returns `Pending` once (after waking itself), so the executor runs its other tasks.
struct YieldNow(bool);

impl std::future::Future for YieldNow {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

fn originate(ctx: &Rc<Ctx>, p: Publish, waits: &mut Vec<Wait>) {
    match p {
        Publish::One { dst, payload } => originate_one(ctx, dst, payload, waits),
        Publish::Batch { dst, frames, count } => originate_batch(ctx, dst, frames, count, waits),
    }
}

fn originate_one(ctx: &Rc<Ctx>, dst: PeerId, payload: Bytes, waits: &mut Vec<Wait>) {
    let c = ctx.counters();
    inc(&c.originated);
    let me = ctx.ns.me;
    let (msg_id, route): (MsgId, DataVerdict) = {
        let mut s = ctx.st.borrow_mut();
        let s = &mut *s;
        let id = s.gen.next_id();
        (id, s.router.originate(&s.table, dst))
    };
    let meta = DataMeta {
        src: me,
        dst,
        msg_id,
        ttl: 0,
    };
    match route {
        DataVerdict::Deliver => {
            let d = Data {
                src: me,
                dst,
                msg_id,
                ttl: 0,
                payload,
            };
            deliver(ctx, d, waits);
        }
        DataVerdict::Forward { except, ttl } => {
            fan_out(ctx, &meta, &payload, except, None, ttl, Path::Origin, waits)
        }
        DataVerdict::Unicast { link, ttl } => fan_out(
            ctx,
            &meta,
            &payload,
            None,
            Some(link),
            ttl,
            Path::Origin,
            waits,
        ),
        DataVerdict::DeliverAndForward { .. } => {}
        DataVerdict::Drop(_) => inc(&c.dropped_no_route),
    }
}

/// A batching publisher's run of `count` whole Data frames for `dst`: routed once and
/// queued on each link as one buffer, without touching its bytes (they are in the
/// publisher's CPU cache, and the kernel's copy into the socket is their first read here).
fn originate_batch(
    ctx: &Rc<Ctx>,
    dst: PeerId,
    mut frames: BytesMut,
    count: usize,
    waits: &mut Vec<Wait>,
) {
    let c = ctx.counters();
    add(&c.originated, count as u64);
    let route = {
        let mut s = ctx.st.borrow_mut();
        let s = &mut *s;
        s.router.originate_many(&s.table, dst, count as u64)
    };
    match route {
        DataVerdict::Deliver => {
            while let Some(d) = take_data(&mut frames, u32::MAX) {
                deliver(ctx, d, waits);
            }
        }
        DataVerdict::Forward { except, .. } => queue_run(ctx, frames, count, except, None, waits),
        DataVerdict::Unicast { link, .. } => queue_run(ctx, frames, count, None, Some(link), waits),
        DataVerdict::DeliverAndForward { .. } => {}
        DataVerdict::Drop(_) => add(&c.dropped_no_route, count as u64),
    }
}

/// Queues a run of `count` frames on its links as one shared buffer.
fn queue_run(
    ctx: &Rc<Ctx>,
    frames: BytesMut,
    count: usize,
    except: Option<LinkId>,
    only: Option<LinkId>,
    waits: &mut Vec<Wait>,
) {
    let run = frames.freeze();
    let n = run.len();
    fan_out_with(
        ctx,
        n,
        count as u64,
        except,
        only,
        Path::Origin,
        waits,
        || Out::Raw(run.clone(), n, count as u64),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::RecordOpener;

    #[test]
    fn read_buffers_grow_with_what_arrives_not_with_what_is_announced() {
        // A header announcing 16 MiB, then 5 bytes: one ordinary chunk.
        assert_eq!(read_room(16 << 20, 5, READ_CHUNK), READ_CHUNK);
        // A frame that fits a chunk gets a chunk.
        assert_eq!(read_room(1000, 300_000, READ_CHUNK), READ_CHUNK);
        // A large frame arriving for real: the room doubles what is buffered, up to the rest.
        assert_eq!(read_room(16 << 20, 1 << 20, READ_CHUNK), 1 << 20);
        assert_eq!(read_room(100_000, 1 << 20, READ_CHUNK), 100_000);
        // Receiving a 16 MiB frame 64 KiB per read never holds more than twice what arrived
        // plus a chunk.
        let total = 16 << 20;
        let mut buffered = 0usize;
        let mut cap = 0usize;
        while buffered < total {
            let want = read_room(total - buffered, buffered, READ_CHUNK);
            if cap - buffered < want {
                cap = buffered + want;
            }
            assert!(cap <= 2 * buffered + READ_CHUNK, "{cap} for {buffered}");
            buffered += (64 << 10).min(total - buffered);
        }
    }

    #[test]
    fn reads_grow_on_a_busy_link_and_shrink_on_an_idle_one() {
        let mut c = READ_CHUNK;
        for _ in 0..10 {
            c = next_chunk(c, c); // every read fills what was asked
        }
        assert_eq!(c, READ_CHUNK_MAX, "grows, never past the maximum");
        assert_eq!(next_chunk(c, c / 2), c, "a half-full read keeps the size");
        assert_eq!(
            next_chunk(c, 100),
            READ_CHUNK,
            "a small read shrinks it at once"
        );
        assert_eq!(next_chunk(READ_CHUNK, 10), READ_CHUNK);
    }

    /// A batch sealed for a receiver with a small limit: records are cut between frames when
    /// the next one does not fit, a frame larger than a record spans several, every record
    /// stays within the limit, and the receiver gets back exactly the frames in order.
    #[test]
    fn seal_batch_packs_and_splits_frames_within_the_limit() {
        let key = [9u8; 32];
        let limit = 200; // the receiver's maxMessageBytes
        let mut sealer = RecordSealer::new(&key, limit);
        let max_pt = sealer.max_plaintext();
        let mut queue = VecDeque::new();
        let mut expect = Vec::new();
        for (i, len) in [10usize, 70, 90, 400, 5].into_iter().enumerate() {
            let payload = Bytes::from(vec![i as u8 + 1; len]);
            let h = DataHeader::new(
                &PeerId([1; 16]),
                &PeerId::ZERO,
                &crate::MsgId([i as u8; 16]),
                3,
                len,
            )
            .unwrap();
            expect.extend_from_slice(&h.0);
            expect.extend_from_slice(&payload);
            queue.push_back(Out::Data(h, payload));
        }
        queue.push_back(Out::Raw(Bytes::from_static(&[0, 0, 0, 1, 3]), 5, 0));
        expect.extend_from_slice(&[0, 0, 0, 1, 3]);
        let mut out = BytesMut::new();
        let mut taken = Taken::default();
        seal_batch(&mut queue, &mut sealer, &mut out, &mut taken).unwrap();
        assert!(queue.is_empty());
        assert_eq!(taken.held, expect.len());
        assert_eq!(taken.frames, 5, "the Data frames, not the control frame");
        // Walk the records: each within the limit.
        let mut at = 0;
        let mut records = 0;
        while at < out.len() {
            let clen = u32::from_be_bytes(out[at..at + 4].try_into().unwrap()) as usize;
            assert!(
                clen - 16 <= max_pt,
                "record plaintext {} > {max_pt}",
                clen - 16
            );
            at += 4 + clen;
            records += 1;
        }
        assert_eq!(at, out.len());
        assert_eq!(sealer.counter(), records);
        assert!(records >= 3, "the 400-byte frame needs several records");
        let mut rr = RecordReader::new(RecordOpener::new(&key, limit), &out);
        rr.decrypt().unwrap();
        assert_eq!(rr.plaintext(), &expect[..]);
        assert_eq!(rr.records(), records);
    }
}
