//! The README's "run the main job" command, end to end: the built binary runs a short demo on
//! loopback and its JSON summary shows delivery without loss.

use std::process::Command;

#[test]
fn demo_delivers_everything_on_loopback() {
    let out = Command::new(env!("CARGO_BIN_EXE_shoal-loadgen"))
        .args(["demo", "--duration-ms", "1500", "--json"])
        .output()
        .expect("run shoal-loadgen");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let num = |k: &str| {
        v[k].as_u64()
            .unwrap_or_else(|| panic!("no integer `{k}` in {v}"))
    };
    assert_eq!(num("nodes"), 3);
    assert_eq!(num("links"), 3, "full mesh of 3 nodes");
    assert!(num("sent") > 0);
    assert!(num("delivered") > 0);
    assert_eq!(
        num("lost"),
        0,
        "Block policy on loopback loses nothing: {v}"
    );
    // Both subscribers saw the publisher's end marker, so tail loss was checked too.
    assert_eq!(v["loss"]["ended"].as_u64(), Some(2), "{v}");
    assert_eq!(
        num("delivered"),
        2 * num("sent"),
        "each subscriber got every message"
    );
    assert!(v["latency"]["count"].as_u64().unwrap() > 0);
    assert!(v["drops"].is_object(), "drops by cause are reported");
    assert_eq!(v["topology"].as_array().map(Vec::len), Some(3));
}

#[test]
fn secured_bench_delivers_with_a_psk() {
    let out = Command::new(env!("CARGO_BIN_EXE_shoal-loadgen"))
        .args([
            "bench",
            "--compare-psk",
            "--psk",
            "secret",
            "--sizes",
            "64",
            "--duration-ms",
            "300",
            "--warmup-ms",
            "100",
            "--json",
        ])
        .output()
        .expect("run shoal-loadgen");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench --compare-psk failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let row = &v[0];
    for side in ["plain", "psk"] {
        assert!(
            row[side]["delivered"].as_u64().unwrap_or(0) > 0,
            "{side}: {v}"
        );
        assert_eq!(row[side]["lost"].as_u64(), Some(0), "{side}: {v}");
    }
    assert!(row["ratio"].as_f64().unwrap_or(0.0) > 0.0, "{v}");
}
