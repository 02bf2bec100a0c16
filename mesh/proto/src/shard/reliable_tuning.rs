//! The reliable topics' settings a shard needs, from `[topics]`, and the writer and reader
//! configurations built from them and a route's QoS.
//!
//! **Owns:** the conversion of settings and QoS into `crate::reliable` configurations.
//! **Must not touch:** what the states do with them (`crate::reliable`), routing
//! (`super::reliable`).

use crate::reliable::{HistoryKind, ReaderConfig, WriterConfig};
use crate::topics::{ReliableWriterSpec, TopicsConfig};
use std::time::Duration;

/// Samples per Repair frame at most.
const MAX_REPAIR_SAMPLES: u16 = 64;
/// Payload bytes per Repair frame at most.
const MAX_REPAIR_BYTES: usize = 64 << 10;

/// The reliability settings a shard needs (from `[topics]`).
#[derive(Debug, Clone)]
pub struct ReliableTuning {
    /// See [`TopicsConfig::heartbeat_period`].
    pub heartbeat_period: Duration,
    /// See [`TopicsConfig::ack_period`].
    pub ack_period: Duration,
    /// See [`TopicsConfig::ack_every`].
    pub ack_every: u32,
    /// See [`TopicsConfig::nack_delay`].
    pub nack_delay: Duration,
    /// See [`TopicsConfig::sync_retry`].
    pub sync_retry: Duration,
    /// See [`TopicsConfig::repair_budget`].
    pub repair_budget: u32,
    /// See [`TopicsConfig::repair_period`].
    pub repair_period: Duration,
    /// See [`TopicsConfig::nack_suppression`].
    pub nack_suppression: Duration,
    /// See [`TopicsConfig::max_history_samples`].
    pub max_history_samples: u32,
    /// See [`TopicsConfig::max_history_bytes`].
    pub max_history_bytes: usize,
    /// See [`TopicsConfig::max_reader_buffer_samples`].
    pub max_reader_buffer_samples: u32,
    /// See [`TopicsConfig::max_reader_buffer_bytes`].
    pub max_reader_buffer_bytes: usize,
    /// See [`TopicsConfig::ack_timeout`].
    pub ack_timeout: Duration,
}

impl ReliableTuning {
    /// The settings of `t`.
    pub fn of(t: &TopicsConfig) -> ReliableTuning {
        ReliableTuning {
            heartbeat_period: t.heartbeat_period,
            ack_period: t.ack_period,
            ack_every: t.ack_every,
            nack_delay: t.nack_delay,
            sync_retry: t.sync_retry,
            repair_budget: t.repair_budget,
            repair_period: t.repair_period,
            nack_suppression: t.nack_suppression,
            max_history_samples: t.max_history_samples,
            max_history_bytes: t.max_history_bytes,
            max_reader_buffer_samples: t.max_reader_buffer_samples,
            max_reader_buffer_bytes: t.max_reader_buffer_bytes,
            ack_timeout: t.ack_timeout,
        }
    }

    pub(super) fn writer(&self, s: &ReliableWriterSpec) -> WriterConfig {
        let cap = self.max_history_samples.max(1);
        WriterConfig {
            history: match s.keep_last {
                Some(depth) => HistoryKind::KeepLast {
                    depth: depth.clamp(1, cap),
                },
                None => HistoryKind::KeepAll,
            },
            max_samples: s.max_samples.unwrap_or(cap).clamp(1, cap),
            max_bytes: self.max_history_bytes,
            lifespan: s.lifespan,
            transient_local: s.transient_local,
            heartbeat_period: self.heartbeat_period,
            repair_budget: self.repair_budget,
            repair_period: self.repair_period,
            max_repair_samples: MAX_REPAIR_SAMPLES,
            max_repair_bytes: MAX_REPAIR_BYTES,
            nack_suppression: self.nack_suppression,
            ack_timeout: Some(self.ack_timeout),
        }
    }

    pub(super) fn reader(&self) -> ReaderConfig {
        ReaderConfig {
            max_buffered_samples: self.max_reader_buffer_samples,
            max_buffered_bytes: self.max_reader_buffer_bytes,
            ack_period: self.ack_period,
            ack_every: self.ack_every,
            nack_delay: self.nack_delay,
            sync_retry: self.sync_retry,
        }
    }
}

impl Default for ReliableTuning {
    fn default() -> Self {
        ReliableTuning::of(&TopicsConfig::default())
    }
}
