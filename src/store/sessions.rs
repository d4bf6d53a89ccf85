//! The `http_sessions` table and its only writer: the handshake-era HTTP sessions
//! (`Mcp-Session-Id`) of every node on the database, so that a node that did not answer a
//! session's `initialize` can still serve its next request (a load balancer without
//! stickiness). The stateless 2026-07-28 revision keeps no session and writes nothing here.
//!
//! A row holds what another node needs to answer as the first one would: the owner the
//! session is bound to (`key:<credential>` or `client:<oauth client>`), the negotiated
//! revision, the client's capabilities from `initialize` (JSON text) and the level set by
//! `logging/setLevel`. Times are unix milliseconds of the server's clock; `last_seen_at_ms`
//! is refreshed by its users at most once per refresh interval, so a busy session does not
//! write on every request. Only credentialed sessions are stored: the transport keeps
//! anonymous ones in its own memory, so a flood of unauthenticated `initialize`s writes
//! nothing.
//!
//! The table is bounded like the transport's memory: one owner keeps at most `per_owner`
//! live sessions (its least recently seen goes first) and, when the table holds
//! `capacity` live sessions, the least recently seen one of the owner holding the most goes.
//! Expired rows are pruned a few at a time by each new session.

use super::sql::args;
use super::{Store, StoreError, Tx};

/// Step 7 of SQLite's schema: the `http_sessions` table.
pub(super) const SQLITE_SCHEMA_STEP: &str = "
CREATE TABLE http_sessions (
    id                  TEXT    PRIMARY KEY,
    owner               TEXT    NOT NULL,
    protocol_version    TEXT    NOT NULL,
    client_capabilities TEXT    NOT NULL,
    log_level           TEXT,
    created_at_ms       INTEGER NOT NULL,
    last_seen_at_ms     INTEGER NOT NULL
);
CREATE INDEX http_sessions_by_owner ON http_sessions (owner, last_seen_at_ms);
CREATE INDEX http_sessions_by_last_seen ON http_sessions (last_seen_at_ms);
";

/// Step 7 of PostgreSQL's schema: the same table in its types (text in byte order, as
/// SQLite compares it, so both engines pick the same session to end).
pub(super) const POSTGRES_SCHEMA_STEP: &str = r#"
CREATE TABLE http_sessions (
    id                  TEXT COLLATE "C" PRIMARY KEY,
    owner               TEXT COLLATE "C" NOT NULL,
    protocol_version    TEXT COLLATE "C" NOT NULL,
    client_capabilities TEXT COLLATE "C" NOT NULL,
    log_level           TEXT COLLATE "C",
    created_at_ms       BIGINT NOT NULL,
    last_seen_at_ms     BIGINT NOT NULL
);
CREATE INDEX http_sessions_by_owner ON http_sessions (owner, last_seen_at_ms);
CREATE INDEX http_sessions_by_last_seen ON http_sessions (last_seen_at_ms);
"#;

/// Expired rows one new session prunes at most.
const PRUNE_BATCH: i64 = 64;

/// One stored session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    /// The `Mcp-Session-Id`.
    pub id: String,
    /// Who it belongs to (the transport's session owner, as text).
    pub owner: String,
    /// The negotiated handshake revision.
    pub protocol_version: String,
    /// The capabilities the client declared at `initialize`, as JSON text.
    pub client_capabilities: String,
    /// The level set by `logging/setLevel`, if any.
    pub log_level: Option<String>,
    /// Unix milliseconds when it was opened.
    pub created_at_ms: i64,
    /// Unix milliseconds when its use was last recorded.
    pub last_seen_at_ms: i64,
}

/// The bounds a new session is stored under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionBounds {
    /// Live sessions one owner keeps at most.
    pub per_owner: i64,
    /// Live sessions kept at most.
    pub capacity: i64,
    /// A row last seen at or before this (unix milliseconds) has expired.
    pub expired_at_or_before_ms: i64,
}

const INSERT_SQL: &str = "\
    INSERT INTO http_sessions (id, owner, protocol_version, client_capabilities, log_level,
                               created_at_ms, last_seen_at_ms)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
const FIND_SQL: &str = "\
    SELECT id, owner, protocol_version, client_capabilities, log_level, created_at_ms,
           last_seen_at_ms
      FROM http_sessions WHERE id = ?1";
