//! Behaviour of the secured-mesh cryptography beyond the captured vectors: failures are typed
//! and nothing that should fail can pass.
//!
//! Length: one short test per failure the handshake, the records and the identity book must
//! catch, all on the same few helpers; split by part, each file would repeat them.

use std::sync::Arc;

use bytes::BytesMut;
use shoal_proto::crypto::{
    sign_identity_record, Established, Handshake, HandshakeError, Identity, IdentityBook,
    IdentityError, IdentityPolicy, IdentityReject, OpenError, Opened, PskError, PskKeys,
    RecordDrop, RecordOpener, RecordReader, RecordSealer, SealError, SecureContext,
};
use shoal_proto::wire::{take_frame, AuthConfirm, Frame, Hello, MAX_MESSAGE_BYTES};
use shoal_proto::PeerId;

const GROUP: &str = "test-group";

fn rng() -> rand::rngs::ThreadRng {
    rand::thread_rng()
}

fn seed(b: u8) -> [u8; 32] {
    [b; 32]
}

fn identity(b: u8, name: &str) -> Identity {
    Identity::from_seed(&seed(b), name).unwrap()
}

fn ctx(psk: &str) -> SecureContext {
    SecureContext::new(PskKeys::derive(psk.as_bytes()).unwrap(), GROUP.as_bytes()).unwrap()
}

fn hello(hs: &mut Handshake, node_byte: u8) -> Hello {
    let mut h = Hello {
        node_id: PeerId([node_byte; 16]),
        protocol_version: 1,
        tcp_listen_port: 4000,
        group_name: GROUP.into(),
        nonce: 7,
        eph_pub_key: None,
        identity: None,
        shoal: None,
    };
    hs.fill_hello(&mut h);
    h
}

struct Pair {
    a: Handshake,
    b: Handshake,
    hello_a: Hello,
    hello_b: Hello,
}

fn pair(ca: SecureContext, cb: SecureContext) -> Pair {
    let mut a = Handshake::new(Arc::new(ca), &mut rng());
    let mut b = Handshake::new(Arc::new(cb), &mut rng());
    let (hello_a, hello_b) = (hello(&mut a, 0xa1), hello(&mut b, 0xb2));
    Pair {
        a,
        b,
        hello_a,
        hello_b,
    }
}

type Outcome = (
    Result<Established, HandshakeError>,
    Result<Established, HandshakeError>,
);

/// Both sides exchange Hellos and AuthConfirms; `tamper` may change B's Hello and B's AuthConfirm
/// as A receives them.
fn run(mut p: Pair, tamper: impl FnOnce(&mut Hello, &mut Option<AuthConfirm>)) -> Outcome {
    let mut hello_b = p.hello_b.clone();
    let mut slot = None;
    tamper(&mut hello_b, &mut slot);
    let conf_a = p.a.on_peer_hello(&hello_b);
    let conf_b = p.b.on_peer_hello(&p.hello_a);
    let (conf_a, conf_b) = match (conf_a, conf_b) {
        (Ok(x), Ok(y)) => (x, y),
        // A side whose peer dropped never completes; it is reported as an error too.
        (x, y) => {
            let never = |r: Result<AuthConfirm, HandshakeError>| {
                r.and(Err(HandshakeError::UnexpectedAuthConfirm))
            };
            return (never(x), never(y));
        }
    };
    // A stored replacement with an all-zero tag keeps the real tag, so tests can change only
    // the signature.
    let conf_b_seen = match slot {
        None => conf_b,
        Some(mut f) => {
            if f.tag == [0; 32] {
                f.tag = conf_b.tag;
            }
            f
        }
    };
    (
        p.a.on_peer_auth_confirm(&conf_b_seen),
        p.b.on_peer_auth_confirm(&conf_a),
    )
}

fn roundtrip(a: &mut Established, b: &mut Established) {
    for (tx, rx) in [
        (&mut a.sealer, &mut b.opener),
        (&mut b.sealer, &mut a.opener),
    ] {
        let mut buf = Vec::new();
        tx.seal_frame(&mut buf, b"\x00\x00\x00\x01\x03").unwrap();
        match rx.open_in_place(&mut buf).unwrap() {
            Opened::Record { plaintext, .. } => {
                assert_eq!(&buf[plaintext], b"\x00\x00\x00\x01\x03")
            }
            o => panic!("{o:?}"),
        }
    }
}

