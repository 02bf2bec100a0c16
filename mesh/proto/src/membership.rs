//! Mesh-wide membership by adjacency gossip (`mesh/proto/protocol/v1-wire.md`, "Membership").
//!
//! One state machine (records, the member set, floods and expiry) whose parts share its
//! tables, in four files: this one (records, relays, expiry), `graph` (the member set),
//! `pacing` (the own floods' credit) and `sync` (anti-entropy between Shoal nodes).
//!
//! **Owns:** the adjacency gossip and the member set. **Must not touch:** links or routing (the
//! control core acts on its events).
//!
//! Every node floods `(origin = self, version, direct neighbours)` when its neighbour set
//! changes (the first [`FLOOD_BURST`] changes at once, then at most once per [`FLOOD_GAP`]: a
//! burst of new links goes out as a few versions, not one per link) and every
//! `membership_interval`; a record is stored and relayed only if its version is newer than
//! the stored one. A record not refreshed within `membership_timeout` expires. With
//! anti-entropy on ([`MemberGraph::with_digest`], `sync`), the periodic flood and the relay
//! of a refresh go only to links that need them (multimaster peers and the Shoal nodes near
//! one), neighbours compare digests instead, and a reachable origin's record does not
//! expire. Versions are `max(previous + 1, wall-clock ms)`, so a restarted node outranks
//! the records of its previous run.
//!
//! Bounds on what a peer sends (the numbers in a record are the sender's word):
//! - A record listing more than `max_neighbours` nodes is refused and counted
//!   ([`RecordOutcome::TooManyNeighbours`]; default 1024, far below the wire's 65 535). A
//!   stored record keeps one list, sorted and deduplicated (relays re-send that list: the set
//!   is the record, the order carries nothing), so a record costs 16 bytes per neighbour
//!   once: at most `max_records × max_neighbours × 16` bytes in all.
//! - The own version never overflows: it rises saturating, and a record of this node's id
//!   is taken as a previous run's only when its version is at most
//!   [`OWN_VERSION_HORIZON_MS`] past the wall clock (a clock set back by up to 30 days). One
//!   further ahead (`u64::MAX` used to make `version + 1` overflow) is refused and counted
//!   ([`RecordOutcome::Implausible`]); the own version stays where it was, and the forged
//!   record, which can never be refreshed past `u64::MAX`, expires at the nodes that stored it.
//!   Other origins' versions are only compared, never incremented.
//! - The from-scratch recomputation of the member set (after an edge went) runs at most once
//!   per `recompute_gap` (default [`RECOMPUTE_GAP`]): the first at once, later ones within
//!   the gap folded into one at its end ([`MemberGraph::poll_timeout`] includes it), counted
//!   in [`MemberStats::recomputes_deferred`]. Until then the member set may still hold nodes
//!   that left; joins are applied at once as before.
//!
//! Signed records (identity mode, `mesh/proto/protocol/signed-records.md`): the control core
//! verifies a SignedMembership frame and hands the record in with its signature
//! ([`MemberGraph::on_signed_record`]); the signature is stored with the record, so relays and
//! the catch-up of a new neighbour carry it ([`MemberTransmit::signature`]). Verification is
//! not done here (this module holds no keys): [`MemberGraph::precheck`] lets the caller skip
//! it for a record that would be ignored anyway.
//!
//! Where and when this node relays a record it stored, and why not everywhere at once as the
//! protocol says: `relay`.
//!
//! The own record coming back with the current version and neighbours (a neighbour got it
//! over a faster path first and relayed it on) is an echo, ignored and counted; only a
//! record of this id that differs or is newer comes from a previous run.
//!
//! Members are the nodes reachable from self over the edges of the records. An edge between
//! two other nodes counts when every end whose record is known lists the other; the edges
//! of this node are exactly its own neighbours. The C++ library counts an edge when *either* end
//! lists it; that keeps a crashed node reachable through its own last record, which lists the
//! neighbours that already dropped it, until that record expires (up to `membership_timeout`
//! after its last refresh). Requiring both ends lets a node leave as soon as its neighbours'
//! new records arrive. While a record is unknown its edges count one-sided, so a joining
//! node is a member as soon as either end's record arrives. The rule is local: it changes no
//! byte on the wire and no relay decision.
//!
//! This runs on the control plane. Drive it with [`MemberGraph::neighbour_up`] /
//! [`MemberGraph::neighbour_down`] (from the peer table's Connected / Disconnected),
//! [`MemberGraph::on_record`] (Membership frames relayed from the shards) and
//! [`MemberGraph::handle_timeout`] at [`MemberGraph::poll_timeout`]; then drain
//! [`MemberGraph::poll_transmit`] and [`MemberGraph::poll_event`].

