//! Latency histograms: percentiles, the standard HdrHistogram percentile-distribution text
//! (`.hgrm`), and the points of a percentile curve for plotting.

use hdrhistogram::Histogram;
use std::io::Write;

/// Highest latency recorded, ns (larger values are clamped and counted).
const MAX_NS: u64 = 60_000_000_000;

/// A latency histogram in nanoseconds with 3 significant digits.
#[derive(Debug, Clone)]
pub struct Latency {
    hist: Histogram<u64>,
    clamped: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            hist: Histogram::new_with_bounds(1, MAX_NS, 3).expect("valid histogram bounds"),
            clamped: 0,
        }
    }
}

/// Percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// 99.99th percentile.
    pub p9999_us: f64,
    /// Largest sample.
    pub max_us: f64,
    /// Samples above the histogram's 60 s ceiling, recorded as the ceiling.
    pub clamped: u64,
}

impl Latency {
    fn clamp(&mut self, ns: u64) -> u64 {
        if ns > MAX_NS {
            self.clamped += 1;
            MAX_NS
        } else {
            ns.max(1)
        }
    }

    /// Records one sample.
    pub fn record(&mut self, ns: u64) {
        let v = self.clamp(ns);
        // Cannot fail: the value is clamped into the histogram's bounds.
        let _ = self.hist.record(v);
    }

    /// Records one sample of a fixed-rate run, back-filling the samples a stalled sender
    /// would have taken every `interval_ns` (coordinated-omission correction).
    pub fn record_corrected(&mut self, ns: u64, interval_ns: u64) {
        let v = self.clamp(ns);
        let _ = self.hist.record_correct(v, interval_ns);
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Latency) {
        let _ = self.hist.add(&other.hist);
        self.clamped += other.clamped;
    }

    /// The usual percentiles.
    pub fn percentiles(&self) -> Percentiles {
        let q = |p: f64| self.hist.value_at_quantile(p) as f64 / 1000.0;
        if self.hist.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            count: self.hist.len(),
            p50_us: q(0.50),
            p90_us: q(0.90),
            p99_us: q(0.99),
            p999_us: q(0.999),
            p9999_us: q(0.9999),
            max_us: self.hist.max() as f64 / 1000.0,
            clamped: self.clamped,
        }
    }

    /// `(percentile in [0, 1), value in µs)` points of the percentile curve.
    pub fn curve(&self) -> Vec<(f64, f64)> {
        self.hist
            .iter_quantiles(5)
            .map(|v| {
                (
                    v.quantile_iterated_to(),
                    v.value_iterated_to() as f64 / 1000.0,
                )
            })
            .filter(|(q, _)| *q < 1.0)
            .collect()
    }

    /// Writes the standard HdrHistogram percentile distribution (values in microseconds,
    /// 5 ticks per half distance), as `HistogramLogProcessor`'s `.hgrm` output and the
    /// online plotters read it.
    pub fn write_hgrm(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(
            out,
            "{:>12} {:>14} {:>10} {:>14}\n",
            "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
        )?;
        let mut total = 0u64;
        for v in self.hist.iter_quantiles(5) {
            let q = v.quantile_iterated_to();
            let value = v.value_iterated_to() as f64 / 1000.0;
            total += v.count_since_last_iteration();
            if q < 1.0 {
                writeln!(
                    out,
                    "{value:>12.3} {q:>2.12} {total:>10} {:>14.2}",
                    1.0 / (1.0 - q)
                )?;
            } else {
                writeln!(out, "{value:>12.3} {q:>2.12} {total:>10}")?;
            }
        }
        let h = &self.hist;
        let us = |x: f64| x / 1000.0;
        writeln!(
            out,
            "#[Mean    = {:>12.3}, StdDeviation   = {:>12.3}]",
            us(h.mean()),
            us(h.stdev())
        )?;
        writeln!(
            out,
            "#[Max     = {:>12.3}, Total count    = {:>12}]",
            us(h.max() as f64),
            h.len()
        )?;
        writeln!(
            out,
            "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
            h.buckets(),
            sub_buckets(h.sigfig())
        )
    }
}

/// Sub-buckets per bucket for `sigfig` significant digits, as HdrHistogram sizes them: the
/// power of two covering `2 * 10^sigfig` single-unit values.
fn sub_buckets(sigfig: u8) -> u64 {
    (2 * 10u64.pow(u32::from(sigfig))).next_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_follow_samples() {
        let mut l = Latency::default();
        for us in 1..=1000u64 {
            l.record(us * 1000);
        }
        let p = l.percentiles();
        assert_eq!(p.count, 1000);
        assert!((p.p50_us - 500.0).abs() < 1.0, "{p:?}");
        assert!((p.p99_us - 990.0).abs() < 1.0, "{p:?}");
        assert!((p.max_us - 1000.0).abs() < 1.0, "{p:?}");
    }

    #[test]
    fn correction_back_fills_stalls() {
        let mut l = Latency::default();
        l.record_corrected(10_000_000, 1_000_000);
        assert_eq!(
            l.percentiles().count,
            10,
            "a 10 ms stall at 1 ms intervals stands for 10 samples"
        );
    }

    #[test]
    fn hgrm_is_the_standard_text_layout() {
        let mut l = Latency::default();
        for ns in [1_000u64, 2_000, 3_000, 50_000] {
            l.record(ns);
        }
        let mut out = Vec::new();
        l.write_hgrm(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)"));
        assert!(
            text.contains("#[Max     =       50.015") || text.contains("#[Max     =       50.0")
        );
        assert!(text.contains("Total count    =            4]"));
        assert!(text.contains("SubBuckets     =         2048]"), "{text}");
        let last_row = text.lines().rfind(|l| !l.starts_with('#')).unwrap();
        assert!(last_row.contains("1.000000000000"), "{last_row}");
    }
}
