//! One trusted provider at run time: its configuration, its metadata (discovered once:
//! the JWKS URL, the introspection endpoint, and the authorization and token endpoints of
//! sign-in), its current keys, and how they are kept
//! fresh — at start, every `refresh_secs` in the background, and once on demand when a
//! token names a key not yet known (at most once per [`REFETCH_INTERVAL`]).
//!
//! Every fetch of an issuer goes through one lock, so a fetch asked for while another is
//! under way waits for it and takes its result instead of asking the provider again. A
//! fetch that fails leaves the last keys that worked in place.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

use super::IdentityError;
use super::fetch::Http;
use super::keys::{KeySet, Selection};
use crate::clock::Clock;
use crate::config::{Discovery, IssuerConfig, is_trusted_url};

/// The least time between two fetches of an issuer's keys asked for by tokens.
pub(super) const REFETCH_INTERVAL: Duration = Duration::from_secs(30);
/// The first wait before the background retries a failed fetch; it doubles up to the
/// refresh period.
const FIRST_RETRY: Duration = Duration::from_secs(15);

/// A trusted provider and what has been learnt from it.
pub(super) struct Provider {
    /// Its `[[auth.issuers]]` entry.
    pub(super) config: IssuerConfig,
    http: Arc<Http>,
    clock: Clock,
    state: Mutex<State>,
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    keys: Arc<KeySet>,
    /// Bumped by every key set installed; 0 means none yet.
    generation: u64,
    jwks_uri: Option<String>,
    introspection_endpoint: Option<String>,
    authorization_endpoint: Option<String>,
    token_endpoint: Option<String>,
    metadata_read: bool,
    /// When a token last made the keys be fetched ([`Clock::monotonic`]).
    last_demand: Option<Duration>,
    /// Why the last fetch failed, for the operator.
    last_failure: Option<String>,
}

/// What one fetch of the keys came to.
enum Refetch {
    /// New keys are in place (fetched now, or by the fetch this one waited for).
    Updated,
    /// A token asked too soon after the last fetch a token asked for.
    Throttled,
    /// The provider could not be reached or answered something unusable.
    Failed(String),
}

