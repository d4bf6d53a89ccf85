//! Access tokens tollgate's own authorization server issued (`tg_at_…`): the person who
//! signed in is the principal — a user of the company's identity provider, or the personal
//! key a person signed in with — exactly as if they had called with their own credential,
//! with the scopes they consented to the client. The token's row (its family and its grant)
//! is read when the token is first seen and again inside every call's charging transaction,
//! so revoking a grant, a family or the token, blocking the user or revoking the key
//! applies to the next call on every node.
//!
//! The client the person signed in through has a rate bucket of its own,
//! `tollgate:<client id>`, on the plan's per-client default.

use std::sync::Arc;

use crate::store::oauth::{self, AccessStanding};
use crate::store::users::{self, UserStanding, is_user_id};
use crate::store::{Tx, credentials};

use super::access::grants;
use super::cache::{CacheEntry, IssuedRef, ProviderGrant};
use super::provider::{check_user, needs_user_touch, user_principal};
use super::standing::{CredentialRow, check_standing, find_by_public_id};
use super::{Authenticator, Failure, Principal};

/// The prefix of an access token the authorization server issued.
pub const ACCESS_TOKEN_PREFIX: &str = "tg_at_";
/// The prefix of a refresh token the authorization server issued (never a bearer token).
pub const REFRESH_TOKEN_PREFIX: &str = "tg_rt_";

/// A grant's `last_used_at` is written at most this often by its calls.
const GRANT_USED_INTERVAL_SECS: i64 = 60;

/// The rate bucket of a client of the authorization server.
pub fn client_bucket(client_id: &str) -> String {
    format!("tollgate:{client_id}")
}

/// Whether `bucket` is the rate bucket of a client of the authorization server.
pub fn is_client_bucket(bucket: &str) -> bool {
    bucket.starts_with("tollgate:")
}

/// Whether the refusal of a token in `standing` is due: revoked, or expired at `now`.
fn token_failure(standing: &AccessStanding, now: i64) -> Option<Failure> {
    if standing.revoked {
        Some(Failure::Invalid("revoked"))
    } else if standing.expires_at <= now {
        Some(Failure::Invalid("expired"))
    } else {
        None
    }
}

/// The principal of a personal key's person: the key's standing, the token's scopes that
/// the key still holds.
fn key_principal(
    key_id: &str,
    row: &CredentialRow,
    standing: &AccessStanding,
) -> Result<Principal, Failure> {
    let scopes = standing
        .scopes
        .iter()
        .filter(|s| grants(&row.scopes, s))
        .cloned()
        .collect();
    Ok(Principal {
        credential_id: key_id.to_owned(),
        client_id: Some(client_bucket(&standing.client_id)),
        scopes,
        mode: row.mode,
        guard_channel: row.guard_channel,
        installation: row.installation_mode,
        roles: Vec::new(),
    })
}

/// What a cache entry of an issued token remembers.
fn grant_of(standing: &AccessStanding, hash: String) -> ProviderGrant {
    ProviderGrant {
        scopes: standing.scopes.clone(),
        roles: Vec::new(),
        valid_until: standing.expires_at,
        label: standing.principal_label.clone(),
        issued: Some(IssuedRef { hash }),
    }
}

impl Authenticator {
    /// Verifies an issued access token that is not cached: its row, then its person's
    /// standing. No argon2: the token is 256 random bits, looked up by its SHA-256.
    pub(super) fn authenticate_issued(
        &self,
        token: &str,
        digest: [u8; 32],
        now: i64,
    ) -> Result<Principal, Failure> {
        let hash = oauth::secret_digest(token);
        let standing = self
            .store
            .access_standing(&hash)
            .map_err(Failure::Store)?
            .ok_or(Failure::Invalid("unknown"))?;
        if let Some(failure) = token_failure(&standing, now) {
            return Err(failure);
        }
        let grant = grant_of(&standing, hash);
        let principal = self.issued_principal(&standing, &grant)?;
        self.cache.remember_provider(
            digest,
            &standing.principal_id,
            Some(client_bucket(&standing.client_id)),
            grant,
        );
        Ok(principal)
    }

