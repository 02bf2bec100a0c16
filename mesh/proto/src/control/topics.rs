//! The control core's side of topics: it owns the [`TopicsCore`], feeds it Discovery frames,
//! capable links and its timer, carries out what it asks (frames to the capable links, a
//! link closed on a malformed record, a participant dialed), posts its route tables to every
//! shard and turns its events into [`ControlEvent`]s.
//!
//! **Owns:** the glue between the control core and the topics core. **Must not touch:**
//! topics decisions (`topics::core`), the frame layout (`wire`) or sockets.

use super::{ControlCore, ControlEvent};
use crate::cmd::ToShard;
use crate::config::MeshConfig;
use crate::topics::{
    DiscoveryStats, EndpointGuid, TopicError, TopicsConfig, TopicsCore, TopicsInit, TopicsOutput,
    TopicsView, TreePlanner,
};
use crate::wire::{Discovery, Frame};
use crate::{LinkId, PeerId};
use bytes::{Bytes, BytesMut};
use shoal_discovery::qos::EndpointQos;
use shoal_discovery::types::EndpointKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// The topics core of a new control core; an invalid `[topics]` table (a config that was
/// never validated) falls back to the defaults, with the reason.
pub(super) fn new_topics(
    me: PeerId,
    cfg: &MeshConfig,
    shards: usize,
    listen_addrs: Vec<SocketAddr>,
    wall_ms: u64,
    entity_seed: u32,
    now: Instant,
) -> (TopicsCore, Option<String>) {
    let writer_capacity = |tc: &TopicsConfig| {
        u32::try_from(tc.max_local_endpoints.saturating_add(tc.max_remote_writers))
            .unwrap_or(u32::MAX)
    };
    let init = |tc: TopicsConfig, addrs: Vec<SocketAddr>| TopicsInit {
        me,
        ttl: cfg.initial_ttl,
        shards,
        listen_addrs: addrs,
        wall_ms,
        name: cfg.node_name.clone(),
        entity_seed,
        planner: Box::new(TreePlanner::new(writer_capacity(&tc))),
        reverse_path: cfg.reverse_path_check,
        relay_redundancy: cfg.relay_redundancy,
        cfg: tc,
    };
    match TopicsCore::new(init(cfg.topics.clone(), listen_addrs.clone()), now) {
        Ok(t) => (t, None),
        Err(e) => {
            let t = TopicsCore::new(init(TopicsConfig::default(), listen_addrs), now)
                .expect("the default topics settings are valid");
            (t, Some(e.to_string()))
        }
    }
}

impl ControlCore {
    /// Creates a local writer or reader on `topic` and announces it at once (see
    /// [`TopicsCore::create_endpoint`]). Its matches arrive as [`ControlEvent::Topic`].
    #[allow(clippy::too_many_arguments)]
    pub fn create_endpoint(
        &mut self,
        kind: EndpointKind,
        topic: &str,
        type_name: &str,
        type_hash: [u8; 16],
        qos: EndpointQos,
        partitions: &[String],
        now: Instant,
        wall_ms: u64,
    ) -> Result<EndpointGuid, TopicError> {
        let r = self
            .topics
            .create_endpoint(kind, topic, type_name, type_hash, qos, partitions, now);
        if let (Ok(g), EndpointKind::Writer) = (&r, kind) {
            self.ready_pending.push(*g);
        }
        self.round(now, wall_ms);
        r
    }

    /// The write credit of this node's reliable writer `guid` (see
    /// [`TopicsCore::writer_credit`](crate::topics::TopicsCore::writer_credit)).
    pub fn writer_credit(&self, guid: &EndpointGuid) -> Option<Arc<crate::topics::WriterCredit>> {
        self.topics.writer_credit(guid)
    }

    /// Removes a local endpoint: a withdrawal goes out at once, its matches end
    /// ([`ControlEvent::Topic`]).
    pub fn remove_endpoint(
        &mut self,
        guid: EndpointGuid,
        now: Instant,
        wall_ms: u64,
    ) -> Result<(), TopicError> {
        let r = self.topics.remove_endpoint(guid, now);
        self.round(now, wall_ms);
        r
    }

    /// A snapshot of the topics state (rebuilt only after a change; cheap otherwise). It
    /// shows what every shard already routes: while a route table waits for its planning
    /// interval the topics core keeps its last view, and while a table (or a link change)
    /// is on its way to the shards this keeps the last one shown, so an application that
    /// starts writing when it sees a match finds it routed (the `Matched` events wait the
    /// same way). The first view is built with the core, so even the first call holds.
    pub fn topics_view(&mut self) -> Arc<TopicsView> {
        if self.held.caught_up() {
            self.shown_view = self.topics.view();
        }
        self.shown_view.clone()
    }

    /// The topics counters.
    pub fn discovery_stats(&self) -> DiscoveryStats {
        self.topics.stats()
    }

    /// The topics core itself (read only): its tables as they are now, for invariant
    /// checks; [`topics_view`](Self::topics_view) is what the application sees.
    pub fn topics(&self) -> &TopicsCore {
        &self.topics
    }

    /// Forgets a placed link (and tells the topics core).
    pub(super) fn unplace(&mut self, link: LinkId) -> Option<super::Placed> {
        self.topics.link_down(link);
        let placed = self.placed.remove(&link);
        if let Some(p) = &placed {
            self.slow_memory.closed(p.peer, &p.budget);
        }
        placed
    }

