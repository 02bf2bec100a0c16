//! Gossip dedup cache at its size bound, beside a bare `AHashSet<[u8; 16]>` doing the same set
//! work (no ring, no counters), so the cost of the cache's bookkeeping reads as a ratio.
//!
//! `cargo bench -p shoal-bench --bench dedup -- --warm-up-time 1 --measurement-time 2`
//!
//! - `dedup_insert_evict`: a new id into a full cache, so every insert evicts (steady state
//!   under load). Baseline: remove the oldest id, insert the new one. `dedup_cache` gets
//!   consecutive counters of one originator (a broadcast stream: 64 ids share a block);
//!   `dedup_cache_sparse` gets counters 64 apart (one block per id: the worst case, e.g.
//!   targeted traffic of which this node sees one message in 64 or fewer);
//!   `dedup_cache_3_origins` gets consecutive counters of three originators taking turns
//!   message by message (several publishers flooding at once).
//! - `dedup_duplicate`: an id that is present (a duplicate arriving over a second path).
//!   Baseline: `contains`.
//!
//! Sizes: the default `maxDedupEntries` (100 000) and 10 000.

use std::hint::black_box;
use std::time::{Duration, Instant};

use ahash::AHashSet;
use criterion::{criterion_main, Criterion, Throughput};
use shoal_mesh::proto::DedupCache;
use shoal_mesh::{MsgId, PeerId};

const SIZES: [usize; 2] = [100_000, 10_000];
/// Long enough that the age sweep never removes anything during a run: only the size bound acts.
const TTL: Duration = Duration::from_secs(3600);
const ORIGIN: PeerId = PeerId([0x5a; 16]);
const ORIGINS: [PeerId; 3] = [PeerId([0x11; 16]), PeerId([0x5a; 16]), PeerId([0xc3; 16])];

fn id(n: u64) -> MsgId {
    MsgId::new(&ORIGIN, n)
}

/// The `n`-th id of a stream where every id is 64 counters past the previous one.
fn sparse_id(n: u64) -> MsgId {
    id(n * 64)
}

/// The `n`-th id of three consecutive streams taking turns.
fn interleaved_id(n: u64) -> MsgId {
    MsgId::new(&ORIGINS[(n % 3) as usize], n / 3)
}

/// The `n`-th id of a stream.
type IdFn = fn(u64) -> MsgId;

/// A cache holding ids `make(0..size)`, at its ceiling.
fn full_cache(size: usize, make: IdFn, now: Instant) -> DedupCache {
    let mut c = DedupCache::new(size, TTL, now);
    for n in 0..size as u64 {
        assert!(c.check_and_insert(make(n), now));
    }
    assert_eq!(c.len(), size);
    c
}

/// The baseline set holding the same ids `0..size`.
fn full_set(size: usize) -> AHashSet<[u8; 16]> {
    let mut set = AHashSet::with_capacity(size);
    for n in 0..size as u64 {
        set.insert(id(n).0);
    }
    set
}

fn bench_insert_evict(c: &mut Criterion) {
    let mut g = c.benchmark_group("dedup_insert_evict");
    g.throughput(Throughput::Elements(1));
    let now = Instant::now();
    for size in SIZES {
        // Baseline: the same ids in the same order, but the oldest is computed from the counter
        // instead of kept in a ring, so only the hash-set work is measured.
        let mut set = full_set(size);
        let mut next = size as u64;
        g.bench_function(format!("ahash_set_remove_insert/{size}"), |b| {
            b.iter(|| {
                set.remove(&id(next - size as u64).0);
                black_box(set.insert(black_box(id(next).0)));
                next += 1;
            })
        });
        assert_eq!(set.len(), size);

        let cases: [(&str, IdFn); 3] = [
            ("dedup_cache", id),
            ("dedup_cache_sparse", sparse_id),
            ("dedup_cache_3_origins", interleaved_id),
        ];
        for (name, make) in cases {
            let mut cache = full_cache(size, make, now);
            let mut next = size as u64;
            g.bench_function(format!("{name}/{size}"), |b| {
                b.iter(|| {
                    let fresh = cache.check_and_insert(black_box(make(next)), now);
                    next += 1;
                    black_box(fresh)
                })
            });
            let s = cache.stats();
            assert_eq!(s.duplicates, 0, "every insert must be a new id");
            assert_eq!(s.evicted_by_size, s.inserted - cache.len() as u64);
            // Eviction takes whole 64-id blocks.
            assert!(cache.len() <= size && cache.len() + 64 > size);
        }
    }
    g.finish();
}

fn bench_duplicate(c: &mut Criterion) {
    let mut g = c.benchmark_group("dedup_duplicate");
    g.throughput(Throughput::Elements(1));
    let now = Instant::now();
    for size in SIZES {
        // Cycle over every present id so the lookups touch the whole table, not one hot line.
        let set = full_set(size);
        let mut i = 0u64;
        g.bench_function(format!("ahash_set_contains/{size}"), |b| {
            b.iter(|| {
                let hit = set.contains(&black_box(id(i)).0);
                i = (i + 1) % size as u64;
                black_box(hit)
            })
        });

        let mut cache = full_cache(size, id, now);
        let mut i = 0u64;
        g.bench_function(format!("dedup_cache/{size}"), |b| {
            b.iter(|| {
                let fresh = cache.check_and_insert(black_box(id(i)), now);
                i = (i + 1) % size as u64;
                black_box(fresh)
            })
        });
        let s = cache.stats();
        assert_eq!(s.inserted, size as u64, "every lookup must be a duplicate");
        assert!(s.duplicates > 0);
    }
    g.finish();
}

/// Every dedup bench; a plain fn rather than `criterion_group!`, whose generated `pub fn` has no
/// docs.
fn benches() {
    let mut c = shoal_bench::quick_criterion();
    bench_insert_evict(&mut c);
    bench_duplicate(&mut c);
}

criterion_main!(benches);
