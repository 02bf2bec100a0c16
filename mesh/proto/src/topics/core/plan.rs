//! The route tables: what the topics core hands the route computation (every writer this
//! node may have to carry, with the nodes of its matched readers; the topic-capable nodes;
//! this node's capable links; the membership graph) and when it rebuilds the table (once per
//! round in which anything of that changed).
//!
//! **Owns:** the inputs of the route computation, the writers' slots and the table's epoch.
//! **Must not touch:** the tree algorithm itself (`topics::tree`, which [`TreePlanner`]
//! calls).

use super::{guid_bytes, guid_of, TopicsCore};
use crate::reverse_path::ReversePaths;
use crate::stats::TopicCounters;
use crate::topics::routes::{
    EndpointGuid, ReliableRoute, ReliableWriterSpec, SampleRoutes, WriterRoute,
};
use crate::topics::tree::{compute_routes, SlotAllocator, WriterInput};
use crate::{LinkId, MemberGraph, PeerId};
use ahash::{AHashMap, AHashSet};
use shoal_discovery::graph::EndpointId;
use shoal_discovery::qos::{DurabilityKind, EndpointQos, History, Limit, ReliabilityKind};
use shoal_discovery::types::{EndpointKind, Guid};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Instant;

/// One writer the route computation must place: this node's own writers (every one, so
/// its topic counters count what it writes) and every writer with at least one matched
/// reader.
#[derive(Debug, Clone)]
pub struct WriterDemand {
    /// The writer.
    pub writer: EndpointGuid,
    /// Its node (the root of its tree).
    pub node: PeerId,
    /// It is one of this node's own.
    pub local: bool,
    /// Its topic's counters.
    pub topic: Arc<TopicCounters>,
    /// Remote nodes hosting readers matched with it, sorted, no duplicates (this node
    /// excluded).
    pub reader_nodes: Vec<PeerId>,
    /// This node's readers matched with it, sorted.
    pub local_readers: Vec<EndpointGuid>,
    /// Its reliable side (see [`ReliableRoute`]): `None` when nothing here is reliable.
    pub reliable: Option<Arc<ReliableRoute>>,
}

/// Everything a route table is computed from.
#[derive(Debug)]
pub struct RouteInput<'a> {
    /// This node.
    pub me: PeerId,
    /// The membership graph (every node's neighbour list: `MemberGraph::adjacency`).
    pub membership: &'a MemberGraph,
    /// Nodes that speak topics: this node and the nodes of admitted participants.
    pub capable: &'a BTreeSet<PeerId>,
    /// This node's links to capable neighbours (peer advertised extended frames); the
    /// lowest link id when a peer has several.
    pub links: &'a BTreeMap<PeerId, LinkId>,
    /// The writers, sorted by GUID.
    pub writers: &'a [WriterDemand],
}

/// Computes the routes of one table. It owns the writers' slots, which must stay the same
/// for a writer across tables while the writer is in the input, and be reused only after it
/// left.
pub trait RoutePlanner: Debug + Send {
    /// The routes of `input`'s writers from this node.
    fn plan(&mut self, input: &RouteInput<'_>) -> Vec<WriterRoute>;

    /// What it counted so far.
    fn stats(&self) -> PlannerStats;
}

/// What a planner counted, summed over the tables it computed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlannerStats {
    /// Shortest-path trees built.
    pub trees_built: u64,
    /// Branches toward a reader skipped: this node had no capable link to the tree child.
    pub skipped_no_link: u64,
    /// Reader nodes no usable path reached.
    pub unreachable_readers: u64,
    /// Writers left out of a table: every slot was taken.
    pub slots_full: u64,
}

/// The planner of the mesh: the shortest-path tree of every writer's node over the
/// topic-capable nodes ([`compute_routes`]), with stable slots from a [`SlotAllocator`].
#[derive(Debug)]
pub struct TreePlanner {
    slots: SlotAllocator,
    stats: PlannerStats,
}

impl TreePlanner {
    /// A planner for at most `writers` writers (local and remote) at once.
    pub fn new(writers: u32) -> TreePlanner {
        TreePlanner {
            slots: SlotAllocator::new(writers),
            stats: PlannerStats::default(),
        }
    }
}

