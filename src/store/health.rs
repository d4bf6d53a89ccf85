//! Whether the store can serve: the reasons it cannot (the `reason` of an unhealthy
//! `/healthz`), the storage failure of the last write (kept so that a health check costs no
//! write while writes succeed), the room on the file system under an SQLite file, and
//! whether the file's path still names the file that was opened.

use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

use super::StoreError;

/// Free space below which the store reports itself unhealthy: a large tool call writes
/// a few hundred KiB, and SQLite needs room for WAL frames and checkpoints.
pub const MIN_FREE_BYTES: u64 = 1024 * 1024;

/// Why a store cannot serve (the `reason` of an unhealthy `/healthz`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unhealthy {
    /// The database cannot be read.
    Unreadable,
    /// The database file or its file system is read-only.
    ReadOnly,
    /// The disk is full: less than [`MIN_FREE_BYTES`] free, or a write failed for lack of
    /// space.
    DiskFull,
    /// Writes fail with an I/O error.
    WriteFailed,
    /// The database server cannot be reached (PostgreSQL).
    Unreachable,
    /// The database file is no longer at its path (moved away or deleted) while the store
    /// has it open: what it writes would go into a file nobody will read again.
    Moved,
    /// Another file is at the database's path (renamed or copied over it) while the store
    /// has the original open: what it writes would not reach the file at the path.
    Replaced,
    /// `PRAGMA quick_check` finds the file damaged (`tollgate healthcheck` runs it).
    Corrupt,
}

impl Unhealthy {
    /// Every reason, in order of their codes (1..).
    const ALL: [Unhealthy; 8] = [
        Self::Unreadable,
        Self::ReadOnly,
        Self::DiskFull,
        Self::WriteFailed,
        Self::Unreachable,
        Self::Moved,
        Self::Replaced,
        Self::Corrupt,
    ];

    /// The stable machine word of this reason.
    pub fn code(self) -> &'static str {
        match self {
            Self::Unreadable => "database_unreadable",
            Self::ReadOnly => "database_read_only",
            Self::DiskFull => "disk_full",
            Self::WriteFailed => "write_failed",
            Self::Unreachable => "database_unreachable",
            Self::Moved => "database_moved",
            Self::Replaced => "database_replaced",
            Self::Corrupt => "database_corrupt",
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            Self::Unreadable => 1,
            Self::ReadOnly => 2,
            Self::DiskFull => 3,
            Self::WriteFailed => 4,
            Self::Unreachable => 5,
            Self::Moved => 6,
            Self::Replaced => 7,
            Self::Corrupt => 8,
        }
    }
}

impl fmt::Display for Unhealthy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unreadable => "the database cannot be read",
            Self::ReadOnly => "the database file or its file system is read-only",
            Self::DiskFull => {
                "the disk holding the database is full (less than 1 MiB free, or a write \
                 failed for lack of space)"
            }
            Self::WriteFailed => "writes to the database fail with an I/O error",
            Self::Unreachable => "the database server cannot be reached",
            Self::Moved => {
                "the database file was moved away or deleted while tollgate had it open; \
                 writes are refused, as nobody would read them: restart tollgate on the \
                 database it should use"
            }
            Self::Replaced => {
                "another file was put at the database's path while tollgate had the database \
                 open; writes are refused, as they would not reach that file: restart tollgate"
            }
            Self::Corrupt => {
                "the database file is damaged (PRAGMA quick_check found problems); restore \
                 a backup"
            }
        })
    }
}

/// The storage failure of the last write (0 = none), kept with one atomic per write.
#[derive(Debug, Default)]
pub(super) struct LastWrite(AtomicU8);

impl LastWrite {
    pub(super) fn observe<T>(&self, outcome: &Result<T, StoreError>) {
        let code = match outcome {
            Ok(_) => 0,
            Err(e) => match e.storage_failure() {
                Some(failure) => failure.as_u8(),
                // A busy lock or a caller's rollback says nothing about the storage.
                None => return,
            },
        };
        // Most writes succeed after a success: read first, so they leave the line shared.
        if self.0.load(Ordering::Relaxed) != code {
            self.0.store(code, Ordering::Relaxed);
        }
    }

    pub(super) fn failure(&self) -> Option<Unhealthy> {
        let code = self.0.load(Ordering::Relaxed);
        Unhealthy::ALL.into_iter().find(|u| u.as_u8() == code)
    }
}

/// The file system of `db` is writable and has [`MIN_FREE_BYTES`] free; the file itself is
/// writable by this process.
pub(super) fn check_room(db: &Path) -> Result<(), Unhealthy> {
    use rustix::fs::{Access, StatVfsMountFlags};
    let dir = match db.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let stats = rustix::fs::statvfs(dir).map_err(|e| {
        tracing::warn!(error = %e, "health check: cannot read the file system's free space");
        Unhealthy::Unreadable
    })?;
    if stats.f_flag.contains(StatVfsMountFlags::RDONLY)
        || rustix::fs::access(db, Access::WRITE_OK).is_err()
    {
        return Err(Unhealthy::ReadOnly);
    }
    if stats.f_bavail.saturating_mul(stats.f_frsize) < MIN_FREE_BYTES {
        return Err(Unhealthy::DiskFull);
    }
    Ok(())
}

/// The database file a store opened: its path, and the device and inode found there, to
/// notice later that the path names another file, or none.
#[derive(Debug)]
pub(super) struct OpenedFile {
    path: PathBuf,
    device: u64,
    inode: u64,
}

impl OpenedFile {
    /// The file now at `path` (just opened).
    pub(super) fn at(path: &Path) -> Result<OpenedFile, StoreError> {
        let meta = std::fs::metadata(path).map_err(|e| {
            StoreError::Io(std::io::Error::new(
                e.kind(),
                format!("cannot look at {}: {e}", path.display()),
            ))
        })?;
        Ok(OpenedFile {
            path: path.to_path_buf(),
            device: meta.dev(),
            inode: meta.ino(),
        })
    }

    /// Why the path no longer names the opened file, after one `stat` of it:
    /// [`Unhealthy::Moved`] when nothing is there, [`Unhealthy::Replaced`] when another
    /// file is.
    pub(super) fn displaced(&self) -> Option<Unhealthy> {
        match std::fs::metadata(&self.path) {
            Ok(meta) if meta.dev() == self.device && meta.ino() == self.inode => None,
            Ok(_) => Some(Unhealthy::Replaced),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(Unhealthy::Moved),
            // A path that cannot be looked at (a directory made unreadable) does not say
            // which file it names; what that breaks, the other checks report.
            Err(_) => None,
        }
    }

    /// The path it was opened at.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

/// Whether the file at `db`, its directory or their file system is read-only for this
/// process (what SQLite's "unable to open" and "readonly" mean there).
pub(super) fn read_only(db: &Path) -> bool {
    use rustix::fs::{Access, StatVfsMountFlags};
    let dir = match db.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mounted_read_only = rustix::fs::statvfs(dir)
        .is_ok_and(|stats| stats.f_flag.contains(StatVfsMountFlags::RDONLY));
    let denied = |path: &Path| {
        matches!(
            rustix::fs::access(path, Access::WRITE_OK),
            Err(e) if e == rustix::io::Errno::ACCESS || e == rustix::io::Errno::ROFS
                || e == rustix::io::Errno::PERM
        )
    };
    mounted_read_only || denied(db) || denied(dir)
}
