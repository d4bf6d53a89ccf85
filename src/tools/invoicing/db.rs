//! The SQL of the invoicing tables (`schema.sql`, last section, in two books since schema
//! version 3: `migrations/books.sql`). Every function takes a connection handed out by
//! [`crate::store::Store`] (a plain one for reads, the tool's `BEGIN IMMEDIATE`
//! transaction for writes) and the [`Book`] of the caller; every statement is confined to
//! that book, so a test key never reads or writes a live row. None opens the database.
//! Writes stamp their rows with the `now` (unix seconds) the caller read from its clock.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::model::{
    Client, ClientId, Invoice, InvoiceId, InvoiceKind, InvoiceStatus, Line, OutboxId, Payment,
    PaymentId, PaymentMethod,
};
use super::money::{LineAmounts, LinePricing, Totals};
use crate::store::StoreError;
use crate::tools::Book;

/// Result of the queries here.
pub type DbResult<T> = Result<T, StoreError>;

/// The company's ISO country code (decides the legal VAT rates); `ES` before `init`.
pub fn company_country(conn: &Connection) -> DbResult<String> {
    let country: Option<String> = conn
        .prepare_cached("SELECT country FROM company WHERE id = 1")?
        .query_row([], |r| r.get(0))
        .optional()?;
    Ok(country.unwrap_or_else(|| "ES".to_owned()))
}

// ---- Clients ------------------------------------------------------------------------------

const CLIENT_SELECT: &str = "SELECT id, name, tax_id, email, address FROM clients";
// Every statement below names the book as `?1`.

fn client_from_row(row: &Row<'_>) -> rusqlite::Result<Client> {
    Ok(Client {
        id: ClientId::from_db(row.get(0)?),
        name: row.get(1)?,
        tax_id: row.get(2)?,
        email: row.get(3)?,
        address: row.get(4)?,
    })
}

/// One client.
pub fn client(conn: &Connection, book: Book, id: &ClientId) -> DbResult<Option<Client>> {
    let mut stmt = conn.prepare_cached(&format!("{CLIENT_SELECT} WHERE book = ?1 AND id = ?2"))?;
    Ok(stmt
        .query_row([book.as_str(), id.as_str()], client_from_row)
        .optional()?)
}

/// The client holding `tax_id` (normalised), if any.
pub fn client_with_tax_id(
    conn: &Connection,
    book: Book,
    tax_id: &str,
) -> DbResult<Option<ClientId>> {
    let mut stmt = conn.prepare_cached("SELECT id FROM clients WHERE book = ?1 AND tax_id = ?2")?;
    let id: Option<String> = stmt
        .query_row([book.as_str(), tax_id], |r| r.get(0))
        .optional()?;
    Ok(id.map(ClientId::from_db))
}

/// Inserts a new client.
pub fn insert_client(conn: &Connection, book: Book, c: &Client, now: i64) -> DbResult<()> {
    conn.prepare_cached(
        "INSERT INTO clients (book, id, name, tax_id, email, address, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
    )?
    .execute(params![
        book.as_str(),
        c.id.as_str(),
        c.name,
        c.tax_id,
        c.email,
        c.address,
        now
    ])?;
    Ok(())
}

/// Saves every field of an existing client.
pub fn update_client(conn: &Connection, book: Book, c: &Client, now: i64) -> DbResult<()> {
    conn.prepare_cached(
        "UPDATE clients SET name = ?3, tax_id = ?4, email = ?5, address = ?6, updated_at = ?7
         WHERE book = ?1 AND id = ?2",
    )?
    .execute(params![
        book.as_str(),
        c.id.as_str(),
        c.name,
        c.tax_id,
        c.email,
        c.address,
        now
    ])?;
    Ok(())
}

/// Deletes a client (the caller has checked it has no invoices).
pub fn delete_client(conn: &Connection, book: Book, id: &ClientId) -> DbResult<()> {
    conn.prepare_cached("DELETE FROM clients WHERE book = ?1 AND id = ?2")?
        .execute([book.as_str(), id.as_str()])?;
    Ok(())
}

