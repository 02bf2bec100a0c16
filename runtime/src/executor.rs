//! Executors: one thread each, one compio (io_uring) runtime each, driven by our own loop.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use futures_util::FutureExt;

use crate::builder::{Builder, ControlPlacement, Placement};
use crate::channel::{ingress, IngressReceiver, IngressSender};
use crate::error::{JoinError, RuntimeError, SpawnError, TrySendError};
use crate::memlock;

/// Names one executor of a [`Runtime`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExecutorId {
    /// Data-plane shard `i` (0-based).
    Shard(usize),
    /// The control-plane executor.
    Control,
}

impl fmt::Display for ExecutorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shard(i) => write!(f, "shard {i}"),
            Self::Control => f.write_str("control plane"),
        }
    }
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
    /// [`JoinError::Panicked`].
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

/// Awaits the result of a task started with [`Runtime::spawn_on`] / [`Handle::spawn_on`].
/// `Send`, so any thread or executor may await it. Dropping it detaches the task.
#[derive(Debug)]
pub struct JoinHandle<T> {
    rx: futures_channel::oneshot::Receiver<Result<T, String>>,
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx).poll(cx).map(|r| match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(msg)) => Err(JoinError::Panicked(msg)),
            Err(_) => Err(JoinError::Cancelled),
        })
    }
}

impl<T> JoinHandle<T> {
    /// Blocks this (non-executor) thread until the task finishes.
    pub fn join_blocking(self) -> Result<T, JoinError> {
        let waiter = ThreadWaker::new();
        let waker = Waker::from(waiter.clone());
        let mut cx = Context::from_waker(&waker);
        let mut this = self;
        loop {
            if let Poll::Ready(v) = Pin::new(&mut this).poll(&mut cx) {
                return v;
            }
            waiter.park();
        }
    }
}

/// Wakes a parked plain thread.
struct ThreadWaker {
    thread: thread::Thread,
    woken: AtomicBool,
}

impl ThreadWaker {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            thread: thread::current(),
            woken: AtomicBool::new(false),
        })
    }

    fn park(&self) {
        while !self.woken.swap(false, Ordering::Acquire) {
            thread::park();
        }
    }
}

impl std::task::Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// Awaits a task started with [`spawn_local`]. Dropping it detaches the task; use
/// [`LocalJoinHandle::abort`] to cancel.
#[derive(Debug)]
pub struct LocalJoinHandle<T> {
    inner: Option<compio::runtime::JoinHandle<T>>,
}

impl<T> LocalJoinHandle<T> {
    /// Lets the task run on without anyone awaiting it.
    pub fn detach(mut self) {
        if let Some(h) = self.inner.take() {
            h.detach();
        }
    }

    /// Cancels the task (it is dropped at its current await point).
    pub fn abort(mut self) {
        drop(self.inner.take());
    }
}

impl<T> Drop for LocalJoinHandle<T> {
    fn drop(&mut self) {
        if let Some(h) = self.inner.take() {
            h.detach();
        }
    }
}

impl<T> Future for LocalJoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(h) = self.inner.as_mut() else {
            return Poll::Ready(Err(JoinError::Cancelled));
        };
        Pin::new(h).poll(cx).map(|r| {
            r.map_err(|e| match e {
                compio::runtime::JoinError::Cancelled => JoinError::Cancelled,
                compio::runtime::JoinError::Panicked(p) => JoinError::Panicked(panic_message(&*p)),
            })
        })
    }
}

/// Per-executor-thread state.
struct Local {
    id: ExecutorId,
    handle: Handle,
    /// Task polls so far; the spin loop uses it to tell "did work" from "idle".
    polls: Cell<u64>,
    /// First panic of a task; the run loop stops the executor when it sees it.
    panic: RefCell<Option<String>>,
}

thread_local! {
    static LOCAL: RefCell<Option<Rc<Local>>> = const { RefCell::new(None) };
}

fn with_local<R>(f: impl FnOnce(&Local) -> R) -> Option<R> {
    LOCAL.with(|l| l.borrow().as_deref().map(f))
}

/// The executor the calling thread runs, if it is a Shoal executor.
pub fn current_executor() -> Option<ExecutorId> {
    with_local(|l| l.id)
}

/// The data-plane shard index the calling thread runs, if it is a shard executor.
pub fn current_shard() -> Option<usize> {
    match current_executor() {
        Some(ExecutorId::Shard(i)) => Some(i),
        _ => None,
    }
}

/// A spawn handle for the runtime the calling executor belongs to.
pub fn current_handle() -> Option<Handle> {
    with_local(|l| l.handle.clone())
}

/// Spawns `fut` on the calling executor.
///
/// A panic in the task stops this executor (fail-stop: its shard state may be broken);
/// [`Runtime::join`] reports it, and every channel it owned closes.
///
/// # Panics
/// When called outside a Shoal executor thread; see [`try_spawn_local`].
pub fn spawn_local<F>(fut: F) -> LocalJoinHandle<F::Output>
where
    F: Future + 'static,
{
    try_spawn_local(fut).expect("spawn_local called outside a Shoal executor")
}

