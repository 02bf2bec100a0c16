//! Loss accounting per publisher from sequence numbers: gaps, late (reordered) arrivals and
//! duplicates, with a bounded memory of which recent sequence numbers were seen.

use ahash::AHashMap;
use std::collections::hash_map::Entry;

/// How many sequence numbers behind the highest one a counter remembers. A message older
/// than that cannot be told from a duplicate; it is counted as `too_old` and stays lost.
pub const WINDOW: u64 = 1 << 16;

/// Ceiling of publishers tracked by one [`LossTracker`]; messages of further publishers are
/// counted in [`LossTracker::untracked`] only.
pub const MAX_PUBLISHERS: usize = 1024;

/// What one arrival was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The next or a later sequence number (a jump opens a gap).
    InOrder,
    /// A number below the highest seen, not seen before: fills a gap.
    Late,
    /// Seen before.
    Duplicate,
    /// Below the remembered window: cannot be classified, not counted as received.
    TooOld,
}

/// Loss bookkeeping of one publisher's sequence numbers (which start at 0).
#[derive(Debug, Clone)]
pub struct GapCounter {
    highest: Option<u64>,
    seen: Vec<u64>,
    unique: u64,
    duplicates: u64,
    late: u64,
    too_old: u64,
    gaps: u64,
    total: Option<u64>,
}

impl Default for GapCounter {
    fn default() -> Self {
        GapCounter {
            highest: None,
            seen: vec![0; (WINDOW / 64) as usize],
            unique: 0,
            duplicates: 0,
            late: 0,
            too_old: 0,
            gaps: 0,
            total: None,
        }
    }
}

impl GapCounter {
    fn bit(&self, seq: u64) -> bool {
        let i = seq % WINDOW;
        self.seen[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, seq: u64, on: bool) {
        let i = seq % WINDOW;
        let w = &mut self.seen[(i / 64) as usize];
        if on {
            *w |= 1 << (i % 64);
        } else {
            *w &= !(1 << (i % 64));
        }
    }

    /// Records the arrival of `seq`.
    pub fn record(&mut self, seq: u64) -> Arrival {
        let next = self.highest.map_or(0, |h| h + 1);
        if seq >= next {
            if seq > next {
                self.gaps += 1;
            }
            // Slots between the old highest and `seq` now stand for not-yet-seen numbers.
            if seq - next >= WINDOW {
                self.seen.iter_mut().for_each(|w| *w = 0);
            } else {
                for s in next..seq {
                    self.set(s, false);
                }
            }
            self.set(seq, true);
            self.highest = Some(seq);
            self.unique += 1;
            return Arrival::InOrder;
        }
        let highest = next - 1;
        if highest - seq >= WINDOW {
            self.too_old += 1;
            Arrival::TooOld
        } else if self.bit(seq) {
            self.duplicates += 1;
            Arrival::Duplicate
        } else {
            self.set(seq, true);
            self.unique += 1;
            self.late += 1;
            Arrival::Late
        }
    }

    /// The publisher said it sent `total` messages: loss after the last arrival counts too.
    pub fn set_total(&mut self, total: u64) {
        self.total = Some(total);
    }

    /// Whether the end-of-stream marker was seen.
    pub fn ended(&self) -> bool {
        self.total.is_some()
    }

    /// Distinct messages received.
    pub fn received(&self) -> u64 {
        self.unique
    }

    /// Messages missing: of the `total` sent when known, else of `0..=highest`.
    pub fn lost(&self) -> u64 {
        let expected = self
            .total
            .unwrap_or(self.highest.map_or(0, |h| h + 1))
            .max(self.highest.map_or(0, |h| h + 1));
        expected.saturating_sub(self.unique)
    }

    /// Arrivals of a number already seen.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Arrivals below the highest number that filled a gap (reordering).
    pub fn late(&self) -> u64 {
        self.late
    }

    /// Arrivals too far behind to classify.
    pub fn too_old(&self) -> u64 {
        self.too_old
    }

    /// Jumps forward in the sequence (each opens one gap of one or more messages).
    pub fn gaps(&self) -> u64 {
        self.gaps
    }
}

/// Loss totals over every publisher.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LossTotals {
    /// Publishers seen.
    pub publishers: u64,
    /// Distinct messages received.
    pub received: u64,
    /// Messages missing.
    pub lost: u64,
    /// Duplicate arrivals.
    pub duplicates: u64,
    /// Late (reordered) arrivals.
    pub late: u64,
    /// Gaps opened.
    pub gaps: u64,
    /// Arrivals too old to classify.
    pub too_old: u64,
    /// Publishers that sent their end-of-stream marker.
    pub ended: u64,
    /// Messages of publishers beyond [`MAX_PUBLISHERS`] (not tracked).
    pub untracked: u64,
}

/// One [`GapCounter`] per publisher, up to [`MAX_PUBLISHERS`].
#[derive(Debug, Default)]
pub struct LossTracker {
    by_publisher: AHashMap<u64, GapCounter>,
    untracked: u64,
}

