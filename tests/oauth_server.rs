//! tollgate as the authorization server of MCP hosts (`[oauth_server]`), driven over HTTP
//! as a host and a person's browser would: registration (RFC 7591), the authorization code
//! flow with PKCE, sign-in with a personal key, consent, the token endpoint with refresh
//! rotation, revocation, and the abuse each step must refuse with the error the RFCs name
//! while issuing nothing.

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::util::{HttpResponse, HttpServer, TestDb, http_request};

/// A verifier of 43 characters, and its S256 challenge.
pub const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";

pub fn challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// A server with the front door on.
pub fn front_door(db: &TestDb) -> HttpServer {
    HttpServer::start_with_env(db, &[], &[("TOLLGATE_OAUTH_SERVER_ENABLED", "true")])
}

fn issuer(server: &HttpServer) -> String {
    format!("http://{}", server.addr)
}

fn form(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (k, v) in fields {
        out.append_pair(k, v);
    }
    out.finish().into_bytes()
}

fn post_form(
    server: &HttpServer,
    path: &str,
    headers: &[(&str, &str)],
    fields: &[(&str, &str)],
) -> HttpResponse {
    let mut all = vec![("Content-Type", "application/x-www-form-urlencoded")];
    all.extend_from_slice(headers);
    http_request(server.addr, "POST", path, &all, &form(fields))
}

/// Registers a public client with `redirect`; its id.
pub fn register(server: &HttpServer, redirect: &str) -> String {
    let answer = http_request(
        server.addr,
        "POST",
        "/oauth/register",
        &[("Content-Type", "application/json")],
        json!({
            "redirect_uris": [redirect], "client_name": "Test host",
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
        })
        .to_string()
        .as_bytes(),
    );
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    answer.json()["client_id"]
        .as_str()
        .expect("client_id")
        .to_owned()
}

/// The value of hidden field `name` in a page.
fn hidden(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in {html}"))
        + marker.len();
    html[start..].split('"').next().expect("value").to_owned()
}

/// The `tollgate_oauth` cookie a response sets.
fn cookie_of(response: &HttpResponse) -> String {
    let set = response.header("set-cookie").expect("a cookie");
    set.split(';').next().expect("pair").to_owned()
}

/// The query fields of a redirect.
pub fn redirect_fields(response: &HttpResponse) -> Vec<(String, String)> {
    let location = response.header("location").unwrap_or_else(|| {
        panic!(
            "no redirect: {} {}",
            response.status,
            String::from_utf8_lossy(&response.body)
        )
    });
    let query = location.split_once('?').map_or("", |(_, q)| q);
    form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// A person's browser at the front door: the request's page and its cookie.
pub struct Browser {
    pub cookie: String,
    pub page: String,
}

/// `GET /oauth/authorize` with `params` (each `(name, value)`); the response.
pub fn authorize(server: &HttpServer, params: &[(&str, &str)]) -> HttpResponse {
    let query = String::from_utf8(form(params)).expect("utf-8");
    http_request(
        server.addr,
        "GET",
        &format!("/oauth/authorize?{query}"),
        &[],
        b"",
    )
}

/// The usual authorization request of `client` for `scope`.
pub fn start(server: &HttpServer, client: &str, redirect: &str, scope: &str) -> Browser {
    let challenge = challenge(VERIFIER);
    let page = authorize(
        server,
        &[
            ("response_type", "code"),
            ("client_id", client),
            ("redirect_uri", redirect),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
            ("state", "st-1"),
            ("scope", scope),
            ("resource", &format!("{}/mcp", issuer(server))),
        ],
    );
    assert_eq!(page.status, 200, "{}", String::from_utf8_lossy(&page.body));
    Browser {
        cookie: cookie_of(&page),
        page: String::from_utf8(page.body).expect("utf-8"),
    }
}

impl Browser {
    /// Posts the page's form to `path` with extra `fields`, from this origin.
    pub fn post(&self, server: &HttpServer, path: &str, fields: &[(&str, &str)]) -> HttpResponse {
        let origin = issuer(server);
        let request = hidden(&self.page, "request");
        let csrf = hidden(&self.page, "csrf");
        let mut all = vec![("request", request.as_str()), ("csrf", csrf.as_str())];
        all.extend_from_slice(fields);
        post_form(
            server,
            path,
            &[("Cookie", &self.cookie), ("Origin", &origin)],
            &all,
        )
    }

    /// Signs in with `key`; the consent page.
    pub fn sign_in(mut self, server: &HttpServer, key: &str) -> Browser {
        let consent = self.post(server, "/oauth/sign-in", &[("key", key)]);
        assert_eq!(
            consent.status,
            200,
            "{}",
            String::from_utf8_lossy(&consent.body)
        );
        self.page = String::from_utf8(consent.body).expect("utf-8");
        self
    }
}

/// A code exchange: the token endpoint's answer.
pub fn exchange(
    server: &HttpServer,
    client: &str,
    code: &str,
    redirect: &str,
    verifier: &str,
) -> HttpResponse {
    post_form(
        server,
        "/oauth/token",
        &[],
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect),
            ("code_verifier", verifier),
            ("client_id", client),
        ],
    )
}

