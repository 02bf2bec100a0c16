//! The gossip routing decision for Data frames (mesh-v1.md, "Gossip routing").
//!
//! A [`Router`] lives on each data shard next to that shard's [`DedupCache`]. The driver calls
//! [`Router::on_data`] on the shard that owns the message's originator
//! ([`super::dedup_shard`]) and executes the returned [`DataVerdict`]; the decision itself reads only
//! the shard's [`NeighbourLinks`] (pushed by the control plane) and allocates nothing.

use super::dedup::{DedupCache, DedupStats, Seen};
use super::LinkId;
use crate::{MsgId, PeerId};
use ahash::AHashMap;
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
    /// Do nothing; the reason is counted in [`RouterStats`].
    Drop(DropReason),
}

/// Counters of a [`Router`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouterStats {
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

/// Per-shard gossip router: dedup plus the routing rules.
#[derive(Debug)]
pub struct Router {
    me: PeerId,
    initial_ttl: u8,
    dedup: DedupCache,
    stats: RouterStats,
}

impl Router {
    /// A router for node `me` with a dedup cache of `max_dedup_entries` for `dedup_ttl`.
    pub fn new(
        me: PeerId,
        initial_ttl: u8,
        max_dedup_entries: usize,
        dedup_ttl: Duration,
        now: Instant,
    ) -> Router {
        Router::with_dedup(
            me,
            initial_ttl,
            DedupCache::new(max_dedup_entries, dedup_ttl, now),
        )
    }

    /// A router for node `me` with the given dedup cache.
    pub fn with_dedup(me: PeerId, initial_ttl: u8, dedup: DedupCache) -> Router {
        Router {
            me,
            initial_ttl: initial_ttl.max(1),
            dedup,
            stats: RouterStats::default(),
        }
    }

    /// Routing counters.
    pub fn stats(&self) -> RouterStats {
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
                    DropReason::Duplicate | DropReason::TtlExpired | DropReason::TooOld,
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
        }
        DataVerdict::Drop(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: u8) -> PeerId {
        PeerId([n; 16])
    }

    fn setup() -> (Router, NeighbourLinks, Instant) {
        let now = Instant::now();
        let r = Router::new(p(1), 8, 1000, Duration::from_secs(30), now);
        let mut t = NeighbourLinks::new();
        t.insert(p(2), LinkId(2));
        t.insert(p(3), LinkId(3));
        (r, t, now)
    }

    fn meta(src: u8, dst: PeerId, n: u64, ttl: u8) -> DataMeta {
        DataMeta {
            src: p(src),
            dst,
            msg_id: MsgId::new(&p(src), n),
            ttl,
        }
    }

    #[test]
    fn broadcast_is_delivered_once_and_forwarded_with_split_horizon() {
        let (mut r, t, now) = setup();
        let m = meta(2, PeerId::ZERO, 1, 8);
        assert_eq!(
            r.on_data(&t, LinkId(2), &m, now),
            DataVerdict::DeliverAndForward {
                except: LinkId(2),
                ttl: 7
            }
        );
        assert_eq!(
            r.on_data(&t, LinkId(3), &m, now),
            DataVerdict::Drop(DropReason::Duplicate)
        );
        assert_eq!(r.stats().delivered, 1);
        assert_eq!(r.stats().dropped_duplicate, 1);
    }

    #[test]
    fn broadcast_ttl_one_is_delivered_not_forwarded() {
        let (mut r, t, now) = setup();
        assert_eq!(
            r.on_data(&t, LinkId(2), &meta(2, PeerId::ZERO, 1, 1), now),
            DataVerdict::Deliver
        );
        assert_eq!(r.stats().ttl_exhausted, 1);
    }

    #[test]
    fn targeted_rules() {
        let (mut r, t, now) = setup();
        assert_eq!(
            r.on_data(&t, LinkId(2), &meta(2, p(1), 1, 3), now),
            DataVerdict::Deliver
        );
        assert_eq!(
            r.on_data(&t, LinkId(2), &meta(2, p(3), 2, 3), now),
            DataVerdict::Unicast {
                link: LinkId(3),
                ttl: 2
            }
        );
        assert_eq!(
            r.on_data(&t, LinkId(2), &meta(2, p(9), 3, 3), now),
            DataVerdict::Forward {
                except: Some(LinkId(2)),
                ttl: 2
            }
        );
        assert_eq!(
            r.on_data(&t, LinkId(2), &meta(2, p(9), 4, 1), now),
            DataVerdict::Drop(DropReason::TtlExpired)
        );
        assert_eq!(r.stats().dropped_ttl, 1);
    }

    #[test]
    fn relay_with_no_other_link_is_no_route() {
        let now = Instant::now();
        let mut r = Router::new(p(1), 8, 10, Duration::from_secs(1), now);
        let mut t = NeighbourLinks::new();
        t.insert(p(2), LinkId(2));
        assert_eq!(
            r.on_data(&t, LinkId(2), &meta(2, p(9), 1, 5), now),
            DataVerdict::Drop(DropReason::NoRoute)
        );
        assert_eq!(r.stats().dropped_no_route, 1);
    }

