//! Rehearsed failures (`tollgate faults add|list|clear`): every rehearsable error rendered
//! exactly like the real one over stdio and HTTP (both status modes), in both guard
//! channels, with `details.simulated: true`; counts used up, credentials targeted, the
//! simulated call charged and audited and kept away from the idempotency ledger and the
//! tool; a live installation refusing to add faults.

use serde_json::{Value, json};

use crate::util::{HttpServer, Key, StdioServer, TestDb};

/// A test-mode installation.
fn test_mode_db() -> TestDb {
    let db = TestDb::new();
    let out = db.run(&["company", "set", "--mode", "test"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    db
}

fn add_fault(db: &TestDb, args: &[&str]) -> Value {
    let mut argv = vec!["faults", "add", "--json"];
    argv.extend_from_slice(args);
    db.run_json(&argv)
}

/// The catalog entry of `code` as `tollgate errors --format json` prints it (for
/// `backend_unavailable`, the tool's entry: the one a tool call can end with).
fn entry<'a>(catalog: &'a Value, code: &str) -> &'a Value {
    let entries = catalog.as_array().expect("catalog");
    let matching: Vec<&Value> = entries
        .iter()
        .filter(|e| e["code"] == json!(code))
        .collect();
    // Several entries share a code (a backend's `rate_limited` beside the guard's): a
    // rehearsal answers with the first in catalog order, except `backend_unavailable`,
    // whose first entry is the server's own fault, not a tool's.
    matching
        .iter()
        .find(|e| code != "backend_unavailable" || e["channel"] == json!("tool_result"))
        .copied()
        .unwrap_or_else(|| panic!("{code} in the catalog"))
}

/// Every code `faults add` accepts, from its refusal of one it does not.
fn rehearsable_codes(db: &TestDb) -> Vec<String> {
    let out = db.run(&[
        "faults",
        "add",
        "--tool",
        "search_clients",
        "--error",
        "invalid_token",
    ]);
    assert!(!out.status.success());
    let message = String::from_utf8_lossy(&out.stderr).into_owned();
    let list = message
        .trim()
        .split_once("give one of: ")
        .unwrap_or_else(|| panic!("the accepted codes in {message}"))
        .1;
    list.split(", ").map(str::to_owned).collect()
}

/// How a rehearsed error of `entry` must arrive on `channel`: as an `isError` result (the
/// tool's own failures, and the refusals a model can act on on the tool-result channel)
/// or as a JSON-RPC error; gives its envelope.
fn assert_rendered(entry: &Value, channel: &str, body: &Value) -> Value {
    let code = entry["code"].as_str().expect("code");
    let as_result = entry["channel"] == json!("tool_result")
        || (channel == "tool_result" && code != "internal_error");
    let envelope = if as_result {
        let result = &body["result"];
        assert_eq!(
            result["isError"],
            json!(true),
            "{code} on {channel}: {body}"
        );
        assert_eq!(
            result["content"][0]["text"],
            result["_meta"]["dev.tollgate/error"]["hint"]
        );
        assert_eq!(
            result["_meta"]["dev.tollgate/mode"],
            json!("live"),
            "{body}"
        );
        let envelope = result["_meta"]["dev.tollgate/error"].clone();
        let rpc = (entry["channel"] == json!("jsonrpc")).then(|| entry["jsonrpc_code"].clone());
        assert_eq!(
            envelope.get("jsonrpc_code").cloned(),
            rpc,
            "{code} on {channel}: {body}"
        );
        envelope
    } else {
        let error = &body["error"];
        assert_eq!(
            error["code"], entry["jsonrpc_code"],
            "{code} on {channel}: {body}"
        );
        assert_eq!(error["message"], json!(code), "{body}");
        error["data"].clone()
    };
    for field in ["code", "http_status", "error_code", "retryable"] {
        assert_eq!(
            envelope[field], entry[field],
            "{field} of {code} on {channel}: {body}"
        );
    }
    assert_eq!(
        envelope["details"]["simulated"],
        json!(true),
        "{code} on {channel}: {body}"
    );
    assert!(
        envelope["hint"]
            .as_str()
            .is_some_and(|h| !h.is_empty() && !h.contains('{')),
        "{code}: a hint with every field filled in: {body}"
    );
    envelope
}

/// The HTTP status the real error of `entry` gets on `channel` in status `mode`.
fn expected_status(entry: &Value, channel: &str, mode: &str) -> u16 {
    let code = entry["code"].as_str().expect("code");
    match code {
        "internal_error" => 500,
        _ if entry["channel"] == json!("tool_result") || channel == "tool_result" => 200,
        "rate_limited" if mode == "semantic" => 429,
        "insufficient_scope" if mode == "semantic" => 403,
        _ => 200,
    }
}

