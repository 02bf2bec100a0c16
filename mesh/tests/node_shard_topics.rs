//! Live nodes over 127.0.0.1: topics in shard tasks. A shard task's writer
//! ([`ShardContext::writer`]) packs its samples on the shard and hands each batch straight to
//! the shard's core; a shard task's reader gets its runs in the task's inbox; reliable
//! writers wait for credit with an `.await`; backpressure, several shards, stopping and a
//! dropped writer. Every wait is for a condition (bounded), never a fixed sleep.

mod node_support;

use node_support::samples::{matched, seqs, wait_complete};
use node_support::shard_tasks::{join, Guid, Step};
use node_support::*;
use shoal_mesh::node::shard_task::Delivered;
use shoal_mesh::proto::link_shard;
use shoal_mesh::topics::{EndpointGuid, Topic};
use shoal_mesh::{
    Event, EventReceiver, MeshBuilder, OverflowPolicy, PeerId, PublishError, ShardTaskError,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: &str = "shard/topic";

fn topic() -> Topic {
    Topic::new(T, "Blob")
}

/// Sample `seq`'s payload: its number, then `len - 8` bytes of filler.
fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut p = vec![0x5a; len.max(8)];
    p[..8].copy_from_slice(&seq.to_be_bytes());
    p
}

fn seq_of(p: &[u8]) -> u64 {
    assert!(p[8..].iter().all(|b| *b == 0x5a), "payload corrupted");
    u64::from_be_bytes(p[..8].try_into().unwrap())
}

/// A and B, linked both ways.
fn pair(a: MeshBuilder, b: MeshBuilder) -> [Node; 2] {
    let a = Node::start(a);
    let b = Node::start(b.static_peer(ep(a.port())));
    let nodes = [a, b];
    wait_connected(&nodes, &[(0, 1)]);
    nodes
}

#[test]
fn a_shard_writer_reaches_a_remote_reader_in_order() {
    const N: u64 = 20_000;
    let [a, b] = pair(fast(), fast());
    let r = b.mesh.reader(topic()).unwrap();
    let (guid, go) = (Guid::default(), Step::default());
    let (g, step) = (guid.clone(), go.clone());
    let task = a
        .mesh
        .spawn_on_shard(move |ctx| async move {
            let mut w = ctx
                .writer(topic())
                .await
                .expect("writer")
                .with_batch_bytes(4096);
            g.put(w.guid());
            step.reached(1).await;
            for seq in 1..=N {
                assert_eq!(w.write(&payload(seq, 100)).await?, seq, "numbered from 1");
            }
            w.flush().await?;
            assert_eq!(w.pending(), 0);
            Ok::<_, PublishError>(w.next_seq())
        })
        .expect("spawned");
    let wg = guid.wait();
    wait_until(20, "matched on both sides", || {
        matched(&a, wg, r.guid()) && matched(&b, wg, r.guid())
    });
    go.set(1);
    assert_eq!(join(task, 60), Ok(Ok(N + 1)));
    wait_complete(&b, r.guid(), wg, N);
    for e in b.rec.events() {
        if let Event::Sample { seq, payload, .. } = e {
            assert_eq!(seq_of(&payload), seq, "sample {seq}'s payload");
        }
    }
    let st = a.mesh.stats();
    assert_eq!(st.unflushed_discarded, 0);
    assert_eq!(st.total.dropped_queue_full, 0);
    // Counted for its topic as the thread API's writes are.
    let written = a.mesh.topics().topic(T).map_or(0, |t| t.stats.written);
    assert_eq!(written, N);
}

/// What a shard task's reader took from its inbox: the sequence numbers of its runs, in
/// order, checked against their payloads; loss reports; other entries.
#[derive(Debug, Default)]
struct Taken {
    seqs: Vec<u64>,
    runs: u64,
    lost: u64,
    other: u64,
}

