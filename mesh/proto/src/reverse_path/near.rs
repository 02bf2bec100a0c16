//! How far each neighbour is from each origin, relative to this node, without a BFS per
//! neighbour: the per-origin neighbour sets of [`super::ReversePaths`] from one BFS.
//!
//! **Owns:** that computation. **Must not touch:** the rule it serves (the parent module's).
//!
//! For a neighbour N linked to this node over a counted edge, `dist(N, X)` differs from
//! `dist(me, X) = d` by at most one, so the parent's first three questions are about that
//! step:
//! - **toward** (`dist(N, X) = d - 1`): N is X, or N is toward some Y one hop nearer to this
//!   node (`d(Y) = d - 1`) that X is linked to. A shortest path from N to X ends with such a
//!   Y, and N is toward every node on it.
//! - **not farther** (`dist(N, X) <= d`): N is toward X, or not farther from some Y linked to
//!   X with `d(Y) = d - 1`, or toward some Y linked to X with `d(Y) = d` (the path's last
//!   step before X).
//! - **beside** (`dist(N, X) <= 1`): N is X or linked to X.
//! - **spared** (`relay_redundancy`): for X linked to this node and N two hops from X, the
//!   relays toward N are the nodes linked to both X and N; this node is spared N when at
//!   least `redundancy` of them rank before it ([`super::relay_rank`]). Farther from X, N's
//!   relays are the nodes linked to N one hop nearer to X, which needs distances from X that
//!   one BFS from this node does not give: `farther.rs` finds them. **Outranked**: the same
//!   count with one relay (another ranks before this one), for frames one copy suffices for.
//!
//! Walking the nodes level by level from this node's BFS, each set is the union of sets of
//! the previous level (or of the same level, already complete), one bit per neighbour: every
//! counted edge is looked at twice with `deg / 64` words each, `O(E * deg / 64)`, where a BFS
//! from every neighbour cost `O(deg * (V + E))` plus the sorting of `V * deg` pairs. At 60
//! nodes in a full mesh that was ~210 000 edge visits and three sorts of ~3 500 pairs per
//! rebuild, repeated on every change of the graph while a mesh boots (issue 29: the start of
//! 60 processes on one host spent over half of its CPU there).
//!
//! A neighbour this node lists whose edge does not count (yet: its record does not list this
//! node) may be anywhere in the graph; it keeps a BFS of its own, as before. That is a link
//! coming up or going down, a few at a time.

use super::bits::Bits;
use super::farther::{ranked_before, Farther};
use crate::counted_graph::{CountedGraph as Graph, FAR};
use std::collections::VecDeque;

/// Per origin, the neighbours (node indices) toward it, not farther from it, beside it,
/// spared its frames, and outranked as its relay.
pub(super) struct Near {
    /// `dist(me, x)` for every node ([`FAR`]: not reached).
    pub(super) dist_me: Vec<u32>,
    /// `(origin, neighbour)` pairs, origin-major, each origin's neighbours ascending.
    pub(super) toward: Vec<(u32, u32)>,
    /// See `toward`.
    pub(super) not_farther: Vec<(u32, u32)>,
    /// See `toward`.
    pub(super) beside: Vec<(u32, u32)>,
    /// See `toward`.
    pub(super) spared: Vec<(u32, u32)>,
    /// Of the farther neighbours, those for which another relay ranks before this one (a
    /// superset of `spared`): what a one-relay tree skips. See `toward`.
    pub(super) outranked: Vec<(u32, u32)>,
}