// ------------------------------------------------------------------------------- handshake

#[test]
fn psk_only_handshake_succeeds() {
    let (a, b) = run(pair(ctx("k1"), ctx("k1")), |_, _| {});
    let (mut a, mut b) = (a.unwrap(), b.unwrap());
    assert!(a.peer.is_none() && b.peer.is_none());
    roundtrip(&mut a, &mut b);
}

#[test]
fn wrong_psk_fails_on_tag() {
    let (a, b) = run(pair(ctx("k1"), ctx("k2")), |_, _| {});
    assert_eq!(a.unwrap_err(), HandshakeError::BadTag);
    assert_eq!(b.unwrap_err(), HandshakeError::BadTag);
}

#[test]
fn psk_and_identity_handshake_succeeds_with_labels() {
    let (ia, ib) = (identity(1, "alpha"), identity(2, "beta"));
    let (ka, kb) = (*ia.public_key(), *ib.public_key());
    let ca = ctx("k").with_identity(ia, IdentityPolicy::allowlist([(kb, "B's label")], true));
    let cb = ctx("k").with_identity(ib, IdentityPolicy::allowlist([(ka, "A's label")], true));
    let p = pair(ca, cb);
    assert_eq!(
        p.hello_a.node_id,
        shoal_proto::crypto::node_id_from_key(&ka)
    );
    let (a, b) = run(p, |_, _| {});
    let (mut a, mut b) = (a.unwrap(), b.unwrap());
    let pa = a.peer.clone().unwrap();
    assert_eq!(
        (pa.key, &*pa.name, pa.label.as_deref()),
        (kb, "beta", Some("B's label"))
    );
    assert_eq!(b.peer.as_ref().unwrap().label.as_deref(), Some("A's label"));
    roundtrip(&mut a, &mut b);
}

#[test]
fn low_order_ephemeral_keys_rejected() {
    // Small-order Curve25519 u-coordinates (and non-canonical encodings of them): clamping makes
    // the scalar a multiple of the cofactor, so X25519 gives all zeros.
    let mut p1 = [0u8; 32];
    p1[0] = 1;
    let order8 =
        hex::decode("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800").unwrap();
    let order8b =
        hex::decode("5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157").unwrap();
    let p_minus_1 =
        hex::decode("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f").unwrap();
    let p =
        hex::decode("edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f").unwrap();
    for bad in [vec![0u8; 32], p1.to_vec(), order8, order8b, p_minus_1, p] {
        let key: [u8; 32] = bad.try_into().unwrap();
        let (a, _) = run(pair(ctx("k"), ctx("k")), |h, _| h.eph_pub_key = Some(key));
        assert_eq!(
            a.unwrap_err(),
            HandshakeError::LowOrderKey,
            "{}",
            hex::encode(key)
        );
    }
}

#[test]
fn plaintext_peer_rejected() {
    let (a, _) = run(pair(ctx("k"), ctx("k")), |h, _| h.eph_pub_key = None);
    assert_eq!(a.unwrap_err(), HandshakeError::PeerNotSecured);
}

fn id_pair(policy_a: IdentityPolicy) -> Pair {
    let ca = ctx("k").with_identity(identity(1, "alpha"), policy_a);
    let cb = ctx("k").with_identity(identity(2, "beta"), IdentityPolicy::open(false));
    pair(ca, cb)
}

#[test]
fn node_id_not_hash_of_key_rejected() {
    let (a, _) = run(id_pair(IdentityPolicy::open(false)), |h, _| {
        h.node_id = PeerId([9; 16])
    });
    assert_eq!(
        a.unwrap_err(),
        HandshakeError::Identity(IdentityReject::NodeIdMismatch)
    );
}

