//! The part of a topic writer that does not depend on where it runs: numbering and packing
//! samples into whole Samples frames, the checks a write makes, and the wait for a reliable
//! writer's credit. Shared by the application-thread [`Writer`](super::Writer) (which hands
//! the batch to the origin shard's ingress) and the shard task's
//! [`ShardWriter`](crate::node::shard_task::ShardWriter) (which hands it straight to the
//! shard's core), so both number, pack, check and fail alike.
//!
//! **Owns:** a writer's sequence counter, its batch buffer and its credit wait. **Must not
//! touch:** where the batch goes or how the caller waits for room (the handles').

use crate::config::MeshConfig;
use crate::node::publisher::spare_blocks;
use crate::node::recycle::Recycler;
use crate::node::shard::Publish;
use crate::node::PublishError;
use crate::topics::EndpointGuid;
use crate::wire::{EncodeError, SampleRuns, SAMPLES_HEADER_LEN, SAMPLE_LEN_PREFIX};
use bytes::BytesMut;
use shoal_proto::topics::WriterCredit;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Buffers allocated per this many bytes of batches (as [`Publisher`](crate::Publisher)).
const ARENA_BATCHES: usize = 4;
/// A Samples frame's length field counts everything after the 4-byte length prefix.
const FRAME_FIXED: usize = SAMPLES_HEADER_LEN - 4;

/// One writer's batch of samples, packed as whole Samples frames (see the
/// [module docs](self)).
#[derive(Debug)]
pub(crate) struct Packer {
    guid: EndpointGuid,
    pub(super) buf: BytesMut,
    /// The packer of `buf`'s Samples frames (wire's), which numbers the samples: the next
    /// sample's sequence number is its `next_seq` (0: none left after `u64::MAX`).
    runs: SampleRuns,
    /// Samples in `buf`.
    pub(super) count: usize,
    batch_bytes: usize,
    /// The batch-size cap: a quarter of `max_outbound_queue_bytes`, as for a publisher.
    batch_cap: usize,
    /// The longest frame the mesh accepts (`max_message_bytes`, the length field's bound).
    max_frame: usize,
    blocks: Recycler,
    /// A reliable writer's write credit (`None`: best effort, never waits for readers).
    credit: Option<Arc<WriterCredit>>,
    /// How long a write waits for credit.
    max_blocking: Duration,
}

impl Packer {
    /// A packer for writer `guid`, numbering from 1, handing over at the default batch size.
    pub(crate) fn new(
        guid: EndpointGuid,
        cfg: &MeshConfig,
        credit: Option<Arc<WriterCredit>>,
        max_blocking: Duration,
    ) -> Packer {
        let (ttl, max_frame) = (cfg.initial_ttl, cfg.max_message_bytes);
        let mut p = Packer {
            guid,
            buf: BytesMut::new(),
            runs: SampleRuns::new(guid, ttl, 1, max_frame),
            count: 0,
            batch_bytes: 0,
            batch_cap: cfg.max_outbound_queue_bytes / 4,
            max_frame: max_frame as usize,
            blocks: Recycler::new(spare_blocks(
                crate::node::DEFAULT_BATCH_BYTES * ARENA_BATCHES,
            )),
            credit,
            max_blocking,
        };
        p.set_batch_bytes(crate::node::DEFAULT_BATCH_BYTES);
        p
    }

    /// See `Writer::with_batch_bytes`.
    pub(crate) fn set_batch_bytes(&mut self, bytes: usize) {
        self.batch_bytes = bytes.min(self.batch_cap).max(1);
        // Spares bounded in bytes, as a publisher's.
        self.blocks
            .set_max(spare_blocks(self.batch_bytes.saturating_mul(ARENA_BATCHES)));
    }

    pub(crate) fn batch_bytes(&self) -> usize {
        self.batch_bytes
    }

    /// The sequence number the next sample gets.
    pub(crate) fn next_seq(&self) -> u64 {
        self.runs.next_seq()
    }

    /// Samples packed but not handed over yet.
    pub(crate) fn pending(&self) -> usize {
        self.count
    }

    /// Bytes packed (frames included).
    pub(crate) fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// The batch holds at least `batch_bytes`: time to hand it over.
    pub(crate) fn is_full(&self) -> bool {
        self.buf.len() >= self.batch_bytes
    }

    /// The largest payload one sample may carry (one Samples frame of `max_message_bytes`).
    pub(crate) fn max_payload(&self) -> usize {
        self.max_frame
            .saturating_sub(FRAME_FIXED + SAMPLE_LEN_PREFIX)
    }

    /// True when the next sample may be written now (always for a best-effort writer).
    pub(crate) fn has_credit(&self) -> bool {
        self.credit
            .as_ref()
            .is_none_or(|c| c.allows(self.next_seq()))
    }

    /// What a write checks besides the node running: size; and a sequence number left.
    pub(crate) fn check(&self, payload: &[u8]) -> Result<(), PublishError> {
        let max = self.max_payload();
        if payload.len() > max {
            return Err(PublishError::TooLarge {
                len: payload.len(),
                max,
            });
        }
        if self.next_seq() == 0 {
            // 2^64 - 1 samples written: a writer never gets there; refusing beats wrapping.
            return Err(PublishError::Stopped);
        }
        Ok(())
    }

