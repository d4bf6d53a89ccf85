//! Consistent copies of the database: SQLite's `VACUUM INTO` and its integrity check.

use std::path::Path;

use super::{Store, StoreError};

impl Store {
    /// Runs `PRAGMA integrity_check`; returns `"ok"` for a healthy file, otherwise the
    /// problems found, one per line.
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare("PRAGMA integrity_check")?;
            let lines = stmt
                .query_map([], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
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
        self.read(|conn| {
            conn.execute("VACUUM INTO ?1", [target])?;
            Ok(())
        })
    }
}
