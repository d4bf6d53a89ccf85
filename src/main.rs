//! The `tollgate` binary: parse the command line and hand over to `cli::run`.

use std::process::ExitCode;

/// Every allocation of the process goes to mimalloc (see Cargo.toml for why).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    tollgate::ops::cli::run(tollgate::ops::cli::parse())
}
