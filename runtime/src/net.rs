//! TCP and UDP sockets on the executor's io_uring, with owned buffers.
//!
//! io_uring needs the kernel to own a buffer while an operation is in flight, so reads
//! take a buffer by value and give it back with the result: `(io::Result<_>, buffer)`.
//! Writes take `bytes::Bytes` (cheap to clone, never copied). All types here are
//! executor-local (`!Send`): create and use them on one executor.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};

use bytes::{Bytes, BytesMut};
use compio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use socket2::{Domain, Protocol, SockRef, Socket, Type};

/// Bytes reserved by a read whose buffer has no spare capacity.
pub const READ_RESERVE: usize = 16 * 1024;

/// Most buffers one vectored write accepts (Linux `IOV_MAX`).
pub const MAX_IOVECS: usize = 1024;

/// A listening TCP socket.
#[derive(Debug)]
pub struct TcpListener {
    inner: compio::net::TcpListener,
}

impl TcpListener {
    /// Binds `addr` with `SO_REUSEADDR` and a backlog of 1024. Port 0 picks an ephemeral
    /// port; [`TcpListener::local_addr`] tells which.
    pub async fn bind(addr: SocketAddr) -> io::Result<Self> {
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        sock.set_reuse_address(true)?;
        sock.bind(&addr.into())?;
        sock.listen(1024)?;
        let inner = compio::net::TcpListener::from_std(sock.into())?;
        Ok(Self { inner })
    }

    /// The bound address, with the resolved port.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Sets the TCP congestion control algorithm (`TCP_CONGESTION`, e.g. `"bbr"`); accepted
    /// connections start with it. Fails when the kernel does not offer it to this process.
    pub fn set_congestion(&self, name: &str) -> io::Result<()> {
        SockRef::from(&self.inner).set_tcp_congestion(name.as_bytes())
    }

    /// Waits for the next connection.
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let (inner, peer) = self.inner.accept().await?;
        Ok((TcpStream { inner }, peer))
    }

    /// Stops listening now: the socket leaves the LISTEN state (a pending [`accept`]
    /// fails) and its port can be bound again at once. Dropping the listener alone is not
    /// enough for that while an accept is in flight: the io_uring operation keeps the socket
    /// open until the ring has torn it down, asynchronously.
    ///
    /// [`accept`]: TcpListener::accept
    pub fn shutdown(&self) -> io::Result<()> {
        SockRef::from(&self.inner).shutdown(std::net::Shutdown::Both)
    }
}

/// A connected TCP stream.
#[derive(Debug)]
pub struct TcpStream {
    inner: compio::net::TcpStream,
}

impl TcpStream {
    /// Connects to `addr`. Wrap in [`timeout`](crate::time::timeout) to bound the wait.
    pub async fn connect(addr: SocketAddr) -> io::Result<Self> {
        Ok(Self {
            inner: compio::net::TcpStream::connect(addr).await?,
        })
    }

