//! Ed25519 node identity: the key, the handshake transcript signature and the local trust
//! policy (allowlist with labels, `require_identity`). Reading and creating the seed *file* is
//! the driver's job (`shoal_mesh::identity_file`): nothing here touches the file system.
//!
//! **Owns:** the Ed25519 node key, transcript signatures and the trust policy. **Must not touch:**
//! the seed file (`shoal_mesh::identity_file` reads and writes it).

use std::fmt;
use std::path::PathBuf;

use ahash::{AHashMap, AHashSet};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use rand::{CryptoRng, RngCore};
use zeroize::Zeroizing;

use super::kdf::node_id_from_key;
use crate::PeerId;

/// Largest name that fits a wire `str` (a longer name could never verify: the signer would sign
/// the full name and the wire would carry a cut one).
pub const MAX_NAME_LEN: usize = 255;

const TRANSCRIPT_LABEL: &[u8] = b"mm-id-v1";
const TRANSCRIPT_MAX: usize = TRANSCRIPT_LABEL.len() + 32 + 32 + MAX_NAME_LEN;

/// Why an identity cannot be built or loaded.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The seed text is not exactly 64 hex characters.
    #[error("identity seed must be 64 hex characters")]
    BadSeed,
    /// A public key (e.g. a `trustedKeys` entry) is not 64 hex characters of a valid Ed25519 key.
    #[error("identity public key must be 64 hex characters of a valid Ed25519 key")]
    BadPublicKey,
    /// The node name does not fit a wire `str`.
    #[error("node name is {0} bytes, more than 255")]
    NameTooLong(usize),
    /// Reading or creating the seed file failed.
    #[error("identity file {path}: {source}")]
    Io {
        /// The seed file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// This node's Ed25519 identity and name. The secret key is zeroized on drop (clones too).
#[derive(Clone)]
pub struct Identity {
    signing: SigningKey,
    public: [u8; 32],
    node_id: PeerId,
    name: Box<str>,
}

impl Identity {
    /// Builds the identity from a 32-byte seed (RFC 8032 key derivation, as libsodium's
    /// `crypto_sign_seed_keypair`).
    pub fn from_seed(seed: &[u8; 32], name: &str) -> Result<Identity, IdentityError> {
        if name.len() > MAX_NAME_LEN {
            return Err(IdentityError::NameTooLong(name.len()));
        }
        let signing = SigningKey::from_bytes(seed);
        let public = signing.verifying_key().to_bytes();
        Ok(Identity {
            signing,
            public,
            node_id: node_id_from_key(&public),
            name: name.into(),
        })
    }

    /// Builds the identity from the seed written as 64 hex characters (surrounding whitespace
    /// ignored), as in `identitySeedHex` or an identity file.
    pub fn from_seed_hex(hex_seed: &str, name: &str) -> Result<Identity, IdentityError> {
        let mut seed = Zeroizing::new([0u8; 32]);
        hex::decode_to_slice(hex_seed.trim(), &mut seed[..]).map_err(|_| IdentityError::BadSeed)?;
        Identity::from_seed(&seed, name)
    }

    /// Creates a fresh random identity (not persisted).
    pub fn generate(
        rng: &mut (impl RngCore + CryptoRng),
        name: &str,
    ) -> Result<Identity, IdentityError> {
        let mut seed = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(&mut seed[..]);
        Identity::from_seed(&seed, name)
    }

    /// The Ed25519 public key (`idPubKey` on the wire).
    pub fn public_key(&self) -> &[u8; 32] {
        &self.public
    }

    /// The node id this key implies, `BLAKE2b-16(pk)`; it replaces any configured node id.
    pub fn node_id(&self) -> PeerId {
        self.node_id
    }

    /// The node name sent in Hello and IdentityRecord.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Signs the handshake transcript `"mm-id-v1" || own e_pk || peer e_pk || own name`.
    pub fn sign_transcript(&self, own_eph: &[u8; 32], peer_eph: &[u8; 32]) -> [u8; 64] {
        let mut buf = [0u8; TRANSCRIPT_MAX];
        let msg = transcript(&mut buf, own_eph, peer_eph, self.name.as_bytes());
        self.signing.sign(msg).to_bytes()
    }

    /// Signs arbitrary bytes (used for identity records).
    pub(crate) fn sign(&self, msg: &[u8]) -> [u8; 64] {
        self.signing.sign(msg).to_bytes()
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("node_id", &self.node_id)
            .field("public", &hex::encode(self.public))
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn transcript<'b>(
    buf: &'b mut [u8; TRANSCRIPT_MAX],
    first_eph: &[u8; 32],
    second_eph: &[u8; 32],
    name: &[u8],
) -> &'b [u8] {
    let l = TRANSCRIPT_LABEL.len();
    buf[..l].copy_from_slice(TRANSCRIPT_LABEL);
    buf[l..l + 32].copy_from_slice(first_eph);
    buf[l + 32..l + 64].copy_from_slice(second_eph);
    let name = &name[..name.len().min(MAX_NAME_LEN)];
    buf[l + 64..l + 64 + name.len()].copy_from_slice(name);
    &buf[..l + 64 + name.len()]
}

/// Parses a public key written as 64 hex characters (a `trustedKeys` entry), checking that it is
/// a valid Ed25519 point.
pub fn parse_public_key_hex(text: &str) -> Result<[u8; 32], IdentityError> {
    let mut key = [0u8; 32];
    hex::decode_to_slice(text.trim(), &mut key).map_err(|_| IdentityError::BadPublicKey)?;
    VerifyingKey::from_bytes(&key).map_err(|_| IdentityError::BadPublicKey)?;
    Ok(key)
}

/// Verifies a strict Ed25519 signature (libsodium's rules: canonical S, no small-order A or R).
pub(crate) fn verify_strict(
    key: &[u8; 32],
    msg: &[u8],
    sig: &[u8; 64],
) -> Result<(), IdentityReject> {
    let key = VerifyingKey::from_bytes(key).map_err(|_| IdentityReject::BadKey)?;
    key.verify_strict(msg, &Signature::from_bytes(sig))
        .map_err(|_| IdentityReject::BadSignature)
}

/// Verifies the peer's handshake signature: the transcript rebuilt as
/// `"mm-id-v1" || peer e_pk || own e_pk || peer's name from its Hello`.
pub fn verify_transcript(
    peer_key: &[u8; 32],
    peer_eph: &[u8; 32],
    own_eph: &[u8; 32],
    peer_name: &[u8],
    sig: &[u8; 64],
) -> Result<(), IdentityReject> {
    if peer_name.len() > MAX_NAME_LEN {
        return Err(IdentityReject::BadSignature);
    }
    let mut buf = [0u8; TRANSCRIPT_MAX];
    let msg = transcript(&mut buf, peer_eph, own_eph, peer_name);
    verify_strict(peer_key, msg, sig)
}

/// Why a peer's identity is refused (the identity errors of `mesh/proto/protocol/secured.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdentityReject {
    /// `require_identity` is set and the peer's Hello shows no identity.
    #[error("peer shows no identity but identity is required")]
    Missing,
    /// Both Hellos had identities but the AuthConfirm carries no signature.
    #[error("peer sent no handshake signature")]
    MissingSignature,
    /// The peer's node id is not `BLAKE2b-16(idPubKey)`.
    #[error("peer node id is not the hash of its identity key")]
    NodeIdMismatch,
    /// The identity key is not a valid Ed25519 point.
    #[error("peer identity key is not a valid Ed25519 key")]
    BadKey,
    /// The signature does not verify (strictly) over the transcript.
    #[error("peer signature does not verify")]
    BadSignature,
    /// An allowlist is configured and the key is not (or no longer) on it.
    #[error("peer identity key is not trusted")]
    Untrusted,
}

