//! What every endpoint of the authorization server shares: the [`AuthorizationServer`]
//! itself, the request context handed in by the transport, the answers handed back
//! ([`Reply`], [`Page`]), RFC 6749 errors, random values and digests.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::catalog::McpError;
use crate::clock::Clock;
use crate::config::{ClientDocumentsConfig, Locale, OAuthServerConfig};
use crate::guards::auth::Authenticator;
use crate::identity::Identity;
use crate::store::Store;

use super::client_document::{DocumentFetcher, DocumentSettings};

/// The cookie that ties an authorization request to the browser that started it.
pub const REQUEST_COOKIE: &str = "tollgate_oauth";

/// What the transport knows of one request to an endpoint of the authorization server.
pub struct Context<'a> {
    /// The issuer: tollgate's public base URL, without a trailing slash.
    pub issuer: &'a str,
    /// Who is asking (`http:<address>`), as the throttles count it.
    pub source: &'a str,
    /// The authenticator (personal keys, client secrets, the identity providers).
    pub auth: &'a Authenticator,
    /// The language of the pages and error descriptions.
    pub locale: Locale,
    /// Every scope tollgate knows: the built-in tools' and the backends'.
    pub scopes: &'a [String],
    /// Request headers, names lowercase.
    pub headers: &'a [(String, String)],
}

impl Context<'_> {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of cookie `name`.
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == "cookie")
            .flat_map(|(_, v)| v.split(';'))
            .find_map(|pair| {
                let (n, v) = pair.trim().split_once('=')?;
                (n == name).then_some(v)
            })
    }

    /// The protected resource: tollgate's MCP endpoint.
    pub fn resource(&self) -> String {
        format!("{}/mcp", self.issuer)
    }

    /// Whether a form post came from a page of this very origin: `Origin` (when sent)
    /// is the issuer's origin, and the browser did not call it cross-site.
    pub fn same_origin_post(&self) -> bool {
        let origin_ok = match self.header("origin") {
            Some(origin) => origin_of(self.issuer).is_some_and(|o| o == origin),
            None => true,
        };
        let site_ok = !matches!(
            self.header("sec-fetch-site"),
            Some("cross-site" | "same-site")
        );
        origin_ok && site_ok
    }
}

/// The origin (`scheme://host[:port]`) of `url`.
pub fn origin_of(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    match parsed.origin() {
        url::Origin::Tuple(..) => Some(parsed.origin().ascii_serialization()),
        url::Origin::Opaque(_) => None,
    }
}

/// A page the authorization server shows a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Page {
    /// Sign in with a personal key.
    SignIn {
        /// The authorization request.
        request: String,
        /// Its form token.
        csrf: String,
        /// The client's name, or its id.
        client: String,
        /// Why the last attempt failed, if it did.
        failed: bool,
    },
    /// Consent to a client.
    Consent {
        /// The authorization request.
        request: String,
        /// Its form token.
        csrf: String,
        /// The client's name, or its id.
        client: String,
        /// The client's id (a URL for a client metadata document).
        client_id: String,
        /// The host the person is sent back to.
        redirect_host: String,
        /// Whether every redirect of the client is on this computer (loopback): a local
        /// application, or a page pretending to be one.
        loopback_only: bool,
        /// Who signed in.
        person: String,
        /// The scopes the client asks for that the person holds (what it will get).
        granted: Vec<String>,
        /// The scopes it asks for that the person does not hold.
        not_held: Vec<String>,
    },
    /// The request cannot go on and there is nowhere safe to send the person back to.
    Error {
        /// A short machine-readable word (also the page's heading key).
        error: &'static str,
        /// What happened, for a person.
        description: String,
    },
}

/// What an endpoint answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A JSON body (metadata, the token endpoint, registration, errors).
    Json {
        /// HTTP status.
        status: u16,
        /// The body.
        body: Value,
        /// Extra headers.
        headers: Vec<(String, String)>,
    },
    /// A redirect (302 Found) to `location`.
    Redirect {
        /// Where to.
        location: String,
        /// A `Set-Cookie` value, if any.
        cookie: Option<String>,
    },
    /// A page, with the origins its forms may lead to besides this one (a consent's
    /// answer redirects to the client).
    Page {
        /// HTTP status.
        status: u16,
        /// The page.
        page: Page,
        /// A `Set-Cookie` value, if any.
        cookie: Option<String>,
        /// Origins (or schemes) the page's forms may be redirected to.
        form_targets: Vec<String>,
    },
}

