//! Topic traffic through the built binary: `bench --topics` end to end on a short run, and
//! `pub --topic` / `sub --topic` as two processes.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_shoal-loadgen");

fn json_of(out: std::process::Output) -> serde_json::Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "shoal-loadgen failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Issue 12's benchmark runs end to end: broadcast, topic and raw-lp per size with both
/// ratios, and the fan-out to 3 reader nodes with bytes per delivered sample.
#[test]
fn bench_topics_runs_every_leg_and_the_fan_out() {
    let out = Command::new(BIN)
        .args([
            "bench",
            "--topics",
            "--sizes",
            "64,1024",
            "--duration-ms",
            "300",
            "--warmup-ms",
            "100",
            "--json",
        ])
        .output()
        .expect("run shoal-loadgen");
    let v = json_of(out);
    let rows = v.as_array().expect("one row per size");
    assert_eq!(rows.len(), 2, "{v}");
    for (row, size) in rows.iter().zip([64u64, 1024]) {
        assert_eq!(row["payload_bytes"].as_u64(), Some(size), "{row}");
        for (leg, transport) in [
            ("broadcast", "shoal"),
            ("topic", "shoal-topic"),
            ("raw_lp", "raw-lp"),
        ] {
            let s = &row[leg];
            assert_eq!(s["transport"].as_str(), Some(transport), "{leg}: {row}");
            assert!(s["delivered"].as_u64().unwrap_or(0) > 0, "{leg}: {row}");
            assert_eq!(s["lost"].as_u64(), Some(0), "{leg}: {row}");
            assert_eq!(s["loss"]["ended"].as_u64(), Some(1), "{leg}: {row}");
            assert!(
                s["msgs_per_s"].as_f64().unwrap_or(0.0) > 0.0,
                "{leg}: {row}"
            );
        }
        assert_eq!(
            row["raw_lp"]["wire_bytes"].as_u64(),
            Some(size + 4),
            "{row}"
        );
        let ratio = |k: &str| row[k].as_f64().unwrap_or(0.0);
        let rate = |leg: &str| row[leg]["msgs_per_s"].as_f64().unwrap();
        assert!(
            (ratio("topic_per_broadcast") - rate("topic") / rate("broadcast")).abs() < 1e-9,
            "{row}"
        );
        assert!(
            (ratio("topic_per_raw_lp") - rate("topic") / rate("raw_lp")).abs() < 1e-9,
            "{row}"
        );
        // Every sample of the one writer, in order, and the wire accounting.
        let t = &row["topic"]["samples"];
        let w = &t["writers"][0];
        assert_eq!(t["writers"].as_array().map(Vec::len), Some(1), "{row}");
        assert_eq!(w["first_seq"].as_u64(), Some(1), "{row}");
        assert_eq!(w["last_seq"], w["samples"], "{row}");
        assert_eq!(
            w["samples"].as_u64(),
            Some(row["topic"]["sent"].as_u64().unwrap() + 1),
            "data samples and the end marker: {row}"
        );
        for k in ["gaps", "reorders"] {
            assert_eq!(w[k].as_u64(), Some(0), "{k}: {row}");
        }
        let per_sample = t["bytes_out_per_sample"].as_f64().unwrap();
        assert!(
            per_sample >= (size + 4) as f64,
            "each sample carries its payload and length on the wire: {row}"
        );
        let f = &row["fanout"];
        assert_eq!(row["fanout_readers"].as_u64(), Some(3), "{row}");
        assert_eq!(f["nodes"].as_u64(), Some(4), "{row}");
        assert_eq!(f["loss"]["ended"].as_u64(), Some(3), "every reader: {row}");
        assert_eq!(f["lost"].as_u64(), Some(0), "{row}");
        assert_eq!(
            f["delivered"].as_u64(),
            Some(3 * f["sent"].as_u64().unwrap()),
            "{row}"
        );
        assert_eq!(
            f["samples"]["writers"].as_array().map(Vec::len),
            Some(3),
            "one row per reader: {row}"
        );
        assert!(f["samples"]["bytes_out_per_sample"].as_f64().unwrap() >= (size + 4) as f64);
    }
}

