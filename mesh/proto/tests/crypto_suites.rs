//! The record suite of a secured link: AES-256-GCM exactly when both Shoal Hellos offered it,
//! ChaCha20-Poly1305 otherwise; an offer changed on the way fails the AuthConfirm exchange,
//! offers stripped from both Hellos leave the link on ChaCha20-Poly1305; and the vectors of
//! `mesh/proto/protocol/aes-256-gcm.md`, read from that file.

use std::sync::Arc;

use shoal_proto::crypto::{
    Established, Handshake, HandshakeError, Opened, PskKeys, RecordOpener, RecordSuite,
    RecordSuitePolicy, SecureContext,
};
use shoal_proto::wire::{Features, Hello, ShoalExtension};
use shoal_proto::PeerId;

const GROUP: &str = "suite-group";

fn ctx(policy: RecordSuitePolicy) -> SecureContext {
    SecureContext::new(PskKeys::derive(b"k").unwrap(), GROUP.as_bytes())
        .unwrap()
        .with_record_suite(policy)
}

const AES: RecordSuitePolicy = RecordSuitePolicy::Aes256Gcm;
const CHACHA: RecordSuitePolicy = RecordSuitePolicy::ChaCha20Poly1305;

/// A Shoal node's Hello (with the extension block), or a multimaster node's (without).
fn hello(hs: &mut Handshake, node_byte: u8, shoal: bool) -> Hello {
    let mut h = Hello {
        node_id: PeerId([node_byte; 16]),
        protocol_version: 1,
        tcp_listen_port: 4000,
        group_name: GROUP.into(),
        nonce: 7,
        eph_pub_key: None,
        identity: None,
        shoal: shoal.then(ShoalExtension::current),
    };
    hs.fill_hello(&mut h);
    h
}

type Outcome = (
    Result<Established, HandshakeError>,
    Result<Established, HandshakeError>,
);

/// A and B (Shoal nodes unless `b_shoal` is false) exchange Hellos and AuthConfirms;
/// `to_a` changes B's Hello as A receives it, `to_b` A's Hello as B receives it.
fn run(
    a: RecordSuitePolicy,
    b: RecordSuitePolicy,
    b_shoal: bool,
    to_a: impl FnOnce(&mut Hello),
    to_b: impl FnOnce(&mut Hello),
) -> Outcome {
    let mut ha = Handshake::new(Arc::new(ctx(a)), &mut rand::thread_rng());
    let mut hb = Handshake::new(Arc::new(ctx(b)), &mut rand::thread_rng());
    let mut hello_a = hello(&mut ha, 0xa1, true);
    let mut hello_b = hello(&mut hb, 0xb2, b_shoal);
    to_a(&mut hello_b);
    to_b(&mut hello_a);
    let conf_a = ha.on_peer_hello(&hello_b).unwrap();
    let conf_b = hb.on_peer_hello(&hello_a).unwrap();
    (
        ha.on_peer_auth_confirm(&conf_b),
        hb.on_peer_auth_confirm(&conf_a),
    )
}

fn untouched(_: &mut Hello) {}

fn set_features(h: &mut Hello, f: impl FnOnce(u64) -> u64) {
    let ext = h.shoal.as_mut().expect("a Shoal Hello");
    ext.features = Features(f(ext.features.0));
}

fn strip_offer(h: &mut Hello) {
    set_features(h, |f| f & !Features::AES_GCM_RECORDS.0);
}

fn add_offer(h: &mut Hello) {
    set_features(h, |f| f | Features::AES_GCM_RECORDS.0);
}

/// Both sides established on `suite`, and records flow both ways.
fn assert_link(o: Outcome, suite: RecordSuite) {
    let (mut a, mut b) = (o.0.expect("A established"), o.1.expect("B established"));
    for e in [&a, &b] {
        assert_eq!(e.suite, suite);
        assert_eq!(e.sealer.suite(), suite);
        assert_eq!(e.opener.suite(), suite);
    }
    for (tx, rx) in [
        (&mut a.sealer, &mut b.opener),
        (&mut b.sealer, &mut a.opener),
    ] {
        for n in 0..3u8 {
            let mut buf = Vec::new();
            tx.seal_frame(&mut buf, &[n; 100]).unwrap();
            match rx.open_in_place(&mut buf).unwrap() {
                Opened::Record { plaintext, .. } => assert_eq!(&buf[plaintext], &[n; 100]),
                o => panic!("{o:?}"),
            }
        }
    }
}

fn assert_refused(o: Outcome) {
    assert_eq!(o.0.err(), Some(HandshakeError::BadTag), "A refuses B's tag");
    assert_eq!(o.1.err(), Some(HandshakeError::BadTag), "B refuses A's tag");
}

#[test]
fn two_offers_make_an_aes_link() {
    assert_link(
        run(AES, AES, true, untouched, untouched),
        RecordSuite::Aes256Gcm,
    );
}