    #[test]
    fn originated_message_is_never_echoed() {
        let (mut r, t, now) = setup();
        let mut g = MsgIdGen::new(p(1), 41);
        let id = g.next_id();
        assert_eq!(id.counter(), 42);
        assert_eq!(
            r.originate(&t, PeerId::ZERO),
            DataVerdict::Forward {
                except: None,
                ttl: 8
            }
        );
        let back = DataMeta {
            src: p(1),
            dst: PeerId::ZERO,
            msg_id: id,
            ttl: 6,
        };
        assert_eq!(
            r.on_data(&t, LinkId(3), &back, now),
            DataVerdict::Drop(DropReason::Duplicate)
        );
        assert_eq!(
            r.originate(&t, p(2)),
            DataVerdict::Unicast {
                link: LinkId(2),
                ttl: 8
            }
        );
        assert_eq!(
            r.originate(&t, p(7)),
            DataVerdict::Forward {
                except: None,
                ttl: 8
            }
        );
    }

    #[test]
    fn a_batch_is_routed_once_and_counted_per_message() {
        let (mut r, t, _) = setup();
        assert_eq!(
            r.originate_many(&t, PeerId::ZERO, 5),
            DataVerdict::Forward {
                except: None,
                ttl: 8
            }
        );
        assert_eq!(
            r.originate_many(&t, p(2), 3),
            DataVerdict::Unicast {
                link: LinkId(2),
                ttl: 8
            }
        );
        assert_eq!(r.originate_many(&t, p(1), 2), DataVerdict::Deliver);
        let s = r.stats();
        assert_eq!((s.forwarded, s.unicast, s.delivered), (5, 3, 2));
        let empty = NeighbourLinks::new();
        assert_eq!(
            r.originate_many(&empty, PeerId::ZERO, 4),
            DataVerdict::Drop(DropReason::NoRoute)
        );
        assert_eq!(r.stats().dropped_no_route, 4);
    }

    #[test]
    fn own_message_coming_back_is_dropped_even_when_the_cache_is_full() {
        let now = Instant::now();
        let mut r = Router::new(p(1), 8, 1, Duration::from_secs(30), now);
        let (_, t, _) = setup();
        let mine = meta(1, PeerId::ZERO, 1, 5);
        r.originate(&t, PeerId::ZERO);
        // Fills the one-entry cache with someone else's id.
        r.on_data(&t, LinkId(2), &meta(2, PeerId::ZERO, 1, 5), now);
        assert_eq!(
            r.on_data(&t, LinkId(2), &mine, now),
            DataVerdict::Drop(DropReason::Duplicate)
        );
        let targeted_back = meta(1, p(9), 2, 5);
        assert_eq!(
            r.on_data(&t, LinkId(3), &targeted_back, now),
            DataVerdict::Drop(DropReason::Duplicate)
        );
        assert_eq!(r.stats().self_echo_suppressed, 2);
        assert_eq!(r.stats().dropped_duplicate, 2);
        assert_eq!(r.dedup_stats().inserted, 1, "own ids never enter the cache");
    }

    #[test]
    fn a_generator_counts_up_by_one_from_its_seed() {
        let mut g = MsgIdGen::new(p(5), u64::MAX - 1);
        assert_eq!(g.next_id(), MsgId::new(&p(5), u64::MAX));
        assert_eq!(
            g.next_id(),
            MsgId::new(&p(5), 0),
            "wraps like the C++ counter"
        );
        assert_eq!(g.next_id(), MsgId::new(&p(5), 1));
    }

    /// A copy delayed past the dedup bound (a lossy link, a cut that heals) used to find its id
    /// forgotten and was delivered and flooded again; now it is dropped as too old.
    #[test]
    fn a_copy_delayed_past_the_dedup_bound_is_dropped_as_too_old() {
        let (mut r, t, now) = setup();
        let mut g = MsgIdGen::new(p(9), 0x7777_0000_0000);
        let first = g.next_id();
        let meta = |id| DataMeta {
            src: p(9),
            dst: PeerId::ZERO,
            msg_id: id,
            ttl: 5,
        };
        assert!(matches!(
            r.on_data(&t, LinkId(2), &meta(first), now),
            DataVerdict::DeliverAndForward { .. }
        ));
        for _ in 0..5000 {
            r.on_data(&t, LinkId(2), &meta(g.next_id()), now);
        }
        assert!(r.dedup_stats().evicted_by_size > 0, "the bound was reached");
        assert_eq!(
            r.on_data(&t, LinkId(3), &meta(first), now),
            DataVerdict::Drop(DropReason::TooOld)
        );
        assert_eq!(r.stats().dropped_too_old, 1);
        assert_eq!(r.stats().delivered, 5001);
    }

    #[test]
    fn table_replacement_and_stale_removal() {
        let mut t = NeighbourLinks::new();
        t.insert(p(2), LinkId(1));
        t.insert(p(2), LinkId(5));
        assert_eq!(t.links(), &[LinkId(5)]);
        assert!(!t.remove(&p(2), LinkId(1)));
        assert_eq!(t.link_to(&p(2)), Some(LinkId(5)));
        assert!(t.remove(&p(2), LinkId(5)));
        assert!(t.is_empty());
    }
}
