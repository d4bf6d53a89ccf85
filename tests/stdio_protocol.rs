//! Protocol-level behaviour over stdio: both eras, every protocol error row of the
//! catalog that stdio can produce, and bad input that must not stop the session.
//!
//! Rows of the "Protocol errors" table of `shared/spec/ERRORS.md` not covered here, because
//! stdio cannot produce them:
//! - `-32602 unsupported_protocol_version` (handshake era): `initialize` never fails on a
//!   version (an unknown one is answered with the latest, per the spec); only the HTTP
//!   `MCP-Protocol-Version` header can carry an unsupported handshake version.
//! - `-32020 header_mismatch`: compares HTTP headers with the body.
//! - `-32021 missing_client_capability`: needs a tool that requires a client capability
//!   (the multi-round-trip tools), which the stdio transport does not serve.
//! - `-32603 internal_error`: an unexpected fault; nothing a client sends provokes one.

// Without the fixtures, the tests that need them are compiled out (`cargo test
// --features conformance-pack` runs them), and so may some of their helpers.
#![cfg_attr(not(feature = "conformance-pack"), allow(unused_imports, dead_code))]

use std::process::Stdio;

use serde_json::{Value, json};

use crate::util::{StdioServer, TestDb, assert_error, modern_meta};

/// The revisions of the handshake era, oldest first.
const HANDSHAKE_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The default stdio line cap (4 MiB).
const DEFAULT_MAX_LINE_BYTES: u64 = 4 * 1024 * 1024;

/// Starts `tollgate stdio` with the admin key and extra environment variables.
fn start_with_env(db: &TestDb, extra: &[&str], vars: &[(&str, &str)]) -> StdioServer {
    let mut args = vec!["stdio"];
    args.extend_from_slice(extra);
    let mut cmd = db.command(&args);
    if let Some(key) = &db.admin_key {
        cmd.env("TOLLGATE_TOKEN", key);
    }
    for (name, value) in vars {
        cmd.env(name, value);
    }
    StdioServer::spawn(cmd)
}

#[cfg(feature = "conformance-pack")]
/// A server on a fresh database with the conformance pack, already initialized at `version`.
fn initialized(db: &TestDb, version: &str) -> StdioServer {
    let mut server = StdioServer::start(db, &["--conformance-pack"]);
    let result = server.initialize(version);
    assert_eq!(result["protocolVersion"], json!(version), "{result}");
    server
}

/// A request whose `params` carry the 2026-07-28 `_meta`.
fn modern_params(mut params: Value) -> Value {
    params["_meta"] = modern_meta();
    params
}

/// Sends a raw line (a newline is appended) and returns the next response.
fn send_line(server: &mut StdioServer, line: &[u8]) -> Value {
    let mut bytes = line.to_vec();
    bytes.push(b'\n');
    server.send_raw(&bytes);
    server.recv_response()
}

/// The session still answers: a `ping` gets an empty result.
fn assert_still_serving(server: &mut StdioServer) {
    let pong = server.request("ping", json!({}));
    assert_eq!(pong["result"], json!({}), "ping after bad input: {pong}");
}

/// The `data.details.reason` of an error response.
fn reason(response: &Value) -> &Value {
    &response["error"]["data"]["details"]["reason"]
}

// ---- Handshake era ----------------------------------------------------------------------

#[test]
fn initialize_echoes_each_handshake_version() {
    let db = TestDb::new();
    for version in HANDSHAKE_VERSIONS {
        let mut server = StdioServer::start(&db, &[]);
        let result = server.initialize(version);
        assert_eq!(result["protocolVersion"], json!(version), "{result}");
        assert!(result["capabilities"].is_object(), "{result}");
    }
}

#[test]
fn initialize_with_an_unknown_version_gets_the_latest_handshake_version() {
    let db = TestDb::new();
    for requested in ["1900-01-01", "2026-07-28", "not-a-date"] {
        let mut server = StdioServer::start(&db, &[]);
        let result = server.initialize(requested);
        assert_eq!(
            result["protocolVersion"],
            json!("2025-11-25"),
            "{requested}: {result}"
        );
    }
}

#[test]
fn initialize_declares_capabilities_and_server_info() {
    let db = TestDb::new();
    let mut server = StdioServer::start(&db, &[]);
    let result = server.initialize("2025-11-25");
    let caps = &result["capabilities"];
    assert_eq!(caps["tools"], json!({"listChanged": false}), "{result}");
    // No resource of the built-in server changes, so there is nothing to subscribe to.
    assert_eq!(caps["resources"], json!({"listChanged": false}), "{result}");
    assert_eq!(caps["prompts"], json!({"listChanged": false}), "{result}");
    assert_eq!(caps["completions"], json!({}), "{result}");
    // No built-in tool logs, so there is no log level to set.
    assert_eq!(caps.get("logging"), None, "{result}");
    assert_eq!(result["serverInfo"]["name"], json!("tollgate"), "{result}");
    assert_eq!(
        result["serverInfo"]["version"],
        json!(env!("CARGO_PKG_VERSION")),
        "{result}"
    );
}

