//! Property tests of the wire codec: round trips for every frame type and the datagram, and
//! robustness of the framing decoder against arbitrary bytes fed as growing prefixes.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use shoal_proto::wire::{
    decode_frame, encode_data_into, peek_frame_len, take_data, take_frame, AuthConfirm, Beacon,
    Data, DecodeError, DecodeStatus, Features, Frame, Hello, HelloIdentity, IdentityRecord,
    Membership, ShoalExtension, MAX_MESSAGE_BYTES,
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
            shoal: ext.map(|(version, f)| ShoalExtension {
                version,
                features: Features(f),
            }),
        })
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
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
/// a type around 0..=9, then random body bytes (which may be shorter or longer than announced).
fn framish_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        (
            0u32..300,
            0u8..10,
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
                if let Frame::Data(d) = &frame {
                    // Zero copy: the payload points into the read buffer.
                    if !d.payload.is_empty() {
                        prop_assert_eq!(d.payload.as_ptr(), bytes[58..].as_ptr());
                    }
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
                prop_assert_eq!(got.shoal, Some(ShoalExtension { version, features: Features(features) }));
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
