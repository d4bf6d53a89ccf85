//! Faults (issue 7): a SIGKILL in the middle of a write-heavy load, a database locked by
//! another writer past the busy timeout, and a full disk. Each must lose nothing that was
//! acknowledged, apply nothing twice, corrupt nothing, and answer with a catalog error
//! rather than hang.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{Connection, OpenFlags};
use serde_json::{Value, json};

use crate::floods::{Conn, call, raise_limits};
use crate::util::{HttpServer, StdioServer, TestDb, TinyDisk, assert_error, bin};

/// `_meta` flag of a replayed result.
const REPLAY: &str = "dev.tollgate/idempotentReplay";
/// A valid CIF, so that full invoices can be issued to the client.
const TAX_ID: &str = "B12345674";

/// One tool call as the client made it, and what it got back when it got an answer.
#[derive(Debug, Clone)]
struct Made {
    tool: &'static str,
    args: Value,
    key: Option<String>,
    /// `structuredContent` of a success; `None` while unanswered.
    result: Option<Value>,
}

fn open_db(path: &Path) -> Connection {
    Connection::open(path).expect("open the database with rusqlite")
}

fn integrity(path: &Path) -> String {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open read-only");
    let lines: Vec<String> = conn
        .prepare("PRAGMA integrity_check")
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("integrity_check")
        .collect::<Result<_, _>>()
        .expect("rows");
    lines.join("\n")
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |row| row.get(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Every rate-counter window: (bucket, key, window_start) → count.
fn rate_counters(path: &Path) -> BTreeMap<(String, String, i64), i64> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open read-only");
    let mut stmt = conn
        .prepare("SELECT bucket, key, window_start, count FROM rate_counters")
        .expect("prepare");
    stmt.query_map([], |row| {
        Ok(((row.get(0)?, row.get(1)?, row.get(2)?), row.get(3)?))
    })
    .expect("query")
    .collect::<Result<_, _>>()
    .expect("rows")
}

/// A fingerprint of the business data: what a replay must leave untouched.
fn business_state(path: &Path) -> Vec<i64> {
    let conn = open_db(path);
    [
        "SELECT count(*) FROM invoices",
        "SELECT count(*) FROM invoices WHERE status = 'void'",
        "SELECT count(*) FROM invoices WHERE number IS NOT NULL",
        "SELECT count(*) FROM payments",
        "SELECT coalesce(sum(amount_cents), 0) FROM payments",
        "SELECT count(*) FROM clients",
        "SELECT count(*) FROM idempotency_keys WHERE state = 'completed'",
    ]
    .iter()
    .map(|sql| count(&conn, sql))
    .collect()
}

/// One client thread: draft, issue, pay and (every other invoice) void, until the
/// connection breaks. Returns the calls it saw succeed and the one left in flight.
fn writer_thread(
    addr: SocketAddr,
    token: &str,
    client: &str,
    thread: u64,
    successes: &AtomicU64,
) -> (Vec<Made>, Option<Made>) {
    let mut done = Vec::new();
    let Ok(mut conn) = Conn::connect(addr) else {
        return (done, None);
    };
    let mut id = thread * 1_000_000;
    for n in 0u64.. {
        let mut invoice = Value::Null;
        for step in 0..4 {
            let key = format!("t{thread}-n{n}-s{step}");
            let (tool, args) = match step {
                0 => (
                    "create_invoice",
                    json!({ "client_id": client, "lines": [
                    { "description": "Consulting", "quantity": 1, "unit_price_cents": 10_000, "vat_rate": 21 } ] }),
                ),
                1 => (
                    "issue_invoice",
                    json!({ "invoice_id": invoice, "idempotency_key": key }),
                ),
                2 => (
                    "record_payment",
                    json!({ "invoice_id": invoice, "amount_cents": 5_000, "idempotency_key": key }),
                ),
                _ if n % 2 == 0 => (
                    "void_invoice",
                    json!({ "invoice_id": invoice, "reason": "Wrong customer", "idempotency_key": key }),
                ),
                _ => continue,
            };
            let mut made = Made {
                tool,
                key: (step > 0).then_some(key),
                args,
                result: None,
            };
            id += 1;
            // A broken connection means the server is gone: this call's fate is unknown.
            let Ok(reply) = call(&mut conn, token, id, tool, &made.args) else {
                return (done, Some(made));
            };
            let body = reply.json();
            assert_eq!(
                body["result"]["isError"],
                json!(false),
                "{tool} failed under load: {body}"
            );
            let structured = body["result"]["structuredContent"].clone();
            if step == 0 {
                invoice = structured["id"].clone();
            }
            made.result = Some(structured);
            done.push(made);
            successes.fetch_add(1, Ordering::SeqCst);
        }
    }
    (done, None)
}

/// Checks that the effect of an acknowledged call is in the database.
fn assert_applied(conn: &Connection, made: &Made) {
    let result = made.result.as_ref().expect("answered");
    let text = |sql: &str, id: &str| -> Option<String> {
        conn.query_row(sql, [id], |row| row.get(0)).ok()
    };
    match made.tool {
        "create_invoice" => {
            let id = result["id"].as_str().expect("id");
            assert!(
                text("SELECT id FROM invoices WHERE id = ?1", id).is_some(),
                "lost draft {id}"
            );
        }
        "issue_invoice" => {
            let id = result["id"].as_str().expect("id");
            let number = text("SELECT number FROM invoices WHERE id = ?1", id);
            assert_eq!(
                number.as_deref(),
                result["number"].as_str(),
                "lost issue of {id}"
            );
        }
        "record_payment" => {
            let id = result["payment"]["id"].as_str().expect("payment id");
            let amount: Option<i64> = conn
                .query_row(
                    "SELECT amount_cents FROM payments WHERE id = ?1",
                    [id],
                    |r| r.get(0),
                )
                .ok();
            assert_eq!(amount, Some(5_000), "lost payment {id}");
        }
        "void_invoice" => {
            let id = result["invoice"]["id"].as_str().expect("id");
            assert_eq!(
                text("SELECT status FROM invoices WHERE id = ?1", id).as_deref(),
                Some("void"),
                "lost void of {id}"
            );
            let rectifying = result["rectifying_invoice"]["id"]
                .as_str()
                .expect("rectifying id");
            assert!(
                text("SELECT id FROM invoices WHERE id = ?1", rectifying).is_some(),
                "lost {rectifying}"
            );
        }
        other => panic!("unexpected tool {other}"),
    }
    if let Some(key) = &made.key {
        let state = text("SELECT state FROM idempotency_keys WHERE key = ?1", key);
        assert_eq!(
            state.as_deref(),
            Some("completed"),
            "key {key} of an acknowledged {}",
            made.tool
        );
    }
}

/// Exactly once: every effect of a keyed tool has exactly one completed key, and back.
fn assert_exactly_once(path: &Path) {
    let conn = open_db(path);
    let completed = |tool: &str| {
        count(
            &conn,
            &format!(
                "SELECT count(*) FROM idempotency_keys WHERE tool = '{tool}' AND state = 'completed' \
             AND json_extract(result, '$.isError') = 0"
            ),
        )
    };
    assert_eq!(
        count(&conn, "SELECT count(*) FROM payments"),
        completed("record_payment"),
        "payments vs keys"
    );
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM invoices WHERE number IS NOT NULL AND kind <> 'rectifying'"
        ),
        completed("issue_invoice"),
        "issued invoices vs keys"
    );
    assert_eq!(
        count(&conn, "SELECT count(*) FROM invoices WHERE status = 'void'"),
        completed("void_invoice"),
        "voids vs keys"
    );
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM invoices WHERE kind = 'rectifying'"
        ),
        completed("void_invoice"),
        "rectifying vs keys"
    );
    let doubled = count(
        &conn,
        "SELECT count(*) FROM (SELECT invoice_id FROM payments GROUP BY invoice_id HAVING count(*) > 1)",
    );
    assert_eq!(
        doubled, 0,
        "an invoice got two payments although each was paid once"
    );
}

