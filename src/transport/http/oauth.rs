//! OAuth 2.1 for machine clients: Protected Resource Metadata (RFC 9728), Authorization
//! Server Metadata (RFC 8414) and the token endpoint with the `client_credentials` grant.
//!
//! Errors here are RFC 6749 bodies (`{"error": "invalid_client", …}`), not JSON-RPC: the
//! token endpoint is not an MCP endpoint. It has its own rate limit, independent of the MCP
//! buckets: every request counts against its source, and only requests whose client secret
//! was right count against their client id. Wrong secrets count against the source's
//! authentication-failure throttle (the one bearer tokens use), never against the client:
//! a stranger cannot lock a client out by guessing at its id.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

use crate::catalog::{ErrorKind, McpError};
use crate::clock::Clock;
use crate::config::Locale;
use crate::guards::auth::OAuthClient;
use crate::protocol::dispatch::Server;
use crate::transport::http::HttpHead;

/// Lifetime of an issued access token.
pub const ACCESS_TOKEN_TTL: Duration = Duration::from_secs(3600);
/// Token requests allowed per source per minute, and authenticated ones per client id.
pub const TOKEN_REQUESTS_PER_MINUTE: u32 = 30;
/// Sources tracked by the token-endpoint limiter at most.
const MAX_TRACKED: usize = 10_000;

/// The built-in tools' scopes, in the order the metadata documents advertise them (by
/// resource, then read before write). A unit test holds the list to exactly the scopes the
/// invoicing tools declare, so it cannot drift from them.
pub const SCOPES: &[&str] = &[
    "clients:read",
    "clients:write",
    "clients:delete",
    "invoices:read",
    "invoices:write",
    "invoices:void",
    "invoices:send",
    "payments:write",
    "reports:generate",
];

/// The scopes the metadata names: the built-in ones, then those of the backend tools
/// (`extra`), each once.
fn supported(extra: &[String]) -> Vec<String> {
    let mut all: Vec<String> = SCOPES.iter().map(|s| (*s).to_owned()).collect();
    for scope in extra {
        if !all.contains(scope) {
            all.push(scope.clone());
        }
    }
    all
}

/// RFC 9728 metadata for the MCP endpoint at `base`/mcp; `extra` are the scopes of the
/// backend tools. The authorization servers are the company's identity providers
/// (`issuers`, from `[[auth.issuers]]`), then tollgate's own token endpoint.
pub fn protected_resource_metadata(base: &str, extra: &[String], issuers: &[String]) -> Value {
    let mut servers: Vec<&str> = issuers.iter().map(String::as_str).collect();
    servers.push(base);
    json!({
        "resource": format!("{base}/mcp"),
        "authorization_servers": servers,
        "scopes_supported": supported(extra),
        "bearer_methods_supported": ["header"],
        "resource_name": "tollgate",
    })
}

/// RFC 8414 metadata of the built-in authorization server; `extra` are the scopes of the
/// backend tools.
pub fn authorization_server_metadata(base: &str, extra: &[String]) -> Value {
    json!({
        "issuer": base,
        "token_endpoint": format!("{base}/oauth/token"),
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "scopes_supported": supported(extra),
        "response_types_supported": [],
    })
}

/// An RFC 6749 error: status and the `error` code.
struct OAuthError {
    status: u16,
    body: Value,
    /// Seconds until a throttled client may ask again (`Retry-After`).
    retry_after: Option<u64>,
}

impl OAuthError {
    fn new(status: u16, error: &'static str, description: &'static str) -> OAuthError {
        OAuthError {
            status,
            body: json!({ "error": error, "error_description": description }),
            retry_after: None,
        }
    }

