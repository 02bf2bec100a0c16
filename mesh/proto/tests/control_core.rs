//! The control core alone: its handshake machine (plaintext and secured, refusals, timeouts,
//! bounds) and, through its public inputs, the ordering of its shard commands and events.

use bytes::{Bytes, BytesMut};
use rand::rngs::StdRng;
use rand::SeedableRng;
use shoal_proto::cmd::{ToControl, ToShard};
use shoal_proto::config::MeshConfig;
use shoal_proto::control::{
    Action, ControlCore, ControlErrorKind, ControlEvent, ControlInit, Handshaking, Progress,
};
use shoal_proto::crypto::{
    Handshake, Identity, IdentityPolicy, PskKeys, RecordReader, SecureContext,
};
use shoal_proto::wire::{Frame, Hello, ShoalExtension, PROTOCOL_VERSION};
use shoal_proto::{DialTarget, LinkId, LinkState, LinkTimers, PeerId, Role};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn hello(id: u8, group: &str) -> Hello {
    Hello {
        node_id: PeerId([id; 16]),
        protocol_version: PROTOCOL_VERSION,
        tcp_listen_port: 7000 + u16::from(id),
        group_name: group.into(),
        nonce: u64::from(id),
        eph_pub_key: None,
        identity: None,
        shoal: Some(ShoalExtension::current()),
    }
}

fn ctx(psk: &str) -> Arc<SecureContext> {
    Arc::new(SecureContext::new(PskKeys::derive(psk.as_bytes()).unwrap(), b"default").unwrap())
}

fn with_identity(psk: &str, seed: u8, policy: IdentityPolicy) -> Arc<SecureContext> {
    let id = Identity::from_seed(&[seed; 32], &format!("n{seed}")).unwrap();
    let c = SecureContext::new(PskKeys::derive(psk.as_bytes()).unwrap(), b"default").unwrap();
    Arc::new(c.with_identity(id, policy))
}

fn crypto(c: &Option<Arc<SecureContext>>, seed: u64) -> Option<Handshake> {
    c.clone()
        .map(|c| Handshake::new(c, &mut StdRng::seed_from_u64(seed)))
}

struct Side {
    h: Handshaking,
    out: BytesMut,
    last: Option<Progress>,
}

fn start(role: Role, id: u8, group: &str, sec: Option<Arc<SecureContext>>, now: Instant) -> Side {
    let mut out = BytesMut::new();
    let h = Handshaking::start(
        LinkId(1),
        role,
        hello(id, group),
        crypto(&sec, u64::from(id)),
        LinkTimers::from_config(&MeshConfig::default()),
        MeshConfig::default().max_message_bytes,
        None,
        now,
        &mut out,
    );
    Side { h, out, last: None }
}

fn finished(p: &Option<Progress>) -> bool {
    matches!(p, Some(Progress::Done | Progress::Failed(_)))
}

/// Moves bytes both ways until both sides finished or nothing moves.
fn exchange(a: &mut Side, b: &mut Side, now: Instant) {
    for _ in 0..10 {
        let moved = deliver(a, b, now) | deliver(b, a, now);
        if !moved {
            return;
        }
    }
}

fn deliver(from: &mut Side, to: &mut Side, now: Instant) -> bool {
    if from.out.is_empty() || finished(&to.last) {
        return false;
    }
    let bytes = from.out.split().freeze();
    to.last = Some(to.h.on_bytes(&bytes, now, &mut to.out));
    true
}

fn failure(p: &Option<Progress>) -> Option<(ControlErrorKind, String)> {
    match p {
        Some(Progress::Failed(Some(f))) => Some((f.kind, f.message.clone())),
        _ => None,
    }
}

