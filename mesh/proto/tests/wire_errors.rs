//! The typed failures of the wire codec, one case each, plus the announce acceptance rules and
//! the extended-frame sending rule; the topic frames' hand-computed byte vectors (also the
//! fuzz seeds of `mesh/fuzz/seeds/frame_decode/topic-*`).
//!
//! Length: about 860 lines, one short test per malformed case of every frame, which is the
//! point of the file; splitting it by frame would scatter the shared helpers.

use bytes::{Bytes, BytesMut};
use shoal_proto::wire::{
    decode_frame, peek_frame_len, peer_accepts_frame_type, take_frame, take_samples, Beacon,
    BeaconFilter, BeaconReject, Data, DataHeader, DecodeError, DecodeStatus, Discovery,
    DiscoveryEntry, EncodeError, Features, Frame, FrameType, Hello, HelloIdentity, IdentityRecord,
    Membership, SampleRunWriter, Samples, SamplesHeader, ShoalExtension, DATA_HEADER_LEN,
    MAX_HANDSHAKE_FRAME_LEN, MAX_HELLO_V1_LEN, MAX_MESSAGE_BYTES, MAX_RECORD_ENTRY_LEN,
    PROTOCOL_VERSION,
};
use shoal_proto::{MsgId, PeerId};

fn decode(bytes: &[u8]) -> Result<DecodeStatus<Frame>, DecodeError> {
    decode_frame(&Bytes::copy_from_slice(bytes), MAX_MESSAGE_BYTES)
}

fn frame_of(ty: u8, body: &[u8]) -> Vec<u8> {
    let mut v = ((body.len() + 1) as u32).to_be_bytes().to_vec();
    v.push(ty);
    v.extend_from_slice(body);
    v
}

fn hello() -> Hello {
    Hello {
        node_id: PeerId([7; 16]),
        protocol_version: PROTOCOL_VERSION,
        tcp_listen_port: 4000,
        group_name: "g".into(),
        nonce: 42,
        eph_pub_key: None,
        identity: None,
        shoal: None,
    }
}

#[test]
fn zero_length_is_an_error() {
    assert_eq!(decode(&[0, 0, 0, 0]), Err(DecodeError::EmptyFrame));
}

#[test]
fn oversized_length_is_rejected_from_the_prefix_alone() {
    let len = MAX_MESSAGE_BYTES + 1;
    assert_eq!(
        decode(&len.to_be_bytes()),
        Err(DecodeError::TooLarge {
            len,
            max: MAX_MESSAGE_BYTES
        })
    );
    // Exactly the maximum is allowed and just waits for the bytes.
    assert_eq!(
        decode(&MAX_MESSAGE_BYTES.to_be_bytes()),
        Ok(DecodeStatus::NeedMore {
            needed: 4 + MAX_MESSAGE_BYTES as usize
        })
    );
    assert_eq!(
        peek_frame_len(&[0, 0, 1, 0], 255),
        Err(DecodeError::TooLarge { len: 256, max: 255 })
    );
}

#[test]
fn unknown_frame_types_are_errors() {
    // 9 and 10 are Shoal's topic frames, 11 to 14 its reliability frames, 15 its signed
    // membership record, 16 its membership digest; 17 is the first type nobody defines.
    for ty in [0u8, 17, 18, 200, 255] {
        assert_eq!(
            decode(&frame_of(ty, &[])),
            Err(DecodeError::UnknownFrameType(ty))
        );
    }
}

#[test]
fn body_overrun_names_the_field() {
    // A Data frame whose payloadLen claims one byte more than the body holds.
    let mut body = vec![0u8; 53];
    body[49..53].copy_from_slice(&3u32.to_be_bytes());
    body.extend_from_slice(b"ab");
    assert!(matches!(
        decode(&frame_of(4, &body)),
        Err(DecodeError::Truncated {
            field: "Data.payload",
            needed: 3,
            available: 2
        })
    ));
    // Membership count beyond the body: rejected before allocating the list.
    let mut m = vec![0u8; 24];
    m.extend_from_slice(&u16::MAX.to_be_bytes());
    assert!(matches!(
        decode(&frame_of(6, &m)),
        Err(DecodeError::Truncated {
            field: "Membership.neighbours",
            ..
        })
    ));
}

