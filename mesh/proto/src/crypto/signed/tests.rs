//! The signed records' test vectors (`mesh/proto/protocol/signed-records.md`, derived independently
//! with Python's `cryptography` and `hashlib`) and the signer book's rules.

use super::*;
use crate::wire::{decode_frame, DecodeStatus, Frame, SignedMembership};
use bytes::{Bytes, BytesMut};

const MEMB_SIG: &str = "9e3ece16e9f40636a34a3aa44f3a03b1e02be75df791dcc719d3506ef8ac3f477bdc837f53458b9d571691e81f23d4dc5a40926a120fe61b8c284cf27ee81005";
const MEMB_FRAME: &str = "0000009b0fc0c5ecd7f1ee33f526dd27d34c3e1daa0000018bcfe5680000022222222222222222222222222222222233333333333333333333333333333333d04ab232742bb4ab3a1368bd4615e4e6d0224ab71a016baf8520a332c97787379e3ece16e9f40636a34a3aa44f3a03b1e02be75df791dcc719d3506ef8ac3f477bdc837f53458b9d571691e81f23d4dc5a40926a120fe61b8c284cf27ee81005";
const DISC_MSG: &str = "73686f616c2d646973632d7631c0c5ecd7f1ee33f526dd27d34c3e1daa0000018bcfe5680100000007000000010100040102030402001044444444444444444444444444444444";
const DISC_SIG: &str = "48fbe9faaa48e5281886ea4e7d0900b2de4912bfd8c1b921d37d2b5853c0f2cabb26a8ce67055abe3a4c56ffe0a7b4564b4257b00b6a678ee2a0a604daf7ce07";
const DISC_FRAME: &str = "000000a109c0c5ecd7f1ee33f526dd27d34c3e1daa0000018bcfe5680108000000070000000100030100040102030402001044444444444444444444444444444444030060d04ab232742bb4ab3a1368bd4615e4e6d0224ab71a016baf8520a332c977873748fbe9faaa48e5281886ea4e7d0900b2de4912bfd8c1b921d37d2b5853c0f2cabb26a8ce67055abe3a4c56ffe0a7b4564b4257b00b6a678ee2a0a604daf7ce07";

fn vector_identity() -> Identity {
    Identity::from_seed(&[0x11; 32], "").unwrap()
}

fn vector_membership(id: &Identity) -> Membership {
    Membership {
        origin: id.node_id(),
        version: 1_700_000_000_000,
        neighbours: vec![PeerId([0x22; 16]), PeerId([0x33; 16])],
    }
}

fn vector_discovery(id: &Identity) -> Discovery {
    Discovery {
        origin: id.node_id(),
        seq: 1_700_000_000_001,
        ttl: 8,
        cycle: 7,
        part: 0,
        parts: 1,
        entries: vec![
            DiscoveryEntry::Record(Bytes::from_static(&[1, 2, 3, 4])),
            DiscoveryEntry::Withdraw([0x44; 16]),
        ],
    }
}

fn encode(f: &Frame) -> String {
    let mut b = BytesMut::new();
    f.encode(&mut b).unwrap();
    hex::encode(&b)
}

fn decode(hex_frame: &str) -> Frame {
    let b = Bytes::from(hex::decode(hex_frame).unwrap());
    match decode_frame(&b, u32::MAX).unwrap() {
        DecodeStatus::Complete { frame, len } => {
            assert_eq!(len, b.len());
            frame
        }
        DecodeStatus::NeedMore { .. } => panic!("whole frame"),
    }
}

#[test]
fn the_protocol_notes_vectors_are_reproduced() {
    let id = vector_identity();
    assert_eq!(
        hex::encode(id.public_key()),
        "d04ab232742bb4ab3a1368bd4615e4e6d0224ab71a016baf8520a332c9778737"
    );
    assert_eq!(
        hex::encode(id.node_id().0),
        "c0c5ecd7f1ee33f526dd27d34c3e1daa"
    );
    let mut scratch = Vec::new();

    let record = vector_membership(&id);
    let signature = sign_membership(&id, &record, &mut scratch);
    assert_eq!(hex::encode(signature.sig), MEMB_SIG);
    let frame = Frame::SignedMembership(SignedMembership { record, signature });
    assert_eq!(encode(&frame), MEMB_FRAME);
    assert_eq!(decode(MEMB_FRAME), frame);

    let mut d = vector_discovery(&id);
    let mut msg = Vec::new();
    d.signed_message(&mut msg);
    assert_eq!(hex::encode(&msg), DISC_MSG);
    sign_discovery(&id, &mut d, &mut scratch);
    assert_eq!(hex::encode(d.signature().unwrap().sig), DISC_SIG);
    let frame = Frame::Discovery(d.clone());
    assert_eq!(encode(&frame), DISC_FRAME);
    assert_eq!(decode(DISC_FRAME), frame);
    // Signing again leaves a signed frame alone; the signed bytes skip the signature.
    sign_discovery(&id, &mut d, &mut scratch);
    assert_eq!(d.entries.len(), 3);
    msg.clear();
    d.signed_message(&mut msg);
    assert_eq!(hex::encode(&msg), DISC_MSG);
}

