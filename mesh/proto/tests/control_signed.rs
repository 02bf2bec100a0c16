//! Signed records through the control core's public inputs (identity mode): the core's own
//! records go signed to peers that take them and unsigned to multimaster peers; signed
//! records are verified before anything is applied (a forgery closes its link, an untrusted
//! key is dropped, a duplicate costs no verification); unsigned records are taken only from
//! links that cannot sign about origins not known to sign. Peers are played by the test over
//! a real secured handshake (the crate's own handshake machine).
//!
//! Length: every test needs the same harness (a core with an identity, peers that connect
//! over a real handshake as Shoal or multimaster nodes, and readers of what the core sent),
//! about 200 lines; one test per rule of `control::signed` follows.

use bytes::{Bytes, BytesMut};
use rand::rngs::StdRng;
use rand::SeedableRng;
use shoal_proto::cmd::{ToControl, ToShard};
use shoal_proto::config::{ConfigError, MeshConfig};
use shoal_proto::control::{
    Action, ControlCore, ControlErrorKind, ControlEvent, ControlInit, Handshaking, Progress,
};
use shoal_proto::crypto::{
    sign_discovery, sign_membership, Handshake, Identity, IdentityPolicy, PskKeys, SecureContext,
};
use shoal_proto::wire::{
    decode_frame, DecodeStatus, Discovery, Frame, Hello, Membership, RecordSignature,
    ShoalExtension, SignedMembership, PROTOCOL_VERSION,
};
use shoal_proto::{LinkId, LinkTimers, PeerId, Role};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

const WALL: u64 = 1_700_000_000_000;
const PSK: &[u8] = b"signed-records";

fn identity(seed: u8) -> Identity {
    Identity::from_seed(&[seed; 32], &format!("n{seed}")).unwrap()
}

fn id_of(seed: u8) -> PeerId {
    identity(seed).node_id()
}

fn context(seed: u8, policy: IdentityPolicy) -> Arc<SecureContext> {
    let c = SecureContext::new(PskKeys::derive(PSK).unwrap(), b"default").unwrap();
    Arc::new(c.with_identity(identity(seed), policy))
}

/// Node 1 in identity mode, accepting any key (`require_identity` as configured).
fn core(cfg: MeshConfig, now: Instant) -> ControlCore {
    core_with(cfg, context(1, IdentityPolicy::open(true)), now)
}

fn core_with(cfg: MeshConfig, ctx: Arc<SecureContext>, now: Instant) -> ControlCore {
    ControlCore::new(
        ControlInit {
            me: id_of(1),
            cfg,
            shards: 2,
            listen_port: 7001,
            secure: Some(ctx),
            seed: [1; 32],
            epoch: now,
            listen_addrs: vec!["10.0.0.1:7001".parse().unwrap()],
        },
        now,
        WALL,
    )
}

fn cfg() -> MeshConfig {
    MeshConfig {
        scouting: false,
        psk: "x".into(),
        identity_seed_hex: hex::encode([1u8; 32]),
        ..MeshConfig::default()
    }
}

/// How the test peer presents itself.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// A Shoal node: its Hello advertises extended frames and signed records.
    Shoal,
    /// A multimaster node with an identity: no Shoal extension.
    Multimaster,
}

/// A test peer with identity `seed` completes a secured handshake with the core; its link.
fn connect(c: &mut ControlCore, seed: u8, kind: Kind, now: Instant) -> LinkId {
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, seed));
    let link = c.on_accepted(Some(ip), now, WALL).unwrap();
    let hello = Hello {
        node_id: PeerId([seed; 16]), // replaced by the identity's id
        protocol_version: PROTOCOL_VERSION,
        tcp_listen_port: 7000 + u16::from(seed),
        group_name: "default".into(),
        nonce: u64::from(seed),
        eph_pub_key: None,
        identity: None,
        shoal: (kind == Kind::Shoal).then(ShoalExtension::current),
    };
    let hs = Handshake::new(
        context(seed, IdentityPolicy::open(false)),
        &mut StdRng::seed_from_u64(u64::from(seed)),
    );
    let mut out = BytesMut::new();
    let mut peer = Handshaking::start(
        LinkId(1),
        Role::Dialer,
        hello,
        Some(hs),
        LinkTimers::from_config(&MeshConfig::default()),
        MeshConfig::default().max_message_bytes,
        None,
        now,
        &mut out,
    );
    for _ in 0..4 {
        if !out.is_empty() {
            let b = out.split().freeze();
            c.on_bytes(link, &b, now, WALL);
        }
        let to_peer = writes(&actions(c), link);
        if !to_peer.is_empty() {
            let p = peer.on_bytes(&to_peer, now, &mut out);
            assert!(!matches!(p, Progress::Failed(_)), "{p:?}");
        }
    }
    assert!(!c.is_handshaking(link), "the core finished its handshake");
    link
}

