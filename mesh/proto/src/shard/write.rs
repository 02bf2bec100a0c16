//! What a link's writer puts on the socket: the queue's frames gathered into the iovecs of one
//! vectored write (runs of frames up to 2 KiB copied into one arena slice, larger payloads as
//! their own `Bytes`, uncopied), or, secured, sealed into as few records as fit in the link's
//! reusable buffer. Sealing is the commit, so a frame the queue policy dropped never consumes
//! a nonce.
//!
//! **Owns:** batching, sealing, and the accounting of what a write holds. **Must not touch:**
//! the socket (the driver writes what it is given and reports back).

use super::action::ShardAction;
use super::ShardCore;
use crate::cmd::Out;
use crate::crypto::{RecordSealer, SealError};
use crate::stats::{add, inc};
use crate::wire::DATA_HEADER_LEN;
use crate::LinkId;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Frames (header + payload) at most this long are copied into the batch's arena; longer
/// payloads go to the socket as their own iovec, uncopied. The kernel walks iovecs one by
/// one, and for small frames that walk costs more than the copy: two iovecs per 64-byte
/// message made `_copy_from_iter` the largest cost of a publishing shard. At 1024 a 1 KiB
/// message (1082 bytes with its header) still went as two iovecs; copying frames up to 2 KiB
/// made 1 KiB throughput 20-25 % higher (`bench/notes/throughput.md`).
const COPY_MAX: usize = 2048;
/// Most bytes gathered into one write (the link budget bounds what is queued anyway).
const BATCH_MAX: usize = 1 << 20;
/// Secured writer: stop adding frames to a batch once this much plaintext is in it; the batch
/// is cut into records of [`ShardConfig::record_bytes`](super::ShardConfig::record_bytes).
pub(super) const SEAL_BATCH: usize = 256 * 1024;
/// The default record size: a record is cut, between frames, once it holds this much
/// plaintext. 16, 32, 64 and 256 KiB measured alike within the noise (BENCHMARKS.md, "Record
/// size"); 64 KiB bounds what a receiver buffers before it can open a record to a quarter of
/// a batch at no measured cost (a record's fixed cost is ~0.2-0.5 µs).
pub const DEFAULT_RECORD_BYTES: usize = 64 * 1024;
/// Secured writer: a reusable buffer that grew past this for one huge frame is released.
const SEAL_BUF_KEEP: usize = 1024 * 1024;

/// What the writer of a link does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStep {
    /// Write the buffers filled in, then report [`ShardCore::on_written`].
    Write,
    /// Nothing to write: wait for the link budget's `wake` (unless
    /// [`ShardCore::write_pending`]), taking the listener before that check and with no
    /// await between this step and the listen. The core notifies an idle writer once, when
    /// something is next queued (or the link closes or is killed), not per queued frame.
    Idle,
    /// The link closed politely and its queue is flushed: shut the connection down, then
    /// report [`ShardCore::on_link_lost`].
    Shutdown,
    /// The link is gone: the writer stops.
    Gone,
}

/// A link's write state.
#[derive(Debug)]
pub(super) struct Tx {
    /// Secured mesh: the link's record sealer.
    sealer: Option<RecordSealer>,
    /// Secured: the batch's records, sealed in place; its allocation is reclaimed for the next
    /// batch once the write is done (reserve on a unique buffer), so no allocation per record.
    sealed: BytesMut,
}

impl Tx {
    pub(super) fn plain() -> Tx {
        Tx {
            sealer: None,
            sealed: BytesMut::new(),
        }
    }

    pub(super) fn sealed(sealer: RecordSealer) -> Tx {
        Tx {
            sealer: Some(sealer),
            sealed: BytesMut::new(),
        }
    }
}

/// What a batch taken off a link's queue holds: the budget bytes to release once written, and
/// the Data frames to count as lost if the write fails.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Taken {
    pub(super) held: usize,
    pub(super) frames: u64,
}

