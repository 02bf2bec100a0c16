//! Topic traffic for the load roles: the `--topic` / `--partition` / QoS flags, a publishing
//! sink over a topic [`Writer`], and the sample-receiving loop that counts samples per writer
//! and checks that each writer's sequence numbers only rise (gaps and reorders counted).
//!
//! **Owns:** the topic flags and their mapping onto a [`Topic`] declaration, the per-writer
//! sequence check and the sample-receiving loop (what a run reports is
//! [`crate::topic_report`]'s). **Must not touch:** matching or the sample path: it opens endpoints and reads
//! events and [`Mesh::topics`] through `shoal-mesh`'s public API only.

use crate::shoal::sink_error;
use crate::traffic::{Receiver, Sink, SinkError};
use ahash::AHashMap;
use shoal_mesh::topics::{DurabilityKind, EndpointGuid, Topic, Writer};
use shoal_mesh::{ErrorLog, Event, EventReceiver, Mesh, Received};
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Durability names accepted on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Durability {
    /// No history for late joiners.
    Volatile,
    /// The writer keeps history for late joiners.
    TransientLocal,
    /// A service keeps history beyond the writer.
    Transient,
    /// History survives restarts.
    Persistent,
}

impl From<Durability> for DurabilityKind {
    fn from(d: Durability) -> DurabilityKind {
        match d {
            Durability::Volatile => DurabilityKind::Volatile,
            Durability::TransientLocal => DurabilityKind::TransientLocal,
            Durability::Transient => DurabilityKind::Transient,
            Durability::Persistent => DurabilityKind::Persistent,
        }
    }
}

/// The topic flags of the roles: `--topic` switches a role from broadcasts to a topic writer
/// (`pub`) or reader (`sub`); the others shape its declaration.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TopicArgs {
    /// Publish / subscribe on this topic instead of broadcasting (pub: one writer; sub: a
    /// reader per `--topic`, repeatable).
    #[arg(long = "topic", value_name = "NAME")]
    pub topics: Vec<String>,
    /// Type name of the topic's samples (default type hash: from the name).
    #[arg(
        long = "type",
        value_name = "NAME",
        default_value = "shoal-loadgen/Payload"
    )]
    pub type_name: String,
    /// Partition name or pattern (`*`, `?`; repeatable; none: the default partition).
    #[arg(long = "partition", value_name = "P")]
    pub partitions: Vec<String>,
    /// Reliability Reliable (the writers' default).
    #[arg(long, conflicts_with = "best_effort")]
    pub reliable: bool,
    /// Reliability BestEffort (the readers' default).
    #[arg(long)]
    pub best_effort: bool,
    /// History keep-last with this depth.
    #[arg(long, value_name = "N", conflicts_with = "keep_all")]
    pub keep_last: Option<u32>,
    /// History keep-all.
    #[arg(long)]
    pub keep_all: bool,
    /// Durability.
    #[arg(long, value_enum)]
    pub durability: Option<Durability>,
}

impl TopicArgs {
    /// True when a `--topic` was given.
    pub fn enabled(&self) -> bool {
        !self.topics.is_empty()
    }

    /// The declaration of topic `name` with these flags.
    pub fn declaration(&self, name: &str) -> Topic {
        let mut t = Topic::new(name, self.type_name.as_str()).partitions(self.partitions.clone());
        if self.reliable {
            t = t.reliable();
        }
        if self.best_effort {
            t = t.best_effort();
        }
        if let Some(depth) = self.keep_last {
            t = t.history_keep_last(depth);
        }
        if self.keep_all {
            t = t.history_keep_all();
        }
        if let Some(d) = self.durability {
            t = t.durability(d.into());
        }
        t
    }
}

/// Publishes through a topic [`Writer`] (its batching: `batch_bytes` per hand-over, 0 = one
/// sample per hand-over).
pub struct TopicSink {
    writer: Writer,
}

impl TopicSink {
    /// A sink over `writer`, handing batches of `batch_bytes` to the node.
    pub fn new(writer: Writer, batch_bytes: usize) -> TopicSink {
        TopicSink {
            writer: writer.with_batch_bytes(batch_bytes),
        }
    }

    /// The writer's GUID.
    pub fn guid(&self) -> EndpointGuid {
        self.writer.guid()
    }
}