    /// Enables or disables Nagle's algorithm (`TCP_NODELAY`).
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.inner.set_nodelay(nodelay)
    }

    /// Sets the TCP congestion control algorithm (`TCP_CONGESTION`, e.g. `"bbr"`). Fails
    /// when the kernel does not offer it to this process.
    pub fn set_congestion(&self, name: &str) -> io::Result<()> {
        SockRef::from(&self.inner).set_tcp_congestion(name.as_bytes())
    }

    /// The TCP congestion control algorithm in use.
    pub fn congestion(&self) -> io::Result<String> {
        let name = SockRef::from(&self.inner).tcp_congestion()?;
        Ok(String::from_utf8_lossy(&name)
            .trim_end_matches('\0')
            .to_string())
    }

    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// The path's round trip as the kernel measured it ([`PathState::rtt`]).
    pub fn rtt(&self) -> io::Result<std::time::Duration> {
        Ok(tcp_path_state(&self.inner)?.rtt)
    }

    /// Bytes written to the connection that the peer has not acknowledged yet (`SIOCOUTQ`:
    /// those the kernel still holds to send or resend). One `ioctl`, no I/O on the
    /// connection. How far behind the path is: a write returns once the kernel has taken
    /// the bytes, which over a lossy path is seconds before the peer gets them.
    pub fn send_queue(&self) -> io::Result<usize> {
        tcp_send_queue(&self.inner)
    }

    /// What the kernel knows of the path (`TCP_INFO`, one `getsockopt`, no I/O on the
    /// connection): its round trip, and whether the peer is acknowledging what was sent. A
    /// path that drops everything (a cut, a route gone, a retransmission backoff after heavy
    /// loss) shows as data outstanding and no acknowledgement for seconds, while writes still
    /// return as long as the kernel's buffer has room.
    pub fn path_state(&self) -> io::Result<PathState> {
        tcp_path_state(&self.inner)
    }

    /// Reads what is available into the spare capacity of `buf` (after its current
    /// contents; [`READ_RESERVE`] bytes are reserved if it has none). `Ok(0)` is EOF.
    pub async fn read(&mut self, buf: BytesMut) -> (io::Result<usize>, BytesMut) {
        read_into(&mut self.inner, buf).await
    }

    /// Writes all of `buf`.
    pub async fn write_all(&mut self, buf: Bytes) -> io::Result<()> {
        self.inner.write_all(buf).await.0
    }

    /// Writes all of `bufs` with vectored sends, without copying them together. Gives the
    /// vector back so its allocation can be reused. At most [`MAX_IOVECS`] buffers.
    pub async fn write_all_vectored(&mut self, bufs: Vec<Bytes>) -> (io::Result<()>, Vec<Bytes>) {
        write_vectored_into(&mut self.inner, bufs).await
    }

    /// Shuts down the write direction (the peer reads EOF).
    pub async fn shutdown(&mut self) -> io::Result<()> {
        AsyncWrite::shutdown(&mut self.inner).await
    }

    /// Splits into halves that two tasks of the same executor can own and use at once.
    pub fn into_split(self) -> (TcpReadHalf, TcpWriteHalf) {
        let (r, w) = self.inner.into_split();
        (TcpReadHalf { inner: r }, TcpWriteHalf { inner: w })
    }

    /// Detaches the connection from this executor as a blocking-mode-agnostic
    /// `std::net::TcpStream` (which is `Send`), so it can be handed to another executor and
    /// re-attached there with [`TcpStream::from_std`] — e.g. a handshake done on the control
    /// plane, the connection then served by its data shard.
    ///
    /// The descriptor is duplicated and this executor's copy closed, which leaves the TCP
    /// connection itself untouched. Call it only when no read or write on this stream is in
    /// flight (i.e. not from inside a cancelled operation): bytes already read stay in the
    /// caller's buffers.
    pub fn into_std(self) -> io::Result<std::net::TcpStream> {
        let dup = SockRef::from(&self.inner).try_clone()?;
        drop(self);
        Ok(dup.into())
    }

    /// Attaches an established `std::net::TcpStream` (e.g. from [`TcpStream::into_std`]) to
    /// the calling executor.
    pub fn from_std(stream: std::net::TcpStream) -> io::Result<Self> {
        Ok(Self {
            inner: compio::net::TcpStream::from_std(stream)?,
        })
    }
}

/// The read half of a [`TcpStream`].
#[derive(Debug)]
pub struct TcpReadHalf {
    inner: compio::net::TcpStream,
}

impl TcpReadHalf {
    /// See [`TcpStream::read`].
    pub async fn read(&mut self, buf: BytesMut) -> (io::Result<usize>, BytesMut) {
        read_into(&mut self.inner, buf).await
    }

    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }
}

/// The write half of a [`TcpStream`].
#[derive(Debug)]
pub struct TcpWriteHalf {
    inner: compio::net::TcpStream,
}

impl TcpWriteHalf {
    /// See [`TcpStream::write_all`].
    pub async fn write_all(&mut self, buf: Bytes) -> io::Result<()> {
        self.inner.write_all(buf).await.0
    }

    /// See [`TcpStream::write_all_vectored`].
    pub async fn write_all_vectored(&mut self, bufs: Vec<Bytes>) -> (io::Result<()>, Vec<Bytes>) {
        write_vectored_into(&mut self.inner, bufs).await
    }

    /// See [`TcpStream::shutdown`].
    pub async fn shutdown(&mut self) -> io::Result<()> {
        AsyncWrite::shutdown(&mut self.inner).await
    }

    /// See [`TcpStream::send_queue`].
    pub fn send_queue(&self) -> io::Result<usize> {
        tcp_send_queue(&self.inner)
    }

    /// See [`TcpStream::rtt`].
    pub fn rtt(&self) -> io::Result<std::time::Duration> {
        Ok(tcp_path_state(&self.inner)?.rtt)
    }

