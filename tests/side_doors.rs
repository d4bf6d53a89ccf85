//! The methods besides `tools/call` that read business data pass the same guards as the
//! read tool serving that data: `completion/complete` of a client argument (the data of
//! `search_clients`, `clients:read`) and `prompts/get chase_overdue_invoices` (the data of
//! `search_invoices`, `invoices:read`) are charged to the `read` buckets first, refused
//! with `-32005 insufficient_scope` without the scope, audited either way, and hidden from
//! `prompts/list` when the key could not use them — over stdio and HTTP, on both protocol
//! eras. Prompts and completions that read nothing stay open to any authenticated key.

// Without the fixtures, the tests that need them are compiled out (`cargo test
// --features conformance-pack` runs them), and so may some of their helpers.
#![cfg_attr(not(feature = "conformance-pack"), allow(unused_imports, dead_code))]

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::clock::{InProcess, T0};
use crate::util::{HttpResponse, HttpServer, Key, StdioServer, TestDb, assert_error, modern_meta};

fn create_key(db: &TestDb, scopes: &str) -> Key {
    db.create_key("side door", scopes, &[])
}

/// The scope of the key the side doors used to serve everything to.
const REPORTS_ONLY: &str = "reports:generate";
/// A key holding the scopes of the data the prompts read.
const READER: &str = "reports:generate,clients:read,invoices:read";
/// Audit name of the client completion of `issue_invoice_for_client`.
const CLIENT_COMPLETION: &str = "completion/complete issue_invoice_for_client.client";
/// Audit name of the chase prompt.
const CHASE: &str = "prompts/get chase_overdue_invoices";
/// The `_meta` key of the remaining budget.
const BUDGET: &str = "dev.tollgate/ratelimit";

/// `tollgate limits set --credential <id> --category read --per-minute <n>`.
fn limit_reads(db: &TestDb, key: &Key, per_minute: u32) {
    db.limit_per_minute(&key.id, "read", per_minute.into());
}

/// `(tool, outcome)` of the audit rows of `key`, newest first.
fn audit_rows(db: &TestDb, key: &Key) -> Vec<(String, String)> {
    let rows = db.run_json(&["audit", "--credential", &key.id, "--json"]);
    rows.as_array()
        .expect("audit rows")
        .iter()
        .map(|r| {
            (
                r["tool"].as_str().expect("tool").to_owned(),
                r["outcome"].as_str().expect("outcome").to_owned(),
            )
        })
        .collect()
}

fn rows(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(t, o)| ((*t).to_owned(), (*o).to_owned()))
        .collect()
}

// ---- Params of the side doors -------------------------------------------------------------

fn client_completion(value: &str) -> Value {
    json!({ "ref": { "type": "ref/prompt", "name": "issue_invoice_for_client" },
            "argument": { "name": "client", "value": value } })
}

fn tax_id_completion(value: &str) -> Value {
    json!({ "ref": { "type": "ref/prompt", "name": "register_client_by_tax_id" },
            "argument": { "name": "tax_id", "value": value } })
}

fn chase() -> Value {
    json!({ "name": "chase_overdue_invoices", "arguments": { "tone": "firm" } })
}

// ---- One client, four ways to reach the server ----------------------------------------------

/// How a test reaches the server: stdio or HTTP, handshake era or 2026-07-28.
enum Door<'s> {
    StdioLegacy(StdioServer),
    StdioModern(StdioServer),
    HttpLegacy {
        server: &'s HttpServer,
        token: String,
        session: String,
    },
    HttpModern {
        server: &'s HttpServer,
        token: String,
    },
    /// The stdio path in-process, on a manual clock that stands still mid-window.
    InProcessLegacy(Box<InProcess>),
    InProcessModern(Box<InProcess>),
}

