//! A bystander's view of the host: what another program gets while the storm's nodes run.
//! "The machine saturated" says every core was busy; it does not say whether a shell, a
//! monitor or a service beside the nodes still got the CPU when it asked. A bystander asks
//! the way such a program does: it sleeps [`SLEEP`], then needs [`WORK`] of CPU, over and
//! over, and records how late it woke and how long (wall) its work took. On an idle host both
//! are near zero and [`WORK`]; on a host whose runnable threads outnumber its cores by k, the
//! work takes about k times as long.
//!
//! Two of them run, because where a program sits decides what it gets: the kernel's
//! scheduler shares the cores between sessions before it shares them between their threads
//! when it groups them (`autogroup`, [`autogroup`]; a service's cgroup does the same). One is a
//! thread of the storm ([`Probe::start`]), in the session that started the nodes, as a script
//! that starts them and its shell are; the other a process of a session of its own
//! ([`Probe::start_apart`], this binary's hidden `storm-bystander`, [`run_apart`]), as a login
//! shell or a monitor elsewhere on the host is.
//!
//! Each costs ~2 % of one core (its work over its period); the machine figures count them,
//! like the storm's own polling.
//!
//! **Owns:** the bystander thread and process and their figures. **Must not touch:** the
//! nodes.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the bystander sleeps between two pieces of work.
pub(crate) const SLEEP: Duration = Duration::from_millis(20);
/// The CPU time of one piece of work (the thread's own CPU clock, not the wall).
pub(crate) const WORK: Duration = Duration::from_micros(500);

/// One round of the bystander: when it went to sleep, how late it woke, how long its work
/// took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tick {
    pub(crate) at: Instant,
    pub(crate) woke_late: Duration,
    pub(crate) work_wall: Duration,
}

impl Tick {
    /// When its work was done (the round after it went to sleep at once).
    pub(crate) fn end(&self) -> Instant {
        self.at + SLEEP + self.woke_late + self.work_wall
    }
}

/// The bystander's figures over one phase of the storm.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub(crate) struct Bystander {
    /// Rounds that overlapped the phase (asleep, waking or working in it): a phase shorter
    /// than a round still has the one it fell in.
    pub(crate) rounds: usize,
    /// How late it woke from its sleep, ms: median, 90th percentile, worst.
    pub(crate) woke_late_ms: Quantiles,
    /// How long (wall) its [`WORK`] of CPU took, ms; `WORK` itself on an idle host.
    pub(crate) work_ms: Quantiles,
}

/// Median, 90th percentile and maximum.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub(crate) struct Quantiles {
    pub(crate) p50: f64,
    pub(crate) p90: f64,
    pub(crate) max: f64,
}

impl Quantiles {
    /// Of `v` (sorted here); zeros when empty. The nearest-rank percentile.
    fn of(mut v: Vec<f64>) -> Quantiles {
        if v.is_empty() {
            return Quantiles::default();
        }
        v.sort_by(f64::total_cmp);
        let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Quantiles {
            p50: rank(0.5),
            p90: rank(0.9),
            max: v[v.len() - 1],
        }
    }
}

/// The figures of the rounds that overlapped `[from, to)`. A round counts whole even when
/// part of it fell outside: a start of 25 ms lies within one round of the bystander, and the
/// round it woke in is the one that says what the start cost it. (Only rounds already
/// recorded: [`Probe::await_round_past`] first, for the one in progress at `to`.)
pub(crate) fn figures(ticks: &[Tick], from: Instant, to: Instant) -> Bystander {
    let mut late = Vec::new();
    let mut work = Vec::new();
    for t in ticks.iter().filter(|t| t.at < to && t.end() > from) {
        late.push(t.woke_late.as_secs_f64() * 1e3);
        work.push(t.work_wall.as_secs_f64() * 1e3);
    }
    Bystander {
        rounds: late.len(),
        woke_late_ms: Quantiles::of(late),
        work_ms: Quantiles::of(work),
    }
}

