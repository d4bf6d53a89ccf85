//! The operator's console over HTTP, as a browser would reach it, and what a security
//! reviewer asks of it: only an `admin` key signs in; the session cookie's attributes; the
//! headers of every page; a form without its CSRF token, or from another origin, is
//! refused and changes nothing; failed sign-ins go through the authentication throttle;
//! a change made here applies to the next MCP call and is an audit row naming the
//! operator; the latency page's percentiles and slowest calls come from the audit rows'
//! durations. Idle expiry runs in-process on a manual clock. The pages in a real browser
//! are driven by `tests/console/` (headless Chromium).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use tollgate::clock::ManualClock;
use tollgate::config::{Config, Overrides};
use tollgate::console::{Console, Method, Request, SESSION_COOKIE, SIGN_IN_COOKIE};

use crate::users::{ISSUER, seed_call, seed_user};
use crate::util::{HttpResponse, HttpServer, StdioServer, TestDb, http_request, unix_now};

/// A browser's view of one console: its cookies and the origin it posts from.
pub(crate) struct Browser<'s> {
    server: &'s HttpServer,
    cookies: Vec<(String, String)>,
    origin: String,
}

impl<'s> Browser<'s> {
    pub(crate) fn new(server: &'s HttpServer) -> Browser<'s> {
        Browser {
            server,
            cookies: Vec::new(),
            origin: format!("http://{}", server.addr),
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Keeps the cookies a response sets (an empty value or `Max-Age=0` removes one).
    fn keep_cookies(&mut self, response: &HttpResponse) {
        for (name, value) in &response.headers {
            if name != "set-cookie" {
                continue;
            }
            let pair = value.split(';').next().unwrap_or("");
            let (n, v) = pair.split_once('=').expect("cookie pair");
            self.cookies.retain(|(k, _)| k != n);
            if !v.is_empty() && !value.contains("Max-Age=0") {
                self.cookies.push((n.to_owned(), v.to_owned()));
            }
        }
    }

    pub(crate) fn get(&mut self, path: &str) -> HttpResponse {
        let cookie = self.cookie_header();
        let response = http_request(self.server.addr, "GET", path, &[("Cookie", &cookie)], b"");
        self.keep_cookies(&response);
        response
    }

    /// A form post from `origin` with `headers`.
    fn post_from(
        &mut self,
        path: &str,
        fields: &[(&str, &str)],
        origin: Option<&str>,
        headers: &[(&str, &str)],
    ) -> HttpResponse {
        let body = form(fields);
        let cookie = self.cookie_header();
        let mut all = vec![
            ("Cookie", cookie.as_str()),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ];
        if let Some(origin) = origin {
            all.push(("Origin", origin));
        }
        all.extend_from_slice(headers);
        let response = http_request(self.server.addr, "POST", path, &all, body.as_bytes());
        self.keep_cookies(&response);
        response
    }

    pub(crate) fn post(&mut self, path: &str, fields: &[(&str, &str)]) -> HttpResponse {
        let origin = self.origin.clone();
        self.post_from(
            path,
            fields,
            Some(&origin),
            &[("Sec-Fetch-Site", "same-origin")],
        )
    }

    /// Loads the sign-in form and posts `key` with its pairing token.
    pub(crate) fn sign_in(&mut self, key: &str) -> HttpResponse {
        let page = self.get("/console/sign-in");
        assert_eq!(page.status, 200);
        let token = hidden_csrf(&text(&page));
        self.post("/console/sign-in", &[("csrf", &token), ("key", key)])
    }

    /// A browser signed in with `db`'s admin key.
    pub(crate) fn signed_in(server: &'s HttpServer, db: &TestDb) -> Browser<'s> {
        let mut browser = Browser::new(server);
        let signed = browser.sign_in(db.admin_key.as_deref().expect("admin key"));
        assert_eq!(signed.status, 303, "{}", text(&signed));
        browser
    }

    /// The CSRF token of the signed-in pages.
    pub(crate) fn csrf(&mut self) -> String {
        let page = self.get("/console/credentials");
        assert_eq!(page.status, 200, "{}", text(&page));
        hidden_csrf(&text(&page))
    }
}

fn form(fields: &[(&str, &str)]) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (n, v) in fields {
        out.append_pair(n, v);
    }
    out.finish()
}

pub(crate) fn text(response: &HttpResponse) -> String {
    String::from_utf8_lossy(&response.body).into_owned()
}

/// The value of the first `name="csrf"` hidden input of a page.
pub(crate) fn hidden_csrf(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    page[at..].split('"').next().expect("value").to_owned()
}

/// The text of the element with `id` (up to its closing tag).
fn element_text(page: &str, id: &str) -> Option<String> {
    let at = page.find(&format!("id=\"{id}\""))?;
    let start = at + page[at..].find('>')? + 1;
    let end = start + page[start..].find('<')?;
    Some(page[start..end].to_owned())
}

/// The `Set-Cookie` header that sets `name`.
fn set_cookie<'r>(response: &'r HttpResponse, name: &str) -> Option<&'r str> {
    response
        .headers
        .iter()
        .find(|(n, v)| n == "set-cookie" && v.starts_with(&format!("{name}=")))
        .map(|(_, v)| v.as_str())
}

fn assert_page_headers(response: &HttpResponse) {
    let csp = response.header("content-security-policy").expect("a CSP");
    for part in [
        "default-src 'none'",
        "frame-ancestors 'none'",
        "form-action 'self'",
        "script-src 'self'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(response.header("x-frame-options"), Some("DENY"));
    assert_eq!(response.header("cache-control"), Some("no-store"));
    assert_eq!(response.header("x-content-type-options"), Some("nosniff"));
}

fn keys(db: &TestDb) -> Vec<Value> {
    db.run_json(&["key", "list", "--json"])
        .as_array()
        .expect("keys")
        .clone()
}

fn audit(db: &TestDb) -> Vec<Value> {
    db.run_json(&["audit", "--json", "--limit", "200"])
        .as_array()
        .expect("rows")
        .clone()
}

/// Waits until the audit log holds at least `count` rows matching `filter` (CLI flags):
/// calls are audited by a writer thread a few milliseconds after they are answered.
/// Bounded: 100 looks.
fn until_audited(db: &TestDb, filter: &[&str], count: usize) {
    let mut args = vec!["audit", "--json"];
    args.extend_from_slice(filter);
    for _ in 0..100 {
        if db.run_json(&args).as_array().map_or(0, Vec::len) >= count {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("the audit log never held {count} rows for {filter:?}");
}

/// The JSON-RPC error code (`data.code`) or `ok` of a modern `tools/call` over HTTP.
fn call_outcome(server: &HttpServer, token: &str, tool: &str) -> String {
    let reply = server.modern_tool_call(token, tool, &json!({})).json();
    if let Some(code) = reply["error"]["data"]["code"].as_str() {
        return code.to_owned();
    }
    assert_eq!(reply["result"]["isError"], json!(false), "{reply}");
    "ok".to_owned()
}

#[test]
fn an_admin_key_signs_in_for_a_strict_cookie_and_every_page_carries_the_security_headers() {
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    let mut browser = Browser::new(&server);

    let unsigned = browser.get("/console");
    assert_eq!(unsigned.status, 303);
    assert_eq!(unsigned.header("location"), Some("/console/sign-in"));

    let form = browser.get("/console/sign-in");
    assert_page_headers(&form);
    let pairing = set_cookie(&form, SIGN_IN_COOKIE).expect("pairing cookie");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(pairing.contains(attribute), "{pairing}");
    }

    let signed = browser.sign_in(db.admin_key.as_deref().expect("admin key"));
    assert_eq!(signed.status, 303, "{}", text(&signed));
    assert_eq!(signed.header("location"), Some("/console"));
    let cookie = set_cookie(&signed, SESSION_COOKIE).expect("session cookie");
    for attribute in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=900",
    ] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(
        !cookie.contains("Secure"),
        "plain HTTP on loopback: {cookie}"
    );

    for path in [
        "/console",
        "/console/credentials",
        "/console/limits",
        "/console/audit",
        "/console/backends",
        "/console/users",
    ] {
        let page = browser.get(path);
        assert_eq!(page.status, 200, "{path}: {}", text(&page));
        assert_page_headers(&page);
        let html = text(&page);
        assert!(
            html.starts_with("<!doctype html>\n<html lang=\"en\">"),
            "{path}"
        );
        assert!(html.contains("id=\"nav\""), "{path}");
        assert!(
            !html.contains(db.admin_key.as_deref().expect("key")),
            "{path} shows the key"
        );
    }
    let css = browser.get("/console/static/console.css");
    assert_eq!(css.status, 200);
    assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));

