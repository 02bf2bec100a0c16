//! The reliability frames (types 11 to 14): hand-computed byte vectors, round trips through
//! every decoder, and one test per malformed case (truncated, trailing bytes, bitmap rules,
//! empty repair, bad ranges, sequence overflow), in the style of `wire_errors.rs`.

use bytes::{Bytes, BytesMut};
use shoal_proto::wire::{
    decode_frame, take_frame, AckNack, DecodeError, DecodeStatus, EncodeError, Frame, FrameType,
    Gap, Heartbeat, Repair, SeqSet, MAX_MESSAGE_BYTES,
};

const W: [u8; 16] = [0xa0; 16];
const R: [u8; 16] = [0xb0; 16];

fn frame_of(ty: u8, body: &[u8]) -> Vec<u8> {
    let mut v = ((body.len() + 1) as u32).to_be_bytes().to_vec();
    v.push(ty);
    v.extend_from_slice(body);
    v
}

fn unhex(h: &str) -> Vec<u8> {
    hex::decode(h).expect("hex")
}

/// Decodes through `decode_frame` and `take_frame`, which must agree; `take_frame` leaves the
/// buffer untouched on error and takes exactly the frame on success.
fn decoded(bytes: &[u8]) -> Result<Frame, DecodeError> {
    let via_decode = match decode_frame(&Bytes::copy_from_slice(bytes), MAX_MESSAGE_BYTES) {
        Ok(DecodeStatus::Complete { frame, len }) => {
            assert_eq!(len, bytes.len());
            Ok(frame)
        }
        Ok(DecodeStatus::NeedMore { .. }) => panic!("whole frame given"),
        Err(e) => Err(e),
    };
    let mut buf = BytesMut::from(bytes);
    let via_take = take_frame(&mut buf, MAX_MESSAGE_BYTES).map(|f| f.expect("whole frame"));
    match &via_take {
        Ok(_) => assert!(buf.is_empty()),
        Err(_) => assert_eq!(&buf[..], bytes, "an error consumed bytes"),
    }
    assert_eq!(via_decode, via_take);
    via_take
}

fn encoded(f: &Frame) -> Vec<u8> {
    let mut out = BytesMut::new();
    f.encode(&mut out).expect("encodes");
    assert_eq!(out.len(), f.encoded_len());
    out.to_vec()
}

fn acknack(base: u64, seqs: &[u64]) -> AckNack {
    let mut a = AckNack {
        ttl: 3,
        writer: W,
        reader: R,
        count: 7,
        base,
        missing: SeqSet::new(),
    };
    for &s in seqs {
        assert!(a.request(s));
    }
    a
}

#[test]
fn heartbeat_vector_round_trips() {
    let hex = concat!(
        "00000022",                         // length 34 = type + 33
        "0b",                               // type 11
        "05",                               // ttl
        "a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0", // writer
        "0000000000000003",                 // first
        "0000000000000009",                 // last
    );
    let hb = Heartbeat {
        ttl: 5,
        writer: W,
        first: 3,
        last: 9,
    };
    assert_eq!(encoded(&Frame::WriterHeartbeat(hb)), unhex(hex));
    assert_eq!(decoded(&unhex(hex)), Ok(Frame::WriterHeartbeat(hb)));
    assert_eq!(
        Frame::WriterHeartbeat(hb).frame_type(),
        FrameType::WriterHeartbeat
    );
    // Holding nothing: first = last + 1, including before anything was written.
    for (first, last) in [(10, 9), (1, 0), (u64::MAX, u64::MAX)] {
        let f = Frame::WriterHeartbeat(Heartbeat { first, last, ..hb });
        assert_eq!(decoded(&encoded(&f)), Ok(f));
    }
}

