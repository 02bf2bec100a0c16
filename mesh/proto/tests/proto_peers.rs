//! The peer table: disconnect then Lost, static and seed peers, backoff, strangers and
//! floods, event pairing (dial races and late claims: `proto_peer_races.rs`).

mod proto_sim;

use proto_sim::*;
use rand::rngs::StdRng;
use rand::SeedableRng;
use shoal_proto::config::MeshConfig;
use shoal_proto::control::ControlEvent;
use shoal_proto::PeerId;
use shoal_proto::{DialTarget, LinkId, PeerAction, PeerEvent, PeerManager, PeerState};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

#[test]
fn stopped_peer_is_disconnected_then_lost() {
    let mut sim = Sim::new(31);
    let mut c = cfg();
    c.scouting = true;
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
        sim.nodes[0].core.peers().peer_state(&b),
        Some(PeerState::Disconnected)
    );
    assert!(
        matches!(sim.nodes[0].peer_events.last(), Some(ControlEvent::PeerDisconnected { peer }) if *peer == b)
    );
    // Still known (it may come back) until peer_lost_timeout passes without an announce.
    sim.run_for(Duration::from_secs(3));
    assert!(sim.nodes[0].core.peers().peer_state(&b).is_some());
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.nodes[0].core.peers().peer_state(&b), None);
    assert!(
        matches!(sim.nodes[0].peer_events.last(), Some(ControlEvent::PeerLost { peer }) if *peer == b)
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
        .contains(&shoal_proto::CloseReason::HeartbeatTimeout));
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
        .position(|e| *e == ControlEvent::PeerDisconnected { peer: old })
        .unwrap();
    let conn = ev
        .iter()
        .position(|e| matches!(e, ControlEvent::PeerConnected { peer } if *peer == new))
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
        .contains(&ControlEvent::PeerLost { peer: old }));
    assert_eq!(
        sim.nodes[1].core.peers().peer_state(&new),
        Some(PeerState::Connected)
    );
}

#[test]
fn static_peer_is_never_lost_and_keeps_being_redialed() {
    let mut sim = topology(42, 2, &[(0, 1)]);
    let a = sim.id(0);
    sim.stop_node(0);
    sim.run_for(Duration::from_secs(60));
    assert_eq!(
        sim.nodes[1].core.peers().peer_state(&a),
        Some(PeerState::Disconnected)
    );
    assert!(!sim.nodes[1]
        .peer_events
        .iter()
        .any(|e| matches!(e, ControlEvent::PeerLost { .. })));
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
    c.scouting = true;
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
        .contains(&ControlEvent::PeerLost { peer: sim.id(1) }));
}

#[test]
fn discovered_peer_restarted_with_new_id_replaces_the_old_one() {
    let mut sim = Sim::new(81);
    let mut c = cfg();
    c.scouting = true;
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
    assert!(ev.contains(&ControlEvent::PeerDisconnected { peer: old }));
    assert!(ev.contains(&ControlEvent::PeerLost { peer: old }));
    assert_eq!(sim.nodes[0].core.peers().peer_state(&old), None);
    // Messages flow to the new incarnation exactly once.
    sim.broadcast(0, b"hello-new");
    sim.run_for(Duration::from_millis(10));
    assert_eq!(sim.count_delivered(1, b"hello-new"), 1);
}

/// Every dial the table asks for fails at once (the fake addresses refuse); returns how many.
fn refuse_dials(pm: &mut PeerManager<StdRng>, now: Instant) -> usize {
    let mut n = 0;
    for a in drain(pm) {
        if let PeerAction::Dial { link, .. } = a {
            n += 1;
            pm.on_closed(link, now);
        }
    }
    n
}

/// Issue 15 item 12, first order: the peer's announce arrives before its connection. It is
/// discovered, then connected.
#[test]
fn announced_peer_is_discovered_before_it_is_connected() {
    let now = Instant::now();
    let (me, peer) = (PeerId([1; 16]), PeerId([2; 16]));
    let mut pm = PeerManager::new(me, &MeshConfig::default(), StdRng::seed_from_u64(1), now);
    pm.on_announce(peer, addr(7), now);
    let link = pm.on_accepted(None, now).unwrap();
    pm.on_handshake(link, peer, None, 7000, true, now);
    pm.on_announce(peer, addr(7), now);
    assert_eq!(
        events(&mut pm),
        [
            PeerEvent::PeerDiscovered {
                peer,
                addr: addr(7)
            },
            PeerEvent::Connected { peer, link }
        ]
    );
}

