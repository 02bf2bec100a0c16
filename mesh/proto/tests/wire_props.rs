//! Property tests of the wire codec: round trips for every frame type and the datagram, and
//! robustness of the framing decoder against arbitrary bytes fed as growing prefixes; the
//! fast lanes (`take_data`, `take_samples`) agree with `take_frame`; `SampleRunWriter` packs
//! runs that decode to exactly what was pushed.
//!
//! Length: about 780 lines: the frame strategies and the framing contract checks are shared
//! by every property, the topic frames' included, so they stay in one file.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use shoal_proto::wire::{
    decode_frame, encode_data_into, last_seq_of_own_samples, peek_frame_len, take_data, take_frame,
    take_samples, AckNack, AuthConfirm, Beacon, Data, DecodeError, DecodeStatus, Discovery,
    DiscoveryEntry, Features, Frame, Gap, Heartbeat, Hello, HelloIdentity, IdentityRecord,
    Membership, RecordSignature, Repair, SampleRunWriter, Samples, SeqSet, ShoalExtension,
    SignedMembership, DISCOVERY_HEADER_LEN, MAX_MESSAGE_BYTES, MAX_RECORD_ENTRY_LEN,
    SAMPLES_HEADER_LEN,
};
use shoal_proto::{MsgId, PeerId};

fn peer() -> impl Strategy<Value = PeerId> {
    any::<[u8; 16]>().prop_map(PeerId)
}

fn sig() -> impl Strategy<Value = [u8; 64]> {
    (any::<[u8; 32]>(), any::<[u8; 32]>()).prop_map(|(a, b)| {
        let mut s = [0u8; 64];
        s[..32].copy_from_slice(&a);
        s[32..].copy_from_slice(&b);
        s
    })
}

/// Up to 60 chars of any Unicode, so at most 240 bytes: always a valid wire `str`.
fn wire_str() -> impl Strategy<Value = String> {
    ".{0,60}"
}

fn hello() -> impl Strategy<Value = Hello> {
    (
        peer(),
        any::<u8>(),
        any::<u16>(),
        wire_str(),
        any::<u64>(),
        proptest::option::of(any::<[u8; 32]>()),
        proptest::option::of((any::<[u8; 32]>(), wire_str())),
        proptest::option::of((any::<u8>(), any::<u64>())),
    )
        .prop_map(|(node_id, v, port, group, nonce, eph, ident, ext)| Hello {
            node_id,
            protocol_version: v,
            tcp_listen_port: port,
            group_name: group,
            nonce,
            eph_pub_key: eph,
            identity: ident.map(|(id_pub_key, node_name)| HelloIdentity {
                id_pub_key,
                node_name,
            }),
            shoal: ext.map(|(version, f)| ShoalExtension::new(version, Features(f))),
        })
}

fn entry() -> impl Strategy<Value = DiscoveryEntry> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 1..200)
            .prop_map(|r| DiscoveryEntry::Record(Bytes::from(r))),
        any::<[u8; 16]>().prop_map(DiscoveryEntry::Withdraw),
    ]
}

fn discovery() -> impl Strategy<Value = Discovery> {
    (
        peer(),
        any::<u64>(),
        any::<u8>(),
        any::<u32>(),
        any::<u16>(),
        any::<u16>(),
        proptest::collection::vec(entry(), 0..12),
        proptest::option::of((
            any::<[u8; 32]>(),
            proptest::collection::vec(any::<u8>(), 64),
        )),
    )
        .prop_map(
            |(origin, seq, ttl, cycle, part, parts, mut entries, signature)| {
                // A Signature entry only ever comes last.
                if let Some((key, sig)) = signature {
                    entries.push(DiscoveryEntry::Signature(RecordSignature {
                        key,
                        sig: sig.try_into().unwrap(),
                    }));
                }
                Discovery {
                    origin,
                    seq,
                    ttl,
                    cycle,
                    part,
                    parts,
                    entries,
                }
            },
        )
}

fn payloads() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 1..24)
}

