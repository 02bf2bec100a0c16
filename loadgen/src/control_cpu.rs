//! `discovery --part cpu`: the control plane's cost on one node that knows many remote
//! endpoints and re-announces its own: helper nodes (a star around the first helper) hold the
//! remote endpoints, the measured node is linked to `--cpu-links` of them; once every node
//! lists every expected match, the CPU time of the measured node's threads is read from
//! `/proc/self/task/<tid>/stat` over the measured window.
//!
//! The measured node's threads are told apart from the helpers' (all nodes name their
//! executors alike) by listing this process's threads just before and just after it starts:
//! nodes start one at a time from this thread, so the new executor threads are its own.
//!
//! **Owns:** the helper layout, the thread lookup and the threads' CPU time (read with
//! [`crate::proc_stat`]). **Must not
//! touch:** the mesh's internals (public API and the process's own `/proc` entries only).

use crate::demo::RunError;
use crate::discovery_setup::{
    expected_matches, has_exactly, mesh_err, node_builder, open_all, open_layout, start_nodes,
    DiscoveryArgs,
};
use crate::proc_stat::{clock_ticks, cpu_ticks};
use crate::shoal::{wait_for, SetupError};
use shoal_mesh::topics::TopicsView;
use shoal_mesh::Mesh;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// What the runtime names a node's control executor, as Linux keeps it (15 bytes).
pub const CONTROL_COMM: &str = "shoal-mesh-cont";
/// What the runtime names a node's shard executors, as Linux keeps it (15 bytes).
pub const SHARD_COMM: &str = "shoal-mesh-shar";

/// Part 3's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CpuReport {
    /// Helper nodes.
    pub helpers: usize,
    /// Remote endpoints the measured node knows (from its view, after matching).
    pub remote_endpoints: usize,
    /// The measured node's own endpoints.
    pub own_endpoints: usize,
    /// Topics.
    pub topics: usize,
    /// Links of the measured node.
    pub links: usize,
    /// Matches every node lists (remote–remote included).
    pub expected_matches: usize,
    /// From the first create to every node fully matched, ms.
    pub matched_ms: f64,
    /// Measured window, s.
    pub window_s: f64,
    /// The measured node's control thread: CPU ms per second of the window.
    pub control_cpu_ms_per_s: f64,
    /// Its shard threads (they read the links and hand Discovery frames to control), CPU ms
    /// per second.
    pub shard_cpu_ms_per_s: f64,
    /// The resolution of the thread CPU figures: one clock tick over the window, ms/s.
    pub resolution_ms_per_s: f64,
    /// The whole process (every node), CPU ms per second.
    pub process_cpu_ms_per_s: f64,
    /// Discovery frames the measured node received per second (before dedup).
    pub frames_in_per_s: f64,
    /// Of those, duplicates dropped per second.
    pub duplicates_per_s: f64,
    /// Of those, copies dropped per second because their link is not toward their origin
    /// (the reverse-path check: a second path's copy, which flooding took as a duplicate).
    pub off_path_per_s: f64,
    /// Frames it built per second (its own announcements).
    pub frames_built_per_s: f64,
    /// Frames it re-flooded per second.
    pub frames_reflooded_per_s: f64,
    /// Complete announce cycles it received per second.
    pub cycles_per_s: f64,
    /// Route tables it built during the window (0 in a steady state).
    pub route_tables_in_window: u64,
    /// The process's peak resident memory, MiB (every node).
    pub peak_rss_mib: f64,
}

/// CPU time of one thread so far, from `/proc/self/task/<tid>/stat` (utime + stime).
pub fn thread_cpu(tid: u32) -> std::io::Result<Duration> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))?;
    let ticks = cpu_ticks(&text).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "unexpected stat format")
    })?;
    Ok(Duration::from_secs_f64(ticks as f64 / clock_ticks()))
}

/// This process's threads named `comm` (as Linux keeps the name).
pub fn threads_named(comm: &str) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if name.trim_end() == comm {
            out.insert(tid);
        }
    }
    out
}

fn sum_cpu(tids: &BTreeSet<u32>) -> Result<Duration, RunError> {
    let mut t = Duration::ZERO;
    for &tid in tids {
        t += thread_cpu(tid)?;
    }
    Ok(t)
}

