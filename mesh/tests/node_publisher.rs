//! Live nodes over 127.0.0.1: the batching [`shoal_mesh::Publisher`]. Its frames are encoded
//! whole (ids included) on the application thread and the origin shard queues them without
//! reading them, so these tests check what a mistake there would break: every message
//! arrives once, in order, intact; ids never collide with those of direct publishes (a
//! collision would be dropped as a duplicate);
//! relays forward batched frames (ttl and ids valid on the wire); targeted, local and secured
//! delivery; the `try_` forms, the bounds and dropping a publisher with pending messages.

mod node_support;

use node_support::*;
use shoal_mesh::{Event, EventReceiver, Mesh, OverflowPolicy, PeerId, PublishError};
use std::time::{Duration, Instant};

/// A payload carrying `(stream, seq)` and a recognisable body of `len` bytes in all.
fn payload(stream: u8, seq: u64, len: usize) -> Vec<u8> {
    let mut p = vec![stream ^ 0x5a; len.max(9)];
    p[0] = stream;
    p[1..9].copy_from_slice(&seq.to_be_bytes());
    p
}

/// Reads Message events until `want` arrived (bounded wait): `(from, stream, seq, broadcast)`,
/// checking each body.
fn drain(
    rx: &mut EventReceiver,
    want: usize,
    diag: impl Fn() -> String,
) -> Vec<(PeerId, u8, u64, bool)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    while got.len() < want {
        assert!(
            Instant::now() < deadline,
            "timed out: received {} of {want} messages; {}",
            got.len(),
            diag()
        );
        if let Some(Event::Message {
            from,
            payload,
            broadcast,
        }) = rx.recv_timeout(Duration::from_millis(100))
        {
            let stream = payload[0];
            assert!(
                payload[9..].iter().all(|b| *b == stream ^ 0x5a),
                "payload corrupted in transit"
            );
            let seq = u64::from_be_bytes(payload[1..9].try_into().unwrap());
            got.push((from, stream, seq, broadcast));
        }
    }
    got
}

fn seqs_of(got: &[(PeerId, u8, u64, bool)], stream: u8) -> Vec<u64> {
    got.iter().filter(|m| m.1 == stream).map(|m| m.2).collect()
}

/// Batched broadcasts of varied sizes, interleaved with direct broadcasts from another
/// thread: all arrive once and in order per stream, none is taken for a duplicate (the
/// publisher's ids and the origin shard's come from distinct generators).
#[test]
fn batched_and_direct_broadcasts_all_arrive_once_in_order() {
    const N: u64 = 20_000;
    let (s, r, mut rx) = sender_and_receiver(fast(), fast());
    let direct = s.mesh.clone();
    let t = std::thread::spawn(move || {
        for seq in 0..N / 4 {
            direct
                .broadcast_blocking(payload(2, seq, 40))
                .expect("accepted");
        }
    });
    let mut p = s.mesh.publisher().with_batch_bytes(3000);
    assert_eq!(p.batch_bytes(), 3000);
    for seq in 0..N {
        p.broadcast_blocking(&payload(1, seq, 9 + (seq as usize * 37) % 700))
            .expect("accepted");
    }
    assert!(
        p.pending() > 0 || N % 4 == 0,
        "a partial batch waits for flush"
    );
    p.flush_blocking().unwrap();
    assert_eq!(p.pending(), 0);
    t.join().unwrap();
    let got = drain(&mut rx, (N + N / 4) as usize, || {
        format!("sender {:?} receiver {:?}", s.mesh.stats(), r.stats())
    });
    assert_eq!(seqs_of(&got, 1), (0..N).collect::<Vec<_>>());
    assert_eq!(seqs_of(&got, 2), (0..N / 4).collect::<Vec<_>>());
    assert!(got.iter().all(|m| m.0 == s.id() && m.3));
    let (st, rt) = (s.mesh.stats().total, r.stats().total);
    assert_eq!(st.originated, N + N / 4);
    assert_eq!(st.frames_queued, N + N / 4);
    assert_eq!(rt.delivered, N + N / 4);
    assert_eq!(rt.dropped_duplicate, 0, "no id given twice");
    assert_eq!(s.mesh.stats().unflushed_discarded, 0);
}

