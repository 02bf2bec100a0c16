//! Why a record was refused ([`AdmitError`], [`RejectCause`]) and the counts of refusals by
//! table and cause ([`RejectionCounters`]). A refused record changes nothing in the graph.
//!
//! **Owns:** the refusal types and their counting. **Must not touch:** the graph's storage.

use super::Table;
use crate::qos::QosError;
use crate::types::{Guid, GuidPrefix, TypesError};

/// Why an insertion was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectCause {
    /// The table is at capacity and the key is new.
    TableFull,
    /// The matches the record would create exceed the match capacity.
    MatchCapacity,
    /// A field is out of range.
    Invalid,
    /// The endpoint's policies contradict each other.
    Inconsistent,
    /// The endpoint's participant is not known.
    UnknownParticipant,
    /// A remote record names a local participant, or a local endpoint a
    /// remote one.
    WrongLocality,
    /// A known GUID re-announced as the other endpoint kind.
    KindChanged,
    /// The endpoint's partition names exceed
    /// [`super::Capacities::endpoint_partition_bytes`].
    PartitionBytes,
    /// Its remote participant already has
    /// [`super::Capacities::participant_endpoints`] endpoints.
    ParticipantEndpoints,
    /// Its remote participant's endpoints would exceed
    /// [`super::Capacities::participant_bytes`].
    ParticipantBytes,
    /// All remote endpoints together would exceed
    /// [`super::Capacities::remote_endpoint_bytes`].
    RemoteBytes,
}

impl RejectCause {
    /// Every cause, in counter order.
    pub const ALL: [RejectCause; 11] = [
        Self::TableFull,
        Self::MatchCapacity,
        Self::Invalid,
        Self::Inconsistent,
        Self::UnknownParticipant,
        Self::WrongLocality,
        Self::KindChanged,
        Self::PartitionBytes,
        Self::ParticipantEndpoints,
        Self::ParticipantBytes,
        Self::RemoteBytes,
    ];
}

/// A refused insertion. Nothing in the graph changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    /// The table is full and the key is new.
    #[error("{table:?} full ({capacity})")]
    TableFull {
        /// Table.
        table: Table,
        /// Its capacity.
        capacity: usize,
    },
    /// Admitting would exceed the match capacity.
    #[error("{table:?} record would bring matches to {would_be}, capacity {capacity}")]
    MatchCapacity {
        /// Table of the record.
        table: Table,
        /// Matches after admission.
        would_be: usize,
        /// Match capacity.
        capacity: usize,
    },
    /// A field out of range.
    #[error("{table:?} record invalid: {source}")]
    Invalid {
        /// Table.
        table: Table,
        /// Which field.
        source: TypesError,
    },
    /// Self-contradicting policies.
    #[error("{table:?} record inconsistent: {source}")]
    Inconsistent {
        /// Table.
        table: Table,
        /// Which rule.
        source: QosError,
    },
    /// Endpoint of a participant not (yet) known.
    #[error("{table:?} record of unknown participant {prefix:?}")]
    UnknownParticipant {
        /// Table.
        table: Table,
        /// The unknown prefix.
        prefix: GuidPrefix,
    },
    /// Locality mismatch between record and participant.
    #[error("{table:?} record conflicts with participant locality")]
    WrongLocality {
        /// Table.
        table: Table,
    },
    /// Known GUID re-announced as the other kind.
    #[error("{table:?} record changes endpoint kind of {guid:?}")]
    KindChanged {
        /// Table.
        table: Table,
        /// The GUID.
        guid: Guid,
    },
    /// The partition names are longer in total than the cap. For a remote record this
    /// is a counted rejection, not a protocol error: the sender may run with a larger cap.
    #[error("{table:?} record has {bytes} bytes of partition names, cap {cap}")]
    PartitionBytes {
        /// Table.
        table: Table,
        /// The record's partition bytes.
        bytes: usize,
        /// The cap.
        cap: usize,
    },
    /// The remote participant has as many endpoints as its quota allows.
    #[error("{table:?} record: participant {prefix:?} at its quota of {quota} endpoints")]
    ParticipantEndpoints {
        /// Table.
        table: Table,
        /// The participant.
        prefix: GuidPrefix,
        /// Its quota.
        quota: usize,
    },
    /// The remote participant's endpoints would take more bytes than its quota.
    #[error("{table:?} record: participant {prefix:?} would hold {would_be} bytes, quota {quota}")]
    ParticipantBytes {
        /// Table.
        table: Table,
        /// The participant.
        prefix: GuidPrefix,
        /// Its endpoints' footprint after admission.
        would_be: usize,
        /// Its quota.
        quota: usize,
    },
    /// Remote endpoints together would take more bytes than the ceiling.
    #[error("{table:?} record: remote endpoints would hold {would_be} bytes, ceiling {ceiling}")]
    RemoteBytes {
        /// Table.
        table: Table,
        /// All remote endpoints' footprint after admission.
        would_be: usize,
        /// The ceiling.
        ceiling: usize,
    },
}

impl AdmitError {
    /// The table the record was for.
    pub fn table(&self) -> Table {
        match *self {
            Self::TableFull { table, .. }
            | Self::MatchCapacity { table, .. }
            | Self::Invalid { table, .. }
            | Self::Inconsistent { table, .. }
            | Self::UnknownParticipant { table, .. }
            | Self::WrongLocality { table }
            | Self::KindChanged { table, .. }
            | Self::PartitionBytes { table, .. }
            | Self::ParticipantEndpoints { table, .. }
            | Self::ParticipantBytes { table, .. }
            | Self::RemoteBytes { table, .. } => table,
        }
    }
    /// The cause, for counting.
    pub fn cause(&self) -> RejectCause {
        match self {
            Self::TableFull { .. } => RejectCause::TableFull,
            Self::MatchCapacity { .. } => RejectCause::MatchCapacity,
            Self::Invalid { .. } => RejectCause::Invalid,
            Self::Inconsistent { .. } => RejectCause::Inconsistent,
            Self::UnknownParticipant { .. } => RejectCause::UnknownParticipant,
            Self::WrongLocality { .. } => RejectCause::WrongLocality,
            Self::KindChanged { .. } => RejectCause::KindChanged,
            Self::PartitionBytes { .. } => RejectCause::PartitionBytes,
            Self::ParticipantEndpoints { .. } => RejectCause::ParticipantEndpoints,
            Self::ParticipantBytes { .. } => RejectCause::ParticipantBytes,
            Self::RemoteBytes { .. } => RejectCause::RemoteBytes,
        }
    }
}

/// Rejection counters by table and cause.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RejectionCounters {
    counts: [[u64; RejectCause::ALL.len()]; Table::ALL.len()],
}

impl RejectionCounters {
    /// Rejections of `table` records for `cause`.
    pub fn get(&self, table: Table, cause: RejectCause) -> u64 {
        self.counts[table as usize][cause as usize]
    }
    /// All rejections of `table` records.
    pub fn table_total(&self, table: Table) -> u64 {
        self.counts[table as usize].iter().sum()
    }
    /// All rejections.
    pub fn total(&self) -> u64 {
        self.counts.iter().flatten().sum()
    }
    pub(super) fn record(&mut self, e: &AdmitError) {
        let c = &mut self.counts[e.table() as usize][e.cause() as usize];
        *c = c.saturating_add(1);
    }
}
