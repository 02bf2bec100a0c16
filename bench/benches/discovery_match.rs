//! Partition matching under hostile input (issue 24, finding 5): 64 writer names of 256
//! bytes against 64 reader patterns `*aaaa…ab*` of 256 bytes, no overlap, so every
//! pattern runs over every name. The baseline is the seed's greedy matcher (copied below
//! as it was), run in the same process, so the result reads as a ratio. Also the same
//! shape at the default partition cap (2048 bytes a side: 8 names, 8 patterns), and a
//! graph admission of the worst reader the cap allows against 5 capped writers (what one
//! remote–remote pair costs every node), and ordinary lists, where preparing a list per
//! call costs more than the seed's matcher did (the graph prepares each list once).
//!
//! Run: `nice cargo bench -p shoal-bench --bench discovery_match`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_main, Criterion};
use shoal_discovery::graph::{Capacities, DiscoveryGraph, GraphConfig, MatchScope};
use shoal_discovery::partition::{overlap, partitions_match, CompiledPartitions};
use shoal_discovery::types::*;

/// The seed's matcher, verbatim: greedy with one backtrack point, |pattern| · |name|
/// byte comparisons at worst.
mod seed {
    use shoal_discovery::partition::is_pattern;
    use shoal_discovery::types::Partitions;

    fn glob_match(pattern: &str, name: &str) -> bool {
        let (p, n) = (pattern.as_bytes(), name.as_bytes());
        let is_wild = |b: &u8| *b == b'*' || *b == b'?';
        let Some(first) = p.iter().position(is_wild) else {
            return p == n;
        };
        let last = p.iter().rposition(is_wild).unwrap_or(first);
        let (head, tail) = (&p[..first], &p[last + 1..]);
        if n.len() < head.len() + tail.len() || !n.starts_with(head) || !n.ends_with(tail) {
            return false;
        }
        glob_middle(&p[first..=last], &n[head.len()..n.len() - tail.len()])
    }

    fn glob_middle(p: &[u8], n: &[u8]) -> bool {
        let (mut pi, mut ni) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        while ni < n.len() {
            if pi < p.len() {
                match p[pi] {
                    b'*' => {
                        pi += 1;
                        star = Some((pi, ni));
                        continue;
                    }
                    b'?' => {
                        pi += 1;
                        ni += utf8_len(n[ni]);
                        continue;
                    }
                    c if c == n[ni] => {
                        pi += 1;
                        ni += 1;
                        continue;
                    }
                    _ => {}
                }
            }
            match star {
                Some((sp, sn)) => {
                    let next = sn + utf8_len(n[sn]);
                    star = Some((sp, next));
                    pi = sp;
                    ni = next;
                }
                None => return false,
            }
        }
        p[pi..].iter().all(|&b| b == b'*')
    }

    fn utf8_len(first: u8) -> usize {
        match first {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xff => 4,
            _ => 1,
        }
    }

    fn pattern_match(p: &str, q: &str) -> bool {
        match (is_pattern(p), is_pattern(q)) {
            (false, false) | (true, true) => p == q,
            (true, false) => glob_match(p, q),
            (false, true) => glob_match(q, p),
        }
    }

    pub fn partitions_match(p: &Partitions, q: &Partitions) -> bool {
        fn or_default(list: &[String]) -> impl Iterator<Item = &str> {
            let default = list.is_empty().then_some("");
            list.iter().map(String::as_str).chain(default)
        }
        or_default(p.names()).any(|a| or_default(q.names()).any(|b| pattern_match(a, b)))
    }
}

/// `n` names `aaaa…a-<i>` of 256 bytes.
fn names(n: usize) -> Partitions {
    Partitions::new((0..n).map(|i| {
        let s = format!("-{i}");
        "a".repeat(256 - s.len()) + &s
    }))
    .unwrap()
}

/// `n` patterns `*aaaa…ab*` of 256 bytes (the last letter varies): each costs the seed's
/// matcher ~253²/2 byte comparisons per name.
fn patterns(n: usize) -> Partitions {
    let ends = ('b'..='z').chain('A'..='Z').chain("!#%&+,.:;=@_~".chars());
    Partitions::new(ends.take(n).map(|c| format!("*{}{c}*", "a".repeat(253)))).unwrap()
}

/// Mean time of `f` over `runs` calls.
fn mean(runs: u32, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    for _ in 0..runs {
        assert!(!black_box(f()));
    }
    t.elapsed() / runs
}

