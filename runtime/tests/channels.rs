//! Channels between executors and from plain threads.

use std::time::Duration;

use shoal_runtime::channel::{channel, channel_hub, channel_mesh, ingress, ingress_weighted};
use shoal_runtime::{Closed, ExecutorId, Runtime, TryRecvError, TrySendError};

#[test]
fn mesh_delivers_every_message_once_in_order_under_backpressure() {
    const N: u64 = 5_000;
    let rt = Runtime::builder().shards(3).build().unwrap();
    let ids = rt.executors();
    // Capacity 2: senders hit backpressure constantly.
    let endpoints = channel_mesh::<(ExecutorId, u64)>(&ids, 2);
    let mut handles = Vec::new();
    for (i, ep) in endpoints.into_iter().enumerate() {
        let me = ids[i];
        let use_batches = i % 2 == 0;
        handles.push(
            rt.spawn_on(me, move || async move {
                assert_eq!(ep.id(), me);
                let (senders, mut rx) = ep.split();
                let peers = senders.len();
                // One task per destination so a full ring towards one peer does not stall the others.
                for (to, mut tx) in senders {
                    shoal_runtime::spawn_local(async move {
                        for seq in 0..N {
                            tx.send((me, seq))
                                .await
                                .unwrap_or_else(|_| panic!("{me}->{to} closed"));
                        }
                    })
                    .detach();
                }
                let mut next = std::collections::HashMap::new();
                let mut got = 0u64;
                let mut batch = Vec::new();
                while got < N * peers as u64 {
                    batch.clear();
                    if use_batches {
                        rx.recv_batch(&mut batch, 16).await.unwrap();
                    } else {
                        batch.push(rx.recv().await.unwrap());
                    }
                    for (from, (tag, seq)) in batch.drain(..) {
                        assert_eq!(from, tag);
                        let expected = next.entry(from).or_insert(0u64);
                        assert_eq!(seq, *expected, "out of order from {from}");
                        *expected += 1;
                        got += 1;
                    }
                }
                assert!(next.values().all(|&v| v == N));
                // Drain check: nothing extra arrives.
                assert!(matches!(
                    rx.try_recv(),
                    Err(TryRecvError::Empty | TryRecvError::Closed)
                ));
                got
            })
            .unwrap(),
        );
    }
    for h in handles {
        assert_eq!(h.join_blocking().unwrap(), N * 3);
    }
    rt.join().unwrap();
}

/// A member waits for its hub's messages and its members' behind one wake-up, and a hub
/// message sent before a member message that reacts to it is never handled after it.
#[test]
fn hub_members_wake_for_either_kind_and_keep_causality() {
    const N: u64 = 20_000;
    let rt = Runtime::builder().shards(2).build().unwrap();
    let (s0, s1) = (ExecutorId::Shard(0), ExecutorId::Shard(1));
    // Capacity 2: every sender meets backpressure, every receiver parks often.
    let (hub, mut members) = channel_hub::<u64, u64, u64>(ExecutorId::Control, &[s0, s1], 2);
    let (m1_across, _m1_up, mut m1_rx) = members.pop().unwrap().split();
    let (_m0_across, mut m0_up, mut m0_rx) = members.pop().unwrap().split();
    let hub_task = rt
        .spawn_on(ExecutorId::Control, move || async move {
            let (mut down, mut up) = hub.split();
            for k in 0..N {
                // Member 0 first: member 1 reacts to the second message with one to member 0.
                down[0].1.send(k).await.unwrap();
                down[1].1.send(k).await.unwrap();
            }
            up.recv().await.unwrap()
        })
        .unwrap();
    let relay = rt
        .spawn_on(s1, move || async move {
            let mut to_m0 = m1_across.into_iter().next().unwrap().1;
            let (mut from_hub, mut from_members) = (Vec::new(), Vec::new());
            let mut sent = 0;
            while sent < N {
                m1_rx
                    .recv_batch(&mut from_hub, &mut from_members, 16)
                    .await
                    .unwrap();
                assert!(from_members.is_empty(), "member 0 sends nothing");
                for k in from_hub.drain(..) {
                    assert_eq!(k, sent, "the hub's ring is FIFO");
                    to_m0.send(k).await.unwrap();
                    sent += 1;
                }
            }
            // Keeps its receiver until member 0 is done (the hub's senders close with it).
            m1_rx
        })
        .unwrap();
    let checker = rt
        .spawn_on(s0, move || async move {
            let (mut from_hub, mut from_members) = (Vec::new(), Vec::new());
            let (mut hub_next, mut member_next) = (0, 0);
            while hub_next < N || member_next < N {
                m0_rx
                    .recv_batch(&mut from_hub, &mut from_members, 16)
                    .await
                    .unwrap();
                for k in from_hub.drain(..) {
                    assert_eq!(k, hub_next);
                    hub_next += 1;
                }
                for (from, k) in from_members.drain(..) {
                    assert_eq!((from, k), (s1, member_next));
                    assert!(k < hub_next, "member message {k} handled before the hub's");
                    member_next += 1;
                }
            }
            m0_up.send(hub_next + member_next).await.unwrap();
        })
        .unwrap();
    checker.join_blocking().unwrap();
    assert_eq!(
        hub_task.join_blocking().unwrap(),
        (ExecutorId::Shard(0), 2 * N)
    );
    drop(relay.join_blocking().unwrap());
    rt.join().unwrap();
}

