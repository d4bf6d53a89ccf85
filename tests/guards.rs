//! The guards before a tool runs (PRODUCT.md §4 steps 1, 2 and 4) and the operator CLI that
//! manages them: every guard error over stdio with its exact code, message and `data`;
//! `tools/list` following scopes and plan; revocation of a key or an OAuth client by
//! another process applying to the very next call; the failure throttle keeping argon2
//! work bounded under a flood of bad tokens; no secret in the database file or the logs.

// Without the fixtures, the tests that need them are compiled out (`cargo test
// --features conformance-pack` runs them), and so may some of their helpers.
#![cfg_attr(not(feature = "conformance-pack"), allow(unused_imports, dead_code))]

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use tollgate::catalog::ErrorKind;
use tollgate::clock::{Clock, ManualClock};
use tollgate::guards::auth::{self, Authenticator, Mode, NewKey};
use tollgate::store::{Store, StoreOptions};

use crate::util::{Key, StdioServer, TestDb, assert_error, modern_meta};

fn create_key(db: &TestDb, scopes: &str, extra: &[&str]) -> Key {
    db.create_key("test key", scopes, extra)
}

#[cfg(feature = "conformance-pack")]
/// The conformance pack's tools (`--conformance-pack`), all of scope `conformance:use`.
fn conformance_tools() -> BTreeSet<String> {
    tollgate::tools::conformance::tools()
        .iter()
        .inspect(|t| assert_eq!(t.spec().scope, tollgate::tools::conformance::SCOPE))
        .map(|t| t.spec().name.to_string())
        .collect()
}

