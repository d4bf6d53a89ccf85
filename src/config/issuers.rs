//! `[[auth.issuers]]`: the company's identity providers whose tokens tollgate accepts,
//! one table per provider, read into a checked [`IssuerConfig`].
//!
//! Each table names the provider (`name`), the exact `iss` its tokens carry (`issuer`),
//! the audiences tollgate answers to, where its signing keys come from (OpenID Connect
//! discovery, else RFC 8414; or a `jwks_uri`; or a local `jwks_file`), which algorithms are
//! allowed, and which claims carry the user, the client, the scopes and the roles. A
//! `roles` table turns role, group or scope values into tollgate scopes; an
//! `introspection` table lets opaque tokens be asked about (RFC 7662).
//!
//! A `preset` sets the defaults and quirks of one provider; an explicit key always wins:
//! - `entra` (Microsoft Entra ID): `tenant = "<tenant id>"` gives the issuer
//!   `https://login.microsoftonline.com/<tenant>/v2.0` and also accepts the v1 tokens'
//!   `https://sts.windows.net/<tenant>/`; scopes in `scp`, application roles in `roles`;
//!   the user is `oid` (the object id is the same for every application of the tenant,
//!   where `sub` is pairwise per application and would make one person several users);
//!   name from `preferred_username`, `upn`, `unique_name`, `name`; client from `azp`,
//!   then v1's `appid`.
//! - `keycloak`: realm roles in `realm_access.roles`, and with `client = "<client id>"`
//!   that client's roles in `resource_access.<client>.roles`; scopes in `scope`; keys by
//!   OpenID discovery only (Keycloak serves no RFC 8414 document).
//! - `okta`: scopes in `scp`, groups in `groups` (a claim the authorization server must
//!   be told to add); client in `cid`.
//! - `auth0`: scopes in `scope` and, with RBAC's "Add Permissions in the Access Token",
//!   `permissions`; the audience is the API's identifier.
//! - `authentik`: groups in `groups`; name from `preferred_username`.
//!
//! Scope mapping (done by `crate::identity`): a value of a scope claim that is already a
//! tollgate scope `resource:action` is granted as is; a value of a scope or role claim
//! found in `roles` grants that entry's scopes; `*` and `admin` are never taken verbatim
//! from a token, only granted through `roles`. The scope grammar lives in the guards
//! layer (`parse_scope`), above config, so [`is_tool_scope`] restates its shape here.
//! `docs/identity.md` is the operator's reference.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use jsonwebtoken::Algorithm;
use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::backends::{read_secret, resolve};

/// The algorithms accepted when `algorithms` is not set.
pub const DEFAULT_ALGORITHMS: [Algorithm; 4] = [
    Algorithm::RS256,
    Algorithm::PS256,
    Algorithm::ES256,
    Algorithm::EdDSA,
];
/// Every algorithm `algorithms` may name: the public-key ones, as JWS (RFC 7518) spells them.
pub const ALLOWED_ALGORITHMS: [(&str, Algorithm); 9] = [
    ("RS256", Algorithm::RS256),
    ("RS384", Algorithm::RS384),
    ("RS512", Algorithm::RS512),
    ("PS256", Algorithm::PS256),
    ("PS384", Algorithm::PS384),
    ("PS512", Algorithm::PS512),
    ("ES256", Algorithm::ES256),
    ("ES384", Algorithm::ES384),
    ("EdDSA", Algorithm::EdDSA),
];

/// The JWS name of an allowed algorithm (`None` for an HMAC one).
pub fn algorithm_name(algorithm: Algorithm) -> Option<&'static str> {
    ALLOWED_ALGORITHMS
        .iter()
        .find(|(_, a)| *a == algorithm)
        .map(|(name, _)| *name)
}
const DEFAULT_CLOCK_SKEW_SECS: u64 = 60;
const MAX_CLOCK_SKEW_SECS: u64 = 600;
const DEFAULT_REFRESH_SECS: u64 = 300;
const REFRESH_RANGE_SECS: (u64, u64) = (60, 86_400);
const DEFAULT_INTROSPECTION_CACHE_SECS: u64 = 60;
const MAX_INTROSPECTION_CACHE_SECS: u64 = 3600;

/// One provider's preset: its defaults and quirks (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// Microsoft Entra ID (v1 and v2 access tokens).
    Entra,
    /// Keycloak (a realm's tokens).
    Keycloak,
    /// Okta (a custom authorization server).
    Okta,
    /// Auth0 (an API's access tokens).
    Auth0,
    /// authentik (an OAuth2/OpenID provider).
    Authentik,
}

impl Preset {
    fn word(self) -> &'static str {
        match self {
            Preset::Entra => "entra",
            Preset::Keycloak => "keycloak",
            Preset::Okta => "okta",
            Preset::Auth0 => "auth0",
            Preset::Authentik => "authentik",
        }
    }
}

