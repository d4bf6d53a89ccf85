//! Test mode's sandbox (issue 13, finding 13): `tg_test_` keys work on a book of their own
//! — same tables, separate rows — and never see or change the live book, nor the live book
//! theirs. Every `tools/call` result names the book that served it in
//! `_meta["dev.tollgate/mode"]`, over stdio and HTTP, on success, `isError` and replay.
//! Entering test mode fills the sandbox, `tollgate sandbox reset` restores it, and a
//! database of the previous schema migrates with its rows in the live book.

use serde_json::{Value, json};

use crate::util::{HttpServer, StdioServer, TestDb, assert_error};

/// The handshake revision the tests speak.
const VERSION: &str = "2025-11-25";
/// The `_meta` key of the serving book.
const MODE: &str = "dev.tollgate/mode";

/// A `tg_test_` key with every scope; the company stays as it is.
fn test_key(db: &TestDb) -> String {
    let printed = db.run_json(&[
        "key", "create", "--name", "sandbox", "--scopes", "*", "--test", "--json",
    ]);
    let token = printed["token"].as_str().expect("token").to_owned();
    assert!(token.starts_with("tg_test_"), "{token}");
    token
}

/// Runs a command that must succeed; gives (stdout, stderr).
fn run_ok(db: &TestDb, argv: &[&str]) -> (String, String) {
    let out = db.run(argv);
    assert!(
        out.status.success(),
        "{argv:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8(out.stdout).expect("utf-8 stdout"),
        String::from_utf8(out.stderr).expect("utf-8 stderr"),
    )
}

/// A stdio session of one key.
struct Book {
    server: StdioServer,
    /// "live" or "test": what every result must say.
    mode: &'static str,
}

impl Book {
    fn open(db: &TestDb, token: &str) -> Book {
        let mode = if token.starts_with("tg_test_") {
            "test"
        } else {
            "live"
        };
        let mut server = StdioServer::start_with_token(db, Some(token), &[]);
        server.initialize(VERSION);
        Book { server, mode }
    }

    /// The result of a call, whatever it is; checks its mode marker.
    fn result(&mut self, name: &str, arguments: Value) -> Value {
        let response = self.server.call_tool(name, arguments);
        let result = response["result"].clone();
        assert_eq!(
            result["_meta"][MODE],
            json!(self.mode),
            "{name}: {response}"
        );
        result
    }

    /// A call that must succeed: its `structuredContent`.
    fn ok(&mut self, name: &str, arguments: Value) -> Value {
        let result = self.result(name, arguments);
        assert_eq!(result["isError"], json!(false), "{name}: {result}");
        result["structuredContent"].clone()
    }

    /// A call that must end in an `isError` result with this catalog code.
    fn tool_error(&mut self, name: &str, arguments: Value, code: &str) -> Value {
        let result = self.result(name, arguments);
        assert_eq!(result["isError"], json!(true), "{name}: {result}");
        assert_eq!(
            result["_meta"]["dev.tollgate/error"]["code"],
            json!(code),
            "{name}: {result}"
        );
        result
    }

    fn client(&mut self, name: &str, tax_id: &str) -> String {
        let created = self.ok("create_client", json!({ "name": name, "tax_id": tax_id }));
        created["id"].as_str().expect("id").to_owned()
    }

    /// Drafts and issues a one-line invoice for `client`; gives (id, number).
    fn issued_invoice(&mut self, client: &str, key: &str) -> (String, String) {
        let draft = self.ok(
            "create_invoice",
            json!({ "client_id": client, "lines": [
                { "description": "Consulting", "quantity": 1, "unit_price_cents": 10_000,
                  "vat_rate": 21 } ] }),
        );
        let id = draft["id"].as_str().expect("id").to_owned();
        let issued = self.ok(
            "issue_invoice",
            json!({ "invoice_id": id, "idempotency_key": key }),
        );
        let number = issued["number"].as_str().expect("number").to_owned();
        (id, number)
    }

    /// The ids of `search_clients` for a query.
    fn clients_matching(&mut self, query: &str) -> Vec<String> {
        let found = self.ok("search_clients", json!({ "query": query }));
        ids(&found)
    }
}

fn ids(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|v| v["id"].as_str().expect("id").to_owned())
        .collect()
}

/// A company in test mode with an empty sandbox and a test key: (db, live key, test key).
fn test_mode_company() -> (TestDb, String, String) {
    let db = TestDb::new();
    let live = db.admin_key.clone().expect("admin key");
    let test = test_key(&db);
    run_ok(&db, &["company", "set", "--mode", "test"]);
    run_ok(&db, &["sandbox", "reset", "--empty"]);
    (db, live, test)
}

