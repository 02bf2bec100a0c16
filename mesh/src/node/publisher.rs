//! [`Publisher`]: many messages per hand-off from an application thread to the origin shard
//! (the why and the trade-offs are in its docs).
//!
//! **Owns:** the batching handle: whole Data frames packed on the application's thread. **Must not
//! touch:** routing (the origin shard's core does it).

use super::recycle::Recycler;
use super::shard::Publish;
use super::{Mesh, PublishError};
use crate::proto::MsgIdGen;
use crate::wire::{encode_data_into, DATA_HEADER_LEN};
use crate::PeerId;
use bytes::BytesMut;
use shoal_runtime::channel::IngressSender;
use shoal_runtime::TrySendError;
use std::sync::atomic::Ordering;

/// Default [`Publisher::batch_bytes`]: big enough that the per-batch work (three thread
/// wake-ups on the way to a subscriber: shard, peer shard, receiving thread) vanishes behind
/// the bytes, small enough to stay in the CPU caches between the two threads. 32 KiB against
/// 16 KiB: 64 B topic samples +12 % (six pairs, 1.03-1.25), 1 KiB about even; 64 KiB gained
/// nothing more at 64 B and lost at 1 KiB (`bench/notes/topics.md`, "Batches of 32 KiB").
pub const DEFAULT_BATCH_BYTES: usize = 32 * 1024;

/// Buffers allocated per this many bytes of batches (one allocation serves several batches).
const ARENA_BATCHES: usize = 4;
/// Bytes of spare blocks a publisher keeps for reuse; in steady state about as many as its
/// blocks in flight (bounded by the ingress and the links' outbound queues), this caps them
/// besides, as a count of its blocks (see [`spare_blocks`]): 16 MiB, what 256 blocks of 16 KiB
/// batches were, is what the publisher's 1 KiB rate needed (512 of them gained nothing).
pub(crate) const SPARE_BYTES: usize = 16 << 20;

/// The spare blocks of [`SPARE_BYTES`] for blocks of `block` bytes (at least 4, at most 256:
/// a block per message when batching is off).
pub(crate) fn spare_blocks(block: usize) -> usize {
    (SPARE_BYTES / block.max(1)).clamp(4, 256)
}

/// A batching publishing handle for one application thread. Created by
/// [`Mesh::publisher`]; keeps the node alive like a [`Mesh`] clone.
///
/// Each [`Mesh::broadcast`] is one entry in the origin shard's ingress queue, and on the
/// shard one pop, one id, one routing decision, one budget reservation per link and one copy
/// into the link's write buffer. At small payloads that per-message work, on two threads,
/// costs more than the bytes. A `Publisher` encodes whole Data frames back to back into one
/// buffer on the application thread (the copy the application would make anyway), message
/// ids included; the shard routes the run once, reserves its bytes once per link and hands
/// the buffer to the socket as it is, without reading it (the frames are in the publishing
/// core's cache; having the shard write the ids, tried first, cost a cache miss per frame).
///
/// Ids: each publisher numbers its messages from its own random 64-bit starting point, as
/// each originating shard does (`MsgIdGen`), so ids of different generators of one node
/// collide only if two random starting points fall within one run's length of each other.
///
/// The price is latency: a message waits in the batch until the batch holds
/// [`Publisher::batch_bytes`], until a message for another destination arrives, or until
/// [`flush`](Publisher::flush) (or one of its forms). Flush before waiting for anything, as
/// with a buffered writer. Messages of one `Publisher` keep their order; against messages sent
/// through [`Mesh`] directly (or another `Publisher`) they are ordered only from the flush on.
///
/// Bounds: a batch is at most `batch_bytes` plus one message; the ingress counts a batch as
/// the number of messages it holds, so batching never lets a publisher run further ahead of
/// its shard (`publish_queue_capacity` messages) than publishing message by message. A link
/// queues a batch whole or not at all: under [`super::OverflowPolicy::DropNewest`] a batch
/// that does not fit is dropped whole (and counted per message, as always).
///
/// For large payloads batching gains nothing and costs a copy: [`Mesh::broadcast`] takes an
/// owned [`bytes::Bytes`] and writes it to the socket uncopied.
///
/// Every method checks what [`Mesh::broadcast`] checks (payload size, node running, a peer
/// connected) when the message is added, and fails the same way. The waiting forms wait for
/// ingress room only when a full batch is handed over. Dropping a `Publisher` flushes it:
/// waiting for room on a plain thread (as a buffered writer does); on an executor thread or
/// while unwinding from a panic without waiting, counting what did not fit in
/// [`super::MeshStats::unflushed_discarded`].
#[derive(Debug)]
pub struct Publisher {
    mesh: Mesh,
    buf: BytesMut,
    /// Destination of the messages in `buf`.
    dst: PeerId,
    /// Messages in `buf`.
    count: usize,
    batch_bytes: usize,
    ids: MsgIdGen,
    /// Blocks whose batches the shard has written and dropped, reused instead of freed on
    /// the shard's thread and allocated anew here (see [`super::recycle`]).
    blocks: Recycler,
}

