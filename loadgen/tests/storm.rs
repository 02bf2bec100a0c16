//! `storm` with 4 node processes on loopback: the mesh forms by multicast scouting, every
//! node reaches full membership, the idle window's counters agree with each other, and a
//! restarted node comes back under a new id that every node then lists. No timing is asserted
//! (the report's times and rates are measurements, read in bench/notes/membership-scale.md).

use serde_json::Value;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_shoal-loadgen");

fn num(v: &Value, path: &str) -> f64 {
    let mut x = v;
    for k in path.split('.') {
        x = &x[k];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("{path} is not a number in {v:#}"))
}

/// Runs `shoal-loadgen storm ARGS --json`, which must succeed, and returns its report.
fn storm(args: &[&str]) -> Value {
    let out = Command::new(BIN)
        .arg("storm")
        .args(args)
        .arg("--json")
        .output()
        .expect("run shoal-loadgen storm");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "storm failed: {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).expect("one JSON report")
}

#[test]
fn a_small_storm_reaches_full_membership_idles_and_survives_a_restart() {
    let r = storm(&[
        "--nodes",
        "4",
        "--settle-ms",
        "200",
        "--idle-ms",
        "2000",
        "--after-ms",
        "300",
    ]);
    assert_eq!(r["nodes"], 4);
    // No `--nice`: every node thread at this process's niceness.
    assert_eq!(r["nice"], Value::Null);
    // No `--node-sessions`: every node in this process's session.
    assert_eq!(r["nodes_leading_sessions"], 0, "{r:#}");
    let (lo, hi) = (&r["threads_nice"][0], &r["threads_nice"][1]);
    assert!(lo.is_i64() && lo == hi, "{r:#}");

    // Every node listed every other as a member, each at some time after the start.
    assert_eq!(r["startup"]["nodes_full"], 4, "{r:#}");
    let full = num(&r, "startup.full_membership_ms");
    assert!(full >= num(&r, "startup.per_node_ms.max") && full >= 0.0);
    // Then every node linked to every other (the idle window waits for it), no earlier than
    // each node's own last link, with its CPU over the start read.
    assert_eq!(r["startup"]["nodes_linked"], 4, "{r:#}");
    let linked = num(&r, "startup.all_linked_ms");
    assert!(linked >= num(&r, "startup.per_node_linked_ms.max") && linked >= 0.0);
    assert_eq!(num(&r, "startup.peers.min"), 3.0);
    // (A 4-node start may take under one clock tick of CPU: only its presence is checked.)
    assert!(num(&r, "startup.cpu_pct.min") >= 0.0 && num(&r, "startup.cpu_cores_peak") >= 0.0);
    // The machine's own CPU (every process) over the start, the idle window and the restart:
    // between idle and all its cores, the busiest period at least the average.
    for phase in ["startup", "idle", "restart"] {
        let cores = num(&r, &format!("{phase}.machine.cores"));
        let (mean, peak) = (
            num(&r, &format!("{phase}.machine.busy_mean")),
            num(&r, &format!("{phase}.machine.busy_peak")),
        );
        assert!(cores >= 1.0, "{phase}: {r:#}");
        assert!((0.0..=cores + 1e-9).contains(&mean), "{phase}: {r:#}");
        assert!((0.0..=cores + 1e-9).contains(&peak), "{phase}: {r:#}");
        assert!(peak + 1e-9 >= mean, "{phase}: {r:#}");
        // Both bystanders (a thread in the nodes' session, a process in a session of its
        // own) ran through every phase (the idle window alone is 2 s of 20 ms sleeps), and
        // their 0.5 ms of CPU never took less wall time than that.
        for who in ["bystander", "bystander_apart"] {
            let b = &r[phase][who];
            assert!(num(b, "rounds") >= 1.0, "{phase} {who}: {r:#}");
            assert!(num(b, "work_ms.p50") >= 0.5, "{phase} {who}: {r:#}");
            assert!(
                num(b, "work_ms.max") >= num(b, "work_ms.p90"),
                "{phase} {who}: {r:#}"
            );
            assert!(num(b, "woke_late_ms.p50") >= 0.0, "{phase} {who}: {r:#}");
        }
    }
    assert!(
        r["autogroup"].is_boolean() || r["autogroup"].is_null(),
        "{r:#}"
    );
    // Every node received frames over the start (announces, records, heartbeats).
    assert!(num(&r, "startup.frames_in.min") > 0.0, "{r:#}");

    // Multicast scouting built the full mesh, which stayed up and carried no data.
    let idle = &r["idle"];
    assert_eq!(num(idle, "peers.min"), 3.0, "{idle:#}");
    assert_eq!(num(idle, "peers.max"), 3.0);
    assert_eq!(idle["links_closed"], 0);
    assert_eq!(idle["data_frames"], 0);
    // Heartbeats and membership refreshes at least: an idle link is not silent.
    let frames = num(idle, "frames_in");
    assert!(frames > 0.0 && num(idle, "bytes_in") > 0.0 && num(idle, "bytes_out") > 0.0);
    // The rates are the window's counts: per node per s × nodes × window = the total (each
    // node's window differs by its answer's delay), per peer = per node / 3 peers.
    let from_rates = num(idle, "frames_per_s.mean") * 4.0 * num(idle, "window_s");
    assert!(
        (from_rates - frames).abs() <= 0.2 * frames,
        "rates {from_rates} against {frames} frames: {idle:#}"
    );
    let per_peer = num(idle, "frames_per_peer_s.mean") * 3.0;
    assert!((per_peer - num(idle, "frames_per_s.mean")).abs() < 1e-6 * (1.0 + per_peer));
    // Sent and received bytes of the mesh agree but for frames in flight at the ends.
    let (bin, bout) = (num(idle, "bytes_in"), num(idle, "bytes_out"));
    assert!((bin - bout).abs() <= 0.2 * bin, "{bin} in, {bout} out");
    assert!(num(idle, "cpu_pct.min") >= 0.0);

    // The restarted node came back as a new process with a new id, and every node (it too)
    // had full membership again: the old id gone, the new one listed.
    let x = &r["restart"];
    assert_eq!(x["node"], 3);
    assert_ne!(x["old_id"], x["new_id"]);
    assert!(num(x, "full_membership_ms") >= 0.0, "{x:#}");
    assert!(num(x, "new_node_full_ms") >= 0.0);
    assert!(num(x, "frames_per_s_peak_node") >= num(x, "frames_per_s_peak_mean"));
    assert!(num(x, "frames_per_s_window_mean") > 0.0);
}

