//! `shoal-loadgen`: the demo, load roles, throughput comparison with raw TCP, and the latency
//! harness of Shoal. Every run is bounded in time and stops by itself.
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
//! - `storm`: N nodes in N processes started at once by multicast scouting, idle, then one
//!   restarted: time to full membership, idle control frames and CPU per node, the spike.
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
mod cli;
mod control_cpu;
mod demo;
mod demo_topics;
mod discovery_bench;
mod discovery_setup;
mod gaps;
mod hostile;
mod latency;
mod latency_hist;
mod latency_inline;
mod metrics;
mod pingpong;
mod plot;
mod proc_stat;
mod raw;
mod repair_bench;
mod report;
mod roles;
mod rss;
mod shard_roles;
mod shoal;
mod stamp;
mod storm;
mod storm_node;
mod topic_bench;
mod topic_report;
mod topics;
mod traffic;
mod usage;

use clap::{Parser, Subcommand};
use cli::bench::BenchArgs;
use cli::demo::DemoArgs;
use cli::discovery::DiscoveryCmd;
use cli::latency::{ChartArgs, LatencyArgs, PingPongArgs};
use cli::role::RoleArgs;
use std::io::IsTerminal;
use std::process::ExitCode;

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
    /// N nodes in N processes on this host, started at once and linked by multicast
    /// scouting, left idle, then one restarted: time to full membership at every node,
    /// control frames and CPU per node idle, the spike at the others during the restart.
    Storm(cli::storm::StormArgs),
    /// One node of a `storm` (started by `storm`; answers it on stdin/stdout).
    #[command(hide = true)]
    StormNode(storm_node::StormNodeArgs),
    /// A `storm`'s bystander in a session of its own (started by `storm`; writes its
    /// rounds on stdout).
    #[command(hide = true)]
    StormBystander,
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
        Cmd::Demo(a) => cli::demo::demo(a),
        Cmd::Pub(a) => cli::role::role(roles::Role::Pub, a),
        Cmd::Sub(a) => cli::role::role(roles::Role::Sub, a),
        Cmd::Relay(a) => cli::role::role(roles::Role::Relay, a),
        Cmd::Bench(a) => cli::bench::bench_cmd(a),
        Cmd::Latency(a) => cli::latency::latency_cmd(a),
        Cmd::Ping(a) => cli::latency::ping_cmd(a),
        Cmd::Pong(a) => cli::latency::pong_cmd(a),
        Cmd::Chart(a) => cli::latency::chart_cmd(a),
        Cmd::Discovery(a) => cli::discovery::discovery_cmd(a),
        Cmd::Storm(a) => cli::storm::storm_cmd(a),
        Cmd::StormNode(a) => cli::storm::storm_node_cmd(a),
        Cmd::StormBystander => cli::storm::storm_bystander_cmd(),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shoal-loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}
