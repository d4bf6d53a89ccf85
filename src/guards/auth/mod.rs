//! Authentication and access: who is calling, and which tools their scopes and the
//! company's plan let them see and call. This module declares the [`Authenticator`] and the
//! [`Principal`] it admits; what the authenticator does is split by concern:
//!
//! - `verify`: verification of a presented token (the order of its checks is there) and of
//!   an OAuth client's secret;
//! - `cache`: the verified-token cache and the single flight per token;
//! - `recheck`: the re-check of a cached credential inside the charging transaction
//!   ([`CallChecks`]);
//! - `standing`: a credential's row as authentication reads it, and its standing (revoked,
//!   expired, client revoked, test key on a live installation);
//! - `throttle`: the limits on argon2 work (the failure throttle, the server-wide ceiling
//!   and the gate on verifications running at once);
//! - `provider`: tokens of the company's identity provider ([`crate::identity`]): the user
//!   they name becomes the principal, recorded in the store and re-checked (blocked or
//!   not) on every call like a credential's row.
//!
//! Beside it: `token` (the credential format, secrets and hashes), `access` (scopes, plans,
//! visibility), `scopes` (the scopes a credential can usefully hold and the closest of them
//! to a mistyped one) and `keys` (the credential model the CLI and the OAuth token endpoint
//! manage: API keys, OAuth clients and their short-lived access tokens, over
//! [`crate::store::credentials`]).
//!
//! A credential is `tg_live_<public id>_<secret>` (or `tg_test_…`): the public id (80
//! random bits, lowercase hex) finds the row, the secret (256 random bits, base64url) is
//! checked against its argon2id PHC hash (OWASP parameters m=19 MiB, t=2, p=1). The secret
//! is shown once, at creation; only its hash is stored. OAuth client secrets look like
//! `tg_cs_<secret>` and are never accepted as bearer tokens (`invalid_token_type`). A
//! caller who does not hold the secret learns nothing about a public id: an unknown, a
//! revoked, an expired or a test key all get the same `invalid_token` after the same work.
//!
//! Test mode: the company row has a `mode` (`live` by default, `tollgate company set --mode
//! test` for a development installation). `tg_test_` keys are refused with
//! `invalid_token_type` unless the mode is `test`; live keys work in both modes.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::catalog::{ErrorKind, McpError};
use crate::clock::Clock;
use crate::config::GuardChannel;
use crate::identity::Identity;
pub use crate::store::credentials::OAuthClient;
use crate::store::credentials::{self, NewClient, NewCredential, Revocable};
use crate::store::plans::{self, Plan};
use crate::store::store_failure;
use crate::store::{Conn, Store, StoreError, Tx};
use crate::tools::ToolSpec;

mod access;
mod cache;
mod issued;
mod keys;
mod provider;
mod recheck;
mod scopes;
mod standing;
mod throttle;
mod token;
mod verify;

pub use access::{
    ADMIN_SCOPE, APPROVE_SCOPE, AccessFacts, SUPER_SCOPE, Visibility, grants, is_approver,
    is_operator, parse_scope, parse_scope_list,
};
pub use cache::CacheEntry;
use cache::{Flights, TokenCache};
pub use issued::{ACCESS_TOKEN_PREFIX, REFRESH_TOKEN_PREFIX, client_bucket};
pub use keys::{
    CredentialError, IssuedClient, IssuedKey, KeyInfo, NewKey, create_client, create_key,
    issue_access_token, list_clients, list_keys, revoke_client, revoke_key, rotate_key,
    set_guard_channel,
};
pub use recheck::{CallAuth, CallChecks, CredentialRows, Recheck};
pub use scopes::{KnownScope, KnownScopes, MAX_SUGGESTIONS, ScopeGroup, UnknownScope};
pub use token::{
    CLIENT_SECRET_PREFIX, LIVE_PREFIX, Mode, Secret, TEST_PREFIX, hash_secret, random_hex,
};
use {throttle::*, token::*};

