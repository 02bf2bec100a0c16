//! The control plane: listener, dialing and handshakes, the peer table, membership and
//! discovery. It tells the shards everything they need (links to serve, routing tables,
//! frames to send) and is never asked anything on the message path.
//!
//! Connections are accepted or dialed here and run their Hello exchange here; an established
//! connection is then detached from this executor and handed, with the bytes read after the
//! peer's Hello, to the shard that owns the peer (`link_shard`). Every message to the shards
//! goes through one ordered outbox, so a shard sees a link's `AddLink` before its `Install`
//! and `Close`.
//!
//! Secured mesh (`crypto.md`): the Hello carries this connection's ephemeral key (and the
//! identity), each side sends its AuthConfirm in plaintext as soon as the peer's Hello passed
//! the checks, and the link is established once the peer's AuthConfirm verified. Every byte
//! after that frame is records: they go to the shard unread, with the record keys. Identity
//! records (own one to each new neighbour and every `membership_interval`, others re-flooded
//! once when new) and revocation are handled here too.

use super::event::{ErrorKind, Event};
use super::msg::{Msg, ShardCmd};
use super::shard::decode_error_kind;
use super::shared::{Channels, NodeShared, Snapshot};
use super::stats::{inc, raise};
use super::warn::{flush_summaries, warn_limited, WarnLimiter, WARN_INTERVAL};
use crate::crypto::{
    node_id_from_key, sign_identity_record, Established, Handshake, HandshakeError, IdentityBook,
    IdentityReject, RecordDrop, RecordOpener, RecordSealer, RecordVersions,
};
use crate::proto::membership::Dest;
use crate::proto::{
    accept_beacon, link_shard, BeaconSchedule, CloseReason, DialTarget, FrameAction, Link,
    LinkEvent, LinkId, LinkTimers, MemberEvent, MemberGraph, PeerAction, PeerEvent, PeerManager,
    PeerStats, Role,
};
use crate::wire::{
    take_frame, Beacon, BeaconFilter, Frame, Hello, IdentityRecord, ShoalExtension,
    MAX_HANDSHAKE_FRAME_LEN, PROTOCOL_VERSION,
};
use crate::PeerId;
use ahash::AHashMap;
use bytes::{Bytes, BytesMut};
use event_listener::Event as Signal;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_proto::cmd::{NewLink, ToControl, ToShard};
use shoal_proto::LinkBudget;
use shoal_runtime::channel::{ingress, IngressReceiver, MeshEndpoint, MeshReceiver};
use shoal_runtime::net::{TcpListener, TcpStream, UdpOptions, UdpSocket};
use shoal_runtime::time::{sleep, sleep_until, timeout};
use shoal_runtime::{spawn_local, LocalJoinHandle};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Ceiling of the control plane's ordered outbox; only Membership frames may be dropped when
/// it is reached (the next periodic flood repairs them), never link or routing changes.
const OUTBOX_CAP: usize = 65_536;
/// Longest the control plane's timer sleeps between checks.
const TICK: Duration = Duration::from_millis(100);

/// Requests from the application handle.
#[derive(Debug)]
pub(crate) enum Cmd {
    /// Say Goodbye to every peer, close every link, then answer.
    Stop(mpsc::Sender<()>),
}

/// What the control-plane task starts with.
pub(crate) struct ControlInit {
    pub(crate) ns: Arc<NodeShared>,
    pub(crate) endpoint: MeshEndpoint<Msg>,
    pub(crate) cmds: IngressReceiver<Cmd>,
    pub(crate) listen: SocketAddr,
    pub(crate) ready: mpsc::Sender<std::io::Result<u16>>,
    pub(crate) seed: u64,
}

struct Ready {
    stream: TcpStream,
    leftover: BytesMut,
    state: Link,
    secure: Option<(RecordSealer, RecordOpener)>,
}

/// This node's own identity record (identity mesh), re-minted every `membership_interval`.
struct OwnRecord {
    versions: RecordVersions,
    frame: Bytes,
    next: Instant,
}

impl OwnRecord {
    fn mint(&mut self, ctl: &Ctl, now: Instant) {
        if let Some(f) = ctl
            .ns
            .secure_ctx()
            .and_then(|c| own_record_frame(&c, &mut self.versions))
        {
            self.frame = f;
        }
        self.next = now + ctl.ns.cfg.membership_interval;
    }
}

fn own_record_frame(
    ctx: &crate::crypto::SecureContext,
    versions: &mut RecordVersions,
) -> Option<Bytes> {
    let id = ctx.identity()?;
    let version = versions.next_version();
    let record = IdentityRecord {
        id_pub_key: *id.public_key(),
        version,
        sig: sign_identity_record(id, version),
        name: id.name().to_owned(),
    };
    let mut b = BytesMut::new();
    Frame::IdentityRecord(record).encode(&mut b).ok()?;
    Some(b.freeze())
}

enum Pending {
    /// Dialing or handshaking.
    Connecting,
    /// Handshake done, waiting for the peer table's verdict (Install or Close).
    Ready(Box<Ready>),
    /// Closed by the peer table while connecting: drop it when the handshake ends.
    Cancelled,
}

