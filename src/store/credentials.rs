//! The `credentials` and `oauth_clients` tables and their only writer: API keys and OAuth
//! access tokens (looked up by public id on every call), OAuth clients, revocation,
//! rotation, and the per-credential and per-client limit overrides. Secrets never reach
//! this module: it stores and returns hashes, which the guards verify.

use rusqlite::{OptionalExtension, params};

use super::SqlResult;
use super::plans::{PerMinute, to_count};
use super::{Conn, Store, StoreError, Tx};
use crate::config::GuardChannel;

/// What one indexed read tells about a credential, on every call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialRow {
    /// `api_key` or `oauth_access`.
    pub kind: String,
    /// `live` or `test`.
    pub mode: String,
    /// argon2id PHC string (API keys) or `sha256$<hex>` (access tokens).
    pub secret_hash: String,
    /// Granted scopes.
    pub scopes: Vec<String>,
    /// The OAuth client it belongs to.
    pub client_id: Option<String>,
    /// Unix seconds, if it expires.
    pub expires_at: Option<i64>,
    /// Unix seconds, if revoked.
    pub revoked_at: Option<i64>,
    /// The rotated-out hash, while a rotation grace runs.
    pub previous_hash: Option<String>,
    /// Until when the rotated-out hash still works.
    pub previous_expires_at: Option<i64>,
    /// Unix seconds (updated at most once a minute).
    pub last_used_at: Option<i64>,
    /// When its OAuth client was revoked, if it was.
    pub client_revoked_at: Option<i64>,
    /// The installation's mode (`company.mode`), `None` before `tollgate init`.
    pub installation_mode: Option<String>,
    /// The credential's own guard channel, `None` to follow the setting.
    pub guard_channel: Option<GuardChannel>,
}

const CREDENTIAL_SELECT: &str = "SELECT c.kind, c.mode, c.secret_hash, c.scopes, c.client_id, \
     c.expires_at, c.revoked_at, c.previous_secret_hash, c.previous_secret_expires_at, \
     c.last_used_at, o.revoked_at, (SELECT mode FROM company WHERE id = 1), c.guard_channel \
     FROM credentials c LEFT JOIN oauth_clients o ON o.client_id = c.client_id \
     WHERE c.public_id = ?1";

/// Reads a JSON list of strings as stored; an unreadable one counts as empty (and is
/// logged), so a damaged row grants nothing.
fn string_list(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_else(|e| {
        tracing::warn!(cause = %e, "a stored JSON list is unreadable; treating it as empty");
        Vec::new()
    })
}

/// A stored guard channel; the column's CHECK admits only the words of [`GuardChannel`].
fn stored_channel(word: Option<String>) -> Option<GuardChannel> {
    word.and_then(|w| w.parse().ok())
}

fn to_json(list: &[String]) -> String {
    serde_json::Value::from(list.to_vec()).to_string()
}

/// The credential with `public_id`, read on `conn` (the charging transaction re-checks a
/// cached token this way).
pub fn credential_on(
    conn: &Conn<'_>,
    public_id: &str,
) -> Result<Option<CredentialRow>, StoreError> {
    let mut stmt = conn.sql().prepare_cached(CREDENTIAL_SELECT).or_store()?;
    let row = stmt
        .query_row([public_id], |row| {
            Ok(CredentialRow {
                kind: row.get(0)?,
                mode: row.get(1)?,
                secret_hash: row.get(2)?,
                scopes: string_list(&row.get::<_, String>(3)?),
                client_id: row.get(4)?,
                expires_at: row.get(5)?,
                revoked_at: row.get(6)?,
                previous_hash: row.get(7)?,
                previous_expires_at: row.get(8)?,
                last_used_at: row.get(9)?,
                client_revoked_at: row.get(10)?,
                installation_mode: row.get(11)?,
                guard_channel: stored_channel(row.get(12)?),
            })
        })
        .optional()
        .or_store()?;
    Ok(row)
}

