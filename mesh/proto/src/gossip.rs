//! The gossip routing decision for Data frames (`mesh/proto/protocol/v1-wire.md`, "Gossip
//! routing of Data frames").
//!
//! A [`Gossip`] lives on each data shard next to that shard's [`DedupCache`]. The driver calls
//! [`Gossip::on_data`] on the shard that owns the message's originator
//! ([`super::dedup_shard`]) and executes the returned [`DataVerdict`]; the decision itself reads only
//! the shard's [`NeighbourLinks`] and [`PathTable`] (pushed by the control plane) and allocates
//! nothing.
//!
//! Before the dedup cache sees an id, two checks keep a stranger from spending another
//! origin's ids (issue 24, finding 12: forged frames carrying an origin's next ids, once
//! recorded, made the real ones duplicates everywhere):
//! - the id must be the originator's: `msgId[0..8] == src[0..8]`, as the v1 wire builds it
//!   (else [`DropReason::ForeignMsgId`]); the dedup cache keys streams by that prefix, so a
//!   frame under its own `src` could otherwise still spend another node's ids;
//! - with a [`PathTable`] set ([`Gossip::set_paths`]), origin X's frames are taken only from the
//!   links toward X ([`crate::reverse_path`]), or from X's own link as the [`NeighbourLinks`]
//!   name it (a link that replaced another before the next table arrived), or from any link
//!   while X's links settle after a change (other nodes may still judge by the old graph;
//!   see [`PathTable`]); else [`DropReason::OffPath`]. Targeted frames too: a relay floods
//!   them like broadcasts until a node next to the destination unicasts, and that node is one
//!   hop closer to the origin than the destination on the copy that travelled a shortest path
//!   (the reverse-path module's induction), so the check costs them nothing more than it
//!   costs broadcasts. A relayed broadcast skips the links whose neighbour would refuse it
//!   ([`Gossip::skipped_links`], used by the shard's fan-out).

use super::dedup::{DedupCache, DedupStats, Seen};
use super::LinkId;
use crate::reverse_path::{PathCheck, PathTable};
use crate::{MsgId, PeerId};
use ahash::AHashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which link reaches each direct neighbour, as pushed by the control plane to every shard.
/// Bounded by the control plane's peer ceiling: it only installs established peers.
#[derive(Debug, Clone, Default)]
pub struct NeighbourLinks {
    by_peer: AHashMap<PeerId, LinkId>,
    links: Vec<LinkId>,
}

impl NeighbourLinks {
    /// An empty table.
    pub fn new() -> NeighbourLinks {
        NeighbourLinks::default()
    }

    /// Routes `peer` over `link`, replacing a previous link (dial-race winner takes over).
    pub fn insert(&mut self, peer: PeerId, link: LinkId) {
        if let Some(old) = self.by_peer.insert(peer, link) {
            self.links.retain(|l| *l != old);
        }
        self.links.push(link);
    }

    /// Forgets `peer`, but only if it is still routed over `link` (a late removal of a replaced
    /// link must not remove its successor). Returns whether something was removed.
    pub fn remove(&mut self, peer: &PeerId, link: LinkId) -> bool {
        if self.by_peer.get(peer) == Some(&link) {
            self.by_peer.remove(peer);
            self.links.retain(|l| *l != link);
            true
        } else {
            false
        }
    }

    /// The link to a direct neighbour.
    pub fn link_to(&self, peer: &PeerId) -> Option<LinkId> {
        self.by_peer.get(peer).copied()
    }

    /// The neighbour routed over `link` (a scan: for rare events, not the message path).
    pub fn peer_on(&self, link: LinkId) -> Option<PeerId> {
        self.by_peer
            .iter()
            .find_map(|(p, l)| (*l == link).then_some(*p))
    }

    /// Every established link, one per neighbour.
    pub fn links(&self) -> &[LinkId] {
        &self.links
    }

    /// Number of direct neighbours.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// True with no neighbour.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// True if some link other than `except` exists, i.e. a flood would reach someone.
    fn has_link_besides(&self, except: Option<LinkId>) -> bool {
        match except {
            None => !self.links.is_empty(),
            Some(l) => self.links.iter().any(|x| *x != l),
        }
    }
}