    /// A refusal for too many requests, from the catalog's `rate_limited` entry: its
    /// `code` is the RFC 6749 `error`, its hint the description, and its envelope fields
    /// (`retry_after`, `bucket`, `limit`, `reset`) ride along.
    fn throttled(err: &McpError, locale: Locale) -> OAuthError {
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

    /// The status, headers (`Retry-After` on 429, a Basic challenge on 401) and body.
    fn into_response(self) -> (u16, Vec<(String, String)>, Value) {
        let mut headers = Vec::new();
        if self.status == 401 {
            headers.push((
                "WWW-Authenticate".to_owned(),
                "Basic realm=\"tollgate\"".to_owned(),
            ));
        }
        if let Some(wait) = self.retry_after {
            headers.push(("Retry-After".to_owned(), wait.to_string()));
        }
        (self.status, headers, self.body)
    }
}

/// The token endpoint and its rate limiter.
pub struct Endpoints {
    /// Per source: the start of its window ([`Clock::monotonic`]) and its requests in it.
    windows: Mutex<HashMap<String, (Duration, u32)>>,
    clock: Clock,
}

impl Endpoints {
    /// A token endpoint with empty counters, whose windows follow `clock`.
    pub fn new(clock: Clock) -> Endpoints {
        Endpoints {
            windows: Mutex::new(HashMap::new()),
            clock,
        }
    }

    /// Handles `POST /oauth/token` from `source` (`http:<client address>`, as the MCP
    /// endpoint's throttle knows it): returns status, extra headers and the JSON body.
    pub fn token(
        &self,
        server: &Server,
        head: &HttpHead,
        source: &str,
        body: &[u8],
    ) -> (u16, Vec<(String, String)>, Value) {
        match self.grant(server, head, source, body) {
            Ok(token) => (200, Vec::new(), token),
            Err(err) => err.into_response(),
        }
    }

    /// The token request: the source's limit, the request's shape, the client secret
    /// (failures charged to the source), the client's limit, then the issued token.
    fn grant(
        &self,
        server: &Server,
        head: &HttpHead,
        source: &str,
        body: &[u8],
    ) -> Result<Value, OAuthError> {
        self.admit(&format!("source:{source}"), server.locale())?;
        let form: HashMap<String, String> = form_urlencoded::parse(body).into_owned().collect();
        let credentials = client_credentials(head, &form)?;
        if form.get("grant_type").map(String::as_str) != Some("client_credentials") {
            return Err(OAuthError::new(
                400,
                "unsupported_grant_type",
                "Only the client_credentials grant is supported.",
            ));
        }
        let client = authenticate_client(server, &credentials, source)?;
        self.admit(&format!("client:{}", client.client_id), server.locale())?;
        issue(server, &form, client)
    }

    /// Charges one request to `source`'s window; over the limit, the catalog's
    /// `rate_limited` in an RFC 6749 body.
    fn admit(&self, source: &str, locale: Locale) -> Result<(), OAuthError> {
        let Some(wait) = self.charge(source) else {
            return Ok(());
        };
        let reset = self
            .clock
            .unix_secs()
            .saturating_add(i64::try_from(wait).unwrap_or(60));
        let err = McpError::rate_limited(
            "oauth_token",
            u64::from(TOKEN_REQUESTS_PER_MINUTE),
            u64::try_from(reset).unwrap_or(0),
            wait,
        );
        Err(OAuthError::throttled(&err, locale))
    }