/// How many invoices (of any status) a client has, and how much it owes on issued ones.
pub fn client_activity(conn: &Connection, book: Book, id: &ClientId) -> DbResult<(i64, i64)> {
    let mut stmt = conn.prepare_cached(
        "SELECT count(*),
                coalesce(sum(CASE WHEN status = 'issued' AND total_cents > paid_cents
                                  THEN total_cents - paid_cents END), 0)
         FROM invoices WHERE book = ?1 AND client_id = ?2",
    )?;
    Ok(stmt.query_row([book.as_str(), id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))?)
}

/// A page of clients, newest first, optionally matching `query` in name, tax id or email.
pub fn search_clients(
    conn: &Connection,
    book: Book,
    query: Option<&str>,
    starting_after: Option<&ClientId>,
    limit: usize,
) -> DbResult<Vec<Client>> {
    let pattern = query.map(|q| format!("%{}%", escape_like(q)));
    let mut stmt = conn.prepare_cached(&format!(
        "{CLIENT_SELECT}
         WHERE book = ?1
           AND (?2 IS NULL OR name LIKE ?2 ESCAPE '\\' OR tax_id LIKE ?2 ESCAPE '\\'
                OR email LIKE ?2 ESCAPE '\\')
           AND (?3 IS NULL OR id < ?3)
         ORDER BY id DESC LIMIT ?4 + 0"
    ))?;
    let rows = stmt.query_map(
        params![
            book.as_str(),
            pattern,
            starting_after.map(ClientId::as_str),
            limit_param(limit)
        ],
        client_from_row,
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn escape_like(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

fn limit_param(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

// ---- Invoices -----------------------------------------------------------------------------

const INVOICE_SELECT: &str = "SELECT i.id, i.client_id, c.name, i.kind, i.status, i.series,
        i.number, i.issue_date, i.due_date, i.currency, i.notes, i.gross_cents,
        i.discount_cents, i.subtotal_cents, i.vat_cents, i.withholding_cents, i.total_cents,
        i.paid_cents, i.recipient_name, i.recipient_tax_id, i.rectifies_id, i.rectified_by_id,
        i.void_reason
     FROM invoices i JOIN clients c ON c.book = i.book AND c.id = i.client_id";

// Paginated queries end in `LIMIT ?N + 0`, not `LIMIT ?N`: SQLite plans `ORDER BY … LIMIT`
// with the bound limit's value and so prepares such a statement anew on every run, which
// made reading one invoice cost more than the rest of the call.

fn word<T>(row: &Row<'_>, idx: usize, parse: fn(&str) -> Option<T>) -> rusqlite::Result<T> {
    let text: String = row.get(idx)?;
    parse(&text).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            idx,
            rusqlite::types::Type::Text,
            format!("unexpected value {text:?}").into(),
        )
    })
}

fn invoice_from_row(row: &Row<'_>) -> rusqlite::Result<Invoice> {
    Ok(Invoice {
        id: InvoiceId::from_db(row.get(0)?),
        client_id: ClientId::from_db(row.get(1)?),
        client_name: row.get(2)?,
        kind: word(row, 3, InvoiceKind::parse)?,
        status: word(row, 4, InvoiceStatus::parse)?,
        series: row.get(5)?,
        number: row.get(6)?,
        issue_date: row.get(7)?,
        due_date: row.get(8)?,
        currency: row.get(9)?,
        notes: row.get(10)?,
        totals: Totals {
            gross_cents: row.get(11)?,
            discount_cents: row.get(12)?,
            subtotal_cents: row.get(13)?,
            vat_cents: row.get(14)?,
            withholding_cents: row.get(15)?,
            total_cents: row.get(16)?,
        },
        paid_cents: row.get(17)?,
        recipient_name: row.get(18)?,
        recipient_tax_id: row.get(19)?,
        rectifies_id: row.get::<_, Option<String>>(20)?.map(InvoiceId::from_db),
        rectified_by_id: row.get::<_, Option<String>>(21)?.map(InvoiceId::from_db),
        void_reason: row.get(22)?,
        lines: Vec::new(),
    })
}

fn line_from_row(row: &Row<'_>) -> rusqlite::Result<Line> {
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
pub fn invoice(conn: &Connection, book: Book, id: &InvoiceId) -> DbResult<Option<Invoice>> {
    let mut stmt =
        conn.prepare_cached(&format!("{INVOICE_SELECT} WHERE i.book = ?1 AND i.id = ?2"))?;
    let found = stmt
        .query_row([book.as_str(), id.as_str()], invoice_from_row)
        .optional()?;
    let Some(mut invoice) = found else {
        return Ok(None);
    };
    let mut lines = conn.prepare_cached(
        "SELECT description, quantity, unit_price_cents, discount_percent, vat_rate,
                withholding_rate, gross_cents, discount_cents, net_cents, vat_cents,
                withholding_cents, total_cents
         FROM invoice_lines WHERE book = ?1 AND invoice_id = ?2 ORDER BY position",
    )?;
    invoice.lines = lines
        .query_map([book.as_str(), id.as_str()], line_from_row)?
        .collect::<Result<_, _>>()?;
    Ok(Some(invoice))
}

/// The number of an invoice, if it exists and is numbered.
pub fn invoice_number(conn: &Connection, book: Book, id: &InvoiceId) -> DbResult<Option<String>> {
    let mut stmt =
        conn.prepare_cached("SELECT number FROM invoices WHERE book = ?1 AND id = ?2")?;
    Ok(stmt
        .query_row([book.as_str(), id.as_str()], |r| {
            r.get::<_, Option<String>>(0)
        })
        .optional()?
        .flatten())
}

fn insert_lines(conn: &Connection, book: Book, id: &InvoiceId, lines: &[Line]) -> DbResult<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO invoice_lines (book, invoice_id, position, description, quantity,
            unit_price_cents, discount_percent, vat_rate, withholding_rate, gross_cents,
            discount_cents, net_cents, vat_cents, withholding_cents, total_cents)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    )?;
    for (i, line) in lines.iter().enumerate() {
        let (p, a) = (&line.pricing, &line.amounts);
        stmt.execute(params![
            book.as_str(),
            id.as_str(),
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
        ])?;
    }
    Ok(())
}

