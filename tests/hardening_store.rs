//! The store, the audit log and the logs under hostile or careless conditions: a
//! token-less flood, old audit rows, a full disk, a foreign database handed to `restore`,
//! a stderr nobody reads, a tool name made to forge audit rows, and the file modes of the
//! database.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rusqlite::Connection;
use serde_json::{Value, json};

use crate::util::{
    HttpServer, READ_TIMEOUT, StdioServer, TestDb, TinyDisk, bin, free_port, http_request,
    modern_meta,
};

// ---- A small keep-alive HTTP client --------------------------------------------------

/// Sends requests one after the other on one connection (reconnecting when the server
/// closes it), so that thousands of calls do not leave thousands of sockets behind.
struct KeepAlive {
    addr: SocketAddr,
    conn: Option<BufReader<TcpStream>>,
}

impl KeepAlive {
    fn new(addr: SocketAddr) -> KeepAlive {
        KeepAlive { addr, conn: None }
    }

    /// `POST /mcp` of a 2026-07-28 `tools/call` of `tool`, with `token` if any; returns
    /// the status and the JSON body.
    fn call(&mut self, token: Option<&str>, id: u64, tool: &str) -> (u16, Value) {
        let mut params = json!({"name": tool, "arguments": {}, "_meta": modern_meta()});
        params["_meta"]["io.modelcontextprotocol/clientInfo"] =
            json!({"name": "t", "version": "0"});
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let body = serde_json::to_vec(&body).expect("serialize");
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: tools/call\r\nMcp-Name: {tool}\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if let Some(token) = token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        head.push_str("\r\n");
        // One write: a head and a body sent apart wait out a delayed ACK on each call.
        let mut request = head.into_bytes();
        request.extend_from_slice(&body);
        for attempt in 0..2 {
            let conn = self.connection();
            let sent = conn.get_mut().write_all(&request);
            match sent.and_then(|()| read_response(conn)) {
                Ok((status, close, body)) => {
                    if close {
                        self.conn = None;
                    }
                    let body = serde_json::from_slice(&body).unwrap_or_else(|e| {
                        panic!("not JSON ({e}): {}", String::from_utf8_lossy(&body))
                    });
                    return (status, body);
                }
                // The server closed an idle connection before reading this request.
                Err(_) if attempt == 0 => self.conn = None,
                Err(e) => panic!("request {id}: {e}"),
            }
        }
        unreachable!("the second attempt returns or panics")
    }

    fn connection(&mut self) -> &mut BufReader<TcpStream> {
        let addr = self.addr;
        self.conn.get_or_insert_with(|| {
            let stream = TcpStream::connect(addr).expect("connect");
            stream
                .set_read_timeout(Some(READ_TIMEOUT))
                .expect("timeout");
            stream
                .set_write_timeout(Some(READ_TIMEOUT))
                .expect("timeout");
            stream.set_nodelay(true).expect("nodelay");
            BufReader::new(stream)
        })
    }
}

/// Status, whether the server will close the connection, and the body.
fn read_response(conn: &mut BufReader<TcpStream>) -> std::io::Result<(u16, bool, Vec<u8>)> {
    let mut line = String::new();
    if conn.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed",
        ));
    }
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let (mut length, mut chunked, mut close) = (0, false, false);
    loop {
        line.clear();
        conn.read_line(&mut line)?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':').expect("header");
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        match name.as_str() {
            "content-length" => length = value.parse().expect("length"),
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "connection" => close = value.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            conn.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim(), 16).expect("chunk size");
            let mut chunk = vec![0; size + 2];
            conn.read_exact(&mut chunk)?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        body.resize(length, 0);
        conn.read_exact(&mut body)?;
    }
    Ok((status, close, body))
}

/// The value of one sample line of a Prometheus page (`name{labels}` exactly).
fn sample(page: &str, series: &str) -> Option<u64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn now_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    i64::try_from(since.as_millis()).expect("ms")
}

// ---- Finding 3: a token-less flood, retention ------------------------------------------

