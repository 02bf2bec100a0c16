//! `ping` and `pong` as two processes on loopback: every transport measures round trips with
//! nothing lost, the pong reports back and ends by itself, the runs' `.hgrm` files go on one
//! chart, and `--metrics` serves the node's counters over HTTP.

use std::process::Command;

mod support;

use support::{field, http_get, Proc, BIN};

/// Waits for `p` to end by itself (at most `secs`); its stdout as JSON.
fn json(mut p: Proc, secs: u64) -> serde_json::Value {
    let status = p.wait_end(secs);
    let out = p.stdout();
    p.drain();
    assert!(status.success(), "failed: {status}; stderr {:?}", p.seen);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
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
    let mut pong = Proc::start(&pong_args, &[], false);
    let ready = pong.line("pong ready:", 30);
    let addr = field(&ready, "listen").to_string();
    if metrics {
        let line = pong.line("metrics: http://", 30);
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
    let ping = json(Proc::start(&ping_args, &[], false), 60);
    let pong = json(pong, 30);
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
    let pong = Proc::start(
        &[
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
        ],
        &[],
        false,
    );
    let v = json(pong, 30);
    assert_eq!(v["ended_by"], "deadline", "{v}");
    assert_eq!(v["echoed"].as_u64(), Some(0), "{v}");
}