    // The sign-in is in the audit log under the operator's credential.
    let admin_id = db.admin_key_id();
    assert!(
        audit(&db)
            .iter()
            .any(|r| r["tool"] == "console:sign_in" && r["credential_id"] == admin_id.as_str()),
        "{:?}",
        audit(&db)
    );

    // Signing out ends the session: its cookie no longer opens a page.
    let session = browser.cookies.clone();
    let csrf = browser.csrf();
    let out = browser.post("/console/sign-out", &[("csrf", &csrf)]);
    assert_eq!(out.status, 303);
    browser.cookies = session;
    assert_eq!(browser.get("/console").status, 303);
}

#[test]
fn behind_https_the_cookie_is_secure() {
    let db = TestDb::new();
    let server = HttpServer::start_with_env(
        &db,
        &[],
        &[("TOLLGATE_HTTP_PUBLIC_BASE_URL", "https://gateway.example")],
    );
    let mut browser = Browser::new(&server);
    let signed = browser.sign_in(db.admin_key.as_deref().expect("admin key"));
    assert_eq!(signed.status, 303);
    let cookie = set_cookie(&signed, SESSION_COOKIE).expect("session cookie");
    assert!(cookie.ends_with("; Secure"), "{cookie}");
}

#[test]
fn a_key_without_admin_cannot_sign_in_and_failed_sign_ins_are_throttled() {
    let db = TestDb::new();
    let agent = db.create_key("agent", "*", &[]);
    let server = HttpServer::start(&db, &[]);
    let mut browser = Browser::new(&server);

    let refused = browser.sign_in(&agent.token);
    assert_eq!(refused.status, 403);
    assert!(set_cookie(&refused, SESSION_COOKIE).is_none());
    let message = element_text(&text(&refused), "error").expect("an error");
    assert!(message.contains("admin scope"), "{message}");
    assert_eq!(browser.get("/console").status, 303);

    // Wrong keys count against this address as failed MCP authentication does; past the
    // allowance even the right key is turned away until the window ends.
    let limit = tollgate::guards::auth::AUTH_FAILURE_LIMIT;
    let wrong = "tg_live_0000000000000000000000_wrongwrongwrongwrongwrongwrongwrongwr";
    // The throttle's windows are fixed: should one turn during the attempts, the count
    // starts again, so the refusal comes within two windows' worth of failures.
    let mut statuses = Vec::new();
    while statuses.last() != Some(&429) && statuses.len() <= 2 * limit as usize + 1 {
        statuses.push(browser.sign_in(wrong).status);
    }
    let failures = statuses.iter().filter(|s| **s == 401).count();
    assert!(
        (limit as usize..=2 * limit as usize).contains(&failures),
        "{statuses:?}"
    );
    assert_eq!(failures + 1, statuses.len(), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    let throttled = browser.sign_in(db.admin_key.as_deref().expect("admin key"));
    assert_eq!(throttled.status, 429);
    assert!(throttled.header("retry-after").is_some());
    assert!(set_cookie(&throttled, SESSION_COOKIE).is_none());
    // The MCP endpoint sees the same throttle from this address.
    assert_eq!(
        call_outcome(
            &server,
            db.admin_key.as_deref().expect("key"),
            "search_clients"
        ),
        "rate_limited"
    );
}

#[test]
fn a_form_without_its_csrf_token_or_from_another_origin_is_refused_and_changes_nothing() {
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    let mut browser = Browser::signed_in(&server, &db);
    let csrf = browser.csrf();
    let before = keys(&db).len();
    let origin = browser.origin.clone();
    let other_port = format!("http://127.0.0.1:{}", server.addr.port() + 1);
    let path = "/console/credentials/keys";
    fn fields(token: &str) -> [(&str, &str); 3] {
        [("name", "x"), ("scopes", "clients:read"), ("csrf", token)]
    }
    let zeros = "0".repeat(64);

    let no_token = browser.post_from(path, &fields("")[..2], Some(&origin), &[]);
    assert_eq!(no_token.status, 403, "{}", text(&no_token));
    let wrong_token = browser.post_from(path, &fields(&zeros), Some(&origin), &[]);
    assert_eq!(wrong_token.status, 403);
    let cross_site = browser.post_from(
        path,
        &fields(&csrf),
        Some(&origin),
        &[("Sec-Fetch-Site", "cross-site")],
    );
    assert_eq!(cross_site.status, 403);
    let other_local_origin = browser.post_from(path, &fields(&csrf), Some(&other_port), &[]);
    assert_eq!(other_local_origin.status, 403);
    // An outside origin is refused by the listener's origin policy before the console.
    let outside = browser.post_from(path, &fields(&csrf), Some("https://evil.example"), &[]);
    assert_eq!(outside.status, 403);
    assert_eq!(
        outside.json()["error"]["data"]["code"],
        json!("origin_not_allowed")
    );
    assert_eq!(keys(&db).len(), before, "nothing was created");

    // The same form from the page's own origin with its token goes through.
    let made = browser.post_from(
        path,
        &fields(&csrf),
        Some(&origin),
        &[("Sec-Fetch-Site", "same-origin")],
    );
    assert_eq!(made.status, 200, "{}", text(&made));
    assert_eq!(keys(&db).len(), before + 1);
    assert_page_headers(&made);
}

#[test]
fn a_key_made_and_revoked_in_the_console_is_refused_on_the_next_call_and_both_changes_are_audited()
{
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    let mut browser = Browser::signed_in(&server, &db);
    let csrf = browser.csrf();
    let made = browser.post(
        "/console/credentials/keys",
        &[
            ("csrf", &csrf),
            ("name", "reader"),
            ("scopes", "clients:read"),
            ("mode", "live"),
            ("guard_channel", ""),
        ],
    );
    assert_eq!(made.status, 200, "{}", text(&made));
    let page = text(&made);
    let secret = element_text(&page, "secret").expect("the secret");
    let id = element_text(&page, "public-id").expect("the id");
    assert!(secret.starts_with(&format!("tg_live_{id}_")), "{secret}");
    // Shown once: the list does not show it.
    let list = text(&browser.get("/console/credentials"));
    assert!(list.contains(&format!("id=\"key-{id}\"")));
    assert!(!list.contains(&secret));

    assert_eq!(call_outcome(&server, &secret, "search_clients"), "ok");
    let confirm = browser.get(&format!("/console/credentials/keys/{id}/revoke"));
    assert_eq!(confirm.status, 200);
    assert!(text(&confirm).contains("id=\"confirm\""));
    let revoked = browser.post(
        &format!("/console/credentials/keys/{id}/revoke"),
        &[("csrf", &csrf)],
    );
    assert_eq!(revoked.status, 303, "{}", text(&revoked));
    let list = text(&browser.get("/console/credentials"));
    let row = &list[list.find(&format!("id=\"key-{id}\"")).expect("row")..];
    assert!(
        row[..row.find("</tr>").expect("end")].contains(">revoked<"),
        "{row}"
    );
    assert_eq!(
        call_outcome(&server, &secret, "search_clients"),
        "invalid_token"
    );

    let admin_id = db.admin_key_id();
    let rows = audit(&db);
    for action in ["console:create_key", "console:revoke_key"] {
        let row = rows
            .iter()
            .find(|r| r["tool"] == action)
            .unwrap_or_else(|| panic!("{action}: {rows:?}"));
        assert_eq!(row["credential_id"], json!(admin_id), "{row}");
        assert_eq!(row["request_id"], json!(format!("\"{id}\"")), "{row}");
    }
}

#[test]
fn a_limit_changed_in_the_console_applies_to_the_next_call() {
    let db = TestDb::new();
    let reader = db.create_key("reader", "clients:read", &[]);
    let server = HttpServer::start(&db, &[]);
    let mut browser = Browser::signed_in(&server, &db);
    let csrf = browser.csrf();
    let bad = browser.post(
        "/console/limits/credential",
        &[
            ("csrf", &csrf),
            ("credential", &reader.id),
            ("category", "read"),
            ("per_minute", "0"),
        ],
    );
    assert_eq!(bad.status, 422);
    assert!(
        element_text(&text(&bad), "form-error")
            .expect("error")
            .contains("at least 1")
    );
    let set = browser.post(
        "/console/limits/credential",
        &[
            ("csrf", &csrf),
            ("credential", &reader.id),
            ("category", "read"),
            ("per_minute", "1"),
        ],
    );
    assert_eq!(set.status, 303, "{}", text(&set));
    let limits = text(&browser.get("/console/limits"));
    assert!(
        limits.contains(&format!("id=\"override-{}-read\"", reader.id)),
        "{limits}"
    );
    assert_eq!(call_outcome(&server, &reader.token, "search_clients"), "ok");
    assert_eq!(
        call_outcome(&server, &reader.token, "search_clients"),
        "rate_limited"
    );
    assert!(audit(&db).iter().any(|r| r["tool"] == "console:set_limit"));
}

#[test]
fn the_audit_page_filters_and_exports_csv_with_formulas_defused() {
    let db = TestDb::new();
    let token = db.admin_key.clone().expect("admin key");
    let server = HttpServer::start(&db, &[]);
    assert_eq!(call_outcome(&server, &token, "search_clients"), "ok");
    assert_eq!(call_outcome(&server, &token, "=cmd|calc"), "unknown_tool");
    // A tool name outside ASCII cannot travel in the modern era's `Mcp-Name` header:
    // called over stdio instead.
    let mut stdio = StdioServer::start_with_token(&db, Some(&token), &[]);
    stdio.initialize("2025-06-18");
    let reply = stdio.call_tool("＝cmd|calc", json!({}));
    assert_eq!(reply["error"]["data"]["code"], "unknown_tool", "{reply}");
    drop(stdio);
    until_audited(&db, &[], 3);
    let mut browser = Browser::new(&server);
    assert_eq!(browser.sign_in(&token).status, 303);
    let page = text(&browser.get("/console/audit?tool=search_clients"));
    let rows = page.matches("class=\"audit-row\"").count();
    assert_eq!(rows, 1, "{page}");
    assert_eq!(page.matches("\">search_clients</td>").count(), 1, "{page}");
    let failures = text(&browser.get("/console/audit?failures=1"));
    assert!(failures.contains("unknown_tool"));
    assert!(!failures.contains("\">ok</td>"), "{failures}");
    let csv = browser.get("/console/audit.csv?outcome=unknown_tool");
    assert_eq!(csv.status, 200);
    assert_eq!(csv.header("content-type"), Some("text/csv; charset=utf-8"));
    let body = text(&csv);
    let mut lines = body.lines();
    assert!(
        lines
            .next()
            .expect("header")
            .starts_with("id,at,credential_id,client_id,tool,outcome")
    );
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 2, "{body}");
    assert!(
        rows.iter()
            .any(|row| row.contains(",'=cmd|calc,unknown_tool,")),
        "{body}"
    );
    assert!(
        rows.iter()
            .any(|row| row.contains(",'＝cmd|calc,unknown_tool,")),
        "the fullwidth equals sign is defused too: {body}"
    );
}

