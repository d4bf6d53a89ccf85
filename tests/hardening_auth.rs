//! Authentication under attack, over HTTP: the server-wide argon2 ceiling, client
//! addresses named by trusted proxies, the OAuth token endpoint's lockout, the auth
//! scheme's case, sessions bound to their credential, OAuth metadata that never trusts
//! `Host`, and answers that tell a stranger nothing about a public id.
//!
//! Exact argon2 counts per second of an injected clock are asserted in `src/guards/auth.rs`'s
//! unit tests; here the real binary shows the behaviour a client sees.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};

use serde_json::{Value, json};

use crate::util::{HttpResponse, HttpServer, READ_TIMEOUT, TestDb, assert_error, http_request};

const LEGACY: &str = "2025-11-25";
const MODERN: &str = "2026-07-28";

fn admin_token(db: &TestDb) -> String {
    db.admin_key.clone().expect("init prints an admin key")
}

/// A new key with `scopes`: (public id, token).
fn create_key(db: &TestDb, scopes: &str, extra: &[&str]) -> (String, String) {
    let key = db.create_key("hardening", scopes, extra);
    (key.id, key.token)
}

/// A server whose only trusted proxy is the loopback address the tests connect from.
fn serve_behind_proxy(db: &TestDb, env: &[(&str, &str)]) -> HttpServer {
    let mut all = vec![("TOLLGATE_HTTP_TRUSTED_PROXIES", "127.0.0.1")];
    all.extend_from_slice(env);
    HttpServer::start_with_env(db, &[], &all)
}

/// A stateless 2026-07-28 `tools/list` with `authorization` (a whole header value) and
/// `extra` headers.
fn modern_list(server: &HttpServer, authorization: Option<&str>, extra: &[(&str, &str)]) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                      "params": {"_meta": crate::util::modern_meta()}});
    let mut headers = vec![
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", "tools/list"),
    ];
    if let Some(value) = authorization {
        headers.push(("Authorization", value));
    }
    headers.extend_from_slice(extra);
    server.post_mcp(&headers, &body).json()
}

fn initialize_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
           "params": {"protocolVersion": LEGACY, "capabilities": {},
                      "clientInfo": {"name": "hardening", "version": "0"}}})
}

fn session_post(
    server: &HttpServer,
    session: &str,
    token: Option<&str>,
    body: &Value,
) -> HttpResponse {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![
        ("Mcp-Session-Id", session),
        ("MCP-Protocol-Version", LEGACY),
    ];
    if let Some(auth) = &auth {
        headers.push(("Authorization", auth.as_str()));
    }
    server.post_mcp(&headers, body)
}

fn session_list(server: &HttpServer, session: &str, token: Option<&str>) -> HttpResponse {
    session_post(
        server,
        session,
        token,
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}),
    )
}

fn assert_lists_tools(response: &HttpResponse) {
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    let body = response.json();
    assert!(
        body["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{body}"
    );
}

fn delete_session(server: &HttpServer, session: &str, token: Option<&str>) -> HttpResponse {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Mcp-Session-Id", session)];
    if let Some(auth) = &auth {
        headers.push(("Authorization", auth.as_str()));
    }
    http_request(server.addr, "DELETE", "/mcp", &headers, b"")
}

fn reason(body: &Value) -> &Value {
    &body["error"]["data"]["details"]["reason"]
}

// ---- finding 9: the auth scheme's case -----------------------------------------------

#[test]
fn the_bearer_scheme_is_matched_without_regard_to_case() {
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    let token = admin_token(&db);
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let value = format!("{scheme} {token}");
        let body = modern_list(&server, Some(&value), &[]);
        assert!(body["result"]["tools"].is_array(), "{scheme}: {body}");
    }
    // Another scheme is no bearer token at all.
    let basic = format!("Basic {token}");
    let body = modern_list(&server, Some(&basic), &[]);
    assert_error(&body, -32001, "invalid_token", 401, 1101, false);
    assert_eq!(reason(&body), "missing");
}

// ---- finding 10: sessions bound to their credential ----------------------------------

/// One HTTP/1.1 connection kept open across requests.
struct KeepAlive {
    reader: BufReader<TcpStream>,
    addr: SocketAddr,
}

