//! The discovery graph: participants, endpoints, matches, admission, expiry.
//!
//! Length: one data structure: `DiscoveryGraph`'s impl is ~850 lines of code (~985 with docs)
//! that keep the slab, the per-topic and per-participant lists, both halves of every match
//! and the per-participant and remote byte counts consistent; splitting it would expose
//! those private indexes. The footprint measure and the pattern matcher it stores live in
//! their own modules.
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

use ahash::{AHashMap, AHashSet};
use slab::Slab;
use tracing::{debug, info};

use crate::footprint::{endpoint_footprint, partition_bytes};
use crate::matching::{self, Incompatibility};
use crate::partition::CompiledPartitions;
use crate::qos::{QosDuration, QosError};
use crate::types::{
    EndpointInfo, EndpointKind, Guid, GuidPrefix, ParticipantInfo, Time, TypesError,
};

/// An admitted endpoint's identity in one graph: its insertion sequence
/// number. Handed out only after admission is certain, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointId(pub u64);

/// A capacity-limited table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// Participants created locally.
    LocalParticipants,
    /// Participants heard from the network.
    RemoteParticipants,
    /// Writers and readers created locally.
    LocalEndpoints,
    /// Writers heard from the network.
    RemoteWriters,
    /// Readers heard from the network.
    RemoteReaders,
}

impl Table {
    /// Every table, in counter order.
    pub const ALL: [Table; 5] = [
        Self::LocalParticipants,
        Self::RemoteParticipants,
        Self::LocalEndpoints,
        Self::RemoteWriters,
        Self::RemoteReaders,
    ];
}

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
    /// [`Capacities::endpoint_partition_bytes`].
    PartitionBytes,
    /// Its remote participant already has
    /// [`Capacities::participant_endpoints`] endpoints.
    ParticipantEndpoints,
    /// Its remote participant's endpoints would exceed
    /// [`Capacities::participant_bytes`].
    ParticipantBytes,
    /// All remote endpoints together would exceed
    /// [`Capacities::remote_endpoint_bytes`].
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
    fn record(&mut self, e: &AdmitError) {
        let c = &mut self.counts[e.table() as usize][e.cause() as usize];
        *c = c.saturating_add(1);
    }
}

/// Capacity of every table, and the bounds on what one record and one remote
/// participant may hold. Occupancy never exceeds these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacities {
    /// Local participants.
    pub local_participants: usize,
    /// Remote participants.
    pub remote_participants: usize,
    /// Local writers and readers together.
    pub local_endpoints: usize,
    /// Remote writers.
    pub remote_writers: usize,
    /// Remote readers.
    pub remote_readers: usize,
    /// Stored matches (the seed's "local matches": with
    /// [`MatchScope::LocalOnly`] every match has a local side).
    pub matches: usize,
    /// Most bytes of partition names (their text, summed) one endpoint may declare,
    /// local or remote. Bounds what matching one pair can cost. Default 2048.
    pub endpoint_partition_bytes: usize,
    /// Most endpoints one remote participant may have. Default 4096 (a Shoal node's
    /// default `max_local_endpoints`).
    pub participant_endpoints: usize,
    /// Most bytes one remote participant's endpoints may take, as
    /// [`crate::footprint::endpoint_footprint`] counts them. Default 8 MiB.
    pub participant_bytes: usize,
    /// Most bytes all remote endpoints together may take (same measure). Default 128 MiB.
    pub remote_endpoint_bytes: usize,
    /// Longest lease a remote participant is admitted with: a longer one, infinite
    /// included, counts as this. Default 60 s.
    pub max_lease: QosDuration,
}

impl Default for Capacities {
    fn default() -> Self {
        Self {
            local_participants: 16,
            remote_participants: 1024,
            local_endpoints: 4096,
            remote_writers: 65_536,
            remote_readers: 65_536,
            matches: 262_144,
            endpoint_partition_bytes: 2048,
            participant_endpoints: 4096,
            participant_bytes: 8 << 20,
            remote_endpoint_bytes: 128 << 20,
            max_lease: QosDuration::from_secs(60),
        }
    }
}

