//! The control core: everything the control plane of a node decides, as one sans-I/O state
//! machine ([`ControlCore`]). It composes the peer table and dial races ([`PeerManager`]),
//! membership ([`MemberGraph`]), scouting (beacon schedule and acceptance), one handshake
//! machine per connecting socket ([`handshake::Handshaking`]: Hello, Shoal extension,
//! AuthConfirm, identity), identity records and revocation, the placement of links on shards
//! and the commands to them, and the ordering rule of [`held`].
//!
//! # Driving it
//!
//! Inputs, each with `now` (and the wall clock in ms where versions are minted):
//! [`start`](ControlCore::start); a socket accepted ([`on_accepted`](ControlCore::on_accepted)),
//! a dial connected or failed ([`on_dial_connected`](ControlCore::on_dial_connected),
//! [`on_dial_failed`](ControlCore::on_dial_failed)); bytes read on a handshaking socket, its end
//! ([`on_bytes`](ControlCore::on_bytes), [`on_eof`](ControlCore::on_eof)); a scouting datagram
//! ([`on_datagram`](ControlCore::on_datagram)); a report of a shard
//! ([`on_shard_report`](ControlCore::on_shard_report)), or several that arrived together
//! ([`on_shard_reports`](ControlCore::on_shard_reports): one round for all); a timer
//! ([`handle_timeout`](ControlCore::handle_timeout) at [`poll_timeout`](ControlCore::poll_timeout));
//! the application's commands ([`set_secure_context`](ControlCore::set_secure_context) after a
//! trust change, [`stop`](ControlCore::stop)).
//!
//! Identity mode (this node has an Ed25519 identity): Membership records and Discovery frames
//! are signed by their origin and verified before anything is applied ([`signed`] has the
//! rules, `mesh/proto/protocol/signed-records.md` the bytes).
//!
//! Outputs: [`poll_action`](ControlCore::poll_action) ([`Action`]: dial, write, close a socket,
//! send a beacon, events, names, warnings) and, separately, the shard outbox
//! [`poll_to_shard`](ControlCore::poll_to_shard) (link and table changes ahead of frames, see
//! `outbox.rs`; the driver attaches the socket of a [`ToShard::AddLink`]). Queries for the
//! application: connected peers, known peers, members,
//! link budgets, the installed links and their record suites, what is known of every member
//! ([`nodes_view`](ControlCore::nodes_view), see [`nodes`]); counters:
//! [`stats`](ControlCore::stats).
//!
//! **Owns:** every protocol decision of the control plane. **Must not touch:** sockets, tasks,
//! channels, threads, the clock or the OS random source (randomness comes from the seed given
//! to [`ControlCore::new`]).

mod connecting;
mod degree;
pub mod handshake;
pub mod held;
mod identity;
pub mod nodes;
mod outbox;
pub mod output;
mod paths;
mod round;
mod scout;
pub mod signed;
mod slow;
mod topics;

pub use handshake::{Exchanged, Failure, Handshaking, Progress};
pub use held::HeldEvents;
pub use nodes::{LinkView, NodeIdentity, NodeView, NodesView, Speaks};
pub use output::{Action, ControlErrorKind, ControlEvent, ControlStats, ShardPost};

use crate::cmd::{ToControl, ToShard};
use crate::config::MeshConfig;
use crate::crypto::{IdentityBook, RecordSuite, SecureContext, SignerBook};
use crate::link::Role;
use crate::{BeaconSchedule, LinkBudget, LinkId, MemberGraph, PeerId, PeerManager, PeerStats};
use ahash::AHashMap;
use bytes::BytesMut;
use identity::OwnRecord;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

pub use outbox::OUTBOX_CAP;