/// The vectors in `signed-records.md` are the ones reproduced above (the notes and the code
/// cannot drift apart).
#[test]
fn the_protocol_notes_carry_these_vectors() {
    let doc = include_str!("../../../protocol/signed-records.md");
    let vectors = &doc[doc.find("## Test vectors").expect("a vectors section")..];
    // Each labelled value runs over its continuation lines (spaces only for reading).
    let mut values: Vec<(String, String)> = Vec::new();
    for line in vectors.lines() {
        let label = ["signed bytes", "sig", "frame"]
            .into_iter()
            .find(|l| line.starts_with(l) && line[l.len()..].starts_with(' '));
        match label {
            Some(l) => values.push((l.to_owned(), line[l.len()..].replace(' ', ""))),
            None if line.starts_with("   ") => {
                if let Some(v) = values.last_mut() {
                    v.1.push_str(&line.replace(' ', ""));
                }
            }
            None => {}
        }
    }
    let id = vector_identity();
    let mut memb_msg = Vec::new();
    vector_membership(&id).signed_message(&mut memb_msg);
    let want = [
        ("signed bytes", hex::encode(&memb_msg)),
        ("sig", MEMB_SIG.to_owned()),
        ("frame", MEMB_FRAME.to_owned()),
        ("signed bytes", DISC_MSG.to_owned()),
        ("sig", DISC_SIG.to_owned()),
        ("frame", DISC_FRAME.to_owned()),
    ];
    let got: Vec<(&str, &str)> = values
        .iter()
        .map(|(l, v)| (l.as_str(), v.as_str()))
        .collect();
    let want: Vec<(&str, &str)> = want.iter().map(|(l, v)| (*l, v.as_str())).collect();
    assert_eq!(got, want);
}

/// The vectors verify, and any change to a covered field (not `ttl`) breaks them.
#[test]
fn verification_covers_every_field_but_the_ttl() {
    let id = vector_identity();
    let open = IdentityPolicy::open(false);
    let Frame::Discovery(d) = decode(DISC_FRAME) else {
        panic!()
    };
    let check = |d: &Discovery| {
        let mut msg = Vec::new();
        d.signed_message(&mut msg);
        SignerBook::new(4).verify(&open, &d.origin, d.signature().unwrap(), &msg)
    };
    assert_eq!(check(&d), Ok(()));
    let mut relayed = d.clone();
    relayed.ttl = 1;
    assert_eq!(check(&relayed), Ok(()), "a relay lowers the ttl");
    type Edit = fn(&mut Discovery);
    let edits: [Edit; 7] = [
        |d| d.seq += 1,
        |d| d.cycle += 1,
        |d| d.part += 1,
        |d| d.parts += 1,
        |d| {
            d.entries.remove(1);
        },
        |d| d.entries[1] = DiscoveryEntry::Withdraw([0x45; 16]),
        |d| d.entries[0] = DiscoveryEntry::Record(Bytes::from_static(&[1, 2, 3, 5])),
    ];
    for (i, edit) in edits.iter().enumerate() {
        let mut forged = d.clone();
        edit(&mut forged);
        assert_eq!(
            check(&forged),
            Err(SignatureReject::BadSignature),
            "edit {i}"
        );
    }
    let Frame::SignedMembership(m) = decode(MEMB_FRAME) else {
        panic!()
    };
    let mut msg = Vec::new();
    m.record.signed_message(&mut msg);
    let mut book = SignerBook::new(4);
    assert_eq!(
        book.verify(&open, &id.node_id(), &m.signature, &msg),
        Ok(())
    );
    let mut forged = m.record.clone();
    forged.version += 1;
    msg.clear();
    forged.signed_message(&mut msg);
    assert_eq!(
        book.verify(&open, &id.node_id(), &m.signature, &msg),
        Err(SignatureReject::BadSignature)
    );
}

