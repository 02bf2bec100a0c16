//! Sealed records: `u32 clen || AEAD(txKey, nonce = 0^4 || ctr_be64, ad = empty, pt)` with
//! `clen = |pt| + 16` and a per-direction counter starting at 0. The AEAD is the link's
//! [`RecordSuite`]: ChaCha20-Poly1305 (`protocol/secured.md`, every multimaster link) or
//! AES-256-GCM (Shoal–Shoal links that negotiated it, `protocol/aes-256-gcm.md`); nonces,
//! counters and framing are the same for both.
//!
//! **Owns:** sealing and opening records, with counters that advance on commit only. **Must not
//! touch:** what a record holds (the shard core decides), the socket, or which suite a link
//! uses (the handshake decides).
//!
//! Unlike the C++ library, the send counter is assigned only when a record is committed: sealing
//! *is* the commit, so a frame dropped by a queue policy (which acts on plaintext frames before
//! sealing) never consumes a nonce. A record may carry several frames, and a frame may span
//! records: the receiver parses plaintext as one frame stream.
//!
//! Both ciphers are `ring`'s (assembly, chosen at run time by CPU features; ChaCha20-Poly1305
//! is the same RFC 8439 cipher as the C++ library's, so the same bytes on the wire). Records
//! are sealed and opened in place in the caller's buffer. [Keys](self#keys) says how the keys
//! are wiped.
//!
//! # Keys
//!
//! `ring`'s `LessSafeKey` holds the key inline (ChaCha20's 32 bytes as they are; AES-256-GCM's
//! expanded round keys and GHASH table), owns no heap memory and does not wipe itself. Each
//! sealer and opener therefore keeps its key in one boxed slot that stays put for the key's
//! life (moving the sealer moves the pointer, not the key) and overwrites that slot with zeros
//! (volatile writes, `zeroize`) when dropped (`suite::Cipher`). Not covered: the transient
//! copy made while the key is built (a stack temporary that is not wiped) and the per-record
//! one-time values inside `ring`'s assembly (Poly1305 keys, GCM counter blocks: each good for
//! one nonce only, which is never used again).

use std::ops::Range;

use bytes::BytesMut;
use ring::aead::Aad;

use super::suite::{nonce, Cipher, RecordSuite};

mod reader;
pub use reader::RecordReader;

/// Bytes of the record length prefix.
pub const RECORD_HEADER_LEN: usize = 4;
/// Bytes of the AEAD tag at the end of each record (both suites).
pub const RECORD_TAG_LEN: usize = 16;
/// What the receiver allows beyond `maxMessageBytes` in `clen`.
pub const RECORD_SLACK: usize = 64;

/// Largest `clen` a receiver with this `maxMessageBytes` accepts.
pub fn max_clen(max_message_bytes: usize) -> usize {
    max_message_bytes.saturating_add(RECORD_SLACK)
}

/// Why a record cannot be sealed; nothing was written and no counter was consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The buffer does not hold the 4-byte header placeholder at `start`.
    #[error("record buffer lacks the 4-byte header at the record start")]
    MissingHeader,
    /// The plaintext exceeds what the receiver accepts in one record.
    #[error("record plaintext of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Plaintext bytes given.
        len: usize,
        /// Largest plaintext allowed.
        max: usize,
    },
    /// 2^64 records were sent on this link; a nonce would repeat.
    #[error("record counter exhausted")]
    CounterExhausted,
}

/// Why the incoming record stream is broken. Every variant means: close the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// `clen < 16`: no room for the tag.
    #[error("record length {0} is shorter than the tag")]
    TooShort(usize),
    /// `clen > maxMessageBytes + 64`.
    #[error("record length {len} exceeds the limit of {max}")]
    TooLarge {
        /// The announced `clen`.
        len: usize,
        /// The receiver's limit.
        max: usize,
    },
    /// The tag does not verify: tampered, reordered, replayed, or another key.
    #[error("record authentication failed")]
    AuthFailed,
    /// The stream ended inside a record.
    #[error("stream ended inside a record ({0} bytes pending)")]
    Truncated(usize),
    /// An earlier error already broke this stream.
    #[error("record stream already failed")]
    Poisoned,
    /// 2^64 records were received; the counter cannot advance.
    #[error("record counter exhausted")]
    CounterExhausted,
}

