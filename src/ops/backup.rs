//! Backups and restores of the one SQLite file that holds all of tollgate's state.
//!
//! `tollgate backup <file>` takes a consistent online copy while servers keep writing
//! (`VACUUM INTO` reads one snapshot; see [`Store::backup_to`]). The copy is made in a
//! private staging directory beside the target, opened and put through
//! `PRAGMA integrity_check`, made `0600`, and only then published under its final name
//! with a hard link, so the target is never half-written and never overwrites a file.
//!
//! `tollgate restore <backup>` checks a backup the same way on a scratch copy (which also
//! refuses a file whose schema is not exactly that of a tollgate database of its version,
//! table by table, column by column, and index, trigger and view by their definition,
//! brings an older schema up to date and refuses one newer than this binary), refuses to
//! replace an existing database without `--force` or while a process has it open, then
//! removes the target's stale `-wal`, `-shm` and `-journal` files and renames the checked
//! copy over the target: the database is either the old one or the restored one.

use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;

use crate::config::Config;
use crate::store::{Store, StoreError, StoreOptions};

/// How long the restore's in-use probe waits for another process's lock.
const IN_USE_PROBE_TIMEOUT: Duration = Duration::from_millis(200);

/// `tollgate backup <file>`.
#[derive(Debug, Args)]
pub struct BackupArgs {
    /// Where to write the copy; must not exist yet (backups never overwrite).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Print machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

/// `tollgate restore <backup>`.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// A file written by `tollgate backup`.
    #[arg(value_name = "BACKUP")]
    pub backup: PathBuf,
    /// Replace an existing database (stop every tollgate process using it first).
    #[arg(long)]
    pub force: bool,
    /// Print machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

/// Why a backup or a restore did not happen. `Display` is for the operator.
#[derive(Debug)]
pub enum BackupError {
    /// The backup target already exists.
    TargetExists(PathBuf),
    /// The database to restore over exists and `--force` was not given.
    DatabaseExists(PathBuf),
    /// Another process has the database open.
    InUse(PathBuf),
    /// The file is not a usable tollgate database.
    Invalid {
        /// The file that was checked.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// `PRAGMA integrity_check` found problems.
    Corrupt {
        /// The file that was checked.
        path: PathBuf,
        /// The problems, one per line.
        problems: String,
    },
    /// The source database could not be read.
    Store(StoreError),
    /// A file-system step failed.
    Io {
        /// What was being done, naming the file.
        action: String,
        /// The cause.
        source: io::Error,
    },
}

impl BackupError {
    fn io(action: impl Into<String>) -> impl FnOnce(io::Error) -> BackupError {
        let action = action.into();
        move |source| BackupError::Io { action, source }
    }
}

impl fmt::Display for BackupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TargetExists(path) => write!(
                f,
                "backup target {} already exists; backups never overwrite: choose a new file name",
                path.display()
            ),
            Self::DatabaseExists(path) => write!(
                f,
                "database {} exists; stop the service and pass --force to replace it with the backup",
                path.display()
            ),
            Self::InUse(path) => write!(
                f,
                "database {} is in use by another process; stop it first \
                 (e.g. `systemctl stop tollgate`) and run the restore again",
                path.display()
            ),
            Self::Invalid { path, reason } => {
                write!(
                    f,
                    "{} is not a usable tollgate database: {reason}",
                    path.display()
                )
            }
            Self::Corrupt { path, problems } => write!(
                f,
                "{} failed PRAGMA integrity_check:\n{problems}",
                path.display()
            ),
            Self::Store(e) => write!(f, "cannot read the database: {e}"),
            Self::Io { action, source } => write!(f, "cannot {action}: {source}"),
        }
    }
}

impl std::error::Error for BackupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Store(e) => Some(e),
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// What a finished backup wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    /// The backup file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its schema version (`PRAGMA user_version`).
    pub schema_version: u32,
    /// `PRAGMA integrity_check` of the copy (always `"ok"` in a report).
    pub integrity_check: String,
}

/// What a finished restore put in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// The backup that was restored.
    pub backup: PathBuf,
    /// The database file it replaced or created.
    pub database: PathBuf,
    /// Schema version written in the backup.
    pub backup_schema_version: u32,
    /// Schema version of the restored database (higher when the restore migrated it).
    pub schema_version: u32,
    /// `PRAGMA integrity_check` of the restored copy (always `"ok"` in a report).
    pub integrity_check: String,
    /// An existing database was replaced.
    pub replaced: bool,
}