mod graph;
mod pacing;
mod relay;
mod sync;
mod transmit;

use graph::unlist;
pub use pacing::{FLOOD_BURST, FLOOD_GAP};
pub use relay::RELAY_GAP;

pub use sync::{DigestError, SyncStats, MAX_PUSH};
pub use transmit::{Dest, MemberTransmit};

use super::LinkId;
use crate::wire::{Membership as Record, RecordSignature};
use crate::PeerId;
use ahash::{AHashMap, AHashSet};
use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

/// A change of the member set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberEvent {
    /// The node became reachable.
    MemberJoined(PeerId),
    /// The node is no longer reachable (cut off, or its records expired).
    MemberLeft(PeerId),
}

/// What [`MemberGraph::on_record`] did with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordOutcome {
    /// Newer than what was stored: stored and relayed.
    Stored,
    /// Not newer than the stored version (or the own current record coming back): ignored.
    Stale,
    /// A record of this node from a previous run with a higher version: the own version
    /// jumped past it and the own record was re-flooded.
    OwnOutranked,
    /// The store is at `max_membership_records`: ignored and counted.
    StoreFull,
    /// Origin all-zero, or a signed record whose list is not strictly ascending: ignored.
    Invalid,
    /// The record lists more than `max_neighbours` nodes: refused and counted.
    TooManyNeighbours,
    /// A record of this node's id with a version too far past the wall clock to be a
    /// previous run's (see the module docs): refused and counted.
    Implausible,
}

/// Counters of a [`MemberGraph`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemberStats {
    /// Records stored (new or newer).
    pub stored: u64,
    /// Records ignored as not newer (own current record echoed back included).
    pub stale: u64,
    /// The own current record coming back over another path (part of `stale`).
    pub echoes: u64,
    /// Records ignored because the store was full.
    pub rejected_full: u64,
    /// Records that expired.
    pub expired: u64,
    /// Own-record floods sent.
    pub own_floods: u64,
    /// Relays and catch-up sends skipped because the neighbour already had the record from
    /// its origin (see the module docs).
    pub relays_pruned: u64,
    /// Relays left to the lowest-id node that the origin lists and that is linked to the
    /// neighbour (part of `relays_pruned`; see the module docs).
    pub relays_deferred: u64,
    /// Versions whose relay toward the quiet digest links waited for the relay gap; the
    /// newest of those pending at the gap's end is relayed then (`relay`).
    pub relays_paced: u64,
    /// Member-set recomputations (one per change of the known graph).
    pub recomputes: u64,
    /// Records refused for listing more than `max_neighbours` nodes.
    pub rejected_oversize: u64,
    /// Records of this node's id refused for a version too far past the wall clock.
    pub implausible_versions: u64,
    /// From-scratch recomputations folded into a later one by the rate limit.
    pub recomputes_deferred: u64,
    /// Neighbour changes whose own flood was folded into a later one (the flood gap).
    pub floods_deferred: u64,
    /// The anti-entropy's counters (`sync`).
    pub sync: SyncStats,
}

#[derive(Debug)]
struct Stored {
    version: u64,
    /// Sorted and deduplicated: looked up, relayed and caught up as it is (a signed record's
    /// list arrives that way, so it is exactly what was signed).
    sorted: Vec<PeerId>,
    /// The origin's signature, when the record came signed.
    sig: Option<RecordSignature>,
    refreshed: Instant,
    /// [`sync::record_hash`] of the origin and `sorted`.
    hash: u64,
    /// When a version of it was last relayed toward the quiet links (`relay`).
    relayed_at: Option<Instant>,
    /// A newer version waits for the relay gap toward the quiet links.
    relay_pending: bool,
    /// The link the stored version came on (a paced relay skips it).
    relay_from: LinkId,
}

impl Stored {
    fn lists(&self, p: &PeerId) -> bool {
        self.sorted.binary_search(p).is_ok()
    }
}