#[test]
fn bad_flags_and_utf8_are_errors() {
    let mut buf = Vec::new();
    Frame::Hello(hello()).encode(&mut buf).unwrap();
    let secure_at = 4 + 1 + 16 + 1 + 2 + 2 + 8; // after groupName "g" and nonce
    assert_eq!(buf[secure_at], 0);
    buf[secure_at] = 2;
    assert_eq!(
        decode(&buf),
        Err(DecodeError::BadFlag {
            field: "Hello.secure",
            value: 2
        })
    );
    buf[secure_at] = 0;
    buf[4 + 1 + 16 + 1 + 2 + 1] = 0xff; // the group name's only byte
    assert_eq!(
        decode(&buf),
        Err(DecodeError::InvalidUtf8 {
            field: "Hello.groupName"
        })
    );
    let mut ac = vec![0u8; 32];
    ac.push(7);
    assert_eq!(
        decode(&frame_of(7, &ac)),
        Err(DecodeError::BadFlag {
            field: "AuthConfirm.hasSig",
            value: 7
        })
    );
}

#[test]
fn trailing_body_bytes_are_ignored() {
    let mut body = vec![];
    body.extend_from_slice(b"extra");
    assert_eq!(
        decode(&frame_of(3, &body)),
        Ok(DecodeStatus::Complete {
            frame: Frame::Heartbeat,
            len: 10
        })
    );
}

#[test]
fn errors_leave_the_read_buffer_untouched() {
    let mut buf = BytesMut::from(&frame_of(11, b"xyz")[..]);
    let before = buf.clone();
    assert!(take_frame(&mut buf, MAX_MESSAGE_BYTES).is_err());
    assert_eq!(buf, before);
    let mut partial = BytesMut::from(&frame_of(3, &[])[..4]);
    assert_eq!(take_frame(&mut partial, MAX_MESSAGE_BYTES), Ok(None));
    assert_eq!(partial.len(), 4);
}

#[test]
fn overlong_strings_fail_to_encode_without_writing() {
    let long = "x".repeat(256);
    let mut out = BytesMut::new();
    let bad_group = Frame::Hello(Hello {
        group_name: long.clone(),
        ..hello()
    });
    assert_eq!(
        bad_group.encode(&mut out),
        Err(EncodeError::StrTooLong {
            field: "Hello.groupName",
            len: 256
        })
    );
    let bad_name = Frame::HelloAck(Hello {
        identity: Some(HelloIdentity {
            id_pub_key: [1; 32],
            node_name: long.clone(),
        }),
        ..hello()
    });
    assert!(matches!(
        bad_name.encode(&mut out),
        Err(EncodeError::StrTooLong {
            field: "Hello.nodeName",
            ..
        })
    ));
    let bad_rec = Frame::IdentityRecord(IdentityRecord {
        id_pub_key: [0; 32],
        version: 1,
        sig: [0; 64],
        name: long.clone(),
    });
    assert!(bad_rec.encode(&mut out).is_err());
    let too_many = Frame::Membership(Membership {
        origin: PeerId::ZERO,
        version: 0,
        neighbours: vec![PeerId::ZERO; 65536],
    });
    assert_eq!(
        too_many.encode(&mut out),
        Err(EncodeError::TooManyNeighbours { count: 65536 })
    );
    assert!(Beacon::new(PeerId::ZERO, 1, &long, false)
        .encode_body(&mut out)
        .is_err());
    assert!(out.is_empty());
    // 255 bytes is the limit and is fine.
    let ok = Frame::Hello(Hello {
        group_name: "y".repeat(255),
        ..hello()
    });
    ok.encode(&mut out).unwrap();
    assert_eq!(out.len(), ok.encoded_len());
}

