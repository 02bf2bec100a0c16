//! Build-Announcements and Announce-Cycle: a participant's records, encoded
//! once and resent unchanged.
//!
//! An [`Announcer`] holds the encoded participant record and one encoded
//! record per local endpoint. Records are re-encoded only when the thing
//! they describe changes; every [`Announcer::announce_cycle`] hands out the
//! same [`Bytes`] (a reference-count bump, no allocation, no encoding).
//! Because the cached bytes are immutable, the repeating part cannot start
//! describing an endpoint that is not local, nor alter a policy.
//!
//! Every endpoint is checked to belong to this participant (its GUID prefix
//! is the participant's) before anything is encoded or stored; a foreign
//! endpoint is [`AnnounceError::ForeignEndpoint`].
//!
//! ```
//! use shoal_discovery::announce::{build_announcements, Announcer};
//! use shoal_discovery::types::*;
//!
//! let prefix = GuidPrefix([4; 12]);
//! let p = ParticipantInfo::new(prefix, "node-a");
//! let w = EndpointInfo::new(
//!     Guid::new(prefix, EntityId([0, 0, 1, 2])),
//!     EndpointKind::Writer,
//!     TopicName::new("chatter").unwrap(),
//!     TypeName::new("Text").unwrap(),
//!     TypeHash([5; 16]),
//! );
//! let mut announcer = build_announcements(p, vec![w], 64).unwrap();
//!
//! let mut sent = Vec::new();
//! announcer.announce_cycle(|record| sent.push(record.clone()));
//! assert_eq!(sent.len(), 2); // participant record, then one per endpoint
//!
//! // The next cycle sends the very same buffers.
//! let mut again = Vec::new();
//! announcer.announce_cycle(|record| again.push(record.clone()));
//! assert!(sent.iter().zip(&again).all(|(a, b)| a.as_ptr() == b.as_ptr()));
//! ```

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::record::{encode_endpoint, encode_participant, EncodeError};
use crate::types::{EndpointInfo, Guid, GuidPrefix, ParticipantInfo};

/// Why announcements cannot be built or updated. Nothing is changed when an
/// error is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnnounceError {
    /// The endpoint's GUID prefix is not this participant's.
    #[error("endpoint {endpoint:?} does not belong to participant {participant:?}")]
    ForeignEndpoint {
        /// The refused endpoint.
        endpoint: Guid,
        /// This participant.
        participant: GuidPrefix,
    },
    /// A participant update tried to change the GUID prefix, which would turn
    /// every held endpoint into a foreign one.
    #[error("participant prefix cannot change from {from:?} to {to:?}")]
    PrefixChanged {
        /// Current prefix.
        from: GuidPrefix,
        /// Requested prefix.
        to: GuidPrefix,
    },
    /// The endpoint table is at its configured capacity.
    #[error("announcer holds {capacity} endpoints already")]
    Full {
        /// The capacity.
        capacity: usize,
    },
    /// The same endpoint GUID was given twice to [`build_announcements`].
    #[error("endpoint {0:?} given twice")]
    DuplicateEndpoint(Guid),
    /// The description cannot be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

/// What [`Announcer::upsert_endpoint`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upsert {
    /// A new endpoint, encoded and added.
    Added,
    /// A known endpoint whose description changed: re-encoded.
    Changed,
    /// A known endpoint with an identical description: nothing encoded.
    Unchanged,
}

/// Counters for the announcer's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AnnounceStats {
    /// Records encoded since creation (participant and endpoint).
    pub encodes: u64,
    /// Announce cycles run.
    pub cycles: u64,
    /// Endpoint insertions refused because the table was full.
    pub rejected_full: u64,
    /// Endpoints refused for belonging to another participant.
    pub rejected_foreign: u64,
}

#[derive(Debug)]
struct Entry {
    info: EndpointInfo,
    record: Bytes,
}

/// A local participant's announcements, encoded once.
#[derive(Debug)]
pub struct Announcer {
    participant: ParticipantInfo,
    participant_record: Bytes,
    // Ordered by GUID so every cycle sends in the same order on every machine.
    endpoints: BTreeMap<Guid, Entry>,
    capacity: usize,
    stats: AnnounceStats,
}