/// A line A - B - C: B relays A's batched broadcasts to C (which needs a valid ttl and id in
/// every frame), and A's batched messages for C are relayed too; switching destination hands
/// the batch over first, so each destination's messages keep their order.
#[test]
fn relays_forward_batched_frames_and_targeted_batches_reach_their_peer() {
    const N: u64 = 3_000;
    let b = Node::start(fast());
    let c = fast().static_peer(ep(b.port())).build().unwrap();
    let mut c_rx = c.events();
    c.start().unwrap();
    let a = Node::start(fast().static_peer(ep(b.port())));
    wait_until(10, "A and C linked to B", || {
        a.connected_to(&b) && c.connected_peers().contains(&b.id())
    });
    let mut p = a.mesh.publisher().with_batch_bytes(2000);
    let mut targeted = 0u64;
    for seq in 0..N {
        p.broadcast_blocking(&payload(1, seq, 100)).unwrap();
        if seq % 3 == 0 {
            p.send_blocking(c.id(), &payload(3, targeted, 60)).unwrap();
            targeted += 1;
        }
    }
    p.flush_blocking().unwrap();
    let got = drain(&mut c_rx, (N + targeted) as usize, || {
        format!(
            "A {:?} B {:?} C {:?}",
            a.mesh.stats(),
            b.mesh.stats(),
            c.stats()
        )
    });
    assert_eq!(seqs_of(&got, 1), (0..N).collect::<Vec<_>>());
    assert_eq!(seqs_of(&got, 3), (0..targeted).collect::<Vec<_>>());
    assert!(got.iter().all(|m| m.0 == a.id() && m.3 == (m.1 == 1)));
    wait_until(10, "B delivered every broadcast", || {
        b.rec.messages().len() as u64 >= N
    });
    let at_b = b.rec.messages();
    assert_eq!(
        at_b.len() as u64,
        N,
        "B delivers the broadcasts, only relays the rest"
    );
    assert!(at_b.iter().all(|m| m.1[0] == 1 && m.2));
    assert_eq!(c.stats().total.dropped_duplicate, 0);
}

/// Messages for this node itself are delivered to its own application, batched or not.
#[test]
fn a_batch_for_this_node_is_delivered_locally() {
    let s = Node::start(fast());
    let mut p = s.mesh.publisher();
    for seq in 0..50 {
        p.send_blocking(s.id(), &payload(4, seq, 30)).unwrap();
    }
    drop(p); // flushes
    wait_until(10, "own messages delivered", || {
        s.rec.messages().len() == 50
    });
    let got = s.rec.messages();
    assert!(got.iter().all(|m| m.0 == s.id() && !m.2));
    let seqs: Vec<u64> = got
        .iter()
        .map(|m| u64::from_be_bytes(m.1[1..9].try_into().unwrap()))
        .collect();
    assert_eq!(seqs, (0..50).collect::<Vec<_>>());
}

/// Under the Block policy with a receiver that reads nothing, the `try_` forms end up saying
/// Full (never waiting, the refused message not taken) while the link's queue stays within
/// its bound; once the receiver reads, a blocking flush hands the rest over and every
/// accepted message arrives, in order.
#[test]
fn try_forms_report_full_within_the_bounds_and_lose_nothing() {
    const BOUND: usize = 32 * 1024;
    let (s, r, mut rx) = sender_and_receiver(
        fast()
            .overflow_policy(OverflowPolicy::Block)
            .max_outbound_queue_bytes(BOUND),
        fast().event_queue_capacity(64),
    );
    assert_eq!(
        s.mesh.publisher().with_batch_bytes(1 << 20).batch_bytes(),
        BOUND / 4,
        "batches are capped so the link bound holds for them"
    );
    let mut p = s.mesh.publisher().with_batch_bytes(4096);
    let mut accepted = 0u64;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match p.try_broadcast(&payload(1, accepted, 500)) {
            Ok(()) => accepted += 1,
            Err(e) => {
                assert_eq!(e, PublishError::Full);
                break;
            }
        }
        assert!(Instant::now() < deadline, "try_broadcast never said Full");
    }
    let pending = p.pending();
    assert!(pending > 0, "the refused batch stays with the publisher");
    assert_eq!(p.try_flush(), Err(PublishError::Full));
    assert_eq!(p.pending(), pending, "a refused flush keeps the batch");
    let flusher = std::thread::spawn(move || {
        p.flush_blocking().unwrap();
        p.pending()
    });
    let got = drain(&mut rx, accepted as usize, || {
        format!("sender {:?} receiver {:?}", s.mesh.stats(), r.stats())
    });
    assert_eq!(flusher.join().unwrap(), 0);
    assert_eq!(seqs_of(&got, 1), (0..accepted).collect::<Vec<_>>());
    let st = s.mesh.stats().total;
    assert!(
        st.peak_queued_bytes as usize <= BOUND,
        "peak {} above the bound",
        st.peak_queued_bytes
    );
    assert_eq!(st.dropped_queue_full, 0);
    assert_eq!(st.originated, accepted);
}

