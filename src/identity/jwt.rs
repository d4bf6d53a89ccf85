//! A provider's JWT access token, verified: its issuer picks the provider, its header must
//! name an allowed public-key algorithm and a token type of RFC 9068 (or none), its
//! signature must verify under one of the provider's keys, and its audience and times
//! must hold. The times are read from the injected clock, not by jsonwebtoken (which would
//! read the system's); jsonwebtoken (on ring) checks the signature only.
//!
//! The header and signature checks ([`Jwt::check_signature`]) and the times
//! ([`check_times`]) serve the ID token of a sign-in too (`login`).

use base64::Engine as _;
use jsonwebtoken::Algorithm;
use serde_json::{Map, Value};

use super::claims::{audience_matches, time_claim, token_of};
use super::provider::Provider;
use super::{IdentityError, ProviderToken};

const MALFORMED: IdentityError = IdentityError::Invalid("malformed");

/// Whether `token` has a JWT's shape: three dot-separated base64url segments (the third,
/// the signature, may be empty: an unsigned token is a JWT that is refused as such).
pub(super) fn looks_like_jwt(token: &str) -> bool {
    let segments: Vec<&str> = token.split('.').collect();
    let base64url = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'=')
    };
    segments.len() == 3
        && !segments[0].is_empty()
        && !segments[1].is_empty()
        && segments.iter().all(|s| base64url(s))
}

/// What a JWT is meant to be, which decides the header `typ` it may carry.
#[derive(Clone, Copy)]
pub(super) enum TokenKind {
    /// An access token: `typ` absent, `JWT` or RFC 9068's `at+jwt`.
    Access,
    /// An OpenID Connect ID token: `typ` absent or `JWT` (an access token is not one).
    Id,
}

/// A JWT's parts, decoded but not yet trusted.
pub(super) struct Jwt<'t> {
    header: Map<String, Value>,
    /// The claims, trusted only once [`Jwt::check_signature`] has passed.
    pub(super) claims: Map<String, Value>,
    signing_input: &'t str,
    signature: &'t str,
}

impl<'t> Jwt<'t> {
    /// Decodes the header and claims of a compact JWS; `malformed` when they are not JSON
    /// objects.
    pub(super) fn parse(token: &'t str) -> Result<Jwt<'t>, IdentityError> {
        let (signing_input, signature) = token.rsplit_once('.').ok_or(MALFORMED)?;
        let (header, claims) = signing_input.split_once('.').ok_or(MALFORMED)?;
        Ok(Jwt {
            header: json_object(header)?,
            claims: json_object(claims)?,
            signing_input,
            signature,
        })
    }

    fn text(&self, name: &str) -> Option<&str> {
        self.header.get(name).and_then(Value::as_str)
    }

    /// The header's algorithm, when the issuer allows it.
    fn algorithm(&self, allowed: &[Algorithm]) -> Result<Algorithm, IdentityError> {
        let named = self.text("alg").ok_or(MALFORMED)?;
        named
            .parse::<Algorithm>()
            .ok()
            .filter(|a| allowed.contains(a))
            .ok_or(IdentityError::Invalid("bad_signature"))
    }

    /// `typ` absent, `JWT`, or (for an access token) RFC 9068's `at+jwt` (media types
    /// compare without case).
    fn check_type(&self, kind: TokenKind) -> Result<(), IdentityError> {
        match self.header.get("typ") {
            None => Ok(()),
            Some(Value::String(typ)) => {
                let typ = typ.to_ascii_lowercase();
                let typ = typ.strip_prefix("application/").unwrap_or(&typ);
                let access = matches!(kind, TokenKind::Access) && typ == "at+jwt";
                if typ == "jwt" || access {
                    Ok(())
                } else {
                    Err(MALFORMED)
                }
            }
            Some(_) => Err(MALFORMED),
        }
    }

    /// The header (an algorithm the issuer allows, the `typ` of `kind`) and the signature,
    /// under one of `provider`'s keys (fetched again once for an unknown `kid`).
    pub(super) fn check_signature(
        &self,
        provider: &Provider,
        kind: TokenKind,
    ) -> Result<(), IdentityError> {
        let algorithm = self.algorithm(&provider.config.algorithms)?;
        self.check_type(kind)?;
        let keys = provider.keys_for(self.text("kid"), algorithm)?;
        let verified = keys.iter().any(|key| {
            jsonwebtoken::crypto::verify(
                self.signature,
                self.signing_input.as_bytes(),
                key,
                algorithm,
            )
            .unwrap_or(false)
        });
        if verified {
            Ok(())
        } else {
            Err(IdentityError::Invalid("bad_signature"))
        }
    }
}

/// Decodes one base64url segment holding a JSON object.
fn json_object(segment: &str) -> Result<Map<String, Value>, IdentityError> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(segment.trim_end_matches('='))
        .map_err(|_| MALFORMED)?;
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(MALFORMED),
    }
}

/// Verifies `token` (already known to have a JWT's shape) against the provider its `iss`
/// names, at `now` (unix seconds).
pub(super) fn verify(
    providers: &[std::sync::Arc<Provider>],
    token: &str,
    now: i64,
) -> Result<ProviderToken, IdentityError> {
    let jwt = Jwt::parse(token)?;
    let iss = jwt.claims.get("iss").and_then(Value::as_str);
    let provider = providers
        .iter()
        .find(|p| iss.is_some_and(|iss| p.config.accepted_issuers.iter().any(|a| a == iss)))
        .ok_or(IdentityError::Invalid("untrusted_issuer"))?;
    let config = &provider.config;
    jwt.check_signature(provider, TokenKind::Access)?;
    if !audience_matches(&jwt.claims, &config.audiences) {
        return Err(IdentityError::Invalid("wrong_audience"));
    }
    let skew = i64::from(config.clock_skew_secs);
    let expires_at = check_times(&jwt.claims, now, skew)?;
    // The verdict holds as long as `check_times` would give it again: up to the skew past
    // `exp` (reusing it only until `exp` would verify and record the user on every call
    // of that last minute).
    token_of(
        config,
        &jwt.claims,
        (expires_at, expires_at.saturating_add(skew)),
        false,
    )
}

/// `exp` (required) not reached and `nbf`, `iat` not in the future, each with `skew`
/// seconds of leeway; the expiry.
pub(super) fn check_times(
    claims: &Map<String, Value>,
    now: i64,
    skew: i64,
) -> Result<i64, IdentityError> {
    let exp = time_claim(claims, "exp")?.ok_or(MALFORMED)?;
    if exp.saturating_add(skew) <= now {
        return Err(IdentityError::Invalid("expired"));
    }
    for name in ["nbf", "iat"] {
        if time_claim(claims, name)?.is_some_and(|t| t > now.saturating_add(skew)) {
            return Err(IdentityError::Invalid("not_yet_valid"));
        }
    }
    Ok(exp)
}
