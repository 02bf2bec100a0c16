//! The pre-shared key: group key K, discovery key Kd and the discovery announce MAC.
//!
//! **Owns:** the keys derived from the PSK and the beacon MAC checks. **Must not touch:** the
//! beacon codec (`wire::beacon`).

use std::fmt;

use subtle::ConstantTimeEq;
use zeroize::{Zeroize, ZeroizeOnDrop};

use super::kdf::{mac16, mac32};
use crate::wire::{Beacon, BeaconFilter, BeaconReject, DecodeError, DecodedBeacon};

/// Length of the MAC appended to a secured announce.
pub const ANNOUNCE_MAC_LEN: usize = 16;

const PSK_LABEL: &[u8] = b"multimaster-psk-v1";
const DISCOVERY_LABEL: &[u8] = b"discovery";

/// Why a PSK cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PskError {
    /// An empty PSK means a plaintext mesh; there is nothing to derive keys from.
    #[error("empty PSK: a plaintext mesh has no keys")]
    Empty,
}

/// The keys derived from the configured PSK, zeroized on drop.
///
/// `K = BLAKE2b-32(key = "multimaster-psk-v1", msg = psk)` (the label is the key) and
/// `Kd = BLAKE2b-32(key = K, msg = "discovery")`.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct PskKeys {
    k: [u8; 32],
    kd: [u8; 32],
}

impl PskKeys {
    /// Derives K and Kd from the PSK's raw bytes, exactly as given (no NUL, no normalising).
    pub fn derive(psk: &[u8]) -> Result<PskKeys, PskError> {
        if psk.is_empty() {
            return Err(PskError::Empty);
        }
        let k = mac32(PSK_LABEL, &[psk]);
        let kd = mac32(&k, &[DISCOVERY_LABEL]);
        Ok(PskKeys { k, kd })
    }

    /// The group key K (keys the handshake's master derivation).
    pub fn group_key(&self) -> &[u8; 32] {
        &self.k
    }

    /// The discovery key Kd (keys the announce MAC).
    pub fn discovery_key(&self) -> &[u8; 32] {
        &self.kd
    }

    /// `BLAKE2b-16(key = Kd, msg = body)`: the MAC a secured sender appends to an announce body.
    pub fn announce_mac(&self, body: &[u8]) -> [u8; ANNOUNCE_MAC_LEN] {
        mac16(&self.kd, &[body])
    }

    /// Appends the announce MAC over everything already in `datagram` (the whole body).
    pub fn seal_announce(&self, datagram: &mut Vec<u8>) {
        let mac = self.announce_mac(datagram);
        datagram.extend_from_slice(&mac);
    }

    /// Receive steps 1-3 of a secured node: requires more than 16 bytes, splits off the last 16
    /// and compares them with the recomputed MAC in constant time. Returns the body to parse.
    pub fn open_announce<'a>(&self, datagram: &'a [u8]) -> Result<&'a [u8], BeaconMacError> {
        if datagram.len() <= ANNOUNCE_MAC_LEN {
            return Err(BeaconMacError::TooShort);
        }
        let (body, mac) = datagram.split_at(datagram.len() - ANNOUNCE_MAC_LEN);
        let mac: &[u8; ANNOUNCE_MAC_LEN] = mac.try_into().expect("split at len - 16");
        if self.verify_announce_mac(body, mac) {
            Ok(body)
        } else {
            Err(BeaconMacError::BadMac)
        }
    }

    /// Compares `mac` with the MAC of `body` in constant time.
    pub fn verify_announce_mac(&self, body: &[u8], mac: &[u8; ANNOUNCE_MAC_LEN]) -> bool {
        bool::from(self.announce_mac(body).ct_eq(mac))
    }
}

impl fmt::Debug for PskKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PskKeys(<redacted>)")
    }
}

/// Why a secured node drops an announce before parsing it (all drops are silent on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BeaconMacError {
    /// A secured node needs more than the 16-byte MAC.
    #[error("announce too short to carry a MAC")]
    TooShort,
    /// The MAC does not verify under our Kd (another PSK, a plaintext announce, or tampering).
    #[error("announce MAC mismatch")]
    BadMac,
}

/// Why an announce is dropped, in the order the checks run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BeaconDrop {
    /// Steps 1-3: length or MAC (secured node only).
    #[error(transparent)]
    Mac(#[from] BeaconMacError),
    /// Steps 4-6: parse, mode flag, version, group, own id.
    #[error(transparent)]
    Rejected(#[from] BeaconReject),
}

/// A node's discovery mode: plaintext, or secured with the PSK's keys. Runs the beacon's
/// receive-side checks (`mesh/proto/protocol/secured.md`) in order: MAC first (secured), then
/// parse, mode flag, version, group, own id (so a secured node drops plaintext announces and a
/// plaintext node drops secured ones).
#[derive(Debug, Clone)]
pub enum ScoutGuard {
    /// Plaintext mesh: nothing is stripped; secured announces fail on the flag.
    Plaintext,
    /// Secured mesh: the MAC is verified first.
    Secured(PskKeys),
}

impl ScoutGuard {
    /// True in a secured mesh.
    pub fn is_secured(&self) -> bool {
        matches!(self, ScoutGuard::Secured(_))
    }

    /// The bytes the announce parser may read: the whole datagram (plaintext node), or the body
    /// before the verified MAC (secured node).
    pub fn admit<'a>(&self, datagram: &'a [u8]) -> Result<&'a [u8], BeaconMacError> {
        match self {
            ScoutGuard::Plaintext => Ok(datagram),
            ScoutGuard::Secured(keys) => keys.open_announce(datagram),
        }
    }

    /// All receive-side checks, in order. The filter's `secured` must equal
    /// [`ScoutGuard::is_secured`].
    pub fn accept(
        &self,
        datagram: &[u8],
        filter: &BeaconFilter<'_>,
    ) -> Result<DecodedBeacon, BeaconDrop> {
        debug_assert_eq!(filter.secured, self.is_secured());
        let body = self.admit(datagram)?;
        let decoded = Beacon::decode(datagram).map_err(BeaconReject::from)?;
        if decoded.mac_input.end > body.len() {
            // The C++ receiver parses only the body before the MAC: its fields must end there.
            let overrun = DecodeError::Truncated {
                field: "Announce.groupName",
                needed: decoded.mac_input.end,
                available: body.len(),
            };
            return Err(BeaconReject::from(overrun).into());
        }
        filter.check(&decoded.announce)?;
        Ok(decoded)
    }

    /// Appends the MAC to a finished announce body when secured; no-op when plaintext.
    pub fn seal(&self, datagram: &mut Vec<u8>) {
        if let ScoutGuard::Secured(keys) = self {
            keys.seal_announce(datagram);
        }
    }
}
