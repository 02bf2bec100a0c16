//! One node's membership work while a full mesh forms around it: the records of every other
//! node, each version adding one link, as a node receives them when N nodes start at once
//! (issue 29's 60-node start: the control threads saturated the host, and applying records
//! was a large share of it, `bench/notes/start60.md`).
//!
//! `cargo bench -p shoal-bench --bench membership -- --warm-up-time 1 --measurement-time 3`
//!
//! - `full_mesh_forming/N`: node 0, linked to all N − 1 others, receives from each origin
//!   o = 1..N the versions 1..N − 1 of its record, version k listing o's first k neighbours
//!   (node 0 first), taking turns origin by origin: N(N − 1) records, each stored, relayed
//!   (to every link but the inbound one: plain links, as toward multimaster peers) and applied
//!   to the member set. Throughput is records per second.
//! - `refresh/N`: the same node once the mesh formed, receiving a newer version of a record
//!   that lists the same neighbours (a periodic re-flood): the floor under a record that
//!   changes one link, so the change's own cost reads as the difference.
//!
//! - `paths/N`: the same formed mesh's reverse paths and the shards' path table, as the
//!   control core builds them after a change (`ReversePaths::refresh`, then
//!   `PathTable::after` the previous table over node 0's links): what each graph change and
//!   each link coming up cost every node of a forming mesh (the largest share of the
//!   60-node start's CPU after the records themselves, `start60.md`). Throughput is builds
//!   per second; `paths/table_N` is the table alone (a link change without a graph change).
//! - `paths/sparse_N/k`: the reverse paths of one node of a sparse mesh (N nodes, about
//!   degree 10) with `relay_redundancy` k: 3 ranks the relays toward every node farther from
//!   an origin, 0 ranks none (the baseline in the same run).
//!
//! Compare code versions by running the same command on each (same script, alternating).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_main, BatchSize, Criterion, Throughput};
use shoal_mesh::proto::reverse_path::{PathTable, ReversePaths};
use shoal_mesh::proto::{LinkId, MemberGraph};
use shoal_mesh::wire::Membership;
use shoal_mesh::{MeshConfig, PeerId};

const SIZES: [usize; 2] = [60, 120];