#[test]
fn sigkill_under_write_load_loses_nothing_and_applies_nothing_twice() {
    // The killed process's file, read back with SQLite; the PostgreSQL store's faults are in
    // postgres_faults.rs.
    let db = TestDb::on_sqlite(&[]);
    raise_limits(&db, &db.admin_key_id());
    let token = db.admin_key.clone().expect("admin key");
    let mut server = HttpServer::start(&db, &[]);
    let mut conn = Conn::connect(server.addr).expect("connect");
    let client = call(
        &mut conn,
        &token,
        1,
        "create_client",
        &json!({ "name": "Acme SL", "tax_id": TAX_ID }),
    )
    .expect("create_client")
    .json()["result"]["structuredContent"]["id"]
        .as_str()
        .expect("client id")
        .to_owned();
    drop(conn);

    let successes = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..3)
        .map(|t| {
            let (token, client, successes) =
                (token.clone(), client.clone(), Arc::clone(&successes));
            let addr = server.addr;
            std::thread::spawn(move || writer_thread(addr, &token, &client, t, &successes))
        })
        .collect();
    while successes.load(Ordering::SeqCst) < 90 {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let counters_before = rate_counters(&db.path);
    server.child.kill().expect("SIGKILL");
    server.child.wait().expect("wait");
    let (mut done, mut unanswered) = (Vec::new(), Vec::new());
    for writer in writers {
        let (acknowledged, in_flight) = writer.join().expect("writer thread");
        done.extend(acknowledged);
        unanswered.extend(in_flight);
    }
    println!(
        "[faults] SIGKILL after {} acknowledged calls; {} in flight",
        done.len(),
        unanswered.len()
    );

    // The file is sound and holds every acknowledged call, each applied once.
    assert_eq!(integrity(&db.path), "ok");
    let conn = open_db(&db.path);
    assert_eq!(
        count(&conn, "SELECT count(*) FROM pragma_foreign_key_check"),
        0
    );
    for made in &done {
        assert_applied(&conn, made);
    }
    drop(conn);
    assert_exactly_once(&db.path);

    // Counters never go down, and every acknowledged call was charged.
    let counters_after = rate_counters(&db.path);
    for (window, before) in &counters_before {
        let after = counters_after.get(window).copied().unwrap_or(0);
        assert!(
            after >= *before,
            "counter {window:?} went down: {before} → {after}"
        );
    }
    let charged = |bucket: &str| -> i64 {
        counters_after
            .iter()
            .filter(|((b, _, _), _)| b == bucket)
            .map(|(_, c)| c)
            .sum()
    };
    let acknowledged = |tools: &[&str]| {
        i64::try_from(done.iter().filter(|m| tools.contains(&m.tool)).count()).expect("count")
    };
    // The setup's create_client is a write too.
    let writes = acknowledged(&["create_invoice", "issue_invoice", "record_payment"]) + 1;
    assert!(
        charged("write") >= writes,
        "{} charged, {writes} acknowledged",
        charged("write")
    );
    assert!(charged("destructive") >= acknowledged(&["void_invoice"]));

    // After a restart, every acknowledged key replays its first result and changes nothing.
    let server = HttpServer::start(&db, &[]);
    let before_replays = business_state(&db.path);
    let mut conn = Conn::connect(server.addr).expect("connect");
    let mut replayed = 0;
    for (i, made) in done.iter().filter(|m| m.key.is_some()).enumerate() {
        let body = call(&mut conn, &token, 10_000 + i as u64, made.tool, &made.args)
            .expect("replay")
            .json();
        assert_eq!(
            body["result"]["_meta"][REPLAY],
            json!(true),
            "{} {:?}: {body}",
            made.tool,
            made.key
        );
        assert_eq!(
            Some(&body["result"]["structuredContent"]),
            made.result.as_ref(),
            "replayed result of {:?}",
            made.key
        );
        replayed += 1;
    }
    assert_eq!(
        business_state(&db.path),
        before_replays,
        "a replay changed the data"
    );

    // A call whose answer was lost is retried with its key: it replays, runs once, or
    // (killed mid-call, lease still held) is `idempotency_key_in_use` — never twice.
    for (i, made) in unanswered.iter().filter(|m| m.key.is_some()).enumerate() {
        let body = call(&mut conn, &token, 20_000 + i as u64, made.tool, &made.args)
            .expect("retry")
            .json();
        let code = body.pointer("/error/data/code").and_then(Value::as_str);
        assert!(
            body["result"]["isError"] == json!(false) || code == Some("idempotency_key_in_use"),
            "retry of {:?}: {body}",
            made.key
        );
    }
    assert_exactly_once(&db.path);
    assert_eq!(integrity(&db.path), "ok");
    println!("[faults] {replayed} idempotent calls replayed after the restart, none applied twice");
}

