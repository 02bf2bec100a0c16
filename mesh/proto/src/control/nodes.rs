//! What this node knows about every member of the mesh, for observers
//! ([`ControlCore::nodes_view`]): names, addresses, identities, which protocol each speaks,
//! each one's links with their round-trip times, start times.
//!
//! Built on request from the tables the control core already keeps (membership records, the
//! peer table, placed links and their RTT samples, the topics participant records, the
//! identity book); nothing here is kept or sent. Every fact is labelled with whose word it
//! is: a node's own participant record speaks for that node only, and what a node says
//! about its links (RTT, whether the neighbour advertised extended frames) is shown as that
//! node's measurement, never as the neighbour's claim.
//!
//! **Owns:** the shape of the view and the rules that combine the tables into it. **Must not
//! touch:** the tables themselves (read only), routing or matching.

use super::ControlCore;
use crate::PeerId;
use ahash::AHashMap;
use shoal_discovery::locators::to_socket;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

/// Which frames a node speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Speaks {
    /// Shoal's extended frames (topics, signed records) besides the multimaster v1 ones.
    Extensions,
    /// Only the multimaster v1 frames (e.g. a node of the C++ library): it carries
    /// broadcasts, targeted messages and membership, never a topic frame.
    V1Only,
    /// Nobody this node hears from has a link to it that says.
    Unknown,
}

/// A node's signed identity (identity mesh).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    /// Its Ed25519 public key (its node id is the hash of it).
    pub key: [u8; 32],
    /// The name it signed.
    pub name: String,
}

/// One link of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkView {
    /// The node at the other end.
    pub peer: PeerId,
    /// Its round-trip time (the kernel's measurement at the measuring end: its lowest recent
    /// sample, see `shoal_runtime::net::TcpStream::rtt`), when some
    /// end reported one.
    pub rtt: Option<Duration>,
    /// The end that measured `rtt` (this node for its own links).
    pub measured_by: Option<PeerId>,
}

/// What this node knows about one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    /// Its id.
    pub id: PeerId,
    /// This node itself.
    pub this_node: bool,
    /// Linked to this node directly.
    pub neighbour: bool,
    /// The name in its participant record (`node_name`, or its id in hex when it set none);
    /// `None` when no record of it arrived.
    pub name: Option<String>,
    /// Its signed identity (identity mesh), as verified here.
    pub identity: Option<NodeIdentity>,
    /// Addresses it listens on (announced in its participant record) and the dial-back
    /// address its multicast beacons gave, deduplicated.
    pub addresses: Vec<SocketAddr>,
    /// Which frames it speaks.
    pub speaks: Speaks,
    /// Whose word `speaks` is: the node itself (its participant record), this node (its own
    /// link to it) or a neighbour of it (that neighbour's link report). `None` when unknown.
    pub speaks_per: Option<PeerId>,
    /// Its topics participant record arrived here: its topic endpoints can be known. A
    /// member without one is invisible to topics (see the `shoal topics` silent causes).
    pub topic_records: bool,
    /// When it started, in wall-clock ms since the Unix epoch, by its own clock.
    pub started_ms: Option<u64>,
    /// Its links in the membership graph (an edge counts when each end whose record is
    /// known lists the other), by peer id.
    pub links: Vec<LinkView>,
}

/// Every member of the mesh as this node knows it ([`ControlCore::nodes_view`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodesView {
    /// This node.
    pub me: PeerId,
    /// This node's wall clock (ms since the Unix epoch) when the view was built: uptimes
    /// are `wall_ms - started_ms`.
    pub wall_ms: u64,
    /// This node first, then every member by id.
    pub nodes: Vec<NodeView>,
}

impl NodesView {
    /// The node `id`.
    pub fn node(&self, id: &PeerId) -> Option<&NodeView> {
        self.nodes.iter().find(|n| n.id == *id)
    }
}

