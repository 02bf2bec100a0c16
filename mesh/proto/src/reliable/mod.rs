//! Reliable topics (issue 13): the sans-I/O reliability core of one writer and of one
//! (remote writer, local reader) pair, speaking the four frames of `wire::reliable_frames`
//! (Heartbeat 11, AckNack 12, Repair 13, Gap 14) next to the best-effort Samples frames.
//!
//! **Owns:** the writer's history (keep-last / keep-all, byte bound, lifespan), who has
//! acknowledged what, repair scheduling under a budget, the reader's ordering, deduplication,
//! reorder buffer, loss reporting and acknowledgement timing. **Must not touch:** the clock
//! (every call takes `now`), frame routing, link selection, ttl (outputs carry `ttl = 0`; the
//! caller fills it), matching (the caller says who is matched with
//! [`ReliableWriter::set_readers`]), or backpressure credits beyond [`ReliableWriter::room`].
//!
//! # The protocol, precisely
//!
//! Sequence numbers start at 1 per writer incarnation (a restarted node's endpoints get new
//! GUIDs, so numbering never restarts under one GUID).
//!
//! **Writer.** Each matched reader has a *start* `S`, fixed when it is first matched: the next
//! sequence number to be written (volatile) or the first one held (transient-local). The
//! reader is owed every sample from `S` on; its *acked point* (initially `S`) is the highest
//! `base` it has acknowledged. A held sample counts against a keep-all history's
//! [`room`](ReliableWriter::room) while some matched reader's acked point is at or below it.
//! While some reader has not acknowledged everything written, a [`Heartbeat`] `{first held,
//! last written}` goes out every `heartbeat_period`; when all have, nothing is sent.
//!
//! **Sync.** A new reader does not know `S` (nor the writer's durability), so it starts *not
//! started*: it buffers what it receives and sends a sync request (`AckNack { base: 0 }`)
//! at once and every `sync_retry` until it is started. The writer answers a sync request (or
//! any AckNack with `base < S`) with, for a volatile writer: `Gap { 1 ..= S-1 }` when `S > 1`,
//! else a Repair of seq 1 when it was written (else nothing: live seq 1 will start it); for a
//! transient-local writer and a reader that asked for the history (the writer's node knows
//! each matched reader's durability from discovery; a volatile reader is answered as by a
//! volatile writer), with `F` its first held seq at answer time: `Gap { 1 ..= F-1 }`
//! when `F > 1`, then Repairs of the whole history `F ..= last` (the *handover*, budgeted like
//! any repair). A volatile answer `Gap { 1 ..= S-1 }` is followed by a Repair of `S` once
//! written (the reader's proof of the Gap, see *Against forgers*). A reader that already
//! acknowledged past its start (its state on its node was dropped and made again, or the
//! request is stale or forged) is answered from its acked point `A` instead: `Gap { 1 ..=
//! A-1 }`, then `A` (volatile) or `A ..= last` (transient-local): what it delivered is never
//! handed over again. A sync request also starts the reader's count over. The reader starts
//! exactly when it gets a Gap for it from 1 (next expected = `last + 1`; what it buffered
//! below is discarded as not owed) or any sample or repair of seq 1 (next expected = 1).
//! Every answer begins at 1, so a lost answer only costs a retry. Samples and repairs below
//! a reader's start are counted (`before_start`), never delivered.
//!
//! **Acknowledgement.** A started reader sends `AckNack { base: next expected, missing }`
//! where `missing` (up to 256 seqs from `base`) are the seqs it lacks that are known to exist
//! (a later seq, or a heartbeat's `last`, was seen) and have been known missing for at least
//! `nack_delay` (a reordered frame may still come; one timestamp is kept per batch of news, so
//! a seq learnt while an older batch matures waits up to twice that), within the reorder
//! window. It sends one at most every `ack_period`, and only when something changed (next
//! expected moved, a heartbeat asked) or something is still missing (a lost repair is asked
//! again). `count` rises by one per AckNack (wrapping); the writer ignores a count not above
//! the last it took from that reader (serial-number order), and holds one more than
//! [`MAX_COUNT_STEP`] above it until the next AckNack continues from it.
//!
//! **Repair and Gap.** The writer answers requested seqs it holds (not expired) with Repairs
//! (runs of consecutive seqs, at most `max_repair_samples` / `max_repair_bytes` per frame,
//! at most `repair_budget` samples per `repair_period` over all readers, round-robin); the
//! rest wait for the next period and are counted as deferred. A requested seq it no longer
//! holds (replaced, released, expired) is answered with a Gap up to its first held seq,
//! followed by a Repair of that first held seq. A seq asked for again within
//! `nack_suppression` of its resend is on its way and not resent; asked again after that, the
//! reader's suppression doubles (up to 2 s) until it acknowledges past it. When the route to
//! a reader's node moves ([`ReliableWriter::path_changed`]), what was resent may have gone
//! down the old path (closed with it queued, or stalled): the reader's next request is
//! served at once.
//!
//! **Loss.** A reader reports a loss only when the writer said so: a Gap `{a ..= b}` for it
//! makes every seq of `a ..= b` it lacks *lost* ([`ReaderEvent::Lost`] per missing run,
//! counted exactly in `lost`) and delivers the ones it had buffered; a Gap ahead of the next
//! expected seq waits (bounded) until the reader gets there. A heartbeat whose `first` is
//! above seqs the reader lacks makes it nack them, so the Gap follows. A reader's losses
//! reach the application in its sample order: a report before the samples above it.
//!
//! **Silent readers.** A keep-all writer waits for a reader only while it acknowledges: one
//! whose acked point has not moved for [`WriterConfig::ack_timeout`] since it last had
//! everything is released (counted): it no longer holds room, and what it lacks may be
//! dropped (asked for, it gets a Gap). It is waited for again once its acked point reaches
//! the slowest waited-for reader's. It is released sooner, after its node's lease
//! ([`ReliableWriter::set_reader_leases`]), unless the path toward it is stalled
//! ([`ReliableWriter::path_stalled`]: a TCP connection in retransmission back-off holds
//! what is sent on it for longer than a lease under heavy loss, while the other direction
//! still carries its node's frames): then it acknowledges nothing because nothing reaches
//! it, and releasing it lost, for good, what the stall held back.
//!
//! # Against forgers
//!
//! The routing layer takes an AckNack only from the link toward its reader's node and the
//! other three frames only from the writer's side (`shard::reliable`). What a node on that
//! path could still forge is bounded here: an AckNack base beyond what was written, a count
//! not newer or too far ahead are ignored, a sync request restarts nothing (see *Sync*);
//! a reader adopts a Gap or Heartbeat only within the writer's *plausible range* (its
//! `last` at most `max_buffered_samples` past the highest seq received in a sample or
//! repair), holds a Gap beyond it until data confirms it, and answers a Heartbeat beyond it
//! by asking for its next expected seq alone (see `reader`'s module doc).
//!
//! # Bounds
//!
//! Per writer: the history (`depth` / `max_samples`, `max_bytes`), one pending request set
//! (256 bits) and one handover range per reader, the repair budget. Per reader: the reorder
//! window (`max_buffered_samples` wide, `max_buffered_bytes`), [`MAX_PENDING_GAPS`] future
//! gaps, [`MAX_EVENTS`] undrained events. Hitting any of them is counted.

