//! Bounded degree (`max_links`, issue 29): which discovered peers a node links to when it may
//! keep only about `max_links` links, in the manner of HyParView's active and passive views.
//! With `max_links = 0` (the default) none of this runs: every discovered peer is dialed and
//! every inbound link taken (the full mesh multicast discovery builds).
//!
//! **Owns:** the rules below, their timers, hold-offs and counters. **Must not touch:** the
//! peer table (the control core asks it for the passive peers and tells it what to dial or
//! refuse, `peers/cap.rs`), links and sockets (the control core closes them) or the membership
//! graph (read through the control core, `control/degree.rs`).
//!
//! # The rules
//!
//! Counted: the links to Shoal peers (Hello extension present). Links to multimaster peers
//! are neither counted, refused nor closed (such a peer dials every node it hears and would
//! redial a refused link forever; it receives exactly what it receives today). With
//! `L = max_links` and `H = L + slack` (`slack = max(1, L / 4)`):
//! - **Active and passive.** A discovered peer is only remembered (the *passive* view); the
//!   peer table does not dial it on its own. Static peers are dialed and kept as always, and
//!   count toward the degree.
//! - **Fill.** While `links + dials in flight < L`, the node dials passive peers chosen at
//!   random (a random graph of degree `L` has a diameter of about `log N / log L`), at most
//!   [`DIAL_BURST`] per look, among those not held off whose own record lists fewer than `H`
//!   neighbours (a full one would refuse; one without a record may be tried).
//! - **Refuse.** An inbound link completing its handshake while the node has `H` links or
//!   more is refused (Goodbye at once, counted in `links_refused`) when its peer is a member
//!   of this node's component anyway. A peer that is not (a node alone, or on the other side
//!   of a partition) is always taken: that is how an isolated node gets in and how a
//!   partition heals.
//! - **Heal.** A passive peer that has not been a member of this node's component for
//!   [`DegreeCap::heal_delay`] (two membership intervals, jittered: its own dials, records
//!   and floods had every chance to join it) is dialed whatever the degree, one such dial at
//!   a time.
//! - **Shed.** A node above `H` for a while (half a membership interval or more, jittered;
//!   heals and races put it there) closes one link per look (Goodbye, counted in
//!   `links_shed`), to a non-static neighbour whose removal keeps every member reachable over
//!   the counted edges, preferring the neighbour with the most links (it stays above `L`);
//!   when no link can go without cutting a member off, none goes.
//!
//! # Churn
//!
//! The band between `L` and `H` is where nothing happens: a node dials only below `L` and
//! closes only above `H`, and `H > L`, so a dial never makes a node close and a close never
//! makes it dial. Every look is a jittered delay after a change ([`EVAL_DELAY`]), so nodes
//! hearing the same change do not act in the same instant, and a node sheds one link per
//! look ([`SHED_GAP`]), so two nodes above `H` do not each close a link for the same
//! surplus. When both close the same link anyway, both lost one link, which each wanted.
//!
//! A peer whose link ended (whichever end closed it) is held off: not dialed again for a
//! jittered `membership_interval`, doubled for each link to it that ended within
//! [`REFUSED_WITHIN`] of coming up (up to `reconnect_max`). A **refused dial** is one whose
//! handshake completed and whose link the peer then closed within [`REFUSED_WITHIN`]
//! (Goodbye: it is full); it is counted in `dials_refused`. A **failed dial** never
//! completed its handshake (no answer, refused connection, handshake error): the peer table's
//! own backoff holds that peer (`dial_failures`). Neither is redialed at once.
//!
//! What is not done: a node below `L` whose every passive peer is full stays below `L` (it
//! is connected; HyParView's shuffle, which would move a full node's link to it, is not
//! implemented), and a peer that lists this node as a static peer is refused like any other
//! at `H` (give both ends the same settings).

use crate::{backoff_with_jitter, PeerId};
use ahash::AHashMap;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};

