//! Lab hosts running `pubsubnode` (a mesh node that publishes or subscribes and prints its
//! counters every report period): start one and wait until it is ready, read the latest
//! value of a counter, wait for a condition over several.
//!
//! **Owns:** those three steps, shared by the lab tests that drive `pubsubnode` hosts
//! directly. **Must not touch:** the lab itself ([`crate::lab`]) or what a test asserts.

use crate::{field, num, HostProcess, Lab};
use std::time::{Duration, Instant};

/// Starts `node` (a `pubsubnode` binary) on host `k` with `args` and waits (20 s at most)
/// for its `ready` line.
pub fn start_ready(lab: &Lab, k: usize, node: &str, args: &[String]) -> HostProcess {
    let mut p = lab.spawn(k, node, args);
    p.wait_line(Instant::now() + Duration::from_secs(20), |l| {
        l.starts_with("ready ")
    })
    .unwrap_or_else(|| panic!("node on h{k} never became ready:\n{}", p.tail(20)));
    p
}

/// The value of `key` in the latest line of `p` starting with `prefix` (0 before one; a
/// line without the key panics, naming it).
pub fn latest(p: &HostProcess, prefix: &str, key: &str) -> i64 {
    p.transcript
        .iter()
        .rev()
        .find(|l| l.starts_with(prefix))
        .map_or(0, |l| num(l, key))
}

/// `keys` as the latest line of `p` starting with `prefix` has them, "key value, ..." ("-"
/// for a key it lacks: another build's node may not count it).
pub fn shown(p: &HostProcess, prefix: &str, keys: &[&str]) -> String {
    let line = p.transcript.iter().rev().find(|l| l.starts_with(prefix));
    keys.iter()
        .map(|k| format!("{k} {}", line.and_then(|l| field(l, k)).unwrap_or("-")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits (50 ms polls, at most `secs`) for `cond`, reading every host's lines meanwhile. On
/// a timeout the panic shows each host's error and disconnect lines and its last lines.
pub fn wait_all(
    hosts: &mut [HostProcess],
    secs: u64,
    what: &str,
    mut cond: impl FnMut(&[HostProcess]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        for h in hosts.iter_mut() {
            h.drain();
        }
        if cond(hosts) {
            return;
        }
        if Instant::now() > deadline {
            let tails: Vec<String> = hosts
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    let events: Vec<&String> = h
                        .transcript
                        .iter()
                        .filter(|l| l.starts_with("error ") || l.starts_with("disconnected "))
                        .collect();
                    format!("h{}: {events:?}\n{}", i + 1, h.tail(4))
                })
                .collect();
            panic!(
                "timed out after {secs}s waiting for {what}\n{}",
                tails.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
