//! `meshnode`: one Shoal mesh node that reports what it sees, one line per event, on stdout.
//!
//! The multi-host tests run it inside netlab hosts. Lines:
//! `ready id=<hex> port=<tcp port>`, `connected peer=<hex>`, `disconnected peer=<hex>`,
//! `lost peer=<hex>`, `message from=<hex> len=<n>`, `error kind=<kind> msg=<text>`, and
//! `members n=<count> ids=<hex,hex,...>` (sorted, self excluded) whenever the member set
//! changes and once a second. It exits by itself after `--run-for` seconds.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use clap::Parser;
use shoal_mesh::{Event, Mesh};

#[derive(Parser, Debug)]
#[command(about = "One Shoal mesh node that prints its events (for multi-host tests)")]
struct Args {
    /// Mesh group name.
    #[arg(long, default_value = "default")]
    group: String,
    /// IPv4 address of the interface to send and join multicast on.
    #[arg(long)]
    interface: Option<Ipv4Addr>,
    /// TCP listen address, `ip:port` (port 0 picks one).
    #[arg(long, default_value = "0.0.0.0:0")]
    listen: std::net::SocketAddr,
    /// Static peers (`host:port`), repeatable.
    #[arg(long = "static-peer")]
    static_peers: Vec<String>,
    /// Beacon interval in milliseconds.
    #[arg(long, default_value_t = 1000)]
    announce_ms: u64,
    /// Exit after this many seconds (a bound, so a forgotten node never runs forever).
    #[arg(long, default_value_t = 300)]
    run_for: u64,
}

fn main() {
    let args = Args::parse();
    let mut builder = Mesh::builder()
        .group_name(args.group.clone())
        .listen_addr(args.listen.ip())
        .listen_port(args.listen.port())
        .scouting(true)
        .announce_interval(Duration::from_millis(args.announce_ms));
    if let Some(ifa) = args.interface {
        builder = builder.multicast_interface(ifa);
    }
    for p in &args.static_peers {
        builder = builder.static_peer(p.clone());
    }
    let mesh = builder
        .build()
        .unwrap_or_else(|e| fail(&format!("build: {e}")));
    let mut events = mesh.events();
    mesh.start()
        .unwrap_or_else(|e| fail(&format!("start: {e}")));
    let me = mesh.id();
    say(&format!("ready id={me} port={}", mesh.listen_port()));

    let end = Instant::now() + Duration::from_secs(args.run_for);
    let mut last_members: Option<BTreeSet<String>> = None;
    let mut next_report = Instant::now();
    while Instant::now() < end {
        if let Some(ev) = events.recv_timeout(Duration::from_millis(200)) {
            match &ev {
                Event::PeerConnected { peer } => say(&format!("connected peer={peer}")),
                Event::PeerDisconnected { peer } => say(&format!("disconnected peer={peer}")),
                Event::PeerLost { peer } => say(&format!("lost peer={peer}")),
                Event::PeerDiscovered { peer, addr } => {
                    say(&format!("discovered peer={peer} addr={addr}"))
                }
                Event::Message { from, payload, .. } => {
                    say(&format!("message from={from} len={}", payload.len()))
                }
                Event::Error { kind, message, .. } => {
                    say(&format!("error kind={kind:?} msg={message}"))
                }
                // Membership is reported from `members()` below; topics are not used here.
                _ => {}
            }
        }
        let members: BTreeSet<String> = mesh
            .members()
            .into_iter()
            .filter(|p| *p != me)
            .map(|p| p.to_string())
            .collect();
        let changed = last_members.as_ref() != Some(&members);
        if changed || Instant::now() >= next_report {
            let ids: Vec<&str> = members.iter().map(String::as_str).collect();
            say(&format!(
                "members n={} ids={}",
                members.len(),
                ids.join(",")
            ));
            last_members = Some(members);
            next_report = Instant::now() + Duration::from_secs(1);
        }
    }
    mesh.stop();
    say("stopped");
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn fail(msg: &str) -> ! {
    eprintln!("meshnode: {msg}");
    std::process::exit(1)
}