/// Records inside `tx` that the credential was used at `now`.
pub fn touch_last_used(tx: &Tx<'_>, public_id: &str, now: i64) -> Result<(), StoreError> {
    tx.sql()
        .prepare_cached("UPDATE credentials SET last_used_at = ?1 WHERE public_id = ?2")
        .or_store()?
        .execute(params![now, public_id])
        .or_store()?;
    Ok(())
}

/// API keys that count against the plan's allowance: not revoked, not expired.
pub fn count_active_keys(conn: &Conn<'_>, now: i64) -> Result<i64, StoreError> {
    conn.sql()
        .prepare_cached(
            "SELECT count(*) FROM credentials \
             WHERE kind = 'api_key' AND revoked_at IS NULL \
             AND (expires_at IS NULL OR expires_at > ?1)",
        )
        .or_store()?
        .query_row([now], |row| row.get(0))
        .or_store()
}

/// A credential to insert.
#[derive(Debug, Clone)]
pub struct NewCredential<'a> {
    /// Public id.
    pub public_id: &'a str,
    /// `api_key` or `oauth_access`.
    pub kind: &'a str,
    /// `live` or `test`.
    pub mode: &'a str,
    /// Label.
    pub name: &'a str,
    /// The hash of its secret.
    pub secret_hash: &'a str,
    /// Granted scopes.
    pub scopes: &'a [String],
    /// Owning OAuth client.
    pub client_id: Option<&'a str>,
    /// Unix seconds, if it expires.
    pub expires_at: Option<i64>,
    /// Unix seconds.
    pub created_at: i64,
    /// Its own guard channel (`None`: follow the setting).
    pub guard_channel: Option<GuardChannel>,
}

/// Inserts a credential inside `tx`.
pub fn insert_credential(tx: &Tx<'_>, new: &NewCredential<'_>) -> Result<(), StoreError> {
    tx.sql()
        .prepare_cached(
            "INSERT INTO credentials (public_id, kind, mode, name, secret_hash, scopes, client_id, \
             expires_at, created_at, guard_channel) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )
        .or_store()?
        .execute(params![
            new.public_id,
            new.kind,
            new.mode,
            new.name,
            new.secret_hash,
            to_json(new.scopes),
            new.client_id,
            new.expires_at,
            new.created_at,
            new.guard_channel.map(GuardChannel::as_str)
        ])
        .or_store()?;
    Ok(())
}

/// Sets the guard channel of the credential `public_id` inside `tx` (`None`: follow the
/// setting); `false` when there is no such credential.
pub fn set_guard_channel(
    tx: &Tx<'_>,
    public_id: &str,
    channel: Option<GuardChannel>,
) -> Result<bool, StoreError> {
    let changed = tx
        .sql()
        .prepare_cached("UPDATE credentials SET guard_channel = ?1 WHERE public_id = ?2")
        .or_store()?
        .execute(params![channel.map(GuardChannel::as_str), public_id])
        .or_store()?;
    Ok(changed > 0)
}

/// Whether a credential with `public_id` exists (of any kind or standing).
pub fn credential_exists(conn: &Conn<'_>, public_id: &str) -> Result<bool, StoreError> {
    let found: Option<i64> = conn
        .sql()
        .prepare_cached("SELECT 1 FROM credentials WHERE public_id = ?1")
        .or_store()?
        .query_row([public_id], |row| row.get(0))
        .optional()
        .or_store()?;
    Ok(found.is_some())
}

/// Deletes the OAuth access tokens that expired before `before`.
pub fn delete_access_tokens_expired_before(tx: &Tx<'_>, before: i64) -> Result<(), StoreError> {
    tx.sql()
        .prepare_cached("DELETE FROM credentials WHERE kind = 'oauth_access' AND expires_at < ?1")
        .or_store()?
        .execute([before])
        .or_store()?;
    Ok(())
}

/// What a rotation needs to know about a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyStanding {
    /// `api_key` or `oauth_access`.
    pub kind: String,
    /// `live` or `test`.
    pub mode: String,
    /// Unix seconds, if revoked.
    pub revoked_at: Option<i64>,
    /// Unix seconds, if it expires.
    pub expires_at: Option<i64>,
}

