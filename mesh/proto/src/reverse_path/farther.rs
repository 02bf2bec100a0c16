//! Which relays carry the frames of an origin two or more hops from this node to a neighbour
//! farther still, for `relay_redundancy` (issue 29, sparse meshes).
//!
//! **Owns:** the distances that question needs and the answer. **Must not touch:** the
//! two-hop case (`near.rs` answers it from the origin's and the neighbour's adjacency) and
//! the rule itself (the parent module's).
//!
//! Neighbour N, farther from origin X than this node (`dist(N, X) = dist(me, X) + 1 = d + 1`),
//! takes X's frames from any node linked to it at distance `d` from X: its relays, this node
//! among them. Every relay answers the same question over the same graph, so the first
//! `redundancy` by [`super::relay_rank`] carry and the others are spared, without a word
//! exchanged. The relays of N are within two hops of this node, but their distances to X are
//! not in this node's BFS; a BFS from each of them would cost `O(deg² · E)`: at 512 nodes of
//! degree 8, some 60 BFSs of ~4 000 edge visits each, a rebuild, a node.
//! Instead one BFS runs from all of them at once, a bit per node as in `near.rs`: level by
//! level, a node's new bits are the union of its neighbours' previous frontiers, and the
//! bits new at level `d = dist(me, X)` at X are exactly the candidates at distance `d` from
//! X. Cost: `O(levels · E · sources / 64)`, one word for up to 64 candidates (degree 8), and
//! nothing in a full mesh (no origin two hops away).

use super::bits::Bits;
use super::rank::RankOf;
use crate::counted_graph::{CountedGraph as Graph, FAR};

/// For each node X, the candidates at distance `dist(me, X)` from X, and for each counted
/// neighbour of this node, the candidates linked to it.
pub(super) struct Farther {
    /// The node index of each bit: every node linked to a counted neighbour of this node,
    /// this node excepted, ascending.
    sources: Vec<u32>,
    /// Per node X: the sources at distance `dist(me, X)` from X.
    at_my_distance: Bits,
    /// Per counted neighbour (by its bit in `near.rs`): the sources linked to it.
    linked_to: Bits,
}

impl Farther {
    /// The sets of graph `g` seen from node `me` (`dist_me`: its BFS; `counted`: its
    /// neighbours over counted edges, ascending); `None` when no origin is two or more hops
    /// away (nothing to ask).
    pub(super) fn compute(g: &Graph, me: u32, dist_me: &[u32], counted: &[u32]) -> Option<Self> {
        let deepest = dist_me.iter().filter(|&&d| d != FAR).max().copied()?;
        if deepest < 2 {
            return None;
        }
        let n = g.ids.len();
        let mut sources: Vec<u32> = counted
            .iter()
            .flat_map(|&nb| g.neighbours(nb).iter().copied())
            .filter(|&c| c != me)
            .collect();
        sources.sort_unstable();
        sources.dedup();
        let words = sources.len().div_ceil(64).max(1);
        let mut bit = vec![u32::MAX; n];
        for (i, &s) in sources.iter().enumerate() {
            bit[s as usize] = i as u32;
        }
        let mut linked_to = Bits::new(counted.len(), words);
        for (k, &nb) in counted.iter().enumerate() {
            for &c in g.neighbours(nb) {
                if c != me {
                    linked_to.set(k as u32, bit[c as usize] as usize);
                }
            }
        }

        let (mut seen, mut frontier) = (Bits::new(n, words), Bits::new(n, words));
        let mut next = Bits::new(n, words);
        for (i, &s) in sources.iter().enumerate() {
            seen.set(s, i);
            frontier.set(s, i);
        }
        let mut at_my_distance = Bits::new(n, words);
        for level in 1..=deepest {
            for (x, &dx) in dist_me.iter().enumerate() {
                let x = x as u32;
                for &y in g.neighbours(x) {
                    next.or_from(x, y, Some(&frontier));
                }
                next.keep_new(x, &mut seen);
                if dx == level {
                    at_my_distance.copy_row(x, &next);
                }
            }
            std::mem::swap(&mut frontier, &mut next);
            next.clear();
        }
        Some(Farther {
            sources,
            at_my_distance,
            linked_to,
        })
    }

    /// How many of the relays of `x`'s frames toward the counted neighbour with bit `nb_bit`
    /// (node `nb`, farther from `x` than this node `me`) rank before `me`, counted up to
    /// `cap` (> 0).
    pub(super) fn before_me(
        &self,
        g: &Graph,
        x: u32,
        nb: u32,
        nb_bit: usize,
        me: u32,
        cap: usize,
    ) -> usize {
        let relays = || {
            let (mine, theirs) = (
                self.at_my_distance.row(x),
                self.linked_to.row(nb_bit as u32),
            );
            mine.iter().zip(theirs).map(|(a, b)| a & b)
        };
        // No other relay: this one carries, no rank needed (the common case in a sparse
        // mesh two hops out).
        if relays().all(|m| m == 0) {
            return 0;
        }
        let sources = &self.sources;
        let relays = relays().enumerate().flat_map(|(k, mut m)| {
            std::iter::from_fn(move || {
                (m != 0).then(|| {
                    let c = sources[k * 64 + m.trailing_zeros() as usize];
                    m &= m - 1;
                    c
                })
            })
        });
        ranked_before(g, x, nb, me, relays, cap)
    }
}

/// How many of `relays` (nodes other than this node `me` that, like it, are linked to `nb`
/// one hop nearer to `x`) rank before `me` to carry `x`'s frames to `nb`
/// ([`super::relay_rank`], ties by index), counted up to `cap`: `me` is spared when
/// `relay_redundancy` of them do.
pub(super) fn ranked_before(
    g: &Graph,
    x: u32,
    nb: u32,
    me: u32,
    relays: impl IntoIterator<Item = u32>,
    cap: usize,
) -> usize {
    let of = RankOf::new(&g.ids[x as usize], &g.ids[nb as usize]);
    let rank = |c: u32| (of.relay(&g.ids[c as usize]), c);
    let mine = rank(me);
    let mut before = 0;
    for c in relays {
        if c != me && rank(c) < mine {
            before += 1;
            if before >= cap {
                break;
            }
        }
    }
    before
}