    /// A cached issued token outside a tool call: its row and its person, read now.
    pub(super) fn issued_cached(
        &self,
        grant: &ProviderGrant,
        issued: &IssuedRef,
        now: i64,
    ) -> Option<Result<Principal, Failure>> {
        let standing = match self.store.access_standing(&issued.hash) {
            Ok(Some(standing)) => standing,
            Ok(None) => return Some(Err(Failure::Invalid("unknown"))),
            Err(e) => return Some(Err(Failure::Store(e))),
        };
        if let Some(failure) = token_failure(&standing, now) {
            return Some(Err(failure));
        }
        Some(self.issued_principal(&standing, grant))
    }

    /// The person of a standing token: a user (not blocked) or a key (standing).
    fn issued_principal(
        &self,
        standing: &AccessStanding,
        grant: &ProviderGrant,
    ) -> Result<Principal, Failure> {
        let id = &standing.principal_id;
        if is_user_id(id) {
            let user: UserStanding = self
                .store
                .user_standing(id)
                .map_err(Failure::Store)?
                .ok_or(Failure::Invalid("unknown"))?;
            check_user(&user, grant)?;
            return Ok(user_principal(
                id,
                Some(client_bucket(&standing.client_id)),
                grant,
                &user,
            ));
        }
        let row = find_by_public_id(&self.store, id)
            .map_err(Failure::Store)?
            .ok_or(Failure::Invalid("unknown"))?;
        check_standing(&row, self.clock.unix_secs())?;
        key_principal(id, &row, standing)
    }
}

/// The re-check of a cached issued token inside a call's charging transaction: the token's
/// row (revoked, expired), then its person's (blocked user, revoked key). The grant is
/// recorded as used, and the user as seen, at most once a minute.
pub(super) fn recheck_issued(
    tx: &Tx<'_>,
    entry: &CacheEntry,
    grant: &Arc<ProviderGrant>,
    issued: &IssuedRef,
    now: i64,
) -> Result<Result<Principal, Failure>, crate::store::StoreError> {
    let Some(standing) = oauth::access_standing_on(tx, &issued.hash)? else {
        return Ok(Err(Failure::Invalid("unknown")));
    };
    if let Some(failure) = token_failure(&standing, now) {
        return Ok(Err(failure));
    }
    if standing
        .grant_last_used_at
        .is_none_or(|at| now - at >= GRANT_USED_INTERVAL_SECS)
    {
        oauth::touch_grant(tx, &standing.grant_id, now)?;
    }
    let id = &entry.public_id;
    if is_user_id(id) {
        let Some(mut user) = users::user_standing_on(tx, id)? else {
            return Ok(Err(Failure::Invalid("unknown")));
        };
        if let Err(failure) = check_user(&user, grant) {
            return Ok(Err(failure));
        }
        if needs_user_touch(&user, now) {
            users::touch_user(tx, id, now)?;
            user.last_seen_at = now;
        }
        return Ok(Ok(user_principal(
            id,
            entry.client_id.clone(),
            grant,
            &user,
        )));
    }
    let Some(row) = credentials::credential_on(tx, id)?.map(CredentialRow::from) else {
        return Ok(Err(Failure::Invalid("unknown")));
    };
    if let Err(failure) = check_standing(&row, now) {
        return Ok(Err(failure));
    }
    Ok(key_principal(id, &row, &standing))
}

impl Authenticator {
    /// Whether the person `principal_id` of a grant still stands: a user not blocked, a
    /// key neither revoked nor expired. A refresh and a remembered consent ask this first.
    pub fn principal_stands(&self, principal_id: &str) -> Result<bool, crate::store::StoreError> {
        if is_user_id(principal_id) {
            return Ok(self
                .store
                .user_standing(principal_id)?
                .is_some_and(|user| user.blocked_at.is_none()));
        }
        Ok(find_by_public_id(&self.store, principal_id)?
            .is_some_and(|row| check_standing(&row, self.clock.unix_secs()).is_ok()))
    }
}