fn signed_record(seed: u8, origin: PeerId, version: u64) -> (Membership, RecordSignature) {
    let id = Identity::from_seed(&[seed; 32], "").unwrap();
    let record = Membership {
        origin,
        version,
        neighbours: vec![],
    };
    let sig = sign_membership(&id, &record, &mut Vec::new());
    (record, sig)
}

fn msg_of(r: &Membership) -> Vec<u8> {
    let mut v = Vec::new();
    r.signed_message(&mut v);
    v
}

#[test]
fn a_record_about_another_node_or_with_a_bad_key_is_a_forgery() {
    let open = IdentityPolicy::open(false);
    let mut book = SignerBook::new(4);
    let victim = Identity::from_seed(&[2; 32], "").unwrap().node_id();
    // Signed by node 3 (validly, with its own key) but about node 2.
    let (r, sig) = signed_record(3, victim, 9);
    let e = book.verify(&open, &victim, &sig, &msg_of(&r));
    assert_eq!(e, Err(SignatureReject::OriginMismatch));
    assert!(e.unwrap_err().is_forgery());
    // Node 2's real key with a signature of someone else's.
    let (_, real) = signed_record(2, victim, 9);
    let spliced = RecordSignature {
        key: real.key,
        sig: sig.sig,
    };
    assert_eq!(
        book.verify(&open, &victim, &spliced, &msg_of(&r)),
        Err(SignatureReject::BadSignature)
    );
    assert!(!book.knows(&victim), "nothing learned from a forgery");
    // A key that is no curve point, whose hash is the origin claimed.
    let bad_key = (0u8..=255)
        .map(|b| [b; 32])
        .find(|k| VerifyingKey::from_bytes(k).is_err())
        .unwrap();
    let origin = node_id_from_key(&bad_key);
    let bad = RecordSignature {
        key: bad_key,
        sig: [0; 64],
    };
    assert_eq!(
        book.verify(&open, &origin, &bad, b"x"),
        Err(SignatureReject::BadKey)
    );
}

#[test]
fn the_trust_policy_applies_to_every_record_and_is_not_a_forgery() {
    let id2 = Identity::from_seed(&[2; 32], "").unwrap();
    let (r, sig) = signed_record(2, id2.node_id(), 9);
    let mut policy = IdentityPolicy::allowlist([(*id2.public_key(), "two")], true);
    let mut book = SignerBook::new(4);
    assert_eq!(book.verify(&policy, &r.origin, &sig, &msg_of(&r)), Ok(()));
    assert!(book.knows(&r.origin));
    // Revoked: a known key is refused from then on.
    policy.revoke(id2.public_key());
    let e = book.verify(&policy, &r.origin, &sig, &msg_of(&r));
    assert_eq!(e, Err(SignatureReject::Untrusted));
    assert!(!e.unwrap_err().is_forgery());
    let unlisted = IdentityPolicy::allowlist([([9; 32], "nine")], true);
    assert_eq!(
        SignerBook::new(4).verify(&unlisted, &r.origin, &sig, &msg_of(&r)),
        Err(SignatureReject::Untrusted)
    );
}

#[test]
fn a_learned_key_never_changes_and_the_book_is_bounded() {
    let open = IdentityPolicy::open(false);
    let mut book = SignerBook::new(2);
    let ids: Vec<Identity> = (1..=3)
        .map(|s| Identity::from_seed(&[s; 32], "").unwrap())
        .collect();
    for (i, id) in ids.iter().enumerate() {
        let (r, sig) = signed_record(i as u8 + 1, id.node_id(), 1);
        assert_eq!(book.verify(&open, &r.origin, &sig, &msg_of(&r)), Ok(()));
    }
    assert_eq!((book.len(), book.evicted()), (2, 1));
    assert!(
        !book.knows(&ids[0].node_id()),
        "the least recently verified went"
    );
    // A known origin with another key: refused before any hashing.
    let (r, sig) = signed_record(1, ids[2].node_id(), 2);
    assert_eq!(
        book.verify(&open, &r.origin, &sig, &msg_of(&r)),
        Err(SignatureReject::OriginMismatch)
    );
    // Discovery high-water marks live with the key.
    let o = ids[2].node_id();
    assert!(!book.discovery_seen(&o, 5));
    book.discovery_verified(&o, 5);
    assert!(book.discovery_seen(&o, 5) && book.discovery_seen(&o, 4));
    assert!(!book.discovery_seen(&o, 6));
    book.remove(&o);
    assert!(!book.knows(&o) && !book.discovery_seen(&o, 5));
}