/// A valid run: `first_seq` anywhere in `1..` that leaves room for every sample.
fn samples() -> impl Strategy<Value = Samples> {
    (
        any::<u8>(),
        any::<[u8; 16]>(),
        payloads(),
        prop_oneof![1u64..1000, Just(u64::MAX), any::<u64>()],
    )
        .prop_map(|(ttl, writer, ps, seq)| {
            let first = seq.clamp(1, u64::MAX - (ps.len() as u64 - 1));
            Samples::new(ttl, writer, first, &ps).unwrap()
        })
}

/// The four reliability frames, valid: ranges, bitmaps and runs within their rules.
fn reliable() -> impl Strategy<Value = Frame> {
    let seq = || {
        prop_oneof![
            1u64..1000,
            Just(u64::MAX),
            any::<u64>().prop_map(|s| s.max(1))
        ]
    };
    prop_oneof![
        (any::<u8>(), any::<[u8; 16]>(), seq(), 0u64..3).prop_map(|(ttl, writer, last, d)| {
            let first = last.saturating_add(1).saturating_sub(d).max(1);
            Frame::WriterHeartbeat(Heartbeat {
                ttl,
                writer,
                first,
                last,
            })
        }),
        (
            any::<u8>(),
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            any::<u32>(),
            prop_oneof![Just(0u64), 1u64..1000, any::<u64>()],
            proptest::collection::vec(0u16..256, 0..20),
        )
            .prop_map(|(ttl, writer, reader, count, base, bits)| {
                let mut a = AckNack {
                    ttl,
                    writer,
                    reader,
                    count,
                    base: base.min(u64::MAX - 255),
                    missing: SeqSet::new(),
                };
                for b in bits {
                    a.request(a.base + u64::from(b));
                }
                Frame::AckNack(a)
            }),
        (
            any::<u8>(),
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            payloads(),
            seq()
        )
            .prop_map(|(ttl, writer, reader, ps, s)| {
                let first = s.clamp(1, u64::MAX - (ps.len() as u64 - 1));
                Frame::Repair(Repair::new(ttl, writer, reader, first, &ps).unwrap())
            }),
        (
            any::<u8>(),
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            seq(),
            seq()
        )
            .prop_map(|(ttl, writer, reader, a, b)| Frame::Gap(Gap {
                ttl,
                writer,
                reader,
                first: a.min(b),
                last: a.max(b),
            })),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        reliable(),
        discovery().prop_map(Frame::Discovery),
        samples().prop_map(Frame::Samples),
        hello().prop_map(Frame::Hello),
        hello().prop_map(Frame::HelloAck),
        Just(Frame::Heartbeat),
        Just(Frame::Goodbye),
        (
            peer(),
            peer(),
            any::<[u8; 16]>(),
            any::<u8>(),
            proptest::collection::vec(any::<u8>(), 0..600)
        )
            .prop_map(|(src, dst, id, ttl, p)| Frame::Data(Data {
                src,
                dst,
                msg_id: MsgId(id),
                ttl,
                payload: Bytes::from(p),
            })),
        (
            peer(),
            any::<u64>(),
            proptest::collection::vec(peer(), 0..40)
        )
            .prop_map(
                |(origin, version, neighbours)| Frame::Membership(Membership {
                    origin,
                    version,
                    neighbours,
                })
            ),
        (
            peer(),
            any::<u64>(),
            proptest::collection::btree_set(peer(), 0..40),
            any::<[u8; 32]>(),
            sig()
        )
            .prop_map(|(origin, version, neighbours, key, sig)| {
                Frame::SignedMembership(SignedMembership {
                    record: Membership {
                        origin,
                        version,
                        // Strictly ascending, as the signer writes them.
                        neighbours: neighbours.into_iter().collect(),
                    },
                    signature: RecordSignature { key, sig },
                })
            }),
        (any::<[u8; 32]>(), proptest::option::of(sig()))
            .prop_map(|(tag, sig)| Frame::AuthConfirm(AuthConfirm { tag, sig })),
        (any::<[u8; 32]>(), any::<u64>(), sig(), wire_str()).prop_map(
            |(id_pub_key, version, sig, name)| Frame::IdentityRecord(IdentityRecord {
                id_pub_key,
                version,
                sig,
                name,
            })
        ),
    ]
}

