//! What a node costs a host before any traffic: 60 nodes on one machine (the storm) each pay
//! it. (Alone in its test binary so the resident memory it measures is this test's own.)

mod node_support;

use node_support::*;

/// Two nodes with the default queue ceilings, started, linked and idle. Each one's event
/// queue preallocated all 65 536 entries (88 bytes each, written at start: ~5.5 MiB resident,
/// 42 % of an idle storm node's memory) for a queue that holds a few batches at a time: the
/// two grew this process by ~17.3 MiB, ~6.3 MiB with the entries allocated as used.
#[test]
fn an_idle_node_does_not_hold_its_queue_ceilings_in_memory() {
    let before = proc_status_kib("VmRSS:");
    let a = Node::start(fast());
    let b = Node::start(fast().static_peer(ep(a.port())));
    let nodes = [a, b];
    wait_connected(&nodes, &[(0, 1)]);
    let grown = proc_status_kib("VmRSS:").saturating_sub(before);
    assert!(
        grown < 10 * 1024,
        "two idle nodes hold {grown} KiB resident; their queues' ceilings are not their use"
    );
}
