//! Backend tools behind every guard, exactly as the built-in ones: an OpenAPI backend the
//! test serves itself is put behind `tollgate serve`, and scopes, plan, rate counters,
//! idempotency (with the replay answered from tollgate's own ledger, never by the backend),
//! audit and the secrecy of the backend credential are checked on it.

use serde_json::{Value, json};

use crate::util::{HttpServer, RestBackend, TestDb, assert_error};

/// The backend credential: it must never leave tollgate but towards the backend.
const SECRET: &str = "sekrit-backend-key-7f3a";

/// An orders API: list (GET), create (POST), delete (DELETE).
fn orders_document() -> Value {
    let order = json!({"type": "object", "properties": {"id": {"type": "string"}, "sku": {"type": "string"}}});
    json!({
        "openapi": "3.0.3",
        "info": {"title": "Orders", "version": "1"},
        "paths": {
            "/orders": {
                "get": {
                    "operationId": "listOrders",
                    "summary": "List the orders.",
                    "responses": {"200": {"description": "the orders", "content": {"application/json": {"schema": {"type": "object", "properties": {"orders": {"type": "array", "items": order}}}}}}}
                },
                "post": {
                    "operationId": "createOrder",
                    "summary": "Create an order.",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1}}}}}},
                    "responses": {"201": {"description": "created", "content": {"application/json": {"schema": order}}}}
                }
            },
            "/orders/{id}": {
                "delete": {
                    "operationId": "deleteOrder",
                    "summary": "Delete an order.",
                    "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "responses": {"204": {"description": "deleted"}}
                }
            }
        }
    })
}

/// The backend: answers every call, and a sku of `echo` with a 422 that repeats the
/// credential it was sent (a backend that leaks must not make tollgate leak).
fn orders_backend() -> RestBackend {
    RestBackend::start(|req| {
        let sent_key = req.header("x-api-key").unwrap_or_default().to_owned();
        match (req.method.as_str(), req.target.as_str()) {
            ("GET", "/orders") => (
                200,
                vec![],
                br#"{"orders":[{"id":"o1","sku":"A"}]}"#.to_vec(),
            ),
            ("POST", "/orders") => {
                let body: Value = serde_json::from_slice(&req.body).unwrap_or_default();
                if body["sku"] == "echo" {
                    let reply = json!({"error": {"code": "bad_sku", "message": format!("sku refused for key {sent_key}")}});
                    return (422, vec![], reply.to_string().into_bytes());
                }
                let reply = json!({"id": "o2", "sku": body["sku"]});
                (201, vec![], reply.to_string().into_bytes())
            }
            ("DELETE", _) => (204, vec![], Vec::new()),
            _ => (
                404,
                vec![],
                br#"{"error":{"code":"no_route","message":"no such path"}}"#.to_vec(),
            ),
        }
    })
}

/// A database and a `tollgate serve` with the orders backend as `crm`, its credential in a
/// file, `crm_create_order` requiring an idempotency key.
fn gate(backend: &RestBackend) -> (TestDb, HttpServer) {
    let db = TestDb::new();
    let dir = db.dir.path();
    std::fs::write(dir.join("orders.json"), orders_document().to_string()).expect("write spec");
    std::fs::write(dir.join("crm.key"), format!("{SECRET}\n")).expect("write key");
    let config = format!(
        r#"
[http]
metrics = true

[[backends]]
name = "crm"
kind = "openapi"
spec = "orders.json"
base_url = "{}"
auth = {{ header = "X-Api-Key", value_file = "crm.key" }}

[backends.tools.crm_create_order]
idempotency = "required"
"#,
        backend.url()
    );
    let server = HttpServer::start_with_config(&db, &config, &[("RUST_LOG", "debug")]);
    (db, server)
}

/// A key with `scopes`, made with the gate's configuration: a backend's scopes are known
/// only where its `[[backends]]` entry is.
fn backend_key(db: &TestDb, name: &str, scopes: &str) -> crate::util::Key {
    let config = db.dir.path().join("tollgate.toml");
    db.create_key(name, scopes, &["--config", config.to_str().expect("utf-8")])
}

