//! `latency`, `ping`, `pong` and `chart`: round trips and one-way latency, their
//! histograms and charts.

use super::{check_size, emit_json, fixed_shape, ms, write_file, MainError, Output};
use crate::shoal::NodeArgs;
use crate::{chart, latency, latency_inline, pingpong, plot};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;

/// `latency`'s arguments.
#[derive(Args, Debug)]
pub(crate) struct LatencyArgs {
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

/// Arguments of `ping` and `pong`.
#[derive(Args, Debug)]
pub(crate) struct PingPongArgs {
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
    /// Answer (pong) or ping (ping, max rate only) in a shard task (`Mesh::spawn_on_shard`):
    /// what arrives comes from its inbox in batches, what it sends goes straight into the
    /// shard's core.
    #[arg(long)]
    on_shard: bool,
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

/// `chart`'s arguments.
#[derive(Args, Debug)]
pub(crate) struct ChartArgs {
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

/// Runs the latency measurements `a` asks for and reports them.
pub(crate) fn latency_cmd(a: LatencyArgs) -> Result<(), MainError> {
    check_size(a.size)?;
    let mut node = NodeArgs::loopback();
    node.shards = a.shards;
    node.spin_us = a.spin_us;
    let settings = latency::Settings {
        mode: a.mode,
        shape: fixed_shape(a.size, a.rate, a.duration_ms, a.warmup_ms),
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
            shape: fixed_shape(a.size, a.rate, a.duration_ms, a.warmup_ms),
            node: a.node.clone(),
            quiet: a.out.quiet || a.out.json || a.markdown.is_some(),
        },
        inline: a.inline,
        on_shard: a.on_shard,
        raw: a.raw,
        linger: ms(a.linger_ms),
        metrics: a.metrics,
    })
}

/// The pinging end: measures round trips against a `pong` and reports them.
pub(crate) fn ping_cmd(a: PingPongArgs) -> Result<(), MainError> {
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

/// The answering end of a ping-pong.
pub(crate) fn pong_cmd(a: PingPongArgs) -> Result<(), MainError> {
    let s = pingpong::run_pong(&pingpong_run(&a)?)?;
    if a.out.json {
        return emit_json(&s);
    }
    s.print();
    Ok(())
}

/// Draws `.hgrm` files on one chart.
pub(crate) fn chart_cmd(a: ChartArgs) -> Result<(), MainError> {
    let mut series = Vec::new();
    for path in &a.hgrm {
        series.push(chart::read_series(path)?);
    }
    plot::percentile_chart(&a.out, &a.title, &series)?;
    println!("wrote {}", a.out.display());
    Ok(())
}
