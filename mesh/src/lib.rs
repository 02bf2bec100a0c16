//! shoal-mesh: the multimaster v1 mesh — nodes that find each other, link over TCP and flood
//! or relay messages, byte-compatible with the C++ `multimaster` library.
//!
//! Two nodes on loopback, one broadcast, one receive, one topic sample (the README's quick
//! start):
//!
//! ```rust
//! use shoal_mesh::topics::Topic;
//! use shoal_mesh::{Event, EventReceiver, Mesh, MeshBuilder};
//! use std::time::Duration;
//!
//! /// The next event that `want` accepts (each waited for at most 10 s).
//! fn next(rx: &mut EventReceiver, want: impl Fn(&Event) -> bool) -> Event {
//!     loop {
//!         let ev = rx.recv_timeout(Duration::from_secs(10)).expect("an event");
//!         if want(&ev) {
//!             return ev;
//!         }
//!     }
//! }
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let local = |b: MeshBuilder| b.scouting(false).listen_addr([127, 0, 0, 1].into());
//!     let a = local(Mesh::builder()).build()?;
//!     let mut a_events = a.events(); // taken before start: no event is missed
//!     a.start()?;
//!     let b = local(Mesh::builder()).static_peer(format!("127.0.0.1:{}", a.listen_port()));
//!     let b = b.build()?;
//!     let mut b_events = b.events();
//!     b.start()?;
//!
//!     next(&mut a_events, |ev| matches!(ev, Event::PeerConnected { .. }));
//!     a.broadcast_blocking("hello, shoal")?;
//!     let got = next(&mut b_events, |ev| matches!(ev, Event::Message { .. }));
//!     let Event::Message { from, payload, .. } = got else { unreachable!() };
//!     assert_eq!((from, &payload[..]), (a.id(), &b"hello, shoal"[..]));
//!
//!     // Topics: a writer on `a`, a reader on `b`; both nodes report the match.
//!     let imu = Topic::new("sensors/imu", "Imu").reliable().partitions(["robot/1"]);
//!     let reader = b.reader(imu.clone())?;
//!     let mut writer = a.writer(imu)?;
//!     next(&mut a_events, |ev| matches!(ev, Event::Matched { .. }));
//!     next(&mut b_events, |ev| matches!(ev, Event::Matched { .. }));
//!     writer.write_blocking(b"x=1")?; // sequence number 1
//!     writer.flush_blocking()?;
//!     let got = next(&mut b_events, |ev| reader.is_for(ev) && matches!(ev, Event::Sample { .. }));
//!     let Event::Sample { writer: w, seq, payload, .. } = got else { unreachable!() };
//!     assert_eq!((w, seq, &payload[..]), (writer.guid(), 1, &b"x=1"[..]));
//!     a.stop();
//!     b.stop();
//!     Ok(())
//! }
//! ```
//!
//! **Owns:** the driver of the protocol: the live node ([`node`], re-exported here as
//! [`Mesh`]) with its sockets, tasks, timers and threads on `shoal-runtime`'s executors; the
//! application API (events, callbacks, [`Publisher`], the [`topics`] handles, stats and,
//! with the default `prometheus` feature, their rendering in `metrics`); the node options and the identity
//! seed file ([`identity_file`]). The protocol itself (wire codec, state machines,
//! cryptography, settings) is the I/O-free crate `shoal-proto`, re-exported here whole as
//! [`proto`] and by module as [`wire`], [`crypto`], [`config`] and [`id`].
//!
//! **Must not touch:** protocol logic that needs no I/O (it belongs in `shoal-proto`):
//! matching, admission and sample routes are the control core's (`shoal_proto::topics`,
//! on `shoal-discovery`), whose QoS and name types [`topics`] re-exports. The mesh moves
//! opaque payloads. It never names compio or io_uring: all I/O goes through `shoal-runtime`, so the
//! executor can change without touching this crate.
//!
//! Start with [`Mesh::builder`]; the threading contract and the backpressure rules are in
//! the [`node`] module docs, the Hello extension layout in [`wire`].

pub mod identity_file;
#[cfg(feature = "prometheus")]
pub mod metrics;
pub mod node;
pub mod nodes;
pub mod topics;
pub use node::ErrorLog;
pub use node::{
    ErrorKind, Event, EventReceiver, LinkInfo, Mesh, MeshBuilder, MeshError, MeshStats,
    NodeOptions, OverflowPolicy, PublishError, Publisher, Received, SampleBatch, ShardContext,
    ShardInbox, ShardStats, ShardTask, ShardTaskError, ShardWriter, SlowLinkAction, SlowLinkPolicy,
    StatCounter,
};
/// The protocol crate, whole: its state machines at the top, [`wire`], [`crypto`], [`config`].
pub use shoal_proto as proto;
pub use shoal_proto::{config, crypto, id, wire};
pub use shoal_proto::{MeshConfig, MsgId, PeerId};

/// The README, so `cargo test` compiles and runs its Rust blocks (the quick start).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    /// The first ```rust block of a Markdown text, or of `//!` doc lines.
    fn first_rust_block(text: &str) -> String {
        text.lines()
            .map(|l| {
                l.strip_prefix("//!")
                    .map_or(l, |d| d.strip_prefix(' ').unwrap_or(d))
            })
            .skip_while(|l| *l != "```rust")
            .skip(1)
            .take_while(|l| *l != "```")
            .map(|l| format!("{}\n", l.trim_end()))
            .collect()
    }

    #[test]
    fn the_crate_docs_open_with_the_readme_quick_start() {
        let readme = first_rust_block(include_str!("../../README.md"));
        let docs = first_rust_block(include_str!("lib.rs"));
        assert!(readme.contains("broadcast_blocking"), "{readme}");
        assert_eq!(docs, readme, "lib.rs docs and README quick start differ");
    }
}
