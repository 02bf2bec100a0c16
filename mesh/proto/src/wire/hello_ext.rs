//! Shoal's extension block at the end of Hello/HelloAck (layout in the [module docs](super)).
//!
//! **Owns:** Shoal's Hello extension block. **Must not touch:** the Hello frame around it
//! (`frame`).

use super::cursor::Cursor;
use super::frame_type::{FrameType, MEMBERSHIP_DIGEST_FRAME_TYPE, SIGNED_MEMBERSHIP_FRAME_TYPE};
use bytes::{BufMut, Bytes};
use std::fmt;

/// Magic that opens the extension block.
pub const SHOAL_EXT_MAGIC: [u8; 4] = *b"SHOL";
/// Extension version this build writes.
pub const SHOAL_EXT_VERSION: u8 = 1;
/// Size of the fixed part of the block: magic, version, features, tailLen.
pub const SHOAL_EXT_FIXED_LEN: usize = 4 + 1 + 8 + 2;

/// Feature bits a Shoal node advertises in its Hello extension.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Features(pub u64);

impl Features {
    /// No features: what a plain multimaster peer is assumed to support.
    pub const NONE: Features = Features(0);
    /// Bit 0: the sender understands frame types above 8 ("extended frames"): Discovery (9)
    /// and Samples (10), Shoal's topic frames, and the reliability frames (11 to 14). A peer
    /// without it never receives them ([`peer_accepts_frame_type`]).
    pub const EXTENDED_FRAMES: Features = Features(1 << 0);
    /// Bit 1: the sender also understands SignedMembership (type 15), a Membership record
    /// signed by its origin (identity mode). A peer without it gets the same records as
    /// unsigned type 6 frames; a Shoal build that predates the bit would drop the link on 15.
    pub const SIGNED_RECORDS: Features = Features(1 << 1);
    /// Bit 2: the sender offers AES-256-GCM records (secured mesh only). A link uses them when
    /// both Hellos carry the bit; its keys and AuthConfirm tags are then derived with both
    /// extension blocks bound in, so an offer changed on the way fails the handshake
    /// (`protocol/aes-256-gcm.md`). Not in [`SUPPORTED`](Self::SUPPORTED): a node sets it
    /// per its `record_suite` setting (by default when its CPU has AES instructions).
    pub const AES_GCM_RECORDS: Features = Features(1 << 2);
    /// Bit 3: the sender exchanges MembershipDigest frames (type 16) and floods its own
    /// Membership record to peers that set the bit only when it changes (`extensions.md`,
    /// "MembershipDigest"). A peer without it keeps getting every periodic re-flood; a
    /// node sets it per its `membership_digest` setting (default on).
    pub const MEMBERSHIP_DIGEST: Features = Features(1 << 3);
    /// Bit 4: no frame, a promise: the sender holds the Discovery lease of a neighbour for
    /// as long as a link between them is up, and counts it from the last renewal once the
    /// last link goes (`extensions.md`, "Discovery"). An origin whose every participant
    /// is such a neighbour may stretch its announce cycle beyond a third of its lease; a
    /// peer without the bit (an older Shoal build) keeps it within that.
    pub const DISCOVERY_LEASE_HOLD: Features = Features(1 << 4);
    /// The features this build implements and advertises on every link (a node adds
    /// bits 3 and 4 in its Hello: `control::connecting`).
    pub const SUPPORTED: Features =
        Features(Features::EXTENDED_FRAMES.0 | Features::SIGNED_RECORDS.0);

    /// True when every bit of `other` is set in `self`.
    pub fn contains(self, other: Features) -> bool {
        self.0 & other.0 == other.0
    }

    /// The features both sides share.
    pub fn intersection(self, other: Features) -> Features {
        Features(self.0 & other.0)
    }

    /// `self` with the bits of `other` added.
    pub fn union(self, other: Features) -> Features {
        Features(self.0 | other.0)
    }
}

impl fmt::Debug for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Features({:#x})", self.0)
    }
}

/// The decoded Shoal extension block of a Hello/HelloAck.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShoalExtension {
    /// Extension version the sender wrote. Versions above [`SHOAL_EXT_VERSION`] are accepted:
    /// their extra fields live in the tail, which this build skips.
    pub version: u8,
    /// Features the sender understands.
    pub features: Features,
    /// The tail as received (empty from this version), kept so the block re-encodes to the
    /// exact bytes the sender wrote: the AES-256-GCM key schedule binds them.
    tail: Bytes,
}

