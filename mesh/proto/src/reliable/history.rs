//! A writer's history: the contiguous run of samples its node still holds, oldest first.
//!
//! **Owns:** the held samples (the caller's `Bytes`, never copied), their byte total and write
//! times, and O(1) "bytes held from seq s on". **Must not touch:** what to keep (the writer's
//! keep-last / keep-all policy decides what to push and pop), readers, frames.
//!
//! Samples are held as ranges of the buffers they were written in (one `Bytes` per run of
//! samples, [`History::push_run`]), not one `Bytes` each: a reference count moved per sample
//! costs a shared cache line with the application thread that recycles those buffers, which
//! was most of a reliable writer's per-sample cost. A sample's payload is sliced out only when
//! it is repaired.
//!
//! A run a reliable writer's handle wrote is not even walked when it is pushed
//! ([`History::push_lazy`]): finding where each sample starts is a chain of dependent reads,
//! one cache line per sample of a buffer another core just wrote. Counts and bytes of a run
//! follow from its header and length; its samples are laid out ([`History::settle`]) only
//! when one of them is asked for (a repair), or when the front of the history is trimmed
//! inside it. A run trimmed whole (every sample acknowledged) is never walked.

use bytes::Bytes;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One held sample: a range of a held run buffer.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The run buffer's id (see [`History::push_run`]).
    run: u64,
    off: u32,
    len: u32,
    pub(crate) at: Instant,
    /// Payload bytes pushed up to and including this sample, since the history was made.
    cum: u64,
}

impl Entry {
    /// The payload's length.
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }
}

/// A run pushed but not laid out into entries yet (it follows every entry).
#[derive(Debug, Clone, Copy)]
struct Lazy {
    run: u64,
    count: u64,
    /// Payload bytes (the body less its 4-byte length prefixes).
    bytes: usize,
    at: Instant,
}

/// Samples `first() ..= next_seq() - 1` (all of them, or none: held seqs never have holes):
/// the laid-out entries, then the lazy runs.
#[derive(Debug)]
pub(crate) struct History {
    entries: VecDeque<Entry>,
    lazy: VecDeque<Lazy>,
    lazy_count: u64,
    lazy_bytes: usize,
    /// The buffers the entries are ranges of; `runs[0]` has id `runs_base`.
    runs: VecDeque<Bytes>,
    runs_base: u64,
    next_seq: u64,
    /// Payload bytes of the entries.
    bytes: usize,
    cum: u64,
}

impl History {
    pub(crate) fn new(capacity: usize) -> History {
        History {
            entries: VecDeque::with_capacity(capacity),
            lazy: VecDeque::new(),
            lazy_count: 0,
            lazy_bytes: 0,
            runs: VecDeque::new(),
            runs_base: 0,
            next_seq: 1,
            bytes: 0,
            cum: 0,
        }
    }

    /// The first held seq; `next_seq()` when nothing is held.
    pub(crate) fn first(&self) -> u64 {
        self.next_seq - self.len() as u64
    }

    /// Makes the (empty) history's next sample `next`: a writer whose history starts
    /// mid-stream holds nothing below it, so nothing below it can be repaired.
    pub(crate) fn start_at(&mut self, next: u64) {
        debug_assert!(self.len() == 0, "only an empty history moves its start");
        self.next_seq = next.max(1);
    }

    /// The seq the next sample gets.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The highest seq written (0: none).
    pub(crate) fn last(&self) -> u64 {
        self.next_seq - 1
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len() + self.lazy_count as usize
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes + self.lazy_bytes
    }

    /// The first seq of the lazy runs (`next_seq` when there are none).
    fn lazy_first(&self) -> u64 {
        self.next_seq - self.lazy_count
    }

    /// Sample `seq`, if held and laid out ([`settle_upto`](Self::settle_upto) it first).
    pub(crate) fn get(&self, seq: u64) -> Option<&Entry> {
        let i = seq.checked_sub(self.first())?;
        self.entries.get(usize::try_from(i).ok()?)
    }

    /// Lays out the lazy runs up to (and holding) `seq`.
    pub(crate) fn settle_upto(&mut self, seq: u64) {
        while seq >= self.lazy_first() && self.settle_one() {}
    }

    /// The payload of `e` (a slice of its run buffer, no copy).
    pub(crate) fn payload(&self, e: &Entry) -> Bytes {
        let run = &self.runs[(e.run - self.runs_base) as usize];
        run.slice(e.off as usize..(e.off + e.len) as usize)
    }

    /// Holds `buf` for the samples [`push_at`](Self::push_at) takes from it; returns its id.
    /// A buffer no sample refers to is let go with the next pop.
    pub(crate) fn push_run(&mut self, buf: Bytes) -> u64 {
        debug_assert!(
            self.lazy.is_empty(),
            "entries only go in after the lazy runs"
        );
        self.runs.push_back(buf);
        self.runs_base + self.runs.len() as u64 - 1
    }

