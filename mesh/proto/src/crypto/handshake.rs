//! The per-connection handshake: ephemeral X25519, master and directional keys, AuthConfirm tags
//! and, in an identity mesh, the transcript signatures. Sans-I/O: the link state machine feeds
//! the peer's Hello and AuthConfirm fields in and sends what comes out.
//!
//! **Owns:** the X25519 exchange, key derivation, AuthConfirm tags and the transcript. **Must not
//! touch:** frames or sockets: the control core feeds it the Hello fields and sends what it
//! returns.
//!
//! Order (`mesh/proto/protocol/secured.md`, "The handshake"): [`Handshake::fill_hello`] sets the
//! crypto fields of our Hello/HelloAck (and Shoal's AES-256-GCM offer in its extension block);
//! [`Handshake::on_peer_hello`] picks the record suite, derives the keys and returns our
//! AuthConfirm (sent in plaintext); [`Handshake::on_peer_auth_confirm`] checks the peer's tag,
//! then its identity, and returns the record sealer/opener. From then on every frame we send is
//! sealed and every byte read after the peer's AuthConfirm frame is records.

use std::fmt;
use std::sync::Arc;

use rand::{CryptoRng, RngCore};
use subtle::ConstantTimeEq;
use x25519_dalek::{PublicKey, StaticSecret};
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

use super::identity::{verify_transcript, Identity, IdentityPolicy, IdentityReject, VerifiedPeer};
use super::kdf::{mac32, mac64, node_id_from_key};
use super::psk::PskKeys;
use super::record::{RecordOpener, RecordSealer};
use super::suite::{RecordSuite, RecordSuitePolicy};
use crate::wire::{AuthConfirm, Features, Hello, HelloIdentity, ShoalExtension};
use crate::PeerId;

const SESSION_LABEL: &[u8] = b"mm-session-keys-v1";
const CONFIRM_LABEL: &[u8] = b"mm-confirm-v1";
const AES_KEYS_LABEL: &[u8] = b"shoal-aes256gcm-keys-v1";
const AES_CONFIRM_LABEL: &[u8] = b"shoal-aes256gcm-confirm-v1";

/// The C++ library's default `maxMessageBytes`.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = crate::wire::MAX_MESSAGE_BYTES as usize;

/// Why a secured configuration is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecureConfigError {
    /// The group name does not fit a wire `str`, so it could never match the peer's copy.
    #[error("group name is {0} bytes, more than 255")]
    GroupTooLong(usize),
}

/// Everything the handshakes of one node share: PSK keys, group, identity and trust policy.
/// Build once, share by `Arc` across connections; rebuild it to change the policy (e.g. to revoke
/// a key) and re-check established peers with [`IdentityPolicy::admit`].
#[derive(Clone)]
pub struct SecureContext {
    psk: PskKeys,
    group: Box<[u8]>,
    identity: Option<Identity>,
    policy: IdentityPolicy,
    max_message_bytes: usize,
    offer_aes: bool,
}

impl SecureContext {
    /// A PSK-only context for `group` (raw bytes of the configured group name).
    pub fn new(psk: PskKeys, group: &[u8]) -> Result<SecureContext, SecureConfigError> {
        if group.len() > 255 {
            return Err(SecureConfigError::GroupTooLong(group.len()));
        }
        Ok(SecureContext {
            psk,
            group: group.into(),
            identity: None,
            policy: IdentityPolicy::default(),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            offer_aes: false,
        })
    }

    /// Applies the `record_suite` setting: whether our Hellos offer AES-256-GCM to Shoal peers
    /// (resolved here, once, for `auto`). Without this call nothing is offered and every link
    /// is ChaCha20-Poly1305, as in the C++ library.
    pub fn with_record_suite(mut self, policy: RecordSuitePolicy) -> SecureContext {
        self.offer_aes = policy.offers_aes();
        self
    }

    /// Whether our Hellos offer AES-256-GCM.
    pub fn offers_aes(&self) -> bool {
        self.offer_aes
    }

    /// Adds this node's identity and the policy applied to peers' identities.
    pub fn with_identity(mut self, identity: Identity, policy: IdentityPolicy) -> SecureContext {
        self.identity = Some(identity);
        self.policy = policy;
        self
    }

