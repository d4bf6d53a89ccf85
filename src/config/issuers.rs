//! `[[auth.issuers]]`: the company's identity providers whose tokens tollgate accepts,
//! one table per provider, read into a checked [`IssuerConfig`].
//!
//! Each table names the provider (`name`), the exact `iss` its tokens carry (`issuer`),
//! the audiences tollgate answers to, where its signing keys come from (OpenID Connect
//! discovery, else RFC 8414; or a `jwks_uri`; or a local `jwks_file`), which algorithms are
//! allowed, and which claims carry the user, the client, the scopes and the roles. A
//! `roles` table turns role, group or scope values into tollgate scopes; an
//! `introspection` table lets opaque tokens be asked about (RFC 7662); a `login` table
//! makes the provider the place people sign in at when tollgate is the authorization
//! server of an MCP host (OpenID Connect, authorization code flow with PKCE): at most one
//! issuer has it.
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
//! The checks of a table (presets applied, every key's message) are in
//! `issuer_checks.rs`; `docs/identity.md` is the operator's reference.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use jsonwebtoken::Algorithm;
use serde::{Deserialize, Serialize};

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
    pub(super) fn word(self) -> &'static str {
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
    /// A secret read from a file.
    pub(super) fn new(secret: String) -> ClientSecret {
        ClientSecret(secret)
    }

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

/// The scopes asked for at sign-in when `login.scopes` is not set.
pub const DEFAULT_LOGIN_SCOPES: [&str; 3] = ["openid", "profile", "email"];

/// `[auth.issuers.login]`: tollgate as an OpenID Connect relying party of this provider,
/// where people sign in (authorization code flow with PKCE S256 and a `nonce`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginConfig {
    /// The client tollgate is registered as at the provider.
    pub client_id: String,
    /// Where the client secret was read from; `None`: a public client (PKCE only).
    pub client_secret_file: Option<PathBuf>,
    /// The client secret, read at load, sent with HTTP Basic (`client_secret_basic`).
    pub client_secret: Option<ClientSecret>,
    /// The scopes asked for, `openid` among them; no duplicates.
    pub scopes: Vec<String>,
    /// The authorization endpoint; `None`: the metadata's `authorization_endpoint`.
    pub authorization_endpoint: Option<String>,
    /// The token endpoint; `None`: the metadata's `token_endpoint`.
    pub token_endpoint: Option<String>,
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
    /// Sign-in of people at this provider, if configured (at most one issuer).
    pub login: Option<LoginConfig>,
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

pub(super) fn is_loopback_host(parsed: &url::Url) -> bool {
    match parsed.host() {
        Some(url::Host::Domain(domain)) => domain.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
        None => false,
    }
}

// ---------------------------------------------------------------------------------------
// The raw form.

/// A string or a list of strings (`audience`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "`audience` must be a string or a list of strings"
)]
pub(super) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub(super) fn into_vec(self) -> Vec<String> {
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
    pub(super) name: Option<String>,
    pub(super) issuer: Option<String>,
    pub(super) audience: Option<OneOrMany>,
    pub(super) preset: Option<Preset>,
    pub(super) tenant: Option<String>,
    pub(super) client: Option<String>,
    pub(super) jwks_uri: Option<String>,
    pub(super) jwks_file: Option<PathBuf>,
    pub(super) algorithms: Option<Vec<String>>,
    pub(super) clock_skew_secs: Option<u64>,
    pub(super) scope_claims: Option<Vec<String>>,
    pub(super) role_claims: Option<Vec<String>>,
    pub(super) subject_claim: Option<String>,
    pub(super) name_claims: Option<Vec<String>>,
    pub(super) client_claims: Option<Vec<String>>,
    pub(super) refresh_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) roles: BTreeMap<String, Vec<String>>,
    pub(super) introspection: Option<RawIntrospection>,
    pub(super) login: Option<RawLogin>,
}

/// `[auth.issuers.introspection]` as the file holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIntrospection {
    pub(super) endpoint: Option<String>,
    pub(super) client_id: Option<String>,
    pub(super) client_secret_file: Option<PathBuf>,
    pub(super) cache_secs: Option<u64>,
}

/// `[auth.issuers.login]` as the file holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLogin {
    pub(super) client_id: Option<String>,
    pub(super) client_secret_file: Option<PathBuf>,
    pub(super) scopes: Option<Vec<String>>,
    pub(super) authorization_endpoint: Option<String>,
    pub(super) token_endpoint: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Presets.

