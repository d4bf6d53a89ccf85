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
        // (Tokens of tollgate's own authorization server start with `tg_` too.)
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
                Failure::ProviderUnavailable
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
            roles: verified.roles,
            valid_until: verified.cache_until,
            label: verified.display_name.unwrap_or(verified.subject),
            issued: None,
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
        if let Some(issued) = &grant.issued {
            return self.issued_cached(grant, issued, now);
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
        roles: grant.roles.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::catalog::ErrorKind;
    use crate::guards::auth::testing::{fresh, reason};
    use crate::guards::auth::{CallAuth, Recheck};
    use crate::guards::charging::CallCharge;
    use crate::guards::ratelimit::{ChargeRequest, Limiter};
    use crate::identity::tests::{NOW, Signer, offline};
    use crate::tools::Category;

    const ISSUER: &str = "https://idp.example.com";
    const AUDIENCE: &str = "https://tollgate.example.com/mcp";

    fn config() -> String {
        format!(
            "[[auth.issuers]]\nname = \"corp\"\nissuer = \"{ISSUER}\"\n\
             audience = \"{AUDIENCE}\"\njwks_file = \"keys.json\"\nalgorithms = [\"ES256\"]\n"
        )
    }

    /// A token of `ana` (named "Ana"), signed by `key`, expiring `ttl` seconds after
    /// [`NOW`], for the client `portal`.
    fn token(key: &Signer, ttl: i64) -> String {
        key.sign(&json!({
            "iss": ISSUER, "aud": AUDIENCE, "sub": "ana", "name": "Ana", "azp": "portal",
            "iat": NOW, "exp": NOW + ttl, "scope": "invoices:read",
        }))
    }

    fn accepted(identity: &crate::identity::Identity) -> u64 {
        identity
            .outcome_counts()
            .iter()
            .filter(|(_, outcome, _)| *outcome == crate::identity::ACCEPTED)
            .map(|(_, _, count)| count)
            .sum()
    }

    #[test]
    fn a_verified_token_is_reused_until_it_expires_and_its_user_is_a_principal() {
        let (_db, store) = fresh("pro");
        let key = Signer::es256("k1");
        let (identity, clock, _dir) = offline(&config(), &[&key]);
        let identity = Arc::new(identity);
        let auth =
            Authenticator::new(store.clone(), clock.clock()).with_identity(Arc::clone(&identity));
        let token = token(&key, 120);

        let principal = auth.authenticate(Some(&token), "s").expect("accepted");
        assert!(principal.is_user());
        assert_eq!(principal.scopes, ["invoices:read"]);
        assert_eq!(principal.client_id.as_deref(), Some("corp:portal"));
        let user = store.users().expect("users").remove(0);
        assert_eq!(user.id, principal.credential_id);
        assert_eq!(user.label(), "Ana");
        // Its sessions are the user's own, whatever client the token names.
        assert_eq!(
            crate::guards::auth::CredentialRef::from(&principal).client_id,
            None
        );
        for _ in 0..3 {
            auth.authenticate(Some(&token), "s").expect("cached");
        }
        assert_eq!(accepted(&identity), 1, "verified once");
        assert_eq!(auth.argon2_runs(), 0, "no argon2 for a provider's token");

        // Past its expiry (and the skew), the cached verdict is not reused.
        clock.advance(Duration::from_secs(181));
        let err = auth.authenticate(Some(&token), "s").expect_err("expired");
        assert_eq!(err.kind(), ErrorKind::InvalidToken);
        assert_eq!(reason(&err), "expired");
    }

    #[test]
    fn a_blocked_user_is_refused_on_the_next_call_inside_the_charging_transaction() {
        let (_db, store) = fresh("pro");
        let key = Signer::es256("k1");
        let (identity, clock, _dir) = offline(&config(), &[&key]);
        let auth =
            Authenticator::new(store.clone(), clock.clock()).with_identity(Arc::new(identity));
        let token = token(&key, 3600);
        let principal = auth.authenticate(Some(&token), "s").expect("accepted");
        assert!(
            store
                .set_user_blocked(&principal.credential_id, Some(NOW))
                .expect("block")
        );

        let call = auth.authenticate_call(Some(&token), "s").expect("cached");
        assert!(matches!(call, CallAuth::Cached { .. }));
        assert_eq!(call.client_id(), Some("corp:portal"), "the client's bucket");
        let limiter: Limiter<CallCharge> = Limiter::with_batch(store.clone(), clock.clock());
        let request = ChargeRequest {
            credential_id: call.credential_id().to_owned(),
            client_id: call.client_id().map(str::to_owned),
            category: Category::Read,
        };
        let mut charged = limiter
            .charge_many(vec![CallCharge::new(request, auth.call_checks(&call))])
            .remove(0);
        assert!(charged.outcome.is_none(), "a blocked user charges nothing");
        match auth.finish_recheck(&call, &mut charged.checks, "s") {
            Recheck::Refused(err) => {
                assert_eq!(err.kind(), ErrorKind::UserBlocked);
                assert_eq!(err.fields()["details"]["user"], "Ana");
            }
            _ => panic!("a blocked user is refused"),
        }
        let err = auth.authenticate(Some(&token), "s").expect_err("blocked");
        assert_eq!(err.kind(), ErrorKind::UserBlocked);

        assert!(
            store
                .set_user_blocked(&principal.credential_id, None)
                .expect("unblock")
        );
        auth.authenticate(Some(&token), "s").expect("unblocked");
    }
}