const PRUNE_SQL: &str = "\
    DELETE FROM http_sessions WHERE id IN (
        SELECT id FROM http_sessions WHERE last_seen_at_ms <= ?1 LIMIT ?2)";
const OWNER_LIVE_SQL: &str =
    "SELECT count(*) FROM http_sessions WHERE owner = ?1 AND last_seen_at_ms > ?2";
const ALL_LIVE_SQL: &str = "SELECT count(*) FROM http_sessions WHERE last_seen_at_ms > ?1";
const BUSIEST_OWNER_SQL: &str = "\
    SELECT owner FROM http_sessions WHERE last_seen_at_ms > ?1
     GROUP BY owner ORDER BY count(*) DESC, owner LIMIT 1";
const OLDEST_OF_OWNER_SQL: &str = "\
    SELECT id FROM http_sessions WHERE owner = ?1 AND last_seen_at_ms > ?2
     ORDER BY last_seen_at_ms, id LIMIT 1";

impl Store {
    /// Stores a new session within `bounds`, in one transaction that first prunes a few
    /// expired rows; returns the id of the session it ended to make room, if it ended one.
    pub fn insert_http_session(
        &self,
        session: &StoredSession,
        bounds: SessionBounds,
    ) -> Result<Option<String>, StoreError> {
        self.in_transaction(|tx| {
            tx.execute(
                PRUNE_SQL,
                args![bounds.expired_at_or_before_ms, PRUNE_BATCH],
            )?;
            let evicted = make_room(tx, &session.owner, bounds)?;
            tx.execute(
                INSERT_SQL,
                args![
                    session.id,
                    session.owner,
                    session.protocol_version,
                    session.client_capabilities,
                    session.log_level,
                    session.created_at_ms,
                    session.last_seen_at_ms
                ],
            )?;
            Ok(evicted)
        })
    }

    /// The stored session `id`, expired or not (the caller judges its age and owner).
    pub fn find_http_session(&self, id: &str) -> Result<Option<StoredSession>, StoreError> {
        self.with_conn(|conn| {
            conn.query_opt(FIND_SQL, args![id], |r| {
                Ok(StoredSession {
                    id: r.get(0)?,
                    owner: r.get(1)?,
                    protocol_version: r.get(2)?,
                    client_capabilities: r.get(3)?,
                    log_level: r.get(4)?,
                    created_at_ms: r.get(5)?,
                    last_seen_at_ms: r.get(6)?,
                })
            })
        })
    }

    /// Records a use of session `id` at `now_ms` (never moving it back); false when the
    /// session is gone or already recorded as seen since.
    pub fn touch_http_session(&self, id: &str, now_ms: i64) -> Result<bool, StoreError> {
        self.in_transaction(|tx| {
            tx.execute(
                "UPDATE http_sessions SET last_seen_at_ms = ?2
                  WHERE id = ?1 AND last_seen_at_ms < ?2",
                args![id, now_ms],
            )
        })
        .map(|changed| changed == 1)
    }

    /// Records the level `logging/setLevel` set on session `id`; false when it is gone.
    pub fn set_http_session_log_level(&self, id: &str, level: &str) -> Result<bool, StoreError> {
        self.in_transaction(|tx| {
            tx.execute(
                "UPDATE http_sessions SET log_level = ?2 WHERE id = ?1",
                args![id, level],
            )
        })
        .map(|changed| changed == 1)
    }

    /// Deletes session `id` if it expired (was last seen at or before `cutoff_ms`), as a
    /// reader that found it expired does, so that it stays gone.
    pub fn delete_expired_http_session(&self, id: &str, cutoff_ms: i64) -> Result<(), StoreError> {
        self.in_transaction(|tx| {
            tx.execute(
                "DELETE FROM http_sessions WHERE id = ?1 AND last_seen_at_ms <= ?2",
                args![id, cutoff_ms],
            )
        })
        .map(|_| ())
    }

    /// Ends session `id` of `owner`; false when there is no such live session of that
    /// owner (another owner's session is left alone, an expired one is removed anyway).
    pub fn delete_http_session(
        &self,
        id: &str,
        owner: &str,
        expired_at_or_before_ms: i64,
    ) -> Result<bool, StoreError> {
        self.in_transaction(|tx| {
            let live = tx.query_opt(
                "DELETE FROM http_sessions WHERE id = ?1 AND owner = ?2
                 RETURNING last_seen_at_ms",
                args![id, owner],
                |r| r.get::<i64>(0),
            )?;
            Ok(live.is_some_and(|seen| seen > expired_at_or_before_ms))
        })
    }
}