    /// Sets `maxMessageBytes` (ours, and assumed for peers when sizing records).
    pub fn with_max_message_bytes(mut self, n: usize) -> SecureContext {
        self.max_message_bytes = n;
        self
    }

    /// The PSK keys.
    pub fn psk(&self) -> &PskKeys {
        &self.psk
    }

    /// This node's identity, if any.
    pub fn identity(&self) -> Option<&Identity> {
        self.identity.as_ref()
    }

    /// The trust policy.
    pub fn policy(&self) -> &IdentityPolicy {
        &self.policy
    }

    /// The trust policy, to change in a copy of the context (handshakes already running keep
    /// the context they started with).
    pub fn policy_mut(&mut self) -> &mut IdentityPolicy {
        &mut self.policy
    }

    /// `maxMessageBytes`.
    pub fn max_message_bytes(&self) -> usize {
        self.max_message_bytes
    }
}

impl fmt::Debug for SecureContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecureContext")
            .field("group", &String::from_utf8_lossy(&self.group))
            .field("identity", &self.identity)
            .field("policy", &self.policy)
            .field("offer_aes", &self.offer_aes)
            .finish_non_exhaustive()
    }
}

/// The keys of one session, derived from the X25519 result (zeroized on drop):
/// `master = BLAKE2b-64(K, dh || lo || hi || group)`,
/// `kA || kB = BLAKE2b-64(master, "mm-session-keys-v1")`,
/// `confirmKey = BLAKE2b-32(master, "mm-confirm-v1")`.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct SessionKeys {
    master: [u8; 64],
    ka: [u8; 32],
    kb: [u8; 32],
    confirm_key: [u8; 32],
    lo: [u8; 32],
}

impl SessionKeys {
    /// Derives the session keys; `lo`/`hi` are the two ephemeral public keys in memcmp order
    /// (either order may be passed). `group` is our configured group name, raw bytes.
    pub fn derive(
        psk: &PskKeys,
        dh: &[u8; 32],
        eph_1: &[u8; 32],
        eph_2: &[u8; 32],
        group: &[u8],
    ) -> SessionKeys {
        let (lo, hi) = if eph_1 <= eph_2 {
            (eph_1, eph_2)
        } else {
            (eph_2, eph_1)
        };
        let master = mac64(psk.group_key(), &[dh, lo, hi, group]);
        let mut both = Zeroizing::new(mac64(&master, &[SESSION_LABEL]));
        let confirm_key = mac32(&master, &[CONFIRM_LABEL]);
        let mut ka = [0u8; 32];
        let mut kb = [0u8; 32];
        ka.copy_from_slice(&both[..32]);
        kb.copy_from_slice(&both[32..]);
        both.zeroize();
        SessionKeys {
            master,
            ka,
            kb,
            confirm_key,
            lo: *lo,
        }
    }

    /// The 64-byte master secret.
    pub fn master(&self) -> &[u8; 64] {
        &self.master
    }

    /// kA: the send key of the side whose ephemeral key is `lo`.
    pub fn ka(&self) -> &[u8; 32] {
        &self.ka
    }

    /// kB: the send key of the `hi` side.
    pub fn kb(&self) -> &[u8; 32] {
        &self.kb
    }

    /// confirmKey.
    pub fn confirm_key(&self) -> &[u8; 32] {
        &self.confirm_key
    }

    /// `(tx, rx)` for the side whose ephemeral public key is `own_eph` (node ids and
    /// dialer/acceptor roles do not matter).
    pub fn directional(&self, own_eph: &[u8; 32]) -> (&[u8; 32], &[u8; 32]) {
        if own_eph == &self.lo {
            (&self.ka, &self.kb)
        } else {
            (&self.kb, &self.ka)
        }
    }

    /// The AuthConfirm tag of the side with ephemeral key `eph`: `BLAKE2b-32(confirmKey, eph)`.
    pub fn tag(&self, eph: &[u8; 32]) -> [u8; 32] {
        mac32(&self.confirm_key, &[eph])
    }

