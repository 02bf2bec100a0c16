//! The command line: each subcommand's arguments (clap) and the function that wires them to
//! the role and benchmark modules and prints their results, one module per group of commands.
//!
//! **Owns:** argument parsing and checks, and what each command prints. **Must not touch:**
//! how runs are done (the role and benchmark modules).

pub(crate) mod bench;
pub(crate) mod demo;
pub(crate) mod discovery;
pub(crate) mod latency;
pub(crate) mod role;
pub(crate) mod storm;

use crate::demo::RunError;
use crate::traffic::Shape;
use crate::{chart, plot, stamp};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// Output flags every command takes.
#[derive(Args, Debug, Clone)]
pub(crate) struct Output {
    /// Print the summary as JSON on stdout (no progress line).
    #[arg(long)]
    pub(crate) json: bool,
    /// No progress line.
    #[arg(long)]
    pub(crate) quiet: bool,
}

/// Failures that end the program, with a one-line message.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MainError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("{0}")]
    Usage(String),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Plot(#[from] plot::PlotError),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Chart(#[from] chart::ChartError),
}

pub(crate) fn check_size(size: usize) -> Result<(), MainError> {
    if size < stamp::STAMP_LEN {
        return Err(MainError::Usage(format!(
            "payloads must be at least {} bytes (the measurement stamp); got {size}",
            stamp::STAMP_LEN
        )));
    }
    Ok(())
}

/// One payload size, `rate` messages/s (0: as fast as backpressure allows), measured for
/// `duration_ms` after `warmup_ms`.
pub(crate) fn fixed_shape(size: usize, rate: f64, duration_ms: u64, warmup_ms: u64) -> Shape {
    Shape {
        size,
        size_max: size,
        rate,
        duration: ms(duration_ms),
        warmup: ms(warmup_ms),
    }
}

pub(crate) fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

pub(crate) fn emit_json(v: &impl serde::Serialize) -> Result<(), MainError> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

pub(crate) fn write_file(
    path: PathBuf,
    f: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<PathBuf, MainError> {
    let mut file = std::fs::File::create(&path).map_err(|source| MainError::Write {
        path: path.clone(),
        source,
    })?;
    f(&mut file).map_err(|source| MainError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}
