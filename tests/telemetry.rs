//! Traces seen from outside, without a collector: the request's trace id on its JSON log
//! lines and its audit row, a caller's own context kept with telemetry off, and the
//! `OTEL_*` variables checked at start. (The spans a collector receives, and the context
//! the backends receive, are checked against OpenTelemetry's own protobuf definitions and
//! real backends in tests/backends/test_telemetry.py.)

use std::fs::File;
use std::net::TcpListener;
use std::process::Stdio;

use serde_json::{Value, json};

use crate::util::{StdioServer, TestDb};

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn traceparent() -> String {
    format!("00-{CALLER_TRACE}-00f067aa0ba902b7-01")
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

/// The audit rows of `tool`, newest first.
fn audit_rows(db: &TestDb, tool: &str) -> Vec<Value> {
    let rows = db.run_json(&["audit", "--json", "--tool", tool]);
    rows.as_array().expect("rows").clone()
}

#[test]
fn a_request_logs_and_audits_the_trace_it_continues() {
    let db = TestDb::new();
    let dir = tempfile::tempdir().expect("dir");
    let log_path = dir.path().join("stderr.jsonl");
    let mut cmd = db.command(&["stdio", "--log-format", "json"]);
    cmd.env(
        "TOLLGATE_TOKEN",
        db.admin_key.as_deref().expect("admin key"),
    )
    .env(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        format!("http://127.0.0.1:{}", closed_port()),
    )
    .env("OTEL_BSP_SCHEDULE_DELAY", "20")
    // The refusal's line is at info.
    .env("RUST_LOG", "info");
    let log = File::create(&log_path).expect("log file");
    let mut server = StdioServer::spawn_with_stderr(cmd, Stdio::from(log));
    server.initialize("2025-06-18");
    // A refused call logs one line under its request span.
    let refused = server.request(
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {},
               "_meta": {"traceparent": traceparent()}}),
    );
    assert_eq!(refused["error"]["message"], "unknown_tool", "{refused}");
    let other = server.request(
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {}}),
    );
    assert_eq!(other["error"]["message"], "unknown_tool", "{other}");
    assert!(server.close().success());

    let text = std::fs::read_to_string(&log_path).expect("log");
    let spans: Vec<Value> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["fields"]["message"] == "tool call rejected")
        .map(|line| line["span"].clone())
        .collect();
    assert_eq!(spans.len(), 2, "{text}");
    assert_eq!(spans[0]["trace_id"], CALLER_TRACE, "{text}");
    assert_eq!(spans[0]["otel.name"], "tools/call no_such_tool", "{text}");
    let span_id = spans[0]["span_id"].as_str().expect("span_id");
    assert_eq!(span_id.len(), 16, "{text}");
    assert_ne!(
        span_id, "00f067aa0ba902b7",
        "the request's own span, not the caller's"
    );
    // The other request starts a trace of its own.
    let own = spans[1]["trace_id"].as_str().expect("trace_id");
    assert_eq!(own.len(), 32, "{text}");
    assert_ne!(own, CALLER_TRACE);

    let rows = audit_rows(&db, "no_such_tool");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[1]["trace_id"], CALLER_TRACE, "{rows:?}");
    assert_eq!(rows[0]["trace_id"], own, "{rows:?}");
}

#[test]
fn with_telemetry_off_the_callers_trace_id_is_still_audited() {
    let db = TestDb::new();
    let mut server = StdioServer::start(&db, &[]);
    server.initialize("2025-06-18");
    for meta in [json!({"traceparent": traceparent()}), json!({})] {
        let answer = server.request(
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}, "_meta": meta}),
        );
        assert_eq!(answer["error"]["message"], "unknown_tool", "{answer}");
    }
    assert!(server.close().success());
    let rows = audit_rows(&db, "no_such_tool");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[1]["trace_id"], CALLER_TRACE, "{rows:?}");
    assert_eq!(rows[0]["trace_id"], Value::Null, "{rows:?}");
}

#[test]
fn an_otel_variable_tollgate_cannot_honour_stops_it_at_start() {
    let db = TestDb::new();
    for (name, value, expected) in [
        (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "grpc",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        ("OTEL_TRACES_SAMPLER", "sometimes", "telemetry.sampler"),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "collector:4318",
            "telemetry.endpoint",
        ),
    ] {
        let out = db
            .command(&["stdio"])
            .env(name, value)
            .output()
            .expect("run");
        assert!(!out.status.success(), "{name}={value} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{name}={value}: {stderr}");
    }
    let out = db
        .command(&["check-config"])
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://collector.internal:4318",
        )
        .env("OTEL_EXPORTER_OTLP_HEADERS", "api-key=do-not-show")
        .output()
        .expect("run");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("traces_endpoint = \"http://collector.internal:4318/v1/traces\""),
        "{shown}"
    );
    assert!(
        !shown.contains("do-not-show"),
        "a header's value is shown: {shown}"
    );
}
