//! Unit and property tests of the dedup cache (`super`).
//!
//! Length: the unit tests and the reference model of the property tests share helpers; the
//! code under test is `dedup.rs`.

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
    // An evicted id is not new again: it is older than what its stream still holds, so a
    // copy delayed past the bound is never delivered twice.
    assert_eq!(d.check(sparse(0), t), Seen::TooOld);
    assert_eq!(d.check(sparse(1), t), Seen::TooOld);
    assert_eq!(d.stats().too_old, 2);
    assert_eq!(d.len(), 3);
    // Newer ids of the same stream are still new.
    assert_eq!(d.check(sparse(5), t), Seen::New);
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
    // A new block pushes the old one out; its ids are too old from then on.
    assert!(d.check_and_insert(sparse(9), t));
    assert_eq!(d.len(), 1);
    assert_eq!(d.check(id(0), t), Seen::TooOld);
    assert_eq!(
        d.check(id(6), t),
        Seen::TooOld,
        "never seen, but below the floor"
    );
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
fn a_hot_block_evicted_by_size_is_too_old_and_its_hot_entry_dies() {
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
    assert_eq!(d.check(id(5), t), Seen::TooOld);
    assert_eq!(d.len(), 1, "a too-old id opens no block");
    // The next block of that stream is new, and hot.
    assert_eq!(d.check(id(64), t), Seen::New);
    assert!(hot_hit(&d, &id(65)));
    // The other block is the oldest but being written: kept over the bound.
    for n in 1..64 {
        assert!(d.check_and_insert(origin_id(&other, n), t));
    }
    assert_eq!(d.len(), 65);
    assert!(d.check_and_insert(origin_id(&other, 64), t));
    assert!(!d.contains(&origin_id(&other, 0)) && d.contains(&id(64)));
    assert_eq!(d.len(), 2);
    // The block of id 64, hot, is evicted in turn once it is the oldest.
    for n in 65..128 {
        assert!(d.check_and_insert(origin_id(&other, n), t));
    }
    assert_eq!((d.len(), d.stats().evicted_by_size), (64, 64 + 64 + 1));
    assert!(!hot_hit(&d, &id(64)) && !d.contains(&id(64)));
    assert_eq!(d.check(id(64), t), Seen::TooOld);
    assert_eq!(d.check(id(128), t), Seen::New);
    assert!(hot_hit(&d, &id(129)));
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
    assert_eq!(
        d.check(id(1), t + ms(100)),
        Seen::TooOld,
        "swept: still seen"
    );
    assert!(d.is_empty());
    assert_eq!(d.check(id(64), t + ms(100)), Seen::New);

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
    assert_eq!(d.check(id(1), t + ms(200)), Seen::TooOld);
    assert_eq!(d.check(origin_id(&other, 1), t + ms(200)), Seen::TooOld);
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

#[test]
fn generators_of_one_originator_keep_separate_floors() {
    let t = Instant::now();
    let mut d = DedupCache::new(128, Duration::from_secs(30), t);
    // A slow generator sends a few ids, then a fast one of the same originator many.
    let slow = 0x1234_5678_9abc_0000u64;
    let fast = 0x9000_0000_0000_0000u64;
    for n in 0..3 {
        assert!(d.check_and_insert(id(slow + n), t));
    }
    for n in 0..10_000 {
        assert!(d.check_and_insert(id(fast + n), t));
    }
    assert_eq!(d.check(id(fast + 5), t), Seen::TooOld);
    assert_eq!(
        d.check(id(slow), t),
        Seen::TooOld,
        "its block was evicted too"
    );
    // The slow generator's next ids (from its next block on: the rest of a forgotten
    // block counts as seen) are new: the fast stream's floor is not theirs.
    assert_eq!(d.check(id(slow + 3), t), Seen::TooOld);
    for n in 64..200 {
        assert_eq!(d.check(id(slow + n), t), Seen::New, "{n}");
    }
    assert_eq!(d.streams.records.len(), 2);
}

#[test]
fn the_stream_table_is_bounded_and_counts_what_gives_way() {
    let t = Instant::now();
    let mut d = DedupCache::with_streams(64, Duration::from_secs(30), 2, t);
    for o in 1..=5u8 {
        assert!(d.check_and_insert(MsgId::new(&PeerId([o; 16]), 1000), t));
    }
    assert_eq!(d.streams.records.len(), 2);
    assert_eq!(d.stats().streams_evicted, 3);
    let held: usize = d.streams.by_origin.values().map(Vec::len).sum();
    assert_eq!(held, 2, "the index follows the records");
    // A stream in use gets a second chance over one that is not.
    let mut d = DedupCache::with_streams(1000, Duration::from_secs(30), 2, t);
    let (a, b, c) = (PeerId([1; 16]), PeerId([2; 16]), PeerId([3; 16]));
    assert!(d.check_and_insert(MsgId::new(&a, 0), t));
    assert!(d.check_and_insert(MsgId::new(&b, 0), t));
    assert!(d.check_and_insert(MsgId::new(&c, 0), t)); // `a`, the oldest, goes
    assert!(d.check_and_insert(MsgId::new(&b, 64), t)); // `b` used again
    assert!(d.check_and_insert(MsgId::new(&a, 64), t)); // `c` (unused since) gives way
    assert!(d.streams.by_origin.contains_key(&b.shard_hash()));
    assert!(!d.streams.by_origin.contains_key(&c.shard_hash()));
}

/// At most once, whatever the delay: generators with random starts, every id sent several
/// times, copies arriving in random order up to far more ids late than the cache holds,
/// with the clock moving past the TTL now and then. No id may ever be reported new twice.
#[test]
fn no_id_is_new_twice_whatever_the_delay() {
    let base = Instant::now();
    let mut total_too_old = 0;
    for seed in 0..20u64 {
        let mut rng = Rng(seed + 77);
        let ttl = Duration::from_millis(50);
        let mut d = DedupCache::new(200 + rng.below(300) as usize, ttl, base);
        let origins: Vec<PeerId> = (0..3).map(|o| PeerId([o as u8 + 1; 16])).collect();
        let mut gens: Vec<(usize, u64)> = (0..6).map(|g| (g % origins.len(), rng.next())).collect();
        let mut pending: Vec<MsgId> = Vec::new();
        let mut delivered = ahash::AHashSet::new();
        let mut now_ms = 0u64;
        for _ in 0..30_000 {
            match rng.below(10) {
                0..=4 => {
                    let g = rng.below(gens.len() as u64) as usize;
                    gens[g].1 = gens[g].1.wrapping_add(1);
                    let m = MsgId::new(&origins[gens[g].0], gens[g].1);
                    for _ in 0..=rng.below(3) {
                        pending.push(m);
                    }
                }
                5..=8 if !pending.is_empty() => {
                    // Mostly recent copies, sometimes one from far back.
                    let back = if rng.below(20) == 0 {
                        pending.len()
                    } else {
                        32
                    };
                    let i = pending.len() - 1 - rng.below(back.min(pending.len()) as u64) as usize;
                    let m = pending.swap_remove(i);
                    let now = base + Duration::from_millis(now_ms);
                    if d.check(m, now) == Seen::New {
                        assert!(delivered.insert(m), "seed {seed}: {m:?} delivered twice");
                    }
                }
                _ => {
                    now_ms += rng.below(20);
                    d.handle_timeout(base + Duration::from_millis(now_ms));
                }
            }
        }
        total_too_old += d.stats().too_old;
    }
    assert!(
        total_too_old > 100,
        "late copies were exercised: {total_too_old}"
    );
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
    /// Per originator (one stream each in these tests): lowest block counter opened and
    /// highest counter forgotten.
    floors: AHashMap<u64, (u64, Option<u64>)>,
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
            floors: AHashMap::new(),
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
                let (lo, _) = key.counters();
                let f = self.floors.entry(key.origin).or_insert((lo, None));
                if f.1.is_some_and(|floor| lo >= f.0 && lo <= floor) {
                    self.stats.too_old += 1;
                    return false;
                }
                f.0 = f.0.min(lo);
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
        if let Some(f) = self.floors.get_mut(&key.origin) {
            let (_, hi) = key.counters();
            f.1 = Some(f.1.map_or(hi, |floor| floor.max(hi)));
        }
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
            total.too_old += s.too_old;
        }
    }
    // Every kind of step ran, and the caches did forget both ways.
    assert!(ops.iter().all(|&n| n > 1000), "{ops:?}");
    assert!(
        total.duplicates > 5_000
            && total.evicted_by_size > 10_000
            && total.expired > 10_000
            && total.too_old > 1_000,
        "{total:?}"
    );
}
