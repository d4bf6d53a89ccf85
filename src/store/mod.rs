//! The store: the only layer that opens the database file or holds SQL.
//!
//! This module owns the connection pool (r2d2 over rusqlite), the per-connection PRAGMAs
//! (WAL, `busy_timeout`, `foreign_keys`, `synchronous=NORMAL`) and the ways in:
//! [`Store::with_conn`] on a plain connection and [`Store::in_transaction`] inside a
//! `BEGIN IMMEDIATE` transaction that commits on `Ok` and rolls back on `Err`. What they
//! hand out, [`Conn`] and [`Tx`], are opaque: outside the store they can only be passed to
//! the store's own functions, so SQLite types never leave this folder and a second backend
//! can plug in behind the same surface.
//!
//! One module per group of tables, each table with exactly one writer module:
//! [`migrations`] (the schema, its steps and the shape check), [`plans`] (`plans`,
//! `company`), [`credentials`] (`credentials`, `oauth_clients`), [`counters`]
//! (`rate_counters`), [`idempotency`] (`idempotency_keys`), [`audit`] (`audit_log`),
//! [`faults`] (`faults`, the failures rehearsed on a test-mode installation),
//! [`invoicing`] (the invoicing pack's tables), [`sessions`] (`http_sessions`, the
//! handshake-era HTTP sessions every node shares), [`backup`] (copies and the integrity
//! check); `server_secrets` is written here.
//!
//! The file is created `0600` whatever the umask (it holds argon2 hashes and the key that
//! seals request state); SQLite gives its `-wal` and `-shm` files the same mode. A file, WAL
//! or SHM found readable by group or others is tightened to `0600` with a warning.
//!
//! [`Store::health`] says whether the store can serve: its file still at its path, readable,
//! writable, with room on its file system, and no storage failure left over from the last
//! write (which every write records; a write probe runs only to confirm that one has
//! cleared).
//!
//! An SQLite store remembers the device and inode of the file it opened. Every write
//! transaction first looks (one `stat`) whether the path still names that file: once the
//! file was moved away, deleted or replaced, writes are refused as
//! [`StoreError::Displaced`] (answered `backend_unavailable`) rather than committed into a
//! file nobody will read again, and the health check says why.
//!
//! Errors are [`StoreError`]: a `Display` for the operator (it may name the file) and a
//! [`StoreError::public_message`] safe to send to a client (no paths, no SQL).

pub mod approvals;
pub mod audit;
pub mod backup;
pub mod copy;
pub mod counters;
pub mod credentials;
pub mod faults;
mod health;
pub mod idempotency;
pub mod invoicing;
pub mod migrations;
pub mod oauth;
pub mod pins;
pub mod plans;
pub mod postgres;
pub mod sessions;
pub mod sql;
mod sqlite;
#[cfg(test)]
pub(crate) mod testing;
pub mod users;

use std::cell::RefCell;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, TransactionBehavior};

pub use health::{MIN_FREE_BYTES, Unhealthy};
pub use migrations::SCHEMA_VERSION;
use migrations::{prepare_file, user_version};
pub use plans::{Company, Plan};
pub use sql::Dialect;
pub use sqlite::{CHECKPOINT_EVERY, CHECKPOINT_IDLE};

use health::{LastWrite, OpenedFile, check_room, read_only};
use sqlite::{
    OPEN_RETRIES, OPEN_RETRY_PAUSE, build_pool, create_parent_dir, create_private_file,
    tighten_permissions,
};

use crate::config::Database;
use postgres::{PgConn, PgManager};

/// A connection of the store, in or out of a transaction. Opaque outside the store: it
/// only travels from [`Store::with_conn`] (or a [`Tx`]) to the store's functions, which
/// write their statements once for both engines (`sql.rs`).
pub struct Conn<'c> {
    inner: Inner<'c>,
}

/// The engine's connection behind a [`Conn`].
#[derive(Clone, Copy)]
enum Inner<'c> {
    Sqlite(&'c Connection),
    Postgres(&'c RefCell<&'c mut PgConn>),
}

/// An open write transaction of the store (`BEGIN IMMEDIATE` on SQLite; on PostgreSQL a
/// transaction holding the store's write lock) (what [`Store::in_transaction`]
/// hands out and a tool's commit writes through). It reads like a [`Conn`].
pub struct Tx<'c> {
    conn: Conn<'c>,
}

impl<'c> std::ops::Deref for Tx<'c> {
    type Target = Conn<'c>;

    fn deref(&self) -> &Conn<'c> {
        &self.conn
    }
}

/// An SQLite failure that is none of the classified ones (kept for the operator's log).
#[derive(Debug)]
pub struct SqliteError(rusqlite::Error);

