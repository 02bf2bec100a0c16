//! The reliable reader: one per (remote writer, local reliable reader), on the reader's node
//! (protocol in the module doc of `reliable`).
//!
//! **Owns:** start-up (sync), in-order exactly-once delivery, the bounded reorder window,
//! loss accounting from Gaps, AckNack timing and content. **Must not touch:** the clock,
//! routing, the application's queue (deliveries go to the caller's closure, in order).
//!
//! Length: one state machine whose inputs (samples, repairs, heartbeats, gaps, the timer)
//! all read and move the same window and marks; its tests are in `tests.rs` and
//! `tests/hostile.rs`.
//!
//! # The writer's plausible range
//!
//! A Gap or a Heartbeat says something about samples the reader may never have seen (that
//! they will never come, that they exist). Taken as they come, one forged frame would end the
//! reader: a Gap to `u64::MAX` moves its next expected seq there for good, a Heartbeat to
//! `u64::MAX` makes every real one after it look backwards. So a reader takes them only
//! within the writer's *plausible range*: a `last` at most `max_buffered_samples` (the
//! reorder window) beyond `seen`, the highest seq it received in a sample or a repair of the
//! writer. Only the writer's data raises the bar, never a Gap or a Heartbeat (else each
//! forged one would raise it for the next).
//!
//! Beyond it, a Heartbeat is held (counted, not adopted: nothing known, nothing remembered
//! for the backwards check); a started reader answers it by asking for its next expected seq
//! alone, so the writer's Repair (data) or Gap moves the bar if the Heartbeat was the
//! writer's. A Gap beyond it is held (the one reaching least far is kept) until data
//! confirms it; the writer sends the first sample it holds after every Gap for requests and
//! the first sample owed after a sync answer, so a real Gap is confirmed within a round trip
//! however far it reaches.

use super::{ReaderConfig, ReaderEvent, ReaderStats, MAX_EVENTS, MAX_PENDING_GAPS, MAX_SEQ};
use crate::wire::{AckNack, Gap, Heartbeat, Repair, SeqSet, MAX_NACK_BITS};
use bytes::Bytes;
use std::collections::VecDeque;
use std::time::Instant;

/// The reliability state of one local reader for one remote writer.
#[derive(Debug)]
pub struct ReliableReader {
    writer: [u8; 16],
    reader: [u8; 16],
    cfg: ReaderConfig,
    started: bool,
    /// Next seq to deliver (meaningful once started).
    next: u64,
    /// Slot `i` holds seq `buf_base + i`; once started `buf_base == next` (slot 0 empty).
    buf: VecDeque<Option<Bytes>>,
    buf_base: u64,
    buf_bytes: usize,
    /// Samples in `buf` (slots holding one).
    buf_count: usize,
    /// Highest seq known to exist (received, or a heartbeat's `last`).
    known_last: u64,
    /// Highest seq received in a sample or a repair: what bounds the writer's plausible
    /// range (see the module doc).
    seen: u64,
    /// A Gap beyond the plausible range, waiting for data to confirm it.
    held_gap: Option<(u64, u64)>,
    /// A Heartbeat beyond the plausible range came: the next AckNack asks for the next
    /// expected seq.
    probe: bool,
    hb_first: u64,
    hb_last: u64,
    /// Seqs up to it have been known for at least `nack_delay`.
    mature: u64,
    /// `known_last` at a time, maturing `nack_delay` later.
    mark: Option<(u64, Instant)>,
    /// Future gaps, not yet reached.
    gaps: Vec<(u64, u64)>,
    events: VecDeque<ReaderEvent>,
    count: u32,
    sync_due: Instant,
    ack_ready_at: Instant,
    /// Something an ack should say (progress, a heartbeat asked).
    ack_dirty: bool,
    /// The base of the last AckNack sent.
    acked: u64,
    /// The highest seq the last AckNack asked for (0: it asked for none).
    requested: u64,
    stats: ReaderStats,
}