#[test]
fn acknack_vector_round_trips() {
    // base 100, missing 100, 107, 108 → nbits 9 → two bitmap bytes 0x81 0x80.
    let hex = concat!(
        "00000032",                         // length 50 = type + 47 + 2
        "0c",                               // type 12
        "03",                               // ttl
        "a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0", // writer
        "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0", // reader
        "00000007",                         // count
        "0000000000000064",                 // base 100
        "0009",                             // nbits
        "8180",                             // bitmap
    );
    let a = acknack(100, &[100, 107, 108]);
    let bytes = unhex(hex);
    assert_eq!(bytes.len(), 4 + 0x32);
    assert_eq!(encoded(&Frame::AckNack(a)), bytes);
    let Ok(Frame::AckNack(back)) = decoded(&bytes) else {
        panic!("an AckNack")
    };
    assert_eq!(back, a);
    assert_eq!(back.missing_seqs().collect::<Vec<_>>(), vec![100, 107, 108]);
    // A pure ack, a sync request and a full 256-bit map all round-trip.
    let full = acknack(5, &(5..5 + 256).collect::<Vec<_>>());
    assert_eq!(full.missing.nbits(), 256);
    for a in [acknack(42, &[]), acknack(0, &[]), full] {
        assert_eq!(decoded(&encoded(&Frame::AckNack(a))), Ok(Frame::AckNack(a)));
    }
    assert!(acknack(0, &[]).is_sync());
}

#[test]
fn repair_vector_round_trips_without_copying() {
    let hex = concat!(
        "0000003b",                         // length 59 = type + 43 + 6 + 9
        "0d",                               // type 13
        "00",                               // ttl
        "a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0", // writer
        "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0", // reader
        "000000000000000a",                 // firstSeq 10
        "0002",                             // count
        "00000002",
        "6869", // "hi"
        "00000005",
        "776f726c64", // "world"
    );
    let r = Repair::new(0, W, R, 10, [&b"hi"[..], b"world"]).unwrap();
    assert_eq!(encoded(&Frame::Repair(r.clone())), unhex(hex));
    let bytes = Bytes::from(unhex(hex));
    let Ok(DecodeStatus::Complete {
        frame: Frame::Repair(back),
        ..
    }) = decode_frame(&bytes, MAX_MESSAGE_BYTES)
    else {
        panic!("a Repair")
    };
    assert_eq!(back, r);
    assert_eq!(back.last_seq(), 11);
    let ps: Vec<Bytes> = back.payloads().collect();
    assert_eq!(
        ps,
        vec![Bytes::from_static(b"hi"), Bytes::from_static(b"world")]
    );
    // The payloads are slices of the read buffer, not copies.
    let base = bytes.as_ptr() as usize;
    assert!((base..base + bytes.len()).contains(&(ps[1].as_ptr() as usize)));
    assert_eq!(decoded(&unhex(hex)), Ok(Frame::Repair(r)));
}

#[test]
fn gap_vector_round_trips() {
    let hex = concat!(
        "00000032",                         // length 50 = type + 49
        "0e",                               // type 14
        "00",                               // ttl
        "a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0", // writer
        "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0", // reader
        "0000000000000001",                 // first
        "0000000000000001",                 // last
    );
    let g = Gap {
        ttl: 0,
        writer: W,
        reader: R,
        first: 1,
        last: 1,
    };
    assert_eq!(encoded(&Frame::Gap(g)), unhex(hex));
    assert_eq!(decoded(&unhex(hex)), Ok(Frame::Gap(g)));
}