/// A refresh of `token` by `client`: the token endpoint's answer.
pub fn refresh(server: &HttpServer, client: &str, token: &str) -> HttpResponse {
    post_form(
        server,
        "/oauth/token",
        &[],
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", token),
            ("client_id", client),
        ],
    )
}

/// A personal key of Ana's with `scopes`: its public id and its token.
pub fn personal_key(db: &TestDb, scopes: &str) -> (String, String) {
    let out = db.run_json(&[
        "key", "create", "--name", "Ana", "--scopes", scopes, "--json",
    ]);
    (
        out["id"].as_str().expect("id").to_owned(),
        out["token"].as_str().expect("token").to_owned(),
    )
}

/// A whole sign-in of the person holding `key`, for `scope`: the code (straight away when
/// the person consented to this client before).
pub fn code_for(
    server: &HttpServer,
    client: &str,
    redirect: &str,
    key: &str,
    scope: &str,
) -> String {
    let browser = start(server, client, redirect, scope);
    let signed_in = browser.post(server, "/oauth/sign-in", &[("key", key)]);
    let answer = if signed_in.status == 302 {
        signed_in
    } else {
        let consent = Browser {
            cookie: browser.cookie,
            page: String::from_utf8(signed_in.body).expect("utf-8"),
        };
        consent.post(server, "/oauth/consent", &[("decision", "allow")])
    };
    assert_eq!(answer.status, 302);
    let fields = redirect_fields(&answer);
    field(&fields, "code").expect("code").to_owned()
}

/// A modern `tools/call` with `token`: the JSON-RPC answer.
pub fn call(server: &HttpServer, token: &str, tool: &str, args: Value) -> Value {
    server.modern_tool_call(token, tool, &args).json()
}

/// The redirect URI the tests' clients register.
pub const REDIRECT: &str = "http://127.0.0.1:9/callback";

