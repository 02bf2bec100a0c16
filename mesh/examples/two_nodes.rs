//! Two nodes on 127.0.0.1: B dials A as a static peer, A broadcasts once, B prints the event.
//!
//! Run with `cargo run -p shoal-mesh --example two_nodes`.

use shoal_mesh::{ErrorLog, Event, Mesh};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Warnings (the node's, and error events through `ErrorLog`) unless RUST_LOG says otherwise.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
    let localhost = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let a = Mesh::builder()
        .scouting(false)
        .listen_addr(localhost)
        .build()?;
    a.start()?;
    let b = Mesh::builder()
        .scouting(false)
        .listen_addr(localhost)
        .static_peer(format!("127.0.0.1:{}", a.listen_port()))
        .build()?;
    let mut events = b.events();
    b.start()?;
    println!(
        "A = {} on port {}, B = {} on port {}",
        a.id(),
        a.listen_port(),
        b.id(),
        b.listen_port()
    );

    let deadline = Instant::now() + Duration::from_secs(5);
    while a.connected_peers().is_empty() {
        if Instant::now() > deadline {
            return Err("A and B did not connect within 5 s".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    a.broadcast_blocking("hello, mesh")?;

    // Error events are logged aggregated (a line per kind and 10 s), not printed one by one.
    let mut errors = ErrorLog::new();
    while let Some(ev) = events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if errors.note(&ev) {
            continue;
        }
        println!("B got {ev:?}");
        if let Event::Message { payload, .. } = ev {
            println!("payload: {}", String::from_utf8_lossy(&payload));
            break;
        }
    }
    b.stop();
    a.stop();
    Ok(())
}
