//! Sign-in of people at the company's provider: tollgate as an OpenID Connect relying
//! party of the one issuer with `[auth.issuers.login]`, in the authorization code flow
//! with PKCE (RFC 7636, S256) and a `nonce`.
//!
//! [`Identity::begin_login`] draws a fresh `state`, `nonce` and code verifier and builds
//! the provider's authorization URL; the authorization server keeps the three until the
//! callback. [`Identity::finish_login`] exchanges the code at the token endpoint (bounded
//! like every fetch of this layer) and checks the ID token as OpenID Connect Core §3.1.3.7
//! asks: the signature under the provider's keys and the allowed algorithms (the code
//! path of access tokens, `jwt`), `iss`, `aud` (and `azp`) naming tollgate's client, the
//! times with the issuer's clock skew, and the `nonce`. The person's scopes come from the
//! ID token's claims through the issuer's mapping, as for an access token (`claims`).
//!
//! Neither the code, the verifier, a token nor the client secret enters an error or a log
//! line.

use std::fmt;

use base64::Engine as _;
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use super::claims::{audience_matches, token_of};
use super::fetch::Posted;
use super::jwt::{Jwt, TokenKind, check_times};
use super::provider::Provider;
use super::{Identity, IdentityError, ProviderToken};
use crate::config::LoginConfig;

/// Random bytes in each of `state`, `nonce` and the verifier: 256 bits, 43 base64url
/// characters (RFC 7636 asks 43 to 128 for the verifier).
const RANDOM_BYTES: usize = 32;
/// The longest `error_description` of a refusal copied into the operator's log.
const MAX_DESCRIPTION_CHARS: usize = 200;

/// What the authorization server keeps between sending the person to the provider and
/// the callback. `Debug` leaves the verifier out.
pub struct LoginStart {
    /// The provider's authorization URL to send the person's browser to.
    pub url: String,
    /// The `state` sent: the callback must bring it back (it picks this sign-in).
    pub state: String,
    /// The `nonce` sent: the ID token must carry it ([`Identity::finish_login`]).
    pub nonce: String,
    /// The PKCE code verifier whose S256 challenge was sent; secret until the exchange.
    pub verifier: String,
}

impl fmt::Debug for LoginStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoginStart")
            .field("url", &self.url)
            .field("state", &self.state)
            .field("nonce", &self.nonce)
            .field("verifier", &"…")
            .finish()
    }
}

impl Identity {
    /// The provider with `login`, and its sign-in settings.
    fn login_provider(&self) -> Result<(&Provider, &LoginConfig), IdentityError> {
        self.providers
            .iter()
            .find_map(|p| p.config.login.as_ref().map(|login| (&**p, login)))
            .ok_or_else(|| {
                IdentityError::Unavailable(
                    "no issuer has `[auth.issuers.login]`: people cannot sign in".to_owned(),
                )
            })
    }

    /// The name of the issuer people sign in at, if one has `login`.
    pub fn login_issuer(&self) -> Option<&str> {
        self.login_provider()
            .ok()
            .map(|(provider, _)| provider.config.name.as_str())
    }

    /// The issuer URL of the provider people sign in at, if one has `login`: an
    /// authorization response that names another (`iss`, RFC 9207) is a mix-up.
    pub fn login_issuer_url(&self) -> Option<&str> {
        self.login_provider()
            .ok()
            .map(|(provider, _)| provider.config.issuer.as_str())
    }

    /// A fresh state, nonce and PKCE verifier (random, from getrandom, base64url), and the
    /// provider's authorization URL: response_type=code, client_id, redirect_uri, scope
    /// (space-joined), state, nonce, code_challenge (S256 of the verifier),
    /// code_challenge_method=S256. `redirect_uri` is tollgate's callback URL
    /// (`<public base>/oauth/callback`). Blocking only when the authorization endpoint is
    /// not known yet (the metadata is read, at most the fetch deadline); unavailable when
    /// it cannot be, or when no issuer has `login`.
    pub fn begin_login(&self, redirect_uri: &str) -> Result<LoginStart, IdentityError> {
        let (provider, login) = self.login_provider()?;
        let endpoint = provider
            .authorization_endpoint()
            .map_err(|cause| unavailable(provider, &cause))?;
        let (state, nonce, verifier) = (random_word()?, random_word()?, random_word()?);
        let mut url = url::Url::parse(&endpoint).map_err(|e| {
            unavailable(
                provider,
                &format!("the authorization endpoint {endpoint:?}: {e}"),
            )
        })?;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &login.client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("scope", &login.scopes.join(" "))
            .append_pair("state", &state)
            .append_pair("nonce", &nonce)
            .append_pair("code_challenge", &s256_challenge(&verifier))
            .append_pair("code_challenge_method", "S256");
        Ok(LoginStart {
            url: url.into(),
            state,
            nonce,
            verifier,
        })
    }

