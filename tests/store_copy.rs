//! `tollgate store copy`: an SQLite installation with rows in every table moved into a
//! PostgreSQL database — the report's counts and checksums, each table's rows counted
//! independently on both sides, the audit log row for row, a second copy refused without
//! `--replace` and accepted with it, and every key authenticating on the copy.
//!
//! These tests need a PostgreSQL server: `TOLLGATE_TEST_POSTGRES` names one (a URL without
//! a database, e.g. `postgres://postgres@127.0.0.1:5432`); without it they print a note and
//! pass. Each test creates its own database and drops it.

use serde_json::{Value, json};

use crate::util::{
    HttpServer, Key, StdioServer, TestDb, create_postgres_database, postgres_server,
};

/// Every table of an installation, as this test counts them.
const TABLES: &[&str] = &[
    "server_secrets",
    "plans",
    "company",
    "oauth_clients",
    "credentials",
    "users",
    "rate_counters",
    "idempotency_keys",
    "audit_log",
    "tool_pins",
    "approvals",
    "faults",
    "clients",
    "invoice_series",
    "invoices",
    "invoice_lines",
    "payments",
    "outbox",
    "http_sessions",
    "oauth_registrations",
    "oauth_requests",
    "oauth_grants",
    "oauth_codes",
    "oauth_families",
    "oauth_tokens",
];

/// A fresh, empty PostgreSQL database as a [`TestDb`] (dropped with it), or `None` (with
/// a note) when no server is configured.
fn empty_postgres(test: &str) -> Option<TestDb> {
    let Some(server) = postgres_server() else {
        eprintln!("{test}: TOLLGATE_TEST_POSTGRES is not set; skipped");
        return None;
    };
    let (url, name) = create_postgres_database(&server, "tg_copy");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("unused.db");
    Some(TestDb {
        dir,
        path,
        admin_key: None,
        postgres: Some((server, url, name)),
    })
}

/// A connection to a PostgreSQL [`TestDb`].
fn pg_client(pg: &TestDb) -> postgres::Client {
    postgres::Client::connect(&pg.database_arg(), postgres::NoTls).expect("connect to the copy")
}

/// An SQLite installation and its secrets.
struct Installation {
    db: TestDb,
    /// Its API keys, in the order they were made.
    keys: Vec<Key>,
    /// Its OAuth client: id and secret.
    oauth: (String, String),
    /// An access token its authorization server issued to a host for the reader key.
    front_door_token: String,
}