#[test]
fn data_header_is_the_frame_prefix() {
    let d = Data {
        src: PeerId([1; 16]),
        dst: PeerId::ZERO,
        msg_id: MsgId::new(&PeerId([1; 16]), 9),
        ttl: 8,
        payload: Bytes::from_static(b"payload"),
    };
    let mut whole = Vec::new();
    Frame::Data(d.clone()).encode(&mut whole).unwrap();
    assert_eq!(whole.len(), DATA_HEADER_LEN + 7);
    let h = d.header().unwrap();
    assert_eq!(&whole[..DATA_HEADER_LEN], h.as_bytes());
    assert_eq!(h.payload_len(), 7);
    let direct = DataHeader::new(&d.src, &d.dst, &d.msg_id, d.ttl, 7).unwrap();
    assert_eq!(direct, h);
    assert!(matches!(
        DataHeader::new(&d.src, &d.dst, &d.msg_id, 1, u32::MAX as usize),
        Err(EncodeError::FrameTooLarge { .. })
    ));
}

#[test]
fn announce_filter_says_why() {
    let me = PeerId([9; 16]);
    let other = PeerId([3; 16]);
    let filter = BeaconFilter {
        secured: false,
        protocol_version: PROTOCOL_VERSION,
        group_name: "grp",
        own_id: me,
    };
    let enc = |a: &Beacon| {
        let mut v = Vec::new();
        a.encode_body(&mut v).unwrap();
        if a.is_secured() {
            v.extend_from_slice(&[0xaa; 16]);
        }
        v
    };
    let good = Beacon::new(other, 5000, "grp", false);
    assert_eq!(filter.accept(&enc(&good)).unwrap().announce, good);
    assert_eq!(
        filter.accept(&enc(&Beacon::new(other, 5000, "grp", true))),
        Err(BeaconReject::ModeMismatch {
            ours: false,
            theirs: true
        })
    );
    let v2 = Beacon {
        protocol_version: 2,
        ..good.clone()
    };
    assert_eq!(
        filter.accept(&enc(&v2)),
        Err(BeaconReject::VersionMismatch { ours: 1, theirs: 2 })
    );
    assert_eq!(
        filter.accept(&enc(&Beacon::new(other, 5000, "other", false))),
        Err(BeaconReject::GroupMismatch {
            theirs: "other".into()
        })
    );
    assert_eq!(
        filter.accept(&enc(&Beacon::new(me, 5000, "grp", false))),
        Err(BeaconReject::OwnAnnounce)
    );
    let mut bad = enc(&good);
    bad[0] = b'X';
    assert_eq!(
        filter.accept(&bad),
        Err(BeaconReject::Malformed(DecodeError::BadMagic(*b"XMCA")))
    );
    // A secured announce cut inside its MAC is malformed, not accepted without one.
    let sec = enc(&Beacon::new(other, 5000, "grp", true));
    assert!(matches!(
        Beacon::decode(&sec[..sec.len() - 1]),
        Err(DecodeError::Truncated {
            field: "Announce.mac",
            ..
        })
    ));
}

#[test]
fn extended_frames_need_the_feature() {
    let plain = None;
    let shoal_without = Some(ShoalExtension::new(1, Features::NONE));
    let shoal_with = Some(ShoalExtension::new(1, Features::EXTENDED_FRAMES));
    for t in 1..=8 {
        assert!(peer_accepts_frame_type(plain, t));
    }
    assert!(!peer_accepts_frame_type(plain, 0));
    assert!(!peer_accepts_frame_type(plain, 9));
    assert!(!peer_accepts_frame_type(shoal_without.as_ref(), 9));
    assert!(peer_accepts_frame_type(shoal_with.as_ref(), 9));
    assert!(peer_accepts_frame_type(shoal_with.as_ref(), 10));
    assert!(!peer_accepts_frame_type(shoal_without.as_ref(), 10));
    // This build implements the topic frames, so it advertises the bit.
    assert!(ShoalExtension::current()
        .features
        .contains(Features::EXTENDED_FRAMES));
    assert!(peer_accepts_frame_type(
        Some(&ShoalExtension::current()),
        10
    ));
}

