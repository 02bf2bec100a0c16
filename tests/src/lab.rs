//! [`Lab`]: the project's own network lab. Several test hosts on one Linux machine, each a
//! network namespace with one interface on a shared bridge, with multicast between them and
//! faults on demand (random loss, fixed delay, a cable pulled and plugged back). It drives
//! `ip` and `tc` (iproute2) and needs root; [`Lab::skip_reason`] says why it cannot run.
//!
//! ```text
//!   shoal-<p>-<pid>-h1 [mt0 10.77.0.1/24] --veth-- p1 \
//!   shoal-<p>-<pid>-h2 [mt0 10.77.0.2/24] --veth-- p2  }- br0   in shoal-<p>-<pid>-sw
//!   shoal-<p>-<pid>-hN [mt0 10.77.0.N/24] --veth-- pN /
//! ```
//!
//! - Namespace names carry the test's prefix and the process id, so labs of parallel tests
//!   (and of other checkouts running theirs) never meet; a lab whose process is gone is
//!   removed by the next [`Lab::up`] of the same prefix.
//! - The bridge floods multicast (IGMP snooping off: no querier runs here, so snooped state
//!   could go stale across a cut), has no address and no uplink: the lab never reaches the
//!   machine's own network, and nothing is changed in the root namespace. IPv6 is off in every
//!   lab namespace, so the only traffic is the tests'. Each host routes 224.0.0.0/4 to `mt0`,
//!   so a socket joining or sending a group without naming an interface works too.
//! - **Loss**: a classic BPF filter on the host's `mt0` (a `clsact` qdisc, egress and ingress)
//!   drops a packet when the kernel's per-packet random number is below the rate. It needs
//!   `cls_bpf` only, which every distribution kernel has (`sch_netem` is often missing:
//!   minimal VM kernels have none).
//! - **Delay**: `sch_netem` where the kernel has it, on both ends of the host's veth; without
//!   it, a delay line (`lab/cable.rs`): the host's switch port leaves the bridge, and a thread of
//!   this process inside the switch namespace carries its frames to a veth pair on the bridge
//!   after the delay.
//! - **Block**: a filter like the loss's on two hosts' ingress, each matching the other's
//!   address: the path between them drops everything while both still reach the rest.
//! - **Cut**: the switch-side port goes down. The host sees no carrier but keeps its address
//!   and routes (taking `mt0` itself down would drop its routes); heal brings it up again.
//!   Both wait until the host's `mt0` shows the new state: the kernel applies carrier changes
//!   asynchronously, and traffic sent before that would be lost or leak through.
//!
//! Length: one object's plumbing (build and teardown, each an `ip`/`tc` command list), the
//! handle of the processes it starts and its error type; the faults are `lab/faults.rs`, the
//! delay line `lab/cable.rs`, the filters' BPF programs `lab/bpf.rs`.
//!
//! **Owns:** the lab's namespaces, interfaces, qdiscs and delay lines, and the processes it
//! starts in them. **Must not touch:** the root namespace (no interface, address, route or
//! setting there), or any namespace that is not its own.

mod bpf;
mod cable;
mod faults;

use bpf::{loss_program, source_data_drop_program, source_loss_program};
use cable::Cable;
use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

/// Every host's address is `SUBNET.k/24`.
const SUBNET: &str = "10.77.0";
/// The host-side interface: not `eth0`, so a command run in the wrong namespace by mistake
/// never touches the machine's own.
const HOST_IF: &str = "mt0";
/// How long a carrier change may take to show.
const CARRIER_WAIT: Duration = Duration::from_secs(5);

/// Why a lab operation failed.
#[derive(Debug)]
pub enum LabError {
    /// A tool could not be started.
    Spawn {
        /// The command line.
        command: String,
        /// Why.
        source: io::Error,
    },
    /// A tool ran and failed.
    Failed {
        /// The command line.
        command: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A host's interface did not reach the expected state in time.
    Carrier {
        /// The host.
        host: usize,
        /// The state waited for.
        want: &'static str,
        /// The state it was in.
        got: String,
    },
    /// Entering a namespace or opening a delay line failed.
    Io(io::Error),
}

impl fmt::Display for LabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LabError::Spawn { command, source } => write!(f, "cannot run `{command}`: {source}"),
            LabError::Failed { command, stderr } => {
                write!(f, "`{command}` failed: {}", stderr.trim())
            }
            LabError::Carrier { host, want, got } => {
                write!(f, "h{host}'s {HOST_IF} stayed {got}, expected {want}")
            }
            LabError::Io(e) => write!(f, "lab: {e}"),
        }
    }
}

