//! # shoal-runtime: thread-per-core executors on io_uring
//!
//! **Owns:** the executor threads (one single-threaded io_uring executor per data-plane
//! shard, plus one control-plane executor for slow global state; each pinned to a CPU only
//! when asked, see [`Placement`] and [`ControlPlacement`]), spawning onto them, the bounded
//! channels between them and from application threads ([`channel`]), TCP/UDP sockets
//! ([`net`]), timers ([`time`]), and start-up/shutdown/panic reporting.
//!
//! **Must not touch:** anything of the mesh — protocol, peers, topics, discovery. It
//! knows executors, bytes and sockets, nothing more. Executors never share state; they
//! send each other messages over lock-free rings (one per ordered pair of executors). The
//! only lock a message can meet here is the short mutex of `event-listener`'s wait list in
//! an ingress: its executor takes it once per batch it drains, senders when they wait (see
//! [`channel::ingress`]).
//!
//! **compio appears only in this crate.** No other crate depends on compio or sees one of its
//! types: the public API is Shoal's own ([`Runtime`], [`Builder`], [`spawn_local`],
//! [`channel`], [`net`], [`time`]). Replacing the executor means touching only `executor.rs`
//! (thread body, ring setup, `drive` loop), `task.rs` (`spawn_local`, the task wrapper, the
//! local join handle), `net.rs`, `time.rs` and `memlock.rs` (setup-error mapping); the
//! channels (`channel/`) use only `std::task::Waker`. Why compio and not glommio, with the
//! measurements, is in `bench/notes/runtime.md`.
//!
//! **Wake chains.** compio runs, per round, the tasks that were queued when the round began.
//! Our `drive` loop runs up to two such rounds back to back before it enters the kernel to
//! reap completions, so a chain of local wakes (a reader waking a router waking a writer)
//! costs no system call and its I/O is submitted with the next park.
//!
//! **Spin before park.** With [`Builder::spin_before_park`] the `drive` loop keeps reaping
//! completions without sleeping and running woken tasks for up to the given time after the
//! last task poll, then parks in `io_uring_enter`. It trades a busy core for wake-up latency:
//! give it only to executors on dedicated cores (`examples/pingpong.rs` measures it).
//!
//! **Ring flags.** Every ring is set up with `SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG`
//! ([`RingFlags::DEFAULT`]; [`Builder::ring_flags`] sets others): completion work then runs
//! only when the executor asks for completions, never interrupting a running task. That holds
//! because each executor's thread is the only one that submits to or reaps its ring; other
//! threads wake it through an eventfd the ring polls. A kernel that refuses the default flags
//! (before 6.1) gets a ring without them and a warning; flags set by hand that it refuses are
//! [`RuntimeError::RingFlagsRefused`]. Measurements: `bench/notes/ring.md`.
//!
//! **memlock.** A ring that cannot be set up because `RLIMIT_MEMLOCK` is too low is reported
//! as [`RuntimeError::MemlockLimit`] with the limits read by `getrlimit`
//! ([`memlock::memlock_limit`]); nothing falls back to epoll (compio is built without its
//! `polling` feature), so a missing io_uring is an error, never a silent downgrade.
//!
//! **Panics.** A panic in a task stops its executor (fail-stop: the shard's state may be
//! broken). Its tasks are dropped, which closes every channel end they owned, so peers see
//! `Closed` instead of hanging; [`Runtime::join`] returns [`RuntimeError::ExecutorPanicked`]
//! naming the executor and the panic message. Other executors keep running. compio aborts
//! the process if one of its task wakers is woken on a thread that is unwinding; our channel
//! ends defer such wakes until the unwind has been caught, and a `Drop` elsewhere that
//! reaches an executor runs that work through [`outside_unwind`] (both in `unwind.rs`).
//! Third-party types whose `Drop` wakes a task on another executor during an unwind still
//! would: prefer Shoal's channels across executors.

mod builder;
pub mod channel;
mod error;
mod executor;
mod id;
pub mod memlock;
pub mod net;
mod task;
pub mod time;
mod unwind;

pub use builder::{Builder, ControlPlacement, Placement, RingFlags};
pub use error::{
    Closed, Elapsed, JoinError, RuntimeError, SendError, SpawnError, TryRecvError, TrySendError,
};
pub use executor::{current_handle, Handle, Runtime};
pub use id::ExecutorId;
pub use task::{
    contain_panic, current_executor, current_shard, spawn_local, try_spawn_local, ContainPanic,
    JoinHandle, LocalJoinHandle,
};
pub use unwind::outside_unwind;
