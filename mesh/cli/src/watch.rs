//! `shoal watch`: a live terminal view of the mesh, refreshed each period: the nodes (name,
//! protocol, uptime), the links with their round-trip times, the topics with their
//! endpoints, matches, and the rate, bandwidth and losses the observer measures, and this
//! node's drops by cause.
//!
//! Rates come from best-effort readers the observer opens on every topic (as `hz` does;
//! `--no-subscribe` observes without them, at no cost to the mesh but without rates). The
//! screen is [`draw`]n from a [`WatchState`] alone, so a test renders it on ratatui's
//! `TestBackend` with the state of a real mesh.
//!
//! **Owns:** the screen's layout and the per-topic meters. **Must not touch:** the facts
//! (the library's views) or the statistics (`rate`).

use crate::args::{ReaderArgs, WatchArgs};
use crate::nodes::protocol;
use crate::observer::{is_observer, Observer};
use crate::rate::{Meter, Window};
use crate::text::{duration, micros, rate_bytes, short};
use crate::topics::silent_nodes;
use crate::CliError;
use ratatui::crossterm::event::{self, Event as Key, KeyCode, KeyEventKind};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};
use ratatui::Frame;
use shoal_mesh::nodes::NodesView;
use shoal_mesh::topics::{EndpointGuid, Reader, TopicsSnapshot};
use shoal_mesh::{Event, Received};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Everything one screen shows.
#[derive(Debug, Clone)]
pub struct WatchState {
    /// The members.
    pub nodes: NodesView,
    /// The topics.
    pub topics: TopicsSnapshot,
    /// Per topic, the last window the observer measured (subscribed topics only).
    pub rates: BTreeMap<String, Window>,
    /// This node's drop counters that are not zero, by cause.
    pub drops: Vec<(String, u64)>,
    /// Refresh period, for the header.
    pub refresh: Duration,
    /// Whether rates are measured.
    pub subscribed: bool,
}

