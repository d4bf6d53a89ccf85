//! Copies of the database and what checks them: SQLite's `VACUUM INTO`, the integrity
//! check and its quicker form, the schema version a file's header records (read without opening it), and the
//! probe that tells whether another process holds the file.

use std::io::Read as _;
use std::path::Path;

use super::SqlResult;
use super::{Store, StoreError};

impl Store {
    /// Runs `PRAGMA integrity_check`; returns `"ok"` for a healthy file, otherwise the
    /// problems found, one per line.
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        self.sqlite_read("PRAGMA integrity_check", |conn| {
            let mut stmt = conn.prepare("PRAGMA integrity_check").or_store()?;
            let lines = stmt
                .query_map([], |row| row.get::<_, String>(0))
                .or_store()?
                .collect::<Result<Vec<_>, _>>()
                .or_store()?;
            Ok(lines.join("\n"))
        })
    }

    /// Runs `PRAGMA quick_check` (the integrity check without its index cross-checks, so
    /// several times faster); returns `"ok"` for a sound file, otherwise the problems
    /// found, one per line.
    pub fn quick_check(&self) -> Result<String, StoreError> {
        self.sqlite_read("PRAGMA quick_check", |conn| {
            let mut stmt = conn.prepare("PRAGMA quick_check").or_store()?;
            let lines = stmt
                .query_map([], |row| row.get::<_, String>(0))
                .or_store()?
                .collect::<Result<Vec<_>, _>>()
                .or_store()?;
            Ok(lines.join("\n"))
        })
    }

    /// Writes a consistent online copy of the database to `dest` (`VACUUM INTO`).
    /// Refuses to overwrite an existing file.
    pub fn backup_to(&self, dest: &Path) -> Result<(), StoreError> {
        if dest.exists() {
            return Err(StoreError::Io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("backup target {} already exists", dest.display()),
            )));
        }
        let target = dest.to_str().ok_or_else(|| {
            StoreError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("backup target {} is not valid UTF-8", dest.display()),
            ))
        })?;
        self.sqlite_read("a backup with VACUUM INTO", |conn| {
            conn.execute("VACUUM INTO ?1", [target]).or_store()?;
            Ok(())
        })
    }

    /// Succeeds only when no other connection holds the database: taking the exclusive
    /// file lock fails ([`StoreError::Busy`]) while any process has it open in WAL mode
    /// (each such connection keeps a shared lock).
    pub fn probe_exclusive(&self) -> Result<(), StoreError> {
        self.sqlite_read("the exclusive file lock", |conn| {
            conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
                .or_store()?;
            conn.execute_batch("BEGIN EXCLUSIVE; COMMIT;").or_store()?;
            Ok(())
        })
    }
}

/// Size of an SQLite file header.
const SQLITE_HEADER_BYTES: usize = 100;

/// Offset of `PRAGMA user_version` (big-endian u32) in an SQLite file header.
pub const USER_VERSION_OFFSET: usize = 60;

/// The schema version (`PRAGMA user_version`) recorded in the header of the file at
/// `path`, read without opening it as a database; `Ok(None)` when it is no SQLite file.
pub fn header_user_version(path: &Path) -> std::io::Result<Option<u32>> {
    let mut bytes = Vec::with_capacity(SQLITE_HEADER_BYTES);
    std::fs::File::open(path)?
        .take(SQLITE_HEADER_BYTES as u64)
        .read_to_end(&mut bytes)?;
    if !bytes.starts_with(b"SQLite format 3\0") {
        return Ok(None);
    }
    Ok(bytes
        .get(USER_VERSION_OFFSET..USER_VERSION_OFFSET + 4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_be_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreOptions;
    use crate::store::tests::fresh;

    #[test]
    fn backup_opens_and_passes_integrity_check() {
        let (dir, _path, store) = fresh();
        assert_eq!(store.integrity_check().expect("check"), "ok");
        let dest = dir.path().join("backup.db");
        store.backup_to(&dest).expect("backup");
        let copy = Store::open(&dest, &StoreOptions::default()).expect("open backup");
        assert_eq!(copy.integrity_check().expect("check"), "ok");
        assert_eq!(copy.plans().expect("plans").len(), 4);
        let again = store.backup_to(&dest).expect_err("exists");
        assert!(matches!(again, StoreError::Io(_)), "{again:?}");
    }
}
