//! The control driver's topics calls: the application's endpoint commands fed to the
//! control core, and the view it publishes for `Mesh::topics`.
//!
//! **Owns:** the translation of the application's endpoint commands into control-core
//! calls. **Must not touch:** what the core decides (admission, matching, routes).
//!
//! INTEGRATION (H3 → lead): the control core does not drive `TopicsCore` yet (H2's branch
//! has the topics core but not its wiring into `ControlCore`). Until it does, these three
//! functions answer as a node without topics would: creation is refused with
//! `TopicError::Refused(TableFull { LocalEndpoints, capacity: 0 })`, removal is a no-op and
//! there is no view. Once `ControlCore::{create_endpoint, remove_endpoint, topics_view}`
//! exist, each body becomes the one call noted on it.

use crate::topics::{EndpointGuid, EndpointSpec, TopicError, TopicsView};
use shoal_proto::control::ControlCore;
use std::sync::Arc;
use std::time::Instant;

/// Creates a local endpoint. Once wired: `core.create_endpoint(spec.kind, &spec.topic,
/// &spec.type_name, spec.type_hash.0, spec.qos, &spec.partitions, now)`.
pub(super) fn create(
    core: &mut ControlCore,
    spec: &EndpointSpec,
    now: Instant,
) -> Result<EndpointGuid, TopicError> {
    let _ = (core, spec, now);
    Err(TopicError::Refused(
        shoal_discovery::graph::AdmitError::TableFull {
            table: shoal_discovery::graph::Table::LocalEndpoints,
            capacity: 0,
        },
    ))
}

/// Removes a local endpoint. Once wired: `core.remove_endpoint(guid, now)` (an unknown GUID
/// is not an error here: the handle went, the endpoint may have gone with a restart).
pub(super) fn remove(core: &mut ControlCore, guid: EndpointGuid, now: Instant) {
    let _ = (core, guid, now);
}

/// The topics view to publish. Once wired: `Some(core.topics_view())`.
pub(super) fn view(core: &mut ControlCore) -> Option<Arc<TopicsView>> {
    let _ = core;
    None
}
