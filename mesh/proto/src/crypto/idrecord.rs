//! Signed identity records (frame type 8), gossiped so nodes learn the keys and names of
//! non-neighbours: `idPubKey(32) | version u64 | sig(64) | name str`, the signature covering
//! `"mm-idrec-v1" || version (u64 BE) || name`.
//!
//! **Owns:** the signed identity record and its version rule. **Must not touch:** the clock:
//! versions are seeded by the driver.

use ahash::AHashMap;

use super::identity::{verify_strict, Identity, IdentityPolicy, IdentityReject, MAX_NAME_LEN};
use super::kdf::node_id_from_key;
use crate::PeerId;

const IDREC_LABEL: &[u8] = b"mm-idrec-v1";
const IDREC_MAX: usize = IDREC_LABEL.len() + 8 + MAX_NAME_LEN;

fn signed_bytes<'b>(buf: &'b mut [u8; IDREC_MAX], version: u64, name: &[u8]) -> &'b [u8] {
    let l = IDREC_LABEL.len();
    buf[..l].copy_from_slice(IDREC_LABEL);
    buf[l..l + 8].copy_from_slice(&version.to_be_bytes());
    buf[l + 8..l + 8 + name.len()].copy_from_slice(name);
    &buf[..l + 8 + name.len()]
}

/// Signs this node's identity record at `version` (the name is the identity's, at most 255 bytes).
pub fn sign_identity_record(identity: &Identity, version: u64) -> [u8; 64] {
    let mut buf = [0u8; IDREC_MAX];
    identity.sign(signed_bytes(&mut buf, version, identity.name().as_bytes()))
}

/// Verifies a received record's signature strictly; returns the origin `BLAKE2b-16(key)`.
pub fn verify_identity_record(
    key: &[u8; 32],
    version: u64,
    name: &[u8],
    sig: &[u8; 64],
) -> Result<PeerId, IdentityReject> {
    if name.len() > MAX_NAME_LEN {
        return Err(IdentityReject::BadSignature);
    }
    let mut buf = [0u8; IDREC_MAX];
    verify_strict(key, signed_bytes(&mut buf, version, name), sig)?;
    Ok(node_id_from_key(key))
}

/// Mints the versions of this node's identity records: seeded by the driver from wall-clock milliseconds
/// at start (so a restarted node outranks its old records), +1 per record.
#[derive(Debug, Clone)]
pub struct RecordVersions {
    next: u64,
}

impl RecordVersions {
    /// Seeds from a given value.
    pub fn starting_at(first: u64) -> RecordVersions {
        RecordVersions { next: first }
    }

    /// The version for the next record.
    pub fn next_version(&mut self) -> u64 {
        let v = self.next;
        self.next = self.next.saturating_add(1);
        v
    }
}

/// Why a received identity record is dropped (not re-flooded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordDrop {
    /// Our own record came back.
    #[error("own identity record")]
    Own,
    /// The key is not on a configured allowlist.
    #[error("identity record key not trusted")]
    Untrusted,
    /// The signature (or key) does not verify.
    #[error("identity record signature invalid")]
    BadSignature,
    /// Not newer than the last version seen for this origin.
    #[error("identity record not newer than the one held")]
    Stale,
    /// The book is full and this origin is new.
    #[error("identity book full")]
    Full,
}

/// What is known about one origin's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownIdentity {
    /// Ed25519 key.
    pub key: [u8; 32],
    /// Newest version seen.
    pub version: u64,
    /// Signed name.
    pub name: Box<str>,
}

/// The identities learned from records, bounded by a configured ceiling.
#[derive(Debug)]
pub struct IdentityBook {
    own: PeerId,
    entries: AHashMap<PeerId, KnownIdentity>,
    max_entries: usize,
    /// Records refused because the book was full.
    pub full_drops: u64,
}

impl IdentityBook {
    /// An empty book for node `own`, holding at most `max_entries` origins.
    pub fn new(own: PeerId, max_entries: usize) -> IdentityBook {
        IdentityBook {
            own,
            entries: AHashMap::new(),
            max_entries,
            full_drops: 0,
        }
    }

    /// Applies a received record with the protocol's receiver rules (`secured.md`), in order:
    /// drop our own, keys not on a non-empty allowlist, bad signatures, versions no newer than
    /// held. On success the record is stored and should be re-flooded; returns its origin.
    pub fn accept(
        &mut self,
        policy: &IdentityPolicy,
        key: &[u8; 32],
        version: u64,
        name: &[u8],
        sig: &[u8; 64],
    ) -> Result<PeerId, RecordDrop> {
        let origin = node_id_from_key(key);
        if origin == self.own {
            return Err(RecordDrop::Own);
        }
        policy.admit(key).map_err(|_| RecordDrop::Untrusted)?;
        verify_identity_record(key, version, name, sig).map_err(|_| RecordDrop::BadSignature)?;
        if let Some(held) = self.entries.get(&origin) {
            if version <= held.version {
                return Err(RecordDrop::Stale);
            }
        } else if self.entries.len() >= self.max_entries {
            self.full_drops += 1;
            tracing::debug!(%origin, "identity book full, record dropped");
            return Err(RecordDrop::Full);
        }
        let name = String::from_utf8_lossy(name).into();
        self.entries.insert(
            origin,
            KnownIdentity {
                key: *key,
                version,
                name,
            },
        );
        Ok(origin)
    }

    /// What is known about `origin`.
    pub fn get(&self, origin: &PeerId) -> Option<&KnownIdentity> {
        self.entries.get(origin)
    }

    /// Forgets an origin (e.g. when it leaves the membership).
    pub fn remove(&mut self, origin: &PeerId) -> Option<KnownIdentity> {
        self.entries.remove(origin)
    }

    /// Number of origins held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
