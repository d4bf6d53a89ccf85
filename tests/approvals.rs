//! Human approval of the calls a `require_approval` policy rule covers, end to end over the
//! real binary: refused `approval_required` with its id and console URL and nothing run;
//! a retry points at the same pending approval; other arguments or another key need their
//! own; approved with `tollgate approvals approve` (an audit row), the call runs once and is
//! replayed after; a denial is final; over stdio and HTTP, in both guard channels. In the
//! console: an approver decides behind a confirmation, a caller cannot approve their own
//! call. An expiry on a manual clock (in-process).

use serde_json::{Value, json};

use crate::clock::{InProcess, T0};
use crate::console::{Browser, hidden_csrf, text};
use crate::util::{HttpServer, StdioServer, TestDb, assert_error};

const RULES: &str = r#"
[policy]
approval_ttl_minutes = 60

[[policy.rules]]
name = "big_clients"
tools = ["create_client"]
condition = "args.name.startsWith('Big')"
effect = "require_approval"
"#;

/// A database with the rules in `policy.toml`; gives its path.
fn with_rules(db: &TestDb) -> String {
    let path = db.dir.path().join("policy.toml");
    std::fs::write(&path, RULES).expect("config");
    path.to_str().expect("utf-8").to_owned()
}

/// The refusal's envelope, on either channel (checked to be that channel's shape).
fn refusal(response: &Value, channel: &str) -> Value {
    if channel == "jsonrpc" {
        assert!(response.get("result").is_none(), "{response}");
        return response["error"]["data"].clone();
    }
    assert!(response.get("error").is_none(), "{response}");
    let result = &response["result"];
    assert_eq!(result["isError"], json!(true), "{response}");
    let envelope = result["_meta"]["dev.tollgate/error"].clone();
    assert_eq!(envelope["jsonrpc_code"], json!(-32009), "{response}");
    assert_eq!(result["content"][0]["text"], envelope["hint"], "{response}");
    envelope
}

/// Asserts `approval_required` on `channel`; gives the approval's id.
fn assert_required(response: &Value, channel: &str, key: &str) -> String {
    assert_required_at(response, channel, key, "http://127.0.0.1:8787")
}