impl Taken {
    fn take(&mut self, r: &shoal_mesh::topics::Reader, batch: &mut Vec<Delivered>) {
        for d in batch.drain(..) {
            if !r.owns(&d) {
                self.other += 1;
                continue;
            }
            match d {
                Delivered::Samples(run) => {
                    self.runs += 1;
                    assert_eq!(run.reader, r.guid());
                    for (seq, p) in run.samples.seqs().zip(run.samples.payloads()) {
                        assert_eq!(seq_of(&p), seq, "sample {seq}'s payload");
                        self.seqs.push(seq);
                    }
                }
                Delivered::Lost(_) => self.lost += 1,
                Delivered::Message(_) => unreachable!("a message is no reader's"),
            }
        }
    }
}

#[test]
fn a_shard_task_reader_gets_a_thread_writers_runs_in_its_inbox() {
    const N: u64 = 20_000;
    let [a, b] = pair(fast(), fast());
    let guid = Guid::default();
    let g = guid.clone();
    let task = b
        .mesh
        .spawn_on_shard(move |ctx| async move {
            let mut inbox = ctx.inbox(64).expect("the inbox is free");
            let r = ctx.reader(topic()).await.expect("reader");
            g.put(r.guid());
            let (mut batch, mut got) = (Vec::new(), Taken::default());
            while (got.seqs.len() as u64) < N {
                inbox.recv_batch(&mut batch).await;
                got.take(&r, &mut batch);
            }
            got
        })
        .expect("spawned");
    let rg = guid.wait();
    let mut w = a.mesh.writer(topic()).unwrap();
    wait_until(20, "matched on both sides", || {
        matched(&a, w.guid(), rg) && matched(&b, w.guid(), rg)
    });
    for seq in 1..=N {
        assert_eq!(w.write_blocking(&payload(seq, 100)).unwrap(), seq);
    }
    w.flush_blocking().unwrap();
    let got = join(task, 60).expect("ran");
    assert_eq!(
        got.seqs,
        (1..=N).collect::<Vec<_>>(),
        "every sample once, in order"
    );
    assert!(got.runs < N, "runs, not one entry per sample: {}", got.runs);
    assert_eq!((got.lost, got.other), (0, 0));
    assert!(
        seqs(&b, rg, w.guid()).is_empty(),
        "while the task held the inbox, samples bypassed the event queue"
    );
}

/// Node ids for a receiver B with two shards and two senders: sender 0's link on B lives on
/// B's origin shard (where the inbox is), sender 1's on the other one; on sender 1 (with two
/// shards too) the link to B lives on another shard than its origin, so its publishes cross
/// shards there as well.
fn cross_shard_ids() -> (PeerId, [PeerId; 2]) {
    let shard = |id: &PeerId| link_shard(id, 2);
    let b = PeerId([1; 16]);
    let mut ids = (2u8..=60).map(|k| PeerId([k; 16]));
    let s0 = ids
        .find(|id| shard(id) == shard(&b))
        .expect("an id on B's origin shard");
    let s1 = ids
        .find(|id| shard(id) != shard(&b))
        .expect("an id on B's other shard");
    (b, [s0, s1])
}

