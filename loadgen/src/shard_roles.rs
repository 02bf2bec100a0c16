//! `pub --on-shard` and `sub --on-shard`: the roles' application side as a shard task
//! (`Mesh::spawn_on_shard`), with the thread roles' traffic, checks and report.
//!
//! - Publishing: the thread publisher's schedule ([`Pacing`]) driven from the origin shard,
//!   each payload written straight into the shard's core (broadcasts through
//!   [`ShardContext::broadcast`]); a wait for room is an `.await` during which the shard's
//!   link writers run.
//! - Receiving: the task holds the shard's [`ShardInbox`](shoal_mesh::ShardInbox) and
//!   accounts each batch in place: a run of samples by one lookup of its reader and one
//!   sequence check per run, each payload read as a slice of the read buffer (no per-sample
//!   clone or event), a message by its payload.
//!
//! **Owns:** the shard tasks of the roles and their async publishing loop. **Must not
//! touch:** what the roles set up and report (`roles.rs`), the traffic shape and its stamps
//! (`traffic.rs`), the mesh's internals (public API only).

use crate::demo::RunError;
use crate::shoal::{sink_error, Arena, SetupError};
use crate::topics::{account, ReaderState};
use crate::traffic::{Live, Pacing, PubReport, Receiver, Shape, SinkError, Step, END_MARKER_RETRY};
use ahash::AHashMap;
use shoal_mesh::node::shard_task::Delivered;
use shoal_mesh::topics::EndpointGuid;
use shoal_mesh::{ErrorLog, EventReceiver, Mesh, ShardContext, ShardTask};
use shoal_runtime::time::{sleep, sleep_until, timeout};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Entries the receiving task's inbox holds (a run of samples or a message each): as many
/// as the thread subscriber takes per batch.
const INBOX_ENTRIES: usize = 4096;
/// How often a waiting receiver looks at its deadline.
const CHECK_EVERY: Duration = Duration::from_millis(50);

/// Where a shard task's publisher writes (the async form of [`crate::traffic::Sink`]).
pub(crate) trait ShardSink {
    /// Writes one payload (may buffer; waits for room).
    async fn send(&mut self, payload: &[u8]) -> Result<(), SinkError>;
    /// Pushes out anything buffered.
    async fn flush(&mut self) -> Result<(), SinkError>;
}

/// [`crate::traffic::publish`] in a shard task: the same schedule, stamps and end marker,
/// its waits `.await`s.
pub(crate) async fn publish(
    sink: &mut impl ShardSink,
    shape: &Shape,
    id: u64,
    live: &Live,
    stop: &AtomicBool,
) -> Result<PubReport, SinkError> {
    let mut p = Pacing::new(shape, id);
    loop {
        match p.next(stop) {
            Step::Done => break,
            Step::Wait(due) => {
                sink.flush().await?;
                sleep_until(due).await;
            }
            Step::Send(len) => match sink.send(&p.payload()[..len]).await {
                Ok(()) => p.sent(live),
                Err(SinkError::Refused(why)) => {
                    p.refused(&why);
                    sleep(Duration::from_millis(1)).await;
                }
                Err(e) => return Err(e),
            },
        }
    }
    let give_up = Instant::now() + END_MARKER_RETRY;
    loop {
        match sink.send(p.end_marker()).await {
            Ok(()) => break,
            Err(SinkError::Refused(_)) if Instant::now() < give_up => {
                sleep(Duration::from_millis(5)).await
            }
            Err(e) => return Err(e),
        }
    }
    sink.flush().await?;
    Ok(p.report())
}

/// Broadcasts from the shard task, each payload cut from an [`Arena`] (the API takes owned
/// `Bytes`; the node's core takes it as it is).
struct Broadcasts<'a> {
    ctx: &'a mut ShardContext,
    arena: Arena,
}

impl ShardSink for Broadcasts<'_> {
    async fn send(&mut self, payload: &[u8]) -> Result<(), SinkError> {
        let b = self.arena.bytes(payload);
        self.ctx.broadcast(b).await.map_err(sink_error)
    }

    async fn flush(&mut self) -> Result<(), SinkError> {
        // Each broadcast is in the links' queues already; their writers flush on their own.
        Ok(())
    }
}

fn task_error(e: impl std::fmt::Display) -> RunError {
    RunError::Usage(format!("shard task: {e}"))
}

/// `pub --on-shard` without a topic: broadcasts `shape` from a shard task of `mesh`.
pub(crate) fn publish_broadcasts(
    mesh: &Mesh,
    shape: Shape,
    live: Arc<Live>,
    stop: Arc<AtomicBool>,
) -> Result<PubReport, RunError> {
    let id = rand::random();
    let task = mesh
        .spawn_on_shard(move |mut ctx| async move {
            let mut sink = Broadcasts {
                ctx: &mut ctx,
                arena: Arena::default(),
            };
            publish(&mut sink, &shape, id, &live, &stop).await
        })
        .map_err(SetupError::from)?;
    task.join_blocking()
        .map_err(task_error)?
        .map_err(RunError::from)
}