#[cfg(feature = "conformance-pack")]
#[test]
fn a_second_initialize_is_invalid_request() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-06-18");
    let again = server.request(
        "initialize",
        json!({"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
    );
    assert_error(&again, -32600, "invalid_request", 400, 1002, false);
    assert_eq!(reason(&again), &json!("already_initialized"), "{again}");
    // The first negotiation stands: a batch is still refused as on 2025-06-18.
    server.send(&json!([{"jsonrpc": "2.0", "id": 50, "method": "ping"}]));
    let batch = server.recv_response();
    assert_error(&batch, -32600, "invalid_request", 400, 1002, false);
    assert_eq!(reason(&batch), &json!("batch_not_allowed"), "{batch}");
    assert_still_serving(&mut server);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn a_request_with_neither_handshake_nor_meta_is_invalid_params() {
    let db = TestDb::new();
    let mut server = StdioServer::start(&db, &["--conformance-pack"]);
    let response = server.request("tools/list", json!({}));
    assert_error(&response, -32602, "invalid_params", 400, 1004, false);
    assert_eq!(
        response["error"]["data"]["param"],
        json!("_meta.io.modelcontextprotocol/protocolVersion"),
        "{response}"
    );
    assert_eq!(reason(&response), &json!("no_session"), "{response}");
    assert_still_serving(&mut server);
}

// ---- 2026-07-28 era ---------------------------------------------------------------------

#[test]
fn server_discover_describes_the_server() {
    let db = TestDb::new();
    let mut server = StdioServer::start(&db, &[]);
    let response = server.request("server/discover", json!({"_meta": modern_meta()}));
    let result = &response["result"];
    assert_eq!(result["resultType"], json!("complete"), "{response}");
    assert_eq!(
        result["supportedVersions"],
        json!([
            "2026-07-28",
            "2025-11-25",
            "2025-06-18",
            "2025-03-26",
            "2024-11-05"
        ]),
        "{response}"
    );
    assert_eq!(
        result["capabilities"]["tools"],
        json!({"listChanged": false}),
        "{response}"
    );
    assert_eq!(
        result["capabilities"]["resources"],
        json!({"listChanged": false}),
        "{response}"
    );
    assert_eq!(
        result["capabilities"]["prompts"],
        json!({"listChanged": false}),
        "{response}"
    );
    let info = &result["_meta"]["io.modelcontextprotocol/serverInfo"];
    assert_eq!(info["name"], json!("tollgate"), "{response}");
    assert_eq!(
        info["version"],
        json!(env!("CARGO_PKG_VERSION")),
        "{response}"
    );
    assert!(
        result["ttlMs"].is_u64(),
        "ttlMs must be an integer >= 0: {response}"
    );
    assert_eq!(result["cacheScope"], json!("public"), "{response}");
}

#[cfg(feature = "conformance-pack")]
#[test]
fn modern_tools_list_carries_result_type_and_cache_hints() {
    let db = TestDb::new();
    let mut server = StdioServer::start(&db, &["--conformance-pack"]);
    let response = server.request("tools/list", json!({"_meta": modern_meta()}));
    let result = &response["result"];
    assert_eq!(result["resultType"], json!("complete"), "{response}");
    assert!(
        result["ttlMs"].is_u64(),
        "ttlMs must be an integer >= 0: {response}"
    );
    assert_eq!(result["cacheScope"], json!("private"), "{response}");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        json!("tollgate")
    );
    let names: Vec<&str> = result["tools"]
        .as_array()
        .expect("tools array")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"test_simple_text"), "{names:?}");
}

#[cfg(feature = "conformance-pack")]
#[test]
fn modern_tools_call_result_carries_result_type() {
    let db = TestDb::new();
    let mut server = StdioServer::start(&db, &["--conformance-pack"]);
    let response = server.request(
        "tools/call",
        modern_params(json!({"name": "test_simple_text", "arguments": {}})),
    );
    let result = &response["result"];
    assert_eq!(result["resultType"], json!("complete"), "{response}");
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": "This is a simple text response for testing."}]),
        "{response}"
    );
    assert!(
        result.get("ttlMs").is_none(),
        "tools/call is not cacheable: {response}"
    );
}

