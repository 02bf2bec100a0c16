//! `storm`: N nodes in N processes on this host, started at once, linked by multicast scouting
//! (every node dials every node it finds: the full mesh a LAN builds), left idle, then one of
//! them restarted. Measures the time until every node has full membership and then a link to
//! every other node (the idle window waits for both; a run whose links never complete says so
//! and is measured anyway), the start's CPU, each node's control frames and CPU while idle,
//! and the spike at the other nodes while one restarts; for each phase also the whole
//! machine's CPU ([`machine`]), the measure of whether the host saturated, and what a program
//! beside the nodes got when it asked for the CPU ([`bystander`]: one in the nodes' session,
//! one in a session of its own), the measure of what that saturation costs the host's other
//! programs.
//!
//! Each node is this binary's hidden `storm-node` subcommand ([`crate::storm_node`]); the
//! parent asks each for a [`NodeSample`](crate::storm_node::NodeSample) over its
//! stdin/stdout and reads its CPU time from `/proc/PID/stat`. While the mesh is idle it asks nothing between the window's two samples,
//! so the measurement costs the nodes nothing.
//!
//! **Owns:** the run (starting, sampling, restarting and stopping the node processes);
//! one process is [`node_proc`], the figures and their printing are [`report`], the host's
//! CPU is [`machine`], the bystanders [`bystander`], the nodes' CPU cap (`--cpu-max`)
//! [`cpu_cap`].
//! **Must not touch:** the mesh (the nodes are separate processes driven through the public
//! API) or any address but the interface it is given.

mod bystander;
mod cpu_cap;
mod machine;
mod node_proc;
mod report;

pub(crate) use bystander::Bystander;
pub(crate) use machine::Machine;
pub(crate) use report::{print, Idle, Restart, Spread, Startup, StormReport};

