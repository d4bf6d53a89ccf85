//! `oauth_requests`: authorization requests between `/oauth/authorize` and the code that
//! ends them (minutes). A request is found by its id (carried by the person's browser in a
//! cookie and in the forms of its pages) or, on the return from the identity provider, by
//! the `state` tollgate sent there. It is deleted when it ends, successfully or not.

use super::super::sql::{Row, args};
use super::super::{Store, StoreError};
use super::{ENDED_RETENTION_SECS, from_json, to_json};

/// A request as `/oauth/authorize` accepted it.
#[derive(Debug, Clone)]
pub struct NewAuthRequest<'a> {
    /// Random id (the cookie and the forms carry it).
    pub id: &'a str,
    /// The token the request's forms must post back.
    pub csrf: &'a str,
    /// The client.
    pub client_id: &'a str,
    /// The client's name, for the pages.
    pub client_name: Option<&'a str>,
    /// The redirect URI, already matched against the client's.
    pub redirect_uri: &'a str,
    /// The client's `state`, returned as given.
    pub state: Option<&'a str>,
    /// The S256 PKCE challenge.
    pub code_challenge: &'a str,
    /// The scopes asked for (`None`: none named; the person's own are offered).
    pub scopes: Option<&'a [String]>,
    /// The resource the tokens will be bound to.
    pub resource: &'a str,
    /// Unix seconds.
    pub now: i64,
    /// Unix seconds.
    pub expires_at: i64,
}

/// A request in progress, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthRequest {
    /// Random id.
    pub id: String,
    /// The token its forms must post back.
    pub csrf: String,
    /// The client.
    pub client_id: String,
    /// The client's name.
    pub client_name: Option<String>,
    /// The redirect URI.
    pub redirect_uri: String,
    /// The client's `state`.
    pub state: Option<String>,
    /// The S256 PKCE challenge.
    pub code_challenge: String,
    /// The scopes asked for.
    pub scopes: Option<Vec<String>>,
    /// The resource.
    pub resource: String,
    /// The nonce sent to the identity provider, while the person signs in there.
    pub login_nonce: Option<String>,
    /// The PKCE verifier of the sign-in at the identity provider.
    pub login_verifier: Option<String>,
    /// Who signed in, once someone did.
    pub signed_in: Option<SignedIn>,
    /// Unix seconds.
    pub expires_at: i64,
}

/// The person who signed in for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn {
    /// A user id, or a personal key's public id.
    pub principal_id: String,
    /// A name to show.
    pub label: String,
    /// The scopes the person holds.
    pub held_scopes: Vec<String>,
}

const COLUMNS: &str = "SELECT id, csrf, client_id, client_name, redirect_uri, state, \
     code_challenge, scopes, resource, login_nonce, login_verifier, principal_id, \
     principal_label, held_scopes, expires_at FROM oauth_requests";

fn request_of(row: &Row<'_>) -> Result<AuthRequest, StoreError> {
    let principal: Option<String> = row.get(11)?;
    let signed_in = match principal {
        Some(principal_id) => Some(SignedIn {
            principal_id,
            label: row.get::<Option<String>>(12)?.unwrap_or_default(),
            held_scopes: from_json(&row.get::<Option<String>>(13)?.unwrap_or_default()),
        }),
        None => None,
    };
    Ok(AuthRequest {
        id: row.get(0)?,
        csrf: row.get(1)?,
        client_id: row.get(2)?,
        client_name: row.get(3)?,
        redirect_uri: row.get(4)?,
        state: row.get(5)?,
        code_challenge: row.get(6)?,
        scopes: row.get::<Option<String>>(7)?.map(|s| from_json(&s)),
        resource: row.get(8)?,
        login_nonce: row.get(9)?,
        login_verifier: row.get(10)?,
        signed_in,
        expires_at: row.get(14)?,
    })
}

impl Store {
    /// Stores a new authorization request, deleting those that ended a while ago.
    pub fn insert_auth_request(&self, new: &NewAuthRequest<'_>) -> Result<(), StoreError> {
        self.in_transaction(|tx| {
            tx.execute(
                "DELETE FROM oauth_requests WHERE expires_at < ?1",
                args![new.now - ENDED_RETENTION_SECS],
            )?;
            tx.execute(
                "INSERT INTO oauth_requests (id, csrf, client_id, client_name, redirect_uri, \
                 state, code_challenge, scopes, resource, created_at, expires_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                args![
                    new.id,
                    new.csrf,
                    new.client_id,
                    new.client_name,
                    new.redirect_uri,
                    new.state,
                    new.code_challenge,
                    new.scopes.map(to_json),
                    new.resource,
                    new.now,
                    new.expires_at
                ],
            )?;
            Ok(())
        })
    }

    /// The request `id`, unless it expired before `now`.
    pub fn auth_request(&self, id: &str, now: i64) -> Result<Option<AuthRequest>, StoreError> {
        self.with_conn(|conn| {
            conn.query_opt(
                &format!("{COLUMNS} WHERE id = ?1 AND expires_at >= ?2"),
                args![id, now],
                request_of,
            )
        })
    }

    /// Records the sign-in at the identity provider a request is waiting for: the
    /// `state`, nonce and PKCE verifier sent there.
    pub fn begin_request_login(
        &self,
        id: &str,
        login_state: &str,
        nonce: &str,
        verifier: &str,
    ) -> Result<bool, StoreError> {
        let changed = self.in_transaction(|tx| {
            tx.execute(
                "UPDATE oauth_requests SET login_state = ?2, login_nonce = ?3, \
                 login_verifier = ?4 WHERE id = ?1",
                args![id, login_state, nonce, verifier],
            )
        })?;
        Ok(changed > 0)
    }

    /// The request waiting for the identity provider's answer to `login_state`, unless it
    /// expired before `now`. The state is cleared: an answer is taken once.
    pub fn take_request_login(
        &self,
        login_state: &str,
        now: i64,
    ) -> Result<Option<AuthRequest>, StoreError> {
        self.in_transaction(|tx| {
            let found = tx.query_opt(
                &format!("{COLUMNS} WHERE login_state = ?1 AND expires_at >= ?2"),
                args![login_state, now],
                request_of,
            )?;
            if found.is_some() {
                tx.execute(
                    "UPDATE oauth_requests SET login_state = NULL WHERE login_state = ?1",
                    args![login_state],
                )?;
            }
            Ok(found)
        })
    }

    /// Records who signed in for request `id`.
    pub fn set_request_signed_in(&self, id: &str, who: &SignedIn) -> Result<bool, StoreError> {
        let changed = self.in_transaction(|tx| {
            tx.execute(
                "UPDATE oauth_requests SET principal_id = ?2, principal_label = ?3, \
                 held_scopes = ?4, login_nonce = NULL, login_verifier = NULL WHERE id = ?1",
                args![id, who.principal_id, who.label, to_json(&who.held_scopes)],
            )
        })?;
        Ok(changed > 0)
    }

    /// Deletes request `id` (it ended); `false` when it was gone already, so that two
    /// answers to one request cannot both go on.
    pub fn end_auth_request(&self, id: &str) -> Result<bool, StoreError> {
        let changed = self.in_transaction(|tx| {
            tx.execute("DELETE FROM oauth_requests WHERE id = ?1", args![id])
        })?;
        Ok(changed > 0)
    }
}
