//! `shoal-loadgen discovery` end to end at a tiny size: each of the three parts runs, and what
//! it reports agrees with the layout it was given (expected matches computed here, on their
//! own, from the documented layout) and with itself (p50 <= p99 <= max, frames flowing).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_shoal-loadgen");

fn discovery(args: &[&str]) -> serde_json::Value {
    let v = discovery_may_fail(args, true);
    assert_eq!(v["failed"].as_array().map(Vec::len), Some(0), "{v}");
    v
}

fn discovery_may_fail(args: &[&str], ok: bool) -> serde_json::Value {
    let out = Command::new(BIN)
        .arg("discovery")
        .args(args)
        .args(["--announce-ms", "200", "--timeout-s", "60", "--json"])
        .output()
        .expect("run shoal-loadgen");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.success(), ok, "shoal-loadgen: {stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// The layout's matches: endpoint g writes when even, reads when odd, on topic (g/2) % topics.
fn layout_matches(endpoints: impl Iterator<Item = usize>, topics: usize) -> u64 {
    let (mut w, mut r) = (vec![0u64; topics], vec![0u64; topics]);
    for g in endpoints {
        let t = (g / 2) % topics;
        if g % 2 == 0 {
            w[t] += 1;
        } else {
            r[t] += 1;
        }
    }
    w.iter().zip(&r).map(|(a, b)| a * b).sum()
}

fn f(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {v}"))
}

#[test]
fn latency_part_times_every_trial() {
    let v = discovery(&["--part", "latency", "--trials", "8"]);
    assert_eq!(v["announce_period_ms"].as_u64(), Some(200), "{v}");
    assert!(v["matching"].is_null() && v["cpu"].is_null(), "{v}");
    let l = &v["latency"];
    assert_eq!(l["trials"].as_u64(), Some(8), "{l}");
    let (min, p50, p99, max) = (
        f(l, "min_ms"),
        f(l, "p50_ms"),
        f(l, "p99_ms"),
        f(l, "max_ms"),
    );
    assert!(0.0 < min && min <= p50 && p50 <= p99 && p99 <= max, "{l}");
    assert!((f(l, "p99_periods") - p99 / 200.0).abs() < 1e-9, "{l}");
    assert!(f(l, "unmatch_p50_ms") > 0.0, "{l}");
}

#[test]
fn match_part_waits_for_every_expected_pair_on_every_node() {
    let v = discovery(&[
        "--part",
        "match",
        "--match-nodes",
        "4",
        "--match-endpoints",
        "10",
        "--match-topics",
        "3",
    ]);
    let m = &v["matching"];
    assert_eq!(m["nodes"].as_u64(), Some(4), "{m}");
    assert_eq!(m["endpoints"].as_u64(), Some(40), "{m}");
    assert_eq!(
        m["expected_matches"].as_u64(),
        Some(layout_matches(0..40, 3)),
        "{m}"
    );
    assert!(
        f(m, "matched_ms") >= f(m, "create_ms") && f(m, "create_ms") > 0.0,
        "{m}"
    );
}

#[test]
fn cpu_part_measures_the_node_that_knows_the_remote_endpoints() {
    let v = discovery(&[
        "--part",
        "cpu",
        "--cpu-helpers",
        "3",
        "--cpu-helper-endpoints",
        "20",
        "--cpu-endpoints",
        "6",
        "--cpu-topics",
        "5",
        "--cpu-links",
        "2",
        "--cpu-seconds",
        "1",
    ]);
    let c = &v["cpu"];
    assert_eq!(c["remote_endpoints"].as_u64(), Some(60), "{c}");
    assert_eq!(c["own_endpoints"].as_u64(), Some(6), "{c}");
    // The helpers' indices 0..60 and the measured node's own 0..6 on the same topics.
    assert_eq!(
        c["expected_matches"].as_u64(),
        Some(layout_matches((0..60).chain(0..6), 5)),
        "{c}"
    );
    assert!(f(c, "window_s") >= 1.0, "{c}");
    // Three helpers announce every 200 ms: frames arrive; with two links some come twice,
    // the second copy a duplicate or, off the origin's path, refused.
    assert!(f(c, "frames_in_per_s") > 0.0, "{c}");
    assert!(
        f(c, "duplicates_per_s") + f(c, "off_path_per_s") > 0.0,
        "{c}"
    );
    assert!(f(c, "frames_built_per_s") > 0.0, "{c}");
    let control = f(c, "control_cpu_ms_per_s");
    assert!(
        control >= 0.0 && control <= f(c, "process_cpu_ms_per_s") + f(c, "resolution_ms_per_s"),
        "{c}"
    );
}

#[test]
fn a_failing_part_is_reported_and_the_others_still_run() {
    let v = discovery_may_fail(
        &[
            "--trials",
            "0",
            "--match-nodes",
            "2",
            "--match-endpoints",
            "4",
            "--match-topics",
            "1",
            "--cpu-helpers",
            "1",
            "--cpu-helper-endpoints",
            "4",
            "--cpu-endpoints",
            "2",
            "--cpu-topics",
            "1",
            "--cpu-seconds",
            "1",
        ],
        false,
    );
    let failed = v["failed"].as_array().expect("failures listed");
    assert_eq!(failed.len(), 1, "{v}");
    assert_eq!(failed[0]["part"].as_str(), Some("latency"), "{v}");
    assert!(v["latency"].is_null(), "{v}");
    // 8 endpoints on one topic: 4 writers x 4 readers.
    assert_eq!(v["matching"]["expected_matches"].as_u64(), Some(16), "{v}");
    assert_eq!(v["cpu"]["remote_endpoints"].as_u64(), Some(4), "{v}");
}