/// Issue 15 item 12, other order: the connection arrives before any announce. The first
/// announce still discovers the peer (it never did), once.
#[test]
fn peer_connected_before_its_first_announce_is_discovered_when_it_arrives() {
    let now = Instant::now();
    let (me, peer) = (PeerId([1; 16]), PeerId([2; 16]));
    let mut pm = PeerManager::new(me, &MeshConfig::default(), StdRng::seed_from_u64(1), now);
    let link = pm.on_accepted(None, now).unwrap();
    pm.on_handshake(link, peer, None, 7000, true, now);
    assert_eq!(events(&mut pm), [PeerEvent::Connected { peer, link }]);
    pm.on_announce(peer, addr(7), now);
    pm.on_announce(peer, addr(7), now + Duration::from_secs(1));
    assert_eq!(
        events(&mut pm),
        [PeerEvent::PeerDiscovered {
            peer,
            addr: addr(7)
        }]
    );
}

/// Random inputs in random order (announces, accepts, dials, handshakes naming the expected
/// or another peer, closes, timeouts, a small table so eviction happens): per peer, events
/// always pair up.
#[test]
fn random_input_sequences_keep_events_paired() {
    use rand::Rng;
    for seed in 0..200u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut now = Instant::now();
        let me = PeerId([0; 16]);
        let ids: Vec<PeerId> = (1..=8u8).map(|i| PeerId([i; 16])).collect();
        let cfg = MeshConfig {
            max_peers: 4,
            max_pending_handshakes: 3,
            ..MeshConfig::default()
        };
        let mut pm = PeerManager::new(me, &cfg, StdRng::seed_from_u64(seed), now);
        // Connections in their handshake: link and the peer its dial targeted (None:
        // inbound); established ones.
        let mut live: Vec<(LinkId, Option<usize>)> = Vec::new();
        let mut up: Vec<LinkId> = Vec::new();
        let mut connected = std::collections::HashMap::<PeerId, bool>::new();
        let mut discovered = std::collections::HashMap::<PeerId, bool>::new();
        let mut log = Vec::new();
        for _ in 0..400 {
            match rng.gen_range(0..10) {
                0 | 1 => {
                    let i = rng.gen_range(0..ids.len());
                    pm.on_announce(ids[i], addr(i as u32 + 1), now);
                }
                2 => {
                    if let Some(l) = pm.on_accepted(None, now) {
                        live.push((l, None));
                    }
                }
                3..=5 if !live.is_empty() => {
                    let (l, target) = live.swap_remove(rng.gen_range(0..live.len()));
                    let peer = match target {
                        Some(i) if rng.gen_bool(0.8) => ids[i],
                        _ => ids[rng.gen_range(0..ids.len())],
                    };
                    pm.on_handshake(l, peer, None, 7000, true, now);
                    up.push(l);
                }
                6 if !live.is_empty() => {
                    let (l, _) = live.swap_remove(rng.gen_range(0..live.len()));
                    pm.on_closed(l, now);
                }
                7 if !up.is_empty() => {
                    let l = up.swap_remove(rng.gen_range(0..up.len()));
                    pm.on_closed(l, now);
                }
                _ => {
                    now += Duration::from_millis(rng.gen_range(1..3000));
                    pm.handle_timeout(now);
                }
            }
            while let Some(a) = pm.poll_action() {
                match a {
                    PeerAction::Dial {
                        link,
                        target: DialTarget::Addr(a),
                    } => {
                        let [_, _, _, i] = match a.ip() {
                            std::net::IpAddr::V4(v4) => v4.octets(),
                            _ => unreachable!(),
                        };
                        live.push((link, Some(i as usize - 1)));
                    }
                    PeerAction::Close { link, .. } | PeerAction::Retire { link, .. } => {
                        live.retain(|(l, _)| *l != link);
                        up.retain(|l| *l != link);
                    }
                    _ => {}
                }
            }
            while let Some(e) = pm.poll_event() {
                log.push(e.clone());
                let fail = |why: &str| panic!("seed {seed}: {why} at {e:?}; log {log:?}");
                match e {
                    PeerEvent::PeerDiscovered { peer, .. } => {
                        if discovered.insert(peer, true) == Some(true) {
                            fail("discovered twice");
                        }
                    }
                    PeerEvent::Lost { peer } => {
                        discovered.insert(peer, false);
                        if connected.get(&peer) == Some(&true) {
                            fail("lost while connected");
                        }
                    }
                    PeerEvent::Connected { peer, .. } => {
                        if connected.insert(peer, true) == Some(true) {
                            fail("connected twice");
                        }
                    }
                    PeerEvent::Disconnected { peer } => {
                        if connected.insert(peer, false) != Some(true) {
                            fail("disconnected without connected");
                        }
                    }
                }
            }
            assert!(pm.known_peers().count() <= cfg.max_peers);
        }
    }
}

