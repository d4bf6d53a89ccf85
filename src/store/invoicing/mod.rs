//! The invoicing tables (`schema.sql`, last section, in two books since schema version 3:
//! `migrations/books.sql`) and their only writer. Rows travel as plain column values; the
//! invoicing pack turns them into its model (ids, kinds, statuses, money). Every function
//! takes the book (`live` or `test`) of the caller and confines every statement to it, so
//! a test key never reads or writes a live row. Writes stamp their rows with the `now`
//! (unix seconds) the caller read from its clock.
//!
//! Here: clients, series, payments, the outbox and whole books; `invoices` holds the
//! invoices and their lines. Paginated queries end in `LIMIT CAST(?N AS BIGINT) + 0` (why:
//! `invoices`), and an optional filter `?N` is tested as `CAST(?N AS TEXT) IS NULL`: a bare
//! parameter under `IS NULL` has no type PostgreSQL can infer.

mod invoices;

pub use invoices::{
    AmountColumns, InvoiceFilter, InvoiceRow, LineRow, delete_draft, insert_invoice, invoice,
    invoice_number, invoices_issued_between, mark_issued, mark_void, save_draft, search_invoices,
};

use super::sql::{Dialect, Row, args};
use super::{Conn, StoreError, Tx};

/// Result of the queries here.
pub type DbResult<T> = Result<T, StoreError>;

