//! How a command ends: the exit status of a refused command, and the one-line messages
//! of a refusal (the operator can fix it) and of a failure, on stderr.

use std::process::ExitCode;

/// Exit code for a refused start: bad configuration or a database newer than the binary.
pub(super) const EXIT_REFUSED: u8 = 2;

/// Says why a command is refused (the operator can fix it) and gives its exit status.
pub(super) fn refuse(message: &str) -> ExitCode {
    eprintln!("tollgate: {message}");
    ExitCode::from(EXIT_REFUSED)
}

/// Says why a command failed and gives its exit status.
pub(super) fn fail(message: &str) -> ExitCode {
    eprintln!("tollgate: {message}");
    ExitCode::FAILURE
}