/// Every frame's body cut at every length is Truncated; one byte more is TrailingBytes.
#[test]
fn truncated_and_trailing_bodies_are_rejected() {
    let frames = [
        Frame::WriterHeartbeat(Heartbeat {
            ttl: 1,
            writer: W,
            first: 1,
            last: 4,
        }),
        Frame::AckNack(acknack(3, &[4, 20])),
        Frame::Repair(Repair::new(0, W, R, 1, [&b"abc"[..], b""]).unwrap()),
        Frame::Gap(Gap {
            ttl: 0,
            writer: W,
            reader: R,
            first: 2,
            last: 5,
        }),
    ];
    for f in frames {
        let full = encoded(&f);
        let (ty, body) = (full[4], &full[5..]);
        for cut in 0..body.len() {
            assert!(
                matches!(
                    decoded(&frame_of(ty, &body[..cut])),
                    Err(DecodeError::Truncated { .. })
                ),
                "{f:?} cut at {cut}"
            );
        }
        let mut longer = body.to_vec();
        longer.push(0);
        assert!(
            matches!(
                decoded(&frame_of(ty, &longer)),
                Err(DecodeError::TrailingBytes { extra: 1, .. })
            ),
            "{f:?} with a trailing byte"
        );
    }
}

/// An AckNack body with the given `base`, `nbits` and bitmap bytes.
fn acknack_with(base: u64, nbits: u16, bitmap: &[u8]) -> Vec<u8> {
    let mut body = vec![0];
    body.extend_from_slice(&W);
    body.extend_from_slice(&R);
    body.extend_from_slice(&1u32.to_be_bytes());
    body.extend_from_slice(&base.to_be_bytes());
    body.extend_from_slice(&nbits.to_be_bytes());
    body.extend_from_slice(bitmap);
    frame_of(12, &body)
}

#[test]
fn acknack_bitmap_rules() {
    assert!(decoded(&acknack_with(1, 256, &[0xff; 32])).is_ok());
    assert_eq!(
        decoded(&acknack_with(1, 257, &[0xff; 33])),
        Err(DecodeError::BadAckNack("nbits above 256"))
    );
    // The bitmap is ceil(nbits / 8) bytes: one short is truncated, one more is trailing.
    assert!(matches!(
        decoded(&acknack_with(1, 9, &[0x80])),
        Err(DecodeError::Truncated {
            field: "AckNack.bitmap",
            ..
        })
    ));
    assert!(matches!(
        decoded(&acknack_with(1, 8, &[0x80, 0])),
        Err(DecodeError::TrailingBytes {
            frame: "AckNack",
            extra: 1
        })
    ));
    // Bits past nbits in the last byte.
    assert_eq!(
        decoded(&acknack_with(1, 9, &[0, 0x40])),
        Err(DecodeError::BadAckNack("bits set past nbits"))
    );
    // A sync request carries no bitmap.
    assert!(decoded(&acknack_with(0, 0, &[])).is_ok());
    assert!(matches!(
        decoded(&acknack_with(0, 1, &[0x80])),
        Err(DecodeError::BadAckNack(_))
    ));
    // Requests past u64::MAX.
    assert!(decoded(&acknack_with(u64::MAX, 1, &[0x80])).is_ok());
    assert!(matches!(
        decoded(&acknack_with(u64::MAX, 2, &[0x40])),
        Err(DecodeError::BadAckNack(_))
    ));
}

fn repair_with(first_seq: u64, count: u16, samples: &[u8]) -> Vec<u8> {
    let mut body = vec![0];
    body.extend_from_slice(&W);
    body.extend_from_slice(&R);
    body.extend_from_slice(&first_seq.to_be_bytes());
    body.extend_from_slice(&count.to_be_bytes());
    body.extend_from_slice(samples);
    frame_of(13, &body)
}

#[test]
fn repair_count_zero_seq_zero_and_overflow() {
    assert_eq!(
        decoded(&repair_with(1, 0, &[])),
        Err(DecodeError::EmptyRepair)
    );
    assert_eq!(
        decoded(&repair_with(0, 1, &[0; 4])),
        Err(DecodeError::BadRepairSeq {
            first_seq: 0,
            count: 1
        })
    );
    assert_eq!(
        decoded(&repair_with(u64::MAX, 2, &[0; 8])),
        Err(DecodeError::BadRepairSeq {
            first_seq: u64::MAX,
            count: 2
        })
    );
    assert!(decoded(&repair_with(u64::MAX, 1, &[0; 4])).is_ok());
    assert_eq!(
        decoded(&repair_with(1, 1, &unhex("0000000361"))),
        Err(DecodeError::Truncated {
            field: "Repair.payload",
            needed: 3,
            available: 1
        })
    );
}