#[test]
fn one_offer_or_a_multimaster_peer_makes_a_chacha_link() {
    for (a, b) in [(AES, CHACHA), (CHACHA, AES), (CHACHA, CHACHA)] {
        assert_link(
            run(a, b, true, untouched, untouched),
            RecordSuite::ChaCha20Poly1305,
        );
    }
    // B speaks multimaster v1: no extension block, so nothing to offer with.
    assert_link(
        run(AES, AES, false, untouched, untouched),
        RecordSuite::ChaCha20Poly1305,
    );
}

#[test]
fn a_chacha_link_between_shoal_nodes_keeps_crypto_md_keys() {
    // A ChaCha link opens with secured.md's keys whatever the extension blocks say, so it is
    // the multimaster link it always was; an AES link does not.
    for (policy, suite) in [
        (CHACHA, RecordSuite::ChaCha20Poly1305),
        (AES, RecordSuite::Aes256Gcm),
    ] {
        let mut ha = Handshake::with_ephemeral_secret(Arc::new(ctx(policy)), [1; 32]);
        let mut hb = Handshake::with_ephemeral_secret(Arc::new(ctx(policy)), [2; 32]);
        let (hello_a, hello_b) = (hello(&mut ha, 1, true), hello(&mut hb, 2, true));
        let ca = ha.on_peer_hello(&hello_b).unwrap();
        let cb = hb.on_peer_hello(&hello_a).unwrap();
        let mut a = ha.on_peer_auth_confirm(&cb).unwrap();
        hb.on_peer_auth_confirm(&ca).unwrap();
        assert_eq!(a.suite, suite);

        let dh = x25519_dalek::StaticSecret::from([1; 32])
            .diffie_hellman(&x25519_dalek::PublicKey::from(*hb.eph_public()));
        let keys = shoal_proto::crypto::SessionKeys::derive(
            &PskKeys::derive(b"k").unwrap(),
            dh.as_bytes(),
            ha.eph_public(),
            hb.eph_public(),
            GROUP.as_bytes(),
        );
        let (tx, _) = keys.directional(ha.eph_public());
        assert_eq!(
            ca.tag == keys.tag(ha.eph_public()),
            suite == RecordSuite::ChaCha20Poly1305
        );
        let mut buf = Vec::new();
        a.sealer.seal_frame(&mut buf, b"frame").unwrap();
        let opened = RecordOpener::new(tx, 1 << 20).open_in_place(&mut buf);
        assert_eq!(opened.is_ok(), suite == RecordSuite::ChaCha20Poly1305);
    }
}

#[test]
fn a_tampered_offer_fails_the_handshake() {
    // Both offer; another feature bit of B's block changed on the way to A.
    assert_refused(run(
        AES,
        AES,
        true,
        |h| set_features(h, |f| f ^ Features::SIGNED_RECORDS.0),
        untouched,
    ));
    // Both offer; a tail appended to A's block on the way to B.
    assert_refused(run(AES, AES, true, untouched, |h| {
        let ext = h.shoal.take().unwrap();
        h.shoal = Some(ext.with_tail(&b"x"[..]));
    }));
    // Only A offers; an offer forged into B's Hello: A would go AES, B stays ChaCha.
    assert_refused(run(AES, CHACHA, true, add_offer, untouched));
    // Both offer; B's offer stripped on the way to A only: A stays ChaCha, B goes AES.
    assert_refused(run(AES, AES, true, strip_offer, untouched));
}

#[test]
fn offers_stripped_both_ways_leave_chacha() {
    assert_link(
        run(AES, AES, true, strip_offer, strip_offer),
        RecordSuite::ChaCha20Poly1305,
    );
    // The whole extension block stripped both ways: two multimaster-looking Hellos.
    assert_link(
        run(AES, AES, true, |h| h.shoal = None, |h| h.shoal = None),
        RecordSuite::ChaCha20Poly1305,
    );
}

#[test]
fn the_hello_offers_exactly_what_the_context_says() {
    for (policy, offered) in [(AES, true), (CHACHA, false)] {
        let mut hs = Handshake::new(Arc::new(ctx(policy)), &mut rand::thread_rng());
        let mut h = hello(&mut hs, 1, true);
        // A caller's stale bit is overwritten too.
        add_offer(&mut h);
        hs.fill_hello(&mut h);
        let ext = h.shoal.unwrap();
        assert_eq!(ext.features.contains(Features::AES_GCM_RECORDS), offered);
        assert!(ext.features.contains(Features::SUPPORTED));
    }
    // The C++ library's behaviour unless told: a context without a suite setting offers none.
    let plain = SecureContext::new(PskKeys::derive(b"k").unwrap(), b"g").unwrap();
    assert!(!plain.offers_aes());
}

