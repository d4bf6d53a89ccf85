//! Copying a whole installation from one store to another (an SQLite file to PostgreSQL,
//! when a company moves to several nodes), and proving the copy: per table, the rows on
//! both sides and a SHA-256 over them.
//!
//! [`TABLES`] is the one list of the tables and columns an installation holds, in
//! foreign-key order; a unit test holds it equal to both schemas, so a table added later
//! cannot be forgotten by the copy. The copy runs in ONE write transaction of the target
//! (all or nothing): it refuses a target that already holds an installation unless asked
//! to replace it (then it empties the target first, in the same transaction), replaces the
//! seeded `plans` rows with the source's, inserts every row with its own keys and ids
//! (argon2 hashes included, so every key keeps working), and moves PostgreSQL's identity
//! sequences past the copied ids. Times are copied as they are stored: unix seconds or
//! milliseconds, integers on both engines.
//!
//! The source is read in one snapshot (one read transaction) for the copy and for its
//! checksums, so a writer still running beside it cannot make the two disagree; the
//! target's checksums are computed after the commit, by the same code on the other engine.
//! A checksum hashes the rows in primary-key order (text keys in byte order on both
//! engines), each cell rendered canonically: a type tag and the value.

use sha2::{Digest, Sha256};

use super::sql::{Dialect, Owned, Param};
use super::{Conn, Store, StoreError, Tx};

/// A primary-key column, and whether it holds text (ordered byte-wise on both engines).
#[derive(Debug, Clone, Copy)]
pub struct KeyColumn {
    /// The column's name.
    pub name: &'static str,
    /// True for a text column (PostgreSQL orders it with `COLLATE "C"`, as SQLite does).
    pub text: bool,
}

const fn text(name: &'static str) -> KeyColumn {
    KeyColumn { name, text: true }
}

const fn int(name: &'static str) -> KeyColumn {
    KeyColumn { name, text: false }
}

/// One table of an installation, as the copy sees it.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    /// The table's name.
    pub name: &'static str,
    /// Every column, in the schema's order.
    pub columns: &'static [&'static str],
    /// The primary key, in order.
    pub key: &'static [KeyColumn],
    /// An `id` the database assigns (an identity column on PostgreSQL), moved past the
    /// copied maximum after the copy.
    pub identity: bool,
    /// A column pointing at rows of the same table that may come later in any order: it
    /// is inserted as NULL and set once every row is in.
    pub deferred: Option<&'static str>,
}