use crate::demo::RunError;
use crate::storm_node::unix_ms;
use bystander::Probe;
use cpu_cap::CpuCap;
use machine::MachineCpu;
use node_proc::{poll, NodeProc, Reading};
use std::net::{Ipv4Addr, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a phase's figures wait for the bystander round in progress at its end: rounds
/// take ~20 ms, several times that on a saturated host; one not done in this long is left out
/// (with a warning) rather than holding the storm.
const BYSTANDER_WAIT: Duration = Duration::from_secs(10);

/// Settings of a storm run.
#[derive(Debug, Clone)]
pub(crate) struct StormRun {
    /// Nodes (processes).
    pub(crate) nodes: usize,
    /// Wait after every node has full membership before the idle window.
    pub(crate) settle: Duration,
    /// The idle window.
    pub(crate) idle: Duration,
    /// Which node to restart (`None`: no restart).
    pub(crate) restart: Option<usize>,
    /// Observation after the restart once every node has full membership again.
    pub(crate) after: Duration,
    /// Sampling period while nodes start and while one restarts.
    pub(crate) sample: Duration,
    /// Longest wait for full membership (at start and after the restart).
    pub(crate) converge_timeout: Duration,
    /// Interface for scouting and listening.
    pub(crate) interface: Ipv4Addr,
    /// Mesh settings file given to every node.
    pub(crate) config: Option<PathBuf>,
    /// `max_links` for every node (overrides the settings file).
    pub(crate) max_links: Option<usize>,
    /// Every node process's niceness (`None`: inherited).
    pub(crate) nice: Option<i32>,
    /// Every node process in a session of its own (false: the storm's).
    pub(crate) node_sessions: bool,
    /// Every node process in a cgroup of this run's own capped at so many cores
    /// ([`cpu_cap`]; `None`: uncapped). The bystanders stay outside.
    pub(crate) cpu_max: Option<f64>,
    /// Each node's stderr (its log) to `DIR/node-K.log` (`K` in start order, the restarted
    /// node's new process last) instead of this process's stderr.
    pub(crate) node_logs: Option<PathBuf>,
    /// Progress on stderr.
    pub(crate) progress: bool,
}

/// Where the `k`-th node process started logs, if the run keeps node logs.
fn node_log(r: &StormRun, k: usize) -> Option<PathBuf> {
    r.node_logs
        .as_ref()
        .map(|d| d.join(format!("node-{k}.log")))
}

/// Whether node `i`'s member set is every other node.
fn is_full(r: &Reading, ids: &[String], i: usize) -> bool {
    r.s.members.len() + 1 == ids.len()
        && ids
            .iter()
            .enumerate()
            .all(|(j, id)| j == i || r.s.members.binary_search(id).is_ok())
}

/// Whether a node has its links: one to every other node (of `n`), or with `--max-links`
/// at least the cap (a capped node keeps between the cap and the cap plus a slack).
fn is_linked(r: &Reading, want: usize) -> bool {
    r.s.connected >= want
}

/// The links [`is_linked`] asks of each of `n` nodes.
fn links_wanted(r: &StormRun, n: usize) -> usize {
    match r.max_links {
        Some(cap) if cap > 0 => cap.min(n - 1),
        _ => n - 1,
    }
}

/// CPU of all the nodes together while they were sampled, in cores (the highest sample
/// period's), and the machine's own over the same polls.
#[derive(Debug, Default)]
struct CpuTrack {
    peak_cores: f64,
    machine: MachineCpu,
    last: Option<Vec<Reading>>,
}

impl CpuTrack {
    fn add(&mut self, r: &[Reading]) {
        self.machine.sample();
        if let Some(prev) = &self.last {
            self.peak_cores = self.peak_cores.max(nodes_cores(prev, r));
        }
        self.last = Some(r.to_vec());
    }
}

/// All nodes' CPU between two polls, in cores. Each node's time is taken over its own
/// interval: its readings are made when its answer arrives, and one poll's answers arrive
/// over as long as the nodes take to answer (hundreds of ms on a loaded host), so dividing
/// every node's time by the first node's interval overstated the sum several times over.
fn nodes_cores(a: &[Reading], b: &[Reading]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (y.cpu_s - x.cpu_s) / (y.at - x.at).as_secs_f64().max(1e-3))
        .sum()
}

/// Polls until `done` holds for every node or `end`; the last readings and whether it held.
fn until(
    nodes: &mut [NodeProc],
    every: Duration,
    end: Instant,
    progress: Option<&str>,
    cpu: &mut CpuTrack,
    done: impl Fn(&Reading, usize) -> bool,
) -> Result<(Vec<Reading>, bool), RunError> {
    loop {
        let r = poll(nodes)?;
        cpu.add(&r);
        let n = r.iter().enumerate().filter(|(i, x)| done(x, *i)).count();
        if let Some(what) = progress {
            eprint!("\rstorm: {n}/{} nodes {what}", nodes.len());
        }
        if n == nodes.len() || Instant::now() >= end {
            if progress.is_some() {
                eprintln!();
            }
            return Ok((r, n == nodes.len()));
        }
        std::thread::sleep(every);
    }
}

fn ms_since(t0_unix_ms: u64, changed: u64) -> f64 {
    changed.saturating_sub(t0_unix_ms) as f64
}

/// The sum of a counter over the nodes between two readings.
fn delta(a: &[Reading], b: &[Reading], f: impl Fn(&Reading) -> u64) -> u64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f(y).saturating_sub(f(x)))
        .sum()
}

