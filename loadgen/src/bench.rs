//! `bench`: Shoal A→B broadcast and raw TCP A→B back to back in one process, per payload
//! size, and the ratio of their delivered message rates; or (`--compare-psk`) secured Shoal,
//! once per record suite, against plaintext Shoal, to price the record layer, and the same
//! for ping-pong round trips.

use crate::demo::{run_raw, run_shoal, LocalRun, RunError};
use crate::latency::{LatencyRun, Settings};
use crate::latency_inline::pingpong_shoal_inline;
use crate::report::Summary;
use shoal_mesh::crypto::RecordSuitePolicy;

/// One size's pair of runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Comparison {
    /// Payload bytes.
    pub payload_bytes: usize,
    /// The Shoal run.
    pub shoal: Summary,
    /// The raw TCP run.
    pub raw: Summary,
    /// Shoal msgs/s divided by raw TCP msgs/s.
    pub ratio: f64,
}

/// Runs Shoal then raw TCP for each size in `sizes`, with `template`'s other settings.
pub fn compare(template: &LocalRun, sizes: &[usize]) -> Result<Vec<Comparison>, RunError> {
    let mut out = Vec::new();
    for &size in sizes {
        let mut run = template.clone();
        run.shape.size = size;
        run.shape.size_max = size;
        let shoal = run_shoal(&run)?;
        let raw = run_raw(&run)?;
        out.push(pair(size, shoal, raw));
    }
    Ok(out)
}

/// Puts two runs of one size side by side.
pub fn pair(payload_bytes: usize, shoal: Summary, raw: Summary) -> Comparison {
    Comparison {
        payload_bytes,
        ratio: rate_ratio(&shoal, &raw),
        shoal,
        raw,
    }
}

/// `a`'s msgs/s over `b`'s (0 when `b` delivered nothing).
fn rate_ratio(a: &Summary, b: &Summary) -> f64 {
    if b.msgs_per_s > 0.0 {
        a.msgs_per_s / b.msgs_per_s
    } else {
        0.0
    }
}

/// Prints the comparison as a markdown table.
pub fn print_table(rows: &[Comparison]) {
    let pairs: Vec<_> = rows
        .iter()
        .map(|c| (c.payload_bytes, &c.shoal, &c.raw, c.ratio))
        .collect();
    print_pairs(("shoal", "raw TCP", "shoal/raw"), &pairs, Subject::First);
}

/// Which run of a pair the table's "lost" column is about (the one under test).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Subject {
    First,
    Second,
}

/// A markdown table of two runs per payload size (rates of both, `ratio`, loss of the
/// subject, latency and CPU of both), then their memory table. `names` = (first run, second
/// run, ratio heading).
fn print_pairs(
    names: (&str, &str, &str),
    rows: &[(usize, &Summary, &Summary, f64)],
    subject: Subject,
) {
    let (a, b, ratio) = names;
    let lost = if subject == Subject::First { a } else { b };
    println!(
        "| payload | {a} msg/s | {a} MB/s | {b} msg/s | {b} MB/s | {ratio} | {lost} lost | {a} p50 / p99.9 µs | {b} p50 / p99.9 µs | {a} cpu s | {b} cpu s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let cpu = |s: &Summary| s.usage.cpu_user_s + s.usage.cpu_sys_s;
    for &(size, x, y, r) in rows {
        let lost = if subject == Subject::First { x } else { y }.lost;
        println!(
            "| {size} B | {:.0} | {:.1} | {:.0} | {:.1} | **{r:.2}x** | {lost} | {:.0} / {:.0} | {:.0} / {:.0} | {:.2} | {:.2} |",
            x.msgs_per_s,
            x.mb_per_s,
            y.msgs_per_s,
            y.mb_per_s,
            x.latency.p50_us,
            x.latency.p999_us,
            y.latency.p50_us,
            y.latency.p999_us,
            cpu(x),
            cpu(y)
        );
    }
    let mem: Vec<_> = rows
        .iter()
        .flat_map(|&(size, x, y, _)| [(size, a, x), (size, b, y)])
        .collect();
    print_memory_table(&mem);
}

/// Prints the sampled RSS of each run as a markdown table (nothing when no run has samples).
/// Each row is one run: `(payload bytes, label, summary)`.
pub fn print_memory_table(rows: &[(usize, &str, &Summary)]) {
    if rows.iter().all(|(_, _, s)| s.memory.is_none()) {
        return;
    }
    println!();
    println!(
        "RSS every {} ms, process-wide: the sending and the receiving node of a run share this \
         process, so this is their sum. Window = end of warm-up to end of publishing; end = after \
         the receivers drained. Growth = window max - warm-up; queue bound = what the queues \
         may hold (outbound queue bytes per link end + ingress and event queues of full-size \
         messages).",
        crate::rss::PERIOD.as_millis()
    );
    println!();
    println!(
        "| payload | run | rss warm-up KiB | max 1st half KiB | max 2nd half KiB | rss end KiB | growth KiB | queue bound KiB |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (size, label, s) in rows {
        let Some(m) = &s.memory else { continue };
        let bound = match &m.queue_bound {
            Some(b) => format!(
                "{} ({} KiB x {} outbound queues + message queues)",
                b.total_bytes / 1024,
                b.max_outbound_queue_bytes / 1024,
                b.outbound_queues
            ),
            None => "- (kernel socket buffers are not in RSS)".into(),
        };
        let half = |v: Option<u64>| v.map_or("-".to_owned(), |k| k.to_string());
        println!(
            "| {size} B | {label} | {} | {} | {} | {} | +{} | {bound} |",
            m.rss_warmup_kib,
            half(m.rss_max_first_half_kib),
            half(m.rss_max_second_half_kib),
            m.rss_end_kib,
            m.rss_growth_kib
        );
    }
}

/// One secured leg of a PSK comparison: the record suite the nodes were set to offer, the
/// suites their link used, and the run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SecuredRun {
    /// The `record_suite` setting of both nodes.
    pub setting: String,
    /// The suites the run's links used (from `Mesh::links`).
    pub record_suites: Vec<String>,
    /// The run.
    pub summary: Summary,
    /// Its msgs/s divided by plaintext msgs/s.
    pub ratio: f64,
}