/// Runs a CLI command that must succeed; returns its stdout.
fn run_ok(db: &TestDb, argv: &[&str]) -> String {
    let out = db.run(argv);
    assert!(
        out.status.success(),
        "{argv:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Runs a CLI command that must fail; returns its stderr.
fn run_err(db: &TestDb, argv: &[&str]) -> String {
    let out = db.run(argv);
    assert!(
        !out.status.success(),
        "{argv:?} should fail: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stderr).expect("utf-8 stderr")
}

#[cfg(feature = "conformance-pack")]
/// A handshake-era stdio server with the conformance pack, for `token` (or none).
fn server(db: &TestDb, token: Option<&str>) -> StdioServer {
    let mut server = StdioServer::start_with_token(db, token, &["--conformance-pack"]);
    server.initialize("2025-11-25");
    server
}

#[cfg(feature = "conformance-pack")]
fn call_simple(server: &mut StdioServer) -> Value {
    server.call_tool("test_simple_text", json!({}))
}

fn assert_ok(response: &Value) {
    assert!(
        response.get("error").is_none(),
        "unexpected error: {response}"
    );
    assert_ne!(
        response["result"]["isError"],
        json!(true),
        "unexpected tool error: {response}"
    );
}

fn assert_invalid_token(response: &Value, reason: &str) {
    assert_error(response, -32001, "invalid_token", 401, 1101, false);
    assert_eq!(
        response["error"]["data"]["details"]["reason"],
        json!(reason),
        "{response}"
    );
}

#[cfg(feature = "conformance-pack")]
fn tool_names(server: &mut StdioServer) -> BTreeSet<String> {
    let response = server.request("tools/list", json!({}));
    response["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list failed: {response}"))
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_owned())
        .collect()
}

/// The secret part of a `tg_<mode>_<id>_<secret>` token or a `tg_cs_<secret>` client
/// secret (the secret itself may contain `_`).
fn secret_part(token: &str) -> &str {
    match token.strip_prefix("tg_cs_") {
        Some(secret) => secret,
        None => token
            .splitn(4, '_')
            .nth(3)
            .expect("a token has a secret part"),
    }
}

/// The same token with another secret.
fn with_wrong_secret(token: &str) -> String {
    format!(
        "{}{}",
        &token[..token.len() - secret_part(token).len()],
        "y".repeat(43)
    )
}

fn open_store(db: &TestDb) -> Store {
    Store::open_database(&db.database(), &StoreOptions::default()).expect("open the test database")
}

#[cfg(feature = "conformance-pack")]
#[test]
fn without_a_token_only_the_handshake_works_and_the_hint_says_how_to_set_one() {
    let db = TestDb::new();
    let mut server = server(&db, None);
    assert_eq!(server.request("ping", json!({}))["result"], json!({}));
    let response = server.request("tools/list", json!({}));
    assert_invalid_token(&response, "missing");
    let hint = response["error"]["data"]["hint"].as_str().expect("hint");
    assert!(hint.contains("TOLLGATE_TOKEN"), "{hint}");
    assert_invalid_token(&call_simple(&mut server), "missing");
    let discover = server.request("server/discover", json!({"_meta": modern_meta()}));
    assert!(
        discover["result"]["supportedVersions"].is_array(),
        "{discover}"
    );
}

#[cfg(feature = "conformance-pack")]
#[test]
fn malformed_unknown_expired_and_revoked_tokens_are_invalid_token() {
    let db = TestDb::new();
    let unknown = format!("tg_live_0123456789abcdef0123_{}", "x".repeat(43));
    for (token, reason) in [
        ("not-a-token", "malformed"),
        ("tg_live_short_x", "malformed"),
        (unknown.as_str(), "unknown"),
    ] {
        let mut server = server(&db, Some(token));
        assert_invalid_token(&call_simple(&mut server), reason);
    }
    let expiring = create_key(&db, "conformance:use", &["--expires-in", "30d"]);
    let revoked = create_key(&db, "conformance:use", &[]);
    db.sql(&format!(
        "UPDATE credentials SET expires_at = {} WHERE public_id = '{}'",
        crate::util::unix_now() - 1,
        expiring.id
    ));
    run_ok(&db, &["key", "revoke", &revoked.id]);
    assert_invalid_token(
        &call_simple(&mut server(&db, Some(&expiring.token))),
        "expired",
    );
    assert_invalid_token(
        &call_simple(&mut server(&db, Some(&revoked.token))),
        "revoked",
    );
    // Without the secret, a revoked key answers as an unknown id does.
    let wrong_secret = with_wrong_secret(&revoked.token);
    assert_invalid_token(
        &call_simple(&mut server(&db, Some(&wrong_secret))),
        "unknown",
    );
}

#[cfg(feature = "conformance-pack")]
#[test]
fn a_key_revoked_by_another_process_is_refused_on_the_next_call() {
    let db = TestDb::new();
    let key = create_key(&db, "conformance:use", &[]);
    let mut server = server(&db, Some(&key.token));
    assert_ok(&call_simple(&mut server));
    assert_ok(&call_simple(&mut server));
    let printed = run_ok(&db, &["key", "revoke", &key.id]);
    assert!(printed.contains(&key.id), "{printed}");
    let charged = total_charged(&db);
    assert_invalid_token(&call_simple(&mut server), "revoked");
    assert_invalid_token(&server.request("tools/list", json!({})), "revoked");
    // The cached token is re-checked before its counters move: the refusal charged
    // nothing, not even the company's plan bucket.
    assert_eq!(total_charged(&db), charged);
}

/// The sum of every rate counter in the database.
fn total_charged(db: &TestDb) -> i64 {
    db.sql_i64("SELECT COALESCE(SUM(count), 0) FROM rate_counters")
}

#[cfg(feature = "conformance-pack")]
#[test]
fn a_client_revoked_by_another_process_is_refused_on_the_next_call() {
    let db = TestDb::new();
    let client = db.run_json(&[
        "client",
        "create",
        "--name",
        "agent",
        "--scopes",
        "conformance:use",
        "--json",
    ]);
    let client_id = client["client_id"].as_str().expect("client_id");
    assert!(
        client["client_secret"]
            .as_str()
            .expect("secret")
            .starts_with("tg_cs_")
    );
    let refused = run_err(
        &db,
        &[
            "key",
            "create",
            "--name",
            "k",
            "--scopes",
            "invoices:read",
            "--client",
            client_id,
        ],
    );
    assert!(refused.contains("not allowed the scope"), "{refused}");
    let key = create_key(&db, "conformance:use", &["--client", client_id]);
    let mut server = server(&db, Some(&key.token));
    assert_ok(&call_simple(&mut server));
    run_ok(&db, &["client", "revoke", client_id]);
    let response = call_simple(&mut server);
    assert_error(&response, -32002, "client_revoked", 403, 1102, false);
    let listed = db.run_json(&["client", "list", "--json"]);
    assert_eq!(listed[0]["status"], json!("revoked"), "{listed}");
}

#[cfg(feature = "conformance-pack")]
#[test]
fn a_test_key_on_a_live_installation_and_a_client_secret_are_the_wrong_type() {
    let db = TestDb::new();
    let key = create_key(&db, "conformance:use", &["--test"]);
    assert!(key.token.starts_with("tg_test_"));
    let mut live = server(&db, Some(&key.token));
    let response = call_simple(&mut live);
    assert_error(&response, -32003, "invalid_token_type", 403, 1103, false);
    assert_eq!(
        response["error"]["data"]["details"]["reason"],
        json!("test_key_on_live_installation")
    );
    run_ok(&db, &["company", "set", "--mode", "test"]);
    assert_ok(&call_simple(&mut live));
    let client = db.run_json(&[
        "client", "create", "--name", "agent", "--scopes", "*", "--json",
    ]);
    let secret = client["client_secret"].as_str().expect("secret");
    let response = call_simple(&mut server(&db, Some(secret)));
    assert_error(&response, -32003, "invalid_token_type", 403, 1103, false);
    assert_eq!(
        response["error"]["data"]["details"]["reason"],
        json!("client_secret")
    );
}

#[cfg(feature = "conformance-pack")]
#[test]
fn a_missing_scope_names_the_required_and_provided_scopes() {
    let db = TestDb::new();
    let key = create_key(&db, "invoices:read,clients:read", &[]);
    let response = call_simple(&mut server(&db, Some(&key.token)));
    assert_error(&response, -32005, "insufficient_scope", 403, 1105, false);
    let data = &response["error"]["data"];
    assert_eq!(data["required_scope"], json!("conformance:use"));
    assert_eq!(
        data["provided_scopes"],
        json!(["invoices:read", "clients:read"])
    );
}

#[cfg(feature = "conformance-pack")]
#[test]
fn a_tool_outside_the_plan_names_the_smallest_plan_that_includes_it() {
    let db = TestDb::new();
    run_ok(&db, &["plan", "exclude", "free", "test_simple_text"]);
    run_ok(&db, &["plan", "set", "free"]);
    let mut server = server(&db, db.admin_key.as_deref());
    let response = call_simple(&mut server);
    assert_error(&response, -32004, "plan_upgrade_required", 403, 1104, false);
    assert_eq!(response["error"]["data"]["required_plan"], json!("starter"));
    assert!(!tool_names(&mut server).contains("test_simple_text"));
    run_ok(&db, &["plan", "set", "starter"]);
    assert_ok(&call_simple(&mut server));
    let shown = db.run_json(&["plan", "show", "free", "--json"]);
    assert_eq!(
        shown["excluded_tools"],
        json!(["send_invoice", "export_invoices", "test_simple_text"])
    );
}

#[cfg(feature = "conformance-pack")]
#[test]
fn a_used_up_allowance_is_plan_limit_exceeded_until_keys_are_revoked() {
    let db = TestDb::new();
    let key = create_key(&db, "conformance:use", &[]);
    let extra = create_key(&db, "conformance:use", &[]);
    create_key(&db, "conformance:use", &[]);
    let out = db.run(&["plan", "set", "free"]);
    assert!(out.status.success());
    let warning = String::from_utf8_lossy(&out.stderr);
    assert!(
        warning.contains("4 API keys are active and the free plan allows 3"),
        "{warning}"
    );
    let mut server = server(&db, Some(&key.token));
    let response = call_simple(&mut server);
    assert_error(&response, -32004, "plan_limit_exceeded", 403, 1107, false);
    let data = &response["error"]["data"];
    assert_eq!(data["limit"], json!(3));
    assert_eq!(data["required_plan"], json!("starter"));
    assert_eq!(data["details"]["allowance"], json!("active_keys"));
    assert_eq!(data["details"]["active"], json!(4));
    assert_eq!(
        tool_names(&mut server),
        conformance_tools(),
        "allowances do not hide tools"
    );
    run_ok(&db, &["key", "revoke", &extra.id]);
    assert_ok(&call_simple(&mut server));
    let refused = run_err(
        &db,
        &["key", "create", "--name", "one more", "--scopes", "*"],
    );
    assert!(
        refused.contains("the free plan allows 3 active keys and 3 are active"),
        "{refused}"
    );
    assert!(refused.contains("tollgate key revoke"), "{refused}");
}

#[cfg(feature = "conformance-pack")]
#[test]
fn unknown_and_retired_tool_names_are_invalid_params() {
    let db = TestDb::new();
    let mut server = server(&db, db.admin_key.as_deref());
    let response = server.call_tool("no_such_tool", json!({}));
    assert_error(&response, -32602, "unknown_tool", 404, 1005, false);
    let response = server.call_tool("list_invoices", json!({}));
    assert_error(&response, -32602, "tool_retired", 410, 1006, false);
    assert_eq!(
        response["error"]["data"]["replacement"],
        json!("search_invoices")
    );
}

#[cfg(feature = "conformance-pack")]
#[test]
fn repeated_failures_from_one_stdio_process_are_throttled() {
    let db = TestDb::new();
    let mut server = server(&db, Some("tg_live_nothing"));
    for _ in 0..auth::AUTH_FAILURE_LIMIT {
        assert_invalid_token(&call_simple(&mut server), "malformed");
    }
    let response = call_simple(&mut server);
    assert_error(&response, -32006, "rate_limited", 429, 3001, true);
    let data = &response["error"]["data"];
    assert_eq!(data["bucket"], json!("auth"));
    assert_eq!(data["limit"], json!(10));
    let retry_after = data["retry_after"].as_u64().expect("retry_after");
    assert!((1..=60).contains(&retry_after), "{response}");
    assert_eq!(data["reset"].as_u64().expect("reset") % 60, 0, "{response}");
}

#[cfg(feature = "conformance-pack")]
#[test]
fn tools_list_follows_the_scopes_and_the_plan() {
    let db = TestDb::new();
    let read_only = create_key(&db, "invoices:read", &[]);
    let fixtures = create_key(&db, "conformance:use", &[]);
    let all = tool_names(&mut server(&db, db.admin_key.as_deref()));
    assert!(all.is_superset(&conformance_tools()), "{all:?}");
    let reader = tool_names(&mut server(&db, Some(&read_only.token)));
    assert!(
        reader.is_subset(&all) && reader.is_disjoint(&conformance_tools()),
        "{reader:?}"
    );
    assert_eq!(
        tool_names(&mut server(&db, Some(&fixtures.token))),
        conformance_tools()
    );
    run_ok(&db, &["plan", "exclude", "starter", "test_image_content"]);
    run_ok(&db, &["plan", "set", "starter"]);
    let mut smaller = conformance_tools();
    smaller.remove("test_image_content");
    let mut on_starter = server(&db, Some(&fixtures.token));
    assert_eq!(tool_names(&mut on_starter), smaller);
    assert!(!tool_names(&mut server(&db, db.admin_key.as_deref())).contains("test_image_content"));
    run_ok(&db, &["plan", "include", "starter", "test_image_content"]);
    assert_eq!(
        tool_names(&mut on_starter),
        conformance_tools(),
        "a plan edit applies at once"
    );
}

/// The built-in invoicing tools (always registered).
const BUILT_IN_TOOLS: [&str; 16] = [
    "search_clients",
    "get_client",
    "create_client",
    "update_client",
    "delete_client",
    "search_invoices",
    "get_invoice",
    "create_invoice",
    "update_invoice",
    "issue_invoice",
    "delete_invoice",
    "void_invoice",
    "send_invoice",
    "export_invoices",
    "record_payment",
    "list_payments",
];

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|n| (*n).to_owned()).collect()
}

