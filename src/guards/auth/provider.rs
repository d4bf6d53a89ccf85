//! Tokens of the company's identity provider: a bearer token that is not one of tollgate's
//! own (`tg_…`) goes to [`crate::identity`] when `[[auth.issuers]]` names a provider. The
//! user it names becomes the principal: recorded in the store on first sight
//! ([`crate::store::users`]), charged and audited under its own id, and re-checked on every
//! call (a block by the operator applies to the next call on every node).
//!
//! A verified token is cached like an API key (by the SHA-256 of its text), with what its
//! claims granted, until the verdict may no longer be reused: its expiry for a JWT, the end
//! of the introspection cache for an opaque token. A call with a provider's token so costs
//! what a call with a key costs: one indexed read of the user's row, in the charging
//! transaction. The token itself is never logged, stored or put in an error.
//!
//! The OAuth client a token names (`azp`, `client_id`) has a rate bucket of its own,
//! `<issuer name>:<client>`, on the plan's per-client default; a user's sessions are the
//! user's, whatever client opened them.

use std::sync::Arc;

use crate::identity::{IdentityError, ProviderToken};
use crate::store::users::{SeenUser, UserStanding};

use super::cache::{CacheEntry, ProviderGrant};
use super::token::Mode;
use super::{Authenticator, Failure, Principal};

/// A user's `last_seen_at` is written at most this often by its calls.
pub(super) const USER_SEEN_INTERVAL_SECS: i64 = 60;

/// Prefix of every token tollgate itself issues (keys, access tokens, client secrets).
const OWN_TOKEN_PREFIX: &str = "tg_";

impl Authenticator {
    /// Whether `token` is for the identity providers: one is configured and the token is
    /// not in one of tollgate's own formats.
    pub(super) fn is_provider_token(&self, token: &str) -> bool {
        self.identity.is_some() && !token.starts_with(OWN_TOKEN_PREFIX)
    }

    /// Verifies a provider's token that is not cached: its signature and claims (or the
    /// provider's introspection), then the user's standing, recorded as seen now.
    pub(super) fn authenticate_provider(
        &self,
        token: &str,
        digest: [u8; 32],
        now: i64,
    ) -> Result<Principal, Failure> {
        let identity = self
            .identity
            .as_deref()
            .ok_or(Failure::Invalid("malformed"))?;
        let verified = identity.verify(token).map_err(|err| match err {
            IdentityError::Invalid(reason) => Failure::Invalid(reason),
            IdentityError::Unavailable(why) => {
                tracing::warn!(cause = %why, "a token could not be verified: the identity provider is unreachable");
                Failure::ProviderUnavailable(why)
            }
        })?;
        let seen = SeenUser {
            issuer: &verified.issuer,
            subject: &verified.subject,
            display_name: verified.display_name.as_deref(),
            client_id: verified.client_id.as_deref(),
        };
        let (user_id, standing) = self.store.record_user(&seen, now).map_err(Failure::Store)?;
        let client = client_bucket(&verified);
        let grant = ProviderGrant {
            scopes: verified.scopes,
            valid_until: verified.cache_until,
            label: verified.display_name.unwrap_or(verified.subject),
        };
        check_user(&standing, &grant)?;
        let principal = user_principal(&user_id, client.clone(), &grant, &standing);
        self.cache
            .remember_provider(digest, &user_id, client, grant);
        Ok(principal)
    }

    /// A cached provider token outside a tool call: the user's standing, read now. `None`
    /// when the verdict may no longer be reused, or the user's row is gone (verify anew).
    pub(super) fn provider_cached(
        &self,
        entry: &CacheEntry,
        grant: &Arc<ProviderGrant>,
        now: i64,
    ) -> Option<Result<Principal, Failure>> {
        if now >= grant.valid_until {
            return None;
        }
        let standing = match self.store.user_standing(&entry.public_id) {
            Ok(Some(standing)) => standing,
            Ok(None) => return None,
            Err(e) => return Some(Err(Failure::Store(e))),
        };
        Some(
            check_user(&standing, grant).map(|()| {
                user_principal(&entry.public_id, entry.client_id.clone(), grant, &standing)
            }),
        )
    }
}

/// The rate bucket of the OAuth client a token names: `<issuer name>:<client>`, apart from
/// tollgate's own clients.
fn client_bucket(token: &ProviderToken) -> Option<String> {
    token
        .client_id
        .as_ref()
        .map(|client| format!("{}:{client}", token.issuer_name))
}

/// A blocked user is refused, naming the user.
pub(super) fn check_user(standing: &UserStanding, grant: &ProviderGrant) -> Result<(), Failure> {
    match standing.blocked_at {
        Some(_) => Err(Failure::UserBlocked(grant.label.clone())),
        None => Ok(()),
    }
}

/// Whether a call should record the user as seen (at most once a minute).
pub(super) fn needs_user_touch(standing: &UserStanding, now: i64) -> bool {
    now - standing.last_seen_at >= USER_SEEN_INTERVAL_SECS
}

/// The principal of user `user_id`: the scopes its token granted, live data, the guard
/// channel of the settings.
pub(super) fn user_principal(
    user_id: &str,
    client_id: Option<String>,
    grant: &ProviderGrant,
    standing: &UserStanding,
) -> Principal {
    Principal {
        credential_id: user_id.to_owned(),
        client_id,
        scopes: grant.scopes.clone(),
        mode: Mode::Live,
        guard_channel: None,
        installation: Mode::from_stored(standing.installation_mode.as_deref().unwrap_or_default()),
    }
}