/// An SQLite installation with rows in every table, made with the binary: `init --demo`
/// (company, plans, an admin key, clients, series, invoices, lines, payments), a second
/// key, an OAuth client, a rehearsed fault, and calls that fill the counters, the
/// idempotency ledger, the audit log, the outbox and the server secret, and a
/// handshake-era HTTP session.
fn installation() -> Installation {
    let db = TestDb::on_sqlite(&["--demo"]);
    let admin = Key {
        id: db.admin_key_id(),
        token: db.admin_key.clone().expect("admin key"),
    };
    let reader = db.create_key("reader", "clients:read,invoices:read", &[]);
    let client = db.run_json(&[
        "client", "create", "--name", "agent", "--scopes", "*", "--json",
    ]);
    let oauth = (
        client["client_id"].as_str().expect("client_id").to_owned(),
        client["client_secret"]
            .as_str()
            .expect("client_secret")
            .to_owned(),
    );
    for args in [
        &["company", "set", "--mode", "test"][..],
        &[
            "faults",
            "add",
            "--tool",
            "export_invoices",
            "--error",
            "timeout",
            "--count",
            "2",
            "--json",
        ],
        &["company", "set", "--mode", "live"],
    ] {
        let out = db.run(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let issued = issued_invoice(&db);
    let mut s = StdioServer::start(&db, &[]);
    s.initialize("2025-11-25");
    ok(&s.call_tool("search_clients", json!({})));
    ok(&s.call_tool(
        "create_client",
        json!({"name": "Copied SL", "idempotency_key": "copy-1"}),
    ));
    ok(&s.call_tool(
        "send_invoice",
        json!({"invoice_id": issued, "to": "ap@copied.example", "idempotency_key": "send-1"}),
    ));
    s.close();
    // A handshake-era HTTP session, which the store keeps for every node.
    let http = HttpServer::start(&db, &[]);
    http.open_session("2025-11-25", &admin.token);
    drop(http);
    // A user of the company's identity provider, as its first verified token records it.
    db.sql(
        "INSERT INTO users (id, issuer, subject, display_name, client_id, first_seen_at, \
         last_seen_at, write_per_minute) VALUES ('u0123456789abcdef01234567', \
         'https://idp.example.com', 'ana', 'Ana', 'portal', 1700000000, 1700000060, 5)",
    );
    // An upstream tool's definition approved on first use, and a change of it held.
    db.sql(&format!(
        "INSERT INTO tool_pins (backend, tool, digest, definition, state, seen_at, decided_at, \
         decided_by) VALUES ('wh', 'lookup', '{a}', '{{\"name\":\"lookup\"}}', 'approved', \
         1700000000000, 1700000000000, 'first use'), ('wh', 'lookup', '{b}', \
         '{{\"name\":\"lookup\",\"description\":\"changed\"}}', 'pending', 1700000060000, NULL, NULL)",
        a = "a".repeat(64),
        b = "b".repeat(64),
    ));
    // A call held by a policy rule, approved and run a moment ago (older, the servers the
    // front door starts below would prune it with the audit rows past their retention).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64;
    db.sql(&format!(
        "INSERT INTO approvals VALUES ('apr_{id}', 'kreader', 'create_client', '{c}', 'k-1', \
         'big_clients', '{{\"name\":\"Big\"}}', 0, 'used', {created}, {expires}, \
         {decided}, 'cli:ops', {used})",
        id = "0".repeat(32),
        c = "c".repeat(64),
        created = now - 300_000,
        expires = now + 86_100_000,
        decided = now - 200_000,
        used = now - 100_000,
    ));
    // The front door: a host registered, the reader signed in and consented, the code
    // exchanged (a grant, a code, a family of tokens), and a sign-in left half-way.
    let front = crate::oauth_server::front_door(&db);
    let redirect = "http://127.0.0.1:9/callback";
    let host = crate::oauth_server::register(&front, redirect);
    let code =
        crate::oauth_server::code_for(&front, &host, redirect, &reader.token, "clients:read");
    let tokens = crate::oauth_server::exchange(
        &front,
        &host,
        &code,
        redirect,
        crate::oauth_server::VERIFIER,
    )
    .json();
    let front_door_token = tokens["access_token"]
        .as_str()
        .expect("access token")
        .to_owned();
    crate::oauth_server::start(&front, &host, redirect, "clients:read");
    drop(front);
    let keys = vec![admin, reader];
    Installation {
        db,
        keys,
        oauth,
        front_door_token,
    }
}

/// The id of an issued invoice of the live book.
fn issued_invoice(db: &TestDb) -> String {
    let conn = rusqlite::Connection::open(&db.path).expect("open the source");
    conn.query_row(
        "SELECT id FROM invoices WHERE book = 'live' AND status = 'issued' ORDER BY id LIMIT 1",
        [],
        |row| row.get(0),
    )
    .expect("an issued demo invoice")
}

/// Asserts a tool call succeeded; gives its result.
fn ok(response: &Value) -> Value {
    assert!(response.get("error").is_none(), "{response}");
    assert_ne!(response["result"]["isError"], json!(true), "{response}");
    response["result"].clone()
}

/// Rows per table in the SQLite source.
fn sqlite_counts(db: &TestDb) -> Vec<(String, i64)> {
    let conn = rusqlite::Connection::open(&db.path).expect("open the source");
    TABLES
        .iter()
        .map(|t| {
            let n: i64 = conn
                .query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                .expect("count");
            ((*t).to_owned(), n)
        })
        .collect()
}

/// Rows per table in the PostgreSQL copy.
fn postgres_counts(pg: &TestDb) -> Vec<(String, i64)> {
    let mut client = pg_client(pg);
    TABLES
        .iter()
        .map(|t| {
            let n: i64 = client
                .query_one(&format!("SELECT count(*) FROM {t}"), &[])
                .expect("count")
                .get(0);
            ((*t).to_owned(), n)
        })
        .collect()
}

/// `tollgate store copy --from <source> --to <copy> --json EXTRA…`.
fn store_copy(inst: &Installation, pg: &TestDb, extra: &[&str]) -> std::process::Output {
    let url = pg.database_arg();
    let mut args = vec![
        "store",
        "copy",
        "--from",
        inst.db.path_str(),
        "--to",
        url.as_str(),
        "--json",
    ];
    args.extend_from_slice(extra);
    inst.db.run(&args)
}

#[test]
fn a_whole_installation_is_copied_verified_and_not_copied_twice() {
    let Some(pg) = empty_postgres("store copy") else {
        return;
    };
    let inst = installation();
    let source = sqlite_counts(&inst.db);
    for (table, rows) in &source {
        assert!(*rows > 0, "the source has no {table} row: {source:?}");
    }

    let out = store_copy(&inst, &pg, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["verified"], json!(true), "{report}");
    assert_eq!(report["replaced"], json!(false));
    assert_eq!(report["from"], json!(inst.db.path_str()));
    assert_eq!(report["to"], json!(pg.database_arg()));
    let reported: Vec<(String, i64)> = report["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .map(|t| {
            assert_eq!(t["source_rows"], t["target_rows"], "{t}");
            assert_eq!(t["source_sha256"], t["target_sha256"], "{t}");
            assert_eq!(t["matches"], json!(true), "{t}");
            (
                t["table"].as_str().expect("name").to_owned(),
                t["target_rows"].as_i64().expect("rows"),
            )
        })
        .collect();
    assert_eq!(reported, source, "the report counts every table");
    assert_eq!(postgres_counts(&pg), source, "the copy holds every row");
    assert_eq!(audit_rows_sqlite(&inst.db), audit_rows_postgres(&pg));

    let again = store_copy(&inst, &pg, &[]);
    assert_eq!(again.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr
            .contains("the target already holds an installation (server_secrets: 1, company: 1, ")
            && stderr.contains("copying into it would mix two companies' keys, counters and books")
            && stderr.contains("--replace"),
        "{stderr}"
    );
    assert!(again.stdout.is_empty());
    assert_eq!(
        postgres_counts(&pg),
        source,
        "the refused copy changed nothing"
    );

    let replaced = store_copy(&inst, &pg, &["--replace"]);
    assert!(
        replaced.status.success(),
        "{}",
        String::from_utf8_lossy(&replaced.stderr)
    );
    let replaced: Value = serde_json::from_slice(&replaced.stdout).expect("JSON report");
    assert_eq!(replaced["replaced"], json!(true));
    assert_eq!(replaced["verified"], json!(true));
    assert_eq!(replaced["tables"], report["tables"]);
    assert_eq!(postgres_counts(&pg), source);
}

/// Every audit row, as the operator reads them.
type AuditRow = (i64, i64, String, Option<String>, String, String, i64);

fn audit_rows_sqlite(db: &TestDb) -> Vec<AuditRow> {
    let conn = rusqlite::Connection::open(&db.path).expect("open the source");
    let mut stmt = conn
        .prepare(
            "SELECT id, at, request_id, credential_id, tool, outcome, calls FROM audit_log \
             ORDER BY id",
        )
        .expect("prepare");
    stmt.query_map([], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
            r.get(6)?,
        ))
    })
    .expect("query")
    .collect::<Result<_, _>>()
    .expect("rows")
}