/// Node `i` of the mesh (node 0 is the one measured).
fn node(i: usize) -> PeerId {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&(i as u64 + 1).to_be_bytes());
    // Spread the ids so that sorted order differs from the index order.
    id[8..].copy_from_slice(&((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_le_bytes());
    PeerId(id)
}

/// Node 0 with a link to every other node, nothing else known yet.
fn linked_node(n: usize, now: Instant) -> MemberGraph {
    let mut g = MemberGraph::new(
        node(0),
        Duration::from_secs(2),
        Duration::from_secs(6),
        4 * n,
        1_000,
        now,
    );
    for i in 1..n {
        g.neighbour_up(node(i), LinkId(i as u64), 1_000, now);
    }
    drain(&mut g);
    g
}

fn drain(g: &mut MemberGraph) {
    while g.poll_transmit().is_some() {}
    while g.poll_event().is_some() {}
}

/// Origin `o`'s record version `k`: its first `k` neighbours, node 0 first, then the others
/// in a rotation of their own.
fn record(n: usize, o: usize, k: usize) -> Membership {
    let others = (1..n).filter(|&j| j != o);
    let order = std::iter::once(0).chain(others.cycle().skip(o).take(n - 2));
    Membership {
        origin: node(o),
        version: 1_000 + k as u64,
        neighbours: order.take(k).map(node).collect(),
    }
}

fn bench_forming(c: &mut Criterion) {
    let mut g = c.benchmark_group("membership");
    for n in SIZES {
        // Each record from its origin's own link.
        let records: Vec<(LinkId, Membership)> = (1..n)
            .flat_map(|k| (1..n).map(move |o| (o, k)))
            .map(|(o, k)| (LinkId(o as u64), record(n, o, k)))
            .collect();
        let now = Instant::now();
        // The workload does what it says: every node a member at the end.
        let mut check = linked_node(n, now);
        for (from, r) in &records {
            check.on_record(*from, r, 1_000, now);
        }
        assert_eq!(
            check.members().count(),
            n - 1,
            "every other node is a member"
        );

        g.throughput(Throughput::Elements(records.len() as u64));
        g.bench_function(format!("full_mesh_forming/{n}"), |b| {
            b.iter_batched(
                || linked_node(n, now),
                |mut m| {
                    for (from, r) in &records {
                        black_box(m.on_record(*from, r, 1_000, now));
                        drain(&mut m);
                    }
                    m
                },
                BatchSize::LargeInput,
            )
        });

        // A formed mesh: re-floods with the same neighbours.
        let mut formed = check;
        drain(&mut formed);
        let mut version = 10_000u64;
        let full: Vec<Membership> = (1..n).map(|o| record(n, o, n - 1)).collect();
        g.throughput(Throughput::Elements(1));
        let mut i = 0;
        g.bench_function(format!("refresh/{n}"), |b| {
            b.iter(|| {
                let mut r = full[i].clone();
                version += 1;
                r.version = version;
                black_box(formed.on_record(LinkId(1 + i as u64), &r, 1_000, now));
                i = (i + 1) % full.len();
                drain(&mut formed);
            })
        });
    }
    g.finish();
}

fn bench_paths(c: &mut Criterion) {
    let mut g = c.benchmark_group("paths");
    g.throughput(Throughput::Elements(1));
    for n in SIZES {
        let now = Instant::now();
        let mut m = linked_node(n, now);
        for k in 1..n {
            for o in 1..n {
                m.on_record(LinkId(o as u64), &record(n, o, k), 1_000, now);
            }
        }
        drain(&mut m);
        let links: Vec<(PeerId, LinkId)> = (1..n).map(|i| (node(i), LinkId(i as u64))).collect();
        let settle = Duration::from_secs(4);
        let paths = ReversePaths::of_graph(node(0), &m, MeshConfig::default().relay_redundancy);
        let prev = PathTable::after(&PathTable::default(), &paths, &links, &[], now, settle);
        // Every other node is an origin, reached over its own link and skipped by relays.
        assert_eq!(prev.len(), n - 1);
        assert_eq!(prev.accepted(&node(1)), Some(&[LinkId(1)][..]));
        g.bench_function(format!("build/{n}"), |b| {
            b.iter(|| {
                let p = ReversePaths::of_graph(node(0), &m, MeshConfig::default().relay_redundancy);
                black_box(PathTable::after(&prev, &p, &links, &[], now, settle))
            })
        });
        g.bench_function(format!("table_{n}"), |b| {
            b.iter(|| black_box(PathTable::after(&prev, &paths, &links, &[], now, settle)))
        });
    }
    g.finish();
}

/// A sparse mesh of `n` nodes the same each run: a ring, and four more links a node to
/// nodes drawn by a fixed xorshift (about degree 10, a diameter of ~4 at 512 nodes, like
/// the capped meshes `max_links` builds): every node's record lists its neighbours.
fn sparse_records(n: usize) -> Vec<(PeerId, Vec<PeerId>)> {
    let mut lists: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut link = |a: usize, b: usize| {
        if a != b && !lists[a].contains(&b) {
            lists[a].push(b);
            lists[b].push(a);
        }
    };
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for a in 0..n {
        link(a, (a + 1) % n);
        for _ in 0..4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            link(a, (x % n as u64) as usize);
        }
    }
    lists
        .into_iter()
        .enumerate()
        .map(|(a, l)| (node(a), l.into_iter().map(node).collect()))
        .collect()
}

/// `paths/sparse_N/k`: node 0's reverse paths over [`sparse_records`] with `relay_redundancy`
/// k (issue 29: ranked relays toward nodes at every distance from an origin; k = 0, every
/// relay carrying, ranks none and is the baseline).
fn bench_sparse_paths(c: &mut Criterion) {
    let mut g = c.benchmark_group("paths");
    g.throughput(Throughput::Elements(1));
    for n in [256, 512] {
        let records = sparse_records(n);
        for k in [0, 3] {
            g.bench_function(format!("sparse_{n}/{k}"), |b| {
                b.iter(|| {
                    black_box(ReversePaths::build(
                        node(0),
                        records.iter().map(|(o, l)| (o, l.as_slice())),
                        |_| true,
                        k,
                    ))
                })
            });
        }
    }
    g.finish();
}

/// Every membership bench; a plain fn rather than `criterion_group!`, whose generated `pub fn`
/// has no docs.
fn benches() {
    let mut c = shoal_bench::quick_criterion();
    bench_forming(&mut c);
    bench_paths(&mut c);
    bench_sparse_paths(&mut c);
}

criterion_main!(benches);
