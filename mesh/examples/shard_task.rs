//! Application code on the shards: two nodes in one process on 127.0.0.1, a shard task on
//! node A writing topic samples with a [`ShardWriter`](shoal_mesh::ShardWriter) straight into
//! its shard's core, and a shard task on node B counting them from its inbox, as runs, with
//! no application thread on either side.
//!
//! `cargo run -p shoal-mesh --example shard_task -- [samples] [payload bytes]`

use shoal_mesh::node::shard_task::Delivered;
use shoal_mesh::topics::Topic;
use shoal_mesh::Mesh;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

const TOPIC: &str = "example/shard-task";

/// Waits (on a plain thread) until `cond` holds, at most 10 s.
fn wait(what: &str, cond: impl Fn() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Writers and readers `m` knows on the topic.
fn endpoints(m: &Mesh) -> (usize, usize) {
    m.topics()
        .topic(TOPIC)
        .map_or((0, 0), |t| (t.writers, t.readers))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let n = args.first().copied().unwrap_or(200_000) as u64;
    let size = args.get(1).copied().unwrap_or(64).max(8);
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let b = Mesh::builder().scouting(false).listen_addr(lo).build()?;
    b.start()?;
    let a = Mesh::builder()
        .scouting(false)
        .listen_addr(lo)
        .static_peer(format!("127.0.0.1:{}", b.listen_port()))
        .build()?;
    a.start()?;
    wait("the link", || !a.connected_peers().is_empty())?;

    // B: a shard task holding the node's inbox and a reader; the runs of samples arrive
    // there whole (payloads are slices of the read buffer, nothing copied per sample).
    let reading = b.spawn_on_shard(move |ctx| async move {
        let mut inbox = ctx.inbox(256).expect("no other task holds the inbox");
        let reader = ctx.reader(Topic::new(TOPIC, "Counter")).await?;
        let (mut batch, mut samples, mut runs, mut next) = (Vec::new(), 0u64, 0u64, 1u64);
        while samples < n {
            inbox.recv_batch(&mut batch).await;
            for d in batch.drain(..) {
                if let Delivered::Samples(run) = &d {
                    if reader.owns(&d) {
                        // One writer's samples come in order, once: check it.
                        assert_eq!(run.samples.first_seq, next, "in order");
                        next += u64::from(run.samples.count);
                        samples += u64::from(run.samples.count);
                        runs += 1;
                    }
                }
            }
        }
        Ok::<_, shoal_mesh::MeshError>((samples, runs))
    })?;
    wait("B's reader", || endpoints(&b).1 == 1)?;

    // A: a shard task with a writer; it starts writing once both nodes route the pair.
    let (am, bm) = (a.clone(), b.clone());
    let writing = a.spawn_on_shard(move |ctx| async move {
        let mut w = ctx.writer(Topic::new(TOPIC, "Counter")).await?;
        while endpoints(&am) != (1, 1) || endpoints(&bm) != (1, 1) {
            // A shard task never blocks its thread: it awaits.
            shoal_runtime::time::sleep(Duration::from_millis(1)).await;
        }
        let start = Instant::now();
        let mut payload = vec![0u8; size];
        for i in 0..n {
            payload[..8].copy_from_slice(&i.to_be_bytes());
            // Awaits room when the link's queue is full, letting the shard's writers run.
            w.write(&payload).await?;
        }
        w.flush().await?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(start)
    })?;

    let start = writing.join_blocking()?.map_err(|e| e.to_string())?;
    let (samples, runs) = reading.join_blocking()??;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{samples} samples of {size} B in {runs} runs, shard task to shard task: {:.0} samples/s ({secs:.2} s)",
        samples as f64 / secs
    );
    a.stop();
    b.stop();
    Ok(())
}