#[test]
fn bad_or_missing_signature_rejected() {
    let (a, _) = run(id_pair(IdentityPolicy::open(false)), |_, slot| {
        *slot = Some(AuthConfirm {
            tag: [0; 32],
            sig: Some([0x55; 64]),
        });
    });
    assert!(matches!(
        a.unwrap_err(),
        HandshakeError::Identity(IdentityReject::BadSignature | IdentityReject::BadKey)
    ));
    let (a, _) = run(id_pair(IdentityPolicy::open(false)), |_, slot| {
        *slot = Some(AuthConfirm {
            tag: [0; 32],
            sig: None,
        });
    });
    assert_eq!(
        a.unwrap_err(),
        HandshakeError::Identity(IdentityReject::MissingSignature)
    );
    // The name shown in the Hello is what the signature must cover.
    let (a, _) = run(id_pair(IdentityPolicy::open(false)), |h, _| {
        h.identity.as_mut().unwrap().node_name = "mallory".into();
    });
    assert_eq!(
        a.unwrap_err(),
        HandshakeError::Identity(IdentityReject::BadSignature)
    );
}

#[test]
fn tag_is_checked_before_identity() {
    // A wrong tag with a bogus identity reports the tag (the protocol's order, `secured.md`).
    let (a, _) = run(id_pair(IdentityPolicy::open(false)), |h, slot| {
        h.node_id = PeerId([9; 16]);
        *slot = Some(AuthConfirm {
            tag: [1; 32],
            sig: None,
        });
    });
    assert_eq!(a.unwrap_err(), HandshakeError::BadTag);
}

#[test]
fn unlisted_and_revoked_keys_rejected() {
    let other = *identity(3, "gamma").public_key();
    let beta = *identity(2, "beta").public_key();
    let (a, _) = run(
        id_pair(IdentityPolicy::allowlist([(other, "gamma")], false)),
        |_, _| {},
    );
    assert_eq!(
        a.unwrap_err(),
        HandshakeError::Identity(IdentityReject::Untrusted)
    );

    let mut policy = IdentityPolicy::allowlist([(beta, "beta")], false);
    let (a, _) = run(id_pair(policy.clone()), |_, _| {});
    assert!(a.is_ok());
    // Revoking the only listed key leaves an empty allowlist, which admits nobody.
    assert!(policy.revoke(&beta));
    assert_eq!(policy.admit(&beta), Err(IdentityReject::Untrusted));
    let (a, _) = run(id_pair(policy), |_, _| {});
    assert_eq!(
        a.unwrap_err(),
        HandshakeError::Identity(IdentityReject::Untrusted)
    );
}

#[test]
fn identityless_peer_rejected_when_required() {
    let ca = ctx("k").with_identity(identity(1, "alpha"), IdentityPolicy::open(true));
    let (a, b) = run(pair(ca, ctx("k")), |_, _| {});
    assert_eq!(
        a.unwrap_err(),
        HandshakeError::Identity(IdentityReject::Missing)
    );
    assert!(b.is_err(), "B's side never got A's AuthConfirm (A dropped)");

    // Not required: no signature is exchanged and the peer stays unverified.
    let ca = ctx("k").with_identity(identity(1, "alpha"), IdentityPolicy::open(false));
    let mut p = pair(ca, ctx("k"));
    let conf_a = p.a.on_peer_hello(&p.hello_b).unwrap();
    let conf_b = p.b.on_peer_hello(&p.hello_a).unwrap();
    assert!(conf_a.sig.is_none() && conf_b.sig.is_none());
    let a = p.a.on_peer_auth_confirm(&conf_b).unwrap();
    assert!(a.peer.is_none());
    p.b.on_peer_auth_confirm(&conf_a).unwrap();
}

#[test]
fn messages_out_of_state_rejected() {
    let mut p = pair(ctx("k"), ctx("k"));
    let early = AuthConfirm {
        tag: [0; 32],
        sig: None,
    };
    assert_eq!(
        p.a.on_peer_auth_confirm(&early).unwrap_err(),
        HandshakeError::UnexpectedAuthConfirm
    );
    let conf = p.b.on_peer_hello(&p.hello_a).unwrap();
    p.a.on_peer_hello(&p.hello_b).unwrap();
    assert_eq!(
        p.a.on_peer_hello(&p.hello_b).unwrap_err(),
        HandshakeError::UnexpectedHello
    );
    p.a.on_peer_auth_confirm(&conf).unwrap();
    assert_eq!(
        p.a.on_peer_auth_confirm(&conf).unwrap_err(),
        HandshakeError::UnexpectedAuthConfirm
    );
}