/// [`assert_required`] with the console at `base`.
fn assert_required_at(response: &Value, channel: &str, key: &str, base: &str) -> String {
    if channel == "jsonrpc" {
        assert_error(response, -32009, "approval_required", 403, 1110, true);
    }
    let data = refusal(response, channel);
    assert_eq!(data["code"], json!("approval_required"), "{response}");
    assert_eq!(data["retryable"], json!(true), "{response}");
    assert_eq!(data["rule_id"], json!("big_clients"), "{response}");
    assert_eq!(data["retry_after"], json!(15), "{response}");
    assert_eq!(data["details"]["idempotency_key"], json!(key), "{response}");
    let id = data["approval_id"]
        .as_str()
        .expect("approval_id")
        .to_owned();
    assert!(id.starts_with("apr_") && id.len() == 36, "{response}");
    assert_eq!(
        data["approval_url"],
        json!(format!("{base}/console/approvals/{id}")),
        "{response}"
    );
    assert!(
        data["expires_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{response}"
    );
    let hint = data["hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains(&format!("/console/approvals/{id}")) && hint.contains(key),
        "{response}"
    );
    id
}

/// Asserts the final refusal `code` (`approval_denied`, `approval_expired`) of `id`.
fn assert_final(response: &Value, channel: &str, code: &str, error_code: u64, id: &str) {
    if channel == "jsonrpc" {
        assert_error(response, -32009, code, 403, error_code, false);
    }
    let data = refusal(response, channel);
    assert_eq!(data["code"], json!(code), "{response}");
    assert_eq!(data["approval_id"], json!(id), "{response}");
}

fn clients_named(db: &TestDb, name: &str) -> i64 {
    db.sql_i64(&format!(
        "SELECT COUNT(*) FROM clients WHERE name = '{name}'"
    ))
}

fn cli(db: &TestDb, args: &[&str]) -> (bool, String) {
    let out = db.run(args);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

fn big(name: &str, key: &str) -> Value {
    json!({"name": name, "idempotency_key": key})
}

/// The whole flow on one channel, through `call` (stdio or HTTP).
fn flow(db: &TestDb, (channel, base): (&str, &str), call: &mut dyn FnMut(Value) -> Value) {
    let (name, key) = (format!("Big {channel}"), format!("key-{channel}"));
    let required = |response: &Value, key: &str| assert_required_at(response, channel, key, base);
    let id = required(&call(big(&name, &key)), &key);
    assert_eq!(clients_named(db, &name), 0, "nothing ran");
    // A retry points at the same approval.
    assert_eq!(required(&call(big(&name, &key)), &key), id);
    // Other arguments, or another key, need an approval of their own.
    let other = required(&call(big(&format!("{name} 2"), &key)), &key);
    let key2 = format!("{key}-2");
    let another = required(&call(big(&name, &key2)), &key2);
    assert!(other != id && another != id && other != another);
    // A call the rule does not cover runs at once.
    let small = call(json!({"name": format!("Small {channel}")}));
    assert_eq!(small["result"]["isError"], json!(false), "{small}");

    let (ok, said) = cli(db, &["approvals", "list", "--json"]);
    assert!(ok, "{said}");
    let listed: Value = serde_json::from_str(&said).expect("json");
    let row = listed
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["id"] == json!(id)))
        .unwrap_or_else(|| panic!("{id} in {said}"));
    assert_eq!(row["arguments"], json!({"name": name}), "{said}");
    assert_eq!(row["rule"], json!("big_clients"));
    let (ok, said) = cli(db, &["approvals", "approve", &id]);
    assert!(ok && said.contains("Approved"), "{said}");
    let audited = db.sql_i64(&format!(
        "SELECT COUNT(*) FROM audit_log WHERE tool = 'cli:approve_call' AND request_id = '\"{id}\"'"
    ));
    assert_eq!(audited, 1);

    let ran = call(big(&name, &key));
    assert_eq!(ran["result"]["isError"], json!(false), "{ran}");
    assert_eq!(clients_named(db, &name), 1, "ran once");
    let again = call(big(&name, &key));
    assert_eq!(
        again["result"]["_meta"]["dev.tollgate/idempotentReplay"],
        json!(true),
        "{again}"
    );
    assert_eq!(
        again["result"]["structuredContent"],
        ran["result"]["structuredContent"]
    );
    assert_eq!(clients_named(db, &name), 1, "replayed, not run again");
    let (ok, said) = cli(db, &["approvals", "approve", &id]);
    assert!(!ok && said.contains("is used"), "{said}");

    let (ok, said) = cli(db, &["approvals", "deny", &other]);
    assert!(ok && said.contains("Denied"), "{said}");
    let denied = call(big(&format!("{name} 2"), &key));
    assert_final(&denied, channel, "approval_denied", 1111, &other);
    assert_final(
        &call(big(&format!("{name} 2"), &key)),
        channel,
        "approval_denied",
        1111,
        &other,
    );
    assert_eq!(clients_named(db, &format!("{name} 2")), 0);
}

#[test]
fn a_held_call_runs_once_after_approval_from_the_command_line_over_stdio() {
    let db = TestDb::new();
    let config = with_rules(&db);
    for channel in ["jsonrpc", "tool_result"] {
        let key = db.create_key(channel, "*", &["--guard-channel", channel]);
        let mut server =
            StdioServer::start_with_token(&db, Some(&key.token), &["--config", &config]);
        server.initialize("2025-11-25");
        flow(&db, (channel, "http://127.0.0.1:8787"), &mut |args| {
            server.call_tool("create_client", args)
        });
    }
}

