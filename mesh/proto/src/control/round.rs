//! One round of the control core: the peer table's actions become shard commands (a link
//! handed to its shard, routes installed and removed on every shard, frames queued), its and
//! the membership's events become application events (held while the shards catch up).
//!
//! **Owns:** the placement of links on shards and what goes to the shard outbox. **Must not
//! touch:** sockets (a handshaking link is closed through an [`Action`]).

use super::{Action, Conn, ControlCore, ControlEvent, Exchanged, Placed};
use crate::cmd::{NewLink, ToShard};
use crate::wire::{
    Features, Frame, DISCOVERY_FRAME_TYPE, MEMBERSHIP_DIGEST_FRAME_TYPE,
    SIGNED_MEMBERSHIP_FRAME_TYPE,
};
use crate::{link_shard, LinkBudget, LinkId, MemberEvent, PeerAction, PeerEvent, PeerId};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;

impl ControlCore {
    /// Queues a command for shard `to`. At the outbox ceiling only frames (which a later
    /// flood repairs) are dropped, and counted.
    pub(super) fn post(&mut self, to: usize, cmd: ToShard<()>) {
        if !self.outbox.push((to, cmd)) {
            self.stats.dropped_queue_full += 1;
        }
    }

    /// Queues a MembershipDigest frame on `link` (a digest link: its peer advertised it).
    fn send_digest(&mut self, link: LinkId, d: crate::wire::MembershipDigest) {
        let Some(shard) = self.placed.get(&link).map(|p| p.shard) else {
            return;
        };
        let mut b = bytes::BytesMut::new();
        if Frame::MembershipDigest(d).encode(&mut b).is_err() {
            // More records than the wire's count: the store's ceiling prevents it.
            return;
        }
        self.post(
            shard,
            ToShard::SendRaw {
                link,
                frame: b.freeze(),
            },
        );
    }

    /// A MembershipDigest frame from `link`; one that breaks the rules closes the link.
    pub(super) fn on_digest(
        &mut self,
        link: LinkId,
        d: &crate::wire::MembershipDigest,
        wall_ms: u64,
        now: Instant,
    ) {
        let Some(negotiated) = self.placed.get(&link).map(|p| p.digest) else {
            return;
        };
        let verdict = if negotiated {
            self.membership.on_digest(link, d, wall_ms, now)
        } else {
            Err(crate::membership::DigestError::NotNegotiated)
        };
        if let Err(e) = verdict {
            self.stats.digest_violations += 1;
            let peer = self.placed.get(&link).map(|p| p.peer);
            self.warn(
                "membership digest broke the rules, link closed",
                format!("{peer:?}: {e}"),
            );
            self.close(link, false);
        }
    }

    /// Queues `frame` on every placed link except `except`.
    pub(super) fn flood(&mut self, frame: &Bytes, except: Option<LinkId>) {
        let mut targets: Vec<(LinkId, usize)> = self
            .placed
            .iter()
            .filter(|(l, _)| Some(**l) != except)
            .map(|(l, p)| (*l, p.shard))
            .collect();
        // Deterministic order (simulations replay from a seed).
        targets.sort_unstable();
        for (link, shard) in targets {
            self.post(
                shard,
                ToShard::SendRaw {
                    link,
                    frame: frame.clone(),
                },
            );
        }
    }

    pub(super) fn install(&mut self, peer: PeerId, link: LinkId) {
        let owner = link_shard(&peer, self.shards);
        let (capable, signed_frames, signs, digest, holds_lease): (bool, bool, bool, bool, bool);
        let suite;
        let budget = match self.conns.remove(&link) {
            Some(Conn::Ready(ex)) => {
                let ex = *ex;
                let budget = Arc::new(LinkBudget::new(
                    self.cfg.max_outbound_queue_bytes,
                    self.epoch,
                ));
                self.slow_memory.opened(&peer, &budget);
                capable = ex.link.can_send_frame_type(DISCOVERY_FRAME_TYPE);
                signed_frames = ex.link.can_send_frame_type(SIGNED_MEMBERSHIP_FRAME_TYPE);
                digest = self.cfg.membership_digest
                    && ex.link.can_send_frame_type(MEMBERSHIP_DIGEST_FRAME_TYPE);
                holds_lease = ex
                    .link
                    .peer_shoal()
                    .is_some_and(|e| e.features.contains(Features::DISCOVERY_LEASE_HOLD));
                signs = signed_frames
                    && ex
                        .secure
                        .as_ref()
                        .is_some_and(|e| e.peer.as_ref().is_some_and(|v| v.node_id == peer));
                suite = ex.secure.as_ref().map(|e| e.suite);
                self.hand_to_shard(owner, peer, link, ex, budget.clone());
                // Identity mesh: our signed record is the first record a new neighbour gets.
                if let Some(frame) = self.own_record.as_ref().map(|r| r.frame.clone()) {
                    self.post(owner, ToShard::SendRaw { link, frame });
                }
                budget
            }
            Some(other) => {
                self.conns.insert(link, other);
                return;
            }
            None => match self.placed.get(&link) {
                Some(p) => {
                    (capable, signed_frames, signs, digest, holds_lease) =
                        (p.capable, p.signed_frames, p.signs, p.digest, p.holds_lease);
                    suite = p.suite;
                    p.budget.clone()
                }
                None => return,
            },
        };
        self.placed.insert(
            link,
            Placed {
                peer,
                shard: owner,
                budget: budget.clone(),
                capable,
                signed_frames,
                signs,
                suite,
                digest,
                holds_lease,
            },
        );
        if capable {
            self.topics.link_up_with(link, peer, holds_lease);
        }
        for s in 0..self.shards {
            self.post(
                s,
                ToShard::Install {
                    peer,
                    link,
                    owner,
                    budget: budget.clone(),
                },
            );
        }
    }

