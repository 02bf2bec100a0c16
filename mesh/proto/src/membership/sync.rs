//! Membership anti-entropy between Shoal nodes (`protocol/extensions.md`, "MembershipDigest"):
//! who still needs periodic re-floods, the store digest, and the repair after a mismatch.
//!
//! **Owns:** the per-link digest state, the digest of the store and what a MembershipDigest
//! frame changes. **Must not touch:** the records' rules (the rest of `membership`) or links
//! (the control core closes a link whose frame broke a rule).
//!
//! On a link whose both ends advertised [`Features::MEMBERSHIP_DIGEST`] ("a digest link"):
//! - The own record goes out when it changes (and to a new neighbour), not every interval.
//!   Every `membership_interval` each end sends a Summary: the number of records it holds of
//!   reachable origins, itself included, and a digest of them (the XOR of the first 8 bytes
//!   of `SHA-256(origin | neighbours…)` per record, neighbours ascending). A Summary that
//!   differs from the receiver's own is answered (at most once per half interval per link,
//!   and not in the first half interval: the link-up catch-up is its first repair)
//!   with Versions: the receiver's `(origin, version)` of the same records. The side that
//!   gets Versions pushes, as ordinary Membership frames on that link, every record it holds
//!   newer or the other lacks (at most [`MAX_PUSH`] per Versions; the rest at the next
//!   round, counted). Both sides send Summaries, so both directions repair.
//! - What a digest says is only what its sender holds: it makes no record count anywhere. A
//!   pushed record is checked as any record (signature in identity mode, version, bounds),
//!   so a lying neighbour can cost at most [`MAX_PUSH`] records per half interval of our
//!   sending, and can not make a record of someone else count. The one statement a Versions
//!   list makes that changes this node is the version it holds of *this node's* record:
//!   higher than ours (a previous run's, the clock set back) makes the own version jump past
//!   it, under the same plausibility horizon as a record ([`super::OWN_VERSION_HORIZON_MS`]).
//! - Records of reachable origins do not expire: an origin between digest links floods only
//!   on change, so silence means "unchanged". A node that is gone leaves as before: its
//!   neighbours' new records drop the edges (both ends must list an edge), it becomes
//!   unreachable, and its record then expires `membership_timeout` after it was last kept.
//!
//! Multimaster peers (and Shoal peers without the bit: "legacy links") expire records 8 s
//! after their last new version, so every origin must keep minting a version per interval
//! that reaches them. A legacy link gets exactly what it got before: the own record every
//! interval, and every new version relayed. The Summary carries `legacyHops`, the sender's
//! distance to the nearest legacy link (0: it has one; one more than its nearest digest
//! neighbour's otherwise; [`NO_LEGACY`] beyond [`MAX_LEGACY_HOPS`]); a digest neighbour whose
//! `legacyHops` is not [`NO_LEGACY`] "wants refreshes" and is treated as a legacy link for
//! the periodic flood and for relaying refreshes (a new version with the same neighbours).
//! So a mixed mesh floods as today up to 32 hops around each multimaster node, and a mesh of
//! Shoal nodes only is quiet. After the last legacy link goes, the distances count up by
//! one per round to [`NO_LEGACY`] (at most 33 rounds).
//!
//! Ceilings: one [`LinkSync`] per digest link (bounded by the peer table's links); a Versions
//! list is at most `max_membership_records + 1` entries (ours; a longer one received is
//! ignored and counted); pushes per Versions at most [`MAX_PUSH`].
//!
//! [`Features::MEMBERSHIP_DIGEST`]: crate::wire::Features::MEMBERSHIP_DIGEST

use super::{Dest, MemberGraph, MemberTransmit, OWN_VERSION_HORIZON_MS};
use crate::wire::{Membership as Record, MembershipDigest, MAX_LEGACY_HOPS, NO_LEGACY};
use crate::{LinkId, PeerId};
use ahash::AHashMap;
use std::time::Instant;

/// The most records pushed in answer to one Versions frame.
pub const MAX_PUSH: usize = 256;

/// Digest state of one digest link.
#[derive(Debug, Clone, Copy)]
pub(super) struct LinkSync {
    /// The peer's last reported `legacyHops` ([`NO_LEGACY`] until its first Summary).
    hops: u8,
    /// When Versions last went on this link; at first, when the link came up: the
    /// catch-up of stored records both ends send then is the link's first repair, so a
    /// Summary that differs within half an interval of it is not answered (the records it
    /// misses are in flight: answering pushed ~2 200 of them per node at 60 nodes starting
    /// at once, nearly all stale on arrival; `bench/notes/start60.md`).
    versions_at: Option<Instant>,
}

/// The anti-entropy state of a [`MemberGraph`] (`None` there: `membership_digest` off).
#[derive(Debug, Default)]
pub(super) struct Sync {
    pub(super) links: AHashMap<LinkId, LinkSync>,
    pub(super) out: std::collections::VecDeque<(LinkId, MembershipDigest)>,
}

/// Why a MembershipDigest frame broke the rules: the control core closes its link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// It came on a link where the digest was not negotiated (this node or the peer did not
    /// set the feature bit), or anti-entropy is off here.
    #[error("MembershipDigest on a link that did not negotiate it")]
    NotNegotiated,
}