impl<'s> Door<'s> {
    fn stdio_legacy(db: &TestDb, key: &Key) -> Door<'s> {
        let mut server = StdioServer::start_with_token(db, Some(&key.token), &[]);
        server.initialize("2025-11-25");
        Door::StdioLegacy(server)
    }

    fn stdio_modern(db: &TestDb, key: &Key) -> Door<'s> {
        Door::StdioModern(StdioServer::start_with_token(db, Some(&key.token), &[]))
    }

    fn in_process_legacy(db: &TestDb, key: &Key) -> Door<'s> {
        let mut server = InProcess::start(db, Some(&key.token), T0 + 20);
        server.initialize("2025-11-25");
        Door::InProcessLegacy(Box::new(server))
    }

    fn in_process_modern(db: &TestDb, key: &Key) -> Door<'s> {
        Door::InProcessModern(Box::new(InProcess::start(db, Some(&key.token), T0 + 20)))
    }

    fn http_legacy(server: &'s HttpServer, key: &Key) -> Door<'s> {
        Door::HttpLegacy {
            server,
            token: key.token.clone(),
            session: server.open_session("2025-11-25", &key.token),
        }
    }

    fn http_modern(server: &'s HttpServer, key: &Key) -> Door<'s> {
        Door::HttpModern {
            server,
            token: key.token.clone(),
        }
    }

    fn http_legacy_post(&self, body: &Value) -> HttpResponse {
        let Door::HttpLegacy {
            server,
            token,
            session,
        } = self
        else {
            unreachable!("a handshake-era HTTP door")
        };
        let bearer = format!("Bearer {token}");
        server.post_mcp(
            &[
                ("Mcp-Session-Id", session.as_str()),
                ("MCP-Protocol-Version", "2025-11-25"),
                ("Authorization", bearer.as_str()),
            ],
            body,
        )
    }

    /// Sends one request and returns its JSON-RPC response.
    fn request(&mut self, method: &str, params: Value) -> Value {
        match self {
            Door::StdioLegacy(server) => server.request(method, params),
            Door::StdioModern(server) => server.request(method, with_modern_meta(params)),
            Door::InProcessLegacy(server) => server.request(method, params),
            Door::InProcessModern(server) => server.modern_request(method, params),
            Door::HttpLegacy { .. } => {
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
                http_json(&self.http_legacy_post(&body))
            }
            Door::HttpModern { server, token } => {
                let params = with_modern_meta(params);
                let bearer = format!("Bearer {token}");
                let mut headers = vec![
                    ("MCP-Protocol-Version", "2026-07-28"),
                    ("Mcp-Method", method),
                    ("Authorization", bearer.as_str()),
                ];
                if let Some(name) = params["name"].as_str().filter(|_| method == "prompts/get") {
                    headers.push(("Mcp-Name", name));
                }
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
                http_json(&server.post_mcp(&headers, &body))
            }
        }
    }

    /// The names `prompts/list` shows through this door.
    fn listed_prompts(&mut self) -> BTreeSet<String> {
        let listed = self.request("prompts/list", json!({}));
        listed["result"]["prompts"]
            .as_array()
            .unwrap_or_else(|| panic!("no prompts in {listed}"))
            .iter()
            .map(|p| p["name"].as_str().expect("name").to_owned())
            .collect()
    }
}

fn with_modern_meta(mut params: Value) -> Value {
    params["_meta"] = modern_meta();
    params
}

/// The JSON-RPC body of an HTTP answer (a JSON body, or the last message of an SSE stream).
fn http_json(response: &HttpResponse) -> Value {
    assert_eq!(
        response.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&response.body)
    );
    if response
        .header("content-type")
        .is_some_and(|ct| ct.starts_with("text/event-stream"))
    {
        return response.sse_messages().pop().expect("an SSE message");
    }
    response.json()
}

// ---- The demo's business data ---------------------------------------------------------------

/// What the demo company holds that a refused answer must never show.
struct Books {
    names: Vec<String>,
    tax_ids: Vec<String>,
    emails: Vec<String>,
    /// The sentence of the chase prompt with the overdue count and the total owed.
    overdue: String,
    /// A client with a tax id and an e-mail: its name, and the first characters of both
    /// (what the completion oracle found a client by).
    probe: (String, [String; 2]),
}