/// Build-Announcements: checks that every endpoint is the participant's,
/// then encodes the participant record and one record per endpoint. Either
/// everything is built or nothing is.
///
/// `capacity` bounds the number of endpoints the announcer will ever hold.
pub fn build_announcements(
    participant: ParticipantInfo,
    endpoints: Vec<EndpointInfo>,
    capacity: usize,
) -> Result<Announcer, AnnounceError> {
    // Every check before any encoding: a rejection leaves nothing behind.
    if endpoints.len() > capacity {
        return Err(AnnounceError::Full { capacity });
    }
    let mut seen = std::collections::BTreeSet::new();
    for e in &endpoints {
        check_owner(participant.prefix, e)?;
        if !seen.insert(e.guid) {
            return Err(AnnounceError::DuplicateEndpoint(e.guid));
        }
    }
    let mut a = Announcer::new(participant, capacity)?;
    for info in endpoints {
        let record = encode_endpoint(&info)?;
        a.stats.encodes += 1;
        a.endpoints.insert(info.guid, Entry { info, record });
    }
    Ok(a)
}

fn check_owner(prefix: GuidPrefix, e: &EndpointInfo) -> Result<(), AnnounceError> {
    if e.guid.prefix == prefix {
        Ok(())
    } else {
        Err(AnnounceError::ForeignEndpoint {
            endpoint: e.guid,
            participant: prefix,
        })
    }
}

impl Announcer {
    /// An announcer for `participant` with no endpoints yet, holding at most
    /// `capacity` endpoints.
    pub fn new(participant: ParticipantInfo, capacity: usize) -> Result<Self, AnnounceError> {
        let participant_record = encode_participant(&participant)?;
        Ok(Self {
            participant,
            participant_record,
            endpoints: BTreeMap::new(),
            capacity,
            stats: AnnounceStats {
                encodes: 1,
                ..AnnounceStats::default()
            },
        })
    }

    /// The participant described.
    pub fn participant(&self) -> &ParticipantInfo {
        &self.participant
    }

    /// The encoded participant record.
    pub fn participant_record(&self) -> &Bytes {
        &self.participant_record
    }

    /// The encoded record of one local endpoint.
    pub fn endpoint_record(&self, guid: &Guid) -> Option<&Bytes> {
        self.endpoints.get(guid).map(|e| &e.record)
    }

    /// How many endpoints are announced.
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// True when no endpoint is announced.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// The configured endpoint capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Work counters.
    pub fn stats(&self) -> AnnounceStats {
        self.stats
    }

    /// Replaces the participant's description, re-encoding only if it
    /// differs. Returns whether it was re-encoded. The prefix cannot change.
    pub fn set_participant(&mut self, participant: ParticipantInfo) -> Result<bool, AnnounceError> {
        if participant.prefix != self.participant.prefix {
            return Err(AnnounceError::PrefixChanged {
                from: self.participant.prefix,
                to: participant.prefix,
            });
        }
        if participant == self.participant {
            return Ok(false);
        }
        self.participant_record = encode_participant(&participant)?;
        self.participant = participant;
        self.stats.encodes += 1;
        Ok(true)
    }

    /// Adds a local endpoint or updates its description, re-encoding only
    /// when the description differs from the one held.
    pub fn upsert_endpoint(&mut self, info: EndpointInfo) -> Result<Upsert, AnnounceError> {
        if let Err(e) = check_owner(self.participant.prefix, &info) {
            self.stats.rejected_foreign += 1;
            tracing::warn!(endpoint = ?info.guid, "refused to announce a foreign endpoint");
            return Err(e);
        }
        if let Some(entry) = self.endpoints.get_mut(&info.guid) {
            if entry.info == info {
                return Ok(Upsert::Unchanged);
            }
            entry.record = encode_endpoint(&info)?;
            entry.info = info;
            self.stats.encodes += 1;
            return Ok(Upsert::Changed);
        }
        if self.endpoints.len() >= self.capacity {
            self.stats.rejected_full += 1;
            tracing::debug!(capacity = self.capacity, "announcer endpoint table full");
            return Err(AnnounceError::Full {
                capacity: self.capacity,
            });
        }
        let record = encode_endpoint(&info)?;
        self.stats.encodes += 1;
        self.endpoints.insert(info.guid, Entry { info, record });
        Ok(Upsert::Added)
    }

    /// Stops announcing an endpoint. Returns whether it was held.
    pub fn remove_endpoint(&mut self, guid: &Guid) -> bool {
        self.endpoints.remove(guid).is_some()
    }

    /// Announce-Cycle: hands `send` the participant record, then each
    /// endpoint's record in GUID order — the cached bytes, unchanged. No
    /// encoding, no allocation; cloning a handed-out [`Bytes`] is a
    /// reference-count bump.
    pub fn announce_cycle(&mut self, mut send: impl FnMut(&Bytes)) {
        self.stats.cycles += 1;
        send(&self.participant_record);
        for e in self.endpoints.values() {
            send(&e.record);
        }
    }

    /// The records one cycle sends, in order.
    pub fn records(&self) -> impl Iterator<Item = &Bytes> + '_ {
        std::iter::once(&self.participant_record).chain(self.endpoints.values().map(|e| &e.record))
    }
}
