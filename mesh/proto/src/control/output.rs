//! What the control core asks of its driver ([`Action`]), what it tells the application
//! ([`ControlEvent`]) and what it counts ([`ControlStats`]).
//!
//! **Owns:** the vocabulary of the core's outputs. **Must not touch:** how the driver carries
//! them out (sockets, threads, the application's event queue).

use crate::cmd::ToShard;
use crate::peers::DialTarget;
use crate::topics::TopicEvent;
use crate::{LinkId, PeerId};
use bytes::Bytes;
use std::net::SocketAddr;

/// Something the driver must do, in the order the core queued it.
#[derive(Debug)]
pub enum Action {
    /// Open a TCP connection to `target` (resolving an endpoint name first), then report
    /// [`super::ControlCore::on_dial_connected`] or [`super::ControlCore::on_dial_failed`].
    Dial {
        /// The id of the new connection.
        link: LinkId,
        /// Where to connect.
        target: DialTarget,
    },
    /// Write these bytes on the handshaking socket of `link` (in order with earlier writes).
    Write {
        /// The connection.
        link: LinkId,
        /// What to write.
        bytes: Bytes,
    },
    /// Close the socket of `link` once the writes queued before are done. The core has
    /// forgotten the link; feed nothing more for it.
    Close {
        /// The connection.
        link: LinkId,
    },
    /// Send this datagram to the scouting multicast group.
    Beacon(Bytes),
    /// Tell the application.
    Event(ControlEvent),
    /// The signed name of identity node `node` is now `name` (`None`: forget it).
    Name {
        /// The node.
        node: PeerId,
        /// Its name.
        name: Option<Box<str>>,
    },
    /// A warning that hostile input can trigger at will: log it aggregated per `key`.
    Warn {
        /// The kind of warning (one log line per kind and interval).
        key: &'static str,
        /// Detail of this occurrence.
        detail: String,
    },
    /// Every shard closed its links after [`super::ControlCore::stop`]: the node may end.
    Stopped,
}

/// A command for shard `shard`, drained with [`super::ControlCore::poll_to_shard`]. In
/// [`ToShard::AddLink`] the connection is `()`: the driver attaches the socket of that link.
pub type ShardPost = (usize, ToShard<()>);

/// Why a [`ControlEvent::Error`] was raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlErrorKind {
    /// A handshake frame did not decode, or the connection ended inside one.
    Malformed,
    /// A handshake frame was longer than allowed before the link is up.
    Oversize,
    /// Multicast scouting could not be set up or failed.
    Scouting,
    /// The peer runs the other mode (secured vs plaintext).
    ModeMismatch,
    /// The secured handshake failed its cryptographic checks.
    Crypto,
    /// The peer's identity was refused.
    Identity,
}

/// What the control core tells the application, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlEvent {
    /// This node's writer `endpoint` is in the route table every shard applied: its first
    /// samples find their route (the driver answers the create command with it; not an
    /// application event).
    EndpointReady {
        /// The writer.
        endpoint: crate::topics::EndpointGuid,
    },
    /// A peer was announced for the first time (or again after being Lost).
    PeerDiscovered {
        /// The peer.
        peer: PeerId,
        /// Its dial-back address.
        addr: SocketAddr,
    },
    /// A link to the peer is established (and every shard routes to it).
    PeerConnected {
        /// The peer.
        peer: PeerId,
    },
    /// The peer's link went away.
    PeerDisconnected {
        /// The peer.
        peer: PeerId,
    },
    /// The peer was forgotten.
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
    /// A topics event (matched, unmatched, incompatible), released once the shards route
    /// by a table that includes what it reports.
    Topic(TopicEvent),
    /// Something went wrong that the node survived.
    Error {
        /// The peer concerned, if known.
        peer: Option<PeerId>,
        /// The class of failure.
        kind: ControlErrorKind,
        /// Human-readable detail.
        message: String,
    },
}

/// The control plane's counters (monotonic; the driver mirrors them into the node's stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControlStats {
    /// Secured handshakes refused (tag, key, identity, mode).
    pub auth_failures: u64,
    /// Handshakes closed on a frame that did not decode (or ended inside a frame).
    pub malformed_frames: u64,
    /// Handshakes closed on a frame above the handshake bound.
    pub oversize_frames: u64,
    /// Identity records dropped (untrusted, bad signature, book full).
    pub identity_records_dropped: u64,
    /// Scouting datagrams dropped as junk.
    pub announces_dropped: u64,
    /// Membership/identity frames not queued: the shard outbox was at its ceiling.
    pub dropped_queue_full: u64,
    /// Announces of new peers over the new-peer rate.
    pub announces_rate_limited: u64,
    /// Dials of never-linked peers postponed over the new-peer rate.
    pub dials_rate_limited: u64,
    /// Announce-only peers evicted from a full table.
    pub peers_evicted: u64,
    /// Peers refused: table full of linked peers.
    pub peer_table_full: u64,
    /// Connections refused: connection table full.
    pub connections_refused: u64,
    /// Inbound handshakes evicted for a newer one.
    pub handshakes_evicted: u64,
    /// Signed records (Membership, Discovery) whose signature verified.
    pub record_signatures_verified: u64,
    /// Signed records refused as forgeries (a key that is not the origin's, not a valid
    /// key, or a signature that does not verify); each closed the link that carried it.
    pub bad_record_signatures: u64,
    /// Signed records dropped because the trust policy does not admit the signer's key.
    pub untrusted_record_signers: u64,
    /// Identity mode: unsigned Membership records and Discovery frames refused (see
    /// [`super::signed`]).
    pub unsigned_records_refused: u64,
    /// Identity mode: unsigned Membership records not relayed to a neighbour that signs (it
    /// would refuse them).
    pub unsigned_records_withheld: u64,
    /// Membership records refused for listing more than `max_membership_neighbours` nodes,
    /// or (this node's id) for a version too far past the wall clock.
    pub membership_records_refused: u64,
    /// Connections refused: they claimed the id of a peer linked since before the race window
    /// (a late claim never displaces a live link).
    pub claims_refused: u64,
    /// Neighbours not listed in the own record while their link was slow (see `slow`).
    pub slow_links_unlisted: u64,
    /// MembershipDigest frames that broke the rules (on a link that did not negotiate the
    /// digest); each closed its link. Malformed ones close the link in the shard.
    pub digest_violations: u64,
    /// Rounds run for shard reports ([`super::ControlCore::on_shard_reports`]: one per batch
    /// of reports that arrived together, however many it held).
    pub report_rounds: u64,
}