/// Handler of `tollgate backup`.
pub fn backup(store: &Store, args: &BackupArgs) -> ExitCode {
    if store.path().is_none() {
        eprintln!(
            "tollgate: backup copies an SQLite file; this installation's state is in \
             PostgreSQL ({}). Back it up with the server's own tools: `pg_dump --format=custom \
             --file=tollgate.dump <database>` (restore with `pg_restore`), or continuous \
             archiving with a standby.",
            store.location()
        );
        return ExitCode::from(crate::ops::exit::EXIT_REFUSED);
    }
    match write_backup(store, &args.file) {
        Ok(report) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "path": report.path,
                        "bytes": report.bytes,
                        "schema_version": report.schema_version,
                        "integrity_check": report.integrity_check,
                    })
                );
            } else {
                println!(
                    "backup written to {}: {} bytes, schema version {}, integrity_check {}",
                    report.path.display(),
                    report.bytes,
                    report.schema_version,
                    report.integrity_check
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(&format!("backup failed: {e}")),
    }
}

/// Handler of `tollgate restore`: restores over the configured database.
pub fn restore(config: &Config, args: &RestoreArgs) -> ExitCode {
    let Some(database) = config.database.file() else {
        eprintln!(
            "tollgate: restore replaces an SQLite file; this installation's state is in \
             PostgreSQL ({}). Restore a `pg_dump` with `pg_restore`, or move an SQLite backup \
             into it with `tollgate store copy --from <backup.db> --to <database>`.",
            config.database
        );
        return ExitCode::from(crate::ops::exit::EXIT_REFUSED);
    };
    match restore_backup(&args.backup, database, args.force) {
        Ok(report) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "backup": report.backup,
                        "database": report.database,
                        "backup_schema_version": report.backup_schema_version,
                        "schema_version": report.schema_version,
                        "integrity_check": report.integrity_check,
                        "replaced": report.replaced,
                    })
                );
            } else {
                println!(
                    "restored {} to {} (schema version {}, integrity_check {}); \
                     start the service again",
                    report.backup.display(),
                    report.database.display(),
                    report.schema_version,
                    report.integrity_check
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(&format!("restore failed: {e}")),
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("tollgate: {message}");
    ExitCode::FAILURE
}

/// Writes a checked copy of `store` to `dest`, which must not exist.
pub fn write_backup(store: &Store, dest: &Path) -> Result<BackupReport, BackupError> {
    if dest.symlink_metadata().is_ok() {
        return Err(BackupError::TargetExists(dest.to_path_buf()));
    }
    let staging = Staging::create(parent_of(dest))?;
    let copy = staging.path.join("backup.db");
    store.backup_to(&copy).map_err(BackupError::Store)?;
    let (schema_version, integrity_check) = verify(&copy)?;
    seal(&copy)?;
    publish_new(&copy, dest)?;
    sync_dir(parent_of(dest));
    let bytes = fs::metadata(dest)
        .map_err(BackupError::io(format!("read {}", dest.display())))?
        .len();
    Ok(BackupReport {
        path: dest.to_path_buf(),
        bytes,
        schema_version,
        integrity_check,
    })
}

/// Replaces (with `force`) or creates `target` from `backup` after checking the backup.
pub fn restore_backup(
    backup: &Path,
    target: &Path,
    force: bool,
) -> Result<RestoreReport, BackupError> {
    let backup_schema_version = header_user_version(backup)?;
    let replaced = target.symlink_metadata().is_ok();
    if replaced && !force {
        return Err(BackupError::DatabaseExists(target.to_path_buf()));
    }
    let dir = parent_of(target);
    fs::create_dir_all(dir).map_err(BackupError::io(format!("create {}", dir.display())))?;
    let staging = Staging::create(dir)?;
    let copy = staging.path.join("restore.db");
    fs::copy(backup, &copy).map_err(BackupError::io(format!("copy {}", backup.display())))?;
    // The copy keeps the backup's mode; a read-only backup must still open read-write.
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o600))
        .map_err(BackupError::io(format!("protect {}", copy.display())))?;
    let (schema_version, integrity_check) = verify(&copy).map_err(|e| renamed(e, backup))?;
    if replaced {
        ensure_not_in_use(target)?;
    }
    give_to_owner_of(&copy, if replaced { target } else { dir })?;
    seal(&copy)?;
    remove_sidecars(target)?;
    fs::rename(&copy, target).map_err(BackupError::io(format!(
        "move the restored copy to {}",
        target.display()
    )))?;
    sync_dir(dir);
    Ok(RestoreReport {
        backup: backup.to_path_buf(),
        database: target.to_path_buf(),
        backup_schema_version,
        schema_version,
        integrity_check,
        replaced,
    })
}

/// Errors about the scratch copy are reported against the file the operator named.
fn renamed(error: BackupError, path: &Path) -> BackupError {
    match error {
        BackupError::Invalid { reason, .. } => BackupError::Invalid {
            path: path.to_path_buf(),
            reason,
        },
        BackupError::Corrupt { problems, .. } => BackupError::Corrupt {
            path: path.to_path_buf(),
            problems,
        },
        other => other,
    }
}