#[test]
fn revoking_the_operator_key_ends_its_console_session() {
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    let mut browser = Browser::signed_in(&server, &db);
    assert_eq!(browser.get("/console").status, 200);
    let out = db.run(&["key", "revoke", &db.admin_key_id()]);
    assert!(out.status.success());
    assert_eq!(browser.get("/console").status, 303);
}

#[test]
fn the_console_can_be_turned_off_and_speaks_the_companys_language() {
    let db = TestDb::new();
    let off = HttpServer::start_with_env(&db, &[], &[("TOLLGATE_CONSOLE_ENABLED", "false")]);
    let page = off.get("/console/sign-in");
    assert_eq!(page.status, 404);
    assert_eq!(
        page.json()["error"]["data"]["code"],
        json!("path_not_found")
    );
    drop(off);
    assert!(
        db.run(&["company", "set", "--locale", "es"])
            .status
            .success()
    );
    let server = HttpServer::start(&db, &[]);
    let html = text(&server.get("/console/sign-in"));
    assert!(html.contains("<html lang=\"es\">"), "{html}");
    assert!(html.contains("Iniciar sesión"));
}

/// A console in this process on a manual clock.
fn in_process(db: &TestDb) -> (ManualClock, Console) {
    let flags = Overrides {
        database: Some(db.database_arg().into()),
        ..Overrides::default()
    };
    let config = Config::load(None, &[], &flags).expect("config");
    let store = tollgate::store::Store::open_database(
        &db.database(),
        &tollgate::store::StoreOptions::from_config(&config, false),
    )
    .expect("store");
    let clock = ManualClock::at_unix_secs(crate::clock::T0);
    let server = tollgate::ops::assemble::build_server_with_clock(&config, store, clock.clock())
        .expect("server");
    let console = Console::new(Arc::new(server), &config).expect("the console is on by default");
    (clock, console)
}

