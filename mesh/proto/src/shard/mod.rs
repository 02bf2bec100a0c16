//! The shard core: everything a data shard decides, as one sans-I/O state machine.
//!
//! A [`ShardCore`] owns the [`Gossip`] and its dedup state, the [`NeighbourLinks`] table and
//! the link owners, and every link served on its shard: the link's [`crate::Link`] state machine,
//! its read buffer (or, secured, its [`crate::crypto::RecordReader`]), its outbound queue of
//! [`crate::cmd::Out`]s, its record sealer and the accounting of its [`LinkBudget`]. It decides the
//! backpressure (Block waits, DropNewest drops, Disconnect kills, the slow-link rule), the
//! origination of what the application publishes ([`Publish`]), what reaches the
//! application ([`Delivered`]), the heartbeat and liveness of each link, the accounting of a
//! link's teardown, and every counter of the shard ([`Counters`]).
//!
//! **Owns:** the decisions of one data shard. **Must not touch:** sockets, tasks, channels,
//! the clock or the application's event queue: every input carries `now`, every output is a
//! [`ShardAction`] (or a [`WriteStep`]) the driver carries out.
//!
//! # Driving loop
//!
//! Inputs, each with `now` and a reusable `out: &mut Vec<ShardAction>` that the driver drains
//! in order after every call (nothing else happens on the shard in between, except while the
//! driver awaits one of the actions):
//!
//! - from the control plane: [`on_command`](ShardCore::on_command) (`ToShard<C>`; an
//!   `AddLink` hands the connection back for the driver to serve);
//! - from another shard: [`on_hop`](ShardCore::on_hop) (`ShardToShard`);
//! - from the application: [`publish`](ShardCore::publish) (on the origin shard only);
//! - a link's reader: [`read_buffer`](ShardCore::read_buffer) → read into it →
//!   [`on_read`](ShardCore::on_read) (or [`on_eof`](ShardCore::on_eof) /
//!   [`on_link_lost`](ShardCore::on_link_lost)), then [`read_frames`](ShardCore::read_frames)
//!   until it says [`ReadStep::NeedBytes`] (also before the first read: the handshake's
//!   leftover bytes); on [`ReadStep::Hold`] it reads nothing until [`ShardAction::ReadOn`]
//!   names the link;
//! - a link's writer: [`next_write`](ShardCore::next_write) fills the iovecs of one write; the
//!   driver writes them and reports [`on_written`](ShardCore::on_written) (or
//!   [`on_link_lost`](ShardCore::on_link_lost)); on [`WriteStep::Idle`] it waits for the
//!   link budget's `wake` unless [`write_pending`](ShardCore::write_pending);
//! - a link's timer: arm [`link_timeout`](ShardCore::link_timeout), call
//!   [`on_link_timer`](ShardCore::on_link_timer);
//! - the shard's timer (dedup sweep, stop grace): arm [`poll_timeout`](ShardCore::poll_timeout),
//!   call [`handle_timeout`](ShardCore::handle_timeout);
//! - a [`ShardAction::Block`]ed publish: take [`Blocked::listen`], call
//!   [`unblock`](ShardCore::unblock), and wait for the listener or the returned deadline
//!   until it says [`Unblock::Done`];
//! - a post the driver could not make (ring full under [`IfBusy::Drop`], or the receiver
//!   gone): [`unposted`](ShardCore::unposted).
//!
//! Deliveries ([`Delivered`]: a message, a run of samples for a local reader, a loss report)
//! go to the [`DeliverySink`] the core is built with, each as it is decided, in order; what
//! the sink gives back (no room) comes back as [`ShardAction::Deliver`], and from then on
//! everything after it in the same call, so order holds.
//!
//! The actions: post to another shard or to the control plane ([`IfBusy`] says whether the
//! driver waits for ring room, sends it from a detached task, or gives it back), hand the
//! application what the sink gave back or an error event, wait for link room (Block), let a
//! held reader read on ([`ShardAction::ReadOn`]), and stop the tasks of a link the core
//! forgot ([`ShardAction::Ended`]). A simulation drives the same core with `C = ()`,
//! in-memory queues and a sink that records.
//!
//! The per-frame path (parse, route, fan out, deliver) is synchronous and allocates nothing:
//! outputs go to the caller's reused vector.
//!
//! Secured mode lives here too: the core opens records in place in the link's read buffer
//! and seals each write's batch into the link's reusable buffer, because what a record holds
//! (frames may span records, a frame dropped by policy must never consume a nonce, a record
//! that fails closes that link only) is protocol; the driver only moves ciphertext.
//!
//! # Files, bottom up
//!
//! No file imports a sibling above it: `action` (the output vocabulary, [`Blocked`] included)
//! and `reliable_tuning` import none; `read` and `write` (a link's bytes in and out) only
//! `action`; `race_order` (a dial race's winner read after its loser) `action` and `read`;
//! `links` (the served links, their lifecycle) `read`, `write` and `race_order`; `fan_out` (the
//! Data path and queuing on links) `links`; `backpressure`, `origin` and `samples` `fan_out`;
//! `reliable` `samples`. Each adds its part of [`ShardCore`]'s methods.