#[test]
fn a_held_call_runs_once_after_approval_from_the_command_line_over_http() {
    let db = TestDb::new();
    let config = with_rules(&db);
    let server = HttpServer::start_with_env(
        &db,
        &["--config", &config],
        &[("TOLLGATE_HTTP_METRICS", "true")],
    );
    let base = format!("http://{}", server.addr);
    for channel in ["jsonrpc", "tool_result"] {
        let key = db.create_key(channel, "*", &["--guard-channel", channel]);
        flow(&db, (channel, &base), &mut |args| {
            let response = server.modern_tool_call(&key.token, "create_client", &args);
            assert_eq!(response.status, 200);
            response.json()
        });
    }
    // Per channel: one approved and run, one denied, one still pending.
    let metrics = String::from_utf8_lossy(&server.get("/metrics").body).into_owned();
    for line in [
        "tollgate_approvals{state=\"pending\"} 2",
        "tollgate_approvals{state=\"approved\"} 2",
        "tollgate_approvals{state=\"denied\"} 2",
        "tollgate_approvals{state=\"expired\"} 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }
}

#[test]
fn an_approver_decides_in_the_console_and_a_caller_cannot_approve_their_own_call() {
    let db = TestDb::new();
    let config = with_rules(&db);
    let server = HttpServer::start(&db, &["--config", &config]);
    let base = format!("http://{}", server.addr);
    let approver = db.create_key("approver", "approve", &[]);
    let caller = db.create_key("caller", "*,approve", &[]);
    let held = server.modern_tool_call(&caller.token, "create_client", &big("Big Own", "own-1"));
    let id = assert_required_at(&held.json(), "jsonrpc", "own-1", &base);

    // The caller signs in (its key holds `approve`) and may only deny its own call.
    let mut own = Browser::new(&server);
    assert_eq!(own.sign_in(&caller.token).status, 303);
    let page = own.get(&format!("/console/approvals/{id}"));
    assert_eq!(page.status, 200, "{}", text(&page));
    assert!(
        text(&page).contains("id=\"approval-own\""),
        "{}",
        text(&page)
    );
    let confirm = own.get(&format!("/console/approvals/{id}/approve"));
    let csrf = hidden_csrf(&text(&confirm));
    let refused = own.post(
        &format!("/console/approvals/{id}/approve"),
        &[("csrf", &csrf)],
    );
    assert_eq!(refused.status, 403, "{}", text(&refused));
    assert!(text(&refused).contains("id=\"approval-error\""));
    // An approve-only sign-in reaches no other page.
    assert_eq!(own.get("/console/credentials").status, 303);

    let mut browser = Browser::new(&server);
    assert_eq!(browser.sign_in(&approver.token).status, 303);
    let list = browser.get("/console/approvals");
    assert_eq!(list.status, 200);
    assert!(
        text(&list).contains(&format!("id=\"approval-{id}\"")),
        "{}",
        text(&list)
    );
    assert!(text(&list).contains("Big Own"));
    let confirm = browser.get(&format!("/console/approvals/{id}/approve"));
    assert_eq!(confirm.status, 200);
    let csrf = hidden_csrf(&text(&confirm));
    let decided = browser.post(
        &format!("/console/approvals/{id}/approve"),
        &[("csrf", &csrf)],
    );
    assert_eq!(decided.status, 303, "{}", text(&decided));
    let ran = server.modern_tool_call(&caller.token, "create_client", &big("Big Own", "own-1"));
    assert_eq!(
        ran.json()["result"]["isError"],
        json!(false),
        "{}",
        text(&ran)
    );
    assert_eq!(clients_named(&db, "Big Own"), 1);
    assert_eq!(
        db.sql_i64("SELECT COUNT(*) FROM approvals WHERE state = 'used'"),
        1
    );
}

#[test]
fn an_approval_nobody_decides_expires_for_good() {
    let db = TestDb::new();
    let config = with_rules(&db);
    let key = db.create_key("caller", "*", &[]);
    let mut server = InProcess::start_with_config(
        &db,
        Some(&key.token),
        T0,
        Some(std::path::Path::new(&config)),
    );
    server.initialize("2025-11-25");
    let call = |server: &mut InProcess| {
        server.request(
            "tools/call",
            json!({"name": "create_client", "arguments": big("Big Late", "late-1")}),
        )
    };
    let id = assert_required(&call(&mut server), "jsonrpc", "late-1");
    server.at(T0 + 59 * 60);
    assert_eq!(assert_required(&call(&mut server), "jsonrpc", "late-1"), id);
    server.at(T0 + 60 * 60);
    let expired = call(&mut server);
    assert_final(&expired, "jsonrpc", "approval_expired", 1112, &id);
    assert_eq!(
        expired["error"]["data"]["expires_at"],
        json!(tollgate::clock::format_time(T0 + 3600))
    );
    // Final: later retries stay expired, and the approval can no longer be decided.
    server.at(T0 + 2 * 3600);
    assert_final(&call(&mut server), "jsonrpc", "approval_expired", 1112, &id);
    assert_eq!(clients_named(&db, "Big Late"), 0);
}

#[test]
fn a_client_that_declared_url_elicitation_is_sent_the_approval_page() {
    let db = TestDb::new();
    let config = with_rules(&db);
    let key = db.create_key("caller", "*", &[]);
    for (version, capabilities, sent) in [
        ("2025-11-25", json!({"elicitation": {"url": {}}}), true),
        ("2025-11-25", json!({"elicitation": {"form": {}}}), false),
        ("2025-06-18", json!({"elicitation": {"url": {}}}), false),
    ] {
        let mut server =
            StdioServer::start_with_token(&db, Some(&key.token), &["--config", &config]);
        server.request(
            "initialize",
            json!({"protocolVersion": version, "capabilities": capabilities,
                   "clientInfo": {"name": "tests", "version": "0"}}),
        );
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let held = server.call_tool("create_client", big("Big Elicited", version));
        let id = assert_required(&held, "jsonrpc", version);
        let asked: Vec<&Value> = server
            .notifications
            .iter()
            .filter(|m| m["method"] == json!("elicitation/create"))
            .collect();
        if !sent {
            assert!(asked.is_empty(), "{version} {capabilities}: {asked:?}");
            continue;
        }
        assert_eq!(asked.len(), 1, "{asked:?}");
        let params = &asked[0]["params"];
        assert_eq!(params["mode"], json!("url"));
        assert_eq!(params["elicitationId"], json!(id));
        assert_eq!(params["url"], held["error"]["data"]["approval_url"]);
        assert_eq!(params["message"], held["error"]["data"]["hint"]);
        assert!(asked[0]["id"].is_string(), "a request: {}", asked[0]);
        // The host's answer, when it comes, changes nothing: the call is still held.
        server
            .send(&json!({"jsonrpc": "2.0", "id": asked[0]["id"], "result": {"action": "accept"}}));
        let again = server.call_tool("create_client", big("Big Elicited", version));
        assert_eq!(assert_required(&again, "jsonrpc", version), id);
    }
}

#[test]
fn over_http_the_approval_page_comes_as_an_elicitation_in_the_event_stream_before_the_refusal() {
    let db = TestDb::new();
    let config = with_rules(&db);
    let key = db.create_key("caller", "*", &["--guard-channel", "tool_result"]);
    let server = HttpServer::start(&db, &["--config", &config]);
    let auth = format!("Bearer {}", key.token);
    let init = server.post_mcp(
        &[("Authorization", auth.as_str())],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25",
                           "capabilities": {"elicitation": {"url": {}}},
                           "clientInfo": {"name": "tests", "version": "0"}}}),
    );
    let session = init.header("mcp-session-id").expect("session").to_owned();
    let headers = [
        ("Authorization", auth.as_str()),
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let initialized = server.post_mcp(
        &headers,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(initialized.status, 202);
    let held = server.post_mcp(
        &headers,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "create_client", "arguments": big("Big Streamed", "s-1")}}),
    );
    assert_eq!(held.status, 200);
    let messages = held.sse_messages();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(
        messages[0]["method"],
        json!("elicitation/create"),
        "{messages:?}"
    );
    let base = format!("http://{}", server.addr);
    let id = assert_required_at(&messages[1], "tool_result", "s-1", &base);
    assert_eq!(messages[0]["params"]["elicitationId"], json!(id));
    assert_eq!(
        messages[0]["params"]["url"],
        json!(format!("{base}/console/approvals/{id}"))
    );
}
