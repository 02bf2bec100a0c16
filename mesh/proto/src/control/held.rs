//! The ordering rule between the control plane and the shards: an event is released only
//! after every shard applied what the control plane posted before it.
//!
//! A round that installed links posts [`crate::cmd::ToShard::Sync`]`(token)` to every shard
//! after its commands and holds its events (and every later event, to keep their order) until
//! every shard answered [`crate::cmd::ToControl::Synced`] with that token. So after
//! `PeerConnected`, a message the application sends to that peer never meets a shard whose
//! routing table does not have the link yet. A peer whose `PeerConnected` is held is hidden
//! from the connected-peer query for the same reason.
//!
//! **Owns:** the held events, the tokens in flight and the hidden peers. **Must not touch:**
//! what the events mean or how tokens travel.

use super::output::ControlEvent;
use crate::PeerId;
use ahash::{AHashMap, AHashSet};
use std::collections::VecDeque;

/// Events held back until the shards caught up.
#[derive(Debug)]
pub struct HeldEvents {
    shards: usize,
    held: VecDeque<(u64, ControlEvent)>,
    hidden: AHashSet<PeerId>,
    next_token: u64,
    /// Per token in flight: shards that answered.
    synced: AHashMap<u64, usize>,
    /// The highest token every shard answered (tokens complete in order: each shard
    /// answers in the order they were posted).
    done: u64,
}

impl HeldEvents {
    /// For a node of `shards` data shards.
    pub fn new(shards: usize) -> HeldEvents {
        HeldEvents {
            shards: shards.max(1),
            held: VecDeque::new(),
            hidden: AHashSet::new(),
            next_token: 1,
            synced: AHashMap::new(),
            done: 0,
        }
    }

    /// The events of one round, in order. Returns the token to post to every shard (when the
    /// round `installed` links) and appends to `out` the events that may go out now.
    pub fn round(
        &mut self,
        installed: bool,
        events: Vec<ControlEvent>,
        out: &mut Vec<ControlEvent>,
    ) -> Option<u64> {
        let token = if installed {
            let t = self.next_token;
            self.next_token += 1;
            Some(t)
        } else {
            self.held.back().map(|(t, _)| *t)
        };
        match token {
            Some(t) => {
                for e in events {
                    if let ControlEvent::PeerConnected { peer } = &e {
                        self.hidden.insert(*peer);
                    }
                    self.held.push_back((t, e));
                }
            }
            None => out.extend(events),
        }
        installed.then_some(token).flatten()
    }

    /// One shard answered `token`; appends to `out` the events this releases.
    pub fn on_synced(&mut self, token: u64, out: &mut Vec<ControlEvent>) {
        let n = self.synced.entry(token).or_insert(0);
        *n += 1;
        if *n < self.shards {
            return;
        }
        self.synced.remove(&token);
        self.done = self.done.max(token);
        while self.held.front().is_some_and(|(t, _)| *t <= token) {
            let (_, e) = self.held.pop_front().expect("checked");
            if let ControlEvent::PeerConnected { peer } = &e {
                self.hidden.remove(peer);
            }
            out.push(e);
        }
        if self.held.is_empty() {
            self.hidden.clear();
        }
    }

    /// True when every shard applied everything posted before the last token (no table or
    /// link change is in flight).
    pub fn caught_up(&self) -> bool {
        self.done + 1 >= self.next_token
    }

    /// True while `peer`'s `PeerConnected` is held.
    pub fn is_hidden(&self, peer: &PeerId) -> bool {
        self.hidden.contains(peer)
    }

    /// Events held now.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: u8) -> PeerId {
        PeerId([n; 16])
    }

    #[test]
    fn events_wait_for_every_shard_and_keep_their_order() {
        let mut h = HeldEvents::new(2);
        let mut out = Vec::new();
        let t = h.round(
            true,
            vec![ControlEvent::PeerConnected { peer: p(1) }],
            &mut out,
        );
        let t = t.expect("an installing round posts a token");
        assert!(out.is_empty());
        assert!(h.is_hidden(&p(1)));
        // A later round without installs queues behind the held one.
        assert_eq!(
            h.round(
                false,
                vec![ControlEvent::MemberJoined { peer: p(1) }],
                &mut out
            ),
            None
        );
        assert!(out.is_empty());
        h.on_synced(t, &mut out);
        assert!(out.is_empty(), "one shard of two is not enough");
        h.on_synced(t, &mut out);
        assert_eq!(
            out,
            vec![
                ControlEvent::PeerConnected { peer: p(1) },
                ControlEvent::MemberJoined { peer: p(1) }
            ]
        );
        assert!(!h.is_hidden(&p(1)));
        assert!(h.is_empty());
        out.clear();
        // Nothing held: events go straight out.
        h.round(false, vec![ControlEvent::PeerLost { peer: p(2) }], &mut out);
        assert_eq!(out, vec![ControlEvent::PeerLost { peer: p(2) }]);
    }

    #[test]
    fn an_earlier_token_does_not_release_a_later_round() {
        let mut h = HeldEvents::new(1);
        let mut out = Vec::new();
        let a = h
            .round(
                true,
                vec![ControlEvent::PeerConnected { peer: p(1) }],
                &mut out,
            )
            .unwrap();
        let b = h
            .round(
                true,
                vec![ControlEvent::PeerConnected { peer: p(2) }],
                &mut out,
            )
            .unwrap();
        h.on_synced(a, &mut out);
        assert_eq!(out, vec![ControlEvent::PeerConnected { peer: p(1) }]);
        assert!(h.is_hidden(&p(2)) && !h.is_hidden(&p(1)));
        h.on_synced(b, &mut out);
        assert_eq!(out.len(), 2);
        assert!(!h.is_hidden(&p(2)));
    }
}