mod action;
mod backpressure;
mod fan_out;
mod links;
pub use links::TIMER_GRAIN;
mod origin;
mod race_order;
mod read;
mod reliable;
mod reliable_tuning;
mod retired;
mod samples;
mod seq;
mod unacked;
mod write;

#[cfg(test)]
mod tests;

pub use action::{
    decode_fault, Blocked, Delivered, Delivery, DeliverySink, IfBusy, LinkError, LinkFault,
    SampleRun, SamplesLost, ShardAction,
};
pub use backpressure::Unblock;
pub use origin::Publish;
pub use read::{ReadStep, READ_REST};
pub use reliable_tuning::ReliableTuning;
pub use samples::samples_shard;
pub use write::{AckSample, WriteStep, DEFAULT_RECORD_BYTES};

use crate::budget::{LinkBudget, OverflowPolicy, SlowLinkPolicy};
use crate::cmd::{ShardToShard, ToControl, ToShard};
use crate::config::MeshConfig;
use crate::dedup::DedupCache;
use crate::gossip::{Gossip, MsgIdGen, NeighbourLinks};
use crate::stats::{add, Counters};
use crate::topics::SampleRoutes;
use crate::{LinkId, PeerId};
use ahash::AHashMap;
use links::Links;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a shard core is configured with.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    /// This node.
    pub me: PeerId,
    /// The TTL originated messages carry.
    pub initial_ttl: u8,
    /// The largest frame accepted from a peer.
    pub max_message_bytes: u32,
    /// The node's dedup bounds (each shard keeps its share).
    pub max_dedup_entries: usize,
    /// How long a message id is remembered.
    pub dedup_ttl: Duration,
    /// The node's bound on originator id streams (each shard keeps its share).
    pub max_dedup_streams: usize,
    /// What a full link queue does to a new frame.
    pub policy: OverflowPolicy,
    /// Under Block: when a congested link is slow, and what happens to it.
    pub slow_link: SlowLinkPolicy,
    /// A secured mesh (identity records are passed to the control plane).
    pub secure: bool,
    /// The most buffers one vectored write takes (the driver's limit).
    pub max_iovecs: usize,
    /// Secured mesh: plaintext bytes after which the writer cuts a record between frames.
    pub record_bytes: usize,
    /// Bytes of sample runs held for a route table naming their writer
    /// ([`crate::topics::TopicsConfig::max_parked_sample_bytes`]).
    pub max_parked_sample_bytes: usize,
    /// How long such a run is held, and how long a writer's route outlives the table that
    /// dropped it (for its runs still on their way here, see `retired`).
    pub parked_sample_timeout: Duration,
    /// Retired routes kept at most: the node's writer capacity
    /// (`topics.max_local_endpoints + topics.max_remote_writers`).
    pub max_retired_routes: usize,
    /// How long a stopping shard lets its links flush (and say Goodbye) before it closes
    /// them ([`MeshConfig::stop_grace`]).
    pub stop_grace: Duration,
    /// How long a link that sent its FIN waits for the peer's
    /// ([`MeshConfig::heartbeat_timeout`]: a peer silent that long is gone anyway).
    pub close_linger: Duration,
    /// How long a dial race's loser waits for its peer to resolve the race too (see
    /// `ToShard::Retire`): the longer of `heartbeat_timeout` and `handshake_timeout`, since
    /// the peer resolves it when its handshake of the winner ends (or fails).
    pub retire_grace: Duration,
    /// How long a dial race's winner, once it has bytes, waits for its loser to be read to
    /// its end (see `race_order`): [`MeshConfig::heartbeat_interval`]. A loser whose peer
    /// resolved the race ends within a round trip or two; one still open by then is stuck.
    pub race_hold: Duration,
    /// Reliable topics' settings (`[topics]`).
    pub reliable: ReliableTuning,
}

