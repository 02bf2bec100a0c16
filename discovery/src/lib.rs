//! shoal-discovery: the discovery logic the control plane drives.
//!
//! The mesh's control core (`shoal_proto::topics`) feeds it the announcement records that
//! travel in Discovery frames, keeps one [`graph::DiscoveryGraph`] per node (every pair
//! matched, remote–remote included, so relays can route), builds its own records once with
//! [`announce::Announcer`], explains incompatible pairs with [`matching::explain`] and picks
//! dial addresses with [`locators::select_locators`].
//!
//! Owns what a participant knows about the mesh and how it decides who talks
//! to whom: participant and endpoint identities ([`types`]), every QoS policy
//! with its default and valid range ([`qos`]), writer/reader compatibility
//! and its explanation ([`matching`]), partition patterns ([`partition`],
//! matched by a compiled bit-parallel NFA), what an endpoint costs to hold
//! ([`footprint`]), and the discovery graph with bounded admission (table
//! capacities, per-participant quotas, a byte ceiling, capped leases),
//! matching and lease expiry ([`graph`]), the announcement record codec and announcer ([`record`],
//! [`announce`]) and address selection ([`locators`]).
//!
//! Must not touch: I/O, sockets, timers, threads, the async runtime or the
//! mesh. It is pure, deterministic logic: time comes in as a [`types::Time`]
//! value, nothing reads a clock, nothing iterates a hash map to produce
//! output. Its caller (the control plane) feeds it
//! announcements and acts on what it returns; none of it is meant to run on
//! the path that publishes a sample.
//!
//! # Costs
//!
//! Endpoints are indexed by topic, so inserting one costs O(endpoints of the
//! opposite kind on its topic + its new matches), and removing one costs
//! O(1 + its matches); expiring a participant costs O(its endpoints + their
//! matches). The seed's design paid O(E) per insertion and O(E + M) per
//! removal. See [`graph`] for how.
//!
//! Comparing one pair's partitions is linear in their size (one merge of the
//! sorted names, and |name| · ⌈states / 64⌉ word steps per pattern–name pair),
//! and an endpoint's partition names are capped at
//! [`graph::Capacities::endpoint_partition_bytes`], so no record can make one
//! pair expensive; every admission reports its work
//! ([`graph::MatchWork`]) so the caller can budget it per origin.
//!
//! # Memory
//!
//! Measured with `size_of` on x86-64 (kept honest by a unit test in
//! `graph/mod.rs` that fails if the structs grow past these numbers):
//!
//! * per endpoint: a 304-byte slot (its record with all policies inline),
//!   plus two hash-index entries (16 and 20 bytes + 1 control byte each),
//!   4 bytes in its topic's list and 4 in its participant's list — about
//!   355 bytes — plus the heap text of its topic, type and partition names,
//!   its locators (24 bytes each) and its prepared partition patterns (256
//!   bytes plus a few words per pattern state each). [`footprint`] turns this
//!   into the byte measure the per-participant and total quotas count;
//! * per match: two 8-byte back-linked halves (one in each endpoint's list)
//!   plus one 16-byte entry (+1 control byte) in the matched-pair set —
//!   about 33 bytes, up to ~2x that at low hash-table load;
//! * per topic: a 72-byte entry plus its name twice (entry and index key).

pub mod announce;
pub mod footprint;
mod glob;
pub mod graph;
mod kind;
pub mod locators;
pub mod matching;
pub mod partition;
pub mod qos;
pub mod record;
pub mod types;
