//! `[oauth_server]`: tollgate as the OAuth 2.1 authorization server of MCP hosts (Claude,
//! ChatGPT, editors): where they register or name a client metadata document, people sign
//! in (at the company's identity provider when an issuer has `login`, otherwise with a
//! personal key) and consent, and tokens are issued for tollgate's MCP endpoint.
//!
//! Off by default. When on, `/mcp` is the endpoint hosts sign in to, and API-key clients
//! use `key_path` (default `/mcp-key`), whose OAuth discovery answers nothing: some hosts
//! stop sending a configured header as soon as a server answers discovery.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::in_range;

/// The typed `[oauth_server]` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthServerConfig {
    /// Whether the authorization server is served.
    pub enabled: bool,
    /// The path of the MCP endpoint for API keys and provider tokens, whose OAuth
    /// discovery answers 404.
    pub key_path: String,
    /// Lifetime of an access token.
    pub access_token_ttl: Duration,
    /// Lifetime of a refresh token family, from the code exchange.
    pub refresh_token_ttl: Duration,
    /// Lifetime of an authorization code.
    pub code_ttl: Duration,
    /// How long a person has to sign in and consent.
    pub request_ttl: Duration,
    /// Whether clients may register themselves (RFC 7591).
    pub registration: bool,
    /// The most registered clients kept at once.
    pub max_clients: u64,
    /// Registrations accepted per source and minute.
    pub registrations_per_minute: u32,
    /// A registration that obtained no token is deleted after this long.
    pub unused_registration_ttl: Duration,
    /// `[oauth_server.client_documents]`
    pub client_documents: ClientDocumentsConfig,
}

/// `[oauth_server.client_documents]`: clients whose `client_id` is the HTTPS URL of their
/// metadata document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientDocumentsConfig {
    /// Whether such clients are accepted.
    pub enabled: bool,
    /// The largest document read.
    pub max_bytes: u64,
    /// The deadline of a fetch, whole.
    pub timeout: Duration,
    /// Hosts (`host` or `host:port`) fetched even though they resolve to a private or
    /// loopback address: for testing only.
    pub allow_hosts: Vec<String>,
    /// Extra root certificates (PEM) to trust when fetching: for a test server.
    pub ca_file: Option<PathBuf>,
}

/// Defaults.
pub const DEFAULT_KEY_PATH: &str = "/mcp-key";
const DEFAULT_ACCESS_TTL_SECS: u64 = 900;
const DEFAULT_REFRESH_TTL_DAYS: u64 = 30;
const DEFAULT_CODE_TTL_SECS: u64 = 60;
const DEFAULT_REQUEST_TTL_SECS: u64 = 600;
const DEFAULT_MAX_CLIENTS: u64 = 1000;
const DEFAULT_REGISTRATIONS_PER_MINUTE: u64 = 10;
const DEFAULT_UNUSED_REGISTRATION_HOURS: u64 = 24;
const DEFAULT_DOCUMENT_MAX_BYTES: u64 = 5 * 1024;
const DEFAULT_DOCUMENT_TIMEOUT_MS: u64 = 5_000;

impl Default for OAuthServerConfig {
    fn default() -> Self {
        OAuthServerConfig {
            enabled: false,
            key_path: DEFAULT_KEY_PATH.to_owned(),
            access_token_ttl: Duration::from_secs(DEFAULT_ACCESS_TTL_SECS),
            refresh_token_ttl: Duration::from_secs(DEFAULT_REFRESH_TTL_DAYS * 86_400),
            code_ttl: Duration::from_secs(DEFAULT_CODE_TTL_SECS),
            request_ttl: Duration::from_secs(DEFAULT_REQUEST_TTL_SECS),
            registration: true,
            max_clients: DEFAULT_MAX_CLIENTS,
            registrations_per_minute: DEFAULT_REGISTRATIONS_PER_MINUTE as u32,
            unused_registration_ttl: Duration::from_secs(DEFAULT_UNUSED_REGISTRATION_HOURS * 3600),
            client_documents: ClientDocumentsConfig {
                enabled: true,
                max_bytes: DEFAULT_DOCUMENT_MAX_BYTES,
                timeout: Duration::from_millis(DEFAULT_DOCUMENT_TIMEOUT_MS),
                allow_hosts: Vec::new(),
                ca_file: None,
            },
        }
    }
}

/// `[oauth_server]` as written.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOAuthServer {
    pub(super) enabled: Option<bool>,
    pub(super) key_path: Option<String>,
    pub(super) access_token_ttl_secs: Option<u64>,
    pub(super) refresh_token_ttl_days: Option<u64>,
    pub(super) code_ttl_secs: Option<u64>,
    pub(super) request_ttl_secs: Option<u64>,
    pub(super) registration: Option<bool>,
    pub(super) max_clients: Option<u64>,
    pub(super) registrations_per_minute: Option<u64>,
    pub(super) unused_registration_hours: Option<u64>,
    #[serde(default)]
    pub(super) client_documents: RawClientDocuments,
}