/// Like [`spawn_local`], but returns [`SpawnError::NotOnExecutor`] off-executor.
pub fn try_spawn_local<F>(fut: F) -> Result<LocalJoinHandle<F::Output>, SpawnError>
where
    F: Future + 'static,
{
    let local = LOCAL
        .with(|l| l.borrow().clone())
        .ok_or(SpawnError::NotOnExecutor)?;
    let rt = compio::runtime::Runtime::try_current().ok_or(SpawnError::NotOnExecutor)?;
    let handle = rt.spawn(FailStop { fut, local });
    Ok(LocalJoinHandle {
        inner: Some(handle),
    })
}

pin_project_lite::pin_project! {
    /// Counts polls and turns a task panic into an executor stop.
    struct FailStop<F> {
        #[pin]
        fut: F,
        local: Rc<Local>,
    }
}

impl<F: Future> Future for FailStop<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        this.local.polls.set(this.local.polls.get() + 1);
        let fut = this.fut;
        match catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(p) => p,
            Err(payload) => {
                crate::channel::flush_deferred_wakes();
                let msg = panic_message(&*payload);
                let mut slot = this.local.panic.borrow_mut();
                if slot.is_none() {
                    *slot = Some(msg);
                }
                // Never completes: the run loop tears the executor down.
                Poll::Pending
            }
        }
    }
}

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
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
    /// A builder with defaults: 1 shard, unpinned, no spin, 256 ring entries.
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

    pub(crate) fn start(b: Builder) -> Result<Self, RuntimeError> {
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
                spin: b.spin,
                ring_entries: b.ring_entries,
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
    spin: Duration,
    ring_entries: u32,
    handle: Handle,
    spawn_rx: IngressReceiver<Job>,
    ready: mpsc::Sender<Result<(), RuntimeError>>,
}

/// Body of an executor thread. `Err` carries a panic message.
fn run_thread(cfg: ExecCfg) -> Result<(), String> {
    let ExecCfg {
        id,
        cpu,
        spin,
        ring_entries,
        handle,
        spawn_rx,
        ready,
    } = cfg;
    if let Some(cpu) = cpu {
        if let Err(source) = pin_to_cpu(cpu) {
            let _ = ready.send(Err(RuntimeError::Pin {
                executor: id,
                cpu,
                source,
            }));
            return Ok(());
        }
    }
    let mut proactor = compio::driver::ProactorBuilder::new();
    proactor.capacity(ring_entries);
    let rt = match compio::runtime::RuntimeBuilder::new()
        .with_proactor(proactor)
        .build()
    {
        Ok(rt) => rt,
        Err(source) => {
            let _ = ready.send(Err(memlock::classify_setup_error(id, source)));
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
        handle: handle.clone(),
        polls: Cell::new(0),
        panic: RefCell::new(None),
    });
    LOCAL.with(|l| *l.borrow_mut() = Some(local.clone()));
    let _ = ready.send(Ok(()));
    drop(ready);
    tracing::debug!(executor = %id, ?cpu, "executor running");

    let outcome = catch_unwind(AssertUnwindSafe(|| {
        rt.enter(|| {
            spawn_local(spawner(spawn_rx)).detach();
            drive(&rt, &local, &slot.stop, spin)
        })
    }));
    crate::channel::flush_deferred_wakes();
    let outcome = match outcome {
        Ok(r) => r,
        Err(payload) => Err(panic_message(&*payload)),
    };
    slot.stop.store(true, Ordering::Release);
    // Dropping the runtime drops every task, and with them every channel end they own,
    // so peers see `Closed` instead of waiting for us.
    drop(rt);
    LOCAL.with(|l| *l.borrow_mut() = None);
    match &outcome {
        Ok(()) => tracing::debug!(executor = %id, "executor stopped"),
        Err(message) => {
            tracing::error!(executor = %id, %message, "executor panicked; tasks dropped")
        }
    }
    outcome
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

/// The executor loop: run ready tasks, reap completions, spin, park.
fn drive(
    rt: &compio::runtime::Runtime,
    local: &Local,
    stop: &AtomicBool,
    spin: Duration,
) -> Result<(), String> {
    let mut idle_since: Option<Instant> = None;
    let mut spins = 0u32;
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
            // Tasks are still queued: reap completions without waiting, keep running.
            rt.poll_with(Some(Duration::ZERO));
            idle_since = None;
            continue;
        }
        if local.polls.get() != before {
            idle_since = None;
        }
        if !spin.is_zero() {
            let now = Instant::now();
            let since = *idle_since.get_or_insert(now);
            if now.duration_since(since) < spin {
                // Cross-thread wakes need no syscall while we are awake (compio's driver
                // only writes its eventfd when parked) and are picked up by `run()`; I/O
                // completions need an `io_uring_enter`, so only every few rounds.
                spins = spins.wrapping_add(1);
                if spins % SPIN_POLL_EVERY == 0 {
                    rt.poll_with(Some(Duration::ZERO));
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
        }
        // Park in io_uring_enter until a completion, a timer, or a waker.
        rt.poll();
        idle_since = None;
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
