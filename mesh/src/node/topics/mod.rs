//! The topic handles of a live node: [`Mesh::writer`], [`Mesh::reader`] and
//! [`Mesh::topics`], and the endpoint's lifetime (created by a command to the control plane
//! that waits for its answer, removed when its last handle goes).
//!
//! **Owns:** the application side of endpoints: the create / remove commands and the
//! handles ([`Writer`], [`Reader`]; the shard task's `ShardWriter` shares [`pack`] with
//! `Writer`). **Must not touch:** matching, admission or routes (the
//! control core decides them), the sample path (the shard core).
//!
//! # Waiting for the control plane from anywhere
//!
//! Creating an endpoint is a command to the control executor with a reply. From a plain
//! thread, or from a data shard's thread (an [`Event::Sample`](crate::Event::Sample)
//! callback), the caller waits for the reply: the control plane serves commands in a task of
//! its own that waits for no shard, so this cannot deadlock (a shard callback waiting for it
//! stalls that shard for the command's duration: a few microseconds). A writer is answered
//! once its first route table reached every shard, except for a caller on a data shard's
//! thread, which would be waiting for itself: it is answered at once, and its first samples
//! may wait, parked on the origin shard, for the table. From the control
//! executor itself (a `PeerConnected` or `Matched` callback) the command is carried out on
//! the spot instead, since waiting there would wait for itself. A shard task
//! ([`ShardContext::writer`](crate::ShardContext::writer) and `reader`) awaits the answer
//! ([`Mesh::create_endpoint_async`]) instead of blocking: a writer is answered only once its
//! first route table reached every shard, the task's own included.

pub(crate) mod pack;
mod reader;
mod writer;

pub use reader::Reader;
pub use writer::Writer;

use super::control::{self, Request};
use super::reply::{self, NoAnswer};
use super::{Mesh, MeshError};
use crate::topics::{EndpointGuid, EndpointKind, EndpointSpec, Topic, TopicsSnapshot};
use shoal_proto::topics::WriterCredit;
use std::sync::Arc;
use std::time::Duration;

/// Longest a caller waits for the control plane's answer to a create command: far above
/// what a live control plane takes (one pass of its executor), short enough that a stalled
/// one is reported rather than hanging the caller.
const CONTROL_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A writer's validated declaration and how long its writes wait for credit.
fn writer_spec(topic: Topic) -> Result<(EndpointSpec, Duration), MeshError> {
    let spec = topic.validate(EndpointKind::Writer)?;
    let max_blocking = spec.qos.reliability.max_blocking_time;
    let max_blocking = if max_blocking.is_infinite() {
        Duration::MAX
    } else {
        Duration::from_nanos(max_blocking.as_nanos())
    };
    Ok((spec, max_blocking))
}

/// What [`Mesh::writer_endpoint`] gives.
pub(crate) type WriterEndpoint = (Endpoint, Option<Arc<WriterCredit>>, Duration);

/// One local endpoint: its GUID and the node that removes it when the last handle goes.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub(crate) mesh: Mesh,
    pub(crate) guid: EndpointGuid,
    pub(crate) topic: String,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // The command wakes the control plane's task (and may wait for room).
        let (mesh, guid) = (&self.mesh, self.guid);
        shoal_runtime::outside_unwind(|| mesh.remove_endpoint(guid));
    }
}

impl Mesh {
    /// Opens a writer on `topic` (see [`Writer`]). Validates the declaration here (a typed
    /// [`MeshError::TopicSpec`] without touching the node), then waits for the control
    /// plane to admit it ([`MeshError::Endpoint`] when a discovery table or the match table
    /// is full). Works from any thread and from an event callback.
    pub fn writer(&self, topic: Topic) -> Result<Writer, MeshError> {
        let (ep, credit, max_blocking) = self.writer_endpoint(topic)?;
        Ok(Writer::new(ep, credit, max_blocking))
    }

    /// A new writer endpoint (validated and admitted), its credit if it is reliable, and how
    /// long its writes wait for that credit: what [`Writer`] and the shard task's writer
    /// are built on.
    fn writer_endpoint(&self, topic: Topic) -> Result<WriterEndpoint, MeshError> {
        let (spec, max_blocking) = writer_spec(topic)?;
        let (ep, credit) = self.create_endpoint(spec)?;
        Ok((ep, credit, max_blocking))
    }

    /// [`writer_endpoint`](Self::writer_endpoint) for a task on a data shard (see
    /// [`create_endpoint_async`](Self::create_endpoint_async)).
    pub(crate) async fn writer_endpoint_async<F: std::future::Future<Output = ()>>(
        &self,
        topic: Topic,
        sleep_until: impl Fn(std::time::Instant) -> F,
    ) -> Result<WriterEndpoint, MeshError> {
        let (spec, max_blocking) = writer_spec(topic)?;
        let (ep, credit) = self.create_endpoint_async(spec, sleep_until).await?;
        Ok((ep, credit, max_blocking))
    }

    /// A reader endpoint for a task on a data shard (see
    /// [`create_endpoint_async`](Self::create_endpoint_async)).
    pub(crate) async fn reader_async<F: std::future::Future<Output = ()>>(
        &self,
        topic: Topic,
        sleep_until: impl Fn(std::time::Instant) -> F,
    ) -> Result<Reader, MeshError> {
        let spec = topic.validate(EndpointKind::Reader)?;
        let (ep, _) = self.create_endpoint_async(spec, sleep_until).await?;
        Ok(Reader::new(ep))
    }

