//! The control plane's peer table: who to dial, when to redial, which of two connections to the
//! same peer survives, and when a peer is Lost (`mesh/proto/protocol/v1-wire.md`, "A
//! connection's life").
//!
//! **Owns:** the peer table, dialing, backoff and dial races. **Must not touch:** sockets or
//! handshakes: it names links, the control core runs them.
//!
//! Files: one state machine, `PeerManager`, over private tables (peers, connections, dial
//! targets) that every input updates together: its inputs and the table here, what it dials
//! and when in `peers/dialing.rs`, the verdict on a second connection to a linked peer (dial
//! races, late claims) in `peers/races.rs`, the bounded degree's hooks in `peers/cap.rs`. Its
//! tests are in `tests/proto_peers.rs` and, for races and late claims, `tests/proto_peer_races.rs`.
//!
//! Three sources of dial targets converge on one handshake and dial-race path:
//! - **discovered** peers (validated announces): dialed at the announced address at once, and
//!   redialed with backoff only while still announced; Lost (pruned) after `peer_lost_timeout`
//!   without announce or link. With a link cap (`max_links` above zero) they are only
//!   remembered, and dialed when the control core asks (`peers/cap.rs`, [`crate::degree`]);
//! - **static** endpoints: dialed by endpoint (the driver re-resolves DNS on every attempt),
//!   maintained forever whatever id answers (a restarted peer with a new id is simply the next
//!   id behind the endpoint), never Lost;
//! - **seed** endpoints: dialed at start and redialed only while this node has no established
//!   link.
//!
//! # Driving it
//!
//! Inputs: [`start`](PeerManager::start); [`on_announce`](PeerManager::on_announce) for every
//! accepted announce; [`on_accepted`](PeerManager::on_accepted) for an accepted socket (it
//! returns the new link's id, or `None` when the connection ceiling is reached: close the
//! socket; it may also evict an older connection still in its handshake with a `Close`); [`on_handshake`](PeerManager::on_handshake) when a link's handshake completes
//! ([`super::link::LinkEvent::Established`]); [`on_closed`](PeerManager::on_closed) whenever a
//! link or a dial ends for any reason (connect error, handshake failure, heartbeat timeout,
//! Goodbye, EOF); [`handle_timeout`](PeerManager::handle_timeout) at
//! [`poll_timeout`](PeerManager::poll_timeout); [`shutdown`](PeerManager::shutdown).
//!
//! Outputs, drained with [`poll_action`](PeerManager::poll_action) in order:
//! [`PeerAction::Dial`] (open a socket, create a dialer [`super::link::Link`] with that id),
//! [`PeerAction::Install`] / [`PeerAction::Uninstall`] (update every shard's routing table),
//! [`PeerAction::Close`] (send Goodbye if asked, then close), [`PeerAction::Retire`] (a
//! dial race's loser: kept open, read as the winner, until the peer resolved the race too).
//! Execute them in order: an `Install` of a dial-race winner precedes the `Retire` of the
//! loser, so the loser's end is not a disconnect, and what the peer still sends on it finds
//! the winner installed. Events for the application and for [`super::MemberGraph`] come from
//! [`poll_event`](PeerManager::poll_event).
//!
//! # Dial races and late claims
//!
//! Two connections to one peer either race (both ends dialed before either saw the other's
//! link: one is kept by multimaster's rule, the loser retired) or the later one is a late
//! claim on a live link (refused): see `peers/races.rs`.
//!
//! # Strangers and floods
//!
//! An announce costs its sender one datagram; acting on it costs this node a table entry and
//! an outbound connection to an address the datagram chose. So:
//! - a peer that was never linked is admitted from an announce, and (re)dialed, only within
//!   the [`NewPeerLimiter`] budget (`new_peer_rate` node-wide, `new_peer_rate_per_source` per
//!   source address); over budget, a new peer's announce is ignored (`announces_rate_limited`)
//!   and a known one's dial postponed (`dials_rate_limited`). A new peer that then completes a
//!   handshake from that address under its announced id gives its source the token back
//!   (`budget_refunds`): a host's real nodes do not wait for each other. Peers that were linked once,
//!   static and seed peers are never limited;
//! - when the table is full, the oldest entry that was only announced (never linked, not
//!   static) gives way to a new peer (`peers_evicted`, with a `Lost` event). A completed
//!   handshake is refused (`peer_table_full`) only when every entry is linked or static;
//! - inbound connections still in their handshake are at most `max_pending_handshakes`; a new
//!   one beyond that (or beyond the connection table) evicts the oldest pending connection of
//!   the source address holding the most of them (`handshakes_evicted`). An idle socket only
//!   waits for the handshake timeout, a peer completes its Hello within a round trip: eviction
//!   lets the peer in, where refusing the newcomer would lock it out for as long as the idle
//!   sockets are renewed.
//!
//! # Event pairing
//!
//! Per peer record, `PeerDiscovered` comes once (at its first announce) and `Lost` at most
//! once, when the record is pruned or evicted, never while connected; each `Connected` is
//! matched by exactly one `Disconnected` unless the node stops first, and a `Disconnected`
//! never comes without its `Connected`. A peer announced before it connects is discovered
//! before it is connected; one that connects first is discovered when its first announce
//! arrives.

