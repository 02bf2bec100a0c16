//! `pub --on-shard` and `sub --on-shard`: the roles' application side as a shard task
//! (`Mesh::spawn_on_shard`), with the thread roles' traffic, checks and report.
//!
//! - Publishing: the thread publisher's schedule ([`Pacing`]) driven from the origin shard,
//!   each payload written straight into the shard's core (topic samples through a
//!   [`ShardWriter`], broadcasts through [`ShardContext::broadcast`]); a wait for room is
//!   an `.await` during which the shard's link writers run. [`TopicWriter`] is the writer
//!   either way, so `pub --topic` and `bench --topics` take the same steps for both.
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
use crate::topics::{account, ReaderState, TopicSink};
use crate::traffic::{Live, Pacing, PubReport, Receiver, Shape, SinkError, Step, END_MARKER_RETRY};
use ahash::AHashMap;
use shoal_mesh::node::shard_task::Delivered;
use shoal_mesh::topics::{EndpointGuid, Topic};
use shoal_mesh::{
    ErrorLog, EventReceiver, Mesh, PublishError, ShardContext, ShardTask, ShardWriter,
};
use shoal_runtime::time::{sleep, sleep_until, timeout};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
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

/// A shard task's topic writer as a sink; a sample its history cannot take yet (a reliable
/// keep-all writer whose readers lag past its max blocking time) is written again, as
/// [`crate::topics::TopicSink`] does (skipping it would be a loss).
struct TopicSamples(ShardWriter);

impl ShardSink for TopicSamples {
    async fn send(&mut self, payload: &[u8]) -> Result<(), SinkError> {
        loop {
            match self.0.write(payload).await {
                Ok(_) => return Ok(()),
                Err(PublishError::HistoryFull { .. }) => continue,
                Err(e) => return Err(sink_error(e)),
            }
        }
    }

    async fn flush(&mut self) -> Result<(), SinkError> {
        self.0.flush().await.map_err(sink_error)
    }
}

/// A topic writer on this node: an application thread's ([`TopicSink`]) or a shard task's
/// (`--on-shard`), opened before the run so its matches can be awaited.
pub(crate) enum TopicWriter {
    /// Written from the calling thread.
    Thread(Box<TopicSink>),
    /// Written from a shard task.
    Shard(ShardWriterTask),
}

impl TopicWriter {
    /// Opens a writer of `decl` on `mesh` (in a shard task when `on_shard`), handing samples
    /// over in batches of `batch_bytes`.
    pub(crate) fn open(
        mesh: &Mesh,
        decl: Topic,
        batch_bytes: usize,
        on_shard: bool,
    ) -> Result<TopicWriter, RunError> {
        if !on_shard {
            let w = mesh.writer(decl).map_err(SetupError::from)?;
            return Ok(TopicWriter::Thread(Box::new(TopicSink::new(
                w,
                batch_bytes,
            ))));
        }
        ShardWriterTask::open(mesh, decl, batch_bytes).map(TopicWriter::Shard)
    }

    /// The writer's GUID.
    pub(crate) fn guid(&self) -> EndpointGuid {
        match self {
            TopicWriter::Thread(s) => s.guid(),
            TopicWriter::Shard(t) => t.guid,
        }
    }

    /// Publishes `shape` (see [`crate::traffic::publish`]).
    pub(crate) fn publish(
        &mut self,
        shape: &Shape,
        live: &Arc<Live>,
        stop: &Arc<AtomicBool>,
    ) -> Result<PubReport, RunError> {
        match self {
            TopicWriter::Thread(s) => {
                let sink: &mut TopicSink = s;
                Ok(crate::traffic::publish(
                    sink,
                    shape,
                    rand::random(),
                    live,
                    stop,
                )?)
            }
            TopicWriter::Shard(t) => t.publish(*shape, live.clone(), stop.clone()),
        }
    }

    /// Closes the writer (after the node stopped, so that its queued samples went out
    /// before its withdrawal).
    pub(crate) fn close(self) {
        if let TopicWriter::Shard(t) = self {
            t.close();
        }
    }
}

type Run = (Shape, Arc<Live>, Arc<AtomicBool>);

/// A shard task holding a topic writer: it opens it at once, publishes when told, and keeps
/// it open until told (or until the node stops).
pub(crate) struct ShardWriterTask {
    guid: EndpointGuid,
    run: mpsc::Sender<Run>,
    report: mpsc::Receiver<Result<PubReport, SinkError>>,
    release: Arc<AtomicBool>,
    task: ShardTask<Result<(), String>>,
}

impl ShardWriterTask {
    fn open(mesh: &Mesh, decl: Topic, batch_bytes: usize) -> Result<ShardWriterTask, RunError> {
        let (guid_tx, guid_rx) = mpsc::channel();
        let (run, run_rx) = mpsc::channel::<Run>();
        let (report_tx, report) = mpsc::channel();
        let release = Arc::new(AtomicBool::new(false));
        let rel = release.clone();
        let task = mesh
            .spawn_on_shard(move |ctx| async move {
                let w = ctx.writer(decl).await.map_err(|e| e.to_string())?;
                let _ = guid_tx.send(w.guid());
                let mut sink = TopicSamples(w.with_batch_bytes(batch_bytes));
                let (shape, live, stop) = loop {
                    match run_rx.try_recv() {
                        Ok(r) => break r,
                        Err(mpsc::TryRecvError::Empty) => sleep(Duration::from_millis(1)).await,
                        Err(mpsc::TryRecvError::Disconnected) => return Ok(()),
                    }
                };
                let rep = publish(&mut sink, &shape, rand::random(), &live, &stop).await;
                let _ = report_tx.send(rep);
                // Open until told, so the node stops with the writer alive, as the thread
                // publisher does: its queued samples go out before its withdrawal.
                while !rel.load(Ordering::Acquire) {
                    sleep(Duration::from_millis(10)).await;
                }
                drop(sink);
                drop(ctx);
                Ok(())
            })
            .map_err(SetupError::from)?;
        match guid_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(guid) => Ok(ShardWriterTask {
                guid,
                run,
                report,
                release,
                task,
            }),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(ended(task)),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(task_error("no writer after 10 s")),
        }
    }

    fn publish(
        &mut self,
        shape: Shape,
        live: Arc<Live>,
        stop: Arc<AtomicBool>,
    ) -> Result<PubReport, RunError> {
        let _ = self.run.send((shape, live, stop));
        match self.report.recv() {
            Ok(rep) => Ok(rep?),
            Err(_) => Err(task_error("the writer task ended before its report")),
        }
    }

    fn close(self) {
        self.release.store(true, Ordering::Release);
        // Cancelled when the node stopped first: nothing is lost.
        if let Err(e) = self.task.join_blocking() {
            tracing::debug!(%e, "writer task");
        }
    }
}

/// Why a task that should have answered did not: its error (it ended).
fn ended(task: ShardTask<Result<(), String>>) -> RunError {
    match task.join_blocking() {
        Ok(Err(e)) => task_error(e),
        Ok(Ok(())) => task_error("ended early"),
        Err(e) => task_error(e),
    }
}