/// `name = hex` lines of protocol/aes-256-gcm.md's vector block.
fn doc_vectors() -> std::collections::HashMap<&'static str, Vec<u8>> {
    let doc = include_str!("../protocol/aes-256-gcm.md");
    let block = doc
        .split("## Test vectors")
        .nth(1)
        .and_then(|s| s.split("```").nth(1))
        .expect("the vector block");
    block
        .lines()
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| (k.trim(), hex::decode(v.trim()).expect("hex")))
        .collect()
}

#[test]
fn the_protocol_notes_vectors_are_reproduced() {
    let v = doc_vectors();
    assert_eq!(v.len(), 15, "every vector is read");
    let ctx = |p| {
        Arc::new(
            SecureContext::new(PskKeys::derive(b"test-psk").unwrap(), b"vector-group")
                .unwrap()
                .with_record_suite(p),
        )
    };
    let sk_a: [u8; 32] = std::array::from_fn(|i| i as u8);
    let sk_b: [u8; 32] = std::array::from_fn(|i| 0x20 + i as u8);
    let mut ha = Handshake::with_ephemeral_secret(ctx(AES), sk_a);
    let mut hb = Handshake::with_ephemeral_secret(ctx(AES), sk_b);
    let hello_a = hello(&mut ha, 0xa1, true);
    let mut hello_b = hello(&mut hb, 0xb2, false);
    // B: a later extension version with a tail, its offer set by the handshake.
    hello_b.shoal = Some(ShoalExtension::new(2, Features::SUPPORTED).with_tail(&[0xbe, 0xef][..]));
    hb.fill_hello(&mut hello_b);
    assert_eq!(hello_a.shoal.as_ref().unwrap().to_bytes(), v["ext_A"]);
    assert_eq!(hello_b.shoal.as_ref().unwrap().to_bytes(), v["ext_B"]);
    assert_eq!(&ha.eph_public()[..], &v["eph_pk_A"][..]);
    assert_eq!(&hb.eph_public()[..], &v["eph_pk_B"][..]);

    // The key schedule, step by step.
    let dh = x25519_dalek::StaticSecret::from(sk_a)
        .diffie_hellman(&x25519_dalek::PublicKey::from(*hb.eph_public()));
    assert_eq!(&dh.as_bytes()[..], &v["dh"][..]);
    let keys = shoal_proto::crypto::SessionKeys::derive(
        &PskKeys::derive(b"test-psk").unwrap(),
        dh.as_bytes(),
        ha.eph_public(),
        hb.eph_public(),
        b"vector-group",
    );
    assert_eq!(&keys.master()[..], &v["master"][..]);
    // B's key is lo, so T = B's block first.
    let t = &v["T"];
    let (len_lo, rest) = t.split_at(4);
    let (ext_lo, rest) = rest.split_at(u32::from_be_bytes(len_lo.try_into().unwrap()) as usize);
    let ext_hi = &rest[4..];
    assert_eq!((ext_lo, ext_hi), (&v["ext_B"][..], &v["ext_A"][..]));
    let aes = keys.aes_256_gcm(ext_lo, ext_hi);
    assert_eq!([&aes.ka()[..], &aes.kb()[..]].concat(), v["kA||kB"]);
    assert_eq!(&aes.confirm_key()[..], &v["confirmKey"][..]);
    assert_eq!(&aes.directional(ha.eph_public()).0[..], &v["tx_A"][..]);
    assert_eq!(&aes.directional(hb.eph_public()).0[..], &v["tx_B"][..]);

    // The same through the handshake and the records.
    let conf_a = ha.on_peer_hello(&hello_b).unwrap();
    let conf_b = hb.on_peer_hello(&hello_a).unwrap();
    assert_eq!(&conf_a.tag[..], &v["tag_A"][..]);
    assert_eq!(&conf_b.tag[..], &v["tag_B"][..]);
    let mut a = ha.on_peer_auth_confirm(&conf_b).unwrap();
    let mut b = hb.on_peer_auth_confirm(&conf_a).unwrap();
    assert_eq!(
        (a.suite, b.suite),
        (RecordSuite::Aes256Gcm, RecordSuite::Aes256Gcm)
    );
    let membership = hex::decode(
        "0000002b060102030405060708090a0b0c0d0e0f10000001a228303e2b0001f0\
         e0d0c0b0a090807060504030201000",
    )
    .unwrap();
    for (name, frame) in [
        ("record_A0", &membership[..]),
        ("record_A1", &[0, 0, 0, 1, 3]),
    ] {
        let mut rec = Vec::new();
        a.sealer.seal_frame(&mut rec, frame).unwrap();
        assert_eq!(rec, v[name], "{name}");
        match b.opener.open_in_place(&mut rec).unwrap() {
            Opened::Record { plaintext, .. } => assert_eq!(&rec[plaintext], frame),
            o => panic!("{o:?}"),
        }
    }
}
