//! A real OpenID Provider for the identity tests: `tests/idp/provider.mjs` runs the npm
//! package `oidc-provider` (a certified implementation nobody here wrote) on 127.0.0.1, and
//! [`Idp`] starts it, asks it for tokens over HTTP as a client would (client credentials with
//! a resource indicator: a JWT or an opaque access token), introspects and revokes them, and
//! stops it or restarts it with a new signing key. Its own tests check the provider does what
//! the identity tests rely on.
//!
//! Node comes from `TG_NODE` (else `node` on the `PATH`), the packages from `TG_IDP_MODULES`
//! (a `node_modules` directory) or `tests/idp/node_modules` (`npm ci --prefix tests/idp`);
//! without them every test here fails with that command.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::util::{HttpResponse, READ_TIMEOUT, http_request, read_lines};

/// The client every provider has for introspection and revocation (tollgate's own).
pub const INTROSPECTOR_ID: &str = "tollgate-introspector";

/// The secret of [`INTROSPECTOR_ID`].
pub const INTROSPECTOR_SECRET: &str = "introspector-secret-3f9c1a";

/// The command that installs the provider's packages where the harness looks by default.
const INSTALL_COMMAND: &str = "npm ci --prefix tests/idp";

/// The form of a client's access tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenFormat {
    /// A signed JWT (RFC 9068, `typ: at+jwt`).
    Jwt,
    /// A random string only introspection can explain.
    Opaque,
}

/// How a client authenticates at the token, introspection and revocation endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// `Authorization: Basic` (`client_secret_basic`).
    Basic,
    /// `client_id` and `client_secret` in the form (`client_secret_post`).
    Post,
}

/// The algorithm of the provider's signing key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SigningAlg {
    /// RSA 2048, RS256.
    #[default]
    Rs256,
    /// P-256, ES256.
    Es256,
}

impl SigningAlg {
    /// Its JOSE name.
    pub fn name(self) -> &'static str {
        match self {
            SigningAlg::Rs256 => "RS256",
            SigningAlg::Es256 => "ES256",
        }
    }
}

/// One client registered at the provider, for the client credentials grant.
#[derive(Debug, Clone)]
pub struct IdpClient {
    /// Its client id (also the tokens' `sub` unless [`IdpClient::subject`] is set).
    pub id: String,
    /// Its secret (`secret-of-<id>` unless set).
    pub secret: String,
    /// How it authenticates (Basic unless set).
    pub auth: ClientAuth,
    /// The form of its access tokens.
    pub format: TokenFormat,
    /// The scopes it may be granted; a request for others is granted without them.
    pub scopes: Vec<String>,
    /// The `roles` claim of its tokens, when set.
    pub roles: Option<Vec<String>>,
    /// The `groups` claim of its tokens, when set.
    pub groups: Option<Vec<String>>,
    /// Further claims of its tokens (any JSON: `realm_access`, `scp`, `email`…).
    pub claims: Map<String, Value>,
    /// The `sub` of its tokens in place of its client id.
    pub subject: Option<String>,
    /// The lifetime of its access tokens (600 s unless set).
    pub ttl_secs: Option<u64>,
    /// How far its JWTs' `iat`/`exp` are moved into the past (negative: the future, with an
    /// `nbf`): a token signed by the provider that is already expired or not yet valid.
    pub time_shift_secs: i64,
    /// Redirect URIs: when set it may also use the authorization code flow.
    pub redirect_uris: Vec<String>,
}

impl IdpClient {
    /// A client whose access tokens are JWTs.
    pub fn jwt(id: &str) -> IdpClient {
        IdpClient {
            id: id.to_owned(),
            secret: format!("secret-of-{id}"),
            auth: ClientAuth::Basic,
            format: TokenFormat::Jwt,
            scopes: Vec::new(),
            roles: None,
            groups: None,
            claims: Map::new(),
            subject: None,
            ttl_secs: None,
            time_shift_secs: 0,
            redirect_uris: Vec::new(),
        }
    }

    /// A client whose access tokens are opaque.
    pub fn opaque(id: &str) -> IdpClient {
        IdpClient {
            format: TokenFormat::Opaque,
            ..IdpClient::jwt(id)
        }
    }