/// What a control core starts with.
#[derive(Debug, Clone)]
pub struct ControlInit {
    /// This node's id.
    pub me: PeerId,
    /// The settings.
    pub cfg: MeshConfig,
    /// Number of data shards.
    pub shards: usize,
    /// The TCP port this node listens on (sent in Hellos and beacons).
    pub listen_port: u16,
    /// Secured mesh: the handshake context (`None`: plaintext).
    pub secure: Option<Arc<SecureContext>>,
    /// Seeds every random choice (jitter, nonces, ephemeral keys): the driver takes it from
    /// the OS, a simulation from its seed.
    pub seed: [u8; 32],
    /// The link budgets' clock origin.
    pub epoch: Instant,
    /// This node's TCP listen addresses, announced in its topics participant record (a
    /// node with `topics.dial_participants` dials them).
    pub listen_addrs: Vec<SocketAddr>,
}

/// A socket the core knows that is not on a shard.
#[derive(Debug)]
enum Conn {
    /// A dial in flight.
    Dialing,
    /// In its handshake.
    Handshaking(Box<Handshaking>),
    /// Handshake done, waiting for the peer table's verdict in the same round.
    Ready(Box<Exchanged>),
}

/// A link living on a shard.
#[derive(Debug)]
struct Placed {
    peer: PeerId,
    shard: usize,
    budget: Arc<LinkBudget>,
    /// The peer advertised extended frames: it may get Discovery frames.
    capable: bool,
    /// The peer advertised signed records: it may get SignedMembership frames.
    signed_frames: bool,
    /// It may get them, and its identity was verified in the handshake (identity mode on
    /// both ends): it signs its own records and is sent no unsigned ones but multimaster
    /// nodes' (see [`signed`]).
    signs: bool,
    /// Secured mesh: the suite of its records.
    suite: Option<RecordSuite>,
    /// Both ends advertised MembershipDigest (`membership_digest` on here too).
    digest: bool,
    /// The peer holds this node's Discovery lease while linked (Hello feature bit 4).
    holds_lease: bool,
}

/// One installed link, as the application sees it ([`ControlCore::links`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkInfo {
    /// The neighbour at its other end.
    pub peer: PeerId,
    /// The suite of its records; `None` in a plaintext mesh.
    pub suite: Option<RecordSuite>,
    /// The neighbour sent Shoal's Hello extension with extended frames (a Shoal node; `false`
    /// for a multimaster node).
    pub extended_frames: bool,
}

/// The control plane of one node (see the module docs).
#[derive(Debug)]
pub struct ControlCore {
    me: PeerId,
    cfg: MeshConfig,
    shards: usize,
    listen_port: u16,
    epoch: Instant,
    secure: Option<Arc<SecureContext>>,
    rng: StdRng,
    peers: PeerManager<StdRng>,
    membership: MemberGraph,
    conns: AHashMap<LinkId, Conn>,
    placed: AHashMap<LinkId, Placed>,
    held: HeldEvents,
    book: IdentityBook,
    /// The keys of origins whose signed records verified.
    signers: SignerBook,
    /// The own Membership record last signed, and its signature.
    own_signed: Option<(crate::wire::Membership, crate::wire::RecordSignature)>,
    /// Reused for the bytes a signature covers.
    sig_scratch: Vec<u8>,
    own_record: Option<OwnRecord>,
    beacons: Option<BeaconSchedule>,
    beacon_failure_reported: bool,
    actions: VecDeque<Action>,
    outbox: outbox::ShardOutbox,
    stats: ControlStats,
    peer_stats: PeerStats,
    stopping: bool,
    stopped_shards: usize,
    /// The topics snapshot last shown (see [`ControlCore::topics_view`]).
    shown_view: Arc<crate::topics::TopicsView>,
    /// Writers created whose first route table has not gone out yet.
    ready_pending: Vec<crate::topics::EndpointGuid>,
    /// A round ran since [`take_changed`](ControlCore::take_changed): the query views may
    /// differ.
    changed: bool,
    topics: crate::topics::TopicsCore,
    /// The reverse-path check's graph and last table (see `paths`).
    paths: paths::Paths,
    /// Neighbours not listed in the own record while their link is slow (see `slow`).
    withdrawn: slow::Withdrawn,
    /// Peers whose closed links were slow lately, for their next link.
    slow_memory: slow::SlowMemory,
    /// The link cap's rules (`max_links` above zero; see `degree`).
    degree: Option<crate::degree::DegreeCap>,
}

