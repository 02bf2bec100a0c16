//! The graph's storage entries: a participant, an endpoint, a topic and one half of a match,
//! each kept in a slab and pointing at the others by slot and list position (see the parent
//! module for why).
//!
//! **Owns:** the entry layouts. **Must not touch:** keeping them consistent (the graph's
//! methods do, in the sibling files).

use super::EndpointId;
use crate::partition::CompiledPartitions;
use crate::types::{EndpointInfo, EndpointKind, ParticipantInfo, Time};

/// One half of a match: the peer's slot and where the other half sits in the
/// peer's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MatchRef {
    pub(super) peer: u32,
    pub(super) peer_pos: u32,
}

#[derive(Debug)]
pub(super) struct ParticipantEntry {
    pub(super) info: ParticipantInfo,
    pub(super) local: bool,
    /// When the lease runs out; `Time(u64::MAX)` for infinite or local.
    pub(super) expires_at: Time,
    /// Slots of its endpoints.
    pub(super) endpoints: Vec<u32>,
    /// Their footprint, summed.
    pub(super) bytes: usize,
}

#[derive(Debug)]
pub(super) struct EndpointEntry {
    pub(super) id: EndpointId,
    pub(super) info: EndpointInfo,
    pub(super) local: bool,
    pub(super) participant: u32,
    pub(super) pos_in_participant: u32,
    pub(super) topic: u32,
    pub(super) pos_in_topic: u32,
    /// [`crate::footprint::endpoint_footprint`] of `info`.
    pub(super) footprint: u32,
    pub(super) matches: Vec<MatchRef>,
    /// `info.partitions` prepared for matching (`None`: the default partition).
    pub(super) parts: Option<Box<CompiledPartitions>>,
}

#[derive(Debug)]
pub(super) struct TopicEntry {
    pub(super) name: crate::types::TopicName,
    pub(super) writers: Vec<u32>,
    pub(super) readers: Vec<u32>,
}

impl TopicEntry {
    pub(super) fn list_mut(&mut self, kind: EndpointKind) -> &mut Vec<u32> {
        match kind {
            EndpointKind::Writer => &mut self.writers,
            EndpointKind::Reader => &mut self.readers,
        }
    }
    pub(super) fn list(&self, kind: EndpointKind) -> &[u32] {
        match kind {
            EndpointKind::Writer => &self.writers,
            EndpointKind::Reader => &self.readers,
        }
    }
}

pub(super) fn opposite(kind: EndpointKind) -> EndpointKind {
    match kind {
        EndpointKind::Writer => EndpointKind::Reader,
        EndpointKind::Reader => EndpointKind::Writer,
    }
}

/// The fields whose change can change matches.
pub(super) fn same_matching_fields(a: &EndpointInfo, b: &EndpointInfo) -> bool {
    a.topic == b.topic
        && a.type_name == b.type_name
        && a.type_hash == b.type_hash
        && a.partitions == b.partitions
        && a.qos == b.qos
}

/// Slab keys fit u32 because every table's capacity is far below 2^32.
pub(super) fn slot(k: usize) -> u32 {
    u32::try_from(k).expect("slab key beyond u32: capacities are configured far below")
}