#[test]
fn a_test_key_and_a_live_key_never_see_each_others_rows() {
    let (db, live_key, test_key) = test_mode_company();
    let mut test = Book::open(&db, &test_key);
    let mut live = Book::open(&db, &live_key);

    let test_client = test.client("Sandbox Client SL", "B12345674");
    let (test_invoice, test_number) = test.issued_invoice(&test_client, "t-1");
    assert_eq!(test_number, "F-000001");

    // The live key sees none of it.
    assert!(live.clients_matching("Sandbox").is_empty());
    assert!(live.clients_matching("B12345674").is_empty());
    let listed = live.ok("search_invoices", json!({}));
    assert!(ids(&listed).is_empty(), "{listed}");
    let missing = live.tool_error(
        "get_invoice",
        json!({ "invoice_id": test_invoice }),
        "invoice_not_found",
    );
    assert_eq!(
        missing["_meta"]["dev.tollgate/error"]["param"],
        "invoice_id"
    );
    live.tool_error(
        "get_client",
        json!({ "client_id": test_client }),
        "client_not_found",
    );
    live.tool_error(
        "create_invoice",
        json!({ "client_id": test_client, "lines": [
            { "description": "x", "quantity": 1, "unit_price_cents": 100, "vat_rate": 21 } ] }),
        "client_not_found",
    );

    // The same tax id exists once in each book; numbering runs on its own in each.
    let live_client = live.client("Live Client SL", "B12345674");
    let (live_invoice, live_number) = live.issued_invoice(&live_client, "l-1");
    assert_eq!(live_number, "F-000001");
    let (_, second_test) = test.issued_invoice(&test_client, "t-2");
    assert_eq!(second_test, "F-000002");
    let (_, second_live) = live.issued_invoice(&live_client, "l-2");
    assert_eq!(second_live, "F-000002");
    let (_, third_test) = test.issued_invoice(&test_client, "t-3");
    assert_eq!(third_test, "F-000003", "gapless in the test book");

    // Within one book the tax id is still unique.
    let twice = test.tool_error(
        "create_client",
        json!({ "name": "Again", "tax_id": "B12345674" }),
        "tax_id_already_exists",
    );
    assert_eq!(
        twice["_meta"]["dev.tollgate/error"]["details"]["existing_resource_id"],
        json!(test_client)
    );

    // And vice versa: the test key sees nothing of the live book.
    assert_eq!(
        test.clients_matching("B12345674"),
        vec![test_client.clone()]
    );
    assert!(test.clients_matching("Live Client").is_empty());
    test.tool_error(
        "get_invoice",
        json!({ "invoice_id": live_invoice }),
        "invoice_not_found",
    );
    let test_invoices = test.ok("search_invoices", json!({}));
    assert_eq!(ids(&test_invoices).len(), 3);
    let live_invoices = live.ok("search_invoices", json!({}));
    assert_eq!(ids(&live_invoices).len(), 2);
    let paid = test.ok(
        "record_payment",
        json!({ "invoice_id": test_invoice, "amount_cents": 12_100, "paid_on": "2026-01-01",
                "method": "transfer", "idempotency_key": "p-1" }),
    );
    assert_eq!(paid["invoice"]["id"], json!(test_invoice));
    assert_eq!(paid["invoice"]["status"], "paid");
    let payments = live.ok("list_payments", json!({}));
    assert!(ids(&payments).is_empty(), "{payments}");
}