/// The routing-relevant fields of a Data frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataMeta {
    /// Originator.
    pub src: PeerId,
    /// Destination; [`PeerId::ZERO`] for a broadcast.
    pub dst: PeerId,
    /// Message id (originator prefix and counter).
    pub msg_id: MsgId,
    /// Remaining hops as received.
    pub ttl: u8,
}

/// Why a Data frame was not delivered nor sent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The id was seen before (the main loop protection).
    Duplicate,
    /// A targeted message for someone else arrived with `ttl <= 1`: no hop left to relay it.
    TtlExpired,
    /// Nowhere to send it: no link besides the one it came from.
    NoRoute,
    /// The id is older than anything the dedup cache still remembers for its stream: it may
    /// have been seen and forgotten, so it is never delivered (see [`super::dedup`]).
    TooOld,
    /// The frame's origin is known and the link it came on does not lead toward it (see the
    /// [module docs](self)): a forgery, or a redundant copy while the graph changes.
    OffPath,
    /// The message id does not start with its `src`'s first 8 bytes.
    ForeignMsgId,
}

/// What to do with a Data frame. For every variant that sends, the frame goes out with
/// `ttl` in place of the received one (payload and other fields unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataVerdict {
    /// Hand the payload to the local application; send nothing.
    Deliver,
    /// Deliver locally and send to every link except `except`.
    DeliverAndForward {
        /// The inbound link (split horizon).
        except: LinkId,
        /// TTL to write into the forwarded frames.
        ttl: u8,
    },
    /// Send to every link except `except` (all links when `None`: an originated flood).
    Forward {
        /// The inbound link, if any.
        except: Option<LinkId>,
        /// TTL to write into the forwarded frames.
        ttl: u8,
    },
    /// Send on this single link (the destination is a direct neighbour).
    Unicast {
        /// The link to the destination.
        link: LinkId,
        /// TTL to write into the frame.
        ttl: u8,
    },
    /// Do nothing; the reason is counted in [`GossipStats`].
    Drop(DropReason),
}

/// Counters of a [`Gossip`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GossipStats {
    /// Messages handed to the local application.
    pub delivered: u64,
    /// Flood decisions (received or originated) that reached at least one link.
    pub forwarded: u64,
    /// Unicast decisions.
    pub unicast: u64,
    /// Own messages that came back (also counted in `dropped_duplicate`).
    pub self_echo_suppressed: u64,
    /// New broadcasts delivered but not forwarded because `ttl <= 1`.
    pub ttl_exhausted: u64,
    /// Dropped as duplicates.
    pub dropped_duplicate: u64,
    /// Dropped for [`DropReason::TtlExpired`].
    pub dropped_ttl: u64,
    /// Dropped for [`DropReason::NoRoute`].
    pub dropped_no_route: u64,
    /// Dropped for [`DropReason::TooOld`].
    pub dropped_too_old: u64,
    /// Dropped for [`DropReason::OffPath`].
    pub dropped_off_path: u64,
    /// Dropped for [`DropReason::ForeignMsgId`].
    pub dropped_foreign_msg_id: u64,
    /// Taken from a link not toward their origin because the origin's links changed less
    /// than the settling time ago ([`PathCheck::Settling`]).
    pub taken_while_settling: u64,
}

/// Hands out message ids: the originator prefix and a counter seeded randomly at start.
/// Every originating shard and every batching publisher has its own generator with its own
/// random seed: ids of one generator form one run of counters (a *stream*, which the dedup
/// cache's floors rely on; see [`super::dedup`]), no counter is shared between threads, and two
/// generators collide only if their random starts fall within their message counts of each
/// other (about 2^-40 for two generators of 2^12 million messages each).
#[derive(Debug, Clone)]
pub struct MsgIdGen {
    origin: PeerId,
    counter: u64,
}

impl MsgIdGen {
    /// A generator for `origin`; `seed` should be random.
    pub fn new(origin: PeerId, seed: u64) -> MsgIdGen {
        MsgIdGen {
            origin,
            counter: seed,
        }
    }

    /// The next id (the counter is incremented before use, as the C++ library does).
    pub fn next_id(&mut self) -> MsgId {
        self.counter = self.counter.wrapping_add(1);
        MsgId::new(&self.origin, self.counter)
    }
}

