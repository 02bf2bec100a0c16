//! What the loadgen's process tests share: a `shoal-loadgen` child whose output lines are read
//! on helper threads into one channel, a line's `key=value` fields, and the metrics page.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_shoal-loadgen");

/// A running `shoal-loadgen`: its stderr (and, when asked, its stdout) read line by line into
/// one channel; every line taken so far in `seen`. Killed when dropped.
pub struct Proc {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Proc {
    /// Starts `shoal-loadgen ARGS` with `env` set; with `stdout_lines` its stdout comes
    /// through the lines too, otherwise it stays piped for [`Proc::stdout`].
    pub fn start(args: &[&str], env: &[(&str, &str)], stdout_lines: bool) -> Proc {
        let mut child = Command::new(BIN)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run shoal-loadgen");
        let (tx, lines) = mpsc::channel();
        let mut streams: Vec<Box<dyn Read + Send>> =
            vec![Box::new(child.stderr.take().expect("piped stderr"))];
        if stdout_lines {
            streams.push(Box::new(child.stdout.take().expect("piped stdout")));
        }
        for stream in streams {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Proc {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The first line starting with `prefix`, waiting up to `secs` for it.
    pub fn line(&mut self, prefix: &str, secs: u64) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.starts_with(prefix)) {
            return l.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.starts_with(prefix) {
                        return l;
                    }
                }
                Err(_) => panic!("no line {prefix:?}; saw {:?}", self.seen),
            }
        }
    }

    /// Waits (at most `secs`) for the process to end by itself, taking its lines meanwhile;
    /// killed and a panic if it does not.
    pub fn wait_end(&mut self, secs: u64) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return st;
            }
            self.seen.extend(self.lines.try_iter());
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!(
                    "did not end by itself within {secs} s; output {:?}",
                    self.seen
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Takes the lines still coming until the pipes close (each within 10 s of the last).
    pub fn drain(&mut self) {
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(10)) {
            self.seen.push(l);
        }
    }

    /// Its stdout, to its end (started without `stdout_lines`).
    pub fn stdout(&mut self) -> String {
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .expect("piped stdout")
            .read_to_string(&mut out)
            .expect("stdout");
        out
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of `key=` in `line`.
pub fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

/// The metrics page served at `addr`.
pub fn http_get(addr: &str) -> String {
    let mut c = TcpStream::connect(addr).expect("metrics endpoint");
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out
}
