//! TCP frames: `length u32 | frameType u8 | body`, their bodies, and the framing decoder.
//!
//! **Owns:** the fifteen frame types (the eight of v1, Shoal's two topic frames, whose bodies
//! are in `discovery` and `samples`, the four reliability frames of `reliable_frames` and the
//! signed membership record of `signed`), their encoding and decoding. **Must not touch:** what a
//! frame means (the state machines).
//!
//! Length: the v1 bodies (Hello, Membership, AuthConfirm, IdentityRecord) are decoded here,
//! beside the one `Frame` enum and the framing functions every reader uses (`peek_frame_len`,
//! `decode_frame`, `take_frame`, `take_data`); the extended bodies live in their own files.
//! The tests are in `mesh/proto/tests/wire_*.rs` and `vectors.rs`.

use super::cursor::{check_str, put_str, Cursor};
use super::data::Data;
use super::defaults::{DATA_HEADER_LEN, FRAME_HEADER_LEN, LENGTH_PREFIX_LEN};
use super::discovery::Discovery;
use super::error::{DecodeError, DecodeStatus, EncodeError};
use super::hello_ext::ShoalExtension;
use super::reliable_frames::{
    AckNack, Gap, Heartbeat, ReliableFrame, Repair, ACKNACK_FRAME_TYPE, GAP_FRAME_TYPE,
    RELIABLE_HEARTBEAT_FRAME_TYPE, REPAIR_FRAME_TYPE,
};
use super::samples::Samples;
use super::signed::{SignedMembership, SIGNED_MEMBERSHIP_FRAME_TYPE};
use super::topic_frames::{DISCOVERY_FRAME_TYPE, SAMPLES_FRAME_TYPE};
use crate::id::{MsgId, PeerId};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::ops::Range;

/// The frame types: the eight of multimaster v1 and Shoal's extended ones (above
/// [`FrameType::MAX_V1`], sent only to peers that advertised
/// [`super::Features::EXTENDED_FRAMES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    /// Sent by the dialer when its connect completes.
    Hello = 1,
    /// Sent by the acceptor as soon as it accepts.
    HelloAck = 2,
    /// Liveness on an idle link; empty body.
    Heartbeat = 3,
    /// Gossip envelope carrying application bytes.
    Data = 4,
    /// Polite close; empty body.
    Goodbye = 5,
    /// A node's direct-neighbour list.
    Membership = 6,
    /// PSK confirmation tag (and handshake signature on an identity mesh).
    AuthConfirm = 7,
    /// A node's signed name (identity mesh).
    IdentityRecord = 8,
    /// Extended: a batch of one origin's topic discovery records, flooded.
    Discovery = DISCOVERY_FRAME_TYPE,
    /// Extended: a run of one writer's topic samples, sent along its routes.
    Samples = SAMPLES_FRAME_TYPE,
    /// Extended: a reliable writer's heartbeat (which sequence numbers its node holds).
    WriterHeartbeat = RELIABLE_HEARTBEAT_FRAME_TYPE,
    /// Extended: a reliable reader's acknowledgement and repair requests.
    AckNack = ACKNACK_FRAME_TYPE,
    /// Extended: samples resent for one reliable reader.
    Repair = REPAIR_FRAME_TYPE,
    /// Extended: samples that will never come for one reliable reader.
    Gap = GAP_FRAME_TYPE,
    /// Extended (with [`super::Features::SIGNED_RECORDS`]): a Membership record signed by
    /// its origin.
    SignedMembership = SIGNED_MEMBERSHIP_FRAME_TYPE,
}

impl FrameType {
    /// The highest frame type a plain multimaster v1 peer understands.
    pub const MAX_V1: u8 = 8;