#[test]
fn shoal_extension_round_trips_and_malformed_blocks_mean_plain_peer() {
    let with_ext = Hello {
        shoal: Some(ShoalExtension::current()),
        ..hello()
    };
    let mut buf = Vec::new();
    Frame::Hello(with_ext.clone()).encode(&mut buf).unwrap();
    let DecodeStatus::Complete { frame, .. } = decode(&buf).unwrap() else {
        panic!("whole frame")
    };
    assert_eq!(frame, Frame::Hello(with_ext));
    // Cut the block's tail length short: still a valid Hello, just no extension.
    let mut short = buf.clone();
    short.truncate(short.len() - 1);
    let len = (short.len() - 4) as u32;
    short[..4].copy_from_slice(&len.to_be_bytes());
    let DecodeStatus::Complete { frame, .. } = decode(&short).unwrap() else {
        panic!("whole frame")
    };
    assert_eq!(frame, Frame::Hello(hello()));
}

/// The pre-handshake frame bound admits the largest valid Hello (every field at its longest,
/// secured, with identity and Shoal's extension), and nothing near `maxMessageBytes`.
#[test]
fn the_largest_hello_fits_the_handshake_frame_bound() {
    let mut h = hello();
    h.group_name = "g".repeat(255);
    h.eph_pub_key = Some([1; 32]);
    h.identity = Some(HelloIdentity {
        id_pub_key: [2; 32],
        node_name: "n".repeat(255),
    });
    h.shoal = None;
    let mut out = Vec::new();
    Frame::Hello(h.clone()).encode(&mut out).unwrap();
    assert_eq!(out.len() as u32 - 4, MAX_HELLO_V1_LEN);
    h.shoal = Some(ShoalExtension::current());
    let mut out = Vec::new();
    Frame::Hello(h).encode(&mut out).unwrap();
    assert!(out.len() as u32 - 4 <= MAX_HANDSHAKE_FRAME_LEN);
    assert!(matches!(
        peek_frame_len(&out, MAX_HANDSHAKE_FRAME_LEN),
        Ok(DecodeStatus::Complete { .. })
    ));
    const { assert!(MAX_HANDSHAKE_FRAME_LEN < MAX_MESSAGE_BYTES / 1000) };
}

// ------------------------------------------------------------------ topic frames

/// A Discovery frame written out by hand from the layout (`wire::topic_frames`), not by the
/// encoder: length 0x44 = 68 (type + 35 fixed + three entries of 8, 5 and 19 bytes).
const DISCOVERY_HEX: &str = concat!(
    "00000044",                         // length
    "09",                               // type Discovery
    "11111111111111111111111111111111", // origin
    "0102030405060708",                 // seq
    "08",                               // ttl
    "0000002a",                         // cycle 42
    "0001",                             // part 1
    "0003",                             // of 3 parts
    "0003",                             // 3 entries
    "01",
    "0005",
    "deadbeef01", // Record of 5 bytes
    "7f",
    "0002",
    "aabb", // kind 127: a later version's entry, skipped
    "02",
    "0010",
    "22222222222222222222222222222222", // Withdraw
);

/// The same frame as this build encodes it: the unknown entry is gone (count 2, length 63).
const DISCOVERY_REENCODED_HEX: &str = concat!(
    "0000003f",
    "09",
    "11111111111111111111111111111111",
    "0102030405060708",
    "08",
    "0000002a",
    "0001",
    "0003",
    "0002",
    "01",
    "0005",
    "deadbeef01",
    "02",
    "0010",
    "22222222222222222222222222222222",
);

/// A Samples frame by hand: writer a0..af, firstSeq 255, samples "hi", "" and "abc";
/// length 0x2e = 46 (type + 28 fixed + 6 + 4 + 7).
const SAMPLES_HEX: &str = concat!(
    "0000002e",                         // length
    "0a",                               // type Samples
    "07",                               // ttl
    "00",                               // flags
    "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf", // writer
    "00000000000000ff",                 // firstSeq 255
    "0003",                             // 3 samples
    "00000002",
    "6869",     // "hi"
    "00000000", // ""
    "00000003",
    "616263", // "abc"
);

fn unhex(h: &str) -> Vec<u8> {
    hex::decode(h).expect("hex")
}