// ------------------------------------------------------------------------------- records

fn keyed_pair(max: usize) -> (RecordSealer, RecordOpener) {
    (
        RecordSealer::new(&[7; 32], max),
        RecordOpener::new(&[7; 32], max),
    )
}

fn sealed(sealer: &mut RecordSealer, pt: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    sealer.seal_frame(&mut v, pt).unwrap();
    v
}

#[test]
fn tampered_records_rejected() {
    let (mut s, _) = keyed_pair(1 << 20);
    let rec = sealed(&mut s, b"\x00\x00\x00\x05\x04abcd");
    for i in 0..rec.len() {
        for bit in [0x01u8, 0x80] {
            let mut t = rec.clone();
            t[i] ^= bit;
            let mut o = RecordOpener::new(&[7; 32], 1 << 20);
            let r = o.open_in_place(&mut t);
            assert!(
                matches!(
                    r,
                    Err(OpenError::AuthFailed
                        | OpenError::TooShort(_)
                        | OpenError::TooLarge { .. })
                        | Ok(Opened::NeedMore(_))
                ),
                "byte {i} bit {bit:#x}: {r:?}"
            );
            assert_eq!(o.counter(), 0, "no counter advance on failure");
        }
    }
}

#[test]
fn reordered_replayed_and_truncated_records_rejected() {
    let (mut s, mut o) = keyed_pair(1 << 20);
    let r0 = sealed(&mut s, b"first");
    let r1 = sealed(&mut s, b"second");
    // Reordered.
    assert_eq!(o.open_in_place(&mut r1.clone()), Err(OpenError::AuthFailed));
    assert_eq!(
        o.open_in_place(&mut r0.clone()),
        Err(OpenError::Poisoned),
        "a failed stream stays failed"
    );
    // Replayed.
    let mut o = RecordOpener::new(&[7; 32], 1 << 20);
    assert!(matches!(
        o.open_in_place(&mut r0.clone()),
        Ok(Opened::Record { .. })
    ));
    assert_eq!(o.open_in_place(&mut r0.clone()), Err(OpenError::AuthFailed));
    // Wrong key.
    let mut o = RecordOpener::new(&[8; 32], 1 << 20);
    assert_eq!(o.open_in_place(&mut r0.clone()), Err(OpenError::AuthFailed));
    // Truncated: NeedMore while the stream lasts, a typed error when it ends.
    let mut o = RecordOpener::new(&[7; 32], 1 << 20);
    let mut cut = r0[..r0.len() - 1].to_vec();
    assert_eq!(o.open_in_place(&mut cut), Ok(Opened::NeedMore(1)));
    assert_eq!(o.finish(&cut), Err(OpenError::Truncated(cut.len())));
    let mut reader = RecordReader::new(RecordOpener::new(&[7; 32], 1 << 20), &r0[..10]);
    assert_eq!(reader.decrypt(), Ok(0));
    assert_eq!(reader.finish(), Err(OpenError::Truncated(10)));
    // A shortened length field breaks the tag.
    let mut short = r0.clone();
    short[3] -= 1;
    let mut o = RecordOpener::new(&[7; 32], 1 << 20);
    assert_eq!(o.open_in_place(&mut short), Err(OpenError::AuthFailed));
}

