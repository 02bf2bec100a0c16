//! `storm`: N nodes in N processes on this host, started at once, linked by multicast scouting
//! (every node dials every node it finds: the full mesh a LAN builds), left idle, then one of
//! them restarted. Measures the time until every node has full membership, each node's control
//! frames and CPU while idle, and the spike at the other nodes while one restarts.
//!
//! Each node is this binary's hidden `storm-node` subcommand ([`crate::storm_node`]); the
//! parent asks each for a [`NodeSample`] over its stdin/stdout and reads its CPU time from
//! `/proc/PID/stat`. While the mesh is idle it asks nothing between the window's two samples,
//! so the measurement costs the nodes nothing.
//!
//! **Owns:** starting, sampling, restarting and stopping the node processes, and the report.
//! **Must not touch:** the mesh (the nodes are separate processes driven through the public
//! API) or any address but the interface it is given.

use crate::demo::RunError;
use crate::storm_node::{unix_ms, NodeSample};
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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
    /// Each node's stderr (its log) to `DIR/node-K.log` (`K` in start order, the restarted
    /// node's new process last) instead of this process's stderr.
    pub(crate) node_logs: Option<PathBuf>,
    /// Progress on stderr.
    pub(crate) progress: bool,
}

/// Minimum, median, mean and maximum of one figure over the nodes.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct Spread {
    pub(crate) min: f64,
    pub(crate) median: f64,
    pub(crate) mean: f64,
    pub(crate) max: f64,
}

impl Spread {
    fn of(v: &[f64]) -> Spread {
        if v.is_empty() {
            return Spread::default();
        }
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        Spread {
            min: s[0],
            median: s[s.len() / 2],
            mean: s.iter().sum::<f64>() / s.len() as f64,
            max: s[s.len() - 1],
        }
    }
}

/// The start: all nodes at once until each has every other as a member.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Startup {
    /// From the first process started to the last node's member set becoming complete, ms
    /// (`None`: not within the timeout).
    pub(crate) full_membership_ms: Option<f64>,
    /// The same per node (the complete ones).
    pub(crate) per_node_ms: Spread,
    /// Nodes whose member set was complete at the end of the wait.
    pub(crate) nodes_full: usize,
}

/// The idle window: per node rates over it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Idle {
    /// Length of the window, s.
    pub(crate) window_s: f64,
    /// Linked peers per node at its end.
    pub(crate) peers: Spread,
    /// Frames received per node per second (no data flows: control frames alone).
    pub(crate) frames_per_s: Spread,
    /// Frames received per node per second per linked peer.
    pub(crate) frames_per_peer_s: Spread,
    /// Bytes received per node per second.
    pub(crate) bytes_in_per_s: Spread,
    /// CPU per node, % of one core (user + system, from /proc).
    pub(crate) cpu_pct: Spread,
    /// Frames received by all nodes in the window.
    pub(crate) frames_in: u64,
    /// Bytes all nodes received and sent in the window (equal but for frames in flight at
    /// the window's ends).
    pub(crate) bytes_in: u64,
    /// See `bytes_in`.
    pub(crate) bytes_out: u64,
    /// Links closed in the window (0 in a steady mesh) and Data frames queued (0: idle).
    pub(crate) links_closed: u64,
    /// See `links_closed`.
    pub(crate) data_frames: u64,
}

/// One node stopped (Goodbye) and started again as a new process with a new id.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Restart {
    /// Its index.
    pub(crate) node: usize,
    /// Its id before and after.
    pub(crate) old_id: String,
    /// See `old_id`.
    pub(crate) new_id: String,
    /// From the stop request to the old process's exit, ms.
    pub(crate) stop_ms: f64,
    /// From the stop request until every node (the new one included) has full membership
    /// again, ms (`None`: not within the timeout).
    pub(crate) full_membership_ms: Option<f64>,
    /// From the new process's start until its own member set is complete, ms.
    pub(crate) new_node_full_ms: Option<f64>,
    /// The observed window (stop request to the end), s.
    pub(crate) window_s: f64,
    /// Sampling period, ms.
    pub(crate) sample_ms: f64,
    /// Frames received per second at the other nodes: the highest sample period's mean over
    /// them, and its highest single node.
    pub(crate) frames_per_s_peak_mean: f64,
    /// See `frames_per_s_peak_mean`.
    pub(crate) frames_per_s_peak_node: f64,
    /// CPU of the other nodes, % of a core: the highest period's mean and single node.
    pub(crate) cpu_pct_peak_mean: f64,
    /// See `cpu_pct_peak_mean`.
    pub(crate) cpu_pct_peak_node: f64,
    /// Over the whole window, the other nodes' mean frames/s and CPU %.
    pub(crate) frames_per_s_window_mean: f64,
    /// See `frames_per_s_window_mean`.
    pub(crate) cpu_pct_window_mean: f64,
}

