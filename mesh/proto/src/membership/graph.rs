//! The member set of [`MemberGraph`]: the edge rule (both known ends must list an edge), the
//! incremental growth on records that only add edges, and the rate-limited recomputation
//! from scratch when one went (see the parent module's docs).
//!
//! **Owns:** the member set and its events. **Must not touch:** records or floods (the parent
//! module stores them and calls in here).

use super::{MemberEvent, MemberGraph};
use crate::PeerId;
use ahash::{AHashMap, AHashSet};
use std::collections::VecDeque;
use std::time::Instant;

impl MemberGraph {
    /// `x`'s side of the edge `x`–`o`: whether `x`'s stored record lists `o` (`None`: no
    /// record of `x`).
    pub(super) fn side_of(&self, x: &PeerId, o: &PeerId) -> Option<bool> {
        self.records.get(x).map(|r| r.lists(o))
    }

    /// Whether the edge `o`–`x` counts when `o`'s record lists `ol` (sorted; None: no
    /// record of `o`) and `x` is not self: every end whose record is known lists the other.
    pub(super) fn edge_with(&self, o: &PeerId, ol: Option<&[PeerId]>, x: &PeerId) -> bool {
        let from_o = ol.map(|l| l.binary_search(x).is_ok());
        let from_x = self.side_of(x, o);
        match (from_o, from_x) {
            (Some(a), Some(b)) => a && b,
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => false,
        }
    }

    /// Calls `f` with every node adjacent to `u` over a counted edge.
    pub(super) fn adjacent(&self, u: &PeerId, mut f: impl FnMut(PeerId)) {
        if *u == self.me {
            self.neighbours.iter().for_each(|p| f(*p));
            return;
        }
        // Edges at self are exactly the own neighbours.
        if self.neighbours.binary_search(u).is_ok() {
            f(self.me);
        }
        match self.records.get(u) {
            Some(r) => {
                for v in &r.sorted {
                    // `u` lists `v`, so the edge rule (`edge_with`) leaves only `v`'s side:
                    // it counts unless `v`'s record is known and leaves `u` out.
                    if v != u && *v != self.me && !v.is_zero() && self.side_of(v, u) != Some(false)
                    {
                        f(*v);
                    }
                }
            }
            None => {
                for a in self.listed_by.get(u).into_iter().flatten() {
                    f(*a);
                }
            }
        }
    }

    /// `o`'s record changed from `previous` (None: it was unknown) to what is stored now.
    /// Edges only added: grow the member set from the newly connected nodes (a refresh with
    /// the same neighbours costs nothing, a join costs the new members). An edge removed:
    /// recompute from scratch.
    pub(super) fn record_changed(&mut self, o: PeerId, previous: Option<&[PeerId]>, now: Instant) {
        let now_listed = std::mem::take(&mut self.records.get_mut(&o).expect("just stored").sorted);
        let mut removed = false;
        let mut added: Vec<PeerId> = Vec::new();
        {
            let mut check = |x: &PeerId| {
                if *x == o || x.is_zero() || *x == self.me {
                    // Edges at self depend on the own neighbours only.
                    return true;
                }
                let before = self.edge_with(&o, previous, x);
                let after = self.edge_with(&o, Some(&now_listed), x);
                if before && !after {
                    removed = true;
                    return false;
                }
                if after && !before {
                    added.push(*x);
                }
                true
            };
            // Every edge of `o` whose standing can differ. `edge_with` reads `o`'s list only
            // as "lists x", so when `o` was known those are the nodes listed before or now but
            // not both: one or two per version in a forming mesh, where walking every listed
            // node cost two map lookups each per record (7 % of a control thread in a
            // 60-node start, `bench/notes/start60.md`). When `o` was unknown: those it lists,
            // and those that list it (edges they held one-sided).
            match previous {
                Some(before) => for_each_in_one(before, &now_listed, |x, _| check(x)),
                None => {
                    let others = self.listed_by.get(&o).into_iter().flatten();
                    for x in now_listed.iter().chain(others) {
                        if !check(x) {
                            break;
                        }
                    }
                }
            }
        }
        let listed_by = &mut self.listed_by;
        for_each_in_one(previous.unwrap_or_default(), &now_listed, |x, before| {
            if before {
                unlist(listed_by, x, &o);
            } else {
                listed_by.entry(*x).or_default().push(o);
            }
            true
        });
        self.records.get_mut(&o).expect("just stored").sorted = now_listed;
        if removed {
            self.recompute_limited(now);
            return;
        }
        for x in added {
            let reached = |p: &PeerId| *p == self.me || self.members.contains(p);
            match (reached(&o), reached(&x)) {
                (true, false) => self.expand(x),
                (false, true) => self.expand(o),
                _ => {}
            }
        }
    }

