//! The guard channel (`[errors] guard_channel`, `tollgate key create|set --guard-channel`):
//! every guard refusal a model can act on, in both channels, over stdio (handshake era)
//! and HTTP (2026-07-28, both status modes) — exact codes, envelopes, statuses and
//! headers; the setting against the per-key override; authentication failures unchanged;
//! audit rows and quota the same in both channels.

use serde_json::{Value, json};

use crate::util::{HttpResponse, HttpServer, StdioServer, TestDb, assert_error, merge_modern_meta};

/// Which keys a case calls with.
#[derive(Clone, Copy)]
enum Who {
    /// Scopes `*`.
    All,
    /// Scope `invoices:read` only.
    Reader,
    /// Scopes `*`, with a read limit of 0 calls a minute.
    Limited,
}

/// The keys of one channel.
struct Keys {
    all: String,
    reader: String,
    limited: String,
}

impl Keys {
    fn token(&self, who: Who) -> &str {
        match who {
            Who::All => &self.all,
            Who::Reader => &self.reader,
            Who::Limited => &self.limited,
        }
    }
}

/// One refusal: who calls what, and what the catalog says it is.
struct Case {
    name: &'static str,
    who: Who,
    tool: &'static str,
    args: Value,
    rpc: i64,
    code: &'static str,
    http: u64,
    error_code: u64,
    retryable: bool,
    /// Its HTTP status as a JSON-RPC error in the `semantic` status mode.
    semantic: u16,
    /// Whether the call was charged before it was refused (its result carries the budget).
    charged: bool,
}

/// A database on `pro` with `send_invoice` left out of the plan, a client, and per channel
/// a key of each kind with that channel as its own.
struct World {
    db: TestDb,
    client_id: String,
    jsonrpc: Keys,
    tool_result: Keys,
}

fn keys(db: &TestDb, channel: &str) -> Keys {
    let key = |name: &str, scopes: &str| {
        db.create_key(name, scopes, &["--guard-channel", channel])
            .token
    };
    let limited = db.create_key("limited", "*", &["--guard-channel", channel]);
    db.limit_per_minute(&limited.id, "read", 0);
    Keys {
        all: key("all", "*"),
        reader: key("reader", "invoices:read"),
        limited: limited.token,
    }
}