/// Inserts a new invoice and its lines (any status; issue fields as given).
pub fn insert_invoice(conn: &Connection, book: Book, inv: &Invoice, now: i64) -> DbResult<()> {
    let t = &inv.totals;
    let issued_at = (inv.status != InvoiceStatus::Draft).then_some(now);
    conn.prepare_cached(
        "INSERT INTO invoices (book, id, client_id, kind, status, series, number, issue_date,
            due_date, currency, notes, gross_cents, discount_cents, subtotal_cents, vat_cents,
            withholding_cents, total_cents, paid_cents, recipient_name, recipient_tax_id,
            rectifies_id, issued_at, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                 ?18, ?19, ?20, ?21, ?22, ?23, ?23)",
    )?
    .execute(params![
        book.as_str(),
        inv.id.as_str(),
        inv.client_id.as_str(),
        inv.kind.as_str(),
        inv.status.as_str(),
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
        inv.rectifies_id.as_ref().map(InvoiceId::as_str),
        issued_at,
        now
    ])?;
    insert_lines(conn, book, &inv.id, &inv.lines)
}

/// Rewrites a draft: its editable fields, totals and lines.
pub fn save_draft(conn: &Connection, book: Book, inv: &Invoice, now: i64) -> DbResult<()> {
    let t = &inv.totals;
    conn.prepare_cached(
        "UPDATE invoices SET client_id = ?3, kind = ?4, series = ?5, issue_date = ?6,
            due_date = ?7, notes = ?8, gross_cents = ?9, discount_cents = ?10,
            subtotal_cents = ?11, vat_cents = ?12, withholding_cents = ?13, total_cents = ?14,
            updated_at = ?15
         WHERE book = ?1 AND id = ?2 AND status = 'draft'",
    )?
    .execute(params![
        book.as_str(),
        inv.id.as_str(),
        inv.client_id.as_str(),
        inv.kind.as_str(),
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
    ])?;
    conn.prepare_cached("DELETE FROM invoice_lines WHERE book = ?1 AND invoice_id = ?2")?
        .execute([book.as_str(), inv.id.as_str()])?;
    insert_lines(conn, book, &inv.id, &inv.lines)
}

