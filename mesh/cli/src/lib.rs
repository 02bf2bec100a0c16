//! shoal-cli: the `shoal` command, which joins a Shoal mesh as an observer node and shows it:
//! `nodes`, `topics [PATTERN]`, `echo`, `hz`, `bw`, `graph` and `watch` (issue 28). Human
//! output by default, `--json` for scripts; `shoal --help` and `shoal <command> --help`
//! describe every option.
//!
//! **Why here (`mesh/cli`, package `shoal-cli`, binary `shoal`).** It is a client of the
//! public `shoal_mesh` API and of nothing else: it sits beside the crate it observes, as
//! `mesh/proto` sits beside the driver it feeds, and the top level of the repository stays
//! as it is. It is not a `shoal-loadgen` role: the load generator's job is to make load and
//! measure it (histograms, charts, lab roles), and an observer must stay small, start fast
//! and cost the mesh as little as it can (`bench/notes/observer.md`); it shares with the
//! loadgen only the way a node is configured from a command line (group, PSK, identity,
//! multicast, static peers). What the API lacked for it (members' names, addresses,
//! protocols, uptimes, link RTTs; the reasons of remote pairs) was added to `shoal_mesh`
//! (`Mesh::nodes`, `topics::explain`), so any application can show the same.
//!
//! The library half exists so the commands are tested against loopback meshes in-process:
//! each command is a function from what the observer sees to a report (JSON-serializable)
//! and its text; `main.rs` only parses, joins and prints.
//!
//! **Owns:** the observer node's settings, the commands' reports and their text, the live
//! view. **Must not touch:** the mesh's protocol or its facts: everything shown comes from
//! `Mesh::nodes`, `Mesh::topics`, `Mesh::stats` and the samples of readers it opens.

pub mod args;
pub mod graph;
pub mod nodes;
pub mod observer;
pub mod rate;
pub mod reading;
pub mod text;
pub mod topics;
pub mod watch;

use args::{Cli, Command};
use observer::Observer;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Why a command failed. Each says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The settings file could not be read.
    #[error("cannot read {path}: {source}")]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The settings are invalid.
    #[error("invalid mesh settings: {0}")]
    Config(#[from] shoal_mesh::config::ConfigError),
    /// The observer node failed.
    #[error("observer node: {0}")]
    Mesh(#[from] shoal_mesh::MeshError),
    /// No node answered.
    #[error(
        "no mesh found: no node linked within {waited_ms} ms ({tried}); check the group, \
         the interface (--multicast-interface) or name a node with --static-peer HOST:PORT"
    )]
    NoMesh {
        /// How long the observer waited.
        waited_ms: u64,
        /// Where it looked.
        tried: observer::Tried,
    },
    /// The topic is not known on the mesh.
    #[error("{}", unknown_topic(topic, close, *known))]
    UnknownTopic {
        /// The name asked for.
        topic: String,
        /// Known names close to it.
        close: Vec<String>,
        /// How many topics are known.
        known: usize,
    },
    /// Writing the output failed.
    #[error("output: {0}")]
    Io(#[from] std::io::Error),
    /// JSON output failed.
    #[error("JSON output: {0}")]
    Json(#[from] serde_json::Error),
}

fn unknown_topic(topic: &str, close: &[String], known: usize) -> String {
    let mut s = format!("unknown topic {topic:?}: no writer or reader on the mesh has it");
    if close.is_empty() {
        s.push_str(&format!(
            " ({known} topic(s) known; `shoal topics` lists them)"
        ));
    } else {
        s.push_str(&format!("; did you mean {}?", close.join(", ")));
    }
    s
}

/// Runs `cli`, writing what it prints to `out`.
pub fn run(cli: &Cli, out: &mut dyn Write) -> Result<(), CliError> {
    let m = &cli.mesh;
    let mut o = Observer::join(m, cli.cmd.name())?;
    let settle = Duration::from_millis(m.settle_ms);
    let limit = Duration::from_millis(m.settle_ms.saturating_mul(4).max(m.wait_ms));
    match &cli.cmd {
        Command::Nodes => {
            let (v, _) = o.settle(settle, limit)?;
            let r = nodes::report(&v);
            if m.json {
                writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
            } else {
                write!(out, "{}", nodes::text(&r))?;
            }
        }
        Command::Topics(a) => {
            let (v, t) = o.settle(settle, limit)?;
            let r = topics::report(&v, &t, a.pattern.as_deref())?;
            if m.json {
                writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
            } else {
                write!(out, "{}", topics::text(&r, &v))?;
            }
        }
        Command::Echo(a) => {
            let (_, t) = o.settle(settle, limit)?;
            let readers = reading::open(&o, &t, &a.reader)?;
            reading::echo(&mut o, &readers, a, m.json, out)?;
        }
        Command::Hz(a) | Command::Bw(a) => {
            let (_, t) = o.settle(settle, limit)?;
            let readers = reading::open(&o, &t, &a.reader)?;
            let show = if matches!(cli.cmd, Command::Hz(_)) {
                rate::Show::Hz
            } else {
                rate::Show::Bw
            };
            rate::run(
                &mut o,
                &readers,
                Duration::from_millis(a.window_ms.max(1)),
                a.windows,
                show,
                m.json,
                out,
            )?;
        }
        Command::Graph(a) => {
            let (v, t) = o.settle(settle, limit)?;
            if let Some(topic) = &a.topic {
                topics::require_topic(&t, topic)?;
            }
            let d = graph::drawing(&v, &t, a.topic.as_deref());
            let text = if a.dot {
                graph::dot(&d)
            } else {
                graph::svg(&d)
            };
            if a.out.as_os_str() == "-" {
                write!(out, "{text}")?;
            } else {
                std::fs::write(&a.out, text)?;
                writeln!(
                    out,
                    "wrote {} ({} nodes, {} links{})",
                    a.out.display(),
                    d.nodes.len(),
                    d.edges.len(),
                    if d.trees.is_empty() {
                        String::new()
                    } else {
                        format!(", {} writer tree(s)", d.trees.len())
                    }
                )?;
            }
        }
        Command::Watch(a) => {
            o.settle(settle, limit)?;
            watch::run(o, a)?;
        }
    }
    Ok(())
}
