//! Window edges and expiries on a manual clock, in-process: a real `Server` built from the
//! database's `Config` and `Store` by `assemble::build_server_with_clock`, driven through the
//! dispatcher's entry point (`Server::handle`, as stdio calls it). The clock stands still
//! until a test moves it, so a rate window, a throttle window, an access token, an
//! idempotency lease or "today" ends exactly where the test says — no test waits for time
//! to pass.

use serde_json::{Value, json};
use std::sync::Mutex;

use tollgate::clock::ManualClock;
use tollgate::config::{Config, Overrides};
use tollgate::protocol::client::Notifier;
use tollgate::protocol::dispatch::{Env, Server, Transport};
use tollgate::protocol::inbound::Message;
use tollgate::protocol::revisions::Session;
use tollgate::store::Store;

use crate::util::{TestDb, assert_error, modern_meta};

/// A minute and hour boundary (unix seconds): 2027-01-15T08:00:00Z.
pub const T0: i64 = 1_800_000_000;

struct Discard;

impl Notifier for Discard {
    fn notify(&self, _message: Value) {}
}

/// A server in this process on a manual clock, seen by one client over the stdio path.
pub struct InProcess {
    /// The server's clock: set and advance it to move time.
    pub clock: ManualClock,
    server: Server,
    session: Session,
    token: Option<String>,
    /// Who is asking, as the failure throttle sees it.
    pub source: String,
    next_id: u64,
}

impl InProcess {
    /// A server over `db` (with the conformance pack) whose clock stands at `start`, for a
    /// client presenting `token`.
    pub fn start(db: &TestDb, token: Option<&str>, start: i64) -> InProcess {
        Self::start_with_config(db, token, start, None)
    }

    /// [`InProcess::start`] with the configuration file at `config` (its backends opened on
    /// the manual clock too).
    pub fn start_with_config(
        db: &TestDb,
        token: Option<&str>,
        start: i64,
        config: Option<&std::path::Path>,
    ) -> InProcess {
        let flags = Overrides {
            database: Some(db.database_arg().into()),
            conformance_pack: Some(true),
            ..Overrides::default()
        };
        let config = Config::load(config, &[], &flags).expect("config");
        let store = Store::open_database(
            &db.database(),
            &tollgate::store::StoreOptions::from_config(&config, false),
        )
        .expect("store");
        let clock = ManualClock::at_unix_secs(start);
        let server =
            tollgate::ops::assemble::build_server_with_clock(&config, store, clock.clock())
                .expect("server");
        InProcess {
            clock,
            server,
            session: Session::new(),
            token: token.map(str::to_owned),
            source: "stdio:in-process".to_owned(),
            next_id: 0,
        }
    }

    /// The server, for what the tests reach directly (the token endpoint).
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// Moves the clock to `secs` unix seconds.
    pub fn at(&self, secs: i64) {
        self.clock.set_unix_secs(secs);
    }

    /// Presents `token` from now on.
    pub fn present(&mut self, token: Option<&str>) {
        self.token = token.map(str::to_owned);
    }

    /// Hands `messages` to the dispatcher as one read; the responses, in answer order.
    pub fn send_many(&self, messages: &[Value]) -> Vec<Value> {
        let messages: Vec<Message> = messages
            .iter()
            .map(|m| Message::parse(&serde_json::to_vec(m).expect("serialize")))
            .collect();
        let env = Env {
            session: &self.session,
            notifier: &Discard,
            transport: Transport::Stdio,
            token: self.token.as_deref(),
            dev_credential: None,
            source: self.source.clone(),
            idempotency_header: None,
            http: None,
            session_id: None,
        };
        let answers = Mutex::new(Vec::new());
        self.server.handle(messages, &env, &|answer| {
            answers.lock().expect("answers").push(answer.body);
        });
        answers.into_inner().expect("answers")
    }

