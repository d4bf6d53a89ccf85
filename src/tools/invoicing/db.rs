//! The invoicing pack's model over its tables: each function turns the model into the
//! store's rows and back, around one function of [`crate::store::invoicing`] (which holds
//! the SQL). Every function takes a connection handed out by the store (a plain
//! [`Conn`] for reads, the tool's [`Tx`] for writes) and the [`Book`] of the caller. None
//! opens the database. Writes stamp their rows with the `now` (unix seconds) the caller
//! read from its clock.

use super::model::{
    Client, ClientId, Invoice, InvoiceId, InvoiceKind, InvoiceStatus, Line, OutboxId, Payment,
    PaymentId, PaymentMethod,
};
use super::money::{LineAmounts, LinePricing, Totals};
use crate::store::invoicing::{self as rows, AmountColumns, ClientRow, InvoiceRow, LineRow};
pub use crate::store::invoicing::{DbResult, OutboxMessage, TableCounts};
use crate::store::{Conn, StoreError, Tx};
use crate::tools::Book;

/// The company's ISO country code (decides the legal VAT rates); `ES` before `init`.
pub fn company_country(conn: &Conn<'_>) -> DbResult<String> {
    Ok(rows::company_country(conn)?.unwrap_or_else(|| "ES".to_owned()))
}

/// A stored word the model does not know: the row is damaged.
fn word<T>(text: &str, parse: fn(&str) -> Option<T>) -> DbResult<T> {
    parse(text).ok_or_else(|| StoreError::Corrupt(format!("unexpected value {text:?}")))
}

// ---- Clients ------------------------------------------------------------------------------

fn client_from_row(row: ClientRow) -> Client {
    Client {
        id: ClientId::from_db(row.id),
        name: row.name,
        tax_id: row.tax_id,
        email: row.email,
        address: row.address,
    }
}

fn client_row(c: &Client) -> ClientRow {
    ClientRow {
        id: c.id.as_str().to_owned(),
        name: c.name.clone(),
        tax_id: c.tax_id.clone(),
        email: c.email.clone(),
        address: c.address.clone(),
    }
}

/// One client.
pub fn client(conn: &Conn<'_>, book: Book, id: &ClientId) -> DbResult<Option<Client>> {
    Ok(rows::client(conn, book.as_str(), id.as_str())?.map(client_from_row))
}

/// The client holding `tax_id` (normalised), if any.
pub fn client_with_tax_id(conn: &Conn<'_>, book: Book, tax_id: &str) -> DbResult<Option<ClientId>> {
    Ok(rows::client_with_tax_id(conn, book.as_str(), tax_id)?.map(ClientId::from_db))
}

/// Inserts a new client.
pub fn insert_client(tx: &Tx<'_>, book: Book, c: &Client, now: i64) -> DbResult<()> {
    rows::insert_client(tx, book.as_str(), &client_row(c), now)
}

/// Saves every field of an existing client.
pub fn update_client(tx: &Tx<'_>, book: Book, c: &Client, now: i64) -> DbResult<()> {
    rows::update_client(tx, book.as_str(), &client_row(c), now)
}

/// Deletes a client (the caller has checked it has no invoices).
pub fn delete_client(tx: &Tx<'_>, book: Book, id: &ClientId) -> DbResult<()> {
    rows::delete_client(tx, book.as_str(), id.as_str())
}

/// How many invoices (of any status) a client has, and how much it owes on issued ones.
pub fn client_activity(conn: &Conn<'_>, book: Book, id: &ClientId) -> DbResult<(i64, i64)> {
    rows::client_activity(conn, book.as_str(), id.as_str())
}

/// A page of clients, newest first, optionally matching `query` in name, tax id or email.
pub fn search_clients(
    conn: &Conn<'_>,
    book: Book,
    query: Option<&str>,
    starting_after: Option<&ClientId>,
    limit: usize,
) -> DbResult<Vec<Client>> {
    let after = starting_after.map(ClientId::as_str);
    let found = rows::search_clients(conn, book.as_str(), query, after, limit)?;
    Ok(found.into_iter().map(client_from_row).collect())
}

// ---- Invoices -----------------------------------------------------------------------------

fn totals_from(a: AmountColumns) -> Totals {
    Totals {
        gross_cents: a.gross_cents,
        discount_cents: a.discount_cents,
        subtotal_cents: a.net_cents,
        vat_cents: a.vat_cents,
        withholding_cents: a.withholding_cents,
        total_cents: a.total_cents,
    }
}

fn totals_columns(t: &Totals) -> AmountColumns {
    AmountColumns {
        gross_cents: t.gross_cents,
        discount_cents: t.discount_cents,
        net_cents: t.subtotal_cents,
        vat_cents: t.vat_cents,
        withholding_cents: t.withholding_cents,
        total_cents: t.total_cents,
    }
}

