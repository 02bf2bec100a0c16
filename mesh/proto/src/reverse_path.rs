//! Reverse paths over the membership graph: for each origin X, the direct neighbours a frame
//! of X's may come from (issue 24, finding 12).
//!
//! **Owns:** the "toward" rule ([`ReversePaths`], [`PathVerdict`]) and its per-link form for
//! the shards ([`PathTable`], in `table.rs`). **Must not touch:** the membership state machine (it reads
//! [`MemberGraph`]'s public accessors only), frames or counters: callers decide what an
//! [`PathVerdict::Off`] frame costs and count it.
//!
//! A flooded frame travels every path, so the first copy of X's frame that reaches this node
//! arrives from *some* neighbour; a frame forged by a stranger arrives from the stranger.
//! The rule: neighbour N is **toward** X when N is X, or `dist(N, X) < dist(me, X)` in the
//! membership graph. Frames of X are taken only from neighbours toward X. It holds every
//! genuine frame when all nodes judge by the same graph: by induction on the distance from
//! X, every node at distance `d` gets the frame from a neighbour at distance `d - 1` (which
//! took it from one at `d - 2`, and floods it to every link but that one), so the copy
//! travelling a shortest path always comes from a neighbour toward X. A copy from a
//! neighbour at the same distance or farther is never the only one. While nodes judge by
//! different graphs (a link came or went and the records have not reached everyone) a frame
//! can meet a node that does not take it from the neighbour it came by: that is the rule's
//! cost in redundancy, measured on the fault suite.
//!
//! The graph, the same edge rule as the topic trees (`topics::tree`): the nodes are this
//! node and every node whose membership record is known (and that `include` admits), an edge
//! A–B counts only when both A's and B's records list each other, and this node's own edges
//! are its own record's list. An edge listed by one end only is a link coming up or going
//! down; counting it would let a stranger that lists a real node as its neighbour in its own
//! record claim to be next to it, which is exactly the lie this module exists to refuse.
//!
//! Origins that are not in the graph, or that this node does not reach over counted edges,
//! are [`PathVerdict::UnknownOrigin`]: the graph cannot say where they are, so callers take
//! their frames (a node that just joined, whose records have not arrived yet, loses
//! nothing). A neighbour whose own record is unknown is toward no one but itself, so a
//! stranger that sends no record is judged [`PathVerdict::Off`] for every origin but its
//! own id.
//!
//! **Relays** send an origin's frames only to neighbours farther from it than themselves
//! ([`PathTable`]). A node N would then get one copy from every node linked to it one hop
//! nearer to origin X (its relays): in a full mesh, a neighbour X stops listing (its link
//! slow, `control::slow`) got a copy of each of X's frames from every other node, the load
//! of flooding on the one node that was already behind, and in a sparse mesh (`max_links`)
//! most nodes got two or three copies of every broadcast. So of N's relays only the
//! `relay_redundancy` first by [`relay_rank`] carry X's frames to N
//! ([`ReversePaths::spared`]), at every distance from X; the rest are spared it.
//!
//! Cost: one BFS from this node, then one pass over the graph level by level with a bit per
//! neighbour (`O(E * deg / 64)`, see `near.rs`; it was a BFS from every neighbour,
//! `O(deg * (V + E))`, plus sorting), and where an origin is two or more hops away one BFS
//! from the nodes two hops from this one, all at once, a bit each (`farther.rs`), run only
//! when the graph's edges changed ([`MemberGraph::shape`]); a lookup is one hash probe and a
//! binary search in the (short, sorted) list of the origin's toward neighbours.

mod bits;
mod farther;
mod near;
mod rank;
mod table;

use crate::counted_graph::{CountedGraph as Graph, FAR};
use crate::membership::MemberGraph;
use crate::PeerId;
use ahash::AHashMap;
use near::Near;
pub use rank::relay_rank;
pub use table::{PathCheck, PathTable};

/// Where a frame of some origin, arriving from a direct neighbour, comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathVerdict {
    /// The neighbour is the origin itself.
    Direct,
    /// The neighbour is closer to the origin than this node: a path a genuine frame takes.
    Toward,
    /// The neighbour is no closer to the origin than this node (or not in the graph): a
    /// genuine frame always also arrives on a path toward its origin, so this copy is not
    /// needed, and a forged one is refused.
    Off,
    /// The origin is not in the graph (no record yet, or not reached from this node over
    /// counted edges): callers accept its frames.
    UnknownOrigin,
}

impl PathVerdict {
    /// True unless [`PathVerdict::Off`].
    pub fn accepted(self) -> bool {
        self != PathVerdict::Off
    }
}