    /// Opens a reader on `topic` (see [`Reader`]); validated and admitted as
    /// [`writer`](Self::writer) is. Its samples arrive as
    /// [`Event::Sample`](crate::Event::Sample) events (receiver and callbacks) naming its GUID.
    pub fn reader(&self, topic: Topic) -> Result<Reader, MeshError> {
        let spec = topic.validate(EndpointKind::Reader)?;
        let (ep, _) = self.create_endpoint(spec)?;
        Ok(Reader::new(ep))
    }

    /// The topics, writers, readers and matches this node knows, with per-topic counters.
    /// Reads the control plane's last published snapshot (no query to it) and the counters
    /// as they are now; empty before [`start`](Self::start). The snapshot shows what every
    /// shard already routes: after a change (an endpoint created or heard of, a match) it
    /// moves once the route table planned for it reached the shards, a few milliseconds
    /// later, so a writer that starts when it sees a match finds it routed.
    pub fn topics(&self) -> TopicsSnapshot {
        let discovery = *self
            .inner
            .ns
            .discovery_stats
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        TopicsSnapshot::of(self.snapshot(|s| s.topics.clone()), discovery)
    }

    fn create_endpoint(
        &self,
        spec: EndpointSpec,
    ) -> Result<(Endpoint, Option<Arc<WriterCredit>>), MeshError> {
        let tx = self.endpoint_commands()?;
        let topic = spec.topic.clone();
        let (reply, answer) = reply::reply();
        let cmd = Request::CreateEndpoint {
            spec: Box::new(spec),
            reply,
            // On a data shard's thread (an event callback) the answer cannot wait for the
            // route table to reach this very shard; the writer's first samples may then
            // reach the origin shard before its table does, and are parked there (bounded,
            // counted when dropped) until it comes.
            at_once: shoal_runtime::current_shard().is_some(),
        };
        if let Err(cmd) = control::run_here(&self.inner.ns, cmd) {
            // Another thread than this node's control plane: it serves commands without
            // waiting for this one, so waiting for room and for the answer is safe.
            tx.send_blocking(cmd).map_err(|_| MeshError::NotRunning)?;
        }
        self.created(answer.recv_timeout(CONTROL_REPLY_TIMEOUT), topic)
    }

    /// [`create_endpoint`](Self::create_endpoint) for a task on one of this node's data
    /// shards: it awaits room and the answer, so the shard runs on meanwhile (the control
    /// plane answers a new writer only once its route table reached every shard, this one
    /// included). `sleep_until` is the executor's timer.
    pub(crate) async fn create_endpoint_async<F: std::future::Future<Output = ()>>(
        &self,
        spec: EndpointSpec,
        sleep_until: impl Fn(std::time::Instant) -> F,
    ) -> Result<(Endpoint, Option<Arc<WriterCredit>>), MeshError> {
        let tx = self.endpoint_commands()?;
        let topic = spec.topic.clone();
        let (reply, answer) = reply::reply();
        let cmd = Request::CreateEndpoint {
            spec: Box::new(spec),
            reply,
            at_once: false,
        };
        tx.send(cmd).await.map_err(|_| MeshError::NotRunning)?;
        let r = answer.recv(CONTROL_REPLY_TIMEOUT, sleep_until).await;
        self.created(r, topic)
    }

    /// The control plane's command queue, if the node runs.
    fn endpoint_commands(
        &self,
    ) -> Result<&shoal_runtime::channel::IngressSender<Request>, MeshError> {
        if self
            .inner
            .ns
            .stopping
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return Err(MeshError::NotRunning);
        }
        self.inner.cmd.get().ok_or(MeshError::NotRunning)
    }

    /// The endpoint handle for the control plane's answer.
    fn created(
        &self,
        answer: Result<Result<control::Created, crate::topics::TopicError>, NoAnswer>,
        topic: String,
    ) -> Result<(Endpoint, Option<Arc<WriterCredit>>), MeshError> {
        let (guid, credit) = match answer {
            Ok(r) => r?,
            Err(NoAnswer::Timeout) => return Err(MeshError::ControlTimeout),
            Err(NoAnswer::Gone) => return Err(MeshError::NotRunning),
        };
        Ok((
            Endpoint {
                mesh: self.clone(),
                guid,
                topic,
            },
            credit,
        ))
    }

    /// Removes a local endpoint (its last handle went). Never waits on an executor thread.
    fn remove_endpoint(&self, guid: EndpointGuid) {
        let ns = &self.inner.ns;
        let Some(tx) = self.inner.cmd.get() else {
            return;
        };
        let Err(cmd) = control::run_here(ns, Request::RemoveEndpoint(guid)) else {
            return;
        };
        let cmd = match tx.try_send(cmd) {
            Ok(()) => return,
            // Stopped: the endpoint went with the control plane.
            Err(shoal_runtime::TrySendError::Closed(_)) => return,
            Err(shoal_runtime::TrySendError::Full(cmd)) => cmd,
        };
        if shoal_runtime::current_executor().is_some() {
            // An executor must not block (its node may be shutting down and never drain the
            // queue); a helper waits for room instead.
            let tx = tx.clone();
            let _ = std::thread::Builder::new()
                .name("shoal-mesh-remove".into())
                .spawn(move || {
                    let _ = tx.send_blocking(cmd);
                });
        } else {
            let _ = tx.send_blocking(cmd);
        }
    }
}
