//! What a run reports: the summary printed for people and serialised with `--json`.

use crate::gaps::LossTotals;
use crate::latency_hist::{Latency, Percentiles};
use crate::rss::Memory;
use crate::usage::Usage;
use shoal_mesh::ShardStats;

/// Messages a node did not deliver nor send on, by cause (sum over the nodes of a run),
/// plus the backpressure waits that are not losses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Drops {
    /// Copies of a message already seen (normal in a mesh with cycles: flooding sends more
    /// than one copy, the second is dropped here).
    pub duplicate: u64,
    /// Targeted messages out of hops.
    pub ttl: u64,
    /// No link to send on.
    pub no_route: u64,
    /// A link's outbound queue was full (relayed copies under Block, any under DropNewest).
    pub queue_full: u64,
    /// Copies older than anything the dedup cache still remembered for their id stream.
    pub too_old: u64,
    /// Originated for a link declared slow under Block (no one waits for it).
    pub slow_link: u64,
    /// Still queued on (or being written to) a link when it closed, or sent by its peer on
    /// a link the node was closing (`dropped_link_closed` + `dropped_link_closing`).
    pub link_closed: u64,
    /// Held by a link's kernel, not acknowledged by its peer, when the link closed
    /// (`unacked_link_closed`; an upper bound).
    pub unacked_link_closed: u64,
    /// Control events lost on a full event queue.
    pub event_queue_full: u64,
    /// Links closed on undecodable input.
    pub malformed_frames: u64,
    /// Links closed on oversize frames.
    pub oversize_frames: u64,
    /// Links closed because the peer stayed blocked (Disconnect policy).
    pub slow_peer_disconnects: u64,
    /// Times delivery waited for event-queue room (backpressure, not loss).
    pub event_queue_waits: u64,
    /// Copies refused by the reverse-path check (a link not toward their origin): with the
    /// check on, the redundant copies a flood sends arrive here rather than as duplicates.
    pub off_path: u64,
    /// Off-path copies taken while their origin's paths settled (not a drop).
    pub taken_while_settling: u64,
    /// Relayed copies not sent to a neighbour no farther from the origin (`relay_pruning`;
    /// not a drop: the neighbour gets the message another way).
    pub relay_copies_skipped: u64,
}

impl Drops {
    /// Adds one node's totals.
    pub fn add(&mut self, s: &ShardStats) {
        self.duplicate += s.dropped_duplicate;
        self.ttl += s.dropped_ttl;
        self.no_route += s.dropped_no_route;
        self.queue_full += s.dropped_queue_full;
        self.too_old += s.dropped_too_old;
        self.slow_link += s.dropped_slow_link;
        self.link_closed += s.dropped_link_closed + s.dropped_link_closing;
        self.unacked_link_closed += s.unacked_link_closed;
        self.event_queue_full += s.dropped_event_queue_full;
        self.malformed_frames += s.malformed_frames;
        self.oversize_frames += s.oversize_frames;
        self.slow_peer_disconnects += s.slow_peer_disconnects;
        self.event_queue_waits += s.event_queue_waits;
        self.off_path += s.dropped_off_path;
        self.taken_while_settling += s.taken_while_settling;
        self.relay_copies_skipped += s.relay_copies_skipped;
    }

    fn line(&self) -> String {
        format!(
            "duplicate {} | too_old {} | ttl {} | no_route {} | queue_full {} | slow_link {} | \
             link_closed {} | unacked_link_closed {} | event_queue_full {} | malformed {} | oversize {} | slow_peer {} \
             | off_path {} (backpressure waits: {}; taken while settling: {}; relay copies \
             skipped: {})",
            self.duplicate,
            self.too_old,
            self.ttl,
            self.no_route,
            self.queue_full,
            self.slow_link,
            self.link_closed,
            self.unacked_link_closed,
            self.event_queue_full,
            self.malformed_frames,
            self.oversize_frames,
            self.slow_peer_disconnects,
            self.off_path,
            self.event_queue_waits,
            self.taken_while_settling,
            self.relay_copies_skipped
        )
    }
}

