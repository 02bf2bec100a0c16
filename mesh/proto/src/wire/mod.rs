//! The multimaster v1 wire codec: scouting beacons and TCP frames, byte for byte as the C++
//! library writes them (`mesh/proto/protocol/v1-wire.md`), plus Shoal's Hello extension block
//! and extended frames (`mesh/proto/protocol/extensions.md`).
//!
//! **Owns:** the multimaster v1 bytes. **Must not touch:** I/O, clocks or crypto.
//!
//! Everything here is pure: no I/O, no clocks, no crypto. Decoders never consume input; they
//! answer [`DecodeStatus::NeedMore`], a typed [`DecodeError`], or a value together with the
//! number of bytes it occupies, so a reader can keep appending to one buffer and consume exactly
//! what was decoded. Encoders append to a caller-owned [`bytes::BufMut`] (`BytesMut`, `Vec<u8>`)
//! and therefore allocate nothing when the buffer already has the capacity.
//!
//! All integers are big-endian. A `str` is a `u8` length followed by that many bytes of UTF-8.
//!
//! # Discovery datagram
//!
//! `"MMCA" | protocolVersion u8 | flags u8 (bit0 = secured) | tcpListenPort u16 | nodeId 16 |
//! groupName str | [MAC 16, secured only]` — see [`Beacon`]. Bytes after the group name (after
//! the MAC when secured) are ignored.
//!
//! # TCP frames
//!
//! `length u32 (bytes after this field) | frameType u8 | body` — see [`Frame`]. A Data frame is
//! `58 + P` bytes on the wire; [`DataHeader`] produces the fixed 58-byte prefix so a writer can
//! send header and payload as one vectored write without copying the payload.
//! A Samples frame is `33 + body` bytes; [`SamplesHeader`] is its fixed prefix.
//!
//! # Shoal Hello extension block
//!
//! The C++ decoder ignores bytes after the last known field of a frame body. Shoal uses that room
//! in Hello and HelloAck (after `hasIdentity`, or after `nodeName` when `hasIdentity = 1`) to
//! tell another Shoal node which extras it understands:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `53484f4c` (`"SHOL"`) |
//! | 4 | 1 | extension version (currently [`SHOAL_EXT_VERSION`] = 1) |
//! | 5 | 8 | feature bits, `u64` ([`Features`]) |
//! | 13 | 2 | `tailLen u16` |
//! | 15 | tailLen | tail: fields added by later extension versions |
//!
//! The first 15 bytes keep this layout in every version; a later version appends new fields in
//! the tail, and an older decoder skips `tailLen` bytes without understanding them. Bytes after
//! the tail are ignored too. An absent extension, a wrong magic, or a block cut short all decode
//! as "no extension" (`Hello::shoal == None`), never as an error: such a peer is treated as a
//! plain multimaster node.
//!
//! Feature bits are only a promise about what the sender understands. A Shoal node must never
//! send a frame type above [`FrameType::MAX_V1`] (8) to a peer that has not advertised
//! [`Features::EXTENDED_FRAMES`]: the C++ library drops the connection on an unknown type.
//! [`peer_accepts_frame_type`] encodes that rule. Shoal advertises it
//! ([`Features::SUPPORTED`]) and defines eight extended frame types, below (the four reliability
//! frames' rules are in the `reliable_frames` source). Type 15 needs a second bit,
//! [`Features::SIGNED_RECORDS`]: a Shoal build that predates it knows types 9 to 14 only and
//! would drop the link on 15. Bit 2, [`Features::AES_GCM_RECORDS`], offers AES-256-GCM
//! records in a secured mesh (`protocol/aes-256-gcm.md`); it changes no frame. Type 16 needs
//! bit 3, [`Features::MEMBERSHIP_DIGEST`] (membership anti-entropy, `protocol/extensions.md`),
//! set per the `membership_digest` setting.
//!
//! # Frame types
//!
//! | type | frame | body | |
//! |---|---|---|---|
//! | 1 | Hello | [`Hello`] (plus Shoal's extension block) | v1 |
//! | 2 | HelloAck | same as Hello | v1 |
//! | 3 | Heartbeat | empty | v1 |
//! | 4 | Data | [`Data`]: `src 16 \| dst 16 \| msgId 16 \| ttl u8 \| payloadLen u32 \| payload` | v1 |
//! | 5 | Goodbye | empty | v1 |
//! | 6 | Membership | [`Membership`]: `origin 16 \| version u64 \| count u16 \| neighbours 16×count` | v1 |
//! | 7 | AuthConfirm | [`AuthConfirm`]: `tag 32 \| hasSig u8 \| [sig 64]` | v1 |
//! | 8 | IdentityRecord | [`IdentityRecord`]: `idPubKey 32 \| version u64 \| sig 64 \| name str` | v1 |
//! | 9 | Discovery | [`Discovery`]: `origin 16 \| seq u64 \| ttl u8 \| cycle u32 \| part u16 \| parts u16 \| count u16 \| entries` | extended |
//! | 10 | Samples | [`Samples`]: `ttl u8 \| flags u8 \| writer 16 \| firstSeq u64 \| count u16 \| count × (len u32 \| payload)` | extended |
//! | 11 | WriterHeartbeat | [`Heartbeat`]: `ttl u8 \| writer 16 \| first u64 \| last u64` | extended |
//! | 12 | AckNack | [`AckNack`]: `ttl u8 \| writer 16 \| reader 16 \| count u32 \| base u64 \| nbits u16 \| bitmap` | extended |
//! | 13 | Repair | [`Repair`]: `ttl u8 \| writer 16 \| reader 16 \| firstSeq u64 \| count u16 \| count × (len u32 \| payload)` | extended |
//! | 14 | Gap | [`Gap`]: `ttl u8 \| writer 16 \| reader 16 \| first u64 \| last u64` | extended |
//! | 15 | SignedMembership | [`SignedMembership`]: `origin 16 \| version u64 \| count u16 \| neighbours 16×count \| key 32 \| sig 64` | extended + signed records |
//! | 16 | MembershipDigest | [`MembershipDigest`]: `kind u8 \| legacyHops u8 \| count u32 \| digest u64 \| [count × (origin 16 \| version u64)]` | extended + membership digest |
//!
//! A v1 body may be followed by bytes the decoder ignores; the extended frames must be
//! filled exactly; entry kinds and the rules of the topic frames are on [`Discovery`] and
//! [`Samples`] (and in the `topic_frames` source), those of the signed records (type 15 and
//! the Discovery Signature entry, kind 3) in the `signed` source and
//! `mesh/proto/protocol/signed-records.md`. [`take_samples`] is the Samples fast lane and
//! [`SamplesHeader`] / [`SampleRunWriter`] write them without copying payloads.

