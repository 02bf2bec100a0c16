//! Loss and traffic counters, one set per data shard plus one for the control plane.
//!
//! **Owns:** the counters, one set per executor, and their snapshots. **Must not touch:** what is
//! counted when (the cores decide).
//!
//! Each set is written only by the executor that owns it (plain relaxed loads and stores, no
//! locked instructions and no cache line shared between executors on the message path;
//! a counter of another executor's set must never be written) and read by `Mesh::stats` (shoal-mesh) from any
//! thread. Every message that is neither delivered nor sent on is counted under exactly one
//! `dropped_*` cause, per link it was meant for.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident),* $(,)?) => {
        /// A snapshot of one executor's counters (or their sum, see [`MeshStats::total`]).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct ShardStats {
            $($(#[doc = $doc])* pub $name: u64,)*
            /// Highest number of bytes ever reserved in one link's outbound queue by this
            /// executor (the maximum, not the sum, in [`MeshStats::total`]). Never above
            /// `max_outbound_queue_bytes` unless a single frame is larger than the bound.
            /// (`Publisher` batches are at most a quarter of it plus one frame.)
            pub peak_queued_bytes: u64,
        }

        /// The live counters behind a [`ShardStats`]. Aligned so that two executors' sets
        /// never share a cache line.
        #[derive(Debug, Default)]
        #[repr(align(128))]
        pub struct Counters {
            $($(#[doc = $doc])* pub $name: AtomicU64,)*
            /// See [`ShardStats::peak_queued_bytes`].
            pub peak_queued_bytes: AtomicU64,
        }

        impl Counters {
            /// The counters' current values.
            pub fn snapshot(&self) -> ShardStats {
                ShardStats {
                    $($name: self.$name.load(Relaxed),)*
                    peak_queued_bytes: self.peak_queued_bytes.load(Relaxed),
                }
            }
        }

        impl ShardStats {
            /// Every counter (all but the [`peak_queued_bytes`](Self::peak_queued_bytes)
            /// high-water mark), in declaration order, with its name and its doc comment, so
            /// exporters (e.g. `shoal_mesh::metrics`) follow new counters without a list of
            /// their own.
            pub fn counters(&self) -> Vec<StatCounter> {
                vec![$(StatCounter {
                    name: stringify!($name),
                    doc: concat!($($doc),*),
                    value: self.$name,
                }),*]
            }

            fn accumulate(&mut self, o: &ShardStats) {
                $(self.$name += o.$name;)*
                self.peak_queued_bytes = self.peak_queued_bytes.max(o.peak_queued_bytes);
            }
        }
    };
}

/// One counter of a [`ShardStats`], as [`ShardStats::counters`] lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatCounter {
    /// The field's name (`dropped_duplicate`).
    pub name: &'static str,
    /// The field's doc comment, lines joined (Markdown, as written in the source).
    pub doc: &'static str,
    /// Its value.
    pub value: u64,
}

