//! The Samples frame (type 10): its value type and the walks of its body, the read path's
//! fast lane, and the fixed header a relay re-sends a run with (layout in `topic_frames`;
//! the packer that writes runs is `sample_runs`).
//!
//! **Owns:** the Samples frame's bytes. **Must not touch:** where samples go (`shard`,
//! `topics`) or their sequence numbers' meaning (the writer and reader state).
//!
//! Nothing here copies a payload or allocates per sample: a decoded run is its header fields
//! plus one `Bytes` slice of the read buffer ([`Samples::body`]), walked lazily by
//! [`Samples::payloads`]; a relay sends [`SamplesHeader`] and that body as two slices;
//! [`SampleRuns`](super::SampleRuns) (the one packer) writes into a caller's buffer and only
//! reserves room in it.

use super::cursor::Cursor;
use super::defaults::LENGTH_PREFIX_LEN;
use super::error::{DecodeError, EncodeError};
use super::frame_type::SAMPLES_FRAME_TYPE;
use super::topic_frames::{
    SAMPLES_BODY_FIXED, SAMPLES_HEADER_LEN, SAMPLES_KNOWN_FLAGS, SAMPLE_LEN_PREFIX,
};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::ops::Range;

/// A Samples frame (type 10), decoded without copying: the header fields and the body after
/// the header (`count × (len u32 | payload)`), which [`Samples::payloads`] walks.
///
/// Body: `ttl u8 | flags u8 | writer 16 | firstSeq u64 | count u16 | count × (len u32 |
/// payload)`: `count ≥ 1` samples numbered `firstSeq ..= firstSeq + count - 1` (`firstSeq ≥ 1`,
/// no overflow), lengths filling the body exactly, no flag bit set (none is defined yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Samples {
    /// Remaining hops.
    pub ttl: u8,
    /// The writer's GUID (its first 12 bytes are its node's id prefix).
    pub writer: [u8; 16],
    /// Sequence number of the first sample.
    pub first_seq: u64,
    /// Samples in the run (≥ 1).
    pub count: u16,
    /// `count × (len u32 | payload)`, checked to fill exactly.
    pub body: Bytes,
}