/// The company's ISO country code (decides the legal VAT rates), if there is a company.
pub fn company_country(conn: &Conn<'_>) -> DbResult<Option<String>> {
    conn.query_opt("SELECT country FROM company WHERE id = 1", args![], |r| {
        r.get(0)
    })
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

// A macro rather than a `const`, so the statements built on it are literals (`concat!`).
macro_rules! client_select {
    () => {
        "SELECT id, name, tax_id, email, address FROM clients"
    };
}
// Every statement below names the book as `?1`.

fn client_from_row(row: &Row<'_>) -> DbResult<ClientRow> {
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
    conn.query_opt(
        concat!(client_select!(), " WHERE book = ?1 AND id = ?2"),
        args![book, id],
        client_from_row,
    )
}

/// The id of the client holding `tax_id` (normalised), if any.
pub fn client_with_tax_id(conn: &Conn<'_>, book: &str, tax_id: &str) -> DbResult<Option<String>> {
    conn.query_opt(
        "SELECT id FROM clients WHERE book = ?1 AND tax_id = ?2",
        args![book, tax_id],
        |r| r.get(0),
    )
}

/// Inserts a new client.
pub fn insert_client(tx: &Tx<'_>, book: &str, c: &ClientRow, now: i64) -> DbResult<()> {
    tx.execute(
        "INSERT INTO clients (book, id, name, tax_id, email, address, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
        args![book, c.id, c.name, c.tax_id, c.email, c.address, now],
    )?;
    Ok(())
}

/// Saves every field of an existing client.
pub fn update_client(tx: &Tx<'_>, book: &str, c: &ClientRow, now: i64) -> DbResult<()> {
    tx.execute(
        "UPDATE clients SET name = ?3, tax_id = ?4, email = ?5, address = ?6, updated_at = ?7
         WHERE book = ?1 AND id = ?2",
        args![book, c.id, c.name, c.tax_id, c.email, c.address, now],
    )?;
    Ok(())
}

/// Deletes a client (the caller has checked it has no invoices).
pub fn delete_client(tx: &Tx<'_>, book: &str, id: &str) -> DbResult<()> {
    tx.execute(
        "DELETE FROM clients WHERE book = ?1 AND id = ?2",
        args![book, id],
    )?;
    Ok(())
}

/// How many invoices (of any status) a client has, and how much it owes on issued ones.
pub fn client_activity(conn: &Conn<'_>, book: &str, id: &str) -> DbResult<(i64, i64)> {
    // `sum` of a BIGINT is NUMERIC on PostgreSQL: cast back.
    conn.query_one(
        "SELECT count(*),
            COALESCE(CAST(sum(CASE WHEN status = 'issued' AND total_cents > paid_cents
                                   THEN total_cents - paid_cents END) AS BIGINT), 0)
         FROM invoices WHERE book = ?1 AND client_id = ?2",
        args![book, id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// A page of clients, newest first, optionally matching `query` in name, tax id or email.
pub fn search_clients(
    conn: &Conn<'_>,
    book: &str,
    query: Option<&str>,
    starting_after: Option<&str>,
    limit: usize,
) -> DbResult<Vec<ClientRow>> {
    // SQLite's LIKE ignores the case of ASCII letters, PostgreSQL's does not: ILIKE there.
    macro_rules! search {
        ($like:literal) => {
            concat!(
                client_select!(),
                "
         WHERE book = ?1
           AND (CAST(?2 AS TEXT) IS NULL OR name ",
                $like,
                " ?2 ESCAPE '\\'
                OR tax_id ",
                $like,
                " ?2 ESCAPE '\\' OR email ",
                $like,
                " ?2 ESCAPE '\\')
           AND (CAST(?3 AS TEXT) IS NULL OR id < ?3)
         ORDER BY id DESC LIMIT CAST(?4 AS BIGINT) + 0"
            )
        };
    }
    let sql = match conn.dialect() {
        Dialect::Sqlite => search!("LIKE"),
        Dialect::Postgres => search!("ILIKE"),
    };
    let pattern = query.map(|q| format!("%{}%", escape_like(q)));
    conn.query_all(
        sql,
        args![book, pattern, starting_after, limit_param(limit)],
        client_from_row,
    )
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
    Ok(conn
        .query_opt(
            "SELECT last_issue_date FROM invoice_series WHERE book = ?1 AND code = ?2",
            args![book, code],
            |r| r.get::<Option<String>>(0),
        )?
        .flatten())
}

/// Takes the next number of a series for an invoice issued on `issue_date`; the caller has
/// checked that the date does not go backwards. The number is read and written by one
/// statement inside the caller's write transaction (which on PostgreSQL holds the store's
/// write lock), so numbers stay gapless and in issue-date order across every node.
pub fn next_number(tx: &Tx<'_>, book: &str, code: &str, issue_date: &str) -> DbResult<i64> {
    // The stored row's columns are named with the table: PostgreSQL finds a bare
    // `last_number` ambiguous between it and `excluded`. The CASE is the larger of the two
    // dates (SQLite's scalar `max`, which PostgreSQL lacks; the new date is never NULL).
    tx.query_one(
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
    )
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

fn payment_from_row(row: &Row<'_>) -> DbResult<PaymentRow> {
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
    id: &str,
    invoice_id: &str,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::store::testing::stores;

    const LIVE: &str = "live";
    const TEST: &str = "test";

    fn a_client(id: &str, name: &str, tax_id: Option<&str>) -> ClientRow {
        ClientRow {
            id: id.into(),
            name: name.into(),
            tax_id: tax_id.map(Into::into),
            email: Some(format!(
                "{}@example.com",
                name.to_lowercase().replace(' ', ".")
            )),
            address: None,
        }
    }

    fn a_line(description: &str, unit_price_cents: i64) -> LineRow {
        LineRow {
            description: description.into(),
            quantity: 2,
            unit_price_cents,
            discount_percent: 0,
            vat_rate: 21,
            withholding_rate: 0,
            amounts: totals(2 * unit_price_cents),
        }
    }

    fn totals(net: i64) -> AmountColumns {
        AmountColumns {
            gross_cents: net,
            discount_cents: 0,
            net_cents: net,
            vat_cents: net * 21 / 100,
            withholding_cents: 0,
            total_cents: net + net * 21 / 100,
        }
    }

    fn a_draft(id: &str, client: &ClientRow, lines: Vec<LineRow>) -> InvoiceRow {
        let net = lines.iter().map(|l| l.amounts.net_cents).sum();
        InvoiceRow {
            id: id.into(),
            client_id: client.id.clone(),
            client_name: client.name.clone(),
            kind: "full".into(),
            status: "draft".into(),
            series: "A".into(),
            number: None,
            issue_date: None,
            due_date: None,
            currency: "EUR".into(),
            notes: Some("first".into()),
            totals: totals(net),
            paid_cents: 0,
            recipient_name: None,
            recipient_tax_id: None,
            rectifies_id: None,
            rectified_by_id: None,
            void_reason: None,
            lines,
        }
    }

    fn write<T>(store: &Store, f: impl FnOnce(&Tx<'_>) -> DbResult<T>) -> T {
        store.in_transaction(f).expect("write")
    }

    fn read<T>(store: &Store, f: impl FnOnce(&Conn<'_>) -> DbResult<T>) -> T {
        store.with_conn(f).expect("read")
    }

    /// Issues draft `inv` of `book` on `date` with the series' next number; gives it.
    fn issue(store: &Store, book: &str, inv: &mut InvoiceRow, date: &str) -> String {
        write(store, |tx| {
            let number = next_number(tx, book, &inv.series, date)?;
            inv.number = Some(format!("{}-{number:06}", inv.series));
            inv.issue_date = Some(date.into());
            inv.due_date = Some("2026-02-01".into());
            inv.recipient_name = Some(inv.client_name.clone());
            mark_issued(tx, book, inv, 200)
        });
        inv.status = "issued".into();
        inv.number.clone().expect("number")
    }

    fn ids(rows: &[InvoiceRow]) -> Vec<&str> {
        rows.iter().map(|r| r.id.as_str()).collect()
    }

    #[test]
    fn clients_are_created_found_searched_updated_and_deleted() {
        for scratch in stores() {
            let store = &scratch.store;
            let acme = a_client("cli_1", "ACME Corp", Some("B12345678"));
            let bolt = a_client("cli_2", "Bolt 100%", None);
            let cog = a_client("cli_3", "Cog_works", Some("B87654321"));
            write(store, |tx| {
                for c in [&acme, &bolt, &cog] {
                    insert_client(tx, LIVE, c, 100)?;
                }
                insert_client(tx, TEST, &a_client("cli_9", "Sandbox", None), 100)
            });
            assert_eq!(
                read(store, |c| client(c, LIVE, "cli_1")),
                Some(acme.clone())
            );
            assert_eq!(read(store, |c| client(c, TEST, "cli_1")), None);
            assert_eq!(
                read(store, |c| client_with_tax_id(c, LIVE, "B87654321")),
                Some("cli_3".into())
            );
            assert_eq!(
                read(store, |c| client_with_tax_id(c, TEST, "B87654321")),
                None
            );

            let search = |query: Option<&str>, after: Option<&str>, limit: usize| -> Vec<String> {
                read(store, |c| search_clients(c, LIVE, query, after, limit))
                    .into_iter()
                    .map(|c| c.id)
                    .collect()
            };
            assert_eq!(search(None, None, 10), ["cli_3", "cli_2", "cli_1"]);
            assert_eq!(search(None, None, 2), ["cli_3", "cli_2"]);
            assert_eq!(search(None, Some("cli_2"), 2), ["cli_1"]);
            // ASCII case is ignored on both engines; `%` and `_` are literal.
            assert_eq!(search(Some("acme"), None, 10), ["cli_1"]);
            assert_eq!(search(Some("b1234"), None, 10), ["cli_1"]);
            assert_eq!(search(Some("100%"), None, 10), ["cli_2"]);
            assert_eq!(search(Some("g_w"), None, 10), ["cli_3"]);
            assert_eq!(search(Some("g%w"), None, 10), Vec::<String>::new());
            assert_eq!(search(Some("bolt.100"), None, 10), ["cli_2"]);

            let renamed = ClientRow {
                name: "Acme Holdings".into(),
                address: Some("Calle Mayor 1".into()),
                ..acme.clone()
            };
            write(store, |tx| update_client(tx, LIVE, &renamed, 300));
            assert_eq!(read(store, |c| client(c, LIVE, "cli_1")), Some(renamed));
            assert_eq!(read(store, |c| client_activity(c, LIVE, "cli_1")), (0, 0));
            write(store, |tx| delete_client(tx, LIVE, "cli_2"));
            assert_eq!(read(store, |c| client(c, LIVE, "cli_2")), None);
            assert_eq!(search(None, None, 10), ["cli_3", "cli_1"]);
            assert_eq!(read(store, company_country), None);
        }
    }

    #[test]
    fn invoices_are_drafted_issued_and_voided_with_gapless_numbers() {
        for scratch in stores() {
            let store = &scratch.store;
            let acme = a_client("cli_1", "Acme", None);
            let mut draft = a_draft("inv_1", &acme, vec![a_line("Design", 1000)]);
            write(store, |tx| {
                insert_client(tx, LIVE, &acme, 100)?;
                insert_invoice(tx, LIVE, &draft, 100)
            });
            assert_eq!(
                read(store, |c| invoice(c, LIVE, "inv_1")),
                Some(draft.clone())
            );
            assert_eq!(read(store, |c| invoice(c, TEST, "inv_1")), None);

            draft.lines = vec![a_line("Design", 1500), a_line("Build", 500)];
            draft.totals = totals(4000);
            draft.notes = None;
            write(store, |tx| save_draft(tx, LIVE, &draft, 150));
            assert_eq!(
                read(store, |c| invoice(c, LIVE, "inv_1")),
                Some(draft.clone())
            );
            assert_eq!(read(store, |c| invoice_number(c, LIVE, "inv_1")), None);
            assert_eq!(read(store, |c| series_last_issue_date(c, LIVE, "A")), None);

            let mut second = a_draft("inv_2", &acme, vec![a_line("Support", 300)]);
            let mut third = a_draft("inv_3", &acme, vec![a_line("Hosting", 100)]);
            let doomed = a_draft("inv_4", &acme, vec![a_line("Typo", 1)]);
            write(store, |tx| {
                insert_invoice(tx, LIVE, &second, 160)?;
                insert_invoice(tx, LIVE, &third, 160)?;
                insert_invoice(tx, LIVE, &doomed, 160)
            });
            assert_eq!(issue(store, LIVE, &mut draft, "2026-01-10"), "A-000001");
            assert_eq!(issue(store, LIVE, &mut second, "2026-01-10"), "A-000002");
            assert_eq!(issue(store, LIVE, &mut third, "2026-01-12"), "A-000003");
            assert_eq!(
                read(store, |c| series_last_issue_date(c, LIVE, "A")),
                Some("2026-01-12".into())
            );
            // A number taken in a transaction that rolls back is not used up.
            let rolled_back = store.in_transaction(|tx| {
                next_number(tx, LIVE, "A", "2026-01-13")?;
                Err::<(), _>(StoreError::RolledBack)
            });
            assert!(matches!(rolled_back, Err(StoreError::RolledBack)));
            // The series keeps its latest date even when handed an earlier one.
            assert_eq!(
                write(store, |tx| next_number(tx, LIVE, "A", "2026-01-01")),
                4
            );
            assert_eq!(
                read(store, |c| series_last_issue_date(c, LIVE, "A")),
                Some("2026-01-12".into())
            );
            // Each book and each series numbers on its own.
            assert_eq!(
                write(store, |tx| next_number(tx, TEST, "A", "2026-01-01")),
                1
            );
            assert_eq!(
                write(store, |tx| next_number(tx, LIVE, "B", "2026-01-01")),
                1
            );
            assert_eq!(
                read(store, |c| invoice_number(c, LIVE, "inv_2")),
                Some("A-000002".into())
            );
            assert_eq!(
                read(store, |c| invoice(c, LIVE, "inv_1")),
                Some(draft.clone())
            );

            write(store, |tx| delete_draft(tx, LIVE, "inv_1"));
            assert!(
                read(store, |c| invoice(c, LIVE, "inv_1")).is_some(),
                "issued stays"
            );
            write(store, |tx| delete_draft(tx, LIVE, "inv_4"));
            assert_eq!(read(store, |c| invoice(c, LIVE, "inv_4")), None);

            let rectifying = InvoiceRow {
                kind: "rectifying".into(),
                status: "issued".into(),
                number: Some("R-000001".into()),
                issue_date: Some("2026-01-20".into()),
                rectifies_id: Some("inv_2".into()),
                ..a_draft("inv_5", &acme, vec![a_line("Refund", 300)])
            };
            write(store, |tx| {
                insert_invoice(tx, LIVE, &rectifying, 400)?;
                mark_void(tx, LIVE, "inv_2", "wrong amount", "inv_5", 400)
            });
            let voided = read(store, |c| invoice(c, LIVE, "inv_2")).expect("voided");
            assert_eq!(voided.status, "void");
            assert_eq!(voided.void_reason.as_deref(), Some("wrong amount"));
            assert_eq!(voided.rectified_by_id.as_deref(), Some("inv_5"));
            assert_eq!(voided.number.as_deref(), Some("A-000002"));

            let search = |filter: InvoiceFilter<'_>, after: Option<&str>, limit: usize| {
                read(store, |c| search_invoices(c, LIVE, &filter, after, limit))
            };
            let all = search(InvoiceFilter::default(), None, 10);
            assert_eq!(ids(&all), ["inv_5", "inv_3", "inv_2", "inv_1"]);
            assert!(
                all.iter().all(|i| i.lines.is_empty()),
                "summaries have no lines"
            );
            assert_eq!(
                ids(&search(InvoiceFilter::default(), Some("inv_3"), 1)),
                ["inv_2"]
            );
            let only = |status| InvoiceFilter {
                status: Some(status),
                ..InvoiceFilter::default()
            };
            assert_eq!(ids(&search(only("void"), None, 10)), ["inv_2"]);
            assert_eq!(
                ids(&search(only("issued"), None, 10)),
                ["inv_5", "inv_3", "inv_1"]
            );
            let dated = InvoiceFilter {
                date_from: Some("2026-01-11"),
                date_to: Some("2026-01-12"),
                client_id: Some("cli_1"),
                ..InvoiceFilter::default()
            };
            assert_eq!(ids(&search(dated, None, 10)), ["inv_3"]);
            let overdue = InvoiceFilter {
                overdue_on: Some("2026-02-02"),
                ..InvoiceFilter::default()
            };
            assert_eq!(ids(&search(overdue, None, 10)), ["inv_3", "inv_1"]);

            let exported = read(store, |c| {
                invoices_issued_between(c, LIVE, "2026-01-01", "2026-01-31", None)
            });
            assert_eq!(ids(&exported), ["inv_1", "inv_2", "inv_3", "inv_5"]);
            let exported = read(store, |c| {
                invoices_issued_between(c, LIVE, "2026-01-11", "2026-01-31", Some("issued"))
            });
            assert_eq!(ids(&exported), ["inv_3", "inv_5"]);
            assert_eq!(read(store, |c| client_activity(c, LIVE, "cli_1")).0, 4);
        }
    }

    fn a_payment(id: &str, invoice_id: &str, amount_cents: i64) -> PaymentRow {
        PaymentRow {
            id: id.into(),
            invoice_id: invoice_id.into(),
            amount_cents,
            currency: "EUR".into(),
            paid_on: "2026-01-15".into(),
            method: "transfer".into(),
            reference: Some(format!("ref {id}")),
        }
    }

    #[test]
    fn payments_settle_an_invoice_and_list_newest_first() {
        for scratch in stores() {
            let store = &scratch.store;
            let acme = a_client("cli_1", "Acme", None);
            let mut first = a_draft("inv_1", &acme, vec![a_line("Design", 1000)]);
            let mut second = a_draft("inv_2", &acme, vec![a_line("Build", 500)]);
            write(store, |tx| {
                insert_client(tx, LIVE, &acme, 100)?;
                insert_invoice(tx, LIVE, &first, 100)?;
                insert_invoice(tx, LIVE, &second, 100)
            });
            issue(store, LIVE, &mut first, "2026-01-10");
            issue(store, LIVE, &mut second, "2026-01-10");
            // 2 000 + 21% = 2 420 and 1 000 + 21% = 1 210.
            assert_eq!(
                read(store, |c| client_activity(c, LIVE, "cli_1")),
                (2, 3630)
            );
            write(store, |tx| {
                insert_payment(tx, LIVE, &a_payment("pay_1", "inv_1", 420), 300)
            });
            let paid = read(store, |c| invoice(c, LIVE, "inv_1")).expect("invoice");
            assert_eq!((paid.status.as_str(), paid.paid_cents), ("issued", 420));
            assert_eq!(
                read(store, |c| client_activity(c, LIVE, "cli_1")),
                (2, 3210)
            );
            write(store, |tx| {
                insert_payment(tx, LIVE, &a_payment("pay_2", "inv_1", 2000), 301)?;
                insert_payment(tx, LIVE, &a_payment("pay_3", "inv_2", 10), 302)
            });
            let paid = read(store, |c| invoice(c, LIVE, "inv_1")).expect("invoice");
            assert_eq!((paid.status.as_str(), paid.paid_cents), ("paid", 2420));
            assert_eq!(
                read(store, |c| client_activity(c, LIVE, "cli_1")),
                (2, 1200)
            );

            let list = |invoice_id: Option<&str>, after: Option<&str>, limit: usize| {
                read(store, |c| payments(c, LIVE, invoice_id, after, limit))
                    .into_iter()
                    .map(|p| p.id)
                    .collect::<Vec<_>>()
            };
            assert_eq!(list(None, None, 10), ["pay_3", "pay_2", "pay_1"]);
            assert_eq!(list(Some("inv_1"), None, 10), ["pay_2", "pay_1"]);
            assert_eq!(list(Some("inv_1"), Some("pay_2"), 10), ["pay_1"]);
            assert_eq!(list(None, Some("pay_3"), 1), ["pay_2"]);
            assert_eq!(
                read(store, |c| payments(c, LIVE, Some("inv_2"), None, 10)),
                [a_payment("pay_3", "inv_2", 10)]
            );
            assert!(read(store, |c| payments(c, TEST, None, None, 10)).is_empty());
        }
    }

    fn outbox_states(store: &Store) -> Vec<(String, String, String)> {
        read(store, |c| {
            c.query_all(
                "SELECT book, id, state FROM outbox ORDER BY book, id",
                args![],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
        })
    }

    #[test]
    fn the_outbox_queues_live_mail_and_sandboxes_test_mail() {
        for scratch in stores() {
            let store = &scratch.store;
            let acme = a_client("cli_1", "Acme", None);
            let draft = a_draft("inv_1", &acme, vec![a_line("Design", 1000)]);
            let message = OutboxMessage {
                recipient: "acme@example.com",
                subject: "Invoice",
                body: "Attached.",
            };
            write(store, |tx| {
                for book in [LIVE, TEST] {
                    insert_client(tx, book, &acme, 100)?;
                    insert_invoice(tx, book, &draft, 100)?;
                }
                Ok(())
            });
            let queued = write(store, |tx| {
                Ok([
                    insert_outbox(tx, LIVE, "out_1", "inv_1", &message, 500)?,
                    insert_outbox(tx, TEST, "out_2", "inv_1", &message, 501)?,
                ])
            });
            assert_eq!(queued, [500, 501]);
            assert_eq!(
                outbox_states(store),
                [
                    ("live".into(), "out_1".into(), "pending".into()),
                    ("test".into(), "out_2".into(), "sandboxed".into()),
                ]
            );
        }
    }

    /// A live book with every table filled: two clients, a series, an issued invoice with
    /// its rectification, a draft, lines, a payment and a queued message.
    fn fill_live(store: &Store) {
        let acme = a_client("cli_1", "Acme", Some("B12345678"));
        let bolt = a_client("cli_2", "Bolt", None);
        let mut issued = a_draft(
            "inv_1",
            &acme,
            vec![a_line("Design", 1000), a_line("Build", 10)],
        );
        let draft = a_draft("inv_2", &bolt, vec![a_line("Support", 300)]);
        write(store, |tx| {
            insert_client(tx, LIVE, &acme, 100)?;
            insert_client(tx, LIVE, &bolt, 100)?;
            insert_invoice(tx, LIVE, &issued, 100)?;
            insert_invoice(tx, LIVE, &draft, 100)
        });
        issue(store, LIVE, &mut issued, "2026-01-10");
        let rectifying = InvoiceRow {
            kind: "rectifying".into(),
            status: "issued".into(),
            number: Some("A-000002".into()),
            issue_date: Some("2026-01-11".into()),
            rectifies_id: Some("inv_1".into()),
            ..a_draft("inv_3", &acme, vec![a_line("Refund", 1)])
        };
        write(store, |tx| {
            assert_eq!(next_number(tx, LIVE, "A", "2026-01-11")?, 2);
            insert_invoice(tx, LIVE, &rectifying, 300)?;
            mark_void(tx, LIVE, "inv_1", "wrong client", "inv_3", 300)?;
            insert_payment(tx, LIVE, &a_payment("pay_1", "inv_3", 5), 300)?;
            let message = OutboxMessage {
                recipient: "acme@example.com",
                subject: "Invoice",
                body: "Attached.",
            };
            insert_outbox(tx, LIVE, "out_1", "inv_3", &message, 300).map(|_| ())
        });
    }

    fn counts(store: &Store, book: &str) -> Vec<(&'static str, i64)> {
        read(store, |c| book_counts(c, book))
    }

    #[test]
    fn the_sandbox_is_a_copy_of_the_live_book_and_resets_to_empty() {
        for scratch in stores() {
            let store = &scratch.store;
            assert!(read(store, |c| book_is_empty(c, LIVE)));
            fill_live(store);
            let live = vec![
                ("outbox", 1),
                ("payments", 1),
                ("invoice_lines", 4),
                ("invoices", 3),
                ("invoice_series", 1),
                ("clients", 2),
            ];
            assert_eq!(counts(store, LIVE), live);
            assert!(!read(store, |c| book_is_empty(c, LIVE)));
            assert!(read(store, |c| book_is_empty(c, TEST)));

            let copied = write(store, copy_live_into_test);
            assert_eq!(
                copied,
                [
                    ("clients", 2),
                    ("invoice_series", 1),
                    ("invoices", 3),
                    ("invoice_lines", 4),
                    ("payments", 1),
                ]
            );
            let mut test = live.clone();
            test[0].1 = 0; // the outbox is never copied
            assert_eq!(counts(store, TEST), test);
            for id in ["inv_1", "inv_2", "inv_3"] {
                assert_eq!(
                    read(store, |c| invoice(c, TEST, id)),
                    read(store, |c| invoice(c, LIVE, id))
                );
            }
            assert_eq!(
                read(store, |c| payments(c, TEST, None, None, 10)),
                read(store, |c| payments(c, LIVE, None, None, 10))
            );
            // Numbering in the sandbox goes on from the live book's.
            assert_eq!(
                write(store, |tx| next_number(tx, TEST, "A", "2026-01-12")),
                3
            );
            assert_eq!(
                write(store, |tx| next_number(tx, LIVE, "A", "2026-01-12")),
                3
            );

            write(store, clear_test_book);
            assert!(read(store, |c| book_is_empty(c, TEST)));
            assert_eq!(counts(store, LIVE), live);
            assert_eq!(read(store, |c| series_last_issue_date(c, TEST, "A")), None);
            assert_eq!(write(store, copy_live_into_test)[2], ("invoices", 3));
        }
    }
}
