//! The ingress task of the origin shard: what the application publishes, fed to the core in
//! batches.
//!
//! **Owns:** the ingress queue's receiving end and the publisher's yield rhythm. **Must not
//! touch:** origination itself (the core's [`ShardCore::publish`]).
//!
//! [`ShardCore::publish`]: shoal_proto::shard::ShardCore::publish

use super::{carry, settle, Ctx, Publish, Who};
use crate::node::yield_now::YieldNow;
use shoal_runtime::channel::IngressReceiver;
use std::rc::Rc;

/// Messages the publisher task takes from the ingress per turn. Each turn ends with a yield,
/// and each yield is a pass of the executor (an `io_uring_enter`); 256 frames of 64 bytes
/// are ~50 µs of work, short enough for the link tasks to run in time.
const PUBLISH_BATCH: usize = 256;

pub(super) async fn ingress_loop(ctx: Rc<Ctx>, mut rx: IngressReceiver<Publish>) {
    let mut batch = Vec::with_capacity(PUBLISH_BATCH);
    let (mut actions, mut waits) = (Vec::new(), Vec::new());
    while let Ok(n) = rx.recv_batch(&mut batch, PUBLISH_BATCH).await {
        ctx.tick();
        for p in batch.drain(..) {
            ctx.core.borrow_mut().publish(p, ctx.now(), &mut actions);
            carry(&ctx, &mut actions, &mut waits, Who::Other);
            if !waits.is_empty() {
                settle(&ctx, &mut waits, Who::Other).await;
            }
        }
        ctx.wake_receivers();
        // A publisher that always finds its ingress non-empty would otherwise never let the
        // writers run, and every queue would look full to it. A short batch drained the
        // ingress, so the next receive parks this task anyway and a yield would only cost
        // the executor another round.
        if n == PUBLISH_BATCH {
            YieldNow(false).await;
        }
    }
}
