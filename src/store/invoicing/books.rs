//! Whole books of the business tables: their row counts, emptying the test book, and
//! filling it with a copy of the live book (the sandbox).

use super::super::sql::args;
use super::super::{Conn, Tx};
use super::DbResult;

/// The business tables, children before parents (the order a book is emptied in).
const BOOK_TABLES: [&str; 6] = [
    "outbox",
    "payments",
    "invoice_lines",
    "invoices",
    "invoice_series",
    "clients",
];

/// Rows per business table: (table, rows).
pub type TableCounts = Vec<(&'static str, i64)>;

/// How many rows of a book each business table holds, children before parents.
pub fn book_counts(conn: &Conn<'_>, book: &str) -> DbResult<TableCounts> {
    BOOK_TABLES
        .iter()
        .map(|table| {
            let count: i64 = conn.query_one(
                &format!("SELECT count(*) FROM {table} WHERE book = ?1"),
                args![book],
                |r| r.get(0),
            )?;
            Ok((*table, count))
        })
        .collect()
}

/// Whether a book holds no business row at all.
pub fn book_is_empty(conn: &Conn<'_>, book: &str) -> DbResult<bool> {
    Ok(book_counts(conn, book)?.iter().all(|(_, n)| *n == 0))
}

/// Deletes every business row of the test book. The live book is never emptied: there is
/// no book parameter to get wrong.
pub fn clear_test_book(tx: &Tx<'_>) -> DbResult<()> {
    for table in BOOK_TABLES {
        tx.execute(&format!("DELETE FROM {table} WHERE book = 'test'"), args![])?;
    }
    Ok(())
}

/// Copies the live book into an empty test book: clients, series (so numbering goes on
/// from where the live book is, gapless), invoices with their lines, and payments, under
/// the same ids. The outbox is not copied: nothing queued for the live book is queued
/// again. Returns how many rows of each table were copied.
pub fn copy_live_into_test(tx: &Tx<'_>) -> DbResult<TableCounts> {
    const COPIES: [(&str, &str); 5] = [
        (
            "clients",
            "id, name, tax_id, email, address, created_at, updated_at",
        ),
        ("invoice_series", "code, last_number, last_issue_date"),
        (
            "invoices",
            "id, client_id, kind, status, series, number, issue_date, due_date, currency, \
             notes, gross_cents, discount_cents, subtotal_cents, vat_cents, withholding_cents, \
             total_cents, paid_cents, recipient_name, recipient_tax_id, rectifies_id, \
             rectified_by_id, void_reason, issued_at, voided_at, created_at, updated_at",
        ),
        (
            "invoice_lines",
            "invoice_id, position, description, quantity, unit_price_cents, \
             discount_percent, vat_rate, withholding_rate, gross_cents, discount_cents, \
             net_cents, vat_cents, withholding_cents, total_cents",
        ),
        (
            "payments",
            "id, invoice_id, amount_cents, currency, paid_on, method, reference, created_at",
        ),
    ];
    COPIES
        .iter()
        .map(|(table, columns)| {
            let copied = tx.execute(
                &format!(
                    "INSERT INTO {table} (book, {columns})
                     SELECT 'test', {columns} FROM {table} WHERE book = 'live'"
                ),
                args![],
            )?;
            Ok((*table, i64::try_from(copied).unwrap_or(i64::MAX)))
        })
        .collect()
}
