//! What the topics core knows of each Discovery origin besides its records: the flood's
//! dedup mark (the highest `seq` taken) with the window a new `seq` must fall in, a jump
//! held until something confirms it, and the origin's control-plane work budget; and the
//! work budget of each link.
//!
//! **Owns:** the per-origin and per-link bookkeeping of received Discovery frames. **Must
//! not touch:** the records (`receive`) or the graph.
//!
//! # Sequence numbers
//!
//! An origin numbers its frames one by one from its wall clock in ms at start-up, so a
//! genuine `seq` never runs far ahead of the last one seen: at most one per frame sent, and
//! a restarted node's new numbers lead its old ones by about its former uptime in ms. A
//! frame further ahead than [`SEQ_WINDOW`] plus one per ms since the mark was set is a
//! **jump**. A jump adopted at face value would make every later genuine frame a duplicate
//! (`seq = u64::MAX` silences an origin for good), so it is taken only when:
//! - it comes straight from the origin (the link's peer is the origin: a neighbour that
//!   restarted), or carries the origin's verified signature (identity mode);
//! - or it confirms a held jump: a frame within the window above the held one, arriving on
//!   another link than the held one (two paths agree);
//! - or the origin's state was reset: an origin is forgotten with its participant (lease
//!   expiry, revocation), and its next frame starts a new mark.
//!
//! Anything else is held (remembered, not applied, not passed on) and counted. A forger on
//! a path toward the origin can still push the mark ahead within the window, frame by
//! frame; the reverse-path check keeps everyone else out, and identity mode's signatures
//! close it (see the README's threat model).
//!
//! # Bounds
//!
//! Origins with an admitted participant are **pinned**: never evicted while admitted (so a
//! flood of made-up origins cannot push a real origin's mark out and reset it); they are
//! bounded by the participant table. The others live in an LRU of `max_dedup_origins`,
//! the least recently refreshed forgotten first (counted).
//!
//! # Work budgets
//!
//! Applying a frame costs control-plane work (records decoded, candidate pairs matched).
//! Each origin and each link has a token bucket of work units ([`Bucket`]): a frame is
//! applied only while both have credit left, and its cost is charged afterwards (a bucket
//! may go into debt, so one costly frame delays the next ones instead of being refused
//! forever). A refused frame is dropped before it is decoded or passed on, and counted;
//! the origin's next announce cycle repairs what it carried.

use crate::{LinkId, PeerId};
use ahash::AHashMap;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Frames an origin's `seq` may advance beyond the last one taken, besides one per ms
/// elapsed since then: a frame further ahead is a jump, held until something confirms it
/// (the rules are in the module docs of `topics::core::origins`).
pub const SEQ_WINDOW: u64 = 4096;

/// A token bucket of control-plane work units.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bucket {
    /// Units left (negative: in debt).
    level: i64,
    at: Instant,
}

impl Bucket {
    /// A full bucket.
    pub(super) fn new(burst: u64, now: Instant) -> Bucket {
        Bucket {
            level: clamp(burst),
            at: now,
        }
    }

    /// Refills at `per_sec` up to `burst`, then says whether any credit is left.
    pub(super) fn has_credit(&mut self, per_sec: u64, burst: u64, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.at);
        if dt > Duration::ZERO {
            let add = u128::from(per_sec) * dt.as_nanos() / 1_000_000_000;
            self.level = self
                .level
                .saturating_add(i64::try_from(add).unwrap_or(i64::MAX))
                .min(clamp(burst));
            self.at = now;
        }
        self.level > 0
    }

    /// When it has credit again at `per_sec` (now, if it has).
    pub(super) fn credit_at(&self, per_sec: u64) -> Instant {
        if self.level > 0 || per_sec == 0 {
            return self.at;
        }
        let owed = u128::from(self.level.unsigned_abs()) + 1;
        let nanos = owed * 1_000_000_000 / u128::from(per_sec);
        self.at + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Takes `units` (the bucket may go into debt).
    pub(super) fn charge(&mut self, units: u64) {
        self.level = self.level.saturating_sub(clamp(units));
    }
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// What [`Origins::check`] says of a frame's `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fresh {
    /// New: the mark moved to it.
    New,
    /// Not above the mark.
    Duplicate,
    /// A jump beyond the window that nothing confirmed: held.
    Held,
}

