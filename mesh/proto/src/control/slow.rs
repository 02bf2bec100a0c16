//! Neighbours whose link this node has declared slow, marked slow soon or found lagging (a
//! deep queue that stays deep: `budget/lag.rs`) are not listed in its own membership record
//! until the link catches up (issue 29: a broadcast crosses each link once).
//!
//! **Owns:** which neighbours are withdrawn from the own record, and when they are listed
//! again; which peers' closed links were slow lately ([`SlowMemory`]). **Must not touch:**
//! the slow-link rule itself (`budget`, the shards' `backpressure`), the record's flooding
//! (`membership`) or the reverse paths computed from it (`paths`).
//!
//! Why: with `relay_pruning`, no relay sends origin X's broadcast to a neighbour N linked to
//! X (N takes it from X's own link, and the reverse-path check refuses any other copy). When
//! X declares its link to N slow (a Block publisher stops waiting for it:
//! `SlowLinkPolicy`), X drops its own frames for N that do not fit, and nothing else reaches
//! N: the fault suite starved a subscriber behind a lossy link that way. Flooding does no
//! better once the paths settle (N refuses the relays' copies as off path), but the settling
//! windows that link changes keep opening let some through. So X stops listing N while the
//! link is slow: the edge X–N no longer counts anywhere (an edge counts only when both ends
//! list it), N is two hops from X in every graph, the relays next to both send N X's frames
//! (`relay_redundancy` of them, 3 by default: every one did, in a full mesh n - 2 copies of
//! each frame for the one node already behind; `reverse_path::ReversePaths::spared`) and N
//! takes them (the relays are now toward X; N's paths settle meanwhile, so it takes them
//! before its graph has the change). X's own frames that still fit the link are taken
//! too (a node always takes an origin's frames from the origin's own link). Once the link
//! caught up, X lists N again and the relays go back to skipping N. Caught up means the slow
//! mark cleared (the queue here drained to half its bound) *and* the kernel's send queue
//! holds no more than the link delivers in its round trip and a tenth of a second
//! ([`LinkBudget::send_queue_lags`], sampled after every write while N is withdrawn): a
//! write returns once the kernel took the bytes, and after 8 s of 30 % loss the fault suite's
//! publisher found its link to a lossy subscriber drained while the kernel still held seconds
//! of it (a path in retransmission backoff). Listed again then, N got nothing from anyone
//! for half a second; when the link jammed again, what it dropped at the declaration was
//! lost too (708 messages, after the suite's convergence point, in one pruning run of 24).
//! X unlists N a little ahead of the declaration (the link's slow-soon mark,
//! `budget::UNLIST_LEAD`): when X's publisher stops waiting, its backlog from the wait goes
//! out in one burst, and the part the link does not take reaches N only through relays that
//! already have X's new record.
//!
//! A neighbour is withdrawn only if it stays reachable over counted edges without the link
//! (the topic routes and reverse paths are computed over them), only toward a Shoal node
//! (a multimaster peer takes every relay's copy anyway), and only with the reverse-path
//! check on (without it, every copy is taken). The member set does not change either: N
//! stays reachable over the other edges (a multimaster node counts an edge either end lists,
//! so its view does not change at all). Each withdrawal is counted (`slow_links_unlisted`).

use super::ControlCore;
use crate::budget::LinkBudget;
use crate::counted_graph::{CountedGraph, FAR};
use crate::{LinkId, PeerId};
use ahash::AHashMap;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long [`SlowMemory`] keeps a closed link's slowness for the next link to its peer
/// (budget milliseconds): beyond ten default `after`s, the relapse window
/// ([`crate::budget::RELAPSE_WINDOW`]).
const SLOW_MEMORY_MS: u64 = 60_000;
/// At most this many peers remembered (a stranger redialing under new ids cannot grow it).
const SLOW_MEMORY_PEERS: usize = 1024;

/// Per peer, when a closed link to it was last slow, handed to the next link to it
/// ([`LinkBudget::remember_slow`]): a lossy link is often closed by the heartbeat timeout
/// and dialed again, and a Block publisher waited out each new link for a whole
/// `SlowLinkPolicy::after` at its first jam, holding every other link meanwhile.
#[derive(Debug, Default)]
pub(super) struct SlowMemory {
    by_peer: AHashMap<PeerId, u64>,
}

