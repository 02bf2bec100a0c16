//! `discovery`: discovery latency, matching time and control-plane CPU.

use super::{emit_json, MainError, Output};
use crate::discovery_bench;
use clap::Args;

/// `discovery`'s arguments.
#[derive(Args, Debug)]
pub(crate) struct DiscoveryCmd {
    #[command(flatten)]
    args: crate::discovery_setup::DiscoveryArgs,
    #[command(flatten)]
    out: Output,
}

/// Runs the discovery measurements; an error if any part failed.
pub(crate) fn discovery_cmd(a: DiscoveryCmd) -> Result<(), MainError> {
    let report = discovery_bench::run(&a.args, a.out.quiet || a.out.json)?;
    if a.out.json {
        emit_json(&report)?;
    } else {
        discovery_bench::print(&report);
    }
    match report.failed.len() {
        0 => Ok(()),
        n => Err(MainError::Usage(format!("{n} discovery part(s) failed"))),
    }
}
