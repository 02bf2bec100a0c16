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
//!
//! The per-message path avoids the hash table when it can: consecutive ids of one originator
//! nearly always land in the block the previous one did, so a small table of the latest block
//! per originator ("hot" entries, direct-mapped by originator) answers most lookups, and a
//! stream from a few originators taking turns keeps each of theirs. The blocks themselves live
//! in the eviction ring, each numbered by a sequence number that is never reused, so a hot
//! entry stays valid exactly while its number is still in the ring: forgetting a block needs no
//! bookkeeping beyond moving the ring's head (a block the sweep requeues is renumbered, and its
//! hot entry with it). The shard hands the same `now` to a whole batch, so the last `now` and
//! its millisecond value are kept and reused too.

use crate::MsgId;
use ahash::AHashMap;
use std::collections::hash_map::Entry;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Entries preallocated up front; the cache grows beyond this (to its ceiling) only when used.
pub const INITIAL_CAPACITY: usize = 4096;

/// log2 of the counters one block covers.
const BLOCK_SHIFT: u32 = 6;

/// log2 of the number of hot entries.
const HOT_BITS: u32 = 4;

/// The shard (of `shards`) that owns the dedup state of `id`: the originator's hash, the same
/// value [`crate::PeerId::shard_hash`] gives for the originator, so a message that arrives
/// straight from its originator is deduplicated on the shard that owns that link.
pub fn dedup_shard(id: &MsgId, shards: usize) -> usize {
    // One shard (the default) owns everything: no division on every received message.
    if shards <= 1 {
        return 0;
    }
    (id.origin_prefix() % shards as u64) as usize
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

    /// The hot entry this key's originator uses. The originator prefix's low bits pick the
    /// shard, so they are nearly constant within one cache: mix all of them into the top bits.
    fn hot_slot(&self) -> usize {
        (self.origin.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - HOT_BITS)) as usize
    }
}

#[derive(Debug)]
struct Block {
    key: BlockKey,
    seen: u64,
    /// Milliseconds since the cache's epoch of the latest insert.
    last_ms: u64,
    /// Milliseconds since the cache's epoch when the block took its place in the ring: its
    /// first insert, or its latest insert when the sweep found it still in use.
    queued_ms: u64,
}

/// A recently used block: `seq` is its sequence number in the ring when it was looked up.
#[derive(Debug, Clone, Copy)]
struct Hot {
    key: BlockKey,
    seq: u64,
}

