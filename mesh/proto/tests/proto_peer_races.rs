//! The peer table's verdict on a second connection to a linked peer (`peers/races.rs`): dial
//! races resolved alike at both ends, in every arrival order and through the simulated
//! stack, a stream begun during a race arriving whole and in order, and late claims refused.

mod proto_sim;

use proto_sim::*;
use rand::rngs::StdRng;
use rand::SeedableRng;
use shoal_proto::config::MeshConfig;
use shoal_proto::control::ControlEvent;
use shoal_proto::PeerId;
use shoal_proto::{LinkId, PeerAction, PeerEvent, PeerManager, PeerState};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Two nodes announce and dial each other at the same instant. Each side sees its own dial
/// (outbound) and the other's (inbound) complete, in either order. Both must keep the same
/// TCP connection: the one initiated by the lower id.
#[test]
fn simultaneous_dials_converge_on_one_connection_in_every_arrival_order() {
    let lo = PeerId([1; 16]);
    let hi = PeerId([2; 16]);
    let addr_lo: SocketAddr = "10.0.0.1:7000".parse().unwrap();
    let addr_hi: SocketAddr = "10.0.0.2:7000".parse().unwrap();
    for lo_first_outbound in [true, false] {
        for hi_first_outbound in [true, false] {
            let now = Instant::now();
            let cfg = MeshConfig::default();
            let mut a = PeerManager::new(lo, &cfg, StdRng::seed_from_u64(1), now);
            let mut b = PeerManager::new(hi, &cfg, StdRng::seed_from_u64(2), now);
            a.on_announce(hi, addr_hi, now);
            b.on_announce(lo, addr_lo, now);
            let dial = |acts: Vec<PeerAction>| match acts[..] {
                [PeerAction::Dial { link, .. }] => link,
                ref other => panic!("expected one dial, got {other:?}"),
            };
            let a_out = dial(drain(&mut a));
            let b_out = dial(drain(&mut b));
            let a_in = a.on_accepted(None, now).unwrap(); // carries b_out
            let b_in = b.on_accepted(None, now).unwrap(); // carries a_out
                                                          // TCP connection X = (a_out at A, b_in at B); Y = (a_in at A, b_out at B).
            let order = |first_out: bool, out: LinkId, inb: LinkId| {
                if first_out {
                    [out, inb]
                } else {
                    [inb, out]
                }
            };
            for l in order(lo_first_outbound, a_out, a_in) {
                a.on_handshake(l, hi, None, 7000, true, now);
            }
            for l in order(hi_first_outbound, b_out, b_in) {
                b.on_handshake(l, lo, None, 7000, true, now);
            }
            // Lower id (A) initiated X: both keep X.
            assert_eq!(a.link_of(&hi), Some(a_out));
            assert_eq!(b.link_of(&lo), Some(b_in));
            let a_acts = drain(&mut a);
            let b_acts = drain(&mut b);
            assert!(a_acts.contains(&PeerAction::Retire {
                peer: hi,
                link: a_in
            }));
            assert!(b_acts.contains(&PeerAction::Retire {
                peer: lo,
                link: b_out
            }));
            // The winner is installed before the loser is closed.
            let pos = |acts: &[PeerAction], want: &PeerAction| {
                acts.iter().position(|x| x == want).unwrap()
            };
            assert!(
                pos(
                    &a_acts,
                    &PeerAction::Install {
                        peer: hi,
                        link: a_out
                    }
                ) < pos(
                    &a_acts,
                    &PeerAction::Retire {
                        peer: hi,
                        link: a_in
                    }
                )
            );
            // Closing the loser (and the Goodbye it brings back) is not a disconnect.
            a.on_closed(a_in, now);
            b.on_closed(b_out, now);
            let connected = |ev: Vec<PeerEvent>| {
                assert!(
                    !ev.iter()
                        .any(|e| matches!(e, PeerEvent::Disconnected { .. })),
                    "{ev:?}"
                );
                ev.iter()
                    .filter(|e| matches!(e, PeerEvent::Connected { .. }))
                    .count()
            };
            assert_eq!(connected(events(&mut a)), 1);
            assert_eq!(connected(events(&mut b)), 1);
            assert_eq!(a.established_count(), 1);
            assert_eq!(b.established_count(), 1);
        }
    }
}