counters! {
    /// Messages the application handed to this node (accepted by the origin shard).
    originated,
    /// Messages handed to the application as `Event::Message` (to the callbacks,
    /// and to the event queue while a receiver exists).
    delivered,
    /// Data frames queued on a link (originated or relayed), one per link.
    frames_queued,
    /// Frames read from links.
    frames_in,
    /// Bytes read from links.
    bytes_in,
    /// Bytes written to links.
    bytes_out,
    /// Messages handed to another shard (dedup owner or link owner).
    hops_out,
    /// Dropped: the message id was seen before.
    dropped_duplicate,
    /// Dropped: the message id is older than anything the dedup cache still remembers for
    /// its originator's id stream (a copy delayed past `max_dedup_entries` / `dedup_ttl`):
    /// treated as seen, so it is never delivered twice.
    dropped_too_old,
    /// Dropped: a targeted message for someone else arrived with no hop left.
    dropped_ttl,
    /// Dropped: queued on a link (or being written to it) when the link closed; counted per
    /// message on the link's shard. A write the kernel had taken in part counts whole, so
    /// this may count a message its peer still received.
    dropped_link_closed,
    /// Lost with a link that closed while its kernel held them: written (the kernel took
    /// them) but not acknowledged by the peer when the link closed, counted per message on
    /// the link's shard. A write acknowledged in part counts whole, and a connection closed
    /// without a reset may still deliver some as it goes: an upper bound of what the close
    /// lost. Zero where the kernel does not count acknowledged bytes (`tcpi_bytes_acked`,
    /// Linux 4.1).
    unacked_link_closed,
    /// Dropped: a message (or topic sample) its peer sent on a link this node was closing,
    /// with no other link to that peer to take it over (this node stopping, or dropping the
    /// link for `max_links`); one per message. What comes on a dial race's loser counts as
    /// come on the winner instead.
    dropped_link_closing,
    /// Dropped: no link to send it on (or the link went away meanwhile).
    dropped_no_route,
    /// Dropped: the link's outbound queue was at `max_outbound_queue_bytes` (or, for a
    /// relayed frame routed by the shard's inbox, the ring to the link's shard was full).
    dropped_queue_full,
    /// Dropped: topic samples of a writer the shard's route table did not come to know
    /// within `topics.parked_sample_timeout` (or that did not fit
    /// `topics.max_parked_sample_bytes` meanwhile): matched with no reader this node serves or
    /// relays for, or a writer removed longer than that timeout ago (see
    /// `sample_runs_after_removal`). One per sample.
    dropped_unrouted_samples,
    /// Dropped: topic samples that arrived on a link their writer's samples do not come
    /// from: not from this node's parent in the writer's tree nor from another neighbour
    /// closer to the writer's node, or claiming one of this node's own writers. Forged runs
    /// (a stranger's, to poison the per-writer sequence check) and, briefly, copies sent
    /// along a tree this node does not see yet. One per sample.
    dropped_wrong_link,
    /// Runs of topic samples held because their writer was not in the shard's route table
    /// yet (routed when a table naming it arrives, else counted in
    /// `dropped_unrouted_samples`).
    sample_runs_parked,
    /// Runs of topic samples routed on their writer's last route after the table that
    /// dropped the writer reached the shard (written before its removal reached this node's
    /// control plane; a writer's route outlives its table by `topics.parked_sample_timeout`).
    sample_runs_after_removal,
    /// Reliable topics: writer heartbeats sent.
    reliable_heartbeats,
    /// Reliable topics: acknowledgements (AckNack frames) sent by this node's readers.
    reliable_acknacks,
    /// Reliable topics: samples resent by this node's writers (repairs and history handed
    /// to late joiners).
    samples_repaired,
    /// Reliable topics: Gap frames sent by this node's writers (samples a reader asked for
    /// that the history no longer holds).
    reliable_gaps,
    /// Reliable topics: samples this node's reliable readers will never get (the writer said
    /// so with a Gap); each also raised a `SamplesLost` event.
    samples_lost,
    /// Reliable topics: reliability frames dropped because no route leads where they go (no
    /// table entry for the writer, no upstream link, no history on the writer's node).
    reliable_unrouted,
    /// Reliable topics: reliability frames dropped because they came on a link they do not
    /// travel: a Heartbeat, Repair or Gap not from where the writer's samples come (see
    /// `dropped_wrong_link`), an AckNack not from the writer's route's link toward the node
    /// of the reader it names.
    reliable_wrong_link,
    /// Reliable topics: samples a writer's history dropped because their lifespan ended
    /// (neither repaired nor handed to a late joiner afterwards: asked for, they get a Gap).
    samples_expired,
    /// Reliable topics: acknowledgements a writer ignored: from a reader not matched with it,
    /// for samples it never wrote, older than one already seen from that reader, or with a
    /// count far ahead of it (held until the next one confirms it).
    reliable_acks_ignored,
    /// Reliable topics: repair requests a writer left for a later period because its
    /// `repair_budget` for this one was spent (a flood of them never resends more).
    repairs_deferred,
    /// Reliable topics: samples a reliable writer sent but could not keep for repair (not
    /// the history's next samples: never from a writer's own handle).
    history_refused,
    /// Reliable topics: samples a keep-all writer's history holds beyond its bounds, because
    /// they were already sent when the bound was reached (its handle overran its credit, e.g.
    /// while the first reliable reader matched).
    history_over_limit,
    /// Reliable topics: readers a keep-all writer stopped waiting for because they did not
    /// acknowledge within `topics.ack_timeout` (waited for again once they catch up).
    reliable_readers_released,
    /// Reliable topics: Gaps and Heartbeats this node's readers held instead of adopting
    /// because they named samples beyond their writer's plausible range (far past the
    /// highest sample received from it).
    reliable_held,
    /// Links closed because a frame did not decode (random bytes, unknown type, bad field).
    malformed_frames,
    /// Links closed because a frame announced a length above `max_message_bytes` (before the
    /// handshake: above the largest handshake frame).
    oversize_frames,
    /// Links closed because a partial frame made no progress for the heartbeat timeout
    /// (a trickle; `ErrorKind::Stalled`).
    stalled_links,
    /// Control events (peer/member/error) lost because the event queue was full.
    dropped_event_queue_full,
    /// Times a Message event had to wait for room in the event queue (backpressure).
    event_queue_waits,
    /// Of those waits, the ones where the queued payloads were at `event_queue_bytes` (the
    /// event count may still have had room).
    event_queue_byte_waits,
    /// Links closed because their peer stayed blocked past the Disconnect policy's limit (or,
    /// under Block, past [`crate::SlowLinkPolicy::after`] with the `Disconnect` action).
    slow_peer_disconnects,
    /// Links declared slow under the Block policy (see [`crate::SlowLinkPolicy`]), once per
    /// congestion episode.
    slow_links,
    /// Links whose peer acknowledged nothing for `budget::UNANSWERED_AFTER` while segments
    /// waited out retransmission timeouts in a row (a path that drops what is sent, while
    /// the link stays open until the heartbeat timeout), once per episode.
    links_unanswered,
    /// Links marked lagging (`budget::LAG_FLOOR`): an originated frame found the queue deep
    /// past the floor for `SlowLinkPolicy::after` while another link drained at least twice as
    /// fast; the peer is unlisted (the relays carry for it) until the queue drains below the
    /// floor. Once per episode.
    links_lagging,
    /// Dropped: originated under the Block policy for a link declared slow, which no one
    /// waits for (see [`crate::SlowLinkPolicy`]). A copy not sent on that link, not always a
    /// message the neighbour lost: while its peer is unlisted (`slow_links_unlisted`), the
    /// relays carry it the broadcasts and the topic routes go around the link (the
    /// subscriber's own gaps say what it lost: in the fault suite the publisher counts ~54 k
    /// here a run, while its two lossy subscribers miss ~42 k in all).
    dropped_slow_link,
    /// Secured mesh: handshakes refused on their crypto, identity or mode checks.
    auth_failures,
    /// Secured mesh: links closed because a record did not authenticate or was cut short.
    record_failures,
    /// Secured mesh: records sealed (bytes written over records sealed is the mean record
    /// size).
    records_sealed,
    /// Scouting datagrams (beacons) dropped as junk: unparsable, another protocol version, TCP port 0,
    /// a missing or wrong MAC, or the other mode's flag (plaintext and secured mesh alike).
    /// Our own multicast echoes and other groups' announces are not counted.
    announces_dropped,
    /// Control plane: announces of unknown peers ignored because the new-peer budget
    /// (`new_peer_rate`, `new_peer_rate_per_source`) was spent.
    announces_rate_limited,
    /// Control plane: dials to known but never-linked peers postponed by the new-peer budget.
    dials_rate_limited,
    /// Control plane: announce-only peers (never linked, not static) evicted from a full peer
    /// table to make room for a new peer.
    peers_evicted,
    /// Control plane: announces and completed handshakes refused because the peer table was
    /// full of linked or static peers.
    peer_table_full,
    /// Control plane: connections refused (accepted sockets closed at once, dials not
    /// started) because the connection table was full of links past their handshake.
    connections_refused,
    /// Control plane: inbound connections closed while still in their handshake to make
    /// room for a newer one (`max_pending_handshakes` or the connection table reached).
    handshakes_evicted,
    /// Identity records dropped: untrusted key, bad signature, or the identity book full.
    identity_records_dropped,
    /// Control plane: signed Membership records and Discovery frames whose signature verified.
    record_signatures_verified,
    /// Control plane: signed records refused as forgeries (the key is not the origin's, is no
    /// valid key, or the signature does not verify); each closed the link that carried it.
    bad_record_signatures,
    /// Control plane: signed records dropped because the trust policy does not admit the
    /// signer's key (not on the allowlist, or revoked).
    untrusted_record_signers,
    /// Control plane, identity mode: unsigned Membership records and Discovery frames refused
    /// (from a neighbour that signs, about an origin known to sign, or
    /// `require_signed_membership`).
    unsigned_records_refused,
    /// Control plane, identity mode: unsigned Membership records (a multimaster node's) not
    /// relayed to a neighbour that signs, which would refuse them.
    unsigned_records_withheld,
    /// Control plane: Membership records refused for listing more than
    /// `max_membership_neighbours` nodes, or (this node's id) for a version too far past the
    /// wall clock.
    membership_records_refused,
    /// Links attached to this shard.
    links_opened,
    /// Links closed for any reason.
    links_closed,
    /// Control plane: connections refused with Goodbye because they claimed the id of a peer
    /// whose link was established longer than the race window before they began (a late
    /// claim, not a dial race: it never displaces the live link).
    claims_refused,
    /// Dropped: a Data frame whose origin is known came on a link that does not lead toward
    /// it in the membership graph (the reverse-path check, `reverse_path_check`): a stranger
    /// forging another node's frames, or a redundant copy while the graph changes. Dropped
    /// before its id is remembered, so it spends nothing of the origin's.
    dropped_off_path,
    /// Dropped: a Data frame whose message id does not start with its `src`'s first 8 bytes
    /// (the v1 wire builds every id that way; another node's id under one's own `src`).
    dropped_foreign_msg_id,
    /// Data frames taken from a link not toward their origin because the origin's paths
    /// changed less than `reverse_path_settle` ago (other nodes may still judge by the old
    /// graph; see `reverse_path::PathTable`). Not a drop: the dedup cache drops a second copy.
    taken_while_settling,
    /// Copies of relayed broadcasts not sent: the neighbour is no farther from the origin
    /// than this node, so the reverse-path check would refuse it (`relay_pruning`; a
    /// neighbour without a record or a multimaster peer gets every copy, and while the
    /// origin's links settle only the origin, its neighbours and skips already in force are
    /// skipped).
    relay_copies_skipped,
    /// Control plane: neighbours this node stopped listing in its membership record because
    /// its link to them was declared slow, or was about to be (`budget::UNLIST_LEAD`; listed
    /// again once it catches up), so that relays send them the broadcasts this node drops
    /// for that link (`relay_pruning`).
    slow_links_unlisted,
    /// Dropped: a Discovery frame from a link whose control-plane work budget was spent
    /// (`link_work_per_sec`): the control plane paused that link's Discovery frames until the
    /// budget refills, and the shard drops them on arrival instead of handing each over.
    dropped_discovery_over_budget,
    /// Control plane, link cap (`max_links`): passive peers dialed because this node had
    /// fewer links than the cap (`shoal_proto::degree`).
    cap_fill_dials,
    /// Control plane, link cap: passive peers outside this node's component dialed whatever
    /// the degree, to heal a partition or take in an isolated node.
    cap_heal_dials,
    /// Control plane, link cap: inbound links refused (Goodbye) at the cap plus slack, from
    /// peers already in this node's component.
    cap_links_refused,
    /// Control plane, link cap: links closed (Goodbye) above the cap plus slack, each one
    /// whose removal kept every member reachable.
    cap_links_shed,
    /// Control plane, link cap: links that ended within a second of coming up (a dial the
    /// peer refused, or a flapping link); their peers are held off longer.
    cap_dials_refused,
}

