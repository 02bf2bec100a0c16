//! `storm` (N nodes in N processes started at once, idle, one restart), its hidden
//! per-process node, `storm-node`, and its hidden bystander in a session of its own,
//! `storm-bystander`.

use super::{emit_json, ms, MainError, Output};
use crate::storm::{self, StormRun};
use crate::storm_node::{self, StormNodeArgs};
use clap::Args;
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// `storm`'s arguments.
#[derive(Args, Debug)]
pub(crate) struct StormArgs {
    /// Nodes, one process each, all started at once.
    #[arg(long, default_value_t = 10)]
    nodes: usize,
    /// Idle window measured after every node has full membership and the settle time, ms.
    #[arg(long, default_value_t = 10_000)]
    idle_ms: u64,
    /// Wait between full membership and the idle window (start-up traffic fades), ms.
    #[arg(long, default_value_t = 3_000)]
    settle_ms: u64,
    /// The node restarted after the idle window (index; default the last).
    #[arg(long)]
    restart_node: Option<usize>,
    /// No restart.
    #[arg(long, conflicts_with = "restart_node")]
    no_restart: bool,
    /// Observation after every node has full membership again following the restart, ms.
    #[arg(long, default_value_t = 3_000)]
    after_ms: u64,
    /// Sampling period while the nodes start and while one restarts, ms (the idle window
    /// is sampled at its two ends only).
    #[arg(long, default_value_t = 250)]
    sample_ms: u64,
    /// Longest wait for full membership, at the start and after the restart, ms.
    #[arg(long, default_value_t = 60_000)]
    converge_timeout_ms: u64,
    /// Interface address for multicast scouting and the nodes' listeners.
    #[arg(long, default_value_t = Ipv4Addr::LOCALHOST)]
    multicast_interface: Ipv4Addr,
    /// Mesh settings file (TOML) given to every node.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Cap on each node's links to discovered peers (`max_links`; overrides the settings
    /// file). 0: no cap, the full mesh.
    #[arg(long)]
    max_links: Option<usize>,
    /// Every node's executors (shards and control plane) at this niceness, 1–19 (`nice`;
    /// overrides the settings file): the nodes yield the cores to the host's other
    /// programs, which is what the bystander measures. Default: this process's own.
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..=19))]
    nice: Option<i32>,
    /// Every node process in a session of its own, as nodes started as separate services,
    /// containers or terminals are (where the kernel groups sessions, each node is then a
    /// group of its own; see the report's `autogroup`). Default: the storm's session.
    #[arg(long)]
    node_sessions: bool,
    /// Every node process in a cgroup of the run's own whose CPU quota is this many cores
    /// (e.g. 1.5), as a service manager caps a unit (systemd `CPUQuota=150%`): the host
    /// keeps the rest of its cores, the start takes longer. The bystanders stay outside.
    /// Needs the cgroup `cpu` controller and the right to make a group (root). Default: none.
    #[arg(long, value_name = "CORES")]
    cpu_max: Option<f64>,
    /// Write each node's log (stderr; `RUST_LOG` applies) to `DIR/node-K.log`, K in start
    /// order, the restarted node's new process last; each node logs its id at info level
    /// (`shoal_loadgen=info`).
    #[arg(long, value_name = "DIR")]
    node_logs: Option<PathBuf>,
    #[command(flatten)]
    out: Output,
}

/// Runs a storm and prints its report; an error when full membership was not reached.
pub(crate) fn storm_cmd(a: StormArgs) -> Result<(), MainError> {
    let run = StormRun {
        nodes: a.nodes,
        settle: ms(a.settle_ms),
        idle: ms(a.idle_ms),
        restart: if a.no_restart {
            None
        } else {
            Some(a.restart_node.unwrap_or(a.nodes.saturating_sub(1)))
        },
        after: ms(a.after_ms),
        sample: ms(a.sample_ms.max(1)),
        converge_timeout: ms(a.converge_timeout_ms),
        interface: a.multicast_interface,
        config: a.config,
        max_links: a.max_links,
        node_sessions: a.node_sessions,
        cpu_max: a.cpu_max,
        nice: a.nice,
        node_logs: a.node_logs,
        progress: !(a.out.quiet || a.out.json),
    };
    let report = storm::run(&run)?;
    if a.out.json {
        emit_json(&report)?;
    } else {
        storm::print(&report);
    }
    let restarted = report
        .restart
        .as_ref()
        .is_none_or(|r| r.full_membership_ms.is_some());
    if report.startup.full_membership_ms.is_none() || !restarted {
        return Err(MainError::Usage(
            "full membership was not reached at every node".into(),
        ));
    }
    Ok(())
}

/// The hidden per-process node of a storm.
pub(crate) fn storm_node_cmd(a: StormNodeArgs) -> Result<(), MainError> {
    storm_node::run(&a)?;
    Ok(())
}

/// The hidden bystander of a storm in a session of its own.
pub(crate) fn storm_bystander_cmd() -> Result<(), MainError> {
    storm::run_bystander_apart()?;
    Ok(())
}