#[test]
fn a_person_signs_in_with_a_key_consents_and_the_host_calls_as_that_person() {
    let db = TestDb::new();
    let (key_id, key) = personal_key(&db, "invoices:read,clients:read");
    let server = front_door(&db);
    let metadata = server.get("/.well-known/oauth-authorization-server").json();
    assert_eq!(metadata["issuer"], issuer(&server));
    assert_eq!(
        metadata["code_challenge_methods_supported"],
        json!(["S256"])
    );
    assert_eq!(
        metadata["authorization_response_iss_parameter_supported"],
        true
    );
    assert_eq!(metadata["client_id_metadata_document_supported"], true);
    let prm = server
        .get("/.well-known/oauth-protected-resource/mcp")
        .json();
    assert_eq!(prm["authorization_servers"][0], issuer(&server));

    let client = register(&server, "http://127.0.0.1/callback");
    let browser = start(&server, &client, REDIRECT, "invoices:read invoices:write");
    assert!(browser.page.contains("Test host"), "{}", browser.page);
    let consent = browser.sign_in(&server, &key);
    assert!(consent.page.contains("invoices:read"));
    assert!(
        consent.page.contains("id=\"not-held\""),
        "write is asked but not held"
    );
    let answer = consent.post(&server, "/oauth/consent", &[("decision", "allow")]);
    assert_eq!(answer.status, 302);
    let csp_free = answer.header("location").expect("location");
    assert!(csp_free.starts_with(REDIRECT), "{csp_free}");
    let fields = redirect_fields(&answer);
    assert_eq!(field(&fields, "state"), Some("st-1"));
    assert_eq!(field(&fields, "iss"), Some(issuer(&server).as_str()));
    let code = field(&fields, "code").expect("code");

    let tokens = exchange(&server, &client, code, REDIRECT, VERIFIER);
    assert_eq!(
        tokens.status,
        200,
        "{}",
        String::from_utf8_lossy(&tokens.body)
    );
    assert_eq!(tokens.header("cache-control"), Some("no-store"));
    let tokens = tokens.json();
    assert_eq!(tokens["token_type"], "Bearer");
    assert_eq!(tokens["scope"], "invoices:read");
    let access = tokens["access_token"].as_str().expect("access");
    assert!(access.starts_with("tg_at_"));

    // The person's own scopes: reading works, writing is refused naming the scope.
    let listed = call(&server, access, "search_invoices", json!({}));
    assert_eq!(listed["result"]["isError"], false, "{listed}");
    let refused = call(&server, access, "create_client", json!({"name": "X"}));
    assert_eq!(
        refused["error"]["data"]["code"], "insufficient_scope",
        "{refused}"
    );
    // The audit rows are the key's: the person is the principal. A writer thread commits
    // them a few milliseconds after the calls are answered: looked for up to 100 times.
    let audited = (0..100).any(|_| {
        let rows = db.sql_i64(&format!(
            "SELECT count(*) FROM audit_log WHERE credential_id = '{key_id}'"
        ));
        rows >= 1 || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            false
        }
    });
    assert!(audited, "audited under the person's key");

    // Consent is remembered for this client: a second sign-in goes straight back.
    let again = start(&server, &client, REDIRECT, "invoices:read").post(
        &server,
        "/oauth/sign-in",
        &[("key", &key)],
    );
    assert_eq!(again.status, 302, "remembered consent");
    assert!(field(&redirect_fields(&again), "code").is_some());

    // Refresh rotates; the old refresh token again revokes the family.
    let first_refresh = tokens["refresh_token"]
        .as_str()
        .expect("refresh")
        .to_owned();
    let rotated = refresh(&server, &client, &first_refresh);
    assert_eq!(rotated.status, 200);
    let rotated = rotated.json();
    let new_access = rotated["access_token"].as_str().expect("access").to_owned();
    assert!(call(&server, &new_access, "search_invoices", json!({}))["result"].is_object());
    let reused = refresh(&server, &client, &first_refresh);
    assert_eq!(
        (reused.status, reused.json()["error"].clone()),
        (400, json!("invalid_grant"))
    );
    let after = call(&server, &new_access, "search_invoices", json!({}));
    assert_eq!(after["error"]["data"]["code"], "invalid_token", "{after}");
    let newest_refresh = rotated["refresh_token"].as_str().expect("refresh");
    assert_eq!(
        refresh(&server, &client, newest_refresh).status,
        400,
        "the family is gone"
    );
}

#[test]
fn revoking_the_grant_or_the_key_refuses_the_tokens_on_their_next_call() {
    let db = TestDb::new();
    let (key_id, key) = personal_key(&db, "invoices:read");
    let server = front_door(&db);
    let client = register(&server, REDIRECT);
    let code = code_for(&server, &client, REDIRECT, &key, "invoices:read");
    let tokens = exchange(&server, &client, &code, REDIRECT, VERIFIER).json();
    let access = tokens["access_token"].as_str().expect("access");
    assert!(call(&server, access, "search_invoices", json!({}))["result"].is_object());
    let grant = db.sql_rows("SELECT id FROM oauth_grants")[0][0]
        .clone()
        .expect("grant");
    db.sql(&format!(
        "UPDATE oauth_grants SET revoked_at = 1 WHERE id = '{grant}'"
    ));
    let refused = call(&server, access, "search_invoices", json!({}));
    assert_eq!(
        refused["error"]["data"]["details"]["reason"], "revoked",
        "{refused}"
    );

    // A new consent, then the key revoked: its tokens go with it.
    let code = code_for(&server, &client, REDIRECT, &key, "invoices:read");
    let tokens = exchange(&server, &client, &code, REDIRECT, VERIFIER).json();
    let access = tokens["access_token"].as_str().expect("access");
    assert!(call(&server, access, "search_invoices", json!({}))["result"].is_object());
    db.run(&["key", "revoke", &key_id]);
    let refused = call(&server, access, "search_invoices", json!({}));
    assert_eq!(
        refused["error"]["data"]["code"], "invalid_token",
        "{refused}"
    );
    let refreshed = refresh(
        &server,
        &client,
        tokens["refresh_token"].as_str().expect("r"),
    );
    assert_eq!(refreshed.json()["error"], "invalid_grant");
}

