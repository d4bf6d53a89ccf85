//! `oauth_codes`, `oauth_families` and `oauth_tokens`: what the token endpoint issues.
//!
//! A code is taken once: the first exchange marks it used, whatever follows; a second
//! exchange of the same code revokes the family the first one created (RFC 6749 §4.1.2).
//! An exchange creates a family under the grant, holding the scopes and the resource, and
//! the family's first access and refresh tokens. A refresh token is used once: using it
//! issues the family's next pair; using it again revokes the whole family (the token was
//! stolen, or the client is confused; either way nothing of the family is trusted again).

use super::super::sql::{Row, args};
use super::super::{Conn, Store, StoreError, Tx};
use super::{ENDED_RETENTION_SECS, from_json, to_json};

/// A code to store, once the person consented.
#[derive(Debug, Clone)]
pub struct NewCode<'a> {
    /// The hex SHA-256 of the code.
    pub code_hash: &'a str,
    /// The grant it is issued under.
    pub grant_id: &'a str,
    /// The client it was issued to.
    pub client_id: &'a str,
    /// The redirect URI of the request, which the exchange must repeat.
    pub redirect_uri: &'a str,
    /// The S256 PKCE challenge.
    pub code_challenge: &'a str,
    /// The scopes its tokens will carry.
    pub scopes: &'a [String],
    /// The resource its tokens are bound to.
    pub resource: &'a str,
    /// Unix seconds.
    pub now: i64,
    /// Unix seconds.
    pub expires_at: i64,
}

/// A code as its exchange reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeRow {
    /// The grant.
    pub grant_id: String,
    /// The client it was issued to.
    pub client_id: String,
    /// The redirect URI of its request.
    pub redirect_uri: String,
    /// The S256 PKCE challenge.
    pub code_challenge: String,
    /// The scopes.
    pub scopes: Vec<String>,
    /// The resource.
    pub resource: String,
    /// Unix seconds.
    pub expires_at: i64,
}

/// What taking a code found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeExchange {
    /// The code, now used: the caller checks it and issues the family.
    Taken(CodeRow),
    /// The code was used before: the family of its first exchange is revoked.
    Reused,
    /// No such code.
    Unknown,
}

/// A family and its first tokens (or, for a rotation, the next pair).
#[derive(Debug, Clone)]
pub struct IssuedFamily<'a> {
    /// A fresh random id.
    pub family_id: &'a str,
    /// The grant.
    pub grant_id: &'a str,
    /// The client.
    pub client_id: &'a str,
    /// The scopes.
    pub scopes: &'a [String],
    /// The resource.
    pub resource: &'a str,
    /// The hex SHA-256 of the access token, and when it expires (unix seconds).
    pub access: (&'a str, i64),
    /// The hex SHA-256 of the refresh token, and when the family ends (unix seconds).
    pub refresh: (&'a str, i64),
    /// The code the family comes from.
    pub code_hash: &'a str,
    /// Unix seconds.
    pub now: i64,
}

/// A refresh token's next pair.
#[derive(Debug, Clone)]
pub struct Rotation<'a> {
    /// The hex SHA-256 of the refresh token presented.
    pub presented: &'a str,
    /// The client presenting it.
    pub client_id: &'a str,
    /// The scopes asked for (`None`: the family's); must be within the family's.
    pub scopes: Option<&'a [String]>,
    /// The hex SHA-256 of the new access token, and when it expires.
    pub access: (&'a str, i64),
    /// The hex SHA-256 of the new refresh token.
    pub refresh: &'a str,
    /// Unix seconds.
    pub now: i64,
}

/// What a refresh found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefreshOutcome {
    /// Rotated: the scopes of the new access token and the family's end.
    Rotated {
        /// The scopes the new access token carries.
        scopes: Vec<String>,
        /// The family's end (unix seconds): the new refresh token's expiry.
        family_expires_at: i64,
        /// The grant.
        grant_id: String,
    },
    /// The token was used before: its family is revoked now.
    Reused,
    /// A scope asked for is not in the family.
    ScopeWidened,
    /// Unknown, expired, revoked, or another client's.
    Invalid,
}

