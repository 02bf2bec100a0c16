//! The sample routes the control plane computes and pushes to every shard: per writer, the
//! links its samples go out on from this node and the local readers they are delivered to.
//!
//! **Owns:** the immutable, epoch-numbered route table and the per-topic counters it points
//! at. **Must not touch:** how routes are computed (`topics`) or carried out (`shard`).
//!
//! A table is built whole by the control core on every change of matches, membership or links
//! and handed to each shard as an `Arc` (`ToShard::SampleRoutes`); a shard swaps its pointer
//! and never writes it. On the sample path a shard does one lookup by writer GUID (a 16-byte
//! key, no string hashing) per run of samples, then indexes its own per-writer state by
//! [`WriterRoute::slot`], which stays the same for a writer across tables while the writer is
//! known, so sequence state survives a route change.

use super::credit::WriterCredit;
use crate::stats::TopicCounters;
use crate::LinkId;
use ahash::AHashMap;
use std::sync::Arc;
use std::time::Duration;

/// An endpoint's GUID as the wire carries it: its node's 12-byte id prefix, then a 4-byte
/// entity id.
pub type EndpointGuid = [u8; 16];

/// Where one writer's samples go from this node.
#[derive(Debug, Clone)]
pub struct WriterRoute {
    /// The writer.
    pub writer: EndpointGuid,
    /// Stable index of the writer's sequence state on a shard, unique among the writers of
    /// one table and the same in every table while the writer stays known.
    pub slot: u32,
    /// The writer's topic's counters (written, delivered, dropped by cause).
    pub topic: Arc<TopicCounters>,
    /// The writer is one of this node's own.
    pub local: bool,
    /// The links to send each sample on: the branches of the writer's shortest-path tree
    /// from this node that lead to nodes hosting a matched reader, each a link whose peer
    /// understands extended frames. Sorted, no duplicates.
    pub links: Vec<LinkId>,
    /// The local readers matched with the writer (delivered to on this node). Sorted.
    pub readers: Vec<EndpointGuid>,
    /// For a local writer: nodes hosting matched readers that its tree does not reach from
    /// here yet (the membership graph has no path over topic-capable nodes, or this node has
    /// no capable link toward them). What it writes meanwhile is counted as lost for each
    /// (`dropped_no_route`), never silently.
    pub unreached: u32,
    /// For another node's writer: this node's link toward the writer's node along the
    /// writer's tree (its parent), where acknowledgements and repair requests go (the
    /// directional rule: requests use the writer's address). `None` for a local writer, or
    /// when no capable link leads there.
    pub upstream: Option<LinkId>,
    /// For another node's writer: the links its samples and down-tree reliability frames are
    /// taken from (anything else is dropped, counted): `upstream` and every other link to a
    /// neighbour closer to the writer's node than this node is in the writer's tree, or the
    /// direct link to the writer's node when this node's view does not reach it yet. The
    /// closer neighbours cover views that differ while a link changes (a copy along the tree
    /// another node already sees is taken, the sequence check drops it if it is one); a
    /// neighbour no closer than this node never sends a writer's samples here in agreeing
    /// views, so a run from one is a forgery (a stranger's, with a sequence number far ahead
    /// to make the real samples look seen) or, while views differ, a copy along a tree this
    /// node does not see yet (dropped and counted too: best-effort loss while routes change,
    /// which reliable readers repair). Empty for a local writer: its samples never come in
    /// on a link. Sorted.
    pub accept_from: Vec<LinkId>,
    /// For each node hosting a matched reader below this node in the writer's tree (by its
    /// 12-byte id prefix, which starts its readers' GUIDs): the route link that leads
    /// there. Sorted by prefix. Repairs and Gaps, meant for one reader, take only that link.
    pub toward: Vec<([u8; 12], LinkId)>,
    /// What reliable delivery needs of this writer here; `None` when no reliable reader is
    /// matched with it (and, for a local writer, it keeps no history for late joiners), so
    /// best-effort routes carry nothing more.
    pub reliable: Option<Arc<ReliableRoute>>,
}

/// The reliable side of a [`WriterRoute`].
#[derive(Debug, Clone, PartialEq)]
pub struct ReliableRoute {
    /// For this node's own reliable writer: its history settings and its matched reliable
    /// readers on other nodes. `None` on the other nodes.
    pub writer: Option<ReliableWriterSpec>,
    /// This node's reliable readers matched with another node's writer: each gets the
    /// writer's samples in order, exactly once, through its own reader state. Sorted. (A
    /// node's own writer's readers on the same node are handed every sample directly.)
    pub local_readers: Vec<EndpointGuid>,
}

/// A local reliable writer's history settings, from its QoS, and who must acknowledge.
#[derive(Debug, Clone)]
pub struct ReliableWriterSpec {
    /// Keep-last depth; `None`: keep-all.
    pub keep_last: Option<u32>,
    /// Keep-all: at most this many samples not acknowledged by every reader (resource
    /// limits' `max_samples`; `None`: the node's `max_history_samples`).
    pub max_samples: Option<u32>,
    /// Samples older than this are neither delivered by repair nor handed to late joiners.
    pub lifespan: Option<Duration>,
    /// Late-joining readers get the history first (durability transient-local or above).
    pub transient_local: bool,
    /// The matched reliable readers on other nodes, sorted.
    pub readers: Vec<EndpointGuid>,
    /// Of them, those that asked for the history (durability transient-local or above):
    /// only they get it handed over. Sorted.
    pub durable_readers: Vec<EndpointGuid>,
    /// The lease of each reader's node as admitted (capped), in `readers`' order: a
    /// keep-all writer stops waiting for a reader silent that long (or `ack_timeout`, if
    /// shorter).
    pub reader_leases: Vec<Duration>,
    /// The write credit the writer's handle waits on (keep-all), shared with the shard.
    pub credit: Arc<WriterCredit>,
}

