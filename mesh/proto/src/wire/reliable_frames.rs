//! Shoal's extended frames for reliable topics (types 11 to 14): the writer's heartbeat, the
//! reader's acknowledgement with its repair requests, the resent samples and the "never
//! coming" notice. Only links whose peer advertised [`super::Features::EXTENDED_FRAMES`] ever
//! carry them. What they mean is `crate::reliable`'s; this file is their bytes.
//!
//! **Owns:** the layout, value types, encoders and decoders of the four reliability frames.
//! **Must not touch:** what a writer or reader does with them (`reliable`) or where they are
//! routed (`shard`, `control`).
//!
//! All integers are big-endian; each body must be filled exactly (bytes left over, or a body
//! cut short, is a [`DecodeError`]). None of the four has a flags field, so there are no flag
//! bits to reject: a later version that needs one defines a new frame type.
//!
//! # Heartbeat (type 11), downstream along the writer's tree
//!
//! `ttl u8 | writer 16 | first u64 | last u64` (33 bytes of body)
//!
//! The writer's node still holds the sequence numbers `first ..= last`; `first = last + 1`
//! says it holds none, `last = 0` that nothing was written yet. Valid: `1 ≤ first ≤ last + 1`.
//!
//! # AckNack (type 12), upstream toward the writer's node
//!
//! `ttl u8 | writer 16 | reader 16 | count u32 | base u64 | nbits u16 | bitmap[ceil(nbits/8)]`
//!
//! The reader holds every sequence number below `base`; bit `i` of the bitmap (most significant
//! bit first in each byte) set means `base + i` is missing and requested. `nbits ≤ 256`; the
//! bits of the last byte past `nbits` must be 0 (so a frame has one encoding);
//! `base + nbits - 1` must fit a `u64`. `count` rises by one per AckNack the reader sends.
//! `base = 0` is a reader's *sync request* (it has not started yet) and carries no bits
//! (`nbits = 0`).
//!
//! # Repair (type 13), downstream to one reader
//!
//! `ttl u8 | writer 16 | reader 16 | firstSeq u64 | count u16 | count × (len u32 | payload)`
//!
//! Samples `firstSeq ..= firstSeq + count - 1` resent for `reader`, in the Samples run layout:
//! `count ≥ 1`, `firstSeq ≥ 1`, no overflow, lengths filling the body exactly. Decoded without
//! copying: the body is one slice of the read buffer, walked lazily by [`Repair::payloads`].
//!
//! # Gap (type 14), downstream to one reader
//!
//! `ttl u8 | writer 16 | reader 16 | first u64 | last u64` (49 bytes of body)
//!
//! The samples `first ..= last` will never come for `reader`. Valid: `1 ≤ first ≤ last`.

use super::cursor::Cursor;
use super::defaults::FRAME_HEADER_LEN;
use super::error::{DecodeError, EncodeError};
use super::samples::{check_run, RunNames, SamplePayloads};
use bytes::{BufMut, Bytes};
use std::ops::Range;

/// Heartbeat body bytes: `ttl 1 | writer 16 | first 8 | last 8`.
pub const HEARTBEAT_BODY_LEN: usize = 1 + 16 + 8 + 8;
/// AckNack body bytes before the bitmap: `ttl 1 | writer 16 | reader 16 | count 4 | base 8 |
/// nbits 2`.
pub const ACKNACK_BODY_FIXED: usize = 1 + 16 + 16 + 4 + 8 + 2;
/// Repair body bytes before the first sample: `ttl 1 | writer 16 | reader 16 | firstSeq 8 |
/// count 2`.
pub const REPAIR_BODY_FIXED: usize = 1 + 16 + 16 + 8 + 2;
/// Gap body bytes: `ttl 1 | writer 16 | reader 16 | first 8 | last 8`.
pub const GAP_BODY_LEN: usize = 1 + 16 + 16 + 8 + 8;
/// The most sequence numbers one AckNack can request.
pub const MAX_NACK_BITS: u16 = 256;

