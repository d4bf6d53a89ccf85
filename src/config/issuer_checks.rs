//! Checking `[[auth.issuers]]` tables ([`RawIssuer`]) into [`IssuerConfig`]s: presets'
//! defaults applied, explicit keys winning, every value checked with a message that names
//! the entry and the key (`auth.issuers[0] (corp): …`) and says what to change. The
//! types, the raw form and the presets' defaults are in `issuers.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::time::Duration;

use jsonwebtoken::Algorithm;

use super::ConfigError;
use super::backends::{read_secret, resolve};
use super::issuers::{
    ALLOWED_ALGORITHMS, ClientSecret, DEFAULT_ALGORITHMS, DEFAULT_LOGIN_SCOPES, Discovery,
    IntrospectionConfig, IssuerConfig, LoginConfig, OneOrMany, Preset, RawIntrospection, RawIssuer,
    RawLogin, claim_defaults, is_loopback_host, is_tool_scope, owned,
};

const DEFAULT_CLOCK_SKEW_SECS: u64 = 60;
const MAX_CLOCK_SKEW_SECS: u64 = 600;
const DEFAULT_REFRESH_SECS: u64 = 300;
const REFRESH_RANGE_SECS: (u64, u64) = (60, 86_400);
const DEFAULT_INTROSPECTION_CACHE_SECS: u64 = 60;
const MAX_INTROSPECTION_CACHE_SECS: u64 = 3600;

/// A scope the `roles` table may grant: a tool scope, `*` or `admin`.
fn is_grantable_scope(text: &str) -> bool {
    text == "*" || text == "admin" || is_tool_scope(text)
}

fn issuer_error(index: usize, name: Option<&str>, what: impl fmt::Display) -> ConfigError {
    match name {
        Some(name) => ConfigError::new(format!("auth.issuers[{index}] ({name}): {what}")),
        None => ConfigError::new(format!("auth.issuers[{index}]: {what}")),
    }
}

/// Checks every `[[auth.issuers]]` table; relative paths are resolved against `base` (the
/// configuration file's directory). The client secrets of introspection and login are read
/// here. At most one issuer may have `login`: tollgate sends people to one provider.
pub(super) fn validate_issuers(
    raw: Vec<RawIssuer>,
    base: Option<&Path>,
) -> Result<Vec<IssuerConfig>, ConfigError> {
    let mut names = BTreeSet::new();
    let mut out: Vec<IssuerConfig> = Vec::with_capacity(raw.len());
    for (index, entry) in raw.into_iter().enumerate() {
        let name = entry.name.clone();
        let err = |what: String| issuer_error(index, name.as_deref(), what);
        let issuer = validate_one(entry, base).map_err(err)?;
        if !names.insert(issuer.name.clone()) {
            return Err(err("another issuer already has this name".to_owned()));
        }
        let shared = issuer
            .accepted_issuers
            .iter()
            .find(|iss| out.iter().any(|other| other.accepted_issuers.contains(iss)));
        if let Some(iss) = shared {
            return Err(err(format!(
                "the issuer {iss} is already trusted by another entry; a token's `iss` must \
                 pick one entry"
            )));
        }
        let other_login = out.iter().position(|other| other.login.is_some());
        if let (Some(_), Some(first)) = (&issuer.login, other_login) {
            return Err(err(format!(
                "`login`: auth.issuers[{first}] ({}) has a `login` table already; people sign \
                 in at one provider: keep `login` on one issuer only",
                out[first].name
            )));
        }
        out.push(issuer);
    }
    Ok(out)
}

