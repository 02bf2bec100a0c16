//! The Discovery frame (type 9): its value type, encoder and decoder (layout in
//! `topic_frames`).
//!
//! **Owns:** the Discovery frame's bytes. **Must not touch:** what the records say
//! (`shoal-discovery`) or how they are flooded (`topics`, `control`).
//!
//! Decoding is zero-copy: a Record entry is a slice of the read buffer. The framing code
//! validates a body first ([`Discovery::check_body`], no allocation) and slices the entries
//! out of the frozen frame afterwards ([`Discovery::fill_entries`]), so a rejected frame leaves
//! the read buffer untouched.

use super::cursor::Cursor;
use super::defaults::FRAME_HEADER_LEN;
use super::error::{DecodeError, EncodeError};
use super::frame_type::DISCOVERY_FRAME_TYPE;
use super::signature::{RecordSignature, ENTRY_KIND_SIGNATURE, SIGNATURE_LEN};
use super::topic_frames::{
    DISCOVERY_ENTRY_HEADER_LEN, DISCOVERY_HEADER_LEN, ENTRY_KIND_RECORD, ENTRY_KIND_WITHDRAW,
    MAX_RECORD_ENTRY_LEN,
};
use crate::PeerId;
use bytes::{BufMut, Bytes};
use std::ops::Range;

/// One entry of a [`Discovery`] frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiscoveryEntry {
    /// An encoded `shoal-discovery` record (a slice of the read buffer when decoded).
    Record(Bytes),
    /// The GUID of an endpoint its origin removed.
    Withdraw([u8; 16]),
    /// The origin's signature over the frame (identity mode; only as the last entry: see
    /// [`Discovery::signed_message`]).
    Signature(RecordSignature),
}

impl DiscoveryEntry {
    /// Bytes the entry occupies in a frame (`kind | len | value`): what a builder adds to
    /// [`DISCOVERY_HEADER_LEN`] to keep a frame under `max_message_bytes`.
    pub fn encoded_len(&self) -> usize {
        DISCOVERY_ENTRY_HEADER_LEN + self.value_len()
    }

    fn value_len(&self) -> usize {
        match self {
            DiscoveryEntry::Record(r) => r.len(),
            DiscoveryEntry::Withdraw(g) => g.len(),
            DiscoveryEntry::Signature(_) => SIGNATURE_LEN,
        }
    }

    /// Appends the entry as encoded in a frame: `kind u8 | len u16 | value`.
    pub(crate) fn encode<B: BufMut>(&self, out: &mut B) {
        match self {
            DiscoveryEntry::Record(r) => {
                out.put_u8(ENTRY_KIND_RECORD);
                out.put_u16(r.len() as u16);
                out.put_slice(r);
            }
            DiscoveryEntry::Withdraw(g) => {
                out.put_u8(ENTRY_KIND_WITHDRAW);
                out.put_u16(g.len() as u16);
                out.put_slice(g);
            }
            DiscoveryEntry::Signature(s) => {
                out.put_u8(ENTRY_KIND_SIGNATURE);
                out.put_u16(SIGNATURE_LEN as u16);
                s.encode(out);
            }
        }
    }
}

/// A Discovery frame (type 9): a batch of one origin's discovery records.
///
/// Body: `origin 16 | seq u64 | ttl u8 | cycle u32 | part u16 | parts u16 | count u16 |
/// count × (kind u8 | len u16 | value)`. Kind 1 is a Record (`len` 1 ..= 32 768), kind 2 a
/// Withdraw (`len` 16), kind 3 the origin's Signature (`len` 96, only as the last entry; see
/// `signed`); entries of other kinds are skipped when decoding (a later version's), and bytes
/// after the last entry reject the frame. `seq` numbers the origin's frames (a receiver takes
/// only frames above the highest it took from that origin); `parts = 0` marks a frame outside
/// any announce cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// The node that built the records (the only node allowed to describe its endpoints).
    pub origin: PeerId,
    /// Per-origin frame sequence number, rising by one per frame (what the flood's receivers
    /// deduplicate by).
    pub seq: u64,
    /// Remaining hops.
    pub ttl: u8,
    /// The announce cycle this frame belongs to.
    pub cycle: u32,
    /// This frame's index in its cycle.
    pub part: u16,
    /// Frames in the cycle; 0 for a frame outside any cycle.
    pub parts: u16,
    /// The entries, in order (entries of unknown kinds are skipped when decoding).
    pub entries: Vec<DiscoveryEntry>,
}

impl Discovery {
    /// Bytes the whole frame occupies on the wire, length prefix included.
    pub fn encoded_len(&self) -> usize {
        DISCOVERY_HEADER_LEN
            + self
                .entries
                .iter()
                .map(DiscoveryEntry::encoded_len)
                .sum::<usize>()
    }

