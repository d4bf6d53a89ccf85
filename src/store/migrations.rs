//! The schema and its migrations: `schema.sql` is step 1; each later step runs in its own
//! `BEGIN IMMEDIATE` transaction and bumps `PRAGMA user_version`; a database newer than
//! this binary is refused.
//!
//! Before migrating, an existing file must have exactly the schema its version has: the
//! same tables with the same columns, and the same schema objects (tables, indexes,
//! triggers, views, and SQLite's own `sqlite_autoindex_*`, `sqlite_sequence` and
//! `sqlite_stat*`), each of the same type, on the same table and with the same definition.
//! The expected schema is computed once per version by applying the migration steps to an
//! empty in-memory database. A foreign SQLite file is so refused as [`StoreError::Foreign`]
//! instead of failing later on a missing table, and so is a tollgate file someone altered:
//! a trigger that undoes a revocation, or a view standing in for a table, would otherwise
//! change what tollgate's own statements do.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::SqlResult;
use super::sqlite::{configure_connection, open_flags};
use super::{StoreError, StoreOptions};

/// The schema version this binary writes and understands (`PRAGMA user_version`).
pub const SCHEMA_VERSION: u32 = 13;

/// The whole schema at version 1, applied when a database is created.
const SCHEMA_SQL: &str = include_str!("../../schema.sql");

/// Version 2: the audit log keeps only the index its queries use. Every audit row paid for
/// three secondary indexes; two were never read (by time alone, by tool).
const AUDIT_INDEXES_SQL: &str = "
    DROP INDEX IF EXISTS audit_log_by_at;
    DROP INDEX IF EXISTS audit_log_by_tool;
";

/// Version 3: the business tables hold two books, `live` and `test` (the sandbox of test
/// keys), in a `book` column that leads every key: ids, tax ids, invoice numbers and series
/// are unique per book, and a row can only point at rows of its own book (the foreign keys
/// include the book). Test-book outbox rows are `sandboxed`, never `pending`, so a relay
/// that delivers pending rows cannot send them. The tables are rebuilt (SQLite cannot change
/// a key in place) and every existing row lands in the live book.
const BOOKS_SQL: &str = include_str!("../../migrations/books.sql");

/// Version 4: an audit row can stand for several calls. Refusals of unauthenticated callers
/// are summarised, one row per source and window, with the number of calls it counts and
/// the source they came from (NULL on the rows of single calls).
const AUDIT_SUMMARY_SQL: &str = "
    ALTER TABLE audit_log ADD COLUMN calls INTEGER NOT NULL DEFAULT 1 CHECK (calls >= 1);
    ALTER TABLE audit_log ADD COLUMN source TEXT;
";

/// Version 5: a credential may choose the channel of its guard refusals (`guard_channel`,
/// NULL: follow the `[errors] guard_channel` setting), and a test-mode installation keeps
/// the failures its operator rehearses (`faults`, read only while the company is in test
/// mode; `remaining` NULL fires without end).
const GUARD_CHANNEL_AND_FAULTS_SQL: &str = "
    ALTER TABLE credentials ADD COLUMN guard_channel TEXT
        CHECK (guard_channel IN ('jsonrpc', 'tool_result'));
    CREATE TABLE faults (
        id INTEGER PRIMARY KEY,
        tool TEXT NOT NULL,
        credential_id TEXT,
        code TEXT NOT NULL,
        probability REAL NOT NULL CHECK (probability > 0 AND probability <= 1),
        remaining INTEGER CHECK (remaining IS NULL OR remaining >= 0),
        retry_after INTEGER CHECK (retry_after IS NULL OR retry_after >= 0),
        created_at INTEGER NOT NULL
    );
    CREATE INDEX faults_by_tool ON faults (tool);
";

/// Version 6: the backend a call was forwarded to, on its audit row (`NULL` for the
/// built-in tools).
const AUDIT_BACKEND_SQL: &str = "ALTER TABLE audit_log ADD COLUMN backend TEXT;";