fn world() -> World {
    let db = TestDb::new();
    let out = db.run(&["plan", "exclude", "pro", "send_invoice"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut admin = StdioServer::start(&db, &[]);
    admin.initialize("2025-11-25");
    let created = admin.call_tool(
        "create_client",
        json!({"name": "Guard Co", "tax_id": "B12345674"}),
    );
    let client_id = created["result"]["structuredContent"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("client id in {created}"))
        .to_owned();
    drop(admin);
    World {
        jsonrpc: keys(&db, "jsonrpc"),
        tool_result: keys(&db, "tool_result"),
        client_id,
        db,
    }
}

/// Every refusal a model can act on; `tag` keeps each run's idempotency keys apart.
fn cases(world: &World, tag: &str) -> Vec<Case> {
    let case = |name,
                who,
                tool,
                args: Value,
                (rpc, code, http, error_code, retryable),
                semantic,
                charged| Case {
        name,
        who,
        tool,
        args,
        rpc,
        code,
        http,
        error_code,
        retryable,
        semantic,
        charged,
    };
    let vat_7 =
        json!([{"description": "X", "quantity": 1, "unit_price_cents": 100, "vat_rate": 7}]);
    vec![
        case(
            "unknown tool",
            Who::All,
            "no_such_tool",
            json!({}),
            (-32602, "unknown_tool", 404, 1005, false),
            200,
            false,
        ),
        case(
            "retired tool",
            Who::All,
            "list_invoices",
            json!({}),
            (-32602, "tool_retired", 410, 1006, false),
            200,
            false,
        ),
        case(
            "rate limit",
            Who::Limited,
            "search_invoices",
            json!({}),
            (-32006, "rate_limited", 429, 3001, true),
            429,
            false,
        ),
        case(
            "scope",
            Who::Reader,
            "create_client",
            json!({"name": "Nope"}),
            (-32005, "insufficient_scope", 403, 1105, false),
            403,
            true,
        ),
        case(
            "plan",
            Who::All,
            "send_invoice",
            json!({"invoice_id": "inv_x", "idempotency_key": format!("send-{tag}")}),
            (-32004, "plan_upgrade_required", 403, 1104, false),
            200,
            true,
        ),
        case(
            "guardrail",
            Who::All,
            "create_invoice",
            json!({"client_id": world.client_id, "lines": vat_7}),
            (-32008, "mcp_guardrail_violation", 422, 3301, false),
            200,
            true,
        ),
        case(
            "idempotency key required",
            Who::All,
            "record_payment",
            json!({"invoice_id": "inv_x", "amount_cents": 100}),
            (-32007, "idempotency_key_required", 400, 2002, false),
            200,
            true,
        ),
        case(
            "idempotency key invalid",
            Who::All,
            "create_client",
            json!({"name": "X", "idempotency_key": ""}),
            (-32007, "idempotency_key_invalid", 400, 2003, false),
            200,
            true,
        ),
        case(
            "idempotency key reused",
            Who::All,
            "create_client",
            json!({"name": "Other", "idempotency_key": format!("reuse-{tag}")}),
            (-32007, "idempotency_key_reused", 409, 3201, false),
            200,
            true,
        ),
        case(
            "idempotency key in use",
            Who::All,
            "create_client",
            json!({"name": "Held", "idempotency_key": format!("held-{tag}")}),
            (-32007, "idempotency_key_in_use", 409, 3202, true),
            200,
            true,
        ),
    ]
}

/// What the reused and in-use cases need first: a completed call with their key, and the
/// in-use key marked as still running in another process.
fn prepare_keys(world: &World, call: &mut dyn FnMut(&str, Value) -> Value, tag: &str) {
    for (name, key) in [
        ("First", format!("reuse-{tag}")),
        ("Held", format!("held-{tag}")),
    ] {
        let first = call(
            "create_client",
            json!({"name": name, "idempotency_key": key}),
        );
        assert_eq!(first["result"]["isError"], json!(false), "{first}");
    }
    world.db.sql(&format!(
        "UPDATE idempotency_keys SET state = 'in_flight', owner = 'another-process', \
         result = NULL, expires_at = {} WHERE key = 'held-{tag}'",
        crate::util::unix_now() + 3600
    ));
}

/// Fields that move between two calls of the same refusal (a window's reset, the wait).
const VOLATILE: [&str; 2] = ["reset", "retry_after"];

fn without_volatile(envelope: &Value) -> Value {
    let mut envelope = envelope.clone();
    if let Some(map) = envelope.as_object_mut() {
        // The wait a hint names counts down like `retry_after` itself.
        if let (Some(wait), Some(Value::String(hint))) = (
            map.get("retry_after").and_then(Value::as_u64),
            map.get_mut("hint"),
        ) {
            *hint = hint
                .replace(&format!("wait {wait} seconds"), "wait <seconds>")
                .replace(&format!("wait {wait} second"), "wait <seconds>");
        }
        for field in VOLATILE {
            map.remove(field);
        }
        map.remove("jsonrpc_code");
    }
    envelope
}

/// Asserts the JSON-RPC refusal of `case`; gives its envelope.
fn assert_jsonrpc(case: &Case, response: &Value) -> Value {
    assert_error(
        response,
        case.rpc,
        case.code,
        case.http,
        case.error_code,
        case.retryable,
    );
    assert!(
        response.get("result").is_none(),
        "{}: {response}",
        case.name
    );
    response["error"]["data"].clone()
}

/// Asserts the `isError` answer of `case` on the tool-result channel; gives its envelope.
fn assert_tool_result(case: &Case, response: &Value, modern: bool) -> Value {
    let name = case.name;
    assert!(response.get("error").is_none(), "{name}: {response}");
    let result = &response["result"];
    assert_eq!(result["isError"], json!(true), "{name}: {response}");
    let envelope = &result["_meta"]["dev.tollgate/error"];
    assert_eq!(envelope["code"], json!(case.code), "{name}: {response}");
    assert_eq!(
        envelope["http_status"],
        json!(case.http),
        "{name}: {response}"
    );
    assert_eq!(
        envelope["error_code"],
        json!(case.error_code),
        "{name}: {response}"
    );
    assert_eq!(
        envelope["retryable"],
        json!(case.retryable),
        "{name}: {response}"
    );
    assert_eq!(
        envelope["jsonrpc_code"],
        json!(case.rpc),
        "{name}: {response}"
    );
    assert_eq!(
        result["content"][0]["type"],
        json!("text"),
        "{name}: {response}"
    );
    assert_eq!(
        result["content"][0]["text"], envelope["hint"],
        "{name}: {response}"
    );
    assert!(
        envelope["hint"].as_str().is_some_and(|h| !h.is_empty()),
        "{name}: {response}"
    );
    assert_eq!(
        result["_meta"]["dev.tollgate/mode"],
        json!("live"),
        "{name}: {response}"
    );
    let budget = &result["_meta"]["dev.tollgate/ratelimit"];
    assert_eq!(
        budget.is_object(),
        case.charged,
        "{name}: budget in {response}"
    );
    let result_type = if modern {
        json!("complete")
    } else {
        Value::Null
    };
    assert_eq!(result["resultType"], result_type, "{name}: {response}");
    envelope.clone()
}

/// The fields of the refusal a model needs, checked once per case.
fn assert_fields(case: &Case, envelope: &Value, world: &World) {
    let name = case.name;
    match case.code {
        "unknown_tool" => assert_eq!(envelope["details"]["name"], json!("no_such_tool"), "{name}"),
        "tool_retired" => assert_eq!(envelope["replacement"], json!("search_invoices"), "{name}"),
        "rate_limited" => {
            assert_eq!(envelope["bucket"], json!("read"), "{name}: {envelope}");
            assert_eq!(envelope["limit"], json!(0), "{name}: {envelope}");
            assert!(
                envelope["retry_after"].as_u64().is_some(),
                "{name}: {envelope}"
            );
        }
        "insufficient_scope" => {
            assert_eq!(envelope["required_scope"], json!("clients:write"), "{name}");
            assert_eq!(
                envelope["provided_scopes"],
                json!(["invoices:read"]),
                "{name}"
            );
        }
        "plan_upgrade_required" => {
            assert_eq!(
                envelope["details"]["tool"],
                json!("send_invoice"),
                "{name}: {envelope}"
            );
        }
        "mcp_guardrail_violation" => {
            assert_eq!(
                envelope["rule_id"],
                json!("legal-vat-rates"),
                "{name}: {envelope}"
            );
            assert_eq!(
                envelope["details"]["vat_rate"],
                json!(7),
                "{name}: {envelope}"
            );
        }
        "idempotency_key_in_use" => assert_eq!(envelope["retry_after"], json!(1), "{name}"),
        _ => {}
    }
    let _ = world;
}

#[test]
fn every_refusal_a_model_can_act_on_over_stdio_in_both_channels() {
    let world = world();
    for (channel, keys) in [
        ("jsonrpc", &world.jsonrpc),
        ("tool_result", &world.tool_result),
    ] {
        let tag = format!("stdio-{channel}");
        let mut servers: Vec<(String, StdioServer)> = Vec::new();
        let mut call = |token: &str, tool: &str, args: Value| -> Value {
            if !servers.iter().any(|(t, _)| t == token) {
                let mut server = StdioServer::start_with_token(&world.db, Some(token), &[]);
                server.initialize("2025-11-25");
                servers.push((token.to_owned(), server));
            }
            let (_, server) = servers
                .iter_mut()
                .find(|(t, _)| t == token)
                .expect("server");
            server.call_tool(tool, args)
        };
        prepare_keys(&world, &mut |tool, args| call(&keys.all, tool, args), &tag);
        for case in cases(&world, &tag) {
            let response = call(keys.token(case.who), case.tool, case.args.clone());
            let envelope = if channel == "jsonrpc" {
                assert_jsonrpc(&case, &response)
            } else {
                assert_tool_result(&case, &response, false)
            };
            assert_fields(&case, &envelope, &world);
        }
        // The same process serves the 2026-07-28 era too: the result says it is complete.
        let mut params = json!({"name": "no_such_tool", "arguments": {}});
        merge_modern_meta(&mut params);
        let (_, server) = servers.first_mut().expect("a server");
        let modern = server.request("tools/call", params);
        if channel == "tool_result" {
            assert_eq!(
                modern["result"]["resultType"],
                json!("complete"),
                "{modern}"
            );
            assert_eq!(modern["result"]["isError"], json!(true), "{modern}");
        } else {
            assert_eq!(modern["error"]["code"], json!(-32602), "{modern}");
        }
    }
}

#[test]
fn every_refusal_a_model_can_act_on_over_http_in_both_channels_and_status_modes() {
    let world = world();
    for mode in ["compatible", "semantic"] {
        let server =
            HttpServer::start_with_env(&world.db, &[], &[("TOLLGATE_HTTP_ERROR_STATUS", mode)]);
        let mut envelopes: Vec<Vec<Value>> = Vec::new();
        for (channel, keys) in [
            ("jsonrpc", &world.jsonrpc),
            ("tool_result", &world.tool_result),
        ] {
            let tag = format!("http-{mode}-{channel}");
            prepare_keys(
                &world,
                &mut |tool, args| server.modern_tool_call(&keys.all, tool, &args).json(),
                &tag,
            );
            let mut seen = Vec::new();
            for case in cases(&world, &tag) {
                let response = server.modern_tool_call(keys.token(case.who), case.tool, &case.args);
                let body = response.json();
                let (envelope, status) = if channel == "jsonrpc" {
                    let status = if mode == "semantic" {
                        case.semantic
                    } else {
                        200
                    };
                    (assert_jsonrpc(&case, &body), status)
                } else {
                    (assert_tool_result(&case, &body, true), 200)
                };
                assert_eq!(
                    response.status, status,
                    "{} ({mode}, {channel}): {body}",
                    case.name
                );
                // Retry-After goes with every refusal that says when to retry, the bucket's
                // headers with a rate limit, in both channels and both modes.
                let retry = response.header("retry-after").map(str::to_owned);
                let wait = envelope["retry_after"].as_u64().map(|s| s.to_string());
                assert_eq!(
                    retry, wait,
                    "{} ({mode}, {channel}): Retry-After",
                    case.name
                );
                assert_eq!(
                    response.header("ratelimit").is_some(),
                    case.code == "rate_limited",
                    "{} ({mode}, {channel}): RateLimit",
                    case.name
                );
                assert_fields(&case, &envelope, &world);
                seen.push(without_volatile(&envelope));
            }
            envelopes.push(seen);
        }
        // The tool-result envelope is the JSON-RPC one plus `jsonrpc_code`.
        assert_eq!(envelopes[0], envelopes[1], "{mode}");
    }
}

#[test]
fn the_setting_applies_to_keys_without_their_own_channel_and_key_set_changes_a_running_server() {
    let db = TestDb::new();
    let plain = db.create_key("plain", "invoices:read", &[]);
    let pinned = db.create_key("pinned", "invoices:read", &["--guard-channel", "jsonrpc"]);
    let env = [("TOLLGATE_ERRORS_GUARD_CHANNEL", "tool_result")];
    let server = HttpServer::start_with_env(&db, &[], &env);
    let scope =
        |token: &str| server.modern_tool_call(token, "create_client", &json!({"name": "N"}));
    let refused = |response: &HttpResponse| response.json()["result"]["isError"] == json!(true);

    assert!(
        refused(&scope(&plain.token)),
        "the setting applies to a key without its own"
    );
    // The handshake era over HTTP: the same isError result, without resultType.
    let session = server.open_session("2025-11-25", &plain.token);
    let auth = format!("Bearer {}", plain.token);
    let handshake = server.post_mcp(
        &[
            ("Authorization", auth.as_str()),
            ("Mcp-Session-Id", session.as_str()),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "create_client", "arguments": {"name": "N"}}}),
    );
    assert_eq!(handshake.status, 200);
    let body = handshake.json();
    assert_eq!(body["result"]["isError"], json!(true), "{body}");
    assert_eq!(
        body["result"]["_meta"]["dev.tollgate/error"]["jsonrpc_code"],
        json!(-32005)
    );
    assert!(body["result"].get("resultType").is_none(), "{body}");
    let pinned_answer = scope(&pinned.token).json();
    assert_eq!(
        pinned_answer["error"]["code"],
        json!(-32005),
        "the key's own channel wins"
    );

    let set = |id: &str, channel: &str| {
        db.run_json(&["key", "set", id, "--guard-channel", channel, "--json"])
    };
    assert_eq!(
        set(&pinned.id, "default"),
        json!({"id": pinned.id, "guard_channel": "default"})
    );
    assert!(
        refused(&scope(&pinned.token)),
        "default follows the setting, from the next call"
    );
    set(&plain.id, "jsonrpc");
    assert_eq!(scope(&plain.token).json()["error"]["code"], json!(-32005));

    let listed = db.run_json(&["key", "list", "--json"]);
    let channel_of = |id: &str| {
        listed
            .as_array()
            .expect("list")
            .iter()
            .find(|k| k["id"] == json!(id))
            .map(|k| k["guard_channel"].clone())
    };
    assert_eq!(channel_of(&plain.id), Some(json!("jsonrpc")));
    assert_eq!(channel_of(&pinned.id), Some(json!("default")));
    let text = String::from_utf8_lossy(&db.run(&["key", "list"]).stdout).into_owned();
    assert!(text.contains("CHANNEL"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with(&plain.id))
        .expect("row");
    assert!(row.contains("jsonrpc"), "{row}");

    let bad = db.run(&["key", "set", &plain.id, "--guard-channel", "sideways"]);
    assert!(!bad.status.success());
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr).trim(),
        "tollgate: --guard-channel: expected tool_result, jsonrpc or default, got \"sideways\""
    );
    let unknown = db.run(&["key", "set", "nope", "--guard-channel", "jsonrpc"]);
    assert!(!unknown.status.success());
}

