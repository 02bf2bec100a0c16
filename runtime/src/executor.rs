//! Executors: one thread each, one compio (io_uring) runtime each, driven by our own loop.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::task::Waker;
use std::thread;
use std::time::{Duration, Instant};

use futures_util::FutureExt;

use crate::builder::{Builder, ControlPlacement, Placement, RingFlags, RingSetting};
use crate::channel::{ingress, IngressReceiver, IngressSender};
use crate::error::{RuntimeError, SpawnError, TrySendError};
use crate::id::ExecutorId;
use crate::memlock;
use crate::task::{panic_message, spawn_local, JoinHandle, Local, LOCAL};

thread_local! {
    /// The spawn handle of the runtime this executor thread belongs to.
    static HANDLE: RefCell<Option<Handle>> = const { RefCell::new(None) };
}

/// A spawn handle for the runtime the calling executor belongs to.
pub fn current_handle() -> Option<Handle> {
    HANDLE.with(|h| h.borrow().clone())
}

type Job = Box<dyn FnOnce() + Send>;

/// What other threads know about one executor.
struct Slot {
    id: ExecutorId,
    spawn_tx: IngressSender<Job>,
    stop: AtomicBool,
    /// The io_uring driver's waker, to get the executor out of its kernel wait.
    waker: OnceLock<Waker>,
}

struct Shared {
    shards: usize,
    /// Shards in order, then the control plane.
    slots: Vec<Slot>,
}

impl Shared {
    fn slot(&self, id: ExecutorId) -> Option<&Slot> {
        match id {
            ExecutorId::Shard(i) if i < self.shards => self.slots.get(i),
            ExecutorId::Shard(_) => None,
            ExecutorId::Control => self.slots.get(self.shards),
        }
    }

    fn stop_all(&self) {
        for slot in &self.slots {
            slot.stop.store(true, Ordering::Release);
            if let Some(w) = slot.waker.get() {
                w.wake_by_ref();
            }
        }
    }
}

/// A cheap, `Send + Clone` handle for spawning onto a runtime's executors from anywhere.
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("shards", &self.shared.shards)
            .finish()
    }
}

impl Handle {
    /// Number of data-plane shards.
    pub fn shards(&self) -> usize {
        self.shared.shards
    }

    /// Every executor: the shards in order, then the control plane.
    pub fn executors(&self) -> Vec<ExecutorId> {
        self.shared.slots.iter().map(|s| s.id).collect()
    }

    /// How many times a spawn onto `id` found its spawn queue at the ceiling.
    pub fn spawn_queue_full_events(&self, id: ExecutorId) -> Option<u64> {
        self.shared.slot(id).map(|s| s.spawn_tx.full_events())
    }

    /// Runs `make()` on executor `on` and spawns the future it returns there.
    ///
    /// `make` crosses threads (so it is `Send`); the future it builds does not, so it may
    /// hold `Rc`s and other executor-local state. Never blocks: a full spawn queue is
    /// [`SpawnError::QueueFull`]. A panic in the task stops that executor (fail-stop) and
    /// is reported by [`Runtime::join`]; the returned handle then yields
    /// [`JoinError::Panicked`](crate::JoinError::Panicked).
    pub fn spawn_on<F, Fut>(
        &self,
        on: ExecutorId,
        make: F,
    ) -> Result<JoinHandle<Fut::Output>, SpawnError>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future + 'static,
        Fut::Output: Send + 'static,
    {
        let slot = self.shared.slot(on).ok_or(SpawnError::NoSuchExecutor(on))?;
        if slot.stop.load(Ordering::Acquire) {
            return Err(SpawnError::Stopped(on));
        }
        let (tx, rx) = futures_channel::oneshot::channel();
        let job: Job = Box::new(move || {
            let fut = make();
            spawn_local(async move {
                match AssertUnwindSafe(fut).catch_unwind().await {
                    Ok(v) => {
                        let _ = tx.send(Ok(v));
                    }
                    Err(payload) => {
                        let _ = tx.send(Err(panic_message(&*payload)));
                        std::panic::resume_unwind(payload);
                    }
                }
            })
            .detach();
        });
        match slot.spawn_tx.try_send(job) {
            Ok(()) => Ok(JoinHandle { rx }),
            Err(TrySendError::Full(_)) => Err(SpawnError::QueueFull(on)),
            Err(TrySendError::Closed(_)) => Err(SpawnError::Stopped(on)),
        }
    }
}

