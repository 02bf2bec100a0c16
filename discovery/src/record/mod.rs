//! The announcement record format: how a participant and each of its
//! endpoints are described on the wire.
//!
//! Two record kinds exist — one describes a participant, one describes one
//! endpoint. A record is built once ([`encode_participant`],
//! [`encode_endpoint`]) and resent unchanged (see [`crate::announce`]); the
//! receiver turns it back into a [`ParticipantInfo`] or [`EndpointInfo`] with
//! [`decode`].
//!
//! # Rules
//!
//! * **Every policy is written.** The encoder writes all twelve QoS fields of
//!   an endpoint, default-valued ones included, so no policy is ever replaced
//!   by the receiver's idea of a default.
//! * **Absent means default.** A QoS field missing from a record decodes as
//!   that policy's default for the endpoint's kind
//!   ([`EndpointQos::default_for`]); other optional fields take the default
//!   listed below.
//! * **Out of range rejects the record.** A present field whose value is out
//!   of range (a zero deadline, an unknown reliability code, …) rejects the
//!   whole record with [`DecodeError::PolicyOutOfRange`] naming the policy —
//!   it is never replaced by a default.
//! * **Extensible.** Fields are TLVs. An unknown field type is skipped,
//!   unless its must-understand bit ([`MUST_UNDERSTAND`], `0x8000`) is set,
//!   in which case the record is rejected. A known field appearing twice
//!   rejects the record. Known fields may appear in any order.
//! * **Bounded.** A record is at most [`MAX_RECORD_LEN`] bytes and
//!   [`MAX_FIELDS`] fields; names, partitions and locator lists obey
//!   [`MAX_NAME_LEN`], [`MAX_PARTITIONS`] and [`MAX_LOCATORS`]. Anything over
//!   a limit is a typed error on both encode and decode.
//!
//! # Layout (format version 1)
//!
//! All integers are big-endian.
//!
//! Header, 12 bytes:
//!
//! | offset | size | field | value |
//! |---|---|---|---|
//! | 0 | 4 | magic | `"SHRD"` ([`MAGIC`]) |
//! | 4 | 1 | format version | `1` ([`FORMAT_VERSION`]); any other is rejected |
//! | 5 | 1 | record kind | `1` participant, `2` endpoint ([`RecordKind`]) |
//! | 6 | 2 | reserved | written `0`, ignored on read |
//! | 8 | 4 | body length | bytes after the header; must equal what follows exactly |
//!
//! Body: a sequence of fields, each `type: u16, length: u16, value: [u8; length]`.
//!
//! Value encodings used below: `u8`/`u16`/`u32`/`u64`/`i32` big-endian;
//! `bool` is one byte, `0` or `1` (other values rejected); `duration` is a
//! `u64` of nanoseconds, `u64::MAX` meaning infinite; `text` is raw UTF-8
//! filling the whole value (≤ [`MAX_NAME_LEN`] bytes); `locators` is a
//! sequence of 21-byte entries `kind: u8, port: u32, address: [u8; 16]`
//! (≤ [`MAX_LOCATORS`] entries; kinds 1 UDPv4, 2 UDPv6, 4 TCPv4, 8 TCPv6,
//! 16 SHM; an entry of an unknown kind is skipped so new transports do not
//! break old readers); `limit` is `tag: u8` (`0` unlimited, `1` finite)
//! then `u32`.
//!
//! ## Participant record (kind 1) — [`participant_field`]
//!
//! | id | field | value | absent means |
//! |---|---|---|---|
//! | `0x0001` | GUID prefix | `[u8; 12]` | *required* |
//! | `0x0002` | name | text (may be empty) | `""` |
//! | `0x0003` | lease duration | duration, > 0 | 10 s |
//! | `0x0004` | discovery locators | locators | none |
//! | `0x0005` | user locators | locators | none |
//! | `0x0006` | shared memory | bool | `false` |
//! | `0x0008` | started | u64, wall-clock ms since the Unix epoch | not said |
//! | `0x0009` | links | `count: u16`, then per link `peer: [u8; 16], rtt_us: u32, flags: u8` (bit 0: the peer advertised extended frames; other bits ignored) (≤ [`MAX_LINK_REPORTS`]) | none |
//!
//! ## Endpoint record (kind 2) — [`endpoint_field`]
//!
//! | id | field | value | absent means |
//! |---|---|---|---|
//! | `0x0001` | GUID | `[u8; 16]` (prefix, entity) | *required* |
//! | `0x0002` | endpoint kind | u8: `0` writer, `1` reader | *required* |
//! | `0x0003` | topic | text, non-empty | *required* |
//! | `0x0004` | type name | text, non-empty | *required* |
//! | `0x0005` | type hash | `[u8; 16]` | unknown (all zero) |
//! | `0x0006` | partitions | `count: u16`, then per name `len: u16, text` (≤ [`MAX_PARTITIONS`]) | default partition |
//! | `0x0007` | locators | locators | none (use the participant's) |
//! | `0x0101` | reliability | u8 kind (`0` best effort, `1` reliable), duration max blocking time | kind default |
//! | `0x0102` | durability | u8: `0` volatile, `1` transient-local, `2` transient, `3` persistent | volatile |
//! | `0x0103` | deadline | duration period, > 0 | infinite |
//! | `0x0104` | latency budget | duration | zero |
//! | `0x0105` | ownership | u8: `0` shared, `1` exclusive | shared |
//! | `0x0106` | ownership strength | i32 | 0 |
//! | `0x0107` | liveliness | u8 kind (`0` automatic, `1` manual by participant, `2` manual by topic), duration lease, > 0 | automatic, infinite |
//! | `0x0108` | destination order | u8: `0` by reception, `1` by source timestamp | by reception |
//! | `0x0109` | presentation | u8 scope (`0` instance, `1` topic, `2` group), bool coherent, bool ordered | instance, false, false |
//! | `0x010A` | history | u8 kind (`0` keep-last, `1` keep-all), u32 depth (≥ 1 for keep-last, `0` for keep-all) | keep-last 1 |
//! | `0x010B` | resource limits | limit max samples, limit max instances, limit max per instance (finite ≥ 1) | unlimited |
//! | `0x010C` | lifespan | duration, > 0 | infinite |
//!
//! Participant field ids `0x000A..=0x00FF`, endpoint field ids `0x0008..=0x00FF` and `0x010D..=0x7FFF` are free for optional
//! extensions; `0x8000..=0xFFFF` are for extensions an old reader must not
//! ignore.
//!
//! # Example
//!
//! ```
//! use shoal_discovery::record::{decode, encode_endpoint, Record};
//! use shoal_discovery::types::*;
//!
//! let e = EndpointInfo::new(
//!     Guid::new(GuidPrefix([1; 12]), EntityId([0, 0, 1, 2])),
//!     EndpointKind::Writer,
//!     TopicName::new("sensors/imu").unwrap(),
//!     TypeName::new("Imu").unwrap(),
//!     TypeHash([9; 16]),
//! );
//! let bytes = encode_endpoint(&e).unwrap(); // a `bytes::Bytes`, built once
//! assert_eq!(decode(&bytes).unwrap(), Record::Endpoint(e));
//! ```