impl ShardConfig {
    /// The settings of `cfg` for node `me`, with the default policies, plaintext, and up to
    /// 1024 iovecs per write.
    pub fn new(me: PeerId, cfg: &MeshConfig) -> ShardConfig {
        ShardConfig {
            me,
            initial_ttl: cfg.initial_ttl,
            max_message_bytes: cfg.max_message_bytes,
            max_dedup_entries: cfg.max_dedup_entries,
            dedup_ttl: cfg.dedup_ttl,
            max_dedup_streams: cfg.max_dedup_streams,
            policy: OverflowPolicy::default(),
            slow_link: SlowLinkPolicy::default(),
            secure: false,
            max_iovecs: 1024,
            record_bytes: DEFAULT_RECORD_BYTES,
            max_parked_sample_bytes: cfg.topics.max_parked_sample_bytes,
            parked_sample_timeout: cfg.topics.parked_sample_timeout,
            max_retired_routes: cfg
                .topics
                .max_local_endpoints
                .saturating_add(cfg.topics.max_remote_writers),
            stop_grace: cfg.stop_grace,
            close_linger: cfg.heartbeat_timeout,
            retire_grace: cfg.heartbeat_timeout.max(cfg.handshake_timeout),
            race_hold: cfg.heartbeat_interval,
            reliable: ReliableTuning::of(&cfg.topics),
        }
    }
}

/// Where a stop stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Running,
    /// Links may flush until then.
    Until(Instant),
    /// [`ToControl::Stopped`] was sent.
    Done,
}

/// One data shard's decisions (see the [module docs](self)).
#[derive(Debug)]
pub struct ShardCore {
    idx: usize,
    shards: usize,
    cfg: ShardConfig,
    counters: Arc<Counters>,
    gossip: Gossip,
    table: NeighbourLinks,
    /// Every routed link (of any shard): the shard serving it and its budget.
    owners: AHashMap<LinkId, (usize, Arc<LinkBudget>)>,
    /// The links this shard serves.
    links: Links,
    gen: MsgIdGen,
    stop: Stop,
    /// Where topic samples go (the control plane's latest table).
    sample_routes: Option<Arc<SampleRoutes>>,
    /// Sequence state of the writers whose samples this shard checks, by route slot.
    writer_seqs: Vec<seq::WriterSeq>,
    /// Runs waiting for a route table that names their writer.
    parked: samples::Parked,
    /// Routes of writers the latest tables dropped, for their runs still on the way.
    retired: retired::Retired,
    /// Reliable topics: the writers' histories and the readers' states sequenced here.
    reliable: reliable::Reliable,
    /// Where deliveries go first (see [`DeliverySink`]).
    sink: Sink,
    /// Links whose writer sent its FIN, each with the time it is given up on: they are read
    /// (what comes handed to the peer's other link, or counted and dropped) until the peer
    /// closes too (see [`ShardCore::on_write_shutdown`]). At most one entry per served link.
    lingering: Vec<(Instant, LinkId)>,
    /// Dial-race losers and winners in the hand-over between them (`links::Handover`):
    /// boxed, as the message path only asks whether they are empty.
    handover: Box<links::Handover>,
    /// The origin of the links' timer grid (see [`links::TIMER_GRAIN`]).
    timer_epoch: Instant,
}

/// The core's [`DeliverySink`] (a box, so the core's type stays the same in the driver and
/// in simulations).
struct Sink(Box<dyn DeliverySink>);

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sink")
    }
}