    /// The frame type for a wire byte, if it is a known one.
    pub fn from_u8(b: u8) -> Option<FrameType> {
        Some(match b {
            1 => FrameType::Hello,
            2 => FrameType::HelloAck,
            3 => FrameType::Heartbeat,
            4 => FrameType::Data,
            5 => FrameType::Goodbye,
            6 => FrameType::Membership,
            7 => FrameType::AuthConfirm,
            8 => FrameType::IdentityRecord,
            DISCOVERY_FRAME_TYPE => FrameType::Discovery,
            SAMPLES_FRAME_TYPE => FrameType::Samples,
            RELIABLE_HEARTBEAT_FRAME_TYPE => FrameType::WriterHeartbeat,
            ACKNACK_FRAME_TYPE => FrameType::AckNack,
            REPAIR_FRAME_TYPE => FrameType::Repair,
            GAP_FRAME_TYPE => FrameType::Gap,
            SIGNED_MEMBERSHIP_FRAME_TYPE => FrameType::SignedMembership,
            _ => return None,
        })
    }
}

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

    fn body_len(&self) -> usize {
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

    fn validate(&self) -> Result<(), EncodeError> {
        check_str(&self.group_name, "Hello.groupName")?;
        if let Some(id) = &self.identity {
            check_str(&id.node_name, "Hello.nodeName")?;
        }
        Ok(())
    }

    fn encode_body<B: BufMut>(&self, out: &mut B) {
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

    fn decode_body(body: &[u8]) -> Result<Hello, DecodeError> {
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
    fn decode_body(body: &[u8]) -> Result<Membership, DecodeError> {
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
    fn decode_body(body: &[u8]) -> Result<AuthConfirm, DecodeError> {
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
    fn decode_body(body: &[u8]) -> Result<IdentityRecord, DecodeError> {
        let mut c = Cursor::new(body);
        Ok(IdentityRecord {
            id_pub_key: c.array("IdentityRecord.idPubKey")?,
            version: c.u64("IdentityRecord.version")?,
            sig: c.array("IdentityRecord.sig")?,
            name: c.str("IdentityRecord.name")?.to_owned(),
        })
    }
}

/// One decoded TCP frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Type 1, sent by the dialer.
    Hello(Hello),
    /// Type 2, sent by the acceptor; same body as Hello.
    HelloAck(Hello),
    /// Type 3.
    Heartbeat,
    /// Type 4.
    Data(Data),
    /// Type 5.
    Goodbye,
    /// Type 6.
    Membership(Membership),
    /// Type 7.
    AuthConfirm(AuthConfirm),
    /// Type 8.
    IdentityRecord(IdentityRecord),
    /// Type 9 (extended); Record entries are slices of the read buffer.
    Discovery(Discovery),
    /// Type 10 (extended); the body is a slice of the read buffer.
    Samples(Samples),
    /// Type 11 (extended): a reliable writer's heartbeat (not the v1 link [`Frame::Heartbeat`]).
    WriterHeartbeat(Heartbeat),
    /// Type 12 (extended).
    AckNack(AckNack),
    /// Type 13 (extended); the body is a slice of the read buffer.
    Repair(Repair),
    /// Type 14 (extended).
    Gap(Gap),
    /// Type 15 (extended, with [`super::Features::SIGNED_RECORDS`]).
    SignedMembership(SignedMembership),
}

impl Frame {
    /// The frame's type byte.
    pub fn frame_type(&self) -> FrameType {
        match self {
            Frame::Hello(_) => FrameType::Hello,
            Frame::HelloAck(_) => FrameType::HelloAck,
            Frame::Heartbeat => FrameType::Heartbeat,
            Frame::Data(_) => FrameType::Data,
            Frame::Goodbye => FrameType::Goodbye,
            Frame::Membership(_) => FrameType::Membership,
            Frame::AuthConfirm(_) => FrameType::AuthConfirm,
            Frame::IdentityRecord(_) => FrameType::IdentityRecord,
            Frame::Discovery(_) => FrameType::Discovery,
            Frame::Samples(_) => FrameType::Samples,
            Frame::WriterHeartbeat(_) => FrameType::WriterHeartbeat,
            Frame::AckNack(_) => FrameType::AckNack,
            Frame::Repair(_) => FrameType::Repair,
            Frame::Gap(_) => FrameType::Gap,
            Frame::SignedMembership(_) => FrameType::SignedMembership,
        }
    }

    /// The reliability frames seen through one type, for their shared code.
    fn reliable(&self) -> Option<ReliableFrame<'_>> {
        Some(match self {
            Frame::WriterHeartbeat(h) => ReliableFrame::Heartbeat(h),
            Frame::AckNack(a) => ReliableFrame::AckNack(a),
            Frame::Repair(r) => ReliableFrame::Repair(r),
            Frame::Gap(g) => ReliableFrame::Gap(g),
            _ => return None,
        })
    }

    /// Bytes after the type byte.
    fn body_len(&self) -> usize {
        match self {
            Frame::Hello(h) | Frame::HelloAck(h) => h.body_len(),
            Frame::Heartbeat | Frame::Goodbye => 0,
            Frame::Data(d) => d.encoded_len() - FRAME_HEADER_LEN,
            Frame::Membership(m) => m.body_len(),
            Frame::SignedMembership(m) => m.body_len(),
            Frame::AuthConfirm(a) => 32 + 1 + a.sig.map_or(0, |s| s.len()),
            Frame::IdentityRecord(r) => 32 + 8 + 64 + 1 + r.name.len(),
            Frame::Discovery(d) => d.encoded_len() - FRAME_HEADER_LEN,
            Frame::Samples(s) => s.encoded_len() - FRAME_HEADER_LEN,
            Frame::WriterHeartbeat(_) | Frame::AckNack(_) | Frame::Repair(_) | Frame::Gap(_) => {
                self.reliable().map_or(0, |r| r.body_len())
            }
        }
    }

    /// Bytes the whole frame occupies on the wire, length prefix included.
    pub fn encoded_len(&self) -> usize {
        FRAME_HEADER_LEN + self.body_len()
    }

    fn validate(&self) -> Result<u32, EncodeError> {
        match self {
            Frame::Hello(h) | Frame::HelloAck(h) => h.validate()?,
            Frame::Membership(m) if m.neighbours.len() > u16::MAX as usize => {
                return Err(EncodeError::TooManyNeighbours {
                    count: m.neighbours.len(),
                })
            }
            Frame::IdentityRecord(r) => check_str(&r.name, "IdentityRecord.name")?,
            Frame::Discovery(d) => return d.validate(),
            Frame::SignedMembership(m) => m.validate()?,
            Frame::Samples(s) => s.validate()?,
            f => {
                if let Some(r) = f.reliable() {
                    r.validate()?
                }
            }
        }
        let len = 1 + self.body_len();
        u32::try_from(len).map_err(|_| EncodeError::FrameTooLarge { len })
    }

    /// Appends the frame to `out`. On error nothing is written. Allocates only if `out` must grow.
    pub fn encode<B: BufMut>(&self, out: &mut B) -> Result<(), EncodeError> {
        let len = self.validate()?;
        out.put_u32(len);
        out.put_u8(self.frame_type() as u8);
        match self {
            Frame::Hello(h) | Frame::HelloAck(h) => h.encode_body(out),
            Frame::Heartbeat | Frame::Goodbye => {}
            Frame::Data(d) => {
                // validate() already bounded the length, so the header cannot fail.
                let header = d.header()?;
                out.put_slice(&header.0[FRAME_HEADER_LEN..]);
                out.put_slice(&d.payload);
            }
            Frame::Membership(m) => m.encode_body(out),
            Frame::SignedMembership(m) => m.encode_body(out),
            Frame::AuthConfirm(a) => {
                out.put_slice(&a.tag);
                match &a.sig {
                    Some(s) => {
                        out.put_u8(1);
                        out.put_slice(s);
                    }
                    None => out.put_u8(0),
                }
            }
            Frame::IdentityRecord(r) => {
                out.put_slice(&r.id_pub_key);
                out.put_u64(r.version);
                out.put_slice(&r.sig);
                put_str(out, &r.name);
            }
            Frame::Discovery(d) => d.encode_body(out),
            Frame::Samples(s) => {
                // validate() already bounded the length, so the header cannot fail.
                let header = s.header()?;
                out.put_slice(&header.0[FRAME_HEADER_LEN..]);
                out.put_slice(&s.body);
            }
            Frame::WriterHeartbeat(_) | Frame::AckNack(_) | Frame::Repair(_) | Frame::Gap(_) => {
                if let Some(r) = self.reliable() {
                    r.encode_body(out)
                }
            }
        }
        Ok(())
    }

    /// Decodes a whole frame (`buf` holds exactly or at least `4 + length` bytes, already
    /// framed by [`peek_frame_len`]) and says what the caller slices out of its own `Bytes`
    /// (a Data payload, a Samples body, Discovery entries), so nothing is copied.
    fn parse(buf: &[u8]) -> Result<(Frame, Slices), DecodeError> {
        let ty = buf[LENGTH_PREFIX_LEN];
        let body = &buf[FRAME_HEADER_LEN..];
        let at = |r: Range<usize>| r.start + FRAME_HEADER_LEN..r.end + FRAME_HEADER_LEN;
        let frame = match FrameType::from_u8(ty).ok_or(DecodeError::UnknownFrameType(ty))? {
            FrameType::Hello => Frame::Hello(Hello::decode_body(body)?),
            FrameType::HelloAck => Frame::HelloAck(Hello::decode_body(body)?),
            FrameType::Heartbeat => Frame::Heartbeat,
            FrameType::Goodbye => Frame::Goodbye,
            FrameType::Data => {
                let (d, r) = Data::decode_body(body)?;
                return Ok((Frame::Data(d), Slices::Payload(at(r))));
            }
            FrameType::Membership => Frame::Membership(Membership::decode_body(body)?),
            FrameType::AuthConfirm => Frame::AuthConfirm(AuthConfirm::decode_body(body)?),
            FrameType::IdentityRecord => Frame::IdentityRecord(IdentityRecord::decode_body(body)?),
            FrameType::Discovery => {
                let (d, known) = Discovery::check_body(body)?;
                return Ok((Frame::Discovery(d), Slices::Entries(known)));
            }
            FrameType::Samples => {
                let (s, r) = Samples::check_body(body)?;
                return Ok((Frame::Samples(s), Slices::Payload(at(r))));
            }
            FrameType::WriterHeartbeat => Frame::WriterHeartbeat(Heartbeat::decode_body(body)?),
            FrameType::AckNack => Frame::AckNack(AckNack::decode_body(body)?),
            FrameType::Repair => {
                let (rep, r) = Repair::check_body(body)?;
                return Ok((Frame::Repair(rep), Slices::Payload(at(r))));
            }
            FrameType::Gap => Frame::Gap(Gap::decode_body(body)?),
            FrameType::SignedMembership => {
                Frame::SignedMembership(SignedMembership::decode_body(body)?)
            }
        };
        Ok((frame, Slices::None))
    }

    /// Fills in what [`parse`](Self::parse) left for the caller to slice out of `frame`,
    /// the whole frame's bytes (`Slices::Payload` ranges are relative to it).
    fn slice_from(&mut self, slices: Slices, frame: &Bytes) {
        match (self, slices) {
            (Frame::Data(d), Slices::Payload(r)) => d.payload = frame.slice(r),
            (Frame::Samples(s), Slices::Payload(r)) => s.body = frame.slice(r),
            (Frame::Repair(rep), Slices::Payload(r)) => rep.body = frame.slice(r),
            (Frame::Discovery(d), Slices::Entries(known)) => {
                d.fill_entries(&frame.slice(FRAME_HEADER_LEN..), known)
            }
            _ => {}
        }
    }
}

/// What of a parsed frame still lives only in the read buffer.
enum Slices {
    None,
    /// A Data payload or a Samples body: this range of the frame.
    Payload(Range<usize>),
    /// Discovery entries, this many of known kinds.
    Entries(usize),
}

/// Reads the frame header at the start of `buf`: the total frame size (`4 + length`) once the
/// whole frame is buffered, `NeedMore` before. Rejects `length < 1` and `length > max` as soon as
/// the 4 length bytes are present, so a hostile length never drives an allocation.
pub fn peek_frame_len(buf: &[u8], max_message_bytes: u32) -> Result<DecodeStatus<()>, DecodeError> {
    let Some(prefix) = buf.get(..LENGTH_PREFIX_LEN) else {
        return Ok(DecodeStatus::NeedMore {
            needed: FRAME_HEADER_LEN,
        });
    };
    let len = u32::from_be_bytes(prefix.try_into().expect("4 bytes"));
    if len < 1 {
        return Err(DecodeError::EmptyFrame);
    }
    if len > max_message_bytes {
        return Err(DecodeError::TooLarge {
            len,
            max: max_message_bytes,
        });
    }
    let total = LENGTH_PREFIX_LEN + len as usize;
    if buf.len() < total {
        return Ok(DecodeStatus::NeedMore { needed: total });
    }
    Ok(DecodeStatus::Complete {
        frame: (),
        len: total,
    })
}

/// Decodes the frame at the start of `buf` without consuming anything. A Data payload is a
/// `Bytes` slice sharing `buf`'s storage (no copy).
pub fn decode_frame(
    buf: &Bytes,
    max_message_bytes: u32,
) -> Result<DecodeStatus<Frame>, DecodeError> {
    let len = match peek_frame_len(buf, max_message_bytes)? {
        DecodeStatus::NeedMore { needed } => return Ok(DecodeStatus::NeedMore { needed }),
        DecodeStatus::Complete { len, .. } => len,
    };
    let (mut frame, slices) = Frame::parse(&buf[..len])?;
    frame.slice_from(slices, &buf.slice(..len));
    Ok(DecodeStatus::Complete { frame, len })
}

/// The read path's fast lane for the common frame: when the frame at the front of `buf` is a
/// complete Data frame, decodes it and splits exactly that frame off `buf` (the payload shares
/// the split-off storage, as with [`take_frame`]) without building a [`Frame`], which is twice
/// the size of a [`Data`] and moved by value. Only the common shape is taken: a whole,
/// well-formed Data frame whose length field is exactly its header and payload, within
/// `max_message_bytes`. Anything else (another type, not all there yet, a length that
/// disagrees or is over the limit) gives `None` with `buf` untouched: call [`take_frame`],
/// which decides, with the same errors as ever; the fast lane itself never fails.
pub fn take_data(buf: &mut BytesMut, max_message_bytes: u32) -> Option<Data> {
    let h = buf.get(..DATA_HEADER_LEN)?;
    if h[LENGTH_PREFIX_LEN] != FrameType::Data as u8 {
        return None;
    }
    let len = u32::from_be_bytes(h[..4].try_into().expect("4 bytes"));
    let payload_len = u32::from_be_bytes(h[54..58].try_into().expect("4 bytes")) as usize;
    let total = LENGTH_PREFIX_LEN + len as usize;
    if len > max_message_bytes || total != DATA_HEADER_LEN + payload_len || buf.len() < total {
        return None;
    }
    let field = |at: usize| -> [u8; 16] { h[at..at + 16].try_into().expect("16 bytes") };
    let (src, dst, msg_id, ttl) = (PeerId(field(5)), PeerId(field(21)), MsgId(field(37)), h[53]);
    let mut raw = buf.split_to(total);
    raw.advance(DATA_HEADER_LEN);
    Some(Data {
        src,
        dst,
        msg_id,
        ttl,
        payload: raw.freeze(),
    })
}

/// The read-path helper: decodes the frame at the front of `buf` and, only on success, splits
/// exactly that frame off `buf` (a Data payload, a Samples body and Discovery records then share
/// the split-off storage, no copy).
/// `Ok(None)` means more bytes are needed; on error `buf` is left untouched.
pub fn take_frame(
    buf: &mut BytesMut,
    max_message_bytes: u32,
) -> Result<Option<Frame>, DecodeError> {
    let len = match peek_frame_len(buf, max_message_bytes)? {
        DecodeStatus::NeedMore { .. } => return Ok(None),
        DecodeStatus::Complete { len, .. } => len,
    };
    let (mut frame, slices) = Frame::parse(&buf[..len])?;
    let mut raw = buf.split_to(len);
    match (&mut frame, slices) {
        // Trimmed before freezing: one handle to the shared buffer, not a frozen frame plus a
        // slice of it (a refcount increment and decrement saved per Data frame).
        (
            Frame::Data(Data { payload: one, .. })
            | Frame::Samples(Samples { body: one, .. })
            | Frame::Repair(Repair { body: one, .. }),
            Slices::Payload(r),
        ) => {
            raw.advance(r.start);
            raw.truncate(r.len());
            *one = raw.freeze();
        }
        (_, Slices::None) => {}
        (frame, slices) => frame.slice_from(slices, &raw.freeze()),
    }
    Ok(Some(frame))
}