impl Taken {
    pub(super) fn add(&mut self, o: &Out) {
        self.held += o.held();
        self.frames += o.frames();
    }
}

/// What the driver read of a link's acknowledgements (the kernel's `TCP_INFO`):
/// [`ShardCore::on_ack_sample`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckSample {
    /// Segments sent and not acknowledged yet.
    pub unacked: u32,
    /// Retransmission timeouts in a row without an acknowledgement of new data.
    pub timeouts: u8,
    /// Time since the last acknowledgement arrived.
    pub since_ack: Duration,
    /// Bytes the peer has acknowledged since the connection opened.
    pub bytes_acked: u64,
}

impl ShardCore {
    /// Fills `bufs` (empty) with the next write of `link`'s queue.
    pub fn next_write(
        &mut self,
        link: LinkId,
        bufs: &mut Vec<Bytes>,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) -> WriteStep {
        let max_iovecs = self.cfg.max_iovecs;
        let held_back = !self.handover.holding.is_empty() && self.held_back(link);
        let Some(l) = self.links.get_mut(link) else {
            return WriteStep::Gone;
        };
        if held_back && !l.budget.kill_requested() {
            // Until the loser whose queue this link took has written what it holds.
            l.writer_idle = true;
            return WriteStep::Idle;
        }
        if l.budget.kill_requested() {
            self.slow_peer(link, now, out);
            return WriteStep::Gone;
        }
        l.pull();
        if l.queue.is_empty() {
            return if l.closing {
                WriteStep::Shutdown
            } else {
                // Until something is queued (`Served::wake_writer`).
                l.writer_idle = true;
                WriteStep::Idle
            };
        }
        l.writer_idle = false;
        let record_bytes = self.cfg.record_bytes;
        let mut taken = Taken::default();
        let tx = &mut l.tx;
        if let Some(sealer) = tx.sealer.as_mut() {
            tx.sealed.reserve(SEAL_BATCH + 4096);
            if tx.sealed.capacity() > SEAL_BUF_KEEP {
                tx.sealed = BytesMut::with_capacity(SEAL_BATCH);
            }
            let before = sealer.counter();
            let sealed = seal_batch(
                &mut l.queue,
                sealer,
                &mut tx.sealed,
                &mut taken,
                record_bytes,
            );
            add(&self.counters.records_sealed, sealer.counter() - before);
            l.in_flight = taken;
            if let Err(e) = sealed {
                self.record_failure(link, e.to_string(), now, out);
                return WriteStep::Gone;
            }
            bufs.push(tx.sealed.split().freeze());
        } else {
            l.in_flight = gather(&mut l.queue, bufs, max_iovecs);
        }
        WriteStep::Write
    }

    /// The write from [`next_write`](Self::next_write) is on the socket (`bytes` long).
    pub fn on_written(&mut self, link: LinkId, bytes: usize, now: Instant) {
        if let Some(l) = self.links.get_mut(link) {
            let taken = std::mem::take(&mut l.in_flight);
            l.ledger.on_written(bytes, taken.frames);
            l.budget.written(bytes, now);
            if l.budget.release(taken.held) {
                l.budget.slow_ended(now);
            }
            add(&self.counters.bytes_out, bytes as u64);
            if !self.handover.holding.is_empty() {
                self.release_held(link);
            }
        }
    }

    /// The driver read the link's connection before its first write here: the kernel
    /// counted `bytes_acked` acknowledged (`tcpi_bytes_acked`, the opening as one) and held
    /// `send_queue` bytes (the handshake's) unacknowledged. From then on the link keeps a
    /// ledger of its writes until its peer acknowledges them, and what is left when it
    /// closes is counted (`unacked_link_closed`; the ledger is `shard/unacked.rs`).
    pub fn on_link_start(&mut self, link: LinkId, bytes_acked: u64, send_queue: usize) {
        if let Some(l) = self.links.get_mut(link) {
            l.ledger.start(bytes_acked, send_queue as u64);
        }
    }

