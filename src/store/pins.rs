//! `tool_pins` and its only writer: the definitions of the upstream MCP servers' tools
//! that an operator approved, and the ones waiting for a decision. Each row is one
//! definition (its digest) of one tool of one backend: `approved` (what is offered),
//! `pending` (presented, held until an operator decides), `rejected` (held for good), or
//! `replaced` (approved once, superseded by a later approval). Every node reads the same
//! rows, so a decision applies on all of them.

use super::sql::{Row, args};
use super::{Conn, Store, StoreError, Tx};

/// The rows' `state`.
pub const APPROVED: &str = "approved";
/// A definition waiting for an operator.
pub const PENDING: &str = "pending";
/// A definition an operator refused.
pub const REJECTED: &str = "rejected";
/// A definition approved once and superseded.
pub const REPLACED: &str = "replaced";

/// Schema version 12 on SQLite.
pub(super) const SQLITE_SCHEMA_STEP: &str = "
    CREATE TABLE tool_pins (
        backend TEXT NOT NULL,
        tool TEXT NOT NULL,
        digest TEXT NOT NULL CHECK (length(digest) = 64),
        definition TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('approved', 'pending', 'rejected', 'replaced')),
        seen_at INTEGER NOT NULL,
        decided_at INTEGER,
        decided_by TEXT,
        PRIMARY KEY (backend, tool, digest)
    );
";
/// Schema version 12 on PostgreSQL.
pub(super) const POSTGRES_SCHEMA_STEP: &str = "
    CREATE TABLE tool_pins (
        backend TEXT COLLATE \"C\" NOT NULL,
        tool TEXT COLLATE \"C\" NOT NULL,
        digest TEXT COLLATE \"C\" NOT NULL CHECK (length(digest) = 64),
        definition TEXT NOT NULL,
        state TEXT COLLATE \"C\" NOT NULL
            CHECK (state IN ('approved', 'pending', 'rejected', 'replaced')),
        seen_at BIGINT NOT NULL,
        decided_at BIGINT,
        decided_by TEXT COLLATE \"C\",
        PRIMARY KEY (backend, tool, digest)
    );
";

/// One definition of one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// The backend's name.
    pub backend: String,
    /// The tool's name after the backend's prefix (its operation).
    pub tool: String,
    /// SHA-256 of the canonical definition, lowercase hex.
    pub digest: String,
    /// The definition as presented (canonical JSON), for a reviewer.
    pub definition: String,
    /// `approved`, `pending`, `rejected` or `replaced`.
    pub state: String,
    /// When it was first presented, unix milliseconds.
    pub seen_at: i64,
    /// When an operator (or trust on first use) decided, unix milliseconds.
    pub decided_at: Option<i64>,
    /// Who decided: `first use`, or the operator.
    pub decided_by: Option<String>,
}

macro_rules! pin_columns {
    () => {
        "backend, tool, digest, definition, state, seen_at, decided_at, decided_by"
    };
}

fn pin_from_row(row: &Row<'_>) -> Result<Pin, StoreError> {
    Ok(Pin {
        backend: row.get(0)?,
        tool: row.get(1)?,
        digest: row.get(2)?,
        definition: row.get(3)?,
        state: row.get(4)?,
        seen_at: row.get(5)?,
        decided_at: row.get(6)?,
        decided_by: row.get(7)?,
    })
}

/// Every row of `backend` (all of them without one), by backend, tool and first sight.
pub fn pins_of(conn: &Conn<'_>, backend: Option<&str>) -> Result<Vec<Pin>, StoreError> {
    match backend {
        Some(backend) => conn.query_all(
            concat!(
                "SELECT ",
                pin_columns!(),
                " FROM tool_pins WHERE backend = ?1 ORDER BY tool, seen_at, digest"
            ),
            args![backend],
            pin_from_row,
        ),
        None => conn.query_all(
            concat!(
                "SELECT ",
                pin_columns!(),
                " FROM tool_pins ORDER BY backend, tool, seen_at, digest"
            ),
            args![],
            pin_from_row,
        ),
    }
}

/// Records a definition presented for the first time, as `state` (`approved` on first
/// use, otherwise `pending`); nothing when another node recorded it first.
pub fn insert_pin(tx: &Tx<'_>, pin: &Pin) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO tool_pins (backend, tool, digest, definition, state, seen_at, decided_at, \
         decided_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
         ON CONFLICT (backend, tool, digest) DO NOTHING",
        args![
            pin.backend,
            pin.tool,
            pin.digest,
            pin.definition,
            pin.state,
            pin.seen_at,
            pin.decided_at,
            pin.decided_by
        ],
    )?;
    Ok(())
}

/// What a decision on a tool changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// This definition (its digest) is now the tool's.
    Approved(String),
    /// These many pending definitions were refused.
    Rejected(usize),
    /// Nothing of the tool waits for a decision.
    NothingPending,
}