/// Failed authentications a source may make per window before it is throttled.
pub const AUTH_FAILURE_LIMIT: u32 = 10;
/// The throttle's fixed window, in seconds.
pub const AUTH_FAILURE_WINDOW_SECS: i64 = 60;
pub use crate::config::DEFAULT_ARGON2_PER_SECOND;

/// The identity a request runs as, once authenticated.
#[derive(Debug, Clone)]
pub struct Principal {
    /// Public id of the credential.
    pub credential_id: String,
    /// The OAuth client the credential belongs to, if any.
    pub client_id: Option<String>,
    /// Granted scopes (`resource:action`, or `*`).
    pub scopes: Vec<String>,
    /// Whether it is a `tg_live_` or a `tg_test_` credential (OAuth access tokens are
    /// live): decides which book of the business data its calls work on.
    pub mode: Mode,
    /// The credential's own guard channel (`None`: the `[errors] guard_channel` setting).
    pub guard_channel: Option<GuardChannel>,
    /// The installation's mode when the credential was read: rehearsed failures are
    /// looked up only in test mode.
    pub installation: Mode,
    /// The roles the identity provider's token names (its `role_claims`' values); none for
    /// an API key. Policy rules may name them (`who.roles`).
    pub roles: Vec<String>,
}

/// Why a presented credential was refused (kept apart from [`McpError`] until the end so
/// the throttle can tell failures from storage trouble).
enum Failure {
    /// `invalid_token` with this `details.reason`.
    Invalid(&'static str),
    /// `client_revoked`.
    ClientRevoked,
    /// `invalid_token_type` with this `details.reason`.
    WrongType(&'static str),
    /// The database could not answer; not the caller's fault.
    Store(StoreError),
    /// The server-wide argon2 ceiling is reached; not counted against the caller.
    Busy(McpError),
    /// `user_blocked`: the operator blocked the provider user (its label).
    UserBlocked(String),
    /// The identity provider could not be reached to decide; not the caller's fault. Why
    /// is the operator's to read in the log, never the caller's (it names endpoints).
    ProviderUnavailable,
}

impl Failure {
    /// Whether the attempt counts against the source's failure allowance.
    fn is_callers_fault(&self) -> bool {
        !matches!(
            self,
            Failure::Store(_) | Failure::Busy(_) | Failure::ProviderUnavailable
        )
    }

    fn into_error(self) -> McpError {
        match self {
            Failure::Busy(err) => err,
            Failure::Invalid(reason) => invalid_token(reason),
            Failure::ClientRevoked => McpError::new(ErrorKind::ClientRevoked),
            Failure::WrongType(reason) => {
                McpError::new(ErrorKind::InvalidTokenType).detail("reason", reason)
            }
            Failure::Store(err) => store_failure(err, false),
            Failure::UserBlocked(user) => {
                McpError::new(ErrorKind::UserBlocked).detail("user", user)
            }
            Failure::ProviderUnavailable => McpError::new(ErrorKind::IdentityProviderUnavailable),
        }
    }
}

/// `invalid_token` with a safe machine-readable reason.
fn invalid_token(reason: &'static str) -> McpError {
    McpError::new(ErrorKind::InvalidToken).detail("reason", reason)
}

/// Verifies credentials and decides access.
pub struct Authenticator {
    store: Store,
    clock: Clock,
    cache: TokenCache,
    throttle: Mutex<Throttle>,
    flights: Flights,
    argon2_runs: AtomicU64,
    argon2_gate: Gate,
    ceiling: Ceiling,
    /// The company's identity providers, when `[[auth.issuers]]` names any.
    identity: Option<Arc<Identity>>,
}

/// The credential a request presents, as far as binding a session to it needs: its
/// public id and its OAuth client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialRef {
    /// Public id of the credential.
    pub credential_id: String,
    /// The OAuth client it belongs to, if any.
    pub client_id: Option<String>,
}

impl From<&Principal> for CredentialRef {
    /// A provider user's sessions are the user's own, whatever OAuth client the token
    /// names (many people sign in through one client); so are the sessions of a person
    /// who signed in with a key through tollgate's authorization server.
    fn from(principal: &Principal) -> CredentialRef {
        CredentialRef {
            credential_id: principal.credential_id.clone(),
            client_id: if principal.is_user()
                || principal
                    .client_id
                    .as_deref()
                    .is_some_and(issued::is_client_bucket)
            {
                None
            } else {
                principal.client_id.clone()
            },
        }
    }
}

impl Principal {
    /// Whether this is a user of the company's identity provider (its `credential_id` is
    /// a user id, [`crate::store::users::is_user_id`]) rather than one of tollgate's
    /// credentials.
    pub fn is_user(&self) -> bool {
        crate::store::users::is_user_id(&self.credential_id)
    }
}

impl Authenticator {
    /// An authenticator over `store`, whose throttle windows and expiries follow `clock`.
    pub fn new(store: Store, clock: Clock) -> Authenticator {
        Authenticator {
            store,
            clock,
            cache: TokenCache::default(),
            throttle: Mutex::new(Throttle::default()),
            argon2_runs: AtomicU64::new(0),
            argon2_gate: Gate::default(),
            flights: Flights::default(),
            ceiling: Ceiling::new(DEFAULT_ARGON2_PER_SECOND),
            identity: None,
        }
    }