#[cfg(feature = "conformance-pack")]
fn builtin_list(db: &TestDb, token: &str) -> BTreeSet<String> {
    let mut server = StdioServer::start_with_token(db, Some(token), &[]);
    server.initialize("2025-11-25");
    tool_names(&mut server)
}

#[cfg(feature = "conformance-pack")]
#[test]
fn the_built_in_tools_follow_the_scopes_and_the_seeded_plans() {
    let db = TestDb::new();
    let admin = db.admin_key.clone().expect("admin key");
    let reader = create_key(&db, "invoices:read,clients:read", &[]);
    let read_tools = names(&[
        "search_clients",
        "get_client",
        "search_invoices",
        "get_invoice",
        "list_payments",
    ]);
    assert_eq!(builtin_list(&db, &admin), names(&BUILT_IN_TOOLS));
    assert_eq!(builtin_list(&db, &reader.token), read_tools);
    run_ok(&db, &["plan", "set", "free"]);
    let mut on_free = names(&BUILT_IN_TOOLS);
    on_free.remove("send_invoice");
    on_free.remove("export_invoices");
    assert_eq!(builtin_list(&db, &admin), on_free);
    assert_eq!(builtin_list(&db, &reader.token), read_tools);
    run_ok(&db, &["plan", "set", "starter"]);
    on_free.insert("send_invoice".to_owned());
    assert_eq!(builtin_list(&db, &admin), on_free);
    let mut server = StdioServer::start_with_token(&db, Some(&admin), &[]);
    server.initialize("2025-11-25");
    let response = server.call_tool("export_invoices", json!({}));
    assert_error(&response, -32004, "plan_upgrade_required", 403, 1104, false);
    assert_eq!(response["error"]["data"]["required_plan"], json!("pro"));
}