    /// With these grantable scopes.
    pub fn scopes(mut self, scopes: &[&str]) -> IdpClient {
        self.scopes = strings(scopes);
        self
    }

    /// With this `roles` claim.
    pub fn roles(mut self, roles: &[&str]) -> IdpClient {
        self.roles = Some(strings(roles));
        self
    }

    /// With this `groups` claim.
    pub fn groups(mut self, groups: &[&str]) -> IdpClient {
        self.groups = Some(strings(groups));
        self
    }

    /// With one more claim.
    pub fn claim(mut self, name: &str, value: Value) -> IdpClient {
        self.claims.insert(name.to_owned(), value);
        self
    }

    /// With this `sub` in its tokens.
    pub fn subject(mut self, subject: &str) -> IdpClient {
        self.subject = Some(subject.to_owned());
        self
    }

    /// With this secret.
    pub fn secret(mut self, secret: &str) -> IdpClient {
        self.secret = secret.to_owned();
        self
    }

    /// Authenticating this way.
    pub fn auth(mut self, auth: ClientAuth) -> IdpClient {
        self.auth = auth;
        self
    }

    /// With access tokens living this long.
    pub fn ttl_secs(mut self, secs: u64) -> IdpClient {
        self.ttl_secs = Some(secs);
        self
    }

    /// With its JWTs' times moved this far into the past (negative: the future).
    pub fn time_shift_secs(mut self, secs: i64) -> IdpClient {
        self.time_shift_secs = secs;
        self
    }

    /// Allowed the authorization code flow back to these redirect URIs.
    pub fn redirect_uris(mut self, uris: &[&str]) -> IdpClient {
        self.redirect_uris = strings(uris);
        self
    }

    /// Its entry in the provider's configuration file.
    fn config(&self) -> Value {
        let mut entry = json!({
            "client_id": self.id,
            "client_secret": self.secret,
            "auth_method": match self.auth {
                ClientAuth::Basic => "client_secret_basic",
                ClientAuth::Post => "client_secret_post",
            },
            "format": match self.format {
                TokenFormat::Jwt => "jwt",
                TokenFormat::Opaque => "opaque",
            },
            "scopes": self.scopes,
            "claims": self.claims,
            "time_shift_secs": self.time_shift_secs,
            "redirect_uris": self.redirect_uris,
        });
        let optional = [
            ("roles", self.roles.as_ref().map(|r| json!(r))),
            ("groups", self.groups.as_ref().map(|g| json!(g))),
            ("subject", self.subject.as_ref().map(|s| json!(s))),
            ("ttl_secs", self.ttl_secs.map(|t| json!(t))),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                entry[name] = value;
            }
        }
        entry
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// What provider to start.
#[derive(Debug, Clone)]
pub struct IdpOptions {
    /// Its clients, beside the introspector it always has.
    pub clients: Vec<IdpClient>,
    /// Its port on 127.0.0.1 (0: one it picks).
    pub port: u16,
    /// The algorithm of its signing key.
    pub alg: SigningAlg,
    /// How the introspector authenticates.
    pub introspector_auth: ClientAuth,
    /// The people who sign in, by login: the claims of each (`name`, `roles`, …), which
    /// their ID tokens carry.
    pub accounts: Value,
}

impl IdpOptions {
    /// These clients, an RS256 key, any port, the introspector on Basic authentication.
    pub fn new(clients: Vec<IdpClient>) -> IdpOptions {
        IdpOptions {
            clients,
            port: 0,
            alg: SigningAlg::Rs256,
            introspector_auth: ClientAuth::Basic,
            accounts: json!({}),
        }
    }

    /// The same provider with a person who signs in as `login`, with `claims`.
    pub fn account(mut self, login: &str, claims: Value) -> IdpOptions {
        self.accounts[login] = claims;
        self
    }

