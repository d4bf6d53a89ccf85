//! The `credentials` and `oauth_clients` tables and their only writer: API keys and OAuth
//! access tokens (looked up by public id on every call), OAuth clients, revocation,
//! rotation, and the per-credential and per-client limit overrides. Secrets never reach
//! this module: it stores and returns hashes, which the guards verify.

use super::plans::{PerMinute, to_count};
use super::sql::{Row, args};
use super::{Conn, SqlResult, Store, StoreError, Tx};
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
    conn.query_opt(CREDENTIAL_SELECT, args![public_id], |row| {
        Ok(CredentialRow {
            kind: row.get(0)?,
            mode: row.get(1)?,
            secret_hash: row.get(2)?,
            scopes: string_list(&row.get::<String>(3)?),
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
}

/// Records inside `tx` that the credential was used at `now`.
pub fn touch_last_used(tx: &Tx<'_>, public_id: &str, now: i64) -> Result<(), StoreError> {
    tx.execute(TOUCH_SQL, args![now, public_id])?;
    Ok(())
}

const TOUCH_SQL: &str = "UPDATE credentials SET last_used_at = ?1 WHERE public_id = ?2";

// PostgreSQL locks the row an `UPDATE` writes, so a plain one would wait for a charging
// transaction that touches the same credential; `SKIP LOCKED` finds no row then, and the
// update writes nothing, as SQLite's does when it cannot get the file's write lock at once.
const TOUCH_UNLESS_LOCKED_SQL: &str = "UPDATE credentials SET last_used_at = ?1 \
     WHERE public_id = (SELECT public_id FROM credentials WHERE public_id = ?2 \
     FOR UPDATE SKIP LOCKED)";

/// API keys that count against the plan's allowance: not revoked, not expired.
pub fn count_active_keys(conn: &Conn<'_>, now: i64) -> Result<i64, StoreError> {
    conn.query_one(
        "SELECT count(*) FROM credentials \
         WHERE kind = 'api_key' AND revoked_at IS NULL \
         AND (expires_at IS NULL OR expires_at > ?1)",
        args![now],
        |row| row.get(0),
    )
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
    tx.execute(
        "INSERT INTO credentials (public_id, kind, mode, name, secret_hash, scopes, client_id, \
         expires_at, created_at, guard_channel) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        args![
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
        ],
    )?;
    Ok(())
}

/// Sets the guard channel of the credential `public_id` inside `tx` (`None`: follow the
/// setting); `false` when there is no such credential.
pub fn set_guard_channel(
    tx: &Tx<'_>,
    public_id: &str,
    channel: Option<GuardChannel>,
) -> Result<bool, StoreError> {
    let changed = tx.execute(
        "UPDATE credentials SET guard_channel = ?1 WHERE public_id = ?2",
        args![channel.map(GuardChannel::as_str), public_id],
    )?;
    Ok(changed > 0)
}

/// Whether a credential with `public_id` exists (of any kind or standing).
pub fn credential_exists(conn: &Conn<'_>, public_id: &str) -> Result<bool, StoreError> {
    let found = conn.query_opt(
        "SELECT 1 FROM credentials WHERE public_id = ?1",
        args![public_id],
        |_| Ok(()),
    )?;
    Ok(found.is_some())
}

/// Deletes the OAuth access tokens that expired before `before`.
pub fn delete_access_tokens_expired_before(tx: &Tx<'_>, before: i64) -> Result<(), StoreError> {
    tx.execute(
        "DELETE FROM credentials WHERE kind = 'oauth_access' AND expires_at < ?1",
        args![before],
    )?;
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
    tx.query_opt(
        "SELECT kind, mode, revoked_at, expires_at FROM credentials WHERE public_id = ?1",
        args![public_id],
        |r| {
            Ok(KeyStanding {
                kind: r.get(0)?,
                mode: r.get(1)?,
                revoked_at: r.get(2)?,
                expires_at: r.get(3)?,
            })
        },
    )
}

/// Replaces the secret hash of `public_id`; the old one keeps working until
/// `previous_until` (`None`: not at all).
pub fn replace_secret(
    tx: &Tx<'_>,
    public_id: &str,
    hash: &str,
    previous_until: Option<i64>,
) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE credentials SET previous_secret_hash = CASE WHEN CAST(?1 AS BIGINT) IS NULL \
         THEN NULL ELSE secret_hash END, previous_secret_expires_at = ?1, secret_hash = ?2 \
         WHERE public_id = ?3",
        args![previous_until, hash, public_id],
    )?;
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
    let (revoke, exists) = match what {
        Revocable::Credential => (
            "UPDATE credentials SET revoked_at = ?1 WHERE public_id = ?2 AND revoked_at IS NULL",
            "SELECT 1 FROM credentials WHERE public_id = ?1",
        ),
        Revocable::Client => (
            "UPDATE oauth_clients SET revoked_at = ?1 WHERE client_id = ?2 AND revoked_at IS NULL",
            "SELECT 1 FROM oauth_clients WHERE client_id = ?1",
        ),
    };
    if tx.execute(revoke, args![now, id])? > 0 {
        return Ok(Some(true));
    }
    let exists = tx.query_opt(exists, args![id], |_| Ok(()))?;
    Ok(exists.map(|()| false))
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

const CLIENTS_SQL: &str = "SELECT client_id, name, allowed_scopes, per_minute_limit, created_at, \
     revoked_at, secret_hash FROM oauth_clients ORDER BY created_at, client_id";

const CLIENT_BY_ID_SQL: &str = "SELECT client_id, name, allowed_scopes, per_minute_limit, \
     created_at, revoked_at, secret_hash FROM oauth_clients WHERE client_id = ?1";

fn client_from_row(row: &Row<'_>) -> Result<(OAuthClient, String), StoreError> {
    let client = OAuthClient {
        client_id: row.get(0)?,
        name: row.get(1)?,
        allowed_scopes: string_list(&row.get::<String>(2)?),
        per_minute_limit: row.get(3)?,
        created_at: row.get(4)?,
        revoked: row.get::<Option<i64>>(5)?.is_some(),
    };
    Ok((client, row.get(6)?))
}

/// The client `client_id` with its secret hash, read on `conn`.
pub fn client_on(
    conn: &Conn<'_>,
    client_id: &str,
) -> Result<Option<(OAuthClient, String)>, StoreError> {
    conn.query_opt(CLIENT_BY_ID_SQL, args![client_id], client_from_row)
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
    /// on contention nothing is written (`Busy` on SQLite; on PostgreSQL the update skips a
    /// row another transaction holds; the next call tries again).
    pub fn touch_last_used_unless_busy(&self, public_id: &str, now: i64) -> Result<(), StoreError> {
        self.with_conn(|conn| match conn.sqlite() {
            Some(sqlite) => {
                let previous: i64 =
                    conn.query_one("PRAGMA busy_timeout", args![], |row| row.get(0))?;
                sqlite.busy_timeout(std::time::Duration::ZERO).or_store()?;
                let updated = conn.execute(TOUCH_SQL, args![now, public_id]);
                sqlite
                    .busy_timeout(std::time::Duration::from_millis(
                        u64::try_from(previous).unwrap_or(0),
                    ))
                    .or_store()?;
                updated.map(|_| ())
            }
            None => conn
                .execute(TOUCH_UNLESS_LOCKED_SQL, args![now, public_id])
                .map(|_| ()),
        })
    }

    /// Every API key, oldest first (OAuth access tokens are not listed).
    pub fn api_keys(&self) -> Result<Vec<KeyRow>, StoreError> {
        self.with_conn(|conn| {
            conn.query_all(
                "SELECT public_id, name, mode, scopes, client_id, created_at, expires_at, \
                 revoked_at, last_used_at, previous_secret_expires_at, guard_channel \
                 FROM credentials WHERE kind = 'api_key' ORDER BY created_at, public_id",
                args![],
                |row| {
                    Ok(KeyRow {
                        public_id: row.get(0)?,
                        name: row.get(1)?,
                        mode: row.get(2)?,
                        scopes: string_list(&row.get::<String>(3)?),
                        client_id: row.get(4)?,
                        created_at: row.get(5)?,
                        expires_at: row.get(6)?,
                        revoked_at: row.get(7)?,
                        last_used_at: row.get(8)?,
                        previous_secret_until: row.get(9)?,
                        guard_channel: stored_channel(row.get(10)?),
                    })
                },
            )
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
        self.with_conn(|conn| {
            conn.query_all(CLIENTS_SQL, args![], |row| {
                client_from_row(row).map(|(client, _)| client)
            })
        })
    }

    /// Inserts an OAuth client.
    pub fn insert_client(&self, new: &NewClient<'_>) -> Result<(), StoreError> {
        self.in_transaction(|tx| {
            tx.execute(
                "INSERT INTO oauth_clients (client_id, name, secret_hash, allowed_scopes, \
                 created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                args![
                    new.client_id,
                    new.name,
                    new.secret_hash,
                    to_json(new.allowed_scopes),
                    new.created_at
                ],
            )?;
            Ok(())
        })
    }

    /// The credentials with at least one limit override, by public id.
    pub fn credential_limits(&self) -> Result<Vec<CredentialLimits>, StoreError> {
        let opt = |v: Option<i64>| v.map(to_count);
        self.with_conn(|conn| {
            conn.query_all(
                "SELECT public_id, name, read_per_minute, write_per_minute, \
                        destructive_per_minute, send_per_minute, generate_per_minute
                   FROM credentials
                  WHERE COALESCE(read_per_minute, write_per_minute, destructive_per_minute,
                                 send_per_minute, generate_per_minute) IS NOT NULL
                  ORDER BY public_id",
                args![],
                |r| {
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
                },
            )
        })
    }

    /// The OAuth clients with a limit override, by client id.
    pub fn client_limits(&self) -> Result<Vec<ClientLimit>, StoreError> {
        self.with_conn(|conn| {
            conn.query_all(
                "SELECT client_id, name, per_minute_limit FROM oauth_clients
                  WHERE per_minute_limit IS NOT NULL ORDER BY client_id",
                args![],
                |r| {
                    Ok(ClientLimit {
                        client_id: r.get(0)?,
                        name: r.get(1)?,
                        per_minute: to_count(r.get(2)?),
                    })
                },
            )
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
        let changed = self.in_transaction(|tx| tx.execute(&sql, args![value, public_id]))?;
        Ok(changed > 0)
    }

    /// Sets (or with `None` clears) an OAuth client's override; `false` when there is no
    /// such client.
    pub fn set_client_limit(
        &self,
        client_id: &str,
        value: Option<i64>,
    ) -> Result<bool, StoreError> {
        let changed = self.in_transaction(|tx| {
            tx.execute(
                "UPDATE oauth_clients SET per_minute_limit = ?1 WHERE client_id = ?2",
                args![value, client_id],
            )
        })?;
        Ok(changed > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sql::Dialect;
    use crate::store::testing::stores;

    const HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA";

    fn scopes(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn key<'a>(public_id: &'a str, scopes: &'a [String], created_at: i64) -> NewCredential<'a> {
        NewCredential {
            public_id,
            kind: "api_key",
            mode: "live",
            name: "ci",
            secret_hash: HASH,
            scopes,
            client_id: None,
            expires_at: None,
            created_at,
            guard_channel: None,
        }
    }

    fn insert(store: &Store, new: &NewCredential<'_>) {
        store
            .in_transaction(|tx| insert_credential(tx, new))
            .expect("insert credential");
    }

    fn client<'a>(client_id: &'a str, allowed_scopes: &'a [String]) -> NewClient<'a> {
        NewClient {
            client_id,
            name: "Partner",
            secret_hash: HASH,
            allowed_scopes,
            created_at: 50,
        }
    }

    #[test]
    fn a_created_credential_is_found_with_what_was_stored() {
        for scratch in stores() {
            let store = &scratch.store;
            let granted = scopes(&["invoices:read", "clients:write"]);
            let mut new = key("AbCdEf12", &granted, 100);
            new.expires_at = Some(5_000);
            new.guard_channel = Some(GuardChannel::ToolResult);
            insert(store, &new);
            let row = store.credential("AbCdEf12").expect("read").expect("found");
            assert_eq!(
                row,
                CredentialRow {
                    kind: "api_key".into(),
                    mode: "live".into(),
                    secret_hash: HASH.into(),
                    scopes: granted.clone(),
                    client_id: None,
                    expires_at: Some(5_000),
                    revoked_at: None,
                    previous_hash: None,
                    previous_expires_at: None,
                    last_used_at: None,
                    client_revoked_at: None,
                    installation_mode: None,
                    guard_channel: Some(GuardChannel::ToolResult),
                }
            );
            assert_eq!(store.credential("Missing1").expect("read"), None);
            let exists = |id: &str| {
                store
                    .with_conn(|c| credential_exists(c, id))
                    .expect("exists")
            };
            assert!(exists("AbCdEf12"));
            assert!(!exists("Missing1"));
        }
    }

    #[test]
    fn the_installation_mode_is_read_with_the_credential() {
        for scratch in stores() {
            let store = &scratch.store;
            store
                .set_company(&crate::store::Company {
                    name: "Acme SL".into(),
                    tax_id: None,
                    plan_slug: "pro".into(),
                    locale: "en".into(),
                    country: "ES".into(),
                })
                .expect("company");
            insert(store, &key("AbCdEf12", &[], 100));
            let mode = |s: &Store| s.credential("AbCdEf12").expect("read").expect("row");
            assert_eq!(mode(store).installation_mode.as_deref(), Some("live"));
            store
                .in_transaction(|tx| crate::store::plans::set_company_mode(tx, "test"))
                .expect("mode");
            assert_eq!(mode(store).installation_mode.as_deref(), Some("test"));
        }
    }

    #[test]
    fn active_keys_leave_out_revoked_expired_and_access_tokens() {
        for scratch in stores() {
            let store = &scratch.store;
            insert(store, &key("Active01", &[], 1));
            let mut expiring = key("Expires1", &[], 2);
            expiring.expires_at = Some(1_000);
            insert(store, &expiring);
            insert(store, &key("Revoked1", &[], 3));
            store
                .insert_client(&client("partner", &[]))
                .expect("client");
            let mut token = key("Token001", &[], 4);
            token.kind = "oauth_access";
            token.secret_hash = "sha256$00";
            token.client_id = Some("partner");
            insert(store, &token);
            store
                .in_transaction(|tx| revoke(tx, Revocable::Credential, "Revoked1", 10))
                .expect("revoke");
            let active = |now| {
                store
                    .with_conn(|c| count_active_keys(c, now))
                    .expect("count")
            };
            assert_eq!(active(999), 2);
            assert_eq!(active(1_000), 1);
            let listed: Vec<(String, &str)> = store
                .api_keys()
                .expect("keys")
                .into_iter()
                .map(|k| {
                    let status = k.status(1_000);
                    (k.public_id, status)
                })
                .collect();
            assert_eq!(
                listed,
                vec![
                    ("Active01".to_owned(), "active"),
                    ("Expires1".to_owned(), "expired"),
                    ("Revoked1".to_owned(), "revoked")
                ]
            );
        }
    }

    #[test]
    fn revoking_answers_whether_it_was_active() {
        for scratch in stores() {
            let store = &scratch.store;
            insert(store, &key("AbCdEf12", &[], 1));
            store
                .insert_client(&client("partner", &[]))
                .expect("client");
            let revoked = |what, id: &str, now| {
                store
                    .in_transaction(|tx| revoke(tx, what, id, now))
                    .expect("revoke")
            };
            assert_eq!(revoked(Revocable::Credential, "AbCdEf12", 10), Some(true));
            assert_eq!(revoked(Revocable::Credential, "AbCdEf12", 20), Some(false));
            assert_eq!(revoked(Revocable::Credential, "Missing1", 20), None);
            assert_eq!(revoked(Revocable::Client, "partner", 30), Some(true));
            assert_eq!(revoked(Revocable::Client, "partner", 40), Some(false));
            assert_eq!(revoked(Revocable::Client, "nobody", 40), None);
            let row = store.credential("AbCdEf12").expect("read").expect("row");
            assert_eq!(row.revoked_at, Some(10));
            let (partner, _) = store
                .client_with_hash("partner")
                .expect("read")
                .expect("row");
            assert!(partner.revoked);
        }
    }

    #[test]
    fn rotation_keeps_the_old_hash_for_the_grace_or_not_at_all() {
        for scratch in stores() {
            let store = &scratch.store;
            insert(store, &key("AbCdEf12", &[], 1));
            let standing = store
                .in_transaction(|tx| key_standing(tx, "AbCdEf12"))
                .expect("standing");
            assert_eq!(
                standing,
                Some(KeyStanding {
                    kind: "api_key".into(),
                    mode: "live".into(),
                    revoked_at: None,
                    expires_at: None,
                })
            );
            assert_eq!(
                store
                    .in_transaction(|tx| key_standing(tx, "Missing1"))
                    .expect("standing"),
                None
            );
            let second = "$argon2id$second";
            store
                .in_transaction(|tx| replace_secret(tx, "AbCdEf12", second, Some(900)))
                .expect("rotate");
            let row = store.credential("AbCdEf12").expect("read").expect("row");
            assert_eq!(
                (row.secret_hash.as_str(), row.previous_hash.as_deref()),
                (second, Some(HASH))
            );
            assert_eq!(row.previous_expires_at, Some(900));
            assert_eq!(
                store.api_keys().expect("keys")[0].previous_secret_until,
                Some(900)
            );
            let third = "$argon2id$third";
            store
                .in_transaction(|tx| replace_secret(tx, "AbCdEf12", third, None))
                .expect("rotate");
            let row = store.credential("AbCdEf12").expect("read").expect("row");
            assert_eq!(
                (
                    row.secret_hash.as_str(),
                    row.previous_hash,
                    row.previous_expires_at
                ),
                (third, None, None)
            );
        }
    }

    #[test]
    fn last_use_is_recorded_in_a_transaction_and_outside_one() {
        for scratch in stores() {
            let store = &scratch.store;
            insert(store, &key("AbCdEf12", &[], 1));
            let last_used = || {
                store
                    .credential("AbCdEf12")
                    .expect("read")
                    .expect("row")
                    .last_used_at
            };
            store
                .in_transaction(|tx| touch_last_used(tx, "AbCdEf12", 60))
                .expect("touch");
            assert_eq!(last_used(), Some(60));
            store
                .touch_last_used_unless_busy("AbCdEf12", 120)
                .expect("touch");
            assert_eq!(last_used(), Some(120));
        }
    }

    #[test]
    fn recording_last_use_never_waits_for_a_writer() {
        for scratch in stores() {
            let store = &scratch.store;
            insert(store, &key("AbCdEf12", &[], 1));
            let dialect = store.dialect();
            store
                .in_transaction(|tx| {
                    touch_last_used(tx, "AbCdEf12", 60)?;
                    let outcome = store.touch_last_used_unless_busy("AbCdEf12", 120);
                    match dialect {
                        // The file's write lock is held: refused at once, not waited for.
                        Dialect::Sqlite => assert!(matches!(outcome, Err(StoreError::Busy))),
                        // The row is held: skipped at once, nothing written.
                        Dialect::Postgres => assert!(outcome.is_ok(), "{outcome:?}"),
                    }
                    Ok(())
                })
                .expect("transaction");
            let row = store.credential("AbCdEf12").expect("read").expect("row");
            assert_eq!(row.last_used_at, Some(60));
            // The connection waits for writers again afterwards.
            store
                .touch_last_used_unless_busy("AbCdEf12", 180)
                .expect("touch");
            assert_eq!(
                store
                    .credential("AbCdEf12")
                    .expect("read")
                    .expect("row")
                    .last_used_at,
                Some(180)
            );
        }
    }

    #[test]
    fn guard_channels_and_expired_access_tokens() {
        for scratch in stores() {
            let store = &scratch.store;
            insert(store, &key("AbCdEf12", &[], 1));
            let set = |id: &str, channel| {
                store
                    .in_transaction(|tx| set_guard_channel(tx, id, channel))
                    .expect("set")
            };
            assert!(set("AbCdEf12", Some(GuardChannel::JsonRpc)));
            let channel = || store.api_keys().expect("keys")[0].guard_channel;
            assert_eq!(channel(), Some(GuardChannel::JsonRpc));
            assert!(set("AbCdEf12", None));
            assert_eq!(channel(), None);
            assert!(!set("Missing1", None));

            store
                .insert_client(&client("partner", &[]))
                .expect("client");
            for (id, expires_at) in [("Token001", 100), ("Token002", 200)] {
                let mut token = key(id, &[], 1);
                token.kind = "oauth_access";
                token.secret_hash = "sha256$00";
                token.client_id = Some("partner");
                token.expires_at = Some(expires_at);
                insert(store, &token);
            }
            store
                .in_transaction(|tx| delete_access_tokens_expired_before(tx, 150))
                .expect("delete");
            let exists = |id: &str| {
                store
                    .with_conn(|c| credential_exists(c, id))
                    .expect("exists")
            };
            assert_eq!(
                (exists("Token001"), exists("Token002"), exists("AbCdEf12")),
                (false, true, true)
            );
            let token = store.credential("Token002").expect("read").expect("row");
            assert_eq!(token.client_id.as_deref(), Some("partner"));
            assert_eq!(token.client_revoked_at, None);
            store
                .in_transaction(|tx| revoke(tx, Revocable::Client, "partner", 77))
                .expect("revoke");
            let token = store.credential("Token002").expect("read").expect("row");
            assert_eq!(token.client_revoked_at, Some(77));
        }
    }

    #[test]
    fn clients_are_stored_and_listed_without_their_hash() {
        for scratch in stores() {
            let store = &scratch.store;
            let allowed = scopes(&["invoices:read"]);
            store
                .insert_client(&client("zeta", &allowed))
                .expect("zeta");
            let mut alpha = client("alpha", &[]);
            alpha.created_at = 60;
            store.insert_client(&alpha).expect("alpha");
            let (found, hash) = store
                .with_conn(|c| client_on(c, "zeta"))
                .expect("read")
                .expect("row");
            assert_eq!(
                found,
                OAuthClient {
                    client_id: "zeta".into(),
                    name: "Partner".into(),
                    allowed_scopes: allowed.clone(),
                    per_minute_limit: None,
                    created_at: 50,
                    revoked: false,
                }
            );
            assert_eq!(hash, HASH);
            assert_eq!(store.client_with_hash("nobody").expect("read"), None);
            let ids: Vec<String> = store
                .clients()
                .expect("clients")
                .into_iter()
                .map(|c| c.client_id)
                .collect();
            assert_eq!(ids, ["zeta", "alpha"]);
        }
    }

    #[test]
    fn limit_overrides_are_set_listed_and_cleared() {
        for scratch in stores() {
            let store = &scratch.store;
            insert(store, &key("AbCdEf12", &[], 1));
            insert(store, &key("Plain001", &[], 2));
            store
                .insert_client(&client("partner", &[]))
                .expect("client");
            assert!(
                store
                    .set_credential_limit("AbCdEf12", PerMinute::Write, Some(7))
                    .expect("set")
            );
            assert!(
                store
                    .set_credential_limit("AbCdEf12", PerMinute::Generate, Some(0))
                    .expect("set")
            );
            assert!(
                !store
                    .set_credential_limit("Missing1", PerMinute::Read, Some(1))
                    .expect("set")
            );
            assert_eq!(
                store.credential_limits().expect("limits"),
                vec![CredentialLimits {
                    credential_id: "AbCdEf12".into(),
                    name: "ci".into(),
                    per_minute: [None, Some(7), None, None, Some(0)],
                }]
            );
            assert!(store.set_client_limit("partner", Some(42)).expect("set"));
            assert!(!store.set_client_limit("nobody", Some(42)).expect("set"));
            assert_eq!(
                store.client_limits().expect("limits"),
                vec![ClientLimit {
                    client_id: "partner".into(),
                    name: "Partner".into(),
                    per_minute: 42,
                }]
            );
            let (partner, _) = store
                .client_with_hash("partner")
                .expect("read")
                .expect("row");
            assert_eq!(partner.per_minute_limit, Some(42));

            for of in [PerMinute::Write, PerMinute::Generate] {
                store
                    .set_credential_limit("AbCdEf12", of, None)
                    .expect("clear");
            }
            store.set_client_limit("partner", None).expect("clear");
            assert_eq!(store.credential_limits().expect("limits"), vec![]);
            assert_eq!(store.client_limits().expect("limits"), vec![]);
        }
    }
}
