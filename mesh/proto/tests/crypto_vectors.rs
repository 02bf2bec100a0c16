//! The secured-mesh cryptography against the captures of the C++ library (vectors V2, V3, V5,
//! V6 of `tests/data/vectors.txt`, parsed at run time; the rules are
//! `mesh/proto/protocol/secured.md`).

mod crypto_support;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use crypto_support::Section;
use shoal_proto::crypto::{
    node_id_from_key, sign_identity_record, verify_identity_record, verify_transcript, BeaconDrop,
    BeaconMacError, Established, Handshake, Identity, IdentityBook, IdentityPolicy, Opened,
    PskKeys, RecordOpener, RecordReader, RecordSealer, ScoutGuard, SecureContext, SessionKeys,
};
use shoal_proto::wire::{
    decode_frame, Beacon, BeaconFilter, BeaconReject, DecodeStatus, Frame, Hello, MAX_MESSAGE_BYTES,
};
use shoal_proto::PeerId;

fn frame(bytes: &[u8]) -> Frame {
    match decode_frame(&Bytes::copy_from_slice(bytes), MAX_MESSAGE_BYTES).expect("frame decodes") {
        DecodeStatus::Complete { frame, len } => {
            assert_eq!(len, bytes.len(), "exactly one frame");
            frame
        }
        DecodeStatus::NeedMore { .. } => panic!("incomplete frame"),
    }
}

fn hello_of(bytes: &[u8]) -> Hello {
    match frame(bytes) {
        Frame::Hello(h) | Frame::HelloAck(h) => h,
        f => panic!("expected Hello/HelloAck, got {f:?}"),
    }
}

fn encode(f: &Frame) -> Vec<u8> {
    let mut out = Vec::new();
    f.encode(&mut out).expect("encodes");
    out
}

fn secret(s: &Section, key: &str) -> [u8; 32] {
    s.val_arr(key)
}

// ---------------------------------------------------------------- V2 / V3: PSK and announces

fn check_announce_section(s: &Section) {
    let psk = PskKeys::derive(s.val("input.psk").as_bytes()).expect("non-empty psk");
    assert_eq!(psk.group_key()[..], s.val_hex("derived K")[..], "K");
    assert_eq!(psk.discovery_key()[..], s.val_hex("derived Kd")[..], "Kd");

    let datagram = s.bytes("datagram hex");
    assert_eq!(
        datagram.len(),
        s.val("datagram length").parse::<usize>().unwrap()
    );
    let body = &datagram[..datagram.len() - 16];
    let mac = psk.announce_mac(body);
    assert_eq!(
        mac[..],
        s.val_hex("mac (last 16 bytes)")[..],
        "announce MAC"
    );
    assert_eq!(mac[..], datagram[datagram.len() - 16..]);
    assert_eq!(
        mac[..],
        s.val_hex("recomputed BLAKE2b-128(key=Kd, msg=datagram[0:37])")[..]
    );
    // A truncated 32-byte digest is a different value: digest_size=16 is required.
    assert_ne!(
        mac[..],
        s.val_hex("(for contrast, first 16 bytes of BLAKE2b-256")[..]
    );

    // Sender side: encode the announce from the inputs and append the MAC.
    let node_id = PeerId(s.val_arr("decoded.nodeId"));
    let announce = Beacon::new(
        node_id,
        s.val("input.tcpListenPort").parse().unwrap(),
        s.val("input.groupName"),
        true,
    );
    let guard = ScoutGuard::Secured(psk.clone());
    let mut out = Vec::new();
    announce.encode_body(&mut out).unwrap();
    guard.seal(&mut out);
    assert_eq!(out, datagram, "sealed announce");

    // Receiver side, in the protocol's order (`secured.md`).
    let other = PeerId([0x77; 16]);
    let filter = |own: PeerId, secured: bool| BeaconFilter {
        secured,
        protocol_version: 1,
        group_name: s.val("input.groupName"),
        own_id: own,
    };
    let ok = guard
        .accept(datagram, &filter(other, true))
        .expect("accepted");
    assert_eq!(ok.announce.node_id, node_id);
    assert_eq!(
        guard.accept(datagram, &filter(node_id, true)),
        Err(BeaconDrop::Rejected(BeaconReject::OwnAnnounce))
    );
    // A plaintext node drops the secured announce on the flag.
    let err = ScoutGuard::Plaintext
        .accept(datagram, &filter(other, false))
        .unwrap_err();
    assert!(
        matches!(err, BeaconDrop::Rejected(BeaconReject::ModeMismatch { .. })),
        "{err:?}"
    );
    // Wrong PSK, tampering, truncation: dropped before parsing.
    let wrong = ScoutGuard::Secured(PskKeys::derive(b"other-psk").unwrap());
    assert_eq!(
        wrong.accept(datagram, &filter(other, true)),
        Err(BeaconDrop::Mac(BeaconMacError::BadMac))
    );
    for i in 0..datagram.len() {
        let mut t = datagram.to_vec();
        t[i] ^= 0x01;
        assert_eq!(
            guard.admit(&t),
            Err(BeaconMacError::BadMac),
            "flipped byte {i}"
        );
    }
    assert_eq!(guard.admit(&datagram[..16]), Err(BeaconMacError::TooShort));
    assert_eq!(
        guard.admit(&datagram[..datagram.len() - 1]),
        Err(BeaconMacError::BadMac)
    );
}