impl ShardCore {
    /// Shard `idx` of `shards`, writing its counters to `counters`; message ids are seeded
    /// with `seed`; what it delivers goes to `sink` first (see [`DeliverySink`]).
    pub fn new(
        idx: usize,
        shards: usize,
        cfg: ShardConfig,
        counters: Arc<Counters>,
        seed: u64,
        now: Instant,
        sink: Box<dyn DeliverySink>,
    ) -> ShardCore {
        let n = shards.max(1);
        let dedup = DedupCache::with_streams(
            (cfg.max_dedup_entries / n).max(1),
            cfg.dedup_ttl,
            (cfg.max_dedup_streams / n).max(1),
            now,
        );
        ShardCore {
            idx,
            shards: n,
            gossip: Gossip::with_dedup(cfg.me, cfg.initial_ttl, dedup),
            table: NeighbourLinks::new(),
            owners: AHashMap::new(),
            links: Links::default(),
            gen: MsgIdGen::new(cfg.me, seed),
            stop: Stop::Running,
            sample_routes: None,
            writer_seqs: Vec::new(),
            parked: samples::Parked::default(),
            retired: retired::Retired::default(),
            reliable: reliable::Reliable::default(),
            sink: Sink(sink),
            lingering: Vec::new(),
            handover: Box::default(),
            timer_epoch: now,
            counters,
            cfg,
        }
    }

    /// A new input call that may deliver (see [`DeliverySink::begin_call`]).
    #[inline]
    fn begin_call(&mut self) {
        self.sink.0.begin_call();
    }

    /// Hands `d` to the application: every delivery passes here, in order. What the sink
    /// gives back follows as an action (see [`DeliverySink`]).
    #[inline(always)]
    pub(super) fn hand_over(&mut self, d: Delivered, out: &mut Vec<ShardAction>) {
        if let Err(d) = self.sink.0.try_deliver(d) {
            out.push(ShardAction::Deliver(d));
        }
    }

    /// This shard's index.
    pub fn idx(&self) -> usize {
        self.idx
    }

    /// The shard's counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The gossip state (for its statistics).
    pub fn gossip(&self) -> &Gossip {
        &self.gossip
    }

