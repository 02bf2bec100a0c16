//! Matches: the candidate scan of a record's topic, the two halves of every match (linked
//! and unlinked in O(1)), the scope, and the answers to "who is matched with whom" and "why
//! not".
//!
//! **Owns:** the match lists and the matched set. **Must not touch:** the compatibility
//! rules themselves (`crate::matching`).

use super::entries::{opposite, slot, MatchRef};
use super::{DiscoveryGraph, EndpointId, MatchScope, MatchWork};
use crate::matching::{self, Incompatibility};
use crate::partition::CompiledPartitions;
use crate::types::{EndpointInfo, EndpointKind, Guid};

impl DiscoveryGraph {
    /// Compatible peers for `info` (with its prepared partitions) on its topic, in
    /// topic-list order, adding the work spent to `work`. `exclude` skips the
    /// endpoint's own slot when it is being replaced.
    pub(super) fn candidates(
        &self,
        (info, parts): (&EndpointInfo, Option<&CompiledPartitions>),
        topic: Option<u32>,
        local: bool,
        exclude: Option<u32>,
        out: &mut Vec<u32>,
        work: &mut MatchWork,
    ) {
        out.clear();
        let Some(ts) = topic else {
            return;
        };
        for &ps in self.topics[ts as usize].list(opposite(info.kind)) {
            if Some(ps) == exclude {
                continue;
            }
            let peer = &self.endpoints[ps as usize];
            if !self.in_scope(&info.guid, local, &peer.info.guid, peer.local) {
                continue;
            }
            work.pairs += 1;
            let pp = peer.parts.as_deref();
            let steps = &mut work.steps;
            let ok = match info.kind {
                EndpointKind::Writer => {
                    matching::compatible_on_topic(info, parts, &peer.info, pp, steps)
                }
                EndpointKind::Reader => {
                    matching::compatible_on_topic(&peer.info, pp, info, parts, steps)
                }
            };
            if ok {
                out.push(ps);
            }
        }
    }

    /// Whether the pair of endpoints `a` and `b` (with their locality) is matched at all
    /// under the graph's scope.
    pub(super) fn in_scope(&self, a: &Guid, a_local: bool, b: &Guid, b_local: bool) -> bool {
        match self.config.scope {
            MatchScope::All => true,
            MatchScope::LocalOnly => a_local || b_local,
            MatchScope::AcrossParticipants => a_local || b_local || a.prefix != b.prefix,
        }
    }

    fn pair_ids(&self, a: u32, b: u32) -> (EndpointId, EndpointId) {
        let (ea, eb) = (&self.endpoints[a as usize], &self.endpoints[b as usize]);
        match ea.info.kind {
            EndpointKind::Writer => (ea.id, eb.id),
            EndpointKind::Reader => (eb.id, ea.id),
        }
    }

    /// Records a match in both directions and in the matched set.
    pub(super) fn link(&mut self, a: u32, b: u32) {
        let pair = self.pair_ids(a, b);
        if !self.matched.insert(pair) {
            return;
        }
        let pos_a = slot(self.endpoints[a as usize].matches.len());
        let pos_b = slot(self.endpoints[b as usize].matches.len());
        self.endpoints[a as usize].matches.push(MatchRef {
            peer: b,
            peer_pos: pos_b,
        });
        self.endpoints[b as usize].matches.push(MatchRef {
            peer: a,
            peer_pos: pos_a,
        });
    }

    /// Removes the match at position `i` of slot `s`'s list from both lists
    /// and the matched set, fixing the back-pointers of entries moved by the
    /// swap-removals. O(1).
    pub(super) fn unlink(&mut self, s: u32, i: usize) {
        let m = self.endpoints[s as usize].matches.swap_remove(i);
        if let Some(&moved) = self.endpoints[s as usize].matches.get(i) {
            self.endpoints[moved.peer as usize].matches[moved.peer_pos as usize].peer_pos = slot(i);
        }
        let pp = m.peer_pos as usize;
        self.endpoints[m.peer as usize].matches.swap_remove(pp);
        if let Some(&moved) = self.endpoints[m.peer as usize].matches.get(pp) {
            self.endpoints[moved.peer as usize].matches[moved.peer_pos as usize].peer_pos =
                slot(pp);
        }
        let pair = self.pair_ids(s, m.peer);
        self.matched.remove(&pair);
    }

    fn peers(&self, id: EndpointId, kind: EndpointKind) -> impl Iterator<Item = EndpointId> + '_ {
        self.by_id
            .get(&id)
            .filter(|&&es| self.endpoints[es as usize].info.kind == kind)
            .into_iter()
            .flat_map(move |&es| self.endpoints[es as usize].matches.iter())
            .map(move |m| self.endpoints[m.peer as usize].id)
    }

    /// The readers matched with a writer: a single lookup, no search.
    pub fn readers_of(&self, writer: EndpointId) -> impl Iterator<Item = EndpointId> + '_ {
        self.peers(writer, EndpointKind::Writer)
    }

    /// The writers matched with a reader.
    pub fn writers_of(&self, reader: EndpointId) -> impl Iterator<Item = EndpointId> + '_ {
        self.peers(reader, EndpointKind::Reader)
    }

    /// True if the writer and reader are matched.
    pub fn is_matched(&self, writer: EndpointId, reader: EndpointId) -> bool {
        self.matched.contains(&(writer, reader))
    }

    /// Every matched (writer, reader) pair, sorted.
    pub fn matches(&self) -> Vec<(EndpointId, EndpointId)> {
        let mut v: Vec<_> = self.matched.iter().copied().collect();
        v.sort_unstable();
        v
    }

    /// Why two endpoints of this graph are not matched (in either order);
    /// `Ok(())` if they are compatible — and then they are matched.
    pub fn explain(&self, a: EndpointId, b: EndpointId) -> Result<(), Vec<Incompatibility>> {
        let (Some(&sa), Some(&sb)) = (self.by_id.get(&a), self.by_id.get(&b)) else {
            return Err(vec![Incompatibility::UnknownEndpoint]);
        };
        let (ea, eb) = (&self.endpoints[sa as usize], &self.endpoints[sb as usize]);
        let (w, r) = match (ea.info.kind, eb.info.kind) {
            (EndpointKind::Reader, EndpointKind::Writer) => (eb, ea),
            _ => (ea, eb),
        };
        let (wc, rc) = (w.parts.as_deref(), r.parts.as_deref());
        let mut why = match matching::explain_prepared(&w.info, wc, &r.info, rc) {
            Ok(()) => Vec::new(),
            Err(v) => v,
        };
        if !self.in_scope(&w.info.guid, w.local, &r.info.guid, r.local) {
            why.push(match self.config.scope {
                MatchScope::AcrossParticipants => Incompatibility::SameRemoteParticipant,
                _ => Incompatibility::NoLocalSide,
            });
        }
        if why.is_empty() {
            Ok(())
        } else {
            Err(why)
        }
    }

    /// [`DiscoveryGraph::explain`] by GUID: "why don't these match?".
    pub fn why_not_matched(&self, a: &Guid, b: &Guid) -> Result<(), Vec<Incompatibility>> {
        match (self.endpoint_id(a), self.endpoint_id(b)) {
            (Some(a), Some(b)) => self.explain(a, b),
            _ => Err(vec![Incompatibility::UnknownEndpoint]),
        }
    }
}
