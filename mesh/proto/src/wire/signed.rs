//! Shoal's signed records (identity mode): the signature carried by a Discovery frame (entry
//! kind 3) and the SignedMembership frame (type 15), with the exact bytes each signature
//! covers. The rules and test vectors are in
//! `mesh/proto/protocol/signed-records.md`.
//!
//! **Owns:** the bytes of signed records and of what their signatures cover. **Must not
//! touch:** the cryptography (`crypto::signed` signs and verifies these bytes) or what a
//! verified record means (`control`, `membership`, `topics`).
//!
//! # SignedMembership (type 15, extended)
//!
//! `origin 16 | version u64 | count u16 | neighbours 16×count | key 32 | sig 64`
//!
//! The Membership body (type 6) followed by the origin's Ed25519 key and signature. Unlike
//! type 6 it must be filled exactly (no trailing bytes) and its neighbours must be strictly
//! ascending (sorted, no duplicates): the signer sorts them, so a relay stores and re-sends
//! exactly the list that was signed. `sig` covers
//! `"shoal-memb-v1" || origin || version || count || neighbours` (the body without the key
//! and signature). Sent only to peers that advertised both
//! [`Features::EXTENDED_FRAMES`](super::Features::EXTENDED_FRAMES) and
//! [`Features::SIGNED_RECORDS`](super::Features::SIGNED_RECORDS); other peers get the same
//! record as an unsigned type 6 frame.
//!
//! # The Signature entry of a Discovery frame (kind 3)
//!
//! `kind 3 | len 96 | key 32 | sig 64`, only as the frame's last entry (a Signature entry
//! anywhere else, or of another length, rejects the frame). `sig` covers
//! `"shoal-disc-v1" || origin || seq u64 || cycle u32 || part u16 || parts u16 || entries`,
//! where `entries` are the encoded bytes (`kind | len | value`) of every entry before the
//! signature, in order. `ttl` is not covered: relays lower it. Builds that predate it skip
//! the entry as an unknown kind. A signed frame carries only entry kinds this build knows
//! (1, 2) before its signature: a relay re-encodes the entries it decoded, so an entry it
//! skipped would be missing downstream and the signature would no longer verify there.

use super::cursor::Cursor;
use super::discovery::{Discovery, DiscoveryEntry};
use super::error::{DecodeError, EncodeError};
use super::signature::{RecordSignature, SIGNATURE_LEN};
use super::v1::Membership;
use crate::PeerId;
use bytes::BufMut;

/// Domain label of a Discovery signature.
pub const DISCOVERY_SIGNATURE_LABEL: &[u8] = b"shoal-disc-v1";
/// Domain label of a Membership signature.
pub const MEMBERSHIP_SIGNATURE_LABEL: &[u8] = b"shoal-memb-v1";

/// A Membership record with its origin's signature (frame type 15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedMembership {
    /// The record, its neighbours strictly ascending.
    pub record: Membership,
    /// The origin's signature over [`Membership::signed_message`].
    pub signature: RecordSignature,
}

impl SignedMembership {
    pub(crate) fn body_len(&self) -> usize {
        self.record.body_len() + SIGNATURE_LEN
    }

    /// What the decoder would reject: a count over `u16`, neighbours not strictly ascending.
    pub(crate) fn validate(&self) -> Result<(), EncodeError> {
        self.record.validate()?;
        if !strictly_ascending(&self.record.neighbours) {
            return Err(EncodeError::UnsortedNeighbours);
        }
        Ok(())
    }

    pub(crate) fn encode_body<B: BufMut>(&self, out: &mut B) {
        self.record.encode_body(out);
        self.signature.encode(out);
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<SignedMembership, DecodeError> {
        let mut c = Cursor::new(body);
        let record = Membership::read(&mut c)?;
        let signature = RecordSignature::read(&mut c)?;
        if c.remaining() > 0 {
            return Err(DecodeError::TrailingBytes {
                frame: "SignedMembership",
                extra: c.remaining(),
            });
        }
        if !strictly_ascending(&record.neighbours) {
            return Err(DecodeError::UnsortedNeighbours);
        }
        Ok(SignedMembership { record, signature })
    }
}

fn strictly_ascending(n: &[PeerId]) -> bool {
    n.windows(2).all(|w| w[0] < w[1])
}

impl Membership {
    /// Appends what a Membership signature covers to `out`:
    /// `"shoal-memb-v1" || origin || version || count || neighbours`.
    pub fn signed_message(&self, out: &mut Vec<u8>) {
        out.reserve(MEMBERSHIP_SIGNATURE_LABEL.len() + self.body_len());
        out.put_slice(MEMBERSHIP_SIGNATURE_LABEL);
        self.encode_body(out);
    }
}

impl Discovery {
    /// The frame's signature: its last entry, when that is a Signature entry.
    pub fn signature(&self) -> Option<&RecordSignature> {
        match self.entries.last() {
            Some(DiscoveryEntry::Signature(s)) => Some(s),
            _ => None,
        }
    }

    /// Appends what a Discovery signature covers to `out`: `"shoal-disc-v1" || origin ||
    /// seq || cycle || part || parts ||` the encoded entries before the Signature entry (all
    /// of them when the frame is not signed yet).
    pub fn signed_message(&self, out: &mut Vec<u8>) {
        let signed = match self.entries.last() {
            Some(DiscoveryEntry::Signature(_)) => &self.entries[..self.entries.len() - 1],
            _ => &self.entries[..],
        };
        let len: usize = signed.iter().map(DiscoveryEntry::encoded_len).sum();
        out.reserve(DISCOVERY_SIGNATURE_LABEL.len() + 16 + 8 + 4 + 2 + 2 + len);
        out.put_slice(DISCOVERY_SIGNATURE_LABEL);
        out.put_slice(&self.origin.0);
        out.put_u64(self.seq);
        out.put_u32(self.cycle);
        out.put_u16(self.part);
        out.put_u16(self.parts);
        for e in signed {
            e.encode(out);
        }
    }
}