/// Ends one live session when `owner` is at its cap or the table is full: the least
/// recently seen of `owner`, or of the owner holding the most sessions.
fn make_room(
    tx: &Tx<'_>,
    owner: &str,
    bounds: SessionBounds,
) -> Result<Option<String>, StoreError> {
    let cutoff = bounds.expired_at_or_before_ms;
    let owned: i64 = tx.query_one(OWNER_LIVE_SQL, args![owner, cutoff], |r| r.get(0))?;
    let victim_owner = if owned >= bounds.per_owner.max(1) {
        owner.to_owned()
    } else {
        let all: i64 = tx.query_one(ALL_LIVE_SQL, args![cutoff], |r| r.get(0))?;
        if all < bounds.capacity.max(1) {
            return Ok(None);
        }
        match tx.query_opt(BUSIEST_OWNER_SQL, args![cutoff], |r| r.get::<String>(0))? {
            Some(busiest) => busiest,
            None => return Ok(None),
        }
    };
    let victim = tx.query_opt(OLDEST_OF_OWNER_SQL, args![victim_owner, cutoff], |r| {
        r.get::<String>(0)
    })?;
    if let Some(id) = &victim {
        tx.execute("DELETE FROM http_sessions WHERE id = ?1", args![id])?;
    }
    Ok(victim)
}

