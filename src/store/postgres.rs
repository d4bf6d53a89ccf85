//! The store on a PostgreSQL server, for a company that runs several nodes.
//!
//! Every node opens the same database. What SQLite gets from being one file, this module
//! gets from the server:
//!
//! - **One writer at a time.** A write transaction first takes one transaction-scoped
//!   advisory lock ([`WRITE_LOCK`]), as `BEGIN IMMEDIATE` takes the file's write lock, so
//!   the read-then-write steps of a charge, an idempotency claim or an invoice number are
//!   exactly as atomic across nodes as they are across processes on one file. Reads take
//!   no lock and run in parallel on every node.
//! - **Migrations once.** The schema is created or upgraded under a session-level
//!   advisory lock ([`MIGRATION_LOCK`]), so nodes starting together do not race, and its
//!   version lives in `tollgate_schema`; a database newer than this binary is refused.
//! - **Bounded waits.** Every connection sets `lock_timeout` and `statement_timeout` to the
//!   store's busy timeout: a statement that cannot finish in time is answered as busy,
//!   never left hanging.
//! - **A server that goes away** (restarted, failed over) fails the calls of that moment
//!   as [`StoreError::Unavailable`], which the catalog answers as `backend_unavailable`
//!   (retryable); the pool drops the broken connections and opens new ones on the next
//!   call, so the node recovers by itself.
//!
//! The statements themselves are the table modules', shared with SQLite (`sql.rs`); each
//! pooled connection keeps the statements it has prepared.

use std::collections::HashMap;
use std::time::Duration;

use postgres::error::SqlState;
use postgres::{Client, NoTls, Statement};

use super::sql::to_postgres;
use super::{StoreError, StoreOptions};
use crate::config::PostgresUrl;

/// The advisory lock every write transaction takes first (transaction scope).
pub const WRITE_LOCK: i64 = 0x7467_0001;
/// The advisory lock held while the schema is created or migrated (session scope).
pub const MIGRATION_LOCK: i64 = 0x7467_0002;

/// The whole schema at the version PostgreSQL support started from (6).
const BASELINE_SQL: &str = include_str!("../../migrations/postgres.sql");

/// Ordered migration steps on PostgreSQL: (version reached, SQL). The first creates the
/// schema at version 6 in one step (no PostgreSQL database predates it); every later
/// version appends a step here beside its SQLite step.
const MIGRATIONS: &[(u32, &str)] = &[
    (6, BASELINE_SQL),
    (7, super::sessions::POSTGRES_SCHEMA_STEP),
    (8, super::audit::POSTGRES_ENTRY_STEP),
    (9, super::users::POSTGRES_SCHEMA_STEP),
    (10, super::oauth::POSTGRES_SCHEMA_STEP),
    (11, super::audit::POSTGRES_TRACE_STEP),
    (12, super::pins::POSTGRES_SCHEMA_STEP),
    (13, super::approvals::POSTGRES_SCHEMA_STEP),
];

/// One pooled connection and the statements it has prepared.
pub struct PgConn {
    pub(in crate::store) client: Client,
    statements: HashMap<String, Statement>,
}

impl PgConn {
    /// The prepared form of `sql` (SQLite-flavoured text), prepared once per connection.
    pub(in crate::store) fn statement(&mut self, sql: &str) -> Result<Statement, StoreError> {
        self.statement_with(sql, "")
    }

    /// [`PgConn::statement`] of `sql` followed by `suffix` (a PostgreSQL-only clause).
    pub(in crate::store) fn statement_with(
        &mut self,
        sql: &str,
        suffix: &str,
    ) -> Result<Statement, StoreError> {
        // A statement already prepared is found without allocating its key.
        let key: std::borrow::Cow<'_, str> = if suffix.is_empty() {
            sql.into()
        } else {
            format!("{sql}\u{0}{suffix}").into()
        };
        if let Some(stmt) = self.statements.get(key.as_ref()) {
            return Ok(stmt.clone());
        }
        let mut text = to_postgres(sql);
        text.push_str(suffix);
        let stmt = self
            .client
            .prepare(&text)
            .map_err(StoreError::from_postgres)?;
        if self.statements.len() >= super::STATEMENT_CACHE_CAPACITY {
            self.statements.clear();
        }
        self.statements.insert(key.into_owned(), stmt.clone());
        Ok(stmt)
    }
}

