//! `bench`: Shoal A→B broadcast and raw TCP A→B back to back in one process, per payload
//! size, and the ratio of their delivered message rates; or (`--compare-psk`) secured Shoal
//! against plaintext Shoal, to price the record layer.

use crate::demo::{run_raw, run_shoal, LocalRun, RunError};
use crate::report::Summary;

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

/// One size's plaintext and secured Shoal runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PskComparison {
    /// Payload bytes.
    pub payload_bytes: usize,
    /// Plaintext Shoal.
    pub plain: Summary,
    /// Shoal with a PSK.
    pub psk: Summary,
    /// PSK msgs/s divided by plaintext msgs/s.
    pub ratio: f64,
}

/// Runs plaintext Shoal then Shoal with `psk` for each size in `sizes`.
pub fn compare_psk(
    template: &LocalRun,
    sizes: &[usize],
    psk: &str,
) -> Result<Vec<PskComparison>, RunError> {
    let mut out = Vec::new();
    for &size in sizes {
        let mut run = template.clone();
        run.shape.size = size;
        run.shape.size_max = size;
        run.node.psk = None;
        let plain = run_shoal(&run)?;
        run.node.psk = Some(psk.to_owned());
        let secured = run_shoal(&run)?;
        out.push(PskComparison {
            payload_bytes: size,
            ratio: rate_ratio(&secured, &plain),
            plain,
            psk: secured,
        });
    }
    Ok(out)
}

/// Prints the PSK comparison as a markdown table.
pub fn print_psk_table(rows: &[PskComparison]) {
    let pairs: Vec<_> = rows
        .iter()
        .map(|c| (c.payload_bytes, &c.plain, &c.psk, c.ratio))
        .collect();
    print_pairs(("plain", "psk", "psk/plain"), &pairs, Subject::Second);
}
