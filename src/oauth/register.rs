//! Dynamic client registration (RFC 7591), the fallback for hosts that do not name a
//! client metadata document: bounded per source and minute, in the number of clients
//! kept, and in time for a registration that never obtained a token. The operator can
//! turn it off (`oauth_server.registration = false`); the endpoint then does not exist.

use serde_json::{Value, json};

use crate::store::oauth::{NewRegistration, Registration, secret_digest};

use super::clients::secs;
use super::core::{AuthorizationServer, Context, OAuthError, Reply, random_id, random_secret};

/// The most redirect URIs one client may register.
const MAX_REDIRECT_URIS: usize = 10;
/// The longest redirect URI, name or home page accepted.
const MAX_URI_CHARS: usize = 2048;
const MAX_NAME_CHARS: usize = 200;
/// The largest registration request read.
pub const MAX_REGISTRATION_BYTES: usize = 16 * 1024;

/// Schemes a redirect URI may never use (they run code or read local data in a browser).
const FORBIDDEN_SCHEMES: &[&str] = &["javascript", "data", "file", "vbscript", "about", "blob"];

fn invalid(error: &str, description: impl Into<String>) -> OAuthError {
    OAuthError::new(400, error, description)
}

/// A redirect URI a client may register: absolute, no fragment; `https`, plain `http`
/// on a loopback host only, or a private-use scheme of a native application (RFC 8252).
fn check_redirect_uri(uri: &str) -> Result<(), OAuthError> {
    let bad = |why: &str| invalid("invalid_redirect_uri", format!("{uri:?}: {why}"));
    if uri.len() > MAX_URI_CHARS {
        return Err(bad("too long"));
    }
    let url = url::Url::parse(uri).map_err(|_| bad("not an absolute URI"))?;
    if url.fragment().is_some() {
        return Err(bad("a redirect URI may not have a fragment"));
    }
    match url.scheme() {
        "https" => Ok(()),
        "http" => {
            let loopback = match url.host() {
                Some(url::Host::Domain(d)) => d == "localhost",
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                None => false,
            };
            if loopback {
                Ok(())
            } else {
                Err(bad("plain http is allowed only on a loopback host"))
            }
        }
        scheme if FORBIDDEN_SCHEMES.contains(&scheme) => Err(bad("this scheme is not allowed")),
        _ => Ok(()),
    }
}

/// A list of strings in the metadata, or its default.
fn strings(metadata: &Value, name: &str, default: &[&str]) -> Result<Vec<String>, OAuthError> {
    match metadata.get(name) {
        None | Some(Value::Null) => Ok(default.iter().map(|s| (*s).to_owned()).collect()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str().map(str::to_owned).ok_or_else(|| {
                    invalid(
                        "invalid_client_metadata",
                        format!("{name} must list strings"),
                    )
                })
            })
            .collect(),
        Some(_) => Err(invalid(
            "invalid_client_metadata",
            format!("{name} must be an array"),
        )),
    }
}

/// An optional string in the metadata, bounded.
fn text(metadata: &Value, name: &str, max: usize) -> Result<Option<String>, OAuthError> {
    match metadata.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().count() <= max => Ok(Some(s.clone())),
        Some(Value::String(_)) => Err(invalid(
            "invalid_client_metadata",
            format!("{name} is too long"),
        )),
        Some(_) => Err(invalid(
            "invalid_client_metadata",
            format!("{name} must be a string"),
        )),
    }
}

impl AuthorizationServer {
    /// `POST /oauth/register`.
    pub fn register(&self, ctx: &Context<'_>, body: &[u8]) -> Reply {
        match self.registration(ctx, body) {
            Ok(answer) => Reply::Json {
                status: 201,
                body: answer,
                headers: vec![("Cache-Control".to_owned(), "no-store".to_owned())],
            },
            Err(err) => err.into_reply(),
        }
    }

    /// Whether clients may register themselves here.
    pub fn registration_open(&self) -> bool {
        self.config.enabled && self.config.registration
    }