/// The membership state machine of one node.
#[derive(Debug)]
pub struct MemberGraph {
    me: PeerId,
    version: u64,
    neighbours: Vec<PeerId>,
    /// Link of each direct neighbour (from `neighbour_up`).
    links: AHashMap<PeerId, LinkId>,
    records: AHashMap<PeerId, Stored>,
    /// Origins whose stored record lists the key: the edges of a node whose own record is
    /// not (yet) known.
    listed_by: AHashMap<PeerId, Vec<PeerId>>,
    members: AHashSet<PeerId>,
    interval: Duration,
    timeout: Duration,
    max_records: usize,
    next_flood: Instant,
    /// Never later than the earliest record expiry (refreshes only push expiries later, so
    /// it is lowered on insert and made exact by the expiry scan).
    next_expiry: Option<Instant>,
    scratch: Vec<PeerId>,
    link_scratch: Vec<LinkId>,
    transmits: VecDeque<MemberTransmit>,
    events: VecDeque<MemberEvent>,
    stats: MemberStats,
    /// Rises whenever the union graph's edges may have changed (see [`MemberGraph::shape`]).
    shape: u64,
    max_neighbours: usize,
    recompute_gap: Duration,
    last_recompute: Option<Instant>,
    /// A recomputation the rate limit postponed, due then.
    recompute_due: Option<Instant>,
    flood_gap: Duration,
    /// Least time between two relays of one origin's record toward quiet links (`relay`).
    relay_gap: Duration,
    /// Paced relays, by due time (at most one pending per stored record; an entry whose
    /// record went or was flushed is skipped when due).
    relay_due: BTreeSet<(Instant, PeerId)>,
    /// The origin of the paced relays' grid (creation).
    relay_epoch: Instant,
    /// Change-driven own floods that may go out at once (at most [`FLOOD_BURST`]; one more
    /// per flood gap since `credit_at`).
    flood_credit: u32,
    credit_at: Instant,
    /// An own flood the flood gap postponed, due then.
    flood_due: Option<Instant>,
    /// Anti-entropy between digest links (`None`: off, every link floods as in mesh-v1).
    sync: Option<sync::Sync>,
}

/// The wire `count` is a u16.
const MAX_NEIGHBOURS: usize = u16::MAX as usize;

/// How far past the wall clock (ms) a record of this node's id may be and still be taken as
/// a previous run's, whose version the own one must outrank: a clock set back by 30 days.
pub const OWN_VERSION_HORIZON_MS: u64 = 30 * 24 * 3600 * 1000;

/// The default minimum time between two from-scratch recomputations of the member set.
pub const RECOMPUTE_GAP: Duration = Duration::from_millis(50);

/// The default ceiling of a record's neighbour list.
pub const DEFAULT_MAX_NEIGHBOURS: usize = 1024;

impl MemberGraph {
    /// State for node `me`; `wall_ms` is the wall clock in ms since the Unix epoch (it seeds
    /// the version). The first periodic flood is due one interval after `now`.
    pub fn new(
        me: PeerId,
        interval: Duration,
        timeout: Duration,
        max_records: usize,
        wall_ms: u64,
        now: Instant,
    ) -> MemberGraph {
        MemberGraph {
            me,
            version: wall_ms,
            neighbours: Vec::new(),
            links: AHashMap::new(),
            records: AHashMap::new(),
            listed_by: AHashMap::new(),
            members: AHashSet::new(),
            interval,
            timeout,
            max_records: max_records.max(1),
            next_flood: now + interval,
            next_expiry: None,
            scratch: Vec::new(),
            link_scratch: Vec::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: MemberStats::default(),
            shape: 0,
            max_neighbours: DEFAULT_MAX_NEIGHBOURS,
            recompute_gap: RECOMPUTE_GAP,
            last_recompute: None,
            recompute_due: None,
            flood_gap: FLOOD_GAP,
            relay_gap: relay::RELAY_GAP,
            relay_due: BTreeSet::new(),
            relay_epoch: now,
            flood_credit: FLOOD_BURST,
            credit_at: now,
            flood_due: None,
            sync: None,
        }
    }

    /// Sets the ceiling of a record's neighbour list (at most the wire's 65 535) and the
    /// minimum time between two from-scratch recomputations (see the module docs).
    pub fn with_limits(mut self, max_neighbours: usize, recompute_gap: Duration) -> MemberGraph {
        self.max_neighbours = max_neighbours.clamp(1, MAX_NEIGHBOURS);
        self.recompute_gap = recompute_gap;
        self
    }

