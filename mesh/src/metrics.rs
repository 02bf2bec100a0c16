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
//! `shoal_unflushed_discarded_total`, shard tasks' `shoal_shard_task_panics_total`,
//! `shoal_shard_task_busy_us_total` and `shoal_shard_task_long_polls_total`.
//!
//! Topics: each [`TopicStats`] counter is `shoal_topic_<field>_total`, labelled
//! `topic="<name>"` (`shoal_topic_written_total{topic="sensors/imu"}`,
//! `shoal_topic_dropped_queue_full_total`, ...), one series per topic this node knows
//! ([`render_with_topics`], and [`MeshCollector`] on every scrape). The topics control
//! plane's own counters (`DiscoveryStats`: Discovery frames in, refused off-path, over budget,
//! seq jumps held, cycles, ...) are `shoal_discovery_<field>_total`, without labels.
//!
//! Links: `shoal_link_suite{peer="<node id>",suite="aes-256-gcm"} 1`, one series per
//! established link, `suite` being its record suite (`aes-256-gcm`, `chacha20-poly1305`, or
//! `plaintext` in a plaintext mesh) ([`render_mesh`], and [`MeshCollector`] on every scrape);
//! count by `suite` for how many links each suite carries.

use crate::node::{LinkInfo, MeshStats, ShardStats};
use crate::topics::{TopicStats, TopicsSnapshot};
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
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        stats_into(&self.mesh.stats(), &mut encoder)?;
        topics_into(&self.mesh.topics(), &mut encoder)?;
        links_into(&self.mesh.links(), &mut encoder)
    }
}

/// One snapshot, for [`render`].
#[derive(Debug)]
struct Snapshot(MeshStats, Option<TopicsSnapshot>, Option<Vec<LinkInfo>>);

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        stats_into(&self.0, &mut encoder)?;
        if let Some(t) = &self.1 {
            topics_into(t, &mut encoder)?;
        }
        match &self.2 {
            Some(l) => links_into(l, &mut encoder),
            None => Ok(()),
        }
    }
}

/// The text-format page of `stats` (names prefixed with [`PREFIX`]), ending in `# EOF`.
pub fn render(stats: &MeshStats) -> String {
    page(Snapshot(stats.clone(), None, None))
}

/// [`render`] plus the per-topic counters of `topics` (from [`Mesh::topics`]).
pub fn render_with_topics(stats: &MeshStats, topics: &TopicsSnapshot) -> String {
    page(Snapshot(stats.clone(), Some(topics.clone()), None))
}

/// Everything [`MeshCollector`] exports for `mesh`, now: its counters, its topics and its
/// links' record suites.
pub fn render_mesh(mesh: &Mesh) -> String {
    page(Snapshot(
        mesh.stats(),
        Some(mesh.topics()),
        Some(mesh.links()),
    ))
}

/// Encodes `shoal_link_suite` for `links` (from [`Mesh::links`]; see the module docs).
pub fn encode_links(links: &[LinkInfo], mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
    links_into(links, &mut encoder)
}