fn vector_discovery() -> Discovery {
    Discovery {
        origin: PeerId([0x11; 16]),
        seq: 0x0102_0304_0506_0708,
        ttl: 8,
        cycle: 42,
        part: 1,
        parts: 3,
        entries: vec![
            DiscoveryEntry::Record(Bytes::from_static(&[0xde, 0xad, 0xbe, 0xef, 0x01])),
            DiscoveryEntry::Withdraw([0x22; 16]),
        ],
    }
}

fn writer_guid() -> [u8; 16] {
    std::array::from_fn(|i| 0xa0 + i as u8)
}

#[test]
fn discovery_vector_decodes_and_reencodes_without_the_unknown_entry() {
    let bytes = unhex(DISCOVERY_HEX);
    assert_eq!(
        decode(&bytes),
        Ok(DecodeStatus::Complete {
            frame: Frame::Discovery(vector_discovery()),
            len: 72
        })
    );
    let mut out = Vec::new();
    vector_discovery().encode(&mut out).unwrap();
    assert_eq!(hex::encode(&out), DISCOVERY_REENCODED_HEX);
    assert_eq!(out.len(), vector_discovery().encoded_len());
}

#[test]
fn samples_vector_decodes_and_every_writer_reproduces_it() {
    let bytes = unhex(SAMPLES_HEX);
    let DecodeStatus::Complete {
        frame: Frame::Samples(s),
        len: 50,
    } = decode(&bytes).unwrap()
    else {
        panic!("a 50-byte Samples frame")
    };
    assert_eq!(
        (s.ttl, s.writer, s.first_seq, s.count),
        (7, writer_guid(), 255, 3)
    );
    assert_eq!(s.seqs().collect::<Vec<_>>(), vec![255, 256, 257]);
    assert_eq!(s.last_seq(), 257);
    let payloads: Vec<Bytes> = s.payloads().collect();
    assert_eq!(payloads, vec![&b"hi"[..], b"", b"abc"]);
    // The fast lane reads the same frame.
    let mut buf = BytesMut::from(&bytes[..]);
    assert_eq!(take_samples(&mut buf, MAX_MESSAGE_BYTES), Some(s.clone()));
    // Three ways to write it give the vector: the frame encoder, header + body, the writer.
    let mut out = Vec::new();
    Frame::Samples(s.clone()).encode(&mut out).unwrap();
    assert_eq!(hex::encode(&out), SAMPLES_HEX);
    let h = SamplesHeader::new(7, &writer_guid(), 255, 3, s.body.len()).unwrap();
    assert_eq!(h.as_bytes()[..], bytes[..33]);
    assert_eq!(s.body[..], bytes[33..]);
    let mut run = BytesMut::new();
    let mut w = SampleRunWriter::new(&mut run, writer_guid(), 7, 255, MAX_MESSAGE_BYTES);
    for p in [&b"hi"[..], b"", b"abc"] {
        w.push(p).unwrap();
    }
    assert_eq!(w.finish(), 258);
    assert_eq!(hex::encode(&run), SAMPLES_HEX);
    let built = Samples::new(7, writer_guid(), 255, [&b"hi"[..], b"", b"abc"]).unwrap();
    assert_eq!(built, s);
}

/// The committed fuzz seeds for the topic frames are these vectors (written by
/// `mesh/fuzz/seed_corpus.py`); a format change must regenerate both.
#[test]
fn fuzz_seeds_hold_the_topic_vectors() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/frame_decode");
    let read = |name: &str| {
        std::fs::read(dir.join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}; run python3 mesh/fuzz/seed_corpus.py"))
    };
    let (d, s) = (unhex(DISCOVERY_HEX), unhex(SAMPLES_HEX));
    assert_eq!(read("topic-Discovery"), d);
    assert_eq!(read("topic-Samples"), s);
    assert_eq!(read("topic-stream"), [d, s].concat());
}

/// The Discovery vector with its body replaced (the length follows).
fn discovery_with(entries_hex: &str, count: u16) -> Vec<u8> {
    let mut body = unhex(&DISCOVERY_HEX[10..10 + 2 * 33]); // origin .. parts
    body.extend_from_slice(&count.to_be_bytes());
    body.extend_from_slice(&unhex(entries_hex));
    frame_of(9, &body)
}