/// What a storm run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct StormReport {
    /// Nodes.
    pub(crate) nodes: usize,
    /// Interface of scouting and links.
    pub(crate) interface: String,
    /// The mesh settings file, if any.
    pub(crate) config: Option<String>,
    /// See [`Startup`].
    pub(crate) startup: Startup,
    /// See [`Idle`] (`None` when the start did not converge).
    pub(crate) idle: Option<Idle>,
    /// See [`Restart`].
    pub(crate) restart: Option<Restart>,
}

/// One node process.
struct NodeProc {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    id: String,
}

/// What a node said and how much CPU it had used, read together.
#[derive(Debug, Clone)]
struct Reading {
    s: NodeSample,
    cpu_s: f64,
    at: Instant,
}

const READ_TIMEOUT: Duration = Duration::from_secs(30);

impl NodeProc {
    /// Starts a node; its stderr goes to `log` if given.
    fn spawn(args: &[String], log: Option<PathBuf>) -> Result<NodeProc, RunError> {
        let exe = std::env::current_exe()?;
        let stderr = match log {
            Some(path) => Stdio::from(std::fs::File::create(path)?),
            None => Stdio::inherit(),
        };
        let mut child = Command::new(exe)
            .arg("storm-node")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(NodeProc {
            child,
            stdin,
            lines,
            id: String::new(),
        })
    }

    fn line(&self) -> Result<String, RunError> {
        self.lines.recv_timeout(READ_TIMEOUT).map_err(|_| {
            RunError::Usage(format!(
                "storm node (pid {}) did not answer within {} s",
                self.child.id(),
                READ_TIMEOUT.as_secs()
            ))
        })
    }

    fn await_ready(&mut self) -> Result<(), RunError> {
        let l = self.line()?;
        self.id = l
            .strip_prefix("ready ")
            .ok_or_else(|| RunError::Usage(format!("storm node said {l:?} instead of ready")))?
            .to_string();
        Ok(())
    }

    fn ask(&mut self) -> Result<(), RunError> {
        self.stdin.write_all(b"s\n")?;
        self.stdin.flush()?;
        Ok(())
    }

    fn answer(&self) -> Result<Reading, RunError> {
        let l = self.line()?;
        let s: NodeSample = serde_json::from_str(&l)
            .map_err(|e| RunError::Usage(format!("storm node answered {l:?}: {e}")))?;
        Ok(Reading {
            s,
            cpu_s: cpu_seconds(self.child.id()).unwrap_or(0.0),
            at: Instant::now(),
        })
    }

