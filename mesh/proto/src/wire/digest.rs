//! Shoal's MembershipDigest frame (type 16): anti-entropy for membership between Shoal nodes
//! that both advertised [`super::Features::MEMBERSHIP_DIGEST`]. What it means is
//! `crate::membership`'s; this file is its bytes (`protocol/extensions.md`,
//! "MembershipDigest").
//!
//! **Owns:** the layout, encoder and decoder of the frame. **Must not touch:** when it is sent
//! or what a node does with it (`membership::sync`).
//!
//! `kind u8 | legacyHops u8 | count u32 | digest u64 | entries`
//!
//! - `kind` 1, *Summary*: no entries; `count` is the number of records summarized.
//! - `kind` 2, *Versions*: `count × (origin 16 | version u64)`, origins strictly ascending
//!   and never all-zero, filling the body exactly; `digest` is the same value a Summary would
//!   carry.
//! - `legacyHops`: 0 to [`MAX_LEGACY_HOPS`], or [`NO_LEGACY`].
//!
//! All integers big-endian. Any other kind, a `legacyHops` out of range, a Summary with bytes
//! after `digest`, a `count` above [`MAX_DIGEST_ENTRIES`] or one that does not fill the body,
//! or unsorted, repeated or all-zero origins are a [`DecodeError::BadDigest`] (the link closes).

use super::cursor::Cursor;
use super::error::{DecodeError, EncodeError};
use crate::PeerId;
use bytes::BufMut;

/// Body bytes before the entries: `kind 1 | legacyHops 1 | count 4 | digest 8`.
pub const DIGEST_BODY_FIXED: usize = 1 + 1 + 4 + 8;
/// Bytes of one Versions entry: `origin 16 | version 8`.
pub const DIGEST_ENTRY_LEN: usize = 16 + 8;
/// The most entries a Versions frame may carry (the wire's ceiling; a node's own ceiling,
/// `max_membership_records`, is usually lower and is checked where the list is used).
pub const MAX_DIGEST_ENTRIES: u32 = 65_535;
/// The highest hop count to a multimaster (or pre-digest) link a node reports; one more is
/// [`NO_LEGACY`]. Bounds the count-up after such a link went (one per round).
pub const MAX_LEGACY_HOPS: u8 = 32;
/// `legacyHops` of a node with no multimaster link within [`MAX_LEGACY_HOPS`] hops.
pub const NO_LEGACY: u8 = 255;

const KIND_SUMMARY: u8 = 1;
const KIND_VERSIONS: u8 = 2;

/// A MembershipDigest frame (type 16).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipDigest {
    /// Hops from the sender to the nearest link that needs periodic re-floods (0: the sender
    /// has one), or [`NO_LEGACY`].
    pub legacy_hops: u8,
    /// Records summarized (a Summary); equals `versions.len()` in a Versions frame.
    pub count: u32,
    /// The sender's store digest (see `membership::sync`).
    pub digest: u64,
    /// `None`: a Summary. `Some`: a Versions frame, `(origin, version)` strictly ascending by
    /// origin.
    pub versions: Option<Vec<(PeerId, u64)>>,
}

impl MembershipDigest {
    pub(crate) fn body_len(&self) -> usize {
        DIGEST_BODY_FIXED
            + self
                .versions
                .as_ref()
                .map_or(0, |v| v.len() * DIGEST_ENTRY_LEN)
    }

    /// What the decoder would reject.
    pub(crate) fn validate(&self) -> Result<(), EncodeError> {
        check_hops(self.legacy_hops).map_err(EncodeError::BadDigest)?;
        if let Some(v) = &self.versions {
            if v.len() as u64 != u64::from(self.count) {
                return Err(EncodeError::BadDigest("count is not the number of entries"));
            }
            check_entries(v).map_err(EncodeError::BadDigest)?;
        }
        Ok(())
    }

    pub(crate) fn encode_body<B: BufMut>(&self, out: &mut B) {
        out.put_u8(if self.versions.is_some() {
            KIND_VERSIONS
        } else {
            KIND_SUMMARY
        });
        out.put_u8(self.legacy_hops);
        out.put_u32(self.count);
        out.put_u64(self.digest);
        for (origin, version) in self.versions.iter().flatten() {
            out.put_slice(&origin.0);
            out.put_u64(*version);
        }
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<MembershipDigest, DecodeError> {
        let mut c = Cursor::new(body);
        let kind = c.u8("MembershipDigest.kind")?;
        let legacy_hops = c.u8("MembershipDigest.legacyHops")?;
        let count = c.u32("MembershipDigest.count")?;
        let digest = c.u64("MembershipDigest.digest")?;
        check_hops(legacy_hops).map_err(DecodeError::BadDigest)?;
        let versions = match kind {
            KIND_SUMMARY => {
                if c.remaining() > 0 {
                    return Err(DecodeError::BadDigest("bytes after a Summary"));
                }
                None
            }
            KIND_VERSIONS => {
                if count > MAX_DIGEST_ENTRIES {
                    return Err(DecodeError::BadDigest("count over 65535"));
                }
                if c.remaining() != count as usize * DIGEST_ENTRY_LEN {
                    return Err(DecodeError::BadDigest(
                        "count does not fill the body exactly",
                    ));
                }
                let mut v = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    let origin = PeerId(c.array::<16>("MembershipDigest.origin")?);
                    let version = c.u64("MembershipDigest.version")?;
                    v.push((origin, version));
                }
                check_entries(&v).map_err(DecodeError::BadDigest)?;
                Some(v)
            }
            _ => return Err(DecodeError::BadDigest("unknown kind")),
        };
        Ok(MembershipDigest {
            legacy_hops,
            count,
            digest,
            versions,
        })
    }
}

fn check_hops(h: u8) -> Result<(), &'static str> {
    if h <= MAX_LEGACY_HOPS || h == NO_LEGACY {
        Ok(())
    } else {
        Err("legacyHops out of range")
    }
}

fn check_entries(v: &[(PeerId, u64)]) -> Result<(), &'static str> {
    if v.len() > MAX_DIGEST_ENTRIES as usize {
        return Err("count over 65535");
    }
    if v.iter().any(|(o, _)| o.is_zero()) {
        return Err("an all-zero origin");
    }
    if !v.windows(2).all(|w| w[0].0 < w[1].0) {
        return Err("origins not strictly ascending");
    }
    Ok(())
}