impl Near {
    /// The sets of graph `g` seen from node `me`; `redundancy`: how many relays carry an
    /// origin's frames to a node farther from it (0: every one; see the module docs).
    pub(super) fn compute(g: &Graph, me: u32, redundancy: usize) -> Near {
        let n = g.ids.len();
        let mut dist_me = vec![FAR; n];
        let mut queue = VecDeque::with_capacity(n);
        g.bfs(me, &mut dist_me, &mut queue);
        // The order of the nodes reached, by level (a BFS order, rebuilt: `bfs` keeps none).
        let mut order: Vec<u32> = (0..n as u32)
            .filter(|&x| dist_me[x as usize] != FAR)
            .collect();
        order.sort_by_key(|&x| dist_me[x as usize]);

        // Counted neighbours get a bit each, ascending (so ascending id); the others listed
        // by this node are measured by a BFS of their own.
        let counted = g.neighbours(me);
        let bit_of = |nb: u32| counted.binary_search(&nb).ok();
        let words = counted.len().div_ceil(64).max(1);
        let mut toward = Bits::new(n, words);
        let mut near = Bits::new(n, words);

        let mut start = 0;
        while start < order.len() {
            let d = dist_me[order[start] as usize];
            let end = start + order[start..].partition_point(|&x| dist_me[x as usize] == d);
            let level = &order[start..end];
            if d > 0 {
                for &x in level {
                    if let Some(b) = bit_of(x) {
                        toward.set(x, b);
                    }
                    for &y in g.neighbours(x) {
                        if dist_me[y as usize] == d - 1 {
                            toward.or_from(x, y, None);
                        }
                    }
                }
                for &x in level {
                    near.or_from(x, x, Some(&toward));
                    for &y in g.neighbours(x) {
                        let dy = dist_me[y as usize];
                        if dy == d - 1 {
                            near.or_from(x, y, None);
                        } else if dy == d {
                            near.or_from(x, y, Some(&toward));
                        }
                    }
                }
            }
            start = end;
        }

        let mut out = Near {
            dist_me,
            toward: Vec::new(),
            not_farther: Vec::new(),
            beside: Vec::new(),
            spared: Vec::new(),
            outranked: Vec::new(),
        };
        // Every neighbour this node lists, ascending, with where its distances are: a bit of
        // the sets above, or a BFS of its own.
        let mut dists: Vec<Vec<u32>> = Vec::new();
        let listed: Vec<(u32, Result<usize, usize>)> = g
            .own
            .iter()
            .map(|&nb| match bit_of(nb) {
                Some(b) => (nb, Ok(b)),
                None => {
                    let mut d = vec![FAR; n];
                    g.bfs(nb, &mut d, &mut queue);
                    dists.push(d);
                    (nb, Err(dists.len() - 1))
                }
            })
            .collect();
        let farther = match redundancy {
            0 => None,
            _ => Farther::compute(g, me, &out.dist_me, counted),
        };
        for x in 0..n as u32 {
            let dm = out.dist_me[x as usize];
            if x == me || dm == FAR {
                continue;
            }
            let linked = g.neighbours(x);
            let (tw, nr) = (toward.row(x), near.row(x));
            // `listed` and `linked` are both ascending: one cursor walks `linked` once.
            let mut li = 0;
            for &(nb, at) in &listed {
                while li < linked.len() && linked[li] < nb {
                    li += 1;
                }
                // (toward, not farther, beside)
                let (t, nf, b) = match at {
                    Ok(b) => {
                        let nf = nr[b / 64] >> (b % 64) & 1 == 1;
                        let beside = nb == x || linked.get(li) == Some(&nb);
                        (tw[b / 64] >> (b % 64) & 1 == 1, nf, nf && beside)
                    }
                    Err(k) => {
                        let dn = dists[k][x as usize];
                        (dn < dm, dn <= dm, dn <= dm && dn <= 1)
                    }
                };
                if nf {
                    out.not_farther.push((x, nb));
                }
                if b {
                    out.beside.push((x, nb));
                }
                if t {
                    out.toward.push((x, nb));
                }
                // A counted neighbour farther from the origin than this node: two hops from
                // an origin linked to this node, or farther out. How many of its other
                // relays rank before this one (up to `redundancy`).
                let before = match (at, &farther) {
                    _ if redundancy == 0 || nf => 0,
                    (Ok(_), _) if dm == 1 => beside_both(g, x, nb, me, redundancy),
                    (Ok(b), Some(f)) => f.before_me(g, x, nb, b, me, redundancy),
                    _ => 0,
                };
                if before >= 1 {
                    out.outranked.push((x, nb));
                }
                if redundancy > 0 && before >= redundancy {
                    out.spared.push((x, nb));
                }
            }
        }
        out
    }
}

/// How many of the nodes linked to both `x` and `nb` (this node `me` among them) rank
/// before `me` as relays of `x`'s frames toward `nb`, up to `cap`.
fn beside_both(g: &Graph, x: u32, nb: u32, me: u32, cap: usize) -> usize {
    let (a, b) = (g.neighbours(x), g.neighbours(nb));
    let (mut i, mut j) = (0, 0);
    // Both ascending: one merge finds the common neighbours.
    let common = std::iter::from_fn(|| {
        while i < a.len() && j < b.len() {
            match a[i].cmp(&b[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    (i, j) = (i + 1, j + 1);
                    return Some(a[i - 1]);
                }
            }
        }
        None
    });
    ranked_before(g, x, nb, me, common, cap)
}
