//! The peer table: dial races, disconnect then Lost, static and seed peers, backoff.

mod proto_sim;

use proto_sim::*;
use rand::rngs::StdRng;
use rand::SeedableRng;
use shoal_mesh::config::MeshConfig;
use shoal_mesh::proto::{DialTarget, LinkId, PeerAction, PeerEvent, PeerManager, PeerState};
use shoal_mesh::PeerId;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn drain(pm: &mut PeerManager<StdRng>) -> Vec<PeerAction> {
    std::iter::from_fn(|| pm.poll_action()).collect()
}

fn events(pm: &mut PeerManager<StdRng>) -> Vec<PeerEvent> {
    std::iter::from_fn(|| pm.poll_event()).collect()
}

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
            let a_in = a.on_accepted(now).unwrap(); // carries b_out
            let b_in = b.on_accepted(now).unwrap(); // carries a_out
                                                    // TCP connection X = (a_out at A, b_in at B); Y = (a_in at A, b_out at B).
            let order = |first_out: bool, out: LinkId, inb: LinkId| {
                if first_out {
                    [out, inb]
                } else {
                    [inb, out]
                }
            };
            for l in order(lo_first_outbound, a_out, a_in) {
                a.on_handshake(l, hi, None, 7000, now);
            }
            for l in order(hi_first_outbound, b_out, b_in) {
                b.on_handshake(l, lo, None, 7000, now);
            }
            // Lower id (A) initiated X: both keep X.
            assert_eq!(a.link_of(&hi), Some(a_out));
            assert_eq!(b.link_of(&lo), Some(b_in));
            let a_acts = drain(&mut a);
            let b_acts = drain(&mut b);
            assert!(a_acts.contains(&PeerAction::Close {
                link: a_in,
                goodbye: true
            }));
            assert!(b_acts.contains(&PeerAction::Close {
                link: b_out,
                goodbye: true
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
                    &PeerAction::Close {
                        link: a_in,
                        goodbye: true
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
    let first = pm.on_accepted(now).unwrap();
    let second = pm.on_accepted(now).unwrap();
    pm.on_handshake(second, peer, None, 1, now);
    pm.on_handshake(first, peer, None, 1, now);
    assert_eq!(pm.link_of(&peer), Some(first));
    assert!(drain(&mut pm).contains(&PeerAction::Close {
        link: second,
        goodbye: true
    }));
}

/// The same race through the whole simulated stack (discovery, links, Hellos), with both
/// symmetric and skewed latencies so that the handshakes complete in different orders.
#[test]
fn simultaneous_discovery_ends_with_one_link_on_both_sides() {
    for (seed, skew) in [(21, 0), (22, 3), (23, 7)] {
        let mut sim = Sim::new(seed);
        let mut c = cfg();
        c.discovery = true;
        sim.add_node(c.clone());
        sim.add_node(c);
        sim.latency_of
            .insert((0, 1), Duration::from_millis(1 + skew));
        sim.start_all();
        sim.run_for(Duration::from_secs(3));
        for i in 0..2 {
            assert_eq!(sim.connected(i), vec![sim.id(1 - i)]);
            assert_eq!(sim.link_count(i), 1, "node {i} keeps exactly one link");
            let connects = sim.nodes[i]
                .peer_events
                .iter()
                .filter(|e| matches!(e, PeerEvent::Connected { .. }))
                .count();
            assert_eq!(connects, 1);
        }
        assert!(
            sim.nodes[0].pm.stats().races_resolved + sim.nodes[1].pm.stats().races_resolved >= 1
        );
        // Both ends of the surviving link are the same TCP connection: traffic flows.
        sim.broadcast(0, b"after-race");
        sim.run_for(Duration::from_millis(10));
        assert_eq!(sim.count_delivered(1, b"after-race"), 1);
    }
}

#[test]
fn stopped_peer_is_disconnected_then_lost() {
    let mut sim = Sim::new(31);
    let mut c = cfg();
    c.discovery = true;
    sim.add_node(c.clone());
    sim.add_node(c);
    sim.start_all();
    sim.run_for(Duration::from_secs(2));
    let b = sim.id(1);
    assert_eq!(sim.connected(0), vec![b]);
    let stop_at = sim.now;
    sim.stop_node(1);
    sim.run_for(Duration::from_millis(100));
    assert_eq!(
        sim.nodes[0].pm.peer_state(&b),
        Some(PeerState::Disconnected)
    );
    assert!(
        matches!(sim.nodes[0].peer_events.last(), Some(PeerEvent::Disconnected { peer }) if *peer == b)
    );
    // Still known (it may come back) until peer_lost_timeout passes without an announce.
    sim.run_for(Duration::from_secs(3));
    assert!(sim.nodes[0].pm.peer_state(&b).is_some());
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.nodes[0].pm.peer_state(&b), None);
    assert!(
        matches!(sim.nodes[0].peer_events.last(), Some(PeerEvent::Lost { peer }) if *peer == b)
    );
    assert!(sim.now - stop_at >= sim.nodes[0].cfg.peer_lost_timeout);
    // Lost is final: no more dials to it.
    let dials = sim.nodes[0].dial_log.len();
    sim.run_for(Duration::from_secs(30));
    assert_eq!(sim.nodes[0].dial_log.len(), dials);
}

#[test]
fn crashed_peer_is_detected_by_heartbeat_timeout() {
    let mut sim = topology(32, 2, &[(0, 1)]);
    let b = sim.id(1);
    sim.partition(0, 1); // silent: no EOF, no Goodbye
    sim.run_for(Duration::from_millis(2900));
    assert_eq!(sim.connected(0), vec![b]);
    sim.run_for(Duration::from_millis(200));
    assert!(sim.connected(0).is_empty());
    assert!(sim.nodes[0]
        .close_reasons
        .contains(&shoal_mesh::proto::CloseReason::HeartbeatTimeout));
}

#[test]
fn static_peer_restarted_with_new_id_is_redialed_and_reconnected() {
    // Node 1 keeps a static link to node 0.
    let mut sim = topology(41, 2, &[(0, 1)]);
    let old = sim.id(0);
    assert_eq!(sim.connected(1), vec![old]);
    sim.restart_node(0);
    let new = sim.id(0);
    assert_ne!(old, new);
    sim.run_for(Duration::from_secs(2));
    assert_eq!(sim.connected(1), vec![new]);
    let ev = &sim.nodes[1].peer_events;
    let disc = ev
        .iter()
        .position(|e| *e == PeerEvent::Disconnected { peer: old })
        .unwrap();
    let conn = ev
        .iter()
        .position(|e| matches!(e, PeerEvent::Connected { peer, .. } if *peer == new))
        .unwrap();
    assert!(disc < conn);
    // The endpoint was redialed by name, not by the old id's address.
    assert!(sim.nodes[1]
        .dial_log
        .iter()
        .all(|(_, t)| *t == DialTarget::Endpoint(format!("node0:{PORT}"))));
    // The old id is no longer static, so it is eventually Lost; the new one never is.
    sim.run_for(Duration::from_secs(10));
    assert!(sim.nodes[1]
        .peer_events
        .contains(&PeerEvent::Lost { peer: old }));
    assert_eq!(sim.nodes[1].pm.peer_state(&new), Some(PeerState::Connected));
}

#[test]
fn static_peer_is_never_lost_and_keeps_being_redialed() {
    let mut sim = topology(42, 2, &[(0, 1)]);
    let a = sim.id(0);
    sim.stop_node(0);
    sim.run_for(Duration::from_secs(60));
    assert_eq!(
        sim.nodes[1].pm.peer_state(&a),
        Some(PeerState::Disconnected)
    );
    assert!(!sim.nodes[1]
        .peer_events
        .iter()
        .any(|e| matches!(e, PeerEvent::Lost { .. })));
    let dials_before = sim.nodes[1].dial_log.len();
    sim.run_for(Duration::from_secs(120));
    assert!(
        sim.nodes[1].dial_log.len() >= dials_before + 3,
        "redials continue at the cap"
    );
    sim.revive_node(0);
    sim.run_for(Duration::from_secs(35));
    assert_eq!(sim.connected(1), vec![a]);
}

#[test]
fn seeds_are_dialed_only_while_isolated() {
    let mut sim = Sim::new(51);
    sim.add_node(cfg()); // 0: the seed
    let mut c = cfg();
    c.seed_peers = vec![format!("node0:{PORT}"), "nowhere:7000".to_owned()];
    sim.add_node(c); // 1
    sim.start_all();
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim.connected(1), vec![sim.id(0)]);
    let seed_dials = |sim: &Sim| {
        sim.nodes[1]
            .dial_log
            .iter()
            .filter(|(_, t)| *t == DialTarget::Endpoint("nowhere:7000".into()))
            .count()
    };
    assert_eq!(seed_dials(&sim), 1, "every seed is dialed at start");
    // Connected: the failed seed is not retried.
    sim.run_for(Duration::from_secs(60));
    assert_eq!(seed_dials(&sim), 1);
    // Isolated: seeds are retried (with backoff) until a link exists again.
    sim.stop_node(0);
    sim.run_for(Duration::from_secs(10));
    assert!(seed_dials(&sim) >= 3, "got {}", seed_dials(&sim));
    sim.revive_node(0);
    sim.run_for(Duration::from_secs(40));
    assert_eq!(sim.connected(1).len(), 1);
    let n = seed_dials(&sim);
    sim.run_for(Duration::from_secs(60));
    assert_eq!(seed_dials(&sim), n);
}

#[test]
fn backoff_grows_and_resets_after_a_handshake() {
    let mut sim = Sim::new(61);
    sim.add_node(cfg()); // 0, down at first
    let mut c = cfg();
    c.static_peers = vec![format!("node0:{PORT}")];
    sim.add_node(c);
    sim.start_node(1);
    sim.run_for(Duration::from_secs(20));
    let times: Vec<Instant> = sim.nodes[1].dial_log.iter().map(|(t, _)| *t).collect();
    let gaps: Vec<u128> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect();
    // Each gap = dial failure (1 ms) + min(500 << attempt, 30000) + jitter up to 20%.
    for (k, g) in gaps.iter().take(5).enumerate() {
        let base = 500u128 << k;
        assert!(*g >= base && *g <= base + base / 5 + 2, "gap {k} = {g} ms");
    }
    // A successful handshake resets the counter: the next drop redials after ~500 ms.
    sim.revive_node(0);
    sim.run_for(Duration::from_secs(40));
    assert_eq!(sim.connected(1), vec![sim.id(0)]);
    let before = sim.nodes[1].dial_log.len();
    sim.cut(0, 1);
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.nodes[1].dial_log.len(), before + 1);
    let (t, _) = sim.nodes[1].dial_log[before];
    let since_cut = t - (sim.now - Duration::from_secs(1));
    assert!(since_cut <= Duration::from_millis(602), "{since_cut:?}");
    assert_eq!(sim.connected(1).len(), 1);
}