/// A set of recently seen message ids, bounded by `max_entries` and by `ttl`.
#[derive(Debug)]
pub struct DedupCache {
    /// Every block once, in the order of its first insert (a block the sweep found still in
    /// use goes to the back again); the front is evicted first. `blocks[i]` has sequence
    /// number `head_seq + i`.
    blocks: VecDeque<Block>,
    /// The sequence number of `blocks[0]`. Numbers only grow (the first block gets 1), so a
    /// number below it belongs to a block forgotten or moved, and 0 to none.
    head_seq: u64,
    /// The sequence number of each block.
    index: AHashMap<BlockKey, u64>,
    hot: [Hot; 1 << HOT_BITS],
    ids: usize,
    max_entries: usize,
    ttl: Duration,
    epoch: Instant,
    /// The latest `now` converted to milliseconds, and its value.
    clock: (Instant, u64),
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
            blocks: VecDeque::with_capacity(cap),
            head_seq: 1,
            index: AHashMap::with_capacity(cap),
            hot: [Hot {
                key: BlockKey {
                    origin: 0,
                    block: 0,
                },
                seq: 0,
            }; 1 << HOT_BITS],
            ids: 0,
            max_entries,
            ttl,
            epoch: now,
            clock: (now, 0),
            next_sweep: now + Self::sweep_period(ttl),
            stats: DedupStats::default(),
        }
    }

    fn sweep_period(ttl: Duration) -> Duration {
        (ttl / 4).max(Duration::from_millis(1))
    }

    fn ms(&mut self, t: Instant) -> u64 {
        if t != self.clock.0 {
            self.clock = (
                t,
                t.saturating_duration_since(self.epoch).as_millis() as u64,
            );
        }
        self.clock.1
    }

    /// The sequence number of the block `key`, added (empty, queued at `now_ms`) if missing.
    fn block_seq(&mut self, key: BlockKey, now_ms: u64) -> u64 {
        let hot = &mut self.hot[key.hot_slot()];
        if hot.key == key && hot.seq >= self.head_seq {
            return hot.seq;
        }
        let seq = match self.index.entry(key) {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(e) => {
                let seq = self.head_seq + self.blocks.len() as u64;
                e.insert(seq);
                self.blocks.push_back(Block {
                    key,
                    seen: 0,
                    last_ms: now_ms,
                    queued_ms: now_ms,
                });
                seq
            }
        };
        *hot = Hot { key, seq };
        seq
    }

    /// Records `id` as seen at `now`. Returns `true` if it was new, `false` for a duplicate
    /// (which is left untouched).
    pub fn check_and_insert(&mut self, id: MsgId, now: Instant) -> bool {
        let (key, bit) = BlockKey::of(&id);
        let now_ms = self.ms(now);
        let seq = self.block_seq(key, now_ms);
        let b = &mut self.blocks[(seq - self.head_seq) as usize];
        if b.seen & bit != 0 {
            self.stats.duplicates += 1;
            return false;
        }
        b.seen |= bit;
        b.last_ms = b.last_ms.max(now_ms);
        self.ids += 1;
        self.stats.inserted += 1;
        // Never the block just written to (the one numbered `seq`): the id inserted now must stay.
        while self.ids > self.max_entries && self.head_seq != seq {
            let Some(front) = self.pop_front() else {
                break;
            };
            self.stats.evicted_by_size += self.forget(&front);
        }
        true
    }

    fn pop_front(&mut self) -> Option<Block> {
        let b = self.blocks.pop_front()?;
        self.head_seq += 1;
        Some(b)
    }

    /// Drops a block already taken off the ring; returns how many ids it held.
    fn forget(&mut self, b: &Block) -> u64 {
        self.index.remove(&b.key);
        let n = b.seen.count_ones();
        self.ids -= n as usize;
        u64::from(n)
    }

    /// True if `id` is currently remembered (does not count as a duplicate).
    pub fn contains(&self, id: &MsgId) -> bool {
        let (key, bit) = BlockKey::of(id);
        self.index
            .get(&key)
            .is_some_and(|&seq| self.blocks[(seq - self.head_seq) as usize].seen & bit != 0)
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
        while let Some(front) = self.blocks.front() {
            if now_ms.saturating_sub(front.queued_ms) < ttl_ms {
                break;
            }
            let Some(mut b) = self.pop_front() else {
                break;
            };
            if now_ms.saturating_sub(b.last_ms) < ttl_ms {
                let seq = self.head_seq + self.blocks.len() as u64;
                if let Some(s) = self.index.get_mut(&b.key) {
                    *s = seq;
                }
                let hot = &mut self.hot[b.key.hot_slot()];
                if hot.key == b.key {
                    hot.seq = seq;
                }
                b.queued_ms = b.last_ms;
                self.blocks.push_back(b);
            } else {
                self.stats.expired += self.forget(&b);
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

    fn origin_id(origin: &PeerId, n: u64) -> MsgId {
        MsgId::new(origin, n)
    }

    /// True if the next lookup of `id` would take the hot entry instead of the hash table.
    fn hot_hit(d: &DedupCache, id: &MsgId) -> bool {
        let (key, _) = BlockKey::of(id);
        let hot = d.hot[key.hot_slot()];
        hot.key == key && hot.seq >= d.head_seq
    }

    /// Two originators whose ids share one hot entry, and a third with its own.
    fn colliding_origins() -> [PeerId; 3] {
        let slot = |p: &PeerId| BlockKey::of(&MsgId::new(p, 0)).0.hot_slot();
        let a = PeerId([1; 16]);
        let b = (2..=255u8)
            .map(|n| PeerId([n; 16]))
            .find(|p| slot(p) == slot(&a))
            .expect("16 hot entries: 254 candidates collide somewhere");
        let c = (2..=255u8)
            .map(|n| PeerId([n; 16]))
            .find(|p| slot(p) != slot(&a))
            .expect("not every candidate maps to one entry");
        [a, b, c]
    }

    #[test]
    fn a_duplicate_through_the_hot_path_is_counted() {
        let t = Instant::now();
        let mut d = DedupCache::new(1000, Duration::from_secs(30), t);
        assert!(!hot_hit(&d, &id(10)), "an empty cache has no hot entry");
        assert!(d.check_and_insert(id(10), t));
        assert!(hot_hit(&d, &id(10)) && hot_hit(&d, &id(11)));
        assert!(!d.check_and_insert(id(10), t));
        assert!(d.check_and_insert(id(11), t));
        assert!(!d.check_and_insert(id(11), t));
        let s = d.stats();
        assert_eq!((s.inserted, s.duplicates, d.len()), (2, 2, 2));
        // The next block of the same originator is a table lookup, then hot in turn.
        assert!(!hot_hit(&d, &id(64)));
        assert!(d.check_and_insert(id(64), t));
        assert!(hot_hit(&d, &id(65)) && !hot_hit(&d, &id(10)));
        assert!(
            !d.check_and_insert(id(10), t),
            "the older block is still found"
        );
        assert_eq!(d.stats().duplicates, 3);
    }

    #[test]
    fn a_hot_block_evicted_by_size_is_new_again() {
        let t = Instant::now();
        let other = PeerId([9; 16]);
        let mut d = DedupCache::new(64, Duration::from_secs(30), t);
        for n in 0..64 {
            assert!(d.check_and_insert(id(n), t));
        }
        assert!(hot_hit(&d, &id(5)));
        // 65 ids: the hot block is the oldest and not the one being written, so it goes.
        assert!(d.check_and_insert(origin_id(&other, 0), t));
        assert_eq!((d.len(), d.stats().evicted_by_size), (1, 64));
        assert!(!hot_hit(&d, &id(5)), "the hot entry died with its block");
        assert!(!d.contains(&id(5)));
        assert!(d.check_and_insert(id(5), t), "an evicted id is new again");
        assert!(!d.check_and_insert(id(5), t));
        assert_eq!(d.len(), 2);
        // The other block is the oldest but being written: kept over the bound.
        for n in 1..64 {
            assert!(d.check_and_insert(origin_id(&other, n), t));
        }
        assert_eq!(d.len(), 65);
        assert!(d.check_and_insert(origin_id(&other, 64), t));
        assert!(!d.contains(&origin_id(&other, 0)) && d.contains(&id(5)));
        assert_eq!(d.len(), 2);
        // The reinserted block, hot again, is evicted in turn once it is the oldest.
        assert!(d.check_and_insert(id(6), t) && hot_hit(&d, &id(5)));
        for n in 65..128 {
            assert!(d.check_and_insert(origin_id(&other, n), t));
        }
        assert_eq!((d.len(), d.stats().evicted_by_size), (64, 64 + 64 + 2));
        assert!(!hot_hit(&d, &id(5)) && !d.contains(&id(5)));
        assert!(d.check_and_insert(id(5), t) && hot_hit(&d, &id(5)));
    }

    #[test]
    fn a_hot_block_swept_by_ttl_is_reinserted_or_requeued() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let other = PeerId([9; 16]);
        let mut d = DedupCache::new(1000, ms(100), t);
        assert!(d.check_and_insert(id(1), t));
        d.sweep(t + ms(100));
        assert!(!hot_hit(&d, &id(1)) && d.is_empty());
        assert_eq!(d.stats().expired, 1);
        assert!(d.check_and_insert(id(1), t + ms(100)), "swept: new again");
        assert!(!d.check_and_insert(id(1), t + ms(100)));
        assert_eq!(d.len(), 1);

        // A hot block old at the front but written since goes to the back and stays hot.
        let t = t + ms(1000);
        let mut d = DedupCache::new(1000, ms(100), t);
        assert!(d.check_and_insert(id(1), t));
        assert!(d.check_and_insert(origin_id(&other, 0), t + ms(10)));
        assert!(d.check_and_insert(id(2), t + ms(60)));
        d.sweep(t + ms(100));
        assert_eq!(d.len(), 3);
        assert!(hot_hit(&d, &id(2)), "the moved block keeps its hot entry");
        assert!(!d.check_and_insert(id(2), t + ms(100)));
        assert!(d.check_and_insert(id(3), t + ms(100)));
        // The other block is swept; the requeued one (last written at 100) stays.
        d.sweep(t + ms(160));
        assert_eq!((d.len(), d.stats().expired), (3, 1));
        assert!(d.contains(&id(1)) && !d.contains(&origin_id(&other, 0)));
        d.sweep(t + ms(200));
        assert!(d.is_empty() && !hot_hit(&d, &id(1)));
        assert!(d.check_and_insert(id(1), t + ms(200)));
    }

    #[test]
    fn interleaved_originators_are_exact() {
        let t = Instant::now();
        let origins = colliding_origins();
        let mut d = DedupCache::new(10_000, Duration::from_secs(30), t);
        for n in 0..200 {
            for o in &origins {
                assert!(d.check_and_insert(origin_id(o, n), t), "{o} {n}");
            }
            if n > 0 {
                // The previous id of each originator is still a duplicate.
                for o in &origins {
                    assert!(!d.check_and_insert(origin_id(o, n - 1), t), "{o} {n}");
                }
            }
        }
        assert_eq!((d.len(), d.blocks.len()), (600, 12));
        for n in 0..200 {
            for o in &origins {
                assert!(!d.check_and_insert(origin_id(o, n), t), "{o} {n}");
            }
        }
        let s = d.stats();
        assert_eq!((s.inserted, s.duplicates), (600, 3 * 199 + 600));
        // The two originators sharing an entry take it from each other; the third keeps its own.
        assert!(hot_hit(&d, &origin_id(&origins[2], 199)));
        assert!(!hot_hit(&d, &origin_id(&origins[0], 199)));
        assert!(hot_hit(&d, &origin_id(&origins[1], 199)));
    }

    #[test]
    fn the_cached_clock_follows_now() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut d = DedupCache::new(1000, ms(400), t);
        assert!(d.check_and_insert(sparse(1), t + ms(300)));
        d.sweep(t + ms(350));
        // An earlier `now` than the latest one is converted anew, not taken from the cache.
        assert!(d.check_and_insert(sparse(2), t + ms(300)));
        d.sweep(t + ms(699));
        assert_eq!(d.len(), 2);
        d.sweep(t + ms(700));
        assert!(d.is_empty());
        // A `now` before the epoch counts as the epoch.
        let later = t + ms(1000);
        let mut d = DedupCache::new(1000, ms(400), later);
        assert!(d.check_and_insert(id(1), t));
        d.sweep(later + ms(399));
        assert_eq!(d.len(), 1);
        d.sweep(later + ms(400));
        assert!(d.is_empty());
    }

    /// The cache before the hot entries and the clock cache: blocks in a hash map, the ring
    /// holding keys. The property test below holds the current cache to its results.
    struct Reference {
        blocks: AHashMap<BlockKey, (u64, u64)>,
        ring: VecDeque<(BlockKey, u64)>,
        ids: usize,
        max_entries: usize,
        ttl: Duration,
        epoch: Instant,
        next_sweep: Instant,
        stats: DedupStats,
    }

    impl Reference {
        fn new(max_entries: usize, ttl: Duration, now: Instant) -> Reference {
            Reference {
                blocks: AHashMap::new(),
                ring: VecDeque::new(),
                ids: 0,
                max_entries: max_entries.max(1),
                ttl,
                epoch: now,
                next_sweep: now + DedupCache::sweep_period(ttl),
                stats: DedupStats::default(),
            }
        }

        fn ms(&self, t: Instant) -> u64 {
            t.saturating_duration_since(self.epoch).as_millis() as u64
        }

        fn check_and_insert(&mut self, id: MsgId, now: Instant) -> bool {
            let (key, bit) = BlockKey::of(&id);
            let now_ms = self.ms(now);
            match self.blocks.get_mut(&key) {
                Some((seen, _)) if *seen & bit != 0 => {
                    self.stats.duplicates += 1;
                    return false;
                }
                Some((seen, last)) => {
                    *seen |= bit;
                    *last = (*last).max(now_ms);
                }
                None => {
                    self.blocks.insert(key, (bit, now_ms));
                    self.ring.push_back((key, now_ms));
                }
            }
            self.ids += 1;
            self.stats.inserted += 1;
            while self.ids > self.max_entries {
                match self.ring.front() {
                    Some(&(front, _)) if front != key => {
                        self.ring.pop_front();
                        self.stats.evicted_by_size += self.forget(&front);
                    }
                    _ => break,
                }
            }
            true
        }

        fn forget(&mut self, key: &BlockKey) -> u64 {
            let n = self
                .blocks
                .remove(key)
                .map_or(0, |(seen, _)| u64::from(seen.count_ones()));
            self.ids -= n as usize;
            n
        }

        fn contains(&self, id: &MsgId) -> bool {
            let (key, bit) = BlockKey::of(id);
            self.blocks
                .get(&key)
                .is_some_and(|(seen, _)| seen & bit != 0)
        }

        fn handle_timeout(&mut self, now: Instant) {
            if now < self.next_sweep {
                return;
            }
            self.sweep(now);
            self.next_sweep = now + DedupCache::sweep_period(self.ttl);
        }

        fn sweep(&mut self, now: Instant) {
            let now_ms = self.ms(now);
            let ttl_ms = self.ttl.as_millis() as u64;
            while let Some(&(key, at)) = self.ring.front() {
                if now_ms.saturating_sub(at) < ttl_ms {
                    break;
                }
                self.ring.pop_front();
                match self.blocks.get(&key).map(|&(_, last)| last) {
                    Some(last) if now_ms.saturating_sub(last) < ttl_ms => {
                        self.ring.push_back((key, last));
                    }
                    _ => self.stats.expired += self.forget(&key),
                }
            }
        }
    }

    /// splitmix64: a fixed pseudo-random sequence, so a failure replays exactly.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[test]
    fn matches_the_reference_model_on_mixed_traffic() {
        let origins = colliding_origins();
        let base = Instant::now();
        let mut ops = [0u64; 4];
        let mut total = DedupStats::default();
        for (case, (max_entries, ttl_ms)) in [
            (1usize, 20u64),
            (3, 50),
            (64, 30),
            (100, 40),
            (300, 25),
            (1000, 200),
            (100_000, 15),
        ]
        .into_iter()
        .enumerate()
        {
            for seed in 0..6u64 {
                let mut rng = Rng(seed * 1000 + case as u64);
                let epoch = base + Duration::from_millis(50);
                let ttl = Duration::from_millis(ttl_ms);
                let mut d = DedupCache::new(max_entries, ttl, epoch);
                let mut r = Reference::new(max_entries, ttl, epoch);
                let mut next = [0u64; 3];
                // Starts before the epoch: such times count as the epoch.
                let mut now_ms = 40u64;
                for step in 0..4000 {
                    let now = base + Duration::from_millis(now_ms);
                    let ctx = format!("case {case} seed {seed} step {step}");
                    match rng.below(100) {
                        // A batch of consecutive ids of one originator, at one `now`.
                        0..=59 => {
                            let o = rng.below(3) as usize;
                            for _ in 0..=rng.below(8) {
                                let m = origin_id(&origins[o], next[o]);
                                next[o] += 1;
                                let got = d.check_and_insert(m, now);
                                assert_eq!(got, r.check_and_insert(m, now), "{ctx}");
                            }
                            ops[0] += 1;
                        }
                        // An id seen before, or forgotten since, or never sent (a gap).
                        60..=79 => {
                            let o = rng.below(3) as usize;
                            let back = if rng.below(2) == 0 { 4 } else { 300 };
                            let n = next[o].saturating_sub(1 + rng.below(back));
                            let m = origin_id(&origins[o], n);
                            assert_eq!(
                                d.check_and_insert(m, now),
                                r.check_and_insert(m, now),
                                "{ctx}"
                            );
                            ops[1] += 1;
                        }
                        80..=84 => {
                            let o = rng.below(3) as usize;
                            next[o] += 1 + rng.below(200);
                        }
                        85..=89 => {
                            d.handle_timeout(now);
                            r.handle_timeout(now);
                            assert_eq!(d.poll_timeout(), r.next_sweep, "{ctx}");
                            ops[2] += 1;
                        }
                        90..=91 => {
                            d.sweep(now);
                            r.sweep(now);
                            ops[3] += 1;
                        }
                        // The clock moves on, now and then a little backwards.
                        92..=98 => now_ms += rng.below(ttl_ms / 2 + 1),
                        _ => now_ms = now_ms.saturating_sub(rng.below(5)),
                    }
                    assert_eq!(d.len(), r.ids, "{ctx}");
                    assert_eq!(d.stats(), r.stats, "{ctx}");
                    assert_eq!(d.blocks.len(), r.blocks.len(), "{ctx}");
                    let o = rng.below(3) as usize;
                    let probe = origin_id(&origins[o], next[o].saturating_sub(rng.below(400)));
                    assert_eq!(d.contains(&probe), r.contains(&probe), "{ctx}");
                }
                let s = d.stats();
                total.duplicates += s.duplicates;
                total.evicted_by_size += s.evicted_by_size;
                total.expired += s.expired;
            }
        }
        // Every kind of step ran, and the caches did forget both ways.
        assert!(ops.iter().all(|&n| n > 1000), "{ops:?}");
        assert!(
            total.duplicates > 5_000 && total.evicted_by_size > 10_000 && total.expired > 10_000,
            "{total:?}"
        );
    }
}