    /// See [`TcpStream::path_state`].
    pub fn path_state(&self) -> io::Result<PathState> {
        tcp_path_state(&self.inner)
    }

    /// A handle to look at the connection's kernel state while this half is busy (see
    /// [`TcpProbe`]).
    pub fn probe(&self) -> TcpProbe {
        TcpProbe {
            inner: self.inner.clone(),
        }
    }
}

/// Looks at a connection's kernel state (`TCP_INFO`, `SIOCOUTQ`) without I/O, for a task
/// that holds neither half: a write stuck on a full socket keeps its half busy for as long as
/// the path drops everything, which is when the state matters. It holds the connection's
/// descriptor open while it lives (the connection closes when the halves *and* every probe
/// are dropped): drop it when the connection ends.
#[derive(Debug, Clone)]
pub struct TcpProbe {
    inner: compio::net::TcpStream,
}

impl TcpProbe {
    /// See [`TcpStream::path_state`].
    pub fn path_state(&self) -> io::Result<PathState> {
        tcp_path_state(&self.inner)
    }

    /// See [`TcpStream::send_queue`].
    pub fn send_queue(&self) -> io::Result<usize> {
        tcp_send_queue(&self.inner)
    }
}

/// What [`TcpStream::path_state`] read: the path's round trip, and whether and how much the
/// peer is acknowledging what was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathState {
    /// The connection's round-trip time as the kernel measured it: its lowest sample of the
    /// last minutes (`tcpi_min_rtt`), which is the path's round trip; the smoothed estimate
    /// (`tcpi_rtt`) of a link with sparse traffic is mostly the peer's delayed-acknowledgement
    /// wait (milliseconds on loopback, where the path takes microseconds). The smoothed
    /// estimate where the kernel gives no minimum; microsecond resolution; zero before
    /// anything was acknowledged.
    pub rtt: std::time::Duration,
    /// Segments sent and not acknowledged yet (`tcpi_unacked`).
    pub unacked: u32,
    /// Retransmission timeouts in a row without an acknowledgement of new data
    /// (`tcpi_retransmits`; a closed window's probes do not count): the oldest segment
    /// outstanding has waited at least that many timeouts (200 ms and more each, doubling).
    pub timeouts: u8,
    /// Time since the last acknowledgement arrived (`tcpi_last_ack_recv`, millisecond
    /// resolution): on an idle connection this grows without anything being wrong, so it
    /// means something only while `unacked` is not zero.
    pub since_ack: std::time::Duration,
    /// Bytes the peer has acknowledged since the connection opened, its opening (SYN)
    /// counted as one (`tcpi_bytes_acked`; zero on a kernel older than 4.1): while it grows
    /// the peer is taking what is sent, however long its own frames take to arrive.
    pub bytes_acked: u64,
}

/// The path's state from the kernel's `TCP_INFO` (see [`PathState`]).
fn tcp_path_state(s: &compio::net::TcpStream) -> io::Result<PathState> {
    let info = tcp_info(s)?;
    let rtt_us = match info.tcpi_min_rtt {
        // Not measured yet, or a kernel whose `tcp_info` ends before the field.
        0 | u32::MAX => info.tcpi_rtt,
        min => min,
    };
    Ok(PathState {
        rtt: std::time::Duration::from_micros(u64::from(rtt_us)),
        unacked: info.tcpi_unacked,
        timeouts: info.tcpi_retransmits,
        since_ack: std::time::Duration::from_millis(u64::from(info.tcpi_last_ack_recv)),
        bytes_acked: info.tcpi_bytes_acked,
    })
}

/// The kernel's `TCP_INFO` of a connection (one `getsockopt`, no I/O on the connection).
fn tcp_info(s: &compio::net::TcpStream) -> io::Result<libc::tcp_info> {
    use std::os::fd::AsRawFd;
    let sock = SockRef::from(s);
    // SAFETY: all-zero bytes are a valid `tcp_info` (plain integers).
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the descriptor is open for the borrow of `s`; the kernel writes at most `len`
    // bytes into `info`, which is that large, and stores the length it wrote in `len`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

/// The bytes of a connection not yet acknowledged by its peer (`SIOCOUTQ`, which Linux
/// spells `TIOCOUTQ`: sent and unacknowledged, plus not sent yet).
fn tcp_send_queue(s: &compio::net::TcpStream) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let sock = SockRef::from(s);
    let mut n: libc::c_int = 0;
    // SAFETY: the descriptor is open for the borrow of `s`; `SIOCOUTQ` writes one `int`
    // through the pointer, which points at one.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::TIOCOUTQ, &mut n as *mut libc::c_int) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(n).unwrap_or(0))
}

