//! Tokens from the company's identity provider: the verification core of
//! `[[auth.issuers]]`. [`Identity`] holds every trusted provider with its keys, kept fresh
//! on a small runtime of its own, and turns a bearer token that is not one of tollgate's
//! into a [`ProviderToken`] (who, which client, which tollgate scopes, until when) or an
//! [`IdentityError`]: a refusal with its reason, or "the provider could not be asked".
//!
//! The token's shape decides: a JWT (three base64url segments) is verified locally
//! against the keys of the provider its `iss` names (`jwt`); anything else is opaque and
//! asked about at the providers that introspect (`introspect`). Keys are discovered (OpenID
//! Connect, else RFC 8414), fetched from a `jwks_uri`, or read from a `jwks_file`
//! (`provider`); fetches are bounded in time and size (`fetch`). Claims become scopes by
//! the issuer's mapping (`claims`). A token never appears in an error or a log line.
//!
//! The issuer with `[auth.issuers.login]` is also where people sign in when tollgate is
//! the authorization server of an MCP host: [`Identity::begin_login`] and
//! [`Identity::finish_login`] are the relying party's half of OpenID Connect's
//! authorization code flow (`login`), verifying the ID token with the same keys and
//! checks as access tokens.
//!
//! This layer sits above config and catalog and below the store and the guards: the
//! authenticator calls it and decides what a refusal becomes on the wire.

mod claims;
mod fetch;
mod introspect;
mod jwt;
mod keys;
mod login;
mod provider;

pub use login::LoginStart;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::clock::Clock;
use crate::config::{IssuerConfig, secret_file_warning};

use fetch::{FETCH_DEADLINE, Http};
use provider::Provider;

/// The trusted identity providers, ready to verify tokens. Send + Sync; share it in an
/// `Arc`.
pub struct Identity {
    providers: Vec<Arc<Provider>>,
    clock: Clock,
    /// The runtime fetches run on; `None` without issuers.
    runtime: Option<tokio::runtime::Runtime>,
    /// Verifications by issuer name and outcome, for `/metrics` (bounded: the configured
    /// names, [`NO_ISSUER`], and the fixed outcomes).
    outcomes: Mutex<BTreeMap<(String, &'static str), u64>>,
}

/// The issuer label of a refusal that names no configured issuer (or cannot be read).
pub const NO_ISSUER: &str = "-";

/// The outcome label of an accepted token.
pub const ACCEPTED: &str = "accepted";

/// The outcome label of a token the provider could not be asked about.
pub const UNAVAILABLE: &str = "unavailable";

/// A provider's token, verified: the caller it names and what it may do.
#[derive(Debug, Clone)]
pub struct ProviderToken {
    /// The `name` of the issuer's configuration.
    pub issuer_name: String,
    /// The configured issuer URL (the canonical one, even for an Entra v1 token).
    pub issuer: String,
    /// The user (or service), from the issuer's `subject_claim`.
    pub subject: String,
    /// A name to show, from the first of `name_claims` the token has.
    pub display_name: Option<String>,
    /// The OAuth client, from the first of `client_claims` the token has.
    pub client_id: Option<String>,
    /// The tollgate scopes granted, after mapping; sorted, without duplicates.
    pub scopes: Vec<String>,
    /// The values of the issuer's `role_claims` (before mapping); sorted, without
    /// duplicates.
    pub roles: Vec<String>,
    /// The token's `exp` (unix seconds).
    pub expires_at: i64,
    /// Until when this verdict may be reused (unix seconds): a JWT's `exp` plus the clock
    /// skew (it verifies until then); for an introspected token, `min(now + cache_secs,
    /// exp)`.
    pub cache_until: i64,
}

/// Why a provider token (or a sign-in) was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityError {
    /// Refused, with this reason. For a bearer token (`invalid_token`): "expired",
    /// "not_yet_valid", "wrong_audience", "untrusted_issuer", "bad_signature",
    /// "unknown_key", "inactive", "malformed". A sign-in's ID token is refused with the
    /// same words (its `aud` or `azp` not tollgate's client id is "wrong_audience", its
    /// `iss` not the issuer "untrusted_issuer"), and besides: "nonce" (the ID token's
    /// `nonce` is missing or not the one sent), "login_refused" (the token endpoint
    /// answered an OAuth error such as `invalid_grant`: a code used twice or expired, a
    /// wrong verifier or redirect URI, tollgate's client refused), "no_id_token" (the
    /// provider's answer holds no ID token).
    Invalid(&'static str),
    /// The provider could not be reached to decide (keys, introspection, the metadata or
    /// token endpoint of a sign-in), or no issuer has `login`: the caller answers
    /// `backend_unavailable` (retryable); the text is for the operator's log and never
    /// holds a token, a code or a secret.
    Unavailable(String),
}

impl Identity {
    /// Starts key discovery and background refresh for every issuer on a small runtime of
    /// its own (one worker thread, named "tollgate-identity"). The first fetch of each
    /// issuer is awaited, at most the fetch deadline (3 s), so that the first tokens find
    /// keys; a provider that cannot be reached is logged and tried again in the
    /// background. Fails only on a local problem (a `jwks_file` that cannot be read or
    /// parsed, a runtime that cannot start).
    pub fn start(issuers: &[IssuerConfig], clock: Clock) -> Result<Identity, String> {
        Identity::start_with_deadline(issuers, clock, FETCH_DEADLINE)
    }

