//! The `idempotency_keys` table and its only writer: a key is reserved (`in_flight`,
//! leased to an owner), then completed with the call's result or released; expired
//! records are pruned a few at a time by the claims themselves.

use super::sql::args;
use super::{Conn, StoreError, Tx};

/// A stored record, as far as a claim needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// The tool the key was used with.
    pub tool: String,
    /// SHA-256 (hex) of the tool and its canonical arguments.
    pub fingerprint: String,
    /// Completed (else in flight).
    pub completed: bool,
    /// The stored `tools/call` result (JSON), once completed.
    pub result: Option<String>,
    /// Unix seconds: the end of the lease, or of the retention once completed.
    pub expires_at: i64,
}

/// Who holds a reservation: the credential, its key and the owner tag of the lease.
#[derive(Debug, Clone, Copy)]
pub struct Held<'a> {
    /// The credential's public id.
    pub credential_id: &'a str,
    /// The idempotency key.
    pub key: &'a str,
    /// The owner tag of this process's lease.
    pub owner: &'a str,
}

/// Deletes up to `batch` records that expired by `now`.
pub fn prune(tx: &Tx<'_>, now: i64, batch: i64) -> Result<(), StoreError> {
    tx.execute(
        "DELETE FROM idempotency_keys WHERE (credential_id, key) IN
           (SELECT credential_id, key FROM idempotency_keys WHERE expires_at <= ?1 LIMIT ?2)",
        args![now, batch],
    )?;
    Ok(())
}

/// The record of `key` for `credential_id`, if any.
pub fn find(
    conn: &Conn<'_>,
    credential_id: &str,
    key: &str,
) -> Result<Option<IdempotencyRecord>, StoreError> {
    conn.query_opt(
        "SELECT tool, fingerprint, state, result, expires_at FROM idempotency_keys
         WHERE credential_id = ?1 AND key = ?2",
        args![credential_id, key],
        |r| {
            Ok(IdempotencyRecord {
                tool: r.get(0)?,
                fingerprint: r.get(1)?,
                completed: r.get::<String>(2)? == "completed",
                result: r.get(3)?,
                expires_at: r.get(4)?,
            })
        },
    )
}

/// Reserves the key for `held.owner` until `lease_until` (replacing an expired record).
pub fn reserve(
    tx: &Tx<'_>,
    held: Held<'_>,
    tool: &str,
    fingerprint: &str,
    now: i64,
    lease_until: i64,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO idempotency_keys
            (credential_id, key, tool, fingerprint, state, owner, result, created_at,
             expires_at)
         VALUES (?1, ?2, ?3, ?4, 'in_flight', ?5, NULL, ?6, ?7)
         ON CONFLICT (credential_id, key) DO UPDATE SET
            tool = excluded.tool, fingerprint = excluded.fingerprint, state = 'in_flight',
            owner = excluded.owner, result = NULL, created_at = excluded.created_at,
            expires_at = excluded.expires_at",
        args![
            held.credential_id,
            held.key,
            tool,
            fingerprint,
            held.owner,
            now,
            lease_until
        ],
    )?;
    Ok(())
}

/// Marks a held reservation completed with `result`, kept until `keep_until`; `false`
/// when the lease is no longer held.
pub fn complete(
    tx: &Tx<'_>,
    held: Held<'_>,
    result: &str,
    keep_until: i64,
) -> Result<bool, StoreError> {
    let changed = tx.execute(
        "UPDATE idempotency_keys SET state = 'completed', owner = NULL, result = ?4,
            expires_at = ?5
         WHERE credential_id = ?1 AND key = ?2 AND owner = ?3 AND state = 'in_flight'",
        args![held.credential_id, held.key, held.owner, result, keep_until],
    )?;
    Ok(changed == 1)
}

/// Deletes a held reservation, so a retry runs afresh.
pub fn release(tx: &Tx<'_>, held: Held<'_>) -> Result<(), StoreError> {
    tx.execute(
        "DELETE FROM idempotency_keys
         WHERE credential_id = ?1 AND key = ?2 AND owner = ?3 AND state = 'in_flight'",
        args![held.credential_id, held.key, held.owner],
    )?;
    Ok(())
}

