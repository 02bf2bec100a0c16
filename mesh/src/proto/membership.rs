//! Mesh-wide membership by adjacency gossip (mesh-v1.md, "Membership").
//!
//! Every node floods `(origin = self, version, direct neighbours)` when its neighbour set
//! changes and every `membership_interval`; a record is stored and re-flooded (except to the
//! link it came from) only if its version is newer than the stored one. The members are the
//! nodes reachable from self over the union of all live records' edges (an edge counts when
//! either end lists it), self excluded. A record not refreshed within `membership_timeout`
//! expires. Versions are `max(previous + 1, wall-clock ms)`, so a restarted node outranks
//! the records of its previous run.
//!
//! This runs on the control plane. Drive it with [`Membership::neighbour_up`] /
//! [`Membership::neighbour_down`] (from the peer table's Connected / Disconnected),
//! [`Membership::on_record`] (Membership frames relayed from the shards) and
//! [`Membership::handle_timeout`] at [`Membership::poll_timeout`]; then drain
//! [`Membership::poll_transmit`] and [`Membership::poll_event`].

use super::LinkId;
use crate::wire::Membership as Record;
use crate::PeerId;
use ahash::{AHashMap, AHashSet};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Where a Membership frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// Every established link.
    All,
    /// Every established link except this one (the record's inbound link).
    AllExcept(LinkId),
    /// One link (catching a new neighbour up on the stored records).
    Link(LinkId),
}

/// A Membership frame to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipTransmit {
    /// Where to send it.
    pub dest: Dest,
    /// The record (frame body).
    pub record: Record,
}

/// A change of the member set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembershipEvent {
    /// The node became reachable.
    MemberJoined(PeerId),
    /// The node is no longer reachable (cut off, or its records expired).
    MemberLeft(PeerId),
}

/// What [`Membership::on_record`] did with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordOutcome {
    /// Newer than what was stored: stored and re-flooded.
    Stored,
    /// Not newer than the stored version: ignored.
    Stale,
    /// A record of this node from a previous run with a higher version: the own version
    /// jumped past it and the own record was re-flooded.
    OwnOutranked,
    /// The store is at `max_membership_records`: ignored and counted.
    StoreFull,
    /// Origin all-zero or too many neighbours for the wire: ignored.
    Invalid,
}

/// Counters of a [`Membership`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MembershipStats {
    /// Records stored (new or newer).
    pub stored: u64,
    /// Records ignored as not newer.
    pub stale: u64,
    /// Records ignored because the store was full.
    pub rejected_full: u64,
    /// Records that expired.
    pub expired: u64,
    /// Own-record floods sent.
    pub own_floods: u64,
}

#[derive(Debug)]
struct Stored {
    version: u64,
    neighbours: Vec<PeerId>,
    refreshed: Instant,
}

/// The membership state machine of one node.
#[derive(Debug)]
pub struct Membership {
    me: PeerId,
    version: u64,
    neighbours: Vec<PeerId>,
    records: AHashMap<PeerId, Stored>,
    members: AHashSet<PeerId>,
    interval: Duration,
    timeout: Duration,
    max_records: usize,
    next_flood: Instant,
    transmits: VecDeque<MembershipTransmit>,
    events: VecDeque<MembershipEvent>,
    stats: MembershipStats,
}

/// The wire `count` is a u16.
const MAX_NEIGHBOURS: usize = u16::MAX as usize;

impl Membership {
    /// State for node `me`; `wall_ms` is the wall clock in ms since the Unix epoch (it seeds
    /// the version). The first periodic flood is due one interval after `now`.
    pub fn new(
        me: PeerId,
        interval: Duration,
        timeout: Duration,
        max_records: usize,
        wall_ms: u64,
        now: Instant,
    ) -> Membership {
        Membership {
            me,
            version: wall_ms,
            neighbours: Vec::new(),
            records: AHashMap::new(),
            members: AHashSet::new(),
            interval,
            timeout,
            max_records: max_records.max(1),
            next_flood: now + interval,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: MembershipStats::default(),
        }
    }

    /// Current members (reachable nodes, self excluded).
    pub fn members(&self) -> impl Iterator<Item = &PeerId> {
        self.members.iter()
    }

    /// True if `peer` is currently a member.
    pub fn is_member(&self, peer: &PeerId) -> bool {
        self.members.contains(peer)
    }

    /// The own record's current version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The own direct neighbours, sorted.
    pub fn neighbours(&self) -> &[PeerId] {
        &self.neighbours
    }

    /// Counters.
    pub fn stats(&self) -> MembershipStats {
        self.stats
    }

    /// The own record as it would be flooded now.
    pub fn own_record(&self) -> Record {
        Record {
            origin: self.me,
            version: self.version,
            neighbours: self.neighbours.clone(),
        }
    }

