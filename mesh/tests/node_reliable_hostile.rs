//! Reliable topics against a stranger, on live nodes in one process (plaintext, loopback): a
//! hand-driven capable peer (its Hello advertises extended frames) joins the writer's tree
//! with records of its own making and sends reliability frames naming a real reader (issue
//! 24, findings 6 and 9). The real reader still gets every sample once, in order; the
//! forgeries are refused or held, and counted. Every wait is for a condition, never a sleep.

mod node_support;

use node_support::samples::{
    acknack_and_fence, lost, matched, prefix, seqs, total, wait_complete, write_to,
};
use node_support::wiring::RawPeer;
use node_support::{ep, plain_hello, quiet, wait_connected, wait_until, Node};
use shoal_discovery::record::{encode_endpoint, encode_participant};
use shoal_discovery::types::{EndpointInfo, EntityId, Guid, ParticipantInfo, TopicName, TypeName};
use shoal_mesh::topics::{
    EndpointGuid, EndpointKind, Limit, QosDuration, Reliability, ReliabilityKind, ResourceLimits,
    Topic,
};
use shoal_mesh::wire::{
    Discovery, DiscoveryEntry, Frame, Gap, Heartbeat, Membership, ShoalExtension,
    SAMPLES_FRAME_TYPE,
};
use shoal_mesh::{MeshBuilder, PeerId};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const T: &str = "reliable/hostile";

/// Quick announcements, membership records and participants that stay fresh for the test's
/// length (the stranger sends its records once).
fn node() -> MeshBuilder {
    quiet(Duration::from_millis(200))
}

/// A reliable keep-all writer's topic of `max_samples`, whose writes wait at most 5 s.
fn keep_all(max_samples: u32) -> Topic {
    Topic::new(T, "Blob")
        .reliable()
        .history_keep_all()
        .resource_limits(ResourceLimits {
            max_samples: Limit::AtMost(max_samples),
            ..ResourceLimits::default()
        })
        .reliability(Reliability {
            kind: ReliabilityKind::Reliable,
            max_blocking_time: QosDuration::from_secs(5),
        })
}

/// The stranger's Discovery frame: its participant (lease 60 s) and `endpoints`, one
/// complete announce cycle.
fn announce(me: PeerId, endpoints: &[EndpointInfo]) -> Frame {
    let mut p = ParticipantInfo::new(prefix(me), "stranger");
    p.lease_duration = QosDuration::from_secs(60);
    let mut entries = vec![DiscoveryEntry::Record(encode_participant(&p).unwrap())];
    for e in endpoints {
        entries.push(DiscoveryEntry::Record(encode_endpoint(e).unwrap()));
    }
    Frame::Discovery(Discovery {
        origin: me,
        seq: 1,
        ttl: 8,
        cycle: 1,
        part: 0,
        parts: 1,
        entries,
    })
}

/// The stranger's membership record: its neighbours.
fn membership(me: PeerId, neighbours: Vec<PeerId>) -> Frame {
    Frame::Membership(Membership {
        origin: me,
        version: 1,
        neighbours,
    })
}

/// A best-effort reader of the test's topic on the stranger's node.
fn best_effort_reader(me: PeerId) -> (EndpointGuid, EndpointInfo) {
    let spec = Topic::new(T, "Blob")
        .validate(EndpointKind::Reader)
        .unwrap();
    assert_eq!(spec.qos.reliability.kind, ReliabilityKind::BestEffort);
    let guid = Guid::new(prefix(me), EntityId([0, 0, 1, 0x07]));
    let mut info = EndpointInfo::new(
        guid,
        EndpointKind::Reader,
        TopicName::new(T).unwrap(),
        TypeName::new("Blob").unwrap(),
        spec.type_hash,
    );
    info.qos = spec.qos;
    let mut g = [0; 16];
    g[..12].copy_from_slice(&guid.prefix.0);
    g[12..].copy_from_slice(&guid.entity.0);
    (g, info)
}

/// A second link of the stranger, under the id of its [`RawPeer`] (which dials with an id
/// of its own making): a capable Hello, then heartbeats; what the node sends is read and
/// dropped.
struct SecondLink {
    stop: Arc<AtomicBool>,
}

impl SecondLink {
    fn dial(port: u16, id: PeerId) -> SecondLink {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut hello = plain_hello();
        hello.node_id = id;
        hello.shoal = Some(ShoalExtension::current());
        let mut bytes = Vec::new();
        Frame::Hello(hello).encode(&mut bytes).unwrap();
        Frame::Heartbeat.encode(&mut bytes).unwrap();
        s.write_all(&bytes).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            let mut beat = Vec::new();
            Frame::Heartbeat.encode(&mut beat).unwrap();
            let mut buf = vec![0u8; 64 * 1024];
            while !flag.load(Ordering::Acquire) {
                if s.write_all(&beat).is_err() {
                    break;
                }
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
        });
        SecondLink { stop }
    }
}

