//! Claims to a caller: the subject, display name and client a provider's claims name, and
//! the tollgate scopes they grant under the issuer's mapping (see `crate::config` on
//! `[[auth.issuers]]`: a scope-claim value shaped `resource:action` is granted as is; any
//! scope or role value in the `roles` table grants that entry's scopes; `*` and `admin`
//! come only from the table).
//!
//! A claim is named by a dotted path (`realm_access.roles`). Claim names may themselves
//! hold dots (an Auth0 custom claim is a URL; a Keycloak client id may be one), so at each
//! level the longest name present wins: `resource_access.api.example.com.roles` finds the
//! client `api.example.com`.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::{IdentityError, ProviderToken};
use crate::config::{IssuerConfig, is_tool_scope};

/// The value at `path` in `claims`: at each level the longest key present is taken.
pub(super) fn lookup<'a>(claims: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    if let Some(value) = claims.get(path) {
        return Some(value);
    }
    path.char_indices()
        .rev()
        .filter(|(_, c)| *c == '.')
        .find_map(|(at, _)| {
            let inner = claims.get(&path[..at])?.as_object()?;
            lookup(inner, &path[at + 1..])
        })
}

/// The string values of a claim: a string is split on spaces when `split` (a scope
/// string), else taken whole; an array gives its strings.
fn values_of(value: &Value, split: bool) -> Vec<&str> {
    match value {
        Value::String(text) if split => text.split_whitespace().collect(),
        Value::String(text) => vec![text.as_str()],
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The tollgate scopes `claims` grant, sorted and without duplicates. `extra_scope_claims`
/// are read as scope claims besides the issuer's own (introspection's `scope`).
pub(super) fn granted_scopes(
    config: &IssuerConfig,
    claims: &Map<String, Value>,
    extra_scope_claims: &[&str],
) -> Vec<String> {
    let mut granted = BTreeSet::new();
    let scope_claims = config
        .scope_claims
        .iter()
        .map(String::as_str)
        .chain(extra_scope_claims.iter().copied())
        .collect::<BTreeSet<_>>();
    let mut grant_mapped = |value: &str| {
        if let Some(scopes) = config.roles.get(value) {
            granted.extend(scopes.iter().cloned());
        }
    };
    let mut verbatim = Vec::new();
    for claim in scope_claims {
        for value in lookup(claims, claim)
            .map(|v| values_of(v, true))
            .unwrap_or_default()
        {
            grant_mapped(value);
            if is_tool_scope(value) {
                verbatim.push(value.to_owned());
            }
        }
    }
    for claim in &config.role_claims {
        for value in lookup(claims, claim)
            .map(|v| values_of(v, false))
            .unwrap_or_default()
        {
            grant_mapped(value);
        }
    }
    granted.extend(verbatim);
    granted.into_iter().collect()
}

/// The values of the issuer's role claims in `claims`, sorted and without duplicates.
fn roles_named(config: &IssuerConfig, claims: &Map<String, Value>) -> Vec<String> {
    let mut roles = BTreeSet::new();
    for claim in &config.role_claims {
        let values = lookup(claims, claim).map(|v| values_of(v, false));
        roles.extend(values.unwrap_or_default().into_iter().map(str::to_owned));
    }
    roles.into_iter().collect()
}

/// The first of `names` that holds a non-empty string.
fn first_string(claims: &Map<String, Value>, names: &[String]) -> Option<String> {
    names
        .iter()
        .filter_map(|name| lookup(claims, name)?.as_str())
        .find(|text| !text.is_empty())
        .map(str::to_owned)
}

/// The caller `claims` describe, for a token the issuer `config` vouched for.
/// `introspected` adds RFC 7662's own names (`scope`, `client_id`) to the issuer's.
pub(super) fn token_of(
    config: &IssuerConfig,
    claims: &Map<String, Value>,
    (expires_at, cache_until): (i64, i64),
    introspected: bool,
) -> Result<ProviderToken, IdentityError> {
    let mut client_claims = config.client_claims.clone();
    let extra_scopes: &[&str] = if introspected {
        client_claims.push("client_id".to_owned());
        &["scope"]
    } else {
        &[]
    };
    let client_id = first_string(claims, &client_claims);
    // RFC 7662 makes `sub` optional, and a token of the client-credentials grant has no
    // user: an introspected token without one is its client's, acting as itself.
    let subject = first_string(claims, std::slice::from_ref(&config.subject_claim))
        .or_else(|| client_id.clone().filter(|_| introspected))
        .ok_or(IdentityError::Invalid("malformed"))?;
    Ok(ProviderToken {
        issuer_name: config.name.clone(),
        issuer: config.issuer.clone(),
        subject,
        display_name: first_string(claims, &config.name_claims),
        client_id,
        scopes: granted_scopes(config, claims, extra_scopes),
        roles: roles_named(config, claims),
        expires_at,
        cache_until,
    })
}

/// A time claim (`exp`, `nbf`, `iat`) in whole unix seconds: `Ok(None)` when absent, an
/// error when it is not a number.
pub(super) fn time_claim(
    claims: &Map<String, Value>,
    name: &str,
) -> Result<Option<i64>, IdentityError> {
    match claims.get(name) {
        None => Ok(None),
        Some(value) => value
            .as_i64()
            .or_else(|| value.as_f64().map(|f| f.floor() as i64))
            .map(Some)
            .ok_or(IdentityError::Invalid("malformed")),
    }
}

/// Whether the `aud` of `claims` (a string or a list) holds one of `audiences`.
pub(super) fn audience_matches(claims: &Map<String, Value>, audiences: &[String]) -> bool {
    claims
        .get("aud")
        .map(|aud| values_of(aud, false))
        .unwrap_or_default()
        .iter()
        .any(|aud| audiences.iter().any(|a| a == aud))
}
