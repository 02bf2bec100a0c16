//! The signed records' wire rules: the Signature entry of a Discovery frame (kind 3, only
//! last, exactly 96 bytes), SignedMembership (type 15: filled exactly, neighbours strictly
//! ascending), and who may be sent type 15 (only peers that advertised signed records, so
//! neither a multimaster peer nor a Shoal build that predates it ever sees it).

use bytes::BytesMut;
use shoal_proto::wire::{
    peer_accepts_frame_type, take_frame, DecodeError, Discovery, DiscoveryEntry, EncodeError,
    Features, Frame, Membership, RecordSignature, ShoalExtension, SignedMembership,
    DISCOVERY_HEADER_LEN, DISCOVERY_SIGNATURE_ENTRY_LEN, SIGNED_MEMBERSHIP_FRAME_TYPE,
};
use shoal_proto::PeerId;

const MAX: u32 = 1 << 20;

fn signature() -> RecordSignature {
    RecordSignature {
        key: [0xaa; 32],
        sig: [0xbb; 64],
    }
}

fn discovery(entries: Vec<DiscoveryEntry>) -> Discovery {
    Discovery {
        origin: PeerId([1; 16]),
        seq: 5,
        ttl: 3,
        cycle: 1,
        part: 0,
        parts: 1,
        entries,
    }
}

fn encoded(f: &Frame) -> BytesMut {
    let mut b = BytesMut::new();
    f.encode(&mut b).unwrap();
    b
}

fn decode(bytes: &[u8]) -> Result<Option<Frame>, DecodeError> {
    take_frame(&mut BytesMut::from(bytes), MAX)
}

#[test]
fn a_signed_discovery_frame_round_trips_and_its_size_is_known() {
    let d = discovery(vec![
        DiscoveryEntry::Withdraw([2; 16]),
        DiscoveryEntry::Signature(signature()),
    ]);
    let b = encoded(&Frame::Discovery(d.clone()));
    assert_eq!(
        b.len(),
        DISCOVERY_HEADER_LEN + 3 + 16 + DISCOVERY_SIGNATURE_ENTRY_LEN
    );
    assert_eq!(d.encoded_len(), b.len());
    assert_eq!(decode(&b), Ok(Some(Frame::Discovery(d.clone()))));
    assert_eq!(d.signature(), Some(&signature()));
    assert_eq!(discovery(vec![]).signature(), None);
}

#[test]
fn a_signature_entry_must_be_last_and_96_bytes() {
    // Encoding refuses a Signature entry that is not last.
    let bad = discovery(vec![
        DiscoveryEntry::Signature(signature()),
        DiscoveryEntry::Withdraw([2; 16]),
    ]);
    assert_eq!(
        Frame::Discovery(bad).encode(&mut BytesMut::new()),
        Err(EncodeError::SignatureNotLast)
    );
    // Decoding too: swap the entries of a valid frame by hand.
    let ok = discovery(vec![
        DiscoveryEntry::Withdraw([2; 16]),
        DiscoveryEntry::Signature(signature()),
    ]);
    let b = encoded(&Frame::Discovery(ok));
    let head = DISCOVERY_HEADER_LEN;
    let (withdraw, sig) = (&b[head..head + 19], &b[head + 19..]);
    let mut swapped = b[..head].to_vec();
    swapped.extend_from_slice(sig);
    swapped.extend_from_slice(withdraw);
    assert_eq!(decode(&swapped), Err(DecodeError::SignatureNotLast));
    // A kind-3 entry of another length.
    let mut short = b[..head + 19].to_vec();
    short.extend_from_slice(&[3, 0, 4, 1, 2, 3, 4]);
    let body_len = (short.len() - 4) as u32;
    short[..4].copy_from_slice(&body_len.to_be_bytes());
    assert_eq!(decode(&short), Err(DecodeError::BadSignatureLen { len: 4 }));
}

#[test]
fn signed_membership_round_trips_and_is_strict() {
    let m = SignedMembership {
        record: Membership {
            origin: PeerId([1; 16]),
            version: 9,
            neighbours: vec![PeerId([2; 16]), PeerId([3; 16])],
        },
        signature: signature(),
    };
    let b = encoded(&Frame::SignedMembership(m.clone()));
    assert_eq!(b[4], SIGNED_MEMBERSHIP_FRAME_TYPE);
    assert_eq!(b.len(), 5 + 16 + 8 + 2 + 32 + 96);
    assert_eq!(decode(&b), Ok(Some(Frame::SignedMembership(m.clone()))));
    // Trailing bytes reject it (unlike type 6).
    let mut longer = b.to_vec();
    longer.push(0);
    let len = (longer.len() - 4) as u32;
    longer[..4].copy_from_slice(&len.to_be_bytes());
    assert!(matches!(
        decode(&longer),
        Err(DecodeError::TrailingBytes {
            frame: "SignedMembership",
            extra: 1
        })
    ));
    // Neighbours out of order or repeated: refused both ways.
    for neighbours in [
        vec![PeerId([3; 16]), PeerId([2; 16])],
        vec![PeerId([2; 16]), PeerId([2; 16])],
    ] {
        let mut bad = m.clone();
        bad.record.neighbours = neighbours.clone();
        assert_eq!(
            Frame::SignedMembership(bad).encode(&mut BytesMut::new()),
            Err(EncodeError::UnsortedNeighbours)
        );
        let mut raw = b.to_vec();
        raw[5 + 26..5 + 26 + 16].copy_from_slice(&neighbours[0].0);
        raw[5 + 42..5 + 42 + 16].copy_from_slice(&neighbours[1].0);
        assert_eq!(decode(&raw), Err(DecodeError::UnsortedNeighbours));
    }
    // Cut short.
    assert!(matches!(
        decode(&{
            let mut s = b[..b.len() - 1].to_vec();
            let len = (s.len() - 4) as u32;
            s[..4].copy_from_slice(&len.to_be_bytes());
            s
        }),
        Err(DecodeError::Truncated { .. })
    ));
}

#[test]
fn type_15_goes_only_to_peers_that_advertised_signed_records() {
    let ext = |f: Features| Some(ShoalExtension::new(1, f));
    let t = SIGNED_MEMBERSHIP_FRAME_TYPE;
    assert!(!peer_accepts_frame_type(None, t), "a multimaster peer");
    assert!(
        !peer_accepts_frame_type(ext(Features::EXTENDED_FRAMES).as_ref(), t),
        "a Shoal build that predates signed records knows 9..=14 only"
    );
    assert!(!peer_accepts_frame_type(
        ext(Features::SIGNED_RECORDS).as_ref(),
        t
    ));
    let both = ext(Features::EXTENDED_FRAMES.union(Features::SIGNED_RECORDS));
    assert!(peer_accepts_frame_type(both.as_ref(), t));
    assert!(peer_accepts_frame_type(both.as_ref(), 9));
    assert!(ShoalExtension::current()
        .features
        .contains(Features::SIGNED_RECORDS));
    // The unsigned record still goes to everyone.
    assert!(peer_accepts_frame_type(None, 6));
}