#[test]
fn record_length_bounds_checked_from_header() {
    let mut o = RecordOpener::new(&[7; 32], 100);
    assert_eq!(
        o.open_in_place(&mut [0, 0, 0, 15]),
        Err(OpenError::TooShort(15))
    );
    let mut o = RecordOpener::new(&[7; 32], 100);
    assert_eq!(
        o.open_in_place(&mut [0, 0, 0, 165]),
        Err(OpenError::TooLarge { len: 165, max: 164 })
    );
    // The largest allowed record round-trips; one byte more cannot be sealed.
    let (mut s, mut o) = keyed_pair(100);
    assert_eq!(s.max_plaintext(), 148);
    let mut rec = sealed(&mut s, &[1; 148]);
    assert_eq!(rec.len(), 4 + 164);
    assert!(matches!(
        o.open_in_place(&mut rec),
        Ok(Opened::Record { .. })
    ));
    let mut v = vec![9u8; 3];
    assert_eq!(
        s.seal_frame(&mut v, &[1; 149]),
        Err(SealError::TooLarge { len: 149, max: 148 })
    );
    assert_eq!(v, [9, 9, 9], "failed seal leaves the buffer");
    assert_eq!(s.counter(), 1, "failed seal consumes no counter");
    assert_eq!(
        s.seal_in_place(&mut vec![0u8; 2], 0),
        Err(SealError::MissingHeader)
    );
}

#[test]
fn uncommitted_record_consumes_no_counter() {
    let (mut s, mut o) = keyed_pair(1 << 20);
    let mut out = BytesMut::from(&b"prefix"[..]);
    {
        let mut rec = s.begin(&mut out);
        rec.try_push(b"dropped by a queue policy").unwrap();
        // Not sealed: dropped.
    }
    assert_eq!(&out[..], b"prefix");
    assert_eq!(s.counter(), 0);
    let mut rec = s.begin(&mut out);
    rec.try_push(b"kept").unwrap();
    rec.seal().unwrap();
    assert_eq!(s.counter(), 1);
    let mut body = out.split_off(6);
    match o.open_in_place(&mut body).unwrap() {
        Opened::Record { plaintext, .. } => assert_eq!(&body[plaintext], b"kept"),
        x => panic!("{x:?}"),
    }
}

#[test]
fn frames_batched_and_split_across_records() {
    let frames: Vec<Vec<u8>> = (0..5u8)
        .map(|i| {
            let mut f = Vec::new();
            Frame::Data(shoal_proto::wire::Data {
                src: PeerId([1; 16]),
                dst: PeerId::ZERO,
                msg_id: shoal_proto::MsgId::new(&PeerId([1; 16]), i as u64),
                ttl: 8,
                payload: vec![i; 100 * i as usize].into(),
            })
            .encode(&mut f)
            .unwrap();
            f
        })
        .collect();
    let all: Vec<u8> = frames.concat();
    let (mut s, o) = keyed_pair(1 << 20);
    let mut stream = Vec::new();
    // Record 0: frames 0..3 batched; records 1 and 2: the rest cut mid-frame.
    let cut = frames[..3].iter().map(Vec::len).sum::<usize>();
    let mid = cut + frames[3].len() / 2;
    let mut rec = s.begin(&mut stream);
    for f in &frames[..3] {
        rec.try_push(f).unwrap();
    }
    rec.seal().unwrap();
    s.seal_frame(&mut stream, &all[cut..mid]).unwrap();
    s.seal_frame(&mut stream, &all[mid..]).unwrap();
    assert_eq!(s.counter(), 3);

    let mut reader = RecordReader::new(o, &[]);
    let mut got = Vec::new();
    for chunk in stream.chunks(33) {
        reader.push(chunk);
        reader.decrypt().unwrap();
        loop {
            let mut view = BytesMut::from(reader.plaintext());
            match take_frame(&mut view, MAX_MESSAGE_BYTES).unwrap() {
                Some(f) => {
                    let n = f.encoded_len();
                    let raw = reader.split_plaintext(n);
                    got.push(raw.to_vec());
                }
                None => break,
            }
        }
    }
    reader.finish().unwrap();
    assert_eq!(got, frames);
    assert!(reader.plaintext().is_empty());
    assert_eq!(reader.pending_ciphertext(), 0);
}

// ------------------------------------------------------------------------------- identity

#[test]
fn identity_name_longer_than_a_wire_str_is_refused() {
    assert!(matches!(
        Identity::from_seed(&seed(1), &"x".repeat(256)),
        Err(IdentityError::NameTooLong(256))
    ));
}

