//! The per-link form of the reverse paths that the shards read on the message path
//! ([`PathTable`], [`PathCheck`]): which links an origin's frames are taken from, which a relay
//! skips, and for how long an origin whose links changed still takes off-path copies.
//!
//! **Owns:** the table and its settling times. **Must not touch:** the graph questions (the
//! parent module's [`ReversePaths`] answers them; the table only maps its neighbours to links).

use super::ReversePaths;
use crate::{LinkId, PeerId};
use ahash::AHashMap;
use std::time::{Duration, Instant};

/// What a [`PathTable`] says of a Data frame of some origin arriving on some link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathCheck {
    /// The origin is not in the table: take the frame.
    Unknown,
    /// The link leads to a neighbour toward the origin: take it.
    Toward,
    /// The link does not lead toward the origin, but the origin's links changed less than
    /// the settling time ago: other nodes may still judge by the graph before the change
    /// (their records have not all arrived), and their copy may be the only one this node
    /// gets, so the frame is taken (the dedup cache drops a second copy).
    Settling,
    /// The link does not lead toward the origin and its links have been settled: drop.
    Off,
}

impl PathCheck {
    /// True unless [`PathCheck::Off`].
    pub fn accepted(self) -> bool {
        self != PathCheck::Off
    }
}

/// Per origin, the links a shard takes its Data frames from: the links to the neighbours
/// toward it (its own link included). Built on the control plane from a [`ReversePaths`] and
/// this node's links, handed to every shard as an `Arc` and swapped whole when the graph or a
/// link changes; the message path only reads it (one hash probe per frame).
///
/// **Settling.** The rule holds every genuine frame only when all nodes judge by the same
/// graph. While a change travels (a link came up and the records naming it have reached some
/// nodes but not others), two neighbours can each expect an origin's frame from the other and
/// both drop it: a ring booting lost broadcasts that way. So an origin whose links changed
/// takes off-path copies for a settling time (the control core uses two membership
/// intervals: a lost record is re-flooded within one) and only then refuses them. A stranger
/// gains nothing it lacked: an origin's links change here only when the counted graph
/// between this node and the origin does, which a stranger's own record cannot do (an edge
/// counts only when both ends list it), but an off-path stranger can spend an origin's next
/// ids within a window an honest change opened.
///
/// Discovery frames (`topics::core`) get no settling time: one that a node judging by an old
/// graph refuses comes again with the origin's next announcement, while a forged one taken in
/// the window would move the origin's seq mark by up to the seq window and silence it for
/// that many announcements.
///
/// **Relays** (`relay_pruning`) send none of origin X's frames to a neighbour N no farther
/// from X than this node R ([`PathTable::skipped_links`]): under the rule N never takes them
/// from R. Settling widens what a receiver *accepts*; what a relay may hold back while X's
/// paths settle depends on where N gets X's frames instead:
/// - N is X, or N is linked to X in R's graph: N takes X's frames from X's own link. X
///   sends its own broadcasts on every link, and every node accepts an origin's frames from
///   the origin's own link whatever its graph says (`gossip`: the link the neighbour table
///   names for the origin). R's graph counts the edge X–N only once both X's and N's records
///   list each other, and each lists the other only once its end of the link is up. So the
///   skip holds whatever graph anyone else judges by, and applies from the first table: a
///   full mesh forming sends no relay copy at all (the 3-node demo used to drop millions of
///   duplicates in its first seconds, every origin settling from its first table). What it
///   relies on is the link X–N carrying X's frames, which no graph can promise: a cut R has
///   not heard of yet (until a record of X or N reaches it: a hop and a rebuild), and X
///   dropping its frames for N as slow. Neither depends on settling (the second is the
///   control core's to prevent, by X no longer listing N while the link is slow).
/// - N is two hops or more from X: N takes X's frames from a neighbour M one hop nearer,
///   and whether M sends and N accepts depends on M's and N's graphs, not R's. A change that
///   reached R first (a new link making N nearer) can make R skip N while N, still judging
///   by the old graph, expects X's frames from R only and refuses M's: nothing reaches N.
///   Such a skip waits until X's paths settle, as every skip did before, unless it was
///   already in force before the change: by the graph R judged by before, N did not take
///   X's frames from R, so a node still judging by that graph does not expect R's copy,
///   and one judging by the new graph agrees with R.
/// - N is farther from X than R and *spared* ([`ReversePaths::spared`]): N takes X's frames
///   from any node linked to it at R's distance from X, and `relay_redundancy` of those
///   that rank before R carry them. The skip is one of the previous kind (it waits for
///   settling unless already in force); a relay that ranks before R but judges by an older
///   graph holds back its copy until the record of the change reaches it.
#[derive(Debug, Clone, Default)]
pub struct PathTable {
    by_origin: AHashMap<PeerId, TableEntry>,
    links: Vec<LinkId>,
}