impl Sink for TopicSink {
    fn send(&mut self, payload: &[u8]) -> Result<(), SinkError> {
        loop {
            match self.writer.write_blocking(payload) {
                Ok(_) => return Ok(()),
                // A reliable keep-all writer whose readers lag past its max blocking time:
                // wait again (the sample is not written; skipping it would be a loss).
                Err(shoal_mesh::PublishError::HistoryFull { .. }) => continue,
                Err(e) => return Err(sink_error(e)),
            }
        }
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        self.writer.flush_blocking().map_err(sink_error)
    }
}

/// Writers one [`WriterSeqs`] tracks; samples of further writers are counted in
/// [`WriterSeqs::untracked`] only.
pub const MAX_WRITERS: usize = 1024;

/// One writer's samples as a reader saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct WriterCount {
    /// Samples received.
    pub samples: u64,
    /// The first sequence number received (1 unless the reader joined late).
    pub first_seq: u64,
    /// The highest sequence number received.
    pub last_seq: u64,
    /// Jumps forward by more than one (after the first sample).
    pub gaps: u64,
    /// Sequence numbers skipped by those jumps.
    pub skipped: u64,
    /// Samples whose number was not above the highest before it (reordered or repeated).
    pub reorders: u64,
}

impl WriterCount {
    /// `n` samples numbered `first, first + 1, ...`: those not above the highest so far are
    /// reorders, a jump past it before the rest is one gap.
    fn record_run(&mut self, first: u64, n: u64) {
        if n == 0 {
            return;
        }
        let last = first.saturating_add(n - 1);
        if self.samples == 0 {
            self.first_seq = first;
            self.last_seq = last;
        } else {
            let stale = if first > self.last_seq {
                0
            } else {
                n.min(self.last_seq - first + 1)
            };
            self.reorders += stale;
            if stale < n {
                let next = first + stale;
                if next > self.last_seq + 1 {
                    self.gaps += 1;
                    self.skipped += next - self.last_seq - 1;
                }
                self.last_seq = last;
            }
        }
        self.samples += n;
    }
}

/// Per-writer sample counts and sequence checks of one reader, bounded by [`MAX_WRITERS`].
#[derive(Debug, Default)]
pub struct WriterSeqs {
    writers: AHashMap<EndpointGuid, WriterCount>,
    /// Samples of writers beyond the tracked ones.
    pub untracked: u64,
}

impl WriterSeqs {
    /// Accounts sample `seq` of `writer`.
    #[cfg(test)]
    pub fn record(&mut self, writer: EndpointGuid, seq: u64) {
        self.record_run(writer, seq, 1);
    }

    /// Accounts `n` consecutive samples of `writer` from `first` on, as `n` calls of
    /// `record` would, with one lookup: a GUID's hash per sample was most of
    /// a 64 B subscriber's thread, and a run's numbers follow one another by construction.
    pub fn record_run(&mut self, writer: EndpointGuid, first: u64, n: u64) {
        let full = self.writers.len() >= MAX_WRITERS;
        match self.writers.entry(writer) {
            Entry::Occupied(o) => o.into_mut().record_run(first, n),
            Entry::Vacant(_) if full => self.untracked += n,
            Entry::Vacant(v) => v.insert(WriterCount::default()).record_run(first, n),
        }
    }

    /// Every writer seen, by GUID (sorted, so output is stable).
    pub fn writers(&self) -> Vec<(EndpointGuid, WriterCount)> {
        let mut v: Vec<_> = self.writers.iter().map(|(g, c)| (*g, *c)).collect();
        v.sort_unstable_by_key(|(g, _)| *g);
        v
    }

    /// The sum over writers.
    pub fn total(&self) -> WriterCount {
        let mut t = WriterCount::default();
        for c in self.writers.values() {
            t.samples += c.samples;
            t.gaps += c.gaps;
            t.skipped += c.skipped;
            t.reorders += c.reorders;
        }
        t
    }
}

/// One local reader being measured.
#[derive(Debug)]
pub struct ReaderState {
    /// The reader's GUID.
    pub guid: EndpointGuid,
    /// Its topic.
    pub topic: String,
    /// Rates, loss by stamp, latency.
    pub recv: Receiver,
    /// Per-writer counts and sequence checks.
    pub seqs: WriterSeqs,
    /// Writers whose end marker it waits for (0: none, it is done at once).
    pub expect_writers: usize,
}