impl RoutePlanner for TreePlanner {
    fn plan(&mut self, input: &RouteInput<'_>) -> Vec<WriterRoute> {
        // Slots of writers that left are released before new ones are handed out.
        let live: AHashSet<&EndpointGuid> = input.writers.iter().map(|w| &w.writer).collect();
        self.slots.retain(|g| live.contains(g));
        let mut writers = Vec::with_capacity(input.writers.len());
        for w in input.writers {
            match self.slots.assign(w.writer) {
                Ok(slot) => writers.push(WriterInput {
                    guid: w.writer,
                    node: w.node,
                    slot,
                    topic: w.topic.clone(),
                    reader_nodes: w.reader_nodes.clone(),
                    local_readers: w.local_readers.clone(),
                    reliable: w.reliable.clone(),
                }),
                Err(_) => self.stats.slots_full += 1,
            }
        }
        let capable: AHashSet<PeerId> = input.capable.iter().copied().collect();
        let links: AHashMap<PeerId, LinkId> = input.links.iter().map(|(p, l)| (*p, *l)).collect();
        let out = compute_routes(
            input.me,
            input.membership.adjacency(),
            &capable,
            &links,
            &writers,
        );
        self.stats.trees_built += out.stats.trees_built;
        self.stats.skipped_no_link += out.stats.skipped_no_link;
        self.stats.unreachable_readers += out.stats.unreachable_readers;
        out.routes
    }

    fn stats(&self) -> PlannerStats {
        self.stats
    }
}

impl TopicsCore {
    /// A route table is due but waits for the planning interval (see
    /// [`routes_due`](Self::routes_due)).
    pub fn routes_pending(&self) -> bool {
        self.routes_dirty
    }

    /// A new route table when matches, participants, capable links or the membership graph
    /// changed since the last one (call once per round), numbered one above the last.
    ///
    /// Tables are planned at most once per [`TopicsConfig::route_plan_interval`]: a change
    /// after a quiet spell is planned at once, a burst of them (thousands of endpoints
    /// announced together) waits for the interval and is planned once. While a plan waits,
    /// [`routes_pending`](Self::routes_pending) says so and the timer fires for it.
    ///
    /// [`TopicsConfig::route_plan_interval`]: crate::topics::TopicsConfig::route_plan_interval
    pub fn routes_due(
        &mut self,
        membership: &MemberGraph,
        now: Instant,
    ) -> Option<Arc<SampleRoutes>> {
        let mark = membership.shape();
        self.refresh_paths(membership, mark, now);
        self.note_members(membership);
        self.rearm_announce(now);
        if self.membership_mark != Some(mark) {
            self.membership_mark = Some(mark);
            // Only a change of the graph's shape matters, and only when something is routed.
            if !self.local.is_empty() || self.graph.match_count() > 0 {
                self.routes_dirty = true;
            }
        }
        if !self.routes_dirty || now < self.next_plan {
            return None;
        }
        self.routes_dirty = false;
        self.next_plan = now + self.cfg.route_plan_interval;
        let writers = self.demands();
        let mut capable: BTreeSet<PeerId> = self.remotes.values().map(|r| r.node).collect();
        capable.insert(self.me);
        let mut links: BTreeMap<PeerId, LinkId> = BTreeMap::new();
        for (l, c) in &self.links {
            links.entry(c.peer).or_insert(*l);
        }
        let input = RouteInput {
            me: self.me,
            membership,
            capable: &capable,
            links: &links,
            writers: &writers,
        };
        let routes = self.planner.plan(&input);
        self.routes_epoch += 1;
        self.stats.route_tables += 1;
        let graph = &self.graph;
        self.counters.retain(|t, _| {
            !graph.topic_endpoints(t, EndpointKind::Writer).is_empty()
                || !graph.topic_endpoints(t, EndpointKind::Reader).is_empty()
        });
        let removed = self.removed_writers(&routes);
        // The view is not dropped here: the new epoch is in its key, so the next call
        // rebuilds it, and until then it is what a later change holds back (dropping it let
        // the first view after a plan show a match whose table was still waiting).
        Some(Arc::new(
            SampleRoutes::new(self.routes_epoch, routes).with_removed(removed),
        ))
    }