/// What a revocation found (RFC 7009).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revocation {
    /// Revoked (an access token), or its family revoked (a refresh token).
    Revoked,
    /// Not a token of this client (or no token at all): nothing changed.
    NotFound,
}

/// What every call with an issued access token reads, in its charging transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessStanding {
    /// Unix seconds.
    pub expires_at: i64,
    /// Whether the token, its family or its grant was revoked.
    pub revoked: bool,
    /// The grant.
    pub grant_id: String,
    /// Unix seconds of the grant's last use.
    pub grant_last_used_at: Option<i64>,
    /// A user id, or a personal key's public id.
    pub principal_id: String,
    /// The person's name.
    pub principal_label: String,
    /// The client.
    pub client_id: String,
    /// The scopes the token carries.
    pub scopes: Vec<String>,
}

const ACCESS_SQL: &str = "\
    SELECT t.expires_at, t.revoked_at, f.revoked_at, g.revoked_at, g.id, g.last_used_at,
           g.principal_id, g.principal_label, f.client_id, COALESCE(t.scopes, f.scopes)
      FROM oauth_tokens t
      JOIN oauth_families f ON f.id = t.family_id
      JOIN oauth_grants g ON g.id = f.grant_id
     WHERE t.token_hash = ?1 AND t.kind = 'access'";

/// The standing of the access token whose hex SHA-256 is `hash`, read on `conn`.
pub fn access_standing_on(
    conn: &Conn<'_>,
    hash: &str,
) -> Result<Option<AccessStanding>, StoreError> {
    conn.query_opt(ACCESS_SQL, args![hash], |row: &Row<'_>| {
        Ok(AccessStanding {
            expires_at: row.get(0)?,
            revoked: row.get::<Option<i64>>(1)?.is_some()
                || row.get::<Option<i64>>(2)?.is_some()
                || row.get::<Option<i64>>(3)?.is_some(),
            grant_id: row.get(4)?,
            grant_last_used_at: row.get(5)?,
            principal_id: row.get(6)?,
            principal_label: row.get(7)?,
            client_id: row.get(8)?,
            scopes: from_json(&row.get::<String>(9)?),
        })
    })
}

/// Revokes family `id` (and so every token of it) inside `tx`, for `reason`.
fn revoke_family(tx: &Tx<'_>, id: &str, reason: &str, now: i64) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE oauth_families SET revoked_at = ?2, revoked_reason = ?3 \
         WHERE id = ?1 AND revoked_at IS NULL",
        args![id, now, reason],
    )
    .map(|_| ())
}

/// Inserts one token of `family_id` inside `tx`.
fn insert_token(
    tx: &Tx<'_>,
    hash: &str,
    kind: &str,
    family_id: &str,
    scopes: Option<&[String]>,
    now: i64,
    expires_at: i64,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO oauth_tokens (token_hash, kind, family_id, created_at, expires_at, scopes) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        args![hash, kind, family_id, now, expires_at, scopes.map(to_json)],
    )
    .map(|_| ())
}