#[cfg(feature = "conformance-pack")]
#[test]
fn rotation_keeps_the_old_secret_for_the_grace_period_only() {
    let db = TestDb::new();
    let key = create_key(&db, "conformance:use", &[]);
    let rotated = db.run_json(&["key", "rotate", &key.id, "--json"]);
    let new_token = rotated["token"].as_str().expect("token").to_owned();
    assert_ne!(new_token, key.token);
    assert!(rotated["previous_secret_until"].is_i64(), "{rotated}");
    assert_ok(&call_simple(&mut server(&db, Some(&key.token))));
    let mut fresh = server(&db, Some(&new_token));
    assert_ok(&call_simple(&mut fresh));
    let again = db.run_json(&["key", "rotate", &key.id, "--grace", "0", "--json"]);
    assert_eq!(again["previous_secret_until"], Value::Null);
    assert_invalid_token(&call_simple(&mut fresh), "unknown");
    let newest = again["token"].as_str().expect("token");
    assert_ok(&call_simple(&mut server(&db, Some(newest))));
}

#[test]
fn operator_mistakes_say_how_to_fix_them() {
    let db = TestDb::new();
    let bad_scope = run_err(
        &db,
        &["key", "create", "--name", "k", "--scopes", "invoices"],
    );
    assert!(bad_scope.contains("resource:action"), "{bad_scope}");
    let unknown = run_err(&db, &["key", "revoke", "nosuchkey"]);
    assert!(unknown.contains("tollgate key list"), "{unknown}");
    let unknown = run_err(&db, &["client", "revoke", "nosuchclient"]);
    assert!(unknown.contains("tollgate client list"), "{unknown}");
    let plan = run_err(&db, &["plan", "set", "gold"]);
    assert!(plan.contains("tollgate plan list"), "{plan}");
    let duration = run_err(
        &db,
        &[
            "key",
            "create",
            "--name",
            "k",
            "--scopes",
            "*",
            "--expires-in",
            "soon",
        ],
    );
    assert!(duration.contains("e.g. 90s, 15m, 12h, 30d"), "{duration}");
    let mode = run_err(&db, &["company", "set", "--mode", "staging"]);
    assert!(mode.contains("expected live or test"), "{mode}");
    run_ok(
        &db,
        &[
            "company",
            "set",
            "--name",
            "Acme SL",
            "--tax-id",
            "B12345678",
            "--locale",
            "es",
        ],
    );
    let company = db.run_json(&["company", "show", "--json"]);
    assert_eq!(company["name"], json!("Acme SL"));
    assert_eq!(company["tax_id"], json!("B12345678"));
    assert_eq!(company["locale"], json!("es"));
    assert_eq!(company["mode"], json!("live"));
}