fn audit_rows_postgres(pg: &TestDb) -> Vec<AuditRow> {
    pg_client(pg)
        .query(
            "SELECT id, at, request_id, credential_id, tool, outcome, calls FROM audit_log \
             ORDER BY id",
            &[],
        )
        .expect("query")
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get(5),
                r.get(6),
            )
        })
        .collect()
}

#[test]
fn every_key_and_client_authenticates_on_the_copy_and_an_idempotent_call_replays() {
    let Some(pg) = empty_postgres("store copy, keys") else {
        return;
    };
    let inst = installation();
    let out = store_copy(&inst, &pg, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for key in &inst.keys {
        let mut s = StdioServer::start_with_token(&pg, Some(&key.token), &[]);
        s.initialize("2025-11-25");
        let found = ok(&s.call_tool("search_clients", json!({"query": "Copied"})));
        assert!(
            found.to_string().contains("Copied SL"),
            "{}: {found}",
            key.id
        );
        s.close();
    }
    // The idempotency record came along: the same key and arguments replay the first
    // call's result instead of creating a second client.
    let clients = || {
        pg_client(&pg)
            .query_one("SELECT count(*) FROM clients", &[])
            .expect("count")
            .get::<_, i64>(0)
    };
    let before = clients();
    let mut s = StdioServer::start_with_token(&pg, Some(&inst.keys[0].token), &[]);
    s.initialize("2025-11-25");
    let replay = ok(&s.call_tool(
        "create_client",
        json!({"name": "Copied SL", "idempotency_key": "copy-1"}),
    ));
    s.close();
    assert_eq!(clients(), before, "{replay}");
    // The OAuth client's secret verifies on the copy: it is granted a token that calls.
    let server = HttpServer::start(&pg, &[]);
    let form = format!(
        "grant_type=client_credentials&client_id={}&client_secret={}",
        inst.oauth.0, inst.oauth.1
    );
    let granted = crate::util::http_request(
        server.addr,
        "POST",
        "/oauth/token",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        form.as_bytes(),
    );
    assert_eq!(
        granted.status,
        200,
        "{}",
        String::from_utf8_lossy(&granted.body)
    );
    let token = granted.json()["access_token"]
        .as_str()
        .expect("access_token")
        .to_owned();
    // A host's token from the front door works on the copy too: its grant came along.
    let host = server.modern_tool_call(&inst.front_door_token, "search_clients", &json!({}));
    assert_eq!(
        host.json()["result"]["isError"],
        json!(false),
        "{}",
        host.json()
    );
    let called = server.modern_tool_call(&token, "search_clients", &json!({}));
    assert_eq!(called.status, 200);
    assert_ne!(
        called.json()["result"]["isError"],
        json!(true),
        "{}",
        called.json()
    );
    drop(server);
    // New audit rows get ids past the copied ones.
    let ids: Vec<i64> = pg_client(&pg)
        .query("SELECT id FROM audit_log ORDER BY id", &[])
        .expect("ids")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let copied = audit_rows_sqlite(&inst.db);
    assert!(ids.len() > copied.len(), "{ids:?}");
    assert_eq!(
        ids[..copied.len()],
        copied.iter().map(|r| r.0).collect::<Vec<_>>()[..]
    );
}

#[test]
fn a_source_newer_than_the_binary_or_a_target_that_is_not_postgres_is_refused() {
    let db = TestDb::on_sqlite(&[]);
    let to_sqlite = db.run(&["store", "copy", "--from", db.path_str(), "--to", "other.db"]);
    assert_eq!(to_sqlite.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&to_sqlite.stderr),
        "tollgate: --to: other.db is not a PostgreSQL URL (postgres://…); to copy an SQLite \
         file, use `tollgate backup`\n"
    );
    rusqlite::Connection::open(&db.path)
        .and_then(|c| c.pragma_update(None, "user_version", 99))
        .expect("a newer schema version");
    // The source is opened first: the target is never contacted.
    let newer = db.run(&[
        "store",
        "copy",
        "--from",
        db.path_str(),
        "--to",
        "postgres://tollgate@127.0.0.1:1/unused",
    ]);
    assert_eq!(newer.status.code(), Some(2));
    let schema = tollgate::store::SCHEMA_VERSION;
    assert_eq!(
        String::from_utf8_lossy(&newer.stderr),
        format!(
            "tollgate: --from {}: database schema version 99 is newer than this tollgate \
             supports ({schema}); upgrade tollgate or restore a backup\n",
            db.path_str()
        )
    );
    assert!(newer.stdout.is_empty());
}
