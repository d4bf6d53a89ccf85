//! The SQLite engine's side of opening the store: the file created `0600` and its
//! permissions kept private, the open flags, the PRAGMAs every pooled connection gets, and
//! the pool. (Its schema steps and the shape check are in `migrations.rs`, its copies and
//! integrity check in `backup.rs`.)

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};

use super::{STATEMENT_CACHE_CAPACITY, SqlResult, StoreError, StoreOptions};

pub(super) fn create_parent_dir(path: &Path) -> Result<(), StoreError> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.exists() => std::fs::create_dir_all(dir)
            .map_err(|e| {
                StoreError::Io(std::io::Error::new(
                    e.kind(),
                    format!("cannot create directory {}: {e}", dir.display()),
                ))
            }),
        _ => Ok(()),
    }
}

/// Creates the database file `0600` (whatever the umask) before SQLite opens it; SQLite
/// then gives the `-wal` and `-shm` files the same mode. An existing file is left alone.
pub(super) fn create_private_file(path: &Path) -> Result<(), StoreError> {
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    let io = |e: std::io::Error| {
        StoreError::Io(std::io::Error::new(
            e.kind(),
            format!("cannot create {}: {e}", path.display()),
        ))
    };
    match created {
        // The umask may have taken bits away: set the mode itself.
        Ok(file) => file
            .set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io(e)),
    }
}

/// The database file and its `-wal` and `-shm`, as paths.
pub(super) fn database_files(path: &Path) -> [PathBuf; 3] {
    let with = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [path.to_path_buf(), with("-wal"), with("-shm")]
}

/// Makes the database files `0600` when group or others may read them (an older tollgate
/// created them `0644`): they hold credential hashes and the request-state key. A file
/// this process may not change is only warned about.
pub(super) fn tighten_permissions(path: &Path) {
    for file in database_files(path) {
        let Ok(meta) = std::fs::metadata(&file) else {
            continue;
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 == 0 {
            continue;
        }
        match std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)) {
            Ok(()) => tracing::warn!(
                file = %file.display(), was = format!("{mode:o}"),
                "the database file was readable by other users; its mode is now 600"
            ),
            Err(e) => tracing::warn!(
                file = %file.display(), mode = format!("{mode:o}"), error = %e,
                "the database file is readable by other users; run `chmod 600` on it"
            ),
        }
    }
}

/// How often opening retries after a lock-upgrade deadlock, and how long it pauses.
pub(super) const OPEN_RETRIES: u32 = 50;
pub(super) const OPEN_RETRY_PAUSE: Duration = Duration::from_millis(20);

pub(super) fn open_flags(create: bool) -> OpenFlags {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags | OpenFlags::SQLITE_OPEN_CREATE
    } else {
        flags
    }
}

/// How often a server's background thread checkpoints a WAL that is being written.
pub const CHECKPOINT_EVERY: Duration = Duration::from_millis(50);
/// How often it looks at a WAL nothing has been written to.
pub const CHECKPOINT_IDLE: Duration = Duration::from_secs(2);

/// The PRAGMAs every connection gets once, when the pool opens it. `busy_timeout` comes
/// first so that switching a new file to WAL waits for a concurrent opener.
pub(super) fn configure_connection(
    conn: &Connection,
    busy_timeout: Duration,
) -> rusqlite::Result<()> {
    conn.busy_timeout(busy_timeout)?;
    let mode: String =
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(journal_mode = %mode, "SQLite refused WAL mode; concurrency will suffer");
    }
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    Ok(())
}

pub(super) fn build_pool(
    path: &Path,
    opts: &StoreOptions,
) -> Result<r2d2::Pool<SqliteConnectionManager>, StoreError> {
    let busy_timeout = opts.busy_timeout;
    let manager = SqliteConnectionManager::file(path)
        .with_flags(open_flags(false))
        .with_init(move |conn| configure_connection(conn, busy_timeout));
    let pool = r2d2::Pool::builder()
        .max_size(opts.pool_size.max(1))
        .connection_timeout(busy_timeout.max(Duration::from_secs(1)))
        .error_handler(Box::new(TracingErrorHandler))
        .build(manager)
        .or_store()?;
    Ok(pool)
}

/// Reports pool connection failures through `tracing` (r2d2's default uses `log`).
#[derive(Debug)]
struct TracingErrorHandler;

impl r2d2::HandleError<rusqlite::Error> for TracingErrorHandler {
    fn handle_error(&self, error: rusqlite::Error) {
        tracing::warn!(%error, "could not open a pooled database connection");
    }
}
