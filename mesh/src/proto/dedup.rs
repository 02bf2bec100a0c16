//! The gossip dedup cache: "have I seen this message id?", bounded by size and by age.
//!
//! One instance per data shard, holding the ids whose originator hashes to that shard
//! ([`dedup_shard`]). A message id is the originator's 8-byte prefix and a per-originator
//! counter that goes up by one per message (mesh-v1.md), so the ids a node sees come in runs.
//! The cache stores them in **blocks**: one entry per (originator, `counter / 64`) holding a
//! 64-bit mask of the counters seen. A flood of one originator's messages touches one hot
//! entry per 64 messages instead of one random hash-table slot per message (plus one more to
//! evict the oldest id), which kept the old id-per-entry cache out of the CPU caches at its
//! 100 000-id bound. Sparse ids (targeted traffic seen only in part) cost one entry each, as
//! before.
//!
//! The semantics are the C++ library's, at block granularity: an id is remembered until
//! `max_entries` newer ids pushed its block out (oldest block first, so at most 63 ids more
//! than the bound are ever held), or until its block has seen nothing for `ttl` (an id is
//! never forgotten sooner than `ttl` after it was inserted). Steady state allocates nothing.

use crate::MsgId;
use ahash::AHashMap;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Entries preallocated up front; the cache grows beyond this (to its ceiling) only when used.
pub const INITIAL_CAPACITY: usize = 4096;

/// log2 of the counters one block covers.
const BLOCK_SHIFT: u32 = 6;

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
    /// Ids forgotten early because the cache was full (`maxDedupEntries` reached).
    pub evicted_by_size: u64,
    /// Ids forgotten by the age sweep (`dedupTtl` passed).
    pub expired: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct BlockKey {
    origin: u64,
    block: u64,
}

impl BlockKey {
    fn of(id: &MsgId) -> (BlockKey, u64) {
        let counter = id.counter();
        let key = BlockKey {
            origin: id.origin_prefix(),
            block: counter >> BLOCK_SHIFT,
        };
        (key, 1u64 << (counter & ((1 << BLOCK_SHIFT) - 1)))
    }
}

#[derive(Debug)]
struct Block {
    seen: u64,
    /// Milliseconds since the cache's epoch of the latest insert.
    last_ms: u64,
}

/// A set of recently seen message ids, bounded by `max_entries` and by `ttl`.
#[derive(Debug)]
pub struct DedupCache {
    blocks: AHashMap<BlockKey, Block>,
    /// Every block once, in the order of its first insert (a block the sweep found still in
    /// use goes to the back again); the front is evicted first.
    ring: VecDeque<(BlockKey, u64)>,
    ids: usize,
    max_entries: usize,
    ttl: Duration,
    epoch: Instant,
    next_sweep: Instant,
    stats: DedupStats,
}

impl DedupCache {
    /// An empty cache holding at most `max_entries` ids (at least 1; rounded up to a whole
    /// block) for at least `ttl` each.
    pub fn new(max_entries: usize, ttl: Duration, now: Instant) -> DedupCache {
        let max_entries = max_entries.max(1);
        let cap = max_entries.min(INITIAL_CAPACITY);
        DedupCache {
            blocks: AHashMap::with_capacity(cap),
            ring: VecDeque::with_capacity(cap),
            ids: 0,
            max_entries,
            ttl,
            epoch: now,
            next_sweep: now + Self::sweep_period(ttl),
            stats: DedupStats::default(),
        }
    }

    fn sweep_period(ttl: Duration) -> Duration {
        (ttl / 4).max(Duration::from_millis(1))
    }

    fn ms(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_millis() as u64
    }