impl Reply {
    /// A JSON answer without extra headers.
    pub fn json(status: u16, body: Value) -> Reply {
        Reply::Json {
            status,
            body,
            headers: Vec::new(),
        }
    }

    /// An error page.
    pub fn error_page(status: u16, error: &'static str, description: impl Into<String>) -> Reply {
        Reply::Page {
            status,
            page: Page::Error {
                error,
                description: description.into(),
            },
            cookie: None,
            form_targets: Vec::new(),
        }
    }
}

/// An RFC 6749 error of the token, revocation or registration endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct OAuthError {
    /// HTTP status.
    pub status: u16,
    /// The body: `error`, `error_description`, and any catalog fields.
    pub body: Value,
    /// Seconds until a throttled client may ask again.
    pub retry_after: Option<u64>,
}

impl OAuthError {
    /// An error with `status`, the RFC's `error` code and a description.
    pub fn new(status: u16, error: &str, description: impl Into<String>) -> OAuthError {
        OAuthError {
            status,
            body: json!({ "error": error, "error_description": description.into() }),
            retry_after: None,
        }
    }

    /// A refusal for too many requests, from the catalog's `rate_limited` entry: its
    /// `code` is the RFC 6749 `error`, its hint the description, and its envelope fields
    /// (`retry_after`, `bucket`, `limit`, `reset`) ride along.
    pub fn throttled(err: &McpError, locale: Locale) -> OAuthError {
        let mut body = err.envelope(locale);
        if let Value::Object(map) = &mut body {
            map.insert("error".into(), json!(err.kind().spec().code));
            map.insert("error_description".into(), json!(err.hint(locale)));
        }
        OAuthError {
            status: 429,
            body,
            retry_after: err.fields().get("retry_after").and_then(Value::as_u64),
        }
    }

    /// The answer: `Retry-After` on 429, a Basic challenge on 401, never cached.
    pub fn into_reply(self) -> Reply {
        let mut headers = vec![("Cache-Control".to_owned(), "no-store".to_owned())];
        if self.status == 401 {
            headers.push((
                "WWW-Authenticate".to_owned(),
                "Basic realm=\"tollgate\"".to_owned(),
            ));
        }
        if let Some(wait) = self.retry_after {
            headers.push(("Retry-After".to_owned(), wait.to_string()));
        }
        Reply::Json {
            status: self.status,
            body: self.body,
            headers,
        }
    }
}

/// 256 random bits, base64url, behind `prefix`; `None` when the system has no randomness.
pub fn random_secret(prefix: &str) -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(format!(
        "{prefix}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    ))
}

/// A random id: 128 bits, lowercase hex.
pub fn random_id(prefix: &str) -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(format!("{prefix}{}", hex::encode(bytes)))
}