#[cfg(feature = "conformance-pack")]
#[test]
fn every_call_leaves_one_audit_row_without_arguments() {
    let db = TestDb::new();
    let key = create_key(&db, "invoices:read", &[]);
    let admin_id = db
        .admin_key
        .as_deref()
        .expect("admin key")
        .split('_')
        .nth(2)
        .expect("id")
        .to_owned();
    let mut admin = server(&db, db.admin_key.as_deref());
    assert_ok(&admin.call_tool(
        "json_schema_2020_12_tool",
        json!({"name": "PRIVATE-ARGUMENT", "contactMethod": "email", "email": "a@b.c"}),
    ));
    call_simple(&mut server(&db, Some(&key.token)));
    admin.call_tool("no_such_tool", json!({}));
    // A clean end flushes the audit writer.
    admin.close();
    let rows = db.run_json(&["audit", "--json"]);
    let outcomes: Vec<(&str, &str)> = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["tool"].as_str().expect("tool"),
                r["outcome"].as_str().expect("outcome"),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        vec![
            ("no_such_tool", "unknown_tool"),
            ("test_simple_text", "insufficient_scope"),
            ("json_schema_2020_12_tool", "ok"),
        ]
    );
    assert!(!rows.to_string().contains("PRIVATE-ARGUMENT"));
    let mine = db.run_json(&["audit", "--credential", &key.id, "--json"]);
    assert_eq!(mine.as_array().map(Vec::len), Some(1), "{mine}");
    let admin_ok = db.run_json(&[
        "audit",
        "--credential",
        &admin_id,
        "--outcome",
        "ok",
        "--json",
    ]);
    assert_eq!(
        admin_ok[0]["tool"],
        json!("json_schema_2020_12_tool"),
        "{admin_ok}"
    );
    let human = run_ok(&db, &["audit", "--tool", "no_such_tool"]);
    assert!(human.contains("unknown_tool"), "{human}");
}

