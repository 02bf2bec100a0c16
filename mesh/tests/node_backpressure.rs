//! Live nodes over 127.0.0.1: bounded outbound queues, the overflow policies and loss
//! accounting when a receiver is slow (its event queue is small and not read for a while).

mod node_support;

use node_support::*;
use shoal_mesh::{Event, EventReceiver, OverflowPolicy};
use std::time::{Duration, Instant};

const SIZE: usize = 1000;

fn payload(seq: u64) -> Vec<u8> {
    let mut p = vec![0xabu8; SIZE];
    p[..8].copy_from_slice(&seq.to_be_bytes());
    p
}

/// Reads Message events until `want` arrived (bounded wait); returns their sequence numbers.
fn drain(rx: &mut EventReceiver, want: u64, diag: impl Fn() -> String) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seqs = Vec::new();
    while (seqs.len() as u64) < want {
        assert!(
            Instant::now() < deadline,
            "timed out: received {} of {want} messages; {}",
            seqs.len(),
            diag()
        );
        if let Some(Event::Message { payload, .. }) = rx.recv_timeout(Duration::from_millis(100)) {
            assert_eq!(payload.len(), SIZE, "payload length changed in transit");
            assert!(
                payload[8..].iter().all(|b| *b == 0xab),
                "payload corrupted in transit"
            );
            seqs.push(u64::from_be_bytes(payload[..8].try_into().unwrap()));
        }
    }
    seqs
}

fn pair(policy: OverflowPolicy, bound: usize) -> (Node, shoal_mesh::Mesh, EventReceiver) {
    pair_on(policy, bound, 1)
}

/// With `shards = 2` the ids are chosen so that the sender originates on shard 1 while its
/// link to the receiver lives on shard 0: every frame crosses shards.
fn pair_on(
    policy: OverflowPolicy,
    bound: usize,
    shards: usize,
) -> (Node, shoal_mesh::Mesh, EventReceiver) {
    let mut rb = fast().event_queue_capacity(64);
    let mut sb = fast().shards(shards);
    if shards == 2 {
        rb = rb.node_id(shoal_mesh::PeerId([2; 16]));
        sb = sb.node_id(shoal_mesh::PeerId([1; 16]));
    }
    sender_and_receiver(
        sb.overflow_policy(policy).max_outbound_queue_bytes(bound),
        rb,
    )
}

#[test]
fn drop_newest_loses_exactly_what_the_counters_say() {
    const N: u64 = 30_000;
    let (s, r, mut rx) = pair(OverflowPolicy::DropNewest, 64 * 1024);
    for seq in 0..N {
        s.mesh.broadcast_blocking(payload(seq)).expect("accepted");
    }
    wait_until(20, "sender processed every message", || {
        s.mesh.stats().total.originated == N
    });
    let st = s.mesh.stats().total;
    let dropped = st.dropped_queue_full;
    assert!(
        dropped > 0,
        "30 MB into a stalled receiver must overflow a 64 KiB queue"
    );
    assert_eq!(st.dropped_no_route, 0);
    assert!(st.peak_queued_bytes <= 64 * 1024);
    let seqs = drain(&mut rx, N - dropped, || {
        format!(
            "sender {:?} receiver {:?}",
            s.mesh.stats().total,
            r.stats().total
        )
    });
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "one link keeps order and never duplicates"
    );
    // Nothing beyond what the counters account for arrives.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !matches!(rx.try_recv(), Some(Event::Message { .. })),
        "more messages arrived than sent minus counted drops"
    );
    let rs = r.stats().total;
    assert_eq!(
        rs.delivered,
        N - dropped,
        "sent = delivered + counted drops"
    );
    assert_eq!(
        rs.malformed_frames + rs.oversize_frames,
        0,
        "the stream stayed valid"
    );
    assert!(
        r.connected_peers().contains(&s.id()),
        "a busy receiver is not declared dead"
    );
}

#[test]
fn block_keeps_queued_bytes_under_the_bound_and_loses_nothing() {
    block(1);
}

#[test]
fn block_across_shards_keeps_the_bound_too() {
    block(2);
}

