//! `ping` and `pong` as two processes on loopback: every transport measures round trips with
//! nothing lost, the pong reports back and ends by itself, the runs' `.hgrm` files go on one
//! chart, and `--metrics` serves the node's counters over HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_shoal-loadgen");

/// A running loadgen process whose stderr is read line by line on a helper thread.
struct Proc {
    child: Child,
    stderr: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Proc {
    fn start(args: &[&str]) -> Proc {
        let mut child = Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run shoal-loadgen");
        let err = child.stderr.take().expect("piped stderr");
        let (tx, stderr) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc {
            child,
            stderr,
            seen: Vec::new(),
        }
    }

    /// The first stderr line starting with `prefix` (waiting up to 30 s).
    fn line(&mut self, prefix: &str) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.starts_with(prefix)) {
            return l.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.starts_with(prefix) {
                        return l;
                    }
                }
                Err(_) => panic!("no stderr line {prefix:?}; saw {:?}", self.seen),
            }
        }
    }

    /// Waits for the process to end by itself (at most `secs`); its stdout as JSON.
    fn json(mut self, secs: u64) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                break st;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!(
                    "did not end by itself within {secs} s; stderr {:?}",
                    self.seen
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .expect("piped stdout")
            .read_to_string(&mut out)
            .expect("stdout");
        self.seen.extend(self.stderr.try_iter());
        assert!(status.success(), "failed: {status}; stderr {:?}", self.seen);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

fn http_get(addr: &str) -> String {
    let mut c = TcpStream::connect(addr).expect("metrics endpoint");
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out
}

/// One ping-pong pair; returns the ping's run and the pong's summary.
fn pair(
    extra: &[&str],
    dir: &std::path::Path,
    metrics: bool,
) -> (serde_json::Value, serde_json::Value) {
    let mut pong_args = vec![
        "pong",
        "--listen",
        "127.0.0.1:0",
        "--warmup-ms",
        "100",
        "--duration-ms",
        "400",
        "--linger-ms",
        "20000",
        "--json",
    ];
    if metrics {
        pong_args.extend(["--metrics", "127.0.0.1:0"]);
    }
    pong_args.extend(extra);
    let mut pong = Proc::start(&pong_args);
    let ready = pong.line("pong ready:");
    let addr = field(&ready, "listen").to_string();
    if metrics {
        let line = pong.line("metrics: http://");
        let url = line.split_whitespace().nth(1).expect("url");
        let host = url
            .trim_start_matches("http://")
            .trim_end_matches("/metrics");
        let page = http_get(host);
        assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
        assert!(
            page.contains("Content-Type: application/openmetrics-text"),
            "{page}"
        );
        assert!(
            page.contains("shoal_links_opened_total{shard=\"0\"}"),
            "{page}"
        );
        assert!(
            page.contains("shoal_link_read_bytes_total{shard=\"control\"}"),
            "{page}"
        );
        assert!(page.trim_end().ends_with("# EOF"), "{page}");
    }
    let prefix = dir.join("pp");
    let mut ping_args = vec![
        "ping",
        "--listen",
        "127.0.0.1:0",
        "--static-peer",
        &addr,
        "--warmup-ms",
        "100",
        "--duration-ms",
        "400",
        "--json",
        "--out-prefix",
        prefix.to_str().expect("utf-8 temp path"),
    ];
    ping_args.extend(extra);
    let ping = Proc::start(&ping_args).json(60);
    let pong = pong.json(30);
    (ping, pong)
}

#[test]
fn ping_and_pong_in_two_processes_on_every_transport() {
    let dir = std::env::temp_dir().join(format!("shoal-pingpong-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut hgrm = Vec::new();
    for (extra, transport) in [
        (&[][..], "shoal"),
        (&["--inline"][..], "shoal-inline"),
        (&["--raw"][..], "raw-tcp"),
    ] {
        let (ping, pong) = pair(extra, &dir, transport == "shoal");
        let run = &ping["runs"][0];
        assert_eq!(run["transport"], transport, "{ping}");
        let measured = run["measured"].as_u64().unwrap_or(0);
        let sent = run["round_trips"].as_u64().unwrap_or(0);
        assert!(measured > 0 && sent >= measured, "{run}");
        assert_eq!(run["timeouts"].as_u64(), Some(0), "{run}");
        let p = &run["percentiles"];
        let (p50, max) = (p["p50_us"].as_f64().unwrap(), p["max_us"].as_f64().unwrap());
        assert!(p50 > 0.0 && p50 <= max, "{run}");
        // Nothing lost either way: the pong echoed every ping sent, and said so to the ping.
        assert_eq!(run["pong"]["echoed"].as_u64(), Some(sent), "{run}");
        assert!(run["pong"]["cpu_user_s"].as_f64().is_some(), "{run}");
        assert_eq!(pong["echoed"].as_u64(), Some(sent), "{pong}");
        assert_eq!(pong["ended_by"], "goodbye", "{pong}");
        assert_eq!(pong["transport"], transport, "{pong}");
        let file = dir.join(format!("pp-{transport}.hgrm"));
        assert!(file.exists(), "{}", file.display());
        hgrm.push(file);
    }
    // The three runs of three invocations on one chart.
    let svg = dir.join("all.svg");
    let mut args = vec![
        "chart".to_string(),
        "--out".into(),
        svg.display().to_string(),
    ];
    args.extend(hgrm.iter().map(|p| p.display().to_string()));
    let out = Command::new(BIN).args(&args).output().expect("chart");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&svg).expect("svg written");
    for label in ["pp-shoal", "pp-shoal-inline", "pp-raw-tcp"] {
        assert!(text.contains(label), "{label} missing from the chart");
    }
    assert!(text.matches("<polyline").count() >= 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_pong_without_a_ping_ends_at_its_bound() {
    let pong = Proc::start(&[
        "pong",
        "--listen",
        "127.0.0.1:0",
        "--warmup-ms",
        "0",
        "--duration-ms",
        "100",
        "--linger-ms",
        "200",
        "--json",
    ]);
    let v = pong.json(30);
    assert_eq!(v["ended_by"], "deadline", "{v}");
    assert_eq!(v["echoed"].as_u64(), Some(0), "{v}");
}