fn line_from_row(row: LineRow) -> Line {
    let a = row.amounts;
    Line {
        description: row.description,
        pricing: LinePricing {
            quantity: row.quantity,
            unit_price_cents: row.unit_price_cents,
            discount_percent: row.discount_percent,
            vat_rate: row.vat_rate,
            withholding_rate: row.withholding_rate,
        },
        amounts: LineAmounts {
            gross_cents: a.gross_cents,
            discount_cents: a.discount_cents,
            net_cents: a.net_cents,
            vat_cents: a.vat_cents,
            withholding_cents: a.withholding_cents,
            total_cents: a.total_cents,
        },
    }
}

fn line_row(line: &Line) -> LineRow {
    let (p, a) = (&line.pricing, &line.amounts);
    LineRow {
        description: line.description.clone(),
        quantity: p.quantity,
        unit_price_cents: p.unit_price_cents,
        discount_percent: p.discount_percent,
        vat_rate: p.vat_rate,
        withholding_rate: p.withholding_rate,
        amounts: AmountColumns {
            gross_cents: a.gross_cents,
            discount_cents: a.discount_cents,
            net_cents: a.net_cents,
            vat_cents: a.vat_cents,
            withholding_cents: a.withholding_cents,
            total_cents: a.total_cents,
        },
    }
}

fn invoice_from_row(row: InvoiceRow) -> DbResult<Invoice> {
    Ok(Invoice {
        id: InvoiceId::from_db(row.id),
        client_id: ClientId::from_db(row.client_id),
        client_name: row.client_name,
        kind: word(&row.kind, InvoiceKind::parse)?,
        status: word(&row.status, InvoiceStatus::parse)?,
        series: row.series,
        number: row.number,
        issue_date: row.issue_date,
        due_date: row.due_date,
        currency: row.currency,
        notes: row.notes,
        totals: totals_from(row.totals),
        paid_cents: row.paid_cents,
        recipient_name: row.recipient_name,
        recipient_tax_id: row.recipient_tax_id,
        rectifies_id: row.rectifies_id.map(InvoiceId::from_db),
        rectified_by_id: row.rectified_by_id.map(InvoiceId::from_db),
        void_reason: row.void_reason,
        lines: row.lines.into_iter().map(line_from_row).collect(),
    })
}

fn invoice_row(inv: &Invoice) -> InvoiceRow {
    InvoiceRow {
        id: inv.id.as_str().to_owned(),
        client_id: inv.client_id.as_str().to_owned(),
        client_name: inv.client_name.clone(),
        kind: inv.kind.as_str().to_owned(),
        status: inv.status.as_str().to_owned(),
        series: inv.series.clone(),
        number: inv.number.clone(),
        issue_date: inv.issue_date.clone(),
        due_date: inv.due_date.clone(),
        currency: inv.currency.clone(),
        notes: inv.notes.clone(),
        totals: totals_columns(&inv.totals),
        paid_cents: inv.paid_cents,
        recipient_name: inv.recipient_name.clone(),
        recipient_tax_id: inv.recipient_tax_id.clone(),
        rectifies_id: inv.rectifies_id.as_ref().map(|id| id.as_str().to_owned()),
        rectified_by_id: inv
            .rectified_by_id
            .as_ref()
            .map(|id| id.as_str().to_owned()),
        void_reason: inv.void_reason.clone(),
        lines: inv.lines.iter().map(line_row).collect(),
    }
}

fn invoices_from(found: Vec<InvoiceRow>) -> DbResult<Vec<Invoice>> {
    found.into_iter().map(invoice_from_row).collect()
}

/// One invoice with its lines.
pub fn invoice(conn: &Conn<'_>, book: Book, id: &InvoiceId) -> DbResult<Option<Invoice>> {
    rows::invoice(conn, book.as_str(), id.as_str())?
        .map(invoice_from_row)
        .transpose()
}

/// The number of an invoice, if it exists and is numbered.
pub fn invoice_number(conn: &Conn<'_>, book: Book, id: &InvoiceId) -> DbResult<Option<String>> {
    rows::invoice_number(conn, book.as_str(), id.as_str())
}

/// Inserts a new invoice and its lines (any status; issue fields as given).
pub fn insert_invoice(tx: &Tx<'_>, book: Book, inv: &Invoice, now: i64) -> DbResult<()> {
    rows::insert_invoice(tx, book.as_str(), &invoice_row(inv), now)
}

/// Rewrites a draft: its editable fields, totals and lines.
pub fn save_draft(tx: &Tx<'_>, book: Book, inv: &Invoice, now: i64) -> DbResult<()> {
    rows::save_draft(tx, book.as_str(), &invoice_row(inv), now)
}

/// Turns a draft into an issued invoice with its number, dates and recipient snapshot.
pub fn mark_issued(tx: &Tx<'_>, book: Book, inv: &Invoice, now: i64) -> DbResult<()> {
    rows::mark_issued(tx, book.as_str(), &invoice_row(inv), now)
}

/// Marks an invoice void, pointing at its rectifying invoice.
pub fn mark_void(
    tx: &Tx<'_>,
    book: Book,
    id: &InvoiceId,
    reason: &str,
    by: &InvoiceId,
    now: i64,
) -> DbResult<()> {
    rows::mark_void(tx, book.as_str(), id.as_str(), reason, by.as_str(), now)
}