    /// A Discovery frame from `link`; `signed`: its origin's signature over it verified
    /// (identity mode).
    pub(super) fn on_discovery(
        &mut self,
        link: LinkId,
        frame: Discovery,
        signed: bool,
        now: Instant,
    ) {
        // Only a capable link's shard decodes Discovery frames; anything else is stale.
        if self.placed.get(&link).is_some_and(|p| p.capable) {
            self.topics.on_discovery(link, frame, signed, now);
        }
    }

    /// Carries out the topics core's outputs.
    pub(super) fn topics_outputs(&mut self, now: Instant) {
        while let Some(o) = self.topics.poll_output() {
            match o {
                TopicsOutput::Flood { mut frame, except } => {
                    self.sign_own_discovery(&mut frame);
                    // A relayed frame skips the neighbours its origin's membership record
                    // lists, as membership relays do: the origin sent it to them directly
                    // (a frame lost to a link that just went is repaired by the next cycle).
                    // With `relay_pruning` it also skips the links a broadcast relay of
                    // that origin skips (neighbours no farther from the origin, which take
                    // its Discovery frames only from links toward it; the same table, so
                    // the same settling rules): in a sparse mesh (`max_links`) the cycle
                    // of every node otherwise reached each node over most of its links. Of
                    // a farther node's relays only the first by rank sends once the origin
                    // settled: a lost cycle is repaired by the next. Both only while every
                    // node is topic-capable (`discovery_skips`).
                    let listed: &[PeerId] = match except {
                        Some(_) => self
                            .membership
                            .adjacency()
                            .find(|(o, _)| **o == frame.origin)
                            .map_or(&[], |(_, n)| n),
                        None => &[],
                    };
                    let (tree, outranked): (&[LinkId], &[PeerId]) = match except {
                        Some(_) => self.discovery_skips(&frame.origin, now),
                        None => (&[], &[]),
                    };
                    let mut pruned = 0u64;
                    let mut targets: Vec<(LinkId, usize)> = self
                        .placed
                        .iter()
                        .filter(|(l, p)| p.capable && Some(**l) != except)
                        .filter(|(l, p)| {
                            let skip = p.peer == frame.origin
                                || listed.contains(&p.peer)
                                || tree.binary_search(l).is_ok()
                                || outranked.binary_search(&p.peer).is_ok();
                            pruned += u64::from(skip);
                            !skip
                        })
                        .map(|(l, p)| (*l, p.shard))
                        .collect();
                    self.topics.count_relays_pruned(pruned);
                    if targets.is_empty() {
                        continue;
                    }
                    targets.sort_unstable();
                    self.post_discovery(frame, &targets);
                }
                TopicsOutput::Send { mut frame, links } => {
                    let targets: Vec<(LinkId, usize)> = links
                        .iter()
                        .filter_map(|l| {
                            self.placed
                                .get(l)
                                .filter(|p| p.capable)
                                .map(|p| (*l, p.shard))
                        })
                        .collect();
                    if !targets.is_empty() {
                        // A new neighbour's catch-up: signed like any own frame (identity
                        // mode).
                        self.sign_own_discovery(&mut frame);
                        self.post_discovery(frame, &targets);
                    }
                }
                TopicsOutput::CloseLink(link) => {
                    self.warn(
                        "malformed discovery record, link closed",
                        format!("{link:?}"),
                    );
                    self.close(link, false);
                }
                TopicsOutput::PauseDiscovery { link, until } => {
                    if let Some(shard) = self.placed.get(&link).map(|p| p.shard) {
                        self.post(shard, ToShard::PauseDiscovery { link, until });
                    }
                }
                TopicsOutput::Dial { peer, addr } => {
                    if !self.stopping && self.peers.link_of(&peer).is_none() {
                        self.peers.on_announce(peer, addr, now);
                    }
                }
            }
        }
    }

    /// Encodes `frame` once and posts it to each (link, shard) of `targets`.
    fn post_discovery(&mut self, frame: Discovery, targets: &[(LinkId, usize)]) {
        let mut b = BytesMut::new();
        if let Err(e) = Frame::Discovery(frame).encode(&mut b) {
            // Own records are bounded and packed within the frame bound, and a re-flood
            // re-encodes what decoded: this cannot happen.
            self.warn("discovery frame not encodable", e.to_string());
            return;
        }
        let bytes: Bytes = b.freeze();
        for &(link, shard) in targets {
            self.post(
                shard,
                ToShard::SendRaw {
                    link,
                    frame: bytes.clone(),
                },
            );
        }
    }

    /// Posts a new route table to every shard when one is due. True when one was posted.
    pub(super) fn topics_routes(&mut self, now: Instant) -> bool {
        if let Some(p) = self.shared_paths() {
            self.topics.offer_paths(p.clone());
        }
        let Some(table) = self.topics.routes_due(&self.membership, now) else {
            return false;
        };
        for s in 0..self.shards {
            self.post(s, ToShard::SampleRoutes(table.clone()));
        }
        true
    }

    pub(super) fn topics_events(&mut self, events: &mut Vec<ControlEvent>) {
        if self.topics.routes_pending() {
            // Matched events wait for the table that routes them (a later round's).
            return;
        }
        // New writers are in the table this round posted (or an earlier one): ready once the
        // shards applied it (the events are held until then).
        events.extend(
            self.ready_pending
                .drain(..)
                .map(|endpoint| ControlEvent::EndpointReady { endpoint }),
        );
        while let Some(e) = self.topics.poll_event() {
            events.push(ControlEvent::Topic(e));
        }
    }
}
