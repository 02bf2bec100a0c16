//! Topic helpers shared by the live tests that attack a node's topics: what a node matched,
//! delivered and reported lost, a paced writer, and a wait for a complete in-order stream.
//!
//! **Owns:** reading a [`Node`]'s recorded topic events. **Must not touch:** the nodes
//! (public API only).

use super::{wait_until, Node};
use shoal_discovery::types::GuidPrefix;
use shoal_mesh::topics::{EndpointGuid, Writer};
use shoal_mesh::wire::{AckNack, Frame, SeqSet};
use shoal_mesh::{Event, PeerId, ShardStats};

/// The node's counters, summed over its executors.
pub fn total(n: &Node) -> ShardStats {
    n.mesh.stats().total
}

/// The GUID prefix of node `p`'s endpoints.
pub fn prefix(p: PeerId) -> GuidPrefix {
    GuidPrefix(p.0[..12].try_into().unwrap())
}

/// True once `n` raised Matched for writer `w` and reader `r`.
pub fn matched(n: &Node, w: EndpointGuid, r: EndpointGuid) -> bool {
    n.rec
        .has(|e| matches!(e, Event::Matched { writer, reader, .. } if *writer == w && *reader == r))
}

/// The seqs `n` delivered to `reader` from `w`, in delivery order.
pub fn seqs(n: &Node, reader: EndpointGuid, w: EndpointGuid) -> Vec<u64> {
    n.rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Sample {
                reader: r,
                writer,
                seq,
                ..
            } if r == reader && writer == w => Some(seq),
            _ => None,
        })
        .collect()
}

/// The SamplesLost events `n` raised for `reader`.
pub fn lost(n: &Node, reader: EndpointGuid) -> usize {
    n.rec
        .events()
        .iter()
        .filter(|e| matches!(e, Event::SamplesLost { reader: r, .. } if *r == reader))
        .count()
}

/// Writes samples until `last` (each one's payload its seq), flushing every 10.
pub fn write_to(w: &mut Writer, last: u64) {
    while w.next_seq() <= last {
        let seq = w.next_seq();
        assert_eq!(w.write_blocking(&seq.to_be_bytes()).unwrap(), seq);
        if seq % 10 == 0 {
            w.flush_blocking().unwrap();
        }
    }
    w.flush_blocking().unwrap();
}

/// Waits until `reader` on `n` has `1..=last`, then checks it got each exactly once, in order.
pub fn wait_complete(n: &Node, reader: EndpointGuid, w: EndpointGuid, last: u64) {
    wait_until(60, &format!("the reader has 1..={last}"), || {
        seqs(n, reader, w).len() as u64 >= last
    });
    assert_eq!(
        seqs(n, reader, w),
        (1..=last).collect::<Vec<_>>(),
        "every sample once, in order"
    );
}

/// An AckNack that acknowledges everything of writer `writer` up to `base` for its reader
/// `reader`, then its fence: an AckNack on the same writer (so on the same shard, after it)
/// for an unmatched reader on the node of `sender` (an endpoint of the sending node), which
/// the route leads to. Once the node counts the fence (`reliable_acks_ignored`), it handled
/// the first.
pub fn acknack_and_fence(
    writer: EndpointGuid,
    reader: EndpointGuid,
    sender: EndpointGuid,
    base: u64,
) -> [Frame; 2] {
    let mut unknown = sender;
    unknown[12..].copy_from_slice(&[0, 0, 9, 0x07]);
    let acknack = |reader, count, base| {
        Frame::AckNack(AckNack {
            ttl: 8,
            writer,
            reader,
            count,
            base,
            missing: SeqSet::new(),
        })
    };
    [acknack(reader, u32::MAX, base), acknack(unknown, 1, 1)]
}
