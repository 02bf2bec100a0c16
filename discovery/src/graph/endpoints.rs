//! Endpoints: admission (validation, quotas, the match count checked before anything is
//! written), replacement in place, removal, and the lookups by GUID, id, participant and
//! topic.
//!
//! **Owns:** the endpoint table's changes and the per-topic and per-participant lists.
//! **Must not touch:** how a pair is judged compatible (`matches.rs` and `crate::matching`).

use ahash::AHashSet;

use super::entries::{same_matching_fields, slot, EndpointEntry, TopicEntry};
use super::{AdmitError, DiscoveryGraph, EndpointAdmission, EndpointId, MatchWork, Table};
use crate::footprint::{endpoint_footprint, partition_bytes};
use crate::partition::CompiledPartitions;
use crate::types::{EndpointInfo, EndpointKind, Guid, GuidPrefix};

impl DiscoveryGraph {
    /// Adds one of this process's own endpoints (its participant must have
    /// been added with [`DiscoveryGraph::add_local_participant`]).
    pub fn add_local_endpoint(
        &mut self,
        info: EndpointInfo,
    ) -> Result<EndpointAdmission, AdmitError> {
        self.admit_endpoint_inner(info, true)
    }

    /// Admit-Record for an endpoint announcement from the network. Its
    /// participant must be known first: knowing an endpoint implies having
    /// known its participant.
    pub fn admit_endpoint(&mut self, info: EndpointInfo) -> Result<EndpointAdmission, AdmitError> {
        self.admit_endpoint_inner(info, false)
    }

    fn admit_endpoint_inner(
        &mut self,
        info: EndpointInfo,
        local: bool,
    ) -> Result<EndpointAdmission, AdmitError> {
        let table = match (local, info.kind) {
            (true, _) => Table::LocalEndpoints,
            (false, EndpointKind::Writer) => Table::RemoteWriters,
            (false, EndpointKind::Reader) => Table::RemoteReaders,
        };
        let prefix = info.guid.prefix;
        let Some(&ps) = self.by_prefix.get(&prefix) else {
            return self.reject(AdmitError::UnknownParticipant { table, prefix });
        };
        if self.participants[ps as usize].local != local {
            return self.reject(AdmitError::WrongLocality { table });
        }
        if let Err(source) = info.validate() {
            return self.reject(AdmitError::Invalid { table, source });
        }
        // The seed's Consistent: rejected before it enters any scan.
        if let Err(source) = info.qos.consistent() {
            return self.reject(AdmitError::Inconsistent { table, source });
        }
        // Bounds what preparing this record and matching it against anything can cost.
        let bytes = partition_bytes(&info.partitions);
        let cap = self.config.capacities.endpoint_partition_bytes;
        if bytes > cap {
            return self.reject(AdmitError::PartitionBytes { table, bytes, cap });
        }
        let footprint = endpoint_footprint(&info);
        if let Some(&es) = self.by_guid.get(&info.guid) {
            return self.replace_endpoint(es, info, table, footprint);
        }
        let capacity = self.capacity(table);
        if self.occupancy[table as usize] >= capacity {
            return self.reject(AdmitError::TableFull { table, capacity });
        }
        if !local {
            let quota = self.config.capacities.participant_endpoints;
            if self.participants[ps as usize].endpoints.len() >= quota {
                return self.reject(AdmitError::ParticipantEndpoints {
                    table,
                    prefix,
                    quota,
                });
            }
            self.check_bytes(table, ps, 0, footprint)?;
        }
        // Count-New-Matches before anything is written.
        let parts = CompiledPartitions::new(&info.partitions).map(Box::new);
        let mut work = MatchWork {
            pairs: 0,
            steps: bytes as u64,
        };
        let mut cands = std::mem::take(&mut self.scratch);
        let known_topic = self.by_topic.get(&info.topic).copied();
        let prepared = (&info, parts.as_deref());
        self.candidates(prepared, known_topic, local, None, &mut cands, &mut work);
        self.work.add(work);
        let would_be = self.matched.len() + cands.len();
        if would_be > self.config.capacities.matches {
            cands.clear();
            self.scratch = cands;
            let capacity = self.config.capacities.matches;
            return self.reject(AdmitError::MatchCapacity {
                table,
                would_be,
                capacity,
            });
        }
        // Fresh-Id: spent only now that admission is certain.
        let id = EndpointId(self.next_id);
        self.next_id += 1;
        let guid = info.guid;
        let kind = info.kind;
        let ts = match known_topic {
            Some(ts) => ts,
            None => self.new_topic(&info.topic),
        };
        let es = slot(self.endpoints.vacant_key());
        let pos_in_topic = slot(self.topics[ts as usize].list(kind).len());
        self.topics[ts as usize].list_mut(kind).push(es);
        let pos_in_participant = slot(self.participants[ps as usize].endpoints.len());
        self.participants[ps as usize].endpoints.push(es);
        let inserted = self.endpoints.insert(EndpointEntry {
            id,
            info,
            local,
            participant: ps,
            pos_in_participant,
            topic: ts,
            pos_in_topic,
            footprint: 0,
            matches: Vec::with_capacity(cands.len()),
            parts,
        });
        debug_assert_eq!(slot(inserted), es);
        self.set_footprint(es, footprint);
        self.by_id.insert(id, es);
        self.by_guid.insert(guid, es);
        self.occupancy[table as usize] += 1;
        let mut matched = Vec::with_capacity(cands.len());
        for &peer in &cands {
            self.link(es, peer);
            matched.push(self.endpoints[peer as usize].id);
        }
        cands.clear();
        self.scratch = cands;
        Ok(EndpointAdmission {
            id,
            replaced: false,
            matched,
            unmatched: Vec::new(),
            work,
        })
    }

