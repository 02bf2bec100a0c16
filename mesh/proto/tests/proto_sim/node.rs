//! A simulated node: its control core, its data path, its sockets, and what the tests read
//! back (deliveries, events, traffic, violations of the held-event order).

use super::datapath::{DataPath, Kind};
use bytes::{Bytes, BytesMut};
use shoal_proto::config::MeshConfig;
use shoal_proto::control::{ControlCore, ControlEvent};
use shoal_proto::crypto::{Identity, IdentityPolicy, PskKeys, SecureContext};
use shoal_proto::shard::SampleRun;
use shoal_proto::{CloseReason, DialTarget, LinkId, MsgId, PeerId};
use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Instant;

/// One end of a connection: node, incarnation, link id there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct End {
    pub node: usize,
    pub gen: u64,
    pub link: LinkId,
}

/// A socket of a node: in its dial or handshake (the control core has it), or on the shard.
#[derive(Debug, Default)]
pub struct Sock {
    pub remote: Option<End>,
    /// Bytes that arrived after the handshake ended and before the shard took the link.
    pub pending: BytesMut,
    pub eof: bool,
    /// Its end was sent: the writer shut the socket down and it only reads now.
    pub wr_closed: bool,
}

pub struct Node {
    pub name: String,
    pub ip: Ipv4Addr,
    /// Its listening port (`PORT` unless it shares a host: [`super::Sim::add_node_on_host`]).
    pub port: u16,
    pub id: PeerId,
    pub alive: bool,
    /// Incarnation: bumped by every restart, so nothing addressed to the old one arrives.
    pub gen: u64,
    pub cfg: MeshConfig,
    pub core: ControlCore,
    pub shard: DataPath,
    pub(super) socks: BTreeMap<LinkId, Sock>,
    /// (originator, payload) in delivery order.
    pub delivered: Vec<(PeerId, Bytes)>,
    /// Ids of the delivered messages, same order.
    pub delivered_ids: Vec<MsgId>,
    /// Runs of topic samples delivered to this node's readers, in order.
    pub samples: Vec<SampleRun>,
    /// Peer events (discovered, connected, disconnected, lost) in order.
    pub peer_events: Vec<ControlEvent>,
    /// Member events in order, and when each happened.
    pub member_events: Vec<ControlEvent>,
    pub member_event_at: Vec<Instant>,
    /// Error events.
    pub errors: Vec<ControlEvent>,
    /// Topic events (matched, unmatched, incompatible) in order.
    pub topic_events: Vec<ControlEvent>,
    pub close_reasons: Vec<CloseReason>,
    /// (when, target) of every dial issued.
    pub dial_log: Vec<(Instant, DialTarget)>,
    /// Frames and bytes this node wrote to its links.
    pub tx: Traffic,
    /// Frames and bytes that arrived at this node's links.
    pub rx: Traffic,
    /// PeerConnected events released, per peer.
    pub(super) connected_released: HashMap<PeerId, u64>,
    /// PeerConnected events released before the shard applied an Install for that peer
    /// (the held-event ordering forbids it).
    pub held_violations: u64,
    /// Frames the simulated loss took.
    pub lost_frames: u64,
    /// A [`super::Sim::shard_cmd_cost`] pump step is scheduled.
    pub(super) pumping: bool,
    /// With a shard command cost: the most commands the control core's outbox held when the
    /// pump took one.
    pub max_backlog: usize,
    /// Times the control core's deadline woke it: how often an idle node's control thread
    /// wakes for timers.
    pub control_wakes: u64,
    /// Times the data path's deadline (the shard core's or a link's) woke it: the same for
    /// its shard thread.
    pub shard_wakes: u64,
    /// The control core's and the data path's deadlines as last asked.
    pub(super) armed: (Instant, Instant),
}

/// Wire bytes by kind (plaintext framing: length prefix, type, body).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Data frames.
    pub data_frames: u64,
    pub data_bytes: u64,
    /// Everything else: handshake writes, Heartbeat, Goodbye, Membership, IdentityRecord.
    pub ctl_frames: u64,
    pub ctl_bytes: u64,
    /// The Membership part of `ctl_*`.
    pub membership_frames: u64,
    pub membership_bytes: u64,
    /// The MembershipDigest part of `ctl_*`.
    pub digest_frames: u64,
    pub digest_bytes: u64,
    /// The Discovery part of `ctl_*`.
    pub discovery_frames: u64,
    pub discovery_bytes: u64,
}

impl Traffic {
    pub(super) fn count(&mut self, kind: Kind, len: u64) {
        match kind {
            Kind::Data => {
                self.data_frames += 1;
                self.data_bytes += len;
            }
            _ => {
                self.ctl_frames += 1;
                self.ctl_bytes += len;
                match kind {
                    Kind::Membership => {
                        self.membership_frames += 1;
                        self.membership_bytes += len;
                    }
                    Kind::Digest => {
                        self.digest_frames += 1;
                        self.digest_bytes += len;
                    }
                    Kind::Discovery => {
                        self.discovery_frames += 1;
                        self.discovery_bytes += len;
                    }
                    _ => {}
                }
            }
        }
    }
}

/// The handshake context of a simulated node's settings, as the live node builds it (minus
/// the identity file: only `identity_seed_hex` is read).
pub fn secure_context(cfg: &MeshConfig) -> Option<Arc<SecureContext>> {
    if !cfg.secured() {
        return None;
    }
    let keys = PskKeys::derive(cfg.psk.as_bytes()).expect("valid psk");
    let ctx = SecureContext::new(keys, cfg.group_name.as_bytes())
        .expect("valid group")
        .with_max_message_bytes(cfg.max_message_bytes as usize);
    if cfg.identity_seed_hex.is_empty() {
        return Some(Arc::new(ctx));
    }
    let id = Identity::from_seed_hex(&cfg.identity_seed_hex, &cfg.node_name).expect("seed");
    let policy = IdentityPolicy::open(cfg.requires_identity());
    Some(Arc::new(ctx.with_identity(id, policy)))
}