    /// Exchanges `code` at the provider's token endpoint (grant_type=authorization_code,
    /// code, redirect_uri, code_verifier; the client authenticates with HTTP Basic when it
    /// has a secret, else names itself in the form), bounded like the other fetches, then
    /// checks the ID token (see the module documentation) and returns the person: subject
    /// and display name by the issuer's claim settings, scopes by its roles mapping,
    /// `client_id` `None` (the person signed in through tollgate), `expires_at` and
    /// `cache_until` the ID token's `exp`.
    pub fn finish_login(
        &self,
        code: &str,
        redirect_uri: &str,
        verifier: &str,
        nonce: &str,
    ) -> Result<ProviderToken, IdentityError> {
        let (provider, login) = self.login_provider()?;
        let id_token = exchange(provider, login, code, redirect_uri, verifier)?;
        let now = self.clock.unix_secs();
        check_id_token(provider, login, &id_token, nonce, now)
    }
}

/// 32 random bytes, base64url without padding.
fn random_word() -> Result<String, IdentityError> {
    let mut bytes = [0u8; RANDOM_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| {
        IdentityError::Unavailable(format!("cannot draw random bytes for a sign-in: {e}"))
    })?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// RFC 7636's S256 challenge: base64url(SHA-256(verifier)), without padding.
fn s256_challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

fn unavailable(provider: &Provider, cause: &str) -> IdentityError {
    IdentityError::Unavailable(format!("issuer {}: sign-in: {cause}", provider.config.name))
}

/// The ID token of the token endpoint's answer to `code`.
fn exchange(
    provider: &Provider,
    login: &LoginConfig,
    code: &str,
    redirect_uri: &str,
    verifier: &str,
) -> Result<String, IdentityError> {
    let endpoint = provider
        .token_endpoint()
        .map_err(|cause| unavailable(provider, &cause))?;
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect_uri),
        ("code_verifier", verifier),
    ];
    let secret = login.client_secret.as_ref().map(|s| s.expose());
    let basic = secret.map(|secret| (login.client_id.as_str(), secret));
    if basic.is_none() {
        form.push(("client_id", &login.client_id));
    }
    let http = provider.http();
    let posted = http
        .wait(http.post_form(&endpoint, &form, basic))
        .and_then(|posted| posted)
        .map_err(|cause| unavailable(provider, &cause))?;
    let secrets = [code, verifier, secret.unwrap_or_default()];
    id_token_of(provider, &endpoint, posted, &secrets)
}

/// The ID token of the token endpoint's answer: a refusal (RFC 6749 §5.2) is logged with
/// its `error` and is `login_refused`; any other failure is the provider's.
fn id_token_of(
    provider: &Provider,
    endpoint: &str,
    posted: Posted,
    secrets: &[&str],
) -> Result<String, IdentityError> {
    let issuer = &provider.config.name;
    match posted {
        Posted {
            status: 200..=299,
            body,
        } => {
            let body = body.map_err(|cause| unavailable(provider, &cause))?;
            match body.get("id_token").and_then(Value::as_str) {
                Some(id_token) => Ok(id_token.to_owned()),
                None => {
                    tracing::warn!(
                        issuer = %issuer,
                        "the token endpoint's answer to a sign-in holds no id_token; is \
                         \"openid\" among `login.scopes` and the client's allowed scopes?"
                    );
                    Err(IdentityError::Invalid("no_id_token"))
                }
            }
        }
        Posted {
            status: status @ (400 | 401),
            body: Ok(body),
        } if body.get("error").is_some_and(Value::is_string) => {
            tracing::warn!(
                issuer = %issuer,
                status,
                "the provider refused a sign-in's code: {}",
                refusal_text(&body, secrets)
            );
            Err(IdentityError::Invalid("login_refused"))
        }
        Posted { status, .. } => Err(unavailable(
            provider,
            &format!("{endpoint} answered HTTP {status}"),
        )),
    }
}

