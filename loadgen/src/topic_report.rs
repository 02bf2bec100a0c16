//! What a topic run reports: per topic (what this process's readers received, what the nodes'
//! topic counters say), per (reader, writer), and the wire accounting.
//!
//! **Owns:** the serialisable report of a topic run and its text. **Must not touch:** the
//! counters themselves (read through `Mesh::topics()` and `Mesh::stats()`).

use crate::topics::{ReaderState, WriterCount, MAX_WRITERS};
use shoal_mesh::topics::{guid_hex, TopicStats};
use shoal_mesh::Mesh;

/// The topic counters of one topic, as in [`TopicStats`], serialisable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TopicCounts {
    /// Samples written by local writers.
    pub written: u64,
    /// Samples handed to local readers.
    pub delivered: u64,
    /// Samples sent on to other nodes (one per link).
    pub forwarded: u64,
    /// Copies dropped as duplicates.
    pub dropped_duplicate: u64,
    /// Samples missed upstream (sequence gaps seen by the node).
    pub missed: u64,
    /// Dropped on a full queue.
    pub dropped_queue_full: u64,
    /// Dropped for want of a route.
    pub dropped_no_route: u64,
    /// Dropped for a link declared slow (Block policy).
    pub dropped_slow_link: u64,
    /// Dropped as from a link the writer's samples do not come from.
    pub dropped_wrong_link: u64,
}

impl TopicCounts {
    /// The counters of `s`.
    pub fn of(s: &TopicStats) -> TopicCounts {
        TopicCounts {
            written: s.written,
            delivered: s.delivered,
            forwarded: s.forwarded,
            dropped_duplicate: s.dropped_duplicate,
            missed: s.missed,
            dropped_queue_full: s.dropped_queue_full,
            dropped_no_route: s.dropped_no_route,
            dropped_slow_link: s.dropped_slow_link,
            dropped_wrong_link: s.dropped_wrong_link,
        }
    }

    /// Adds `o`.
    pub fn add(&mut self, o: &TopicCounts) {
        self.written += o.written;
        self.delivered += o.delivered;
        self.forwarded += o.forwarded;
        self.dropped_duplicate += o.dropped_duplicate;
        self.missed += o.missed;
        self.dropped_queue_full += o.dropped_queue_full;
        self.dropped_no_route += o.dropped_no_route;
        self.dropped_slow_link += o.dropped_slow_link;
        self.dropped_wrong_link += o.dropped_wrong_link;
    }

    /// `self - earlier`, counter by counter (saturating: a restarted counter gives 0).
    pub fn since(&self, earlier: &TopicCounts) -> TopicCounts {
        TopicCounts {
            written: self.written.saturating_sub(earlier.written),
            delivered: self.delivered.saturating_sub(earlier.delivered),
            forwarded: self.forwarded.saturating_sub(earlier.forwarded),
            dropped_duplicate: self
                .dropped_duplicate
                .saturating_sub(earlier.dropped_duplicate),
            missed: self.missed.saturating_sub(earlier.missed),
            dropped_queue_full: self
                .dropped_queue_full
                .saturating_sub(earlier.dropped_queue_full),
            dropped_no_route: self
                .dropped_no_route
                .saturating_sub(earlier.dropped_no_route),
            dropped_slow_link: self
                .dropped_slow_link
                .saturating_sub(earlier.dropped_slow_link),
            dropped_wrong_link: self
                .dropped_wrong_link
                .saturating_sub(earlier.dropped_wrong_link),
        }
    }
}

/// The counters of every topic, summed over `meshes`, sorted by topic name.
pub fn topic_counts(meshes: &[&Mesh]) -> Vec<(String, TopicCounts)> {
    let mut by: Vec<(String, TopicCounts)> = Vec::new();
    for m in meshes {
        for t in m.topics().topics {
            let c = TopicCounts::of(&t.stats);
            match by.iter_mut().find(|(n, _)| *n == t.name) {
                Some((_, sum)) => sum.add(&c),
                None => by.push((t.name, c)),
            }
        }
    }
    by.sort_by(|a, b| a.0.cmp(&b.0));
    by
}

