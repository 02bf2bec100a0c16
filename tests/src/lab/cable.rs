//! The delay line: a thread, inside the lab's switch namespace, that carries every frame
//! between a host's switch port and the bridge after a fixed delay, for kernels without
//! `sch_netem` (the 2-core machines this project is developed on have none).
//!
//! Two raw packet sockets, one on each side, with `PACKET_VNET_HDR` so the veth offloads'
//! GSO frames and partial checksums pass through whole (no `ethtool` needed); frames the
//! socket itself sent are ignored. One FIFO queue per direction: the delay is constant, so
//! the order is the arrival order.
//!
//! **Owns:** the two sockets and the frames in flight. **Must not touch:** the plumbing (the
//! lab moves the ports on and off the bridge).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

// <linux/if_packet.h> and <linux/if_ether.h>.
const SOL_PACKET: libc::c_int = 263;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_OUTGOING: u8 = 4;
const ETH_P_ALL: u16 = 0x0003;
/// Frames held per direction (netem's default limit is 1 000).
const QUEUE_LIMIT: usize = 10_000;
/// Largest frame read: a GSO frame of 64 KiB plus its header, with room to spare.
const FRAME_MAX: usize = 256 << 10;
/// How often the thread looks at its stop flag when nothing is due.
const IDLE: Duration = Duration::from_millis(50);

/// A running delay line; stopped (its frames in flight dropped) when dropped.
pub(crate) struct Cable {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Cable {
    /// Starts carrying frames between interfaces `host_side` and `switch_side` of namespace
    /// `netns`: those read on `host_side` leave on `switch_side` after `out`, the others after
    /// `inbound`. Returns once both sockets are bound.
    pub(crate) fn start(
        netns: &str,
        host_side: &str,
        switch_side: &str,
        out: Duration,
        inbound: Duration,
    ) -> io::Result<Cable> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready, bound) = mpsc::channel();
        let (ns, a, b, s) = (
            netns.to_string(),
            host_side.to_string(),
            switch_side.to_string(),
            stop.clone(),
        );
        let thread = std::thread::Builder::new()
            .name(format!("lab-cable-{host_side}"))
            .spawn(move || {
                let sockets = super::enter_netns(&ns).and_then(|()| Ok((open(&a)?, open(&b)?)));
                match sockets {
                    Ok((a, b)) => {
                        let _ = ready.send(Ok(()));
                        carry([a, b], [out, inbound], &s);
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e));
                    }
                }
            })?;
        let cable = Cable {
            stop,
            thread: Some(thread),
        };
        match bound.recv() {
            Ok(Ok(())) => Ok(cable),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::other("the cable thread ended before binding")),
        }
    }
}

impl Drop for Cable {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A non-blocking raw packet socket bound to interface `name` of this thread's namespace.
fn open(name: &str) -> io::Result<OwnedFd> {
    let cname = std::ffi::CString::new(name).map_err(io::Error::other)?;
    // SAFETY: `cname` is a valid NUL-terminated string for the duration of the call.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    // Protocol 0: nothing is queued to the socket before it is bound to its interface.
    // SAFETY: plain system call; the result is checked.
    let fd = check(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let on: libc::c_int = 1;
    let set = |opt: libc::c_int| {
        // SAFETY: `on` outlives the call and its size is passed.
        check(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                SOL_PACKET,
                opt,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        })
    };
    set(PACKET_VNET_HDR)?;
    // Older kernels lack it: outgoing frames are then skipped by their packet type.
    let _ = set(PACKET_IGNORE_OUTGOING);
    let buf: libc::c_int = 8 << 20;
    for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        // SAFETY: `buf` outlives the call and its size is passed.
        check(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&buf as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        })?;
    }
    // SAFETY: all-zero is a valid sockaddr_ll; the fields that matter are set below.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as libc::c_ushort;
    addr.sll_protocol = ETH_P_ALL.to_be();
    addr.sll_ifindex = index as libc::c_int;
    // SAFETY: `addr` is a sockaddr_ll of the size passed.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })?;
    Ok(fd)
}

/// Sends one frame; a failure (the port is down while cut) loses it, as a wire would.
fn send(fd: &OwnedFd, frame: &[u8]) {
    // SAFETY: `frame` is valid for reads of its length.
    let _ = unsafe { libc::send(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
}

/// Reads one frame into `buf`: `Some(len)`, or `None` when nothing is left (or on an error,
/// e.g. once after a cut). Frames this socket sent come back as `Some(0)`.
fn recv(fd: &OwnedFd, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: all-zero is a valid sockaddr_ll.
    let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: `buf` is valid for writes of its length, `from` for `len` bytes.
    let n = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            0,
            (&mut from as *mut libc::sockaddr_ll).cast(),
            &mut len,
        )
    };
    if n < 0 {
        return None;
    }
    Some(if from.sll_pkttype == PACKET_OUTGOING {
        0
    } else {
        n as usize
    })
}

/// The line itself: until `stop`, frames read on `fds[i]` leave on the other after
/// `delay[i]`.
fn carry(fds: [OwnedFd; 2], delay: [Duration; 2], stop: &AtomicBool) {
    let mut queues: [VecDeque<(Instant, Vec<u8>)>; 2] = [VecDeque::new(), VecDeque::new()];
    let mut buf = vec![0u8; FRAME_MAX];
    while !stop.load(Ordering::Acquire) {
        let now = Instant::now();
        let mut next = now + IDLE;
        for (i, q) in queues.iter_mut().enumerate() {
            while q.front().is_some_and(|(due, _)| *due <= now) {
                let (_, frame) = q.pop_front().expect("checked");
                send(&fds[1 - i], &frame);
            }
            if let Some((due, _)) = q.front() {
                next = next.min(*due);
            }
        }
        let wait = next.saturating_duration_since(Instant::now());
        let mut polled = [
            libc::pollfd {
                fd: fds[0].as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: fds[1].as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let timeout = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(wait.subsec_nanos() as i32),
        };
        // SAFETY: `polled` and `timeout` are valid for the call; no signal mask is changed.
        let ready = unsafe { libc::ppoll(polled.as_mut_ptr(), 2, &timeout, std::ptr::null()) };
        if ready <= 0 {
            continue;
        }
        for i in 0..2 {
            if polled[i].revents == 0 {
                continue;
            }
            // A bounded batch per wake-up, so one busy direction cannot starve the other.
            for _ in 0..256 {
                let Some(n) = recv(&fds[i], &mut buf) else {
                    break;
                };
                if n == 0 {
                    continue;
                }
                if delay[i].is_zero() && queues[i].is_empty() {
                    send(&fds[1 - i], &buf[..n]);
                } else if queues[i].len() < QUEUE_LIMIT {
                    queues[i].push_back((Instant::now() + delay[i], buf[..n].to_vec()));
                }
            }
        }
    }
}