fn pairs(c: &mut Criterion) {
    let mut group = c.benchmark_group("discovery_match/pair");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(300));
    group.measurement_time(Duration::from_secs(2));
    for (label, n) in [("issue_64x256", 64), ("capped_8x256", 8)] {
        let (w, r) = (names(n), patterns(n));
        let (wc, rc) = (CompiledPartitions::new(&w), CompiledPartitions::new(&r));
        assert!(!partitions_match(&w, &r) && !seed::partitions_match(&w, &r));
        // One ratio from a short timed run in this process (criterion's numbers below are
        // the record; this line is what the report quotes).
        let runs = if n == 64 { 5 } else { 200 };
        let before = mean(runs, || seed::partitions_match(&w, &r));
        let after = mean(runs * 10, || {
            overlap(&w, wc.as_ref(), &r, rc.as_ref(), &mut 0)
        });
        let one_shot = mean(runs * 10, || partitions_match(&w, &r));
        eprintln!(
            "{label}: seed {before:?}, compiled {after:?} (x{:.1} faster), \
             compiled per call {one_shot:?} (x{:.1})",
            before.as_secs_f64() / after.as_secs_f64(),
            before.as_secs_f64() / one_shot.as_secs_f64(),
        );
        group.bench_function(format!("{label}/seed"), |b| {
            b.iter(|| seed::partitions_match(black_box(&w), black_box(&r)))
        });
        group.bench_function(format!("{label}/compiled"), |b| {
            b.iter(|| {
                overlap(
                    black_box(&w),
                    wc.as_ref(),
                    black_box(&r),
                    rc.as_ref(),
                    &mut 0,
                )
            })
        });
        group.bench_function(format!("{label}/compiled_per_call"), |b| {
            b.iter(|| partitions_match(black_box(&w), black_box(&r)))
        });
    }
    group.finish();
}

/// Ordinary lists (the `discovery` bench's): the seed's worked table, and 8 × 8 realistic
/// patterns and names without overlap. What a real endpoint pays, prepared once (as the
/// graph does) or per call.
fn typical(c: &mut Criterion) {
    let mut group = c.benchmark_group("discovery_match/typical");
    group.sample_size(20);
    group.warm_up_time(Duration::from_millis(300));
    group.measurement_time(Duration::from_secs(1));
    let writer = Partitions::new(["robot/*", "diagnostics"]).unwrap();
    let readers = [
        Partitions::new(["robot/arm"]).unwrap(),
        Partitions::new(["telemetry", "diagnostics"]).unwrap(),
        Partitions::new(["robot"]).unwrap(),
        Partitions::default_partition(),
    ];
    let wc = CompiledPartitions::new(&writer);
    let rcs: Vec<_> = readers.iter().map(CompiledPartitions::new).collect();
    let count = |f: &dyn Fn(usize) -> bool| (0..readers.len()).filter(|&i| f(i)).count();
    group.bench_function("seed_table/seed", |b| {
        b.iter(|| count(&|i| seed::partitions_match(black_box(&writer), &readers[i])))
    });
    group.bench_function("seed_table/compiled", |b| {
        b.iter(|| {
            count(&|i| {
                overlap(
                    black_box(&writer),
                    wc.as_ref(),
                    &readers[i],
                    rcs[i].as_ref(),
                    &mut 0,
                )
            })
        })
    });
    group.bench_function("seed_table/compiled_per_call", |b| {
        b.iter(|| count(&|i| partitions_match(black_box(&writer), &readers[i])))
    });
    let pats =
        Partitions::new((0..8).map(|i| format!("fleet/{i}/robot/*/sensors/??/raw"))).unwrap();
    let names =
        Partitions::new((0..8).map(|i| format!("fleet/{i}/robot/arm-{i}/sensors/00/cooked")))
            .unwrap();
    let (pc, nc) = (
        CompiledPartitions::new(&pats),
        CompiledPartitions::new(&names),
    );
    group.bench_function("8x8_no_overlap/seed", |b| {
        b.iter(|| seed::partitions_match(black_box(&pats), black_box(&names)))
    });
    group.bench_function("8x8_no_overlap/compiled", |b| {
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
    group.bench_function("8x8_no_overlap/compiled_per_call", |b| {
        b.iter(|| partitions_match(black_box(&pats), black_box(&names)))
    });
    group.finish();
}

fn endpoint(p: u8, e: u8, kind: EndpointKind, parts: Partitions) -> EndpointInfo {
    let mut i = EndpointInfo::new(
        Guid::new(GuidPrefix([p; 12]), EntityId([0, 0, e, 2])),
        kind,
        TopicName::new("t").unwrap(),
        TypeName::new("T").unwrap(),
        TypeHash([9; 16]),
    );
    i.partitions = parts;
    i
}

/// A hostile reader at the default cap admitted next to 5 hostile writers, all remote,
/// matched in the global scope as every node does: its work and its time.
fn admission(c: &mut Criterion) {
    let mut group = c.benchmark_group("discovery_match/admit");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(300));
    group.measurement_time(Duration::from_secs(2));
    let mut g = DiscoveryGraph::new(GraphConfig {
        capacities: Capacities::default(),
        scope: MatchScope::All,
    });
    for p in [2, 3] {
        g.admit_participant(ParticipantInfo::new(GuidPrefix([p; 12]), "x"), Time(0))
            .unwrap();
    }
    for e in 0..5 {
        g.admit_endpoint(endpoint(2, e, EndpointKind::Writer, names(8)))
            .unwrap();
    }
    let reader = endpoint(3, 0, EndpointKind::Reader, patterns(8));
    let adm = g.admit_endpoint(reader.clone()).unwrap();
    eprintln!("capped reader vs 5 capped writers: {:?}", adm.work);
    group.bench_function("capped_reader_vs_5_writers", |b| {
        b.iter(|| {
            g.remove_endpoint(&reader.guid).unwrap();
            g.admit_endpoint(black_box(reader.clone())).unwrap()
        })
    });
    group.finish();
}

fn benches() {
    let mut c = Criterion::default().configure_from_args();
    pairs(&mut c);
    typical(&mut c);
    admission(&mut c);
}

criterion_main!(benches);