/// `[oauth_server.client_documents]` as written.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClientDocuments {
    pub(super) enabled: Option<bool>,
    pub(super) max_bytes: Option<u64>,
    pub(super) timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) allow_hosts: Vec<String>,
    pub(super) ca_file: Option<PathBuf>,
}

/// Checks `[oauth_server]`; `base_url` is `http.public_base_url` and `loopback` whether
/// the listener is on a loopback address (the issuer is then derived from it).
pub(super) fn validate_oauth_server(
    raw: RawOAuthServer,
    base_url: Option<&str>,
    loopback: bool,
) -> Result<OAuthServerConfig, ConfigError> {
    let key = |name: &str| format!("oauth_server.{name}");
    let secs = |name: &str, value, default, range| {
        in_range(&key(name), None, value, default, range).map(Duration::from_secs)
    };
    let enabled = raw.enabled.unwrap_or(false);
    let key_path = raw.key_path.unwrap_or_else(|| DEFAULT_KEY_PATH.to_owned());
    check_key_path(&key_path)?;
    if enabled {
        check_issuer(base_url, loopback)?;
    }
    let docs = raw.client_documents;
    for host in &docs.allow_hosts {
        if host.is_empty() || host.contains(['/', '@', ' ']) {
            return Err(ConfigError::new(format!(
                "oauth_server.client_documents.allow_hosts: {host:?} is not a host or host:port"
            )));
        }
    }
    Ok(OAuthServerConfig {
        enabled,
        key_path,
        access_token_ttl: secs(
            "access_token_ttl_secs",
            raw.access_token_ttl_secs,
            DEFAULT_ACCESS_TTL_SECS,
            (60, 86_400),
        )?,
        refresh_token_ttl: Duration::from_secs(
            in_range(
                &key("refresh_token_ttl_days"),
                None,
                raw.refresh_token_ttl_days,
                DEFAULT_REFRESH_TTL_DAYS,
                (1, 365),
            )? * 86_400,
        ),
        code_ttl: secs(
            "code_ttl_secs",
            raw.code_ttl_secs,
            DEFAULT_CODE_TTL_SECS,
            (10, 600),
        )?,
        request_ttl: secs(
            "request_ttl_secs",
            raw.request_ttl_secs,
            DEFAULT_REQUEST_TTL_SECS,
            (60, 3600),
        )?,
        registration: raw.registration.unwrap_or(true),
        max_clients: in_range(
            &key("max_clients"),
            None,
            raw.max_clients,
            DEFAULT_MAX_CLIENTS,
            (1, 1_000_000),
        )?,
        registrations_per_minute: u32::try_from(in_range(
            &key("registrations_per_minute"),
            None,
            raw.registrations_per_minute,
            DEFAULT_REGISTRATIONS_PER_MINUTE,
            (1, 10_000),
        )?)
        .unwrap_or(u32::MAX),
        unused_registration_ttl: Duration::from_secs(
            in_range(
                &key("unused_registration_hours"),
                None,
                raw.unused_registration_hours,
                DEFAULT_UNUSED_REGISTRATION_HOURS,
                (1, 24 * 365),
            )? * 3600,
        ),
        client_documents: ClientDocumentsConfig {
            enabled: docs.enabled.unwrap_or(true),
            max_bytes: in_range(
                &key("client_documents.max_bytes"),
                None,
                docs.max_bytes,
                DEFAULT_DOCUMENT_MAX_BYTES,
                (256, 64 * 1024),
            )?,
            timeout: Duration::from_millis(in_range(
                &key("client_documents.timeout_ms"),
                None,
                docs.timeout_ms,
                DEFAULT_DOCUMENT_TIMEOUT_MS,
                (100, 30_000),
            )?),
            allow_hosts: docs.allow_hosts,
            ca_file: docs.ca_file,
        },
    })
}

/// The API-key endpoint's path: absolute, plain, and not under `/mcp/` (a client at
/// `/mcp/x` could take `/mcp`'s protected resource metadata for its own).
fn check_key_path(path: &str) -> Result<(), ConfigError> {
    let plain = path.starts_with('/')
        && path.len() > 1
        && !path.ends_with('/')
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.'))
        && !path.contains("//")
        && !path.split('/').any(|s| s == "." || s == "..");
    let reserved = path == "/mcp"
        || path.starts_with("/mcp/")
        || path.starts_with("/oauth")
        || path.starts_with("/.well-known")
        || path.starts_with("/console")
        || matches!(path, "/healthz" | "/metrics");
    if plain && !reserved {
        return Ok(());
    }
    Err(ConfigError::new(format!(
        "oauth_server.key_path: {path:?} must be an absolute path of letters, digits, '-', '_', \
         '.' and '/', not under /mcp/, /oauth, /.well-known or /console (for example \
         \"{DEFAULT_KEY_PATH}\")"
    )))
}