#[test]
fn try_send_reports_full_then_closed() {
    let (mut tx, mut rx) = channel::<u32>(2);
    assert_eq!(tx.capacity(), 2);
    tx.try_send(1).unwrap();
    tx.try_send(2).unwrap();
    assert_eq!(tx.try_send(3), Err(TrySendError::Full(3)));
    assert_eq!(tx.full_events(), 1);
    assert_eq!(rx.try_recv(), Ok(1));
    tx.try_send(3).unwrap();
    drop(rx);
    assert!(tx.is_closed());
    assert_eq!(tx.try_send(4), Err(TrySendError::Closed(4)));
}

#[test]
fn receiver_drains_then_sees_closed() {
    let (mut tx, mut rx) = channel::<u32>(4);
    tx.try_send(1).unwrap();
    assert_eq!(rx.try_recv(), Ok(1));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    tx.try_send(2).unwrap();
    drop(tx);
    assert_eq!(rx.try_recv(), Ok(2));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Closed));
}

#[test]
fn blocked_sender_sees_closed_when_receiver_executor_drops_it() {
    let rt = Runtime::builder().shards(2).build().unwrap();
    let (mut tx, rx) = channel::<u64>(1);
    let (mut filled_tx, mut filled_rx) = channel::<()>(1);
    let sender = rt
        .spawn_on(ExecutorId::Shard(0), move || async move {
            tx.send(1).await.unwrap();
            filled_tx.send(()).await.unwrap();
            // Ring full now: this waits until the receiver is dropped (or sees it gone).
            tx.send(2).await.map_err(|e| e.0)
        })
        .unwrap();
    let receiver = rt
        .spawn_on(ExecutorId::Shard(1), move || async move {
            filled_rx.recv().await.unwrap();
            shoal_runtime::time::sleep(Duration::from_millis(5)).await;
            drop(rx);
        })
        .unwrap();
    receiver.join_blocking().unwrap();
    assert_eq!(sender.join_blocking().unwrap(), Err(2));
    rt.join().unwrap();
}