impl ReliableReader {
    /// A reader not started yet: its first [`poll_transmit`](Self::poll_transmit) is a sync
    /// request. `max_buffered_samples` below 1 is taken as 1.
    pub fn new(writer: [u8; 16], reader: [u8; 16], mut cfg: ReaderConfig, now: Instant) -> Self {
        cfg.max_buffered_samples = cfg.max_buffered_samples.max(1);
        ReliableReader {
            writer,
            reader,
            buf: VecDeque::with_capacity(cfg.max_buffered_samples.min(4096) as usize),
            cfg,
            started: false,
            next: 0,
            buf_base: 0,
            buf_bytes: 0,
            buf_count: 0,
            known_last: 0,
            seen: 0,
            held_gap: None,
            probe: false,
            hb_first: 0,
            hb_last: 0,
            mature: 0,
            mark: None,
            gaps: Vec::new(),
            events: VecDeque::new(),
            count: 0,
            sync_due: now,
            ack_ready_at: now,
            ack_dirty: false,
            acked: 0,
            requested: 0,
            stats: ReaderStats::default(),
        }
    }

    /// The remote writer's GUID.
    pub fn writer(&self) -> [u8; 16] {
        self.writer
    }

    /// This reader's GUID.
    pub fn reader(&self) -> [u8; 16] {
        self.reader
    }

    /// Fresh samples from the tree: `first_seq` and the payloads in order. Each owed sample
    /// goes to `deliver(seq, payload)` in sequence order, exactly once; out-of-order ones are
    /// buffered (bounded: beyond, dropped, counted, asked for again later).
    pub fn on_samples(
        &mut self,
        first_seq: u64,
        payloads: impl Iterator<Item = Bytes>,
        now: Instant,
        deliver: &mut dyn FnMut(u64, Bytes),
    ) {
        for (i, p) in payloads.enumerate() {
            match first_seq.checked_add(i as u64) {
                Some(seq) if (1..=MAX_SEQ).contains(&seq) => self.accept(seq, p, deliver),
                Some(0) => break,
                _ => {
                    self.stats.out_of_range += 1;
                    break;
                }
            }
        }
        if let Some((first, last)) = self.held_gap {
            if last <= self.plausible_top() {
                self.held_gap = None;
                self.take_gap(first, last, deliver);
            } else if self.started && last < self.next {
                self.held_gap = None;
            }
        }
        self.note_known(now);
    }

    /// The highest seq a Gap or a Heartbeat may name and be taken (see the module doc), never
    /// above [`MAX_SEQ`].
    fn plausible_top(&self) -> u64 {
        self.seen
            .saturating_add(u64::from(self.cfg.max_buffered_samples))
            .min(MAX_SEQ)
    }

    /// The fast lane of [`on_samples`](Self::on_samples): a run of `count` fresh samples
    /// from `first_seq` that continues exactly where delivery stands, with nothing buffered
    /// and no gap pending, is taken whole (true): the caller hands the run on as it came,
    /// without walking its payloads. Otherwise nothing changes (false) and the caller goes
    /// through `on_samples`.
    pub fn accept_in_order(&mut self, first_seq: u64, count: u16, now: Instant) -> bool {
        if !self.started
            || count == 0
            || first_seq != self.next
            || self.buf_count != 0
            || !self.gaps.is_empty()
        {
            return false;
        }
        let Some(next) = first_seq
            .checked_add(u64::from(count))
            .filter(|n| *n <= MAX_SEQ)
        else {
            return false;
        };
        let top = (next - 1).saturating_add(u64::from(self.cfg.max_buffered_samples));
        if self.held_gap.is_some_and(|(_, last)| last <= top) {
            // The run confirms a held Gap: `on_samples` takes both.
            return false;
        }
        self.known_last = self.known_last.max(next - 1);
        self.seen = self.seen.max(next - 1);
        self.next = next;
        self.buf.clear();
        self.buf_base = next;
        self.stats.delivered += u64::from(count);
        self.ack_dirty = true;
        self.note_known(now);
        true
    }

    /// Samples resent for this reader (another reader's are ignored, counted).
    pub fn on_repair(&mut self, r: &Repair, now: Instant, deliver: &mut dyn FnMut(u64, Bytes)) {
        if r.reader != self.reader || r.writer != self.writer {
            self.stats.foreign_ignored += 1;
            return;
        }
        self.on_samples(r.first_seq, r.payloads(), now, deliver);
    }

