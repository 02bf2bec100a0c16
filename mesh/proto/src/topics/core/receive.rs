//! A Discovery frame from a link: echo and duplicate drop (bounded per-origin dedup table),
//! re-flood with the hop limit, then its entries applied to the discovery graph under the
//! ownership rule, and the origin's announce cycles collected to repair lost withdrawals.
//!
//! **Owns:** the flood's dedup table, the ownership checks of received records and the
//! cycle bookkeeping. **Must not touch:** the own announcements (`announce`) or the graph's
//! admission rules (`shoal-discovery` decides; this module counts and reports).

use super::{prefix_of, Cycle, Remote, TopicsCore, TopicsOutput, MAX_TRACKED_PARTS};
use crate::wire::{Discovery, DiscoveryEntry};
use crate::{LinkId, PeerId};
use shoal_discovery::graph::{AdmitError, ParticipantAdmission};
use shoal_discovery::locators::{candidates, select_locators};
use shoal_discovery::record::{decode, Record};
use shoal_discovery::routes::to_socket;
use shoal_discovery::types::{EndpointInfo, Guid, LocatorOrigin, ParticipantInfo};
use std::time::Instant;

impl TopicsCore {
    /// A Discovery frame arrived on `link` (whose peer advertised extended frames).
    pub fn on_discovery(&mut self, link: LinkId, frame: Discovery, now: Instant) {
        self.stats.frames_in += 1;
        if frame.origin == self.me {
            self.stats.echoes += 1;
            return;
        }
        if !self.dedup_fresh(frame.origin, frame.seq) {
            self.stats.duplicates += 1;
            return;
        }
        if frame.ttl > 1 && self.links.keys().any(|l| *l != link) {
            let mut again = frame.clone();
            again.ttl -= 1;
            self.stats.frames_reflooded += 1;
            self.out.push_back(TopicsOutput::Flood {
                frame: again,
                except: Some(link),
            });
        }
        self.apply(link, frame, now);
    }

    /// True when `seq` is above the highest seen of `origin` (and records it). At the
    /// table's bound the least recently refreshed origin is forgotten, counted.
    fn dedup_fresh(&mut self, origin: PeerId, seq: u64) -> bool {
        self.tick += 1;
        let tick = self.tick;
        if let Some((high, t)) = self.dedup.get_mut(&origin) {
            if seq <= *high {
                return false;
            }
            self.dedup_lru.remove(t);
            *high = seq;
            *t = tick;
            self.dedup_lru.insert(tick, origin);
            return true;
        }
        if self.dedup.len() >= self.cfg.max_dedup_origins {
            if let Some((_, old)) = self.dedup_lru.pop_first() {
                self.dedup.remove(&old);
                self.stats.dedup_evicted += 1;
            }
        }
        self.dedup.insert(origin, (seq, tick));
        self.dedup_lru.insert(tick, origin);
        true
    }

    fn apply(&mut self, link: LinkId, frame: Discovery, now: Instant) {
        let origin = frame.origin;
        let prefix = prefix_of(&origin);
        let mut listed: Vec<Guid> = Vec::new();
        for entry in &frame.entries {
            match entry {
                DiscoveryEntry::Record(bytes) => match decode(bytes) {
                    Err(e) => {
                        tracing::debug!(?link, %origin, error = %e, "discovery record malformed");
                        return self.malformed(link);
                    }
                    Ok(Record::Participant(p)) => {
                        if p.prefix != prefix {
                            self.stats.foreign_refused += 1;
                            continue;
                        }
                        if self.admit_participant(origin, p, now).is_err() {
                            return self.malformed(link);
                        }
                    }
                    Ok(Record::Endpoint(e)) => {
                        if e.guid.prefix != prefix {
                            self.stats.foreign_refused += 1;
                            continue;
                        }
                        listed.push(e.guid);
                        if self.admit_endpoint(e).is_err() {
                            return self.malformed(link);
                        }
                    }
                },
                DiscoveryEntry::Withdraw(g) => {
                    let g = super::guid_of(g);
                    if g.prefix != prefix {
                        self.stats.foreign_refused += 1;
                        continue;
                    }
                    if self.graph.endpoint_id(&g).is_some() {
                        self.stats.endpoints_withdrawn += 1;
                        self.remove_endpoints(&[g]);
                    }
                }
            }
        }
        if frame.parts > 0 && self.remotes.contains_key(&prefix) {
            self.collect_cycle(&frame, listed);
        }
    }

    fn malformed(&mut self, link: LinkId) {
        self.stats.malformed_records += 1;
        self.out.push_back(TopicsOutput::CloseLink(link));
    }