#[test]
fn ingress_from_plain_threads() {
    const THREADS: u64 = 4;
    const PER: u64 = 2_000;
    let rt = Runtime::builder().shards(1).build().unwrap();
    let (tx, mut rx) = ingress::<(u64, u64)>(8);
    let consumer = rt
        .spawn_on(ExecutorId::Shard(0), move || async move {
            let mut next = vec![0u64; THREADS as usize];
            let mut batch = Vec::new();
            loop {
                batch.clear();
                match rx.recv_batch(&mut batch, 32).await {
                    Ok(_) => {
                        for &(t, seq) in &batch {
                            assert_eq!(seq, next[t as usize]);
                            next[t as usize] += 1;
                        }
                    }
                    Err(Closed) => return next,
                }
            }
        })
        .unwrap();
    let producers: Vec<_> = (0..THREADS)
        .map(|t| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for seq in 0..PER {
                    if t % 2 == 0 {
                        tx.send_blocking((t, seq)).unwrap();
                    } else {
                        // Spin on try_send: exercises Full under a small capacity.
                        let mut item = (t, seq);
                        loop {
                            match tx.try_send(item) {
                                Ok(()) => break,
                                Err(TrySendError::Full(v)) => {
                                    item = v;
                                    std::thread::yield_now();
                                }
                                Err(TrySendError::Closed(_)) => panic!("closed"),
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    drop(tx);
    assert_eq!(
        consumer.join_blocking().unwrap(),
        vec![PER; THREADS as usize]
    );
    rt.join().unwrap();
}

/// Blocked senders are woken only once the queue drained to half: a consumer that takes
/// one message at a time must still release every blocked sender, whatever the capacity.
#[test]
fn blocked_senders_are_released_by_single_takes_at_any_capacity() {
    for capacity in [1usize, 2, 3, 16] {
        let (tx, mut rx) = ingress::<u32>(capacity);
        let senders: Vec<_> = (0..2u32)
            .map(|t| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..5_000 {
                        tx.send_blocking(t * 1_000_000 + i).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let mut next = [0u32; 2];
        loop {
            match rx.try_recv() {
                Ok(v) => {
                    let t = (v / 1_000_000) as usize;
                    assert_eq!(v % 1_000_000, next[t], "capacity {capacity}");
                    next[t] += 1;
                }
                Err(TryRecvError::Empty) => std::thread::yield_now(),
                Err(TryRecvError::Closed) => break,
            }
        }
        assert_eq!(next, [5_000, 5_000], "capacity {capacity}");
        for s in senders {
            s.join().unwrap();
        }
    }
}

#[test]
fn ingress_try_send_full_and_closed() {
    let (tx, rx) = ingress::<u8>(1);
    let tx2 = tx.clone();
    tx.try_send(1).unwrap();
    assert_eq!(tx2.try_send(2), Err(TrySendError::Full(2)));
    assert_eq!(tx.full_events(), 1);
    drop(rx);
    assert!(tx.is_closed());
    assert_eq!(tx.try_send(3), Err(TrySendError::Closed(3)));
    assert_eq!(tx2.send_blocking(4).map_err(|e| e.0), Err(4));
}

/// A weighted ingress bounds the sum of weights, not the number of entries: a heavy entry
/// takes the room of many light ones, an entry heavier than the bound goes only into an
/// empty queue, and taking entries gives their weight back.
#[test]
fn weighted_ingress_bounds_the_sum_of_weights() {
    let (tx, mut rx) = ingress_weighted::<Vec<u8>>(10, |v| v.len());
    tx.try_send(vec![0; 6]).unwrap();
    tx.try_send(vec![1; 4]).unwrap();
    // Full by weight although only two entries are queued; an empty entry weighs 1.
    assert_eq!(tx.try_send(vec![]), Err(TrySendError::Full(vec![])));
    assert_eq!(rx.try_recv().unwrap(), vec![0; 6]);
    tx.try_send(vec![2; 5]).unwrap();
    assert_eq!(tx.try_send(vec![3; 2]), Err(TrySendError::Full(vec![3; 2])));
    tx.try_send(vec![]).unwrap();
    assert_eq!(tx.full_events(), 2);
    // Drain, then one entry heavier than the whole bound fits an empty queue (alone).
    while rx.try_recv().is_ok() {}
    tx.try_send(vec![4; 25]).unwrap();
    assert_eq!(tx.try_send(vec![5]), Err(TrySendError::Full(vec![5])));
    assert_eq!(rx.try_recv().unwrap().len(), 25);
    tx.try_send(vec![5]).unwrap();
}

/// Blocking senders of heavy and light entries through a small weighted ingress, drained by
/// `recv_batch`: everything arrives in order per sender and nobody stays blocked.
#[test]
fn weighted_ingress_releases_blocked_senders_through_batches() {
    let rt = Runtime::builder().shards(1).build().unwrap();
    let (tx, mut rx) = ingress_weighted::<(u32, u32, usize)>(16, |e| e.2);
    let consumer = rt
        .spawn_on(ExecutorId::Shard(0), move || async move {
            let mut next = [0u32; 2];
            let mut weight = 0usize;
            let mut batch = Vec::new();
            while rx.recv_batch(&mut batch, 4).await.is_ok() {
                for (t, seq, w) in batch.drain(..) {
                    assert_eq!(seq, next[t as usize]);
                    next[t as usize] += 1;
                    weight += w;
                }
            }
            (next, weight)
        })
        .unwrap();
    let senders: Vec<_> = (0..2u32)
        .map(|t| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut sent = 0;
                for seq in 0..3_000u32 {
                    let w = if t == 0 { 1 } else { 1 + (seq as usize % 12) };
                    tx.send_blocking((t, seq, w)).unwrap();
                    sent += w;
                }
                sent
            })
        })
        .collect();
    drop(tx);
    let sent: usize = senders.into_iter().map(|s| s.join().unwrap()).sum();
    let (next, weight) = consumer.join_blocking().unwrap();
    assert_eq!(next, [3_000, 3_000]);
    assert_eq!(weight, sent);
    rt.join().unwrap();
}

#[test]
fn blocking_ingress_sender_is_released_when_receiver_dies() {
    let rt = Runtime::builder().shards(1).build().unwrap();
    let (tx, rx) = ingress::<u8>(1);
    tx.try_send(0).unwrap();
    let t = std::thread::spawn(move || tx.send_blocking(1).map_err(|e| e.0));
    std::thread::sleep(Duration::from_millis(20));
    let h = rt
        .spawn_on(ExecutorId::Shard(0), move || async move {
            let _rx = rx;
            panic!("receiver executor dies");
        })
        .unwrap();
    assert!(h.join_blocking().is_err());
    assert_eq!(t.join().unwrap(), Err(1));
    assert!(rt.join().is_err());
}

#[test]
fn ingress_async_send_waits_for_room_between_executors() {
    let rt = Runtime::builder().shards(1).build().unwrap();
    let (tx, mut rx) = ingress::<u32>(2);
    let producer = rt
        .spawn_on(ExecutorId::Shard(0), move || async move {
            for i in 0..1_000 {
                tx.send(i).await.unwrap();
            }
            tx.full_events()
        })
        .unwrap();
    let consumer = rt
        .spawn_on(ExecutorId::Control, move || async move {
            let mut expected = 0;
            while let Ok(v) = rx.recv().await {
                assert_eq!(v, expected);
                expected += 1;
            }
            expected
        })
        .unwrap();
    producer.join_blocking().unwrap();
    assert_eq!(consumer.join_blocking().unwrap(), 1_000);
    rt.join().unwrap();
}

#[test]
fn spinning_executors_deliver_and_stop() {
    let rt = Runtime::builder()
        .shards(2)
        .spin_before_park(Duration::from_micros(50))
        .build()
        .unwrap();
    let (mut ping_tx, mut ping_rx) = channel::<u32>(4);
    let (mut pong_tx, mut pong_rx) = channel::<u32>(4);
    let echo = rt
        .spawn_on(ExecutorId::Shard(0), move || async move {
            while let Ok(v) = ping_rx.recv().await {
                pong_tx.send(v + 1).await.unwrap();
            }
        })
        .unwrap();
    let client = rt
        .spawn_on(ExecutorId::Shard(1), move || async move {
            for i in 0..2_000 {
                ping_tx.send(i).await.unwrap();
                assert_eq!(pong_rx.recv().await.unwrap(), i + 1);
            }
            // Timers still fire while the executor spins.
            shoal_runtime::time::sleep(Duration::from_millis(2)).await;
        })
        .unwrap();
    client.join_blocking().unwrap();
    echo.join_blocking().unwrap();
    rt.join().unwrap();
}