#[test]
fn discovered_peer_is_redialed_only_while_announced() {
    let mut sim = Sim::new(71);
    let mut c = cfg();
    c.discovery = true;
    sim.add_node(c.clone());
    sim.add_node(c);
    sim.start_all();
    sim.run_for(Duration::from_secs(2));
    // Node 1 keeps running but its announces and connections no longer reach node 0.
    sim.partition(0, 1);
    sim.cut(0, 1);
    sim.run_for(Duration::from_secs(30));
    let dials_to_b: Vec<_> = sim.nodes[0]
        .dial_log
        .iter()
        .filter(|(t, _)| *t > sim.start + Duration::from_secs(2))
        .collect();
    // Redials happen within peer_lost_timeout of the last announce, then stop (Lost).
    assert!(!dials_to_b.is_empty());
    assert!(dials_to_b
        .iter()
        .all(|(t, _)| *t <= sim.start + Duration::from_secs(2) + Duration::from_millis(5100)));
    assert!(sim.nodes[0]
        .peer_events
        .contains(&PeerEvent::Lost { peer: sim.id(1) }));
}

#[test]
fn discovered_peer_restarted_with_new_id_replaces_the_old_one() {
    let mut sim = Sim::new(81);
    let mut c = cfg();
    c.discovery = true;
    sim.add_node(c.clone());
    sim.add_node(c);
    sim.start_all();
    sim.run_for(Duration::from_secs(2));
    let old = sim.id(1);
    sim.restart_node(1);
    let new = sim.id(1);
    sim.run_for(Duration::from_secs(8));
    assert_eq!(sim.connected(0), vec![new]);
    assert_eq!(sim.link_count(0), 1);
    let ev = &sim.nodes[0].peer_events;
    assert!(ev.contains(&PeerEvent::Disconnected { peer: old }));
    assert!(ev.contains(&PeerEvent::Lost { peer: old }));
    assert_eq!(sim.nodes[0].pm.peer_state(&old), None);
    // Messages flow to the new incarnation exactly once.
    sim.broadcast(0, b"hello-new");
    sim.run_for(Duration::from_millis(10));
    assert_eq!(sim.count_delivered(1, b"hello-new"), 1);
}
