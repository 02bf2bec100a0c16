//! What the node tells the application, and the bounded queue that carries it.
//!
//! **Owns:** the events the application sees and their bounded queue. **Must not touch:** what
//! happens in the mesh (the cores decide what to report).
//!
//! Queue policy: one queue bounded to `event_queue_capacity` events, fed only while at least
//! one [`EventReceiver`] exists. Message events may fill it only up to three quarters, and
//! their payloads only up to `event_queue_bytes` (a queued payload holds its read buffer, so
//! a count of events alone would let a slow subscriber pin `capacity` times the largest
//! message); a shard that finds no room of either kind waits (backpressure: it stops reading
//! that link, TCP pushes back on the sender, whose outbound policy then applies) and counts
//! the wait (`event_queue_waits`; also `event_queue_byte_waits` when bytes were the limit).
//! The byte bound is checked before each admission, so it may be passed by at most one
//! entry's payload plus one credit chunk per shard. Control events (peers,
//! members, errors, topic matches) never wait: they may use the whole queue, and one that finds
//! it full is dropped and counted (`dropped_event_queue_full`). An `Incompatible` event counts
//! its heap (topic and reasons: partition lists a remote announcement chooses) against
//! `event_queue_bytes` too, and is dropped and counted the same way when the bytes reserved
//! have reached it. Order is kept within each class.
//!
//! A shard reserves room for each Message event as it is raised but hands the events of one
//! batch (one socket read) over as a single queue entry; a receiver takes such an entry whole
//! (its room is given back then) and hands its events out one by one, or, through the batch
//! receive ([`EventReceiver::recv_batch_timeout`]), each run of samples as one
//! [`SampleBatch`].

use crate::topics::{EndpointGuid, LocalSide, Reasons};
use crate::PeerId;
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::Arc;

/// Why an [`Event::Error`] was raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A peer sent bytes that do not decode; its link was closed.
    Malformed,
    /// A peer announced a frame longer than `max_message_bytes`; its link was closed.
    Oversize,
    /// A peer stayed blocked past the Disconnect policy's limit; its link was closed.
    SlowPeer,
    /// A peer sent part of a frame and then too little of it (and no whole frame) for the
    /// heartbeat timeout: a trickle that would hold the link forever; its link was closed.
    Stalled,
    /// Multicast scouting (peer finding) could not be set up or failed (not fatal: static/seed peers work).
    Scouting,
    /// A socket operation failed.
    Io,
    /// The peer runs the other mode (secured vs plaintext); the connection was refused.
    ModeMismatch,
    /// Secured mesh: a handshake failed its cryptographic checks (AuthConfirm tag: another
    /// PSK or a tampered handshake; a low-order key), or a record did not authenticate
    /// (tampered, reordered, replayed, truncated). The link was closed.
    Crypto,
    /// Identity mesh: the peer's identity was refused (missing, unsigned, node id not the
    /// hash of its key, bad signature, key not trusted or revoked).
    Identity,
}

/// Something the node reports to the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A peer announced itself for the first time (or again after being Lost). A peer whose
    /// connection arrived before any announce is discovered at its first announce, after
    /// its `PeerConnected`; otherwise discovery comes first.
    PeerDiscovered {
        /// The peer.
        peer: PeerId,
        /// Its dial-back address.
        addr: SocketAddr,
    },
    /// A link to the peer is established.
    PeerConnected {
        /// The peer.
        peer: PeerId,
    },
    /// The peer's link went away (a dial-race switch is not a disconnect). Always preceded
    /// by its `PeerConnected`: a receiver that lost the `PeerConnected` to a full queue does
    /// not get this one either (callbacks get both).
    PeerDisconnected {
        /// The peer.
        peer: PeerId,
    },
    /// The peer was neither announced nor connected for `peer_lost_timeout`, or it was only
    /// ever announced and gave way to another peer in a full peer table: forgotten.
    /// Static peers are never lost.
    PeerLost {
        /// The peer.
        peer: PeerId,
    },
    /// A node became reachable through the mesh.
    MemberJoined {
        /// The node.
        peer: PeerId,
    },
    /// A node is no longer reachable.
    MemberLeft {
        /// The node.
        peer: PeerId,
    },
    /// Application bytes arrived.
    Message {
        /// The originator.
        from: PeerId,
        /// The payload (a slice of the read buffer: no copy).
        payload: Bytes,
        /// True for a broadcast, false for a message targeted at this node.
        broadcast: bool,
    },
    /// A topic sample for one of this node's readers ([`crate::topics::Reader`]); one event
    /// per matched local reader. Message-class: it applies backpressure like
    /// [`Event::Message`].
    Sample {
        /// The local reader it is for.
        reader: EndpointGuid,
        /// The writer that wrote it (its first 12 bytes are the writer's node id prefix).
        writer: EndpointGuid,
        /// The writer's sequence number: 1, 2, ... per writer; a gap means samples lost
        /// upstream (counted as `missed` in the topic's stats).
        seq: u64,
        /// The payload (a slice of the read buffer: no copy).
        payload: Bytes,
    },
    /// A reliable reader of this node will never get the writer's samples `first ..= last`:
    /// the writer no longer holds them (keep-last replaced them, or their lifespan ended).
    /// Delivery goes on after them, in order; counted in `samples_lost`. Samples written
    /// before a volatile reader matched are not owed to it and raise nothing.
    SamplesLost {
        /// The local reliable reader.
        reader: EndpointGuid,
        /// The writer.
        writer: EndpointGuid,
        /// First lost sequence number.
        first: u64,
        /// Last lost sequence number.
        last: u64,
    },
    /// A writer and a reader, at least one of them on this node, now match.
    Matched {
        /// The writer.
        writer: EndpointGuid,
        /// The reader.
        reader: EndpointGuid,
        /// Their topic.
        topic: String,
        /// Which side is this node's.
        local: LocalSide,
    },
    /// A writer and a reader that matched no longer do (one was dropped, withdrawn, expired
    /// or its node left).
    Unmatched {
        /// The writer.
        writer: EndpointGuid,
        /// The reader.
        reader: EndpointGuid,
        /// Their topic.
        topic: String,
        /// Which side is this node's.
        local: LocalSide,
    },
    /// A writer and a reader on one topic, at least one of them on this node, do not match;
    /// raised once per pair, with every reason (`reasons` prints them in one line).
    Incompatible {
        /// The writer.
        writer: EndpointGuid,
        /// The reader.
        reader: EndpointGuid,
        /// Their topic.
        topic: String,
        /// Why: which policy, which partitions, type mismatch.
        reasons: Reasons,
    },
    /// Something went wrong that the node survived.
    Error {
        /// The peer concerned, if known.
        peer: Option<PeerId>,
        /// The class of failure.
        kind: ErrorKind,
        /// Human-readable detail.
        message: String,
    },
}

/// An event callback: runs on the executor thread that raised the event (see the module docs
/// of [`crate::node`]); it must return quickly and never block.
pub type Callback = Arc<dyn Fn(&Event) + Send + Sync + 'static>;

mod batch;
mod errors;
mod hub;
mod receiver;

pub use batch::{Received, SampleBatch, SampleIter};
pub use errors::ErrorLog;
pub(crate) use hub::{EventHub, Outbox, Room};
use hub::{Item, Queued};
pub use receiver::EventReceiver;

#[cfg(test)]
mod tests;