#[cfg(feature = "conformance-pack")]
#[test]
fn modern_requests_are_served_statelessly_beside_a_handshake_session() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-06-18");
    let legacy = server.request("tools/list", json!({}));
    assert!(legacy["result"].get("resultType").is_none(), "{legacy}");
    let modern = server.request("tools/list", json!({"_meta": modern_meta()}));
    assert_eq!(
        modern["result"]["resultType"],
        json!("complete"),
        "{modern}"
    );
    assert_eq!(legacy["result"]["tools"], modern["result"]["tools"]);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn modern_request_without_client_capabilities_is_invalid_params() {
    let db = TestDb::new();
    let mut server = StdioServer::start(&db, &["--conformance-pack"]);
    let response = server.request(
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
    );
    assert_error(&response, -32602, "invalid_params", 400, 1004, false);
    assert_eq!(
        response["error"]["data"]["param"],
        json!("_meta.io.modelcontextprotocol/clientCapabilities"),
        "{response}"
    );
}

#[cfg(feature = "conformance-pack")]
#[test]
fn modern_request_with_an_unsupported_version_is_32022() {
    let db = TestDb::new();
    let mut server = StdioServer::start(&db, &["--conformance-pack"]);
    let mut meta = modern_meta();
    meta["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let response = server.request("tools/list", json!({"_meta": meta}));
    assert_error(
        &response,
        -32022,
        "unsupported_protocol_version",
        400,
        1008,
        false,
    );
    assert_eq!(
        response["error"]["data"]["supported"],
        json!(["2026-07-28"]),
        "{response}"
    );
    assert_eq!(
        response["error"]["data"]["requested"],
        json!("2099-01-01"),
        "{response}"
    );
}

#[cfg(feature = "conformance-pack")]
#[test]
fn methods_removed_in_2026_are_method_not_found() {
    let db = TestDb::new();
    let mut server = StdioServer::start(&db, &["--conformance-pack"]);
    let removed = [
        ("ping", json!({})),
        (
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
        ),
        ("logging/setLevel", json!({"level": "info"})),
        (
            "resources/subscribe",
            json!({"uri": "test://watched-resource"}),
        ),
        (
            "resources/unsubscribe",
            json!({"uri": "test://watched-resource"}),
        ),
    ];
    for (method, params) in removed {
        let response = server.request(method, modern_params(params));
        assert_error(&response, -32601, "method_not_found", 404, 1003, false);
        assert_eq!(
            response["error"]["data"]["details"]["method"],
            json!(method),
            "{response}"
        );
    }
    // `initialize` with the modern `_meta` did not start a handshake session.
    let plain = server.request("tools/list", json!({}));
    assert_error(&plain, -32602, "invalid_params", 400, 1004, false);
}

// ---- Protocol error rows of ERRORS.md -----------------------------------------------------

#[cfg(feature = "conformance-pack")]
#[test]
fn parse_error_row() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    let response = send_line(
        &mut server,
        br#"{"jsonrpc": "2.0", "id": 1, "method": "ping""#,
    );
    assert_error(&response, -32700, "parse_error", 400, 1001, false);
    assert_eq!(response["id"], Value::Null, "{response}");
    assert_still_serving(&mut server);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn invalid_request_row() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    let wrong_version = send_line(&mut server, br#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#);
    assert_error(&wrong_version, -32600, "invalid_request", 400, 1002, false);
    assert_eq!(
        wrong_version["id"],
        json!(7),
        "the id is echoed when it can be read: {wrong_version}"
    );
    assert_eq!(reason(&wrong_version), &json!("jsonrpc_version"));
    let no_method = send_line(&mut server, br#"{"jsonrpc":"2.0","id":8}"#);
    assert_error(&no_method, -32600, "invalid_request", 400, 1002, false);
    assert_eq!(no_method["id"], json!(8), "{no_method}");
    assert_eq!(reason(&no_method), &json!("no_method"));
    let null_id = send_line(
        &mut server,
        br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
    );
    assert_error(&null_id, -32600, "invalid_request", 400, 1002, false);
    assert_eq!(null_id["id"], Value::Null, "{null_id}");
    assert_eq!(reason(&null_id), &json!("id_type"));
    assert_still_serving(&mut server);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn method_not_found_row() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    let response = server.request("tools/frobnicate", json!({}));
    assert_error(&response, -32601, "method_not_found", 404, 1003, false);
    assert_eq!(
        response["error"]["data"]["details"]["method"],
        json!("tools/frobnicate")
    );
    assert_still_serving(&mut server);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn invalid_params_row_for_a_wrong_param_type() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    let name_not_string = server.request("tools/call", json!({"name": 5, "arguments": {}}));
    assert_error(&name_not_string, -32602, "invalid_params", 400, 1004, false);
    assert_eq!(
        name_not_string["error"]["data"]["param"],
        json!("name"),
        "{name_not_string}"
    );
    let arguments_not_object = server.request(
        "tools/call",
        json!({"name": "test_simple_text", "arguments": [1]}),
    );
    assert_error(
        &arguments_not_object,
        -32602,
        "invalid_params",
        400,
        1004,
        false,
    );
    assert_eq!(
        arguments_not_object["error"]["data"]["param"],
        json!("arguments")
    );
    let params_not_object = send_line(
        &mut server,
        br#"{"jsonrpc":"2.0","id":"p","method":"tools/list","params":[1]}"#,
    );
    assert_error(
        &params_not_object,
        -32602,
        "invalid_params",
        400,
        1004,
        false,
    );
    assert_eq!(params_not_object["id"], json!("p"), "{params_not_object}");
    assert_eq!(params_not_object["error"]["data"]["param"], json!("params"));
    assert_still_serving(&mut server);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn invalid_params_row_for_a_bad_cursor() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    for cursor in [json!("not-a-cursor"), json!(12)] {
        let response = server.request("tools/list", json!({"cursor": cursor}));
        assert_error(&response, -32602, "invalid_params", 400, 1004, false);
        assert_eq!(
            response["error"]["data"]["param"],
            json!("cursor"),
            "{response}"
        );
    }
    assert_still_serving(&mut server);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn unknown_tool_row() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    let response = server.call_tool("no_such_tool", json!({}));
    assert_error(&response, -32602, "unknown_tool", 404, 1005, false);
    assert_eq!(
        response["error"]["data"]["details"]["name"],
        json!("no_such_tool"),
        "{response}"
    );
}

#[cfg(feature = "conformance-pack")]
#[test]
fn tool_retired_row() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    let response = server.call_tool("list_invoices", json!({}));
    assert_error(&response, -32602, "tool_retired", 410, 1006, false);
    assert_eq!(
        response["error"]["data"]["replacement"],
        json!("search_invoices"),
        "{response}"
    );
}

#[cfg(feature = "conformance-pack")]
#[test]
fn resource_not_found_row() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    let response = server.request("resources/read", json!({"uri": "test://no-such-resource"}));
    assert_error(&response, -32602, "resource_not_found", 404, 1007, false);
    assert_eq!(
        response["error"]["data"]["details"]["uri"],
        json!("test://no-such-resource"),
        "{response}"
    );
    assert!(
        response.get("result").is_none(),
        "no empty contents: {response}"
    );
}

