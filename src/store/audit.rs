//! The `audit_log` table and its only writer: rows of single calls, summary rows that
//! stand for many refusals, retention, and the `tollgate audit` query.

use super::sql::args;
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
    tx.insert_returning_id(
        "INSERT INTO audit_log (at, request_id, credential_id, client_id, tool, outcome, \
         duration_us, transport, calls, source, backend) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        args![
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
        ],
    )
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
    let changed = tx.execute(
        "UPDATE audit_log SET calls = calls + ?2, \
         tool = CASE WHEN ?3 OR tool <> ?4 THEN '*' ELSE tool END WHERE id = ?1",
        args![id, calls, several_tools, tool],
    )?;
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

/// A row limit as both engines bind it: PostgreSQL reads `?N + 0` as a 32-bit integer,
/// and no listing or chunk is anywhere near that large.
fn row_limit(limit: impl TryInto<i32>) -> i64 {
    i64::from(limit.try_into().unwrap_or(i32::MAX))
}

// Both list the same columns; the limit is bound as `?4 + 0` (see `invoicing`: SQLite
// prepares `ORDER BY … LIMIT ?N` anew on every run). A parameter that is only tested for
// NULL is cast, so PostgreSQL knows its type.
const RECENT_BY_CREDENTIAL_SQL: &str = "SELECT id, at, request_id, credential_id, client_id, \
     tool, outcome, duration_us, transport, calls, source, backend FROM audit_log \
     WHERE credential_id = ?1 \
     AND (CAST(?2 AS TEXT) IS NULL OR tool = ?2) AND (CAST(?3 AS TEXT) IS NULL OR outcome = ?3) \
     ORDER BY at DESC, id DESC LIMIT ?4 + 0";
const RECENT_SQL: &str = "SELECT id, at, request_id, credential_id, client_id, \
     tool, outcome, duration_us, transport, calls, source, backend FROM audit_log \
     WHERE CAST(?1 AS TEXT) IS NULL \
     AND (CAST(?2 AS TEXT) IS NULL OR tool = ?2) AND (CAST(?3 AS TEXT) IS NULL OR outcome = ?3) \
     ORDER BY id DESC LIMIT ?4 + 0";

impl Store {
    /// In one transaction, looks at up to `chunk` rows with an id above `after` and
    /// deletes those written before `cutoff_ms`.
    pub fn prune_audit_chunk(
        &self,
        after: i64,
        cutoff_ms: i64,
        chunk: i64,
    ) -> Result<PruneStep, StoreError> {
        self.in_transaction(|tx| {
            let rows = tx.query_all(
                "SELECT id, at FROM audit_log WHERE id > ?1 ORDER BY id LIMIT ?2 + 0",
                args![after, row_limit(chunk)],
                |r| Ok((r.get::<i64>(0)?, r.get::<i64>(1)?)),
            )?;
            let mut deleted = 0;
            for (id, _) in rows.iter().filter(|(_, at)| *at < cutoff_ms) {
                deleted += tx.execute("DELETE FROM audit_log WHERE id = ?1", args![id])?;
            }
            Ok((deleted, rows.last().map(|(id, _)| *id), rows.len()))
        })
    }