fn block(shards: usize) {
    const N: u64 = 20_000;
    const BOUND: usize = 32 * 1024;
    let (s, r, mut rx) = pair_on(OverflowPolicy::Block, BOUND, shards);
    let sender = s.mesh.clone();
    let t = std::thread::spawn(move || {
        for seq in 0..N {
            sender.broadcast_blocking(payload(seq)).expect("accepted");
        }
    });
    // The receiver reads nothing until the sender's queue has filled up.
    wait_until(20, "sender's link queue fills", || {
        s.mesh.stats().total.peak_queued_bytes as usize > BOUND - 2 * (SIZE + 58)
    });
    // While the receiver still reads nothing, try_broadcast soon says Full instead of
    // waiting; the few it did accept meanwhile are extra messages that must arrive too.
    let mut extra = 0u64;
    wait_until(20, "try_broadcast reports a full queue", || {
        match s.mesh.try_broadcast(payload(u64::MAX)) {
            Ok(()) => {
                extra += 1;
                false
            }
            Err(e) => {
                assert_eq!(e, shoal_mesh::PublishError::Full);
                true
            }
        }
    });
    let seqs = drain(&mut rx, N + extra, || {
        format!(
            "sender {:?} receiver {:?}",
            s.mesh.stats().total,
            r.stats().total
        )
    });
    t.join().unwrap();
    assert_eq!(
        seqs.iter().filter(|s| **s == u64::MAX).count() as u64,
        extra
    );
    let seqs: Vec<u64> = seqs.into_iter().filter(|s| *s != u64::MAX).collect();
    assert_eq!(
        seqs,
        (0..N).collect::<Vec<_>>(),
        "every message, in order, once"
    );
    let st = s.mesh.stats().total;
    assert!(
        st.peak_queued_bytes as usize <= BOUND,
        "peak {} above bound",
        st.peak_queued_bytes
    );
    assert_eq!(st.dropped_queue_full, 0);
    assert_eq!(r.stats().total.delivered, N + extra);
    assert!(r.connected_peers().contains(&s.id()));
    if shards == 2 {
        assert!(
            st.hops_out >= N,
            "every frame crossed from the origin shard to the link's"
        );
    }
}

#[test]
fn disconnect_policy_drops_a_peer_that_stays_blocked() {
    let (s, r, _rx) = pair(
        OverflowPolicy::Disconnect {
            after: Duration::from_millis(300),
        },
        32 * 1024,
    );
    let r_id = r.id();
    let mut seq = 0u64;
    wait_until(20, "sender drops the blocked receiver", || {
        for _ in 0..1000 {
            // NoRoute once the link is gone: that is what we wait for.
            let _ = s.mesh.broadcast_blocking(payload(seq));
            seq += 1;
        }
        s.rec.has(|e| {
            matches!(
                e,
                Event::Error {
                    kind: shoal_mesh::ErrorKind::SlowPeer,
                    peer: Some(p),
                    ..
                } if *p == r_id
            )
        })
    });
    let st = s.mesh.stats().total;
    assert!(st.slow_peer_disconnects >= 1);
    assert!(
        st.dropped_queue_full > 0,
        "frames that did not fit were counted before the cut"
    );
    wait_until(10, "sender reports the disconnect", || {
        s.rec.has(|e| *e == Event::PeerDisconnected { peer: r_id })
    });
}

#[test]
fn a_receiver_busy_for_longer_than_the_heartbeat_timeout_is_not_declared_dead() {
    const N: u64 = 20_000;
    let (s, r, mut rx) = pair(OverflowPolicy::Block, 32 * 1024);
    let stall = 2 * r.config().heartbeat_timeout;
    let sender = s.mesh.clone();
    let t = std::thread::spawn(move || {
        for seq in 0..N {
            sender.broadcast_blocking(payload(seq)).expect("accepted");
        }
    });
    wait_until(20, "sender's link queue fills", || {
        s.mesh.stats().total.peak_queued_bytes > 16 * 1024
    });
    // The receiver's reader now waits for event-queue room and the sender's writer for the
    // socket, both for twice the heartbeat timeout.
    std::thread::sleep(stall);
    let seqs = drain(&mut rx, N, || format!("{:?}", r.stats().total));
    t.join().unwrap();
    assert_eq!(seqs, (0..N).collect::<Vec<_>>());
    assert_eq!(r.stats().total.links_closed, 0, "receiver kept the link");
    assert_eq!(s.mesh.stats().total.links_closed, 0, "sender kept the link");
    assert!(!s.rec.has(|e| matches!(e, Event::PeerDisconnected { .. })));
}

