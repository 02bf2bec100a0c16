//! The commands between the executors of one node, one enum per direction: the control plane
//! to a shard ([`ToShard`]), a shard to another shard ([`ShardToShard`]) and a shard to the
//! control plane ([`ToControl`]). A receiver matches only what can reach it.
//!
//! **Owns:** the vocabulary of the node's internal channels and the bytes a link queues
//! ([`Out`]). **Must not touch:** how they travel (the driver's typed channels, one per direction) or sockets: the
//! connection handed to a shard is a type parameter `C` (a TCP stream in the live node, nothing
//! in a simulation).

use crate::budget::LinkBudget;
use crate::crypto::{RecordOpener, RecordSealer};
use crate::reverse_path::PathTable;
use crate::topics::SampleRoutes;
use crate::wire::{
    Data, DataHeader, Discovery, IdentityRecord, Membership, Samples, SamplesHeader,
    DATA_HEADER_LEN,
};
use crate::{Link, LinkId, PeerId};
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use std::time::Instant;

/// An established connection handed from the control plane to its data shard.
#[derive(Debug)]
pub struct NewLink<C> {
    /// The connection's id.
    pub link: LinkId,
    /// The peer at the other end.
    pub peer: PeerId,
    /// The connection itself (the driver's socket).
    pub conn: C,
    /// Bytes read after the peer's Hello, or in a secured mesh after its AuthConfirm (then
    /// they are records).
    pub leftover: BytesMut,
    /// Secured mesh: the link's record keys (counters at 0).
    pub secure: Option<(RecordSealer, RecordOpener)>,
    /// The link's state machine, already Established.
    pub state: Link,
    /// The link's outbound byte bound, shared with every shard that sends on it.
    pub budget: Arc<LinkBudget>,
}

impl<C> NewLink<C> {
    /// The same link with another connection (the driver attaches its socket to the core's
    /// connection-less `NewLink<()>`).
    pub fn with_conn<D>(self, conn: D) -> NewLink<D> {
        NewLink {
            link: self.link,
            peer: self.peer,
            conn,
            leftover: self.leftover,
            secure: self.secure,
            state: self.state,
            budget: self.budget,
        }
    }
}

/// Control plane → shard.
#[derive(Debug)]
pub enum ToShard<C> {
    /// Serve this connection.
    AddLink(Box<NewLink<C>>),
    /// Route `peer` over `link`, owned by shard `owner`.
    Install {
        /// The neighbour.
        peer: PeerId,
        /// Its link.
        link: LinkId,
        /// The shard that owns the link.
        owner: usize,
        /// The link's outbound byte bound.
        budget: Arc<LinkBudget>,
    },
    /// Stop routing `peer` over `link`.
    Uninstall {
        /// The neighbour.
        peer: PeerId,
        /// The link it was routed over.
        link: LinkId,
    },
    /// Close `link` (owned by the receiving shard), Goodbye first when asked.
    Close {
        /// The link.
        link: LinkId,
        /// Send Goodbye (after the queue is flushed) before closing.
        goodbye: bool,
    },
    /// Retire `link` (owned by the receiving shard), a dial race's loser whose peer is
    /// installed on another link: nothing more is queued on it, what comes on it counts as
    /// come on the peer's installed link, and it is closed politely (Goodbye) once the peer
    /// sends on that link, or after the shard's `retire_grace` unless the peer closed it
    /// first: the peer resolves the race on its own and may still be sending on it until
    /// then.
    Retire {
        /// The link.
        link: LinkId,
    },
    /// Send a ready-encoded control frame (Membership, IdentityRecord) on `link`.
    SendRaw {
        /// The link (owned by the receiving shard).
        link: LinkId,
        /// The encoded frame.
        frame: Bytes,
    },
    /// From now on, route topic samples by this table (replacing the previous one).
    SampleRoutes(Arc<SampleRoutes>),
    /// Close everything and report [`ToControl::Stopped`].
    Stop,
    /// Answer [`ToControl::Synced`] with the same token: everything posted before is applied.
    Sync(u64),
    /// From now on, take each origin's Data frames only from the links this table names for
    /// it (the reverse-path check, [`crate::reverse_path`]), replacing the previous table.
    ReversePaths(Arc<PathTable>),
    /// `link`'s control-plane work budget is spent: drop its Discovery frames here until
    /// `until` (counted in `dropped_discovery_over_budget`) instead of handing each to the
    /// control plane to be dropped there.
    PauseDiscovery {
        /// The link (owned by the receiving shard).
        link: LinkId,
        /// When its budget has credit again.
        until: Instant,
    },
}

impl<C> ToShard<C> {
    /// The same command for a connection type `D`; an [`ToShard::AddLink`], which carries a
    /// connection, comes back as `Err` for the caller to attach one
    /// ([`NewLink::with_conn`]).
    pub fn retype<D>(self) -> Result<ToShard<D>, Box<NewLink<C>>> {
        Ok(match self {
            ToShard::AddLink(nl) => return Err(nl),
            ToShard::Install {
                peer,
                link,
                owner,
                budget,
            } => ToShard::Install {
                peer,
                link,
                owner,
                budget,
            },
            ToShard::Uninstall { peer, link } => ToShard::Uninstall { peer, link },
            ToShard::Close { link, goodbye } => ToShard::Close { link, goodbye },
            ToShard::Retire { link } => ToShard::Retire { link },
            ToShard::SendRaw { link, frame } => ToShard::SendRaw { link, frame },
            ToShard::SampleRoutes(r) => ToShard::SampleRoutes(r),
            ToShard::Stop => ToShard::Stop,
            ToShard::Sync(t) => ToShard::Sync(t),
            ToShard::ReversePaths(t) => ToShard::ReversePaths(t),
            ToShard::PauseDiscovery { link, until } => ToShard::PauseDiscovery { link, until },
        })
    }
}