impl KeepAlive {
    fn connect(addr: SocketAddr) -> KeepAlive {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("timeout");
        stream.set_nodelay(true).expect("nodelay");
        KeepAlive {
            reader: BufReader::new(stream),
            addr,
        }
    }

    /// POSTs `body` to `/mcp`; the status and whether a session id came back.
    fn post(&mut self, body: &[u8]) -> (u16, bool) {
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        );
        // One write per request: a head and a body sent apart would wait for a delayed ACK.
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        self.reader
            .get_mut()
            .write_all(&request)
            .expect("write request");
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("status line");
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {line:?}"));
        let (mut length, mut session) = (0usize, false);
        loop {
            line.clear();
            self.reader.read_line(&mut line).expect("header line");
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').expect("header");
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().expect("length"),
                "mcp-session-id" => session = true,
                _ => {}
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).expect("body");
        (status, session)
    }
}

#[test]
fn a_flood_of_unauthenticated_initializes_leaves_an_authenticated_session_working() {
    const CONNECTIONS: usize = 4;
    const PER_CONNECTION: usize = 2_750;
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    let token = admin_token(&db);
    let session = server.open_session(LEGACY, &token);

    let body = serde_json::to_vec(&initialize_body()).expect("serialize");
    let floods: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (addr, body) = (server.addr, body.clone());
            std::thread::spawn(move || {
                let mut connection = KeepAlive::connect(addr);
                (0..PER_CONNECTION)
                    .map(|_| connection.post(&body))
                    .filter(|&(status, session)| status == 200 && session)
                    .count()
            })
        })
        .collect();
    let opened: usize = floods.into_iter().map(|t| t.join().expect("flood")).sum();
    // More anonymous sessions than the whole table holds…
    assert_eq!(opened, CONNECTIONS * PER_CONNECTION);
    // …and the authenticated session is still there: they only evict each other.
    assert_lists_tools(&session_list(&server, &session, Some(&token)));

    // What an anonymous session is good for: what needs no credential, nothing else.
    let lone = server.post_mcp(&[], &initialize_body());
    assert_eq!(lone.status, 200);
    let anonymous = lone.header("mcp-session-id").expect("session").to_owned();
    let ping = session_post(
        &server,
        &anonymous,
        None,
        &json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
    );
    assert_eq!(ping.json()["result"], json!({}));
    let list = session_list(&server, &anonymous, None);
    assert_eq!(list.status, 401);
    assert_error(&list.json(), -32001, "invalid_token", 401, 1101, false);
    // A credential cannot adopt it: the client initializes anew with its token.
    let adopted = session_list(&server, &anonymous, Some(&token));
    assert_eq!(adopted.status, 404);
    assert_error(
        &adopted.json(),
        -32600,
        "session_not_found",
        404,
        1015,
        false,
    );
}

#[test]
fn a_session_answers_only_the_credential_that_opened_it() {
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    let token = admin_token(&db);
    let (_, other) = create_key(&db, "*", &[]);
    let session = server.open_session(LEGACY, &token);
    assert_lists_tools(&session_list(&server, &session, Some(&token)));

    // Another valid key: the session does not exist for it (the answer an unknown id gets).
    let foreign = session_list(&server, &session, Some(&other));
    assert_eq!(foreign.status, 404);
    let foreign = foreign.json();
    assert_error(&foreign, -32600, "session_not_found", 404, 1015, false);
    let unknown = session_list(&server, &"0".repeat(32), Some(&other)).json();
    assert_eq!(foreign, unknown);

    // No token, or a bad one: the credential's own refusal (401 with its challenge),
    // the same for this session as for an unknown id.
    for token in [None, Some("tg_live_0000000000000000_notasecretnotasecret")] {
        let refused = session_list(&server, &session, token);
        assert_eq!(refused.status, 401, "{token:?}");
        let refused = refused.json();
        assert_error(&refused, -32001, "invalid_token", 401, 1101, false);
        let unknown = session_list(&server, &"0".repeat(32), token).json();
        assert_eq!(refused, unknown, "{token:?}");
    }

    // DELETE needs the session's own credential too.
    let refused = delete_session(&server, &session, Some(other.as_str()));
    assert_eq!(refused.status, 404);
    assert_error(
        &refused.json(),
        -32600,
        "session_not_found",
        404,
        1015,
        false,
    );
    let refused = delete_session(&server, &session, None);
    assert_eq!(refused.status, 401);
    assert_error(&refused.json(), -32001, "invalid_token", 401, 1101, false);
    assert_lists_tools(&session_list(&server, &session, Some(&token)));

    let owner = delete_session(&server, &session, Some(&token));
    assert_eq!(owner.status, 204);
    let gone = session_list(&server, &session, Some(&token));
    assert_eq!(gone.status, 404);
    assert_error(&gone.json(), -32600, "session_not_found", 404, 1015, false);
}

