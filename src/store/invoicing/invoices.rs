//! The `invoices` and `invoice_lines` tables: an invoice with its lines, summaries for the
//! lists and the export, and the changes of an invoice's life (draft, issue, void).

use super::super::sql::{Row, args};
use super::super::{Conn, Tx};
use super::model::{
    ClientId, Invoice, InvoiceId, InvoiceStatus, Line, LineAmounts, LinePricing, Totals,
};
use super::{DbResult, limit_param};

// A macro rather than a `const`, so the statements built on it are literals (`concat!`).
macro_rules! invoice_select {
    () => {
        "SELECT i.id, i.client_id, c.name, i.kind, i.status, i.series,
        i.number, i.issue_date, i.due_date, i.currency, i.notes, i.gross_cents,
        i.discount_cents, i.subtotal_cents, i.vat_cents, i.withholding_cents, i.total_cents,
        i.paid_cents, i.recipient_name, i.recipient_tax_id, i.rectifies_id, i.rectified_by_id,
        i.void_reason
     FROM invoices i JOIN clients c ON c.book = i.book AND c.id = i.client_id"
    };
}

// Paginated queries end in `LIMIT CAST(?N AS BIGINT) + 0`, not `LIMIT ?N`: SQLite plans
// `ORDER BY … LIMIT` with the bound limit's value and so prepares such a statement anew on
// every run, which made reading one invoice cost more than the rest of the call (an
// expression keeps the value out of the plan; the CAST gives PostgreSQL its type). An
// optional filter is tested as `CAST(?N AS TEXT) IS NULL` for the same reason: PostgreSQL
// cannot infer the type of a bare parameter under `IS NULL`.

fn totals(row: &Row<'_>, first: usize) -> DbResult<Totals> {
    Ok(Totals {
        gross_cents: row.get(first)?,
        discount_cents: row.get(first + 1)?,
        subtotal_cents: row.get(first + 2)?,
        vat_cents: row.get(first + 3)?,
        withholding_cents: row.get(first + 4)?,
        total_cents: row.get(first + 5)?,
    })
}

fn invoice_from_row(row: &Row<'_>) -> DbResult<Invoice> {
    Ok(Invoice {
        id: row.get(0)?,
        client_id: row.get(1)?,
        client_name: row.get(2)?,
        kind: row.get(3)?,
        status: row.get(4)?,
        series: row.get(5)?,
        number: row.get(6)?,
        issue_date: row.get(7)?,
        due_date: row.get(8)?,
        currency: row.get(9)?,
        notes: row.get(10)?,
        totals: totals(row, 11)?,
        paid_cents: row.get(17)?,
        recipient_name: row.get(18)?,
        recipient_tax_id: row.get(19)?,
        rectifies_id: row.get(20)?,
        rectified_by_id: row.get(21)?,
        void_reason: row.get(22)?,
        lines: Vec::new(),
    })
}

fn line_from_row(row: &Row<'_>) -> DbResult<Line> {
    Ok(Line {
        description: row.get(0)?,
        pricing: LinePricing {
            quantity: row.get(1)?,
            unit_price_cents: row.get(2)?,
            discount_percent: row.get(3)?,
            vat_rate: row.get(4)?,
            withholding_rate: row.get(5)?,
        },
        amounts: LineAmounts {
            gross_cents: row.get(6)?,
            discount_cents: row.get(7)?,
            net_cents: row.get(8)?,
            vat_cents: row.get(9)?,
            withholding_cents: row.get(10)?,
            total_cents: row.get(11)?,
        },
    })
}

/// One invoice with its lines.
pub fn invoice(conn: &Conn<'_>, book: &str, id: &InvoiceId) -> DbResult<Option<Invoice>> {
    let found = conn.query_opt(
        concat!(invoice_select!(), " WHERE i.book = ?1 AND i.id = ?2"),
        args![book, id],
        invoice_from_row,
    )?;
    let Some(mut invoice) = found else {
        return Ok(None);
    };
    invoice.lines = conn.query_all(
        "SELECT description, quantity, unit_price_cents, discount_percent, vat_rate,
            withholding_rate, gross_cents, discount_cents, net_cents, vat_cents,
            withholding_cents, total_cents
         FROM invoice_lines WHERE book = ?1 AND invoice_id = ?2 ORDER BY position",
        args![book, id],
        line_from_row,
    )?;
    Ok(Some(invoice))
}

