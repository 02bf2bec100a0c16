//! Typed errors of the runtime. None of them carries a compio type.

use std::io;

use crate::id::ExecutorId;

/// Why a [`Runtime`](crate::Runtime) could not be built or did not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The builder was given an impossible configuration.
    #[error("invalid runtime configuration: {0}")]
    Config(String),
    /// `RLIMIT_MEMLOCK` is too small for the io_uring rings of all executors.
    #[error(
        "RLIMIT_MEMLOCK is too low for {executor}'s io_uring ring: soft limit {soft_limit} bytes \
         (hard {hard_limit}); raise it with `ulimit -l` / `prlimit --memlock` or reduce \
         executors / ring entries ({source})"
    )]
    MemlockLimit {
        /// The executor whose ring could not be created.
        executor: ExecutorId,
        /// Soft `RLIMIT_MEMLOCK` in bytes at the time of the failure (`u64::MAX` = unlimited).
        soft_limit: u64,
        /// Hard `RLIMIT_MEMLOCK` in bytes.
        hard_limit: u64,
        /// The error `io_uring_setup` returned.
        source: io::Error,
    },
    /// The kernel refused the ring's setup flags (`EINVAL` from `io_uring_setup`): a kernel
    /// older than the flags, or a combination it does not accept.
    #[error(
        "{executor}: the kernel refused io_uring setup flags {flags} ({source}); \
         run with ring flags none or a combination this kernel supports"
    )]
    RingFlagsRefused {
        /// The executor whose ring could not be created.
        executor: ExecutorId,
        /// The flags that were asked for.
        flags: crate::builder::RingFlags,
        /// The error `io_uring_setup` returned.
        source: io::Error,
    },
    /// Creating an executor's io_uring instance failed for another reason.
    #[error("{executor}: io_uring setup failed: {source}")]
    RingSetup {
        /// The executor whose ring could not be created.
        executor: ExecutorId,
        /// The underlying error.
        source: io::Error,
    },
    /// Pinning an executor thread to its CPU failed.
    #[error("{executor}: pinning to CPU {cpu} failed: {source}")]
    Pin {
        /// The executor that could not be pinned.
        executor: ExecutorId,
        /// The CPU it was to run on.
        cpu: usize,
        /// The error `sched_setaffinity` returned.
        source: io::Error,
    },
    /// Setting an executor thread's niceness failed (a negative one without
    /// `CAP_SYS_NICE`).
    #[error("{executor}: setting niceness {nice} failed: {source}")]
    Nice {
        /// The executor whose niceness could not be set.
        executor: ExecutorId,
        /// The niceness asked for.
        nice: i32,
        /// The error `setpriority` returned.
        source: io::Error,
    },
    /// Spawning an executor thread failed.
    #[error("{executor}: spawning the thread failed: {source}")]
    Thread {
        /// The executor whose thread could not be spawned.
        executor: ExecutorId,
        /// The underlying error.
        source: io::Error,
    },
    /// An executor panicked; its tasks were dropped and its channels closed.
    #[error("{executor} panicked: {message}")]
    ExecutorPanicked {
        /// The executor that panicked.
        executor: ExecutorId,
        /// The panic message (the payload if it was a string).
        message: String,
    },
}

/// Why a task could not be handed to an executor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnError {
    /// The runtime has no such executor.
    #[error("no executor {0} in this runtime")]
    NoSuchExecutor(ExecutorId),
    /// The executor's spawn queue is at its configured ceiling.
    #[error("{0}: spawn queue full")]
    QueueFull(ExecutorId),
    /// The executor has stopped (shutdown or panic).
    #[error("{0} has stopped")]
    Stopped(ExecutorId),
    /// `spawn_local` was called on a thread that is not a Shoal executor.
    #[error("not on a Shoal executor thread")]
    NotOnExecutor,
}

/// Why a spawned task produced no value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    /// The task panicked; the executor it ran on stops (fail-stop per shard).
    #[error("task panicked: {0}")]
    Panicked(String),
    /// The task was dropped before finishing (executor stopped or panicked).
    #[error("task was cancelled before it finished")]
    Cancelled,
}

/// Returned by a non-blocking send: says why and gives the message back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrySendError<T> {
    /// The queue is at capacity; retry later or use an awaiting send.
    #[error("channel full")]
    Full(T),
    /// The receiving side is gone; the message can never be delivered.
    #[error("channel closed")]
    Closed(T),
}

impl<T> TrySendError<T> {
    /// Takes back the message that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            Self::Full(v) | Self::Closed(v) => v,
        }
    }
}

/// Returned by an awaiting or blocking send when the receiver is gone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("channel closed")]
pub struct SendError<T>(pub T);

/// Returned by a receive when every sender is gone and the queue is drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("channel closed")]
pub struct Closed;

/// Returned by a non-blocking receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TryRecvError {
    /// Nothing queued right now.
    #[error("channel empty")]
    Empty,
    /// Every sender is gone and the queue is drained.
    #[error("channel closed")]
    Closed,
}

/// Returned by [`timeout`](crate::time::timeout) when the deadline passed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("deadline elapsed")]
pub struct Elapsed;