/// The claim defaults of a preset (or of none).
pub(super) struct ClaimDefaults {
    pub(super) scope: &'static [&'static str],
    pub(super) role: &'static [&'static str],
    pub(super) subject: &'static str,
    pub(super) name: &'static [&'static str],
    pub(super) client: &'static [&'static str],
}

const GENERIC_NAMES: &[&str] = &["preferred_username", "email", "name"];
const GENERIC_CLIENTS: &[&str] = &["azp", "client_id"];

pub(super) fn claim_defaults(preset: Option<Preset>) -> ClaimDefaults {
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

pub(super) fn owned(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
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
            login: self.login.as_ref().map(|l| RawLogin {
                client_id: Some(l.client_id.clone()),
                client_secret_file: l.client_secret_file.clone(),
                scopes: Some(l.scopes.clone()),
                authorization_endpoint: l.authorization_endpoint.clone(),
                token_endpoint: l.token_endpoint.clone(),
            }),
        }
    }

    /// The secret files this issuer reads (introspection's, login's), for the warning
    /// about files every user of the machine can read.
    pub fn secret_files(&self) -> Vec<&std::path::Path> {
        let introspection = self
            .introspection
            .as_ref()
            .map(|i| i.client_secret_file.as_path());
        let login = self
            .login
            .as_ref()
            .and_then(|l| l.client_secret_file.as_deref());
        introspection.into_iter().chain(login).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Overrides};

    /// Loads a configuration file holding `text`, with a secret file `secret` beside it.
    fn load(text: &str) -> Result<Config, String> {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("secret"), "s3cret\n").expect("write secret");
        std::fs::write(dir.path().join("empty"), "").expect("write empty");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, text).expect("write config");
        Config::load(Some(&path), &[], &Overrides::default()).map_err(|e| e.message().to_owned())
    }

    fn issuer(text: &str) -> IssuerConfig {
        let config = load(text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.auth.issuers.len(), 1);
        config.auth.issuers[0].clone()
    }

    fn refusal(text: &str) -> String {
        load(text).expect_err("the configuration is refused")
    }

    const CORP: &str = r#"
