//! The control plane's channels to the shards: the pump sends the core's shard commands in
//! their order (a shard sees a link's `AddLink` before its `Install` and `Close`), attaching
//! the detached socket to each `AddLink`; the inbox feeds the shards' reports to the core.
//!
//! **Owns:** the ordered hand-off of shard commands and the inbox of shard reports. **Must not
//! touch:** their content.

use super::{run_actions, Ctl};
use shoal_proto::cmd::{ToControl, ToShard};
use shoal_runtime::channel::MeshReceiver;
use std::rc::Rc;

pub(super) async fn pump(ctl: Rc<Ctl>) {
    loop {
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
    let mut batch = Vec::with_capacity(64);
    while rx.recv_batch(&mut batch, 64).await.is_ok() {
        {
            let mut core = ctl.core.borrow_mut();
            let now = std::time::Instant::now();
            let wall = super::wall_ms();
            for (_, r) in batch.drain(..) {
                core.on_shard_report(r, now, wall);
            }
        }
        run_actions(&ctl);
    }
}