mod decode;
mod encode;
mod error;
mod wire;

pub use decode::{decode, decode_endpoint, decode_participant};
pub use encode::{encode_endpoint, encode_participant};
pub use error::{DecodeError, EncodeError};
pub use wire::{Field, Fields, RawRecord, RecordWriter};

#[cfg(doc)]
use crate::qos::EndpointQos;
use crate::types::{EndpointInfo, ParticipantInfo};
#[cfg(doc)]
use crate::types::{MAX_LINK_REPORTS, MAX_LOCATORS, MAX_NAME_LEN, MAX_PARTITIONS};

/// The four bytes every record starts with.
pub const MAGIC: [u8; 4] = *b"SHRD";
/// The record format version this crate writes and reads.
pub const FORMAT_VERSION: u8 = 1;
/// Size of the fixed header in bytes.
pub const HEADER_LEN: usize = 12;
/// Size of one field's type and length prefix.
pub const FIELD_HEADER_LEN: usize = 4;
/// Largest record, header included, accepted or produced. The largest valid
/// endpoint record (every name and list at its limit) is about 17.6 KiB;
/// the rest is room for extension fields.
pub const MAX_RECORD_LEN: usize = 32 * 1024;
/// Most fields, known and unknown, one record may hold: bounds the work a
/// record full of tiny unknown fields can cause.
pub const MAX_FIELDS: usize = 128;
/// A field type with this bit set must be understood: unknown ones reject
/// the record instead of being skipped.
pub const MUST_UNDERSTAND: u16 = 0x8000;
/// Size of one encoded locator.
pub const LOCATOR_LEN: usize = 21;