    /// Refuses a remote record that would take participant `ps`'s endpoints, or all
    /// remote endpoints, past their byte quota once `old` bytes become `new`.
    fn check_bytes(
        &mut self,
        table: Table,
        ps: u32,
        old: usize,
        new: usize,
    ) -> Result<(), AdmitError> {
        if new <= old {
            return Ok(());
        }
        let c = self.config.capacities;
        let p = &self.participants[ps as usize];
        let would_be = p.bytes - old + new;
        if would_be > c.participant_bytes {
            let prefix = p.info.prefix;
            return self.reject(AdmitError::ParticipantBytes {
                table,
                prefix,
                would_be,
                quota: c.participant_bytes,
            });
        }
        let would_be = self.remote_bytes - old + new;
        if would_be > c.remote_endpoint_bytes {
            return self.reject(AdmitError::RemoteBytes {
                table,
                would_be,
                ceiling: c.remote_endpoint_bytes,
            });
        }
        Ok(())
    }

    /// Sets slot `es`'s footprint, keeping its participant's and the remote total in step.
    pub(super) fn set_footprint(&mut self, es: u32, bytes: usize) {
        let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
        let e = &mut self.endpoints[es as usize];
        let old = std::mem::replace(&mut e.footprint, bytes) as usize;
        let (local, ps) = (e.local, e.participant);
        let p = &mut self.participants[ps as usize];
        p.bytes = p.bytes - old + bytes as usize;
        if !local {
            self.remote_bytes = self.remote_bytes - old + bytes as usize;
        }
    }

    pub(super) fn new_topic(&mut self, name: &crate::types::TopicName) -> u32 {
        let ts = slot(self.topics.insert(TopicEntry {
            name: name.clone(),
            writers: Vec::new(),
            readers: Vec::new(),
        }));
        self.by_topic.insert(name.clone(), ts);
        ts
    }