/// Whether two secrets are equal, in time that does not depend on where they differ.
pub fn same_token(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// The S256 PKCE challenge of `verifier` (RFC 7636 §4.2).
pub fn s256(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Per-source fixed windows of one minute (the token and registration endpoints' limits),
/// bounded in the sources they track.
pub struct Windows {
    windows: Mutex<HashMap<String, (Duration, u32)>>,
    clock: Clock,
}

/// Sources a window limiter tracks at most.
const MAX_TRACKED: usize = 10_000;

impl Windows {
    /// Empty windows following `clock`.
    pub fn new(clock: Clock) -> Windows {
        Windows {
            windows: Mutex::new(HashMap::new()),
            clock,
        }
    }

    /// Counts one request of `key`; `Some(seconds to wait)` when it is past `limit`.
    pub fn charge(&self, key: &str, limit: u32) -> Option<u64> {
        let now = self.clock.monotonic();
        let minute = Duration::from_secs(60);
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if windows.len() >= MAX_TRACKED {
            windows.retain(|_, (start, _)| now.saturating_sub(*start) < minute);
        }
        let entry = windows.entry(key.to_owned()).or_insert((now, 0));
        if now.saturating_sub(entry.0) >= minute {
            *entry = (now, 0);
        }
        entry.1 += 1;
        (entry.1 > limit).then(|| {
            60u64
                .saturating_sub(now.saturating_sub(entry.0).as_secs())
                .max(1)
        })
    }

    /// Counts one request of `key` against `limit`; past it, the catalog's
    /// `rate_limited` as an RFC 6749 body naming `bucket`.
    pub fn admit(
        &self,
        key: &str,
        limit: u32,
        bucket: &str,
        locale: Locale,
    ) -> Result<(), OAuthError> {
        let Some(wait) = self.charge(key, limit) else {
            return Ok(());
        };
        let reset = self
            .clock
            .unix_secs()
            .saturating_add(i64::try_from(wait).unwrap_or(60));
        let err = McpError::rate_limited(
            bucket,
            u64::from(limit),
            u64::try_from(reset).unwrap_or(0),
            wait,
        );
        Err(OAuthError::throttled(&err, locale))
    }
}

/// The fetcher's settings from `[oauth_server.client_documents]`.
pub fn document_settings(config: &ClientDocumentsConfig) -> DocumentSettings {
    DocumentSettings {
        max_bytes: usize::try_from(config.max_bytes).unwrap_or(usize::MAX),
        timeout: config.timeout,
        allow_hosts: config.allow_hosts.clone(),
        ca_file: config.ca_file.clone(),
        ..DocumentSettings::default()
    }
}

/// The front door's answers counted by `(endpoint, outcome)` (see `outcomes`).
#[derive(Default)]
pub struct Outcomes(
    pub(super) Mutex<std::collections::BTreeMap<(&'static str, &'static str), u64>>,
);

/// tollgate's OAuth authorization server: its settings, its store, and what it fetches.
pub struct AuthorizationServer {
    pub(super) config: OAuthServerConfig,
    pub(super) store: Store,
    pub(super) clock: Clock,
    pub(super) identity: Option<std::sync::Arc<Identity>>,
    pub(super) documents: Option<DocumentFetcher>,
    pub(super) windows: Windows,
    pub(super) outcomes: Outcomes,
}

impl AuthorizationServer {
    /// The authorization server of `config` (whether or not it is enabled: the token
    /// endpoint's `client_credentials` grant is served either way). Client metadata
    /// documents are fetched only when enabled and allowed.
    pub fn start(
        config: OAuthServerConfig,
        store: Store,
        clock: Clock,
        identity: Option<std::sync::Arc<Identity>>,
    ) -> Result<AuthorizationServer, String> {
        let documents = if config.enabled && config.client_documents.enabled {
            Some(DocumentFetcher::start(
                document_settings(&config.client_documents),
                clock.clone(),
            )?)
        } else {
            None
        };
        Ok(AuthorizationServer {
            windows: Windows::new(clock.clone()),
            outcomes: Outcomes::default(),
            config,
            store,
            clock,
            identity,
            documents,
        })
    }

    /// Whether the authorization endpoints are served.
    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// The settings.
    pub fn config(&self) -> &OAuthServerConfig {
        &self.config
    }

    /// The identity provider people sign in at, when one has `login`.
    pub(super) fn login_identity(&self) -> Option<&Identity> {
        self.identity
            .as_deref()
            .filter(|identity| identity.login_issuer().is_some())
    }

    /// A `Set-Cookie` value for the request cookie (`max_age` 0 deletes it).
    pub(super) fn request_cookie(&self, ctx: &Context<'_>, value: &str, max_age: u64) -> String {
        let secure = if ctx.issuer.starts_with("https://") {
            "; Secure"
        } else {
            ""
        };
        format!(
            "{REQUEST_COOKIE}={value}; Path=/oauth; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s256_is_the_rfc_7636_example() {
        assert_eq!(
            s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn the_windows_refuse_past_the_limit_until_a_minute_after_the_first_request() {
        let manual = crate::clock::ManualClock::at_unix_secs(1_800_000_000);
        let windows = Windows::new(manual.clock());
        for _ in 0..3 {
            assert_eq!(windows.charge("a", 3), None);
            manual.advance(Duration::from_secs(10));
        }
        assert_eq!(windows.charge("a", 3), Some(30));
        assert_eq!(windows.charge("b", 3), None);
        manual.advance(Duration::from_secs(30));
        assert_eq!(windows.charge("a", 3), None);
        let refused = windows
            .admit("a", 0, "oauth_register", Locale::En)
            .expect_err("over");
        assert_eq!(refused.status, 429);
        assert_eq!(refused.body["error"], "rate_limited");
        assert_eq!(refused.body["bucket"], "oauth_register");
    }
}