/// The standing of the credential `public_id`, read inside `tx`.
pub fn key_standing(tx: &Tx<'_>, public_id: &str) -> Result<Option<KeyStanding>, StoreError> {
    tx.sql()
        .prepare_cached(
            "SELECT kind, mode, revoked_at, expires_at FROM credentials WHERE public_id = ?1",
        )
        .or_store()?
        .query_row([public_id], |r| {
            Ok(KeyStanding {
                kind: r.get(0)?,
                mode: r.get(1)?,
                revoked_at: r.get(2)?,
                expires_at: r.get(3)?,
            })
        })
        .optional()
        .or_store()
}

/// Replaces the secret hash of `public_id`; the old one keeps working until
/// `previous_until` (`None`: not at all).
pub fn replace_secret(
    tx: &Tx<'_>,
    public_id: &str,
    hash: &str,
    previous_until: Option<i64>,
) -> Result<(), StoreError> {
    tx.sql()
        .prepare_cached(
            "UPDATE credentials SET previous_secret_hash = CASE WHEN ?1 IS NULL THEN NULL \
             ELSE secret_hash END, previous_secret_expires_at = ?1, secret_hash = ?2 \
             WHERE public_id = ?3",
        )
        .or_store()?
        .execute(params![previous_until, hash, public_id])
        .or_store()?;
    Ok(())
}

/// What can be revoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revocable {
    /// A credential (API key or access token), by public id.
    Credential,
    /// An OAuth client, by client id.
    Client,
}

/// Sets `revoked_at = now` on a credential or client: `Some(true)` when it was active,
/// `Some(false)` when already revoked, `None` when there is no such row.
pub fn revoke(
    tx: &Tx<'_>,
    what: Revocable,
    id: &str,
    now: i64,
) -> Result<Option<bool>, StoreError> {
    let (table, column) = match what {
        Revocable::Credential => ("credentials", "public_id"),
        Revocable::Client => ("oauth_clients", "client_id"),
    };
    let conn = tx.sql();
    let changed = conn
        .prepare_cached(&format!(
            "UPDATE {table} SET revoked_at = ?1 WHERE {column} = ?2 AND revoked_at IS NULL"
        ))
        .or_store()?
        .execute(params![now, id])
        .or_store()?;
    if changed > 0 {
        return Ok(Some(true));
    }
    let exists: Option<i64> = conn
        .prepare_cached(&format!("SELECT 1 FROM {table} WHERE {column} = ?1"))
        .or_store()?
        .query_row([id], |row| row.get(0))
        .optional()
        .or_store()?;
    Ok(exists.map(|_| false))
}

/// One API key as `tollgate key list` shows it (never its secret or hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRow {
    /// Public id.
    pub public_id: String,
    /// Label.
    pub name: String,
    /// `live` or `test`.
    pub mode: String,
    /// Granted scopes.
    pub scopes: Vec<String>,
    /// Owning OAuth client.
    pub client_id: Option<String>,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds, if it expires.
    pub expires_at: Option<i64>,
    /// Unix seconds, if revoked.
    pub revoked_at: Option<i64>,
    /// Unix seconds (updated at most once a minute).
    pub last_used_at: Option<i64>,
    /// Until when the rotated-out secret still works, if a rotation grace is running.
    pub previous_secret_until: Option<i64>,
    /// Its own guard channel, `None` when it follows the setting.
    pub guard_channel: Option<GuardChannel>,
}

impl KeyRow {
    /// `active`, `revoked` or `expired`.
    pub fn status(&self, now: i64) -> &'static str {
        if self.revoked_at.is_some() {
            "revoked"
        } else if self.expires_at.is_some_and(|at| at <= now) {
            "expired"
        } else {
            "active"
        }
    }
}

/// An OAuth client, as the token endpoint sees it (never its secret or hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthClient {
    /// Client id.
    pub client_id: String,
    /// Label.
    pub name: String,
    /// Scopes its access tokens may carry.
    pub allowed_scopes: Vec<String>,
    /// Override of the plan's per-client limit (calls per minute), if any.
    pub per_minute_limit: Option<u32>,
    /// Unix seconds.
    pub created_at: i64,
    /// Whether it was revoked.
    pub revoked: bool,
}