    /// The reverse paths of the whole membership graph, as the control core last built
    /// them: while every node of the graph is topic-capable (in a mesh of Shoal nodes, once
    /// every node's participant was heard) they are the paths the topics core would build,
    /// so the next [`routes_due`](Self::routes_due) builds none: it takes these when they
    /// are of the graph's current shape, and otherwise waits for the control core's next
    /// build (due within the control core's own interval, for which its timer fires). At
    /// 60 nodes starting at once the topics core's own builds were ~5 % of the machine
    /// (`bench/notes/start60.md`).
    pub fn offer_paths(&mut self, paths: Arc<ReversePaths>) {
        self.offered = Some(paths);
    }

    /// Whether Discovery frames are checked against `paths` (the control core's, taken by
    /// [`offer_paths`](Self::offer_paths)): then every node of the graph is topic-capable,
    /// and a choice among the relays of the whole graph is one among Discovery's relays (a
    /// plain multimaster node never carries a Discovery frame).
    pub fn checks_against(&self, paths: &Arc<ReversePaths>) -> bool {
        self.reverse_path && Arc::ptr_eq(&self.paths, paths)
    }

    /// Rebuilds the reverse paths over the topic-capable nodes when the membership graph's
    /// shape (`mark`) or the capable set changed: a plain multimaster node on a shortest
    /// path never carries a Discovery frame, so the paths are those of the capable nodes.
    /// The control core's paths of the same shape are taken instead when every node is
    /// capable ([`offer_paths`](Self::offer_paths)).
    ///
    /// At most once per `route_plan_interval` (the timer fires for a rebuild that waits):
    /// at 60 nodes starting at once the graph changes every round, and rebuilding per round
    /// took 40 % of the machine (`bench/notes/start60.md`). A Discovery frame checked
    /// against paths a few milliseconds old is at worst dropped as off path and repaired by
    /// the next cycle, which a link change brings within `announce_period`.
    fn refresh_paths(&mut self, membership: &MemberGraph, mark: u64, now: Instant) {
        let offered = self.offered.take();
        if !self.reverse_path || self.paths_shape == Some(mark) {
            self.paths_waiting = false;
            return;
        }
        let capable = || -> AHashSet<PeerId> {
            let mut c: AHashSet<PeerId> = self.remotes.values().map(|r| r.node).collect();
            c.insert(self.me);
            c
        };
        if let Some(p) = offered {
            let capable = capable();
            if membership.adjacency().all(|(n, _)| capable.contains(n)) {
                // Paths of an older shape: the control core builds this one's within its
                // own interval (its timer fires for it) and offers them then.
                self.paths_waiting = false;
                if p.shape() == Some(mark) {
                    self.paths = p;
                    self.paths_shape = Some(mark);
                    self.stats.paths_shared += 1;
                }
                return;
            }
        }
        if now < self.next_paths {
            self.paths_waiting = true;
            return;
        }
        let capable = capable();
        self.paths_waiting = false;
        self.next_paths = now + self.cfg.route_plan_interval;
        self.stats.paths_rebuilt += 1;
        self.paths = Arc::new(ReversePaths::build(
            self.me,
            membership.adjacency(),
            |p| capable.contains(p),
            self.relay_redundancy,
        ));
        self.paths_shape = Some(mark);
    }

    /// What the route planner counted.
    pub fn planner_stats(&self) -> PlannerStats {
        self.planner.stats()
    }

    /// The epoch of the last table built (0: none yet).
    pub fn routes_epoch(&self) -> u64 {
        self.routes_epoch
    }

    /// The writers the last table routed that `routes` leaves out because they are gone
    /// (the graph no longer knows them), not because they are unmatched; remembers
    /// `routes`' writers for the next table.
    fn removed_writers(&mut self, routes: &[WriterRoute]) -> Vec<EndpointGuid> {
        let mut now: Vec<EndpointGuid> = routes.iter().map(|r| r.writer).collect();
        now.sort_unstable();
        let before = std::mem::replace(&mut self.routed_writers, now);
        before
            .into_iter()
            .filter(|w| {
                self.routed_writers.binary_search(w).is_err()
                    && self.graph.endpoint_id(&guid_of(w)).is_none()
            })
            .collect()
    }

    fn node_of(&self, g: &Guid) -> Option<PeerId> {
        if g.prefix == self.prefix {
            return Some(self.me);
        }
        self.remotes.get(&g.prefix).map(|r| r.node)
    }

