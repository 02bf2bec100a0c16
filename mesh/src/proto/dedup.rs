//! The gossip dedup cache: "have I seen this message id?", bounded by size and by age.
//!
//! One instance per data shard, holding the ids whose originator hashes to that shard
//! ([`dedup_shard`]). Lookups and inserts are O(1): an ahash set answers membership and a ring of
//! `(id, inserted_at)` in insertion order tells which entry is oldest. Both are preallocated
//! up to [`INITIAL_CAPACITY`] and grow geometrically up to the ceiling, after which a full cache
//! evicts the oldest entry to make room, so steady state allocates nothing per message.

use crate::MsgId;
use ahash::AHashSet;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Entries preallocated up front; the cache grows beyond this (to its ceiling) only when used.
pub const INITIAL_CAPACITY: usize = 4096;

/// The shard (of `shards`) that owns the dedup state of `id`: the originator's hash, the same
/// value [`crate::PeerId::shard_hash`] gives for the originator, so a message that arrives
/// straight from its originator is deduplicated on the shard that owns that link.
pub fn dedup_shard(id: &MsgId, shards: usize) -> usize {
    (id.origin_prefix() % shards.max(1) as u64) as usize
}

/// Counters of a [`DedupCache`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DedupStats {
    /// Ids inserted.
    pub inserted: u64,
    /// Lookups that found the id already present.
    pub duplicates: u64,
    /// Entries evicted early because the cache was full (`maxDedupEntries` reached).
    pub evicted_by_size: u64,
    /// Entries removed by the age sweep (`dedupTtl` passed).
    pub expired: u64,
}

/// A set of recently seen message ids, bounded by `max_entries` and by `ttl`.
#[derive(Debug)]
pub struct DedupCache {
    set: AHashSet<MsgId>,
    ring: VecDeque<(MsgId, Instant)>,
    max_entries: usize,
    ttl: Duration,
    next_sweep: Instant,
    stats: DedupStats,
}

impl DedupCache {
    /// An empty cache holding at most `max_entries` ids (at least 1) for at most `ttl`.
    pub fn new(max_entries: usize, ttl: Duration, now: Instant) -> DedupCache {
        let max_entries = max_entries.max(1);
        let cap = max_entries.min(INITIAL_CAPACITY);
        DedupCache {
            set: AHashSet::with_capacity(cap),
            ring: VecDeque::with_capacity(cap),
            max_entries,
            ttl,
            next_sweep: now + Self::sweep_period(ttl),
            stats: DedupStats::default(),
        }
    }

    fn sweep_period(ttl: Duration) -> Duration {
        (ttl / 4).max(Duration::from_millis(1))
    }

    /// Records `id` as seen at `now`. Returns `true` if it was new, `false` for a duplicate
    /// (which is left untouched: its age keeps counting from the first sighting).
    pub fn check_and_insert(&mut self, id: MsgId, now: Instant) -> bool {
        if self.set.contains(&id) {
            self.stats.duplicates += 1;
            return false;
        }
        if self.ring.len() >= self.max_entries {
            if let Some((old, _)) = self.ring.pop_front() {
                self.set.remove(&old);
                self.stats.evicted_by_size += 1;
            }
        }
        self.set.insert(id);
        self.ring.push_back((id, now));
        self.stats.inserted += 1;
        true
    }

    /// True if `id` is currently remembered (does not count as a duplicate).
    pub fn contains(&self, id: &MsgId) -> bool {
        self.set.contains(id)
    }

    /// Number of remembered ids.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// The counters so far.
    pub fn stats(&self) -> DedupStats {
        self.stats
    }

    /// When [`handle_timeout`](Self::handle_timeout) wants to run next (every `ttl/4`).
    pub fn poll_timeout(&self) -> Instant {
        self.next_sweep
    }

    /// Runs the age sweep if it is due: drops every entry older than `ttl`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if now < self.next_sweep {
            return;
        }
        self.sweep(now);
        self.next_sweep = now + Self::sweep_period(self.ttl);
    }

    /// Drops every entry inserted more than `ttl` before `now`. The ring is in insertion order,
    /// and insertion times never decrease, so the sweep stops at the first young entry.
    pub fn sweep(&mut self, now: Instant) {
        while let Some(&(id, at)) = self.ring.front() {
            if now.saturating_duration_since(at) < self.ttl {
                break;
            }
            self.ring.pop_front();
            self.set.remove(&id);
            self.stats.expired += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PeerId;

    fn id(n: u64) -> MsgId {
        MsgId::new(&PeerId([7; 16]), n)
    }

    #[test]
    fn duplicate_is_detected_and_counted() {
        let t = Instant::now();
        let mut d = DedupCache::new(10, Duration::from_secs(30), t);
        assert!(d.check_and_insert(id(1), t));
        assert!(!d.check_and_insert(id(1), t));
        assert_eq!(d.stats().duplicates, 1);
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn size_bound_evicts_oldest_first() {
        let t = Instant::now();
        let mut d = DedupCache::new(3, Duration::from_secs(30), t);
        for n in 0..5 {
            assert!(d.check_and_insert(id(n), t));
        }
        assert_eq!(d.len(), 3);
        assert_eq!(d.stats().evicted_by_size, 2);
        assert!(!d.contains(&id(0)) && !d.contains(&id(1)));
        assert!(d.contains(&id(2)) && d.contains(&id(4)));
        // An evicted id is new again: the size bound trades memory for a possible re-delivery.
        assert!(d.check_and_insert(id(0), t));
    }

    #[test]
    fn age_bound_sweeps_every_quarter_ttl() {
        let t = Instant::now();
        let ttl = Duration::from_millis(400);
        let mut d = DedupCache::new(100, ttl, t);
        assert_eq!(d.poll_timeout(), t + Duration::from_millis(100));
        d.check_and_insert(id(1), t);
        d.check_and_insert(id(2), t + Duration::from_millis(250));
        d.handle_timeout(t + Duration::from_millis(100));
        assert_eq!(
            (d.len(), d.poll_timeout()),
            (2, t + Duration::from_millis(200))
        );
        d.handle_timeout(t + Duration::from_millis(450));
        assert_eq!(d.len(), 1);
        assert!(!d.contains(&id(1)));
        assert_eq!(d.stats().expired, 1);
        assert_eq!(d.poll_timeout(), t + Duration::from_millis(550));
        // Not due yet: nothing happens even though id(2) is old by then.
        d.handle_timeout(t + Duration::from_millis(549));
        assert_eq!(d.len(), 1);
        d.handle_timeout(t + Duration::from_millis(650));
        assert!(d.is_empty());
    }

    #[test]
    fn shard_of_message_matches_shard_of_originator() {
        let origin = PeerId([0xab; 16]);
        for shards in 1..9 {
            assert_eq!(
                dedup_shard(&MsgId::new(&origin, 99), shards) as u64,
                origin.shard_hash() % shards as u64
            );
        }
    }
}
