//! What the application hears from the topics core: matched and unmatched pairs with a
//! local side, and incompatible pairs (once each, in a bounded set), computed while the
//! graph still holds both endpoints.
//!
//! **Owns:** the event rules and the reported-incompatible set. **Must not touch:** the
//! graph's matching (it asks `shoal-discovery` which pairs match and why not).

use super::{guid_bytes, LocalSide, TopicEvent, TopicsCore};
use crate::topics::routes::EndpointGuid;
use ahash::AHashSet;
use shoal_discovery::graph::EndpointId;
use shoal_discovery::types::{EndpointKind, Guid};

impl TopicsCore {
    /// Removes endpoints (local or remote) with unmatched events for their pairs with a
    /// local side.
    pub(super) fn remove_endpoints(&mut self, guids: &[Guid]) {
        debug_assert!(
            guids.iter().all(|g| !self.local.contains_key(g))
                || guids.iter().all(|g| self.local.contains_key(g)),
            "a remote frame never removes a local endpoint"
        );
        let ids: Vec<EndpointId> = guids
            .iter()
            .filter_map(|g| self.graph.endpoint_id(g))
            .collect();
        if ids.is_empty() {
            return;
        }
        self.unmatched_events(&ids);
        for g in guids {
            self.graph.remove_endpoint(g);
        }
        let removed: AHashSet<Guid> = guids.iter().copied().collect();
        self.forget_reported(&removed);
        self.changed();
    }

    /// Forgets the reported pairs of `removed` endpoints: the cost is their own pairs, not
    /// every pair reported (a withdrawal costs what that endpoint's pairs cost).
    pub(super) fn forget_reported(&mut self, removed: &AHashSet<Guid>) {
        for g in removed {
            let Some(partners) = self.reported_by.remove(g) else {
                continue;
            };
            for p in partners {
                self.reported.remove(&(*g, p));
                self.reported.remove(&(p, *g));
                if let Some(v) = self.reported_by.get_mut(&p) {
                    v.retain(|x| x != g);
                    if v.is_empty() {
                        self.reported_by.remove(&p);
                    }
                }
            }
        }
    }

    pub(super) fn is_local(&self, id: EndpointId) -> bool {
        self.graph.is_local(id).unwrap_or(false)
    }

    /// Pair event fields for a matched or unmatched (writer, reader).
    pub(super) fn pair(
        &self,
        w: EndpointId,
        r: EndpointId,
    ) -> Option<(EndpointGuid, EndpointGuid, String)> {
        let (wi, ri) = (self.graph.endpoint(w)?, self.graph.endpoint(r)?);
        Some((
            guid_bytes(&wi.guid),
            guid_bytes(&ri.guid),
            wi.topic.as_str().to_owned(),
        ))
    }

    /// Matched events of `id` with each of `peers` (its new matches).
    pub(super) fn matched_events(&mut self, id: EndpointId, peers: &[EndpointId]) {
        let Some(kind) = self.graph.endpoint(id).map(|e| e.kind) else {
            return;
        };
        for &p in peers {
            let (w, r) = match kind {
                EndpointKind::Writer => (id, p),
                EndpointKind::Reader => (p, id),
            };
            if let Some(local) = LocalSide::of(self.is_local(w), self.is_local(r)) {
                if let Some((writer, reader, topic)) = self.pair(w, r) {
                    self.events.push_back(TopicEvent::Matched {
                        writer,
                        reader,
                        topic,
                        local,
                    });
                }
            }
        }
    }

    /// Unmatched events of every match of `ids` with a local side, each pair once, while
    /// the graph still holds them.
    pub(super) fn unmatched_events(&mut self, ids: &[EndpointId]) {
        let mut seen: AHashSet<(EndpointId, EndpointId)> = AHashSet::new();
        for &id in ids {
            let Some(kind) = self.graph.endpoint(id).map(|e| e.kind) else {
                continue;
            };
            let pairs: Vec<(EndpointId, EndpointId)> = match kind {
                EndpointKind::Writer => self.graph.readers_of(id).map(|r| (id, r)).collect(),
                EndpointKind::Reader => self.graph.writers_of(id).map(|w| (w, id)).collect(),
            };
            for (w, r) in pairs {
                self.unmatched_pair(w, r, &mut seen);
            }
        }
    }

    pub(super) fn unmatched_pair(
        &mut self,
        w: EndpointId,
        r: EndpointId,
        seen: &mut AHashSet<(EndpointId, EndpointId)>,
    ) {
        if !seen.insert((w, r)) {
            return;
        }
        if let Some(local) = LocalSide::of(self.is_local(w), self.is_local(r)) {
            if let Some((writer, reader, topic)) = self.pair(w, r) {
                self.events.push_back(TopicEvent::Unmatched {
                    writer,
                    reader,
                    topic,
                    local,
                });
            }
        }
    }

    /// Incompatible events of endpoint `id` with the opposite kind on its topic, for pairs
    /// with a local side not reported yet.
    pub(super) fn incompatible_events(&mut self, id: EndpointId) {
        let Some(info) = self.graph.endpoint(id) else {
            return;
        };
        let (kind, topic) = (info.kind, info.topic.clone());
        let me_local = self.is_local(id);
        let other = match kind {
            EndpointKind::Writer => EndpointKind::Reader,
            EndpointKind::Reader => EndpointKind::Writer,
        };
        for p in self.graph.topic_endpoints(&topic, other) {
            if p == id || (!me_local && !self.is_local(p)) {
                continue;
            }
            let (w, r) = match kind {
                EndpointKind::Writer => (id, p),
                EndpointKind::Reader => (p, id),
            };
            if self.graph.is_matched(w, r) {
                continue;
            }
            let Err(reasons) = self.graph.explain(w, r) else {
                continue;
            };
            let (Some(wi), Some(ri)) = (self.graph.endpoint(w), self.graph.endpoint(r)) else {
                continue;
            };
            let key = (wi.guid, ri.guid);
            if self.reported.contains(&key) {
                continue;
            }
            if self.reported.len() >= self.cfg.max_reported_incompatible {
                self.stats.incompatible_unreported += 1;
                continue;
            }
            self.reported.insert(key);
            self.reported_by.entry(key.0).or_default().push(key.1);
            self.reported_by.entry(key.1).or_default().push(key.0);
            self.events.push_back(TopicEvent::Incompatible {
                writer: guid_bytes(&key.0),
                reader: guid_bytes(&key.1),
                topic: topic.as_str().to_owned(),
                reasons,
            });
        }
    }
}