    /// Sends a request with a fresh id and returns its response.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut answers = self.send_many(&[json!({"jsonrpc": "2.0", "id": id, "method": method,
                                                  "params": params})]);
        assert_eq!(answers.len(), 1, "{answers:?}");
        let response = answers.remove(0);
        assert_eq!(response["id"], json!(id), "{method}: {response}");
        response
    }

    /// A request of the 2026-07-28 era (`_meta` names the protocol version).
    pub fn modern_request(&mut self, method: &str, mut params: Value) -> Value {
        params["_meta"] = modern_meta();
        self.request(method, params)
    }

    /// Performs the handshake at `version`.
    pub fn initialize(&mut self, version: &str) -> Value {
        let response = self.request(
            "initialize",
            json!({"protocolVersion": version, "capabilities": {},
                   "clientInfo": {"name": "tests", "version": "0"}}),
        );
        self.send_many(&[json!({"jsonrpc": "2.0", "method": "notifications/initialized"})]);
        response["result"].clone()
    }

    /// Calls a tool on the handshake era.
    pub fn call_tool(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
    }
}

/// The admin key printed by `tollgate init`.
fn admin_key(db: &TestDb) -> String {
    db.admin_key.clone().expect("admin key")
}

/// The public id inside a `tg_live_<public id>_<secret>` token.
fn public_id(token: &str) -> String {
    token.split('_').nth(2).expect("public id").to_owned()
}