/// `bench --topics --on-shard`: the topic legs' writer and readers are shard tasks; every
/// sample arrives, in order, at the one reader and at each fan-out reader.
#[test]
fn bench_topics_on_shard_delivers_every_sample() {
    let out = Command::new(BIN)
        .args(["bench", "--topics", "--on-shard", "--sizes", "64"])
        .args([
            "--fanout",
            "2",
            "--duration-ms",
            "300",
            "--warmup-ms",
            "100",
        ])
        .arg("--json")
        .output()
        .expect("run shoal-loadgen");
    let v = json_of(out);
    let row = &v.as_array().expect("one row per size")[0];
    let t = &row["topic"];
    assert_eq!(
        t["transport"].as_str(),
        Some("shoal-topic-onshard"),
        "{row}"
    );
    assert_eq!(t["lost"].as_u64(), Some(0), "{row}");
    let w = &t["samples"]["writers"][0];
    assert_eq!(w["first_seq"].as_u64(), Some(1), "{row}");
    assert_eq!(
        w["samples"].as_u64(),
        Some(t["sent"].as_u64().unwrap() + 1),
        "data samples and the end marker: {row}"
    );
    assert_eq!(w["gaps"].as_u64(), Some(0), "{row}");
    assert_eq!(w["reorders"].as_u64(), Some(0), "{row}");
    let f = &row["fanout"];
    assert_eq!(
        f["transport"].as_str(),
        Some("shoal-topic-onshard"),
        "{row}"
    );
    assert_eq!(f["lost"].as_u64(), Some(0), "{row}");
    assert_eq!(
        f["delivered"].as_u64(),
        Some(2 * f["sent"].as_u64().unwrap()),
        "{row}"
    );
}

