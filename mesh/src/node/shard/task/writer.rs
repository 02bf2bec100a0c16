//! [`ShardWriter`]: a topic writer of a shard task, packing its samples on the shard and
//! handing each batch straight to the shard's core.
//!
//! **Owns:** the shard-task writer handle (its packer and its publishing stream). **Must
//! not touch:** numbering and packing (the shared [`Packer`]), where samples go (the core
//! routes the batch by the writer's route).

use super::Origin;
use crate::node::publisher::Cancelled;
use crate::node::topics::pack::Packer;
use crate::node::topics::Endpoint;
use crate::node::PublishError;
use crate::topics::EndpointGuid;
use shoal_proto::topics::WriterCredit;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A writer on one topic for a shard task, opened with
/// [`ShardContext::writer`](super::ShardContext::writer): the [`Writer`](crate::topics::Writer) of
/// the shard. The same semantics, errors and counters: each write numbers its sample (1, 2,
/// ... per writer) and appends it to the open Samples frame of the batch; the batch goes to
/// the shard's core, which routes it by the writer's route (its matched readers, local and
/// remote), once it holds [`batch_bytes`](Self::batch_bytes), at [`flush`](Self::flush) or
/// [`try_flush`](Self::try_flush), or when the writer is dropped. Unlike `Writer`'s, the
/// hand-over is a call into the core in the task's own poll: no ingress queue, no other
/// thread, no copy. Flush before waiting for anything, as with a buffered writer.
///
/// Backpressure is an `.await` that lets the shard's link writers run: under the Block
/// policy a batch that does not fit a link's outbound queue waits for room (toward a link of
/// another shard, for the ring to it). [`try_write`](Self::try_write) never waits and says
/// why it failed ([`PublishError::Full`]: no room now, sample not added;
/// [`PublishError::TooLarge`]; [`PublishError::Stopped`]). As for `Writer`, a write needs no
/// connected peer.
///
/// A reliable writer that keeps all its history (`history_keep_all`) waits for its readers
/// as `Writer` does, asynchronously: once `max_samples` samples are not yet acknowledged by
/// every matched reliable reader, a write hands over what is pending and awaits
/// acknowledgements (the shard serves its links meanwhile), at most the writer's
/// `max_blocking_time`, then fails with [`PublishError::HistoryFull`] (`try_write` at once).
///
/// Lives on the shard's thread (not `Send`). Dropping it hands what is pending to the core
/// without waiting (what must wait is settled by a helper task; only what a stopping node no
/// longer takes is counted in
/// [`MeshStats::unflushed_discarded`](crate::MeshStats::unflushed_discarded)), then removes
/// the endpoint. The pending batch is routed by the core before the removal is even sent,
/// unless an earlier `try_` batch of this writer still waits for room: then the batch
/// follows it from a helper task, and should the removal's route table reach the shard
/// first, it is dropped and counted as `dropped_unrouted_samples` (as a thread
/// [`Writer`](crate::topics::Writer)'s can be). Keeps the node alive like a
/// [`Mesh`](crate::Mesh) clone.
pub struct ShardWriter {
    ep: Endpoint,
    pack: Packer,
    /// This writer's own stream into the core (its batches keep their order).
    origin: Origin,
}

impl std::fmt::Debug for ShardWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardWriter")
            .field("topic", &self.ep.topic)
            .field("next_seq", &self.pack.next_seq())
            .field("pending", &self.pack.pending())
            .finish()
    }
}

impl ShardWriter {
    pub(super) fn new(
        ep: Endpoint,
        credit: Option<Arc<WriterCredit>>,
        max_blocking: Duration,
        origin: Origin,
    ) -> ShardWriter {
        let pack = Packer::new(ep.guid, &origin.ns().cfg, credit, max_blocking);
        ShardWriter { ep, pack, origin }
    }

    /// Hands a batch over once it holds at least `bytes` (frames included; at least one
    /// sample per batch whatever the value: 0 hands every sample over alone). Default
    /// [`DEFAULT_BATCH_BYTES`](crate::node::DEFAULT_BATCH_BYTES); capped at a quarter of
    /// `max_outbound_queue_bytes`, as for [`Writer`](crate::topics::Writer).
    pub fn with_batch_bytes(mut self, bytes: usize) -> ShardWriter {
        self.pack.set_batch_bytes(bytes);
        self
    }

    /// The batch size this writer hands over at.
    pub fn batch_bytes(&self) -> usize {
        self.pack.batch_bytes()
    }

    /// The writer's GUID (the `writer` of its samples' runs and events).
    pub fn guid(&self) -> EndpointGuid {
        self.ep.guid
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.ep.topic
    }