#[derive(Debug, Clone, Copy)]
struct TableEntry {
    start: u32,
    len: u32,
    /// The links a relay sends none of this origin's frames (after the accepted ones).
    skip_len: u32,
    /// Of those, the links it skips even while the origin settles: to the origin and to the
    /// neighbours linked to it (after the skipped ones).
    firm_len: u32,
    /// Off-path copies are taken until then (`None`: settled from the start).
    settling_until: Option<Instant>,
}

impl PathTable {
    /// The table of `paths` over this node's links `links` (`(neighbour, link)`, any order;
    /// a neighbour may have several links while a dial race settles: all are taken), every
    /// origin settled, every link's neighbour following the rule.
    pub fn new(paths: &ReversePaths, links: &[(PeerId, LinkId)]) -> PathTable {
        Self::build(paths, links, &[], None)
    }

    /// The table of `paths` over `links` that replaces `previous` at `now`: an origin that is
    /// new, or whose accepted or skipped links differ from `previous`'s, settles for `settle`
    /// from `now`; the others keep `previous`'s settling time. While an origin settles, a
    /// relay still skips the links to the origin and to its neighbours, and those `previous`
    /// skipped at `now` (a decision already in force; see [`PathTable`]). `flooded`: links
    /// whose neighbour gets every flooded frame whatever the graph says (a multimaster peer,
    /// which floods as mesh-v1 does and takes every copy), never skipped.
    pub fn after(
        previous: &PathTable,
        paths: &ReversePaths,
        links: &[(PeerId, LinkId)],
        flooded: &[LinkId],
        now: Instant,
        settle: Duration,
    ) -> PathTable {
        Self::build(paths, links, flooded, Some((previous, now, settle)))
    }

    fn build(
        paths: &ReversePaths,
        links: &[(PeerId, LinkId)],
        flooded: &[LinkId],
        previous: Option<(&PathTable, Instant, Duration)>,
    ) -> PathTable {
        let mut sorted = links.to_vec();
        sorted.sort_unstable();
        // Each neighbour's run of links in `sorted`, found by one hash probe: every origin
        // looks up most neighbours up to three times (a full mesh of 60: ~7 000 lookups a
        // table, one table per link change); binary searches over the 16-byte ids cost more
        // than the rest of the table.
        let mut runs: AHashMap<PeerId, (u32, u32)> = AHashMap::with_capacity(sorted.len());
        for (k, (q, _)) in sorted.iter().enumerate() {
            runs.entry(*q).or_insert((k as u32, k as u32)).1 = k as u32 + 1;
        }
        let links_of = |n: PeerId| {
            let (from, to) = runs.get(&n).copied().unwrap_or_default();
            sorted[from as usize..to as usize].iter().map(|(_, l)| *l)
        };
        let mut flooded = flooded.to_vec();
        flooded.sort_unstable();
        let mut by_origin = AHashMap::with_capacity(paths.len());
        let mut all = Vec::with_capacity(previous.map_or(0, |(p, _, _)| p.links.len()));
        let mut beside = Vec::new();
        for (origin, toward) in paths.origins() {
            let start = all.len();
            for n in toward {
                all.extend(links_of(*n));
            }
            all[start..].sort_unstable();
            let skip_start = all.len();
            let spared = paths.spared(origin).unwrap_or_default();
            for n in paths
                .not_farther(origin)
                .unwrap_or_default()
                .iter()
                .chain(spared)
            {
                all.extend(links_of(*n).filter(|l| flooded.binary_search(l).is_err()));
            }
            all[skip_start..].sort_unstable();
            let firm_start = all.len();
            let (accepted, skipped) = (&all[start..skip_start], &all[skip_start..firm_start]);
            let (settling_until, in_force) = match previous {
                None => (None, None),
                Some((prev, now, settle)) => {
                    let until = match prev.entry(origin) {
                        Some((e, old)) if old == accepted && prev.skipped(e) == skipped => {
                            e.settling_until
                        }
                        _ => Some(now + settle),
                    };
                    (until, prev.skipped_links(origin, now))
                }
            };
            // Skipped even while settling (a subset of the skipped links, so ascending too).
            beside.clear();
            for n in paths.beside(origin).unwrap_or_default() {
                beside.extend(links_of(*n));
            }
            // Searched once per skipped link: sorted, not scanned (in a full mesh every
            // neighbour is beside every origin, a scan was quadratic in the degree).
            beside.sort_unstable();
            for k in skip_start..firm_start {
                let l = all[k];
                if beside.binary_search(&l).is_ok()
                    || in_force.is_some_and(|f| f.binary_search(&l).is_ok())
                {
                    all.push(l);
                }
            }
            by_origin.insert(
                *origin,
                TableEntry {
                    start: start as u32,
                    len: (skip_start - start) as u32,
                    skip_len: (firm_start - skip_start) as u32,
                    firm_len: (all.len() - firm_start) as u32,
                    settling_until,
                },
            );
        }
        PathTable {
            by_origin,
            links: all,
        }
    }