/// Per origin, the neighbours toward it (see the [module docs](self)). Immutable once built;
/// rebuild it when the graph's shape changes ([`ReversePaths::of_graph`], [`ReversePaths::shape`]).
#[derive(Debug, Clone, Default)]
pub struct ReversePaths {
    me: PeerId,
    /// The [`MemberGraph::shape`] it was built from (`None`: built from something else, or
    /// never).
    shape: Option<u64>,
    /// Every origin this node reaches: its hops from this node and its range in `toward`.
    origins: AHashMap<PeerId, Entry>,
    /// The toward neighbours of every origin, one ascending run per origin.
    toward: Vec<PeerId>,
    /// The neighbours no farther from each origin than this node (toward ones included),
    /// one ascending run per origin: a relay sends them no copy ([`PathTable`]).
    not_farther: Vec<PeerId>,
    /// Of those, the origin itself and the neighbours linked to it (one hop away), one
    /// ascending run per origin: they take its frames from its own link, so a relay sends
    /// them none even while the origin's paths settle ([`PathTable::skipped_links`]).
    beside: Vec<PeerId>,
    /// The neighbours farther from each origin that enough other relays carry its frames to
    /// (`relay_redundancy`), one ascending run per origin: a relay sends them no copy.
    spared: Vec<PeerId>,
    /// The neighbours farther from each origin for which another relay ranks first, one
    /// ascending run per origin: a relay of frames that one copy suffices for sends them none
    /// ([`ReversePaths::outranked`]).
    outranked: Vec<PeerId>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    start: u32,
    len: u32,
    near_start: u32,
    near_len: u32,
    beside_start: u32,
    beside_len: u32,
    spared_start: u32,
    spared_len: u32,
    outranked_start: u32,
    outranked_len: u32,
    hops: u32,
}

impl ReversePaths {
    /// No graph yet: every origin is [`PathVerdict::UnknownOrigin`] (a frame from the
    /// origin itself is still [`PathVerdict::Direct`]).
    pub fn new(me: PeerId) -> ReversePaths {
        ReversePaths {
            me,
            ..ReversePaths::default()
        }
    }