/// Turns a draft into an issued invoice with its number, dates and recipient snapshot.
pub fn mark_issued(conn: &Connection, book: Book, inv: &Invoice, now: i64) -> DbResult<()> {
    conn.prepare_cached(
        "UPDATE invoices SET status = 'issued', number = ?3, issue_date = ?4, due_date = ?5,
            recipient_name = ?6, recipient_tax_id = ?7, issued_at = ?8, updated_at = ?8
         WHERE book = ?1 AND id = ?2 AND status = 'draft'",
    )?
    .execute(params![
        book.as_str(),
        inv.id.as_str(),
        inv.number,
        inv.issue_date,
        inv.due_date,
        inv.recipient_name,
        inv.recipient_tax_id,
        now
    ])?;
    Ok(())
}

/// Marks an invoice void, pointing at its rectifying invoice.
pub fn mark_void(
    conn: &Connection,
    book: Book,
    id: &InvoiceId,
    reason: &str,
    by: &InvoiceId,
    now: i64,
) -> DbResult<()> {
    conn.prepare_cached(
        "UPDATE invoices SET status = 'void', void_reason = ?3, rectified_by_id = ?4,
            voided_at = ?5, updated_at = ?5
         WHERE book = ?1 AND id = ?2",
    )?
    .execute(params![
        book.as_str(),
        id.as_str(),
        reason,
        by.as_str(),
        now
    ])?;
    Ok(())
}

/// Deletes a draft and its lines.
pub fn delete_draft(conn: &Connection, book: Book, id: &InvoiceId) -> DbResult<()> {
    conn.prepare_cached("DELETE FROM invoices WHERE book = ?1 AND id = ?2 AND status = 'draft'")?
        .execute([book.as_str(), id.as_str()])?;
    Ok(())
}

/// Filters of `search_invoices`.
#[derive(Debug, Default)]
pub struct InvoiceFilter<'a> {
    /// Only this status.
    pub status: Option<InvoiceStatus>,
    /// Only this client's.
    pub client_id: Option<&'a ClientId>,
    /// Issue date on or after.
    pub date_from: Option<String>,
    /// Issue date on or before.
    pub date_to: Option<String>,
    /// Only overdue invoices on this date (issued, unpaid balance, due before it).
    pub overdue_on: Option<String>,
}

