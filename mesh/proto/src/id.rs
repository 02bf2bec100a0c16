//! Node and message identifiers as they appear on the wire.
//!
//! **Owns:** the node and message identifiers. **Must not touch:** anything else.

use std::fmt;

/// A node's 16-byte identifier. All-zero is reserved: as a destination it means "broadcast".
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PeerId(pub [u8; 16]);

impl PeerId {
    /// The reserved all-zero id (the broadcast destination).
    pub const ZERO: PeerId = PeerId([0; 16]);

    /// True for the reserved all-zero id.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// A random non-zero id, for nodes without an identity key.
    pub fn random() -> PeerId {
        loop {
            let id = PeerId(rand::random());
            if !id.is_zero() {
                return id;
            }
        }
    }

    /// A 64-bit hash of the id, stable across processes, used to pick a shard.
    /// Ids are random or a BLAKE2b digest, so their leading bytes are already uniform.
    pub fn shard_hash(&self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().expect("16 >= 8"))
    }
}

impl fmt::Debug for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PeerId({self})")
    }
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A 16-byte message id: originator id bytes `0..8` followed by a big-endian `u64` counter.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MsgId(pub [u8; 16]);

impl MsgId {
    /// Builds the id of the `counter`-th message originated by `origin`.
    pub fn new(origin: &PeerId, counter: u64) -> MsgId {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&origin.0[..8]);
        b[8..].copy_from_slice(&counter.to_be_bytes());
        MsgId(b)
    }

    /// The originator prefix (first 8 bytes of the originator's id), as used for dedup sharding.
    pub fn origin_prefix(&self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().expect("16 >= 8"))
    }

    /// The per-originator counter.
    pub fn counter(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().expect("16 - 8 = 8"))
    }
}

impl fmt::Debug for MsgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MsgId(")?;
        for b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msg_id_layout_matches_v4_capture() {
        // V4: src 0102..10, msgId = 0102030405060708 || db43c63500b4735c
        let src = PeerId([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
        let id = MsgId::new(&src, 0xdb43c63500b4735c);
        assert_eq!(id.0[..8], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(id.counter(), 0xdb43c63500b4735c);
        assert_eq!(id.origin_prefix(), src.shard_hash());
    }
}
