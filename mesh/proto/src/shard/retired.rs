//! Routes of writers that a new route table dropped, kept for a short while on the shard
//! that checks their samples.
//!
//! A writer's samples and its withdrawal travel apart: the samples to the shard that checks
//! its sequence numbers (a run read on another shard hops there over a ring, and waits for
//! room while that shard is busy; a thread writer's last batch waits in the ingress ring),
//! the withdrawal through the control plane, which answers with a table without the writer.
//! When the table wins the race, runs written before the withdrawal would find no route
//! and be parked for a table that never names their writer again: lost, on a healthy mesh.
//! So the writer's route outlives its table by `parked_sample_timeout` (the same window in
//! which a new writer's runs wait for its first table), with its own copy of the writer's
//! sequence state (the route's slot may go to another writer at once), its reliable side
//! dropped (that state went with the table): such runs are sent on and delivered as the
//! writer's last route said, once.
//!
//! Bounded by the node's writer capacity; the oldest goes first, and the runs of a writer
//! gone from here are parked and counted as unrouted, as before.
//!
//! **Owns:** which retired routes are kept and for how long. **Must not touch:** what a
//! route does with a run (`samples`) or how tables are computed (the control plane's).

use super::samples_shard;
use super::seq::{SeqAt, WriterSeq};
use super::ShardCore;
use crate::topics::{EndpointGuid, SampleRoutes, WriterRoute};
use ahash::AHashMap;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A retired route and the state its runs are checked against.
#[derive(Debug)]
pub(super) struct RetiredRoute {
    /// The writer's route as the last table that named it said, without its reliable side.
    pub(super) route: WriterRoute,
    /// The writer's sequence state when the route retired, moved on by the runs since.
    pub(super) seq: WriterSeq,
    /// When it retired.
    at: Instant,
}

/// The retired routes of one shard (see the [module docs](self)).
#[derive(Debug, Default)]
pub(super) struct Retired {
    by_writer: AHashMap<EndpointGuid, RetiredRoute>,
    /// Retirements in time order; an entry whose time differs from its writer's current one
    /// is stale (the writer came back, or retired again later).
    order: VecDeque<(Instant, EndpointGuid)>,
}

impl Retired {
    /// True when no route is retired.
    pub(super) fn is_empty(&self) -> bool {
        self.by_writer.is_empty()
    }

    /// Keeps `route` (with `seq`) from `now`; at `max` routes, the oldest goes.
    pub(super) fn retire(
        &mut self,
        mut route: WriterRoute,
        seq: WriterSeq,
        now: Instant,
        max: usize,
    ) {
        if max == 0 {
            return;
        }
        // Stale entries count against the bound on `order` too: a writer that keeps
        // coming and going cannot grow it.
        while self.by_writer.len() >= max || self.order.len() >= max.saturating_mul(2) {
            let Some((at, w)) = self.order.pop_front() else {
                break;
            };
            if self.by_writer.get(&w).is_some_and(|r| r.at == at) {
                self.by_writer.remove(&w);
            }
        }
        route.reliable = None;
        let writer = route.writer;
        self.order.push_back((now, writer));
        self.by_writer.insert(
            writer,
            RetiredRoute {
                route,
                seq,
                at: now,
            },
        );
    }

    /// Takes `writer`'s retired route out (a table names the writer again, or a run of it
    /// is routed: [`put_back`](Self::put_back) returns it).
    pub(super) fn take(&mut self, writer: &EndpointGuid) -> Option<RetiredRoute> {
        self.by_writer.remove(writer)
    }

    /// Returns a route [`take`](Self::take) lent out.
    pub(super) fn put_back(&mut self, r: RetiredRoute) {
        self.by_writer.insert(r.route.writer, r);
    }

    /// Forgets the routes retired `timeout` or longer before `now`.
    pub(super) fn expire(&mut self, now: Instant, timeout: Duration) {
        while let Some(&(at, w)) = self.order.front() {
            if now < at + timeout {
                break;
            }
            self.order.pop_front();
            if self.by_writer.get(&w).is_some_and(|r| r.at == at) {
                self.by_writer.remove(&w);
            }
        }
        if self.by_writer.is_empty() {
            self.order.clear();
        }
    }

    /// When the oldest retirement expires.
    pub(super) fn next_expiry(&self, timeout: Duration) -> Option<Instant> {
        self.order.front().map(|(at, _)| *at + timeout)
    }
}

impl ShardCore {
    /// A new route table `new` replaces the current one: the writers it says are gone
    /// ([`SampleRoutes::removed`]) whose runs are checked here keep their last route a
    /// while; those it names again come back with the sequence state their retired route
    /// reached.
    pub(super) fn retire_dropped(&mut self, new: &SampleRoutes, now: Instant) {
        if !self.retired.is_empty() {
            for route in new.routes() {
                if let Some(r) = self.retired.take(&route.writer) {
                    self.seq_state(route, &mut SeqAt::Slot).catch_up(&r.seq);
                }
            }
        }
        if new.removed().is_empty() || self.cfg.parked_sample_timeout.is_zero() {
            return;
        }
        let Some(old) = self.sample_routes.take() else {
            return;
        };
        for w in new.removed() {
            if samples_shard(w, self.shards) != self.idx {
                continue;
            }
            if let Some(route) = old.get(w) {
                let seq = self.slot_seq(route);
                let max = self.cfg.max_retired_routes;
                self.retired.retire(route.clone(), seq, now, max);
            }
        }
        self.sample_routes = Some(old);
    }

    /// Forgets the retired routes older than the timeout.
    pub(super) fn expire_retired(&mut self, now: Instant) {
        self.retired.expire(now, self.cfg.parked_sample_timeout);
    }
}
