//! The discovery graph: participants, endpoints, matches, admission, expiry.
//!
//! One data structure, whose slab, per-topic and per-participant lists, both halves of every
//! match and per-participant and remote byte counts must stay consistent, in a file per
//! concern: its limits ([`Capacities`], [`MatchScope`]: `limits.rs`), refusals
//! ([`AdmitError`]: `refusal.rs`) and results ([`EndpointAdmission`], [`Removal`]:
//! `outcome.rs`); the entries it stores (`entries.rs`); the changes to participants
//! (`participants.rs`), endpoints (`endpoints.rs`) and matches (`matches.rs`); and the
//! whole-graph check (`invariants.rs`). The entries' fields and the shared steps are
//! visible to these files only (`pub(super)`), never outside the module. The footprint
//! measure and the pattern matcher it stores live in their own modules.
//!
//! Storage follows the seed (an array of endpoints with hash indexes beside
//! it, a set of matched pairs, readers-of-writer and writers-of-reader) with
//! two changes that remove its O(E) costs:
//!
//! * Endpoints live in stable slots (a slab), so removing one invalidates no
//!   other position and no index needs rebuilding.
//! * Endpoints are also listed per topic, writers and readers apart, so
//!   inserting one compares it only with the opposite kind on its own topic.
//!
//! Every list that can shrink (per-topic, per-participant, match lists)
//! removes by swap with the last element, and each element records where it
//! sits, so removal is O(1) per element. A match is stored once in each
//! endpoint's list, each half pointing at the other's position, so unlinking
//! a match touches two lists and no scan. Costs:
//!
//! * insert: O(endpoints of the opposite kind on its topic + its matches);
//! * remove an endpoint: O(1 + its matches);
//! * expire or remove a participant: O(its endpoints + their matches).
//!
//! Determinism: no output depends on hash iteration order. Endpoint ids are an
//! insertion sequence ([`EndpointId`]); [`DiscoveryGraph::endpoints`] returns
//! them in insertion order; match lists are in the order matches were made,
//! and a removal moves the last entry into the gap, the same way on every
//! machine for the same sequence of operations.

mod endpoints;
mod entries;
mod invariants;
mod limits;
mod matches;
mod outcome;
mod participants;
mod refusal;

pub use limits::{Capacities, GraphConfig, MatchScope, Table};
pub use outcome::{EndpointAdmission, MatchWork, ParticipantAdmission, Removal};
pub use refusal::{AdmitError, RejectCause, RejectionCounters};

use ahash::{AHashMap, AHashSet};
use slab::Slab;
use tracing::debug;

use crate::types::{Guid, GuidPrefix};
use entries::{EndpointEntry, ParticipantEntry, TopicEntry};

/// An admitted endpoint's identity in one graph: its insertion sequence
/// number. Handed out only after admission is certain, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointId(pub u64);

/// The discovery graph of one process: its own participants and endpoints and
/// everything heard about others, with the matches between them.
#[derive(Debug)]
pub struct DiscoveryGraph {
    config: GraphConfig,
    participants: Slab<ParticipantEntry>,
    by_prefix: AHashMap<GuidPrefix, u32>,
    endpoints: Slab<EndpointEntry>,
    by_id: AHashMap<EndpointId, u32>,
    by_guid: AHashMap<Guid, u32>,
    topics: Slab<TopicEntry>,
    by_topic: AHashMap<crate::types::TopicName, u32>,
    /// (writer, reader) pairs: the seed's guard against matching twice.
    matched: AHashSet<(EndpointId, EndpointId)>,
    occupancy: [usize; Table::ALL.len()],
    next_id: u64,
    rejections: RejectionCounters,
    /// Footprint of every remote endpoint, summed.
    remote_bytes: usize,
    /// Matching work of every admission so far.
    work: MatchWork,
    /// Reused buffer for the candidate scan, so admission allocates only
    /// what it stores.
    scratch: Vec<u32>,
}