#[test]
fn same_direction_twice_keeps_the_older() {
    let now = Instant::now();
    let me = PeerId([5; 16]);
    let peer = PeerId([9; 16]);
    let mut pm = PeerManager::new(me, &MeshConfig::default(), StdRng::seed_from_u64(1), now);
    let first = pm.on_accepted(None, now).unwrap();
    let second = pm.on_accepted(None, now).unwrap();
    pm.on_handshake(second, peer, None, 1, true, now);
    pm.on_handshake(first, peer, None, 1, true, now);
    assert_eq!(pm.link_of(&peer), Some(first));
    assert!(drain(&mut pm).contains(&PeerAction::Retire { peer, link: second }));
}

/// Two nodes that discover each other by scouting and both dial, started together, with
/// `skew` ms more latency from node 0 to node 1 than back.
fn racing_pair(seed: u64, skew: u64) -> Sim {
    let mut sim = Sim::new(seed);
    let mut c = cfg();
    c.scouting = true;
    sim.add_node(c.clone());
    sim.add_node(c);
    sim.latency_of
        .insert((0, 1), Duration::from_millis(1 + skew));
    sim.start_all();
    sim
}

/// The same race through the whole simulated stack (discovery, links, Hellos), with both
/// symmetric and skewed latencies so that the handshakes complete in different orders.
#[test]
fn simultaneous_discovery_ends_with_one_link_on_both_sides() {
    for (seed, skew) in [(21, 0), (22, 3), (23, 7)] {
        let mut sim = racing_pair(seed, skew);
        sim.run_for(Duration::from_secs(3));
        for i in 0..2 {
            assert_eq!(sim.connected(i), vec![sim.id(1 - i)]);
            assert_eq!(sim.link_count(i), 1, "node {i} keeps exactly one link");
            let connects = sim.nodes[i]
                .peer_events
                .iter()
                .filter(|e| matches!(e, ControlEvent::PeerConnected { .. }))
                .count();
            assert_eq!(connects, 1);
        }
        assert!(
            sim.nodes[0].core.peers().stats().races_resolved
                + sim.nodes[1].core.peers().stats().races_resolved
                >= 1
        );
        // Both ends of the surviving link are the same TCP connection: traffic flows.
        sim.broadcast(0, b"after-race");
        sim.run_for(Duration::from_millis(10));
        assert_eq!(sim.count_delivered(1, b"after-race"), 1);
    }
}

/// A stream that begins while two nodes race to link loses nothing to the race. The node
/// that saw its first connection up first sends on it until the second one wins; the other
/// node may resolve the race as that connection's handshake ends, before anything it carries
/// arrives. Closing the loser there at once discarded the stream's first messages unread,
/// with no counter saying so (10–40 at 5 000 msg/s in these runs); the loser is now retired
/// (open until its peer resolved the race too), and what still comes on it counts as come on
/// the winner.
#[test]
fn a_stream_begun_during_a_dial_race_arrives_whole_and_in_order() {
    for (seed, skew) in [(21, 0), (22, 3), (23, 7), (24, 1), (25, 2)] {
        let mut sim = racing_pair(seed, skew);
        // From the moment node 0 shows node 1 connected: a message every 200 µs.
        let mut sent = 0u32;
        let until = sim.now + Duration::from_secs(1);
        while sim.now < until {
            sim.run_for(Duration::from_micros(200));
            if !sim.connected(0).is_empty() {
                sim.broadcast(0, sent.to_be_bytes());
                sent += 1;
            }
        }
        sim.run_for(Duration::from_millis(100));
        let races = |i: usize| sim.nodes[i].core.peers().stats().races_resolved;
        assert_eq!(
            (races(0), races(1)),
            (1, 1),
            "seed {seed}: a race at both ends"
        );
        let got: Vec<u32> = sim.nodes[1]
            .delivered
            .iter()
            .map(|(_, p)| u32::from_be_bytes(p[..].try_into().expect("4 bytes")))
            .collect();
        assert!(sent > 4_000, "seed {seed}: {sent} sent");
        assert_eq!(
            got,
            (0..sent).collect::<Vec<_>>(),
            "seed {seed}, skew {skew}"
        );
        let total = |i: usize| sim.nodes[i].shard.counters().snapshot();
        assert_eq!(total(1).dropped_link_closing, 0);
        assert_eq!(total(0).dropped_link_closed, 0);
        assert_eq!(sim.link_count(0), 1);
        assert_eq!(sim.link_count(1), 1);
    }
}

