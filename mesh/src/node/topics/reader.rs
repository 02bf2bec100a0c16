//! [`Reader`]: a local reader endpoint's handle.
//!
//! **Owns:** the handle and the test of whether an event is for it. **Must not touch:**
//! delivery (the shard core hands samples to the event queue and callbacks).

use super::Endpoint;
use crate::node::Event;
use crate::topics::EndpointGuid;
use shoal_proto::shard::Delivered;
use std::sync::Arc;

/// A reader on one topic, opened with [`Mesh::reader`](crate::Mesh::reader) or a shard
/// task's [`ShardContext::reader`](crate::ShardContext::reader). Its samples arrive as
/// [`Event::Sample`] events naming its GUID in the node's
/// [`EventReceiver`](crate::EventReceiver)s and [`on_event`](crate::MeshBuilder::on_event)
/// callbacks (the callbacks run on the shard that read the sample, the lowest latency), in
/// each writer's sequence order, once per sample. While a shard task holds the node's
/// [`ShardInbox`](crate::ShardInbox), they arrive there instead, as whole runs
/// ([`Delivered::Samples`], one entry per run of a writer's consecutive samples, nothing
/// copied per sample) with its loss reports ([`Delivered::Lost`]); [`owns`](Self::owns)
/// picks them out.
///
/// Clones are the same reader; dropping the last one removes the endpoint (its matches end
/// with [`Event::Unmatched`] and the mesh hears of the withdrawal). Keeps the node alive like
/// a [`Mesh`](crate::Mesh) clone.
#[derive(Debug, Clone)]
pub struct Reader {
    ep: Arc<Endpoint>,
}

impl Reader {
    pub(super) fn new(ep: Endpoint) -> Reader {
        Reader { ep: Arc::new(ep) }
    }

    /// The reader's GUID (the `reader` of its [`Event::Sample`]s and match events).
    pub fn guid(&self) -> EndpointGuid {
        self.ep.guid
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.ep.topic
    }

    /// True for an [`Event::Sample`], [`Event::Matched`], [`Event::Unmatched`] or
    /// [`Event::Incompatible`] about this reader.
    pub fn is_for(&self, ev: &Event) -> bool {
        match ev {
            Event::Sample { reader, .. }
            | Event::Matched { reader, .. }
            | Event::Unmatched { reader, .. }
            | Event::Incompatible { reader, .. } => *reader == self.ep.guid,
            _ => false,
        }
    }

    /// True for a shard task's inbox entry that is this reader's: a run of its samples
    /// ([`Delivered::Samples`], whose [`SampleRun::reader`](crate::node::shard_task::SampleRun::reader)
    /// is this reader's GUID) or a loss report for it ([`Delivered::Lost`]).
    pub fn owns(&self, d: &Delivered) -> bool {
        match d {
            Delivered::Samples(run) => run.reader == self.ep.guid,
            Delivered::Lost(l) => l.reader == self.ep.guid,
            Delivered::Message(_) => false,
        }
    }
}
