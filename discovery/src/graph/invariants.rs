//! The graph's internal invariants, checked whole: for tests and debugging.
//!
//! **Owns:** the check. **Must not touch:** anything (it only reads).

use super::entries::{slot, MatchRef};
use super::{DiscoveryGraph, Table};
use crate::footprint::{endpoint_footprint, partition_bytes};
use crate::matching;
use crate::partition::CompiledPartitions;
use crate::types::EndpointKind;

impl DiscoveryGraph {
    /// Checks every internal invariant: indexes agree with storage, every
    /// endpoint's participant is known, matches are symmetric, within scope
    /// and compatible, occupancy within capacity. O(E + M). For tests and
    /// debugging; returns the first violation found.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut occ = [0usize; Table::ALL.len()];
        for (_, p) in &self.participants {
            let t = if p.local {
                Table::LocalParticipants
            } else {
                Table::RemoteParticipants
            };
            occ[t as usize] += 1;
            if self.by_prefix.get(&p.info.prefix).is_none() {
                return Err(format!("participant {:?} not indexed", p.info.prefix));
            }
            let bytes: usize = p
                .endpoints
                .iter()
                .map(|&es| self.endpoints[es as usize].footprint as usize)
                .sum();
            if bytes != p.bytes {
                return Err(format!("participant {:?} bytes drifted", p.info.prefix));
            }
            let c = &self.config.capacities;
            if !p.local
                && (p.endpoints.len() > c.participant_endpoints
                    || p.bytes > c.participant_bytes
                    || p.info.lease_duration > self.admitted_lease(p.info.lease_duration))
            {
                return Err(format!("participant {:?} over quota", p.info.prefix));
            }
        }
        let mut remote_bytes = 0usize;
        let mut half_matches = 0usize;
        for (k, e) in &self.endpoints {
            let es = slot(k);
            let t = match (e.local, e.info.kind) {
                (true, _) => Table::LocalEndpoints,
                (false, EndpointKind::Writer) => Table::RemoteWriters,
                (false, EndpointKind::Reader) => Table::RemoteReaders,
            };
            occ[t as usize] += 1;
            if !e.local {
                remote_bytes += e.footprint as usize;
            }
            let footprint = u32::try_from(endpoint_footprint(&e.info)).unwrap_or(u32::MAX);
            if e.footprint != footprint
                || e.parts.as_deref() != CompiledPartitions::new(&e.info.partitions).as_ref()
                || partition_bytes(&e.info.partitions)
                    > self.config.capacities.endpoint_partition_bytes
            {
                return Err(format!("endpoint {:?} footprint or partitions stale", e.id));
            }
            if self.by_id.get(&e.id) != Some(&es) || self.by_guid.get(&e.info.guid) != Some(&es) {
                return Err(format!("endpoint {:?} index mismatch", e.id));
            }
            let Some(p) = self.participants.get(e.participant as usize) else {
                return Err(format!("endpoint {:?} before its participant", e.id));
            };
            if p.info.prefix != e.info.guid.prefix
                || p.endpoints.get(e.pos_in_participant as usize) != Some(&es)
                || self.by_prefix.get(&e.info.guid.prefix) != Some(&e.participant)
            {
                return Err(format!("endpoint {:?} participant link broken", e.id));
            }
            let topic = &self.topics[e.topic as usize];
            if topic.name != e.info.topic
                || topic.list(e.info.kind).get(e.pos_in_topic as usize) != Some(&es)
            {
                return Err(format!("endpoint {:?} topic link broken", e.id));
            }
            for (i, m) in e.matches.iter().enumerate() {
                half_matches += 1;
                let Some(peer) = self.endpoints.get(m.peer as usize) else {
                    return Err(format!("endpoint {:?} matched with a vacant slot", e.id));
                };
                let back = peer.matches.get(m.peer_pos as usize);
                if back
                    != Some(&MatchRef {
                        peer: es,
                        peer_pos: slot(i),
                    })
                {
                    return Err(format!("match {:?}-{:?} not symmetric", e.id, peer.id));
                }
                let (w, r) = match e.info.kind {
                    EndpointKind::Writer => (e, peer),
                    EndpointKind::Reader => (peer, e),
                };
                if !self.matched.contains(&(w.id, r.id)) || !matching::compatible(&w.info, &r.info)
                {
                    return Err(format!(
                        "match {:?}-{:?} not recorded or incompatible",
                        w.id, r.id
                    ));
                }
                if !self.in_scope(&w.info.guid, w.local, &r.info.guid, r.local) {
                    return Err(format!("match {:?}-{:?} out of scope", w.id, r.id));
                }
            }
        }
        if remote_bytes != self.remote_bytes
            || remote_bytes > self.config.capacities.remote_endpoint_bytes
        {
            return Err(format!(
                "remote bytes {} != counted {remote_bytes}",
                self.remote_bytes
            ));
        }
        if half_matches != 2 * self.matched.len() {
            return Err(format!(
                "{} match halves for {} matches",
                half_matches,
                self.matched.len()
            ));
        }
        if occ != self.occupancy {
            return Err(format!(
                "occupancy {:?} != counted {:?}",
                self.occupancy, occ
            ));
        }
        for t in Table::ALL {
            if occ[t as usize] > self.capacity(t) {
                return Err(format!("{t:?} over capacity"));
            }
        }
        if self.matched.len() > self.config.capacities.matches {
            return Err("matches over capacity".into());
        }
        for (_, t) in &self.topics {
            if t.writers.is_empty() && t.readers.is_empty() {
                return Err(format!("empty topic {:?} kept", t.name));
            }
        }
        Ok(())
    }
}
