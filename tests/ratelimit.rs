//! Rate limits (PRODUCT.md §5): the three buckets refuse on their own with `-32006` and
//! its fields, refused calls are charged, discovery is not, a raised limit applies at once,
//! two processes on one database admit exactly the limit, and a process killed mid-load
//! loses no committed increment.
//!
//! The windows are fixed and aligned to the clock. The tests whose calls must share one
//! window run the server in-process on a manual clock that stands still mid-window
//! ([`crate::clock::InProcess`], the stdio path of the dispatcher); the tests of two
//! processes and of a killed one spawn the binary and account per window, whichever
//! windows their calls fell in. No test waits for a window and none asserts on elapsed
//! time.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::clock::{InProcess, T0};
use crate::util::{StdioServer, TestDb, assert_error};

/// The `_meta` key of the remaining budget.
const META: &str = "dev.tollgate/ratelimit";

/// The admin key printed by `tollgate init`.
fn admin_key(db: &TestDb) -> String {
    db.admin_key
        .clone()
        .expect("`tollgate init --json` prints `admin_key`")
}

/// The public id inside a `tg_live_<public id>_<secret>` token.
fn public_id(token: &str) -> String {
    token
        .split('_')
        .nth(2)
        .expect("token has a public id")
        .to_owned()
}

/// Runs `tollgate limits set <args>`, which must succeed.
/// `tollgate limits set --credential <id> --category <category> --per-minute <n>`.
fn limit_credential(db: &TestDb, id: &str, category: &str, per_minute: &str) {
    set_limit(
        db,
        &[
            "--credential",
            id,
            "--category",
            category,
            "--per-minute",
            per_minute,
        ],
    );
}

fn set_limit(db: &TestDb, args: &[&str]) {
    let mut argv = vec!["limits", "set"];
    argv.extend_from_slice(args);
    let out = db.run(&argv);
    assert!(
        out.status.success(),
        "{argv:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The first string in a JSON document that looks like a credential token.
fn find_token(value: &Value) -> Option<String> {
    match value {
        Value::String(s) if s.starts_with("tg_live_") || s.starts_with("tg_test_") => {
            Some(s.clone())
        }
        Value::Array(items) => items.iter().find_map(find_token),
        Value::Object(map) => map.values().find_map(find_token),
        _ => None,
    }
}

/// `tollgate key create` with `scopes`, optionally bound to an OAuth client; the token.
fn create_key(db: &TestDb, name: &str, scopes: &str, client: Option<&str>) -> String {
    let mut argv = vec![
        "key", "create", "--name", name, "--scopes", scopes, "--json",
    ];
    if let Some(client) = client {
        argv.extend_from_slice(&["--client", client]);
    }
    let printed = db.run_json(&argv);
    find_token(&printed).unwrap_or_else(|| panic!("no token in {printed}"))
}

/// `tollgate client create`; the client id.
fn create_client(db: &TestDb, name: &str, scopes: &str) -> String {
    let printed = db.run_json(&[
        "client", "create", "--name", name, "--scopes", scopes, "--json",
    ]);
    printed["client_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no client_id in {printed}"))
        .to_owned()
}

/// A server with the conformance pack for `token`, in-process, its clock standing 20 s
/// into a minute (and an hour) window; initialized.
fn server_for(db: &TestDb, token: &str) -> InProcess {
    let mut server = InProcess::start(db, Some(token), T0 + 20);
    server.initialize("2025-11-25");
    server
}

/// A `tollgate stdio` process with the conformance pack for `token`, initialized.
fn process_for(db: &TestDb, token: &str) -> StdioServer {
    let mut server = StdioServer::start_with_token(db, Some(token), &["--conformance-pack"]);
    server.initialize("2025-11-25");
    server
}

/// Calls the read-category fixture tool.
fn call_read_tool(server: &mut InProcess) -> Value {
    server.call_tool("test_simple_text", json!({}))
}

/// The budget entry of `bucket` in a successful call's `_meta`.
fn bucket<'a>(response: &'a Value, name: &str) -> &'a Value {
    let meta = &response["result"]["_meta"][META];
    let buckets = meta["buckets"]
        .as_array()
        .unwrap_or_else(|| panic!("no budget in {response}"));
    buckets
        .iter()
        .find(|b| b["bucket"] == name)
        .unwrap_or_else(|| panic!("no {name} bucket in {response}"))
}