    /// The sequence number the next sample gets.
    pub fn next_seq(&self) -> u64 {
        self.pack.next_seq()
    }

    /// Samples written but not handed over yet.
    pub fn pending(&self) -> usize {
        self.pack.pending()
    }

    /// The largest payload one sample may carry (one Samples frame of `max_message_bytes`).
    pub fn max_payload(&self) -> usize {
        self.pack.max_payload()
    }

    /// Writes a sample and returns its sequence number; hands the batch over when it is
    /// full, awaiting room (and, for a reliable writer, credit) as the type's docs say.
    pub async fn write(&mut self, payload: &[u8]) -> Result<u64, PublishError> {
        if !self.pack.has_credit() {
            // What can never be accepted is said before waiting.
            self.check(payload)?;
            // Readers acknowledge only what reached them: what is pending goes first.
            self.flush().await?;
            let origin = &self.origin;
            let running = || origin.running();
            self.pack
                .credit_async(running, shoal_runtime::time::sleep_until)
                .await?;
        }
        let seq = self.add(payload)?;
        if self.pack.is_full() {
            self.flush().await?;
        }
        Ok(seq)
    }

    /// Writes a sample without ever waiting and returns its sequence number.
    /// [`PublishError::Full`] (sample not added, its number not used) when the batch is
    /// full and cannot be handed over now: under the Block policy a link's outbound queue
    /// has no room for it, or an earlier batch of this writer still waits to go out.
    /// [`PublishError::HistoryFull`] at once for a reliable writer without credit.
    pub fn try_write(&mut self, payload: &[u8]) -> Result<u64, PublishError> {
        crate::node::topics::pack::try_write(self, payload)
    }

    /// Hands the pending samples to the core and awaits what must wait (link room under the
    /// Block policy, ring room toward another shard). If this future is dropped before the
    /// batch went into the core (an earlier one of this writer still waited), the batch is
    /// dropped with it and counted in
    /// [`MeshStats::unflushed_discarded`](crate::MeshStats::unflushed_discarded); once in,
    /// it goes out whatever happens to the call.
    pub async fn flush(&mut self) -> Result<(), PublishError> {
        if self.pack.pending() == 0 {
            return Ok(());
        }
        self.origin.running()?;
        let Some(batch) = self.pack.take() else {
            return Ok(());
        };
        let ns = self.ep.mesh.inner.ns.clone();
        let mut guard = Cancelled {
            ns: &ns,
            lost: batch.weight() as u64,
        };
        self.origin.settled().await;
        guard.lost = 0;
        self.origin.submit(batch).await;
        Ok(())
    }

    /// Hands the pending samples to the core without waiting; [`PublishError::Full`]
    /// (batch kept) when, under the Block policy, a link's outbound queue has no room for
    /// it now or an earlier batch of this writer still waits to go out.
    pub fn try_flush(&mut self) -> Result<(), PublishError> {
        if self.pack.pending() == 0 {
            return Ok(());
        }
        self.origin.running()?;
        if !self.origin.has_room(self.pack.bytes()) {
            return Err(PublishError::Full);
        }
        if let Some(batch) = self.pack.take() {
            self.origin.submit_now(batch);
        }
        Ok(())
    }

    /// Checks the sample as a publish is checked (node running, size) and packs it.
    fn add(&mut self, payload: &[u8]) -> Result<u64, PublishError> {
        self.origin.running()?;
        self.pack.add(payload)
    }

    /// What a publish checks: node running, size; and a sequence number left.
    fn check(&self, payload: &[u8]) -> Result<(), PublishError> {
        self.origin.running()?;
        self.pack.check(payload)
    }
}

impl Drop for ShardWriter {
    fn drop(&mut self) {
        let pending = self.pack.pending();
        if pending == 0 {
            return;
        }
        match self.origin.running() {
            Ok(()) => {
                if let Some(batch) = self.pack.take() {
                    self.origin.submit_behind(batch);
                }
            }
            Err(e) => {
                let lost = pending as u64;
                let ns = self.origin.ns();
                ns.unflushed_discarded.fetch_add(lost, Ordering::Relaxed);
                tracing::warn!(error = %e, lost, "shard writer dropped with samples it could not hand over");
            }
        }
        // `ep` drops after this body: the endpoint is removed once its samples are in the core.
    }
}

impl crate::node::topics::pack::Handover for ShardWriter {
    fn pack(&self) -> &crate::node::topics::pack::Packer {
        &self.pack
    }

    fn running(&self) -> Result<(), PublishError> {
        self.origin.running()
    }

    fn pack_mut(&mut self) -> &mut crate::node::topics::pack::Packer {
        &mut self.pack
    }

    fn try_flush(&mut self) -> Result<(), PublishError> {
        ShardWriter::try_flush(self)
    }
}
