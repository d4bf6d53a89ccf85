//! Opaque tokens, asked about (RFC 7662): each issuer with `introspection` configured is
//! asked in the configuration's order, and the first that answers `active: true` for a
//! token meant for tollgate vouches for it. An answer may be reused until
//! `min(now + cache_secs, exp)` (the caller's cache).
//!
//! The token is sent in the form body only; it never enters an error or a log line.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::claims::{audience_matches, time_claim, token_of};
use super::provider::Provider;
use super::{IdentityError, ProviderToken};

/// What one issuer said about a token.
enum Answer {
    /// It vouches for it.
    Active(ProviderToken),
    /// Not active there, or not one of its tokens (another `iss`).
    NotHers,
    /// It could not be asked.
    Unreachable(String),
}

/// Asks the issuers that introspect about `token` at `now` (unix seconds).
pub(super) fn introspect(
    providers: &[Arc<Provider>],
    token: &str,
    now: i64,
) -> Result<ProviderToken, IdentityError> {
    let asked: Vec<&Arc<Provider>> = providers
        .iter()
        .filter(|p| p.config.introspection.is_some())
        .collect();
    if asked.is_empty() {
        return Err(IdentityError::Invalid("malformed"));
    }
    let mut unreachable = Vec::new();
    for provider in asked {
        match ask(provider, token, now)? {
            Answer::Active(found) => return Ok(found),
            Answer::NotHers => {}
            Answer::Unreachable(cause) => unreachable.push(cause),
        }
    }
    if unreachable.is_empty() {
        Err(IdentityError::Invalid("inactive"))
    } else {
        Err(IdentityError::Unavailable(unreachable.join("; ")))
    }
}

/// One issuer's answer; an error when it vouches for a token that is not for tollgate.
fn ask(provider: &Provider, token: &str, now: i64) -> Result<Answer, IdentityError> {
    let config = &provider.config;
    let Some(settings) = &config.introspection else {
        return Ok(Answer::NotHers);
    };
    let unreachable = |cause: String| {
        Answer::Unreachable(format!("issuer {}: introspection: {cause}", config.name))
    };
    let endpoint = match provider.introspection_endpoint() {
        Ok(endpoint) => endpoint,
        Err(cause) => return Ok(unreachable(cause)),
    };
    let form = [("token", token), ("token_type_hint", "access_token")];
    let client = (settings.client_id.as_str(), settings.client_secret.expose());
    let answer = provider
        .http()
        .wait(provider.http().post_form_json(&endpoint, &form, client))
        .and_then(|answer| answer);
    let claims = match answer {
        Ok(Value::Object(claims)) => claims,
        Ok(_) => {
            return Ok(unreachable(format!(
                "{endpoint} answered JSON that is not an object"
            )));
        }
        Err(cause) => {
            tracing::warn!(issuer = %config.name, "cannot introspect a token: {cause}");
            return Ok(unreachable(cause));
        }
    };
    judge(provider, &claims, now, i64::from(settings.cache_secs))
}

/// The verdict on one `active` answer.
fn judge(
    provider: &Provider,
    claims: &Map<String, Value>,
    now: i64,
    cache_secs: i64,
) -> Result<Answer, IdentityError> {
    let config = &provider.config;
    if claims.get("active") != Some(&Value::Bool(true)) {
        return Ok(Answer::NotHers);
    }
    if let Some(iss) = claims.get("iss")
        && !config
            .accepted_issuers
            .iter()
            .any(|a| Some(a.as_str()) == iss.as_str())
    {
        return Ok(Answer::NotHers);
    }
    if claims.contains_key("aud") && !audience_matches(claims, &config.audiences) {
        return Err(IdentityError::Invalid("wrong_audience"));
    }
    let skew = i64::from(config.clock_skew_secs);
    let exp = time_claim(claims, "exp")?;
    if exp.is_some_and(|exp| exp.saturating_add(skew) <= now) {
        return Err(IdentityError::Invalid("expired"));
    }
    let reuse_until = now.saturating_add(cache_secs);
    let cache_until = exp.map_or(reuse_until, |exp| exp.min(reuse_until));
    let expires_at = exp.unwrap_or(cache_until);
    token_of(config, claims, (expires_at, cache_until), true).map(Answer::Active)
}