impl Samples {
    /// A run of `payloads` (at least one, at most `u16::MAX`) numbered from `first_seq`,
    /// copied into a new body: for tests and control traffic; the data path packs runs with
    /// [`SampleRuns`](super::SampleRuns) instead.
    pub fn new<I>(
        ttl: u8,
        writer: [u8; 16],
        first_seq: u64,
        payloads: I,
    ) -> Result<Samples, EncodeError>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let (body, count) = pack_payloads(payloads)?;
        let count = u16::try_from(count)
            .map_err(|_| EncodeError::BadSamples("more than u16::MAX samples"))?;
        let s = Samples {
            ttl,
            writer,
            first_seq,
            count,
            body,
        };
        s.validate()?;
        Ok(s)
    }

    /// The payloads in order, each a slice of [`body`](Self::body) (no copy, no allocation).
    /// A body that is not `count` well-formed samples (only possible for a hand-built value,
    /// never a decoded one) ends the walk early.
    pub fn payloads(&self) -> SamplePayloads<'_> {
        SamplePayloads {
            body: &self.body,
            pos: 0,
            left: self.count,
        }
    }

    /// `(sequence number, payload)` of each sample, the payloads borrowed from the body (no
    /// reference count touched); ends early as [`payloads`](Self::payloads) does.
    pub fn iter(&self) -> SampleSlices<'_> {
        SampleSlices {
            body: &self.body,
            pos: 0,
            left: self.count,
            seq: self.first_seq,
        }
    }

    /// The sequence numbers of the samples, `first_seq ..= last_seq()`, in the order of
    /// [`payloads`](Self::payloads).
    pub fn seqs(&self) -> impl ExactSizeIterator<Item = u64> + 'static {
        let first = self.first_seq;
        (0..self.count).map(move |i| first.wrapping_add(u64::from(i)))
    }

    /// The sequence number of the last sample (`first_seq + count - 1`).
    pub fn last_seq(&self) -> u64 {
        self.first_seq
            .wrapping_add(u64::from(self.count))
            .wrapping_sub(1)
    }

    /// The run without its first `k` samples (`k < count`): the body re-sliced after their
    /// length prefixes and payloads, no payload copied.
    pub fn skip(&self, k: u16) -> Samples {
        debug_assert!(k < self.count, "skip {k} of {}", self.count);
        Samples {
            ttl: self.ttl,
            writer: self.writer,
            first_seq: self.first_seq + u64::from(k),
            count: self.count - k,
            body: self.body.slice(self.offset_of(k)..),
        }
    }

    /// The run cut after its first `k` samples (`0 < k < count`): both halves share the
    /// body, no payload is copied.
    pub fn split_at(self, k: u16) -> (Samples, Samples) {
        let rest = self.skip(k);
        let head = Samples {
            count: k,
            body: self.body.slice(..self.body.len() - rest.body.len()),
            ..self
        };
        (head, rest)
    }

    /// Takes the first sample off the run: its sequence number and payload (a slice of the
    /// body, no copy); the run keeps the rest. `None` once the run is empty, or when the body
    /// is not `count` well-formed samples (only possible for a hand-built value).
    pub fn pop_front(&mut self) -> Option<(u64, Bytes)> {
        if self.count == 0 {
            return None;
        }
        let at = payload_at(&self.body, 0)?;
        let payload = self.body.slice(at.clone());
        self.body.advance(at.end);
        let seq = self.first_seq;
        self.first_seq = seq.wrapping_add(1);
        self.count -= 1;
        Some((seq, payload))
    }

    /// Where sample `k` (`k < count`) starts in the body.
    fn offset_of(&self, k: u16) -> usize {
        (0..k).fold(0, |at, _| {
            payload_at(&self.body, at)
                .expect("a run of `count` whole samples")
                .end
        })
    }

    /// Bytes the whole frame occupies on the wire: `33 + body`.
    pub fn encoded_len(&self) -> usize {
        SAMPLES_HEADER_LEN + self.body.len()
    }

    /// The first 33 bytes of this frame; a relay sets a new ttl on it
    /// ([`SamplesHeader::set_ttl`]) and sends it followed by [`body`](Self::body).
    pub fn header(&self) -> Result<SamplesHeader, EncodeError> {
        SamplesHeader::new(
            self.ttl,
            &self.writer,
            self.first_seq,
            self.count,
            self.body.len(),
        )
    }

    /// Checks what the decoder would reject, so an encoded frame always decodes.
    pub(crate) fn validate(&self) -> Result<(), EncodeError> {
        check_head(self.first_seq, self.count, SAMPLES_KNOWN_FLAGS)
            .and_then(|()| check_run(&self.body, self.count, SAMPLES_RUN))
            .map_err(|e| {
                EncodeError::BadSamples(match e {
                    DecodeError::EmptySamples => "no sample",
                    DecodeError::BadSampleSeq { .. } => "sequence numbers outside 1..=u64::MAX",
                    _ => "the body is not `count` length-prefixed payloads",
                })
            })?;
        let len = self.encoded_len() - LENGTH_PREFIX_LEN;
        u32::try_from(len).map_err(|_| EncodeError::FrameTooLarge { len })?;
        Ok(())
    }

    /// Validates a body (everything after the type byte) without allocating: the frame's
    /// fields with an empty body, and the range of the body's samples within `body`.
    pub(crate) fn check_body(body: &[u8]) -> Result<(Samples, Range<usize>), DecodeError> {
        let mut c = Cursor::new(body);
        let ttl = c.u8("Samples.ttl")?;
        let flags = c.u8("Samples.flags")?;
        let writer = c.array("Samples.writer")?;
        let first_seq = c.u64("Samples.firstSeq")?;
        let count = c.u16("Samples.count")?;
        check_head(first_seq, count, flags)?;
        check_run(c.rest(), count, SAMPLES_RUN)?;
        let s = Samples {
            ttl,
            writer,
            first_seq,
            count,
            body: Bytes::new(),
        };
        Ok((s, SAMPLES_BODY_FIXED..body.len()))
    }
}

/// The header checks, in the order the fields come.
fn check_head(first_seq: u64, count: u16, flags: u8) -> Result<(), DecodeError> {
    if flags & !SAMPLES_KNOWN_FLAGS != 0 {
        return Err(DecodeError::UnknownSamplesFlags(flags));
    }
    if count == 0 {
        return Err(DecodeError::EmptySamples);
    }
    if first_seq == 0 || first_seq.checked_add(u64::from(count) - 1).is_none() {
        return Err(DecodeError::BadSampleSeq { first_seq, count });
    }
    Ok(())
}

/// The names a run's errors carry: the frame, its length field and its payload field.
pub(crate) struct RunNames {
    pub(crate) frame: &'static str,
    pub(crate) len: &'static str,
    pub(crate) payload: &'static str,
}

const SAMPLES_RUN: RunNames = RunNames {
    frame: "Samples",
    len: "Samples.len",
    payload: "Samples.payload",
};

