//! # shoal-runtime: thread-per-core executors on io_uring
//!
//! **Owns:** the executor threads (one pinned, single-threaded io_uring executor per
//! data-plane shard, plus one control-plane executor for slow global state), spawning
//! onto them, the lock-free channels between them and from application threads, TCP/UDP
//! sockets, timers, and start-up/shutdown/panic reporting.
//!
//! **Must not touch:** anything of the mesh — protocol, peers, topics, discovery. It
//! knows executors, bytes and sockets, nothing more. Executors never share state; they
//! send each other messages, and nothing on the message path takes a lock.
//!
//! ## Executor choice: compio, not glommio
//!
//! Measured on this machine (pinned, loopback, 12 interleaved rounds): default glommio
//! streamed 64 B messages at 0.7x plain threads while compio reached 1.06x; glommio made
//! 18.5 syscalls per round trip vs compio's 4.0, spent 1.8x CPU per round trip, and its
//! p50 round trip was 1.25x plain threads (compio 1.06x). glommio has had no release
//! since 2024-03, carries an unsound dependency (`lockfree`), its channels panic when
//! used from a plain thread and leave a sender hanging when the receiving executor
//! panics, and its 10 MiB buffer registration fails without `CAP_IPC_LOCK`. compio is
//! completion-based, maintained (0.19.2, 2026-08), accepts wakers from any thread, and
//! returns a clean error when memlock is short. We pin `compio = "0.19"` with only the
//! `runtime`, `io-uring`, `net`, `time`, `bytes` features (0.x releases break APIs).
//! Without the `polling` feature compio has no epoll fallback, so a missing io_uring is
//! an error, not a silent downgrade. Operations compio lacks (e.g. zero-copy send,
//! `IORING_OP_SEND_ZC`) can be added through compio's custom-op support
//! (`compio::driver::OpCode`) with the `io-uring` crate's opcode builders.
//!
//! ## compio appears only in this crate
//!
//! No other crate depends on compio or sees one of its types: the public API is Shoal's
//! own ([`Runtime`], [`Builder`], [`spawn_local`], [`channel`], [`net`], [`time`]).
//! Replacing the executor means touching only this crate: `executor.rs` (thread body,
//! `drive` loop, task wrapper, `spawn_local`), `net.rs` (socket wrappers), `time.rs`,
//! and `memlock.rs` (setup-error mapping). The channels (`channel/`) use only
//! `std::task::Waker`, so they work unchanged with any executor.
//!
//! ## Spin before park
//!
//! compio parks in `io_uring_enter` when it has nothing to run. With
//! [`Builder::spin_before_park`] our own `drive` loop instead keeps calling compio's
//! `poll_with(Some(Duration::ZERO))` (reap completions without sleeping) and running
//! woken tasks for up to the given time after the last task poll, then parks. See
//! `examples/pingpong.rs` for the measurement; numbers are in the section below.
//!
//! SPIN_RESULTS_PLACEHOLDER
//!
//! ## memlock
//!
//! MEMLOCK_RESULTS_PLACEHOLDER
//!
//! ## Panics
//!
//! A panic in a task stops its executor (fail-stop: the shard's state may be broken).
//! Its tasks are dropped, which closes every channel end they owned, so peers see
//! `Closed` instead of hanging; [`Runtime::join`] returns
//! [`RuntimeError::ExecutorPanicked`] naming the executor and the panic message.

mod builder;
pub mod channel;
mod error;
mod executor;
pub mod memlock;
pub mod net;
pub mod time;

pub use builder::{Builder, ControlPlacement, Placement};
pub use error::{
    Closed, Elapsed, JoinError, RuntimeError, SendError, SpawnError, TryRecvError, TrySendError,
};
pub use executor::{
    current_executor, current_handle, current_shard, spawn_local, try_spawn_local, ExecutorId,
    Handle, JoinHandle, LocalJoinHandle, Runtime,
};