// ---- finding 11: OAuth metadata and the Host policy -------------------------------------

#[test]
fn oauth_endpoints_refuse_foreign_hosts_and_name_the_listening_address() {
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    let paths = [
        "/.well-known/oauth-authorization-server",
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ];
    for path in paths {
        for header in [("Host", "evil.example"), ("Origin", "http://evil.example")] {
            let refused = http_request(server.addr, "GET", path, &[header], b"");
            assert_eq!(refused.status, 403, "{path} {header:?}");
            assert_error(
                &refused.json(),
                -32600,
                "origin_not_allowed",
                403,
                1011,
                false,
            );
        }
    }
    let token = http_request(
        server.addr,
        "POST",
        "/oauth/token",
        &[
            ("Host", "evil.example"),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        b"grant_type=client_credentials&client_id=x&client_secret=y",
    );
    assert_eq!(token.status, 403);
    assert_error(
        &token.json(),
        -32600,
        "origin_not_allowed",
        403,
        1011,
        false,
    );

    // An allowed Host that is not the listening address: the documents still name the
    // address the server is bound to, never the Host header.
    let base = format!("http://{}", server.addr);
    let localhost = format!("localhost:{}", server.addr.port());
    let host = [("Host", localhost.as_str())];
    let asm = http_request(server.addr, "GET", paths[0], &host, b"");
    assert_eq!(asm.status, 200);
    let asm = asm.json();
    assert_eq!(asm["issuer"], json!(base));
    assert_eq!(asm["token_endpoint"], json!(format!("{base}/oauth/token")));
    let prm = http_request(server.addr, "GET", paths[2], &host, b"").json();
    assert_eq!(prm["resource"], json!(format!("{base}/mcp")));
    assert_eq!(prm["authorization_servers"], json!([base]));

    // The challenge of a 401 points at the same place.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                      "params": {"_meta": crate::util::modern_meta()}});
    let challenged = server.post_mcp(
        &[
            ("Host", localhost.as_str()),
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/list"),
        ],
        &body,
    );
    assert_eq!(challenged.status, 401);
    assert_eq!(
        challenged.header("www-authenticate"),
        Some(
            format!("Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\"")
                .as_str()
        )
    );
}

// ---- finding 6: trusted proxies and the argon2 ceiling ---------------------------------

fn bad_token(n: usize) -> String {
    format!("Bearer tg_live_{n:020x}_{}", "Q".repeat(43))
}

/// Presents bad tokens, the `n`th with the header `header(n)`, until the source is
/// throttled (`bucket: "auth"`); how many were refused `invalid_token` before. Requests
/// that count against one source are throttled after at least its allowance of 10 and
/// within twice it, wherever the throttle's window edge falls (a run takes far less than
/// a window); requests counted against different sources would never be. How many
/// failures a window allows exactly, up to its edge, is shown in-process on a manual
/// clock (`clock::the_failure_throttle_allows_ten_failures_a_minute_per_source_and_resets_at_the_edge`).
fn failures_until_throttled(
    server: &HttpServer,
    header: impl Fn(usize) -> (String, String),
) -> usize {
    for n in 0..=20 {
        let (name, value) = header(n);
        let body = modern_list(server, Some(&bad_token(n)), &[(&name, &value)]);
        if body["error"]["message"] == "rate_limited" {
            assert_error(&body, -32006, "rate_limited", 429, 3001, true);
            assert_eq!(body["error"]["data"]["bucket"], "auth");
            assert_eq!(body["error"]["data"]["limit"], 10);
            assert!(n >= 10, "throttled after {n} failures");
            return n;
        }
        assert_error(&body, -32001, "invalid_token", 401, 1101, false);
    }
    panic!("21 failures and no throttle");
}

#[test]
fn clients_behind_a_trusted_proxy_are_throttled_apart() {
    let db = TestDb::new();
    let server = serve_behind_proxy(&db, &[]);
    // The client itself, through a second trusted hop, or with a forged hop on the left
    // (the client's own claim, which the proxy passed on): one source, one allowance.
    let chains = [
        "198.51.100.1",
        "198.51.100.1, 127.0.0.1",
        "203.0.113.9, 198.51.100.1",
    ];
    failures_until_throttled(&server, |n| {
        (
            "X-Forwarded-For".to_owned(),
            chains[n % chains.len()].to_owned(),
        )
    });
    // Another forwarded client has its own allowance.
    let second = [("X-Forwarded-For", "198.51.100.2")];
    let body = modern_list(&server, Some(&bad_token(12)), &second);
    assert_error(&body, -32001, "invalid_token", 401, 1101, false);
    // A valid key not verified yet, from the other client, is not locked out by its
    // neighbour's failures.
    let token = format!("Bearer {}", admin_token(&db));
    assert!(modern_list(&server, Some(&token), &second)["result"]["tools"].is_array());
}

#[test]
fn an_untrusted_peer_cannot_choose_its_source_with_forwarding_headers() {
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    // A new forged client address on every attempt, in either header: still one source,
    // the peer.
    failures_until_throttled(&server, |n| {
        if n % 2 == 0 {
            ("X-Forwarded-For".to_owned(), format!("198.51.100.{n}"))
        } else {
            ("Forwarded".to_owned(), format!("for=203.0.113.{n}"))
        }
    });
}

#[test]
fn a_flood_from_many_addresses_meets_the_argon2_ceiling_while_cached_keys_work() {
    const FLOOD: usize = 60;
    let db = TestDb::new();
    let server = serve_behind_proxy(&db, &[("TOLLGATE_AUTH_ARGON2_PER_SECOND", "2")]);
    let token = format!("Bearer {}", admin_token(&db));
    assert!(modern_list(&server, Some(&token), &[])["result"]["tools"].is_array());

    let (mut unknown, mut ceiling) = (0, 0);
    for n in 0..FLOOD {
        // Every request from an address of its own: no per-source allowance is touched.
        let address = format!("198.51.{}.{}", 100 + n / 200, n % 200 + 1);
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                          "params": {"_meta": crate::util::modern_meta()}});
        let bad = bad_token(n);
        let response = server.post_mcp(
            &[
                ("MCP-Protocol-Version", MODERN),
                ("Mcp-Method", "tools/list"),
                ("Authorization", bad.as_str()),
                ("X-Forwarded-For", address.as_str()),
            ],
            &body,
        );
        let answer = response.json();
        match answer["error"]["message"].as_str() {
            Some("invalid_token") => unknown += 1,
            Some("rate_limited") => {
                ceiling += 1;
                assert_error(&answer, -32006, "rate_limited", 429, 3001, true);
                let data = &answer["error"]["data"];
                assert_eq!(data["bucket"], "auth");
                assert_eq!(data["limit"], 2);
                assert_eq!(data["retry_after"], 1);
                assert_eq!(data["details"]["reason"], "server_verification_ceiling");
                assert_eq!(response.header("retry-after"), Some("1"));
            }
            other => panic!("unexpected answer {other:?}: {answer}"),
        }
        if n % 10 == 0 {
            // The key verified before the flood is served from the cache throughout.
            assert!(modern_list(&server, Some(&token), &[])["result"]["tools"].is_array());
        }
    }
    assert_eq!(unknown + ceiling, FLOOD);
    assert!(
        ceiling > 0,
        "the ceiling never refused ({unknown} verified)"
    );
}

