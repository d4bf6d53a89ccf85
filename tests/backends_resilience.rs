//! A backend's admission end to end, over stdio (`tollgate stdio`) and HTTP (`tollgate
//! serve`), against a REST backend the test serves on 127.0.0.1: a call past
//! `max_in_flight` and a full queue is refused at once, a call that waited past
//! `queue_timeout_ms` is refused then, and after `breaker_failures` failures in a row the
//! circuit opens and calls are refused without reaching the backend — as `/healthz` and
//! `/metrics` show. The cooldown ending, the trial call and the circuit closing or opening
//! again are driven in-process on a manual clock: no test waits for the cooldown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tollgate::tools::backends::Circuit;

use crate::clock::{InProcess, T0};
use crate::util::{HttpServer, RestBackend, StdioServer, TestDb, assert_tool_error};

/// One operation: `GET /things/{case}` (`erp_get_thing`).
fn document() -> Value {
    json!({
        "openapi": "3.1.0",
        "info": {"title": "ERP", "version": "1"},
        "paths": {"/things/{case}": {"get": {
            "operationId": "getThing",
            "parameters": [{"name": "case", "in": "path", "required": true, "schema": {"type": "string"}}],
            "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}
        }}}
    })
}

/// The REST backend: `hold` answers once the test releases it, `fail` answers 503 while
/// `failing` is set (200 after), anything else 200. Every request is counted as it arrives.
struct Erp {
    rest: RestBackend,
    hits: Arc<AtomicUsize>,
    release: Mutex<Option<mpsc::Sender<()>>>,
    failing: Arc<AtomicBool>,
}

