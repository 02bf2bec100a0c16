//! [`ErrorLog`]: the application's side of the node's log aggregation. The node logs its own
//! warnings about hostile or broken input aggregated (see `node::warn`: per kind, the first
//! occurrence with its detail, then one count per window), but it also raises an
//! [`Event::Error`] for each of them; an application that logs every such event turns a flood
//! of garbage connections back into a flood of log lines. `ErrorLog` logs them the same way:
//! per [`ErrorKind`], the first one of a window with its peer and message, then only a count
//! ("532 more 'mesh error kind=Oversize' in the last 10 s"), so each kind writes at most two
//! lines per window whatever the rate.
//!
//! **Owns:** the aggregation of error events for an application's log. **Must not touch:** the
//! events themselves (it only reads them) or the node's own warnings.

use super::{ErrorKind, Event};
use crate::node::warn::{Admit, WarnLimiter, WARN_INTERVAL};
use crate::PeerId;
use std::time::{Duration, Instant};

/// Logs [`Event::Error`]s at warn level, aggregated per [`ErrorKind`] over a window (10 s by
/// default): at most two lines per kind and window, and every error counted in one of them.
///
/// Call [`note`](ErrorLog::note) with each event received and [`flush`](ErrorLog::flush) now
/// and then (each turn of the receive loop; it only looks at a handful of windows): a
/// window's count is written once it is over, and whatever is left when the log is dropped.
///
/// ```
/// # use shoal_mesh::{ErrorLog, Event};
/// # fn handle(_: Event) {}
/// # fn run(mut events: shoal_mesh::EventReceiver) {
/// let mut errors = ErrorLog::new();
/// while let Some(ev) = events.recv_timeout(std::time::Duration::from_millis(100)) {
///     if !errors.note(&ev) {
///         handle(ev);
///     }
///     errors.flush();
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct ErrorLog {
    limiter: WarnLimiter,
    lines: u64,
}

impl Default for ErrorLog {
    fn default() -> ErrorLog {
        ErrorLog::new()
    }
}

impl ErrorLog {
    /// An error log aggregating over the node's own window (10 s).
    pub fn new() -> ErrorLog {
        ErrorLog::with_interval(WARN_INTERVAL)
    }

    /// An error log aggregating over windows of `interval`.
    pub fn with_interval(interval: Duration) -> ErrorLog {
        ErrorLog {
            limiter: WarnLimiter::new(interval),
            lines: 0,
        }
    }

    /// Takes `ev` if it is an [`Event::Error`] (logged or counted; true), otherwise leaves it
    /// to the caller (false).
    pub fn note(&mut self, ev: &Event) -> bool {
        match ev {
            Event::Error {
                peer,
                kind,
                message,
            } => {
                self.note_at(*peer, *kind, message, Instant::now());
                true
            }
            _ => false,
        }
    }

    /// Writes the counts of the windows that are over.
    pub fn flush(&mut self) {
        self.flush_at(Instant::now());
    }

    /// Lines written so far (first occurrences and counts).
    pub fn lines(&self) -> u64 {
        self.lines
    }

    fn note_at(&mut self, peer: Option<PeerId>, kind: ErrorKind, message: &str, now: Instant) {
        let key = key(kind);
        if let Admit::Log { earlier } = self.limiter.admit(key, now) {
            if earlier > 0 {
                self.summary(key, earlier);
            }
            self.lines += 1;
            match peer {
                Some(peer) => tracing::warn!(%peer, message, "{key}"),
                None => tracing::warn!(message, "{key}"),
            }
        }
    }

    fn flush_at(&mut self, now: Instant) {
        for s in self.limiter.flush(now) {
            self.summary(s.key, s.count);
        }
    }

    fn summary(&mut self, key: &str, count: u64) {
        self.lines += 1;
        let secs = self.limiter.interval().as_secs();
        tracing::warn!("{count} more '{key}' in the last {secs} s");
    }
}

impl Drop for ErrorLog {
    /// Writes what every open window counted, so no error goes unreported.
    fn drop(&mut self) {
        let end = Instant::now() + self.limiter.interval();
        self.flush_at(end);
    }
}

/// The aggregation key (and log message) of an error kind.
fn key(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Malformed => "mesh error kind=Malformed",
        ErrorKind::Oversize => "mesh error kind=Oversize",
        ErrorKind::SlowPeer => "mesh error kind=SlowPeer",
        ErrorKind::Stalled => "mesh error kind=Stalled",
        ErrorKind::Scouting => "mesh error kind=Scouting",
        ErrorKind::Io => "mesh error kind=Io",
        ErrorKind::ModeMismatch => "mesh error kind=ModeMismatch",
        ErrorKind::Crypto => "mesh error kind=Crypto",
        ErrorKind::Identity => "mesh error kind=Identity",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn each_kind_writes_its_first_error_then_one_count_per_window() {
        let t0 = Instant::now();
        let mut log = ErrorLog::with_interval(10 * S);
        for i in 0..1000u32 {
            let at = t0 + S * i / 200; // 1000 errors of each kind in 5 s
            log.note_at(None, ErrorKind::Oversize, "frame of 1 GiB", at);
            log.note_at(Some(PeerId([1; 16])), ErrorKind::Malformed, "junk", at);
        }
        assert_eq!(log.lines(), 2, "one line per kind so far");
        log.flush_at(t0 + 9 * S);
        assert_eq!(log.lines(), 2, "windows still open");
        log.flush_at(t0 + 10 * S);
        assert_eq!(log.lines(), 4, "then one count per kind");
        // A new window: logged again; what it counts is written when the log goes.
        log.note_at(None, ErrorKind::Oversize, "again", t0 + 11 * S);
        log.note_at(None, ErrorKind::Oversize, "again", t0 + 12 * S);
        assert_eq!(log.lines(), 5);
        let mut log = log;
        log.flush_at(t0 + 30 * S);
        assert_eq!(log.lines(), 6, "the open window's count is written");
    }

    #[test]
    fn other_events_are_left_to_the_caller() {
        let mut log = ErrorLog::new();
        let peer = PeerId([2; 16]);
        assert!(!log.note(&Event::PeerConnected { peer }));
        assert!(log.note(&Event::Error {
            peer: Some(peer),
            kind: ErrorKind::Io,
            message: "reset".into(),
        }));
        assert_eq!(log.lines(), 1);
    }
}