/// Checks that `count` length-prefixed payloads fill `run` exactly (Samples and Repair share
/// the layout).
pub(crate) fn check_run(run: &[u8], count: u16, names: RunNames) -> Result<(), DecodeError> {
    let mut c = Cursor::new(run);
    for _ in 0..count {
        let len = c.u32(names.len)?;
        c.take(len as usize, names.payload)?;
    }
    match c.remaining() {
        0 => Ok(()),
        extra => Err(DecodeError::TrailingBytes {
            frame: names.frame,
            extra,
        }),
    }
}

/// The payloads of a [`Samples`] run, as [`Samples::payloads`] yields them.
#[derive(Debug, Clone)]
pub struct SamplePayloads<'a> {
    body: &'a Bytes,
    pos: usize,
    left: u16,
}

impl<'a> SamplePayloads<'a> {
    /// Walks `count` length-prefixed payloads of `body` (a Repair's body has the same layout).
    pub(crate) fn over(body: &'a Bytes, count: u16) -> SamplePayloads<'a> {
        SamplePayloads {
            body,
            pos: 0,
            left: count,
        }
    }
}

impl Iterator for SamplePayloads<'_> {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if self.left == 0 {
            return None;
        }
        match payload_at(self.body, self.pos) {
            Some(at) => {
                self.left -= 1;
                self.pos = at.end;
                Some(self.body.slice(at))
            }
            None => {
                self.left = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(usize::from(self.left)))
    }
}

/// `(sequence number, payload)` of each sample of a [`Samples`] run, the payloads borrowed
/// (see [`Samples::iter`]).
#[derive(Debug, Clone)]
pub struct SampleSlices<'a> {
    body: &'a [u8],
    pos: usize,
    left: u16,
    seq: u64,
}

impl<'a> Iterator for SampleSlices<'a> {
    type Item = (u64, &'a [u8]);

    fn next(&mut self) -> Option<(u64, &'a [u8])> {
        if self.left == 0 {
            return None;
        }
        let at = payload_at(self.body, self.pos)?;
        self.pos = at.end;
        self.left -= 1;
        let seq = self.seq;
        self.seq = seq.wrapping_add(1);
        Some((seq, &self.body[at]))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(usize::from(self.left)))
    }
}

/// Where the payload of the sample at `pos` of a run's body lies (after its length prefix),
/// if the body holds it whole: the one reading of a sample's `len u32 | payload` that every
/// walk of a run (iteration, skip, split, pop) goes through.
fn payload_at(body: &[u8], pos: usize) -> Option<Range<usize>> {
    let start = pos + SAMPLE_LEN_PREFIX;
    let len = u32::from_be_bytes(body.get(pos..start)?.try_into().expect("4 bytes")) as usize;
    let end = start.checked_add(len)?;
    (end <= body.len()).then_some(start..end)
}

/// The read path's fast lane for Samples frames, like [`super::take_data`]: when the frame at
/// the front of `buf` is a complete, well-formed Samples frame within `max_message_bytes`,
/// splits exactly that frame off `buf` and returns it, the body sharing the split-off storage
/// (one handle, no copy), without building a [`super::Frame`]. Anything else (another type,
/// not all there yet, any malformed field) gives `None` with `buf` untouched: call
/// [`super::take_frame`], which decides with its typed errors; the fast lane never fails.
pub fn take_samples(buf: &mut BytesMut, max_message_bytes: u32) -> Option<Samples> {
    let h = buf.get(..SAMPLES_HEADER_LEN)?;
    if h[LENGTH_PREFIX_LEN] != SAMPLES_FRAME_TYPE {
        return None;
    }
    let len = u32::from_be_bytes(h[..4].try_into().expect("4 bytes"));
    let total = LENGTH_PREFIX_LEN + len as usize;
    if len > max_message_bytes || total < SAMPLES_HEADER_LEN || buf.len() < total {
        return None;
    }
    let (head, _) = Samples::check_body(&buf[LENGTH_PREFIX_LEN + 1..total]).ok()?;
    let mut raw = buf.split_to(total);
    raw.advance(SAMPLES_HEADER_LEN);
    Some(Samples {
        body: raw.freeze(),
        ..head
    })
}

/// `payloads` as a run's body, `count × (len u32 | payload)`, copied into one new buffer,
/// and their count (Samples and Repair frames share the layout).
pub(crate) fn pack_payloads<I>(payloads: I) -> Result<(Bytes, usize), EncodeError>
where
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    let mut body = BytesMut::new();
    let mut count = 0usize;
    for p in payloads {
        let p = p.as_ref();
        let len =
            u32::try_from(p.len()).map_err(|_| EncodeError::FrameTooLarge { len: p.len() })?;
        body.reserve(SAMPLE_LEN_PREFIX + p.len());
        body.put_u32(len);
        body.put_slice(p);
        count += 1;
    }
    Ok((body.freeze(), count))
}