#[test]
fn a_sign_in_ends_after_its_idle_time_and_lasts_while_it_is_used() {
    let db = TestDb::new();
    let (clock, console) = in_process(&db);
    let headers = |cookie: &str| {
        vec![
            ("cookie".to_owned(), cookie.to_owned()),
            ("host".to_owned(), "127.0.0.1".to_owned()),
        ]
    };
    let request = |method,
                   path: &'static str,
                   headers: &[(String, String)],
                   body: &[u8]|
     -> tollgate::console::Response {
        console.handle(&Request {
            method,
            path,
            query: "",
            headers,
            body,
            source: "http:127.0.0.1",
        })
    };
    let form = request(Method::Get, "/console/sign-in", &headers(""), b"");
    let pairing = form
        .headers
        .iter()
        .find(|(n, v)| n == "Set-Cookie" && v.starts_with(SIGN_IN_COOKIE))
        .map(|(_, v)| v.split(';').next().expect("pair").to_owned())
        .expect("pairing cookie");
    let token = pairing.split_once('=').expect("=").1.to_owned();
    let body = format!("csrf={token}&key={}", db.admin_key.as_deref().expect("key"));
    let signed = request(
        Method::Post,
        "/console/sign-in",
        &headers(&pairing),
        body.as_bytes(),
    );
    assert_eq!(signed.status, 303);
    let session = signed
        .headers
        .iter()
        .find(|(n, v)| n == "Set-Cookie" && v.starts_with(SESSION_COOKIE))
        .map(|(_, v)| v.split(';').next().expect("pair").to_owned())
        .expect("session cookie");
    let minute = std::time::Duration::from_secs(60);
    for _ in 0..3 {
        clock.advance(14 * minute);
        assert_eq!(
            request(Method::Get, "/console", &headers(&session), b"").status,
            200
        );
    }
    clock.advance(15 * minute);
    let expired = request(Method::Get, "/console", &headers(&session), b"");
    assert_eq!(expired.status, 303);
    assert_eq!(
        expired
            .headers
            .iter()
            .find(|(n, _)| n == "Location")
            .map(|(_, v)| v.as_str()),
        Some("/console/sign-in")
    );
}

#[test]
fn a_change_the_store_cannot_take_is_answered_as_the_catalog_answers_it_and_changes_nothing() {
    let db = TestDb::new();
    let server = HttpServer::start_with_env(&db, &[], &[("TOLLGATE_STORE_BUSY_TIMEOUT_MS", "200")]);
    let mut browser = Browser::signed_in(&server, &db);
    let csrf = browser.csrf();
    let before = keys(&db).len();
    let fields = [
        ("csrf", csrf.as_str()),
        ("name", "busy"),
        ("scopes", "clients:read"),
    ];
    let lock = db.hold_write_lock();
    let refused = browser.post("/console/credentials/keys", &fields);
    drop(lock);
    assert_eq!(refused.status, 503, "{}", text(&refused));
    let message = element_text(&text(&refused), "error").expect("an error");
    assert_eq!(
        message,
        "The server&#x27;s storage is temporarily unavailable; retry with backoff."
    );
    assert_eq!(keys(&db).len(), before);
    let made = browser.post("/console/credentials/keys", &fields);
    assert_eq!(made.status, 200, "{}", text(&made));
    assert_eq!(keys(&db).len(), before + 1);
}

/// One operator (or a script) signing in over and over ends only its own oldest sign-ins:
/// another operator signed in before stays signed in.
#[test]
fn three_hundred_sign_ins_by_one_operator_leave_another_signed_in() {
    let db = TestDb::new();
    let other_key = db.create_key("second operator", "admin", &[]);
    let server = HttpServer::start(&db, &[]);
    let mut other = Browser::new(&server);
    assert_eq!(other.sign_in(&other_key.token).status, 303);
    let admin = db.admin_key.clone().expect("admin key");
    let mut latest = None;
    for i in 0..300 {
        let mut browser = Browser::new(&server);
        assert_eq!(browser.sign_in(&admin).status, 303, "sign-in {i}");
        latest = Some(browser);
    }
    assert_eq!(
        other.get("/console").status,
        200,
        "the other operator is still signed in"
    );
    let mut latest = latest.expect("signed in");
    assert_eq!(latest.get("/console").status, 200);
}

/// The text of the first `<{tag} class="{class}"…>` element after `from` in `page`, tags
/// stripped (entities left as the page wrote them).
fn cell(page: &str, from: &str, tag: &str, class: &str) -> Option<String> {
    let start = page.find(from)?;
    let rest = &page[start..];
    let open = rest.find(&format!("<{tag} class=\"{class}\""))?;
    let rest = &rest[open..];
    let body = &rest[rest.find('>')? + 1..];
    let body = &body[..body.find(&format!("</{tag}>"))?];
    let mut text = String::new();
    let mut in_tag = false;
    for c in body.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    Some(text.trim().to_owned())
}