    /// The reverse paths of the graph given as `adjacency` (origin → the neighbours its
    /// record lists, this node's own entry included, as [`MemberGraph::adjacency`] yields
    /// it), restricted to this node and the nodes `include` admits (e.g. only topic-capable
    /// nodes, for frames that only capable links carry). `redundancy`: how many relays carry
    /// an origin's frames to a node farther from it (`relay_redundancy`; 0: every one).
    /// Pure: the same inputs in any order give the same result.
    pub fn build<'a>(
        me: PeerId,
        adjacency: impl IntoIterator<Item = (&'a PeerId, &'a [PeerId])>,
        include: impl Fn(&PeerId) -> bool,
        redundancy: usize,
    ) -> ReversePaths {
        let g = Graph::build(me, adjacency, include);
        let n = g.ids.len();
        let me_i = g.index[&me];
        // (origin, neighbour) pairs, both as node indices, origin-major and ascending: a
        // neighbour toward the origin, one no farther from it than this node (which takes the
        // origin's frames from no link of ours: not worth a copy), and one beside it.
        let Near {
            dist_me,
            toward: pairs,
            not_farther: near,
            beside,
            spared,
            outranked,
        } = Near::compute(&g, me_i, redundancy);

        let mut origins = AHashMap::with_capacity(n);
        let mut toward = Vec::with_capacity(pairs.len());
        let mut not_farther = Vec::with_capacity(near.len());
        let mut by_origin = Vec::with_capacity(beside.len());
        let mut spared_ids = Vec::with_capacity(spared.len());
        let mut outranked_ids = Vec::with_capacity(outranked.len());
        let (mut k, mut q, mut b, mut s, mut r) = (0, 0, 0, 0, 0);
        for x in 0..n as u32 {
            if x == me_i || dist_me[x as usize] == FAR {
                continue;
            }
            let start = toward.len() as u32;
            take_run(&pairs, &mut k, x, &g.ids, &mut toward);
            let near_start = not_farther.len() as u32;
            take_run(&near, &mut q, x, &g.ids, &mut not_farther);
            let beside_start = by_origin.len() as u32;
            take_run(&beside, &mut b, x, &g.ids, &mut by_origin);
            let spared_start = spared_ids.len() as u32;
            take_run(&spared, &mut s, x, &g.ids, &mut spared_ids);
            let outranked_start = outranked_ids.len() as u32;
            take_run(&outranked, &mut r, x, &g.ids, &mut outranked_ids);
            origins.insert(
                g.ids[x as usize],
                Entry {
                    start,
                    len: toward.len() as u32 - start,
                    near_start,
                    near_len: not_farther.len() as u32 - near_start,
                    beside_start,
                    beside_len: by_origin.len() as u32 - beside_start,
                    spared_start,
                    spared_len: spared_ids.len() as u32 - spared_start,
                    outranked_start,
                    outranked_len: outranked_ids.len() as u32 - outranked_start,
                    hops: dist_me[x as usize],
                },
            );
        }
        ReversePaths {
            me,
            shape: None,
            origins,
            toward,
            not_farther,
            beside: by_origin,
            spared: spared_ids,
            outranked: outranked_ids,
        }
    }

    /// The reverse paths of `graph` with every node included, marked with its
    /// [`MemberGraph::shape`] (`redundancy` as in [`build`](Self::build)).
    pub fn of_graph(me: PeerId, graph: &MemberGraph, redundancy: usize) -> ReversePaths {
        ReversePaths {
            shape: Some(graph.shape()),
            ..ReversePaths::build(me, graph.adjacency(), |_| true, redundancy)
        }
    }

    /// The [`MemberGraph::shape`] it was built from by [`of_graph`](Self::of_graph) (`None`:
    /// built otherwise): a caller that rebuilds at a bounded rate compares it with the
    /// graph's.
    pub fn shape(&self) -> Option<u64> {
        self.shape
    }

    /// Where a frame of `origin` that arrived from the direct neighbour `via` comes from.
    pub fn toward(&self, origin: &PeerId, via: &PeerId) -> PathVerdict {
        if origin == via {
            return PathVerdict::Direct;
        }
        match self.accepted(origin) {
            None => PathVerdict::UnknownOrigin,
            Some(list) if list.binary_search(via).is_ok() => PathVerdict::Toward,
            Some(_) => PathVerdict::Off,
        }
    }

    /// The neighbours toward `origin`, ascending (the origin itself included when it is a
    /// neighbour with a record); `None` when the origin is unknown (accept from anyone).
    pub fn accepted(&self, origin: &PeerId) -> Option<&[PeerId]> {
        self.origins
            .get(origin)
            .map(|e| &self.toward[e.start as usize..(e.start + e.len) as usize])
    }

    /// The neighbours (with a record) no farther from `origin` than this node, ascending:
    /// under the rule none takes `origin`'s frames from this node, so a relay sends them
    /// none. `None` when the origin is unknown.
    pub fn not_farther(&self, origin: &PeerId) -> Option<&[PeerId]> {
        self.origins
            .get(origin)
            .map(|e| &self.not_farther[e.near_start as usize..(e.near_start + e.near_len) as usize])
    }

    /// Of [`not_farther`](Self::not_farther), the origin itself and the neighbours linked to
    /// it (one hop from it), ascending: each takes the origin's frames from the origin's own
    /// link. `None` when the origin is unknown.
    pub fn beside(&self, origin: &PeerId) -> Option<&[PeerId]> {
        self.origins.get(origin).map(|e| {
            &self.beside[e.beside_start as usize..(e.beside_start + e.beside_len) as usize]
        })
    }

    /// The neighbours farther from `origin` than this node for which at least `redundancy`
    /// other relays (the nodes linked to them at this node's distance from `origin`) rank
    /// before this one to carry `origin`'s frames ([`relay_rank`]), ascending: this relay
    /// sends them none. `None` when the origin is unknown.
    pub fn spared(&self, origin: &PeerId) -> Option<&[PeerId]> {
        self.origins.get(origin).map(|e| {
            &self.spared[e.spared_start as usize..(e.spared_start + e.spared_len) as usize]
        })
    }

    /// The neighbours farther from `origin` than this node for which another relay ranks
    /// before this one ([`relay_rank`]), ascending: a superset of
    /// [`spared`](Self::spared) (empty with `redundancy` 0, every relay). Where one copy
    /// into each node suffices (Discovery: a lost frame is repaired by the origin's next
    /// cycle), a relay sends them none. `None` when the origin is unknown.
    pub fn outranked(&self, origin: &PeerId) -> Option<&[PeerId]> {
        self.origins.get(origin).map(|e| {
            &self.outranked
                [e.outranked_start as usize..(e.outranked_start + e.outranked_len) as usize]
        })
    }

    /// Hops from this node to `origin` over counted edges (`None`: unknown).
    pub fn hops(&self, origin: &PeerId) -> Option<u32> {
        self.origins.get(origin).map(|e| e.hops)
    }

    /// Every known origin with its toward neighbours, in no particular order.
    pub fn origins(&self) -> impl Iterator<Item = (&PeerId, &[PeerId])> {
        self.origins.iter().map(|(o, e)| {
            (
                o,
                &self.toward[e.start as usize..(e.start + e.len) as usize],
            )
        })
    }

    /// Known origins (reached from this node).
    pub fn len(&self) -> usize {
        self.origins.len()
    }

    /// True when no origin is known.
    pub fn is_empty(&self) -> bool {
        self.origins.is_empty()
    }

    /// This node.
    pub fn me(&self) -> &PeerId {
        &self.me
    }
}

/// Moves `at` past the `(origin, neighbour)` pairs of `sorted` below origin `x` and appends
/// the ids of `x`'s neighbours to `out` (`sorted` ascending, `x` visited in ascending order).
fn take_run(sorted: &[(u32, u32)], at: &mut usize, x: u32, ids: &[PeerId], out: &mut Vec<PeerId>) {
    while *at < sorted.len() && sorted[*at].0 < x {
        *at += 1;
    }
    while *at < sorted.len() && sorted[*at].0 == x {
        out.push(ids[sorted[*at].1 as usize]);
        *at += 1;
    }
}

#[cfg(test)]
mod tests;
