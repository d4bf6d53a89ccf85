//! The audit log: one row per `tools/call` — who, which tool, outcome code, duration —
//! never a secret and never argument values.
//!
//! The outcome is `ok`, or the catalog `code` of the JSON-RPC error, or of the `isError`
//! result (`_meta["dev.tollgate/error"].code`). Rows go into a buffer that one writer thread
//! empties every few milliseconds, in a single transaction (group commit), outside the call
//! path and outside any other transaction; a failed write is logged and never fails the call
//! it describes. Dropping the [`Auditor`] flushes every queued row, so a clean shutdown loses
//! nothing; a process killed outright can lose the rows of calls that finished in its last
//! moments — never business data or rate counters, which commit with the call.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
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

/// Rows buffered at most; past it callers wait for the writer (back-pressure), rows are
/// never dropped.
const QUEUE: usize = 65_536;
/// Rows inserted per transaction at most; a buffer this full wakes the writer at once.
const BATCH: usize = 1_024;
/// How often the writer looks at the buffer. Calls never wake it one by one: a wake-up
/// per call cost more than the insert itself.
const FLUSH_EVERY: Duration = Duration::from_millis(5);

/// One row, owned, on its way to the writer thread.
struct Row {
    at: i64,
    request_id: String,
    credential_id: Option<String>,
    client_id: Option<String>,
    tool: String,
    outcome: String,
    duration_us: i64,
    transport: &'static str,
}

/// Rows waiting for the writer, and whether the auditor is shutting down.
#[derive(Default)]
struct Buffer {
    rows: Vec<Row>,
    closing: bool,
}

/// The buffer shared by callers and the writer thread.
#[derive(Default)]
struct Shared {
    buffer: Mutex<Buffer>,
    /// Signals the writer (a full batch, or shutdown) and waiting callers (room again).
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Buffer> {
        self.buffer.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Writes audit rows through one group-committing writer thread.
pub struct Auditor {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
}

impl Auditor {
    /// An auditor over `store`; starts its writer thread.
    pub fn new(store: Store) -> Auditor {
        let shared = Arc::new(Shared::default());
        let theirs = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("audit-writer".to_owned())
            .spawn(move || write_loop(&store, &theirs))
            .map_err(|e| tracing::error!(error = %e, "cannot start the audit writer"))
            .ok();
        Auditor { shared, writer }
    }

    /// Records one call. Failures are logged (without the row's content) and swallowed.
    pub fn record(&self, entry: &AuditEntry<'_>) {
        if self.writer.is_none() {
            tracing::warn!("the audit writer is not running; a tool call was not audited");
            return;
        }
        let row = Row {
            at: unix_millis(),
            request_id: truncate(&entry.request_id.to_string()),
            credential_id: entry.principal.map(|p| p.credential_id.clone()),
            client_id: entry.principal.and_then(|p| p.client_id.clone()),
            tool: truncate(entry.tool),
            outcome: outcome_code(entry.outcome),
            duration_us: i64::try_from(entry.duration.as_micros()).unwrap_or(i64::MAX),
            transport: entry.transport.as_str(),
        };
        let mut buffer = self.shared.lock();
        while buffer.rows.len() >= QUEUE {
            buffer = self
                .shared
                .changed
                .wait(buffer)
                .unwrap_or_else(PoisonError::into_inner);
        }
        buffer.rows.push(row);
        if buffer.rows.len() == BATCH {
            self.shared.changed.notify_all();
        }
    }
}

impl Drop for Auditor {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.changed.notify_all();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// Every [`FLUSH_EVERY`] (or at once for a full batch) inserts what has been buffered, in
/// transactions of up to [`BATCH`] rows; on shutdown, flushes everything and returns.
fn write_loop(store: &Store, shared: &Shared) {
    loop {
        let (batch, closing) = {
            let mut buffer = shared.lock();
            if buffer.rows.len() < BATCH && !buffer.closing {
                buffer = shared
                    .changed
                    .wait_timeout(buffer, FLUSH_EVERY)
                    .map(|(guard, _)| guard)
                    .unwrap_or_else(|poisoned| poisoned.into_inner().0);
            }
            let take = buffer.rows.len().min(BATCH);
            let batch: Vec<Row> = buffer.rows.drain(..take).collect();
            (batch, buffer.closing && buffer.rows.is_empty())
        };
        if !batch.is_empty() {
            shared.changed.notify_all();
            if let Err(e) = insert(store, &batch) {
                tracing::warn!(cause = %e, rows = batch.len(), "cannot write audit rows");
            }
        }
        if closing {
            return;
        }
    }
}

fn insert(store: &Store, batch: &[Row]) -> Result<(), StoreError> {
    store.write(|tx| {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO audit_log (at, request_id, credential_id, client_id, tool, outcome, \
             duration_us, transport) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        for row in batch {
            stmt.execute(params![
                row.at,
                row.request_id,
                row.credential_id,
                row.client_id,
                row.tool,
                row.outcome,
                row.duration_us,
                row.transport
            ])?;
        }
        Ok(())
    })
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
        // With a credential, through `audit_log_by_credential` (newest first in that
        // index); otherwise newest first by id, stopping at the limit. (`?1 IS NULL` in the
        // second keeps one parameter list.)
        let mut stmt = conn.prepare_cached(if filter.credential_id.is_some() {
            "SELECT id, at, request_id, credential_id, client_id, tool, outcome, duration_us, \
             transport FROM audit_log WHERE credential_id = ?1 \
             AND (?2 IS NULL OR tool = ?2) AND (?3 IS NULL OR outcome = ?3) \
             ORDER BY at DESC, id DESC LIMIT ?4 + 0"
        } else {
            "SELECT id, at, request_id, credential_id, client_id, tool, outcome, duration_us, \
             transport FROM audit_log WHERE ?1 IS NULL \
             AND (?2 IS NULL OR tool = ?2) AND (?3 IS NULL OR outcome = ?3) \
             ORDER BY id DESC LIMIT ?4 + 0"
        })?;
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
            mode: crate::auth::Mode::Live,
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
        // Dropping the auditor flushes its queue.
        drop(auditor);
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