/// The start: every node at once, then until each has full membership and a link to every
/// other node (or the timeout).
fn startup(
    nodes: &mut [NodeProc],
    r: &StormRun,
    t0: u64,
    t0_i: Instant,
    cpu_at_spawn: &[Reading],
    ready_ms: f64,
    machine: MachineCpu,
) -> Result<Startup, RunError> {
    let ids: Vec<String> = nodes.iter().map(|n| n.id.clone()).collect();
    let n = ids.len();
    let want = links_wanted(r, n);
    let end = t0_i + r.converge_timeout;
    let mut cpu = CpuTrack {
        machine,
        ..CpuTrack::default()
    };
    let progress = |w| r.progress.then_some(w);
    let (start, full) = until(
        nodes,
        r.sample,
        end,
        progress("with full membership"),
        &mut cpu,
        |x, i| is_full(x, &ids, i),
    )?;
    let per_node: Vec<f64> = start
        .iter()
        .enumerate()
        .filter(|(i, x)| is_full(x, &ids, *i))
        .map(|(_, x)| ms_since(t0, x.s.members_changed_unix_ms))
        .collect();
    let (linked_r, linked) = until(
        nodes,
        r.sample,
        end,
        progress("linked to all (or at the cap)"),
        &mut cpu,
        |x, _| is_linked(x, want),
    )?;
    let per_node_linked: Vec<f64> = linked_r
        .iter()
        .filter(|x| is_linked(x, want))
        .map(|x| ms_since(t0, x.s.links_changed_unix_ms))
        .collect();
    let peers: Vec<f64> = linked_r.iter().map(|x| x.s.connected as f64).collect();
    let frames_in: Vec<f64> = linked_r
        .iter()
        .zip(cpu_at_spawn)
        .map(|(y, x)| y.s.frames_in.saturating_sub(x.s.frames_in) as f64)
        .collect();
    let elapsed = t0_i.elapsed().as_secs_f64().max(1e-3);
    let node_cpu: Vec<f64> = linked_r
        .iter()
        .zip(cpu_at_spawn)
        .map(|(y, x)| (y.cpu_s - x.cpu_s) / elapsed * 100.0)
        .collect();
    Ok(Startup {
        ready_ms,
        full_membership_ms: full.then(|| per_node.iter().copied().fold(0.0, f64::max)),
        per_node_ms: Spread::of(&per_node),
        nodes_full: per_node.len(),
        all_linked_ms: linked.then(|| per_node_linked.iter().copied().fold(0.0, f64::max)),
        per_node_linked_ms: Spread::of(&per_node_linked),
        nodes_linked: per_node_linked.len(),
        peers: Spread::of(&peers),
        window_s: elapsed,
        cpu_pct: Spread::of(&node_cpu),
        frames_in: Spread::of(&frames_in),
        cpu_cores_peak: cpu.peak_cores,
        machine: cpu.machine.figures(),
        bystander: None,
        bystander_apart: None,
        announces_rate_limited: delta(cpu_at_spawn, &linked_r, |x| x.s.announces_rate_limited),
        dials_rate_limited: delta(cpu_at_spawn, &linked_r, |x| x.s.dials_rate_limited),
        claims_refused: delta(cpu_at_spawn, &linked_r, |x| x.s.claims_refused),
        links_closed: delta(cpu_at_spawn, &linked_r, |x| x.s.links_closed),
    })
}