impl fmt::Display for SqliteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Prepared statements kept per connection by `prepare_cached`.
const STATEMENT_CACHE_CAPACITY: usize = 128;

/// Everything that can go wrong in the store.
#[derive(Debug)]
pub enum StoreError {
    /// The database was written by a newer tollgate (its `user_version` is higher).
    TooNew {
        /// The `user_version` found in the file.
        found: u32,
        /// The highest version this binary supports ([`SCHEMA_VERSION`]).
        supported: u32,
    },
    /// There is no (initialised) database there and creation was not requested (the text
    /// says where).
    Missing(String),
    /// The database stayed locked by another writer past the busy timeout.
    Busy,
    /// The disk holding the database is full.
    Full,
    /// Any other SQLite error.
    Sqlite(SqliteError),
    /// Any other PostgreSQL error (the server's message).
    Database(String),
    /// The database server cannot be reached or is restarting (PostgreSQL).
    Unavailable(String),
    /// A stored value the reader does not understand (a damaged row).
    Corrupt(String),
    /// No pooled connection could be obtained in time.
    Pool(String),
    /// A file-system error around the database file (directory creation, backup target).
    Io(std::io::Error),
    /// The caller's closure chose to roll the transaction back; its own outcome says why.
    RolledBack,
    /// What was asked exists only on an SQLite store (the text names it).
    SqliteOnly(&'static str),
    /// The file is an SQLite database, but not tollgate's (or not of the version it claims).
    Foreign(String),
    /// The database file, its directory or its file system is read-only (the text names
    /// the file).
    ReadOnly(String),
    /// The database file is no longer at its path, or another file is: writes are refused.
    Displaced {
        /// The path the store opened.
        path: String,
        /// [`Unhealthy::Moved`] or [`Unhealthy::Replaced`].
        reason: Unhealthy,
    },
}

impl StoreError {
    /// True when retrying later may succeed (locked or full database, exhausted pool).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Busy | Self::Full | Self::Pool(_) | Self::Unavailable(_) | Self::Displaced { .. }
        )
    }

    /// True when the database is not one a command can use as it stands (newer than this
    /// binary, missing, not tollgate's, read-only): the operator has to act, and the
    /// command exits as refused rather than failed.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Self::TooNew { .. } | Self::Missing(_) | Self::Foreign(_) | Self::ReadOnly(_)
        )
    }

    /// What this failure says about the storage under the database, when it says
    /// anything (a lock held by another writer or a rolled-back closure does not).
    pub fn storage_failure(&self) -> Option<Unhealthy> {
        use rusqlite::ErrorCode;
        match self {
            Self::Full => Some(Unhealthy::DiskFull),
            Self::Unavailable(_) => Some(Unhealthy::Unreachable),
            Self::ReadOnly(_) => Some(Unhealthy::ReadOnly),
            Self::Displaced { reason, .. } => Some(*reason),
            Self::Sqlite(SqliteError(e)) => match e.sqlite_error_code() {
                Some(ErrorCode::ReadOnly) => Some(Unhealthy::ReadOnly),
                Some(ErrorCode::SystemIoFailure | ErrorCode::CannotOpen) => {
                    Some(Unhealthy::WriteFailed)
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// A message safe to show to a client: no paths, no SQL, no internal detail.
    pub fn public_message(&self) -> &'static str {
        match self {
            Self::TooNew { .. } => "the database was written by a newer version of tollgate",
            Self::Missing(_) => "the database has not been initialised",
            Self::Busy => "the database is busy; retry shortly",
            Self::Full => "the server's disk is full; retry later",
            Self::Sqlite(_) | Self::Database(_) | Self::Corrupt(_) => "internal database error",
            Self::Unavailable(_) => "the database cannot be reached; retry shortly",
            Self::Pool(_) => "no database connection is available; retry shortly",
            Self::Io(_) => "database storage error",
            Self::RolledBack => "the change was rolled back",
            Self::SqliteOnly(_) => "not available on this store",
            Self::Foreign(_) => "the database is not a tollgate database",
            Self::ReadOnly(_) => "the server cannot write to its database",
            Self::Displaced { .. } => "the server's database file is unavailable; retry later",
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooNew { found, supported } => write!(
                f,
                "database schema version {found} is newer than this tollgate supports \
                 ({supported}); upgrade tollgate or restore a backup"
            ),
            Self::Missing(place) => write!(f, "no database at {place}; run `tollgate init` first"),
            Self::Busy => f.write_str(
                "the database is locked by another writer and stayed locked past the busy timeout",
            ),
            Self::Full => f.write_str("the disk holding the database is full"),
            Self::Sqlite(e) => write!(f, "database error: {e}"),
            Self::Database(e) => write!(f, "database error: {e}"),
            Self::Unavailable(e) => write!(f, "the database server cannot be reached: {e}"),
            Self::Corrupt(what) => write!(f, "database error: a stored row is damaged: {what}"),
            Self::Pool(e) => write!(f, "no database connection available: {e}"),
            Self::Io(e) => write!(f, "database file error: {e}"),
            Self::RolledBack => f.write_str("the transaction was rolled back by its caller"),
            Self::SqliteOnly(what) => write!(
                f,
                "{what} exists only on an SQLite store; this one is PostgreSQL"
            ),
            Self::Foreign(reason) => write!(f, "not a tollgate database: {reason}"),
            Self::ReadOnly(path) => write!(
                f,
                "the database {path} is read-only: tollgate needs to write to it (check the \
                 file's and its directory's permissions, or the file system's mount options)"
            ),
            Self::Displaced { path, reason } => write!(f, "{path}: {reason}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Sqlite(SqliteError(e)) => Some(e),
            Self::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl StoreError {
    /// Classifies an SQLite failure (busy, full, or any other); the store's own modules
    /// convert with it ([`SqlResult::or_store`]), so no SQLite type is part of this error's
    /// public surface.
    fn from_sqlite(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        let Some(sqlite) = e.sqlite_error() else {
            return Self::Sqlite(SqliteError(e));
        };
        match sqlite.code {
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => Self::Busy,
            ErrorCode::DiskFull => Self::Full,
            // Growing the WAL index (-shm) on a full disk fails with this I/O code.
            ErrorCode::SystemIoFailure
                if sqlite.extended_code == rusqlite::ffi::SQLITE_IOERR_SHMSIZE =>
            {
                Self::Full
            }
            _ => Self::Sqlite(SqliteError(e)),
        }
    }
}

/// `?` for the store's SQLite and pool calls: their errors become [`StoreError`]s.
trait SqlResult<T> {
    fn or_store(self) -> Result<T, StoreError>;
}

impl<T> SqlResult<T> for Result<T, rusqlite::Error> {
    fn or_store(self) -> Result<T, StoreError> {
        self.map_err(StoreError::from_sqlite)
    }
}

impl<T> SqlResult<T> for Result<T, r2d2::Error> {
    fn or_store(self) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::Pool(e.to_string()))
    }
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// Maps a storage failure to the catalog, logging the cause (which may name paths or SQL)
/// on the server side only. `in_tool` selects the tool-result entry for failures inside a
/// tool, the JSON-RPC entry for failures in a guard.
pub fn store_failure(err: StoreError, in_tool: bool) -> crate::catalog::McpError {
    if err.is_transient() {
        tracing::warn!(cause = %err, "storage unavailable");
        let kind = if in_tool {
            crate::catalog::ErrorKind::ToolBackendUnavailable
        } else {
            crate::catalog::ErrorKind::BackendUnavailable
        };
        crate::catalog::McpError::new(kind)
    } else {
        tracing::error!(cause = %err, "storage failure");
        crate::catalog::McpError::internal()
    }
}

/// How to open a [`Store`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// How long a statement waits for another writer's lock before failing with `Busy`.
    pub busy_timeout: Duration,
    /// Maximum number of pooled connections (at least 1).
    pub pool_size: u32,
    /// Create the file (and its parent directory) if missing; otherwise a missing or
    /// uninitialised database is [`StoreError::Missing`].
    pub create: bool,
}

impl StoreOptions {
    /// The options of a configuration's `[store]` table; `create` as the command needs.
    pub fn from_config(config: &crate::config::Config, create: bool) -> StoreOptions {
        StoreOptions {
            busy_timeout: config.store.busy_timeout,
            pool_size: config.store.pool_size,
            create,
        }
    }
}

impl Default for StoreOptions {
    /// 5 s busy timeout, 8 connections, no creation.
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(5),
            pool_size: 8,
            create: false,
        }
    }
}

/// A handle on the database: a pool of configured connections to the file (SQLite) or to
/// the server (PostgreSQL). Clones share the pool.
#[derive(Debug, Clone)]
pub struct Store {
    engine: Engine,
    location: Arc<Database>,
    /// The storage failure of the last write, if it failed (shared by clones).
    last_write: Arc<LastWrite>,
    /// The SQLite file as opened (`None` on PostgreSQL).
    opened: Option<Arc<OpenedFile>>,
}

/// The pool of one engine.
#[derive(Clone)]
enum Engine {
    Sqlite(r2d2::Pool<SqliteConnectionManager>),
    Postgres(r2d2::Pool<PgManager>),
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Sqlite(_) => "Engine::Sqlite",
            Self::Postgres(_) => "Engine::Postgres",
        })
    }
}