impl Books {
    /// Read with the admin key (which holds every scope).
    fn read(db: &TestDb) -> Books {
        let mut admin = StdioServer::start(db, &[]);
        admin.initialize("2025-11-25");
        let found = admin.call_tool("search_clients", json!({ "limit": 100 }));
        let clients = found["result"]["structuredContent"]["data"]
            .as_array()
            .unwrap_or_else(|| panic!("no clients in {found}"))
            .clone();
        let field = |name: &str| -> Vec<String> {
            clients
                .iter()
                .filter_map(|c| c[name].as_str().map(str::to_owned))
                .collect()
        };
        let chase = admin.request("prompts/get", chase());
        let text = chase["result"]["messages"][0]["content"]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no chase text in {chase}"));
        let overdue = text
            .split_once("there are ")
            .and_then(|(_, rest)| rest.split_once(" in total."))
            .map(|(figures, _)| figures.to_owned())
            .unwrap_or_else(|| panic!("no overdue figures in {text}"));
        let probe = clients
            .iter()
            .find_map(|c| {
                let (tax_id, email) = (c["tax_id"].as_str()?, c["email"].as_str()?);
                let prefixes = [tax_id[..5].to_owned(), email[..5].to_owned()];
                Some((c["name"].as_str()?.to_owned(), prefixes))
            })
            .unwrap_or_else(|| panic!("no client with a tax id and an e-mail in {found}"));
        let books = Books {
            names: field("name"),
            tax_ids: field("tax_id"),
            emails: field("email"),
            overdue,
            probe,
        };
        assert!(!books.names.is_empty() && !books.tax_ids.is_empty() && !books.emails.is_empty());
        assert!(
            books.overdue.starts_with("1 overdue invoice(s)"),
            "{}",
            books.overdue
        );
        books
    }

    /// The first characters of a client's tax id and of its e-mail: what the oracle took.
    fn prefixes(&self) -> [String; 2] {
        self.probe.1.clone()
    }

    /// Fails when `answer` shows anything of the books.
    fn assert_absent_from(&self, answer: &Value) {
        let text = answer.to_string();
        let shown = self
            .names
            .iter()
            .chain(&self.tax_ids)
            .chain(&self.emails)
            .chain(std::iter::once(&self.overdue))
            .chain(&self.probe.1)
            .find(|secret| text.contains(secret.as_str()));
        assert!(shown.is_none(), "{shown:?} shown in {answer}");
        assert!(!text.contains("overdue invoice"), "{answer}");
    }
}

// ---- What a key without the scopes meets ----------------------------------------------------

/// Asserts `-32005` for `required` and the reports-only key's scopes.
fn assert_refused(response: &Value, required: &str) {
    assert_error(response, -32005, "insufficient_scope", 403, 1105, false);
    let data = &response["error"]["data"];
    assert_eq!(data["required_scope"], json!(required), "{response}");
    assert_eq!(data["provided_scopes"], json!([REPORTS_ONLY]), "{response}");
}

/// Knocks on every side door with a reports-only key; returns how many calls were refused
/// (each is charged and audited), in the order of [`refused_rows`].
fn knock(door: &mut Door<'_>, books: &Books) -> usize {
    let [tax_prefix, email_prefix] = books.prefixes();
    let mut refused = 0;
    for value in ["", tax_prefix.as_str(), email_prefix.as_str()] {
        let response = door.request("completion/complete", client_completion(value));
        assert_refused(&response, "clients:read");
        books.assert_absent_from(&response);
        refused += 1;
    }
    let response = door.request("prompts/get", chase());
    assert_refused(&response, "invoices:read");
    books.assert_absent_from(&response);
    refused += 1;

    // The chase prompt is hidden; the prompts that read nothing stay listed.
    let listed = door.listed_prompts();
    assert!(!listed.contains("chase_overdue_invoices"), "{listed:?}");
    assert!(listed.contains("issue_invoice_for_client"), "{listed:?}");
    assert!(listed.contains("register_client_by_tax_id"), "{listed:?}");

    // A pure-text prompt and a completion that reads nothing answer, and show nothing.
    let register = door.request(
        "prompts/get",
        json!({ "name": "register_client_by_tax_id", "arguments": { "tax_id": tax_prefix } }),
    );
    assert!(register["result"]["messages"].is_array(), "{register}");
    let completion = door.request("completion/complete", tax_id_completion(&tax_prefix));
    assert_eq!(
        completion["result"]["completion"]["values"],
        json!([]),
        "{completion}"
    );
    books.assert_absent_from(&completion);
    refused
}