/// The number of an invoice, if it exists and is numbered.
pub fn invoice_number(conn: &Conn<'_>, book: &str, id: &InvoiceId) -> DbResult<Option<String>> {
    Ok(conn
        .query_opt(
            "SELECT number FROM invoices WHERE book = ?1 AND id = ?2",
            args![book, id],
            |r| r.get::<Option<String>>(0),
        )?
        .flatten())
}

fn insert_lines(tx: &Tx<'_>, book: &str, id: &InvoiceId, lines: &[Line]) -> DbResult<()> {
    for (i, line) in lines.iter().enumerate() {
        let (p, a) = (&line.pricing, &line.amounts);
        tx.execute(
            "INSERT INTO invoice_lines (book, invoice_id, position, description, quantity,
                unit_price_cents, discount_percent, vat_rate, withholding_rate, gross_cents,
                discount_cents, net_cents, vat_cents, withholding_cents, total_cents)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            args![
                book,
                id,
                limit_param(i + 1),
                line.description,
                p.quantity,
                p.unit_price_cents,
                p.discount_percent,
                p.vat_rate,
                p.withholding_rate,
                a.gross_cents,
                a.discount_cents,
                a.net_cents,
                a.vat_cents,
                a.withholding_cents,
                a.total_cents
            ],
        )?;
    }
    Ok(())
}

/// Inserts a new invoice and its lines (any status; issue fields as given; an invoice
/// that is no draft is stamped issued at `now`).
pub fn insert_invoice(tx: &Tx<'_>, book: &str, inv: &Invoice, now: i64) -> DbResult<()> {
    let t = &inv.totals;
    let issued_at = (inv.status != InvoiceStatus::Draft).then_some(now);
    tx.execute(
        "INSERT INTO invoices (book, id, client_id, kind, status, series, number, issue_date,
            due_date, currency, notes, gross_cents, discount_cents, subtotal_cents,
            vat_cents, withholding_cents, total_cents, paid_cents, recipient_name,
            recipient_tax_id, rectifies_id, issued_at, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                 ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?23)",
        args![
            book,
            inv.id,
            inv.client_id,
            inv.kind,
            inv.status,
            inv.series,
            inv.number,
            inv.issue_date,
            inv.due_date,
            inv.currency,
            inv.notes,
            t.gross_cents,
            t.discount_cents,
            t.subtotal_cents,
            t.vat_cents,
            t.withholding_cents,
            t.total_cents,
            inv.paid_cents,
            inv.recipient_name,
            inv.recipient_tax_id,
            inv.rectifies_id,
            issued_at,
            now
        ],
    )?;
    insert_lines(tx, book, &inv.id, &inv.lines)
}

/// Rewrites a draft: its editable fields, totals and lines.
pub fn save_draft(tx: &Tx<'_>, book: &str, inv: &Invoice, now: i64) -> DbResult<()> {
    let t = &inv.totals;
    tx.execute(
        "UPDATE invoices SET client_id = ?3, kind = ?4, series = ?5, issue_date = ?6,
            due_date = ?7, notes = ?8, gross_cents = ?9, discount_cents = ?10,
            subtotal_cents = ?11, vat_cents = ?12, withholding_cents = ?13, total_cents = ?14,
            updated_at = ?15
         WHERE book = ?1 AND id = ?2 AND status = 'draft'",
        args![
            book,
            inv.id,
            inv.client_id,
            inv.kind,
            inv.series,
            inv.issue_date,
            inv.due_date,
            inv.notes,
            t.gross_cents,
            t.discount_cents,
            t.subtotal_cents,
            t.vat_cents,
            t.withholding_cents,
            t.total_cents,
            now
        ],
    )?;
    tx.execute(
        "DELETE FROM invoice_lines WHERE book = ?1 AND invoice_id = ?2",
        args![book, inv.id],
    )?;
    insert_lines(tx, book, &inv.id, &inv.lines)
}

