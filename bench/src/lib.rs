//! Criterion benchmarks for Shoal live in `benches/`; this library is empty on purpose.