const CLIENT_SELECT: &str = "SELECT client_id, name, allowed_scopes, per_minute_limit, created_at, \
     revoked_at, secret_hash FROM oauth_clients";

fn client_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(OAuthClient, String)> {
    let client = OAuthClient {
        client_id: row.get(0)?,
        name: row.get(1)?,
        allowed_scopes: string_list(&row.get::<_, String>(2)?),
        per_minute_limit: row.get(3)?,
        created_at: row.get(4)?,
        revoked: row.get::<_, Option<i64>>(5)?.is_some(),
    };
    Ok((client, row.get(6)?))
}

/// The client `client_id` with its secret hash, read on `conn`.
pub fn client_on(
    conn: &Conn<'_>,
    client_id: &str,
) -> Result<Option<(OAuthClient, String)>, StoreError> {
    let mut stmt = conn
        .sql()
        .prepare_cached(&format!("{CLIENT_SELECT} WHERE client_id = ?1"))
        .or_store()?;
    stmt.query_row([client_id], client_from_row)
        .optional()
        .or_store()
}

/// An OAuth client to insert.
#[derive(Debug, Clone)]
pub struct NewClient<'a> {
    /// Client id.
    pub client_id: &'a str,
    /// Label.
    pub name: &'a str,
    /// argon2id PHC string of its secret.
    pub secret_hash: &'a str,
    /// Scopes its access tokens may carry.
    pub allowed_scopes: &'a [String],
    /// Unix seconds.
    pub created_at: i64,
}

/// A credential's limit overrides (only credentials with at least one are listed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialLimits {
    /// Public id.
    pub credential_id: String,
    /// Label.
    pub name: String,
    /// Overrides by category (read, write, destructive, send, generate); `None` inherits.
    pub per_minute: [Option<u64>; 5],
}

/// An OAuth client's limit override (only clients with one are listed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientLimit {
    /// Client id.
    pub client_id: String,
    /// Label.
    pub name: String,
    /// Calls per minute for all the client's credentials together.
    pub per_minute: u64,
}

impl Store {
    /// The credential with `public_id`.
    pub fn credential(&self, public_id: &str) -> Result<Option<CredentialRow>, StoreError> {
        self.with_conn(|conn| credential_on(conn, public_id))
    }

    /// Records that the credential was used at `now`, without waiting for another writer:
    /// on contention nothing is written (`Busy`; the next call tries again).
    pub fn touch_last_used_unless_busy(&self, public_id: &str, now: i64) -> Result<(), StoreError> {
        self.read(|conn| {
            let previous: i64 = conn
                .pragma_query_value(None, "busy_timeout", |row| row.get(0))
                .or_store()?;
            conn.busy_timeout(std::time::Duration::ZERO).or_store()?;
            let updated = conn
                .prepare_cached("UPDATE credentials SET last_used_at = ?1 WHERE public_id = ?2")
                .and_then(|mut stmt| stmt.execute(params![now, public_id]));
            conn.busy_timeout(std::time::Duration::from_millis(
                u64::try_from(previous).unwrap_or(0),
            ))
            .or_store()?;
            updated.or_store()?;
            Ok(())
        })
    }

