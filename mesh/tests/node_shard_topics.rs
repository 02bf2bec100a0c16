//! Live nodes over 127.0.0.1: topics in shard tasks. A shard task's writer
//! ([`ShardContext::writer`]) packs its samples on the shard and hands each batch straight to
//! the shard's core; a shard task's reader gets its runs in the task's inbox; reliable
//! writers wait for credit with an `.await`; backpressure, several shards, stopping and a
//! dropped writer. Every wait is for a condition (bounded), never a fixed sleep.

mod node_support;

use node_support::samples::{matched, seqs, wait_complete};
use node_support::*;
use shoal_mesh::node::shard_task::Delivered;
use shoal_mesh::topics::{EndpointGuid, Topic};
use shoal_mesh::{Event, MeshBuilder, PublishError};
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
    assert_eq!(task.join_blocking(), Ok(Ok(N + 1)));
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
    let got = task.join_blocking().expect("ran");
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