    /// The same authenticator also accepting the tokens of the providers `identity`
    /// trusts (none when it has no issuers).
    pub fn with_identity(mut self, identity: Arc<Identity>) -> Authenticator {
        self.identity = (!identity.is_empty()).then_some(identity);
        self
    }

    /// The identity providers this authenticator trusts, shared (the authorization server
    /// signs people in at them).
    pub fn shared_identity(&self) -> Option<Arc<Identity>> {
        self.identity.clone()
    }

    /// The identity providers this authenticator trusts, if any.
    pub fn identity(&self) -> Option<&Identity> {
        self.identity.as_deref()
    }

    /// Sets the server-wide ceiling: argon2 verifications started per second across all
    /// sources (at least 1). Beyond it, tokens that are not cached are refused with
    /// `rate_limited` (`bucket: "auth"`, `retry_after: 1`) until the next second.
    pub fn limit_argon2_per_second(&self, per_second: u32) {
        self.ceiling
            .per_second
            .store(per_second.max(1), Ordering::Relaxed);
    }

    /// How many argon2 verifications this authenticator has run (dummy ones included).
    pub fn argon2_runs(&self) -> u64 {
        self.argon2_runs.load(Ordering::Relaxed)
    }

    fn throttle(&self) -> MutexGuard<'_, Throttle> {
        self.throttle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Fixtures the unit tests of the guards share: a fresh database with a company on a plan,
/// and a live key on it.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use crate::store::{Company, StoreOptions};

    /// A new database in a temporary directory, its company on `plan`.
    pub(crate) fn fresh(plan: &str) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = StoreOptions {
            create: true,
            ..StoreOptions::default()
        };
        let store = Store::open(&dir.path().join("t.db"), &opts).expect("open");
        let company = Company {
            name: "Acme".into(),
            tax_id: None,
            plan_slug: plan.into(),
            locale: "en".into(),
            country: "ES".into(),
        };
        store.set_company(&company).expect("company");
        (dir, store)
    }

    /// A live key with `scopes`, no expiry, no client.
    pub(crate) fn key(store: &Store, scopes: &[&str]) -> IssuedKey {
        let new = NewKey {
            name: "k".into(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            expires_in: None,
            client_id: None,
            mode: Mode::Live,
            guard_channel: None,
        };
        create_key(store, &new).expect("create key")
    }

    /// The `details.reason` of a refusal.
    pub(crate) fn reason(err: &McpError) -> serde_json::Value {
        err.fields()["details"]["reason"].clone()
    }
}
