//! `--metrics ADDR`: a node's counters in the Prometheus text format
//! ([`shoal_mesh::metrics`]) over HTTP, for a long run watched with Prometheus or `curl`.
//!
//! A tiny responder on one std thread: one connection at a time, a request head of at most
//! [`MAX_REQUEST`] bytes read within [`IO_TIMEOUT`], `GET` answered with the page, anything
//! else with 405; the connection is closed after each answer. It binds only the address the
//! user gave.

use shoal_mesh::Mesh;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest request head read; a longer one is answered 431 and closed.
const MAX_REQUEST: usize = 8 * 1024;
/// A client slower than this (reading or writing) is dropped.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the accept loop looks at its stop flag while idle.
const IDLE_POLL: Duration = Duration::from_millis(25);

/// The responder; stops its thread when dropped.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Where it listens (the port resolved when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves `mesh`'s counters on `addr` (and says where on stderr).
pub fn serve_mesh(addr: SocketAddr, mesh: &Mesh) -> std::io::Result<MetricsServer> {
    let mesh = mesh.clone();
    let server = serve(addr, move || shoal_mesh::metrics::render_mesh(&mesh))?;
    eprintln!(
        "metrics: http://{}/metrics (Prometheus text format)",
        server.local_addr()
    );
    Ok(server)
}

/// Serves the page `render` returns on every `GET` to `addr`.
pub fn serve(
    addr: SocketAddr,
    render: impl Fn() -> String + Send + 'static,
) -> std::io::Result<MetricsServer> {
    let listener = TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("shoal-metrics".into())
            .spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok((conn, peer)) => {
                            if let Err(e) = answer(conn, &render) {
                                tracing::debug!(%peer, error = %e, "metrics request failed");
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            std::thread::sleep(IDLE_POLL)
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "metrics accept failed");
                            std::thread::sleep(IDLE_POLL);
                        }
                    }
                }
            })?
    };
    Ok(MetricsServer {
        addr,
        stop,
        thread: Some(thread),
    })
}

/// Reads one request head and answers it.
fn answer(mut conn: TcpStream, render: &impl Fn() -> String) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_REQUEST {
            return respond(&mut conn, "431 Request Header Fields Too Large", "");
        }
        if Instant::now() >= deadline {
            return Ok(());
        }
        match conn.read(&mut buf)? {
            0 => return Ok(()),
            n => head.extend_from_slice(&buf[..n]),
        }
    }
    if head.starts_with(b"GET ") {
        respond(&mut conn, "200 OK", &render())
    } else {
        respond(&mut conn, "405 Method Not Allowed", "")
    }
}

fn respond(conn: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        shoal_mesh::metrics::CONTENT_TYPE,
        body.len()
    )?;
    conn.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn answers_get_with_the_page_and_refuses_the_rest() {
        let s = serve(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0), || {
            "shoal_up 1\n".to_string()
        })
        .unwrap();
        let r = get(s.local_addr(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\nshoal_up 1\n"), "{r}");
        assert!(r.contains("Content-Length: 11\r\n"), "{r}");
        let r = get(s.local_addr(), "POST /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 405"), "{r}");
        let long = format!("GET /{} HTTP/1.1\r\n", "x".repeat(3 * MAX_REQUEST));
        let mut c = TcpStream::connect(s.local_addr()).unwrap();
        // The server may close before all of it is written: that is the point.
        let _ = c.write_all(long.as_bytes());
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        assert!(out.is_empty() || out.starts_with("HTTP/1.1 431"), "{out}");
        // Still serving after the oversized request.
        let r = get(s.local_addr(), "GET / HTTP/1.0\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    }
}