/// A Samples frame with the vector's writer and the given fields and sample bytes.
fn samples_with(flags: u8, first_seq: u64, count: u16, samples_hex: &str) -> Vec<u8> {
    let mut body = vec![7, flags];
    body.extend_from_slice(&writer_guid());
    body.extend_from_slice(&first_seq.to_be_bytes());
    body.extend_from_slice(&count.to_be_bytes());
    body.extend_from_slice(&unhex(samples_hex));
    frame_of(10, &body)
}

/// The read path's view of a malformed topic frame: the fast lane declines it, `take_frame`
/// names the error and leaves the buffer as it was.
fn rejected(bytes: &[u8]) -> DecodeError {
    let mut buf = BytesMut::from(bytes);
    assert_eq!(take_samples(&mut buf, MAX_MESSAGE_BYTES), None);
    let err = take_frame(&mut buf, MAX_MESSAGE_BYTES).expect_err("malformed");
    assert_eq!(&buf[..], bytes, "an error consumed bytes");
    assert_eq!(decode(bytes), Err(err.clone()));
    err
}

#[test]
fn the_discovery_helpers_rebuild_the_vector() {
    // Guards the helpers below: with the vector's entries they give the vector back.
    let entries = &DISCOVERY_HEX[10 + 2 * 35..];
    assert_eq!(hex::encode(discovery_with(entries, 3)), DISCOVERY_HEX);
    assert_eq!(
        hex::encode(samples_with(0, 255, 3, &SAMPLES_HEX[10 + 2 * 28..])),
        SAMPLES_HEX
    );
}

#[test]
fn discovery_entry_overrunning_the_body() {
    assert_eq!(
        rejected(&discovery_with("010005deadbeef", 1)),
        DecodeError::Truncated {
            field: "Discovery.entry.value",
            needed: 5,
            available: 4
        }
    );
    // An entry header cut short, and a count promising more entries than there are.
    assert!(matches!(
        rejected(&discovery_with("0100", 1)),
        DecodeError::Truncated {
            field: "Discovery.entry.len",
            ..
        }
    ));
    assert!(matches!(
        rejected(&discovery_with("010001ff", 2)),
        DecodeError::Truncated {
            field: "Discovery.entry.kind",
            ..
        }
    ));
    // Cut inside the fixed fields.
    assert!(matches!(
        rejected(&frame_of(9, &[0; 34])),
        DecodeError::Truncated {
            field: "Discovery.count",
            ..
        }
    ));
}

#[test]
fn discovery_record_empty_or_over_32_kib() {
    assert_eq!(
        rejected(&discovery_with("010000", 1)),
        DecodeError::BadRecordLen { len: 0 }
    );
    let mut big = discovery_with("018001", 1); // 32 769 bytes
    big.extend(std::iter::repeat_n(0u8, 32_769));
    let len = (big.len() - 4) as u32;
    big[..4].copy_from_slice(&len.to_be_bytes());
    assert_eq!(rejected(&big), DecodeError::BadRecordLen { len: 32_769 });
    // One byte less is the largest record allowed.
    let mut ok = discovery_with("018000", 1);
    ok.extend(std::iter::repeat_n(0u8, MAX_RECORD_ENTRY_LEN));
    let len = (ok.len() - 4) as u32;
    ok[..4].copy_from_slice(&len.to_be_bytes());
    assert!(matches!(
        decode(&ok),
        Ok(DecodeStatus::Complete {
            frame: Frame::Discovery(_),
            ..
        })
    ));
}

#[test]
fn discovery_withdraw_not_16_bytes() {
    let g15 = "22".repeat(15);
    assert_eq!(
        rejected(&discovery_with(&format!("02000f{g15}"), 1)),
        DecodeError::BadWithdrawLen { len: 15 }
    );
    assert_eq!(
        rejected(&discovery_with(&format!("020011{g15}222222"), 1)),
        DecodeError::BadWithdrawLen { len: 17 }
    );
}

