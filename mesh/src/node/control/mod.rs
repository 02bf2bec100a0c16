//! The control plane's driver: it runs [`shoal_proto::control::ControlCore`] on the control
//! executor and carries out what the core decides. It owns the listener, the dials (and DNS),
//! the handshaking sockets, the multicast sockets, the timer and the ordered outbox to the
//! shards; it takes no protocol decision.
//!
//! **Owns:** the control executor: feeding the control core and carrying out its actions. **Must
//! not touch:** protocol decisions (the core takes them all).
//!
//! - [`sockets`]: accept loop, dials, one task per handshaking socket (reads go to the core,
//!   the core's writes and closes come back through the socket's mailbox), and the detaching
//!   of an established socket for its shard.
//! - [`outbox`]: the pump of the core's shard commands (attaching the socket of an `AddLink`)
//!   and the inbox of the shards' reports.
//! - [`scout`]: the multicast socket (beacons out, datagrams in).
//!
//! Every input is fed to the core under one `RefCell` borrow, followed by [`run_actions`],
//! which executes the core's actions and refreshes the query snapshot and the counters.

mod outbox;
mod scout;
mod sockets;
mod topics;

use super::event::{ErrorKind, Event};
use super::msg::{ControlEndpoint, ShardCmd};
use super::shared::{NodeShared, ShardLanes, Snapshot};
use super::stats::raise;
use super::warn::{flush_summaries, warn_limited, WarnLimiter, WARN_INTERVAL};
use crate::topics::{EndpointGuid, EndpointSpec, Reasons, TopicError};
use bytes::Bytes;
use event_listener::Event as Signal;
use shoal_proto::control::{Action, ControlCore, ControlErrorKind, ControlEvent, ControlInit};
use shoal_proto::topics::TopicEvent;
use shoal_proto::PeerId;
use shoal_runtime::channel::IngressReceiver;
use shoal_runtime::net::TcpListener;
use shoal_runtime::spawn_local;
use shoal_runtime::time::sleep_until;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Beacons waiting for the multicast socket (older ones are dropped: a beacon only repeats).
const BEACON_BACKLOG: usize = 4;

/// A created endpoint: its GUID, and for a reliable writer the write credit its handle waits
/// on.
pub(crate) type Created = (EndpointGuid, Option<Arc<shoal_proto::topics::WriterCredit>>);

/// Where a create command's answer goes (room for one: the control plane never waits).
pub(crate) type CreateReply = crate::node::reply::Reply<Result<Created, TopicError>>;

/// Requests from the application handle to the control plane (not to be confused with
/// `shoal_proto::cmd`, the commands between the executors).
#[derive(Debug)]
pub(crate) enum Request {
    /// Say Goodbye to every peer, close every link, then answer.
    Stop(mpsc::Sender<()>),
    /// Create a local writer or reader and answer with its GUID or the refusal.
    CreateEndpoint {
        /// The validated declaration (boxed: commands travel by value through a queue).
        spec: Box<EndpointSpec>,
        /// Where the answer goes (room for one: the control plane never waits on it).
        reply: CreateReply,
        /// Answer a writer at once rather than once its first route table reached every
        /// shard: the asker blocks a data shard's thread (an event callback there), which
        /// would never take that table while it waits.
        at_once: bool,
    },
    /// Remove a local endpoint (its last handle went).
    RemoveEndpoint(EndpointGuid),
    /// Answer with what the control plane knows about every member (`Mesh::nodes`; room
    /// for one: the control plane never waits on it).
    Nodes(mpsc::SyncSender<shoal_proto::control::NodesView>),
}

thread_local! {
    /// The control plane running on this thread (each node's control executor is a thread
    /// of its own): a command issued here, from a callback, is carried out on the spot.
    static HERE: RefCell<Option<(*const NodeShared, Weak<Ctl>)>> = const { RefCell::new(None) };
}

