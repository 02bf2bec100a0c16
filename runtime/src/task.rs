//! Tasks: spawning on the current executor, join handles, and the per-thread executor
//! context (which executor am I, did a task panic).

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::thread;

use crate::error::{JoinError, SpawnError};
use crate::id::ExecutorId;

/// Awaits the result of a task started with [`Runtime::spawn_on`](crate::Runtime::spawn_on) / [`Handle::spawn_on`](crate::Handle::spawn_on).
/// `Send`, so any thread or executor may await it. Dropping it detaches the task.
#[derive(Debug)]
pub struct JoinHandle<T> {
    pub(crate) rx: futures_channel::oneshot::Receiver<Result<T, String>>,
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

/// Per-executor-thread state (the thread's spawn handle is the executor's: `HANDLE` there).
pub(crate) struct Local {
    pub(crate) id: ExecutorId,
    /// Task polls so far; the spin loop uses it to tell "did work" from "idle".
    pub(crate) polls: Cell<u64>,
    /// First panic of a task; the run loop stops the executor when it sees it.
    pub(crate) panic: RefCell<Option<String>>,
}

thread_local! {
    pub(crate) static LOCAL: RefCell<Option<Rc<Local>>> = const { RefCell::new(None) };
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

/// Spawns `fut` on the calling executor.
///
/// A panic in the task stops this executor (fail-stop: its shard state may be broken);
/// [`Runtime::join`](crate::Runtime::join) reports it, and every channel it owned closes.
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
                crate::unwind::flush_deferred_wakes();
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

pin_project_lite::pin_project! {
    /// [`contain_panic`]'s future.
    pub struct ContainPanic<F> {
        #[pin]
        fut: F,
    }
}

/// Runs `fut` with its panics contained: a panic in a poll ends it with `Err(message)`
/// instead of stopping the executor (what [`spawn_local`] does, since a panicking shard
/// task may leave the shard's state broken). Only for futures whose panic cannot break
/// anything they share with the executor's other tasks: application code that reaches the
/// executor's state only through calls that finish before they return. Wakes deferred while
/// the poll unwound (see `unwind.rs`) are delivered at once.
pub fn contain_panic<F: Future>(fut: F) -> ContainPanic<F> {
    ContainPanic { fut }
}

impl<F: Future> Future for ContainPanic<F> {
    type Output = Result<F::Output, String>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self.project().fut;
        match catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => {
                crate::unwind::flush_deferred_wakes();
                Poll::Ready(Err(panic_message(&*payload)))
            }
        }
    }
}
