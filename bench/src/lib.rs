//! Shared settings for Shoal's criterion benchmarks, which live in `benches/`.
//!
//! **Owns:** the criterion benchmarks of every crate (`benches/`, each beside a baseline
//! measured in the same run so results read as ratios), `run.sh` (the loadgen comparison set
//! behind `BENCHMARKS.md`), the cipher choice study (`aead-choice/`, outside the workspace)
//! and the dated measurement notes (`notes/`).
//!
//! **Must not touch:** the crates' code: it measures through their public APIs and asserts no
//! timing (performance goals live here and in `BENCHMARKS.md`, never in tests).

use std::time::Duration;

use criterion::Criterion;

/// The short profile most benches use (1 s warm-up, 2 s measurement, 30 samples), still
/// overridable from the command line (`-- --measurement-time 5`).
pub fn quick_criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
        .configure_from_args()
}
