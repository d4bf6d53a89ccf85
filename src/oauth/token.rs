//! The token endpoint (`POST /oauth/token`): the authorization code grant with PKCE, the
//! refresh token grant with rotation and reuse detection, and — for tollgate's own machine
//! clients — the client credentials grant. Every answer is JSON with
//! `Cache-Control: no-store`.
//!
//! The endpoint has its own rate limit, independent of the MCP buckets: every request
//! counts against its source, and only requests whose client authenticated count against
//! that client. Wrong machine-client secrets count against the source's authentication
//! failure throttle, never against the client.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::catalog::ErrorKind;
use crate::guards::auth::{ACCESS_TOKEN_PREFIX, REFRESH_TOKEN_PREFIX, Secret};
use crate::store::oauth::{CodeExchange, IssuedFamily, RefreshOutcome, Rotation, secret_digest};

use super::authorize::scope_list;
use super::clients::{Client, ClientAuth, ClientRefusal, secs};
use super::core::{
    AuthorizationServer, Context, OAuthError, Reply, random_id, random_secret, s256, same_token,
};

/// Token requests allowed per source per minute, and authenticated ones per client.
pub const TOKEN_REQUESTS_PER_MINUTE: u32 = 30;
/// Lifetime of a machine client's access token.
pub const CLIENT_TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

/// A request's client credentials: from HTTP Basic or from the form, never both.
pub(super) struct Presented {
    pub(super) client_id: String,
    pub(super) secret: Option<String>,
}

/// The client credentials of a request.
pub(super) fn presented_client(
    ctx: &Context<'_>,
    form: &HashMap<String, String>,
) -> Result<Presented, OAuthError> {
    let basic = ctx
        .header("authorization")
        .and_then(|v| v.trim_start().split_once([' ', '\t']))
        .and_then(|(scheme, rest)| scheme.eq_ignore_ascii_case("basic").then_some(rest));
    match (basic, form.get("client_secret")) {
        (Some(_), Some(_)) => Err(OAuthError::new(
            400,
            "invalid_request",
            "Authenticate the client either with HTTP Basic or in the form, not both.",
        )),
        (Some(encoded), None) => {
            let (id, secret) = decode_basic(encoded).ok_or_else(invalid_client)?;
            if form.get("client_id").is_some_and(|f| *f != id) {
                return Err(invalid_client());
            }
            Ok(Presented {
                client_id: id,
                secret: Some(secret),
            })
        }
        (None, secret) => Ok(Presented {
            client_id: form.get("client_id").cloned().ok_or_else(invalid_client)?,
            secret: secret.cloned(),
        }),
    }
}

fn invalid_client() -> OAuthError {
    OAuthError::new(401, "invalid_client", "Client authentication failed.")
}

fn invalid_grant(description: &str) -> OAuthError {
    OAuthError::new(400, "invalid_grant", description)
}

fn unavailable() -> OAuthError {
    OAuthError::new(
        503,
        "temporarily_unavailable",
        "The server cannot issue tokens right now; retry with backoff.",
    )
}