/// Bytes that look like a frame header often enough to reach the body decoders: a small length,
/// a type around 0..=15, then random body bytes (which may be shorter or longer than announced).
fn framish_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        mutated_topic_frame(),
        proptest::collection::vec(any::<u8>(), 0..200),
        (
            0u32..300,
            0u8..16,
            proptest::collection::vec(any::<u8>(), 0..320)
        )
            .prop_map(|(len, ty, body)| {
                let mut v = len.to_be_bytes().to_vec();
                v.push(ty);
                v.extend(body);
                v
            }),
    ]
}

/// A valid topic frame with a few bytes overwritten (often a count, a length or a flag), so
/// the body checks and the fast lane meet near-valid input, not only noise.
fn mutated_topic_frame() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![
            discovery().prop_map(Frame::Discovery),
            samples().prop_map(Frame::Samples),
            reliable(),
        ],
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..3),
        any::<bool>(),
    )
        .prop_map(|(f, edits, keep_length)| {
            let mut v = Vec::new();
            f.encode(&mut v).unwrap();
            for (i, b) in edits {
                let at = i.index(v.len());
                // Mostly leave the length prefix alone so the body decoders run.
                if at >= 4 || !keep_length {
                    v[at] = b;
                }
            }
            v
        })
}

/// Feeds every prefix of `bytes` to the decoder and checks the framing contract: no panic;
/// NeedMore asks for more than is buffered; a decoded length never exceeds the buffer; and once
/// the answer is not NeedMore, longer prefixes give the same answer (decoding looks only at the
/// first `4 + length` bytes).
fn check_prefixes(bytes: &[u8], max: u32) {
    let full = Bytes::copy_from_slice(bytes);
    let mut settled: Option<Result<DecodeStatus<Frame>, DecodeError>> = None;
    for n in 0..=bytes.len() {
        let r = decode_frame(&full.slice(..n), max);
        match (&r, &settled) {
            (_, Some(s)) => assert_eq!(&r, s, "prefix {n} changed a settled answer"),
            (Ok(DecodeStatus::NeedMore { needed }), None) => {
                assert!(*needed > n, "NeedMore({needed}) with {n} bytes buffered")
            }
            (Ok(DecodeStatus::Complete { len, .. }), None) => {
                assert!(*len <= n, "decoded length {len} beyond buffer {n}");
                settled = Some(r.clone());
            }
            (Err(_), None) => settled = Some(r.clone()),
        }
        // The peek agrees with the full decoder about framing.
        match (peek_frame_len(&bytes[..n], max), &r) {
            (
                Ok(DecodeStatus::NeedMore { needed: a }),
                Ok(DecodeStatus::NeedMore { needed: b }),
            ) => {
                assert_eq!(a, *b)
            }
            (
                Ok(DecodeStatus::Complete { len: a, .. }),
                Ok(DecodeStatus::Complete { len: b, .. }),
            ) => {
                assert_eq!(a, *b)
            }
            (Ok(DecodeStatus::Complete { .. }), Err(_)) => {} // body malformed
            (Err(a), Err(b)) => assert_eq!(&a, b),
            (p, r) => panic!("peek {p:?} disagrees with decode {r:?} at prefix {n}"),
        }
        check_fast_lane(&bytes[..n], max);
    }
}