    fn replace_endpoint(
        &mut self,
        es: u32,
        info: EndpointInfo,
        table: Table,
        footprint: usize,
    ) -> Result<EndpointAdmission, AdmitError> {
        let entry = &self.endpoints[es as usize];
        let id = entry.id;
        if entry.info.kind != info.kind {
            let guid = info.guid;
            return self.reject(AdmitError::KindChanged { table, guid });
        }
        let (local, ps, old_bytes) = (entry.local, entry.participant, entry.footprint as usize);
        if !local {
            // A record that grows (more locators, longer names) must fit the quotas too.
            self.check_bytes(table, ps, old_bytes, footprint)?;
        }
        let entry = &self.endpoints[es as usize];
        if same_matching_fields(&entry.info, &info) {
            // A refresh: only addresses may differ. Matches stand.
            self.endpoints[es as usize].info = info;
            self.set_footprint(es, footprint);
            return Ok(EndpointAdmission {
                id,
                replaced: true,
                matched: Vec::new(),
                unmatched: Vec::new(),
                work: MatchWork::default(),
            });
        }
        let same_parts = entry.info.partitions == info.partitions;
        let fresh = if same_parts {
            None
        } else {
            CompiledPartitions::new(&info.partitions).map(Box::new)
        };
        let parts = if same_parts {
            self.endpoints[es as usize].parts.as_deref()
        } else {
            fresh.as_deref()
        };
        let mut work = MatchWork {
            pairs: 0,
            steps: if same_parts {
                0
            } else {
                partition_bytes(&info.partitions) as u64
            },
        };
        let mut cands = std::mem::take(&mut self.scratch);
        let known_topic = self.by_topic.get(&info.topic).copied();
        self.candidates(
            (&info, parts),
            known_topic,
            local,
            Some(es),
            &mut cands,
            &mut work,
        );
        self.work.add(work);
        let new_set: AHashSet<u32> = cands.iter().copied().collect();
        let old: Vec<u32> = self.endpoints[es as usize]
            .matches
            .iter()
            .map(|m| m.peer)
            .collect();
        let old_set: AHashSet<u32> = old.iter().copied().collect();
        let removed = old.iter().filter(|p| !new_set.contains(p)).count();
        let added = cands.iter().filter(|p| !old_set.contains(p)).count();
        let would_be = self.matched.len() - removed + added;
        if added > removed && would_be > self.config.capacities.matches {
            cands.clear();
            self.scratch = cands;
            let capacity = self.config.capacities.matches;
            return self.reject(AdmitError::MatchCapacity {
                table,
                would_be,
                capacity,
            });
        }
        // Unmatch first, walking from the end so positions stay valid.
        let mut unmatched = Vec::with_capacity(removed);
        let mut i = self.endpoints[es as usize].matches.len();
        while i > 0 {
            i -= 1;
            let peer = self.endpoints[es as usize].matches[i].peer;
            if !new_set.contains(&peer) {
                unmatched.push(self.endpoints[peer as usize].id);
                self.unlink(es, i);
            }
        }
        unmatched.reverse();
        if self.endpoints[es as usize].info.topic != info.topic {
            self.detach_from_topic(es);
            // Looked up again: detaching may have removed an emptied topic.
            let ts = match self.by_topic.get(&info.topic) {
                Some(&ts) => ts,
                None => self.new_topic(&info.topic),
            };
            let kind = info.kind;
            let pos = slot(self.topics[ts as usize].list(kind).len());
            self.topics[ts as usize].list_mut(kind).push(es);
            let e = &mut self.endpoints[es as usize];
            e.topic = ts;
            e.pos_in_topic = pos;
        }
        self.endpoints[es as usize].info = info;
        if !same_parts {
            self.endpoints[es as usize].parts = fresh;
        }
        self.set_footprint(es, footprint);
        let mut matched = Vec::with_capacity(added);
        for &peer in &cands {
            if !old_set.contains(&peer) {
                self.link(es, peer);
                matched.push(self.endpoints[peer as usize].id);
            }
        }
        cands.clear();
        self.scratch = cands;
        Ok(EndpointAdmission {
            id,
            replaced: true,
            matched,
            unmatched,
            work,
        })
    }

    pub(super) fn detach_from_topic(&mut self, es: u32) {
        let e = &self.endpoints[es as usize];
        let (ts, pos, kind) = (e.topic, e.pos_in_topic as usize, e.info.kind);
        let topic = &mut self.topics[ts as usize];
        let list = topic.list_mut(kind);
        list.swap_remove(pos);
        if let Some(&moved) = list.get(pos) {
            self.endpoints[moved as usize].pos_in_topic = slot(pos);
        }
        let topic = &self.topics[ts as usize];
        if topic.writers.is_empty() && topic.readers.is_empty() {
            let t = self.topics.remove(ts as usize);
            self.by_topic.remove(&t.name);
        }
    }

