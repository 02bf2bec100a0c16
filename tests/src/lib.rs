//! Shared helpers for Shoal's cross-crate integration tests.
//!
//! The main piece is [`Lab`] (module [`lab`]), the project's own network lab: several test
//! hosts on one machine, made of network namespaces, with multicast between them and fault
//! injection (random loss, delay, link cut and heal). It needs root; [`Lab::skip_reason`] says
//! why a test cannot run here so the test can print it and return instead of failing. A fresh
//! clone needs nothing beside it: iproute2 (`ip`, `tc`) and a kernel with network namespaces.
//!
//! **Owns:** the tests that cross crates or hosts (`tests/`), the lab, and the helper
//! binaries they run in lab hosts (`meshnode`, `pubsubnode`, `topicnode`, `attacker`).
//!
//! **Must not touch:** crate internals (tests go through public APIs; a crate's own tests stay
//! in that crate), and any host but loopback and the lab's.

pub mod lab;
pub mod pubsub;

pub use lab::{HostProcess, Lab, LabError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The file whose appearance starts the writers of every `topicnode` of a test at once
/// (`--start-file`): none at first, removed when the test ends, however it ends.
pub struct StartFile(PathBuf);

impl StartFile {
    /// A start file for the test `name` of this process (none there yet).
    pub fn new(name: &str) -> StartFile {
        let path = std::env::temp_dir().join(format!("shoal-{name}-go-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        StartFile(path)
    }

    /// Where it is made.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Makes it: every node waiting on it starts writing.
    pub fn go(&self) {
        std::fs::write(&self.0, b"go").expect("write the start file");
    }
}

impl Drop for StartFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `topicnode`'s arguments for a host on `interface` writing a paced reliable stream (`count`
/// samples at `rate` a second, a blocked write retried every 500 ms) once `go` exists,
/// its node's lease `lease_ms`, its endpoints announced every 500 ms, for `run_for_s`
/// seconds at most. A test adds its endpoints and history.
pub fn reliable_stream_args(
    interface: &str,
    lease_ms: u64,
    (rate, count): (u64, i64),
    go: &StartFile,
    run_for_s: u64,
) -> Vec<String> {
    let go = go.path().to_str().expect("utf-8 path");
    [
        "--interface",
        interface,
        "--lease-ms",
        &lease_ms.to_string(),
        "--topic-announce-ms",
        "500",
        "--reliable",
        "--rate",
        &rate.to_string(),
        "--count",
        &count.to_string(),
        "--max-blocking-ms",
        "500",
        "--start-file",
        go,
        "--run-for",
        &run_for_s.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// True when lab tests cannot run here; it prints why, one line, so the test can return (and
/// pass).
pub fn skip_without_lab() -> bool {
    match Lab::skip_reason() {
        Some(why) => {
            // Straight to the process's stderr: the test harness captures `println!` of a test
            // that passes, and a skipped lab test passes, so `cargo test` would not show why.
            let _ = writeln!(std::io::stderr(), "skipped: {why}");
            true
        }
        None => false,
    }
}

/// The value of `key=value` in a line of words.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// The integer value of `key=value` in a line; panics with the line when it is missing.
pub fn num(line: &str, key: &str) -> i64 {
    field(line, key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
}

/// A lab host running `topicnode`: its process and the endpoints it opened, as
/// `(topic, guid, is_writer)`.
pub struct TopicHost {
    /// The host's number (h1 is 1).
    pub k: usize,
    /// The process.
    pub p: HostProcess,
    /// The endpoints it printed at start.
    pub endpoints: Vec<(String, String, bool)>,
}

impl TopicHost {
    /// Starts `node` (a `topicnode` binary) on host `k` with `args` plus one `--writer` per
    /// `writers` and one `--reader` per `readers`, and waits (20 s at most) for its `ready`
    /// line and one line per endpoint.
    pub fn start(
        lab: &Lab,
        k: usize,
        node: &str,
        mut args: Vec<String>,
        writers: &[&str],
        readers: &[&str],
    ) -> TopicHost {
        for w in writers {
            args.extend(["--writer".to_string(), w.to_string()]);
        }
        for r in readers {
            args.extend(["--reader".to_string(), r.to_string()]);
        }
        let mut p = lab.spawn(k, node, &args);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut endpoints = Vec::new();
        for _ in 0..(1 + writers.len() + readers.len()) {
            let l = p
                .wait_line(deadline, |l| {
                    l.starts_with("ready ") || l.starts_with("writer ") || l.starts_with("reader ")
                })
                .unwrap_or_else(|| panic!("node on h{k} never became ready:\n{}", p.tail(20)));
            if !l.starts_with("ready ") {
                endpoints.push((
                    field(&l, "topic").expect("topic").to_string(),
                    field(&l, "guid").expect("guid").to_string(),
                    l.starts_with("writer "),
                ));
            }
        }
        TopicHost { k, p, endpoints }
    }

    /// The GUID of its writer (`writer`) or reader on `topic`.
    pub fn guid(&self, topic: &str, writer: bool) -> String {
        self.endpoints
            .iter()
            .find(|(t, _, w)| t == topic && *w == writer)
            .map(|(_, g, _)| g.clone())
            .unwrap_or_else(|| panic!("h{} has no such endpoint on {topic}", self.k))
    }

    /// Every line so far starting with `prefix`.
    pub fn all(&mut self, prefix: &str) -> Vec<String> {
        self.p.drain();
        self.p
            .transcript
            .iter()
            .filter(|l| l.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// The latest line starting with `prefix`.
    pub fn last(&mut self, prefix: &str) -> Option<String> {
        self.all(prefix).pop()
    }

    /// The latest `recv` line for `topic` from `writer`.
    pub fn recv(&mut self, topic: &str, writer: &str) -> Option<String> {
        self.all("recv ")
            .into_iter()
            .rev()
            .find(|l| field(l, "topic") == Some(topic) && field(l, "writer") == Some(writer))
    }

    /// Samples received on `topic` from `writer` per the latest `recv` line (0 if none).
    pub fn received(&mut self, topic: &str, writer: &str) -> i64 {
        self.recv(topic, writer).map_or(0, |l| num(&l, "n"))
    }

    /// The highest seq received on `topic` from `writer` (0 if none).
    pub fn seq(&mut self, topic: &str, writer: &str) -> i64 {
        self.recv(topic, writer).map_or(0, |l| num(&l, "seq"))
    }

    /// How many `prefix` lines (`matched ` / `unmatched `) name this pair.
    pub fn pair_events(&mut self, prefix: &str, writer: &str, reader: &str) -> usize {
        self.all(prefix)
            .iter()
            .filter(|l| field(l, "writer") == Some(writer) && field(l, "reader") == Some(reader))
            .count()
    }

    /// Whether `writer` and `reader` matched here.
    pub fn matched(&mut self, writer: &str, reader: &str) -> bool {
        self.pair_events("matched ", writer, reader) > 0
    }

    /// Whether `reader` unmatched here (from any writer).
    pub fn unmatched_reader(&mut self, reader: &str) -> bool {
        self.all("unmatched ")
            .iter()
            .any(|l| field(l, "reader") == Some(reader))
    }
}

/// Event lines a failed wait prints per host, the latest.
const EVENTS: usize = 40;

/// The last `n` lines of `transcript` that are events (links, matches, a writer blocked or
/// done, samples lost), not the per-period status lines (`recv`, `topic`, `reliable`): in a
/// CI log, where the files `wait_hosts` writes are gone, they are what tells a failure's story
/// (each carries its time, `t=`).
fn events(transcript: &[String], n: usize) -> String {
    let status = ["recv ", "topic ", "reliable "];
    let ev: Vec<&str> = transcript
        .iter()
        .filter(|l| !status.iter().any(|p| l.starts_with(p)))
        .map(String::as_str)
        .collect();
    ev[ev.len().saturating_sub(n)..].join("\n")
}

/// Waits (50 ms polls, at most `secs`) until `cond` holds over the lab's topic hosts. On a
/// timeout every host's whole output goes to a file (the tails rarely tell the story) and
/// the panic names the files, with each host's last lines and its last event lines.
pub fn wait_hosts(
    hosts: &mut [TopicHost],
    secs: u64,
    what: &str,
    mut cond: impl FnMut(&mut [TopicHost]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond(hosts) {
        if Instant::now() > deadline {
            let mut tails = Vec::new();
            for h in hosts.iter_mut() {
                h.p.drain();
                let log = std::env::temp_dir().join(format!(
                    "shoal-lab-{}-h{}.log",
                    std::process::id(),
                    h.k
                ));
                let _ = std::fs::write(&log, h.p.transcript.join("\n"));
                tails.push(format!(
                    "h{} ({}):\n{}\nits events (the last {EVENTS}):\n{}",
                    h.k,
                    log.display(),
                    h.p.tail(12),
                    events(&h.p.transcript, EVENTS)
                ));
            }
            panic!(
                "timed out after {secs}s waiting for {what}\n{}",
                tails.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::events;

    #[test]
    fn a_failed_wait_reports_the_last_events_without_the_status_lines() {
        let transcript: Vec<String> = [
            "ready id=a port=1 t=1",
            "connected peer=b t=2",
            "recv topic=x writer=w seq=1 n=1 t=3",
            "topic name=x written=0 t=3",
            "reliable samples_repaired=0 t=3",
            "disconnected peer=b t=4",
            "blocked writer=w seq=9 t=5",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            events(&transcript, 2),
            "disconnected peer=b t=4\nblocked writer=w seq=9 t=5"
        );
        assert_eq!(events(&transcript, 10).lines().count(), 4);
    }
}