#[test]
fn plaintext_handshake_establishes_both_ends_and_keeps_what_follows() {
    let now = Instant::now();
    let mut d = start(Role::Dialer, 1, "default", None, now);
    let mut a = start(Role::Acceptor, 2, "default", None, now);
    assert!(
        !d.out.is_empty() && !a.out.is_empty(),
        "Hello/HelloAck at once"
    );
    // The acceptor's HelloAck arrives with a Heartbeat glued behind it.
    let mut hb = BytesMut::new();
    Frame::Heartbeat.encode(&mut hb).unwrap();
    a.out.extend_from_slice(&hb);
    exchange(&mut d, &mut a, now);
    assert!(matches!(d.last, Some(Progress::Done)));
    assert!(matches!(a.last, Some(Progress::Done)));
    let ed = d.h.into_exchanged().unwrap();
    let ea = a.h.into_exchanged().unwrap();
    assert_eq!((ed.peer, ed.listen_port), (PeerId([2; 16]), 7002));
    assert_eq!(ea.peer, PeerId([1; 16]));
    assert!(ed.secure.is_none());
    assert_eq!(ed.link.state(), LinkState::Established);
    assert_eq!(
        &ed.leftover[..],
        &hb[..],
        "bytes after the Hello are not parsed"
    );
}

#[test]
fn secured_handshake_derives_matching_record_keys() {
    let now = Instant::now();
    let c = ctx("psk-one-0123456789");
    let mut d = start(Role::Dialer, 1, "default", Some(c.clone()), now);
    let mut a = start(Role::Acceptor, 2, "default", Some(c), now);
    exchange(&mut d, &mut a, now);
    assert!(matches!(d.last, Some(Progress::Done)), "{:?}", d.last);
    assert!(matches!(a.last, Some(Progress::Done)), "{:?}", a.last);
    let mut ed = d.h.into_exchanged().unwrap();
    let ea = a.h.into_exchanged().unwrap();
    // What the dialer seals, the acceptor opens.
    let (mut sealer, _) = {
        let e = ed.secure.take().unwrap();
        (e.sealer, e.opener)
    };
    let mut plain = BytesMut::new();
    Frame::Heartbeat.encode(&mut plain).unwrap();
    let mut rec = BytesMut::new();
    sealer.seal_frame(&mut rec, &plain).unwrap();
    let mut r = RecordReader::new(ea.secure.unwrap().opener, &rec);
    r.decrypt().unwrap();
    assert_eq!(r.plaintext(), &plain[..]);
}

#[test]
fn records_after_the_authconfirm_are_left_over_unread() {
    let now = Instant::now();
    let c = ctx("psk-one-0123456789");
    let mut d = start(Role::Dialer, 1, "default", Some(c.clone()), now);
    let mut a = start(Role::Acceptor, 2, "default", Some(c), now);
    // Dialer reads HelloAck, writes Hello+AuthConfirm; acceptor reads them, answers.
    let b = a.out.split().freeze();
    d.last = Some(d.h.on_bytes(&b, now, &mut d.out));
    let b = d.out.split().freeze();
    a.last = Some(a.h.on_bytes(&b, now, &mut a.out));
    assert!(matches!(a.last, Some(Progress::Done)));
    // The acceptor's AuthConfirm arrives with 30 bytes of "records" behind it.
    let mut b = a.out.split();
    b.extend_from_slice(&[0xAB; 30]);
    assert!(matches!(d.h.on_bytes(&b, now, &mut d.out), Progress::Done));
    let ed = d.h.into_exchanged().unwrap();
    assert_eq!(&ed.leftover[..], &[0xAB; 30][..]);
}

#[test]
fn another_psk_fails_on_the_tag() {
    let now = Instant::now();
    let mut d = start(
        Role::Dialer,
        1,
        "default",
        Some(ctx("psk-one-0123456789")),
        now,
    );
    let mut a = start(
        Role::Acceptor,
        2,
        "default",
        Some(ctx("psk-two-0123456789")),
        now,
    );
    exchange(&mut d, &mut a, now);
    let (kind, msg) = failure(&d.last).expect("dialer refuses");
    assert_eq!(kind, ControlErrorKind::Crypto);
    assert!(msg.contains("AuthConfirm tag mismatch"), "{msg}");
    assert_eq!(failure(&a.last).unwrap().0, ControlErrorKind::Crypto);
}

#[test]
fn mode_mismatch_is_reported_other_groups_are_refused_quietly() {
    let now = Instant::now();
    let mut d = start(Role::Dialer, 1, "default", None, now);
    let mut a = start(
        Role::Acceptor,
        2,
        "default",
        Some(ctx("psk-one-0123456789")),
        now,
    );
    exchange(&mut d, &mut a, now);
    let (kind, msg) = failure(&d.last).unwrap();
    assert_eq!(kind, ControlErrorKind::ModeMismatch);
    assert!(
        msg.contains("peer is secured (psk), this node is plaintext"),
        "{msg}"
    );

    let mut d = start(Role::Dialer, 1, "default", None, now);
    let mut a = start(Role::Acceptor, 2, "other", None, now);
    exchange(&mut d, &mut a, now);
    assert!(
        matches!(d.last, Some(Progress::Failed(None))),
        "{:?}",
        d.last
    );
    assert!(matches!(a.last, Some(Progress::Failed(None))));
}