/// Shard → shard: a hop, one message handed from the shard that read or originated it to the
/// shard that owns the state it needs (a "relay" is something else: a node forwarding a
/// flooded frame to its neighbours).
#[derive(Debug)]
pub enum ShardToShard {
    /// Route this Data frame received on `from` (sent to the shard owning its dedup state).
    HopData {
        /// The inbound link.
        from: LinkId,
        /// The frame.
        data: Data,
    },
    /// Route this run of topic samples received on `from` (sent to the shard owning its
    /// writer's sequence state).
    HopSamples {
        /// The inbound link.
        from: LinkId,
        /// The run.
        samples: Samples,
    },
    /// Route this reliability frame received on `from` (sent to the shard owning its
    /// writer's reliable state).
    HopReliable {
        /// The inbound link.
        from: LinkId,
        /// The frame.
        frame: RelFrame,
    },
    /// Queue these bytes, holding `frames` Data frames, on `link` (sent to the link's shard;
    /// bytes already reserved in the link's budget).
    Transmit {
        /// The link.
        link: LinkId,
        /// What to queue.
        out: Out,
        /// The Data frames in it (counted if they are lost).
        frames: u64,
        /// This node originated them (its own publish): only an origin's link can lag
        /// (`budget/lag.rs`).
        originated: bool,
    },
    /// A delivery the sending shard made (its sink was offered it first) and hands to the
    /// receiving shard to reach the application from there: the live node's shard task
    /// holds its inbox on the shard that originates the node's messages, and the other
    /// shards' deliveries go there. The receiver treats it as a delivery its own sink gave
    /// back ([`ShardAction::Deliver`](crate::shard::ShardAction::Deliver)).
    Deliver(crate::shard::Delivered),
}

/// One of the four reliability frames (reliable topics), as a shard routes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelFrame {
    /// A writer's heartbeat (down the tree).
    Heartbeat(crate::wire::Heartbeat),
    /// A reader's acknowledgement (up the tree).
    AckNack(crate::wire::AckNack),
    /// Resent samples for one reader (down the tree).
    Repair(crate::wire::Repair),
    /// Samples that will never come, for one reader (down the tree).
    Gap(crate::wire::Gap),
}

impl RelFrame {
    /// The writer the frame is about.
    pub fn writer(&self) -> &[u8; 16] {
        match self {
            RelFrame::Heartbeat(h) => &h.writer,
            RelFrame::AckNack(a) => &a.writer,
            RelFrame::Repair(r) => &r.writer,
            RelFrame::Gap(g) => &g.writer,
        }
    }
}

/// Shard → control plane.
#[derive(Debug)]
pub enum ToControl {
    /// `link` ended.
    LinkClosed {
        /// The link.
        link: LinkId,
    },
    /// A Membership frame arrived on `link`.
    MembershipIn {
        /// The link.
        link: LinkId,
        /// The frame.
        record: Membership,
    },
    /// An IdentityRecord frame arrived on `link` (secured mesh).
    IdentityIn {
        /// The link.
        link: LinkId,
        /// The frame.
        record: Box<IdentityRecord>,
    },
    /// A Discovery frame arrived on `link` (whose peer advertised extended frames).
    DiscoveryIn {
        /// The link.
        link: LinkId,
        /// The frame.
        frame: Box<Discovery>,
    },
    /// A SignedMembership frame arrived on `link` (verified by the control core).
    SignedMembershipIn {
        /// The link.
        link: LinkId,
        /// The frame.
        record: Box<crate::wire::SignedMembership>,
    },
    /// A MembershipDigest frame arrived on `link` (its peer advertised the digest).
    DigestIn {
        /// The link.
        link: LinkId,
        /// The frame.
        digest: Box<crate::wire::MembershipDigest>,
    },
    /// `link` was declared slow (its Block publisher no longer waits for it; see
    /// [`crate::SlowLinkPolicy`]) or marked slow soon ([`crate::budget::UNLIST_LEAD`]): the
    /// control core stops listing its peer in the own record until it catches up
    /// (`control::slow`).
    LinkSlow {
        /// The link.
        link: LinkId,
    },
    /// Shard `n` closed its links after [`ToShard::Stop`].
    Stopped(usize),
    /// Reply to [`ToShard::Sync`].
    Synced(u64),
}

/// Bytes queued on a link.
#[derive(Debug)]
pub enum Out {
    /// One Data frame as its header and payload (written without joining them).
    Data(DataHeader, Bytes),
    /// A run of topic samples as its header (ttl as it leaves) and the received body
    /// (written without joining them), with the samples it holds.
    Samples(SamplesHeader, Bytes, u64),
    /// Ready-encoded bytes (one frame, or a batching publisher's run of Data frames), the
    /// budget bytes they hold (0 for the link's own control frames: Hello, Heartbeat,
    /// Goodbye) and the Data frames among them (what is counted if they are lost).
    Raw(Bytes, usize, u64),
}

impl Out {
    /// The link budget bytes it holds.
    pub fn held(&self) -> usize {
        match self {
            Out::Data(_, p) => DATA_HEADER_LEN + p.len(),
            Out::Samples(h, b, _) => h.0.len() + b.len(),
            Out::Raw(_, n, _) => *n,
        }
    }

    /// The messages (Data frames, or samples) it carries.
    pub fn frames(&self) -> u64 {
        match self {
            Out::Data(..) => 1,
            Out::Samples(_, _, f) | Out::Raw(_, _, f) => *f,
        }
    }
}