    fn demands(&mut self) -> Vec<WriterDemand> {
        let mut by_writer: BTreeMap<EndpointId, Vec<EndpointId>> = BTreeMap::new();
        for (w, r) in self.graph.matches() {
            by_writer.entry(w).or_default().push(r);
        }
        let locals: Vec<EndpointId> = self
            .local
            .iter()
            .filter(|(_, k)| **k == EndpointKind::Writer)
            .filter_map(|(g, _)| self.graph.endpoint_id(g))
            .collect();
        for w in locals {
            by_writer.entry(w).or_default();
        }
        let mut out = Vec::with_capacity(by_writer.len());
        for (w, readers) in by_writer {
            let Some(info) = self.graph.endpoint(w) else {
                continue;
            };
            let (guid, topic, wqos) = (info.guid, info.topic.clone(), info.qos);
            let Some(node) = self.node_of(&guid) else {
                continue;
            };
            let local = node == self.me;
            let mut reader_nodes = Vec::new();
            let mut local_readers = Vec::new();
            let mut reliable_remote = Vec::new();
            let mut durable_remote = Vec::new();
            let mut reliable_here = Vec::new();
            for r in readers {
                let Some(ri) = self.graph.endpoint(r) else {
                    continue;
                };
                let reliable = ri.qos.reliability.kind == ReliabilityKind::Reliable;
                match self.node_of(&ri.guid) {
                    Some(n) if n == self.me => {
                        local_readers.push(guid_bytes(&ri.guid));
                        if reliable {
                            reliable_here.push(guid_bytes(&ri.guid));
                        }
                    }
                    Some(n) => {
                        reader_nodes.push(n);
                        if reliable {
                            // Its node's lease, as admitted (capped): a keep-all writer waits
                            // for it no longer than that.
                            let lease = self
                                .graph
                                .participant(&ri.guid.prefix)
                                .map_or(std::time::Duration::MAX, |p| {
                                    std::time::Duration::from_nanos(p.lease_duration.as_nanos())
                                });
                            reliable_remote.push((guid_bytes(&ri.guid), lease));
                            if ri.qos.durability >= DurabilityKind::TransientLocal {
                                durable_remote.push(guid_bytes(&ri.guid));
                            }
                        }
                    }
                    None => {}
                }
            }
            reader_nodes.sort_unstable();
            reader_nodes.dedup();
            local_readers.sort_unstable();
            reliable_remote.sort_unstable();
            durable_remote.sort_unstable();
            reliable_here.sort_unstable();
            let writer = guid_bytes(&guid);
            let reliable = if local {
                let credit = self.credits.get(&guid).cloned();
                credit
                    .filter(|_| {
                        !reliable_remote.is_empty()
                            || wqos.durability >= DurabilityKind::TransientLocal
                    })
                    .map(|credit| ReliableRoute {
                        writer: Some(writer_spec(&wqos, reliable_remote, durable_remote, credit)),
                        local_readers: Vec::new(),
                    })
            } else if reliable_here.is_empty() {
                None
            } else {
                Some(ReliableRoute {
                    writer: None,
                    local_readers: reliable_here,
                })
            };
            out.push(WriterDemand {
                writer,
                node,
                local,
                topic: self.counters_of(&topic),
                reader_nodes,
                local_readers,
                reliable: reliable.map(Arc::new),
            });
        }
        out.sort_unstable_by_key(|d| d.writer);
        out
    }
}

/// A local reliable writer's history settings from its QoS; `readers` with their node's
/// lease, sorted.
fn writer_spec(
    q: &EndpointQos,
    readers: Vec<(EndpointGuid, std::time::Duration)>,
    durable_readers: Vec<EndpointGuid>,
    credit: Arc<crate::topics::WriterCredit>,
) -> ReliableWriterSpec {
    let keep_last = match q.history {
        History::KeepLast { depth } => Some(depth),
        History::KeepAll => None,
    };
    let max_samples = match q.resource_limits.max_samples {
        Limit::AtMost(n) => Some(n),
        Limit::Unlimited => None,
    };
    let lifespan = q.lifespan.duration;
    ReliableWriterSpec {
        keep_last,
        max_samples,
        lifespan: (!lifespan.is_infinite())
            .then(|| std::time::Duration::from_nanos(lifespan.as_nanos())),
        transient_local: q.durability >= DurabilityKind::TransientLocal,
        reader_leases: readers.iter().map(|(_, l)| *l).collect(),
        readers: readers.into_iter().map(|(g, _)| g).collect(),
        durable_readers,
        credit,
    }
}
