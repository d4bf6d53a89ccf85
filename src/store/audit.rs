//! The `audit_log` table: its one row type ([`AuditRow`]), its only writer (rows of single
//! calls, and summary rows that stand for many refusals), retention, the one filtered and
//! paged read that `tollgate audit` and the console share ([`Store::audit_rows`]), and the
//! console's counts.
//!
//! A failure's row names its catalog entry (`entry`, schema version 8) beside its code: a
//! code can name several entries of different classes (`rate_limited` is a guard's refusal
//! and a backend's own 429), and only the entry says which one it was.

use std::collections::HashMap;
use std::sync::LazyLock;

use super::sql::{Param, Row, args};
use super::{Conn, Store, StoreError, Tx};
use crate::catalog::ErrorKind;

/// One row of the audit log, as the writer builds it and as every read gives it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    /// Row id (increasing). The database assigns it when the row is written: [`insert_row`]
    /// ignores this field and returns the id.
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
    /// The catalog entry of a failure; `None` on an `ok` row, on a row written before
    /// schema version 8, and on a row naming an entry this build's catalog does not hold.
    pub entry: Option<ErrorKind>,
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
    /// The W3C trace id of the request (32 lowercase hex digits): its span's when traces
    /// are exported, otherwise the caller's when it sent one; `None` on a summary row and
    /// on the rows written before schema version 11.
    pub trace_id: Option<String>,
}

/// Schema version 8 on SQLite: the catalog entry of a failure, by name (NULL on `ok`
/// rows and on the rows written before it).
pub(super) const SQLITE_ENTRY_STEP: &str = "ALTER TABLE audit_log ADD COLUMN entry TEXT;";
/// Schema version 8 on PostgreSQL.
pub(super) const POSTGRES_ENTRY_STEP: &str =
    "ALTER TABLE audit_log ADD COLUMN entry TEXT COLLATE \"C\";";

/// Schema version 11 on SQLite: the trace id of the request.
pub(super) const SQLITE_TRACE_STEP: &str = "ALTER TABLE audit_log ADD COLUMN trace_id TEXT;";
/// Schema version 11 on PostgreSQL.
pub(super) const POSTGRES_TRACE_STEP: &str =
    "ALTER TABLE audit_log ADD COLUMN trace_id TEXT COLLATE \"C\";";

/// The name an entry is stored under: its name in the catalog, as its [`ErrorKind`] variant
/// is spelled (`BackendRateLimited`).
fn entry_name(kind: ErrorKind) -> String {
    format!("{kind:?}")
}

/// Every entry of this build's catalog by its stored name.
static ENTRIES: LazyLock<HashMap<String, ErrorKind>> = LazyLock::new(|| {
    ErrorKind::ALL
        .iter()
        .map(|kind| (entry_name(*kind), *kind))
        .collect()
});

/// The entry a stored name names; `None` for a name this build's catalog does not hold
/// (written by a newer node sharing the database).
fn entry_named(name: &str) -> Option<ErrorKind> {
    ENTRIES.get(name).copied()
}

/// The catalog entry column `index` of `row` names (`None` for NULL or an unknown name).
fn entry_at(row: &Row<'_>, index: usize) -> Result<Option<ErrorKind>, StoreError> {
    Ok(row
        .get::<Option<String>>(index)?
        .as_deref()
        .and_then(entry_named))
}

/// Writes `row` (standing for its `calls` calls, with the `source` of a summary row);
/// returns its id.
pub fn insert_row(tx: &Tx<'_>, row: &AuditRow) -> Result<i64, StoreError> {
    tx.insert_returning_id(
        "INSERT INTO audit_log (at, request_id, credential_id, client_id, tool, outcome, \
         duration_us, transport, calls, source, backend, entry, trace_id) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        args![
            row.at_ms,
            row.request_id,
            row.credential_id,
            row.client_id,
            row.tool,
            row.outcome,
            row.duration_us,
            row.transport,
            row.calls,
            row.source,
            row.backend,
            row.entry.map(entry_name),
            row.trace_id
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

/// Which rows a read of the audit log gives, for `tollgate audit` and the console's pages
/// alike: the rows every set filter matches, newest first (by row id), from a position
/// (keyset on the row id, so a page stays put while new rows arrive), at most `limit`.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
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
    /// The rows before this row id (older rows), or from the newest.
    pub before_id: Option<i64>,
    /// The rows just after this row id (newer rows); wins over `before_id`.
    pub after_id: Option<i64>,
    /// At most this many rows.
    pub limit: u32,
}

/// A row limit as both engines bind it: PostgreSQL reads `?N + 0` as a 32-bit integer,
/// and no listing or chunk is anywhere near that large.
fn row_limit(limit: impl TryInto<i32>) -> i64 {
    i64::from(limit.try_into().unwrap_or(i32::MAX))
}

/// Every column of a row, in the order [`row_from`] reads them.
const ROW_COLUMNS: &str = "SELECT id, at, request_id, credential_id, client_id, tool, outcome, \
     duration_us, transport, calls, source, backend, entry, trace_id FROM audit_log";

fn row_from(row: &Row<'_>) -> Result<AuditRow, StoreError> {
    Ok(AuditRow {
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
        entry: entry_at(row, 12)?,
        trace_id: row.get(13)?,
    })
}

/// The conditions of a statement and the parameters they number, in order.
#[derive(Default)]
struct Conditions<'a> {
    tests: Vec<String>,
    params: Vec<&'a dyn Param>,
}