/// Draws one screen.
pub fn draw(f: &mut Frame<'_>, s: &WatchState) {
    let links: usize = s.nodes.nodes.iter().map(|n| n.links.len()).sum::<usize>() / 2;
    let chunks = Layout::vertical([
        Constraint::Length(1),
        Constraint::Percentage(30),
        Constraint::Percentage(25),
        Constraint::Percentage(30),
        Constraint::Min(3),
    ])
    .split(f.area());
    let header = format!(
        "shoal watch: {} node(s), {} link(s), {} topic(s) seen from {}; every {}; q quits",
        s.nodes.nodes.len(),
        links,
        s.topics.topics.len(),
        short(&s.nodes.me.to_string()),
        duration(s.refresh)
    );
    f.render_widget(
        Paragraph::new(header).style(Style::default().add_modifier(Modifier::BOLD)),
        chunks[0],
    );
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let name_of = |id: &shoal_mesh::PeerId| {
        s.nodes
            .node(id)
            .and_then(|n| n.name.clone())
            .unwrap_or_else(|| short(&id.to_string()).to_owned())
    };
    let node_rows = s.nodes.nodes.iter().map(|n| {
        let mut tags = Vec::new();
        if n.this_node {
            tags.push("this");
        }
        if is_observer(n.name.as_deref()) {
            tags.push("observer");
        }
        if !n.topic_records {
            tags.push("no topic records");
        }
        Row::new(vec![
            short(&n.id.to_string()).to_owned(),
            n.name.clone().unwrap_or_else(|| "-".into()),
            protocol(n.speaks).to_owned(),
            n.started_ms.map_or_else(
                || "?".into(),
                |ms| duration(Duration::from_millis(s.nodes.wall_ms.saturating_sub(ms))),
            ),
            n.links.len().to_string(),
            tags.join(", "),
        ])
    });
    f.render_widget(
        Table::new(
            node_rows,
            [
                Constraint::Length(9),
                Constraint::Percentage(35),
                Constraint::Length(15),
                Constraint::Length(9),
                Constraint::Length(6),
                Constraint::Percentage(30),
            ],
        )
        .header(Row::new(["id", "name", "protocol", "uptime", "links", ""]).style(bold))
        .block(Block::default().borders(Borders::ALL).title("nodes")),
        chunks[1],
    );
    let mut link_rows = Vec::new();
    for n in &s.nodes.nodes {
        for l in n.links.iter().filter(|l| n.id < l.peer) {
            let rtt = l
                .rtt
                .map_or_else(|| "-".into(), |d| micros(d.as_micros() as u64));
            let by = l.measured_by.map_or_else(|| "-".into(), |b| name_of(&b));
            link_rows.push(Row::new(vec![name_of(&n.id), name_of(&l.peer), rtt, by]));
        }
    }
    f.render_widget(
        Table::new(
            link_rows,
            [
                Constraint::Percentage(30),
                Constraint::Percentage(30),
                Constraint::Length(12),
                Constraint::Percentage(25),
            ],
        )
        .header(Row::new(["node", "node", "rtt", "measured by"]).style(bold))
        .block(Block::default().borders(Borders::ALL).title("links")),
        chunks[2],
    );
    let topic_rows = s.topics.topics.iter().map(|t| {
        let matched = s
            .topics
            .matches()
            .iter()
            .filter(|(w, _)| {
                s.topics
                    .writers()
                    .any(|e| e.guid == *w && e.topic == t.name)
            })
            .count();
        let (rate, bw, lost) = match s.rates.get(&t.name) {
            Some(w) => (
                format!("{:.1} Hz", w.rate_hz),
                rate_bytes(w.bytes_per_sec),
                w.total_lost.to_string(),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        Row::new(vec![
            t.name.clone(),
            t.writers.to_string(),
            t.readers.to_string(),
            matched.to_string(),
            rate,
            bw,
            lost,
        ])
    });
    f.render_widget(
        Table::new(
            topic_rows,
            [
                Constraint::Percentage(30),
                Constraint::Length(8),
                Constraint::Length(8),
                Constraint::Length(8),
                Constraint::Length(12),
                Constraint::Length(14),
                Constraint::Length(8),
            ],
        )
        .header(
            Row::new([
                "topic",
                "writers",
                "readers",
                "matched",
                "rate",
                "bandwidth",
                "lost",
            ])
            .style(bold),
        )
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(if s.subscribed {
                    "topics (rates as received here)"
                } else {
                    "topics (--no-subscribe: no rates)"
                }),
        ),
        chunks[3],
    );
    let mut notes: Vec<String> = if s.drops.is_empty() {
        vec!["no drops on this node".into()]
    } else {
        vec![s
            .drops
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")]
    };
    for sn in silent_nodes(&s.nodes) {
        notes.push(format!("! {}: {}", short(&sn.node), sn.why));
    }
    f.render_widget(
        Paragraph::new(notes.join("\n"))
            .wrap(ratatui::widgets::Wrap { trim: true })
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title("drops by cause (this node) and silent causes"),
            ),
        chunks[4],
    );
}

/// This node's non-zero drop counters (shards and control plane summed), by cause.
pub fn drops(o: &Observer) -> Vec<(String, u64)> {
    let st = o.mesh.stats();
    st.total
        .counters()
        .into_iter()
        .chain(st.control.counters())
        .filter(|c| c.name.starts_with("dropped") && c.value > 0)
        .map(|c| (c.name.to_owned(), c.value))
        .collect()
}

/// The per-topic meters of the readers `watch` opened.
struct Meters {
    readers: Vec<(String, Reader)>,
    meters: BTreeMap<String, Meter>,
}

impl Meters {
    fn subscribe(&mut self, o: &Observer, t: &TopicsSnapshot) {
        for topic in t.topics.iter().map(|t| t.name.clone()) {
            if self.meters.contains_key(&topic) {
                continue;
            }
            let a = ReaderArgs {
                topic: topic.clone(),
                type_name: None,
                partitions: Vec::new(),
                reliable: false,
            };
            // A topic with only the observer's own readers (or none) waits for a writer.
            let Ok(decls) = crate::reading::declarations(t, &a) else {
                continue;
            };
            if decls.is_empty() {
                continue;
            }
            for d in decls {
                if let Ok(r) = o.mesh.reader(d) {
                    self.readers.push((topic.clone(), r));
                }
            }
            self.meters.insert(topic, Meter::new(Instant::now()));
        }
    }

    fn topic_of(&self, reader: &EndpointGuid) -> Option<&str> {
        self.readers
            .iter()
            .find(|(_, r)| r.guid() == *reader)
            .map(|(t, _)| t.as_str())
    }

    fn take(&mut self, got: Received) {
        let at = Instant::now();
        match got {
            Received::Samples(b) => {
                let Some(t) = self.topic_of(&b.reader()).map(str::to_owned) else {
                    return;
                };
                if let Some(m) = self.meters.get_mut(&t) {
                    let (mut bytes, mut max) = (0u64, 0u64);
                    for (_, p) in b.iter() {
                        bytes += p.len() as u64;
                        max = max.max(p.len() as u64);
                    }
                    m.run(at, b.writer(), b.first_seq(), b.len() as u64, bytes, max);
                }
            }
            Received::Event(Event::Sample {
                reader,
                writer,
                seq,
                payload,
            }) => {
                let Some(t) = self.topic_of(&reader).map(str::to_owned) else {
                    return;
                };
                if let Some(m) = self.meters.get_mut(&t) {
                    m.sample(at, writer, seq, payload.len());
                }
            }
            _ => {}
        }
    }
}

/// Runs the live view until `q` / Esc.
pub fn run(mut o: Observer, a: &WatchArgs) -> Result<(), CliError> {
    let subscribe = !a.no_subscribe;
    let refresh = Duration::from_millis(a.refresh_ms.max(100));
    let mut meters = Meters {
        readers: Vec::new(),
        meters: BTreeMap::new(),
    };
    let mut rates = BTreeMap::new();
    let mut terminal = ratatui::try_init()?;
    let result = (|| -> Result<(), CliError> {
        let mut next = Instant::now();
        loop {
            let now = Instant::now();
            if now >= next {
                next = now + refresh;
                let (nodes, topics) = o.look()?;
                if subscribe {
                    meters.subscribe(&o, &topics);
                    for (t, m) in &mut meters.meters {
                        rates.insert(t.clone(), m.window(now));
                    }
                }
                let state = WatchState {
                    nodes,
                    topics,
                    rates: rates.clone(),
                    drops: drops(&o),
                    refresh,
                    subscribed: subscribe,
                };
                terminal.draw(|f| draw(f, &state))?;
            }
            if event::poll(Duration::ZERO)? {
                if let Key::Key(k) = event::read()? {
                    if k.kind == KeyEventKind::Press
                        && matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                    {
                        return Ok(());
                    }
                }
            }
            // Take what arrived (whole runs at a time) while waiting for the next step.
            let wait = next
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50));
            if let Some(got) = o.events.recv_batch_timeout(wait) {
                meters.take(got);
                // Bounded, so keys and the screen still get their turn at any rate.
                for _ in 0..4096 {
                    let Some(got) = o.events.try_recv_batch() else {
                        break;
                    };
                    meters.take(got);
                }
            }
        }
    })();
    ratatui::restore();
    result
}
