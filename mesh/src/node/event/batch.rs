//! [`SampleBatch`]: a run of one writer's consecutive samples for one reader, handed to the
//! application whole by [`EventReceiver::recv_batch_timeout`](super::EventReceiver) instead of
//! sample by sample, and [`Received`], what that receive returns.
//!
//! A run is one buffer as it was read off the link; walking it borrows each payload
//! ([`SampleBatch::iter`]), so a subscriber taking millions of samples a second pays neither
//! an event nor a reference count per sample.
//!
//! **Owns:** the application's view of a run. **Must not touch:** how runs are queued.

use super::Event;
use crate::topics::EndpointGuid;
use bytes::Bytes;
use shoal_proto::shard::SampleRun;

/// What a batch receive hands out: an event, or a run of samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// Any event other than a sample (samples that came one by one are runs of one).
    Event(Event),
    /// Consecutive samples of one writer for one local reader.
    Samples(SampleBatch),
}

/// Consecutive samples of one writer for one local reader, in sequence order: what the
/// [`Event::Sample`]s of a run would have been, in one piece.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleBatch {
    run: SampleRun,
}

impl SampleBatch {
    pub(crate) fn new(run: SampleRun) -> SampleBatch {
        SampleBatch { run }
    }

    /// The local reader the samples are for.
    pub fn reader(&self) -> EndpointGuid {
        self.run.reader
    }

    /// The writer that wrote them.
    pub fn writer(&self) -> EndpointGuid {
        self.run.samples.writer
    }

    /// The sequence number of the first; the others follow it one by one.
    pub fn first_seq(&self) -> u64 {
        self.run.samples.first_seq
    }

    /// How many samples.
    pub fn len(&self) -> usize {
        usize::from(self.run.samples.count)
    }

    /// True when it holds none (never, for a batch a receiver hands out).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `(sequence number, payload)` of each sample, the payloads borrowed from the batch.
    pub fn iter(&self) -> SampleIter<'_> {
        self.run.samples.iter()
    }

    /// The payloads as owned slices of the batch's buffer (no copy; a reference count each),
    /// for those to keep past the batch.
    pub fn payloads(&self) -> impl Iterator<Item = Bytes> + '_ {
        self.run.samples.payloads()
    }

    /// The samples as the [`Event::Sample`]s a plain receive would have handed out.
    pub fn into_events(self) -> impl Iterator<Item = Event> {
        let SampleRun { reader, samples } = self.run;
        let writer = samples.writer;
        let seqs = samples.seqs();
        let payloads: Vec<Bytes> = samples.payloads().collect();
        seqs.zip(payloads).map(move |(seq, payload)| Event::Sample {
            reader,
            writer,
            seq,
            payload,
        })
    }
}

/// The samples of a [`SampleBatch`] (see [`SampleBatch::iter`]): the wire's walk of a run.
pub type SampleIter<'a> = shoal_proto::wire::SampleSlices<'a>;