    fn entry(&self, origin: &PeerId) -> Option<(&TableEntry, &[LinkId])> {
        self.by_origin
            .get(origin)
            .map(|e| (e, &self.links[e.start as usize..(e.start + e.len) as usize]))
    }

    fn skipped(&self, e: &TableEntry) -> &[LinkId] {
        let from = (e.start + e.len) as usize;
        &self.links[from..from + e.skip_len as usize]
    }

    fn firm(&self, e: &TableEntry) -> &[LinkId] {
        let from = (e.start + e.len + e.skip_len) as usize;
        &self.links[from..from + e.firm_len as usize]
    }

    /// The links a relay sends none of `origin`'s frames at `now`, ascending: those to
    /// neighbours no farther from the origin than this node (none of them takes the origin's
    /// frames from here), multimaster peers never among them. While the origin's links
    /// settle, only the links to the origin and to the neighbours linked to it (they take its
    /// frames from its own link, whatever graph anyone judges by; see [`PathTable`]). `None`
    /// (send on every link) when the origin is unknown.
    #[inline]
    pub fn skipped_links(&self, origin: &PeerId, now: Instant) -> Option<&[LinkId]> {
        let e = self.by_origin.get(origin)?;
        if e.settling_until.is_some_and(|t| now < t) {
            return Some(self.firm(e));
        }
        Some(self.skipped(e))
    }

    /// Whether a frame of `origin` is taken from `link` at `now` (see [`PathCheck`]).
    #[inline]
    pub fn check(&self, origin: &PeerId, link: LinkId, now: Instant) -> PathCheck {
        match self.entry(origin) {
            None => PathCheck::Unknown,
            Some((_, links)) if links.contains(&link) => PathCheck::Toward,
            Some((e, _)) if e.settling_until.is_some_and(|t| now < t) => PathCheck::Settling,
            Some(_) => PathCheck::Off,
        }
    }

    /// The links `origin`'s frames are taken from, ascending; `None`: any (unknown origin).
    pub fn accepted(&self, origin: &PeerId) -> Option<&[LinkId]> {
        self.entry(origin).map(|(_, links)| links)
    }

    /// Until when `origin` takes off-path copies (`None`: unknown origin, or settled from
    /// the start).
    pub fn settling_until(&self, origin: &PeerId) -> Option<Instant> {
        self.by_origin.get(origin).and_then(|e| e.settling_until)
    }

    /// Known origins.
    pub fn len(&self) -> usize {
        self.by_origin.len()
    }

    /// True when no origin is known (every frame is taken).
    pub fn is_empty(&self) -> bool {
        self.by_origin.is_empty()
    }
}
