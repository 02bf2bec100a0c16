//! What the lab does to its hosts' links: loss and delay on a host's link, a cut and its
//! heal, a block between two hosts, loss on the path between two hosts only, and a path
//! stalled one way (classic BPF filters in the hosts' `tc` hooks, netem or the cable for
//! delay).
//!
//! **Owns:** those faults. **Must not touch:** the lab's build and teardown (`lab.rs`).

use super::*;

/// Where a host's filter that drops what host `other` sends sits (one per peer host).
fn block_pref(other: usize) -> String {
    (100 + other).to_string()
}

/// Where a host's filter that drops the TCP data host `other` sends sits.
fn stall_pref(other: usize) -> String {
    (200 + other).to_string()
}

impl Lab {
    /// Puts `program` (classic BPF, `tc` bytecode) on `hook` of host namespace `ns`'s
    /// interface at priority `pref`, replacing what was there (the `clsact` qdisc added first
    /// if missing).
    fn bpf_filter(&self, ns: &str, hook: &str, pref: &str, program: &str) -> Result<(), LabError> {
        let qdiscs = self.tc(&["-n", ns, "qdisc", "show", "dev", HOST_IF])?;
        if !qdiscs.contains("clsact") {
            self.tc(&["-n", ns, "qdisc", "add", "dev", HOST_IF, "clsact"])?;
        }
        self.tc(&[
            "-n", ns, "filter", "replace", "dev", HOST_IF, hook, "pref", pref, "handle", "1",
            "bpf", "da", "bytecode", program,
        ])?;
        Ok(())
    }

    /// Random loss of `pct` percent on host `k`'s link, both directions (0 removes it).
    pub fn loss(&self, k: usize, pct: u32) {
        assert!(pct <= 100, "a loss rate is a percentage");
        let ns = self.host(k);
        let step = || -> Result<(), LabError> {
            for hook in ["egress", "ingress"] {
                if pct == 0 {
                    // Absent when no loss was set: nothing to remove.
                    let _ = self.tc(&[
                        "-n", &ns, "filter", "del", "dev", HOST_IF, hook, "pref", "10",
                    ]);
                } else {
                    self.bpf_filter(&ns, hook, "10", &loss_program(f64::from(pct)))?;
                }
            }
            Ok(())
        };
        step().unwrap_or_else(|e| panic!("loss {pct}% on h{k}: {e}"));
    }

    /// A fixed delay of `ms` milliseconds on host `k`'s link, each way (a round trip through
    /// it gains twice that; 0 removes it).
    pub fn delay(&self, k: usize, ms: u32) {
        let step = || {
            if self.netem {
                self.netem_delay(k, ms)
            } else {
                self.cable_delay(k, ms)
            }
        };
        step().unwrap_or_else(|e| panic!("delay {ms} ms on h{k}: {e}"));
    }

    fn netem_delay(&self, k: usize, ms: u32) -> Result<(), LabError> {
        let (ns, sw, port) = (self.host(k), self.switch(), format!("p{k}"));
        for (ns, dev) in [(ns.as_str(), HOST_IF), (sw.as_str(), port.as_str())] {
            if ms == 0 {
                let _ = self.tc(&["-n", ns, "qdisc", "del", "dev", dev, "root"]);
            } else {
                let d = format!("{ms}ms");
                self.tc(&[
                    "-n", ns, "qdisc", "replace", "dev", dev, "root", "netem", "delay", &d,
                    "limit", "10000",
                ])?;
            }
        }
        Ok(())
    }

    /// Without netem: host `k`'s switch port `pK` leaves the bridge; a veth pair `dK`/`qK`
    /// takes its place (`qK` on the bridge) and a delay line carries frames between `pK` and
    /// `dK`.
    fn cable_delay(&self, k: usize, ms: u32) -> Result<(), LabError> {
        let sw = self.switch();
        let (p, d, q) = (format!("p{k}"), format!("d{k}"), format!("q{k}"));
        let mut cables = self.cables.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = cables.remove(&k) {
            // The port stays off the bridge while the line is replaced.
            drop(old);
        } else if ms > 0 {
            self.ip(&[
                "-n", &sw, "link", "add", &d, "type", "veth", "peer", "name", &q,
            ])?;
            self.ip(&["-n", &sw, "link", "set", &p, "nomaster"])?;
            self.ip(&["-n", &sw, "link", "set", &d, "up"])?;
        }
        if ms == 0 {
            if self.ip(&["-n", &sw, "link", "show", &d]).is_ok() {
                self.ip(&["-n", &sw, "link", "del", &d])?;
                self.ip(&["-n", &sw, "link", "set", &p, "master", "br0"])?;
            }
            return Ok(());
        }
        let delay = Duration::from_millis(u64::from(ms));
        cables.insert(k, Cable::start(&sw, &p, &d, delay, delay)?);
        // Only now on the bridge: `pK` and `qK` both bridged with the line between them
        // would be a loop.
        self.ip(&["-n", &sw, "link", "set", &q, "master", "br0"])?;
        self.ip(&["-n", &sw, "link", "set", &q, "up"])?;
        Ok(())
    }