    /// The writer's heartbeat: raises what is known to exist and asks for an ack. One going
    /// backwards (a lower `first` or `last` than one taken before), or whose `first` is past
    /// `last + 1`, is ignored, counted. One whose `last` is beyond the writer's plausible
    /// range (module doc) is held: counted, not adopted; a started reader asks for its next
    /// expected seq alone in its next AckNack.
    pub fn on_heartbeat(&mut self, hb: &Heartbeat, now: Instant) {
        if hb.writer != self.writer
            || hb.first > hb.last.saturating_add(1)
            || hb.first < self.hb_first
            || hb.last < self.hb_last
        {
            self.stats.heartbeats_ignored += 1;
            return;
        }
        if hb.last > self.plausible_top() {
            self.stats.heartbeats_held += 1;
            if self.started {
                self.probe = true;
                self.ack_dirty = true;
            }
            return;
        }
        self.hb_first = hb.first;
        self.hb_last = hb.last;
        self.known_last = self.known_last.max(hb.last);
        if self.started {
            self.ack_dirty = true;
        }
        self.note_known(now);
    }

    /// Samples that will never come for this reader (another reader's are ignored, counted):
    /// the ones it lacks are lost ([`ReaderEvent::Lost`]), buffered ones are delivered, and
    /// delivery goes on after. A Gap from 1 starts a reader that has not started. A Gap whose
    /// `last` is beyond the writer's plausible range (module doc) is held, counted, until a
    /// sample or a repair confirms it (of several, the one reaching least far is kept).
    pub fn on_gap(&mut self, g: &Gap, now: Instant, deliver: &mut dyn FnMut(u64, Bytes)) {
        if g.reader != self.reader || g.writer != self.writer {
            self.stats.foreign_ignored += 1;
            return;
        }
        if g.first == 0 || g.first > g.last {
            self.stats.gaps_ignored += 1;
            return;
        }
        if g.last > self.plausible_top() {
            self.stats.gaps_held += 1;
            if self.held_gap.is_none_or(|(_, l)| g.last < l) {
                self.held_gap = Some((g.first, g.last));
            }
            return;
        }
        self.take_gap(g.first, g.last, deliver);
        self.note_known(now);
    }

    /// A plausible Gap `first ..= last`.
    fn take_gap(&mut self, first: u64, last: u64, deliver: &mut dyn FnMut(u64, Bytes)) {
        self.known_last = self.known_last.max(last);
        if !self.started {
            if first == 1 {
                self.start(last.saturating_add(1), deliver);
            } else {
                self.stats.gaps_ignored += 1;
            }
        } else if last < self.next {
            self.stats.gaps_ignored += 1;
        } else if first > self.next {
            if self.gaps.len() < MAX_PENDING_GAPS {
                self.gaps.push((first, last));
            } else {
                self.stats.gaps_ignored += 1;
            }
        } else {
            self.apply_gap(last, deliver);
            self.drain(deliver);
        }
    }

    /// The AckNack to send now, if one is due (sync request while not started).
    pub fn poll_transmit(&mut self, now: Instant) -> Option<AckNack> {
        self.mature_marks(now);
        if !self.started {
            if now < self.sync_due {
                return None;
            }
            self.sync_due = now + self.cfg.sync_retry;
            self.stats.sync_requests += 1;
            return Some(self.acknack(0, SeqSet::new()));
        }
        let progressed = self.next.saturating_sub(self.acked) >= u64::from(self.cfg.ack_every);
        // Everything the last request asked for came: the next part of a long gap is asked
        // for at once (a repair of thousands of samples goes at the pace of the repairs,
        // 256 per request, not one request per period).
        let answered = self.requested != 0 && self.next > self.requested;
        if now < self.ack_ready_at && !progressed && !answered {
            return None;
        }
        let mut missing = self.missing();
        if std::mem::take(&mut self.probe) {
            // A heartbeat beyond the plausible range: its writer (if it was the writer's)
            // answers this one seq with data or a Gap, either of which moves the range.
            missing.insert(0);
        }
        if !self.ack_dirty && missing.is_empty() {
            return None;
        }
        self.ack_dirty = false;
        self.ack_ready_at = now + self.cfg.ack_period;
        self.acked = self.next;
        self.requested = missing
            .iter()
            .last()
            .map_or(0, |i| self.next + u64::from(i));
        Some(self.acknack(self.next, missing))
    }

