//! The `faults` table and its only writer: the failures an operator rehearses on a
//! test-mode installation (`tollgate faults …`). The guard chain reads the faults of a
//! call's tool only while the company is in test mode; a fault with a count is used up one
//! firing at a time, atomically, and deleted with its last firing.

use super::sql::{Row, args};
use super::{Conn, Store, StoreError, Tx};

/// One rehearsed failure.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// Its id (what `faults clear ID` takes).
    pub id: i64,
    /// The tool whose calls it fails.
    pub tool: String,
    /// The credential whose calls it fails (`None`: every credential).
    pub credential_id: Option<String>,
    /// The catalog code it answers with.
    pub code: String,
    /// The chance that a matching call fails, in (0, 1].
    pub probability: f64,
    /// Firings left (`None`: without end).
    pub remaining: Option<i64>,
    /// The `retry_after` it reports, when it reports one.
    pub retry_after: Option<i64>,
    /// Unix seconds.
    pub created_at: i64,
}

/// A fault to insert.
#[derive(Debug, Clone)]
pub struct NewFault<'a> {
    /// The tool.
    pub tool: &'a str,
    /// The credential, or every one.
    pub credential_id: Option<&'a str>,
    /// The catalog code.
    pub code: &'a str,
    /// The chance of firing.
    pub probability: f64,
    /// Firings (`None`: without end).
    pub count: Option<i64>,
    /// The `retry_after` to report.
    pub retry_after: Option<i64>,
    /// Unix seconds.
    pub created_at: i64,
}

// A macro rather than a `const`, so the statements built on it are literals (`concat!`).
macro_rules! fault_columns {
    () => {
        "id, tool, credential_id, code, probability, remaining, retry_after, created_at"
    };
}

fn fault_from_row(row: &Row<'_>) -> Result<Fault, StoreError> {
    Ok(Fault {
        id: row.get(0)?,
        tool: row.get(1)?,
        credential_id: row.get(2)?,
        code: row.get(3)?,
        probability: row.get(4)?,
        remaining: row.get(5)?,
        retry_after: row.get(6)?,
        created_at: row.get(7)?,
    })
}

/// Inserts a fault inside `tx`; gives its id.
pub fn insert_fault(tx: &Tx<'_>, new: &NewFault<'_>) -> Result<i64, StoreError> {
    tx.insert_returning_id(
        "INSERT INTO faults (tool, credential_id, code, probability, remaining, retry_after, \
         created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        args![
            new.tool,
            new.credential_id,
            new.code,
            new.probability,
            new.count,
            new.retry_after,
            new.created_at
        ],
    )
}

/// The faults that may fail a call of `tool` by `credential_id`, oldest first (a hot-path
/// read, on the tool's index; only made while the company is in test mode).
pub fn faults_for_call(
    conn: &Conn<'_>,
    tool: &str,
    credential_id: &str,
) -> Result<Vec<Fault>, StoreError> {
    conn.query_all(
        concat!(
            "SELECT ",
            fault_columns!(),
            " FROM faults WHERE tool = ?1 \
             AND (credential_id IS NULL OR credential_id = ?2) \
             AND (remaining IS NULL OR remaining > 0) ORDER BY id"
        ),
        args![tool, credential_id],
        fault_from_row,
    )
}

/// Uses one firing of fault `id` inside `tx`: `true` when it had one left (a fault without
/// a count always has), `false` when another call took its last one or it was cleared. A
/// fault's last firing deletes it.
pub fn take_firing(tx: &Tx<'_>, id: i64) -> Result<bool, StoreError> {
    let remaining: Option<Option<i64>> = tx.query_opt(
        "UPDATE faults SET remaining = remaining - 1 \
         WHERE id = ?1 AND (remaining IS NULL OR remaining > 0) RETURNING remaining",
        args![id],
        |row| row.get(0),
    )?;
    match remaining {
        None => Ok(false),
        Some(Some(0)) => {
            tx.execute("DELETE FROM faults WHERE id = ?1", args![id])?;
            Ok(true)
        }
        Some(_) => Ok(true),
    }
}