/// `--nice N` runs every node's executors at niceness N (the node's `nice` setting); a node
/// process's main thread keeps this process's niceness. `--node-sessions` starts every node
/// process (the restarted one too) in a session of its own.
#[test]
fn nice_and_node_sessions_reach_every_node_process() {
    let r = storm(&[
        "--nodes",
        "2",
        "--nice",
        "7",
        "--node-sessions",
        "--no-restart",
        "--settle-ms",
        "0",
        "--idle-ms",
        "200",
    ]);
    assert_eq!(r["nice"], 7, "{r:#}");
    assert_eq!(r["threads_nice"][1], 7, "{r:#}");
    let mine = {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let rest = stat[stat.rfind(')').unwrap() + 2..].to_owned();
        rest.split(' ').nth(16).unwrap().parse::<i64>().unwrap()
    };
    assert_eq!(r["threads_nice"][0], mine.min(7), "{r:#}");
    assert_eq!(r["nodes_leading_sessions"], 2, "{r:#}");
}

/// The storm's bystander apart leads a session of its own (what makes it a program elsewhere
/// on the host, not one of the storm's), writes its rounds, and ends once the storm is gone
/// (its pipe closed), so a killed storm leaves no process behind.
#[test]
fn the_bystander_apart_leads_its_own_session_and_ends_with_its_pipe() {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(BIN)
        .arg("storm-bystander")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run shoal-loadgen storm-bystander");
    let mut lines = BufReader::new(child.stdout.take().expect("piped"))
        .lines()
        .map(|l| l.expect("a line"));
    assert_eq!(
        lines.next().as_deref(),
        Some(format!("session {}", child.id()).as_str()),
        "its session's id is its own pid: it leads a new session"
    );
    // This test's session is another one.
    // SAFETY: getsid(0) reads the calling process's session id and touches no memory.
    let ours = unsafe { libc::getsid(0) };
    assert_ne!(ours as u32, child.id());
    for _ in 0..2 {
        let l = lines.next().expect("a round");
        let f: Vec<u64> = l
            .strip_prefix("tick ")
            .unwrap_or_else(|| panic!("{l}"))
            .split(' ')
            .map(|x| x.parse().expect("ns"))
            .collect();
        assert_eq!(f.len(), 3, "{l}");
        assert!(
            f[2] >= 500_000,
            "its work takes at least its 0.5 ms of CPU: {l}"
        );
    }
    drop(lines);
    // Its next write fails: it exits by itself (no kill here).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            assert!(st.success(), "{st}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running 60 s after its pipe closed"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A directory where this test may make a cgroup of the `cpu` controller and give it a quota
/// (a v1 hierarchy with `cpu`, or a v2 tree offering it, handed to its children), found and
/// set up as the storm does; `None` where there is none or this process may not (not root).
fn cpu_cgroup_root() -> Option<std::path::PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let fields: Vec<Vec<&str>> = mounts
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let v1 = fields
        .iter()
        .find(|f| f.len() >= 4 && f[2] == "cgroup" && f[3].split(',').any(|o| o == "cpu"));
    let (root, quota_file, quota) = match v1 {
        Some(f) => (std::path::PathBuf::from(f[1]), "cpu.cfs_quota_us", "50000"),
        None => {
            let root = fields
                .iter()
                .filter(|f| f.len() >= 3 && f[2] == "cgroup2")
                .map(|f| std::path::PathBuf::from(f[1]))
                .find(|r| {
                    std::fs::read_to_string(r.join("cgroup.controllers"))
                        .is_ok_and(|c| c.split_whitespace().any(|x| x == "cpu"))
                })?;
            std::fs::write(root.join("cgroup.subtree_control"), "+cpu").ok()?;
            (root, "cpu.max", "50000 100000")
        }
    };
    let probe = root.join(format!("shoal-storm-test-{}", std::process::id()));
    std::fs::create_dir(&probe).ok()?;
    let quota_ok = std::fs::write(probe.join(quota_file), quota).is_ok();
    std::fs::remove_dir(&probe).ok()?;
    quota_ok.then_some(root)
}