#[test]
fn a_token_less_flood_leaves_a_bounded_number_of_audit_rows_and_every_call_in_metrics() {
    const FLOOD: u64 = 2_000;
    const BAD_TOKENS: u64 = 40;
    let db = TestDb::new();
    let server = HttpServer::start_with_env(&db, &[], &[("TOLLGATE_HTTP_METRICS", "true")]);
    let mut client = KeepAlive::new(server.addr);
    for id in 0..FLOOD {
        let (status, body) = client.call(None, id, "search_clients");
        assert_eq!(status, 401, "{body}");
        assert_eq!(body["error"]["code"], json!(-32001), "{body}");
        assert_eq!(
            body["error"]["data"]["code"],
            json!("invalid_token"),
            "{body}"
        );
    }
    // Wrong tokens: a few are verified and refused, then the failure throttle refuses.
    let mut throttled = 0;
    for id in 0..BAD_TOKENS {
        let (_, body) = client.call(
            Some("tg_live_aaaaaaaaaaaa_notthesecret"),
            id,
            "search_clients",
        );
        match body["error"]["data"]["code"].as_str() {
            Some("rate_limited") => {
                assert_eq!(body["error"]["data"]["bucket"], json!("auth"), "{body}");
                throttled += 1;
            }
            Some("invalid_token") => {}
            _ => panic!("unexpected answer {body}"),
        }
    }
    assert!(throttled > 0, "the failure throttle never refused");
    let invalid = FLOOD + BAD_TOKENS - throttled;

    let page = String::from_utf8(server.get("/metrics").body).expect("utf-8");
    let calls = |code: &str| {
        sample(
            &page,
            &format!("tollgate_tool_calls_total{{tool=\"search_clients\",code=\"{code}\"}}"),
        )
    };
    assert_eq!(calls("invalid_token"), Some(invalid), "{page}");
    assert_eq!(calls("rate_limited"), Some(throttled), "{page}");

    drop(server); // SIGTERM: the audit writer flushes.
    let number = |cell: &Option<String>| -> i64 {
        cell.as_deref().expect("not null").parse().expect("integer")
    };
    let rows: Vec<(String, i64, Option<String>, Option<String>)> = db
        .sql_rows("SELECT outcome, CAST(calls AS TEXT), source, credential_id FROM audit_log")
        .into_iter()
        .map(|r| {
            (
                r[0].clone().expect("outcome"),
                number(&r[1]),
                r[2].clone(),
                r[3].clone(),
            )
        })
        .collect();
    println!(
        "[hardening] {} calls without a valid token left {} audit rows",
        FLOOD + BAD_TOKENS,
        rows.len()
    );
    // One row per outcome and summary window, whichever windows the flood fell in.
    let windows: Vec<(String, i64)> = db
        .sql_rows("SELECT outcome, CAST(at / 60000 AS TEXT) FROM audit_log")
        .into_iter()
        .map(|r| (r[0].clone().expect("outcome"), number(&r[1])))
        .collect();
    let distinct: std::collections::BTreeSet<&(String, i64)> = windows.iter().collect();
    assert_eq!(distinct.len(), windows.len(), "{windows:?}");
    let counted =
        |outcome: &str| -> i64 { rows.iter().filter(|r| r.0 == outcome).map(|r| r.1).sum() };
    assert_eq!(counted("invalid_token"), invalid as i64, "{rows:?}");
    assert_eq!(counted("rate_limited"), throttled as i64, "{rows:?}");
    for (_, _, source, credential) in &rows {
        assert_eq!(source.as_deref(), Some("http:127.0.0.1"), "{rows:?}");
        assert_eq!(credential, &None);
    }
    let listed = db.run_json(&["audit", "--outcome", "invalid_token", "--json"]);
    let listed = listed.as_array().expect("rows");
    let total: i64 = listed
        .iter()
        .map(|r| r["calls"].as_i64().expect("calls"))
        .sum();
    assert_eq!(total, invalid as i64, "{listed:?}");
    assert_eq!(listed[0]["source"], json!("http:127.0.0.1"));
    assert!(!format!("{listed:?}").contains("notthesecret"));
}