fn actions(c: &mut ControlCore) -> Vec<Action> {
    std::iter::from_fn(|| c.poll_action()).collect()
}

fn writes(acts: &[Action], link: LinkId) -> Bytes {
    let mut b = BytesMut::new();
    for a in acts {
        if let Action::Write { link: l, bytes } = a {
            if *l == link {
                b.extend_from_slice(bytes);
            }
        }
    }
    b.freeze()
}

/// Drains the outbox (answering Syncs as the shards would); the frames sent, decoded, by link.
fn sent(c: &mut ControlCore, now: Instant) -> Vec<(LinkId, Frame)> {
    let p: Vec<_> = std::iter::from_fn(|| c.poll_to_shard()).collect();
    let mut frames = Vec::new();
    for (_, cmd) in p {
        match cmd {
            ToShard::Sync(t) => c.on_shard_report(ToControl::Synced(t), now, WALL),
            ToShard::SendRaw { link, frame } => match decode_frame(&frame, u32::MAX).unwrap() {
                DecodeStatus::Complete { frame, .. } => frames.push((link, frame)),
                DecodeStatus::NeedMore { .. } => panic!("a whole frame"),
            },
            _ => {}
        }
    }
    frames
}

fn closed(c: &mut ControlCore, now: Instant, link: LinkId) -> bool {
    let p: Vec<_> = std::iter::from_fn(|| c.poll_to_shard()).collect();
    let mut yes = false;
    for (_, cmd) in p {
        match cmd {
            ToShard::Sync(t) => c.on_shard_report(ToControl::Synced(t), now, WALL),
            ToShard::Close { link: l, .. } if l == link => yes = true,
            _ => {}
        }
    }
    yes
}

fn record(origin: PeerId, version: u64, neighbours: Vec<PeerId>) -> Membership {
    let mut neighbours = neighbours;
    neighbours.sort();
    Membership {
        origin,
        version,
        neighbours,
    }
}

fn signed_by(seed: u8, r: &Membership) -> SignedMembership {
    SignedMembership {
        record: r.clone(),
        signature: sign_membership(&identity(seed), r, &mut Vec::new()),
    }
}

fn send_signed(c: &mut ControlCore, link: LinkId, m: SignedMembership, now: Instant) {
    c.on_shard_report(
        ToControl::SignedMembershipIn {
            link,
            record: Box::new(m),
        },
        now,
        WALL,
    );
}

fn send_unsigned(c: &mut ControlCore, link: LinkId, r: Membership, now: Instant) {
    c.on_shard_report(ToControl::MembershipIn { link, record: r }, now, WALL);
}

fn stored(c: &ControlCore, origin: PeerId) -> Option<Vec<PeerId>> {
    c.membership()
        .adjacency()
        .find(|(o, _)| **o == origin)
        .map(|(_, l)| l.to_vec())
}

fn verify(f: &SignedMembership) -> bool {
    let mut msg = Vec::new();
    f.record.signed_message(&mut msg);
    shoal_proto::crypto::SignerBook::new(1)
        .verify(
            &IdentityPolicy::open(false),
            &f.record.origin,
            &f.signature,
            &msg,
        )
        .is_ok()
}