/// Raises a high-water mark of the calling executor's own set to `v`.
pub fn raise(c: &AtomicU64, v: u64) {
    if v > c.load(Relaxed) {
        c.store(v, Relaxed);
    }
}

/// Adds one to a counter of the calling executor's own set.
pub fn inc(c: &AtomicU64) {
    add(c, 1);
}

/// Adds `n` to a counter of the calling executor's own set. Each set has one writer (see the
/// module doc), so a plain load and store is exact and spares the message path a locked
/// read-modify-write per counter; readers on other threads see every value whole.
pub fn add(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

/// [`add`]s `n` dropped frames to a node counter and, for a topic's samples, to the topic's
/// counter of the same cause.
pub fn add_dropped(node: &AtomicU64, topic: Option<&AtomicU64>, n: u64) {
    add(node, n);
    if let Some(t) = topic {
        add(t, n);
    }
}

/// One executor's share of a topic's counters (see [`TopicCounters`]).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct TopicCounterSet {
    /// Samples this node's writers on the topic wrote (accepted by the origin shard).
    pub written: AtomicU64,
    /// Samples handed to this node's readers on the topic, one per reader.
    pub delivered: AtomicU64,
    /// Sample copies queued on links toward other nodes (one per link).
    pub forwarded: AtomicU64,
    /// Dropped: a sample whose sequence number was seen before (a copy over a second path
    /// while routes changed).
    pub dropped_duplicate: AtomicU64,
    /// Samples never received: gaps in a writer's sequence numbers (best-effort loss upstream).
    pub missed: AtomicU64,
    /// Dropped: a link's queue toward a reader's node was full (or the ring to its shard).
    pub dropped_queue_full: AtomicU64,
    /// Dropped: the link toward a reader's node went away (or a route table still named a
    /// link this shard had uninstalled).
    pub dropped_no_route: AtomicU64,
    /// Dropped: a sample this node's writer wrote under the Block policy for a link declared
    /// slow, which no one waits for (the node's `dropped_slow_link`, for this topic).
    pub dropped_slow_link: AtomicU64,
    /// Dropped: samples of the topic that came on a link their writer's samples do not come
    /// from (the node's `dropped_wrong_link`, for this topic).
    pub dropped_wrong_link: AtomicU64,
    /// Reliable: samples this node's writers on the topic resent (repairs, and history
    /// handed to late joiners).
    pub repaired: AtomicU64,
    /// Reliable: samples this node's reliable readers on the topic will never get (the
    /// writer said so; each range also raised a `SamplesLost` event naming the writer).
    pub lost: AtomicU64,
}