/// Issue 15 item 6, sans-I/O: 100 000 fake announces (random ids, one source, then random
/// sources) over 10 s. Dials to never-linked peers stay within the configured budget, the
/// table within its ceiling, and a real peer's completed handshake is never refused because
/// of announce-only entries.
#[test]
fn fake_announce_flood_is_rate_limited_and_gives_way_to_real_peers() {
    let t0 = Instant::now();
    let me = PeerId([1; 16]);
    let cfg = MeshConfig {
        max_peers: 64,
        ..MeshConfig::default()
    };
    let (global, per_source) = (
        cfg.new_peer_rate as usize,
        cfg.new_peer_rate_per_source as usize,
    );
    let mut pm = PeerManager::new(me, &cfg, StdRng::seed_from_u64(5), t0);
    let secs = 10;
    let n = 100_000u32;
    let at = |i: u32| t0 + Duration::from_secs(secs) * i / n;
    let mut dialed = 0;
    let source = "10.6.6.6".parse().unwrap();
    for i in 0..n {
        let now = at(i);
        pm.on_announce(PeerId::random(), SocketAddr::new(source, 9), now);
        if i % 100 == 0 {
            pm.handle_timeout(now);
        }
        dialed += refuse_dials(&mut pm, now);
    }
    // One source: its bucket (one second's worth) plus its rate over the run.
    assert!(dialed <= per_source * (1 + secs as usize), "{dialed} dials");
    assert!(
        dialed >= per_source,
        "the budget is used, not zero: {dialed}"
    );
    assert!(pm.known_peers().count() <= cfg.max_peers);
    // Spoofed sources: the node-wide budget holds.
    let t1 = at(n);
    let mut dialed = 0;
    for i in 0..n {
        let now = t1 + Duration::from_secs(secs) * i / n;
        pm.on_announce(PeerId::random(), addr(0x0a00_0000 + i), now);
        if i % 100 == 0 {
            pm.handle_timeout(now);
        }
        dialed += refuse_dials(&mut pm, now);
    }
    assert!(dialed <= global * (1 + secs as usize), "{dialed} dials");
    let s = pm.stats();
    assert!(s.announces_rate_limited >= 2 * u64::from(n) - 1000, "{s:?}");
    assert!(s.peers_evicted > 0, "{s:?}");
    assert_eq!(pm.known_peers().count(), cfg.max_peers);
    // A real peer connects in: the table is full of announce-only fakes, one gives way.
    let now = t1 + Duration::from_secs(secs);
    let real = PeerId([7; 16]);
    let link = pm
        .on_accepted(Some("10.0.0.7".parse().unwrap()), now)
        .unwrap();
    let _ = events(&mut pm);
    pm.on_handshake(link, real, None, 7000, true, now);
    assert_eq!(pm.link_of(&real), Some(link));
    assert_eq!(pm.peer_state(&real), Some(PeerState::Connected));
    let ev = events(&mut pm);
    assert!(
        matches!(ev[..], [PeerEvent::Lost { .. }, PeerEvent::Connected { peer, .. }] if peer == real),
        "{ev:?}"
    );
    assert_eq!(pm.stats().peer_table_full, 0);
    assert_eq!(pm.known_peers().count(), cfg.max_peers);
    // Announced later, it is discovered; being linked, it is never evicted by fakes.
    pm.on_announce(real, addr(7), now);
    for i in 0..1000 {
        let later = now + Duration::from_secs(2) * i / 1000;
        pm.on_announce(PeerId::random(), addr(0x0b00_0000 + i), later);
    }
    assert_eq!(pm.link_of(&real), Some(link));
}

/// Issue 15 item 9, sans-I/O: idle inbound connections in their handshake cannot lock a
/// real peer out. Beyond `max_pending_handshakes`, a new connection evicts the oldest pending
/// one of the source holding the most; a full table of established links still refuses.
#[test]
fn idle_pending_handshakes_give_way_oldest_of_the_busiest_source_first() {
    let now = Instant::now();
    let me = PeerId([1; 16]);
    let cfg = MeshConfig {
        max_peers: 4,
        max_pending_handshakes: 4,
        ..MeshConfig::default()
    };
    let mut pm = PeerManager::new(me, &cfg, StdRng::seed_from_u64(5), now);
    let legit = Some("10.0.0.1".parse().unwrap());
    let idle = Some("10.0.0.9".parse().unwrap());
    let real = pm.on_accepted(legit, now).unwrap();
    let idles: Vec<LinkId> = (0..3).map(|_| pm.on_accepted(idle, now).unwrap()).collect();
    assert!(drain(&mut pm).is_empty());
    // Pool full: the oldest idle socket goes, not the older legitimate connection.
    let newer = pm.on_accepted(idle, now).unwrap();
    assert_eq!(
        drain(&mut pm),
        [PeerAction::Close {
            link: idles[0],
            goodbye: false
        }]
    );
    for _ in 0..100 {
        assert!(pm.on_accepted(idle, now).is_some());
    }
    assert_eq!(pm.stats().handshakes_evicted, 101);
    assert!(!drain(&mut pm)
        .iter()
        .any(|a| matches!(a, PeerAction::Close { link, .. } if *link == real)));
    pm.on_handshake(real, PeerId([2; 16]), None, 7000, true, now);
    assert_eq!(pm.established_count(), 1);
    // An evicted link's late close is ignored.
    pm.on_closed(newer, now);
    assert_eq!(pm.established_count(), 1);
    assert_eq!(pm.stats().conn_table_full, 0);
}
