//! Per-writer sequence state on the shard that checks a writer's samples: what a run lets
//! through (duplicates cut, gaps counted), kept by route slot, or in a retired route's own
//! copy (`super::retired`).
//!
//! **Owns:** the sequence check and where its state lives. **Must not touch:** what a route
//! does with the samples it lets through (`super::samples`).

use super::ShardCore;
use crate::stats::{add, TopicCounterSet};
use crate::topics::{EndpointGuid, WriterRoute};
use crate::wire::Samples;

/// One writer's sequence state on its shard.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct WriterSeq {
    /// The writer whose state this is (a slot is reused only after its writer is gone).
    writer: EndpointGuid,
    /// The next sequence number expected (0: nothing seen yet).
    next: u64,
    /// A run ended at `u64::MAX` (the decoder's bound): nothing can follow, and `next`
    /// stays at `u64::MAX` instead of overflowing.
    ended: bool,
}

/// What a sequence check lets through of a run.
pub(super) struct Fresh {
    /// Samples at the head of the run already seen.
    pub(super) skip: u16,
}

/// Where the sequence state of a route's writer is kept.
pub(super) enum SeqAt<'a> {
    /// This shard's state, at the route's slot.
    Slot,
    /// A retired route's own copy (its slot may be another writer's now).
    Retired(&'a mut WriterSeq),
}

impl WriterSeq {
    /// The state of `writer` expecting `next`.
    fn at(writer: EndpointGuid, next: u64) -> WriterSeq {
        WriterSeq {
            writer,
            next,
            ended: false,
        }
    }

    /// The sequence check of run `s`: counts duplicates and gaps in `c` and advances the
    /// state; `None` when every sample of the run was seen before.
    fn admit(&mut self, s: &Samples, c: &TopicCounterSet) -> Option<Fresh> {
        let last = s.last_seq();
        if self.next > last || self.ended {
            add(&c.dropped_duplicate, u64::from(s.count));
            return None;
        }
        let skip = self.next.saturating_sub(s.first_seq);
        if skip > 0 {
            add(&c.dropped_duplicate, skip);
        } else if self.next != 0 && s.first_seq > self.next {
            add(&c.missed, s.first_seq - self.next);
        }
        self.next = last.saturating_add(1);
        self.ended = last == u64::MAX;
        // `skip` < count here: `next <= last`.
        Some(Fresh { skip: skip as u16 })
    }

    /// Takes `other`'s state (the same writer's, kept elsewhere) if it is further on.
    pub(super) fn catch_up(&mut self, other: &WriterSeq) {
        if self.next < other.next || other.ended {
            *self = *other;
        }
    }
}

impl ShardCore {
    /// The sequence state of `route`'s writer at `at`.
    pub(super) fn seq_state<'a>(
        &'a mut self,
        route: &WriterRoute,
        at: &'a mut SeqAt<'_>,
    ) -> &'a mut WriterSeq {
        match at {
            SeqAt::Retired(st) => st,
            SeqAt::Slot => {
                let slot = route.slot as usize;
                if slot >= self.writer_seqs.len() {
                    self.writer_seqs.resize(slot + 1, WriterSeq::default());
                }
                let st = &mut self.writer_seqs[slot];
                if st.writer != route.writer {
                    *st = WriterSeq::at(route.writer, 0);
                }
                st
            }
        }
    }

    /// The sequence check of a run of `route`'s writer (see [`WriterSeq::admit`]).
    pub(super) fn check_seq(
        &mut self,
        route: &WriterRoute,
        s: &Samples,
        c: &TopicCounterSet,
        at: &mut SeqAt<'_>,
    ) -> Option<Fresh> {
        self.seq_state(route, at).admit(s, c)
    }

    /// The state this shard's slot holds for `route`'s writer (a fresh one if the slot is
    /// another writer's).
    pub(super) fn slot_seq(&self, route: &WriterRoute) -> WriterSeq {
        self.writer_seqs
            .get(route.slot as usize)
            .filter(|st| st.writer == route.writer)
            .copied()
            .unwrap_or(WriterSeq::at(route.writer, 0))
    }

    /// The next sequence number this shard expects of `route`'s writer (0: none seen).
    pub(super) fn writer_seq_next(&self, route: &WriterRoute) -> u64 {
        self.slot_seq(route).next
    }

    /// Moves `route`'s writer's state to expect `next` (this node's own writer, whose runs
    /// are consecutive).
    pub(super) fn advance_seq(&mut self, route: &WriterRoute, next: u64, at: &mut SeqAt<'_>) {
        *self.seq_state(route, at) = WriterSeq::at(route.writer, next);
    }
}
