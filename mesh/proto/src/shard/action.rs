//! What the shard core asks its driver to do, and what it hands the application.
//!
//! **Owns:** the output vocabulary of [`super::ShardCore`]: its actions, and its deliveries
//! ([`Delivered`]) with the sink they are offered to ([`DeliverySink`]). **Must not touch:**
//! how the driver carries them out (channels, tasks, callbacks, the application's event
//! queue).

use crate::budget::LinkBudget;
use crate::cmd::{Out, ShardToShard, ToControl};
use crate::link::CloseReason;
use crate::stats::{inc, Counters, TopicCounters};
use crate::topics::EndpointGuid;
use crate::wire::{DecodeError, Samples};
use crate::{LinkId, MsgId, PeerId};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;

/// One output of the shard core, carried out in order.
#[derive(Debug)]
pub enum ShardAction {
    /// Hand `msg` to shard `to`.
    Post {
        /// The receiving shard.
        to: usize,
        /// The message.
        msg: ShardToShard,
        /// What to do when its ring is full.
        busy: IfBusy,
    },
    /// Hand `msg` to the control plane.
    Report {
        /// The message.
        msg: ToControl,
        /// What to do when its ring is full.
        busy: IfBusy,
    },
    /// Hand to the application what the [`DeliverySink`] gave back (a message, a run of
    /// samples or a loss report), waiting for room in its event queue: a delivery is never
    /// dropped for want of room. The sink was offered it first, so whatever it does with a
    /// delivery as it sees it (the live node runs the event callbacks) is done.
    Deliver(Delivered),
    /// Tell the application about a link error (an `Error` event).
    Error(LinkError),
    /// An originated message waits for room on a link (Block policy): see
    /// [`super::ShardCore::unblock`].
    Block(Box<Blocked>),
    /// The core forgot this link: stop its tasks (the caller's own task ends by itself). The
    /// reason is the link state machine's when it closed the link itself (heartbeat timeout,
    /// Goodbye, protocol violation), `None` for an I/O end, a fault or a stop.
    Ended(LinkId, Option<CloseReason>),
    /// The reader of this link, told [`ReadStep::Hold`](super::ReadStep::Hold), reads on:
    /// call [`read_frames`](super::ShardCore::read_frames) again.
    ReadOn(LinkId),
}

/// An originated frame (or batch of `frames`) waiting for room on a link.
#[derive(Debug)]
pub struct Blocked {
    pub(super) link: LinkId,
    pub(super) owner: usize,
    pub(super) budget: Arc<LinkBudget>,
    pub(super) out: Out,
    pub(super) frames: u64,
    /// The topic of a batch of samples: what finally goes out or is dropped is counted for
    /// it too, as for a batch that found room at once.
    pub(super) topic: Option<Arc<TopicCounters>>,
    /// When to look at the congestion again (set by the first [`super::ShardCore::unblock`]).
    pub(super) deadline: Option<Instant>,
    /// When it was first found waiting on a closed link this shard still routes over.
    pub(super) closed_since: Option<Instant>,
}

impl Blocked {
    pub(super) fn new(
        link: LinkId,
        owner: usize,
        budget: Arc<LinkBudget>,
        out: Out,
        frames: u64,
        topic: Option<Arc<TopicCounters>>,
    ) -> Blocked {
        Blocked {
            link,
            owner,
            budget,
            out,
            frames,
            topic,
            deadline: None,
            closed_since: None,
        }
    }

    /// The link it waits for.
    pub fn link(&self) -> LinkId {
        self.link
    }

    /// Notified when the link may have room (or closed). Take it before calling
    /// [`super::ShardCore::unblock`], so room made in between is not missed.
    pub fn listen(&self) -> event_listener::EventListener {
        self.budget.listen_room()
    }
}

/// What the driver does with a post whose receiver's ring is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfBusy {
    /// Wait for room before carrying out the next action (the caller's path may stall).
    Wait,
    /// Send it from a task of its own; the next action does not wait for it.
    Detach,
    /// Give it back with [`super::ShardCore::unposted`] (`busy = true`): a shard's inbox never
    /// waits for another shard's ring, since that shard's inbox may be waiting for ours.
    Drop,
}