/// An authorization request's parameters with one changed or removed.
fn request_with<'a>(
    base: &[(&'a str, &'a str)],
    name: &str,
    value: Option<&'a str>,
) -> Vec<(&'a str, &'a str)> {
    let mut out: Vec<(&str, &str)> = base.iter().filter(|(n, _)| *n != name).copied().collect();
    if let Some(value) = value {
        let name: &'a str = base.iter().find(|(n, _)| *n == name).map_or("", |(n, _)| n);
        out.push((name, value));
    }
    out
}

#[test]
fn abusive_authorization_requests_are_refused_as_the_rfcs_say_and_issue_nothing() {
    let db = TestDb::new();
    let server = front_door(&db);
    let client = register(&server, REDIRECT);
    let challenge = challenge(VERIFIER);
    let good: Vec<(&str, &str)> = vec![
        ("response_type", "code"),
        ("client_id", &client),
        ("redirect_uri", REDIRECT),
        ("code_challenge", &challenge),
        ("code_challenge_method", "S256"),
        ("state", "s"),
    ];
    assert_eq!(authorize(&server, &good).status, 200);

    // A redirect URI not registered: a page here, never a redirect there.
    let evil = authorize(
        &server,
        &request_with(&good, "redirect_uri", Some("https://evil.example/cb")),
    );
    assert_eq!(evil.status, 400);
    assert!(evil.header("location").is_none());
    let unknown = authorize(&server, &request_with(&good, "client_id", Some("tgc_nope")));
    assert_eq!(unknown.status, 400);
    assert!(unknown.header("location").is_none());

    // Past the redirect check, the client hears why on its redirect URI.
    for (params, error) in [
        (
            request_with(&good, "code_challenge", None),
            "invalid_request",
        ),
        (
            request_with(&good, "code_challenge_method", Some("plain")),
            "invalid_request",
        ),
        (
            request_with(&good, "code_challenge_method", None),
            "invalid_request",
        ),
        (
            request_with(&good, "response_type", Some("token")),
            "unsupported_response_type",
        ),
        (
            {
                let mut p = good.clone();
                p.push(("resource", "https://other.example/mcp"));
                p
            },
            "invalid_target",
        ),
        (
            {
                let mut p = good.clone();
                p.push(("scope", "root:everything"));
                p
            },
            "invalid_scope",
        ),
    ] {
        let answer = authorize(&server, &params);
        assert_eq!(answer.status, 302, "{params:?}");
        let fields = redirect_fields(&answer);
        assert_eq!(field(&fields, "error"), Some(error), "{params:?}");
        assert_eq!(field(&fields, "state"), Some("s"));
        assert_eq!(field(&fields, "iss"), Some(issuer(&server).as_str()));
        assert!(field(&fields, "code").is_none());
    }
    let mut twice = good.clone();
    twice.push(("state", "again"));
    assert_eq!(
        authorize(&server, &twice).status,
        400,
        "a parameter given twice"
    );
    assert_eq!(
        db.sql_i64("SELECT count(*) FROM oauth_codes"),
        0,
        "nothing issued"
    );
}

