//! One storm node process: started as this binary's hidden `storm-node` subcommand, asked
//! for a [`NodeSample`] over its stdin/stdout, its CPU time read from `/proc/PID/stat`.
//!
//! **Owns:** a node process's pipes and lifetime. **Must not touch:** what a run does with
//! the readings (the run driver's).

use crate::demo::RunError;
use crate::proc_stat::{clock_ticks, cpu_ticks, stat_field};
use crate::storm_node::NodeSample;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// One node process.
pub(super) struct NodeProc {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    pub(super) id: String,
}

/// What a node said and how much CPU it had used, read together.
#[derive(Debug, Clone)]
pub(super) struct Reading {
    pub(super) s: NodeSample,
    pub(super) cpu_s: f64,
    pub(super) at: Instant,
}

const READ_TIMEOUT: Duration = Duration::from_secs(30);

impl NodeProc {
    /// Starts a node; its stderr goes to `log` if given.
    pub(super) fn spawn(args: &[String], log: Option<PathBuf>) -> Result<NodeProc, RunError> {
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

    pub(super) fn await_ready(&mut self) -> Result<(), RunError> {
        let l = self.line()?;
        self.id = l
            .strip_prefix("ready ")
            .ok_or_else(|| RunError::Usage(format!("storm node said {l:?} instead of ready")))?
            .to_string();
        Ok(())
    }

    pub(super) fn ask(&mut self) -> Result<(), RunError> {
        self.stdin.write_all(b"s\n")?;
        self.stdin.flush()?;
        Ok(())
    }

    /// The lowest and highest niceness of the process's threads (`None` without procfs).
    pub(super) fn threads_nice(&self) -> Option<(i32, i32)> {
        let dir = std::fs::read_dir(format!("/proc/{}/task", self.child.id())).ok()?;
        dir.flatten()
            .filter_map(|t| thread_nice(&std::fs::read_to_string(t.path().join("stat")).ok()?))
            .fold(None, |acc, n| match acc {
                None => Some((n, n)),
                Some((lo, hi)) => Some((lo.min(n), hi.max(n))),
            })
    }

    /// The process's id.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process leads a session of its own (`/proc/PID/stat` field 6 is its pid;
    /// `None` without procfs).
    pub(super) fn leads_session(&self) -> Option<bool> {
        let pid = self.child.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(stat_field(&stat, 6)?.parse::<u32>().ok()? == pid)
    }

    pub(super) fn answer(&self) -> Result<Reading, RunError> {
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
    pub(super) fn stop(mut self) -> Result<(), RunError> {
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

/// User + system CPU seconds of process `pid` (all its threads), from `/proc/PID/stat`.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(cpu_ticks(&stat)? as f64 / clock_ticks())
}

/// The niceness in a `/proc/PID/task/TID/stat` line (field 19).
fn thread_nice(stat: &str) -> Option<i32> {
    stat_field(stat, 19)?.parse().ok()
}

/// Asks every node at once, then collects the answers (a round costs one pipe round trip,
/// not N).
pub(super) fn poll(nodes: &mut [NodeProc]) -> Result<Vec<Reading>, RunError> {
    for n in nodes.iter_mut() {
        n.ask()?;
    }
    nodes.iter().map(NodeProc::answer).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threads_niceness_is_field_19_after_the_name() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 10 0 0 0 7 3 0 0 20 5 4";
        assert_eq!(thread_nice(line), Some(5));
    }
}