/// Runs a `tollgate` command that must succeed.
fn run_ok(db: &TestDb, args: &[&str]) {
    let out = db.run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The budget entry of `name` in a successful call's `_meta`.
fn bucket(response: &Value, name: &str) -> Value {
    response["result"]["_meta"]["dev.tollgate/ratelimit"]["buckets"]
        .as_array()
        .unwrap_or_else(|| panic!("no budget in {response}"))
        .iter()
        .find(|b| b["bucket"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} bucket in {response}"))
}

/// Asserts a `-32006` refusal with exactly these fields.
fn assert_limited(response: &Value, bucket: &str, limit: u64, reset: i64, retry_after: i64) {
    assert_error(response, -32006, "rate_limited", 429, 3001, true);
    let data = &response["error"]["data"];
    assert_eq!(
        (
            &data["bucket"],
            &data["limit"],
            &data["reset"],
            &data["retry_after"]
        ),
        (
            &json!(bucket),
            &json!(limit),
            &json!(reset),
            &json!(retry_after)
        ),
        "{response}"
    );
}

// ---- Rate windows ---------------------------------------------------------------------------

#[test]
fn a_minute_window_refuses_to_its_last_second_and_resets_at_its_edge() {
    let db = TestDb::new();
    let token = admin_key(&db);
    run_ok(
        &db,
        &[
            "limits",
            "set",
            "--credential",
            &public_id(&token),
            "--category",
            "read",
            "--per-minute",
            "5",
        ],
    );
    let mut client = InProcess::start(&db, Some(&token), T0 + 10);
    client.initialize("2025-11-25");
    for left in (0..5).rev() {
        let response = client.call_tool("search_clients", json!({}));
        assert_eq!(
            bucket(&response, "read"),
            json!({"bucket": "read", "limit": 5, "remaining": left, "reset": T0 + 60,
                   "window_secs": 60}),
            "{response}"
        );
    }
    assert_limited(
        &client.call_tool("search_clients", json!({})),
        "read",
        5,
        T0 + 60,
        50,
    );
    client.at(T0 + 59);
    assert_limited(
        &client.call_tool("search_clients", json!({})),
        "read",
        5,
        T0 + 60,
        1,
    );
    // The refused calls were charged, but to the window that ended: the new one is empty.
    client.at(T0 + 60);
    let response = client.call_tool("search_clients", json!({}));
    assert_eq!(
        bucket(&response, "read"),
        json!({"bucket": "read", "limit": 5, "remaining": 4, "reset": T0 + 120,
               "window_secs": 60}),
        "{response}"
    );
}

#[test]
fn the_plan_window_is_the_clock_hour() {
    let db = TestDb::new();
    let token = admin_key(&db);
    run_ok(&db, &["limits", "set", "--plan", "pro", "--per-hour", "2"]);
    let mut client = InProcess::start(&db, Some(&token), T0 + 3000);
    for _ in 0..2 {
        let response = client.modern_request(
            "tools/call",
            json!({"name": "search_clients", "arguments": {}}),
        );
        assert_eq!(bucket(&response, "plan")["reset"], T0 + 3600, "{response}");
    }
    let refused = client.modern_request(
        "tools/call",
        json!({"name": "search_clients", "arguments": {}}),
    );
    assert_limited(&refused, "plan", 2, T0 + 3600, 600);
    client.at(T0 + 3600);
    let admitted = client.modern_request(
        "tools/call",
        json!({"name": "search_clients", "arguments": {}}),
    );
    assert_eq!(
        bucket(&admitted, "plan"),
        json!({"bucket": "plan", "limit": 2, "remaining": 1, "reset": T0 + 7200,
               "window_secs": 3600}),
        "{admitted}"
    );
}

// ---- The authentication-failure throttle ------------------------------------------------------

/// A well-formed token nobody issued.
fn stranger_token(n: usize) -> String {
    format!("tg_live_{n:020x}_{}", "Q".repeat(43))
}

#[test]
fn the_failure_throttle_allows_ten_failures_a_minute_per_source_and_resets_at_the_edge() {
    let db = TestDb::new();
    let mut client = InProcess::start(&db, None, T0 + 45);
    for n in 0..10 {
        client.present(Some(&stranger_token(n)));
        let response = client.modern_request("tools/list", json!({}));
        assert_error(&response, -32001, "invalid_token", 401, 1101, false);
    }
    client.present(Some(&stranger_token(10)));
    let throttled = client.modern_request("tools/list", json!({}));
    assert_limited(&throttled, "auth", 10, T0 + 60, 15);
    // Another source has its own allowance.
    client.source = "stdio:another".to_owned();
    let other = client.modern_request("tools/list", json!({}));
    assert_error(&other, -32001, "invalid_token", 401, 1101, false);
    client.source = "stdio:in-process".to_owned();
    client.at(T0 + 59);
    assert_limited(
        &client.modern_request("tools/list", json!({})),
        "auth",
        10,
        T0 + 60,
        1,
    );
    client.at(T0 + 60);
    let again = client.modern_request("tools/list", json!({}));
    assert_error(&again, -32001, "invalid_token", 401, 1101, false);
}

// ---- Credentials that expire --------------------------------------------------------------------

#[test]
fn an_oauth_access_token_works_until_its_expiry_and_not_a_second_longer() {
    let db = TestDb::new();
    let printed = db.run_json(&[
        "client", "create", "--name", "machine", "--scopes", "*", "--json",
    ]);
    let client_id = printed["client_id"].as_str().expect("client_id");
    let secret = tollgate::guards::auth::Secret::new(
        printed["client_secret"]
            .as_str()
            .expect("client_secret")
            .to_owned(),
    );
    let mut client = InProcess::start(&db, None, T0);
    let server = client.server();
    let oauth = server
        .guards()
        .authenticator()
        .verify_client_secret(client_id, &secret, "test")
        .expect("the client secret verifies");
    let issued = tollgate::guards::auth::issue_access_token(
        server.store(),
        &oauth,
        &[],
        tollgate::oauth::CLIENT_TOKEN_TTL,
        server.clock(),
    )
    .expect("access token");
    assert_eq!(issued.expires_at, Some(T0 + 3600));
    client.present(Some(issued.token.expose()));
    client.at(T0 + 3599);
    let listed = client.modern_request("tools/list", json!({}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    client.at(T0 + 3600);
    let expired = client.modern_request("tools/list", json!({}));
    assert_error(&expired, -32001, "invalid_token", 401, 1101, false);
    assert_eq!(
        expired["error"]["data"]["details"]["reason"], "expired",
        "{expired}"
    );
}

// ---- Idempotency leases ---------------------------------------------------------------------

#[test]
fn an_idempotency_key_held_by_a_dead_call_is_free_again_when_its_lease_ends() {
    use tollgate::guards::idempotency::{Claim, LEASE_SECS, Ledger};
    let db = TestDb::new();
    let token = admin_key(&db);
    let mut client = InProcess::start(&db, Some(&token), T0);
    client.initialize("2025-11-25");
    // A call that claimed the key and died before committing: a ledger on the same clock.
    let tools = tollgate::tools::invoicing::tools();
    let spec = tools
        .iter()
        .find(|t| t.spec().name == "create_client")
        .expect("create_client")
        .spec();
    let args = json!({"name": "Lease Ltd", "idempotency_key": "lease-1"});
    let holder = tollgate::guards::auth::Principal {
        credential_id: public_id(&token),
        client_id: None,
        scopes: vec!["*".to_owned()],
        mode: tollgate::guards::auth::Mode::Live,
        guard_channel: None,
        installation: tollgate::guards::auth::Mode::Live,
        roles: Vec::new(),
    };
    let ledger = Ledger::new(client.server().store().clone(), client.clock.clock());
    let map = args.as_object().expect("object").clone();
    let claim = ledger.claim(&holder, spec, &map, Some("lease-1".to_owned()));
    assert!(matches!(claim, Ok(Claim::Fresh(_))));

    client.at(T0 + LEASE_SECS - 1);
    let held = client.call_tool("create_client", args.clone());
    assert_error(&held, -32007, "idempotency_key_in_use", 409, 3202, true);
    assert_eq!(held["error"]["data"]["retry_after"], 1, "{held}");
    client.at(T0 + LEASE_SECS);
    let taken_over = client.call_tool("create_client", args);
    assert_eq!(taken_over["result"]["isError"], false, "{taken_over}");
}

// ---- Invoicing dates --------------------------------------------------------------------------

#[test]
fn invoices_are_dated_by_the_server_clock_in_utc() {
    let db = TestDb::new();
    let token = admin_key(&db);
    // 2027-03-31T23:59:59Z: the last second of a month.
    let last_second = 1_806_537_599;
    let mut client = InProcess::start(&db, Some(&token), last_second);
    client.initialize("2025-11-25");
    let created = client.call_tool(
        "create_client",
        json!({"name": "Dated SL", "tax_id": "B12345674", "idempotency_key": "c1"}),
    );
    let client_id = created["result"]["structuredContent"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no client id in {created}"))
        .to_owned();
    let draft = client.call_tool(
        "create_invoice",
        json!({"client_id": client_id, "idempotency_key": "i1",
               "lines": [{"description": "Work", "quantity": 1, "unit_price_cents": 10_000,
                          "vat_rate": 21}]}),
    );
    let invoice_id = draft["result"]["structuredContent"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no invoice id in {draft}"))
        .to_owned();
    let issued = client.call_tool(
        "issue_invoice",
        json!({"invoice_id": invoice_id, "idempotency_key": "x1"}),
    );
    let invoice = &issued["result"]["structuredContent"];
    assert_eq!(invoice["issue_date"], "2027-03-31", "{issued}");
    // A second later it is April: a payment without a date is paid today.
    client.at(last_second + 1);
    let paid = client.call_tool(
        "record_payment",
        json!({"invoice_id": invoice_id, "amount_cents": 100, "idempotency_key": "p1"}),
    );
    assert_eq!(
        paid["result"]["structuredContent"]["payment"]["paid_on"], "2027-04-01",
        "{paid}"
    );
}

// ---- The token endpoint's limits --------------------------------------------------------------

/// `POST /oauth/token` with HTTP Basic `id:secret` from `source`: (status, body).
fn token_request(
    client: &InProcess,
    endpoints: &tollgate::oauth::AuthorizationServer,
    source: &str,
    (id, secret): (&str, &str),
) -> (u16, Value) {
    use base64::Engine as _;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}"));
    let headers = vec![
        ("authorization".to_owned(), format!("Basic {basic}")),
        (
            "content-type".to_owned(),
            "application/x-www-form-urlencoded".to_owned(),
        ),
    ];
    let scopes = Vec::new();
    let ctx = tollgate::oauth::Context {
        issuer: "http://127.0.0.1:8787",
        source,
        auth: client.server().guards().authenticator(),
        locale: client.server().locale(),
        scopes: &scopes,
        headers: &headers,
    };
    match endpoints.token(&ctx, b"grant_type=client_credentials") {
        tollgate::oauth::Reply::Json { status, body, .. } => (status, body),
        other => panic!("the token endpoint answered {other:?}"),
    }
}

/// The authorization server of `client`'s store, on its clock (the front door off).
fn token_endpoint(client: &InProcess) -> tollgate::oauth::AuthorizationServer {
    let server = client.server();
    tollgate::oauth::AuthorizationServer::start(
        tollgate::config::OAuthServerConfig::default(),
        server.store().clone(),
        server.clock().clone(),
        None,
    )
    .expect("authorization server")
}

/// `(status, bucket, reset, retry_after)` of a token-endpoint answer.
fn token_refusal(answer: &(u16, Value)) -> (u16, Value, Value, Value) {
    let (status, body) = answer;
    (
        *status,
        body["bucket"].clone(),
        body["reset"].clone(),
        body["retry_after"].clone(),
    )
}

#[test]
fn the_token_endpoint_throttles_the_stranger_never_the_client() {
    let db = TestDb::new();
    let printed = db.run_json(&[
        "client", "create", "--name", "machine", "--scopes", "*", "--json",
    ]);
    let id = printed["client_id"].as_str().expect("client_id");
    let secret = printed["client_secret"].as_str().expect("client_secret");
    let wrong = "tg_cs_wrongwrongwrongwrongwrong";
    let client = InProcess::start(&db, None, T0 + 10);
    let endpoints = token_endpoint(&client);
    let stranger = "http:198.51.100.66";
    let answers: Vec<(u16, Value)> = (0..40)
        .map(|_| token_request(&client, &endpoints, stranger, (id, wrong)))
        .collect();
    // Ten wrong secrets a minute window of the failure throttle, then its refusal until
    // the window's end; past 30 requests a minute, the source's own limit.
    for answer in &answers[..10] {
        assert_eq!(answer.0, 401, "{answer:?}");
        assert_eq!(answer.1["error"], "invalid_client", "{answer:?}");
    }
    for answer in &answers[10..30] {
        assert_eq!(
            token_refusal(answer),
            (429, json!("auth"), json!(T0 + 60), json!(50)),
            "{answer:?}"
        );
    }
    for answer in &answers[30..] {
        assert_eq!(
            token_refusal(answer),
            (429, json!("oauth_token"), json!(T0 + 70), json!(60)),
            "{answer:?}"
        );
    }
    // The client itself, from its own address, is not locked out.
    let granted = token_request(&client, &endpoints, "http:198.51.100.77", (id, secret));
    assert_eq!(granted.0, 200, "{granted:?}");
    // The stranger's source waits out its own limit, a minute from its first request.
    client.at(T0 + 60);
    let waiting = token_request(&client, &endpoints, stranger, (id, secret));
    assert_eq!(
        token_refusal(&waiting),
        (429, json!("oauth_token"), json!(T0 + 70), json!(10)),
        "{waiting:?}"
    );
    client.at(T0 + 70);
    let later = token_request(&client, &endpoints, stranger, (id, secret));
    assert_eq!(later.0, 200, "{later:?}");
}

// ---- Audit retention ----------------------------------------------------------------------------

#[test]
fn the_audit_retention_counts_back_from_the_server_clock() {
    const DAY_MS: i64 = 86_400_000;
    let db = TestDb::new();
    let client = InProcess::start(&db, None, T0);
    let now_ms = T0 * 1000;
    // Just past 30 days before the clock, exactly 30 days, and within.
    for (at, tool) in [
        (now_ms - 30 * DAY_MS - 1, "past"),
        (now_ms - 30 * DAY_MS, "edge"),
        (now_ms - DAY_MS, "recent"),
    ] {
        db.sql(&format!(
            "INSERT INTO audit_log (at, request_id, tool, outcome, duration_us, transport) \
             VALUES ({at}, '1', '{tool}', 'ok', 1, 'stdio')"
        ));
    }
    let store = client.server().store().clone();
    tollgate::guards::audit::prune_in_background(&store, 30, client.server().clock().clone());
    let tools = || -> Vec<String> {
        db.sql_rows("SELECT tool FROM audit_log ORDER BY id")
            .into_iter()
            .filter_map(|row| row.into_iter().next().flatten())
            .collect()
    };
    // The pruner's first pass starts at once, on a thread of its own: poll for its result.
    let deadline = std::time::Instant::now() + crate::util::READ_TIMEOUT;
    while tools().len() > 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "not pruned: {:?}",
            tools()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(tools(), ["edge", "recent"]);
}
