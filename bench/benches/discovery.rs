//! Discovery benches: endpoint insertion at 1k/10k/100k endpoints on one
//! topic and spread over 10k topics, building and matching a whole
//! 100k-endpoint graph, removing a 1k-endpoint participant, partition
//! matching, and announcement record encode/decode.
//!
//! Run: `cargo bench -p shoal-bench --bench discovery`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_main, BatchSize, BenchmarkId, Criterion};
use shoal_discovery::graph::{Capacities, DiscoveryGraph, GraphConfig, MatchScope};
use shoal_discovery::partition::{overlap, CompiledPartitions};
use shoal_discovery::qos::{DurabilityKind, History, Limit};
use shoal_discovery::record;
use shoal_discovery::types::*;

const LOCAL: u8 = 1;

fn prefix(p: u32) -> GuidPrefix {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&p.to_be_bytes());
    GuidPrefix(b)
}

fn ep(p: u32, e: u32, kind: EndpointKind, topic: u32, partition: Option<&str>) -> EndpointInfo {
    let mut i = EndpointInfo::new(
        Guid::new(prefix(p), EntityId(e.to_be_bytes())),
        kind,
        TopicName::new(format!("topic/{topic}")).unwrap(),
        TypeName::new("bench::Sample").unwrap(),
        TypeHash([0x5a; 16]),
    );
    if let Some(name) = partition {
        i.partitions = Partitions::new([name]).unwrap();
    }
    i
}

fn big_config(scope: MatchScope) -> GraphConfig {
    GraphConfig {
        capacities: Capacities {
            local_participants: 4,
            remote_participants: 4096,
            local_endpoints: 1 << 20,
            remote_writers: 1 << 20,
            remote_readers: 1 << 20,
            matches: 1 << 22,
            // Its participants hold up to 100k endpoints each.
            participant_endpoints: usize::MAX,
            participant_bytes: usize::MAX,
            remote_endpoint_bytes: usize::MAX,
            ..Capacities::default()
        },
        scope,
    }
}

/// A graph with one local participant (prefix 1) and remote participant 2.
fn base(scope: MatchScope) -> DiscoveryGraph {
    let mut g = DiscoveryGraph::new(big_config(scope));
    g.add_local_participant(ParticipantInfo::new(prefix(u32::from(LOCAL)), "local"))
        .unwrap();
    g.admit_participant(ParticipantInfo::new(prefix(2), "remote"), Time(0))
        .unwrap();
    g
}

/// `n` endpoints over `topics` topics, round-robin: even ones local writers,
/// odd ones remote readers, so every topic has writers and readers that
/// match.
fn spread(n: u32, topics: u32) -> Vec<EndpointInfo> {
    (0..n)
        .map(|i| {
            let topic = (i / 2) % topics;
            if i % 2 == 0 {
                ep(u32::from(LOCAL), i, EndpointKind::Writer, topic, None)
            } else {
                ep(2, i, EndpointKind::Reader, topic, None)
            }
        })
        .collect()
}

fn admit(g: &mut DiscoveryGraph, info: EndpointInfo) {
    if info.guid.prefix == prefix(u32::from(LOCAL)) {
        g.add_local_endpoint(info).unwrap();
    } else {
        g.admit_endpoint(info).unwrap();
    }
}

/// Times only the insertion; the removal that restores the graph is not
/// counted.
fn time_inserts(
    g: &mut DiscoveryGraph,
    iters: u64,
    mut make: impl FnMut(u64) -> EndpointInfo,
) -> Duration {
    let mut total = Duration::ZERO;
    for i in 0..iters {
        let info = make(i);
        let guid = info.guid;
        let t = Instant::now();
        let a = g.add_local_endpoint(info).unwrap();
        total += t.elapsed();
        black_box(a);
        g.remove_endpoint(&guid).unwrap();
    }
    total
}

