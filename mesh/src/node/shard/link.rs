//! The tasks of one link: its reader, writer and timer.
//!
//! The reader reads into the buffer the core hands out (reusing blocks the application has
//! released, see [`super::super::recycle`]) and lets the core parse and route every whole
//! frame; the writer writes what the core gathers (or seals) into one vectored write per
//! batch, and samples the link's round-trip time about once a second for observers; the
//! timer fires the link's heartbeat and liveness checks when the core says (on the shard's
//! timer grid, so an idle shard wakes once for all its links due together), or at once on a
//! slow-peer kill, and looks at the link's acknowledgements each time (a peer that
//! acknowledges nothing is counted). Where the connection's acknowledged bytes stand is read
//! before the first write, by the writer with its send-queue samples, and by the reader or
//! writer once more when the connection fails: what the kernel held unacknowledged when the
//! link closed is counted (`unacked_link_closed`).
//!
//! **Owns:** the link's socket halves and tasks. **Must not touch:** what is read, written,
//! counted or closed (the core's).

use super::{carry, settle, Ctx, LinkTasks, Signal, Who, REST_BLOCK_FACTOR};
use bytes::Bytes;
use shoal_proto::budget::SEND_QUEUE_SAMPLE;
use shoal_proto::shard::{AckSample, ReadStep, ShardAction, WriteStep};
use shoal_proto::LinkId;
use shoal_runtime::net::{TcpProbe, TcpReadHalf, TcpStream, TcpWriteHalf};
use shoal_runtime::spawn_local;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Instant;

/// How often a link's writer samples the kernel's RTT estimate: after its first write, so an
/// observer that lives a moment (`shoal nodes`) has its own links' round trips.
const RTT_SAMPLE_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// Starts the tasks of a link the core now serves; if its socket cannot join this shard's
/// executor, the core hears the link is lost.
pub(super) fn attach(
    ctx: &Rc<Ctx>,
    link: LinkId,
    stream: std::net::TcpStream,
    actions: &mut Vec<ShardAction>,
) {
    let stream = match TcpStream::from_std(stream) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(?link, error = %e, "could not attach connection to its shard");
            ctx.core.borrow_mut().on_link_lost(link, ctx.now(), actions);
            return;
        }
    };
    // Where this shard's writes begin in what the kernel counts as acknowledged (the
    // handshake's bytes came before): the send queue read on both sides of the count, so no
    // acknowledgement moved bytes between the two reads. Nothing else writes yet.
    let start = (0..3).find_map(|_| {
        let before = stream.send_queue().ok()?;
        let acked = stream.path_state().ok()?.bytes_acked;
        (stream.send_queue().ok()? == before).then_some((acked, before))
    });
    if let Some((acked, queued)) = start {
        ctx.core.borrow_mut().on_link_start(link, acked, queued);
    }
    let (rd, wr) = stream.into_split();
    let probe = Rc::new(RefCell::new(Some(wr.probe())));
    let busy = Rc::new(Cell::new(false));
    let read_on = Rc::new(Signal::new());
    let tasks = LinkTasks {
        reader: Some(spawn_local(reader(
            ctx.clone(),
            link,
            rd,
            busy.clone(),
            read_on.clone(),
            probe.clone(),
        ))),
        writer: Some(spawn_local(writer(ctx.clone(), link, wr))),
        reader_busy: busy,
        read_on,
        probe: probe.clone(),
    };
    ctx.tasks.borrow_mut().insert(link, tasks);
    spawn_local(timer(ctx.clone(), link, probe)).detach();
}

