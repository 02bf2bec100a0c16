//! Decode outcomes and the typed errors of the codec.
//!
//! **Owns:** the codec's error and status types. **Must not touch:** recovery: the caller decides
//! what a bad frame costs.

/// Outcome of a decode that did not fail: either more input is needed, or a value was decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeStatus<T> {
    /// The buffer does not yet hold a whole frame. `needed` is the total buffer length that would
    /// let decoding progress (5 while the header is incomplete, then `4 + length`).
    NeedMore {
        /// Minimum total number of buffered bytes for the next attempt to make progress.
        needed: usize,
    },
    /// A value was decoded from the first `len` bytes of the buffer.
    Complete {
        /// The decoded value.
        frame: T,
        /// How many bytes of the buffer it occupies; the caller consumes exactly these.
        len: usize,
    },
}

/// Why bytes could not be decoded. Every variant is fatal for a TCP connection (the C++ library
/// drops it too); for a datagram it means "drop this datagram".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The frame `length` field is 0, so there is not even a type byte.
    #[error("frame length is 0: a frame needs at least its type byte")]
    EmptyFrame,
    /// The frame `length` field exceeds the configured maximum (checked before allocating).
    #[error("frame length {len} exceeds the maximum of {max} bytes")]
    TooLarge {
        /// The announced length.
        len: u32,
        /// The configured maximum.
        max: u32,
    },
    /// The frame type byte is not one this node understands.
    #[error("unknown frame type {0}")]
    UnknownFrameType(u8),
    /// A field runs past the end of the frame body or datagram.
    #[error("{field} needs {needed} bytes but only {available} remain")]
    Truncated {
        /// Which field overran.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// A `str` field is not valid UTF-8.
    #[error("{field} is not valid UTF-8")]
    InvalidUtf8 {
        /// Which field.
        field: &'static str,
    },
    /// A boolean flag byte is neither 0 nor 1.
    #[error("{field} flag byte is {value}, expected 0 or 1")]
    BadFlag {
        /// Which field.
        field: &'static str,
        /// The byte found.
        value: u8,
    },
    /// A discovery datagram does not start with `"MMCA"`.
    #[error("bad announce magic {0:02x?}")]
    BadMagic([u8; 4]),
    /// A Discovery Record entry is empty or longer than [`super::MAX_RECORD_ENTRY_LEN`].
    #[error("Discovery record entry of {len} bytes, expected 1..=32768")]
    BadRecordLen {
        /// The entry's `len`.
        len: u16,
    },
    /// A Discovery Withdraw entry does not hold exactly one 16-byte GUID.
    #[error("Discovery withdraw entry of {len} bytes, expected 16")]
    BadWithdrawLen {
        /// The entry's `len`.
        len: u16,
    },
    /// Bytes are left in a topic frame's body after its last entry or sample: the counts and
    /// lengths must fill it exactly (a frame that says less than it carries is not trusted).
    #[error("{frame} frame has {extra} bytes after its last entry")]
    TrailingBytes {
        /// Which frame (`"Discovery"`, `"Samples"`).
        frame: &'static str,
        /// Bytes left over.
        extra: usize,
    },
    /// A Samples frame with `count = 0`.
    #[error("Samples frame carries no sample")]
    EmptySamples,
    /// A Samples frame's `firstSeq` is 0, or its last sequence number
    /// (`firstSeq + count - 1`) does not fit a `u64`.
    #[error("Samples run {first_seq} + {count} is outside the sequence numbers 1..=u64::MAX")]
    BadSampleSeq {
        /// The frame's `firstSeq`.
        first_seq: u64,
        /// The frame's `count`.
        count: u16,
    },
    /// A Samples frame sets flag bits this build does not know.
    #[error("Samples flags {0:#04x}: unknown bits set")]
    UnknownSamplesFlags(u8),
    /// A reliability Heartbeat (`1 ≤ first ≤ last + 1`) or Gap (`1 ≤ first ≤ last`) whose
    /// sequence range is not one.
    #[error("{frame} range {first}..={last} is not a valid sequence range")]
    BadSeqRange {
        /// Which frame (`"Heartbeat"`, `"Gap"`).
        frame: &'static str,
        /// The frame's `first`.
        first: u64,
        /// The frame's `last`.
        last: u64,
    },
    /// An AckNack whose bitmap breaks a rule: more than 256 bits, bits set past `nbits`, a
    /// bitmap on a sync request (`base = 0`), or `base + nbits - 1` beyond `u64::MAX`.
    #[error("malformed AckNack: {0}")]
    BadAckNack(&'static str),
    /// A MembershipDigest frame breaks a rule: an unknown kind, a `legacyHops` out of range,
    /// a Summary with entries, a Versions list whose `count` does not fill the body, or
    /// origins not strictly ascending or all-zero.
    #[error("malformed MembershipDigest: {0}")]
    BadDigest(&'static str),
    /// A Repair frame with `count = 0`.
    #[error("Repair frame carries no sample")]
    EmptyRepair,
    /// A Repair frame's `firstSeq` is 0 or its last sequence number does not fit a `u64`.
    #[error("Repair run {first_seq} + {count} is outside the sequence numbers 1..=u64::MAX")]
    BadRepairSeq {
        /// The frame's `firstSeq`.
        first_seq: u64,
        /// The frame's `count`.
        count: u16,
    },
    /// A Discovery Signature entry (kind 3) that does not hold exactly `key 32 | sig 64`.
    #[error("Discovery signature entry of {len} bytes, expected 96")]
    BadSignatureLen {
        /// The entry's `len`.
        len: u16,
    },
    /// A Discovery Signature entry that is not the frame's last entry.
    #[error("Discovery signature entry is not the last entry")]
    SignatureNotLast,
    /// A SignedMembership frame whose neighbours are not strictly ascending (the signer
    /// sorts them, so a relay re-sends exactly what was signed).
    #[error("SignedMembership neighbours are not strictly ascending")]
    UnsortedNeighbours,
}

/// Why a value could not be encoded. Nothing is written to the output when this is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// A `str` field is longer than 255 bytes.
    #[error("{field} is {len} bytes, a wire str holds at most 255")]
    StrTooLong {
        /// Which field.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// A Membership frame lists more neighbours than its `u16` count can say.
    #[error("{count} neighbours do not fit a u16 count")]
    TooManyNeighbours {
        /// The number of neighbours.
        count: usize,
    },
    /// A Discovery frame holds more entries than its `u16` count can say.
    #[error("{count} entries do not fit a Discovery frame's u16 count")]
    TooManyEntries {
        /// The number of entries.
        count: usize,
    },
    /// A Discovery Record entry is empty or longer than [`super::MAX_RECORD_ENTRY_LEN`].
    #[error("a Discovery record entry of {len} bytes, expected 1..=32768")]
    RecordLen {
        /// The record's length.
        len: usize,
    },
    /// A Samples frame that would not decode: no sample, a sequence number outside
    /// `1..=u64::MAX`, or a body that `count` length-prefixed payloads do not fill exactly.
    #[error("malformed Samples frame: {0}")]
    BadSamples(&'static str),
    /// A reliability frame (Heartbeat, AckNack, Repair, Gap) that would not decode.
    #[error("malformed reliability frame: {0}")]
    BadReliable(&'static str),
    /// A MembershipDigest frame that would not decode (see [`DecodeError::BadDigest`]).
    #[error("malformed MembershipDigest frame: {0}")]
    BadDigest(&'static str),
    /// One sample is too large for a Samples frame within `max_message_bytes`.
    #[error("a sample of {len} bytes does not fit a Samples frame of at most {max} bytes")]
    SampleTooLarge {
        /// The payload's length.
        len: usize,
        /// The frame length bound (`max_message_bytes`).
        max: u32,
    },
    /// The frame body would not fit the `u32` length field.
    #[error("frame of {len} bytes does not fit the u32 length field")]
    FrameTooLarge {
        /// The length the field would need to hold.
        len: usize,
    },
    /// A Discovery Signature entry that is not the frame's last entry.
    #[error("a Discovery signature entry must be the frame's last entry")]
    SignatureNotLast,
    /// A SignedMembership frame whose neighbours are not strictly ascending.
    #[error("SignedMembership neighbours must be strictly ascending")]
    UnsortedNeighbours,
}
