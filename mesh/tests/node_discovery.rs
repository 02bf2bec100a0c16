//! Multicast discovery over loopback: the interface address 127.0.0.1 is named explicitly for
//! joining and sending, as `mesh-v1.md` prescribes for one machine.

mod node_support;

use node_support::*;
use shoal_mesh::Event;
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
                .discovery(true)
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
    assert!(a
        .rec
        .has(|e| matches!(e, Event::PeerDiscovered { peer, .. } if *peer == b.id())));
    assert!(
        !a.rec.has(|e| matches!(e, Event::Error { .. })),
        "discovery set up without errors: {:?}",
        a.rec.events()
    );
    // A node in another group hears the announces but ignores them.
    let other = Node::start(
        fast()
            .discovery(true)
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
            .discovery(true)
            .multicast_interface(Ipv4Addr::new(192, 0, 2, 1))
            .static_peer(ep(a.port())),
    );
    wait_until(10, "B reports discovery as unavailable", || {
        b.rec.has(|e| {
            matches!(
                e,
                Event::Error {
                    kind: shoal_mesh::ErrorKind::Discovery,
                    ..
                }
            )
        })
    });
    wait_until(10, "B still connects to its static peer", || {
        a.connected_to(&b) && b.connected_to(&a)
    });
}
