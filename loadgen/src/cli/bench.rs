//! `bench`: Shoal against raw TCP, PSK against plaintext, topics, reliable topics.

use super::{check_size, emit_json, fixed_shape, MainError, Output};
use crate::demo::LocalRun;
use crate::shoal::NodeArgs;
use crate::{bench, latency, repair_bench, topic_bench};
use clap::Args;
use shoal_mesh::crypto::RecordSuitePolicy;

/// `bench`'s arguments.
#[derive(Args, Debug)]
pub(crate) struct BenchArgs {
    /// Payload sizes, bytes.
    #[arg(long, value_delimiter = ',', default_value = "64,1024")]
    sizes: Vec<usize>,
    /// Measured time per run, ms.
    #[arg(long, default_value_t = 2000)]
    duration_ms: u64,
    /// Warm-up per run, ms.
    #[arg(long, default_value_t = 500)]
    warmup_ms: u64,
    /// Publisher batch size, bytes (0 = one call per message; see `pub --help`).
    #[arg(long, default_value_t = shoal_mesh::node::DEFAULT_BATCH_BYTES)]
    batch_bytes: usize,
    /// Data shards per node.
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// Keep each node's executors, and a reader waiting for a sample, polling this many
    /// microseconds before they park (0 = park at once), as the roles' `--spin-us`: more
    /// throughput at small sizes for a busier CPU; see tuning/README.md.
    #[arg(long, default_value_t = 0)]
    spin_us: u64,
    /// Mesh settings file for the Shoal nodes (TOML, `MeshConfig` keys, as for the roles'
    /// `--config`); the flags above override it.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Run the Shoal side secured with this pre-shared key (raw TCP stays plain).
    #[arg(long)]
    psk: Option<String>,
    /// Instead of Shoal vs raw TCP: Shoal with a PSK vs plaintext Shoal per size, once per
    /// `--suites` setting, with the PSK/plain ratios (the key is `--psk`, or a fixed one);
    /// then a 64 B ping-pong of each (`--pingpong-ms`).
    #[arg(long)]
    compare_psk: bool,
    /// With --compare-psk: the `record_suite` settings to run, in order (auto,
    /// chacha20-poly1305, aes-256-gcm).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "chacha20-poly1305,aes-256-gcm"
    )]
    suites: Vec<RecordSuitePolicy>,
    /// Secured runs: plaintext bytes after which a writer cuts a record (node option
    /// `record_bytes`; default the library's).
    #[arg(long)]
    record_bytes: Option<usize>,
    /// With --compare-psk: measured time of each ping-pong leg, ms (0 = no ping-pong part).
    #[arg(long, default_value_t = 2000)]
    pingpong_ms: u64,
    /// Instead of Shoal vs raw TCP: per size, broadcast A→B, topic samples A→B (one writer,
    /// one matched reader) and bare TCP of `u32 length | payload` (raw-lp), interleaved, with
    /// topic/broadcast and topic/raw-lp; then a fan-out to readers on `--fanout` nodes.
    #[arg(long, conflicts_with = "compare_psk")]
    topics: bool,
    /// With --topics: the topic runs' writer and readers' side are shard tasks
    /// (`Mesh::spawn_on_shard`) instead of application threads.
    #[arg(long, requires = "topics")]
    on_shard: bool,
    /// Instead of Shoal vs raw TCP: per size, best-effort topic samples A→B then reliable
    /// ones (a reliable keep-all writer, a reliable reader), with reliable/best-effort and
    /// the reader node's acknowledgement bytes per sample.
    #[arg(long, conflicts_with_all = ["compare_psk", "topics"])]
    reliable: bool,
    /// With --reliable: then the repair part, a gap of this many samples written while the
    /// link is cut, timed from the heal to the reader complete (0 = no repair part).
    #[arg(long, default_value_t = 10_000)]
    repair_gap: u64,
    /// With --topics: reader nodes of the fan-out run (0 = none).
    #[arg(long, default_value_t = 3)]
    fanout: usize,
    #[command(flatten)]
    out: Output,
}

/// Runs the comparison `a` asks for and prints its table.
pub(crate) fn bench_cmd(a: BenchArgs) -> Result<(), MainError> {
    for &s in &a.sizes {
        check_size(s)?;
    }
    let mut node = NodeArgs::loopback();
    node.shards = a.shards;
    node.batch_bytes = a.batch_bytes;
    node.spin_us = a.spin_us;
    node.config = a.config.clone();
    node.psk = a.psk.clone();
    node.record_bytes = a.record_bytes;
    let template = LocalRun {
        nodes: 2,
        shape: fixed_shape(64, 0.0, a.duration_ms, a.warmup_ms),
        node,
        quiet: a.out.quiet || a.out.json,
        mode: "bench",
    };
    if a.compare_psk {
        let psk = a.psk.as_deref().unwrap_or("shoal-bench-psk");
        let rows = bench::compare_psk(&template, &a.sizes, psk, &a.suites)?;
        let pingpong = if a.pingpong_ms > 0 {
            let s = latency::Settings {
                mode: latency::Mode::PingPong,
                shape: fixed_shape(64, 0.0, a.pingpong_ms, a.warmup_ms),
                node: template.node.clone(),
                quiet: template.quiet,
            };
            Some(bench::pingpong_psk(&s, psk, &a.suites)?)
        } else {
            None
        };
        if a.out.json {
            #[derive(serde::Serialize)]
            struct Psk<'a> {
                sizes: &'a [bench::PskComparison],
                pingpong: Option<bench::PingPongComparison>,
            }
            return emit_json(&Psk {
                sizes: &rows,
                pingpong,
            });
        }
        bench::print_psk_table(&rows);
        if let Some(p) = &pingpong {
            bench::print_pingpong(p);
        }
        return Ok(());
    }
    if a.reliable {
        let rows = topic_bench::compare_reliable(&template, &a.sizes)?;
        let repair = if a.repair_gap > 0 {
            Some(repair_bench::run(&template.node, a.repair_gap, 64)?)
        } else {
            None
        };
        if a.out.json {
            #[derive(serde::Serialize)]
            struct Reliable<'a> {
                sizes: &'a [topic_bench::ReliableComparison],
                repair: Option<repair_bench::RepairReport>,
            }
            return emit_json(&Reliable {
                sizes: &rows,
                repair,
            });
        }
        topic_bench::print_reliable_table(&rows);
        if let Some(r) = &repair {
            repair_bench::print(r);
        }
        return Ok(());
    }
    if a.topics {
        let rows = topic_bench::compare(&template, &a.sizes, a.fanout, a.on_shard)?;
        if a.out.json {
            return emit_json(&rows);
        }
        topic_bench::print_table(&rows);
        return Ok(());
    }
    let rows = bench::compare(&template, &a.sizes)?;
    if a.out.json {
        return emit_json(&rows);
    }
    bench::print_table(&rows);
    Ok(())
}
