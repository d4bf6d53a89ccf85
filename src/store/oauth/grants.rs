//! `oauth_grants`: a person's consent to a client, with the scopes consented. Consent is
//! remembered per person and client; a request for scopes outside the grant asks again.
//! Revoking a grant revokes every token family issued under it, so its tokens are refused
//! on their next call.

use super::super::sql::{Row, args};
use super::super::{Conn, Store, StoreError, Tx};
use super::{from_json, to_json};

/// A person's consent to a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Random id.
    pub id: String,
    /// A user id, or a personal key's public id.
    pub principal_id: String,
    /// The person's name when they consented.
    pub principal_label: String,
    /// The client.
    pub client_id: String,
    /// The client's name when the person consented.
    pub client_name: Option<String>,
    /// The scopes consented.
    pub scopes: Vec<String>,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds of the last consent.
    pub updated_at: i64,
    /// Unix seconds of the last token issued or call made (at most a minute behind).
    pub last_used_at: Option<i64>,
    /// Unix seconds, when revoked.
    pub revoked_at: Option<i64>,
}

/// A consent to record.
#[derive(Debug, Clone)]
pub struct NewGrant<'a> {
    /// A fresh random id, used when there is no standing grant to extend.
    pub id: &'a str,
    /// A user id, or a personal key's public id.
    pub principal_id: &'a str,
    /// The person's name.
    pub principal_label: &'a str,
    /// The client.
    pub client_id: &'a str,
    /// The client's name.
    pub client_name: Option<&'a str>,
    /// The scopes consented now (added to those of a standing grant).
    pub scopes: &'a [String],
    /// Unix seconds.
    pub now: i64,
}

const COLUMNS: &str = "SELECT id, principal_id, principal_label, client_id, client_name, scopes, \
     created_at, updated_at, last_used_at, revoked_at FROM oauth_grants";

fn grant_of(row: &Row<'_>) -> Result<Grant, StoreError> {
    Ok(Grant {
        id: row.get(0)?,
        principal_id: row.get(1)?,
        principal_label: row.get(2)?,
        client_id: row.get(3)?,
        client_name: row.get(4)?,
        scopes: from_json(&row.get::<String>(5)?),
        created_at: row.get(6)?,
        updated_at: row.get(7)?,
        last_used_at: row.get(8)?,
        revoked_at: row.get(9)?,
    })
}

/// The standing grant of `principal_id` to `client_id`, read on `conn`.
fn standing_grant(
    conn: &Conn<'_>,
    principal_id: &str,
    client_id: &str,
) -> Result<Option<Grant>, StoreError> {
    conn.query_opt(
        &format!("{COLUMNS} WHERE principal_id = ?1 AND client_id = ?2 AND revoked_at IS NULL"),
        args![principal_id, client_id],
        grant_of,
    )
}

/// Records that grant `id` was used at `now` (at most once a minute), inside `tx`.
pub fn touch_grant(tx: &Tx<'_>, id: &str, now: i64) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE oauth_grants SET last_used_at = ?2 \
         WHERE id = ?1 AND (last_used_at IS NULL OR last_used_at < ?2 - 60)",
        args![id, now],
    )
    .map(|_| ())
}

impl Store {
    /// The standing (not revoked) grant of `principal_id` to `client_id`.
    pub fn standing_grant(
        &self,
        principal_id: &str,
        client_id: &str,
    ) -> Result<Option<Grant>, StoreError> {
        self.with_conn(|conn| standing_grant(conn, principal_id, client_id))
    }

    /// Records a consent: a standing grant gains the scopes; otherwise a revoked one is
    /// replaced by a new grant (its tokens stay refused) and the grant is created. Returns
    /// the grant as it stands.
    pub fn consent(&self, new: &NewGrant<'_>) -> Result<Grant, StoreError> {
        self.in_transaction(|tx| {
            if let Some(mut grant) = standing_grant(tx, new.principal_id, new.client_id)? {
                for scope in new.scopes {
                    if !grant.scopes.contains(scope) {
                        grant.scopes.push(scope.clone());
                    }
                }
                tx.execute(
                    "UPDATE oauth_grants SET scopes = ?2, updated_at = ?3, principal_label = ?4, \
                     client_name = COALESCE(?5, client_name) WHERE id = ?1",
                    args![
                        grant.id,
                        to_json(&grant.scopes),
                        new.now,
                        new.principal_label,
                        new.client_name
                    ],
                )?;
                grant.updated_at = new.now;
                return Ok(grant);
            }
            tx.execute(
                "DELETE FROM oauth_grants WHERE principal_id = ?1 AND client_id = ?2",
                args![new.principal_id, new.client_id],
            )?;
            tx.execute(
                "INSERT INTO oauth_grants (id, principal_id, principal_label, client_id, \
                 client_name, scopes, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
                args![
                    new.id,
                    new.principal_id,
                    new.principal_label,
                    new.client_id,
                    new.client_name,
                    to_json(new.scopes),
                    new.now
                ],
            )?;
            tx.query_one(&format!("{COLUMNS} WHERE id = ?1"), args![new.id], grant_of)
        })
    }

    /// Every grant, most recently used first (revoked ones too, for the record).
    pub fn grants(&self) -> Result<Vec<Grant>, StoreError> {
        self.with_conn(|conn| {
            conn.query_all(
                &format!(
                    "{COLUMNS} ORDER BY (revoked_at IS NULL) DESC, \
                     COALESCE(last_used_at, updated_at) DESC, id"
                ),
                args![],
                grant_of,
            )
        })
    }

    /// The grant `id`.
    pub fn grant(&self, id: &str) -> Result<Option<Grant>, StoreError> {
        self.with_conn(|conn| {
            conn.query_opt(&format!("{COLUMNS} WHERE id = ?1"), args![id], grant_of)
        })
    }

    /// Revokes grant `id` and every token family under it; `false` when there is no such
    /// standing grant.
    pub fn revoke_grant(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        self.in_transaction(|tx| {
            let changed = tx.execute(
                "UPDATE oauth_grants SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
                args![id, now],
            )?;
            tx.execute(
                "UPDATE oauth_families SET revoked_at = ?2, revoked_reason = 'grant_revoked' \
                 WHERE grant_id = ?1 AND revoked_at IS NULL",
                args![id, now],
            )?;
            Ok(changed > 0)
        })
    }
}
