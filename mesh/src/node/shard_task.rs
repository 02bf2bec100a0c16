//! Shard tasks: application code running as a task on the data shard that originates this
//! node's messages, the thread-per-core model of Seastar and glommio.
//!
//! [`Mesh::spawn_on_shard`] runs a future on that shard's executor with a [`ShardContext`].
//! Its publishes call the shard's core directly, in the task's own poll: no ingress queue,
//! no thread hand-off, no wake-up; the frame is written into the link's queue by the thread
//! that owns the socket. Backpressure (Block policy) is an `.await` during which the shard's
//! link writers run. Its [`ShardInbox`] takes what the node delivers in batches, moved
//! rather than copied: the origin shard's own deliveries with no cross-thread queue, the
//! other shards' (with [`shards`](crate::MeshBuilder::shards) > 1) over the ring between
//! them, in order per link and per writer.
//!
//! **Topics.** [`ShardContext::writer`] opens a [`ShardWriter`], the shard's
//! [`Writer`](crate::topics::Writer): the same numbering, packing (shared code), checks, errors and
//! counters, each batch handed to the core in the task's poll; a reliable keep-all writer
//! awaits its credit (never blocking the shard) and fails with
//! [`PublishError::HistoryFull`](super::PublishError::HistoryFull) after its
//! `max_blocking_time`. [`ShardContext::reader`] opens a [`Reader`](crate::topics::Reader)
//! whose runs ([`Delivered::Samples`], one entry per run, payloads sliced from the read
//! buffer) and loss reports ([`Delivered::Lost`]) arrive in the inbox while the task holds
//! it; [`Reader::owns`](crate::topics::Reader::owns) tells an entry is the reader's. Opening
//! either is awaited (the control plane answers a writer once its route reached every shard,
//! this one included).
//!
//! ```no_run
//! # async fn doc(mesh: shoal_mesh::Mesh) -> Result<(), Box<dyn std::error::Error>> {
//! use shoal_mesh::node::shard_task::Delivered;
//! use shoal_mesh::topics::Topic;
//! // A writer: samples go from the task straight into the shard's core.
//! let writing = mesh.spawn_on_shard(|ctx| async move {
//!     let mut w = ctx.writer(Topic::new("sensors/imu", "Imu")).await?;
//!     for i in 0u64..1000 {
//!         w.write(&i.to_be_bytes()).await?;
//!     }
//!     w.flush().await?;
//!     Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
//! })?;
//! // A reader (on another node, say): runs of samples in the inbox.
//! let reading = mesh.spawn_on_shard(|ctx| async move {
//!     let mut inbox = ctx.inbox(256).expect("the inbox is free");
//!     let reader = ctx.reader(Topic::new("sensors/imu", "Imu")).await?;
//!     let (mut batch, mut samples) = (Vec::new(), 0u64);
//!     while samples < 1000 {
//!         inbox.recv_batch(&mut batch).await;
//!         for d in batch.iter().filter(|d| reader.owns(d)) {
//!             if let Delivered::Samples(run) = d {
//!                 samples += u64::from(run.samples.count);
//!             }
//!         }
//!     }
//!     Ok::<_, shoal_mesh::MeshError>(samples)
//! })?;
//! # let _ = (writing, reading);
//! # Ok(()) }
//! ```
//!
//! A task that publishes with backpressure must not let its inbox fill meanwhile: the shard
//! waits for inbox room before reading on, as it waits for the event queue, and a peer doing
//! the same would wait for this one. Receive in a task of its own (one holds the inbox, others
//! publish), as an application thread must keep reading its events.
//!
//! Why that shard: it owns this node's own id (`link_shard(me)`), so it numbers this node's
//! messages (one id generator, so ids never collide) and makes every origination's
//! routing decision; the application threads' ingress leads there too, so a shard task's
//! messages are originated exactly as theirs are, with the same checks, errors
//! ([`PublishError`](super::PublishError)) and counters.
//!
//! Rules for the task: it shares its thread with the links it serves, so it must not block
//! (no blocking calls, no `_blocking` methods, no long computation without
//! [`ShardContext::yield_now`]). A panic in the task is contained: the task ends with
//! [`ShardTaskError::Panicked`], the panic is logged and counted
//! ([`MeshStats::shard_task_panics`](super::MeshStats::shard_task_panics)), and the shard
//! keeps serving its links. Stopping the node cancels its shard tasks
//! ([`ShardTaskError::Cancelled`]). Every poll of a shard task is timed: the total is
//! [`MeshStats::shard_task_busy_us`](super::MeshStats::shard_task_busy_us), and a poll that
//! held the shard for [`LONG_POLL`] or more counts in
//! [`MeshStats::shard_task_long_polls`](super::MeshStats::shard_task_long_polls).
//!
//! **Owns:** the shard-task API (spawning, the join handle, panic containment). **Must not
//! touch:** the shard's driver (`shard/task.rs` holds the shard-side half, `shard/forward.rs`
//! the other shards' hand-over to the inbox).