#[test]
fn own_records_go_signed_to_peers_that_take_them_and_unsigned_to_multimaster_peers() {
    let now = Instant::now();
    let mut c = core(cfg(), now);
    let shoal = connect(&mut c, 2, Kind::Shoal, now);
    let mm = connect(&mut c, 3, Kind::Multimaster, now);
    let frames = sent(&mut c, now);
    let to = |l: LinkId| frames.iter().filter(move |(x, _)| *x == l).map(|(_, f)| f);
    let signed: Vec<&SignedMembership> = to(shoal)
        .filter_map(|f| match f {
            Frame::SignedMembership(m) => Some(m),
            _ => None,
        })
        .collect();
    assert!(
        !signed.is_empty(),
        "the Shoal peer gets the own record signed"
    );
    assert!(signed
        .iter()
        .all(|m| m.record.origin == id_of(1) && verify(m)));
    assert!(to(shoal).all(|f| !matches!(f, Frame::Membership(_))));
    assert!(to(mm).any(|f| matches!(f, Frame::Membership(m) if m.origin == id_of(1))));
    assert!(
        to(mm).all(|f| !matches!(f, Frame::SignedMembership(_) | Frame::Discovery(_))),
        "a multimaster peer never sees a type it does not know"
    );
    // Own Discovery frames are signed.
    c.create_endpoint(
        shoal_discovery::types::EndpointKind::Writer,
        "t",
        "T",
        [7; 16],
        shoal_discovery::qos::EndpointQos::writer_default(),
        &[],
        now,
        WALL,
    )
    .unwrap();
    let frames = sent(&mut c, now);
    let disc: Vec<&Discovery> = frames
        .iter()
        .filter_map(|(l, f)| match f {
            Frame::Discovery(d) if *l == shoal => Some(d),
            _ => None,
        })
        .collect();
    assert!(!disc.is_empty());
    for d in disc {
        let sig = d.signature().expect("signed");
        let mut msg = Vec::new();
        d.signed_message(&mut msg);
        assert!(shoal_proto::crypto::SignerBook::new(1)
            .verify(&IdentityPolicy::open(false), &id_of(1), sig, &msg)
            .is_ok());
    }
}

/// A new neighbour's catch-up (this node's announce cycle on its link only, `ttl = 1`: not
/// passed on) is signed like every own Discovery frame, and an older neighbour does not get
/// it again.
#[test]
fn a_new_neighbours_catch_up_is_signed_and_sent_to_it_only() {
    let now = Instant::now();
    let mut c = core(cfg(), now);
    let first = connect(&mut c, 2, Kind::Shoal, now);
    let mm = connect(&mut c, 3, Kind::Multimaster, now);
    sent(&mut c, now);
    c.handle_timeout(now, WALL);
    sent(&mut c, now);
    let second = connect(&mut c, 4, Kind::Shoal, now);
    sent(&mut c, now);
    assert!(c.poll_timeout() <= now, "the catch-up is due at once");
    c.handle_timeout(now, WALL);
    let frames = sent(&mut c, now);
    let disc = |l: LinkId| -> Vec<&Discovery> {
        frames
            .iter()
            .filter_map(|(x, f)| match f {
                Frame::Discovery(d) if *x == l => Some(d),
                _ => None,
            })
            .collect()
    };
    assert!(disc(first).is_empty(), "the older neighbour has it");
    assert!(disc(mm).is_empty());
    let got = disc(second);
    assert!(!got.is_empty(), "{frames:?}");
    for d in got {
        assert_eq!((d.origin, d.ttl, d.part, d.parts), (id_of(1), 1, 0, 1));
        let sig = d.signature().expect("signed");
        let mut msg = Vec::new();
        d.signed_message(&mut msg);
        assert!(shoal_proto::crypto::SignerBook::new(1)
            .verify(&IdentityPolicy::open(false), &id_of(1), sig, &msg)
            .is_ok());
    }
}