/// The audit rows [`knock`] leaves, newest first.
fn refused_rows() -> Vec<(String, String)> {
    rows(&[
        (CHASE, "insufficient_scope"),
        (CLIENT_COMPLETION, "insufficient_scope"),
        (CLIENT_COMPLETION, "insufficient_scope"),
        (CLIENT_COMPLETION, "insufficient_scope"),
    ])
}

#[test]
fn a_key_without_the_data_scopes_is_refused_over_stdio_on_both_eras_and_audited() {
    let db = TestDb::with_init_args(&["--demo"]);
    let books = Books::read(&db);
    for door in [Door::stdio_legacy, Door::stdio_modern] {
        let key = create_key(&db, REPORTS_ONLY);
        let mut door = door(&db, &key);
        knock(&mut door, &books);
        // A clean end flushes the audit writer.
        drop(door);
        assert_eq!(audit_rows(&db, &key), refused_rows());
    }
}

#[test]
fn a_key_without_the_data_scopes_is_refused_over_http_on_both_eras_and_audited() {
    let db = TestDb::with_init_args(&["--demo"]);
    let books = Books::read(&db);
    let legacy_key = create_key(&db, REPORTS_ONLY);
    let modern_key = create_key(&db, REPORTS_ONLY);
    let server = HttpServer::start(&db, &[]);
    knock(&mut Door::http_legacy(&server, &legacy_key), &books);
    knock(&mut Door::http_modern(&server, &modern_key), &books);
    // SIGTERM: a graceful stop flushes the audit writer.
    drop(server);
    assert_eq!(audit_rows(&db, &legacy_key), refused_rows());
    assert_eq!(audit_rows(&db, &modern_key), refused_rows());
}

/// Asserts `-32006` for the credential's `read` bucket at `limit`.
fn assert_read_limited(response: &Value, limit: u32) {
    assert_error(response, -32006, "rate_limited", 429, 3001, true);
    let data = &response["error"]["data"];
    assert_eq!(data["bucket"], json!("read"), "{response}");
    assert_eq!(data["limit"], json!(limit), "{response}");
}

/// Knocks with a reports-only key whose `read` bucket holds exactly the refused calls: the
/// next data read is refused `rate_limited`, until the end of the window it was charged in.
fn refused_calls_use_up_the_read_bucket(
    db: &TestDb,
    books: &Books,
    open: fn(&TestDb, &Key) -> Door<'static>,
) {
    let key = create_key(db, REPORTS_ONLY);
    let limit = 4;
    limit_reads(db, &key, limit);
    let mut door = open(db, &key);
    assert_eq!(
        knock(&mut door, books),
        usize::try_from(limit).expect("small")
    );
    let over = door.request("prompts/get", chase());
    let over_completion = door.request("completion/complete", client_completion(""));
    assert_read_limited(&over, limit);
    for refused in [&over, &over_completion] {
        assert_eq!(
            refused["error"]["data"]["reset"],
            json!(T0 + 60),
            "{refused}"
        );
        assert_eq!(
            refused["error"]["data"]["retry_after"],
            json!(40),
            "{refused}"
        );
    }
    assert_read_limited(&over_completion, limit);
    books.assert_absent_from(&over);
    books.assert_absent_from(&over_completion);
    drop(door);
    let mut expected = rows(&[(CLIENT_COMPLETION, "rate_limited"), (CHASE, "rate_limited")]);
    expected.extend(refused_rows());
    assert_eq!(audit_rows(db, &key), expected);
}