/// A message that cannot be sent is refused when it is added, and leaves the batch as it was.
#[test]
fn refused_messages_leave_the_batch_untouched() {
    let (s, r, mut rx) = sender_and_receiver(fast().max_message_bytes(1000u32), fast());
    let mut p = s.mesh.publisher();
    p.broadcast_blocking(&payload(1, 0, 100)).unwrap();
    assert!(matches!(
        p.broadcast_blocking(&vec![0u8; 2000]),
        Err(PublishError::TooLarge { len: 2000, .. })
    ));
    assert!(matches!(
        p.try_broadcast(&vec![0u8; 2000]),
        Err(PublishError::TooLarge { .. })
    ));
    assert_eq!(p.pending(), 1);
    p.flush_blocking().unwrap();
    let got = drain(&mut rx, 1, || format!("receiver {:?}", r.stats()));
    assert_eq!(got[0].2, 0);
    let lone = fast().build().unwrap();
    lone.start().unwrap();
    assert_eq!(
        lone.publisher().broadcast_blocking(b"x"),
        Err(PublishError::NoRoute),
        "no peer connected"
    );
    s.mesh.stop();
    assert_eq!(p.broadcast_blocking(b"late"), Err(PublishError::Stopped));
}

/// Batches through a secured link: the writer seals runs of frames into records like any
/// queued bytes, and the receiver gets every message intact and in order.
#[test]
fn batches_cross_a_secured_link_intact() {
    const N: u64 = 5_000;
    let (s, r, mut rx) = sender_and_receiver(fast().psk("batch-psk"), fast().psk("batch-psk"));
    let mut p = s.mesh.publisher().with_batch_bytes(8192);
    for seq in 0..N {
        p.broadcast_blocking(&payload(7, seq, 9 + (seq as usize * 131) % 3000))
            .unwrap();
    }
    p.flush_blocking().unwrap();
    let got = drain(&mut rx, N as usize, || {
        format!("sender {:?} receiver {:?}", s.mesh.stats(), r.stats())
    });
    assert_eq!(seqs_of(&got, 7), (0..N).collect::<Vec<_>>());
    assert_eq!(r.stats().total.record_failures, 0);
}

/// With two shards and these ids the sender originates on shard 1 while its link lives on
/// shard 0: every batch crosses shards as one hop and still arrives whole and in order.
#[test]
fn batches_hop_from_the_origin_shard_to_the_link_shard() {
    const N: u64 = 5_000;
    let (s, r, mut rx) = sender_and_receiver(
        fast().shards(2).node_id(PeerId([1; 16])),
        fast().node_id(PeerId([2; 16])),
    );
    let mut p = s.mesh.publisher().with_batch_bytes(1500);
    for seq in 0..N {
        p.broadcast_blocking(&payload(5, seq, 64)).unwrap();
    }
    drop(p);
    let got = drain(&mut rx, N as usize, || {
        format!("sender {:?} receiver {:?}", s.mesh.stats(), r.stats())
    });
    assert_eq!(seqs_of(&got, 5), (0..N).collect::<Vec<_>>());
    let st = s.mesh.stats();
    assert!(st.shards[1].originated == N && st.shards[1].hops_out > 0);
    assert_eq!(st.total.frames_queued, N);
}

