//! Cryptography of the secured mesh, byte-exact with the C++ library (see
//! `mesh/proto/protocol/secured.md`), as pure I/O-free code.
//!
//! **Owns:** the secured mesh's cryptography, byte-exact. **Must not touch:** frames, sockets,
//! files or the clock.
//!
//! Its modules:
//!
//! - [`psk`]: K and Kd from the PSK; the scouting beacon MAC (the C++ library's announce MAC)
//!   and the receive-side checks.
//! - [`handshake`]: ephemeral X25519, master/directional keys, AuthConfirm tags, transcript
//!   signatures, as a sans-I/O state machine.
//! - [`record`]: records with counter nonces, sealed and opened in place (`ring`'s assembly
//!   ciphers; everything else here is on the dalek and RustCrypto crates).
//! - [`suite`]: the record suites (ChaCha20-Poly1305; AES-256-GCM between Shoal nodes that
//!   both offer it), the `record_suite` setting and the record key slot.
//! - [`identity`]: Ed25519 identity, seed file, trust policy; [`idrecord`]: signed identity
//!   records; [`signed`]: Shoal's signed Membership and Discovery records and the book of
//!   their origins' keys.
//!
//! All secret keys are zeroized on drop (for the record keys, which `ring` holds, see
//! [`record`](record#keys) for how and what that does not cover); tags are compared in
//! constant time.

pub mod handshake;
pub mod identity;
pub mod idrecord;
mod kdf;
pub mod psk;
pub mod record;
pub mod signed;
pub mod suite;

pub use handshake::{
    Established, Handshake, HandshakeError, SecureConfigError, SecureContext, SessionKeys,
    DEFAULT_MAX_MESSAGE_BYTES,
};
pub use identity::{
    parse_public_key_hex, verify_transcript, Identity, IdentityError, IdentityPolicy,
    IdentityReject, VerifiedPeer,
};
pub use idrecord::{
    sign_identity_record, verify_identity_record, IdentityBook, KnownIdentity, RecordDrop,
    RecordVersions,
};
pub use kdf::node_id_from_key;
pub use psk::{BeaconDrop, BeaconMacError, PskError, PskKeys, ScoutGuard};
pub use record::{
    OpenError, Opened, RecordBuf, RecordBuilder, RecordOpener, RecordReader, RecordSealer,
    SealError,
};
pub use signed::{sign_discovery, sign_membership, SignatureReject, SignerBook};
pub use suite::{aes_accelerated, RecordSuite, RecordSuitePolicy, UnknownSuite};
