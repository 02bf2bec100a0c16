//! The discovery datagram: `"MMCA" | version u8 | flags u8 | tcpListenPort u16 | nodeId 16 |
//! groupName str | [MAC 16 if secured]`.
//!
//! **Owns:** the scouting beacon (the spec's announce datagram) and its filter. **Must not touch:**
//! its MAC (`crypto::psk`) or when beacons are sent (`scouting`).

use super::cursor::{check_str, put_str, Cursor};
use super::defaults::{ANNOUNCE_FLAG_SECURED, ANNOUNCE_MAC_LEN, ANNOUNCE_MAGIC};
use super::error::{DecodeError, EncodeError};
use crate::id::PeerId;
use bytes::BufMut;
use std::ops::Range;

/// The fields of a discovery announce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beacon {
    /// The sender's protocol version.
    pub protocol_version: u8,
    /// Raw flags byte; bit 0 ([`ANNOUNCE_FLAG_SECURED`]) marks a secured mesh, other bits are
    /// reserved and kept as received so a datagram re-encodes byte for byte.
    pub flags: u8,
    /// Port the sender accepts TCP connections on (dial-back address = source IP + this port).
    pub tcp_listen_port: u16,
    /// The sender's node id.
    pub node_id: PeerId,
    /// The sender's mesh group.
    pub group_name: String,
}

/// A decoded datagram and where its MAC sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedBeacon {
    /// The announce fields.
    pub announce: Beacon,
    /// The 16 bytes after the group name when the secured flag is set, `None` otherwise.
    pub mac: Option<[u8; ANNOUNCE_MAC_LEN]>,
    /// The bytes of the datagram the MAC covers (`0..25+G`): the crypto layer verifies
    /// `BLAKE2b-128(Kd, datagram[mac_input])` against [`mac`](Self::mac).
    pub mac_input: Range<usize>,
}

impl Beacon {
    /// An announce of the current protocol version.
    pub fn new(node_id: PeerId, tcp_listen_port: u16, group_name: &str, secured: bool) -> Self {
        Beacon {
            protocol_version: super::PROTOCOL_VERSION,
            flags: if secured { ANNOUNCE_FLAG_SECURED } else { 0 },
            tcp_listen_port,
            node_id,
            group_name: group_name.to_owned(),
        }
    }

    /// True when the secured flag is set.
    pub fn is_secured(&self) -> bool {
        self.flags & ANNOUNCE_FLAG_SECURED != 0
    }

    /// Length of the MAC'd part (everything but the MAC).
    pub fn body_len(&self) -> usize {
        4 + 1 + 1 + 2 + 16 + 1 + self.group_name.len()
    }

    /// Appends the datagram body (everything the MAC covers) and returns its length. A secured
    /// sender then appends the 16-byte MAC computed over exactly these bytes
    /// (or uses [`encode_with_mac`](Self::encode_with_mac)). On error nothing is written.
    pub fn encode_body<B: BufMut>(&self, out: &mut B) -> Result<usize, EncodeError> {
        check_str(&self.group_name, "Announce.groupName")?;
        out.put_slice(&ANNOUNCE_MAGIC);
        out.put_u8(self.protocol_version);
        out.put_u8(self.flags);
        out.put_u16(self.tcp_listen_port);
        out.put_slice(&self.node_id.0);
        put_str(out, &self.group_name);
        Ok(self.body_len())
    }

    /// Appends body and MAC: the full datagram of a secured mesh.
    pub fn encode_with_mac<B: BufMut>(
        &self,
        out: &mut B,
        mac: &[u8; ANNOUNCE_MAC_LEN],
    ) -> Result<usize, EncodeError> {
        let n = self.encode_body(out)?;
        out.put_slice(mac);
        Ok(n + ANNOUNCE_MAC_LEN)
    }

    /// Parses a datagram. Bytes after the group name (after the MAC when the secured flag is
    /// set) are ignored. Does not judge whether the announce is acceptable: see [`BeaconFilter`].
    pub fn decode(datagram: &[u8]) -> Result<DecodedBeacon, DecodeError> {
        let mut c = Cursor::new(datagram);
        let magic: [u8; 4] = c.array("Announce.magic")?;
        if magic != ANNOUNCE_MAGIC {
            return Err(DecodeError::BadMagic(magic));
        }
        let protocol_version = c.u8("Announce.protocolVersion")?;
        let flags = c.u8("Announce.flags")?;
        let tcp_listen_port = c.u16("Announce.tcpListenPort")?;
        let node_id = PeerId(c.array("Announce.nodeId")?);
        let group_name = c.str("Announce.groupName")?.to_owned();
        let mac_input = 0..c.pos();
        let announce = Beacon {
            protocol_version,
            flags,
            tcp_listen_port,
            node_id,
            group_name,
        };
        let mac = if announce.is_secured() {
            Some(c.array("Announce.mac")?)
        } else {
            None
        };
        Ok(DecodedBeacon {
            announce,
            mac,
            mac_input,
        })
    }
}

/// Why a receiver drops an announce.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BeaconReject {
    /// The datagram does not parse (includes a wrong magic).
    #[error("malformed announce: {0}")]
    Malformed(#[from] DecodeError),
    /// The secured flag differs from the receiver's mode.
    #[error("mode mismatch: announce secured={theirs}, ours secured={ours}")]
    ModeMismatch {
        /// The receiver's mode.
        ours: bool,
        /// The announce's flag.
        theirs: bool,
    },
    /// The protocol version differs.
    #[error("protocol version mismatch: announce {theirs}, ours {ours}")]
    VersionMismatch {
        /// The receiver's version.
        ours: u8,
        /// The announce's version.
        theirs: u8,
    },
    /// The group differs.
    #[error("group mismatch: announce {theirs:?}")]
    GroupMismatch {
        /// The announce's group.
        theirs: String,
    },
    /// The announce is the receiver's own (multicast loopback echo).
    #[error("own announce")]
    OwnAnnounce,
}

/// The receiver's side of announce acceptance: its own mode, version, group and id.
/// MAC verification is not done here; on a secured mesh it must pass before [`check`](Self::check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BeaconFilter<'a> {
    /// The receiver runs a secured mesh.
    pub secured: bool,
    /// The receiver's protocol version.
    pub protocol_version: u8,
    /// The receiver's group.
    pub group_name: &'a str,
    /// The receiver's own id.
    pub own_id: PeerId,
}

impl BeaconFilter<'_> {
    /// Applies the acceptance rules in the C++ order (mode, version, group, own id).
    pub fn check(&self, a: &Beacon) -> Result<(), BeaconReject> {
        if a.is_secured() != self.secured {
            return Err(BeaconReject::ModeMismatch {
                ours: self.secured,
                theirs: a.is_secured(),
            });
        }
        if a.protocol_version != self.protocol_version {
            return Err(BeaconReject::VersionMismatch {
                ours: self.protocol_version,
                theirs: a.protocol_version,
            });
        }
        if a.group_name != self.group_name {
            return Err(BeaconReject::GroupMismatch {
                theirs: a.group_name.clone(),
            });
        }
        if a.node_id == self.own_id {
            return Err(BeaconReject::OwnAnnounce);
        }
        Ok(())
    }

    /// Decodes and checks in one go. The caller still verifies the MAC of a secured announce
    /// (over `mac_input`) before trusting the result.
    pub fn accept(&self, datagram: &[u8]) -> Result<DecodedBeacon, BeaconReject> {
        let d = Beacon::decode(datagram)?;
        self.check(&d.announce)?;
        Ok(d)
    }
}