#[test]
fn refused_side_door_calls_are_charged_to_the_read_bucket_on_both_eras() {
    let db = TestDb::with_init_args(&["--demo"]);
    let books = Books::read(&db);
    let opens: [fn(&TestDb, &Key) -> Door<'static>; 2] =
        [Door::in_process_legacy, Door::in_process_modern];
    for open in opens {
        refused_calls_use_up_the_read_bucket(&db, &books, open);
    }
}

// ---- What a key with the scopes gets --------------------------------------------------------

/// The `read` bucket's `limit` in a result's `_meta`.
fn read_limit(response: &Value) -> u64 {
    response["result"]["_meta"][BUDGET]["buckets"]
        .as_array()
        .and_then(|buckets| buckets.iter().find(|b| b["bucket"] == "read"))
        .and_then(|read| read["limit"].as_u64())
        .unwrap_or_else(|| panic!("no read limit in {response}"))
}

/// The `read` bucket's `(remaining, reset)` in a result's `_meta`.
fn read_budget(response: &Value) -> (u64, u64) {
    let buckets = response["result"]["_meta"][BUDGET]["buckets"]
        .as_array()
        .unwrap_or_else(|| panic!("no budget in {response}"));
    let read = buckets
        .iter()
        .find(|b| b["bucket"] == "read")
        .unwrap_or_else(|| panic!("no read bucket in {response}"));
    (
        read["remaining"].as_u64().expect("remaining"),
        read["reset"].as_u64().expect("reset"),
    )
}

/// Asserts that `next` was charged one read after `previous`: one fewer left in the same
/// window, or the first read of the next window when a minute turned between them.
fn assert_one_more_read(previous: &Value, next: &Value) {
    let (before, window) = read_budget(previous);
    let (after, next_window) = read_budget(next);
    let expected = if window == next_window {
        before - 1
    } else {
        read_limit(next) - 1
    };
    assert_eq!(after, expected, "{previous} then {next}");
}

/// Uses the side doors with a key holding the scopes: they answer with the data, each
/// charged one read.
fn use_with_scopes(door: &mut Door<'_>, books: &Books) {
    let all = door.request("completion/complete", client_completion(""));
    let values: BTreeSet<&str> = all["result"]["completion"]["values"]
        .as_array()
        .unwrap_or_else(|| panic!("no values in {all}"))
        .iter()
        .map(|v| v.as_str().expect("a name"))
        .collect();
    let names: BTreeSet<&str> = books.names.iter().map(String::as_str).collect();
    assert_eq!(values, names, "{all}");

    let [tax_prefix, _] = books.prefixes();
    let by_tax_id = door.request("completion/complete", client_completion(&tax_prefix));
    let found = by_tax_id["result"]["completion"]["values"]
        .as_array()
        .unwrap_or_else(|| panic!("no values in {by_tax_id}"));
    assert!(found.contains(&json!(books.probe.0)), "{by_tax_id}");
    assert_one_more_read(&all, &by_tax_id);

    let chased = door.request("prompts/get", chase());
    let text = chased["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {chased}"));
    assert!(text.contains(&books.overdue), "{text}");
    assert_one_more_read(&by_tax_id, &chased);

    let listed = door.listed_prompts();
    assert!(listed.contains("chase_overdue_invoices"), "{listed:?}");
}

fn admitted_rows() -> Vec<(String, String)> {
    rows(&[
        (CHASE, "ok"),
        (CLIENT_COMPLETION, "ok"),
        (CLIENT_COMPLETION, "ok"),
    ])
}

#[test]
fn a_key_with_the_data_scopes_gets_the_data_charged_and_audited_over_stdio() {
    let db = TestDb::with_init_args(&["--demo"]);
    let books = Books::read(&db);
    for door in [Door::stdio_legacy, Door::stdio_modern] {
        let key = create_key(&db, READER);
        let mut door = door(&db, &key);
        use_with_scopes(&mut door, &books);
        drop(door);
        assert_eq!(audit_rows(&db, &key), admitted_rows());
    }
}