    /// The keys of an AES-256-GCM link (`protocol/aes-256-gcm.md`): the same master, other
    /// labels, and the two Hello extension blocks bound in, `ext_lo` from the Hello of the side
    /// whose ephemeral key is `lo`:
    /// `T = u32(|ext_lo|) || ext_lo || u32(|ext_hi|) || ext_hi`,
    /// `kA || kB = BLAKE2b-64(master, "shoal-aes256gcm-keys-v1" || T)`,
    /// `confirmKey = BLAKE2b-32(master, "shoal-aes256gcm-confirm-v1" || T)`.
    /// [`directional`](Self::directional) and [`tag`](Self::tag) work on the result as on
    /// secured.md's keys, so two sides that saw different blocks disagree on the tags.
    pub fn aes_256_gcm(&self, ext_lo: &[u8], ext_hi: &[u8]) -> SessionKeys {
        let (len_lo, len_hi) = (
            (ext_lo.len() as u32).to_be_bytes(),
            (ext_hi.len() as u32).to_be_bytes(),
        );
        let t: [&[u8]; 4] = [&len_lo, ext_lo, &len_hi, ext_hi];
        let mut both = Zeroizing::new(mac64(
            &self.master,
            &[AES_KEYS_LABEL, t[0], t[1], t[2], t[3]],
        ));
        let confirm_key = mac32(&self.master, &[AES_CONFIRM_LABEL, t[0], t[1], t[2], t[3]]);
        let mut ka = [0u8; 32];
        let mut kb = [0u8; 32];
        ka.copy_from_slice(&both[..32]);
        kb.copy_from_slice(&both[32..]);
        both.zeroize();
        SessionKeys {
            master: self.master,
            ka,
            kb,
            confirm_key,
            lo: self.lo,
        }
    }
}

impl fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionKeys(<redacted>)")
    }
}

/// Why a handshake fails. Every variant means: drop the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// The peer's secure flag is 0 (or it sent no ephemeral key): modes differ.
    #[error("peer is not in secured mode")]
    PeerNotSecured,
    /// The peer's ephemeral key is of low order: the X25519 result is all zeros.
    #[error("peer ephemeral key has low order")]
    LowOrderKey,
    /// The AuthConfirm tag does not match (other PSK or tampered handshake).
    #[error("AuthConfirm tag mismatch")]
    BadTag,
    /// The peer's identity is refused.
    #[error("identity rejected: {0}")]
    Identity(#[from] IdentityReject),
    /// A second Hello.
    #[error("unexpected Hello")]
    UnexpectedHello,
    /// AuthConfirm outside AwaitingConfirm.
    #[error("AuthConfirm outside AwaitingConfirm")]
    UnexpectedAuthConfirm,
}

/// The outcome of a completed handshake.
pub struct Established {
    /// The suite of both directions' records.
    pub suite: RecordSuite,
    /// Seals everything we send from now on (`txKey`, counter 0).
    pub sealer: RecordSealer,
    /// Opens everything the peer sends after its AuthConfirm (`rxKey`, counter 0).
    pub opener: RecordOpener,
    /// The peer's identity when it was verified (both sides had identities).
    pub peer: Option<VerifiedPeer>,
}

impl fmt::Debug for Established {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Established")
            .field("suite", &self.suite)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

struct AwaitingConfirm {
    suite: RecordSuite,
    tx: Zeroizing<[u8; 32]>,
    rx: Zeroizing<[u8; 32]>,
    expected_tag: [u8; 32],
    /// The peer identity to verify: both Hellos had identities.
    peer_identity: Option<PendingPeer>,
}

struct PendingPeer {
    node_id: PeerId,
    key: [u8; 32],
    name: Box<[u8]>,
    eph: [u8; 32],
}

enum State {
    AwaitingHello(StaticSecret),
    AwaitingConfirm(Box<AwaitingConfirm>),
    Done,
}

/// One connection's handshake (sans-I/O). The ephemeral secret is wiped once the DH is done.
pub struct Handshake {
    ctx: Arc<SecureContext>,
    eph_public: [u8; 32],
    /// The extension block our Hello carried, as [`fill_hello`](Handshake::fill_hello) left it.
    own_ext: Option<ShoalExtension>,
    state: State,
}

impl fmt::Debug for Handshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::AwaitingHello(_) => "AwaitingHello",
            State::AwaitingConfirm(_) => "AwaitingConfirm",
            State::Done => "Done",
        };
        f.debug_struct("Handshake")
            .field("eph_public", &hex::encode(self.eph_public))
            .field("state", &state)
            .finish()
    }
}