/// The live finding in identity mode: an authenticated member forging another member's
/// record. Signed with its own key (not the origin's) or a spliced signature: refused,
/// counted, and the link that carried it closed; nothing of it applied.
#[test]
fn a_members_forged_record_about_another_node_is_refused_and_closes_its_link() {
    let now = Instant::now();
    let mut c = core(cfg(), now);
    let liar = connect(&mut c, 2, Kind::Shoal, now);
    let victim = connect(&mut c, 4, Kind::Shoal, now);
    sent(&mut c, now);
    let v = id_of(4);
    // The victim's real record (lists the core).
    let real = record(v, WALL + 5, vec![id_of(1)]);
    send_signed(&mut c, victim, signed_by(4, &real), now);
    assert_eq!(c.stats().record_signatures_verified, 1);
    // A newer record about the victim, signed by the liar's own key.
    let forged = record(v, WALL + 10, vec![]);
    send_signed(&mut c, liar, signed_by(2, &forged), now);
    let s = c.stats();
    assert_eq!(
        (s.bad_record_signatures, s.record_signatures_verified),
        (1, 1)
    );
    assert!(closed(&mut c, now, liar), "the liar's link is closed");
    assert_eq!(
        stored(&c, v),
        Some(vec![id_of(1)]),
        "the victim's record stands"
    );
    // What the liar sent before its link went (queued at its shard) counts for nothing.
    let x = PeerId([0x71; 16]);
    send_unsigned(&mut c, liar, record(x, 1, vec![]), now);
    assert_eq!(stored(&c, x), None);
    assert!(actions(&mut c).iter().any(|a| matches!(
        a,
        Action::Event(ControlEvent::Error {
            kind: ControlErrorKind::Identity,
            ..
        })
    )));
    // The victim's real key with the liar's signature: a bad signature, also a forgery.
    let liar2 = connect(&mut c, 5, Kind::Shoal, now);
    sent(&mut c, now);
    let spliced = SignedMembership {
        record: forged.clone(),
        signature: RecordSignature {
            key: *identity(4).public_key(),
            sig: signed_by(5, &forged).signature.sig,
        },
    };
    send_signed(&mut c, liar2, spliced, now);
    assert_eq!(c.stats().bad_record_signatures, 2);
    assert!(closed(&mut c, now, liar2));
    assert_eq!(stored(&c, v), Some(vec![id_of(1)]));
}

/// A forged Discovery frame (another node's origin, the sender's signature) is refused the
/// same way before the topics core sees it; an unsigned one is refused and counted.
#[test]
fn a_forged_or_unsigned_discovery_frame_about_another_node_is_refused() {
    let now = Instant::now();
    let mut c = core(cfg(), now);
    let liar = connect(&mut c, 2, Kind::Shoal, now);
    connect(&mut c, 4, Kind::Shoal, now);
    sent(&mut c, now);
    let frame = |seq| Discovery {
        origin: id_of(4),
        seq,
        ttl: 4,
        cycle: 0,
        part: 0,
        parts: 1,
        entries: vec![],
    };
    let frames_in = c.discovery_stats().frames_in;
    // Unsigned: an identity node's frames are always signed.
    c.on_shard_report(
        ToControl::DiscoveryIn {
            link: liar,
            frame: Box::new(frame(u64::MAX)),
        },
        now,
        WALL,
    );
    assert_eq!(c.stats().unsigned_records_refused, 1);
    assert!(!closed(&mut c, now, liar), "refused, the link stays");
    // Signed by the liar: a forgery.
    let mut f = frame(u64::MAX);
    sign_discovery(&identity(2), &mut f, &mut Vec::new());
    c.on_shard_report(
        ToControl::DiscoveryIn {
            link: liar,
            frame: Box::new(f),
        },
        now,
        WALL,
    );
    assert_eq!(c.stats().bad_record_signatures, 1);
    assert!(closed(&mut c, now, liar));
    assert_eq!(
        c.discovery_stats().frames_in,
        frames_in,
        "the topics core saw none"
    );
}