#[test]
fn a_server_prunes_audit_rows_older_than_the_retention_and_keeps_newer_ones() {
    let db = TestDb::new();
    let now = now_ms();
    let day = 86_400_000;
    for (age_days, tool) in [(400, "ancient"), (31, "old"), (29, "recent"), (0, "today")] {
        db.sql(&format!(
            "INSERT INTO audit_log (at, request_id, tool, outcome, duration_us, transport) \
             VALUES ({}, '1', '{tool}', 'ok', 1, 'stdio')",
            now - age_days * day
        ));
    }
    // 30 days kept: the server's pruner runs as it starts, in the background.
    let mut cmd = db.command(&["stdio"]);
    cmd.env("TOLLGATE_AUDIT_RETENTION_DAYS", "30");
    cmd.env("TOLLGATE_TOKEN", db.admin_key.as_deref().expect("key"));
    let mut server = StdioServer::spawn(cmd);
    server.initialize("2025-11-25");
    let tools = || -> Vec<String> {
        db.sql_rows("SELECT tool FROM audit_log ORDER BY id")
            .into_iter()
            .filter_map(|row| row.into_iter().next().flatten())
            .collect()
    };
    let deadline = Instant::now() + READ_TIMEOUT;
    while tools().len() > 2 {
        assert!(Instant::now() < deadline, "not pruned: {:?}", tools());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(tools(), ["recent", "today"]);
    server.close();
}

// ---- Finding 3: a store that cannot write ------------------------------------------------

/// Writes `path` until the disk is full.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).expect("ballast");
    let block = vec![0u8; 64 * 1024];
    while file.write_all(&block).is_ok() {}
    let mut byte = [0u8; 1];
    while file.write_all(&byte).is_ok() {
        byte[0] = 1;
    }
}

#[test]
fn a_full_disk_makes_healthz_503_and_healthcheck_fail_until_space_returns() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let Some(disk) = TinyDisk::mount(scratch.path(), "16m") else {
        println!("[hardening] cannot mount a tmpfs here (not root?): full-disk health not tested");
        return;
    };
    let db = TestDb::init_in(&disk.mount);
    let server = HttpServer::start(&db, &[]);
    let healthcheck = |db: &TestDb| db.run(&["healthcheck"]);
    assert!(healthcheck(&db).status.success());

    let ballast = disk.mount.join("ballast");
    fill(&ballast);
    let health = server.get("/healthz");
    assert_eq!(
        health.status,
        503,
        "{}",
        String::from_utf8_lossy(&health.body)
    );
    assert_eq!(
        health.json(),
        json!({"status": "unavailable", "store": "sqlite", "code": "backend_unavailable", "reason": "disk_full"})
    );
    let out = healthcheck(&db);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unhealthy") && stderr.contains("(disk_full)"),
        "{stderr}"
    );
    let url = format!("http://{}/healthz", server.addr);
    assert!(!db.run(&["healthcheck", "--url", &url]).status.success());
    // Calls that write fail meanwhile; the store records the failure.
    let mut client = KeepAlive::new(server.addr);
    for id in 0..20 {
        client.call(db.admin_key.as_deref(), id, "search_clients");
    }

    std::fs::remove_file(&ballast).expect("free the space");
    let health = server.get("/healthz");
    assert_eq!(
        health.status,
        200,
        "{}",
        String::from_utf8_lossy(&health.body)
    );
    assert_eq!(health.json()["status"], json!("ok"));
    assert!(healthcheck(&db).status.success());
    assert!(db.run(&["healthcheck", "--url", &url]).status.success());
    let (_, answer) = client.call(db.admin_key.as_deref(), 99, "search_clients");
    assert!(answer["result"]["isError"] == json!(false), "{answer}");
}

// ---- Finding 4: restore and healthcheck refuse a foreign database -----------------------