/// A message for the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Its originator.
    pub from: PeerId,
    /// Its id (unique per originator: what the dedup cache keys on).
    pub msg_id: MsgId,
    /// Sent to everyone (rather than to this node).
    pub broadcast: bool,
    /// The application bytes (a slice of the read buffer).
    pub payload: Bytes,
}

/// Something the shard core hands to the application: what reaches it goes through here
/// and nowhere else, in the order the core decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    /// A message (a `Message` event).
    Message(Delivery),
    /// A run of one writer's samples for one local reader (a `Sample` event per sample).
    Samples(SampleRun),
    /// Samples that will never reach a local reliable reader (a `SamplesLost` event), in
    /// that reader's sample order.
    Lost(SamplesLost),
}

/// Where the shard core hands what it delivers, at the moment it decides to: the driver's
/// event outbox in the live node, a recording in the simulations. Delivering in place, rather
/// than as a [`ShardAction::Deliver`] per message that the driver reads back and matches, is
/// what keeps a delivered message at the cost of the pre-core node
/// (`bench/notes/two-cores.md`: the action round trip was about a fifth of the receiving
/// shard's message work).
///
/// Every delivery is offered, in order, loss reports included. What the sink gives back is
/// queued as a [`ShardAction::Deliver`], which the driver waits for in order; so that one
/// link's messages and one reader's samples and loss reports reach the application in the
/// order they were decided, a sink that gave one back must give back every later one until
/// the next [`begin_call`](Self::begin_call) (it may still observe them, e.g. run callbacks:
/// each delivery is offered exactly once).
pub trait DeliverySink {
    /// A new input call of the core starts (what earlier calls gave back was carried out).
    fn begin_call(&mut self) {}

    /// Takes `d` for the application, or gives back what it did not take (see the trait
    /// docs): all of it, or of a run of samples the tail from the first sample it had no room
    /// for ([`SampleRun::skip`], [`SampleRun::split_at`]).
    fn try_deliver(&mut self, d: Delivered) -> Result<(), Delivered>;
}

/// Samples `first ..= last` of `writer` that will never reach the local reliable reader
/// `reader` (the writer no longer holds them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplesLost {
    /// The local reliable reader.
    pub reader: EndpointGuid,
    /// The writer.
    pub writer: EndpointGuid,
    /// First lost sequence number.
    pub first: u64,
    /// Last lost sequence number.
    pub last: u64,
}

/// A run of one writer's samples for one local reader (one hand-off per run and reader).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleRun {
    /// The local reader.
    pub reader: EndpointGuid,
    /// The samples: their writer, first sequence number, count and payloads
    /// ([`Samples::payloads`], slices of the read buffer).
    pub samples: Samples,
}

impl SampleRun {
    /// The same run without its first `k` samples (`k < count`; [`Samples::skip`]).
    pub fn skip(&self, k: u16) -> SampleRun {
        SampleRun {
            reader: self.reader,
            samples: self.samples.skip(k),
        }
    }

    /// The run cut after its first `k` samples (`0 < k < count`; [`Samples::split_at`]).
    pub fn split_at(self, k: u16) -> (SampleRun, SampleRun) {
        let (head, rest) = self.samples.split_at(k);
        let reader = self.reader;
        (
            SampleRun {
                reader,
                samples: head,
            },
            SampleRun {
                reader,
                samples: rest,
            },
        )
    }
}

/// Why a link was closed on an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkFault {
    /// A frame did not decode (or the connection ended inside one).
    Malformed,
    /// A frame announced more than `max_message_bytes`.
    Oversize,
    /// A record did not authenticate, or a batch could not be sealed.
    Crypto,
    /// A partial frame made no progress for the heartbeat timeout.
    Stalled,
    /// The peer stayed blocked past the policy's limit (slow link).
    SlowPeer,
}

/// An error event for the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkError {
    /// The peer concerned, if known.
    pub peer: Option<PeerId>,
    /// The kind of error.
    pub fault: LinkFault,
    /// What happened, for people.
    pub message: String,
}

/// Counts a decode failure (`oversize_frames` or `malformed_frames` of `counters`) and
/// classifies it.
pub fn decode_fault(e: &DecodeError, counters: &Counters) -> LinkFault {
    if matches!(e, DecodeError::TooLarge { .. }) {
        inc(&counters.oversize_frames);
        LinkFault::Oversize
    } else {
        inc(&counters.malformed_frames);
        LinkFault::Malformed
    }
}