impl ShoalExtension {
    /// A block of `version` with `features` and an empty tail.
    pub fn new(version: u8, features: Features) -> ShoalExtension {
        ShoalExtension {
            version,
            features,
            tail: Bytes::new(),
        }
    }

    /// The extension this build sends: current version, [`Features::SUPPORTED`].
    pub fn current() -> ShoalExtension {
        ShoalExtension::new(SHOAL_EXT_VERSION, Features::SUPPORTED)
    }

    /// `self` with a tail (fields of a later extension version; at most 65 535 bytes).
    pub fn with_tail(mut self, tail: impl Into<Bytes>) -> ShoalExtension {
        let tail = tail.into();
        assert!(tail.len() <= u16::MAX as usize, "tailLen is a u16");
        self.tail = tail;
        self
    }

    /// The tail bytes (skipped by this build).
    pub fn tail(&self) -> &[u8] {
        &self.tail
    }

    /// Bytes [`encode`](Self::encode) writes.
    pub fn encoded_len(&self) -> usize {
        SHOAL_EXT_FIXED_LEN + self.tail.len()
    }

    /// Appends the block: the fixed part, then the tail (empty in the blocks this build
    /// writes). A decoded block re-encodes to the bytes received.
    pub fn encode<B: BufMut>(&self, out: &mut B) {
        out.put_slice(&SHOAL_EXT_MAGIC);
        out.put_u8(self.version);
        out.put_u64(self.features.0);
        out.put_u16(self.tail.len() as u16);
        out.put_slice(&self.tail);
    }

    /// The block's bytes, as [`encode`](Self::encode) writes them.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.encoded_len());
        self.encode(&mut v);
        v
    }

    /// Reads the block from the bytes after a Hello's last v1 field. Anything that is not a
    /// well-formed block means "plain multimaster peer", hence `None` rather than an error.
    pub fn decode(trailing: &[u8]) -> Option<ShoalExtension> {
        if trailing.is_empty() {
            return None;
        }
        let mut c = Cursor::new(trailing);
        let parsed = (|| {
            let magic: [u8; 4] = c.array("shoal.magic").ok()?;
            if magic != SHOAL_EXT_MAGIC {
                return None;
            }
            let version = c.u8("shoal.version").ok()?;
            let features = Features(c.u64("shoal.features").ok()?);
            let tail_len = c.u16("shoal.tailLen").ok()? as usize;
            let tail = c.take(tail_len, "shoal.tail").ok()?;
            let tail = if tail.is_empty() {
                Bytes::new()
            } else {
                Bytes::copy_from_slice(tail)
            };
            Some(ShoalExtension {
                version,
                features,
                tail,
            })
        })();
        if parsed.is_none() {
            tracing::debug!(
                len = trailing.len(),
                "Hello carries trailing bytes that are not a Shoal extension; treating peer as plain multimaster"
            );
        }
        parsed
    }
}

/// Whether a frame of type `frame_type` may be sent to a peer whose Hello carried `peer_ext`.
/// Types 1..=8 are understood by every v1 peer; anything above needs the peer to have advertised
/// [`Features::EXTENDED_FRAMES`], because the C++ library drops the link on an unknown type;
/// SignedMembership (15) needs [`Features::SIGNED_RECORDS`] as well.
pub fn peer_accepts_frame_type(peer_ext: Option<&ShoalExtension>, frame_type: u8) -> bool {
    let has = |f: Features| peer_ext.is_some_and(|e| e.features.contains(f));
    match frame_type {
        0 => false,
        t if t <= FrameType::MAX_V1 => true,
        SIGNED_MEMBERSHIP_FRAME_TYPE => {
            has(Features::EXTENDED_FRAMES.union(Features::SIGNED_RECORDS))
        }
        MEMBERSHIP_DIGEST_FRAME_TYPE => {
            has(Features::EXTENDED_FRAMES.union(Features::MEMBERSHIP_DIGEST))
        }
        _ => has(Features::EXTENDED_FRAMES),
    }
}