impl Provider {
    /// The provider of `config`; a local key file is read now (an error if it cannot be).
    pub(super) fn new(config: IssuerConfig, http: Arc<Http>, clock: Clock) -> Result<Self, String> {
        let mut state = State {
            jwks_uri: config.jwks_uri.clone(),
            introspection_endpoint: config
                .introspection
                .as_ref()
                .and_then(|i| i.endpoint.clone()),
            authorization_endpoint: config
                .login
                .as_ref()
                .and_then(|l| l.authorization_endpoint.clone()),
            token_endpoint: config.login.as_ref().and_then(|l| l.token_endpoint.clone()),
            ..State::default()
        };
        if let Some(file) = &config.jwks_file {
            let keys = read_key_file(file).map_err(|e| {
                format!("issuer {}: jwks_file {}: {e}", config.name, file.display())
            })?;
            state.keys = Arc::new(keys);
            state.generation = 1;
        }
        Ok(Provider {
            config,
            http,
            clock,
            state: Mutex::new(state),
            fetching: tokio::sync::Mutex::new(()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The HTTP client and runtime this provider is asked through.
    pub(super) fn http(&self) -> &Http {
        &self.http
    }

    /// Whether keys come from the network (no `jwks_file`).
    pub(super) fn fetches_keys(&self) -> bool {
        self.config.jwks_file.is_none()
    }

    /// The keys that may have signed a token with this `kid` and algorithm, fetching the
    /// key set again once when the `kid` is unknown (see the module documentation).
    pub(super) fn keys_for(
        &self,
        kid: Option<&str>,
        algorithm: Algorithm,
    ) -> Result<Vec<DecodingKey>, IdentityError> {
        let (keys, generation) = {
            let state = self.state();
            (Arc::clone(&state.keys), state.generation)
        };
        match keys.select(kid, algorithm) {
            Selection::Keys(found) => return Ok(found),
            Selection::WrongAlgorithm => return Err(IdentityError::Invalid("bad_signature")),
            Selection::NotFound if !self.fetches_keys() => {
                return Err(IdentityError::Invalid("unknown_key"));
            }
            Selection::NotFound => {}
        }
        let outcome = self
            .http
            .wait(self.refetch(generation, true))
            .unwrap_or_else(Refetch::Failed);
        match outcome {
            Refetch::Failed(cause) => Err(self.unavailable(&cause)),
            Refetch::Throttled if generation == 0 => {
                let cause = self.state().last_failure.clone().unwrap_or_default();
                Err(self.unavailable(&cause))
            }
            Refetch::Throttled => Err(IdentityError::Invalid("unknown_key")),
            Refetch::Updated => match Arc::clone(&self.state().keys).select(kid, algorithm) {
                Selection::Keys(found) => Ok(found),
                Selection::WrongAlgorithm => Err(IdentityError::Invalid("bad_signature")),
                Selection::NotFound => Err(IdentityError::Invalid("unknown_key")),
            },
        }
    }

    fn unavailable(&self, cause: &str) -> IdentityError {
        IdentityError::Unavailable(format!(
            "issuer {}: the signing keys could not be fetched: {cause}",
            self.config.name
        ))
    }

    /// Fetches the keys unless someone else did since `seen` (a generation). A fetch a
    /// token asks for (`demand`) is refused within [`REFETCH_INTERVAL`] of the last one.
    async fn refetch(&self, seen: u64, demand: bool) -> Refetch {
        let _one_at_a_time = self.fetching.lock().await;
        if self.state().generation != seen {
            return Refetch::Updated;
        }
        if demand {
            let now = self.clock.monotonic();
            let mut state = self.state();
            if state
                .last_demand
                .is_some_and(|last| now.saturating_sub(last) < REFETCH_INTERVAL)
            {
                return Refetch::Throttled;
            }
            state.last_demand = Some(now);
        }
        match self.fetch_keys().await {
            Ok(keys) => {
                let mut state = self.state();
                tracing::debug!(issuer = %self.config.name, keys = keys.len(), "signing keys fetched");
                state.keys = Arc::new(keys);
                state.generation += 1;
                state.last_failure = None;
                Refetch::Updated
            }
            Err(cause) => {
                tracing::warn!(
                    issuer = %self.config.name,
                    "cannot fetch the signing keys (the last keys that worked are kept): {cause}"
                );
                self.state().last_failure = Some(cause.clone());
                Refetch::Failed(cause)
            }
        }
    }

    /// The key set, from the configured or discovered JWKS URL.
    async fn fetch_keys(&self) -> Result<KeySet, String> {
        // Read apart from the match: the state's lock must not be held across a wait.
        let known = self.state().jwks_uri.clone();
        let uri = match known {
            Some(uri) => uri,
            None => {
                self.discover().await?;
                self.state().jwks_uri.clone().ok_or(
                    "the provider's metadata has no jwks_uri; set `jwks_uri` or `jwks_file`",
                )?
            }
        };
        KeySet::parse(&self.http.get_json(&uri).await?)
            .map_err(|e| format!("the key set at {uri}: {e}"))
    }

    /// The introspection endpoint: configured, or from the provider's metadata (read
    /// now when it has not been yet). Waits at most the fetch deadline.
    pub(super) fn introspection_endpoint(&self) -> Result<String, String> {
        self.endpoint(
            |state| &state.introspection_endpoint,
            "the provider's metadata has no introspection_endpoint; set \
             `introspection.endpoint`",
        )
    }

    /// The authorization endpoint of sign-in: configured, or from the provider's metadata
    /// (read now when it has not been yet). Waits at most the fetch deadline.
    pub(super) fn authorization_endpoint(&self) -> Result<String, String> {
        self.endpoint(
            |state| &state.authorization_endpoint,
            "the provider's metadata has no authorization_endpoint; set \
             `login.authorization_endpoint`",
        )
    }

    /// The token endpoint of sign-in: configured, or from the provider's metadata (read
    /// now when it has not been yet). Waits at most the fetch deadline.
    pub(super) fn token_endpoint(&self) -> Result<String, String> {
        self.endpoint(
            |state| &state.token_endpoint,
            "the provider's metadata has no token_endpoint; set `login.token_endpoint`",
        )
    }

    /// An endpoint `field` of the state: known, or discovered now; `missing` when the
    /// metadata has none.
    fn endpoint(
        &self,
        field: fn(&State) -> &Option<String>,
        missing: &str,
    ) -> Result<String, String> {
        if let Some(endpoint) = field(&self.state()).clone() {
            return Ok(endpoint);
        }
        if !self.state().metadata_read {
            self.http.wait(self.discover())??;
        }
        field(&self.state())
            .clone()
            .ok_or_else(|| missing.to_owned())
    }

    /// Reads the provider's metadata: OpenID Connect discovery, else (unless the preset
    /// says the provider has none) the RFC 8414 document.
    async fn discover(&self) -> Result<(), String> {
        let (openid, oauth) = metadata_urls(&self.config.issuer);
        let metadata = match self.http.get_json(&openid).await {
            Ok(metadata) => metadata,
            Err(first) => match (self.config.discovery, oauth) {
                (Discovery::OpenIdThenOAuth, Some(oauth)) => self
                    .http
                    .get_json(&oauth)
                    .await
                    .map_err(|second| format!("{first}; {second}"))?,
                _ => return Err(first),
            },
        };
        self.take_metadata(&metadata)
    }

    /// Keeps the endpoints of `metadata` after checking it speaks for this issuer.
    fn take_metadata(&self, metadata: &Value) -> Result<(), String> {
        let said = metadata.get("issuer").and_then(Value::as_str);
        if said != Some(self.config.issuer.as_str()) {
            return Err(format!(
                "the provider's metadata names the issuer {:?}, not {:?}: set `issuer` (or \
                 `tenant`) to the value the provider uses",
                said.unwrap_or_default(),
                self.config.issuer
            ));
        }
        let endpoint = |name: &str| -> Result<Option<String>, String> {
            match metadata.get(name).and_then(Value::as_str) {
                None => Ok(None),
                Some(url) if is_trusted_url(url) => Ok(Some(url.to_owned())),
                Some(url) => Err(format!(
                    "the provider's metadata gives {name} {url:?}, which is neither https:// \
                     nor on a loopback host"
                )),
            }
        };
        let (jwks_uri, introspection) =
            (endpoint("jwks_uri")?, endpoint("introspection_endpoint")?);
        // Sign-in's endpoints are read only for an issuer with `login`: an endpoint it does
        // not use must not stop its keys from being found.
        let (authorization, token) = if self.config.login.is_some() {
            (
                endpoint("authorization_endpoint")?,
                endpoint("token_endpoint")?,
            )
        } else {
            (None, None)
        };
        let mut state = self.state();
        state.metadata_read = true;
        state.jwks_uri = state.jwks_uri.take().or(jwks_uri);
        state.introspection_endpoint = state.introspection_endpoint.take().or(introspection);
        state.authorization_endpoint = state.authorization_endpoint.take().or(authorization);
        state.token_endpoint = state.token_endpoint.take().or(token);
        Ok(())
    }

    /// The first fetch, at start: the keys (when they come from the network), and the
    /// metadata when introspection or sign-in needs an endpoint. Failures are logged, not
    /// returned.
    pub(super) async fn first_fetch(&self) {
        if self.fetches_keys() {
            self.refetch(0, false).await;
        }
        let needs = {
            let state = self.state();
            let introspection =
                self.config.introspection.is_some() && state.introspection_endpoint.is_none();
            let login = self.config.login.is_some()
                && (state.authorization_endpoint.is_none() || state.token_endpoint.is_none());
            match (introspection, login) {
                _ if state.metadata_read => None,
                (true, _) => Some("its introspection endpoint"),
                (false, true) => Some("its sign-in endpoints"),
                (false, false) => None,
            }
        };
        if let Some(what) = needs
            && let Err(cause) = self.discover().await
        {
            tracing::warn!(
                issuer = %self.config.name,
                "cannot read the provider's metadata for {what}: {cause}"
            );
        }
    }

    /// Refreshes the keys every `refresh_secs`; after a failure, retries sooner (15 s,
    /// doubling up to the refresh period).
    pub(super) async fn keep_fresh(self: Arc<Self>) {
        let period = self.config.refresh;
        let mut retry = FIRST_RETRY.min(period);
        loop {
            let failing = self.state().last_failure.is_some();
            tokio::time::sleep(if failing { retry } else { period }).await;
            let seen = self.state().generation;
            match self.refetch(seen, false).await {
                Refetch::Failed(_) => retry = (retry * 2).min(period),
                Refetch::Updated | Refetch::Throttled => retry = FIRST_RETRY.min(period),
            }
        }
    }
}

/// OpenID Connect discovery's URL for `issuer`, and RFC 8414's (`None` if the issuer is
/// not a URL).
fn metadata_urls(issuer: &str) -> (String, Option<String>) {
    let openid = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    let oauth = url::Url::parse(issuer).ok().map(|url| {
        let path = url.path().trim_end_matches('/');
        format!(
            "{}/.well-known/oauth-authorization-server{path}",
            url.origin().ascii_serialization()
        )
    });
    (openid, oauth)
}

/// A JWKS file of an offline installation.
fn read_key_file(path: &std::path::Path) -> Result<KeySet, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    let document: Value =
        serde_json::from_str(&text).map_err(|e| format!("it is not JSON: {e}"))?;
    KeySet::parse(&document)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_urls_follow_openid_discovery_and_rfc_8414() {
        let (openid, oauth) = metadata_urls("https://idp.example.com/realms/acme");
        assert_eq!(
            openid,
            "https://idp.example.com/realms/acme/.well-known/openid-configuration"
        );
        assert_eq!(
            oauth.as_deref(),
            Some("https://idp.example.com/.well-known/oauth-authorization-server/realms/acme")
        );
        let (openid, oauth) = metadata_urls("https://tenant.auth0.com/");
        assert_eq!(
            openid,
            "https://tenant.auth0.com/.well-known/openid-configuration"
        );
        assert_eq!(
            oauth.as_deref(),
            Some("https://tenant.auth0.com/.well-known/oauth-authorization-server")
        );
    }
}
