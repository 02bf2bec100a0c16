//! Live nodes over 127.0.0.1: shard tasks (`Mesh::spawn_on_shard`) publishing straight into
//! the origin shard's core, waiting on backpressure, receiving the shard's deliveries in
//! batches, and having their panics contained.

mod node_support;

use node_support::*;
use shoal_mesh::node::shard_task::Delivered;
use shoal_mesh::ShardTaskError;
use shoal_mesh::{Event, EventReceiver, MeshError, OverflowPolicy, PeerId, PublishError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIZE: usize = 1000;

fn payload(seq: u64) -> Vec<u8> {
    let mut p = vec![0xabu8; SIZE];
    p[..8].copy_from_slice(&seq.to_be_bytes());
    p
}

fn seq_of(p: &[u8]) -> u64 {
    assert_eq!(p.len(), SIZE, "payload length changed in transit");
    assert!(p[8..].iter().all(|b| *b == 0xab), "payload corrupted");
    u64::from_be_bytes(p[..8].try_into().unwrap())
}

/// Reads Message events until `want` arrived (bounded wait); their sequence numbers.
fn drain(rx: &mut EventReceiver, want: u64, diag: impl Fn() -> String) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seqs = Vec::new();
    while (seqs.len() as u64) < want {
        assert!(
            Instant::now() < deadline,
            "timed out: received {} of {want}; {}",
            seqs.len(),
            diag()
        );
        if let Some(Event::Message { payload, .. }) = rx.recv_timeout(Duration::from_millis(100)) {
            seqs.push(seq_of(&payload));
        }
    }
    seqs
}

/// A sender and a receiver whose event queue is small; with `shards = 2` the sender
/// originates on shard 1 and its link lives on shard 0, so every frame crosses shards.
fn pair_on(bound: usize, shards: usize) -> (Node, shoal_mesh::Mesh, EventReceiver) {
    let mut rb = fast().event_queue_capacity(64);
    let mut sb = fast().shards(shards);
    if shards == 2 {
        rb = rb.node_id(PeerId([2; 16]));
        sb = sb.node_id(PeerId([1; 16]));
    }
    sender_and_receiver(
        sb.overflow_policy(OverflowPolicy::Block)
            .max_outbound_queue_bytes(bound),
        rb,
    )
}

#[test]
fn a_shard_task_publishes_in_order_exactly_once() {
    const N: u64 = 5_000;
    let (s, r, mut rx) = pair_on(1 << 20, 1);
    let to = r.id();
    let task = s
        .mesh
        .spawn_on_shard(move |mut ctx| async move {
            for seq in 0..N {
                // Half broadcast, half addressed, both through the shard's core.
                if seq % 2 == 0 {
                    ctx.broadcast(payload(seq)).await?;
                } else {
                    ctx.send(to, payload(seq)).await?;
                }
            }
            Ok::<_, PublishError>(ctx.shard())
        })
        .expect("spawned");
    let seqs = drain(&mut rx, N, || format!("{:?}", s.mesh.stats().total));
    assert_eq!(task.join_blocking(), Ok(Ok(0)), "the task ran on shard 0");
    assert_eq!(
        seqs,
        (0..N).collect::<Vec<_>>(),
        "every message, in order, once"
    );
    let st = s.mesh.stats().total;
    assert_eq!(
        st.originated, N,
        "originated and counted as the thread API's"
    );
    assert_eq!(r.stats().total.delivered, N);
    // Nothing beyond N arrives (no duplicate): the next message is the marker.
    s.mesh.broadcast_blocking(payload(u64::MAX)).unwrap();
    assert_eq!(drain(&mut rx, 1, String::new), vec![u64::MAX]);
}

#[test]
fn a_blocked_peer_makes_the_task_wait_and_nothing_is_lost() {
    backpressure(1);
}

#[test]
fn backpressure_holds_when_the_link_is_on_another_shard() {
    backpressure(2);
}