impl<'a> Conditions<'a> {
    /// Adds `column_test` followed by `param` as its next numbered parameter.
    fn compare(&mut self, column_test: &str, param: &'a dyn Param) {
        self.params.push(param);
        self.tests
            .push(format!("{column_test} ?{}", self.params.len()));
    }

    /// Adds `column_test` when `param` is set.
    fn compare_if<T: Param>(&mut self, column_test: &str, param: &'a Option<T>) {
        if let Some(value) = param {
            self.compare(column_test, value);
        }
    }

    /// ` WHERE …` joining every test, or nothing.
    fn clause(&self) -> String {
        if self.tests.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", self.tests.join(" AND "))
        }
    }
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

    /// The rows `filter` matches, newest first: the one read of the audit log's rows. The
    /// statement names only the filters that are set, so each engine's planner sees what
    /// it can use (`audit_log_by_credential` for one credential's rows, the primary key
    /// otherwise).
    pub fn audit_rows(&self, filter: &AuditFilter) -> Result<Vec<AuditRow>, StoreError> {
        let limit = row_limit(filter.limit);
        let mut conditions = Conditions::default();
        conditions.compare_if("credential_id =", &filter.credential_id);
        conditions.compare_if("tool =", &filter.tool);
        conditions.compare_if("outcome =", &filter.outcome);
        if filter.failures_only {
            conditions.tests.push("outcome <> 'ok'".to_owned());
        }
        conditions.compare_if("at >=", &filter.since_ms);
        conditions.compare_if("at <", &filter.until_ms);
        // The rows after a row are read oldest first (the rows just above it) and turned
        // round.
        let order = match (&filter.after_id, &filter.before_id) {
            (Some(after), _) => {
                conditions.compare("id >", after);
                "ASC"
            }
            (None, Some(before)) => {
                conditions.compare("id <", before);
                "DESC"
            }
            (None, None) => "DESC",
        };
        let clause = conditions.clause();
        let mut params = conditions.params;
        params.push(&limit);
        let sql = format!(
            "{ROW_COLUMNS}{clause} ORDER BY id {order} LIMIT ?{} + 0",
            params.len()
        );
        let mut rows = self.with_conn(|conn| conn.query_all(&sql, &params, row_from))?;
        if filter.after_id.is_some() {
            rows.reverse();
        }
        Ok(rows)
    }

    /// The row `id`, or `None` when there is none (never written, or pruned).
    pub fn audit_row(&self, id: i64) -> Result<Option<AuditRow>, StoreError> {
        self.with_conn(|conn| {
            conn.query_opt(&format!("{ROW_COLUMNS} WHERE id = ?1"), args![id], row_from)
        })
    }
}

/// The calls of one outcome in one time bucket, as the overview charts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeCalls {
    /// The bucket's start, unix milliseconds.
    pub bucket_ms: i64,
    /// `ok` or a catalog code.
    pub outcome: String,
    /// The catalog entry of the failure, when its rows name one ([`AuditRow::entry`]).
    pub entry: Option<ErrorKind>,
    /// Calls (a summary row counts the calls it stands for).
    pub calls: i64,
}