/// Kills a child if the test fails before it ends by itself.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `sub --topic` in one process, `pub --topic` in another: the reader matches through a
/// partition pattern and counts the writer's samples, in order, to its end marker.
/// `bench --config FILE` runs the Shoal nodes with the file's settings (the queue bound of
/// the memory report is the file's), `--spin-us` runs them spinning, and a file with an
/// unknown key is refused with its name before anything runs.
#[test]
fn bench_takes_mesh_settings_from_a_file_and_a_spin() {
    let dir = std::env::temp_dir().join(format!("shoal-bench-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let good = dir.join("good.toml");
    std::fs::write(&good, "max_outbound_queue_bytes = 1048576\n").expect("write settings");
    let out = Command::new(BIN)
        .args(["bench", "--topics", "--sizes", "64", "--fanout", "0"])
        .args([
            "--duration-ms",
            "300",
            "--warmup-ms",
            "100",
            "--spin-us",
            "20",
        ])
        .arg("--config")
        .arg(&good)
        .arg("--json")
        .output()
        .expect("run shoal-loadgen");
    let v = json_of(out);
    let row = &v.as_array().expect("one row per size")[0];
    for leg in ["broadcast", "topic"] {
        let s = &row[leg];
        assert!(s["delivered"].as_u64().unwrap_or(0) > 0, "{leg}: {row}");
        assert_eq!(s["lost"].as_u64(), Some(0), "{leg}: {row}");
        assert_eq!(
            s["memory"]["queue_bound"]["max_outbound_queue_bytes"].as_u64(),
            Some(1 << 20),
            "{leg}: {row}"
        );
    }
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "no_such_setting = 1\n").expect("write settings");
    let out = Command::new(BIN)
        .args([
            "bench", "--topics", "--sizes", "64", "--fanout", "0", "--quiet",
        ])
        .arg("--config")
        .arg(&bad)
        .output()
        .expect("run shoal-loadgen");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a bad settings file must fail: {stderr}"
    );
    assert!(stderr.contains("no_such_setting"), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "nothing ran: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `sub ARGS... SUB_EXTRA...` (listening on loopback) and `pub --static-peer ADDR
/// ARGS... PUB_EXTRA...` in two processes to the end; their JSON summaries `(pub, sub)`.
fn two_processes(args: &[&str], sub_extra: &[&str], pub_extra: &[&str]) -> (Value, Value) {
    let mut sub = Child(
        Command::new(BIN)
            .args(["sub", "--listen", "127.0.0.1:0", "--linger-ms", "20000"])
            .args(args)
            .args(sub_extra)
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sub"),
    );
    let stderr = sub.0.stderr.take().expect("sub stderr");
    let mut lines = BufReader::new(stderr).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    let addr = loop {
        assert!(Instant::now() < deadline, "sub never said it was ready");
        let line = lines
            .next()
            .expect("sub ended before it was ready")
            .unwrap();
        if let Some(at) = line.find("listen=") {
            break line[at + "listen=".len()..].trim().to_owned();
        }
    };
    // The rest of its stderr is drained, so a chatty log never blocks it.
    std::thread::spawn(move || lines.for_each(drop));
    let p = Command::new(BIN)
        .args(["pub", "--static-peer", &addr])
        .args(args)
        .args(pub_extra)
        .arg("--json")
        .output()
        .expect("run pub");
    let pv = json_of(p);
    let child = &mut sub.0;
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(child.wait().unwrap().success());
    (pv, serde_json::from_str(&out).expect("sub JSON"))
}

/// `sub --topic` in one process, `pub --topic` in another: the reader matches through a
/// partition pattern and counts the writer's samples, in order, to its end marker; the
/// same with the subscriber's side a shard task (`--on-shard`: sample runs from its inbox),
/// and with the writer a shard task's too.
#[test]
fn pub_and_sub_on_a_topic_in_two_processes() {
    let on_shard = &["--on-shard"][..];
    for (sub_extra, pub_extra, transport) in [
        (&[][..], &[][..], "shoal-topic"),
        (on_shard, &[][..], "shoal-topic-onshard"),
        (on_shard, on_shard, "shoal-topic-onshard"),
    ] {
        let (pv, sv) = two_processes(
            &[
                "--topic",
                "sensors/imu",
                "--warmup-ms",
                "100",
                "--duration-ms",
                "300",
            ],
            &[&["--partition", "robot/*"][..], sub_extra].concat(),
            &[
                &[
                    "--partition",
                    "robot/arm",
                    "--reliable",
                    "--keep-last",
                    "10",
                ][..],
                pub_extra,
            ]
            .concat(),
        );
        assert_eq!(sv["transport"].as_str(), Some(transport), "{sv}");
        let pub_transport = if pub_extra.is_empty() {
            "shoal-topic"
        } else {
            "shoal-topic-onshard"
        };
        assert_eq!(pv["transport"].as_str(), Some(pub_transport), "{pv}");
        a_writer_s_samples_in_order(&pv, &sv);
    }
}

/// The reader of `sv` got the writer of `pv`'s samples, in order, up to its end marker,
/// and the samples missing at the start are counted.
fn a_writer_s_samples_in_order(pv: &Value, sv: &Value) {
    let sent = pv["sent"].as_u64().unwrap();
    assert!(sent > 0, "{pv}");
    assert_eq!(
        pv["samples"]["topics"][0]["node_counts"]["written"].as_u64(),
        Some(sent + 1)
    );
    let w = &sv["samples"]["writers"];
    assert_eq!(w.as_array().map(Vec::len), Some(1), "one writer: {sv}");
    let w = &w[0];
    assert!(w["samples"].as_u64().unwrap() > 0, "{sv}");
    assert_eq!(w["reorders"].as_u64(), Some(0), "{sv}");
    assert_eq!(w["gaps"].as_u64(), Some(0), "{sv}");
    // Up to the end marker; samples missing at the start are counted, not silently gone:
    // by the reader's node when they came before it routed the writer, or by the writer's
    // node when its tree did not reach the reader's node yet (the Membership records that
    // make the edge usable can trail the discovery records that make the match).
    assert_eq!(w["last_seq"].as_u64(), Some(sent + 1), "{sv}");
    assert_eq!(sv["loss"]["ended"].as_u64(), Some(1), "{sv}");
    let before_route = w["first_seq"].as_u64().unwrap() - 1;
    let unrouted = sv["samples"]["unrouted_samples"].as_u64().unwrap();
    let no_route = pv["samples"]["topics"][0]["node_counts"]["dropped_no_route"]
        .as_u64()
        .unwrap();
    assert_eq!(unrouted + no_route, before_route, "pub: {pv}\nsub: {sv}");
}

/// Broadcasts from a shard task (`pub --on-shard`) to a shard task's inbox (`sub
/// --on-shard`), and raw length-prefixed TCP (`--raw --framing lp`): every message to the
/// end marker, none lost, each row labelled with its form.
#[test]
fn pub_and_sub_on_shard_and_over_raw_length_prefixed_tcp() {
    for (flags, transport) in [
        (&["--on-shard"][..], "shoal-onshard"),
        (&["--raw", "--framing", "lp"][..], "raw-lp"),
    ] {
        let args = [&["--warmup-ms", "100", "--duration-ms", "300"][..], flags].concat();
        let (pv, sv) = two_processes(&args, &[], &[]);
        for v in [&pv, &sv] {
            assert_eq!(v["transport"].as_str(), Some(transport), "{v}");
        }
        let sent = pv["sent"].as_u64().unwrap();
        assert!(sent > 0, "{pv}");
        assert_eq!(sv["delivered"].as_u64(), Some(sent), "{sv}");
        assert_eq!(sv["lost"].as_u64(), Some(0), "{sv}");
        assert_eq!(sv["loss"]["ended"].as_u64(), Some(1), "{sv}");
    }
}

#[test]
fn bench_reliable_compares_with_best_effort_and_times_a_repair() {
    let out = Command::new(BIN)
        .args([
            "bench",
            "--reliable",
            "--sizes",
            "64",
            "--duration-ms",
            "300",
            "--warmup-ms",
            "100",
            "--repair-gap",
            "2000",
            "--json",
        ])
        .output()
        .expect("run shoal-loadgen");
    let v = json_of(out);
    let rows = v["sizes"].as_array().expect("one row per size");
    assert_eq!(rows.len(), 1, "{v}");
    let row = &rows[0];
    for leg in ["best_effort", "reliable"] {
        let s = &row[leg];
        assert!(s["delivered"].as_u64().unwrap_or(0) > 0, "{leg}: {row}");
        assert_eq!(s["lost"].as_u64(), Some(0), "{leg}: {row}");
    }
    assert!(
        row["reliable_per_best_effort"].as_f64().unwrap_or(0.0) > 0.0,
        "{row}"
    );
    // The reader node's bytes are acknowledgements and link heartbeats: a small fraction
    // of a byte per sample, never zero.
    let ack = row["ack_bytes_per_sample"].as_f64().unwrap_or(-1.0);
    assert!(ack > 0.0 && ack < 8.0, "{row}");
    let r = &v["repair"];
    assert_eq!(r["gap_samples"].as_u64(), Some(2000), "{r}");
    assert!(r["samples_repaired"].as_u64().unwrap_or(0) >= 2000, "{r}");
    let (relink, repair, total) = (
        r["relink_ms"].as_f64().unwrap(),
        r["repair_ms"].as_f64().unwrap(),
        r["complete_ms"].as_f64().unwrap(),
    );
    assert!(
        repair >= 0.0 && (relink + repair - total).abs() < 1.0,
        "{r}"
    );
}