/// The fields a rehearsed error takes from the call's context.
fn assert_context(code: &str, envelope: &Value, tool: &str) {
    match code {
        "rate_limited" => {
            assert_eq!(envelope["bucket"], json!("read"), "{envelope}");
            assert_eq!(envelope["limit"], json!(120), "{envelope}");
            assert_eq!(envelope["retry_after"], json!(17), "{envelope}");
            assert!(envelope["reset"].as_i64().is_some(), "{envelope}");
        }
        "insufficient_scope" => {
            assert_eq!(
                envelope["required_scope"],
                json!("clients:read"),
                "{envelope}"
            );
            assert_eq!(envelope["provided_scopes"], json!(["*"]), "{envelope}");
        }
        "plan_upgrade_required" => {
            assert_eq!(envelope["required_plan"], json!("enterprise"), "{envelope}");
            assert_eq!(
                envelope["details"]["current_plan"],
                json!("pro"),
                "{envelope}"
            );
        }
        "plan_limit_exceeded" => {
            assert_eq!(
                envelope["details"]["allowance"],
                json!("active_keys"),
                "{envelope}"
            );
            assert_eq!(envelope["required_plan"], json!("enterprise"), "{envelope}");
        }
        "mcp_guardrail_violation" => {
            assert_eq!(envelope["rule_id"], json!("legal-vat-rates"), "{envelope}");
            assert_eq!(
                envelope["guardrail_uri"],
                json!("tollgate://guardrails/legal-vat-rates")
            );
            assert_eq!(envelope["details"]["allowed_rates"], json!([21, 10, 4, 0]));
        }
        "unknown_tool" => assert_eq!(envelope["details"]["name"], json!(tool), "{envelope}"),
        "tool_retired" => assert_eq!(envelope["replacement"], json!(tool), "{envelope}"),
        "idempotency_key_in_use" | "timeout" | "backend_unavailable" => {
            assert_eq!(
                envelope["retry_after"],
                json!(17),
                "--retry-after: {envelope}"
            );
        }
        _ => {}
    }
}

#[test]
fn every_rehearsable_error_is_rendered_like_the_real_one_over_both_transports_and_channels() {
    let db = test_mode_db();
    let catalog: Value =
        serde_json::from_slice(&db.run(&["errors", "--format", "json"]).stdout).expect("catalog");
    let keys: Vec<(&str, Key)> = ["jsonrpc", "tool_result"]
        .into_iter()
        .map(|ch| (ch, db.create_key(ch, "*", &["--guard-channel", ch])))
        .collect();
    let mut stdio: Vec<StdioServer> = keys
        .iter()
        .map(|(_, key)| {
            let mut server = StdioServer::start_with_token(&db, Some(&key.token), &[]);
            server.initialize("2025-11-25");
            server
        })
        .collect();
    let compatible = HttpServer::start(&db, &[]);
    let semantic =
        HttpServer::start_with_env(&db, &[], &[("TOLLGATE_HTTP_ERROR_STATUS", "semantic")]);
    let codes = rehearsable_codes(&db);
    assert!(codes.len() > 20, "{codes:?}");
    for code in &codes {
        let entry = entry(&catalog, code);
        let (tool, args) = match code.as_str() {
            "mcp_guardrail_violation" => ("create_invoice", json!({"client_id": "cli_x"})),
            _ => ("search_clients", json!({})),
        };
        let mut add = vec!["--tool", tool, "--error", code, "--count", "6"];
        if entry["retryable"] == json!(true) {
            add.extend(["--retry-after", "17"]);
        }
        let fault = add_fault(&db, &add);
        assert_eq!(fault["remaining"], json!(6), "{fault}");
        for (i, (channel, key)) in keys.iter().enumerate() {
            let body = stdio[i].call_tool(tool, args.clone());
            let envelope = assert_rendered(entry, channel, &body);
            assert_context(code, &envelope, tool);
            for (mode, server) in [("compatible", &compatible), ("semantic", &semantic)] {
                let response = server.modern_tool_call(&key.token, tool, &args);
                let body = response.json();
                let envelope = assert_rendered(entry, channel, &body);
                assert_context(code, &envelope, tool);
                assert_eq!(
                    response.status,
                    expected_status(entry, channel, mode),
                    "{code} on {channel} ({mode}): {body}"
                );
                // Retry-After goes with a refusal that says when to retry (a tool's own
                // failure is a result: its wait travels in the envelope only).
                let retry = envelope["retry_after"]
                    .as_u64()
                    .filter(|_| entry["channel"] == json!("jsonrpc"))
                    .map(|s| s.to_string());
                assert_eq!(
                    response.header("retry-after").map(str::to_owned),
                    retry,
                    "{code}"
                );
                // A tool failure carries the budget left, a rate limit its bucket; the other
                // refusals no rate-limit header, as when they are real.
                assert_eq!(
                    response.header("ratelimit").is_some(),
                    code == "rate_limited" || entry["channel"] == json!("tool_result"),
                    "{code}: RateLimit header"
                );
                if let Some(result) = body.get("result") {
                    assert_eq!(result["resultType"], json!("complete"), "{body}");
                }
            }
        }
        assert_eq!(
            db.run_json(&["faults", "list", "--json"]),
            json!([]),
            "{code} used up"
        );
    }
}

