//! What a simulation does to the links between nodes: cut them (cleanly or silently), mark
//! them slow, slow soon or lagging as their shard would, partition and heal pairs.
//!
//! **Owns:** those faults. **Must not touch:** the event loop (`mod.rs`) or a node's life
//! (`lifecycle.rs`).

use super::*;

/// What [`Sim::mark`] puts on a link's budget, as its shard would.
#[derive(Clone, Copy)]
enum Mark {
    Slow,
    SlowSoon,
    Lagging,
}

impl Sim {
    /// Node `a`'s links to node `b`.
    pub fn links_between(&self, a: usize, b: usize) -> Vec<LinkId> {
        self.nodes[a]
            .socks
            .iter()
            .filter(|(_, s)| s.remote.is_some_and(|r| r.node == b))
            .map(|(l, _)| *l)
            .collect()
    }

    /// Closes the TCP connections between `a` and `b` (both see EOF).
    pub fn cut(&mut self, a: usize, b: usize) {
        let gen_a = self.nodes[a].gen;
        let pairs: Vec<(LinkId, End)> = self.nodes[a]
            .socks
            .iter()
            .filter_map(|(l, s)| s.remote.filter(|r| r.node == b).map(|r| (*l, r)))
            .collect();
        for (la, rb) in pairs {
            let ea = End {
                node: a,
                gen: gen_a,
                link: la,
            };
            self.schedule(b, a, Ev::Eof { to: ea });
            self.schedule(a, b, Ev::Eof { to: rb });
        }
    }

    /// Node `a`'s links to `b` stop draining and are declared slow (`on`): their queue bound
    /// is held as if full, so the shard drops what it sends there (its own broadcasts as
    /// `dropped_slow_link`), and the slow mark is set with the report a live shard sends its
    /// control plane. `false`: they drain (the mark clears at half the bound; the control core
    /// sees it on its next look).
    pub fn declare_slow(&mut self, a: usize, b: usize, on: bool) {
        self.mark(a, b, on, Mark::Slow);
    }

    /// Like [`Sim::declare_slow`] with `on`, one step earlier: the links are jammed and
    /// marked slow soon (a Block publisher's wait found them outpaced with a fifth of their
    /// allowance left), not yet slow. `declare_slow(a, b, false)` drains them.
    pub fn declare_slow_soon(&mut self, a: usize, b: usize) {
        self.mark(a, b, true, Mark::SlowSoon);
    }

    /// Node `a`'s links to `b` hold a backlog past `budget::LAG_FLOOR` and are marked lagging
    /// (an originated frame found them deep for `after` while another link drained twice as
    /// fast), as the shard reports it; with `on` false they drain below the floor.
    pub fn declare_lagging(&mut self, a: usize, b: usize, on: bool) {
        self.mark(a, b, on, Mark::Lagging);
    }

    fn mark(&mut self, a: usize, b: usize, on: bool, mark: Mark) {
        let gen = self.nodes[a].gen;
        let held = match mark {
            Mark::Lagging => shoal_proto::budget::LAG_FLOOR + 1,
            Mark::Slow | Mark::SlowSoon => self.nodes[a].cfg.max_outbound_queue_bytes,
        };
        for link in self.links_between(a, b) {
            let Some(budget) = self.nodes[a].core.link_budget(link).cloned() else {
                continue;
            };
            if !on {
                budget.release(held);
                continue;
            }
            assert!(
                budget.try_reserve(held).is_some(),
                "an idle link's queue is empty"
            );
            // Whether the mark is new does not matter here: the report is sent either way.
            let _new = match mark {
                Mark::Slow => budget.mark_slow(self.now),
                Mark::SlowSoon => budget.mark_slow_soon(),
                Mark::Lagging => budget.mark_lagging(self.now),
            };
            self.schedule_local(Ev::ToControl {
                node: a,
                gen,
                report: shoal_proto::cmd::ToControl::LinkSlow { link },
            });
        }
    }

    /// Makes everything between `a` and `b` vanish, in both directions (no EOF).
    pub fn partition(&mut self, a: usize, b: usize) {
        self.blackholed.insert((a, b));
        self.blackholed.insert((b, a));
    }

    pub fn heal(&mut self, a: usize, b: usize) {
        self.blackholed.remove(&(a, b));
        self.blackholed.remove(&(b, a));
    }
}