// ---- finding 7: the token endpoint's lockout --------------------------------------------

fn token_request(server: &HttpServer, client_addr: &str, authorization: &str) -> HttpResponse {
    http_request(
        server.addr,
        "POST",
        "/oauth/token",
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Authorization", authorization),
            ("X-Forwarded-For", client_addr),
        ],
        b"grant_type=client_credentials",
    )
}

fn basic(scheme: &str, id: &str, secret: &str) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}"));
    format!("{scheme} {encoded}")
}

#[test]
fn a_stranger_guessing_a_client_secret_does_not_lock_the_client_out() {
    let db = TestDb::new();
    let server = serve_behind_proxy(&db, &[]);
    let printed = db.run_json(&[
        "client", "create", "--name", "machine", "--scopes", "*", "--json",
    ]);
    let id = printed["client_id"].as_str().expect("client_id");
    let secret = printed["client_secret"].as_str().expect("client_secret");
    let wrong = basic("Basic", id, "tg_cs_wrongwrongwrongwrongwrong");

    let stranger = "198.51.100.66";
    let mut statuses = Vec::new();
    for _ in 0..40 {
        let response = token_request(&server, stranger, &wrong);
        let body = response.json();
        statuses.push((response.status, body["error"].as_str().map(str::to_owned)));
        if response.status == 429 {
            let bucket = body["bucket"].as_str().expect("bucket");
            assert!(bucket == "auth" || bucket == "oauth_token", "{body}");
        }
    }
    // Wrong secrets until the source is throttled (never the client id), then the
    // source's request limit (30 a minute from its first request) to the end. These hold
    // wherever the failure throttle's window edge falls; its exact count at the edge is
    // shown in-process on a manual clock
    // (`clock::the_token_endpoint_throttles_the_stranger_never_the_client`).
    let invalid = statuses
        .iter()
        .filter(|(s, e)| *s == 401 && e.as_deref() == Some("invalid_client"))
        .count();
    assert!(invalid >= 10, "{statuses:?}");
    assert!(
        statuses[..10].iter().all(|(s, _)| *s == 401),
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|(s, _)| *s == 401 || *s == 429),
        "{statuses:?}"
    );
    assert!(
        statuses[30..].iter().all(|(s, _)| *s == 429),
        "{statuses:?}"
    );

    // The client itself, from its own address, gets its token (scheme in any case).
    for scheme in ["Basic", "BASIC"] {
        let granted = token_request(&server, "198.51.100.77", &basic(scheme, id, secret));
        assert_eq!(
            granted.status,
            200,
            "{}",
            String::from_utf8_lossy(&granted.body)
        );
        assert!(granted.json()["access_token"].is_string());
    }
    // From the stranger's address, even the right secret waits for the window: the
    // throttle knows sources, not who is behind them.
    let same_source = token_request(&server, stranger, &basic("Basic", id, secret));
    assert_eq!(same_source.status, 429);
}