#[test]
fn authentication_failures_stay_jsonrpc_errors_on_the_tool_result_channel() {
    let db = TestDb::new();
    let key = db.create_key("gone", "*", &["--guard-channel", "tool_result"]);
    let env = [("TOLLGATE_ERRORS_GUARD_CHANNEL", "tool_result")];
    let server = HttpServer::start_with_env(&db, &[], &env);
    assert_eq!(
        server
            .modern_tool_call(&key.token, "search_invoices", &json!({}))
            .json()["result"]["isError"],
        json!(false)
    );
    db.run_json(&["key", "revoke", &key.id, "--json"]);
    let revoked = server.modern_tool_call(&key.token, "search_invoices", &json!({}));
    assert_eq!(revoked.status, 401);
    assert_error(&revoked.json(), -32001, "invalid_token", 401, 1101, false);

    // The authentication throttle's rate_limited (bucket "auth") is no rate limit of a call.
    // Its windows are fixed minutes: should one turn between two failures, the next window
    // throttles within as many again, so two windows' worth of failures always reach it.
    let throttled = (0..22)
        .map(|n| {
            let stranger = format!("tg_live_{:020}_{}", n, "x".repeat(43));
            server
                .modern_tool_call(&stranger, "search_invoices", &json!({}))
                .json()
        })
        .find(|answer| answer["error"]["code"] == json!(-32006))
        .expect("the failure throttle refuses within two windows");
    assert_error(&throttled, -32006, "rate_limited", 429, 3001, true);
    assert_eq!(
        throttled["error"]["data"]["bucket"],
        json!("auth"),
        "{throttled}"
    );

    let mut stdio = StdioServer::start_with_token(&db, Some(&key.token), &[]);
    stdio.initialize("2025-11-25");
    let answer = stdio.call_tool("search_invoices", json!({}));
    assert_error(&answer, -32001, "invalid_token", 401, 1101, false);
}

