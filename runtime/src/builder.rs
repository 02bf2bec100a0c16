//! [`Builder`]: how many executors, where they run, how they wait.
//!
//! **Owns:** the runtime's settings and their checks. **Must not touch:** starting the
//! executors: [`Builder::build`] hands the checked settings to the executor module, which
//! defines it there so that this file imports nothing above it.

use std::time::Duration;

use crate::error::RuntimeError;

/// Where the data-plane shards run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Placement {
    /// Let the kernel schedule the threads (tests, several nodes in one process).
    #[default]
    Unpinned,
    /// Shard `i` is pinned to `cpus[i % cpus.len()]`.
    Pinned(Vec<usize>),
}

/// Where the control-plane executor runs. It always has its own thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ControlPlacement {
    /// Let the kernel schedule the thread.
    #[default]
    Unpinned,
    /// Pin the control-plane thread to this CPU.
    Pinned(usize),
}

/// io_uring setup flags of every executor's ring (`io_uring_setup(2)`).
///
/// They change where the kernel runs the work that turns a finished socket operation into a
/// completion: at once through an inter-processor interrupt to the executor's CPU (no flag),
/// at the executor's next system call (`coop_taskrun`), or only when the executor asks for
/// completions (`defer_taskrun`). Every Shoal executor submits and reaps its ring from its
/// own thread only (cross-thread wakes write an eventfd the ring polls), which is what
/// `single_issuer` and `defer_taskrun` require. Measurements: `bench/notes/ring.md`.
///
/// The kernel is the judge of what it supports: flags set with [`Builder::ring_flags`] that
/// it refuses (an older kernel, or `taskrun_flag` without `coop_taskrun` or `defer_taskrun`)
/// fail [`Builder::build`](crate::Builder::build) with [`RuntimeError::RingFlagsRefused`];
/// the defaults ([`RingFlags::DEFAULT`]) give way to [`RingFlags::NONE`] with a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RingFlags {
    /// `IORING_SETUP_SINGLE_ISSUER` (Linux 6.0): only the thread that created the ring submits
    /// to it, so the kernel skips the locking for concurrent submitters.
    pub single_issuer: bool,
    /// `IORING_SETUP_DEFER_TASKRUN` (Linux 6.1; needs `single_issuer`): completion work waits
    /// until the executor enters the kernel to reap, so it never interrupts a running task.
    pub defer_taskrun: bool,
    /// `IORING_SETUP_COOP_TASKRUN` (Linux 5.19): completion work runs at the executor's next
    /// system call instead of interrupting it.
    pub coop_taskrun: bool,
    /// `IORING_SETUP_TASKRUN_FLAG` (Linux 5.19; needs `coop_taskrun` or `defer_taskrun`): the
    /// kernel flags pending completion work in the shared ring, so a poll that would not wait
    /// still asks for it.
    pub taskrun_flag: bool,
}

impl RingFlags {
    /// No setup flag: the kernel's defaults.
    pub const NONE: Self = Self {
        single_issuer: false,
        defer_taskrun: false,
        coop_taskrun: false,
        taskrun_flag: false,
    };
    /// `SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG`.
    pub const DEFERRED: Self = Self {
        single_issuer: true,
        defer_taskrun: true,
        coop_taskrun: false,
        taskrun_flag: true,
    };
    /// What a runtime uses unless told otherwise: [`RingFlags::DEFERRED`] (measured faster
    /// in `bench/notes/ring.md`). On a kernel that refuses them (before 6.1) the runtime
    /// starts without them and logs a warning.
    pub const DEFAULT: Self = Self::DEFERRED;
    /// `COOP_TASKRUN | TASKRUN_FLAG`.
    pub const COOP: Self = Self {
        single_issuer: false,
        defer_taskrun: false,
        coop_taskrun: true,
        taskrun_flag: true,
    };
}

impl std::fmt::Display for RingFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = [
            (self.single_issuer, "SINGLE_ISSUER"),
            (self.defer_taskrun, "DEFER_TASKRUN"),
            (self.coop_taskrun, "COOP_TASKRUN"),
            (self.taskrun_flag, "TASKRUN_FLAG"),
        ];
        let mut any = false;
        for (_, name) in names.iter().filter(|(on, _)| *on) {
            if any {
                f.write_str("|")?;
            }
            f.write_str(name)?;
            any = true;
        }
        if !any {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// The ring flags a [`Builder`] holds: the defaults, which give way on a kernel that refuses
/// them, or flags the user set, which do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum RingSetting {
    #[default]
    Default,
    Given(RingFlags),
}

impl RingSetting {
    pub(crate) fn flags(self) -> RingFlags {
        match self {
            Self::Default => RingFlags::DEFAULT,
            Self::Given(f) => f,
        }
    }
}