mod cap;
mod dialing;
mod races;

use super::admission::NewPeerLimiter;
use super::{backoff_with_jitter, LinkId};
use crate::config::MeshConfig;
use crate::PeerId;
use ahash::AHashMap;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Where to dial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DialTarget {
    /// A known address (a discovered peer's dial-back address).
    Addr(SocketAddr),
    /// A `host:port` endpoint to resolve now (static and seed peers).
    Endpoint(String),
}

/// Something the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerAction {
    /// Open a TCP connection to `target` and run a dialer link named `link` on it.
    Dial {
        /// The id of the new connection.
        link: LinkId,
        /// Where to connect.
        target: DialTarget,
    },
    /// Route `peer` over `link` on every shard (replacing any previous link).
    Install {
        /// The neighbour.
        peer: PeerId,
        /// Its established link.
        link: LinkId,
    },
    /// Stop routing `peer` over `link`.
    Uninstall {
        /// The neighbour.
        peer: PeerId,
        /// The link that went away.
        link: LinkId,
    },
    /// Close `link`, sending Goodbye first when `goodbye` (shutdown, a refused claim).
    Close {
        /// The link to close.
        link: LinkId,
        /// Whether to send Goodbye before closing.
        goodbye: bool,
    },
    /// Retire `link`, a dial race's loser to `peer`: the peer may send on it until it resolves
    /// the race too, so it stays open, what comes on it counting as come on `peer`'s installed
    /// link (the winner), and closes when the peer closes it or sends on the winner (see
    /// `peers/races.rs`).
    Retire {
        /// The neighbour both links lead to.
        peer: PeerId,
        /// The losing link.
        link: LinkId,
    },
}

/// A change the application (and membership) cares about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerEvent {
    /// A peer was announced for the first time (or again after being Lost).
    PeerDiscovered {
        /// The peer.
        peer: PeerId,
        /// Its dial-back address.
        addr: SocketAddr,
    },
    /// The first link to the peer is established.
    Connected {
        /// The peer.
        peer: PeerId,
        /// The link now routing to it.
        link: LinkId,
    },
    /// The peer's established link went away (a dial-race switch is not a disconnect).
    Disconnected {
        /// The peer.
        peer: PeerId,
    },
    /// The peer has not been announced nor connected for `peer_lost_timeout`, or it was only
    /// announced and gave way to another peer in a full table: forgotten.
    Lost {
        /// The peer.
        peer: PeerId,
    },
}

/// Lifecycle state of a peer record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Known from an announce, never connected yet.
    Discovered,
    /// A dial is in flight.
    Connecting,
    /// A link is established.
    Connected,
    /// The link dropped; a reconnect may be scheduled.
    Disconnected,
}

