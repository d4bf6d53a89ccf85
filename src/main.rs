//! The `tollgate` binary: parse the command line and hand over to `cli::run`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    tollgate::cli::run(tollgate::cli::Cli::parse())
}
