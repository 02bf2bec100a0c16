//! Wire codec throughput: Data frame encode/decode at several payload sizes and the realistic
//! read path (a buffer holding many small frames in a row), each beside a plain `memcpy` of the
//! same bytes as the baseline for a ratio.

use bytes::{Buf, Bytes, BytesMut};
use criterion::{black_box, criterion_main, BatchSize, Criterion, Throughput};
use shoal_mesh::wire::{
    decode_frame, take_data, take_frame, Data, DataHeader, DecodeStatus, Frame, INITIAL_TTL,
    MAX_MESSAGE_BYTES,
};
use shoal_mesh::{MsgId, PeerId};

const SIZES: [(usize, &str); 3] = [(64, "64B"), (1024, "1KiB"), (64 * 1024, "64KiB")];
/// Frames in the stream benchmark's read buffer.
const STREAM_FRAMES: usize = 1000;

fn data_frame(payload_len: usize, counter: u64) -> Frame {
    let src = PeerId([0x11; 16]);
    Frame::Data(Data {
        src,
        dst: PeerId::ZERO,
        msg_id: MsgId::new(&src, counter),
        ttl: INITIAL_TTL,
        payload: Bytes::from(vec![0xa5u8; payload_len]),
    })
}

fn encode(frame: &Frame) -> Bytes {
    let mut b = BytesMut::with_capacity(frame.encoded_len());
    frame.encode(&mut b).expect("bench frame encodes");
    b.freeze()
}

fn bench_encode(c: &mut Criterion) {
    let mut g = c.benchmark_group("data_encode");
    for (size, name) in SIZES {
        let frame = data_frame(size, 1);
        let wire = encode(&frame);
        g.throughput(Throughput::Bytes(wire.len() as u64));
        let mut out = BytesMut::with_capacity(wire.len());
        g.bench_function(format!("memcpy/{name}"), |b| {
            b.iter(|| {
                out.clear();
                out.extend_from_slice(black_box(&wire));
                black_box(&out);
            })
        });
        g.bench_function(format!("frame/{name}"), |b| {
            b.iter(|| {
                out.clear();
                black_box(&frame).encode(&mut out).expect("fits");
                black_box(&out);
            })
        });
        let Frame::Data(d) = &frame else {
            unreachable!()
        };
        // The vectored-write path: only the 58-byte header is produced, the payload is not touched.
        g.bench_function(format!("header_only/{name}"), |b| {
            b.iter(|| {
                let d = black_box(d);
                black_box(DataHeader::new(
                    &d.src,
                    &d.dst,
                    &d.msg_id,
                    d.ttl,
                    d.payload.len(),
                ))
            })
        });
    }
    g.finish();
}

fn bench_decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("data_decode");
    for (size, name) in SIZES {
        let wire = encode(&data_frame(size, 1));
        g.throughput(Throughput::Bytes(wire.len() as u64));
        let mut copy = vec![0u8; wire.len()];
        g.bench_function(format!("memcpy/{name}"), |b| {
            b.iter(|| {
                copy.copy_from_slice(black_box(&wire));
                black_box(&copy);
            })
        });
        g.bench_function(format!("frame/{name}"), |b| {
            b.iter(|| match decode_frame(black_box(&wire), MAX_MESSAGE_BYTES) {
                Ok(DecodeStatus::Complete { frame, len }) => black_box((frame, len)),
                other => panic!("bench frame does not decode: {other:?}"),
            })
        });
    }
    g.finish();
}

fn bench_stream(c: &mut Criterion) {
    let mut g = c.benchmark_group("stream_decode");
    let mut stream = BytesMut::new();
    for i in 0..STREAM_FRAMES {
        // Mostly small Data, with the occasional Heartbeat a real link carries.
        let f = if i % 50 == 49 {
            Frame::Heartbeat
        } else {
            data_frame(64, i as u64)
        };
        f.encode(&mut stream).expect("fits");
    }
    let stream = stream.freeze();
    g.throughput(Throughput::Elements(STREAM_FRAMES as u64));
    let mut copy = vec![0u8; stream.len()];
    g.bench_function(format!("memcpy/{}x~122B", STREAM_FRAMES), |b| {
        b.iter(|| {
            copy.copy_from_slice(black_box(&stream));
            black_box(&copy);
        })
    });
    // Non-consuming decode over a shared Bytes view, advancing by each frame's length.
    g.bench_function(format!("decode_frame/{}x~122B", STREAM_FRAMES), |b| {
        b.iter(|| {
            let mut rest = black_box(&stream).clone();
            let mut n = 0usize;
            while let Ok(DecodeStatus::Complete { frame, len }) =
                decode_frame(&rest, MAX_MESSAGE_BYTES)
            {
                black_box(frame);
                rest.advance(len);
                n += 1;
            }
            assert_eq!(n, STREAM_FRAMES);
        })
    });
    // The reader's path: split each frame off a BytesMut read buffer (the buffer refill is setup).
    g.bench_function(format!("take_frame/{}x~122B", STREAM_FRAMES), |b| {
        b.iter_batched(
            || BytesMut::from(&stream[..]),
            |mut buf| {
                let mut n = 0usize;
                while let Ok(Some(frame)) = take_frame(&mut buf, MAX_MESSAGE_BYTES) {
                    black_box(frame);
                    n += 1;
                }
                assert_eq!(n, STREAM_FRAMES);
            },
            BatchSize::LargeInput,
        )
    });
    // The shard reader's path since 2026-11-30: Data frames through `take_data` (no `Frame`
    // built), anything else through `take_frame`.
    g.bench_function(format!("take_data/{}x~122B", STREAM_FRAMES), |b| {
        b.iter_batched(
            || BytesMut::from(&stream[..]),
            |mut buf| {
                let mut n = 0usize;
                loop {
                    match take_data(&mut buf, MAX_MESSAGE_BYTES) {
                        Some(d) => {
                            black_box(d);
                        }
                        None => match take_frame(&mut buf, MAX_MESSAGE_BYTES) {
                            Ok(Some(frame)) => {
                                black_box(frame);
                            }
                            _ => break,
                        },
                    }
                    n += 1;
                }
                assert_eq!(n, STREAM_FRAMES);
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

/// Every codec bench; a plain fn rather than `criterion_group!`, whose generated `pub fn` has no docs.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    bench_encode(&mut c);
    bench_decode(&mut c);
    bench_stream(&mut c);
}

criterion_main!(benches);