impl Builder {
    /// Starts every executor thread and waits until each has its io_uring ready.
    ///
    /// Fails with a typed error — never a silent fallback — if the settings are invalid
    /// ([`RuntimeError::Config`]), a ring cannot be created (e.g.
    /// [`RuntimeError::MemlockLimit`]) or a thread cannot be pinned; executors that did start
    /// are stopped and joined first.
    pub fn build(self) -> Result<Runtime, RuntimeError> {
        self.check()?;
        Runtime::start(self)
    }
}

/// A set of running executors: data-plane shards plus one control-plane executor.
///
/// Dropping it stops and joins every executor (panics are logged); call
/// [`Runtime::join`] to get them as an error instead.
pub struct Runtime {
    handle: Handle,
    threads: Vec<(ExecutorId, thread::JoinHandle<Result<(), String>>)>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("shards", &self.handle.shards())
            .finish()
    }
}

impl Runtime {
    /// A builder with defaults: 1 shard, unpinned, no spin, 256 ring entries,
    /// [`RingFlags::DEFAULT`](crate::RingFlags::DEFAULT).
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// A `Send + Clone` spawn handle.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// Number of data-plane shards.
    pub fn shards(&self) -> usize {
        self.handle.shards()
    }

    /// Every executor: the shards in order, then the control plane.
    pub fn executors(&self) -> Vec<ExecutorId> {
        self.handle.executors()
    }

    /// See [`Handle::spawn_on`].
    pub fn spawn_on<F, Fut>(
        &self,
        on: ExecutorId,
        make: F,
    ) -> Result<JoinHandle<Fut::Output>, SpawnError>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future + 'static,
        Fut::Output: Send + 'static,
    {
        self.handle.spawn_on(on, make)
    }

    /// Tells every executor to stop; returns at once. Tasks still running are dropped
    /// (which closes their channels). Idempotent.
    pub fn shutdown(&self) {
        self.handle.shared.stop_all();
    }

    /// Stops every executor and joins its thread. Reports the first executor panic as
    /// [`RuntimeError::ExecutorPanicked`] (later ones are logged).
    pub fn join(mut self) -> Result<(), RuntimeError> {
        self.join_all()
    }