#[test]
fn a_database_locked_past_the_busy_timeout_gives_backend_unavailable_then_recovers() {
    let db = TestDb::on_sqlite(&[]);
    raise_limits(&db, &db.admin_key_id());
    let mut cmd = db.command(&["stdio"]);
    cmd.env(
        "TOLLGATE_TOKEN",
        db.admin_key.as_deref().expect("admin key"),
    )
    .env("TOLLGATE_STORE_BUSY_TIMEOUT_MS", "200");
    let mut server = StdioServer::spawn(cmd);
    server.initialize("2025-11-25");
    let first = server.call_tool("create_client", json!({ "name": "Before the lock" }));
    assert_eq!(first["result"]["isError"], json!(false), "{first}");

    let lock = open_db(&db.path);
    lock.execute_batch("BEGIN EXCLUSIVE")
        .expect("take the write lock");
    let clients_before = count(&lock, "SELECT count(*) FROM clients");
    // `recv` fails the test after 20 s: a hang would be caught, an answer is expected
    // shortly after the 200 ms busy timeout.
    let locked = server.call_tool("create_client", json!({ "name": "During the lock" }));
    assert_error(&locked, -32603, "backend_unavailable", 503, 4002, true);
    let again = server.call_tool("create_client", json!({ "name": "Still locked" }));
    assert_error(&again, -32603, "backend_unavailable", 503, 4002, true);
    lock.execute_batch("COMMIT").expect("release the lock");

    let after = server.call_tool("create_client", json!({ "name": "After the lock" }));
    assert_eq!(after["result"]["isError"], json!(false), "{after}");
    let conn = open_db(&db.path);
    assert_eq!(
        count(&conn, "SELECT count(*) FROM clients"),
        clients_before + 1,
        "only the call after the lock wrote"
    );
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM clients WHERE name IN ('During the lock', 'Still locked')"
        ),
        0
    );
    assert_eq!(integrity(&db.path), "ok");
}