#[test]
fn an_untrusted_identity_is_refused() {
    let now = Instant::now();
    let psk = "psk-one-0123456789";
    let stranger = Identity::from_seed(&[9; 32], "n9").unwrap();
    let trusted = Identity::from_seed(&[3; 32], "n3").unwrap();
    let allow = IdentityPolicy::allowlist([(*trusted.public_key(), "three")], true);
    let mut d = start(
        Role::Dialer,
        1,
        "default",
        Some(with_identity(psk, 9, IdentityPolicy::open(true))),
        now,
    );
    let mut a = start(
        Role::Acceptor,
        2,
        "default",
        Some(with_identity(psk, 4, allow)),
        now,
    );
    exchange(&mut d, &mut a, now);
    let (kind, msg) = failure(&a.last).expect("the acceptor refuses the stranger");
    assert_eq!(kind, ControlErrorKind::Identity, "{msg}");
    assert_ne!(stranger.public_key(), trusted.public_key());
}

#[test]
fn a_frame_above_the_handshake_bound_fails_before_it_is_buffered() {
    let now = Instant::now();
    let mut a = start(Role::Acceptor, 2, "default", None, now);
    // A length prefix announcing 1 MiB.
    let mut b = BytesMut::new();
    b.extend_from_slice(&(1u32 << 20).to_be_bytes());
    b.extend_from_slice(&[1, 0, 0]);
    let p = a.h.on_bytes(&b, now, &mut a.out);
    assert_eq!(failure(&Some(p)).unwrap().0, ControlErrorKind::Oversize);
}

#[test]
fn garbage_is_malformed_and_a_stream_ending_inside_a_frame_too() {
    let now = Instant::now();
    let mut a = start(Role::Acceptor, 2, "default", None, now);
    let p =
        a.h.on_bytes(&[0, 0, 0, 5, 0xEE, 1, 2, 3, 4], now, &mut a.out);
    assert_eq!(failure(&Some(p)).unwrap().0, ControlErrorKind::Malformed);

    let mut a = start(Role::Acceptor, 2, "default", None, now);
    assert!(matches!(
        a.h.on_bytes(&[0, 0], now, &mut a.out),
        Progress::Pending
    ));
    let (kind, msg) = failure(&Some(a.h.on_eof())).unwrap();
    assert_eq!(kind, ControlErrorKind::Malformed);
    assert!(msg.contains("inside a frame"), "{msg}");
    // A clean end before any byte is a quiet failure.
    let mut a = start(Role::Acceptor, 2, "default", None, now);
    assert!(matches!(a.h.on_eof(), Progress::Failed(None)));
}

#[test]
fn the_handshake_times_out_quietly_or_inside_a_frame() {
    let now = Instant::now();
    let t = MeshConfig::default().handshake_timeout;
    let mut a = start(Role::Acceptor, 2, "default", None, now);
    assert_eq!(a.h.deadline(), now + t);
    assert!(matches!(a.h.handle_timeout(now + t / 2), Progress::Pending));
    assert!(matches!(
        a.h.handle_timeout(now + t),
        Progress::Failed(None)
    ));

    let mut a = start(Role::Acceptor, 2, "default", None, now);
    let _ = a.h.on_bytes(&[0, 0, 0], now, &mut a.out);
    let (kind, msg) = failure(&Some(a.h.handle_timeout(now + t))).unwrap();
    assert_eq!(kind, ControlErrorKind::Malformed);
    assert!(msg.contains("incomplete frame (3 bytes)"), "{msg}");
}

// ---- the core through its inputs ----

const SHARDS: usize = 2;