#[test]
fn v2_secured_announce() {
    let v = crypto_support::load();
    check_announce_section(&v["V2"]);
}

#[test]
fn v3_identity_announce_and_node_id() {
    let v = crypto_support::load();
    let s = &v["V3"];
    check_announce_section(s);
    let id = Identity::from_seed_hex(s.val("input.identitySeed"), s.val("input.nodeName")).unwrap();
    assert_eq!(
        id.public_key()[..],
        s.val_hex("identity pk (from mesh::identity_public_key)")[..]
    );
    assert_eq!(id.node_id().0[..], s.val_hex("BLAKE2b-128(idpk)")[..]);
    assert_eq!(node_id_from_key(id.public_key()), id.node_id());
    let datagram = s.bytes("datagram hex");
    assert_eq!(
        id.node_id().0[..],
        datagram[8..24],
        "announced nodeId is the key's hash"
    );
}

#[test]
fn v1_plaintext_announce_dropped_by_secured_node() {
    let v = crypto_support::load();
    let s = &v["V1"];
    let datagram = s.bytes("datagram hex");
    let psk = PskKeys::derive(b"test-psk").unwrap();
    let filter = |secured| BeaconFilter {
        secured,
        protocol_version: 1,
        group_name: s.val("input.groupName"),
        own_id: PeerId([0x77; 16]),
    };
    assert_eq!(
        ScoutGuard::Secured(psk).accept(datagram, &filter(true)),
        Err(BeaconDrop::Mac(BeaconMacError::BadMac))
    );
    assert!(ScoutGuard::Plaintext
        .accept(datagram, &filter(false))
        .is_ok());
}

// ---------------------------------------------------------------- V5 / V6: connections

struct Side {
    name: &'static str,
    peer: &'static str,
    ctx: Arc<SecureContext>,
    sk: [u8; 32],
}

fn sides(s: &Section, with_identity: bool) -> (Side, Side) {
    let group = s.val("input.groupName");
    let make = |name: &'static str, peer: &'static str| {
        let psk = PskKeys::derive(s.val("input.psk").as_bytes()).unwrap();
        let mut ctx = SecureContext::new(psk, group.as_bytes()).unwrap();
        if with_identity {
            let id = Identity::from_seed_hex(
                s.val(&format!("input.identitySeed_{name}")),
                s.val(&format!("input.nodeName_{name}")),
            )
            .unwrap();
            ctx = ctx.with_identity(id, IdentityPolicy::open(true));
        }
        Side {
            name,
            peer,
            ctx: Arc::new(ctx),
            sk: secret(s, &format!("input.eph_sk_{name}")),
        }
    };
    (make("A", "B"), make("B", "A"))
}

fn label(from: &str, to: &str, rest: &str) -> String {
    format!("{from}->{to} {rest}")
}

