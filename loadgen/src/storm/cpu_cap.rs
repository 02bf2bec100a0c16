//! A CPU cap on the storm's node processes: a cgroup of the kernel's `cpu` controller with a
//! quota of so many cores, which each node process joins before it starts its node (the
//! storm's `--cpu-max`). A service manager does the same for a unit (systemd's `CPUQuota=`,
//! a container runtime's `--cpus`), so a run measures what a start costs where a deployment
//! caps the nodes: the host keeps the rest of its cores, the start takes longer.
//!
//! **Owns:** the cgroup's life (made before the first node starts, removed once the run's
//! processes are gone). **Must not touch:** the node processes (each joins by itself,
//! `storm-node --cgroup-procs`) or the bystanders, which stay outside: they are the host's
//! other programs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The quota's period (the kernel's default, 100 ms): the nodes get `cores` times this much
/// CPU time in each period.
const PERIOD_US: u64 = 100_000;

/// How long the removal waits for the group to empty (its processes were waited for; the
/// kernel may take a moment to let the group go).
const REMOVE_WAIT: Duration = Duration::from_secs(2);

/// Why the cap could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CapError {
    /// Not a positive number of cores.
    #[error("--cpu-max must be a positive number of cores, not {0}")]
    Cores(f64),
    /// No hierarchy of the `cpu` controller is mounted.
    #[error("no cgroup hierarchy with the cpu controller is mounted (/proc/self/mounts)")]
    NoController,
    /// The group could not be made or given its quota (usually: not root).
    #[error("cannot set up the cgroup {path}: {source}")]
    Setup {
        /// The file or directory that failed.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Where the `cpu` controller is mounted, and how its quota is written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hierarchy {
    /// cgroup v1: `cpu.cfs_period_us` and `cpu.cfs_quota_us`.
    V1(PathBuf),
    /// cgroup v2: `cpu.max`, once the root hands the controller to its children.
    V2(PathBuf),
}

/// Finds the `cpu` controller in a `/proc/self/mounts` text: a v1 hierarchy that has it (on a
/// hybrid host the v2 tree then has no `cpu`), else the v2 tree if `controllers` (its
/// `cgroup.controllers`, read by the caller) lists it.
fn find(mounts: &str, controllers: impl Fn(&Path) -> Option<String>) -> Option<Hierarchy> {
    let fields = || {
        mounts
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
    };
    let v1 =
        fields().find(|f| f.len() >= 4 && f[2] == "cgroup" && f[3].split(',').any(|o| o == "cpu"));
    if let Some(f) = v1 {
        return Some(Hierarchy::V1(PathBuf::from(f[1])));
    }
    fields()
        .filter(|f| f.len() >= 3 && f[2] == "cgroup2")
        .map(|f| PathBuf::from(f[1]))
        .find(|root| controllers(root).is_some_and(|c| c.split_whitespace().any(|x| x == "cpu")))
        .map(Hierarchy::V2)
}

/// The quota per [`PERIOD_US`] of `cores` cores, in microseconds (at least the kernel's
/// least quota, 1 ms).
fn quota_us(cores: f64) -> u64 {
    ((cores * PERIOD_US as f64).round() as u64).max(1_000)
}

/// Whether a `/proc/PID/cgroup` text puts the process in the group `name` (a direct child of
/// a hierarchy's root, as [`CpuCap`] makes it).
fn lists_group(proc_cgroup: &str, name: &str) -> bool {
    let want = format!("/{name}");
    proc_cgroup
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .any(|path| path == want)
}

/// A cgroup capping the CPU of the processes that join it; removed when dropped.
#[derive(Debug)]
pub(crate) struct CpuCap {
    dir: PathBuf,
    name: String,
    cores: f64,
}