/// Feeds what a link's reads bring to the core, which parses and routes it.
///
/// While it waits to carry out what a read produced, `busy` is raised: the link may end
/// meanwhile (its writer or timer saw it go), and the messages it holds were received whole,
/// so it is left to hand them out rather than cancelled; it then finds the link gone.
///
/// Told to hold (a dial race's winner, whose loser is still being read), it reads nothing
/// until `read_on` is signalled: the core says so once the loser has ended.
async fn reader(
    ctx: Rc<Ctx>,
    link: LinkId,
    mut rd: TcpReadHalf,
    busy: Rc<Cell<bool>>,
    read_on: Rc<Signal>,
    probe: Rc<RefCell<Option<TcpProbe>>>,
) {
    let (mut actions, mut waits) = (Vec::new(), Vec::new());
    let who = Who::Reader(link);
    loop {
        // Also before the first read: the handshake may have left whole frames.
        let now = ctx.now();
        let step = ctx.core.borrow_mut().read_frames(link, now, &mut actions);
        carry(&ctx, &mut actions, &mut waits, who);
        if !waits.is_empty() {
            // Busy, not dead, while it waits: its timer keeps it alive.
            ctx.core.borrow_mut().set_stalled(link, true);
            busy.set(true);
            settle(&ctx, &mut waits, who).await;
            busy.set(false);
            ctx.core.borrow_mut().set_stalled(link, false);
        }
        match step {
            ReadStep::More => continue,
            ReadStep::NeedBytes => {}
            ReadStep::Hold => {
                // The core answers on this thread, in a later call: nothing can signal
                // between the step and the listener.
                read_on.listen().await;
                continue;
            }
            ReadStep::Gone => return,
        }
        ctx.wake_receivers();
        let Some((mut buf, want)) = ctx.core.borrow_mut().read_buffer(link) else {
            return;
        };
        let leave_above = ctx
            .core
            .borrow()
            .read_rested(link)
            .then_some(want.saturating_mul(REST_BLOCK_FACTOR));
        ctx.read_blocks
            .borrow_mut()
            .make_room(&mut buf, want, want, leave_above);
        let (res, buf) = rd.read(buf).await;
        if !matches!(res, Ok(n) if n > 0) {
            // The connection ends: what its peer acknowledged last, before the link goes
            // (after a reset only `TCP_INFO` still says).
            if let Some(Ok(p)) = probe.borrow().as_ref().map(TcpProbe::path_state) {
                let now = ctx.now();
                ctx.core
                    .borrow_mut()
                    .on_bytes_acked(link, p.bytes_acked, now);
            }
        }
        match res {
            Ok(0) => {
                let now = ctx.tick();
                ctx.core.borrow_mut().on_eof(link, buf, now, &mut actions);
            }
            Ok(n) => {
                let now = ctx.tick();
                ctx.core.borrow_mut().on_read(link, buf, n, now);
                continue;
            }
            Err(e) => {
                tracing::debug!(error = %e, "link read failed");
                let now = ctx.tick();
                ctx.core.borrow_mut().on_link_lost(link, now, &mut actions);
            }
        }
        carry(&ctx, &mut actions, &mut waits, who);
        settle(&ctx, &mut waits, who).await;
        return;
    }
}