    /// Checks what the decoder would reject: more than `u16::MAX` entries, a Record entry
    /// outside `1..=`[`MAX_RECORD_ENTRY_LEN`], a Signature entry that is not the last, a frame
    /// too long for the length field.
    pub(crate) fn validate(&self) -> Result<u32, EncodeError> {
        if self.entries.len() > usize::from(u16::MAX) {
            return Err(EncodeError::TooManyEntries {
                count: self.entries.len(),
            });
        }
        let last = self.entries.len().saturating_sub(1);
        for (i, e) in self.entries.iter().enumerate() {
            match e {
                DiscoveryEntry::Record(r) if r.is_empty() || r.len() > MAX_RECORD_ENTRY_LEN => {
                    return Err(EncodeError::RecordLen { len: r.len() });
                }
                DiscoveryEntry::Signature(_) if i != last => {
                    return Err(EncodeError::SignatureNotLast);
                }
                _ => {}
            }
        }
        let len = self.encoded_len() - super::defaults::LENGTH_PREFIX_LEN;
        u32::try_from(len).map_err(|_| EncodeError::FrameTooLarge { len })
    }

    /// Appends the whole frame (length prefix, type, body) to `out`; on error nothing is
    /// written. Allocates only if `out` must grow. The same bytes as
    /// `Frame::Discovery(d).encode(out)`, without moving the frame into a `Frame`.
    pub fn encode<B: BufMut>(&self, out: &mut B) -> Result<(), EncodeError> {
        let len = self.validate()?;
        out.put_u32(len);
        out.put_u8(DISCOVERY_FRAME_TYPE);
        self.encode_body(out);
        Ok(())
    }

    /// Writes the body of a frame [`validate`](Self::validate) accepted.
    pub(crate) fn encode_body<B: BufMut>(&self, out: &mut B) {
        out.put_slice(&self.origin.0);
        out.put_u64(self.seq);
        out.put_u8(self.ttl);
        out.put_u32(self.cycle);
        out.put_u16(self.part);
        out.put_u16(self.parts);
        out.put_u16(self.entries.len() as u16);
        for e in &self.entries {
            e.encode(out);
        }
    }

    /// Validates a body without allocating: the frame's fields with no entries yet, and how
    /// many known entries [`fill_entries`](Self::fill_entries) will add.
    pub(crate) fn check_body(body: &[u8]) -> Result<(Discovery, usize), DecodeError> {
        let mut known = 0usize;
        let d = walk(body, |_, _| known += 1)?;
        Ok((d, known))
    }

    /// Adds the entries of `body` (the same bytes [`check_body`](Self::check_body) accepted,
    /// now frozen) as slices of it.
    pub(crate) fn fill_entries(&mut self, body: &Bytes, known: usize) {
        let mut entries = Vec::with_capacity(known);
        let r = walk(body, |kind, r| {
            entries.push(match kind {
                ENTRY_KIND_RECORD => DiscoveryEntry::Record(body.slice(r)),
                ENTRY_KIND_WITHDRAW => {
                    DiscoveryEntry::Withdraw(body[r].try_into().expect("checked: 16 bytes"))
                }
                _ => {
                    let v = &body[r];
                    DiscoveryEntry::Signature(RecordSignature {
                        key: v[..32].try_into().expect("checked: 96 bytes"),
                        sig: v[32..].try_into().expect("checked: 96 bytes"),
                    })
                }
            })
        });
        debug_assert!(r.is_ok(), "the body was checked before");
        self.entries = entries;
    }
}

/// Walks a Discovery body: reads the fixed fields, checks every entry and calls `known` with
/// the kind and value range of each Record, Withdraw and Signature entry (other kinds are
/// skipped).
fn walk(body: &[u8], mut known: impl FnMut(u8, Range<usize>)) -> Result<Discovery, DecodeError> {
    let mut c = Cursor::new(body);
    let origin = PeerId(c.array("Discovery.origin")?);
    let seq = c.u64("Discovery.seq")?;
    let ttl = c.u8("Discovery.ttl")?;
    let cycle = c.u32("Discovery.cycle")?;
    let part = c.u16("Discovery.part")?;
    let parts = c.u16("Discovery.parts")?;
    let count = c.u16("Discovery.count")?;
    for i in 0..count {
        let kind = c.u8("Discovery.entry.kind")?;
        let len = c.u16("Discovery.entry.len")?;
        let start = c.pos();
        c.take(usize::from(len), "Discovery.entry.value")?;
        match kind {
            ENTRY_KIND_RECORD if len == 0 || usize::from(len) > MAX_RECORD_ENTRY_LEN => {
                return Err(DecodeError::BadRecordLen { len })
            }
            ENTRY_KIND_WITHDRAW if len != 16 => return Err(DecodeError::BadWithdrawLen { len }),
            ENTRY_KIND_SIGNATURE if usize::from(len) != SIGNATURE_LEN => {
                return Err(DecodeError::BadSignatureLen { len })
            }
            ENTRY_KIND_SIGNATURE if i + 1 != count => return Err(DecodeError::SignatureNotLast),
            ENTRY_KIND_RECORD | ENTRY_KIND_WITHDRAW | ENTRY_KIND_SIGNATURE => {
                known(kind, start..c.pos())
            }
            // A later version's entry: its length says how far to skip.
            _ => {}
        }
    }
    if c.remaining() > 0 {
        return Err(DecodeError::TrailingBytes {
            frame: "Discovery",
            extra: c.remaining(),
        });
    }
    Ok(Discovery {
        origin,
        seq,
        ttl,
        cycle,
        part,
        parts,
        entries: Vec::new(),
    })
}

const _: () = assert!(DISCOVERY_HEADER_LEN == FRAME_HEADER_LEN + 35);