impl std::error::Error for LabError {}

impl From<io::Error> for LabError {
    fn from(e: io::Error) -> LabError {
        LabError::Io(e)
    }
}

/// A network lab of `n` hosts, torn down when dropped (with every process still running in
/// it). Its methods panic with the failing command's message: they are test steps.
pub struct Lab {
    /// Namespace names are `{base}-h{k}` and `{base}-sw`.
    base: String,
    hosts: usize,
    ip: PathBuf,
    tc: PathBuf,
    /// Whether the kernel has `sch_netem` (probed at `up`).
    netem: bool,
    /// Running delay lines, by host.
    cables: Mutex<HashMap<usize, Cable>>,
}

/// A process started inside a lab host, killed when dropped. Its standard output is read
/// line by line on a background thread.
pub struct HostProcess {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Every line seen so far, for failure messages.
    pub transcript: Vec<String>,
}

/// Finds a system tool in `PATH` or in the sbin directories test shells often leave out.
fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Runs `program args`; its stdout, or the failure with its stderr.
fn run(program: &PathBuf, args: &[&str]) -> Result<String, LabError> {
    let command = format!("{} {}", program.display(), args.join(" "));
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| LabError::Spawn {
            command: command.clone(),
            source,
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(LabError::Failed {
            command,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// Moves the calling thread into network namespace `name` (only this thread: a process's
/// threads each have their own).
fn enter_netns(name: &str) -> io::Result<()> {
    let f = std::fs::File::open(format!("/run/netns/{name}"))?;
    // SAFETY: `f` is an open namespace file for the duration of the call.
    let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `f` on a thread inside network namespace `name`; its result.
fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> Result<T, LabError> {
    std::thread::scope(|s| {
        s.spawn(|| -> io::Result<T> {
            enter_netns(name)?;
            Ok(f())
        })
        .join()
        .map_err(|_| LabError::Io(io::Error::other("lab namespace thread panicked")))?
        .map_err(LabError::Io)
    })
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
        for t in ["ip", "tc"] {
            if tool(t).is_none() {
                return Some(format!(
                    "netlab tests need iproute2 (`{t}`), which is not installed"
                ));
            }
        }
        None
    }

    /// Creates a lab of `hosts` hosts for the test called `prefix` (short; unique among the
    /// tests that run at once). Panics with the failing command's output.
    pub fn up(prefix: &str, hosts: usize) -> Lab {
        assert!((1..=250).contains(&hosts), "1 to 250 hosts");
        let (ip, tc) = (
            tool("ip").expect("iproute2 `ip`"),
            tool("tc").expect("iproute2 `tc`"),
        );
        let mut lab = Lab {
            base: format!("shoal-{prefix}-{}", std::process::id()),
            hosts,
            ip,
            tc,
            netem: false,
            cables: Mutex::new(HashMap::new()),
        };
        lab.remove_stale(prefix);
        if let Err(e) = lab.build() {
            panic!("lab up {hosts}: {e}");
        }
        lab
    }

    /// Removes the labs of `prefix` left by processes that are gone (a killed test run).
    fn remove_stale(&self, prefix: &str) {
        let Ok(list) = run(&self.ip, &["netns", "list"]) else {
            return;
        };
        let start = format!("shoal-{prefix}-");
        for ns in list.lines().filter_map(|l| l.split_whitespace().next()) {
            let Some(rest) = ns.strip_prefix(&start) else {
                continue;
            };
            let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
            let ours = pid == Some(std::process::id());
            let gone = pid.is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists());
            if ours || gone {
                self.kill_all_in(ns);
                let _ = run(&self.ip, &["netns", "del", ns]);
            }
        }
    }

    fn host(&self, k: usize) -> String {
        assert!((1..=self.hosts).contains(&k), "no host h{k}");
        format!("{}-h{k}", self.base)
    }

    fn switch(&self) -> String {
        format!("{}-sw", self.base)
    }

    fn ip(&self, args: &[&str]) -> Result<String, LabError> {
        run(&self.ip, args)
    }

    fn tc(&self, args: &[&str]) -> Result<String, LabError> {
        run(&self.tc, args)
    }

    fn build(&mut self) -> Result<(), LabError> {
        let sw = self.switch();
        self.ip(&["netns", "add", &sw])?;
        self.quiet_ipv6(&sw)?;
        self.ip(&["-n", &sw, "link", "set", "lo", "up"])?;
        self.ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        self.ip(&[
            "-n",
            &sw,
            "link",
            "set",
            "br0",
            "type",
            "bridge",
            "mcast_snooping",
            "0",
            "stp_state",
            "0",
        ])?;
        self.ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        // Probed once: a netem qdisc on the switch's loopback, removed at once.
        self.netem = self
            .tc(&["-n", &sw, "qdisc", "add", "dev", "lo", "root", "netem"])
            .is_ok();
        if self.netem {
            self.tc(&["-n", &sw, "qdisc", "del", "dev", "lo", "root"])?;
        }
        for k in 1..=self.hosts {
            let (ns, port, addr) = (self.host(k), format!("p{k}"), self.cidr(k));
            let mac = format!("02:77:00:00:{:02x}:{:02x}", k >> 8, k & 0xff);
            self.ip(&["netns", "add", &ns])?;
            self.quiet_ipv6(&ns)?;
            self.ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            self.ip(&[
                "-n", &ns, "link", "add", HOST_IF, "address", &mac, "type", "veth", "peer", "name",
                &port, "netns", &sw,
            ])?;
            self.ip(&["-n", &sw, "link", "set", &port, "master", "br0"])?;
            self.ip(&["-n", &sw, "link", "set", &port, "up"])?;
            self.ip(&["-n", &ns, "addr", "add", &addr, "dev", HOST_IF])?;
            self.ip(&["-n", &ns, "link", "set", HOST_IF, "up"])?;
            self.ip(&["-n", &ns, "route", "add", "224.0.0.0/4", "dev", HOST_IF])?;
        }
        for k in 1..=self.hosts {
            self.wait_carrier(k, "UP")?;
        }
        Ok(())
    }

    /// Turns IPv6 off in namespace `ns` (no router solicitations, no MLD reports: the lab
    /// carries only what the tests send).
    fn quiet_ipv6(&self, ns: &str) -> Result<(), LabError> {
        in_netns(ns, || {
            for scope in ["all", "default"] {
                std::fs::write(format!("/proc/sys/net/ipv6/conf/{scope}/disable_ipv6"), "1")?;
            }
            Ok::<(), io::Error>(())
        })?
        .map_err(LabError::Io)
    }

    fn cidr(&self, k: usize) -> String {
        format!("{SUBNET}.{k}/24")
    }

    /// Host `k`'s `mt0` operational state (`UP`, `DOWN`, `LOWERLAYERDOWN`...).
    fn carrier(&self, k: usize) -> Result<String, LabError> {
        let out = self.ip(&["-n", &self.host(k), "-o", "link", "show", "dev", HOST_IF])?;
        Ok(out
            .split_whitespace()
            .skip_while(|w| *w != "state")
            .nth(1)
            .unwrap_or("UNKNOWN")
            .to_string())
    }

    fn wait_carrier(&self, k: usize, want: &'static str) -> Result<(), LabError> {
        let deadline = Instant::now() + CARRIER_WAIT;
        loop {
            let got = self.carrier(k)?;
            if got == want {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(LabError::Carrier { host: k, want, got });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Number of hosts.
    pub fn hosts(&self) -> usize {
        self.hosts
    }

    /// The IPv4 address of host `k` (1-based).
    pub fn addr(&self, k: usize) -> String {
        assert!((1..=self.hosts).contains(&k), "no host h{k}");
        format!("{SUBNET}.{k}")
    }

    /// Runs `f` on a thread inside host `k`'s network namespace (its sockets are the
    /// host's): for tests of the lab itself, and probes that need no program of their own.
    pub fn in_host<T: Send>(&self, k: usize, f: impl FnOnce() -> T + Send) -> T {
        in_netns(&self.host(k), f).unwrap_or_else(|e| panic!("h{k}: {e}"))
    }

    /// Starts `program args` inside host `k`, with its standard output captured (its
    /// standard error goes to the test's).
    pub fn spawn(&self, k: usize, program: &str, args: &[String]) -> HostProcess {
        let mut child = Command::new(&self.ip)
            .args(["netns", "exec", &self.host(k), program])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program} in h{k}: {e}"));
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

    /// Kills every process still running in namespace `ns`.
    fn kill_all_in(&self, ns: &str) {
        let Ok(pids) = self.ip(&["netns", "pids", ns]) else {
            return;
        };
        for pid in pids
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            if pid as u32 == std::process::id() {
                continue;
            }
            // SAFETY: plain system call on a pid the namespace listed.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    fn down(&mut self) {
        self.cables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let mut names: Vec<String> = (1..=self.hosts).map(|k| self.host(k)).collect();
        names.push(self.switch());
        for ns in &names {
            self.kill_all_in(ns);
        }
        for ns in &names {
            if let Err(e) = self.ip(&["netns", "del", ns]) {
                eprintln!("warning: lab teardown: {e}");
            }
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.down();
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