fn insert(c: &mut Criterion) {
    let mut group = c.benchmark_group("discovery/insert");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    for n in [1_000u32, 10_000, 100_000] {
        // One topic: n remote readers, each in its own partition (so building
        // stays linear); the inserted writer is compared with all n and
        // matches none — the pure scan cost of a crowded topic.
        let mut g = base(MatchScope::LocalOnly);
        for i in 0..n {
            let part = format!("p{i}");
            g.admit_endpoint(ep(2, i, EndpointKind::Reader, 0, Some(&part)))
                .unwrap();
        }
        group.bench_function(BenchmarkId::new("one_topic", n), |b| {
            b.iter_custom(|iters| {
                time_inserts(&mut g, iters, |_| {
                    ep(
                        u32::from(LOCAL),
                        1 << 30,
                        EndpointKind::Writer,
                        0,
                        Some("x"),
                    )
                })
            })
        });
        // 10k topics: the inserted writer meets only its topic's readers and
        // matches them (n/20k of them, at least the topic's own).
        let mut g = base(MatchScope::LocalOnly);
        for info in spread(n, 10_000) {
            admit(&mut g, info);
        }
        group.bench_function(BenchmarkId::new("10k_topics", n), |b| {
            b.iter_custom(|iters| {
                time_inserts(&mut g, iters, |i| {
                    let topic = (i * 7919 % u64::from((n / 2).min(10_000))) as u32;
                    ep(u32::from(LOCAL), 1 << 30, EndpointKind::Writer, topic, None)
                })
            })
        });
    }
    group.finish();
}

/// Thread CPU time from /proc (Linux), if readable.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn build_graph(infos: Vec<EndpointInfo>) -> DiscoveryGraph {
    let mut g = base(MatchScope::All);
    for info in infos {
        admit(&mut g, info);
    }
    assert_eq!(g.match_count(), 250_000);
    g
}

fn build(c: &mut Criterion) {
    let mut group = c.benchmark_group("discovery/build");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(4));
    // 100k endpoints, 10k topics, 10 per topic (5 writers, 5 readers); the
    // global view matches every compatible pair: 25 per topic, 250k in all.
    let infos = spread(100_000, 10_000);
    // This machine is shared; thread CPU time next to wall time tells how
    // much of the wall time was waiting for a core.
    let (cpu0, wall0) = (thread_cpu_ns(), Instant::now());
    let g = build_graph(infos.clone());
    let (cpu, wall) = (
        thread_cpu_ns().map(|c| c - cpu0.unwrap_or(0)),
        wall0.elapsed(),
    );
    eprintln!(
        "discovery/build one run: wall {:.1} ms, thread cpu {} ({} matches)",
        wall.as_secs_f64() * 1e3,
        cpu.map_or("n/a".into(), |c| format!("{:.1} ms", c as f64 / 1e6)),
        g.match_count()
    );
    drop(g);
    group.bench_function("100k_endpoints_10k_topics_global", |b| {
        b.iter_batched(|| infos.clone(), build_graph, BatchSize::PerIteration)
    });
    group.finish();
}

fn remove_participant(c: &mut Criterion) {
    let mut group = c.benchmark_group("discovery/remove_participant");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    // Inside a 100k-endpoint graph, a remote participant with 1k readers,
    // each matched with the 5 local writers of its topic (5k matches).
    let mut g = base(MatchScope::LocalOnly);
    for info in spread(100_000, 10_000) {
        admit(&mut g, info);
    }
    let victim = prefix(3);
    group.bench_function("1k_endpoints_in_100k_graph", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                g.admit_participant(ParticipantInfo::new(victim, "victim"), Time(0))
                    .unwrap();
                for e in 0..1_000u32 {
                    g.admit_endpoint(ep(3, e, EndpointKind::Reader, e * 10, None))
                        .unwrap();
                }
                let t = Instant::now();
                let removal = g.remove_participant(&victim).unwrap();
                total += t.elapsed();
                assert_eq!(removal.matches, 5_000);
            }
            total
        })
    });
    group.finish();
}

