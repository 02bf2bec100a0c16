//! TCP frames: `length u32 | frameType u8 | body`: the one [`Frame`] enum of all fifteen
//! types and the framing functions every reader uses (`peek_frame_len`, `decode_frame`,
//! `take_frame`, `take_data`).
//!
//! **Owns:** the framing, and which body codec each frame type uses. **Must not touch:** the
//! bodies (each in a file below this one: the v1 bodies in `v1` and `data`, Shoal's in
//! `discovery`, `samples`, `reliable_frames` and `signed`; the type numbers in `frame_type`)
//! or what a frame means (the state machines).
//!
//! The tests are in `mesh/proto/tests/wire_*.rs` and `vectors.rs`.

use super::data::Data;
use super::defaults::{DATA_HEADER_LEN, FRAME_HEADER_LEN, LENGTH_PREFIX_LEN};
use super::digest::MembershipDigest;
use super::discovery::Discovery;
use super::error::{DecodeError, DecodeStatus, EncodeError};
use super::frame_type::FrameType;
use super::reliable_frames::{AckNack, Gap, Heartbeat, ReliableFrame, Repair};
use super::samples::Samples;
use super::signed::SignedMembership;
use super::v1::{AuthConfirm, Hello, IdentityRecord, Membership};
use crate::id::{MsgId, PeerId};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::ops::Range;

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
    /// Type 16 (extended, with [`super::Features::MEMBERSHIP_DIGEST`]).
    MembershipDigest(MembershipDigest),
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
            Frame::MembershipDigest(_) => FrameType::MembershipDigest,
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
            Frame::MembershipDigest(d) => d.body_len(),
            Frame::AuthConfirm(a) => a.body_len(),
            Frame::IdentityRecord(r) => r.body_len(),
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
            Frame::Membership(m) => m.validate()?,
            Frame::IdentityRecord(r) => r.validate()?,
            Frame::Discovery(d) => return d.validate(),
            Frame::SignedMembership(m) => m.validate()?,
            Frame::MembershipDigest(d) => d.validate()?,
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
            Frame::MembershipDigest(d) => d.encode_body(out),
            Frame::AuthConfirm(a) => a.encode_body(out),
            Frame::IdentityRecord(r) => r.encode_body(out),
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
            FrameType::MembershipDigest => {
                Frame::MembershipDigest(MembershipDigest::decode_body(body)?)
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