#[test]
fn a_counted_fault_is_used_up_and_a_fault_can_target_one_credential() {
    let db = test_mode_db();
    let target = db.create_key("target", "*", &[]);
    let other = db.create_key("other", "*", &[]);
    let server = HttpServer::start(&db, &[]);
    let call = |key: &Key| {
        server
            .modern_tool_call(&key.token, "search_clients", &json!({}))
            .json()
    };
    let failed = |body: &Value| body["result"]["_meta"]["dev.tollgate/error"]["code"].clone();

    let fault = add_fault(
        &db,
        &[
            "--tool",
            "search_clients",
            "--credential",
            &target.id,
            "--error",
            "timeout",
            "--count",
            "2",
        ],
    );
    let id = fault["id"].as_i64().expect("id");
    assert_eq!(fault["credential_id"], json!(target.id), "{fault}");
    assert_eq!(
        call(&other)["result"]["isError"],
        json!(false),
        "another credential is spared"
    );
    assert_eq!(failed(&call(&target)), json!("timeout"));
    let listed = db.run_json(&["faults", "list", "--json"]);
    assert_eq!(listed[0]["id"], json!(id), "{listed}");
    assert_eq!(listed[0]["remaining"], json!(1), "{listed}");
    assert_eq!(failed(&call(&target)), json!("timeout"));
    assert_eq!(db.run_json(&["faults", "list", "--json"]), json!([]));
    assert_eq!(call(&target)["result"]["isError"], json!(false), "used up");

    // Without a count it fires until cleared; clear takes one id or all.
    let first = add_fault(
        &db,
        &["--tool", "search_clients", "--error", "adapter_error"],
    );
    add_fault(
        &db,
        &["--tool", "get_client", "--error", "client_not_found"],
    );
    assert_eq!(failed(&call(&other)), json!("adapter_error"));
    assert_eq!(failed(&call(&other)), json!("adapter_error"));
    let id = first["id"].as_i64().expect("id").to_string();
    assert_eq!(
        db.run_json(&["faults", "clear", &id, "--json"]),
        json!({"cleared": 1})
    );
    assert_eq!(call(&other)["result"]["isError"], json!(false));
    let text = String::from_utf8_lossy(&db.run(&["faults", "list"]).stdout).into_owned();
    assert!(
        text.contains("calls of get_client by any credential fail with client_not_found"),
        "{text}"
    );
    assert_eq!(
        db.run_json(&["faults", "clear", "--json"]),
        json!({"cleared": 1})
    );
    let missing = db.run(&["faults", "clear", &id]);
    assert!(!missing.status.success());
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr).trim(),
        format!("tollgate: no fault has the id {id}; run `tollgate faults list` to see the ids")
    );
}

#[test]
fn a_simulated_call_is_charged_and_audited_and_never_reaches_the_ledger_or_the_tool() {
    let db = test_mode_db();
    let key = db.create_key("k", "*", &[]);
    add_fault(
        &db,
        &[
            "--tool",
            "create_client",
            "--error",
            "timeout",
            "--count",
            "1",
        ],
    );
    let mut stdio = StdioServer::start_with_token(&db, Some(&key.token), &[]);
    stdio.initialize("2025-11-25");
    let args = json!({"name": "Rehearsed SL", "idempotency_key": "rehearsal-1"});
    let simulated = stdio.call_tool("create_client", args.clone());
    let envelope = &simulated["result"]["_meta"]["dev.tollgate/error"];
    assert_eq!(envelope["code"], json!("timeout"), "{simulated}");
    assert_eq!(envelope["details"]["simulated"], json!(true), "{simulated}");
    let budget = &simulated["result"]["_meta"]["dev.tollgate/ratelimit"];
    assert_eq!(
        budget["tightest"],
        json!("write"),
        "charged like any call: {simulated}"
    );

    // The key was never recorded and the tool never ran: the same key now creates the client.
    let real = stdio.call_tool("create_client", args);
    assert_eq!(real["result"]["isError"], json!(false), "{real}");
    assert!(
        real["result"]["_meta"]
            .get("dev.tollgate/idempotentReplay")
            .is_none(),
        "{real}"
    );
    let found = stdio.call_tool("search_clients", json!({"query": "Rehearsed"}));
    assert_eq!(
        found["result"]["structuredContent"]["data"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "{found}"
    );
    drop(stdio);

    let rows = db.run_json(&[
        "audit",
        "--credential",
        &key.id,
        "--tool",
        "create_client",
        "--json",
    ]);
    let mut outcomes: Vec<&str> = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["outcome"].as_str().expect("o"))
        .collect();
    outcomes.sort_unstable();
    assert_eq!(outcomes, ["ok", "timeout"], "{rows}");
    let usage = db.run_json(&["usage", "--json"]);
    let write = usage["counters"]
        .as_array()
        .expect("counters")
        .iter()
        .find(|c| c["key"] == json!(key.id) && c["bucket"] == json!("write"))
        .cloned()
        .unwrap_or_else(|| panic!("write counter in {usage}"));
    assert_eq!(
        write["count"],
        json!(2),
        "the simulated call and the real one: {usage}"
    );
}

