//! A node's counters ([`MeshStats`]) in the Prometheus / OpenMetrics text format, with
//! `prometheus-client`. No I/O: [`render`] returns the page, [`MeshCollector`] plugs a live
//! node into an application's own `prometheus_client` registry; serving it is the caller's
//! business (`shoal-loadgen --metrics ADDR` does it over HTTP).
//!
//! **Owns:** the Prometheus text rendering of the counters. **Must not touch:** serving it
//! (loadgen's `--metrics` does).
//!
//! Names follow the Prometheus conventions: prefix `shoal_`, counters end in `_total`, units
//! in the name (`shoal_link_read_bytes_total`). Every [`ShardStats`] counter is exported as
//! `shoal_<field>_total` with its doc comment as help text (so new counters appear without a
//! change here), labelled `shard="0"`, `shard="1"`, … and `shard="control"` for the control
//! plane; sum over `shard` for the node. The queue high-water mark is a gauge,
//! `shoal_peak_queued_bytes`, and the publisher's discarded messages are
//! `shoal_unflushed_discarded_total`.

use crate::node::{MeshStats, ShardStats};
use crate::Mesh;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use std::borrow::Cow;
use std::fmt;

/// The HTTP `Content-Type` of [`render`]'s page.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Prefix of every metric name.
pub const PREFIX: &str = "shoal";

/// Counters whose name says more than the field's: `(field, metric name, unit)`.
const RENAMED: &[(&str, &str, Option<Unit>)] = &[
    ("bytes_in", "link_read", Some(Unit::Bytes)),
    ("bytes_out", "link_written", Some(Unit::Bytes)),
];

/// Collects a live node's counters on every scrape of the registry it is registered with.
#[derive(Debug)]
pub struct MeshCollector {
    mesh: Mesh,
}

impl MeshCollector {
    /// A collector of `mesh`'s counters.
    pub fn new(mesh: Mesh) -> MeshCollector {
        MeshCollector { mesh }
    }
}

impl Collector for MeshCollector {
    fn encode(&self, encoder: DescriptorEncoder<'_>) -> fmt::Result {
        encode_stats(&self.mesh.stats(), encoder)
    }
}

/// One snapshot, for [`render`].
#[derive(Debug)]
struct Snapshot(MeshStats);

impl Collector for Snapshot {
    fn encode(&self, encoder: DescriptorEncoder<'_>) -> fmt::Result {
        encode_stats(&self.0, encoder)
    }
}