    /// `start` became reachable: add it and every node reachable from it.
    pub(super) fn expand(&mut self, start: PeerId) {
        self.stats.recomputes += 1;
        let mut members = std::mem::take(&mut self.members);
        let mut joined = vec![start];
        members.insert(start);
        let mut queue = VecDeque::from([start]);
        while let Some(u) = queue.pop_front() {
            self.adjacent(&u, |v| {
                if v != self.me && members.insert(v) {
                    joined.push(v);
                    queue.push_back(v);
                }
            });
        }
        self.members = members;
        joined.sort();
        self.events
            .extend(joined.into_iter().map(MemberEvent::MemberJoined));
    }

    /// An edge went: recompute the member set now, or at the end of the rate limit's gap if
    /// one ran within it (a postponed one already covers this change).
    pub(super) fn recompute_limited(&mut self, now: Instant) {
        if self.recompute_due.is_some() {
            self.stats.recomputes_deferred += 1;
            return;
        }
        match self.last_recompute.map(|t| t + self.recompute_gap) {
            Some(next) if now < next => {
                self.stats.recomputes_deferred += 1;
                self.recompute_due = Some(next);
            }
            _ => {
                self.last_recompute = Some(now);
                self.recompute();
            }
        }
    }

    /// BFS from self over the counted edges, then diff against the previous member set.
    pub(super) fn recompute(&mut self) {
        self.stats.recomputes += 1;
        let mut reached: AHashSet<PeerId> = AHashSet::with_capacity(self.members.len() + 1);
        let mut queue = VecDeque::from([self.me]);
        reached.insert(self.me);
        while let Some(u) = queue.pop_front() {
            self.adjacent(&u, |v| {
                if reached.insert(v) {
                    queue.push_back(v);
                }
            });
        }
        reached.remove(&self.me);
        let mut left: Vec<PeerId> = self.members.difference(&reached).copied().collect();
        let mut joined: Vec<PeerId> = reached.difference(&self.members).copied().collect();
        // Sorted so that simulations see a deterministic event order.
        left.sort();
        joined.sort();
        self.events
            .extend(left.into_iter().map(MemberEvent::MemberLeft));
        self.events
            .extend(joined.into_iter().map(MemberEvent::MemberJoined));
        self.members = reached;
    }
}

/// Removes `origin` from the nodes listing `x`.
pub(super) fn unlist(listed_by: &mut AHashMap<PeerId, Vec<PeerId>>, x: &PeerId, origin: &PeerId) {
    if let Some(v) = listed_by.get_mut(x) {
        v.retain(|o| o != origin);
        if v.is_empty() {
            listed_by.remove(x);
        }
    }
}

/// Calls `f` with every id in exactly one of the sorted, deduplicated `a` and `b`, in
/// ascending order, and whether it is `a`'s, until it returns false.
fn for_each_in_one(a: &[PeerId], b: &[PeerId], mut f: impl FnMut(&PeerId, bool) -> bool) {
    let (mut i, mut j) = (0, 0);
    loop {
        let (x, in_a) = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x == y => {
                i += 1;
                j += 1;
                continue;
            }
            (Some(x), Some(y)) if x < y => {
                i += 1;
                (x, true)
            }
            (_, Some(y)) => {
                j += 1;
                (y, false)
            }
            (Some(x), None) => {
                i += 1;
                (x, true)
            }
            (None, None) => return,
        };
        if !f(x, in_a) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::for_each_in_one;
    use crate::PeerId;

    #[test]
    fn the_walk_yields_each_id_in_exactly_one_list_with_its_side_and_stops_when_asked() {
        let p = |n: u8| PeerId([n; 16]);
        let a = [p(1), p(3), p(4), p(7)];
        let b = [p(2), p(3), p(5), p(7), p(9)];
        let mut seen = Vec::new();
        for_each_in_one(&a, &b, |x, in_a| {
            seen.push((x.0[0], in_a));
            true
        });
        assert_eq!(
            seen,
            [(1, true), (2, false), (4, true), (5, false), (9, false)]
        );
        let mut first = Vec::new();
        for_each_in_one(&a, &b, |x, _| {
            first.push(x.0[0]);
            first.len() < 2
        });
        assert_eq!(first, [1, 2], "stops at the first false");
        let mut none = 0;
        for_each_in_one(&a, &a, |_, _| {
            none += 1;
            true
        });
        for_each_in_one(&[], &[], |_, _| {
            none += 1;
            true
        });
        assert_eq!(none, 0, "equal lists and empty lists differ nowhere");
    }
}