/// A snapshot of a topic's counters, summed over the executors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicStats {
    /// See [`TopicCounterSet::written`].
    pub written: u64,
    /// See [`TopicCounterSet::delivered`].
    pub delivered: u64,
    /// See [`TopicCounterSet::forwarded`].
    pub forwarded: u64,
    /// See [`TopicCounterSet::dropped_duplicate`].
    pub dropped_duplicate: u64,
    /// See [`TopicCounterSet::missed`].
    pub missed: u64,
    /// See [`TopicCounterSet::dropped_queue_full`].
    pub dropped_queue_full: u64,
    /// See [`TopicCounterSet::dropped_no_route`].
    pub dropped_no_route: u64,
    /// See [`TopicCounterSet::dropped_slow_link`].
    pub dropped_slow_link: u64,
    /// See [`TopicCounterSet::dropped_wrong_link`].
    pub dropped_wrong_link: u64,
    /// See [`TopicCounterSet::repaired`].
    pub repaired: u64,
    /// See [`TopicCounterSet::lost`].
    pub lost: u64,
}

/// The counters of one topic on one node: one [`TopicCounterSet`] per data shard, each
/// written only by its shard (the module's one-writer rule), summed by
/// [`snapshot`](Self::snapshot).
#[derive(Debug)]
pub struct TopicCounters {
    sets: Box<[TopicCounterSet]>,
}