mod count;
mod history;
mod reader;
mod writer;

#[cfg(test)]
mod tests;

pub use crate::wire::{AckNack, Gap, Heartbeat, Repair, SeqSet};
pub use count::MAX_COUNT_STEP;
pub use reader::ReliableReader;
pub use writer::ReliableWriter;

use std::time::Duration;

/// The highest sequence number a reader takes from a sample, a Gap or a Heartbeat (2^63 - 1:
/// a writer of a billion samples a second gets there in 292 years). A sample beyond it is
/// forged or broken: ignored, counted (`ReaderStats::out_of_range`); a Gap or Heartbeat
/// beyond it is never plausible (held). So the reader's own arithmetic (next seq, window,
/// requests) never comes near `u64::MAX`.
pub const MAX_SEQ: u64 = u64::MAX >> 1;

/// Gaps ahead of a reader's next expected seq it remembers; more are dropped (counted) and
/// asked for again by its nacks.
pub const MAX_PENDING_GAPS: usize = 16;
/// Undrained [`ReaderEvent`]s a reader keeps; more are dropped (counted; `lost` stays exact).
pub const MAX_EVENTS: usize = 1024;

/// How a writer's history keeps samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryKind {
    /// The last `depth` samples (≥ 1); writing never blocks, the oldest is replaced (counted).
    KeepLast {
        /// Samples kept.
        depth: u32,
    },
    /// Every sample some matched reader has not acknowledged, up to `max_samples` /
    /// `max_bytes`; beyond, the write must wait ([`ReliableWriter::room`] = 0).
    KeepAll,
}