#[test]
fn replays_name_their_book_and_issue_dates_are_ordered_per_book() {
    let (db, live_key, test_key) = test_mode_company();
    for (token, mode) in [(test_key.as_str(), "test"), (live_key.as_str(), "live")] {
        let mut book = Book::open(&db, token);
        let client = book.client("Replay SL", "A58818501");
        let (invoice, number) = book.issued_invoice(&client, "same-key");
        // The retry of the same call replays its stored result, marked with its book.
        let replay = book.result(
            "issue_invoice",
            json!({ "invoice_id": invoice, "idempotency_key": "same-key" }),
        );
        assert_eq!(
            replay["_meta"]["dev.tollgate/idempotentReplay"],
            json!(true)
        );
        assert_eq!(replay["structuredContent"]["number"], json!(number));
        assert_eq!(replay["_meta"][MODE], json!(mode));
    }
    // The test book issued today; the live book's series is its own, so an earlier date
    // passes there, and only a date before the live book's own last one is refused.
    let mut live = Book::open(&db, &live_key);
    let client = live.client("Dates SL", "B12345674");
    let draft = |live: &mut Book| {
        live.ok(
            "create_invoice",
            json!({ "client_id": client, "series": "D", "lines": [
                { "description": "x", "quantity": 1, "unit_price_cents": 100, "vat_rate": 21 } ] }),
        )["id"]
            .clone()
    };
    let mut test = Book::open(&db, &test_key);
    let test_client = test.client("Dates SL", "B12345674");
    let test_draft = test.ok(
        "create_invoice",
        json!({ "client_id": test_client, "series": "D", "lines": [
            { "description": "x", "quantity": 1, "unit_price_cents": 100, "vat_rate": 21 } ] }),
    );
    test.ok(
        "issue_invoice",
        json!({ "invoice_id": test_draft["id"], "issue_date": "2030-06-01",
                "idempotency_key": "d-test" }),
    );
    let earlier = draft(&mut live);
    let issued = live.ok(
        "issue_invoice",
        json!({ "invoice_id": earlier, "issue_date": "2030-01-01", "idempotency_key": "d-1" }),
    );
    assert_eq!(issued["number"], "D-000001");
    let backwards = draft(&mut live);
    let response = live.server.call_tool(
        "issue_invoice",
        json!({ "invoice_id": backwards, "issue_date": "2029-12-31",
                "idempotency_key": "d-2" }),
    );
    assert_error(
        &response,
        -32008,
        "mcp_guardrail_violation",
        422,
        3301,
        false,
    );
}

#[test]
fn the_mode_marker_is_right_over_http_for_both_kinds_of_key() {
    let (db, live_key, test_key) = test_mode_company();
    let server = HttpServer::start(&db, &[]);
    for (token, mode) in [(test_key.as_str(), "test"), (live_key.as_str(), "live")] {
        let auth = format!("Bearer {token}");
        let call = |id: i64, name: &str, arguments: Value| {
            let mut meta = crate::util::modern_meta();
            meta["dev.tollgate/idempotencyKey"] = json!(format!("http-{mode}-{id}"));
            server
                .post_mcp(
                    &[
                        ("Authorization", auth.as_str()),
                        ("MCP-Protocol-Version", "2026-07-28"),
                        ("Mcp-Method", "tools/call"),
                        ("Mcp-Name", name),
                    ],
                    &json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
                             "params": { "name": name, "arguments": arguments, "_meta": meta } }),
                )
                .json()
        };
        let created = call(
            1,
            "create_client",
            json!({ "name": format!("HTTP {mode}") }),
        );
        assert_eq!(created["result"]["isError"], json!(false), "{created}");
        assert_eq!(created["result"]["_meta"][MODE], json!(mode), "{created}");
        let missing = call(
            2,
            "get_client",
            json!({ "client_id": "cli_0190a0a0-a0a0-7000-8000-00000000dead" }),
        );
        assert_eq!(missing["result"]["isError"], json!(true), "{missing}");
        assert_eq!(missing["result"]["_meta"][MODE], json!(mode), "{missing}");
        let found = call(3, "search_clients", json!({ "query": "HTTP" }));
        let names: Vec<&str> = found["result"]["structuredContent"]["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|c| c["name"].as_str().expect("name"))
            .collect();
        assert_eq!(names, vec![format!("HTTP {mode}")], "{found}");
    }
}