impl Store {
    /// Calls per time bucket, outcome and catalog entry since `since_ms`, oldest bucket
    /// first. A summary row counts the calls it stands for; the rows of changes made in the
    /// console (`console:…`) are not calls. The rows are found by the primary key as
    /// [`Store::backend_calls_by_tool`] finds them.
    pub fn calls_by_outcome(
        &self,
        since_ms: i64,
        bucket_ms: i64,
    ) -> Result<Vec<OutcomeCalls>, StoreError> {
        self.with_conn(|conn| {
            let after = rows_before(conn, since_ms)?;
            conn.query_all(
                "SELECT (at / ?2) * ?2 AS bucket, outcome, entry, CAST(SUM(calls) AS BIGINT) \
                 FROM audit_log WHERE id > ?3 AND at >= ?1 AND tool NOT LIKE 'console:%' \
                 GROUP BY bucket, outcome, entry ORDER BY bucket, outcome, COALESCE(entry, '')",
                args![since_ms, bucket_ms.max(1), after],
                |row| {
                    Ok(OutcomeCalls {
                        bucket_ms: row.get(0)?,
                        outcome: row.get(1)?,
                        entry: entry_at(row, 2)?,
                        calls: row.get(3)?,
                    })
                },
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

/// The calls of one provider user with one outcome over a time range, as the users page
/// counts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserOutcomeCalls {
    /// The user's id (the rows' `credential_id`).
    pub user_id: String,
    /// `ok` or a catalog code.
    pub outcome: String,
    /// The catalog entry of the failure, when its rows name one ([`AuditRow::entry`]).
    pub entry: Option<ErrorKind>,
    /// Calls (a summary row counts the calls it stands for).
    pub calls: i64,
}

impl Store {
    /// Calls per provider user, outcome and catalog entry in `since_ms..until_ms`, of the
    /// users the `users` table holds (so the groups are bounded by it, whatever ids the
    /// rows carry), ordered by user. The rows are found by the primary key as
    /// [`Store::backend_calls_by_tool`] finds them.
    pub fn user_calls_by_outcome(
        &self,
        since_ms: i64,
        until_ms: i64,
    ) -> Result<Vec<UserOutcomeCalls>, StoreError> {
        self.with_conn(|conn| {
            let after = rows_before(conn, since_ms)?;
            conn.query_all(
                "SELECT credential_id, outcome, entry, CAST(SUM(calls) AS BIGINT) \
                 FROM audit_log WHERE id > ?1 AND at >= ?2 AND at < ?3 \
                 AND credential_id IN (SELECT id FROM users) AND tool NOT LIKE 'console:%' \
                 GROUP BY credential_id, outcome, entry \
                 ORDER BY credential_id, outcome, COALESCE(entry, '')",
                args![after, since_ms, until_ms],
                |row| {
                    Ok(UserOutcomeCalls {
                        user_id: row.get(0)?,
                        outcome: row.get(1)?,
                        entry: entry_at(row, 2)?,
                        calls: row.get(3)?,
                    })
                },
            )
        })
    }
}

/// The id of the newest row written more than [`OUT_OF_ORDER_MS`] before `since_ms` (0 when
/// there is none): every row of a range starting at `since_ms` has a greater id. The
/// statement walks the primary key down from the newest row and stops at the first such row.
fn rows_before(conn: &Conn<'_>, since_ms: i64) -> Result<i64, StoreError> {
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
            id: 0,
            at_ms: at,
            request_id: format!("{at}"),
            credential_id: credential.map(str::to_owned),
            client_id: None,
            tool: tool.to_owned(),
            outcome: outcome.to_owned(),
            entry: None,
            duration_us: 250,
            transport: "http".to_owned(),
            calls: 1,
            source: None,
            backend: None,
            trace_id: None,
        }
    }

    fn write(store: &Store, row: &AuditRow, calls: i64, source: Option<&str>) -> i64 {
        let row = AuditRow {
            calls,
            source: source.map(str::to_owned),
            ..row.clone()
        };
        store
            .in_transaction(|tx| insert_row(tx, &row))
            .expect("insert")
    }

    fn listed(store: &Store, filter: AuditFilter) -> Vec<(i64, String, i64)> {
        store
            .audit_rows(&filter)
            .expect("rows")
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
            let records = store.audit_rows(&all()).expect("rows");
            assert_eq!(records.len(), 2);
            assert_eq!(
                records[1],
                AuditRow {
                    id: one,
                    at_ms: 1_000,
                    request_id: "1000".into(),
                    credential_id: Some("AbCdEf12".into()),
                    client_id: Some("partner".into()),
                    tool: "list_invoices".into(),
                    outcome: "ok".into(),
                    entry: None,
                    duration_us: 250,
                    transport: "http".into(),
                    calls: 1,
                    source: None,
                    backend: Some("crm".into()),
                    trace_id: None,
                }
            );
            assert_eq!(records[0].id, two);
            assert_eq!(
                store.audit_row(one).expect("read"),
                Some(records[1].clone())
            );
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
            let record = &store.audit_rows(&all()).expect("rows")[1];
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
            // By credential: newest first by row id, as without one (b was written after
            // a, with an earlier time).
            let by_a = AuditFilter {
                credential_id: Some("KeyAAAAA".into()),
                ..all()
            };
            assert_eq!(ids(by_a.clone()), [b, a]);
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
            assert_eq!(ids(huge), [b, a]);
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
            let page = |page: AuditFilter| -> Vec<i64> {
                let rows = store.audit_rows(&page).expect("page");
                rows.into_iter().map(|r| r.id).collect()
            };
            let all = AuditFilter {
                limit: 100,
                ..AuditFilter::default()
            };
            assert_eq!(page(all.clone()), [ids[4], ids[3], ids[2], ids[1], ids[0]]);
            let failures = AuditFilter {
                failures_only: true,
                ..all.clone()
            };
            assert_eq!(page(failures), [ids[3], ids[1]]);
            let window = AuditFilter {
                since_ms: Some(2_000),
                until_ms: Some(4_000),
                ..all.clone()
            };
            assert_eq!(page(window), [ids[2], ids[1]]);
            let first = AuditFilter {
                limit: 2,
                ..all.clone()
            };
            assert_eq!(page(first.clone()), [ids[4], ids[3]]);
            let older = AuditFilter {
                before_id: Some(ids[3]),
                ..first.clone()
            };
            assert_eq!(page(older), [ids[2], ids[1]]);
            let newer = AuditFilter {
                after_id: Some(ids[1]),
                ..first.clone()
            };
            assert_eq!(page(newer), [ids[3], ids[2]]);
            let other = AuditFilter {
                credential_id: Some("K2".into()),
                ..all
            };
            assert!(page(other).is_empty());
        }
    }

    /// `row` as the failure of catalog entry `entry`.
    fn failed(row: AuditRow, entry: ErrorKind) -> AuditRow {
        AuditRow {
            entry: Some(entry),
            ..row
        }
    }

    fn buckets(
        store: &Store,
        since: i64,
        bucket: i64,
    ) -> Vec<(i64, String, Option<ErrorKind>, i64)> {
        store
            .calls_by_outcome(since, bucket)
            .expect("count")
            .into_iter()
            .map(|c| (c.bucket_ms, c.outcome, c.entry, c.calls))
            .collect()
    }

    #[test]
    fn calls_are_counted_per_bucket_outcome_and_entry_with_summary_rows_whole() {
        for scratch in stores() {
            let store = &scratch.store;
            write(store, &call(59_000, None, "t", "ok"), 1, None);
            write(store, &call(60_000, None, "t", "ok"), 1, None);
            write(store, &call(61_000, None, "t", "ok"), 1, None);
            let refused = call(119_999, None, "t", "invalid_token");
            write(
                store,
                &failed(refused, ErrorKind::InvalidToken),
                40,
                Some("10.0.0.9"),
            );
            // One code, three rows: our own limit, the backend's 429, and a row written
            // before rows named their entry.
            let limited = call(62_000, Some("K1"), "crm_a", "rate_limited");
            write(
                store,
                &failed(limited.clone(), ErrorKind::RateLimited),
                1,
                None,
            );
            let upstream = failed(limited.clone(), ErrorKind::BackendRateLimited);
            write(store, &upstream, 1, None);
            write(store, &upstream, 1, None);
            write(store, &limited, 1, None);
            write(store, &call(120_000, None, "t", "ok"), 1, None);
            write(
                store,
                &call(120_001, Some("K1"), "console:revoke_key", "ok"),
                1,
                None,
            );
            assert_eq!(
                buckets(store, 60_000, 60_000),
                [
                    (
                        60_000,
                        "invalid_token".to_owned(),
                        Some(ErrorKind::InvalidToken),
                        40
                    ),
                    (60_000, "ok".to_owned(), None, 2),
                    (60_000, "rate_limited".to_owned(), None, 1),
                    (
                        60_000,
                        "rate_limited".to_owned(),
                        Some(ErrorKind::BackendRateLimited),
                        2
                    ),
                    (
                        60_000,
                        "rate_limited".to_owned(),
                        Some(ErrorKind::RateLimited),
                        1
                    ),
                    (120_000, "ok".to_owned(), None, 1),
                ]
            );
        }
    }

    #[test]
    fn a_failure_keeps_its_entry_and_a_name_this_build_does_not_know_reads_as_none() {
        for scratch in stores() {
            let store = &scratch.store;
            let row = call(1_000, Some("K1"), "crm_a", "rate_limited");
            let upstream = write(
                store,
                &failed(row.clone(), ErrorKind::BackendRateLimited),
                1,
                None,
            );
            let ours = write(store, &failed(row.clone(), ErrorKind::RateLimited), 1, None);
            let older = write(store, &row, 1, None);
            let newer = store
                .in_transaction(|tx| {
                    tx.insert_returning_id(
                        "INSERT INTO audit_log (at, request_id, tool, outcome, duration_us, \
                         transport, entry) VALUES (2000, '1', 't', 'quota_gone', 1, 'http', \
                         'QuotaGone')",
                        args![],
                    )
                })
                .expect("a row of a newer release");
            let entry = |id| store.audit_row(id).expect("read").expect("the row").entry;
            assert_eq!(entry(upstream), Some(ErrorKind::BackendRateLimited));
            assert_eq!(entry(ours), Some(ErrorKind::RateLimited));
            assert_eq!(entry(older), None);
            assert_eq!(entry(newer), None);
            let listed = store.audit_rows(&all()).expect("rows");
            let entries: Vec<_> = listed.iter().map(|r| (r.id, r.entry)).collect();
            assert_eq!(
                entries,
                [
                    (newer, None),
                    (older, None),
                    (ours, Some(ErrorKind::RateLimited)),
                    (upstream, Some(ErrorKind::BackendRateLimited)),
                ]
            );
        }
    }

    #[test]
    fn every_entry_has_a_name_of_its_own_that_reads_back() {
        for kind in ErrorKind::ALL {
            assert_eq!(entry_named(&entry_name(*kind)), Some(*kind), "{kind:?}");
        }
        assert_eq!(ENTRIES.len(), ErrorKind::ALL.len());
        // Rows keep these names: renaming an entry leaves its old rows without one.
        assert_eq!(
            entry_name(ErrorKind::BackendRateLimited),
            "BackendRateLimited"
        );
        assert_eq!(entry_name(ErrorKind::RateLimited), "RateLimited");
        assert_eq!(entry_named("rate_limited"), None);
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
            let record = store.audit_row(id).expect("read").expect("the row");
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
            let summary = store.audit_row(other).expect("read").expect("the row");
            assert_eq!(summary.source.as_deref(), Some("http:10.0.0.1"));
            assert_eq!(store.audit_row(other + 1).expect("read"), None);
            assert_eq!(store.audit_row(-1).expect("read"), None);
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
            assert_eq!(
                buckets(store, since, DAY),
                [
                    (since, "ok".to_owned(), None, 1),
                    (since, "timeout".to_owned(), None, 1)
                ]
            );
        }
    }