/// Counters of a [`PeerManager`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// Dials issued.
    pub dials: u64,
    /// Dials or handshakes that ended before a link was established.
    pub dial_failures: u64,
    /// Dial races resolved (one of two links to a peer closed).
    pub races_resolved: u64,
    /// Handshakes that turned out to reach this node itself.
    pub self_connections: u64,
    /// Announces or handshakes refused because the peer table was full of linked or static
    /// peers.
    pub peer_table_full: u64,
    /// Accepts or dials refused because the connection table was full.
    pub conn_table_full: u64,
    /// Peers declared Lost.
    pub lost: u64,
    /// Announces of unknown peers ignored: over the new-peer budget.
    pub announces_rate_limited: u64,
    /// Dials to known but never-linked peers postponed: over the new-peer budget.
    pub dials_rate_limited: u64,
    /// New peers admitted on a source's budget that then completed a handshake from that
    /// address under their announced id: the source's token was given back (see
    /// [`NewPeerLimiter::refund`]).
    pub budget_refunds: u64,
    /// Beacon-only peers evicted from a full table for a new peer.
    pub peers_evicted: u64,
    /// Inbound connections closed in their handshake to make room for a newer one.
    pub handshakes_evicted: u64,
    /// Connections refused (Goodbye) because they claimed the id of a peer whose link was
    /// established longer than the race window before they began: a late claim never
    /// displaces a live link (see the module docs).
    pub claims_refused: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Discovered(PeerId),
    Static(usize),
    Seed(usize),
    Inbound,
}

#[derive(Debug)]
struct Conn {
    origin: Origin,
    /// The peer behind it, once its handshake completed.
    peer: Option<PeerId>,
    /// Inbound: the remote address (eviction picks the busiest source).
    remote: Option<IpAddr>,
    /// When it was accepted or dialed (a dial race or a late claim).
    started: Instant,
}

impl Conn {
    fn outbound(&self) -> bool {
        self.origin != Origin::Inbound
    }
}

#[derive(Debug)]
struct Peer {
    state: PeerState,
    addr: Option<SocketAddr>,
    last_announce: Option<Instant>,
    last_seen: Instant,
    link: Option<LinkId>,
    /// When `link` went from none to some (a switch in a dial race keeps it).
    linked_at: Instant,
    dialing: Option<LinkId>,
    attempt: u32,
    reconnect_at: Option<Instant>,
    is_static: bool,
    /// A link to it was established at least once (it is no stranger).
    ever_linked: bool,
    /// The source address whose new-peer budget its admission or a dial took, until a
    /// handshake from there proves it real (and refunds the source).
    charged: Option<IpAddr>,
    /// A `PeerDiscovered` was emitted for this record (a `Lost` may follow).
    discovered: bool,
}

#[derive(Debug)]
struct Target {
    endpoint: String,
    peer: Option<PeerId>,
    pending: Option<LinkId>,
    attempt: u32,
    next_dial: Instant,
}

/// The peer table and dial logic of one node.
#[derive(Debug)]
pub struct PeerManager<R> {
    me: PeerId,
    rng: R,
    peer_lost_timeout: Duration,
    reconnect_base: Duration,
    reconnect_max: Duration,
    max_peers: usize,
    max_conns: usize,
    max_pending: usize,
    race_window: Duration,
    limiter: NewPeerLimiter,
    /// Peers admitted from announces, oldest first (eviction candidates; entries that have
    /// since been linked or removed are skipped lazily).
    announce_only: VecDeque<PeerId>,
    /// Inbound connections in their handshake, oldest first.
    pending_inbound: VecDeque<LinkId>,
    next_link: u64,
    peers: AHashMap<PeerId, Peer>,
    conns: AHashMap<LinkId, Conn>,
    statics: Vec<Target>,
    seeds: Vec<Target>,
    established: usize,
    stopped: bool,
    /// A cap on links is set (`max_links`): discovered peers are dialed only when asked
    /// (`cap.rs`).
    hold_dials: bool,
    actions: VecDeque<PeerAction>,
    events: VecDeque<PeerEvent>,
    stats: PeerStats,
}

