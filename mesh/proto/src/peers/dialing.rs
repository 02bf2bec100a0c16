//! Dialing: the three sources of dial targets (discovered peers, static and seed endpoints),
//! the dial itself, and the backoff after a failed one.
//!
//! **Owns:** when and what this node dials. **Must not touch:** the handshake or the verdict
//! on a second connection (`races`).

use super::{
    backoff_with_jitter, Conn, DialTarget, Origin, PeerAction, PeerManager, PeerState, Target,
};
use crate::{LinkId, PeerId};
use std::net::IpAddr;
use std::time::Instant;

impl<R: rand::RngCore> PeerManager<R> {
    /// True when the endpoint `t` reached a peer that is linked now.
    pub(super) fn covered(&self, t: &Target) -> bool {
        t.peer
            .and_then(|p| self.peers.get(&p))
            .is_some_and(|p| p.link.is_some())
    }

    /// Dials the static endpoints not linked, and the seeds while no link is up, as due.
    pub(super) fn maintain_endpoints(&mut self, now: Instant) {
        if self.stopped {
            return;
        }
        for i in 0..self.statics.len() {
            let t = &self.statics[i];
            if t.pending.is_none() && t.next_dial <= now && !self.covered(t) {
                let target = DialTarget::Endpoint(t.endpoint.clone());
                match self.dial(Origin::Static(i), target, now) {
                    Some(link) => self.statics[i].pending = Some(link),
                    None => self.statics[i].next_dial = now + self.reconnect_base,
                }
            }
        }
        if self.established > 0 {
            return;
        }
        for i in 0..self.seeds.len() {
            let t = &self.seeds[i];
            if t.pending.is_none() && t.next_dial <= now {
                let target = DialTarget::Endpoint(t.endpoint.clone());
                match self.dial(Origin::Seed(i), target, now) {
                    Some(link) => self.seeds[i].pending = Some(link),
                    None => self.seeds[i].next_dial = now + self.reconnect_base,
                }
            }
        }
    }

    /// Dials a discovered peer. A peer never linked needs the new-peer budget, unless `paid`
    /// (its admission took it); over budget the dial is postponed by `reconnect_base`.
    pub(super) fn dial_peer(&mut self, peer: PeerId, paid: bool, now: Instant) {
        let Some((addr, ever_linked)) = self
            .peers
            .get(&peer)
            .and_then(|p| Some((p.addr?, p.ever_linked)))
        else {
            return;
        };
        if !paid && !ever_linked {
            if !self.limiter.try_admit(addr.ip(), now) {
                self.stats.dials_rate_limited += 1;
                let p = self.peers.get_mut(&peer).expect("caller checked");
                p.reconnect_at = Some(now + self.reconnect_base);
                return;
            }
            self.peers.get_mut(&peer).expect("caller checked").charged = Some(addr.ip());
        }
        let dialed = self.dial(Origin::Discovered(peer), DialTarget::Addr(addr), now);
        let p = self.peers.get_mut(&peer).expect("caller checked");
        match dialed {
            Some(link) => {
                p.dialing = Some(link);
                p.reconnect_at = None;
                if p.link.is_none() {
                    p.state = PeerState::Connecting;
                }
            }
            None => p.reconnect_at = Some(now + self.reconnect_base),
        }
    }

    /// A new connection from `origin` to `target` (`None`: the connection table is full).
    fn dial(&mut self, origin: Origin, target: DialTarget, now: Instant) -> Option<LinkId> {
        if self.conns.len() >= self.max_conns {
            self.stats.conn_table_full += 1;
            return None;
        }
        let link = self.open_conn(origin, None, now);
        self.stats.dials += 1;
        self.actions.push_back(PeerAction::Dial { link, target });
        Some(link)
    }

    /// A dial from `origin` ended before its handshake: its backoff grows.
    pub(super) fn dial_failed(&mut self, origin: Origin, now: Instant) {
        self.stats.dial_failures += 1;
        match origin {
            Origin::Discovered(peer) => {
                let Some(attempt) = self.peers.get(&peer).map(|p| p.attempt) else {
                    return;
                };
                let d = backoff_with_jitter(
                    self.reconnect_base,
                    self.reconnect_max,
                    attempt,
                    &mut self.rng,
                );
                let p = self.peers.get_mut(&peer).expect("checked");
                p.dialing = None;
                p.attempt = p.attempt.saturating_add(1);
                p.reconnect_at = Some(now + d);
                if p.link.is_none() {
                    p.state = PeerState::Disconnected;
                }
            }
            Origin::Static(i) | Origin::Seed(i) => {
                let attempt = self.target(origin, i).attempt;
                let d = backoff_with_jitter(
                    self.reconnect_base,
                    self.reconnect_max,
                    attempt,
                    &mut self.rng,
                );
                let t = self.target(origin, i);
                t.pending = None;
                t.attempt = t.attempt.saturating_add(1);
                t.next_dial = now + d;
            }
            Origin::Inbound => {}
        }
    }

    /// The static or seed endpoint `i` of `origin`.
    fn target(&mut self, origin: Origin, i: usize) -> &mut Target {
        match origin {
            Origin::Static(_) => &mut self.statics[i],
            _ => &mut self.seeds[i],
        }
    }

    /// A new connection from `origin` (at `remote`, for an inbound one), not through its
    /// handshake yet.
    pub(super) fn open_conn(
        &mut self,
        origin: Origin,
        remote: Option<IpAddr>,
        now: Instant,
    ) -> LinkId {
        let link = self.alloc_link();
        self.conns.insert(
            link,
            Conn {
                origin,
                peer: None,
                remote,
                started: now,
            },
        );
        link
    }

    /// A fresh link id.
    fn alloc_link(&mut self) -> LinkId {
        let l = LinkId(self.next_link);
        self.next_link += 1;
        l
    }
}
