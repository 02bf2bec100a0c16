//! Sample routes from the membership graph: per writer, the links this node sends each of its
//! samples on, from the writer's shortest-path tree over the topic-capable part of the mesh
//! (issue 12).
//!
//! **Owns:** the tree computation ([`compute_routes`]) and the stable writer slots
//! ([`SlotAllocator`]). **Must not touch:** discovery or matching (the caller passes the
//! matches in), the membership state machine (it reads [`MemberGraph::adjacency`]), the
//! table type ([`super::routes`]) and the sample path.
//!
//! The graph. Nodes are this node and the *capable* nodes (they speak topics); a plain
//! multimaster node never carries samples, so trees go around it. An edge A–B is usable only
//! when both ends are capable and both ends' membership records list each other. A link
//! listed by one side only is a link coming up (the other record has not arrived yet) or
//! going down (one side already dropped it): every node sees the two records at slightly
//! different times, and counting such an edge would let one node put it in a tree while
//! another leaves it out, so two nodes could each forward a sample to the same node (a
//! duplicate) or each leave a branch to the other (a loss) in ways that persist. Requiring
//! both makes the edge appear in every node's view only once both records agree, and a
//! sample sent on a half-gone link is dropped and counted by the shard anyway.
//!
//! This node's own edges are taken from its own record (the adjacency entry of `me`, its live
//! links as membership knows them), the same list every other node holds for it, so it
//! builds exactly the tree the others build. Its capable links (`PeerId → LinkId`, only links
//! whose peer advertised extended frames) are consulted only to send and to say which links a
//! writer's samples are taken from ([`WriterRoute::accept_from`]): a tree child without
//! one is a disagreement between this node's links and the graph, skipped and counted in
//! [`RouteStats::skipped_no_link`] (building the tree from the links instead would give this
//! node a tree that no other node has).
//!
//! The tree rooted at the writer's node is a BFS that visits neighbours in ascending
//! [`PeerId`] order, a node's parent being the first node to reach it: a function of the
//! graph and the root only, so every node computing from the same graph gets the same tree,
//! each sample crosses each tree edge once and no other link. This node sends on its links to
//! those of its tree children whose subtree holds a node hosting a matched reader.
//!
//! Cost: one BFS (`O(nodes + edges)`) per distinct writer node in one computation (writers
//! are grouped by node, the tree and its per-node branch marks built once for the group, with
//! the links its samples are taken from, `O(links)`), then `O(readers)` per writer. The branch marks replace walking each reader's parent
//! chain: in BFS order, a node's branch is itself when its parent is this node, else its
//! parent's branch, so the child of this node above any reader is one lookup.
//!
//! [`MemberGraph::adjacency`]: crate::membership::MemberGraph::adjacency

use super::routes::{EndpointGuid, ReliableRoute, WriterRoute};
use crate::counted_graph::CountedGraph as Graph;
use crate::stats::TopicCounters;
use crate::{LinkId, PeerId};
use ahash::{AHashMap, AHashSet};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

/// One writer this node may forward or deliver, as the control core knows it from
/// discovery and matching.
#[derive(Debug, Clone)]
pub struct WriterInput {
    /// The writer's GUID.
    pub guid: EndpointGuid,
    /// The node hosting the writer (the tree's root). This node's id: the writer is local.
    pub node: PeerId,
    /// The writer's slot (from a [`SlotAllocator`]), copied into its route.
    pub slot: u32,
    /// The writer's topic's counters, copied into its route.
    pub topic: Arc<TopicCounters>,
    /// The other nodes hosting readers matched with the writer (this node and the writer's
    /// node are ignored here; duplicates are harmless).
    pub reader_nodes: Vec<PeerId>,
    /// The readers on this node matched with the writer.
    pub local_readers: Vec<EndpointGuid>,
    /// Its reliable side, copied into its route.
    pub reliable: Option<Arc<ReliableRoute>>,
}

/// Counters of one [`compute_routes`] run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteStats {
    /// Shortest-path trees built (one BFS per distinct writer node in the graph).
    pub trees_built: u64,
    /// Tree branches below this node leading to a matched reader that were not sent on
    /// because this node has no capable link to that tree child (its links and the graph
    /// disagree, e.g. the peer did not advertise extended frames).
    pub skipped_no_link: u64,
    /// (local writer, reader node) pairs whose reader node the writer's tree does not reach
    /// (no path over capable nodes and two-sided edges): those readers get nothing.
    pub unreachable_readers: u64,
    /// Remote writers with readers on this node whose tree does not reach this node.
    pub unreached_here: u64,
}

/// The result of [`compute_routes`].
#[derive(Debug, Default)]
pub struct RouteOutput {
    /// One route per writer that this node sends on or delivers to, plus every local
    /// writer (so its topic counters count what it writes even with nobody to send to).
    /// Sorted by writer GUID; ready for [`SampleRoutes::new`](super::SampleRoutes::new).
    pub routes: Vec<WriterRoute>,
    /// What the run counted.
    pub stats: RouteStats,
}

/// No node / no parent.
const NONE: u32 = u32::MAX;

