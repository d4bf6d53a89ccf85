//! The OpenAPI backend end to end: `tollgate serve` with a REST backend the test serves on
//! 127.0.0.1, every row of the failure mapping asserted on the wire (`code`, `error_code`,
//! `retryable`, `details.original_error`, `isError`), the idempotency key and the
//! credential forwarded to the backend, and the credential absent from every response and
//! from the server's log.

use std::sync::{Arc, Mutex, mpsc};

use serde_json::{Value, json};

use crate::util::{HttpServer, RestBackend, TestDb, assert_tool_error, free_port};

/// The backend credential: it must never leave tollgate but towards the backend.
const SECRET: &str = "probe-backend-secret-91c2";

/// `probe` answers with the status its `case` names; `things` records writes.
fn document() -> Value {
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Probe", "version": "1"},
        "paths": {
            "/probe/{case}": {
                "get": {
                    "operationId": "probeCase",
                    "summary": "Answer the named case.",
                    "parameters": [{"name": "case", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}
                }
            },
            "/things": {
                "post": {
                    "operationId": "createThing",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {
                        "type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}}},
                    "responses": {"201": {"description": "made", "content": {"application/json": {"schema": {
                        "type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}}}}}
                }
            }
        }
    })
}

/// An error body in the backend's own shape.
fn own_error(code: &str, message: &str) -> Vec<u8> {
    json!({"error": {"code": code, "message": message}})
        .to_string()
        .into_bytes()
}

/// The backend; a `slow` probe waits until the test ends (its sender is dropped).
fn backend(slow: mpsc::Receiver<()>) -> RestBackend {
    let slow = Arc::new(Mutex::new(slow));
    RestBackend::start(move |req| {
        let case = req.target.trim_start_matches("/probe/").to_owned();
        let status = case.parse::<u16>().unwrap_or(200);
        let json = vec![("Content-Type".to_owned(), "application/json".to_owned())];
        match (req.method.as_str(), case.as_str()) {
            ("POST", _) => (201, json, br#"{"id":1,"name":"made"}"#.to_vec()),
            (_, "slow") => {
                let _ = slow
                    .lock()
                    .map(|r| r.recv_timeout(std::time::Duration::from_secs(10)));
                (200, json, b"{}".to_vec())
            }
            (_, "big") => (200, json, vec![b' '; 4096]),
            (_, "ok") => (200, json, br#"{"pets":[1,2]}"#.to_vec()),
            (_, "fastapi422") => (
                422,
                json,
                br#"{"detail":[{"type":"missing","loc":["body","name"],"msg":"Field required"}]}"#
                    .to_vec(),
            ),
            (_, "html500") => (500, vec![], b"<html>oops</html>".to_vec()),
            (_, "429") => (
                429,
                vec![("Retry-After".to_owned(), "17".to_owned())],
                own_error("E_429", "slow down"),
            ),
            (_, "301") => (
                301,
                vec![("Location".to_owned(), "http://127.0.0.1:1/".to_owned())],
                Vec::new(),
            ),
            _ => (
                status,
                json,
                own_error(&format!("E_{status}"), "its own words"),
            ),
        }
    })
}

/// A database and `tollgate serve` with the backend as `probe` at `base_url`.
fn gate(base_url: &str) -> (TestDb, HttpServer) {
    let db = TestDb::new();
    let dir = db.dir.path();
    std::fs::write(dir.join("probe.json"), document().to_string()).expect("write spec");
    std::fs::write(dir.join("probe.token"), format!("{SECRET}\n")).expect("write token");
    let config = format!(
        r#"
[[backends]]
name = "probe"
kind = "openapi"
spec = "probe.json"
base_url = "{base_url}"
timeout_ms = 300
max_response_bytes = 2048
auth = {{ bearer_file = "probe.token" }}
"#
    );
    let server = HttpServer::start_with_config(&db, &config, &[("RUST_LOG", "debug")]);
    (db, server)
}

/// One row of the mapping: the probe's case, then `code`, `http_status`, `error_code`,
/// `retryable` and `details.original_error` of what it becomes.
type Row = (
    &'static str,
    &'static str,
    u64,
    u64,
    bool,
    Option<&'static str>,
);

fn envelope(reply: &Value) -> &Value {
    &reply["result"]["_meta"]["dev.tollgate/error"]
}

#[test]
fn every_answer_of_the_backend_maps_to_its_catalog_entry() {
    let (_hold, slow) = mpsc::channel();
    let rest = backend(slow);
    let (db, server) = gate(&rest.url());
    let admin = db.admin_key.clone().expect("admin key");
    let probe = |case: &str| {
        server
            .modern_tool_call(&admin, "probe_probe_case", &json!({"case": case}))
            .json()
    };
    let ok = probe("ok");
    assert_eq!(ok["result"]["isError"], json!(false), "{ok}");
    assert_eq!(ok["result"]["structuredContent"], json!({"pets": [1, 2]}));
    let rows: &[Row] = &[
        (
            "400",
            "business_rule_violation",
            422,
            3103,
            false,
            Some("E_400"),
        ),
        (
            "422",
            "business_rule_violation",
            422,
            3103,
            false,
            Some("E_422"),
        ),
        (
            "fastapi422",
            "business_rule_violation",
            422,
            3103,
            false,
            Some("missing"),
        ),
        ("401", "adapter_error", 502, 4001, false, Some("E_401")),
        ("403", "adapter_error", 502, 4001, false, Some("E_403")),
        ("404", "not_found", 404, 3101, false, Some("E_404")),
        ("409", "conflict", 409, 3102, false, Some("E_409")),
        ("429", "rate_limited", 429, 3001, true, Some("E_429")),
        ("405", "not_implemented", 501, 5001, false, Some("E_405")),
        ("501", "not_implemented", 501, 5001, false, Some("E_501")),
        ("500", "adapter_error", 502, 4001, false, Some("E_500")),
        ("html500", "adapter_error", 502, 4001, false, None),
        ("418", "adapter_error", 502, 4001, false, Some("E_418")),
        ("502", "adapter_error", 502, 4001, true, Some("E_502")),
        ("503", "adapter_error", 502, 4001, true, Some("E_503")),
        ("504", "adapter_error", 502, 4001, true, Some("E_504")),
        ("301", "adapter_error", 502, 4001, false, None),
        ("big", "adapter_error", 502, 4001, false, None),
        ("slow", "timeout", 504, 3002, true, None),
    ];
    for &(case, code, http_status, error_code, retryable, original) in rows {
        let reply = probe(case);
        assert_tool_error(&reply, code, http_status, error_code);
        let envelope = envelope(&reply);
        assert_eq!(envelope["retryable"], json!(retryable), "{case}: {reply}");
        assert_eq!(envelope["details"]["backend"], "probe", "{case}");
        assert_eq!(
            envelope["details"]
                .get("original_error")
                .and_then(Value::as_str),
            original,
            "{case}: {reply}"
        );
    }
    let rate = probe("429");
    assert_eq!(envelope(&rate)["retry_after"], 17);
    let fastapi = probe("fastapi422");
    assert_eq!(envelope(&fastapi)["details"]["message"], "Field required");
    assert_eq!(
        fastapi["result"]["content"][0]["text"],
        "The probe system rejected the call: Field required; change the arguments and call again."
    );
    assert_eq!(
        envelope(&probe("html500"))["details"]["message"],
        "Internal Server Error"
    );
    assert_eq!(
        envelope(&probe("301"))["details"]["reason"],
        "redirect not followed"
    );
    assert_eq!(
        envelope(&probe("big"))["details"]["reason"],
        "response_too_large"
    );
    assert_eq!(envelope(&probe("slow"))["details"]["timeout_ms"], 300);
    assert!(
        rest.received()
            .iter()
            .all(|r| r.header("authorization") == Some(&format!("Bearer {SECRET}")))
    );
    assert!(
        !server.log_text().contains(SECRET),
        "the credential is never logged"
    );
}

#[test]
fn a_write_forwards_the_idempotency_key_and_a_replay_stays_in_the_gate() {
    let (_hold, slow) = mpsc::channel();
    let rest = backend(slow);
    let (db, server) = gate(&rest.url());
    let admin = db.admin_key.clone().expect("admin key");
    let args = json!({"name": "made", "idempotency_key": "thing-1"});
    let first = server
        .modern_tool_call(&admin, "probe_create_thing", &args)
        .json();
    assert_eq!(
        first["result"]["structuredContent"],
        json!({"id": 1, "name": "made"})
    );
    let again = server
        .modern_tool_call(&admin, "probe_create_thing", &args)
        .json();
    assert_eq!(
        again["result"]["structuredContent"],
        first["result"]["structuredContent"]
    );
    let writes: Vec<_> = rest
        .received()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(writes.len(), 1, "the replay is answered by the gate");
    assert_eq!(writes[0].header("idempotency-key"), Some("thing-1"));
    assert_eq!(writes[0].body, br#"{"name":"made"}"#);
    let texts = serde_json::to_string(&(first, again)).expect("json");
    assert!(!texts.contains(SECRET));
}

#[test]
fn a_backend_that_cannot_be_reached_is_backend_unavailable() {
    let refused = format!("http://127.0.0.1:{}", free_port());
    let (db, server) = gate(&refused);
    let admin = db.admin_key.clone().expect("admin key");
    let reply = server
        .modern_tool_call(&admin, "probe_probe_case", &json!({"case": "ok"}))
        .json();
    assert_tool_error(&reply, "backend_unavailable", 503, 4002);
    assert_eq!(envelope(&reply)["retryable"], true);
    assert_eq!(envelope(&reply)["details"]["reason"], "connection refused");
    let health = String::from_utf8_lossy(&server.get("/healthz").body).into_owned();
    assert!(health.contains("connection refused"), "{health}");
    assert!(!health.contains(SECRET) && !server.log_text().contains(SECRET));
}

#[test]
fn a_connection_dropped_before_the_answer_is_backend_unavailable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let dropper = std::thread::spawn(move || {
        use std::io::Read;
        let (mut stream, _) = listener.accept().expect("accept");
        let mut head = [0u8; 64];
        let _ = stream.read(&mut head);
    });
    let (db, server) = gate(&url);
    let admin = db.admin_key.clone().expect("admin key");
    let reply = server
        .modern_tool_call(&admin, "probe_probe_case", &json!({"case": "ok"}))
        .json();
    dropper.join().expect("dropper");
    assert_tool_error(&reply, "backend_unavailable", 503, 4002);
    assert_eq!(
        envelope(&reply)["details"]["reason"],
        "connection closed before the response"
    );
}

/// Operations whose path parameters an agent fills: every path the backend receives must
/// be one of these templates below `/api`.
fn files_document() -> Value {
    let segment = |name: &str| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}});
    let ok = json!({"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}});
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Files", "version": "1"},
        "paths": {
            "/files/{a}/{b}/{c}": {"delete": {
                "operationId": "deleteFile",
                "parameters": [segment("a"), segment("b"), segment("c")],
                "responses": ok
            }},
            "/users/{user}/avatar": {"get": {
                "operationId": "getAvatar",
                "parameters": [segment("user")],
                "responses": ok
            }}
        }
    })
}

#[test]
fn a_path_parameter_never_moves_the_request_off_its_template() {
    let rest = RestBackend::start(|_| {
        let json = vec![("Content-Type".to_owned(), "application/json".to_owned())];
        (200, json, b"{}".to_vec())
    });
    let db = TestDb::new();
    std::fs::write(
        db.dir.path().join("files.json"),
        files_document().to_string(),
    )
    .expect("write spec");
    let config = format!(
        "[[backends]]\nname = \"files\"\nkind = \"openapi\"\nspec = \"files.json\"\nbase_url = \"{}/api\"\n",
        rest.url()
    );
    let server = HttpServer::start_with_config(&db, &config, &[]);
    let admin = db.admin_key.clone().expect("admin key");
    let call = |tool: &str, args: Value| server.modern_tool_call(&admin, tool, &args).json();

    let attacks = [
        (
            "files_delete_file",
            json!({"a": "..", "b": "..", "c": "admin", "idempotency_key": "k1"}),
            "a",
        ),
        (
            "files_delete_file",
            json!({"a": "x", "b": ".", "c": "..", "idempotency_key": "k2"}),
            "b",
        ),
        ("files_get_avatar", json!({"user": ".."}), "user"),
        ("files_get_avatar", json!({"user": "."}), "user"),
    ];
    for (tool, args, param) in attacks {
        let reply = call(tool, args.clone());
        assert_tool_error(&reply, "validation_error", 400, 2001);
        let envelope = envelope(&reply);
        assert_eq!(envelope["param"], param, "{reply}");
        assert_eq!(envelope["details"]["errors"][0]["reason"], "reserved");
        let hint = envelope["hint"].as_str().expect("hint");
        assert!(hint.contains(&format!("`{param}`")), "{hint}");
    }
    // Values that merely contain dots, or encoded dots, stay in their own segment.
    let fine = call("files_get_avatar", json!({"user": "%2e%2e"}));
    assert_eq!(fine["result"]["isError"], false, "{fine}");
    let fine = call(
        "files_delete_file",
        json!({"a": "...", "b": "a/../b", "c": ".x", "idempotency_key": "k3"}),
    );
    assert_eq!(fine["result"]["isError"], false, "{fine}");

    let received: Vec<(String, String)> = rest
        .received()
        .into_iter()
        .map(|r| (r.method, r.target))
        .collect();
    assert_eq!(
        received,
        vec![
            ("GET".to_owned(), "/api/users/%252e%252e/avatar".to_owned()),
            (
                "DELETE".to_owned(),
                "/api/files/.../a%2F..%2Fb/.x".to_owned()
            ),
        ],
        "only the two well-formed calls reached the backend, each on its template"
    );
}