    /// A link to `peer` was established on `link`: flood the new own record and send the
    /// stored records of others to the new neighbour so it learns the mesh without waiting
    /// for the next periodic floods.
    pub fn neighbour_up(&mut self, peer: PeerId, link: LinkId, wall_ms: u64, now: Instant) {
        if let Err(pos) = self.neighbours.binary_search(&peer) {
            if self.neighbours.len() < MAX_NEIGHBOURS {
                self.neighbours.insert(pos, peer);
            }
        }
        self.flood_own(wall_ms, now);
        for (origin, r) in &self.records {
            if *origin != peer {
                self.transmits.push_back(MembershipTransmit {
                    dest: Dest::Link(link),
                    record: Record {
                        origin: *origin,
                        version: r.version,
                        neighbours: r.neighbours.clone(),
                    },
                });
            }
        }
        self.recompute();
    }

    /// The link to `peer` is gone: flood the new own record.
    pub fn neighbour_down(&mut self, peer: &PeerId, wall_ms: u64, now: Instant) {
        if let Ok(pos) = self.neighbours.binary_search(peer) {
            self.neighbours.remove(pos);
            self.flood_own(wall_ms, now);
            self.recompute();
        }
    }

    /// A Membership frame arrived on `from`.
    pub fn on_record(
        &mut self,
        from: LinkId,
        rec: &Record,
        wall_ms: u64,
        now: Instant,
    ) -> RecordOutcome {
        if rec.origin.is_zero() || rec.neighbours.len() > MAX_NEIGHBOURS {
            return RecordOutcome::Invalid;
        }
        if rec.origin == self.me {
            if rec.version < self.version {
                self.stats.stale += 1;
                return RecordOutcome::Stale;
            }
            // Our previous incarnation is still remembered with a version at least ours
            // (the wall clock went back): jump past it so our record wins everywhere.
            self.version = rec.version;
            self.flood_own(wall_ms, now);
            return RecordOutcome::OwnOutranked;
        }
        match self.records.get_mut(&rec.origin) {
            Some(s) if rec.version <= s.version => {
                self.stats.stale += 1;
                return RecordOutcome::Stale;
            }
            Some(s) => {
                s.version = rec.version;
                s.neighbours.clear();
                s.neighbours.extend_from_slice(&rec.neighbours);
                s.refreshed = now;
            }
            None => {
                if self.records.len() >= self.max_records {
                    self.stats.rejected_full += 1;
                    tracing::warn!(origin = %rec.origin, max = self.max_records, "membership store full, record ignored");
                    return RecordOutcome::StoreFull;
                }
                self.records.insert(
                    rec.origin,
                    Stored {
                        version: rec.version,
                        neighbours: rec.neighbours.clone(),
                        refreshed: now,
                    },
                );
            }
        }
        self.stats.stored += 1;
        self.transmits.push_back(MembershipTransmit {
            dest: Dest::AllExcept(from),
            record: rec.clone(),
        });
        self.recompute();
        RecordOutcome::Stored
    }

    /// The next instant [`handle_timeout`](Self::handle_timeout) has work: the periodic flood
    /// or the earliest record expiry.
    pub fn poll_timeout(&self) -> Instant {
        self.records
            .values()
            .map(|r| r.refreshed + self.timeout)
            .fold(self.next_flood, Instant::min)
    }

    /// Runs the periodic flood and expires old records.
    pub fn handle_timeout(&mut self, wall_ms: u64, now: Instant) {
        if now >= self.next_flood {
            self.flood_own(wall_ms, now);
        }
        let timeout = self.timeout;
        let before = self.records.len();
        self.records.retain(|origin, r| {
            let keep = now.saturating_duration_since(r.refreshed) < timeout;
            if !keep {
                tracing::debug!(%origin, "membership record expired");
            }
            keep
        });
        let expired = before - self.records.len();
        if expired > 0 {
            self.stats.expired += expired as u64;
            self.recompute();
        }
    }

    /// Next Membership frame to send.
    pub fn poll_transmit(&mut self) -> Option<MembershipTransmit> {
        self.transmits.pop_front()
    }

    /// Next member-set change.
    pub fn poll_event(&mut self) -> Option<MembershipEvent> {
        self.events.pop_front()
    }

    fn flood_own(&mut self, wall_ms: u64, now: Instant) {
        self.version = (self.version + 1).max(wall_ms);
        self.next_flood = now + self.interval;
        self.stats.own_floods += 1;
        let record = self.own_record();
        self.transmits.push_back(MembershipTransmit {
            dest: Dest::All,
            record,
        });
    }

