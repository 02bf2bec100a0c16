//! Secured-link record cost: ChaCha20-Poly1305 seal and open per record, beside a `memcpy` of
//! the same plaintext as the baseline for a ratio, and the benefit of batching small frames
//! into one record.
//!
//! `cargo bench -p shoal-bench --bench crypto -- --warm-up-time 1 --measurement-time 2`
//!
//! - `record/{memcpy,seal,open,seal_open}/{64B,1KiB,64KiB}`: one record per plaintext. `open`
//!   verifies a record sealed in the (unmeasured) setup; `seal_open` is the round trip.
//! - `batch_16x64B/{memcpy,one_record,16_records}`: sixteen 64-byte frames sealed and opened as
//!   one record vs as sixteen records.
//!
//! Sealer and opener share a key and advance their counters in lock step, as the two ends of a
//! link do; every open checks the tag, so a mismatch would fail the bench, not skew it.

use std::hint::black_box;

use criterion::{criterion_main, BatchSize, Criterion, Throughput};
use shoal_mesh::crypto::{
    Opened, RecordOpener, RecordSealer, DEFAULT_MAX_MESSAGE_BYTES as MAX_MESSAGE,
};

const SIZES: [(usize, &str); 3] = [(64, "64B"), (1024, "1KiB"), (64 * 1024, "64KiB")];
const KEY: [u8; 32] = [0x42; 32];
const FRAMES: usize = 16;
const SMALL: usize = 64;

fn pair() -> (RecordSealer, RecordOpener) {
    (
        RecordSealer::new(&KEY, MAX_MESSAGE),
        RecordOpener::new(&KEY, MAX_MESSAGE),
    )
}

/// Opens the record at the start of `buf`; returns its length and plaintext length.
fn open(opener: &mut RecordOpener, buf: &mut [u8]) -> (usize, usize) {
    match opener.open_in_place(buf) {
        Ok(Opened::Record { len, plaintext }) => (len, plaintext.len()),
        other => panic!("bench record does not open: {other:?}"),
    }
}

fn bench_record(c: &mut Criterion) {
    let mut g = c.benchmark_group("record");
    for (size, name) in SIZES {
        let pt = vec![0xa5u8; size];
        g.throughput(Throughput::Bytes(size as u64));
        let mut buf: Vec<u8> = Vec::with_capacity(size + 64);

        g.bench_function(format!("memcpy/{name}"), |b| {
            b.iter(|| {
                buf.clear();
                buf.extend_from_slice(black_box(&pt));
                black_box(&buf);
            })
        });

        let (mut sealer, _) = pair();
        g.bench_function(format!("seal/{name}"), |b| {
            b.iter(|| {
                buf.clear();
                black_box(sealer.seal_frame(&mut buf, black_box(&pt)).expect("fits"));
            })
        });

        // Sealing happens in the setup, in order, so the opener's counter always matches.
        let (mut sealer, mut opener) = pair();
        g.bench_function(format!("open/{name}"), |b| {
            b.iter_batched_ref(
                || {
                    let mut rec = Vec::with_capacity(size + 64);
                    sealer.seal_frame(&mut rec, &pt).expect("fits");
                    rec
                },
                |rec| black_box(open(&mut opener, rec)),
                BatchSize::SmallInput,
            )
        });
        assert_eq!(sealer.counter(), opener.counter());

        let (mut sealer, mut opener) = pair();
        g.bench_function(format!("seal_open/{name}"), |b| {
            b.iter(|| {
                buf.clear();
                sealer.seal_frame(&mut buf, black_box(&pt)).expect("fits");
                let (len, n) = open(&mut opener, &mut buf);
                assert_eq!((len, n), (buf.len(), size));
                black_box(&buf[4..4 + n]);
            })
        });
    }
    g.finish();
}

fn bench_batch(c: &mut Criterion) {
    let mut g = c.benchmark_group(format!("batch_{FRAMES}x{SMALL}B"));
    g.throughput(Throughput::Bytes((FRAMES * SMALL) as u64));
    let frames: Vec<Vec<u8>> = (0..FRAMES).map(|i| vec![i as u8; SMALL]).collect();
    let mut buf: Vec<u8> = Vec::with_capacity(FRAMES * (SMALL + 20));

    g.bench_function("memcpy", |b| {
        b.iter(|| {
            buf.clear();
            for f in &frames {
                buf.extend_from_slice(black_box(f));
            }
            black_box(&buf);
        })
    });

    let (mut sealer, mut opener) = pair();
    g.bench_function("one_record/seal_open", |b| {
        b.iter(|| {
            buf.clear();
            let mut rec = sealer.begin(&mut buf);
            for f in &frames {
                rec.try_push(black_box(f)).expect("fits");
            }
            rec.seal().expect("fits");
            let (_, n) = open(&mut opener, &mut buf);
            assert_eq!(n, FRAMES * SMALL);
            black_box(&buf);
        })
    });

    let (mut sealer, mut opener) = pair();
    g.bench_function(format!("{FRAMES}_records/seal_open"), |b| {
        b.iter(|| {
            buf.clear();
            for f in &frames {
                sealer.seal_frame(&mut buf, black_box(f)).expect("fits");
            }
            let mut at = 0;
            while at < buf.len() {
                let (len, n) = open(&mut opener, &mut buf[at..]);
                assert_eq!(n, SMALL);
                at += len;
            }
            black_box(&buf);
        })
    });
    assert_eq!(sealer.counter(), opener.counter());
    g.finish();
}

/// Every crypto bench; a plain fn rather than `criterion_group!`, whose generated `pub fn` has
/// no docs.
fn benches() {
    let mut c = shoal_bench::quick_criterion();
    bench_record(&mut c);
    bench_batch(&mut c);
}

criterion_main!(benches);
