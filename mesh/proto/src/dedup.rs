//! The gossip dedup cache: "have I seen this message id?", bounded by size and by age.
//!
//! **Owns:** which message ids were seen, per stream, within bounds. **Must not touch:** routing
//! (the gossip asks it).
//!
//! One instance per data shard, holding the ids whose originator hashes to that shard
//! ([`dedup_shard`]). A message id is the originator's 8-byte prefix and a per-originator counter
//! that goes up by one per message (`mesh/proto/protocol/v1-wire.md`), so the ids a node sees come
//! in runs. The cache stores them in **blocks**: one entry per (originator, `counter / 64`) holding
//! a 64-bit mask of the counters seen. A flood of one originator's messages touches one hot entry
//! per 64 messages instead of one random hash-table slot per message (plus one more to evict the
//! oldest id), which kept the old id-per-entry cache out of the CPU caches at its 100 000-id bound.
//! Sparse ids (targeted traffic seen only in part) cost one entry each, as before.
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
//!
//! **At most once, whatever the delay.** A bounded cache alone cannot promise that: a copy
//! delayed past the bound (a lossy link, a cut that heals) would find its id forgotten and be
//! delivered again. So the cache also remembers, per id *stream*, a **floor**: the highest
//! counter of any block it has forgotten. A stream is one generator's run of counters: every
//! generator (each originating shard, each `Publisher`, a multimaster node's single counter)
//! starts at a random 64-bit counter and counts up by one, so one originator's streams lie far
//! apart and an id belongs to the stream whose seen range `[lo, hi]` it falls in or near
//! (within [`STREAM_REACH`]). An id whose block is no longer held and whose counter lies in
//! `[lo, floor]` is older than anything the cache still tracks for its stream: it is reported
//! [`Seen::TooOld`] and counted, never delivered. That also drops a copy that was never seen
//! before but arrives after its neighbours were forgotten (lost, then delayed past the bound):
//! at-most-once wins over late delivery. Streams are touched only when a block is opened or
//! forgotten (once per 64 ids), so the per-message path is unchanged. Their table is bounded
//! by `max_streams`; when full, the least recently opened stream (second-chance order) gives
//! way and is counted (`streams_evicted`): only then can a copy delayed past both bounds come
//! back. A restarted multimaster or Shoal node draws a new random start, i.e. a new stream, so
//! its new ids are never taken for old ones.

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

/// How far (in counters) outside a stream's seen range an id may fall and still belong to it:
/// a gap of this many ids unseen (lost, or routed elsewhere) starts a second record for the
/// same generator, which is harmless. Two generators of one originator start at independent
/// random 64-bit counters, so two streams come within this reach of each other with a
/// probability of about 2^-30 per pair.
pub const STREAM_REACH: u64 = 1 << 32;

/// Stream records a cache keeps unless told otherwise ([`DedupCache::with_streams`]): each is
/// 40 bytes, and a node sees a few streams per originator (one per originating shard and
/// publisher), so this covers thousands of nodes.
pub const DEFAULT_MAX_STREAMS: usize = 65_536;

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Never seen: now remembered.
    New,
    /// Seen before and still remembered.
    Duplicate,
    /// Older than anything still remembered for its stream (see the module docs): it may have
    /// been seen and forgotten, so it is treated as seen.
    TooOld,
}

