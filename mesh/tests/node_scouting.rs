//! Multicast discovery over loopback: the interface address 127.0.0.1 is named explicitly for
//! joining and sending, as the v1 wire needs on one machine
//! (`mesh/proto/protocol/v1-wire.md`, "Scouting datagram").

mod node_support;

use node_support::*;
use shoal_mesh::{Event, PeerId};
use std::net::Ipv4Addr;
use std::time::Duration;

#[test]
fn nodes_find_each_other_by_multicast_on_loopback() {
    let port = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // A group of our own so that parallel test runs never meet.
    let group = format!("node-discovery-{}", rand::random::<u64>());
    let node = || {
        Node::start(
            fast()
                .scouting(true)
                .group_name(group.clone())
                .multicast_interface(Ipv4Addr::LOCALHOST)
                .multicast_group(Ipv4Addr::new(239, 255, 42, 99))
                .multicast_port(port)
                .announce_interval(Duration::from_millis(100)),
        )
    };
    let (a, b) = (node(), node());
    wait_until(10, "A and B discover and connect", || {
        a.connected_to(&b) && b.connected_to(&a)
    });
    // Discovered whichever came first at A, B's announce or B's connection (the recorder
    // drains the events on its own thread: wait for it).
    wait_until(10, "A reports B discovered", || {
        a.rec
            .has(|e| matches!(e, Event::PeerDiscovered { peer, .. } if *peer == b.id()))
    });
    assert!(
        !a.rec.has(|e| matches!(e, Event::Error { .. })),
        "discovery set up without errors: {:?}",
        a.rec.events()
    );
    // A node in another group hears the announces but ignores them.
    let other = Node::start(
        fast()
            .scouting(true)
            .group_name("some-other-group")
            .multicast_interface(Ipv4Addr::LOCALHOST)
            .multicast_port(port)
            .announce_interval(Duration::from_millis(100)),
    );
    b.mesh.broadcast_blocking("ping").unwrap();
    wait_until(10, "A delivers", || a.rec.messages().len() == 1);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        other.mesh.known_peers().is_empty(),
        "another group's node stays apart"
    );
}

#[test]
fn multicast_that_cannot_be_set_up_is_an_error_event_not_a_failure() {
    let a = Node::start(fast());
    // 192.0.2.1 (TEST-NET-1) is no interface of this host: joining through it fails.
    let b = Node::start(
        fast()
            .scouting(true)
            .multicast_interface(Ipv4Addr::new(192, 0, 2, 1))
            .static_peer(ep(a.port())),
    );
    wait_until(10, "B reports discovery as unavailable", || {
        b.rec.has(|e| {
            matches!(
                e,
                Event::Error {
                    kind: shoal_mesh::ErrorKind::Scouting,
                    ..
                }
            )
        })
    });
    wait_until(10, "B still connects to its static peer", || {
        a.connected_to(&b) && b.connected_to(&a)
    });
}

/// Issue 15 item 6: 5 000 fake announces with random ids, all naming one port. The node must
/// not dial every fake (an amplifier aimed at that port), must keep a table of fakes from
/// locking out a real node, and must count what it refused.
#[test]
fn fake_announce_flood_neither_amplifies_nor_locks_out_a_real_node() {
    use std::net::{TcpListener, UdpSocket};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Instant;
    let port = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let group = format!("node-flood-{}", rand::random::<u64>());
    let per_source = 10u32;
    let node = || {
        fast()
            .scouting(true)
            .group_name(group.clone())
            .multicast_interface(Ipv4Addr::LOCALHOST)
            .multicast_port(port)
            .announce_interval(Duration::from_millis(100))
            .max_peers(8usize)
            .new_peer_rate_per_source(per_source)
    };
    // The victim of the amplifier: counts the connections the node opens to it.
    let victim = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    victim.set_nonblocking(true).unwrap();
    let victim_port = victim.local_addr().unwrap().port();
    let hits = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let counter = {
        let (hits, stop) = (hits.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                match victim.accept() {
                    Ok(_) => {
                        hits.fetch_add(1, Ordering::AcqRel);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        })
    };
    let a = Node::start(node());
    let tx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let fake = |id: PeerId| {
        let mut d = Vec::new();
        shoal_mesh::wire::Beacon::new(id, victim_port, &group, false)
            .encode_body(&mut d)
            .unwrap();
        d
    };
    // Every fake dialed takes a token: within any span, at most one bucket (one second's
    // worth) plus the rate times its length.
    let start = Instant::now();
    // The first fake that gets through shows that A's discovery socket is up.
    wait_until(10, "A hears announces", || {
        tx.send_to(&fake(PeerId::random()), ("127.0.0.1", port))
            .unwrap();
        std::thread::sleep(Duration::from_millis(10));
        !a.mesh.known_peers().is_empty()
    });
    for i in 0..5000 {
        tx.send_to(&fake(PeerId::random()), ("127.0.0.1", port))
            .unwrap();
        if i % 20 == 0 {
            // Pace a little so the socket buffer keeps them (a lost datagram floods no one).
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // Some datagrams may be lost to the socket's receive buffer; most arrive.
    wait_until(10, "A refused the fakes over the rate", || {
        a.mesh.stats().control.announces_rate_limited >= 2500
    });
    let b = Node::start(node());
    wait_until(10, "the real node links despite the flood", || {
        a.connected_to(&b) && b.connected_to(&a)
    });
    stop.store(true, Ordering::Release);
    counter.join().unwrap();
    let elapsed = start.elapsed().as_secs_f64();
    let s = a.mesh.stats().control;
    // Only fakes name the victim's port, and every dial to a never-linked peer takes one
    // token from the bucket of 127.0.0.1 (the fakes' source).
    let budget = f64::from(per_source) * (1.0 + elapsed);
    let hits = hits.load(Ordering::Acquire);
    assert!(
        (hits as f64) <= budget,
        "{hits} connections to the victim in {elapsed:.1} s (budget {budget}): {s:?}"
    );
    assert!(a.mesh.known_peers().len() <= 8);
    assert!(s.peers_evicted >= 1, "{s:?}");
    assert_eq!(s.peer_table_full, 0, "{s:?}");
}