fn backpressure(shards: usize) {
    const N: u64 = 20_000;
    const BOUND: usize = 32 * 1024;
    let (s, r, mut rx) = pair_on(BOUND, shards);
    let sent = Arc::new(AtomicU64::new(0));
    let progress = sent.clone();
    let task = s
        .mesh
        .spawn_on_shard(move |mut ctx| async move {
            for seq in 0..N {
                ctx.broadcast(payload(seq)).await?;
                progress.store(seq + 1, Ordering::Release);
            }
            // With the queue full now or soon, the non-waiting form says why.
            Ok::<_, PublishError>(ctx.shard())
        })
        .expect("spawned");
    // The receiver reads nothing until the sender's link queue has filled up.
    wait_until(20, "the sender's link queue fills", || {
        s.mesh.stats().total.peak_queued_bytes as usize > BOUND - 2 * (SIZE + 58)
    });
    // 20 MB cannot fit in a 32 KiB queue, the socket buffers and a 64-event queue: the
    // task's publish awaits room.
    let before = sent.load(Ordering::Acquire);
    assert!(
        before < N,
        "the task ran ahead of a peer that reads nothing"
    );
    let seqs = drain(&mut rx, N, || {
        format!(
            "sender {:?} receiver {:?}",
            s.mesh.stats().total,
            r.stats().total
        )
    });
    assert_eq!(task.join_blocking(), Ok(Ok(shards - 1)));
    assert_eq!(
        seqs,
        (0..N).collect::<Vec<_>>(),
        "every message, in order, once"
    );
    let st = s.mesh.stats().total;
    assert!(
        st.peak_queued_bytes as usize <= BOUND,
        "peak {}",
        st.peak_queued_bytes
    );
    assert_eq!(st.dropped_queue_full, 0);
    assert_eq!(r.stats().total.delivered, N);
    if shards == 2 {
        assert!(st.hops_out >= N, "every frame crossed to the link's shard");
    }
}

#[test]
fn try_publish_says_full_while_a_link_has_no_room() {
    const BOUND: usize = 32 * 1024;
    let (s, r, mut rx) = pair_on(BOUND, 1);
    // Publishes without waiting until refused; returns how many went through.
    let task = s
        .mesh
        .spawn_on_shard(move |mut ctx| async move {
            let mut accepted = 0u64;
            loop {
                match ctx.try_broadcast(payload(accepted)) {
                    Ok(()) => accepted += 1,
                    Err(e) => return (accepted, e),
                }
                if accepted % 64 == 0 {
                    ctx.yield_now().await;
                }
            }
        })
        .expect("spawned");
    let (accepted, err) = task.join_blocking().expect("ran");
    assert_eq!(err, PublishError::Full);
    assert!(accepted > 0);
    let seqs = drain(&mut rx, accepted, || {
        format!(
            "sender {:?} receiver {:?}",
            s.mesh.stats().total,
            r.stats().total
        )
    });
    assert_eq!(seqs, (0..accepted).collect::<Vec<_>>());
    assert_eq!(s.mesh.stats().total.dropped_queue_full, 0);
}

#[test]
fn a_panicking_shard_task_is_reported_and_the_node_keeps_working() {
    let (s, _r, mut rx) = pair_on(1 << 20, 1);
    let task = s
        .mesh
        .spawn_on_shard(|mut ctx| async move {
            ctx.broadcast(payload(1)).await.unwrap();
            if ctx.shard() == 0 {
                panic!("boom in a shard task");
            }
        })
        .expect("spawned");
    match task.join_blocking() {
        Err(ShardTaskError::Panicked(m)) => assert!(m.contains("boom"), "{m}"),
        other => panic!("expected a contained panic, got {other:?}"),
    }
    assert_eq!(s.mesh.stats().shard_task_panics, 1);
    assert_eq!(
        drain(&mut rx, 1, String::new),
        vec![1],
        "what it sent before went out"
    );
    // The shard still serves its links, the thread API and new shard tasks.
    s.mesh.broadcast_blocking(payload(2)).unwrap();
    let again = s
        .mesh
        .spawn_on_shard(|mut ctx| async move { ctx.broadcast(payload(3)).await })
        .expect("spawned after the panic");
    assert_eq!(again.join_blocking(), Ok(Ok(())));
    assert_eq!(drain(&mut rx, 2, String::new), vec![2, 3]);
}