const REPAIR_RUN: RunNames = RunNames {
    frame: "Repair",
    len: "Repair.len",
    payload: "Repair.payload",
};

/// A small fixed bitmap of up to [`MAX_NACK_BITS`] offsets from an AckNack's `base`: the
/// missing sequence numbers `base + offset`. `nbits` is how many bits go on the wire
/// (`ceil(nbits / 8)` bytes); inserting raises it to cover the offset. No allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SeqSet {
    bits: [u64; 4],
    nbits: u16,
}

impl SeqSet {
    /// The empty set (`nbits = 0`).
    pub const fn new() -> SeqSet {
        SeqSet {
            bits: [0; 4],
            nbits: 0,
        }
    }

    /// Adds `offset`; false (and nothing changes) when it is not below [`MAX_NACK_BITS`].
    pub fn insert(&mut self, offset: u16) -> bool {
        if offset >= MAX_NACK_BITS {
            return false;
        }
        self.bits[usize::from(offset / 64)] |= 1 << (offset % 64);
        self.nbits = self.nbits.max(offset + 1);
        true
    }

    /// Removes `offset` (`nbits` stays).
    pub fn remove(&mut self, offset: u16) {
        if offset < MAX_NACK_BITS {
            self.bits[usize::from(offset / 64)] &= !(1 << (offset % 64));
        }
    }

    /// Whether `offset` is in the set.
    pub fn contains(&self, offset: u16) -> bool {
        offset < MAX_NACK_BITS && self.bits[usize::from(offset / 64)] >> (offset % 64) & 1 == 1
    }

    /// The offsets in the set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.nbits).filter(move |&i| self.contains(i))
    }

    /// The lowest offset in the set.
    pub fn first(&self) -> Option<u16> {
        self.bits
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i as u16 * 64 + w.trailing_zeros() as u16)
    }

    /// How many offsets are in the set.
    pub fn len(&self) -> u32 {
        self.bits.iter().map(|w| w.count_ones()).sum()
    }

    /// True when no offset is in the set.
    pub fn is_empty(&self) -> bool {
        self.bits == [0; 4]
    }

    /// The bitmap length on the wire, in bits.
    pub fn nbits(&self) -> u16 {
        self.nbits
    }

    fn bitmap_len(&self) -> usize {
        usize::from(self.nbits).div_ceil(8)
    }

    fn put<B: BufMut>(&self, out: &mut B) {
        out.put_u16(self.nbits);
        for byte in 0..self.bitmap_len() {
            let mut b = 0u8;
            for bit in 0..8 {
                if self.contains((byte * 8 + bit) as u16) {
                    b |= 0x80 >> bit;
                }
            }
            out.put_u8(b);
        }
    }

    fn decode(c: &mut Cursor<'_>) -> Result<SeqSet, DecodeError> {
        let nbits = c.u16("AckNack.nbits")?;
        if nbits > MAX_NACK_BITS {
            return Err(DecodeError::BadAckNack("nbits above 256"));
        }
        let mut set = SeqSet {
            bits: [0; 4],
            nbits,
        };
        let map = c.take(set.bitmap_len(), "AckNack.bitmap")?;
        for (byte, b) in map.iter().enumerate() {
            for bit in 0..8 {
                if b & (0x80 >> bit) != 0 {
                    let i = (byte * 8 + bit) as u16;
                    if i >= nbits {
                        return Err(DecodeError::BadAckNack("bits set past nbits"));
                    }
                    set.bits[usize::from(i / 64)] |= 1 << (i % 64);
                }
            }
        }
        Ok(set)
    }
}

/// A reliable writer's heartbeat (type 11): its node holds `first ..= last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    /// Remaining hops.
    pub ttl: u8,
    /// The writer's GUID.
    pub writer: [u8; 16],
    /// The first sequence number still held (`last + 1`: none held).
    pub first: u64,
    /// The highest sequence number written (0: none yet).
    pub last: u64,
}