    fn join_all(&mut self) -> Result<(), RuntimeError> {
        self.shutdown();
        let mut first = None;
        for (id, t) in self.threads.drain(..) {
            if t.thread().id() == thread::current().id() {
                // Joining ourselves would deadlock; the loop exits once this task returns.
                tracing::error!(executor = %id, "runtime joined from its own executor; not waiting for it");
                continue;
            }
            let outcome = match t.join() {
                Ok(r) => r,
                Err(payload) => Err(panic_message(&*payload)),
            };
            if let Err(message) = outcome {
                tracing::error!(executor = %id, %message, "executor panicked");
                first.get_or_insert(RuntimeError::ExecutorPanicked {
                    executor: id,
                    message,
                });
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn start(b: Builder) -> Result<Self, RuntimeError> {
        let mut ids: Vec<ExecutorId> = (0..b.shards).map(ExecutorId::Shard).collect();
        ids.push(ExecutorId::Control);
        let mut receivers = Vec::with_capacity(ids.len());
        let slots = ids
            .iter()
            .map(|&id| {
                let (spawn_tx, spawn_rx) = ingress::<Job>(b.spawn_queue);
                receivers.push(spawn_rx);
                Slot {
                    id,
                    spawn_tx,
                    stop: AtomicBool::new(false),
                    waker: OnceLock::new(),
                }
            })
            .collect();
        let handle = Handle {
            shared: Arc::new(Shared {
                shards: b.shards,
                slots,
            }),
        };
        let mut rt = Runtime {
            handle,
            threads: Vec::with_capacity(ids.len()),
        };
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), RuntimeError>>();
        for (id, spawn_rx) in ids.iter().copied().zip(receivers) {
            let cpu = match (id, &b.placement, b.control) {
                (ExecutorId::Shard(i), Placement::Pinned(cpus), _) => Some(cpus[i % cpus.len()]),
                (ExecutorId::Control, _, ControlPlacement::Pinned(c)) => Some(c),
                _ => None,
            };
            let name = match id {
                ExecutorId::Shard(i) => format!("{}-shard-{i}", b.name),
                ExecutorId::Control => format!("{}-control", b.name),
            };
            let cfg = ExecCfg {
                id,
                cpu,
                nice: b.nice,
                spin: b.spin,
                ring_entries: b.ring_entries,
                ring_flags: b.ring_flags,
                handle: rt.handle.clone(),
                spawn_rx,
                ready: ready_tx.clone(),
            };
            match thread::Builder::new()
                .name(name)
                .spawn(move || run_thread(cfg))
            {
                Ok(t) => rt.threads.push((id, t)),
                Err(source) => {
                    let _ = rt.join_all();
                    return Err(RuntimeError::Thread {
                        executor: id,
                        source,
                    });
                }
            }
        }
        drop(ready_tx);
        let mut first_err = None;
        for _ in 0..ids.len() {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => break,
            }
        }
        if let Some(e) = first_err {
            let _ = rt.join_all();
            return Err(e);
        }
        tracing::debug!(
            shards = b.shards,
            spin_us = b.spin.as_micros() as u64,
            "runtime started"
        );
        Ok(rt)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            if let Err(e) = self.join_all() {
                tracing::error!(error = %e, "runtime dropped with a panicked executor");
            }
        }
    }
}

struct ExecCfg {
    id: ExecutorId,
    cpu: Option<usize>,
    nice: Option<i32>,
    spin: Duration,
    ring_entries: u32,
    ring_flags: RingSetting,
    handle: Handle,
    spawn_rx: IngressReceiver<Job>,
    ready: mpsc::Sender<Result<(), RuntimeError>>,
}