#[test]
fn a_key_with_the_data_scopes_gets_the_data_charged_and_audited_over_http() {
    let db = TestDb::with_init_args(&["--demo"]);
    let books = Books::read(&db);
    let legacy_key = create_key(&db, READER);
    let modern_key = create_key(&db, READER);
    let server = HttpServer::start(&db, &[]);
    use_with_scopes(&mut Door::http_legacy(&server, &legacy_key), &books);
    use_with_scopes(&mut Door::http_modern(&server, &modern_key), &books);
    drop(server);
    assert_eq!(audit_rows(&db, &legacy_key), admitted_rows());
    assert_eq!(audit_rows(&db, &modern_key), admitted_rows());
}

#[cfg(feature = "conformance-pack")]
#[test]
fn development_mode_still_serves_the_fixture_and_invoicing_prompts_and_completions() {
    let db = TestDb::with_init_args(&["--demo"]);
    let books = Books::read(&db);
    let admin_id = db.admin_key_id();
    let server = HttpServer::start(
        &db,
        &["--conformance-pack", "--dev-credential", admin_id.as_str()],
    );
    // The conformance suite sends no token: requests run as the development credential.
    let post = |id: i64, method: &str, params: Value| {
        let mut headers = vec![
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", method),
        ];
        let name = params["name"].as_str().map(str::to_owned);
        if let Some(name) = name.as_deref().filter(|_| method == "prompts/get") {
            headers.push(("Mcp-Name", name));
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method,
                          "params": with_modern_meta(params)});
        http_json(&server.post_mcp(&headers, &body))
    };
    let listed = post(1, "prompts/list", json!({}));
    let names: BTreeSet<&str> = listed["result"]["prompts"]
        .as_array()
        .unwrap_or_else(|| panic!("no prompts in {listed}"))
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    for name in [
        "test_simple_prompt",
        "test_prompt_with_arguments",
        "test_prompt_with_embedded_resource",
        "test_prompt_with_image",
        "test_input_required_result_prompt",
        "chase_overdue_invoices",
    ] {
        assert!(names.contains(name), "{name} in {names:?}");
    }
    let got = post(
        2,
        "prompts/get",
        json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "a", "arg2": "b"}}),
    );
    assert_eq!(
        got["result"]["messages"][0]["content"]["text"],
        json!("Prompt with arguments: arg1='a', arg2='b'"),
        "{got}"
    );
    let completed = post(
        3,
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"},
               "argument": {"name": "arg1", "value": "pa"}}),
    );
    assert_eq!(
        completed["result"]["completion"]["values"],
        json!(["paris", "park"]),
        "{completed}"
    );
    let chased = post(4, "prompts/get", chase());
    let text = chased["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {chased}"));
    assert!(text.contains(&books.overdue), "{text}");
}

#[test]
fn a_plan_without_the_read_tool_serves_neither_its_prompt_nor_its_completion() {
    let db = TestDb::with_init_args(&["--demo"]);
    let books = Books::read(&db);
    for tool in ["search_invoices", "search_clients"] {
        let out = db.run(&["plan", "exclude", "pro", tool]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let key = create_key(&db, READER);
    let mut door = Door::stdio_modern(&db, &key);
    let chased = door.request("prompts/get", chase());
    let completed = door.request("completion/complete", client_completion(""));
    for (response, tool) in [(&chased, "search_invoices"), (&completed, "search_clients")] {
        assert_error(response, -32004, "plan_upgrade_required", 403, 1104, false);
        let data = &response["error"]["data"];
        assert_eq!(data["required_plan"], json!("enterprise"), "{response}");
        assert_eq!(data["details"]["current_plan"], json!("pro"), "{response}");
        assert_eq!(data["details"]["tool"], json!(tool), "{response}");
        books.assert_absent_from(response);
    }
    assert!(!door.listed_prompts().contains("chase_overdue_invoices"));
    drop(door);
    assert_eq!(
        audit_rows(&db, &key),
        rows(&[
            (CLIENT_COMPLETION, "plan_upgrade_required"),
            (CHASE, "plan_upgrade_required"),
        ])
    );
}