impl Store {
    /// The pins of `backend` (every backend's without one).
    pub fn pins(&self, backend: Option<&str>) -> Result<Vec<Pin>, StoreError> {
        self.with_conn(|conn| pins_of(conn, backend))
    }

    /// Records the definitions presented for the first time (see [`insert_pin`]).
    pub fn record_pins(&self, pins: &[Pin]) -> Result<(), StoreError> {
        if pins.is_empty() {
            return Ok(());
        }
        self.in_transaction(|tx| pins.iter().try_for_each(|pin| insert_pin(tx, pin)))
    }

    /// Approves the newest pending definition of `tool` of `backend`: it becomes the
    /// approved one, the one approved before is `replaced`, older pending ones are
    /// `rejected`.
    pub fn approve_pin(
        &self,
        (backend, tool): (&str, &str),
        by: &str,
        at_ms: i64,
    ) -> Result<Decided, StoreError> {
        self.in_transaction(|tx| {
            let newest: Option<String> = tx.query_opt(
                "SELECT digest FROM tool_pins WHERE backend = ?1 AND tool = ?2 \
                 AND state = 'pending' ORDER BY seen_at DESC, digest LIMIT 1",
                args![backend, tool],
                |row| row.get(0),
            )?;
            let Some(digest) = newest else {
                return Ok(Decided::NothingPending);
            };
            tx.execute(
                "UPDATE tool_pins SET state = 'replaced' \
                 WHERE backend = ?1 AND tool = ?2 AND state = 'approved'",
                args![backend, tool],
            )?;
            tx.execute(
                "UPDATE tool_pins SET state = CASE WHEN digest = ?3 THEN 'approved' \
                 ELSE 'rejected' END, decided_at = ?4, decided_by = ?5 \
                 WHERE backend = ?1 AND tool = ?2 AND state = 'pending'",
                args![backend, tool, digest, at_ms, by],
            )?;
            Ok(Decided::Approved(digest))
        })
    }

    /// Rejects every pending definition of `tool` of `backend`.
    pub fn reject_pin(
        &self,
        (backend, tool): (&str, &str),
        by: &str,
        at_ms: i64,
    ) -> Result<Decided, StoreError> {
        self.in_transaction(|tx| {
            let refused = tx.execute(
                "UPDATE tool_pins SET state = 'rejected', decided_at = ?3, decided_by = ?4 \
                 WHERE backend = ?1 AND tool = ?2 AND state = 'pending'",
                args![backend, tool, at_ms, by],
            )?;
            Ok(if refused == 0 {
                Decided::NothingPending
            } else {
                Decided::Rejected(refused)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::stores;

    fn pin(tool: &str, digest: char, state: &str, seen_at: i64) -> Pin {
        Pin {
            backend: "wh".into(),
            tool: tool.into(),
            digest: std::iter::repeat_n(digest, 64).collect(),
            definition: format!("{{\"name\":\"{tool}\"}}"),
            state: state.into(),
            seen_at,
            decided_at: None,
            decided_by: None,
        }
    }

    #[test]
    fn approving_the_newest_pending_definition_replaces_the_approved_one() {
        for scratch in stores() {
            let store = &scratch.store;
            store
                .record_pins(&[
                    pin("lookup", 'a', APPROVED, 1),
                    pin("lookup", 'b', PENDING, 2),
                    pin("lookup", 'c', PENDING, 3),
                    pin("other", 'd', PENDING, 4),
                ])
                .expect("record");
            // Recording the same definition again changes nothing.
            store
                .record_pins(&[pin("lookup", 'a', PENDING, 9)])
                .expect("again");
            let decided = store
                .approve_pin(("wh", "lookup"), "operator", 10)
                .expect("approve");
            assert_eq!(decided, Decided::Approved("c".repeat(64)));
            let states: Vec<(String, String)> = store
                .pins(Some("wh"))
                .expect("pins")
                .into_iter()
                .map(|p| (p.tool, p.state))
                .collect();
            assert_eq!(
                states,
                [
                    ("lookup".into(), REPLACED.into()),
                    ("lookup".into(), REJECTED.into()),
                    ("lookup".into(), APPROVED.into()),
                    ("other".into(), PENDING.into()),
                ]
            );
            assert_eq!(
                store
                    .approve_pin(("wh", "lookup"), "operator", 11)
                    .expect("again"),
                Decided::NothingPending
            );
            assert_eq!(
                store
                    .reject_pin(("wh", "other"), "operator", 12)
                    .expect("reject"),
                Decided::Rejected(1)
            );
            assert_eq!(
                store
                    .reject_pin(("wh", "other"), "operator", 13)
                    .expect("again"),
                Decided::NothingPending
            );
            assert!(store.pins(Some("crm")).expect("none").is_empty());
        }
    }
}