/// An OAuth error answer (RFC 6749 §5.2) for the operator's log: the `error` code and,
/// unless it repeats one of `secrets`, the `error_description`, in printable ASCII and
/// cut at [`MAX_DESCRIPTION_CHARS`].
fn refusal_text(body: &Value, secrets: &[&str]) -> String {
    let printable = |text: &str, max: usize| -> String {
        text.chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .take(max)
            .collect()
    };
    let text = |name: &str| body.get(name).and_then(Value::as_str).unwrap_or_default();
    let mut out = printable(text("error"), 64);
    let description = text("error_description");
    let repeats_a_secret = secrets
        .iter()
        .any(|s| !s.is_empty() && description.contains(s));
    if !description.is_empty() && !repeats_a_secret {
        out.push_str(": ");
        out.push_str(&printable(description, MAX_DESCRIPTION_CHARS));
    }
    out
}

/// The ID token checked against the issuer, tollgate's client and the `nonce` sent, at
/// `now` (unix seconds); the person it names.
fn check_id_token(
    provider: &Provider,
    login: &LoginConfig,
    id_token: &str,
    nonce: &str,
    now: i64,
) -> Result<ProviderToken, IdentityError> {
    let config = &provider.config;
    let jwt = Jwt::parse(id_token)?;
    let claims = &jwt.claims;
    if claims.get("iss").and_then(Value::as_str) != Some(config.issuer.as_str()) {
        return Err(IdentityError::Invalid("untrusted_issuer"));
    }
    jwt.check_signature(provider, TokenKind::Id)?;
    if !for_client(claims, &login.client_id) {
        return Err(IdentityError::Invalid("wrong_audience"));
    }
    let expires_at = check_times(claims, now, i64::from(config.clock_skew_secs))?;
    let carried = claims.get("nonce").and_then(Value::as_str);
    if !carried.is_some_and(|carried| same_text(carried, nonce)) {
        return Err(IdentityError::Invalid("nonce"));
    }
    let mut person = token_of(config, claims, (expires_at, expires_at), false)?;
    person.client_id = None;
    Ok(person)
}

/// `aud` holds `client_id`, and when it holds several audiences, an `azp` present names
/// `client_id` (OpenID Connect Core §3.1.3.7, items 3 to 5).
fn for_client(claims: &Map<String, Value>, client_id: &str) -> bool {
    if !audience_matches(claims, &[client_id.to_owned()]) {
        return false;
    }
    let several = claims
        .get("aud")
        .and_then(Value::as_array)
        .is_some_and(|aud| aud.len() > 1);
    match claims.get("azp") {
        Some(azp) if several => azp.as_str() == Some(client_id),
        _ => true,
    }
}

/// Equal texts, compared in constant time.
fn same_text(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_s256_challenge_is_rfc_7636_appendix_b() {
        assert_eq!(
            s256_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn a_refusal_is_logged_without_a_description_that_repeats_a_secret() {
        let body = serde_json::json!({"error": "invalid_grant",
            "error_description": "Code not valid"});
        assert_eq!(
            refusal_text(&body, &["the-code", "", "the-verifier"]),
            "invalid_grant: Code not valid"
        );
        let echoing = serde_json::json!({"error": "invalid_grant",
            "error_description": "code the-code was used\nalready"});
        assert_eq!(refusal_text(&echoing, &["the-code"]), "invalid_grant");
        let long = serde_json::json!({"error": "invalid_client\u{7}",
            "error_description": "x".repeat(500)});
        let text = refusal_text(&long, &[]);
        assert!(text.starts_with("invalid_client?: xxx"), "{text}");
        assert_eq!(
            text.len(),
            "invalid_client?: ".len() + MAX_DESCRIPTION_CHARS
        );
    }

    #[test]
    fn several_audiences_need_azp_to_name_the_client_when_it_is_there() {
        let claims = |value: Value| value.as_object().expect("object").clone();
        assert!(for_client(
            &claims(serde_json::json!({"aud": "tollgate"})),
            "tollgate"
        ));
        assert!(!for_client(
            &claims(serde_json::json!({"aud": "other"})),
            "tollgate"
        ));
        // One audience: an `azp` of another party is no concern of this client's.
        assert!(for_client(
            &claims(serde_json::json!({"aud": ["tollgate"], "azp": "android"})),
            "tollgate"
        ));
        assert!(for_client(
            &claims(serde_json::json!({"aud": ["tollgate", "api"], "azp": "tollgate"})),
            "tollgate"
        ));
        assert!(!for_client(
            &claims(serde_json::json!({"aud": ["tollgate", "api"], "azp": "api"})),
            "tollgate"
        ));
        assert!(for_client(
            &claims(serde_json::json!({"aud": ["tollgate", "api"]})),
            "tollgate"
        ));
    }
}