/// Runs both handshakes from the captured Hellos, checking every derived value and the
/// AuthConfirm bytes; returns (A's, B's) established state.
fn handshake_both(s: &Section, with_identity: bool) -> (Established, Established) {
    let (a, b) = sides(s, with_identity);
    let mut out = Vec::new();
    for side in [&a, &b] {
        let mut hs = Handshake::with_ephemeral_secret(side.ctx.clone(), side.sk);
        assert_eq!(
            hs.eph_public()[..],
            s.val_hex(&format!("{} eph pk", side.name))[..]
        );
        let own_hello_bytes = s.bytes(&label(side.name, side.peer, "#0"));
        let own_hello = hello_of(own_hello_bytes);
        // Our Hello's crypto fields are exactly what the library sent.
        let mut rebuilt = own_hello.clone();
        rebuilt.eph_pub_key = None;
        rebuilt.identity = None;
        if with_identity {
            rebuilt.node_id = PeerId::ZERO;
        }
        hs.fill_hello(&mut rebuilt);
        assert_eq!(rebuilt, own_hello, "{} Hello fields", side.name);
        let f = if side.name == "A" {
            Frame::Hello(rebuilt)
        } else {
            Frame::HelloAck(rebuilt)
        };
        assert_eq!(encode(&f), own_hello_bytes, "{} Hello bytes", side.name);

        let peer_hello = hello_of(s.bytes(&label(side.peer, side.name, "#0")));
        let confirm = hs.on_peer_hello(&peer_hello).expect("peer hello accepted");
        assert!(hs.awaiting_confirm());
        assert_eq!(
            confirm.tag[..],
            s.val_hex(&format!("tag({})", side.name))[..]
        );
        assert_eq!(confirm.sig.is_some(), with_identity);
        assert_eq!(
            encode(&Frame::AuthConfirm(confirm)),
            s.bytes(&label(side.name, side.peer, "#1")),
            "{} AuthConfirm bytes",
            side.name
        );
        let Frame::AuthConfirm(peer_confirm) = frame(s.bytes(&label(side.peer, side.name, "#1")))
        else {
            panic!("AuthConfirm expected");
        };
        let est = hs
            .on_peer_auth_confirm(&peer_confirm)
            .expect("peer confirm accepted");
        assert!(!hs.awaiting_confirm());
        if with_identity {
            let peer = est.peer.as_ref().expect("peer identity verified");
            let id = peer_hello.identity.as_ref().unwrap();
            assert_eq!(peer.key, id.id_pub_key);
            assert_eq!(peer.node_id, peer_hello.node_id);
            assert_eq!(&*peer.name, s.val(&format!("input.nodeName_{}", side.peer)));
            assert_eq!(peer.label, None);
        } else {
            assert!(est.peer.is_none());
        }
        out.push(est);
    }
    let b_est = out.pop().unwrap();
    (out.pop().unwrap(), b_est)
}

fn check_derivation(s: &Section) {
    let group = s.val("input.groupName").as_bytes();
    let psk = PskKeys::derive(s.val("input.psk").as_bytes()).unwrap();
    assert_eq!(psk.group_key()[..], s.val_hex("K")[..]);
    let (sk_a, sk_b) = (secret(s, "A eph sk"), secret(s, "B eph sk"));
    let (pk_a, pk_b): ([u8; 32], [u8; 32]) = (s.val_arr("A eph pk"), s.val_arr("B eph pk"));
    assert_eq!(
        x25519_dalek::x25519(sk_a, x25519_dalek::X25519_BASEPOINT_BYTES),
        pk_a
    );
    let dh = x25519_dalek::x25519(sk_a, pk_b);
    assert_eq!(dh, x25519_dalek::x25519(sk_b, pk_a));
    assert_eq!(dh[..], s.val_hex("dh")[..]);
    assert_eq!(s.val("lo side"), if pk_a < pk_b { "A" } else { "B" });
    for (e1, e2) in [(&pk_a, &pk_b), (&pk_b, &pk_a)] {
        let keys = SessionKeys::derive(&psk, &dh, e1, e2, group);
        assert_eq!(keys.master()[..], s.val_hex("master(64)")[..]);
        let kab = [&keys.ka()[..], &keys.kb()[..]].concat();
        assert_eq!(kab, s.val_hex("kA||kB"));
        assert_eq!(keys.confirm_key()[..], s.val_hex("confirmKey")[..]);
        assert_eq!(keys.tag(&pk_a)[..], s.val_hex("tag(A)")[..]);
        assert_eq!(keys.tag(&pk_b)[..], s.val_hex("tag(B)")[..]);
        assert_eq!(keys.directional(&pk_a).0[..], s.val_hex("A tx key")[..]);
        assert_eq!(keys.directional(&pk_b).0[..], s.val_hex("B tx key")[..]);
        assert_eq!(keys.directional(&pk_a).1, keys.directional(&pk_b).0);
    }
}

