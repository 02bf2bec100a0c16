//! The one packer of Samples frames: [`SampleRuns`], which the live writer handle drives in
//! its own buffer, and [`SampleRunWriter`], the same over a borrowed buffer for the tests and
//! the simulation.
//!
//! **Owns:** numbering a writer's samples and packing them into runs within the frame
//! bounds. **Must not touch:** where the buffer's memory comes from (the caller's) or where
//! the runs go.

use super::error::EncodeError;
use super::samples::SamplesHeader;
use super::topic_frames::{SAMPLES_BODY_FIXED, SAMPLES_HEADER_LEN, SAMPLE_LEN_PREFIX};
use bytes::{BufMut, BytesMut};

/// Packs samples of one writer into runs (Samples frames) appended to a buffer, numbering
/// them consecutively: the one packer of the Samples layout, which the live writer handle
/// (`shoal_mesh::topics::Writer`, in its own arena buffer) and [`SampleRunWriter`] (tests
/// and the simulation) both drive. A run holds at most `u16::MAX` samples and its frame at
/// most `max_message_bytes`; the sample that would pass either bound closes the run and
/// opens the next, so one batch may hold several frames back to back. The open run's length
/// and count are patched in when it closes: at the bound or at [`close`](Self::close).
///
/// It holds only the packing state; the buffer is the caller's, passed to each call (always
/// the same one, or a copy of it with the same contents: only offsets into it are kept).
/// Allocates nothing when the buffer already has the capacity
/// ([`room_for`](Self::room_for) says how much a sample needs).
#[derive(Debug, Clone)]
pub struct SampleRuns {
    writer: [u8; 16],
    ttl: u8,
    max: u32,
    /// The next sample's number; 0 once `u64::MAX` was used (or if the writer started at 0).
    next_seq: u64,
    run: Option<OpenRun>,
    frames: usize,
    samples: u64,
}

/// Where the open run's frame starts in the buffer, and what it holds so far.
#[derive(Debug, Clone, Copy)]
struct OpenRun {
    start: usize,
    count: u16,
    /// The frame's length field so far.
    len: usize,
}

impl SampleRuns {
    /// Packing state for samples of `writer`, sent with `ttl`, numbered from `first_seq`
    /// (≥ 1), in frames whose length field is at most `max_message_bytes`.
    pub fn new(writer: [u8; 16], ttl: u8, first_seq: u64, max_message_bytes: u32) -> SampleRuns {
        SampleRuns {
            writer,
            ttl,
            max: max_message_bytes,
            next_seq: first_seq,
            run: None,
            frames: 0,
            samples: 0,
        }
    }

    /// Whether a `len`-byte payload joins the open run (else it opens a new one).
    fn joins(&self, len: usize) -> bool {
        self.run.is_some_and(|run| {
            run.count < u16::MAX && run.len + SAMPLE_LEN_PREFIX + len <= self.max as usize
        })
    }

    /// Bytes [`push`](Self::push) appends for a `len`-byte payload: its length prefix and
    /// the payload, and a frame header when it opens a run.
    pub fn room_for(&self, len: usize) -> usize {
        let need = SAMPLE_LEN_PREFIX + len;
        if self.joins(len) {
            need
        } else {
            SAMPLES_HEADER_LEN + need
        }
    }

    /// Appends one sample to `out` and returns its sequence number. Fails, writing nothing,
    /// when the sample alone does not fit a frame of `max_message_bytes`
    /// ([`EncodeError::SampleTooLarge`]) or no sequence number is left (the writer started at
    /// 0 or used `u64::MAX`).
    pub fn push(&mut self, out: &mut BytesMut, payload: &[u8]) -> Result<u64, EncodeError> {
        let need = SAMPLE_LEN_PREFIX + payload.len();
        let alone = 1 + SAMPLES_BODY_FIXED + need;
        if alone > self.max as usize {
            return Err(EncodeError::SampleTooLarge {
                len: payload.len(),
                max: self.max,
            });
        }
        let seq = self.next_seq;
        if seq == 0 {
            return Err(EncodeError::BadSamples("no sequence number left"));
        }
        out.reserve(self.room_for(payload.len()));
        if !self.joins(payload.len()) {
            self.close(out);
            let start = out.len();
            // Length and count are placeholders until the run closes.
            let h = SamplesHeader::new(self.ttl, &self.writer, seq, 0, 0)
                .expect("an empty run fits the length field");
            out.put_slice(&h.0);
            self.frames += 1;
            self.run = Some(OpenRun {
                start,
                count: 0,
                len: 1 + SAMPLES_BODY_FIXED,
            });
        }
        // `alone` is at most `max`, a u32, so the length fits.
        out.put_u32(payload.len() as u32);
        out.put_slice(payload);
        if let Some(run) = &mut self.run {
            run.count += 1;
            run.len += need;
        }
        self.samples += 1;
        self.next_seq = seq.wrapping_add(1);
        Ok(seq)
    }

    /// The sequence number the next sample gets (0: none left).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Frames started so far (the open run included).
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Samples written so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Closes the open run in `out`, patching its length and count in, so `out` holds whole
    /// frames only; the next sample opens a new run.
    pub fn close(&mut self, out: &mut BytesMut) {
        if let Some(run) = self.run.take() {
            let s = run.start;
            let len = u32::try_from(run.len).expect("bounded by max_message_bytes");
            out[s..s + 4].copy_from_slice(&len.to_be_bytes());
            out[s + 31..s + 33].copy_from_slice(&run.count.to_be_bytes());
        }
    }
}

/// [`SampleRuns`] over a borrowed buffer, for tests and the simulation: the open run is
/// closed at [`finish`](Self::finish) or when the writer is dropped, so the buffer never
/// holds a half-written frame once the writer is gone.
#[derive(Debug)]
pub struct SampleRunWriter<'a> {
    out: &'a mut BytesMut,
    runs: SampleRuns,
}

impl<'a> SampleRunWriter<'a> {
    /// A writer appending to `out` samples of `writer`, sent with `ttl`, numbered from
    /// `first_seq` (≥ 1), in frames whose length field is at most `max_message_bytes`.
    pub fn new(
        out: &'a mut BytesMut,
        writer: [u8; 16],
        ttl: u8,
        first_seq: u64,
        max_message_bytes: u32,
    ) -> SampleRunWriter<'a> {
        SampleRunWriter {
            out,
            runs: SampleRuns::new(writer, ttl, first_seq, max_message_bytes),
        }
    }

    /// Appends one sample and returns its sequence number (see [`SampleRuns::push`]).
    pub fn push(&mut self, payload: &[u8]) -> Result<u64, EncodeError> {
        self.runs.push(self.out, payload)
    }

    /// The sequence number the next sample gets (0: none left).
    pub fn next_seq(&self) -> u64 {
        self.runs.next_seq()
    }

    /// Frames started so far (the open run included).
    pub fn frames(&self) -> usize {
        self.runs.frames()
    }

    /// Samples written so far.
    pub fn samples(&self) -> u64 {
        self.runs.samples()
    }

    /// Closes the open run and returns the sequence number the writer's next sample gets
    /// (0: none left), to start the next batch's writer from.
    pub fn finish(mut self) -> u64 {
        self.runs.close(self.out);
        self.runs.next_seq()
    }
}

impl Drop for SampleRunWriter<'_> {
    fn drop(&mut self) {
        self.runs.close(self.out);
    }
}