fn range_with(ty: u8, first: u64, last: u64) -> Vec<u8> {
    let mut body = vec![0];
    body.extend_from_slice(&W);
    if ty == 14 {
        body.extend_from_slice(&R);
    }
    body.extend_from_slice(&first.to_be_bytes());
    body.extend_from_slice(&last.to_be_bytes());
    frame_of(ty, &body)
}

#[test]
fn gap_and_heartbeat_ranges() {
    for (first, last) in [(0, 5), (6, 5), (0, 0)] {
        assert_eq!(
            decoded(&range_with(14, first, last)),
            Err(DecodeError::BadSeqRange {
                frame: "Gap",
                first,
                last
            })
        );
    }
    assert!(decoded(&range_with(14, 5, 5)).is_ok());
    // A heartbeat may hold nothing (first = last + 1) but not less.
    assert!(decoded(&range_with(11, 6, 5)).is_ok());
    for (first, last) in [(0, 5), (7, 5), (0, 0)] {
        assert_eq!(
            decoded(&range_with(11, first, last)),
            Err(DecodeError::BadSeqRange {
                frame: "Heartbeat",
                first,
                last
            })
        );
    }
}

#[test]
fn reliability_frames_that_would_not_decode_fail_to_encode() {
    let mut out = BytesMut::new();
    let bad = [
        Frame::Gap(Gap {
            ttl: 0,
            writer: W,
            reader: R,
            first: 3,
            last: 2,
        }),
        Frame::WriterHeartbeat(Heartbeat {
            ttl: 0,
            writer: W,
            first: 0,
            last: 0,
        }),
        Frame::Repair(Repair {
            count: 3,
            ..Repair::new(0, W, R, 1, [b"x"]).unwrap()
        }),
    ];
    for f in bad {
        assert!(matches!(
            f.encode(&mut out),
            Err(EncodeError::BadReliable(_))
        ));
        assert!(out.is_empty(), "nothing written on error");
    }
    assert!(Repair::new(0, W, R, 1, Vec::<&[u8]>::new()).is_err());
    assert!(Repair::new(0, W, R, u64::MAX, [b"x", b"y"]).is_err());
}

/// The committed fuzz seeds (`mesh/fuzz/seed_corpus.py`) are this file's vectors: each decodes
/// to the value its test builds, and the stream splits into the five frames in order.
#[test]
fn fuzz_seeds_hold_the_reliable_vectors() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/frame_decode");
    let read = |name: &str| {
        std::fs::read(dir.join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}; run python3 mesh/fuzz/seed_corpus.py"))
    };
    let want = [
        (
            "reliable-Heartbeat",
            Frame::WriterHeartbeat(Heartbeat {
                ttl: 5,
                writer: W,
                first: 3,
                last: 9,
            }),
        ),
        (
            "reliable-AckNack",
            Frame::AckNack(acknack(100, &[100, 107, 108])),
        ),
        (
            "reliable-Repair",
            Frame::Repair(Repair::new(0, W, R, 10, [&b"hi"[..], b"world"]).unwrap()),
        ),
        (
            "reliable-Gap",
            Frame::Gap(Gap {
                ttl: 0,
                writer: W,
                reader: R,
                first: 1,
                last: 1,
            }),
        ),
    ];
    let mut stream = BytesMut::from(&read("reliable-stream")[..]);
    assert!(matches!(
        take_frame(&mut stream, MAX_MESSAGE_BYTES),
        Ok(Some(Frame::Samples(_)))
    ));
    for (name, frame) in want {
        assert_eq!(read(name), encoded(&frame), "{name}");
        assert_eq!(take_frame(&mut stream, MAX_MESSAGE_BYTES), Ok(Some(frame)));
    }
    assert!(stream.is_empty());
}