    /// The links this shard serves.
    pub fn served(&self) -> impl Iterator<Item = LinkId> + '_ {
        self.links.ids()
    }

    /// Bytes of sample runs held for a route table naming their writer (bounded by
    /// [`ShardConfig::max_parked_sample_bytes`]).
    pub fn parked_bytes(&self) -> usize {
        self.parked.bytes()
    }

    /// Reliable writer states and reliable reader states this shard keeps (one slot per
    /// routed writer at most).
    pub fn reliable_states(&self) -> (usize, usize) {
        self.reliable.states()
    }

    /// Carries out a control-plane command. For `AddLink` the link is served from now on and
    /// its connection is handed back: the driver starts its reader, writer and timer (or
    /// reports [`on_link_lost`](Self::on_link_lost) if it cannot).
    pub fn on_command<C>(
        &mut self,
        cmd: ToShard<C>,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) -> Option<(LinkId, C)> {
        match cmd {
            ToShard::AddLink(nl) => return Some(self.add_link(*nl)),
            ToShard::Install {
                peer,
                link,
                owner,
                budget,
            } => {
                let old = self.table.link_to(&peer).filter(|old| *old != link);
                self.table.insert(peer, link);
                if let Some(old) = old {
                    if let Some((_, b)) = self.owners.remove(&old) {
                        b.route_changed();
                    }
                    self.remember_gone(old, peer);
                    self.pass_queue(old, link);
                }
                self.owners.insert(link, (owner, budget));
            }
            ToShard::Uninstall { peer, link } => {
                self.table.remove(&peer, link);
                if let Some((_, b)) = self.owners.remove(&link) {
                    b.route_changed();
                }
            }
            ToShard::Close { link, goodbye } => self.close(link, goodbye, now),
            ToShard::Retire { link } => self.retire(link, now),
            ToShard::SendRaw { link, frame } => self.send_raw(link, frame, now),
            ToShard::SampleRoutes(r) => {
                self.retire_dropped(&r, now);
                self.sample_routes = Some(r);
                self.sync_reliable(now, out);
                self.replay_parked(now, out);
            }
            ToShard::Stop => {
                if self.stop == Stop::Running {
                    self.stop = Stop::Until(now + self.cfg.stop_grace);
                    // A publisher waiting on a closed link for this shard's table to change
                    // waits no more: no table follows a stop.
                    for (_, b) in self.owners.values() {
                        b.route_changed();
                    }
                }
                // The control plane closes the links it knows; a retiring loser it already
                // forgot would hold the stop up to its grace.
                for link in self.retiring_links() {
                    self.close(link, true, now);
                }
                self.check_stopped(out);
            }
            ToShard::Sync(token) => out.push(ShardAction::Report {
                msg: ToControl::Synced(token),
                busy: IfBusy::Detach,
            }),
            ToShard::ReversePaths(t) => self.gossip.set_paths(Some(t)),
            ToShard::PauseDiscovery { link, until } => {
                if let Some(slot) = self.links.slot(link) {
                    self.links.at(slot).discovery_paused = Some(until);
                }
            }
        }
        None
    }

    /// Handles a message from another shard.
    pub fn on_hop(&mut self, msg: ShardToShard, now: Instant, out: &mut Vec<ShardAction>) {
        self.begin_call();
        match msg {
            ShardToShard::HopData { from, data } => {
                self.route(from, data, fan_out::Path::Inbox, now, out)
            }
            ShardToShard::HopSamples { from, samples } => {
                self.route_samples(from, samples, fan_out::Path::Inbox, now, out)
            }
            ShardToShard::HopReliable { from, frame } => self.route_reliable(from, frame, now, out),
            ShardToShard::Transmit {
                link,
                out: o,
                frames,
                originated,
            } => self.enqueue_reserved(link, o, frames, originated, now),
            // Offered to the sending shard's sink already: not again (the callbacks ran).
            ShardToShard::Deliver(d) => out.push(ShardAction::Deliver(d)),
        }
    }

    /// A post the driver could not make: the receiving executor is gone, or (`busy`) its ring
    /// was full under [`IfBusy::Drop`]. Reserved link bytes are given back; a dropped
    /// transmission is counted.
    pub fn unposted(&mut self, msg: ShardToShard, busy: bool) {
        if let ShardToShard::Transmit {
            link, out, frames, ..
        } = msg
        {
            if busy {
                add(&self.counters.dropped_queue_full, frames);
            }
            if let Some((_, b)) = self.owners.get(&link) {
                b.release(out.held());
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) has work next.
    pub fn poll_timeout(&self) -> Instant {
        let mut at = self.gossip.poll_timeout();
        let timeout = self.cfg.parked_sample_timeout;
        let expiries = [
            self.parked.next_expiry(timeout),
            self.retired.next_expiry(timeout),
        ];
        for t in expiries.into_iter().flatten() {
            at = at.min(t);
        }
        if let Some(t) = self.reliable.poll_timeout() {
            at = at.min(t);
        }
        if let Some(&(t, _)) = self.lingering.iter().min() {
            at = at.min(t);
        }
        match self.stop {
            Stop::Until(d) => at.min(d),
            _ => at,
        }
    }

    /// Sweeps the dedup cache when due, and closes what a stop left open past its grace.
    pub fn handle_timeout(&mut self, now: Instant, out: &mut Vec<ShardAction>) {
        self.gossip.handle_timeout(now);
        self.expire_parked(now);
        self.expire_retired(now);
        self.reliable_timeout(now, out);
        self.linger_timeout(now, out);
        if let Stop::Until(d) = self.stop {
            if now >= d {
                for link in self.links.ids().collect::<Vec<_>>() {
                    self.teardown(link, None, None, now, out);
                }
                self.check_stopped(out);
            }
        }
    }

    /// After a stop, reports [`ToControl::Stopped`] once no link is left.
    fn check_stopped(&mut self, out: &mut Vec<ShardAction>) {
        if matches!(self.stop, Stop::Until(_)) && self.links.is_empty() {
            self.stop = Stop::Done;
            out.push(ShardAction::Report {
                msg: ToControl::Stopped(self.idx),
                busy: IfBusy::Detach,
            });
        }
    }
}
