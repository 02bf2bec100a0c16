//! The control core's side of the reverse-path check: it keeps the membership graph's
//! [`ReversePaths`] and pushes every shard the per-origin table of the links Data frames are
//! taken from ([`PathTable`], an `Arc` swapped whole, as the sample route tables are).
//!
//! **Owns:** when a new table is built and posted. **Must not touch:** the rule itself
//! ([`crate::reverse_path`]), the membership state machine (read only) or the shards' use of
//! the table (`gossip`).
//!
//! A table is rebuilt when the graph's edges may have changed ([`MemberGraph::shape`]) or this
//! node's links did (a link placed or removed, a dial race that replaced one), and only then;
//! a round that changed neither costs one comparison of the link list. It goes out at the end
//! of the round's link and membership changes, after the `Install`s of the same round, so a
//! shard never holds a table naming a link it does not route yet.
//!
//! The reverse paths cost a few passes over the graph (`crate::reverse_path`: ~0.4 ms at 512
//! nodes of degree 10, where relays are ranked toward nodes at every distance; `paths/sparse`
//! in the membership bench); while the graph keeps
//! changing (a mesh booting: every node's record changes once per neighbour it links) they are
//! rebuilt at most once per [`REBUILD_INTERVAL`], the first change at once and the last one
//! when the interval ends ([`ControlCore::paths_timeout`]), as the topic routes are planned.
//! A change of links alone rebuilds only the table (`O(table)`) at once, and only when it
//! touches a link to a neighbour the paths count (a table names no other link): a link that
//! just came up counts once both records list it, which is a graph change of its own. The
//! topics core checks Discovery frames against these same paths while every node of the graph is
//! topic-capable ([`ControlCore::shared_paths`], offered each round): one build, not two.
//!
//! Each table is built from the last one posted ([`PathTable::after`]): an origin whose links
//! changed takes off-path copies for `reverse_path_settle` (two membership intervals by
//! default, the time a change needs to reach every node's graph), so that nodes still judging
//! by the old graph lose nothing.
//!
//! [`MemberGraph::shape`]: crate::membership::MemberGraph::shape