/// Opens a copy (migrating it forward if older), returns its schema version and
/// `PRAGMA integrity_check`, which must be `ok`.
fn verify(copy: &Path) -> Result<(u32, String), BackupError> {
    let opts = StoreOptions {
        pool_size: 1,
        ..StoreOptions::default()
    };
    let invalid = |reason: String| BackupError::Invalid {
        path: copy.to_path_buf(),
        reason,
    };
    let store = Store::open(copy, &opts).map_err(|e| match e {
        StoreError::Missing(_) => invalid("it is empty or was never initialised".to_owned()),
        StoreError::Foreign(reason) => invalid(reason),
        other => invalid(other.to_string()),
    })?;
    let version = store.schema_version().map_err(|e| invalid(e.to_string()))?;
    let integrity = store
        .integrity_check()
        .map_err(|e| invalid(e.to_string()))?;
    drop(store);
    if integrity != "ok" {
        return Err(BackupError::Corrupt {
            path: copy.to_path_buf(),
            problems: integrity,
        });
    }
    Ok((version, integrity))
}

/// The schema version recorded in an SQLite file's header, read without opening it.
fn header_user_version(path: &Path) -> Result<u32, BackupError> {
    crate::store::backup::header_user_version(path)
        .map_err(BackupError::io(format!("read {}", path.display())))?
        .ok_or_else(|| BackupError::Invalid {
            path: path.to_path_buf(),
            reason: "it is not an SQLite database".to_owned(),
        })
}

/// Refuses when another connection holds the database: taking the exclusive file lock
/// fails while any process has it open in WAL mode (each such connection keeps a shared
/// lock). A target too damaged to open is not in use by a healthy server; it is replaced.
fn ensure_not_in_use(target: &Path) -> Result<(), BackupError> {
    let opts = StoreOptions {
        busy_timeout: IN_USE_PROBE_TIMEOUT,
        pool_size: 1,
        create: false,
    };
    let store = match Store::open(target, &opts) {
        Ok(store) => store,
        Err(StoreError::Busy) => return Err(BackupError::InUse(target.to_path_buf())),
        Err(e) => {
            tracing::warn!(cause = %e, "the database being replaced does not open; replacing it");
            return Ok(());
        }
    };
    match store.probe_exclusive() {
        Ok(()) => Ok(()),
        Err(StoreError::Busy) => Err(BackupError::InUse(target.to_path_buf())),
        Err(e) => Err(BackupError::Store(e)),
    }
}

/// Gives `file` the owner and group of `model` (the database it replaces, or its
/// directory), so that a restore run as root leaves a file the service user can open.
fn give_to_owner_of(file: &Path, model: &Path) -> Result<(), BackupError> {
    let want = fs::metadata(model).map_err(BackupError::io(format!("read {}", model.display())))?;
    let have = fs::metadata(file).map_err(BackupError::io(format!("read {}", file.display())))?;
    if (want.uid(), want.gid()) == (have.uid(), have.gid()) {
        return Ok(());
    }
    std::os::unix::fs::chown(file, Some(want.uid()), Some(want.gid())).map_err(BackupError::io(
        format!(
            "give the restored file to uid {} gid {} (run the restore as that user or as root)",
            want.uid(),
            want.gid()
        ),
    ))
}

/// Makes a finished copy private (`0600`) and durable before it gets its final name.
fn seal(file: &Path) -> Result<(), BackupError> {
    fs::set_permissions(file, fs::Permissions::from_mode(0o600))
        .map_err(BackupError::io(format!("protect {}", file.display())))?;
    fs::File::open(file)
        .and_then(|f| f.sync_all())
        .map_err(BackupError::io(format!("flush {}", file.display())))
}

/// Gives `copy` the name `dest` without ever replacing an existing file.
fn publish_new(copy: &Path, dest: &Path) -> Result<(), BackupError> {
    match fs::hard_link(copy, dest) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            Err(BackupError::TargetExists(dest.to_path_buf()))
        }
        // File systems without hard links: a rename, after checking the name is still free.
        Err(_) if dest.symlink_metadata().is_err() => {
            fs::rename(copy, dest).map_err(BackupError::io(format!("write {}", dest.display())))
        }
        Err(e) => Err(BackupError::io(format!("write {}", dest.display()))(e)),
    }
}

/// Deletes the `-wal`, `-shm` and `-journal` files of `db`: left beside a restored file,
/// SQLite would replay them into it.
fn remove_sidecars(db: &Path) -> Result<(), BackupError> {
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        let path = PathBuf::from(name);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(BackupError::io(format!("remove {}", path.display()))(e)),
        }
    }
    Ok(())
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Best effort: a rename or link is durable once its directory is flushed.
fn sync_dir(dir: &Path) {
    if let Err(e) = fs::File::open(dir).and_then(|d| d.sync_all()) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot flush the directory");
    }
}