    /// All clients, the introspector included.
    fn all_clients(&self) -> Vec<IdpClient> {
        let introspector = IdpClient::jwt(INTROSPECTOR_ID)
            .secret(INTROSPECTOR_SECRET)
            .auth(self.introspector_auth);
        let mut clients = self.clients.clone();
        clients.push(introspector);
        clients
    }
}

/// A running (or stopped) `tests/idp/provider.mjs`; killed on drop.
pub struct Idp {
    /// Its scratch directory: the script, its configuration, keys and log.
    dir: tempfile::TempDir,
    options: IdpOptions,
    /// Its port, fixed at the first start so the issuer stays the same.
    port: u16,
    /// The line it printed once ready.
    ready: Value,
    process: Option<Running>,
}

/// The provider's process while it runs.
struct Running {
    child: Child,
    /// Held open: the provider exits when it closes.
    _stdin: ChildStdin,
    /// Its stdout after the ready line, drained on a thread.
    _stdout: Receiver<String>,
}

impl Idp {
    /// Writes a fresh signing key and starts the provider with `options`.
    pub fn start(options: &IdpOptions) -> Idp {
        let modules = modules_dir().unwrap_or_else(|message| panic!("{message}"));
        let dir = tempfile::tempdir().expect("tempdir for the provider");
        std::fs::copy(script_path(), dir.path().join("provider.mjs")).expect("copy provider.mjs");
        std::os::unix::fs::symlink(&modules, dir.path().join("node_modules"))
            .expect("link node_modules");
        let mut idp = Idp {
            dir,
            options: options.clone(),
            port: options.port,
            ready: Value::Null,
            process: None,
        };
        idp.write_new_keys();
        idp.start_again();
        idp
    }