impl Store {
    /// Opens the configured database: an SQLite file ([`Store::open`]) or a PostgreSQL
    /// database (created or migrated under an advisory lock). Refuses a database newer
    /// than this binary.
    pub fn open_database(database: &Database, opts: &StoreOptions) -> Result<Store, StoreError> {
        match database {
            Database::Sqlite(path) => Store::open(path, opts),
            Database::Postgres(url) => {
                let pool = postgres::open(url, opts)?;
                Ok(Store {
                    engine: Engine::Postgres(pool),
                    location: Arc::new(database.clone()),
                    last_write: Arc::new(LastWrite::default()),
                    opened: None,
                })
            }
        }
    }

    /// Opens (and with `opts.create`, creates) the SQLite database at `path` and brings its
    /// schema up to [`SCHEMA_VERSION`]. Refuses a database newer than this binary, and one
    /// that cannot be opened because it is read-only ([`StoreError::ReadOnly`]).
    pub fn open(path: &Path, opts: &StoreOptions) -> Result<Store, StoreError> {
        Self::open_sqlite(path, opts).map_err(|e| match e.storage_failure() {
            Some(Unhealthy::ReadOnly | Unhealthy::WriteFailed) if read_only(path) => {
                StoreError::ReadOnly(path.display().to_string())
            }
            _ => e,
        })
    }