#[cfg(feature = "conformance-pack")]
#[test]
fn resource_not_found_row_on_the_modern_era() {
    let db = TestDb::new();
    let mut server = StdioServer::start(&db, &["--conformance-pack"]);
    let response = server.request(
        "resources/read",
        modern_params(json!({"uri": "test://no-such-resource"})),
    );
    assert_error(&response, -32602, "resource_not_found", 404, 1007, false);
    assert_eq!(
        response["error"]["data"]["details"]["uri"],
        json!("test://no-such-resource"),
        "{response}"
    );
}

#[cfg(feature = "conformance-pack")]
/// `-32603 backend_unavailable`: the database stays locked by another writer past the
/// server's busy timeout. The call is retryable: once the lock is released it succeeds.
#[test]
fn backend_unavailable_row_when_the_database_stays_locked() {
    let db = TestDb::new();
    let mut server = start_with_env(
        &db,
        &["--conformance-pack"],
        &[("TOLLGATE_STORE_BUSY_TIMEOUT_MS", "200")],
    );
    server.initialize("2025-11-25");
    let ok = server.call_tool("test_simple_text", json!({}));
    assert_eq!(ok["result"]["isError"], json!(false), "{ok}");

    let lock = db.hold_write_lock();
    let locked = server.call_tool("test_simple_text", json!({}));
    assert_error(&locked, -32603, "backend_unavailable", 503, 4002, true);
    lock.release();

    let again = server.call_tool("test_simple_text", json!({}));
    assert_eq!(again["result"]["isError"], json!(false), "{again}");
}

// ---- Batches ------------------------------------------------------------------------------

