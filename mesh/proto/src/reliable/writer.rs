//! The reliable writer: one per local reliable writer, on its node (protocol in the module
//! doc of `reliable`).
//!
//! **Owns:** the history policy, each matched reader's start / acked point / requests, sync
//! answers, heartbeat timing, the repair budget. **Must not touch:** the fresh samples' path
//! (the caller sends them as Samples frames along the tree and tells this machine with
//! [`ReliableWriter::on_written`]), routing, the clock.
//!
//! Length: the writer's inputs (writes, acknowledgements, timers) and its outputs (sync
//! answers, repairs, gaps, heartbeats) all read and move the same per-reader state.

use super::count::{count_verdict, Count};
use super::history::History;
use super::{HistoryKind, WriterConfig, WriterError, WriterOut, WriterStats};
use crate::wire::{AckNack, Gap, Heartbeat, Repair, SeqSet};
use bytes::Bytes;
use std::time::{Duration, Instant};

/// What the writer knows of one matched reader.
#[derive(Debug)]
struct ReaderState {
    guid: [u8; 16],
    /// It gets the history (a transient-local writer, a reader that asked for it).
    durable: bool,
    /// The first seq the reader is owed.
    start: u64,
    /// The reader holds every seq below it (its highest acknowledged `base`, at least `start`).
    acked: u64,
    /// The count of the last AckNack taken (`None`: the next one is taken whatever its
    /// count, e.g. after a sync request: the reader's state may have started over).
    last_count: Option<u32>,
    /// A count more than [`MAX_COUNT_STEP`](super::MAX_COUNT_STEP) ahead of `last_count`,
    /// not taken: an AckNack continuing from it confirms the jump (see `count_verdict`).
    far_count: Option<u32>,
    /// Since when the reader owes an acknowledgement that has not come: its acked point
    /// last moved, or it was last caught up when a sample was written (see
    /// [`WriterConfig::ack_timeout`]).
    stalled_since: Instant,
    /// Keep-all: not waited for any more (silent past `ack_timeout`); waited for again once
    /// it catches up with the slowest reader still waited for.
    released: bool,
    /// Its node's lease (`set_reader_leases`): released after that much silence if it is
    /// shorter than `ack_timeout`.
    lease: Option<Duration>,
    /// When the path toward its node was last seen holding what was sent unacknowledged
    /// ([`ReliableWriter::path_stalled`]), or its match: its lease counts from then too.
    path_stalled_at: Instant,
    /// A sync request waits for its answer.
    sync_pending: bool,
    /// The transient-local handover still to send, `lo ..= hi`.
    range: Option<(u64, u64)>,
    /// The latest requests: offsets from `nack_base`.
    nack_base: u64,
    nacks: SeqSet,
    /// Seqs up to this were resent at `resent_at`: asked for again before
    /// `nack_suppression` passed, they are still on their way (see `on_acknack`).
    resent_upto: u64,
    resent_at: Option<Instant>,
    /// The suppression for this reader now: `nack_suppression`, doubled (up to
    /// [`MAX_SUPPRESSION`]) each time it asks again for what was resent, back to the
    /// configured value once it acknowledges past it (a link slower than the suppression
    /// gets resends at its own pace).
    suppression: Option<Duration>,
}

/// The longest a reader's repeated request waits for its resend to arrive.
const MAX_SUPPRESSION: Duration = Duration::from_secs(2);

impl ReaderState {
    fn has_work(&self) -> bool {
        self.sync_pending || self.range.is_some() || !self.nacks.is_empty()
    }

    /// Samples this reader waits for (handover and requests).
    fn pending(&self) -> u64 {
        self.range.map_or(0, |(lo, hi)| hi + 1 - lo) + u64::from(self.nacks.len())
    }