/// Carries `cmd` out at once if this thread runs `ns`'s control plane (a callback there must
/// not wait for its own executor); hands it back otherwise, for the command queue.
pub(crate) fn run_here(ns: &Arc<NodeShared>, cmd: Request) -> Result<(), Request> {
    let ctl = HERE
        .try_with(|h| match &*h.borrow() {
            Some((node, ctl)) if std::ptr::eq(*node, Arc::as_ptr(ns)) => ctl.upgrade(),
            _ => None,
        })
        .ok()
        .flatten();
    let Some(ctl) = ctl else {
        return Err(cmd);
    };
    if ctl.core.try_borrow_mut().is_err() {
        // Unreachable while callbacks run only between the core's calls (`run_actions`);
        // should that change, the caller gets `MeshError::NotRunning`, never a panic or a
        // hang (a removal is skipped; the endpoint goes with the node).
        if let Request::CreateEndpoint { reply, .. } = cmd {
            drop(reply);
        }
        return Ok(());
    }
    handle(&ctl, cmd, true);
    Ok(())
}

/// Carries out one command of the application (`inline`: on this thread, for a callback of
/// this control plane, which cannot wait for anything).
fn handle(ctl: &Rc<Ctl>, cmd: Request, inline: bool) {
    match cmd {
        Request::Stop(reply) => begin_stop(ctl, reply),
        Request::CreateEndpoint {
            spec,
            reply,
            at_once,
        } => {
            let r = ctl.feed(|c, now, wall| topics::create(c, &spec, now, wall));
            let wait_routes = !(inline || at_once);
            match r {
                Ok(created) if spec.kind == crate::topics::EndpointKind::Writer && wait_routes => {
                    let g = created.0;
                    let mut early = ctl.ready_early.borrow_mut();
                    if let Some(i) = early.iter().position(|e| *e == g) {
                        early.swap_remove(i);
                        reply.send(Ok(created));
                    } else {
                        ctl.pending_creates.borrow_mut().push((g, reply, created));
                    }
                }
                r => {
                    reply.send(r);
                }
            }
        }
        Request::RemoveEndpoint(guid) => {
            ctl.feed(|c, now, wall| topics::remove(c, guid, now, wall));
        }
        Request::Nodes(reply) => {
            let view = ctl.core.borrow().nodes_view(wall_ms());
            let _ = reply.try_send(view);
        }
    }
}

/// What the control-plane task starts with.
pub(crate) struct ControlStart {
    pub(crate) ns: Arc<NodeShared>,
    pub(crate) endpoint: ControlEndpoint,
    pub(crate) requests: IngressReceiver<Request>,
    pub(crate) listen: SocketAddr,
    pub(crate) ready: mpsc::Sender<std::io::Result<u16>>,
    /// Seeds the core's random choices, ephemeral keys included (from the OS).
    pub(crate) seed: [u8; 32],
}

/// The control plane's shared state on its executor.
pub(super) struct Ctl {
    ns: Arc<NodeShared>,
    /// Lanes to the shards (only the outbox's pump sends on them).
    to_shards: ShardLanes<ShardCmd>,
    listener: Rc<TcpListener>,
    core: RefCell<ControlCore>,
    socks: sockets::Sockets,
    outbox_ready: Signal,
    beacons: RefCell<VecDeque<Bytes>>,
    beacon_ready: Signal,
    /// Aggregates the warnings that hostile input can trigger at will.
    warns: RefCell<WarnLimiter>,
    stop_reply: RefCell<Option<mpsc::Sender<()>>>,
    /// The topics view in the last snapshot (a new `Arc` from the core means it changed).
    topics_view: RefCell<Option<Arc<crate::topics::TopicsView>>>,
    /// The discovery counters last handed out.
    discovery_stats: std::cell::Cell<crate::topics::DiscoveryStats>,
    /// Create commands of writers waiting for their first route table to reach every shard
    /// (so their first samples find it, not a shard that has to hold them).
    pending_creates: RefCell<Vec<(EndpointGuid, CreateReply, Created)>>,
    /// Writers reported ready during the command that created them (answered after it).
    ready_early: RefCell<Vec<EndpointGuid>>,
    /// An input may have moved the core's next deadline earlier (e.g. a route table that
    /// waits for its planning interval): the timer task looks again.
    rearm: Signal,
    /// The deadline the timer task sleeps until.
    armed: std::cell::Cell<Instant>,
}