/// One root's tree, as seen from this node (reused across roots).
struct Tree {
    /// Parent of each node (the root is its own parent); `NONE`: not reached.
    parent: Vec<u32>,
    /// The child of this node whose subtree holds the node; `NONE`: not below this node.
    branch: Vec<u32>,
    /// BFS order (also the queue).
    order: Vec<u32>,
    /// Hops from the root (meaningful where `parent` is set).
    depth: Vec<u32>,
}

impl Tree {
    fn new(n: usize) -> Tree {
        Tree {
            parent: vec![NONE; n],
            branch: vec![NONE; n],
            order: Vec::with_capacity(n),
            depth: vec![0; n],
        }
    }

    fn build(&mut self, g: &Graph, root: u32, me: u32) {
        self.parent.fill(NONE);
        self.branch.fill(NONE);
        self.order.clear();
        self.parent[root as usize] = root;
        self.depth[root as usize] = 0;
        self.order.push(root);
        let mut head = 0;
        while head < self.order.len() {
            let u = self.order[head];
            head += 1;
            // Ascending ids and first-reach-wins: the deterministic tie-break.
            for &v in g.neighbours(u) {
                if self.parent[v as usize] == NONE {
                    self.parent[v as usize] = u;
                    self.depth[v as usize] = self.depth[u as usize] + 1;
                    self.order.push(v);
                }
            }
        }
        // Parents come before their children in BFS order.
        for &v in &self.order[1..] {
            let p = self.parent[v as usize];
            self.branch[v as usize] = if p == me { v } else { self.branch[p as usize] };
        }
    }

    fn reached(&self, i: u32) -> bool {
        self.parent[i as usize] != NONE
    }
}

/// Computes this node's routes for `writers`.
///
/// `me` is this node; `adjacency` the membership graph (origin → the neighbours its record
/// lists, this node's own entry included: [`MemberGraph::adjacency`]); `capable` the nodes
/// that speak topics (those whose participant record was admitted; `me` counts whatever the
/// set holds); `links` this node's links to capable neighbours that advertised extended
/// frames. A writer whose `node` is `me` is local. Pure and deterministic: the same inputs
/// (in any iteration order) give the same routes.
///
/// [`MemberGraph::adjacency`]: crate::membership::MemberGraph::adjacency
pub fn compute_routes<'a>(
    me: PeerId,
    adjacency: impl IntoIterator<Item = (&'a PeerId, &'a [PeerId])>,
    capable: &AHashSet<PeerId>,
    links: &AHashMap<PeerId, LinkId>,
    writers: &[WriterInput],
) -> RouteOutput {
    let g = Graph::build(me, adjacency, |p| capable.contains(p));
    let me_i = g.index[&me];
    let mut tree = Tree::new(g.ids.len());
    let mut stats = RouteStats::default();
    let mut routes = Vec::with_capacity(writers.len());

    // Grouped by node so that each root's tree is built once.
    let mut by_node: Vec<u32> = (0..writers.len() as u32).collect();
    by_node.sort_unstable_by_key(|&i| writers[i as usize].node);

    let mut peers: Vec<PeerId> = Vec::new();
    let mut children: Vec<u32> = Vec::new();
    let mut toward: Vec<([u8; 12], LinkId)> = Vec::new();
    let mut accept_from: Vec<LinkId> = Vec::new();
    let mut group = 0;
    while group < by_node.len() {
        let node = writers[by_node[group] as usize].node;
        let mut end = group;
        while end < by_node.len() && writers[by_node[end] as usize].node == node {
            end += 1;
        }
        // A root outside the graph (not capable, no record) reaches nobody.
        let root = g.index.get(&node).copied();
        if let Some(r) = root {
            tree.build(&g, r, me_i);
            stats.trees_built += 1;
        }
        let local = node == me;
        accept_from.clear();
        if !local {
            accept_from_links(&g, &tree, root, me_i, node, links, &mut accept_from);
        }
        for &wi in &by_node[group..end] {
            let w = &writers[wi as usize];
            peers.clear();
            peers.extend_from_slice(&w.reader_nodes);
            peers.sort_unstable();
            peers.dedup();
            children.clear();
            toward.clear();
            let mut unreached = 0u32;
            for p in &peers {
                if *p == node || *p == me {
                    continue;
                }
                match (root, g.index.get(p)) {
                    (Some(_), Some(&i)) if tree.reached(i) => {
                        let b = tree.branch[i as usize];
                        if b != NONE {
                            children.push(b);
                            if let Some(l) = links.get(&g.ids[b as usize]) {
                                let prefix: [u8; 12] = p.0[..12].try_into().expect("16 >= 12");
                                toward.push((prefix, *l));
                            }
                        }
                    }
                    _ => {
                        if local {
                            stats.unreachable_readers += 1;
                            unreached += 1;
                        }
                    }
                }
            }
            if !local && !w.local_readers.is_empty() && !root.is_some_and(|_| tree.reached(me_i)) {
                stats.unreached_here += 1;
            }
            children.sort_unstable();
            children.dedup();
            let mut out: Vec<LinkId> = Vec::with_capacity(children.len());
            for &c in &children {
                match links.get(&g.ids[c as usize]) {
                    Some(l) => out.push(*l),
                    None => {
                        stats.skipped_no_link += 1;
                        if local {
                            unreached += 1;
                        }
                    }
                }
            }
            out.sort_unstable();
            out.dedup();
            if !local && out.is_empty() && w.local_readers.is_empty() {
                continue;
            }
            let mut readers = w.local_readers.clone();
            readers.sort_unstable();
            readers.dedup();
            // Toward the root: the link to this node's parent in the writer's tree.
            let upstream = match root {
                Some(r) if !local && tree.reached(me_i) && me_i != r => links
                    .get(&g.ids[tree.parent[me_i as usize] as usize])
                    .copied(),
                _ => None,
            };
            routes.push(WriterRoute {
                writer: w.guid,
                slot: w.slot,
                topic: Arc::clone(&w.topic),
                local,
                links: out,
                readers,
                unreached,
                upstream,
                accept_from: accept_from.clone(),
                toward: {
                    toward.sort_unstable();
                    toward.dedup_by_key(|t| t.0);
                    toward.clone()
                },
                reliable: w.reliable.clone(),
            });
        }
        group = end;
    }
    routes.sort_unstable_by_key(|a| a.writer);
    RouteOutput { routes, stats }
}