/// A reliable writer's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterConfig {
    /// Keep-last or keep-all.
    pub history: HistoryKind,
    /// Keep-all ceiling in samples (resource limits), ≥ 1.
    pub max_samples: u32,
    /// Ceiling on the payload bytes of the history (both kinds).
    pub max_bytes: usize,
    /// Samples older than this are dropped from the history: neither repaired nor handed
    /// over (readers asking get a Gap).
    pub lifespan: Option<Duration>,
    /// Late-joining readers get the history first.
    pub transient_local: bool,
    /// Heartbeat interval while some reader has not acknowledged everything.
    pub heartbeat_period: Duration,
    /// Samples resent per `repair_period`, over all readers.
    pub repair_budget: u32,
    /// The budget's period.
    pub repair_period: Duration,
    /// Samples per Repair frame, at most (≥ 1).
    pub max_repair_samples: u16,
    /// Payload bytes per Repair frame, at most (a larger single sample still goes alone).
    pub max_repair_bytes: usize,
    /// A seq resent to a reader is not resent to it again within this time, whatever it asks
    /// (its repair is still on the way over a slow link).
    pub nack_suppression: Duration,
    /// Keep-all: how long the writer waits for a reader that owes an acknowledgement (its
    /// acked point has not moved since it last had everything) before it stops waiting for
    /// it (counted in [`WriterStats::readers_released`]): one silent or lying reader cannot
    /// hold the history full. The reader is still answered; it is waited for again once it
    /// holds what the slowest reader still waited for holds. `None`: wait for ever (until
    /// the reader is unmatched, e.g. its lease expires).
    pub ack_timeout: Option<Duration>,
}

impl Default for WriterConfig {
    /// Volatile keep-all of 1024 samples / 16 MiB, heartbeat 100 ms, 1024 repairs per 100 ms,
    /// Repair frames of 64 samples / 64 KiB, silent readers released after 10 s.
    fn default() -> Self {
        WriterConfig {
            history: HistoryKind::KeepAll,
            max_samples: 1024,
            max_bytes: 16 << 20,
            lifespan: None,
            transient_local: false,
            heartbeat_period: Duration::from_millis(100),
            repair_budget: 1024,
            repair_period: Duration::from_millis(100),
            max_repair_samples: 64,
            max_repair_bytes: 64 << 10,
            nack_suppression: Duration::from_millis(100),
            ack_timeout: Some(Duration::from_secs(60)),
        }
    }
}

/// A reliable reader's settings (per remote writer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaderConfig {
    /// Width of the out-of-order window in samples: a sample further ahead of the next
    /// expected one is dropped (counted) and asked for again later.
    pub max_buffered_samples: u32,
    /// Payload bytes the out-of-order buffer holds at most.
    pub max_buffered_bytes: usize,
    /// At most one AckNack per period...
    pub ack_period: Duration,
    /// ... unless delivery moved this many samples past the last one acknowledged: then at
    /// once (a keep-all writer's window is freed while the reader keeps up, instead of once
    /// per period; at most one AckNack per `ack_every` samples delivered).
    pub ack_every: u32,
    /// How long a seq must be known missing before it is nacked.
    pub nack_delay: Duration,
    /// Interval of the sync request while not started.
    pub sync_retry: Duration,
}

impl Default for ReaderConfig {
    /// 1024 samples / 4 MiB of reorder buffer, acks every 20 ms, nack after 5 ms, sync every
    /// 100 ms.
    fn default() -> Self {
        ReaderConfig {
            max_buffered_samples: 1024,
            max_buffered_bytes: 4 << 20,
            ack_period: Duration::from_millis(20),
            ack_every: 4096,
            nack_delay: Duration::from_millis(5),
            sync_retry: Duration::from_millis(100),
        }
    }
}

/// Why [`ReliableWriter::on_written`] refused a sample (nothing changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriterError {
    /// The sample is not the next sequence number.
    #[error("sample {got} written, expected {expected}")]
    OutOfOrder {
        /// [`ReliableWriter::next_seq`].
        expected: u64,
        /// The seq given.
        got: u64,
    },
    /// A run's body is not `count × (len u32 | payload)` (what follows the bad sample is not
    /// held).
    #[error("a run of samples whose body does not hold its count")]
    BadRun,
    /// Keep-all history without room: wait for acknowledgements.
    #[error("keep-all history full")]
    HistoryFull,
    /// A keep-all sample larger than the whole history's byte ceiling never fits.
    #[error("sample of {len} bytes exceeds the history's {max} bytes")]
    SampleTooLarge {
        /// The payload's length.
        len: usize,
        /// `max_bytes`.
        max: usize,
    },
}