// ---- A full disk -------------------------------------------------------------------------

/// A draft of 200 lines with long descriptions: about 120 KB of new rows.
fn bulky_draft(client: &str) -> Value {
    let line = json!({ "description": "d".repeat(500), "quantity": 1, "unit_price_cents": 100, "vat_rate": 21 });
    json!({ "client_id": client, "lines": vec![line; 200] })
}

/// Fills the disk with bulky drafts until a write fails; returns that failure.
fn write_until_full(server: &mut StdioServer, client: &str) -> Value {
    for _ in 0..2_000 {
        let response = server.call_tool("create_invoice", bulky_draft(client));
        if response["result"]["isError"] != json!(false) {
            return response;
        }
    }
    panic!("the disk never filled up");
}

/// `backend_unavailable` (JSON-RPC, a guard's write) or the same code as a tool result.
fn assert_storage_unavailable(response: &Value) {
    if response.get("error").is_some() {
        assert_error(response, -32603, "backend_unavailable", 503, 4002, true);
    } else {
        crate::util::assert_tool_error(response, "backend_unavailable", 503, 4002);
        assert_eq!(
            response["result"]["_meta"]["dev.tollgate/error"]["retryable"],
            json!(true)
        );
    }
}

#[test]
fn a_full_disk_gives_a_clean_error_corrupts_nothing_and_recovers() {
    let scratch = tempfile::tempdir().expect("tempdir");
    match TinyDisk::mount(scratch.path(), "4m") {
        Some(disk) => full_tmpfs(&disk),
        None => full_by_file_size_limit(scratch.path()),
    }
}