/// Every captured record of `from -> to`: (record bytes, plaintext frame bytes, frame kind).
fn records(s: &Section, from: &str, to: &str) -> Vec<(Vec<u8>, Vec<u8>, String)> {
    let labels = s.blocks_with_prefix(&label(from, to, "rec "));
    assert!(!labels.is_empty(), "no {from}->{to} records in vectors");
    labels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            assert_eq!(
                *l,
                label(from, to, &format!("rec {i}")),
                "records in counter order"
            );
            let desc = &s.blocks.iter().find(|(b, _)| b == l).unwrap().1;
            let kind = desc
                .split("-> ")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap();
            (
                s.bytes(&format!("{l}/record hex")).to_vec(),
                s.bytes(&format!("{l}/decrypted frame hex")).to_vec(),
                kind.to_string(),
            )
        })
        .collect()
}

fn kind_of(f: &Frame) -> String {
    format!("{:?}", f.frame_type())
}

/// Seals each plaintext with `sealer` and compares with the capture; opens each capture in place
/// with `opener` and compares with the plaintext.
fn check_direction(
    s: &Section,
    from: &str,
    to: &str,
    mut sealer: RecordSealer,
    mut opener: RecordOpener,
) {
    for (i, (record, plain, kind)) in records(s, from, to).into_iter().enumerate() {
        let mut out = BytesMut::new();
        let n = sealer.seal_frame(&mut out, &plain).unwrap();
        assert_eq!(n, record.len());
        assert_eq!(&out[..], &record[..], "{from}->{to} record {i} sealed");
        assert_eq!(sealer.counter(), i as u64 + 1);

        let mut buf = record.clone();
        match opener
            .open_in_place(&mut buf)
            .expect("captured record opens")
        {
            Opened::Record { len, plaintext } => {
                assert_eq!(len, record.len());
                assert_eq!(
                    &buf[plaintext.clone()],
                    &plain[..],
                    "{from}->{to} record {i} opened"
                );
                assert_eq!(kind_of(&frame(&buf[plaintext])), kind);
            }
            Opened::NeedMore(_) => panic!("whole record given"),
        }
    }
}

/// Feeds the captured stream in small chunks to a RecordReader and decodes frames from it.
fn check_stream(s: &Section, from: &str, to: &str, opener: RecordOpener) -> Vec<Frame> {
    let recs = records(s, from, to);
    let stream: Vec<u8> = recs.iter().flat_map(|r| r.0.clone()).collect();
    let mut reader = RecordReader::new(opener, &stream[..3]);
    let mut frames = Vec::new();
    for chunk in stream[3..].chunks(7) {
        reader.push(chunk);
        reader.decrypt().unwrap();
        while let Some(f) = shoal_proto::wire::take_frame(
            &mut BytesMut::from(reader.plaintext()),
            MAX_MESSAGE_BYTES,
        )
        .unwrap()
        {
            let n = f.encoded_len();
            reader.consume(n);
            frames.push(f);
        }
    }
    reader.finish().expect("stream ends on a record boundary");
    assert_eq!(reader.records(), recs.len() as u64);
    let kinds: Vec<String> = frames.iter().map(kind_of).collect();
    let want: Vec<String> = recs.iter().map(|r| r.2.clone()).collect();
    assert_eq!(kinds, want);
    frames
}

