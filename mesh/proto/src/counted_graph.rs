//! The membership graph as the topic trees (`topics::tree`) and the reverse paths
//! (`reverse_path`) count it, in compressed adjacency: the nodes are this node and every node
//! whose record is known (and that the caller's filter admits), and an edge A–B counts only
//! when both A's and B's records list each other. An edge listed by one end only is a link
//! coming up or going down, or a stranger claiming in its own record to be next to a real
//! node; counting it would let that claim move routes and paths.
//!
//! **Owns:** that edge rule and the graph's layout. **Must not touch:** what is computed
//! over it (trees, distances).

use crate::PeerId;
use ahash::AHashMap;
use std::collections::VecDeque;

/// Not reached (see [`CountedGraph::bfs`]).
pub(crate) const FAR: u32 = u32::MAX;

/// The counted graph: node `i` is `ids[i]` (ascending `PeerId`, so ascending index is
/// ascending id), its neighbours over counted edges `edges[off[i]..off[i + 1]]`, ascending;
/// `own` is what this node's own record lists among the nodes.
#[derive(Debug)]
pub(crate) struct CountedGraph {
    pub(crate) ids: Vec<PeerId>,
    pub(crate) index: AHashMap<PeerId, u32>,
    off: Vec<u32>,
    edges: Vec<u32>,
    pub(crate) own: Vec<u32>,
}

impl CountedGraph {
    /// The graph of `adjacency` (origin → the neighbours its record lists, as
    /// `MemberGraph::adjacency` gives it, this node's own record included) over this node
    /// and the origins `include` admits.
    pub(crate) fn build<'a>(
        me: PeerId,
        adjacency: impl IntoIterator<Item = (&'a PeerId, &'a [PeerId])>,
        include: impl Fn(&PeerId) -> bool,
    ) -> CountedGraph {
        let is_node = |p: &PeerId| !p.is_zero() && (*p == me || include(p));
        let mut records: Vec<(PeerId, &'a [PeerId])> = adjacency
            .into_iter()
            .filter(|(o, _)| is_node(o))
            .map(|(o, l)| (*o, l))
            .collect();
        // Sorting by origin alone would leave duplicate origins in input order; merging them
        // (below) makes the result independent of it.
        records.sort_unstable_by_key(|r| r.0);
        let mut ids: Vec<PeerId> = records.iter().map(|r| r.0).collect();
        ids.push(me);
        ids.sort_unstable();
        ids.dedup();
        let index: AHashMap<PeerId, u32> = ids
            .iter()
            .enumerate()
            .map(|(i, p)| (*p, i as u32))
            .collect();
        let n = ids.len();

        // What each node's record(s) list among the nodes, sorted and deduplicated.
        let mut loff = vec![0u32; n + 1];
        let mut lists: Vec<u32> = Vec::new();
        let mut r = 0;
        for (i, id) in ids.iter().enumerate() {
            let start = lists.len();
            while r < records.len() && records[r].0 == *id {
                lists.extend(
                    records[r]
                        .1
                        .iter()
                        .filter_map(|p| index.get(p).copied())
                        .filter(|&j| j as usize != i),
                );
                r += 1;
            }
            lists[start..].sort_unstable();
            let mut kept = start;
            for k in start..lists.len() {
                if kept == start || lists[kept - 1] != lists[k] {
                    lists[kept] = lists[k];
                    kept += 1;
                }
            }
            lists.truncate(kept);
            loff[i + 1] = lists.len() as u32;
        }
        let listed = |i: usize| &lists[loff[i] as usize..loff[i + 1] as usize];

        // Counted: both ends list each other. Nodes are visited in ascending order and every
        // list is ascending, so a cursor per node walks its list once over the whole pass
        // (`O(E)`, not a binary search per listed edge).
        let mut off = vec![0u32; n + 1];
        let mut edges = Vec::with_capacity(lists.len());
        let mut cursor: Vec<u32> = loff[..n].to_vec();
        for i in 0..n {
            for &j in listed(i) {
                let (c, end) = (&mut cursor[j as usize], loff[j as usize + 1]);
                while *c < end && lists[*c as usize] < i as u32 {
                    *c += 1;
                }
                if *c < end && lists[*c as usize] == i as u32 {
                    edges.push(j);
                }
            }
            off[i + 1] = edges.len() as u32;
        }
        let own = listed(index[&me] as usize).to_vec();
        CountedGraph {
            ids,
            index,
            off,
            edges,
            own,
        }
    }

    /// The neighbours of node `i` over counted edges, ascending.
    pub(crate) fn neighbours(&self, i: u32) -> &[u32] {
        &self.edges[self.off[i as usize] as usize..self.off[i as usize + 1] as usize]
    }

    /// Hops from `root` to every node into `dist` ([`FAR`]: not reached).
    pub(crate) fn bfs(&self, root: u32, dist: &mut [u32], queue: &mut VecDeque<u32>) {
        dist.fill(FAR);
        queue.clear();
        dist[root as usize] = 0;
        queue.push_back(root);
        while let Some(u) = queue.pop_front() {
            let d = dist[u as usize] + 1;
            for &v in self.neighbours(u) {
                if dist[v as usize] == FAR {
                    dist[v as usize] = d;
                    queue.push_back(v);
                }
            }
        }
    }
}