/// The Samples frame at `at` of a batch this node's own writer handle packed, and its
/// length: only its header is read (the body is not walked again: the handle wrote it
/// well-formed, and this path runs for every batch a reliable writer writes). `None` if the
/// header is not a Samples frame's or the frame runs past the batch.
pub fn split_own_samples(batch: &Bytes, at: usize) -> Option<(Samples, usize)> {
    let (head, total) = own_head(batch, at)?;
    let s = Samples {
        body: batch.slice(at + SAMPLES_HEADER_LEN..at + total),
        ..head
    };
    Some((s, total))
}

/// The sequence number of the last sample in a batch of whole Samples frames that this
/// node's own writer handle packed, from the frame headers alone (as
/// [`split_own_samples`]); `None` if the batch is not such frames.
pub fn last_seq_of_own_samples(batch: &[u8]) -> Option<u64> {
    let mut at = 0;
    let mut last = None;
    while at < batch.len() {
        let (head, total) = own_head(batch, at)?;
        last = head
            .first_seq
            .checked_add(u64::from(head.count))?
            .checked_sub(1);
        at += total;
    }
    last
}

/// The header fields (with an empty body) and the whole length of the Samples frame at `at`
/// of `batch`, from its header alone; `None` if it is not a Samples frame's header or the
/// frame runs past the batch.
fn own_head(batch: &[u8], at: usize) -> Option<(Samples, usize)> {
    let h = batch.get(at..at + SAMPLES_HEADER_LEN)?;
    if h[LENGTH_PREFIX_LEN] != SAMPLES_FRAME_TYPE {
        return None;
    }
    let total = LENGTH_PREFIX_LEN + u32::from_be_bytes(h[..4].try_into().ok()?) as usize;
    if total < SAMPLES_HEADER_LEN || at + total > batch.len() {
        return None;
    }
    let s = Samples {
        ttl: h[5],
        writer: h[7..23].try_into().ok()?,
        first_seq: u64::from_be_bytes(h[23..31].try_into().ok()?),
        count: u16::from_be_bytes(h[31..33].try_into().ok()?),
        body: Bytes::new(),
    };
    Some((s, total))
}

/// The first 33 bytes of a Samples frame (length prefix, type, ttl, flags, writer, firstSeq,
/// count), built without the body so a run is sent as `header ++ body` in one vectored write.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SamplesHeader(pub [u8; SAMPLES_HEADER_LEN]);

impl std::fmt::Debug for SamplesHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SamplesHeader(")?;
        for b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

impl SamplesHeader {
    /// The header of a run of `count` samples from `first_seq` whose body (the samples with
    /// their length prefixes) is `body_len` bytes. Fails only when the frame length would not
    /// fit the `u32` length field; the run itself is the caller's to keep well-formed.
    pub fn new(
        ttl: u8,
        writer: &[u8; 16],
        first_seq: u64,
        count: u16,
        body_len: usize,
    ) -> Result<SamplesHeader, EncodeError> {
        let frame_len = 1 + SAMPLES_BODY_FIXED + body_len;
        let len =
            u32::try_from(frame_len).map_err(|_| EncodeError::FrameTooLarge { len: frame_len })?;
        let mut h = [0u8; SAMPLES_HEADER_LEN];
        h[..4].copy_from_slice(&len.to_be_bytes());
        h[4] = SAMPLES_FRAME_TYPE;
        h[5] = ttl;
        h[6] = 0;
        h[7..23].copy_from_slice(writer);
        h[23..31].copy_from_slice(&first_seq.to_be_bytes());
        h[31..33].copy_from_slice(&count.to_be_bytes());
        Ok(SamplesHeader(h))
    }

    /// The header bytes.
    pub fn as_bytes(&self) -> &[u8; SAMPLES_HEADER_LEN] {
        &self.0
    }

    /// Appends the header to `out`.
    pub fn encode<B: BufMut>(&self, out: &mut B) {
        out.put_slice(&self.0);
    }

    /// Replaces the ttl (a relay forwards a run with one hop less).
    pub fn set_ttl(&mut self, ttl: u8) {
        self.0[5] = ttl;
    }

    /// The body length the header announces (bytes after the header).
    pub fn body_len(&self) -> usize {
        u32::from_be_bytes(self.0[..4].try_into().expect("4 bytes")) as usize
            - 1
            - SAMPLES_BODY_FIXED
    }
}