/// One node of an in-process mesh, as the summary lists it.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct NodeInfo {
    /// Index in the run (node 0 publishes).
    pub index: usize,
    /// Node id.
    pub id: String,
    /// TCP listen port.
    pub port: u16,
    /// Indices of the nodes it has a link with.
    pub linked_to: Vec<usize>,
}

/// The result of one throughput run (demo, pub, sub, relay, one bench leg).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Summary {
    /// `demo`, `pub`, `sub`, `relay` or `bench`.
    pub mode: String,
    /// `shoal` or `raw-tcp`.
    pub transport: String,
    /// Nodes (or raw endpoints) in this process.
    pub nodes: usize,
    /// Established links (each counted once).
    pub links: usize,
    /// The in-process nodes and their links (empty for single-node roles and raw TCP).
    pub topology: Vec<NodeInfo>,
    /// The record suites of this process's nodes' links, each named once, sorted:
    /// `aes-256-gcm`, `chacha20-poly1305`, or `plaintext` (empty for raw TCP).
    pub record_suites: Vec<String>,
    /// Secured runs: records this process's nodes sealed, and the bytes they wrote to links
    /// (records and their headers and tags): their ratio is the mean record size.
    pub records_sealed: u64,
    /// Bytes this process's nodes wrote to links.
    pub bytes_written: u64,
    /// Payload bytes per message (the smallest, when sizes vary).
    pub payload_bytes: usize,
    /// Largest payload when sizes vary (else equal to `payload_bytes`).
    pub payload_bytes_max: usize,
    /// Bytes per message on the wire (58-byte Data header + payload).
    pub wire_bytes: usize,
    /// Measured window, seconds (after warm-up).
    pub window_s: f64,
    /// Data messages published by this process.
    pub sent: u64,
    /// Distinct data messages received by this process's subscribers (sum over them).
    pub delivered: u64,
    /// Messages missing at the subscribers (gaps, and tail loss after the end marker).
    pub lost: u64,
    /// Frames this process's nodes read from links (relay: what it forwarded came in here).
    pub frames_in: u64,
    /// Data frames this process's nodes queued on links (originated or relayed).
    pub frames_out: u64,
    /// Publish calls refused (no route, stopped, too large).
    pub publish_errors: u64,
    /// Publishing rate in the window, messages/s.
    pub sent_msgs_per_s: f64,
    /// Delivery rate in the window, messages/s (sum over subscribers).
    pub msgs_per_s: f64,
    /// Delivered payload, MB/s (10^6 bytes).
    pub mb_per_s: f64,
    /// Loss details.
    pub loss: LossTotals,
    /// One-way latency of the messages received in the window.
    pub latency: Percentiles,
    /// Drops by cause (Shoal only).
    pub drops: Option<Drops>,
    /// CPU and memory of the whole process.
    pub usage: Usage,
    /// Resident memory sampled over the run (process-wide: every node in this process),
    /// with the queue bound it is compared to.
    pub memory: Option<Memory>,
    /// Topic runs: per topic, per writer, the nodes' topic counters, bytes per sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<crate::topic_report::SampleReport>,
    /// The latency histogram behind `latency` (for `.hgrm` files and plots).
    #[serde(skip)]
    pub histogram: Latency,
}

impl Summary {
    /// Bytes written per record sealed, KiB (0 without records).
    pub fn mean_record_kib(&self) -> f64 {
        if self.records_sealed == 0 {
            return 0.0;
        }
        self.bytes_written as f64 / self.records_sealed as f64 / 1024.0
    }

    /// Prints [`Summary::text`].
    pub fn print(&self) {
        print!("{}", self.text());
    }