#[test]
fn restore_and_healthcheck_refuse_a_foreign_database_and_a_genuine_backup_restores() {
    let db = TestDb::new();
    crate::sqlite_only!(db, "restore replaces an SQLite file");
    let foreign = db.dir.path().join("foreign.db");
    Connection::open(&foreign)
        .and_then(|c| c.execute_batch("CREATE TABLE foo(x); PRAGMA user_version = 2;"))
        .expect("a foreign file");
    let before = std::fs::read(&db.path).expect("read the database");

    let foreign_str = foreign.to_str().expect("utf-8");
    let out = db.run(&["restore", foreign_str, "--force"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is not a usable tollgate database")
            && stderr.contains("table \"foo\" is not part of a tollgate database"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&db.path).expect("read"),
        before,
        "the database was touched"
    );
    assert_eq!(
        db.run_json(&["company", "show", "--json"])["name"],
        json!("Test Co")
    );

    let out = Command::new(bin())
        .args(["--database", foreign_str, "healthcheck"])
        .env_remove("TOLLGATE_CONFIG")
        .env_remove("TOLLGATE_TEST_POSTGRES")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a tollgate database"));

    let backup = db.dir.path().join("genuine.db");
    let backup_str = backup.to_str().expect("utf-8");
    assert!(db.run(&["backup", backup_str]).status.success());
    let out = db.run(&["restore", backup_str, "--force"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(db.run(&["healthcheck"]).status.success());
}

// ---- Finding 5: a stderr nobody reads ----------------------------------------------------

const LOGGED_CALLS: u64 = 10_000;

/// A child whose stdout is read line by line (with a timeout) and whose stderr is a pipe
/// that nobody reads, kept open until the end.
struct Unread {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Option<ChildStderr>,
}

impl Unread {
    fn spawn(mut cmd: Command) -> Unread {
        cmd.env("RUST_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Unread {
            stdin: child.stdin.take(),
            stderr: child.stderr.take(),
            child,
            lines,
        }
    }

    fn recv(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(READ_TIMEOUT)
            .expect("the server stopped answering");
        serde_json::from_str(&line).expect("JSON")
    }

    /// What the server wrote to stderr, read only now (after it exited).
    fn stderr_text(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut stderr) = self.stderr.take() {
            let _ = stderr.read_to_string(&mut text);
        }
        text
    }
}

impl Drop for Unread {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_stdio_server_whose_stderr_is_never_read_keeps_answering() {
    let db = TestDb::new();
    let mut cmd = db.command(&["stdio"]);
    cmd.env("TOLLGATE_TOKEN", db.admin_key.as_deref().expect("key"));
    let mut server = Unread::spawn(cmd);
    let mut stdin = server.stdin.take().expect("stdin");
    // Sent in groups of 100, each answered before the next: every call logs an INFO line.
    for group in 0..LOGGED_CALLS / 100 {
        let mut lines = Vec::new();
        for i in 0..100 {
            let id = group * 100 + i;
            let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                                 "params": {"name": "no_such_tool", "arguments": {},
                                            "_meta": modern_meta()}});
            lines.extend(serde_json::to_vec(&request).expect("serialize"));
            lines.push(b'\n');
        }
        stdin.write_all(&lines).expect("write");
        stdin.flush().expect("flush");
        for _ in 0..100 {
            let answer = server.recv();
            assert_eq!(
                answer["error"]["data"]["code"],
                json!("unknown_tool"),
                "{answer}"
            );
        }
    }
    drop(stdin);
    // A clean exit: the flush of the blocked log gives up after a bounded wait.
    let deadline = Instant::now() + READ_TIMEOUT;
    let status = loop {
        if let Some(status) = server.child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "the server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    // stdout carried MCP messages only, to the end: the log's shutdown printed nothing there.
    loop {
        match server.lines.recv_timeout(READ_TIMEOUT) {
            Ok(line) => assert!(
                serde_json::from_str::<Value>(&line).is_ok(),
                "not an MCP message on stdout: {line}"
            ),
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => panic!("stdout stayed open"),
        }
    }
    let stderr = server.stderr_text();
    assert!(stderr.contains("tool call rejected"), "{stderr}");
}

#[test]
fn an_http_server_whose_stderr_is_never_read_keeps_answering_and_counts_dropped_lines() {
    let db = TestDb::new();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let listen = addr.to_string();
    let mut cmd = db.command(&["serve", "--listen", &listen]);
    cmd.env("TOLLGATE_HTTP_METRICS", "true");
    let server = Unread::spawn(cmd);
    let deadline = Instant::now() + READ_TIMEOUT;
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "the server did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client = KeepAlive::new(addr);
    for id in 0..LOGGED_CALLS {
        let (status, body) = client.call(db.admin_key.as_deref(), id, "no_such_tool");
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["error"]["data"]["code"],
            json!("unknown_tool"),
            "{body}"
        );
    }
    let page = http_request(addr, "GET", "/metrics", &[], b"");
    let page = String::from_utf8(page.body).expect("utf-8");
    let dropped = sample(&page, "tollgate_log_lines_dropped_total").expect("the counter");
    assert!(dropped > 0, "{page}");
    // Someone reads the log again: the next lines written say how many were dropped.
    let mut server = server;
    let mut stderr = server.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let (status, _) = client.call(db.admin_key.as_deref(), LOGGED_CALLS, "no_such_tool");
    assert_eq!(status, 200);
    drop(client);
    let term = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(term.success());
    assert!(server.child.wait().expect("wait").success());
    let text = reader.join().expect("reader");
    assert!(
        text.lines()
            .any(|l| l.contains(" log lines dropped: the reader of the log did not keep up")),
        "{}",
        &text[text.len().saturating_sub(2000)..]
    );
}

// ---- Finding 14: tool names cannot forge audit rows --------------------------------------

#[test]
fn tollgate_audit_escapes_control_characters_in_tool_names() {
    let db = TestDb::new();
    let forged = "x\nFAKE ROW\u{1b}[5m";
    let mut server = StdioServer::start(&db, &[]);
    server.initialize("2025-11-25");
    let answer = server.call_tool(forged, json!({}));
    assert_eq!(
        answer["error"]["data"]["code"],
        json!("unknown_tool"),
        "{answer}"
    );
    server.close();

    let out = db.run(&["audit"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "control characters in {text:?}"
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "a header and one row: {text}");
    assert!(lines[1].contains("x\\nFAKE ROW\\u{1b}[5m"), "{text}");
    assert!(!text.contains("\nFAKE ROW"));
    // --json stays exact.
    let rows = db.run_json(&["audit", "--json"]);
    assert_eq!(rows[0]["tool"], json!(forged));
}

// ---- Finding 15: the database is private -------------------------------------------------

/// `sh -c 'umask 000; exec tollgate …'`: what a permissive umask would make of new files.
fn permissive(db: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "umask 000; exec \"$0\" \"$@\""])
        .arg(bin())
        .arg("--database")
        .arg(db)
        .args(args)
        .env_remove("TOLLGATE_CONFIG")
        .env_remove("TOLLGATE_TEST_POSTGRES")
        .env_remove("TOLLGATE_TOKEN")
        .env("RUST_LOG", "warn");
    cmd
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn the_database_its_wal_and_shm_are_0600_whatever_the_umask() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.db");
    let out = permissive(&path, &["init", "--json"])
        .output()
        .expect("init");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(mode(&path), 0o600);

    // A running server holds the WAL and SHM open.
    let mut cmd = permissive(&path, &["stdio"]);
    cmd.env(
        "TOLLGATE_TOKEN",
        printed["admin_key"].as_str().expect("key"),
    );
    let mut server = StdioServer::spawn(cmd);
    server.initialize("2025-11-25");
    let created = server.call_tool("create_client", json!({"name": "Acme SL"}));
    assert_eq!(created["result"]["isError"], json!(false), "{created}");
    for suffix in ["", "-wal", "-shm"] {
        let file = PathBuf::from(format!("{}{suffix}", path.display()));
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    server.close();

    // A file an older version left readable by others is tightened, with a warning.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = permissive(&path, &["company", "show"])
        .output()
        .expect("run");
    assert!(out.status.success());
    assert_eq!(mode(&path), 0o600);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("its mode is now 600"), "{stderr}");
}
