//! The `shoal` binary itself: every option of every command has help text, `--help` prints
//! it, and a command run as a process against a loopback mesh prints its JSON.

mod support;

use clap::CommandFactory;
use shoal_cli::args::Cli;
use std::process::Command;
use support::*;

fn shoal(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(args)
        .output()
        .expect("the binary runs")
}

#[test]
fn every_command_and_option_has_help() {
    let cmd = Cli::command();
    cmd.clone().debug_assert();
    let mut missing = Vec::new();
    let mut check = |c: &clap::Command, path: &str| {
        if c.get_about().is_none() {
            missing.push(format!("{path}: no about"));
        }
        for a in c.get_arguments() {
            let id = a.get_id().as_str();
            if id != "help" && id != "version" && a.get_help().is_none() {
                missing.push(format!("{path} {id}"));
            }
        }
    };
    check(&cmd, "shoal");
    for sub in cmd.get_subcommands() {
        check(sub, &format!("shoal {}", sub.get_name()));
    }
    assert!(missing.is_empty(), "without help: {missing:?}");
    let names: Vec<&str> = cmd.get_subcommands().map(|s| s.get_name()).collect();
    assert_eq!(
        names,
        ["nodes", "topics", "echo", "hz", "bw", "graph", "watch"]
    );
}

#[test]
fn help_prints_every_option() {
    let out = shoal(&["echo", "--help"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for want in [
        "--count",
        "--type",
        "--partition",
        "--reliable",
        "--format",
        "--static-peer",
        "--group",
        "--psk",
        "--identity-file",
        "--multicast-interface",
        "--json",
    ] {
        assert!(
            text.contains(want),
            "{want} missing from echo --help:\n{text}"
        );
    }
    let out = shoal(&["--help"]);
    let text = String::from_utf8(out.stdout).unwrap();
    for c in ["nodes", "topics", "echo", "hz", "bw", "graph", "watch"] {
        assert!(text.contains(c), "{c} missing from --help");
    }
}

#[test]
fn the_binary_prints_nodes_as_json_and_fails_clearly_without_a_mesh() {
    let a = start(node("alpha"));
    let b = start(node("bravo").static_peer(ep(&a)));
    wait_until(20, "linked", || a.connected_peers().contains(&b.id()));
    let out = shoal(&[
        "--no-multicast",
        "--static-peer",
        &ep(&a),
        "--listen",
        "127.0.0.1:0",
        "--settle-ms",
        "500",
        "--json",
        "nodes",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["name"].as_str())
        .collect();
    assert!(names.contains(&"alpha"), "{names:?}");
    assert!(names[0].starts_with("shoal-observer/nodes@"), "{names:?}");
    let out = shoal(&[
        "--no-multicast",
        "--static-peer",
        "127.0.0.1:1",
        "--wait-ms",
        "200",
        "nodes",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("shoal: no mesh found"), "{err}");
    let out = shoal(&[
        "--no-multicast",
        "--static-peer",
        &ep(&a),
        "--settle-ms",
        "200",
        "echo",
        "no/such",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("unknown topic \"no/such\""), "{err}");
}
