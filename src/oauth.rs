//! OAuth 2.1 for machine clients: Protected Resource Metadata (RFC 9728), Authorization
//! Server Metadata (RFC 8414) and the token endpoint with the `client_credentials` grant.
//!
//! Errors here are RFC 6749 bodies (`{"error": "invalid_client", …}`), not JSON-RPC: the
//! token endpoint is not an MCP endpoint. It has its own rate limit per client id and per
//! peer, independent of the MCP buckets.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::catalog::ErrorKind;
use crate::dispatch::Server;
use crate::http::HttpHead;

/// Lifetime of an issued access token.
pub const ACCESS_TOKEN_TTL: Duration = Duration::from_secs(3600);
/// Token requests allowed per client id (and per peer address) per minute.
pub const TOKEN_REQUESTS_PER_MINUTE: u32 = 30;
/// Sources tracked by the token-endpoint limiter at most.
const MAX_TRACKED: usize = 10_000;

/// The scopes a credential can hold (advertised in the metadata documents).
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

/// RFC 9728 metadata for the MCP endpoint at `base`/mcp.
pub fn protected_resource_metadata(base: &str) -> Value {
    json!({
        "resource": format!("{base}/mcp"),
        "authorization_servers": [base],
        "scopes_supported": SCOPES,
        "bearer_methods_supported": ["header"],
        "resource_name": "tollgate",
    })
}

/// RFC 8414 metadata of the built-in authorization server.
pub fn authorization_server_metadata(base: &str) -> Value {
    json!({
        "issuer": base,
        "token_endpoint": format!("{base}/oauth/token"),
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "scopes_supported": SCOPES,
        "response_types_supported": [],
    })
}

/// An RFC 6749 error: status and the `error` code.
struct OAuthError {
    status: u16,
    error: &'static str,
    description: &'static str,
}

impl OAuthError {
    const fn new(status: u16, error: &'static str, description: &'static str) -> OAuthError {
        OAuthError {
            status,
            error,
            description,
        }
    }

    fn body(&self) -> Value {
        json!({ "error": self.error, "error_description": self.description })
    }
}

/// The token endpoint and its rate limiter.
pub struct Endpoints {
    windows: Mutex<HashMap<String, (Instant, u32)>>,
}

impl Default for Endpoints {
    fn default() -> Self {
        Self::new()
    }
}

