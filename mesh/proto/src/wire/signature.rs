//! A signature as the wire carries it: an origin's Ed25519 key and its signature over a
//! record (`key 32 | sig 64`), and the Discovery entry that holds one (kind 3). What a
//! signature covers, and the SignedMembership frame, are `signed`'s.
//!
//! **Owns:** the bytes of a signature. **Must not touch:** what it covers (`signed`) or the
//! cryptography (`crypto::signed`).

use super::cursor::Cursor;
use super::error::DecodeError;
use bytes::BufMut;

/// Discovery entry kind 3: the origin's signature over the frame (the last entry).
pub const ENTRY_KIND_SIGNATURE: u8 = 3;
/// Bytes of a signature on the wire: `key 32 | sig 64`.
pub const SIGNATURE_LEN: usize = 32 + 64;
/// Bytes a Signature entry adds to a Discovery frame (`kind | len | key | sig`): what a frame
/// builder reserves so that a signed frame stays within its bound.
pub const DISCOVERY_SIGNATURE_ENTRY_LEN: usize = 1 + 2 + SIGNATURE_LEN;

/// An origin's Ed25519 key and its signature over a record.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RecordSignature {
    /// The signer's Ed25519 public key; `BLAKE2b-16(key)` must be the record's origin.
    pub key: [u8; 32],
    /// The Ed25519 signature.
    pub sig: [u8; 64],
}

impl std::fmt::Debug for RecordSignature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RecordSignature {{ key: {}.., sig: {}.. }}",
            hex8(&self.key),
            hex8(&self.sig)
        )
    }
}

fn hex8(b: &[u8]) -> String {
    b.iter().take(4).map(|x| format!("{x:02x}")).collect()
}

impl RecordSignature {
    pub(crate) fn encode<B: BufMut>(&self, out: &mut B) {
        out.put_slice(&self.key);
        out.put_slice(&self.sig);
    }

    pub(crate) fn read(c: &mut Cursor<'_>) -> Result<RecordSignature, DecodeError> {
        Ok(RecordSignature {
            key: c.array("signature.key")?,
            sig: c.array("signature.sig")?,
        })
    }
}