#[test]
fn a_shard_task_receives_the_shards_deliveries_in_batches() {
    const N: u64 = 3_000;
    let r = Node::start(fast());
    let task = r
        .mesh
        .spawn_on_shard(move |ctx| async move {
            // Small: the reading link must wait for the task rather than drop.
            let mut inbox = ctx.inbox(16).expect("the inbox is free");
            assert!(ctx.inbox(16).is_none(), "one inbox per shard");
            let (mut batch, mut seqs, mut batches) = (Vec::new(), Vec::new(), 0u64);
            while (seqs.len() as u64) < N {
                inbox.recv_batch(&mut batch).await;
                batches += 1;
                for d in batch.drain(..) {
                    match d {
                        Delivered::Message(m) => seqs.push(seq_of(&m.payload)),
                        other => panic!("unexpected delivery {other:?}"),
                    }
                }
            }
            (seqs, batches)
        })
        .expect("spawned");
    let s = Node::start(fast().static_peer(ep(r.port())));
    wait_until(10, "sender connected", || s.connected_to(&r));
    for seq in 0..N {
        s.mesh.broadcast_blocking(payload(seq)).unwrap();
    }
    let (seqs, batches) = task.join_blocking().expect("ran");
    assert_eq!(
        seqs,
        (0..N).collect::<Vec<_>>(),
        "every message, in order, once"
    );
    assert!(batches <= N);
    assert!(
        r.rec.messages().is_empty(),
        "while the task held the inbox, messages bypassed the event queue"
    );
    // The inbox is gone: deliveries go back to the event queue.
    s.mesh.broadcast_blocking(payload(N)).unwrap();
    wait_until(10, "the event queue gets messages again", || {
        r.rec.messages().iter().any(|(_, p, _)| seq_of(p) == N)
    });
    assert_eq!(r.mesh.stats().total.delivered, N + 1);
}

#[test]
fn spawning_needs_a_running_node_and_stop_cancels_tasks() {
    let m = fast().build().unwrap();
    assert!(matches!(
        m.spawn_on_shard(|_ctx| async {}),
        Err(MeshError::NotRunning)
    ));
    m.start().unwrap();
    let started = Arc::new(AtomicU64::new(0));
    let flag = started.clone();
    let task = m
        .spawn_on_shard(move |ctx| async move {
            let mut inbox = ctx.inbox(4).unwrap();
            flag.store(1, Ordering::Release);
            let mut b = Vec::new();
            loop {
                inbox.recv_batch(&mut b).await;
            }
        })
        .unwrap();
    wait_until(10, "the task runs", || started.load(Ordering::Acquire) == 1);
    m.stop();
    assert_eq!(task.join_blocking(), Err(ShardTaskError::Cancelled));
    assert!(matches!(
        m.spawn_on_shard(|_ctx| async {}),
        Err(MeshError::NotRunning)
    ));
}

#[test]
fn a_task_hogging_its_shard_shows_in_the_stats() {
    let m = fast().build().unwrap();
    m.start().unwrap();
    assert_eq!(m.stats().shard_task_long_polls, 0);
    let task = m
        .spawn_on_shard(|_ctx| async {
            // Blocks its shard (what a shard task must not do) for one poll.
            std::thread::sleep(Duration::from_millis(20));
        })
        .unwrap();
    task.join_blocking().unwrap();
    let st = m.stats();
    // At least: on a loaded machine a short poll may be preempted past the mark too.
    assert!(
        st.shard_task_long_polls >= 1,
        "the blocking poll is counted"
    );
    assert!(
        st.shard_task_busy_us >= 20_000,
        "busy {} µs",
        st.shard_task_busy_us
    );
    m.stop();
}