    /// Asks the node to stop and waits for its exit (killing it after 10 s).
    fn stop(mut self) -> Result<(), RunError> {
        let _ = self.stdin.write_all(b"q\n");
        let _ = self.stdin.flush();
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        tracing::warn!(pid = self.child.id(), "storm node did not stop: killed");
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        // On an early error: no node outlives the run (a stopped one has exited already).
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Where the `k`-th node process started logs, if the run keeps node logs.
fn node_log(r: &StormRun, k: usize) -> Option<PathBuf> {
    r.node_logs
        .as_ref()
        .map(|d| d.join(format!("node-{k}.log")))
}

/// User + system CPU seconds of process `pid` (all its threads), from `/proc/PID/stat`.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count fields after its closing paren.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the name.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a system constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks as f64 / hz.max(1) as f64)
}

/// Asks every node at once, then collects the answers (a round costs one pipe round trip,
/// not N).
fn poll(nodes: &mut [NodeProc]) -> Result<Vec<Reading>, RunError> {
    for n in nodes.iter_mut() {
        n.ask()?;
    }
    nodes.iter().map(NodeProc::answer).collect()
}

/// Whether node `i`'s member set is every other node.
fn is_full(r: &Reading, ids: &[String], i: usize) -> bool {
    r.s.members.len() + 1 == ids.len()
        && ids
            .iter()
            .enumerate()
            .all(|(j, id)| j == i || r.s.members.binary_search(id).is_ok())
}

/// Polls until every node's member set is complete or `timeout`; the last readings.
fn until_full(
    nodes: &mut [NodeProc],
    every: Duration,
    timeout: Duration,
    progress: bool,
) -> Result<(Vec<Reading>, bool), RunError> {
    let ids: Vec<String> = nodes.iter().map(|n| n.id.clone()).collect();
    let end = Instant::now() + timeout;
    loop {
        let r = poll(nodes)?;
        let full = r
            .iter()
            .enumerate()
            .filter(|(i, x)| is_full(x, &ids, *i))
            .count();
        if progress {
            eprint!("\rstorm: {full}/{} nodes with full membership", nodes.len());
        }
        if full == nodes.len() || Instant::now() >= end {
            if progress {
                eprintln!();
            }
            return Ok((r, full == nodes.len()));
        }
        std::thread::sleep(every);
    }
}

fn ms_since(t0_unix_ms: u64, changed: u64) -> f64 {
    changed.saturating_sub(t0_unix_ms) as f64
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
    let t0 = unix_ms();
    let mut nodes = (0..r.nodes)
        .map(|k| NodeProc::spawn(&args, node_log(r, k)))
        .collect::<Result<Vec<_>, _>>()?;
    for n in nodes.iter_mut() {
        n.await_ready()?;
    }
    let (start, full) = until_full(&mut nodes, r.sample, r.converge_timeout, r.progress)?;
    let ids: Vec<String> = nodes.iter().map(|n| n.id.clone()).collect();
    let per_node: Vec<f64> = start
        .iter()
        .enumerate()
        .filter(|(i, x)| is_full(x, &ids, *i))
        .map(|(_, x)| ms_since(t0, x.s.members_changed_unix_ms))
        .collect();
    let startup = Startup {
        full_membership_ms: full.then(|| per_node.iter().copied().fold(0.0, f64::max)),
        per_node_ms: Spread::of(&per_node),
        nodes_full: per_node.len(),
    };
    let mut report = StormReport {
        nodes: r.nodes,
        interface: r.interface.to_string(),
        config: r.config.as_ref().map(|c| c.display().to_string()),
        startup,
        idle: None,
        restart: None,
    };
    if full {
        std::thread::sleep(r.settle);
        if r.progress {
            eprintln!("storm: idle for {:.1} s", r.idle.as_secs_f64());
        }
        let a = poll(&mut nodes)?;
        std::thread::sleep(r.idle);
        let b = poll(&mut nodes)?;
        report.idle = Some(idle(&a, &b));
        if let Some(i) = r.restart {
            report.restart = Some(restart(&mut nodes, i, &args, r)?);
        }
    }
    for n in nodes {
        n.stop()?;
    }
    Ok(report)
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
    let mut last;
    let end_wait = t_r + r.converge_timeout;
    loop {
        std::thread::sleep(r.sample);
        let all = poll(nodes)?;
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
        last = all;
        let done = match full_at {
            Some(t) => now >= t + r.after,
            None => now >= end_wait,
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
        window_s: window,
        sample_ms: r.sample.as_secs_f64() * 1e3,
        frames_per_s_peak_mean: peak_mean_f,
        frames_per_s_peak_node: peak_node_f,
        cpu_pct_peak_mean: peak_mean_c,
        cpu_pct_peak_node: peak_node_c,
        frames_per_s_window_mean: wf / prev.len() as f64,
        cpu_pct_window_mean: wc / prev.len() as f64,
    })
}

/// Prints the report for a human.
pub(crate) fn print(r: &StormReport) {
    let sp = |s: &Spread, unit: &str| {
        format!(
            "median {:.1}{unit} (min {:.1}, mean {:.1}, max {:.1})",
            s.median, s.min, s.mean, s.max
        )
    };
    println!(
        "storm: {} nodes, one process each, multicast scouting on {}{}",
        r.nodes,
        r.interface,
        r.config
            .as_ref()
            .map(|c| format!(", settings {c}"))
            .unwrap_or_default()
    );
    match r.startup.full_membership_ms {
        Some(ms) => println!(
            "  start: every node had full membership after {ms:.0} ms (per node {})",
            sp(&r.startup.per_node_ms, " ms")
        ),
        None => println!(
            "  start: only {} of {} nodes reached full membership within the timeout",
            r.startup.nodes_full, r.nodes
        ),
    }
    if let Some(i) = &r.idle {
        println!(
            "  idle {:.1} s, {:.0} peers per node:",
            i.window_s, i.peers.median
        );
        println!(
            "    control frames received per node per s: {}",
            sp(&i.frames_per_s, "")
        );
        println!(
            "    per node per peer per s:                {}",
            sp(&i.frames_per_peer_s, "")
        );
        println!(
            "    bytes received per node per s:          {}",
            sp(&i.bytes_in_per_s, "")
        );
        println!(
            "    CPU per node, % of a core:              {}",
            sp(&i.cpu_pct, " %")
        );
        println!(
            "    links closed {}, data frames {} (both 0 when idle)",
            i.links_closed, i.data_frames
        );
    }
    if let Some(x) = &r.restart {
        println!(
            "  restart of node {} ({} -> {}): stopped in {:.0} ms; {}",
            x.node,
            &x.old_id[..8.min(x.old_id.len())],
            &x.new_id[..8.min(x.new_id.len())],
            x.stop_ms,
            match (x.full_membership_ms, x.new_node_full_ms) {
                (Some(a), Some(b)) => format!(
                    "every node had full membership again {a:.0} ms after the stop \
                     (the new node {b:.0} ms after its start)"
                ),
                _ => "full membership NOT regained within the timeout".into(),
            }
        );
        println!(
            "    at the other nodes over {:.1} s (sampled every {:.0} ms): frames/s peak {:.0} \
             mean of nodes, {:.0} one node, {:.0} over the window; CPU peak {:.1} % mean, \
             {:.1} % one node, {:.1} % over the window",
            x.window_s,
            x.sample_ms,
            x.frames_per_s_peak_mean,
            x.frames_per_s_peak_node,
            x.frames_per_s_window_mean,
            x.cpu_pct_peak_mean,
            x.cpu_pct_peak_node,
            x.cpu_pct_window_mean
        );
    }
}