/// Writes what the core takes off the link's queue, one vectored write per batch.
async fn writer(ctx: Rc<Ctx>, link: LinkId, mut wr: TcpWriteHalf) {
    let Some(budget) = ctx.core.borrow().link_budget(link) else {
        return;
    };
    let (mut actions, mut waits) = (Vec::new(), Vec::new());
    let who = Who::Writer(link);
    // Grows to what the largest batch needed (at most `MAX_IOVECS` buffers, capped by the
    // core) and is reused for the link's life. Not reserved up front: at 32 KiB per link the
    // idle links of a 60-node full mesh held 1.9 MB of each node's 4 MB heap.
    let mut bufs: Vec<Bytes> = Vec::new();
    // The next RTT sample for observers (`Mesh::nodes`): at most one `getsockopt` per
    // `RTT_SAMPLE_PERIOD`, after a write (an idle link still writes its heartbeats).
    let mut next_rtt = Instant::now();
    // The next sample of the kernel's send queue (every write while the control plane
    // watches the link): the link's backlog is what is queued here *and* there
    // (`shoal_proto::budget` lag rule).
    let mut next_send_queue = Instant::now();
    loop {
        let now = ctx.now();
        let step = ctx
            .core
            .borrow_mut()
            .next_write(link, &mut bufs, now, &mut actions);
        match step {
            WriteStep::Write => {}
            WriteStep::Idle => {
                let listener = budget.wake.listen();
                if !ctx.core.borrow().write_pending(link) {
                    listener.await;
                }
                continue;
            }
            WriteStep::Shutdown => {
                let _ = wr.shutdown().await;
                let now = ctx.tick();
                // The reader drains the socket until the peer closes too (see the core's
                // `on_write_shutdown`): dropping it now could reset the peer.
                ctx.core.borrow_mut().on_write_shutdown(link, now);
                break;
            }
            WriteStep::Gone => break,
        }
        let bytes: usize = bufs.iter().map(Bytes::len).sum();
        let (res, v) = wr.write_all_vectored(std::mem::take(&mut bufs)).await;
        bufs = v;
        bufs.clear();
        let now = ctx.tick();
        match res {
            Ok(()) => {
                // Sampled before the write is reported: a slow mark it clears is then never
                // judged with an older sample (`LinkBudget::set_send_queue`).
                if now >= next_send_queue || budget.send_queue_watched() {
                    next_send_queue = now + SEND_QUEUE_SAMPLE;
                    if let Ok(p) = wr.path_state() {
                        ctx.core
                            .borrow_mut()
                            .on_bytes_acked(link, p.bytes_acked, now);
                    }
                    if let Ok(n) = wr.send_queue() {
                        ctx.core
                            .borrow_mut()
                            .on_send_queue(link, n, now, &mut actions);
                        if !actions.is_empty() {
                            // A lagging link's report, at once.
                            carry(&ctx, &mut actions, &mut waits, who);
                            settle(&ctx, &mut waits, who).await;
                        }
                    }
                }
                ctx.core.borrow_mut().on_written(link, bytes, now);
                if now >= next_rtt {
                    next_rtt = now + RTT_SAMPLE_PERIOD;
                    if let Ok(rtt) = wr.rtt() {
                        budget.set_rtt(rtt);
                    }
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "link write failed");
                if let Ok(p) = wr.path_state() {
                    ctx.core
                        .borrow_mut()
                        .on_bytes_acked(link, p.bytes_acked, now);
                }
                ctx.core.borrow_mut().on_link_lost(link, now, &mut actions);
                break;
            }
        }
    }
    carry(&ctx, &mut actions, &mut waits, who);
    settle(&ctx, &mut waits, who).await;
}

/// Fires the link's timer (heartbeat, liveness) when the core says, or at once when a
/// Disconnect-policy kill is requested (also while the writer is stuck on a full socket).
/// The core puts the deadlines of a shard's links on one grid, so the timers of links due
/// together fire in one wake-up of the thread.
///
/// Each time it fires (at least once a heartbeat interval: the heartbeat deadline moves with
/// every frame queued, and the timer wakes at the old one) it also looks at the link's
/// acknowledgements and its kernel send queue through `probe`, which the link's end takes
/// away. Not the writer alone: a path that drops everything soon fills the socket, and a
/// write stuck on it keeps the writer from looking at all.
async fn timer(ctx: Rc<Ctx>, link: LinkId, probe: Rc<RefCell<Option<TcpProbe>>>) {
    let Some(budget) = ctx.core.borrow().link_budget(link) else {
        return;
    };
    let (mut actions, mut waits) = (Vec::new(), Vec::new());
    loop {
        let killed = budget.killed.listen();
        let Some(deadline) = ctx.core.borrow().link_timeout(link, Instant::now()) else {
            return;
        };
        if !budget.kill_requested() {
            let sleep = std::pin::pin!(shoal_runtime::time::sleep_until(deadline));
            futures_util::future::select(sleep, killed).await;
        }
        let now = Instant::now();
        // Before the liveness check: a peer still acknowledging what it is sent keeps a
        // silent link (`Link::on_delivered`).
        let sample = probe
            .borrow()
            .as_ref()
            .map(|p| (p.path_state(), p.send_queue()));
        if let Some((path, queued)) = sample {
            let mut core = ctx.core.borrow_mut();
            if let Ok(p) = path {
                let ack = AckSample {
                    unacked: p.unacked,
                    timeouts: p.timeouts,
                    since_ack: p.since_ack,
                    bytes_acked: p.bytes_acked,
                };
                core.on_ack_sample(link, ack, now);
            }
            if let Ok(n) = queued {
                core.on_send_queue(link, n, now, &mut actions);
            }
        }
        let live = ctx.core.borrow_mut().on_link_timer(link, now, &mut actions);
        carry(&ctx, &mut actions, &mut waits, Who::Other);
        settle(&ctx, &mut waits, Who::Other).await;
        if !live {
            return;
        }
    }
}