impl CpuCap {
    /// Makes a group of its own for this run (named after this process) with a quota of
    /// `cores` cores.
    pub(crate) fn new(cores: f64) -> Result<CpuCap, CapError> {
        if !(cores.is_finite() && cores > 0.0) {
            return Err(CapError::Cores(cores));
        }
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let hierarchy = find(&mounts, |root| {
            std::fs::read_to_string(root.join("cgroup.controllers")).ok()
        })
        .ok_or(CapError::NoController)?;
        let name = format!("shoal-storm-{}", std::process::id());
        let setup = |path: PathBuf, r: std::io::Result<()>| {
            r.map_err(|source| CapError::Setup { path, source })
        };
        let root = match &hierarchy {
            Hierarchy::V1(root) | Hierarchy::V2(root) => root.clone(),
        };
        if let Hierarchy::V2(_) = hierarchy {
            let f = root.join("cgroup.subtree_control");
            setup(f.clone(), std::fs::write(&f, "+cpu"))?;
        }
        let dir = root.join(&name);
        setup(dir.clone(), std::fs::create_dir(&dir))?;
        // From here on the group is removed when `cap` goes, also if its quota fails.
        let cap = CpuCap { dir, name, cores };
        let quota = quota_us(cores);
        let writes = match hierarchy {
            Hierarchy::V1(_) => vec![
                ("cpu.cfs_period_us", PERIOD_US.to_string()),
                ("cpu.cfs_quota_us", quota.to_string()),
            ],
            Hierarchy::V2(_) => vec![("cpu.max", format!("{quota} {PERIOD_US}"))],
        };
        for (file, value) in writes {
            let f = cap.dir.join(file);
            setup(f.clone(), std::fs::write(&f, value))?;
        }
        Ok(cap)
    }

    /// The file a process joins the group through (its pid written there).
    pub(crate) fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// The cores the group may use.
    pub(crate) fn cores(&self) -> f64 {
        self.cores
    }

    /// Whether process `pid` is in the group (`/proc/PID/cgroup`).
    pub(crate) fn holds(&self, pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .is_ok_and(|s| lists_group(&s, &self.name))
    }
}

impl Drop for CpuCap {
    fn drop(&mut self) {
        let end = Instant::now() + REMOVE_WAIT;
        loop {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(e) if Instant::now() >= end => {
                    eprintln!("storm: could not remove {}: {e}", self.dir.display());
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v1_cpu_hierarchy_is_found_before_a_v2_tree_without_the_controller() {
        let hybrid = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
            cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0\n\
            cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n\
            cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
        let none = |_: &Path| Some(String::new());
        assert_eq!(
            find(hybrid, none),
            Some(Hierarchy::V1("/sys/fs/cgroup/cpu".into()))
        );
        let joint = "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n";
        assert_eq!(
            find(joint, none),
            Some(Hierarchy::V1("/sys/fs/cgroup/cpu,cpuacct".into()))
        );
    }

    #[test]
    fn a_v2_tree_counts_only_if_it_offers_the_cpu_controller() {
        let unified = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n";
        let offers = |c: &'static str| move |_: &Path| Some(c.to_string());
        assert_eq!(
            find(unified, offers("cpuset cpu io memory pids")),
            Some(Hierarchy::V2("/sys/fs/cgroup".into()))
        );
        assert_eq!(find(unified, offers("cpuset io memory")), None);
        assert_eq!(find(unified, |_: &Path| None), None);
        assert_eq!(find("proc /proc proc rw 0 0\n", offers("cpu")), None);
    }

    #[test]
    fn the_quota_is_the_cores_share_of_the_period() {
        assert_eq!(quota_us(1.5), 150_000);
        assert_eq!(quota_us(0.25), 25_000);
        assert_eq!(quota_us(0.000_1), 1_000, "never below the kernel's least");
    }

    #[test]
    fn a_process_is_in_the_group_only_at_its_exact_path() {
        let v1 = "12:cpu:/shoal-storm-7\n11:memory:/user.slice\n";
        assert!(lists_group(v1, "shoal-storm-7"));
        assert!(!lists_group(v1, "shoal-storm-70"));
        assert!(!lists_group("0::/shoal-storm-7/inner\n", "shoal-storm-7"));
        assert!(lists_group("0::/shoal-storm-7\n", "shoal-storm-7"));
    }
}
