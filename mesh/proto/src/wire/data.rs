//! The Data frame (gossip envelope) and its fixed 58-byte header.
//!
//! **Owns:** the Data frame fast path: its header, encoded and parsed without a `Frame`. **Must not
//! touch:** routing.

use super::cursor::Cursor;
use super::defaults::{DATA_HEADER_LEN, FRAME_HEADER_LEN, LENGTH_PREFIX_LEN};
use super::error::{DecodeError, EncodeError};
use super::frame_type::FrameType;
use crate::id::{MsgId, PeerId};
use bytes::{BufMut, Bytes};
use std::ops::Range;

/// Body bytes of a Data frame before the payload: `src 16 | dst 16 | msgId 16 | ttl 1 | payloadLen 4`.
const DATA_BODY_FIXED: usize = 16 + 16 + 16 + 1 + 4;

/// A Data frame: `src 16 | dst 16 (zero = broadcast) | msgId 16 | ttl u8 | payloadLen u32 | payload`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Data {
    /// The originating node.
    pub src: PeerId,
    /// The target node, or [`PeerId::ZERO`] for a broadcast.
    pub dst: PeerId,
    /// The message id (originator prefix and counter).
    pub msg_id: MsgId,
    /// Remaining hops.
    pub ttl: u8,
    /// The application bytes; when decoded, a slice of the read buffer (no copy).
    pub payload: Bytes,
}

impl Data {
    /// True when addressed to every node.
    pub fn is_broadcast(&self) -> bool {
        self.dst.is_zero()
    }

    /// The fixed header of this frame (everything but the payload).
    pub fn header(&self) -> Result<DataHeader, EncodeError> {
        DataHeader::new(
            &self.src,
            &self.dst,
            &self.msg_id,
            self.ttl,
            self.payload.len(),
        )
    }

    /// Bytes the whole frame occupies on the wire: `58 + P`.
    pub fn encoded_len(&self) -> usize {
        DATA_HEADER_LEN + self.payload.len()
    }

    /// Decodes a Data body. Returns the fields with an empty payload plus the payload's range
    /// inside `body`, so the caller can slice its own `Bytes` without copying.
    pub(crate) fn decode_body(body: &[u8]) -> Result<(Data, Range<usize>), DecodeError> {
        let mut c = Cursor::new(body);
        let src = PeerId(c.array("Data.src")?);
        let dst = PeerId(c.array("Data.dst")?);
        let msg_id = MsgId(c.array("Data.msgId")?);
        let ttl = c.u8("Data.ttl")?;
        let payload_len = c.u32("Data.payloadLen")? as usize;
        let start = c.pos();
        c.take(payload_len, "Data.payload")?;
        let data = Data {
            src,
            dst,
            msg_id,
            ttl,
            payload: Bytes::new(),
        };
        Ok((data, start..start + payload_len))
    }
}

/// The first 58 bytes of a Data frame (length prefix, type, and the fixed body fields), built
/// without the payload so a writer can send `header ++ payload` as a vectored write.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DataHeader(pub [u8; DATA_HEADER_LEN]);

impl std::fmt::Debug for DataHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DataHeader(")?;
        for b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

impl DataHeader {
    /// Builds the header of a Data frame whose payload will be `payload_len` bytes.
    /// Fails only when the frame length would not fit the `u32` length field.
    pub fn new(
        src: &PeerId,
        dst: &PeerId,
        msg_id: &MsgId,
        ttl: u8,
        payload_len: usize,
    ) -> Result<DataHeader, EncodeError> {
        let frame_len = 1 + DATA_BODY_FIXED + payload_len;
        let (Ok(len_field), Ok(p)) = (u32::try_from(frame_len), u32::try_from(payload_len)) else {
            return Err(EncodeError::FrameTooLarge { len: frame_len });
        };
        let mut h = [0u8; DATA_HEADER_LEN];
        h[..4].copy_from_slice(&len_field.to_be_bytes());
        h[4] = FrameType::Data as u8;
        h[5..21].copy_from_slice(&src.0);
        h[21..37].copy_from_slice(&dst.0);
        h[37..53].copy_from_slice(&msg_id.0);
        h[53] = ttl;
        h[54..58].copy_from_slice(&p.to_be_bytes());
        Ok(DataHeader(h))
    }

    /// The header bytes.
    pub fn as_bytes(&self) -> &[u8; DATA_HEADER_LEN] {
        &self.0
    }

    /// Appends the header to `out`.
    pub fn encode<B: BufMut>(&self, out: &mut B) {
        out.put_slice(&self.0);
    }

    /// The payload length the header announces.
    pub fn payload_len(&self) -> usize {
        u32::from_be_bytes(self.0[54..58].try_into().expect("4 bytes")) as usize
    }
}

/// Appends a whole Data frame (header and payload) to `out`: how a batching publisher packs
/// frames back to back into one buffer.
pub fn encode_data_into(
    out: &mut bytes::BytesMut,
    src: &PeerId,
    dst: &PeerId,
    msg_id: &MsgId,
    ttl: u8,
    payload: &[u8],
) -> Result<(), EncodeError> {
    let h = DataHeader::new(src, dst, msg_id, ttl, payload.len())?;
    out.reserve(DATA_HEADER_LEN + payload.len());
    out.extend_from_slice(&h.0);
    out.extend_from_slice(payload);
    Ok(())
}

// The header is the length prefix, type byte and fixed body; keep the constants honest.
const _: () = assert!(DATA_HEADER_LEN == LENGTH_PREFIX_LEN + 1 + DATA_BODY_FIXED);
const _: () = assert!(FRAME_HEADER_LEN == LENGTH_PREFIX_LEN + 1);