#[cfg(feature = "conformance-pack")]
/// Runs one stateless (2026-07-28) stdio session at trace level with `token`, sending
/// `requests`; returns stdout and stderr.
fn traced_session(db: &TestDb, token: &str, requests: &[Value]) -> (String, String) {
    let mut cmd = db.command(&["--log-level", "trace", "stdio", "--conformance-pack"]);
    cmd.env("TOLLGATE_TOKEN", token).env("RUST_LOG", "trace");
    let out = crate::util::stdio_transcript(cmd, requests);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn modern_call(id: i64, name: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": {}, "_meta": modern_meta()}})
}

#[cfg(feature = "conformance-pack")]
#[test]
fn no_secret_reaches_the_database_file_or_the_logs() {
    let db = TestDb::new();
    let mut secrets: Vec<String> = vec![db.admin_key.clone().expect("admin key")];
    let key = create_key(&db, "conformance:use", &[]);
    secrets.push(key.token.clone());
    let rotated = db.run_json(&["key", "rotate", &key.id, "--json"]);
    secrets.push(rotated["token"].as_str().expect("token").to_owned());
    let client = db.run_json(&[
        "client", "create", "--name", "agent", "--scopes", "*", "--json",
    ]);
    secrets.push(client["client_secret"].as_str().expect("secret").to_owned());
    let store = open_store(&db);
    let authenticator = Authenticator::new(store.clone(), Clock::System);
    let secret = auth::Secret::new(secrets[3].clone());
    let oauth = authenticator
        .verify_client_secret(client["client_id"].as_str().expect("id"), &secret, "test")
        .expect("client secret verifies");
    let access = auth::issue_access_token(
        &store,
        &oauth,
        &[],
        Duration::from_secs(600),
        &Clock::System,
    )
    .expect("access token");
    secrets.push(access.token.expose().to_owned());
    drop(store);

    let mut logs = String::new();
    let requests = [
        modern_call(1, "test_simple_text"),
        modern_call(2, "no_such_tool"),
    ];
    for token in &secrets {
        let (stdout, stderr) = traced_session(&db, token, &requests);
        assert!(stdout.contains("\"id\":1"), "{stdout}");
        logs.push_str(&stderr);
    }
    let bad = with_wrong_secret(&key.token);
    logs.push_str(&traced_session(&db, &bad, &requests).1);
    secrets.push(bad);
    logs.push_str(&String::from_utf8_lossy(
        &db.run(&["key", "list", "--json"]).stdout,
    ));
    logs.push_str(&String::from_utf8_lossy(
        &db.run(&["client", "list", "--json"]).stdout,
    ));

    let mut files = Vec::new();
    if db.is_postgres() {
        // Every row of every table, as PostgreSQL renders a whole row as text.
        let tables =
            db.sql_rows("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()");
        for table in tables
            .into_iter()
            .filter_map(|row| row.into_iter().next().flatten())
        {
            let rows = db.sql_rows(&format!("SELECT CAST(t AS TEXT) FROM {table} t"));
            let text: String = rows.into_iter().flatten().flatten().collect();
            files.push((table, text.into_bytes()));
        }
    }
    for suffix in ["", "-wal", "-shm"] {
        let path = format!("{}{suffix}", db.path_str());
        if let Ok(bytes) = std::fs::read(&path) {
            files.push((path, bytes));
        }
    }
    assert!(!files.is_empty() && !logs.is_empty());
    for token in &secrets {
        for needle in [token.as_str(), secret_part(token)] {
            assert!(!logs.contains(needle), "a secret appears in the logs");
            for (path, bytes) in &files {
                let found = bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
                assert!(!found, "a secret appears in {path}");
            }
        }
    }
}

/// A small deterministic generator for "random" bad tokens (no RNG crate in the tests).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A bad token and whether it is well-formed (an unknown id, or the valid key's id
    /// with a wrong secret: one argon2 run each when admitted) or malformed (none).
    fn token(&mut self, public_id: &str) -> (String, bool) {
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let secret: String = (0..43)
            .map(|_| char::from(alphabet[usize::try_from(self.next() % 64).expect("small")]))
            .collect();
        match self.next() % 3 {
            0 => (
                format!("tg_live_{:020x}_{secret}", u128::from(self.next()) << 16),
                true,
            ),
            1 => (format!("tg_live_{public_id}_{secret}"), true),
            _ => (format!("garbage-{secret}"), false),
        }
    }
}