    fn open_sqlite(path: &Path, opts: &StoreOptions) -> Result<Store, StoreError> {
        if opts.create {
            create_parent_dir(path)?;
            create_private_file(path)?;
        } else if !path.exists() {
            return Err(StoreError::Missing(path.display().to_string()));
        }
        tighten_permissions(path);
        // Two processes creating the same file at once can meet SQLite's lock-upgrade
        // deadlock (an immediate SQLITE_BUSY that no busy timeout waits out) while one
        // switches the file to WAL: starting is rare, so retry it a few times.
        let mut attempts = 0;
        loop {
            match prepare_file(path, opts) {
                Err(StoreError::Busy) if attempts < OPEN_RETRIES => {
                    attempts += 1;
                    std::thread::sleep(OPEN_RETRY_PAUSE);
                }
                other => break other?,
            }
        }
        let pool = build_pool(path, opts)?;
        Ok(Store {
            engine: Engine::Sqlite(pool),
            location: Arc::new(Database::Sqlite(path.to_path_buf())),
            last_write: Arc::new(LastWrite::default()),
            opened: Some(Arc::new(OpenedFile::at(path)?)),
        })
    }

    /// The engine this store runs on.
    pub fn dialect(&self) -> Dialect {
        match self.engine {
            Engine::Sqlite(_) => Dialect::Sqlite,
            Engine::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Where this store lives (for operator messages, never for clients; a PostgreSQL
    /// URL displays without its password).
    pub fn location(&self) -> &Database {
        &self.location
    }

    /// Starts a thread that checkpoints the WAL for as long as the process runs (servers
    /// call this; a PostgreSQL store has no WAL of its own to look after). SQLite otherwise
    /// checkpoints inside whichever commit takes the WAL past 1 000 pages, and that call
    /// waits for the copy and its `fsync`; copied often, the WAL never gets there, and no
    /// call pays for it. The thread looks every [`CHECKPOINT_EVERY`] while the WAL grows
    /// and backs off to [`CHECKPOINT_IDLE`] while nothing is written, so an idle server
    /// stays idle.
    pub fn checkpoint_in_background(&self) {
        let Some(path) = self.path().map(Path::to_path_buf) else {
            return;
        };
        let store = self.clone();
        let spawned = std::thread::Builder::new()
            .name("wal-checkpoint".to_owned())
            .spawn(move || {
                let mut wal = path.into_os_string();
                wal.push("-wal");
                let wal = std::path::PathBuf::from(wal);
                let mut pause = CHECKPOINT_EVERY;
                let mut last_write = None;
                loop {
                    std::thread::sleep(pause);
                    // Every commit writes the WAL file: its modification time says whether
                    // anything was written since the last look.
                    let written = std::fs::metadata(&wal).and_then(|m| m.modified()).ok();
                    if written.is_some() && written == last_write {
                        pause = (pause * 2).min(CHECKPOINT_IDLE);
                        continue;
                    }
                    last_write = written;
                    pause = CHECKPOINT_EVERY;
                    let outcome = store.read_conn(|conn| {
                        conn.query_opt("PRAGMA wal_checkpoint(PASSIVE)", sql::args![], |_| Ok(()))
                            .map(|_| ())
                    });
                    if let Err(e) = outcome
                        && !e.is_transient()
                    {
                        tracing::warn!(cause = %e, "background WAL checkpoint failed");
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(cause = %e, "cannot start the WAL checkpointer; commits will checkpoint");
        }
    }

    /// The SQLite file this store was opened at; `None` on PostgreSQL.
    pub fn path(&self) -> Option<&Path> {
        match &*self.location {
            Database::Sqlite(path) => Some(path),
            Database::Postgres(_) => None,
        }
    }

    /// Runs `f` on a pooled connection outside any explicit transaction.
    pub fn with_conn<T>(
        &self,
        f: impl FnOnce(&Conn<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.read_conn(f)
    }

    /// Runs `f` inside a write transaction (`BEGIN IMMEDIATE` on SQLite; on PostgreSQL a
    /// transaction that first takes the store's write lock, so writers on every node take
    /// turns as they do on one file): commits when `f` returns `Ok`, rolls back when it
    /// returns `Err` (return [`StoreError::RolledBack`] to abort on purpose while keeping
    /// your own error aside).
    pub fn in_transaction<T>(
        &self,
        f: impl FnOnce(&Tx<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.write_tx(f)
    }

    /// The SQLite connection itself, for what only the file has (its PRAGMAs, `VACUUM
    /// INTO`, its integrity check); on PostgreSQL it is [`StoreError::SqliteOnly`].
    pub(in crate::store) fn sqlite_read<T>(
        &self,
        what: &'static str,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.read_conn(|conn| match conn.sqlite() {
            Some(sqlite) => f(sqlite),
            None => Err(StoreError::SqliteOnly(what)),
        })
    }

    /// [`Store::with_conn`], for the store's modules.
    fn read_conn<T>(
        &self,
        f: impl FnOnce(&Conn<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match &self.engine {
            Engine::Sqlite(pool) => {
                let conn = pool.get().or_store()?;
                f(&Conn {
                    inner: Inner::Sqlite(&conn),
                })
            }
            Engine::Postgres(pool) => {
                let mut conn = pool
                    .get()
                    .map_err(|e| StoreError::Unavailable(e.to_string()))?;
                let cell = RefCell::new(&mut *conn);
                f(&Conn {
                    inner: Inner::Postgres(&cell),
                })
            }
        }
    }

    /// [`Store::in_transaction`], for the store's modules.
    fn write_tx<T>(
        &self,
        f: impl FnOnce(&Tx<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let outcome = match &self.engine {
            Engine::Sqlite(pool) => (|| {
                self.refuse_if_displaced()?;
                let mut conn = pool.get().or_store()?;
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .or_store()?;
                let value = f(&Tx {
                    conn: Conn {
                        inner: Inner::Sqlite(&tx),
                    },
                })?;
                tx.commit().or_store()?;
                Ok(value)
            })()
            .map_err(|e| self.read_only_file(e)),
            Engine::Postgres(pool) => (|| {
                let mut conn = pool
                    .get()
                    .map_err(|e| StoreError::Unavailable(e.to_string()))?;
                pg_transaction(&mut conn, f)
            })(),
        };
        self.last_write.observe(&outcome);
        outcome
    }

    /// Whether this store can serve, and its schema version when it can: the file reads,
    /// its file system is writable and has at least [`MIN_FREE_BYTES`] free, and the last
    /// write did not fail for a storage reason — or, when it did, a small write probe in a
    /// transaction of its own now succeeds (so a store recovers as soon as space returns).
    /// Costs no write while writes succeed.
    pub fn health(&self) -> Result<u32, Unhealthy> {
        if let Some(moved) = self.opened.as_deref().and_then(OpenedFile::displaced) {
            return Err(moved);
        }
        let version = self.schema_version().map_err(|e| {
            tracing::warn!(cause = %e, "health check: the database cannot be read");
            if matches!(e, StoreError::Unavailable(_) | StoreError::Pool(_))
                && self.dialect() == Dialect::Postgres
            {
                Unhealthy::Unreachable
            } else {
                Unhealthy::Unreadable
            }
        })?;
        if let Some(path) = self.path() {
            check_room(path)?;
        }
        if let Some(failure) = self.last_write.failure() {
            self.probe_write()
                .map_err(|e| e.storage_failure().unwrap_or(failure))?;
        }
        Ok(version)
    }

    /// Fails unless this store can write now, by writing (a row added and removed in a
    /// transaction of its own): a read-only file, directory or file system is
    /// [`StoreError::ReadOnly`], naming the file. Servers check this before they start.
    pub fn ensure_writable(&self) -> Result<(), StoreError> {
        self.probe_write()
    }

    /// The health check's write: a row of `server_secrets` added and removed.
    fn probe_write(&self) -> Result<(), StoreError> {
        self.write_tx(|tx| {
            tx.execute(
                "INSERT INTO server_secrets (name, value, created_at) \
                 VALUES ('health-probe', ?1, 0) ON CONFLICT (name) DO NOTHING",
                sql::args![[0u8; 32]],
            )?;
            tx.execute(
                "DELETE FROM server_secrets WHERE name = 'health-probe'",
                sql::args![],
            )?;
            Ok(())
        })
    }

    /// [`StoreError::Displaced`] when the SQLite file's path no longer names the file this
    /// store opened (one `stat`, before each write transaction: a commit costs many more
    /// system calls, and none may land in a file nobody reads).
    fn refuse_if_displaced(&self) -> Result<(), StoreError> {
        let Some(opened) = self.opened.as_deref() else {
            return Ok(());
        };
        match opened.displaced() {
            None => Ok(()),
            Some(reason) => Err(StoreError::Displaced {
                path: opened.path().display().to_string(),
                reason,
            }),
        }
    }

    /// A write that SQLite refused as read-only becomes [`StoreError::ReadOnly`], which
    /// names the file and what to check (or [`StoreError::Displaced`] when SQLite saw the
    /// file leave its path).
    fn read_only_file(&self, e: StoreError) -> StoreError {
        let Some(path) = self.path() else {
            return e;
        };
        let StoreError::Sqlite(SqliteError(inner)) = &e else {
            return e;
        };
        match inner.sqlite_error() {
            // SQLite's own finding that the file left its path.
            Some(f) if f.extended_code == rusqlite::ffi::SQLITE_READONLY_DBMOVED => {
                StoreError::Displaced {
                    path: path.display().to_string(),
                    reason: Unhealthy::Moved,
                }
            }
            Some(f) if f.code == rusqlite::ErrorCode::ReadOnly => {
                StoreError::ReadOnly(path.display().to_string())
            }
            _ => e,
        }
    }

    /// The schema version stored in the database (`PRAGMA user_version` of the file, or
    /// the row of `tollgate_schema` on PostgreSQL).
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        self.read_conn(|conn| match conn.inner {
            Inner::Sqlite(sqlite) => user_version(sqlite),
            Inner::Postgres(cell) => {
                Ok(postgres::recorded_version(&mut cell.borrow_mut().client)?.unwrap_or(0))
            }
        })
    }

    /// How far the database server's clock is ahead of this machine's, in milliseconds
    /// (negative when behind), measured at the midpoint of one round trip; `None` on SQLite,
    /// whose file has no clock of its own.
    pub fn clock_offset_millis(&self) -> Result<Option<i64>, StoreError> {
        if self.dialect() == Dialect::Sqlite {
            return Ok(None);
        }
        let local = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        };
        self.read_conn(|conn| {
            let before = local();
            let database: i64 = conn.query_one(
                "SELECT CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS BIGINT)",
                sql::args![],
                |row| row.get(0),
            )?;
            let after = local();
            Ok(Some(database - (before + (after - before) / 2)))
        })
    }

    /// A 32-byte secret of this installation, created on first use (e.g. the key that
    /// signs multi-round `requestState`). Every process on the database gets the same
    /// bytes.
    pub fn server_secret(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        let mut fresh = [0u8; 32];
        getrandom::fill(&mut fresh)
            .map_err(|e| StoreError::Io(std::io::Error::other(e.to_string())))?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.write_tx(|tx| {
            tx.execute(
                "INSERT INTO server_secrets (name, value, created_at) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (name) DO NOTHING",
                sql::args![name, fresh, now],
            )?;
            tx.query_one(
                "SELECT value FROM server_secrets WHERE name = ?1",
                sql::args![name],
                |row| row.get(0),
            )
        })
    }
}

/// One PostgreSQL write transaction: `BEGIN`, the write lock, `f`, then `COMMIT` on `Ok`
/// or `ROLLBACK` on `Err`. A connection whose rollback fails is closed by the server or
/// left broken, and the pool discards it.
fn pg_transaction<T>(
    conn: &mut PgConn,
    f: impl FnOnce(&Tx<'_>) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    conn.client
        .batch_execute("BEGIN")
        .map_err(StoreError::from_postgres)?;
    let outcome = (|| {
        conn.client
            .execute("SELECT pg_advisory_xact_lock($1)", &[&postgres::WRITE_LOCK])
            .map_err(StoreError::from_postgres)?;
        let cell = RefCell::new(&mut *conn);
        let value = f(&Tx {
            conn: Conn {
                inner: Inner::Postgres(&cell),
            },
        })?;
        Ok(value)
    })();
    match outcome {
        Ok(value) => {
            conn.client
                .batch_execute("COMMIT")
                .map_err(StoreError::from_postgres)?;
            Ok(value)
        }
        Err(e) => {
            if let Err(rollback) = conn.client.batch_execute("ROLLBACK") {
                tracing::debug!(cause = %rollback, "rollback failed; the connection is dropped");
            }
            Err(e)
        }
    }
}

/// Raw SQL for the unit tests of other modules (set a row up, look at one); never part of
/// the program.
#[cfg(test)]
impl Store {
    /// A read on the raw SQLite connection, with the store's errors (SQLite stores only).
    pub(in crate::store) fn raw_read<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.sqlite_read("a test's raw SQL", f)
    }

    /// A write transaction on the raw SQLite connection (SQLite stores only).
    pub(in crate::store) fn raw_write<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.write_tx(|tx| f(tx.sqlite().expect("an SQLite store")))
    }

    pub(crate) fn sql_read<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        self.sqlite_read("a test's raw SQL", |conn| f(conn).or_store())
    }

    pub(crate) fn sql_write<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        self.write_tx(|tx| f(tx.sqlite().expect("an SQLite store")).or_store())
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::sqlite::database_files;
    use super::*;

    pub(super) fn creating() -> StoreOptions {
        StoreOptions {
            create: true,
            ..StoreOptions::default()
        }
    }

    pub(super) fn fresh() -> (tempfile::TempDir, PathBuf, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state").join("tollgate.db");
        let store = Store::open(&path, &creating()).expect("open");
        (dir, path, store)
    }

    pub(super) fn pragma_text(store: &Store, name: &str) -> String {
        store
            .raw_read(|c| {
                c.pragma_query_value(None, name, |r| r.get::<_, rusqlite::types::Value>(0))
                    .or_store()
            })
            .map(|v| match v {
                rusqlite::types::Value::Integer(i) => i.to_string(),
                rusqlite::types::Value::Text(t) => t,
                other => format!("{other:?}"),
            })
            .expect("pragma")
    }

    #[test]
    fn creation_sets_version_and_pragmas() {
        let (_dir, path, store) = fresh();
        assert!(path.exists());
        assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
        assert_eq!(pragma_text(&store, "journal_mode"), "wal");
        assert_eq!(pragma_text(&store, "foreign_keys"), "1");
        assert_eq!(pragma_text(&store, "synchronous"), "1");
        assert_eq!(pragma_text(&store, "temp_store"), "2");
        assert_eq!(pragma_text(&store, "busy_timeout"), "5000");
    }

    #[test]
    fn missing_file_without_create_is_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nope.db");
        let err = Store::open(&path, &StoreOptions::default()).expect_err("missing");
        assert!(
            matches!(&err, StoreError::Missing(p) if p == &path),
            "{err:?}"
        );
        assert!(err.to_string().contains("run `tollgate init` first"));
        assert!(!err.public_message().contains("nope.db"));
        assert!(!path.exists(), "must not create the file");
    }

    #[test]
    fn empty_file_without_create_is_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("empty.db");
        std::fs::write(&path, b"").expect("touch");
        let err = Store::open(&path, &StoreOptions::default()).expect_err("uninitialised");
        assert!(matches!(err, StoreError::Missing(_)), "{err:?}");
    }

    #[test]
    fn failed_write_rolls_back() {
        let (_dir, _path, store) = fresh();
        let result: Result<(), StoreError> = store.raw_write(|tx| {
            tx.execute(
                "UPDATE plans SET hourly_call_limit = 1 WHERE slug = 'free'",
                [],
            )
            .or_store()?;
            Err(StoreError::Busy)
        });
        assert!(matches!(result, Err(StoreError::Busy)));
        let aborted: Result<(), StoreError> = store.raw_write(|tx| {
            tx.execute(
                "UPDATE plans SET hourly_call_limit = 2 WHERE slug = 'free'",
                [],
            )
            .or_store()?;
            Err(StoreError::RolledBack)
        });
        assert!(matches!(aborted, Err(StoreError::RolledBack)));
        let free = store.plan("free").expect("read").expect("free");
        assert_eq!(free.hourly_call_limit, Some(500));
    }

    #[test]
    fn locked_database_is_busy_and_transient() {
        let (_dir, path, _store) = fresh();
        let opts = StoreOptions {
            busy_timeout: Duration::from_millis(50),
            ..StoreOptions::default()
        };
        let store = Store::open(&path, &opts).expect("open");
        let holder = Connection::open(&path).expect("raw open");
        holder.execute_batch("BEGIN IMMEDIATE").expect("lock");
        let err = store
            .raw_write(|tx| tx.execute("DELETE FROM rate_counters", []).or_store())
            .expect_err("busy");
        assert!(matches!(err, StoreError::Busy), "{err:?}");
        assert!(err.is_transient());
        holder.execute_batch("ROLLBACK").expect("unlock");
    }

    #[test]
    fn concurrent_creation_migrates_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("race.db");
        let openers: Vec<_> = (0..4)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || Store::open(&path, &creating()).map(|_| ()))
            })
            .collect();
        for opener in openers {
            opener.join().expect("thread").expect("open");
        }
        let store = Store::open(&path, &StoreOptions::default()).expect("open");
        assert_eq!(store.plans().expect("plans").len(), 4);
    }

    #[test]
    fn sqlite_errors_are_classified() {
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        );
        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            None,
        );
        assert!(matches!(StoreError::from_sqlite(busy), StoreError::Busy));
        assert!(matches!(StoreError::from_sqlite(full), StoreError::Full));
        let other = StoreError::from_sqlite(rusqlite::Error::QueryReturnedNoRows);
        assert!(matches!(other, StoreError::Sqlite(_)));
        assert!(!other.is_transient());
    }

    #[test]
    fn the_file_and_its_wal_and_shm_are_private_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, path, store) = fresh();
        store
            .set_company(&Company {
                name: "Acme".into(),
                tax_id: None,
                plan_slug: "pro".into(),
                locale: "en".into(),
                country: "ES".into(),
            })
            .expect("a write, so the WAL exists");
        for file in database_files(&path) {
            let mode = std::fs::metadata(&file)
                .expect("exists")
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(mode, 0o600, "{}", file.display());
        }
        drop(store);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("loosen");
        let _store = Store::open(&path, &StoreOptions::default()).expect("reopen");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "a looser file is tightened");
    }

    /// A write of this test module: a plan's hourly limit.
    fn write(store: &Store, limit: i64) -> Result<usize, StoreError> {
        store.raw_write(|tx| {
            tx.execute(
                "UPDATE plans SET hourly_call_limit = ?1 WHERE slug = 'free'",
                [limit],
            )
            .or_store()
        })
    }

    fn free_limit(path: &Path) -> i64 {
        Connection::open(path)
            .and_then(|c| {
                c.query_row(
                    "SELECT hourly_call_limit FROM plans WHERE slug = 'free'",
                    [],
                    |r| r.get(0),
                )
            })
            .expect("read the file")
    }

    #[test]
    fn a_file_moved_away_is_unhealthy_and_takes_no_write_until_it_is_back() {
        let (dir, path, store) = fresh();
        let away = dir.path().join("away.db");
        std::fs::rename(&path, &away).expect("move the file away");
        assert_eq!(store.health(), Err(Unhealthy::Moved));
        let err = write(&store, 7).expect_err("refused");
        assert!(
            matches!(&err, StoreError::Displaced { path: p, reason: Unhealthy::Moved }
                if p == &path.display().to_string()),
            "{err:?}"
        );
        assert!(err.is_transient(), "answered backend_unavailable");
        assert_eq!(err.storage_failure(), Some(Unhealthy::Moved));
        assert_eq!(
            err.to_string(),
            format!("{}: {}", path.display(), Unhealthy::Moved)
        );
        std::fs::rename(&away, &path).expect("move it back");
        assert_eq!(store.health(), Ok(SCHEMA_VERSION));
        assert_eq!(write(&store, 7).expect("written"), 1);
        drop(store);
        assert_eq!(free_limit(&path), 7);
    }

    #[test]
    fn another_file_put_at_the_path_is_unhealthy_and_gets_no_write() {
        let (dir, path, store) = fresh();
        let (_other_dir, other, other_store) = fresh();
        drop(other_store);
        let staged = dir.path().join("state").join("staged.db");
        std::fs::copy(&other, &staged).expect("copy another database beside it");
        std::fs::rename(&staged, &path).expect("put it in place");
        assert_eq!(store.health(), Err(Unhealthy::Replaced));
        let err = write(&store, 9).expect_err("refused");
        assert!(
            matches!(
                err,
                StoreError::Displaced {
                    reason: Unhealthy::Replaced,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(Unhealthy::Replaced.code(), "database_replaced");
        assert_eq!(Unhealthy::Moved.code(), "database_moved");
        assert_eq!(free_limit(&path), 500, "the file at the path is untouched");
    }

    #[test]
    fn health_is_ok_and_a_recorded_storage_failure_is_probed_away() {
        let (_dir, _path, store) = fresh();
        assert_eq!(store.health(), Ok(SCHEMA_VERSION));
        let failed: Result<(), StoreError> = Err(StoreError::Full);
        store.last_write.observe(&failed);
        assert_eq!(store.last_write.failure(), Some(Unhealthy::DiskFull));
        // A lock or a rollback says nothing about the storage.
        store.last_write.observe::<()>(&Err(StoreError::Busy));
        assert_eq!(store.last_write.failure(), Some(Unhealthy::DiskFull));
        // The disk has room again: the probe write succeeds and clears the failure.
        assert_eq!(store.health(), Ok(SCHEMA_VERSION));
        assert_eq!(store.last_write.failure(), None);
        let secrets: i64 = store
            .raw_read(|c| {
                c.query_row("SELECT count(*) FROM server_secrets", [], |r| r.get(0))
                    .or_store()
            })
            .expect("count");
        assert_eq!(secrets, 0, "the probe leaves nothing behind");
    }
}
