//! A Discovery frame from a link: who may say it, whether it is new, whether this node has
//! the time for it, then its entries applied to the discovery graph under the ownership
//! rule, the origin's announce cycles collected to repair lost withdrawals, and the frame
//! passed on with the hop limit.
//!
//! The checks, in order, each dropping the frame and counting why (no check reads more
//! than the frame's fixed fields):
//! 1. **Echo**: our own frame coming back.
//! 2. **Our prefix**: an origin whose id shares this node's 12-byte GUID prefix speaks for
//!    this node's endpoints; nothing a remote frame says changes a local endpoint.
//! 3. **Reverse path**: origin X's frames are taken only from the link to X or a link
//!    toward X in the membership graph over topic-capable nodes (`crate::reverse_path`);
//!    a stranger off X's paths cannot speak for X. Origins the graph does not know yet
//!    pass.
//! 4. **Budget**: the link's and the origin's work budgets must have credit left
//!    (`origins`).
//! 5. **Sequence**: above the origin's mark and within its window (`origins`).
//! 6. **Binding**: a GUID prefix belongs to the first origin admitted for it until that
//!    participant expires; another origin with the same prefix (the 4 bytes after it differ)
//!    is refused whole.
//!
//! Then the records are decoded and applied; a record that does not decode closes the
//! link and the frame goes no further (passing it on would make the next node close its
//! link to this one). A complete announce cycle counts only when every part carried the
//! origin's participant record, and only for the origin bound to the prefix.
//!
//! **Owns:** the order of those checks, the ownership checks of received records and the
//! cycle bookkeeping. **Must not touch:** the own announcements (`announce`), the per-origin
//! state (`origins`) or the graph's admission rules (`shoal-discovery` decides; this module
//! counts and reports).

use super::origins::Fresh;
use super::{prefix_of, Cycle, Remote, TopicsCore, TopicsOutput, MAX_TRACKED_PARTS};
use crate::reverse_path::PathVerdict;
use crate::wire::{Discovery, DiscoveryEntry};
use crate::{LinkId, PeerId};
use shoal_discovery::graph::{AdmitError, ParticipantAdmission};
use shoal_discovery::locators::{candidates, select_locators, to_socket};
use shoal_discovery::record::{decode, Record};
use shoal_discovery::types::{EndpointInfo, Guid, GuidPrefix, LocatorOrigin, ParticipantInfo};
use std::time::Instant;

/// Work units charged per entry of a frame besides its bytes (and the matching its
/// endpoints cost): see [`TopicsConfig::origin_work_per_sec`](crate::topics::TopicsConfig).
const ENTRY_WORK: u64 = 64;

/// What applying a frame's entries came to.
struct Applied {
    /// Work units spent.
    work: u64,
    /// The frame carried its origin's participant record.
    participant: bool,
    /// Endpoint GUIDs it listed.
    listed: Vec<Guid>,
}

impl TopicsCore {
    /// A Discovery frame arrived on `link` (whose peer advertised extended frames).
    /// `signed`: the control core verified the origin's signature over it (identity mode).
    pub fn on_discovery(&mut self, link: LinkId, frame: Discovery, signed: bool, now: Instant) {
        self.stats.frames_in += 1;
        if frame.origin == self.me {
            self.stats.echoes += 1;
            return;
        }
        let prefix = prefix_of(&frame.origin);
        if prefix == self.prefix {
            // Another id with our prefix: its records would describe our endpoints.
            self.stats.foreign_refused += 1;
            return;
        }
        let Some(via) = self.links.get(&link).map(|l| l.peer) else {
            // Not a capable link (the control core passes only those): nothing to judge by.
            return;
        };
        let path = self.path_of(&frame.origin, &via);
        if !path.accepted() {
            self.stats.off_path += 1;
            return;
        }
        // A signed frame was admitted before its verification was paid for (the control
        // core asks first): refusing it now would waste that.
        if !signed && !self.admits_work(link, &frame.origin, now) {
            return;
        }
        let trusted = signed || path == PathVerdict::Direct;
        let burst = self.cfg.origin_work_burst;
        let (fresh, evicted) =
            self.origins
                .check(frame.origin, frame.seq, link, trusted, burst, now);
        self.stats.dedup_evicted += u64::from(evicted);
        match fresh {
            Fresh::Duplicate => {
                self.stats.duplicates += 1;
                return;
            }
            Fresh::Held => {
                self.stats.seq_jumps_held += 1;
                return;
            }
            Fresh::New => {}
        }
        if self
            .remotes
            .get(&prefix)
            .is_some_and(|r| r.node != frame.origin)
        {
            self.stats.prefix_conflicts += 1;
            return;
        }
        let Some(applied) = self.apply(link, &frame, now) else {
            return;
        };
        self.charge(link, &frame.origin, applied.work);
        if frame.parts > 0 {
            self.collect_cycle(&frame, applied, now);
        }
        if frame.ttl > 1 && self.links.keys().any(|l| *l != link) {
            let mut again = frame;
            again.ttl -= 1;
            self.stats.frames_reflooded += 1;
            self.out.push_back(TopicsOutput::Flood {
                frame: again,
                except: Some(link),
            });
        }
    }

