//! The multicast socket of scouting: sends the beacons the core queues and feeds it every
//! datagram received. Which beacon to send and which datagram to believe is the core's call.
//!
//! **Owns:** the multicast socket. **Must not touch:** which beacons to send or believe (the
//! control core).

use super::Ctl;
use bytes::BytesMut;
use shoal_runtime::net::{UdpOptions, UdpSocket};
use shoal_runtime::spawn_local;
use shoal_runtime::time::sleep;
use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

pub(super) async fn run(ctl: Rc<Ctl>) {
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
            let message = format!("multicast scouting unavailable: {e}");
            ctl.feed(|c, _, _| c.on_scouting_error(message, false));
            return;
        }
    };
    spawn_local(receive(ctl.clone(), sock.clone())).detach();
    let dest = SocketAddr::from((cfg.multicast_group, cfg.multicast_port));
    loop {
        let next = ctl.beacons.borrow_mut().pop_front();
        let Some(b) = next else {
            let l = ctl.beacon_ready.listen();
            if ctl.beacons.borrow().is_empty() {
                l.await;
            }
            continue;
        };
        if let Err(e) = sock.send_to(b, dest).await {
            let message = format!("sending announce failed: {e}");
            ctl.feed(|c, _, _| c.on_scouting_error(message, true));
        }
    }
}

async fn receive(ctl: Rc<Ctl>, sock: Rc<UdpSocket>) {
    let mut buf = BytesMut::with_capacity(2048);
    loop {
        let (res, b) = sock.recv_from(buf).await;
        buf = b;
        match res {
            Ok((n, from)) => ctl.feed(|c, now, wall| c.on_datagram(from, &buf[..n], now, wall)),
            Err(e) => {
                tracing::debug!(error = %e, "announce receive failed");
                sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