#[test]
fn faults_are_refused_on_a_live_installation_and_checked_when_added() {
    let db = TestDb::new();
    let live = db.run(&[
        "faults",
        "add",
        "--tool",
        "search_clients",
        "--error",
        "timeout",
    ]);
    assert_eq!(live.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&live.stderr).trim(),
        "tollgate: faults can only be added while the company is in test mode (a live \
         installation never rehearses failures); switch with `tollgate company set --mode test`"
    );
    assert_eq!(db.run_json(&["faults", "list", "--json"]), json!([]));

    let out = db.run(&["company", "set", "--mode", "test"]);
    assert!(out.status.success());
    let refusal = |args: &[&str]| {
        let mut argv = vec!["faults", "add"];
        argv.extend_from_slice(args);
        let out = db.run(&argv);
        assert!(!out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stderr).trim().to_owned()
    };
    assert!(
        refusal(&["--tool", "no_such_tool", "--error", "timeout"])
            .starts_with("tollgate: --tool: no tool is named \"no_such_tool\"; the tools are: ")
    );
    assert_eq!(
        refusal(&["--tool", "list_invoices", "--error", "timeout"]),
        "tollgate: --tool: list_invoices is retired, and every call of it already answers \
         tool_retired (replacement search_invoices); rehearse on a registered tool"
    );
    let codes = refusal(&["--tool", "search_clients", "--error", "parse_error"]);
    assert!(
        codes.starts_with("tollgate: --error: \"parse_error\" cannot be rehearsed; give one of: "),
        "{codes}"
    );
    for accepted in [
        "rate_limited",
        "timeout",
        "backend_unavailable",
        "internal_error",
        "invoice_not_found",
    ] {
        assert!(codes.contains(accepted), "{codes}");
    }
    for refused in [
        "invalid_token",
        "client_revoked",
        "header_mismatch",
        "origin_not_allowed",
    ] {
        assert!(!codes.contains(refused), "{codes}");
    }
    assert_eq!(
        refusal(&[
            "--tool",
            "search_clients",
            "--error",
            "mcp_guardrail_violation"
        ]),
        "tollgate: --error mcp_guardrail_violation: search_clients has no guardrails; rehearse \
         it on a tool that has (e.g. create_invoice, issue_invoice, void_invoice)"
    );
    assert_eq!(
        refusal(&[
            "--tool",
            "search_clients",
            "--error",
            "timeout",
            "--probability",
            "0"
        ]),
        "tollgate: --probability: give a number above 0 and at most 1 (e.g. 0.25)"
    );
    assert_eq!(
        refusal(&[
            "--tool",
            "search_clients",
            "--error",
            "timeout",
            "--count",
            "0"
        ]),
        "tollgate: --count: give a whole number of calls, at least 1 (leave it out to fail every call)"
    );
    assert_eq!(
        refusal(&[
            "--tool",
            "search_clients",
            "--error",
            "invoice_not_found",
            "--retry-after",
            "5"
        ]),
        "tollgate: --retry-after: invoice_not_found is not retryable, so it reports no retry_after"
    );
    assert_eq!(
        refusal(&[
            "--tool",
            "search_clients",
            "--credential",
            "nope",
            "--error",
            "timeout"
        ]),
        "tollgate: no key has the id \"nope\"; run `tollgate key list` to see the ids"
    );

    // A fault added in test mode stops firing when the company goes live again.
    let key = db.create_key("k", "*", &[]);
    add_fault(&db, &["--tool", "search_clients", "--error", "timeout"]);
    let server = HttpServer::start(&db, &[]);
    let call = || {
        server
            .modern_tool_call(&key.token, "search_clients", &json!({}))
            .json()
    };
    assert_eq!(
        call()["result"]["_meta"]["dev.tollgate/error"]["code"],
        json!("timeout")
    );
    let out = db.run(&["company", "set", "--mode", "live"]);
    assert!(out.status.success());
    assert_eq!(call()["result"]["isError"], json!(false));
}