    /// The human-readable summary, one line per topic.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        // Writing to a String cannot fail: the results are ignored.
        let size = if self.payload_bytes_max > self.payload_bytes {
            format!(
                "{}-{} B payload",
                self.payload_bytes, self.payload_bytes_max
            )
        } else {
            format!("{} B payload", self.payload_bytes)
        };
        let _ = writeln!(
            out,
            "== {} over {}: {} node(s), {} link(s), {size} (+{} B frame header on the wire)",
            self.mode,
            self.transport,
            self.nodes,
            self.links,
            self.wire_bytes - self.payload_bytes
        );
        let _ = writeln!(
            out,
            "   window {:.2} s | sent {} ({:.0} msg/s) | delivered {} ({:.0} msg/s, {:.2} MB/s)",
            self.window_s,
            self.sent,
            self.sent_msgs_per_s,
            self.delivered,
            self.msgs_per_s,
            self.mb_per_s
        );
        if !self.record_suites.is_empty() {
            let _ = write!(out, "   records: {}", self.record_suites.join(", "));
            if self.records_sealed > 0 {
                let _ = write!(
                    out,
                    " | {} sealed, {:.1} KiB each on average",
                    self.records_sealed,
                    self.mean_record_kib()
                );
            }
            let _ = writeln!(out);
        }
        for n in &self.topology {
            let role = if n.index == 0 {
                "publisher"
            } else {
                "subscriber"
            };
            let _ = writeln!(
                out,
                "   node {} ({role}) id {} port {} linked to {:?}",
                n.index, n.id, n.port, n.linked_to
            );
        }
        if self.mode == "relay" {
            let _ = writeln!(
                out,
                "   relayed: frames in {} | data frames queued out {} ({:.0} frames/s in)",
                self.frames_in,
                self.frames_out,
                self.frames_in as f64 / self.window_s.max(1e-9)
            );
        }
        let l = &self.loss;
        let _ = writeln!(
            out,
            "   loss: lost {} | gaps {} | duplicates {} | late (reordered) {} | too_old {} | publishers {} | end markers received {} | publish errors {}",
            self.lost,
            l.gaps,
            l.duplicates,
            l.late,
            l.too_old,
            l.publishers,
            l.ended,
            self.publish_errors
        );
        if l.untracked > 0 {
            let _ = writeln!(
                out,
                "   untracked: {} messages of publishers beyond the {} tracked",
                l.untracked,
                crate::gaps::MAX_PUBLISHERS
            );
        }
        let p = &self.latency;
        if p.count > 0 {
            let _ = writeln!(
            out,
                "   latency µs: p50 {:.1} | p90 {:.1} | p99 {:.1} | p99.9 {:.1} | p99.99 {:.1} | max {:.1} ({} samples)",
                p.p50_us, p.p90_us, p.p99_us, p.p999_us, p.p9999_us, p.max_us, p.count
            );
        }
        if let Some(d) = &self.drops {
            let _ = writeln!(out, "   drops: {}", d.line());
        }
        if let Some(t) = &self.samples {
            out.push_str(&t.text());
        }
        let u = &self.usage;
        let _ = writeln!(
            out,
            "   cpu user {:.2} s | sys {:.2} s | peak rss {} KiB",
            u.cpu_user_s, u.cpu_sys_s, u.peak_rss_kib
        );
        if let Some(m) = &self.memory {
            let _ = writeln!(out, "   {}", m.line());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 15 item 14: arrivals too old to classify were left out of the text summary.
    #[test]
    fn the_text_summary_names_every_loss_counter() {
        let s = Summary {
            mode: "sub".into(),
            transport: "shoal".into(),
            wire_bytes: 122,
            payload_bytes: 64,
            loss: LossTotals {
                too_old: 1_000_003,
                late: 5,
                duplicates: 6,
                gaps: 7,
                ..LossTotals::default()
            },
            ..Summary::default()
        };
        let text = s.text();
        let loss = text
            .lines()
            .find(|l| l.contains("loss:"))
            .expect("loss line");
        for want in [
            "too_old 1000003",
            "late (reordered) 5",
            "duplicates 6",
            "gaps 7",
        ] {
            assert!(loss.contains(want), "{want:?} missing from {loss:?}");
        }
    }
}