impl ReaderState {
    /// True once every expected writer's end marker is in (see [`Receiver::done`]).
    pub(crate) fn done(&mut self) -> bool {
        self.expect_writers == 0 || self.recv.done(self.expect_writers)
    }
}

/// Receives `Event::Sample`s for `readers` (samples of other readers are counted in
/// `foreign`) until `until`, `stop`, or every reader has the end markers of the writers it
/// expects. `live` counts samples for a progress line. Returns the foreign samples.
pub fn subscribe_samples(
    events: &mut EventReceiver,
    readers: &mut [ReaderState],
    until: Instant,
    stop: &AtomicBool,
    live: &AtomicU64,
) -> u64 {
    let mut by_guid: AHashMap<EndpointGuid, usize> = AHashMap::new();
    for (i, r) in readers.iter().enumerate() {
        by_guid.insert(r.guid, i);
    }
    let (mut n, mut foreign) = (0u64, 0u64);
    // Hostile input raises an error event each (a garbage connection, a junk frame): logged
    // as the node logs its own warnings, a line per kind and window, not one each.
    let mut errors = ErrorLog::new();
    loop {
        errors.flush();
        if Instant::now() >= until
            || stop.load(Ordering::Relaxed)
            || readers.iter_mut().all(ReaderState::done)
        {
            return foreign;
        }
        // Runs come whole: each payload is read in place (no event, no reference count per
        // sample), as a subscriber of high rates would take them.
        let mut next = events.recv_batch_timeout(Duration::from_millis(50));
        let mut batch = 0;
        while let Some(got) = next {
            match got {
                Received::Samples(b) => {
                    batch += b.len();
                    let to = by_guid.get(&b.reader()).map(|&i| &mut readers[i]);
                    let run = (b.first_seq(), b.len() as u64);
                    let payloads = b.iter().map(|(_, p)| p);
                    account(to, b.writer(), run, payloads, &mut n, &mut foreign);
                }
                // A run that waited for event room comes sample by sample.
                Received::Event(Event::Sample {
                    reader,
                    writer,
                    seq,
                    payload,
                }) => {
                    let to = by_guid.get(&reader).map(|&i| &mut readers[i]);
                    let one = std::iter::once(&payload[..]);
                    account(to, writer, (seq, 1), one, &mut n, &mut foreign);
                }
                Received::Event(ev) if errors.note(&ev) => {}
                Received::Event(other) => tracing::debug!(?other, "mesh event"),
            }
            batch += 1;
            if batch >= 4096 {
                break;
            }
            next = events.try_recv_batch();
        }
        live.store(n, Ordering::Relaxed);
    }
}

/// Accounts `n` consecutive samples of `writer` from sequence number `first` on (their
/// `payloads`) to the reader they are for (`None`: not one of ours, counted in `foreign`);
/// `total` counts ours.
pub(crate) fn account<'a>(
    to: Option<&mut ReaderState>,
    writer: EndpointGuid,
    (first, n): (u64, u64),
    payloads: impl Iterator<Item = &'a [u8]>,
    total: &mut u64,
    foreign: &mut u64,
) {
    match to {
        Some(r) => {
            r.seqs.record_run(writer, first, n);
            for payload in payloads {
                r.recv.on_payload(payload);
            }
            *total += n;
        }
        None => *foreign += n,
    }
}

/// Samples `meshes` dropped for a writer they had no route for, summed.
pub fn unrouted(meshes: &[&Mesh]) -> u64 {
    meshes
        .iter()
        .map(|m| m.stats().total.dropped_unrouted_samples)
        .sum()
}

/// Bytes written to links by `meshes`, summed.
pub fn bytes_out(meshes: &[&Mesh]) -> u64 {
    meshes.iter().map(|m| m.stats().total.bytes_out).sum()
}

