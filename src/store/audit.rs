//! The `audit_log` table and its only writer: rows of single calls, summary rows that
//! stand for many refusals, retention, and the `tollgate audit` query.

use rusqlite::params;

use super::SqlResult;
use super::{Store, StoreError, Tx};

/// One audit row to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    /// Unix milliseconds UTC.
    pub at: i64,
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
    pub transport: &'static str,
    /// The backend the tool forwards to (`None` for a built-in tool).
    pub backend: Option<String>,
}

/// Inserts one row standing for `calls` calls (with the `source` of a summary row);
/// returns its id.
pub fn insert_row(
    tx: &Tx<'_>,
    row: &AuditRow,
    calls: i64,
    source: Option<&str>,
) -> Result<i64, StoreError> {
    let conn = tx.sql();
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO audit_log (at, request_id, credential_id, client_id, tool, outcome, \
         duration_us, transport, calls, source, backend) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )
        .or_store()?;
    stmt.execute(params![
        row.at,
        row.request_id,
        row.credential_id,
        row.client_id,
        row.tool,
        row.outcome,
        row.duration_us,
        row.transport,
        calls,
        source,
        row.backend
    ])
    .or_store()?;
    Ok(conn.last_insert_rowid())
}

/// Adds `calls` calls to the summary row `id` (its tool becomes `*` when `several_tools`
/// or when `tool` is not its tool); false when the row is gone.
pub fn add_to_summary(
    tx: &Tx<'_>,
    id: i64,
    calls: i64,
    several_tools: bool,
    tool: &str,
) -> Result<bool, StoreError> {
    let mut stmt = tx
        .sql()
        .prepare_cached(
            "UPDATE audit_log SET calls = calls + ?2, \
         tool = CASE WHEN ?3 OR tool <> ?4 THEN '*' ELSE tool END WHERE id = ?1",
        )
        .or_store()?;
    let changed = stmt
        .execute(params![id, calls, several_tools, tool])
        .or_store()?;
    Ok(changed > 0)
}

/// What one pruning transaction did: rows deleted, the last id looked at, rows looked at.
pub type PruneStep = (usize, Option<i64>, usize);

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
    /// How many calls the row stands for (more than 1 on a summary row).
    pub calls: i64,
    /// Where a summary row's refusals came from (`None` on the row of a single call).
    pub source: Option<String>,
    /// The backend the tool forwards to (`None` for a built-in tool).
    pub backend: Option<String>,
}

impl Store {
    /// In one transaction, looks at up to `chunk` rows with an id above `after` and
    /// deletes those written before `cutoff_ms`.
    pub fn prune_audit_chunk(
        &self,
        after: i64,
        cutoff_ms: i64,
        chunk: i64,
    ) -> Result<PruneStep, StoreError> {
        self.write(|tx| {
            let mut next = tx
                .prepare_cached(
                    "SELECT id, at FROM audit_log WHERE id > ?1 ORDER BY id LIMIT ?2 + 0",
                )
                .or_store()?;
            let rows = next
                .query_map(params![after, chunk], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
                })
                .or_store()?
                .collect::<Result<Vec<_>, _>>()
                .or_store()?;
            let mut delete = tx
                .prepare_cached("DELETE FROM audit_log WHERE id = ?1")
                .or_store()?;
            let mut deleted = 0;
            for (id, _) in rows.iter().filter(|(_, at)| *at < cutoff_ms) {
                deleted += delete.execute([id]).or_store()?;
            }
            Ok((deleted, rows.last().map(|(id, _)| *id), rows.len()))
        })
    }

    /// The most recent rows matching `filter`, newest first.
    pub fn recent_audit(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>, StoreError> {
        self.read(|conn| {
            // With a credential, through `audit_log_by_credential` (newest first in that
            // index); otherwise newest first by id, stopping at the limit. (`?1 IS NULL` in the
            // second keeps one parameter list.)
            let mut stmt = conn.prepare_cached(if filter.credential_id.is_some() {
                "SELECT id, at, request_id, credential_id, client_id, tool, outcome, duration_us, \
             transport, calls, source, backend FROM audit_log WHERE credential_id = ?1 \
             AND (?2 IS NULL OR tool = ?2) AND (?3 IS NULL OR outcome = ?3) \
             ORDER BY at DESC, id DESC LIMIT ?4 + 0"
            } else {
                "SELECT id, at, request_id, credential_id, client_id, tool, outcome, duration_us, \
             transport, calls, source, backend FROM audit_log WHERE ?1 IS NULL \
             AND (?2 IS NULL OR tool = ?2) AND (?3 IS NULL OR outcome = ?3) \
             ORDER BY id DESC LIMIT ?4 + 0"
            }).or_store()?;
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
                            calls: row.get(9)?,
                            source: row.get(10)?,
                            backend: row.get(11)?,
                        })
                    },
                )
                .or_store()?
                .collect::<Result<Vec<_>, _>>()
                .or_store()?;
            Ok(rows)
        })
    }
}