use super::shard::task::origin_context;
use super::{Mesh, MeshError, RunState};
use crate::proto::link_shard;
use shoal_runtime::{contain_panic, ExecutorId, JoinError};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A shard-task poll this long or longer counts as holding its shard (its links' reads and
/// writes waited that long): a tenth of the default heartbeat interval's order, far above
/// what one batch of work takes (tens of µs).
pub const LONG_POLL: Duration = Duration::from_millis(1);

pub use super::shard::task::{ShardContext, ShardInbox, ShardWriter};
pub use shoal_proto::shard::{Delivered, Delivery, SampleRun, SamplesLost};

/// Why a shard task did not return its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardTaskError {
    /// The task panicked (contained: the shard runs on); the panic's message.
    #[error("shard task panicked: {0}")]
    Panicked(String),
    /// The node stopped before the task finished (or before it started).
    #[error("shard task cancelled: the node stopped")]
    Cancelled,
}

/// Awaits a shard task started with [`Mesh::spawn_on_shard`] (`Send`: any thread or
/// executor may await it). Dropping it lets the task run on.
#[derive(Debug)]
pub struct ShardTask<T> {
    join: shoal_runtime::JoinHandle<Result<T, ShardTaskError>>,
}

impl<T> ShardTask<T> {
    /// Blocks this (non-executor) thread until the task ends.
    pub fn join_blocking(self) -> Result<T, ShardTaskError> {
        flatten(self.join.join_blocking())
    }
}

impl<T> Future for ShardTask<T> {
    type Output = Result<T, ShardTaskError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.join).poll(cx).map(flatten)
    }
}

fn flatten<T>(r: Result<Result<T, ShardTaskError>, JoinError>) -> Result<T, ShardTaskError> {
    match r {
        Ok(r) => r,
        // Contained in the task itself; kept for completeness.
        Err(JoinError::Panicked(m)) => Err(ShardTaskError::Panicked(m)),
        Err(_) => Err(ShardTaskError::Cancelled),
    }
}

/// Times each poll of a shard task (see the [module docs](self)). The task is boxed once,
/// at its spawn, so no pin projection is needed.
struct Timed<F> {
    fut: Pin<Box<F>>,
    ns: Arc<super::shared::NodeShared>,
}

impl<F: Future> Future for Timed<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let t0 = Instant::now();
        let out = self.fut.as_mut().poll(cx);
        let took = t0.elapsed();
        self.ns
            .shard_task_busy_us
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        if took >= LONG_POLL {
            self.ns
                .shard_task_long_polls
                .fetch_add(1, Ordering::Relaxed);
        }
        out
    }
}

impl Mesh {
    /// Runs `make(ctx)`'s future as a task on the data shard that originates this node's
    /// messages (see [`shard_task`](self) for the model and its rules). `make` crosses to
    /// that shard's thread; the future it returns stays there (it may hold `Rc`s).
    ///
    /// ```no_run
    /// # async fn doc(mesh: shoal_mesh::Mesh) -> Result<(), Box<dyn std::error::Error>> {
    /// let task = mesh.spawn_on_shard(|mut ctx| async move {
    ///     for i in 0u32..1000 {
    ///         ctx.broadcast(i.to_be_bytes().to_vec()).await?;
    ///     }
    ///     Ok::<_, shoal_mesh::PublishError>(())
    /// })?;
    /// task.await??;
    /// # Ok(()) }
    /// ```
    ///
    /// Fails with [`MeshError::NotRunning`] before [`start`](Self::start) or after
    /// [`stop`](Self::stop), [`MeshError::Spawn`] when the shard's spawn queue is full.
    pub fn spawn_on_shard<F, Fut, T>(&self, make: F) -> Result<ShardTask<T>, MeshError>
    where
        F: FnOnce(ShardContext) -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let ns = self.inner.ns.clone();
        let node = Arc::downgrade(&self.inner);
        let state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        let RunState::Running { rt, .. } = &*state else {
            return Err(MeshError::NotRunning);
        };
        let shard = link_shard(&ns.me, ns.shards);
        let join = rt.spawn_on(ExecutorId::Shard(shard), move || async move {
            let Some(ctx) = origin_context(node).await else {
                return Err(ShardTaskError::Cancelled);
            };
            let timed = Timed {
                fut: Box::pin(async move { make(ctx).await }),
                ns: ns.clone(),
            };
            match contain_panic(timed).await {
                Ok(v) => Ok(v),
                Err(message) => {
                    ns.shard_task_panics.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(shard, %message, "shard task panicked (contained)");
                    Err(ShardTaskError::Panicked(message))
                }
            }
        })?;
        Ok(ShardTask { join })
    }
}
