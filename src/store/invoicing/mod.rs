//! The invoicing tables (`schema.sql`, last section, in two books since schema version 3:
//! `migrations/books.sql`) and their only writer. Rows travel as plain column values; the
//! invoicing pack turns them into its model (ids, kinds, statuses, money). Every function
//! takes the book (`live` or `test`) of the caller and confines every statement to it, so
//! a test key never reads or writes a live row. Writes stamp their rows with the `now`
//! (unix seconds) the caller read from its clock.
//!
//! Here: clients, series, payments, the outbox and whole books; `invoices` holds the
//! invoices and their lines. Paginated queries end in `LIMIT ?N + 0` (why: `invoices`).

use rusqlite::{OptionalExtension, Row, params};

mod invoices;

pub use invoices::{
    AmountColumns, InvoiceFilter, InvoiceRow, LineRow, delete_draft, insert_invoice, invoice,
    invoice_number, invoices_issued_between, mark_issued, mark_void, save_draft, search_invoices,
};

use super::SqlResult;
use super::{Conn, StoreError, Tx};

/// Result of the queries here.
pub type DbResult<T> = Result<T, StoreError>;

/// The company's ISO country code (decides the legal VAT rates), if there is a company.
pub fn company_country(conn: &Conn<'_>) -> DbResult<Option<String>> {
    conn.sql()
        .prepare_cached("SELECT country FROM company WHERE id = 1")
        .or_store()?
        .query_row([], |r| r.get(0))
        .optional()
        .or_store()
}

// ---- Clients ------------------------------------------------------------------------------

/// A row of `clients`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRow {
    /// `cli_…`.
    pub id: String,
    /// Name.
    pub name: String,
    /// Normalised tax id.
    pub tax_id: Option<String>,
    /// E-mail address.
    pub email: Option<String>,
    /// Postal address.
    pub address: Option<String>,
}

const CLIENT_SELECT: &str = "SELECT id, name, tax_id, email, address FROM clients";
// Every statement below names the book as `?1`.

fn client_from_row(row: &Row<'_>) -> rusqlite::Result<ClientRow> {
    Ok(ClientRow {
        id: row.get(0)?,
        name: row.get(1)?,
        tax_id: row.get(2)?,
        email: row.get(3)?,
        address: row.get(4)?,
    })
}

/// One client.
pub fn client(conn: &Conn<'_>, book: &str, id: &str) -> DbResult<Option<ClientRow>> {
    let mut stmt = conn
        .sql()
        .prepare_cached(&format!("{CLIENT_SELECT} WHERE book = ?1 AND id = ?2"))
        .or_store()?;
    stmt.query_row([book, id], client_from_row)
        .optional()
        .or_store()
}

/// The id of the client holding `tax_id` (normalised), if any.
pub fn client_with_tax_id(conn: &Conn<'_>, book: &str, tax_id: &str) -> DbResult<Option<String>> {
    let mut stmt = conn
        .sql()
        .prepare_cached("SELECT id FROM clients WHERE book = ?1 AND tax_id = ?2")
        .or_store()?;
    stmt.query_row([book, tax_id], |r| r.get(0))
        .optional()
        .or_store()
}

/// Inserts a new client.
pub fn insert_client(tx: &Tx<'_>, book: &str, c: &ClientRow, now: i64) -> DbResult<()> {
    tx.sql()
        .prepare_cached(
            "INSERT INTO clients (book, id, name, tax_id, email, address, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
        )
        .or_store()?
        .execute(params![
            book, c.id, c.name, c.tax_id, c.email, c.address, now
        ])
        .or_store()?;
    Ok(())
}

/// Saves every field of an existing client.
pub fn update_client(tx: &Tx<'_>, book: &str, c: &ClientRow, now: i64) -> DbResult<()> {
    tx.sql()
        .prepare_cached(
            "UPDATE clients SET name = ?3, tax_id = ?4, email = ?5, address = ?6, updated_at = ?7
             WHERE book = ?1 AND id = ?2",
        )
        .or_store()?
        .execute(params![
            book, c.id, c.name, c.tax_id, c.email, c.address, now
        ])
        .or_store()?;
    Ok(())
}