    /// When a keep-all writer stops waiting for this reader, which owes an acknowledgement:
    /// `ack_timeout` after its acked point last moved, or its node's lease after that (and
    /// after the path toward it was last seen stalled) if that comes first.
    fn release_at(&self, ack_timeout: Duration) -> Instant {
        let stuck = self.stalled_since + ack_timeout;
        let silent_since = self.stalled_since.max(self.path_stalled_at);
        self.lease.map_or(stuck, |l| stuck.min(silent_since + l))
    }
}

/// The reliability state of one local writer.
#[derive(Debug)]
pub struct ReliableWriter {
    guid: [u8; 16],
    cfg: WriterConfig,
    history: History,
    /// Sorted by GUID.
    readers: Vec<ReaderState>,
    /// Round-robin position for repairs.
    rr: usize,
    budget_left: u32,
    period_start: Option<Instant>,
    deferred_noted: bool,
    next_heartbeat: Option<Instant>,
    stats: WriterStats,
}

impl ReliableWriter {
    /// A writer numbering its samples from 1. `max_samples`, a keep-last `depth` and
    /// `max_repair_samples` below 1 are taken as 1.
    pub fn new(writer: [u8; 16], mut cfg: WriterConfig) -> Self {
        cfg.max_samples = cfg.max_samples.max(1);
        cfg.max_repair_samples = cfg.max_repair_samples.max(1);
        if let HistoryKind::KeepLast { depth } = &mut cfg.history {
            *depth = (*depth).max(1);
        }
        let cap = match cfg.history {
            HistoryKind::KeepLast { depth } => depth,
            HistoryKind::KeepAll => cfg.max_samples,
        };
        ReliableWriter {
            guid: writer,
            history: History::new(cap.min(4096) as usize),
            readers: Vec::new(),
            rr: 0,
            budget_left: cfg.repair_budget,
            period_start: None,
            deferred_noted: false,
            next_heartbeat: None,
            stats: WriterStats::default(),
            cfg,
        }
    }

    /// A writer whose next sample is `next` (≥ 1): its first reliable reader matched after
    /// `next - 1` samples were written without a history. Readers matched now start at
    /// `next`; whatever they ask for below it gets a Gap.
    pub fn starting_at(writer: [u8; 16], cfg: WriterConfig, next: u64) -> Self {
        let mut w = ReliableWriter::new(writer, cfg);
        w.history.start_at(next);
        w
    }

    /// The writer's GUID.
    pub fn guid(&self) -> [u8; 16] {
        self.guid
    }

    /// The matched reliable readers now (any order; duplicates ignored), each wanting the
    /// history if the writer is transient-local. See
    /// [`set_readers_durable`](Self::set_readers_durable).
    pub fn set_readers(&mut self, readers: &[[u8; 16]], now: Instant) {
        let tl = self.cfg.transient_local;
        let v: Vec<([u8; 16], bool)> = readers.iter().map(|g| (*g, tl)).collect();
        self.set_readers_durable(&v, now);
    }

    /// The lease of each matched reader's node (`readers` and `leases` in the same order):
    /// a keep-all writer waits for a reader that does not acknowledge at most that long, or
    /// `ack_timeout` if shorter; the lease counts only while the path toward it delivers
    /// ([`path_stalled`](Self::path_stalled)). Readers not listed keep what they had.
    pub fn set_reader_leases(&mut self, readers: &[[u8; 16]], leases: &[Duration]) {
        for (g, l) in readers.iter().zip(leases) {
            if let Ok(i) = self.readers.binary_search_by(|r| r.guid.cmp(g)) {
                self.readers[i].lease = Some(*l);
            }
        }
    }

    /// The path toward the readers on `node` (the 12-byte id prefix their GUIDs start with)
    /// changed: another link, or none. What was resent to them went on the old path, which
    /// may have dropped it (a link closed with it queued) or stalled (a lossy link in TCP
    /// back-off, the very reason a route moves): their next request for it is served at once
    /// instead of after the suppression, and their suppression starts again from
    /// `nack_suppression`. A path that keeps changing gets one resend per change.
    pub fn path_changed(&mut self, node: &[u8; 12]) {
        for r in self.readers.iter_mut().filter(|r| r.guid[..12] == node[..]) {
            r.resent_at = None;
            r.suppression = None;
        }
    }