/// The text-format page of `stats` (names prefixed with [`PREFIX`]), ending in `# EOF`.
pub fn render(stats: &MeshStats) -> String {
    let mut registry = Registry::with_prefix(PREFIX);
    registry.register_collector(Box::new(Snapshot(stats.clone())));
    let mut out = String::new();
    // Writing to a String cannot fail, and every value here encodes.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// The shards of a node, labelled.
fn labelled(stats: &MeshStats) -> Vec<(String, &ShardStats)> {
    stats
        .shards
        .iter()
        .enumerate()
        .map(|(i, s)| (i.to_string(), s))
        .chain(std::iter::once(("control".to_string(), &stats.control)))
        .collect()
}

/// Markdown of a doc comment as one line of help text: links and code marks dropped.
fn help(doc: &str) -> String {
    let mut h = doc.replace("[`", "").replace("`]", "").replace('`', "");
    for path in ["super::", "crate::", "Self::"] {
        h = h.replace(path, "");
    }
    h.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Encodes `stats` as metric families (see the module docs for the names).
pub fn encode_stats(stats: &MeshStats, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
    let shards = labelled(stats);
    let Some((_, first)) = shards.first() else {
        return Ok(());
    };
    for (i, c) in first.counters().iter().enumerate() {
        let (name, unit) = RENAMED
            .iter()
            .find(|(field, _, _)| *field == c.name)
            .map(|(_, name, unit)| (*name, unit.clone()))
            .unwrap_or((c.name, None));
        let text = help(c.doc);
        let mut family = encoder.encode_descriptor(
            name,
            &text,
            unit.as_ref(),
            ConstCounter::new(0u64).metric_type(),
        )?;
        for (label, s) in &shards {
            let value = s.counters()[i].value;
            let labels = [("shard", Cow::Borrowed(label.as_str()))];
            ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
        }
    }
    let mut family = encoder.encode_descriptor(
        "peak_queued",
        "Highest number of bytes ever reserved in one link's outbound queue by this executor.",
        Some(&Unit::Bytes),
        ConstGauge::new(0i64).metric_type(),
    )?;
    for (label, s) in &shards {
        let labels = [("shard", Cow::Borrowed(label.as_str()))];
        let v = i64::try_from(s.peak_queued_bytes).unwrap_or(i64::MAX);
        ConstGauge::new(v).encode(family.encode_family(&labels)?)?;
    }
    let c = ConstCounter::new(stats.unflushed_discarded);
    c.encode(encoder.encode_descriptor(
        "unflushed_discarded",
        "Messages lost because a Publisher was dropped or cancelled with a batch the node could \
         not take.",
        None,
        c.metric_type(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn shard(originated: u64, bytes_in: u64, peak: u64) -> ShardStats {
        ShardStats {
            originated,
            bytes_in,
            dropped_duplicate: originated * 2,
            peak_queued_bytes: peak,
            ..ShardStats::default()
        }
    }

    /// `name{labels} value` lines of a page, parsed back.
    fn samples(page: &str) -> BTreeMap<String, u64> {
        page.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                let (k, v) = l.rsplit_once(' ').expect("name and value");
                (k.to_string(), v.parse().expect("integer value"))
            })
            .collect()
    }

    #[test]
    fn every_counter_renders_per_shard_with_conventional_names() {
        let stats = MeshStats {
            total: ShardStats::default(),
            shards: vec![shard(5, 1000, 64), shard(7, 2000, 128)],
            control: shard(0, 30, 0),
            unflushed_discarded: 4,
        };
        let page = render(&stats);
        assert!(page.ends_with("# EOF\n"), "{page}");
        let s = samples(&page);
        assert_eq!(s[r#"shoal_originated_total{shard="0"}"#], 5);
        assert_eq!(s[r#"shoal_originated_total{shard="1"}"#], 7);
        assert_eq!(s[r#"shoal_originated_total{shard="control"}"#], 0);
        assert_eq!(s[r#"shoal_dropped_duplicate_total{shard="1"}"#], 14);
        assert_eq!(s[r#"shoal_link_read_bytes_total{shard="1"}"#], 2000);
        assert_eq!(s[r#"shoal_link_read_bytes_total{shard="control"}"#], 30);
        assert_eq!(s[r#"shoal_peak_queued_bytes{shard="1"}"#], 128);
        assert_eq!(s["shoal_unflushed_discarded_total"], 4);
        // Every counter of the stats API is there, for every shard and the control plane.
        for c in ShardStats::default().counters() {
            let name = match c.name {
                "bytes_in" => "link_read_bytes",
                "bytes_out" => "link_written_bytes",
                n => n,
            };
            for shard in ["0", "1", "control"] {
                let key = format!("shoal_{name}_total{{shard=\"{shard}\"}}");
                assert!(s.contains_key(&key), "{key} missing from\n{page}");
            }
            assert!(
                page.contains(&format!("# TYPE shoal_{name} counter")),
                "{name}: {page}"
            );
        }
        assert!(
            page.contains("# UNIT shoal_link_read_bytes bytes"),
            "{page}"
        );
        // Help is the counter's doc comment without Markdown.
        let help = page
            .lines()
            .find(|l| l.starts_with("# HELP shoal_delivered "))
            .expect("help line");
        assert!(help.contains("Event::Message"), "{help}");
        assert!(!help.contains('`') && !help.contains('['), "{help}");
    }

    #[test]
    fn a_stopped_or_empty_node_still_renders() {
        let page = render(&MeshStats::default());
        let s = samples(&page);
        assert_eq!(s[r#"shoal_originated_total{shard="control"}"#], 0);
        assert!(page.ends_with("# EOF\n"));
    }
}