    /// The driver read how much of the link's connection its peer acknowledged
    /// (`tcpi_bytes_acked`) at `now`: the writer's look (every
    /// [`SEND_QUEUE_SAMPLE`](crate::budget::SEND_QUEUE_SAMPLE) at most) or the last one when
    /// the connection failed; the timer's comes with the rest of the path's state through
    /// [`on_ack_sample`](Self::on_ack_sample). Settles the ledger of writes, and a count
    /// that grew since an earlier look means the peer is taking what it is sent: a silence
    /// from it is a slow path, not a dead one ([`Link::on_delivered`]).
    ///
    /// [`Link::on_delivered`]: crate::link::Link::on_delivered
    pub fn on_bytes_acked(&mut self, link: LinkId, bytes_acked: u64, now: Instant) {
        if let Some(l) = self.links.get_mut(link) {
            // Any growth counts: the far end of a stream (a subscriber whose publisher's
            // frames wait out a lossy path's backoff) sends only heartbeats, and the lossy
            // link that it closed lost the publisher's backlog as surely as one the
            // publisher closed. A peer trickling a frame at us acknowledges our heartbeats
            // too: the link keeps it from the grace (`Link::on_delivered`).
            if l.ledger.on_acked(bytes_acked) {
                l.state.on_delivered(now);
            }
        }
    }

    /// The driver looked at the link's acknowledgements (the kernel's `TCP_INFO`, when the
    /// link's timer fires, before the liveness check): a link whose peer stopped
    /// acknowledging new data is counted once per episode (`links_unanswered`,
    /// [`LinkBudget::ack_sample`]) and logged, and the reliable writers whose readers are
    /// behind it wait for them past their lease (`ReliableWriter::path_stalled`); one whose
    /// peer acknowledged new data since the last look is taking what it is sent, and lives
    /// on through a silence ([`Link::on_delivered`]).
    ///
    /// [`LinkBudget::ack_sample`]: crate::budget::LinkBudget::ack_sample
    /// [`Link::on_delivered`]: crate::link::Link::on_delivered
    pub fn on_ack_sample(&mut self, link: LinkId, ack: AckSample, now: Instant) {
        self.on_bytes_acked(link, ack.bytes_acked, now);
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        let AckSample {
            unacked,
            timeouts,
            since_ack,
            bytes_acked,
        } = ack;
        if unacked == 0 {
            l.drained_at = Some(now);
        }
        // The kernel's time of the last acknowledgement moves with every segment the peer
        // sends (each carries its cumulative acknowledgement, new or not), so a peer that
        // keeps talking while what it is sent waits out a back-off looked answered: the
        // lossy lab's 24 s one-way stalls were never counted. Where the kernel counts
        // acknowledged bytes, the time since that count last grew (or nothing was in
        // flight) says it.
        let since_ack = if bytes_acked > 0 {
            let delivered = l.state.last_delivered();
            let progress = l.drained_at.map_or(delivered, |d| d.max(delivered));
            since_ack.max(now.saturating_duration_since(progress))
        } else {
            since_ack
        };
        if l.budget.ack_sample(unacked, timeouts, since_ack) {
            inc(&self.counters.links_unanswered);
            tracing::info!(
                shard = self.idx,
                peer = %l.peer,
                ?since_ack,
                timeouts,
                "link unanswered: its peer acknowledges nothing"
            );
        }
    }

    /// Whether an idle writer has work after all (checked after it took its wake listener).
    pub fn write_pending(&self, link: LinkId) -> bool {
        match self.links.get(link) {
            Some(l) if l.budget.kill_requested() => true,
            Some(_) if !self.handover.holding.is_empty() && self.held_back(link) => false,
            Some(l) => !l.queue.is_empty() || l.closing,
            None => true,
        }
    }
}

