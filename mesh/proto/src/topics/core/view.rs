//! The introspection snapshot of the topics core ([`TopicsView`]): topics, endpoints,
//! matches, per-topic counters, rejections and table occupancy, rebuilt only after a change
//! and shared as an `Arc` so the driver can hand it out cheaply.
//!
//! **Owns:** the view's shape. **Must not touch:** the state it describes.

use super::{guid_bytes, TopicsCore};
use crate::stats::TopicCounters;
use crate::topics::routes::EndpointGuid;
use crate::PeerId;
use shoal_discovery::graph::{RejectionCounters, Table};
use shoal_discovery::qos::EndpointQos;
use shoal_discovery::types::{EndpointKind, TopicName, TypeHash};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One topic.
#[derive(Debug, Clone)]
pub struct TopicView {
    /// Its name.
    pub name: String,
    /// Writers known on it (local and remote).
    pub writers: usize,
    /// Readers known on it.
    pub readers: usize,
    /// Its counters (shared with the route entries; `None` until a route table used it).
    pub counters: Option<Arc<TopicCounters>>,
}

/// One known endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointView {
    /// Its GUID.
    pub guid: EndpointGuid,
    /// Writer or reader.
    pub kind: EndpointKind,
    /// Topic.
    pub topic: String,
    /// Type name.
    pub type_name: String,
    /// Type hash (all zeros: unknown, never matches).
    pub type_hash: TypeHash,
    /// Every policy it offers (a writer) or requests (a reader), as announced.
    pub qos: EndpointQos,
    /// Partitions (empty: the default partition).
    pub partitions: Vec<String>,
    /// One of this node's own.
    pub local: bool,
    /// The node it lives on.
    pub node: PeerId,
}

/// A snapshot of the topics core.
#[derive(Debug, Clone)]
pub struct TopicsView {
    /// Topics with at least one endpoint, by name.
    pub topics: Vec<TopicView>,
    /// Every known endpoint, by GUID.
    pub endpoints: Vec<EndpointView>,
    /// Matched (writer, reader) pairs, sorted.
    pub matches: Vec<(EndpointGuid, EndpointGuid)>,
    /// Records refused, by table and cause.
    pub rejections: RejectionCounters,
    /// Occupancy and capacity of every discovery table, in [`Table::ALL`] order.
    pub occupancy: Vec<(Table, usize, usize)>,
    /// Stored matches and their capacity.
    pub match_occupancy: (usize, usize),
    /// Origins in the flood's dedup table and its bound.
    pub dedup_occupancy: (usize, usize),
    /// Pairs in the reported-incompatible set and its bound.
    pub reported_occupancy: (usize, usize),
    /// The epoch of the last route table.
    pub routes_epoch: u64,
    /// What the route planner counted (unreachable readers, branches without a link,
    /// writers over the slot capacity).
    pub planner: super::PlannerStats,
}

/// What a view lists, in counts: a change of any means a rebuild.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct ViewKey {
    endpoints: usize,
    matches: usize,
    participants: usize,
    local: usize,
    routes_epoch: u64,
    rejections: u64,
    removed: u64,
}

impl TopicsCore {
    /// The current snapshot. Rebuilt when what it lists may have changed (endpoints,
    /// matches, participants, route tables, rejections), never for the discovery counters
    /// alone: they change with every Discovery frame and a rebuild walks every endpoint and
    /// match (a node that knows thousands of them spent most of its control-plane time
    /// here). The counters are read apart, always current ([`TopicsCore::stats`]).
    pub fn view(&mut self) -> Arc<TopicsView> {
        let key = ViewKey {
            endpoints: self.graph.endpoint_count(),
            matches: self.graph.match_count(),
            participants: self.remotes.len(),
            local: self.local.len(),
            routes_epoch: self.routes_epoch,
            rejections: self.graph.rejections().total(),
            removed: self.stats.endpoints_pruned
                + self.stats.endpoints_withdrawn
                + self.stats.endpoints_expired,
        };
        if let Some(v) = &self.view {
            if self.routes_dirty {
                // A match the shards cannot route yet is not shown (the Matched events wait
                // the same way): an application that starts writing when it sees the match
                // finds it routed.
                return v.clone();
            }
            if self.view_key == key {
                return v.clone();
            }
        }
        self.view_key = key;
        let v = Arc::new(self.build_view());
        self.view = Some(v.clone());
        v
    }

    fn build_view(&self) -> TopicsView {
        let g = &self.graph;
        let mut endpoints = Vec::with_capacity(g.endpoint_count());
        let mut topics: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for id in g.endpoints() {
            let Some(e) = g.endpoint(id) else { continue };
            let local = g.is_local(id).unwrap_or(false);
            let node = if local {
                self.me
            } else {
                self.remotes
                    .get(&e.guid.prefix)
                    .map_or(PeerId::ZERO, |r| r.node)
            };
            let t = topics.entry(e.topic.as_str().to_owned()).or_default();
            match e.kind {
                EndpointKind::Writer => t.0 += 1,
                EndpointKind::Reader => t.1 += 1,
            }
            endpoints.push(EndpointView {
                guid: guid_bytes(&e.guid),
                kind: e.kind,
                topic: e.topic.as_str().to_owned(),
                type_name: e.type_name.as_str().to_owned(),
                type_hash: e.type_hash,
                qos: e.qos,
                partitions: e.partitions.names().to_vec(),
                local,
                node,
            });
        }
        endpoints.sort_unstable_by_key(|e| e.guid);
        let mut matches: Vec<(EndpointGuid, EndpointGuid)> = g
            .matches()
            .into_iter()
            .filter_map(|(w, r)| {
                Some((
                    guid_bytes(&g.endpoint(w)?.guid),
                    guid_bytes(&g.endpoint(r)?.guid),
                ))
            })
            .collect();
        matches.sort_unstable();
        let topics = topics
            .into_iter()
            .map(|(name, (writers, readers))| TopicView {
                counters: TopicName::new(name.as_str())
                    .ok()
                    .and_then(|t| self.counters.get(&t).cloned()),
                name,
                writers,
                readers,
            })
            .collect();
        TopicsView {
            topics,
            endpoints,
            matches,
            rejections: g.rejections().clone(),
            occupancy: Table::ALL
                .iter()
                .map(|&t| {
                    let (o, c) = self.occupancy(t);
                    (t, o, c)
                })
                .collect(),
            match_occupancy: (g.match_count(), self.cfg.max_matches),
            dedup_occupancy: (self.origins.len(), self.cfg.max_dedup_origins),
            reported_occupancy: (self.reported.len(), self.cfg.max_reported_incompatible),
            routes_epoch: self.routes_epoch,
            planner: self.planner.stats(),
        }
    }
}