/// What a receiving task takes.
pub(crate) enum Wanted {
    /// Samples for these local readers (others' are counted as foreign).
    Samples(Vec<ReaderState>),
    /// Messages, until `publishers` end markers are in (0: the full time).
    Messages {
        /// Rates, loss, latency.
        recv: Box<Receiver>,
        /// End markers to wait for.
        publishers: usize,
    },
}

impl Wanted {
    fn done(&mut self) -> bool {
        match self {
            Wanted::Samples(readers) => readers.iter_mut().all(ReaderState::done),
            Wanted::Messages { recv, publishers } => recv.done(*publishers),
        }
    }
}

/// What a receiving task took: its `Wanted` back, and the samples of readers it was not
/// given.
pub(crate) struct Got {
    pub(crate) wanted: Wanted,
    pub(crate) foreign: u64,
}

/// A receiving shard task, its inbox open.
pub(crate) struct ShardReceiver {
    task: ShardTask<Result<Got, String>>,
    ended: Arc<AtomicBool>,
}

/// Starts a shard task on `mesh` that takes what `wanted` asks for from the shard's inbox
/// until `until` or until it is done; returns once its inbox is open (from then on the
/// shard's deliveries go to it). `live` counts what it took, for a progress line.
pub(crate) fn start_receiving(
    mesh: &Mesh,
    wanted: Wanted,
    until: Instant,
    live: Arc<AtomicU64>,
) -> Result<ShardReceiver, RunError> {
    let open = Arc::new(AtomicBool::new(false));
    let ended = Arc::new(AtomicBool::new(false));
    let (o, e) = (open.clone(), ended.clone());
    let task = mesh
        .spawn_on_shard(move |ctx| async move {
            let got = receive(ctx, wanted, until, &live, &o).await;
            e.store(true, Ordering::Release);
            got
        })
        .map_err(SetupError::from)?;
    let r = ShardReceiver { task, ended };
    crate::shoal::wait_for(10, "the shard task's inbox", || {
        open.load(Ordering::Acquire) || r.ended.load(Ordering::Acquire)
    })?;
    Ok(r)
}

impl ShardReceiver {
    /// Waits for the task's end, logging the node's error events meanwhile (as the thread
    /// subscriber does).
    pub(crate) fn finish(self, events: &mut EventReceiver) -> Result<Got, RunError> {
        let mut errors = ErrorLog::new();
        while !self.ended.load(Ordering::Acquire) {
            errors.flush();
            match events.recv_timeout(CHECK_EVERY) {
                Some(ev) if errors.note(&ev) => {}
                Some(other) => tracing::debug!(?other, "mesh event"),
                None => {}
            }
        }
        errors.flush();
        self.task
            .join_blocking()
            .map_err(task_error)?
            .map_err(task_error)
    }
}

async fn receive(
    ctx: ShardContext,
    mut wanted: Wanted,
    until: Instant,
    live: &AtomicU64,
    open: &AtomicBool,
) -> Result<Got, String> {
    let Some(mut inbox) = ctx.inbox(INBOX_ENTRIES) else {
        return Err("the shard's inbox is held by another task".into());
    };
    open.store(true, Ordering::Release);
    let by_guid: AHashMap<EndpointGuid, usize> = match &wanted {
        Wanted::Samples(rs) => rs.iter().enumerate().map(|(i, r)| (r.guid, i)).collect(),
        Wanted::Messages { .. } => AHashMap::new(),
    };
    let (mut n, mut foreign) = (0u64, 0u64);
    let mut batch = Vec::with_capacity(INBOX_ENTRIES);
    while Instant::now() < until && !wanted.done() {
        if timeout(CHECK_EVERY, inbox.recv_batch(&mut batch))
            .await
            .is_err()
        {
            continue;
        }
        for d in batch.drain(..) {
            match (d, &mut wanted) {
                (Delivered::Samples(run), Wanted::Samples(readers)) => {
                    let s = &run.samples;
                    let to = by_guid.get(&run.reader).map(|&i| &mut readers[i]);
                    let payloads = s.iter().map(|(_, p)| p);
                    let span = (s.first_seq, u64::from(s.count));
                    account(to, s.writer, span, payloads, &mut n, &mut foreign);
                }
                (Delivered::Message(m), Wanted::Messages { recv, .. }) => {
                    recv.on_payload(&m.payload);
                    n += 1;
                }
                (other, _) => tracing::debug!(?other, "delivery not measured"),
            }
        }
        live.store(n, Ordering::Relaxed);
    }
    drop(inbox);
    drop(ctx);
    Ok(Got { wanted, foreign })
}
