//! The front door with the company's identity provider: a person signs in at a real OpenID
//! Provider (`oidc-provider`, [`crate::idp`]) through tollgate's `/oauth/authorize`, their
//! roles become their scopes, they consent, and the host's token makes them the principal
//! (a user, as with the provider's own tokens). Also what an attacker tries at this step: an
//! answer from another issuer (the RFC 9207 mix-up), consent skipped for a new client while
//! the provider's session is warm (the confused deputy), and a client metadata document
//! on an address the server itself can reach.

use serde_json::json;

use crate::idp::{Idp, IdpClient, IdpOptions};
use crate::oauth_server::{VERIFIER, challenge, exchange, redirect_fields, register};
use crate::util::{HttpResponse, HttpServer, TestDb, free_port, http_request};

/// A provider whose client `tollgate-login` returns to tollgate on `port`, where `ana`
/// (an invoice clerk) signs in.
fn provider(port: u16) -> Idp {
    let callback = format!("http://127.0.0.1:{port}/oauth/callback");
    let client = IdpClient::jwt("tollgate-login")
        .secret("login-secret-5e2b")
        .redirect_uris(&[&callback]);
    let options = IdpOptions::new(vec![client]).account(
        "ana",
        json!({"name": "Ana García", "roles": ["invoice-clerks"]}),
    );
    Idp::start(&options)
}

/// tollgate on `port` with the front door on, signing people in at `idp`.
fn tollgate(db: &TestDb, idp: &Idp, port: u16) -> HttpServer {
    std::fs::write(db.dir.path().join("login.secret"), "login-secret-5e2b").expect("secret");
    let secret = db.dir.path().join("login.secret");
    let config = format!(
        "[oauth_server]\nenabled = true\n\n[[auth.issuers]]\nname = \"corp\"\nissuer = \"{}\"\n\
         audience = \"http://127.0.0.1:{port}/mcp\"\n[auth.issuers.roles]\n\
         invoice-clerks = [\"invoices:read\", \"clients:read\"]\n[auth.issuers.login]\n\
         client_id = \"tollgate-login\"\nclient_secret_file = \"{}\"\n",
        idp.issuer(),
        secret.display()
    );
    let path = db.dir.path().join("tollgate.toml");
    std::fs::write(&path, config).expect("config");
    HttpServer::start_on_port(db, port, &["--config", path.to_str().expect("utf-8")])
}

const REDIRECT: &str = "http://127.0.0.1:9/callback";

/// `GET /oauth/authorize` for `client`: the redirect to the provider and tollgate's cookie.
fn to_provider(server: &HttpServer, client: &str) -> (String, String) {
    let challenge = challenge(VERIFIER);
    let query = form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("response_type", "code"),
            ("client_id", client),
            ("redirect_uri", REDIRECT),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("state", "st"),
            ("scope", "invoices:read invoices:write"),
        ])
        .finish();
    let answer = http_request(
        server.addr,
        "GET",
        &format!("/oauth/authorize?{query}"),
        &[],
        b"",
    );
    assert_eq!(
        answer.status,
        302,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let cookie = answer
        .header("set-cookie")
        .expect("cookie")
        .split(';')
        .next()
        .expect("pair")
        .to_owned();
    (
        answer.header("location").expect("location").to_owned(),
        cookie,
    )
}

/// The provider's answer brought back to tollgate's callback.
fn back_to_tollgate(server: &HttpServer, cookie: &str, query: &[(String, String)]) -> HttpResponse {
    let query = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(query.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .finish();
    http_request(
        server.addr,
        "GET",
        &format!("/oauth/callback?{query}"),
        &[("Cookie", cookie)],
        b"",
    )
}

fn hidden(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = html.find(&marker).expect("field") + marker.len();
    html[start..].split('"').next().expect("value").to_owned()
}

/// Allows on the consent page `page`; the code.
fn allow(server: &HttpServer, cookie: &str, page: &HttpResponse) -> String {
    let html = String::from_utf8_lossy(&page.body).into_owned();
    let form = form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("request", hidden(&html, "request").as_str()),
            ("csrf", hidden(&html, "csrf").as_str()),
            ("decision", "allow"),
        ])
        .finish();
    let origin = format!("http://{}", server.addr);
    let answer = http_request(
        server.addr,
        "POST",
        "/oauth/consent",
        &[
            ("Cookie", cookie),
            ("Origin", &origin),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        form.as_bytes(),
    );
    let fields = redirect_fields(&answer);
    fields
        .iter()
        .find(|(k, _)| k == "code")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no code: {fields:?}"))
}