/// Ordered migration steps: (version reached, SQL). Never edit a released step; append one.
const MIGRATIONS: &[(u32, &str)] = &[
    (1, SCHEMA_SQL),
    (2, AUDIT_INDEXES_SQL),
    (3, BOOKS_SQL),
    (4, AUDIT_SUMMARY_SQL),
    (5, GUARD_CHANNEL_AND_FAULTS_SQL),
    (6, AUDIT_BACKEND_SQL),
    (7, super::sessions::SQLITE_SCHEMA_STEP),
    (8, super::audit::SQLITE_ENTRY_STEP),
    (9, super::users::SQLITE_SCHEMA_STEP),
    (10, super::oauth::SQLITE_SCHEMA_STEP),
    (11, super::audit::SQLITE_TRACE_STEP),
    (12, super::pins::SQLITE_SCHEMA_STEP),
    (13, super::approvals::SQLITE_SCHEMA_STEP),
];

// The last step must reach SCHEMA_VERSION, or a fresh database would be refused or stale.
const _: () = assert!(MIGRATIONS[MIGRATIONS.len() - 1].0 == SCHEMA_VERSION);

/// Checks the file's version, sets the PRAGMAs and runs pending migrations.
pub(super) fn prepare_file(path: &Path, opts: &StoreOptions) -> Result<(), StoreError> {
    let mut conn = Connection::open_with_flags(path, open_flags(opts.create)).or_store()?;
    conn.busy_timeout(opts.busy_timeout).or_store()?;
    // The version and the tables are read in one snapshot: a process creating the file
    // at the same moment commits both at once.
    conn.execute_batch("BEGIN").or_store()?;
    let found = user_version(&conn)?;
    let shape = refuse_too_new(found).and_then(|()| schema_shape(&conn));
    conn.execute_batch("COMMIT").or_store()?;
    let shape = shape?;
    if found == 0
        && let Some(object) = shape.objects.values().next()
    {
        return Err(StoreError::Foreign(format!(
            "it holds schema objects ({}) but no tollgate schema version",
            object.describe()
        )));
    }
    if found == 0 && !opts.create {
        return Err(StoreError::Missing(path.display().to_string()));
    }
    if found > 0 {
        check_shape(&shape, found)?;
    }
    configure_connection(&conn, opts.busy_timeout).or_store()?;
    migrate(&mut conn)
}

/// A table's columns as `PRAGMA table_info` describes them: name, declared type,
/// NOT NULL, default, primary-key position.
type Columns = Vec<(String, String, bool, Option<String>, i64)>;

/// One schema object as `sqlite_master` records it: its type (`table`, `index`, `trigger`,
/// `view`), its name, the table it belongs to, and its SQL normalised ([`normalise_sql`];
/// `None` for the indexes SQLite makes itself for a table's `UNIQUE` and `PRIMARY KEY`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct SchemaObject {
    kind: String,
    name: String,
    table: String,
    sql: Option<String>,
}

impl SchemaObject {
    /// `trigger "x" on table "t"`, or `table "t"` for a table (for refusal messages).
    fn describe(&self) -> String {
        if self.kind == "table" || self.table == self.name {
            format!("{} {:?}", self.kind, self.name)
        } else {
            format!("{} {:?} on table {:?}", self.kind, self.name, self.table)
        }
    }
}

/// What the shape check compares: every table (SQLite's own excepted) with its columns,
/// and every schema object by type and name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    tables: BTreeMap<String, Columns>,
    objects: BTreeMap<(String, String), SchemaObject>,
}

/// The shape of the database on `conn`.
fn schema_shape(conn: &Connection) -> Result<Shape, StoreError> {
    let mut tables = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
    ).or_store()?;
    let names = tables
        .query_map([], |row| row.get::<_, String>(0))
        .or_store()?
        .collect::<Result<Vec<_>, _>>()
        .or_store()?;
    let mut columns = conn.prepare(
        "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1) ORDER BY cid",
    ).or_store()?;
    let mut shape = BTreeMap::new();
    for name in names {
        let list = columns
            .query_map([&name], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            })
            .or_store()?
            .collect::<Result<Columns, _>>()
            .or_store()?;
        shape.insert(name, list);
    }
    Ok(Shape {
        tables: shape,
        objects: schema_objects(conn)?,
    })
}

