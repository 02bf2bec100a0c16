//! Live nodes over 127.0.0.1: topics in shard tasks. A shard task's writer
//! ([`ShardContext::writer`]) packs its samples on the shard and hands each batch straight to
//! the shard's core; a shard task's reader gets its runs in the task's inbox; reliable
//! writers wait for credit with an `.await`; backpressure, several shards, stopping and a
//! dropped writer. Every wait is for a condition (bounded), never a fixed sleep.

mod node_support;

use node_support::samples::{matched, seqs, wait_complete};
use node_support::*;
use shoal_mesh::node::shard_task::Delivered;
use shoal_mesh::proto::link_shard;
use shoal_mesh::topics::{EndpointGuid, Topic};
use shoal_mesh::{Event, MeshBuilder, PeerId, PublishError, ShardTask, ShardTaskError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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

/// Waits on a shard task (without blocking its shard) until `cond` holds; bounded.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        shoal_runtime::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits for a shard task's end, at most `secs` (a hang fails the test instead of hanging it).
fn join<T: Send + 'static>(t: ShardTask<T>, secs: u64) -> Result<T, ShardTaskError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(t.join_blocking());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("the shard task ends in time")
}

/// A step counter shared by a shard task and the test thread.
#[derive(Clone, Default)]
struct Step(Arc<AtomicU64>);

impl Step {
    fn set(&self, v: u64) {
        self.0.store(v, Ordering::Release);
    }
    fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
    async fn reached(&self, v: u64) {
        until(&format!("step {v}"), || self.get() >= v).await
    }
}

/// A GUID handed from a shard task to the test thread.
#[derive(Clone, Default)]
struct Guid(Arc<Mutex<Option<EndpointGuid>>>);

impl Guid {
    fn put(&self, g: EndpointGuid) {
        *self.0.lock().unwrap() = Some(g);
    }
    fn wait(&self) -> EndpointGuid {
        let mut got = None;
        wait_until(20, "the task opened its endpoint", || {
            got = *self.0.lock().unwrap();
            got.is_some()
        });
        got.unwrap()
    }
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