impl Endpoints {
    /// A token endpoint with empty counters.
    pub fn new() -> Endpoints {
        Endpoints {
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// Handles `POST /oauth/token`: returns status, extra headers and the JSON body.
    pub fn token(
        &self,
        server: &Server,
        head: &HttpHead,
        body: &[u8],
    ) -> (u16, Vec<(String, String)>, Value) {
        let peer = head
            .peer
            .map_or_else(|| "unknown".to_owned(), |p| p.ip().to_string());
        if let Some(wait) = self.charge(&format!("peer:{peer}")) {
            return rate_limited(wait);
        }
        let form: HashMap<String, String> = form_urlencoded::parse(body).into_owned().collect();
        let credentials = match client_credentials(head, &form) {
            Ok(credentials) => credentials,
            Err(err) => return (err.status, Vec::new(), err.body()),
        };
        if let Some(wait) = self.charge(&format!("client:{}", credentials.0)) {
            return rate_limited(wait);
        }
        match issue(server, &form, &credentials, &format!("http:{peer}")) {
            Ok(token) => (200, Vec::new(), token),
            Err(err) => {
                let headers = if err.status == 401 {
                    vec![(
                        "WWW-Authenticate".to_owned(),
                        "Basic realm=\"tollgate\"".to_owned(),
                    )]
                } else {
                    Vec::new()
                };
                (err.status, headers, err.body())
            }
        }
    }

    /// Counts one request from `source`; `Some(seconds)` when over the limit.
    fn charge(&self, source: &str) -> Option<u64> {
        let now = Instant::now();
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if windows.len() >= MAX_TRACKED {
            windows.retain(|_, (start, _)| now.duration_since(*start) < Duration::from_secs(60));
        }
        let entry = windows.entry(source.to_owned()).or_insert((now, 0));
        if now.duration_since(entry.0) >= Duration::from_secs(60) {
            *entry = (now, 0);
        }
        entry.1 += 1;
        (entry.1 > TOKEN_REQUESTS_PER_MINUTE).then(|| {
            60u64
                .saturating_sub(now.duration_since(entry.0).as_secs())
                .max(1)
        })
    }
}

fn rate_limited(wait: u64) -> (u16, Vec<(String, String)>, Value) {
    let body = json!({
        "error": "rate_limited",
        "error_description": "Too many token requests; retry after the number of seconds in retry_after.",
        "retry_after": wait,
    });
    (
        429,
        vec![("Retry-After".to_owned(), wait.to_string())],
        body,
    )
}

/// The client id and secret, from HTTP Basic or from the form (never both).
fn client_credentials(
    head: &HttpHead,
    form: &HashMap<String, String>,
) -> Result<(String, String), OAuthError> {
    let invalid_client = OAuthError::new(401, "invalid_client", "Client authentication failed.");
    let basic = head.header("authorization").and_then(|v| {
        v.strip_prefix("Basic ")
            .or_else(|| v.strip_prefix("basic "))
    });
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

fn issue(
    server: &Server,
    form: &HashMap<String, String>,
    (id, secret): &(String, String),
    source: &str,
) -> Result<Value, OAuthError> {
    if form.get("grant_type").map(String::as_str) != Some("client_credentials") {
        return Err(OAuthError::new(
            400,
            "unsupported_grant_type",
            "Only the client_credentials grant is supported.",
        ));
    }
    let requested: Option<Vec<String>> = form
        .get("scope")
        .map(|s| s.split_whitespace().map(str::to_owned).collect());
    let issued = issue_client_token(server, (id, secret), requested.as_deref(), source).map_err(
        |failure| match failure {
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
            TokenFailure::Throttled => OAuthError::new(
                429,
                "rate_limited",
                "Too many failed client authentications; wait a minute before retrying.",
            ),
        },
    )?;
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
    /// Too many failed client authentications from this source.
    Throttled,
}

/// An issued access token.
pub struct IssuedToken {
    /// The bearer token (shown once).
    pub token: String,
    /// The scopes it carries.
    pub scopes: Vec<String>,
}

/// Authenticates the client (throttled like bearer tokens, argon2 on its secret) and
/// issues a token whose scopes are the requested subset of the client's allowed scopes.
fn issue_client_token(
    server: &Server,
    (client_id, secret): (&str, &str),
    requested: Option<&[String]>,
    source: &str,
) -> Result<IssuedToken, TokenFailure> {
    let secret = crate::auth::Secret::new(secret.to_owned());
    let client = server
        .guards()
        .authenticator()
        .verify_client_secret(client_id, &secret, source)
        .map_err(|err| match err.kind() {
            ErrorKind::BackendUnavailable | ErrorKind::InternalError => TokenFailure::Unavailable,
            ErrorKind::RateLimited => TokenFailure::Throttled,
            _ => TokenFailure::InvalidClient,
        })?;
    let scopes = requested.map(<[String]>::to_vec).unwrap_or_default();
    if !scopes
        .iter()
        .all(|s| crate::auth::grants(&client.allowed_scopes, s))
    {
        return Err(TokenFailure::InvalidScope);
    }
    let issued =
        crate::auth::issue_access_token(server.store(), &client, &scopes, ACCESS_TOKEN_TTL)
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
    fn the_token_limiter_refuses_past_the_limit() {
        let endpoints = Endpoints::new();
        for _ in 0..TOKEN_REQUESTS_PER_MINUTE {
            assert_eq!(endpoints.charge("client:a"), None);
        }
        assert!(
            endpoints
                .charge("client:a")
                .is_some_and(|s| (1..=60).contains(&s))
        );
        assert_eq!(endpoints.charge("client:b"), None);
    }

    #[test]
    fn metadata_points_at_this_server() {
        let prm = protected_resource_metadata("http://127.0.0.1:8787");
        assert_eq!(prm["resource"], "http://127.0.0.1:8787/mcp");
        assert_eq!(prm["authorization_servers"][0], "http://127.0.0.1:8787");
        let asm = authorization_server_metadata("http://127.0.0.1:8787");
        assert_eq!(asm["token_endpoint"], "http://127.0.0.1:8787/oauth/token");
    }
}