impl Store {
    /// Stores a code, deleting the codes, tokens and families that ended a while ago.
    pub fn insert_code(&self, new: &NewCode<'_>) -> Result<(), StoreError> {
        let ended = new.now - ENDED_RETENTION_SECS;
        self.in_transaction(|tx| {
            tx.execute(
                "DELETE FROM oauth_codes WHERE expires_at < ?1",
                args![ended],
            )?;
            tx.execute(
                "DELETE FROM oauth_tokens WHERE expires_at < ?1",
                args![ended],
            )?;
            tx.execute(
                "DELETE FROM oauth_families WHERE expires_at < ?1 \
                 OR (revoked_at IS NOT NULL AND revoked_at < ?1)",
                args![ended],
            )?;
            tx.execute(
                "INSERT INTO oauth_codes (code_hash, grant_id, client_id, redirect_uri, \
                 code_challenge, scopes, resource, expires_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                args![
                    new.code_hash,
                    new.grant_id,
                    new.client_id,
                    new.redirect_uri,
                    new.code_challenge,
                    to_json(new.scopes),
                    new.resource,
                    new.expires_at
                ],
            )?;
            Ok(())
        })
    }

    /// Takes the code whose hex SHA-256 is `code_hash`: marks it used and returns it, or
    /// finds it used before and revokes what its first exchange issued. An expired code
    /// is returned too (the caller refuses it): it is used up all the same.
    pub fn take_code(&self, code_hash: &str, now: i64) -> Result<CodeExchange, StoreError> {
        self.in_transaction(|tx| {
            let found = tx.query_opt(
                "SELECT grant_id, client_id, redirect_uri, code_challenge, scopes, resource, \
                 expires_at, used_at, family_id FROM oauth_codes WHERE code_hash = ?1",
                args![code_hash],
                |row| {
                    Ok((
                        CodeRow {
                            grant_id: row.get(0)?,
                            client_id: row.get(1)?,
                            redirect_uri: row.get(2)?,
                            code_challenge: row.get(3)?,
                            scopes: from_json(&row.get::<String>(4)?),
                            resource: row.get(5)?,
                            expires_at: row.get(6)?,
                        },
                        row.get::<Option<i64>>(7)?,
                        row.get::<Option<String>>(8)?,
                    ))
                },
            )?;
            match found {
                None => Ok(CodeExchange::Unknown),
                Some((_, Some(_), family)) => {
                    if let Some(family) = family {
                        revoke_family(tx, &family, "code_reused", now)?;
                    }
                    Ok(CodeExchange::Reused)
                }
                Some((code, None, _)) => {
                    tx.execute(
                        "UPDATE oauth_codes SET used_at = ?2 WHERE code_hash = ?1",
                        args![code_hash, now],
                    )?;
                    Ok(CodeExchange::Taken(code))
                }
            }
        })
    }

    /// Creates a family under a grant with its first access and refresh tokens, links it
    /// to the code it comes from, and records the grant (and a registered client) as used.
    /// `false` when the grant was revoked in the meantime: nothing is issued.
    pub fn issue_family(&self, new: &IssuedFamily<'_>) -> Result<bool, StoreError> {
        self.in_transaction(|tx| {
            let standing: Option<i64> = tx.query_opt(
                "SELECT 1 FROM oauth_grants WHERE id = ?1 AND revoked_at IS NULL",
                args![new.grant_id],
                |row| row.get(0),
            )?;
            if standing.is_none() {
                return Ok(false);
            }
            tx.execute(
                "INSERT INTO oauth_families (id, grant_id, client_id, scopes, resource, \
                 created_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                args![
                    new.family_id,
                    new.grant_id,
                    new.client_id,
                    to_json(new.scopes),
                    new.resource,
                    new.now,
                    new.refresh.1
                ],
            )?;
            insert_token(
                tx,
                new.access.0,
                "access",
                new.family_id,
                None,
                new.now,
                new.access.1,
            )?;
            insert_token(
                tx,
                new.refresh.0,
                "refresh",
                new.family_id,
                None,
                new.now,
                new.refresh.1,
            )?;
            tx.execute(
                "UPDATE oauth_codes SET family_id = ?2 WHERE code_hash = ?1",
                args![new.code_hash, new.family_id],
            )?;
            super::touch_grant(tx, new.grant_id, new.now)?;
            tx.execute(
                "UPDATE oauth_registrations SET last_used_at = ?2 WHERE client_id = ?1",
                args![new.client_id, new.now],
            )?;
            Ok(true)
        })
    }

    /// Rotates a refresh token: the next pair of its family, or the family revoked when
    /// the token was used before.
    pub fn rotate_refresh(&self, rotation: &Rotation<'_>) -> Result<RefreshOutcome, StoreError> {
        let now = rotation.now;
        self.in_transaction(|tx| {
            let found = tx.query_opt(
                "SELECT t.family_id, t.used_at, t.revoked_at, t.expires_at, f.revoked_at, \
                        f.client_id, f.scopes, f.expires_at, g.revoked_at, g.id \
                   FROM oauth_tokens t \
                   JOIN oauth_families f ON f.id = t.family_id \
                   JOIN oauth_grants g ON g.id = f.grant_id \
                  WHERE t.token_hash = ?1 AND t.kind = 'refresh'",
                args![rotation.presented],
                |row| {
                    Ok((
                        row.get::<String>(0)?,
                        row.get::<Option<i64>>(1)?,
                        row.get::<Option<i64>>(2)?.is_some()
                            || row.get::<Option<i64>>(4)?.is_some()
                            || row.get::<Option<i64>>(8)?.is_some(),
                        row.get::<i64>(3)?,
                        row.get::<String>(5)?,
                        from_json(&row.get::<String>(6)?),
                        row.get::<i64>(7)?,
                        row.get::<String>(9)?,
                    ))
                },
            )?;
            let Some((family, used, revoked, expires_at, client, scopes, family_end, grant)) =
                found
            else {
                return Ok(RefreshOutcome::Invalid);
            };
            if client != rotation.client_id || revoked || expires_at <= now {
                return Ok(RefreshOutcome::Invalid);
            }
            if used.is_some() {
                revoke_family(tx, &family, "refresh_reused", now)?;
                return Ok(RefreshOutcome::Reused);
            }
            let narrowed = match rotation.scopes {
                Some(asked) if asked.iter().any(|s| !scopes.contains(s)) => {
                    return Ok(RefreshOutcome::ScopeWidened);
                }
                Some(asked) => Some(asked.to_vec()),
                None => None,
            };
            tx.execute(
                "UPDATE oauth_tokens SET used_at = ?2 WHERE token_hash = ?1",
                args![rotation.presented, now],
            )?;
            insert_token(
                tx,
                rotation.access.0,
                "access",
                &family,
                narrowed.as_deref(),
                now,
                rotation.access.1,
            )?;
            insert_token(
                tx,
                rotation.refresh,
                "refresh",
                &family,
                None,
                now,
                family_end,
            )?;
            super::touch_grant(tx, &grant, now)?;
            Ok(RefreshOutcome::Rotated {
                scopes: narrowed.unwrap_or(scopes),
                family_expires_at: family_end,
                grant_id: grant,
            })
        })
    }

    /// Revokes the token whose hex SHA-256 is `hash` when it was issued to `client_id`: an
    /// access token alone, a refresh token with its whole family.
    pub fn revoke_issued(
        &self,
        hash: &str,
        client_id: &str,
        now: i64,
    ) -> Result<Revocation, StoreError> {
        self.in_transaction(|tx| {
            let found = tx.query_opt(
                "SELECT t.kind, t.family_id FROM oauth_tokens t \
                   JOIN oauth_families f ON f.id = t.family_id \
                  WHERE t.token_hash = ?1 AND f.client_id = ?2",
                args![hash, client_id],
                |row| Ok((row.get::<String>(0)?, row.get::<String>(1)?)),
            )?;
            match found {
                None => Ok(Revocation::NotFound),
                Some((kind, family)) if kind == "refresh" => {
                    revoke_family(tx, &family, "revoked_by_client", now)?;
                    Ok(Revocation::Revoked)
                }
                Some(_) => {
                    tx.execute(
                        "UPDATE oauth_tokens SET revoked_at = ?2 \
                         WHERE token_hash = ?1 AND revoked_at IS NULL",
                        args![hash, now],
                    )?;
                    Ok(Revocation::Revoked)
                }
            }
        })
    }

    /// The standing of an issued access token (outside a call's transaction).
    pub fn access_standing(&self, hash: &str) -> Result<Option<AccessStanding>, StoreError> {
        self.with_conn(|conn| access_standing_on(conn, hash))
    }
}