#[test]
fn with_two_shards_every_delivery_reaches_the_inbox_in_order_per_sender() {
    const N: u64 = 5_000;
    let (bid, [s0id, s1id]) = cross_shard_ids();
    let b = Node::start(fast().shards(2).node_id(bid));
    let s0 = Node::start(fast().node_id(s0id).static_peer(ep(b.port())));
    let s1 = Node::start(fast().shards(2).node_id(s1id).static_peer(ep(b.port())));
    let nodes = [b, s0, s1];
    wait_connected(&nodes, &[(0, 1), (0, 2)]);
    let [b, s0, s1] = nodes;
    // B's shard task: the inbox and a reader; counts messages and samples per sender.
    let guid = Guid::default();
    let g = guid.clone();
    let (s0_id, s1_id) = (s0.id(), s1.id());
    let task = b
        .mesh
        .spawn_on_shard(move |ctx| async move {
            let mut inbox = ctx.inbox(16).expect("the inbox is free");
            let r = ctx.reader(topic()).await.expect("reader");
            g.put(r.guid());
            let mut msgs: [Vec<u64>; 2] = Default::default();
            let mut samples: std::collections::HashMap<EndpointGuid, Vec<u64>> = Default::default();
            let mut batch = Vec::new();
            let done = |m: &[Vec<u64>; 2], s: &std::collections::HashMap<_, Vec<u64>>| {
                m.iter().all(|v| v.len() as u64 == N)
                    && s.len() == 2
                    && s.values().all(|v| v.len() as u64 == N)
            };
            while !done(&msgs, &samples) {
                inbox.recv_batch(&mut batch).await;
                for d in batch.drain(..) {
                    match d {
                        Delivered::Message(m) => {
                            let i = usize::from(m.from == s1_id);
                            assert!(m.from == s0_id || m.from == s1_id);
                            msgs[i].push(seq_of(&m.payload));
                        }
                        Delivered::Samples(run) => {
                            assert!(r.owns(&Delivered::Samples(run.clone())));
                            let v = samples.entry(run.samples.writer).or_default();
                            for (seq, p) in run.samples.seqs().zip(run.samples.payloads()) {
                                assert_eq!(seq_of(&p), seq);
                                v.push(seq);
                            }
                        }
                        Delivered::Lost(l) => panic!("nothing is lost: {l:?}"),
                    }
                }
            }
            (msgs, samples)
        })
        .expect("spawned");
    let rg = guid.wait();
    // Sender 1 publishes from a shard task (its link to B on its other shard).
    let go = Step::default();
    let (step, bid2) = (go.clone(), b.id());
    let wguid = Guid::default();
    let wg1 = wguid.clone();
    let t1 = s1
        .mesh
        .spawn_on_shard(move |mut ctx| async move {
            let mut w = ctx.writer(topic()).await.expect("writer");
            wg1.put(w.guid());
            step.reached(1).await;
            for seq in 0..N {
                ctx.send(bid2, payload(seq, 200)).await?;
                w.write(&payload(seq + 1, 200)).await?;
            }
            w.flush().await?;
            Ok::<_, PublishError>(ctx.shard())
        })
        .expect("spawned");
    let w1 = wguid.wait();
    let mut w0 = s0.mesh.writer(topic()).unwrap();
    wait_until(20, "both writers matched on both sides", || {
        matched(&b, w0.guid(), rg)
            && matched(&s0, w0.guid(), rg)
            && matched(&b, w1, rg)
            && matched(&s1, w1, rg)
    });
    go.set(1);
    for seq in 0..N {
        s0.mesh.send_blocking(b.id(), payload(seq, 200)).unwrap();
        w0.write_blocking(&payload(seq + 1, 200)).unwrap();
    }
    w0.flush_blocking().unwrap();
    assert_eq!(join(t1, 60), Ok(Ok(link_shard(&s1.id(), 2))));
    let (msgs, samples) = join(task, 60).expect("ran");
    let want: Vec<u64> = (0..N).collect();
    assert_eq!(msgs[0], want, "sender 0's messages, in order, once");
    assert_eq!(msgs[1], want, "sender 1's messages, in order, once");
    let want: Vec<u64> = (1..=N).collect();
    assert_eq!(samples[&w0.guid()], want, "sender 0's samples");
    assert_eq!(samples[&w1], want, "sender 1's samples");
    // Both of B's shards delivered: the other one's deliveries crossed to the inbox.
    let st = b.mesh.stats();
    assert!(
        st.shards.iter().all(|s| s.delivered > 0),
        "both shards delivered: {:?}",
        st.shards.iter().map(|s| s.delivered).collect::<Vec<_>>()
    );
    assert!(
        b.rec.messages().is_empty(),
        "nothing went to the event queue"
    );
    assert!(
        s1.mesh.stats().total.hops_out >= N,
        "sender 1's publishes crossed shards"
    );
}

/// Reads Sample events of writer `w` from `rx` until `last` arrived (bounded); their seqs.
fn drain_samples(rx: &mut EventReceiver, w: EndpointGuid, last: u64) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = Vec::new();
    while got.last() != Some(&last) {
        assert!(Instant::now() < deadline, "timed out at {:?}", got.last());
        if let Some(Event::Sample {
            writer,
            seq,
            payload,
            ..
        }) = rx.recv_timeout(Duration::from_millis(100))
        {
            if writer == w {
                assert_eq!(seq_of(&payload), seq);
                got.push(seq);
            }
        }
    }
    got
}