    /// The most recent rows matching `filter`, newest first.
    pub fn recent_audit(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>, StoreError> {
        // With a credential, through `audit_log_by_credential` (newest first in that
        // index); otherwise newest first by id, stopping at the limit. (`?1 IS NULL` in the
        // second keeps one parameter list for both.)
        let sql = if filter.credential_id.is_some() {
            RECENT_BY_CREDENTIAL_SQL
        } else {
            RECENT_SQL
        };
        self.with_conn(|conn| {
            conn.query_all(
                sql,
                args![
                    filter.credential_id,
                    filter.tool,
                    filter.outcome,
                    row_limit(filter.limit)
                ],
                record_from_row,
            )
        })
    }
}

/// A page of the audit log as the console lists it: the filters of [`AuditFilter`], a time
/// range, only failures, and a position (keyset on the row id, so a page stays put while
/// new rows arrive).
#[derive(Debug, Clone, Default)]
pub struct AuditPage {
    /// Only this credential's calls.
    pub credential_id: Option<String>,
    /// Only calls of this tool.
    pub tool: Option<String>,
    /// Only this outcome (`ok` or a catalog code).
    pub outcome: Option<String>,
    /// Only rows whose outcome is not `ok`.
    pub failures_only: bool,
    /// Rows at or after this time (unix milliseconds).
    pub since_ms: Option<i64>,
    /// Rows before this time (unix milliseconds).
    pub until_ms: Option<i64>,
    /// The page before this row id (older rows), or the newest page.
    pub before_id: Option<i64>,
    /// The page after this row id (newer rows); wins over `before_id`.
    pub after_id: Option<i64>,
    /// At most this many rows.
    pub limit: u32,
}

const PAGE_COLUMNS: &str = "SELECT id, at, request_id, credential_id, client_id, tool, outcome, \
     duration_us, transport, calls, source, backend FROM audit_log";

/// Adds `column_test` (with `param` as its next numbered parameter, if any) to a filter.
fn add<'a>(
    conditions: &mut Vec<String>,
    params: &mut Vec<&'a dyn super::sql::Param>,
    column_test: &str,
    param: Option<&'a dyn super::sql::Param>,
) {
    match param {
        Some(p) => {
            params.push(p);
            conditions.push(format!("{column_test} ?{}", params.len()));
        }
        None => conditions.push(column_test.to_owned()),
    }
}

fn record_from_row(row: &super::sql::Row<'_>) -> Result<AuditRecord, StoreError> {
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
}

impl Store {
    /// One page of the audit log, newest first. The statement names only the filters that
    /// are set, so each engine's planner sees what it can use (`audit_log_by_credential`
    /// for one credential's rows, the primary key otherwise).
    pub fn audit_page(&self, page: &AuditPage) -> Result<Vec<AuditRecord>, StoreError> {
        let limit = row_limit(page.limit);
        let mut conditions: Vec<String> = Vec::new();
        let mut params: Vec<&dyn super::sql::Param> = Vec::new();
        if let Some(v) = &page.credential_id {
            add(&mut conditions, &mut params, "credential_id =", Some(v));
        }
        if let Some(v) = &page.tool {
            add(&mut conditions, &mut params, "tool =", Some(v));
        }
        if let Some(v) = &page.outcome {
            add(&mut conditions, &mut params, "outcome =", Some(v));
        }
        if page.failures_only {
            add(&mut conditions, &mut params, "outcome <> 'ok'", None);
        }
        if let Some(v) = &page.since_ms {
            add(&mut conditions, &mut params, "at >=", Some(v));
        }
        if let Some(v) = &page.until_ms {
            add(&mut conditions, &mut params, "at <", Some(v));
        }
        // A page after a row is read oldest first (the rows just above it) and turned round.
        let order = match (&page.after_id, &page.before_id) {
            (Some(after), _) => {
                add(&mut conditions, &mut params, "id >", Some(after));
                "ASC"
            }
            (None, Some(before)) => {
                add(&mut conditions, &mut params, "id <", Some(before));
                "DESC"
            }
            (None, None) => "DESC",
        };
        params.push(&limit);
        let filter = if conditions.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conditions.join(" AND "))
        };
        let sql = format!(
            "{PAGE_COLUMNS}{filter} ORDER BY id {order} LIMIT ?{} + 0",
            params.len()
        );
        let mut rows = self.with_conn(|conn| conn.query_all(&sql, &params, record_from_row))?;
        if page.after_id.is_some() {
            rows.reverse();
        }
        Ok(rows)
    }

    /// Calls per time bucket and outcome since `since_ms`: `(bucket start in unix
    /// milliseconds, outcome, calls)`, oldest bucket first. A summary row counts the calls
    /// it stands for; the rows of changes made in the console (`console:…`) are not calls.
    /// The rows are found by the primary key as [`Store::backend_calls_by_tool`] finds them.
    pub fn calls_by_outcome(
        &self,
        since_ms: i64,
        bucket_ms: i64,
    ) -> Result<Vec<(i64, String, i64)>, StoreError> {
        self.with_conn(|conn| {
            let after = rows_before(conn, since_ms)?;
            conn.query_all(
                "SELECT (at / ?2) * ?2 AS bucket, outcome, CAST(SUM(calls) AS BIGINT) FROM audit_log \
                 WHERE id > ?3 AND at >= ?1 AND tool NOT LIKE 'console:%' \
                 GROUP BY bucket, outcome ORDER BY bucket, outcome",
                args![since_ms, bucket_ms.max(1), after],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
        })
    }
}