/// A publisher dropped inside a callback (an executor thread, which must never wait) hands
/// its batch over without waiting; nothing is lost or counted as discarded.
#[test]
fn a_publisher_dropped_in_a_callback_hands_over_without_waiting() {
    use std::sync::{Arc, OnceLock};
    let r = fast().build().unwrap();
    let mut rx = r.events();
    r.start().unwrap();
    let me: Arc<OnceLock<Mesh>> = Arc::new(OnceLock::new());
    let inside = me.clone();
    let s = fast()
        .static_peer(ep(r.listen_port()))
        .on_event(move |ev| {
            if let (Event::Message { .. }, Some(m)) = (ev, inside.get()) {
                let mut p = m.publisher();
                for seq in 0..3 {
                    p.try_broadcast(&payload(6, seq, 20)).expect("room");
                }
                assert_eq!(p.pending(), 3);
                // Dropped here, on the shard thread that ran the callback.
            }
        })
        .build()
        .unwrap();
    me.set(s.clone()).ok();
    s.start().unwrap();
    wait_until(10, "linked both ways", || {
        s.connected_peers().contains(&r.id()) && r.connected_peers().contains(&s.id())
    });
    r.broadcast_blocking(&b"go"[..]).unwrap();
    let got = drain(&mut rx, 3, || format!("sender {:?}", s.stats()));
    assert_eq!(seqs_of(&got, 6), vec![0, 1, 2]);
    assert_eq!(s.stats().unflushed_discarded, 0);
    s.stop();
}

/// A publisher dropped by a panicking application thread hands its batch over without
/// waiting, outside the unwind (the origin shard is woken now, not when the thread exits):
/// the messages arrive while the thread that caught the panic goes on.
#[test]
fn a_publisher_dropped_while_unwinding_hands_over() {
    let (s, _r, mut rx) = sender_and_receiver(fast(), fast());
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut p = s.mesh.publisher();
        for seq in 0..3 {
            p.try_broadcast(&payload(7, seq, 20)).expect("room");
        }
        assert_eq!(p.pending(), 3);
        panic!("unwinding with a pending publisher");
    }));
    assert!(caught.is_err());
    let got = drain(&mut rx, 3, || format!("sender {:?}", s.mesh.stats()));
    assert_eq!(seqs_of(&got, 7), vec![0, 1, 2]);
    assert_eq!(s.mesh.stats().unflushed_discarded, 0);
}

/// An async flush dropped while it waits for ingress room (a cancelled future) drops its
/// batch, and the loss is counted, never silent.
#[test]
fn a_cancelled_async_flush_is_counted() {
    use futures_util::FutureExt;
    // The receiver's events are held, never read: the receiver stalls, then the link, then
    // the ingress.
    let (s, _r, _rx) = sender_and_receiver(
        fast()
            .overflow_policy(OverflowPolicy::Block)
            .max_outbound_queue_bytes(16 * 1024usize)
            .publish_queue_capacity(1),
        fast().event_queue_capacity(16),
    );
    let mut p = s.mesh.publisher();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut handed = 0u64;
    loop {
        assert!(Instant::now() < deadline, "the ingress never filled");
        p.try_broadcast(&payload(1, handed, 1000)).unwrap();
        match p.flush().now_or_never() {
            Some(r) => {
                r.unwrap();
                handed += 1;
            }
            None => break, // pending, and dropped by now_or_never
        }
    }
    assert_eq!(p.pending(), 0, "the batch went with the cancelled future");
    assert_eq!(s.mesh.stats().unflushed_discarded, 1);
    assert!(handed > 0);
}

/// Under DropNewest a link queues a batch whole or drops it whole: what a stalled receiver
/// misses is exactly what the sender counts, message by message.
#[test]
fn drop_newest_counts_a_dropped_batch_per_message() {
    const N: u64 = 30_000;
    let (s, r, mut rx) = sender_and_receiver(
        fast()
            .overflow_policy(OverflowPolicy::DropNewest)
            .max_outbound_queue_bytes(64 * 1024usize),
        fast().event_queue_capacity(64),
    );
    let mut p = s.mesh.publisher().with_batch_bytes(4096);
    for seq in 0..N {
        p.broadcast_blocking(&payload(1, seq, 1000)).unwrap();
    }
    p.flush_blocking().unwrap();
    wait_until(20, "sender processed every message", || {
        s.mesh.stats().total.originated == N
    });
    let dropped = s.mesh.stats().total.dropped_queue_full;
    assert!(
        dropped > 0,
        "30 MB into a stalled receiver overflow a 64 KiB queue"
    );
    let got = drain(&mut rx, (N - dropped) as usize, || {
        format!("sender {:?} receiver {:?}", s.mesh.stats(), r.stats())
    });
    assert!(seqs_of(&got, 1).windows(2).all(|w| w[0] < w[1]));
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !matches!(rx.try_recv(), Some(Event::Message { .. })),
        "more arrived than sent minus counted drops"
    );
    assert_eq!(r.stats().total.delivered, N - dropped);
}