/// Unsigned Membership records in identity mode: refused from a neighbour that signs and
/// about an origin known to sign; taken from a multimaster neighbour about itself or about a
/// node not known to sign; all refused with `require_signed_membership`.
#[test]
fn unsigned_membership_is_taken_only_from_links_that_cannot_sign_about_origins_that_do_not() {
    let now = Instant::now();
    let mut c = core(cfg(), now);
    let shoal = connect(&mut c, 2, Kind::Shoal, now);
    let mm = connect(&mut c, 3, Kind::Multimaster, now);
    connect(&mut c, 4, Kind::Shoal, now);
    sent(&mut c, now);
    let x = PeerId([0x77; 16]); // a multimaster node two hops away
                                // From the Shoal neighbour, even about a node not known to sign.
    send_unsigned(&mut c, shoal, record(x, 9, vec![id_of(2)]), now);
    assert_eq!(c.stats().unsigned_records_refused, 1);
    assert_eq!(stored(&c, x), None);
    // From the multimaster neighbour about a neighbour that signs, or about the core itself.
    send_unsigned(&mut c, mm, record(id_of(4), WALL + 9, vec![]), now);
    send_unsigned(&mut c, mm, record(id_of(1), WALL + 1_000, vec![]), now);
    assert_eq!(c.stats().unsigned_records_refused, 3);
    assert_eq!(stored(&c, id_of(4)), None);
    // From the multimaster neighbour about itself and about a node behind it: taken.
    send_unsigned(
        &mut c,
        mm,
        record(id_of(3), WALL + 1, vec![id_of(1), x]),
        now,
    );
    send_unsigned(&mut c, mm, record(x, 9, vec![id_of(3)]), now);
    assert_eq!(c.stats().unsigned_records_refused, 3);
    assert_eq!(stored(&c, x), Some(vec![id_of(3)]));
    assert!(c.members().any(|m| *m == x));
    // Once a node was seen signing, its unsigned records are refused even from there.
    let signed_x = Identity::from_seed(&[9; 32], "x").unwrap();
    let sx = record(signed_x.node_id(), 5, vec![id_of(2)]);
    send_signed(&mut c, shoal, signed_by(9, &sx), now);
    send_unsigned(&mut c, mm, record(signed_x.node_id(), 6, vec![]), now);
    assert_eq!(c.stats().unsigned_records_refused, 4);
    // No link was closed for any of it.
    for l in [shoal, mm] {
        assert!(!closed(&mut c, now, l));
    }
    // require_signed_membership: the multimaster neighbour's own record too.
    let mut strict = core(
        MeshConfig {
            require_signed_membership: true,
            ..cfg()
        },
        now,
    );
    let mm = connect(&mut strict, 3, Kind::Multimaster, now);
    sent(&mut strict, now);
    send_unsigned(
        &mut strict,
        mm,
        record(id_of(3), WALL + 1, vec![id_of(1)]),
        now,
    );
    assert_eq!(strict.stats().unsigned_records_refused, 1);
    assert_eq!(stored(&strict, id_of(3)), None);
}

/// Relays: a signed record is relayed signed (to a multimaster peer unsigned); an unsigned
/// one is not relayed to a neighbour that signs, counted.
#[test]
fn relays_keep_signatures_and_withhold_unsigned_records_from_signers() {
    let now = Instant::now();
    let mut c = core(cfg(), now);
    let two = connect(&mut c, 2, Kind::Shoal, now);
    let mm = connect(&mut c, 3, Kind::Multimaster, now);
    let four = connect(&mut c, 4, Kind::Shoal, now);
    sent(&mut c, now);
    let r2 = record(id_of(2), WALL + 3, vec![id_of(1), PeerId([0x55; 16])]);
    let s2 = signed_by(2, &r2);
    send_signed(&mut c, two, s2.clone(), now);
    let frames = sent(&mut c, now);
    assert!(frames
        .iter()
        .any(|(l, f)| *l == four && *f == Frame::SignedMembership(s2.clone())));
    assert!(frames
        .iter()
        .any(|(l, f)| *l == mm && *f == Frame::Membership(r2.clone())));
    // The multimaster neighbour's own record: relayed to nobody that signs.
    let before = c.stats().unsigned_records_withheld;
    send_unsigned(&mut c, mm, record(id_of(3), WALL + 1, vec![id_of(1)]), now);
    let frames = sent(&mut c, now);
    assert!(frames
        .iter()
        .all(|(_, f)| !matches!(f, Frame::Membership(m) if m.origin == id_of(3))));
    assert_eq!(c.stats().unsigned_records_withheld - before, 2);
}

