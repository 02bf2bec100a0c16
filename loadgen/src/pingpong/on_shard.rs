//! `ping --on-shard`: the round trips run in a shard task (`Mesh::spawn_on_shard`): each ping
//! is a direct call into the origin shard's core, each echo comes from the task's inbox, so
//! no application thread is on the round trip (as `pong --on-shard` on the other end).

use super::ping::{find_pong, goodbye_report};
use super::PingPongRun;
use crate::demo::RunError;
use crate::latency::{self, seq_of, stamped, LatencyRun, REPLY_TIMEOUT};
use crate::latency_hist::Latency;
use crate::usage::Usage;
use bytes::Bytes;
use shoal_mesh::node::shard_task::Delivered;
use shoal_mesh::PeerId;
use std::time::{Duration, Instant};

/// What the task measured: histogram, measured, pings sent, timeouts.
type Measured = (Latency, u64, u64, u64);

pub(super) fn ping_on_shard(r: &PingPongRun) -> Result<LatencyRun, RunError> {
    let s = &r.settings;
    if s.shape.rate > 0.0 {
        return Err(RunError::Usage(
            "ping --on-shard runs at max rate only".into(),
        ));
    }
    let (mesh, mut events) = s.node.start()?;
    let _metrics = r.metrics_for(&mesh)?;
    let result = (|| {
        let pong = find_pong(&mesh, &mut events, s.shape.size)?;
        let before = Usage::now();
        let (size, warmup, duration) = (s.shape.size, s.shape.warmup, s.shape.duration);
        let task = mesh
            .spawn_on_shard(move |ctx| round_trips(ctx, pong, size, warmup, duration))
            .map_err(crate::shoal::SetupError::from)?;
        let (hist, measured, sent, timeouts) = task
            .join_blocking()
            .map_err(|e| RunError::Usage(format!("ping task: {e}")))?
            .map_err(RunError::Usage)?;
        let usage = Usage::now().since(&before);
        // The inbox is gone with the task: the pong's report comes as an event.
        let report = goodbye_report(&mesh, pong, sent, &mut events);
        let mut run = latency::finish(s, &r.transport(), hist, measured, timeouts, usage);
        run.round_trips = sent;
        run.pong = report;
        Ok(run)
    })();
    mesh.stop();
    result
}

/// One ping in flight for `warmup + duration`, measured after the warm-up.
async fn round_trips(
    mut ctx: shoal_mesh::ShardContext,
    pong: PeerId,
    size: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<Measured, String> {
    let Some(mut inbox) = ctx.inbox(1024) else {
        return Err("the shard's inbox is taken".into());
    };
    let mut batch = Vec::new();
    let mut hist = Latency::default();
    let (mut seq, mut measured, mut timeouts) = (0u64, 0u64, 0u64);
    let measure_from = Instant::now() + warmup;
    let end = measure_from + duration;
    while Instant::now() < end {
        let t0 = Instant::now();
        ctx.send(pong, Bytes::from(stamped(size, seq)))
            .await
            .map_err(|e| format!("shoal send: {e}"))?;
        let echo = async {
            loop {
                inbox.recv_batch(&mut batch).await;
                let mine = |d: &Delivered| matches!(d, Delivered::Message(m) if seq_of(&m.payload) == Some(seq));
                if batch.iter().any(mine) {
                    return;
                }
            }
        };
        let got = shoal_runtime::time::timeout(REPLY_TIMEOUT, echo).await;
        let now = Instant::now();
        match got {
            Ok(()) if now >= measure_from => {
                hist.record(now.duration_since(t0).as_nanos() as u64);
                measured += 1;
            }
            Ok(()) => {}
            Err(_) => timeouts += 1,
        }
        seq += 1;
    }
    Ok((hist, measured, seq, timeouts))
}
