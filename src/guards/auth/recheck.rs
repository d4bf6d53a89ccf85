//! The re-check of a cached credential inside the charging transaction. A tool call whose
//! token was verified before costs no read of its own: [`Authenticator::authenticate_call`]
//! answers [`CallAuth::Cached`], the charging transaction re-reads the credential's row
//! ([`CallChecks::recheck_in`], before the counters move, so a revoked key charges
//! nothing), and [`Authenticator::finish_recheck`] turns what it found into the principal,
//! the refusal, or [`Recheck::Stale`] when the secret changed since the token was cached.
//! A provider's token re-checks its user's row the same way (blocked or not), and is stale
//! once its verdict may no longer be reused.

use std::collections::HashMap;

use crate::catalog::McpError;
use crate::store::users::{self, UserStanding};
use crate::store::{StoreError, Tx, credentials};

use super::cache::{CacheEntry, ProviderGrant, digest_of};
use super::provider::{check_user, needs_user_touch, user_principal};
use super::standing::{CredentialRow, check_standing, needs_touch};
use super::{Authenticator, Failure, Principal};

/// How the caller of a tool call was identified before its charging transaction.
pub enum CallAuth {
    /// Verified now: argon2, or the development-mode credential.
    Verified(Principal),
    /// A token verified earlier; its credential row is re-checked in the transaction.
    Cached {
        /// SHA-256 of the token, the cache key.
        digest: [u8; 32],
        /// What the cache remembers of it.
        entry: CacheEntry,
    },
}

impl CallAuth {
    /// The public id of the credential, for the charge.
    pub fn credential_id(&self) -> &str {
        match self {
            CallAuth::Verified(principal) => &principal.credential_id,
            CallAuth::Cached { entry, .. } => &entry.public_id,
        }
    }

    /// The credential's OAuth client when already known (otherwise the charge reads it):
    /// for a provider's token, the bucket of the client it names.
    pub fn client_id(&self) -> Option<&str> {
        match self {
            CallAuth::Verified(principal) => principal.client_id.as_deref(),
            CallAuth::Cached { entry, .. } if entry.provider.is_some() => {
                entry.client_id.as_deref()
            }
            CallAuth::Cached { .. } => None,
        }
    }
}

/// The outcome of re-checking a cached token ([`Authenticator::finish_recheck`]).
pub enum Recheck {
    /// The credential still stands.
    Admitted(Principal),
    /// Revoked, expired, or otherwise refused: the call ends with this error, uncharged.
    Refused(McpError),
    /// The secret changed since the token was cached: verify it afresh.
    Stale,
}

/// What a re-check inside the transaction found.
enum Identity {
    Admitted(Principal),
    Refused(Failure),
    Stale,
}

/// The re-check of a cached credential inside the charging transaction, before the
/// counters move (so a revoked key charges nothing): what [`Authenticator::call_checks`]
/// prepares, the transaction runs ([`CallChecks::recheck_in`]) and
/// [`Authenticator::finish_recheck`] reads.
pub struct CallChecks {
    now: i64,
    pending: Option<CacheEntry>,
    identity: Option<Identity>,
}

impl CallChecks {
    /// The time the checks were prepared at (what the plan facts of the call are read at).
    pub fn now(&self) -> i64 {
        self.now
    }

    /// Re-checks the cached credential, if there is one, inside `tx`; `Ok(false)` refuses
    /// the call *without* charging it (the checks keep why). `rows` holds the credential
    /// rows this transaction has read so far.
    pub fn recheck_in(
        &mut self,
        tx: &Tx<'_>,
        rows: &mut CredentialRows,
    ) -> Result<bool, StoreError> {
        let Some(entry) = &self.pending else {
            return Ok(true);
        };
        let now = self.now;
        if let Some(grant) = &entry.provider {
            let identity = match &grant.issued {
                _ if now >= grant.valid_until => Identity::Stale,
                Some(issued) => {
                    match super::issued::recheck_issued(tx, entry, grant, issued, now)? {
                        Ok(principal) => Identity::Admitted(principal),
                        Err(failure) => Identity::Refused(failure),
                    }
                }
                None => recheck_user(tx, rows, entry, grant, now)?,
            };
            let admitted = matches!(identity, Identity::Admitted(_));
            self.identity = Some(identity);
            return Ok(admitted);
        }
        let identity = match rows.credential(tx, &entry.public_id)? {
            None => Identity::Refused(Failure::Invalid("unknown")),
            Some(row) => match check_standing(row, now) {
                Err(failure) => Identity::Refused(failure),
                Ok(()) if !entry.matches(row, now) => Identity::Stale,
                Ok(()) => {
                    if needs_touch(row, now) {
                        credentials::touch_last_used(tx, &entry.public_id, now)?;
                        row.last_used_at = Some(now);
                    }
                    Identity::Admitted(Principal {
                        credential_id: entry.public_id.clone(),
                        client_id: row.client_id.clone(),
                        scopes: row.scopes.clone(),
                        mode: row.mode,
                        guard_channel: row.guard_channel,
                        installation: row.installation_mode,
                        roles: Vec::new(),
                    })
                }
            },
        };
        let admitted = matches!(identity, Identity::Admitted(_));
        self.identity = Some(identity);
        Ok(admitted)
    }
}

