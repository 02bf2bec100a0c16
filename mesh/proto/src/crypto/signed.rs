//! Signed records (identity mode): this node's Membership records and Discovery frames signed
//! with its Ed25519 key, others' verified against their origin, and the bounded book of the
//! keys verified so far (`mesh/proto/protocol/signed-records.md` has the rules and test vectors).
//!
//! **Owns:** signing and verifying the signed records' bytes, and the signer book. **Must not
//! touch:** the records' layout (`wire::signed` builds the signed bytes) or what a verified
//! record changes (`control`).
//!
//! A record about node X verifies when the key it carries hashes to X (`BLAKE2b-16(key) == X`,
//! as node ids are derived in an identity mesh), the trust policy admits the key (allowlist,
//! revocation) and the Ed25519 signature verifies strictly over the record's signed bytes. The
//! first record of an origin pays for all three; the key is then remembered (decompressed),
//! so every later record of that origin costs the policy lookup and one signature check. The
//! book is bounded: at its ceiling the origin verified least recently is forgotten (counted),
//! and is learned again from its next record.

use std::collections::BTreeMap;

use ahash::AHashMap;
use ed25519_dalek::{Signature, VerifyingKey};

use super::identity::{Identity, IdentityPolicy};
use super::kdf::node_id_from_key;
use crate::wire::{Discovery, DiscoveryEntry, Membership, RecordSignature};
use crate::PeerId;

/// Why a signed record is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureReject {
    /// The key does not hash to the record's origin: a record about someone else.
    #[error("record signed by a key that is not its origin's")]
    OriginMismatch,
    /// The key is not a valid Ed25519 point.
    #[error("record signer's key is not a valid Ed25519 key")]
    BadKey,
    /// The signature does not verify (strictly) over the record.
    #[error("record signature does not verify")]
    BadSignature,
    /// The trust policy does not admit the key (not on the allowlist, or revoked).
    #[error("record signer's key is not trusted")]
    Untrusted,
}

impl SignatureReject {
    /// True for a forgery (a record no honest relay passes on, since relays verify before
    /// relaying): the link that carried it is closed. An untrusted key is not one: trust
    /// policies are per node, so a neighbour may rightly trust a key this node does not.
    pub fn is_forgery(self) -> bool {
        !matches!(self, SignatureReject::Untrusted)
    }
}

/// Signs this node's Membership record (`scratch` is reused for the signed bytes).
pub fn sign_membership(
    id: &Identity,
    record: &Membership,
    scratch: &mut Vec<u8>,
) -> RecordSignature {
    scratch.clear();
    record.signed_message(scratch);
    RecordSignature {
        key: *id.public_key(),
        sig: id.sign(scratch),
    }
}

/// Signs this node's Discovery frame: appends its Signature entry (a frame that already ends
/// with one is left as it is). The caller keeps the frame within its size bound
/// ([`crate::wire::DISCOVERY_SIGNATURE_ENTRY_LEN`] more bytes).
pub fn sign_discovery(id: &Identity, frame: &mut Discovery, scratch: &mut Vec<u8>) {
    if frame.signature().is_some() {
        return;
    }
    scratch.clear();
    frame.signed_message(scratch);
    frame
        .entries
        .push(DiscoveryEntry::Signature(RecordSignature {
            key: *id.public_key(),
            sig: id.sign(scratch),
        }));
}

/// One origin whose key verified a record.
#[derive(Debug)]
struct Signer {
    raw: [u8; 32],
    key: VerifyingKey,
    /// The highest Discovery `seq` of this origin that verified.
    discovery_high: Option<u64>,
    tick: u64,
}

/// The origins whose signed records verified, with their keys, bounded (see the module docs).
#[derive(Debug)]
pub struct SignerBook {
    entries: AHashMap<PeerId, Signer>,
    /// tick → origin, the least recently verified first.
    lru: BTreeMap<u64, PeerId>,
    tick: u64,
    max: usize,
    evicted: u64,
}

impl SignerBook {
    /// An empty book holding at most `max` origins (at least one).
    pub fn new(max: usize) -> SignerBook {
        SignerBook {
            entries: AHashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            max: max.max(1),
            evicted: 0,
        }
    }

    /// True when a record of `origin` verified (and it was not forgotten since).
    pub fn knows(&self, origin: &PeerId) -> bool {
        self.entries.contains_key(origin)
    }

    /// Origins held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no origin is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Origins forgotten at the ceiling so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Forgets `origin` (its key was revoked, or it left).
    pub fn remove(&mut self, origin: &PeerId) {
        if let Some(s) = self.entries.remove(origin) {
            self.lru.remove(&s.tick);
        }
    }

    /// Verifies that `sig` is `origin`'s signature over `msg` (the record's signed bytes)
    /// and that `policy` admits its key; the key is remembered on success.
    pub fn verify(
        &mut self,
        policy: &IdentityPolicy,
        origin: &PeerId,
        sig: &RecordSignature,
        msg: &[u8],
    ) -> Result<(), SignatureReject> {
        self.tick += 1;
        let tick = self.tick;
        if let Some(s) = self.entries.get_mut(origin) {
            if s.raw != sig.key {
                // Another key hashing to the same id: only a forger tries that.
                return Err(SignatureReject::OriginMismatch);
            }
            policy
                .admit(&sig.key)
                .map_err(|_| SignatureReject::Untrusted)?;
            s.key
                .verify_strict(msg, &Signature::from_bytes(&sig.sig))
                .map_err(|_| SignatureReject::BadSignature)?;
            self.lru.remove(&s.tick);
            s.tick = tick;
            self.lru.insert(tick, *origin);
            return Ok(());
        }
        if node_id_from_key(&sig.key) != *origin {
            return Err(SignatureReject::OriginMismatch);
        }
        policy
            .admit(&sig.key)
            .map_err(|_| SignatureReject::Untrusted)?;
        let key = VerifyingKey::from_bytes(&sig.key).map_err(|_| SignatureReject::BadKey)?;
        key.verify_strict(msg, &Signature::from_bytes(&sig.sig))
            .map_err(|_| SignatureReject::BadSignature)?;
        if self.entries.len() >= self.max {
            if let Some((_, old)) = self.lru.pop_first() {
                self.entries.remove(&old);
                self.evicted += 1;
            }
        }
        self.entries.insert(
            *origin,
            Signer {
                raw: sig.key,
                key,
                discovery_high: None,
                tick,
            },
        );
        self.lru.insert(tick, *origin);
        Ok(())
    }

    /// True when a Discovery frame of `origin` with a `seq` at least this one already
    /// verified: this one is a copy or older, and needs no verification.
    pub fn discovery_seen(&self, origin: &PeerId, seq: u64) -> bool {
        self.entries
            .get(origin)
            .and_then(|s| s.discovery_high)
            .is_some_and(|high| seq <= high)
    }

    /// A Discovery frame of `origin` (known: it just verified) with `seq` verified.
    pub fn discovery_verified(&mut self, origin: &PeerId, seq: u64) {
        if let Some(s) = self.entries.get_mut(origin) {
            s.discovery_high = Some(s.discovery_high.map_or(seq, |h| h.max(seq)));
        }
    }
}

#[cfg(test)]
mod tests;
