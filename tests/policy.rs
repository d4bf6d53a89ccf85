//! The operator's policy rules (`[[policy.rules]]`): a `deny` rule with a condition on the
//! arguments refuses exactly the calls it matches, with `policy_denied` naming the rule and
//! its reason, in both guard channels, over stdio and HTTP; whom a rule covers; a rule that
//! does not compile is named by `check-config`.

use serde_json::{Value, json};

use crate::util::{HttpServer, StdioServer, TestDb, assert_error};

const LARGE_PAYMENTS: &str = r#"
[[policy.rules]]
name = "large_payments"
tools = ["record_payment"]
condition = "args.amount_cents > 1000000"
effect = "deny"
reason = "payments over 10 000.00 EUR are recorded by the finance team"

[[policy.rules]]
name = "no_test_clients"
tools = ["create_*"]
who = { keys = ["KEY"] }
condition = "args.name.startsWith('Test')"
effect = "deny"

[[policy.rules]]
name = "void_listing"
tools = ["search_invoices"]
condition = "args.status == 'void'"
effect = "deny"
"#;

const REASON: &str = "payments over 10 000.00 EUR are recorded by the finance team";

/// A database, keys answering on each channel, and the configuration file (the second
/// rule covering the key `covered` only).
struct World {
    db: TestDb,
    jsonrpc: String,
    tool_result: String,
    covered: String,
    config: String,
}

fn world() -> World {
    let db = TestDb::new();
    let jsonrpc = db.create_key("rpc", "*", &["--guard-channel", "jsonrpc"]);
    let tool_result = db.create_key("result", "*", &["--guard-channel", "tool_result"]);
    let covered = db.create_key("covered", "*", &["--guard-channel", "jsonrpc"]);
    let config = db.dir.path().join("policy.toml");
    std::fs::write(&config, LARGE_PAYMENTS.replace("KEY", &covered.id)).expect("config");
    World {
        jsonrpc: jsonrpc.token,
        tool_result: tool_result.token,
        covered: covered.token,
        config: config.to_str().expect("utf-8").to_owned(),
        db,
    }
}

fn payment(amount: u64, key: &str) -> Value {
    json!({"invoice_id": "inv_0193a0b2-c3d4-7e5f-a7b8-c9d0e1f2a3b4", "amount_cents": amount,
           "idempotency_key": key})
}

/// Asserts the JSON-RPC refusal by `large_payments`.
fn assert_denied(response: &Value) {
    assert_error(response, -32009, "policy_denied", 403, 1109, false);
    let data = &response["error"]["data"];
    assert_eq!(data["rule_id"], json!("large_payments"), "{response}");
    assert_eq!(data["details"]["reason"], json!(REASON), "{response}");
    let hint = data["hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains("\"large_payments\"") && hint.contains(REASON),
        "{response}"
    );
}

/// Asserts the same refusal answered as an `isError` result.
fn assert_denied_result(response: &Value) {
    assert!(response.get("error").is_none(), "{response}");
    let result = &response["result"];
    assert_eq!(result["isError"], json!(true), "{response}");
    let envelope = &result["_meta"]["dev.tollgate/error"];
    assert_eq!(envelope["code"], json!("policy_denied"), "{response}");
    assert_eq!(envelope["jsonrpc_code"], json!(-32009), "{response}");
    assert_eq!(envelope["error_code"], json!(1109), "{response}");
    assert_eq!(envelope["rule_id"], json!("large_payments"), "{response}");
    assert_eq!(envelope["details"]["reason"], json!(REASON), "{response}");
    assert_eq!(result["content"][0]["text"], envelope["hint"], "{response}");
}

/// Asserts the call reached the tool: the invoice does not exist.
fn assert_ran(response: &Value) {
    let envelope = &response["result"]["_meta"]["dev.tollgate/error"];
    assert_eq!(envelope["code"], json!("invoice_not_found"), "{response}");
}