// Files, bottom up (none imports a sibling above it): `error`, `defaults`, `cursor`,
// `frame_type` and `topic_frames` (numbers and layout constants); then the bodies: `data`,
// `hello_ext`, `v1`, `signature`, `discovery`, `samples`, `reliable_frames`, `signed`,
// `digest`; the
// packer `sample_runs`; then `frame`, the framing over all of them. `beacon` (UDP) stands
// apart.
mod beacon;
mod cursor;
mod data;
mod defaults;
mod digest;
mod discovery;
mod error;
mod frame;
mod frame_type;
mod hello_ext;
mod reliable_frames;
mod sample_runs;
mod samples;
mod signature;
mod signed;
mod topic_frames;
mod v1;

pub use beacon::{Beacon, BeaconFilter, BeaconReject, DecodedBeacon};
pub use data::{encode_data_into, Data, DataHeader};
pub use defaults::*;
pub use digest::{
    MembershipDigest, DIGEST_BODY_FIXED, DIGEST_ENTRY_LEN, MAX_DIGEST_ENTRIES, MAX_LEGACY_HOPS,
    NO_LEGACY,
};
pub use discovery::{Discovery, DiscoveryEntry};
pub use error::{DecodeError, DecodeStatus, EncodeError};
pub use frame::{decode_frame, peek_frame_len, take_data, take_frame, Frame};
pub use frame_type::{
    FrameType, ACKNACK_FRAME_TYPE, DISCOVERY_FRAME_TYPE, GAP_FRAME_TYPE,
    MEMBERSHIP_DIGEST_FRAME_TYPE, RELIABLE_HEARTBEAT_FRAME_TYPE, REPAIR_FRAME_TYPE,
    SAMPLES_FRAME_TYPE, SIGNED_MEMBERSHIP_FRAME_TYPE,
};
pub use hello_ext::{
    peer_accepts_frame_type, Features, ShoalExtension, SHOAL_EXT_FIXED_LEN, SHOAL_EXT_MAGIC,
    SHOAL_EXT_VERSION,
};
pub use reliable_frames::{
    AckNack, Gap, Heartbeat, Repair, SeqSet, ACKNACK_BODY_FIXED, GAP_BODY_LEN, HEARTBEAT_BODY_LEN,
    MAX_NACK_BITS, REPAIR_BODY_FIXED,
};
pub use sample_runs::{SampleRunWriter, SampleRuns};
pub use samples::{
    last_seq_of_own_samples, split_own_samples, take_samples, SamplePayloads, SampleSlices,
    Samples, SamplesHeader,
};
pub use signature::{
    RecordSignature, DISCOVERY_SIGNATURE_ENTRY_LEN, ENTRY_KIND_SIGNATURE, SIGNATURE_LEN,
};
pub use signed::{SignedMembership, DISCOVERY_SIGNATURE_LABEL, MEMBERSHIP_SIGNATURE_LABEL};
pub use topic_frames::{
    DISCOVERY_ENTRY_HEADER_LEN, DISCOVERY_HEADER_LEN, ENTRY_KIND_RECORD, ENTRY_KIND_WITHDRAW,
    MAX_RECORD_ENTRY_LEN, SAMPLES_HEADER_LEN, SAMPLES_KNOWN_FLAGS, SAMPLE_LEN_PREFIX,
};
pub use v1::{AuthConfirm, Hello, HelloIdentity, IdentityRecord, Membership};