/// How far behind a row written before it an audit row's time may be. Rows are appended
/// in time order but for the few milliseconds the audit writer buffers them, an operator's
/// change written meanwhile, and, on PostgreSQL, the clocks of the other nodes; a query by
/// time starts this much earlier than its range in the order of the ids.
pub const OUT_OF_ORDER_MS: i64 = 5 * 60_000;

/// The calls of one backend tool over a time range, as the backends page shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCalls {
    /// The backend the calls were forwarded to (or refused on the way to).
    pub backend: String,
    /// The tool name.
    pub tool: String,
    /// Every call (a summary row counts the calls it stands for).
    pub calls: i64,
    /// The calls whose outcome is not `ok`: refusals and failures alike.
    pub failures: i64,
}

impl Store {
    /// The row `id`, or `None` when there is none (never written, or pruned).
    pub fn audit_record(&self, id: i64) -> Result<Option<AuditRecord>, StoreError> {
        self.with_conn(|conn| {
            conn.query_opt(
                &format!("{PAGE_COLUMNS} WHERE id = ?1"),
                args![id],
                record_from_row,
            )
        })
    }

    /// Calls and failures per backend and tool in `since_ms..until_ms`, of the calls whose
    /// tool resolved to a backend's (so the groups are bounded by the registry, whatever
    /// names clients send), ordered by backend and tool.
    ///
    /// The audit log has no index on time (each one costs every call a write): the rows of
    /// the range are found by the primary key instead, from the newest row back to the
    /// first one older than the range (with [`OUT_OF_ORDER_MS`] to spare), so the cost
    /// follows the rows in the range, not the rows kept.
    pub fn backend_calls_by_tool(
        &self,
        since_ms: i64,
        until_ms: i64,
    ) -> Result<Vec<ToolCalls>, StoreError> {
        self.with_conn(|conn| {
            let after = rows_before(conn, since_ms)?;
            conn.query_all(
                "SELECT backend, tool, CAST(SUM(calls) AS BIGINT), \
                 CAST(SUM(CASE WHEN outcome = 'ok' THEN 0 ELSE calls END) AS BIGINT) \
                 FROM audit_log WHERE id > ?1 AND at >= ?2 AND at < ?3 AND backend IS NOT NULL \
                 GROUP BY backend, tool ORDER BY backend, tool",
                args![after, since_ms, until_ms],
                |row| {
                    Ok(ToolCalls {
                        backend: row.get(0)?,
                        tool: row.get(1)?,
                        calls: row.get(2)?,
                        failures: row.get(3)?,
                    })
                },
            )
        })
    }
}