impl ControlCore {
    /// A core for the node of `init`, at `now` (`wall_ms`: the wall clock, which seeds the
    /// membership and identity record versions so a restarted node outranks its old ones).
    pub fn new(init: ControlInit, now: Instant, wall_ms: u64) -> ControlCore {
        let ControlInit {
            me,
            cfg,
            shards,
            listen_port,
            secure,
            seed,
            epoch,
            listen_addrs,
        } = init;
        let mut rng = StdRng::from_seed(seed);
        let (mut topics, topics_warning) =
            topics::new_topics(me, &cfg, shards, listen_addrs, wall_ms, rng.gen(), now);
        let shown_view = topics.view();
        let peers = PeerManager::new(me, &cfg, StdRng::seed_from_u64(rng.gen()), now);
        let membership = MemberGraph::new(
            me,
            cfg.membership_interval,
            cfg.membership_timeout,
            cfg.max_membership_records,
            wall_ms,
            now,
        )
        .with_limits(
            cfg.max_membership_neighbours,
            crate::membership::RECOMPUTE_GAP,
        )
        .with_flood_gap(cfg.membership_flood_gap)
        .with_relay_gap(cfg.membership_relay_gap)
        .with_digest(cfg.membership_digest);
        // Drawn only with a cap: without one, every other draw stays what it was.
        let degree = (cfg.max_links > 0).then(|| {
            crate::degree::DegreeCap::new(
                cfg.max_links,
                cfg.membership_interval,
                cfg.reconnect_max,
                rng.gen(),
                now,
            )
        });
        let own_record = secure
            .as_deref()
            .and_then(|c| OwnRecord::new(c, wall_ms, now + cfg.membership_interval));
        let mut core = ControlCore {
            me,
            book: IdentityBook::new(me, cfg.max_identity_records),
            signers: SignerBook::new(cfg.max_identity_records),
            own_signed: None,
            sig_scratch: Vec::new(),
            beacons: cfg.scouting.then(|| {
                BeaconSchedule::new(cfg.announce_interval, now)
                    .with_idle_interval(cfg.idle_beacon_interval())
            }),
            shards: shards.max(1),
            listen_port,
            epoch,
            secure,
            rng,
            peers,
            membership,
            conns: AHashMap::new(),
            placed: AHashMap::new(),
            held: HeldEvents::new(shards),
            own_record,
            beacon_failure_reported: false,
            actions: VecDeque::new(),
            outbox: outbox::ShardOutbox::default(),
            stats: ControlStats::default(),
            peer_stats: PeerStats::default(),
            stopping: false,
            stopped_shards: 0,
            changed: true,
            shown_view,
            ready_pending: Vec::new(),
            topics,
            paths: paths::Paths::new(
                me,
                cfg.reverse_path_check,
                cfg.reverse_path_settle,
                cfg.relay_pruning,
                cfg.relay_redundancy,
            ),
            withdrawn: slow::Withdrawn::default(),
            slow_memory: slow::SlowMemory::default(),
            degree,
            cfg,
        };
        if let Some(detail) = topics_warning {
            core.warn("invalid [topics] settings, defaults used", detail);
        }
        core
    }

    /// Dials the static and seed peers.
    pub fn start(&mut self, now: Instant, wall_ms: u64) {
        self.peers.start(now);
        self.round(now, wall_ms);
    }

    /// Next thing for the driver to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Next command for a shard, in the order they must arrive: link and table changes ahead
    /// of the frames queued before them (see `outbox.rs`).
    pub fn poll_to_shard(&mut self) -> Option<ShardPost> {
        self.outbox.pop()
    }

