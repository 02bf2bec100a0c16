//! The control driver's topics calls: the application's endpoint commands fed to the
//! control core, and the view it hands out for `Mesh::topics`.
//!
//! **Owns:** the translation of the application's endpoint commands into control-core
//! calls. **Must not touch:** what the core decides (admission, matching,
//! routes).

use crate::topics::{EndpointGuid, EndpointSpec, TopicError, TopicsView};
use shoal_proto::control::ControlCore;
use std::sync::Arc;
use std::time::Instant;

/// Creates a local endpoint (its match events follow from the same call's actions).
pub(super) fn create(
    core: &mut ControlCore,
    spec: &EndpointSpec,
    now: Instant,
    wall_ms: u64,
) -> Result<super::Created, TopicError> {
    let guid = core.create_endpoint(
        spec.kind,
        &spec.topic,
        &spec.type_name,
        spec.type_hash.0,
        spec.qos,
        &spec.partitions,
        now,
        wall_ms,
    )?;
    Ok((guid, core.writer_credit(&guid)))
}

/// Removes a local endpoint whose last handle went.
pub(super) fn remove(core: &mut ControlCore, guid: EndpointGuid, now: Instant, wall_ms: u64) {
    if let Err(e) = core.remove_endpoint(guid, now, wall_ms) {
        // Only an unknown GUID fails, and handles remove their endpoint once.
        tracing::debug!(error = %e, "endpoint removal");
    }
}

/// The topics view for the query snapshot (the same `Arc` until something changed).
pub(super) fn view(core: &mut ControlCore) -> Option<Arc<TopicsView>> {
    Some(core.topics_view())
}