/// Per-shard gossip: dedup plus the rules that pick a Data frame's route.
#[derive(Debug)]
pub struct Gossip {
    me: PeerId,
    initial_ttl: u8,
    dedup: DedupCache,
    stats: GossipStats,
    /// The reverse-path table (`None`: no check).
    paths: Option<Arc<PathTable>>,
    /// The last `(origin, link)` the check took a frame from: a read holds runs of one
    /// origin's frames, and all but the first of a run skip the table's hash probe. Cleared
    /// with every new table; link ids are never reused, so it cannot outlive its link.
    path_hit: Option<(PeerId, LinkId)>,
}

impl Gossip {
    /// The gossip of node `me` with a dedup cache of `max_dedup_entries` for `dedup_ttl`.
    pub fn new(
        me: PeerId,
        initial_ttl: u8,
        max_dedup_entries: usize,
        dedup_ttl: Duration,
        now: Instant,
    ) -> Gossip {
        Gossip::with_dedup(
            me,
            initial_ttl,
            DedupCache::new(max_dedup_entries, dedup_ttl, now),
        )
    }

    /// The gossip of node `me` with the given dedup cache.
    pub fn with_dedup(me: PeerId, initial_ttl: u8, dedup: DedupCache) -> Gossip {
        Gossip {
            me,
            initial_ttl: initial_ttl.max(1),
            dedup,
            stats: GossipStats::default(),
            paths: None,
            path_hit: None,
        }
    }

    /// From now on, takes each origin's frames only from the links `paths` names for it
    /// (`None`: from any link). Swapped whole when the control plane pushes a new table.
    pub fn set_paths(&mut self, paths: Option<Arc<PathTable>>) {
        self.paths = paths;
        self.path_hit = None;
    }

    /// The links a relay of `origin`'s broadcast skips at `now` (see
    /// [`PathTable::skipped_links`]); `None` (skip none) without a table.
    #[inline]
    pub fn skipped_links(&self, origin: &PeerId, now: Instant) -> Option<&[LinkId]> {
        self.paths.as_ref()?.skipped_links(origin, now)
    }

    /// [`GossipStats::taken_while_settling`] alone, for a caller that mirrors it per frame.
    #[inline]
    pub fn taken_while_settling(&self) -> u64 {
        self.stats.taken_while_settling
    }

    /// Routing counters.
    pub fn stats(&self) -> GossipStats {
        self.stats
    }

    /// The dedup cache's counters.
    pub fn dedup_stats(&self) -> DedupStats {
        self.dedup.stats()
    }

    /// When the dedup sweep wants to run; call [`handle_timeout`](Self::handle_timeout) then.
    pub fn poll_timeout(&self) -> Instant {
        self.dedup.poll_timeout()
    }

