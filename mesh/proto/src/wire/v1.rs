//! The bodies of multimaster v1's Hello (and HelloAck), Membership, AuthConfirm and
//! IdentityRecord frames, and their codecs. Data, the hot one, has its own file (`data`).
//!
//! **Owns:** the layout of those four bodies. **Must not touch:** the framing around them
//! (`frame`) or Shoal's extension block inside a Hello (`hello_ext`).

use super::cursor::{check_str, put_str, Cursor};
use super::error::{DecodeError, EncodeError};
use super::hello_ext::ShoalExtension;
use crate::id::PeerId;
use bytes::BufMut;

/// The identity part of a Hello (`hasIdentity = 1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloIdentity {
    /// Ed25519 identity public key; the node id is BLAKE2b-128 of it.
    pub id_pub_key: [u8; 32],
    /// The node's signed nickname.
    pub node_name: String,
}

/// Body of Hello and HelloAck: `nodeId 16 | protocolVersion u8 | tcpListenPort u16 |
/// groupName str | nonce u64 | secure u8 | [ephPubKey 32] | hasIdentity u8 |
/// [idPubKey 32 | nodeName str]`, then optionally Shoal's extension block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The sender's node id.
    pub node_id: PeerId,
    /// The sender's protocol version.
    pub protocol_version: u8,
    /// Where the sender accepts connections (lets the acceptor dial back).
    pub tcp_listen_port: u16,
    /// The sender's mesh group.
    pub group_name: String,
    /// Random per connection; not used by the crypto.
    pub nonce: u64,
    /// `Some` exactly when `secure = 1`: the sender's X25519 ephemeral public key.
    pub eph_pub_key: Option<[u8; 32]>,
    /// `Some` exactly when `hasIdentity = 1`.
    pub identity: Option<HelloIdentity>,
    /// Shoal's extension block; `None` for a plain multimaster peer (or a malformed block).
    pub shoal: Option<ShoalExtension>,
}

impl Hello {
    /// True when the sender runs a secured mesh.
    pub fn is_secure(&self) -> bool {
        self.eph_pub_key.is_some()
    }

    pub(super) fn body_len(&self) -> usize {
        16 + 1
            + 2
            + 1
            + self.group_name.len()
            + 8
            + 1
            + self.eph_pub_key.map_or(0, |k| k.len())
            + 1
            + self
                .identity
                .as_ref()
                .map_or(0, |i| 32 + 1 + i.node_name.len())
            + self.shoal.as_ref().map_or(0, |e| e.encoded_len())
    }

    pub(super) fn validate(&self) -> Result<(), EncodeError> {
        check_str(&self.group_name, "Hello.groupName")?;
        if let Some(id) = &self.identity {
            check_str(&id.node_name, "Hello.nodeName")?;
        }
        Ok(())
    }

    pub(super) fn encode_body<B: BufMut>(&self, out: &mut B) {
        out.put_slice(&self.node_id.0);
        out.put_u8(self.protocol_version);
        out.put_u16(self.tcp_listen_port);
        put_str(out, &self.group_name);
        out.put_u64(self.nonce);
        match &self.eph_pub_key {
            Some(k) => {
                out.put_u8(1);
                out.put_slice(k);
            }
            None => out.put_u8(0),
        }
        match &self.identity {
            Some(id) => {
                out.put_u8(1);
                out.put_slice(&id.id_pub_key);
                put_str(out, &id.node_name);
            }
            None => out.put_u8(0),
        }
        if let Some(ext) = &self.shoal {
            ext.encode(out);
        }
    }

    pub(super) fn decode_body(body: &[u8]) -> Result<Hello, DecodeError> {
        let mut c = Cursor::new(body);
        let node_id = PeerId(c.array("Hello.nodeId")?);
        let protocol_version = c.u8("Hello.protocolVersion")?;
        let tcp_listen_port = c.u16("Hello.tcpListenPort")?;
        let group_name = c.str("Hello.groupName")?.to_owned();
        let nonce = c.u64("Hello.nonce")?;
        let eph_pub_key = if c.flag("Hello.secure")? {
            Some(c.array("Hello.ephPubKey")?)
        } else {
            None
        };
        let identity = if c.flag("Hello.hasIdentity")? {
            Some(HelloIdentity {
                id_pub_key: c.array("Hello.idPubKey")?,
                node_name: c.str("Hello.nodeName")?.to_owned(),
            })
        } else {
            None
        };
        let shoal = ShoalExtension::decode(c.rest());
        Ok(Hello {
            node_id,
            protocol_version,
            tcp_listen_port,
            group_name,
            nonce,
            eph_pub_key,
            identity,
            shoal,
        })
    }
}