/// Checks one table; the message says what to change.
fn validate_one(raw: RawIssuer, base: Option<&Path>) -> Result<IssuerConfig, String> {
    let name = raw
        .name
        .clone()
        .ok_or("`name` is required: a short label such as \"corp\"")?;
    if !valid_issuer_name(&name) {
        return Err(
            "`name` must be 1 to 32 lower-case letters, digits or `-` (it names the provider \
             in logs, the CLI and user ids)"
                .to_owned(),
        );
    }
    check_preset_keys(&raw)?;
    let (issuer, accepted_issuers) = issuers_of(&raw)?;
    let defaults = claim_defaults(raw.preset);
    let mut role_claims = raw
        .role_claims
        .clone()
        .unwrap_or_else(|| owned(defaults.role));
    if let (None, Some(client)) = (&raw.role_claims, &raw.client) {
        role_claims.push(format!("resource_access.{client}.roles"));
    }
    let discovery = match raw.preset {
        Some(Preset::Keycloak) => Discovery::OpenIdOnly,
        _ => Discovery::OpenIdThenOAuth,
    };
    let config = IssuerConfig {
        name,
        issuer,
        accepted_issuers,
        audiences: audiences_of(raw.audience.clone())?,
        preset: raw.preset,
        tenant: raw.tenant.clone(),
        client: raw.client.clone(),
        jwks_uri: raw
            .jwks_uri
            .clone()
            .map(|u| checked_url("jwks_uri", u))
            .transpose()?,
        jwks_file: raw.jwks_file.clone().map(|f| resolve(base, f)),
        algorithms: algorithms_of(raw.algorithms.as_deref())?,
        clock_skew_secs: bounded(
            "clock_skew_secs",
            raw.clock_skew_secs,
            DEFAULT_CLOCK_SKEW_SECS,
            (0, MAX_CLOCK_SKEW_SECS),
        )?,
        scope_claims: claim_list("scope_claims", raw.scope_claims.clone(), defaults.scope)?,
        role_claims: claim_list("role_claims", Some(role_claims), &[])?,
        subject_claim: claim_name("subject_claim", raw.subject_claim.clone(), defaults.subject)?,
        name_claims: claim_list("name_claims", raw.name_claims.clone(), defaults.name)?,
        client_claims: claim_list("client_claims", raw.client_claims.clone(), defaults.client)?,
        refresh: Duration::from_secs(u64::from(bounded(
            "refresh_secs",
            raw.refresh_secs,
            DEFAULT_REFRESH_SECS,
            REFRESH_RANGE_SECS,
        )?)),
        roles: roles_of(raw.roles.clone())?,
        introspection: raw
            .introspection
            .clone()
            .map(|i| introspection_of(i, base))
            .transpose()?,
        login: raw.login.clone().map(|l| login_of(l, base)).transpose()?,
        discovery,
    };
    if config.jwks_uri.is_some() && config.jwks_file.is_some() {
        return Err("give `jwks_uri` or `jwks_file`, not both".to_owned());
    }
    let needs_endpoint = config
        .introspection
        .as_ref()
        .is_some_and(|i| i.endpoint.is_none());
    if config.jwks_file.is_some() && needs_endpoint {
        return Err(
            "with `jwks_file` nothing is discovered: give the introspection `endpoint` too"
                .to_owned(),
        );
    }
    let login_needs_endpoints = config
        .login
        .as_ref()
        .is_some_and(|l| l.authorization_endpoint.is_none() || l.token_endpoint.is_none());
    if config.jwks_file.is_some() && login_needs_endpoints {
        return Err(
            "with `jwks_file` nothing is discovered: give `login.authorization_endpoint` and \
             `login.token_endpoint` too"
                .to_owned(),
        );
    }
    Ok(config)
}

/// `[a-z0-9-]{1,32}`.
fn valid_issuer_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `tenant` goes with `entra` only, `client` with `keycloak` only.
fn check_preset_keys(raw: &RawIssuer) -> Result<(), String> {
    let preset = raw
        .preset
        .map_or("no preset".to_owned(), |p| format!("preset {:?}", p.word()));
    if raw.tenant.is_some() && raw.preset != Some(Preset::Entra) {
        return Err(format!(
            "`tenant` is only valid with preset = \"entra\" (this issuer has {preset}); remove \
             it and give `issuer` instead"
        ));
    }
    if raw.client.is_some() && raw.preset != Some(Preset::Keycloak) {
        return Err(format!(
            "`client` is only valid with preset = \"keycloak\" (this issuer has {preset}); name \
             the roles claim in `role_claims` instead"
        ));
    }
    if let Some(tenant) = &raw.tenant
        && (tenant.is_empty()
            || !tenant
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'))
    {
        return Err(format!(
            "`tenant` {tenant:?} is not a tenant id: the directory (tenant) ID of the Entra \
             tenant, a GUID such as 72f988bf-86f1-41af-91ab-2d7cd011db47"
        ));
    }
    if raw.client.as_deref().is_some_and(|c| c.trim().is_empty()) {
        return Err(
            "`client` must not be empty: the Keycloak client id whose roles count".to_owned(),
        );
    }
    Ok(())
}

/// The canonical issuer and every accepted `iss`.
fn issuers_of(raw: &RawIssuer) -> Result<(String, Vec<String>), String> {
    let from_tenant = raw
        .tenant
        .as_ref()
        .map(|t| format!("https://login.microsoftonline.com/{t}/v2.0"));
    let issuer = match (&raw.issuer, from_tenant) {
        (Some(issuer), _) => checked_url("issuer", issuer.clone())?,
        (None, Some(derived)) => derived,
        (None, None) if raw.preset == Some(Preset::Entra) => {
            return Err("`tenant` (or `issuer`) is required with preset = \"entra\"".to_owned());
        }
        (None, None) => {
            return Err(
                "`issuer` is required: the exact `iss` value of the provider's tokens, e.g. \
                 https://idp.example.com/realms/acme"
                    .to_owned(),
            );
        }
    };
    let mut accepted = vec![issuer.clone()];
    if let Some(tenant) = &raw.tenant {
        accepted.push(format!("https://sts.windows.net/{tenant}/"));
    }
    Ok((issuer, accepted))
}

/// `url` if it is https, or http to a loopback host; the value is kept exactly as given.
fn checked_url(key: &str, url: String) -> Result<String, String> {
    let parsed =
        url::Url::parse(&url).map_err(|e| format!("`{key}` {url:?} is not a URL ({e})"))?;
    match parsed.scheme() {
        "https" if parsed.host().is_some() => {}
        "http" if is_loopback_host(&parsed) => {}
        "http" => {
            return Err(format!(
                "`{key}` {url:?} must use https://: plain http:// is accepted only for a \
                 loopback host (127.0.0.1, ::1, localhost), since keys and tokens fetched over \
                 it could be changed on the way"
            ));
        }
        _ => return Err(format!("`{key}` {url:?} must be an https:// URL")),
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!(
            "`{key}`: the URL must not hold a user name or password"
        ));
    }
    Ok(url)
}