    /// The reverse-path verdict of a frame of `origin` carried by neighbour `via`.
    fn path_of(&self, origin: &PeerId, via: &PeerId) -> PathVerdict {
        if *origin == *via {
            return PathVerdict::Direct;
        }
        if !self.reverse_path {
            return PathVerdict::UnknownOrigin;
        }
        self.paths.toward(origin, via)
    }

    /// True when both the link's and the origin's work budgets have credit left: a frame
    /// of `origin` from `link` may be worked on (the control core asks before it verifies
    /// a signature). A refusal is counted (`budget_dropped`).
    pub fn admits_work(&mut self, link: LinkId, origin: &PeerId, now: Instant) -> bool {
        let ok = self.link_has_budget(link, now) && self.origin_has_budget(origin, now);
        self.stats.budget_dropped += u64::from(!ok);
        ok
    }

    /// True when `link`'s budget has credit; when not, its shard is told to drop its
    /// Discovery frames until it has (once per spell).
    fn link_has_budget(&mut self, link: LinkId, now: Instant) -> bool {
        let (rate, burst) = (self.cfg.link_work_per_sec, self.cfg.link_work_burst);
        let Some(l) = self.links.get_mut(&link) else {
            return true;
        };
        if l.budget.has_credit(rate, burst, now) {
            return true;
        }
        let until = l.budget.credit_at(rate);
        if l.paused.is_none_or(|p| p < until) {
            l.paused = Some(until);
            self.out
                .push_back(TopicsOutput::PauseDiscovery { link, until });
        }
        false
    }

    fn origin_has_budget(&mut self, origin: &PeerId, now: Instant) -> bool {
        let (rate, burst) = (self.cfg.origin_work_per_sec, self.cfg.origin_work_burst);
        self.origins
            .budget(origin)
            .is_none_or(|b| b.has_credit(rate, burst, now))
    }

    /// Charges `work` units to `link`'s and `origin`'s budgets.
    pub fn charge(&mut self, link: LinkId, origin: &PeerId, work: u64) {
        self.charge_link(link, work);
        self.charge_origin(origin, work);
    }

    /// Charges `work` units to `link`'s budget only: the control core's signature
    /// verification, before it knows whether the frame's origin said it.
    pub fn charge_link(&mut self, link: LinkId, work: u64) {
        if let Some(l) = self.links.get_mut(&link) {
            l.budget.charge(work);
        }
    }

    /// Charges `work` units to `origin`'s budget only: a verification once the signature
    /// proved the origin said it (a forgery about an origin must not spend its budget, or
    /// a member's forgeries would get the origin's genuine frames dropped).
    pub fn charge_origin(&mut self, origin: &PeerId, work: u64) {
        if let Some(b) = self.origins.budget(origin) {
            b.charge(work);
        }
    }