/// A node (DropNewest, a 256 KiB link queue, heartbeats far apart) linked to a raw peer that
/// completed the handshake and never reads, broadcasting until the link's queue is full:
/// the peer's receive buffer, the node's kernel and then its queue filled. Returns the node,
/// the peer's socket and the messages queued on the link.
fn a_full_link_to_a_raw_peer_that_reads_nothing() -> (Node, std::net::TcpStream, u64) {
    use shoal_mesh::wire::Frame;
    use std::io::Write;
    let n = Node::start(
        fast()
            .overflow_policy(OverflowPolicy::DropNewest)
            .max_outbound_queue_bytes(256 * 1024usize)
            .heartbeat_timeout(Duration::from_secs(30))
            .heartbeat_interval(Duration::from_secs(10)),
    );
    let hello = plain_hello();
    let peer = hello.node_id;
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", n.port())).unwrap();
    let mut bytes = Vec::new();
    Frame::Hello(hello).encode(&mut bytes).unwrap();
    raw.write_all(&bytes).unwrap();
    wait_until(10, "node links the raw peer", || {
        n.mesh.connected_peers().contains(&peer)
    });
    let mut seq = 0u64;
    wait_until(30, "the link queue is full", || {
        for _ in 0..200 {
            let _ = n.mesh.try_broadcast(payload(seq));
            seq += 1;
        }
        n.mesh.stats().total.dropped_queue_full > 0
    });
    let queued = n.mesh.stats().total.frames_queued;
    (n, raw, queued)
}

/// Frames queued on a link that dies used to be dropped in teardown with no counter. A raw
/// peer completes the handshake and never reads, so the node's queue to it fills; when the
/// peer goes, every message is accounted for: queued (then written or counted lost with the
/// link) or counted as not fitting.
#[test]
fn frames_queued_on_a_link_that_dies_are_counted() {
    let (n, raw, queued) = a_full_link_to_a_raw_peer_that_reads_nothing();
    drop(raw);
    wait_until(10, "the link is closed", || {
        n.mesh.stats().total.links_closed == 1
    });
    let t = n.mesh.stats().total;
    assert!(
        t.dropped_link_closed > 0,
        "frames still queued when the link closed are counted: {t:?}"
    );
    assert!(t.dropped_link_closed <= queued, "{t:?}");
    assert_eq!(
        t.originated,
        t.frames_queued + t.dropped_queue_full + t.dropped_no_route,
        "every originated message was queued or counted as dropped: {t:?}"
    );
}

/// The Data frames whole at the start of `bytes` (a peer's view of what it was sent).
fn whole_data_frames(bytes: &[u8]) -> u64 {
    use shoal_mesh::wire::{decode_frame, DecodeStatus, Frame};
    let mut buf = bytes::Bytes::copy_from_slice(bytes);
    let mut n = 0;
    while let Ok(DecodeStatus::Complete { frame, len }) = decode_frame(&buf, u32::MAX) {
        n += u64::from(matches!(frame, Frame::Data(_)));
        let _ = buf.split_to(len);
    }
    n
}

/// What a link's kernel held when the link died was lost without a counter: the queue here
/// was counted (`dropped_link_closed`), the megabytes the kernel had taken from it and the
/// peer had not acknowledged were not. The raw peer that reads nothing resets the
/// connection (it closes with unread bytes). Every message queued for it
/// is whole in the peer's receive buffer, or counted: still queued, or held unacknowledged
/// by the node's kernel (`unacked_link_closed`). A write taken or acknowledged in part
/// counts whole, so the sum may exceed what was queued by the messages of two writes.
#[test]
fn messages_the_kernel_held_when_a_link_died_are_counted() {
    let (n, raw, queued) = a_full_link_to_a_raw_peer_that_reads_nothing();
    // What the peer's kernel holds, looked at without reading it (a peek opens no window),
    // once it stopped growing: its window is closed.
    let mut held = vec![0u8; 64 << 20];
    let mut last = usize::MAX;
    wait_until(30, "the peer's receive buffer stops growing", || {
        let now = raw.peek(&mut held).unwrap();
        std::mem::replace(&mut last, now) == now
    });
    let got = whole_data_frames(&held[..last]);
    drop(raw);
    wait_until(10, "the link is closed", || {
        n.mesh.stats().total.links_closed == 1
    });
    let t = n.mesh.stats().total;
    let accounted = got + t.dropped_link_closed + t.unacked_link_closed;
    assert!(
        t.unacked_link_closed > 0,
        "the node's kernel held messages for the peer: {t:?}"
    );
    assert!(
        accounted >= queued,
        "every message queued is in the peer's buffer or counted: {queued} queued, {got} \
         whole at the peer, {t:?}"
    );
    let write = 1024; // messages of one write at most (`max_iovecs`)
    assert!(
        accounted <= queued + 2 * write,
        "counted no more than two writes beyond what was lost: {queued} queued, {got} \
         whole at the peer, {t:?}"
    );
}