fn call(server: &HttpServer, token: &str, tool: &str, args: Value) -> Value {
    server.modern_tool_call(token, tool, &args).json()
}

#[test]
fn backend_tools_are_listed_under_the_prefix_with_their_category_and_scope() {
    let backend = orders_backend();
    let (db, server) = gate(&backend);
    let reader = backend_key(&db, "reader", "crm:read");
    let listed = |token: &str| -> Vec<Value> {
        server
            .modern_tools_list(token)
            .iter()
            .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("crm_")))
            .cloned()
            .collect()
    };
    let all = listed(db.admin_key.as_deref().expect("admin key"));
    let names: Vec<&str> = all.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        ["crm_create_order", "crm_delete_order", "crm_list_orders"]
    );
    let create = &all[0];
    assert_eq!(create["annotations"]["readOnlyHint"], false);
    assert_eq!(
        create["inputSchema"]["required"],
        json!(["sku", "idempotency_key"])
    );
    assert_eq!(all[1]["annotations"]["destructiveHint"], true);
    assert_eq!(all[2]["annotations"]["readOnlyHint"], true);
    let visible = listed(&reader.token);
    assert_eq!(visible.len(), 1, "{visible:?}");
    assert_eq!(visible[0]["name"], "crm_list_orders");
}

#[test]
fn scope_and_plan_refuse_a_backend_tool_before_the_backend_is_reached() {
    let backend = orders_backend();
    let (db, server) = gate(&backend);
    let reader = backend_key(&db, "reader", "crm:read");
    let refused = call(
        &server,
        &reader.token,
        "crm_delete_order",
        json!({"id": "o1"}),
    );
    assert_error(&refused, -32005, "insufficient_scope", 403, 1105, false);
    assert_eq!(
        refused["error"]["data"]["required_scope"],
        "crm:destructive"
    );
    let out = db.run(&["plan", "exclude", "pro", "crm_list_orders"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let excluded = call(&server, &reader.token, "crm_list_orders", json!({}));
    assert_error(&excluded, -32004, "plan_upgrade_required", 403, 1104, false);
    assert!(backend.received().is_empty(), "{:?}", backend.received());
}

#[test]
fn the_rate_counters_charge_backend_calls_and_refuse_past_the_limit() {
    let backend = orders_backend();
    let (db, server) = gate(&backend);
    let key = backend_key(&db, "agent", "crm:read");
    db.limit_per_minute(&key.id, "read", 2);
    // Windows are fixed minutes: should one turn between two calls, the next window admits
    // two more, so the refusal comes within two windows' worth of calls.
    let mut admitted = 0;
    let refused = loop {
        let answer = call(&server, &key.token, "crm_list_orders", json!({}));
        if answer.get("error").is_some() {
            break answer;
        }
        assert_eq!(answer["result"]["isError"], false, "{answer}");
        assert_eq!(
            answer["result"]["structuredContent"]["orders"][0]["id"],
            "o1"
        );
        admitted += 1;
        assert!(admitted <= 4, "more than two windows' worth admitted");
    };
    assert!(admitted >= 2, "refused before the limit: {refused}");
    assert_error(&refused, -32006, "rate_limited", 429, 3001, true);
    assert_eq!(refused["error"]["data"]["limit"], 2);
    assert_eq!(backend.received().len(), admitted);
    // The refused call never reached the backend, so its counters say the admitted ones.
    let metrics = String::from_utf8_lossy(&server.get("/metrics").body).into_owned();
    let calls = format!("tollgate_backend_calls_total{{backend=\"crm\"}} {admitted}");
    for line in [
        calls.as_str(),
        "tollgate_backend_failures_total{backend=\"crm\"} 0",
        "tollgate_backend_up{backend=\"crm\",kind=\"openapi\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }
}

#[test]
fn idempotency_holds_and_a_replay_never_reaches_the_backend_again() {
    let backend = orders_backend();
    let (db, server) = gate(&backend);
    let admin = db.admin_key.clone().expect("admin key");
    let missing = call(&server, &admin, "crm_create_order", json!({"sku": "A"}));
    assert_error(
        &missing,
        -32007,
        "idempotency_key_required",
        400,
        2002,
        false,
    );
    let args = json!({"sku": "A", "idempotency_key": "order-1"});
    let first = call(&server, &admin, "crm_create_order", args.clone());
    assert_eq!(
        first["result"]["structuredContent"],
        json!({"id": "o2", "sku": "A"}),
        "{first}"
    );
    let again = call(&server, &admin, "crm_create_order", args);
    assert_eq!(
        again["result"]["structuredContent"],
        first["result"]["structuredContent"]
    );
    assert_eq!(
        again["result"]["_meta"]["dev.tollgate/idempotentReplay"], true,
        "{again}"
    );
    let other = call(
        &server,
        &admin,
        "crm_create_order",
        json!({"sku": "B", "idempotency_key": "order-1"}),
    );
    assert_error(&other, -32007, "idempotency_key_reused", 409, 3201, false);
    let posts: Vec<_> = backend
        .received()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(
        posts.len(),
        1,
        "the replay and the refusals never reach the backend"
    );
    assert_eq!(posts[0].header("idempotency-key"), Some("order-1"));
    assert_eq!(posts[0].header("x-api-key"), Some(SECRET));
    let body: Value = serde_json::from_slice(&posts[0].body).expect("JSON body");
    assert_eq!(
        body,
        json!({"sku": "A"}),
        "the key is not forwarded as an argument"
    );
    let rows = db.run_json(&["audit", "--json", "--tool", "crm_create_order"]);
    let outcomes: Vec<&str> = rows
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["outcome"].as_str())
        .collect();
    assert!(
        outcomes.contains(&"ok") && outcomes.contains(&"idempotency_key_required"),
        "{rows}"
    );
}

#[test]
fn the_backend_credential_appears_in_no_response_log_line_or_audit_row() {
    let backend = orders_backend();
    let (db, server) = gate(&backend);
    let admin = db.admin_key.clone().expect("admin key");
    let mut seen = Vec::new();
    seen.push(call(&server, &admin, "crm_list_orders", json!({})));
    seen.push(call(
        &server,
        &admin,
        "crm_delete_order",
        json!({"id": "o9", "idempotency_key": "d-1"}),
    ));
    let echoed = call(
        &server,
        &admin,
        "crm_create_order",
        json!({"sku": "echo", "idempotency_key": "e-1"}),
    );
    crate::util::assert_tool_error(&echoed, "business_rule_violation", 422, 3103);
    let envelope = &echoed["result"]["_meta"]["dev.tollgate/error"];
    assert_eq!(envelope["details"]["original_error"], "bad_sku");
    seen.push(echoed);
    assert!(
        backend
            .received()
            .iter()
            .all(|r| r.header("x-api-key") == Some(SECRET))
    );
    let health = String::from_utf8_lossy(&server.get("/healthz").body).into_owned();
    let metrics = String::from_utf8_lossy(&server.get("/metrics").body).into_owned();
    assert!(
        metrics.contains("tollgate_backend_failures_total{backend=\"crm\"} 1"),
        "{metrics}"
    );
    let audit = String::from_utf8_lossy(&db.run(&["audit", "--json"]).stdout).into_owned();
    let check = db.run(&[
        "--config",
        db.dir.path().join("tollgate.toml").to_str().expect("utf-8"),
        "backends",
        "check",
        "--json",
    ]);
    let texts = [
        serde_json::to_string(&seen).expect("json"),
        health,
        metrics,
        audit,
        String::from_utf8_lossy(&check.stdout).into_owned(),
        String::from_utf8_lossy(&check.stderr).into_owned(),
        server.log_text(),
    ];
    for text in texts {
        assert!(!text.contains(SECRET), "the credential leaked: {text}");
    }
}