/// How a hand-over may wait.
pub(crate) enum Wait {
    Block,
    Never,
}

/// Hands a batch (a [`Publish::Batch`] or [`Publish::Samples`]) to the origin shard's
/// ingress; under [`Wait::Never`] a full ingress gives it back to `buf` and `count`, in front
/// of what the buffer holds since (its frames are closed, so the next message or sample opens
/// a new one). Shared by [`Publisher`] and the topics `Writer`.
pub(crate) fn send_batch(
    tx: &IngressSender<Publish>,
    batch: Publish,
    wait: Wait,
    buf: &mut BytesMut,
    count: &mut usize,
) -> Result<(), PublishError> {
    let refused = match wait {
        Wait::Block => return tx.send_blocking(batch).map_err(|_| PublishError::Stopped),
        Wait::Never => match tx.try_send(batch) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Closed(_)) => return Err(PublishError::Stopped),
            Err(TrySendError::Full(b)) => b,
        },
    };
    if let Publish::Batch {
        mut frames,
        count: n,
        ..
    }
    | Publish::Samples {
        mut frames,
        count: n,
        ..
    } = refused
    {
        frames.unsplit(std::mem::take(buf));
        *buf = frames;
        *count = n;
    }
    Err(PublishError::Full)
}

impl Publisher {
    pub(super) fn new(mesh: Mesh) -> Publisher {
        let ids = MsgIdGen::new(mesh.inner.ns.me, rand::random());
        Publisher {
            mesh,
            buf: BytesMut::new(),
            dst: PeerId::ZERO,
            count: 0,
            batch_bytes: 0,
            ids,
            blocks: Recycler::new(spare_blocks(DEFAULT_BATCH_BYTES * ARENA_BATCHES)),
        }
        .with_batch_bytes(DEFAULT_BATCH_BYTES)
    }

    /// Hands a batch over once it holds at least `bytes` (frames included; at least one
    /// message per batch whatever the value). Default [`DEFAULT_BATCH_BYTES`]. Capped at a
    /// quarter of `max_outbound_queue_bytes`, so a link's queue bound holds for batches as it
    /// does for single messages.
    pub fn with_batch_bytes(mut self, bytes: usize) -> Publisher {
        let cap = self.mesh.inner.ns.cfg.max_outbound_queue_bytes / 4;
        self.batch_bytes = bytes.min(cap).max(1);
        self.blocks
            .set_max(spare_blocks(self.batch_bytes.saturating_mul(ARENA_BATCHES)));
        self
    }

    /// The batch size this publisher hands over at.
    pub fn batch_bytes(&self) -> usize {
        self.batch_bytes
    }

    /// Messages added but not handed over yet.
    pub fn pending(&self) -> usize {
        self.count
    }

