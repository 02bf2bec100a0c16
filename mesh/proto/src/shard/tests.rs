//! Unit tests of the shard core.