#[derive(Debug)]
struct Origin {
    high: u64,
    /// When `high` was set.
    high_at: Instant,
    /// A jump seen and not adopted: its seq, link and arrival.
    held: Option<(u64, LinkId, Instant)>,
    /// Its tick in the LRU; `None` while pinned.
    lru: Option<u64>,
    budget: Bucket,
}

/// The per-origin table (see the [module docs](self)).
#[derive(Debug)]
pub(super) struct Origins {
    map: AHashMap<PeerId, Origin>,
    /// Unpinned origins by last refresh.
    lru: BTreeMap<u64, PeerId>,
    tick: u64,
    max_unpinned: usize,
}

/// Whether `seq` is within the window above `high` set at `at`.
fn within(high: u64, at: Instant, seq: u64, now: Instant) -> bool {
    let elapsed = u64::try_from(now.saturating_duration_since(at).as_millis()).unwrap_or(u64::MAX);
    seq - high <= SEQ_WINDOW.saturating_add(elapsed)
}

impl Origins {
    /// An empty table keeping at most `max_unpinned` origins without a participant.
    pub(super) fn new(max_unpinned: usize) -> Origins {
        Origins {
            map: AHashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            max_unpinned: max_unpinned.max(1),
        }
    }

    /// Origins held.
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// Checks `seq` of `origin`, arriving on `link`, and moves the mark when it is new.
    /// `trusted` says the frame comes from the origin itself (the link's peer) or carries
    /// its verified signature: a jump is then adopted at once. Returns the verdict and
    /// whether an unpinned origin was evicted to make room.
    pub(super) fn check(
        &mut self,
        origin: PeerId,
        seq: u64,
        link: LinkId,
        trusted: bool,
        burst: u64,
        now: Instant,
    ) -> (Fresh, bool) {
        self.tick += 1;
        let tick = self.tick;
        let Some(o) = self.map.get_mut(&origin) else {
            let mut evicted = false;
            if self.lru.len() >= self.max_unpinned {
                if let Some((_, old)) = self.lru.pop_first() {
                    self.map.remove(&old);
                    evicted = true;
                }
            }
            self.map.insert(
                origin,
                Origin {
                    high: seq,
                    high_at: now,
                    held: None,
                    lru: Some(tick),
                    budget: Bucket::new(burst, now),
                },
            );
            self.lru.insert(tick, origin);
            return (Fresh::New, evicted);
        };
        if seq <= o.high {
            return (Fresh::Duplicate, false);
        }
        let confirmed = |o: &Origin| {
            o.held
                .is_some_and(|(h, hl, at)| hl != link && seq > h && within(h, at, seq, now))
        };
        if !(trusted || within(o.high, o.high_at, seq, now) || confirmed(o)) {
            o.held = Some((seq, link, now));
            return (Fresh::Held, false);
        }
        o.high = seq;
        o.high_at = now;
        if o.held.is_some_and(|(h, _, _)| h <= seq) {
            o.held = None;
        }
        if let Some(t) = o.lru.as_mut() {
            self.lru.remove(t);
            *t = tick;
            self.lru.insert(tick, origin);
        }
        (Fresh::New, false)
    }

    /// `origin` has an admitted participant: never evicted until [`forget`](Self::forget).
    pub(super) fn pin(&mut self, origin: &PeerId) {
        if let Some(o) = self.map.get_mut(origin) {
            if let Some(t) = o.lru.take() {
                self.lru.remove(&t);
            }
        }
    }

    /// Forgets `origin` (its participant expired or was revoked): its next frame starts a
    /// new mark.
    pub(super) fn forget(&mut self, origin: &PeerId) {
        if let Some(o) = self.map.remove(origin) {
            if let Some(t) = o.lru {
                self.lru.remove(&t);
            }
        }
    }

