//! Record suites: which AEAD seals a link's records, which suite a node offers, and the one
//! key slot both suites' sealers and openers keep their key in.
//!
//! **Owns:** the suite names, the offer policy (`record_suite` setting), the AES acceleration
//! check and the record cipher's key slot. **Must not touch:** the record framing (`record`) or
//! how the keys are derived (`handshake`).
//!
//! Two suites share one framing (`u32 clen || AEAD(key, nonce = 0^4 || ctr_be64, ad = empty,
//! pt)`, 16-byte tag, per-direction counters from 0):
//!
//! - [`RecordSuite::ChaCha20Poly1305`]: `protocol/secured.md`'s suite, byte-exact with the C++
//!   library and the only one a multimaster peer speaks.
//! - [`RecordSuite::Aes256Gcm`]: Shoal's second suite, used only between two Shoal nodes that
//!   both offered it in their Hello extension ([`Features::AES_GCM_RECORDS`]); its keys and
//!   AuthConfirm tags are derived under their own labels with both extension blocks bound in
//!   (`protocol/aes-256-gcm.md`). On a CPU with AES instructions it seals and opens about
//!   three times faster than ChaCha20-Poly1305 (BENCHMARKS.md, record crypto).
//!
//! [`Features::AES_GCM_RECORDS`]: crate::wire::Features::AES_GCM_RECORDS

use std::fmt;
use std::mem::MaybeUninit;

use ring::aead::{LessSafeKey, Nonce, UnboundKey, AES_256_GCM, CHACHA20_POLY1305};
use serde::Deserialize;
use zeroize::Zeroize;

/// The AEAD a link's records are sealed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RecordSuite {
    /// ChaCha20-Poly1305 (RFC 8439): multimaster v1's suite.
    #[default]
    ChaCha20Poly1305,
    /// AES-256-GCM: Shoal–Shoal links where both sides offered it.
    Aes256Gcm,
}

impl RecordSuite {
    /// The suite's name as the `record_suite` setting, stats and metrics spell it.
    pub fn name(self) -> &'static str {
        match self {
            RecordSuite::ChaCha20Poly1305 => "chacha20-poly1305",
            RecordSuite::Aes256Gcm => "aes-256-gcm",
        }
    }

    fn algorithm(self) -> &'static ring::aead::Algorithm {
        match self {
            RecordSuite::ChaCha20Poly1305 => &CHACHA20_POLY1305,
            RecordSuite::Aes256Gcm => &AES_256_GCM,
        }
    }
}

impl fmt::Display for RecordSuite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The `record_suite` setting: which suite this node offers Shoal peers. Links to multimaster
/// peers (no Shoal extension) are ChaCha20-Poly1305 whatever it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
pub enum RecordSuitePolicy {
    /// Offer AES-256-GCM when this CPU has AES instructions ([`aes_accelerated`]); a link uses
    /// it when the peer offered it too. The default.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// Never offer AES-256-GCM: every link is ChaCha20-Poly1305.
    #[serde(rename = "chacha20-poly1305")]
    ChaCha20Poly1305,
    /// Offer AES-256-GCM even without AES instructions (ring's constant-time software AES,
    /// several times slower than ChaCha20); a link still needs the peer's offer.
    #[serde(rename = "aes-256-gcm")]
    Aes256Gcm,
}

impl RecordSuitePolicy {
    /// Whether a node with this setting offers AES-256-GCM on this CPU.
    pub fn offers_aes(self) -> bool {
        match self {
            RecordSuitePolicy::Auto => aes_accelerated(),
            RecordSuitePolicy::ChaCha20Poly1305 => false,
            RecordSuitePolicy::Aes256Gcm => true,
        }
    }

    /// The setting's spelling in TOML.
    pub fn name(self) -> &'static str {
        match self {
            RecordSuitePolicy::Auto => "auto",
            RecordSuitePolicy::ChaCha20Poly1305 => "chacha20-poly1305",
            RecordSuitePolicy::Aes256Gcm => "aes-256-gcm",
        }
    }
}

impl std::str::FromStr for RecordSuitePolicy {
    type Err = UnknownSuite;