/// `take_data` (the reader's fast lane) agrees with `take_frame`: a Data frame it takes is
/// the one `take_frame` would take, leaving the same rest; anything it declines leaves the
/// buffer untouched and is not a complete Data frame `take_frame` would accept (errors are
/// `take_frame`'s to give).
fn check_fast_lane(bytes: &[u8], max: u32) {
    let mut fast = BytesMut::from(bytes);
    let mut slow = BytesMut::from(bytes);
    let taken = take_frame(&mut slow, max);
    match take_data(&mut fast, max) {
        Some(d) => {
            assert_eq!(taken, Ok(Some(Frame::Data(d))));
            assert_eq!(fast, slow, "the same rest");
        }
        None => {
            assert_eq!(&fast[..], bytes, "declined: untouched");
            assert!(
                !matches!(taken, Ok(Some(Frame::Data(_)))),
                "a complete Data frame was declined"
            );
        }
    }
    // The same contract for the Samples lane, with the body sharing the buffer.
    let mut fast = BytesMut::from(bytes);
    match take_samples(&mut fast, max) {
        Some(s) => {
            assert_eq!(
                &s.body[..],
                &bytes[SAMPLES_HEADER_LEN..bytes.len() - fast.len()]
            );
            assert_eq!(taken, Ok(Some(Frame::Samples(s))));
            assert_eq!(fast, slow, "the same rest");
        }
        None => {
            assert_eq!(&fast[..], bytes, "declined: untouched");
            assert!(
                !matches!(taken, Ok(Some(Frame::Samples(_)))),
                "a complete Samples frame was declined"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn frame_round_trips(f in frame(), trailing in proptest::collection::vec(any::<u8>(), 0..8)) {
        let mut buf = BytesMut::with_capacity(f.encoded_len());
        f.encode(&mut buf).unwrap();
        prop_assert_eq!(buf.len(), f.encoded_len());
        let frame_len = buf.len();
        // Whatever follows the frame in the buffer (the next frame) does not change the result.
        buf.extend_from_slice(&trailing);
        let bytes = buf.clone().freeze();
        match decode_frame(&bytes, MAX_MESSAGE_BYTES).unwrap() {
            DecodeStatus::Complete { frame, len } => {
                prop_assert_eq!(len, frame_len);
                // Zero copy: payloads, sample bodies and records point into the read buffer.
                let inside = |b: &Bytes| {
                    let r = bytes.as_ptr_range();
                    b.is_empty() || (r.contains(&b.as_ptr()) && b.as_ptr_range().end <= r.end)
                };
                match &frame {
                    Frame::Data(d) if !d.payload.is_empty() => {
                        prop_assert_eq!(d.payload.as_ptr(), bytes[58..].as_ptr());
                    }
                    Frame::Samples(s) => {
                        prop_assert_eq!(s.body.as_ptr(), bytes[SAMPLES_HEADER_LEN..].as_ptr());
                        prop_assert!(s.payloads().all(|p| inside(&p)));
                    }
                    Frame::Discovery(d) => {
                        for e in &d.entries {
                            if let DiscoveryEntry::Record(r) = e {
                                prop_assert!(inside(r), "a record copied out of the buffer");
                            }
                        }
                    }
                    _ => {}
                }
                prop_assert_eq!(&frame, &f);
            }
            other => prop_assert!(false, "expected a frame, got {:?}", other),
        }
        let taken = take_frame(&mut buf, MAX_MESSAGE_BYTES).unwrap();
        prop_assert_eq!(taken.as_ref(), Some(&f));
        prop_assert_eq!(&buf[..], &trailing[..]);
    }

    #[test]
    fn frame_prefixes_need_more_until_complete(f in frame()) {
        let mut buf = Vec::new();
        f.encode(&mut buf).unwrap();
        let full = Bytes::from(buf);
        for n in 0..full.len() {
            match decode_frame(&full.slice(..n), MAX_MESSAGE_BYTES).unwrap() {
                DecodeStatus::NeedMore { needed } => {
                    prop_assert!(needed > n && needed <= full.len().max(5));
                }
                other => prop_assert!(false, "prefix {} of {}: {:?}", n, full.len(), other),
            }
        }
        check_prefixes(&full, MAX_MESSAGE_BYTES);
    }

    #[test]
    fn stream_of_frames_splits_back(frames in proptest::collection::vec(frame(), 0..8)) {
        let mut buf = BytesMut::new();
        for f in &frames {
            f.encode(&mut buf).unwrap();
        }
        let mut got = Vec::new();
        while let Some(f) = take_frame(&mut buf, MAX_MESSAGE_BYTES).unwrap() {
            got.push(f);
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got, frames);
    }

    #[test]
    fn arbitrary_bytes_never_break_framing(bytes in framish_bytes(), max in prop_oneof![Just(MAX_MESSAGE_BYTES), 1u32..400]) {
        check_prefixes(&bytes, max);
    }

    #[test]
    fn hello_tolerates_any_trailing_bytes(h in hello(), trailing in proptest::collection::vec(any::<u8>(), 0..40)) {
        let plain = Hello { shoal: None, ..h };
        let mut buf = Vec::new();
        Frame::Hello(plain.clone()).encode(&mut buf).unwrap();
        buf.extend_from_slice(&trailing);
        let len = (buf.len() - 4) as u32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        match decode_frame(&Bytes::from(buf), MAX_MESSAGE_BYTES).unwrap() {
            DecodeStatus::Complete { frame: Frame::Hello(got), .. } => {
                prop_assert_eq!(Hello { shoal: None, ..got.clone() }, plain);
                if !trailing.starts_with(b"SHOL") {
                    prop_assert_eq!(got.shoal, None);
                }
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn future_extension_tail_is_skipped(h in hello(), version in 2u8.., features in any::<u64>(), tail in proptest::collection::vec(any::<u8>(), 0..64), after in proptest::collection::vec(any::<u8>(), 0..8)) {
        let plain = Hello { shoal: None, ..h };
        let mut buf = Vec::new();
        Frame::HelloAck(plain.clone()).encode(&mut buf).unwrap();
        buf.extend_from_slice(b"SHOL");
        buf.push(version);
        buf.extend_from_slice(&features.to_be_bytes());
        buf.extend_from_slice(&(tail.len() as u16).to_be_bytes());
        buf.extend_from_slice(&tail);
        buf.extend_from_slice(&after);
        let len = (buf.len() - 4) as u32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        match decode_frame(&Bytes::from(buf), MAX_MESSAGE_BYTES).unwrap() {
            DecodeStatus::Complete { frame: Frame::HelloAck(got), .. } => {
                // The tail is kept as received, so the block re-encodes to the same bytes.
                prop_assert_eq!(got.shoal, Some(ShoalExtension::new(version, Features(features)).with_tail(tail)));
                prop_assert_eq!(Hello { shoal: None, ..got }, plain);
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn announce_round_trips(
        node in peer(),
        port in any::<u16>(),
        group in wire_str(),
        flags in any::<u8>(),
        mac in any::<[u8; 16]>(),
        trailing in proptest::collection::vec(any::<u8>(), 0..8),
    ) {
        let a = Beacon { flags, ..Beacon::new(node, port, &group, false) };
        let mut buf = Vec::new();
        let body = if a.is_secured() {
            a.encode_with_mac(&mut buf, &mac).unwrap() - 16
        } else {
            a.encode_body(&mut buf).unwrap()
        };
        prop_assert_eq!(body, a.body_len());
        buf.extend_from_slice(&trailing);
        let d = Beacon::decode(&buf).unwrap();
        prop_assert_eq!(&d.announce, &a);
        prop_assert_eq!(d.mac_input, 0..body);
        prop_assert_eq!(d.mac, a.is_secured().then_some(mac));
        // Every strict prefix that cuts a field is rejected, never misread.
        let needed = body + if a.is_secured() { 16 } else { 0 };
        for n in 0..needed {
            prop_assert!(Beacon::decode(&buf[..n]).is_err(), "prefix {} accepted", n);
        }
    }

    #[test]
    fn announce_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        let mut b = bytes.clone();
        if b.len() >= 4 {
            b[..4].copy_from_slice(b"MMCA");
        }
        for input in [&bytes, &b] {
            if let Ok(d) = Beacon::decode(input) {
                prop_assert!(d.mac_input.end <= input.len());
                prop_assert!(d.mac.is_none() || d.mac_input.end + 16 <= input.len());
            }
        }
    }
}

proptest! {
    /// A batching publisher's run of frames, encoded back to back into one buffer: the reader
    /// takes them one by one, each with its fields and payload intact, and nothing is left.
    #[test]
    fn a_run_of_encoded_frames_decodes_frame_by_frame(
        src in peer(),
        dst in peer(),
        payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..20),
        first in any::<u64>(),
        ttl in any::<u8>(),
    ) {
        let mut run = BytesMut::new();
        for (i, p) in payloads.iter().enumerate() {
            let id = MsgId::new(&src, first.wrapping_add(i as u64));
            encode_data_into(&mut run, &src, &dst, &id, ttl, p).unwrap();
        }
        for (i, p) in payloads.iter().enumerate() {
            let d = take_data(&mut run, MAX_MESSAGE_BYTES).expect("a whole Data frame");
            prop_assert_eq!(d.src, src);
            prop_assert_eq!(d.dst, dst);
            prop_assert_eq!(d.ttl, ttl);
            prop_assert_eq!(d.msg_id, MsgId::new(&src, first.wrapping_add(i as u64)));
            prop_assert_eq!(&d.payload[..], &p[..]);
        }
        prop_assert!(run.is_empty());
    }
}

/// Reads a run back: every frame of `buf` through the fast lane, checked against
/// `take_frame`, flattened to (seq, payload).
fn read_runs(mut buf: BytesMut, max: u32) -> (Vec<(u64, Vec<u8>)>, Vec<Samples>) {
    let mut got = Vec::new();
    let mut frames = Vec::new();
    while !buf.is_empty() {
        let mut slow = buf.clone();
        let s = take_samples(&mut buf, max).expect("a whole Samples frame");
        assert_eq!(
            take_frame(&mut slow, max),
            Ok(Some(Frame::Samples(s.clone())))
        );
        assert!(
            s.encoded_len() - 4 <= max as usize,
            "a frame over the bound"
        );
        assert_eq!(s.payloads().count(), usize::from(s.count));
        got.extend(s.seqs().zip(s.payloads().map(|p| p.to_vec())));
        frames.push(s);
    }
    (got, frames)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the bound, the writer's frames decode to exactly the pushed payloads with
    /// consecutive sequence numbers, every frame within the bound and all but the last full
    /// (the next sample would not have fitted).
    #[test]
    fn sample_runs_decode_to_what_was_pushed(
        writer in any::<[u8; 16]>(),
        ttl in any::<u8>(),
        first in 1u64..u64::MAX / 2,
        ps in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 1..60),
        max in prop_oneof![Just(MAX_MESSAGE_BYTES), 157u32..2000],
        prefix in proptest::collection::vec(any::<u8>(), 0..8),
    ) {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&prefix);
        let mut w = SampleRunWriter::new(&mut buf, writer, ttl, first, max);
        for (i, p) in ps.iter().enumerate() {
            prop_assert_eq!(w.push(p).unwrap(), first + i as u64);
        }
        prop_assert_eq!(w.samples(), ps.len() as u64);
        let frames = w.frames();
        prop_assert_eq!(w.finish(), first + ps.len() as u64);
        prop_assert_eq!(&buf[..prefix.len()], &prefix[..], "what was there stays");
        let run = buf.split_off(prefix.len());
        let (got, runs) = read_runs(run, max);
        prop_assert_eq!(runs.len(), frames);
        let want: Vec<(u64, Vec<u8>)> = ps.iter().enumerate().map(|(i, p)| (first + i as u64, p.clone())).collect();
        prop_assert_eq!(got, want);
        for (k, s) in runs.iter().enumerate() {
            prop_assert_eq!(s.writer, writer);
            prop_assert_eq!(s.ttl, ttl);
            if k + 1 < runs.len() {
                let next_len = ps[(s.last_seq() - first + 1) as usize].len();
                prop_assert!(s.encoded_len() - 4 + 4 + next_len > max as usize, "closed a run early");
            }
        }
    }

    /// A Discovery frame with entries of kinds this build does not know decodes to the known
    /// entries, in order: a later version's entries are skipped, not errors.
    #[test]
    fn unknown_entry_kinds_are_skipped(
        d in discovery(),
        unknown in proptest::collection::vec((4u8..=255, proptest::collection::vec(any::<u8>(), 0..40), any::<prop::sample::Index>()), 1..5),
    ) {
        let mut entries: Vec<(u8, Vec<u8>)> = d.entries.iter().map(|e| match e {
            DiscoveryEntry::Record(r) => (1, r.to_vec()),
            DiscoveryEntry::Withdraw(g) => (2, g.to_vec()),
            DiscoveryEntry::Signature(s) => (3, [&s.key[..], &s.sig[..]].concat()),
        }).collect();
        // Unknown entries go anywhere before a Signature entry (which stays last).
        let signed = usize::from(d.signature().is_some());
        for (kind, value, at) in unknown {
            let i = at.index(entries.len() + 1 - signed);
            entries.insert(i, (kind, value));
        }
        let mut body = Vec::new();
        body.extend_from_slice(&d.origin.0);
        body.extend_from_slice(&d.seq.to_be_bytes());
        body.push(d.ttl);
        body.extend_from_slice(&d.cycle.to_be_bytes());
        body.extend_from_slice(&d.part.to_be_bytes());
        body.extend_from_slice(&d.parts.to_be_bytes());
        body.extend_from_slice(&(entries.len() as u16).to_be_bytes());
        for (kind, value) in &entries {
            body.push(*kind);
            body.extend_from_slice(&(value.len() as u16).to_be_bytes());
            body.extend_from_slice(value);
        }
        let mut frame = ((body.len() + 1) as u32).to_be_bytes().to_vec();
        frame.push(9);
        frame.extend_from_slice(&body);
        let mut buf = BytesMut::from(&frame[..]);
        prop_assert_eq!(take_frame(&mut buf, MAX_MESSAGE_BYTES), Ok(Some(Frame::Discovery(d))));
        prop_assert!(buf.is_empty());
    }

    /// The size helpers say what the encoder writes (the control core packs frames by them).
    #[test]
    fn discovery_sizes_add_up(d in discovery()) {
        let mut out = Vec::new();
        d.encode(&mut out).unwrap();
        prop_assert_eq!(out.len(), d.encoded_len());
        prop_assert_eq!(
            d.encoded_len(),
            DISCOVERY_HEADER_LEN + d.entries.iter().map(DiscoveryEntry::encoded_len).sum::<usize>()
        );
        let mut via_frame = Vec::new();
        Frame::Discovery(d).encode(&mut via_frame).unwrap();
        prop_assert_eq!(out, via_frame);
    }

    /// A relay's re-send, header with a new ttl plus the received body, is the frame the
    /// origin would have encoded with that ttl.
    #[test]
    fn a_relayed_run_is_header_plus_body(s in samples(), ttl in any::<u8>()) {
        let mut h = s.header().unwrap();
        h.set_ttl(ttl);
        prop_assert_eq!(h.body_len(), s.body.len());
        let mut relayed = h.as_bytes().to_vec();
        relayed.extend_from_slice(&s.body);
        let mut direct = Vec::new();
        Frame::Samples(Samples { ttl, ..s }).encode(&mut direct).unwrap();
        prop_assert_eq!(relayed, direct);
    }
}

proptest! {
    /// A run's own walks agree with its payloads: `iter` borrows them with their numbers,
    /// `pop_front` takes them off one by one, `skip(k)` is the run after `k` of them and `split_at(k)` its two
    /// halves, each a valid run that encodes as one would built from its payloads.
    #[test]
    fn a_run_skips_splits_and_pops_as_its_payloads_say(s in samples(), k in any::<u16>()) {
        let all: Vec<(u64, Bytes)> = s.seqs().zip(s.payloads()).collect();
        let borrowed: Vec<(u64, &[u8])> = s.iter().collect();
        let owned: Vec<(u64, &[u8])> = all.iter().map(|(q, p)| (*q, &p[..])).collect();
        prop_assert_eq!(borrowed, owned);
        let mut popped = Vec::new();
        let mut rest = s.clone();
        while let Some(p) = rest.pop_front() {
            popped.push(p);
        }
        prop_assert_eq!(&popped, &all);
        prop_assert_eq!(rest.count, 0);
        let k = k % s.count;
        let tail = |from: usize| Samples::new(s.ttl, s.writer, all[from].0, all[from..].iter().map(|p| &p.1)).unwrap();
        prop_assert_eq!(s.skip(k), tail(usize::from(k)));
        if k > 0 {
            let (head, rest) = s.clone().split_at(k);
            let want = Samples::new(s.ttl, s.writer, s.first_seq, all[..usize::from(k)].iter().map(|p| &p.1)).unwrap();
            prop_assert_eq!(head, want);
            prop_assert_eq!(rest, tail(usize::from(k)));
        }
    }

    /// The last sequence number of a writer's batch, read off the frame headers, is that of
    /// the batch's last sample.
    #[test]
    fn the_last_seq_of_a_batch_is_its_last_samples(
        first in 1u64..u64::MAX / 2,
        sizes in proptest::collection::vec(0usize..300, 1..200),
        max in 400u32..2000,
    ) {
        let mut buf = BytesMut::new();
        let mut w = SampleRunWriter::new(&mut buf, [4; 16], 2, first, max);
        for n in &sizes {
            w.push(&vec![7u8; *n]).unwrap();
        }
        let next = w.finish();
        prop_assert_eq!(last_seq_of_own_samples(&buf), Some(next - 1));
        prop_assert_eq!(last_seq_of_own_samples(&buf[..buf.len() - 1]), None);
    }
}

/// A run holds at most `u16::MAX` samples: the next one opens a second frame, numbered on.
#[test]
fn sample_runs_split_at_u16_max() {
    let mut buf = BytesMut::new();
    let mut w = SampleRunWriter::new(&mut buf, [5; 16], 8, 1, MAX_MESSAGE_BYTES);
    let n = u64::from(u16::MAX) + 2;
    for i in 0..n {
        let p = (i as u32).to_be_bytes();
        w.push(&p[..(i % 5) as usize]).unwrap();
    }
    assert_eq!(w.frames(), 2);
    assert_eq!(w.finish(), n + 1);
    let (got, runs) = read_runs(buf, MAX_MESSAGE_BYTES);
    assert_eq!(
        runs.iter()
            .map(|s| (s.first_seq, s.count))
            .collect::<Vec<_>>(),
        vec![(1, u16::MAX), (u64::from(u16::MAX) + 1, 2)]
    );
    assert_eq!(got.len() as u64, n);
    for (i, (seq, p)) in got.iter().enumerate() {
        let want = (i as u32).to_be_bytes();
        assert_eq!((*seq, &p[..]), (i as u64 + 1, &want[..i % 5]));
    }
}

/// The size bound: a frame is closed when the next sample would take it past
/// `max_message_bytes`, and a frame exactly at the bound is allowed.
#[test]
fn sample_runs_split_at_the_size_bound() {
    // Length field: 29 fixed + 4 per sample + payloads. Two 30-byte samples: 29 + 68 = 97.
    let max = 97;
    let mut buf = BytesMut::new();
    let mut w = SampleRunWriter::new(&mut buf, [6; 16], 3, 10, max);
    for _ in 0..5 {
        w.push(&[0xab; 30]).unwrap();
    }
    w.finish();
    let (got, runs) = read_runs(buf, max);
    assert_eq!(
        runs.iter()
            .map(|s| (s.first_seq, s.count, s.encoded_len() - 4))
            .collect::<Vec<_>>(),
        vec![(10, 2, 97), (12, 2, 97), (14, 1, 63)]
    );
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        vec![10, 11, 12, 13, 14]
    );
}

/// Packing allocates nothing when the buffer has room: the storage never moves.
#[test]
fn sample_runs_write_in_place() {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let at = buf.as_ptr();
    let mut w = SampleRunWriter::new(&mut buf, [7; 16], 0, 1, 1000);
    for i in 0..500u32 {
        w.push(&i.to_be_bytes()[..(i % 4) as usize + 1]).unwrap();
    }
    assert!(w.frames() > 1, "the 1000-byte bound split the batch");
    drop(w); // closes the open run like finish()
    assert_eq!(buf.as_ptr(), at, "the buffer was reallocated");
    let (got, _) = read_runs(buf, 1000);
    assert_eq!(got.len(), 500);
}

/// Records at the largest allowed size survive a round trip (the bound is inclusive).
#[test]
fn the_largest_record_round_trips() {
    let d = Discovery {
        origin: PeerId([1; 16]),
        seq: 1,
        ttl: 1,
        cycle: 1,
        part: 0,
        parts: 1,
        entries: vec![DiscoveryEntry::Record(Bytes::from(
            vec![9u8; MAX_RECORD_ENTRY_LEN],
        ))],
    };
    let mut buf = BytesMut::new();
    d.encode(&mut buf).unwrap();
    assert_eq!(
        take_frame(&mut buf, MAX_MESSAGE_BYTES),
        Ok(Some(Frame::Discovery(d)))
    );
}
