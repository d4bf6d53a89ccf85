//! The sandbox: the test book of the business data, where `tg_test_` keys work (see
//! [`Book`]). It is filled when the company enters test mode, and the operator resets it
//! with `tollgate sandbox reset`.
//!
//! What it is filled with ([`Seed`]): by default a copy of the live book (clients, series,
//! invoices, lines, payments, under the same ids, so an agent can be rehearsed on the real
//! situation without touching the books), or the demo data, or nothing. A copy holds the
//! live clients' names, tax ids, e-mail and postal addresses: whoever holds a test key can
//! read them, as a live key with the same scopes could. When that is not wanted, reset the
//! sandbox to the demo data. The outbox is never copied, and test-book messages are stored
//! `sandboxed`, never `pending`, so no relay delivers them.
//!
//! A reset also forgets the completed idempotency records of test keys: their replays would
//! name rows that no longer exist.

use super::demo::{self, DemoError};
use crate::store::invoicing::{self as db, TableCounts};
use crate::store::{Store, StoreError, Tx};
use crate::tools::Book;

/// What a reset fills the test book with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seed {
    /// A copy of the live book.
    FromLive,
    /// The demo data of [`demo`].
    Demo,
    /// Nothing: an empty sandbox.
    Empty,
}

impl Seed {
    /// How the operator reads it in a message.
    pub fn describe(self) -> &'static str {
        match self {
            Seed::FromLive => "a copy of the live book",
            Seed::Demo => "the demo data",
            Seed::Empty => "nothing (empty)",
        }
    }
}

/// Rows of the test book per business table after a reset or a seeding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filled {
    /// What it was filled with.
    pub seed: Seed,
    /// (table, rows) for every business table.
    pub counts: TableCounts,
}

impl Filled {
    /// The rows of one table.
    pub fn count(&self, table: &str) -> i64 {
        self.counts
            .iter()
            .find(|(t, _)| *t == table)
            .map_or(0, |(_, n)| *n)
    }

    /// "5 clients, 7 invoices, 3 payments".
    pub fn summary(&self) -> String {
        format!(
            "{} clients, {} invoices, {} payments",
            self.count("clients"),
            self.count("invoices"),
            self.count("payments")
        )
    }
}

/// Empties the test book and fills it with `seed`, in one transaction: a server serving
/// test keys meanwhile sees the old sandbox or the new one, never half of either.
pub fn reset(store: &Store, seed: Seed) -> Result<Filled, DemoError> {
    write(store, |tx| {
        db::clear_test_book(tx)?;
        crate::store::idempotency::forget_completed_of_test_keys(tx)?;
        fill(tx, seed)
    })
}

/// Fills the test book when it is empty (the company enters test mode): with a copy of the
/// live book, or with the demo data when the live book is empty too, so that test keys
/// find something to work on either way. `Ok(None)` when the sandbox already had data.
pub fn fill_if_empty(tx: &Tx<'_>) -> Result<Option<Filled>, DemoError> {
    if !db::book_is_empty(tx, Book::Test.as_str())? {
        return Ok(None);
    }
    let seed = if db::book_is_empty(tx, Book::Live.as_str())? {
        Seed::Demo
    } else {
        Seed::FromLive
    };
    fill(tx, seed).map(Some)
}

/// How many rows each book holds, per business table: (live, test).
pub fn counts(store: &Store) -> Result<(TableCounts, TableCounts), StoreError> {
    store.with_conn(|conn| {
        Ok((
            db::book_counts(conn, Book::Live.as_str())?,
            db::book_counts(conn, Book::Test.as_str())?,
        ))
    })
}

fn fill(tx: &Tx<'_>, seed: Seed) -> Result<Filled, DemoError> {
    match seed {
        Seed::FromLive => {
            db::copy_live_into_test(tx)?;
        }
        Seed::Demo => {
            demo::fill(tx, Book::Test)?;
        }
        Seed::Empty => {}
    }
    Ok(Filled {
        seed,
        counts: db::book_counts(tx, Book::Test.as_str())?,
    })
}

/// Runs `work` in one write transaction, keeping its own error apart from the store's.
pub fn write<T>(
    store: &Store,
    work: impl FnOnce(&Tx<'_>) -> Result<T, DemoError>,
) -> Result<T, DemoError> {
    let mut outcome = None;
    let written = store.in_transaction(|tx| match work(tx) {
        Ok(value) => {
            outcome = Some(Ok(value));
            Ok(())
        }
        Err(err) => {
            outcome = Some(Err(err));
            Err(StoreError::RolledBack)
        }
    });
    match (written, outcome) {
        (Ok(()) | Err(StoreError::RolledBack), Some(outcome)) => outcome,
        (Err(e), _) => Err(DemoError::Store(e)),
        (Ok(()), None) => Err(DemoError::Store(StoreError::RolledBack)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreOptions;

    fn fresh() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = StoreOptions {
            create: true,
            ..StoreOptions::default()
        };
        let store = Store::open(&dir.path().join("s.db"), &opts).expect("open");
        (dir, store)
    }

    #[test]
    fn an_empty_installation_gets_the_demo_then_a_copy_replaces_it() {
        let (_dir, store) = fresh();
        let first = write(&store, fill_if_empty)
            .expect("fill")
            .expect("was empty");
        assert_eq!(first.seed, Seed::Demo);
        assert_eq!(first.summary(), "5 clients, 7 invoices, 3 payments");
        assert_eq!(write(&store, fill_if_empty).expect("again"), None);
        let (live, _) = counts(&store).expect("counts");
        assert!(live.iter().all(|(_, n)| *n == 0), "{live:?}");

        demo::seed(&store, Book::Live).expect("live demo");
        let copy = reset(&store, Seed::FromLive).expect("copy");
        assert_eq!(copy.seed, Seed::FromLive);
        assert_eq!(copy.count("clients"), 5);
        assert_eq!(copy.count("invoice_series"), 3);
        assert_eq!(copy.count("outbox"), 0);
        let (live, test) = counts(&store).expect("counts");
        let without_outbox = |rows: &[(&str, i64)]| -> Vec<i64> {
            rows.iter()
                .filter(|(t, _)| *t != "outbox")
                .map(|(_, n)| *n)
                .collect()
        };
        assert_eq!(without_outbox(&live), without_outbox(&test));

        let empty = reset(&store, Seed::Empty).expect("empty");
        assert!(empty.counts.iter().all(|(_, n)| *n == 0));
        let (live_after, _) = counts(&store).expect("counts");
        assert_eq!(live_after, live, "a reset never touches the live book");
    }
}
