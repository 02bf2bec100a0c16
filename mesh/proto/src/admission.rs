//! Rate limits on contacting strangers: a peer that has never been linked costs this node a
//! table entry and an outbound connection for every announce that names it, and an announce
//! costs its sender one datagram with any source address and any port in it. Without a limit
//! a stream of fake announces is an amplifier (one SYN per datagram, aimed wherever the datagram
//! says) and fills the peer table.
//!
//! **Owns:** the budgets that admit and dial never-linked peers (rates per source and overall).
//! **Must not touch:** the peer table itself or any socket: the control core asks it and acts.
//!
//! [`NewPeerLimiter`] is two token buckets checked together: one for the whole node and one
//! for the source IP address of the announce (which is also the address that would be
//! dialed), so one flooding source cannot starve the others of the node-wide budget beyond
//! its own share. The per-source buckets are a fixed array indexed by a keyed hash of the
//! address (memory stays fixed whatever the number of sources; the key is random per node,
//! so an attacker cannot aim collisions at a chosen address; a collision only makes two
//! sources share one budget). Each bucket holds one second's worth of tokens.
//!
//! A source's budget counts the ids it announced that are not proven yet, not the real nodes
//! behind it: when a peer admitted on a source's budget completes a handshake under the
//! announced id from that address, the source gets its token back
//! ([`NewPeerLimiter::refund`]). Several nodes on one host (tests, a storm of processes, a
//! user running many) announce from one address, and at 10 a second a host of 60 nodes took
//! each of them ~6 s to admit the others (issue 29). What a stranger can do is unchanged:
//! fake ids from one address that no node answers for (or a spoofed source aimed at someone
//! else's address) never return a token, so they stay at `per_source` a second, counted as
//! before; ids that do answer cost their sender a connection and a handshake each, which an
//! inbound connection could make without any budget anyway, and the node-wide bucket is
//! never refunded, so new peers of all sources together stay at `global` a second.

use std::net::IpAddr;
use std::time::Instant;

/// Per-source buckets (a power of two).
const SOURCE_SLOTS: usize = 1024;