    /// [`Identity::start`], each fetch bounded by `deadline` (tests shorten it).
    fn start_with_deadline(
        issuers: &[IssuerConfig],
        clock: Clock,
        deadline: std::time::Duration,
    ) -> Result<Identity, String> {
        for issuer in issuers {
            for warning in issuer
                .secret_files()
                .into_iter()
                .filter_map(secret_file_warning)
            {
                tracing::warn!(issuer = %issuer.name, "{warning}");
            }
        }
        if issuers.is_empty() {
            return Ok(Identity {
                providers: Vec::new(),
                clock,
                runtime: None,
                outcomes: Mutex::default(),
            });
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tollgate-identity")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the identity runtime: {e}"))?;
        let http = Arc::new(Http::new(runtime.handle().clone(), deadline)?);
        let providers = issuers
            .iter()
            .map(|config| {
                Provider::new(config.clone(), Arc::clone(&http), clock.clone()).map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut first_fetches = Vec::with_capacity(providers.len());
        for provider in &providers {
            let (done, first_fetch) = tokio::sync::oneshot::channel::<()>();
            let provider = Arc::clone(provider);
            runtime.spawn(async move {
                provider.first_fetch().await;
                let _ = done.send(());
                if provider.fetches_keys() {
                    provider.keep_fresh().await;
                }
            });
            first_fetches.push(first_fetch);
        }
        // A first fetch still under way past the deadline goes on in the background.
        let _ = http.wait(async {
            for first_fetch in first_fetches {
                let _ = first_fetch.await;
            }
        });
        Ok(Identity {
            providers,
            clock,
            runtime: Some(runtime),
            outcomes: Mutex::default(),
        })
    }

    /// No issuers configured.
    pub fn is_empty(&self) -> bool {
        self.providers.is_empty()
    }

    /// Verifies a bearer token that is not one of tollgate's own (the caller has already
    /// checked it does not start with `tg_`). Blocking: waits at most the fetch deadline
    /// when the provider must be asked. The time is the injected clock's.
    pub fn verify(&self, token: &str) -> Result<ProviderToken, IdentityError> {
        let now = self.clock.unix_secs();
        let verdict = if jwt::looks_like_jwt(token) {
            jwt::verify(&self.providers, token, now)
        } else {
            introspect::introspect(&self.providers, token, now)
        };
        self.count(&verdict);
        verdict
    }

    /// Counts a verdict: an accepted token under its issuer's name, a refusal or an
    /// unreachable provider under [`NO_ISSUER`] (a refusal need not name a trusted one).
    fn count(&self, verdict: &Result<ProviderToken, IdentityError>) {
        let key = match verdict {
            Ok(token) => (token.issuer_name.clone(), ACCEPTED),
            Err(IdentityError::Invalid(reason)) => (NO_ISSUER.to_owned(), *reason),
            Err(IdentityError::Unavailable(_)) => (NO_ISSUER.to_owned(), UNAVAILABLE),
        };
        *self
            .outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key)
            .or_default() += 1;
    }

    /// Verifications so far by issuer name and outcome (`accepted`, a refusal's reason,
    /// or `unavailable`), in order.
    pub fn outcome_counts(&self) -> Vec<(String, &'static str, u64)> {
        self.outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|((issuer, outcome), count)| (issuer.clone(), *outcome, *count))
            .collect()
    }

    /// Every provider's issuer URL (the canonical one: an Entra v1 issuer is accepted in
    /// tokens but has no metadata of its own), for the protected resource metadata's
    /// `authorization_servers`.
    pub fn issuer_urls(&self) -> Vec<String> {
        self.providers
            .iter()
            .map(|p| p.config.issuer.clone())
            .collect()
    }
}

// The authenticator shares one `Identity` between its worker threads.
const _: () = {
    const fn shared_between_threads<T: Send + Sync>() {}
    shared_between_threads::<Identity>();
};

impl Drop for Identity {
    fn drop(&mut self) {
        // The background refreshes only sleep or fetch: nothing to wait for.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
