//! Who is on the mesh: [`crate::Mesh::nodes`] answers with a [`NodesView`], every member
//! as this node knows it. For observers (the `shoal` command's `nodes`, `graph` and
//! `watch`) and for applications that want to show their mesh.
//!
//! What each field rests on:
//! - **members and links**: the membership records every node floods (multimaster v1), so
//!   multimaster nodes appear too;
//! - **name, listen addresses, start time, link RTTs**: the node's own topics participant
//!   record (Shoal nodes; its `node_name`, or its id in hex), whose optional observer fields
//!   carry its start time and its links' round-trip times as the kernel measures them at
//!   its end (sampled about once a second, re-announced with the announce cycle);
//! - **this node's own links**: measured here, always current;
//! - **which frames a node speaks**: its participant record, this node's own link to it, or
//!   a neighbour's report of its link to it ([`NodeView::speaks_per`] says whose word);
//! - **identity**: verified signed identity records (identity mesh).
//!
//! A member with no participant record here ([`NodeView::topic_records`] false) is one whose
//! topic endpoints this node cannot know: a multimaster node, or a Shoal node every path to
//! which crosses one.
//!
//! **Owns:** the public names of the view. **Must not touch:** how it is built (the control
//! core's `shoal_proto::control::nodes`).

pub use shoal_proto::control::{LinkView, NodeIdentity, NodeView, NodesView, Speaks};
