//! Copying a whole installation from one store to another (an SQLite file to PostgreSQL,
//! when a company moves to several nodes), and proving the copy: per table, the rows on
//! both sides and a SHA-256 over them.
//!
//! [`TABLES`] is the one list of the tables and columns an installation holds, in
//! foreign-key order (`tables.rs`); a unit test holds it equal to both schemas, so a table
//! added later cannot be forgotten by the copy. The copy runs in ONE write transaction of
//! the target (all or nothing): it refuses a target that already holds an installation unless asked
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
//! engines), each cell rendered canonically: a type tag and the value (`checksum.rs`).
//!
//! Here: the report and the refusal, and the copy's order of work; `transfer.rs` moves the
//! rows.

mod checksum;
mod tables;
mod transfer;

pub use checksum::{TableSum, checksums};
pub use tables::{KeyColumn, TABLES, Table};

use transfer::{copy_table, empty, move_identities, tables_with_rows};

use super::{Conn, Store, StoreError};

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

#[cfg(test)]
mod tests;