/// A reliable reader's acknowledgement (type 12): it holds everything below `base` and asks
/// for the sequence numbers in `missing` (offsets from `base`). `base = 0`: sync request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckNack {
    /// Remaining hops.
    pub ttl: u8,
    /// The writer acknowledged.
    pub writer: [u8; 16],
    /// The acknowledging reader's GUID.
    pub reader: [u8; 16],
    /// Rises by one per AckNack the reader sends.
    pub count: u32,
    /// Every sequence number below it is held; 0 = not started (sync request).
    pub base: u64,
    /// Requested sequence numbers, as offsets from `base`.
    pub missing: SeqSet,
}

impl AckNack {
    /// The requested sequence numbers, ascending.
    pub fn missing_seqs(&self) -> impl Iterator<Item = u64> + '_ {
        self.missing.iter().map(move |i| self.base + u64::from(i))
    }

    /// Requests `seq`; false when it is outside `base .. base + 256` (nothing changes).
    pub fn request(&mut self, seq: u64) -> bool {
        match seq.checked_sub(self.base) {
            Some(off) if off < u64::from(MAX_NACK_BITS) && self.base != 0 => {
                self.missing.insert(off as u16)
            }
            _ => false,
        }
    }

    /// Whether this is a sync request (`base = 0`).
    pub fn is_sync(&self) -> bool {
        self.base == 0
    }

    fn check(base: u64, missing: &SeqSet) -> Result<(), DecodeError> {
        if base == 0 && missing.nbits() != 0 {
            return Err(DecodeError::BadAckNack(
                "a sync request (base 0) with a bitmap",
            ));
        }
        if missing.nbits() > 0 && base.checked_add(u64::from(missing.nbits()) - 1).is_none() {
            return Err(DecodeError::BadAckNack("base + nbits beyond u64::MAX"));
        }
        Ok(())
    }

    fn body_len(&self) -> usize {
        ACKNACK_BODY_FIXED + self.missing.bitmap_len()
    }
}

/// Resent samples for one reader (type 13), decoded without copying like
/// [`super::Samples`]: `body` is `count × (len u32 | payload)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// Remaining hops.
    pub ttl: u8,
    /// The writer's GUID.
    pub writer: [u8; 16],
    /// The reader the samples are for.
    pub reader: [u8; 16],
    /// Sequence number of the first sample.
    pub first_seq: u64,
    /// Samples in the frame (≥ 1).
    pub count: u16,
    /// `count × (len u32 | payload)`, checked to fill exactly.
    pub body: Bytes,
}

impl Repair {
    /// A Repair of `payloads` (1 ..= `u16::MAX`) numbered from `first_seq`, copied into one
    /// new body (one allocation per frame, none per sample).
    pub fn new<I>(
        ttl: u8,
        writer: [u8; 16],
        reader: [u8; 16],
        first_seq: u64,
        payloads: I,
    ) -> Result<Repair, EncodeError>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let (body, count) = super::samples::pack_payloads(payloads)?;
        let count = u16::try_from(count)
            .map_err(|_| EncodeError::BadReliable("Repair of more than u16::MAX samples"))?;
        let r = Repair {
            ttl,
            writer,
            reader,
            first_seq,
            count,
            body,
        };
        r.validate()?;
        Ok(r)
    }

    /// The payloads in order, each a slice of [`body`](Self::body) (no copy).
    pub fn payloads(&self) -> SamplePayloads<'_> {
        SamplePayloads::over(&self.body, self.count)
    }

    /// The sequence number of the last sample.
    pub fn last_seq(&self) -> u64 {
        self.first_seq
            .wrapping_add(u64::from(self.count))
            .wrapping_sub(1)
    }

    fn validate(&self) -> Result<(), EncodeError> {
        check_repair_head(self.first_seq, self.count)
            .and_then(|()| check_run(&self.body, self.count, REPAIR_RUN))
            .map_err(|e| {
                EncodeError::BadReliable(match e {
                    DecodeError::EmptyRepair => "Repair of no sample",
                    DecodeError::BadRepairSeq { .. } => "Repair outside 1..=u64::MAX",
                    _ => "Repair body is not `count` length-prefixed payloads",
                })
            })
    }
}