    /// Counts one request from `source`; `Some(seconds)` when over the limit.
    fn charge(&self, source: &str) -> Option<u64> {
        let now = self.clock.monotonic();
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if windows.len() >= MAX_TRACKED {
            windows.retain(|_, (start, _)| now.saturating_sub(*start) < Duration::from_secs(60));
        }
        let entry = windows.entry(source.to_owned()).or_insert((now, 0));
        if now.saturating_sub(entry.0) >= Duration::from_secs(60) {
            *entry = (now, 0);
        }
        entry.1 += 1;
        (entry.1 > TOKEN_REQUESTS_PER_MINUTE).then(|| {
            60u64
                .saturating_sub(now.saturating_sub(entry.0).as_secs())
                .max(1)
        })
    }
}

/// The client id and secret, from HTTP Basic or from the form (never both).
fn client_credentials(
    head: &HttpHead,
    form: &HashMap<String, String>,
) -> Result<(String, String), OAuthError> {
    let invalid_client = OAuthError::new(401, "invalid_client", "Client authentication failed.");
    // The scheme is case-insensitive (RFC 9110 §11.1).
    let basic = head
        .header("authorization")
        .and_then(|v| v.trim_start().split_once([' ', '\t']))
        .and_then(|(scheme, rest)| scheme.eq_ignore_ascii_case("basic").then_some(rest));
    let from_form = (form.get("client_id"), form.get("client_secret"));
    match (basic, from_form) {
        (Some(_), (Some(_), _) | (_, Some(_))) => Err(OAuthError::new(
            400,
            "invalid_request",
            "Authenticate the client either with HTTP Basic or in the form, not both.",
        )),
        (Some(encoded), _) => decode_basic(encoded).ok_or(invalid_client),
        (None, (Some(id), Some(secret))) => Ok((id.clone(), secret.clone())),
        (None, _) => Err(invalid_client),
    }
}

fn decode_basic(encoded: &str) -> Option<(String, String)> {
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (id, secret) = text.split_once(':')?;
    let decode = |s: &str| {
        form_urlencoded::parse(format!("v={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
    };
    Some((decode(id)?, decode(secret)?))
}

/// The RFC 6749 answer to a refused token request.
fn token_refusal(failure: TokenFailure, locale: Locale) -> OAuthError {
    match failure {
        TokenFailure::InvalidClient => {
            OAuthError::new(401, "invalid_client", "Client authentication failed.")
        }
        TokenFailure::InvalidScope => OAuthError::new(
            400,
            "invalid_scope",
            "The requested scope is not a subset of the client's allowed scopes.",
        ),
        TokenFailure::Unavailable => OAuthError::new(
            503,
            "temporarily_unavailable",
            "The server cannot issue tokens right now; retry with backoff.",
        ),
        TokenFailure::Throttled(err) => OAuthError::throttled(&err, locale),
    }
}

/// Verifies the client secret (argon2, throttled per `source` like bearer tokens).
fn authenticate_client(
    server: &Server,
    (client_id, secret): &(String, String),
    source: &str,
) -> Result<OAuthClient, OAuthError> {
    let secret = crate::guards::auth::Secret::new(secret.clone());
    server
        .guards()
        .authenticator()
        .verify_client_secret(client_id, &secret, source)
        .map_err(|err| {
            let failure = match err.kind() {
                ErrorKind::BackendUnavailable | ErrorKind::InternalError => {
                    TokenFailure::Unavailable
                }
                ErrorKind::RateLimited => TokenFailure::Throttled(err),
                _ => TokenFailure::InvalidClient,
            };
            token_refusal(failure, server.locale())
        })
}

fn issue(
    server: &Server,
    form: &HashMap<String, String>,
    client: OAuthClient,
) -> Result<Value, OAuthError> {
    let requested: Option<Vec<String>> = form
        .get("scope")
        .map(|s| s.split_whitespace().map(str::to_owned).collect());
    let issued = issue_client_token(server, client, requested.as_deref())
        .map_err(|failure| token_refusal(failure, server.locale()))?;
    Ok(json!({
        "access_token": issued.token,
        "token_type": "Bearer",
        "expires_in": ACCESS_TOKEN_TTL.as_secs(),
        "scope": issued.scopes.join(" "),
    }))
}

/// Why a token request was refused.
pub enum TokenFailure {
    /// Unknown or revoked client, or a wrong secret.
    InvalidClient,
    /// A requested scope the client is not allowed.
    InvalidScope,
    /// The database cannot be used right now.
    Unavailable,
    /// Too many failed client authentications from this source (the authenticator's
    /// `rate_limited`, `bucket: "auth"`).
    Throttled(McpError),
}

/// An issued access token.
pub struct IssuedToken {
    /// The bearer token (shown once).
    pub token: String,
    /// The scopes it carries.
    pub scopes: Vec<String>,
}

/// Issues an authenticated client a token whose scopes are the requested subset of its
/// allowed scopes.
fn issue_client_token(
    server: &Server,
    client: OAuthClient,
    requested: Option<&[String]>,
) -> Result<IssuedToken, TokenFailure> {
    let scopes = requested.map(<[String]>::to_vec).unwrap_or_default();
    if !scopes
        .iter()
        .all(|s| crate::guards::auth::grants(&client.allowed_scopes, s))
    {
        return Err(TokenFailure::InvalidScope);
    }
    let issued = crate::guards::auth::issue_access_token(
        server.store(),
        &client,
        &scopes,
        ACCESS_TOKEN_TTL,
        server.clock(),
    )
    .map_err(|e| {
        tracing::warn!(error = %e, "cannot issue an access token");
        TokenFailure::Unavailable
    })?;
    let scopes = if scopes.is_empty() {
        client.allowed_scopes
    } else {
        scopes
    };
    Ok(IssuedToken {
        token: issued.token.expose().to_owned(),
        scopes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_decode_with_percent_escapes() {
        use base64::Engine as _;
        let encoded = base64::engine::general_purpose::STANDARD.encode("my%20client:s%3Acret");
        assert_eq!(
            decode_basic(&encoded),
            Some(("my client".to_owned(), "s:cret".to_owned()))
        );
        assert_eq!(decode_basic("!!"), None);
    }

    #[test]
    fn the_token_limiter_refuses_past_the_limit_until_a_minute_after_the_first_request() {
        let manual = crate::clock::ManualClock::at_unix_secs(1_800_000_000);
        let endpoints = Endpoints::new(manual.clock());
        for _ in 0..TOKEN_REQUESTS_PER_MINUTE {
            assert_eq!(endpoints.charge("client:a"), None);
            manual.advance(Duration::from_secs(1));
        }
        // 30 s after the first request: 30 s to wait.
        assert_eq!(endpoints.charge("client:a"), Some(30));
        assert_eq!(endpoints.charge("client:b"), None);
        manual.advance(Duration::from_millis(29_999));
        assert_eq!(endpoints.charge("client:a"), Some(1));
        manual.advance(Duration::from_millis(1));
        assert_eq!(endpoints.charge("client:a"), None);
    }

    #[test]
    fn throttled_token_requests_answer_the_catalog_entry() {
        let manual = crate::clock::ManualClock::at_unix_secs(1_800_000_000);
        let endpoints = Endpoints::new(manual.clock());
        manual.advance(Duration::from_secs(20));
        for _ in 0..TOKEN_REQUESTS_PER_MINUTE {
            assert!(endpoints.admit("peer:a", Locale::En).is_ok());
        }
        let Err(refusal) = endpoints.admit("peer:a", Locale::Es) else {
            panic!("the request over the limit was admitted");
        };
        let (status, headers, body) = refusal.into_response();
        assert_eq!(status, 429);
        assert_eq!(body["error"], "rate_limited");
        assert_eq!(body["code"], "rate_limited");
        assert_eq!(body["error_code"], 3001);
        assert_eq!(body["retryable"], true);
        assert_eq!(body["bucket"], "oauth_token");
        assert_eq!(body["limit"], TOKEN_REQUESTS_PER_MINUTE);
        assert_eq!(body["error_description"], body["hint"]);
        assert!(
            body["hint"]
                .as_str()
                .is_some_and(|h| h.starts_with("Demasiadas"))
        );
        // Every request came at one instant: a whole minute to wait, from the clock's now.
        assert_eq!(body["retry_after"], 60);
        assert_eq!(body["reset"], 1_800_000_080);
        assert!(headers.contains(&("Retry-After".to_owned(), "60".to_owned())));
    }

    #[test]
    fn metadata_points_at_this_server() {
        let extra = ["crm:read".to_owned(), "invoices:read".to_owned()];
        let prm = protected_resource_metadata("http://127.0.0.1:8787", &extra, &[]);
        assert_eq!(prm["resource"], "http://127.0.0.1:8787/mcp");
        assert_eq!(prm["authorization_servers"][0], "http://127.0.0.1:8787");
        let scopes = prm["scopes_supported"].as_array().expect("scopes");
        assert_eq!(scopes.len(), SCOPES.len() + 1);
        assert_eq!(scopes[SCOPES.len()], "crm:read");
        let asm = authorization_server_metadata("http://127.0.0.1:8787", &[]);
        assert_eq!(asm["token_endpoint"], "http://127.0.0.1:8787/oauth/token");
    }

    #[test]
    fn the_advertised_scopes_are_exactly_the_built_in_tools_scopes() {
        let mut declared: Vec<_> = crate::tools::invoicing::tools()
            .iter()
            .map(|t| t.spec().scope.clone())
            .collect();
        declared.sort_unstable();
        declared.dedup();
        let mut advertised = SCOPES.to_vec();
        advertised.sort_unstable();
        assert_eq!(advertised, declared);
    }
}