#[test]
fn abusive_token_and_consent_requests_are_refused_and_issue_nothing() {
    let db = TestDb::new();
    let (_, key) = personal_key(&db, "invoices:read");
    let server = front_door(&db);
    let client = register(&server, REDIRECT);
    let other = register(&server, REDIRECT);

    // Consent posted cross-site, or without its token, or from another browser.
    let consent = start(&server, &client, REDIRECT, "invoices:read").sign_in(&server, &key);
    let request = hidden(&consent.page, "request");
    let csrf = hidden(&consent.page, "csrf");
    let cross = post_form(
        &server,
        "/oauth/consent",
        &[
            ("Cookie", &consent.cookie),
            ("Origin", "https://evil.example"),
            ("Sec-Fetch-Site", "cross-site"),
        ],
        &[
            ("request", &request),
            ("csrf", &csrf),
            ("decision", "allow"),
        ],
    );
    assert!(
        cross.status == 403 || cross.status == 400,
        "{}",
        cross.status
    );
    assert!(cross.header("location").is_none());
    let tokenless = post_form(
        &server,
        "/oauth/consent",
        &[("Cookie", &consent.cookie), ("Origin", &issuer(&server))],
        &[("request", &request), ("decision", "allow")],
    );
    assert_eq!(tokenless.status, 403);
    let cookieless = post_form(
        &server,
        "/oauth/consent",
        &[("Origin", &issuer(&server))],
        &[
            ("request", &request),
            ("csrf", &csrf),
            ("decision", "allow"),
        ],
    );
    assert_eq!(cookieless.status, 400);
    assert_eq!(
        db.sql_i64("SELECT count(*) FROM oauth_codes"),
        0,
        "nothing issued yet"
    );

    // The real answer: a code; then every misuse of it.
    let answer = consent.post(&server, "/oauth/consent", &[("decision", "allow")]);
    let code = field(&redirect_fields(&answer), "code")
        .expect("code")
        .to_owned();
    for (client_id, redirect, verifier, error) in [
        (other.as_str(), REDIRECT, VERIFIER, "invalid_grant"),
        (
            client.as_str(),
            "http://127.0.0.1:9/other",
            VERIFIER,
            "invalid_grant",
        ),
        (
            client.as_str(),
            REDIRECT,
            "wrong-verifier-wrong-verifier-wrong-verifier-0",
            "invalid_grant",
        ),
    ] {
        let refused = exchange(&server, client_id, &code, redirect, verifier);
        assert_eq!(
            (refused.status, refused.json()["error"].clone()),
            (400, json!(error))
        );
        assert!(refused.json().get("access_token").is_none());
    }
    // The code was spent by the first misuse: even the right exchange is refused now.
    let late = exchange(&server, &client, &code, REDIRECT, VERIFIER);
    assert_eq!(late.json()["error"], "invalid_grant");

    // A code used twice: the second exchange revokes what the first issued.
    let code = code_for(&server, &client, REDIRECT, &key, "invoices:read");
    let first = exchange(&server, &client, &code, REDIRECT, VERIFIER).json();
    let access = first["access_token"].as_str().expect("access");
    assert!(call(&server, access, "search_invoices", json!({}))["result"].is_object());
    let second = exchange(&server, &client, &code, REDIRECT, VERIFIER);
    assert_eq!(second.json()["error"], "invalid_grant");
    let refused = call(&server, access, "search_invoices", json!({}));
    assert_eq!(
        refused["error"]["data"]["code"], "invalid_token",
        "{refused}"
    );

    // A public client presenting a secret, an unknown client: invalid_client.
    let bad = post_form(
        &server,
        "/oauth/token",
        &[],
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", "x"),
            ("client_id", &client),
            ("client_secret", "s"),
        ],
    );
    assert_eq!(
        (bad.status, bad.json()["error"].clone()),
        (401, json!("invalid_client"))
    );
    let plain = exchange(&server, "tgc_unknown", "x", REDIRECT, VERIFIER);
    assert_eq!(plain.status, 401);
}

