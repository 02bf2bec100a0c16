//! Multi-host tests: real processes in network namespaces made by the project's lab
//! (`shoal_tests::lab`).
//!
//! Each host runs the `meshnode` binary of this crate with multicast discovery only (no static
//! or seed peers), so every link in these tests was found by multicast. The node prints one
//! line per event; the tests wait, with deadlines, for the member sets they expect.
//! Without root the tests print why they were skipped and pass.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use shoal_tests::{field, skip_without_lab, HostProcess, Lab};

const NODE: &str = env!("CARGO_BIN_EXE_meshnode");

/// Starts one node on every host of the lab, all in group `group`.
fn start_nodes(lab: &Lab, group: &str) -> Vec<(HostProcess, String)> {
    (1..=lab.hosts())
        .map(|k| {
            let addr = lab.addr(k);
            let args = vec![
                "--group".to_string(),
                group.to_string(),
                "--interface".to_string(),
                addr.clone(),
                "--listen".to_string(),
                format!("{addr}:0"),
            ];
            let mut p = lab.spawn(k, NODE, &args);
            let ready = p
                .wait_line(Instant::now() + Duration::from_secs(20), |l| {
                    l.starts_with("ready ")
                })
                .unwrap_or_else(|| panic!("node on h{k} never became ready:\n{}", p.tail(20)));
            let id = field(&ready, "id").expect("ready line has id").to_string();
            (p, id)
        })
        .collect()
}

/// Parses a `members n=<count> ids=<a,b,...>` line.
fn members_of(line: &str) -> Option<BTreeSet<String>> {
    if !line.starts_with("members ") {
        return None;
    }
    let ids = field(line, "ids")?;
    Some(
        ids.split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
    )
}

/// Waits until node `i` reports exactly `want` as its members (itself excluded).
fn wait_members(
    nodes: &mut [(HostProcess, String)],
    i: usize,
    want: &BTreeSet<String>,
    within: Duration,
) {
    let deadline = Instant::now() + within;
    let (p, id) = &mut nodes[i];
    let got = p.wait_line(deadline, |l| members_of(l).as_ref() == Some(want));
    assert!(
        got.is_some(),
        "node {i} ({id}) did not reach members {want:?} within {within:?}; last lines:\n{}",
        p.tail(25)
    );
}

fn all_but(nodes: &[(HostProcess, String)], skip: &[usize]) -> Vec<BTreeSet<String>> {
    (0..nodes.len())
        .map(|i| {
            nodes
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i && !skip.contains(j))
                .map(|(_, (_, id))| id.clone())
                .collect()
        })
        .collect()
}

#[test]
fn four_hosts_form_a_mesh_by_multicast_alone() {
    if skip_without_lab() {
        return;
    }
    let lab = Lab::up("shA", 4);
    let mut nodes = start_nodes(&lab, "netlab-a");
    let want = all_but(&nodes, &[]);
    for (i, w) in want.iter().enumerate() {
        wait_members(&mut nodes, i, w, Duration::from_secs(30));
    }
}

#[test]
fn discovery_converges_with_30_percent_loss_on_one_host() {
    if skip_without_lab() {
        return;
    }
    let lab = Lab::up("shB", 4);
    lab.loss(2, 30);
    let mut nodes = start_nodes(&lab, "netlab-b");
    let want = all_but(&nodes, &[]);
    for (i, w) in want.iter().enumerate() {
        wait_members(&mut nodes, i, w, Duration::from_secs(60));
    }
}

#[test]
fn mesh_reforms_after_a_cut_link_heals() {
    if skip_without_lab() {
        return;
    }
    let lab = Lab::up("shC", 4);
    let mut nodes = start_nodes(&lab, "netlab-c");
    let full = all_but(&nodes, &[]);
    for (i, w) in full.iter().enumerate() {
        wait_members(&mut nodes, i, w, Duration::from_secs(30));
    }

    // Host 4 (index 3) loses its cable: the other three must drop it from their member sets.
    lab.cut(4);
    let without = all_but(&nodes, &[3]);
    for (i, w) in without.iter().enumerate().take(3) {
        wait_members(&mut nodes, i, w, Duration::from_secs(45));
    }

    // Plugged back in: everyone sees everyone again.
    lab.heal(4);
    for (i, w) in full.iter().enumerate() {
        wait_members(&mut nodes, i, w, Duration::from_secs(60));
    }
}