/// A database on a 4 MiB tmpfs, half of it ballast the "operator" deletes at the end. Once
/// space returns, the background checkpoint may copy the whole WAL into the database file
/// before the next write: ballast larger than the WAL can grow (the rest of the disk) leaves
/// room for that copy and the write after it.
fn full_tmpfs(disk: &TinyDisk) {
    println!("[faults] full disk: a 4 MiB tmpfs");
    let db = init_at(&disk.mount);
    let ballast = disk.mount.join("ballast");
    std::fs::write(&ballast, vec![0u8; 2 * 1024 * 1024]).expect("ballast");
    let mut server = StdioServer::start(&db, &[]);
    server.initialize("2025-11-25");
    let client = create_acme(&mut server);

    let failure = write_until_full(&mut server, &client);
    assert_storage_unavailable(&failure);
    // A failed write leaves no rows. (The server checkpoints its WAL in the background, which
    // can make room for one more write now and then: such a write simply succeeds.)
    let mut failed_again = false;
    for _ in 0..20 {
        let invoices = count(&open_read_only(&db.path), "SELECT count(*) FROM invoices");
        let again = server.call_tool("create_invoice", bulky_draft(&client));
        if again["result"]["isError"] == json!(false) {
            continue;
        }
        assert_storage_unavailable(&again);
        assert_eq!(
            count(&open_read_only(&db.path), "SELECT count(*) FROM invoices"),
            invoices,
            "a failed write left rows"
        );
        failed_again = true;
        break;
    }
    assert!(failed_again, "the disk stopped being full on its own");

    // Reads that need no write still work: the file, and an authenticated tools/list.
    // (A read *tool* charges its rate counters first, a write: it may fail the same way.)
    let listed = server.request("tools/list", json!({}));
    assert!(
        listed["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{listed}"
    );
    let read = server.call_tool("search_clients", json!({}));
    if read["result"]["isError"] != json!(false) {
        assert_storage_unavailable(&read);
    }
    assert_eq!(integrity(&db.path), "ok");

    // The operator frees space: writes work again, and the file is still sound.
    std::fs::remove_file(&ballast).expect("remove ballast");
    let recovered = server.call_tool("create_client", json!({ "name": "After the cleanup" }));
    assert_eq!(recovered["result"]["isError"], json!(false), "{recovered}");
    drop(server);
    assert_eq!(integrity(&db.path), "ok");
}

/// Without the privilege to mount, the server runs under `ulimit -f` with SIGXFSZ ignored:
/// writes past the limit fail with EFBIG, which SQLite reports as an I/O error, so the
/// catalog code may be `internal_error` instead of `backend_unavailable`.
fn full_by_file_size_limit(dir: &Path) {
    println!("[faults] full disk: no tmpfs (not root?); simulating with ulimit -f");
    let db = init_at(dir);
    let size = std::fs::metadata(&db.path).expect("db size").len();
    let blocks = (size + 1024 * 1024) / 512;
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        &format!("trap '' XFSZ; ulimit -f {blocks}; exec \"$0\" \"$@\""),
    ])
    .arg(bin())
    .arg("--database")
    .arg(&db.path)
    .arg("stdio")
    .env_remove("TOLLGATE_CONFIG")
    .env_remove("TOLLGATE_TEST_POSTGRES")
    .env("RUST_LOG", "warn")
    .env(
        "TOLLGATE_TOKEN",
        db.admin_key.as_deref().expect("admin key"),
    );
    let mut server = StdioServer::spawn(cmd);
    server.initialize("2025-11-25");
    let client = create_acme(&mut server);
    let failure = write_until_full(&mut server, &client);
    let code = failure
        .pointer("/error/data/code")
        .or_else(|| failure.pointer("/result/_meta/dev.tollgate~1error/code"));
    assert!(
        matches!(
            code.and_then(Value::as_str),
            Some("backend_unavailable" | "internal_error")
        ),
        "{failure}"
    );
    let listed = server.request("tools/list", json!({}));
    assert!(
        listed["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{listed}"
    );
    drop(server);
    assert_eq!(integrity(&db.path), "ok");
    let mut server = StdioServer::start(&db, &[]);
    server.initialize("2025-11-25");
    let recovered = server.call_tool("create_client", json!({ "name": "After the restart" }));
    assert_eq!(recovered["result"]["isError"], json!(false), "{recovered}");
}

/// Creates the client the full-disk tests bill; returns its id.
fn create_acme(server: &mut StdioServer) -> String {
    let client = server.call_tool(
        "create_client",
        json!({ "name": "Acme SL", "tax_id": TAX_ID }),
    );
    client["result"]["structuredContent"]["id"]
        .as_str()
        .expect("client id")
        .to_owned()
}

fn open_read_only(path: &Path) -> Connection {
    Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open read-only")
}

/// `tollgate init` of a database in `dir` (a [`TestDb`] whose file lives there).
fn init_at(dir: &Path) -> TestDb {
    // What these faults test is the SQLite file under the process; PostgreSQL's own
    // faults are tested beside the multi-node tests.
    let db = TestDb::init_in(dir);
    raise_limits(&db, &db.admin_key_id());
    db
}