/// Every row of `sqlite_master`, keyed by type and name.
fn schema_objects(
    conn: &Connection,
) -> Result<BTreeMap<(String, String), SchemaObject>, StoreError> {
    let mut stmt = conn
        .prepare("SELECT type, name, tbl_name, sql FROM sqlite_master")
        .or_store()?;
    let objects = stmt
        .query_map([], |row| {
            // SQLite's names ignore ASCII case: "Keep" and "keep" are one object.
            Ok(SchemaObject {
                kind: row.get(0)?,
                name: row.get::<_, String>(1)?.to_ascii_lowercase(),
                table: row.get::<_, String>(2)?.to_ascii_lowercase(),
                sql: row
                    .get::<_, Option<String>>(3)?
                    .as_deref()
                    .map(normalise_sql),
            })
        })
        .or_store()?
        .collect::<Result<Vec<_>, _>>()
        .or_store()?;
    Ok(objects
        .into_iter()
        .map(|o| ((o.kind.clone(), o.name.clone()), o))
        .collect())
}

/// `sql` without what does not change its meaning: comments, the letter case outside
/// string literals (SQLite's keywords and names ignore it), quotes around a plain name
/// (`"clients"`, `[clients]`, `` `clients` ``), and the layout (a run of white space is one
/// space between two words, none beside punctuation). String literals stay as written.
pub(super) fn normalise_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let wordy = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || "_'\"$".contains(c));
    let mut chars = sql.chars().peekable();
    let mut gap = false;
    while let Some(c) = chars.next() {
        let token = match c {
            c if c.is_whitespace() => {
                gap = true;
                continue;
            }
            '-' if chars.peek() == Some(&'-') => {
                chars.by_ref().find(|&c| c == '\n');
                gap = true;
                continue;
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut star = false;
                for c in chars.by_ref() {
                    if star && c == '/' {
                        break;
                    }
                    star = c == '*';
                }
                gap = true;
                continue;
            }
            '\'' => {
                let mut literal = String::from('\'');
                literal.extend(chars.by_ref().take_while(|&c| c != '\''));
                literal.push('\'');
                literal
            }
            '"' | '`' | '[' => {
                let close = if c == '[' { ']' } else { c };
                let name: String = chars.by_ref().take_while(|&c| c != close).collect();
                let name = name.to_ascii_lowercase();
                let plain = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if plain { name } else { format!("\"{name}\"") }
            }
            c => c.to_ascii_lowercase().to_string(),
        };
        if gap && wordy(out.chars().next_back()) && wordy(token.chars().next()) {
            out.push(' ');
        }
        gap = false;
        out.push_str(&token);
    }
    out
}

/// The shapes computed so far, by schema version (each is the same for the life of the
/// process, and every open of a file compares against one).
static EXPECTED: LazyLock<Mutex<BTreeMap<u32, Arc<Shape>>>> =
    LazyLock::new(|| Mutex::new(BTreeMap::new()));

/// The shape a tollgate database of `version` has: the migration steps up to it, applied
/// to an empty in-memory database (once per version and process).
fn expected_shape(version: u32) -> Result<Arc<Shape>, StoreError> {
    if let Some(shape) = EXPECTED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&version)
    {
        return Ok(Arc::clone(shape));
    }
    let conn = Connection::open_in_memory().or_store()?;
    // As in `migrate`: a step that rebuilds a table needs foreign keys off.
    conn.pragma_update(None, "foreign_keys", "OFF").or_store()?;
    for &(step, sql) in MIGRATIONS.iter().filter(|(step, _)| *step <= version) {
        conn.execute_batch(sql).or_store()?;
        conn.pragma_update(None, "user_version", step).or_store()?;
    }
    let shape = Arc::new(schema_shape(&conn)?);
    EXPECTED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(version, Arc::clone(&shape));
    Ok(shape)
}

