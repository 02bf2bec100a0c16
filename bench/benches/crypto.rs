//! Secured-link record cost: seal and open per record for both suites (ChaCha20-Poly1305,
//! AES-256-GCM), beside a `memcpy` of the same plaintext and `ring`'s cipher called directly as
//! the baselines for ratios, and the benefit of batching small frames into one record.
//!
//! `cargo bench -p shoal-bench --bench crypto -- --warm-up-time 1 --measurement-time 2`
//!
//! - `record/{memcpy,cipher,seal,open,seal_open}/{64B,1KiB,16KiB,64KiB}`: one ChaCha20-Poly1305
//!   record per plaintext. `cipher` is ring's seal + open in place with no record layer around
//!   it; `open` verifies a record sealed in the (unmeasured) setup; `seal_open` is the round
//!   trip. `record_aes/...`: the same with AES-256-GCM records (no `memcpy` row).
//! - `batch_16x64B/{memcpy,one_record,16_records}`: sixteen 64-byte frames sealed and opened as
//!   one record vs as sixteen records.
//! - `stream_16x1KiB/{cipher,plain_path,record_layer}`: what a loaded link does per batch:
//!   sixteen 1 KiB frames copied into one record, sealed, pushed into a `RecordReader`, opened
//!   and split into frames (`record_layer`); the same without records (`plain_path`); and the
//!   cipher alone on the same 16 KiB. `record_layer - plain_path` is what securing a link
//!   adds, to be set against `cipher`. `cipher_aes`, `record_layer_aes`: AES-256-GCM.
//!
//! Sealer and opener share a key and advance their counters in lock step, as the two ends of a
//! link do; every open checks the tag, so a mismatch would fail the bench, not skew it.

use std::hint::black_box;

use criterion::{criterion_main, BatchSize, Criterion, Throughput};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, CHACHA20_POLY1305};
use shoal_mesh::crypto::{
    Opened, RecordOpener, RecordReader, RecordSealer, RecordSuite,
    DEFAULT_MAX_MESSAGE_BYTES as MAX_MESSAGE,
};

const SIZES: [(usize, &str); 4] = [
    (64, "64B"),
    (1024, "1KiB"),
    (16 * 1024, "16KiB"),
    (64 * 1024, "64KiB"),
];
const KEY: [u8; 32] = [0x42; 32];
const FRAMES: usize = 16;
const SMALL: usize = 64;

fn pair() -> (RecordSealer, RecordOpener) {
    suite_pair(RecordSuite::ChaCha20Poly1305)
}

fn suite_pair(suite: RecordSuite) -> (RecordSealer, RecordOpener) {
    (
        RecordSealer::with_suite(suite, &KEY, MAX_MESSAGE),
        RecordOpener::with_suite(suite, &KEY, MAX_MESSAGE),
    )
}

/// Opens the record at the start of `buf`; returns its length and plaintext length.
fn open(opener: &mut RecordOpener, buf: &mut [u8]) -> (usize, usize) {
    match opener.open_in_place(buf) {
        Ok(Opened::Record { len, plaintext }) => (len, plaintext.len()),
        other => panic!("bench record does not open: {other:?}"),
    }
}

/// ring's cipher alone: seals `buf` in place with counter `ctr`, appends the tag,
/// opens it again; the floor under any record layer.
fn cipher_seal_open(key: &LessSafeKey, ctr: u64, buf: &mut Vec<u8>, len: usize) {
    let nonce = |ctr: u64| {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&ctr.to_be_bytes());
        Nonce::assume_unique_for_key(n)
    };
    buf.truncate(len);
    let tag = key
        .seal_in_place_separate_tag(nonce(ctr), Aad::empty(), &mut buf[..])
        .expect("seals");
    buf.extend_from_slice(tag.as_ref());
    let pt = key
        .open_in_place(nonce(ctr), Aad::empty(), &mut buf[..])
        .expect("opens");
    black_box(pt);
}

fn raw_key(suite: RecordSuite) -> LessSafeKey {
    let alg = match suite {
        RecordSuite::ChaCha20Poly1305 => &CHACHA20_POLY1305,
        RecordSuite::Aes256Gcm => &AES_256_GCM,
    };
    LessSafeKey::new(UnboundKey::new(alg, &KEY).expect("32-byte key"))
}