async fn read_into(
    s: &mut compio::net::TcpStream,
    mut buf: BytesMut,
) -> (io::Result<usize>, BytesMut) {
    if buf.capacity() == buf.len() {
        buf.reserve(READ_RESERVE);
    }
    let compio::BufResult(res, buf) = s.append(buf).await;
    (res, buf)
}

async fn write_vectored_into(
    s: &mut compio::net::TcpStream,
    bufs: Vec<Bytes>,
) -> (io::Result<()>, Vec<Bytes>) {
    if bufs.len() > MAX_IOVECS {
        let msg = format!(
            "{} buffers exceed the vectored-write limit of {MAX_IOVECS}",
            bufs.len()
        );
        return (Err(io::Error::new(io::ErrorKind::InvalidInput, msg)), bufs);
    }
    if bufs.is_empty() {
        return (Ok(()), bufs);
    }
    let compio::BufResult(res, bufs) = s.write_vectored_all(bufs).await;
    (res, bufs)
}

/// Socket options applied before a UDP bind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpOptions {
    /// `SO_REUSEADDR`.
    pub reuse_addr: bool,
    /// `SO_REUSEPORT` (several sockets, possibly in several processes, share the port).
    pub reuse_port: bool,
}

/// A UDP socket.
#[derive(Debug)]
pub struct UdpSocket {
    inner: compio::net::UdpSocket,
}

impl UdpSocket {
    /// Binds `addr` with `opts`.
    pub async fn bind(addr: SocketAddr, opts: UdpOptions) -> io::Result<Self> {
        let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if opts.reuse_addr {
            sock.set_reuse_address(true)?;
        }
        if opts.reuse_port {
            sock.set_reuse_port(true)?;
        }
        sock.bind(&addr.into())?;
        let inner = compio::net::UdpSocket::from_std(sock.into())?;
        Ok(Self { inner })
    }

    /// The bound address, with the resolved port.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Joins IPv4 multicast `group` on the interface that owns address `interface`.
    /// Name the interface explicitly: `0.0.0.0` lets the kernel pick by route, and
    /// loopback (no `MULTICAST` flag) is then never picked.
    pub fn join_multicast_v4(&self, group: Ipv4Addr, interface: Ipv4Addr) -> io::Result<()> {
        SockRef::from(&self.inner).join_multicast_v4(&group, &interface)
    }

    /// Leaves a group joined with [`UdpSocket::join_multicast_v4`].
    pub fn leave_multicast_v4(&self, group: Ipv4Addr, interface: Ipv4Addr) -> io::Result<()> {
        SockRef::from(&self.inner).leave_multicast_v4(&group, &interface)
    }

    /// Sends multicast through the interface that owns address `interface`.
    pub fn set_multicast_if_v4(&self, interface: Ipv4Addr) -> io::Result<()> {
        SockRef::from(&self.inner).set_multicast_if_v4(&interface)
    }

    /// Multicast TTL (hops); 1 keeps datagrams on the local link.
    pub fn set_multicast_ttl_v4(&self, ttl: u32) -> io::Result<()> {
        SockRef::from(&self.inner).set_multicast_ttl_v4(ttl)
    }

    /// Whether this host's own multicast sockets receive what it sends.
    pub fn set_multicast_loop_v4(&self, on: bool) -> io::Result<()> {
        SockRef::from(&self.inner).set_multicast_loop_v4(on)
    }

    /// Sends one datagram to `addr`; returns the bytes sent.
    pub async fn send_to(&self, buf: Bytes, addr: SocketAddr) -> io::Result<usize> {
        self.inner.send_to(buf, addr).await.0
    }

    /// Receives one datagram, replacing the contents of `buf` (reserving 64 KiB if it has
    /// no capacity; longer datagrams are truncated to the capacity).
    pub async fn recv_from(
        &self,
        mut buf: BytesMut,
    ) -> (io::Result<(usize, SocketAddr)>, BytesMut) {
        buf.clear();
        if buf.capacity() == 0 {
            buf.reserve(64 * 1024);
        }
        let compio::BufResult(res, buf) = self.inner.recv_from(buf).await;
        (res, buf)
    }
}