    /// True when shard commands wait in the outbox.
    pub fn has_shard_posts(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// How many shard commands wait in the outbox.
    pub fn shard_posts(&self) -> usize {
        self.outbox.len()
    }

    /// True once after anything that may change the query views (peers, members, budgets)
    /// happened: the driver refreshes its snapshot of them only then (a flood of ignored datagrams stays
    /// cheap).
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// Counters.
    pub fn stats(&self) -> ControlStats {
        self.stats
    }

    /// The link cap's counters (`None`: no cap, `max_links = 0`).
    pub fn degree_stats(&self) -> Option<crate::degree::DegreeStats> {
        self.degree.as_ref().map(|d| d.stats())
    }

    /// This node's id.
    pub fn id(&self) -> PeerId {
        self.me
    }

    /// True once [`stop`](Self::stop) was called.
    pub fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// Scouting beacons sent so far (0 without scouting).
    pub fn beacons_sent(&self) -> u64 {
        self.beacons.as_ref().map_or(0, |b| b.sent())
    }

    /// The peer table (read only).
    pub fn peers(&self) -> &PeerManager<StdRng> {
        &self.peers
    }

    /// Changes `membership_flood_gap` of a running node (see
    /// [`MemberGraph::set_flood_gap`]): the simulation brings a 256-node full mesh up paced
    /// (every change flooded at once is N^4 frames there) and measures it with the default.
    pub fn set_membership_flood_gap(&mut self, gap: std::time::Duration) {
        self.membership.set_flood_gap(gap);
    }

    /// The membership (read only).
    pub fn membership(&self) -> &MemberGraph {
        &self.membership
    }

    /// Peers with an established link whose `PeerConnected` went out.
    pub fn connected_peers(&self) -> impl Iterator<Item = &PeerId> {
        self.peers
            .connected_peers()
            .filter(|p| !self.held.is_hidden(p))
    }

    /// Every peer in the table.
    pub fn known_peers(&self) -> impl Iterator<Item = &PeerId> {
        self.peers.known_peers()
    }

    /// Nodes reachable through the mesh.
    pub fn members(&self) -> impl Iterator<Item = &PeerId> {
        self.membership.members()
    }

    /// The links on shards whose peers are connected (as
    /// [`connected_peers`](Self::connected_peers) shows them), with their record suites.
    pub fn links(&self) -> impl Iterator<Item = LinkInfo> + '_ {
        self.placed
            .values()
            .filter(|p| !self.held.is_hidden(&p.peer))
            .map(|p| LinkInfo {
                peer: p.peer,
                suite: p.suite,
                extended_frames: p.capable,
            })
    }

    /// The outbound budgets of the links on shards.
    pub fn budgets(&self) -> impl Iterator<Item = &Arc<LinkBudget>> {
        self.placed.values().map(|p| &p.budget)
    }

    /// The outbound budget of `link`, while it is on a shard.
    pub fn link_budget(&self, link: LinkId) -> Option<&Arc<LinkBudget>> {
        self.placed.get(&link).map(|p| &p.budget)
    }

    /// Connections in their dial or handshake.
    pub fn connecting(&self) -> usize {
        self.conns.len()
    }

    /// Events held until the shards caught up.
    pub fn held_events(&self) -> usize {
        self.held.len()
    }

    /// When [`handle_timeout`](Self::handle_timeout) has work next.
    pub fn poll_timeout(&self) -> Instant {
        let mut t = self.membership.poll_timeout();
        if let Some(p) = self.peers.poll_timeout() {
            t = t.min(p);
        }
        if let Some(r) = &self.own_record {
            t = t.min(r.next);
        }
        if !self.stopping {
            t = t.min(self.topics.poll_timeout());
            if let Some(p) = self.topics.plan_timeout() {
                t = t.min(p);
            }
            if let Some(p) = self.paths_timeout() {
                t = t.min(p);
            }
            if let Some(s) = self.slow_timeout() {
                t = t.min(s);
            }
            if let Some(d) = self.degree.as_ref().and_then(|d| d.poll_timeout()) {
                t = t.min(d);
            }
        }
        if let Some(b) = &self.beacons {
            if !self.stopping {
                t = t.min(b.poll_timeout());
            }
        }
        for c in self.conns.values() {
            if let Conn::Handshaking(h) = c {
                t = t.min(h.deadline());
            }
        }
        t
    }