/// A private (`0700`) scratch directory beside the final file, removed on drop: copies
/// are made there so that nobody else can read them and a failure leaves nothing behind.
struct Staging {
    path: PathBuf,
}

impl Staging {
    fn create(dir: &Path) -> Result<Staging, BackupError> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = dir.join(format!(".tollgate-staging-{}-{nanos}", std::process::id()));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(BackupError::io(format!(
                "create a scratch directory in {}",
                dir.display()
            )))?;
        Ok(Staging { path })
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Company;

    fn creating() -> StoreOptions {
        StoreOptions {
            create: true,
            ..StoreOptions::default()
        }
    }

    fn company(name: &str) -> Company {
        Company {
            name: name.into(),
            tax_id: None,
            plan_slug: "pro".into(),
            locale: "en".into(),
            country: "ES".into(),
        }
    }

    fn fresh(dir: &Path, name: &str) -> (PathBuf, Store) {
        let path = dir.join(name);
        let store = Store::open(&path, &creating()).expect("open");
        store.set_company(&company("Before SL")).expect("company");
        (path, store)
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn backup_is_private_checked_and_never_overwrites() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_db, store) = fresh(dir.path(), "live.db");
        let dest = dir.path().join("out").join("copy.db");
        fs::create_dir(dir.path().join("out")).expect("mkdir");
        let report = write_backup(&store, &dest).expect("backup");
        assert_eq!(report.schema_version, crate::store::SCHEMA_VERSION);
        assert_eq!(report.integrity_check, "ok");
        assert_eq!(report.bytes, fs::metadata(&dest).expect("meta").len());
        let mode = fs::metadata(&dest).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(entries(&dir.path().join("out")), vec!["copy.db".to_owned()]);
        let err = write_backup(&store, &dest).expect_err("exists");
        assert!(
            matches!(&err, BackupError::TargetExists(p) if p == &dest),
            "{err:?}"
        );
        assert!(err.to_string().contains("already exists"), "{err}");
    }

    #[test]
    fn restore_replaces_only_with_force_and_drops_stale_sidecars() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (db, store) = fresh(dir.path(), "live.db");
        let backup = dir.path().join("b.db");
        write_backup(&store, &backup).expect("backup");
        store.set_company(&company("After SL")).expect("change");
        drop(store);
        let err = restore_backup(&backup, &db, false).expect_err("no force");
        assert!(matches!(err, BackupError::DatabaseExists(_)), "{err:?}");
        fs::write(dir.path().join("live.db-wal"), b"stale").expect("stale wal");
        let report = restore_backup(&backup, &db, true).expect("restore");
        assert!(report.replaced);
        assert_eq!(report.integrity_check, "ok");
        assert!(!dir.path().join("live.db-wal").exists());
        let store = Store::open(&db, &StoreOptions::default()).expect("reopen");
        let name = store.company().expect("company").map(|c| c.name);
        assert_eq!(name.as_deref(), Some("Before SL"));
    }

    #[test]
    fn restore_refuses_a_database_in_use() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (db, store) = fresh(dir.path(), "live.db");
        let backup = dir.path().join("b.db");
        write_backup(&store, &backup).expect("backup");
        let err = restore_backup(&backup, &db, true).expect_err("in use");
        assert!(matches!(&err, BackupError::InUse(p) if p == &db), "{err:?}");
        drop(store);
        restore_backup(&backup, &db, true).expect("restore once closed");
    }

    #[test]
    fn restore_rejects_files_that_are_not_databases() {
        let dir = tempfile::tempdir().expect("tempdir");
        let junk = dir.path().join("junk.db");
        fs::write(&junk, b"not a database at all").expect("write");
        let target = dir.path().join("new.db");
        let err = restore_backup(&junk, &target, false).expect_err("junk");
        assert!(
            matches!(&err, BackupError::Invalid { path, .. } if path == &junk),
            "{err:?}"
        );
        assert!(!target.exists());
        assert_eq!(entries(dir.path()), vec!["junk.db".to_owned()]);
    }

    #[test]
    fn restore_refuses_a_backup_from_a_newer_tollgate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_db, store) = fresh(dir.path(), "live.db");
        let backup = dir.path().join("b.db");
        write_backup(&store, &backup).expect("backup");
        let mut bytes = fs::read(&backup).expect("read");
        bytes[crate::store::backup::USER_VERSION_OFFSET
            ..crate::store::backup::USER_VERSION_OFFSET + 4]
            .copy_from_slice(&99u32.to_be_bytes());
        fs::write(&backup, bytes).expect("write");
        let target = dir.path().join("new.db");
        let err = restore_backup(&backup, &target, false).expect_err("too new");
        assert!(
            err.to_string()
                .contains("newer than this tollgate supports"),
            "{err}"
        );
        assert!(!target.exists());
    }
}