/// Refuses a file whose schema is not exactly that of `version`: an object the version
/// does not have, a table or column missing or changed, an object missing or defined
/// otherwise.
fn check_shape(found: &Shape, version: u32) -> Result<(), StoreError> {
    let expected = expected_shape(version)?;
    let foreign = |reason: String| Err(StoreError::Foreign(reason));
    if let Some(extra) = found
        .objects
        .iter()
        .find(|(key, _)| !expected.objects.contains_key(*key))
        .map(|(_, object)| object)
    {
        return foreign(format!(
            "{} is not part of a tollgate database of schema version {version}: the file was \
             altered, or is not tollgate's",
            extra.describe()
        ));
    }
    for (table, columns) in &expected.tables {
        match found.tables.get(table) {
            None => {
                return foreign(format!(
                    "table {table:?} of schema version {version} is missing"
                ));
            }
            Some(have) if have != columns => {
                let names = |c: &Columns| c.iter().map(|c| c.0.clone()).collect::<Vec<_>>();
                return foreign(format!(
                    "table {table:?} has columns {:?}; schema version {version} has {:?}",
                    names(have),
                    names(columns)
                ));
            }
            Some(_) => {}
        }
    }
    for (key, object) in &expected.objects {
        match found.objects.get(key) {
            None => {
                return foreign(format!(
                    "{} of schema version {version} is missing",
                    object.describe()
                ));
            }
            Some(have) if have != object => {
                return foreign(format!(
                    "{} is not defined as in schema version {version}: the file was altered",
                    have.describe()
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

pub(super) fn user_version(conn: &Connection) -> Result<u32, StoreError> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
        .or_store()
}

fn refuse_too_new(found: u32) -> Result<(), StoreError> {
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Applies every migration step above the file's version, each in its own transaction.
/// Foreign keys are off while they run (a step that rebuilds a table drops the old one,
/// which with foreign keys on would delete, or cascade to, the rows pointing at it) and
/// each step checks them before it commits.
fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    conn.pragma_update(None, "foreign_keys", "OFF").or_store()?;
    let applied = MIGRATIONS
        .iter()
        .try_for_each(|&(version, sql)| apply_step(conn, version, sql));
    conn.pragma_update(None, "foreign_keys", "ON").or_store()?;
    applied?;
    refuse_too_new(user_version(conn)?)
}

/// Fails when a row points at a row that does not exist (after a step, before its commit).
fn check_foreign_keys(conn: &Connection) -> Result<(), StoreError> {
    let broken: Option<String> = conn
        .prepare("PRAGMA foreign_key_check")
        .or_store()?
        .query_row([], |row| row.get(0))
        .optional()
        .or_store()?;
    match broken {
        None => Ok(()),
        Some(table) => Err(StoreError::Sqlite(super::SqliteError(
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY),
                Some(format!(
                    "a migration left broken references in table {table}"
                )),
            ),
        ))),
    }
}

/// One step under `BEGIN IMMEDIATE`. The version is re-read inside the transaction, so
/// two processes opening a fresh file at once apply each step exactly once.
fn apply_step(conn: &mut Connection, version: u32, sql: &str) -> Result<(), StoreError> {
    if user_version(conn)? >= version {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .or_store()?;
    if user_version(&tx)? >= version {
        return Ok(());
    }
    tx.execute_batch(sql).or_store()?;
    check_foreign_keys(&tx)?;
    tx.pragma_update(None, "user_version", version).or_store()?;
    tx.commit().or_store()?;
    tracing::info!(version, "applied database migration");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{creating, fresh, pragma_text};
    use crate::store::{Store, StoreOptions};

    #[test]
    fn a_version_1_database_is_brought_up_to_date() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("v1.db");
        let conn = Connection::open(&path).expect("raw open");
        conn.execute_batch(SCHEMA_SQL)
            .expect("the version 1 schema");
        conn.pragma_update(None, "user_version", 1)
            .expect("version 1");
        drop(conn);
        let store = Store::open(&path, &StoreOptions::default()).expect("open and migrate");
        assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
        let audit_indexes: Vec<String> = store
            .raw_read(|c| {
                let mut stmt = c
                    .prepare(
                        "SELECT name FROM sqlite_master WHERE type = 'index' \
                     AND tbl_name = 'audit_log' ORDER BY name",
                    )
                    .or_store()?;
                let names = stmt
                    .query_map([], |r| r.get(0))
                    .or_store()?
                    .collect::<Result<_, _>>()
                    .or_store()?;
                Ok(names)
            })
            .expect("indexes");
        assert_eq!(audit_indexes, ["audit_log_by_credential"]);
        drop(store);
        // The migrated file has exactly the schema a fresh one of its version has.
        Store::open(&path, &StoreOptions::default()).expect("a migrated file is tollgate's");
    }

    #[test]
    fn audit_rows_written_before_version_8_read_without_an_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("v7.db");
        let conn = Connection::open(&path).expect("raw open");
        conn.pragma_update(None, "foreign_keys", "OFF")
            .expect("as migrate runs");
        for &(step, sql) in MIGRATIONS.iter().filter(|(step, _)| *step <= 7) {
            conn.execute_batch(sql).expect("a step");
            conn.pragma_update(None, "user_version", step)
                .expect("its version");
        }
        conn.execute_batch(
            "INSERT INTO audit_log (at, request_id, tool, outcome, duration_us, transport, backend)
             VALUES (1000, '1', 'crm_get_order', 'rate_limited', 5, 'http', 'crm');",
        )
        .expect("a row of version 7");
        drop(conn);
        let store = Store::open(&path, &StoreOptions::default()).expect("open and migrate");
        assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
        let rows = store
            .audit_rows(&crate::store::audit::AuditFilter {
                limit: 10,
                ..Default::default()
            })
            .expect("rows");
        let read: Vec<_> = rows
            .iter()
            .map(|r| (r.outcome.as_str(), r.backend.as_deref(), r.entry))
            .collect();
        assert_eq!(read, [("rate_limited", Some("crm"), None)]);
        drop(store);
        Store::open(&path, &StoreOptions::default()).expect("a migrated file is tollgate's");
    }

    /// A database at version 2 with a little of everything in the business tables.
    fn version_2_with_business_rows(path: &Path) {
        let conn = Connection::open(path).expect("raw open");
        conn.execute_batch(SCHEMA_SQL).expect("version 1");
        conn.execute_batch(AUDIT_INDEXES_SQL).expect("version 2");
        conn.execute_batch(
            "BEGIN; PRAGMA defer_foreign_keys = ON;
             INSERT INTO clients VALUES ('cli_1', 'Acme SL', 'B12345674', 'a@example.com',
                 NULL, 1, 1);
             INSERT INTO invoice_series VALUES ('F', 1, '2026-01-10'), ('R', 1, '2026-01-11');
             INSERT INTO invoices (id, client_id, kind, status, series, number, issue_date,
                 due_date, currency, gross_cents, discount_cents, subtotal_cents, vat_cents,
                 withholding_cents, total_cents, paid_cents, rectified_by_id, void_reason,
                 created_at, updated_at)
               VALUES ('inv_1', 'cli_1', 'full', 'void', 'F', 'F-000001', '2026-01-10',
                 '2026-02-10', 'EUR', 100, 0, 100, 21, 0, 121, 0, 'inv_2', 'typo', 1, 1);
             INSERT INTO invoices (id, client_id, kind, status, series, number, issue_date,
                 currency, gross_cents, discount_cents, subtotal_cents, vat_cents,
                 withholding_cents, total_cents, rectifies_id, created_at, updated_at)
               VALUES ('inv_2', 'cli_1', 'rectifying', 'issued', 'R', 'R-000001',
                 '2026-01-11', 'EUR', -100, 0, -100, -21, 0, -121, 'inv_1', 1, 1);
             INSERT INTO invoice_lines VALUES ('inv_1', 1, 'Work', 1, 100, 0, 21, 0, 100, 0,
                 100, 21, 0, 121);
             INSERT INTO payments VALUES ('pay_1', 'inv_2', 5, 'EUR', '2026-01-12',
                 'transfer', NULL, 1);
             INSERT INTO outbox VALUES ('out_1', 'inv_1', 'a@example.com', 'Invoice', 'Hi',
                 'delivered', 1);
             COMMIT;",
        )
        .expect("business rows");
        conn.pragma_update(None, "user_version", 2)
            .expect("version 2");
    }

    #[test]
    fn a_version_2_database_keeps_its_business_rows_in_the_live_book() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("v2.db");
        version_2_with_business_rows(&path);
        let store = Store::open(&path, &StoreOptions::default()).expect("open and migrate");
        assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
        let books: Vec<(String, String, i64)> = store
            .raw_read(|c| {
                let mut stmt = c
                    .prepare(
                        "SELECT 'clients', book, count(*) FROM clients GROUP BY book
                     UNION ALL SELECT 'invoice_series', book, count(*) FROM invoice_series
                         GROUP BY book
                     UNION ALL SELECT 'invoices', book, count(*) FROM invoices GROUP BY book
                     UNION ALL SELECT 'invoice_lines', book, count(*) FROM invoice_lines
                         GROUP BY book
                     UNION ALL SELECT 'payments', book, count(*) FROM payments GROUP BY book
                     UNION ALL SELECT 'outbox', book, count(*) FROM outbox GROUP BY book",
                    )
                    .or_store()?;
                let rows = stmt
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .or_store()?;
                rows.collect::<Result<_, _>>().or_store()
            })
            .expect("books");
        let expect = [
            ("clients", 1),
            ("invoice_series", 2),
            ("invoices", 2),
            ("invoice_lines", 1),
            ("payments", 1),
            ("outbox", 1),
        ];
        let expect: Vec<(String, String, i64)> = expect
            .iter()
            .map(|(t, n)| ((*t).to_owned(), "live".to_owned(), *n))
            .collect();
        assert_eq!(books, expect);
        // The same tax id and invoice number may now exist once per book, not twice in one.
        store
            .raw_write(|tx| {
                tx.execute_batch(
                    "INSERT INTO clients VALUES ('test', 'cli_1', 'Acme SL', 'B12345674',
                         NULL, NULL, 1, 1);",
                )
                .or_store()?;
                Ok(())
            })
            .expect("same id and tax id in the test book");
        let twice = store.raw_write(|tx| {
            tx.execute_batch(
                "INSERT INTO clients VALUES ('live', 'cli_9', 'Other', 'B12345674', NULL,
                     NULL, 1, 1);",
            )
            .or_store()?;
            Ok(())
        });
        assert!(matches!(twice, Err(StoreError::Sqlite(_))), "{twice:?}");
        // A row cannot point at a row of the other book.
        let across = store.raw_write(|tx| {
            tx.execute_batch(
                "INSERT INTO payments VALUES ('test', 'pay_2', 'inv_2', 5, 'EUR',
                     '2026-01-12', 'cash', NULL, 1);",
            )
            .or_store()?;
            Ok(())
        });
        assert!(matches!(across, Err(StoreError::Sqlite(_))), "{across:?}");
        let indexes: Vec<String> = store
            .raw_read(|c| {
                let mut stmt = c
                    .prepare(
                        "SELECT sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL
                     AND tbl_name IN ('invoices', 'payments', 'outbox') ORDER BY name",
                    )
                    .or_store()?;
                let rows = stmt.query_map([], |r| r.get(0)).or_store()?;
                rows.collect::<Result<_, _>>().or_store()
            })
            .expect("indexes");
        assert_eq!(indexes.len(), 5, "{indexes:?}");
        assert!(
            indexes.iter().all(|sql| sql.contains("(book, ")),
            "{indexes:?}"
        );
        assert_eq!(pragma_text(&store, "foreign_keys"), "1");
        drop(store);
        Store::open(&path, &StoreOptions::default()).expect("a migrated file is tollgate's");
    }

    #[test]
    fn newer_database_is_refused() {
        let (_dir, path, store) = fresh();
        drop(store);
        let conn = Connection::open(&path).expect("raw open");
        conn.pragma_update(None, "user_version", 99).expect("bump");
        drop(conn);
        let err = Store::open(&path, &StoreOptions::default()).expect_err("too new");
        assert!(
            matches!(
                err,
                StoreError::TooNew {
                    found: 99,
                    supported: SCHEMA_VERSION
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "database schema version 99 is newer than this tollgate supports \
                 ({SCHEMA_VERSION}); upgrade tollgate or restore a backup"
            )
        );
        assert!(!err.is_transient());
    }

    #[test]
    fn a_foreign_database_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("foreign.db");
        let conn = Connection::open(&path).expect("raw open");
        conn.execute_batch("CREATE TABLE foo(x); PRAGMA user_version = 2;")
            .expect("a foreign file");
        drop(conn);
        for create in [false, true] {
            let opts = StoreOptions {
                create,
                ..StoreOptions::default()
            };
            let err = Store::open(&path, &opts).expect_err("foreign");
            assert!(
                matches!(&err, StoreError::Foreign(r) if r.contains("\"foo\" is not part")),
                "{err:?}"
            );
            assert!(!err.is_transient());
        }
        let conn = Connection::open(&path).expect("raw open");
        let tables: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .expect("count");
        assert_eq!(tables, 1, "nothing was migrated into the foreign file");
        assert_eq!(user_version(&conn).expect("version"), 2);
    }

    /// Runs `sql` on the file at `path` with plain SQLite, then opens it with the store.
    fn altered(path: &Path, sql: &str) -> Result<Store, StoreError> {
        let conn = Connection::open(path).expect("raw open");
        conn.execute_batch(sql).expect("alter the file");
        drop(conn);
        Store::open(path, &StoreOptions::default())
    }

    fn refusal(outcome: Result<Store, StoreError>) -> String {
        match outcome {
            Err(StoreError::Foreign(reason)) => reason,
            other => panic!("expected a foreign database, got {other:?}"),
        }
    }

    #[test]
    fn normalising_drops_layout_case_quotes_and_comments_but_keeps_literals() {
        let written = "CREATE  INDEX \"Faults_By_Tool\"\n  ON [faults] ( tool ) -- why\n \
                       WHERE code <> 'Mixed  Case' /* note */";
        assert_eq!(
            normalise_sql(written),
            "create index faults_by_tool on faults(tool)where code<>'Mixed  Case'"
        );
        assert_eq!(
            normalise_sql("x IN ('it''s', \"a b\")"),
            "x in('it''s',\"a b\")"
        );
        assert_ne!(
            normalise_sql("CHECK (a IS NULL)"),
            normalise_sql("CHECK (a IS NOT NULL)")
        );
    }

    #[test]
    fn the_expected_shape_is_computed_once_per_version() {
        let first = expected_shape(SCHEMA_VERSION).expect("shape");
        let again = expected_shape(SCHEMA_VERSION).expect("shape");
        assert!(Arc::ptr_eq(&first, &again));
        let trigger = ("trigger".to_owned(), "keep_alive".to_owned());
        assert!(!first.objects.contains_key(&trigger));
        let autoindex = ("index".to_owned(), "sqlite_autoindex_plans_1".to_owned());
        assert_eq!(
            first
                .objects
                .get(&autoindex)
                .map(|o| (o.table.as_str(), o.sql.is_none())),
            Some(("plans", true)),
            "SQLite's own indexes are compared too"
        );
    }

    #[test]
    fn a_trigger_or_a_view_is_refused_by_type_and_name() {
        let (_dir, path, store) = fresh();
        drop(store);
        let reason = refusal(altered(
            &path,
            "CREATE TRIGGER keep_alive AFTER UPDATE OF revoked_at ON credentials
             BEGIN UPDATE credentials SET revoked_at = NULL WHERE public_id = new.public_id; END;",
        ));
        assert_eq!(
            reason,
            format!(
                "trigger \"keep_alive\" on table \"credentials\" is not part of a tollgate \
                 database of schema version {SCHEMA_VERSION}: the file was altered, or is not \
                 tollgate's"
            )
        );
        let reason = refusal(altered(
            &path,
            "DROP TRIGGER keep_alive; CREATE VIEW active_keys AS SELECT public_id FROM credentials;",
        ));
        assert!(
            reason.starts_with("view \"active_keys\" is not part of a tollgate database"),
            "{reason}"
        );
        altered(&path, "DROP VIEW active_keys;").expect("the file as tollgate left it");
    }

    #[test]
    fn an_index_with_the_right_name_but_another_definition_is_refused() {
        let (_dir, path, store) = fresh();
        drop(store);
        let reason = refusal(altered(
            &path,
            "DROP INDEX credentials_active_keys;
             CREATE INDEX credentials_active_keys ON credentials (expires_at);",
        ));
        assert_eq!(
            reason,
            format!(
                "index \"credentials_active_keys\" on table \"credentials\" is not defined as \
                 in schema version {SCHEMA_VERSION}: the file was altered"
            )
        );
        let reason = refusal(altered(
            &path,
            "DROP INDEX credentials_active_keys;
             CREATE INDEX credentials_active_keys ON audit_log (at);",
        ));
        assert!(
            reason.contains("on table \"audit_log\" is not defined as"),
            "{reason}"
        );
        let reason = refusal(altered(&path, "DROP INDEX credentials_active_keys;"));
        assert!(
            reason.starts_with(
                "index \"credentials_active_keys\" on table \"credentials\" of \
                 schema version"
            ),
            "{reason}"
        );
        // The same definition written in another layout, case and quoting is tollgate's.
        altered(
            &path,
            "CREATE INDEX \"Credentials_Active_Keys\"  ON [credentials] ( expires_at )
                 WHERE kind = 'api_key'  AND revoked_at IS NULL;",
        )
        .expect("the same index");
    }

    #[test]
    fn sqlite_internal_tables_the_migrations_do_not_make_are_refused() {
        let (_dir, path, store) = fresh();
        drop(store);
        let reason = refusal(altered(&path, "ANALYZE;"));
        assert!(
            reason.starts_with("table \"sqlite_stat1\" is not part of a tollgate database"),
            "{reason}"
        );
        let reason = refusal(altered(
            &path,
            "DROP TABLE sqlite_stat1; CREATE TABLE counter (id INTEGER PRIMARY KEY AUTOINCREMENT);",
        ));
        assert!(
            reason.contains("is not part of a tollgate database"),
            "{reason}"
        );
    }

    #[test]
    fn a_missing_table_or_column_is_foreign_and_version_0_with_tables_too() {
        let (_dir, path, store) = fresh();
        drop(store);
        let conn = Connection::open(&path).expect("raw open");
        conn.execute_batch("ALTER TABLE audit_log DROP COLUMN source;")
            .expect("drop a column");
        drop(conn);
        let err = Store::open(&path, &StoreOptions::default()).expect_err("changed");
        assert!(
            err.to_string().contains("table \"audit_log\" has columns"),
            "{err}"
        );
        let conn = Connection::open(&path).expect("raw open");
        conn.execute_batch("DROP TABLE audit_log;")
            .expect("drop a table");
        drop(conn);
        let err = Store::open(&path, &StoreOptions::default()).expect_err("missing");
        assert!(
            err.to_string().contains(&format!(
                "\"audit_log\" of schema version {SCHEMA_VERSION} is missing"
            )),
            "{err}"
        );

        let dir = tempfile::tempdir().expect("tempdir");
        let other = dir.path().join("other.db");
        Connection::open(&other)
            .and_then(|c| c.execute_batch("CREATE TABLE foo(x);"))
            .expect("a foreign file without a version");
        let err = Store::open(&other, &creating()).expect_err("foreign");
        assert!(matches!(err, StoreError::Foreign(_)), "{err:?}");
    }
}