#[test]
fn v5_psk_connection() {
    let v = crypto_support::load();
    let s = &v["V5"];
    check_derivation(s);
    let (a, b) = handshake_both(s, false);
    check_direction(s, "A", "B", a.sealer, b.opener);
    check_direction(s, "B", "A", b.sealer, a.opener);
    let (a, b) = handshake_both(s, false);
    check_stream(s, "A", "B", b.opener);
    check_stream(s, "B", "A", a.opener);
}

#[test]
fn v6_identity_connection() {
    let v = crypto_support::load();
    let s = &v["V6"];
    check_derivation(s);
    let (a, b) = handshake_both(s, true);
    check_direction(s, "A", "B", a.sealer, b.opener);
    check_direction(s, "B", "A", b.sealer, a.opener);

    let id = |n: &str| {
        Identity::from_seed_hex(
            s.val(&format!("input.identitySeed_{n}")),
            s.val(&format!("input.nodeName_{n}")),
        )
        .unwrap()
    };
    let (id_a, id_b) = (id("A"), id("B"));
    // Transcript signatures: deterministic Ed25519, so ours equal the captured ones.
    let (pk_a, pk_b): ([u8; 32], [u8; 32]) = (s.val_arr("A eph pk"), s.val_arr("B eph pk"));
    for (me, eph, peer_eph, blk) in [
        (&id_a, &pk_a, &pk_b, "A->B #1"),
        (&id_b, &pk_b, &pk_a, "B->A #1"),
    ] {
        let sig: [u8; 64] = hex::decode(s.block_field(blk, "sig"))
            .unwrap()
            .try_into()
            .unwrap();
        assert_eq!(me.sign_transcript(eph, peer_eph), sig);
        verify_transcript(me.public_key(), eph, peer_eph, me.name().as_bytes(), &sig).unwrap();
        // The captured transcript bytes are what the signature covers.
        let t = s.val_hex(&format!("{blk}/transcript hex"));
        let vk = ed25519_dalek::VerifyingKey::from_bytes(me.public_key()).unwrap();
        vk.verify_strict(&t, &ed25519_dalek::Signature::from_bytes(&sig))
            .unwrap();
        assert_eq!(
            me.node_id().0[..],
            s.val_hex(&format!("{blk}/BLAKE2b-128(idPubKey)"))[..]
        );
    }

    // Identity records: ours equal the captured ones; B's book takes A's in version order.
    let (a, b) = handshake_both(s, true);
    let from_a = check_stream(s, "A", "B", b.opener);
    let from_b = check_stream(s, "B", "A", a.opener);
    let mut book = IdentityBook::new(id_b.node_id(), 16);
    let policy = IdentityPolicy::open(true);
    let mut seen = 0;
    for (frames, me) in [(&from_a, &id_a), (&from_b, &id_b)] {
        for f in frames.iter() {
            let Frame::IdentityRecord(r) = f else {
                continue;
            };
            seen += 1;
            assert_eq!(&r.id_pub_key, me.public_key());
            assert_eq!(r.name, me.name());
            assert_eq!(sign_identity_record(me, r.version), r.sig);
            assert_eq!(
                verify_identity_record(&r.id_pub_key, r.version, r.name.as_bytes(), &r.sig),
                Ok(me.node_id())
            );
            let got = book.accept(&policy, &r.id_pub_key, r.version, r.name.as_bytes(), &r.sig);
            if me.node_id() == id_b.node_id() {
                assert_eq!(got, Err(shoal_proto::crypto::RecordDrop::Own));
            } else {
                assert_eq!(got, Ok(me.node_id()));
                // A replay of the same version is stale.
                let again =
                    book.accept(&policy, &r.id_pub_key, r.version, r.name.as_bytes(), &r.sig);
                assert_eq!(again, Err(shoal_proto::crypto::RecordDrop::Stale));
            }
        }
    }
    assert_eq!(seen, 4, "two records from each side in V6");
    assert_eq!(book.get(&id_a.node_id()).map(|k| &*k.name), Some("node-A"));
}