/// `user:password` of an HTTP Basic header, each form-urlencoded (RFC 6749 §2.3.1).
pub(super) fn decode_basic(encoded: &str) -> Option<(String, String)> {
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

impl AuthorizationServer {
    /// `POST /oauth/token`.
    pub fn token(&self, ctx: &Context<'_>, body: &[u8]) -> Reply {
        match self.token_grant(ctx, body) {
            Ok(token) => Reply::Json {
                status: 200,
                body: token,
                headers: vec![("Cache-Control".to_owned(), "no-store".to_owned())],
            },
            Err(err) => err.into_reply(),
        }
    }

    /// Counts a token or revocation request against its source.
    pub(super) fn admit_source(&self, ctx: &Context<'_>) -> Result<(), OAuthError> {
        self.windows.admit(
            &format!("source:{}", ctx.source),
            TOKEN_REQUESTS_PER_MINUTE,
            "oauth_token",
            ctx.locale,
        )
    }

    fn token_grant(&self, ctx: &Context<'_>, body: &[u8]) -> Result<Value, OAuthError> {
        self.admit_source(ctx)?;
        let pairs: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
        let mut form = HashMap::new();
        for (name, value) in pairs {
            if form.insert(name.clone(), value).is_some() {
                return Err(OAuthError::new(
                    400,
                    "invalid_request",
                    format!("The parameter {name} was given more than once."),
                ));
            }
        }
        let presented = presented_client(ctx, &form)?;
        match form.get("grant_type").map(String::as_str) {
            Some("client_credentials") => self.client_credentials(ctx, &form, presented),
            Some(grant @ ("authorization_code" | "refresh_token")) if self.config.enabled => {
                let client = self.authenticate_client(&presented)?;
                self.windows.admit(
                    &format!("client:{}", client.id),
                    TOKEN_REQUESTS_PER_MINUTE,
                    "oauth_token",
                    ctx.locale,
                )?;
                if !client.may_use(grant) {
                    return Err(OAuthError::new(
                        400,
                        "unauthorized_client",
                        format!("The client did not register for the {grant} grant."),
                    ));
                }
                if grant == "authorization_code" {
                    self.exchange_code(ctx, &form, &client)
                } else {
                    self.refresh(ctx, &form, &client)
                }
            }
            Some(_) => Err(OAuthError::new(
                400,
                "unsupported_grant_type",
                if self.config.enabled {
                    "Supported grants: authorization_code, refresh_token, client_credentials."
                } else {
                    "Only the client_credentials grant is supported."
                },
            )),
            None => Err(OAuthError::new(
                400,
                "invalid_request",
                "The grant_type is missing.",
            )),
        }
    }

    /// A front-door client (registered, or a metadata document) authenticated as it said
    /// it would: a public client sends no secret; a confidential one sends its own.
    pub(super) fn authenticate_client(&self, presented: &Presented) -> Result<Client, OAuthError> {
        let client = self
            .client(&presented.client_id)
            .map_err(|refusal| match refusal {
                ClientRefusal::Unavailable => unavailable(),
                ClientRefusal::Unknown | ClientRefusal::Document(_) => invalid_client(),
            })?;
        match (&client.auth, &presented.secret) {
            (ClientAuth::None, None) => Ok(client),
            (ClientAuth::Secret { hash, .. }, Some(secret))
                if same_token(&secret_digest(secret), hash) =>
            {
                Ok(client)
            }
            _ => Err(invalid_client()),
        }
    }

    /// The authorization code grant: the code taken once, its client, redirect URI,
    /// resource and PKCE verifier checked, then a new token family.
    fn exchange_code(
        &self,
        ctx: &Context<'_>,
        form: &HashMap<String, String>,
        client: &Client,
    ) -> Result<Value, OAuthError> {
        let code = form
            .get("code")
            .ok_or_else(|| OAuthError::new(400, "invalid_request", "The code is missing."))?;
        let verifier = form.get("code_verifier").ok_or_else(|| {
            OAuthError::new(
                400,
                "invalid_request",
                "The code_verifier is missing (PKCE).",
            )
        })?;
        let now = self.clock.unix_secs();
        let code_hash = secret_digest(code);
        let row = match self.store.take_code(&code_hash, now).map_err(|e| {
            tracing::warn!(error = %e, "cannot read a code");
            unavailable()
        })? {
            CodeExchange::Taken(row) => row,
            CodeExchange::Reused => {
                tracing::warn!(client = %client.id, "a code was presented twice; its tokens are revoked");
                return Err(invalid_grant(
                    "The code was already used; the tokens issued for it are revoked.",
                ));
            }
            CodeExchange::Unknown => return Err(invalid_grant("The code is not valid.")),
        };
        if row.expires_at <= now {
            return Err(invalid_grant("The code expired."));
        }
        if row.client_id != client.id {
            return Err(invalid_grant("The code was issued to another client."));
        }
        if form.get("redirect_uri") != Some(&row.redirect_uri) {
            return Err(invalid_grant(
                "The redirect_uri differs from the authorization request's.",
            ));
        }
        let verifier_ok = (43..=128).contains(&verifier.len())
            && verifier
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'));
        if !verifier_ok || !same_token(&s256(verifier), &row.code_challenge) {
            return Err(invalid_grant(
                "The code_verifier does not match the code_challenge.",
            ));
        }
        if let Some(resource) = form.get("resource")
            && resource.trim_end_matches('/') != row.resource
        {
            return Err(OAuthError::new(
                400,
                "invalid_target",
                "The resource differs from the authorization request's.",
            ));
        }
        let (Some(family), Some(access), Some(refresh)) = (
            random_id("f_"),
            random_secret(ACCESS_TOKEN_PREFIX),
            random_secret(REFRESH_TOKEN_PREFIX),
        ) else {
            return Err(unavailable());
        };
        let access_until = now + secs(self.config.access_token_ttl);
        let family_until = now + secs(self.config.refresh_token_ttl);
        let issued = self
            .store
            .issue_family(&IssuedFamily {
                family_id: &family,
                grant_id: &row.grant_id,
                client_id: &client.id,
                scopes: &row.scopes,
                resource: &row.resource,
                access: (&secret_digest(&access), access_until),
                refresh: (&secret_digest(&refresh), family_until),
                code_hash: &code_hash,
                now,
            })
            .map_err(|e| {
                tracing::warn!(error = %e, "cannot issue tokens");
                unavailable()
            })?;
        if !issued {
            return Err(invalid_grant("The consent behind this code was revoked."));
        }
        let _ = ctx;
        Ok(self.token_body(&access, Some(&refresh), &row.scopes))
    }

    /// The refresh token grant: the presented token rotated (or, used before, its family
    /// revoked), after the person's standing is checked.
    fn refresh(
        &self,
        ctx: &Context<'_>,
        form: &HashMap<String, String>,
        client: &Client,
    ) -> Result<Value, OAuthError> {
        let presented = form.get("refresh_token").ok_or_else(|| {
            OAuthError::new(400, "invalid_request", "The refresh_token is missing.")
        })?;
        let presented_hash = secret_digest(presented);
        let asked = form.get("scope").map(|s| scope_list(s));
        let (Some(access), Some(refresh)) = (
            random_secret(ACCESS_TOKEN_PREFIX),
            random_secret(REFRESH_TOKEN_PREFIX),
        ) else {
            return Err(unavailable());
        };
        let now = self.clock.unix_secs();
        let outcome = self
            .store
            .rotate_refresh(&Rotation {
                presented: &presented_hash,
                client_id: &client.id,
                scopes: asked.as_deref(),
                access: (
                    &secret_digest(&access),
                    now + secs(self.config.access_token_ttl),
                ),
                refresh: &secret_digest(&refresh),
                now,
            })
            .map_err(|e| {
                tracing::warn!(error = %e, "cannot rotate a refresh token");
                unavailable()
            })?;
        match outcome {
            RefreshOutcome::Rotated {
                scopes, grant_id, ..
            } => {
                let stands = self
                    .store
                    .grant(&grant_id)
                    .ok()
                    .flatten()
                    .map(|grant| ctx.auth.principal_stands(&grant.principal_id));
                match stands {
                    Some(Ok(true)) => Ok(self.token_body(&access, Some(&refresh), &scopes)),
                    Some(Err(_)) => Err(unavailable()),
                    _ => {
                        let _ = self
                            .store
                            .revoke_issued(&secret_digest(&refresh), &client.id, now);
                        Err(invalid_grant(
                            "The person behind this token was blocked or their key revoked.",
                        ))
                    }
                }
            }
            RefreshOutcome::Reused => {
                tracing::warn!(client = %client.id, "a refresh token was used twice; its family is revoked");
                Err(invalid_grant(
                    "The refresh token was already used; every token of its family is revoked. Sign in again.",
                ))
            }
            RefreshOutcome::ScopeWidened => Err(OAuthError::new(
                400,
                "invalid_scope",
                "A refresh cannot add scopes the person did not consent to.",
            )),
            RefreshOutcome::Invalid => Err(invalid_grant("The refresh token is not valid.")),
        }
    }

    fn token_body(&self, access: &str, refresh: Option<&str>, scopes: &[String]) -> Value {
        let mut body = json!({
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.config.access_token_ttl.as_secs(),
            "scope": scopes.join(" "),
        });
        if let Some(refresh) = refresh {
            body["refresh_token"] = json!(refresh);
        }
        body
    }

    /// The client credentials grant of tollgate's machine clients (`tollgate clients`):
    /// the secret verified (argon2, throttled per source like bearer tokens), then a token
    /// with the requested subset of the client's scopes.
    fn client_credentials(
        &self,
        ctx: &Context<'_>,
        form: &HashMap<String, String>,
        presented: Presented,
    ) -> Result<Value, OAuthError> {
        let secret = presented.secret.ok_or_else(invalid_client)?;
        let client = ctx
            .auth
            .verify_client_secret(&presented.client_id, &Secret::new(secret), ctx.source)
            .map_err(|err| match err.kind() {
                ErrorKind::BackendUnavailable | ErrorKind::InternalError => unavailable(),
                ErrorKind::RateLimited => OAuthError::throttled(&err, ctx.locale),
                _ => invalid_client(),
            })?;
        self.windows.admit(
            &format!("client:{}", client.client_id),
            TOKEN_REQUESTS_PER_MINUTE,
            "oauth_token",
            ctx.locale,
        )?;
        let scopes = form.get("scope").map(|s| scope_list(s)).unwrap_or_default();
        if !scopes
            .iter()
            .all(|s| crate::guards::auth::grants(&client.allowed_scopes, s))
        {
            return Err(OAuthError::new(
                400,
                "invalid_scope",
                "The requested scope is not a subset of the client's allowed scopes.",
            ));
        }
        let issued = crate::guards::auth::issue_access_token(
            &self.store,
            &client,
            &scopes,
            CLIENT_TOKEN_TTL,
            &self.clock,
        )
        .map_err(|e| {
            tracing::warn!(error = %e, "cannot issue an access token");
            unavailable()
        })?;
        let scopes = if scopes.is_empty() {
            client.allowed_scopes
        } else {
            scopes
        };
        Ok(json!({
            "access_token": issued.token.expose(),
            "token_type": "Bearer",
            "expires_in": CLIENT_TOKEN_TTL.as_secs(),
            "scope": scopes.join(" "),
        }))
    }
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
}