/// One size's plaintext run and its secured runs, one per suite setting, back to back.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PskComparison {
    /// Payload bytes.
    pub payload_bytes: usize,
    /// Plaintext Shoal.
    pub plain: Summary,
    /// Shoal with a PSK, per `record_suite` setting, in the order asked.
    pub secured: Vec<SecuredRun>,
}

/// Runs plaintext Shoal then Shoal with `psk` once per suite setting in `suites`, for each
/// size in `sizes`.
pub fn compare_psk(
    template: &LocalRun,
    sizes: &[usize],
    psk: &str,
    suites: &[RecordSuitePolicy],
) -> Result<Vec<PskComparison>, RunError> {
    let mut out = Vec::new();
    for &size in sizes {
        let mut run = template.clone();
        run.shape.size = size;
        run.shape.size_max = size;
        run.node.psk = None;
        let plain = run_shoal(&run)?;
        let mut secured = Vec::new();
        for &suite in suites {
            run.node.psk = Some(psk.to_owned());
            run.node.record_suite = Some(suite);
            let summary = run_shoal(&run)?;
            secured.push(SecuredRun {
                setting: suite.name().to_owned(),
                record_suites: summary.record_suites.clone(),
                ratio: rate_ratio(&summary, &plain),
                summary,
            });
        }
        out.push(PskComparison {
            payload_bytes: size,
            plain,
            secured,
        });
    }
    Ok(out)
}

/// Prints the PSK comparison as one markdown table per secured suite.
pub fn print_psk_table(rows: &[PskComparison]) {
    let legs = rows.first().map_or(0, |r| r.secured.len());
    for leg in 0..legs {
        let first = &rows[0].secured[leg];
        println!(
            "record_suite = {} (links: {})",
            first.setting,
            first.record_suites.join(", ")
        );
        println!();
        let pairs: Vec<_> = rows
            .iter()
            .map(|c| {
                let s = &c.secured[leg];
                (c.payload_bytes, &c.plain, &s.summary, s.ratio)
            })
            .collect();
        print_pairs(("plain", "psk", "psk/plain"), &pairs, Subject::Second);
        println!();
        let sizes: Vec<String> = rows
            .iter()
            .map(|c| {
                let s = &c.secured[leg].summary;
                format!(
                    "{} B: {:.1} KiB ({} records)",
                    c.payload_bytes,
                    s.mean_record_kib(),
                    s.records_sealed
                )
            })
            .collect();
        println!("Mean record written: {}", sizes.join("; "));
        println!();
    }
}

/// Ping-pong round trips of the plaintext mesh and of each secured suite, one after the
/// other.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PingPongComparison {
    /// Plaintext Shoal.
    pub plain: LatencyRun,
    /// Per suite setting: the setting and the run.
    pub secured: Vec<(String, LatencyRun)>,
}

/// Runs `latency --mode ping-pong --inline` (both ends answer on the shard thread: no
/// application thread on the round trip) plaintext, then with `psk` per suite in `suites`.
pub fn pingpong_psk(
    s: &Settings,
    psk: &str,
    suites: &[RecordSuitePolicy],
) -> Result<PingPongComparison, RunError> {
    let mut s = s.clone();
    s.node.psk = None;
    let plain = pingpong_shoal_inline(&s)?;
    let mut secured = Vec::new();
    for &suite in suites {
        s.node.psk = Some(psk.to_owned());
        s.node.record_suite = Some(suite);
        secured.push((suite.name().to_owned(), pingpong_shoal_inline(&s)?));
    }
    Ok(PingPongComparison { plain, secured })
}

/// Prints the ping-pong comparison as a markdown table, with each p50 over plaintext's.
pub fn print_pingpong(c: &PingPongComparison) {
    println!(
        "Ping-pong, {} B, both ends answering on the shard thread:",
        c.plain.payload_bytes
    );
    println!();
    println!("| run | round trips | p50 µs | p99 µs | p99.9 µs | p50 / plain |");
    println!("|---|---|---|---|---|---|");
    let base = c.plain.percentiles.p50_us;
    let row = |name: &str, r: &LatencyRun| {
        let p = &r.percentiles;
        let ratio = if base > 0.0 { p.p50_us / base } else { 0.0 };
        println!(
            "| {name} | {} | {:.1} | {:.1} | {:.1} | **{ratio:.2}x** |",
            p.count, p.p50_us, p.p99_us, p.p999_us
        );
    };
    row("plain", &c.plain);
    for (name, r) in &c.secured {
        row(&format!("psk, {name}"), r);
    }
}