    /// The path toward the readers on `node` holds what was sent to them unacknowledged at
    /// `now` (its link's kernel says so, a fact of this node's, not a claim of theirs): a
    /// reader there acknowledges nothing because nothing reaches it (a TCP connection in
    /// retransmission back-off, for longer than a lease under heavy loss, while the other
    /// direction still carries its node's frames). Its lease counts again from `now`, so it
    /// is waited for through the stall and a lease beyond it; only `ack_timeout` bounds a
    /// wait on a path that never delivers (a peer may refuse to acknowledge on purpose).
    pub fn path_stalled(&mut self, node: &[u8; 12], now: Instant) {
        for r in self.readers.iter_mut().filter(|r| r.guid[..12] == node[..]) {
            r.path_stalled_at = r.path_stalled_at.max(now);
        }
    }

    /// Whether some reader owes an acknowledgement that a timeout may release it from
    /// (keep-all with an `ack_timeout`): only then do stalled paths matter
    /// ([`path_stalled`](Self::path_stalled)).
    pub fn awaits_readers(&self) -> bool {
        self.next_release().is_some()
    }

    /// The matched reliable readers now, each with whether it asked for the history
    /// (durability transient-local or above). A new reader starts at the first held seq
    /// when this writer is transient-local and the reader asked for it (its sync is answered
    /// with the history), else at the next seq to be written (a volatile reader is owed only
    /// what comes after it matched); a removed reader is forgotten (releases keep-all room).
    pub fn set_readers_durable(&mut self, readers: &[([u8; 16], bool)], now: Instant) {
        self.expire(now);
        let mut new: Vec<([u8; 16], bool)> = readers.to_vec();
        new.sort_unstable();
        new.dedup_by_key(|(g, _)| *g);
        // Both lists are sorted: one merge walk keeps the known readers' state.
        let mut old = std::mem::take(&mut self.readers).into_iter().peekable();
        for (guid, wants) in new {
            let durable = wants && self.cfg.transient_local;
            let start = if durable {
                self.history.first()
            } else {
                self.history.next_seq()
            };
            while old.next_if(|r| r.guid < guid).is_some() {}
            let kept = old.next_if(|r| r.guid == guid);
            self.readers.push(kept.unwrap_or(ReaderState {
                guid,
                durable,
                start,
                acked: start,
                last_count: None,
                far_count: None,
                stalled_since: now,
                released: false,
                lease: None,
                path_stalled_at: now,
                sync_pending: false,
                range: None,
                nack_base: start,
                nacks: SeqSet::new(),
                resent_upto: 0,
                resent_at: None,
                suppression: None,
            }));
        }
        self.arm_heartbeat(now);
    }