/// A growable byte buffer that records are sealed into (`Vec<u8>` or `BytesMut`).
pub trait RecordBuf {
    /// Current length.
    fn len(&self) -> usize;
    /// True when empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Appends bytes.
    fn extend_from_slice(&mut self, bytes: &[u8]);
    /// Shortens to `len`.
    fn truncate(&mut self, len: usize);
    /// The bytes, mutably.
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl RecordBuf for Vec<u8> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        Vec::extend_from_slice(self, bytes)
    }
    fn truncate(&mut self, len: usize) {
        Vec::truncate(self, len)
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl RecordBuf for BytesMut {
    fn len(&self) -> usize {
        BytesMut::len(self)
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        BytesMut::extend_from_slice(self, bytes)
    }
    fn truncate(&mut self, len: usize) {
        BytesMut::truncate(self, len)
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

/// The sending half of an established link: seals plaintext into records with `txKey`.
pub struct RecordSealer {
    cipher: Cipher,
    ctr: u64,
    max_plaintext: usize,
}

impl RecordSealer {
    /// A ChaCha20-Poly1305 sealer with counter 0. `peer_max_message_bytes` is the receiver's
    /// `maxMessageBytes` (16 MiB by default); records are kept within its `clen` limit.
    pub fn new(key: &[u8; 32], peer_max_message_bytes: usize) -> RecordSealer {
        RecordSealer::with_suite(RecordSuite::ChaCha20Poly1305, key, peer_max_message_bytes)
    }

    /// A sealer of `suite` with counter 0 (see [`new`](Self::new)).
    pub fn with_suite(
        suite: RecordSuite,
        key: &[u8; 32],
        peer_max_message_bytes: usize,
    ) -> RecordSealer {
        RecordSealer {
            cipher: Cipher::new(suite, key),
            ctr: 0,
            max_plaintext: max_clen(peer_max_message_bytes) - RECORD_TAG_LEN,
        }
    }

    /// The suite this sealer seals with.
    pub fn suite(&self) -> RecordSuite {
        self.cipher.suite()
    }

    /// The counter the next committed record will use (= records committed so far).
    pub fn counter(&self) -> u64 {
        self.ctr
    }

    /// Largest plaintext one record may carry.
    pub fn max_plaintext(&self) -> usize {
        self.max_plaintext
    }

    /// Seals `buf[start..]` in place and commits it: `buf[start..start + 4]` is a placeholder
    /// overwritten with `clen`, `buf[start + 4..]` is the plaintext (one or more whole or partial
    /// frames), the tag is appended. Uses the current counter and advances it; returns the record
    /// length. On error nothing is changed and no counter is consumed.
    ///
    /// Sealed bytes must go to the stream in order and never be dropped short of closing the
    /// link: the peer's counter advances with every record it reads.
    pub fn seal_in_place<B: RecordBuf + ?Sized>(
        &mut self,
        buf: &mut B,
        start: usize,
    ) -> Result<usize, SealError> {
        let body = start + RECORD_HEADER_LEN;
        if buf.len() < body {
            return Err(SealError::MissingHeader);
        }
        let len = buf.len() - body;
        if len > self.max_plaintext {
            return Err(SealError::TooLarge {
                len,
                max: self.max_plaintext,
            });
        }
        if self.ctr == u64::MAX {
            return Err(SealError::CounterExhausted);
        }
        let tag = self
            .cipher
            .key()
            .seal_in_place_separate_tag(nonce(self.ctr), Aad::empty(), &mut buf.bytes_mut()[body..])
            .expect("plaintext is bounded far below both suites' 64 GiB limit");
        buf.extend_from_slice(tag.as_ref());
        let clen = (len + RECORD_TAG_LEN) as u32;
        buf.bytes_mut()[start..body].copy_from_slice(&clen.to_be_bytes());
        self.ctr += 1;
        Ok(RECORD_HEADER_LEN + clen as usize)
    }

    /// Starts a record at the end of `buf`. Append frames through the builder, then
    /// [`RecordBuilder::seal`] it; dropping the builder unsealed removes its bytes and consumes no
    /// counter.
    pub fn begin<'a, B: RecordBuf + ?Sized>(&'a mut self, buf: &'a mut B) -> RecordBuilder<'a, B> {
        let start = buf.len();
        buf.extend_from_slice(&[0; RECORD_HEADER_LEN]);
        RecordBuilder {
            sealer: self,
            buf,
            start,
            sealed: false,
        }
    }

    /// Seals one complete plaintext (a frame, or several back to back) as a record appended to
    /// `out`. Convenience over [`RecordSealer::begin`].
    pub fn seal_frame<B: RecordBuf + ?Sized>(
        &mut self,
        out: &mut B,
        plaintext: &[u8],
    ) -> Result<usize, SealError> {
        let mut rec = self.begin(out);
        rec.try_push(plaintext)?;
        rec.seal()
    }
}

impl std::fmt::Debug for RecordSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordSealer")
            .field("suite", &self.suite())
            .field("counter", &self.ctr)
            .finish_non_exhaustive()
    }
}

/// A record under construction in the caller's buffer (see [`RecordSealer::begin`]).
pub struct RecordBuilder<'a, B: RecordBuf + ?Sized> {
    sealer: &'a mut RecordSealer,
    buf: &'a mut B,
    start: usize,
    sealed: bool,
}