/// What is stale anyway costs no verification: a copy of a stored Membership record, a
/// Discovery frame whose `seq` already verified (a copy over a second path).
#[test]
fn a_duplicate_costs_no_verification() {
    let now = Instant::now();
    let mut c = core(cfg(), now);
    let two = connect(&mut c, 2, Kind::Shoal, now);
    let four = connect(&mut c, 4, Kind::Shoal, now);
    sent(&mut c, now);
    let s2 = signed_by(2, &record(id_of(2), WALL + 3, vec![id_of(1)]));
    send_signed(&mut c, two, s2.clone(), now);
    send_signed(&mut c, four, s2.clone(), now);
    // Even a copy with a broken signature: stale first, so nothing is verified or closed.
    let mut broken = s2;
    broken.signature.sig[0] ^= 1;
    send_signed(&mut c, four, broken, now);
    let s = c.stats();
    assert_eq!(
        (s.record_signatures_verified, s.bad_record_signatures),
        (1, 0)
    );
    let mut f = Discovery {
        origin: id_of(2),
        seq: 10,
        ttl: 4,
        cycle: 0,
        part: 0,
        parts: 0,
        entries: vec![],
    };
    sign_discovery(&identity(2), &mut f, &mut Vec::new());
    for link in [two, four, two] {
        c.on_shard_report(
            ToControl::DiscoveryIn {
                link,
                frame: Box::new(f.clone()),
            },
            now,
            WALL,
        );
    }
    assert_eq!(c.stats().record_signatures_verified, 2);
    assert_eq!(
        c.discovery_stats().frames_in,
        1,
        "the copies never reach the topics core"
    );
}

/// Trust policies are per node: a record signed by a key this node does not trust (relayed
/// by a neighbour that does) is dropped and counted, the link stays; a key revoked later is
/// refused from then on.
#[test]
fn an_untrusted_signer_is_dropped_not_a_forgery_and_revocation_applies() {
    let now = Instant::now();
    let allow = |seeds: &[u8]| {
        IdentityPolicy::allowlist(
            seeds
                .iter()
                .map(|s| (*identity(*s).public_key(), format!("n{s}"))),
            true,
        )
    };
    let mut c = core_with(cfg(), context(1, allow(&[2, 4])), now);
    let two = connect(&mut c, 2, Kind::Shoal, now);
    connect(&mut c, 4, Kind::Shoal, now);
    sent(&mut c, now);
    let r9 = record(id_of(9), 5, vec![id_of(2)]);
    send_signed(&mut c, two, signed_by(9, &r9), now);
    let s = c.stats();
    assert_eq!(
        (s.untrusted_record_signers, s.bad_record_signatures),
        (1, 0)
    );
    assert!(!closed(&mut c, now, two));
    assert_eq!(stored(&c, id_of(9)), None);
    // Node 4's records verify until its key is revoked.
    let r4 = record(id_of(4), WALL + 1, vec![id_of(1)]);
    send_signed(&mut c, two, signed_by(4, &r4), now);
    assert_eq!(c.stats().record_signatures_verified, 1);
    let mut revoked = (*context(1, allow(&[2, 4]))).clone();
    revoked.policy_mut().revoke(identity(4).public_key());
    c.set_secure_context(Arc::new(revoked), now, WALL);
    sent(&mut c, now);
    let r4b = record(id_of(4), WALL + 2, vec![]);
    send_signed(&mut c, two, signed_by(4, &r4b), now);
    assert_eq!(c.stats().untrusted_record_signers, 2);
    assert_eq!(stored(&c, id_of(4)), Some(vec![id_of(1)]));
}

/// Outside identity mode unsigned records are taken as before, and a signature that is
/// present is still verified: a forgery closes its link on every node, so a relay never
/// passes one on and a bad signature is always the sending peer's doing.
#[test]
fn without_an_identity_signatures_present_are_still_verified() {
    let now = Instant::now();
    let psk_only = Arc::new(SecureContext::new(PskKeys::derive(PSK).unwrap(), b"default").unwrap());
    let mut c = ControlCore::new(
        ControlInit {
            me: PeerId([1; 16]),
            cfg: MeshConfig {
                scouting: false,
                psk: "x".into(),
                ..MeshConfig::default()
            },
            shards: 1,
            listen_port: 7001,
            secure: Some(psk_only),
            seed: [1; 32],
            epoch: now,
            listen_addrs: Vec::new(),
        },
        now,
        WALL,
    );
    let two = connect(&mut c, 2, Kind::Shoal, now);
    sent(&mut c, now);
    send_unsigned(&mut c, two, record(PeerId([0x66; 16]), 1, vec![]), now);
    assert!(stored(&c, PeerId([0x66; 16])).is_some());
    send_signed(&mut c, two, signed_by(2, &record(id_of(4), 2, vec![])), now);
    assert_eq!(c.stats().bad_record_signatures, 1);
    assert!(closed(&mut c, now, two));
}