impl PartialEq for ReliableWriterSpec {
    fn eq(&self, o: &Self) -> bool {
        self.keep_last == o.keep_last
            && self.max_samples == o.max_samples
            && self.lifespan == o.lifespan
            && self.transient_local == o.transient_local
            && self.readers == o.readers
            && self.durable_readers == o.durable_readers
            && self.reader_leases == o.reader_leases
            && Arc::ptr_eq(&self.credit, &o.credit)
    }
}

/// An immutable route table (see the [module docs](self)).
#[derive(Debug, Default)]
pub struct SampleRoutes {
    epoch: u64,
    index: AHashMap<EndpointGuid, u32>,
    routes: Vec<WriterRoute>,
    /// Writers the previous table routed that are gone, sorted (see
    /// [`removed`](Self::removed)).
    removed: Vec<EndpointGuid>,
}

impl WriterRoute {
    /// True when this writer's samples (and Heartbeats, Repairs, Gaps) are taken from `from`
    /// (see [`accept_from`](Self::accept_from)).
    pub fn accepts_from(&self, from: LinkId) -> bool {
        self.accept_from.binary_search(&from).is_ok()
    }

    /// The route link toward the node of `reader` (see [`toward`](Self::toward)).
    pub fn link_toward(&self, reader: &EndpointGuid) -> Option<LinkId> {
        let prefix: [u8; 12] = reader[..12].try_into().expect("16 >= 12");
        toward_link(&self.toward, &prefix)
    }
}

/// The link a [`WriterRoute::toward`] list (sorted by node) gives for `node`.
pub fn toward_link(toward: &[([u8; 12], LinkId)], node: &[u8; 12]) -> Option<LinkId> {
    toward
        .binary_search_by(|(p, _)| p.cmp(node))
        .ok()
        .map(|i| toward[i].1)
}

impl SampleRoutes {
    /// A table numbered `epoch` (rising with each table the control core builds) holding
    /// `routes` (at most one per writer; a later duplicate replaces an earlier one).
    pub fn new(epoch: u64, routes: Vec<WriterRoute>) -> SampleRoutes {
        let mut t = SampleRoutes {
            epoch,
            index: AHashMap::with_capacity(routes.len()),
            routes: Vec::with_capacity(routes.len()),
            removed: Vec::new(),
        };
        for r in routes {
            // The shards take a writer's samples from `accept_from` alone, the local flag
            // unread: a local writer's must be empty (its samples never come in on a link).
            debug_assert!(
                !r.local || r.accept_from.is_empty(),
                "a local writer's samples are taken from no link"
            );
            match t.index.get(&r.writer) {
                Some(&i) => t.routes[i as usize] = r,
                None => {
                    let i = u32::try_from(t.routes.len()).expect("fewer than 2^32 writers");
                    t.index.insert(r.writer, i);
                    t.routes.push(r);
                }
            }
        }
        t
    }

    /// The table, saying that `removed` (writers the previous table routed) are gone:
    /// withdrawn, expired, or their node left, rather than no longer matched here.
    pub fn with_removed(mut self, mut removed: Vec<EndpointGuid>) -> SampleRoutes {
        removed.sort_unstable();
        removed.dedup();
        self.removed = removed;
        self
    }

    /// Writers the previous table routed that are gone (withdrawn, expired, their node
    /// left), sorted. What they wrote before that may still be on its way through this node
    /// (a run hopping between shards, a thread writer's last batch): the shards keep their
    /// last route a while for it. A writer merely unmatched here is not listed: its runs
    /// have nowhere to go.
    pub fn removed(&self) -> &[EndpointGuid] {
        &self.removed
    }

    /// The table's number.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The route of `writer`, if this node forwards or delivers its samples.
    #[inline]
    pub fn get(&self, writer: &EndpointGuid) -> Option<&WriterRoute> {
        self.index.get(writer).map(|&i| &self.routes[i as usize])
    }

    /// Every route, in the order given.
    pub fn routes(&self) -> &[WriterRoute] {
        &self.routes
    }

    /// Number of writers routed.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// True when no writer is routed.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(w: u8, slot: u32, links: &[u64]) -> WriterRoute {
        WriterRoute {
            writer: [w; 16],
            slot,
            topic: Arc::new(TopicCounters::default()),
            local: false,
            links: links.iter().map(|&l| LinkId(l)).collect(),
            readers: Vec::new(),
            unreached: 0,
            upstream: None,
            accept_from: Vec::new(),
            toward: Vec::new(),
            reliable: None,
        }
    }

    #[test]
    fn lookup_by_writer_and_later_duplicates_replace() {
        let t = SampleRoutes::new(
            7,
            vec![route(1, 0, &[1]), route(2, 1, &[2]), route(1, 0, &[3])],
        );
        assert_eq!(t.epoch(), 7);
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(&[1; 16]).unwrap().links, vec![LinkId(3)]);
        assert_eq!(t.get(&[2; 16]).unwrap().slot, 1);
        assert!(t.get(&[3; 16]).is_none());
    }
}
