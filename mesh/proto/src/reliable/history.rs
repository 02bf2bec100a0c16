//! A writer's history: the contiguous run of samples its node still holds, oldest first.
//!
//! **Owns:** the held samples (the caller's `Bytes`, never copied), their byte total and write
//! times, and O(1) "bytes held from seq s on". **Must not touch:** what to keep (the writer's
//! keep-last / keep-all policy decides what to push and pop), readers, frames.

use bytes::Bytes;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One held sample.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) payload: Bytes,
    pub(crate) at: Instant,
    /// Payload bytes pushed up to and including this sample, since the history was made.
    cum: u64,
}

/// Samples `first() ..= next_seq() - 1` (all of them, or none: held seqs never have holes).
#[derive(Debug)]
pub(crate) struct History {
    entries: VecDeque<Entry>,
    next_seq: u64,
    bytes: usize,
    cum: u64,
}

impl History {
    pub(crate) fn new(capacity: usize) -> History {
        History {
            entries: VecDeque::with_capacity(capacity),
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

    /// Appends the next sample.
    pub(crate) fn push(&mut self, payload: Bytes, at: Instant) {
        self.bytes += payload.len();
        self.cum += payload.len() as u64;
        self.entries.push_back(Entry {
            payload,
            at,
            cum: self.cum,
        });
        self.next_seq += 1;
    }

    /// Drops the oldest sample.
    pub(crate) fn pop_front(&mut self) -> Option<Entry> {
        let e = self.entries.pop_front()?;
        self.bytes -= e.payload.len();
        Some(e)
    }

    /// Samples held at `seq` or later.
    pub(crate) fn count_from(&self, seq: u64) -> u64 {
        self.next_seq - seq.clamp(self.first(), self.next_seq)
    }

    /// Payload bytes held at `seq` or later, in O(1).
    pub(crate) fn bytes_from(&self, seq: u64) -> usize {
        match self.get(seq.max(self.first())) {
            Some(e) => (self.cum - (e.cum - e.payload.len() as u64)) as usize,
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
        assert_eq!(h.get(2).map(|e| e.payload.len()), Some(2));
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