    /// The matched readers, sorted.
    pub fn readers(&self) -> impl Iterator<Item = [u8; 16]> + '_ {
        self.readers.iter().map(|r| r.guid)
    }

    /// Samples that may be written now: keep-last: `u32::MAX` (never blocks); keep-all:
    /// `max_samples` minus the held samples some matched reader has not acknowledged, and 0
    /// once those hold `max_bytes` (the byte bound of a particular sample is checked by
    /// [`on_written`](Self::on_written)). 0 = the write must wait.
    pub fn room(&self) -> u32 {
        match self.cfg.history {
            HistoryKind::KeepLast { .. } => u32::MAX,
            HistoryKind::KeepAll => {
                let (count, bytes) = self.unacked();
                if bytes >= self.cfg.max_bytes {
                    0
                } else {
                    u32::try_from(u64::from(self.cfg.max_samples).saturating_sub(count))
                        .unwrap_or(0)
                }
            }
        }
    }

    /// Payload bytes that may be written now (keep-all; `usize::MAX` for keep-last).
    pub fn room_bytes(&self) -> usize {
        match self.cfg.history {
            HistoryKind::KeepLast { .. } => usize::MAX,
            HistoryKind::KeepAll => self.cfg.max_bytes.saturating_sub(self.unacked().1),
        }
    }

    /// Held samples (and their bytes) some matched reader still waited for has not
    /// acknowledged.
    fn unacked(&self) -> (u64, usize) {
        match self.waited_floor() {
            Some(m) => (self.history.count_from(m), self.history.bytes_from(m)),
            None => (0, 0),
        }
    }

    /// The lowest acked point of the readers still waited for (`None`: none is).
    fn waited_floor(&self) -> Option<u64> {
        self.readers
            .iter()
            .filter(|r| !r.released)
            .map(|r| r.acked)
            .min()
    }

    /// The application wrote sample `seq` (must be [`next_seq`](Self::next_seq)). Keep-all
    /// without room: [`WriterError::HistoryFull`] and nothing changes.
    pub fn on_written(
        &mut self,
        seq: u64,
        payload: Bytes,
        now: Instant,
    ) -> Result<(), WriterError> {
        let expected = self.history.next_seq();
        if seq != expected {
            return Err(WriterError::OutOfOrder { expected, got: seq });
        }
        self.expire(now);
        self.admit(payload.len())?;
        self.note_owed(now);
        self.history.push(payload, now);
        self.after_push();
        self.arm_heartbeat(now);
        Ok(())
    }

    /// The application wrote `count` samples numbered from `first_seq` (which must be
    /// [`next_seq`](Self::next_seq)), laid out in `body` as a Samples frame's body
    /// (`count × (len u32 | payload)`): held as ranges of `body`, no reference count moved
    /// per sample.
    ///
    /// Unlike [`on_written`](Self::on_written), a keep-all history without room still holds
    /// them (counted in `held_over_limit`): these samples are already on their way to the
    /// readers, and refusing one would leave a hole no repair could fill. What the writer's
    /// handle may have in flight beyond [`room`](Self::room) is bounded (its credit stops
    /// it), so the history stays bounded too. Returns how many were held: `count`, or fewer
    /// for a body that does not hold `count` samples ([`WriterError::BadRun`]) or a
    /// `first_seq` that is not next ([`WriterError::OutOfOrder`]).
    pub fn on_written_run(
        &mut self,
        first_seq: u64,
        body: &Bytes,
        count: u16,
        now: Instant,
    ) -> Result<u16, (u16, WriterError)> {
        let expected = self.history.next_seq();
        if first_seq != expected {
            return Err((
                0,
                WriterError::OutOfOrder {
                    expected,
                    got: first_seq,
                },
            ));
        }
        self.expire(now);
        // The run's layout is the handle's (checked by its lengths only when a sample of it is
        // needed): its count and bytes follow from its size.
        let bytes = body.len().saturating_sub(4 * usize::from(count));
        if body.len() < 4 * usize::from(count) {
            return Err((0, WriterError::BadRun));
        }
        if let Err(over) = self.admit_run(u64::from(count), bytes) {
            self.stats.held_over_limit += over;
        }
        self.note_owed(now);
        self.history.push_lazy(body.clone(), u64::from(count), now);
        self.stats.written += u64::from(count);
        if let HistoryKind::KeepLast { depth } = self.cfg.history {
            let len = self.history.len() as u64;
            if len > u64::from(depth) {
                let first = self.history.first();
                self.stats.replaced += self.history.pop_below(first + len - u64::from(depth));
            }
            while self.history.len() > 1 && self.history.bytes() > self.cfg.max_bytes {
                self.history.pop_front();
                self.stats.replaced += 1;
            }
        }
        self.arm_heartbeat(now);
        Ok(count)
    }

    /// [`admit`](Self::admit) for a run of `count` samples of `bytes` payload bytes; when
    /// it does not fit, how many of them are beyond the bounds.
    fn admit_run(&mut self, count: u64, bytes: usize) -> Result<(), u64> {
        if let HistoryKind::KeepAll = self.cfg.history {
            let (held, held_bytes) = self.unacked();
            let max = self.cfg.max_bytes;
            let over = (held + count).saturating_sub(u64::from(self.cfg.max_samples));
            if over > 0 || held_bytes + bytes > max {
                return Err(over.clamp(1, count));
            }
            // Only acknowledged samples are ahead of the unacknowledged ones.
            let over_count =
                (self.history.len() as u64 + count).saturating_sub(u64::from(self.cfg.max_samples));
            if over_count > 0 {
                let first = self.history.first();
                self.stats.released += self.history.pop_below(first + over_count);
            }
            while self.history.len() > 0 && self.history.bytes() + bytes > max {
                self.history.pop_front();
                self.stats.released += 1;
            }
        }
        Ok(())
    }

    /// Makes room for one more sample of `len` bytes by the history's policy (keep-all: only
    /// acknowledged samples go; none acknowledged, the sample is refused).
    fn admit(&mut self, len: usize) -> Result<(), WriterError> {
        if let HistoryKind::KeepAll = self.cfg.history {
            let max = self.cfg.max_bytes;
            if len > max {
                self.stats.full_refusals += 1;
                return Err(WriterError::SampleTooLarge { len, max });
            }
            let (count, bytes) = self.unacked();
            if count >= u64::from(self.cfg.max_samples) || bytes + len > max {
                self.stats.full_refusals += 1;
                return Err(WriterError::HistoryFull);
            }
            // Only acknowledged samples are ahead of the unacknowledged ones, so these
            // pops never take a sample a reader still needs.
            while self.history.len() >= self.cfg.max_samples as usize
                || self.history.bytes() + len > max
            {
                self.history.pop_front();
                self.stats.released += 1;
            }
        }
        Ok(())
    }

    /// Keep-last: the oldest samples beyond the depth (or the bytes) go; counts the write.
    fn after_push(&mut self) {
        if let HistoryKind::KeepLast { depth } = self.cfg.history {
            while self.history.len() > 1
                && (self.history.len() > depth as usize
                    || self.history.bytes() > self.cfg.max_bytes)
            {
                self.history.pop_front();
                self.stats.replaced += 1;
            }
        }
        self.stats.written += 1;
    }

    /// The seq the next written sample must have.
    pub fn next_seq(&self) -> u64 {
        self.history.next_seq()
    }

    /// The first seq held (`next_seq()` when none).
    pub fn first_held(&self) -> u64 {
        self.history.first()
    }

    /// A reader's acknowledgement and requests. Another writer's, an unknown reader's, a base
    /// beyond what was written, a count not above the last (or too far above it, see
    /// [`MAX_COUNT_STEP`](super::MAX_COUNT_STEP)): ignored and counted. A base of 0 (or
    /// below the reader's start) is a sync request: answered from what the reader already
    /// acknowledged, never from further back (see [`poll_transmit`](Self::poll_transmit)),
    /// and the reader's count starts over with it (a reader state dropped and made again on
    /// its node counts from 1). A base below what the reader already acknowledged moves
    /// nothing back.
    pub fn on_acknack(&mut self, a: &AckNack, now: Instant) {
        let next = self.history.next_seq();
        let found = (a.writer == self.guid)
            .then(|| {
                self.readers
                    .binary_search_by(|r| r.guid.cmp(&a.reader))
                    .ok()
            })
            .flatten();
        let Some(i) = found else {
            self.stats.acks_ignored_unknown_reader += 1;
            return;
        };
        let r = &mut self.readers[i];
        if a.base == 0 || a.base < r.start {
            // Only a reader state that has not started sends one; its answer starts at the
            // acked point, so a stale or repeated one costs one Gap, not a hand-over.
            r.last_count = None;
            r.far_count = None;
            r.sync_pending = true;
            return;
        }
        match count_verdict(r.last_count, r.far_count, a.count) {
            Count::Fresh => {}
            Count::Stale => {
                self.stats.acks_ignored_stale += 1;
                return;
            }
            Count::Far => {
                r.far_count = Some(a.count);
                self.stats.acks_ignored_far += 1;
                return;
            }
        }
        if a.base > next {
            self.stats.acks_ignored_future += 1;
            return;
        }
        r.last_count = Some(a.count);
        r.far_count = None;
        if a.base > r.acked {
            r.acked = a.base;
            r.stalled_since = now;
        }
        r.nack_base = a.base;
        r.nacks = SeqSet::new();
        if r.acked > r.resent_upto {
            r.suppression = None;
        }
        // What was resent a moment ago is still on its way (a slow or lossy link takes longer
        // than the reader's ack period): resending it again would only queue copies behind
        // it, and over a link that cannot keep up, starve it for good.
        let suppression = r.suppression.unwrap_or(self.cfg.nack_suppression);
        let fresh = r.resent_at.is_none_or(|t| now >= t + suppression);
        let mut again = false;
        for s in a.missing_seqs() {
            // Requests for seqs never written are dropped; the base check above covers the rest.
            if s >= r.acked && s < next && (fresh || s > r.resent_upto) {
                again |= s <= r.resent_upto;
                r.nacks.insert((s - a.base) as u16);
            } else if s >= r.acked && s < next {
                self.stats.repairs_suppressed += 1;
            }
        }
        if again {
            // Resent once and still missing after the wait: the path is slower than that.
            r.suppression = Some((suppression * 2).min(MAX_SUPPRESSION));
        }
        if let Some((lo, hi)) = r.range {
            r.range = (r.acked.max(lo) <= hi).then_some((r.acked.max(lo), hi));
        }
        if r.released {
            // Waited for again once it holds what the slowest reader still waited for
            // holds: rejoining then takes no room the others had left.
            let acked = r.acked;
            let floor = self.waited_floor().unwrap_or(next);
            if acked >= floor {
                let r = &mut self.readers[i];
                r.released = false;
                r.stalled_since = now;
            }
        }
        self.release_acked();
        self.arm_heartbeat(now);
    }

    /// A sample is about to be written: readers that had acknowledged everything owe an
    /// acknowledgement from now on.
    fn note_owed(&mut self, now: Instant) {
        let next = self.history.next_seq();
        for r in self.readers.iter_mut().filter(|r| r.acked >= next) {
            r.stalled_since = now;
        }
    }

    /// Keep-all: stops waiting for the readers whose acknowledgement has not moved for
    /// `ack_timeout` while they owed one (counted in `readers_released`); their count is
    /// forgotten too (a count pushed far ahead by a forger is not held against them).
    fn release_silent(&mut self, now: Instant) {
        let (HistoryKind::KeepAll, Some(timeout)) = (self.cfg.history, self.cfg.ack_timeout) else {
            return;
        };
        let next = self.history.next_seq();
        let mut any = false;
        for r in self.readers.iter_mut() {
            if !r.released && r.acked < next && now >= r.release_at(timeout) {
                r.released = true;
                r.last_count = None;
                r.far_count = None;
                self.stats.readers_released += 1;
                any = true;
            }
        }
        if any {
            self.release_acked();
        }
    }

    /// When the next waited-for reader times out (keep-all with an `ack_timeout`).
    fn next_release(&self) -> Option<Instant> {
        let (HistoryKind::KeepAll, Some(timeout)) = (self.cfg.history, self.cfg.ack_timeout) else {
            return None;
        };
        let next = self.history.next_seq();
        self.readers
            .iter()
            .filter(|r| !r.released && r.acked < next)
            .map(|r| r.release_at(timeout))
            .min()
    }

    /// A volatile writer lets go of what every matched reader acknowledged at once: no
    /// reader will ask for it again (a new volatile reader starts after it), and holding it
    /// until room is needed kept a full history's buffers from the handle's reuse.
    /// Transient-local writers keep theirs for late joiners.
    fn release_acked(&mut self) {
        if self.cfg.transient_local {
            return;
        }
        // A released reader is not waited for: what it lacks and the others hold goes too
        // (asked for, it gets a Gap).
        let floor = self
            .waited_floor()
            .unwrap_or_else(|| self.history.next_seq());
        self.stats.released += self.history.pop_below(floor);
    }

    /// What to send now; call until `None`. Heartbeats first, then sync answers, then Gaps and
    /// Repairs round-robin over the readers within the repair budget.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<WriterOut> {
        self.handle_timeout(now);
        if self.needs_heartbeat() {
            let due = *self.next_heartbeat.get_or_insert(now);
            if now >= due {
                self.next_heartbeat = Some(now + self.cfg.heartbeat_period);
                self.stats.heartbeats += 1;
                return Some(WriterOut::Heartbeat(Heartbeat {
                    ttl: 0,
                    writer: self.guid,
                    first: self.history.first(),
                    last: self.history.last(),
                }));
            }
        }
        if let Some(out) = self.answer_sync() {
            return Some(out);
        }
        let n = self.readers.len();
        for k in 0..n {
            let i = (self.rr + k) % n;
            if let Some(out) = self.serve(i, now) {
                self.rr = (i + 1) % n;
                return Some(out);
            }
        }
        None
    }

    /// Answers pending sync requests until one needs a Gap (see the module doc). The answer
    /// starts where the reader is owed from: its start, or, once it acknowledged past it, its
    /// acked point (a reader state made again on its node is not handed again what it
    /// already delivered, and a forged or stale sync request restarts no hand-over). The
    /// first sample owed is resent with it when written: the reader's proof that the Gap's
    /// range is the writer's (see `ReliableReader::on_gap`).
    fn answer_sync(&mut self) -> Option<WriterOut> {
        let (first, last) = (self.history.first(), self.history.last());
        for r in self.readers.iter_mut().filter(|r| r.sync_pending) {
            r.sync_pending = false;
            self.stats.syncs_answered += 1;
            let from = if r.acked > r.start {
                r.acked
            } else if r.durable {
                first
            } else {
                r.start
            };
            r.range = if r.durable {
                (from <= last).then_some((from, last))
            } else {
                (from <= last).then_some((from, from))
            };
            if from > 1 {
                self.stats.gaps_sent += 1;
                return Some(WriterOut::Gap(Gap {
                    ttl: 0,
                    writer: self.guid,
                    reader: r.guid,
                    first: 1,
                    last: from - 1,
                }));
            }
        }
        None
    }

    /// One Gap or Repair for reader `i`, if it has work and (for a Repair) budget is left.
    fn serve(&mut self, i: usize, now: Instant) -> Option<WriterOut> {
        let first = self.history.first();
        let r = &mut self.readers[i];
        // Requests below what the reader acknowledged, or covered by the handover, are done.
        let (base, acked, range) = (r.nack_base, r.acked, r.range);
        let covered = |s: u64| s < acked || range.is_some_and(|(lo, hi)| lo <= s && s <= hi);
        let snapshot = r.nacks;
        for off in snapshot.iter() {
            if covered(base + u64::from(off)) {
                r.nacks.remove(off);
            }
        }
        let (lo, hi, from_range) = if let Some((lo, hi)) = r.range {
            (lo, hi, true)
        } else {
            let off = r.nacks.first()?;
            let lo = base + u64::from(off);
            let mut hi = lo;
            while hi + 1 - base < 256 && r.nacks.contains((hi + 1 - base) as u16) {
                hi += 1;
            }
            (lo, hi, false)
        };
        if lo < first {
            // Everything below the first held is gone: one Gap for all of it.
            let last = if from_range {
                hi.min(first - 1)
            } else {
                first - 1
            };
            advance(r, lo, last, from_range);
            if !from_range && r.range.is_none() && first <= self.history.last() {
                // The first held sample follows: the reader takes a Gap reaching far past
                // what it has seen only once a sample of the writer's confirms it.
                r.range = Some((first, first));
            }
            self.stats.gaps_sent += 1;
            return Some(WriterOut::Gap(Gap {
                ttl: 0,
                writer: self.guid,
                reader: r.guid,
                first: lo,
                last,
            }));
        }
        if self.budget_left == 0 {
            if !self.deferred_noted {
                self.deferred_noted = true;
                self.stats.repair_deferred += self.readers.iter().map(|r| r.pending()).sum::<u64>();
            }
            return None;
        }
        let max_n = u64::from(self.cfg.max_repair_samples).min(u64::from(self.budget_left));
        self.history.settle_upto(hi.min(lo + max_n));
        let r = &mut self.readers[i];
        let mut n = 0u64;
        let mut bytes = 0usize;
        while lo + n <= hi && n < max_n {
            let len = self.history.get(lo + n).map_or(0, |e| e.len());
            if n > 0 && bytes + len > self.cfg.max_repair_bytes {
                break;
            }
            bytes += len;
            n += 1;
        }
        let h = &self.history;
        let payloads = (lo..lo + n).filter_map(|s| h.get(s).map(|e| h.payload(e)));
        let repair = Repair::new(0, self.guid, r.guid, lo, payloads)
            .expect("a run of held samples within u16::MAX encodes");
        advance(r, lo, lo + n - 1, from_range);
        if !from_range {
            r.resent_upto = r.resent_upto.max(lo + n - 1);
            r.resent_at = Some(now);
        }
        self.budget_left -= n as u32;
        self.stats.repaired += n;
        self.stats.repair_frames += 1;
        Some(WriterOut::Repair(repair))
    }

    /// When to call [`handle_timeout`](Self::handle_timeout) (or poll) next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let heartbeat = self.next_heartbeat.filter(|_| self.needs_heartbeat());
        let repairs = self
            .readers
            .iter()
            .any(ReaderState::has_work)
            .then(|| {
                let p = self.period_start?;
                Some(if self.budget_left == 0 {
                    p + self.cfg.repair_period
                } else {
                    p
                })
            })
            .flatten();
        let expiry = self.cfg.lifespan.and_then(|l| self.history.next_expiry(l));
        [heartbeat, repairs, expiry, self.next_release()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Expires samples past their lifespan, stops waiting for silent readers and starts a
    /// new repair period when due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.expire(now);
        self.release_silent(now);
        if self
            .period_start
            .is_none_or(|p| now >= p + self.cfg.repair_period)
        {
            self.period_start = Some(now);
            self.budget_left = self.cfg.repair_budget;
            self.deferred_noted = false;
        }
    }

    /// The counters.
    pub fn stats(&self) -> WriterStats {
        self.stats
    }

    fn expire(&mut self, now: Instant) {
        if let Some(l) = self.cfg.lifespan {
            self.stats.expired += self.history.expire(now, l);
        }
    }

    /// Some reader has not acknowledged everything written.
    fn needs_heartbeat(&self) -> bool {
        let next = self.history.next_seq();
        self.readers.iter().any(|r| r.acked < next)
    }

    fn arm_heartbeat(&mut self, now: Instant) {
        if !self.needs_heartbeat() {
            self.next_heartbeat = None;
        } else if self.next_heartbeat.is_none() {
            self.next_heartbeat = Some(now + self.cfg.heartbeat_period);
        }
    }
}

/// Marks `lo ..= hi` of a reader's handover or requests as answered.
fn advance(r: &mut ReaderState, lo: u64, hi: u64, from_range: bool) {
    if from_range {
        if let Some((_, end)) = r.range {
            r.range = (hi < end).then_some((hi + 1, end));
        }
    } else {
        let snapshot = r.nacks;
        for off in snapshot.iter() {
            if (lo..=hi).contains(&(r.nack_base + u64::from(off))) {
                r.nacks.remove(off);
            }
        }
    }
}