    /// Checks the sample ([`check`](Self::check); the caller checked the node runs) and
    /// has the packer append it to the open run, or to a new one when the run is at
    /// `u16::MAX` samples or its frame would pass `max_message_bytes`.
    pub(crate) fn add(&mut self, payload: &[u8]) -> Result<u64, PublishError> {
        self.check(payload)?;
        let want = self.runs.room_for(payload.len());
        if self.buf.capacity() - self.buf.len() < want {
            // A block for several batches; batches already handed over keep the old one
            // alive until their writes are done. Offsets within `buf` survive the move.
            let block = self.batch_bytes.saturating_mul(ARENA_BATCHES);
            // A buffer left in a larger block (after a large sample) leaves it.
            self.blocks
                .make_room(&mut self.buf, want, block, Some(block));
        }
        let seq = self
            .runs
            .push(&mut self.buf, payload)
            .map_err(|e| match e {
                // `check` said both already; kept typed should they ever disagree.
                EncodeError::SampleTooLarge { len, .. } => PublishError::TooLarge {
                    len,
                    max: self.max_payload(),
                },
                _ => PublishError::Stopped,
            })?;
        self.count += 1;
        Ok(seq)
    }

    /// Closes the open run: `buf` then holds whole frames only.
    pub(crate) fn close_run(&mut self) {
        self.runs.close(&mut self.buf);
    }

    /// The pending samples as one [`Publish::Samples`], or `None` when nothing is pending.
    pub(crate) fn take(&mut self) -> Option<Publish> {
        if self.count == 0 {
            return None;
        }
        self.close_run();
        Some(Publish::Samples {
            writer: self.guid,
            frames: self.buf.split(),
            count: std::mem::take(&mut self.count),
        })
    }

    /// Starts a wait for credit (a reliable writer without credit now).
    pub(crate) fn credit_wait(&self) -> CreditWait {
        let start = Instant::now();
        CreditWait {
            credit: self
                .credit
                .clone()
                .expect("only a writer with a credit waits for it"),
            start,
            deadline: start.checked_add(self.max_blocking),
        }
    }

    /// Waits asynchronously, at most `max_blocking`, until the next sample is within the
    /// credit; `running` says whether the node still runs, `sleep_until` is the caller's
    /// timer (the executor's own on a shard, a portable one elsewhere). The caller hands its
    /// pending samples over first: readers acknowledge only what reached them.
    pub(crate) async fn credit_async<F: Future<Output = ()>>(
        &self,
        running: impl Fn() -> Result<(), PublishError>,
        sleep_until: impl Fn(Instant) -> F,
    ) -> Result<(), PublishError> {
        if self.has_credit() {
            return Ok(());
        }
        let wait = self.credit_wait();
        while let Some(l) = wait.step(self, running())? {
            let woken = match wait.deadline {
                Some(d) => {
                    let timer = std::pin::pin!(sleep_until(d));
                    matches!(
                        futures_util::future::select(l, timer).await,
                        futures_util::future::Either::Left(_)
                    )
                }
                None => {
                    l.await;
                    true
                }
            };
            wait.after(self, woken)?;
        }
        Ok(())
    }
}

/// One wait of a writer for its credit: the blocking and the async forms differ only in how
/// they sleep on the listener.
pub(crate) struct CreditWait {
    credit: Arc<WriterCredit>,
    start: Instant,
    /// `None`: `max_blocking` is infinite.
    pub(crate) deadline: Option<Instant>,
}

impl CreditWait {
    /// `None` when the next sample may be written; else the listener to sleep on (taken
    /// before the check, so a rise in between is not missed). `running`: whether the node
    /// still runs.
    pub(crate) fn step(
        &self,
        p: &Packer,
        running: Result<(), PublishError>,
    ) -> Result<Option<event_listener::EventListener>, PublishError> {
        let l = self.credit.listen();
        if self.credit.allows(p.next_seq()) {
            return Ok(None);
        }
        running?;
        Ok(Some(l))
    }

    /// After a sleep that ended by a wake-up (`woken`) or the deadline.
    pub(crate) fn after(&self, p: &Packer, woken: bool) -> Result<(), PublishError> {
        if woken || self.credit.allows(p.next_seq()) {
            return Ok(());
        }
        Err(PublishError::HistoryFull {
            waited: self.start.elapsed(),
        })
    }
}

/// What [`try_write`] needs of a writer handle: its packer, whether the node runs, and its
/// own way of handing the pending samples over without waiting.
pub(crate) trait Handover {
    fn pack(&self) -> &Packer;
    fn pack_mut(&mut self) -> &mut Packer;
    /// `Stopped` once the node stops.
    fn running(&self) -> Result<(), PublishError>;
    /// Hands the pending samples over now, or `Full` when they cannot go now.
    fn try_flush(&mut self) -> Result<(), PublishError>;
}

/// `try_write` of both writers (see `Writer::try_write`): the checks first, `HistoryFull`
/// at once without credit (the pending samples handed over, as readers acknowledge only
/// what reached them), a full batch handed over before and after the sample is added.
pub(crate) fn try_write<W: Handover>(w: &mut W, payload: &[u8]) -> Result<u64, PublishError> {
    // What can never be accepted is said first, whatever the room.
    w.running()?;
    w.pack().check(payload)?;
    if !w.pack().has_credit() {
        let _ = w.try_flush();
        return Err(PublishError::HistoryFull {
            waited: Duration::ZERO,
        });
    }
    if w.pack().pending() > 0 && w.pack().is_full() {
        w.try_flush()?;
    }
    w.running()?;
    let seq = w.pack_mut().add(payload)?;
    if w.pack().is_full() {
        // Written either way; a batch that does not fit now goes with the next call.
        match w.try_flush() {
            Ok(()) | Err(PublishError::Full) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(seq)
}