/// A token bucket refilled continuously at `rate` tokens per second up to `burst`.
#[derive(Debug, Clone, Copy)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilled at `rate` per second.
    pub fn new(rate: u32, burst: u32, now: Instant) -> TokenBucket {
        TokenBucket {
            rate: f64::from(rate),
            burst: f64::from(burst.max(1)),
            tokens: f64::from(burst.max(1)),
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        self.last = self.last.max(now);
    }

    /// True if a whole token is available at `now` (nothing is taken).
    pub fn ready(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= 1.0
    }

    /// Gives one token back, up to the burst.
    pub fn put_back(&mut self, now: Instant) {
        self.refill(now);
        self.tokens = (self.tokens + 1.0).min(self.burst);
    }

    /// Takes one token if available.
    pub fn try_take(&mut self, now: Instant) -> bool {
        if self.ready(now) {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The node-wide and per-source budgets for contacting never-linked peers.
#[derive(Debug, Clone)]
pub struct NewPeerLimiter {
    global: TokenBucket,
    sources: Box<[TokenBucket]>,
    hasher: ahash::RandomState,
}

impl NewPeerLimiter {
    /// `global` contacts per second node-wide, `per_source` per source address; `seeds` key
    /// the address hash.
    pub fn new(global: u32, per_source: u32, seeds: [u64; 4], now: Instant) -> NewPeerLimiter {
        NewPeerLimiter {
            global: TokenBucket::new(global, global, now),
            sources: vec![TokenBucket::new(per_source, per_source, now); SOURCE_SLOTS]
                .into_boxed_slice(),
            hasher: ahash::RandomState::with_seeds(seeds[0], seeds[1], seeds[2], seeds[3]),
        }
    }

    fn slot(&self, source: IpAddr) -> usize {
        (self.hasher.hash_one(source) as usize) & (SOURCE_SLOTS - 1)
    }

    /// Takes one token from both the node-wide bucket and `source`'s, or from neither.
    pub fn try_admit(&mut self, source: IpAddr, now: Instant) -> bool {
        let slot = self.slot(source);
        let src = &mut self.sources[slot];
        if !src.ready(now) || !self.global.ready(now) {
            return false;
        }
        src.try_take(now) && self.global.try_take(now)
    }

    /// A peer admitted on `source`'s budget proved to be a node at that address (a handshake
    /// under the announced id): `source` gets its token back. The node-wide budget keeps it.
    pub fn refund(&mut self, source: IpAddr, now: Instant) {
        let slot = self.slot(source);
        self.sources[slot].put_back(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bucket_refills_at_its_rate_up_to_its_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10, 10, t0);
        assert_eq!((0..100).filter(|_| b.try_take(t0)).count(), 10);
        // 10 per second: one every 100 ms.
        assert!(!b.try_take(t0 + Duration::from_millis(99)));
        assert!(b.try_take(t0 + Duration::from_millis(100)));
        // A long pause refills to the burst, never beyond.
        let later = t0 + Duration::from_secs(60);
        assert_eq!((0..100).filter(|_| b.try_take(later)).count(), 10);
    }

    #[test]
    fn one_flooding_source_keeps_within_its_share_and_others_still_get_in() {
        let t0 = Instant::now();
        let mut l = NewPeerLimiter::new(50, 5, [1, 2, 3, 4], t0);
        let flood: IpAddr = "10.0.0.66".parse().unwrap();
        let mut admitted = 0;
        // 100 000 announces over 10 s from one source: 5 at once, then 5 per second.
        for i in 0..100_000u64 {
            let now = t0 + Duration::from_micros(i * 100);
            admitted += usize::from(l.try_admit(flood, now));
        }
        assert!((50..=56).contains(&admitted), "admitted {admitted}");
        let now = t0 + Duration::from_secs(10);
        let other: IpAddr = "10.0.0.7".parse().unwrap();
        assert!(l.try_admit(other, now), "another source is not starved");
    }

    #[test]
    fn a_source_whose_peers_prove_real_is_refunded_and_the_node_wide_budget_still_caps_it() {
        let t0 = Instant::now();
        let mut l = NewPeerLimiter::new(50, 10, [5, 6, 7, 8], t0);
        let host: IpAddr = "127.0.0.1".parse().unwrap();
        // 59 nodes of one host, each proving itself before the next is admitted: all in at
        // once, where the per-source budget alone admits 10.
        let mut admitted = 0;
        for _ in 0..59 {
            if l.try_admit(host, t0) {
                admitted += 1;
                l.refund(host, t0);
            }
        }
        assert_eq!(
            admitted, 50,
            "the node-wide burst is the limit, not the source's"
        );
        // Never more than the burst back: a refund on a full bucket adds nothing.
        let mut m = NewPeerLimiter::new(1000, 10, [5, 6, 7, 8], t0);
        for _ in 0..100 {
            m.refund(host, t0);
        }
        assert_eq!((0..100).filter(|_| m.try_admit(host, t0)).count(), 10);
    }

    #[test]
    fn the_node_wide_budget_caps_many_sources() {
        let t0 = Instant::now();
        let mut l = NewPeerLimiter::new(20, 5, [9, 8, 7, 6], t0);
        let admitted = (0..10_000u32)
            .filter(|i| l.try_admit(IpAddr::from(i.to_be_bytes()), t0))
            .count();
        assert_eq!(admitted, 20);
        // A refused source's budget is untouched: it gets in once the node-wide one refills.
        let s: IpAddr = "192.0.2.1".parse().unwrap();
        assert!(!l.try_admit(s, t0));
        assert!(l.try_admit(s, t0 + Duration::from_millis(50)));
    }
}
