//! io_uring rings and `RLIMIT_MEMLOCK`, checked in child processes (the limit and the
//! user are per process). On this kernel (6.18) rings are charged to the limit for
//! unprivileged users and not for root (`CAP_IPC_LOCK`), so the children drop to
//! `nobody` when the test runs as root.

use std::os::unix::process::CommandExt;
use std::process::Command;

use shoal_runtime::{memlock, Runtime, RuntimeError};

const NOBODY: u32 = 65534;
const EIGHT_MIB: u64 = 8 * 1024 * 1024;

/// Runs the `child` test below in a new process with `limit` and (if root) as nobody.
fn run_child(limit: u64, nodes: usize, shards: usize, as_nobody: bool) -> String {
    let drop_to_nobody = as_nobody && memlock_is_root();
    let mut exe = std::env::current_exe().unwrap();
    // The build directory may sit under a path `nobody` cannot traverse (e.g. /root), so
    // the unprivileged child runs a copy of this test binary from a world-readable dir.
    let copy_dir =
        std::env::temp_dir().join(format!("shoal-memlock-{}-{limit}", std::process::id()));
    if drop_to_nobody {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(&copy_dir).unwrap();
        std::fs::set_permissions(&copy_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let copy = copy_dir.join("memlock-child");
        std::fs::copy(&exe, &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
        exe = copy;
    }
    let mut cmd = Command::new(&exe);
    cmd.args([
        "--ignored",
        "--exact",
        "child",
        "--nocapture",
        "--test-threads=1",
    ])
    .current_dir("/")
    .env("SHOAL_MEMLOCK_CHILD", format!("{limit} {nodes} {shards}"));
    if drop_to_nobody {
        cmd.uid(NOBODY).gid(NOBODY);
    }
    // A copy just written may still be open for writing in a child that another test thread
    // forked meanwhile (until that child execs): exec then fails with ETXTBSY. It passes as
    // soon as that child has exec'd, so try again.
    let mut tries = 0;
    let out = loop {
        match cmd.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => break r.expect("spawn child test process"),
        }
    };
    if drop_to_nobody {
        let _ = std::fs::remove_dir_all(&copy_dir);
    }
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn memlock_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .is_some_and(|l| l.split_whitespace().nth(2) == Some("0"))
}

#[test]
fn twelve_executors_start_under_default_8mib_as_root_and_as_nobody() {
    for as_nobody in [false, true] {
        let out = run_child(EIGHT_MIB, 4, 2, as_nobody);
        assert!(
            out.contains("CHILD-OK executors=12"),
            "as_nobody={as_nobody}: {out}"
        );
    }
}

#[test]
fn tiny_limit_is_a_typed_error_naming_the_limit() {
    let out = run_child(4096, 1, 1, true);
    assert!(out.contains("CHILD-MEMLOCK soft=4096"), "{out}");
}

/// Child side; does nothing unless started by `run_child`.
#[test]
#[ignore = "started in a child process by the other tests"]
fn child() {
    let Ok(spec) = std::env::var("SHOAL_MEMLOCK_CHILD") else {
        return;
    };
    let v: Vec<u64> = spec.split(' ').map(|s| s.parse().unwrap()).collect();
    let (limit, nodes, shards) = (v[0], v[1] as usize, v[2] as usize);
    let lim = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: setrlimit reads one valid `rlimit`; lowering a limit is always permitted.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) }, 0);
    assert_eq!(memlock::memlock_limit().unwrap(), (limit, limit));
    let mut runtimes = Vec::new();
    for n in 0..nodes {
        match Runtime::builder()
            .name(format!("node{n}"))
            .shards(shards)
            .build()
        {
            Ok(rt) => runtimes.push(rt),
            Err(RuntimeError::MemlockLimit {
                soft_limit,
                hard_limit,
                ..
            }) => {
                println!("CHILD-MEMLOCK soft={soft_limit} hard={hard_limit}");
                return;
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    // Every executor answers.
    for rt in &runtimes {
        for id in rt.executors() {
            let h = rt
                .spawn_on(id, || async { shoal_runtime::current_executor() })
                .unwrap();
            assert_eq!(h.join_blocking().unwrap(), Some(id));
        }
    }
    println!("CHILD-OK executors={}", nodes * (shards + 1));
    for rt in runtimes {
        rt.join().unwrap();
    }
}