    /// Applies the entries of a frame whose origin passed every check. `None` when a
    /// record did not decode: the link is closed and the frame goes no further.
    fn apply(&mut self, link: LinkId, frame: &Discovery, now: Instant) -> Option<Applied> {
        let origin = frame.origin;
        let prefix = prefix_of(&origin);
        let mut applied = Applied {
            work: 0,
            participant: false,
            listed: Vec::new(),
        };
        let matching = self.graph.match_work().units();
        for entry in &frame.entries {
            applied.work += ENTRY_WORK + entry.encoded_len() as u64;
            match entry {
                DiscoveryEntry::Record(bytes) => match decode(bytes) {
                    Err(e) => {
                        tracing::debug!(?link, %origin, error = %e, "discovery record malformed");
                        self.malformed(link);
                        return None;
                    }
                    Ok(Record::Participant(p)) => {
                        if p.prefix != prefix {
                            self.stats.foreign_refused += 1;
                            continue;
                        }
                        if self.admit_participant(origin, p, now).is_err() {
                            self.malformed(link);
                            return None;
                        }
                        applied.participant = true;
                    }
                    Ok(Record::Endpoint(e)) => {
                        if e.guid.prefix != prefix {
                            self.stats.foreign_refused += 1;
                            continue;
                        }
                        applied.listed.push(e.guid);
                        if self.admit_endpoint(e).is_err() {
                            self.malformed(link);
                            return None;
                        }
                    }
                },
                // Checked by the control core before the frame came here (`control::signed`).
                DiscoveryEntry::Signature(_) => {}
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
        // Matching, refused admissions included.
        applied.work += self.graph.match_work().units().saturating_sub(matching);
        Some(applied)
    }

    fn malformed(&mut self, link: LinkId) {
        self.stats.malformed_records += 1;
        self.out.push_back(TopicsOutput::CloseLink(link));
    }

    /// Admits a participant record of `origin` (the prefix is free or bound to it). `Err`
    /// only for an out-of-range record (a protocol error); a full table is a counted
    /// rejection.
    fn admit_participant(
        &mut self,
        origin: PeerId,
        p: ParticipantInfo,
        now: Instant,
    ) -> Result<(), ()> {
        let prefix = p.prefix;
        let locators = p.user_locators.clone();
        match self.graph.admit_participant(p, self.time(now)) {
            Ok(adm) => {
                // The lease as the graph admitted it (capped: an infinite lease would keep
                // a stranger's participant for ever).
                let lease = self
                    .graph
                    .participant(&prefix)
                    .map(|p| p.lease_duration)
                    .expect("just admitted");
                let expires = self.time(now).saturating_add(lease);
                let r = self.remotes.entry(prefix).or_insert(Remote {
                    node: origin,
                    expires,
                    locators: Vec::new(),
                });
                debug_assert_eq!(r.node, origin, "bound prefixes are checked first");
                r.expires = expires;
                r.locators = locators;
                self.origins.pin(&origin);
                if adm == ParticipantAdmission::Inserted {
                    self.capable_changed();
                    self.changed();
                    // A new participant that no catch-up reached, or one that renews
                    // leases only from frames: it hears this node's cycle within a period
                    // (`cadence`).
                    if !self.holds_lease_by_link(&origin) {
                        self.announce_soon_at(now);
                    }
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
    fn maybe_dial(&mut self, prefix: GuidPrefix) {
        if !self.cfg.dial_participants {
            return;
        }
        let Some(r) = self.remotes.get(&prefix) else {
            return;
        };
        let node = r.node;
        if self.links.values().any(|l| l.peer == node) {
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
    /// endpoints it no longer lists (a lost withdrawal). A part counts only when it carried
    /// the participant record (every part of a genuine cycle does) and the participant is
    /// admitted for this origin.
    fn collect_cycle(&mut self, frame: &Discovery, applied: Applied, now: Instant) {
        let prefix = prefix_of(&frame.origin);
        if frame.parts > MAX_TRACKED_PARTS
            || frame.part >= frame.parts
            || !applied.participant
            || self
                .remotes
                .get(&prefix)
                .is_none_or(|r| r.node != frame.origin)
        {
            return;
        }
        // A genuine node never lists more endpoints than a node may have.
        let most = self.cfg.max_local_endpoints;
        let c = self.cycles.entry(frame.origin).or_default();
        if c.cycle != frame.cycle || c.parts != frame.parts || c.got.is_empty() {
            *c = Cycle::new(frame.cycle, frame.parts, now);
        }
        c.mark(frame.part);
        if c.listed.len() + applied.listed.len() > most {
            c.overflow = true;
        } else {
            c.listed.extend(applied.listed);
        }
        if c.missing > 0 {
            return;
        }
        let c = self.cycles.remove(&frame.origin).expect("collected above");
        self.stats.cycles_completed += 1;
        if c.overflow {
            return;
        }
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
