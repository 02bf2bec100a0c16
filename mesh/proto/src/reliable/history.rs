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

/// Samples `first() ..= next_seq() - 1` (all of them, or none: held seqs never have holes).
#[derive(Debug)]
pub(crate) struct History {
    entries: VecDeque<Entry>,
    /// The buffers the entries are ranges of; `runs[0]` has id `runs_base`.
    runs: VecDeque<Bytes>,
    runs_base: u64,
    next_seq: u64,
    bytes: usize,
    cum: u64,
}

impl History {
    pub(crate) fn new(capacity: usize) -> History {
        History {
            entries: VecDeque::with_capacity(capacity),
            runs: VecDeque::new(),
            runs_base: 0,
            next_seq: 1,
            bytes: 0,
            cum: 0,
        }
    }

    /// The first held seq; `next_seq()` when nothing is held.
    pub(crate) fn first(&self) -> u64 {
        self.next_seq - self.entries.len() as u64
    }

    /// The seq the next sample gets.
    /// Makes the (empty) history's next sample `next`: a writer whose history starts
    /// mid-stream holds nothing below it, so nothing below it can be repaired.
    pub(crate) fn start_at(&mut self, next: u64) {
        debug_assert!(
            self.entries.is_empty(),
            "only an empty history moves its start"
        );
        self.next_seq = next.max(1);
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The highest seq written (0: none).
    pub(crate) fn last(&self) -> u64 {
        self.next_seq - 1
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn get(&self, seq: u64) -> Option<&Entry> {
        let i = seq.checked_sub(self.first())?;
        self.entries.get(usize::try_from(i).ok()?)
    }

    /// The payload of `e` (a slice of its run buffer, no copy).
    pub(crate) fn payload(&self, e: &Entry) -> Bytes {
        let run = &self.runs[(e.run - self.runs_base) as usize];
        run.slice(e.off as usize..(e.off + e.len) as usize)
    }

    /// Holds `buf` for the samples [`push_at`](Self::push_at) takes from it; returns its id.
    /// A buffer no sample refers to is let go with the next pop.
    pub(crate) fn push_run(&mut self, buf: Bytes) -> u64 {
        self.runs.push_back(buf);
        self.runs_base + self.runs.len() as u64 - 1
    }

    /// Appends the next sample: bytes `off .. off + len` of run `run`.
    pub(crate) fn push_at(&mut self, run: u64, off: usize, len: usize, at: Instant) {
        debug_assert!(
            run >= self.runs_base && off + len <= self.runs[(run - self.runs_base) as usize].len()
        );
        self.bytes += len;
        self.cum += len as u64;
        self.entries.push_back(Entry {
            run,
            off: off as u32,
            len: len as u32,
            at,
            cum: self.cum,
        });
        self.next_seq += 1;
    }

    /// Appends the next sample, held alone.
    pub(crate) fn push(&mut self, payload: Bytes, at: Instant) {
        let len = payload.len();
        let run = self.push_run(payload);
        self.push_at(run, 0, len, at);
    }

    /// Drops the oldest sample (and the run buffers no held sample refers to any more).
    pub(crate) fn pop_front(&mut self) -> Option<Entry> {
        let e = self.entries.pop_front()?;
        self.bytes -= e.len();
        // With nothing held, the newest buffer stays: samples may be about to be pushed from
        // it (`push_run` comes before their `push_at`).
        let newest = self.runs_base + self.runs.len().saturating_sub(1) as u64;
        let keep_from = self.entries.front().map_or(newest, |f| f.run);
        while self.runs_base < keep_from && !self.runs.is_empty() {
            self.runs.pop_front();
            self.runs_base += 1;
        }
        Some(e)
    }

    /// Samples held at `seq` or later.
    pub(crate) fn count_from(&self, seq: u64) -> u64 {
        self.next_seq - seq.clamp(self.first(), self.next_seq)
    }

    /// Payload bytes held at `seq` or later, in O(1).
    pub(crate) fn bytes_from(&self, seq: u64) -> usize {
        match self.get(seq.max(self.first())) {
            Some(e) => (self.cum - (e.cum - e.len as u64)) as usize,
            None => 0,
        }
    }

    /// Drops the samples written `lifespan` or longer before `now`; returns how many.
    pub(crate) fn expire(&mut self, now: Instant, lifespan: Duration) -> u64 {
        let mut n = 0;
        while self
            .entries
            .front()
            .is_some_and(|e| now.saturating_duration_since(e.at) >= lifespan)
        {
            self.pop_front();
            n += 1;
        }
        n
    }

    /// When the oldest sample's lifespan ends.
    pub(crate) fn next_expiry(&self, lifespan: Duration) -> Option<Instant> {
        self.entries.front().map(|e| e.at + lifespan)
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
}
