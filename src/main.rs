//! The `tollgate` binary: parse the command line and hand over to `cli::run`.

use std::process::ExitCode;

fn main() -> ExitCode {
    tollgate::ops::cli::run(tollgate::ops::cli::parse())
}