    /// Admits a participant record of `origin`. `Err` only for an out-of-range record (a
    /// protocol error); a full table is a counted rejection.
    fn admit_participant(
        &mut self,
        origin: PeerId,
        p: ParticipantInfo,
        now: Instant,
    ) -> Result<(), ()> {
        let (prefix, lease) = (p.prefix, p.lease_duration);
        let locators = p.user_locators.clone();
        match self.graph.admit_participant(p, self.time(now)) {
            Ok(adm) => {
                // The graph holds the lease capped at `max_lease`: expire with it.
                let expires = self
                    .time(now)
                    .saturating_add(self.graph.admitted_lease(lease));
                let r = self.remotes.entry(prefix).or_insert(Remote {
                    node: origin,
                    expires,
                    locators: Vec::new(),
                });
                r.expires = expires;
                r.node = origin;
                r.locators = locators;
                if adm == ParticipantAdmission::Inserted {
                    self.changed();
                }
                self.maybe_dial(prefix);
                Ok(())
            }
            Err(AdmitError::Invalid { .. }) => Err(()),
            Err(_) => Ok(()),
        }
    }

    /// `dial_participants`: a participant heard whose node has no capable link is dialed at
    /// the first selected address (its own locators, then the configured fallbacks).
    fn maybe_dial(&mut self, prefix: shoal_discovery::types::GuidPrefix) {
        if !self.cfg.dial_participants {
            return;
        }
        let Some(r) = self.remotes.get(&prefix) else {
            return;
        };
        let node = r.node;
        if self.links.values().any(|p| *p == node) {
            return;
        }
        let fallbacks: Vec<_> = self.fallbacks.iter().map(super::tcp_locator).collect();
        let cands: Vec<_> = candidates(&r.locators, LocatorOrigin::Learned, 0)
            .chain(candidates(&fallbacks, LocatorOrigin::Fallback, 0))
            .collect();
        match select_locators(&cands, &self.policy)
            .locators
            .iter()
            .find_map(to_socket)
        {
            Some(addr) => {
                self.stats.dials += 1;
                self.out.push_back(TopicsOutput::Dial { peer: node, addr });
            }
            None => self.stats.no_dialable_locator += 1,
        }
    }

    /// Admits an endpoint record. `Err` only for an out-of-range record.
    fn admit_endpoint(&mut self, e: EndpointInfo) -> Result<(), ()> {
        match self.graph.admit_endpoint(e) {
            Ok(adm) => {
                if !adm.unmatched.is_empty() {
                    let mut seen = Default::default();
                    let kind = self.graph.endpoint(adm.id).map(|i| i.kind);
                    for &p in &adm.unmatched {
                        // The graph no longer has the pair; both endpoints are still there.
                        let (w, r) = match kind {
                            Some(shoal_discovery::types::EndpointKind::Writer) => (adm.id, p),
                            _ => (p, adm.id),
                        };
                        self.unmatched_pair(w, r, &mut seen);
                    }
                }
                let changed = !adm.replaced || !adm.matched.is_empty() || !adm.unmatched.is_empty();
                self.matched_events(adm.id, &adm.matched);
                if changed {
                    self.incompatible_events(adm.id);
                    self.changed();
                }
                Ok(())
            }
            Err(AdmitError::Invalid { .. }) => Err(()),
            Err(_) => Ok(()),
        }
    }

    /// Collects one part of an announce cycle; a complete cycle removes the origin's
    /// endpoints it no longer lists (a lost withdrawal).
    fn collect_cycle(&mut self, frame: &Discovery, listed: Vec<Guid>) {
        if frame.parts > MAX_TRACKED_PARTS || frame.part >= frame.parts {
            return;
        }
        let c = self.cycles.entry(frame.origin).or_default();
        if c.cycle != frame.cycle || c.parts != frame.parts || c.got.is_empty() {
            *c = Cycle {
                cycle: frame.cycle,
                parts: frame.parts,
                got: vec![false; usize::from(frame.parts)],
                missing: usize::from(frame.parts),
                listed: Default::default(),
            };
        }
        let part = usize::from(frame.part);
        if !c.got[part] {
            c.got[part] = true;
            c.missing -= 1;
        }
        c.listed.extend(listed);
        if c.missing > 0 {
            return;
        }
        let c = self.cycles.remove(&frame.origin).expect("collected above");
        self.stats.cycles_completed += 1;
        let prefix = prefix_of(&frame.origin);
        let stale: Vec<Guid> = self
            .graph
            .endpoints_of(&prefix)
            .into_iter()
            .filter_map(|id| self.graph.endpoint(id).map(|e| e.guid))
            .filter(|g| !c.listed.contains(g))
            .collect();
        if !stale.is_empty() {
            tracing::debug!(origin = %frame.origin, n = stale.len(), "endpoints no longer announced");
            self.stats.endpoints_pruned += stale.len() as u64;
            self.remove_endpoints(&stale);
        }
    }
}