/// `text` as the console's templates escape it.
fn escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#x27;")
        .replace('/', "&#x2f;")
}

/// The id of the newest audit row of `tool` with `outcome`.
fn row_of(db: &TestDb, tool: &str, outcome: &str) -> i64 {
    let rows = db.run_json(&["audit", "--json", "--tool", tool, "--outcome", outcome]);
    rows[0]["id"]
        .as_i64()
        .unwrap_or_else(|| panic!("no {tool} row with {outcome}: {rows}"))
}

#[test]
fn an_audit_row_opens_on_a_page_of_its_own_with_what_the_catalog_says_of_its_code() {
    let db = TestDb::new();
    let reader = db.create_key("reader", "clients:read", &[]);
    let token = db.admin_key.clone().expect("admin key");
    let server = HttpServer::start(&db, &[]);
    assert_eq!(call_outcome(&server, &token, "search_clients"), "ok");
    assert_eq!(
        call_outcome(&server, &reader.token, "search_invoices"),
        "insufficient_scope"
    );
    until_audited(&db, &["--outcome", "insufficient_scope"], 1);
    until_audited(&db, &["--tool", "search_clients"], 1);
    let ok = row_of(&db, "search_clients", "ok");
    let refused = row_of(&db, "search_invoices", "insufficient_scope");

    // Without a sign-in, a row's page sends the browser to the sign-in page like any other.
    let mut browser = Browser::new(&server);
    let anonymous = browser.get(&format!("/console/audit/{ok}"));
    assert_eq!(anonymous.status, 303);
    assert_eq!(anonymous.header("location"), Some("/console/sign-in"));

    let mut browser = Browser::signed_in(&server, &db);
    // Each row of the list links to its page.
    let list = text(&browser.get("/console/audit"));
    for id in [ok, refused] {
        assert!(
            list.contains(&format!("href=\"/console/audit/{id}\"")),
            "{list}"
        );
    }

    let page = browser.get(&format!("/console/audit/{ok}"));
    assert_eq!(page.status, 200, "{}", text(&page));
    assert_page_headers(&page);
    let html = text(&page);
    let field = |html: &str, class: &str| cell(html, "id=\"audit-row\"", "dd", class);
    assert_eq!(field(&html, "tool").as_deref(), Some("search_clients"));
    assert_eq!(field(&html, "outcome").as_deref(), Some("ok (admitted)"));
    // The caller by its key's name, its id beside it on the row's own page.
    assert_eq!(
        field(&html, "credential"),
        Some(format!("admin {}", db.admin_key_id()))
    );
    assert_eq!(field(&html, "transport").as_deref(), Some("http"));
    assert_eq!(field(&html, "request-id").as_deref(), Some("1"));
    let duration = field(&html, "duration").expect("a duration");
    assert!(duration.ends_with(" ms"), "{duration}");
    let at = field(&html, "at").expect("a time");
    assert!(
        html.contains(&format!("<time datetime=\"{at}\">")),
        "{html}"
    );
    assert!(
        !html.contains("id=\"catalog\""),
        "an admitted call has no catalog entry"
    );

    let page = browser.get(&format!("/console/audit/{refused}"));
    assert_eq!(page.status, 200, "{}", text(&page));
    let html = text(&page);
    assert_eq!(
        field(&html, "outcome").as_deref(),
        Some("insufficient_scope")
    );
    assert_eq!(
        field(&html, "credential"),
        Some(format!("reader {}", reader.id))
    );
    let entry = |class: &str| cell(&html, "id=\"catalog\"", "dd", class);
    assert_eq!(entry("code").as_deref(), Some("insufficient_scope"));
    assert_eq!(entry("class").as_deref(), Some("refused by a guard"));
    assert_eq!(entry("http-status").as_deref(), Some("403"));
    assert_eq!(entry("error-code").as_deref(), Some("1105"));
    assert_eq!(entry("retryable").as_deref(), Some("false"));
    assert_eq!(entry("rpc-code").as_deref(), Some("-32005"));
    let template = tollgate::catalog::ErrorKind::InsufficientScope
        .spec()
        .hint_en;
    assert_eq!(entry("hint"), Some(escaped(template)));
    assert!(!html.contains("id=\"shared-code\""), "{html}");

    // A row that is not there, or a path that names no row: the console's 404 page.
    for path in [
        format!("/console/audit/{}", refused + 1000),
        "/console/audit/abc".to_owned(),
        format!("/console/audit/{ok}/more"),
    ] {
        let missing = browser.get(&path);
        assert_eq!(missing.status, 404, "{path}");
        assert_page_headers(&missing);
        assert_eq!(
            element_text(&text(&missing), "error").as_deref(),
            Some("There is no such page in the console."),
            "{path}"
        );
    }
}

/// An OpenAPI document of two read operations: `getThing` answers with the status its
/// `case` names, `listThings` is never called.
fn shop_document() -> Value {
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Shop", "version": "1"},
        "paths": {
            "/things/{case}": {"get": {
                "operationId": "getThing",
                "parameters": [{"name": "case", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}
            }},
            "/things": {"get": {
                "operationId": "listThings",
                "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}
            }}
        }
    })
}