    fn append(&mut self, run: u64, off: usize, len: usize, at: Instant) {
        self.cum += len as u64;
        self.entries.push_back(Entry {
            run,
            off: off as u32,
            len: len as u32,
            at,
            cum: self.cum,
        });
    }

    /// Appends the next sample: bytes `off .. off + len` of run `run`.
    pub(crate) fn push_at(&mut self, run: u64, off: usize, len: usize, at: Instant) {
        debug_assert!(
            run >= self.runs_base && off + len <= self.runs[(run - self.runs_base) as usize].len()
        );
        self.settle();
        self.bytes += len;
        self.append(run, off, len, at);
        self.next_seq += 1;
    }

    /// Appends the next sample, held alone.
    pub(crate) fn push(&mut self, payload: Bytes, at: Instant) {
        self.settle();
        let len = payload.len();
        let run = self.push_run(payload);
        self.push_at(run, 0, len, at);
    }

    /// Appends `count` samples laid out in `body` as `count × (len u32 | payload)` without
    /// reading them (the caller vouches for the layout: a writer handle's own run).
    pub(crate) fn push_lazy(&mut self, body: Bytes, count: u64, at: Instant) {
        let bytes = body.len().saturating_sub(4 * count as usize);
        self.runs.push_back(body);
        let run = self.runs_base + self.runs.len() as u64 - 1;
        self.lazy.push_back(Lazy {
            run,
            count,
            bytes,
            at,
        });
        self.lazy_count += count;
        self.lazy_bytes += bytes;
        self.next_seq += count;
    }

    /// Lays out every lazy run.
    pub(crate) fn settle(&mut self) {
        while self.settle_one() {}
    }