/// Opens the pool's connections.
pub struct PgManager {
    config: postgres::Config,
}

impl PgManager {
    fn new(url: &PostgresUrl, opts: &StoreOptions) -> Result<PgManager, StoreError> {
        let mut config: postgres::Config = url.secret_text().parse().map_err(|e| {
            StoreError::Unavailable(format!("not a PostgreSQL connection URL ({url}): {e}"))
        })?;
        let timeout_ms = opts.busy_timeout.as_millis().max(1);
        config.application_name("tollgate");
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(opts.busy_timeout.max(Duration::from_secs(1)));
        }
        config.options(&format!(
            "-c lock_timeout={timeout_ms} -c statement_timeout={timeout_ms} \
             -c idle_in_transaction_session_timeout={} -c TimeZone=UTC",
            timeout_ms.saturating_mul(4)
        ));
        Ok(PgManager { config })
    }

    fn connect(&self) -> Result<PgConn, postgres::Error> {
        let client = self.config.connect(NoTls)?;
        Ok(PgConn {
            client,
            statements: HashMap::new(),
        })
    }
}

impl r2d2::ManageConnection for PgManager {
    type Connection = PgConn;
    type Error = postgres::Error;

    fn connect(&self) -> Result<PgConn, postgres::Error> {
        PgManager::connect(self)
    }

    fn is_valid(&self, conn: &mut PgConn) -> Result<(), postgres::Error> {
        conn.client.simple_query("").map(|_| ())
    }

    fn has_broken(&self, conn: &mut PgConn) -> bool {
        conn.client.is_closed()
    }
}

/// Reports pool connection failures through `tracing`.
#[derive(Debug)]
struct TracingErrorHandler;

impl r2d2::HandleError<postgres::Error> for TracingErrorHandler {
    fn handle_error(&self, error: postgres::Error) {
        tracing::warn!(%error, "could not open a PostgreSQL connection");
    }
}

/// Creates or migrates the schema (under [`MIGRATION_LOCK`]) and builds the pool.
pub(in crate::store) fn open(
    url: &PostgresUrl,
    opts: &StoreOptions,
) -> Result<r2d2::Pool<PgManager>, StoreError> {
    let manager = PgManager::new(url, opts)?;
    let mut setup = manager.connect().map_err(StoreError::from_postgres)?;
    prepare_schema(&mut setup.client, opts.create)?;
    drop(setup);
    r2d2::Pool::builder()
        .max_size(opts.pool_size.max(1))
        .min_idle(Some(1))
        .connection_timeout(opts.busy_timeout.max(Duration::from_secs(1)))
        .test_on_check_out(false)
        .error_handler(Box::new(TracingErrorHandler))
        .build(manager)
        .map_err(|e| StoreError::Unavailable(e.to_string()))
}

/// The version recorded in `tollgate_schema`, `None` when the table does not exist.
pub(in crate::store) fn recorded_version(client: &mut Client) -> Result<Option<u32>, StoreError> {
    let exists: bool = client
        .query_one("SELECT to_regclass('tollgate_schema') IS NOT NULL", &[])
        .and_then(|row| row.try_get(0))
        .map_err(StoreError::from_postgres)?;
    if !exists {
        return Ok(None);
    }
    let version: Option<i64> = client
        .query_opt("SELECT version FROM tollgate_schema", &[])
        .map_err(StoreError::from_postgres)?
        .map(|row| row.try_get(0))
        .transpose()
        .map_err(StoreError::from_postgres)?;
    Ok(Some(
        version.map_or(0, |v| u32::try_from(v).unwrap_or(u32::MAX)),
    ))
}

fn prepare_schema(client: &mut Client, create: bool) -> Result<(), StoreError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .map_err(StoreError::from_postgres)?;
    let outcome = migrate(client, create);
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .map_err(StoreError::from_postgres);
    outcome?;
    unlocked.map(|_| ())
}