    #[test]
    fn a_users_calls_are_counted_by_outcome_and_entry_and_only_a_known_users() {
        const DAY: i64 = 86_400_000;
        for scratch in stores() {
            let store = &scratch.store;
            let seen = crate::store::users::SeenUser {
                issuer: "https://idp.example.com",
                subject: "alice",
                display_name: Some("Alice"),
                client_id: None,
            };
            let (alice, _) = store.record_user(&seen, 1).expect("record");
            let since = 10 * DAY;
            let limited = AuditRow {
                entry: Some(ErrorKind::RateLimited),
                ..call(since + 2, Some(&alice), "search_clients", "rate_limited")
            };
            write(store, &call(since - 1, Some(&alice), "a", "ok"), 1, None);
            write(store, &call(since, Some(&alice), "a", "ok"), 1, None);
            write(store, &call(since + 1, Some(&alice), "b", "ok"), 2, None);
            write(store, &limited, 3, None);
            // A key's calls, an id no user has, and an operator's change are not counted.
            write(store, &call(since + 3, Some("K1"), "a", "ok"), 1, None);
            let stranger = crate::store::users::user_id("https://idp.example.com", "bob");
            write(store, &call(since + 3, Some(&stranger), "a", "ok"), 1, None);
            write(
                store,
                &call(since + 4, Some(&alice), "console:x", "ok"),
                1,
                None,
            );
            write(store, &call(since + DAY, Some(&alice), "a", "ok"), 1, None);
            let counted: Vec<_> = store
                .user_calls_by_outcome(since, since + DAY)
                .expect("count")
                .into_iter()
                .map(|c| (c.user_id, c.outcome, c.entry, c.calls))
                .collect();
            assert_eq!(
                counted,
                [
                    (alice.clone(), "ok".to_owned(), None, 3),
                    (
                        alice.clone(),
                        "rate_limited".to_owned(),
                        Some(ErrorKind::RateLimited),
                        3
                    ),
                ]
            );
        }
    }
}

