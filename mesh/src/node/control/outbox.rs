//! The control plane's channels to the shards: the pump sends the core's shard commands in
//! their order (a shard sees a link's `AddLink` before its `Install` and `Close`), attaching
//! the detached socket to each `AddLink`; the inbox feeds the shards' reports to the core.
//!
//! **Owns:** the ordered hand-off of shard commands and the inbox of shard reports. **Must not
//! touch:** their content.

use super::{run_actions, Ctl};
use crate::node::yield_now::YieldNow;
use shoal_proto::cmd::{ToControl, ToShard};
use shoal_runtime::channel::MeshReceiver;
use std::rc::Rc;

/// Commands the pump hands over per turn before it yields: a pump that always finds room in
/// the shard's lane would otherwise hold the control thread for the whole outbox.
const PUMP_TURN: usize = 64;

/// Shard reports the inbox task takes per batch; a full batch ends with a yield.
const INBOX_BATCH: usize = 64;

pub(super) async fn pump(ctl: Rc<Ctl>) {
    let mut turn = 0;
    loop {
        turn += 1;
        if turn >= PUMP_TURN {
            turn = 0;
            YieldNow(false).await;
        }
        let next = ctl.core.borrow_mut().poll_to_shard();
        let Some((to, cmd)) = next else {
            let l = ctl.outbox_ready.listen();
            if !ctl.core.borrow().has_shard_posts() {
                l.await;
            }
            continue;
        };
        let cmd = match cmd.retype() {
            Ok(cmd) => cmd,
            Err(nl) => {
                let link = nl.link;
                match ctl.socks.detach(link).await {
                    Some(conn) => ToShard::AddLink(Box::new(nl.with_conn(conn))),
                    None => {
                        ctl.feed(|c, now, wall| c.on_handoff_failed(link, now, wall));
                        continue;
                    }
                }
            }
        };
        ctl.to_shards.send(to, cmd).await;
    }
}

pub(super) async fn inbox(ctl: Rc<Ctl>, mut rx: MeshReceiver<ToControl>) {
    let mut batch = Vec::with_capacity(INBOX_BATCH);
    while let Ok(n) = rx.recv_batch(&mut batch, INBOX_BATCH).await {
        {
            let mut core = ctl.core.borrow_mut();
            let now = std::time::Instant::now();
            let wall = super::wall_ms();
            // One round for the whole batch (see `ControlCore::on_shard_reports`): the
            // further behind this thread is, the less each report costs.
            core.on_shard_reports(batch.drain(..).map(|(_, r)| r), now, wall);
        }
        run_actions(&ctl);
        // Shards that keep reporting (a start-up burst of Membership frames: thousands per
        // node at 40 nodes) would otherwise keep this task running for seconds, the rest of
        // the control thread starved: handshakes unread, the pump stalled, the hand-over of
        // established links to their shards late past the peer's heartbeat timeout (issue
        // 29). A short batch drained the inbox: the next receive parks this task anyway.
        if n == INBOX_BATCH {
            YieldNow(false).await;
        }
    }
}
