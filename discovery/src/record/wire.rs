//! The record envelope: header plus a sequence of TLV fields, with no
//! knowledge of what any field means.

use bytes::{BufMut, Bytes, BytesMut};

use super::{
    DecodeError, EncodeError, RecordKind, FIELD_HEADER_LEN, FORMAT_VERSION, HEADER_LEN, MAGIC,
    MAX_FIELDS, MAX_RECORD_LEN,
};

/// Builds one record field by field. Used by the encoders, and public so
/// tests, tools and fuzz seeds can build records the encoders never would
/// (extension fields, out-of-range values).
///
/// After any error the writer holds a partial field and must be dropped.
#[derive(Debug)]
pub struct RecordWriter {
    buf: BytesMut,
    fields: usize,
}

impl RecordWriter {
    /// Starts a record of `kind`, reserving `capacity` body bytes.
    pub fn new(kind: RecordKind, capacity: usize) -> Self {
        let mut buf = BytesMut::with_capacity(HEADER_LEN + capacity);
        buf.put_slice(&MAGIC);
        buf.put_u8(FORMAT_VERSION);
        buf.put_u8(kind.code());
        buf.put_u16(0);
        // Body length, patched by `finish`.
        buf.put_u32(0);
        Self { buf, fields: 0 }
    }

    /// Appends a field whose value `write` produces in place.
    pub fn field_with(
        &mut self,
        id: u16,
        write: impl FnOnce(&mut BytesMut),
    ) -> Result<(), EncodeError> {
        if self.fields == MAX_FIELDS {
            return Err(EncodeError::TooManyFields { max: MAX_FIELDS });
        }
        let start = self.buf.len();
        self.buf.put_u16(id);
        self.buf.put_u16(0);
        write(&mut self.buf);
        let len = self.buf.len() - start - FIELD_HEADER_LEN;
        let len16 =
            u16::try_from(len).map_err(|_| EncodeError::FieldTooLarge { field: id, len })?;
        self.buf[start + 2..start + 4].copy_from_slice(&len16.to_be_bytes());
        self.fields += 1;
        Ok(())
    }

    /// Appends a field with the given value.
    pub fn field(&mut self, id: u16, value: &[u8]) -> Result<(), EncodeError> {
        self.field_with(id, |b| b.put_slice(value))
    }

    /// Patches the body length and freezes the record.
    pub fn finish(mut self) -> Result<Bytes, EncodeError> {
        let len = self.buf.len();
        if len > MAX_RECORD_LEN {
            return Err(EncodeError::TooLarge {
                len,
                max: MAX_RECORD_LEN,
            });
        }
        // MAX_RECORD_LEN fits u32, so this cannot truncate.
        let body = (len - HEADER_LEN) as u32;
        self.buf[8..12].copy_from_slice(&body.to_be_bytes());
        Ok(self.buf.freeze())
    }
}

/// A record whose envelope has been checked: right magic and version, known
/// kind, body length exact, size within [`MAX_RECORD_LEN`].
#[derive(Debug, Clone, Copy)]
pub struct RawRecord<'a> {
    kind: RecordKind,
    body: &'a [u8],
}

impl<'a> RawRecord<'a> {
    /// Checks the header of `buf`.
    pub fn parse(buf: &'a [u8]) -> Result<Self, DecodeError> {
        if buf.len() > MAX_RECORD_LEN {
            return Err(DecodeError::TooLarge {
                len: buf.len(),
                max: MAX_RECORD_LEN,
            });
        }
        let Some((header, body)) = buf.split_first_chunk::<HEADER_LEN>() else {
            return Err(DecodeError::TruncatedHeader {
                need: HEADER_LEN,
                have: buf.len(),
            });
        };
        let magic = [header[0], header[1], header[2], header[3]];
        if magic != MAGIC {
            return Err(DecodeError::BadMagic(magic));
        }
        if header[4] != FORMAT_VERSION {
            return Err(DecodeError::UnsupportedVersion(header[4]));
        }
        let kind = RecordKind::from_code(header[5]).ok_or(DecodeError::UnknownKind(header[5]))?;
        let declared = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
        if declared != body.len() {
            return Err(DecodeError::LengthMismatch {
                declared,
                actual: body.len(),
            });
        }
        Ok(Self { kind, body })
    }

    /// What the record describes.
    pub fn kind(&self) -> RecordKind {
        self.kind
    }

    /// The bytes after the header.
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// The fields in wire order. Yields an error (and then stops) on a field
    /// that overruns the body or past [`MAX_FIELDS`] fields.
    pub fn fields(&self) -> Fields<'a> {
        Fields {
            body: self.body,
            offset: 0,
            count: 0,
            failed: false,
        }
    }
}

/// One TLV field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    /// Field type id.
    pub id: u16,
    /// Its value bytes.
    pub value: &'a [u8],
}

/// Iterator over a record's fields; see [`RawRecord::fields`].
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    body: &'a [u8],
    offset: usize,
    count: usize,
    failed: bool,
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.offset == self.body.len() {
            return None;
        }
        let rest = &self.body[self.offset..];
        let err = if self.count == MAX_FIELDS {
            Some(DecodeError::TooManyFields { max: MAX_FIELDS })
        } else if rest.len() < FIELD_HEADER_LEN {
            Some(DecodeError::FieldOverrun {
                offset: self.offset,
            })
        } else {
            None
        };
        if let Some(e) = err {
            self.failed = true;
            return Some(Err(e));
        }
        let id = u16::from_be_bytes([rest[0], rest[1]]);
        let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        let Some(value) = rest.get(FIELD_HEADER_LEN..FIELD_HEADER_LEN + len) else {
            self.failed = true;
            return Some(Err(DecodeError::FieldOverrun {
                offset: self.offset,
            }));
        };
        self.offset += FIELD_HEADER_LEN + len;
        self.count += 1;
        Some(Ok(Field { id, value }))
    }
}

/// A bounds-checked reader over one field's value. Every read reports the
/// field it belongs to, so a malformed value names its field.
pub(super) struct ValueReader<'a> {
    buf: &'a [u8],
    field: &'static str,
}

impl<'a> ValueReader<'a> {
    pub(super) fn new(buf: &'a [u8], field: &'static str) -> Self {
        Self { buf, field }
    }

    pub(super) fn malformed(&self, reason: &'static str) -> DecodeError {
        DecodeError::Malformed {
            field: self.field,
            reason,
        }
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(self.malformed("value too short"));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self.take(N)?;
        let mut a = [0; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(super) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    pub(super) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub(super) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub(super) fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    pub(super) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    pub(super) fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// Fails unless every byte of the value was consumed: a value longer
    /// than its encoding is as malformed as a shorter one.
    pub(super) fn end(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.malformed("trailing bytes in value"))
        }
    }
}