/// Which pairs the graph matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MatchScope {
    /// Only pairs with at least one local endpoint: what a participant needs.
    #[default]
    LocalOnly,
    /// Every compatible pair, remote-remote included: a global view, for
    /// monitoring tools.
    All,
    /// Every compatible pair but those of two endpoints of one remote participant: what a
    /// node that relays samples for others needs (a remote node's writer and reader meet
    /// on that node; their samples never cross this one), and what keeps one participant
    /// from filling the match table with pairs of its own.
    AcrossParticipants,
}

/// Graph configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GraphConfig {
    /// Table capacities.
    pub capacities: Capacities,
    /// Which pairs are matched.
    pub scope: MatchScope,
}

/// Result of admitting a participant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParticipantAdmission {
    /// A new participant.
    Inserted,
    /// A known participant's record replaced and its lease renewed.
    Refreshed,
}

/// The matching work an admission cost, for a caller that budgets it per origin.
/// Rejected admissions count too ([`DiscoveryGraph::match_work`] sums every one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MatchWork {
    /// Candidate (writer, reader) pairs examined: opposite-kind endpoints on the topic
    /// within the match scope.
    pub pairs: u64,
    /// Partition work: name comparisons plus the bytes they compared, pattern runs in
    /// word steps (one per name byte per 64 pattern states), and bytes compiled.
    pub steps: u64,
}

impl MatchWork {
    /// Pairs and steps as one number: a pair's fixed checks count as one step.
    pub fn units(&self) -> u64 {
        self.pairs.saturating_add(self.steps)
    }
    fn add(&mut self, other: MatchWork) {
        self.pairs = self.pairs.saturating_add(other.pairs);
        self.steps = self.steps.saturating_add(other.steps);
    }
}

/// Result of admitting an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointAdmission {
    /// The endpoint's id in this graph.
    pub id: EndpointId,
    /// True if the GUID was already known and its record replaced in place.
    pub replaced: bool,
    /// Peers newly matched with it, in match order.
    pub matched: Vec<EndpointId>,
    /// Peers no longer matched because the replacement changed policies.
    pub unmatched: Vec<EndpointId>,
    /// What matching it cost (zero for a refresh that changed nothing matchable).
    pub work: MatchWork,
}

/// What a removal or expiry took out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removal {
    /// Participants removed, in prefix order.
    pub participants: Vec<GuidPrefix>,
    /// Endpoints removed, in removal order.
    pub endpoints: Vec<(EndpointId, Guid)>,
    /// Matches removed.
    pub matches: usize,
}

/// One half of a match: the peer's slot and where the other half sits in the
/// peer's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MatchRef {
    peer: u32,
    peer_pos: u32,
}

#[derive(Debug)]
struct ParticipantEntry {
    info: ParticipantInfo,
    local: bool,
    /// When the lease runs out; `Time(u64::MAX)` for infinite or local.
    expires_at: Time,
    /// Slots of its endpoints.
    endpoints: Vec<u32>,
    /// Their footprint, summed.
    bytes: usize,
}

#[derive(Debug)]
struct EndpointEntry {
    id: EndpointId,
    info: EndpointInfo,
    local: bool,
    participant: u32,
    pos_in_participant: u32,
    topic: u32,
    pos_in_topic: u32,
    /// [`endpoint_footprint`] of `info`.
    footprint: u32,
    matches: Vec<MatchRef>,
    /// `info.partitions` prepared for matching (`None`: the default partition).
    parts: Option<Box<CompiledPartitions>>,
}

#[derive(Debug)]
struct TopicEntry {
    name: crate::types::TopicName,
    writers: Vec<u32>,
    readers: Vec<u32>,
}

impl TopicEntry {
    fn list_mut(&mut self, kind: EndpointKind) -> &mut Vec<u32> {
        match kind {
            EndpointKind::Writer => &mut self.writers,
            EndpointKind::Reader => &mut self.readers,
        }
    }
    fn list(&self, kind: EndpointKind) -> &[u32] {
        match kind {
            EndpointKind::Writer => &self.writers,
            EndpointKind::Reader => &self.readers,
        }
    }
}