    /// Adds a broadcast; hands the batch over when it is full, blocking this thread while the
    /// ingress has no room. Never call it on an executor thread.
    pub fn broadcast_blocking(&mut self, payload: &[u8]) -> Result<(), PublishError> {
        self.send_blocking(PeerId::ZERO, payload)
    }

    /// Adds a message for `peer` (relayed if it is not a neighbour); hands the batch over
    /// when it is full, blocking this thread while the ingress has no room.
    pub fn send_blocking(&mut self, peer: PeerId, payload: &[u8]) -> Result<(), PublishError> {
        if self.count > 0 && peer != self.dst {
            self.flush_blocking()?;
        }
        self.add(peer, payload)?;
        if self.buf.len() >= self.batch_bytes {
            self.flush_blocking()?;
        }
        Ok(())
    }

    /// Adds a broadcast; hands the batch over when it is full, waiting asynchronously for
    /// ingress room.
    pub async fn broadcast(&mut self, payload: &[u8]) -> Result<(), PublishError> {
        self.send(PeerId::ZERO, payload).await
    }

    /// Adds a message for `peer`; hands the batch over when it is full, waiting
    /// asynchronously for ingress room.
    pub async fn send(&mut self, peer: PeerId, payload: &[u8]) -> Result<(), PublishError> {
        if self.count > 0 && peer != self.dst {
            self.flush().await?;
        }
        self.add(peer, payload)?;
        if self.buf.len() >= self.batch_bytes {
            self.flush().await?;
        }
        Ok(())
    }

    /// Adds a broadcast without ever waiting. [`PublishError::Full`] (message not added) when
    /// the batch is full, or holds messages for another destination, and cannot be handed
    /// over now.
    pub fn try_broadcast(&mut self, payload: &[u8]) -> Result<(), PublishError> {
        self.try_send(PeerId::ZERO, payload)
    }