/// Which identity keys this node accepts.
#[derive(Debug, Clone, Default)]
pub struct IdentityPolicy {
    /// `None`: any key (no `trustedKeys` configured). `Some`: only the listed keys, even when the
    /// list has become empty by revocation (an emptied allowlist must not turn into "anyone").
    allow: Option<AHashMap<[u8; 32], Box<str>>>,
    /// Keys revoked at run time: refused even by an open policy (which has no list to remove
    /// them from), until trusted again.
    revoked: AHashSet<[u8; 32]>,
    require_identity: bool,
}

impl IdentityPolicy {
    /// Accepts any identity key; identity-less peers are accepted unless `require_identity`.
    pub fn open(require_identity: bool) -> IdentityPolicy {
        IdentityPolicy {
            allow: None,
            revoked: AHashSet::new(),
            require_identity,
        }
    }

    /// Accepts only the listed keys, each with a local label (for logs and name display).
    pub fn allowlist<I, L>(keys: I, require_identity: bool) -> IdentityPolicy
    where
        I: IntoIterator<Item = ([u8; 32], L)>,
        L: Into<Box<str>>,
    {
        let allow = keys.into_iter().map(|(k, l)| (k, l.into())).collect();
        IdentityPolicy {
            allow: Some(allow),
            revoked: AHashSet::new(),
            require_identity,
        }
    }

    /// True when peers without an identity are refused (applies only when we have one).
    pub fn require_identity(&self) -> bool {
        self.require_identity
    }

    /// Adds a key to the allowlist (turning an open policy into an allowlist of one).
    pub fn trust(&mut self, key: [u8; 32], label: impl Into<Box<str>>) {
        self.revoked.remove(&key);
        self.allow
            .get_or_insert_with(AHashMap::new)
            .insert(key, label.into());
    }

    /// Removes a key and refuses it from now on (also under an open policy). The policy stays
    /// an allowlist even if this empties it, so a revoked key can never pass again until
    /// [`trust`](Self::trust)ed anew. Returns whether the key was listed.
    pub fn revoke(&mut self, key: &[u8; 32]) -> bool {
        self.revoked.insert(*key);
        self.allow.as_mut().is_some_and(|m| m.remove(key).is_some())
    }

    /// Every key revoked (and not trusted again since).
    pub fn revoked_keys(&self) -> impl Iterator<Item = &[u8; 32]> + '_ {
        self.revoked.iter()
    }

    /// Checks a key against the allowlist; returns the local label when listed.
    pub fn admit(&self, key: &[u8; 32]) -> Result<Option<&str>, IdentityReject> {
        if self.revoked.contains(key) {
            return Err(IdentityReject::Untrusted);
        }
        match &self.allow {
            None => Ok(None),
            Some(map) => map
                .get(key)
                .map(|l| Some(&**l))
                .ok_or(IdentityReject::Untrusted),
        }
    }
}

/// A peer identity that passed every check of the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedPeer {
    /// The peer's Ed25519 key.
    pub key: [u8; 32],
    /// Its node id, `BLAKE2b-16(key)`.
    pub node_id: PeerId,
    /// The name from its Hello (signed in the transcript).
    pub name: Box<str>,
    /// The local label from the allowlist, when one is configured.
    pub label: Option<Box<str>>,
}