/// Counters of the anti-entropy (part of [`super::MemberStats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// Summaries sent.
    pub summaries_sent: u64,
    /// Summaries received that differed from this node's store.
    pub mismatches: u64,
    /// Versions frames sent.
    pub versions_sent: u64,
    /// Versions answers withheld because one went on that link within half an interval.
    pub versions_rate_limited: u64,
    /// Records pushed in answer to Versions (the repairs).
    pub pushed: u64,
    /// Records not pushed because one Versions frame reached [`MAX_PUSH`].
    pub push_capped: u64,
    /// Versions lists longer than `max_membership_records + 1`, ignored.
    pub versions_oversize: u64,
    /// Periodic own floods skipped: no link needed a refresh.
    pub quiet_rounds: u64,
    /// Relays of refreshes (a newer version, same neighbours) not sent to digest links.
    pub refreshes_withheld: u64,
    /// Digest frames ignored: they came on a link that is not the graph's link to its peer.
    pub unknown_link: u64,
}

/// The content hash of a record: the first 8 bytes of `SHA-256(origin | neighbours…)`,
/// neighbours ascending (as stored).
pub(super) fn record_hash(origin: &PeerId, sorted: &[PeerId]) -> u64 {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(&origin.0);
    for p in sorted {
        ctx.update(&p.0);
    }
    let d = ctx.finish();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d.as_ref()[..8]);
    u64::from_be_bytes(b)
}

impl MemberGraph {
    /// Turns membership anti-entropy on (`true`) or off: off, every link is a legacy link
    /// and records expire as in mesh-v1.
    pub fn with_digest(mut self, on: bool) -> MemberGraph {
        self.sync = on.then(Sync::default);
        self
    }

    /// True when anti-entropy is on.
    pub fn digest_enabled(&self) -> bool {
        self.sync.is_some()
    }

    /// A link to `peer` was established on `link`; `digest`: both ends advertised
    /// MembershipDigest (ignored when anti-entropy is off). As
    /// [`neighbour_up`](Self::neighbour_up), then a Summary goes to a digest link at once.
    pub fn neighbour_up_on(
        &mut self,
        peer: PeerId,
        link: LinkId,
        digest: bool,
        wall_ms: u64,
        now: Instant,
    ) {
        if let Some(s) = self.sync.as_mut() {
            s.links.remove(&link);
            if digest {
                s.links.insert(
                    link,
                    LinkSync {
                        hops: NO_LEGACY,
                        versions_at: Some(now),
                    },
                );
            }
        }
        self.neighbour_up(peer, link, wall_ms, now);
        if digest && self.sync.is_some() {
            self.queue_summary(link);
        }
    }

    /// True when `link` gets the periodic own flood and relayed refreshes: a legacy link, or
    /// a digest link whose peer reported a legacy link within [`MAX_LEGACY_HOPS`].
    pub fn refresh_wanted(&self, link: LinkId) -> bool {
        match &self.sync {
            None => true,
            Some(s) => s.links.get(&link).is_none_or(|l| l.hops != NO_LEGACY),
        }
    }

    /// True when some link wants refreshes (see [`refresh_wanted`](Self::refresh_wanted)).
    pub fn any_refresh_wanted(&self) -> bool {
        self.links.values().any(|l| self.refresh_wanted(*l))
    }

    /// This node's `legacyHops`.
    pub fn legacy_hops(&self) -> u8 {
        let Some(s) = &self.sync else {
            return 0;
        };
        if self.links.values().any(|l| !s.links.contains_key(l)) {
            return 0;
        }
        let nearest = s.links.values().map(|l| l.hops).min().unwrap_or(NO_LEGACY);
        if nearest >= MAX_LEGACY_HOPS {
            NO_LEGACY
        } else {
            nearest + 1
        }
    }

    /// The digest of what this node holds: (records, digest) over its own record and the
    /// stored records of members.
    pub fn store_digest(&self) -> (u32, u64) {
        let mut count = 1u32;
        let mut d = record_hash(&self.me, &self.neighbours);
        for (o, r) in &self.records {
            if self.members.contains(o) {
                count += 1;
                d ^= r.hash;
            }
        }
        (count, d)
    }

    /// Next MembershipDigest frame to send, with its link.
    pub fn poll_digest(&mut self) -> Option<(LinkId, MembershipDigest)> {
        self.sync.as_mut()?.out.pop_front()
    }

    pub(super) fn queue_summary(&mut self, link: LinkId) {
        let (count, digest) = self.store_digest();
        let legacy_hops = self.legacy_hops();
        if let Some(s) = self.sync.as_mut() {
            s.out.push_back((
                link,
                MembershipDigest {
                    legacy_hops,
                    count,
                    digest,
                    versions: None,
                },
            ));
            self.stats.sync.summaries_sent += 1;
        }
    }

    /// The periodic round of a digest link set: a Summary on every digest link.
    pub(super) fn summaries(&mut self) {
        let Some(s) = &self.sync else {
            return;
        };
        let mut links: Vec<LinkId> = s.links.keys().copied().collect();
        links.sort_unstable();
        for l in links {
            self.queue_summary(l);
        }
    }