impl Default for TopicCounters {
    /// One set (a single-shard node).
    fn default() -> Self {
        TopicCounters::new(1)
    }
}

impl TopicCounters {
    /// Counters for a node of `shards` data shards.
    pub fn new(shards: usize) -> TopicCounters {
        TopicCounters {
            sets: (0..shards.max(1))
                .map(|_| TopicCounterSet::default())
                .collect(),
        }
    }

    /// Shard `idx`'s set (only that shard writes it).
    #[inline]
    pub fn shard(&self, idx: usize) -> &TopicCounterSet {
        &self.sets[idx % self.sets.len()]
    }

    /// The sum over every shard.
    pub fn snapshot(&self) -> TopicStats {
        let mut t = TopicStats::default();
        for s in self.sets.iter() {
            t.written += s.written.load(Relaxed);
            t.delivered += s.delivered.load(Relaxed);
            t.forwarded += s.forwarded.load(Relaxed);
            t.dropped_duplicate += s.dropped_duplicate.load(Relaxed);
            t.missed += s.missed.load(Relaxed);
            t.dropped_queue_full += s.dropped_queue_full.load(Relaxed);
            t.dropped_no_route += s.dropped_no_route.load(Relaxed);
            t.dropped_slow_link += s.dropped_slow_link.load(Relaxed);
            t.dropped_wrong_link += s.dropped_wrong_link.load(Relaxed);
            t.repaired += s.repaired.load(Relaxed);
            t.lost += s.lost.load(Relaxed);
        }
        t
    }
}