/// The issuer is the public base URL: HTTPS, or plain HTTP on a loopback host only (OAuth
/// 2.1 §1.5); without one the listener must be on loopback (a local installation).
fn check_issuer(base_url: Option<&str>, loopback: bool) -> Result<(), ConfigError> {
    let Some(base) = base_url else {
        if loopback {
            return Ok(());
        }
        return Err(ConfigError::new(
            "oauth_server.enabled: the authorization server needs http.public_base_url (the \
             HTTPS address hosts reach tollgate at) when the listener is not on loopback",
        ));
    };
    let url = url::Url::parse(base).map_err(|e| {
        ConfigError::new(format!("http.public_base_url: {base:?} is not a URL: {e}"))
    })?;
    let local = matches!(url.host(), Some(url::Host::Domain("localhost")))
        || match url.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            _ => false,
        };
    if url.scheme() == "https" || local {
        return Ok(());
    }
    Err(ConfigError::new(format!(
        "oauth_server.enabled: http.public_base_url {base:?} must be an https:// URL (OAuth \
         2.1 allows plain http only on a loopback host)"
    )))
}

impl OAuthServerConfig {
    /// The raw form, for `tollgate config show`.
    pub(super) fn to_raw(&self) -> RawOAuthServer {
        let docs = &self.client_documents;
        RawOAuthServer {
            enabled: Some(self.enabled),
            key_path: Some(self.key_path.clone()),
            access_token_ttl_secs: Some(self.access_token_ttl.as_secs()),
            refresh_token_ttl_days: Some(self.refresh_token_ttl.as_secs() / 86_400),
            code_ttl_secs: Some(self.code_ttl.as_secs()),
            request_ttl_secs: Some(self.request_ttl.as_secs()),
            registration: Some(self.registration),
            max_clients: Some(self.max_clients),
            registrations_per_minute: Some(u64::from(self.registrations_per_minute)),
            unused_registration_hours: Some(self.unused_registration_ttl.as_secs() / 3600),
            client_documents: RawClientDocuments {
                enabled: Some(docs.enabled),
                max_bytes: Some(docs.max_bytes),
                timeout_ms: Some(u64::try_from(docs.timeout.as_millis()).unwrap_or(u64::MAX)),
                allow_hosts: docs.allow_hosts.clone(),
                ca_file: docs.ca_file.clone(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> RawOAuthServer {
        toml::from_str(text).expect("toml")
    }

    #[test]
    fn defaults_are_off_with_the_key_path_and_bounded_lifetimes() {
        let config = validate_oauth_server(parse(""), None, true).expect("valid");
        assert_eq!(config, OAuthServerConfig::default());
        assert!(!config.enabled);
        assert_eq!(config.key_path, "/mcp-key");
        assert_eq!(config.access_token_ttl, Duration::from_secs(900));
        let round = validate_oauth_server(config.to_raw(), None, true).expect("round trip");
        assert_eq!(round, config);
    }

    #[test]
    fn the_issuer_must_be_https_unless_it_is_loopback() {
        let on = || parse("enabled = true");
        assert!(validate_oauth_server(on(), None, true).is_ok());
        let err = validate_oauth_server(on(), None, false).expect_err("no base");
        assert!(err.message().contains("public_base_url"), "{err}");
        let err = validate_oauth_server(on(), Some("http://mcp.example.com"), false)
            .expect_err("plain http");
        assert!(err.message().contains("https"), "{err}");
        assert!(validate_oauth_server(on(), Some("https://mcp.example.com"), false).is_ok());
        assert!(validate_oauth_server(on(), Some("http://127.0.0.1:8787"), false).is_ok());
        assert!(validate_oauth_server(on(), Some("http://localhost:8787"), false).is_ok());
    }

    #[test]
    fn the_key_path_is_plain_and_outside_the_reserved_paths() {
        for bad in [
            "mcp-key", "/mcp", "/mcp/key", "/oauth/x", "/console", "/a//b", "/a/../b", "/",
        ] {
            let raw = parse(&format!("key_path = {bad:?}"));
            let err = validate_oauth_server(raw, None, true).expect_err(bad);
            assert!(err.message().starts_with("oauth_server.key_path"), "{err}");
        }
        let raw = parse("key_path = \"/api/mcp\"");
        assert_eq!(
            validate_oauth_server(raw, None, true).expect("ok").key_path,
            "/api/mcp"
        );
    }

    #[test]
    fn limits_past_their_bounds_are_refused_naming_the_key() {
        for (text, key) in [
            (
                "access_token_ttl_secs = 10",
                "oauth_server.access_token_ttl_secs",
            ),
            ("code_ttl_secs = 3600", "oauth_server.code_ttl_secs"),
            ("max_clients = 0", "oauth_server.max_clients"),
            (
                "[client_documents]\nmax_bytes = 1000000",
                "oauth_server.client_documents.max_bytes",
            ),
            (
                "[client_documents]\nallow_hosts = [\"a/b\"]",
                "oauth_server.client_documents.allow_hosts",
            ),
        ] {
            let err = validate_oauth_server(parse(text), None, true).expect_err(text);
            assert!(err.message().starts_with(key), "{text}: {err}");
        }
        assert!(
            toml::from_str::<RawOAuthServer>("nope = 1").is_err(),
            "unknown key"
        );
    }
}