/// This node (`hi`) dials `lo`, announced at `t0`: `(table, link, t0)`.
fn dialing_lower_id(hi: PeerId, lo: PeerId) -> (PeerManager<StdRng>, LinkId, Instant) {
    let t0 = Instant::now();
    let mut pm = PeerManager::new(hi, &MeshConfig::default(), StdRng::seed_from_u64(1), t0);
    pm.on_announce(lo, addr(1), t0);
    let out = match drain(&mut pm)[..] {
        [PeerAction::Dial { link, .. }] => link,
        ref other => panic!("expected one dial, got {other:?}"),
    };
    (pm, out, t0)
}

/// This node (`hi`) dialed `lo` and the link is up at `t0`: `(table, link, t0)`.
fn linked_to_lower_id(hi: PeerId, lo: PeerId) -> (PeerManager<StdRng>, LinkId, Instant) {
    let (mut pm, out, t0) = dialing_lower_id(hi, lo);
    pm.on_handshake(out, lo, None, 7000, true, t0);
    assert_eq!(pm.link_of(&lo), Some(out));
    drain(&mut pm);
    events(&mut pm);
    (pm, out, t0)
}

/// Issue 24 finding 10: without identity, an inbound newcomer claiming the id of a peer
/// whose link this node initiated wins multimaster's rule when that id is lower. Once the link
/// is older than the race window, such a claim is no race: the live link keeps its place,
/// the newcomer gets Goodbye and is counted, as often as it comes back.
#[test]
fn a_late_claim_never_displaces_an_established_link() {
    let (hi, lo) = (PeerId([9; 16]), PeerId([1; 16]));
    let (mut pm, out, t0) = linked_to_lower_id(hi, lo);
    let late = t0 + pm.race_window() + Duration::from_millis(1);
    for i in 0..5u32 {
        let now = late + Duration::from_secs(u64::from(i));
        let claim = pm.on_accepted(None, now).unwrap();
        pm.on_handshake(claim, lo, None, 7000, true, now);
        assert_eq!(
            pm.link_of(&lo),
            Some(out),
            "claim {i} displaced the live link"
        );
        assert_eq!(
            drain(&mut pm),
            [PeerAction::Close {
                link: claim,
                goodbye: true
            }]
        );
        // Its close (and the Goodbye it may bring back) is not the peer's.
        pm.on_closed(claim, now);
        assert_eq!(events(&mut pm), []);
    }
    assert_eq!(pm.stats().claims_refused, 5);
    assert_eq!(pm.stats().races_resolved, 0);
    assert_eq!(pm.established_count(), 1);
    assert_eq!(pm.peer_state(&lo), Some(PeerState::Connected));
}

/// A real dial race still follows multimaster's rule, even when the second connection's
/// handshake ends long after the first link came up: what counts is when it began (before the
/// link, or within the race window after it), not when it finished.
#[test]
fn a_race_whose_second_connection_began_in_time_follows_the_rule() {
    let (hi, lo) = (PeerId([9; 16]), PeerId([1; 16]));
    for began in [Duration::ZERO, Duration::from_millis(1900)] {
        let (mut pm, out, t0) = linked_to_lower_id(hi, lo);
        assert!(began < pm.race_window());
        let inbound = pm.on_accepted(None, t0 + began).unwrap();
        // Its handshake ends well after the race window (a slow, lossy path).
        let done = t0 + pm.race_window() + Duration::from_secs(1);
        pm.on_handshake(inbound, lo, None, 7000, true, done);
        // `lo` initiated it and is the lower id: it wins at both ends.
        assert_eq!(pm.link_of(&lo), Some(inbound));
        assert_eq!(
            drain(&mut pm),
            [
                PeerAction::Install {
                    peer: lo,
                    link: inbound
                },
                PeerAction::Retire {
                    peer: lo,
                    link: out
                }
            ]
        );
        assert_eq!(pm.stats().races_resolved, 1);
        assert_eq!(pm.stats().claims_refused, 0);
    }
    // Began before the link was even established (a plain race): the same.
    let (mut pm, out, t0) = dialing_lower_id(hi, lo);
    let inbound = pm.on_accepted(None, t0).unwrap();
    let up = t0 + Duration::from_secs(10);
    pm.on_handshake(out, lo, None, 7000, true, up);
    pm.on_handshake(inbound, lo, None, 7000, true, up + pm.race_window() * 2);
    assert_eq!(pm.link_of(&lo), Some(inbound));
}