/// Body of Membership: `origin 16 | version u64 | count u16 | neighbours 16×count`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// The node whose neighbours these are.
    pub origin: PeerId,
    /// Newer versions replace older ones (seeded from wall-clock milliseconds).
    pub version: u64,
    /// The origin's direct neighbours.
    pub neighbours: Vec<PeerId>,
}

impl Membership {
    pub(super) fn decode_body(body: &[u8]) -> Result<Membership, DecodeError> {
        Membership::read(&mut Cursor::new(body))
    }

    /// Reads the fields of a Membership body (type 6 ignores what follows; type 15 reads its
    /// signature next).
    pub(crate) fn read(c: &mut Cursor<'_>) -> Result<Membership, DecodeError> {
        let origin = PeerId(c.array("Membership.origin")?);
        let version = c.u64("Membership.version")?;
        let count = c.u16("Membership.count")? as usize;
        // Check the whole list is present before allocating for it.
        let list = c.take(count * 16, "Membership.neighbours")?;
        let neighbours = list
            .chunks_exact(16)
            .map(|ch| PeerId(ch.try_into().expect("chunks of 16")))
            .collect();
        Ok(Membership {
            origin,
            version,
            neighbours,
        })
    }

    /// What the decoder could not read back: a count over `u16`.
    pub(super) fn validate(&self) -> Result<(), EncodeError> {
        let count = self.neighbours.len();
        if count > usize::from(u16::MAX) {
            return Err(EncodeError::TooManyNeighbours { count });
        }
        Ok(())
    }

    /// Bytes of the body: `origin 16 | version 8 | count 2 | 16 × count`.
    pub(crate) fn body_len(&self) -> usize {
        16 + 8 + 2 + 16 * self.neighbours.len()
    }

    /// Writes the body (the count was checked to fit a `u16`).
    pub(crate) fn encode_body<B: BufMut>(&self, out: &mut B) {
        out.put_slice(&self.origin.0);
        out.put_u64(self.version);
        out.put_u16(self.neighbours.len() as u16);
        for n in &self.neighbours {
            out.put_slice(&n.0);
        }
    }
}

/// Body of AuthConfirm: `tag 32 | hasSig u8 | [sig 64]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfirm {
    /// BLAKE2b-32(confirmKey, own ephemeral public key).
    pub tag: [u8; 32],
    /// Ed25519 handshake signature, present when both Hellos carried an identity.
    pub sig: Option<[u8; 64]>,
}

impl AuthConfirm {
    pub(super) fn body_len(&self) -> usize {
        32 + 1 + self.sig.map_or(0, |s| s.len())
    }

    pub(super) fn encode_body<B: BufMut>(&self, out: &mut B) {
        out.put_slice(&self.tag);
        match &self.sig {
            Some(s) => {
                out.put_u8(1);
                out.put_slice(s);
            }
            None => out.put_u8(0),
        }
    }

    pub(super) fn decode_body(body: &[u8]) -> Result<AuthConfirm, DecodeError> {
        let mut c = Cursor::new(body);
        let tag = c.array("AuthConfirm.tag")?;
        let sig = if c.flag("AuthConfirm.hasSig")? {
            Some(c.array("AuthConfirm.sig")?)
        } else {
            None
        };
        Ok(AuthConfirm { tag, sig })
    }
}

/// Body of IdentityRecord: `idPubKey 32 | version u64 | sig 64 | name str`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityRecord {
    /// The node's Ed25519 identity public key.
    pub id_pub_key: [u8; 32],
    /// Newer versions replace older ones.
    pub version: u64,
    /// Signature over `"mm-idrec-v1" || u64be(version) || name`.
    pub sig: [u8; 64],
    /// The node's name.
    pub name: String,
}

impl IdentityRecord {
    pub(super) fn body_len(&self) -> usize {
        32 + 8 + 64 + 1 + self.name.len()
    }

    pub(super) fn validate(&self) -> Result<(), EncodeError> {
        check_str(&self.name, "IdentityRecord.name")
    }

    pub(super) fn encode_body<B: BufMut>(&self, out: &mut B) {
        out.put_slice(&self.id_pub_key);
        out.put_u64(self.version);
        out.put_slice(&self.sig);
        put_str(out, &self.name);
    }

    pub(super) fn decode_body(body: &[u8]) -> Result<IdentityRecord, DecodeError> {
        let mut c = Cursor::new(body);
        Ok(IdentityRecord {
            id_pub_key: c.array("IdentityRecord.idPubKey")?,
            version: c.u64("IdentityRecord.version")?,
            sig: c.array("IdentityRecord.sig")?,
            name: c.str("IdentityRecord.name")?.to_owned(),
        })
    }
}