#[test]
fn discovery_trailing_bytes_after_the_entries() {
    assert_eq!(
        rejected(&discovery_with("010001ffee", 1)),
        DecodeError::TrailingBytes {
            frame: "Discovery",
            extra: 1
        }
    );
    // Also with no entry at all.
    assert_eq!(
        rejected(&discovery_with("00", 0)),
        DecodeError::TrailingBytes {
            frame: "Discovery",
            extra: 1
        }
    );
    // Unknown kinds are skipped, even an empty one, and then the body must end.
    let mut buf = BytesMut::from(&discovery_with("c80000", 1)[..]);
    let Ok(Some(Frame::Discovery(d))) = take_frame(&mut buf, MAX_MESSAGE_BYTES) else {
        panic!("an unknown entry is not an error")
    };
    assert!(d.entries.is_empty());
}

#[test]
fn samples_count_zero() {
    assert_eq!(
        rejected(&samples_with(0, 1, 0, "")),
        DecodeError::EmptySamples
    );
}

#[test]
fn samples_first_seq_zero_or_run_past_u64_max() {
    assert_eq!(
        rejected(&samples_with(0, 0, 1, "00000000")),
        DecodeError::BadSampleSeq {
            first_seq: 0,
            count: 1
        }
    );
    assert_eq!(
        rejected(&samples_with(0, u64::MAX, 2, "0000000000000000")),
        DecodeError::BadSampleSeq {
            first_seq: u64::MAX,
            count: 2
        }
    );
    // The last number itself is fine.
    let mut buf = BytesMut::from(&samples_with(0, u64::MAX - 1, 2, "0000000000000000")[..]);
    let s = take_samples(&mut buf, MAX_MESSAGE_BYTES).expect("valid");
    assert_eq!(s.seqs().collect::<Vec<_>>(), vec![u64::MAX - 1, u64::MAX]);
}

#[test]
fn samples_lengths_that_do_not_fill_the_body() {
    // A payload longer than what is left.
    assert_eq!(
        rejected(&samples_with(0, 1, 1, "0000000361")),
        DecodeError::Truncated {
            field: "Samples.payload",
            needed: 3,
            available: 1
        }
    );
    // Fewer samples than the count (the second length is missing, or cut).
    assert!(matches!(
        rejected(&samples_with(0, 1, 2, "0000000161")),
        DecodeError::Truncated {
            field: "Samples.len",
            ..
        }
    ));
    assert!(matches!(
        rejected(&samples_with(0, 1, 2, "00000001610000")),
        DecodeError::Truncated {
            field: "Samples.len",
            ..
        }
    ));
    // More bytes than the samples.
    assert_eq!(
        rejected(&samples_with(0, 1, 1, "000000016162")),
        DecodeError::TrailingBytes {
            frame: "Samples",
            extra: 1
        }
    );
    // A header cut inside its fixed fields.
    assert!(matches!(
        rejected(&frame_of(10, &[0; 27])),
        DecodeError::Truncated {
            field: "Samples.count",
            ..
        }
    ));
}

#[test]
fn samples_unknown_flag_bits() {
    for flags in [0x01, 0x80, 0xff] {
        assert_eq!(
            rejected(&samples_with(flags, 1, 1, "00000000")),
            DecodeError::UnknownSamplesFlags(flags)
        );
    }
}

#[test]
fn frame_type_17_is_still_unknown() {
    assert_eq!(FrameType::from_u8(9), Some(FrameType::Discovery));
    assert_eq!(FrameType::from_u8(10), Some(FrameType::Samples));
    assert_eq!(FrameType::from_u8(14), Some(FrameType::Gap));
    assert_eq!(FrameType::from_u8(15), Some(FrameType::SignedMembership));
    assert_eq!(FrameType::from_u8(16), Some(FrameType::MembershipDigest));
    assert_eq!(FrameType::from_u8(17), None);
    assert_eq!(
        rejected(&frame_of(17, &unhex(&SAMPLES_HEX[10..]))),
        DecodeError::UnknownFrameType(17)
    );
    assert_eq!(FrameType::MAX_V1, 8);
}