fn migrate(client: &mut Client, create: bool) -> Result<(), StoreError> {
    let supported = super::SCHEMA_VERSION;
    let found = match recorded_version(client)? {
        Some(found) => found,
        None => {
            let tables: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = current_schema()",
                    &[],
                )
                .and_then(|row| row.try_get(0))
                .map_err(StoreError::from_postgres)?;
            if tables > 0 {
                return Err(StoreError::Foreign(format!(
                    "the database already holds {tables} table(s) and no tollgate schema; \
                     give tollgate a database of its own"
                )));
            }
            if !create {
                return Err(StoreError::Missing(
                    "the PostgreSQL database has no tollgate schema".into(),
                ));
            }
            0
        }
    };
    if found > supported {
        return Err(StoreError::TooNew { found, supported });
    }
    refuse_foreign_objects(client, found)?;
    for &(version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > found) {
        let mut tx = client.transaction().map_err(StoreError::from_postgres)?;
        tx.batch_execute(sql).map_err(StoreError::from_postgres)?;
        tx.execute(
            "INSERT INTO tollgate_schema (id, version) VALUES (1, $1)
             ON CONFLICT (id) DO UPDATE SET version = excluded.version",
            &[&i64::from(version)],
        )
        .map_err(StoreError::from_postgres)?;
        tx.commit().map_err(StoreError::from_postgres)?;
        tracing::info!(version, "PostgreSQL schema migrated");
    }
    Ok(())
}

/// The objects of tollgate's schema that change what its statements do and that no
/// version of its PostgreSQL schema has: triggers (other than the ones the server makes
/// for foreign keys), views, materialized views, rules and row-level security policies.
const FOREIGN_OBJECTS_SQL: &str = "
    SELECT 'trigger', t.tgname::text, c.relname::text
      FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
     WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal
    UNION ALL
    SELECT CASE c.relkind WHEN 'v' THEN 'view' ELSE 'materialized view' END,
           c.relname::text, c.relname::text
      FROM pg_catalog.pg_class c
     WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('v', 'm')
    UNION ALL
    SELECT 'rule', r.rulename::text, c.relname::text
      FROM pg_catalog.pg_rewrite r JOIN pg_catalog.pg_class c ON c.oid = r.ev_class
     WHERE c.relnamespace = current_schema()::regnamespace AND r.rulename <> '_RETURN'
    UNION ALL
    SELECT 'policy', p.polname::text, c.relname::text
      FROM pg_catalog.pg_policy p JOIN pg_catalog.pg_class c ON c.oid = p.polrelid
     WHERE c.relnamespace = current_schema()::regnamespace
    ORDER BY 1, 2
    LIMIT 1";

/// Refuses a database whose schema holds a trigger, a view, a rule or a policy: none is
/// tollgate's, and each can change what its statements do (undo a revocation, delete
/// audit rows, hide rows).
fn refuse_foreign_objects(client: &mut Client, version: u32) -> Result<(), StoreError> {
    let found = client
        .query_opt(FOREIGN_OBJECTS_SQL, &[])
        .map_err(StoreError::from_postgres)?;
    let Some(row) = found else {
        return Ok(());
    };
    let text = |i: usize| {
        row.try_get::<_, String>(i)
            .map_err(StoreError::from_postgres)
    };
    let (kind, name, table) = (text(0)?, text(1)?, text(2)?);
    let what = if kind.ends_with("view") {
        format!("{kind} {name:?}")
    } else {
        format!("{kind} {name:?} on table {table:?}")
    };
    Err(StoreError::Foreign(format!(
        "{what} is not part of a tollgate database of schema version {version}: the database \
         was altered, or is not tollgate's"
    )))
}