/// The id of the newest row written more than [`OUT_OF_ORDER_MS`] before `since_ms` (0 when
/// there is none): every row of a range starting at `since_ms` has a greater id. The
/// statement walks the primary key down from the newest row and stops at the first such row.
fn rows_before(conn: &super::Conn<'_>, since_ms: i64) -> Result<i64, StoreError> {
    let older = conn.query_opt(
        "SELECT id FROM audit_log WHERE at < ?1 ORDER BY id DESC LIMIT 1",
        args![since_ms.saturating_sub(OUT_OF_ORDER_MS)],
        |row| row.get::<i64>(0),
    )?;
    Ok(older.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::stores;

    fn call(at: i64, credential: Option<&str>, tool: &str, outcome: &str) -> AuditRow {
        AuditRow {
            at,
            request_id: format!("{at}"),
            credential_id: credential.map(str::to_owned),
            client_id: None,
            tool: tool.to_owned(),
            outcome: outcome.to_owned(),
            duration_us: 250,
            transport: "http",
            backend: None,
        }
    }

    fn write(store: &Store, row: &AuditRow, calls: i64, source: Option<&str>) -> i64 {
        store
            .in_transaction(|tx| insert_row(tx, row, calls, source))
            .expect("insert")
    }

    fn listed(store: &Store, filter: AuditFilter) -> Vec<(i64, String, i64)> {
        store
            .recent_audit(&filter)
            .expect("recent")
            .into_iter()
            .map(|r| (r.id, r.tool, r.calls))
            .collect()
    }

    fn all() -> AuditFilter {
        AuditFilter {
            limit: 100,
            ..AuditFilter::default()
        }
    }

    #[test]
    fn rows_are_written_with_increasing_ids_and_read_back_whole() {
        for scratch in stores() {
            let store = &scratch.store;
            let mut first = call(1_000, Some("AbCdEf12"), "list_invoices", "ok");
            first.client_id = Some("partner".into());
            first.backend = Some("crm".into());
            let one = write(store, &first, 1, None);
            let two = write(store, &call(2_000, None, "x", "unauthorized"), 1, None);
            assert!(two > one, "{one} then {two}");
            let records = store.recent_audit(&all()).expect("recent");
            assert_eq!(records.len(), 2);
            assert_eq!(
                records[1],
                AuditRecord {
                    id: one,
                    at_ms: 1_000,
                    request_id: "1000".into(),
                    credential_id: Some("AbCdEf12".into()),
                    client_id: Some("partner".into()),
                    tool: "list_invoices".into(),
                    outcome: "ok".into(),
                    duration_us: 250,
                    transport: "http".into(),
                    calls: 1,
                    source: None,
                    backend: Some("crm".into()),
                }
            );
            assert_eq!(records[0].id, two);
        }
    }

    #[test]
    fn a_summary_row_counts_calls_and_turns_to_any_tool() {
        for scratch in stores() {
            let store = &scratch.store;
            let id = write(
                store,
                &call(1_000, None, "list_invoices", "unauthorized"),
                3,
                Some("203.0.113.7"),
            );
            let add = |id, calls, several, tool: &str| {
                store
                    .in_transaction(|tx| add_to_summary(tx, id, calls, several, tool))
                    .expect("add")
            };
            assert!(add(id, 2, false, "list_invoices"));
            assert_eq!(listed(store, all()), vec![(id, "list_invoices".into(), 5)]);
            assert!(add(id, 1, false, "get_invoice"));
            assert_eq!(listed(store, all()), vec![(id, "*".into(), 6)]);

            let other = write(store, &call(2_000, None, "a", "unauthorized"), 1, Some("x"));
            assert!(add(other, 1, true, "a"));
            assert_eq!(listed(store, all())[0], (other, "*".into(), 2));
            assert!(!add(other + 100, 1, false, "a"));
            let record = &store.recent_audit(&all()).expect("recent")[1];
            assert_eq!(record.source.as_deref(), Some("203.0.113.7"));
        }
    }

    #[test]
    fn the_query_filters_and_stops_at_the_limit() {
        for scratch in stores() {
            let store = &scratch.store;
            let a = write(store, &call(3_000, Some("KeyAAAAA"), "list", "ok"), 1, None);
            let b = write(
                store,
                &call(1_000, Some("KeyAAAAA"), "send", "rate_limited"),
                1,
                None,
            );
            let c = write(store, &call(2_000, Some("KeyBBBBB"), "list", "ok"), 1, None);
            let d = write(store, &call(4_000, None, "list", "unauthorized"), 1, None);
            let ids = |filter| -> Vec<i64> {
                listed(store, filter)
                    .into_iter()
                    .map(|(id, _, _)| id)
                    .collect()
            };
            assert_eq!(ids(all()), [d, c, b, a]);
            // By credential: newest first by time, not by id.
            let by_a = AuditFilter {
                credential_id: Some("KeyAAAAA".into()),
                ..all()
            };
            assert_eq!(ids(by_a.clone()), [a, b]);
            let sent = AuditFilter {
                tool: Some("send".into()),
                ..by_a.clone()
            };
            assert_eq!(ids(sent), [b]);
            let ok = AuditFilter {
                outcome: Some("ok".into()),
                ..all()
            };
            assert_eq!(ids(ok), [c, a]);
            let listing = AuditFilter {
                tool: Some("list".into()),
                limit: 2,
                ..all()
            };
            assert_eq!(ids(listing), [d, c]);
            let huge = AuditFilter {
                limit: u32::MAX,
                ..by_a
            };
            assert_eq!(ids(huge), [a, b]);
        }
    }

    #[test]
    fn pruning_looks_at_a_chunk_and_deletes_the_old_rows_in_it() {
        for scratch in stores() {
            let store = &scratch.store;
            let ids: Vec<i64> = [100, 900, 200, 1_500, 300]
                .into_iter()
                .map(|at| write(store, &call(at, None, "t", "ok"), 1, None))
                .collect();
            let step = store.prune_audit_chunk(0, 1_000, 3).expect("prune");
            assert_eq!(step, (3, Some(ids[2]), 3));
            let step = store.prune_audit_chunk(ids[2], 1_000, 3).expect("prune");
            assert_eq!(step, (1, Some(ids[4]), 2));
            let step = store.prune_audit_chunk(ids[4], 1_000, 3).expect("prune");
            assert_eq!(step, (0, None, 0));
            let left: Vec<i64> = listed(store, all())
                .into_iter()
                .map(|(id, _, _)| id)
                .collect();
            assert_eq!(left, [ids[3]]);
        }
    }

    #[test]
    fn a_page_filters_by_time_and_failure_and_moves_by_row_id_both_ways() {
        for scratch in stores() {
            let store = &scratch.store;
            let ids: Vec<i64> = [
                (1_000, "ok"),
                (2_000, "rate_limited"),
                (3_000, "ok"),
                (4_000, "invalid_token"),
                (5_000, "ok"),
            ]
            .into_iter()
            .map(|(at, outcome)| write(store, &call(at, Some("K1"), "t", outcome), 1, None))
            .collect();
            let page = |page: AuditPage| -> Vec<i64> {
                let rows = store.audit_page(&page).expect("page");
                rows.into_iter().map(|r| r.id).collect()
            };
            let all = AuditPage {
                limit: 100,
                ..AuditPage::default()
            };
            assert_eq!(page(all.clone()), [ids[4], ids[3], ids[2], ids[1], ids[0]]);
            let failures = AuditPage {
                failures_only: true,
                ..all.clone()
            };
            assert_eq!(page(failures), [ids[3], ids[1]]);
            let window = AuditPage {
                since_ms: Some(2_000),
                until_ms: Some(4_000),
                ..all.clone()
            };
            assert_eq!(page(window), [ids[2], ids[1]]);
            let first = AuditPage {
                limit: 2,
                ..all.clone()
            };
            assert_eq!(page(first.clone()), [ids[4], ids[3]]);
            let older = AuditPage {
                before_id: Some(ids[3]),
                ..first.clone()
            };
            assert_eq!(page(older), [ids[2], ids[1]]);
            let newer = AuditPage {
                after_id: Some(ids[1]),
                ..first.clone()
            };
            assert_eq!(page(newer), [ids[3], ids[2]]);
            let other = AuditPage {
                credential_id: Some("K2".into()),
                ..all
            };
            assert!(page(other).is_empty());
        }
    }

    #[test]
    fn calls_are_counted_per_bucket_and_outcome_with_summary_rows_whole() {
        for scratch in stores() {
            let store = &scratch.store;
            write(store, &call(59_000, None, "t", "ok"), 1, None);
            write(store, &call(60_000, None, "t", "ok"), 1, None);
            write(store, &call(61_000, None, "t", "ok"), 1, None);
            write(
                store,
                &call(119_999, None, "t", "invalid_token"),
                40,
                Some("10.0.0.9"),
            );
            write(store, &call(120_000, None, "t", "ok"), 1, None);
            write(
                store,
                &call(120_001, Some("K1"), "console:revoke_key", "ok"),
                1,
                None,
            );
            let counted = store.calls_by_outcome(60_000, 60_000).expect("count");
            assert_eq!(
                counted,
                [
                    (60_000, "invalid_token".to_owned(), 40),
                    (60_000, "ok".to_owned(), 2),
                    (120_000, "ok".to_owned(), 1),
                ]
            );
        }
    }

    #[test]
    fn a_row_is_read_back_by_its_id_and_an_unknown_id_is_none() {
        for scratch in stores() {
            let store = &scratch.store;
            let mut row = call(1_000, Some("K1"), "crm_get_order", "not_found");
            row.backend = Some("crm".into());
            let id = write(store, &row, 1, None);
            let other = write(
                store,
                &call(2_000, None, "t", "ok"),
                1,
                Some("http:10.0.0.1"),
            );
            let record = store.audit_record(id).expect("read").expect("the row");
            assert_eq!(
                (
                    record.id,
                    record.at_ms,
                    record.tool.as_str(),
                    record.outcome.as_str()
                ),
                (id, 1_000, "crm_get_order", "not_found")
            );
            assert_eq!(record.backend.as_deref(), Some("crm"));
            assert_eq!(record.credential_id.as_deref(), Some("K1"));
            let summary = store.audit_record(other).expect("read").expect("the row");
            assert_eq!(summary.source.as_deref(), Some("http:10.0.0.1"));
            assert_eq!(store.audit_record(other + 1).expect("read"), None);
            assert_eq!(store.audit_record(-1).expect("read"), None);
        }
    }

    fn backend_call(at: i64, backend: &str, tool: &str, outcome: &str) -> AuditRow {
        AuditRow {
            backend: Some(backend.to_owned()),
            ..call(at, Some("K1"), tool, outcome)
        }
    }

    fn counted(store: &Store, since: i64, until: i64) -> Vec<(String, String, i64, i64)> {
        store
            .backend_calls_by_tool(since, until)
            .expect("count")
            .into_iter()
            .map(|c| (c.backend, c.tool, c.calls, c.failures))
            .collect()
    }

    #[test]
    fn backend_calls_and_failures_are_counted_per_tool_over_a_time_range() {
        const DAY: i64 = 86_400_000;
        for scratch in stores() {
            let store = &scratch.store;
            let since = 10 * DAY;
            let until = 11 * DAY;
            // Before the range, at its start, inside, and at its end (left out).
            write(
                store,
                &backend_call(since - 1, "crm", "crm_a", "ok"),
                1,
                None,
            );
            write(store, &backend_call(since, "crm", "crm_a", "ok"), 1, None);
            write(
                store,
                &backend_call(since + 5, "crm", "crm_a", "not_found"),
                1,
                None,
            );
            write(
                store,
                &backend_call(since + 6, "crm", "crm_a", "rate_limited"),
                3,
                None,
            );
            write(
                store,
                &backend_call(since + 7, "crm", "crm_b", "ok"),
                1,
                None,
            );
            write(
                store,
                &backend_call(since + 8, "erp", "erp_x", "adapter_error"),
                1,
                None,
            );
            // Built-in tools and unknown names have no backend: not counted.
            write(
                store,
                &call(since + 9, Some("K1"), "search_clients", "ok"),
                1,
                None,
            );
            write(
                store,
                &call(since + 9, Some("K1"), "crm_zz", "unknown_tool"),
                1,
                None,
            );
            write(store, &backend_call(until, "crm", "crm_a", "ok"), 1, None);
            assert_eq!(
                counted(store, since, until),
                [
                    ("crm".into(), "crm_a".into(), 5, 4),
                    ("crm".into(), "crm_b".into(), 1, 0),
                    ("erp".into(), "erp_x".into(), 1, 1),
                ]
            );
            assert_eq!(counted(store, until + 1, until + DAY), []);
        }
    }

    #[test]
    fn a_range_is_found_by_row_id_with_room_for_rows_written_out_of_order() {
        const DAY: i64 = 86_400_000;
        for scratch in stores() {
            let store = &scratch.store;
            let since = 10 * DAY;
            // Written before a row older than the range by more than the room allowed: a
            // clock that jumped back that far. Not looked at.
            write(
                store,
                &backend_call(since + 1, "crm", "crm_a", "ok"),
                1,
                None,
            );
            write(
                store,
                &backend_call(since - OUT_OF_ORDER_MS - 1, "crm", "crm_a", "ok"),
                1,
                None,
            );
            // Out of order by less than the room: counted when in the range.
            write(
                store,
                &backend_call(since + 60_000, "crm", "crm_a", "ok"),
                1,
                None,
            );
            write(
                store,
                &backend_call(since - 60_000, "crm", "crm_a", "ok"),
                1,
                None,
            );
            write(
                store,
                &backend_call(since + 30_000, "crm", "crm_a", "timeout"),
                1,
                None,
            );
            assert_eq!(
                counted(store, since, since + DAY),
                [("crm".into(), "crm_a".into(), 2, 1)]
            );
            // The overview's counts find their rows the same way.
            let buckets = store.calls_by_outcome(since, DAY).expect("count");
            assert_eq!(
                buckets,
                [
                    (since, "ok".to_owned(), 1),
                    (since, "timeout".to_owned(), 1)
                ]
            );
        }
    }
}