/// Moves queued frames into `bufs` for one vectored write of at most `max_iovecs` buffers:
/// runs of small frames as one contiguous arena slice, large payloads as their own `Bytes`.
/// Returns what the taken frames hold.
pub(super) fn gather(queue: &mut VecDeque<Out>, bufs: &mut Vec<Bytes>, max_iovecs: usize) -> Taken {
    let mut taken = Taken::default();
    let mut total = 0;
    let mut arena = BytesMut::new();
    // Room for two iovecs (a flushed arena run, then a large payload) is kept at all times.
    while bufs.len() + 3 <= max_iovecs && total < BATCH_MAX {
        let Some(out) = queue.pop_front() else { break };
        taken.add(&out);
        let large = match out {
            Out::Data(h, p) => {
                let held = DATA_HEADER_LEN + p.len();
                total += held;
                if held <= COPY_MAX {
                    reserve_arena(&mut arena, queue.len(), held);
                    arena.extend_from_slice(&h.0);
                    arena.extend_from_slice(&p);
                    continue;
                }
                reserve_arena(&mut arena, queue.len(), DATA_HEADER_LEN);
                arena.extend_from_slice(&h.0);
                p
            }
            Out::Samples(h, b, _) => {
                let held = h.0.len() + b.len();
                total += held;
                if held <= COPY_MAX {
                    reserve_arena(&mut arena, queue.len(), held);
                    arena.extend_from_slice(&h.0);
                    arena.extend_from_slice(&b);
                    continue;
                }
                reserve_arena(&mut arena, queue.len(), h.0.len());
                arena.extend_from_slice(&h.0);
                b
            }
            Out::Raw(b, ..) => {
                total += b.len();
                if b.len() <= COPY_MAX {
                    reserve_arena(&mut arena, queue.len(), b.len());
                    arena.extend_from_slice(&b);
                    continue;
                }
                b
            }
        };
        if !arena.is_empty() {
            bufs.push(arena.split().freeze());
        }
        bufs.push(large);
    }
    if !arena.is_empty() {
        bufs.push(arena.split().freeze());
    }
    taken
}

/// Makes room for `n` more bytes in the arena, sized once per batch for what is queued
/// (assuming the rest is like this frame, and at least a small frame each) rather than grown
/// frame by frame: growing copies what the arena already holds.
fn reserve_arena(arena: &mut BytesMut, queued: usize, n: usize) {
    if arena.capacity() - arena.len() < n {
        let want = (queued + 1)
            .saturating_mul(n.max(DATA_HEADER_LEN + 128))
            .min(BATCH_MAX);
        arena.reserve(want.max(n));
    }
}

/// Seals frames from the front of `queue` into records appended to `out` until the queue is
/// empty or the batch holds [`SEAL_BATCH`] plaintext bytes; what they held is added to `taken`
/// (also when sealing fails, so the caller can count them as lost).
/// A record is cut between frames, before one that would take it past `record_bytes` of
/// plaintext or does not fit it at all; a publisher's run of frames (`Out::Raw`) is cut
/// between its frames too. A frame larger than `record_bytes` is a record of its own, and one
/// larger than a whole record (only possible if the peer's limit is below ours) is split
/// across records.
pub(super) fn seal_batch(
    queue: &mut VecDeque<Out>,
    sealer: &mut RecordSealer,
    out: &mut BytesMut,
    taken: &mut Taken,
    record_bytes: usize,
) -> Result<(), SealError> {
    let mut batch = 0usize;
    let mut rec = sealer.begin(out);
    while batch < SEAL_BATCH {
        let Some(o) = queue.pop_front() else { break };
        taken.add(&o);
        let (mut head, mut rest, run): (&[u8], &[u8], bool) = match &o {
            Out::Data(h, p) => (&h.0[..], &p[..], false),
            Out::Samples(h, b, _) => (&h.0[..], &b[..], false),
            Out::Raw(b, ..) => (&[], &b[..], true),
        };
        batch += head.len() + rest.len();
        loop {
            // What goes into the record next: one frame, or as many whole frames of a run as
            // the record size leaves room for (at least one).
            let unit = if run {
                let room = record_bytes.saturating_sub(rec.plaintext_len());
                match whole_frames_within(rest, room) {
                    0 => frame_len(rest),
                    n => n,
                }
            } else {
                rest.len()
            };
            let len = head.len() + unit;
            if len == 0 {
                break;
            }
            let used = rec.plaintext_len();
            if used > 0 && (len > rec.remaining() || used + len > record_bytes) {
                rec.seal()?;
                rec = sealer.begin(out);
                continue;
            }
            for mut part in [head, &rest[..unit]] {
                while !part.is_empty() {
                    if rec.remaining() == 0 {
                        rec.seal()?;
                        rec = sealer.begin(out);
                    }
                    part = &part[rec.push_some(part)..];
                }
            }
            head = &[];
            rest = &rest[unit..];
            if rest.is_empty() {
                break;
            }
        }
    }
    if rec.plaintext_len() > 0 {
        rec.seal()?;
    }
    // An empty builder removes its header when dropped.
    Ok(())
}