    fn from_str(s: &str) -> Result<RecordSuitePolicy, UnknownSuite> {
        [
            RecordSuitePolicy::Auto,
            RecordSuitePolicy::ChaCha20Poly1305,
            RecordSuitePolicy::Aes256Gcm,
        ]
        .into_iter()
        .find(|p| p.name() == s)
        .ok_or_else(|| UnknownSuite(s.to_owned()))
    }
}

/// A `record_suite` value that names no suite.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("record suite {0:?} is not one of auto, chacha20-poly1305, aes-256-gcm")]
pub struct UnknownSuite(pub String);

/// Whether ring runs AES-256-GCM on hardware instructions here: AES-NI and PCLMULQDQ on
/// x86_64 (ring's hardware AES-GCM needs both; it adds AVX2 VAES/VPCLMULQDQ paths when
/// present), the ARMv8 AES extension (with PMULL, which Rust's `aes` feature implies) on
/// aarch64. ring's own detection is private, so this asks the CPU the same questions through
/// the standard library. Without them ring falls back to constant-time software AES, slower
/// than ChaCha20.
pub fn aes_accelerated() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// The record nonce: `0^4 || ctr_be64`, the same for both suites.
pub(super) fn nonce(ctr: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&ctr.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

// Wiping the slot without running a destructor leaks nothing only while ring's key has none.
const _: () = assert!(!std::mem::needs_drop::<LessSafeKey>());

/// One direction's record key, in a heap slot that never moves and is zeroed on drop (see
/// `record`'s Keys section): ring's `LessSafeKey` holds it inline (the ChaCha20 key as given;
/// for AES-256-GCM the expanded round keys and the GHASH key table), owns no heap memory and
/// does not wipe itself.
pub(super) struct Cipher {
    key: Box<MaybeUninit<LessSafeKey>>,
    suite: RecordSuite,
}

impl Cipher {
    pub(super) fn new(suite: RecordSuite, key: &[u8; 32]) -> Cipher {
        let key = UnboundKey::new(suite.algorithm(), key).expect("both suites take 32-byte keys");
        Cipher {
            key: Box::new(MaybeUninit::new(LessSafeKey::new(key))),
            suite,
        }
    }

    pub(super) fn key(&self) -> &LessSafeKey {
        // SAFETY: the slot is initialised in `new` and only overwritten in `drop`, after which
        // `self` is never used again.
        unsafe { self.key.assume_init_ref() }
    }

    pub(super) fn suite(&self) -> RecordSuite {
        self.suite
    }
}

impl Drop for Cipher {
    fn drop(&mut self) {
        // `LessSafeKey` has no destructor (asserted above), so overwriting it is its whole end.
        self.key.zeroize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_round_trip_and_unknown_names_are_refused() {
        for p in [
            RecordSuitePolicy::Auto,
            RecordSuitePolicy::ChaCha20Poly1305,
            RecordSuitePolicy::Aes256Gcm,
        ] {
            assert_eq!(p.name().parse::<RecordSuitePolicy>(), Ok(p));
        }
        assert_eq!(
            "aes-128-gcm".parse::<RecordSuitePolicy>(),
            Err(UnknownSuite("aes-128-gcm".into()))
        );
        assert!(!RecordSuitePolicy::ChaCha20Poly1305.offers_aes());
        assert!(RecordSuitePolicy::Aes256Gcm.offers_aes());
        assert_eq!(RecordSuitePolicy::Auto.offers_aes(), aes_accelerated());
    }

    #[test]
    fn the_two_suites_seal_the_same_plaintext_differently() {
        let key = [7u8; 32];
        let seal = |suite| {
            let mut pt = b"same bytes".to_vec();
            let c = Cipher::new(suite, &key);
            let tag = c
                .key()
                .seal_in_place_separate_tag(nonce(0), ring::aead::Aad::empty(), &mut pt)
                .unwrap();
            (pt, tag.as_ref().to_vec())
        };
        assert_ne!(
            seal(RecordSuite::ChaCha20Poly1305),
            seal(RecordSuite::Aes256Gcm)
        );
    }
}