/// The console's latency page: the single calls of a time range with their durations,
/// newest first and bounded (the percentiles are computed over them in the console).
/// After the tests above: its own tests are inside it.
mod durations {
    use super::{ROW_COLUMNS, row_from, row_limit, rows_before};
    use crate::store::sql::args;
    use crate::store::{Store, StoreError};

    use super::AuditRow;

    impl Store {
        /// The rows of single calls in `since_ms..until_ms`, newest first, at most `limit`:
        /// summary rows (which stand for many refusals and time none of them) and the
        /// console's own changes (`console:…`) are left out. The rows are found by the
        /// primary key as [`Store::backend_calls_by_tool`] finds them (a row up to
        /// [`super::OUT_OF_ORDER_MS`] out of order still counts).
        pub fn timed_calls(
            &self,
            since_ms: i64,
            until_ms: i64,
            limit: u32,
        ) -> Result<Vec<AuditRow>, StoreError> {
            let limit = row_limit(limit);
            self.with_conn(|conn| {
                let after = rows_before(conn, since_ms)?;
                conn.query_all(
                    &format!(
                        "{ROW_COLUMNS} WHERE id > ?1 AND at >= ?2 AND at < ?3 \
                         AND source IS NULL AND tool NOT LIKE 'console:%' \
                         ORDER BY id DESC LIMIT ?4 + 0"
                    ),
                    args![after, since_ms, until_ms, limit],
                    row_from,
                )
            })
        }
    }