fn check_repair_head(first_seq: u64, count: u16) -> Result<(), DecodeError> {
    if count == 0 {
        return Err(DecodeError::EmptyRepair);
    }
    if first_seq == 0 || first_seq.checked_add(u64::from(count) - 1).is_none() {
        return Err(DecodeError::BadRepairSeq { first_seq, count });
    }
    Ok(())
}

/// Samples `first ..= last` will never come for `reader` (type 14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// Remaining hops.
    pub ttl: u8,
    /// The writer's GUID.
    pub writer: [u8; 16],
    /// The reader told.
    pub reader: [u8; 16],
    /// First sequence number never coming (≥ 1).
    pub first: u64,
    /// Last sequence number never coming (≥ `first`).
    pub last: u64,
}

fn check_heartbeat(first: u64, last: u64) -> Result<(), DecodeError> {
    if first == 0 || u128::from(first) > u128::from(last) + 1 {
        return Err(DecodeError::BadSeqRange {
            frame: "Heartbeat",
            first,
            last,
        });
    }
    Ok(())
}

fn check_gap(first: u64, last: u64) -> Result<(), DecodeError> {
    if first == 0 || first > last {
        return Err(DecodeError::BadSeqRange {
            frame: "Gap",
            first,
            last,
        });
    }
    Ok(())
}

fn exact(c: &Cursor<'_>, frame: &'static str) -> Result<(), DecodeError> {
    match c.remaining() {
        0 => Ok(()),
        extra => Err(DecodeError::TrailingBytes { frame, extra }),
    }
}