    /// Its issuer, `http://127.0.0.1:<port>`.
    pub fn issuer(&self) -> &str {
        self.ready["issuer"]
            .as_str()
            .expect("issuer in the ready line")
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The URL of its key set.
    pub fn jwks_uri(&self) -> String {
        self.endpoint_url("jwks_uri")
    }

    /// Its OpenID Connect discovery document.
    pub fn discovery(&self) -> Value {
        self.get("/.well-known/openid-configuration")
    }

    /// Its public key set, as served.
    pub fn jwks(&self) -> Value {
        let path = self.endpoint_path("jwks_uri");
        self.get(&path)
    }

    /// The `kid` of its signing key.
    pub fn signing_kid(&self) -> String {
        let keys: Value = read_json(&self.keys_file());
        keys["keys"][0]["kid"]
            .as_str()
            .expect("kid in the key file")
            .to_owned()
    }

    /// A file holding the introspector's secret (tollgate reads secrets from files).
    pub fn introspection_secret_file(&self) -> PathBuf {
        let path = self.dir.path().join("introspector.secret");
        std::fs::write(&path, INTROSPECTOR_SECRET).expect("write the introspector's secret");
        path
    }

    /// The token endpoint's answer to `client` asking for `scope` (space-separated) on
    /// `resource` (an absolute URI, the tokens' audience) by client credentials.
    pub fn token_response(&self, client: &str, scope: &str, resource: Option<&str>) -> Value {
        let client = self.client(client);
        let mut form = vec![("grant_type", "client_credentials"), ("scope", scope)];
        form.extend(resource.map(|r| ("resource", r)));
        let response = self.post(&self.endpoint_path("token_endpoint"), client, &form);
        let body = response.json();
        assert!(
            response.status == 200 || body.get("error").is_some(),
            "token endpoint: {} {body}",
            response.status
        );
        body
    }

    /// A JWT access token for `client` (a [`TokenFormat::Jwt`] one) with `scope` on
    /// `resource`.
    pub fn client_credentials_token(&self, client: &str, scope: &str, resource: &str) -> String {
        let token = self.access_token(client, scope, resource);
        assert_eq!(token.split('.').count(), 3, "not a JWT: {token}");
        token
    }

    /// An opaque access token for `client` (a [`TokenFormat::Opaque`] one) with `scope` on
    /// `resource`.
    pub fn opaque_token(&self, client: &str, scope: &str, resource: &str) -> String {
        let token = self.access_token(client, scope, resource);
        assert!(!token.contains('.'), "not an opaque token: {token}");
        token
    }

    /// What introspection (RFC 7662) says of `token`, asked as the introspector.
    pub fn introspect(&self, token: &str) -> Value {
        let introspector = self.client(INTROSPECTOR_ID);
        let path = self.endpoint_path("introspection_endpoint");
        let response = self.post(&path, introspector, &[("token", token)]);
        assert_eq!(response.status, 200, "introspection: {}", response.json());
        response.json()
    }

    /// Revokes `token` (RFC 7009), as the introspector.
    pub fn revoke(&self, token: &str) {
        let introspector = self.client(INTROSPECTOR_ID);
        let path = self.endpoint_path("revocation_endpoint");
        let response = self.post(&path, introspector, &[("token", token)]);
        assert_eq!(response.status, 200, "revocation: {:?}", response.body);
    }

    /// What a person's browser does with an authorization URL of this provider: follows
    /// it, signs in as `login` on the provider's development login page, consents, and
    /// stops at the redirect to the client's callback, whose query it returns (`code`,
    /// `state`, `iss`, or `error`). Cookies are kept between the steps as a browser would.
    pub fn sign_in(&self, authorization_url: &str, login: &str) -> BTreeMap<String, String> {
        let mut cookies = BTreeMap::<String, String>::new();
        let mut next = self.local_path(authorization_url);
        for _ in 0..12 {
            let cookie = cookie_header(&cookies);
            let headers = [("Cookie", cookie.as_str())];
            let response = if next.starts_with("/interaction/") {
                let page = http_request(self.addr(), "GET", &next, &headers, b"");
                keep_cookies(&mut cookies, &page);
                let mut prompt = form_urlencoded::Serializer::new(String::new());
                if String::from_utf8_lossy(&page.body).contains("name=\"login\"") {
                    prompt.extend_pairs([("prompt", "login"), ("login", login), ("password", "-")]);
                } else {
                    prompt.append_pair("prompt", "consent");
                }
                let prompt = prompt.finish();
                let cookie = cookie_header(&cookies);
                let form = [
                    ("Cookie", cookie.as_str()),
                    ("Content-Type", "application/x-www-form-urlencoded"),
                ];
                http_request(self.addr(), "POST", &next, &form, prompt.as_bytes())
            } else {
                http_request(self.addr(), "GET", &next, &headers, b"")
            };
            keep_cookies(&mut cookies, &response);
            let body = String::from_utf8_lossy(&response.body).into_owned();
            assert!(
                [302, 303].contains(&response.status),
                "{next}: HTTP {}: {body}",
                response.status
            );
            let location = response.header("location").expect("a redirect").to_owned();
            let is_here = location.starts_with('/') || location.starts_with(self.issuer());
            if !is_here {
                let url = url::Url::parse(&location).expect("the callback URL");
                return url.query_pairs().into_owned().collect();
            }
            next = self.local_path(&location);
        }
        panic!("the sign-in did not come back to the client within 12 steps");
    }

    /// The path and query of `url` on this provider (`url` absolute or a path already).
    fn local_path(&self, url: &str) -> String {
        url.strip_prefix(self.issuer()).unwrap_or(url).to_owned()
    }

    /// Stops the provider; it stays stopped until [`Idp::start_again`]. Tokens it issued
    /// are forgotten (its store is in memory): opaque ones are inactive from then on.
    pub fn stop(&mut self) {
        if let Some(mut running) = self.process.take() {
            let _ = running.child.kill();
            let _ = running.child.wait();
        }
    }

    /// Starts the stopped provider again on the same port with the same keys.
    pub fn start_again(&mut self) {
        assert!(self.process.is_none(), "the provider is already running");
        self.write_config();
        let mut child = self
            .serve_command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(self.log_path()).expect("provider log"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {} (set TG_NODE): {e}", node()));
        let stdin = child.stdin.take().expect("provider stdin");
        let stdout = read_lines(child.stdout.take().expect("provider stdout"));
        let Ok(line) = stdout.recv_timeout(READ_TIMEOUT) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the provider did not start: {}", self.log());
        };
        self.ready = serde_json::from_str(&line).expect("the provider's ready line");
        self.port = self.ready["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .expect("port in the ready line");
        self.process = Some(Running {
            child,
            _stdin: stdin,
            _stdout: stdout,
        });
    }

    /// `provider.mjs serve` on the configuration last written.
    fn serve_command(&self) -> Command {
        let mut command = Command::new(node());
        command
            .args(["provider.mjs", "serve", "config.json"])
            .current_dir(self.dir.path());
        command
    }

    /// Stops the provider, gives it a new signing key (the old one gone) and starts it
    /// again on the same port.
    pub fn restart_with_new_key(&mut self) {
        self.stop();
        self.write_new_keys();
        self.start_again();
    }

    /// What the provider wrote on stderr.
    pub fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = std::fs::File::open(self.log_path()) {
            let _ = file.read_to_string(&mut text);
        }
        text
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("provider.log")
    }

    fn keys_file(&self) -> PathBuf {
        self.dir.path().join("keys.json")
    }

    fn write_new_keys(&self) {
        let output = Command::new(node())
            .args([
                "provider.mjs",
                "newkeys",
                "keys.json",
                self.options.alg.name(),
            ])
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("spawn {} (set TG_NODE): {e}", node()));
        assert!(
            output.status.success(),
            "provider.mjs newkeys: {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn write_config(&self) {
        let clients: Vec<Value> = self
            .options
            .all_clients()
            .iter()
            .map(IdpClient::config)
            .collect();
        let config = json!({
            "keys": "keys.json", "port": self.port, "clients": clients,
            "accounts": self.options.accounts,
        });
        std::fs::write(self.dir.path().join("config.json"), config.to_string())
            .expect("write the provider's configuration");
    }

    fn client(&self, id: &str) -> IdpClient {
        self.options
            .all_clients()
            .into_iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("no client {id} at the provider"))
    }

