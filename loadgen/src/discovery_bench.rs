//! `discovery`: issue 12's discovery and control-plane measurements, in one process on
//! loopback: (1) discovery latency, from creating a reader to its first sample, over many
//! trials; (2) the time for endpoints spread over several nodes to be fully matched on every
//! node; (3) the control plane's CPU on a node that knows many remote endpoints
//! ([`crate::control_cpu`]); and a hostile stranger's cost ([`crate::hostile`]).
//!
//! **Owns:** parts 1 and 2, running the parts asked for, and the report. **Must not touch:**
//! the settings and the loopback setup ([`crate::discovery_setup`]) or the mesh's internals:
//! nodes are driven through `shoal-mesh`'s public API, matches are read from
//! [`Mesh::topics`], and no result is hard-coded.

use crate::demo::RunError;
use crate::discovery_setup::{
    expected_matches, has_exactly, layout_topic, mesh_err, open_all, ring, start_nodes,
    DiscoveryArgs, Part,
};
use crate::shoal::{wait_for, SetupError};
use shoal_mesh::{Event, EventReceiver, Mesh};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything `discovery` measured (the parts not run are `None`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct DiscoveryReport {
    /// The announce period, ms.
    pub announce_period_ms: u64,
    /// The membership re-flood period, ms, when set (else the mesh's default).
    pub membership_ms: Option<u64>,
    /// Part 1.
    pub latency: Option<LatencyReport>,
    /// Part 2.
    pub matching: Option<MatchReport>,
    /// Part 3.
    pub cpu: Option<crate::control_cpu::CpuReport>,
    /// The hostile part.
    pub hostile: Option<crate::hostile::HostileReport>,
    /// Parts that failed, with their error (the run's exit status is then a failure).
    pub failed: Vec<PartFailure>,
}

/// A part that could not finish.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PartFailure {
    /// `latency`, `match` or `cpu`.
    pub part: String,
    /// Why.
    pub error: String,
}

/// Part 1: reader creation to its first sample.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LatencyReport {
    /// Trials run.
    pub trials: usize,
    /// The writer's pace, µs per sample.
    pub write_every_us: u64,
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Slowest trial, ms.
    pub max_ms: f64,
    /// Fastest trial, ms.
    pub min_ms: f64,
    /// p50 in announce periods.
    pub p50_periods: f64,
    /// p99 in announce periods (issue 12's target: at most 2).
    pub p99_periods: f64,
    /// max in announce periods.
    pub max_periods: f64,
    /// Time from dropping a reader to the writer's node reporting it unmatched, median, ms.
    pub unmatch_p50_ms: f64,
}

/// Part 2: endpoints on several nodes until every node has every match.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MatchReport {
    /// Nodes (a ring).
    pub nodes: usize,
    /// Endpoints over all nodes.
    pub endpoints: usize,
    /// Topics.
    pub topics: usize,
    /// (writer, reader) pairs every node must list: per topic, its writers × its readers.
    pub expected_matches: usize,
    /// From the first create to the last create's return, ms.
    pub create_ms: f64,
    /// From the first create to every node listing exactly the expected matches, ms.
    pub matched_ms: f64,
    /// `matched_ms` in announce periods.
    pub matched_periods: f64,
}

/// The `q`-quantile (0..=1) of sorted `v` (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Runs the parts `a` asks for.
pub fn run(a: &DiscoveryArgs, quiet: bool) -> Result<DiscoveryReport, RunError> {
    if a.announce_ms == 0 {
        return Err(RunError::Usage("--announce-ms must be above 0".into()));
    }
    let want = |p: Part| a.part == Part::All || a.part == p;
    let say = |s: &str| {
        if !quiet {
            eprintln!("discovery: {s}");
        }
    };
    let mut report = DiscoveryReport {
        announce_period_ms: a.announce_ms,
        membership_ms: a.membership_ms,
        latency: None,
        matching: None,
        cpu: None,
        hostile: None,
        failed: Vec::new(),
    };
    // A part that fails is reported and the next one still runs.
    let mut failed = |part: &str, e: RunError| {
        say(&format!("{part} failed: {e}"));
        report.failed.push(PartFailure {
            part: part.into(),
            error: e.to_string(),
        });
    };
    if want(Part::Latency) {
        say(&format!("latency, {} trials", a.trials));
        match latency(a) {
            Ok(l) => report.latency = Some(l),
            Err(e) => failed("latency", e),
        }
    }
    if want(Part::Match) {
        say(&format!(
            "matching, {} nodes x {} endpoints",
            a.match_nodes, a.match_endpoints
        ));
        match matching(a) {
            Ok(m) => report.matching = Some(m),
            Err(e) => failed("match", e),
        }
    }
    if want(Part::Cpu) {
        say(&format!(
            "control-plane CPU, {} helpers x {} endpoints, {} s",
            a.cpu_helpers, a.cpu_helper_endpoints, a.cpu_seconds
        ));
        match crate::control_cpu::run(a) {
            Ok(c) => report.cpu = Some(c),
            Err(e) => failed("cpu", e),
        }
    }
    if a.part == Part::Hostile {
        say(&format!(
            "hostile stranger, {} s, {} records per frame",
            a.hostile_seconds, a.hostile_records
        ));
        match crate::hostile::run(a) {
            Ok(h) => report.hostile = Some(h),
            Err(e) => failed("hostile", e),
        }
    }
    Ok(report)
}