/// Field ids of a participant record.
pub mod participant_field {
    /// GUID prefix, 12 bytes. Required.
    pub const GUID_PREFIX: u16 = 0x0001;
    /// Name, UTF-8.
    pub const NAME: u16 = 0x0002;
    /// Lease duration, nanoseconds.
    pub const LEASE_DURATION: u16 = 0x0003;
    /// Discovery locators.
    pub const DISCOVERY_LOCATORS: u16 = 0x0004;
    /// Default user-traffic locators.
    pub const USER_LOCATORS: u16 = 0x0005;
    /// Shared-memory flag.
    pub const SHARED_MEMORY: u16 = 0x0006;
    /// Start time, wall-clock ms (optional: observers only).
    pub const STARTED: u16 = 0x0008;
    /// The participant's own links with their round-trip times (optional: observers only).
    pub const LINKS: u16 = 0x0009;
    /// Every known id.
    pub const ALL: [u16; 8] = [
        GUID_PREFIX,
        NAME,
        LEASE_DURATION,
        DISCOVERY_LOCATORS,
        USER_LOCATORS,
        SHARED_MEMORY,
        STARTED,
        LINKS,
    ];
    /// Size of one entry of [`LINKS`].
    pub const LINK_REPORT_LEN: usize = 21;
}

/// Field ids of an endpoint record.
pub mod endpoint_field {
    /// GUID, 16 bytes. Required.
    pub const GUID: u16 = 0x0001;
    /// Writer (0) or reader (1). Required.
    pub const KIND: u16 = 0x0002;
    /// Topic name. Required.
    pub const TOPIC: u16 = 0x0003;
    /// Type name. Required.
    pub const TYPE_NAME: u16 = 0x0004;
    /// Type hash, 16 bytes.
    pub const TYPE_HASH: u16 = 0x0005;
    /// Partition names.
    pub const PARTITIONS: u16 = 0x0006;
    /// The endpoint's own locators.
    pub const LOCATORS: u16 = 0x0007;
    /// Reliability policy.
    pub const RELIABILITY: u16 = 0x0101;
    /// Durability policy.
    pub const DURABILITY: u16 = 0x0102;
    /// Deadline policy.
    pub const DEADLINE: u16 = 0x0103;
    /// Latency budget policy.
    pub const LATENCY_BUDGET: u16 = 0x0104;
    /// Ownership kind.
    pub const OWNERSHIP: u16 = 0x0105;
    /// Ownership strength.
    pub const OWNERSHIP_STRENGTH: u16 = 0x0106;
    /// Liveliness policy.
    pub const LIVELINESS: u16 = 0x0107;
    /// Destination order policy.
    pub const DESTINATION_ORDER: u16 = 0x0108;
    /// Presentation policy.
    pub const PRESENTATION: u16 = 0x0109;
    /// History policy.
    pub const HISTORY: u16 = 0x010A;
    /// Resource limits policy.
    pub const RESOURCE_LIMITS: u16 = 0x010B;
    /// Lifespan policy.
    pub const LIFESPAN: u16 = 0x010C;
    /// The twelve QoS field ids.
    pub const QOS: [u16; 12] = [
        RELIABILITY,
        DURABILITY,
        DEADLINE,
        LATENCY_BUDGET,
        OWNERSHIP,
        OWNERSHIP_STRENGTH,
        LIVELINESS,
        DESTINATION_ORDER,
        PRESENTATION,
        HISTORY,
        RESOURCE_LIMITS,
        LIFESPAN,
    ];
    /// Every known id.
    pub const ALL: [u16; 19] = [
        GUID,
        KIND,
        TOPIC,
        TYPE_NAME,
        TYPE_HASH,
        PARTITIONS,
        LOCATORS,
        RELIABILITY,
        DURABILITY,
        DEADLINE,
        LATENCY_BUDGET,
        OWNERSHIP,
        OWNERSHIP_STRENGTH,
        LIVELINESS,
        DESTINATION_ORDER,
        PRESENTATION,
        HISTORY,
        RESOURCE_LIMITS,
        LIFESPAN,
    ];
}

/// Which kind of thing a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// A participant record (code 1).
    Participant,
    /// An endpoint record (code 2).
    Endpoint,
}

impl RecordKind {
    /// The header code.
    pub const fn code(self) -> u8 {
        match self {
            Self::Participant => 1,
            Self::Endpoint => 2,
        }
    }

    /// The kind for a header code.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Participant),
            2 => Some(Self::Endpoint),
            _ => None,
        }
    }
}

/// A decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A participant's description.
    Participant(ParticipantInfo),
    /// One endpoint's description.
    Endpoint(EndpointInfo),
}