// ---- finding 12: no status oracle ----------------------------------------------------------

#[test]
fn wrong_secrets_on_revoked_expired_and_test_keys_answer_as_unknown_ids_do() {
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    let (revoked_id, revoked) = create_key(&db, "*", &[]);
    assert!(db.run(&["key", "revoke", &revoked_id]).status.success());
    let (expired_id, expired) = create_key(&db, "*", &["--expires-in", "30d"]);
    db.sql(&format!(
        "UPDATE credentials SET expires_at = 1 WHERE public_id = '{expired_id}'"
    ));
    let (_, test_key) = create_key(&db, "*", &["--test"]);
    let wrong_secret = |token: &str| {
        let parts: Vec<&str> = token.splitn(4, '_').collect();
        format!(
            "Bearer {}_{}_{}_{}",
            parts[0],
            parts[1],
            parts[2],
            "W".repeat(43)
        )
    };

    let unknown = format!("Bearer tg_live_{}_{}", "0".repeat(20), "W".repeat(43));
    let body_of = |authorization: &str| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                          "params": {"_meta": crate::util::modern_meta()}});
        let response = server.post_mcp(
            &[
                ("MCP-Protocol-Version", MODERN),
                ("Mcp-Method", "tools/list"),
                ("Authorization", authorization),
            ],
            &body,
        );
        (response.status, response.body)
    };
    let reference = body_of(&unknown);
    assert_eq!(reference.0, 401);
    for token in [&revoked, &expired, &test_key] {
        let answer = body_of(&wrong_secret(token));
        assert_eq!(answer, reference, "{}", String::from_utf8_lossy(&answer.1));
    }
    // The holder of the secret learns why.
    for (token, why) in [
        (&revoked, "revoked"),
        (&expired, "expired"),
        (&test_key, "test_key_on_live_installation"),
    ] {
        let (_, body) = body_of(&format!("Bearer {token}"));
        let body: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(reason(&body), why, "{body}");
    }
}