struct State {
    peers: PeerManager<StdRng>,
    membership: MemberGraph,
    pending: AHashMap<LinkId, Pending>,
    /// Links living on a shard: peer and owning shard.
    placed: AHashMap<LinkId, (PeerId, usize)>,
    budgets: AHashMap<LinkId, Arc<LinkBudget>>,
    outbox: VecDeque<(usize, ShardCmd)>,
    listen_port: u16,
    stop_reply: Option<mpsc::Sender<()>>,
    stopped_shards: usize,
    rng: StdRng,
    /// Events held back until every shard applied the routes they announce (token, event).
    held: VecDeque<(u64, Event)>,
    /// Peers whose Connected event is held: not yet shown by `connected_peers`.
    hidden: ahash::AHashSet<PeerId>,
    next_token: u64,
    /// Held events whose token completed, emitted at the end of the next `run_actions`.
    released: Vec<Event>,
    /// Per token in flight: shards that answered.
    synced: AHashMap<u64, usize>,
    /// Identities learned from gossiped records (secured mesh; bounded).
    book: IdentityBook,
    /// Identity mesh: our own record.
    own_record: Option<OwnRecord>,
    /// The secure context whose revocations were last applied to the links: the sweep runs
    /// once per policy change, since a handshake that finishes later re-checks the policy.
    swept: Option<Arc<crate::crypto::SecureContext>>,
    /// Inbound handshakes in progress, so the peer table can evict one (abort closes it).
    inbound_tasks: AHashMap<LinkId, LocalJoinHandle<()>>,
    /// Evicted handshakes, aborted once the state is no longer borrowed.
    to_abort: Vec<LocalJoinHandle<()>>,
    /// The peer table's counters as last copied to the control counters.
    peer_stats: PeerStats,
}