#[test]
fn try_write_says_full_while_a_link_has_no_room_and_write_awaits_it() {
    const BOUND: usize = 32 * 1024;
    let (s, r, mut rx) = sender_and_receiver(
        fast()
            .overflow_policy(OverflowPolicy::Block)
            .max_outbound_queue_bytes(BOUND),
        fast().event_queue_capacity(64),
    );
    let reader = r.reader(topic()).unwrap();
    let (guid, accepted, go) = (
        Guid::default(),
        Arc::new(AtomicU64::new(0)),
        Step::default(),
    );
    let (g, acc, step) = (guid.clone(), accepted.clone(), go.clone());
    let task = s
        .mesh
        .spawn_on_shard(move |mut ctx| async move {
            let mut w = ctx
                .writer(topic())
                .await
                .expect("writer")
                .with_batch_bytes(0);
            g.put(w.guid());
            step.reached(1).await;
            // Without waiting until refused: the receiver reads nothing, so its link fills.
            let err = loop {
                match w.try_write(&payload(w.next_seq(), 1000)) {
                    Ok(_) => {}
                    Err(e) => break e,
                }
                if w.next_seq() % 16 == 0 {
                    ctx.yield_now().await;
                }
            };
            let last = w.next_seq() - 1;
            acc.store(last, Ordering::Release);
            // The waiting forms wait for room instead (the receiver reads from now on).
            for _ in 0..100 {
                w.write(&payload(w.next_seq(), 1000)).await?;
            }
            w.flush().await?;
            Ok::<_, PublishError>((err, last, w.next_seq() - 1))
        })
        .expect("spawned");
    let wg = guid.wait();
    wait_until(20, "matched on both sides", || {
        matched(&s, wg, reader.guid())
            && r.topics()
                .topic(T)
                .is_some_and(|t| t.writers == 1 && t.readers == 1)
    });
    go.set(1);
    wait_until(60, "try_write refused", || {
        accepted.load(Ordering::Acquire) > 0
    });
    let last = accepted.load(Ordering::Acquire);
    // Every sample accepted, the refused one not among them, in order, once.
    let got = drain_samples(&mut rx, wg, last + 100);
    assert_eq!(got, (1..=last + 100).collect::<Vec<_>>());
    let (err, l, end) = join(task, 60).expect("ran").expect("wrote");
    assert_eq!(err, PublishError::Full, "try_write says why");
    assert_eq!((l, end), (last, last + 100));
    let st = s.mesh.stats().total;
    assert!(
        st.peak_queued_bytes as usize <= BOUND,
        "peak {}",
        st.peak_queued_bytes
    );
    assert_eq!(st.dropped_queue_full, 0);
}

#[test]
fn a_dropped_shard_writer_flushes_what_it_holds() {
    let [a, b] = pair(fast(), fast());
    let r = b.mesh.reader(topic()).unwrap();
    let (guid, go) = (Guid::default(), Step::default());
    let (g, step) = (guid.clone(), go.clone());
    let task = a
        .mesh
        .spawn_on_shard(move |ctx| async move {
            let mut w = ctx
                .writer(topic())
                .await
                .expect("writer")
                .with_batch_bytes(1 << 20);
            g.put(w.guid());
            step.reached(1).await;
            for seq in 1..=10 {
                w.try_write(&payload(seq, 100)).expect("room");
            }
            w.pending()
            // Dropped here, with the ten samples still in its batch.
        })
        .expect("spawned");
    let wg = guid.wait();
    wait_until(20, "matched on both sides", || {
        matched(&a, wg, r.guid()) && matched(&b, wg, r.guid())
    });
    go.set(1);
    assert_eq!(
        join(task, 30),
        Ok(10),
        "nothing was handed over before the drop"
    );
    wait_complete(&b, r.guid(), wg, 10);
    assert_eq!(a.mesh.stats().unflushed_discarded, 0);
}