fn view(m: &Mesh) -> Option<std::sync::Arc<TopicsView>> {
    m.topics().view
}

/// Runs part 3.
pub fn run(a: &DiscoveryArgs) -> Result<CpuReport, RunError> {
    let (h, he, own, topics) = (
        a.cpu_helpers,
        a.cpu_helper_endpoints,
        a.cpu_endpoints,
        a.cpu_topics,
    );
    if h == 0 || topics == 0 || a.cpu_seconds == 0 || a.cpu_links == 0 || a.cpu_links > h {
        return Err(RunError::Usage(
            "--cpu-helpers, --cpu-topics, --cpu-seconds must be above 0, and --cpu-links \
             between 1 and --cpu-helpers"
                .into(),
        ));
    }
    let total = h * he + own;
    // Per topic at most (total/topics + 1)^2 pairs.
    let per = total / topics + 2;
    let cfg = a.topics_config(total, topics * per * per);
    let star: Vec<(usize, usize)> = (1..h).map(|i| (0, i)).collect();
    let helpers = start_nodes(a, h, &star, &cfg, false)?;
    let helpers: Vec<Mesh> = helpers.into_iter().map(|(m, _)| m).collect();
    let (control_before, shards_before) = (threads_named(CONTROL_COMM), threads_named(SHARD_COMM));
    let peers = helpers[..a.cpu_links]
        .iter()
        .map(|m| format!("127.0.0.1:{}", m.listen_port()))
        .collect();
    let measured = node_builder(a, peers, &cfg)?.build().map_err(mesh_err)?;
    measured.start().map_err(mesh_err)?;
    let control: BTreeSet<u32> = threads_named(CONTROL_COMM)
        .difference(&control_before)
        .copied()
        .collect();
    let shards: BTreeSet<u32> = threads_named(SHARD_COMM)
        .difference(&shards_before)
        .copied()
        .collect();
    let result = measure(a, &helpers, &measured, &control, &shards, total);
    measured.stop();
    for m in &helpers {
        m.stop();
    }
    result
}

fn measure(
    a: &DiscoveryArgs,
    helpers: &[Mesh],
    measured: &Mesh,
    control: &BTreeSet<u32>,
    shards: &BTreeSet<u32>,
    total: usize,
) -> Result<CpuReport, RunError> {
    if control.len() != 1 || shards.is_empty() {
        return Err(RunError::Usage(format!(
            "cannot tell the measured node's threads apart (control {control:?}, shards \
             {shards:?}): this needs Linux's /proc/self/task"
        )));
    }
    wait_for(a.timeout_s, "the measured node linked", || {
        measured.connected_peers().len() >= a.cpu_links
    })?;
    let (he, topics) = (a.cpu_helper_endpoints, a.cpu_topics);
    let t0 = Instant::now();
    let mut opened = open_all(helpers, "discovery/cpu", he, topics)?;
    // The measured node's own endpoints lie on the first topics, alongside the helpers'.
    let own =
        open_layout(measured, "discovery/cpu", 0..a.cpu_endpoints, topics).map_err(mesh_err)?;
    opened.push(own);
    let expected = expected_matches(&opened, topics);
    wait_for(
        a.timeout_s,
        "every node to list every expected match",
        || has_exactly(measured, &expected) && helpers.iter().all(|m| has_exactly(m, &expected)),
    )?;
    let matched_ms = t0.elapsed().as_secs_f64() * 1e3;
    let remote_endpoints = view(measured).map_or(0, |v| v.endpoints.len()) - a.cpu_endpoints;
    if remote_endpoints + a.cpu_endpoints != total {
        return Err(RunError::Usage(format!(
            "the measured node knows {} endpoints, expected {total}",
            remote_endpoints + a.cpu_endpoints
        )));
    }
    let stats = |m: &Mesh| m.topics().discovery;
    let (s0, u0, c0, sh0, w0) = (
        stats(measured),
        crate::usage::Usage::now(),
        sum_cpu(control)?,
        sum_cpu(shards)?,
        Instant::now(),
    );
    // The window itself: nothing to wait for but time.
    std::thread::sleep(Duration::from_secs(a.cpu_seconds));
    let (s1, u1, c1, sh1) = (
        stats(measured),
        crate::usage::Usage::now(),
        sum_cpu(control)?,
        sum_cpu(shards)?,
    );
    let window_s = w0.elapsed().as_secs_f64();
    // Every node must still list every match: the window measured a steady state.
    let steady = has_exactly(measured, &expected);
    drop(opened);
    if !steady {
        return Err(RunError::Setup(SetupError::Timeout {
            secs: a.cpu_seconds,
            what: "matches to stay put during the window (some were lost)".into(),
        }));
    }
    let per_s = |x: u64, y: u64| x.saturating_sub(y) as f64 / window_s;
    let ms_per_s = |d: Duration| d.as_secs_f64() * 1e3 / window_s;
    let pu = u1.since(&u0);
    Ok(CpuReport {
        helpers: a.cpu_helpers,
        remote_endpoints,
        own_endpoints: a.cpu_endpoints,
        topics,
        links: a.cpu_links,
        expected_matches: expected.len(),
        matched_ms,
        window_s,
        control_cpu_ms_per_s: ms_per_s(c1.saturating_sub(c0)),
        shard_cpu_ms_per_s: ms_per_s(sh1.saturating_sub(sh0)),
        resolution_ms_per_s: 1e3 / clock_ticks() / window_s,
        process_cpu_ms_per_s: (pu.cpu_user_s + pu.cpu_sys_s) * 1e3 / window_s,
        frames_in_per_s: per_s(s1.frames_in, s0.frames_in),
        duplicates_per_s: per_s(s1.duplicates, s0.duplicates),
        off_path_per_s: per_s(s1.off_path, s0.off_path),
        frames_built_per_s: per_s(s1.frames_built, s0.frames_built),
        frames_reflooded_per_s: per_s(s1.frames_reflooded, s0.frames_reflooded),
        cycles_per_s: per_s(s1.cycles_completed, s0.cycles_completed),
        route_tables_in_window: s1.route_tables.saturating_sub(s0.route_tables),
        peak_rss_mib: u1.peak_rss_kib as f64 / 1024.0,
    })
}

