//! An upstream MCP server over Streamable HTTP behind the gate: `tollgate serve
//! --conformance-pack` (the binary under test, with a database and a credential of its
//! own) is the upstream of another `tollgate serve`. A forwarded call is one POST on the
//! session the gate opened: its answer comes back as the upstream gave it, JSON or an event
//! stream whose progress is relayed; the upstream's JSON-RPC error keeps its code and
//! message, and the upstream refusing the gate's own credential is the operator's problem,
//! said so. An upstream restarted without the session answers the next call 404; the call
//! is sent again on a new session and goes through. A proxy named in the gate's environment
//! is not used: the configured URL is where calls go.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{HttpServer, Key, TestDb, assert_tool_error};

/// How long a test waits for the backend to be ready.
const READY_WAIT: Duration = Duration::from_secs(30);

/// The upstream (with its database and the gate's key on it) and the gate in front of it.
struct Gate {
    upstream_db: TestDb,
    upstream: HttpServer,
    upstream_key: Key,
    db: TestDb,
    server: HttpServer,
}

impl Gate {
    /// `tollgate serve` with the backend `up`: `tollgate serve --conformance-pack` over
    /// Streamable HTTP, the gate's key sent as a secret header read from a file.
    fn start() -> Gate {
        Gate::start_with_env(&[])
    }