/// The links a remote writer's samples are taken from here (see
/// [`WriterRoute::accept_from`]): those to linked neighbours closer to the writer's node
/// `node` than this node in its tree (the parent among them), or, when the tree does not
/// reach this node, the direct link to `node` if there is one. Sorted, no duplicates.
fn accept_from_links(
    g: &Graph,
    tree: &Tree,
    root: Option<u32>,
    me: u32,
    node: PeerId,
    links: &AHashMap<PeerId, LinkId>,
    out: &mut Vec<LinkId>,
) {
    match root {
        Some(_) if tree.reached(me) => {
            let mine = tree.depth[me as usize];
            for (peer, link) in links {
                let closer = g
                    .index
                    .get(peer)
                    .is_some_and(|&i| tree.reached(i) && tree.depth[i as usize] < mine);
                if closer {
                    out.push(*link);
                }
            }
        }
        _ => out.extend(links.get(&node).copied()),
    }
    out.sort_unstable();
    out.dedup();
}

/// Every writer slot is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("all {capacity} writer slots are taken")]
pub struct SlotsFull {
    /// The allocator's capacity.
    pub capacity: u32,
}

/// Stable slots for writers: a writer keeps its slot across route tables while it is known;
/// a slot is handed out again only after its writer was released, lowest free slot first.
/// At most `capacity` writers hold a slot; a writer refused for that is counted.
///
/// A shard indexes its per-writer sequence state by slot, so a reused slot carries the
/// previous writer's state: the shard must reset a slot's state when the writer GUID in that
/// slot changes between tables.
#[derive(Debug)]
pub struct SlotAllocator {
    slots: AHashMap<EndpointGuid, u32>,
    free: BinaryHeap<Reverse<u32>>,
    next: u32,
    capacity: u32,
    rejected: u64,
}

impl SlotAllocator {
    /// An allocator for at most `capacity` writers at once (slots `0..capacity`).
    pub fn new(capacity: u32) -> SlotAllocator {
        SlotAllocator {
            slots: AHashMap::new(),
            free: BinaryHeap::new(),
            next: 0,
            capacity,
            rejected: 0,
        }
    }

    /// The slot of `writer`, assigning one if it has none.
    pub fn assign(&mut self, writer: EndpointGuid) -> Result<u32, SlotsFull> {
        if let Some(&s) = self.slots.get(&writer) {
            return Ok(s);
        }
        let s = if let Some(Reverse(s)) = self.free.pop() {
            s
        } else if self.next < self.capacity {
            self.next += 1;
            self.next - 1
        } else {
            self.rejected += 1;
            return Err(SlotsFull {
                capacity: self.capacity,
            });
        };
        self.slots.insert(writer, s);
        Ok(s)
    }

    /// The slot of `writer`, if it has one.
    pub fn get(&self, writer: &EndpointGuid) -> Option<u32> {
        self.slots.get(writer).copied()
    }

    /// `writer` is gone: frees its slot (returned) for a later writer.
    pub fn release(&mut self, writer: &EndpointGuid) -> Option<u32> {
        let s = self.slots.remove(writer)?;
        self.free.push(Reverse(s));
        Some(s)
    }

    /// Releases every writer for which `keep` is false; returns how many.
    pub fn retain(&mut self, mut keep: impl FnMut(&EndpointGuid) -> bool) -> usize {
        let free = &mut self.free;
        let before = self.slots.len();
        self.slots.retain(|w, s| {
            let k = keep(w);
            if !k {
                free.push(Reverse(*s));
            }
            k
        });
        before - self.slots.len()
    }

    /// Writers holding a slot.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when no writer holds a slot.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The most writers that can hold a slot at once.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Writers refused a slot because all were taken.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }
}

#[cfg(test)]
mod tests;