impl ControlCore {
    /// What this node knows about every member (see the module docs). Built on each call:
    /// O(members + membership edges); nothing on the message path pays for it.
    pub fn nodes_view(&self, wall_ms: u64) -> NodesView {
        let me = self.me;
        let adj: AHashMap<PeerId, &[PeerId]> =
            self.membership.adjacency().map(|(o, n)| (*o, n)).collect();
        // The membership module's rule: an edge counts when every end whose record is known
        // lists the other.
        let lists = |a: &PeerId, b: &PeerId| adj.get(a).is_none_or(|l| l.contains(b));
        let mut ids: BTreeSet<PeerId> = self.membership.members().copied().collect();
        ids.remove(&me);
        let mut own_links: AHashMap<PeerId, (Option<Duration>, bool)> = AHashMap::new();
        for p in self.placed.values() {
            let e = own_links.entry(p.peer).or_insert((None, p.capable));
            e.0 = e.0.or(p.budget.rtt());
        }
        let report = |by: &PeerId, about: &PeerId| {
            self.topics
                .participant_of(by)
                .and_then(|p| p.links.iter().find(|l| l.peer == about.0))
                .copied()
        };
        let node = |id: PeerId| -> NodeView {
            let record = self.topics.participant_of(&id);
            let mut peers: BTreeSet<PeerId> = BTreeSet::new();
            if let Some(l) = adj.get(&id) {
                peers.extend(l.iter().copied().filter(|p| lists(p, &id)));
            }
            for (o, l) in &adj {
                if l.contains(&id) && lists(&id, o) {
                    peers.insert(*o);
                }
            }
            peers.remove(&id);
            let links = peers
                .into_iter()
                .map(|peer| {
                    let own = if id == me {
                        own_links.get(&peer).and_then(|l| l.0)
                    } else if peer == me {
                        own_links.get(&id).and_then(|l| l.0)
                    } else {
                        None
                    };
                    let (rtt, measured_by) = match own {
                        Some(r) => (Some(r), Some(me)),
                        None => [(id, peer), (peer, id)]
                            .into_iter()
                            .find_map(|(by, about)| {
                                let r = report(&by, &about)?;
                                (r.rtt_us > 0).then(|| {
                                    (Some(Duration::from_micros(u64::from(r.rtt_us))), Some(by))
                                })
                            })
                            .unwrap_or((None, None)),
                    };
                    LinkView {
                        peer,
                        rtt,
                        measured_by,
                    }
                })
                .collect();
            let (speaks, speaks_per) = if id == me || record.is_some() {
                (Speaks::Extensions, Some(id))
            } else if let Some(&(_, capable)) = own_links.get(&id) {
                (speaks_of(capable), Some(me))
            } else {
                // A neighbour that reports its link to it, lowest id first (deterministic).
                adj.get(&id)
                    .into_iter()
                    .flat_map(|l| l.iter())
                    .chain(adj.iter().filter(|(_, l)| l.contains(&id)).map(|(o, _)| o))
                    .filter_map(|n| report(n, &id).map(|r| (*n, r.extended)))
                    .min_by_key(|(n, _)| *n)
                    .map_or((Speaks::Unknown, None), |(n, ext)| {
                        (speaks_of(ext), Some(n))
                    })
            };
            let mut addresses: Vec<SocketAddr> = record
                .iter()
                .flat_map(|p| p.user_locators.iter())
                .filter_map(to_socket)
                .collect();
            if let Some(a) = self.peers.peer_addr(&id) {
                addresses.push(a);
            }
            addresses.sort_unstable();
            addresses.dedup();
            let identity = if id == me {
                self.secure.as_deref().and_then(|c| {
                    c.identity().map(|i| NodeIdentity {
                        key: *i.public_key(),
                        name: i.name().to_owned(),
                    })
                })
            } else {
                self.book.get(&id).map(|k| NodeIdentity {
                    key: k.key,
                    name: k.name.to_string(),
                })
            };
            NodeView {
                id,
                this_node: id == me,
                neighbour: own_links.contains_key(&id),
                name: record.map(|p| p.name.clone()),
                identity,
                addresses,
                speaks,
                speaks_per,
                topic_records: record.is_some(),
                started_ms: record.and_then(|p| p.started_ms),
                links,
            }
        };
        let nodes = std::iter::once(me).chain(ids).map(node).collect();
        NodesView { me, wall_ms, nodes }
    }

    /// This node's links as its participant record reports them to observers: every placed
    /// link's peer, last RTT sample and whether the peer advertised extended frames.
    pub(super) fn link_reports(&self) -> Vec<shoal_discovery::types::LinkReport> {
        self.placed
            .values()
            .map(|p| shoal_discovery::types::LinkReport {
                peer: p.peer.0,
                rtt_us: p
                    .budget
                    .rtt()
                    .map_or(0, |d| u32::try_from(d.as_micros()).unwrap_or(u32::MAX)),
                extended: p.capable,
            })
            .collect()
    }
}

fn speaks_of(extended: bool) -> Speaks {
    if extended {
        Speaks::Extensions
    } else {
        Speaks::V1Only
    }
}