/// `after - before` per topic (a topic missing before counts from zero).
pub fn counts_since(
    after: &[(String, TopicCounts)],
    before: &[(String, TopicCounts)],
) -> Vec<(String, TopicCounts)> {
    after
        .iter()
        .map(|(name, a)| {
            let b = before
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, c)| *c)
                .unwrap_or_default();
            (name.clone(), a.since(&b))
        })
        .collect()
}

/// One writer's row in a report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WriterRow {
    /// The reader's topic.
    pub topic: String,
    /// The reader's GUID (hex).
    pub reader: String,
    /// The writer's GUID (hex).
    pub writer: String,
    /// What the reader saw of it.
    #[serde(flatten)]
    pub count: WriterCount,
}

/// One topic's row in a report: what the readers of this process received and what the
/// nodes' counters say.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TopicRow {
    /// The topic.
    pub topic: String,
    /// Samples the readers received in the run (every writer).
    pub samples: u64,
    /// Samples per second the readers received in their measured window.
    pub samples_per_s: f64,
    /// Sequence gaps, skipped numbers and reorders over every writer.
    pub gaps: u64,
    /// Sequence numbers skipped.
    pub skipped: u64,
    /// Samples out of order (or repeated).
    pub reorders: u64,
    /// The nodes' counters of the topic over the run.
    pub node_counts: TopicCounts,
    /// `node_counts.delivered` per second of the time the counters cover.
    pub delivered_per_s: f64,
}

/// What a topic run adds to its [`Summary`](crate::report::Summary).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SampleReport {
    /// Per topic.
    pub topics: Vec<TopicRow>,
    /// Per (reader, writer).
    pub writers: Vec<WriterRow>,
    /// Samples for readers this process did not open (0 unless something is wrong).
    pub foreign_samples: u64,
    /// Samples of writers beyond the tracked ones.
    pub untracked_samples: u64,
    /// Samples the run's nodes dropped for a writer they had no route for (node counter
    /// `dropped_unrouted_samples`, over the run).
    pub unrouted_samples: u64,
    /// Bytes the run's nodes wrote to links, over the run.
    pub bytes_out: u64,
    /// `bytes_out` per sample delivered to a reader (every reader counted).
    pub bytes_out_per_sample: f64,
    /// Bytes the reader nodes wrote (acknowledgements, link heartbeats) per sample
    /// delivered.
    pub reader_bytes_out_per_sample: f64,
}