impl Erp {
    fn start() -> Erp {
        let hits = Arc::new(AtomicUsize::new(0));
        let failing = Arc::new(AtomicBool::new(true));
        let (release, held) = mpsc::channel::<()>();
        let held = Arc::new(Mutex::new(held));
        let (counted, fails) = (Arc::clone(&hits), Arc::clone(&failing));
        let rest = RestBackend::start(move |req| {
            counted.fetch_add(1, Ordering::SeqCst);
            let json = vec![("Content-Type".to_owned(), "application/json".to_owned())];
            match req.target.trim_start_matches("/things/") {
                "hold" => {
                    let _ = held.lock().map(|r| r.recv_timeout(Duration::from_secs(20)));
                    (200, json, br#"{"held":true}"#.to_vec())
                }
                "fail" if fails.load(Ordering::SeqCst) => (
                    503,
                    json,
                    br#"{"error":{"code":"E_503","message":"down for maintenance"}}"#.to_vec(),
                ),
                _ => (200, json, br#"{"id":1}"#.to_vec()),
            }
        });
        Erp {
            rest,
            hits,
            release: Mutex::new(Some(release)),
            failing,
        }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// Waits (a bounded time) until the backend has received `n` requests.
    fn until_hits(&self, n: usize) {
        let give_up = Instant::now() + Duration::from_secs(10);
        while self.hits() < n {
            assert!(
                Instant::now() < give_up,
                "the backend got {} calls",
                self.hits()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Lets the held call answer.
    fn release(&self) {
        drop(self.release.lock().expect("release").take());
    }
}

/// A database with the ERP's document beside it, and the configuration of `erp` with
/// `limits` (its keys, one a line) written to `tollgate.toml`.
fn prepared(erp: &Erp, limits: &str) -> (TestDb, std::path::PathBuf) {
    let db = TestDb::new();
    let dir = db.dir.path();
    std::fs::write(dir.join("erp.json"), document().to_string()).expect("write spec");
    let config = format!(
        "[http]\nmetrics = true\n\n[[backends]]\nname = \"erp\"\nkind = \"openapi\"\nspec = \"erp.json\"\nbase_url = \"{}\"\ntimeout_ms = 10000\n{limits}\n",
        erp.rest.url()
    );
    let path = dir.join("tollgate.toml");
    std::fs::write(&path, config).expect("write config");
    (db, path)
}

/// How the test reaches the gate.
#[derive(Debug, Clone, Copy)]
enum Transport {
    Stdio,
    Http,
}

/// `tollgate stdio` or `tollgate serve` with the ERP behind it; calls are sent, then
/// answered by the id [`Gate::send`] gave them.
struct Gate {
    _db: TestDb,
    over: Over,
    next: i64,
}

enum Over {
    Stdio {
        server: StdioServer,
        answered: HashMap<i64, Value>,
    },
    Http {
        server: Arc<HttpServer>,
        token: String,
        pending: HashMap<i64, JoinHandle<Value>>,
    },
}

impl Gate {
    fn start(transport: Transport, erp: &Erp, limits: &str) -> Gate {
        let (db, path) = prepared(erp, limits);
        let config = path.to_str().expect("utf-8").to_owned();
        let over = match transport {
            Transport::Stdio => {
                let mut server = StdioServer::start(&db, &["--config", &config]);
                server.initialize("2025-11-25");
                Over::Stdio {
                    server,
                    answered: HashMap::new(),
                }
            }
            Transport::Http => Over::Http {
                server: Arc::new(HttpServer::start(&db, &["--config", &config])),
                token: db.admin_key.clone().expect("admin key"),
                pending: HashMap::new(),
            },
        };
        Gate {
            _db: db,
            over,
            next: 0,
        }
    }

    /// Sends a call of `erp_get_thing` for `case`; its id.
    fn send(&mut self, case: &str) -> i64 {
        self.next += 1;
        let id = self.next;
        let args = json!({"case": case});
        match &mut self.over {
            Over::Stdio { server, .. } => server.send(&json!({
                "jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "erp_get_thing", "arguments": args},
            })),
            Over::Http {
                server,
                token,
                pending,
            } => {
                let (server, token) = (Arc::clone(server), token.clone());
                let call = std::thread::spawn(move || {
                    server
                        .modern_tool_call(&token, "erp_get_thing", &args)
                        .json()
                });
                pending.insert(id, call);
            }
        }
        id
    }

    /// The answer to the call `id`.
    fn answer(&mut self, id: i64) -> Value {
        match &mut self.over {
            Over::Stdio { server, answered } => loop {
                if let Some(answer) = answered.remove(&id) {
                    return answer;
                }
                let answer = server.recv_response();
                let got = answer["id"].as_i64().expect("an id");
                answered.insert(got, answer);
            },
            Over::Http { pending, .. } => pending
                .remove(&id)
                .expect("a call sent")
                .join()
                .expect("the call's thread"),
        }
    }

    /// Sends a call and waits for its answer.
    fn call(&mut self, case: &str) -> Value {
        let id = self.send(case);
        self.answer(id)
    }

    /// The HTTP server, when the gate is one.
    fn http(&self) -> Option<&HttpServer> {
        match &self.over {
            Over::Http { server, .. } => Some(server),
            Over::Stdio { .. } => None,
        }
    }
}

fn envelope(reply: &Value) -> &Value {
    &reply["result"]["_meta"]["dev.tollgate/error"]
}

/// Asserts the busy refusal of `erp` for `reason` with a limit of one call in flight.
fn assert_busy(reply: &Value, reason: &str) {
    assert_tool_error(reply, "backend_unavailable", 503, 4002);
    let envelope = envelope(reply);
    assert_eq!(envelope["retryable"], true, "{reply}");
    assert_eq!(
        envelope["details"],
        json!({"backend": "erp", "reason": reason, "max_in_flight": 1}),
        "{reply}"
    );
    let hint = envelope["hint"].as_str().expect("a hint");
    assert!(
        hint.starts_with("The erp system already has as many calls in progress")
            && hint.contains(&format!("({reason})"))
            && hint.ends_with("retry it in a few seconds."),
        "{hint}"
    );
}

/// `/healthz`'s line of the backend.
fn health(server: &HttpServer) -> Value {
    server.get("/healthz").json()["backends"][0].clone()
}

/// The `/metrics` page.
fn metrics(server: &HttpServer) -> String {
    String::from_utf8_lossy(&server.get("/metrics").body).into_owned()
}

/// With one call in flight and no queue, a second call is refused at once and never
/// reaches the backend; the held call still completes.
fn a_call_past_the_limit_is_refused_at_once(transport: Transport) {
    let erp = Erp::start();
    let mut gate = Gate::start(transport, &erp, "max_in_flight = 1\nqueue = 0");
    let held = gate.send("hold");
    erp.until_hits(1);
    if let Some(server) = gate.http() {
        let line = health(server);
        assert_eq!(
            (&line["in_flight"], &line["max_in_flight"], &line["queued"]),
            (&json!(1), &json!(1), &json!(0)),
            "{line}"
        );
        assert!(
            metrics(server).contains("tollgate_backend_in_flight{backend=\"erp\"} 1\n"),
            "{}",
            metrics(server)
        );
    }
    let refused = gate.call("ok");
    assert_busy(&refused, "queue_full");
    assert_eq!(erp.hits(), 1, "the refused call did not reach the backend");
    erp.release();
    let done = gate.answer(held);
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(done["result"]["structuredContent"], json!({"held": true}));
    if let Some(server) = gate.http() {
        let page = metrics(server);
        for line in [
            "tollgate_backend_rejected_total{backend=\"erp\",reason=\"queue_full\"} 1\n",
            "tollgate_backend_rejected_total{backend=\"erp\",reason=\"queue_timeout\"} 0\n",
            "tollgate_backend_calls_total{backend=\"erp\"} 1\n",
            "tollgate_backend_in_flight{backend=\"erp\"} 0\n",
        ] {
            assert!(page.contains(line), "{line} in {page}");
        }
    }
    let after = gate.call("ok");
    assert_eq!(
        after["result"]["isError"], false,
        "the slot came back: {after}"
    );
}

/// With one call in flight and a queue of one, a waiting call is refused once it has
/// waited `queue_timeout_ms`, without reaching the backend.
fn a_call_that_waits_past_the_queue_deadline_is_refused(transport: Transport) {
    let erp = Erp::start();
    let mut gate = Gate::start(
        transport,
        &erp,
        "max_in_flight = 1\nqueue = 1\nqueue_timeout_ms = 200",
    );
    let held = gate.send("hold");
    erp.until_hits(1);
    let waited = gate.call("ok");
    assert_busy(&waited, "queue_timeout");
    assert_eq!(erp.hits(), 1);
    if let Some(server) = gate.http() {
        assert_eq!(health(server)["queued"], 0);
        let page = metrics(server);
        assert!(
            page.contains(
                "tollgate_backend_rejected_total{backend=\"erp\",reason=\"queue_timeout\"} 1\n"
            ),
            "{page}"
        );
    }
    erp.release();
    assert_eq!(gate.answer(held)["result"]["isError"], false);
}

#[test]
fn over_stdio_a_call_past_the_limit_is_refused_at_once() {
    a_call_past_the_limit_is_refused_at_once(Transport::Stdio);
}

#[test]
fn over_http_a_call_past_the_limit_is_refused_at_once() {
    a_call_past_the_limit_is_refused_at_once(Transport::Http);
}

#[test]
fn over_stdio_a_call_that_waits_past_the_queue_deadline_is_refused() {
    a_call_that_waits_past_the_queue_deadline_is_refused(Transport::Stdio);
}

#[test]
fn over_http_a_call_that_waits_past_the_queue_deadline_is_refused() {
    a_call_that_waits_past_the_queue_deadline_is_refused(Transport::Http);
}

/// Asserts the circuit-open refusal of `erp`, its `retry_after` within `retry_after`.
fn assert_circuit_open(reply: &Value, retry_after: std::ops::RangeInclusive<u64>) {
    assert_tool_error(reply, "backend_unavailable", 503, 4002);
    let envelope = envelope(reply);
    assert_eq!(envelope["retryable"], true, "{reply}");
    assert_eq!(
        envelope["details"],
        json!({"backend": "erp", "reason": "circuit_open"}),
        "{reply}"
    );
    let after = envelope["retry_after"].as_u64().expect("retry_after");
    assert!(retry_after.contains(&after), "{reply}");
    let hint = envelope["hint"].as_str().expect("a hint");
    assert!(
        hint.starts_with("The erp system has been failing")
            && hint.contains(&format!("Wait {after} second")),
        "{hint}"
    );
}

/// Asserts the backend's temporary error (its own 503) passed through.
fn assert_backend_503(reply: &Value) {
    assert_tool_error(reply, "adapter_error", 502, 4001);
    assert_eq!(envelope(reply)["retryable"], true, "{reply}");
    assert_eq!(envelope(reply)["details"]["original_error"], "E_503");
}

/// After two failures in a row the circuit opens: the next call is refused without
/// reaching the backend, and `/healthz` and `/metrics` say so.
fn the_circuit_opens_after_failures_in_a_row(transport: Transport) {
    let erp = Erp::start();
    let mut gate = Gate::start(
        transport,
        &erp,
        "breaker_failures = 2\nbreaker_cooldown_ms = 600000",
    );
    assert_backend_503(&gate.call("fail"));
    if let Some(server) = gate.http() {
        assert_eq!(health(server)["circuit"], "closed");
    }
    assert_backend_503(&gate.call("fail"));
    let refused = gate.call("ok");
    assert_circuit_open(&refused, 590..=600);
    assert_eq!(erp.hits(), 2, "the refused call did not reach the backend");
    let Some(server) = gate.http() else {
        return;
    };
    let line = health(server);
    assert_eq!(line["circuit"], "open", "{line}");
    assert_eq!(line["state"], "ready", "its state is its own: {line}");
    assert!(
        (590..=600).contains(&line["retry_after"].as_u64().unwrap_or_default()),
        "{line}"
    );
    let page = metrics(server);
    for line in [
        "tollgate_backend_circuit_open{backend=\"erp\"} 1\n",
        "tollgate_backend_circuit_opened_total{backend=\"erp\"} 1\n",
        "tollgate_backend_rejected_total{backend=\"erp\",reason=\"circuit_open\"} 1\n",
        "tollgate_backend_calls_total{backend=\"erp\"} 2\n",
        "tollgate_backend_failures_total{backend=\"erp\"} 2\n",
    ] {
        assert!(page.contains(line), "{line} in {page}");
    }
}

#[test]
fn over_stdio_the_circuit_opens_after_failures_in_a_row() {
    the_circuit_opens_after_failures_in_a_row(Transport::Stdio);
}

#[test]
fn over_http_the_circuit_opens_after_failures_in_a_row() {
    the_circuit_opens_after_failures_in_a_row(Transport::Http);
}

#[test]
fn after_the_cooldown_one_trial_call_closes_the_circuit_or_opens_it_again() {
    let erp = Erp::start();
    let (db, config) = prepared(&erp, "breaker_failures = 2\nbreaker_cooldown_ms = 30000");
    let token = db.admin_key.clone().expect("admin key");
    let mut gate = InProcess::start_with_config(&db, Some(&token), T0, Some(&config));
    gate.initialize("2025-11-25");
    let mut call = |case: &str| gate.call_tool("erp_get_thing", json!({"case": case}));
    assert_backend_503(&call("fail"));
    assert_backend_503(&call("fail"));
    assert_circuit_open(&call("fail"), 30..=30);
    gate.clock.advance(Duration::from_secs(29));
    assert_circuit_open(
        &gate.call_tool("erp_get_thing", json!({"case": "fail"})),
        1..=1,
    );
    assert_eq!(erp.hits(), 2);
    let circuit = |gate: &InProcess| gate.server().backends().status()[0].admission.circuit;
    // The cooldown is over: one trial call goes through, and its failure opens the
    // circuit for another cooldown.
    gate.clock.advance(Duration::from_secs(1));
    assert_eq!(circuit(&gate), Circuit::HalfOpen);
    assert_backend_503(&gate.call_tool("erp_get_thing", json!({"case": "fail"})));
    assert_eq!(erp.hits(), 3);
    assert_eq!(circuit(&gate), Circuit::Open);
    assert_circuit_open(
        &gate.call_tool("erp_get_thing", json!({"case": "ok"})),
        30..=30,
    );
    // The next trial succeeds: the circuit closes and calls go through again.
    gate.clock.advance(Duration::from_secs(30));
    erp.failing.store(false, Ordering::SeqCst);
    let trial = gate.call_tool("erp_get_thing", json!({"case": "fail"}));
    assert_eq!(trial["result"]["isError"], false, "{trial}");
    assert_eq!(circuit(&gate), Circuit::Closed);
    let after = gate.call_tool("erp_get_thing", json!({"case": "ok"}));
    assert_eq!(after["result"]["isError"], false, "{after}");
    assert_eq!(erp.hits(), 5);
    let admission = &gate.server().backends().status()[0].admission;
    assert_eq!(admission.circuit_opened, 2);
}

#[test]
fn a_call_a_backend_holds_leaves_the_listener_s_only_worker_free() {
    let erp = Erp::start();
    let (db, path) = prepared(&erp, "");
    let config = std::fs::read_to_string(&path)
        .expect("read config")
        .replace(
            "[http]\nmetrics = true\n",
            "[http]\nmetrics = true\nworkers = 1\n",
        );
    std::fs::write(&path, config).expect("write config");
    let server = Arc::new(HttpServer::start(
        &db,
        &["--config", path.to_str().expect("utf-8")],
    ));
    let token = db.admin_key.clone().expect("admin key");
    let call = |case: &'static str| {
        let (server, token) = (Arc::clone(&server), token.clone());
        std::thread::spawn(move || {
            server
                .modern_tool_call(&token, "erp_get_thing", &json!({"case": case}))
                .json()
        })
    };
    let held = call("hold");
    erp.until_hits(1);
    // The one worker slot is not held while the first call waits on the backend: the second
    // call is worked on and reaches the backend meanwhile.
    let other = call("ok");
    erp.until_hits(2);
    let other = other.join().expect("the second call");
    assert_eq!(other["result"]["isError"], false, "{other}");
    erp.release();
    let held = held.join().expect("the held call");
    assert_eq!(held["result"]["isError"], false, "{held}");
    assert_eq!(held["result"]["structuredContent"]["held"], true, "{held}");
}

#[test]
fn a_stopping_server_waits_for_a_call_a_backend_holds() {
    let erp = Erp::start();
    let (db, path) = prepared(&erp, "");
    let server = Arc::new(HttpServer::start(
        &db,
        &["--config", path.to_str().expect("utf-8")],
    ));
    let token = db.admin_key.clone().expect("admin key");
    let held = {
        let (server, token) = (Arc::clone(&server), token.clone());
        std::thread::spawn(move || {
            server
                .modern_tool_call(&token, "erp_get_thing", &json!({"case": "hold"}))
                .json()
        })
    };
    erp.until_hits(1);
    // The call gave its worker slot up while it waits on the backend; SIGTERM still lets it
    // finish before the process ends.
    server.signal_term();
    let give_up = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(server.addr).is_ok() {
        assert!(Instant::now() < give_up, "the listener never closed");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The listener is closed: the server is draining the requests in flight.
    erp.release();
    let held = held.join().expect("the held call");
    assert_eq!(held["result"]["isError"], false, "{held}");
    assert_eq!(held["result"]["structuredContent"]["held"], true, "{held}");
}