    fn registration(&self, ctx: &Context<'_>, body: &[u8]) -> Result<Value, OAuthError> {
        self.windows.admit(
            &format!("register:{}", ctx.source),
            self.config.registrations_per_minute,
            "oauth_register",
            ctx.locale,
        )?;
        if body.len() > MAX_REGISTRATION_BYTES {
            return Err(invalid(
                "invalid_client_metadata",
                "The registration request is too large.",
            ));
        }
        let metadata: Value = serde_json::from_slice(body)
            .map_err(|_| invalid("invalid_client_metadata", "The body is not a JSON object."))?;
        if !metadata.is_object() {
            return Err(invalid(
                "invalid_client_metadata",
                "The body is not a JSON object.",
            ));
        }
        let redirect_uris = strings(&metadata, "redirect_uris", &[])?;
        if redirect_uris.is_empty() {
            return Err(invalid(
                "invalid_redirect_uri",
                "At least one redirect URI is required.",
            ));
        }
        if redirect_uris.len() > MAX_REDIRECT_URIS {
            return Err(invalid(
                "invalid_redirect_uri",
                "Too many redirect URIs (at most 10).",
            ));
        }
        for uri in &redirect_uris {
            check_redirect_uri(uri)?;
        }
        let grant_types = strings(&metadata, "grant_types", &["authorization_code"])?;
        if grant_types
            .iter()
            .any(|g| g != "authorization_code" && g != "refresh_token")
        {
            return Err(invalid(
                "invalid_client_metadata",
                "grant_types may hold only authorization_code and refresh_token.",
            ));
        }
        let response_types = strings(&metadata, "response_types", &["code"])?;
        if response_types.iter().any(|r| r != "code") {
            return Err(invalid(
                "invalid_client_metadata",
                "response_types may hold only code.",
            ));
        }
        // RFC 7591 §2: without a method named, the client authenticates with a secret.
        let auth_method = text(&metadata, "token_endpoint_auth_method", 64)?
            .unwrap_or_else(|| "client_secret_basic".to_owned());
        if !matches!(
            auth_method.as_str(),
            "none" | "client_secret_basic" | "client_secret_post"
        ) {
            return Err(invalid(
                "invalid_client_metadata",
                "token_endpoint_auth_method must be none, client_secret_basic or client_secret_post.",
            ));
        }
        let application_type = text(&metadata, "application_type", 16)?;
        if application_type
            .as_deref()
            .is_some_and(|t| t != "native" && t != "web")
        {
            return Err(invalid(
                "invalid_client_metadata",
                "application_type must be native or web.",
            ));
        }
        let client_name = text(&metadata, "client_name", MAX_NAME_CHARS)?;
        let client_uri = text(&metadata, "client_uri", MAX_URI_CHARS)?;
        let (Some(client_id), Some(secret)) = (random_id("tgc_"), random_secret("tg_cs_")) else {
            return Err(OAuthError::new(
                503,
                "temporarily_unavailable",
                "Try again later.",
            ));
        };
        let secret = (auth_method != "none").then_some(secret);
        let now = self.clock.unix_secs();
        let registration = Registration {
            client_id: client_id.clone(),
            secret_hash: secret.as_deref().map(secret_digest),
            client_name: client_name.clone(),
            client_uri: client_uri.clone(),
            redirect_uris: redirect_uris.clone(),
            grant_types: grant_types.clone(),
            auth_method: auth_method.clone(),
            application_type: application_type.clone(),
            created_at: now,
            last_used_at: None,
        };
        let kept = self
            .store
            .insert_registration(&NewRegistration {
                registration: &registration,
                source: ctx.source,
                max_clients: self.config.max_clients,
                unused_before: now - secs(self.config.unused_registration_ttl),
            })
            .map_err(|e| {
                tracing::warn!(error = %e, "cannot store a registration");
                OAuthError::new(503, "temporarily_unavailable", "Try again later.")
            })?;
        if !kept {
            tracing::warn!(
                max = self.config.max_clients,
                "client registrations are full"
            );
            return Err(OAuthError::new(
                503,
                "temporarily_unavailable",
                "This server keeps no more client registrations now; try again later or ask \
                 its operator.",
            ));
        }
        let mut answer = json!({
            "client_id": client_id,
            "client_id_issued_at": now,
            "redirect_uris": redirect_uris,
            "grant_types": grant_types,
            "response_types": response_types,
            "token_endpoint_auth_method": auth_method,
        });
        if let Some(secret) = secret {
            answer["client_secret"] = json!(secret);
            answer["client_secret_expires_at"] = json!(0);
        }
        for (name, value) in [
            ("client_name", client_name),
            ("client_uri", client_uri),
            ("application_type", application_type),
        ] {
            if let Some(value) = value {
                answer[name] = json!(value);
            }
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_uris_are_https_loopback_or_an_application_scheme() {
        for good in [
            "https://claude.ai/api/mcp/auth_callback",
            "http://127.0.0.1:33418/callback",
            "http://localhost/cb",
            "http://[::1]:9/cb",
            "cursor://anysphere.cursor-mcp/oauth/callback",
            "com.example.app:/oauth",
        ] {
            assert!(check_redirect_uri(good).is_ok(), "{good}");
        }
        for bad in [
            "http://evil.example/cb",
            "https://claude.ai/cb#frag",
            "javascript:alert(1)",
            "data:text/html,x",
            "file:///etc/passwd",
            "/relative",
        ] {
            let err = check_redirect_uri(bad).expect_err(bad);
            assert_eq!(err.body["error"], "invalid_redirect_uri", "{bad}");
        }
    }
}