impl Handshake {
    /// Starts a handshake with a fresh random ephemeral key pair.
    pub fn new(ctx: Arc<SecureContext>, rng: &mut (impl RngCore + CryptoRng)) -> Handshake {
        Handshake::with_secret(ctx, StaticSecret::random_from_rng(rng))
    }

    /// Starts a handshake with a given ephemeral secret. Only for reproducing test vectors: a
    /// reused ephemeral secret gives up forward secrecy.
    pub fn with_ephemeral_secret(ctx: Arc<SecureContext>, secret: [u8; 32]) -> Handshake {
        Handshake::with_secret(ctx, StaticSecret::from(secret))
    }

    fn with_secret(ctx: Arc<SecureContext>, secret: StaticSecret) -> Handshake {
        let eph_public = PublicKey::from(&secret).to_bytes();
        Handshake {
            ctx,
            eph_public,
            own_ext: None,
            state: State::AwaitingHello(secret),
        }
    }

    /// Our ephemeral public key.
    pub fn eph_public(&self) -> &[u8; 32] {
        &self.eph_public
    }

    /// Fills the crypto fields of our Hello/HelloAck: `ephPubKey` and, with an identity,
    /// `idPubKey`, `nodeName` and the node id derived from the key; and when the Hello carries
    /// Shoal's extension block, sets or clears its AES-256-GCM offer per the context (and
    /// remembers the block, which an AES link's keys bind). Send it unchanged, at once.
    pub fn fill_hello(&mut self, hello: &mut Hello) {
        if let Some(ext) = hello.shoal.as_mut() {
            ext.features = if self.ctx.offer_aes {
                ext.features.union(Features::AES_GCM_RECORDS)
            } else {
                Features(ext.features.0 & !Features::AES_GCM_RECORDS.0)
            };
        }
        self.own_ext = hello.shoal.clone();
        hello.eph_pub_key = Some(self.eph_public);
        hello.identity = self.ctx.identity.as_ref().map(|id| {
            hello.node_id = id.node_id();
            HelloIdentity {
                id_pub_key: *id.public_key(),
                node_name: id.name().to_owned(),
            }
        });
    }

    /// True while waiting for the peer's AuthConfirm.
    pub fn awaiting_confirm(&self) -> bool {
        matches!(self.state, State::AwaitingConfirm(_))
    }

    /// Handles the peer's Hello/HelloAck (after the link checked version and group): checks the
    /// secure flag and `require_identity`, picks the suite ([`Handshake::suite_for`]), derives
    /// its keys and returns our AuthConfirm, which the link sends in plaintext.
    pub fn on_peer_hello(&mut self, peer: &Hello) -> Result<AuthConfirm, HandshakeError> {
        let State::AwaitingHello(_) = &self.state else {
            return Err(HandshakeError::UnexpectedHello);
        };
        let State::AwaitingHello(secret) = std::mem::replace(&mut self.state, State::Done) else {
            unreachable!("checked above");
        };
        let Some(peer_eph) = peer.eph_pub_key else {
            return Err(HandshakeError::PeerNotSecured);
        };
        let ctx = &*self.ctx;
        let own = ctx.identity.as_ref();
        if own.is_some() && ctx.policy.require_identity() && peer.identity.is_none() {
            return Err(IdentityReject::Missing.into());
        }

        let dh = secret.diffie_hellman(&PublicKey::from(peer_eph));
        drop(secret);
        if !dh.was_contributory() {
            return Err(HandshakeError::LowOrderKey);
        }
        let keys = SessionKeys::derive(
            &ctx.psk,
            dh.as_bytes(),
            &self.eph_public,
            &peer_eph,
            &ctx.group,
        );
        drop(dh);
        let suite = self.suite_for(peer);
        let keys = match (suite, &self.own_ext, &peer.shoal) {
            (RecordSuite::Aes256Gcm, Some(own), Some(theirs)) => {
                let (own, theirs) = (own.to_bytes(), theirs.to_bytes());
                let (lo, hi) = if self.eph_public <= peer_eph {
                    (&own, &theirs)
                } else {
                    (&theirs, &own)
                };
                keys.aes_256_gcm(lo, hi)
            }
            _ => keys,
        };
        let (tx, rx) = keys.directional(&self.eph_public);
        let (tx, rx) = (Zeroizing::new(*tx), Zeroizing::new(*rx));
        let tag = keys.tag(&self.eph_public);
        let expected_tag = keys.tag(&peer_eph);
        drop(keys);

        let (sig, peer_identity) = match (own, &peer.identity) {
            (Some(own), Some(id)) => (
                Some(own.sign_transcript(&self.eph_public, &peer_eph)),
                Some(PendingPeer {
                    node_id: peer.node_id,
                    key: id.id_pub_key,
                    name: id.node_name.as_bytes().into(),
                    eph: peer_eph,
                }),
            ),
            _ => (None, None),
        };
        self.state = State::AwaitingConfirm(Box::new(AwaitingConfirm {
            suite,
            tx,
            rx,
            expected_tag,
            peer_identity,
        }));
        Ok(AuthConfirm { tag, sig })
    }

