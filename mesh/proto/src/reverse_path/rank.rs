//! The order in which the relays of an origin's frames toward a node carry them
//! (`relay_redundancy`): the one fact every node must compute alike, without a word.
//!
//! **Owns:** [`relay_rank`]. **Must not touch:** who the relays are (`near.rs`,
//! `farther.rs`).

use crate::PeerId;

/// The rank of `relay` among the relays that could carry `origin`'s frames to `to` (lowest
/// first; see [`super::ReversePaths::spared`]): FNV-1a over the three ids, then SplitMix64's
/// finalizer. Every node ranks by it to agree, without a word, on which relays carry a
/// copy, and the order differs per (origin, node) pair so the copies spread over the relays.
/// Fixed for good: nodes ranking by different functions could each leave the copy to another
/// (a mesh mixing them gets fewer copies, down to none, until they agree again).
pub fn relay_rank(origin: &PeerId, to: &PeerId, relay: &PeerId) -> u64 {
    RankOf::new(origin, to).relay(relay)
}

/// [`relay_rank`] for one (origin, node) pair and many relays: the hash of the pair's 32
/// bytes is taken once (a relay ranking a node's relays hashed them for each: most of the
/// cost of ranking at every distance, `farther.rs`).
#[derive(Debug, Clone, Copy)]
pub(super) struct RankOf(u64);

impl RankOf {
    pub(super) fn new(origin: &PeerId, to: &PeerId) -> RankOf {
        RankOf(fnv(0xcbf2_9ce4_8422_2325, origin.0.iter().chain(&to.0)))
    }

    /// `relay`'s rank for the pair.
    pub(super) fn relay(self, relay: &PeerId) -> u64 {
        let mut h = fnv(self.0, relay.0.iter());
        h ^= h >> 30;
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 27;
        h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^ (h >> 31)
    }
}

/// FNV-1a 64 of `bytes` from state `h`.
fn fnv<'a>(mut h: u64, bytes: impl Iterator<Item = &'a u8>) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