/// This node's own late dial (a static endpoint whose first dial failed while the peer dialed
/// in): against a Shoal peer both ends keep the established link (the peer sees an inbound
/// late claim and refuses it); against a multimaster peer, which follows its rule, this node
/// follows it too, so both ends still keep the same connection.
#[test]
fn an_own_late_dial_keeps_both_ends_on_one_connection() {
    let (lo, hi) = (PeerId([1; 16]), PeerId([9; 16]));
    for shoal_peer in [true, false] {
        let t0 = Instant::now();
        let cfg = MeshConfig {
            static_peers: vec!["10.0.0.9:7000".into()],
            ..MeshConfig::default()
        };
        let mut a = PeerManager::new(lo, &cfg, StdRng::seed_from_u64(1), t0);
        let mut b = PeerManager::new(hi, &MeshConfig::default(), StdRng::seed_from_u64(2), t0);
        a.start(t0);
        let first = match drain(&mut a)[..] {
            [PeerAction::Dial { link, .. }] => link,
            ref other => panic!("expected the static dial, got {other:?}"),
        };
        // `hi` dials `lo` and the link comes up (E); `lo`'s static dial fails meanwhile.
        b.on_announce(lo, addr(1), t0);
        let b_out = match drain(&mut b)[..] {
            [PeerAction::Dial { link, .. }] => link,
            ref other => panic!("expected one dial, got {other:?}"),
        };
        let a_in = a.on_accepted(None, t0).unwrap();
        a.on_handshake(a_in, hi, None, 7000, true, t0);
        b.on_handshake(b_out, lo, None, 7000, true, t0);
        a.on_closed(first, t0);
        drain(&mut a);
        drain(&mut b);
        // The static endpoint is redialed after its backoff, long after E came up (N).
        let later = t0 + Duration::from_secs(30);
        a.handle_timeout(later);
        let a_out = match drain(&mut a)[..] {
            [PeerAction::Dial { link, .. }] => link,
            ref other => panic!("expected the static redial, got {other:?}"),
        };
        a.on_handshake(a_out, hi, None, 7000, shoal_peer, later);
        if shoal_peer {
            // A Shoal `hi` sees N as an inbound late claim and keeps E: so does `lo`.
            let b_in = b.on_accepted(None, later).unwrap();
            b.on_handshake(b_in, lo, None, 7000, true, later);
            assert_eq!(b.link_of(&lo), Some(b_out));
            assert_eq!(a.link_of(&hi), Some(a_in));
            assert_eq!(a.stats().claims_refused, 1);
            assert_eq!(b.stats().claims_refused, 1);
        } else {
            // A multimaster `hi` keeps N (initiated by the lower id): so does `lo`.
            assert_eq!(a.link_of(&hi), Some(a_out));
            assert_eq!(a.stats().races_resolved, 1);
            assert_eq!(a.stats().claims_refused, 0);
        }
        // Either way the static endpoint is now known to be `hi`, linked: no more dials.
        drain(&mut a);
        a.handle_timeout(later + Duration::from_secs(60));
        assert!(
            !drain(&mut a)
                .iter()
                .any(|x| matches!(x, PeerAction::Dial { .. })),
            "the covered static endpoint is not redialed"
        );
    }
}

/// The same claim made through this node's own dial: a stranger announces its address under
/// a fresh id, and the dial there answers with the linked peer's id (posing as a multimaster
/// peer, whose rule would hand the id to this node's own connection). Refused as well.
#[test]
fn a_late_claim_through_a_dial_of_an_announced_address_is_refused() {
    // This node has the lower id: its own connection would win multimaster's rule.
    let (lo, hi) = (PeerId([1; 16]), PeerId([9; 16]));
    let t0 = Instant::now();
    let mut pm = PeerManager::new(lo, &MeshConfig::default(), StdRng::seed_from_u64(1), t0);
    let inbound = pm.on_accepted(None, t0).unwrap();
    pm.on_handshake(inbound, hi, None, 7000, true, t0);
    drain(&mut pm);
    let late = t0 + pm.race_window() + Duration::from_millis(1);
    pm.on_announce(PeerId([7; 16]), addr(66), late);
    let dial = match drain(&mut pm)[..] {
        [PeerAction::Dial { link, .. }] => link,
        ref other => panic!("expected one dial, got {other:?}"),
    };
    pm.on_handshake(dial, hi, None, 7000, false, late);
    assert_eq!(pm.link_of(&hi), Some(inbound));
    assert!(drain(&mut pm).contains(&PeerAction::Close {
        link: dial,
        goodbye: true
    }));
    assert_eq!(pm.stats().claims_refused, 1);
}
