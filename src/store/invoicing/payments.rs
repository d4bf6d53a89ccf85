//! The `payments` and `outbox` tables: payments recorded against an invoice (which settle
//! it), and the messages queued for sending.

use super::super::sql::{Row, args};
use super::super::{Conn, Tx};
use super::model::{InvoiceId, OutboxId, Payment, PaymentId};
use super::{DbResult, limit_param};

/// Records a payment and adds it to the invoice; the invoice becomes `paid` when settled.
pub fn insert_payment(tx: &Tx<'_>, book: &str, p: &Payment, now: i64) -> DbResult<()> {
    tx.execute(
        "INSERT INTO payments (book, id, invoice_id, amount_cents, currency, paid_on, method,
            reference, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        args![
            book,
            p.id,
            p.invoice_id,
            p.amount_cents,
            p.currency,
            p.paid_on,
            p.method,
            p.reference,
            now
        ],
    )?;
    tx.execute(
        "UPDATE invoices SET paid_cents = paid_cents + ?3,
            status = CASE WHEN paid_cents + ?3 >= total_cents THEN 'paid' ELSE status END,
            updated_at = ?4
         WHERE book = ?1 AND id = ?2",
        args![book, p.invoice_id, p.amount_cents, now],
    )?;
    Ok(())
}

fn payment_from_row(row: &Row<'_>) -> DbResult<Payment> {
    Ok(Payment {
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
    invoice_id: Option<&InvoiceId>,
    starting_after: Option<&PaymentId>,
    limit: usize,
) -> DbResult<Vec<Payment>> {
    // Two statements rather than `?1 IS NULL OR invoice_id = ?1`, which SQLite cannot
    // answer from the `payments_by_invoice` index: one invoice's payments must not scan
    // every payment of the book. (`?1 IS NULL` in the second keeps one parameter list.)
    let sql = if invoice_id.is_some() {
        "SELECT id, invoice_id, amount_cents, currency, paid_on, method, reference
         FROM payments
         WHERE book = ?4 AND invoice_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR id < ?2)
         ORDER BY id DESC LIMIT CAST(?3 AS BIGINT) + 0"
    } else {
        "SELECT id, invoice_id, amount_cents, currency, paid_on, method, reference
         FROM payments
         WHERE book = ?4 AND CAST(?1 AS TEXT) IS NULL
           AND (CAST(?2 AS TEXT) IS NULL OR id < ?2)
         ORDER BY id DESC LIMIT CAST(?3 AS BIGINT) + 0"
    };
    conn.query_all(
        sql,
        args![invoice_id, starting_after, limit_param(limit), book],
        payment_from_row,
    )
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
    id: &OutboxId,
    invoice_id: &InvoiceId,
    message: &OutboxMessage<'_>,
    now: i64,
) -> DbResult<i64> {
    tx.execute(
        "INSERT INTO outbox (book, id, invoice_id, recipient, subject, body, state,
            created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6,
                 CASE ?1 WHEN 'test' THEN 'sandboxed' ELSE 'pending' END, ?7)",
        args![
            book,
            id,
            invoice_id,
            message.recipient,
            message.subject,
            message.body,
            now
        ],
    )?;
    Ok(now)
}
