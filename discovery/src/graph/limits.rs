//! What the graph may hold: its tables, their capacities and the bounds on one record and one
//! remote participant ([`Capacities`]), and which pairs it matches ([`MatchScope`]).
//!
//! **Owns:** the configuration's types and defaults. **Must not touch:** the graph's storage.

use crate::qos::QosDuration;

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
