//! A bystander's view of the host: what another program gets while the storm's nodes run.
//! "The machine saturated" says every core was busy; it does not say whether a shell, a
//! monitor or a service beside the nodes still got the CPU when it asked. A thread of the
//! storm's own asks the way such a program does: it sleeps [`SLEEP`], then needs [`WORK`] of
//! CPU, over and over, and records how late it woke and how long (wall) its work took.
//! On an idle host both are near zero and [`WORK`]; on a host whose runnable threads
//! outnumber its cores by k, the work takes about k times as long.
//!
//! The bystander costs ~2 % of one core (its work over its period); the machine figures
//! count it, like the storm's own polling.
//!
//! **Owns:** the bystander thread and its figures. **Must not touch:** the nodes.

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

/// The bystander's figures over one phase of the storm.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub(crate) struct Bystander {
    /// Rounds that began in the phase.
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

/// The figures of the rounds that began in `[from, to)`.
pub(crate) fn figures(ticks: &[Tick], from: Instant, to: Instant) -> Bystander {
    let mut late = Vec::new();
    let mut work = Vec::new();
    for t in ticks.iter().filter(|t| t.at >= from && t.at < to) {
        late.push(t.woke_late.as_secs_f64() * 1e3);
        work.push(t.work_wall.as_secs_f64() * 1e3);
    }
    Bystander {
        rounds: late.len(),
        woke_late_ms: Quantiles::of(late),
        work_ms: Quantiles::of(work),
    }
}

/// This thread's CPU time (`None` if the clock cannot be read).
fn thread_cpu() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec` for the duration of the call, and
    // CLOCK_THREAD_CPUTIME_ID is a clock every Linux kernel supports for the calling thread.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// The running bystander thread.
pub(crate) struct Probe {
    stop: Arc<AtomicBool>,
    ticks: Arc<Mutex<Vec<Tick>>>,
    thread: Option<JoinHandle<()>>,
}

impl Probe {
    /// Starts the bystander (`None` if this host has no per-thread CPU clock).
    pub(crate) fn start() -> Option<Probe> {
        thread_cpu()?;
        let stop = Arc::new(AtomicBool::new(false));
        let ticks = Arc::new(Mutex::new(Vec::new()));
        let (s, t) = (stop.clone(), ticks.clone());
        let thread = std::thread::Builder::new()
            .name("storm-bystander".into())
            .spawn(move || run(&s, &t))
            .ok()?;
        Some(Probe {
            stop,
            ticks,
            thread: Some(thread),
        })
    }

    /// The rounds so far.
    pub(crate) fn ticks(&self) -> Vec<Tick> {
        self.ticks.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(stop: &AtomicBool, ticks: &Mutex<Vec<Tick>>) {
    while !stop.load(Ordering::Relaxed) {
        let at = Instant::now();
        std::thread::sleep(SLEEP);
        let woke = Instant::now();
        let Some(c0) = thread_cpu() else { return };
        let mut x = 0u64;
        // Spin on the thread's own CPU clock: the wall time this takes is the bystander's
        // share of a busy host.
        while thread_cpu().is_some_and(|c| c.saturating_sub(c0) < WORK) {
            for i in 0..256u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
        let done = Instant::now();
        ticks.lock().unwrap_or_else(|e| e.into_inner()).push(Tick {
            at,
            woke_late: woke.saturating_duration_since(at).saturating_sub(SLEEP),
            work_wall: done - woke,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_figures_are_the_rounds_that_began_in_the_phase() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let tick = |at: u64, late: u64, work: u64| Tick {
            at: t + ms(at),
            woke_late: ms(late),
            work_wall: ms(work),
        };
        // Ten rounds in the phase (late 1..=10 ms, work 10..=100 ms), one before and one at
        // its end (both left out).
        let mut ticks = vec![tick(0, 500, 500)];
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
            figures(&ticks, t + ms(300), t + ms(400)),
            Bystander::default()
        );
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
