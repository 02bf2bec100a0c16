//! `demo`: the README's main job.

use super::{check_size, emit_json, ms, MainError, Output};
use crate::demo::LocalRun;
use crate::shoal::NodeArgs;
use crate::traffic::Shape;
use crate::{bench, demo, demo_topics};
use clap::Args;

/// `demo`'s arguments.
#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// Nodes in the mesh (node 0 publishes).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Measured time, ms (after the warm-up).
    #[arg(long, default_value_t = 5000)]
    duration_ms: u64,
    /// Warm-up, ms (default: a fifth of the duration, at most 500).
    #[arg(long)]
    warmup_ms: Option<u64>,
    /// Smallest payload, bytes (at least 24: the stamp).
    #[arg(long, default_value_t = 64)]
    size_min: usize,
    /// Largest payload, bytes (sizes are drawn uniformly in between).
    #[arg(long, default_value_t = 1024)]
    size_max: usize,
    /// Target messages/s (0 = as fast as backpressure allows).
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Publisher batch size, bytes (0 = one call per message; see `pub --help`).
    #[arg(long, default_value_t = shoal_mesh::node::DEFAULT_BATCH_BYTES)]
    batch_bytes: usize,
    /// Data shards per node.
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// Also run the same shape over raw TCP and print the ratio.
    #[arg(long)]
    compare: bool,
    /// Then the topics part: a fresh 3-node mesh with writers and readers on a few topics and
    /// partitions (who matched whom, what did not and why, per-topic rates), writing for
    /// this many ms (0 = no topics part).
    #[arg(long, default_value_t = 1000)]
    topics_ms: u64,
    /// Mesh settings file (TOML, `MeshConfig` keys) for every node, e.g. `relay_pruning`.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    #[command(flatten)]
    out: Output,
}

/// Runs the demo: broadcasts over a small mesh, then the topics part.
pub(crate) fn demo(a: DemoArgs) -> Result<(), MainError> {
    check_size(a.size_min)?;
    if a.size_max < a.size_min {
        return Err(MainError::Usage(
            "--size-max must be at least --size-min".into(),
        ));
    }
    let warmup = a.warmup_ms.unwrap_or((a.duration_ms / 5).min(500));
    let mut node = NodeArgs::loopback();
    node.shards = a.shards;
    node.batch_bytes = a.batch_bytes;
    node.config = a.config.clone();
    let run = LocalRun {
        nodes: a.nodes,
        shape: Shape {
            size: a.size_min,
            size_max: a.size_max,
            rate: a.rate,
            duration: ms(a.duration_ms),
            warmup: ms(warmup),
        },
        node,
        quiet: a.out.quiet || a.out.json,
        mode: "demo",
    };
    if !a.out.json {
        println!(
            "Starting {} Shoal nodes on 127.0.0.1 (static peers, full mesh, no multicast); node 0 \
             broadcasts {}-{} B messages for {:.1} s (+{:.1} s warm-up), the others subscribe.",
            a.nodes,
            a.size_min,
            a.size_max,
            a.duration_ms as f64 / 1000.0,
            warmup as f64 / 1000.0
        );
    }
    let shoal = demo::run_shoal(&run)?;
    let mut template = run.node.clone();
    template.batch_bytes = a.batch_bytes;
    let topics_part = |quiet: bool| -> Result<Option<demo_topics::TopicsDemo>, MainError> {
        if a.topics_ms == 0 {
            return Ok(None);
        }
        Ok(Some(demo_topics::run(&template, ms(a.topics_ms), quiet)?))
    };
    let with_topics = |v: &dyn erased::Json, t: &Option<demo_topics::TopicsDemo>| {
        let mut v = v.value()?;
        if let Some(t) = t {
            v["topics"] = serde_json::to_value(t)?;
        }
        Ok::<_, MainError>(v)
    };
    if !a.compare {
        let topics = topics_part(a.out.quiet || a.out.json)?;
        if a.out.json {
            return emit_json(&with_topics(&shoal, &topics)?);
        }
        shoal.print();
        if a.rate <= 0.0 {
            println!(
                "   (as fast as backpressure allows: latency is mostly time spent in full queues; \
                 try --rate 20000 for latency under a steady load)"
            );
        }
        if let Some(t) = &topics {
            t.print();
        }
        return Ok(());
    }
    let raw = demo::run_raw(&run)?;
    let cmp = bench::pair(a.size_min, shoal, raw);
    let topics = topics_part(a.out.quiet || a.out.json)?;
    if a.out.json {
        return emit_json(&with_topics(&cmp, &topics)?);
    }
    cmp.shoal.print();
    cmp.raw.print();
    println!("shoal / raw TCP delivered msgs/s: {:.2}x", cmp.ratio);
    if let Some(t) = &topics {
        t.print();
    }
    Ok(())
}

/// Serialisation behind a trait object, so one closure can take either summary type.
mod erased {
    /// Something that serialises to a JSON value.
    pub trait Json {
        /// The JSON value.
        fn value(&self) -> Result<serde_json::Value, serde_json::Error>;
    }

    impl<T: serde::Serialize> Json for T {
        fn value(&self) -> Result<serde_json::Value, serde_json::Error> {
            serde_json::to_value(self)
        }
    }
}