#[test]
fn a_person_signs_in_at_the_provider_and_calls_as_that_user_with_their_roles_scopes() {
    let port = free_port();
    let idp = provider(port);
    let db = TestDb::new();
    let server = tollgate(&db, &idp, port);
    let client = register(&server, "http://127.0.0.1/callback");

    let (location, cookie) = to_provider(&server, &client);
    assert!(location.starts_with(idp.issuer()), "{location}");
    let answer: Vec<(String, String)> = idp.sign_in(&location, "ana").into_iter().collect();
    let consent = back_to_tollgate(&server, &cookie, &answer);
    assert_eq!(
        consent.status,
        200,
        "{}",
        String::from_utf8_lossy(&consent.body)
    );
    let page = String::from_utf8_lossy(&consent.body).into_owned();
    assert!(page.contains("Ana García"), "the person's name");
    assert!(page.contains("invoices:read"));
    assert!(
        page.contains("id=\"not-held\""),
        "invoices:write is not a clerk's"
    );
    let code = allow(&server, &cookie, &consent);
    let tokens = exchange(&server, &client, &code, REDIRECT, VERIFIER).json();
    assert_eq!(tokens["scope"], "invoices:read", "{tokens}");
    let access = tokens["access_token"].as_str().expect("access");

    let read = server
        .modern_tool_call(access, "search_invoices", &json!({}))
        .json();
    assert_eq!(read["result"]["isError"], false, "{read}");
    let write = server
        .modern_tool_call(access, "create_client", &json!({"name": "X"}))
        .json();
    assert_eq!(
        write["error"]["data"]["code"], "insufficient_scope",
        "{write}"
    );
    let users = db.run_json(&["users", "list", "--json"]);
    let ana = users
        .as_array()
        .expect("users")
        .iter()
        .find(|u| u["subject"] == "ana")
        .unwrap_or_else(|| panic!("ana in {users}"))
        .clone();
    let user_id = ana["id"].as_str().expect("id");
    let audited = db.sql_i64(&format!(
        "SELECT count(*) FROM audit_log WHERE credential_id = '{user_id}'"
    ));
    assert!(audited >= 1, "the calls are the user's");
    // Blocking the user refuses the host's token on its next call.
    db.run(&["users", "block", user_id]);
    let blocked = server
        .modern_tool_call(access, "search_invoices", &json!({}))
        .json();
    assert_eq!(
        blocked["error"]["data"]["code"], "user_blocked",
        "{blocked}"
    );
}

#[test]
fn a_new_client_is_asked_for_consent_and_an_answer_from_another_issuer_is_refused() {
    let port = free_port();
    let idp = provider(port);
    let db = TestDb::new();
    let server = tollgate(&db, &idp, port);
    let first = register(&server, REDIRECT);
    let (location, cookie) = to_provider(&server, &first);
    let answer: Vec<(String, String)> = idp.sign_in(&location, "ana").into_iter().collect();
    let consent = back_to_tollgate(&server, &cookie, &answer);
    allow(&server, &cookie, &consent);

    // Another client, the same person: consent is asked again (the confused-deputy rule).
    let second = register(&server, REDIRECT);
    let (location, cookie) = to_provider(&server, &second);
    let answer: Vec<(String, String)> = idp.sign_in(&location, "ana").into_iter().collect();
    let page = back_to_tollgate(&server, &cookie, &answer);
    assert_eq!(page.status, 200, "a consent page, not a code");
    assert!(page.header("location").is_none());

    // An answer naming another issuer: refused before its code is used.
    let (location, cookie) = to_provider(&server, &first);
    let mut answer: Vec<(String, String)> = idp.sign_in(&location, "ana").into_iter().collect();
    answer.retain(|(k, _)| k != "iss");
    answer.push(("iss".to_owned(), "https://evil.example".to_owned()));
    let refused = back_to_tollgate(&server, &cookie, &answer);
    assert_eq!(refused.status, 302);
    let fields = redirect_fields(&refused);
    assert!(
        fields.contains(&("error".to_owned(), "access_denied".to_owned())),
        "{fields:?}"
    );
    assert!(!fields.iter().any(|(k, _)| k == "code"));
    // And the same answer again (the state is taken once): nothing.
    let again = back_to_tollgate(&server, &cookie, &answer);
    assert_eq!(again.status, 400);
}

#[test]
fn a_client_metadata_document_on_an_address_of_the_server_itself_is_never_fetched() {
    let db = TestDb::new();
    let server = HttpServer::start_with_env(&db, &[], &[("TOLLGATE_OAUTH_SERVER_ENABLED", "true")]);
    // A listener that records whether anything connected.
    let trap = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    trap.set_nonblocking(true).expect("nonblocking");
    let port = trap.local_addr().expect("addr").port();
    for client in [
        format!("https://127.0.0.1:{port}/client.json"),
        "https://169.254.169.254/latest/meta-data/client.json".to_owned(),
        format!("https://[::1]:{port}/client.json"),
        format!("https://localhost:{port}/client.json"),
    ] {
        let challenge = challenge(VERIFIER);
        let query = form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("response_type", "code"),
                ("client_id", client.as_str()),
                ("redirect_uri", REDIRECT),
                ("code_challenge", challenge.as_str()),
                ("code_challenge_method", "S256"),
            ])
            .finish();
        let page = http_request(
            server.addr,
            "GET",
            &format!("/oauth/authorize?{query}"),
            &[],
            b"",
        );
        assert_eq!(page.status, 400, "{client}");
        assert!(
            page.header("location").is_none(),
            "{client}: never redirected"
        );
        let html = String::from_utf8_lossy(&page.body);
        assert!(html.contains("invalid_client"), "{client}: {html}");
    }
    assert!(
        trap.accept().is_err(),
        "nothing connected to the server's own address"
    );
}