/// A page of invoices (summaries, no lines), newest first.
pub fn search_invoices(
    conn: &Connection,
    book: Book,
    filter: &InvoiceFilter<'_>,
    starting_after: Option<&InvoiceId>,
    limit: usize,
) -> DbResult<Vec<Invoice>> {
    let mut stmt = conn.prepare_cached(&format!(
        "{INVOICE_SELECT}
         WHERE i.book = ?8
           AND (?1 IS NULL OR i.status = ?1)
           AND (?2 IS NULL OR i.client_id = ?2)
           AND (?3 IS NULL OR i.issue_date >= ?3)
           AND (?4 IS NULL OR i.issue_date <= ?4)
           AND (?5 IS NULL OR (i.status = 'issued' AND i.total_cents > i.paid_cents
                               AND i.due_date < ?5))
           AND (?6 IS NULL OR i.id < ?6)
         ORDER BY i.id DESC LIMIT ?7 + 0"
    ))?;
    let rows = stmt.query_map(
        params![
            filter.status.map(InvoiceStatus::as_str),
            filter.client_id.map(ClientId::as_str),
            filter.date_from,
            filter.date_to,
            filter.overdue_on,
            starting_after.map(InvoiceId::as_str),
            limit_param(limit),
            book.as_str()
        ],
        invoice_from_row,
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Every non-draft invoice issued within `[from, to]`, by number, with an optional status.
pub fn invoices_issued_between(
    conn: &Connection,
    book: Book,
    from: &str,
    to: &str,
    status: Option<InvoiceStatus>,
) -> DbResult<Vec<Invoice>> {
    let mut stmt = conn.prepare_cached(&format!(
        "{INVOICE_SELECT}
         WHERE i.book = ?4 AND i.status <> 'draft' AND i.issue_date >= ?1
           AND i.issue_date <= ?2 AND (?3 IS NULL OR i.status = ?3)
         ORDER BY i.series, i.number"
    ))?;
    let rows = stmt.query_map(
        params![from, to, status.map(InvoiceStatus::as_str), book.as_str()],
        invoice_from_row,
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

// ---- Series ---------------------------------------------------------------------------------

/// The latest issue date of a series, if it has issued anything.
pub fn series_last_issue_date(
    conn: &Connection,
    book: Book,
    code: &str,
) -> DbResult<Option<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT last_issue_date FROM invoice_series WHERE book = ?1 AND code = ?2",
    )?;
    Ok(stmt
        .query_row([book.as_str(), code], |r| r.get::<_, Option<String>>(0))
        .optional()?
        .flatten())
}

/// Takes the next number of a series for an invoice issued on `issue_date`; the caller has
/// checked that the date does not go backwards.
pub fn next_number(
    conn: &Connection,
    book: Book,
    code: &str,
    issue_date: &str,
) -> DbResult<String> {
    let number: i64 = conn
        .prepare_cached(
            "INSERT INTO invoice_series (book, code, last_number, last_issue_date)
             VALUES (?1, ?2, 1, ?3)
             ON CONFLICT (book, code) DO UPDATE SET last_number = last_number + 1,
                 last_issue_date = max(coalesce(last_issue_date, ''), excluded.last_issue_date)
             RETURNING last_number",
        )?
        .query_row(params![book.as_str(), code, issue_date], |r| r.get(0))?;
    Ok(format!("{code}-{number:06}"))
}

// ---- Payments and outbox -------------------------------------------------------------------

/// Records a payment and adds it to the invoice; the invoice becomes `paid` when settled.
pub fn insert_payment(conn: &Connection, book: Book, p: &Payment, now: i64) -> DbResult<()> {
    conn.prepare_cached(
        "INSERT INTO payments (book, id, invoice_id, amount_cents, currency, paid_on, method,
            reference, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        book.as_str(),
        p.id.as_str(),
        p.invoice_id.as_str(),
        p.amount_cents,
        p.currency,
        p.paid_on,
        p.method.as_str(),
        p.reference,
        now
    ])?;
    conn.prepare_cached(
        "UPDATE invoices SET paid_cents = paid_cents + ?3,
            status = CASE WHEN paid_cents + ?3 >= total_cents THEN 'paid' ELSE status END,
            updated_at = ?4
         WHERE book = ?1 AND id = ?2",
    )?
    .execute(params![
        book.as_str(),
        p.invoice_id.as_str(),
        p.amount_cents,
        now
    ])?;
    Ok(())
}

fn payment_from_row(row: &Row<'_>) -> rusqlite::Result<Payment> {
    Ok(Payment {
        id: PaymentId::from_db(row.get(0)?),
        invoice_id: InvoiceId::from_db(row.get(1)?),
        amount_cents: row.get(2)?,
        currency: row.get(3)?,
        paid_on: row.get(4)?,
        method: word(row, 5, PaymentMethod::parse)?,
        reference: row.get(6)?,
    })
}

/// A page of payments, newest first, optionally of one invoice.
pub fn payments(
    conn: &Connection,
    book: Book,
    invoice_id: Option<&InvoiceId>,
    starting_after: Option<&PaymentId>,
    limit: usize,
) -> DbResult<Vec<Payment>> {
    // Two statements rather than `?1 IS NULL OR invoice_id = ?1`, which SQLite cannot
    // answer from the `payments_by_invoice` index: one invoice's payments must not scan
    // every payment of the book. (`?1 IS NULL` in the second keeps one parameter list.)
    let mut stmt = conn.prepare_cached(if invoice_id.is_some() {
        "SELECT id, invoice_id, amount_cents, currency, paid_on, method, reference
         FROM payments
         WHERE book = ?4 AND invoice_id = ?1 AND (?2 IS NULL OR id < ?2)
         ORDER BY id DESC LIMIT ?3 + 0"
    } else {
        "SELECT id, invoice_id, amount_cents, currency, paid_on, method, reference
         FROM payments
         WHERE book = ?4 AND ?1 IS NULL AND (?2 IS NULL OR id < ?2)
         ORDER BY id DESC LIMIT ?3 + 0"
    })?;
    let rows = stmt.query_map(
        params![
            invoice_id.map(InvoiceId::as_str),
            starting_after.map(PaymentId::as_str),
            limit_param(limit),
            book.as_str()
        ],
        payment_from_row,
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
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

/// Queues a message for an invoice: `pending` for a relay in the live book, `sandboxed`
/// (never delivered) in the test book.
pub fn insert_outbox(
    conn: &Connection,
    book: Book,
    id: &OutboxId,
    invoice_id: &InvoiceId,
    message: &OutboxMessage<'_>,
    now: i64,
) -> DbResult<i64> {
    conn.prepare_cached(
        "INSERT INTO outbox (book, id, invoice_id, recipient, subject, body, state, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6,
                 CASE ?1 WHEN 'test' THEN 'sandboxed' ELSE 'pending' END, ?7)",
    )?
    .execute(params![
        book.as_str(),
        id.as_str(),
        invoice_id.as_str(),
        message.recipient,
        message.subject,
        message.body,
        now
    ])?;
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

/// How many rows of a book each business table holds, in [`BOOK_TABLES`] order.
pub fn book_counts(conn: &Connection, book: Book) -> DbResult<TableCounts> {
    BOOK_TABLES
        .iter()
        .map(|table| {
            let count: i64 = conn
                .prepare_cached(&format!("SELECT count(*) FROM {table} WHERE book = ?1"))?
                .query_row([book.as_str()], |r| r.get(0))?;
            Ok((*table, count))
        })
        .collect()
}

/// Whether a book holds no business row at all.
pub fn book_is_empty(conn: &Connection, book: Book) -> DbResult<bool> {
    Ok(book_counts(conn, book)?.iter().all(|(_, n)| *n == 0))
}

/// Deletes every business row of the test book. The live book is never emptied: there is
/// no `Book` parameter to get wrong.
pub fn clear_test_book(conn: &Connection) -> DbResult<()> {
    for table in BOOK_TABLES {
        conn.execute(&format!("DELETE FROM {table} WHERE book = 'test'"), [])?;
    }
    Ok(())
}

/// Copies the live book into an empty test book: clients, series (so numbering goes on
/// from where the live book is, gapless), invoices with their lines, and payments, under
/// the same ids. The outbox is not copied: nothing queued for the live book is queued
/// again. Returns how many rows of each table were copied.
pub fn copy_live_into_test(conn: &Connection) -> DbResult<TableCounts> {
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
            let copied = conn.execute(
                &format!(
                    "INSERT INTO {table} (book, {columns})
                     SELECT 'test', {columns} FROM {table} WHERE book = 'live'"
                ),
                [],
            )?;
            Ok((*table, i64::try_from(copied).unwrap_or(i64::MAX)))
        })
        .collect()
}