    fn access_token(&self, client: &str, scope: &str, resource: &str) -> String {
        let body = self.token_response(client, scope, Some(resource));
        body["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access token: {body}"))
            .to_owned()
    }

    /// The URL the ready line gives for `name`.
    fn endpoint_url(&self, name: &str) -> String {
        self.ready[name]
            .as_str()
            .unwrap_or_else(|| panic!("no {name} in {}", self.ready))
            .to_owned()
    }

    /// The path of the URL the ready line gives for `name`.
    fn endpoint_path(&self, name: &str) -> String {
        let url = self.endpoint_url(name);
        url.strip_prefix(self.issuer())
            .unwrap_or_else(|| panic!("{name} {url} is not under the issuer"))
            .to_owned()
    }

    fn get(&self, path: &str) -> Value {
        let response = http_request(self.addr(), "GET", path, &[], b"");
        assert_eq!(response.status, 200, "GET {path}: {:?}", response.body);
        response.json()
    }

    /// POSTs `form` to `path`, authenticated as `client`.
    fn post(&self, path: &str, client: IdpClient, form: &[(&str, &str)]) -> HttpResponse {
        let mut body = form_urlencoded::Serializer::new(String::new());
        body.extend_pairs(form);
        let mut headers = vec![(
            "Content-Type",
            "application/x-www-form-urlencoded".to_owned(),
        )];
        match client.auth {
            ClientAuth::Basic => headers.push(("Authorization", basic(&client))),
            ClientAuth::Post => {
                body.append_pair("client_id", &client.id);
                body.append_pair("client_secret", &client.secret);
            }
        }
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        http_request(
            self.addr(),
            "POST",
            path,
            &headers,
            body.finish().as_bytes(),
        )
    }
}