struct Ctl {
    ns: Arc<NodeShared>,
    ch: Channels,
    listener: Rc<TcpListener>,
    st: RefCell<State>,
    outbox_ready: Signal,
    /// Aggregates the warnings that hostile input can trigger at will.
    warns: RefCell<WarnLimiter>,
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The control plane's main task.
pub(crate) async fn run(init: ControlInit) {
    let ControlInit {
        ns,
        endpoint,
        mut cmds,
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
    let port = match listener.local_addr() {
        Ok(a) => a.port(),
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(port));
    let (senders, rx) = endpoint.split();
    let now = Instant::now();
    let cfg = &ns.cfg;
    let mut rng = StdRng::seed_from_u64(seed);
    let peers = PeerManager::new(ns.me, cfg, StdRng::seed_from_u64(rng.gen()), now);
    let membership = MemberGraph::new(
        ns.me,
        cfg.membership_interval,
        cfg.membership_timeout,
        cfg.max_membership_records,
        wall_ms(),
        now,
    );
    let listener = Rc::new(listener);
    let book = IdentityBook::new(ns.me, cfg.max_identity_records);
    let own_record = ns.secure_ctx().and_then(|c| {
        let mut versions = RecordVersions::starting_at(wall_ms());
        let frame = own_record_frame(&c, &mut versions)?;
        Some(OwnRecord {
            versions,
            frame,
            next: now + cfg.membership_interval,
        })
    });
    let ctl = Rc::new(Ctl {
        listener: listener.clone(),
        ch: Channels::new(senders, ns.shards),
        st: RefCell::new(State {
            peers,
            membership,
            pending: AHashMap::new(),
            placed: AHashMap::new(),
            budgets: AHashMap::new(),
            outbox: VecDeque::new(),
            listen_port: port,
            stop_reply: None,
            stopped_shards: 0,
            rng,
            held: VecDeque::new(),
            hidden: ahash::AHashSet::new(),
            next_token: 1,
            released: Vec::new(),
            synced: AHashMap::new(),
            book,
            own_record,
            swept: None,
            inbound_tasks: AHashMap::new(),
            to_abort: Vec::new(),
            peer_stats: PeerStats::default(),
        }),
        outbox_ready: Signal::new(),
        warns: RefCell::new(WarnLimiter::new(WARN_INTERVAL)),
        ns,
    });
    tracing::info!(id = %ctl.ns.me, port, "mesh node listening");
    spawn_local(pump(ctl.clone())).detach();
    spawn_local(inbox(ctl.clone(), rx)).detach();
    spawn_local(accept_loop(ctl.clone(), listener)).detach();
    spawn_local(tick(ctl.clone())).detach();
    if ctl.ns.cfg.scouting {
        spawn_local(scouting(ctl.clone())).detach();
    }
    ctl.st.borrow_mut().peers.start(Instant::now());
    run_actions(&ctl);
    while let Ok(cmd) = cmds.recv().await {
        match cmd {
            Cmd::Stop(reply) => begin_stop(&ctl, reply),
        }
    }
}

fn post(ctl: &Ctl, st: &mut State, to: usize, m: ShardCmd) {
    if st.outbox.len() >= OUTBOX_CAP && matches!(m, ToShard::SendRaw { .. }) {
        inc(&ctl.ns.control_counters().dropped_queue_full);
        return;
    }
    st.outbox.push_back((to, m));
    ctl.outbox_ready.notify(1);
}

async fn pump(ctl: Rc<Ctl>) {
    loop {
        let next = ctl.st.borrow_mut().outbox.pop_front();
        match next {
            Some((to, m)) => {
                ctl.ch.send(to, Msg::ToShard(m)).await;
            }
            None => {
                let l = ctl.outbox_ready.listen();
                if ctl.st.borrow().outbox.is_empty() {
                    l.await;
                }
            }
        }
    }
}

async fn inbox(ctl: Rc<Ctl>, mut rx: MeshReceiver<Msg>) {
    let mut batch = Vec::with_capacity(64);
    while rx.recv_batch(&mut batch, 64).await.is_ok() {
        {
            let mut st = ctl.st.borrow_mut();
            let now = Instant::now();
            for (_, m) in batch.drain(..) {
                // Only shards write to the control plane, and they only send reports.
                let Msg::ToControl(m) = m else { continue };
                match m {
                    ToControl::LinkClosed { link } => {
                        st.placed.remove(&link);
                        st.budgets.remove(&link);
                        st.peers.on_closed(link, now);
                    }
                    ToControl::MembershipIn { link, record } => {
                        st.membership.on_record(link, &record, wall_ms(), now);
                    }
                    ToControl::IdentityIn { link, record } => {
                        on_identity_record(&ctl, &mut st, link, *record);
                    }
                    ToControl::Synced(token) => {
                        let n = st.synced.entry(token).or_insert(0);
                        *n += 1;
                        if *n >= ctl.ns.shards {
                            st.synced.remove(&token);
                            release_held(&mut st, token);
                        }
                    }
                    ToControl::Stopped(shard) => {
                        tracing::debug!(shard, "shard closed its links");
                        st.stopped_shards += 1;
                        if st.stopped_shards >= ctl.ns.shards {
                            if let Some(r) = st.stop_reply.take() {
                                let _ = r.send(());
                            }
                        }
                    }
                }
            }
        }
        run_actions(&ctl);
    }
}

async fn tick(ctl: Rc<Ctl>) {
    loop {
        let next = {
            let st = ctl.st.borrow();
            let mut t = Instant::now() + TICK;
            if let Some(p) = st.peers.poll_timeout() {
                t = t.min(p);
            }
            if let Some(r) = &st.own_record {
                t = t.min(r.next);
            }
            t.min(st.membership.poll_timeout())
        };
        sleep_until(next).await;
        let revoked = {
            let mut guard = ctl.st.borrow_mut();
            let st = &mut *guard;
            let now = Instant::now();
            st.peers.handle_timeout(now);
            st.membership.handle_timeout(wall_ms(), now);
            if let Some(mut r) = st.own_record.take() {
                if now >= r.next {
                    r.mint(&ctl, now);
                    let frame = r.frame.clone();
                    flood(&ctl, st, &frame, None);
                }
                st.own_record = Some(r);
            }
            revoked_but_linked(&ctl, st)
        };
        // `Mesh::revoke_key` only replaces the policy; the links of revoked nodes close here,
        // within one tick, whichever thread revoked (an event callback cannot wait).
        for node in revoked {
            revoke(&ctl, node);
        }
        run_actions(&ctl);
        flush_summaries(&mut ctl.warns.borrow_mut(), Instant::now());
    }
}

async fn accept_loop(ctl: Rc<Ctl>, listener: Rc<TcpListener>) {
    loop {
        let (s, addr) = match listener.accept().await {
            Ok(x) => x,
            Err(_) if ctl.ns.stopping.load(Ordering::Acquire) => return,
            Err(e) => {
                warn_limited!(ctl.warns.borrow_mut(), "accept failed", error = %e);
                sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        if ctl.ns.stopping.load(Ordering::Acquire) {
            continue;
        }
        let link = ctl
            .st
            .borrow_mut()
            .peers
            .on_accepted(Some(addr.ip()), Instant::now());
        match link {
            None => warn_limited!(
                ctl.warns.borrow_mut(),
                "connection table full, connection refused",
                %addr
            ),
            Some(link) => {
                let task = spawn_local(handshake(ctl.clone(), link, s, Role::Acceptor));
                let mut st = ctl.st.borrow_mut();
                st.pending.insert(link, Pending::Connecting);
                st.inbound_tasks.insert(link, task);
            }
        }
        // The table may have evicted a pending handshake for this one. (Counters of refusals
        // reach the stats on the next round, at the latest the next tick.)
        if ctl.st.borrow().peers.has_output() {
            run_actions(&ctl);
        }
    }
}

async fn dial(ctl: Rc<Ctl>, link: LinkId, target: DialTarget) {
    let addrs: Vec<SocketAddr> = match &target {
        DialTarget::Addr(a) => vec![*a],
        // Re-resolved on every attempt (static peers behind changing addresses).
        DialTarget::Endpoint(ep) => resolve(ep).await,
    };
    let t = ctl.ns.cfg.handshake_timeout;
    let mut stream = None;
    for a in addrs {
        if let Ok(Ok(s)) = timeout(t, TcpStream::connect(a)).await {
            stream = Some(s);
            break;
        }
    }
    match stream {
        Some(s) => handshake(ctl, link, s, Role::Dialer).await,
        None => {
            tracing::debug!(?link, ?target, "dial failed");
            connect_failed(&ctl, link);
        }
    }
}

/// Resolves `host:port`. A literal address needs no lookup; a name is looked up on a helper
/// thread (the system resolver blocks), so a slow DNS server never stalls the control plane.
/// At most one lookup per static or seed endpoint is in flight (one dial each at a time).
async fn resolve(ep: &str) -> Vec<SocketAddr> {
    if let Ok(a) = ep.parse::<SocketAddr>() {
        return vec![a];
    }
    let (tx, mut rx) = ingress::<Vec<SocketAddr>>(1);
    let name = ep.to_owned();
    let spawned = std::thread::Builder::new()
        .name("shoal-resolve".into())
        .spawn(move || {
            let addrs = name
                .to_socket_addrs()
                .map(|i| i.collect())
                .unwrap_or_default();
            let _ = tx.try_send(addrs);
        });
    match spawned {
        Ok(_) => rx.recv().await.unwrap_or_default(),
        Err(e) => {
            tracing::warn!(endpoint = ep, error = %e, "cannot start a resolver thread");
            Vec::new()
        }
    }
}

fn connect_failed(ctl: &Rc<Ctl>, link: LinkId) {
    {
        let mut st = ctl.st.borrow_mut();
        st.pending.remove(&link);
        st.peers.on_closed(link, Instant::now());
    }
    run_actions(ctl);
}

fn local_hello(ctl: &Ctl) -> Hello {
    let mut st = ctl.st.borrow_mut();
    Hello {
        node_id: ctl.ns.me,
        protocol_version: PROTOCOL_VERSION,
        tcp_listen_port: st.listen_port,
        group_name: ctl.ns.cfg.group_name.clone(),
        nonce: st.rng.gen(),
        eph_pub_key: None,
        identity: None,
        shoal: Some(ShoalExtension::current()),
    }
}

type HandshakeFailure = Option<(ErrorKind, String)>;

/// A finished handshake.
struct Exchanged {
    peer: PeerId,
    port: u16,
    /// Bytes read after the peer's Hello (plaintext) or AuthConfirm (secured: records).
    leftover: BytesMut,
    secure: Option<Established>,
}

/// Counts a refused secured handshake and classifies it for the error event.
fn auth_failure(ctl: &Ctl, e: HandshakeError) -> (ErrorKind, String) {
    inc(&ctl.ns.control_counters().auth_failures);
    let kind = match e {
        HandshakeError::PeerNotSecured => ErrorKind::ModeMismatch,
        HandshakeError::Identity(_) => ErrorKind::Identity,
        HandshakeError::LowOrderKey
        | HandshakeError::BadTag
        | HandshakeError::UnexpectedHello
        | HandshakeError::UnexpectedAuthConfirm => ErrorKind::Crypto,
    };
    (kind, format!("handshake refused: {e}"))
}

/// A link closed during the Hello exchange: a mode mismatch is reported (the operator must
/// see that one side has a PSK and the other not); the other refusals stay quiet as before.
fn refusal(ctl: &Ctl, reason: &CloseReason) -> HandshakeFailure {
    match reason {
        CloseReason::SecuredModeMismatch { ours, theirs } => {
            inc(&ctl.ns.control_counters().auth_failures);
            let mode = |s: &bool| if *s { "secured (psk)" } else { "plaintext" };
            Some((
                ErrorKind::ModeMismatch,
                format!(
                    "handshake refused: peer is {}, this node is {}",
                    mode(theirs),
                    mode(ours)
                ),
            ))
        }
        other => {
            tracing::debug!(reason = %other, "handshake refused");
            None
        }
    }
}

/// Runs the Hello exchange on the control plane, and in a secured mesh the AuthConfirm
/// exchange of `hs`.
async fn exchange(
    ctl: &Ctl,
    s: &mut TcpStream,
    state: &mut Link,
    mut hs: Option<&mut Handshake>,
) -> Result<Exchanged, HandshakeFailure> {
    // Only handshake frames are valid before the link is up: a stranger may not make this
    // connection buffer more than the largest of them (see `MAX_HANDSHAKE_FRAME_LEN`).
    let max = ctl.ns.cfg.max_message_bytes.min(MAX_HANDSHAKE_FRAME_LEN);
    let deadline = Instant::now() + ctl.ns.cfg.handshake_timeout;
    let mut buf = BytesMut::with_capacity(4096);
    let mut established: Option<Established> = None;
    loop {
        let mut out = BytesMut::new();
        while let Some(f) = state.poll_transmit() {
            let _ = f.encode(&mut out);
        }
        if !out.is_empty() && s.write_all(out.freeze()).await.is_err() {
            return Err(None);
        }
        if let Some(ev) = state.poll_event() {
            match ev {
                LinkEvent::Established {
                    peer, listen_port, ..
                } => {
                    return Ok(Exchanged {
                        peer,
                        port: listen_port,
                        leftover: std::mem::take(&mut buf),
                        secure: established.take(),
                    });
                }
                LinkEvent::Closed(reason) => return Err(refusal(ctl, &reason)),
                LinkEvent::AuthRequired { hello } => {
                    let Some(hs) = hs.as_deref_mut() else {
                        return Err(None);
                    };
                    // Our AuthConfirm goes out in plaintext at once; the peer's is parsed only
                    // after this, so the frames after it are never taken for plaintext.
                    let confirm = hs
                        .on_peer_hello(&hello)
                        .map_err(|e| Some(auth_failure(ctl, e)))?;
                    let mut out = BytesMut::new();
                    let _ = Frame::AuthConfirm(confirm).encode(&mut out);
                    if s.write_all(out.freeze()).await.is_err() {
                        return Err(None);
                    }
                    continue;
                }
            }
        }
        match take_frame(&mut buf, max) {
            Ok(Some(f)) => {
                let now = Instant::now();
                let action = state.on_frame(&f, now);
                if let (FrameAction::Process, Frame::AuthConfirm(confirm)) = (action, &f) {
                    let Some(hs) = hs.as_deref_mut() else {
                        return Err(None);
                    };
                    match hs.on_peer_auth_confirm(confirm) {
                        Ok(est) => {
                            established = Some(est);
                            state.auth_confirmed(now);
                        }
                        Err(e) => {
                            state.auth_failed(now);
                            return Err(Some(auth_failure(ctl, e)));
                        }
                    }
                }
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                let kind = decode_error_kind(&e, ctl.ns.control_counters());
                return Err(Some((kind, format!("during handshake: {e}"))));
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(None);
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(4096);
        }
        let buffered = buf.len();
        match timeout(left, s.read(std::mem::take(&mut buf))).await {
            Err(_) if buffered == 0 => return Err(None),
            Err(_) => {
                inc(&ctl.ns.control_counters().malformed_frames);
                let msg =
                    format!("handshake timed out inside an incomplete frame ({buffered} bytes)");
                return Err(Some((ErrorKind::Malformed, msg)));
            }
            Ok((Ok(0), b)) => {
                if b.is_empty() {
                    return Err(None);
                }
                inc(&ctl.ns.control_counters().malformed_frames);
                return Err(Some((
                    ErrorKind::Malformed,
                    "connection closed inside a frame during handshake".into(),
                )));
            }
            Ok((Ok(_), b)) => buf = b,
            Ok((Err(_), _)) => return Err(None),
        }
    }
}

async fn handshake(ctl: Rc<Ctl>, link: LinkId, mut s: TcpStream, role: Role) {
    let _ = s.set_nodelay(true);
    let now = Instant::now();
    let timers = LinkTimers::from_config(&ctl.ns.cfg);
    let mut hs = ctl
        .ns
        .secure_ctx()
        .map(|c| Handshake::new(c, &mut rand::rngs::OsRng));
    let mut hello = local_hello(&ctl);
    if let Some(hs) = &hs {
        hs.fill_hello(&mut hello);
    }
    let mut state = match role {
        Role::Dialer => {
            let mut l = Link::dialer(link, hello, timers, now);
            l.on_connected(now);
            l
        }
        Role::Acceptor => Link::acceptor(link, hello, timers, now),
    };
    let remote_ip: Option<IpAddr> = s.peer_addr().ok().map(|a| a.ip());
    let result = exchange(&ctl, &mut s, &mut state, hs.as_mut()).await;
    // Past this point the handshake is never evicted: nothing awaits before the peer table
    // hears how it ended.
    ctl.st.borrow_mut().inbound_tasks.remove(&link);
    drop(hs);
    let result = result.and_then(|ex| recheck_identity(&ctl, ex));
    match result {
        Ok(Exchanged {
            peer,
            port,
            leftover,
            secure,
        }) => {
            let secure = secure.map(|e| (e.sealer, e.opener));
            let cancelled = {
                let st = ctl.st.borrow();
                matches!(st.pending.get(&link), Some(Pending::Cancelled) | None)
                    || ctl.ns.stopping.load(Ordering::Acquire)
            };
            if cancelled {
                spawn_local(goodbye_close(s, secure.map(|k| k.0))).detach();
                connect_failed(&ctl, link);
                return;
            }
            {
                let mut st = ctl.st.borrow_mut();
                st.pending.insert(
                    link,
                    Pending::Ready(Box::new(Ready {
                        stream: s,
                        leftover,
                        state,
                        secure,
                    })),
                );
                st.peers
                    .on_handshake(link, peer, remote_ip, port, Instant::now());
            }
            run_actions(&ctl);
            // Neither installed nor closed (the table refused it silently): drop it.
            let mut st = ctl.st.borrow_mut();
            if matches!(st.pending.get(&link), Some(Pending::Ready(_))) {
                st.pending.remove(&link);
            }
        }
        Err(failure) => {
            if let Some((kind, message)) = failure {
                warn_limited!(
                    ctl.warns.borrow_mut(),
                    "handshake failed on bad input",
                    ?link, ?kind, detail = %message
                );
                ctl.ns.hub.emit_control(
                    Event::Error {
                        peer: state.peer(),
                        kind,
                        message,
                    },
                    ctl.ns.control_counters(),
                );
            }
            connect_failed(&ctl, link);
        }
    }
}

/// Identity mesh: the key may have been revoked while the handshake ran on the context it
/// started with; check it against the current policy. Records the verified name.
fn recheck_identity(ctl: &Ctl, ex: Exchanged) -> Result<Exchanged, HandshakeFailure> {
    let Some(vp) = ex.secure.as_ref().and_then(|e| e.peer.as_ref()) else {
        return Ok(ex);
    };
    if let Some(c) = ctl.ns.secure_ctx() {
        if let Err(e) = c.policy().admit(&vp.key) {
            return Err(Some(auth_failure(ctl, HandshakeError::Identity(e))));
        }
    }
    tracing::debug!(peer = %vp.node_id, name = %vp.name, label = ?vp.label, "peer identity verified");
    ctl.ns.set_name(vp.node_id, Some(&vp.name));
    Ok(ex)
}

/// Says Goodbye (sealed as the next record on an established secured link) and closes.
async fn goodbye_close(mut s: TcpStream, sealer: Option<RecordSealer>) {
    let mut b = BytesMut::new();
    let _ = Frame::Goodbye.encode(&mut b);
    let out = match sealer {
        None => b,
        Some(mut sealer) => {
            let mut rec = BytesMut::new();
            match sealer.seal_frame(&mut rec, &b) {
                Ok(_) => rec,
                Err(_) => BytesMut::new(),
            }
        }
    };
    if !out.is_empty() {
        let _ = s.write_all(out.freeze()).await;
    }
    let _ = s.shutdown().await;
}

/// Queues `frame` on every placed link except `except`.
fn flood(ctl: &Ctl, st: &mut State, frame: &Bytes, except: Option<LinkId>) {
    let targets: Vec<(LinkId, usize)> = st
        .placed
        .iter()
        .filter(|(l, _)| Some(**l) != except)
        .map(|(l, (_, o))| (*l, *o))
        .collect();
    for (link, owner) in targets {
        post(
            ctl,
            st,
            owner,
            ToShard::SendRaw {
                link,
                frame: frame.clone(),
            },
        );
    }
}

/// A gossiped identity record (crypto.md §6): stored and re-flooded once when new, dropped
/// when it is ours, untrusted, badly signed or not newer.
fn on_identity_record(ctl: &Ctl, st: &mut State, link: LinkId, r: IdentityRecord) {
    let Some(sc) = ctl.ns.secure_ctx() else {
        return;
    };
    match st.book.accept(
        sc.policy(),
        &r.id_pub_key,
        r.version,
        r.name.as_bytes(),
        &r.sig,
    ) {
        Ok(origin) => {
            if let Some(known) = st.book.get(&origin) {
                ctl.ns.set_name(origin, Some(&known.name));
            }
            let mut b = BytesMut::new();
            if Frame::IdentityRecord(r).encode(&mut b).is_ok() {
                flood(ctl, st, &b.freeze(), Some(link));
            }
        }
        Err(RecordDrop::Own | RecordDrop::Stale) => {}
        Err(e) => {
            inc(&ctl.ns.control_counters().identity_records_dropped);
            tracing::debug!(?link, error = %e, "identity record dropped");
        }
    }
}

/// Nodes whose identity key is revoked in the current policy but that still have a link.
fn revoked_but_linked(ctl: &Ctl, st: &mut State) -> Vec<PeerId> {
    let Some(ctx) = ctl.ns.secure_ctx() else {
        return Vec::new();
    };
    if st.swept.as_ref().is_some_and(|s| Arc::ptr_eq(s, &ctx)) {
        return Vec::new();
    }
    st.swept = Some(ctx.clone());
    ctx.policy()
        .revoked_keys()
        .map(node_id_from_key)
        .filter(|node| st.placed.values().any(|(p, _)| p == node))
        .collect()
}

/// Closes the link of a node whose key was revoked and forgets its record and name.
fn revoke(ctl: &Rc<Ctl>, node: PeerId) {
    {
        let mut guard = ctl.st.borrow_mut();
        let st = &mut *guard;
        st.book.remove(&node);
        let links: Vec<LinkId> = st
            .placed
            .iter()
            .filter(|(_, (p, _))| *p == node)
            .map(|(l, _)| *l)
            .collect();
        for link in links {
            close(ctl, st, link, false);
        }
    }
    ctl.ns.set_name(node, None);
    let reason = HandshakeError::Identity(IdentityReject::Untrusted);
    tracing::info!(%node, %reason, "revoked node's link closed");
    run_actions(ctl);
}

/// Executes the peer table's actions, then turns peer and membership output into events,
/// frames and a fresh snapshot.
fn run_actions(ctl: &Rc<Ctl>) {
    let shards = ctl.ns.shards;
    let mut events = Vec::new();
    {
        let mut guard = ctl.st.borrow_mut();
        let st = &mut *guard;
        let now = Instant::now();
        let mut installed = false;
        while let Some(a) = st.peers.poll_action() {
            installed |= matches!(a, PeerAction::Install { .. });
            match a {
                PeerAction::Dial { link, target } => {
                    st.pending.insert(link, Pending::Connecting);
                    spawn_local(dial(ctl.clone(), link, target)).detach();
                }
                PeerAction::Install { peer, link } => install(ctl, st, peer, link),
                PeerAction::Uninstall { peer, link } => {
                    st.placed.remove(&link);
                    st.budgets.remove(&link);
                    for s in 0..shards {
                        post(ctl, st, s, ToShard::Uninstall { peer, link });
                    }
                }
                PeerAction::Close { link, goodbye } => close(ctl, st, link, goodbye),
            }
        }
        while let Some(e) = st.peers.poll_event() {
            match e {
                PeerEvent::PeerDiscovered { peer, addr } => {
                    events.push(Event::PeerDiscovered { peer, addr })
                }
                PeerEvent::Connected { peer, link } => {
                    events.push(Event::PeerConnected { peer });
                    st.hidden.insert(peer);
                    st.membership.neighbour_up(peer, link, wall_ms(), now);
                }
                PeerEvent::Disconnected { peer } => {
                    events.push(Event::PeerDisconnected { peer });
                    st.membership.neighbour_down(&peer, wall_ms(), now);
                }
                PeerEvent::Lost { peer } => events.push(Event::PeerLost { peer }),
            }
        }
        while let Some(t) = st.membership.poll_transmit() {
            let mut b = BytesMut::new();
            if Frame::Membership(t.record).encode(&mut b).is_err() {
                continue;
            }
            let frame: Bytes = b.freeze();
            match t.dest {
                Dest::All => flood(ctl, st, &frame, None),
                Dest::AllExcept(x) => flood(ctl, st, &frame, Some(x)),
                Dest::Link(x) => {
                    if let Some(&(_, owner)) = st.placed.get(&x) {
                        post(ctl, st, owner, ToShard::SendRaw { link: x, frame });
                    }
                }
            }
        }
        while let Some(e) = st.membership.poll_event() {
            events.push(match e {
                MemberEvent::MemberJoined(peer) => Event::MemberJoined { peer },
                MemberEvent::MemberLeft(peer) => {
                    // Names stay bounded by the membership: a departed node is forgotten
                    // (its next record or handshake tells it again).
                    st.book.remove(&peer);
                    ctl.ns.set_name(peer, None);
                    Event::MemberLeft { peer }
                }
            });
        }
        // A round that installed links holds its events (and every later one, to keep
        // order) until every shard has applied the new routes: after PeerConnected, a message
        // sent to that peer is never lost to a routing table that is not there yet.
        if installed {
            let token = st.next_token;
            st.next_token += 1;
            for s in 0..shards {
                post(ctl, st, s, ToShard::Sync(token));
            }
            st.held.extend(events.drain(..).map(|e| (token, e)));
        } else if let Some(&(token, _)) = st.held.back() {
            st.held.extend(events.drain(..).map(|e| (token, e)));
        }
        let hidden = &st.hidden;
        let connected: Vec<PeerId> = st
            .peers
            .connected_peers()
            .filter(|p| !hidden.contains(p))
            .copied()
            .collect();
        if st.held.is_empty() {
            st.hidden.clear();
        }
        let snap = Snapshot {
            connected,
            known: st.peers.known_peers().copied().collect(),
            members: st.membership.members().copied().collect(),
            budgets: st.budgets.values().cloned().collect(),
        };
        ctl.ns
            .connected
            .store(snap.connected.len(), Ordering::Release);
        if let Ok(mut s) = ctl.ns.snapshot.lock() {
            *s = snap;
        }
        sync_peer_stats(ctl, st);
    }
    let aborted = std::mem::take(&mut ctl.st.borrow_mut().to_abort);
    for task in aborted {
        task.abort();
    }
    let released: Vec<Event> = std::mem::take(&mut ctl.st.borrow_mut().released);
    for e in released.into_iter().chain(events) {
        ctl.ns.hub.emit_control(e, ctl.ns.control_counters());
    }
}

/// Copies the peer table's counters to the control counters, with an aggregated warning for
/// each kind of refusal that grew (floods raise them by the thousand).
fn sync_peer_stats(ctl: &Ctl, st: &mut State) {
    let now = st.peers.stats();
    let was = std::mem::replace(&mut st.peer_stats, now);
    if now == was {
        return;
    }
    let c = ctl.ns.control_counters();
    raise(&c.announces_rate_limited, now.announces_rate_limited);
    raise(&c.dials_rate_limited, now.dials_rate_limited);
    raise(&c.peers_evicted, now.peers_evicted);
    raise(&c.peer_table_full, now.peer_table_full);
    raise(&c.connections_refused, now.conn_table_full);
    raise(&c.handshakes_evicted, now.handshakes_evicted);
    let grew = [
        (
            now.announces_rate_limited > was.announces_rate_limited,
            "announce of a new peer over the new-peer rate, ignored",
        ),
        (
            now.peer_table_full > was.peer_table_full,
            "peer table full of linked peers, peer refused",
        ),
        (
            now.handshakes_evicted > was.handshakes_evicted,
            "pending handshakes full, oldest evicted",
        ),
    ];
    for (_, key) in grew.into_iter().filter(|(g, _)| *g) {
        warn_limited!(
            ctl.warns.borrow_mut(),
            key,
            max_peers = ctl.ns.cfg.max_peers
        );
    }
}

/// Every shard answered `token`: the events held for it (and earlier ones) may go out.
fn release_held(st: &mut State, token: u64) {
    while st.held.front().is_some_and(|(t, _)| *t <= token) {
        let (_, e) = st.held.pop_front().expect("checked");
        if let Event::PeerConnected { peer } = &e {
            st.hidden.remove(peer);
        }
        st.released.push(e);
    }
}

fn install(ctl: &Rc<Ctl>, st: &mut State, peer: PeerId, link: LinkId) {
    let shards = ctl.ns.shards;
    let owner = link_shard(&peer, shards);
    let budget = match st.pending.remove(&link) {
        Some(Pending::Ready(r)) => {
            let Ready {
                stream,
                leftover,
                state,
                secure,
            } = *r;
            let budget = Arc::new(LinkBudget::new(
                ctl.ns.cfg.max_outbound_queue_bytes,
                ctl.ns.epoch,
            ));
            match stream.into_std() {
                Ok(stream) => post(
                    ctl,
                    st,
                    owner,
                    ToShard::AddLink(Box::new(NewLink {
                        link,
                        peer,
                        conn: stream,
                        leftover,
                        state,
                        secure,
                        budget: budget.clone(),
                    })),
                ),
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "could not detach connection for its shard");
                    budget.close();
                    // Report it as closed once the peer table is done with this round.
                    let c2 = ctl.clone();
                    spawn_local(async move { connect_failed(&c2, link) }).detach();
                }
            }
            // Identity mesh: our signed record is the first record a new neighbour gets.
            if let Some(r) = &st.own_record {
                let frame = r.frame.clone();
                post(ctl, st, owner, ToShard::SendRaw { link, frame });
            }
            budget
        }
        Some(other) => {
            st.pending.insert(link, other);
            return;
        }
        None => match st.budgets.get(&link) {
            Some(b) => b.clone(),
            None => return,
        },
    };
    st.placed.insert(link, (peer, owner));
    st.budgets.insert(link, budget.clone());
    for s in 0..shards {
        post(
            ctl,
            st,
            s,
            ToShard::Install {
                peer,
                link,
                owner,
                budget: budget.clone(),
            },
        );
    }
}

fn close(ctl: &Rc<Ctl>, st: &mut State, link: LinkId, goodbye: bool) {
    match st.pending.remove(&link) {
        Some(Pending::Connecting) if st.inbound_tasks.contains_key(&link) => {
            // Evicted in its handshake: stop it now (dropping its socket), rather than wait
            // for the handshake timeout.
            let task = st.inbound_tasks.remove(&link).expect("checked");
            st.to_abort.push(task);
        }
        Some(Pending::Connecting) | Some(Pending::Cancelled) => {
            st.pending.insert(link, Pending::Cancelled);
        }
        Some(Pending::Ready(r)) => {
            if goodbye {
                let Ready { stream, secure, .. } = *r;
                spawn_local(goodbye_close(stream, secure.map(|k| k.0))).detach();
            }
        }
        None => {
            if let Some((_, owner)) = st.placed.remove(&link) {
                st.budgets.remove(&link);
                post(ctl, st, owner, ToShard::Close { link, goodbye });
            }
        }
    }
}

fn begin_stop(ctl: &Rc<Ctl>, reply: mpsc::Sender<()>) {
    ctl.ns.stopping.store(true, Ordering::Release);
    // Free the port at once (a restarted node may bind it right after stop returns).
    if let Err(e) = ctl.listener.shutdown() {
        tracing::debug!(error = %e, "listener shutdown");
    }
    {
        let mut st = ctl.st.borrow_mut();
        st.stop_reply = Some(reply);
        st.peers.shutdown();
    }
    run_actions(ctl);
    let mut st = ctl.st.borrow_mut();
    for s in 0..ctl.ns.shards {
        post(ctl, &mut st, s, ToShard::Stop);
    }
}

async fn scouting(ctl: Rc<Ctl>) {
    let cfg = &ctl.ns.cfg;
    let iface = cfg.multicast_interface.unwrap_or(Ipv4Addr::UNSPECIFIED);
    let setup = async {
        let opts = UdpOptions {
            reuse_addr: true,
            reuse_port: true,
        };
        let sock = UdpSocket::bind(
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, cfg.multicast_port)),
            opts,
        )
        .await?;
        sock.join_multicast_v4(cfg.multicast_group, iface)?;
        if cfg.multicast_interface.is_some() {
            sock.set_multicast_if_v4(iface)?;
        }
        sock.set_multicast_ttl_v4(cfg.multicast_ttl)?;
        sock.set_multicast_loop_v4(true)?;
        std::io::Result::Ok(sock)
    };
    let sock = match setup.await {
        Ok(s) => Rc::new(s),
        Err(e) => {
            scouting_error(&ctl, format!("multicast discovery unavailable: {e}"));
            return;
        }
    };
    spawn_local(announce_rx(ctl.clone(), sock.clone())).detach();
    let dest = SocketAddr::from((cfg.multicast_group, cfg.multicast_port));
    let mut sched = BeaconSchedule::new(cfg.announce_interval, Instant::now());
    let mut reported = false;
    loop {
        sleep_until(sched.poll_timeout()).await;
        let due = {
            let mut st = ctl.st.borrow_mut();
            sched.handle_timeout(Instant::now(), &mut st.rng)
        };
        if !due || ctl.ns.stopping.load(Ordering::Acquire) {
            continue;
        }
        let port = ctl.st.borrow().listen_port;
        let mut b = BytesMut::new();
        let keys = ctl.ns.secure_ctx();
        if Beacon::new(ctl.ns.me, port, &cfg.group_name, keys.is_some())
            .encode_body(&mut b)
            .is_err()
        {
            continue;
        }
        if let Some(k) = &keys {
            let mac = k.psk().announce_mac(&b);
            b.extend_from_slice(&mac);
        }
        if let Err(e) = sock.send_to(b.freeze(), dest).await {
            if !reported {
                reported = true;
                scouting_error(&ctl, format!("sending announce failed: {e}"));
            }
        }
    }
}

fn scouting_error(ctl: &Ctl, message: String) {
    tracing::warn!(%message, "discovery");
    ctl.ns.hub.emit_control(
        Event::Error {
            peer: None,
            kind: ErrorKind::Scouting,
            message,
        },
        ctl.ns.control_counters(),
    );
}

async fn announce_rx(ctl: Rc<Ctl>, sock: Rc<UdpSocket>) {
    let mut buf = BytesMut::with_capacity(2048);
    loop {
        let (res, b) = sock.recv_from(buf).await;
        buf = b;
        let (n, from) = match res {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!(error = %e, "announce receive failed");
                sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let keys = ctl.ns.secure_ctx();
        let filter = BeaconFilter {
            secured: keys.is_some(),
            protocol_version: PROTOCOL_VERSION,
            group_name: &ctl.ns.cfg.group_name,
            own_id: ctl.ns.me,
        };
        // Secured: MAC first (constant time), before anything is parsed.
        let verify = |body: &[u8], mac: &[u8; 16]| {
            keys.as_ref()
                .is_some_and(|k| k.psk().verify_announce_mac(body, mac))
        };
        match accept_beacon(&buf[..n], from, &filter, verify) {
            Ok(a) => {
                let output = {
                    let mut st = ctl.st.borrow_mut();
                    st.peers.on_announce(a.peer, a.dial_addr, Instant::now());
                    st.peers.has_output()
                };
                // A refresh or a refused stranger changes nothing: no round (floods of them
                // must stay cheap); counters reach the stats on the next tick.
                if output {
                    run_actions(&ctl);
                }
            }
            Err(e) if e.is_junk() => {
                inc(&ctl.ns.control_counters().announces_dropped);
                warn_limited!(
                    ctl.warns.borrow_mut(),
                    "invalid discovery datagram dropped",
                    %from, error = %e
                );
            }
            Err(e) => tracing::trace!(%from, error = %e, "announce ignored"),
        }
    }
}