#[cfg(feature = "conformance-pack")]
#[test]
fn a_batch_on_2025_11_25_is_invalid_request() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    server.send(&json!([
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    ]));
    let response = server.recv_response();
    assert!(response.is_object(), "one error, not an array: {response}");
    assert_error(&response, -32600, "invalid_request", 400, 1002, false);
    assert_eq!(response["id"], Value::Null, "{response}");
    assert_eq!(reason(&response), &json!("batch_not_allowed"));
    assert_still_serving(&mut server);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn a_batch_on_2025_03_26_gets_one_response_per_request() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-03-26");
    server.send(&json!([
        {"jsonrpc": "2.0", "id": 101, "method": "ping"},
        {"jsonrpc": "2.0", "id": "list", "method": "tools/list"},
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}}
    ]));
    let response = server.recv_response();
    let items = response
        .as_array()
        .unwrap_or_else(|| panic!("an array of responses: {response}"));
    assert_eq!(
        items.len(),
        2,
        "the notification gets no response: {response}"
    );
    let ping = items
        .iter()
        .find(|r| r["id"] == json!(101))
        .expect("ping response");
    assert_eq!(ping["result"], json!({}), "{response}");
    let list = items
        .iter()
        .find(|r| r["id"] == json!("list"))
        .expect("tools/list response");
    assert!(list["result"]["tools"].is_array(), "{response}");
    assert_still_serving(&mut server);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn initialize_inside_a_batch_is_invalid_request() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-03-26");
    server.send(&json!([
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    ]));
    let response = server.recv_response();
    let items = response
        .as_array()
        .unwrap_or_else(|| panic!("an array of responses: {response}"));
    assert_eq!(items.len(), 2, "{response}");
    let init = items
        .iter()
        .find(|r| r["id"] == json!(1))
        .expect("initialize response");
    assert_error(init, -32600, "invalid_request", 400, 1002, false);
    assert_eq!(reason(init), &json!("initialize_in_batch"));
    let ping = items
        .iter()
        .find(|r| r["id"] == json!(2))
        .expect("ping response");
    assert_eq!(ping["result"], json!({}), "{response}");
}

// ---- Bad input keeps the process serving --------------------------------------------------

#[cfg(feature = "conformance-pack")]
#[test]
fn malformed_json_is_a_parse_error_and_the_session_goes_on() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    for line in [&b"{not json"[..], b"{\"jsonrpc\":\"2.0\",", b"}", b"nul"] {
        let response = send_line(&mut server, line);
        assert_error(&response, -32700, "parse_error", 400, 1001, false);
        assert_eq!(response["id"], Value::Null, "{response}");
    }
    assert_still_serving(&mut server);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn a_non_object_request_is_invalid_request() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    for line in [&b"42"[..], b"\"x\"", b"null", b"true", b"[]"] {
        let response = send_line(&mut server, line);
        assert_error(&response, -32600, "invalid_request", 400, 1002, false);
        assert_eq!(response["id"], Value::Null, "{response}");
    }
    assert_still_serving(&mut server);
}

