//! Cross-executor channel throughput vs `std::sync::mpsc::sync_channel` between two
//! plain threads, same capacity, so the result reads as a ratio.
//!
//! `cargo bench -p shoal-bench --bench channel -- --warm-up-time 1 --measurement-time 3`
//!
//! Variants: `shoal_spsc_*` runs producer and consumer on two shards pinned to CPUs 0
//! and 1 and parking when idle; `_spin50us` spins 50 µs before parking; `_unpinned`
//! lets the kernel place the executor threads (as the std baseline's threads are).
//! The consumer drains in batches of 256 (`recv_batch`), capacity is 1024 for all.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use shoal_runtime::channel::channel;
use shoal_runtime::{ExecutorId, Placement, Runtime};

const CAPACITY: usize = 1024;
const BATCH: usize = 256;

/// A 64-byte message, the size of a small mesh frame header plus payload handle.
#[derive(Clone, Copy)]
#[allow(dead_code)] // fields are carried, never read: the bench moves bytes.
struct Msg64([u64; 8]);

trait Make: Send + Copy + 'static {
    fn make(i: u64) -> Self;
}
impl Make for u64 {
    fn make(i: u64) -> Self {
        i
    }
}
impl Make for Msg64 {
    fn make(i: u64) -> Self {
        Msg64([i; 8])
    }
}

fn shoal_cross_executor<T: Make>(rt: &Runtime, iters: u64) -> Duration {
    let (mut tx, mut rx) = channel::<T>(CAPACITY);
    let start = Instant::now();
    let consumer = rt
        .spawn_on(ExecutorId::Shard(1), move || async move {
            let mut buf = Vec::with_capacity(BATCH);
            let mut got = 0u64;
            while got < iters {
                buf.clear();
                got += rx.recv_batch(&mut buf, BATCH).await.expect("sender alive") as u64;
                black_box(&buf);
            }
            start.elapsed()
        })
        .expect("spawn consumer");
    rt.spawn_on(ExecutorId::Shard(0), move || async move {
        for i in 0..iters {
            if tx.send(T::make(i)).await.is_err() {
                panic!("receiver gone");
            }
        }
    })
    .expect("spawn producer");
    consumer.join_blocking().expect("consumer finished")
}

fn std_sync_channel<T: Make>(iters: u64) -> Duration {
    let (tx, rx) = std::sync::mpsc::sync_channel::<T>(CAPACITY);
    let start = Instant::now();
    let producer = std::thread::spawn(move || {
        for i in 0..iters {
            if tx.send(T::make(i)).is_err() {
                panic!("receiver gone");
            }
        }
    });
    for _ in 0..iters {
        black_box(rx.recv().expect("sender alive"));
    }
    let elapsed = start.elapsed();
    producer.join().expect("producer");
    elapsed
}

fn bench(c: &mut Criterion) {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let build = |name: &str, spin: Duration, pinned: bool| {
        Runtime::builder()
            .name(name)
            .shards(2)
            .placement(if pinned {
                Placement::Pinned((0..cpus.min(2)).collect())
            } else {
                Placement::Unpinned
            })
            .spin_before_park(spin)
            .build()
            .expect("runtime")
    };
    let park = build("park", Duration::ZERO, true);
    let spin = build("spin", Duration::from_micros(50), true);
    let unpinned = build("unpinned", Duration::ZERO, false);
    let mut g = c.benchmark_group("channel");
    g.throughput(Throughput::Elements(1));
    g.bench_function("std_sync_channel_u64", |b| {
        b.iter_custom(std_sync_channel::<u64>)
    });
    g.bench_function("shoal_spsc_u64", |b| {
        b.iter_custom(|n| shoal_cross_executor::<u64>(&park, n))
    });
    g.bench_function("shoal_spsc_u64_spin50us", |b| {
        b.iter_custom(|n| shoal_cross_executor::<u64>(&spin, n))
    });
    g.bench_function("shoal_spsc_u64_unpinned", |b| {
        b.iter_custom(|n| shoal_cross_executor::<u64>(&unpinned, n))
    });
    g.bench_function("std_sync_channel_64B", |b| {
        b.iter_custom(std_sync_channel::<Msg64>)
    });
    g.bench_function("shoal_spsc_64B", |b| {
        b.iter_custom(|n| shoal_cross_executor::<Msg64>(&park, n))
    });
    g.bench_function("shoal_spsc_64B_spin50us", |b| {
        b.iter_custom(|n| shoal_cross_executor::<Msg64>(&spin, n))
    });
    g.bench_function("shoal_spsc_64B_unpinned", |b| {
        b.iter_custom(|n| shoal_cross_executor::<Msg64>(&unpinned, n))
    });
    g.finish();
    for rt in [park, spin, unpinned] {
        rt.join().expect("clean stop");
    }
}

// Written out instead of `criterion_group!`/`criterion_main!`, whose generated public
// function cannot carry the doc comment the workspace lints require.
fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