fn remaining(response: &Value, name: &str) -> u64 {
    bucket(response, name)["remaining"]
        .as_u64()
        .expect("remaining")
}

/// Asserts a `-32006` refusal of `bucket` with `limit`, and `retry_after` within the window.
fn assert_rate_limited(response: &Value, bucket: &str, limit: u64, window: u64) {
    assert_error(response, -32006, "rate_limited", 429, 3001, true);
    let data = &response["error"]["data"];
    assert_eq!(data["bucket"], json!(bucket), "{response}");
    assert_eq!(data["limit"], json!(limit), "{response}");
    let reset = data["reset"].as_u64().expect("reset");
    assert_eq!(reset % window, 0, "reset is a window boundary: {response}");
    let retry_after = data["retry_after"].as_u64().expect("retry_after");
    assert!(
        (1..=window).contains(&retry_after),
        "retry_after {retry_after} in {response}"
    );
}

/// Asserts a `-32006` refusal of `bucket` with `limit` on the in-process clock (20 s into
/// the window): `reset` is the window's end and `retry_after` the seconds until it.
fn assert_refused_at_t0(response: &Value, bucket: &str, limit: u64, window: i64) {
    assert_rate_limited(
        response,
        bucket,
        limit,
        u64::try_from(window).expect("positive"),
    );
    let data = &response["error"]["data"];
    assert_eq!(data["reset"], json!(T0 + window), "{response}");
    assert_eq!(data["retry_after"], json!(window - 20), "{response}");
}

#[test]
fn the_sixth_call_over_a_limit_of_five_is_refused() {
    let db = TestDb::new();
    let token = admin_key(&db);
    limit_credential(&db, &public_id(&token), "read", "5");
    let mut server = server_for(&db, &token);
    for left in (0..5).rev() {
        let response = call_read_tool(&mut server);
        assert_eq!(
            bucket(&response, "read"),
            &json!({"bucket": "read", "limit": 5, "remaining": left,
                    "reset": bucket(&response, "read")["reset"], "window_secs": 60}),
            "{response}"
        );
    }
    let refused = call_read_tool(&mut server);
    assert_refused_at_t0(&refused, "read", 5, 60);
}

#[test]
fn the_sixth_write_call_over_a_write_limit_of_five_is_refused() {
    let db = TestDb::new();
    let token = admin_key(&db);
    limit_credential(&db, &public_id(&token), "write", "5");
    let mut server = server_for(&db, &token);
    for n in 0..5 {
        let response = server.call_tool("create_client", json!({"name": format!("Client {n}")}));
        assert_eq!(response["result"]["isError"], json!(false), "{response}");
        assert_eq!(remaining(&response, "write"), 4 - n, "{response}");
    }
    let refused = server.call_tool("create_client", json!({"name": "Client 6"}));
    assert_refused_at_t0(&refused, "write", 5, 60);
    // The read bucket is separate and untouched.
    assert_eq!(remaining(&call_read_tool(&mut server), "read"), 119);
}

#[test]
fn a_call_refused_for_a_missing_scope_is_still_charged() {
    let db = TestDb::new();
    let admin = admin_key(&db);
    let outsider = create_key(&db, "no-conformance", "invoices:read", None);
    let mut admin_server = server_for(&db, &admin);
    let before = remaining(&call_read_tool(&mut admin_server), "plan");

    let mut outsider_server = server_for(&db, &outsider);
    let refused = call_read_tool(&mut outsider_server);
    assert_error(&refused, -32005, "insufficient_scope", 403, 1105, false);

    // The plan bucket is shared: the next admitted call sees the refused one and its own.
    let after = remaining(&call_read_tool(&mut admin_server), "plan");
    assert_eq!(after, before - 2);
    // And the refused credential's own read bucket counted it.
    let own = ("read".to_owned(), public_id(&outsider), T0);
    assert_eq!(counters(&db).get(&own), Some(&1), "{own:?}");
}