    /// Every API key, oldest first (OAuth access tokens are not listed).
    pub fn api_keys(&self) -> Result<Vec<KeyRow>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT public_id, name, mode, scopes, client_id, created_at, expires_at, \
                 revoked_at, last_used_at, previous_secret_expires_at, guard_channel FROM credentials \
                 WHERE kind = 'api_key' ORDER BY created_at, public_id",
                )
                .or_store()?;
            let keys = stmt
                .query_map([], |row| {
                    Ok(KeyRow {
                        public_id: row.get(0)?,
                        name: row.get(1)?,
                        mode: row.get(2)?,
                        scopes: string_list(&row.get::<_, String>(3)?),
                        client_id: row.get(4)?,
                        created_at: row.get(5)?,
                        expires_at: row.get(6)?,
                        revoked_at: row.get(7)?,
                        last_used_at: row.get(8)?,
                        previous_secret_until: row.get(9)?,
                        guard_channel: stored_channel(row.get(10)?),
                    })
                })
                .or_store()?
                .collect::<Result<Vec<_>, _>>()
                .or_store()?;
            Ok(keys)
        })
    }

    /// The client `client_id` with its secret hash.
    pub fn client_with_hash(
        &self,
        client_id: &str,
    ) -> Result<Option<(OAuthClient, String)>, StoreError> {
        self.with_conn(|conn| client_on(conn, client_id))
    }

    /// Every OAuth client, oldest first.
    pub fn clients(&self) -> Result<Vec<OAuthClient>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached(&format!("{CLIENT_SELECT} ORDER BY created_at, client_id"))
                .or_store()?;
            let clients = stmt
                .query_map([], |row| client_from_row(row).map(|(client, _)| client))
                .or_store()?
                .collect::<Result<Vec<_>, _>>()
                .or_store()?;
            Ok(clients)
        })
    }

    /// Inserts an OAuth client.
    pub fn insert_client(&self, new: &NewClient<'_>) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.prepare_cached(
                "INSERT INTO oauth_clients (client_id, name, secret_hash, allowed_scopes, \
                 created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .or_store()?
            .execute(params![
                new.client_id,
                new.name,
                new.secret_hash,
                to_json(new.allowed_scopes),
                new.created_at
            ])
            .or_store()?;
            Ok(())
        })
    }

    /// The credentials with at least one limit override, by public id.
    pub fn credential_limits(&self) -> Result<Vec<CredentialLimits>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT public_id, name, read_per_minute, write_per_minute, \
                        destructive_per_minute, send_per_minute, generate_per_minute
                   FROM credentials
                  WHERE COALESCE(read_per_minute, write_per_minute, destructive_per_minute,
                                 send_per_minute, generate_per_minute) IS NOT NULL
                  ORDER BY public_id",
                )
                .or_store()?;
            let opt = |v: Option<i64>| v.map(to_count);
            let rows = stmt
                .query_map([], |r| {
                    Ok(CredentialLimits {
                        credential_id: r.get(0)?,
                        name: r.get(1)?,
                        per_minute: [
                            opt(r.get(2)?),
                            opt(r.get(3)?),
                            opt(r.get(4)?),
                            opt(r.get(5)?),
                            opt(r.get(6)?),
                        ],
                    })
                })
                .or_store()?;
            rows.collect::<Result<Vec<_>, _>>().or_store()
        })
    }

    /// The OAuth clients with a limit override, by client id.
    pub fn client_limits(&self) -> Result<Vec<ClientLimit>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT client_id, name, per_minute_limit FROM oauth_clients
                  WHERE per_minute_limit IS NOT NULL ORDER BY client_id",
                )
                .or_store()?;
            let rows = stmt
                .query_map([], |r| {
                    Ok(ClientLimit {
                        client_id: r.get(0)?,
                        name: r.get(1)?,
                        per_minute: to_count(r.get(2)?),
                    })
                })
                .or_store()?;
            rows.collect::<Result<Vec<_>, _>>().or_store()
        })
    }

    /// Sets (or with `None` clears) a credential's override for one category; `false`
    /// when there is no such credential.
    pub fn set_credential_limit(
        &self,
        public_id: &str,
        of: PerMinute,
        value: Option<i64>,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "UPDATE credentials SET {} = ?1 WHERE public_id = ?2",
            of.column()
        );
        let changed = self.write(|tx| tx.execute(&sql, params![value, public_id]).or_store())?;
        Ok(changed > 0)
    }

    /// Sets (or with `None` clears) an OAuth client's override; `false` when there is no
    /// such client.
    pub fn set_client_limit(
        &self,
        client_id: &str,
        value: Option<i64>,
    ) -> Result<bool, StoreError> {
        let changed = self.write(|tx| {
            tx.execute(
                "UPDATE oauth_clients SET per_minute_limit = ?1 WHERE client_id = ?2",
                params![value, client_id],
            )
            .or_store()
        })?;
        Ok(changed > 0)
    }
}