    /// [`Gate::start`] with `env` added to the gate's environment.
    fn start_with_env(env: &[(&str, &str)]) -> Gate {
        let upstream_db = TestDb::on_sqlite(&[]);
        let upstream_key = upstream_db.create_key("gate", "*", &[]);
        let upstream = HttpServer::start(&upstream_db, &["--conformance-pack"]);
        let db = TestDb::new();
        let token_file = db.dir.path().join("upstream.token");
        std::fs::write(&token_file, format!("Bearer {}", upstream_key.token)).expect("token");
        let config = format!(
            r#"
[[backends]]
name = "up"
kind = "mcp"
url = "http://{addr}/mcp"
headers = {{ Authorization = {{ file = "{file}" }} }}
timeout_ms = 10000
"#,
            addr = upstream.addr,
            file = token_file.display(),
        );
        let server = HttpServer::start_with_config(&db, &config, env);
        let gate = Gate {
            upstream_db,
            upstream,
            upstream_key,
            db,
            server,
        };
        let deadline = Instant::now() + READY_WAIT;
        while gate.server.get("/healthz").json()["backends"][0]["state"] != "ready" {
            assert!(Instant::now() < deadline, "{}", gate.server.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
        gate
    }

    fn admin(&self) -> &str {
        self.db.admin_key.as_deref().expect("admin key")
    }

    fn call(&self, tool: &str, args: Value) -> Value {
        self.server
            .modern_tool_call(self.admin(), tool, &args)
            .json()
    }

    /// `tool` called through the gate with a progress token.
    fn call_with_progress(&self, tool: &str, token: &str) -> crate::util::HttpResponse {
        self.server
            .modern_tool_call_with_progress(self.admin(), tool, token)
    }
}

#[test]
fn a_forwarded_answer_is_the_upstream_s_own() {
    let gate = Gate::start();
    let direct = gate
        .upstream
        .modern_tool_call(&gate.upstream_key.token, "test_simple_text", &json!({}))
        .json();
    let forwarded = gate.call("up_test_simple_text", json!({}));
    assert_eq!(forwarded["result"]["isError"], false, "{forwarded}");
    assert_eq!(
        forwarded["result"]["content"], direct["result"]["content"],
        "{forwarded} / {direct}"
    );
    // Arguments cross as given: the upstream echoes them.
    let args = json!({"name": "Ada", "contactMethod": "email", "email": "ada@example.com"});
    let echoed = gate.call("up_json_schema_2020_12_tool", args.clone());
    assert_eq!(echoed["result"]["isError"], false, "{echoed}");
    let text = echoed["result"]["content"][0]["text"]
        .as_str()
        .expect("a text block");
    for value in ["Ada", "ada@example.com"] {
        assert!(text.contains(value), "{text}");
    }
}

#[test]
fn the_progress_of_an_event_stream_answer_is_relayed_before_the_result() {
    let gate = Gate::start();
    let response = gate.call_with_progress("up_test_tool_with_progress", "p-1");
    assert_eq!(response.header("content-type"), Some("text/event-stream"));
    let messages = response.sse_messages();
    let (last, notifications) = messages.split_last().expect("a response");
    let values: Vec<f64> = notifications
        .iter()
        .map(|n| {
            assert_eq!(n["method"], "notifications/progress", "{n}");
            assert_eq!(n["params"]["progressToken"], "p-1", "{n}");
            n["params"]["progress"].as_f64().expect("a progress value")
        })
        .collect();
    // 0, 50 and 100 of 100 come about 50 ms apart: the throttle may pass on fewer, never
    // the last one less.
    assert_eq!(values.last(), Some(&100.0), "{messages:?}");
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    assert_eq!(last["result"]["isError"], false, "{last}");
}

#[test]
fn an_upstream_json_rpc_error_keeps_its_code_and_message() {
    let gate = Gate::start();
    gate.upstream_db
        .limit_per_minute(&gate.upstream_key.id, "read", 1);
    crate::backends_upstream::refused_past_one_call_a_minute(|| {
        gate.call("up_test_simple_text", json!({}))
    });
}

#[test]
fn the_upstream_refusing_the_gate_s_credential_is_the_operator_s_problem() {
    let gate = Gate::start();
    let revoked = gate
        .upstream_db
        .run(&["key", "revoke", &gate.upstream_key.id]);
    assert!(revoked.status.success(), "{revoked:?}");
    let refused = gate.call("up_test_simple_text", json!({}));
    assert_tool_error(&refused, "adapter_error", 502, 4001);
    let envelope = &refused["result"]["_meta"]["dev.tollgate/error"];
    assert_eq!(envelope["retryable"], false);
    assert_eq!(envelope["details"], json!({"backend": "up", "status": 401}));
    let hint = envelope["hint"].as_str().expect("a hint");
    assert!(
        hint.contains("refused the gateway's own credential"),
        "{hint}"
    );
}

#[test]
fn a_call_on_a_session_the_upstream_forgot_goes_through_on_a_new_one() {
    let mut gate = Gate::start();
    let first = gate.call("up_test_simple_text", json!({}));
    assert_eq!(first["result"]["isError"], false, "{first}");
    // The upstream stops, forgets every session, and comes back on the same address.
    let port = gate.upstream.addr.port();
    gate.upstream.terminate();
    gate.upstream_db.sql("DELETE FROM http_sessions");
    gate.upstream = HttpServer::start_on_port(&gate.upstream_db, port, &["--conformance-pack"]);
    let again = gate.call("up_test_simple_text", json!({}));
    assert_eq!(again["result"]["isError"], false, "{again}");
    assert_eq!(again["result"]["content"], first["result"]["content"]);
}

#[test]
fn a_proxy_in_the_environment_is_not_used_to_reach_the_upstream() {
    // A proxy that refuses every connection: were it used, the gate could neither open its
    // session with the upstream nor forward a call.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let proxy = format!("http://{}", closed.local_addr().expect("address"));
    drop(closed);
    let env = [
        ("HTTP_PROXY", proxy.as_str()),
        ("http_proxy", proxy.as_str()),
        ("ALL_PROXY", proxy.as_str()),
        ("all_proxy", proxy.as_str()),
        ("NO_PROXY", ""),
        ("no_proxy", ""),
    ];
    let gate = Gate::start_with_env(&env);
    let forwarded = gate.call("up_test_simple_text", json!({}));
    assert_eq!(forwarded["result"]["isError"], false, "{forwarded}");
}