    /// Lays out the first lazy run; false when there is none.
    fn settle_one(&mut self) -> bool {
        let Some(l) = self.lazy.pop_front() else {
            return false;
        };
        self.lazy_count -= l.count;
        self.lazy_bytes -= l.bytes;
        let body = self.runs[(l.run - self.runs_base) as usize].clone();
        let mut at = 0usize;
        for _ in 0..l.count {
            let len = body
                .get(at..at + 4)
                .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize)
                .filter(|len| at + 4 + len <= body.len());
            // A malformed run (never from a handle) keeps its numbers, with empty payloads.
            let len = len.unwrap_or(0);
            let off = (at + 4).min(body.len());
            self.bytes += len;
            self.append(l.run, off, len, l.at);
            at = off + len;
        }
        true
    }

    /// Drops the oldest sample (and the run buffers no held sample refers to any more).
    pub(crate) fn pop_front(&mut self) -> Option<Entry> {
        if self.entries.is_empty() {
            self.settle_one();
        }
        let e = self.entries.pop_front()?;
        self.bytes -= e.len();
        self.drop_unused_runs();
        Some(e)
    }

    /// Drops every sample below `seq`; returns how many. Whole lazy runs go unread.
    pub(crate) fn pop_below(&mut self, seq: u64) -> u64 {
        let mut n = 0;
        while self.first() < seq {
            if self.entries.is_empty() {
                match self.lazy.front().copied() {
                    Some(l) if self.lazy_first() + l.count <= seq => {
                        self.lazy.pop_front();
                        self.lazy_count -= l.count;
                        self.lazy_bytes -= l.bytes;
                        n += l.count;
                        self.drop_unused_runs();
                        continue;
                    }
                    Some(_) => {
                        self.settle_one();
                    }
                    None => break,
                }
            }
            if self.pop_front().is_none() {
                break;
            }
            n += 1;
        }
        n
    }

    fn drop_unused_runs(&mut self) {
        // With nothing held, the newest buffer stays: samples may be about to be pushed from
        // it (`push_run` comes before their `push_at`).
        let newest = self.runs_base + self.runs.len().saturating_sub(1) as u64;
        let keep_from = self
            .entries
            .front()
            .map(|f| f.run)
            .or_else(|| self.lazy.front().map(|l| l.run))
            .unwrap_or(newest);
        while self.runs_base < keep_from && !self.runs.is_empty() {
            self.runs.pop_front();
            self.runs_base += 1;
        }
    }

    /// Samples held at `seq` or later.
    pub(crate) fn count_from(&self, seq: u64) -> u64 {
        self.next_seq - seq.clamp(self.first(), self.next_seq)
    }

    /// Payload bytes held at `seq` or later: O(1) unless `seq` lies inside a lazy run (then
    /// that run's samples before it are walked, read-only).
    pub(crate) fn bytes_from(&self, seq: u64) -> usize {
        let seq = seq.max(self.first());
        if seq >= self.next_seq {
            return 0;
        }
        if let Some(e) = self.get(seq).filter(|_| seq < self.lazy_first()) {
            return (self.cum - (e.cum - e.len as u64)) as usize + self.lazy_bytes;
        }
        // Inside the lazy runs: the whole runs after the one holding `seq`, and that one's
        // samples from `seq` on.
        let mut run_first = self.lazy_first();
        let mut after = self.lazy_bytes;
        for l in &self.lazy {
            after -= l.bytes;
            if seq < run_first + l.count {
                let body = &self.runs[(l.run - self.runs_base) as usize];
                let (mut at, mut before) = (0usize, 0usize);
                for _ in run_first..seq {
                    let len = body.get(at..at + 4).map_or(0, |b| {
                        u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize
                    });
                    before += len;
                    at += 4 + len;
                }
                return after + l.bytes.saturating_sub(before);
            }
            run_first += l.count;
        }
        0
    }

    /// Drops the samples written `lifespan` or longer before `now`; returns how many.
    pub(crate) fn expire(&mut self, now: Instant, lifespan: Duration) -> u64 {
        let old = |at: Instant| now.saturating_duration_since(at) >= lifespan;
        let mut n = 0;
        while self.entries.front().is_some_and(|e| old(e.at)) {
            self.pop_front();
            n += 1;
        }
        if self.entries.is_empty() {
            while let Some(l) = self.lazy.front().copied().filter(|l| old(l.at)) {
                n += self.pop_below(self.lazy_first() + l.count);
            }
        }
        n
    }

    /// When the oldest sample's lifespan ends.
    pub(crate) fn next_expiry(&self, lifespan: Duration) -> Option<Instant> {
        self.entries
            .front()
            .map(|e| e.at)
            .or_else(|| self.lazy.front().map(|l| l.at))
            .map(|at| at + lifespan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_bytes_from_any_seq() {
        let t = Instant::now();
        let mut h = History::new(4);
        assert_eq!(
            (h.first(), h.last(), h.count_from(1), h.bytes_from(1)),
            (1, 0, 0, 0)
        );
        for n in 1..=4usize {
            h.push(Bytes::from(vec![0; n]), t);
        }
        assert_eq!((h.first(), h.last(), h.bytes()), (1, 4, 10));
        assert_eq!((h.count_from(3), h.bytes_from(3)), (2, 7));
        assert_eq!((h.count_from(0), h.bytes_from(0)), (4, 10));
        assert_eq!((h.count_from(9), h.bytes_from(9)), (0, 0));
        h.pop_front();
        assert_eq!(
            (h.first(), h.bytes(), h.bytes_from(1), h.bytes_from(4)),
            (2, 9, 9, 4)
        );
        assert_eq!(h.get(2).map(|e| e.len()), Some(2));
        assert!(h.get(1).is_none() && h.get(5).is_none());
    }

    #[test]
    fn expiry_drops_the_old_front_only() {
        let t = Instant::now();
        let mut h = History::new(4);
        h.push(Bytes::from_static(b"a"), t);
        h.push(Bytes::from_static(b"b"), t + Duration::from_millis(10));
        let life = Duration::from_millis(20);
        assert_eq!(h.expire(t + Duration::from_millis(19), life), 0);
        assert_eq!(h.next_expiry(life), Some(t + life));
        assert_eq!(h.expire(t + Duration::from_millis(20), life), 1);
        assert_eq!((h.first(), h.len()), (2, 1));
        assert_eq!(h.expire(t + Duration::from_secs(1), life), 1);
        assert_eq!((h.first(), h.last(), h.len()), (3, 2, 0));
    }

    /// `count × (len u32 | payload)` with payload `k` of `k + 1` bytes of value `k`.
    fn body(ks: std::ops::Range<u8>) -> Bytes {
        let mut b = Vec::new();
        for k in ks {
            b.extend_from_slice(&(u32::from(k) + 1).to_be_bytes());
            b.extend(std::iter::repeat_n(k, usize::from(k) + 1));
        }
        Bytes::from(b)
    }

    #[test]
    fn lazy_runs_count_without_reading_and_lay_out_only_when_asked() {
        let t = Instant::now();
        let mut h = History::new(4);
        h.push_lazy(body(0..3), 3, t); // seqs 1..=3: 1, 2, 3 bytes
        h.push_lazy(body(3..5), 2, t); // seqs 4..=5: 4, 5 bytes
        assert_eq!((h.first(), h.last(), h.len(), h.bytes()), (1, 5, 5, 15));
        assert_eq!(
            (h.bytes_from(2), h.bytes_from(4), h.bytes_from(5)),
            (14, 9, 5)
        );
        assert!(h.get(2).is_none(), "not laid out yet");
        // A whole run acknowledged goes unread; the next one is laid out for a repair.
        assert_eq!(h.pop_below(4), 3);
        assert_eq!((h.first(), h.bytes()), (4, 9));
        h.settle_upto(5);
        let e = h.get(5).unwrap().clone();
        assert_eq!(h.payload(&e), Bytes::from(vec![4u8; 5]));
        // Trimming inside a run lays it out and keeps exact bytes.
        h.push_lazy(body(5..8), 3, t); // seqs 6..=8: 6, 7, 8 bytes
        assert_eq!(h.pop_below(7), 3);
        assert_eq!((h.first(), h.bytes(), h.bytes_from(8)), (7, 15, 8));
    }
}
