//! The readers `echo`, `hz` and `bw` open on a topic, and `echo`'s printing.
//!
//! Without `--type` / `--partition`, one reader per distinct (type name, type hash,
//! partitions) among the topic's writers, each declared like them, so every writer matches
//! one whatever its type hash or partition; the flags replace those choices.
//!
//! **Owns:** which readers are declared and how a sample is printed. **Must not touch:** the
//! statistics of `hz` / `bw` (`rate`).

use crate::args::{EchoArgs, ReaderArgs};
use crate::observer::Observer;
use crate::text::payload;
use crate::topics::{ep_label, require_topic};
use crate::CliError;
use serde::Serialize;
use shoal_mesh::topics::{type_hash_of, EndpointKind, Reader, Topic, TopicsSnapshot};
use shoal_mesh::{Event, Received};
use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;

/// The declarations `a` asks for on a topic the snapshot lists (its writers' kinds, or its
/// readers' when it has no writer yet).
pub fn declarations(t: &TopicsSnapshot, a: &ReaderArgs) -> Result<Vec<Topic>, CliError> {
    require_topic(t, &a.topic)?;
    let of_topic = |k: EndpointKind| {
        t.writers()
            .chain(t.readers())
            .filter(move |e| e.topic == a.topic && e.kind == k && !e.local)
    };
    let mut groups: BTreeSet<(String, [u8; 16], Vec<String>)> = of_topic(EndpointKind::Writer)
        .map(|e| (e.type_name.clone(), e.type_hash.0, e.partitions.clone()))
        .collect();
    if groups.is_empty() {
        groups = of_topic(EndpointKind::Reader)
            .map(|e| (e.type_name.clone(), e.type_hash.0, e.partitions.clone()))
            .collect();
    }
    let groups: BTreeSet<(String, [u8; 16], Vec<String>)> = groups
        .into_iter()
        .map(|(ty, hash, parts)| {
            let (ty, hash) = match &a.type_name {
                Some(n) => (n.clone(), type_hash_of(n).0),
                None => (ty, hash),
            };
            let parts = if a.partitions.is_empty() {
                parts
            } else {
                a.partitions.clone()
            };
            (ty, hash, parts)
        })
        .collect();
    Ok(groups
        .into_iter()
        .map(|(ty, hash, parts)| {
            let t = Topic::new(a.topic.as_str(), ty)
                .type_hash(hash)
                .partitions(parts);
            if a.reliable {
                t.reliable()
            } else {
                t.best_effort()
            }
        })
        .collect())
}

/// Opens the readers of `a` on the observer.
pub fn open(o: &Observer, t: &TopicsSnapshot, a: &ReaderArgs) -> Result<Vec<Reader>, CliError> {
    declarations(t, a)?
        .into_iter()
        .map(|d| o.mesh.reader(d).map_err(CliError::from))
        .collect()
}

/// One printed sample (`--json`: one object per line).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SampleLine {
    /// Writer GUID, 32 hex digits.
    pub writer: String,
    /// Its sequence number.
    pub seq: u64,
    /// Payload size, bytes.
    pub size: usize,
    /// `utf8`, `json` or `hex`.
    pub format: &'static str,
    /// The payload as rendered (at most `--max-bytes` of it).
    pub payload: String,
}

/// Prints the samples of `readers` to `out` until `--count` samples were printed (or for
/// ever); samples lost by a reliable reader are said too. Returns the samples printed.
pub fn echo(
    o: &mut Observer,
    readers: &[Reader],
    a: &EchoArgs,
    json: bool,
    out: &mut dyn Write,
) -> Result<u64, CliError> {
    let mut printed = 0u64;
    let ours = |r: &shoal_mesh::topics::EndpointGuid| readers.iter().any(|x| x.guid() == *r);
    let done = |printed: u64| a.count.is_some_and(|c| printed >= c);
    loop {
        let Some(got) = o.events.recv_batch_timeout(Duration::from_millis(200)) else {
            continue;
        };
        match got {
            Received::Samples(b) if ours(&b.reader()) => {
                for (seq, p) in b.iter() {
                    print_sample(out, a, json, b.writer(), seq, p)?;
                    printed += 1;
                    if done(printed) {
                        return Ok(printed);
                    }
                }
            }
            Received::Event(Event::Sample {
                reader,
                writer,
                seq,
                payload,
            }) if ours(&reader) => {
                print_sample(out, a, json, writer, seq, &payload)?;
                printed += 1;
                if done(printed) {
                    return Ok(printed);
                }
            }
            Received::Event(Event::SamplesLost {
                reader,
                writer,
                first,
                last,
            }) if ours(&reader) => {
                let w = hex::encode(writer);
                if json {
                    let v =
                        serde_json::json!({"writer": w, "lost_first": first, "lost_last": last});
                    writeln!(out, "{v}")?;
                } else {
                    writeln!(
                        out,
                        "[{}] samples {first}..={last} lost (the writer no longer holds them)",
                        ep_label(&w)
                    )?;
                }
            }
            _ => {}
        }
    }
}

fn print_sample(
    out: &mut dyn Write,
    a: &EchoArgs,
    json: bool,
    writer: [u8; 16],
    seq: u64,
    bytes: &[u8],
) -> Result<(), CliError> {
    let (format, shown) = payload(bytes, a.format, a.max_bytes);
    let line = SampleLine {
        writer: hex::encode(writer),
        seq,
        size: bytes.len(),
        format,
        payload: shown,
    };
    if json {
        writeln!(out, "{}", serde_json::to_string(&line)?)?;
    } else {
        writeln!(
            out,
            "[{} #{}] {} B {}: {}",
            ep_label(&line.writer),
            seq,
            line.size,
            format,
            line.payload
        )?;
    }
    Ok(())
}