#[test]
fn the_new_settings_are_validated_and_read_from_toml() {
    let c = MeshConfig::from_toml_str(&format!(
        "psk = \"k\"\nidentity_seed_hex = \"{}\"\nrequire_signed_membership = true\n\
         max_membership_neighbours = 64\n",
        "11".repeat(32)
    ))
    .unwrap();
    assert!(c.require_signed_membership);
    assert_eq!(c.max_membership_neighbours, 64);
    let d = MeshConfig::default();
    assert!(!d.require_signed_membership);
    assert_eq!(d.max_membership_neighbours, 1024);
    assert_eq!(
        MeshConfig::builder()
            .require_signed_membership(true)
            .build(),
        Err(ConfigError::TrustWithoutIdentity(
            "require_signed_membership"
        ))
    );
    assert_eq!(
        MeshConfig::builder()
            .max_membership_neighbours(0usize)
            .build(),
        Err(ConfigError::Zero("max_membership_neighbours"))
    );
}

/// Finding 8 through the core: an oversize record is refused and counted, the link stays.
#[test]
fn an_oversize_membership_record_is_refused_and_counted() {
    let now = Instant::now();
    let mut c = core(
        MeshConfig {
            max_membership_neighbours: 8,
            ..cfg()
        },
        now,
    );
    let mm = connect(&mut c, 3, Kind::Multimaster, now);
    sent(&mut c, now);
    let many = (0..9u8).map(|i| PeerId([0x40 + i; 16])).collect();
    send_unsigned(&mut c, mm, record(id_of(3), WALL + 1, many), now);
    assert_eq!(c.stats().membership_records_refused, 1);
    assert_eq!(stored(&c, id_of(3)), None);
    assert!(!closed(&mut c, now, mm));
}

/// Finding 11: revoking a key closed that node's links but left its topic endpoints (with
/// an infinite lease, for ever). Now they go at once, their matches end with Unmatched
/// events, and the node's relayed records are refused from then on.
#[test]
fn revoking_a_key_removes_its_topic_endpoints_at_once() {
    use shoal_proto::control::ControlEvent;
    use shoal_proto::topics::shoal_discovery::qos::EndpointQos;
    use shoal_proto::topics::shoal_discovery::record::{encode_endpoint, encode_participant};
    use shoal_proto::topics::shoal_discovery::types::{
        EndpointInfo, EndpointKind, EntityId, Guid, GuidPrefix, ParticipantInfo, TopicName,
        TypeHash, TypeName,
    };
    use shoal_proto::topics::TopicEvent;
    use shoal_proto::wire::DiscoveryEntry;
    let now = Instant::now();
    let policy = IdentityPolicy::allowlist(
        [2u8, 4]
            .iter()
            .map(|s| (*identity(*s).public_key(), format!("n{s}"))),
        true,
    );
    let mut c = core_with(cfg(), context(1, policy.clone()), now);
    let four = connect(&mut c, 4, Kind::Shoal, now);
    sent(&mut c, now);
    let reader = c
        .create_endpoint(
            EndpointKind::Reader,
            "t",
            "T",
            [7; 16],
            EndpointQos::reader_default(),
            &[],
            now,
            WALL,
        )
        .unwrap();
    let prefix = GuidPrefix(id_of(4).0[..12].try_into().unwrap());
    let mut p = ParticipantInfo::new(prefix, "n4");
    p.lease_duration = shoal_proto::topics::shoal_discovery::qos::QosDuration::INFINITE;
    let w = EndpointInfo::new(
        Guid::new(prefix, EntityId([0, 0, 1, 2])),
        EndpointKind::Writer,
        TopicName::new("t").unwrap(),
        TypeName::new("T").unwrap(),
        TypeHash([7; 16]),
    );
    let mut f = Discovery {
        origin: id_of(4),
        seq: 10,
        ttl: 4,
        cycle: 0,
        part: 0,
        parts: 0,
        entries: vec![
            DiscoveryEntry::Record(encode_participant(&p).unwrap()),
            DiscoveryEntry::Record(encode_endpoint(&w).unwrap()),
        ],
    };
    sign_discovery(&identity(4), &mut f, &mut Vec::new());
    c.on_shard_report(
        ToControl::DiscoveryIn {
            link: four,
            frame: Box::new(f),
        },
        now,
        WALL,
    );
    let later = now + std::time::Duration::from_millis(50);
    c.handle_timeout(later, WALL);
    sent(&mut c, later);
    let view = c.topics_view();
    assert_eq!(view.matches.len(), 1, "node 4's writer matched our reader");
    actions(&mut c);
    let mut revoked = (*context(1, policy)).clone();
    revoked.policy_mut().revoke(identity(4).public_key());
    c.set_secure_context(Arc::new(revoked), later, WALL);
    let t2 = later + std::time::Duration::from_millis(50);
    c.handle_timeout(t2, WALL);
    sent(&mut c, t2);
    let unmatched = actions(&mut c).into_iter().any(|a| {
        matches!(
            a,
            Action::Event(ControlEvent::Topic(TopicEvent::Unmatched { reader: r, .. })) if r == reader
        )
    });
    assert!(unmatched, "the match ended at once");
    let view = c.topics_view();
    assert!(view.matches.is_empty());
    assert!(view
        .endpoints
        .iter()
        .all(|e| e.guid[..12] != id_of(4).0[..12]));
}