#[test]
fn ten_thousand_bad_tokens_cost_only_the_throttled_argon2_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = StoreOptions {
        create: true,
        ..StoreOptions::default()
    };
    let store = Store::open(&dir.path().join("flood.db"), &opts).expect("open");
    store
        .set_company(&tollgate::store::Company {
            name: "Flood".into(),
            tax_id: None,
            plan_slug: "pro".into(),
            locale: "en".into(),
            country: "ES".into(),
        })
        .expect("company");
    let new = NewKey {
        name: "valid".into(),
        scopes: vec!["*".into()],
        expires_in: None,
        client_id: None,
        mode: Mode::Live,
        guard_channel: None,
    };
    let valid = auth::create_key(&store, &new).expect("key");
    // One fixed instant: the whole flood lands in one throttle window, however slow argon2 is.
    let authenticator = Authenticator::new(store, ManualClock::at_unix_secs(1_800_000_030).clock());
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let (mut invalid, mut throttled, mut expected_runs) = (0u32, 0u32, 0u64);
    for _ in 0..10_000 {
        let (token, well_formed) = rng.token(&valid.public_id);
        match authenticator
            .authenticate(Some(&token), "203.0.113.7")
            .expect_err("bad token")
            .kind()
        {
            ErrorKind::InvalidToken => {
                invalid += 1;
                expected_runs += u64::from(well_formed);
            }
            ErrorKind::RateLimited => throttled += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        (invalid, throttled),
        (auth::AUTH_FAILURE_LIMIT, 10_000 - auth::AUTH_FAILURE_LIMIT)
    );
    // Exactly one argon2 run per admitted well-formed token (unknown ids run the dummy
    // hash), none for the 9 990 refused by the throttle.
    let runs = authenticator.argon2_runs();
    assert_eq!(runs, expected_runs);
    assert!(expected_runs > 0 && expected_runs <= u64::from(auth::AUTH_FAILURE_LIMIT));
    // A valid token from another source still gets in, with one argon2 run.
    let principal = authenticator
        .authenticate(Some(valid.token.expose()), "198.51.100.1")
        .expect("valid");
    assert_eq!(principal.credential_id, valid.public_id);
    assert_eq!(authenticator.argon2_runs(), runs + 1);
    for _ in 0..100 {
        authenticator
            .authenticate(Some(valid.token.expose()), "198.51.100.1")
            .expect("still valid");
    }
    // Cached now: accepted even from the throttled source, with no further argon2 run.
    authenticator
        .authenticate(Some(valid.token.expose()), "203.0.113.7")
        .expect("cached");
    assert_eq!(authenticator.argon2_runs(), runs + 1);
}
