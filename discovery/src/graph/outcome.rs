//! What an admission or a removal did: the graph's answers to its callers.
//!
//! **Owns:** the result types. **Must not touch:** the graph's storage.

use super::EndpointId;
use crate::types::{Guid, GuidPrefix};

/// Result of admitting a participant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParticipantAdmission {
    /// A new participant.
    Inserted,
    /// A known participant's record replaced and its lease renewed.
    Refreshed,
}

/// The matching work an admission cost, for a caller that budgets it per origin.
/// Rejected admissions count too ([`super::DiscoveryGraph::match_work`] sums every one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MatchWork {
    /// Candidate (writer, reader) pairs examined: opposite-kind endpoints on the topic
    /// within the match scope.
    pub pairs: u64,
    /// Partition work: name comparisons plus the bytes they compared, pattern runs in
    /// word steps (one per name byte per 64 pattern states), and bytes compiled.
    pub steps: u64,
}

impl MatchWork {
    /// Pairs and steps as one number: a pair's fixed checks count as one step.
    pub fn units(&self) -> u64 {
        self.pairs.saturating_add(self.steps)
    }
    pub(super) fn add(&mut self, other: MatchWork) {
        self.pairs = self.pairs.saturating_add(other.pairs);
        self.steps = self.steps.saturating_add(other.steps);
    }
}

/// Result of admitting an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointAdmission {
    /// The endpoint's id in this graph.
    pub id: EndpointId,
    /// True if the GUID was already known and its record replaced in place.
    pub replaced: bool,
    /// Peers newly matched with it, in match order.
    pub matched: Vec<EndpointId>,
    /// Peers no longer matched because the replacement changed policies.
    pub unmatched: Vec<EndpointId>,
    /// What matching it cost (zero for a refresh that changed nothing matchable).
    pub work: MatchWork,
}

/// What a removal or expiry took out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removal {
    /// Participants removed, in prefix order.
    pub participants: Vec<GuidPrefix>,
    /// Endpoints removed, in removal order.
    pub endpoints: Vec<(EndpointId, Guid)>,
    /// Matches removed.
    pub matches: usize,
}