/// What a [`ReliableWriter`] wants sent (`ttl = 0`: the caller sets it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriterOut {
    /// Downstream along the writer's tree, to every reader node.
    Heartbeat(Heartbeat),
    /// To the node of `reader`.
    Repair(Repair),
    /// To the node of `reader`.
    Gap(Gap),
}

/// What a [`ReliableReader`] reports besides deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReaderEvent {
    /// The samples `first ..= last` that the reader lacked will never come (the writer said
    /// so with a Gap); delivery went on after them.
    Lost {
        /// First lost seq.
        first: u64,
        /// Last lost seq.
        last: u64,
    },
}

/// A [`ReliableWriter`]'s counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Samples accepted by `on_written`.
    pub written: u64,
    /// Keep-last: samples pushed out of the history by newer ones (depth or bytes).
    pub replaced: u64,
    /// Keep-all: samples every reader had acknowledged, dropped to make room.
    pub released: u64,
    /// Samples dropped from the history because their lifespan ended.
    pub expired: u64,
    /// Samples resent in Repairs.
    pub repaired: u64,
    /// Repair frames sent.
    pub repair_frames: u64,
    /// Samples waiting for a repair when a period's budget ran out (once per period).
    pub repair_deferred: u64,
    /// Requests for samples resent less than `nack_suppression` before, not resent again.
    pub repairs_suppressed: u64,
    /// Gap frames sent.
    pub gaps_sent: u64,
    /// Heartbeats sent.
    pub heartbeats: u64,
    /// Sync requests answered.
    pub syncs_answered: u64,
    /// AckNacks from a reader not matched now, or for another writer.
    pub acks_ignored_unknown_reader: u64,
    /// AckNacks whose base is beyond what was written.
    pub acks_ignored_future: u64,
    /// AckNacks whose count is not above the last seen from that reader.
    pub acks_ignored_stale: u64,
    /// AckNacks whose count jumped more than [`MAX_COUNT_STEP`] past the last one
    /// taken from that reader, held until confirmed (a forged `u32::MAX`).
    pub acks_ignored_far: u64,
    /// Keep-all: readers no longer waited for because they did not acknowledge within
    /// [`WriterConfig::ack_timeout`].
    pub readers_released: u64,
    /// Keep-all writes refused for lack of room (or a sample over `max_bytes`).
    pub full_refusals: u64,
    /// Keep-all samples held beyond the history's bounds because they were already sent
    /// ([`ReliableWriter::on_written_run`]: the handle overran its credit, e.g. while the
    /// first reliable reader matched).
    pub held_over_limit: u64,
}

/// A [`ReliableReader`]'s counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReaderStats {
    /// Samples handed to `deliver`.
    pub delivered: u64,
    /// Samples received again (already delivered or already buffered).
    pub duplicates: u64,
    /// Samples dropped for lack of reorder buffer (asked for again later).
    pub buffered_dropped: u64,
    /// Samples reported lost (the writer's Gaps), exactly.
    pub lost: u64,
    /// Lost events dropped because [`MAX_EVENTS`] were undrained.
    pub events_dropped: u64,
    /// Samples below the reader's start, discarded (not owed).
    pub before_start: u64,
    /// AckNacks sent (sync requests included).
    pub acknacks_sent: u64,
    /// Sync requests sent.
    pub sync_requests: u64,
    /// Heartbeats going backwards (or for another writer), ignored.
    pub heartbeats_ignored: u64,
    /// Heartbeats naming samples beyond the writer's plausible range (see
    /// [`ReliableReader::on_heartbeat`]): held, not adopted.
    pub heartbeats_held: u64,
    /// Gaps reaching beyond the writer's plausible range (see [`ReliableReader::on_gap`]):
    /// held until a sample of the writer's confirms them (the writer sends one after such a
    /// Gap), or dropped.
    pub gaps_held: u64,
    /// Gaps ignored: stale (all below next expected), before start not from 1, or more than
    /// [`MAX_PENDING_GAPS`] ahead.
    pub gaps_ignored: u64,
    /// Repairs and Gaps for another reader (or writer), ignored.
    pub foreign_ignored: u64,
    /// Samples numbered above [`MAX_SEQ`], ignored.
    pub out_of_range: u64,
}
