//! Whether the store can serve: the reasons it cannot (the `reason` of an unhealthy
//! `/healthz`), the storage failure of the last write (kept so that a health check costs no
//! write while writes succeed), and the room on the file system under an SQLite file.

use std::fmt;
use std::path::Path;
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
}

impl Unhealthy {
    /// Every reason, in order of their codes (1..).
    const ALL: [Unhealthy; 5] = [
        Self::Unreadable,
        Self::ReadOnly,
        Self::DiskFull,
        Self::WriteFailed,
        Self::Unreachable,
    ];

    /// The stable machine word of this reason.
    pub fn code(self) -> &'static str {
        match self {
            Self::Unreadable => "database_unreadable",
            Self::ReadOnly => "database_read_only",
            Self::DiskFull => "disk_full",
            Self::WriteFailed => "write_failed",
            Self::Unreachable => "database_unreachable",
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            Self::Unreadable => 1,
            Self::ReadOnly => 2,
            Self::DiskFull => 3,
            Self::WriteFailed => 4,
            Self::Unreachable => 5,
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