    /// BFS from self over the union graph, then diff against the previous member set.
    fn recompute(&mut self) {
        let mut adj: AHashMap<PeerId, Vec<PeerId>> =
            AHashMap::with_capacity(self.records.len() + 1);
        let mut add_edges = |a: PeerId, ns: &[PeerId]| {
            for &b in ns {
                if a != b && !b.is_zero() {
                    adj.entry(a).or_default().push(b);
                    adj.entry(b).or_default().push(a);
                }
            }
        };
        add_edges(self.me, &self.neighbours);
        for (origin, r) in &self.records {
            add_edges(*origin, &r.neighbours);
        }
        let mut reached: AHashSet<PeerId> = AHashSet::with_capacity(adj.len());
        let mut queue = VecDeque::from([self.me]);
        reached.insert(self.me);
        while let Some(u) = queue.pop_front() {
            if let Some(ns) = adj.get(&u) {
                for v in ns {
                    if reached.insert(*v) {
                        queue.push_back(*v);
                    }
                }
            }
        }
        reached.remove(&self.me);
        let mut left: Vec<PeerId> = self.members.difference(&reached).copied().collect();
        let mut joined: Vec<PeerId> = reached.difference(&self.members).copied().collect();
        // Sorted so that simulations see a deterministic event order.
        left.sort();
        joined.sort();
        self.events
            .extend(left.into_iter().map(MembershipEvent::MemberLeft));
        self.events
            .extend(joined.into_iter().map(MembershipEvent::MemberJoined));
        self.members = reached;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: u8) -> PeerId {
        PeerId([n; 16])
    }

    fn new(me: u8, now: Instant) -> Membership {
        Membership::new(
            p(me),
            Duration::from_secs(2),
            Duration::from_secs(6),
            16,
            1_000,
            now,
        )
    }

    fn drain(m: &mut Membership) -> Vec<MembershipTransmit> {
        std::iter::from_fn(|| m.poll_transmit()).collect()
    }

    #[test]
    fn newer_records_are_stored_and_reflooded_except_inbound() {
        let now = Instant::now();
        let mut m = new(1, now);
        let r = Record {
            origin: p(2),
            version: 10,
            neighbours: vec![p(3)],
        };
        assert_eq!(
            m.on_record(LinkId(7), &r, 1_000, now),
            RecordOutcome::Stored
        );
        let t = drain(&mut m);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].dest, Dest::AllExcept(LinkId(7)));
        assert_eq!(m.on_record(LinkId(8), &r, 1_000, now), RecordOutcome::Stale);
        assert!(drain(&mut m).is_empty());
        assert_eq!(m.stats().stale, 1);
    }

    #[test]
    fn version_is_seeded_from_wall_clock_and_strictly_increases() {
        let now = Instant::now();
        let mut m = new(1, now);
        m.neighbour_up(p(2), LinkId(1), 500, now);
        assert_eq!(m.version(), 1_001);
        m.neighbour_down(&p(2), 5_000, now);
        assert_eq!(m.version(), 5_000);
    }

    #[test]
    fn own_old_incarnation_is_outranked() {
        let now = Instant::now();
        let mut m = new(1, now);
        let old = Record {
            origin: p(1),
            version: 9_999,
            neighbours: vec![],
        };
        assert_eq!(
            m.on_record(LinkId(1), &old, 1_000, now),
            RecordOutcome::OwnOutranked
        );
        assert!(m.version() > 9_999);
        assert_eq!(drain(&mut m)[0].record.version, m.version());
    }

    #[test]
    fn store_is_bounded() {
        let now = Instant::now();
        let mut m = Membership::new(
            p(1),
            Duration::from_secs(1),
            Duration::from_secs(3),
            2,
            0,
            now,
        );
        for n in 2..5 {
            let r = Record {
                origin: p(n),
                version: 1,
                neighbours: vec![],
            };
            m.on_record(LinkId(1), &r, 0, now);
        }
        assert_eq!(m.stats().rejected_full, 1);
    }

    #[test]
    fn periodic_flood_and_expiry() {
        let now = Instant::now();
        let mut m = new(1, now);
        m.neighbour_up(p(2), LinkId(1), 0, now);
        let r = Record {
            origin: p(2),
            version: 5,
            neighbours: vec![p(1), p(3)],
        };
        m.on_record(LinkId(1), &r, 0, now);
        assert!(m.is_member(&p(3)));
        drain(&mut m);
        assert_eq!(m.poll_timeout(), now + Duration::from_secs(2));
        m.handle_timeout(0, now + Duration::from_secs(2));
        assert_eq!(drain(&mut m).len(), 1);
        m.handle_timeout(0, now + Duration::from_secs(6));
        assert!(!m.is_member(&p(3)));
        assert!(
            m.is_member(&p(2)),
            "direct neighbour stays a member via the own record"
        );
        assert_eq!(m.stats().expired, 1);
    }
}