/// Deletes a client (the caller has checked it has no invoices).
pub fn delete_client(tx: &Tx<'_>, book: &str, id: &str) -> DbResult<()> {
    tx.sql()
        .prepare_cached("DELETE FROM clients WHERE book = ?1 AND id = ?2")
        .or_store()?
        .execute([book, id])
        .or_store()?;
    Ok(())
}

/// How many invoices (of any status) a client has, and how much it owes on issued ones.
pub fn client_activity(conn: &Conn<'_>, book: &str, id: &str) -> DbResult<(i64, i64)> {
    let mut stmt = conn
        .sql()
        .prepare_cached(
            "SELECT count(*),
                coalesce(sum(CASE WHEN status = 'issued' AND total_cents > paid_cents
                                  THEN total_cents - paid_cents END), 0)
         FROM invoices WHERE book = ?1 AND client_id = ?2",
        )
        .or_store()?;
    stmt.query_row([book, id], |r| Ok((r.get(0)?, r.get(1)?)))
        .or_store()
}

/// A page of clients, newest first, optionally matching `query` in name, tax id or email.
pub fn search_clients(
    conn: &Conn<'_>,
    book: &str,
    query: Option<&str>,
    starting_after: Option<&str>,
    limit: usize,
) -> DbResult<Vec<ClientRow>> {
    let pattern = query.map(|q| format!("%{}%", escape_like(q)));
    let mut stmt = conn
        .sql()
        .prepare_cached(&format!(
            "{CLIENT_SELECT}
         WHERE book = ?1
           AND (?2 IS NULL OR name LIKE ?2 ESCAPE '\\' OR tax_id LIKE ?2 ESCAPE '\\'
                OR email LIKE ?2 ESCAPE '\\')
           AND (?3 IS NULL OR id < ?3)
         ORDER BY id DESC LIMIT ?4 + 0"
        ))
        .or_store()?;
    let rows = stmt
        .query_map(
            params![book, pattern, starting_after, limit_param(limit)],
            client_from_row,
        )
        .or_store()?;
    rows.collect::<Result<_, _>>().or_store()
}