    pub(super) fn close(&mut self, link: LinkId, goodbye: bool) {
        match self.conns.remove(&link) {
            // The dial's result is reported later; an unknown link is then closed.
            Some(Conn::Dialing) => {}
            Some(Conn::Handshaking(_)) => self.actions.push_back(Action::Close { link }),
            Some(Conn::Ready(ex)) => {
                if goodbye {
                    self.goodbye_close(link, *ex);
                } else {
                    self.actions.push_back(Action::Close { link });
                }
            }
            None => {
                if let Some(p) = self.unplace(link) {
                    self.post(p.shard, ToShard::Close { link, goodbye });
                }
            }
        }
    }

    /// Retires `link`, a dial race's loser to `peer` (`ToShard::Retire`). Its peer resolves
    /// the race on its own and sends on the loser until then, so the link stays served a
    /// while, what comes on it handled as come on the winner, and closes when the peer
    /// closes it (or politely, later, if it does not): a loser that lost as its handshake
    /// ended (never placed) goes to the winner's shard without a route of its own. Closed
    /// from here at once, as before, what the peer had sent on it was discarded unread and
    /// counted nowhere, and a peer that had not resolved the race yet saw its only link end.
    pub(super) fn retire(&mut self, peer: PeerId, link: LinkId) {
        let ex = match self.conns.remove(&link) {
            Some(Conn::Ready(ex)) => ex,
            // Not through its handshake: nothing came on it yet.
            Some(c) => {
                self.conns.insert(link, c);
                return self.close(link, true);
            }
            // Placed (it was installed before the winner came): retired on its shard.
            None => {
                if let Some(p) = self.unplace(link) {
                    self.post(p.shard, ToShard::Retire { link });
                }
                return;
            }
        };
        let owner = link_shard(&peer, self.shards);
        let budget = Arc::new(LinkBudget::new(
            self.cfg.max_outbound_queue_bytes,
            self.epoch,
        ));
        self.hand_to_shard(owner, peer, link, *ex, budget);
        self.post(owner, ToShard::Retire { link });
    }

    /// Posts `AddLink`: shard `owner` serves `link` to `peer` from now on, with what the
    /// handshake exchanged and left over.
    fn hand_to_shard(
        &mut self,
        owner: usize,
        peer: PeerId,
        link: LinkId,
        ex: Exchanged,
        budget: Arc<LinkBudget>,
    ) {
        self.post(
            owner,
            ToShard::AddLink(Box::new(NewLink {
                link,
                peer,
                conn: (),
                leftover: ex.leftover,
                state: ex.link,
                secure: ex.secure.map(|e| (e.sealer, e.opener)),
                budget,
            })),
        );
    }

