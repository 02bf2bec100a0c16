//! The peer table's side of the bounded degree (`max_links`, [`crate::degree`]): with a cap,
//! discovered peers are remembered but dialed only when the control core says so; it reads
//! the passive peers here, dials one, or refuses an inbound link after its handshake.
//!
//! **Owns:** these hooks into the peer table. **Must not touch:** which peer to dial or refuse
//! (that is [`crate::degree`]'s rule).

use super::{Origin, PeerManager};
use crate::{LinkId, PeerId};
use std::time::Instant;

impl<R: rand::RngCore> PeerManager<R> {
    /// True when discovered peers are dialed only through [`dial_passive`](Self::dial_passive)
    /// (a cap is set).
    pub fn holds_dials(&self) -> bool {
        self.hold_dials
    }

    /// The passive peers at `now`: discovered, announced within `peer_lost_timeout`, not
    /// static, not linked, not being dialed, and past their reconnect backoff (a failed dial
    /// holds its peer as it always did). Sorted by id (simulations replay from a seed).
    pub fn passive_peers(&self, now: Instant) -> Vec<PeerId> {
        let mut v: Vec<PeerId> = self
            .peers
            .iter()
            .filter(|(_, p)| {
                !p.is_static
                    && p.link.is_none()
                    && p.dialing.is_none()
                    && p.addr.is_some()
                    && p.last_announce
                        .is_some_and(|a| now.saturating_duration_since(a) < self.peer_lost_timeout)
                    && p.reconnect_at.is_none_or(|t| t <= now)
            })
            .map(|(id, _)| *id)
            .collect();
        v.sort_unstable();
        v
    }

    /// Dials of discovered peers in flight, and their peers.
    pub fn discovered_dials(&self) -> Vec<PeerId> {
        let mut v: Vec<PeerId> = self
            .conns
            .values()
            .filter(|c| c.peer.is_none())
            .filter_map(|c| match c.origin {
                Origin::Discovered(p) => Some(p),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// Dials the passive peer `peer` (the new-peer budget applies to a never-linked one, as
    /// to any dial of a discovered peer).
    pub fn dial_passive(&mut self, peer: PeerId, now: Instant) {
        let free = self
            .peers
            .get(&peer)
            .is_some_and(|p| p.link.is_none() && p.dialing.is_none() && !p.is_static);
        if free && !self.stopped {
            self.dial_peer(peer, false, now);
        }
    }

    /// True when `peer` is a static peer.
    pub fn is_static(&self, peer: &PeerId) -> bool {
        self.peers.get(peer).is_some_and(|p| p.is_static)
    }

    /// True when `link` was accepted (not dialed by this node).
    pub fn is_inbound(&self, link: LinkId) -> bool {
        self.conns
            .get(&link)
            .is_some_and(|c| c.origin == Origin::Inbound)
    }

    /// An inbound `link` whose handshake completed is refused (the caller says Goodbye and
    /// closes it): forgotten without a dial failure.
    pub fn refuse(&mut self, link: LinkId) {
        if self
            .conns
            .get(&link)
            .is_some_and(|c| c.origin == Origin::Inbound)
        {
            self.conns.remove(&link);
        }
    }
}