    #[cfg(test)]
    mod tests {
        use super::super::{AuditRow, OUT_OF_ORDER_MS, insert_row};
        use crate::store::testing::stores;

        fn timed(at: i64, tool: &str, duration_us: i64, source: Option<&str>) -> AuditRow {
            AuditRow {
                id: 0,
                at_ms: at,
                request_id: "1".to_owned(),
                credential_id: Some("K1".to_owned()),
                client_id: None,
                tool: tool.to_owned(),
                outcome: "ok".to_owned(),
                entry: None,
                duration_us,
                transport: "http".to_owned(),
                calls: if source.is_some() { 7 } else { 1 },
                source: source.map(str::to_owned),
                backend: tool.starts_with("shop_").then(|| "shop".to_owned()),
                trace_id: None,
            }
        }

        #[test]
        fn the_single_calls_of_a_range_are_read_newest_first_up_to_the_limit() {
            const HOUR: i64 = 3_600_000;
            for scratch in stores() {
                let store = &scratch.store;
                let since = 10 * HOUR;
                let rows = [
                    // Before the range (even within the out-of-order margin): left out.
                    timed(since - OUT_OF_ORDER_MS / 2, "a", 1, None),
                    timed(since, "a", 10, None),
                    timed(since + 1, "shop_list", 20, None),
                    // A summary row and a console change: not timed calls.
                    timed(since + 2, "a", 30, Some("http:10.0.0.1")),
                    timed(since + 3, "console:revoke_key", 40, None),
                    timed(since + 4, "a", 50, None),
                    // At the end of the range: left out.
                    timed(since + HOUR, "a", 60, None),
                ];
                for row in &rows {
                    store
                        .in_transaction(|tx| insert_row(tx, row))
                        .expect("insert");
                }
                let read = |limit| -> Vec<(String, i64, Option<String>)> {
                    store
                        .timed_calls(since, since + HOUR, limit)
                        .expect("read")
                        .into_iter()
                        .map(|r| (r.tool, r.duration_us, r.backend))
                        .collect()
                };
                assert_eq!(
                    read(100),
                    [
                        ("a".to_owned(), 50, None),
                        ("shop_list".to_owned(), 20, Some("shop".to_owned())),
                        ("a".to_owned(), 10, None),
                    ]
                );
                assert_eq!(read(2).len(), 2);
                assert_eq!(read(2)[0].1, 50);
            }
        }
    }
}