/// Where the provider's metadata is looked for when keys or the introspection endpoint
/// must be discovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discovery {
    /// `<issuer>/.well-known/openid-configuration`, else RFC 8414's
    /// `<origin>/.well-known/oauth-authorization-server<path>`.
    OpenIdThenOAuth,
    /// OpenID Connect discovery only (Keycloak).
    OpenIdOnly,
}

/// A secret read from a file at configuration load; `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientSecret(String);

impl ClientSecret {
    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ClientSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientSecret(…)")
    }
}

/// `[auth.issuers.introspection]`: asking the provider about opaque tokens (RFC 7662).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntrospectionConfig {
    /// The introspection endpoint; `None`: the metadata's `introspection_endpoint`.
    pub endpoint: Option<String>,
    /// The client tollgate authenticates as (HTTP Basic).
    pub client_id: String,
    /// Where the client secret was read from.
    pub client_secret_file: PathBuf,
    /// The client secret, read at load.
    pub client_secret: ClientSecret,
    /// How long an answer may be reused (0: ask every time); never past the token's `exp`.
    pub cache_secs: u32,
}

/// One trusted identity provider, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerConfig {
    /// Short label `[a-z0-9-]{1,32}`, unique: names the provider in logs, the CLI, user ids.
    pub name: String,
    /// The canonical issuer URL (exactly as tokens carry it).
    pub issuer: String,
    /// Every `iss` value accepted: `issuer` first, then the others (Entra's v1 issuer).
    pub accepted_issuers: Vec<String>,
    /// A token must carry one of these in `aud`.
    pub audiences: Vec<String>,
    /// The preset the defaults came from.
    pub preset: Option<Preset>,
    /// Entra's tenant id (only with `preset = "entra"`).
    pub tenant: Option<String>,
    /// Keycloak's client whose roles count (only with `preset = "keycloak"`).
    pub client: Option<String>,
    /// The JWKS URL; `None`: discovered (unless `jwks_file`).
    pub jwks_uri: Option<String>,
    /// A local JWKS: no network for keys.
    pub jwks_file: Option<PathBuf>,
    /// The signature algorithms accepted (public-key ones only).
    pub algorithms: Vec<Algorithm>,
    /// Leeway for `exp`, `nbf` and `iat`, in seconds.
    pub clock_skew_secs: u32,
    /// Claims carrying scopes (a space-separated string or an array).
    pub scope_claims: Vec<String>,
    /// Claim paths carrying roles or groups (dotted: `realm_access.roles`).
    pub role_claims: Vec<String>,
    /// The claim naming the user.
    pub subject_claim: String,
    /// Claims tried in order for a display name.
    pub name_claims: Vec<String>,
    /// Claims tried in order for the OAuth client.
    pub client_claims: Vec<String>,
    /// Background key refresh period.
    pub refresh: Duration,
    /// Role, group or scope value in a token → the tollgate scopes it grants.
    pub roles: BTreeMap<String, Vec<String>>,
    /// Introspection of opaque tokens, if configured.
    pub introspection: Option<IntrospectionConfig>,
    /// Where metadata is discovered.
    pub discovery: Discovery,
}

/// Whether `text` has the shape of a tool scope `resource:action` (each part lower-case
/// letters, digits, `_` or `-`, starting with a letter, at most 32 characters): the shape
/// `crate::guards::auth::parse_scope` checks, restated because guards sit above config.
/// `*` and `admin` are not tool scopes.
pub fn is_tool_scope(text: &str) -> bool {
    let part_ok = |p: &str| {
        (1..=32).contains(&p.len())
            && p.starts_with(|c: char| c.is_ascii_lowercase())
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    };
    text.split_once(':')
        .is_some_and(|(resource, action)| part_ok(resource) && part_ok(action))
}

/// A scope the `roles` table may grant: a tool scope, `*` or `admin`.
fn is_grantable_scope(text: &str) -> bool {
    text == "*" || text == "admin" || is_tool_scope(text)
}

// ---------------------------------------------------------------------------------------
// The raw form.

/// A string or a list of strings (`audience`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, expecting = "a string or a list of strings")]
pub(super) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(one) => vec![one],
            OneOrMany::Many(many) => many,
        }
    }
}

/// One `[[auth.issuers]]` table as the file holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIssuer {
    name: Option<String>,
    issuer: Option<String>,
    audience: Option<OneOrMany>,
    preset: Option<Preset>,
    tenant: Option<String>,
    client: Option<String>,
    jwks_uri: Option<String>,
    jwks_file: Option<PathBuf>,
    algorithms: Option<Vec<String>>,
    clock_skew_secs: Option<u64>,
    scope_claims: Option<Vec<String>>,
    role_claims: Option<Vec<String>>,
    subject_claim: Option<String>,
    name_claims: Option<Vec<String>>,
    client_claims: Option<Vec<String>>,
    refresh_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    roles: BTreeMap<String, Vec<String>>,
    introspection: Option<RawIntrospection>,
}

