//! The storm's report: what a run measured ([`StormReport`]) and its human form ([`print()`]).
//!
//! **Owns:** the report's figures and their printing. **Must not touch:** the node processes
//! (the run driver's).

use super::{Bystander, Machine};

/// Minimum, median, mean and maximum of one figure over the nodes.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct Spread {
    pub(crate) min: f64,
    pub(crate) median: f64,
    pub(crate) mean: f64,
    pub(crate) max: f64,
}

impl Spread {
    pub(super) fn of(v: &[f64]) -> Spread {
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
    /// From the first process started until the last one said it was ready (its mesh
    /// listening and scouting), ms: process start-up on a loaded host, before the mesh
    /// work the figures below measure. Read after every spawn, so it is an upper bound.
    pub(crate) ready_ms: f64,
    /// From the first process started to the last node's member set becoming complete, ms
    /// (`None`: not within the timeout).
    pub(crate) full_membership_ms: Option<f64>,
    /// The same per node (the complete ones).
    pub(crate) per_node_ms: Spread,
    /// Nodes whose member set was complete at the end of the wait.
    pub(crate) nodes_full: usize,
    /// From the first process started until every node had a link to every other (with
    /// `--max-links`: at least the cap), ms (`None`: not within the timeout). Members are also learned through others, so this
    /// comes after full membership; the idle window waits for it.
    pub(crate) all_linked_ms: Option<f64>,
    /// The same per node (those linked to all).
    pub(crate) per_node_linked_ms: Spread,
    /// Nodes linked to every other at the end of the wait.
    pub(crate) nodes_linked: usize,
    /// Linked peers per node at the end of the start.
    pub(crate) peers: Spread,
    /// The start's length (first spawn to every node linked, or the timeout), s.
    pub(crate) window_s: f64,
    /// CPU per node over the start (from "ready"), % of one core.
    pub(crate) cpu_pct: Spread,
    /// Frames received per node over the start (from "ready"): every link's control frames
    /// (no data flows).
    pub(crate) frames_in: Spread,
    /// All nodes' CPU together in the busiest sample period of the start, in cores (each
    /// node's CPU time is read at its own answer; 10 ms clock ticks make a period's sum
    /// noisy: the machine's figures are the measure of saturation).
    pub(crate) cpu_cores_peak: f64,
    /// The whole machine's CPU over the start, from before the first spawn (process start
    /// included; its first period runs until every process is ready) to the end of the
    /// start (`None` without `/proc/stat`).
    pub(crate) machine: Option<Machine>,
    /// What a program in the nodes' session got over the start, from before the first
    /// spawn (a thread of the storm, which started them; `None`: no per-thread CPU clock).
    pub(crate) bystander: Option<Bystander>,
    /// What a program in a session of its own got over the start (a login shell, a monitor:
    /// a process of the storm's in a new session; `None`: it did not start).
    pub(crate) bystander_apart: Option<Bystander>,
    /// Over the start, all nodes: announces ignored and dials postponed for the new-peer
    /// budget, late claims refused, links closed (dial-race losers and failures).
    pub(crate) announces_rate_limited: u64,
    /// See `announces_rate_limited`.
    pub(crate) dials_rate_limited: u64,
    /// See `announces_rate_limited`.
    pub(crate) claims_refused: u64,
    /// See `announces_rate_limited`.
    pub(crate) links_closed: u64,
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
    /// The whole machine's CPU over the window (`None` without `/proc/stat`).
    pub(crate) machine: Option<Machine>,
    /// What a program in the nodes' session got over the window.
    pub(crate) bystander: Option<Bystander>,
    /// What a program in a session of its own got over the window.
    pub(crate) bystander_apart: Option<Bystander>,
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
    /// From the stop request until every node has a link to every other again (with
    /// `--max-links`: at least the cap), ms (`None`: not within the timeout).
    pub(crate) all_linked_ms: Option<f64>,
    /// The fewest linked peers of a node at the end.
    pub(crate) peers_min: usize,
    /// Links closed and late claims refused at the other nodes over the window.
    pub(crate) links_closed: u64,
    /// See `links_closed`.
    pub(crate) claims_refused: u64,
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
    /// The whole machine's CPU over the window, sampled with the nodes (`None` without
    /// `/proc/stat`).
    pub(crate) machine: Option<Machine>,
    /// What a program in the nodes' session got over the window.
    pub(crate) bystander: Option<Bystander>,
    /// What a program in a session of its own got over the window.
    pub(crate) bystander_apart: Option<Bystander>,
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
    /// The nodes' niceness, if the run set one.
    pub(crate) nice: Option<i32>,
    /// The lowest and highest niceness of any node process's threads once every node was
    /// ready (its executors and its own main thread, which keeps the storm's).
    pub(crate) threads_nice: Option<(i32, i32)>,
    /// Whether the kernel shares the cores between sessions before their threads
    /// (`/proc/sys/kernel/sched_autogroup_enabled`; `None`: it does not say): what the two
    /// bystanders' difference rests on.
    pub(crate) autogroup: Option<bool>,
    /// Node processes that lead a session of their own once every node was ready (all with
    /// `--node-sessions`, none without).
    pub(crate) nodes_leading_sessions: usize,
    /// The cores the node processes' cgroup may use (`--cpu-max`; `None`: uncapped).
    pub(crate) cpu_max: Option<f64>,
    /// Node processes in that cgroup once every node was ready (all with `--cpu-max`).
    pub(crate) nodes_capped: usize,
    /// See [`Startup`].
    pub(crate) startup: Startup,
    /// See [`Idle`] (`None` when the start did not converge).
    pub(crate) idle: Option<Idle>,
    /// See [`Restart`].
    pub(crate) restart: Option<Restart>,
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
            + &r.nice.map(|n| format!(", at nice {n}")).unwrap_or_default()
            + if r.nodes_leading_sessions > 0 {
                ", each node in a session of its own"
            } else {
                ""
            }
            + &r.cpu_max
                .map(|c| format!(
                    ", the nodes capped at {c} cores ({} in the cgroup)",
                    r.nodes_capped
                ))
                .unwrap_or_default()
            + match r.autogroup {
                Some(true) => "; the kernel shares the cores between sessions first (autogroup)",
                Some(false) => "; autogroup off: the cores are shared between threads",
                None => "",
            }
    );
    println!(
        "  start: every process ready (listening) after {:.0} ms",
        r.startup.ready_ms
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
    let s = &r.startup;
    match s.all_linked_ms {
        Some(ms) => println!(
            "  start: every node linked to every other (or at the cap) after {ms:.0} ms (per node {})",
            sp(&s.per_node_linked_ms, " ms")
        ),
        None => println!(
            "  start: only {} of {} nodes linked to all (or at the cap) within the timeout (peers {})",
            s.nodes_linked,
            r.nodes,
            sp(&s.peers, "")
        ),
    }
    println!(
        "    over the start ({:.1} s): CPU per node {}, frames received per node {}, all \
         nodes {:.2} cores at the peak; announces rate-limited {}, dials rate-limited {}, \
         late claims refused {}, links closed {}",
        s.window_s,
        sp(&s.cpu_pct, " %"),
        sp(&s.frames_in, ""),
        s.cpu_cores_peak,
        s.announces_rate_limited,
        s.dials_rate_limited,
        s.claims_refused,
        s.links_closed
    );
    print_machine("over the start", s.machine.as_ref());
    print_bystanders(
        "over the start",
        s.bystander.as_ref(),
        s.bystander_apart.as_ref(),
    );
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
        print_machine("over the idle window", i.machine.as_ref());
        print_bystanders(
            "over the idle window",
            i.bystander.as_ref(),
            i.bystander_apart.as_ref(),
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
            "    links: {}; fewest peers of a node at the end {}; at the others {} links \
             closed, {} late claims refused",
            match x.all_linked_ms {
                Some(ms) => format!("every node linked to all again {ms:.0} ms after the stop"),
                None => "NOT all linked again within the timeout".into(),
            },
            x.peers_min,
            x.links_closed,
            x.claims_refused
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
        print_machine("over the window", x.machine.as_ref());
        print_bystanders(
            "over the window",
            x.bystander.as_ref(),
            x.bystander_apart.as_ref(),
        );
    }
}

/// The machine's line of a phase (nothing without `/proc/stat`).
fn print_machine(phase: &str, m: Option<&Machine>) {
    if let Some(m) = m {
        println!(
            "    the machine (every process, /proc/stat) {phase}: {:.2} of {} cores busy on \
             average, {:.2} in the busiest sample period",
            m.busy_mean, m.cores, m.busy_peak
        );
    }
}

/// The bystanders' lines of a phase (nothing for one that did not run).
fn print_bystanders(phase: &str, here: Option<&Bystander>, apart: Option<&Bystander>) {
    let lines = [
        ("a bystander thread in the nodes' session", here),
        ("a bystander process in a session of its own", apart),
    ];
    for (who, b) in lines {
        let Some(b) = b else { continue };
        println!(
            "    {who} {phase} ({} rounds of a {:.0} ms sleep, then {:.1} ms of CPU): woke \
             late by {:.1} / {:.1} / {:.1} ms, its work took {:.1} / {:.1} / {:.1} ms (median / \
             p90 / max)",
            b.rounds,
            super::bystander::SLEEP.as_secs_f64() * 1e3,
            super::bystander::WORK.as_secs_f64() * 1e3,
            b.woke_late_ms.p50,
            b.woke_late_ms.p90,
            b.woke_late_ms.max,
            b.work_ms.p50,
            b.work_ms.p90,
            b.work_ms.max
        );
    }
}