    /// Adds a message for `peer` without ever waiting; see [`try_broadcast`](Self::try_broadcast).
    pub fn try_send(&mut self, peer: PeerId, payload: &[u8]) -> Result<(), PublishError> {
        if self.count > 0 && (peer != self.dst || self.buf.len() >= self.batch_bytes) {
            self.try_flush()?;
        }
        self.add(peer, payload)?;
        if self.buf.len() >= self.batch_bytes {
            // Added either way; a batch that does not fit now goes with the next call.
            match self.try_flush() {
                Ok(()) | Err(PublishError::Full) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Hands the pending messages over, blocking this thread while the ingress has no room.
    pub fn flush_blocking(&mut self) -> Result<(), PublishError> {
        self.hand_over(Wait::Block)
    }

    /// Hands the pending messages over without waiting; [`PublishError::Full`] (batch kept)
    /// when the ingress or, under the Block policy, a link's outbound queue has no room now.
    pub fn try_flush(&mut self) -> Result<(), PublishError> {
        self.hand_over(Wait::Never)
    }

    /// Hands the pending messages over, waiting asynchronously for ingress room. If this
    /// future is dropped before it completes, the batch it was handing over is dropped with
    /// it and counted in [`super::MeshStats::unflushed_discarded`].
    pub async fn flush(&mut self) -> Result<(), PublishError> {
        let ns = self.mesh.inner.ns.clone();
        let Some((tx, batch)) = self.take_batch()? else {
            return Ok(());
        };
        let mut guard = Cancelled {
            ns: &ns,
            lost: batch.weight() as u64,
        };
        let r = tx.send(batch).await.map_err(|_| PublishError::Stopped);
        guard.lost = 0;
        r
    }

    /// Checks the message as [`Mesh::broadcast`] would and appends its frame to the batch.
    fn add(&mut self, dst: PeerId, payload: &[u8]) -> Result<(), PublishError> {
        self.mesh.admit(dst, payload.len())?;
        let ns = &self.mesh.inner.ns;
        let frame = DATA_HEADER_LEN + payload.len();
        if self.buf.capacity() - self.buf.len() < frame {
            // A block for several batches; the batches already handed over keep the old one
            // alive until their writes are done.
            let block = self.batch_bytes.saturating_mul(ARENA_BATCHES);
            // A buffer left in a larger block (after a large message) leaves it.
            self.blocks
                .make_room(&mut self.buf, frame, block, Some(block));
        }
        encode_data_into(
            &mut self.buf,
            &ns.me,
            &dst,
            &self.ids.next_id(),
            ns.cfg.initial_ttl,
            payload,
        )
        .map_err(|_| PublishError::TooLarge {
            len: payload.len(),
            max: u32::MAX as usize,
        })?;
        self.dst = dst;
        self.count += 1;
        Ok(())
    }

    /// The pending batch and the ingress to hand it to, or `None` when nothing is pending.
    fn take_batch(&mut self) -> Result<Option<(&IngressSender<Publish>, Publish)>, PublishError> {
        if self.count == 0 {
            return Ok(None);
        }
        let tx = self.mesh.inner.publish.get().ok_or(PublishError::Stopped)?;
        if self.mesh.inner.ns.stopping.load(Ordering::Acquire) {
            return Err(PublishError::Stopped);
        }
        let batch = Publish::Batch {
            dst: self.dst,
            frames: self.buf.split(),
            count: std::mem::take(&mut self.count),
        };
        Ok(Some((tx, batch)))
    }

    fn hand_over(&mut self, wait: Wait) -> Result<(), PublishError> {
        if let Wait::Never = wait {
            if self.count > 0 && self.mesh.links_full_for(self.buf.len()) {
                return Err(PublishError::Full);
            }
        }
        let Some((_, batch)) = self.take_batch()? else {
            return Ok(());
        };
        // The sender again, borrowed from its field alone (take_batch checked it is there).
        let tx = self.mesh.inner.publish.get().ok_or(PublishError::Stopped)?;
        send_batch(tx, batch, wait, &mut self.buf, &mut self.count)
    }
}

/// Counts a batch whose async hand-over was dropped before it completed.
pub(crate) struct Cancelled<'a> {
    pub(crate) ns: &'a super::shared::NodeShared,
    pub(crate) lost: u64,
}

impl Drop for Cancelled<'_> {
    fn drop(&mut self) {
        if self.lost > 0 {
            self.ns
                .unflushed_discarded
                .fetch_add(self.lost, Ordering::Relaxed);
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        if self.count > 0 {
            let ns = self.mesh.inner.ns.clone();
            let what = "publisher dropped with messages it could not hand over";
            hand_over_on_drop(&ns, self.count, what, |wait| self.hand_over(wait));
        }
    }
}

/// Hands over the `pending` messages or samples a dropped [`Publisher`] or topics `Writer`
/// still holds (`hand_over` as their flushes do), counting in
/// [`super::MeshStats::unflushed_discarded`] and logging as `what` those it could not.
///
/// It waits for room only on a plain thread that is not unwinding: never on an executor
/// thread (it would stall its tasks) nor during a panic (which must not turn into a hang on
/// a full queue). The hand-over wakes the origin shard's task, so during a panic it runs
/// outside the unwind ([`shoal_runtime::outside_unwind`]).
pub(crate) fn hand_over_on_drop(
    ns: &super::shared::NodeShared,
    pending: usize,
    what: &str,
    hand_over: impl FnOnce(Wait) -> Result<(), PublishError> + Send,
) {
    let wait = if shoal_runtime::current_executor().is_some() || std::thread::panicking() {
        Wait::Never
    } else {
        Wait::Block
    };
    let r = shoal_runtime::outside_unwind(|| hand_over(wait));
    if let Err(e) = r.unwrap_or(Err(PublishError::Stopped)) {
        let lost = pending as u64;
        ns.unflushed_discarded.fetch_add(lost, Ordering::Relaxed);
        tracing::warn!(error = %e, lost, "{what}");
    }
}