    /// Redials, prunes, expires membership, re-mints our identity record, sends a due beacon
    /// and fails handshakes past their deadline.
    pub fn handle_timeout(&mut self, now: Instant, wall_ms: u64) {
        self.peers.handle_timeout(now);
        self.membership.handle_timeout(wall_ms, now);
        self.refresh_own_record(now);
        self.beacon_due(now);
        if !self.stopping {
            if self.topics.announce_due(now) {
                // Observers see this node's links (RTT, extended frames) from its record.
                let links = self.link_reports();
                self.topics.report_links(links);
            }
            self.topics.handle_timeout(now);
        }
        let expired: Vec<LinkId> = self
            .conns
            .iter()
            .filter_map(|(l, c)| match c {
                Conn::Handshaking(h) if h.deadline() <= now => Some(*l),
                _ => None,
            })
            .collect();
        for link in expired {
            if let Some(Conn::Handshaking(mut h)) = self.conns.remove(&link) {
                let p = h.handle_timeout(now);
                self.conns.insert(link, Conn::Handshaking(h));
                self.progress(link, p, BytesMut::new(), now, wall_ms);
            }
        }
        self.degree_look(now);
        self.round(now, wall_ms);
    }

    /// A socket was accepted from `remote`. Returns its link id, or `None`: close it (the
    /// connection table is full, or the node is stopping).
    pub fn on_accepted(
        &mut self,
        remote: Option<IpAddr>,
        now: Instant,
        wall_ms: u64,
    ) -> Option<LinkId> {
        if self.stopping {
            return None;
        }
        let link = self.peers.on_accepted(remote, now);
        match link {
            None => self.warn(
                "connection table full, connection refused",
                format!("from {remote:?}"),
            ),
            Some(link) => self.begin_handshake(link, Role::Acceptor, remote, now),
        }
        // The table may have evicted a pending handshake for this one.
        if self.peers.has_output() {
            self.round(now, wall_ms);
        }
        link
    }

    /// The dial of `link` connected to `remote`.
    pub fn on_dial_connected(
        &mut self,
        link: LinkId,
        remote: Option<IpAddr>,
        now: Instant,
        wall_ms: u64,
    ) {
        match self.conns.get(&link) {
            Some(Conn::Dialing) => {
                self.conns.remove(&link);
                self.begin_handshake(link, Role::Dialer, remote, now);
            }
            // Cancelled while connecting (shutdown, race): nothing to say on it.
            _ => self.actions.push_back(Action::Close { link }),
        }
        self.round(now, wall_ms);
    }

    /// The dial of `link` failed (no address, refused, timed out).
    pub fn on_dial_failed(&mut self, link: LinkId, now: Instant, wall_ms: u64) {
        if matches!(self.conns.get(&link), Some(Conn::Dialing)) {
            self.conns.remove(&link);
        }
        self.peers.on_closed(link, now);
        self.round(now, wall_ms);
    }

    /// Bytes read on the handshaking socket of `link`.
    pub fn on_bytes(&mut self, link: LinkId, bytes: &[u8], now: Instant, wall_ms: u64) {
        let Some(Conn::Handshaking(h)) = self.conns.get_mut(&link) else {
            return;
        };
        let mut out = BytesMut::new();
        let p = h.on_bytes(bytes, now, &mut out);
        self.progress(link, p, out, now, wall_ms);
        self.round(now, wall_ms);
    }

    /// The handshaking socket of `link` reached its end or failed.
    pub fn on_eof(&mut self, link: LinkId, now: Instant, wall_ms: u64) {
        let Some(Conn::Handshaking(h)) = self.conns.get_mut(&link) else {
            return;
        };
        let p = h.on_eof();
        self.progress(link, p, BytesMut::new(), now, wall_ms);
        self.round(now, wall_ms);
    }

    /// Reading or writing the handshaking socket of `link` failed: it fails quietly.
    pub fn on_io_error(&mut self, link: LinkId, now: Instant, wall_ms: u64) {
        if !self.is_handshaking(link) {
            return;
        }
        self.progress(link, Progress::Failed(None), BytesMut::new(), now, wall_ms);
        self.round(now, wall_ms);
    }