[[auth.issuers]]
name = "corp"
issuer = "https://idp.example.com/realms/acme"
audience = "https://tollgate.example.com/mcp"
"#;

    #[test]
    fn no_issuers_by_default_and_the_generic_defaults_without_a_preset() {
        assert!(load("").expect("loads").auth.issuers.is_empty());
        let corp = issuer(CORP);
        assert_eq!(corp.name, "corp");
        assert_eq!(
            corp.accepted_issuers,
            ["https://idp.example.com/realms/acme"]
        );
        assert_eq!(corp.audiences, ["https://tollgate.example.com/mcp"]);
        assert_eq!(corp.algorithms, DEFAULT_ALGORITHMS);
        assert_eq!(corp.clock_skew_secs, 60);
        assert_eq!(corp.scope_claims, ["scope", "scp"]);
        assert_eq!(corp.role_claims, ["roles"]);
        assert_eq!(corp.subject_claim, "sub");
        assert_eq!(corp.name_claims, ["preferred_username", "email", "name"]);
        assert_eq!(corp.client_claims, ["azp", "client_id"]);
        assert_eq!(corp.refresh, Duration::from_secs(300));
        assert_eq!(corp.discovery, Discovery::OpenIdThenOAuth);
        assert_eq!(corp.introspection, None);
    }

    #[test]
    fn entra_derives_both_issuers_from_the_tenant_and_its_claims() {
        let entra = issuer(
            r#"
[[auth.issuers]]
name = "entra"
preset = "entra"
tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47"
audience = ["api://tollgate", "6e74172b-be56-4843-9ff4-e66a39bb12e3"]
"#,
        );
        let tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47";
        assert_eq!(
            entra.issuer,
            format!("https://login.microsoftonline.com/{tenant}/v2.0")
        );
        assert_eq!(
            entra.accepted_issuers,
            [
                format!("https://login.microsoftonline.com/{tenant}/v2.0"),
                format!("https://sts.windows.net/{tenant}/")
            ]
        );
        assert_eq!(entra.audiences.len(), 2);
        assert_eq!(entra.scope_claims, ["scp"]);
        assert_eq!(entra.role_claims, ["roles"]);
        assert_eq!(entra.subject_claim, "oid");
        assert_eq!(
            entra.name_claims,
            ["preferred_username", "upn", "unique_name", "name"]
        );
        assert_eq!(entra.client_claims, ["azp", "appid"]);
    }

    #[test]
    fn the_other_presets_set_their_claims_and_keycloak_discovers_by_openid_only() {
        let keycloak = issuer(&format!(
            "{CORP}preset = \"keycloak\"\nclient = \"tollgate\"\n"
        ));
        assert_eq!(
            keycloak.role_claims,
            ["realm_access.roles", "resource_access.tollgate.roles"]
        );
        assert_eq!(keycloak.scope_claims, ["scope"]);
        assert_eq!(keycloak.discovery, Discovery::OpenIdOnly);
        let okta = issuer(&format!("{CORP}preset = \"okta\"\n"));
        assert_eq!(
            (okta.scope_claims, okta.role_claims),
            (vec!["scp".to_owned()], vec!["groups".to_owned()])
        );
        assert_eq!(okta.client_claims, ["cid", "azp", "client_id"]);
        let auth0 = issuer(&format!("{CORP}preset = \"auth0\"\n"));
        assert_eq!(auth0.scope_claims, ["scope", "permissions"]);
        assert!(auth0.role_claims.is_empty());
        let authentik = issuer(&format!("{CORP}preset = \"authentik\"\n"));
        assert_eq!(authentik.role_claims, ["groups"]);
        assert_eq!(authentik.name_claims[0], "preferred_username");
    }

    #[test]
    fn explicit_keys_win_over_the_preset() {
        let entra = issuer(
            r#"
[[auth.issuers]]
name = "entra"
preset = "entra"
tenant = "contoso"
issuer = "https://login.microsoftonline.com/contoso/v2.0/"
audience = "api://tollgate"
subject_claim = "sub"
scope_claims = ["scope"]
role_claims = ["groups"]
clock_skew_secs = 0
algorithms = ["RS256"]
refresh_secs = 600
"#,
        );
        assert_eq!(
            entra.issuer,
            "https://login.microsoftonline.com/contoso/v2.0/"
        );
        assert_eq!(
            entra.accepted_issuers[1],
            "https://sts.windows.net/contoso/"
        );
        assert_eq!(entra.subject_claim, "sub");
        assert_eq!(entra.scope_claims, ["scope"]);
        assert_eq!(entra.role_claims, ["groups"]);
        assert_eq!(entra.clock_skew_secs, 0);
        assert_eq!(entra.algorithms, [Algorithm::RS256]);
        assert_eq!(entra.refresh, Duration::from_secs(600));
        let keycloak = issuer(&format!(
            "{CORP}preset = \"keycloak\"\nclient = \"tollgate\"\nrole_claims = [\"groups\"]\n"
        ));
        assert_eq!(keycloak.role_claims, ["groups"]);
    }

    #[test]
    fn plain_http_is_refused_off_loopback() {
        let text = CORP.replace("https://idp.example.com", "http://idp.example.com");
        let message = refusal(&text);
        assert!(
            message.starts_with("auth.issuers[0] (corp): `issuer`"),
            "{message}"
        );
        assert!(message.contains("must use https://"), "{message}");
        for host in [
            "127.0.0.1:8080",
            "127.5.0.1",
            "[::1]:9000",
            "localhost:8080",
        ] {
            let text = CORP.replace("https://idp.example.com", &format!("http://{host}"));
            assert!(load(&text).is_ok(), "{host}");
        }
        let text = format!("{CORP}jwks_uri = \"http://keys.example.com/jwks\"\n");
        assert!(refusal(&text).contains("`jwks_uri`"));
        let text = CORP.replace("https://idp", "https://user:pw@idp");
        assert!(refusal(&text).contains("user name or password"));
    }

    #[test]
    fn none_and_hmac_algorithms_are_refused_with_the_reason() {
        let message = refusal(&format!("{CORP}algorithms = [\"RS256\", \"none\"]\n"));
        assert_eq!(
            message,
            "auth.issuers[0] (corp): `algorithms`: \"none\" means an unsigned token, which \
             tollgate never accepts; remove it"
        );
        let message = refusal(&format!("{CORP}algorithms = [\"HS256\"]\n"));
        assert!(message.contains("HS256 is an HMAC algorithm"), "{message}");
        let message = refusal(&format!("{CORP}algorithms = [\"RS1024\"]\n"));
        assert!(
            message.contains("\"RS1024\" is not one of RS256"),
            "{message}"
        );
        let every = "[\"RS384\", \"RS512\", \"PS384\", \"PS512\", \"ES384\", \"eddsa\"]";
        let corp = issuer(&format!("{CORP}algorithms = {every}\n"));
        assert_eq!(corp.algorithms.len(), 6);
        assert!(corp.algorithms.contains(&Algorithm::EdDSA));
    }

    #[test]
    fn a_missing_audience_issuer_or_name_is_refused() {
        let text = CORP.replace("audience = \"https://tollgate.example.com/mcp\"\n", "");
        let message = refusal(&text);
        assert!(
            message.starts_with("auth.issuers[0] (corp): `audience` is required"),
            "{message}"
        );
        let message = refusal(&CORP.replace(
            "audience = \"https://tollgate.example.com/mcp\"",
            "audience = []",
        ));
        assert!(message.contains("`audience` is required"), "{message}");
        let message =
            refusal(&CORP.replace("issuer = \"https://idp.example.com/realms/acme\"\n", ""));
        assert!(message.contains("`issuer` is required"), "{message}");
        let message = refusal(&CORP.replace("name = \"corp\"\n", ""));
        assert!(
            message.starts_with("auth.issuers[0]: `name` is required"),
            "{message}"
        );
        let message = refusal(&CORP.replace("\"corp\"", "\"Corp_1\""));
        assert!(message.contains("`name` must be 1 to 32"), "{message}");
        let message = refusal(&format!("{CORP}{CORP}"));
        assert_eq!(
            message,
            "auth.issuers[1] (corp): another issuer already has this name"
        );
        let message = refusal(&format!("{CORP}{}", CORP.replace("\"corp\"", "\"other\"")));
        assert!(
            message.contains("already trusted by another entry"),
            "{message}"
        );
        let message =
            refusal("[[auth.issuers]]\nname = \"e\"\npreset = \"entra\"\naudience = \"a\"\n");
        assert!(
            message.contains("`tenant` (or `issuer`) is required"),
            "{message}"
        );
    }

    #[test]
    fn preset_only_keys_are_refused_elsewhere() {
        let message = refusal(&format!("{CORP}tenant = \"contoso\"\n"));
        assert!(
            message.starts_with(
                "auth.issuers[0] (corp): `tenant` is only valid with preset = \"entra\" (this \
                 issuer has no preset)"
            ),
            "{message}"
        );
        let message = refusal(&format!("{CORP}preset = \"okta\"\ntenant = \"contoso\"\n"));
        assert!(
            message.contains("(this issuer has preset \"okta\")"),
            "{message}"
        );
        let message = refusal(&format!("{CORP}preset = \"entra\"\nclient = \"x\"\n"));
        assert!(
            message.contains("`client` is only valid with preset = \"keycloak\""),
            "{message}"
        );
        let message = refusal(&format!("{CORP}preset = \"entra\"\ntenant = \"a/b\"\n"));
        assert!(message.contains("is not a tenant id"), "{message}");
    }

    #[test]
    fn unknown_keys_and_presets_are_refused_with_the_valid_ones() {
        let message = refusal(&format!("{CORP}audiences = [\"x\"]\n"));
        assert!(message.contains("unknown field `audiences`"), "{message}");
        assert!(message.contains("`audience`"), "{message}");
        let message = refusal(&format!("{CORP}preset = \"google\"\n"));
        assert!(message.contains("unknown variant `google`"), "{message}");
        assert!(message.contains("`authentik`"), "{message}");
        let message = refusal(&format!(
            "{CORP}[auth.issuers.introspection]\nclient_id = \"t\"\nclient_secret_file = \"secret\"\nsecret = \"x\"\n"
        ));
        assert!(message.contains("unknown field `secret`"), "{message}");
        let message = refusal(&CORP.replace("\"https://tollgate.example.com/mcp\"", "5"));
        assert!(message.contains("(audience = …)"), "{message}");
        assert!(
            message.ends_with("): `audience` must be a string or a list of strings"),
            "{message}"
        );
    }

    #[test]
    fn bounds_and_the_roles_table_are_checked() {
        let message = refusal(&format!("{CORP}clock_skew_secs = 601\n"));
        assert_eq!(
            message,
            "auth.issuers[0] (corp): `clock_skew_secs` = 601 is out of range: it must be \
             between 0 and 600"
        );
        assert!(refusal(&format!("{CORP}refresh_secs = 10\n")).contains("`refresh_secs` = 10"));
        let corp = issuer(&format!(
            "{CORP}[auth.issuers.roles]\n\"invoice-clerks\" = [\"invoices:read\", \"invoices:write\"]\nops = [\"*\", \"admin\"]\n"
        ));
        assert_eq!(
            corp.roles["invoice-clerks"],
            ["invoices:read", "invoices:write"]
        );
        assert_eq!(corp.roles["ops"], ["*", "admin"]);
        let message = refusal(&format!(
            "{CORP}[auth.issuers.roles]\nclerks = [\"Invoices.Read\"]\n"
        ));
        assert!(
            message.contains("`roles.\"clerks\"`: \"Invoices.Read\" is not a tollgate scope"),
            "{message}"
        );
        assert!(refusal(&format!("{CORP}role_claims = [\"a..b\"]\n")).contains("`role_claims`"));
    }

    #[test]
    fn introspection_reads_its_secret_at_load() {
        let corp = issuer(&format!(
            "{CORP}[auth.issuers.introspection]\nclient_id = \"tollgate\"\nclient_secret_file = \"secret\"\n"
        ));
        let introspection = corp.introspection.expect("introspection");
        assert_eq!(introspection.client_secret.expose(), "s3cret");
        assert_eq!(introspection.cache_secs, 60);
        assert_eq!(introspection.endpoint, None);
        assert!(!format!("{introspection:?}").contains("s3cret"));
        let missing = refusal(&format!(
            "{CORP}[auth.issuers.introspection]\nclient_id = \"tollgate\"\nclient_secret_file = \"nowhere\"\n"
        ));
        assert!(
            missing.contains("`introspection.client_secret_file`: cannot read the secret file"),
            "{missing}"
        );
        let empty = refusal(&format!(
            "{CORP}[auth.issuers.introspection]\nclient_id = \"tollgate\"\nclient_secret_file = \"empty\"\n"
        ));
        assert!(empty.contains("is empty"), "{empty}");
        let offline = refusal(&format!(
            "{CORP}jwks_file = \"keys.json\"\n[auth.issuers.introspection]\nclient_id = \"t\"\nclient_secret_file = \"secret\"\n"
        ));
        assert!(
            offline.contains("give the introspection `endpoint` too"),
            "{offline}"
        );
    }

    const LOGIN: &str = "[auth.issuers.login]\nclient_id = \"tollgate\"\n";

    #[test]
    fn login_defaults_to_a_public_client_asking_openid_profile_email() {
        assert_eq!(issuer(CORP).login, None);
        let login = issuer(&format!("{CORP}{LOGIN}")).login.expect("login");
        assert_eq!(login.client_id, "tollgate");
        assert_eq!(login.scopes, ["openid", "profile", "email"]);
        assert_eq!(login.client_secret, None);
        assert_eq!(login.client_secret_file, None);
        assert_eq!(
            (login.authorization_endpoint, login.token_endpoint),
            (None, None)
        );
        let corp = issuer(&format!(
            "{CORP}{LOGIN}client_secret_file = \"secret\"\nscopes = [\"openid\", \"groups\", \"openid\"]\n\
             authorization_endpoint = \"https://idp.example.com/auth\"\n\
             token_endpoint = \"http://127.0.0.1:8080/token\"\n"
        ));
        let login = corp.login.clone().expect("login");
        assert_eq!(
            login.client_secret.as_ref().map(ClientSecret::expose),
            Some("s3cret")
        );
        assert!(!format!("{corp:?}").contains("s3cret"));
        assert_eq!(login.scopes, ["openid", "groups"], "duplicates dropped");
        assert_eq!(
            login.authorization_endpoint.as_deref(),
            Some("https://idp.example.com/auth")
        );
        assert_eq!(
            corp.secret_files(),
            [login.client_secret_file.as_deref().expect("file")]
        );
    }

    #[test]
    fn login_refusals_name_the_key() {
        let message = refusal(&format!(
            "{CORP}[auth.issuers.login]\nscopes = [\"openid\"]\n"
        ));
        assert!(
            message.starts_with("auth.issuers[0] (corp): `login.client_id` is required"),
            "{message}"
        );
        let message = refusal(&format!("{CORP}{LOGIN}scopes = [\"profile\", \"email\"]\n"));
        assert!(
            message.starts_with("auth.issuers[0] (corp): `login.scopes` must contain \"openid\""),
            "{message}"
        );
        let message = refusal(&format!("{CORP}{LOGIN}scopes = [\"openid email\"]\n"));
        assert!(
            message.contains("`login.scopes`: \"openid email\" is not a scope"),
            "{message}"
        );
        let message = refusal(&format!("{CORP}{LOGIN}client_secret = \"x\"\n"));
        assert!(
            message.contains("unknown field `client_secret`"),
            "{message}"
        );
        assert!(message.contains("`client_secret_file`"), "{message}");
        let message = refusal(&format!("{CORP}{LOGIN}client_secret_file = \"empty\"\n"));
        assert!(
            message.contains("`login.client_secret_file`: the secret file")
                && message.contains("is empty"),
            "{message}"
        );
        let message = refusal(&format!(
            "{CORP}{LOGIN}token_endpoint = \"http://idp.example.com/token\"\n"
        ));
        assert!(message.contains("`login.token_endpoint`"), "{message}");
        assert!(message.contains("must use https://"), "{message}");
        let message = refusal(&format!("{CORP}jwks_file = \"keys.json\"\n{LOGIN}"));
        assert!(
            message.contains("give `login.authorization_endpoint` and `login.token_endpoint`"),
            "{message}"
        );
    }

    #[test]
    fn only_one_issuer_may_have_login() {
        let other = CORP
            .replace("\"corp\"", "\"other\"")
            .replace("realms/acme", "realms/other");
        assert!(load(&format!("{CORP}{LOGIN}{other}")).is_ok());
        let message = refusal(&format!("{CORP}{LOGIN}{other}{LOGIN}"));
        assert_eq!(
            message,
            "auth.issuers[1] (other): `login`: auth.issuers[0] (corp) has a `login` table \
             already; people sign in at one provider: keep `login` on one issuer only"
        );
    }

    #[test]
    fn the_effective_configuration_round_trips() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("secret"), "s3cret\n").expect("write secret");
        let path = dir.path().join("config.toml");
        let text = format!(
            "{CORP}preset = \"keycloak\"\nclient = \"tollgate\"\n[auth.issuers.roles]\nclerks = [\"invoices:read\"]\n\
             [auth.issuers.introspection]\nclient_id = \"tollgate\"\nclient_secret_file = \"secret\"\ncache_secs = 0\n\
             [auth.issuers.login]\nclient_id = \"tollgate\"\nclient_secret_file = \"secret\"\n\
             [[auth.issuers]]\nname = \"entra\"\npreset = \"entra\"\ntenant = \"t1\"\naudience = \"api://x\"\n"
        );
        std::fs::write(&path, text).expect("write config");
        let first = Config::load(Some(&path), &[], &Overrides::default()).expect("loads");
        assert!(!first.describe().contains("s3cret"));
        std::fs::write(&path, first.describe()).expect("write effective");
        let second = Config::load(Some(&path), &[], &Overrides::default()).expect("reloads");
        assert_eq!(first.auth.issuers, second.auth.issuers);
        assert_eq!(second.auth.issuers.len(), 2);
        assert!(second.auth.issuers[0].login.is_some());
    }

    #[test]
    fn every_configuration_block_of_the_identity_guide_loads() {
        let guide = include_str!("../../docs/identity.md");
        let blocks: Vec<&str> = guide
            .split("```toml\n")
            .skip(1)
            .map(|rest| rest.split("```").next().unwrap_or_default())
            .collect();
        assert_eq!(
            blocks.len(),
            7,
            "the reference, sign-in and one block per provider"
        );
        for block in blocks {
            let text = block
                .replace("/etc/tollgate/introspect.secret", "secret")
                .replace("/etc/tollgate/keycloak.secret", "secret")
                .replace("/etc/tollgate/login.secret", "secret");
            let issuers = load(&text)
                .unwrap_or_else(|e| panic!("{e}\n{block}"))
                .auth
                .issuers;
            assert_eq!(issuers.len(), 1, "{block}");
        }
    }

    #[test]
    fn the_tool_scope_shape_matches_the_guards_grammar() {
        for scope in ["invoices:read", "a:b", "crm-v2:write_all"] {
            assert!(is_tool_scope(scope), "{scope}");
        }
        for not in [
            "*",
            "admin",
            "Invoices:read",
            "invoices",
            "invoices:",
            ":read",
            "a:b:c",
            "1a:b",
        ] {
            assert!(!is_tool_scope(not), "{not}");
        }
    }
}