/// `[auth.issuers.introspection]` as the file holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIntrospection {
    endpoint: Option<String>,
    client_id: Option<String>,
    client_secret_file: Option<PathBuf>,
    cache_secs: Option<u64>,
}

// ---------------------------------------------------------------------------------------
// Presets.

/// The claim defaults of a preset (or of none).
struct ClaimDefaults {
    scope: &'static [&'static str],
    role: &'static [&'static str],
    subject: &'static str,
    name: &'static [&'static str],
    client: &'static [&'static str],
}

const GENERIC_NAMES: &[&str] = &["preferred_username", "email", "name"];
const GENERIC_CLIENTS: &[&str] = &["azp", "client_id"];

fn claim_defaults(preset: Option<Preset>) -> ClaimDefaults {
    let generic = ClaimDefaults {
        scope: &["scope", "scp"],
        role: &["roles"],
        subject: "sub",
        name: GENERIC_NAMES,
        client: GENERIC_CLIENTS,
    };
    match preset {
        None => generic,
        Some(Preset::Entra) => ClaimDefaults {
            scope: &["scp"],
            role: &["roles"],
            subject: "oid",
            name: &["preferred_username", "upn", "unique_name", "name"],
            client: &["azp", "appid"],
        },
        Some(Preset::Keycloak) => ClaimDefaults {
            scope: &["scope"],
            role: &["realm_access.roles"],
            ..generic
        },
        Some(Preset::Okta) => ClaimDefaults {
            scope: &["scp"],
            role: &["groups"],
            client: &["cid", "azp", "client_id"],
            ..generic
        },
        Some(Preset::Auth0) => ClaimDefaults {
            scope: &["scope", "permissions"],
            role: &[],
            ..generic
        },
        Some(Preset::Authentik) => ClaimDefaults {
            scope: &["scope"],
            role: &["groups"],
            ..generic
        },
    }
}

fn owned(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

// ---------------------------------------------------------------------------------------
// Validation.

fn issuer_error(index: usize, name: Option<&str>, what: impl fmt::Display) -> ConfigError {
    match name {
        Some(name) => ConfigError::new(format!("auth.issuers[{index}] ({name}): {what}")),
        None => ConfigError::new(format!("auth.issuers[{index}]: {what}")),
    }
}

/// Checks every `[[auth.issuers]]` table; relative paths are resolved against `base` (the
/// configuration file's directory). The client secrets of introspection are read here.
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

/// Whether `url` may be fetched for keys, metadata or introspection: https, or plain http
/// to a loopback host (127.0.0.0/8, ::1, localhost), with no user name or password.
pub fn is_trusted_url(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|parsed| {
        let plain_ok = parsed.scheme() == "http" && is_loopback_host(&parsed);
        (parsed.scheme() == "https" || plain_ok)
            && parsed.host().is_some()
            && parsed.username().is_empty()
            && parsed.password().is_none()
    })
}

fn is_loopback_host(parsed: &url::Url) -> bool {
    match parsed.host() {
        Some(url::Host::Domain(domain)) => domain.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
        None => false,
    }
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
        client_secret: ClientSecret(secret),
        cache_secs: bounded(
            "introspection.cache_secs",
            raw.cache_secs,
            DEFAULT_INTROSPECTION_CACHE_SECS,
            (0, MAX_INTROSPECTION_CACHE_SECS),
        )?,
    })
}

impl IssuerConfig {
    /// The raw form (for `check-config`'s effective configuration); the secret is its path.
    pub(super) fn to_raw(&self) -> RawIssuer {
        let derived_issuer = self
            .tenant
            .as_ref()
            .is_some_and(|t| self.issuer == format!("https://login.microsoftonline.com/{t}/v2.0"));
        RawIssuer {
            name: Some(self.name.clone()),
            issuer: (!derived_issuer).then(|| self.issuer.clone()),
            audience: Some(OneOrMany::Many(self.audiences.clone())),
            preset: self.preset,
            tenant: self.tenant.clone(),
            client: self.client.clone(),
            jwks_uri: self.jwks_uri.clone(),
            jwks_file: self.jwks_file.clone(),
            algorithms: Some(
                self.algorithms
                    .iter()
                    .filter_map(|a| algorithm_name(*a))
                    .map(str::to_owned)
                    .collect(),
            ),
            clock_skew_secs: Some(u64::from(self.clock_skew_secs)),
            scope_claims: Some(self.scope_claims.clone()),
            role_claims: Some(self.role_claims.clone()),
            subject_claim: Some(self.subject_claim.clone()),
            name_claims: Some(self.name_claims.clone()),
            client_claims: Some(self.client_claims.clone()),
            refresh_secs: Some(self.refresh.as_secs()),
            roles: self.roles.clone(),
            introspection: self.introspection.as_ref().map(|i| RawIntrospection {
                endpoint: i.endpoint.clone(),
                client_id: Some(i.client_id.clone()),
                client_secret_file: Some(i.client_secret_file.clone()),
                cache_secs: Some(u64::from(i.cache_secs)),
            }),
        }
    }
}