/// Turns a draft into an issued invoice with its number, dates and recipient snapshot.
pub fn mark_issued(tx: &Tx<'_>, book: &str, inv: &Invoice, now: i64) -> DbResult<()> {
    tx.execute(
        "UPDATE invoices SET status = 'issued', number = ?3, issue_date = ?4, due_date = ?5,
            recipient_name = ?6, recipient_tax_id = ?7, issued_at = ?8, updated_at = ?8
         WHERE book = ?1 AND id = ?2 AND status = 'draft'",
        args![
            book,
            inv.id,
            inv.number,
            inv.issue_date,
            inv.due_date,
            inv.recipient_name,
            inv.recipient_tax_id,
            now
        ],
    )?;
    Ok(())
}

/// Marks an invoice void, pointing at its rectifying invoice.
pub fn mark_void(
    tx: &Tx<'_>,
    book: &str,
    id: &InvoiceId,
    reason: &str,
    by: &InvoiceId,
    now: i64,
) -> DbResult<()> {
    tx.execute(
        "UPDATE invoices SET status = 'void', void_reason = ?3, rectified_by_id = ?4,
            voided_at = ?5, updated_at = ?5
         WHERE book = ?1 AND id = ?2",
        args![book, id, reason, by, now],
    )?;
    Ok(())
}

/// Deletes a draft and its lines.
pub fn delete_draft(tx: &Tx<'_>, book: &str, id: &InvoiceId) -> DbResult<()> {
    tx.execute(
        "DELETE FROM invoices WHERE book = ?1 AND id = ?2 AND status = 'draft'",
        args![book, id],
    )?;
    Ok(())
}

/// Filters of `search_invoices`; a filter left `None` lets every invoice through.
#[derive(Debug, Default)]
pub struct InvoiceFilter<'a> {
    /// Only this status.
    pub status: Option<InvoiceStatus>,
    /// Only this client's.
    pub client_id: Option<&'a ClientId>,
    /// Issue date (`YYYY-MM-DD`) on or after.
    pub date_from: Option<String>,
    /// Issue date (`YYYY-MM-DD`) on or before.
    pub date_to: Option<String>,
    /// Only overdue invoices on this date (issued, unpaid balance, due before it).
    pub overdue_on: Option<String>,
}

/// A page of invoices (summaries, no lines), newest first.
pub fn search_invoices(
    conn: &Conn<'_>,
    book: &str,
    filter: &InvoiceFilter<'_>,
    starting_after: Option<&InvoiceId>,
    limit: usize,
) -> DbResult<Vec<Invoice>> {
    conn.query_all(
        concat!(
            invoice_select!(),
            "
         WHERE i.book = ?8
           AND (CAST(?1 AS TEXT) IS NULL OR i.status = ?1)
           AND (CAST(?2 AS TEXT) IS NULL OR i.client_id = ?2)
           AND (CAST(?3 AS TEXT) IS NULL OR i.issue_date >= ?3)
           AND (CAST(?4 AS TEXT) IS NULL OR i.issue_date <= ?4)
           AND (CAST(?5 AS TEXT) IS NULL OR (i.status = 'issued'
                AND i.total_cents > i.paid_cents AND i.due_date < ?5))
           AND (CAST(?6 AS TEXT) IS NULL OR i.id < ?6)
         ORDER BY i.id DESC LIMIT CAST(?7 AS BIGINT) + 0"
        ),
        args![
            filter.status,
            filter.client_id,
            filter.date_from,
            filter.date_to,
            filter.overdue_on,
            starting_after,
            limit_param(limit),
            book
        ],
        invoice_from_row,
    )
}

/// Every non-draft invoice issued within `[from, to]`, by number, with an optional status.
pub fn invoices_issued_between(
    conn: &Conn<'_>,
    book: &str,
    from: &str,
    to: &str,
    status: Option<InvoiceStatus>,
) -> DbResult<Vec<Invoice>> {
    conn.query_all(
        concat!(
            invoice_select!(),
            "
         WHERE i.book = ?4 AND i.status <> 'draft' AND i.issue_date >= ?1
           AND i.issue_date <= ?2 AND (CAST(?3 AS TEXT) IS NULL OR i.status = ?3)
         ORDER BY i.series, i.number"
        ),
        args![from, to, status, book],
        invoice_from_row,
    )
}