impl DiscoveryGraph {
    /// An empty graph.
    pub fn new(config: GraphConfig) -> Self {
        Self {
            config,
            participants: Slab::new(),
            by_prefix: AHashMap::default(),
            endpoints: Slab::new(),
            by_id: AHashMap::default(),
            by_guid: AHashMap::default(),
            topics: Slab::new(),
            by_topic: AHashMap::default(),
            matched: AHashSet::default(),
            occupancy: [0; Table::ALL.len()],
            next_id: 0,
            rejections: RejectionCounters::default(),
            remote_bytes: 0,
            work: MatchWork::default(),
            scratch: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &GraphConfig {
        &self.config
    }

    fn capacity(&self, table: Table) -> usize {
        let c = &self.config.capacities;
        match table {
            Table::LocalParticipants => c.local_participants,
            Table::RemoteParticipants => c.remote_participants,
            Table::LocalEndpoints => c.local_endpoints,
            Table::RemoteWriters => c.remote_writers,
            Table::RemoteReaders => c.remote_readers,
        }
    }

    /// Current occupancy of a table.
    pub fn occupancy(&self, table: Table) -> usize {
        self.occupancy[table as usize]
    }

    /// Number of stored matches.
    pub fn match_count(&self) -> usize {
        self.matched.len()
    }

    /// Rejection counters by table and cause.
    pub fn rejections(&self) -> &RejectionCounters {
        &self.rejections
    }

    /// The matching work of every endpoint admission so far, refused ones included:
    /// a caller charging work per origin reads it before and after an admission.
    pub fn match_work(&self) -> MatchWork {
        self.work
    }

    /// Footprint of all remote endpoints ([`crate::footprint::endpoint_footprint`]).
    pub fn remote_endpoint_bytes(&self) -> usize {
        self.remote_bytes
    }

    fn reject<T>(&mut self, e: AdmitError) -> Result<T, AdmitError> {
        debug!(error = %e, "discovery record rejected");
        self.rejections.record(&e);
        Err(e)
    }
}

#[cfg(test)]
mod footprint {
    use std::mem::size_of;

    /// The crate docs state these sizes; growing a struct must update them.
    #[test]
    fn sizes_match_crate_docs() {
        assert!(size_of::<super::entries::EndpointEntry>() <= 304);
        assert_eq!(size_of::<super::entries::MatchRef>(), 8);
        assert_eq!(size_of::<(super::EndpointId, super::EndpointId)>(), 16);
        assert_eq!(size_of::<(super::EndpointId, u32)>(), 16);
        assert_eq!(size_of::<(crate::types::Guid, u32)>(), 20);
        assert!(size_of::<super::entries::TopicEntry>() <= 72);
    }

    /// The footprint's fixed part covers the slot, both index entries at half load,
    /// the two list positions and a topic entry of its own.
    #[test]
    fn footprint_overhead_covers_fixed_costs() {
        let index = 2 * (size_of::<(super::EndpointId, u32)>() + 1)
            + 2 * (size_of::<(crate::types::Guid, u32)>() + 1);
        let fixed = size_of::<super::entries::EndpointEntry>()
            + index
            + 8
            + size_of::<super::entries::TopicEntry>();
        assert!(crate::footprint::ENDPOINT_OVERHEAD >= fixed, "{fixed}");
    }
}

#[cfg(test)]
mod topic_listing {
    use super::*;
    use crate::types::{
        EndpointInfo, EndpointKind, EntityId, ParticipantInfo, TopicName, TypeHash, TypeName,
    };

    fn ep(prefix: GuidPrefix, e: u8, kind: EndpointKind, topic: &str) -> EndpointInfo {
        EndpointInfo::new(
            Guid::new(prefix, EntityId([0, 0, e, 2])),
            kind,
            TopicName::new(topic).unwrap(),
            TypeName::new("T").unwrap(),
            TypeHash([1; 16]),
        )
    }

    #[test]
    fn topic_endpoints_lists_one_kind_of_one_topic() {
        let mut g = DiscoveryGraph::new(GraphConfig::default());
        let p = GuidPrefix([1; 12]);
        g.add_local_participant(ParticipantInfo::new(p, "a"))
            .unwrap();
        let w1 = g
            .add_local_endpoint(ep(p, 1, EndpointKind::Writer, "t"))
            .unwrap()
            .id;
        let r1 = g
            .add_local_endpoint(ep(p, 2, EndpointKind::Reader, "t"))
            .unwrap()
            .id;
        let w2 = g
            .add_local_endpoint(ep(p, 3, EndpointKind::Writer, "t"))
            .unwrap()
            .id;
        g.add_local_endpoint(ep(p, 4, EndpointKind::Writer, "u"))
            .unwrap();
        let t = TopicName::new("t").unwrap();
        assert_eq!(g.topic_endpoints(&t, EndpointKind::Writer), vec![w1, w2]);
        assert_eq!(g.topic_endpoints(&t, EndpointKind::Reader), vec![r1]);
        g.remove_endpoint(&ep(p, 1, EndpointKind::Writer, "t").guid);
        assert_eq!(g.topic_endpoints(&t, EndpointKind::Writer), vec![w2]);
        let none = TopicName::new("none").unwrap();
        assert!(g.topic_endpoints(&none, EndpointKind::Reader).is_empty());
    }
}