/// One of the four frames, as `frame.rs` encodes and decodes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReliableFrame<'a> {
    Heartbeat(&'a Heartbeat),
    AckNack(&'a AckNack),
    Repair(&'a Repair),
    Gap(&'a Gap),
}

impl ReliableFrame<'_> {
    /// Bytes after the type byte.
    pub(crate) fn body_len(&self) -> usize {
        match self {
            ReliableFrame::Heartbeat(_) => HEARTBEAT_BODY_LEN,
            ReliableFrame::AckNack(a) => a.body_len(),
            ReliableFrame::Repair(r) => REPAIR_BODY_FIXED + r.body.len(),
            ReliableFrame::Gap(_) => GAP_BODY_LEN,
        }
    }

    /// Checks what the decoder would reject, so an encoded frame always decodes.
    pub(crate) fn validate(&self) -> Result<(), EncodeError> {
        let bad = |_| EncodeError::BadReliable("fields the decoder rejects");
        match self {
            ReliableFrame::Heartbeat(h) => check_heartbeat(h.first, h.last).map_err(bad),
            ReliableFrame::AckNack(a) => AckNack::check(a.base, &a.missing).map_err(bad),
            ReliableFrame::Repair(r) => r.validate(),
            ReliableFrame::Gap(g) => check_gap(g.first, g.last).map_err(bad),
        }
    }

    /// Writes the body (after the type byte) of a validated frame.
    pub(crate) fn encode_body<B: BufMut>(&self, out: &mut B) {
        match self {
            ReliableFrame::Heartbeat(h) => {
                out.put_u8(h.ttl);
                out.put_slice(&h.writer);
                out.put_u64(h.first);
                out.put_u64(h.last);
            }
            ReliableFrame::AckNack(a) => {
                out.put_u8(a.ttl);
                out.put_slice(&a.writer);
                out.put_slice(&a.reader);
                out.put_u32(a.count);
                out.put_u64(a.base);
                a.missing.put(out);
            }
            ReliableFrame::Repair(r) => {
                out.put_u8(r.ttl);
                out.put_slice(&r.writer);
                out.put_slice(&r.reader);
                out.put_u64(r.first_seq);
                out.put_u16(r.count);
                out.put_slice(&r.body);
            }
            ReliableFrame::Gap(g) => {
                out.put_u8(g.ttl);
                out.put_slice(&g.writer);
                out.put_slice(&g.reader);
                out.put_u64(g.first);
                out.put_u64(g.last);
            }
        }
    }
}

impl Heartbeat {
    pub(crate) fn decode_body(body: &[u8]) -> Result<Heartbeat, DecodeError> {
        let mut c = Cursor::new(body);
        let h = Heartbeat {
            ttl: c.u8("Heartbeat.ttl")?,
            writer: c.array("Heartbeat.writer")?,
            first: c.u64("Heartbeat.first")?,
            last: c.u64("Heartbeat.last")?,
        };
        check_heartbeat(h.first, h.last)?;
        exact(&c, "Heartbeat")?;
        Ok(h)
    }
}

impl AckNack {
    pub(crate) fn decode_body(body: &[u8]) -> Result<AckNack, DecodeError> {
        let mut c = Cursor::new(body);
        let ttl = c.u8("AckNack.ttl")?;
        let writer = c.array("AckNack.writer")?;
        let reader = c.array("AckNack.reader")?;
        let count = c.u32("AckNack.count")?;
        let base = c.u64("AckNack.base")?;
        let missing = SeqSet::decode(&mut c)?;
        AckNack::check(base, &missing)?;
        exact(&c, "AckNack")?;
        Ok(AckNack {
            ttl,
            writer,
            reader,
            count,
            base,
            missing,
        })
    }
}

impl Repair {
    /// Validates a body (after the type byte): the fields with an empty body, and the range
    /// of the samples within `body` for the caller to slice (no copy).
    pub(crate) fn check_body(body: &[u8]) -> Result<(Repair, Range<usize>), DecodeError> {
        let mut c = Cursor::new(body);
        let ttl = c.u8("Repair.ttl")?;
        let writer = c.array("Repair.writer")?;
        let reader = c.array("Repair.reader")?;
        let first_seq = c.u64("Repair.firstSeq")?;
        let count = c.u16("Repair.count")?;
        check_repair_head(first_seq, count)?;
        check_run(c.rest(), count, REPAIR_RUN)?;
        let r = Repair {
            ttl,
            writer,
            reader,
            first_seq,
            count,
            body: Bytes::new(),
        };
        Ok((r, REPAIR_BODY_FIXED..body.len()))
    }

    /// Bytes the whole frame occupies on the wire.
    pub fn encoded_len(&self) -> usize {
        FRAME_HEADER_LEN + REPAIR_BODY_FIXED + self.body.len()
    }
}

impl Gap {
    pub(crate) fn decode_body(body: &[u8]) -> Result<Gap, DecodeError> {
        let mut c = Cursor::new(body);
        let g = Gap {
            ttl: c.u8("Gap.ttl")?,
            writer: c.array("Gap.writer")?,
            reader: c.array("Gap.reader")?,
            first: c.u64("Gap.first")?,
            last: c.u64("Gap.last")?,
        };
        check_gap(g.first, g.last)?;
        exact(&c, "Gap")?;
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seqset_insert_contains_iter() {
        let mut s = SeqSet::new();
        assert!(s.is_empty());
        assert!(s.insert(0) && s.insert(63) && s.insert(64) && s.insert(255));
        assert!(!s.insert(256));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 63, 64, 255]);
        assert_eq!((s.len(), s.nbits(), s.first()), (4, 256, Some(0)));
        s.remove(0);
        assert!(!s.contains(0) && s.contains(63));
        assert_eq!(s.first(), Some(63));
    }

    #[test]
    fn bitmap_is_msb_first() {
        let mut a = AckNack {
            ttl: 0,
            writer: [1; 16],
            reader: [2; 16],
            count: 1,
            base: 10,
            missing: SeqSet::new(),
        };
        assert!(a.request(10) && a.request(17) && a.request(18));
        assert!(!a.request(9) && !a.request(10 + 256));
        let mut out = Vec::new();
        ReliableFrame::AckNack(&a).encode_body(&mut out);
        assert_eq!(&out[ACKNACK_BODY_FIXED - 2..], &[0, 9, 0x81, 0x80]);
        assert_eq!(AckNack::decode_body(&out), Ok(a));
        assert_eq!(a.missing_seqs().collect::<Vec<_>>(), vec![10, 17, 18]);
    }
}
