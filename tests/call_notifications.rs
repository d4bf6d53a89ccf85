//! A `tools/call` (or any other request) without an id, on stdio and on Streamable HTTP:
//! JSON-RPC 2.0 gives a notification no answer, and MCP defines no `tools/call`
//! notification, so such a message runs nothing — no tool, no rate charge, no audit row —
//! and is answered with nothing (no stdout line; `202 Accepted` with an empty body, as for
//! every other notification). Only the `notifications/*` methods run in that form.

use serde_json::{Value, json};

use crate::util::{HttpResponse, HttpServer, TestDb, merge_modern_meta, stdio_transcript};

const LEGACY: &str = "2025-11-25";
const GHOST: &str = "Ghost Notification SL";

/// A `tools/call` of `create_client` (a write the database and the rate counters keep)
/// without an id.
fn ghost_call_notification() -> Value {
    json!({"jsonrpc": "2.0", "method": "tools/call",
           "params": {"name": "create_client", "arguments": {"name": GHOST}}})
}

/// The sum of every rate counter in the database.
fn total_charged(db: &TestDb) -> i64 {
    db.sql_i64("SELECT COALESCE(SUM(count), 0) FROM rate_counters")
}

/// How many clients carry the name of the notification's client.
fn ghosts(db: &TestDb) -> i64 {
    db.sql_i64(&format!(
        "SELECT COUNT(*) FROM clients WHERE name = '{GHOST}'"
    ))
}

/// Runs `tollgate stdio` with the admin key on `lines` (stdin closed after them) and
/// returns every line it wrote to stdout, once it has exited.
fn stdio_session(db: &TestDb, lines: &[Value]) -> Vec<Value> {
    let mut cmd = db.command(&["stdio"]);
    cmd.env(
        "TOLLGATE_TOKEN",
        db.admin_key.as_deref().expect("admin key"),
    );
    let out = stdio_transcript(cmd, lines);
    assert!(
        out.status.success(),
        "{}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

fn initialize(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize",
           "params": {"protocolVersion": LEGACY, "capabilities": {},
                      "clientInfo": {"name": "tests", "version": "0"}}})
}

fn initialized() -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
}

/// A `search_clients` request for the notification's client.
fn search_ghost(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "search_clients", "arguments": {"query": GHOST}}})
}

/// How many calls each rate bucket of a charged response has counted, the response's own
/// call included (`limit - remaining` of each bucket in its `_meta`).
fn used(response: &Value) -> Vec<(String, u64)> {
    response["result"]["_meta"]["dev.tollgate/ratelimit"]["buckets"]
        .as_array()
        .unwrap_or_else(|| panic!("the budget in _meta: {response}"))
        .iter()
        .map(|b| {
            let count = |field: &str| b[field].as_u64().expect("a count");
            let name = b["bucket"].as_str().expect("a bucket name");
            (name.to_owned(), count("limit") - count("remaining"))
        })
        .collect()
}

/// Asserts that the search `response` is the first call its buckets counted.
fn assert_first_charge(response: &Value) {
    let used = used(response);
    let names: Vec<&str> = used.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["read", "plan"], "{response}");
    assert!(used.iter().all(|(_, n)| *n == 1), "{used:?}: {response}");
}

/// The clients a successful `search_clients` result found.
fn found(response: &Value) -> &Vec<Value> {
    assert_ne!(response["result"]["isError"], json!(true), "{response}");
    response["result"]["structuredContent"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("a page of clients: {response}"))
}

#[test]
fn a_tools_call_without_an_id_on_stdio_runs_nothing_and_gets_no_line() {
    let db = TestDb::new();
    let written = stdio_session(
        &db,
        &[initialize(1), initialized(), ghost_call_notification()],
    );
    let ids: Vec<&Value> = written.iter().map(|line| &line["id"]).collect();
    assert_eq!(ids, [&json!(1)], "only initialize is answered: {written:?}");
    assert_eq!(ghosts(&db), 0, "the tool did not run");
    assert_eq!(total_charged(&db), 0, "nothing was charged");
    let audit = db.run_json(&["audit", "--json"]);
    assert_eq!(audit, json!([]), "nothing reached the audit log");

    // A request with an id, in the next session, finds no such client and is charged.
    let written = stdio_session(&db, &[initialize(1), initialized(), search_ghost(2)]);
    let search = written
        .iter()
        .find(|line| line["id"] == json!(2))
        .unwrap_or_else(|| panic!("the search is answered: {written:?}"));
    assert_eq!(found(search), &Vec::<Value>::new(), "{search}");
    assert_first_charge(search);
}