fn audiences_of(raw: Option<OneOrMany>) -> Result<Vec<String>, String> {
    let list = raw.map(OneOrMany::into_vec).unwrap_or_default();
    if list.is_empty() || list.iter().any(|a| a.trim().is_empty()) {
        return Err(
            "`audience` is required: the value (or list of values) the provider puts in `aud` \
             for tokens meant for tollgate, e.g. \"https://tollgate.example.com/mcp\" or the \
             application's client id"
                .to_owned(),
        );
    }
    Ok(list)
}

/// The `algorithms` list: public-key algorithms only.
fn algorithms_of(raw: Option<&[String]>) -> Result<Vec<Algorithm>, String> {
    let Some(list) = raw else {
        return Ok(DEFAULT_ALGORITHMS.to_vec());
    };
    if list.is_empty() {
        return Err("`algorithms` must name at least one algorithm, e.g. [\"RS256\"]".to_owned());
    }
    let mut out = Vec::new();
    for word in list {
        let upper = word.to_ascii_uppercase();
        if upper == "NONE" {
            return Err(
                "`algorithms`: \"none\" means an unsigned token, which tollgate never accepts; \
                 remove it"
                    .to_owned(),
            );
        }
        if upper.starts_with("HS") {
            return Err(format!(
                "`algorithms`: {word} is an HMAC algorithm, verified with a secret shared with \
                 the provider; tollgate verifies provider tokens only against the provider's \
                 public keys: remove it and sign with RS256, PS256, ES256 or EdDSA"
            ));
        }
        let algorithm = ALLOWED_ALGORITHMS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(word))
            .map(|(_, algorithm)| *algorithm)
            .ok_or_else(|| {
                format!(
                    "`algorithms`: {word:?} is not one of RS256, RS384, RS512, PS256, PS384, \
                     PS512, ES256, ES384, EdDSA"
                )
            })?;
        if !out.contains(&algorithm) {
            out.push(algorithm);
        }
    }
    Ok(out)
}

/// `value` (default `default`) within `min..=max`.
fn bounded(
    key: &str,
    value: Option<u64>,
    default: u64,
    (min, max): (u64, u64),
) -> Result<u32, String> {
    let value = value.unwrap_or(default);
    if !(min..=max).contains(&value) {
        return Err(format!(
            "`{key}` = {value} is out of range: it must be between {min} and {max}"
        ));
    }
    Ok(u32::try_from(value).unwrap_or(u32::MAX))
}

fn claim_name(key: &str, value: Option<String>, default: &str) -> Result<String, String> {
    let value = value.unwrap_or_else(|| default.to_owned());
    if value.is_empty() || value.starts_with('.') || value.ends_with('.') || value.contains("..") {
        return Err(format!(
            "`{key}`: {value:?} is not a claim name (a name, or a dotted path such as \
             realm_access.roles)"
        ));
    }
    Ok(value)
}