/// A member's forgeries about another node are paid for by the link that carried them, not
/// by the node they claim to come from: verifying a frame that turns out forged used to be
/// charged to the claimed origin's work budget, so a member reconnecting after each forgery
/// drained the victim's budget and the victim's genuine frames were then dropped
/// (`budget_dropped`) until it refilled.
#[test]
fn forgeries_about_a_node_do_not_spend_that_nodes_work_budget() {
    let now = Instant::now();
    let mut c = core(
        MeshConfig {
            topics: shoal_proto::topics::TopicsConfig {
                // Three verifications' worth, refilling slowly.
                origin_work_burst: 300_000,
                origin_work_per_sec: 1_000,
                ..Default::default()
            },
            ..cfg()
        },
        now,
    );
    let victim = connect(&mut c, 4, Kind::Shoal, now);
    sent(&mut c, now);
    let genuine = |seq| {
        let mut f = Discovery {
            origin: id_of(4),
            seq,
            ttl: 4,
            cycle: 0,
            part: 0,
            parts: 0,
            entries: vec![],
        };
        sign_discovery(&identity(4), &mut f, &mut Vec::new());
        f
    };
    let deliver = |c: &mut ControlCore, link, f: Discovery| {
        c.on_shard_report(
            ToControl::DiscoveryIn {
                link,
                frame: Box::new(f),
            },
            now,
            WALL,
        )
    };
    deliver(&mut c, victim, genuine(10));
    assert_eq!(c.discovery_stats().frames_in, 1);
    // Five forgeries about the victim (the liar's own signature), a new link for each.
    for i in 0..5u64 {
        let liar = connect(&mut c, 2, Kind::Shoal, now);
        sent(&mut c, now);
        let mut f = Discovery {
            seq: 11 + i,
            ..genuine(11 + i)
        };
        f.entries.clear();
        sign_discovery(&identity(2), &mut f, &mut Vec::new());
        deliver(&mut c, liar, f);
        closed(&mut c, now, liar);
        c.on_shard_report(ToControl::LinkClosed { link: liar }, now, WALL);
    }
    // And a forged Membership record about the victim.
    let liar = connect(&mut c, 2, Kind::Shoal, now);
    sent(&mut c, now);
    send_signed(
        &mut c,
        liar,
        signed_by(2, &record(id_of(4), WALL + 5, vec![])),
        now,
    );
    // The victim's next genuine frame is still taken.
    let dropped = c.discovery_stats().budget_dropped;
    deliver(&mut c, victim, genuine(20));
    assert_eq!(c.discovery_stats().budget_dropped, dropped, "not dropped");
    assert_eq!(
        c.discovery_stats().frames_in,
        2,
        "the victim's frame is taken"
    );
    // Every forgery was verified, refused and cost its link.
    assert_eq!(c.stats().bad_record_signatures, 6);
}
