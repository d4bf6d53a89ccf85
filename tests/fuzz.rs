//! Property-based fuzzing of the request path, in-process: arbitrary bytes and arbitrary
//! JSON-RPC-shaped messages go through the dispatcher's one entry point, as the transports
//! hand them to it (`Message::parse`, `Message::kind`, then `Server::handle`: parser, era
//! selection, guards, tools), and must always get a well-formed answer from the catalog —
//! never a panic.
//!
//! CI runs a short bounded pass; for a longer run set `PROPTEST_CASES`, e.g.
//! `PROPTEST_CASES=100000 cargo test --test tests fuzz::`.

use std::sync::Mutex;

use proptest::prelude::*;
use serde_json::{Value, json};

use tollgate::catalog::ErrorKind;
use tollgate::config::{Config, Overrides};
use tollgate::protocol::client::Notifier;
use tollgate::protocol::dispatch::{Env, Server, Transport};
use tollgate::protocol::inbound::{Message, MessageKind};
use tollgate::protocol::revisions::Session;
use tollgate::store::Store;

use crate::util::TestDb;

struct Sink(Mutex<Vec<Value>>);

impl Notifier for Sink {
    fn notify(&self, message: Value) {
        self.0.lock().expect("sink").push(message);
    }
}

fn server(db: &TestDb) -> Server {
    let flags = Overrides {
        database: Some(db.database_arg().into()),
        conformance_pack: Some(true),
        ..Overrides::default()
    };
    let config = Config::load(None, &[], &flags).expect("config");
    let store = Store::open_database(
        &db.database(),
        &tollgate::store::StoreOptions::from_config(&config, false),
    )
    .expect("store");
    tollgate::ops::assemble::build_server(&config, store).expect("server")
}

/// Validators compile on a tool's first call, not at start-up: every built-in and fixture
/// tool's input schema must compile, or its calls would fail with an internal error.
#[test]
fn every_tool_input_schema_compiles() {
    let db = TestDb::new();
    let server = server(&db);
    assert!(server.registry().tools().len() > 20);
    server
        .registry()
        .compile_all()
        .expect("every schema compiles");
}

/// Every JSON-RPC error code the catalog can produce.
fn catalog_codes() -> Vec<i64> {
    ErrorKind::ALL.iter().map(|k| k.spec().rpc_code).collect()
}

fn check_message(message: &Value, codes: &[i64]) {
    assert_eq!(message["jsonrpc"], "2.0", "{message}");
    if let Some(error) = message.get("error") {
        let code = error["code"].as_i64().expect("numeric code");
        assert!(
            codes.contains(&code),
            "code {code} is not in the catalog: {message}"
        );
        assert_eq!(error["message"], error["data"]["code"], "{message}");
        assert!(error["data"]["hint"].is_string(), "{message}");
    } else {
        assert!(
            message.get("result").is_some(),
            "neither result nor error: {message}"
        );
    }
}

fn check_answer(answer: &Value, codes: &[i64]) {
    match answer {
        Value::Array(items) => items.iter().for_each(|m| check_message(m, codes)),
        message => check_message(message, codes),
    }
}

/// Hands the bodies or lines of one read to the dispatcher as a transport does, and
/// checks every answer.
fn check_read(server: &Server, env: &Env<'_>, read: &[Vec<u8>], codes: &[i64]) {
    let messages: Vec<Message> = read.iter().map(|bytes| Message::parse(bytes)).collect();
    let unreadable = messages
        .iter()
        .filter(|m| m.kind() == MessageKind::Unreadable)
        .count();
    let errors = std::sync::atomic::AtomicUsize::new(0);
    server.handle(messages, env, &|answer| {
        check_answer(&answer.body, codes);
        if answer.error.is_some() {
            errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    assert!(
        errors.into_inner() >= unreadable,
        "every unreadable message is answered with its error"
    );
}

const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "notifications/cancelled",
    "notifications/initialized",
    "nope",
    "",
];

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        prop::sample::select(vec![
            "test_simple_text",
            "list_invoices",
            "2026-07-28",
            "2025-03-26",
            "test://static-text"
        ])
        .prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "name",
                    "arguments",
                    "uri",
                    "cursor",
                    "_meta",
                    "protocolVersion",
                    "capabilities",
                    "level",
                    "ref",
                    "argument",
                    "inputResponses",
                    "requestState",
                    "x"
                ])
                .prop_map(str::to_owned),
                inner,
                0..6,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn message() -> impl Strategy<Value = Value> {
    (prop::option::of(prop_oneof![any::<i64>().prop_map(Value::from), ".{0,6}".prop_map(Value::from), Just(Value::Null)]),
     prop::sample::select(METHODS.to_vec()),
     json_value(),
     any::<bool>(),
     any::<bool>())
        .prop_map(|(id, method, params, modern, valid_version)| {
            let mut params = if params.is_object() { params } else { json!({ "value": params }) };
            if modern {
                params["_meta"] = json!({
                    "io.modelcontextprotocol/protocolVersion": if valid_version { "2026-07-28" } else { "1999-01-01" },
                    "io.modelcontextprotocol/clientCapabilities": {},
                });
            }
            let mut message = json!({ "jsonrpc": "2.0", "method": method, "params": params });
            if let Some(id) = id {
                message["id"] = id;
            }
            message
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_get_a_catalog_answer(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let db = shared_db();
        let server = shared_server();
        let codes = catalog_codes();
        let session = Session::new();
        let sink = Sink(Mutex::new(Vec::new()));
        let env = env(&session, &sink, db);
        check_read(server, &env, &[bytes], &codes);
    }

    #[test]
    fn arbitrary_messages_get_a_catalog_answer(messages in prop::collection::vec(message(), 1..8), arrival in 0..3u8) {
        let db = shared_db();
        let server = shared_server();
        let codes = catalog_codes();
        let session = Session::new();
        let sink = Sink(Mutex::new(Vec::new()));
        let env = env(&session, &sink, db);
        let bodies: Vec<Vec<u8>> = messages
            .iter()
            .map(|m| serde_json::to_vec(m).expect("serialize"))
            .collect();
        match arrival {
            // One JSON-RPC batch in one body.
            0 => check_read(server, &env, &[serde_json::to_vec(&messages).expect("serialize")], &codes),
            // One message per read, as HTTP hands them over.
            1 => bodies.iter().for_each(|body| check_read(server, &env, std::slice::from_ref(body), &codes)),
            // All in one read, as stdio hands over lines that arrived together.
            _ => check_read(server, &env, &bodies, &codes),
        }
        for note in sink.0.lock().expect("sink").iter() {
            prop_assert_eq!(&note["jsonrpc"], "2.0");
        }
    }
}

fn shared_db() -> &'static TestDb {
    static DB: std::sync::OnceLock<TestDb> = std::sync::OnceLock::new();
    DB.get_or_init(|| {
        let db = TestDb::new();
        let id = db.admin_key_id();
        for category in ["read", "write", "destructive", "send", "generate"] {
            db.limit_per_minute(&id, category, 1_000_000);
        }
        db
    })
}

fn shared_server() -> &'static Server {
    static SERVER: std::sync::OnceLock<Server> = std::sync::OnceLock::new();
    SERVER.get_or_init(|| server(shared_db()))
}

fn env<'a>(session: &'a Session, sink: &'a Sink, db: &'a TestDb) -> Env<'a> {
    Env {
        session,
        notifier: sink,
        transport: Transport::Stdio,
        token: db.admin_key.as_deref(),
        dev_credential: None,
        source: "fuzz".to_owned(),
        idempotency_header: None,
        http: None,
        session_id: None,
    }
}