/// Counters of a whole node: per data shard, the control plane, and their sum.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MeshStats {
    /// Everything summed (peak queued bytes: the maximum).
    pub total: ShardStats,
    /// One entry per data shard, in shard order.
    pub shards: Vec<ShardStats>,
    /// The control plane's counters: handshake-time malformed input, control events, and
    /// what it refused or evicted from strangers (`announces_dropped`,
    /// `announces_rate_limited`, `dials_rate_limited`, `peers_evicted`, `peer_table_full`,
    /// `connections_refused`, `handshakes_evicted`; zero in the shards' sets).
    pub control: ShardStats,
    /// Messages lost because a `Publisher` was dropped on an executor thread with
    /// a batch the ingress had no room for (or after the node stopped), or because its async
    /// `flush` was cancelled while it waited for room.
    pub unflushed_discarded: u64,
    /// Shard tasks (`Mesh::spawn_on_shard`) that panicked; each was contained and logged.
    pub shard_task_panics: u64,
    /// Time shard tasks spent running (in their polls), µs: what they took from their shard.
    pub shard_task_busy_us: u64,
    /// Shard-task polls that held their shard for 1 ms or more (the links it serves waited
    /// that long): a task hogging its shard shows here.
    pub shard_task_long_polls: u64,
}

impl MeshStats {
    /// Sums the control plane's set (the last) and the shards' sets (each a `Counters`, or a
    /// shared `Arc<Counters>`).
    pub fn collect<C: std::borrow::Borrow<Counters>>(counters: &[C]) -> MeshStats {
        let (shards, control) = counters.split_at(counters.len() - 1);
        let shards: Vec<ShardStats> = shards.iter().map(|c| c.borrow().snapshot()).collect();
        let control = control[0].borrow().snapshot();
        let mut total = ShardStats::default();
        for s in shards.iter().chain(std::iter::once(&control)) {
            total.accumulate(s);
        }
        MeshStats {
            total,
            shards,
            control,
            unflushed_discarded: 0,
            shard_task_panics: 0,
            shard_task_busy_us: 0,
            shard_task_long_polls: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_list_every_field_with_its_doc() {
        let s = ShardStats {
            originated: 3,
            links_closed: 9,
            peak_queued_bytes: 77,
            ..ShardStats::default()
        };
        let c = s.counters();
        assert_eq!(
            c.first().map(|c| (c.name, c.value)),
            Some(("originated", 3))
        );
        assert!(c.iter().any(|c| c.name == "links_closed" && c.value == 9));
        assert!(c.iter().all(|c| c.name != "peak_queued_bytes"));
        assert!(c.iter().all(|c| !c.doc.trim().is_empty()), "{c:?}");
        assert!(
            c[0].doc.contains("Messages the application handed"),
            "{:?}",
            c[0]
        );
        let mut names: Vec<_> = c.iter().map(|c| c.name).collect();
        names.dedup();
        assert_eq!(names.len(), c.len());
    }
}