impl<B: RecordBuf + ?Sized> RecordBuilder<'_, B> {
    /// Plaintext bytes appended so far.
    pub fn plaintext_len(&self) -> usize {
        self.buf.len() - self.start - RECORD_HEADER_LEN
    }

    /// Plaintext bytes that still fit in this record.
    pub fn remaining(&self) -> usize {
        self.sealer.max_plaintext - self.plaintext_len()
    }

    /// Appends plaintext if it fits; otherwise leaves the record unchanged, so the caller can
    /// seal this record and put the frame into the next one.
    pub fn try_push(&mut self, plaintext: &[u8]) -> Result<(), SealError> {
        if plaintext.len() > self.remaining() {
            return Err(SealError::TooLarge {
                len: self.plaintext_len() + plaintext.len(),
                max: self.sealer.max_plaintext,
            });
        }
        self.buf.extend_from_slice(plaintext);
        Ok(())
    }

    /// Appends as much of `plaintext` as fits; returns how many bytes that was. For a frame
    /// larger than a record, which then continues in the next one.
    pub fn push_some(&mut self, plaintext: &[u8]) -> usize {
        let n = self.remaining().min(plaintext.len());
        self.buf.extend_from_slice(&plaintext[..n]);
        n
    }

    /// Seals and commits the record (assigns the counter now). Returns the record length.
    pub fn seal(mut self) -> Result<usize, SealError> {
        let n = self.sealer.seal_in_place(self.buf, self.start)?;
        self.sealed = true;
        Ok(n)
    }
}

impl<B: RecordBuf + ?Sized> Drop for RecordBuilder<'_, B> {
    fn drop(&mut self) {
        if !self.sealed {
            self.buf.truncate(self.start);
        }
    }
}

/// Result of one [`RecordOpener::open_in_place`] step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// Not a whole record yet; at least this many more bytes are needed.
    NeedMore(usize),
    /// One record was verified and decrypted in place.
    Record {
        /// Bytes of the record (header + ciphertext + tag) to consume from the stream.
        len: usize,
        /// Where its plaintext now lies in the buffer given.
        plaintext: Range<usize>,
    },
}

/// The receiving half of an established link: verifies and decrypts records with `rxKey`.
pub struct RecordOpener {
    cipher: Cipher,
    ctr: u64,
    max_clen: usize,
    failed: bool,
}

impl RecordOpener {
    /// A ChaCha20-Poly1305 opener with counter 0 that accepts
    /// `16 <= clen <= max_message_bytes + 64`.
    pub fn new(key: &[u8; 32], max_message_bytes: usize) -> RecordOpener {
        RecordOpener::with_suite(RecordSuite::ChaCha20Poly1305, key, max_message_bytes)
    }

    /// An opener of `suite` with counter 0 (see [`new`](Self::new)).
    pub fn with_suite(
        suite: RecordSuite,
        key: &[u8; 32],
        max_message_bytes: usize,
    ) -> RecordOpener {
        RecordOpener {
            cipher: Cipher::new(suite, key),
            ctr: 0,
            max_clen: max_clen(max_message_bytes),
            failed: false,
        }
    }

    /// The suite this opener opens.
    pub fn suite(&self) -> RecordSuite {
        self.cipher.suite()
    }

    /// Records opened so far (the counter of the next one).
    pub fn counter(&self) -> u64 {
        self.ctr
    }

    /// Looks at the record at the start of `buf`: NeedMore until it is complete (the length is
    /// checked as soon as its 4 bytes are there), then verifies it with the current counter and
    /// decrypts it in place. The counter advances only on success; any error poisons the opener.
    pub fn open_in_place(&mut self, buf: &mut [u8]) -> Result<Opened, OpenError> {
        if self.failed {
            return Err(OpenError::Poisoned);
        }
        let r = self.open_inner(buf);
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn open_inner(&mut self, buf: &mut [u8]) -> Result<Opened, OpenError> {
        let Some(header) = buf.first_chunk::<RECORD_HEADER_LEN>() else {
            return Ok(Opened::NeedMore(RECORD_HEADER_LEN - buf.len()));
        };
        let clen = u32::from_be_bytes(*header) as usize;
        if clen < RECORD_TAG_LEN {
            return Err(OpenError::TooShort(clen));
        }
        if clen > self.max_clen {
            return Err(OpenError::TooLarge {
                len: clen,
                max: self.max_clen,
            });
        }
        let total = RECORD_HEADER_LEN + clen;
        if buf.len() < total {
            return Ok(Opened::NeedMore(total - buf.len()));
        }
        if self.ctr == u64::MAX {
            return Err(OpenError::CounterExhausted);
        }
        let pt_end = total - RECORD_TAG_LEN;
        self.cipher
            .key()
            .open_in_place(
                nonce(self.ctr),
                Aad::empty(),
                &mut buf[RECORD_HEADER_LEN..total],
            )
            .map_err(|_| OpenError::AuthFailed)?;
        self.ctr += 1;
        Ok(Opened::Record {
            len: total,
            plaintext: RECORD_HEADER_LEN..pt_end,
        })
    }

    /// Called at end of stream with the bytes still unconsumed: a partial record is an error.
    pub fn finish(&self, pending: &[u8]) -> Result<(), OpenError> {
        if pending.is_empty() {
            Ok(())
        } else {
            Err(OpenError::Truncated(pending.len()))
        }
    }
}

impl std::fmt::Debug for RecordOpener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordOpener")
            .field("suite", &self.suite())
            .field("counter", &self.ctr)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