    /// Removes the endpoint in slot `es` with its matches; returns its id,
    /// GUID and the number of matches removed.
    pub(super) fn remove_endpoint_slot(&mut self, es: u32) -> (EndpointId, Guid, usize) {
        let n = self.endpoints[es as usize].matches.len();
        self.set_footprint(es, 0);
        // Unlinking the last entry moves nothing within this endpoint's list.
        for i in (0..n).rev() {
            self.unlink(es, i);
        }
        self.detach_from_topic(es);
        let e = self.endpoints.remove(es as usize);
        let plist = &mut self.participants[e.participant as usize].endpoints;
        let pos = e.pos_in_participant as usize;
        plist.swap_remove(pos);
        if let Some(&moved) = plist.get(pos) {
            self.endpoints[moved as usize].pos_in_participant = slot(pos);
        }
        self.by_id.remove(&e.id);
        self.by_guid.remove(&e.info.guid);
        let table = match (e.local, e.info.kind) {
            (true, _) => Table::LocalEndpoints,
            (false, EndpointKind::Writer) => Table::RemoteWriters,
            (false, EndpointKind::Reader) => Table::RemoteReaders,
        };
        self.occupancy[table as usize] -= 1;
        (e.id, e.info.guid, n)
    }

    /// Removes one endpoint (a local deletion or a peer's dispose
    /// announcement): O(1 + its matches). Returns the number of matches
    /// removed, or `None` if unknown.
    pub fn remove_endpoint(&mut self, guid: &Guid) -> Option<usize> {
        let es = *self.by_guid.get(guid)?;
        Some(self.remove_endpoint_slot(es).2)
    }

    /// The id of the endpoint with this GUID.
    pub fn endpoint_id(&self, guid: &Guid) -> Option<EndpointId> {
        self.by_guid
            .get(guid)
            .map(|&es| self.endpoints[es as usize].id)
    }

    /// The record of an endpoint.
    pub fn endpoint(&self, id: EndpointId) -> Option<&EndpointInfo> {
        self.by_id
            .get(&id)
            .map(|&es| &self.endpoints[es as usize].info)
    }

    /// True if the endpoint belongs to a local participant.
    pub fn is_local(&self, id: EndpointId) -> Option<bool> {
        self.by_id
            .get(&id)
            .map(|&es| self.endpoints[es as usize].local)
    }

    /// Number of endpoints stored.
    pub fn endpoint_count(&self) -> usize {
        self.endpoints.len()
    }

    /// Every endpoint id in insertion order. O(E log E).
    pub fn endpoints(&self) -> Vec<EndpointId> {
        let mut v: Vec<EndpointId> = self.endpoints.iter().map(|(_, e)| e.id).collect();
        v.sort_unstable();
        v
    }

    /// Ids of a participant's endpoints, in insertion order.
    pub fn endpoints_of(&self, prefix: &GuidPrefix) -> Vec<EndpointId> {
        let Some(&ps) = self.by_prefix.get(prefix) else {
            return Vec::new();
        };
        let mut v: Vec<EndpointId> = self.participants[ps as usize]
            .endpoints
            .iter()
            .map(|&es| self.endpoints[es as usize].id)
            .collect();
        v.sort_unstable();
        v
    }

    /// Ids of a topic's endpoints of one kind, in insertion order (empty for a topic
    /// nobody uses). O(its endpoints of that kind).
    pub fn topic_endpoints(
        &self,
        topic: &crate::types::TopicName,
        kind: EndpointKind,
    ) -> Vec<EndpointId> {
        let Some(&ts) = self.by_topic.get(topic) else {
            return Vec::new();
        };
        let mut v: Vec<EndpointId> = self.topics[ts as usize]
            .list(kind)
            .iter()
            .map(|&es| self.endpoints[es as usize].id)
            .collect();
        v.sort_unstable();
        v
    }
}