fn core(id: u8, statics: Vec<String>, now: Instant) -> ControlCore {
    let cfg = MeshConfig {
        scouting: false,
        static_peers: statics,
        ..MeshConfig::default()
    };
    ControlCore::new(
        ControlInit {
            me: PeerId([id; 16]),
            cfg,
            shards: SHARDS,
            listen_port: 7000 + u16::from(id),
            secure: None,
            seed: [id; 32],
            epoch: now,
            listen_addrs: Vec::new(),
        },
        now,
        1_700_000_000_000,
    )
}

fn actions(c: &mut ControlCore) -> Vec<Action> {
    std::iter::from_fn(|| c.poll_action()).collect()
}

fn posts(c: &mut ControlCore) -> Vec<(usize, ToShard<()>)> {
    std::iter::from_fn(|| c.poll_to_shard()).collect()
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

fn events(acts: &[Action]) -> Vec<ControlEvent> {
    acts.iter()
        .filter_map(|a| match a {
            Action::Event(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// Node 1 dials node 2 (a static peer); the handshake runs through the cores' inputs.
/// Returns both cores with their links, after the handshake, outputs not yet drained.
fn linked(now: Instant) -> (ControlCore, LinkId, ControlCore, LinkId) {
    let wall = 1_700_000_000_000;
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut a = core(1, vec!["127.0.0.1:7002".into()], now);
    let mut b = core(2, vec![], now);
    a.start(now, wall);
    let dial = actions(&mut a);
    let Some(Action::Dial { link: la, target }) = dial.first() else {
        panic!("{dial:?}");
    };
    assert_eq!(*target, DialTarget::Endpoint("127.0.0.1:7002".into()));
    let la = *la;
    let lb = b.on_accepted(Some(ip), now, wall).unwrap();
    a.on_dial_connected(la, Some(ip), now, wall);
    let hello_ack = writes(&actions(&mut b), lb);
    let hello = writes(&actions(&mut a), la);
    b.on_bytes(lb, &hello, now, wall);
    a.on_bytes(la, &hello_ack, now, wall);
    assert!(!a.is_handshaking(la) && !b.is_handshaking(lb));
    (a, la, b, lb)
}

#[test]
fn an_established_link_goes_to_its_shard_and_is_announced_after_every_shard_synced() {
    let now = Instant::now();
    let wall = 1_700_000_000_000;
    let (mut a, la, _b, _) = linked(now);
    let acts = actions(&mut a);
    assert!(
        events(&acts).is_empty(),
        "PeerConnected waits for the shards: {acts:?}"
    );
    assert!(a.connected_peers().next().is_none(), "hidden until then");
    let p = posts(&mut a);
    // AddLink first (to the link's shard), then Install on every shard, then Sync on every
    // shard after the membership flood.
    let Some((owner, ToShard::AddLink(nl))) = p.first() else {
        panic!("{p:?}");
    };
    assert_eq!((nl.link, nl.peer), (la, PeerId([2; 16])));
    assert_eq!(nl.state.state(), LinkState::Established);
    let installs: Vec<usize> = p
        .iter()
        .filter_map(|(s, c)| {
            matches!(c, ToShard::Install { link, owner: o, .. } if *link == la && o == owner)
                .then_some(*s)
        })
        .collect();
    assert_eq!(installs, (0..SHARDS).collect::<Vec<_>>());
    let syncs: Vec<(usize, u64)> = p
        .iter()
        .filter_map(|(s, c)| match c {
            ToShard::Sync(t) => Some((*s, *t)),
            _ => None,
        })
        .collect();
    assert_eq!(syncs.len(), SHARDS);
    let last_install = p
        .iter()
        .rposition(|(_, c)| matches!(c, ToShard::Install { .. }));
    let first_sync = p.iter().position(|(_, c)| matches!(c, ToShard::Sync(_)));
    assert!(last_install < first_sync);
    let token = syncs[0].1;
    a.on_shard_report(ToControl::Synced(token), now, wall);
    assert!(events(&actions(&mut a)).is_empty(), "one shard of two");
    a.on_shard_report(ToControl::Synced(token), now, wall);
    let ev = events(&actions(&mut a));
    assert_eq!(
        ev[0],
        ControlEvent::PeerConnected {
            peer: PeerId([2; 16])
        }
    );
    assert_eq!(a.connected_peers().count(), 1);
}

#[test]
fn a_link_closed_by_its_shard_is_uninstalled_everywhere_and_redialed() {
    let now = Instant::now();
    let wall = 1_700_000_000_000;
    let (mut a, la, _b, _) = linked(now);
    let _ = (actions(&mut a), posts(&mut a));
    a.on_shard_report(ToControl::LinkClosed { link: la }, now, wall);
    let p = posts(&mut a);
    let uninstalls = p
        .iter()
        .filter(|(_, c)| matches!(c, ToShard::Uninstall { link, .. } if *link == la))
        .count();
    assert_eq!(uninstalls, SHARDS);
    // The static peer is redialed after the backoff.
    let later = now + Duration::from_secs(2);
    a.handle_timeout(later, wall + 2000);
    assert!(actions(&mut a)
        .iter()
        .any(|x| matches!(x, Action::Dial { .. })));
}

#[test]
fn stop_says_goodbye_on_every_link_and_ends_when_every_shard_stopped() {
    let now = Instant::now();
    let wall = 1_700_000_000_000;
    let (mut a, la, _b, _) = linked(now);
    let _ = (actions(&mut a), posts(&mut a));
    a.stop(now, wall);
    let p = posts(&mut a);
    assert!(p
        .iter()
        .any(|(_, c)| matches!(c, ToShard::Close { link, goodbye: true } if *link == la)));
    assert_eq!(
        p.iter().filter(|(_, c)| matches!(c, ToShard::Stop)).count(),
        SHARDS
    );
    assert!(
        a.on_accepted(None, now, wall).is_none(),
        "no new connection"
    );
    a.on_shard_report(ToControl::Stopped(0), now, wall);
    assert!(!actions(&mut a).iter().any(|x| matches!(x, Action::Stopped)));
    a.on_shard_report(ToControl::Stopped(1), now, wall);
    assert!(actions(&mut a).iter().any(|x| matches!(x, Action::Stopped)));
}

#[test]
fn a_handshake_past_its_deadline_is_closed_by_the_timer() {
    let now = Instant::now();
    let wall = 1_700_000_000_000;
    let mut b = core(2, vec![], now);
    let lb = b.on_accepted(None, now, wall).unwrap();
    let _ = actions(&mut b);
    assert!(b.poll_timeout() <= now + MeshConfig::default().handshake_timeout);
    b.handle_timeout(now + MeshConfig::default().handshake_timeout, wall);
    let acts = actions(&mut b);
    assert!(acts
        .iter()
        .any(|x| matches!(x, Action::Close { link } if *link == lb)));
    assert!(!b.is_handshaking(lb));
    assert!(events(&acts).is_empty(), "an idle socket is no error");
}

#[test]
fn shard_reports_that_arrive_together_are_applied_in_order_in_one_round() {
    // The driver hands the core its inbox batch whole (issue 29: a round per report rebuilt
    // the reverse paths per Membership record, and 60 processes starting on two cores spent
    // half the machine on it). The batch must mean what the reports one by one mean: both
    // shards' Synced release PeerConnected, and the LinkClosed after them in the same batch
    // then disconnects the peer and uninstalls its link everywhere.
    let now = Instant::now();
    let wall = 1_700_000_000_000;
    let (mut a, la, _b, _) = linked(now);
    let _ = actions(&mut a);
    let token = posts(&mut a)
        .iter()
        .find_map(|(_, c)| match c {
            ToShard::Sync(t) => Some(*t),
            _ => None,
        })
        .expect("a Sync");
    let rounds = a.stats().report_rounds;
    a.on_shard_reports(
        [
            ToControl::Synced(token),
            ToControl::Synced(token),
            ToControl::LinkClosed { link: la },
        ],
        now,
        wall,
    );
    assert_eq!(
        a.stats().report_rounds,
        rounds + 1,
        "one round for the batch"
    );
    let peer = PeerId([2; 16]);
    assert_eq!(
        events(&actions(&mut a)),
        vec![
            ControlEvent::PeerConnected { peer },
            ControlEvent::MemberJoined { peer },
            ControlEvent::PeerDisconnected { peer },
            ControlEvent::MemberLeft { peer },
        ]
    );
    let uninstalls = posts(&mut a)
        .iter()
        .filter(|(_, c)| matches!(c, ToShard::Uninstall { link, .. } if *link == la))
        .count();
    assert_eq!(uninstalls, SHARDS);
    assert_eq!(a.connected_peers().count(), 0);
}
