//! The audit log: one row per `tools/call` — who, which tool, outcome code, duration —
//! never a secret and never argument values.
//!
//! The outcome is `ok`, or the catalog `code` of the JSON-RPC error, or of the `isError`
//! result (`_meta["dev.tollgate/error"].code`). Each row is one short `INSERT` of its own,
//! after the call finished and outside any other transaction; a failed write is logged
//! and never fails the call it describes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::params;
use serde_json::Value;

use crate::auth::Principal;
use crate::catalog::McpError;
use crate::dispatch::Transport;
use crate::store::{Store, StoreError};

/// Longest request id or tool name kept (clients choose both; a row stays small).
const MAX_TEXT: usize = 200;
/// Rows `tollgate audit` shows unless `--limit` says otherwise.
pub const DEFAULT_LIMIT: u32 = 50;

/// One finished call.
pub struct AuditEntry<'a> {
    /// The JSON-RPC request id.
    pub request_id: &'a Value,
    /// Who called, when authentication succeeded.
    pub principal: Option<&'a Principal>,
    /// The tool name as sent.
    pub tool: &'a str,
    /// The outcome.
    pub outcome: &'a Result<Value, McpError>,
    /// Time spent.
    pub duration: Duration,
    /// The transport.
    pub transport: Transport,
}

/// Writes audit rows.
pub struct Auditor {
    store: Store,
}

impl Auditor {
    /// An auditor over `store`.
    pub fn new(store: Store) -> Auditor {
        Auditor { store }
    }

    /// Records one call. Failures are logged (without the row's content) and swallowed.
    pub fn record(&self, entry: &AuditEntry<'_>) {
        let at = unix_millis();
        let request_id = truncate(&entry.request_id.to_string());
        let outcome = outcome_code(entry.outcome);
        let duration_us = i64::try_from(entry.duration.as_micros()).unwrap_or(i64::MAX);
        let written = self.store.write(|tx| {
            tx.prepare_cached(
                "INSERT INTO audit_log (at, request_id, credential_id, client_id, tool, outcome, \
                 duration_us, transport) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                at,
                request_id,
                entry.principal.map(|p| p.credential_id.as_str()),
                entry.principal.and_then(|p| p.client_id.as_deref()),
                truncate(entry.tool),
                outcome,
                duration_us,
                entry.transport.as_str()
            ])?;
            Ok(())
        });
        if let Err(e) = written {
            tracing::warn!(cause = %e, "cannot write the audit row of a tool call");
        }
    }
}

/// `ok`, or the catalog code of a JSON-RPC error or of an `isError` result.
pub fn outcome_code(outcome: &Result<Value, McpError>) -> String {
    match outcome {
        Err(err) => err.kind().spec().code.to_owned(),
        Ok(result) if result.get("isError") == Some(&Value::Bool(true)) => result
            .pointer("/_meta/dev.tollgate~1error/code")
            .and_then(Value::as_str)
            .unwrap_or("tool_error")
            .to_owned(),
        Ok(_) => "ok".to_owned(),
    }
}

fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_TEXT) {
        Some((cut, _)) => text[..cut].to_owned(),
        None => text.to_owned(),
    }
}

fn unix_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Which rows `tollgate audit` lists.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// Only this credential's calls.
    pub credential_id: Option<String>,
    /// Only calls of this tool.
    pub tool: Option<String>,
    /// Only this outcome (`ok` or a catalog code).
    pub outcome: Option<String>,
    /// At most this many rows, newest first.
    pub limit: u32,
}

/// One row of the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// Row id (increasing).
    pub id: i64,
    /// Unix milliseconds UTC.
    pub at_ms: i64,
    /// The JSON-RPC request id, as JSON text.
    pub request_id: String,
    /// The credential's public id (absent when authentication failed).
    pub credential_id: Option<String>,
    /// The OAuth client, if any.
    pub client_id: Option<String>,
    /// The tool name as sent.
    pub tool: String,
    /// `ok` or a catalog code.
    pub outcome: String,
    /// Microseconds.
    pub duration_us: i64,
    /// `stdio` or `http`.
    pub transport: String,
}

/// The most recent rows matching `filter`, newest first.
pub fn recent(store: &Store, filter: &AuditFilter) -> Result<Vec<AuditRecord>, StoreError> {
    store.read(|conn| {
        let mut stmt = conn.prepare_cached(
            "SELECT id, at, request_id, credential_id, client_id, tool, outcome, duration_us, \
             transport FROM audit_log WHERE (?1 IS NULL OR credential_id = ?1) \
             AND (?2 IS NULL OR tool = ?2) AND (?3 IS NULL OR outcome = ?3) \
             ORDER BY id DESC LIMIT ?4",
        )?;
        let rows = stmt
            .query_map(
                params![
                    filter.credential_id,
                    filter.tool,
                    filter.outcome,
                    filter.limit
                ],
                |row| {
                    Ok(AuditRecord {
                        id: row.get(0)?,
                        at_ms: row.get(1)?,
                        request_id: row.get(2)?,
                        credential_id: row.get(3)?,
                        client_id: row.get(4)?,
                        tool: row.get(5)?,
                        outcome: row.get(6)?,
                        duration_us: row.get(7)?,
                        transport: row.get(8)?,
                    })
                },
            )?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ErrorKind;
    use crate::config::Locale;
    use crate::store::StoreOptions;
    use serde_json::json;

    #[test]
    fn outcome_codes() {
        assert_eq!(outcome_code(&Ok(json!({"content": []}))), "ok");
        assert_eq!(
            outcome_code(&Err(McpError::new(ErrorKind::InsufficientScope))),
            "insufficient_scope"
        );
        let tool_error = McpError::validation("amount").to_tool_result(Locale::En);
        assert_eq!(outcome_code(&Ok(tool_error)), "validation_error");
    }

    #[test]
    fn records_and_filters_without_arguments() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = StoreOptions {
            create: true,
            ..StoreOptions::default()
        };
        let store = Store::open(&dir.path().join("a.db"), &opts).expect("open");
        let auditor = Auditor::new(store.clone());
        let principal = Principal {
            credential_id: "abc123abc123".into(),
            client_id: None,
            scopes: vec![],
        };
        for (id, outcome) in [
            (1, Ok(json!({}))),
            (2, Err(McpError::new(ErrorKind::RateLimited))),
        ] {
            auditor.record(&AuditEntry {
                request_id: &json!(id),
                principal: Some(&principal),
                tool: "test_simple_text",
                outcome: &outcome,
                duration: Duration::from_micros(1500),
                transport: Transport::Stdio,
            });
        }
        let all = recent(
            &store,
            &AuditFilter {
                limit: 10,
                ..AuditFilter::default()
            },
        )
        .expect("rows");
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].outcome, "rate_limited");
        assert_eq!(all[0].request_id, "2");
        assert_eq!(all[1].duration_us, 1500);
        let filter = AuditFilter {
            outcome: Some("ok".into()),
            limit: 10,
            ..AuditFilter::default()
        };
        let ok = recent(&store, &filter).expect("rows");
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].credential_id.as_deref(), Some("abc123abc123"));
    }
}
