//! The `idempotency_keys` table and its only writer: a key is reserved (`in_flight`,
//! leased to an owner), then completed with the call's result or released; expired
//! records are pruned a few at a time by the claims themselves.

use rusqlite::{OptionalExtension, params};

use super::SqlResult;
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
    tx.sql()
        .prepare_cached(
            "DELETE FROM idempotency_keys WHERE (credential_id, key) IN
               (SELECT credential_id, key FROM idempotency_keys WHERE expires_at <= ?1 LIMIT ?2)",
        )
        .or_store()?
        .execute(params![now, batch])
        .or_store()?;
    Ok(())
}

/// The record of `key` for `credential_id`, if any.
pub fn find(
    conn: &Conn<'_>,
    credential_id: &str,
    key: &str,
) -> Result<Option<IdempotencyRecord>, StoreError> {
    let mut stmt = conn
        .sql()
        .prepare_cached(
            "SELECT tool, fingerprint, state, result, expires_at FROM idempotency_keys
         WHERE credential_id = ?1 AND key = ?2",
        )
        .or_store()?;
    let record = stmt
        .query_row(params![credential_id, key], |r| {
            Ok(IdempotencyRecord {
                tool: r.get(0)?,
                fingerprint: r.get(1)?,
                completed: r.get::<_, String>(2)? == "completed",
                result: r.get(3)?,
                expires_at: r.get(4)?,
            })
        })
        .optional()
        .or_store()?;
    Ok(record)
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
    tx.sql()
        .prepare_cached(
            "INSERT INTO idempotency_keys
                (credential_id, key, tool, fingerprint, state, owner, result, created_at,
                 expires_at)
             VALUES (?1, ?2, ?3, ?4, 'in_flight', ?5, NULL, ?6, ?7)
             ON CONFLICT (credential_id, key) DO UPDATE SET
                tool = excluded.tool, fingerprint = excluded.fingerprint, state = 'in_flight',
                owner = excluded.owner, result = NULL, created_at = excluded.created_at,
                expires_at = excluded.expires_at",
        )
        .or_store()?
        .execute(params![
            held.credential_id,
            held.key,
            tool,
            fingerprint,
            held.owner,
            now,
            lease_until
        ])
        .or_store()?;
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
    let changed = tx
        .sql()
        .prepare_cached(
            "UPDATE idempotency_keys SET state = 'completed', owner = NULL, result = ?4,
                expires_at = ?5
             WHERE credential_id = ?1 AND key = ?2 AND owner = ?3 AND state = 'in_flight'",
        )
        .or_store()?
        .execute(params![
            held.credential_id,
            held.key,
            held.owner,
            result,
            keep_until
        ])
        .or_store()?;
    Ok(changed == 1)
}

/// Deletes a held reservation, so a retry runs afresh.
pub fn release(tx: &Tx<'_>, held: Held<'_>) -> Result<(), StoreError> {
    tx.sql()
        .prepare_cached(
            "DELETE FROM idempotency_keys
             WHERE credential_id = ?1 AND key = ?2 AND owner = ?3 AND state = 'in_flight'",
        )
        .or_store()?
        .execute(params![held.credential_id, held.key, held.owner])
        .or_store()?;
    Ok(())
}

/// Deletes the completed records of every test (`tg_test_`) credential, inside the caller's
/// transaction: when the sandbox is reset, their replays would name rows that are gone.
/// In-flight records stay, so a call running meanwhile still holds its key.
pub fn forget_completed_of_test_keys(tx: &Tx<'_>) -> Result<(), StoreError> {
    tx.sql()
        .execute(
            "DELETE FROM idempotency_keys WHERE state = 'completed'
           AND credential_id IN (SELECT public_id FROM credentials WHERE mode = 'test')",
            [],
        )
        .or_store()?;
    Ok(())
}
