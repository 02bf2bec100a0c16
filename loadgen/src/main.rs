//! `shoal-loadgen`: the demo, load roles, throughput comparison with raw TCP, and the latency
//! harness of Shoal. Every run is bounded in time and stops by itself.
//!
//! Length: the clap definitions of every subcommand (~300 lines) and one function per subcommand
//! (~450 lines) that wires its arguments to the role modules and prints their results.
//!
//! - `demo`: a 3-node mesh in this process on loopback, one publisher, two subscribers; then
//!   writers and readers on a few topics (who matched whom, what did not and why, rates).
//! - `pub` / `sub` / `relay`: one node per process for multi-process and multi-host runs
//!   (`--raw` runs the same traffic over bare TCP; `--topic` a topic writer / readers).
//! - `bench`: Shoal A→B vs raw TCP A→B per payload size, with their ratio; `--topics`: topic
//!   samples A→B vs broadcast A→B vs length-prefixed raw TCP, and a fan-out.
//! - `latency`: ping-pong or one-way percentiles, `.hgrm` files and an SVG percentile chart.
//! - `discovery`: discovery latency (reader created to first sample), the time for many
//!   endpoints on many nodes to be fully matched, and the control thread's CPU on a node that
//!   knows many remote endpoints.
//! - `ping` / `pong`: the two ends of a ping-pong in separate processes (any hosts), with the
//!   output of `latency`; `chart` draws several runs' `.hgrm` files on one chart.
//!
//! The single-node roles (`pub`, `sub`, `relay`, `ping`, `pong`) serve the node's counters in
//! the Prometheus text format on `--metrics ADDR`.
//!
//! Throughput runs (`demo`, `bench`, `pub`) sample the process's resident memory every 250 ms
//! and report it at the end of the warm-up, its maximum in each half of the measured window,
//! at the end, and the growth, next to what the nodes' queues may hold. RSS is process-wide:
//! in `demo` and `bench` it covers the sending and the receiving nodes together; a `pub`
//! process alone gives the sender's.
//!
//! **Owns:** the command line, the traffic it generates, the raw-TCP baselines and what it
//! measures and reports (rates, latency histograms and charts, RSS, drops by cause).
//!
//! **Must not touch:** the mesh's internals: it drives nodes only through `shoal-mesh`'s
//! public API, so it measures what an application gets; it never hard-codes a result, and it
//! sends only to the addresses it is given (loopback or lab hosts).

mod bench;
mod chart;
mod control_cpu;
mod demo;
mod demo_topics;
mod discovery_bench;
mod gaps;
mod latency;
mod latency_hist;
mod latency_inline;
mod metrics;
mod pingpong;
mod plot;
mod raw;
mod repair_bench;
mod report;
mod roles;
mod rss;
mod shoal;
mod stamp;
mod topic_bench;
mod topic_report;
mod topics;
mod traffic;
mod usage;

use clap::{Args, Parser, Subcommand};
use demo::{LocalRun, RunError};
use shoal::NodeArgs;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use traffic::Shape;

#[derive(Parser, Debug)]
#[command(
    name = "shoal-loadgen",
    version,
    about = "Shoal demo, load generator and benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// A small mesh in this process on loopback: one publisher, the others subscribe.
    Demo(DemoArgs),
    /// Publish the traffic shape from one node.
    Pub(RoleArgs),
    /// Subscribe and measure rates, loss and latency.
    Sub(RoleArgs),
    /// A node that only forwards.
    Relay(RoleArgs),
    /// Shoal A→B broadcast vs raw TCP A→B, per payload size (with RSS over each run; both
    /// nodes share this process, so it is their sum).
    Bench(BenchArgs),
    /// Latency percentiles (ping-pong or one-way), Shoal and/or raw TCP, both ends in this
    /// process.
    Latency(LatencyArgs),
    /// The pinging end of a ping-pong with a `pong` in another process (any host): finds it
    /// (static peer or multicast), measures round trips, says goodbye.
    Ping(PingPongArgs),
    /// The answering end of a ping-pong: echoes one `ping` until it says goodbye.
    Pong(PingPongArgs),
    /// Draws the percentile curves of several `.hgrm` files on one SVG chart.
    Chart(ChartArgs),
    /// Discovery and control-plane measurements on loopback, in this process: reader creation
    /// to first sample, time to match many endpoints on many nodes, the control thread's CPU
    /// on a node that knows many remote endpoints.
    Discovery(DiscoveryCmd),
}