/// Deletes a draft and its lines.
pub fn delete_draft(tx: &Tx<'_>, book: Book, id: &InvoiceId) -> DbResult<()> {
    rows::delete_draft(tx, book.as_str(), id.as_str())
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
    conn: &Conn<'_>,
    book: Book,
    filter: &InvoiceFilter<'_>,
    starting_after: Option<&InvoiceId>,
    limit: usize,
) -> DbResult<Vec<Invoice>> {
    let columns = rows::InvoiceFilter {
        status: filter.status.map(InvoiceStatus::as_str),
        client_id: filter.client_id.map(ClientId::as_str),
        date_from: filter.date_from.as_deref(),
        date_to: filter.date_to.as_deref(),
        overdue_on: filter.overdue_on.as_deref(),
    };
    let after = starting_after.map(InvoiceId::as_str);
    invoices_from(rows::search_invoices(
        conn,
        book.as_str(),
        &columns,
        after,
        limit,
    )?)
}

/// Every non-draft invoice issued within `[from, to]`, by number, with an optional status.
pub fn invoices_issued_between(
    conn: &Conn<'_>,
    book: Book,
    from: &str,
    to: &str,
    status: Option<InvoiceStatus>,
) -> DbResult<Vec<Invoice>> {
    let status = status.map(InvoiceStatus::as_str);
    invoices_from(rows::invoices_issued_between(
        conn,
        book.as_str(),
        from,
        to,
        status,
    )?)
}

// ---- Series ---------------------------------------------------------------------------------

/// The latest issue date of a series, if it has issued anything.
pub fn series_last_issue_date(conn: &Conn<'_>, book: Book, code: &str) -> DbResult<Option<String>> {
    rows::series_last_issue_date(conn, book.as_str(), code)
}

/// Takes the next number of a series for an invoice issued on `issue_date`; the caller has
/// checked that the date does not go backwards.
pub fn next_number(tx: &Tx<'_>, book: Book, code: &str, issue_date: &str) -> DbResult<String> {
    let number = rows::next_number(tx, book.as_str(), code, issue_date)?;
    Ok(format!("{code}-{number:06}"))
}

// ---- Payments and outbox -------------------------------------------------------------------

/// Records a payment and adds it to the invoice; the invoice becomes `paid` when settled.
pub fn insert_payment(tx: &Tx<'_>, book: Book, p: &Payment, now: i64) -> DbResult<()> {
    let row = rows::PaymentRow {
        id: p.id.as_str().to_owned(),
        invoice_id: p.invoice_id.as_str().to_owned(),
        amount_cents: p.amount_cents,
        currency: p.currency.clone(),
        paid_on: p.paid_on.clone(),
        method: p.method.as_str().to_owned(),
        reference: p.reference.clone(),
    };
    rows::insert_payment(tx, book.as_str(), &row, now)
}

fn payment_from_row(row: rows::PaymentRow) -> DbResult<Payment> {
    Ok(Payment {
        id: PaymentId::from_db(row.id),
        invoice_id: InvoiceId::from_db(row.invoice_id),
        amount_cents: row.amount_cents,
        currency: row.currency,
        paid_on: row.paid_on,
        method: word(&row.method, PaymentMethod::parse)?,
        reference: row.reference,
    })
}

/// A page of payments, newest first, optionally of one invoice.
pub fn payments(
    conn: &Conn<'_>,
    book: Book,
    invoice_id: Option<&InvoiceId>,
    starting_after: Option<&PaymentId>,
    limit: usize,
) -> DbResult<Vec<Payment>> {
    let of = invoice_id.map(InvoiceId::as_str);
    let after = starting_after.map(PaymentId::as_str);
    rows::payments(conn, book.as_str(), of, after, limit)?
        .into_iter()
        .map(payment_from_row)
        .collect()
}

/// Queues a message for an invoice: `pending` for a relay in the live book, `sandboxed`
/// (never delivered) in the test book.
pub fn insert_outbox(
    tx: &Tx<'_>,
    book: Book,
    id: &OutboxId,
    invoice_id: &InvoiceId,
    message: &OutboxMessage<'_>,
    now: i64,
) -> DbResult<i64> {
    rows::insert_outbox(
        tx,
        book.as_str(),
        id.as_str(),
        invoice_id.as_str(),
        message,
        now,
    )
}

// ---- Books ------------------------------------------------------------------------------------

/// How many rows of a book each business table holds.
pub fn book_counts(conn: &Conn<'_>, book: Book) -> DbResult<TableCounts> {
    rows::book_counts(conn, book.as_str())
}

/// Whether a book holds no business row at all.
pub fn book_is_empty(conn: &Conn<'_>, book: Book) -> DbResult<bool> {
    rows::book_is_empty(conn, book.as_str())
}

/// Deletes every business row of the test book (the live book is never emptied).
pub fn clear_test_book(tx: &Tx<'_>) -> DbResult<()> {
    rows::clear_test_book(tx)
}

/// Copies the live book into an empty test book (see
/// [`crate::store::invoicing::copy_live_into_test`]).
pub fn copy_live_into_test(tx: &Tx<'_>) -> DbResult<TableCounts> {
    rows::copy_live_into_test(tx)
}