/// The re-check of a provider user's cached token inside `tx`: stale once its verdict
/// may no longer be reused (or the user's row is gone), refused when the operator blocked
/// the user; otherwise the user is recorded as seen (at most once a minute).
fn recheck_user(
    tx: &Tx<'_>,
    rows: &mut CredentialRows,
    entry: &CacheEntry,
    grant: &ProviderGrant,
    now: i64,
) -> Result<Identity, StoreError> {
    if now >= grant.valid_until {
        return Ok(Identity::Stale);
    }
    let Some(standing) = rows.user(tx, &entry.public_id)? else {
        return Ok(Identity::Stale);
    };
    if let Err(failure) = check_user(standing, grant) {
        return Ok(Identity::Refused(failure));
    }
    if needs_user_touch(standing, now) {
        users::touch_user(tx, &entry.public_id, now)?;
        standing.last_seen_at = now;
    }
    Ok(Identity::Admitted(user_principal(
        &entry.public_id,
        entry.client_id.clone(),
        grant,
        standing,
    )))
}

/// The credential rows one charging transaction has read, for all its calls (the calls of
/// a batch are mostly one credential's: its row is read once, not once a call), kept in
/// step with the `last_used_at` the transaction writes; and likewise the provider users'.
#[derive(Default)]
pub struct CredentialRows {
    rows: HashMap<String, Option<CredentialRow>>,
    users: HashMap<String, Option<UserStanding>>,
}

impl CredentialRows {
    fn credential(
        &mut self,
        tx: &Tx<'_>,
        public_id: &str,
    ) -> Result<Option<&mut CredentialRow>, StoreError> {
        if !self.rows.contains_key(public_id) {
            let row = credentials::credential_on(tx, public_id)?.map(CredentialRow::from);
            self.rows.insert(public_id.to_owned(), row);
        }
        Ok(self.rows.get_mut(public_id).and_then(Option::as_mut))
    }

    fn user(
        &mut self,
        tx: &Tx<'_>,
        user_id: &str,
    ) -> Result<Option<&mut UserStanding>, StoreError> {
        if !self.users.contains_key(user_id) {
            let standing = users::user_standing_on(tx, user_id)?;
            self.users.insert(user_id.to_owned(), standing);
        }
        Ok(self.users.get_mut(user_id).and_then(Option::as_mut))
    }
}

impl Authenticator {
    /// Step 1 of a tool call. A token verified earlier comes back as
    /// [`CallAuth::Cached`]: its credential row is re-checked by [`CallChecks`] inside
    /// the charging transaction (no read of its own); anything else is verified now.
    pub fn authenticate_call(
        &self,
        token: Option<&str>,
        source: &str,
    ) -> Result<CallAuth, McpError> {
        if let Some(token) = token.filter(|t| !t.is_empty()) {
            let digest = digest_of(token);
            if let Some(entry) = self.cache.get(&digest) {
                return Ok(CallAuth::Cached { digest, entry });
            }
        }
        self.authenticate(token, source).map(CallAuth::Verified)
    }

    /// The checks a call runs inside its charging transaction.
    pub fn call_checks(&self, auth: &CallAuth) -> CallChecks {
        CallChecks {
            now: self.clock.unix_secs(),
            pending: match auth {
                CallAuth::Cached { entry, .. } => Some(entry.clone()),
                CallAuth::Verified(_) => None,
            },
            identity: None,
        }
    }

    /// What the re-check of a cached token in `checks` found: the principal, the refusal
    /// (counted against `source` like any failed token), or [`Recheck::Stale`] when the
    /// credential's secret changed since it was cached (the entry is forgotten; verify
    /// the token afresh).
    pub fn finish_recheck(
        &self,
        auth: &CallAuth,
        checks: &mut CallChecks,
        source: &str,
    ) -> Recheck {
        let (digest, entry) = match auth {
            CallAuth::Verified(principal) => return Recheck::Admitted(principal.clone()),
            CallAuth::Cached { digest, entry } => (digest, entry),
        };
        match checks.identity.take() {
            Some(Identity::Admitted(principal)) => Recheck::Admitted(principal),
            Some(Identity::Refused(failure)) => {
                self.throttle().record_failure(source, checks.now);
                Recheck::Refused(failure.into_error())
            }
            Some(Identity::Stale) => {
                self.cache.forget(digest);
                Recheck::Stale
            }
            // The charging transaction failed before the row was read.
            None => {
                tracing::debug!(credential = %entry.public_id, "credential not re-checked");
                Recheck::Refused(McpError::internal())
            }
        }
    }
}