/// Configures and starts a [`Runtime`](crate::Runtime). Obtain one with
/// [`Runtime::builder`](crate::Runtime::builder).
#[derive(Debug, Clone)]
pub struct Builder {
    pub(crate) name: String,
    pub(crate) shards: usize,
    pub(crate) placement: Placement,
    pub(crate) control: ControlPlacement,
    pub(crate) spin: Duration,
    pub(crate) ring_entries: u32,
    pub(crate) ring_flags: RingSetting,
    pub(crate) spawn_queue: usize,
    pub(crate) nice: Option<i32>,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            name: "shoal".to_owned(),
            shards: 1,
            placement: Placement::Unpinned,
            control: ControlPlacement::Unpinned,
            spin: Duration::ZERO,
            ring_entries: 256,
            ring_flags: RingSetting::Default,
            spawn_queue: 1024,
            nice: None,
        }
    }
}

impl Builder {
    /// Prefix of the executor thread names (`<name>-shard-<i>`, `<name>-control`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Number of data-plane shards (at least 1). Default 1.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// CPU placement of the data-plane shards. Default unpinned.
    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// CPU placement of the control-plane executor. Default unpinned.
    pub fn control_placement(mut self, placement: ControlPlacement) -> Self {
        self.control = placement;
        self
    }

    /// Busy-poll for up to `spin` after the last piece of work before parking in the
    /// kernel. Zero (the default) parks at once.
    ///
    /// Spinning trades CPU for latency: a parked executor needs a syscall and a
    /// scheduler wake-up (tens of µs) to notice new work, a spinning one notices it on
    /// its next loop iteration. A spinning executor burns its core for `spin` after every
    /// burst of work, though it yields the core to any other runnable thread between its
    /// polls (so it does not starve the thread it is waiting for when threads outnumber
    /// cores). Measured numbers are in `bench/notes/runtime.md` ("Spin before park").
    pub fn spin_before_park(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// io_uring submission-queue entries per executor (power of two, 1..=32768).
    /// Default 256. Ring memory may be charged to `RLIMIT_MEMLOCK` on older kernels.
    pub fn ring_entries(mut self, entries: u32) -> Self {
        self.ring_entries = entries;
        self
    }

    /// io_uring setup flags of every executor's ring. Default [`RingFlags::DEFAULT`], which
    /// a kernel too old for it replaces by [`RingFlags::NONE`] (logged); flags set here are
    /// used as given, and [`Builder::build`](crate::Builder::build) fails with
    /// [`RuntimeError::RingFlagsRefused`] if the kernel refuses them.
    pub fn ring_flags(mut self, flags: RingFlags) -> Self {
        self.ring_flags = RingSetting::Given(flags);
        self
    }

    /// Ceiling of each executor's cross-thread spawn queue. Default 1024.
    pub fn spawn_queue(mut self, capacity: usize) -> Self {
        self.spawn_queue = capacity;
        self
    }

    /// Niceness of every executor thread (-20..=19; Linux keeps it per thread). Default
    /// `None`: each inherits the niceness of the thread that builds the runtime. A positive
    /// value makes the executors yield the CPU to the host's other programs when every core
    /// is busy, and costs nothing when one is free (measured with many nodes on one host in
    /// `tuning/README.md`). Raising priority (negative) needs `CAP_SYS_NICE`; refused, it
    /// fails [`Builder::build`](crate::Builder::build) with [`RuntimeError::Nice`].
    pub fn nice(mut self, nice: i32) -> Self {
        self.nice = Some(nice);
        self
    }

    /// The settings a runtime cannot start with, as [`RuntimeError::Config`].
    pub(crate) fn check(&self) -> Result<(), RuntimeError> {
        if self.shards == 0 {
            return Err(RuntimeError::Config(
                "at least one shard is required".into(),
            ));
        }
        if !self.ring_entries.is_power_of_two() || self.ring_entries > 32768 {
            return Err(RuntimeError::Config(format!(
                "ring_entries must be a power of two in 1..=32768, got {}",
                self.ring_entries
            )));
        }
        let flags = self.ring_flags.flags();
        if flags.defer_taskrun && !flags.single_issuer {
            // compio would drop DEFER_TASKRUN without a word; the kernel refuses it too.
            return Err(RuntimeError::Config(
                "ring flag DEFER_TASKRUN needs SINGLE_ISSUER".into(),
            ));
        }
        if matches!(&self.placement, Placement::Pinned(cpus) if cpus.is_empty()) {
            return Err(RuntimeError::Config(
                "Placement::Pinned needs at least one CPU".into(),
            ));
        }
        if let Some(n) = self.nice.filter(|n| !(-20..=19).contains(n)) {
            return Err(RuntimeError::Config(format!(
                "nice must be in -20..=19, got {n}"
            )));
        }
        Ok(())
    }
}