#[test]
fn discovery_is_not_charged() {
    let db = TestDb::new();
    let token = admin_key(&db);
    let mut server = server_for(&db, &token);
    let first = remaining(&call_read_tool(&mut server), "read");
    for _ in 0..3 {
        let listed = server.request("tools/list", json!({}));
        assert!(listed["result"]["tools"].is_array(), "{listed}");
        let pong = server.request("ping", json!({}));
        assert_eq!(pong["result"], json!({}), "{pong}");
    }
    let second = remaining(&call_read_tool(&mut server), "read");
    assert_eq!(second, first - 1);
}

#[test]
fn a_raised_limit_admits_the_next_call_at_once() {
    let db = TestDb::new();
    let token = admin_key(&db);
    let id = public_id(&token);
    limit_credential(&db, &id, "read", "2");
    let mut server = server_for(&db, &token);
    for _ in 0..2 {
        assert!(call_read_tool(&mut server)["result"].is_object());
    }
    assert_refused_at_t0(&call_read_tool(&mut server), "read", 2, 60);
    assert_refused_at_t0(&call_read_tool(&mut server), "read", 2, 60);
    // Raised from another process while the server runs; the counter is at 4 already.
    limit_credential(&db, &id, "read", "10");
    let admitted = call_read_tool(&mut server);
    assert_eq!(bucket(&admitted, "read")["limit"], 10, "{admitted}");
    assert_eq!(remaining(&admitted, "read"), 5);
}

#[test]
fn the_plan_bucket_refuses_on_its_own() {
    let db = TestDb::new();
    let token = admin_key(&db);
    set_limit(&db, &["--plan", "pro", "--per-hour", "3"]);
    let mut server = server_for(&db, &token);
    for left in (0..3).rev() {
        let response = call_read_tool(&mut server);
        assert_eq!(remaining(&response, "plan"), left, "{response}");
        assert_eq!(bucket(&response, "plan")["window_secs"], 3600, "{response}");
    }
    assert_refused_at_t0(&call_read_tool(&mut server), "plan", 3, 3600);
}

#[test]
fn the_client_bucket_refuses_on_its_own() {
    let db = TestDb::new();
    let client = create_client(&db, "robot", "conformance:use");
    let first = create_key(&db, "robot-1", "conformance:use", Some(&client));
    let second = create_key(&db, "robot-2", "conformance:use", Some(&client));
    set_limit(&db, &["--client", &client, "--per-minute", "3"]);
    let mut one = server_for(&db, &first);
    let mut two = server_for(&db, &second);
    let a = call_read_tool(&mut one);
    assert_eq!(remaining(&a, "client"), 2, "{a}");
    let b = call_read_tool(&mut two);
    assert_eq!(remaining(&b, "client"), 1, "{b}");
    // Each credential's own read bucket is far from its limit.
    assert_eq!(remaining(&b, "read"), 119, "{b}");
    assert!(call_read_tool(&mut one)["result"].is_object());
    assert_refused_at_t0(&call_read_tool(&mut two), "client", 3, 60);
}

/// Sends `n` `tools/call` requests without waiting, then reads the `n` responses and
/// returns, per window (its end, `reset`), how many were admitted and how many refused.
fn burst(server: &mut StdioServer, n: usize) -> HashMap<i64, (i64, i64)> {
    for id in 0..n {
        server.send(
            &json!({"jsonrpc": "2.0", "id": 1000 + id, "method": "tools/call",
                            "params": {"name": "test_simple_text", "arguments": {}}}),
        );
    }
    let mut windows: HashMap<i64, (i64, i64)> = HashMap::new();
    for _ in 0..n {
        let response = server.recv_response();
        if response["result"].is_object() {
            let reset = bucket(&response, "read")["reset"].as_i64().expect("reset");
            windows.entry(reset).or_default().0 += 1;
        } else {
            assert_rate_limited(&response, "read", 20, 60);
            let reset = response["error"]["data"]["reset"].as_i64().expect("reset");
            windows.entry(reset).or_default().1 += 1;
        }
    }
    windows
}