#[derive(Args, Debug)]
struct DiscoveryCmd {
    #[command(flatten)]
    args: discovery_bench::DiscoveryArgs,
    #[command(flatten)]
    out: Output,
}

#[derive(Args, Debug, Clone)]
struct Output {
    /// Print the summary as JSON on stdout (no progress line).
    #[arg(long)]
    json: bool,
    /// No progress line.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args, Debug)]
struct DemoArgs {
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
    #[command(flatten)]
    out: Output,
}

#[derive(Args, Debug)]
struct RoleArgs {
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

#[derive(Args, Debug)]
struct PingPongArgs {
    /// Payload bytes (at least 24).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Round trips per second; 0 = max, uncorrected. A fixed rate corrects for coordinated
    /// omission on the pinging side, where the pacing is.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Measured time, ms (ping; the pong's bound is warm-up + duration + linger).
    #[arg(long, default_value_t = 3000)]
    duration_ms: u64,
    /// Warm-up, ms.
    #[arg(long, default_value_t = 500)]
    warmup_ms: u64,
    /// Pong: how long past warm-up + duration it waits for a ping that never says goodbye.
    #[arg(long, default_value_t = 30_000)]
    linger_ms: u64,
    /// Answer (pong) or send the next ping (ping) in the node's event callback, on the shard
    /// thread (no application thread on the round trip; ping: max rate only).
    #[arg(long)]
    inline: bool,
    /// Raw TCP with the same frames (pong: --listen; ping: --static-peer = the pong).
    #[arg(long)]
    raw: bool,
    /// Ping: write `<PREFIX>-<transport>.hgrm` and `<PREFIX>.svg`.
    #[arg(long)]
    out_prefix: Option<PathBuf>,
    /// Ping: print only a markdown table row labelled NAME (for bench/run.sh).
    #[arg(long, value_name = "NAME")]
    markdown: Option<String>,
    /// Serve the node's counters in the Prometheus text format over HTTP on this address.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    #[command(flatten)]
    node: NodeArgs,
    #[command(flatten)]
    out: Output,
}

#[derive(Args, Debug)]
struct ChartArgs {
    /// `.hgrm` files (HdrHistogram percentile distributions, as `--out-prefix` writes them);
    /// each is labelled with its file name.
    #[arg(required = true)]
    hgrm: Vec<PathBuf>,
    /// The SVG to write.
    #[arg(long, short = 'o', default_value = "latency.svg")]
    out: PathBuf,
    /// Chart title.
    #[arg(long, default_value = "Round-trip latency")]
    title: String,
}

#[derive(Args, Debug)]
struct BenchArgs {
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
    /// Run the Shoal side secured with this pre-shared key (raw TCP stays plain).
    #[arg(long)]
    psk: Option<String>,
    /// Instead of Shoal vs raw TCP: Shoal with a PSK vs plaintext Shoal per size, with the
    /// PSK/plain ratio (the key is `--psk`, or a fixed one).
    #[arg(long)]
    compare_psk: bool,
    /// Instead of Shoal vs raw TCP: per size, broadcast A→B, topic samples A→B (one writer,
    /// one matched reader) and bare TCP of `u32 length | payload` (raw-lp), interleaved, with
    /// topic/broadcast and topic/raw-lp; then a fan-out to readers on `--fanout` nodes.
    #[arg(long, conflicts_with = "compare_psk")]
    topics: bool,
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

#[derive(Args, Debug)]
struct LatencyArgs {
    /// Measurement mode.
    #[arg(long, value_enum, default_value = "ping-pong")]
    mode: latency::Mode,
    /// Payload bytes (at least 24).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Messages (one-way) or round trips (ping-pong) per second; 0 = max, uncorrected.
    /// A fixed rate corrects for coordinated omission.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Measured time, ms.
    #[arg(long, default_value_t = 3000)]
    duration_ms: u64,
    /// Warm-up, ms.
    #[arg(long, default_value_t = 500)]
    warmup_ms: u64,
    /// Over raw TCP instead of Shoal.
    #[arg(long)]
    raw: bool,
    /// Shoal and raw TCP back to back.
    #[arg(long)]
    compare: bool,
    /// Write `<PREFIX>-<transport>.hgrm` and `<PREFIX>.svg`.
    #[arg(long)]
    out_prefix: Option<PathBuf>,
    /// Keep the nodes' executors polling this many microseconds before they park (0 = park
    /// at once): lower latency for more CPU (see tuning/README.md).
    #[arg(long, default_value_t = 0)]
    spin_us: u64,
    /// Data shards per node.
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// Ping-pong answered in event callbacks on the nodes' shard threads (no application
    /// thread on the round trip; max rate only). With --compare: this, the default Shoal
    /// ping-pong and raw TCP.
    #[arg(long)]
    inline: bool,
    /// Also run each Shoal measurement secured with this pre-shared key (labelled
    /// `shoal-psk`, `shoal-inline-psk`), so one chart holds Shoal, Shoal+PSK and raw TCP.
    #[arg(long, value_name = "KEY")]
    psk: Option<String>,
    /// Print only markdown table rows labelled NAME (for bench/run.sh).
    #[arg(long, value_name = "NAME")]
    markdown: Option<String>,
    #[command(flatten)]
    out: Output,
}

/// Failures that end the program, with a one-line message.
#[derive(Debug, thiserror::Error)]
enum MainError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("{0}")]
    Usage(String),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Plot(#[from] plot::PlotError),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Chart(#[from] chart::ChartError),
}

fn check_size(size: usize) -> Result<(), MainError> {
    if size < stamp::STAMP_LEN {
        return Err(MainError::Usage(format!(
            "payloads must be at least {} bytes (the measurement stamp); got {size}",
            stamp::STAMP_LEN
        )));
    }
    Ok(())
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn emit_json(v: &impl serde::Serialize) -> Result<(), MainError> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn demo(a: DemoArgs) -> Result<(), MainError> {
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

fn role(r: roles::Role, a: RoleArgs) -> Result<(), MainError> {
    check_size(a.size)?;
    let run = roles::RoleRun {
        role: r,
        shape: Shape {
            size: a.size,
            size_max: a.size,
            rate: a.rate,
            duration: ms(a.duration_ms),
            warmup: ms(a.warmup_ms),
        },
        node: a.node,
        wait_peers: a.wait_peers,
        publishers: a.publishers,
        linger: ms(a.linger_ms),
        raw: a.raw,
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

fn bench_cmd(a: BenchArgs) -> Result<(), MainError> {
    for &s in &a.sizes {
        check_size(s)?;
    }
    let mut node = NodeArgs::loopback();
    node.shards = a.shards;
    node.batch_bytes = a.batch_bytes;
    node.psk = a.psk.clone();
    let template = LocalRun {
        nodes: 2,
        shape: Shape {
            size: 64,
            size_max: 64,
            rate: 0.0,
            duration: ms(a.duration_ms),
            warmup: ms(a.warmup_ms),
        },
        node,
        quiet: a.out.quiet || a.out.json,
        mode: "bench",
    };
    if a.compare_psk {
        let psk = a.psk.as_deref().unwrap_or("shoal-bench-psk");
        let rows = bench::compare_psk(&template, &a.sizes, psk)?;
        if a.out.json {
            return emit_json(&rows);
        }
        bench::print_psk_table(&rows);
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
        let rows = topic_bench::compare(&template, &a.sizes, a.fanout)?;
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

fn write_file(
    path: PathBuf,
    f: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<PathBuf, MainError> {
    let mut file = std::fs::File::create(&path).map_err(|source| MainError::Write {
        path: path.clone(),
        source,
    })?;
    f(&mut file).map_err(|source| MainError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

fn latency_cmd(a: LatencyArgs) -> Result<(), MainError> {
    check_size(a.size)?;
    let mut node = NodeArgs::loopback();
    node.shards = a.shards;
    node.spin_us = a.spin_us;
    let settings = latency::Settings {
        mode: a.mode,
        shape: Shape {
            size: a.size,
            size_max: a.size,
            rate: a.rate,
            duration: ms(a.duration_ms),
            warmup: ms(a.warmup_ms),
        },
        node,
        quiet: a.out.quiet || a.out.json,
    };
    let transports: &[bool] = match (a.compare, a.raw) {
        (true, _) => &[false, true],
        (false, raw) => {
            if raw {
                &[true]
            } else {
                &[false]
            }
        }
    };
    if a.inline && a.mode != latency::Mode::PingPong {
        return Err(MainError::Usage("--inline needs --mode ping-pong".into()));
    }
    // Plaintext, then (with --psk) the same Shoal runs secured.
    let mut variants = vec![(settings.clone(), "")];
    if let Some(key) = &a.psk {
        if key.is_empty() {
            return Err(MainError::Usage("--psk needs a non-empty key".into()));
        }
        let mut secured = settings.clone();
        secured.node.psk = Some(key.clone());
        variants.push((secured, "-psk"));
    }
    let mut runs = Vec::new();
    for (settings, suffix) in &variants {
        let label = |mut r: latency::LatencyRun| {
            r.transport.push_str(suffix);
            r
        };
        if a.inline {
            runs.push(label(latency_inline::pingpong_shoal_inline(settings)?));
        }
        if transports.contains(&false) && (!a.inline || a.compare) {
            runs.push(label(latency::run(settings, false)?));
        }
    }
    if transports.contains(&true) {
        runs.push(latency::run(&settings, true)?);
    }
    let title = format!("{:?} latency, {} B, {}", a.mode, a.size, rate_label(a.rate));
    report_latency(
        &runs,
        a.out_prefix.as_ref(),
        &title,
        a.out.json,
        a.markdown.as_deref(),
    )
}

fn rate_label(rate: f64) -> String {
    if rate > 0.0 {
        format!("{rate:.0}/s")
    } else {
        "max rate".into()
    }
}

/// Writes the `.hgrm` files and the chart (with `prefix`) and prints the runs: JSON, markdown
/// rows, or text with each Shoal run's ratio to the raw TCP run of the same invocation.
fn report_latency(
    runs: &[latency::LatencyRun],
    prefix: Option<&PathBuf>,
    title: &str,
    json: bool,
    markdown: Option<&str>,
) -> Result<(), MainError> {
    let mut files = Vec::new();
    if let Some(prefix) = prefix {
        let base = prefix.display().to_string();
        for r in runs {
            files.push(write_file(
                PathBuf::from(format!("{base}-{}.hgrm", r.transport)),
                |f| r.histogram.write_hgrm(f),
            )?);
        }
        let svg = PathBuf::from(format!("{base}.svg"));
        let series: Vec<plot::Series> = runs
            .iter()
            .map(|r| (r.transport.clone(), r.histogram.curve()))
            .collect();
        plot::percentile_chart(&svg, title, &series)?;
        files.push(svg);
    }
    if json {
        return emit_json(&serde_json::json!({ "runs": runs, "files": files }));
    }
    if let Some(name) = markdown {
        for r in runs {
            let p = &r.percentiles;
            let cpu = |u: f64, s: f64| format!("{:.2}", u + s);
            let pong = r
                .pong
                .map_or("-".into(), |q| cpu(q.cpu_user_s, q.cpu_sys_s));
            println!(
                "| {name} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {} |",
                r.transport,
                p.p50_us,
                p.p90_us,
                p.p99_us,
                p.p999_us,
                p.p9999_us,
                p.max_us,
                p.count,
                cpu(r.usage.cpu_user_s, r.usage.cpu_sys_s),
                pong
            );
        }
        return Ok(());
    }
    for r in runs {
        latency::print(r);
    }
    // Every Shoal run against the raw TCP run of the same invocation.
    if let Some(r) = runs.iter().find(|r| r.transport == "raw-tcp") {
        let ratio = |x: f64, y: f64| if y > 0.0 { x / y } else { 0.0 };
        for s in runs.iter().filter(|s| s.transport != "raw-tcp") {
            println!(
                "{} / raw TCP: p50 {:.2}x | p99 {:.2}x | p99.9 {:.2}x",
                s.transport,
                ratio(s.percentiles.p50_us, r.percentiles.p50_us),
                ratio(s.percentiles.p99_us, r.percentiles.p99_us),
                ratio(s.percentiles.p999_us, r.percentiles.p999_us)
            );
        }
    }
    for f in &files {
        println!("wrote {}", f.display());
    }
    Ok(())
}

fn pingpong_run(a: &PingPongArgs) -> Result<pingpong::PingPongRun, MainError> {
    check_size(a.size)?;
    if a.node.psk.as_deref() == Some("") {
        return Err(MainError::Usage("--psk needs a non-empty key".into()));
    }
    Ok(pingpong::PingPongRun {
        settings: latency::Settings {
            mode: latency::Mode::PingPong,
            shape: Shape {
                size: a.size,
                size_max: a.size,
                rate: a.rate,
                duration: ms(a.duration_ms),
                warmup: ms(a.warmup_ms),
            },
            node: a.node.clone(),
            quiet: a.out.quiet || a.out.json || a.markdown.is_some(),
        },
        inline: a.inline,
        raw: a.raw,
        linger: ms(a.linger_ms),
        metrics: a.metrics,
    })
}

fn ping_cmd(a: PingPongArgs) -> Result<(), MainError> {
    let run = pingpong::run_ping(&pingpong_run(&a)?)?;
    let title = format!(
        "Ping-pong latency between two processes, {} B, {}",
        a.size,
        rate_label(a.rate)
    );
    report_latency(
        &[run],
        a.out_prefix.as_ref(),
        &title,
        a.out.json,
        a.markdown.as_deref(),
    )
}

fn pong_cmd(a: PingPongArgs) -> Result<(), MainError> {
    let s = pingpong::run_pong(&pingpong_run(&a)?)?;
    if a.out.json {
        return emit_json(&s);
    }
    s.print();
    Ok(())
}

fn chart_cmd(a: ChartArgs) -> Result<(), MainError> {
    let mut series = Vec::new();
    for path in &a.hgrm {
        series.push(chart::read_series(path)?);
    }
    plot::percentile_chart(&a.out, &a.title, &series)?;
    println!("wrote {}", a.out.display());
    Ok(())
}

fn discovery_cmd(a: DiscoveryCmd) -> Result<(), MainError> {
    let report = discovery_bench::run(&a.args, a.out.quiet || a.out.json)?;
    if a.out.json {
        emit_json(&report)?;
    } else {
        discovery_bench::print(&report);
    }
    match report.failed.len() {
        0 => Ok(()),
        n => Err(MainError::Usage(format!("{n} discovery part(s) failed"))),
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: a log file or a pipe gets plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Demo(a) => demo(a),
        Cmd::Pub(a) => role(roles::Role::Pub, a),
        Cmd::Sub(a) => role(roles::Role::Sub, a),
        Cmd::Relay(a) => role(roles::Role::Relay, a),
        Cmd::Bench(a) => bench_cmd(a),
        Cmd::Latency(a) => latency_cmd(a),
        Cmd::Ping(a) => ping_cmd(a),
        Cmd::Pong(a) => pong_cmd(a),
        Cmd::Chart(a) => chart_cmd(a),
        Cmd::Discovery(a) => discovery_cmd(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shoal-loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}