impl LossTracker {
    fn counter(&mut self, publisher: u64) -> Option<&mut GapCounter> {
        // One hash lookup per message (this runs for every message the harness receives).
        let full = self.by_publisher.len() >= MAX_PUBLISHERS;
        match self.by_publisher.entry(publisher) {
            Entry::Occupied(o) => Some(o.into_mut()),
            Entry::Vacant(_) if full => {
                self.untracked += 1;
                None
            }
            Entry::Vacant(v) => Some(v.insert(GapCounter::default())),
        }
    }

    /// Records a data message; `None` when the publisher is over the ceiling.
    pub fn record(&mut self, publisher: u64, seq: u64) -> Option<Arrival> {
        self.counter(publisher).map(|c| c.record(seq))
    }

    /// Records a publisher's end-of-stream marker.
    pub fn end(&mut self, publisher: u64, total: u64) {
        if let Some(c) = self.counter(publisher) {
            c.set_total(total);
        }
    }

    /// Publishers whose end-of-stream marker arrived.
    pub fn ended(&self) -> usize {
        self.by_publisher.values().filter(|c| c.ended()).count()
    }

    /// Sums over every publisher.
    pub fn totals(&self) -> LossTotals {
        let mut t = LossTotals {
            untracked: self.untracked,
            ..LossTotals::default()
        };
        for c in self.by_publisher.values() {
            t.publishers += 1;
            t.received += c.received();
            t.lost += c.lost();
            t.duplicates += c.duplicates();
            t.late += c.late();
            t.gaps += c.gaps();
            t.too_old += c.too_old();
            t.ended += u64::from(c.ended());
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(seqs: &[u64]) -> GapCounter {
        let mut g = GapCounter::default();
        for &s in seqs {
            g.record(s);
        }
        g
    }

    #[test]
    fn in_order_stream_has_no_loss() {
        let g = feed(&(0..1000).collect::<Vec<_>>());
        assert_eq!(
            (g.received(), g.lost(), g.gaps(), g.duplicates()),
            (1000, 0, 0, 0)
        );
    }

    #[test]
    fn gaps_are_counted_and_filled_by_late_arrivals() {
        let mut g = feed(&[0, 1, 4, 5, 9]);
        assert_eq!(g.lost(), 5, "2,3,6,7,8 missing");
        assert_eq!(g.gaps(), 2);
        assert_eq!(g.record(3), Arrival::Late);
        assert_eq!(g.record(7), Arrival::Late);
        assert_eq!((g.lost(), g.late()), (3, 2));
    }

    #[test]
    fn missing_first_messages_count() {
        let g = feed(&[3, 4]);
        assert_eq!((g.lost(), g.gaps()), (3, 1));
    }

    #[test]
    fn duplicates_are_not_received_twice() {
        let mut g = feed(&[0, 1, 2]);
        assert_eq!(g.record(1), Arrival::Duplicate);
        assert_eq!(g.record(2), Arrival::Duplicate);
        g.record(4);
        assert_eq!(g.record(4), Arrival::Duplicate);
        assert_eq!(g.record(3), Arrival::Late);
        assert_eq!(g.record(3), Arrival::Duplicate);
        assert_eq!((g.received(), g.duplicates(), g.lost()), (5, 4, 0));
    }

    #[test]
    fn end_marker_reveals_tail_loss() {
        let mut g = feed(&[0, 1, 2]);
        assert_eq!(g.lost(), 0);
        g.set_total(10);
        assert!(g.ended());
        assert_eq!(g.lost(), 7);
    }

    #[test]
    fn window_wraps_without_stale_bits() {
        let mut g = GapCounter::default();
        g.record(0);
        // Jump by more than the window: slot of 0 is reused by WINDOW and must read unseen.
        g.record(WINDOW + 5);
        assert_eq!(g.record(WINDOW), Arrival::Late);
        assert_eq!(g.record(WINDOW), Arrival::Duplicate);
        assert_eq!(g.record(0), Arrival::TooOld);
        assert_eq!(g.lost(), WINDOW + 6 - 3);
        // A short jump clears only the slots it passes over.
        let mut h = GapCounter::default();
        for s in 0..WINDOW {
            h.record(s);
        }
        h.record(WINDOW + 2);
        assert_eq!(h.record(WINDOW + 1), Arrival::Late);
        assert_eq!(h.record(WINDOW + 2), Arrival::Duplicate);
        assert_eq!(h.record(3), Arrival::Duplicate);
        assert_eq!(h.lost(), 1);
    }

    #[test]
    fn tracker_separates_publishers_and_bounds_them() {
        let mut t = LossTracker::default();
        t.record(1, 0);
        t.record(1, 2);
        t.record(2, 0);
        t.record(2, 0);
        t.end(2, 3);
        let tot = t.totals();
        assert_eq!(tot.publishers, 2);
        assert_eq!(tot.received, 3);
        assert_eq!(tot.lost, 1 + 2);
        assert_eq!(tot.duplicates, 1);
        assert_eq!(t.ended(), 1);
        for p in 10..(10 + MAX_PUBLISHERS as u64) {
            t.record(p, 0);
        }
        assert_eq!(t.totals().publishers, MAX_PUBLISHERS as u64);
        assert_eq!(t.totals().untracked, 2);
    }
}