/// `--cpu-max CORES` runs every node process (the restarted one too) in a cgroup of the
/// run's own with that CPU quota, and removes the group when the run ends. Where this host
/// lets no test make a cgroup (not root, no `cpu` controller) there is nothing to check.
#[test]
fn a_cpu_cap_holds_every_node_process_and_goes_with_the_run() {
    let Some(root) = cpu_cgroup_root() else {
        eprintln!("no cgroup of the cpu controller can be made here: nothing to check");
        return;
    };
    let r = storm(&[
        "--nodes",
        "3",
        "--cpu-max",
        "0.5",
        "--settle-ms",
        "0",
        "--idle-ms",
        "200",
        "--after-ms",
        "100",
    ]);
    assert_eq!(r["cpu_max"], 0.5, "{r:#}");
    assert_eq!(r["nodes_capped"], 3, "{r:#}");
    assert_eq!(r["startup"]["nodes_full"], 3, "{r:#}");
    assert!(
        r["restart"]["full_membership_ms"].is_number(),
        "the restarted node, capped too, came back: {r:#}"
    );
    let left: Vec<_> = std::fs::read_dir(&root)
        .expect("the hierarchy")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("shoal-storm-") && !n.starts_with("shoal-storm-test-"))
        .collect();
    assert!(left.is_empty(), "groups left behind: {left:?}");

    // Without the flag no group is made.
    let r = storm(&[
        "--nodes",
        "2",
        "--no-restart",
        "--settle-ms",
        "0",
        "--idle-ms",
        "100",
    ]);
    assert_eq!(r["cpu_max"], serde_json::Value::Null, "{r:#}");
    assert_eq!(r["nodes_capped"], 0, "{r:#}");
}