#[test]
fn a_line_over_the_cap_is_invalid_request() {
    let db = TestDb::new();
    let mut server = start_with_env(&db, &[], &[("TOLLGATE_STDIO_MAX_LINE_BYTES", "4096")]);
    server.initialize("2025-11-25");
    let mut line = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":""#.to_vec();
    line.resize(10_000 - 3, b'x');
    line.extend_from_slice(b"\"}}");
    assert_eq!(line.len(), 10_000);
    let response = send_line(&mut server, &line);
    assert_error(&response, -32600, "invalid_request", 400, 1002, false);
    assert_eq!(response["id"], Value::Null, "{response}");
    assert_eq!(reason(&response), &json!("message_too_large"));
    assert_eq!(
        response["error"]["data"]["details"]["max_bytes"],
        json!(4096),
        "{response}"
    );
    assert_still_serving(&mut server);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn invalid_utf8_is_a_parse_error() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    let response = send_line(
        &mut server,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"\xff\xfe\xc3\"}}",
    );
    assert_error(&response, -32700, "parse_error", 400, 1001, false);
    assert_eq!(response["id"], Value::Null, "{response}");
    assert_still_serving(&mut server);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn deep_nesting_is_a_parse_error() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    let deep = "[".repeat(100_000);
    let response = send_line(&mut server, deep.as_bytes());
    assert_error(&response, -32700, "parse_error", 400, 1001, false);
    assert_eq!(response["id"], Value::Null, "{response}");
    let closed = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let response = send_line(&mut server, closed.as_bytes());
    assert_error(&response, -32700, "parse_error", 400, 1001, false);
    assert_still_serving(&mut server);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn a_50_mb_line_is_invalid_request_and_the_session_goes_on() {
    const SIZE: usize = 50 * 1024 * 1024;
    const CHUNK: usize = 1024 * 1024;
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    // The harness drains stdout on its own thread while this one writes, so neither side
    // can block the other; the server discards the line as it streams in.
    server.send_raw(br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":""#);
    let chunk = vec![b'x'; CHUNK];
    for _ in 0..SIZE / CHUNK {
        server.send_raw(&chunk);
    }
    server.send_raw(b"\"}}\n");
    let response = server.recv_response();
    assert_error(&response, -32600, "invalid_request", 400, 1002, false);
    assert_eq!(response["id"], Value::Null, "{response}");
    assert_eq!(reason(&response), &json!("message_too_large"));
    assert_eq!(
        response["error"]["data"]["details"]["max_bytes"],
        json!(DEFAULT_MAX_LINE_BYTES)
    );
    assert_still_serving(&mut server);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn an_unknown_method_is_method_not_found_and_the_session_goes_on() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    for method in [
        "nope",
        "tools/",
        "server/discover",
        "notifications/initialized/x",
    ] {
        let response = server.request(method, json!({}));
        assert_error(&response, -32601, "method_not_found", 404, 1003, false);
    }
    assert_still_serving(&mut server);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn wrong_param_types_are_invalid_params_and_the_session_goes_on() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    let cases = [
        ("tools/call", json!({"name": 5}), "name"),
        (
            "tools/call",
            json!({"name": "test_simple_text", "arguments": "x"}),
            "arguments",
        ),
        ("resources/read", json!({"uri": 7}), "uri"),
        (
            "prompts/get",
            json!({"name": ["test_simple_prompt"]}),
            "name",
        ),
        ("logging/setLevel", json!({"level": "loud"}), "level"),
        ("tools/list", json!({"cursor": {}}), "cursor"),
    ];
    for (method, params, param) in cases {
        let response = server.request(method, params);
        assert_error(&response, -32602, "invalid_params", 400, 1004, false);
        assert_eq!(
            response["error"]["data"]["param"],
            json!(param),
            "{method}: {response}"
        );
    }
    assert_still_serving(&mut server);
}

// ---- Process life -------------------------------------------------------------------------

#[cfg(feature = "conformance-pack")]
#[test]
fn eof_on_stdin_ends_the_process_with_exit_code_0() {
    let db = TestDb::new();
    let mut server = initialized(&db, "2025-11-25");
    assert_still_serving(&mut server);
    let status = server.close();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[test]
fn eof_before_any_message_ends_the_process_with_exit_code_0() {
    let db = TestDb::new();
    let server = StdioServer::start(&db, &[]);
    let status = server.close();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[cfg(feature = "conformance-pack")]
#[test]
fn stdout_carries_only_json_rpc_messages() {
    let db = TestDb::new();
    // Verbose logging: every log line must go to stderr, never to stdout.
    let mut server = StdioServer::start(&db, &["--conformance-pack", "--log-level", "trace"]);
    server.initialize("2025-11-25");
    server.send_raw(b"garbage\n");
    server.send_raw(b"\n   \n");
    server.send(&json!({"jsonrpc": "2.0", "id": "a", "method": "tools/list"}));
    server.send(&json!({"jsonrpc": "2.0", "id": "b", "method": "tools/call",
                        "params": {"name": "test_tool_with_logging", "arguments": {}}}));
    server.send(
        &json!({"jsonrpc": "2.0", "id": "c", "method": "resources/read",
                        "params": {"uri": "test://static-text"}}),
    );
    server.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "zz"}}));
    server.send(&json!({"jsonrpc": "2.0", "id": "d", "method": "nope"}));
    let mut pending = vec![Value::Null, json!("a"), json!("b"), json!("c"), json!("d")];
    while !pending.is_empty() {
        // `recv` fails the test on any line that is not JSON.
        let message = server.recv();
        assert_eq!(message["jsonrpc"], json!("2.0"), "not JSON-RPC: {message}");
        if message.get("method").is_some() {
            assert!(
                message.get("id").is_none(),
                "the server sends no requests: {message}"
            );
            continue;
        }
        let is_answer = message.get("result").is_some() != message.get("error").is_some();
        assert!(
            is_answer,
            "a response has exactly one of result and error: {message}"
        );
        let at = pending.iter().position(|id| *id == message["id"]);
        let at = at.unwrap_or_else(|| panic!("unexpected response {message}"));
        pending.remove(at);
    }
    // Blank lines got no answer: the next message is the answer to this ping.
    server.send(&json!({"jsonrpc": "2.0", "id": "last", "method": "ping"}));
    let pong = server.recv();
    assert_eq!(pong, json!({"jsonrpc": "2.0", "id": "last", "result": {}}));
    assert_eq!(server.close().code(), Some(0));
}