#[test]
fn registration_is_bounded_per_source_and_checks_redirect_uris() {
    let db = TestDb::new();
    let server = front_door(&db);
    let refused = http_request(
        server.addr,
        "POST",
        "/oauth/register",
        &[("Content-Type", "application/json")],
        json!({"redirect_uris": ["http://evil.example/cb"], "token_endpoint_auth_method": "none"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(
        (refused.status, refused.json()["error"].clone()),
        (400, json!("invalid_redirect_uri"))
    );
    // Ten a minute from one source (one was spent above), then the catalog's rate_limited.
    let mut statuses = Vec::new();
    for _ in 0..12 {
        let answer = http_request(
            server.addr,
            "POST",
            "/oauth/register",
            &[("Content-Type", "application/json")],
            json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"})
                .to_string()
                .as_bytes(),
        );
        if answer.status == 429 {
            assert_eq!(answer.json()["error"], "rate_limited");
            assert_eq!(answer.json()["bucket"], "oauth_register");
            assert!(answer.header("retry-after").is_some());
        }
        statuses.push(answer.status);
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        9,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        3,
        "{statuses:?}"
    );
    assert_eq!(db.sql_i64("SELECT count(*) FROM oauth_registrations"), 9);
}

#[test]
fn a_handshake_without_a_credential_is_challenged_on_mcp_and_kept_anonymous_on_the_key_endpoint() {
    let db = TestDb::new();
    let server = front_door(&db);
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "host", "version": "1"}},
    });
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let body = initialize.to_string();
    let on_mcp = http_request(server.addr, "POST", "/mcp", &headers, body.as_bytes());
    assert_eq!(
        on_mcp.status,
        401,
        "{}",
        String::from_utf8_lossy(&on_mcp.body)
    );
    assert!(
        on_mcp.header("mcp-session-id").is_none(),
        "no session opened"
    );
    assert!(
        on_mcp
            .header("www-authenticate")
            .expect("challenge")
            .contains("/.well-known/oauth-protected-resource/mcp")
    );
    assert_eq!(on_mcp.json()["error"]["data"]["code"], "invalid_token");
    // The key endpoint answers as /mcp did before the front door.
    let on_key = http_request(server.addr, "POST", "/mcp-key", &headers, body.as_bytes());
    assert_eq!(on_key.status, 200);
    assert!(on_key.header("mcp-session-id").is_some());
}

#[test]
fn the_key_endpoint_serves_api_keys_and_answers_no_discovery() {
    let db = TestDb::new();
    let (_, key) = personal_key(&db, "invoices:read");
    let server = front_door(&db);
    // Without a credential: /mcp points at its metadata, the key endpoint does not.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": crate::util::modern_meta()}});
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/list"),
    ];
    let on_mcp = http_request(
        server.addr,
        "POST",
        "/mcp",
        &headers,
        body.to_string().as_bytes(),
    );
    assert_eq!(on_mcp.status, 401);
    assert!(
        on_mcp
            .header("www-authenticate")
            .expect("challenge")
            .contains("resource_metadata")
    );
    let on_key = http_request(
        server.addr,
        "POST",
        "/mcp-key",
        &headers,
        body.to_string().as_bytes(),
    );
    assert_eq!(on_key.status, 401);
    assert!(
        !on_key
            .header("www-authenticate")
            .expect("challenge")
            .contains("resource_metadata")
    );
    assert_eq!(
        server
            .get("/.well-known/oauth-protected-resource/mcp-key")
            .status,
        404
    );
    // With the key: served on both.
    let auth = format!("Bearer {key}");
    let mut with_key = headers.to_vec();
    with_key.push(("Authorization", auth.as_str()));
    let listed = http_request(
        server.addr,
        "POST",
        "/mcp-key",
        &with_key,
        body.to_string().as_bytes(),
    );
    assert_eq!(listed.status, 200);
    assert!(listed.json()["result"]["tools"].is_array());
}

#[test]
fn the_front_doors_answers_are_counted_on_metrics_by_endpoint_and_outcome() {
    let db = TestDb::new();
    let server = HttpServer::start_with_env(
        &db,
        &[],
        &[
            ("TOLLGATE_OAUTH_SERVER_ENABLED", "true"),
            ("TOLLGATE_HTTP_METRICS", "true"),
        ],
    );
    let client = register(&server, REDIRECT);
    let refused = exchange(&server, &client, "tg_ac_nope", REDIRECT, VERIFIER);
    assert_eq!(refused.status, 400);
    let page = String::from_utf8(server.get("/metrics").body).expect("utf-8");
    for line in [
        "tollgate_oauth_requests_total{endpoint=\"register\",outcome=\"ok\"} 1",
        "tollgate_oauth_requests_total{endpoint=\"token\",outcome=\"invalid_grant\"} 1",
    ] {
        assert!(page.contains(line), "{line} in\n{page}");
    }
}