    /// The next event (losses), if any.
    pub fn poll_event(&mut self) -> Option<ReaderEvent> {
        self.events.pop_front()
    }

    /// When to poll next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.started {
            return Some(self.sync_due);
        }
        let mark = self.mark.map(|(_, t)| t + self.cfg.nack_delay);
        let ack = (self.ack_dirty || self.next <= self.mature.min(self.known_last))
            .then_some(self.ack_ready_at);
        [mark, ack].into_iter().flatten().min()
    }

    /// Marks come due; nothing else waits on time.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.mature_marks(now);
    }

    /// The next seq to deliver; 0 while not started.
    pub fn next_expected(&self) -> u64 {
        if self.started {
            self.next
        } else {
            0
        }
    }

    /// Whether the reader has started (knows where its samples begin).
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// The counters.
    pub fn stats(&self) -> ReaderStats {
        self.stats
    }

    fn acknack(&mut self, base: u64, missing: SeqSet) -> AckNack {
        self.count = self.count.wrapping_add(1);
        self.stats.acknacks_sent += 1;
        AckNack {
            ttl: 0,
            writer: self.writer,
            reader: self.reader,
            count: self.count,
            base,
            missing,
        }
    }

    /// The seqs from `next` on that are missing, known to exist and past `nack_delay`, within
    /// the window.
    fn missing(&self) -> SeqSet {
        let mut set = SeqSet::new();
        let top = self.mature.min(self.known_last);
        // Asking for more than the window holds would only have the repair dropped again.
        let width = u64::from(MAX_NACK_BITS).min(u64::from(self.cfg.max_buffered_samples));
        if top < self.next {
            return set;
        }
        for i in 0..(top - self.next).saturating_add(1).min(width) {
            if !matches!(self.buf.get(i as usize), Some(Some(_))) {
                set.insert(i as u16);
            }
        }
        set
    }

    fn note_known(&mut self, now: Instant) {
        self.mature_marks(now);
        if self.mark.is_none() && self.known_last > self.mature {
            self.mark = Some((self.known_last, now));
        }
    }

    fn mature_marks(&mut self, now: Instant) {
        if let Some((last, t)) = self.mark {
            if now >= t + self.cfg.nack_delay {
                self.mature = self.mature.max(last);
                self.mark = (self.known_last > self.mature).then_some((self.known_last, now));
            }
        }
    }

    fn accept(&mut self, seq: u64, p: Bytes, deliver: &mut dyn FnMut(u64, Bytes)) {
        self.known_last = self.known_last.max(seq);
        self.seen = self.seen.max(seq);
        if !self.started {
            if seq == 1 {
                self.start(1, deliver);
            } else {
                self.buffer_unstarted(seq, p);
                return;
            }
        }
        if seq < self.next {
            self.stats.duplicates += 1;
        } else if seq == self.next {
            self.deliver_next(p, deliver);
            self.drain(deliver);
        } else {
            self.buffer(seq, p);
        }
    }

    /// Stores `seq` (ahead of `buf_base`) in the window, or drops it (counted).
    fn buffer(&mut self, seq: u64, p: Bytes) {
        let i = seq - self.buf_base;
        if i >= u64::from(self.cfg.max_buffered_samples) {
            self.stats.buffered_dropped += 1;
            return;
        }
        let i = i as usize;
        if matches!(self.buf.get(i), Some(Some(_))) {
            self.stats.duplicates += 1;
            return;
        }
        if self.buf_bytes + p.len() > self.cfg.max_buffered_bytes {
            self.stats.buffered_dropped += 1;
            return;
        }
        if self.buf.len() <= i {
            self.buf.resize(i + 1, None);
        }
        self.buf_bytes += p.len();
        self.buf_count += 1;
        self.buf[i] = Some(p);
    }

    /// Before the start is known the window begins at the lowest seq seen.
    fn buffer_unstarted(&mut self, seq: u64, p: Bytes) {
        if self.buf_count == 0 {
            self.buf.clear();
            self.buf_base = seq;
        } else if seq < self.buf_base {
            self.shift_down(seq);
        }
        self.buffer(seq, p);
    }

    /// Moves the window's base down to `base`, dropping (counted) what no longer fits.
    fn shift_down(&mut self, base: u64) {
        let by = self.buf_base - base;
        let max = u64::from(self.cfg.max_buffered_samples);
        if by >= max {
            self.drop_all();
        } else {
            for _ in 0..by {
                self.buf.push_front(None);
            }
            while self.buf.len() as u64 > max {
                if let Some(Some(p)) = self.buf.pop_back() {
                    self.release(&p);
                    self.stats.buffered_dropped += 1;
                }
            }
        }
        self.buf_base = base;
    }

    fn drop_all(&mut self) {
        self.stats.buffered_dropped += self.buf_count as u64;
        self.buf.clear();
        (self.buf_bytes, self.buf_count) = (0, 0);
    }

    fn release(&mut self, p: &Bytes) {
        self.buf_bytes -= p.len();
        self.buf_count -= 1;
    }

    fn start(&mut self, at: u64, deliver: &mut dyn FnMut(u64, Bytes)) {
        self.started = true;
        self.ack_dirty = true;
        if self.buf_count == 0 {
            self.buf.clear();
            self.buf_base = at;
        } else if self.buf_base > at {
            self.shift_down(at);
        } else {
            while self.buf_base < at {
                match self.buf.pop_front() {
                    Some(Some(p)) => {
                        self.release(&p);
                        self.stats.before_start += 1;
                    }
                    Some(None) => {}
                    None => break,
                }
                self.buf_base += 1;
            }
            self.buf_base = at;
        }
        self.next = at;
        self.drain(deliver);
    }

    /// Delivers `next` and moves the window with it.
    fn deliver_next(&mut self, p: Bytes, deliver: &mut dyn FnMut(u64, Bytes)) {
        deliver(self.next, p);
        self.stats.delivered += 1;
        self.ack_dirty = true;
        self.step();
    }

    fn step(&mut self) {
        if let Some(Some(p)) = self.buf.pop_front() {
            self.release(&p);
        }
        self.next += 1;
        self.buf_base = self.next;
    }

    /// Delivers buffered samples from `next` on, applying gaps reached.
    fn drain(&mut self, deliver: &mut dyn FnMut(u64, Bytes)) {
        loop {
            while let Some(Some(_)) = self.buf.front() {
                let Some(Some(p)) = self.buf.pop_front() else {
                    unreachable!("checked above")
                };
                self.release(&p);
                self.buf.push_front(None);
                self.deliver_next(p, deliver);
            }
            let next = self.next;
            let Some(k) = self.gaps.iter().position(|&(a, _)| a <= next) else {
                return;
            };
            let (_, b) = self.gaps.swap_remove(k);
            if b >= next {
                self.apply_gap(b, deliver);
            }
        }
    }

    /// Seqs `next ..= last` never come: buffered ones are delivered, missing runs are lost.
    fn apply_gap(&mut self, last: u64, deliver: &mut dyn FnMut(u64, Bytes)) {
        let mut run: Option<u64> = None;
        while self.next <= last {
            if self.buf.is_empty() {
                // Nothing buffered beyond: the rest is one lost run.
                let from = run.take().unwrap_or(self.next);
                self.lose(from, last);
                self.next = last.saturating_add(1);
                self.buf_base = self.next;
                break;
            }
            match self.buf.pop_front() {
                Some(Some(p)) => {
                    self.release(&p);
                    if let Some(from) = run.take() {
                        self.lose(from, self.next - 1);
                    }
                    self.buf.push_front(None);
                    self.deliver_next(p, deliver);
                }
                _ => {
                    run.get_or_insert(self.next);
                    self.next += 1;
                    self.buf_base = self.next;
                }
            }
        }
        if let Some(from) = run {
            self.lose(from, last);
        }
        self.ack_dirty = true;
    }

    fn lose(&mut self, first: u64, last: u64) {
        self.stats.lost += last - first + 1;
        if self.events.len() < MAX_EVENTS {
            self.events.push_back(ReaderEvent::Lost { first, last });
        } else {
            self.stats.events_dropped += 1;
        }
    }
}