impl Store {
    /// Every fault with firings left, oldest first.
    pub fn faults(&self) -> Result<Vec<Fault>, StoreError> {
        self.with_conn(|conn| {
            conn.query_all(
                concat!(
                    "SELECT ",
                    fault_columns!(),
                    " FROM faults WHERE remaining IS NULL OR remaining > 0 ORDER BY id"
                ),
                args![],
                fault_from_row,
            )
        })
    }

    /// Deletes fault `id` (`None`: every fault); gives how many were deleted.
    pub fn clear_faults(&self, id: Option<i64>) -> Result<usize, StoreError> {
        self.in_transaction(|tx| match id {
            Some(id) => tx.execute("DELETE FROM faults WHERE id = ?1", args![id]),
            None => tx.execute("DELETE FROM faults", args![]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::stores;

    fn add(store: &Store, credential: Option<&str>, count: Option<i64>) -> i64 {
        store
            .in_transaction(|tx| {
                insert_fault(
                    tx,
                    &NewFault {
                        tool: "get_invoice",
                        credential_id: credential,
                        code: "timeout",
                        probability: 0.25,
                        count,
                        retry_after: Some(7),
                        created_at: 1,
                    },
                )
            })
            .expect("insert")
    }

    #[test]
    fn a_fault_reads_back_as_it_was_added() {
        for scratch in stores() {
            let store = &scratch.store;
            let first = add(store, Some("abc"), Some(3));
            let second = add(store, None, None);
            assert_ne!(first, second);
            assert_eq!(
                store.faults().expect("list"),
                [
                    Fault {
                        id: first,
                        tool: "get_invoice".into(),
                        credential_id: Some("abc".into()),
                        code: "timeout".into(),
                        probability: 0.25,
                        remaining: Some(3),
                        retry_after: Some(7),
                        created_at: 1,
                    },
                    Fault {
                        id: second,
                        tool: "get_invoice".into(),
                        credential_id: None,
                        code: "timeout".into(),
                        probability: 0.25,
                        remaining: None,
                        retry_after: Some(7),
                        created_at: 1,
                    },
                ]
            );
        }
    }

    #[test]
    fn a_counted_fault_is_used_up_and_then_gone() {
        for scratch in stores() {
            let store = &scratch.store;
            let id = add(store, None, Some(2));
            let take = || {
                store
                    .in_transaction(|tx| take_firing(tx, id))
                    .expect("take")
            };
            assert!(take());
            assert_eq!(store.faults().expect("list")[0].remaining, Some(1));
            assert!(take());
            assert!(store.faults().expect("list").is_empty());
            assert!(!take());
        }
    }

    #[test]
    fn a_fault_without_a_count_fires_without_end() {
        for scratch in stores() {
            let store = &scratch.store;
            let id = add(store, None, None);
            for _ in 0..3 {
                assert!(
                    store
                        .in_transaction(|tx| take_firing(tx, id))
                        .expect("take")
                );
            }
            assert_eq!(store.faults().expect("list")[0].remaining, None);
        }
    }

    #[test]
    fn a_call_sees_the_faults_of_its_tool_and_credential_only() {
        for scratch in stores() {
            let store = &scratch.store;
            let everyone = add(store, None, None);
            let mine = add(store, Some("abc"), None);
            let ids = |credential: &str| -> Vec<i64> {
                store
                    .with_conn(|conn| faults_for_call(conn, "get_invoice", credential))
                    .expect("read")
                    .iter()
                    .map(|f| f.id)
                    .collect()
            };
            assert_eq!(ids("abc"), [everyone, mine]);
            assert_eq!(ids("xyz"), [everyone]);
            assert!(
                store
                    .with_conn(|conn| faults_for_call(conn, "get_client", "abc"))
                    .expect("read")
                    .is_empty()
            );
            assert_eq!(store.clear_faults(Some(mine)).expect("clear"), 1);
            assert_eq!(store.clear_faults(Some(mine)).expect("clear"), 0);
            assert_eq!(ids("abc"), [everyone]);
            add(store, Some("abc"), Some(1));
            assert_eq!(store.clear_faults(None).expect("clear"), 2);
            assert!(store.faults().expect("list").is_empty());
        }
    }
}
