//! What one endpoint costs the graph to hold, in bytes: the measure that the
//! per-participant and total byte quotas ([`crate::graph::Capacities`]) count.
//!
//! **Owns:** the measure. **Must not touch:** the quotas themselves or what is done
//! when one is hit (the graph decides).
//!
//! Counts (x86-64):
//!
//! * [`ENDPOINT_OVERHEAD`]: the fixed part: its slot, its entries in the id and GUID
//!   indexes, its place in its topic's and participant's lists, and a topic entry of its
//!   own (the worst case: every endpoint on a new topic). A unit test in `graph/mod.rs`
//!   keeps it above the real sizes.
//! * its topic name three times (record, topic entry, topic index key), its type name;
//! * each partition name's text plus a `String` header ([`NAME_HEADER`]);
//! * each locator of its own ([`LOCATOR_BYTES`]);
//! * the prepared partition patterns
//!   ([`CompiledPartitions::heap_estimate`]: 256 bytes and a few words per state per
//!   pattern), plus the pointer to them.
//!
//! Matches are not counted: they have their own capacity (`Capacities::matches`).
//! A typical endpoint (short names, default partition, no locators) comes to ~550 bytes;
//! one at the default partition cap (2048 bytes) of patterns with ~190 distinct bytes
//! each to ~60 KiB, under 80 KiB however chosen.

use crate::partition::CompiledPartitions;
use crate::types::{EndpointInfo, Locator, Partitions};

/// Fixed bytes charged per endpoint (see the module docs).
pub const ENDPOINT_OVERHEAD: usize = 512;
/// Bytes of a `String` header, charged per partition name.
pub const NAME_HEADER: usize = std::mem::size_of::<String>();
/// Bytes of one locator.
pub const LOCATOR_BYTES: usize = std::mem::size_of::<Locator>();

/// Total bytes of a list's partition names (their text only): what
/// `Capacities::endpoint_partition_bytes` bounds.
pub fn partition_bytes(p: &Partitions) -> usize {
    p.names().iter().map(String::len).sum()
}

/// The bytes holding `info` costs the graph. O(its partition bytes).
pub fn endpoint_footprint(info: &EndpointInfo) -> usize {
    let names = &info.partitions;
    ENDPOINT_OVERHEAD
        + 3 * info.topic.as_str().len()
        + info.type_name.as_str().len()
        + names.names().len() * NAME_HEADER
        + partition_bytes(names)
        + info.locators.len() * LOCATOR_BYTES
        + CompiledPartitions::heap_estimate(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::*;

    fn ep(parts: &[&str]) -> EndpointInfo {
        let mut e = EndpointInfo::new(
            Guid::default(),
            EndpointKind::Reader,
            TopicName::new("sensors/imu").unwrap(),
            TypeName::new("geometry::Imu").unwrap(),
            TypeHash([1; 16]),
        );
        e.partitions = Partitions::new(parts.iter().copied()).unwrap();
        e
    }

    #[test]
    fn typical_and_worst_endpoints() {
        let plain = endpoint_footprint(&ep(&[]));
        assert!((ENDPOINT_OVERHEAD..600).contains(&plain), "{plain}");
        // Literal names cost their text and a header; patterns their compiled form too.
        let lit = endpoint_footprint(&ep(&["robot/arm"]));
        assert_eq!(
            lit - plain,
            NAME_HEADER
                + 9
                + CompiledPartitions::heap_estimate(&Partitions::new(["robot/arm"]).unwrap())
        );
        assert!(endpoint_footprint(&ep(&["robot/*"])) > lit + 256);
        // Eight 256-byte patterns with as many distinct bytes as fit (all ASCII but the
        // wildcards, then two-byte characters): the most a capped endpoint can hold.
        let body: String = (1u8..0x80)
            .map(char::from)
            .filter(|c| *c != '*' && *c != '?')
            .chain('\u{80}'..='\u{bf}')
            .collect();
        let pattern = format!("*{}*", &body[..253]);
        assert_eq!(pattern.len(), 255);
        let worst = endpoint_footprint(&ep(&[pattern.as_str(); 8]));
        assert!((50 * 1024..80 * 1024).contains(&worst), "{worst}");
    }
}
