//! Sealed records: `u32 clen || ChaCha20-Poly1305(txKey, nonce = 0^4 || ctr_be64, ad = empty, pt)`
//! with `clen = |pt| + 16` and a per-direction counter starting at 0.
//!
//! **Owns:** sealing and opening records, with counters that advance on commit only. **Must not
//! touch:** what a record holds (the shard core decides) or the socket.
//!
//! Unlike the C++ library, the send counter is assigned only when a record is committed: sealing
//! *is* the commit, so a frame dropped by a queue policy (which acts on plaintext frames before
//! sealing) never consumes a nonce. A record may carry several frames, and a frame may span
//! records: the receiver parses plaintext as one frame stream.
//!
//! The cipher is `ring`'s ChaCha20-Poly1305 (assembly, chosen at run time by CPU features; the
//! same RFC 8439 cipher as before, so the same bytes on the wire). Records are sealed and opened
//! in place in the caller's buffer. [Keys](self#keys) says how the keys are wiped.
//!
//! # Keys
//!
//! `ring`'s `LessSafeKey` holds the 32-byte key as it is (ChaCha20 has no key schedule) inline,
//! owns no heap memory and does not wipe itself. Each sealer and opener therefore keeps its key
//! in one boxed slot that stays put for the key's life (moving the sealer moves the pointer, not
//! the key) and overwrites that slot with zeros (volatile writes, `zeroize`) when dropped.
//! Not covered: the transient copy made while the key is built (a stack temporary that is not
//! wiped) and the per-record Poly1305 one-time keys inside `ring`'s assembly (each good for one
//! nonce only, which is never used again).

use std::mem::MaybeUninit;
use std::ops::Range;

use bytes::{Buf, BytesMut};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};
use zeroize::Zeroize;

/// Bytes of the record length prefix.
pub const RECORD_HEADER_LEN: usize = 4;
/// Bytes of the Poly1305 tag at the end of each record.
pub const RECORD_TAG_LEN: usize = 16;
/// What the receiver allows beyond `maxMessageBytes` in `clen`.
pub const RECORD_SLACK: usize = 64;

fn nonce(ctr: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&ctr.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

// Wiping the slot without running a destructor leaks nothing only while ring's key has none.
const _: () = assert!(!std::mem::needs_drop::<LessSafeKey>());

/// One direction's ChaCha20-Poly1305 key, in a heap slot that never moves and is zeroed on drop
/// (see [Keys](self#keys)).
struct Cipher(Box<MaybeUninit<LessSafeKey>>);

impl Cipher {
    fn new(key: &[u8; 32]) -> Cipher {
        let key = UnboundKey::new(&CHACHA20_POLY1305, key).expect("ChaCha20 takes a 32-byte key");
        Cipher(Box::new(MaybeUninit::new(LessSafeKey::new(key))))
    }

    fn key(&self) -> &LessSafeKey {
        // SAFETY: the slot is initialised in `new` and only overwritten in `drop`, after which
        // `self` is never used again.
        unsafe { self.0.assume_init_ref() }
    }
}

impl Drop for Cipher {
    fn drop(&mut self) {
        // `LessSafeKey` has no destructor (asserted above), so overwriting it is its whole end.
        self.0.zeroize();
    }
}

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
    /// A sealer with counter 0. `peer_max_message_bytes` is the receiver's `maxMessageBytes`
    /// (16 MiB by default); records are kept within its `clen` limit.
    pub fn new(key: &[u8; 32], peer_max_message_bytes: usize) -> RecordSealer {
        RecordSealer {
            cipher: Cipher::new(key),
            ctr: 0,
            max_plaintext: max_clen(peer_max_message_bytes) - RECORD_TAG_LEN,
        }
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
            .expect("plaintext is bounded far below ChaCha20's 256 GiB limit");
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
    /// An opener with counter 0 that accepts `16 <= clen <= max_message_bytes + 64`.
    pub fn new(key: &[u8; 32], max_message_bytes: usize) -> RecordOpener {
        RecordOpener {
            cipher: Cipher::new(key),
            ctr: 0,
            max_clen: max_clen(max_message_bytes),
            failed: false,
        }
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
            .field("counter", &self.ctr)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

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

#[cfg(test)]
mod tests;
