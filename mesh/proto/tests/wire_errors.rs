//! The typed failures of the wire codec, one case each, plus the announce acceptance rules and
//! the extended-frame sending rule.

use bytes::{Bytes, BytesMut};
use shoal_proto::wire::{
    decode_frame, peek_frame_len, peer_accepts_frame_type, take_frame, Beacon, BeaconFilter,
    BeaconReject, Data, DataHeader, DecodeError, DecodeStatus, EncodeError, Features, Frame, Hello,
    HelloIdentity, IdentityRecord, Membership, ShoalExtension, DATA_HEADER_LEN,
    MAX_HANDSHAKE_FRAME_LEN, MAX_HELLO_V1_LEN, MAX_MESSAGE_BYTES, PROTOCOL_VERSION,
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
    // 9 and 10 are Shoal's topic frames; 11 is the first type nobody defines.
    for ty in [0u8, 11, 12, 200, 255] {
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
    let shoal_without = Some(ShoalExtension {
        version: 1,
        features: Features::NONE,
    });
    let shoal_with = Some(ShoalExtension {
        version: 1,
        features: Features::EXTENDED_FRAMES,
    });
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