#[test]
fn two_processes_on_one_database_admit_exactly_the_limit() {
    let db = TestDb::new();
    let token = admin_key(&db);
    limit_credential(&db, &public_id(&token), "read", "20");
    let mut one = process_for(&db, &token);
    let mut two = process_for(&db, &token);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| burst(&mut one, 40));
        let b = s.spawn(|| burst(&mut two, 40));
        (
            a.join().expect("first burst"),
            b.join().expect("second burst"),
        )
    });
    assert!(one.close().success());
    assert!(two.close().success());
    // Per window the calls fell in (one, or two when a minute turned during the bursts):
    // exactly the limit admitted of the calls that window counted, the rest refused.
    let id = public_id(&token);
    let charged: HashMap<i64, i64> = counters(&db)
        .into_iter()
        .filter(|((b, k, _), _)| b == "read" && *k == id)
        .map(|((_, _, start), count)| (start + 60, count))
        .collect();
    assert_eq!(charged.values().sum::<i64>(), 80, "{charged:?}");
    let (mut admitted, mut refused) = (0, 0);
    for (reset, count) in &charged {
        let (a_ok, a_no) = a.get(reset).copied().unwrap_or_default();
        let (b_ok, b_no) = b.get(reset).copied().unwrap_or_default();
        assert_eq!(a_ok + b_ok, (*count).min(20), "window {reset}: {a:?} {b:?}");
        assert_eq!(
            a_no + b_no,
            (*count - 20).max(0),
            "window {reset}: {a:?} {b:?}"
        );
        admitted += a_ok + b_ok;
        refused += a_no + b_no;
    }

    let outcomes: HashMap<String, i64> = db
        .sql_rows(
            "SELECT outcome, CAST(count(*) AS TEXT) FROM audit_log \
             WHERE tool = 'test_simple_text' GROUP BY outcome",
        )
        .into_iter()
        .map(|row| {
            let outcome = row[0].clone().expect("outcome");
            let count = row[1].as_deref().expect("count").parse().expect("integer");
            (outcome, count)
        })
        .collect();
    assert_eq!(outcomes.get("rate_limited"), Some(&refused), "{outcomes:?}");
    assert_eq!(outcomes.get("ok"), Some(&admitted), "{outcomes:?}");
}

/// Every counter row: (bucket, key, window_start) → count.
fn counters(db: &TestDb) -> HashMap<(String, String, i64), i64> {
    let number = |cell: &Option<String>| -> i64 {
        cell.as_deref().expect("not null").parse().expect("integer")
    };
    db.sql_rows(
        "SELECT bucket, key, CAST(window_start AS TEXT), CAST(count AS TEXT) FROM rate_counters",
    )
    .into_iter()
    .map(|row| {
        let bucket = row[0].clone().expect("bucket");
        let key = row[1].clone().expect("key");
        ((bucket, key, number(&row[2])), number(&row[3]))
    })
    .collect()
}

#[test]
fn a_process_killed_mid_load_loses_no_committed_increment() {
    let db = TestDb::new();
    let token = admin_key(&db);
    let id = public_id(&token);
    limit_credential(&db, &id, "read", "1000000");
    set_limit(&db, &["--plan", "pro", "--per-hour", "1000000"]);
    let mut server = process_for(&db, &token);
    let total = 3000;
    for n in 0..total {
        server.send(&json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                            "params": {"name": "test_simple_text", "arguments": {}}}));
    }
    // Every answered call was charged (and committed) before its answer was written.
    let answered = 500;
    for _ in 0..answered {
        let response = server.recv_response();
        assert!(response["result"].is_object(), "{response}");
    }
    let before = counters(&db);
    server.child.kill().expect("SIGKILL");
    server.child.wait().expect("reap");

    let after = counters(&db);
    for (row, count) in &before {
        let now = after.get(row).copied().unwrap_or(0);
        assert!(now >= *count, "{row:?} went down from {count} to {now}");
    }
    let charged: i64 = after
        .iter()
        .filter(|((b, k, _), _)| b == "read" && *k == id)
        .map(|(_, c)| c)
        .sum();
    assert!(
        charged >= answered,
        "{charged} charged < {answered} answered"
    );
    assert!(charged <= total, "{charged} charged > {total} sent");

    if !db.is_postgres() {
        let conn = rusqlite::Connection::open(&db.path).expect("open the database");
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .expect("check");
        assert_eq!(check, "ok");
    }

    // A new process goes on counting from there.
    let mut again = process_for(&db, &token);
    assert!(again.call_tool("test_simple_text", json!({}))["result"].is_object());
    let later: i64 = counters(&db)
        .iter()
        .filter(|((b, k, _), _)| b == "read" && *k == id)
        .map(|(_, c)| c)
        .sum();
    assert_eq!(later, charged + 1);
}