/// Runs the storm; stops every node before returning.
pub(crate) fn run(r: &StormRun) -> Result<StormReport, RunError> {
    if r.nodes < 2 {
        return Err(RunError::Usage("a storm needs at least 2 nodes".into()));
    }
    if r.restart.is_some_and(|i| i >= r.nodes) {
        return Err(RunError::Usage(format!(
            "--restart-node must be below --nodes ({})",
            r.nodes
        )));
    }
    // A scouting port and group of this run's own: other runs on the host are not heard.
    let port = UdpSocket::bind((r.interface, 0))?.local_addr()?.port();
    let mut args = vec![
        "--group".to_string(),
        format!("storm-{}-{port}", std::process::id()),
        "--multicast-port".into(),
        port.to_string(),
        "--multicast-interface".into(),
        r.interface.to_string(),
    ];
    if let Some(c) = &r.config {
        args.push("--config".into());
        args.push(c.display().to_string());
    }
    if let Some(n) = r.max_links {
        args.push("--max-links".into());
        args.push(n.to_string());
    }
    if let Some(n) = r.nice {
        args.push("--nice".into());
        args.push(n.to_string());
    }
    if r.node_sessions {
        args.push("--own-session".into());
    }
    // Made before any node and removed after the last is gone: declared before `nodes`,
    // it is dropped after them, also on an early return.
    let cap = r
        .cpu_max
        .map(CpuCap::new)
        .transpose()
        .map_err(|e| RunError::Usage(e.to_string()))?;
    if let Some(c) = &cap {
        args.push("--cgroup-procs".into());
        args.push(c.procs_file().display().to_string());
    }
    // The bystanders and the machine from before the first spawn: starting 60 processes is
    // part of the start.
    let probes = [
        Probe::start(),
        Probe::start_apart(&std::env::current_exe()?),
    ];
    let bystander_over = |from: Instant, to: Instant| {
        probes.each_ref().map(|p| {
            p.as_ref().map(|p| {
                p.await_round_past(to, BYSTANDER_WAIT);
                bystander::figures(&p.ticks(), from, to)
            })
        })
    };
    let mut machine = MachineCpu::default();
    machine.sample();
    let t0 = unix_ms();
    let t0_i = Instant::now();
    let mut nodes = (0..r.nodes)
        .map(|k| NodeProc::spawn(&args, node_log(r, k)))
        .collect::<Result<Vec<_>, _>>()?;
    for n in nodes.iter_mut() {
        n.await_ready()?;
    }
    let ready_ms = t0_i.elapsed().as_secs_f64() * 1e3;
    // The counters and CPU at "ready" (a node's process start costs it a few ms of CPU
    // before it is ready; the start figures are from here).
    let ready = poll(&mut nodes)?;
    machine.sample();
    // Read once every node's threads exist (its executors start before it is ready).
    let threads_nice = nodes
        .iter()
        .filter_map(NodeProc::threads_nice)
        .reduce(|(a, b), (c, d)| (a.min(c), b.max(d)));
    let nodes_leading_sessions = nodes
        .iter()
        .filter(|n| n.leads_session() == Some(true))
        .count();
    let nodes_capped = cap
        .as_ref()
        .map_or(0, |c| nodes.iter().filter(|n| c.holds(n.pid())).count());
    let mut startup = startup(&mut nodes, r, t0, t0_i, &ready, ready_ms, machine)?;
    [startup.bystander, startup.bystander_apart] = bystander_over(t0_i, Instant::now());
    let full = startup.full_membership_ms.is_some();
    let mut report = StormReport {
        nodes: r.nodes,
        interface: r.interface.to_string(),
        config: r.config.as_ref().map(|c| c.display().to_string()),
        nice: r.nice,
        threads_nice,
        autogroup: bystander::autogroup(),
        nodes_leading_sessions,
        cpu_max: cap.as_ref().map(CpuCap::cores),
        nodes_capped,
        startup,
        idle: None,
        restart: None,
    };
    if full {
        std::thread::sleep(r.settle);
        if r.progress {
            eprintln!("storm: idle for {:.1} s", r.idle.as_secs_f64());
        }
        let mut machine = MachineCpu::default();
        machine.sample();
        let a = poll(&mut nodes)?;
        let from = Instant::now();
        std::thread::sleep(r.idle);
        let to = Instant::now();
        let b = poll(&mut nodes)?;
        machine.sample();
        let [here, apart] = bystander_over(from, to);
        report.idle = Some(Idle {
            machine: machine.figures(),
            bystander: here,
            bystander_apart: apart,
            ..idle(&a, &b)
        });
        if let Some(i) = r.restart {
            let from = Instant::now();
            let x = restart(&mut nodes, i, &args, r)?;
            let [here, apart] = bystander_over(from, Instant::now());
            report.restart = Some(Restart {
                bystander: here,
                bystander_apart: apart,
                ..x
            });
        }
    }
    for n in nodes {
        n.stop()?;
    }
    Ok(report)
}