fn opposite(kind: EndpointKind) -> EndpointKind {
    match kind {
        EndpointKind::Writer => EndpointKind::Reader,
        EndpointKind::Reader => EndpointKind::Writer,
    }
}

/// The fields whose change can change matches.
fn same_matching_fields(a: &EndpointInfo, b: &EndpointInfo) -> bool {
    a.topic == b.topic
        && a.type_name == b.type_name
        && a.type_hash == b.type_hash
        && a.partitions == b.partitions
        && a.qos == b.qos
}

/// Slab keys fit u32 because every table's capacity is far below 2^32.
fn slot(k: usize) -> u32 {
    u32::try_from(k).expect("slab key beyond u32: capacities are configured far below")
}

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

    /// A participant's endpoint count and their footprint in bytes.
    pub fn participant_usage(&self, prefix: &GuidPrefix) -> Option<(usize, usize)> {
        self.by_prefix.get(prefix).map(|&ps| {
            let p = &self.participants[ps as usize];
            (p.endpoints.len(), p.bytes)
        })
    }

    /// The lease a remote participant announcing `lease` is admitted with:
    /// at most [`Capacities::max_lease`].
    pub fn admitted_lease(&self, lease: QosDuration) -> QosDuration {
        // A cap configured at zero would make every record invalid: one nanosecond is
        // the least lease there is.
        lease.min(
            self.config
                .capacities
                .max_lease
                .max(QosDuration::from_nanos(1)),
        )
    }

    /// When a participant's lease runs out (`Time(u64::MAX)`: never, a local one).
    pub fn participant_expiry(&self, prefix: &GuidPrefix) -> Option<Time> {
        self.by_prefix
            .get(prefix)
            .map(|&ps| self.participants[ps as usize].expires_at)
    }

    /// Renews a remote participant's lease as heard at `now` without a new record (its
    /// node proved it lives some other way: a link to it is up) and returns the new
    /// expiry; `None` for an unknown prefix or a local participant. The lease is the one
    /// it was admitted with (capped at [`Capacities::max_lease`]), never longer.
    pub fn renew_participant(&mut self, prefix: &GuidPrefix, now: Time) -> Option<Time> {
        let &ps = self.by_prefix.get(prefix)?;
        let entry = &mut self.participants[ps as usize];
        if entry.local {
            return None;
        }
        entry.expires_at = now.saturating_add(entry.info.lease_duration);
        Some(entry.expires_at)
    }

    fn reject<T>(&mut self, e: AdmitError) -> Result<T, AdmitError> {
        debug!(error = %e, "discovery record rejected");
        self.rejections.record(&e);
        Err(e)
    }

    // ---------------------------------------------------------------- participants

    /// Registers one of this process's own participants. Local participants
    /// never expire.
    pub fn add_local_participant(
        &mut self,
        info: ParticipantInfo,
    ) -> Result<ParticipantAdmission, AdmitError> {
        self.admit_participant_inner(info, true, Time(u64::MAX))
    }

    /// Admit-Record for a participant announcement heard at `now`: a known
    /// prefix is replaced in place and its lease renewed even when the table
    /// is full; a new one needs room. Its lease is capped at
    /// [`Capacities::max_lease`] (the stored record carries the capped lease), so a
    /// participant that stops announcing always expires.
    pub fn admit_participant(
        &mut self,
        mut info: ParticipantInfo,
        now: Time,
    ) -> Result<ParticipantAdmission, AdmitError> {
        info.lease_duration = self.admitted_lease(info.lease_duration);
        let expires_at = now.saturating_add(info.lease_duration);
        self.admit_participant_inner(info, false, expires_at)
    }

    fn admit_participant_inner(
        &mut self,
        info: ParticipantInfo,
        local: bool,
        expires_at: Time,
    ) -> Result<ParticipantAdmission, AdmitError> {
        let table = if local {
            Table::LocalParticipants
        } else {
            Table::RemoteParticipants
        };
        if let Err(source) = info.validate() {
            return self.reject(AdmitError::Invalid { table, source });
        }
        if let Some(&ps) = self.by_prefix.get(&info.prefix) {
            let entry = &mut self.participants[ps as usize];
            if entry.local != local {
                return self.reject(AdmitError::WrongLocality { table });
            }
            entry.info = info;
            entry.expires_at = expires_at;
            return Ok(ParticipantAdmission::Refreshed);
        }
        let capacity = self.capacity(table);
        if self.occupancy[table as usize] >= capacity {
            return self.reject(AdmitError::TableFull { table, capacity });
        }
        let prefix = info.prefix;
        let ps = slot(self.participants.insert(ParticipantEntry {
            info,
            local,
            expires_at,
            endpoints: Vec::new(),
            bytes: 0,
        }));
        self.by_prefix.insert(prefix, ps);
        self.occupancy[table as usize] += 1;
        debug!(?prefix, local, "participant admitted");
        Ok(ParticipantAdmission::Inserted)
    }

    /// The participant with this prefix, if known.
    pub fn participant(&self, prefix: &GuidPrefix) -> Option<&ParticipantInfo> {
        self.by_prefix
            .get(prefix)
            .map(|&ps| &self.participants[ps as usize].info)
    }

    /// True if the prefix belongs to a known participant.
    pub fn knows_participant(&self, prefix: &GuidPrefix) -> bool {
        self.by_prefix.contains_key(prefix)
    }

    /// True if the prefix belongs to a local participant.
    pub fn is_local_participant(&self, prefix: &GuidPrefix) -> bool {
        self.by_prefix
            .get(prefix)
            .is_some_and(|&ps| self.participants[ps as usize].local)
    }

    /// Known participant prefixes, sorted.
    pub fn participant_prefixes(&self) -> Vec<GuidPrefix> {
        let mut v: Vec<GuidPrefix> = self
            .participants
            .iter()
            .map(|(_, p)| p.info.prefix)
            .collect();
        v.sort_unstable();
        v
    }

    /// Removes a participant with all its endpoints and their matches:
    /// O(its endpoints + their matches). `None` if unknown.
    pub fn remove_participant(&mut self, prefix: &GuidPrefix) -> Option<Removal> {
        let mut removal = Removal::default();
        self.remove_participant_into(prefix, &mut removal)
            .then_some(removal)
    }

    fn remove_participant_into(&mut self, prefix: &GuidPrefix, out: &mut Removal) -> bool {
        let Some(ps) = self.by_prefix.remove(prefix) else {
            return false;
        };
        // Popping from the end means no swap inside the participant's list.
        while let Some(&es) = self.participants[ps as usize].endpoints.last() {
            let (id, guid, n) = self.remove_endpoint_slot(es);
            out.endpoints.push((id, guid));
            out.matches += n;
        }
        let entry = self.participants.remove(ps as usize);
        let table = if entry.local {
            Table::LocalParticipants
        } else {
            Table::RemoteParticipants
        };
        self.occupancy[table as usize] -= 1;
        out.participants.push(*prefix);
        true
    }

    /// Removes every remote participant whose lease ended before `now`, with
    /// all their endpoints and matches, in one call. Local participants and
    /// infinite leases never expire.
    pub fn expire(&mut self, now: Time) -> Removal {
        let mut expired: Vec<GuidPrefix> = self
            .participants
            .iter()
            .filter(|(_, p)| !p.local && p.expires_at < now)
            .map(|(_, p)| p.info.prefix)
            .collect();
        expired.sort_unstable();
        let mut removal = Removal::default();
        for prefix in &expired {
            self.remove_participant_into(prefix, &mut removal);
        }
        if !expired.is_empty() {
            info!(
                participants = removal.participants.len(),
                endpoints = removal.endpoints.len(),
                matches = removal.matches,
                "participants expired"
            );
        }
        removal
    }

    // ---------------------------------------------------------------- endpoints

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
    fn set_footprint(&mut self, es: u32, bytes: usize) {
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

    /// Compatible peers for `info` (with its prepared partitions) on its topic, in
    /// topic-list order, adding the work spent to `work`. `exclude` skips the
    /// endpoint's own slot when it is being replaced.
    fn candidates(
        &self,
        (info, parts): (&EndpointInfo, Option<&CompiledPartitions>),
        topic: Option<u32>,
        local: bool,
        exclude: Option<u32>,
        out: &mut Vec<u32>,
        work: &mut MatchWork,
    ) {
        out.clear();
        let Some(ts) = topic else {
            return;
        };
        for &ps in self.topics[ts as usize].list(opposite(info.kind)) {
            if Some(ps) == exclude {
                continue;
            }
            let peer = &self.endpoints[ps as usize];
            if !self.in_scope(&info.guid, local, &peer.info.guid, peer.local) {
                continue;
            }
            work.pairs += 1;
            let pp = peer.parts.as_deref();
            let steps = &mut work.steps;
            let ok = match info.kind {
                EndpointKind::Writer => {
                    matching::compatible_on_topic(info, parts, &peer.info, pp, steps)
                }
                EndpointKind::Reader => {
                    matching::compatible_on_topic(&peer.info, pp, info, parts, steps)
                }
            };
            if ok {
                out.push(ps);
            }
        }
    }

    /// Whether the pair of endpoints `a` and `b` (with their locality) is matched at all
    /// under the graph's scope.
    fn in_scope(&self, a: &Guid, a_local: bool, b: &Guid, b_local: bool) -> bool {
        match self.config.scope {
            MatchScope::All => true,
            MatchScope::LocalOnly => a_local || b_local,
            MatchScope::AcrossParticipants => a_local || b_local || a.prefix != b.prefix,
        }
    }

    fn new_topic(&mut self, name: &crate::types::TopicName) -> u32 {
        let ts = slot(self.topics.insert(TopicEntry {
            name: name.clone(),
            writers: Vec::new(),
            readers: Vec::new(),
        }));
        self.by_topic.insert(name.clone(), ts);
        ts
    }

    fn pair_ids(&self, a: u32, b: u32) -> (EndpointId, EndpointId) {
        let (ea, eb) = (&self.endpoints[a as usize], &self.endpoints[b as usize]);
        match ea.info.kind {
            EndpointKind::Writer => (ea.id, eb.id),
            EndpointKind::Reader => (eb.id, ea.id),
        }
    }

    /// Records a match in both directions and in the matched set.
    fn link(&mut self, a: u32, b: u32) {
        let pair = self.pair_ids(a, b);
        if !self.matched.insert(pair) {
            return;
        }
        let pos_a = slot(self.endpoints[a as usize].matches.len());
        let pos_b = slot(self.endpoints[b as usize].matches.len());
        self.endpoints[a as usize].matches.push(MatchRef {
            peer: b,
            peer_pos: pos_b,
        });
        self.endpoints[b as usize].matches.push(MatchRef {
            peer: a,
            peer_pos: pos_a,
        });
    }

    /// Removes the match at position `i` of slot `s`'s list from both lists
    /// and the matched set, fixing the back-pointers of entries moved by the
    /// swap-removals. O(1).
    fn unlink(&mut self, s: u32, i: usize) {
        let m = self.endpoints[s as usize].matches.swap_remove(i);
        if let Some(&moved) = self.endpoints[s as usize].matches.get(i) {
            self.endpoints[moved.peer as usize].matches[moved.peer_pos as usize].peer_pos = slot(i);
        }
        let pp = m.peer_pos as usize;
        self.endpoints[m.peer as usize].matches.swap_remove(pp);
        if let Some(&moved) = self.endpoints[m.peer as usize].matches.get(pp) {
            self.endpoints[moved.peer as usize].matches[moved.peer_pos as usize].peer_pos =
                slot(pp);
        }
        let pair = self.pair_ids(s, m.peer);
        self.matched.remove(&pair);
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

    fn detach_from_topic(&mut self, es: u32) {
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
    fn remove_endpoint_slot(&mut self, es: u32) -> (EndpointId, Guid, usize) {
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

    // ---------------------------------------------------------------- queries

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

    fn peers(&self, id: EndpointId, kind: EndpointKind) -> impl Iterator<Item = EndpointId> + '_ {
        self.by_id
            .get(&id)
            .filter(|&&es| self.endpoints[es as usize].info.kind == kind)
            .into_iter()
            .flat_map(move |&es| self.endpoints[es as usize].matches.iter())
            .map(move |m| self.endpoints[m.peer as usize].id)
    }

    /// The readers matched with a writer: a single lookup, no search.
    pub fn readers_of(&self, writer: EndpointId) -> impl Iterator<Item = EndpointId> + '_ {
        self.peers(writer, EndpointKind::Writer)
    }

    /// The writers matched with a reader.
    pub fn writers_of(&self, reader: EndpointId) -> impl Iterator<Item = EndpointId> + '_ {
        self.peers(reader, EndpointKind::Reader)
    }

    /// True if the writer and reader are matched.
    pub fn is_matched(&self, writer: EndpointId, reader: EndpointId) -> bool {
        self.matched.contains(&(writer, reader))
    }

    /// Every matched (writer, reader) pair, sorted.
    pub fn matches(&self) -> Vec<(EndpointId, EndpointId)> {
        let mut v: Vec<_> = self.matched.iter().copied().collect();
        v.sort_unstable();
        v
    }

    /// Why two endpoints of this graph are not matched (in either order);
    /// `Ok(())` if they are compatible — and then they are matched.
    pub fn explain(&self, a: EndpointId, b: EndpointId) -> Result<(), Vec<Incompatibility>> {
        let (Some(&sa), Some(&sb)) = (self.by_id.get(&a), self.by_id.get(&b)) else {
            return Err(vec![Incompatibility::UnknownEndpoint]);
        };
        let (ea, eb) = (&self.endpoints[sa as usize], &self.endpoints[sb as usize]);
        let (w, r) = match (ea.info.kind, eb.info.kind) {
            (EndpointKind::Reader, EndpointKind::Writer) => (eb, ea),
            _ => (ea, eb),
        };
        let (wc, rc) = (w.parts.as_deref(), r.parts.as_deref());
        let mut why = match matching::explain_prepared(&w.info, wc, &r.info, rc) {
            Ok(()) => Vec::new(),
            Err(v) => v,
        };
        if !self.in_scope(&w.info.guid, w.local, &r.info.guid, r.local) {
            why.push(match self.config.scope {
                MatchScope::AcrossParticipants => Incompatibility::SameRemoteParticipant,
                _ => Incompatibility::NoLocalSide,
            });
        }
        if why.is_empty() {
            Ok(())
        } else {
            Err(why)
        }
    }

    /// [`DiscoveryGraph::explain`] by GUID: "why don't these match?".
    pub fn why_not_matched(&self, a: &Guid, b: &Guid) -> Result<(), Vec<Incompatibility>> {
        match (self.endpoint_id(a), self.endpoint_id(b)) {
            (Some(a), Some(b)) => self.explain(a, b),
            _ => Err(vec![Incompatibility::UnknownEndpoint]),
        }
    }

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

#[cfg(test)]
mod footprint {
    use std::mem::size_of;

    /// The crate docs state these sizes; growing a struct must update them.
    #[test]
    fn sizes_match_crate_docs() {
        assert!(size_of::<super::EndpointEntry>() <= 304);
        assert_eq!(size_of::<super::MatchRef>(), 8);
        assert_eq!(size_of::<(super::EndpointId, super::EndpointId)>(), 16);
        assert_eq!(size_of::<(super::EndpointId, u32)>(), 16);
        assert_eq!(size_of::<(crate::types::Guid, u32)>(), 20);
        assert!(size_of::<super::TopicEntry>() <= 72);
    }

    /// The footprint's fixed part covers the slot, both index entries at half load,
    /// the two list positions and a topic entry of its own.
    #[test]
    fn footprint_overhead_covers_fixed_costs() {
        let index = 2 * (size_of::<(super::EndpointId, u32)>() + 1)
            + 2 * (size_of::<(crate::types::Guid, u32)>() + 1);
        let fixed = size_of::<super::EndpointEntry>() + index + 8 + size_of::<super::TopicEntry>();
        assert!(crate::footprint::ENDPOINT_OVERHEAD >= fixed, "{fixed}");
    }
}

#[cfg(test)]
mod topic_listing {
    use super::*;
    use crate::types::{EntityId, TopicName, TypeHash, TypeName};

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