impl SlowMemory {
    /// A link to `peer` with `budget` closed.
    pub(super) fn closed(&mut self, peer: PeerId, budget: &LinkBudget) {
        let Some(ms) = budget.last_slow() else {
            return;
        };
        self.by_peer
            .retain(|_, t| ms.saturating_sub(*t) <= SLOW_MEMORY_MS);
        if self.by_peer.len() < SLOW_MEMORY_PEERS || self.by_peer.contains_key(&peer) {
            let t = self.by_peer.entry(peer).or_insert(ms);
            *t = (*t).max(ms);
        }
    }

    /// A new link to `peer` with `budget`: it takes what the last one left, if anything.
    pub(super) fn opened(&mut self, peer: &PeerId, budget: &LinkBudget) {
        if let Some(ms) = self.by_peer.remove(peer) {
            budget.remember_slow(ms);
        }
    }
}

/// How often a withdrawn link's slow mark is looked at again (only while one is withdrawn).
pub const SLOW_RECHECK: Duration = Duration::from_millis(100);

/// The neighbours withdrawn from the own record, each with the link that was slow.
#[derive(Debug, Default)]
pub(super) struct Withdrawn {
    peers: Vec<(PeerId, LinkId)>,
    /// When the withdrawn links' slow marks are looked at again (`None`: none withdrawn).
    recheck: Option<Instant>,
}

impl ControlCore {
    /// Once per round: withdraws the neighbours whose link is now slow, lists again those
    /// whose link caught up or went away.
    pub(super) fn withdraw_slow(&mut self, now: Instant, wall_ms: u64) {
        if !self.cfg.reverse_path_check || self.stopping {
            return;
        }
        let mut i = 0;
        while i < self.withdrawn.peers.len() {
            let (peer, link) = self.withdrawn.peers[i];
            match self.placed.get(&link) {
                Some(p) if p.budget.unlists_peer() || p.budget.send_queue_lags(now) => i += 1,
                // Caught up, or replaced by another link (a dial race): listed again while
                // a link to the peer is up (one that is slow too is withdrawn below).
                placed => {
                    if let Some(p) = placed {
                        p.budget.watch_send_queue(false);
                    }
                    self.membership.set_listed(&peer, true, wall_ms, now);
                    self.withdrawn.peers.swap_remove(i);
                }
            }
        }
        let slow: Vec<(PeerId, LinkId)> = self
            .placed
            .iter()
            .filter(|(l, p)| {
                p.capable
                    && p.budget.unlists_peer()
                    && !self.withdrawn.peers.iter().any(|(_, w)| w == *l)
            })
            .map(|(l, p)| (p.peer, *l))
            .collect();
        for (peer, link) in slow {
            if self.membership.neighbours().binary_search(&peer).is_ok()
                && self.reachable_without(&peer)
                && self.membership.set_listed(&peer, false, wall_ms, now)
            {
                tracing::debug!(
                    ?peer,
                    "slow link: not listed in the own record until it catches up"
                );
                if let Some(p) = self.placed.get(&link) {
                    p.budget.watch_send_queue(true);
                }
                self.withdrawn.peers.push((peer, link));
                self.stats.slow_links_unlisted += 1;
            }
        }
        self.withdrawn.recheck = (!self.withdrawn.peers.is_empty()).then_some(now + SLOW_RECHECK);
    }

    /// True if `peer` stays reachable over counted edges without this node's edge to it.
    fn reachable_without(&self, peer: &PeerId) -> bool {
        let me = self.me;
        let own: Vec<PeerId> = self
            .membership
            .neighbours()
            .iter()
            .copied()
            .filter(|p| p != peer)
            .collect();
        let adjacency = self.membership.adjacency().map(|(o, l)| {
            if *o == me {
                (o, own.as_slice())
            } else {
                (o, l)
            }
        });
        let g = CountedGraph::build(me, adjacency, |_| true);
        let Some(&target) = g.index.get(peer) else {
            return false;
        };
        let mut dist = vec![FAR; g.ids.len()];
        g.bfs(g.index[&me], &mut dist, &mut VecDeque::new());
        dist[target as usize] != FAR
    }

    /// When a withdrawn link's slow mark is due another look; `None`: none is withdrawn.
    pub(super) fn slow_timeout(&self) -> Option<Instant> {
        self.withdrawn.recheck
    }
}
