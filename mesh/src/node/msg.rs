//! Messages between the executors of one node (over the runtime's SPSC channel mesh).

use super::budget::LinkBudget;
use super::shard::Out;
use crate::crypto::{RecordOpener, RecordSealer};
use crate::proto::{Link, LinkId};
use crate::wire::{Data, IdentityRecord, Membership};
use crate::PeerId;
use bytes::{Bytes, BytesMut};
use std::sync::Arc;

/// An established connection handed from the control plane to its data shard.
#[derive(Debug)]
pub(crate) struct NewLink {
    pub(crate) link: LinkId,
    pub(crate) peer: PeerId,
    /// Detached from the control plane's executor; re-attached on the shard.
    pub(crate) stream: std::net::TcpStream,
    /// Bytes read after the peer's Hello, or in a secured mesh after its AuthConfirm (then
    /// they are records).
    pub(crate) leftover: BytesMut,
    /// Secured mesh: the link's record keys (counters at 0).
    pub(crate) secure: Option<(RecordSealer, RecordOpener)>,
    /// The link's state machine, already Established.
    pub(crate) state: Link,
    pub(crate) budget: Arc<LinkBudget>,
}

/// One message on the channel mesh.
#[derive(Debug)]
pub(crate) enum Msg {
    // control plane -> shard
    /// Serve this connection.
    AddLink(Box<NewLink>),
    /// Route `peer` over `link`, owned by shard `owner`.
    Install {
        peer: PeerId,
        link: LinkId,
        owner: usize,
        budget: Arc<LinkBudget>,
    },
    /// Stop routing `peer` over `link`.
    Uninstall { peer: PeerId, link: LinkId },
    /// Close `link` (owned by the receiving shard), Goodbye first when asked.
    Close { link: LinkId, goodbye: bool },
    /// Send a ready-encoded control frame (Membership, IdentityRecord) on `link`.
    SendRaw { link: LinkId, frame: Bytes },
    /// Close everything and report [`Msg::Stopped`].
    Stop,
    /// Answer [`Msg::Synced`] with the same token: everything posted before is applied.
    Sync(u64),
    // shard -> shard
    /// Route this Data frame received on `from` (sent to the shard owning its dedup state).
    Relay { from: LinkId, data: Data },
    /// Queue these bytes, holding `frames` Data frames, on `link` (sent to the link's shard;
    /// bytes already reserved).
    Transmit { link: LinkId, out: Out, frames: u64 },
    // shard -> control plane
    /// `link` ended.
    LinkClosed { link: LinkId },
    /// A Membership frame arrived on `link`.
    MembershipIn { link: LinkId, record: Membership },
    /// An IdentityRecord frame arrived on `link` (secured mesh).
    IdentityIn {
        link: LinkId,
        record: Box<IdentityRecord>,
    },
    /// Shard `n` closed its links after [`Msg::Stop`].
    Stopped(usize),
    /// Reply to [`Msg::Sync`].
    Synced(u64),
}
