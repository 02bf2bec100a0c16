//! The control plane's sockets until their handshake ends: the accept loop, dials (DNS on a
//! helper thread), and one task per socket that feeds what it reads to the core and carries
//! out the core's writes and close through the socket's mailbox. An established socket is
//! detached here (converted to a std stream) when the outbox pump hands it to its shard.
//!
//! **Owns:** the listener, dials, DNS and the handshaking sockets. **Must not touch:** handshake
//! logic (the control core's handshake machines).

use super::{run_actions, Ctl};
use crate::node::warn::warn_limited;
use ahash::AHashMap;
use bytes::{Bytes, BytesMut};
use event_listener::Event as Signal;
use futures_util::future::{select, Either};
use shoal_proto::{DialTarget, LinkId};
use shoal_runtime::channel::ingress;
use shoal_runtime::net::TcpStream;
use shoal_runtime::spawn_local;
use shoal_runtime::time::{sleep, timeout};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What the socket's task must do next.
#[derive(Debug)]
enum Op {
    Write(Bytes),
    Close,
    /// Detach the socket for its shard (after the writes queued before).
    Detach,
}

/// One socket's mailbox.
#[derive(Default)]
struct Mailbox {
    ops: RefCell<VecDeque<Op>>,
    wake: Signal,
}

impl Mailbox {
    fn push(&self, op: Op) {
        self.ops.borrow_mut().push_back(op);
        self.wake.notify(1);
    }

    fn pop(&self) -> Option<Op> {
        self.ops.borrow_mut().pop_front()
    }
}

/// The mailboxes of the sockets in a dial or handshake, and the sockets detached for shards.
#[derive(Default)]
pub(super) struct Sockets {
    boxes: RefCell<AHashMap<LinkId, Rc<Mailbox>>>,
    /// Detached sockets (`None`: the detach failed or the socket was gone) for the pump.
    detached: RefCell<AHashMap<LinkId, Option<std::net::TcpStream>>>,
    detach_ready: Signal,
}

impl Sockets {
    fn open(&self, link: LinkId) -> Rc<Mailbox> {
        let m = Rc::new(Mailbox::default());
        self.boxes.borrow_mut().insert(link, m.clone());
        m
    }

    fn get(&self, link: LinkId) -> Option<Rc<Mailbox>> {
        self.boxes.borrow().get(&link).cloned()
    }

    pub(super) fn write(&self, link: LinkId, bytes: Bytes) {
        if let Some(m) = self.get(link) {
            m.push(Op::Write(bytes));
        }
    }

    pub(super) fn close(&self, link: LinkId) {
        if let Some(m) = self.get(link) {
            m.push(Op::Close);
        }
    }

    /// The std socket of established `link`, once its task wrote what preceded (`None`: gone).
    pub(super) async fn detach(&self, link: LinkId) -> Option<std::net::TcpStream> {
        self.get(link)?.push(Op::Detach);
        loop {
            if let Some(s) = self.detached.borrow_mut().remove(&link) {
                return s;
            }
            let l = self.detach_ready.listen();
            if let Some(s) = self.detached.borrow_mut().remove(&link) {
                return s;
            }
            if !self.boxes.borrow().contains_key(&link) {
                return None; // its task ended without detaching
            }
            l.await;
        }
    }

    fn finish(&self, link: LinkId, detached: Option<Option<std::net::TcpStream>>) {
        self.boxes.borrow_mut().remove(&link);
        if let Some(s) = detached {
            self.detached.borrow_mut().insert(link, s);
        }
        self.detach_ready.notify(usize::MAX);
    }
}

pub(super) async fn accept_loop(ctl: Rc<Ctl>, listener: Rc<shoal_runtime::net::TcpListener>) {
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
        let link = {
            let now = Instant::now();
            ctl.core
                .borrow_mut()
                .on_accepted(Some(addr.ip()), now, super::wall_ms())
        };
        if let Some(link) = link {
            let mailbox = ctl.socks.open(link);
            spawn_local(serve(ctl.clone(), link, s, mailbox)).detach();
        }
        run_actions(&ctl);
    }
}

/// Connects `link` to `target` (re-resolving an endpoint on every attempt), then serves it.
pub(super) fn dial(ctl: &Rc<Ctl>, link: LinkId, target: DialTarget) {
    let mailbox = ctl.socks.open(link);
    let ctl = ctl.clone();
    spawn_local(async move {
        let addrs: Vec<SocketAddr> = match &target {
            DialTarget::Addr(a) => vec![*a],
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
            Some(s) => {
                let remote = s.peer_addr().ok().map(|a| a.ip());
                ctl.feed(|c, now, wall| c.on_dial_connected(link, remote, now, wall));
                serve(ctl, link, s, mailbox).await;
            }
            None => {
                tracing::debug!(?link, ?target, "dial failed");
                ctl.socks.finish(link, None);
                ctl.feed(|c, now, wall| c.on_dial_failed(link, now, wall));
            }
        }
    })
    .detach();
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

/// One socket in its handshake: reads go to the core while it is handshaking; the mailbox
/// brings its writes, its close, or its detaching for the shard.
async fn serve(ctl: Rc<Ctl>, link: LinkId, mut s: TcpStream, mailbox: Rc<Mailbox>) {
    let _ = s.set_nodelay(true);
    // A dialed connection gets `tcp_congestion` here (an accepted one has it from the
    // listener already; setting it again costs one call per connection).
    let cc = &ctl.ns.cfg.tcp_congestion;
    if !cc.is_empty() {
        if let Err(e) = s.set_congestion(cc) {
            warn_limited!(ctl.warns.borrow_mut(), "cannot set tcp_congestion", error = %e);
        }
    }
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        while let Some(op) = mailbox.pop() {
            match op {
                Op::Write(b) => {
                    if s.write_all(b).await.is_err() {
                        ctl.feed(|c, now, wall| c.on_io_error(link, now, wall));
                    }
                }
                Op::Close => {
                    let _ = s.shutdown().await;
                    ctl.socks.finish(link, None);
                    return;
                }
                Op::Detach => {
                    let std = match s.into_std() {
                        Ok(std) => Some(std),
                        Err(e) => {
                            tracing::warn!(?link, error = %e, "could not detach connection for its shard");
                            None
                        }
                    };
                    ctl.socks.finish(link, Some(std));
                    return;
                }
            }
        }
        let wake = mailbox.wake.listen();
        if !mailbox.ops.borrow().is_empty() {
            continue;
        }
        if !ctl.core.borrow().is_handshaking(link) {
            // Established (waiting to be detached) or closed: wait for the mailbox.
            wake.await;
            continue;
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(4096);
        }
        let read = pin!(s.read(std::mem::take(&mut buf)));
        match select(read, wake).await {
            Either::Left(((res, b), _)) => {
                buf = b;
                match res {
                    Ok(0) => ctl.feed(|c, now, wall| c.on_eof(link, now, wall)),
                    Err(_) => ctl.feed(|c, now, wall| c.on_io_error(link, now, wall)),
                    Ok(_) => {
                        ctl.feed(|c, now, wall| c.on_bytes(link, &buf, now, wall));
                        buf.clear();
                    }
                }
            }
            // A write or close came in meanwhile; the read is dropped (with its buffer).
            Either::Right(_) => buf = BytesMut::with_capacity(4096),
        }
    }
}
