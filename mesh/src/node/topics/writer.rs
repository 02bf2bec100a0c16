//! [`Writer`]: a local writer endpoint's batching handle: whole Samples frames packed on the
//! application's thread, as [`Publisher`](crate::Publisher) packs Data frames.
//!
//! **Owns:** the writer's sequence counter and its batch of Samples frames. **Must not
//! touch:** where samples go (the origin shard routes the batch by the writer's route).

use super::pack::Packer;
use super::Endpoint;
use crate::node::publisher::{hand_over_on_drop, send_batch, Cancelled, Wait};
use crate::node::shard::Publish;
use crate::node::PublishError;
use crate::topics::EndpointGuid;
use shoal_proto::topics::WriterCredit;
use shoal_runtime::channel::IngressSender;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A writer on one topic, opened with [`Mesh::writer`](crate::Mesh::writer): the batching
/// path of [`Publisher`](crate::Publisher) for topic samples. Each write numbers its sample
/// (1, 2, ... per writer; the writer owns the counter) and appends it to the batch's open
/// Samples frame on this thread; the batch goes to the origin shard as one ingress entry
/// once it holds [`batch_bytes`](Self::batch_bytes) (0 or 1: one hand-off per sample), at
/// [`flush`](Self::flush) (or one of its forms), or when the writer is dropped. The shard
/// routes it by the writer's route (its matched readers, local and remote) without reading
/// the samples. Flush before waiting for anything, as with a buffered writer.
///
/// Backpressure is [`Publisher`](crate::Publisher)'s: the blocking and async forms wait for
/// ingress room (and, under the Block policy, the shard waits for link room), `try_write`
/// never waits and says why it failed ([`PublishError::Full`]: no room now, sample not
/// added; [`PublishError::TooLarge`]; [`PublishError::Stopped`]). Unlike a broadcast, a
/// write needs no connected peer: a writer may have only local readers, or none yet (its
/// samples are then counted as written and go nowhere, as in DDS).
///
/// A reliable writer that keeps all its history (`history_keep_all`) also waits for its
/// readers: once `max_samples` samples are not yet acknowledged by every matched reliable
/// reader, a write hands over what is pending and waits until acknowledgements make room,
/// at most the writer's `max_blocking_time`, then fails with
/// [`PublishError::HistoryFull`] (`try_write` at once). The wait is this writer's alone:
/// other writers and the relaying of other traffic go on.
///
/// Not `Clone`: one writer's samples keep their sequence order only if one thread packs
/// them. Dropping it flushes (waiting on a plain thread, not on an executor thread or while
/// unwinding, where what does not fit is counted in
/// [`MeshStats::unflushed_discarded`](crate::MeshStats::unflushed_discarded)), then removes
/// the endpoint. The flushed batch and the removal travel different queues (the origin
/// shard's ingress, the control plane's commands): should the new route table reach the
/// shard before the batch, the batch is dropped and counted as `dropped_unrouted_samples`.
/// Keeps the node alive like a [`Mesh`](crate::Mesh) clone.
#[derive(Debug)]
pub struct Writer {
    ep: Endpoint,
    /// The numbering and packing shared with the shard task's writer.
    pack: Packer,
}

impl Writer {
    pub(super) fn new(
        ep: Endpoint,
        credit: Option<Arc<WriterCredit>>,
        max_blocking: Duration,
    ) -> Writer {
        let pack = Packer::new(ep.guid, &ep.mesh.inner.ns.cfg, credit, max_blocking);
        Writer { ep, pack }
    }

    /// Hands a batch over once it holds at least `bytes` (frames included; at least one
    /// sample per batch whatever the value: 0 hands every sample over alone). Default
    /// [`DEFAULT_BATCH_BYTES`](crate::node::DEFAULT_BATCH_BYTES); capped at a quarter of
    /// `max_outbound_queue_bytes`, as for [`Publisher`](crate::Publisher).
    pub fn with_batch_bytes(mut self, bytes: usize) -> Writer {
        self.pack.set_batch_bytes(bytes);
        self
    }

    /// The batch size this writer hands over at.
    pub fn batch_bytes(&self) -> usize {
        self.pack.batch_bytes()
    }

