//! `oauth_registrations`: clients that registered themselves (RFC 7591). A registration
//! that never obtained a token is deleted once it is older than the operator's bound; one
//! that did is kept while it is used.

use super::super::sql::{Row, args};
use super::super::{Store, StoreError};
use super::{from_json, to_json};

/// A client registered through the registration endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The client id tollgate assigned.
    pub client_id: String,
    /// The hex SHA-256 of its secret, for a confidential client.
    pub secret_hash: Option<String>,
    /// The name it gave.
    pub client_name: Option<String>,
    /// Its home page, as it gave it.
    pub client_uri: Option<String>,
    /// Its redirect URIs, matched exactly.
    pub redirect_uris: Vec<String>,
    /// `authorization_code`, and `refresh_token` when it asked for it.
    pub grant_types: Vec<String>,
    /// `none`, `client_secret_basic` or `client_secret_post`.
    pub auth_method: String,
    /// `native` or `web`, as it said.
    pub application_type: Option<String>,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds of its last token, `None` while it has had none.
    pub last_used_at: Option<i64>,
}

/// A registration to insert.
#[derive(Debug, Clone)]
pub struct NewRegistration<'a> {
    /// The registration itself.
    pub registration: &'a Registration,
    /// Where the request came from (`http:<address>`), for the operator.
    pub source: &'a str,
    /// The most registrations kept at once.
    pub max_clients: u64,
    /// Registrations without a token older than this (unix seconds) are deleted first.
    pub unused_before: i64,
}

const COLUMNS: &str = "SELECT client_id, secret_hash, client_name, client_uri, redirect_uris, \
     grant_types, auth_method, application_type, created_at, last_used_at \
     FROM oauth_registrations";

fn registration_of(row: &Row<'_>) -> Result<Registration, StoreError> {
    Ok(Registration {
        client_id: row.get(0)?,
        secret_hash: row.get(1)?,
        client_name: row.get(2)?,
        client_uri: row.get(3)?,
        redirect_uris: from_json(&row.get::<String>(4)?),
        grant_types: from_json(&row.get::<String>(5)?),
        auth_method: row.get(6)?,
        application_type: row.get(7)?,
        created_at: row.get(8)?,
        last_used_at: row.get(9)?,
    })
}

impl Store {
    /// Inserts a registration unless `max_clients` are kept already (after deleting the
    /// unused ones past their bound): `Ok(false)` when full.
    pub fn insert_registration(&self, new: &NewRegistration<'_>) -> Result<bool, StoreError> {
        let r = new.registration;
        self.in_transaction(|tx| {
            tx.execute(
                "DELETE FROM oauth_registrations WHERE last_used_at IS NULL AND created_at < ?1",
                args![new.unused_before],
            )?;
            let kept: i64 =
                tx.query_one("SELECT count(*) FROM oauth_registrations", args![], |row| {
                    row.get(0)
                })?;
            if u64::try_from(kept).unwrap_or(u64::MAX) >= new.max_clients {
                return Ok(false);
            }
            tx.execute(
                "INSERT INTO oauth_registrations (client_id, secret_hash, client_name, \
                 client_uri, redirect_uris, grant_types, auth_method, application_type, \
                 source, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                args![
                    r.client_id,
                    r.secret_hash,
                    r.client_name,
                    r.client_uri,
                    to_json(&r.redirect_uris),
                    to_json(&r.grant_types),
                    r.auth_method,
                    r.application_type,
                    new.source,
                    r.created_at
                ],
            )?;
            Ok(true)
        })
    }

    /// The registration of `client_id`, unless it is an unused one older than
    /// `unused_before` (unix seconds).
    pub fn registration(
        &self,
        client_id: &str,
        unused_before: i64,
    ) -> Result<Option<Registration>, StoreError> {
        self.with_conn(|conn| {
            conn.query_opt(
                &format!(
                    "{COLUMNS} WHERE client_id = ?1 \
                     AND (last_used_at IS NOT NULL OR created_at >= ?2)"
                ),
                args![client_id, unused_before],
                registration_of,
            )
        })
    }

    /// Every registration, newest first (the console and the CLI list them).
    pub fn registrations(&self) -> Result<Vec<Registration>, StoreError> {
        self.with_conn(|conn| {
            conn.query_all(
                &format!("{COLUMNS} ORDER BY created_at DESC, client_id"),
                args![],
                registration_of,
            )
        })
    }

    /// Deletes the registration of `client_id` and revokes every standing grant to it, with
    /// their token families (so their tokens are refused on their next call): the number of
    /// grants revoked, or `None` when no client registered with that id (nothing changes).
    pub fn delete_registration(
        &self,
        client_id: &str,
        now: i64,
    ) -> Result<Option<usize>, StoreError> {
        self.in_transaction(|tx| {
            let gone = tx.execute(
                "DELETE FROM oauth_registrations WHERE client_id = ?1",
                args![client_id],
            )?;
            if gone == 0 {
                return Ok(None);
            }
            tx.execute(
                "UPDATE oauth_families SET revoked_at = ?2, revoked_reason = 'grant_revoked' \
                 WHERE revoked_at IS NULL AND grant_id IN \
                 (SELECT id FROM oauth_grants WHERE client_id = ?1 AND revoked_at IS NULL)",
                args![client_id, now],
            )?;
            let revoked = tx.execute(
                "UPDATE oauth_grants SET revoked_at = ?2 \
                 WHERE client_id = ?1 AND revoked_at IS NULL",
                args![client_id, now],
            )?;
            Ok(Some(revoked))
        })
    }
}