    /// A number that rises whenever the graph's edges may have changed: this node's
    /// neighbours, a record that is new, lists other neighbours or expired. A periodic
    /// refresh with the same list leaves it alone, so what is computed from the graph (the
    /// topics' routes) is recomputed only when the graph changed.
    pub fn shape(&self) -> u64 {
        self.shape
    }

    /// Current members (reachable nodes, self excluded).
    pub fn members(&self) -> impl Iterator<Item = &PeerId> {
        self.members.iter()
    }

    /// True if `peer` is currently a member.
    pub fn is_member(&self, peer: &PeerId) -> bool {
        self.members.contains(peer)
    }

    /// The own record's current version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The own direct neighbours, sorted.
    pub fn neighbours(&self) -> &[PeerId] {
        &self.neighbours
    }

    /// The known graph as adjacency lists: this node's own neighbours, then every stored
    /// record (origin → its neighbours, sorted and deduplicated), in no particular order.
    /// Raw: an edge listed by one end only is included as that end lists it, and lists may
    /// name unknown nodes; consumers apply their own edge rule (routes: `topics::tree`).
    pub fn adjacency(&self) -> impl Iterator<Item = (&PeerId, &[PeerId])> {
        std::iter::once((&self.me, self.neighbours.as_slice())).chain(
            self.records
                .iter()
                .map(|(origin, r)| (origin, r.sorted.as_slice())),
        )
    }

    /// Counters.
    pub fn stats(&self) -> MemberStats {
        self.stats
    }

    /// True when the stored record of `origin` came signed.
    pub fn is_signed(&self, origin: &PeerId) -> bool {
        self.records.get(origin).is_some_and(|r| r.sig.is_some())
    }

    /// True when [`on_record`](Self::on_record) would ignore `rec` as not newer than what is
    /// held (the own current record included): a caller checks this before paying for a
    /// signature.
    pub fn is_stale(&self, rec: &Record) -> bool {
        if rec.origin == self.me {
            if rec.version != self.version {
                return rec.version < self.version;
            }
            let mut ns = rec.neighbours.clone();
            ns.sort_unstable();
            ns.dedup();
            return ns == self.neighbours;
        }
        self.records
            .get(&rec.origin)
            .is_some_and(|s| rec.version <= s.version)
    }

    /// The own record as it would be flooded now.
    pub fn own_record(&self) -> Record {
        Record {
            origin: self.me,
            version: self.version,
            neighbours: self.neighbours.clone(),
        }
    }

    /// A link to `peer` was established on `link`: flood the new own record and send the
    /// stored records of others to the new neighbour so it learns the mesh without waiting
    /// for the next periodic floods (except those it already has from their origin).
    pub fn neighbour_up(&mut self, peer: PeerId, link: LinkId, wall_ms: u64, now: Instant) {
        let mut added = false;
        if let Err(pos) = self.neighbours.binary_search(&peer) {
            if self.neighbours.len() < MAX_NEIGHBOURS && peer != self.me && !peer.is_zero() {
                self.neighbours.insert(pos, peer);
                added = true;
                self.shape += 1;
            }
        }
        self.links.insert(peer, link);
        self.flood_changed(wall_ms, now);
        for (origin, r) in &self.records {
            if *origin == peer || r.lists(&peer) {
                self.stats.relays_pruned += 1;
                continue;
            }
            self.transmits.push_back(MemberTransmit {
                dest: Dest::Link(link),
                record: Record {
                    origin: *origin,
                    version: r.version,
                    neighbours: r.sorted.clone(),
                },
                signature: r.sig,
            });
        }
        // One more edge at self: the member set can only grow.
        if added && !self.members.contains(&peer) {
            self.expand(peer);
        }
    }

    /// The link to `peer` is gone: flood the new own record.
    pub fn neighbour_down(&mut self, peer: &PeerId, wall_ms: u64, now: Instant) {
        if let Some(link) = self.links.remove(peer) {
            if let Some(s) = self.sync.as_mut() {
                s.links.remove(&link);
            }
        }
        if let Ok(pos) = self.neighbours.binary_search(peer) {
            self.neighbours.remove(pos);
            self.shape += 1;
            self.flood_changed(wall_ms, now);
            self.recompute_limited(now);
        }
    }

