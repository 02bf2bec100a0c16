//! Gossip routing decision per received Data frame, on a router whose dedup cache is full at the
//! default ceiling (100 000 ids), so every new id also evicts one: the steady state under load.
//!
//! `cargo bench -p shoal-bench --bench router -- --warm-up-time 1 --measurement-time 2`
//!
//! Baseline `dedup_only`: the dedup cache's insert alone, the floor under every decision, so
//! the routing rules' own cost reads as the difference. Cases:
//! - `broadcast_new/{1,4,16}_links`: a new broadcast (delivered, forwarded unless the only
//!   link is the inbound one);
//! - `broadcast_duplicate`: a broadcast already seen (dropped);
//! - `targeted_neighbour`: addressed to a direct neighbour (unicast on its link);
//! - `targeted_relay`: addressed to a node that is not a neighbour (flooded);
//! - `originate_broadcast`: this node's own broadcast (flooded; its id needs no cache entry).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_main, Criterion, Throughput};
use shoal_mesh::proto::{
    DataMeta, DataVerdict, DedupCache, DropReason, Gossip, LinkId, NeighbourLinks,
};
use shoal_mesh::wire::INITIAL_TTL;
use shoal_mesh::{MsgId, PeerId};

/// The default `maxDedupEntries`.
const DEDUP_ENTRIES: usize = 100_000;
/// Long enough that the age sweep never runs during a bench: only the size bound acts.
const DEDUP_TTL: Duration = Duration::from_secs(3600);
const ME: PeerId = PeerId([0x01; 16]);
/// A remote originator two or more hops away.
const ORIGIN: PeerId = PeerId([0x77; 16]);
/// A destination that is not a neighbour.
const FAR: PeerId = PeerId([0x99; 16]);
/// Every received frame arrives on the first link.
const INBOUND: LinkId = LinkId(1);

fn neighbour(i: usize) -> PeerId {
    PeerId([0x10 + i as u8; 16])
}

/// Neighbour `i` on link `i + 1`.
fn table(links: usize) -> NeighbourLinks {
    let mut t = NeighbourLinks::new();
    for i in 0..links {
        t.insert(neighbour(i), LinkId(i as u64 + 1));
    }
    t
}

fn meta(dst: PeerId, n: u64) -> DataMeta {
    DataMeta {
        src: ORIGIN,
        dst,
        msg_id: MsgId::new(&ORIGIN, n),
        ttl: INITIAL_TTL,
    }
}

/// A router whose dedup cache holds ids `0..DEDUP_ENTRIES` (full).
fn full_router(t: &NeighbourLinks, now: Instant) -> Gossip {
    let mut r = Gossip::new(ME, INITIAL_TTL, DEDUP_ENTRIES, DEDUP_TTL, now);
    for n in 0..DEDUP_ENTRIES as u64 {
        r.on_data(t, INBOUND, &meta(PeerId::ZERO, n), now);
    }
    assert_eq!(r.dedup_stats().inserted, DEDUP_ENTRIES as u64);
    r
}

/// Benches `on_data` for fresh ids to `dst`, after checking once that it decides `expect`.
fn bench_new(
    c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    t: &NeighbourLinks,
    dst: PeerId,
    expect: DataVerdict,
) {
    let now = Instant::now();
    let mut r = full_router(t, now);
    let mut next = DEDUP_ENTRIES as u64;
    assert_eq!(
        r.on_data(t, INBOUND, &meta(dst, next), now),
        expect,
        "{name}"
    );
    next += 1;
    c.bench_function(name, |b| {
        b.iter(|| {
            let route = r.on_data(t, INBOUND, black_box(&meta(dst, next)), now);
            next += 1;
            black_box(route)
        })
    });
    let s = r.dedup_stats();
    assert_eq!(s.duplicates, 0, "{name}: every id must be new");
    assert!(
        s.evicted_by_size > 0,
        "{name}: the cache must be at its bound"
    );
}

fn bench_on_data(c: &mut Criterion) {
    let mut g = c.benchmark_group("router_on_data");
    g.throughput(Throughput::Elements(1));
    let now = Instant::now();

    let mut cache = DedupCache::new(DEDUP_ENTRIES, DEDUP_TTL, now);
    for n in 0..DEDUP_ENTRIES as u64 {
        cache.check_and_insert(MsgId::new(&ORIGIN, n), now);
    }
    let mut next = DEDUP_ENTRIES as u64;
    g.bench_function("dedup_only", |b| {
        b.iter(|| {
            let fresh = cache.check_and_insert(black_box(MsgId::new(&ORIGIN, next)), now);
            next += 1;
            black_box(fresh)
        })
    });

    for links in [1usize, 4, 16] {
        let t = table(links);
        let expect = if links == 1 {
            DataVerdict::Deliver
        } else {
            DataVerdict::DeliverAndForward {
                except: INBOUND,
                ttl: INITIAL_TTL - 1,
            }
        };
        bench_new(
            &mut g,
            &format!("broadcast_new/{links}_links"),
            &t,
            PeerId::ZERO,
            expect,
        );
    }

    let t = table(4);
    bench_new(
        &mut g,
        "targeted_neighbour/4_links",
        &t,
        neighbour(2),
        DataVerdict::Unicast {
            link: LinkId(3),
            ttl: INITIAL_TTL - 1,
        },
    );
    bench_new(
        &mut g,
        "targeted_relay/4_links",
        &t,
        FAR,
        DataVerdict::Forward {
            except: Some(INBOUND),
            ttl: INITIAL_TTL - 1,
        },
    );

    // Duplicates: cycle over every id present so lookups touch the whole table.
    let mut r = full_router(&t, now);
    let mut i = 0u64;
    assert_eq!(
        r.on_data(&t, INBOUND, &meta(PeerId::ZERO, 0), now),
        DataVerdict::Drop(DropReason::Duplicate)
    );
    g.bench_function("broadcast_duplicate/4_links", |b| {
        b.iter(|| {
            let route = r.on_data(&t, INBOUND, black_box(&meta(PeerId::ZERO, i)), now);
            i = (i + 1) % DEDUP_ENTRIES as u64;
            black_box(route)
        })
    });
    assert_eq!(r.dedup_stats().inserted, DEDUP_ENTRIES as u64);

    let mut r = full_router(&t, now);
    assert_eq!(
        r.originate(&t, PeerId::ZERO),
        DataVerdict::Forward {
            except: None,
            ttl: INITIAL_TTL
        }
    );
    g.bench_function("originate_broadcast/4_links", |b| {
        b.iter(|| black_box(r.originate(&t, black_box(PeerId::ZERO))))
    });
    assert_eq!(r.dedup_stats().duplicates, 0);
    g.finish();
}

/// Every router bench; a plain fn rather than `criterion_group!`, whose generated `pub fn` has
/// no docs.
fn benches() {
    let mut c = shoal_bench::quick_criterion();
    bench_on_data(&mut c);
}

criterion_main!(benches);
