//! Shoal's extended frames for topics (types 9 and 10): the DDS-style discovery records and
//! runs of topic samples. Only links whose peer advertised
//! [`super::Features::EXTENDED_FRAMES`] in its Hello extension ever carry them.
//!
//! **Owns:** the layout of the two topic frames and its constants (the codecs are in
//! `discovery` and `samples`). **Must not touch:** what the records mean
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
//! - kind 3 **Signature**: `len = 96`, `key 32 | sig 64`, the origin's signature, only as the
//!   last entry (identity mode; layout and covered bytes in the `signed` source).
//! - any other kind: skipped (a later version's entry), never an error.
//!
//! `seq` rises by one per frame the origin sends (seeded from its wall clock at start, so a
//! restarted node outranks what it sent before). A receiver keeps, per origin, the highest
//! `seq` it took and takes a frame only above it (and within a window: a far jump waits for
//! confirmation; `topics::core::origins`), so a copy or an older frame is a duplicate.
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
//!
//! The fixed part, `length u32 | type u8 | ttl .. count` (33 bytes, [`SAMPLES_HEADER_LEN`]),
//! carries everything a relay changes (`ttl`), so it re-sends a run as a fresh
//! [`SamplesHeader`](super::SamplesHeader) followed by the body it received, two slices and
//! no copy. One packer writes runs, [`SampleRuns`](super::SampleRuns): the live writer handle
//! (`shoal_mesh::topics::Writer`) drives it, and the tests and the simulation through
//! [`SampleRunWriter`](super::SampleRunWriter).
//!
//! Unlike the v1 frames, whose decoders ignore bytes after the last field, both topic frames
//! must be filled exactly by their counts and lengths: the `count` of a frame is what its
//! receiver trusts, and a body that says less than it carries is malformed.

/// Discovery entry kind 1: one encoded `shoal-discovery` record.
pub const ENTRY_KIND_RECORD: u8 = 1;
/// Discovery entry kind 2: the GUID of a withdrawn endpoint.
pub const ENTRY_KIND_WITHDRAW: u8 = 2;
/// The longest Record entry (`shoal-discovery` records are bounded well below it).
pub const MAX_RECORD_ENTRY_LEN: usize = 32_768;
/// Bytes of an entry before its value: `kind u8 | len u16`.
pub const DISCOVERY_ENTRY_HEADER_LEN: usize = 1 + 2;
/// Bytes of a Discovery frame without its entries: length prefix, type, and
/// `origin 16 | seq 8 | ttl 1 | cycle 4 | part 2 | parts 2 | count 2`.
pub const DISCOVERY_HEADER_LEN: usize = 4 + 1 + DISCOVERY_BODY_FIXED;
/// Discovery body bytes before the entries.
pub(crate) const DISCOVERY_BODY_FIXED: usize = 16 + 8 + 1 + 4 + 2 + 2 + 2;

/// Bytes of a Samples frame before its first sample: length prefix, type, and
/// `ttl 1 | flags 1 | writer 16 | firstSeq 8 | count 2`.
pub const SAMPLES_HEADER_LEN: usize = 4 + 1 + SAMPLES_BODY_FIXED;
/// Samples body bytes before the first sample.
pub(crate) const SAMPLES_BODY_FIXED: usize = 1 + 1 + 16 + 8 + 2;
/// Bytes before each sample's payload: its `len u32`.
pub const SAMPLE_LEN_PREFIX: usize = 4;
/// The Samples flag bits this build knows (none yet): any other bit rejects the frame.
pub const SAMPLES_KNOWN_FLAGS: u8 = 0;

const _: () = assert!(DISCOVERY_HEADER_LEN == 40);
const _: () = assert!(SAMPLES_HEADER_LEN == 33);