fn escape_like(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

pub(super) fn limit_param(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

// ---- Series ---------------------------------------------------------------------------------

/// The latest issue date of a series, if it has issued anything.
pub fn series_last_issue_date(conn: &Conn<'_>, book: &str, code: &str) -> DbResult<Option<String>> {
    let mut stmt = conn
        .sql()
        .prepare_cached("SELECT last_issue_date FROM invoice_series WHERE book = ?1 AND code = ?2")
        .or_store()?;
    Ok(stmt
        .query_row([book, code], |r| r.get::<_, Option<String>>(0))
        .optional()
        .or_store()?
        .flatten())
}

/// Takes the next number of a series for an invoice issued on `issue_date`; the caller has
/// checked that the date does not go backwards.
pub fn next_number(tx: &Tx<'_>, book: &str, code: &str, issue_date: &str) -> DbResult<i64> {
    tx.sql()
        .prepare_cached(
            "INSERT INTO invoice_series (book, code, last_number, last_issue_date)
             VALUES (?1, ?2, 1, ?3)
             ON CONFLICT (book, code) DO UPDATE SET last_number = last_number + 1,
                 last_issue_date = max(coalesce(last_issue_date, ''), excluded.last_issue_date)
             RETURNING last_number",
        )
        .or_store()?
        .query_row(params![book, code, issue_date], |r| r.get(0))
        .or_store()
}

// ---- Payments and outbox -------------------------------------------------------------------

/// A row of `payments`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentRow {
    /// `pay_…`.
    pub id: String,
    /// The invoice it pays.
    pub invoice_id: String,
    /// Amount.
    pub amount_cents: i64,
    /// ISO currency.
    pub currency: String,
    /// `YYYY-MM-DD`.
    pub paid_on: String,
    /// Payment method word.
    pub method: String,
    /// Free reference.
    pub reference: Option<String>,
}

/// Records a payment and adds it to the invoice; the invoice becomes `paid` when settled.
pub fn insert_payment(tx: &Tx<'_>, book: &str, p: &PaymentRow, now: i64) -> DbResult<()> {
    let conn = tx.sql();
    conn.prepare_cached(
        "INSERT INTO payments (book, id, invoice_id, amount_cents, currency, paid_on, method,
            reference, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )
    .or_store()?
    .execute(params![
        book,
        p.id,
        p.invoice_id,
        p.amount_cents,
        p.currency,
        p.paid_on,
        p.method,
        p.reference,
        now
    ])
    .or_store()?;
    conn.prepare_cached(
        "UPDATE invoices SET paid_cents = paid_cents + ?3,
            status = CASE WHEN paid_cents + ?3 >= total_cents THEN 'paid' ELSE status END,
            updated_at = ?4
         WHERE book = ?1 AND id = ?2",
    )
    .or_store()?
    .execute(params![book, p.invoice_id, p.amount_cents, now])
    .or_store()?;
    Ok(())
}

fn payment_from_row(row: &Row<'_>) -> rusqlite::Result<PaymentRow> {
    Ok(PaymentRow {
        id: row.get(0)?,
        invoice_id: row.get(1)?,
        amount_cents: row.get(2)?,
        currency: row.get(3)?,
        paid_on: row.get(4)?,
        method: row.get(5)?,
        reference: row.get(6)?,
    })
}

/// A page of payments, newest first, optionally of one invoice.
pub fn payments(
    conn: &Conn<'_>,
    book: &str,
    invoice_id: Option<&str>,
    starting_after: Option<&str>,
    limit: usize,
) -> DbResult<Vec<PaymentRow>> {
    // Two statements rather than `?1 IS NULL OR invoice_id = ?1`, which SQLite cannot
    // answer from the `payments_by_invoice` index: one invoice's payments must not scan
    // every payment of the book. (`?1 IS NULL` in the second keeps one parameter list.)
    let mut stmt = conn
        .sql()
        .prepare_cached(if invoice_id.is_some() {
            "SELECT id, invoice_id, amount_cents, currency, paid_on, method, reference
         FROM payments
         WHERE book = ?4 AND invoice_id = ?1 AND (?2 IS NULL OR id < ?2)
         ORDER BY id DESC LIMIT ?3 + 0"
        } else {
            "SELECT id, invoice_id, amount_cents, currency, paid_on, method, reference
         FROM payments
         WHERE book = ?4 AND ?1 IS NULL AND (?2 IS NULL OR id < ?2)
         ORDER BY id DESC LIMIT ?3 + 0"
        })
        .or_store()?;
    let rows = stmt
        .query_map(
            params![invoice_id, starting_after, limit_param(limit), book],
            payment_from_row,
        )
        .or_store()?;
    rows.collect::<Result<_, _>>().or_store()
}

/// An e-mail to queue in the outbox.
pub struct OutboxMessage<'a> {
    /// The address it goes to.
    pub recipient: &'a str,
    /// Its subject line.
    pub subject: &'a str,
    /// Its text.
    pub body: &'a str,
}

/// Queues message `id` for an invoice: `pending` for a relay in the live book,
/// `sandboxed` (never delivered) in the test book. Returns when it was queued.
pub fn insert_outbox(
    tx: &Tx<'_>,
    book: &str,
    id: &str,
    invoice_id: &str,
    message: &OutboxMessage<'_>,
    now: i64,
) -> DbResult<i64> {
    tx.sql()
        .prepare_cached(
            "INSERT INTO outbox (book, id, invoice_id, recipient, subject, body, state,
                created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6,
                     CASE ?1 WHEN 'test' THEN 'sandboxed' ELSE 'pending' END, ?7)",
        )
        .or_store()?
        .execute(params![
            book,
            id,
            invoice_id,
            message.recipient,
            message.subject,
            message.body,
            now
        ])
        .or_store()?;
    Ok(now)
}

// ---- Books ------------------------------------------------------------------------------------

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
            let count: i64 = conn
                .sql()
                .prepare_cached(&format!("SELECT count(*) FROM {table} WHERE book = ?1"))
                .or_store()?
                .query_row([book], |r| r.get(0))
                .or_store()?;
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
        tx.sql()
            .execute(&format!("DELETE FROM {table} WHERE book = 'test'"), [])
            .or_store()?;
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
            let copied = tx
                .sql()
                .execute(
                    &format!(
                        "INSERT INTO {table} (book, {columns})
                     SELECT 'test', {columns} FROM {table} WHERE book = 'live'"
                    ),
                    [],
                )
                .or_store()?;
            Ok((*table, i64::try_from(copied).unwrap_or(i64::MAX)))
        })
        .collect()
}
