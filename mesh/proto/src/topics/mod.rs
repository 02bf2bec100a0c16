//! Topics: DDS-style discovery and matching of writers and readers over the mesh, and the
//! sample routes computed from the matches and the membership graph (issue 12).
//!
//! **Owns:** what the control core decides about topics: the discovery graph
//! (`shoal-discovery`), this node's announcement records, the flood of Discovery frames,
//! admission and lease expiry, match / unmatch / incompatible events, and the route tables
//! pushed to the shards ([`routes`]). **Must not touch:** sockets, the clock, the sample
//! path (the shard core carries routes out; it never asks this module anything).

pub mod config;
pub mod core;
pub mod credit;
pub mod routes;
pub mod tree;

pub use self::config::{TopicsConfig, TopicsConfigError};
pub use self::core::{
    DiscoveryStats, EndpointView, LocalSide, PlannerStats, RouteInput, RoutePlanner, TopicError,
    TopicEvent, TopicView, TopicsCore, TopicsInit, TopicsOutput, TopicsView, TreePlanner,
    WriterDemand,
};
pub use credit::WriterCredit;
pub use routes::{EndpointGuid, ReliableRoute, ReliableWriterSpec, SampleRoutes, WriterRoute};
/// The discovery library the public API speaks in (`EndpointKind`, `EndpointQos`,
/// `Incompatibility`, rejection tables), for crates that do not depend on it themselves.
pub use shoal_discovery;
pub use tree::{compute_routes, RouteOutput, RouteStats, SlotAllocator, SlotsFull, WriterInput};
