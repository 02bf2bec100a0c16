//! `pub`, `sub` and `relay`: one node per process.

use super::{check_size, emit_json, fixed_shape, ms, MainError, Output};
use crate::shoal::NodeArgs;
use crate::{roles, topics};
use clap::Args;
use std::net::SocketAddr;

/// Arguments of the single-node roles (`pub`, `sub`, `relay`).
#[derive(Args, Debug)]
pub(crate) struct RoleArgs {
    /// Payload bytes (at least 24: the stamp).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Target messages/s (0 = as fast as backpressure allows).
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Measured time, ms (publisher: after warm-up; subscriber: after its first message and
    /// warm-up).
    #[arg(long, default_value_t = 10_000)]
    duration_ms: u64,
    /// Warm-up, ms.
    #[arg(long, default_value_t = 1000)]
    warmup_ms: u64,
    /// Subscriber and relay: extra run time for late starters and draining, ms.
    #[arg(long, default_value_t = 10_000)]
    linger_ms: u64,
    /// Publisher: connected peers to wait for (at most 30 s) before publishing (with
    /// --topic: and as many readers its node lists as matched with its writer).
    #[arg(long, default_value_t = 1)]
    wait_peers: usize,
    /// Subscriber: stop once this many publishers sent their end marker (0 = run the full
    /// time).
    #[arg(long, default_value_t = 1)]
    publishers: usize,
    /// Raw TCP instead of Shoal (pub: --static-peer = subscriber address; sub: --listen).
    #[arg(long)]
    raw: bool,
    /// With --raw: the framing of the stream, `data` (Shoal's Data frames, 58-byte header)
    /// or `lp` (`u32 length | payload`, the topic benchmark's raw-lp baseline). Both ends
    /// must agree.
    #[arg(long, value_enum, default_value = "data", requires = "raw")]
    framing: crate::raw::Framing,
    /// Run the application's side in a shard task (`Mesh::spawn_on_shard`): pub writes
    /// from the origin shard (its topic writer or broadcasts), sub takes the shard's
    /// deliveries from its inbox in batches (runs of samples, no per-sample copy).
    #[arg(long, conflicts_with = "raw")]
    on_shard: bool,
    /// Serve the node's counters in the Prometheus text format over HTTP on this address
    /// (`ip:port`; e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Subscriber: print only a markdown table row labelled NAME (for bench/run.sh).
    #[arg(long, value_name = "NAME")]
    markdown: Option<String>,
    #[command(flatten)]
    node: NodeArgs,
    #[command(flatten)]
    topic: topics::TopicArgs,
    #[command(flatten)]
    out: Output,
}

/// Runs one node in role `r` and prints its summary.
pub(crate) fn role(r: roles::Role, a: RoleArgs) -> Result<(), MainError> {
    check_size(a.size)?;
    let run = roles::RoleRun {
        role: r,
        shape: fixed_shape(a.size, a.rate, a.duration_ms, a.warmup_ms),
        node: a.node,
        wait_peers: a.wait_peers,
        publishers: a.publishers,
        linger: ms(a.linger_ms),
        raw: a.raw,
        framing: a.framing,
        on_shard: a.on_shard,
        quiet: a.out.quiet || a.out.json || a.markdown.is_some(),
        metrics: a.metrics,
        topic: a.topic,
    };
    let s = roles::run(&run)?;
    if a.out.json {
        return emit_json(&s);
    }
    if let Some(name) = &a.markdown {
        let u = &s.usage;
        println!(
            "| {name} | {} | {:.0} | {:.1} | {} | {} | {:.2} |",
            s.transport,
            s.msgs_per_s,
            s.mb_per_s,
            s.delivered,
            s.lost,
            u.cpu_user_s + u.cpu_sys_s
        );
        return Ok(());
    }
    s.print();
    Ok(())
}