/// The shard (of `shards`) that owns the dedup state of `id`: its originator's
/// ([`crate::id::node_shard`]), so a message that arrives straight from its originator is
/// deduplicated on the shard that owns that link.
pub fn dedup_shard(id: &MsgId, shards: usize) -> usize {
    crate::id::node_shard(&id.0, shards)
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
    /// Lookups of ids older than what the cache still remembers for their stream.
    pub too_old: u64,
    /// Stream records dropped to make room for new ones (`max_streams` reached).
    pub streams_evicted: u64,
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

    /// The lowest and highest counter the block covers.
    fn counters(&self) -> (u64, u64) {
        let lo = self.block << BLOCK_SHIFT;
        (lo, lo | ((1 << BLOCK_SHIFT) - 1))
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

/// One id generator's counters as far as this cache has seen them (see the module docs).
#[derive(Debug, Clone, Copy)]
struct Stream {
    origin: u64,
    /// Lowest counter of any block opened in this stream.
    lo: u64,
    /// Highest counter of any block opened in this stream.
    hi: u64,
    /// Highest counter of any block forgotten; `None` while nothing was.
    floor: Option<u64>,
    /// Opened a block since the eviction hand last passed (second chance); false when new.
    used: bool,
}

impl Stream {
    fn reaches(&self, counter: u64) -> bool {
        self.lo.saturating_sub(STREAM_REACH) <= counter
            && counter <= self.hi.saturating_add(STREAM_REACH)
    }
}

/// The bounded table of [`Stream`]s: a slab of records, an index by originator, and a clock
/// hand for eviction.
#[derive(Debug)]
struct Streams {
    records: Vec<Stream>,
    by_origin: AHashMap<u64, Vec<u32>>,
    hand: usize,
    max: usize,
}

impl Streams {
    fn new(max: usize) -> Streams {
        Streams {
            records: Vec::new(),
            by_origin: AHashMap::new(),
            hand: 0,
            max: max.max(1),
        }
    }

    /// The record `counter` of `origin` belongs to: the one whose range reaches it, nearest
    /// first when two do.
    fn find(&self, origin: u64, counter: u64) -> Option<usize> {
        let ids = self.by_origin.get(&origin)?;
        let dist = |s: &Stream| {
            if counter < s.lo {
                s.lo - counter
            } else {
                counter.saturating_sub(s.hi)
            }
        };
        ids.iter()
            .map(|&i| i as usize)
            .filter(|&i| self.records[i].reaches(counter))
            .min_by_key(|&i| dist(&self.records[i]))
    }

    /// A new record for the block `[lo, hi]` of `origin`; returns true if another record had
    /// to give way.
    fn insert(&mut self, origin: u64, lo: u64, hi: u64) -> bool {
        let rec = Stream {
            origin,
            lo,
            hi,
            floor: None,
            // A stream earns its second chance by opening a second block: under a flood of
            // one-off ids from made-up originators, those give way before streams in use.
            used: false,
        };
        let (slot, evicted) = if self.records.len() < self.max {
            self.records.push(rec);
            (self.records.len() - 1, false)
        } else {
            // Second chance: pass over recently used records once, clearing their mark.
            loop {
                let i = self.hand % self.records.len();
                self.hand = i + 1;
                if std::mem::replace(&mut self.records[i].used, false) {
                    continue;
                }
                let old = std::mem::replace(&mut self.records[i], rec);
                if let Some(ids) = self.by_origin.get_mut(&old.origin) {
                    ids.retain(|&j| j as usize != i);
                    if ids.is_empty() {
                        self.by_origin.remove(&old.origin);
                    }
                }
                break (i, true);
            }
        };
        self.by_origin.entry(origin).or_default().push(slot as u32);
        evicted
    }
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
    streams: Streams,
    stats: DedupStats,
}

/// A block is about to be opened: false if its stream already forgot past it; otherwise the
/// stream's range now covers it (a new stream if none reaches it).
fn open_in_stream(streams: &mut Streams, stats: &mut DedupStats, key: BlockKey) -> bool {
    let (lo, hi) = key.counters();
    match streams.find(key.origin, lo) {
        Some(i) => {
            let s = &mut streams.records[i];
            if s.floor.is_some_and(|f| lo >= s.lo && lo <= f) {
                return false;
            }
            s.lo = s.lo.min(lo);
            s.hi = s.hi.max(hi);
            s.used = true;
        }
        None => {
            if streams.insert(key.origin, lo, hi) {
                stats.streams_evicted += 1;
            }
        }
    }
    true
}

impl DedupCache {
    /// An empty cache holding at most `max_entries` ids (at least 1; rounded up to a whole
    /// block) for at least `ttl` each, and at most [`DEFAULT_MAX_STREAMS`] stream floors.
    pub fn new(max_entries: usize, ttl: Duration, now: Instant) -> DedupCache {
        DedupCache::with_streams(max_entries, ttl, DEFAULT_MAX_STREAMS, now)
    }

    /// [`new`](Self::new) with at most `max_streams` stream floors (at least 1).
    pub fn with_streams(
        max_entries: usize,
        ttl: Duration,
        max_streams: usize,
        now: Instant,
    ) -> DedupCache {
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
            streams: Streams::new(max_streams),
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

    /// The sequence number of the block `key`, added (empty, queued at `now_ms`) if missing;
    /// `None` when it is missing and older than its stream's floor.
    fn block_seq(&mut self, key: BlockKey, now_ms: u64) -> Option<u64> {
        let hot = self.hot[key.hot_slot()];
        if hot.key == key && hot.seq >= self.head_seq {
            return Some(hot.seq);
        }
        let seq = match self.index.entry(key) {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(e) => {
                if !open_in_stream(&mut self.streams, &mut self.stats, key) {
                    return None;
                }
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
        self.hot[key.hot_slot()] = Hot { key, seq };
        Some(seq)
    }

    /// Records `id` as seen at `now`. Returns `true` if it was new, `false` for a duplicate
    /// or a too-old id (either is left untouched); [`check`](Self::check) tells them apart.
    pub fn check_and_insert(&mut self, id: MsgId, now: Instant) -> bool {
        self.check(id, now) == Seen::New
    }

    /// Looks `id` up and records it as seen at `now` if it is new.
    pub fn check(&mut self, id: MsgId, now: Instant) -> Seen {
        let (key, bit) = BlockKey::of(&id);
        let now_ms = self.ms(now);
        let Some(seq) = self.block_seq(key, now_ms) else {
            self.stats.too_old += 1;
            return Seen::TooOld;
        };
        let b = &mut self.blocks[(seq - self.head_seq) as usize];
        if b.seen & bit != 0 {
            self.stats.duplicates += 1;
            return Seen::Duplicate;
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
        Seen::New
    }

    fn pop_front(&mut self) -> Option<Block> {
        let b = self.blocks.pop_front()?;
        self.head_seq += 1;
        Some(b)
    }

    /// Drops a block already taken off the ring, raising its stream's floor; returns how many
    /// ids it held.
    fn forget(&mut self, b: &Block) -> u64 {
        self.index.remove(&b.key);
        let (lo, hi) = b.key.counters();
        if let Some(i) = self.streams.find(b.key.origin, lo) {
            let s = &mut self.streams.records[i];
            s.floor = Some(s.floor.map_or(hi, |f| f.max(hi)));
        }
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
mod tests;