impl<R: rand::RngCore> PeerManager<R> {
    /// A peer table for node `me` with the static and seed endpoints and limits of `cfg`.
    /// `rng` supplies the reconnect jitter.
    pub fn new(me: PeerId, cfg: &MeshConfig, mut rng: R, now: Instant) -> PeerManager<R> {
        let target = |endpoint: &String| Target {
            endpoint: endpoint.clone(),
            peer: None,
            pending: None,
            attempt: 0,
            next_dial: now,
        };
        let seeds = [
            rng.next_u64(),
            rng.next_u64(),
            rng.next_u64(),
            rng.next_u64(),
        ];
        PeerManager {
            me,
            rng,
            peer_lost_timeout: cfg.peer_lost_timeout,
            reconnect_base: cfg.reconnect_base,
            reconnect_max: cfg.reconnect_max,
            max_peers: cfg.max_peers.max(1),
            max_conns: 2 * cfg.max_peers.max(1) + cfg.static_peers.len() + cfg.seed_peers.len(),
            max_pending: cfg.max_pending_handshakes.max(1),
            race_window: 2 * cfg.handshake_timeout,
            limiter: NewPeerLimiter::new(
                cfg.new_peer_rate,
                cfg.new_peer_rate_per_source,
                seeds,
                now,
            ),
            announce_only: VecDeque::new(),
            pending_inbound: VecDeque::new(),
            next_link: 1,
            peers: AHashMap::new(),
            conns: AHashMap::new(),
            statics: cfg.static_peers.iter().map(target).collect(),
            seeds: cfg.seed_peers.iter().map(target).collect(),
            established: 0,
            stopped: false,
            hold_dials: cfg.max_links > 0,
            actions: VecDeque::new(),
            events: VecDeque::new(),
            stats: PeerStats::default(),
        }
    }

    /// Dials every static and seed endpoint.
    pub fn start(&mut self, now: Instant) {
        self.maintain_endpoints(now);
    }

