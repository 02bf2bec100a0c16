//! The bounded degree in the control core (`max_links`, [`crate::degree`]): feeds the rules
//! what the peer table and the membership graph know, and carries out their decisions.
//!
//! **Owns:** what counts as a link for the cap (a link on a shard to a Shoal peer), the
//! connectivity test of a link that may be closed, and the dials, refusals and closes the
//! rules decided. **Must not touch:** the rules themselves ([`crate::degree`]) or the
//! membership records (read through [`crate::MemberGraph::adjacency`]).

use super::ControlCore;
use crate::counted_graph::{CountedGraph, FAR};
use crate::degree::{Counts, Decision, Passive, Sheddable};
use crate::{LinkId, PeerId};
use ahash::AHashMap;
use std::collections::VecDeque;
use std::time::Instant;

impl ControlCore {
    /// Links counted against the cap: on a shard, to a Shoal peer (a multimaster peer is
    /// neither counted nor closed).
    pub(super) fn counted_links(&self) -> usize {
        self.placed.values().filter(|p| p.capable).count()
    }

    /// Whether an inbound `link` from `peer` whose handshake just completed is refused (the
    /// caller says Goodbye): at the cap plus slack, from a Shoal peer already in this node's
    /// component that has no link here yet.
    pub(super) fn degree_refuses(&mut self, link: LinkId, peer: PeerId, shoal_peer: bool) -> bool {
        if self.degree.is_none()
            || !shoal_peer
            || !self.peers.is_inbound(link)
            || self.peers.link_of(&peer).is_some()
            || self.peers.is_static(&peer)
        {
            return false;
        }
        let links = self.counted_links();
        let member = self.membership.is_member(&peer);
        let refused = self
            .degree
            .as_mut()
            .is_some_and(|d| d.refuses(links, member));
        if refused {
            tracing::debug!(%peer, links, "at the link cap: inbound link refused");
            self.peers.refuse(link);
        }
        refused
    }

    /// After each round: a change arms a look.
    pub(super) fn degree_observe(&mut self, now: Instant) {
        if self.degree.is_none() || self.stopping {
            return;
        }
        let links = self.counted_links();
        let dials = self.peers.discovered_dials().len();
        let shape = self.membership.shape();
        let known = self.peers.known_peers().count();
        if let Some(d) = self.degree.as_mut() {
            d.observe(links, dials, shape, known, now);
        }
    }

    /// A due look: its decisions become dials and closes.
    pub(super) fn degree_look(&mut self, now: Instant) {
        if self.stopping || !self.degree.as_ref().is_some_and(|d| d.due(now)) {
            return;
        }
        let listed: AHashMap<PeerId, usize> = self
            .membership
            .adjacency()
            .map(|(o, l)| (*o, l.len()))
            .collect();
        let links = self.counted_links();
        let dials = self.peers.discovered_dials();
        let healing = dials.iter().any(|p| !self.membership.is_member(p));
        let passive: Vec<Passive> = self
            .peers
            .passive_peers(now)
            .into_iter()
            .map(|peer| Passive {
                peer,
                member: self.membership.is_member(&peer),
                links: listed.get(&peer).copied(),
            })
            .collect();
        let mut cap = self.degree.take().expect("checked");
        let sheddable = || self.sheddable(&listed);
        let mut out = Vec::new();
        let counts = Counts {
            links,
            dials: dials.len(),
            healing,
        };
        cap.look(now, counts, &passive, sheddable, &mut out);
        self.degree = Some(cap);
        for d in out {
            match d {
                Decision::Fill(peer) | Decision::Heal(peer) => {
                    tracing::debug!(?d, "link cap: dialing a passive peer");
                    self.peers.dial_passive(peer, now);
                }
                Decision::Shed(peer) => {
                    if let Some(link) = self.peers.link_of(&peer) {
                        tracing::debug!(%peer, "above the link cap: closing a link");
                        self.close(link, true);
                    }
                }
            }
        }
    }

    /// The links that may be closed: to non-static Shoal peers, each with whether every node
    /// reachable now stays reachable without it (over the counted edges).
    fn sheddable(&self, listed: &AHashMap<PeerId, usize>) -> Vec<Sheddable> {
        let g = CountedGraph::build(self.me, self.membership.adjacency(), |_| true);
        let me = g.index[&self.me];
        let mut dist = vec![FAR; g.ids.len()];
        g.bfs(me, &mut dist, &mut VecDeque::new());
        let reached = dist.iter().filter(|d| **d != FAR).count();
        let mut out = Vec::new();
        let mut seen = vec![false; g.ids.len()];
        let mut queue = VecDeque::new();
        for p in self.placed.values().filter(|p| p.capable) {
            if self.peers.is_static(&p.peer) {
                continue;
            }
            let keeps_connected = g
                .index
                .get(&p.peer)
                .is_some_and(|&x| reach_without(&g, me, x, &mut seen, &mut queue) == reached);
            out.push(Sheddable {
                peer: p.peer,
                links: listed.get(&p.peer).copied().unwrap_or(0),
                keeps_connected,
            });
        }
        out.sort_unstable_by_key(|s| s.peer);
        out
    }
}

/// Nodes reached from `me` when its edge to `x` is gone.
fn reach_without(
    g: &CountedGraph,
    me: u32,
    x: u32,
    seen: &mut [bool],
    queue: &mut VecDeque<u32>,
) -> usize {
    seen.fill(false);
    queue.clear();
    seen[me as usize] = true;
    queue.push_back(me);
    let mut n = 1;
    while let Some(u) = queue.pop_front() {
        for &v in g.neighbours(u) {
            if (u == me && v == x) || (u == x && v == me) || seen[v as usize] {
                continue;
            }
            seen[v as usize] = true;
            n += 1;
            queue.push_back(v);
        }
    }
    n
}