/// Most fill dials started in one look.
pub const DIAL_BURST: usize = 2;
/// Range of the delay from a change to the look it causes.
pub const EVAL_DELAY: (Duration, Duration) =
    (Duration::from_millis(50), Duration::from_millis(250));
/// Range of the least time between two sheds of one node.
pub const SHED_GAP: (Duration, Duration) = (Duration::from_millis(200), Duration::from_millis(600));
/// A link that ends within this long of coming up was refused (or is flapping): its peer's
/// hold-off doubles.
pub const REFUSED_WITHIN: Duration = Duration::from_secs(1);
/// How long a node stuck below the cap with nobody to dial waits before it looks again
/// (hold-offs end, records change).
pub const RETRY: Duration = Duration::from_secs(2);

/// The slack above `max_links` up to which inbound links are taken.
pub fn slack(max_links: usize) -> usize {
    (max_links / 4).max(1)
}

/// Counters of the bounded degree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DegreeStats {
    /// Passive peers dialed to fill up to the cap.
    pub fill_dials: u64,
    /// Passive peers outside this node's component dialed whatever the degree.
    pub heal_dials: u64,
    /// Inbound links refused at the cap plus slack.
    pub links_refused: u64,
    /// Links closed above the cap plus slack.
    pub links_shed: u64,
    /// Links to peers that ended within [`REFUSED_WITHIN`] of coming up.
    pub dials_refused: u64,
}

/// A passive peer as a look sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passive {
    /// The peer.
    pub peer: PeerId,
    /// It is a member of this node's component.
    pub member: bool,
    /// How many neighbours its own record lists (`None`: no record).
    pub links: Option<usize>,
}

/// A linked neighbour that may be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sheddable {
    /// The peer.
    pub peer: PeerId,
    /// How many neighbours its record lists.
    pub links: usize,
    /// Every member stays reachable without this link.
    pub keeps_connected: bool,
}

/// What a look counts of the node's own links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Links counted against the cap.
    pub links: usize,
    /// Dials of discovered peers in flight.
    pub dials: usize,
    /// One of them goes to a peer outside the component (a heal dial is under way).
    pub healing: bool,
}

/// What a look decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Dial this passive peer (below the cap).
    Fill(PeerId),
    /// Dial this passive peer outside the component.
    Heal(PeerId),
    /// Close the link to this neighbour (Goodbye).
    Shed(PeerId),
}

#[derive(Debug, Clone, Copy)]
struct Hold {
    until: Instant,
    strikes: u32,
}

/// The bounded-degree state of one node (see the module docs).
#[derive(Debug)]
pub struct DegreeCap {
    low: usize,
    high: usize,
    rng: StdRng,
    heal_delay: Duration,
    hold_base: Duration,
    hold_max: Duration,
    /// When the next look is due.
    look_at: Option<Instant>,
    /// What the last round saw (a change arms a look).
    seen: (usize, usize, u64, usize),
    holds: AHashMap<PeerId, Hold>,
    /// When each linked peer's link came up.
    up_since: AHashMap<PeerId, Instant>,
    /// Since when each passive peer has not been a member.
    outside_since: AHashMap<PeerId, Instant>,
    /// Since when the node has been above `H`.
    over_since: Option<(Instant, Duration)>,
    next_shed: Instant,
    stats: DegreeStats,
}

impl DegreeCap {
    /// The rules for a cap of `max_links` (above zero); `membership_interval` scales the
    /// hold-offs and the heal delay, `hold_max` caps the hold-offs.
    pub fn new(
        max_links: usize,
        membership_interval: Duration,
        hold_max: Duration,
        seed: u64,
        now: Instant,
    ) -> DegreeCap {
        let low = max_links.max(2);
        DegreeCap {
            low,
            high: low + slack(low),
            rng: StdRng::seed_from_u64(seed),
            heal_delay: 2 * membership_interval,
            hold_base: membership_interval,
            hold_max: hold_max.max(membership_interval),
            look_at: None,
            seen: (usize::MAX, 0, 0, 0),
            holds: AHashMap::new(),
            up_since: AHashMap::new(),
            outside_since: AHashMap::new(),
            over_since: None,
            next_shed: now,
            stats: DegreeStats::default(),
        }
    }

