//! The invoicing tables (`schema.sql`, last section, in two books since schema version 3:
//! `migrations/books.sql`) and their only writer, reading and writing the invoicing
//! [`model`] itself: each statement binds the model's fields and each row is read straight
//! into a model type (ids and words through `columns.rs`). Every function takes the book
//! (`live` or `test`) of the caller and confines every statement to it, so a test key
//! never reads or writes a live row. Writes stamp their rows with the `now` (unix seconds)
//! the caller read from its clock. None opens the database: reads take a
//! [`Conn`](crate::store::Conn), writes the caller's [`Tx`](crate::store::Tx).
//!
//! One file per table group: `clients.rs`, `invoices.rs` (with their lines), `series.rs`
//! (numbering), `payments.rs` (and the outbox), `books.rs` (whole books, the sandbox).
//! Paginated queries end in `LIMIT CAST(?N AS BIGINT) + 0` (why: `invoices.rs`), and an
//! optional filter `?N` is tested as `CAST(?N AS TEXT) IS NULL`: a bare parameter under
//! `IS NULL` has no type PostgreSQL can infer.

mod books;
mod clients;
mod columns;
mod invoices;
pub mod model;
mod payments;
mod series;

pub use books::{TableCounts, book_counts, book_is_empty, clear_test_book, copy_live_into_test};
pub use clients::{
    client, client_activity, client_with_tax_id, delete_client, insert_client, search_clients,
    update_client,
};
pub use invoices::{
    InvoiceFilter, delete_draft, insert_invoice, invoice, invoice_number, invoices_issued_between,
    mark_issued, mark_void, save_draft, search_invoices,
};
pub use payments::{OutboxMessage, insert_outbox, insert_payment, payments};
pub use series::{next_number, series_last_issue_date};

use super::sql::args;
use super::{Conn, StoreError};

/// Result of the queries here.
pub type DbResult<T> = Result<T, StoreError>;

/// The country whose VAT rates a company charges before it says otherwise (`init`).
const DEFAULT_COUNTRY: &str = "ES";

/// The company's ISO country code (decides the legal VAT rates); `ES` before `init`.
pub fn company_country(conn: &Conn<'_>) -> DbResult<String> {
    let country = conn.query_opt("SELECT country FROM company WHERE id = 1", args![], |r| {
        r.get(0)
    })?;
    Ok(country.unwrap_or_else(|| DEFAULT_COUNTRY.to_owned()))
}

/// A page size as the `LIMIT` parameter.
fn limit_param(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
