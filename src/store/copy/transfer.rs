//! Moving the rows into the target, inside its one write transaction: finding what it
//! already holds, emptying it, copying each table in multi-row `INSERT`s (a column that
//! points forward within its table is set once every row is in), and moving PostgreSQL's
//! identity sequences past the copied ids.

use super::super::sql::{Dialect, Owned, Param};
use super::super::{Conn, StoreError, Tx};
use super::tables::{TABLES, Table};

/// The table a fresh target is seeded with, which the copy replaces rather than refuses.
const SEEDED: &str = "plans";

/// About this many parameters per `INSERT` (several rows per statement).
const PARAMS_PER_INSERT: usize = 1000;

/// The tables (the seeded plans aside) that hold rows, with their counts.
pub(super) fn tables_with_rows(conn: &Conn<'_>) -> Result<Vec<(&'static str, u64)>, StoreError> {
    let mut held = Vec::new();
    for table in TABLES.iter().filter(|t| t.name != SEEDED) {
        let rows: i64 = conn.query_one(
            &format!("SELECT count(*) FROM {}", table.name),
            super::super::sql::args![],
            |row| row.get(0),
        )?;
        if rows > 0 {
            held.push((table.name, u64::try_from(rows).unwrap_or(0)));
        }
    }
    Ok(held)
}

/// Deletes every row of every table, children first.
pub(super) fn empty(tx: &Tx<'_>) -> Result<(), StoreError> {
    for table in TABLES.iter().rev() {
        tx.execute(
            &format!("DELETE FROM {}", table.name),
            super::super::sql::args![],
        )?;
    }
    Ok(())
}

/// Copies one table: read from `src` row by row, written in multi-row `INSERT`s.
pub(super) fn copy_table(src: &Conn<'_>, tx: &Tx<'_>, table: &Table) -> Result<(), StoreError> {
    let width = table.columns.len();
    let per_insert = (PARAMS_PER_INSERT / width).max(1);
    let deferred = table
        .deferred
        .and_then(|name| table.columns.iter().position(|c| *c == name));
    let mut batch: Vec<Owned> = Vec::with_capacity(per_insert * width);
    // (key cells, deferred value) of the rows whose deferred column is set.
    let mut later: Vec<(Vec<Owned>, Owned)> = Vec::new();
    src.query_all(&copy_select(table), super::super::sql::args![], |row| {
        let start = batch.len();
        for i in 0..width {
            batch.push(row.get::<Owned>(i)?);
        }
        if let Some(at) = deferred
            && batch[start + at] != Owned::Null
        {
            let value = std::mem::replace(&mut batch[start + at], Owned::Null);
            later.push((key_cells(table, &batch[start..]), value));
        }
        if batch.len() == per_insert * width {
            insert_rows(tx, table, &batch)?;
            batch.clear();
        }
        Ok(())
    })?;
    if !batch.is_empty() {
        insert_rows(tx, table, &batch)?;
    }
    if let Some(column) = table.deferred {
        set_deferred(tx, table, column, &later)?;
    }
    Ok(())
}

/// The cells of `row` (all columns of `table`) that form its primary key.
fn key_cells(table: &Table, row: &[Owned]) -> Vec<Owned> {
    table
        .key
        .iter()
        .filter_map(|k| table.columns.iter().position(|c| *c == k.name))
        .map(|i| row[i].clone())
        .collect()
}

/// The source's `SELECT` for the copy. Invoices come in rectification order (an invoice
/// before the rectifying invoice that names it), so every `rectifies_id` points at a row
/// already copied; other tables come in key order.
fn copy_select(table: &Table) -> String {
    if table.name == "invoices" {
        let columns: Vec<String> = table.columns.iter().map(|c| format!("i.{c}")).collect();
        return format!(
            "WITH RECURSIVE chain (book, id, depth) AS ( \
                 SELECT book, id, 0 FROM invoices WHERE rectifies_id IS NULL \
                 UNION ALL \
                 SELECT i.book, i.id, chain.depth + 1 FROM invoices i \
                 JOIN chain ON i.book = chain.book AND i.rectifies_id = chain.id) \
             SELECT {} FROM invoices i JOIN chain ON chain.book = i.book AND chain.id = i.id \
             ORDER BY chain.depth, i.book, i.id",
            columns.join(", ")
        );
    }
    format!(
        "SELECT {} FROM {} ORDER BY {}",
        table.columns.join(", "),
        table.name,
        table
            .key
            .iter()
            .map(|k| k.name)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// One `INSERT` of the rows in `cells` (whole rows of `table`, one after another).
fn insert_rows(tx: &Tx<'_>, table: &Table, cells: &[Owned]) -> Result<(), StoreError> {
    let width = table.columns.len();
    let rows: Vec<String> = (0..cells.len() / width)
        .map(|r| {
            let params: Vec<String> = (1..=width).map(|c| format!("?{}", r * width + c)).collect();
            format!("({})", params.join(", "))
        })
        .collect();
    let sql = format!(
        "INSERT INTO {} ({}) VALUES {}",
        table.name,
        table.columns.join(", "),
        rows.join(", ")
    );
    let params: Vec<&dyn Param> = cells.iter().map(|c| c as &dyn Param).collect();
    tx.execute(&sql, &params)?;
    Ok(())
}

/// Sets the deferred column of the rows that had one, once every row of the table is in.
fn set_deferred(
    tx: &Tx<'_>,
    table: &Table,
    column: &str,
    rows: &[(Vec<Owned>, Owned)],
) -> Result<(), StoreError> {
    let matching: Vec<String> = table
        .key
        .iter()
        .enumerate()
        .map(|(i, k)| format!("{} = ?{}", k.name, i + 2))
        .collect();
    let sql = format!(
        "UPDATE {} SET {column} = ?1 WHERE {}",
        table.name,
        matching.join(" AND ")
    );
    for (key, value) in rows {
        let mut params: Vec<&dyn Param> = vec![value];
        params.extend(key.iter().map(|c| c as &dyn Param));
        tx.execute(&sql, &params)?;
    }
    Ok(())
}

/// Moves each identity sequence past the copied ids (PostgreSQL; SQLite assigns the next
/// id from the table itself).
pub(super) fn move_identities(tx: &Tx<'_>) -> Result<(), StoreError> {
    if tx.dialect() != Dialect::Postgres {
        return Ok(());
    }
    for table in TABLES.iter().filter(|t| t.identity) {
        let name = table.name;
        tx.query_one(
            &format!(
                "SELECT setval(pg_get_serial_sequence('{name}', 'id'), \
                 COALESCE(max(id), 0) + 1, false) FROM {name}"
            ),
            super::super::sql::args![],
            |row| row.get::<i64>(0),
        )?;
    }
    Ok(())
}
