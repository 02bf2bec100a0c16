//! The receiving side's stream buffer: ciphertext read from the socket, records opened in
//! place, their plaintext exposed as one frame stream.
//!
//! **Owns:** where records and their plaintext lie in the read buffer. **Must not touch:** the
//! cipher or the counters (the [`RecordOpener`] it wraps) or the frames (the shard's decoder).

use bytes::{Buf, BytesMut};

use super::{OpenError, Opened, RecordOpener, RECORD_HEADER_LEN};
use crate::crypto::RecordSuite;

/// An opener with its stream buffer: ciphertext is appended at the back and records are
/// opened in place, one at a time, where they lie; their plaintext is exposed as one contiguous
/// frame stream at the front (frames may span records) for the frame decoder to consume.
///
/// Plaintext is not packed: a record opened while no plaintext is pending is exposed where it
/// was decrypted (the buffer's front just moves past its header). Only when unconsumed plaintext
/// (the start of a frame that continues in the next record) is pending does opening a record
/// join the two across the 20 bytes of tag and header between them, by moving the shorter of
/// the two; so frames that fit their records are never moved, and a frame spanning many
/// records moves each of its bytes at most once. The node's reader opens the next record only
/// when the plaintext holds no complete frame ([`open_next`](Self::open_next)).
pub struct RecordReader {
    opener: RecordOpener,
    buf: BytesMut,
    /// `buf[..plain]` is plaintext not yet consumed.
    plain: usize,
    /// `buf[cipher..]` is ciphertext not yet opened; `buf[plain..cipher]` is dead space (tags
    /// and headers of opened records).
    cipher: usize,
    /// Plaintext bytes moved to join records (see [`moved_bytes`](Self::moved_bytes)).
    moved: u64,
}

impl std::fmt::Debug for RecordReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the buffer itself: it holds decrypted plaintext.
        f.debug_struct("RecordReader")
            .field("opener", &self.opener)
            .field("plaintext_len", &self.plain)
            .field("pending_ciphertext", &self.pending_ciphertext())
            .finish()
    }
}

impl RecordReader {
    /// Wraps an opener; `leftover` holds bytes read after the peer's AuthConfirm frame.
    pub fn new(opener: RecordOpener, leftover: &[u8]) -> RecordReader {
        let mut buf = BytesMut::with_capacity(leftover.len().max(8 * 1024));
        buf.extend_from_slice(leftover);
        RecordReader {
            opener,
            buf,
            plain: 0,
            cipher: 0,
            moved: 0,
        }
    }

    /// Lends the stream buffer for a socket read that appends ciphertext at its end, so the
    /// bytes land where they are decrypted (no copy). Give it back with
    /// [`restore_buffer`](Self::restore_buffer) before any other call; only appending is allowed.
    pub fn take_buffer(&mut self) -> BytesMut {
        std::mem::take(&mut self.buf)
    }

    /// Returns the buffer lent by [`take_buffer`](Self::take_buffer), with new ciphertext
    /// appended.
    pub fn restore_buffer(&mut self, buf: BytesMut) {
        assert!(buf.len() >= self.cipher, "the lent buffer may only grow");
        self.buf = buf;
    }

    /// Bytes still missing before the next record can be opened: the rest of a record whose
    /// header is buffered, 0 when no header is buffered yet (size a read with it).
    pub fn pending_record_bytes(&self) -> usize {
        let pending = &self.buf[self.cipher..];
        match pending.first_chunk::<RECORD_HEADER_LEN>() {
            Some(h) => {
                (RECORD_HEADER_LEN + u32::from_be_bytes(*h) as usize).saturating_sub(pending.len())
            }
            None => 0,
        }
    }

    /// Appends ciphertext read from the socket.
    pub fn push(&mut self, ciphertext: &[u8]) {
        self.buf.extend_from_slice(ciphertext);
    }

    /// Opens the next record if it is wholly buffered and appends its plaintext to
    /// [`plaintext`](Self::plaintext); false when it is not complete yet. An error breaks the
    /// stream for good (the opener is poisoned).
    pub fn open_next(&mut self) -> Result<bool, OpenError> {
        let (len, body) = match self.opener.open_in_place(&mut self.buf[self.cipher..])? {
            Opened::NeedMore(_) => return Ok(false),
            Opened::Record { len, plaintext } => (len, plaintext),
        };
        let start = self.cipher + body.start;
        let n = body.len();
        if self.plain <= n {
            // Move the pending plaintext (none, usually) up against the new plaintext and drop
            // what lies before it: the consumed space, the old tag, the new header.
            let gap = start - self.plain;
            self.buf.copy_within(..self.plain, gap);
            self.buf.advance(gap);
            self.cipher = self.cipher + len - gap;
            self.moved += self.plain as u64;
        } else {
            self.buf.copy_within(start..start + n, self.plain);
            self.cipher += len;
            self.moved += n as u64;
        }
        self.plain += n;
        if self.cipher == self.buf.len() {
            // Nothing more buffered: the next read lands right after the plaintext.
            self.buf.truncate(self.plain);
            self.cipher = self.plain;
        }
        Ok(true)
    }

    /// Opens every complete record buffered; returns how many plaintext bytes became
    /// available. Records opened together are joined as in [`open_next`](Self::open_next).
    pub fn decrypt(&mut self) -> Result<usize, OpenError> {
        let before = self.plain;
        while self.open_next()? {}
        Ok(self.plain - before)
    }

    /// Decrypted bytes not yet consumed (the frame decoder's input).
    pub fn plaintext(&self) -> &[u8] {
        &self.buf[..self.plain]
    }

    /// Drops `n` plaintext bytes (a decoded frame).
    pub fn consume(&mut self, n: usize) {
        assert!(n <= self.plain, "consume beyond plaintext");
        self.buf.advance(n);
        self.plain -= n;
        self.cipher -= n;
    }

    /// Takes `n` plaintext bytes out as an owned buffer without copying (zero-copy payloads).
    pub fn split_plaintext(&mut self, n: usize) -> BytesMut {
        assert!(n <= self.plain, "split beyond plaintext");
        self.plain -= n;
        self.cipher -= n;
        self.buf.split_to(n)
    }

    /// Ciphertext bytes buffered but not yet opened.
    pub fn pending_ciphertext(&self) -> usize {
        self.buf.len() - self.cipher
    }

    /// The suite of the records read.
    pub fn suite(&self) -> RecordSuite {
        self.opener.suite()
    }

    /// Records opened so far.
    pub fn records(&self) -> u64 {
        self.opener.counter()
    }

    /// Plaintext bytes moved so far to join records: 0 while every frame lies within one
    /// record and is consumed before the next record is opened; never more than the plaintext
    /// opened.
    pub fn moved_bytes(&self) -> u64 {
        self.moved
    }

    /// At end of stream: a record cut short is an error.
    pub fn finish(&self) -> Result<(), OpenError> {
        self.opener.finish(&self.buf[self.cipher..])
    }
}
