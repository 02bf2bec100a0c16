//! MembershipDigest (type 16) bytes, by hand: a Summary and a Versions frame against their
//! hand-computed encodings (`protocol/extensions.md`, "MembershipDigest"), every rule of the
//! decoder, and the sending rule (only to peers that set both feature bits).

use bytes::{Bytes, BytesMut};
use shoal_proto::wire::{
    decode_frame, peer_accepts_frame_type, DecodeError, DecodeStatus, Features, Frame,
    MembershipDigest, ShoalExtension, MEMBERSHIP_DIGEST_FRAME_TYPE, NO_LEGACY, SHOAL_EXT_VERSION,
};
use shoal_proto::PeerId;

const MAX: u32 = 1 << 20;

fn decode(b: &[u8]) -> Result<Frame, DecodeError> {
    match decode_frame(&Bytes::copy_from_slice(b), MAX)? {
        DecodeStatus::Complete { frame, len } => {
            assert_eq!(len, b.len());
            Ok(frame)
        }
        other => panic!("incomplete: {other:?}"),
    }
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// length 15 | type 16 | kind 1 | legacyHops 255 | count 3 | digest 0x0123456789abcdef
const SUMMARY: &str = "0000000f 10 01 ff 00000003 0123456789abcdef";

/// length 63 | type 16 | kind 2 | legacyHops 0 | count 2 | digest 0 |
/// origin 0x01 × 16, version 5 | origin 0x02 × 16, version 0x0102030405060708
const VERSIONS: &str = "0000003f 10 02 00 00000002 0000000000000000 \
    01010101010101010101010101010101 0000000000000005 \
    02020202020202020202020202020202 0102030405060708";

#[test]
fn a_summary_is_fifteen_bytes_after_the_length() {
    let d = MembershipDigest {
        legacy_hops: NO_LEGACY,
        count: 3,
        digest: 0x0123_4567_89ab_cdef,
        versions: None,
    };
    let mut b = BytesMut::new();
    Frame::MembershipDigest(d.clone()).encode(&mut b).unwrap();
    assert_eq!(&b[..], &hex(SUMMARY)[..]);
    assert_eq!(decode(&b).unwrap(), Frame::MembershipDigest(d));
}

#[test]
fn a_versions_frame_lists_origins_ascending() {
    let d = MembershipDigest {
        legacy_hops: 0,
        count: 2,
        digest: 0,
        versions: Some(vec![
            (PeerId([1; 16]), 5),
            (PeerId([2; 16]), 0x0102_0304_0506_0708),
        ]),
    };
    let mut b = BytesMut::new();
    Frame::MembershipDigest(d.clone()).encode(&mut b).unwrap();
    assert_eq!(&b[..], &hex(VERSIONS)[..]);
    assert_eq!(decode(&b).unwrap(), Frame::MembershipDigest(d));
}

fn bad(bytes: Vec<u8>, why: &str) {
    match decode(&bytes) {
        Err(DecodeError::BadDigest(w)) => assert_eq!(w, why),
        other => panic!("{why}: {other:?}"),
    }
}

/// `body` after the type byte, with the length prefix computed.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut v = ((body.len() + 1) as u32).to_be_bytes().to_vec();
    v.push(MEMBERSHIP_DIGEST_FRAME_TYPE);
    v.extend_from_slice(body);
    v
}

#[test]
fn every_number_is_checked() {
    let summary = hex(SUMMARY)[5..].to_vec();
    let versions = hex(VERSIONS)[5..].to_vec();
    let mut b = summary.clone();
    b[0] = 3;
    bad(framed(&b), "unknown kind");
    let mut b = summary.clone();
    b[1] = 33;
    bad(framed(&b), "legacyHops out of range");
    let mut b = summary.clone();
    b.push(0);
    bad(framed(&b), "bytes after a Summary");
    let mut b = versions.clone();
    b[5] = 3; // count 3, two entries
    bad(framed(&b), "count does not fill the body exactly");
    let mut b = versions.clone();
    b.pop();
    bad(framed(&b), "count does not fill the body exactly");
    let mut b = versions.clone();
    b[2..6].copy_from_slice(&70_000u32.to_be_bytes());
    bad(framed(&b), "count over 65535");
    // Entries swapped: not ascending.
    let mut b = versions[..14].to_vec();
    b.extend_from_slice(&versions[38..62]);
    b.extend_from_slice(&versions[14..38]);
    bad(framed(&b), "origins not strictly ascending");
    // The same origin twice.
    let mut b = versions[..14].to_vec();
    b.extend_from_slice(&versions[14..38]);
    b.extend_from_slice(&versions[14..38]);
    bad(framed(&b), "origins not strictly ascending");
    // An all-zero origin.
    let mut b = versions.clone();
    b[14..30].fill(0);
    bad(framed(&b), "an all-zero origin");
    // Cut short inside the fixed part.
    assert!(matches!(
        decode(&framed(&summary[..10])),
        Err(DecodeError::Truncated { .. })
    ));
}

#[test]
fn the_encoder_refuses_what_the_decoder_would() {
    let d = MembershipDigest {
        legacy_hops: 40,
        count: 0,
        digest: 0,
        versions: None,
    };
    assert!(Frame::MembershipDigest(d)
        .encode(&mut BytesMut::new())
        .is_err());
    let d = MembershipDigest {
        legacy_hops: 1,
        count: 1,
        digest: 0,
        versions: Some(vec![(PeerId([2; 16]), 1), (PeerId([1; 16]), 1)]),
    };
    assert!(Frame::MembershipDigest(d)
        .encode(&mut BytesMut::new())
        .is_err());
}

#[test]
fn only_peers_that_set_both_bits_get_it() {
    let ext = |f: Features| Some(ShoalExtension::new(SHOAL_EXT_VERSION, f));
    let t = MEMBERSHIP_DIGEST_FRAME_TYPE;
    assert!(!peer_accepts_frame_type(None, t));
    assert!(!peer_accepts_frame_type(
        ext(Features::EXTENDED_FRAMES).as_ref(),
        t
    ));
    assert!(!peer_accepts_frame_type(
        ext(Features::MEMBERSHIP_DIGEST).as_ref(),
        t
    ));
    assert!(peer_accepts_frame_type(
        ext(Features::EXTENDED_FRAMES.union(Features::MEMBERSHIP_DIGEST)).as_ref(),
        t
    ));
}
