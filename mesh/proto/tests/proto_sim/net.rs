//! What travels in the simulated network (and between a node's control plane and its shard),
//! and how a node takes it when it arrives.

use super::datapath::Kind;
use super::node::{End, Sock};
use super::Sim;
use bytes::Bytes;
use shoal_proto::cmd::{ToControl, ToShard};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

pub(super) enum Ev {
    Beacon {
        to: usize,
        from_ip: Ipv4Addr,
        datagram: Bytes,
    },
    Accept {
        to: usize,
        dialer: End,
    },
    Connected {
        to: End,
        remote: End,
    },
    DialFailed {
        to: End,
    },
    Bytes {
        to: End,
        bytes: Bytes,
    },
    Eof {
        to: End,
    },
    ToShard {
        node: usize,
        gen: u64,
        cmd: ToShard<()>,
    },
    ToControl {
        node: usize,
        gen: u64,
        report: ToControl,
    },
    /// The pump of a node whose shard takes time per command (`Sim::shard_cmd_cost`).
    Pump {
        node: usize,
        gen: u64,
    },
}

impl Ev {
    /// The node whose state handling this event changes.
    pub(super) fn target(&self) -> usize {
        match self {
            Ev::Beacon { to, .. } | Ev::Accept { to, .. } => *to,
            Ev::Connected { to, .. }
            | Ev::DialFailed { to }
            | Ev::Bytes { to, .. }
            | Ev::Eof { to } => to.node,
            Ev::ToShard { node, .. } | Ev::ToControl { node, .. } | Ev::Pump { node, .. } => *node,
        }
    }
}

impl Sim {
    pub(super) fn handle(&mut self, ev: Ev) {
        let (now, wall) = (self.now, self.wall_ms());
        match ev {
            Ev::Beacon {
                to,
                from_ip,
                datagram,
            } => {
                if !self.nodes[to].alive || !self.nodes[to].cfg.scouting {
                    return;
                }
                let src = SocketAddr::new(IpAddr::V4(from_ip), 45454);
                self.nodes[to].core.on_datagram(src, &datagram, now, wall);
                self.drive(to);
            }
            Ev::Accept { to, dialer } => {
                if !self.nodes[to].alive {
                    self.schedule(to, dialer.node, Ev::DialFailed { to: dialer });
                    return;
                }
                let from = Some(IpAddr::V4(self.nodes[dialer.node].ip));
                let Some(l) = self.nodes[to].core.on_accepted(from, now, wall) else {
                    self.schedule(to, dialer.node, Ev::DialFailed { to: dialer });
                    self.drive(to);
                    return;
                };
                // The dialer learns its connect completed before any byte arrives.
                let me = self.end(to, l);
                self.schedule(
                    to,
                    dialer.node,
                    Ev::Connected {
                        to: dialer,
                        remote: me,
                    },
                );
                self.nodes[to].socks.insert(
                    l,
                    Sock {
                        remote: Some(dialer),
                        ..Sock::default()
                    },
                );
                self.drive(to);
            }
            Ev::Connected { to, remote } => {
                if !self.current(&to) || !self.nodes[to.node].socks.contains_key(&to.link) {
                    self.schedule(to.node, remote.node, Ev::Eof { to: remote });
                    return;
                }
                let i = to.node;
                self.nodes[i].socks.get_mut(&to.link).unwrap().remote = Some(remote);
                let ip = Some(IpAddr::V4(self.nodes[remote.node].ip));
                self.nodes[i].core.on_dial_connected(to.link, ip, now, wall);
                self.drive(i);
            }
            Ev::DialFailed { to } => {
                if self.current(&to) && self.nodes[to.node].socks.remove(&to.link).is_some() {
                    self.nodes[to.node].core.on_dial_failed(to.link, now, wall);
                    self.drive(to.node);
                }
            }
            Ev::Bytes { to, bytes } => {
                if !self.current(&to) {
                    return;
                }
                let (i, link) = (to.node, to.link);
                let n = &mut self.nodes[i];
                let Some(sock) = n.socks.get_mut(&link) else {
                    return;
                };
                if n.core.is_handshaking(link) {
                    n.rx.count(Kind::Other, bytes.len() as u64);
                    n.core.on_bytes(link, &bytes, now, wall);
                    self.drive(i);
                } else if n.shard.owns(link) {
                    let mut out = Vec::new();
                    n.shard.on_bytes(link, &bytes, now, &mut out);
                    self.apply_shard(i, out);
                } else {
                    sock.pending.extend_from_slice(&bytes);
                }
            }
            Ev::Eof { to } => {
                if !self.current(&to) {
                    return;
                }
                let (i, link) = (to.node, to.link);
                let n = &mut self.nodes[i];
                let Some(sock) = n.socks.get_mut(&link) else {
                    return;
                };
                if n.core.is_handshaking(link) {
                    n.core.on_eof(link, now, wall);
                    self.drive(i);
                } else if n.shard.owns(link) {
                    let mut out = Vec::new();
                    n.shard.on_eof(link, now, &mut out);
                    self.apply_shard(i, out);
                } else {
                    sock.eof = true;
                }
            }
            Ev::ToShard { node, gen, cmd } => {
                let n = &mut self.nodes[node];
                if n.gen != gen || !(n.alive || self.inline.is_some()) {
                    return;
                }
                let mut buffered = None;
                if let ToShard::AddLink(nl) = &cmd {
                    match n.socks.get_mut(&nl.link) {
                        Some(s) => buffered = Some((std::mem::take(&mut s.pending), s.eof)),
                        None => {
                            // The socket ended before the shard could take it.
                            let link = nl.link;
                            n.core.on_handoff_failed(link, now, wall);
                            self.drive(node);
                            return;
                        }
                    }
                }
                let mut out = Vec::new();
                n.shard.on_cmd(cmd, buffered, now, &mut out);
                self.apply_shard(node, out);
            }
            Ev::Pump { node, gen } => self.pump(node, gen),
            Ev::ToControl { node, gen, report } => {
                let n = &mut self.nodes[node];
                if n.gen != gen || !(n.alive || self.inline.is_some()) {
                    return;
                }
                n.core.on_shard_report(report, now, wall);
                self.drive(node);
            }
        }
    }
}