fn partitions(c: &mut Criterion) {
    let mut group = c.benchmark_group("discovery/partitions");
    let writer = Partitions::new(["robot/*", "diagnostics"]).unwrap();
    let readers = [
        Partitions::new(["robot/arm"]).unwrap(),
        Partitions::new(["telemetry", "diagnostics"]).unwrap(),
        Partitions::new(["robot"]).unwrap(),
        Partitions::default_partition(),
    ];
    // Lists prepared once, as the graph holds them (`discovery_match` also times the
    // seed's matcher and preparing per call).
    let wc = CompiledPartitions::new(&writer);
    let rcs: Vec<_> = readers.iter().map(CompiledPartitions::new).collect();
    group.bench_function("seed_table_4_readers", |b| {
        b.iter(|| {
            readers
                .iter()
                .zip(&rcs)
                .filter(|(r, rc)| overlap(black_box(&writer), wc.as_ref(), r, rc.as_ref(), &mut 0))
                .count()
        })
    });
    // 8 × 8 names of ~40 bytes, patterns on one side, no overlap: the
    // worst case within the matching scan.
    let pats =
        Partitions::new((0..8).map(|i| format!("fleet/{i}/robot/*/sensors/??/raw"))).unwrap();
    let names =
        Partitions::new((0..8).map(|i| format!("fleet/{i}/robot/arm-{i}/sensors/00/cooked")))
            .unwrap();
    let (pc, nc) = (
        CompiledPartitions::new(&pats),
        CompiledPartitions::new(&names),
    );
    group.bench_function("8x8_patterns_no_overlap", |b| {
        b.iter(|| {
            overlap(
                black_box(&pats),
                pc.as_ref(),
                black_box(&names),
                nc.as_ref(),
                &mut 0,
            )
        })
    });
    group.finish();
}

fn records(c: &mut Criterion) {
    let mut group = c.benchmark_group("discovery/record");
    // A realistic endpoint: partitions, an own locator, non-default policies.
    let mut e = ep(7, 42, EndpointKind::Writer, 17, None);
    e.partitions = Partitions::new(["robot/*", "diagnostics"]).unwrap();
    e.locators = vec![Locator::udp_v4([10, 0, 0, 7], 7411)];
    e.qos.durability = DurabilityKind::TransientLocal;
    e.qos.history = History::KeepLast { depth: 8 };
    e.qos.resource_limits.max_samples_per_instance = Limit::AtMost(64);
    let bytes = record::encode_endpoint(&e).unwrap();
    assert_eq!(record::decode_endpoint(&bytes).unwrap(), e);
    group.bench_function("endpoint_encode", |b| {
        b.iter(|| record::encode_endpoint(black_box(&e)).unwrap())
    });
    group.bench_function("endpoint_decode", |b| {
        b.iter(|| record::decode_endpoint(black_box(&bytes)).unwrap())
    });
    let mut p = ParticipantInfo::new(prefix(7), "robot-7/controller");
    p.user_locators = vec![Locator::udp_v4([10, 0, 0, 7], 7410)];
    p.discovery_locators = vec![Locator::udp_v4([239, 255, 0, 1], 7400)];
    let pbytes = record::encode_participant(&p).unwrap();
    group.bench_function("participant_encode", |b| {
        b.iter(|| record::encode_participant(black_box(&p)).unwrap())
    });
    group.bench_function("participant_decode", |b| {
        b.iter(|| record::decode_participant(black_box(&pbytes)).unwrap())
    });
    eprintln!(
        "record sizes: endpoint {} bytes, participant {} bytes",
        bytes.len(),
        pbytes.len()
    );
    group.finish();
}

/// Every discovery bench, in one group.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    insert(&mut c);
    build(&mut c);
    remove_participant(&mut c);
    partitions(&mut c);
    records(&mut c);
}

criterion_main!(benches);