/// One link that cannot keep up used to hold a Block publisher to its pace (in the fault
/// test: ~15 % of the rate for ~30 s, every subscriber starved). Now the congested link is
/// declared slow after `SlowLinkPolicy::after` and dropped for (counted) while the publisher
/// and the healthy peer go on; the slow peer gets exactly what was not counted as dropped.
#[test]
fn one_stalled_peer_does_not_hold_a_block_publisher_hostage() {
    use shoal_mesh::{Mesh, SlowLinkAction, SlowLinkPolicy};
    const N: u64 = 20_000;
    let b = Node::start(fast());
    // C's application does not read its events for now: its reader stalls, then its socket,
    // then the sender's queue to it.
    let c = fast().event_queue_capacity(16).build().unwrap();
    let mut c_rx = c.events();
    c.start().unwrap();
    let a = Node::start(
        fast()
            .max_outbound_queue_bytes(64 * 1024usize)
            .slow_link(SlowLinkPolicy {
                after: Duration::from_millis(300),
                action: SlowLinkAction::Drop,
            })
            .static_peer(ep(b.port()))
            .static_peer(ep(c.listen_port())),
    );
    wait_until(10, "a linked to b and c", || {
        let p = a.mesh.connected_peers();
        p.contains(&b.id()) && p.contains(&c.id())
    });
    let sender: Mesh = a.mesh.clone();
    let publisher = std::thread::spawn(move || {
        for seq in 0..N {
            sender.broadcast_blocking(payload(seq)).expect("accepted");
        }
    });
    wait_until(60, "the publisher finished while c was stalled", || {
        publisher.is_finished()
    });
    publisher.join().unwrap();
    let st = a.mesh.stats().total;
    assert!(st.slow_links >= 1, "{st:?}");
    assert!(st.dropped_slow_link > 0, "{st:?}");
    assert!(a.rec.has(|e| matches!(
        e,
        Event::Error { kind: shoal_mesh::ErrorKind::SlowPeer, peer: Some(p), .. } if *p == c.id()
    )));
    // The healthy peer got everything, in order.
    wait_until(30, "b received every message", || {
        b.rec.messages().len() as u64 == N
    });
    let seqs: Vec<u64> = b
        .rec
        .messages()
        .iter()
        .map(|m| u64::from_be_bytes(m.1[..8].try_into().unwrap()))
        .collect();
    assert_eq!(seqs, (0..N).collect::<Vec<_>>());
    // Every message was queued on both links or counted as dropped for the slow one...
    let dropped = a.mesh.stats().total.dropped_slow_link;
    assert_eq!(a.mesh.stats().total.frames_queued, 2 * N - dropped);
    // ...and the slow peer gets exactly what was queued for it.
    let got = drain(&mut c_rx, N - dropped, || {
        format!("{:?}", a.mesh.stats().total)
    });
    assert_eq!(got.len() as u64, N - dropped);
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "in order, no duplicate"
    );
    assert_eq!(
        a.mesh.stats().total.links_closed,
        0,
        "the Drop action keeps the link"
    );
}

/// A subscriber that does not read holds at most `event_queue_bytes` of payloads (its
/// shard then stops reading the link), not `event_queue_capacity` messages of any size:
/// 64 messages of 256 KiB against a 1 MiB ceiling and the default 65 536-event queue.
/// Nothing is lost once it reads.
#[test]
fn a_slow_subscriber_holds_at_most_event_queue_bytes_of_payloads() {
    const BIG: usize = 256 * 1024;
    const N: u64 = 64;
    let (s, r, mut rx) = sender_and_receiver(
        fast().max_outbound_queue_bytes(4usize << 20),
        fast().event_queue_bytes(1 << 20),
    );
    let big = |seq: u64| {
        let mut p = vec![0x5a; BIG];
        p[..8].copy_from_slice(&seq.to_be_bytes());
        p
    };
    for seq in 0..N {
        s.mesh.broadcast_blocking(big(seq)).expect("accepted");
    }
    wait_until(20, "the receiver's shard waits on the byte ceiling", || {
        r.stats().total.event_queue_byte_waits > 0
    });
    // Four 256 KiB payloads reach 1 MiB; one more may be counted as delivered while waiting.
    let held = r.stats().total.delivered;
    assert!(
        held <= 5,
        "{held} messages of 256 KiB queued under a 1 MiB ceiling"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seqs = Vec::new();
    while (seqs.len() as u64) < N {
        assert!(Instant::now() < deadline, "received {} of {N}", seqs.len());
        if let Some(Event::Message { payload, .. }) = rx.recv_timeout(Duration::from_millis(100)) {
            assert_eq!(payload.len(), BIG);
            seqs.push(u64::from_be_bytes(payload[..8].try_into().unwrap()));
        }
    }
    assert_eq!(seqs, (0..N).collect::<Vec<_>>(), "all of them, in order");
}