fn links_into(links: &[LinkInfo], encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
    let mut family = encoder.encode_descriptor(
        "link_suite",
        "The record suite of each established link (1 per link; suite aes-256-gcm, \
         chacha20-poly1305, or plaintext in a plaintext mesh).",
        None,
        ConstGauge::new(0i64).metric_type(),
    )?;
    for l in links {
        let peer = l.peer.to_string();
        let suite = l.suite.map_or("plaintext", |s| s.name());
        let labels = [
            ("peer", Cow::Borrowed(peer.as_str())),
            ("suite", Cow::Borrowed(suite)),
        ];
        ConstGauge::new(1i64).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

fn page(snap: Snapshot) -> String {
    let mut registry = Registry::with_prefix(PREFIX);
    registry.register_collector(Box::new(snap));
    let mut out = String::new();
    // Writing to a String cannot fail, and every value here encodes.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// Every [`TopicStats`] counter with its metric name and help text. The destructuring
/// fails to compile when a counter is added without a line here.
fn topic_counters(t: &TopicStats) -> [(&'static str, &'static str, u64); 11] {
    let TopicStats {
        written,
        delivered,
        forwarded,
        dropped_duplicate,
        missed,
        dropped_queue_full,
        dropped_no_route,
        dropped_slow_link,
        dropped_wrong_link,
        repaired,
        lost,
    } = *t;
    [
        (
            "topic_written",
            "Samples this node's writers on the topic wrote (accepted by the origin shard).",
            written,
        ),
        (
            "topic_delivered",
            "Samples handed to this node's readers on the topic, one per reader.",
            delivered,
        ),
        (
            "topic_forwarded",
            "Sample copies queued on links toward other nodes (one per link).",
            forwarded,
        ),
        (
            "topic_dropped_duplicate",
            "Samples dropped because their sequence number was seen before.",
            dropped_duplicate,
        ),
        (
            "topic_missed",
            "Samples never received: gaps in a writer's sequence numbers.",
            missed,
        ),
        (
            "topic_dropped_queue_full",
            "Samples dropped because a link's queue toward a reader's node was full.",
            dropped_queue_full,
        ),
        (
            "topic_dropped_no_route",
            "Samples dropped because the link toward a reader's node went away.",
            dropped_no_route,
        ),
        (
            "topic_dropped_slow_link",
            "Samples dropped because the link toward a reader's node was declared slow (Block policy).",
            dropped_slow_link,
        ),
        (
            "topic_dropped_wrong_link",
            "Samples dropped because they came on a link their writer's samples do not come from.",
            dropped_wrong_link,
        ),
        (
            "topic_repaired",
            "Samples this node's reliable writers on the topic resent.",
            repaired,
        ),
        (
            "topic_lost",
            "Samples this node's reliable readers on the topic will never get (SamplesLost).",
            lost,
        ),
    ]
}

/// A label value in the text format's escaping (`\\`, `\"`, `\n`): topic names are any
/// text, and `prometheus-client` 0.24 writes label values as given, so a quote in a topic
/// name would otherwise break the page.
fn escape_label(v: &str) -> Cow<'_, str> {
    if !v.contains(['\\', '"', '\n']) {
        return Cow::Borrowed(v);
    }
    let mut out = String::with_capacity(v.len() + 2);
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Encodes the per-topic counters of `topics` (see the module docs for the names).
pub fn encode_topics(topics: &TopicsSnapshot, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
    topics_into(topics, &mut encoder)
}

fn topics_into(topics: &TopicsSnapshot, encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
    for c in topics.discovery.counters() {
        let name = format!("discovery_{}", c.name);
        let counter = ConstCounter::new(c.value);
        counter.encode(encoder.encode_descriptor(
            &name,
            &help(c.doc),
            None,
            counter.metric_type(),
        )?)?;
    }
    if topics.topics.is_empty() {
        return Ok(());
    }
    let rows: Vec<_> = topics
        .topics
        .iter()
        .map(|t| (escape_label(&t.name), topic_counters(&t.stats)))
        .collect();
    for (i, (name, help, _)) in topic_counters(&TopicStats::default()).iter().enumerate() {
        let mut family =
            encoder.encode_descriptor(name, help, None, ConstCounter::new(0u64).metric_type())?;
        for (topic, counters) in &rows {
            let labels = [("topic", Cow::Borrowed(topic.as_ref()))];
            ConstCounter::new(counters[i].2).encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
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
    stats_into(stats, &mut encoder)
}

fn stats_into(stats: &MeshStats, encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
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
    )?)?;
    let c = ConstCounter::new(stats.shard_task_panics);
    c.encode(encoder.encode_descriptor(
        "shard_task_panics",
        "Shard tasks (Mesh::spawn_on_shard) that panicked; each was contained and logged.",
        None,
        c.metric_type(),
    )?)?;
    let c = ConstCounter::new(stats.shard_task_busy_us);
    c.encode(encoder.encode_descriptor(
        "shard_task_busy_us",
        "Time shard tasks spent running (in their polls), microseconds.",
        None,
        c.metric_type(),
    )?)?;
    let c = ConstCounter::new(stats.shard_task_long_polls);
    c.encode(encoder.encode_descriptor(
        "shard_task_long_polls",
        "Shard-task polls that held their shard for 1 ms or more.",
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
            shard_task_panics: 2,
            shard_task_busy_us: 9,
            shard_task_long_polls: 3,
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
        assert_eq!(s["shoal_shard_task_panics_total"], 2);
        assert_eq!(s["shoal_shard_task_busy_us_total"], 9);
        assert_eq!(s["shoal_shard_task_long_polls_total"], 3);
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
    fn each_link_renders_its_suite() {
        use crate::crypto::RecordSuite;
        use crate::PeerId;
        let link = |b: u8, suite| LinkInfo {
            peer: PeerId([b; 16]),
            suite,
            extended_frames: true,
        };
        let links = vec![
            link(1, Some(RecordSuite::Aes256Gcm)),
            link(2, Some(RecordSuite::ChaCha20Poly1305)),
            link(3, None),
        ];
        let text = page(Snapshot(MeshStats::default(), None, Some(links)));
        let s = samples(&text);
        let key = |b: u8, suite: &str| {
            format!(
                "shoal_link_suite{{peer=\"{}\",suite=\"{suite}\"}}",
                PeerId([b; 16])
            )
        };
        assert_eq!(s.get(&key(1, "aes-256-gcm")), Some(&1), "{text}");
        assert_eq!(s.get(&key(2, "chacha20-poly1305")), Some(&1), "{text}");
        assert_eq!(s.get(&key(3, "plaintext")), Some(&1), "{text}");
        assert!(text.contains("# TYPE shoal_link_suite gauge"), "{text}");
        // Without links, the family is there and empty; `render` has none.
        let empty = page(Snapshot(MeshStats::default(), None, Some(Vec::new())));
        assert!(!samples(&empty)
            .keys()
            .any(|k| k.starts_with("shoal_link_suite")));
        assert!(!render(&MeshStats::default()).contains("link_suite"));
    }

    #[test]
    fn topic_counters_render_per_topic_with_a_topic_label() {
        use crate::topics::{TopicSummary, TopicsSnapshot};
        let summary = |name: &str, n: u64| TopicSummary {
            name: name.into(),
            writers: 1,
            readers: 2,
            stats: TopicStats {
                written: n,
                delivered: n + 1,
                forwarded: n + 2,
                dropped_duplicate: n + 3,
                missed: n + 4,
                dropped_queue_full: n + 5,
                dropped_no_route: n + 6,
                dropped_wrong_link: n + 7,
                repaired: n + 8,
                lost: n + 9,
                dropped_slow_link: n + 10,
            },
        };
        let topics = TopicsSnapshot {
            topics: vec![summary("sensors/imu", 10), summary("cmd\"x\"", 20)],
            view: None,
            discovery: Default::default(),
        };
        let page = render_with_topics(&MeshStats::default(), &topics);
        assert!(page.ends_with("# EOF\n"), "{page}");
        let s = samples(&page);
        let fields = [
            "written",
            "delivered",
            "forwarded",
            "dropped_duplicate",
            "missed",
            "dropped_queue_full",
            "dropped_no_route",
            "dropped_wrong_link",
            "repaired",
            "lost",
            "dropped_slow_link",
        ];
        for (i, f) in fields.iter().enumerate() {
            let key = format!("shoal_topic_{f}_total{{topic=\"sensors/imu\"}}");
            assert_eq!(s.get(&key), Some(&(10 + i as u64)), "{key} in\n{page}");
            assert!(
                page.contains(&format!("# TYPE shoal_topic_{f} counter")),
                "{page}"
            );
        }
        assert_eq!(
            s.get(r#"shoal_topic_written_total{topic="cmd\"x\""}"#),
            Some(&20),
            "label values are escaped: {page}"
        );
        // The node's own counters are still there.
        assert!(s.contains_key(r#"shoal_originated_total{shard="control"}"#));
        // No topics: no topic families.
        let page = render_with_topics(
            &MeshStats::default(),
            &TopicsSnapshot::of(None, Default::default()),
        );
        assert!(!page.contains("shoal_topic_"), "{page}");
    }

    #[test]
    fn the_discovery_counters_render_without_labels() {
        use crate::topics::{DiscoveryStats, TopicsSnapshot};
        let discovery = DiscoveryStats {
            off_path: 3,
            budget_dropped: 4,
            ..DiscoveryStats::default()
        };
        let page = render_with_topics(&MeshStats::default(), &TopicsSnapshot::of(None, discovery));
        let s = samples(&page);
        assert_eq!(s.get("shoal_discovery_off_path_total"), Some(&3), "{page}");
        assert_eq!(s.get("shoal_discovery_budget_dropped_total"), Some(&4));
        assert_eq!(s.get("shoal_discovery_frames_in_total"), Some(&0));
        assert!(page.contains("# HELP shoal_discovery_off_path "), "{page}");
    }

    #[test]
    fn a_stopped_or_empty_node_still_renders() {
        let page = render(&MeshStats::default());
        let s = samples(&page);
        assert_eq!(s[r#"shoal_originated_total{shard="control"}"#], 0);
        assert!(page.ends_with("# EOF\n"));
    }
}