fn claim_list(
    key: &str,
    value: Option<Vec<String>>,
    default: &[&str],
) -> Result<Vec<String>, String> {
    let list = value.unwrap_or_else(|| owned(default));
    let mut out = Vec::with_capacity(list.len());
    for claim in list {
        let claim = claim_name(key, Some(claim), "")?;
        if !out.contains(&claim) {
            out.push(claim);
        }
    }
    Ok(out)
}

/// The `roles` table: every right-hand scope is a tool scope, `*` or `admin`.
fn roles_of(raw: BTreeMap<String, Vec<String>>) -> Result<BTreeMap<String, Vec<String>>, String> {
    for (value, scopes) in &raw {
        if value.is_empty() {
            return Err("`roles`: an empty role name maps nothing; remove it".to_owned());
        }
        if let Some(bad) = scopes.iter().find(|s| !is_grantable_scope(s)) {
            return Err(format!(
                "`roles.{value:?}`: {bad:?} is not a tollgate scope: resource:action (lower-case \
                 letters, digits, `_` or `-`, e.g. invoices:read), `*` or `admin`"
            ));
        }
    }
    Ok(raw)
}

fn introspection_of(
    raw: RawIntrospection,
    base: Option<&Path>,
) -> Result<IntrospectionConfig, String> {
    let client_id = raw
        .client_id
        .filter(|c| !c.trim().is_empty())
        .ok_or("`introspection.client_id` is required: the client tollgate authenticates as")?;
    let file = raw.client_secret_file.ok_or(
        "`introspection.client_secret_file` is required: a file holding the client secret \
         (the secret itself is never written in the configuration)",
    )?;
    let file = resolve(base, file);
    let secret =
        read_secret(&file).map_err(|e| format!("`introspection.client_secret_file`: {e}"))?;
    Ok(IntrospectionConfig {
        endpoint: raw
            .endpoint
            .map(|e| checked_url("introspection.endpoint", e))
            .transpose()?,
        client_id,
        client_secret_file: file,
        client_secret: ClientSecret::new(secret),
        cache_secs: bounded(
            "introspection.cache_secs",
            raw.cache_secs,
            DEFAULT_INTROSPECTION_CACHE_SECS,
            (0, MAX_INTROSPECTION_CACHE_SECS),
        )?,
    })
}

/// `[auth.issuers.login]`: a client id, an optional secret file (read now), the scopes
/// (`openid` among them) and the optional endpoint overrides.
fn login_of(raw: RawLogin, base: Option<&Path>) -> Result<LoginConfig, String> {
    let client_id = raw.client_id.filter(|c| !c.trim().is_empty()).ok_or(
        "`login.client_id` is required: the client id tollgate is registered as at the \
         provider",
    )?;
    let (client_secret_file, client_secret) = match raw.client_secret_file {
        None => (None, None),
        Some(file) => {
            let file = resolve(base, file);
            let secret =
                read_secret(&file).map_err(|e| format!("`login.client_secret_file`: {e}"))?;
            (Some(file), Some(ClientSecret::new(secret)))
        }
    };
    let endpoint = |key: &str, value: Option<String>| {
        value
            .map(|url| checked_url(&format!("login.{key}"), url))
            .transpose()
    };
    Ok(LoginConfig {
        client_id,
        client_secret_file,
        client_secret,
        scopes: login_scopes(raw.scopes)?,
        authorization_endpoint: endpoint("authorization_endpoint", raw.authorization_endpoint)?,
        token_endpoint: endpoint("token_endpoint", raw.token_endpoint)?,
    })
}

/// `login.scopes`: OAuth scope tokens (RFC 6749 §3.3: printable ASCII but space, `"` and
/// `\\`), `openid` among them, duplicates dropped.
fn login_scopes(raw: Option<Vec<String>>) -> Result<Vec<String>, String> {
    let list = raw.unwrap_or_else(|| owned(&DEFAULT_LOGIN_SCOPES));
    let scope_token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\')
    };
    if let Some(bad) = list.iter().find(|s| !scope_token(s)) {
        return Err(format!(
            "`login.scopes`: {bad:?} is not a scope: one word of printable characters, without \
             spaces or quotes"
        ));
    }
    if !list.iter().any(|s| s == "openid") {
        return Err(
            "`login.scopes` must contain \"openid\": without it the provider gives no ID token \
             (the default is [\"openid\", \"profile\", \"email\"])"
                .to_owned(),
        );
    }
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for scope in list {
        if !out.contains(&scope) {
            out.push(scope);
        }
    }
    Ok(out)
}