    /// A MembershipDigest frame arrived on `link`. An error closes the link.
    pub fn on_digest(
        &mut self,
        link: LinkId,
        d: &MembershipDigest,
        wall_ms: u64,
        now: Instant,
    ) -> Result<(), DigestError> {
        let half = self.interval / 2;
        let Some(s) = self.sync.as_mut() else {
            return Err(DigestError::NotNegotiated);
        };
        let Some(ls) = s.links.get_mut(&link) else {
            // Negotiated (the caller checked) but not this graph's link to its peer: a dial
            // race's other connection, or one whose Connected is still to come.
            self.stats.sync.unknown_link += 1;
            return Ok(());
        };
        ls.hops = d.legacy_hops;
        match &d.versions {
            None => {
                if (d.count, d.digest) == self.store_digest() {
                    return Ok(());
                }
                self.stats.sync.mismatches += 1;
                let ls = self
                    .sync
                    .as_mut()
                    .and_then(|s| s.links.get_mut(&link))
                    .expect("checked above");
                if ls.versions_at.is_some_and(|t| now < t + half) {
                    self.stats.sync.versions_rate_limited += 1;
                    return Ok(());
                }
                ls.versions_at = Some(now);
                self.queue_versions(link);
            }
            Some(v) => {
                if v.len() > self.max_records + 1 {
                    self.stats.sync.versions_oversize += 1;
                    tracing::debug!(
                        ?link,
                        entries = v.len(),
                        "membership Versions over the store's ceiling, ignored"
                    );
                    return Ok(());
                }
                self.push_newer(link, v, wall_ms, now);
            }
        }
        Ok(())
    }

    fn queue_versions(&mut self, link: LinkId) {
        let (count, digest) = self.store_digest();
        let mut v: Vec<(PeerId, u64)> = Vec::with_capacity(count as usize);
        v.push((self.me, self.version));
        v.extend(
            self.records
                .iter()
                .filter(|(o, _)| self.members.contains(*o))
                .map(|(o, r)| (*o, r.version)),
        );
        v.sort_unstable();
        let legacy_hops = self.legacy_hops();
        if let Some(s) = self.sync.as_mut() {
            s.out.push_back((
                link,
                MembershipDigest {
                    legacy_hops,
                    count: v.len() as u32,
                    digest,
                    versions: Some(v),
                },
            ));
            self.stats.sync.versions_sent += 1;
        }
    }

    /// Pushes on `link` every record held (own included, members only) that `theirs` lacks
    /// or holds older; a newer own version in `theirs` makes the own version jump past it.
    fn push_newer(&mut self, link: LinkId, theirs: &[(PeerId, u64)], wall_ms: u64, now: Instant) {
        let held: AHashMap<PeerId, u64> = theirs.iter().copied().collect();
        let mut origins: Vec<PeerId> = self
            .records
            .keys()
            .filter(|o| self.members.contains(*o))
            .copied()
            .collect();
        origins.sort_unstable();
        let peer = self
            .links
            .iter()
            .find(|(_, l)| **l == link)
            .map(|(p, _)| *p);
        let mut out: Vec<MemberTransmit> = Vec::new();
        // The own record first: it is the one only this node can give.
        match held.get(&self.me) {
            Some(&v) if v > self.version => {
                if v <= wall_ms.saturating_add(OWN_VERSION_HORIZON_MS) {
                    // A previous run's record (the clock went back): outrank it.
                    self.version = v;
                    self.flood_own(wall_ms, now, Dest::All);
                } else {
                    self.stats.implausible_versions += 1;
                }
            }
            Some(&v) if v == self.version => {}
            _ => out.push(MemberTransmit {
                dest: Dest::Link(link),
                record: self.own_record(),
                signature: None,
            }),
        }
        let mut capped = 0;
        for o in origins {
            if Some(o) == peer {
                continue; // its own record: it holds the newest
            }
            let r = &self.records[&o];
            if held.get(&o).is_some_and(|&v| v >= r.version) {
                continue;
            }
            if out.len() >= MAX_PUSH {
                capped += 1;
                continue;
            }
            out.push(MemberTransmit {
                dest: Dest::Link(link),
                record: Record {
                    origin: o,
                    version: r.version,
                    neighbours: r.sorted.clone(),
                },
                signature: r.sig,
            });
        }
        self.stats.sync.push_capped += capped;
        self.stats.sync.pushed += out.len() as u64;
        self.transmits.extend(out);
    }

    /// The periodic tick of an interval: the own flood where refreshes are wanted (every
    /// link without anti-entropy), then the Summaries.
    pub(super) fn periodic(&mut self, wall_ms: u64, now: Instant) {
        if self.sync.is_none() {
            self.flood_own(wall_ms, now, Dest::All);
            return;
        }
        if self.any_refresh_wanted() {
            self.flood_own(wall_ms, now, Dest::Refresh);
        } else {
            self.next_flood = now + self.interval;
            self.stats.sync.quiet_rounds += 1;
        }
        self.summaries();
    }
}