    /// Records `id` as seen at `now`. Returns `true` if it was new, `false` for a duplicate
    /// (which is left untouched).
    pub fn check_and_insert(&mut self, id: MsgId, now: Instant) -> bool {
        let (key, bit) = BlockKey::of(&id);
        let now_ms = self.ms(now);
        match self.blocks.get_mut(&key) {
            Some(b) if b.seen & bit != 0 => {
                self.stats.duplicates += 1;
                return false;
            }
            Some(b) => {
                b.seen |= bit;
                b.last_ms = b.last_ms.max(now_ms);
            }
            None => {
                self.blocks.insert(
                    key,
                    Block {
                        seen: bit,
                        last_ms: now_ms,
                    },
                );
                self.ring.push_back((key, now_ms));
            }
        }
        self.ids += 1;
        self.stats.inserted += 1;
        while self.ids > self.max_entries {
            // Never the block just written to: the id inserted now must stay.
            match self.ring.front() {
                Some(&(front, _)) if front != key => {
                    self.ring.pop_front();
                    let n = self.forget(&front);
                    self.stats.evicted_by_size += n;
                }
                _ => break,
            }
        }
        true
    }

    /// Drops a block; returns how many ids it held.
    fn forget(&mut self, key: &BlockKey) -> u64 {
        let n = self
            .blocks
            .remove(key)
            .map_or(0, |b| u64::from(b.seen.count_ones()));
        self.ids -= n as usize;
        n
    }

    /// True if `id` is currently remembered (does not count as a duplicate).
    pub fn contains(&self, id: &MsgId) -> bool {
        let (key, bit) = BlockKey::of(id);
        self.blocks.get(&key).is_some_and(|b| b.seen & bit != 0)
    }

    /// Number of remembered ids.
    pub fn len(&self) -> usize {
        self.ids
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.ids == 0
    }

    /// The counters so far.
    pub fn stats(&self) -> DedupStats {
        self.stats
    }

    /// When [`handle_timeout`](Self::handle_timeout) wants to run next (every `ttl/4`).
    pub fn poll_timeout(&self) -> Instant {
        self.next_sweep
    }