#[test]
fn the_channel_changes_neither_the_audit_outcome_nor_the_quota_nor_other_methods() {
    let db = TestDb::new();
    let rpc = db.create_key("rpc", "invoices:read", &["--guard-channel", "jsonrpc"]);
    let result = db.create_key(
        "result",
        "invoices:read",
        &["--guard-channel", "tool_result"],
    );
    let server = HttpServer::start_with_env(&db, &[], &[("TOLLGATE_HTTP_METRICS", "true")]);
    for key in [&rpc, &result] {
        server.modern_tool_call(&key.token, "create_client", &json!({"name": "N"}));
        server.modern_tool_call(&key.token, "no_such_tool", &json!({}));
    }
    let metrics = String::from_utf8_lossy(&server.get("/metrics").body).into_owned();
    drop(server);
    let usage = db.run_json(&["usage", "--json"]);
    for key in [&rpc, &result] {
        let rows = db.run_json(&["audit", "--credential", &key.id, "--json"]);
        let mut outcomes: Vec<&str> = rows
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| r["outcome"].as_str().expect("outcome"))
            .collect();
        outcomes.sort_unstable();
        assert_eq!(
            outcomes,
            ["insufficient_scope", "unknown_tool"],
            "{}",
            key.id
        );
        let charged: Vec<&Value> = usage["counters"]
            .as_array()
            .expect("counters")
            .iter()
            .filter(|c| c["key"] == json!(key.id))
            .collect();
        assert_eq!(charged.len(), 1, "{usage}");
        assert_eq!(charged[0]["bucket"], json!("write"), "{usage}");
        assert_eq!(charged[0]["count"], json!(1), "{usage}");
    }
    for line in [
        "tollgate_guard_rejections_total{code=\"insufficient_scope\"} 2",
        "tollgate_guard_rejections_total{code=\"unknown_tool\"} 2",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }

    // Only tools/call changes channel: a prompt is refused with a JSON-RPC error still.
    let writer = db.create_key(
        "writer",
        "clients:read",
        &["--guard-channel", "tool_result"],
    );
    let mut stdio = StdioServer::start_with_token(&db, Some(&writer.token), &[]);
    stdio.initialize("2025-11-25");
    let prompt = stdio.request("prompts/get", json!({"name": "chase_overdue_invoices"}));
    assert_error(&prompt, -32005, "insufficient_scope", 403, 1105, false);
}