    /// The writer's GUID (the `writer` of its samples' [`Event::Sample`](crate::Event::Sample)).
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
    /// full, blocking this thread while the ingress has no room. Never call it on an
    /// executor thread.
    pub fn write_blocking(&mut self, payload: &[u8]) -> Result<u64, PublishError> {
        if !self.pack.has_credit() {
            // What can never be accepted is said before waiting.
            self.check(payload)?;
            self.credit_blocking()?;
        }
        let seq = self.add(payload)?;
        if self.pack.is_full() {
            self.flush_blocking()?;
        }
        Ok(seq)
    }

    /// Writes a sample and returns its sequence number; hands the batch over when it is
    /// full, waiting asynchronously for ingress room.
    pub async fn write(&mut self, payload: &[u8]) -> Result<u64, PublishError> {
        if !self.pack.has_credit() {
            self.check(payload)?;
            // Readers acknowledge only what reached them: what is pending goes first.
            self.flush().await?;
            let running = || self.check_running();
            let timer = crate::node::deadline::Deadline::new;
            self.pack.credit_async(running, timer).await?;
        }
        let seq = self.add(payload)?;
        if self.pack.is_full() {
            self.flush().await?;
        }
        Ok(seq)
    }

    /// Writes a sample without ever waiting and returns its sequence number.
    /// [`PublishError::Full`] (sample not added, its number not used) when the batch is
    /// full and cannot be handed over now: the ingress is full or, under the Block policy, a
    /// link's outbound queue has no room for it.
    pub fn try_write(&mut self, payload: &[u8]) -> Result<u64, PublishError> {
        super::pack::try_write(self, payload)
    }

    /// Hands the pending samples over, blocking this thread while the ingress has no room.
    pub fn flush_blocking(&mut self) -> Result<(), PublishError> {
        self.hand_over(Wait::Block)
    }

    /// Hands the pending samples over without waiting; [`PublishError::Full`] (batch kept)
    /// when the ingress or, under the Block policy, a link's outbound queue has no room now.
    pub fn try_flush(&mut self) -> Result<(), PublishError> {
        self.hand_over(Wait::Never)
    }

    /// Hands the pending samples over, waiting asynchronously for ingress room. If this
    /// future is dropped before it completes, the batch is dropped with it and counted in
    /// [`MeshStats::unflushed_discarded`](crate::MeshStats::unflushed_discarded).
    pub async fn flush(&mut self) -> Result<(), PublishError> {
        let ns = self.ep.mesh.inner.ns.clone();
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

    /// Waits on this thread, at most `max_blocking`, until the next sample is within the
    /// credit (see the type's docs).
    fn credit_blocking(&mut self) -> Result<(), PublishError> {
        if self.pack.has_credit() {
            return Ok(());
        }
        // Readers acknowledge only what reached them: what is pending goes first.
        self.flush_blocking()?;
        let wait = self.pack.credit_wait();
        while let Some(l) = wait.step(&self.pack, self.check_running())? {
            use event_listener::Listener;
            let woken = match wait.deadline {
                Some(d) => l.wait_deadline(d).is_some(),
                None => {
                    l.wait();
                    true
                }
            };
            wait.after(&self.pack, woken)?;
        }
        Ok(())
    }

    fn check_running(&self) -> Result<(), PublishError> {
        let inner = &self.ep.mesh.inner;
        if inner.ns.stopping.load(Ordering::Acquire) || inner.publish.get().is_none() {
            return Err(PublishError::Stopped);
        }
        Ok(())
    }

    /// Checks the sample as a publish is checked (node running, size) and packs it.
    fn add(&mut self, payload: &[u8]) -> Result<u64, PublishError> {
        self.check_running()?;
        self.pack.add(payload)
    }

    /// What a publish checks: node running, size; and a sequence number left.
    fn check(&self, payload: &[u8]) -> Result<(), PublishError> {
        self.check_running()?;
        self.pack.check(payload)
    }

    /// The pending batch and the ingress to hand it to, or `None` when nothing is pending.
    fn take_batch(&mut self) -> Result<Option<(&IngressSender<Publish>, Publish)>, PublishError> {
        if self.pack.pending() == 0 {
            return Ok(None);
        }
        let inner = &self.ep.mesh.inner;
        let tx = inner.publish.get().ok_or(PublishError::Stopped)?;
        if inner.ns.stopping.load(Ordering::Acquire) {
            return Err(PublishError::Stopped);
        }
        Ok(self.pack.take().map(|batch| (tx, batch)))
    }

    fn hand_over(&mut self, wait: Wait) -> Result<(), PublishError> {
        if let Wait::Never = wait {
            if self.pack.pending() > 0 && self.ep.mesh.links_full_for(self.pack.bytes()) {
                return Err(PublishError::Full);
            }
        }
        let Some((_, batch)) = self.take_batch()? else {
            return Ok(());
        };
        // The sender again, borrowed from its field alone (take_batch checked it is there).
        let tx = self
            .ep
            .mesh
            .inner
            .publish
            .get()
            .ok_or(PublishError::Stopped)?;
        let p = &mut self.pack;
        send_batch(tx, batch, wait, &mut p.buf, &mut p.count)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if self.pack.pending() > 0 {
            let ns = self.ep.mesh.inner.ns.clone();
            let what = "writer dropped with samples it could not hand over";
            let pending = self.pack.pending();
            hand_over_on_drop(&ns, pending, what, |wait| self.hand_over(wait));
        }
        // `ep` drops after this body: the endpoint is removed once its samples are handed over.
    }
}

impl crate::node::topics::pack::Handover for Writer {
    fn pack(&self) -> &crate::node::topics::pack::Packer {
        &self.pack
    }