/// Makes every statement on `http_sessions` fail (the table is renamed away), or undoes it:
/// for the tests of what a failing store answers.
#[cfg(test)]
pub(crate) fn break_table(store: &Store, broken: bool) {
    let sql = if broken {
        "ALTER TABLE http_sessions RENAME TO http_sessions_away"
    } else {
        "ALTER TABLE http_sessions_away RENAME TO http_sessions"
    };
    store
        .in_transaction(|tx| tx.batch(sql))
        .expect("rename http_sessions");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::stores;

    fn row(id: &str, owner: &str, seen: i64) -> StoredSession {
        StoredSession {
            id: id.to_owned(),
            owner: owner.to_owned(),
            protocol_version: "2025-06-18".to_owned(),
            client_capabilities: r#"{"sampling":{}}"#.to_owned(),
            log_level: None,
            created_at_ms: seen,
            last_seen_at_ms: seen,
        }
    }

    fn bounds(per_owner: i64, capacity: i64, cutoff: i64) -> SessionBounds {
        SessionBounds {
            per_owner,
            capacity,
            expired_at_or_before_ms: cutoff,
        }
    }

    fn ids(store: &Store) -> Vec<String> {
        store
            .with_conn(|c| {
                c.query_all("SELECT id FROM http_sessions ORDER BY id", args![], |r| {
                    r.get(0)
                })
            })
            .expect("ids")
    }

    #[test]
    fn a_session_is_stored_found_touched_leveled_and_deleted_by_its_owner() {
        for scratch in stores() {
            let store = &scratch.store;
            let open = row("s1", "key:alice", 1_000);
            assert_eq!(
                store
                    .insert_http_session(&open, bounds(10, 100, 0))
                    .expect("store"),
                None
            );
            assert_eq!(
                store.find_http_session("s1").expect("store"),
                Some(open.clone())
            );
            assert_eq!(store.find_http_session("nope").expect("store"), None);

            assert!(store.touch_http_session("s1", 5_000).expect("store"));
            assert!(
                !store.touch_http_session("s1", 4_000).expect("store"),
                "never back"
            );
            assert!(
                store
                    .set_http_session_log_level("s1", "debug")
                    .expect("store")
            );
            let found = store.find_http_session("s1").expect("find").expect("row");
            assert_eq!(found.last_seen_at_ms, 5_000);
            assert_eq!(found.created_at_ms, 1_000);
            assert_eq!(found.log_level.as_deref(), Some("debug"));

            assert!(
                !store
                    .delete_http_session("s1", "key:mallory", 0)
                    .expect("store")
            );
            assert!(store.find_http_session("s1").expect("find").is_some());
            assert!(
                store
                    .delete_http_session("s1", "key:alice", 0)
                    .expect("store")
            );
            assert!(
                !store
                    .delete_http_session("s1", "key:alice", 0)
                    .expect("store")
            );
            assert_eq!(store.find_http_session("s1").expect("store"), None);
            assert!(!store.touch_http_session("s1", 9_000).expect("store"));
            assert!(
                !store
                    .set_http_session_log_level("s1", "info")
                    .expect("store")
            );

            // Only an expired session is deleted as expired.
            store
                .insert_http_session(&row("s2", "key:alice", 2_000), bounds(10, 100, 0))
                .expect("insert");
            store
                .delete_expired_http_session("s2", 1_999)
                .expect("store");
            assert!(store.find_http_session("s2").expect("store").is_some());
            store
                .delete_expired_http_session("s2", 2_000)
                .expect("store");
            assert_eq!(store.find_http_session("s2").expect("store"), None);

            // An expired session is removed, but deleting it is "not found".
            store
                .insert_http_session(&row("old", "key:alice", 1_000), bounds(10, 100, 0))
                .expect("insert");
            assert!(
                !store
                    .delete_http_session("old", "key:alice", 1_000)
                    .expect("store")
            );
            assert!(ids(store).is_empty());
        }
    }

    #[test]
    fn an_owner_keeps_at_most_its_cap_and_a_full_table_gives_way_at_the_busiest_owner() {
        for scratch in stores() {
            let store = &scratch.store;
            let b = bounds(3, 6, 0);
            for (i, id) in ["a1", "a2", "a3"].iter().enumerate() {
                let seen = 100 + i64::try_from(i).expect("small");
                assert_eq!(
                    store
                        .insert_http_session(&row(id, "key:alice", seen), b)
                        .expect("store"),
                    None
                );
            }
            // Alice's fourth ends her least recently seen.
            assert_eq!(
                store
                    .insert_http_session(&row("a4", "key:alice", 200), b)
                    .expect("store"),
                Some("a1".to_owned())
            );
            for (id, seen) in [("b1", 300), ("b2", 301), ("c1", 302)] {
                let owner = if id.starts_with('b') {
                    "key:bob"
                } else {
                    "key:carol"
                };
                assert_eq!(
                    store
                        .insert_http_session(&row(id, owner, seen), b)
                        .expect("store"),
                    None
                );
            }
            // Full (6 live): Carol's second ends the oldest of Alice, who holds the most.
            assert_eq!(
                store
                    .insert_http_session(&row("c2", "key:carol", 400), b)
                    .expect("store"),
                Some("a2".to_owned())
            );
            assert_eq!(ids(store), ["a3", "a4", "b1", "b2", "c1", "c2"]);
        }
    }

    #[test]
    fn expired_rows_neither_count_nor_stay_and_are_pruned_in_batches() {
        for scratch in stores() {
            let store = &scratch.store;
            let b = bounds(2, 100, 0);
            for i in 0..3 {
                let id = format!("old{i}");
                store
                    .insert_http_session(&row(&id, "key:alice", 10 + i), b)
                    .expect("insert");
            }
            // With everything up to 20 expired, Alice is under her cap again, and the new
            // session prunes what expired.
            assert_eq!(
                store
                    .insert_http_session(&row("new", "key:alice", 50), bounds(2, 100, 20))
                    .expect("store"),
                None
            );
            assert_eq!(ids(store), ["new"]);

            // One new session prunes at most a batch of them.
            for i in 0..PRUNE_BATCH + 3 {
                let id = format!("p{i:03}");
                store
                    .insert_http_session(&row(&id, &format!("key:{i}"), 60), b)
                    .expect("insert");
            }
            store
                .insert_http_session(&row("last", "key:last", 100), bounds(2, 1_000, 60))
                .expect("insert");
            // 68 expired (`new` among them): 64 went, 4 stay beside `last`.
            assert_eq!(ids(store).len(), 5);
        }
    }

    #[test]
    fn a_broken_table_is_an_error_never_a_panic() {
        for scratch in stores() {
            let store = &scratch.store;
            break_table(store, true);
            assert!(matches!(
                store.find_http_session("s1"),
                Err(StoreError::Sqlite(_) | StoreError::Database(_))
            ));
            break_table(store, false);
            assert_eq!(store.find_http_session("s1").expect("store"), None);
        }
    }
}