/// Deletes the completed records of every test (`tg_test_`) credential, inside the caller's
/// transaction: when the sandbox is reset, their replays would name rows that are gone.
/// In-flight records stay, so a call running meanwhile still holds its key.
pub fn forget_completed_of_test_keys(tx: &Tx<'_>) -> Result<(), StoreError> {
    tx.execute(
        "DELETE FROM idempotency_keys WHERE state = 'completed'
           AND credential_id IN (SELECT public_id FROM credentials WHERE mode = 'test')",
        args![],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::store::sql::args;
    use crate::store::testing::stores;

    const PRINT: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn held<'a>(credential_id: &'a str, key: &'a str, owner: &'a str) -> Held<'a> {
        Held {
            credential_id,
            key,
            owner,
        }
    }

    fn reserve_at(store: &Store, h: Held<'_>, now: i64, lease_until: i64) {
        store
            .in_transaction(|tx| reserve(tx, h, "create_client", PRINT, now, lease_until))
            .expect("reserve");
    }

    fn found(store: &Store, credential_id: &str, key: &str) -> Option<IdempotencyRecord> {
        store
            .with_conn(|conn| find(conn, credential_id, key))
            .expect("find")
    }

    fn credential(store: &Store, public_id: &str, mode: &str) {
        store
            .in_transaction(|tx| {
                tx.execute(
                    "INSERT INTO credentials (public_id, mode, name, secret_hash, created_at)
                     VALUES (?1, ?2, 'k', '$argon2id$v=19$m=8,t=1,p=1$c2FsdA$aGFzaA', 1)",
                    args![public_id, mode],
                )
            })
            .expect("credential");
    }

    #[test]
    fn a_reservation_is_completed_with_its_result_by_its_owner_only() {
        for scratch in stores() {
            let store = &scratch.store;
            let mine = held("cred0001", "k1", "owner-a");
            reserve_at(store, mine, 10, 40);
            assert_eq!(
                found(store, "cred0001", "k1"),
                Some(IdempotencyRecord {
                    tool: "create_client".into(),
                    fingerprint: PRINT.into(),
                    completed: false,
                    result: None,
                    expires_at: 40,
                })
            );
            let theirs = held("cred0001", "k1", "owner-b");
            let complete_as = |h| {
                store
                    .in_transaction(|tx| complete(tx, h, r#"{"ok":true}"#, 500))
                    .expect("complete")
            };
            assert!(!complete_as(theirs));
            assert!(complete_as(mine));
            assert!(!complete_as(mine), "a completed record is no longer held");
            assert_eq!(
                found(store, "cred0001", "k1"),
                Some(IdempotencyRecord {
                    tool: "create_client".into(),
                    fingerprint: PRINT.into(),
                    completed: true,
                    result: Some(r#"{"ok":true}"#.into()),
                    expires_at: 500,
                })
            );
            assert_eq!(found(store, "cred0002", "k1"), None);
        }
    }

    #[test]
    fn a_release_frees_the_key_of_its_owner_only() {
        for scratch in stores() {
            let store = &scratch.store;
            let mine = held("cred0001", "k1", "owner-a");
            reserve_at(store, mine, 10, 40);
            let release_as = |h| store.in_transaction(|tx| release(tx, h)).expect("release");
            release_as(held("cred0001", "k1", "owner-b"));
            assert!(found(store, "cred0001", "k1").is_some());
            release_as(mine);
            assert_eq!(found(store, "cred0001", "k1"), None);
        }
    }

    #[test]
    fn an_expired_record_is_replaced_by_a_new_reservation() {
        for scratch in stores() {
            let store = &scratch.store;
            reserve_at(store, held("cred0001", "k1", "owner-a"), 10, 40);
            store
                .in_transaction(|tx| {
                    reserve(
                        tx,
                        held("cred0001", "k1", "owner-b"),
                        "void_invoice",
                        PRINT,
                        50,
                        80,
                    )
                })
                .expect("reserve again");
            let record = found(store, "cred0001", "k1").expect("record");
            assert_eq!(
                (record.tool.as_str(), record.expires_at),
                ("void_invoice", 80)
            );
            assert!(
                store
                    .in_transaction(|tx| complete(tx, held("cred0001", "k1", "owner-b"), "[]", 90))
                    .expect("complete")
            );
        }
    }

    #[test]
    fn pruning_deletes_expired_records_a_batch_at_a_time() {
        for scratch in stores() {
            let store = &scratch.store;
            for (key, until) in [("k1", 20), ("k2", 30), ("k3", 40), ("k4", 100)] {
                reserve_at(store, held("cred0001", key, "o"), 10, until);
            }
            store.in_transaction(|tx| prune(tx, 50, 2)).expect("prune");
            let left = ["k1", "k2", "k3", "k4"]
                .iter()
                .filter(|k| found(store, "cred0001", k).is_some())
                .count();
            assert_eq!(left, 2);
            store.in_transaction(|tx| prune(tx, 50, 2)).expect("prune");
            let left: Vec<&str> = ["k1", "k2", "k3", "k4"]
                .into_iter()
                .filter(|k| found(store, "cred0001", k).is_some())
                .collect();
            assert_eq!(left, ["k4"]);
        }
    }

    #[test]
    fn a_sandbox_reset_forgets_only_the_completed_records_of_test_keys() {
        for scratch in stores() {
            let store = &scratch.store;
            credential(store, "testkey01", "test");
            credential(store, "livekey01", "live");
            for (credential_id, key) in [
                ("testkey01", "done"),
                ("testkey01", "running"),
                ("livekey01", "done"),
            ] {
                reserve_at(store, held(credential_id, key, "o"), 10, 40);
            }
            for credential_id in ["testkey01", "livekey01"] {
                store
                    .in_transaction(|tx| complete(tx, held(credential_id, "done", "o"), "{}", 90))
                    .expect("complete");
            }
            store
                .in_transaction(forget_completed_of_test_keys)
                .expect("forget");
            assert_eq!(found(store, "testkey01", "done"), None);
            assert!(found(store, "testkey01", "running").is_some());
            assert!(found(store, "livekey01", "done").is_some());
        }
    }
}