    /// Next action for the driver.
    pub fn poll_action(&mut self) -> Option<PeerAction> {
        self.actions.pop_front()
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<PeerEvent> {
        self.events.pop_front()
    }

    /// True when actions or events wait to be polled (a driver may skip its round when
    /// nothing came out of an input, e.g. a rate-limited announce).
    pub fn has_output(&self) -> bool {
        !self.actions.is_empty() || !self.events.is_empty()
    }

    /// The dial-back address a peer announced (scouting), if it is in the table with one.
    pub fn peer_addr(&self, peer: &PeerId) -> Option<SocketAddr> {
        self.peers.get(peer).and_then(|p| p.addr)
    }

    /// Counters.
    pub fn stats(&self) -> PeerStats {
        self.stats
    }

    /// The state of a known peer.
    pub fn peer_state(&self, peer: &PeerId) -> Option<PeerState> {
        self.peers.get(peer).map(|p| p.state)
    }

    /// The established link to `peer`.
    pub fn link_of(&self, peer: &PeerId) -> Option<LinkId> {
        self.peers.get(peer).and_then(|p| p.link)
    }

    /// Peers with an established link.
    pub fn connected_peers(&self) -> impl Iterator<Item = &PeerId> {
        self.peers
            .iter()
            .filter(|(_, p)| p.link.is_some())
            .map(|(id, _)| id)
    }

    /// Every known peer.
    pub fn known_peers(&self) -> impl Iterator<Item = &PeerId> {
        self.peers.keys()
    }

    /// Number of established links.
    pub fn established_count(&self) -> usize {
        self.established
    }

    /// How long after a peer's link was established a second connection to it may begin
    /// and still be a dial race: twice `handshake_timeout`. A dial the peer began before it
    /// saw the link connects within its connect timeout (`handshake_timeout` in Shoal; the
    /// accept here may follow it by a retransmission), so every real race fits; anything
    /// later is a late claim (see the module docs).
    pub fn race_window(&self) -> Duration {
        self.race_window
    }

    /// A validated announce from `peer`, to be dialed back at `addr`.
    pub fn on_announce(&mut self, peer: PeerId, addr: SocketAddr, now: Instant) {
        if self.stopped || peer == self.me || peer.is_zero() {
            return;
        }
        let mut paid = false;
        if !self.peers.contains_key(&peer) {
            if !self.limiter.try_admit(addr.ip(), now) {
                self.stats.announces_rate_limited += 1;
                return;
            }
            paid = true;
            if !self.make_room() {
                self.stats.peer_table_full += 1;
                tracing::debug!(%peer, max = self.max_peers, "peer table full, announce ignored");
                return;
            }
            self.peers
                .insert(peer, Peer::new(PeerState::Discovered, now));
            self.announce_only.push_back(peer);
        }
        let p = self.peers.get_mut(&peer).expect("inserted above");
        if paid {
            p.charged = Some(addr.ip());
        }
        p.addr = Some(addr);
        p.last_announce = Some(now);
        p.last_seen = now;
        if !p.discovered {
            // Also for a peer that connected before its first announce arrived.
            p.discovered = true;
            self.events
                .push_back(PeerEvent::PeerDiscovered { peer, addr });
        }
        let due = p.reconnect_at.is_none_or(|t| t <= now);
        if p.link.is_none() && p.dialing.is_none() && !p.is_static && due && !self.hold_dials {
            self.dial_peer(peer, paid, now);
        }
    }

    /// Frees a slot in a full peer table by evicting the oldest announce-only peer. False if
    /// the table is full of peers that are (or were) linked, or static.
    fn make_room(&mut self) -> bool {
        if self.peers.len() < self.max_peers {
            return true;
        }
        while let Some(id) = self.announce_only.pop_front() {
            let evictable = self
                .peers
                .get(&id)
                .is_some_and(|p| !p.ever_linked && !p.is_static && p.link.is_none());
            if evictable {
                self.peers.remove(&id);
                self.stats.peers_evicted += 1;
                tracing::debug!(peer = %id, "announce-only peer evicted from a full table");
                self.events.push_back(PeerEvent::Lost { peer: id });
                return true;
            }
        }
        false
    }

    /// A socket accepted from `remote`. Returns the id of its (acceptor) link, or `None` if
    /// the connection table is full of links past their handshake and dials, and the socket
    /// must be closed. When the pending-handshake pool (or the table) is full, the oldest
    /// pending inbound connection of the busiest source is evicted instead: a
    /// [`PeerAction::Close`] for it is queued.
    pub fn on_accepted(&mut self, remote: Option<IpAddr>, now: Instant) -> Option<LinkId> {
        if self.stopped {
            return None;
        }
        self.pending_inbound
            .retain(|l| self.conns.get(l).is_some_and(|c| c.peer.is_none()));
        let full =
            self.pending_inbound.len() >= self.max_pending || self.conns.len() >= self.max_conns;
        if full && !self.evict_pending() {
            self.stats.conn_table_full += 1;
            return None;
        }
        let link = self.open_conn(Origin::Inbound, remote, now);
        self.pending_inbound.push_back(link);
        Some(link)
    }

    /// Closes the oldest pending inbound connection of the source with the most of them.
    fn evict_pending(&mut self) -> bool {
        let mut per_source: AHashMap<Option<IpAddr>, usize> = AHashMap::new();
        for l in &self.pending_inbound {
            *per_source.entry(self.conns[l].remote).or_insert(0) += 1;
        }
        let Some(busiest) = per_source
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .map(|(ip, _)| ip)
        else {
            return false;
        };
        let Some(pos) = self
            .pending_inbound
            .iter()
            .position(|l| self.conns[l].remote == busiest)
        else {
            return false;
        };
        let link = self.pending_inbound.remove(pos).expect("found");
        self.conns.remove(&link);
        self.stats.handshakes_evicted += 1;
        self.actions.push_back(PeerAction::Close {
            link,
            goodbye: false,
        });
        true
    }

    /// The handshake of `link` completed: the peer is `peer`, listening on `listen_port` at
    /// `remote_ip` (the socket's peer address; used to dial back an inbound-only peer).
    /// `shoal_peer`: its Hello carried Shoal's extension block (see `peers/races.rs` for
    /// what it changes).
    pub fn on_handshake(
        &mut self,
        link: LinkId,
        peer: PeerId,
        remote_ip: Option<IpAddr>,
        listen_port: u16,
        shoal_peer: bool,
        now: Instant,
    ) {
        if self.stopped {
            return;
        }
        let Some(origin) = self.conns.get(&link).map(|c| c.origin) else {
            return; // closed meanwhile (e.g. a race loser)
        };
        if peer == self.me || peer.is_zero() {
            self.stats.self_connections += 1;
            tracing::debug!(?link, "connection reached this node itself, closing");
            self.conns.remove(&link);
            self.actions.push_back(PeerAction::Close {
                link,
                goodbye: false,
            });
            self.dial_failed(origin, now);
            return;
        }
        if !self.peers.contains_key(&peer) {
            if !self.make_room() {
                self.stats.peer_table_full += 1;
                self.conns.remove(&link);
                self.actions.push_back(PeerAction::Close {
                    link,
                    goodbye: true,
                });
                self.dial_failed(origin, now);
                return;
            }
            self.peers
                .insert(peer, Peer::new(PeerState::Connecting, now));
        }
        match origin {
            Origin::Static(i) => {
                let t = &mut self.statics[i];
                t.pending = None;
                t.attempt = 0;
                if let Some(old) = t.peer.replace(peer).filter(|old| *old != peer) {
                    tracing::info!(endpoint = %t.endpoint, %old, new = %peer, "static peer answered with a new id");
                    if let Some(o) = self.peers.get_mut(&old) {
                        o.is_static = false;
                    }
                }
                self.peers.get_mut(&peer).expect("present").is_static = true;
            }
            Origin::Seed(i) => {
                self.seeds[i].pending = None;
                self.seeds[i].attempt = 0;
            }
            Origin::Discovered(dialed) if dialed != peer => {
                // The address now belongs to another id (the peer restarted): the dial for
                // the old id is over; the old id gets Lost unless it is announced again.
                if let Some(o) = self.peers.get_mut(&dialed) {
                    if o.dialing == Some(link) {
                        o.dialing = None;
                        o.state = PeerState::Disconnected;
                    }
                }
            }
            Origin::Discovered(_) | Origin::Inbound => {}
        }
        let p = self.peers.get_mut(&peer).expect("present");
        if p.dialing == Some(link) {
            p.dialing = None;
        }
        if p.addr.is_none() {
            p.addr = remote_ip.map(|ip| SocketAddr::new(ip, listen_port));
        }
        p.attempt = 0;
        p.reconnect_at = None;
        p.last_seen = now;
        p.ever_linked = true;
        // A stranger admitted on a source's budget answered from that address under its
        // announced id: a node of that host, no longer a fake id it may have sent.
        if let Some(src) = p.charged.take().filter(|s| remote_ip == Some(*s)) {
            self.limiter.refund(src, now);
            self.stats.budget_refunds += 1;
        }
        self.conns.get_mut(&link).expect("present").peer = Some(peer);
        match p.link {
            None => {
                p.link = Some(link);
                p.linked_at = now;
                p.state = PeerState::Connected;
                self.established += 1;
                self.actions.push_back(PeerAction::Install { peer, link });
                self.events.push_back(PeerEvent::Connected { peer, link });
            }
            Some(existing) => self.resolve_race(peer, link, existing, shoal_peer),
        }
    }

    /// `link` ended, for whatever reason (also a failed connect). Unknown or already-closed
    /// links (race losers) are ignored.
    pub fn on_closed(&mut self, link: LinkId, now: Instant) {
        let Some(conn) = self.conns.remove(&link) else {
            return;
        };
        if self.stopped {
            return;
        }
        let Some(peer) = conn.peer else {
            self.dial_failed(conn.origin, now);
            return;
        };
        if self.peers.get(&peer).and_then(|p| p.link) != Some(link) {
            return; // not the installed link (cannot happen: losers leave `conns` at once)
        }
        let attempt_delay = {
            let p = &self.peers[&peer];
            backoff_with_jitter(
                self.reconnect_base,
                self.reconnect_max,
                p.attempt,
                &mut self.rng,
            )
        };
        let p = self.peers.get_mut(&peer).expect("found above");
        p.link = None;
        p.state = PeerState::Disconnected;
        p.last_seen = now;
        p.reconnect_at = Some(now + attempt_delay);
        p.attempt = p.attempt.saturating_add(1);
        let is_static = p.is_static;
        self.established -= 1;
        self.actions.push_back(PeerAction::Uninstall { peer, link });
        self.events.push_back(PeerEvent::Disconnected { peer });
        if is_static {
            for i in 0..self.statics.len() {
                if self.statics[i].peer == Some(peer) && self.statics[i].pending.is_none() {
                    let t = &mut self.statics[i];
                    let d = backoff_with_jitter(
                        self.reconnect_base,
                        self.reconnect_max,
                        t.attempt,
                        &mut self.rng,
                    );
                    t.next_dial = now + d;
                    t.attempt = t.attempt.saturating_add(1);
                }
            }
        }
    }

    /// Closes every link (Goodbye on established ones) and stops all dialing.
    pub fn shutdown(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let mut links: Vec<(LinkId, bool)> = self
            .conns
            .iter()
            .map(|(l, c)| (*l, c.peer.is_some()))
            .collect();
        links.sort();
        for (link, goodbye) in links {
            self.actions.push_back(PeerAction::Close { link, goodbye });
        }
        self.conns.clear();
    }

    /// Earliest instant at which [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.stopped {
            return None;
        }
        let mut next: Option<Instant> = None;
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        for p in self.peers.values() {
            if p.link.is_some() || p.dialing.is_some() {
                continue;
            }
            if let Some(t) = p.reconnect_at {
                consider(t);
            }
            if !p.is_static {
                consider(p.last_seen + self.peer_lost_timeout);
            }
        }
        for t in &self.statics {
            if t.pending.is_none() && !self.covered(t) {
                consider(t.next_dial);
            }
        }
        if self.established == 0 {
            for t in &self.seeds {
                if t.pending.is_none() {
                    consider(t.next_dial);
                }
            }
        }
        next
    }

    /// Redials what is due, prunes Lost peers, maintains static and seed endpoints.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.stopped {
            return;
        }
        let mut lost = Vec::new();
        let mut redial = Vec::new();
        for (id, p) in &mut self.peers {
            if p.link.is_some() || p.dialing.is_some() {
                continue;
            }
            if !p.is_static && now.saturating_duration_since(p.last_seen) >= self.peer_lost_timeout
            {
                lost.push(*id);
                continue;
            }
            if let Some(t) = p.reconnect_at.filter(|t| *t <= now) {
                let announced = p
                    .last_announce
                    .is_some_and(|a| now.saturating_duration_since(a) < self.peer_lost_timeout);
                if announced && !p.is_static && p.addr.is_some() && !self.hold_dials {
                    redial.push((t, *id));
                } else {
                    p.reconnect_at = None;
                }
            }
        }
        lost.sort();
        for id in lost {
            self.peers.remove(&id);
            self.stats.lost += 1;
            self.events.push_back(PeerEvent::Lost { peer: id });
        }
        redial.sort();
        for (_, id) in redial {
            self.dial_peer(id, false, now);
        }
        if self.announce_only.len() > 2 * self.max_peers {
            let peers = &self.peers;
            self.announce_only
                .retain(|id| peers.get(id).is_some_and(|p| !p.ever_linked));
        }
        self.maintain_endpoints(now);
    }
}

impl Peer {
    fn new(state: PeerState, now: Instant) -> Peer {
        Peer {
            state,
            addr: None,
            last_announce: None,
            last_seen: now,
            link: None,
            linked_at: now,
            dialing: None,
            attempt: 0,
            reconnect_at: None,
            is_static: false,
            ever_linked: false,
            charged: None,
            discovered: false,
        }
    }
}