/// Waits on `rx` (at most `secs`) for an event `pick` accepts.
fn wait_event(
    rx: &mut EventReceiver,
    secs: u64,
    what: &str,
    mut pick: impl FnMut(&Event) -> bool,
) -> Result<(), RunError> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(RunError::Setup(SetupError::Timeout {
                secs,
                what: what.into(),
            }));
        }
        if let Some(ev) = rx.recv_timeout(left.min(Duration::from_millis(50))) {
            if pick(&ev) {
                return Ok(());
            }
        }
    }
}

/// Part 1: a writer on node A writing every `write_every_us`; per trial a reader on node B,
/// timed from just before its creation to its first sample, then dropped, and the next trial
/// starts once A reports the pair unmatched (so every trial starts from the same state).
fn latency(a: &DiscoveryArgs) -> Result<LatencyReport, RunError> {
    if a.trials == 0 {
        return Err(RunError::Usage("--trials must be above 0".into()));
    }
    let cfg = a.topics_config(16, 16);
    let mut nodes = start_nodes(a, 2, &[(0, 1)], &cfg, true)?;
    let (b, rx_b) = nodes.pop().expect("two nodes");
    let (a_mesh, rx_a) = nodes.pop().expect("two nodes");
    let (mut rx_a, mut rx_b) = (rx_a.expect("taken"), rx_b.expect("taken"));
    let topic = layout_topic("discovery/latency", 0);
    let writer = a_mesh
        .writer(topic.clone())
        .map_err(mesh_err)?
        .with_batch_bytes(0);
    let wguid = writer.guid();
    // B must know the writer before the first trial, or trial 1 also times A's announcement.
    wait_for(a.timeout_s, "node B to hear of the writer", || {
        b.topics().writers().any(|w| w.guid == wguid)
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let pace = Duration::from_micros(a.write_every_us.max(1));
    let writing = {
        let stop = stop.clone();
        let mut writer = writer;
        std::thread::spawn(move || -> Result<(), RunError> {
            let payload = [0u8; 32];
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                writer
                    .write_blocking(&payload)
                    .map_err(crate::shoal::sink_error)?;
                writer.flush_blocking().map_err(crate::shoal::sink_error)?;
                next += pace;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else {
                    next = now;
                }
            }
            Ok(())
        })
    };
    let trials = (|| -> Result<(Vec<f64>, Vec<f64>), RunError> {
        let (mut firsts, mut unmatches) = (Vec::new(), Vec::new());
        for _ in 0..a.trials {
            let t0 = Instant::now();
            let reader = b.reader(topic.clone()).map_err(mesh_err)?;
            let rg = reader.guid();
            wait_event(
                &mut rx_b,
                a.timeout_s,
                "a new reader's first sample",
                |ev| matches!(ev, Event::Sample { reader, .. } if *reader == rg),
            )?;
            firsts.push(t0.elapsed().as_secs_f64() * 1e3);
            let t1 = Instant::now();
            drop(reader);
            wait_event(
                &mut rx_a,
                a.timeout_s,
                "the writer's node to unmatch",
                |ev| {
                    matches!(ev, Event::Unmatched { writer, reader, .. }
                    if *writer == wguid && *reader == rg)
                },
            )?;
            unmatches.push(t1.elapsed().as_secs_f64() * 1e3);
        }
        Ok((firsts, unmatches))
    })();
    stop.store(true, Ordering::Relaxed);
    let wrote = writing.join().map_err(|_| RunError::Panicked)?;
    a_mesh.stop();
    b.stop();
    let (mut firsts, mut unmatches) = trials?;
    wrote?;
    firsts.sort_by(f64::total_cmp);
    unmatches.sort_by(f64::total_cmp);
    let period_ms = a.announce_ms as f64;
    let (p50, p99, max) = (
        quantile(&firsts, 0.5),
        quantile(&firsts, 0.99),
        quantile(&firsts, 1.0),
    );
    Ok(LatencyReport {
        trials: firsts.len(),
        write_every_us: a.write_every_us,
        p50_ms: p50,
        p99_ms: p99,
        max_ms: max,
        min_ms: firsts[0],
        p50_periods: p50 / period_ms,
        p99_periods: p99 / period_ms,
        max_periods: max / period_ms,
        unmatch_p50_ms: quantile(&unmatches, 0.5),
    })
}

/// Part 2: `match_nodes` in a ring, each opening `match_endpoints` endpoints at once (one
/// thread per node) over `match_topics` topics, timed until every node lists exactly the
/// expected matches.
fn matching(a: &DiscoveryArgs) -> Result<MatchReport, RunError> {
    if a.match_nodes == 0 || a.match_endpoints == 0 || a.match_topics == 0 {
        return Err(RunError::Usage(
            "--match-nodes, --match-endpoints and --match-topics must be above 0".into(),
        ));
    }
    let total = a.match_nodes * a.match_endpoints;
    // Upper bound of the matches: every writer with every reader.
    let cfg = a.topics_config(total, (total / 2 + 1) * (total / 2 + 1));
    let nodes = start_nodes(a, a.match_nodes, &ring(a.match_nodes), &cfg, false)?;
    let meshes: Vec<Mesh> = nodes.into_iter().map(|(m, _)| m).collect();
    let e = a.match_endpoints;
    let t0 = Instant::now();
    let opened = open_all(&meshes, "discovery/match", e, a.match_topics);
    let create_ms = t0.elapsed().as_secs_f64() * 1e3;
    let opened = opened?;
    let expected = expected_matches(&opened, a.match_topics);
    let done = wait_for(
        a.timeout_s,
        "every node to list every expected match",
        || meshes.iter().all(|m| has_exactly(m, &expected)),
    );
    let matched_ms = t0.elapsed().as_secs_f64() * 1e3;
    drop(opened);
    for m in &meshes {
        m.stop();
    }
    done?;
    Ok(MatchReport {
        nodes: a.match_nodes,
        endpoints: total,
        topics: a.match_topics,
        expected_matches: expected.len(),
        create_ms,
        matched_ms,
        matched_periods: matched_ms / a.announce_ms as f64,
    })
}

/// Prints the report as markdown.
pub fn print(r: &DiscoveryReport) {
    let p = r.announce_period_ms;
    println!("Announce period: {p} ms (participant lease: {} ms)", p * 10);
    if let Some(m) = r.membership_ms {
        println!("Membership re-flood period: {m} ms (timeout: {} ms)", m * 4);
    }
    if let Some(l) = &r.latency {
        println!();
        println!("Discovery latency (reader created -> its first sample), {} trials, a sample every {} µs:", l.trials, l.write_every_us);
        println!();
        println!("| p50 | p99 | max | p50 / period | p99 / period | max / period | drop -> unmatched p50 |");
        println!("|---|---|---|---|---|---|---|");
        println!(
            "| {:.2} ms | {:.2} ms | {:.2} ms | {:.3} | **{:.3}** | {:.3} | {:.2} ms |",
            l.p50_ms,
            l.p99_ms,
            l.max_ms,
            l.p50_periods,
            l.p99_periods,
            l.max_periods,
            l.unmatch_p50_ms
        );
        println!("Issue 12's target: p99 <= 2 announce periods.");
    }
    if let Some(m) = &r.matching {
        println!();
        println!(
            "Matching: {} endpoints on {} nodes (ring), {} topics:",
            m.endpoints, m.nodes, m.topics
        );
        println!();
        println!("| expected matches (every node) | all created | every node fully matched | in periods |");
        println!("|---|---|---|---|");
        println!(
            "| {} | {:.0} ms | **{:.0} ms** | {:.2} |",
            m.expected_matches, m.create_ms, m.matched_ms, m.matched_periods
        );
    }
    if let Some(c) = &r.cpu {
        crate::control_cpu::print(c);
    }
    if let Some(h) = &r.hostile {
        crate::hostile::print(h);
    }
    for f in &r.failed {
        println!();
        println!("Part `{}` FAILED: {}", f.part, f.error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&[7.0], 0.99), 7.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }

    #[test]
    fn rings_link_each_node_to_two_neighbours() {
        assert!(ring(1).is_empty());
        assert_eq!(ring(2), vec![(0, 1)]);
        let r = ring(5);
        assert_eq!(r.len(), 5);
        for i in 0..5 {
            assert_eq!(r.iter().filter(|&&(a, b)| a == i || b == i).count(), 2);
        }
    }
}