impl Ctl {
    /// Feeds one input to the core (`f` gets it with `now` and the wall clock), then runs its
    /// actions.
    fn feed<T>(self: &Rc<Self>, f: impl FnOnce(&mut ControlCore, Instant, u64) -> T) -> T {
        let r = f(&mut self.core.borrow_mut(), Instant::now(), wall_ms());
        run_actions(self);
        r
    }
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The control plane's main task.
pub(crate) async fn run(init: ControlStart) {
    let ControlStart {
        ns,
        endpoint,
        mut requests,
        listen,
        ready,
        seed,
    } = init;
    let listener = match TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    // Set on the listener first: accepted connections start with it, and a name the kernel
    // refuses fails the start here rather than every connection later.
    let cc = &ns.cfg.tcp_congestion;
    if !cc.is_empty() {
        if let Err(e) = listener.set_congestion(cc) {
            let e = std::io::Error::new(e.kind(), format!("tcp_congestion = {cc:?}: {e}"));
            let _ = ready.send(Err(e));
            return;
        }
    }
    let port = match listener.local_addr() {
        Ok(a) => a.port(),
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(port));
    let (senders, rx) = endpoint.split();
    let core = ControlCore::new(
        ControlInit {
            me: ns.me,
            cfg: ns.cfg.clone(),
            shards: ns.shards,
            listen_port: port,
            secure: ns.secure_ctx(),
            seed,
            epoch: ns.epoch,
            // The address bound, port resolved; a wildcard address is announced as such and
            // the receivers' locator gates decide (see `TopicsConfig::locators_wildcard`).
            listen_addrs: vec![SocketAddr::new(listen.ip(), port)],
        },
        Instant::now(),
        wall_ms(),
    );
    let listener = Rc::new(listener);
    let ctl = Rc::new(Ctl {
        listener: listener.clone(),
        to_shards: ShardLanes::new(senders, ns.shards),
        core: RefCell::new(core),
        socks: sockets::Sockets::default(),
        outbox_ready: Signal::new(),
        beacons: RefCell::new(VecDeque::new()),
        beacon_ready: Signal::new(),
        warns: RefCell::new(WarnLimiter::new(WARN_INTERVAL)),
        stop_reply: RefCell::new(None),
        topics_view: RefCell::new(None),
        discovery_stats: std::cell::Cell::new(Default::default()),
        pending_creates: RefCell::new(Vec::new()),
        ready_early: RefCell::new(Vec::new()),
        rearm: Signal::new(),
        armed: std::cell::Cell::new(Instant::now()),
        ns,
    });
    let _ = HERE.try_with(|h| *h.borrow_mut() = Some((Arc::as_ptr(&ctl.ns), Rc::downgrade(&ctl))));
    tracing::info!(id = %ctl.ns.me, port, "mesh node listening");
    spawn_local(outbox::pump(ctl.clone())).detach();
    spawn_local(outbox::inbox(ctl.clone(), rx)).detach();
    spawn_local(sockets::accept_loop(ctl.clone(), listener)).detach();
    if ctl.ns.cfg.scouting {
        spawn_local(scout::run(ctl.clone())).detach();
    }
    spawn_local(tick(ctl.clone())).detach();
    ctl.feed(|c, now, wall| c.start(now, wall));
    while let Ok(cmd) = requests.recv().await {
        handle(&ctl, cmd, false);
    }
}

/// The control plane's timer: it sleeps until the core's next deadline (or the warning
/// summaries' next flush), and wakes early only when an input moved that deadline earlier
/// (`rearm`) or the trust policy changed (`trust_changed`). Nothing here runs on a period: an
/// idle node's control thread wakes only for work the core scheduled (issue 29).
async fn tick(ctl: Rc<Ctl>) {
    use futures_util::future::{select, Either};
    loop {
        let rearmed = ctl.rearm.listen();
        let trust = ctl.ns.trust_changed.listen();
        let core_next = ctl.core.borrow().poll_timeout();
        let next = match ctl.warns.borrow().next_flush() {
            Some(w) => core_next.min(w),
            None => core_next,
        };
        ctl.armed.set(core_next);
        let sleep = std::pin::pin!(sleep_until(next));
        let woke = select(sleep, select(rearmed, trust)).await;
        // `Mesh::revoke_key` only replaces the shared context and raises `trust_changed`;
        // the core sees the new policy here, whichever thread revoked (an event callback
        // cannot wait).
        let ctx = ctl.ns.secure_ctx();
        let now = Instant::now();
        let due = now >= ctl.core.borrow().poll_timeout();
        if let Either::Right((Either::Left(_), _)) = woke {
            if !due {
                // Woken for a deadline that is not due yet: sleep again until it is.
                continue;
            }
        }
        ctl.feed(|c, now, wall| {
            if let Some(ctx) = ctx {
                c.set_secure_context(ctx, now, wall);
            }
            if due {
                c.handle_timeout(now, wall);
            }
        });
        flush_summaries(&mut ctl.warns.borrow_mut(), Instant::now());
    }
}

fn begin_stop(ctl: &Rc<Ctl>, reply: mpsc::Sender<()>) {
    ctl.ns.stopping.store(true, Ordering::Release);
    // Free the port at once (a restarted node may bind it right after stop returns).
    if let Err(e) = ctl.listener.shutdown() {
        tracing::debug!(error = %e, "listener shutdown");
    }
    *ctl.stop_reply.borrow_mut() = Some(reply);
    ctl.feed(|c, now, wall| c.stop(now, wall));
}

/// Refreshes the query snapshot, then executes the core's actions, then refreshes it and the
/// counters. The snapshot goes first: an application that sees `PeerConnected` may publish at
/// once, and must then find the peer counted (the publish path answers `NoRoute` otherwise).
pub(super) fn run_actions(ctl: &Rc<Ctl>) {
    // Every input ends here (commands, shard reports, socket events): if it moved the core's
    // next deadline earlier, the timer task looks again.
    if ctl.core.borrow().poll_timeout() < ctl.armed.get() {
        ctl.rearm.notify(1);
    }
    refresh_snapshot(ctl);
    loop {
        let next = ctl.core.borrow_mut().poll_action();
        let Some(a) = next else { break };
        match a {
            Action::Dial { link, target } => sockets::dial(ctl, link, target),
            Action::Write { link, bytes } => ctl.socks.write(link, bytes),
            Action::Close { link } => ctl.socks.close(link),
            Action::Beacon(b) => {
                let mut q = ctl.beacons.borrow_mut();
                if q.len() >= BEACON_BACKLOG {
                    q.pop_front();
                }
                q.push_back(b);
                ctl.beacon_ready.notify(1);
            }
            Action::Event(e) => match to_event(e) {
                Ok(ev) => ctl.ns.hub.emit_control(ev, ctl.ns.control_counters()),
                Err(endpoint) => ready(ctl, endpoint),
            },
            Action::Name { node, name } => ctl.ns.set_name(node, name.as_deref()),
            Action::Warn { key, detail } => {
                warn_limited!(ctl.warns.borrow_mut(), key, detail = %detail)
            }
            Action::Stopped => {
                if let Some(r) = ctl.stop_reply.borrow_mut().take() {
                    let _ = r.send(());
                }
            }
        }
    }
    if ctl.core.borrow().has_shard_posts() {
        ctl.outbox_ready.notify(1);
    }
    refresh_snapshot(ctl);
}

/// The query snapshot (when it may have changed) and the counters, as the core has them now.
fn refresh_snapshot(ctl: &Ctl) {
    let mut core = ctl.core.borrow_mut();
    let view = topics::view(&mut core);
    let new_view = {
        let mut last = ctl.topics_view.borrow_mut();
        let same = match (&*last, &view) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        *last = view.clone();
        !same
    };
    if core.take_changed() {
        let snap = Snapshot {
            connected: core.connected_peers().copied().collect::<Vec<PeerId>>(),
            links: core.links().collect(),
            known: core.known_peers().copied().collect(),
            members: core.members().copied().collect(),
            budgets: core.budgets().cloned().collect(),
            topics: view,
        };
        ctl.ns
            .connected
            .store(snap.connected.len(), Ordering::Release);
        if let Ok(mut s) = ctl.ns.snapshot.lock() {
            *s = snap;
        }
    } else if new_view {
        if let Ok(mut s) = ctl.ns.snapshot.lock() {
            s.topics = view;
        }
    }
    let ts = core.discovery_stats();
    if ts != ctl.discovery_stats.get() {
        ctl.discovery_stats.set(ts);
        *ctl.ns
            .discovery_stats
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = ts;
    }
    let s = core.stats();
    let c = ctl.ns.control_counters();
    raise(&c.auth_failures, s.auth_failures);
    raise(&c.malformed_frames, s.malformed_frames);
    raise(&c.oversize_frames, s.oversize_frames);
    raise(&c.identity_records_dropped, s.identity_records_dropped);
    raise(&c.announces_dropped, s.announces_dropped);
    raise(&c.dropped_queue_full, s.dropped_queue_full);
    raise(&c.announces_rate_limited, s.announces_rate_limited);
    raise(&c.dials_rate_limited, s.dials_rate_limited);
    raise(&c.peers_evicted, s.peers_evicted);
    raise(&c.peer_table_full, s.peer_table_full);
    raise(&c.connections_refused, s.connections_refused);
    raise(&c.handshakes_evicted, s.handshakes_evicted);
    raise(&c.record_signatures_verified, s.record_signatures_verified);
    raise(&c.bad_record_signatures, s.bad_record_signatures);
    raise(&c.untrusted_record_signers, s.untrusted_record_signers);
    raise(&c.unsigned_records_refused, s.unsigned_records_refused);
    raise(&c.unsigned_records_withheld, s.unsigned_records_withheld);
    raise(&c.membership_records_refused, s.membership_records_refused);
    raise(&c.claims_refused, s.claims_refused);
    raise(&c.slow_links_unlisted, s.slow_links_unlisted);
    if let Some(d) = core.degree_stats() {
        raise(&c.cap_fill_dials, d.fill_dials);
        raise(&c.cap_heal_dials, d.heal_dials);
        raise(&c.cap_links_refused, d.links_refused);
        raise(&c.cap_links_shed, d.links_shed);
        raise(&c.cap_dials_refused, d.dials_refused);
    }
}

/// A writer's first route table reached every shard: its create command is answered.
fn ready(ctl: &Ctl, endpoint: EndpointGuid) {
    let mut pending = ctl.pending_creates.borrow_mut();
    match pending.iter().position(|(g, ..)| *g == endpoint) {
        Some(i) => {
            let (_, reply, created) = pending.swap_remove(i);
            reply.send(Ok(created));
        }
        // Created from a callback (answered at once), or ready within its own command.
        None => {
            let mut early = ctl.ready_early.borrow_mut();
            // Bounded: entries of callback-created writers are never claimed.
            if early.len() >= 64 {
                early.remove(0);
            }
            early.push(endpoint);
        }
    }
}

/// The application's event for `e`, or (`Err`) the writer whose create command `e` answers.
fn to_event(e: ControlEvent) -> Result<Event, EndpointGuid> {
    Ok(match e {
        ControlEvent::EndpointReady { endpoint } => return Err(endpoint),
        ControlEvent::PeerDiscovered { peer, addr } => Event::PeerDiscovered { peer, addr },
        ControlEvent::PeerConnected { peer } => Event::PeerConnected { peer },
        ControlEvent::PeerDisconnected { peer } => Event::PeerDisconnected { peer },
        ControlEvent::PeerLost { peer } => Event::PeerLost { peer },
        ControlEvent::MemberJoined { peer } => Event::MemberJoined { peer },
        ControlEvent::MemberLeft { peer } => Event::MemberLeft { peer },
        ControlEvent::Topic(TopicEvent::Matched {
            writer,
            reader,
            topic,
            local,
        }) => Event::Matched {
            writer,
            reader,
            topic,
            local,
        },
        ControlEvent::Topic(TopicEvent::Unmatched {
            writer,
            reader,
            topic,
            local,
        }) => Event::Unmatched {
            writer,
            reader,
            topic,
            local,
        },
        ControlEvent::Topic(TopicEvent::Incompatible {
            writer,
            reader,
            topic,
            reasons,
        }) => Event::Incompatible {
            writer,
            reader,
            topic,
            reasons: Reasons(reasons),
        },
        ControlEvent::Error {
            peer,
            kind,
            message,
        } => Event::Error {
            peer,
            kind: match kind {
                ControlErrorKind::Malformed => ErrorKind::Malformed,
                ControlErrorKind::Oversize => ErrorKind::Oversize,
                ControlErrorKind::Scouting => ErrorKind::Scouting,
                ControlErrorKind::ModeMismatch => ErrorKind::ModeMismatch,
                ControlErrorKind::Crypto => ErrorKind::Crypto,
                ControlErrorKind::Identity => ErrorKind::Identity,
            },
            message,
        },
    })
}
