//! The `invoice_series` table: each series' last number and last issue date, and the
//! taking of the next number when an invoice is issued.

use super::super::sql::args;
use super::super::{Conn, Tx};
use super::DbResult;

/// The latest issue date of a series, if it has issued anything.
pub fn series_last_issue_date(conn: &Conn<'_>, book: &str, code: &str) -> DbResult<Option<String>> {
    Ok(conn
        .query_opt(
            "SELECT last_issue_date FROM invoice_series WHERE book = ?1 AND code = ?2",
            args![book, code],
            |r| r.get::<Option<String>>(0),
        )?
        .flatten())
}

/// Takes the next number of a series for an invoice issued on `issue_date` and gives it as
/// the invoice shows it: `<code>-<000001>`. The caller has checked that the date does not
/// go backwards. The number is read and written by one statement inside the caller's write
/// transaction (which on PostgreSQL holds the store's write lock), so numbers stay gapless
/// and in issue-date order across every node.
pub fn next_number(tx: &Tx<'_>, book: &str, code: &str, issue_date: &str) -> DbResult<String> {
    // The stored row's columns are named with the table: PostgreSQL finds a bare
    // `last_number` ambiguous between it and `excluded`. The CASE is the larger of the two
    // dates (SQLite's scalar `max`, which PostgreSQL lacks; the new date is never NULL).
    let number: i64 = tx.query_one(
        "INSERT INTO invoice_series (book, code, last_number, last_issue_date)
         VALUES (?1, ?2, 1, ?3)
         ON CONFLICT (book, code) DO UPDATE SET
             last_number = invoice_series.last_number + 1,
             last_issue_date = CASE
                 WHEN COALESCE(invoice_series.last_issue_date, '') > excluded.last_issue_date
                 THEN invoice_series.last_issue_date
                 ELSE excluded.last_issue_date END
         RETURNING last_number",
        args![book, code, issue_date],
        |r| r.get(0),
    )?;
    Ok(format!("{code}-{number:06}"))
}