    /// Stops listing `peer` in the own record while its link stays up (`listed` false), or
    /// lists it again (`true`; only while its link is up, as [`neighbour_up`] left it): the
    /// control core withdraws a neighbour whose link it declared slow, so that no relay
    /// counts on that link (`control::slow`). Floods the changed record; true when the list
    /// changed.
    ///
    /// [`neighbour_up`]: Self::neighbour_up
    pub fn set_listed(&mut self, peer: &PeerId, listed: bool, wall_ms: u64, now: Instant) -> bool {
        match (listed, self.neighbours.binary_search(peer)) {
            (false, Ok(pos)) => {
                self.neighbours.remove(pos);
                self.shape += 1;
                self.flood_changed(wall_ms, now);
                self.recompute_limited(now);
                true
            }
            (true, Err(pos))
                if self.links.contains_key(peer) && self.neighbours.len() < MAX_NEIGHBOURS =>
            {
                self.neighbours.insert(pos, *peer);
                self.shape += 1;
                self.flood_changed(wall_ms, now);
                if !self.members.contains(peer) {
                    self.expand(*peer);
                }
                true
            }
            _ => false,
        }
    }

    /// An unsigned Membership frame (type 6) arrived on `from`.
    pub fn on_record(
        &mut self,
        from: LinkId,
        rec: &Record,
        wall_ms: u64,
        now: Instant,
    ) -> RecordOutcome {
        self.on_signed_record(from, rec, None, wall_ms, now)
    }

    /// A Membership record arrived on `from`, with its origin's signature when it came in a
    /// SignedMembership frame (verified by the caller; stored and relayed with the record).
    pub fn on_signed_record(
        &mut self,
        from: LinkId,
        rec: &Record,
        sig: Option<RecordSignature>,
        wall_ms: u64,
        now: Instant,
    ) -> RecordOutcome {
        if let Some(ignored) = self.precheck(rec, sig.is_some(), wall_ms) {
            return ignored;
        }
        if rec.origin == self.me {
            // Our previous incarnation is still remembered with a version at least ours
            // (the wall clock went back): jump past it so our record wins everywhere.
            self.version = rec.version;
            self.flood_own(wall_ms, now, Dest::All);
            return RecordOutcome::OwnOutranked;
        }
        let mut sorted = std::mem::take(&mut self.scratch);
        sorted.clear();
        sorted.extend_from_slice(&rec.neighbours);
        sorted.sort_unstable();
        sorted.dedup();
        // `sorted` ends up holding the previous list (None: the origin was unknown).
        let previous = match self.records.get_mut(&rec.origin) {
            Some(s) => {
                s.version = rec.version;
                s.sig = sig;
                s.refreshed = now;
                std::mem::swap(&mut s.sorted, &mut sorted);
                if s.sorted != sorted {
                    s.hash = sync::record_hash(&rec.origin, &s.sorted);
                }
                Some(sorted)
            }
            None => {
                if self.records.len() >= self.max_records {
                    self.scratch = sorted;
                    self.stats.rejected_full += 1;
                    tracing::warn!(origin = %rec.origin, max = self.max_records, "membership store full, record ignored");
                    return RecordOutcome::StoreFull;
                }
                let hash = sync::record_hash(&rec.origin, &sorted);
                self.records.insert(
                    rec.origin,
                    Stored {
                        version: rec.version,
                        sorted,
                        sig,
                        refreshed: now,
                        hash,
                        relayed_at: None,
                        relay_pending: false,
                        relay_from: from,
                    },
                );
                let expiry = now + self.timeout;
                self.next_expiry = Some(self.next_expiry.map_or(expiry, |t| t.min(expiry)));
                None
            }
        };
        self.stats.stored += 1;
        let changed = previous.as_deref() != self.records.get(&rec.origin).map(|r| &r.sorted[..]);
        if changed {
            self.shape += 1;
        }
        self.relay(from, rec.origin, !changed, now);
        self.record_changed(rec.origin, previous.as_deref(), now);
        if let Some(v) = previous {
            self.scratch = v;
        }
        RecordOutcome::Stored
    }

