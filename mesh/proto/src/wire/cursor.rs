//! Bounds-checked big-endian reading and `str` writing shared by the frame and datagram codecs.
//!
//! **Owns:** bounds-checked reading of wire fields. **Must not touch:** frame semantics.

use super::error::{DecodeError, EncodeError};
use bytes::BufMut;

/// Reads fields front to back from a body slice; every read names its field so an overrun says
/// exactly where the body was short.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// Offset of the next unread byte.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    pub(crate) fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let available = self.remaining();
        if n > available {
            return Err(DecodeError::Truncated {
                field,
                needed: n,
                available,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn array<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<[u8; N], DecodeError> {
        let s = self.take(N, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(field)?[0])
    }

    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array(field)?))
    }

    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array(field)?))
    }

    /// A 0/1 byte; anything else is rejected because it would make the optional fields that
    /// follow ambiguous.
    pub(crate) fn flag(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(DecodeError::BadFlag { field, value }),
        }
    }

    pub(crate) fn str(&mut self, field: &'static str) -> Result<&'a str, DecodeError> {
        let n = self.u8(field)? as usize;
        let s = self.take(n, field)?;
        std::str::from_utf8(s).map_err(|_| DecodeError::InvalidUtf8 { field })
    }
}

/// Checks that `s` fits a wire `str`; done before writing anything so errors leave no partial output.
pub(crate) fn check_str(s: &str, field: &'static str) -> Result<(), EncodeError> {
    if s.len() > super::MAX_STR_LEN {
        return Err(EncodeError::StrTooLong {
            field,
            len: s.len(),
        });
    }
    Ok(())
}

/// Writes a `str` already validated by [`check_str`].
pub(crate) fn put_str<B: BufMut>(out: &mut B, s: &str) {
    debug_assert!(s.len() <= super::MAX_STR_LEN);
    out.put_u8(s.len() as u8);
    out.put_slice(s.as_bytes());
}
