//! The proof of a copy: per table, its rows and a SHA-256 over them in primary-key order
//! (text keys in byte order on both engines), each cell rendered canonically (a type tag
//! and the value), so the same rows hash the same on SQLite and PostgreSQL.

use sha2::{Digest, Sha256};

use super::super::sql::{Dialect, Owned};
use super::super::{Conn, StoreError};
use super::tables::{TABLES, Table};

/// The rows and checksum of one table on one side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSum {
    /// The table.
    pub table: &'static str,
    /// Its rows.
    pub rows: u64,
    /// SHA-256 over them (hex).
    pub sha256: String,
}

/// The rows and checksum of every table of `conn`'s database, in [`TABLES`] order.
pub fn checksums(conn: &Conn<'_>) -> Result<Vec<TableSum>, StoreError> {
    TABLES.iter().map(|table| checksum(conn, table)).collect()
}

/// One table's rows and SHA-256, the rows in primary-key order.
fn checksum(conn: &Conn<'_>, table: &Table) -> Result<TableSum, StoreError> {
    let order: Vec<String> = table
        .key
        .iter()
        .map(|k| match (k.text, conn.dialect()) {
            (true, Dialect::Postgres) => format!("{} COLLATE \"C\"", k.name),
            _ => k.name.to_owned(),
        })
        .collect();
    let sql = format!(
        "SELECT {} FROM {} ORDER BY {}",
        table.columns.join(", "),
        table.name,
        order.join(", ")
    );
    let mut hasher = Sha256::new();
    let mut rows = 0u64;
    conn.query_all(&sql, super::super::sql::args![], |row| {
        for i in 0..table.columns.len() {
            hash_cell(&mut hasher, &row.get::<Owned>(i)?);
        }
        rows += 1;
        Ok(())
    })?;
    let digest = hasher.finalize();
    Ok(TableSum {
        table: table.name,
        rows,
        sha256: hex::encode(digest),
    })
}

/// A cell, canonically: a type tag, then the value (integers and reals as 8 big-endian
/// bytes, text and bytes with their length first), the same on both engines.
pub(super) fn hash_cell(hasher: &mut Sha256, cell: &Owned) {
    match cell {
        Owned::Null => hasher.update(b"N"),
        Owned::Int(i) => {
            hasher.update(b"I");
            hasher.update(i.to_be_bytes());
        }
        Owned::Real(r) => {
            hasher.update(b"R");
            hasher.update(r.to_bits().to_be_bytes());
        }
        Owned::Text(t) => {
            hasher.update(b"T");
            hasher.update((t.len() as u64).to_be_bytes());
            hasher.update(t.as_bytes());
        }
        Owned::Blob(b) => {
            hasher.update(b"B");
            hasher.update((b.len() as u64).to_be_bytes());
            hasher.update(b);
        }
    }
}