    /// What [`on_signed_record`](Self::on_signed_record) would do with `rec` short of storing
    /// it or outranking the own record: `Some(outcome)` (counted) when it is ignored as
    /// invalid, oversize, stale, an echo or implausible; `None` when it would be applied (or
    /// meet a full store). A caller checks this before paying for a signature (`signed`: it
    /// came with one).
    pub fn precheck(&mut self, rec: &Record, signed: bool, wall_ms: u64) -> Option<RecordOutcome> {
        if rec.origin.is_zero() {
            return Some(RecordOutcome::Invalid);
        }
        if rec.neighbours.len() > self.max_neighbours {
            self.stats.rejected_oversize += 1;
            tracing::debug!(origin = %rec.origin, count = rec.neighbours.len(), max = self.max_neighbours, "membership record lists too many neighbours, refused");
            return Some(RecordOutcome::TooManyNeighbours);
        }
        if signed && !rec.neighbours.windows(2).all(|w| w[0] < w[1]) {
            // Stored sorted, it would no longer be what was signed.
            return Some(RecordOutcome::Invalid);
        }
        if self.is_stale(rec) {
            // An echo of the own current record over a path that beat the direct one is not
            // a previous run: answering it with a new version made every echo a new flood.
            if rec.origin == self.me && rec.version == self.version {
                self.stats.echoes += 1;
            }
            self.stats.stale += 1;
            return Some(RecordOutcome::Stale);
        }
        if rec.origin == self.me && rec.version > wall_ms.saturating_add(OWN_VERSION_HORIZON_MS) {
            // No previous run of ours minted that: jumping to it would leave no version to
            // outrank it with (`u64::MAX` overflowed `version + 1`).
            self.stats.implausible_versions += 1;
            tracing::debug!(
                version = rec.version,
                wall_ms,
                "own membership record with an implausible version, refused"
            );
            return Some(RecordOutcome::Implausible);
        }
        None
    }

    /// The next instant [`handle_timeout`](Self::handle_timeout) has work: the periodic flood,
    /// a postponed recomputation, a paced relay or (at the latest) the earliest record
    /// expiry. O(log n).
    pub fn poll_timeout(&self) -> Instant {
        [
            self.next_expiry,
            self.recompute_due,
            self.flood_due,
            self.next_relay_due(),
        ]
        .into_iter()
        .flatten()
        .fold(self.next_flood, Instant::min)
    }

    /// Runs the periodic flood, the paced relays due, a postponed recomputation and expires
    /// old records.
    pub fn handle_timeout(&mut self, wall_ms: u64, now: Instant) {
        if self.flood_due.is_some_and(|t| now >= t) {
            self.refill_credit(now);
            self.flood_credit = self.flood_credit.saturating_sub(1);
            self.flood_own(wall_ms, now, Dest::All);
        } else if now >= self.next_flood {
            self.periodic(wall_ms, now);
        }
        self.relay_paced(now);
        if self.recompute_due.is_some_and(|t| now >= t) {
            self.recompute_due = None;
            self.last_recompute = Some(now);
            self.recompute();
        }
        if self.next_expiry.is_none_or(|t| now < t) {
            return;
        }
        let timeout = self.timeout;
        let before = self.records.len();
        let listed_by = &mut self.listed_by;
        // With anti-entropy, a reachable origin's record is kept (its origin floods only on
        // change); its expiry counts from the last scan that found it reachable.
        let members = self.sync.as_ref().map(|_| &self.members);
        self.records.retain(|origin, r| {
            if members.is_some_and(|m| m.contains(origin)) {
                r.refreshed = now;
                return true;
            }
            let keep = now.saturating_duration_since(r.refreshed) < timeout;
            if !keep {
                tracing::debug!(%origin, "membership record expired");
                for x in &r.sorted {
                    unlist(listed_by, x, origin);
                }
            }
            keep
        });
        self.next_expiry = self.records.values().map(|r| r.refreshed + timeout).min();
        let expired = before - self.records.len();
        if expired > 0 {
            self.stats.expired += expired as u64;
            self.shape += 1;
            self.recompute_limited(now);
        }
    }

    /// Next Membership frame to send.
    pub fn poll_transmit(&mut self) -> Option<MemberTransmit> {
        self.transmits.pop_front()
    }

    /// Next member-set change.
    pub fn poll_event(&mut self) -> Option<MemberEvent> {
        self.events.pop_front()
    }

    fn flood_own(&mut self, wall_ms: u64, now: Instant, dest: Dest) {
        self.version = self.version.saturating_add(1).max(wall_ms);
        self.next_flood = now + self.interval;
        self.flood_due = None;
        self.stats.own_floods += 1;
        let record = self.own_record();
        self.transmits.push_back(MemberTransmit {
            dest,
            record,
            signature: None,
        });
    }
}

#[cfg(test)]
mod tests;
