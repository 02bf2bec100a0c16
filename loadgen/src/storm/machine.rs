//! The machine's own CPU while a storm runs (every process, from `/proc/stat`): whether the
//! host saturated. The nodes' own CPU times cannot say it: other processes count too, and a
//! node's time is read when its answer arrives, so one polling round's readings span
//! different intervals.
//!
//! **Owns:** reading and differencing `/proc/stat`. **Must not touch:** the node processes.

/// All CPUs' clock ticks at one instant: those spent on anything but idle and I/O wait, and
/// all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ticks {
    busy: u64,
    total: u64,
}

/// The aggregate `cpu` line of `/proc/stat` and the number of `cpuN` lines (the cores).
/// `None` when the text has no aggregate line of at least the four classic fields.
pub(super) fn parse_stat(text: &str) -> Option<(Ticks, usize)> {
    let mut ticks = None;
    let mut cpus = 0;
    for line in text.lines() {
        let mut f = line.split_ascii_whitespace();
        match f.next() {
            Some("cpu") => {
                // user nice system idle iowait irq softirq steal (guest time is already in
                // user and nice, so the two guest fields are not added again).
                let v: Vec<u64> = f.take(8).map_while(|x| x.parse().ok()).collect();
                if v.len() < 4 {
                    return None;
                }
                let total: u64 = v.iter().sum();
                let idle = v[3] + v.get(4).copied().unwrap_or(0);
                ticks = Some(Ticks {
                    busy: total - idle,
                    total,
                });
            }
            Some(name) if name.starts_with("cpu") => cpus += 1,
            _ => {}
        }
    }
    ticks.map(|t| (t, cpus.max(1)))
}

/// The machine's ticks now (`None` without Linux's `/proc/stat`).
fn now() -> Option<(Ticks, usize)> {
    parse_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// Busy cores of `cpus` between two readings (the mean over that interval).
fn busy_cores(a: Ticks, b: Ticks, cpus: usize) -> f64 {
    let total = b.total.saturating_sub(a.total);
    if total == 0 {
        return 0.0;
    }
    b.busy.saturating_sub(a.busy) as f64 / total as f64 * cpus as f64
}

/// The machine's busy cores over a series of readings: the busiest interval between two
/// consecutive readings and the mean from the first to the last.
#[derive(Debug, Default)]
pub(super) struct MachineCpu {
    cpus: usize,
    first: Option<Ticks>,
    last: Option<Ticks>,
    peak: f64,
}

impl MachineCpu {
    /// Takes a reading now (nothing without `/proc/stat`).
    pub(super) fn sample(&mut self) {
        if let Some((t, cpus)) = now() {
            self.add(t, cpus);
        }
    }

    fn add(&mut self, t: Ticks, cpus: usize) {
        self.cpus = cpus;
        if let Some(prev) = self.last {
            self.peak = self.peak.max(busy_cores(prev, t, cpus));
        }
        self.first.get_or_insert(t);
        self.last = Some(t);
    }

    /// What the readings showed (`None` before two readings).
    pub(super) fn figures(&self) -> Option<Machine> {
        let (a, b) = (self.first?, self.last?);
        (a != b).then(|| Machine {
            cores: self.cpus,
            busy_peak: self.peak,
            busy_mean: busy_cores(a, b, self.cpus),
        })
    }
}

/// The whole machine's CPU over a phase of the run (every process, the storm's own too).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct Machine {
    /// The machine's cores.
    pub(crate) cores: usize,
    /// Busy cores in the busiest sampling period (`cores` means saturated).
    pub(crate) busy_peak: f64,
    /// Busy cores on average over the phase.
    pub(crate) busy_mean: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 10 50 800 20 0 5 15 7 0\n\
                        cpu0 50 5 25 400 10 0 2 8 7 0\n\
                        cpu1 50 5 25 400 10 0 3 7 0 0\n\
                        intr 1 2 3\nctxt 99\n";

    #[test]
    fn the_aggregate_line_gives_busy_and_total_and_the_cpu_lines_the_cores() {
        let (t, cpus) = parse_stat(STAT).unwrap();
        assert_eq!(cpus, 2);
        // Total is the first eight fields (guest is inside user); idle and iowait are not busy.
        assert_eq!(t.total, 100 + 10 + 50 + 800 + 20 + 5 + 15);
        assert_eq!(t.busy, 100 + 10 + 50 + 5 + 15);
        assert!(parse_stat("intr 1 2\n").is_none());
        assert!(parse_stat("cpu 1 2\ncpu0 1 2\n").is_none());
    }

    #[test]
    fn busy_cores_are_the_busy_share_of_the_ticks_times_the_cores() {
        let mut m = MachineCpu::default();
        assert!(m.figures().is_none());
        // 2 cores, 100 ticks each interval: 50 busy (one core), then 100 (both), then 20.
        m.add(Ticks { busy: 0, total: 0 }, 2);
        assert!(m.figures().is_none(), "one reading is no interval");
        m.add(
            Ticks {
                busy: 50,
                total: 100,
            },
            2,
        );
        m.add(
            Ticks {
                busy: 150,
                total: 200,
            },
            2,
        );
        m.add(
            Ticks {
                busy: 170,
                total: 300,
            },
            2,
        );
        let f = m.figures().unwrap();
        assert_eq!(f.cores, 2);
        assert!((f.busy_peak - 2.0).abs() < 1e-9, "{f:?}");
        assert!((f.busy_mean - 170.0 / 300.0 * 2.0).abs() < 1e-9, "{f:?}");
    }

    #[test]
    fn this_host_reads() {
        // Linux CI and development hosts have /proc/stat; its ticks only grow.
        let (a, cpus) = now().expect("/proc/stat");
        assert!(cpus >= 1 && a.busy <= a.total);
        let (b, _) = now().unwrap();
        assert!(b.total >= a.total && b.busy >= a.busy);
    }
}
