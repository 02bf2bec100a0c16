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
//! ring setup, `drive` loop), `task.rs` (`spawn_local`, the task wrapper, the local join
//! handle), `net.rs` (socket wrappers), `time.rs`, and `memlock.rs` (setup-error
//! mapping). The channels (`channel/`) use only
//! `std::task::Waker`, so they work unchanged with any executor.
//!
//! ## Wake chains
//!
//! compio runs, per round, the tasks that were queued when the round began; tasks woken
//! during the round (a reader waking a publisher waking a writer) wait for the next. Our
//! `drive` loop runs up to two such rounds back to back before it enters the kernel to reap
//! completions, and every round after that, so a chain of local wakes costs no system call
//! and its I/O is submitted with the next park (`io_uring_enter` per mesh ping-pong round
//! trip: 8 before, 4 after; see BENCHMARKS.md, latency section).
//!
//! ## Spin before park
//!
//! compio parks in `io_uring_enter` when it has nothing to run. With
//! [`Builder::spin_before_park`] our own `drive` loop instead keeps calling compio's
//! `poll_with(Some(Duration::ZERO))` (reap completions without sleeping) and running
//! woken tasks for up to the given time after the last task poll, then parks. See
//! `examples/pingpong.rs` for the measurement; numbers are in the section below.
//!
//! Measured with `cargo run --release -p shoal-runtime --example pingpong -- 6 5000 50`
//! (two shards pinned to CPUs 0 and 1, 64-byte messages, 6 interleaved rounds of 5000
//! round trips per setting, CPU = whole-process user+sys time per round trip). The
//! machine had only 2 cores and a load average of ~7.7 from parallel builds during the
//! run, so tails are scheduler noise and the absolute numbers are pessimistic:
//!
//! | path              | spin  | p50 RT  | p99 RT | CPU per RT |
//! |-------------------|-------|---------|--------|------------|
//! | TCP loopback      | 0     | 63.7 µs | 8.0 ms | 103 µs     |
//! | TCP loopback      | 50 µs | 50.9 µs | 12 ms  | 114 µs     |
//! | executor channel  | 0     | 56.7 µs | 5.3 ms | 87 µs      |
//! | executor channel  | 50 µs | 45.1 µs | 8.0 ms | 96 µs      |
//!
//! Spin cut the median round trip by ~20 % for ~10 % more CPU here; on a quiet machine
//! the gain should be larger (glommio's 50 µs spin took p50 from ~140 µs to ~80 µs at
//! 1.6x CPU on this hardware). The cost is a core kept busy for `spin` after every burst,
//! so enable it only for executors that own a dedicated core and need latency.
//! While spinning, cross-thread wakes are picked up without a syscall (compio's driver
//! writes its eventfd only when parked); I/O completions need an `io_uring_enter`
//! (`poll_with(Some(ZERO))`), issued every fourth spin round.
//!
//! ## memlock
//!
//! Measured on this kernel (6.18), `examples/memlock_probe.rs` under `prlimit`, binary
//! search over the limit in 4 KiB steps:
//!
//! * **root is not charged** (`CAP_IPC_LOCK`): 12 executors start even with
//!   `RLIMIT_MEMLOCK = 0`.
//! * **unprivileged users are charged for the rings**: with our default 256 ring entries,
//!   2 executors need 140 KiB, 4 need 320 KiB, 12 (4 nodes x 3) need 704 KiB; with
//!   compio's default 1024 entries 12 executors need 1.74 MiB; 4096 entries need 2.1 MiB
//!   for just 2 executors. So 4 nodes x 3 executors fit in the default 8 MiB `ulimit -l`
//!   with a wide margin, as root and as `nobody` (tested in `tests/memlock.rs`).
//! * a limit too low (e.g. 4 KiB as `nobody`) makes `io_uring_setup` fail with
//!   `ENOMEM`, reported as [`RuntimeError::MemlockLimit`] with the soft and hard limit
//!   read by `getrlimit` ([`memlock::memlock_limit`]); nothing falls back to epoll.
//!
//! Probe command: `prlimit --memlock=N:N setpriv --reuid=65534 --regid=65534
//! --clear-groups target/debug/examples/memlock_probe <nodes> <shards> [ring_entries]`.
//!
//! ## Panics
//!
//! A panic in a task stops its executor (fail-stop: the shard's state may be broken).
//! Its tasks are dropped, which closes every channel end they owned, so peers see
//! `Closed` instead of hanging; [`Runtime::join`] returns
//! [`RuntimeError::ExecutorPanicked`] naming the executor and the panic message.
//! Other executors keep running.
//!
//! compio aborts the process if a compio task waker is woken on a thread that is
//! unwinding (an abort-on-panic guard in its cross-thread schedule path). Our channel
//! ends defer such wakes until the unwind has been caught (see `channel/notify.rs`), so
//! a panicking task that owns channel ends does not take the process down. Third-party
//! types whose `Drop` wakes a task on another executor during an unwind still would:
//! prefer Shoal's channels across executors.

mod builder;
pub mod channel;
mod error;
mod executor;
pub mod memlock;
pub mod net;
mod task;
pub mod time;

pub use builder::{Builder, ControlPlacement, Placement};
pub use error::{
    Closed, Elapsed, JoinError, RuntimeError, SendError, SpawnError, TryRecvError, TrySendError,
};
pub use executor::{ExecutorId, Handle, Runtime};
pub use task::{
    current_executor, current_handle, current_shard, spawn_local, try_spawn_local, JoinHandle,
    LocalJoinHandle,
};