impl Drop for SecondLink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Finding 6, live: a stranger linked to the writer's node announces a best-effort reader
/// of the topic (so it is on the writer's tree: it gets the samples) and sends the writer's
/// node an AckNack naming the real reliable reader on B, `count = u32::MAX`, `base = next`.
/// Before, it was taken (`reliable_wrong_link` +0): B's own AckNacks were stale from then on
/// and the keep-all writer of 64 samples filled up for good. Now it comes on a link that
/// does not lead to B: refused and counted, and the writer goes on at B's pace.
#[test]
fn an_acknack_for_another_nodes_reader_from_a_stranger_on_the_tree_is_refused() {
    let a = Node::start(node());
    let b = Node::start(node().static_peer(ep(a.port())));
    let nodes = [a, b];
    wait_connected(&nodes, &[(0, 1)]);
    let (a, b) = (&nodes[0], &nodes[1]);
    let mut w = a.mesh.writer(keep_all(64)).unwrap();
    let r = b.mesh.reader(Topic::new(T, "Blob").reliable()).unwrap();
    let (wg, rg) = (w.guid(), r.guid());
    wait_until(20, "matched on both sides", || {
        matched(a, wg, rg) && matched(b, wg, rg)
    });

    let stranger = RawPeer::dial_capable(a.port());
    wait_until(10, "A links with the stranger", || {
        a.mesh.connected_peers().contains(&stranger.id)
    });
    let (sg, reader) = best_effort_reader(stranger.id);
    stranger.send_frame(membership(stranger.id, vec![a.id()]));
    stranger.send_frame(announce(stranger.id, &[reader]));
    wait_until(20, "A matches the stranger's reader", || matched(a, wg, sg));
    // On the tree: the stranger gets the samples (as many as it takes for the route to
    // reach every shard).
    let mut last = 0;
    wait_until(30, "the stranger gets the writer's samples", || {
        last += 10;
        write_to(&mut w, last);
        stranger.types().contains(&SAMPLES_FRAME_TYPE)
    });
    wait_complete(b, rg, wg, last);

    let before = total(a);
    for f in acknack_and_fence(wg, rg, sg, w.next_seq()) {
        stranger.send_frame(f);
    }
    wait_until(20, "A handles both AckNacks", || {
        total(a).reliable_acks_ignored > before.reliable_acks_ignored
    });
    assert_eq!(
        total(a).reliable_wrong_link - before.reliable_wrong_link,
        1,
        "the AckNack naming B's reader is refused"
    );
    // The writer still goes at B's pace: 500 more through a history of 64.
    write_to(&mut w, last + 500);
    wait_complete(b, rg, wg, last + 500);
    assert_eq!(lost(b, rg), 0);
    assert!(!stranger.closed(), "well-formed frames keep their link");
}

/// Finding 9, live: a line A – R – B (the writer on A, a reliable reader on B) and a
/// stranger linked to A and to B that says so (its membership record lists both, and it
/// announces a participant): from B's view it is as close to A as R, so B takes A's frames
/// from it. It sends B a Heartbeat to `u64::MAX` and a Gap for B's reader from the next seq
/// to `u64::MAX`. Before, the Heartbeat made the writer's own look backwards and the Gap
/// moved the reader's next seq to `u64::MAX` for good (every later sample a duplicate, a loss
/// reported; in a debug build the reader's shard panicked on an overflow). Now both are held
/// (counted), and the writer's next samples arrive, once, in order.
#[test]
fn a_gap_and_a_heartbeat_to_the_end_of_time_from_a_stranger_are_held() {
    // R's id is the lowest there is, so B's path to A goes through R, not the stranger.
    let a = Node::start(node());
    let b = Node::start(node());
    let mut low = [0u8; 16];
    low[15] = 1;
    let relay = Node::start(
        node()
            .node_id(PeerId(low))
            .static_peer(ep(a.port()))
            .static_peer(ep(b.port())),
    );
    let nodes = [a, b, relay];
    wait_connected(&nodes, &[(0, 2), (1, 2)]);
    let (a, b) = (&nodes[0], &nodes[1]);
    let mut w = a.mesh.writer(keep_all(1024)).unwrap();
    let r = b.mesh.reader(Topic::new(T, "Blob").reliable()).unwrap();
    let (wg, rg) = (w.guid(), r.guid());
    wait_until(20, "matched on both sides", || {
        matched(a, wg, rg) && matched(b, wg, rg)
    });

    let stranger = RawPeer::dial_capable(b.port());
    let _to_a = SecondLink::dial(a.port(), stranger.id);
    wait_until(10, "A and B link with the stranger", || {
        a.mesh.connected_peers().contains(&stranger.id)
            && b.mesh.connected_peers().contains(&stranger.id)
    });
    stranger.send_frame(membership(stranger.id, vec![a.id(), b.id()]));
    stranger.send_frame(announce(stranger.id, &[]));
    let mut last = 0;
    wait_until(30, "B has the writer's first samples", || {
        last += 10;
        write_to(&mut w, last);
        seqs(b, rg, wg).len() as u64 >= last - 10
    });
    wait_complete(b, rg, wg, last);

    // B takes the stranger's frames once its view has the stranger as close to A as R
    // (membership and participant records on their way); until then they are refused,
    // counted as wrong-link. The Heartbeat goes again each time one is refused, until one
    // is taken: held.
    let before = total(b);
    let heartbeat = Frame::WriterHeartbeat(Heartbeat {
        ttl: 8,
        writer: wg,
        first: 1,
        last: u64::MAX,
    });
    let mut sent = 0;
    wait_until(30, "B takes the stranger's Heartbeat and holds it", || {
        let now = total(b);
        if now.reliable_held > before.reliable_held {
            return true;
        }
        if now.reliable_wrong_link - before.reliable_wrong_link == sent {
            stranger.send_frame(heartbeat.clone());
            sent += 1;
        }
        false
    });
    let held = total(b).reliable_held;
    assert_eq!(held - before.reliable_held, 1);
    stranger.send_frame(Frame::Gap(Gap {
        ttl: 8,
        writer: wg,
        reader: rg,
        first: w.next_seq(),
        last: u64::MAX,
    }));
    wait_until(20, "B holds the Gap", || total(b).reliable_held > held);
    write_to(&mut w, last + 200);
    wait_complete(b, rg, wg, last + 200);
    assert_eq!(lost(b, rg), 0, "nothing reported lost");
    assert!(!stranger.closed(), "well-formed frames keep their link");
}
