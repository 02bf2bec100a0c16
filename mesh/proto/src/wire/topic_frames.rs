//! Shoal's extended frames for topics (types 9 and 10): the DDS-style discovery records and
//! runs of topic samples. Only links whose peer advertised
//! [`super::Features::EXTENDED_FRAMES`] in its Hello extension ever carry them.
//!
//! **Owns:** the layout of the two topic frames. **Must not touch:** what the records mean
//! (`shoal-discovery`, `topics`) or where samples go (`shard`).
//!
//! # Discovery (type 9), flooded with dedup and a hop limit
//!
//! `origin 16 | seq u64 | ttl u8 | cycle u32 | part u16 | parts u16 | count u16 | entries`
//!
//! each entry `kind u8 | len u16 | value[len]`:
//! - kind 1 **Record**: one `shoal-discovery` record (participant or endpoint), as the origin
//!   encoded it once; `1 ..= 32 768` bytes; the wire layer does not look inside.
//! - kind 2 **Withdraw**: `len = 16`, the GUID of an endpoint the origin removed.
//! - any other kind: skipped (a later version's entry), never an error.
//!
//! `seq` rises by one per frame the origin sends (seeded from its wall clock at start, so a
//! restarted node outranks what it sent before); the flood's dedup key is `(origin, seq)`.
//! `cycle`/`part`/`parts` say which announce cycle the frame belongs to: a receiver that has
//! every part `0..parts` of one cycle knows the origin's complete set of endpoints.
//! `parts = 0` marks a frame outside any cycle (an immediate announcement or withdrawal).
//!
//! # Samples (type 10), sent along the routes of their writer
//!
//! `ttl u8 | flags u8 (0) | writer 16 | firstSeq u64 | count u16 | count × (len u32 | payload)`
//!
//! A run of `count ≥ 1` samples of one writer with the consecutive sequence numbers
//! `firstSeq ..`, `firstSeq ≥ 1`. The lengths fill the body exactly. Unknown flag bits reject
//! the frame.

use bytes::Bytes;

/// Frame type of [`Discovery`].
pub const DISCOVERY_FRAME_TYPE: u8 = 9;
/// Frame type of [`Samples`].
pub const SAMPLES_FRAME_TYPE: u8 = 10;

/// One entry of a [`Discovery`] frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiscoveryEntry {
    /// An encoded `shoal-discovery` record (a slice of the read buffer when decoded).
    Record(Bytes),
    /// The GUID of an endpoint its origin removed.
    Withdraw([u8; 16]),
}

/// A Discovery frame (type 9): a batch of one origin's discovery records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// The node that built the records (the only node allowed to describe its endpoints).
    pub origin: crate::PeerId,
    /// Per-origin frame sequence number: the flood's dedup key with `origin`.
    pub seq: u64,
    /// Remaining hops.
    pub ttl: u8,
    /// The announce cycle this frame belongs to.
    pub cycle: u32,
    /// This frame's index in its cycle.
    pub part: u16,
    /// Frames in the cycle; 0 for a frame outside any cycle.
    pub parts: u16,
    /// The entries, in order.
    pub entries: Vec<DiscoveryEntry>,
}

/// A Samples frame (type 10), decoded without copying: the header fields and the body after
/// the header (`count × (len u32 | payload)`), which [`Samples::payloads`] walks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Samples {
    /// Remaining hops.
    pub ttl: u8,
    /// The writer's GUID (its first 12 bytes are its node's id prefix).
    pub writer: [u8; 16],
    /// Sequence number of the first sample.
    pub first_seq: u64,
    /// Samples in the run (≥ 1).
    pub count: u16,
    /// `count × (len u32 | payload)`, checked to fill exactly.
    pub body: Bytes,
}
