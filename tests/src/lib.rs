//! Shared helpers for Shoal's cross-crate integration tests.
//!
//! The main piece is [`Lab`], a handle on `../shared/netlab/lab.sh`: several test hosts on one
//! machine, made of network namespaces, with multicast between them and fault injection
//! (random loss, link cut and heal). It needs root; [`Lab::skip_reason`] says why a test
//! cannot run here so the test can print it and return instead of failing.
//!
//! **Owns:** the tests that cross crates or hosts (`tests/`), the netlab handle, and the
//! helper binaries they run in lab hosts (`meshnode`, `pubsubnode`, `attacker`).
//!
//! **Must not touch:** crate internals (tests go through public APIs; a crate's own tests stay
//! in that crate), `shared/` (read-only: it only runs `lab.sh`), and any host but loopback and
//! the lab's.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Where the read-only `shared/` folder is: `$SHOAL_SHARED_DIR`, else beside the repository.
pub fn shared_dir() -> PathBuf {
    match std::env::var_os("SHOAL_SHARED_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared")),
    }
}

/// True when lab tests cannot run here; it prints why, so the test can return (and pass).
pub fn skip_without_lab() -> bool {
    match Lab::skip_reason() {
        Some(why) => {
            println!("skipped: {why}");
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

/// A network lab of `n` hosts, torn down when dropped.
///
/// Each lab has its own namespace prefix, so several tests may run labs at the same time.
pub struct Lab {
    script: PathBuf,
    prefix: String,
    hosts: usize,
    lab_dir: PathBuf,
}

/// A process started inside a lab host, killed when dropped. Its standard output is read
/// line by line on a background thread.
pub struct HostProcess {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Every line seen so far, for failure messages.
    pub transcript: Vec<String>,
}

impl Lab {
    /// Why lab tests cannot run on this machine, or `None` when they can.
    pub fn skip_reason() -> Option<String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            return Some(format!(
                "netlab tests need root to create network namespaces (running as uid {euid})"
            ));
        }
        if Command::new("ip").arg("-V").output().is_err() {
            return Some("netlab tests need iproute2 (`ip`), which is not installed".into());
        }
        None
    }

    /// Creates a lab of `hosts` hosts under the namespace prefix `prefix` (short, unique per
    /// test). Panics with lab.sh's own output when that fails.
    pub fn up(prefix: &str, hosts: usize) -> Lab {
        let script = shared_dir().join("netlab/lab.sh");
        assert!(
            script.exists(),
            "netlab script not found at {} (set SHOAL_SHARED_DIR)",
            script.display()
        );
        let lab_dir = std::env::temp_dir().join(format!("shoal-netlab-{prefix}"));
        std::fs::create_dir_all(&lab_dir).expect("create lab dir");
        let lab = Lab {
            script,
            prefix: prefix.to_string(),
            hosts,
            lab_dir,
        };
        // A lab left behind by a killed run would otherwise keep its faults.
        let _ = lab.run(&["down"]);
        lab.run(&["up", &hosts.to_string()])
            .unwrap_or_else(|e| panic!("lab.sh up {hosts} failed: {e}"));
        lab
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg(&self.script)
            .args(args)
            .env("LAB_PREFIX", &self.prefix)
            .env("LAB_DIR", &self.lab_dir)
            .env("LAB_QUIET", "1");
        cmd
    }

    /// Runs one lab.sh command and returns its standard output.
    pub fn run(&self, args: &[&str]) -> Result<String, String> {
        let out = self
            .command(args)
            .output()
            .map_err(|e| format!("cannot run lab.sh: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "lab.sh {args:?} exited with {}: {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Number of hosts.
    pub fn hosts(&self) -> usize {
        self.hosts
    }

    /// The IPv4 address of host `k` (1-based).
    pub fn addr(&self, k: usize) -> String {
        self.run(&["addr", &format!("h{k}")])
            .expect("lab.sh addr")
            .trim()
            .to_string()
    }

    /// Starts `program args` inside host `k`, with its standard output captured.
    pub fn spawn(&self, k: usize, program: &str, args: &[String]) -> HostProcess {
        let mut cmd = self.command(&["exec", &format!("h{k}"), program]);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn lab process");
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
        HostProcess {
            child,
            lines,
            transcript: Vec::new(),
        }
    }

    /// Random loss of `pct` percent on host `k`'s link, both directions (0 removes it).
    pub fn loss(&self, k: usize, pct: u32) {
        self.run(&["loss", &format!("h{k}"), &pct.to_string(), "both"])
            .expect("lab.sh loss");
    }

    /// Pulls host `k`'s cable.
    pub fn cut(&self, k: usize) {
        self.run(&["cut", &format!("h{k}")]).expect("lab.sh cut");
    }

    /// Plugs host `k`'s cable back in.
    pub fn heal(&self, k: usize) {
        self.run(&["heal", &format!("h{k}")]).expect("lab.sh heal");
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Err(e) = self.run(&["down"]) {
            eprintln!("warning: {e}");
        }
    }
}

impl HostProcess {
    /// Reads lines until `pred` accepts one or `deadline` passes; returns the accepted line.
    pub fn wait_line(
        &mut self,
        deadline: Instant,
        mut pred: impl FnMut(&str) -> bool,
    ) -> Option<String> {
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                Ok(line) => {
                    self.transcript.push(line.clone());
                    if pred(&line) {
                        return Some(line);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Reads every line already available without waiting.
    pub fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.transcript.push(line);
        }
    }

    /// The last `n` lines seen, for failure messages.
    pub fn tail(&self, n: usize) -> String {
        let start = self.transcript.len().saturating_sub(n);
        self.transcript[start..].join("\n")
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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

/// Waits (50 ms polls, at most `secs`) until `cond` holds over the lab's topic hosts. On a
/// timeout every host's whole output goes to a file (the tails rarely tell the story) and
/// the panic names the files, with each host's last lines.
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
                tails.push(format!("h{} ({}):\n{}", h.k, log.display(), h.p.tail(12)));
            }
            panic!(
                "timed out after {secs}s waiting for {what}\n{}",
                tails.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
