//! Origination: what the application publishes, given ids and routed from the origin shard.
//!
//! **Owns:** [`Publish`] and the first routing of a node's own messages. **Must not touch:**
//! the ingress queue that carries publishes to the shard (the driver's).

use super::action::ShardAction;
use super::fan_out::{Path, Targets};
use super::ShardCore;
use crate::cmd::Out;
use crate::gossip::{DataMeta, DataVerdict};
use crate::stats::{add, inc};
use crate::wire::{take_data, Data};
use crate::{LinkId, MsgId, PeerId};
use bytes::{Bytes, BytesMut};
use std::time::Instant;

/// What the application hands over, entering through the origin shard's ingress queue.
#[derive(Debug)]
pub enum Publish {
    /// One message (`Mesh::broadcast` and friends).
    One {
        /// Destination, [`PeerId::ZERO`] for a broadcast.
        dst: PeerId,
        /// The application bytes.
        payload: Bytes,
    },
    /// `count` whole Data frames for `dst`, encoded back to back (ids and ttl included) by
    /// a batching publisher.
    Batch {
        /// Destination, [`PeerId::ZERO`] for a broadcast.
        dst: PeerId,
        /// The encoded frames.
        frames: BytesMut,
        /// How many frames `frames` holds.
        count: usize,
    },
    /// `count` samples of this node's writer `writer`, packed as whole Samples frames (one
    /// run or several, sequence numbers and ttl included) by its writer handle on the
    /// application thread.
    Samples {
        /// The writer (one of this node's).
        writer: crate::topics::EndpointGuid,
        /// The encoded Samples frames.
        frames: BytesMut,
        /// How many samples `frames` holds.
        count: usize,
    },
}

impl Publish {
    /// Messages it carries: the ingress bounds their sum, so a batching publisher runs no
    /// further ahead of its shard than one publishing message by message.
    pub fn weight(&self) -> usize {
        match self {
            Publish::One { .. } => 1,
            Publish::Batch { count, .. } | Publish::Samples { count, .. } => *count,
        }
    }
}

impl ShardCore {
    /// Originates what the application published (on the shard owning this node's id).
    pub fn publish(&mut self, p: Publish, now: Instant, out: &mut Vec<ShardAction>) {
        self.begin_call();
        match p {
            Publish::One { dst, payload } => self.originate_one(dst, payload, now, out),
            Publish::Batch { dst, frames, count } => {
                self.originate_batch(dst, frames, count, now, out)
            }
            Publish::Samples {
                writer,
                frames,
                count,
            } => self.originate_samples(writer, frames, count, now, out),
        }
    }

    fn originate_one(
        &mut self,
        dst: PeerId,
        payload: Bytes,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        inc(&self.counters.originated);
        let me = self.cfg.me;
        let msg_id: MsgId = self.gen.next_id();
        let meta = DataMeta {
            src: me,
            dst,
            msg_id,
            ttl: 0,
        };
        match self.gossip.originate(&self.table, dst) {
            DataVerdict::Deliver => {
                let d = Data {
                    src: me,
                    dst,
                    msg_id,
                    ttl: 0,
                    payload,
                };
                self.deliver(d, out);
            }
            DataVerdict::Forward { except, ttl } => {
                let to = Targets::AllExcept(except);
                self.fan_out(&meta, &payload, to, ttl, Path::Origin, now, out)
            }
            DataVerdict::Unicast { link, ttl } => {
                let to = Targets::Only(link);
                self.fan_out(&meta, &payload, to, ttl, Path::Origin, now, out)
            }
            // Not a decision `originate` makes.
            DataVerdict::DeliverAndForward { .. } => {}
            DataVerdict::Drop(_) => inc(&self.counters.dropped_no_route),
        }
    }

    /// A batching publisher's run of `count` whole Data frames for `dst`: routed once and
    /// queued on each link as one buffer, without touching its bytes (they are in the
    /// publisher's CPU cache, and the kernel's copy into the socket is their first read here).
    fn originate_batch(
        &mut self,
        dst: PeerId,
        mut frames: BytesMut,
        count: usize,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        add(&self.counters.originated, count as u64);
        match self.gossip.originate_many(&self.table, dst, count as u64) {
            DataVerdict::Deliver => {
                while let Some(d) = take_data(&mut frames, u32::MAX) {
                    self.deliver(d, out);
                }
            }
            DataVerdict::Forward { except, .. } => {
                self.queue_run(frames, count, except, None, now, out)
            }
            DataVerdict::Unicast { link, .. } => {
                self.queue_run(frames, count, None, Some(link), now, out)
            }
            DataVerdict::DeliverAndForward { .. } => {}
            DataVerdict::Drop(_) => add(&self.counters.dropped_no_route, count as u64),
        }
    }

    /// Queues a run of `count` frames on its links as one shared buffer.
    fn queue_run(
        &mut self,
        frames: BytesMut,
        count: usize,
        except: Option<LinkId>,
        only: Option<LinkId>,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let run = frames.freeze();
        let n = run.len();
        let to = match only {
            Some(l) => Targets::Only(l),
            None => Targets::AllExcept(except),
        };
        self.fan_out_with(n, count as u64, to, Path::Origin, now, out, || {
            Out::Raw(run.clone(), n, count as u64)
        });
    }
}
