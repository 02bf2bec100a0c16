//! `ping` and `pong`: the two ends of a ping-pong in separate processes, on one host or two,
//! over Shoal (application threads, or `--inline` in the shard callbacks) or raw TCP
//! (`--raw`), with the measurement and output of `latency`.
//!
//! The ping side (over Shoal, inline and raw TCP) is in `ping.rs`, the pong side in `pong.rs`;
//! the payload formats both ends share (probe, goodbye, report) are defined here (the report's
//! fields are [`crate::latency`]'s, whose result carries it).
//!
//! The exchange, all in stamped payloads ([`crate::stamp`]):
//! - **probe** (ping → everyone, broadcast, every 100 ms until one comes back): the first echo
//!   names the pong and proves that both ends of the link are up, since the pong can route its
//!   reply only once its own side is (a ping sent earlier would be lost and cost a reply
//!   timeout);
//! - **ping** (targeted, one in flight) and its echo, as `latency`;
//! - **goodbye** (ping → pong, an end marker carrying the pings sent): the pong answers with
//!   its own report (pings echoed, its CPU time from first probe to goodbye) and ends once
//!   the ping's link goes, so every run ends by itself. A pong also ends when the ping's link
//!   drops, or at warm-up + duration + linger.

use crate::demo::RunError;
use crate::latency::{PongReport, Settings, PING_PUBLISHER};
use crate::metrics::MetricsServer;
use crate::stamp::{now_ns, Stamp, STAMP_LEN};
use bytes::Bytes;
use shoal_mesh::Mesh;
use std::net::SocketAddr;
use std::time::Duration;

mod on_shard;
mod ping;
mod pong;

pub use ping::run_ping;
pub use pong::run_pong;

/// `publisher` of a probe's stamp.
const PROBE_PUBLISHER: u64 = 2;
/// `publisher` of the pong's answer to a goodbye.
const PONG_PUBLISHER: u64 = 3;
/// How long each side waits for the other's goodbye step.
const GOODBYE_WAIT: Duration = Duration::from_secs(2);

/// Bytes of the pong's answer: an end stamp (`total` = pings echoed), then CPU user µs, CPU
/// sys µs and peak RSS KiB, big-endian u64 each.
const REPORT_LEN: usize = STAMP_LEN + 24;

impl PongReport {
    fn encode(&self) -> Vec<u8> {
        let mut buf = vec![0u8; REPORT_LEN];
        Stamp::End {
            publisher: PONG_PUBLISHER,
            total: self.echoed,
        }
        .write(&mut buf)
        .expect("buffer holds a stamp");
        let us = |s: f64| (s * 1e6).round() as u64;
        buf[24..32].copy_from_slice(&us(self.cpu_user_s).to_be_bytes());
        buf[32..40].copy_from_slice(&us(self.cpu_sys_s).to_be_bytes());
        buf[40..48].copy_from_slice(&self.peak_rss_kib.to_be_bytes());
        buf
    }

    /// The report in `payload`, if it is one.
    fn decode(payload: &[u8]) -> Option<PongReport> {
        let Ok(Stamp::End {
            publisher: PONG_PUBLISHER,
            total,
        }) = Stamp::read(payload)
        else {
            return None;
        };
        if payload.len() < REPORT_LEN {
            return None;
        }
        let word = |i: usize| u64::from_be_bytes(payload[i..i + 8].try_into().expect("8 bytes"));
        Some(PongReport {
            echoed: total,
            cpu_user_s: word(24) as f64 / 1e6,
            cpu_sys_s: word(32) as f64 / 1e6,
            peak_rss_kib: word(40),
        })
    }
}

fn probe(size: usize, n: u64) -> Bytes {
    let mut buf = vec![0u8; size.max(STAMP_LEN)];
    Stamp::Data {
        publisher: PROBE_PUBLISHER,
        seq: n,
        sent_ns: now_ns(),
    }
    .write(&mut buf)
    .expect("buffer holds a stamp");
    Bytes::from(buf)
}

fn goodbye(sent: u64) -> Bytes {
    let mut buf = vec![0u8; STAMP_LEN];
    Stamp::End {
        publisher: PING_PUBLISHER,
        total: sent,
    }
    .write(&mut buf)
    .expect("buffer holds a stamp");
    Bytes::from(buf)
}

fn is_probe_echo(payload: &[u8]) -> bool {
    matches!(
        Stamp::read(payload),
        Ok(Stamp::Data {
            publisher: PROBE_PUBLISHER,
            ..
        })
    )
}

/// Settings of a `ping` or `pong` run.
#[derive(Debug, Clone)]
pub struct PingPongRun {
    /// Size, rate, duration, warm-up, node settings (ping-pong mode).
    pub settings: Settings,
    /// Answer (pong) or send the next ping (ping) in the shard callback.
    pub inline: bool,
    /// Answer (pong) or ping (ping, max rate only) in a shard task (`Mesh::spawn_on_shard`):
    /// what arrives comes from its inbox, what it sends goes straight into the shard's core.
    pub on_shard: bool,
    /// Raw TCP instead of Shoal.
    pub raw: bool,
    /// Pong: how long past warm-up + duration it waits for its ping before giving up.
    pub linger: Duration,
    /// Serve the node's counters in the Prometheus text format here.
    pub metrics: Option<SocketAddr>,
}

impl PingPongRun {
    fn transport(&self) -> String {
        let base = match (self.raw, self.inline) {
            (true, _) => return "raw-tcp".into(),
            (false, true) => "shoal-inline",
            (false, false) if self.on_shard => "shoal-onshard",
            (false, false) => "shoal",
        };
        let mut t = String::from(base);
        if self.settings.node.psk.is_some() {
            t.push_str("-psk");
        }
        // Spinning trades CPU for latency: its rows must not read as the default's.
        if self.settings.node.spin_us > 0 {
            t.push_str(&format!("-spin{}", self.settings.node.spin_us));
        }
        t
    }

    fn metrics_for(&self, mesh: &Mesh) -> Result<Option<MetricsServer>, RunError> {
        match self.metrics {
            Some(addr) => Ok(Some(crate::metrics::serve_mesh(addr, mesh)?)),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests;