impl SampleReport {
    /// The report of `readers`, with the nodes' counter deltas `counts` over `window_s`
    /// seconds (the time those deltas cover).
    pub fn of(
        readers: &[ReaderState],
        counts: &[(String, TopicCounts)],
        window_s: f64,
        foreign: u64,
    ) -> SampleReport {
        let mut rep = SampleReport {
            foreign_samples: foreign,
            ..SampleReport::default()
        };
        let mut names: Vec<&str> = readers.iter().map(|r| r.topic.as_str()).collect();
        names.extend(counts.iter().map(|(n, _)| n.as_str()));
        names.sort_unstable();
        names.dedup();
        for name in names {
            let mut row = TopicRow {
                topic: name.to_owned(),
                samples: 0,
                samples_per_s: 0.0,
                gaps: 0,
                skipped: 0,
                reorders: 0,
                node_counts: counts
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, c)| *c)
                    .unwrap_or_default(),
                delivered_per_s: 0.0,
            };
            if window_s > 0.0 {
                row.delivered_per_s = row.node_counts.delivered as f64 / window_s;
            }
            for r in readers.iter().filter(|r| r.topic == name) {
                let t = r.seqs.total();
                row.samples += t.samples;
                row.gaps += t.gaps;
                row.skipped += t.skipped;
                row.reorders += t.reorders;
                let (n, _, secs) = r.recv.window();
                if secs > 0.0 {
                    row.samples_per_s += n as f64 / secs;
                }
            }
            rep.topics.push(row);
        }
        for r in readers {
            rep.untracked_samples += r.seqs.untracked;
            for (w, count) in r.seqs.writers() {
                rep.writers.push(WriterRow {
                    topic: r.topic.clone(),
                    reader: guid_hex(&r.guid),
                    writer: guid_hex(&w),
                    count,
                });
            }
        }
        rep
    }

    /// Sets the wire accounting: `bytes_out` over the samples the readers received.
    pub fn with_bytes_out(mut self, bytes_out: u64) -> SampleReport {
        self.bytes_out = bytes_out;
        let delivered: u64 = self.topics.iter().map(|t| t.samples).sum();
        if delivered > 0 {
            self.bytes_out_per_sample = bytes_out as f64 / delivered as f64;
        }
        self
    }

    /// Sets the bytes the reader nodes wrote over the run.
    pub fn with_reader_bytes_out(mut self, bytes: u64) -> SampleReport {
        let delivered: u64 = self.topics.iter().map(|t| t.samples).sum();
        if delivered > 0 {
            self.reader_bytes_out_per_sample = bytes as f64 / delivered as f64;
        }
        self
    }

    /// Sets the nodes' unrouted-sample drops over the run.
    pub fn with_unrouted(mut self, unrouted: u64) -> SampleReport {
        self.unrouted_samples = unrouted;
        self
    }

    /// Human-readable lines (each starts with three spaces).
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        for t in &self.topics {
            let c = &t.node_counts;
            let _ = writeln!(
                out,
                "   topic {}: received {} samples ({:.0}/s) | gaps {} (skipped {}) | reorders {} | \
                 nodes: written {} delivered {} ({:.0}/s) forwarded {} missed {} dropped \
                 duplicate {} queue_full {} no_route {} slow_link {} wrong_link {}",
                t.topic,
                t.samples,
                t.samples_per_s,
                t.gaps,
                t.skipped,
                t.reorders,
                c.written,
                c.delivered,
                t.delivered_per_s,
                c.forwarded,
                c.missed,
                c.dropped_duplicate,
                c.dropped_queue_full,
                c.dropped_no_route,
                c.dropped_slow_link,
                c.dropped_wrong_link
            );
        }
        for w in &self.writers {
            let c = &w.count;
            let _ = writeln!(
                out,
                "   writer {} -> reader {} ({}): {} samples, seq {}..{} | gaps {} (skipped {}) | reorders {}",
                short(&w.writer),
                short(&w.reader),
                w.topic,
                c.samples,
                c.first_seq,
                c.last_seq,
                c.gaps,
                c.skipped,
                c.reorders
            );
        }
        if self.bytes_out_per_sample > 0.0 {
            let _ = writeln!(
                out,
                "   bytes on the wire: {} out over the run, {:.1} per delivered sample",
                self.bytes_out, self.bytes_out_per_sample
            );
        } else if self.bytes_out > 0 {
            let _ = writeln!(
                out,
                "   bytes on the wire: {} out over the run",
                self.bytes_out
            );
        }
        if self.foreign_samples + self.untracked_samples + self.unrouted_samples > 0 {
            let _ = writeln!(
                out,
                "   samples for unknown readers {} | of untracked writers (beyond {MAX_WRITERS}) {} \
                 | dropped by the nodes for want of a writer's route {}",
                self.foreign_samples, self.untracked_samples, self.unrouted_samples
            );
        }
        out
    }
}

/// A GUID's last 8 hex digits (its entity part), enough to tell endpoints apart in a line.
fn short(hex: &str) -> &str {
    &hex[hex.len().saturating_sub(8)..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_deltas_are_per_topic() {
        let c = |d: u64| TopicCounts {
            delivered: d,
            ..TopicCounts::default()
        };
        let before = vec![("a".to_owned(), c(5))];
        let after = vec![("a".to_owned(), c(12)), ("b".to_owned(), c(3))];
        let d = counts_since(&after, &before);
        assert_eq!(d[0].1.delivered, 7);
        assert_eq!(d[1].1.delivered, 3);
    }
}