    /// The cap (`L`).
    pub fn low(&self) -> usize {
        self.low
    }

    /// The cap plus slack (`H`).
    pub fn high(&self) -> usize {
        self.high
    }

    /// How long a passive peer stays outside the component before it is dialed to heal.
    pub fn heal_delay(&self) -> Duration {
        self.heal_delay
    }

    /// Counters.
    pub fn stats(&self) -> DegreeStats {
        self.stats
    }

    /// When a look is due (`None`: nothing to look at).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.look_at
    }

    /// True when a look is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        self.look_at.is_some_and(|t| t <= now)
    }

    fn jitter(&mut self, (lo, hi): (Duration, Duration)) -> Duration {
        lo + Duration::from_nanos(self.rng.gen_range(0..=(hi - lo).as_nanos() as u64))
    }

    fn arm(&mut self, at: Instant) {
        self.look_at = Some(self.look_at.map_or(at, |t| t.min(at)));
    }

    /// After every round: `links` counted, `dials` in flight, the membership's shape and the
    /// number of known peers. A change arms a look after a jittered [`EVAL_DELAY`].
    pub fn observe(&mut self, links: usize, dials: usize, shape: u64, known: usize, now: Instant) {
        let seen = (links, dials, shape, known);
        if seen != self.seen {
            self.seen = seen;
            let d = self.jitter(EVAL_DELAY);
            self.arm(now + d);
        }
    }

    /// A link to `peer` came up.
    pub fn link_up(&mut self, peer: PeerId, now: Instant) {
        self.up_since.insert(peer, now);
        self.outside_since.remove(&peer);
    }

    /// The link to `peer` ended (whoever closed it): the peer is held off (module docs).
    pub fn link_down(&mut self, peer: PeerId, now: Instant) {
        let short = self
            .up_since
            .remove(&peer)
            .is_some_and(|t| now.saturating_duration_since(t) < REFUSED_WITHIN);
        let strikes = match self.holds.get(&peer) {
            Some(h) if short => h.strikes + 1,
            _ if short => 1,
            _ => 0,
        };
        if short {
            self.stats.dials_refused += 1;
        }
        let d = backoff_with_jitter(self.hold_base, self.hold_max, strikes, &mut self.rng);
        self.holds.insert(
            peer,
            Hold {
                until: now + d,
                strikes,
            },
        );
    }

    /// Whether an inbound link from `peer` completing its handshake is refused: the node has
    /// `links` counted links, `member` says whether the peer is in this node's component.
    pub fn refuses(&mut self, links: usize, member: bool) -> bool {
        let refuse = member && links >= self.high;
        if refuse {
            self.stats.links_refused += 1;
        }
        refuse
    }

    fn held(&self, peer: &PeerId, now: Instant) -> bool {
        self.holds.get(peer).is_some_and(|h| h.until > now)
    }

    /// One look, at a due time: the [`Counts`], the passive peers, and (asked only when the node is above `H`) the neighbours that may
    /// be closed. Decisions go to `out`; the next look is armed when time alone can change
    /// them.
    pub fn look(
        &mut self,
        now: Instant,
        Counts {
            links,
            dials,
            healing,
        }: Counts,
        passive: &[Passive],
        sheddable: impl FnOnce() -> Vec<Sheddable>,
        out: &mut Vec<Decision>,
    ) {
        self.look_at = None;
        self.holds.retain(|_, h| h.until > now || h.strikes > 0);
        if self.holds.len() > 4 * passive.len() + 64 {
            self.holds.retain(|_, h| h.until > now);
        }
        let mut later: Option<Instant> = None;
        let want = |t: Instant, later: &mut Option<Instant>| {
            *later = Some(later.map_or(t, |l: Instant| l.min(t)));
        };
        // Heal: passive peers outside the component, long enough.
        let outside: Vec<PeerId> = passive
            .iter()
            .filter(|p| !p.member)
            .map(|p| p.peer)
            .collect();
        self.outside_since.retain(|p, _| outside.contains(p));
        let mut ripe = Vec::new();
        for p in &outside {
            let since = *self.outside_since.entry(*p).or_insert(now);
            let at = since + self.heal_delay;
            if self.held(p, now) {
                want(self.holds[p].until, &mut later);
            } else if at <= now {
                ripe.push(*p);
            } else {
                want(at, &mut later);
            }
        }
        // Fill: below the cap.
        let mut started = 0;
        if links + dials < self.low {
            let mut pool: Vec<PeerId> = passive
                .iter()
                .filter(|p| !self.held(&p.peer, now) && p.links.is_none_or(|n| n < self.high))
                .map(|p| p.peer)
                .collect();
            let n = (self.low - links - dials).min(DIAL_BURST);
            while started < n && !pool.is_empty() {
                let i = self.rng.gen_range(0..pool.len());
                let peer = pool.swap_remove(i);
                ripe.retain(|p| *p != peer);
                out.push(Decision::Fill(peer));
                self.stats.fill_dials += 1;
                started += 1;
            }
            let d = if started > 0 {
                self.jitter(EVAL_DELAY)
            } else {
                RETRY + self.jitter((Duration::ZERO, RETRY / 2))
            };
            want(now + d, &mut later);
        }
        if !healing && !ripe.is_empty() {
            let i = self.rng.gen_range(0..ripe.len());
            out.push(Decision::Heal(ripe[i]));
            self.stats.heal_dials += 1;
        }
        // Shed: above the cap plus slack for a while.
        if links > self.high {
            let settle = match self.over_since {
                Some(s) => s,
                None => {
                    let d = self.jitter((self.hold_base / 2, self.hold_base));
                    self.over_since = Some((now, d));
                    (now, d)
                }
            };
            let ready = (settle.0 + settle.1).max(self.next_shed);
            if ready > now {
                want(ready, &mut later);
            } else {
                // Most links first; ties by a random draw (not by id: every node would pick
                // the same victim).
                let pick = sheddable()
                    .into_iter()
                    .filter(|s| s.keeps_connected)
                    .map(|s| (s.links, self.rng.gen::<u32>(), s.peer))
                    .max();
                if let Some((_, _, peer)) = pick {
                    out.push(Decision::Shed(peer));
                    self.stats.links_shed += 1;
                }
                let gap = self.jitter(SHED_GAP);
                self.next_shed = now + gap;
                want(now + gap, &mut later);
            }
        } else {
            self.over_since = None;
        }
        if let Some(t) = later {
            self.arm(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(b: u8) -> PeerId {
        PeerId([b; 16])
    }

    fn c(links: usize, dials: usize, healing: bool) -> Counts {
        Counts {
            links,
            dials,
            healing,
        }
    }

    #[test]
    fn band_between_cap_and_slack_is_quiet() {
        let t0 = Instant::now();
        let mut d = DegreeCap::new(6, Duration::from_secs(2), Duration::from_secs(30), 1, t0);
        assert_eq!((d.low(), d.high()), (6, 7));
        let passive = [Passive {
            peer: id(1),
            member: true,
            links: Some(3),
        }];
        for links in [6, 7] {
            let mut out = Vec::new();
            d.look(t0, c(links, 0, false), &passive, Vec::new, &mut out);
            assert!(out.is_empty(), "{links} links: {out:?}");
            assert_eq!(
                d.poll_timeout(),
                None,
                "nothing to wait for at {links} links"
            );
        }
        let mut out = Vec::new();
        d.look(t0, c(5, 0, false), &passive, Vec::new, &mut out);
        assert_eq!(out, vec![Decision::Fill(id(1))]);
    }

    #[test]
    fn a_full_or_held_off_peer_is_not_dialed_and_a_refusal_doubles_the_hold() {
        let t0 = Instant::now();
        let mut d = DegreeCap::new(6, Duration::from_secs(2), Duration::from_secs(30), 1, t0);
        let full = Passive {
            peer: id(1),
            member: true,
            links: Some(7),
        };
        let mut out = Vec::new();
        d.look(t0, c(0, 0, false), &[full], Vec::new, &mut out);
        assert!(out.is_empty());
        // Dialed, up, closed by the peer at once: refused, held off.
        d.link_up(id(2), t0);
        d.link_down(id(2), t0 + Duration::from_millis(5));
        assert_eq!(d.stats().dials_refused, 1);
        let first = d.holds[&id(2)].until;
        let free = Passive {
            peer: id(2),
            member: true,
            links: Some(3),
        };
        d.look(
            t0 + Duration::from_millis(10),
            c(0, 0, false),
            &[free],
            Vec::new,
            &mut out,
        );
        assert!(out.is_empty(), "held off: {out:?}");
        d.link_up(id(2), first);
        d.link_down(id(2), first + Duration::from_millis(5));
        let second = d.holds[&id(2)].until - (first + Duration::from_millis(5));
        assert!(second >= Duration::from_secs(4), "doubled: {second:?}");
    }

    #[test]
    fn refuses_only_members_at_the_cap_plus_slack() {
        let mut d = DegreeCap::new(
            8,
            Duration::from_secs(2),
            Duration::from_secs(30),
            1,
            Instant::now(),
        );
        assert_eq!(d.high(), 10);
        assert!(!d.refuses(9, true));
        assert!(d.refuses(10, true));
        assert!(
            !d.refuses(12, false),
            "a node outside the component is always taken"
        );
        assert_eq!(d.stats().links_refused, 1);
    }

    #[test]
    fn sheds_only_above_the_slack_after_settling_and_never_a_cut_link() {
        let t0 = Instant::now();
        let mut d = DegreeCap::new(6, Duration::from_secs(2), Duration::from_secs(30), 1, t0);
        let cands = || {
            vec![
                Sheddable {
                    peer: id(1),
                    links: 9,
                    keeps_connected: false,
                },
                Sheddable {
                    peer: id(2),
                    links: 8,
                    keeps_connected: true,
                },
                Sheddable {
                    peer: id(3),
                    links: 6,
                    keeps_connected: true,
                },
            ]
        };
        let mut out = Vec::new();
        d.look(t0, c(9, 0, false), &[], cands, &mut out);
        assert!(out.is_empty(), "not before it settled");
        let at = d.poll_timeout().expect("a look armed");
        assert!(at >= t0 + Duration::from_secs(1));
        d.look(at, c(9, 0, false), &[], cands, &mut out);
        assert_eq!(out, vec![Decision::Shed(id(2))]);
    }

    #[test]
    fn a_peer_outside_the_component_is_dialed_after_the_heal_delay_whatever_the_degree() {
        let t0 = Instant::now();
        let mut d = DegreeCap::new(6, Duration::from_secs(2), Duration::from_secs(30), 1, t0);
        let p = [Passive {
            peer: id(9),
            member: false,
            links: None,
        }];
        let mut out = Vec::new();
        d.look(t0, c(7, 0, false), &p, Vec::new, &mut out);
        assert!(out.is_empty());
        let at = d.poll_timeout().expect("armed for the heal delay");
        assert_eq!(at, t0 + d.heal_delay());
        d.look(at, c(7, 0, true), &p, Vec::new, &mut out);
        assert!(out.is_empty(), "one heal dial at a time");
        d.look(at, c(7, 0, false), &p, Vec::new, &mut out);
        assert_eq!(out, vec![Decision::Heal(id(9))]);
    }
}