/// Bytes of the first frame of a run (all of it, if cut short: our own runs never are).
fn frame_len(run: &[u8]) -> usize {
    match run.first_chunk::<4>() {
        Some(l) => (4 + u32::from_be_bytes(*l) as usize).min(run.len()),
        None => run.len(),
    }
}

/// Bytes of the longest prefix of whole frames of `run` that fits in `room`.
fn whole_frames_within(run: &[u8], room: usize) -> usize {
    if run.len() <= room {
        return run.len();
    }
    let mut at = 0;
    while let Some(l) = run[at..].first_chunk::<4>() {
        let next = at + 4 + u32::from_be_bytes(*l) as usize;
        if next > room {
            break;
        }
        at = next;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{RecordOpener, RecordReader};
    use crate::wire::DataHeader;
    use crate::{MsgId, PeerId};

    /// A batch sealed for a receiver with a small limit: records are cut between frames when
    /// the next one does not fit, a frame larger than a record spans several, every record
    /// stays within the limit, and the receiver gets back exactly the frames in order.
    #[test]
    fn seal_batch_packs_and_splits_frames_within_the_limit() {
        let key = [9u8; 32];
        let limit = 200; // the receiver's maxMessageBytes
        let mut sealer = RecordSealer::new(&key, limit);
        let max_pt = sealer.max_plaintext();
        let mut queue = VecDeque::new();
        let mut expect = Vec::new();
        for (i, len) in [10usize, 70, 90, 400, 5].into_iter().enumerate() {
            let payload = Bytes::from(vec![i as u8 + 1; len]);
            let h = DataHeader::new(
                &PeerId([1; 16]),
                &PeerId::ZERO,
                &MsgId([i as u8; 16]),
                3,
                len,
            )
            .unwrap();
            expect.extend_from_slice(&h.0);
            expect.extend_from_slice(&payload);
            queue.push_back(Out::Data(h, payload));
        }
        queue.push_back(Out::Raw(Bytes::from_static(&[0, 0, 0, 1, 3]), 5, 0));
        expect.extend_from_slice(&[0, 0, 0, 1, 3]);
        let mut out = BytesMut::new();
        let mut taken = Taken::default();
        seal_batch(
            &mut queue,
            &mut sealer,
            &mut out,
            &mut taken,
            DEFAULT_RECORD_BYTES,
        )
        .unwrap();
        assert!(queue.is_empty());
        assert_eq!(taken.held, expect.len());
        assert_eq!(taken.frames, 5, "the Data frames, not the control frame");
        // Walk the records: each within the limit.
        let mut at = 0;
        let mut records = 0;
        while at < out.len() {
            let clen = u32::from_be_bytes(out[at..at + 4].try_into().unwrap()) as usize;
            assert!(
                clen - 16 <= max_pt,
                "record plaintext {} > {max_pt}",
                clen - 16
            );
            at += 4 + clen;
            records += 1;
        }
        assert_eq!(at, out.len());
        assert_eq!(sealer.counter(), records);
        assert!(records >= 3, "the 400-byte frame needs several records");
        let mut rr = RecordReader::new(RecordOpener::new(&key, limit), &out);
        rr.decrypt().unwrap();
        assert_eq!(rr.plaintext(), &expect[..]);
        assert_eq!(rr.records(), records);
    }

    /// Plaintext lengths of the records in `out`.
    fn record_lengths(out: &[u8]) -> Vec<usize> {
        let mut at = 0;
        let mut lens = Vec::new();
        while at < out.len() {
            let clen = u32::from_be_bytes(out[at..at + 4].try_into().unwrap()) as usize;
            lens.push(clen - 16);
            at += 4 + clen;
        }
        lens
    }

    /// Records are cut between frames at the record size: small frames fill records up to it,
    /// a frame larger than it is a record of its own (never split below the receiver's limit).
    #[test]
    fn records_are_cut_between_frames_at_the_record_size() {
        let key = [9u8; 32];
        let frame = |len: usize, i: u8| {
            let h =
                DataHeader::new(&PeerId([1; 16]), &PeerId::ZERO, &MsgId([i; 16]), 3, len).unwrap();
            Out::Data(h, Bytes::from(vec![i; len]))
        };
        let seal = |frames: Vec<Out>, record_bytes: usize| {
            let mut sealer = RecordSealer::new(&key, 1 << 24);
            let mut queue: VecDeque<Out> = frames.into();
            let (mut out, mut taken) = (BytesMut::new(), Taken::default());
            seal_batch(&mut queue, &mut sealer, &mut out, &mut taken, record_bytes).unwrap();
            assert!(queue.is_empty());
            let mut rr = RecordReader::new(RecordOpener::new(&key, 1 << 24), &out);
            rr.decrypt().unwrap();
            assert_eq!(rr.plaintext().len(), taken.held, "every byte read back");
            record_lengths(&out)
        };
        // 100 frames of 122 bytes, records of at most 1000: 8 frames (976 bytes) per record.
        let small: Vec<Out> = (0..100).map(|i| frame(64, i as u8)).collect();
        let lens = seal(small, 1000);
        assert_eq!(lens.len(), 13);
        assert!(lens[..12].iter().all(|&l| l == 8 * 122), "{lens:?}");
        assert_eq!(lens[12], 4 * 122);
        // Frames above the record size: one per record, whole.
        let big: Vec<Out> = (0..3).map(|i| frame(5000, i)).collect();
        assert_eq!(seal(big, 1000), vec![5058; 3]);
        // A publisher's run of 100 frames is cut between its frames the same way.
        let run = || {
            let mut b = BytesMut::new();
            for i in 0..100u8 {
                if let Out::Data(h, p) = frame(64, i) {
                    b.extend_from_slice(&h.0);
                    b.extend_from_slice(&p);
                }
            }
            Out::Raw(b.freeze(), 100 * 122, 100)
        };
        let lens = seal(vec![frame(64, 0), run()], 1000);
        assert_eq!(lens.len(), 13);
        assert!(lens[..12].iter().all(|&l| l == 8 * 122), "{lens:?}");
        assert_eq!(lens[12], 5 * 122);
        // A run within the record size is one record with what came before it.
        assert_eq!(seal(vec![frame(64, 0), run()], 1 << 20), vec![101 * 122]);
        // The old behaviour, one record per batch, is a record size of a batch.
        let small: Vec<Out> = (0..100).map(|i| frame(64, i as u8)).collect();
        assert_eq!(seal(small, SEAL_BATCH), vec![100 * 122]);
    }
}