#[test]
fn stopping_a_node_ends_its_writing_and_reading_shard_tasks() {
    // B reads nothing from its event queue: A's writes soon wait for room.
    let (a, b, _unread) = sender_and_receiver(
        fast()
            .overflow_policy(OverflowPolicy::Block)
            .max_outbound_queue_bytes(32 * 1024usize),
        fast().event_queue_capacity(16),
    );
    let r = b.reader(topic()).unwrap();
    let (guid, written, go) = (
        Guid::default(),
        Arc::new(AtomicU64::new(0)),
        Step::default(),
    );
    let (g, n, step) = (guid.clone(), written.clone(), go.clone());
    let writing = a
        .mesh
        .spawn_on_shard(move |ctx| async move {
            let mut w = ctx.writer(topic()).await.expect("writer");
            g.put(w.guid());
            step.reached(1).await;
            loop {
                let seq = w.write(&payload(w.next_seq(), 1000)).await?;
                n.store(seq, Ordering::Release);
            }
            #[allow(unreachable_code)]
            Ok::<(), PublishError>(())
        })
        .expect("spawned");
    let wg = guid.wait();
    wait_until(20, "A and B route the writer", || {
        matched(&a, wg, r.guid())
            && b.topics()
                .topic(T)
                .is_some_and(|t| t.writers == 1 && t.readers == 1)
    });
    go.set(1);
    // A reading task on A too, waiting in its inbox when the node stops.
    let reading = a
        .mesh
        .spawn_on_shard(|ctx| async move {
            let mut inbox = ctx.inbox(4).expect("free");
            let mut batch = Vec::new();
            loop {
                inbox.recv_batch(&mut batch).await;
            }
        })
        .expect("spawned");
    // The writes are held back: the link's queue is full (B reads nothing), as full as
    // batches of a quarter of its bound fill it.
    wait_until(30, "the writer waits for room", || {
        let st = a.mesh.stats().total;
        written.load(Ordering::Acquire) > 0 && st.peak_queued_bytes > 24 * 1024 - 2 * 1100
    });
    a.mesh.stop();
    match join(writing, 30) {
        Err(ShardTaskError::Cancelled) | Ok(Err(PublishError::Stopped)) => {}
        other => panic!("the writing task ends: {other:?}"),
    }
    assert_eq!(join(reading, 30), Err(ShardTaskError::Cancelled));
    drop(r);
    b.stop();
}

/// `Mesh::writer` from an event callback on a data shard (a reply writer opened when the
/// first request sample arrives): the control plane answers a writer once its route table
/// reached every shard, so waiting for that answer on a shard would wait for itself.
#[test]
fn a_writer_opened_in_a_sample_callback_works() {
    let slot: Arc<std::sync::OnceLock<shoal_mesh::Mesh>> = Arc::default();
    let opened: Arc<std::sync::Mutex<Option<Result<shoal_mesh::topics::Writer, String>>>> =
        Arc::default();
    let (m, o) = (slot.clone(), opened.clone());
    let a = Node::start(fast().on_event(move |e| {
        if let Event::Sample { .. } = e {
            let mut o = o.lock().unwrap();
            if o.is_none() {
                let mesh = m.get().expect("set after build");
                let w = mesh.writer(Topic::new("shard/reply", "Blob"));
                *o = Some(w.map_err(|e| e.to_string()));
            }
        }
    }));
    slot.set(a.mesh.clone()).unwrap();
    let b = Node::start(fast().static_peer(ep(a.port())));
    let nodes = [a, b];
    wait_connected(&nodes, &[(0, 1)]);
    let [a, b] = nodes;
    let requests = a.mesh.reader(topic()).unwrap();
    let replies = b.mesh.reader(Topic::new("shard/reply", "Blob")).unwrap();
    let mut w = b.mesh.writer(topic()).unwrap();
    wait_until(20, "the request pair matched", || {
        matched(&a, w.guid(), requests.guid()) && matched(&b, w.guid(), requests.guid())
    });
    w.write_blocking(&payload(1, 8)).unwrap();
    w.flush_blocking().unwrap();
    wait_until(30, "the callback opened its writer", || {
        opened.lock().unwrap().is_some()
    });
    let mut reply = opened
        .lock()
        .unwrap()
        .take()
        .unwrap()
        .expect("the writer opens from the callback");
    wait_until(20, "the reply pair matched", || {
        matched(&b, reply.guid(), replies.guid())
    });
    reply.write_blocking(&payload(1, 8)).unwrap();
    reply.flush_blocking().unwrap();
    wait_complete(&b, replies.guid(), reply.guid(), 1);
}