/// A clock's reading (`None` if it cannot be read).
fn clock(id: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec` for the duration of the call; an unknown
    // clock is an error return, not undefined behaviour.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// This thread's CPU time (`None` if the clock cannot be read).
fn thread_cpu() -> Option<Duration> {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Whether the kernel shares the cores between sessions first (`None`: it does not say).
pub(crate) fn autogroup() -> Option<bool> {
    let s = std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled").ok()?;
    Some(s.trim() != "0")
}

/// One instant on both [`Instant`]'s clock and `CLOCK_MONOTONIC`, the clock two processes
/// share: a round of the process apart crosses the pipe as the latter.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    at: Instant,
    mono: Duration,
}

impl Anchor {
    /// The closest of a few paired readings (a thread preempted between its two reads
    /// would shift every round it converts).
    fn now() -> Option<Anchor> {
        let mut best: Option<(Duration, Anchor)> = None;
        for _ in 0..5 {
            let before = clock(libc::CLOCK_MONOTONIC)?;
            let at = Instant::now();
            let after = clock(libc::CLOCK_MONOTONIC)?;
            let gap = after.saturating_sub(before);
            if best.is_none_or(|(g, _)| gap < g) {
                best = Some((
                    gap,
                    Anchor {
                        at,
                        mono: before + gap / 2,
                    },
                ));
            }
        }
        best.map(|(_, a)| a)
    }

    fn to_mono(self, at: Instant) -> Duration {
        match at.checked_duration_since(self.at) {
            Some(d) => self.mono + d,
            None => self.mono.saturating_sub(self.at - at),
        }
    }

    fn to_instant(self, mono: Duration) -> Instant {
        match mono.checked_sub(self.mono) {
            Some(d) => self.at + d,
            None => self.at.checked_sub(self.mono - mono).unwrap_or(self.at),
        }
    }
}

/// Where a probe runs.
enum Runner {
    /// A thread of the storm.
    Thread {
        stop: Arc<AtomicBool>,
        thread: Option<JoinHandle<()>>,
    },
    /// A process of its own session, its rounds read from its stdout.
    Apart {
        child: Child,
        reader: Option<JoinHandle<()>>,
    },
}

/// A running bystander.
pub(crate) struct Probe {
    ticks: Arc<Mutex<Vec<Tick>>>,
    runner: Runner,
}

impl Probe {
    /// Starts the bystander as a thread of this process (`None` if this host has no
    /// per-thread CPU clock).
    pub(crate) fn start() -> Option<Probe> {
        thread_cpu()?;
        let stop = Arc::new(AtomicBool::new(false));
        let ticks = Arc::new(Mutex::new(Vec::new()));
        let (s, t) = (stop.clone(), ticks.clone());
        let thread = std::thread::Builder::new()
            .name("storm-bystander".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    let Some(tick) = round() else { return };
                    t.lock().unwrap_or_else(|e| e.into_inner()).push(tick);
                }
            })
            .ok()?;
        Some(Probe {
            ticks,
            runner: Runner::Thread {
                stop,
                thread: Some(thread),
            },
        })
    }

    /// Starts the bystander as a process of a session of its own: `exe storm-bystander`
    /// (this binary). `None`, with a warning, if it did not start or did not say it leads a
    /// session of its own.
    pub(crate) fn start_apart(exe: &std::path::Path) -> Option<Probe> {
        let anchor = Anchor::now()?;
        let mut child = Command::new(exe)
            .arg("storm-bystander")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| tracing::warn!(%e, "the bystander apart did not start"))
            .ok()?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        // Its first line, before any node starts: it says it leads its own session.
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let pid = child.id().to_string();
        if first.split_whitespace().collect::<Vec<_>>() != ["session", pid.as_str()] {
            tracing::warn!(%first, "the bystander apart is not in a session of its own");
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        let ticks = Arc::new(Mutex::new(Vec::new()));
        let t = ticks.clone();
        let reader = std::thread::Builder::new()
            .name("storm-bystander-apart".into())
            .spawn(move || {
                for line in lines.map_while(Result::ok) {
                    if let Some(tick) = parse_tick(&line, anchor) {
                        t.lock().unwrap_or_else(|e| e.into_inner()).push(tick);
                    }
                }
            })
            .ok()?;
        Some(Probe {
            ticks,
            runner: Runner::Apart {
                child,
                reader: Some(reader),
            },
        })
    }

    /// The rounds so far.
    pub(crate) fn ticks(&self) -> Vec<Tick> {
        self.ticks.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until a round that ended at or after `to` is recorded, so the round in progress
    /// at `to` (on a starved host, possibly the only one of a short phase) is in the figures.
    /// Gives up after `limit` with a warning (the figures then lack it): a bystander that
    /// stopped or is starved that long must not hold the storm.
    pub(crate) fn await_round_past(&self, to: Instant, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let done = {
                let t = self.ticks.lock().unwrap_or_else(|e| e.into_inner());
                t.last().is_some_and(|t| t.end() >= to)
            };
            if done {
                return;
            }
            if Instant::now() >= deadline {
                tracing::warn!(?limit, "no bystander round ended past the phase's end");
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        match &mut self.runner {
            Runner::Thread { stop, thread } => {
                stop.store(true, Ordering::Relaxed);
                if let Some(t) = thread.take() {
                    let _ = t.join();
                }
            }
            Runner::Apart { child, reader } => {
                let _ = child.kill();
                let _ = child.wait();
                if let Some(r) = reader.take() {
                    let _ = r.join();
                }
            }
        }
    }
}

/// One round: sleep, then spin on the thread's own CPU clock (the wall time this takes is
/// the bystander's share of a busy host). `None` if the clock cannot be read.
fn round() -> Option<Tick> {
    let at = Instant::now();
    std::thread::sleep(SLEEP);
    let woke = Instant::now();
    let c0 = thread_cpu()?;
    let mut x = 0u64;
    while thread_cpu().is_some_and(|c| c.saturating_sub(c0) < WORK) {
        for i in 0..256u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
    }
    let done = Instant::now();
    Some(Tick {
        at,
        woke_late: woke.saturating_duration_since(at).saturating_sub(SLEEP),
        work_wall: done - woke,
    })
}

/// A round as the process apart writes it: when it began on `CLOCK_MONOTONIC`, how late it
/// woke and how long its work took, each in ns.
fn format_tick(t: &Tick, anchor: Anchor) -> String {
    format!(
        "tick {} {} {}",
        anchor.to_mono(t.at).as_nanos(),
        t.woke_late.as_nanos(),
        t.work_wall.as_nanos()
    )
}

fn parse_tick(line: &str, anchor: Anchor) -> Option<Tick> {
    let mut w = line.strip_prefix("tick ")?.split(' ');
    let mut ns = || w.next()?.parse::<u64>().ok().map(Duration::from_nanos);
    Some(Tick {
        at: anchor.to_instant(ns()?),
        woke_late: ns()?,
        work_wall: ns()?,
    })
}

/// The process apart (`storm-bystander`): leads a session of its own, says so, then writes
/// its rounds to stdout until the storm stops it or is gone (a write fails).
pub(crate) fn run_apart() -> std::io::Result<()> {
    let sid = crate::storm_node::lead_new_session()?;
    let anchor = Anchor::now().ok_or_else(|| std::io::Error::other("no monotonic clock"))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "session {sid}")?;
    out.flush()?;
    loop {
        let tick = round().ok_or_else(|| std::io::Error::other("no per-thread CPU clock"))?;
        writeln!(out, "{}", format_tick(&tick, anchor))?;
        out.flush()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_figures_are_the_rounds_that_overlapped_the_phase() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let tick = |at: u64, late: u64, work: u64| Tick {
            at: t + ms(at),
            woke_late: ms(late),
            work_wall: ms(work),
        };
        // Ten rounds in the phase (late 1..=10 ms, work 10..=100 ms), one done before it and
        // one that began at its end (both left out).
        let mut ticks = vec![tick(0, 30, 30)];
        ticks.extend((1..=10).map(|k| tick(100 + k, k, 10 * k)));
        ticks.push(tick(200, 700, 700));
        let f = figures(&ticks, t + ms(100), t + ms(200));
        assert_eq!(f.rounds, 10);
        assert_eq!(
            f.woke_late_ms,
            Quantiles {
                p50: 5.0,
                p90: 9.0,
                max: 10.0
            }
        );
        assert_eq!(
            f.work_ms,
            Quantiles {
                p50: 50.0,
                p90: 90.0,
                max: 100.0
            }
        );
        assert_eq!(
            figures(&ticks, t + ms(2_000), t + ms(2_100)),
            Bystander::default()
        );
    }

    #[test]
    fn a_phase_shorter_than_a_round_has_the_round_it_fell_in() {
        // A 4-node start takes ~25 ms; the bystander went to sleep 10 ms before it and woke 15
        // ms late in it. Counted by the instant a round began, the start had no round, and the
        // storm reported zeros for it (a CI run failed its `rounds >= 1`).
        let t = Instant::now();
        let ms = Duration::from_millis;
        let ticks = [Tick {
            at: t,
            woke_late: ms(15),
            work_wall: ms(1),
        }];
        let f = figures(&ticks, t + ms(10), t + ms(35));
        assert_eq!(f.rounds, 1);
        assert_eq!(f.woke_late_ms.max, 15.0);
        // A round ended before the phase, or begun at its end, is not its.
        assert_eq!(figures(&ticks, t + ms(36), t + ms(60)).rounds, 0);
        assert_eq!(figures(&ticks, t - ms(10), t).rounds, 0);
    }

    #[test]
    fn the_round_in_progress_at_a_phases_end_is_awaited() {
        let p = Probe::start().expect("Linux has a per-thread CPU clock");
        // A phase of 1 ms that ends now: whichever round it fell in, it is in the figures
        // once awaited (a limit that a loaded host's 20 ms sleep will not reach).
        let from = Instant::now();
        let to = from + Duration::from_millis(1);
        p.await_round_past(to, Duration::from_secs(120));
        assert!(p.ticks().last().is_some_and(|t| t.end() >= to));
        // (Two if one round ended and the next began within that millisecond.)
        let rounds = figures(&p.ticks(), from, to).rounds;
        assert!((1..=2).contains(&rounds), "{rounds}");
    }

    #[test]
    fn a_round_of_the_process_apart_arrives_at_the_instant_it_began() {
        // The two ends pair the clocks each at its own moment: a round read back is where it
        // was, before either pairing or after both.
        let a = Anchor::now().expect("Linux has CLOCK_MONOTONIC");
        std::thread::sleep(Duration::from_millis(2));
        let b = Anchor::now().expect("Linux has CLOCK_MONOTONIC");
        for at in [
            a.at - Duration::from_millis(40),
            b.at + Duration::from_millis(70),
        ] {
            let t = Tick {
                at,
                woke_late: Duration::from_nanos(1_234_567),
                work_wall: Duration::from_nanos(501_002),
            };
            let back = parse_tick(&format_tick(&t, a), b).expect("a tick line");
            let off = back.at.max(at) - back.at.min(at);
            assert!(off < Duration::from_millis(1), "{off:?}");
            assert_eq!((back.woke_late, back.work_wall), (t.woke_late, t.work_wall));
        }
        assert!(parse_tick("session 12", a).is_none());
        assert!(parse_tick("tick 1 2", a).is_none());
    }

    #[test]
    fn the_bystander_records_its_rounds_and_its_work_takes_at_least_its_cpu_time() {
        let p = Probe::start().expect("Linux has a per-thread CPU clock");
        let deadline = Instant::now() + Duration::from_secs(60);
        while p.ticks().len() < 3 {
            assert!(Instant::now() < deadline, "no bystander round in 60 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        for t in p.ticks() {
            assert!(t.work_wall >= WORK, "{t:?}");
        }
        drop(p);
    }
}