    /// Handles the peer's AuthConfirm, checking in the protocol's order (`secured.md`): the tag
    /// (constant time), then, when both sides have identities, signature present, node id =
    /// `BLAKE2b-16(key)`, signature valid, key on the allowlist. Success ends the handshake.
    pub fn on_peer_auth_confirm(
        &mut self,
        confirm: &AuthConfirm,
    ) -> Result<Established, HandshakeError> {
        let State::AwaitingConfirm(_) = &self.state else {
            return Err(HandshakeError::UnexpectedAuthConfirm);
        };
        let State::AwaitingConfirm(st) = std::mem::replace(&mut self.state, State::Done) else {
            unreachable!("checked above");
        };
        if !bool::from(confirm.tag.ct_eq(&st.expected_tag)) {
            return Err(HandshakeError::BadTag);
        }
        let peer = match &st.peer_identity {
            None => None,
            Some(p) => Some(self.check_peer_identity(p, confirm.sig.as_ref())?),
        };
        let max = self.ctx.max_message_bytes;
        Ok(Established {
            suite: st.suite,
            sealer: RecordSealer::with_suite(st.suite, &st.tx, max),
            opener: RecordOpener::with_suite(st.suite, &st.rx, max),
            peer,
        })
    }

    /// The suite of a link whose peer sent `peer`: AES-256-GCM exactly when our Hello offered
    /// it ([`fill_hello`](Self::fill_hello)) and the peer's did too; ChaCha20-Poly1305
    /// otherwise (every multimaster peer). A peer that saw another offer than we sent derives
    /// other keys and tags, so the AuthConfirm exchange fails rather than the records.
    pub fn suite_for(&self, peer: &Hello) -> RecordSuite {
        let offers = |e: Option<&ShoalExtension>| {
            e.is_some_and(|e| e.features.contains(Features::AES_GCM_RECORDS))
        };
        if offers(self.own_ext.as_ref()) && offers(peer.shoal.as_ref()) {
            RecordSuite::Aes256Gcm
        } else {
            RecordSuite::ChaCha20Poly1305
        }
    }

    fn check_peer_identity(
        &self,
        p: &PendingPeer,
        sig: Option<&[u8; 64]>,
    ) -> Result<VerifiedPeer, IdentityReject> {
        let sig = sig.ok_or(IdentityReject::MissingSignature)?;
        let node_id = node_id_from_key(&p.key);
        if node_id != p.node_id {
            return Err(IdentityReject::NodeIdMismatch);
        }
        verify_transcript(&p.key, &p.eph, &self.eph_public, &p.name, sig)?;
        let label = self.ctx.policy.admit(&p.key)?;
        Ok(VerifiedPeer {
            key: p.key,
            node_id,
            name: String::from_utf8_lossy(&p.name).into(),
            label: label.map(Into::into),
        })
    }
}