impl StoreError {
    /// Classifies a PostgreSQL failure: the server gone or restarting is
    /// [`StoreError::Unavailable`], a lock or statement past its timeout (or a
    /// serialization failure) [`StoreError::Busy`], a full disk [`StoreError::Full`].
    pub(in crate::store) fn from_postgres(e: postgres::Error) -> Self {
        let text = describe(&e);
        if e.is_closed() {
            return Self::Unavailable(text);
        }
        let Some(code) = e.code() else {
            // No SQLSTATE: the connection itself failed (refused, reset, timed out).
            return if e.as_db_error().is_none() {
                Self::Unavailable(text)
            } else {
                Self::Database(text)
            };
        };
        let code = code.clone();
        if code == SqlState::QUERY_CANCELED
            || code == SqlState::LOCK_NOT_AVAILABLE
            || code == SqlState::T_R_SERIALIZATION_FAILURE
            || code == SqlState::T_R_DEADLOCK_DETECTED
        {
            Self::Busy
        } else if code == SqlState::DISK_FULL {
            Self::Full
        } else if code.code().starts_with("08")
            || code == SqlState::ADMIN_SHUTDOWN
            || code == SqlState::CRASH_SHUTDOWN
            || code == SqlState::CANNOT_CONNECT_NOW
            || code == SqlState::TOO_MANY_CONNECTIONS
            || code == SqlState::READ_ONLY_SQL_TRANSACTION
        {
            // READ_ONLY: a standby promoted away or a primary demoted — a failover.
            Self::Unavailable(text)
        } else {
            Self::Database(text)
        }
    }
}

/// A PostgreSQL error for the operator's log: the server's own message and code when it
/// sent one, else the client's error and its cause.
fn describe(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Database;
    use crate::store::testing::postgres_store;
    use crate::store::{SCHEMA_VERSION, Store, StoreError, StoreOptions};

    /// Runs `sql` on the store's database with a client of its own, then opens it again.
    fn altered(database: &Database, sql: &str) -> Result<Store, StoreError> {
        let Database::Postgres(url) = database else {
            panic!("a PostgreSQL store");
        };
        let mut client =
            ::postgres::Client::connect(url.secret_text(), ::postgres::NoTls).expect("connect");
        client.batch_execute(sql).expect("alter the database");
        drop(client);
        Store::open_database(database, &StoreOptions::default())
    }

    fn refusal(outcome: Result<Store, StoreError>) -> String {
        match outcome {
            Err(StoreError::Foreign(reason)) => reason,
            other => panic!("expected a foreign database, got {other:?}"),
        }
    }

    #[test]
    fn a_trigger_a_view_or_a_rule_in_the_schema_is_refused() {
        let opts = StoreOptions {
            create: true,
            ..StoreOptions::default()
        };
        let Some(scratch) = postgres_store(&opts) else {
            eprintln!(
                "TOLLGATE_TEST_POSTGRES is not set: the PostgreSQL schema check is not tested"
            );
            return;
        };
        let database = scratch.store.location().clone();
        let reason = refusal(altered(
            &database,
            "CREATE FUNCTION keep_alive() RETURNS trigger LANGUAGE plpgsql
                 AS $$ BEGIN NEW.revoked_at := NULL; RETURN NEW; END $$;
             CREATE TRIGGER keep_alive BEFORE UPDATE OF revoked_at ON credentials
                 FOR EACH ROW EXECUTE FUNCTION keep_alive();",
        ));
        assert_eq!(
            reason,
            format!(
                "trigger \"keep_alive\" on table \"credentials\" is not part of a tollgate \
                 database of schema version {SCHEMA_VERSION}: the database was altered, or is \
                 not tollgate's"
            )
        );
        let reason = refusal(altered(
            &database,
            "DROP TRIGGER keep_alive ON credentials;
             CREATE VIEW active_keys AS SELECT public_id FROM credentials;",
        ));
        assert!(
            reason.starts_with("view \"active_keys\" is not part of a tollgate database"),
            "{reason}"
        );
        let reason = refusal(altered(
            &database,
            "DROP VIEW active_keys;
             CREATE RULE keep_audit AS ON DELETE TO audit_log DO INSTEAD NOTHING;",
        ));
        assert!(
            reason.starts_with("rule \"keep_audit\" on table \"audit_log\" is not part"),
            "{reason}"
        );
        altered(&database, "DROP RULE keep_audit ON audit_log;").expect("tollgate's schema again");
    }
}
