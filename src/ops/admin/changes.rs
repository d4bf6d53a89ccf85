//! The audit row of a change an operator makes from the command line (blocking a user,
//! deciding on a held upstream tool): the action as its tool (`cli:<action>`), what was
//! changed as its request id, and who ran the command (`cli:<user>`, from `SUDO_USER` or
//! `USER`) as its source. The console's changes are audited the same way under the
//! operator's key; the command line has no key, the machine's user stands for it.

use serde_json::Value;

use crate::clock::Clock;
use crate::store::audit::{AuditRow, insert_row};
use crate::store::{Store, StoreError};

/// Who runs this command: `cli:<user>`.
pub fn cli_operator() -> String {
    let user = std::env::var("SUDO_USER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| "unknown".to_owned());
    format!("cli:{}", super::escape_for_terminal(&user))
}

/// Writes the audit row of `action` on `target` (of `backend`, for a backend's tool) made
/// from the command line, now.
pub fn record_cli_change(
    store: &Store,
    action: &str,
    target: &str,
    backend: Option<&str>,
) -> Result<(), StoreError> {
    let row = AuditRow {
        id: 0,
        at_ms: Clock::System.unix_millis(),
        request_id: Value::from(target).to_string(),
        credential_id: None,
        client_id: None,
        tool: format!("cli:{action}"),
        outcome: "ok".to_owned(),
        entry: None,
        duration_us: 0,
        transport: "stdio".to_owned(),
        calls: 1,
        source: Some(cli_operator()),
        backend: backend.map(str::to_owned),
        trace_id: None,
    };
    store.in_transaction(|tx| insert_row(tx, &row)).map(|_| ())
}