/// Body of an executor thread. `Err` carries a panic message.
fn run_thread(cfg: ExecCfg) -> Result<(), String> {
    let ExecCfg {
        id,
        cpu,
        nice,
        spin,
        ring_entries,
        ring_flags,
        handle,
        spawn_rx,
        ready,
    } = cfg;
    let placed = || -> Result<(), RuntimeError> {
        if let Some(cpu) = cpu {
            pin_to_cpu(cpu).map_err(|source| RuntimeError::Pin {
                executor: id,
                cpu,
                source,
            })?;
        }
        if let Some(nice) = nice {
            set_nice(nice).map_err(|source| RuntimeError::Nice {
                executor: id,
                nice,
                source,
            })?;
        }
        Ok(())
    };
    if let Err(e) = placed() {
        let _ = ready.send(Err(e));
        return Ok(());
    }
    let build = |flags: RingFlags| {
        let mut proactor = compio::driver::ProactorBuilder::new();
        // SINGLE_ISSUER and DEFER_TASKRUN hold here: this thread creates the ring and is the
        // only one that submits to it or reaps it (`drive`); other threads only wake it
        // through the driver's eventfd (`Slot::waker`), which the ring itself polls.
        proactor
            .capacity(ring_entries)
            .single_issuer(flags.single_issuer)
            .defer_taskrun(flags.defer_taskrun)
            .coop_taskrun(flags.coop_taskrun)
            .taskrun_flag(flags.taskrun_flag);
        compio::runtime::RuntimeBuilder::new()
            .with_proactor(proactor)
            .build()
    };
    let rt = match build_ring(id, ring_flags, build) {
        Ok(rt) => rt,
        Err((flags, source)) => {
            let _ = ready.send(Err(memlock::classify_setup_error(id, flags, source)));
            return Ok(());
        }
    };
    let slot = handle
        .shared
        .slot(id)
        .expect("slot exists for every executor");
    let _ = slot.waker.set(rt.waker());
    let local = Rc::new(Local {
        id,
        polls: Cell::new(0),
        panic: RefCell::new(None),
    });
    LOCAL.with(|l| *l.borrow_mut() = Some(local.clone()));
    HANDLE.with(|h| *h.borrow_mut() = Some(handle.clone()));
    let _ = ready.send(Ok(()));
    drop(ready);
    tracing::debug!(executor = %id, ?cpu, "executor running");

    let outcome = catch_unwind(AssertUnwindSafe(|| {
        rt.enter(|| {
            spawn_local(spawner(spawn_rx)).detach();
            drive(&rt, &local, &slot.stop, spin)
        })
    }));
    crate::unwind::flush_deferred_wakes();
    let outcome = match outcome {
        Ok(r) => r,
        Err(payload) => Err(panic_message(&*payload)),
    };
    slot.stop.store(true, Ordering::Release);
    // Dropping the runtime drops every task, and with them every channel end they own,
    // so peers see `Closed` instead of waiting for us.
    drop(rt);
    LOCAL.with(|l| *l.borrow_mut() = None);
    HANDLE.with(|h| *h.borrow_mut() = None);
    match &outcome {
        Ok(()) => tracing::debug!(executor = %id, "executor stopped"),
        Err(message) => {
            tracing::error!(executor = %id, %message, "executor panicked; tasks dropped")
        }
    }
    outcome
}

/// Creates an executor's ring with `flags` through `build`. Flags the user asked for are used
/// as given; the default ones ([`RingFlags::DEFAULT`], newer than some kernels Shoal runs on)
/// are dropped with a warning if the kernel refuses them (`EINVAL`), never another error.
/// On failure, the flags of the attempt that failed and its error.
fn build_ring<T>(
    id: ExecutorId,
    flags: RingSetting,
    mut build: impl FnMut(RingFlags) -> std::io::Result<T>,
) -> Result<T, (RingFlags, std::io::Error)> {
    let wanted = flags.flags();
    match build(wanted) {
        Ok(t) => Ok(t),
        Err(e)
            if flags == RingSetting::Default
                && wanted != RingFlags::NONE
                && e.raw_os_error() == Some(libc::EINVAL) =>
        {
            tracing::warn!(
                executor = %id,
                flags = %wanted,
                error = %e,
                "the kernel refused the default io_uring setup flags; this ring runs without them"
            );
            build(RingFlags::NONE).map_err(|e| (RingFlags::NONE, e))
        }
        Err(e) => Err((wanted, e)),
    }
}

/// Runs jobs handed over by [`Handle::spawn_on`].
async fn spawner(mut rx: IngressReceiver<Job>) {
    let mut batch = Vec::with_capacity(64);
    while rx.recv_batch(&mut batch, 64).await.is_ok() {
        for job in batch.drain(..) {
            job();
        }
    }
}

/// While spinning, enter the kernel for completions once per this many loop rounds.
const SPIN_POLL_EVERY: u32 = 4;
/// Rounds of running woken tasks after a park before the loop reaps completions each round.
const CHAIN_ROUNDS: u32 = 2;