use super::ControlCore;
use crate::cmd::ToShard;
use crate::reverse_path::{PathTable, ReversePaths};
use crate::{LinkId, PeerId};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The shortest time between two rebuilds of the reverse paths (the topic routes' planning
/// interval's default): at 512 nodes a rebuild is a few hundred microseconds, and a booting
/// mesh changes the graph thousands of times.
pub const REBUILD_INTERVAL: Duration = Duration::from_millis(10);

/// What the control core keeps for the reverse-path check.
#[derive(Debug)]
pub(super) struct Paths {
    /// `reverse_path_check`: off, no table is ever built and the shards take every copy.
    enabled: bool,
    /// Shared with the topics core, which checks Discovery frames against the same paths
    /// when every node of the graph is topic-capable ([`ControlCore::shared_paths`]).
    paths: Arc<ReversePaths>,
    /// The links the last table was built over, `(peer, link)` sorted.
    links: Vec<(PeerId, LinkId)>,
    scratch: Vec<(PeerId, LinkId)>,
    /// The links to multimaster peers, which get every flooded frame (never skipped).
    flooded: Vec<LinkId>,
    /// Tables posted (each to every shard).
    pushed: u64,
    /// Link changes that left the table as it was (links to peers the paths do not count as
    /// neighbours): not built, not posted.
    unchanged: u64,
    /// The shards' table knows no origin (they start so): an empty table is not posted
    /// again, it takes every frame like none.
    shards_empty: bool,
    /// No rebuild of the reverse paths before then.
    next_build: Option<Instant>,
    /// The last table posted: an origin whose links it already had keeps its settling time.
    table: Arc<PathTable>,
    /// How long an origin whose links changed takes off-path copies ([`PathTable`]).
    settle: Duration,
    /// `relay_pruning`: off, every link counts as flooded and no relay skips any.
    prune: bool,
    /// `relay_redundancy` (see [`ReversePaths::spared`]).
    redundancy: usize,
}

impl Paths {
    /// `settle`: how long an origin whose links changed keeps taking off-path copies
    /// (`reverse_path_settle`).
    /// `prune`: `relay_pruning`; `redundancy`: `relay_redundancy`.
    pub(super) fn new(
        me: PeerId,
        enabled: bool,
        settle: Duration,
        prune: bool,
        redundancy: usize,
    ) -> Paths {
        Paths {
            enabled,
            paths: Arc::new(ReversePaths::new(me)),
            links: Vec::new(),
            scratch: Vec::new(),
            flooded: Vec::new(),
            pushed: 0,
            unchanged: 0,
            shards_empty: true,
            next_build: None,
            table: Arc::default(),
            settle,
            prune,
            redundancy,
        }
    }
}

impl ControlCore {
    /// Posts a new reverse-path table to every shard when the graph (at most once per
    /// [`REBUILD_INTERVAL`]) or the links changed.
    pub(super) fn push_paths(&mut self, now: Instant) {
        let p = &mut self.paths;
        if !p.enabled {
            return;
        }
        let mut rebuilt = false;
        if p.paths.shape() != Some(self.membership.shape()) && p.next_build.is_none_or(|t| now >= t)
        {
            p.paths = Arc::new(ReversePaths::of_graph(
                self.me,
                &self.membership,
                p.redundancy,
            ));
            rebuilt = true;
            p.next_build = Some(now + REBUILD_INTERVAL);
        }
        p.scratch.clear();
        p.scratch
            .extend(self.placed.iter().map(|(l, placed)| (placed.peer, *l)));
        p.scratch.sort_unstable();
        if !rebuilt && p.scratch == p.links {
            return;
        }
        let same_table = !rebuilt && counted_links_equal(&p.paths, &p.scratch, &p.links);
        std::mem::swap(&mut p.scratch, &mut p.links);
        if same_table {
            p.unchanged += 1;
            return;
        }
        p.flooded.clear();
        let prune = p.prune;
        p.flooded.extend(
            self.placed
                .iter()
                .filter(|(_, placed)| !prune || !placed.capable)
                .map(|(l, _)| *l),
        );
        let table = Arc::new(PathTable::after(
            &p.table, &p.paths, &p.links, &p.flooded, now, p.settle,
        ));
        p.table = table.clone();
        if table.is_empty() && p.shards_empty {
            return;
        }
        p.shards_empty = table.is_empty();
        p.pushed += 1;
        for s in 0..self.shards {
            self.post(s, ToShard::ReversePaths(table.clone()));
        }
    }

    /// When a graph change waits for its rebuild ([`REBUILD_INTERVAL`]); `None`: none waits.
    pub(super) fn paths_timeout(&self) -> Option<Instant> {
        let p = &self.paths;
        (p.enabled && p.paths.shape() != Some(self.membership.shape()))
            .then_some(p.next_build)
            .flatten()
    }

    /// The reverse paths the last table was built from (every origin [`PathVerdict`]
    /// `UnknownOrigin` while the check is off).
    ///
    /// [`PathVerdict`]: crate::reverse_path::PathVerdict
    pub fn reverse_paths(&self) -> &ReversePaths {
        &self.paths.paths
    }

    /// The reverse paths of the whole graph, for the topics core to take instead of building
    /// its own (`None` while the check is off).
    pub(super) fn shared_paths(&self) -> Option<&Arc<ReversePaths>> {
        self.paths.enabled.then_some(&self.paths.paths)
    }

    /// What a Discovery relay of `origin` skips at `now`, besides the origin and the
    /// neighbours its record lists (`topics.rs`): the links a broadcast relay of `origin`
    /// skips ([`PathTable::skipped_links`], ascending), and, once the origin's paths have
    /// settled, the neighbours another relay ranks first for ([`ReversePaths::outranked`],
    /// ascending: a lost Discovery frame is repaired by the origin's next cycle, so one relay
    /// into each node is enough where broadcasts keep `relay_redundancy`; a sparse mesh's
    /// idle cycles crossed ~2 links into each node).
    ///
    /// Both empty unless every node of the graph is topic-capable (the topics core then
    /// checks Discovery frames against these same paths): the paths are the whole graph's,
    /// and a plain multimaster node, which never carries a Discovery frame, may be what makes
    /// a neighbour no farther from the origin, or its relay ranked first. Empty too without
    /// `relay_pruning`, without the check, or for an unknown origin.
    pub(super) fn discovery_skips(&self, origin: &PeerId, now: Instant) -> (&[LinkId], &[PeerId]) {
        let p = &self.paths;
        if !p.prune || !self.topics.checks_against(&p.paths) {
            return (&[], &[]);
        }
        let links = p.table.skipped_links(origin, now).unwrap_or(&[]);
        if p.table.settling_until(origin).is_some_and(|t| now < t) {
            return (links, &[]);
        }
        (links, p.paths.outranked(origin).unwrap_or(&[]))
    }

    /// Reverse-path tables posted to the shards so far (each to every shard).
    pub fn path_tables_pushed(&self) -> u64 {
        self.paths.pushed
    }

    /// Changes of this node's links that needed no new table: they touched no link to a
    /// neighbour the reverse paths count, and a table names no other.
    pub fn path_tables_unchanged(&self) -> u64 {
        self.paths.unchanged
    }
}

/// Whether two sorted `(peer, link)` lists agree on every link to a neighbour `paths` counts
/// (one hop away). A [`PathTable`] names no other link: every peer in it is a neighbour
/// toward an origin, no farther from it, or beside it, all one hop from this node. So a link
/// to a peer the graph does not count yet (its link is up, but its record and this node's do
/// not list each other yet) or no longer changes nothing in the table. While a full mesh
/// forms each link comes up before its edge counts: its table was built twice, once for the
/// link and once for the edge.
fn counted_links_equal(
    paths: &ReversePaths,
    a: &[(PeerId, LinkId)],
    b: &[(PeerId, LinkId)],
) -> bool {
    let counted = |v: &(PeerId, LinkId)| paths.hops(&v.0) == Some(1);
    a.iter()
        .filter(|v| counted(v))
        .eq(b.iter().filter(|v| counted(v)))
}
