//! BLAKE2b with the digest-length parameter (not truncation), as the C++ library's libsodium
//! `crypto_generichash(out, n, msg, key)` computes it.
//!
//! **Owns:** the BLAKE2b derivations of the secured mesh (`mesh/proto/protocol/secured.md`).
//! **Must not touch:** anything stateful.
//!
//! BLAKE2b writes the output length into its parameter block, so a 16-byte digest is a different
//! function from the first 16 bytes of a 32-byte digest; vectors V2/V3 show both values.

use blake2::digest::consts::{U16, U32, U64};
use blake2::digest::{Digest, Mac};
use blake2::{Blake2b, Blake2bMac};

use crate::PeerId;

macro_rules! keyed {
    ($(#[$doc:meta])* $name:ident, $size:ty, $n:literal) => {
        $(#[$doc])*
        pub(crate) fn $name(key: &[u8], parts: &[&[u8]]) -> [u8; $n] {
            // An empty key would make `Blake2bMac` buffer a zero key block, which is not
            // unkeyed BLAKE2b; every caller here passes a real key.
            debug_assert!(!key.is_empty() && key.len() <= 64);
            let mut mac = <Blake2bMac<$size> as Mac>::new_from_slice(key)
                .expect("BLAKE2b keys are 1..=64 bytes");
            for part in parts {
                Mac::update(&mut mac, part);
            }
            mac.finalize().into_bytes().into()
        }
    };
}

keyed!(
    /// `BLAKE2b-16(key, parts...)`: the announce MAC.
    mac16,
    U16,
    16
);
keyed!(
    /// `BLAKE2b-32(key, parts...)`: K, Kd, confirmKey, AuthConfirm tags.
    mac32,
    U32,
    32
);
keyed!(
    /// `BLAKE2b-64(key, parts...)`: master and `kA || kB`.
    mac64,
    U64,
    64
);

/// The node id that an Ed25519 identity key implies: unkeyed `BLAKE2b-16(pk)`.
pub fn node_id_from_key(public_key: &[u8; 32]) -> PeerId {
    let digest = Blake2b::<U16>::digest(public_key);
    PeerId(digest.into())
}