/// The executor loop: run ready tasks, reap completions, spin, park.
fn drive(
    rt: &compio::runtime::Runtime,
    local: &Local,
    stop: &AtomicBool,
    spin: Duration,
) -> Result<(), String> {
    let mut idle_since: Option<Instant> = None;
    let mut spins = 0u32;
    let mut busy = 0u32;
    loop {
        if stop.load(Ordering::Acquire) {
            return Ok(());
        }
        let before = local.polls.get();
        let more = rt.run();
        if let Some(msg) = local.panic.borrow_mut().take() {
            return Err(msg);
        }
        if more {
            // Tasks are still queued. Right after a wake-up they are mostly ones the tasks
            // just run woke (a reader wakes the publisher, which wakes a writer): run those
            // before entering the kernel, so a short chain of wakes costs no system call and
            // its I/O is submitted with the next park. An executor that stays busy longer
            // reaps completions every round, so its sockets keep moving.
            busy = busy.saturating_add(1);
            if busy > CHAIN_ROUNDS {
                rt.poll_with(Some(Duration::ZERO));
            }
            idle_since = None;
            continue;
        }
        busy = 0;
        if local.polls.get() != before {
            idle_since = None;
        }
        if !spin.is_zero() {
            let now = Instant::now();
            let since = *idle_since.get_or_insert(now);
            if now.duration_since(since) < spin {
                // Cross-thread wakes need no syscall while we are awake (compio's driver
                // only writes its eventfd when parked) and are picked up by `run()`; I/O
                // completions need an `io_uring_enter`, so only every few rounds. Half-way
                // between two polls the spinner gives the CPU to any other runnable thread:
                // with more threads than cores (an application thread and its shard on one
                // core), a spinner that only hinted the CPU kept the thread it waited for
                // off the core until its spin ran out (two-process ping-pong with 100 µs of
                // shard spin: 250 µs p50 against 60 µs parked; yielding: 42-49 µs, see
                // `bench/notes/latency.md`). With nothing else runnable the yield returns at once;
                // yielding every round instead slowed a socket ping-pong on dedicated cores
                // (each yield is a system call between completion polls).
                spins = spins.wrapping_add(1);
                match spins % SPIN_POLL_EVERY {
                    0 => {
                        rt.poll_with(Some(Duration::ZERO));
                    }
                    n if n == SPIN_POLL_EVERY / 2 => std::thread::yield_now(),
                    _ => std::hint::spin_loop(),
                }
                continue;
            }
        }
        // Park in io_uring_enter until a completion, a timer, or a waker.
        rt.poll();
        idle_since = None;
    }
}

/// Sets the calling thread's niceness (on Linux a thread's own: `setpriority(2)` with
/// `who` 0 names the caller, not its process).
fn set_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: setpriority reads its three integer arguments only.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "CPU index out of range",
        ));
    }
    // SAFETY: `cpu_set_t` is a plain bitmask for which all-zero is valid; CPU_SET writes
    // a bit inside it (index checked above); sched_setaffinity(0, ..) reads it for the
    // calling thread only.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel that accepts no setup flag.
    fn old_kernel(flags: RingFlags) -> std::io::Result<RingFlags> {
        if flags == RingFlags::NONE {
            Ok(flags)
        } else {
            Err(std::io::Error::from_raw_os_error(libc::EINVAL))
        }
    }

    #[test]
    fn refused_default_flags_fall_back_to_none() {
        let got = build_ring(ExecutorId::Shard(0), RingSetting::Default, old_kernel);
        assert_eq!(got.unwrap(), RingFlags::NONE);
    }

    #[test]
    fn refused_flags_that_were_asked_for_are_an_error() {
        let asked = RingSetting::Given(RingFlags::DEFAULT);
        let (flags, e) = build_ring(ExecutorId::Shard(0), asked, old_kernel).unwrap_err();
        assert_eq!(flags, RingFlags::DEFAULT);
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn other_setup_errors_are_not_retried_without_flags() {
        let mut tries = 0;
        let (flags, e) = build_ring(ExecutorId::Shard(0), RingSetting::Default, |_| {
            tries += 1;
            Err::<(), _>(std::io::Error::from_raw_os_error(libc::ENOMEM))
        })
        .unwrap_err();
        assert_eq!((tries, flags), (1, RingFlags::DEFAULT));
        assert_eq!(e.raw_os_error(), Some(libc::ENOMEM));
    }
}