impl Drop for Idp {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `Basic` credentials of `client` (RFC 6749 §2.3.1: both parts form-encoded first).
fn basic(client: &IdpClient) -> String {
    let encode = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let pair = format!("{}:{}", encode(&client.id), encode(&client.secret));
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// The `Cookie` header of a browser holding `cookies`.
fn cookie_header(cookies: &BTreeMap<String, String>) -> String {
    cookies
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Keeps the cookies `response` sets (an emptied one is dropped), by name.
fn keep_cookies(cookies: &mut BTreeMap<String, String>, response: &HttpResponse) {
    let set = response
        .headers
        .iter()
        .filter(|(name, _)| name == "set-cookie")
        .filter_map(|(_, value)| value.split(';').next()?.split_once('='));
    for (name, value) in set {
        if value.is_empty() {
            cookies.remove(name);
        } else {
            cookies.insert(name.to_owned(), value.to_owned());
        }
    }
}

/// The header and the claims of a JWT, decoded (not verified).
pub fn jwt_parts(token: &str) -> (Value, Value) {
    let decode = |part: &str| -> Value {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part)
            .unwrap_or_else(|e| panic!("JWT part is not base64url ({e}): {part}"));
        serde_json::from_slice(&bytes).expect("JWT part is JSON")
    };
    let mut parts = token.split('.');
    let header = decode(parts.next().expect("JWT header"));
    let claims = decode(parts.next().expect("JWT claims"));
    (header, claims)
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

fn script_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/idp/provider.mjs")
}

/// The Node binary: `TG_NODE`, else `node` on the `PATH`.
fn node() -> String {
    std::env::var("TG_NODE").unwrap_or_else(|_| "node".to_owned())
}

/// The `node_modules` directory holding the provider's packages (`TG_IDP_MODULES`, else
/// `tests/idp/node_modules`), or what to run when they are missing.
fn modules_dir() -> Result<PathBuf, String> {
    let dir = std::env::var_os("TG_IDP_MODULES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/idp/node_modules"),
        PathBuf::from,
    );
    check_modules(&dir)
}

/// `dir` when it holds `oidc-provider` and `jose`, else the message naming the command
/// that installs them.
fn check_modules(dir: &Path) -> Result<PathBuf, String> {
    if dir.file_name().is_none_or(|name| name != "node_modules") {
        // Node finds a package's own dependencies only in a folder of that name.
        return Err(format!(
            "TG_IDP_MODULES must name a node_modules directory, not {}",
            dir.display()
        ));
    }
    let installed = ["oidc-provider", "jose"]
        .iter()
        .all(|package| dir.join(package).join("package.json").is_file());
    if installed {
        Ok(dir.to_path_buf())
    } else {
        Err(format!(
            "the test OpenID Provider's npm packages are not in {}: run `{INSTALL_COMMAND}` \
             (or set TG_IDP_MODULES to a node_modules directory holding them)",
            dir.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESOURCE: &str = "http://127.0.0.1:9/mcp";

    fn alice() -> IdpClient {
        IdpClient::jwt("alice")
            .scopes(&["tools:call", "tools:list"])
            .roles(&["tollgate.admin"])
    }

    fn bob() -> IdpClient {
        IdpClient::jwt("bob")
            .scopes(&["tools:list"])
            .roles(&["tollgate.viewer"])
            .groups(&["support"])
            .auth(ClientAuth::Post)
    }

    fn opaque() -> IdpClient {
        IdpClient::opaque("service")
            .scopes(&["tools:call"])
            .roles(&["tollgate.caller"])
    }

    fn provider() -> Idp {
        Idp::start(&IdpOptions::new(vec![alice(), bob(), opaque()]))
    }

    #[test]
    fn provider_serves_discovery_with_its_public_keys() {
        let idp = provider();
        assert!(idp.issuer().starts_with("http://127.0.0.1:"));
        let discovery = idp.discovery();
        assert_eq!(discovery["issuer"], idp.issuer());
        assert_eq!(discovery["jwks_uri"], idp.jwks_uri());
        let introspection = format!("{}/token/introspection", idp.issuer());
        assert_eq!(discovery["introspection_endpoint"], introspection);
        let jwks = idp.jwks();
        let keys = jwks["keys"].as_array().expect("keys");
        assert_eq!(keys.len(), 1, "{jwks}");
        assert_eq!(keys[0]["kid"], idp.signing_kid());
        assert!(keys[0].get("d").is_none(), "private part served: {jwks}");
    }

    #[test]
    fn jwt_access_tokens_carry_the_resource_as_audience_and_each_clients_roles() {
        let idp = provider();
        let token = idp.client_credentials_token("alice", "tools:call not-granted", RESOURCE);
        let (header, claims) = jwt_parts(&token);
        assert_eq!(header["typ"], "at+jwt");
        assert_eq!(header["alg"], "RS256");
        assert_eq!(header["kid"], idp.signing_kid());
        assert_eq!(claims["iss"], idp.issuer());
        assert_eq!(claims["aud"], RESOURCE);
        assert_eq!(claims["sub"], "alice");
        assert_eq!(claims["scope"], "tools:call");
        assert_eq!(claims["roles"], json!(["tollgate.admin"]));

        let token = idp.client_credentials_token("bob", "tools:list", "api://tollgate");
        let (_, claims) = jwt_parts(&token);
        assert_eq!(claims["aud"], "api://tollgate");
        assert_eq!(claims["sub"], "bob");
        assert_eq!(claims["roles"], json!(["tollgate.viewer"]));
        assert_eq!(claims["groups"], json!(["support"]));
    }

    #[test]
    fn a_client_may_name_another_subject_and_claims() {
        let carol = IdpClient::jwt("agent-7")
            .subject("carol@example.com")
            .claim("realm_access", json!({"roles": ["mcp-user"]}));
        let idp = Idp::start(&IdpOptions::new(vec![carol]));
        let (_, claims) = jwt_parts(&idp.client_credentials_token("agent-7", "", RESOURCE));
        assert_eq!(claims["sub"], "carol@example.com");
        assert_eq!(claims["client_id"], "agent-7");
        assert_eq!(claims["realm_access"]["roles"], json!(["mcp-user"]));
    }

    #[test]
    fn shifted_times_give_expired_and_not_yet_valid_tokens() {
        let past = IdpClient::jwt("past").ttl_secs(60).time_shift_secs(3600);
        let future = IdpClient::jwt("future").time_shift_secs(-3600);
        let idp = Idp::start(&IdpOptions::new(vec![past, future, alice()]));
        let (_, now) = jwt_parts(&idp.client_credentials_token("alice", "", RESOURCE));
        let (_, expired) = jwt_parts(&idp.client_credentials_token("past", "", RESOURCE));
        let (_, early) = jwt_parts(&idp.client_credentials_token("future", "", RESOURCE));
        let issued = |claims: &Value| claims["iat"].as_i64().expect("iat");
        let expiry = |claims: &Value| claims["exp"].as_i64().expect("exp");
        assert_eq!(expiry(&expired) - issued(&expired), 60);
        assert!(expiry(&expired) < issued(&now), "{expired} vs {now}");
        assert_eq!(early["nbf"], early["iat"]);
        assert!(issued(&early) >= issued(&now) + 3600, "{early} vs {now}");
    }

    #[test]
    fn opaque_tokens_are_active_until_revoked() {
        let idp = provider();
        let token = idp.opaque_token("service", "tools:call", RESOURCE);
        let answer = idp.introspect(&token);
        assert_eq!(answer["active"], true, "{answer}");
        assert_eq!(answer["aud"], RESOURCE);
        assert_eq!(answer["iss"], idp.issuer());
        assert_eq!(answer["sub"], "service");
        assert_eq!(answer["client_id"], "service");
        assert_eq!(answer["scope"], "tools:call");
        assert_eq!(answer["roles"], json!(["tollgate.caller"]));
        idp.revoke(&token);
        assert_eq!(idp.introspect(&token), json!({"active": false}));
    }

    #[test]
    fn the_introspector_may_use_client_secret_post_and_its_secret_file() {
        let mut options = IdpOptions::new(vec![opaque()]);
        options.introspector_auth = ClientAuth::Post;
        let idp = Idp::start(&options);
        let token = idp.opaque_token("service", "tools:call", RESOURCE);
        assert_eq!(idp.introspect(&token)["active"], true);
        let secret = std::fs::read_to_string(idp.introspection_secret_file()).expect("secret");
        assert_eq!(secret, INTROSPECTOR_SECRET);
    }

    #[test]
    fn a_wrong_secret_or_an_unknown_client_is_refused() {
        let idp = Idp::start(&IdpOptions::new(vec![alice()]));
        let impostor = alice().secret("not-alices-secret");
        let response = idp.post("/token", impostor, &[("grant_type", "client_credentials")]);
        assert_eq!(response.status, 401);
        assert_eq!(response.json()["error"], "invalid_client");
        let answer = idp.token_response("alice", "tools:call", Some("not a uri"));
        assert_eq!(answer["error"], "invalid_target", "{answer}");
    }

    #[test]
    fn restarted_with_a_new_key_it_signs_with_a_new_kid() {
        let mut idp = provider();
        let issuer = idp.issuer().to_owned();
        let old_kid = idp.signing_kid();
        idp.restart_with_new_key();
        let new_kid = idp.signing_kid();
        assert_ne!(new_kid, old_kid);
        assert_eq!(idp.issuer(), issuer);
        let kids: Vec<Value> = idp.jwks()["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .map(|k| k["kid"].clone())
            .collect();
        assert_eq!(kids, vec![json!(new_kid)]);
        let (header, _) = jwt_parts(&idp.client_credentials_token("alice", "", RESOURCE));
        assert_eq!(header["kid"], new_kid);
    }

    #[test]
    fn stopped_it_refuses_connections_and_starts_again_with_the_same_keys() {
        let mut idp = provider();
        let (issuer, kid) = (idp.issuer().to_owned(), idp.signing_kid());
        idp.stop();
        assert!(std::net::TcpStream::connect(idp.addr()).is_err());
        idp.start_again();
        assert_eq!(idp.issuer(), issuer);
        assert_eq!(idp.jwks()["keys"][0]["kid"], kid);
    }

    #[test]
    fn the_provider_exits_when_its_input_closes() {
        let mut idp = provider();
        idp.stop();
        let mut child = idp
            .serve_command()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the provider");
        let deadline = std::time::Instant::now() + READ_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if std::time::Instant::now() >= deadline {
                let _ = child.kill();
                panic!("the provider still runs with its input closed");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(status.success(), "{status}");
    }

    #[test]
    fn es256_keys_sign_es256_tokens() {
        let mut options = IdpOptions::new(vec![alice()]);
        options.alg = SigningAlg::Es256;
        let idp = Idp::start(&options);
        assert_eq!(idp.jwks()["keys"][0]["kty"], "EC");
        let (header, _) = jwt_parts(&idp.client_credentials_token("alice", "", RESOURCE));
        assert_eq!(header["alg"], "ES256");
    }

    #[test]
    fn a_client_with_redirect_uris_is_sent_to_the_login_page() {
        let app = IdpClient::jwt("app").redirect_uris(&["http://127.0.0.1:9/callback"]);
        let idp = Idp::start(&IdpOptions::new(vec![app]));
        let query = "client_id=app&response_type=code&scope=openid\
            &redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcallback\
            &code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM\
            &code_challenge_method=S256";
        let response = http_request(idp.addr(), "GET", &format!("/auth?{query}"), &[], b"");
        assert_eq!(
            response.status,
            303,
            "{}",
            String::from_utf8_lossy(&response.body)
        );
        let location = response.header("location").expect("location");
        assert!(location.starts_with("/interaction/"), "{location}");
        let cookies: Vec<&str> = response
            .headers
            .iter()
            .filter(|(name, _)| name == "set-cookie")
            .filter_map(|(_, value)| value.split(';').next())
            .collect();
        let cookie = cookies.join("; ");
        let login = http_request(idp.addr(), "GET", location, &[("Cookie", &cookie)], b"");
        let page = String::from_utf8_lossy(&login.body);
        assert_eq!(login.status, 200, "{page}");
        assert!(page.contains("name=\"login\""), "{page}");
    }

    #[test]
    fn missing_packages_name_the_command_that_installs_them() {
        let empty = tempfile::tempdir().expect("tempdir");
        let modules = empty.path().join("node_modules");
        std::fs::create_dir(&modules).expect("mkdir node_modules");
        let message = check_modules(&modules).expect_err("no packages there");
        assert!(message.contains(INSTALL_COMMAND), "{message}");
        let message = check_modules(empty.path()).expect_err("not a node_modules folder");
        assert!(message.contains("node_modules directory"), "{message}");
    }
}