/// Every table of an installation, parents before children (the copy's insertion order;
/// emptying runs in reverse).
pub const TABLES: &[Table] = &[
    Table {
        name: "server_secrets",
        columns: &["name", "value", "created_at"],
        key: &[text("name")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "plans",
        columns: &[
            "slug",
            "name",
            "rank",
            "hourly_call_limit",
            "read_per_minute",
            "write_per_minute",
            "destructive_per_minute",
            "send_per_minute",
            "generate_per_minute",
            "client_per_minute",
            "excluded_tools",
            "max_active_keys",
        ],
        key: &[text("slug")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "company",
        columns: &[
            "id",
            "name",
            "tax_id",
            "plan_slug",
            "locale",
            "country",
            "mode",
            "created_at",
        ],
        key: &[int("id")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "oauth_clients",
        columns: &[
            "client_id",
            "name",
            "secret_hash",
            "allowed_scopes",
            "per_minute_limit",
            "created_at",
            "revoked_at",
        ],
        key: &[text("client_id")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "credentials",
        columns: &[
            "public_id",
            "kind",
            "mode",
            "name",
            "secret_hash",
            "scopes",
            "client_id",
            "expires_at",
            "created_at",
            "revoked_at",
            "last_used_at",
            "read_per_minute",
            "write_per_minute",
            "destructive_per_minute",
            "send_per_minute",
            "generate_per_minute",
            "previous_secret_hash",
            "previous_secret_expires_at",
            "guard_channel",
        ],
        key: &[text("public_id")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "rate_counters",
        columns: &["bucket", "key", "window_start", "count"],
        key: &[text("bucket"), text("key"), int("window_start")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "idempotency_keys",
        columns: &[
            "credential_id",
            "key",
            "tool",
            "fingerprint",
            "state",
            "owner",
            "result",
            "created_at",
            "expires_at",
        ],
        key: &[text("credential_id"), text("key")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "audit_log",
        columns: &[
            "id",
            "at",
            "request_id",
            "credential_id",
            "client_id",
            "tool",
            "outcome",
            "duration_us",
            "transport",
            "calls",
            "source",
            "backend",
            "entry",
        ],
        key: &[int("id")],
        identity: true,
        deferred: None,
    },
    Table {
        name: "faults",
        columns: &[
            "id",
            "tool",
            "credential_id",
            "code",
            "probability",
            "remaining",
            "retry_after",
            "created_at",
        ],
        key: &[int("id")],
        identity: true,
        deferred: None,
    },
    Table {
        name: "clients",
        columns: &[
            "book",
            "id",
            "name",
            "tax_id",
            "email",
            "address",
            "created_at",
            "updated_at",
        ],
        key: &[text("book"), text("id")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "invoice_series",
        columns: &["book", "code", "last_number", "last_issue_date"],
        key: &[text("book"), text("code")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "invoices",
        columns: &[
            "book",
            "id",
            "client_id",
            "kind",
            "status",
            "series",
            "number",
            "issue_date",
            "due_date",
            "currency",
            "notes",
            "gross_cents",
            "discount_cents",
            "subtotal_cents",
            "vat_cents",
            "withholding_cents",
            "total_cents",
            "paid_cents",
            "recipient_name",
            "recipient_tax_id",
            "rectifies_id",
            "rectified_by_id",
            "void_reason",
            "issued_at",
            "voided_at",
            "created_at",
            "updated_at",
        ],
        key: &[text("book"), text("id")],
        identity: false,
        // A voided invoice names the rectifying invoice made after it.
        deferred: Some("rectified_by_id"),
    },
    Table {
        name: "invoice_lines",
        columns: &[
            "book",
            "invoice_id",
            "position",
            "description",
            "quantity",
            "unit_price_cents",
            "discount_percent",
            "vat_rate",
            "withholding_rate",
            "gross_cents",
            "discount_cents",
            "net_cents",
            "vat_cents",
            "withholding_cents",
            "total_cents",
        ],
        key: &[text("book"), text("invoice_id"), int("position")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "payments",
        columns: &[
            "book",
            "id",
            "invoice_id",
            "amount_cents",
            "currency",
            "paid_on",
            "method",
            "reference",
            "created_at",
        ],
        key: &[text("book"), text("id")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "outbox",
        columns: &[
            "book",
            "id",
            "invoice_id",
            "recipient",
            "subject",
            "body",
            "state",
            "created_at",
        ],
        key: &[text("book"), text("id")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "http_sessions",
        columns: &[
            "id",
            "owner",
            "protocol_version",
            "client_capabilities",
            "log_level",
            "created_at_ms",
            "last_seen_at_ms",
        ],
        key: &[text("id")],
        identity: false,
        deferred: None,
    },
];

/// The table a fresh target is seeded with, which the copy replaces rather than refuses.
const SEEDED: &str = "plans";

/// About this many parameters per `INSERT` (several rows per statement).
const PARAMS_PER_INSERT: usize = 1000;

/// The rows and checksum of one table on both sides.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TableCheck {
    /// The table.
    pub table: &'static str,
    /// Rows in the source.
    pub source_rows: u64,
    /// Rows in the target after the copy.
    pub target_rows: u64,
    /// SHA-256 of the source's rows (hex).
    pub source_sha256: String,
    /// SHA-256 of the target's rows (hex).
    pub target_sha256: String,
}

impl TableCheck {
    /// True when both sides hold the same rows.
    pub fn matches(&self) -> bool {
        self.source_rows == self.target_rows && self.source_sha256 == self.target_sha256
    }
}

/// The rows and checksum of one table on one side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSum {
    /// The table.
    pub table: &'static str,
    /// Its rows.
    pub rows: u64,
    /// SHA-256 over them (hex).
    pub sha256: String,
}

/// What a copy did and what its verification found, table by table in [`TABLES`] order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CopyReport {
    /// Whether the target's earlier contents were deleted first (`--replace`).
    pub replaced: bool,
    /// One check per table.
    pub tables: Vec<TableCheck>,
}

impl CopyReport {
    /// True when every table matches.
    pub fn verified(&self) -> bool {
        self.tables.iter().all(TableCheck::matches)
    }
}

/// Why a copy did not happen.
#[derive(Debug)]
pub enum CopyError {
    /// The target already holds an installation (the tables holding rows, with their row
    /// counts) and replacing it was not asked for.
    TargetNotEmpty(Vec<(&'static str, u64)>),
    /// Reading the source or writing the target failed; nothing was committed.
    Store(StoreError),
}

impl std::fmt::Display for CopyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TargetNotEmpty(tables) => {
                let held: Vec<String> = tables
                    .iter()
                    .map(|(table, rows)| format!("{table}: {rows}"))
                    .collect();
                write!(
                    f,
                    "the target already holds an installation ({}); copying into it would \
                     mix two companies' keys, counters and books. Copy into an empty \
                     database, or pass --replace to delete everything in it first",
                    held.join(", ")
                )
            }
            Self::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CopyError {}

impl From<StoreError> for CopyError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

/// Copies every table of `source` into `target` in one transaction of the target, then
/// verifies the copy: the source's checksums come from the snapshot the copy read, the
/// target's from the committed copy. With `replace`, the target's rows are deleted first
/// (in the same transaction); without it, a target holding any row outside the seeded
/// plans is refused. A report with a mismatch is returned as `Ok`: the caller decides.
pub fn copy_installation(
    source: &Store,
    target: &Store,
    replace: bool,
) -> Result<CopyReport, CopyError> {
    let source_sums = source.with_conn(|src| {
        // One snapshot for the copy and the checksums of the source.
        src.batch("BEGIN")?;
        let outcome = copy_in_snapshot(src, target, replace);
        // Read-only: ending the snapshot cannot lose anything.
        let ended = src.batch("COMMIT");
        outcome.and_then(|sums| ended.map(|()| sums))
    });
    let source_sums = match source_sums {
        Ok(Ok(sums)) => sums,
        Ok(Err(refused)) => return Err(refused),
        Err(e) => return Err(CopyError::Store(e)),
    };
    let target_sums = target.with_conn(checksums)?;
    Ok(CopyReport {
        replaced: replace,
        tables: source_sums
            .into_iter()
            .zip(target_sums)
            .map(|(s, t)| TableCheck {
                table: s.table,
                source_rows: s.rows,
                target_rows: t.rows,
                source_sha256: s.sha256,
                target_sha256: t.sha256,
            })
            .collect(),
    })
}

/// The copy and the source's checksums, inside the source's snapshot. The outer error is
/// a store failure; the inner one a refusal of the target.
fn copy_in_snapshot(
    src: &Conn<'_>,
    target: &Store,
    replace: bool,
) -> Result<Result<Vec<TableSum>, CopyError>, StoreError> {
    let mut refusal = None;
    let copied = target.in_transaction(|tx| {
        let held = tables_with_rows(tx)?;
        if !held.is_empty() && !replace {
            refusal = Some(CopyError::TargetNotEmpty(held));
            return Err(StoreError::RolledBack);
        }
        empty(tx)?;
        for table in TABLES {
            copy_table(src, tx, table)?;
        }
        move_identities(tx)
    });
    match (copied, refusal) {
        (_, Some(refused)) => Ok(Err(refused)),
        (Err(e), None) => Err(e),
        (Ok(()), None) => checksums(src).map(Ok),
    }
}

/// The tables (the seeded plans aside) that hold rows, with their counts.
fn tables_with_rows(conn: &Conn<'_>) -> Result<Vec<(&'static str, u64)>, StoreError> {
    let mut held = Vec::new();
    for table in TABLES.iter().filter(|t| t.name != SEEDED) {
        let rows: i64 = conn.query_one(
            &format!("SELECT count(*) FROM {}", table.name),
            super::sql::args![],
            |row| row.get(0),
        )?;
        if rows > 0 {
            held.push((table.name, u64::try_from(rows).unwrap_or(0)));
        }
    }
    Ok(held)
}

/// Deletes every row of every table, children first.
fn empty(tx: &Tx<'_>) -> Result<(), StoreError> {
    for table in TABLES.iter().rev() {
        tx.execute(&format!("DELETE FROM {}", table.name), super::sql::args![])?;
    }
    Ok(())
}

/// Copies one table: read from `src` row by row, written in multi-row `INSERT`s.
fn copy_table(src: &Conn<'_>, tx: &Tx<'_>, table: &Table) -> Result<(), StoreError> {
    let width = table.columns.len();
    let per_insert = (PARAMS_PER_INSERT / width).max(1);
    let deferred = table
        .deferred
        .and_then(|name| table.columns.iter().position(|c| *c == name));
    let mut batch: Vec<Owned> = Vec::with_capacity(per_insert * width);
    // (key cells, deferred value) of the rows whose deferred column is set.
    let mut later: Vec<(Vec<Owned>, Owned)> = Vec::new();
    src.query_all(&copy_select(table), super::sql::args![], |row| {
        let start = batch.len();
        for i in 0..width {
            batch.push(row.get::<Owned>(i)?);
        }
        if let Some(at) = deferred
            && batch[start + at] != Owned::Null
        {
            let value = std::mem::replace(&mut batch[start + at], Owned::Null);
            later.push((key_cells(table, &batch[start..]), value));
        }
        if batch.len() == per_insert * width {
            insert_rows(tx, table, &batch)?;
            batch.clear();
        }
        Ok(())
    })?;
    if !batch.is_empty() {
        insert_rows(tx, table, &batch)?;
    }
    if let Some(column) = table.deferred {
        set_deferred(tx, table, column, &later)?;
    }
    Ok(())
}

/// The cells of `row` (all columns of `table`) that form its primary key.
fn key_cells(table: &Table, row: &[Owned]) -> Vec<Owned> {
    table
        .key
        .iter()
        .filter_map(|k| table.columns.iter().position(|c| *c == k.name))
        .map(|i| row[i].clone())
        .collect()
}

/// The source's `SELECT` for the copy. Invoices come in rectification order (an invoice
/// before the rectifying invoice that names it), so every `rectifies_id` points at a row
/// already copied; other tables come in key order.
fn copy_select(table: &Table) -> String {
    if table.name == "invoices" {
        let columns: Vec<String> = table.columns.iter().map(|c| format!("i.{c}")).collect();
        return format!(
            "WITH RECURSIVE chain (book, id, depth) AS ( \
                 SELECT book, id, 0 FROM invoices WHERE rectifies_id IS NULL \
                 UNION ALL \
                 SELECT i.book, i.id, chain.depth + 1 FROM invoices i \
                 JOIN chain ON i.book = chain.book AND i.rectifies_id = chain.id) \
             SELECT {} FROM invoices i JOIN chain ON chain.book = i.book AND chain.id = i.id \
             ORDER BY chain.depth, i.book, i.id",
            columns.join(", ")
        );
    }
    format!(
        "SELECT {} FROM {} ORDER BY {}",
        table.columns.join(", "),
        table.name,
        table
            .key
            .iter()
            .map(|k| k.name)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// One `INSERT` of the rows in `cells` (whole rows of `table`, one after another).
fn insert_rows(tx: &Tx<'_>, table: &Table, cells: &[Owned]) -> Result<(), StoreError> {
    let width = table.columns.len();
    let rows: Vec<String> = (0..cells.len() / width)
        .map(|r| {
            let params: Vec<String> = (1..=width).map(|c| format!("?{}", r * width + c)).collect();
            format!("({})", params.join(", "))
        })
        .collect();
    let sql = format!(
        "INSERT INTO {} ({}) VALUES {}",
        table.name,
        table.columns.join(", "),
        rows.join(", ")
    );
    let params: Vec<&dyn Param> = cells.iter().map(|c| c as &dyn Param).collect();
    tx.execute(&sql, &params)?;
    Ok(())
}

/// Sets the deferred column of the rows that had one, once every row of the table is in.
fn set_deferred(
    tx: &Tx<'_>,
    table: &Table,
    column: &str,
    rows: &[(Vec<Owned>, Owned)],
) -> Result<(), StoreError> {
    let matching: Vec<String> = table
        .key
        .iter()
        .enumerate()
        .map(|(i, k)| format!("{} = ?{}", k.name, i + 2))
        .collect();
    let sql = format!(
        "UPDATE {} SET {column} = ?1 WHERE {}",
        table.name,
        matching.join(" AND ")
    );
    for (key, value) in rows {
        let mut params: Vec<&dyn Param> = vec![value];
        params.extend(key.iter().map(|c| c as &dyn Param));
        tx.execute(&sql, &params)?;
    }
    Ok(())
}

/// Moves each identity sequence past the copied ids (PostgreSQL; SQLite assigns the next
/// id from the table itself).
fn move_identities(tx: &Tx<'_>) -> Result<(), StoreError> {
    if tx.dialect() != Dialect::Postgres {
        return Ok(());
    }
    for table in TABLES.iter().filter(|t| t.identity) {
        let name = table.name;
        tx.query_one(
            &format!(
                "SELECT setval(pg_get_serial_sequence('{name}', 'id'), \
                 COALESCE(max(id), 0) + 1, false) FROM {name}"
            ),
            super::sql::args![],
            |row| row.get::<i64>(0),
        )?;
    }
    Ok(())
}

/// The rows and checksum of every table of `conn`'s database, in [`TABLES`] order.
pub fn checksums(conn: &Conn<'_>) -> Result<Vec<TableSum>, StoreError> {
    TABLES.iter().map(|table| checksum(conn, table)).collect()
}

/// One table's rows and SHA-256, the rows in primary-key order.
fn checksum(conn: &Conn<'_>, table: &Table) -> Result<TableSum, StoreError> {
    let order: Vec<String> = table
        .key
        .iter()
        .map(|k| match (k.text, conn.dialect()) {
            (true, Dialect::Postgres) => format!("{} COLLATE \"C\"", k.name),
            _ => k.name.to_owned(),
        })
        .collect();
    let sql = format!(
        "SELECT {} FROM {} ORDER BY {}",
        table.columns.join(", "),
        table.name,
        order.join(", ")
    );
    let mut hasher = Sha256::new();
    let mut rows = 0u64;
    conn.query_all(&sql, super::sql::args![], |row| {
        for i in 0..table.columns.len() {
            hash_cell(&mut hasher, &row.get::<Owned>(i)?);
        }
        rows += 1;
        Ok(())
    })?;
    let digest = hasher.finalize();
    Ok(TableSum {
        table: table.name,
        rows,
        sha256: hex::encode(digest),
    })
}

/// A cell, canonically: a type tag, then the value (integers and reals as 8 big-endian
/// bytes, text and bytes with their length first), the same on both engines.
fn hash_cell(hasher: &mut Sha256, cell: &Owned) {
    match cell {
        Owned::Null => hasher.update(b"N"),
        Owned::Int(i) => {
            hasher.update(b"I");
            hasher.update(i.to_be_bytes());
        }
        Owned::Real(r) => {
            hasher.update(b"R");
            hasher.update(r.to_bits().to_be_bytes());
        }
        Owned::Text(t) => {
            hasher.update(b"T");
            hasher.update((t.len() as u64).to_be_bytes());
            hasher.update(t.as_bytes());
        }
        Owned::Blob(b) => {
            hasher.update(b"B");
            hasher.update((b.len() as u64).to_be_bytes());
            hasher.update(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::store::sql::args;
    use crate::store::testing::{Scratch, stores};

    /// A fresh SQLite store (the source of every copy here).
    fn sqlite_source() -> Scratch {
        stores().swap_remove(0)
    }

    /// A row in every table, with a rectification chain (an invoice voided by a rectifying
    /// invoice, itself voided by a second), a blob, a real and NULLs.
    fn fill(store: &Store) {
        store
            .in_transaction(|tx| {
                tx.batch(
                    "INSERT INTO server_secrets VALUES
                         ('request_state', x'000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1fff', 1700000000);
                     UPDATE plans SET hourly_call_limit = 777, excluded_tools = '[\"export_invoices\"]'
                         WHERE slug = 'pro';
                     INSERT INTO plans (slug, name, rank) VALUES ('custom', 'Custom', 9);
                     INSERT INTO company VALUES (1, 'Acme SL', 'B12345674', 'custom', 'es', 'ES', 'test', 1700000001);
                     INSERT INTO oauth_clients VALUES ('agentapp', 'Agent app', '$argon2id$v=19$c', '[\"invoices:read\"]', 50, 1700000002, NULL);
                     INSERT INTO credentials (public_id, kind, mode, name, secret_hash, scopes, client_id,
                         expires_at, created_at, revoked_at, last_used_at, read_per_minute,
                         previous_secret_hash, previous_secret_expires_at, guard_channel)
                       VALUES ('Abcdef012', 'api_key', 'live', 'admin', '$argon2id$v=19$a', '[\"*\"]', NULL,
                         NULL, 1700000003, NULL, 1700000100, 30, '$argon2id$v=19$old', 1700009999, 'tool_result'),
                              ('Tok0000001', 'oauth_access', 'live', 'token', 'sha-hash', '[]', 'agentapp',
                         1700090000, 1700000004, NULL, NULL, NULL, NULL, NULL, NULL),
                              ('abc00000x', 'api_key', 'test', 'Ümlaut', '$argon2id$v=19$z', '[]', NULL,
                         NULL, 1700000005, 1700000006, NULL, NULL, NULL, NULL, NULL);
                     INSERT INTO rate_counters VALUES ('cred', 'Abcdef012:read', 1700000040, 3),
                         ('cred', 'Abcdef012:read', 1700000100, 1), ('plan', 'company', 1699999200, 12);
                     INSERT INTO idempotency_keys VALUES
                         ('Abcdef012', 'k-1', 'create_client', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
                          'completed', NULL, '{\"content\":[]}', 1700000010, 1700086410),
                         ('Abcdef012', 'k-2', 'create_client', 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb',
                          'in_flight', 'node-1', NULL, 1700000011, 1700086411);
                     INSERT INTO audit_log (id, at, request_id, credential_id, client_id, tool, outcome,
                         duration_us, transport, calls, source, backend, entry) VALUES
                         (5, 1700000000123, 'r1', 'Abcdef012', NULL, 'search_clients', 'ok', 812, 'stdio', 1, NULL, NULL, NULL),
                         (9, 1700000000456, 'r2', NULL, NULL, 'tools/call', 'invalid_token', 3, 'http', 4, '127.0.0.1', 'crm', 'InvalidToken');
                     INSERT INTO faults VALUES (3, 'search_clients', NULL, 'timeout', 0.25, 2, NULL, 1700000020),
                         (7, 'create_client', 'Abcdef012', 'rate_limited', 1.0, NULL, 30, 1700000021);
                     INSERT INTO clients VALUES ('live', 'cli_1', 'Client One', 'B12345674', 'a@example.com', NULL, 1, 2),
                         ('test', 'cli_1', 'Sandbox One', NULL, NULL, 'Calle 1', 3, 4);
                     INSERT INTO invoice_series VALUES ('live', 'F', 1, '2026-01-10'), ('live', 'R', 2, '2026-01-12');
                     INSERT INTO invoices (book, id, client_id, kind, status, series, number, issue_date,
                         currency, gross_cents, discount_cents, subtotal_cents, vat_cents,
                         withholding_cents, total_cents, paid_cents, rectifies_id, void_reason,
                         created_at, updated_at)
                       VALUES ('live', 'inv_c', 'cli_1', 'full', 'issued', 'F', 'F-000001', '2026-01-10',
                         'EUR', 100, 0, 100, 21, 0, 121, 0, NULL, NULL, 1, 1),
                              ('live', 'inv_b', 'cli_1', 'rectifying', 'issued', 'R', 'R-000001', '2026-01-11',
                         'EUR', -100, 0, -100, -21, 0, -121, 0, 'inv_c', NULL, 2, 2),
                              ('live', 'inv_a', 'cli_1', 'rectifying', 'issued', 'R', 'R-000002', '2026-01-12',
                         'EUR', 100, 0, 100, 21, 0, 121, 0, 'inv_b', NULL, 3, 3),
                              ('live', 'inv_d', 'cli_1', 'full', 'draft', 'F', NULL, NULL,
                         'EUR', 0, 0, 0, 0, 0, 0, 0, NULL, NULL, 4, 4);
                     UPDATE invoices SET status = 'void', void_reason = 'typo', rectified_by_id = 'inv_b'
                         WHERE id = 'inv_c';
                     UPDATE invoices SET status = 'void', void_reason = 'again', rectified_by_id = 'inv_a'
                         WHERE id = 'inv_b';
                     INSERT INTO invoice_lines VALUES ('live', 'inv_c', 1, 'Work', 1, 100, 0, 21, 0, 100, 0, 100, 21, 0, 121),
                         ('live', 'inv_c', 2, 'More', 2, 0, 0, 21, 0, 0, 0, 0, 0, 0, 0);
                     INSERT INTO payments VALUES ('live', 'pay_1', 'inv_a', 5, 'EUR', '2026-01-13', 'transfer', NULL, 5);
                     INSERT INTO outbox VALUES ('live', 'out_1', 'inv_a', 'a@example.com', 'Invoice', 'Hi', 'delivered', 6),
                         ('live', 'out_2', 'inv_a', 'a@example.com', 'Invoice', 'Again', 'pending', 7);
                     INSERT INTO http_sessions VALUES ('5f1c0e9a-session', 'key:Abcdef012', '2025-06-18',
                         '{\"elicitation\":{}}', 'info', 1700000000500, 1700000000900);",
                )
            })
            .expect("fill the source");
    }

    /// The rows [`fill`] leaves in each table, in [`TABLES`] order.
    const FILLED: &[(&str, u64)] = &[
        ("server_secrets", 1),
        ("plans", 5),
        ("company", 1),
        ("oauth_clients", 1),
        ("credentials", 3),
        ("rate_counters", 3),
        ("idempotency_keys", 2),
        ("audit_log", 2),
        ("faults", 2),
        ("clients", 2),
        ("invoice_series", 2),
        ("invoices", 4),
        ("invoice_lines", 2),
        ("payments", 1),
        ("outbox", 2),
        ("http_sessions", 1),
    ];

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_table_list_is_the_sqlite_schema() {
        let scratch = sqlite_source();
        let conn_tables: BTreeSet<String> = scratch
            .store
            .with_conn(|c| {
                c.query_all(
                    "SELECT name FROM sqlite_master WHERE type = 'table' \
                     AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
                    args![],
                    |row| row.get(0),
                )
            })
            .expect("tables")
            .into_iter()
            .collect();
        let listed: BTreeSet<String> = TABLES.iter().map(|t| t.name.to_owned()).collect();
        assert_eq!(conn_tables, listed, "every table is copied, and only those");
        for table in TABLES {
            let columns: Vec<(String, String, i64)> = scratch
                .store
                .with_conn(|c| {
                    c.query_all(
                        "SELECT name, type, pk FROM pragma_table_info(?1) ORDER BY cid",
                        args![table.name],
                        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                    )
                })
                .expect("columns");
            let found: Vec<String> = columns.iter().map(|c| c.0.clone()).collect();
            assert_eq!(found, names(table.columns), "columns of {}", table.name);
            let mut key: Vec<&(String, String, i64)> = columns.iter().filter(|c| c.2 > 0).collect();
            key.sort_by_key(|c| c.2);
            let key: Vec<(String, bool)> =
                key.iter().map(|c| (c.0.clone(), c.1 == "TEXT")).collect();
            let listed: Vec<(String, bool)> = table
                .key
                .iter()
                .map(|k| (k.name.to_owned(), k.text))
                .collect();
            assert_eq!(key, listed, "primary key of {}", table.name);
        }
    }

    #[test]
    fn the_table_list_is_the_postgres_schema() {
        let Some(scratch) = stores().into_iter().nth(1) else {
            eprintln!("TOLLGATE_TEST_POSTGRES is not set: the PostgreSQL schema is not checked");
            return;
        };
        let store = &scratch.store;
        let tables: BTreeSet<String> = store
            .with_conn(|c| {
                c.query_all(
                    "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
                     WHERE table_schema = current_schema() AND table_name <> 'tollgate_schema'",
                    args![],
                    |row| row.get(0),
                )
            })
            .expect("tables")
            .into_iter()
            .collect();
        let listed: BTreeSet<String> = TABLES.iter().map(|t| t.name.to_owned()).collect();
        assert_eq!(tables, listed, "every table is copied, and only those");
        for table in TABLES {
            let columns: Vec<(String, String, bool)> = store
                .with_conn(|c| {
                    c.query_all(
                        "SELECT CAST(column_name AS TEXT), CAST(data_type AS TEXT), \
                         CAST(is_identity AS TEXT) = 'YES' FROM information_schema.columns \
                         WHERE table_schema = current_schema() AND CAST(table_name AS TEXT) = ?1 \
                         ORDER BY ordinal_position",
                        args![table.name],
                        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                    )
                })
                .expect("columns");
            let found: Vec<String> = columns.iter().map(|c| c.0.clone()).collect();
            assert_eq!(found, names(table.columns), "columns of {}", table.name);
            let identity = columns.iter().any(|c| c.0 == "id" && c.2);
            assert_eq!(identity, table.identity, "identity of {}", table.name);
            let key: Vec<String> = store
                .with_conn(|c| {
                    c.query_all(
                        "SELECT CAST(k.column_name AS TEXT) \
                         FROM information_schema.table_constraints t \
                         JOIN information_schema.key_column_usage k \
                           ON k.constraint_name = t.constraint_name \
                          AND k.table_schema = t.table_schema \
                         WHERE t.constraint_type = 'PRIMARY KEY' \
                           AND t.table_schema = current_schema() \
                           AND CAST(t.table_name AS TEXT) = ?1 \
                         ORDER BY k.ordinal_position",
                        args![table.name],
                        |row| row.get(0),
                    )
                })
                .expect("key");
            let listed: Vec<String> = table.key.iter().map(|k| k.name.to_owned()).collect();
            assert_eq!(key, listed, "primary key of {}", table.name);
            for k in table.key {
                let ty = columns.iter().find(|c| c.0 == k.name).map(|c| c.1.as_str());
                assert_eq!(ty == Some("text"), k.text, "{}.{}", table.name, k.name);
            }
        }
    }

    fn rows_of(report: &CopyReport) -> Vec<(&str, u64)> {
        report
            .tables
            .iter()
            .map(|t| (t.table, t.target_rows))
            .collect()
    }

    #[test]
    fn a_copy_carries_every_row_verifies_and_refuses_a_second_without_replace() {
        let source = sqlite_source();
        fill(&source.store);
        // The target is PostgreSQL when a server is configured, and SQLite always.
        for target in stores() {
            let report = copy_installation(&source.store, &target.store, false).expect("copy");
            assert!(report.verified(), "{report:?}");
            assert!(!report.replaced);
            assert_eq!(rows_of(&report), FILLED);
            for check in &report.tables {
                assert_eq!(check.source_rows, check.target_rows, "{}", check.table);
                assert_eq!(check.source_sha256, check.target_sha256, "{}", check.table);
                assert_eq!(check.source_sha256.len(), 64);
            }
            // The next id the target assigns follows the copied ones.
            let next = target
                .store
                .in_transaction(|tx| {
                    tx.insert_returning_id(
                        "INSERT INTO audit_log (at, request_id, tool, outcome, duration_us, \
                         transport) VALUES (1, 'r3', 'x', 'ok', 1, 'stdio')",
                        args![],
                    )
                })
                .expect("an audit row");
            assert_eq!(next, 10);
            let fault = target
                .store
                .in_transaction(|tx| {
                    tx.insert_returning_id(
                        "INSERT INTO faults (tool, code, probability, created_at) \
                         VALUES ('x', 'timeout', 1.0, 1)",
                        args![],
                    )
                })
                .expect("a fault");
            assert_eq!(fault, 8);

            let again = copy_installation(&source.store, &target.store, false)
                .expect_err("the target holds an installation");
            let mut held: Vec<(&str, u64)> = FILLED
                .iter()
                .copied()
                .filter(|(t, _)| *t != "plans")
                .collect();
            for (table, rows) in &mut held {
                if *table == "audit_log" || *table == "faults" {
                    *rows += 1;
                }
            }
            assert!(
                matches!(&again, CopyError::TargetNotEmpty(tables) if *tables == held),
                "{again:?}"
            );
            assert!(again.to_string().starts_with(
                "the target already holds an installation (server_secrets: 1, company: 1, "
            ));

            let replaced = copy_installation(&source.store, &target.store, true).expect("replace");
            assert!(replaced.verified(), "{replaced:?}");
            assert!(replaced.replaced);
            assert_eq!(rows_of(&replaced), FILLED);
            assert_eq!(replaced.tables, report.tables);
        }
    }

    #[test]
    fn a_changed_cell_changes_only_its_tables_checksum() {
        let scratch = sqlite_source();
        fill(&scratch.store);
        let before = scratch.store.with_conn(checksums).expect("checksums");
        scratch
            .store
            .in_transaction(|tx| {
                tx.execute(
                    "UPDATE rate_counters SET count = 4 WHERE window_start = 1700000040",
                    args![],
                )
            })
            .expect("change a counter");
        let after = scratch.store.with_conn(checksums).expect("checksums");
        let changed: Vec<&str> = before
            .iter()
            .zip(&after)
            .filter(|(b, a)| b != a)
            .map(|(b, _)| b.table)
            .collect();
        assert_eq!(changed, ["rate_counters"]);
        assert_eq!(after[5].rows, 3);
        // An integer and the same digits as text are different cells.
        let mut int = Sha256::new();
        hash_cell(&mut int, &Owned::Int(1));
        let mut txt = Sha256::new();
        hash_cell(&mut txt, &Owned::Text("1".to_owned()));
        assert_ne!(int.finalize(), txt.finalize());
    }

    #[test]
    fn a_failed_copy_leaves_the_target_as_it_was() {
        let source = sqlite_source();
        fill(&source.store);
        // A payment of an invoice that does not exist, written with the checks off: the
        // target refuses it, after every earlier table was already inserted.
        let path = source.store.path().expect("an SQLite source").to_path_buf();
        let raw = rusqlite::Connection::open(&path).expect("raw open");
        raw.execute_batch(
            "PRAGMA foreign_keys = OFF;
             INSERT INTO payments VALUES ('live', 'pay_9', 'inv_gone', 5, 'EUR', '2026-01-13',
                 'cash', NULL, 9);",
        )
        .expect("a dangling payment");
        drop(raw);
        for target in stores() {
            let err = copy_installation(&source.store, &target.store, false)
                .expect_err("the dangling payment is refused");
            assert!(matches!(err, CopyError::Store(_)), "{err:?}");
            let held = target.store.with_conn(tables_with_rows).expect("counts");
            assert_eq!(held, [], "nothing was committed");
            let plans: Vec<String> = target
                .store
                .with_conn(|c| {
                    c.query_all("SELECT slug FROM plans ORDER BY rank", args![], |r| {
                        r.get(0)
                    })
                })
                .expect("plans");
            assert_eq!(plans, ["free", "starter", "pro", "enterprise"]);
        }
    }
}