    fn running(&self) -> Result<(), PublishError> {
        self.check_running()
    }

    fn pack_mut(&mut self) -> &mut crate::node::topics::pack::Packer {
        &mut self.pack
    }

    fn try_flush(&mut self) -> Result<(), PublishError> {
        Writer::try_flush(self)
    }
}

#[cfg(test)]
mod tests {
    use super::{Endpoint, Writer};
    use crate::wire::take_samples;
    use crate::Mesh;

    /// A writer handle on `m` with a made-up GUID: the packing needs no control plane.
    fn writer(m: &Mesh) -> Writer {
        Writer::new(
            Endpoint {
                mesh: m.clone(),
                guid: [9; 16],
                topic: "t".into(),
            },
            None,
            std::time::Duration::ZERO,
        )
        .with_batch_bytes(1 << 20)
    }

    /// A started single node on loopback (no peers: writes still work).
    fn node() -> Mesh {
        let m = Mesh::builder()
            .scouting(false)
            .listen_addr([127, 0, 0, 1].into())
            .build()
            .unwrap();
        m.start().unwrap();
        m
    }

    #[test]
    fn samples_pack_into_runs_numbered_from_one() {
        let m = node();
        let mut w = writer(&m);
        for i in 0..5u8 {
            assert_eq!(w.try_write(&[i; 3]).unwrap(), u64::from(i) + 1);
        }
        assert_eq!(w.pending(), 5);
        let Some(crate::node::shard::Publish::Samples { mut frames, .. }) = w.pack.take() else {
            panic!("a batch is pending");
        };
        let max = m.config().max_message_bytes;
        let run = take_samples(&mut frames, max).expect("one whole frame");
        assert!(frames.is_empty(), "the five samples share one frame");
        assert_eq!((run.writer, run.first_seq, run.count), (w.guid(), 1, 5));
        let got: Vec<Vec<u8>> = run.payloads().map(|p| p.to_vec()).collect();
        assert_eq!(got, (0..5u8).map(|i| vec![i; 3]).collect::<Vec<_>>());
        assert_eq!(w.next_seq(), 6);
        m.stop();
    }

    #[test]
    fn a_run_closes_at_the_frame_bound_and_the_next_continues_the_numbers() {
        let m = Mesh::builder()
            .scouting(false)
            .listen_addr([127, 0, 0, 1].into())
            .max_message_bytes(4096u32)
            .build()
            .unwrap();
        m.start().unwrap();
        let mut w = writer(&m);
        let big = vec![7u8; 1500];
        for _ in 0..5 {
            w.try_write(&big).unwrap();
        }
        assert!(matches!(
            w.try_write(&vec![0; w.max_payload() + 1]),
            Err(crate::PublishError::TooLarge { .. })
        ));
        let Some(crate::node::shard::Publish::Samples { mut frames, .. }) = w.pack.take() else {
            panic!("a batch is pending");
        };
        let mut seqs = Vec::new();
        while let Some(run) = take_samples(&mut frames, 4096) {
            assert!(run.count <= 2, "two 1500 B samples fill a 4 KiB frame");
            seqs.extend(run.seqs());
        }
        assert!(frames.is_empty());
        assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
        m.stop();
    }
}
