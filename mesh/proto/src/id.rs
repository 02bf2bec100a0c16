//! Node and message identifiers as they appear on the wire.
//!
//! **Owns:** the node and message identifiers, and the one hash that places what belongs to a
//! node on a shard ([`node_shard`]). **Must not touch:** anything else.

use std::fmt;

/// The first 8 bytes of a 16-byte id whose leading bytes name a node: a node id, a message id
/// (its originator's), or a topic endpoint GUID (its node's). Ids are random or a BLAKE2b
/// digest, so these bytes are already uniform and stable across processes.
pub fn node_prefix(id: &[u8; 16]) -> u64 {
    u64::from_be_bytes(id[..8].try_into().expect("16 >= 8"))
}

/// The shard (of `shards`) that owns what is keyed by the node whose id starts as `id` does:
/// the links to it ([`crate::link_shard`]), the dedup state of the messages it originated
/// ([`crate::dedup_shard`]) and the sequence state of its topic writers
/// ([`crate::shard::samples_shard`]). One hash for all three, so a message or sample read
/// straight from its origin is handled on the shard that owns the link it came on, with no hop.
pub fn node_shard(id: &[u8; 16], shards: usize) -> usize {
    // One shard (the default) owns everything: no division on every received message.
    if shards <= 1 {
        return 0;
    }
    (node_prefix(id) % shards as u64) as usize
}

/// A node's 16-byte identifier. All-zero is reserved: as a destination it means "broadcast".
///
/// Ordered as its bytes are (lexicographically), compared as one big-endian 128-bit number:
/// the same order, but two loads and a compare instead of the byte loop the derived
/// `PartialOrd` of an array compiles to (sorted id lists are searched and merged all over the
/// control plane; the byte loop was a tenth of a forming mesh's path-table builds).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PeerId(pub [u8; 16]);

impl Ord for PeerId {
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        u128::from_be_bytes(self.0).cmp(&u128::from_be_bytes(other.0))
    }
}

impl PartialOrd for PeerId {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

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
        node_prefix(&self.0)
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
        node_prefix(&self.0)
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

    proptest::proptest! {
        /// Sorted id lists are on the wire and in rules every node must agree on (the lower
        /// id defers): the order is the bytes' lexicographic order, ties included.
        #[test]
        fn ids_order_as_their_bytes(a: [u8; 16], b: [u8; 16], common in 0usize..=16) {
            // Shared prefixes of every length: the comparison must reach the deciding byte.
            let mut b2 = b;
            b2[..common].copy_from_slice(&a[..common]);
            for y in [b, b2, a] {
                let (x, y) = (PeerId(a), PeerId(y));
                proptest::prop_assert_eq!(x.cmp(&y), a.cmp(&y.0));
                proptest::prop_assert_eq!(x.partial_cmp(&y), Some(a.cmp(&y.0)));
                proptest::prop_assert_eq!(x < y, a < y.0);
            }
        }
    }

    #[test]
    fn a_nodes_links_messages_and_writers_share_one_shard() {
        for seed in 0..64u8 {
            let node = PeerId(core::array::from_fn(|i| {
                seed.wrapping_mul(37) ^ (i as u8 * 11)
            }));
            // A writer GUID: the node's 12-byte id prefix, then an entity number.
            let mut writer = [0xee; 16];
            writer[..12].copy_from_slice(&node.0[..12]);
            for shards in 1..9 {
                let link = crate::link_shard(&node, shards);
                assert!(link < shards);
                assert_eq!(crate::dedup_shard(&MsgId::new(&node, 7), shards), link);
                assert_eq!(crate::shard::samples_shard(&writer, shards), link);
            }
        }
    }
}