/// Prints part 3 as markdown.
pub fn print(c: &CpuReport) {
    println!();
    println!(
        "Control-plane cost: a node with {} own endpoints knowing {} remote ones ({} helper \
         nodes, {} topics, {} link(s), {} matches on every node; fully matched after {:.0} ms), \
         over {:.1} s:",
        c.own_endpoints,
        c.remote_endpoints,
        c.helpers,
        c.topics,
        c.links,
        c.expected_matches,
        c.matched_ms,
        c.window_s
    );
    println!();
    println!("| control thread CPU | its shard thread(s) | whole process | frames in/s | duplicates/s | off-path/s | built/s | re-flooded/s | cycles in/s | route tables | peak RSS |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| **{:.1} ms/s** (±{:.1}) | {:.1} ms/s | {:.0} ms/s | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {:.0} MiB |",
        c.control_cpu_ms_per_s,
        c.resolution_ms_per_s,
        c.shard_cpu_ms_per_s,
        c.process_cpu_ms_per_s,
        c.frames_in_per_s,
        c.duplicates_per_s,
        c.off_path_per_s,
        c.frames_built_per_s,
        c.frames_reflooded_per_s,
        c.cycles_per_s,
        c.route_tables_in_window,
        c.peak_rss_mib
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_found_by_name_and_its_cpu_time_grows() {
        let used = std::thread::Builder::new()
            .name("h7-cpu-probe".into())
            .spawn(|| {
                let tids = threads_named("h7-cpu-probe");
                assert_eq!(tids.len(), 1, "{tids:?}");
                let tid = *tids.first().unwrap();
                let deadline = Instant::now() + Duration::from_secs(20);
                let mut x = 0u64;
                // Spin until /proc shows 30 ms of CPU (a few ticks), or give up.
                loop {
                    for i in 0..100_000u64 {
                        x = x.wrapping_mul(31).wrapping_add(i);
                    }
                    let used = thread_cpu(tid).unwrap();
                    if used >= Duration::from_millis(30) || Instant::now() > deadline {
                        std::hint::black_box(x);
                        return used;
                    }
                }
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(used >= Duration::from_millis(30), "{used:?}");
        assert!(threads_named("h7-cpu-probe").is_empty());
    }
}
