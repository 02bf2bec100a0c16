//! The `shoal` binary: parses the command line, runs the command, prints what went wrong.
//! Exit status: 0 done, 1 the command failed (the message says why), 2 a usage error.

use clap::Parser;
use shoal_cli::args::Cli;
use std::io::IsTerminal;
use std::process::ExitCode;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match shoal_cli::run(&cli, &mut out) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`shoal echo T | head`) is the reader's choice, not a failure.
        Err(shoal_cli::CliError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("shoal: {e}");
            ExitCode::FAILURE
        }
    }
}