    /// Pulls host `k`'s cable: returns once the host sees no carrier.
    pub fn cut(&self, k: usize) {
        let port = format!("p{k}");
        self.ip(&["-n", &self.switch(), "link", "set", &port, "down"])
            .and_then(|_| self.wait_carrier(k, "DOWN"))
            .unwrap_or_else(|e| panic!("cut h{k}: {e}"));
    }

    /// Plugs host `k`'s cable back in: returns once the host's link is up again.
    pub fn heal(&self, k: usize) {
        let port = format!("p{k}");
        self.ip(&["-n", &self.switch(), "link", "set", &port, "up"])
            .and_then(|_| self.wait_carrier(k, "UP"))
            .unwrap_or_else(|e| panic!("heal h{k}: {e}"));
    }

    /// Drops every packet between hosts `a` and `b`, both ways: a filter like the loss's on
    /// each host's ingress, matching the other's address. A path that fails while both hosts
    /// still reach everyone else, as a dead path in the network does: what is sent leaves and
    /// is never acknowledged, and the sender's stack sees nothing wrong (a drop on its own
    /// egress it would see: a local congestion, even a failed write).
    pub fn block(&self, a: usize, b: usize) {
        self.path_loss(a, b, 100);
    }

    /// Undoes [`Lab::block`].
    pub fn unblock(&self, a: usize, b: usize) {
        self.path_loss(a, b, 0);
    }

    /// Stalls every TCP connection from host `from` to host `to` one way: the segments
    /// carrying data that `from` sends are dropped at `to`'s ingress, bare acknowledgements
    /// pass. What `from` sends waits in its kernel, retransmitted in vain, while what `to`
    /// sends is delivered and acknowledged: the state a connection in retransmission
    /// back-off is in under heavy loss, for as long as the test wants it.
    pub fn stall_data(&self, from: usize, to: usize) {
        let (ns, pref) = (self.host(to), stall_pref(from));
        let peer: std::net::Ipv4Addr = self.addr(from).parse().expect("a lab address");
        self.bpf_filter(&ns, "ingress", &pref, &source_data_drop_program(peer))
            .unwrap_or_else(|e| panic!("stall h{from}'s data to h{to}: {e}"));
    }

    /// Undoes [`Lab::stall_data`].
    pub fn unstall_data(&self, from: usize, to: usize) {
        let (ns, pref) = (self.host(to), stall_pref(from));
        self.tc(&[
            "-n", &ns, "filter", "del", "dev", HOST_IF, "ingress", "pref", &pref,
        ])
        .unwrap_or_else(|e| panic!("unstall h{from}'s data to h{to}: {e}"));
    }

    /// Random loss of `pct` percent on the path between hosts `a` and `b`, both ways, where
    /// both still reach everyone else without loss (0 removes it; 100 is [`Lab::block`]):
    /// like the block, on each host's ingress, so the sender's stack sees a loss in the
    /// network, not a local drop.
    pub fn path_loss(&self, a: usize, b: usize, pct: u32) {
        assert!(pct <= 100, "a loss rate is a percentage");
        let step = || -> Result<(), LabError> {
            for (at, from) in [(a, b), (b, a)] {
                let (ns, pref) = (self.host(at), block_pref(from));
                if pct == 0 {
                    self.tc(&[
                        "-n", &ns, "filter", "del", "dev", HOST_IF, "ingress", "pref", &pref,
                    ])?;
                } else {
                    let peer: std::net::Ipv4Addr = self.addr(from).parse().expect("a lab address");
                    let program = source_loss_program(peer, f64::from(pct));
                    self.bpf_filter(&ns, "ingress", &pref, &program)?;
                }
            }
            Ok(())
        };
        step().unwrap_or_else(|e| panic!("path loss {pct}% h{a}-h{b}: {e}"));
    }
}
