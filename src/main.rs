//! The `tollgate` binary: parse the command line and hand over to `cli::run`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    tollgate::ops::cli::run(tollgate::ops::cli::Cli::parse())
}