    /// Runs the age sweep if it is due: forgets every block idle for `ttl`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if now < self.next_sweep {
            return;
        }
        self.sweep(now);
        self.next_sweep = now + Self::sweep_period(self.ttl);
    }

    /// Forgets every block whose latest insert is `ttl` or more before `now`. The ring is
    /// (nearly) in insertion order, so the sweep stops at the first young entry; a block that
    /// is old at the front but was written to since goes to the back with its latest time.
    pub fn sweep(&mut self, now: Instant) {
        let now_ms = self.ms(now);
        let ttl_ms = self.ttl.as_millis() as u64;
        while let Some(&(key, at)) = self.ring.front() {
            if now_ms.saturating_sub(at) < ttl_ms {
                break;
            }
            self.ring.pop_front();
            match self.blocks.get(&key).map(|b| b.last_ms) {
                Some(last) if now_ms.saturating_sub(last) < ttl_ms => {
                    self.ring.push_back((key, last));
                }
                _ => {
                    let n = self.forget(&key);
                    self.stats.expired += n;
                }
            }
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

    /// Ids 64 apart fall in different blocks: one entry each, like the worst case of
    /// targeted traffic seen only in part.
    fn sparse(n: u64) -> MsgId {
        id(n * 64)
    }

    #[test]
    fn size_bound_evicts_oldest_first() {
        let t = Instant::now();
        let mut d = DedupCache::new(3, Duration::from_secs(30), t);
        for n in 0..5 {
            assert!(d.check_and_insert(sparse(n), t));
        }
        assert_eq!(d.len(), 3);
        assert_eq!(d.stats().evicted_by_size, 2);
        assert!(!d.contains(&sparse(0)) && !d.contains(&sparse(1)));
        assert!(d.contains(&sparse(2)) && d.contains(&sparse(4)));
        // An evicted id is new again: the size bound trades memory for a possible re-delivery.
        assert!(d.check_and_insert(sparse(0), t));
    }

    #[test]
    fn a_run_of_ids_shares_blocks_and_the_bound_counts_ids() {
        let t = Instant::now();
        let mut d = DedupCache::new(128, Duration::from_secs(30), t);
        for n in 0..128 {
            assert!(d.check_and_insert(id(n), t));
        }
        assert_eq!((d.len(), d.blocks.len()), (128, 2));
        for n in 0..128 {
            assert!(!d.check_and_insert(id(n), t), "{n} is a duplicate");
        }
        // One more id makes 129 > 128: the oldest whole block (ids 0..64) goes.
        assert!(d.check_and_insert(id(128), t));
        assert_eq!(d.len(), 65);
        assert_eq!(d.stats().evicted_by_size, 64);
        assert!(!d.contains(&id(63)) && d.contains(&id(64)) && d.contains(&id(128)));
        // Ids out of order and with gaps inside a block are exact.
        let mut g = DedupCache::new(1000, Duration::from_secs(30), t);
        for n in [7u64, 3, 63, 0, 5] {
            assert!(g.check_and_insert(id(n), t));
        }
        for n in 0..64u64 {
            assert_eq!(g.contains(&id(n)), [7, 3, 63, 0, 5].contains(&n), "{n}");
        }
        // Other originators never collide with these counters.
        assert!(g.check_and_insert(MsgId::new(&PeerId([8; 16]), 7), t));
    }

    #[test]
    fn the_block_being_written_is_never_evicted() {
        let t = Instant::now();
        let mut d = DedupCache::new(3, Duration::from_secs(30), t);
        for n in 0..5 {
            assert!(d.check_and_insert(id(n), t));
        }
        // All five share one block: held whole (the bound is rounded up to a block).
        assert_eq!(d.len(), 5);
        assert!(!d.check_and_insert(id(0), t));
        // A new block pushes the old one out.
        assert!(d.check_and_insert(sparse(9), t));
        assert_eq!(d.len(), 1);
        assert!(d.check_and_insert(id(0), t));
    }

    #[test]
    fn age_bound_sweeps_every_quarter_ttl() {
        let t = Instant::now();
        let ttl = Duration::from_millis(400);
        let mut d = DedupCache::new(100, ttl, t);
        assert_eq!(d.poll_timeout(), t + Duration::from_millis(100));
        d.check_and_insert(sparse(1), t);
        d.check_and_insert(sparse(2), t + Duration::from_millis(250));
        d.handle_timeout(t + Duration::from_millis(100));
        assert_eq!(
            (d.len(), d.poll_timeout()),
            (2, t + Duration::from_millis(200))
        );
        d.handle_timeout(t + Duration::from_millis(450));
        assert_eq!(d.len(), 1);
        assert!(!d.contains(&sparse(1)));
        assert_eq!(d.stats().expired, 1);
        assert_eq!(d.poll_timeout(), t + Duration::from_millis(550));
        // Not due yet: nothing happens even though sparse(2) is old by then.
        d.handle_timeout(t + Duration::from_millis(549));
        assert_eq!(d.len(), 1);
        d.handle_timeout(t + Duration::from_millis(650));
        assert!(d.is_empty());
    }

    #[test]
    fn an_id_is_never_forgotten_sooner_than_ttl_after_its_insert() {
        let t = Instant::now();
        let ttl = Duration::from_millis(400);
        let mut d = DedupCache::new(100, ttl, t);
        d.check_and_insert(id(1), t);
        d.check_and_insert(id(2), t + Duration::from_millis(300));
        // The block was opened 500 ms ago but written 200 ms ago: kept whole.
        d.sweep(t + Duration::from_millis(500));
        assert!(d.contains(&id(1)) && d.contains(&id(2)));
        d.sweep(t + Duration::from_millis(699));
        assert_eq!(d.len(), 2);
        d.sweep(t + Duration::from_millis(700));
        assert!(d.is_empty());
        assert_eq!(d.stats().expired, 2);
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