#[test]
fn a_deny_rule_refuses_only_the_calls_its_condition_matches_over_stdio() {
    let world = world();
    let config = ["--config", world.config.as_str()];
    let mut rpc = StdioServer::start_with_token(&world.db, Some(&world.jsonrpc), &config);
    rpc.initialize("2025-11-25");
    assert_denied(&rpc.call_tool("record_payment", payment(2_000_000, "big-1")));
    assert_ran(&rpc.call_tool("record_payment", payment(1_000_000, "small-1")));
    // The second rule covers another key: this one creates a "Test" client.
    let created = rpc.call_tool("create_client", json!({"name": "Test One"}));
    assert_eq!(created["result"]["isError"], json!(false), "{created}");
    // A condition that cannot be evaluated (the argument is absent) fails closed.
    let listed = rpc.call_tool("search_invoices", json!({"status": "draft"}));
    assert_eq!(listed["result"]["isError"], json!(false), "{listed}");
    for args in [json!({"status": "void"}), json!({})] {
        let refused = rpc.call_tool("search_invoices", args);
        assert_error(&refused, -32009, "policy_denied", 403, 1109, false);
        assert_eq!(refused["error"]["data"]["rule_id"], json!("void_listing"));
    }
    drop(rpc);

    let mut result = StdioServer::start_with_token(&world.db, Some(&world.tool_result), &config);
    result.initialize("2025-11-25");
    assert_denied_result(&result.call_tool("record_payment", payment(2_000_001, "big-2")));
    assert_ran(&result.call_tool("record_payment", payment(20, "small-2")));
    drop(result);

    let mut covered = StdioServer::start_with_token(&world.db, Some(&world.covered), &config);
    covered.initialize("2025-11-25");
    let refused = covered.call_tool("create_client", json!({"name": "Test Two"}));
    assert_error(&refused, -32009, "policy_denied", 403, 1109, false);
    assert_eq!(
        refused["error"]["data"]["rule_id"],
        json!("no_test_clients")
    );
    assert!(
        refused["error"]["data"].get("details").is_none(),
        "{refused}"
    );
    let created = covered.call_tool("create_client", json!({"name": "Real Co"}));
    assert_eq!(created["result"]["isError"], json!(false), "{created}");
}

#[test]
fn a_deny_rule_refuses_only_the_calls_its_condition_matches_over_http() {
    let world = world();
    let mut server = HttpServer::start(&world.db, &["--config", world.config.as_str()]);
    let big = server.modern_tool_call(&world.jsonrpc, "record_payment", &payment(3_000_000, "h1"));
    assert_eq!(big.status, 200);
    assert_denied(&big.json());
    let small = server.modern_tool_call(&world.jsonrpc, "record_payment", &payment(10, "h2"));
    assert_ran(&small.json());
    let big = server.modern_tool_call(
        &world.tool_result,
        "record_payment",
        &payment(3_000_000, "h3"),
    );
    assert_eq!(big.status, 200);
    let body = big.json();
    assert_denied_result(&body);
    assert_eq!(body["result"]["resultType"], json!("complete"), "{body}");
    // Refused calls are audited under the rule's refusal (the rows are flushed at exit).
    server.terminate();
    let audited = world.db.sql_i64(
        "SELECT COUNT(*) FROM audit_log WHERE tool = 'record_payment' AND outcome = 'policy_denied'",
    );
    assert_eq!(audited, 2);
}

#[test]
fn check_config_names_the_rule_and_what_is_wrong_with_it() {
    let db = TestDb::new();
    let path = db.dir.path().join("bad.toml");
    for (rule, expect) in [
        (
            "name = \"big\"\ntools = [\"record_payment\"]\ncondition = \"args.amount_cents >\"\neffect = \"deny\"",
            "policy.rules[0] (big): condition does not compile:",
        ),
        (
            "name = \"big\"\ntools = [\"record_payment\"]\ncondition = \"amount > 3\"\neffect = \"deny\"",
            "policy.rules[0] (big): condition reads the variable \"amount\", which is not provided",
        ),
        (
            "name = \"big\"\ntools = [\"record_payment\"]\neffect = \"forbid\"",
            "unknown variant `forbid`",
        ),
    ] {
        std::fs::write(&path, format!("[[policy.rules]]\n{rule}\n")).expect("write");
        let out = db.run(&["check-config", "--config", path.to_str().expect("utf-8")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{rule}: {stderr}");
        assert!(stderr.contains(expect), "{rule}: {stderr}");
    }
    std::fs::write(&path, LARGE_PAYMENTS.replace("KEY", "abc")).expect("write");
    let out = db.run(&["check-config", "--config", path.to_str().expect("utf-8")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("condition = \"args.amount_cents > 1000000\""),
        "{stdout}"
    );
}