    /// The work budget of `origin` (present once [`check`](Self::check) saw it).
    pub(super) fn budget(&mut self, origin: &PeerId) -> Option<&mut Bucket> {
        self.map.get_mut(origin).map(|o| &mut o.budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L1: LinkId = LinkId(1);
    const L2: LinkId = LinkId(2);

    fn p(n: u8) -> PeerId {
        PeerId([n; 16])
    }

    #[test]
    fn a_jump_beyond_the_window_is_held_until_another_link_confirms_it() {
        let now = Instant::now();
        let mut o = Origins::new(8);
        assert_eq!(o.check(p(1), 100, L1, false, 10, now).0, Fresh::New);
        assert_eq!(o.check(p(1), 100, L2, false, 10, now).0, Fresh::Duplicate);
        assert_eq!(
            o.check(p(1), 100 + SEQ_WINDOW, L1, false, 10, now).0,
            Fresh::New
        );
        assert_eq!(
            o.check(p(1), 101 + 2 * SEQ_WINDOW, L1, false, 10, now).0,
            Fresh::Held
        );
        // u64::MAX: held, and the mark stays where it was.
        assert_eq!(o.check(p(1), u64::MAX, L1, false, 10, now).0, Fresh::Held);
        assert_eq!(
            o.check(p(1), 101 + SEQ_WINDOW, L1, false, 10, now).0,
            Fresh::New
        );
        // A jump confirmed by the same link stays held; by another link it is taken.
        let j = 1_000_000;
        assert_eq!(o.check(p(1), j, L1, false, 10, now).0, Fresh::Held);
        assert_eq!(o.check(p(1), j + 1, L1, false, 10, now).0, Fresh::Held);
        assert_eq!(o.check(p(1), j + 2, L2, false, 10, now).0, Fresh::New);
        assert_eq!(o.check(p(1), j + 1, L1, false, 10, now).0, Fresh::Duplicate);
    }

    #[test]
    fn the_window_widens_with_time_and_a_trusted_jump_is_taken_at_once() {
        let now = Instant::now();
        let mut o = Origins::new(8);
        o.check(p(1), 10, L1, false, 10, now);
        let later = now + Duration::from_secs(5);
        assert_eq!(
            o.check(p(1), 10 + SEQ_WINDOW + 5_000, L1, false, 10, later)
                .0,
            Fresh::New
        );
        assert_eq!(
            o.check(p(1), u64::MAX - 1, L1, true, 10, later).0,
            Fresh::New
        );
    }

    #[test]
    fn pinned_origins_are_never_evicted_and_forgetting_resets_the_mark() {
        let now = Instant::now();
        let mut o = Origins::new(2);
        o.check(p(1), 10, L1, false, 10, now);
        o.pin(&p(1));
        for n in 2..20 {
            o.check(p(n), 10, L1, false, 10, now);
        }
        assert_eq!(o.len(), 3, "the pinned origin and the two newest");
        assert_eq!(o.check(p(1), 10, L1, false, 10, now).0, Fresh::Duplicate);
        o.forget(&p(1));
        assert_eq!(o.check(p(1), 5, L1, false, 10, now).0, Fresh::New);
    }

    #[test]
    fn a_bucket_refills_at_its_rate_up_to_its_burst_and_may_go_into_debt() {
        let now = Instant::now();
        let mut b = Bucket::new(100, now);
        assert!(b.has_credit(1000, 100, now));
        b.charge(250);
        assert!(!b.has_credit(1000, 100, now + Duration::from_millis(100)));
        assert!(b.has_credit(1000, 100, now + Duration::from_millis(200)));
        assert!(b.has_credit(1000, 100, now + Duration::from_secs(100)));
        b.charge(100);
        assert!(
            !b.has_credit(1000, 100, now + Duration::from_secs(100)),
            "burst caps the refill"
        );
    }
}