#[test]
fn plan_limits_reach_the_model_on_the_tool_result_channel() {
    let db = TestDb::new();
    let result = db.create_key("result", "*", &["--guard-channel", "tool_result"]);
    let rpc = db.create_key("rpc", "*", &["--guard-channel", "jsonrpc"]);
    db.create_key("third", "*", &[]);
    let server = HttpServer::start(&db, &[]);
    let call = |token: &str| server.modern_tool_call(token, "search_clients", &json!({}));
    let out = db.run(&["limits", "set", "--plan", "pro", "--per-hour", "0"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hourly = call(&result.token);
    assert_eq!(hourly.status, 200);
    let envelope = &hourly.json()["result"]["_meta"]["dev.tollgate/error"];
    assert_eq!(envelope["code"], json!("rate_limited"), "{envelope}");
    assert_eq!(envelope["bucket"], json!("plan"), "{envelope}");
    assert_eq!(envelope["jsonrpc_code"], json!(-32006), "{envelope}");
    assert!(hourly.header("retry-after").is_some());
    assert_eq!(
        call(&rpc.token).json()["error"]["data"]["bucket"],
        json!("plan")
    );

    // Four active keys on a plan that allows three.
    let out = db.run(&["limits", "set", "--plan", "free", "--per-hour", "1000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = db.run(&["plan", "set", "free"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let over = call(&result.token).json();
    let envelope = &over["result"]["_meta"]["dev.tollgate/error"];
    assert_eq!(envelope["code"], json!("plan_limit_exceeded"), "{over}");
    assert_eq!(envelope["jsonrpc_code"], json!(-32004), "{over}");
    assert_eq!(
        envelope["details"]["allowance"],
        json!("active_keys"),
        "{over}"
    );
    assert_eq!(
        over["result"]["content"][0]["text"], envelope["hint"],
        "{over}"
    );
    let refused = call(&rpc.token).json();
    assert_error(&refused, -32004, "plan_limit_exceeded", 403, 1107, false);
}