#[test]
fn entering_test_mode_fills_the_sandbox_with_a_copy_and_reset_restores_it() {
    let db = TestDb::with_init_args(&["--demo"]);
    let live_key = db.admin_key.clone().expect("admin key");
    let test_key = test_key(&db);
    let before = db.run_json(&["sandbox", "show", "--json"]);
    assert_eq!(before["mode"], "live");
    assert_eq!(before["test"]["clients"], 0);
    assert_eq!(before["live"]["clients"], 5);

    let (_, note) = run_ok(&db, &["company", "set", "--mode", "test"]);
    assert!(
        note.contains("a copy of the live book (5 clients, 7 invoices, 3 payments)"),
        "{note}"
    );
    let mut live = Book::open(&db, &live_key);
    let live_ids = ids(&live.ok("search_clients", json!({})));
    let mut test = Book::open(&db, &test_key);
    assert_eq!(ids(&test.ok("search_clients", json!({}))), live_ids);

    // Work in the sandbox: a new client, a voided invoice, a queued message.
    let issued = test.ok("search_invoices", json!({ "status": "issued" }));
    let victim = issued["data"]
        .as_array()
        .expect("data")
        .iter()
        .find(|i| i["kind"] == "full")
        .and_then(|i| i["id"].as_str())
        .expect("an issued full invoice in the copy")
        .to_owned();
    test.ok(
        "void_invoice",
        json!({ "invoice_id": victim, "reason": "rehearsal", "idempotency_key": "v-1" }),
    );
    test.client("Only In The Sandbox", "87654321X");
    let voided = test.ok("get_invoice", json!({ "invoice_id": victim }));
    assert_eq!(voided["status"], "void");
    assert_eq!(
        live.ok("get_invoice", json!({ "invoice_id": victim }))["status"],
        "issued"
    );
    drop(test);

    let (out, _) = run_ok(&db, &["sandbox", "reset"]);
    assert!(out.contains("a copy of the live book: 5 clients"), "{out}");
    let mut test = Book::open(&db, &test_key);
    assert_eq!(ids(&test.ok("search_clients", json!({}))), live_ids);
    assert_eq!(
        test.ok("get_invoice", json!({ "invoice_id": victim }))["status"],
        "issued"
    );
    // The reset forgot the sandbox's replays: the same key voids afresh.
    let again = test.result(
        "void_invoice",
        json!({ "invoice_id": victim, "reason": "rehearsal", "idempotency_key": "v-1" }),
    );
    assert_eq!(
        again["_meta"].get("dev.tollgate/idempotentReplay"),
        None,
        "{again}"
    );
    assert_eq!(again["isError"], json!(false), "{again}");
    drop(test);

    let demo = db.run_json(&["sandbox", "reset", "--demo", "--json"]);
    assert_eq!(demo["seed"], "demo");
    assert_eq!(demo["test"]["clients"], 5);
    let empty = db.run_json(&["sandbox", "reset", "--empty", "--json"]);
    assert_eq!(empty["test"]["invoices"], 0);
    // Setting the mode it already has does not refill a sandbox emptied on purpose.
    let (_, note) = run_ok(&db, &["company", "set", "--mode", "test"]);
    assert_eq!(note, "");
    assert_eq!(
        db.run_json(&["sandbox", "show", "--json"])["test"]["clients"],
        0
    );
    let after = db.run_json(&["sandbox", "show", "--json"]);
    assert_eq!(
        after["live"], before["live"],
        "the live book is never touched"
    );
    assert_eq!(after["mode"], "test");
}

#[test]
fn prompts_and_completions_read_the_callers_book() {
    let db = TestDb::with_init_args(&["--demo"]);
    let live_key = db.admin_key.clone().expect("admin key");
    let test_key = test_key(&db);
    run_ok(&db, &["company", "set", "--mode", "test"]);
    run_ok(&db, &["sandbox", "reset", "--empty"]);
    let chase = |token: &str| {
        let mut server = StdioServer::start_with_token(&db, Some(token), &[]);
        server.initialize(VERSION);
        let prompt = server.request("prompts/get", json!({ "name": "chase_overdue_invoices" }));
        let text = prompt["result"]["messages"][0]["content"]["text"]
            .as_str()
            .expect("text")
            .to_owned();
        let completion = server.request(
            "completion/complete",
            json!({ "ref": { "type": "ref/prompt", "name": "issue_invoice_for_client" },
                    "argument": { "name": "client", "value": "" } }),
        );
        (text, completion["result"]["completion"]["total"].clone())
    };
    let (live_text, live_names) = chase(&live_key);
    let (test_text, test_names) = chase(&test_key);
    assert!(!live_text.contains(" 0 overdue"), "{live_text}");
    assert!(test_text.contains(" 0 overdue invoice(s)"), "{test_text}");
    assert_eq!(live_names, json!(5));
    assert_eq!(test_names, json!(0));
}