/// The hidden `storm-bystander` process: [`bystander::run_apart`] until the storm stops it
/// (or is gone: its pipe closed is the end, not an error).
pub(crate) fn run_bystander_apart() -> Result<(), RunError> {
    match bystander::run_apart() {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

fn idle(a: &[Reading], b: &[Reading]) -> Idle {
    let mut frames = Vec::new();
    let mut per_peer = Vec::new();
    let mut bytes = Vec::new();
    let mut cpu = Vec::new();
    let mut peers = Vec::new();
    let (mut fin, mut bin, mut bout, mut closed, mut data) = (0, 0, 0, 0, 0);
    let mut window = 0.0f64;
    for (x, y) in a.iter().zip(b) {
        let dt = (y.at - x.at).as_secs_f64();
        window = window.max(dt);
        let f = y.s.frames_in - x.s.frames_in;
        fin += f;
        bin += y.s.bytes_in - x.s.bytes_in;
        bout += y.s.bytes_out - x.s.bytes_out;
        closed += y.s.links_closed - x.s.links_closed;
        data += y.s.data_frames_queued - x.s.data_frames_queued;
        frames.push(f as f64 / dt);
        per_peer.push(f as f64 / dt / y.s.connected.max(1) as f64);
        bytes.push((y.s.bytes_in - x.s.bytes_in) as f64 / dt);
        cpu.push((y.cpu_s - x.cpu_s) / dt * 100.0);
        peers.push(y.s.connected as f64);
    }
    Idle {
        window_s: window,
        peers: Spread::of(&peers),
        frames_per_s: Spread::of(&frames),
        frames_per_peer_s: Spread::of(&per_peer),
        bytes_in_per_s: Spread::of(&bytes),
        cpu_pct: Spread::of(&cpu),
        frames_in: fin,
        bytes_in: bin,
        bytes_out: bout,
        links_closed: closed,
        data_frames: data,
        machine: None,
        bystander: None,
        bystander_apart: None,
    }
}

/// Stops node `i`, starts it again, samples the others every period until every node has
/// full membership and `r.after` more.
fn restart(
    nodes: &mut Vec<NodeProc>,
    i: usize,
    args: &[String],
    r: &StormRun,
) -> Result<Restart, RunError> {
    if r.progress {
        eprintln!("storm: restarting node {i}");
    }
    let others = |v: &[Reading]| -> Vec<Reading> {
        v.iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, x)| x.clone())
            .collect()
    };
    let mut machine = MachineCpu::default();
    machine.sample();
    let mut prev = others(&poll(nodes)?);
    let t_r = Instant::now();
    let t_r_unix = unix_ms();
    let old = nodes.remove(i);
    let old_id = old.id.clone();
    old.stop()?;
    let stop_ms = t_r.elapsed().as_secs_f64() * 1e3;
    let mut fresh = NodeProc::spawn(args, node_log(r, r.nodes))?;
    let new_unix = unix_ms();
    fresh.await_ready()?;
    nodes.insert(i, fresh);
    let ids: Vec<String> = nodes.iter().map(|n| n.id.clone()).collect();
    let (mut peak_mean_f, mut peak_node_f, mut peak_mean_c, mut peak_node_c) =
        (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let first = prev.clone();
    let mut full_at: Option<Instant> = None;
    let mut linked_at: Option<Instant> = None;
    let n = nodes.len();
    let want = links_wanted(r, n);
    let mut last;
    let end_wait = t_r + r.converge_timeout;
    loop {
        std::thread::sleep(r.sample);
        let all = poll(nodes)?;
        machine.sample();
        let now = Instant::now();
        let cur = others(&all);
        let (mut sf, mut sc) = (0.0, 0.0);
        for (x, y) in prev.iter().zip(&cur) {
            let dt = (y.at - x.at).as_secs_f64().max(1e-3);
            let f = (y.s.frames_in - x.s.frames_in) as f64 / dt;
            let c = (y.cpu_s - x.cpu_s) / dt * 100.0;
            peak_node_f = peak_node_f.max(f);
            peak_node_c = peak_node_c.max(c);
            sf += f;
            sc += c;
        }
        peak_mean_f = peak_mean_f.max(sf / cur.len() as f64);
        peak_mean_c = peak_mean_c.max(sc / cur.len() as f64);
        prev = cur;
        let full = all.iter().enumerate().all(|(j, x)| is_full(x, &ids, j));
        if full && full_at.is_none() {
            full_at = Some(now);
        }
        if all.iter().all(|x| is_linked(x, want)) && linked_at.is_none() {
            linked_at = Some(now);
        }
        last = all;
        let done = match (full_at, linked_at) {
            (Some(a), Some(b)) => now >= a.max(b) + r.after,
            _ => now >= end_wait,
        };
        if done {
            break;
        }
    }
    let window = (prev[0].at - first[0].at).as_secs_f64().max(1e-3);
    let (mut wf, mut wc) = (0.0, 0.0);
    for (x, y) in first.iter().zip(&prev) {
        wf += (y.s.frames_in - x.s.frames_in) as f64 / window;
        wc += (y.cpu_s - x.cpu_s) / window * 100.0;
    }
    let full = full_at.is_some();
    let links_changed = last
        .iter()
        .map(|x| x.s.links_changed_unix_ms)
        .max()
        .unwrap_or(0);
    let all_changed = last
        .iter()
        .map(|x| x.s.members_changed_unix_ms)
        .max()
        .unwrap_or(0);
    Ok(Restart {
        node: i,
        old_id,
        new_id: nodes[i].id.clone(),
        stop_ms,
        full_membership_ms: full.then(|| ms_since(t_r_unix, all_changed)),
        new_node_full_ms: is_full(&last[i], &ids, i)
            .then(|| ms_since(new_unix, last[i].s.members_changed_unix_ms)),
        all_linked_ms: linked_at.map(|_| ms_since(t_r_unix, links_changed)),
        peers_min: last.iter().map(|x| x.s.connected).min().unwrap_or(0),
        links_closed: delta(&first, &prev, |x| x.s.links_closed),
        claims_refused: delta(&first, &prev, |x| x.s.claims_refused),
        window_s: window,
        sample_ms: r.sample.as_secs_f64() * 1e3,
        frames_per_s_peak_mean: peak_mean_f,
        frames_per_s_peak_node: peak_node_f,
        cpu_pct_peak_mean: peak_mean_c,
        cpu_pct_peak_node: peak_node_c,
        frames_per_s_window_mean: wf / prev.len() as f64,
        cpu_pct_window_mean: wc / prev.len() as f64,
        machine: machine.figures(),
        bystander: None,
        bystander_apart: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storm_node::NodeSample;

    fn reading(cpu_s: f64, at: Instant) -> Reading {
        Reading {
            s: NodeSample::default(),
            cpu_s,
            at,
        }
    }

    #[test]
    fn each_nodes_cpu_counts_over_its_own_interval() {
        // Two nodes, each busy one full core. In the first poll both answered at once; in
        // the second the first node answered after 250 ms, the second after 750 ms (a
        // loaded host answers slowly). Two cores busy, not four.
        let t = Instant::now();
        let a = [reading(0.0, t), reading(0.0, t)];
        let b = [
            reading(0.25, t + Duration::from_millis(250)),
            reading(0.75, t + Duration::from_millis(750)),
        ];
        let mut track = CpuTrack::default();
        track.add(&a);
        track.add(&b);
        assert!(
            (track.peak_cores - 2.0).abs() < 1e-9,
            "{}",
            track.peak_cores
        );
    }
}