#[test]
fn samples_over_the_size_limit_are_too_large_not_taken() {
    let bytes = unhex(SAMPLES_HEX);
    let mut buf = BytesMut::from(&bytes[..]);
    assert_eq!(take_samples(&mut buf, 45), None);
    assert_eq!(
        take_frame(&mut buf, 45),
        Err(DecodeError::TooLarge { len: 46, max: 45 })
    );
    assert_eq!(buf.len(), 50);
    // Exactly at the limit it is taken; not all there yet, it waits.
    assert!(take_samples(&mut buf, 46).is_some());
    let mut part = BytesMut::from(&bytes[..49]);
    assert_eq!(take_samples(&mut part, MAX_MESSAGE_BYTES), None);
    assert_eq!(take_frame(&mut part, MAX_MESSAGE_BYTES), Ok(None));
}

#[test]
fn topic_frames_that_would_not_decode_fail_to_encode() {
    let mut out = BytesMut::new();
    let with = |e: DiscoveryEntry| Discovery {
        entries: vec![e],
        ..vector_discovery()
    };
    assert_eq!(
        with(DiscoveryEntry::Record(Bytes::new())).encode(&mut out),
        Err(EncodeError::RecordLen { len: 0 })
    );
    let big = Bytes::from(vec![0; MAX_RECORD_ENTRY_LEN + 1]);
    assert_eq!(
        Frame::Discovery(with(DiscoveryEntry::Record(big))).encode(&mut out),
        Err(EncodeError::RecordLen { len: 32_769 })
    );
    let many = Discovery {
        entries: vec![DiscoveryEntry::Withdraw([0; 16]); 65_536],
        ..vector_discovery()
    };
    assert_eq!(
        many.encode(&mut out),
        Err(EncodeError::TooManyEntries { count: 65_536 })
    );
    assert!(Samples::new(1, [0; 16], 1, Vec::<&[u8]>::new()).is_err());
    assert!(Samples::new(1, [0; 16], 0, [b"x"]).is_err());
    assert!(Samples::new(1, [0; 16], u64::MAX, [b"x", b"y"]).is_err());
    let s = Samples::new(1, [0; 16], 1, [b"x"]).unwrap();
    let lying = Samples { count: 2, ..s };
    assert!(matches!(
        Frame::Samples(lying).encode(&mut out),
        Err(EncodeError::BadSamples(_))
    ));
    assert!(out.is_empty(), "a failed encode wrote something");
}

#[test]
fn the_run_writer_refuses_what_cannot_be_sent() {
    let mut buf = BytesMut::new();
    let mut w = SampleRunWriter::new(&mut buf, [1; 16], 8, 1, 100);
    // 29 fixed + 4 + 67 = 100 fits exactly; one byte more never will.
    assert_eq!(
        w.push(&[0; 68]),
        Err(EncodeError::SampleTooLarge { len: 68, max: 100 })
    );
    assert_eq!(w.push(&[0; 67]), Ok(1));
    assert_eq!(
        w.push(&[0; 68]),
        Err(EncodeError::SampleTooLarge { len: 68, max: 100 })
    );
    assert_eq!(w.push(b"z"), Ok(2), "a refused sample uses no number");
    assert_eq!(w.finish(), 3);
    assert_eq!(buf.len(), 2 * 33 + 4 + 67 + 4 + 1);
    // No number left: a writer at 0, and one that used u64::MAX.
    let mut buf = BytesMut::new();
    let mut w = SampleRunWriter::new(&mut buf, [1; 16], 8, 0, 100);
    assert!(matches!(w.push(b"a"), Err(EncodeError::BadSamples(_))));
    drop(w);
    assert!(buf.is_empty());
    let mut w = SampleRunWriter::new(&mut buf, [1; 16], 8, u64::MAX, 100);
    assert_eq!(w.push(b"a"), Ok(u64::MAX));
    assert!(matches!(w.push(b"b"), Err(EncodeError::BadSamples(_))));
    assert_eq!(w.finish(), 0);
    let s = take_samples(&mut buf, 100).expect("the one sample");
    assert_eq!((s.first_seq, s.count), (u64::MAX, 1));
    assert!(buf.is_empty());
}