#[test]
fn the_backends_page_counts_each_tools_calls_and_failures_of_the_last_day() {
    let rest = crate::util::RestBackend::start(|req| {
        let json = vec![("Content-Type".to_owned(), "application/json".to_owned())];
        match req.target.as_str() {
            "/things/ok" => (200, json, br#"{"id":1}"#.to_vec()),
            _ => (
                404,
                json,
                br#"{"error":{"code":"E404","message":"no such thing"}}"#.to_vec(),
            ),
        }
    });
    let db = TestDb::new();
    std::fs::write(db.dir.path().join("shop.json"), shop_document().to_string()).expect("spec");
    let config = format!(
        "[[backends]]\nname = \"shop\"\nkind = \"openapi\"\nspec = \"shop.json\"\nbase_url = \"{}\"\n",
        rest.url()
    );
    // A call of more than a day ago is not counted.
    let day_ago_ms = crate::util::unix_now() * 1000 - 25 * 3_600_000;
    db.sql(&format!(
        "INSERT INTO audit_log (at, request_id, tool, outcome, duration_us, transport, backend) \
         VALUES ({day_ago_ms}, '1', 'shop_get_thing', 'not_found', 10, 'http', 'shop')"
    ));
    let server = HttpServer::start_with_config(&db, &config, &[]);
    let token = db.admin_key.clone().expect("admin key");
    let other = db.create_key("other", "clients:read", &[]);
    let get = |token: &str, case: &str| {
        let reply = server
            .modern_tool_call(token, "shop_get_thing", &json!({"case": case}))
            .json();
        reply["error"]["data"]["code"]
            .as_str()
            .or(reply["result"]["_meta"]["dev.tollgate/error"]["code"].as_str())
            .unwrap_or("ok")
            .to_owned()
    };
    assert_eq!(get(&token, "ok"), "ok");
    assert_eq!(get(&token, "ok"), "ok");
    assert_eq!(get(&token, "gone"), "not_found");
    // A refusal of a call meant for the backend counts as its failure too.
    assert_eq!(get(&other.token, "ok"), "insufficient_scope");
    // The built-in tools are not a backend's.
    assert_eq!(call_outcome(&server, &token, "search_clients"), "ok");
    until_audited(&db, &["--tool", "shop_get_thing"], 5);
    until_audited(&db, &["--tool", "search_clients"], 1);

    let mut browser = Browser::signed_in(&server, &db);
    let page = browser.get("/console/backends");
    assert_eq!(page.status, 200, "{}", text(&page));
    let html = text(&page);
    let backend = |class: &str| cell(&html, "id=\"backend-shop\"", "td", class);
    assert_eq!(backend("state").as_deref(), Some("ready"));
    assert_eq!(backend("tool-count").as_deref(), Some("2"));
    assert_eq!(backend("in-flight").as_deref(), Some("0 / 64"));
    assert_eq!(backend("queued").as_deref(), Some("0"));
    assert_eq!(backend("circuit").as_deref(), Some("closed"));
    assert_eq!(backend("calls").as_deref(), Some("4"));
    assert_eq!(backend("failures").as_deref(), Some("2"));
    let tool = |name: &str, class: &str| cell(&html, &format!("id=\"tool-{name}\""), "td", class);
    assert_eq!(
        tool("shop_get_thing", "scope").as_deref(),
        Some("shop:read")
    );
    assert_eq!(tool("shop_get_thing", "category").as_deref(), Some("read"));
    assert_eq!(tool("shop_get_thing", "calls").as_deref(), Some("4"));
    assert_eq!(tool("shop_get_thing", "failures").as_deref(), Some("2"));
    assert_eq!(
        tool("shop_list_things", "scope").as_deref(),
        Some("shop:read")
    );
    assert_eq!(tool("shop_list_things", "calls").as_deref(), Some("0"));
    assert_eq!(tool("shop_list_things", "failures").as_deref(), Some("0"));
    // The failures link to their rows in the audit log.
    let row = &html[html.find("id=\"tool-shop_get_thing\"").expect("row")..];
    let link = row
        .split("href=\"")
        .nth(2)
        .and_then(|rest| rest.split('"').next())
        .expect("the failures link")
        .replace("&#x2f;", "/")
        .replace("&amp;", "&");
    assert!(
        link.starts_with("/console/audit?tool=shop_get_thing&failures=1&since="),
        "{link}"
    );
    let failures = text(&browser.get(&link));
    assert_eq!(
        failures.matches("class=\"audit-row\"").count(),
        2,
        "{failures}"
    );
}

/// The entries of the legend of the chart `id` on the overview, as their text reads.
fn legend(page: &str, id: &str) -> Vec<String> {
    let start = page
        .find(&format!("<figure id=\"{id}\""))
        .unwrap_or_else(|| panic!("no chart {id}: {page}"));
    let figure = &page[start..];
    let figure = &figure[..figure.find("</figure>").expect("the chart's end")];
    figure
        .split("<li>")
        .skip(1)
        .map(|item| {
            let item = &item[..item.find("</li>").expect("the item's end")];
            let mut text = String::new();
            let mut in_tag = false;
            for c in item.chars() {
                match c {
                    '<' => in_tag = true,
                    '>' => in_tag = false,
                    c if !in_tag => text.push(c),
                    _ => {}
                }
            }
            text
        })
        .collect()
}

#[test]
fn a_backends_own_429_is_charted_as_a_tool_failure_and_our_own_limit_as_a_refusal() {
    let reached = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&reached);
    let rest = crate::util::RestBackend::start(move |req| {
        if req.target.starts_with("/things/") {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        let json = vec![("Content-Type".to_owned(), "application/json".to_owned())];
        match req.target.as_str() {
            "/things/ok" => (200, json, br#"{"id":1}"#.to_vec()),
            _ => (
                429,
                json,
                br#"{"error":{"code":"E429","message":"slow down"}}"#.to_vec(),
            ),
        }
    });
    let db = TestDb::new();
    std::fs::write(db.dir.path().join("shop.json"), shop_document().to_string()).expect("spec");
    let config = format!(
        "[[backends]]\nname = \"shop\"\nkind = \"openapi\"\nspec = \"shop.json\"\nbase_url = \"{}\"\n",
        rest.url()
    );
    let token = db.admin_key.clone().expect("admin key");
    // A backend's scopes are known only where its `[[backends]]` entry is.
    let path = db.dir.path().join("tollgate.toml");
    std::fs::write(&path, &config).expect("config");
    let with_config = ["--config", path.to_str().expect("utf-8")];
    let limited = db.create_key("limited", "shop:read", &with_config);
    db.limit_per_minute(&limited.id, "read", 1);
    let other = db.create_key("other", "clients:read", &[]);
    let server = HttpServer::start_with_config(&db, &config, &[]);
    let get = |token: &str, case: &str| {
        let reply = server
            .modern_tool_call(token, "shop_get_thing", &json!({"case": case}))
            .json();
        reply["error"]["data"]["code"]
            .as_str()
            .or(reply["result"]["_meta"]["dev.tollgate/error"]["code"].as_str())
            .unwrap_or("ok")
            .to_owned()
    };
    // The backend's own 429, twice: the call ran and its tool failed.
    assert_eq!(get(&token, "busy"), "rate_limited");
    assert_eq!(get(&token, "busy"), "rate_limited");
    // Our own limit: a guard refused the second call before the backend saw it.
    // Windows are fixed minutes: should one turn after the admitted call, the next window
    // admits one more, so the refusal comes within two windows' worth.
    let mut admitted = 0;
    loop {
        match get(&limited.token, "ok").as_str() {
            "ok" if admitted < 2 => admitted += 1,
            outcome => {
                assert_eq!(outcome, "rate_limited");
                break;
            }
        }
    }
    assert!(admitted >= 1, "the one call a minute was refused");
    assert_eq!(get(&other.token, "ok"), "insufficient_scope");
    until_audited(&db, &["--tool", "shop_get_thing"], 4 + admitted);
    assert_eq!(
        reached.load(Ordering::SeqCst),
        2 + admitted,
        "the refusals never reached the backend"
    );
    let admitted_legend = format!("admitted: {admitted}");

    let mut browser = Browser::signed_in(&server, &db);
    let overview = text(&browser.get("/console"));
    for chart in ["calls-hour", "calls-day"] {
        assert_eq!(
            legend(&overview, chart),
            [
                admitted_legend.as_str(),
                "tool failure: 2",
                "insufficient_scope: 1",
                "rate_limited: 1"
            ],
            "{chart}"
        );
    }

    // Each row's page shows the one catalog entry it names.
    let rows = db.run_json(&["audit", "--json", "--outcome", "rate_limited"]);
    let rows = rows.as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{rows:?}");
    let class_of = |row: &Value| {
        let page = text(&browser.get(&format!("/console/audit/{}", row["id"])));
        assert!(!page.contains("id=\"shared-code\""), "{page}");
        let entry = |class: &str| cell(&page, "id=\"catalog\"", "dd", class);
        (
            row["credential_id"].as_str().map(str::to_owned),
            entry("class"),
            entry("rpc-code"),
        )
    };
    let mut classes: Vec<_> = rows.iter().map(class_of).collect();
    classes.sort();
    let admin = Some(db.admin_key_id());
    let tool = Some("tool failure".to_owned());
    let mut expected = vec![
        (admin.clone(), tool.clone(), None),
        (admin, tool, None),
        (
            Some(limited.id.clone()),
            Some("refused by a guard".to_owned()),
            Some("-32006".to_owned()),
        ),
    ];
    expected.sort();
    assert_eq!(classes, expected);
}

/// Whether `id` is blocked, as `tollgate users list` says.
fn user_blocked(db: &TestDb, id: &str) -> bool {
    let users = db.run_json(&["users", "list", "--json"]);
    let user = users
        .as_array()
        .expect("users")
        .iter()
        .find(|u| u["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} is not listed: {users}"));
    user["blocked"].as_bool().expect("blocked")
}

#[test]
fn the_users_page_counts_a_users_calls_and_refusals_and_blocks_it_behind_a_confirmation() {
    let db = TestDb::new();
    let now = unix_now();
    let name = "<b>Ana</b> & co";
    let ana = seed_user(&db, "ana@acme.example", Some(name), now);
    let bob = seed_user(&db, "bob@acme.example", None, now - 60);
    db.sql(&format!(
        "UPDATE users SET write_per_minute = 3 WHERE id = '{bob}'"
    ));
    let at = now * 1000;
    // A call of two days ago is out of the window (the log is written in time order).
    seed_call(&db, &ana, at - 2 * 86_400_000, "ok", "");
    seed_call(&db, &ana, at - 3_000, "ok", "");
    seed_call(&db, &ana, at - 2_000, "rate_limited", "RateLimited");
    // A backend's own 429 is a call, not a refusal.
    seed_call(&db, &ana, at - 1_000, "rate_limited", "BackendRateLimited");
    let server = HttpServer::start(&db, &[]);
    let mut browser = Browser::signed_in(&server, &db);

    let page = browser.get("/console/users");
    assert_eq!(page.status, 200, "{}", text(&page));
    assert_page_headers(&page);
    let html = text(&page);
    assert!(
        html.contains("<a href=\"&#x2f;console&#x2f;users\" aria-current=\"page\">Users</a>"),
        "{html}"
    );
    assert!(html.contains(&escaped(name)), "{html}");
    assert!(
        !html.contains("<b>Ana"),
        "a name from a token is escaped: {html}"
    );
    let ana_row = format!("id=\"user-{ana}\"");
    let bob_row = format!("id=\"user-{bob}\"");
    assert!(
        html.find(&ana_row) < html.find(&bob_row),
        "the most recently seen first"
    );
    let of = |row: &str, class: &str| cell(&html, row, "td", class).expect(class);
    assert!(
        of(&ana_row, "subject").starts_with("ana@acme.example"),
        "{html}"
    );
    assert_eq!(
        cell(&html, &ana_row, "small", "issuer").expect("issuer"),
        format!("{} · OAuth client portal", escaped(ISSUER))
    );
    assert_eq!(of(&ana_row, "calls"), "3");
    assert_eq!(of(&ana_row, "refusals"), "1");
    assert_eq!(of(&ana_row, "status"), "active");
    assert_eq!(of(&ana_row, "own-limits"), "plan default");
    assert_eq!(of(&bob_row, "calls"), "0");
    assert_eq!(of(&bob_row, "own-limits"), "write 3");

    // The audit log names her rows.
    let audit_page = text(&browser.get(&format!("/console/audit?credential={ana}")));
    assert_eq!(
        audit_page
            .matches(&format!(
                "title=\"{ana}\"><span class=\"name user-name\">{}</span>",
                escaped(name)
            ))
            .count(),
        4,
        "{audit_page}"
    );

    // The export names her too; a name that reads as a formula is defused.
    let formula = seed_user(&db, "sheet@acme.example", Some("=cmd|calc"), now);
    seed_call(&db, &formula, at, "ok", "");
    let csv = text(&browser.get("/console/audit.csv?tool=search_clients"));
    // `user_name` is the next-to-last column, before `trace_id` (empty: no trace).
    let names: Vec<&str> = csv
        .lines()
        .skip(1)
        .map(|line| line.rsplit(',').nth(1).expect("a user_name field"))
        .collect();
    assert_eq!(names, ["'=cmd|calc", name, name, name, name], "{csv}");
    assert!(
        csv.lines()
            .next()
            .expect("header")
            .ends_with(",request_id,user_name,trace_id")
    );

    // Block: a confirmation, then the form; without its token nothing changes.
    let path = format!("/console/users/{ana}/block");
    let confirm = text(&browser.get(&path));
    assert!(confirm.contains("id=\"confirm\""), "{confirm}");
    assert!(
        confirm.contains(&format!("Block {} ({ana})?", escaped(name))),
        "{confirm}"
    );
    assert!(
        confirm.contains("<a href=\"&#x2f;console&#x2f;users\">"),
        "{confirm}"
    );
    let forged = browser.post(&path, &[("csrf", "not-the-token")]);
    assert_eq!(forged.status, 403);
    assert!(!user_blocked(&db, &ana));
    let csrf = browser.csrf();
    let blocked = browser.post(&path, &[("csrf", &csrf)]);
    assert_eq!(blocked.status, 303, "{}", text(&blocked));
    assert_eq!(blocked.header("location"), Some("/console/users"));
    assert!(user_blocked(&db, &ana));
    let html = text(&browser.get("/console/users"));
    let status = cell(&html, &ana_row, "td", "status").expect("status");
    assert!(status.starts_with("blocked since "), "{status}");
    assert!(html.contains(&format!("href=\"/console/users/{ana}/unblock\"")));

    let unblocked = browser.post(&format!("/console/users/{ana}/unblock"), &[("csrf", &csrf)]);
    assert_eq!(unblocked.status, 303, "{}", text(&unblocked));
    assert!(!user_blocked(&db, &ana));

    // Both changes are audit rows under the operator's credential, naming the user.
    let rows = audit(&db);
    for action in ["console:block_user", "console:unblock_user"] {
        let row = rows
            .iter()
            .find(|r| r["tool"] == action)
            .unwrap_or_else(|| panic!("{action}: {rows:?}"));
        assert_eq!(row["credential_id"], json!(db.admin_key_id()), "{row}");
        assert_eq!(row["request_id"], json!(format!("\"{ana}\"")), "{row}");
    }

    // A path that names no user is not a page.
    let nobody = tollgate::store::users::user_id(ISSUER, "nobody");
    assert_eq!(
        browser
            .get(&format!("/console/users/{nobody}/block"))
            .status,
        404
    );
    let none = browser.post(
        &format!("/console/users/{nobody}/block"),
        &[("csrf", &csrf)],
    );
    assert_eq!(none.status, 404);
    assert_eq!(
        browser.get(&format!("/console/users/{ana}/delete")).status,
        404
    );
}

/// Writes audit rows of single calls `(at_ms, tool, backend, duration_us)` by `caller`, in
/// the order given (the log is written in time order), and a summary row of refusals.
fn seed_timed(db: &TestDb, caller: &str, rows: &[(i64, &str, Option<&str>, i64)]) {
    let values: Vec<String> = rows
        .iter()
        .map(|(at, tool, backend, us)| {
            let backend = backend.map_or_else(|| "NULL".to_owned(), |b| format!("'{b}'"));
            format!("({at}, '1', '{caller}', '{tool}', 'ok', {us}, 'http', {backend})")
        })
        .collect();
    db.sql(&format!(
        "INSERT INTO audit_log (at, request_id, credential_id, tool, outcome, duration_us, \
         transport, backend) VALUES {}",
        values.join(", ")
    ));
}

#[test]
fn the_latency_page_shows_each_tools_percentiles_and_its_slowest_calls() {
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    // Behind the sign-in, as the audit log is.
    let anonymous = server.get("/console/latency");
    assert_eq!(anonymous.status, 303);
    let at = unix_now() * 1000;
    let reader = db.create_key("latency reader", "clients:read", &[]);
    // Three hours ago (in the day, not the hour): the day's slowest call.
    seed_timed(
        &db,
        &reader.id,
        &[(at - 3 * 3_600_000, "search_clients", None, 500_000)],
    );
    // In the last hour: 1 to 100 ms, and two calls of a backend's tool.
    let hour: Vec<(i64, &str, Option<&str>, i64)> = (1..=100)
        .map(|ms| (at - 600_000 + ms, "search_clients", None, ms * 1000))
        .chain([
            (at - 1_000, "shop_list_things", Some("shop"), 7_000),
            (at - 900, "shop_list_things", Some("shop"), 3_000),
        ])
        .collect();
    seed_timed(&db, &reader.id, &hour);
    // A summary row of refusals times none of them: left out, however long it says.
    db.sql(&format!(
        "INSERT INTO audit_log (at, request_id, credential_id, tool, outcome, duration_us, \
         transport, calls, source) VALUES ({}, '1', '{}', 'search_clients', 'rate_limited', \
         9000000, 'http', 40, 'http:10.0.0.1')",
        at - 500,
        reader.id
    ));

    let mut browser = Browser::signed_in(&server, &db);
    let page = browser.get("/console/latency");
    assert_eq!(page.status, 200, "{}", text(&page));
    assert_page_headers(&page);
    let html = text(&page);
    assert!(html.contains("aria-current=\"page\">Latency<"), "{html}");
    let tool = "data-name=\"search_clients\"";
    let of = |from: &str, class: &str| cell(&html, from, "td", class).expect(class);
    assert_eq!(of(tool, "hour calls"), "100");
    assert_eq!(of(tool, "hour p50"), "50 ms");
    assert_eq!(of(tool, "hour p95"), "95 ms");
    assert_eq!(of(tool, "hour p99"), "99 ms");
    // The day adds the call of three hours ago: 101 calls, the 500 ms one the slowest.
    assert_eq!(of(tool, "day calls"), "101");
    assert_eq!(of(tool, "day p50"), "51 ms");
    assert_eq!(of(tool, "day p99"), "100 ms");
    // Per backend: the backend's tool under its backend.
    let shop = "id=\"by-backend\"";
    assert!(html[html.find(shop).expect("by backend")..].contains("data-name=\"shop\""));
    let backend = "data-name=\"shop\"";
    assert_eq!(of(backend, "hour calls"), "2");
    assert_eq!(of(backend, "hour p50"), "3 ms");
    assert_eq!(of(backend, "hour p99"), "7 ms");
    // The slowest calls: the hour's is 100 ms, the day's 500 ms, each linking to its row.
    let slowest = |window: &str| {
        let from = &html[html
            .find(&format!("id=\"slowest-{window}\""))
            .expect(window)..];
        let link = &from[from.find("href=\"/console/audit/").expect("a link") + 6..];
        let path = link[..link.find('"').expect("end")].to_owned();
        (
            path,
            cell(from, "tr class=\"slow-call\"", "td", "duration").expect("duration"),
        )
    };
    let (hour_row, hour_slowest) = slowest("hour");
    assert_eq!(hour_slowest, "100 ms");
    let (day_row, day_slowest) = slowest("day");
    assert_eq!(day_slowest, "500 ms");
    let row = text(&browser.get(&day_row));
    let shown = cell(&row, "id=\"audit-row\"", "dd", "duration").expect("duration");
    let ms: f64 = shown.trim_end_matches(" ms").parse().expect(&shown);
    assert!((ms - 500.0).abs() < f64::EPSILON, "{shown}");
    assert_ne!(hour_row, day_row);
    // The caller by its key's name.
    assert_eq!(
        cell(&html, "id=\"slowest-day\"", "td", "credential").as_deref(),
        Some("latency reader")
    );
}