    /// Executes the peer table's actions, then turns peer and membership output into events
    /// (held while the shards catch up) and frames.
    pub(super) fn round(&mut self, now: Instant, wall_ms: u64) {
        let mut events = Vec::new();
        // Topics first: a dial it asks for becomes a peer action of this round.
        self.topics_outputs(now);
        let mut installed = false;
        while let Some(a) = self.peers.poll_action() {
            installed |= matches!(a, PeerAction::Install { .. });
            match a {
                PeerAction::Dial { link, target } => {
                    self.conns.insert(link, Conn::Dialing);
                    self.actions.push_back(Action::Dial { link, target });
                }
                PeerAction::Install { peer, link } => self.install(peer, link),
                PeerAction::Uninstall { peer, link } => {
                    self.unplace(link);
                    for s in 0..self.shards {
                        self.post(s, ToShard::Uninstall { peer, link });
                    }
                }
                PeerAction::Close { link, goodbye } => self.close(link, goodbye),
                PeerAction::Retire { peer, link } => self.retire(peer, link),
            }
        }
        while let Some(e) = self.peers.poll_event() {
            events.push(match e {
                PeerEvent::PeerDiscovered { peer, addr } => {
                    // A newcomer: it hears every node's beacon within an interval.
                    if let Some(b) = self.beacons.as_mut() {
                        b.changed(now);
                    }
                    ControlEvent::PeerDiscovered { peer, addr }
                }
                PeerEvent::Connected { peer, link } => {
                    let digest = self.placed.get(&link).is_some_and(|p| p.digest);
                    self.membership
                        .neighbour_up_on(peer, link, digest, wall_ms, now);
                    if let Some(d) = self.degree.as_mut() {
                        d.link_up(peer, now);
                    }
                    ControlEvent::PeerConnected { peer }
                }
                PeerEvent::Disconnected { peer } => {
                    // Redialing needs fresh announces at both ends (`peer_lost_timeout`).
                    if let Some(b) = self.beacons.as_mut() {
                        b.changed(now);
                    }
                    self.membership.neighbour_down(&peer, wall_ms, now);
                    if let Some(d) = self.degree.as_mut() {
                        d.link_down(peer, now);
                    }
                    ControlEvent::PeerDisconnected { peer }
                }
                PeerEvent::Lost { peer } => ControlEvent::PeerLost { peer },
            });
        }
        self.withdraw_slow(now, wall_ms);
        while let Some(t) = self.membership.poll_transmit() {
            self.send_membership(t);
        }
        while let Some((link, d)) = self.membership.poll_digest() {
            self.send_digest(link, d);
        }
        self.sync_member_stats();
        while let Some(e) = self.membership.poll_event() {
            events.push(match e {
                MemberEvent::MemberJoined(peer) => ControlEvent::MemberJoined { peer },
                MemberEvent::MemberLeft(peer) => {
                    // Names stay bounded by the membership: a departed node is forgotten
                    // (its next record or handshake tells it again).
                    self.book.remove(&peer);
                    self.actions.push_back(Action::Name {
                        node: peer,
                        name: None,
                    });
                    ControlEvent::MemberLeft { peer }
                }
            });
        }
        // Once per round, after every link and membership change: the reverse-path table,
        // the routes, then the topics events, held like the others until the shards applied
        // the new table.
        self.push_paths(now);
        self.topics_outputs(now);
        installed |= self.topics_routes(now);
        self.topics_events(&mut events);
        let mut out = Vec::new();
        if let Some(token) = self.held.round(installed, events, &mut out) {
            for s in 0..self.shards {
                self.post(s, ToShard::Sync(token));
            }
        }
        self.actions.extend(out.into_iter().map(Action::Event));
        self.sync_peer_stats();
        self.degree_observe(now);
        self.changed = true;
    }

    /// Copies the peer table's counters, with an aggregated warning for each kind of refusal
    /// that grew (floods raise them by the thousand).
    pub(super) fn sync_peer_stats(&mut self) {
        let now = self.peers.stats();
        let was = std::mem::replace(&mut self.peer_stats, now);
        if now == was {
            return;
        }
        let s = &mut self.stats;
        s.announces_rate_limited = now.announces_rate_limited;
        s.dials_rate_limited = now.dials_rate_limited;
        s.peers_evicted = now.peers_evicted;
        s.peer_table_full = now.peer_table_full;
        s.connections_refused = now.conn_table_full;
        s.handshakes_evicted = now.handshakes_evicted;
        s.claims_refused = now.claims_refused;
        let grew = [
            (
                now.announces_rate_limited > was.announces_rate_limited,
                "announce of a new peer over the new-peer rate, ignored",
            ),
            (
                now.peer_table_full > was.peer_table_full,
                "peer table full of linked peers, peer refused",
            ),
            (
                now.handshakes_evicted > was.handshakes_evicted,
                "pending handshakes full, oldest evicted",
            ),
        ];
        for (_, key) in grew.into_iter().filter(|(g, _)| *g) {
            let detail = format!("max_peers = {}", self.cfg.max_peers);
            self.warn(key, detail);
        }
        if now.claims_refused > was.claims_refused {
            let window = self.peers.race_window();
            self.warn(
                "connection claiming a linked peer's id, refused: a late claim, not a dial race",
                format!("race window {window:?}"),
            );
        }
    }
}