/// A POST on the handshake-era session `session` with the admin key.
fn session_post(server: &HttpServer, db: &TestDb, session: &str, body: &Value) -> HttpResponse {
    let auth = format!("Bearer {}", db.admin_key.as_deref().expect("admin key"));
    server.post_mcp(
        &[
            ("Authorization", auth.as_str()),
            ("Mcp-Session-Id", session),
            ("MCP-Protocol-Version", LEGACY),
        ],
        body,
    )
}

#[test]
fn a_tools_call_without_an_id_on_http_is_202_with_no_body_and_runs_nothing() {
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    let token = db.admin_key.as_deref().expect("admin key");
    let session = server.open_session(LEGACY, token);

    let legacy = session_post(&server, &db, &session, &ghost_call_notification());
    assert_eq!(
        legacy.status,
        202,
        "{}",
        String::from_utf8_lossy(&legacy.body)
    );
    assert!(legacy.body.is_empty(), "{:?}", legacy.body);

    let mut modern = ghost_call_notification();
    merge_modern_meta(&mut modern["params"]);
    let auth = format!("Bearer {token}");
    let stateless = server.post_mcp(
        &[
            ("Authorization", auth.as_str()),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "create_client"),
        ],
        &modern,
    );
    assert_eq!(
        stateless.status,
        202,
        "{}",
        String::from_utf8_lossy(&stateless.body)
    );
    assert!(stateless.body.is_empty(), "{:?}", stateless.body);

    assert_eq!(ghosts(&db), 0, "the tool did not run");
    assert_eq!(total_charged(&db), 0, "nothing was charged");

    // The same session then answers a request with an id: no such client, and the search
    // is the first call its rate buckets counted.
    let search = session_post(&server, &db, &session, &search_ghost(7)).json();
    assert_eq!(search["id"], json!(7), "{search}");
    assert_eq!(found(&search), &Vec::<Value>::new(), "{search}");
    assert_first_charge(&search);
}

#[test]
fn any_request_without_an_id_runs_nothing_and_gets_no_line() {
    let db = TestDb::new();
    // A prompt whose answer reads business data: sent with an id it is charged to the read
    // buckets and audited; without one nothing of it may happen. A ping without an id is
    // not answered either.
    let chase = json!({"jsonrpc": "2.0", "method": "prompts/get",
                       "params": {"name": "chase_overdue_invoices",
                                  "arguments": {"tone": "firm"}}});
    let ping = json!({"jsonrpc": "2.0", "method": "ping"});
    let written = stdio_session(&db, &[initialize(1), initialized(), chase, ping]);
    let ids: Vec<&Value> = written.iter().map(|line| &line["id"]).collect();
    assert_eq!(ids, [&json!(1)], "only initialize is answered: {written:?}");
    assert_eq!(total_charged(&db), 0, "nothing was charged");
    let audit = db.run_json(&["audit", "--json"]);
    assert_eq!(audit, json!([]), "nothing reached the audit log");

    // The same prompt with an id is charged and audited: what the notification would have
    // done had it run.
    let chase = json!({"jsonrpc": "2.0", "id": 2, "method": "prompts/get",
                       "params": {"name": "chase_overdue_invoices",
                                  "arguments": {"tone": "firm"}}});
    let written = stdio_session(&db, &[initialize(1), initialized(), chase]);
    assert!(
        written.iter().any(|line| line["id"] == json!(2)),
        "{written:?}"
    );
    assert!(total_charged(&db) > 0, "the prompt with an id is charged");
    let audit = db.run_json(&["audit", "--json"]);
    assert_eq!(audit.as_array().map(Vec::len), Some(1), "{audit}");
}