fn bench_record(c: &mut Criterion, group: &str, suite: RecordSuite) {
    let mut g = c.benchmark_group(group);
    let pair = || suite_pair(suite);
    for (size, name) in SIZES {
        let pt = vec![0xa5u8; size];
        g.throughput(Throughput::Bytes(size as u64));
        let mut buf: Vec<u8> = Vec::with_capacity(size + 64);

        if suite == RecordSuite::ChaCha20Poly1305 {
            g.bench_function(format!("memcpy/{name}"), |b| {
                b.iter(|| {
                    buf.clear();
                    buf.extend_from_slice(black_box(&pt));
                    black_box(&buf);
                })
            });
        }

        let key = raw_key(suite);
        let mut ctr = 0u64;
        let mut raw = pt.clone();
        g.bench_function(format!("cipher/{name}"), |b| {
            b.iter(|| {
                cipher_seal_open(&key, ctr, &mut raw, size);
                ctr += 1;
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

fn bench_stream(c: &mut Criterion) {
    const N: usize = 16;
    const SIZE: usize = 1024;
    let mut g = c.benchmark_group(format!("stream_{N}x1KiB"));
    g.throughput(Throughput::Bytes((N * SIZE) as u64));
    // Frames as the wire has them: a 4-byte length prefix, then the body.
    let frames: Vec<Vec<u8>> = (0..N)
        .map(|i| {
            let mut f = ((SIZE - 4) as u32).to_be_bytes().to_vec();
            f.resize(SIZE, i as u8);
            f
        })
        .collect();

    for (suffix, suite) in [
        ("", RecordSuite::ChaCha20Poly1305),
        ("_aes", RecordSuite::Aes256Gcm),
    ] {
        let key = raw_key(suite);
        let mut ctr = 0u64;
        let mut raw = frames.concat();
        g.bench_function(format!("cipher{suffix}"), |b| {
            b.iter(|| {
                cipher_seal_open(&key, ctr, &mut raw, N * SIZE);
                ctr += 1;
            })
        });
    }

    // What plaintext links do with the same frames: copy them into a batch, land the batch in
    // a read buffer (the kernel's copy, here a memcpy), split it into frames.
    let mut batch = bytes::BytesMut::with_capacity(N * SIZE);
    let mut rbuf = bytes::BytesMut::with_capacity(N * SIZE);
    g.bench_function("plain_path", |b| {
        b.iter(|| {
            batch.clear();
            for f in &frames {
                batch.extend_from_slice(black_box(f));
            }
            rbuf.extend_from_slice(&batch);
            let mut got = 0;
            while rbuf.len() >= 4 {
                let len = 4 + u32::from_be_bytes(rbuf[..4].try_into().unwrap()) as usize;
                if rbuf.len() < len {
                    break;
                }
                black_box(rbuf.split_to(len));
                got += 1;
            }
            assert_eq!(got, N);
        })
    });

    for (suffix, suite) in [
        ("", RecordSuite::ChaCha20Poly1305),
        ("_aes", RecordSuite::Aes256Gcm),
    ] {
        stream_record_layer(&mut g, &format!("record_layer{suffix}"), suite, &frames);
    }
    g.finish();
}

/// `stream_16x1KiB/record_layer` for one suite (see the module docs).
fn stream_record_layer(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    suite: RecordSuite,
    frames: &[Vec<u8>],
) {
    const N: usize = 16;
    const SIZE: usize = 1024;
    let (mut sealer, opener) = suite_pair(suite);
    let mut reader = RecordReader::new(opener, &[]);
    let mut wire = bytes::BytesMut::with_capacity(N * SIZE + 64);
    g.bench_function(name, |b| {
        b.iter(|| {
            wire.clear();
            let mut rec = sealer.begin(&mut wire);
            for f in frames {
                rec.try_push(black_box(f)).expect("fits");
            }
            rec.seal().expect("fits");
            reader.push(&wire);
            let mut got = 0;
            loop {
                let p = reader.plaintext();
                if p.len() >= 4 {
                    let len = 4 + u32::from_be_bytes(p[..4].try_into().unwrap()) as usize;
                    if p.len() >= len {
                        black_box(reader.split_plaintext(len));
                        got += 1;
                        continue;
                    }
                }
                if !reader.open_next().expect("opens") {
                    break;
                }
            }
            assert_eq!(got, N);
        })
    });
    assert_eq!(reader.moved_bytes(), 0, "whole frames are never moved");
}

/// Every crypto bench; a plain fn rather than `criterion_group!`, whose generated `pub fn` has
/// no docs.
fn benches() {
    let mut c = shoal_bench::quick_criterion();
    bench_record(&mut c, "record", RecordSuite::ChaCha20Poly1305);
    bench_record(&mut c, "record_aes", RecordSuite::Aes256Gcm);
    bench_batch(&mut c);
    bench_stream(&mut c);
}

criterion_main!(benches);
