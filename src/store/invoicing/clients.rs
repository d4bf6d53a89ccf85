//! The `clients` table: a client by id or tax id, its activity, searches, and the
//! changes the tools make (create, update, delete).

use super::super::sql::{Dialect, Row, args};
use super::super::{Conn, Tx};
use super::model::{Client, ClientId};
use super::{DbResult, limit_param};

// A macro rather than a `const`, so the statements built on it are literals (`concat!`).
macro_rules! client_select {
    () => {
        "SELECT id, name, tax_id, email, address FROM clients"
    };
}
// Every statement below names the book as `?1`.

fn client_from_row(row: &Row<'_>) -> DbResult<Client> {
    Ok(Client {
        id: row.get(0)?,
        name: row.get(1)?,
        tax_id: row.get(2)?,
        email: row.get(3)?,
        address: row.get(4)?,
    })
}

/// One client.
pub fn client(conn: &Conn<'_>, book: &str, id: &ClientId) -> DbResult<Option<Client>> {
    conn.query_opt(
        concat!(client_select!(), " WHERE book = ?1 AND id = ?2"),
        args![book, id],
        client_from_row,
    )
}

/// The client holding `tax_id` (normalised), if any.
pub fn client_with_tax_id(conn: &Conn<'_>, book: &str, tax_id: &str) -> DbResult<Option<ClientId>> {
    conn.query_opt(
        "SELECT id FROM clients WHERE book = ?1 AND tax_id = ?2",
        args![book, tax_id],
        |r| r.get(0),
    )
}

/// Inserts a new client.
pub fn insert_client(tx: &Tx<'_>, book: &str, c: &Client, now: i64) -> DbResult<()> {
    tx.execute(
        "INSERT INTO clients (book, id, name, tax_id, email, address, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
        args![book, c.id, c.name, c.tax_id, c.email, c.address, now],
    )?;
    Ok(())
}

/// Saves every field of an existing client.
pub fn update_client(tx: &Tx<'_>, book: &str, c: &Client, now: i64) -> DbResult<()> {
    tx.execute(
        "UPDATE clients SET name = ?3, tax_id = ?4, email = ?5, address = ?6, updated_at = ?7
         WHERE book = ?1 AND id = ?2",
        args![book, c.id, c.name, c.tax_id, c.email, c.address, now],
    )?;
    Ok(())
}

/// Deletes a client (the caller has checked it has no invoices).
pub fn delete_client(tx: &Tx<'_>, book: &str, id: &ClientId) -> DbResult<()> {
    tx.execute(
        "DELETE FROM clients WHERE book = ?1 AND id = ?2",
        args![book, id],
    )?;
    Ok(())
}

/// How many invoices (of any status) a client has, and how much it owes on issued ones.
pub fn client_activity(conn: &Conn<'_>, book: &str, id: &ClientId) -> DbResult<(i64, i64)> {
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
    starting_after: Option<&ClientId>,
    limit: usize,
) -> DbResult<Vec<Client>> {
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