#[test]
fn sandbox_messages_are_never_pending_for_a_relay() {
    let (db, live_key, test_key) = test_mode_company();
    for token in [&test_key, &live_key] {
        let mut book = Book::open(&db, token);
        let client = book.ok(
            "create_client",
            json!({ "name": "Mail SL", "tax_id": "B12345674", "email": "ap@mail.example" }),
        )["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let (invoice, _) = book.issued_invoice(&client, "m-1");
        let sent = book.ok(
            "send_invoice",
            json!({ "invoice_id": invoice, "idempotency_key": "s-1" }),
        );
        assert_eq!(sent["status"], "queued");
    }
    let rows: Vec<(String, String)> = db
        .sql_rows("SELECT book, state FROM outbox ORDER BY book")
        .into_iter()
        .map(|row| {
            (
                row[0].clone().expect("book"),
                row[1].clone().expect("state"),
            )
        })
        .collect();
    let expect = [("live", "pending"), ("test", "sandboxed")];
    let expect: Vec<(String, String)> = expect
        .iter()
        .map(|(b, s)| ((*b).to_owned(), (*s).to_owned()))
        .collect();
    assert_eq!(rows, expect);
}

#[test]
fn a_test_key_on_a_live_company_stays_refused() {
    let db = TestDb::new();
    let token = test_key(&db);
    let mut server = StdioServer::start_with_token(&db, Some(&token), &[]);
    server.initialize(VERSION);
    let response = server.call_tool("search_clients", json!({}));
    assert_error(&response, -32003, "invalid_token_type", 403, 1103, false);
    assert_eq!(
        response["error"]["data"]["details"]["reason"],
        "test_key_on_live_installation"
    );
}

/// The schema at version 2 (`schema.sql` and the index step), with a company and a little
/// of every business table, as an installation before the books had it.
fn version_2_database(path: &std::path::Path) {
    let conn = rusqlite::Connection::open(path).expect("create");
    conn.execute_batch(include_str!("../schema.sql"))
        .expect("version 1");
    conn.execute_batch("DROP INDEX audit_log_by_at; DROP INDEX audit_log_by_tool;")
        .expect("version 2");
    conn.execute_batch(
        "BEGIN; PRAGMA defer_foreign_keys = ON;
         INSERT INTO company (id, name, plan_slug, created_at) VALUES (1, 'Old Co', 'pro', 1);
         INSERT INTO clients VALUES ('cli_0190a0a0-a0a0-7000-8000-00000000c001', 'Old Client SL',
             'B12345674', 'old@example.com', NULL, 1, 1);
         INSERT INTO invoice_series VALUES ('F', 1, '2026-01-10');
         INSERT INTO invoices (id, client_id, kind, status, series, number, issue_date,
             due_date, currency, gross_cents, discount_cents, subtotal_cents, vat_cents,
             withholding_cents, total_cents, paid_cents, recipient_name, recipient_tax_id,
             issued_at, created_at, updated_at)
           VALUES ('inv_0190a0a0-a0a0-7000-8000-00000000a001',
             'cli_0190a0a0-a0a0-7000-8000-00000000c001', 'full', 'issued', 'F', 'F-000001',
             '2026-01-10', '2026-02-10', 'EUR', 10000, 0, 10000, 2100, 0, 12100, 0,
             'Old Client SL', 'B12345674', 1, 1, 1);
         INSERT INTO invoice_lines VALUES ('inv_0190a0a0-a0a0-7000-8000-00000000a001', 1,
             'Consulting', 1, 10000, 0, 21, 0, 10000, 0, 10000, 2100, 0, 12100);
         COMMIT;",
    )
    .expect("rows of version 2");
    conn.pragma_update(None, "user_version", 2)
        .expect("version 2");
}

#[test]
fn a_database_of_the_previous_schema_keeps_its_rows_in_the_live_book() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = TestDb {
        path: dir.path().join("old.db"),
        dir,
        admin_key: None,
        postgres: None,
    };
    version_2_database(&db.path);
    let printed = db.run_json(&[
        "key",
        "create",
        "--name",
        "after upgrade",
        "--scopes",
        "*",
        "--json",
    ]);
    let live_key = printed["token"].as_str().expect("token").to_owned();
    let counts = db.run_json(&["sandbox", "show", "--json"]);
    assert_eq!(counts["live"]["clients"], 1);
    assert_eq!(counts["live"]["invoices"], 1);
    assert_eq!(counts["live"]["invoice_lines"], 1);
    assert_eq!(counts["test"]["invoices"], 0);

    let mut live = Book::open(&db, &live_key);
    let invoice = live.ok(
        "get_invoice",
        json!({ "invoice_id": "inv_0190a0a0-a0a0-7000-8000-00000000a001" }),
    );
    assert_eq!(invoice["number"], "F-000001");
    assert_eq!(invoice["lines"].as_array().map(Vec::len), Some(1));
    // Numbering goes on from the migrated series, gapless.
    let (_, number) = live.issued_invoice("cli_0190a0a0-a0a0-7000-8000-00000000c001", "after");
    assert_eq!(number, "F-000002");
    drop(live);

    // The first switch to test mode copies the migrated live book into the sandbox.
    let test_key = test_key(&db);
    run_ok(&db, &["company", "set", "--mode", "test"]);
    let mut test = Book::open(&db, &test_key);
    let copied = test.ok(
        "get_invoice",
        json!({ "invoice_id": "inv_0190a0a0-a0a0-7000-8000-00000000a001" }),
    );
    assert_eq!(copied["number"], "F-000001");
    let (_, next) = test.issued_invoice("cli_0190a0a0-a0a0-7000-8000-00000000c001", "sandbox");
    assert_eq!(next, "F-000003", "the copy goes on from the live series");
}