#[test]
fn identity_book_rules() {
    let (me, a, c) = (identity(1, "me"), identity(2, "a"), identity(3, "c"));
    let policy =
        IdentityPolicy::allowlist([(*a.public_key(), "a"), (*me.public_key(), "me")], false);
    let mut book = IdentityBook::new(me.node_id(), 1);
    let rec = |id: &Identity, v: u64| {
        (
            *id.public_key(),
            v,
            id.name().to_owned(),
            sign_identity_record(id, v),
        )
    };
    let accept = |book: &mut IdentityBook, r: &([u8; 32], u64, String, [u8; 64])| {
        book.accept(&policy, &r.0, r.1, r.2.as_bytes(), &r.3)
    };
    assert_eq!(accept(&mut book, &rec(&me, 5)), Err(RecordDrop::Own));
    assert_eq!(accept(&mut book, &rec(&c, 5)), Err(RecordDrop::Untrusted));
    let mut forged = rec(&a, 9);
    forged.2 = "evil".into();
    assert_eq!(accept(&mut book, &forged), Err(RecordDrop::BadSignature));
    assert_eq!(accept(&mut book, &rec(&a, 5)), Ok(a.node_id()));
    assert_eq!(accept(&mut book, &rec(&a, 4)), Err(RecordDrop::Stale));
    assert_eq!(accept(&mut book, &rec(&a, 6)), Ok(a.node_id()));
    assert_eq!(book.get(&a.node_id()).unwrap().version, 6);
    let open = IdentityPolicy::open(false);
    let r = rec(&c, 1);
    assert_eq!(
        book.accept(&open, &r.0, r.1, r.2.as_bytes(), &r.3),
        Err(RecordDrop::Full)
    );
    assert_eq!(book.full_drops, 1);
}

#[test]
fn trusted_key_hex_parsed() {
    let id = identity(4, "d");
    let text = hex::encode(id.public_key());
    assert_eq!(
        shoal_proto::crypto::parse_public_key_hex(&text).unwrap(),
        *id.public_key()
    );
    for bad in ["", "zz", &text[..62]] {
        assert!(matches!(
            shoal_proto::crypto::parse_public_key_hex(bad),
            Err(IdentityError::BadPublicKey)
        ));
    }
}

#[test]
fn empty_psk_is_plaintext() {
    assert_eq!(PskKeys::derive(b"").unwrap_err(), PskError::Empty);
}

// ------------------------------------------------------------------------------- throughput

/// Nanoseconds this thread has spent on a CPU (Linux schedstat), so the figure holds on a shared,
/// oversubscribed machine; falls back to wall time elsewhere.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Not a test of speed (no assertion): prints seal+open throughput per core.
/// `cargo test -p shoal-mesh --release --test crypto_behaviour -- --ignored --nocapture`
#[test]
#[ignore]
fn seal_open_throughput() {
    for size in [64usize, 1024, 64 * 1024] {
        let (mut s, mut o) = keyed_pair(MAX_MESSAGE_BYTES as usize);
        let pt = vec![0xabu8; size];
        let mut buf = Vec::with_capacity(size + 20);
        let iters = (64usize << 20) / size;
        let cpu0 = thread_cpu_ns();
        let wall = std::time::Instant::now();
        for _ in 0..iters {
            buf.clear();
            s.seal_frame(&mut buf, &pt).unwrap();
            match o.open_in_place(&mut buf).unwrap() {
                Opened::Record { .. } => {}
                x => panic!("{x:?}"),
            }
        }
        let wall = wall.elapsed().as_secs_f64();
        let cpu = match (cpu0, thread_cpu_ns()) {
            (Some(a), Some(b)) => (b - a) as f64 / 1e9,
            _ => wall,
        };
        println!(
            "seal+open {size:>6} B: {:>8.1} MiB/s per core-second ({:>9.0} records/s; {:.2} s on cpu, {:.2} s wall)",
            (iters * size) as f64 / cpu / (1 << 20) as f64,
            iters as f64 / cpu,
            cpu,
            wall
        );
    }
}
