//! The reverse paths' sets by one pass over the BFS layers (see [`Layers`]).
//!
//! **Owns:** that computation. **Must not touch:** the rule itself or the table layout
//! (`reverse_path`), which it only fills.

use crate::counted_graph::{CountedGraph as Graph, FAR};

/// The toward, not-farther and beside sets of every origin for the neighbours over counted
/// edges (layer 1 of the BFS from this node), as bit sets (bit `k`: `layer1[k]`), by one
/// pass over the BFS layers instead of one BFS per neighbour: `O(E * deg / 64)` against
/// `O(deg * (V + E))`, which made the sets of a 256-node full mesh 16 M steps per rebuild.
///
/// For such a neighbour `nb` and any node `x` at `d = dist(me, x) >= 1`, `dist(nb, x)` is
/// `d - 1`, `d` or `d + 1` (`nb` and this node are adjacent), and, by the last hop of a
/// shortest path from `nb` to `x` (through a neighbour `y` of `x`, whose own `dist(me, y)`
/// is within one of `d`):
/// - toward, `dist(nb, x) = d - 1`: at `d = 1` only `x` itself; beyond, exactly the union
///   of the toward sets of `x`'s neighbours in layer `d - 1`;
/// - not farther, `dist(nb, x) <= d`: `x` itself at `d = 1`, the not-farther sets of its
///   neighbours in layer `d - 1` and the toward sets of its neighbours in layer `d`;
/// - beside, `dist(nb, x) <= 1`: `x` itself and its neighbours.
pub(super) struct Layers {
    /// Node index → its bit (`FAR`: not a neighbour over a counted edge).
    pub(super) bit: Vec<u32>,
    /// Bit → node index, ascending.
    layer1: Vec<u32>,
    words: usize,
    pub(super) toward: Vec<u64>,
    pub(super) near: Vec<u64>,
    pub(super) beside: Vec<u64>,
}

impl Layers {
    pub(super) fn of(g: &Graph, me: u32, dist_me: &[u32]) -> Layers {
        let n = g.ids.len();
        let layer1 = g.neighbours(me).to_vec();
        let mut bit = vec![FAR; n];
        for (k, &v) in layer1.iter().enumerate() {
            bit[v as usize] = k as u32;
        }
        let words = layer1.len().div_ceil(64);
        let mut l = Layers {
            bit,
            layer1,
            words,
            toward: vec![0; n * words],
            near: vec![0; n * words],
            beside: vec![0; n * words],
        };
        if words == 0 {
            return l;
        }
        // The reached nodes but this one, by layer (counting sort, stable).
        let top = dist_me
            .iter()
            .filter(|d| **d != FAR)
            .max()
            .copied()
            .unwrap_or(0) as usize;
        let mut at = vec![0usize; top + 2];
        for &d in dist_me.iter().filter(|d| **d != FAR && **d > 0) {
            at[d as usize + 1] += 1;
        }
        for d in 1..at.len() {
            at[d] += at[d - 1];
        }
        let bounds = at.clone();
        let mut order = vec![0u32; at[top + 1]];
        for (x, &d) in dist_me.iter().enumerate() {
            if d != FAR && d > 0 {
                order[at[d as usize]] = x as u32;
                at[d as usize] += 1;
            }
        }
        for d in 1..=top {
            let layer = &order[bounds[d]..bounds[d + 1]];
            for &x in layer {
                let k = l.bit[x as usize];
                if k != FAR {
                    set(&mut l.toward, words, x, k);
                    set(&mut l.near, words, x, k);
                    set(&mut l.beside, words, x, k);
                }
                for &y in g.neighbours(x) {
                    let dy = dist_me[y as usize];
                    if dy + 1 == d as u32 && y != me {
                        or_into(&mut l.toward, words, x, y);
                        or_into(&mut l.near, words, x, y);
                    }
                    let ky = l.bit[y as usize];
                    if ky != FAR {
                        set(&mut l.beside, words, x, ky);
                    }
                }
            }
            // The toward sets of this layer are complete: the same layer's neighbours.
            for &x in layer {
                for &y in g.neighbours(x) {
                    if dist_me[y as usize] == d as u32 {
                        let (xs, ys) = (x as usize * words, y as usize * words);
                        for w in 0..words {
                            l.near[xs + w] |= l.toward[ys + w];
                        }
                    }
                }
            }
        }
        l
    }

    /// Members of all the sets in `sets`.
    pub(super) fn count(&self, sets: &[u64]) -> usize {
        sets.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Into `out` (cleared): the node indices of `x`'s set in `sets`, merged in ascending
    /// order with `x`'s run of the BFS-computed `sorted` pairs (from `at` on).
    pub(super) fn take(
        &self,
        sets: &[u64],
        x: u32,
        sorted: &[(u32, u32)],
        at: &mut usize,
        out: &mut Vec<u32>,
    ) {
        out.clear();
        let xs = x as usize * self.words;
        for (w, &word) in sets[xs..xs + self.words].iter().enumerate() {
            let mut m = word;
            while m != 0 {
                out.push(self.layer1[w * 64 + m.trailing_zeros() as usize]);
                m &= m - 1;
            }
        }
        while *at < sorted.len() && sorted[*at].0 < x {
            *at += 1;
        }
        let from = out.len();
        while *at < sorted.len() && sorted[*at].0 == x {
            out.push(sorted[*at].1);
            *at += 1;
        }
        if from > 0 && from < out.len() {
            out.sort_unstable();
        }
    }
}

/// Sets bit `k` of node `x`'s set.
fn set(sets: &mut [u64], words: usize, x: u32, k: u32) {
    sets[x as usize * words + k as usize / 64] |= 1 << (k % 64);
}

/// Node `x`'s set gains node `y`'s.
fn or_into(sets: &mut [u64], words: usize, x: u32, y: u32) {
    let (xs, ys) = (x as usize * words, y as usize * words);
    for w in 0..words {
        sets[xs + w] |= sets[ys + w];
    }
}