    /// Runs the dedup age sweep if due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.dedup.handle_timeout(now);
    }

    /// Decides what to do with a Data frame received on `from`.
    pub fn on_data(
        &mut self,
        table: &NeighbourLinks,
        from: LinkId,
        meta: &DataMeta,
        now: Instant,
    ) -> DataVerdict {
        // Our own message coming back: we sent it on every link when we originated it, so it
        // is a duplicate by definition. Judging it by origin instead of pre-seeding its id in
        // the cache keeps the originating shard off the cache (one insert and, at the bound,
        // one eviction per message saved) and still holds after the cache forgot the id.
        if meta.src == self.me {
            self.stats.self_echo_suppressed += 1;
            return self.drop(DropReason::Duplicate);
        }
        if meta.msg_id.0[..8] != meta.src.0[..8] {
            return self.drop(DropReason::ForeignMsgId);
        }
        if let Some(paths) = &self.paths {
            if self.path_hit != Some((meta.src, from)) {
                match paths.check(&meta.src, from, now) {
                    PathCheck::Unknown | PathCheck::Toward => {
                        self.path_hit = Some((meta.src, from))
                    }
                    // Not remembered: the same link's copies are refused once it settles.
                    PathCheck::Settling => self.stats.taken_while_settling += 1,
                    PathCheck::Off if table.link_to(&meta.src) == Some(from) => {
                        self.path_hit = Some((meta.src, from))
                    }
                    PathCheck::Off => return self.drop(DropReason::OffPath),
                }
            }
        }
        match self.dedup.check(meta.msg_id, now) {
            Seen::New => {}
            Seen::Duplicate => return self.drop(DropReason::Duplicate),
            Seen::TooOld => return self.drop(DropReason::TooOld),
        }
        if meta.dst.is_zero() {
            self.stats.delivered += 1;
            if meta.ttl <= 1 {
                self.stats.ttl_exhausted += 1;
                return DataVerdict::Deliver;
            }
            if !table.has_link_besides(Some(from)) {
                return DataVerdict::Deliver;
            }
            self.stats.forwarded += 1;
            return DataVerdict::DeliverAndForward {
                except: from,
                ttl: meta.ttl - 1,
            };
        }
        if meta.dst == self.me {
            self.stats.delivered += 1;
            return DataVerdict::Deliver;
        }
        if meta.ttl <= 1 {
            return self.drop(DropReason::TtlExpired);
        }
        self.relay(table, Some(from), meta.dst, meta.ttl - 1)
    }

    /// Decides how to send a message this node originates (`dst` zero = broadcast). Its id
    /// needs no dedup entry: [`on_data`](Self::on_data) drops every message whose `src` is this
    /// node, which is what pre-seeding the id (the C++ library's way) achieves, minus the cache
    /// traffic and minus the re-flood of an echo that outlived its cache entry.
    pub fn originate(&mut self, table: &NeighbourLinks, dst: PeerId) -> DataVerdict {
        self.originate_many(table, dst, 1)
    }

    /// Routes `count` messages this node originates for one destination at once (a batch):
    /// the decision [`originate`](Self::originate) makes for each, counted `count` times.
    pub fn originate_many(
        &mut self,
        table: &NeighbourLinks,
        dst: PeerId,
        count: u64,
    ) -> DataVerdict {
        let route = self.originate_one(table, dst);
        if count > 1 {
            let more = count - 1;
            match route {
                DataVerdict::Deliver => self.stats.delivered += more,
                DataVerdict::Forward { .. } => self.stats.forwarded += more,
                DataVerdict::Unicast { .. } => self.stats.unicast += more,
                DataVerdict::Drop(DropReason::NoRoute) => self.stats.dropped_no_route += more,
                // Not decisions `originate` makes.
                DataVerdict::Drop(
                    DropReason::Duplicate
                    | DropReason::TtlExpired
                    | DropReason::TooOld
                    | DropReason::OffPath
                    | DropReason::ForeignMsgId,
                )
                | DataVerdict::DeliverAndForward { .. } => {}
            }
        }
        route
    }

    fn originate_one(&mut self, table: &NeighbourLinks, dst: PeerId) -> DataVerdict {
        if dst == self.me {
            self.stats.delivered += 1;
            return DataVerdict::Deliver;
        }
        if dst.is_zero() {
            if !table.has_link_besides(None) {
                return self.drop(DropReason::NoRoute);
            }
            self.stats.forwarded += 1;
            return DataVerdict::Forward {
                except: None,
                ttl: self.initial_ttl,
            };
        }
        self.relay(table, None, dst, self.initial_ttl)
    }

    /// The TTL originated messages carry.
    pub fn initial_ttl(&self) -> u8 {
        self.initial_ttl
    }

    fn relay(
        &mut self,
        table: &NeighbourLinks,
        from: Option<LinkId>,
        dst: PeerId,
        ttl: u8,
    ) -> DataVerdict {
        if let Some(link) = table.link_to(&dst) {
            // Never bounce a frame back where it came from, even if that is the destination.
            if Some(link) != from {
                self.stats.unicast += 1;
                return DataVerdict::Unicast { link, ttl };
            }
        }
        if !table.has_link_besides(from) {
            return self.drop(DropReason::NoRoute);
        }
        self.stats.forwarded += 1;
        DataVerdict::Forward { except: from, ttl }
    }

    fn drop(&mut self, reason: DropReason) -> DataVerdict {
        match reason {
            DropReason::Duplicate => self.stats.dropped_duplicate += 1,
            DropReason::TtlExpired => self.stats.dropped_ttl += 1,
            DropReason::NoRoute => self.stats.dropped_no_route += 1,
            DropReason::TooOld => self.stats.dropped_too_old += 1,
            DropReason::OffPath => self.stats.dropped_off_path += 1,
            DropReason::ForeignMsgId => self.stats.dropped_foreign_msg_id += 1,
        }
        DataVerdict::Drop(reason)
    }
}

#[cfg(test)]
mod tests;