/// Waits (at most `secs`) until every `(writer, reader)` pair is in the match table of each
/// mesh in `meshes`.
pub fn wait_matched(
    meshes: &[&Mesh],
    pairs: &[(EndpointGuid, EndpointGuid)],
    secs: u64,
) -> Result<(), crate::shoal::SetupError> {
    crate::shoal::wait_for(secs, "the topic's writer and readers to match", || {
        meshes.iter().all(|m| {
            let snap = m.topics();
            pairs.iter().all(|p| snap.matches().contains(p))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_mesh::topics::{EndpointKind, History, ReliabilityKind};

    #[test]
    fn sequence_numbers_that_do_not_only_rise_are_counted() {
        let mut s = WriterSeqs::default();
        let (a, b) = ([1; 16], [2; 16]);
        for seq in [1, 2, 3, 5, 9, 4, 9, 10] {
            s.record(a, seq);
        }
        s.record(b, 7);
        s.record(b, 8);
        let w = s.writers();
        assert_eq!(w.len(), 2);
        assert_eq!(
            w[0].1,
            WriterCount {
                samples: 8,
                first_seq: 1,
                last_seq: 10,
                gaps: 2,
                skipped: 1 + 3,
                reorders: 2,
            }
        );
        // A late joiner's first number is not a gap.
        assert_eq!((w[1].1.first_seq, w[1].1.gaps, w[1].1.samples), (7, 0, 2));
        assert_eq!(s.total().samples, 10);
    }

    #[test]
    fn a_run_counts_as_its_samples_one_by_one() {
        // (first, n) runs that continue, jump, overlap the highest so far, repeat it, lie
        // wholly below it, and straddle it.
        let runs = [
            (1, 4),
            (5, 3),
            (10, 2),
            (9, 5),
            (13, 1),
            (2, 3),
            (12, 6),
            (30, 1),
        ];
        let (mut whole, mut single) = (WriterSeqs::default(), WriterSeqs::default());
        let g = [7; 16];
        for (first, n) in runs {
            whole.record_run(g, first, n);
            for seq in first..first + n {
                single.record(g, seq);
            }
        }
        let got = whole.writers()[0].1;
        assert_eq!(got, single.writers()[0].1);
        assert!(
            got.reorders > 0 && got.gaps > 0,
            "the runs exercise both: {got:?}"
        );
        // Beyond the writer bound a run is counted whole as untracked.
        let mut s = WriterSeqs::default();
        for i in 0..MAX_WRITERS as u32 {
            let mut g = [0u8; 16];
            g[..4].copy_from_slice(&i.to_be_bytes());
            s.record(g, 1);
        }
        s.record_run([0xff; 16], 1, 9);
        assert_eq!(s.untracked, 9);
    }

    #[test]
    fn writers_beyond_the_bound_are_counted_not_tracked() {
        let mut s = WriterSeqs::default();
        for i in 0..(MAX_WRITERS as u32 + 5) {
            let mut g = [0u8; 16];
            g[..4].copy_from_slice(&i.to_be_bytes());
            s.record(g, 1);
        }
        assert_eq!(s.writers().len(), MAX_WRITERS);
        assert_eq!(s.untracked, 5);
    }

    #[test]
    fn flags_shape_the_declaration() {
        let a = TopicArgs {
            topics: vec!["sensors/imu".into()],
            type_name: "Imu".into(),
            partitions: vec!["robot/*".into(), "arm".into()],
            best_effort: true,
            keep_last: Some(7),
            durability: Some(Durability::TransientLocal),
            ..TopicArgs::default()
        };
        let w = a
            .declaration("sensors/imu")
            .validate(EndpointKind::Writer)
            .unwrap();
        assert_eq!(w.topic, "sensors/imu");
        assert_eq!(w.type_name, "Imu");
        assert_eq!(w.partitions, vec!["robot/*".to_owned(), "arm".to_owned()]);
        assert_eq!(w.qos.reliability.kind, ReliabilityKind::BestEffort);
        assert_eq!(w.qos.history, History::KeepLast { depth: 7 });
        assert_eq!(w.qos.durability, DurabilityKind::TransientLocal);
        // The command line refuses --reliable with --best-effort and --keep-last with
        // --keep-all (clap conflicts), so each pair is set one way here.
        let r = TopicArgs {
            reliable: true,
            best_effort: false,
            keep_all: true,
            keep_last: None,
            ..a
        }
        .declaration("x")
        .validate(EndpointKind::Reader)
        .unwrap();
        assert_eq!(r.qos.reliability.kind, ReliabilityKind::Reliable);
        assert_eq!(r.qos.history, History::KeepAll);
    }
}