    /// True while `link` is in its handshake (the driver keeps reading its socket).
    pub fn is_handshaking(&self, link: LinkId) -> bool {
        matches!(self.conns.get(&link), Some(Conn::Handshaking(_)))
    }

    /// The driver could not attach the socket of a [`ToShard::AddLink`]: the link is gone.
    pub fn on_handoff_failed(&mut self, link: LinkId, now: Instant, wall_ms: u64) {
        if let Some(p) = self.unplace(link) {
            p.budget.close();
        }
        self.peers.on_closed(link, now);
        self.round(now, wall_ms);
    }

    /// A report of a shard.
    pub fn on_shard_report(&mut self, report: ToControl, now: Instant, wall_ms: u64) {
        self.on_shard_reports(std::iter::once(report), now, wall_ms);
    }

    /// Reports of the shards that arrived together (the driver's inbox batch), applied in
    /// order, then **one** round for all of them.
    ///
    /// Why one round: a round ends with the reverse-path tables and the topic routes, which
    /// are rebuilt when the membership graph changed, at `O(deg * (V + E))` each (a full mesh
    /// of 60: ~3 500 edges walked from each of 59 neighbours, then sorted). A mesh booting
    /// changes the graph with nearly every Membership record, so a round per record rebuilt
    /// them per record: 60 processes starting together on two cores spent over half of the
    /// machine on these rebuilds (storm, `perf`, bench/notes/start60.md), every control
    /// thread fell seconds behind, the hand-over of new links to their shards came after the
    /// peer's heartbeat timeout, and each link so closed changed the graph again. Reports
    /// that wait together are applied as if they had arrived at once (they carry the same
    /// `now`): one rebuild from the graph they leave, which is the one every per-report
    /// rebuild but the last was superseded by anyway. A control thread that keeps up sees
    /// short batches and rebuilds as before; one that falls behind does less work per report
    /// the further it is behind, instead of more.
    pub fn on_shard_reports(
        &mut self,
        reports: impl IntoIterator<Item = ToControl>,
        now: Instant,
        wall_ms: u64,
    ) {
        for report in reports {
            self.apply_shard_report(report, now, wall_ms);
        }
        self.stats.report_rounds += 1;
        self.round(now, wall_ms);
    }

    /// One shard report, without the round that follows it.
    fn apply_shard_report(&mut self, report: ToControl, now: Instant, wall_ms: u64) {
        match report {
            ToControl::LinkClosed { link } => {
                self.unplace(link);
                self.peers.on_closed(link, now);
            }
            ToControl::MembershipIn { link, record } => {
                self.on_membership(link, record, None, wall_ms, now);
            }
            ToControl::SignedMembershipIn { link, record } => {
                let crate::wire::SignedMembership { record, signature } = *record;
                self.on_membership(link, record, Some(signature), wall_ms, now);
            }
            ToControl::IdentityIn { link, record } => self.on_identity_record(link, *record),
            ToControl::DigestIn { link, digest } => self.on_digest(link, &digest, wall_ms, now),
            // The round below looks at every link's slow mark (`slow`).
            ToControl::LinkSlow { .. } => {}
            ToControl::DiscoveryIn { link, frame } => self.on_discovery_in(link, *frame, now),
            ToControl::Synced(token) => {
                let mut out = Vec::new();
                self.held.on_synced(token, &mut out);
                self.actions.extend(out.into_iter().map(Action::Event));
            }
            ToControl::Stopped(shard) => {
                tracing::debug!(shard, "shard closed its links");
                self.stopped_shards += 1;
                if self.stopped_shards == self.shards {
                    self.actions.push_back(Action::Stopped);
                }
            }
        }
    }

    /// Says Goodbye to every peer, closes every link and stops dialing and scouting; every
    /// shard is told to stop ([`Action::Stopped`] follows when all did).
    pub fn stop(&mut self, now: Instant, wall_ms: u64) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.peers.shutdown();
        self.round(now, wall_ms);
        for s in 0..self.shards {
            self.post(s, ToShard::Stop);
        }
    }

    fn warn(&mut self, key: &'static str, detail: String) {
        self.actions.push_back(Action::Warn { key, detail });
    }
}