// ---- The database -------------------------------------------------------------------------

fn user_version(db: &TestDb) -> u32 {
    if db.is_postgres() {
        return u32::try_from(db.sql_i64("SELECT version FROM tollgate_schema")).expect("u32");
    }
    let conn = rusqlite::Connection::open(&db.path).expect("open the database");
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
        .expect("user_version")
}

#[test]
fn a_database_created_by_this_version_opens() {
    let db = TestDb::new();
    let out = db.run(&["healthcheck"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version = user_version(&db);
    assert!(version >= 1, "init writes a schema version");
    assert!(stdout.starts_with("ok: "), "{stdout}");
    assert!(
        stdout.contains(&format!("(schema version {version})")),
        "{stdout}"
    );
    let mut server = StdioServer::start(&db, &[]);
    server.initialize("2025-11-25");
    assert_eq!(server.close().code(), Some(0));
}

#[test]
fn a_newer_database_is_refused_with_exit_code_2() {
    let db = TestDb::new();
    if db.is_postgres() {
        db.sql("UPDATE tollgate_schema SET version = 99");
    } else {
        let conn = rusqlite::Connection::open(&db.path).expect("open the database");
        conn.pragma_update(None, "user_version", 99)
            .expect("bump user_version");
    }
    let health = db.run(&["healthcheck"]);
    let stdio = db
        .command(&["stdio"])
        .stdin(Stdio::null())
        .output()
        .expect("run tollgate stdio");
    for (what, out) in [("healthcheck", &health), ("stdio", &stdio)] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        assert!(
            stderr.contains("newer"),
            "{what} must say the database is newer: {stderr}"
        );
        assert!(
            stderr.contains("99"),
            "{what} must name the version found: {stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "{what} wrote to stdout: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    assert_eq!(
        user_version(&db),
        99,
        "a refused database is left untouched"
    );
}

// ---- The catalog ------------------------------------------------------------------------------

/// JSON-RPC rows of `shared/spec/ERRORS.md`: (JSON-RPC code, code, http, error_code, retryable).
const JSONRPC_ROWS: &[(i64, &str, u64, u64, bool)] = &[
    // Protocol errors.
    (-32700, "parse_error", 400, 1001, false),
    (-32600, "invalid_request", 400, 1002, false),
    (-32601, "method_not_found", 404, 1003, false),
    (-32602, "invalid_params", 400, 1004, false),
    (-32602, "unknown_tool", 404, 1005, false),
    (-32602, "tool_retired", 410, 1006, false),
    (-32602, "resource_not_found", 404, 1007, false),
    (-32602, "unsupported_protocol_version", 400, 1008, false),
    (-32020, "header_mismatch", 400, 1009, false),
    (-32021, "missing_client_capability", 400, 1010, false),
    (-32022, "unsupported_protocol_version", 400, 1008, false),
    (-32603, "internal_error", 500, 4000, false),
    (-32603, "backend_unavailable", 503, 4002, true),
    // Guard errors.
    (-32001, "invalid_token", 401, 1101, false),
    (-32002, "client_revoked", 403, 1102, false),
    (-32003, "invalid_token_type", 403, 1103, false),
    (-32004, "plan_upgrade_required", 403, 1104, false),
    (-32004, "plan_limit_exceeded", 403, 1107, false),
    (-32005, "insufficient_scope", 403, 1105, false),
    (-32006, "rate_limited", 429, 3001, true),
    (-32007, "idempotency_key_required", 400, 2002, false),
    (-32007, "idempotency_key_invalid", 400, 2003, false),
    (-32007, "idempotency_key_reused", 409, 3201, false),
    (-32007, "idempotency_key_in_use", 409, 3202, true),
    (-32008, "mcp_guardrail_violation", 422, 3301, false),
];

/// Tool execution rows of `ERRORS.md`: (code, http, error_code, retryable; `None` = "per backend").
const TOOL_ROWS: &[(&str, u64, u64, Option<bool>)] = &[
    ("validation_error", 400, 2001, Some(false)),
    ("missing_required_field", 400, 2002, Some(false)),
    ("invalid_format", 400, 2003, Some(false)),
    ("timeout", 504, 3002, Some(true)),
    ("adapter_error", 502, 4001, None),
    ("backend_unavailable", 503, 4002, Some(true)),
    ("not_implemented", 501, 5001, Some(false)),
];

#[test]
fn errors_json_lists_every_code_of_the_contract() {
    let db = TestDb::new();
    let catalog = db.run_json(&["errors", "--format", "json"]);
    let entries = catalog.as_array().expect("a JSON array");
    for &(rpc, code, http, error_code, retryable) in JSONRPC_ROWS {
        let entry = entries
            .iter()
            .find(|e| {
                e["channel"] == json!("jsonrpc")
                    && e["jsonrpc_code"] == json!(rpc)
                    && e["code"] == json!(code)
            })
            .unwrap_or_else(|| {
                panic!("{rpc} {code} is missing from `tollgate errors --format json`")
            });
        assert_eq!(entry["http_status"], json!(http), "{entry}");
        assert_eq!(entry["error_code"], json!(error_code), "{entry}");
        assert_eq!(entry["retryable"], json!(retryable), "{entry}");
    }
    for &(code, http, error_code, retryable) in TOOL_ROWS {
        let entry = entries
            .iter()
            .find(|e| e["channel"] == json!("tool_result") && e["code"] == json!(code))
            .unwrap_or_else(|| {
                panic!("tool error {code} is missing from `tollgate errors --format json`")
            });
        assert_eq!(entry["jsonrpc_code"], Value::Null, "{entry}");
        assert_eq!(entry["http_status"], json!(http), "{entry}");
        assert_eq!(entry["error_code"], json!(error_code), "{entry}");
        if let Some(retryable) = retryable {
            assert_eq!(entry["retryable"], json!(retryable), "{entry}");
        } else {
            assert!(entry["retryable"].is_boolean(), "{entry}");
        }
    }
    for entry in entries {
        for locale in ["en", "es"] {
            let hint = entry["hint"][locale].as_str().unwrap_or_default();
            assert!(!hint.is_empty(), "no {locale} hint: {entry}");
        }
        // The entity families of ERRORS.md keep their identities whatever the entity.
        if entry["channel"] == json!("tool_result") {
            let code = entry["code"].as_str().unwrap_or_default();
            if code.ends_with("_not_found") {
                assert_eq!(
                    (&entry["http_status"], &entry["error_code"]),
                    (&json!(404), &json!(3101)),
                    "{entry}"
                );
            }
            if code.ends_with("_already_exists") {
                assert_eq!(
                    (&entry["http_status"], &entry["error_code"]),
                    (&json!(409), &json!(3102)),
                    "{entry}"
                );
            }
        }
    }
}

// ---- Requests that arrive together ------------------------------------------------------

#[cfg(feature = "conformance-pack")]
#[test]
fn requests_written_together_are_all_answered_while_one_of_them_waits_for_the_client() {
    let db = TestDb::new();
    let mut server = StdioServer::start(&db, &["--conformance-pack"]);
    server.send(
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "tests", "version": "0"}}}),
    );
    assert!(server.recv_response()["result"].is_object());
    server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // One write: a call that asks the client and waits for the answer, then calls that
    // need nothing from it. They reach the server in one read.
    let call = |id: u64, name: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": name, "arguments": arguments}})
        .to_string()
    };
    let mut lines = vec![call(100, "test_elicitation", json!({"message": "Who?"}))];
    lines.extend((1..=10).map(|id| call(id, "test_simple_text", json!({}))));
    lines.push(json!({"jsonrpc": "2.0", "id": 50, "method": "ping"}).to_string());
    lines.push(call(60, "no_such_tool", json!({})));
    server.send_raw(format!("{}\n", lines.join("\n")).as_bytes());
    // Everything else is answered while the elicitation waits (were it run first, in
    // line, nothing would be: the client only answers below).
    let mut answered = std::collections::BTreeMap::new();
    let mut question = None;
    while answered.len() < 12 || question.is_none() {
        let message = server.recv();
        match message["method"].as_str() {
            Some("elicitation/create") => question = Some(message),
            Some(_) => {}
            None => {
                let id = message["id"].as_u64().expect("numeric id");
                assert!(
                    answered.insert(id, message).is_none(),
                    "answered twice: {id}"
                );
            }
        }
    }
    assert!(!answered.contains_key(&100));
    for id in 1..=10 {
        assert_eq!(
            answered[&id]["result"]["content"][0]["text"],
            json!("This is a simple text response for testing."),
            "{}",
            answered[&id]
        );
    }
    assert_eq!(answered[&50]["result"], json!({}));
    assert_error(&answered[&60], -32602, "unknown_tool", 404, 1005, false);
    let question = question.expect("asked");
    server.send(&json!({"jsonrpc": "2.0", "id": question["id"], "result": {
        "action": "accept", "content": {"username": "ada"}}}));
    let response = server.recv_response();
    assert_eq!(response["id"], json!(100), "{response}");
    assert_eq!(
        response["result"]["content"][0]["text"],
        json!(r#"User response: action=accept, content={"username":"ada"}"#),
        "{response}"
    );
}
