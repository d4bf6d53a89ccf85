//! The harness: a scratch database made with `tollgate init`, and a `tollgate stdio`
//! child process spoken to line by line, with a timeout on every read.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

use serde_json::{Value, json};

/// How long any single read from the server may take before the test fails.
pub const READ_TIMEOUT: Duration = Duration::from_secs(20);

/// The modern-era `_meta` every 2026-07-28 request carries.
pub fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "0"}
    })
}

/// Path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tollgate")
}

/// The PostgreSQL server the suite runs against instead of SQLite, when
/// `TOLLGATE_TEST_POSTGRES` names one (a URL without a database name, e.g.
/// `postgres://postgres@127.0.0.1:5432`): every [`TestDb`] is then a fresh database on it.
pub fn postgres_server() -> Option<String> {
    std::env::var("TOLLGATE_TEST_POSTGRES")
        .ok()
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('/').to_owned())
}

/// A connection to the PostgreSQL server's maintenance database (creating and dropping
/// the test databases).
pub fn postgres_admin(server: &str) -> postgres::Client {
    postgres::Client::connect(&format!("{server}/postgres"), postgres::NoTls)
        .expect("TOLLGATE_TEST_POSTGRES: cannot connect to the server")
}

/// A fresh, empty PostgreSQL database on `server`, named `<prefix>_<random>`; returns
/// its URL and name.
pub fn create_postgres_database(server: &str, prefix: &str) -> (String, String) {
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes).expect("random");
    let name = format!(
        "{prefix}_{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    postgres_admin(server)
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .expect("create the test database");
    (format!("{server}/{name}"), name)
}

/// Drops a test database, ending its connections still open.
pub fn drop_postgres_database(server: &str, name: &str) {
    if let Ok(mut admin) = postgres::Client::connect(&format!("{server}/postgres"), postgres::NoTls)
    {
        let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    }
}

/// The catalog code of a refusal in either channel — a JSON-RPC error's `data.code`, or an
/// `isError` result's envelope code — or `None` for a success.
pub fn refusal_code(response: &Value) -> Option<String> {
    if let Some(error) = response.get("error") {
        return Some(error["data"]["code"].as_str().unwrap_or("?").to_owned());
    }
    let result = &response["result"];
    if result["isError"] == json!(true) {
        let code = result["_meta"]["dev.tollgate/error"]["code"].as_str();
        return Some(code.unwrap_or("?").to_owned());
    }
    None
}

/// Unix seconds now, for SQL a test runs (the same on both engines, unlike `unixepoch()`).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The store's write lock, held by the test from another connection until dropped: the
/// file's `BEGIN EXCLUSIVE` on SQLite, the store's advisory write lock on PostgreSQL.
pub enum WriteLock {
    /// An SQLite connection inside `BEGIN EXCLUSIVE`.
    Sqlite(rusqlite::Connection),
    /// A PostgreSQL session holding the advisory lock.
    Postgres(postgres::Client),
}

impl WriteLock {
    /// Releases the lock.
    pub fn release(self) {
        match self {
            WriteLock::Sqlite(conn) => conn.execute_batch("COMMIT").expect("unlock"),
            WriteLock::Postgres(mut client) => client
                .batch_execute("SELECT pg_advisory_unlock_all()")
                .expect("unlock"),
        }
    }
}

/// The key of the store's write lock on PostgreSQL (`store::postgres::WRITE_LOCK`).
pub const POSTGRES_WRITE_LOCK: i64 = 0x7467_0001;

/// Ends a test that checks what only an SQLite file has (its file, PRAGMAs, its locks),
/// when the suite runs on PostgreSQL.
#[macro_export]
macro_rules! sqlite_only {
    ($db:expr, $why:literal) => {
        if $db.is_postgres() {
            eprintln!(concat!("not on PostgreSQL: ", $why));
            return;
        }
    };
}

/// A scratch database created by `tollgate init`: an SQLite file in a scratch directory,
/// or, when the suite runs on PostgreSQL ([`postgres_server`]), a fresh database there.
pub struct TestDb {
    /// The scratch directory (removed on drop).
    pub dir: tempfile::TempDir,
    /// The database file (on PostgreSQL: unused, inside `dir`).
    pub path: PathBuf,
    /// The first admin key printed by `init`, when it prints one.
    pub admin_key: Option<String>,
    /// On PostgreSQL: the server, the database's URL and its name.
    pub postgres: Option<(String, String, String)>,
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some((server, _, name)) = &self.postgres {
            drop_postgres_database(server, name);
        }
    }
}

impl Default for TestDb {
    fn default() -> Self {
        Self::new()
    }
}

impl TestDb {
    /// A fresh database on the `pro` plan.
    pub fn new() -> TestDb {
        Self::with_init_args(&[])
    }

    /// A fresh database with extra `tollgate init` flags.
    pub fn with_init_args(extra: &[&str]) -> TestDb {
        Self::init_on(postgres_server(), extra)
    }

    /// A fresh database on the PostgreSQL server `server` (a URL without a database).
    pub fn on_postgres(server: &str) -> TestDb {
        Self::init_on(Some(server.to_owned()), &[])
    }

    /// A fresh SQLite file with extra `tollgate init` flags, whichever store the suite runs on.
    pub fn on_sqlite(extra: &[&str]) -> TestDb {
        Self::init_on(None, extra)
    }

    /// `tollgate init` of an SQLite file `tollgate.db` in `dir` (a file system the test
    /// controls: a tmpfs to fill or remount read-only), whichever store the suite runs on.
    pub fn init_in(dir: &Path) -> TestDb {
        let mut db = TestDb {
            dir: tempfile::tempdir().expect("tempdir"),
            path: dir.join("tollgate.db"),
            admin_key: None,
            postgres: None,
        };
        let printed = db.run_json(&["init", "--json", "--company", "Test Co"]);
        db.admin_key = printed["admin_key"].as_str().map(str::to_owned);
        db
    }

    fn init_on(server: Option<String>, extra: &[&str]) -> TestDb {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tollgate.db");
        let postgres = server.map(|server| {
            let (url, name) = create_postgres_database(&server, "tg_test");
            (server, url, name)
        });
        let mut db = TestDb {
            dir,
            path,
            admin_key: None,
            postgres,
        };
        let mut args = vec!["init", "--json", "--company", "Test Co"];
        args.extend_from_slice(extra);
        let out = db.run(&args);
        assert!(
            out.status.success(),
            "init failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: Value = serde_json::from_slice(&out.stdout).expect("init --json prints JSON");
        db.admin_key = printed
            .get("admin_key")
            .and_then(Value::as_str)
            .map(str::to_owned);
        db
    }

    /// Runs `tollgate --database <db> <args>`.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run tollgate")
    }

    /// A `tollgate --database <db> <args>` command, for custom stdio or env.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.arg("--database").arg(self.database_arg()).args(args);
        // TOLLGATE_GOLDEN and TOLLGATE_TEST_POSTGRES are switches of the tests: the server refuses unknown
        // TOLLGATE_* variables.
        cmd.env_remove("TOLLGATE_TOKEN")
            .env_remove("TOLLGATE_CONFIG")
            .env_remove("TOLLGATE_GOLDEN")
            .env_remove("TOLLGATE_TEST_POSTGRES");
        cmd.env("RUST_LOG", "warn");
        cmd
    }

    /// Runs a command that must succeed and returns its stdout parsed as JSON.
    pub fn run_json(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON output")
    }

    /// The database path as a string.
    pub fn path_str(&self) -> &str {
        self.path.to_str().expect("utf-8 path")
    }

    /// Whether this database is on PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        self.postgres.is_some()
    }

    /// What `--database` names: the PostgreSQL URL, or the file.
    pub fn database_arg(&self) -> String {
        match &self.postgres {
            Some((_, url, _)) => url.clone(),
            None => self.path_str().to_owned(),
        }
    }

    /// The configured database, for tests that build a server in-process.
    pub fn database(&self) -> tollgate::config::Database {
        tollgate::config::Database::parse(&self.database_arg()).expect("database")
    }

    /// Runs SQL statements (no parameters) directly on the database, on either engine.
    pub fn sql(&self, statements: &str) {
        match &self.postgres {
            Some((_, url, _)) => postgres::Client::connect(url, postgres::NoTls)
                .and_then(|mut c| c.batch_execute(statements))
                .expect("run SQL on the PostgreSQL test database"),
            None => rusqlite::Connection::open(&self.path)
                .and_then(|c| {
                    c.busy_timeout(Duration::from_secs(10))?;
                    c.execute_batch(statements)
                })
                .expect("run SQL on the test database"),
        }
    }

    /// Takes the store's write lock from a connection of the test's own.
    pub fn hold_write_lock(&self) -> WriteLock {
        match &self.postgres {
            Some((_, url, _)) => {
                let mut client = postgres::Client::connect(url, postgres::NoTls).expect("connect");
                client
                    .execute("SELECT pg_advisory_lock($1)", &[&POSTGRES_WRITE_LOCK])
                    .expect("take the write lock");
                WriteLock::Postgres(client)
            }
            None => {
                let conn = rusqlite::Connection::open(&self.path).expect("open the database");
                conn.execute_batch("BEGIN EXCLUSIVE")
                    .expect("lock the database");
                WriteLock::Sqlite(conn)
            }
        }
    }

    /// The rows of a query, each cell as text (`NULL` as `None`), on either engine. Cast
    /// what is not text in the query itself: `CAST(x AS TEXT)` reads the same on both.
    pub fn sql_rows(&self, query: &str) -> Vec<Vec<Option<String>>> {
        match &self.postgres {
            Some((_, url, _)) => {
                let mut client = postgres::Client::connect(url, postgres::NoTls).expect("connect");
                client
                    .query(query, &[])
                    .expect("query the PostgreSQL test database")
                    .iter()
                    .map(|row| {
                        (0..row.len())
                            .map(|i| row.get::<_, Option<String>>(i))
                            .collect()
                    })
                    .collect()
            }
            None => {
                let conn = rusqlite::Connection::open(&self.path).expect("open");
                conn.busy_timeout(Duration::from_secs(10))
                    .expect("busy timeout");
                let mut stmt = conn.prepare(query).expect("prepare");
                let columns = stmt.column_count();
                stmt.query_map([], |row| {
                    (0..columns)
                        .map(|i| row.get::<_, Option<String>>(i))
                        .collect::<Result<Vec<_>, _>>()
                })
                .expect("query")
                .collect::<Result<Vec<_>, _>>()
                .expect("rows")
            }
        }
    }

    /// The one integer a query returns (`CAST(… AS TEXT)` not needed), on either engine.
    pub fn sql_i64(&self, query: &str) -> i64 {
        let wrapped = format!("SELECT CAST(({query}) AS TEXT)");
        let rows = self.sql_rows(&wrapped);
        rows.first()
            .and_then(|row| row.first().cloned().flatten())
            .map(|text| text.parse().expect("an integer"))
            .unwrap_or_else(|| panic!("no value from {query}"))
    }
}

/// A running `tollgate stdio`.
pub struct StdioServer {
    /// The child process.
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: i64,
    /// Notifications received while waiting for responses.
    pub notifications: Vec<Value>,
}

impl StdioServer {
    /// Starts `tollgate stdio` with the admin key of `db` (if any) and extra flags.
    pub fn start(db: &TestDb, extra: &[&str]) -> StdioServer {
        Self::start_with_token(db, db.admin_key.as_deref(), extra)
    }

    /// Starts `tollgate stdio` with an explicit token (or none).
    pub fn start_with_token(db: &TestDb, token: Option<&str>, extra: &[&str]) -> StdioServer {
        let mut args = vec!["stdio"];
        args.extend_from_slice(extra);
        let mut cmd = db.command(&args);
        if let Some(token) = token {
            cmd.env("TOLLGATE_TOKEN", token);
        }
        Self::spawn(cmd)
    }

    /// Spawns a prepared command with piped stdin and stdout, stderr inherited.
    pub fn spawn(cmd: Command) -> StdioServer {
        Self::spawn_with_stderr(cmd, Stdio::inherit())
    }

    /// Spawns a prepared command with piped stdin and stdout, stderr to `stderr`.
    pub fn spawn_with_stderr(mut cmd: Command, stderr: Stdio) -> StdioServer {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr);
        let mut child = cmd.spawn().expect("spawn tollgate stdio");
        let rx = read_lines(child.stdout.take().expect("stdout"));
        StdioServer {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            next_id: 0,
            notifications: Vec::new(),
        }
    }

    /// Writes raw bytes (a newline is not added).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write stdin");
        stdin.flush().expect("flush stdin");
    }

    /// Writes one JSON message and a newline.
    pub fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).expect("serialize");
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// Reads the next message, failing the test after [`READ_TIMEOUT`].
    pub fn recv(&mut self) -> Value {
        match self.lines.recv_timeout(READ_TIMEOUT) {
            Ok(line) => serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}")),
            Err(RecvTimeoutError::Timeout) => {
                panic!("no message from the server within {READ_TIMEOUT:?}")
            }
            Err(RecvTimeoutError::Disconnected) => panic!("the server closed stdout"),
        }
    }

    /// Reads messages until a response (not a notification) arrives.
    pub fn recv_response(&mut self) -> Value {
        loop {
            let message = self.recv();
            if message.get("method").is_some() {
                self.notifications.push(message);
            } else {
                return message;
            }
        }
    }

    /// Sends a request with a fresh id and returns its response.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let response = self.recv_response();
        assert_eq!(
            response["id"],
            json!(id),
            "response id for {method}: {response}"
        );
        response
    }

    /// Performs the handshake at `version` and returns the initialize result.
    pub fn initialize(&mut self, version: &str) -> Value {
        let response = self.request(
            "initialize",
            json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "tests", "version": "0"}}),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        response["result"].clone()
    }

    /// Calls a tool on the handshake era.
    pub fn call_tool(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
    }

    /// Closes stdin and waits for the process to exit.
    pub fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        self.child.wait().expect("wait")
    }
}

impl Drop for StdioServer {
    /// Ends the server as a client would (EOF on stdin), so it flushes its audit rows; kills
    /// it only if it does not exit in time. Tests that want a crash kill it themselves.
    fn drop(&mut self) {
        drop(self.stdin.take());
        stop_child(&mut self.child);
    }
}

/// Waits up to 10 s for `child` to exit, then kills it.
fn stop_child(child: &mut Child) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Asserts a JSON-RPC error response against a catalog entry.
pub fn assert_error(
    response: &Value,
    rpc_code: i64,
    code: &str,
    http_status: u64,
    error_code: u64,
    retryable: bool,
) {
    let error = &response["error"];
    assert_eq!(error["code"], json!(rpc_code), "code in {response}");
    assert_eq!(error["message"], json!(code), "message in {response}");
    assert_eq!(
        error["data"]["code"],
        json!(code),
        "data.code in {response}"
    );
    assert_eq!(
        error["data"]["http_status"],
        json!(http_status),
        "http_status in {response}"
    );
    assert_eq!(
        error["data"]["error_code"],
        json!(error_code),
        "error_code in {response}"
    );
    assert_eq!(
        error["data"]["retryable"],
        json!(retryable),
        "retryable in {response}"
    );
    assert!(
        error["data"]["hint"]
            .as_str()
            .is_some_and(|h| !h.is_empty()),
        "hint in {response}"
    );
    assert_hint_complete(&error["data"]["hint"], response);
}

/// A debug build writes a template field the error lacks as `{field}`: every error the
/// black-box tests see must carry the fields its sentence names.
pub fn assert_hint_complete(hint: &Value, response: &Value) {
    let text = hint.as_str().unwrap_or_default();
    let unfilled = text.split('{').skip(1).any(|rest| {
        rest.split_once('}').is_some_and(|(name, _)| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c == '.' || c == ':')
        })
    });
    assert!(!unfilled, "an unfilled field in the hint of {response}");
}

/// Asserts an `isError` tool result against a catalog code.
pub fn assert_tool_error(response: &Value, code: &str, http_status: u64, error_code: u64) {
    let result = &response["result"];
    assert_eq!(result["isError"], json!(true), "isError in {response}");
    let envelope = &result["_meta"]["dev.tollgate/error"];
    assert_eq!(envelope["code"], json!(code), "code in {response}");
    assert_eq!(
        envelope["http_status"],
        json!(http_status),
        "http_status in {response}"
    );
    assert_eq!(
        envelope["error_code"],
        json!(error_code),
        "error_code in {response}"
    );
    assert_eq!(
        result["content"][0]["text"], envelope["hint"],
        "hint text in {response}"
    );
    assert_hint_complete(&envelope["hint"], response);
}

/// Whether `path` exists (helper for file assertions).
pub fn exists(path: &Path) -> bool {
    path.exists()
}

// ---- HTTP: a `tollgate serve` child and a small HTTP/1.1 client -------------------------

/// One HTTP response, read in full.
#[derive(Debug)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// Header names lowercased, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): status {} {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The `data:` payloads of a `text/event-stream` body, each parsed as JSON.
    pub fn sse_messages(&self) -> Vec<Value> {
        parse_sse(&String::from_utf8_lossy(&self.body))
    }
}

/// The JSON `data:` payloads of the events in an SSE text (comments skipped).
pub fn parse_sse(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            (!data.is_empty()).then(|| {
                let joined = data.join("\n");
                serde_json::from_str(&joined)
                    .unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {joined}"))
            })
        })
        .collect()
}

/// An HTTP/1.1 exchange in progress: the request is sent, the response is read on demand.
/// Requests carry `Connection: close`, so a body without a length ends at EOF.
pub struct HttpExchange {
    reader: BufReader<std::net::TcpStream>,
}

impl HttpExchange {
    /// Connects to `addr` and sends `method path` with `headers` and `body`. A `Host`
    /// header is added unless `headers` has one; `Content-Length` unless `headers` has a
    /// `Transfer-Encoding` or `Content-Length`. Write errors on the body are ignored (the
    /// server may answer and close before reading an oversized body).
    pub fn send(
        addr: std::net::SocketAddr,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> HttpExchange {
        let stream =
            std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("read timeout");
        stream
            .set_write_timeout(Some(READ_TIMEOUT))
            .expect("write timeout");
        let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        let mut head = format!("{method} {path} HTTP/1.1\r\n");
        if !has("host") {
            head.push_str(&format!("Host: {addr}\r\n"));
        }
        if !has("content-length") && !has("transfer-encoding") {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("Connection: close\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut writer = stream.try_clone().expect("clone stream");
        writer
            .write_all(head.as_bytes())
            .expect("write request head");
        let _ = writer.write_all(body).and_then(|()| writer.flush());
        HttpExchange {
            reader: BufReader::new(stream),
        }
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader
            .read_line(&mut line)
            .expect("read a response line");
        line.trim_end_matches(['\r', '\n']).to_owned()
    }

    /// Reads the status line and the headers (lowercased names).
    pub fn read_head(&mut self) -> (u16, Vec<(String, String)>) {
        let status_line = self.line();
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line: {status_line:?}"));
        let mut headers = Vec::new();
        loop {
            let line = self.line();
            if line.is_empty() {
                return (status, headers);
            }
            let (name, value) = line
                .split_once(':')
                .unwrap_or_else(|| panic!("bad header line: {line:?}"));
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }

    /// Reads one chunk of a chunked body; `None` after the last (empty) chunk.
    pub fn read_chunk(&mut self) -> Option<Vec<u8>> {
        let size_line = self.line();
        let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or_else(|e| panic!("bad chunk size {size_line:?}: {e}"));
        if size == 0 {
            while !self.line().is_empty() {}
            return None;
        }
        let mut chunk = vec![0; size];
        std::io::Read::read_exact(&mut self.reader, &mut chunk).expect("read chunk");
        let end = self.line();
        assert!(end.is_empty(), "chunk not followed by CRLF: {end:?}");
        Some(chunk)
    }

    /// Reads the body that follows `headers`: chunked, by length, or to EOF.
    pub fn read_body(&mut self, headers: &[(String, String)]) -> Vec<u8> {
        let get = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            let mut body = Vec::new();
            while let Some(chunk) = self.read_chunk() {
                body.extend_from_slice(&chunk);
            }
            return body;
        }
        if let Some(len) = get("content-length") {
            let mut body = vec![0; len.parse().expect("content-length")];
            std::io::Read::read_exact(&mut self.reader, &mut body).expect("read body");
            return body;
        }
        let mut body = Vec::new();
        std::io::Read::read_to_end(&mut self.reader, &mut body).expect("read body to EOF");
        body
    }

    /// Reads the whole response.
    pub fn finish(mut self) -> HttpResponse {
        let (status, headers) = self.read_head();
        let body = self.read_body(&headers);
        HttpResponse {
            status,
            headers,
            body,
        }
    }
}

/// Sends one request and reads its whole response.
pub fn http_request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    HttpExchange::send(addr, method, path, headers, body).finish()
}

/// A running `tollgate serve` on a free loopback port; killed on drop.
pub struct HttpServer {
    /// The child process.
    pub child: Child,
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    /// Its stderr, written to a file next to the database.
    pub log: PathBuf,
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

impl HttpServer {
    /// Starts `tollgate serve --listen 127.0.0.1:<free port> <extra>` and waits for `/healthz`.
    pub fn start(db: &TestDb, extra: &[&str]) -> HttpServer {
        Self::start_with_env(db, extra, &[])
    }

    /// Like [`HttpServer::start`], with extra environment variables (documented
    /// `TOLLGATE_*` config keys only: the server refuses unknown ones).
    pub fn start_with_env(db: &TestDb, extra: &[&str], env: &[(&str, &str)]) -> HttpServer {
        Self::spawn_serve(db, extra, env, None)
    }

    /// Like [`HttpServer::start_with_env`], working in the database's scratch directory:
    /// where the server keeps what it writes besides the database whichever store the
    /// suite runs on (the SQLite file's directory, or the working directory).
    pub fn start_in_scratch_dir(db: &TestDb, extra: &[&str], env: &[(&str, &str)]) -> HttpServer {
        Self::spawn_serve(db, extra, env, Some(db.dir.path()))
    }

    /// Like [`HttpServer::start`], on `port` (a test that must know the address before
    /// the server starts: a provider's redirect URI names it).
    pub fn start_on_port(db: &TestDb, port: u16, extra: &[&str]) -> HttpServer {
        Self::spawn_serve_on(db, extra, &[], None, port)
    }

    fn spawn_serve(
        db: &TestDb,
        extra: &[&str],
        env: &[(&str, &str)],
        working_dir: Option<&Path>,
    ) -> HttpServer {
        Self::spawn_serve_on(db, extra, env, working_dir, free_port())
    }

    fn spawn_serve_on(
        db: &TestDb,
        extra: &[&str],
        env: &[(&str, &str)],
        working_dir: Option<&Path>,
        port: u16,
    ) -> HttpServer {
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let listen = addr.to_string();
        let mut args = vec!["serve", "--listen", listen.as_str()];
        args.extend_from_slice(extra);
        let mut cmd = db.command(&args);
        cmd.envs(env.iter().copied());
        if let Some(dir) = working_dir {
            cmd.current_dir(dir);
        }
        let log = db.dir.path().join(format!("serve-{port}.log"));
        let log_file = std::fs::File::create(&log).expect("create server log");
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        let child = cmd.spawn().expect("spawn tollgate serve");
        let mut server = HttpServer { child, addr, log };
        server.wait_healthy();
        server
    }

    fn wait_healthy(&mut self) {
        let deadline = std::time::Instant::now() + READ_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!("tollgate serve exited with {status}: {}", self.log_text());
            }
            if std::net::TcpStream::connect(self.addr).is_ok() {
                let health = self.get("/healthz");
                assert_eq!(
                    health.status,
                    200,
                    "healthz: {:?}",
                    String::from_utf8_lossy(&health.body)
                );
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "tollgate serve did not listen: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the server wrote to stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The server's log once it contains `needle` (logging is asynchronous: a line reaches
    /// the file shortly after the event it tells), polled for at most [`READ_TIMEOUT`];
    /// the log as it stands when the wait ends without it.
    pub fn log_once_it_contains(&self, needle: &str) -> String {
        wait_for_text(|| self.log_text(), needle)
    }

    /// A handshake-era session of `token` at `version`: `initialize` (answered 200 with a
    /// session id), then `notifications/initialized` (202); the `Mcp-Session-Id`.
    pub fn open_session(&self, version: &str, token: &str) -> String {
        let auth = format!("Bearer {token}");
        let init = self.post_mcp(
            &[("Authorization", auth.as_str())],
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": version, "capabilities": {},
                               "clientInfo": {"name": "tests", "version": "0"}}}),
        );
        assert_eq!(init.status, 200, "{}", String::from_utf8_lossy(&init.body));
        let id = init
            .header("mcp-session-id")
            .expect("an authenticated initialize opens a session")
            .to_owned();
        let initialized = self.post_mcp(
            &[
                ("Authorization", auth.as_str()),
                ("Mcp-Session-Id", id.as_str()),
                ("MCP-Protocol-Version", version),
            ],
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        assert_eq!(initialized.status, 202);
        id
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> HttpResponse {
        http_request(self.addr, "GET", path, &[], b"")
    }

    /// `POST /mcp` of a JSON body with `headers`, plus `Content-Type: application/json` and
    /// `Accept: application/json, text/event-stream` unless `headers` sets them.
    pub fn post_mcp(&self, headers: &[(&str, &str)], body: &Value) -> HttpResponse {
        let given = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        let mut all = Vec::new();
        if !given("content-type") {
            all.push(("Content-Type", "application/json"));
        }
        if !given("accept") {
            all.push(("Accept", "application/json, text/event-stream"));
        }
        all.extend_from_slice(headers);
        http_request(
            self.addr,
            "POST",
            "/mcp",
            &all,
            &serde_json::to_vec(body).expect("serialize"),
        )
    }

    /// Writes `config` to `tollgate.toml` beside `db` and starts `tollgate serve --config`
    /// on it, with extra environment variables.
    pub fn start_with_config(db: &TestDb, config: &str, env: &[(&str, &str)]) -> HttpServer {
        let path = db.dir.path().join("tollgate.toml");
        std::fs::write(&path, config).expect("write config");
        Self::start_with_env(db, &["--config", path.to_str().expect("utf-8")], env)
    }

    /// Every tool of a 2026-07-28 `tools/list` by `token`, following `nextCursor`.
    pub fn modern_tools_list(&self, token: &str) -> Vec<Value> {
        let auth = format!("Bearer {token}");
        let mut tools = Vec::new();
        let mut cursor: Option<Value> = None;
        loop {
            let mut params = match cursor.take() {
                Some(cursor) => json!({"cursor": cursor}),
                None => json!({}),
            };
            merge_modern_meta(&mut params);
            let page = self
                .post_mcp(
                    &[
                        ("Authorization", auth.as_str()),
                        ("MCP-Protocol-Version", "2026-07-28"),
                        ("Mcp-Method", "tools/list"),
                    ],
                    &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}),
                )
                .json();
            let listed = page["result"]["tools"]
                .as_array()
                .unwrap_or_else(|| panic!("tools in {page}"));
            tools.extend(listed.iter().cloned());
            match page["result"].get("nextCursor") {
                Some(next) if !next.is_null() => cursor = Some(next.clone()),
                _ => return tools,
            }
        }
    }

    /// A 2026-07-28 `tools/call` (id 1) with the headers a conforming client sends.
    pub fn modern_tool_call(&self, token: &str, tool: &str, args: &Value) -> HttpResponse {
        self.modern_tool_call_with(token, tool, json!({"name": tool, "arguments": args}))
    }

    /// A 2026-07-28 `tools/call` of `tool` without arguments that asks for progress under
    /// `progress_token` (the answer an event stream when progress is sent).
    pub fn modern_tool_call_with_progress(
        &self,
        token: &str,
        tool: &str,
        progress_token: &str,
    ) -> HttpResponse {
        let params =
            json!({"name": tool, "arguments": {}, "_meta": {"progressToken": progress_token}});
        self.modern_tool_call_with(token, tool, params)
    }

    fn modern_tool_call_with(&self, token: &str, tool: &str, mut params: Value) -> HttpResponse {
        merge_modern_meta(&mut params);
        let auth = format!("Bearer {token}");
        self.post_mcp(
            &[
                ("Authorization", auth.as_str()),
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", tool),
            ],
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}),
        )
    }

    /// A 2026-07-28 request (id 1) of `method` with `params` by `token`, with the headers a
    /// conforming client sends (`Mcp-Name` for the methods that name their target).
    pub fn modern_request(&self, token: &str, method: &str, mut params: Value) -> Value {
        merge_modern_meta(&mut params);
        let auth = format!("Bearer {token}");
        let name = params
            .get("name")
            .or_else(|| params.get("uri"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mut headers = vec![
            ("Authorization", auth.as_str()),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", method),
        ];
        if let Some(name) = &name {
            headers.push(("Mcp-Name", name.as_str()));
        }
        self.post_mcp(
            &headers,
            &json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
        )
        .json()
    }

    /// Sends SIGTERM (through `kill(1)`) and waits for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.signal_term();
        self.child.wait().expect("wait")
    }

    /// Sends SIGTERM through `kill(1)` without waiting.
    pub fn signal_term(&self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
    }
}

impl Drop for HttpServer {
    /// Stops the server with SIGTERM (graceful: in-flight calls finish, audit rows are
    /// flushed); kills it only if it does not exit in time.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(self.child.id().to_string())
                .status();
        }
        stop_child(&mut self.child);
    }
}

impl TestDb {
    /// The public id of the admin key (`tg_live_<id>_<secret>`).
    pub fn admin_key_id(&self) -> String {
        let key = self
            .admin_key
            .as_deref()
            .expect("init printed an admin key");
        key.split('_')
            .nth(2)
            .expect("token has a public id")
            .to_owned()
    }
}

/// Reads `read` until its text contains `needle`, for at most [`READ_TIMEOUT`]; gives the
/// last text read.
pub fn wait_for_text(read: impl Fn() -> String, needle: &str) -> String {
    let deadline = std::time::Instant::now() + READ_TIMEOUT;
    loop {
        let text = read();
        if text.contains(needle) || std::time::Instant::now() >= deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` (a `tollgate stdio`) with `lines` written to its stdin, one message a line,
/// then its stdin closed; returns what it printed once it exited. The end of its input lets
/// every request in flight finish before the process exits.
pub fn stdio_transcript(mut cmd: Command, lines: &[Value]) -> Output {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn tollgate stdio");
    let mut stdin = child.stdin.take().expect("stdin");
    for line in lines {
        writeln!(stdin, "{line}").expect("write a line");
    }
    drop(stdin);
    child.wait_with_output().expect("wait for tollgate stdio")
}

/// The lines `stdout` writes, read on a thread of their own until it closes.
pub fn read_lines(stdout: std::process::ChildStdout) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// A key made by `tollgate key create --json`.
pub struct Key {
    /// Its public id.
    pub id: String,
    /// The whole token, shown once.
    pub token: String,
}

impl TestDb {
    /// `tollgate key create --name NAME --scopes SCOPES --json EXTRA…`: the new key.
    pub fn create_key(&self, name: &str, scopes: &str, extra: &[&str]) -> Key {
        let mut argv = vec![
            "key", "create", "--name", name, "--scopes", scopes, "--json",
        ];
        argv.extend_from_slice(extra);
        let printed = self.run_json(&argv);
        Key {
            id: printed["id"].as_str().expect("id").to_owned(),
            token: printed["token"].as_str().expect("token").to_owned(),
        }
    }

    /// `tollgate limits set --credential ID --category CATEGORY --per-minute N`.
    pub fn limit_per_minute(&self, credential: &str, category: &str, per_minute: u64) {
        let per_minute = per_minute.to_string();
        let out = self.run(&[
            "limits",
            "set",
            "--credential",
            credential,
            "--category",
            category,
            "--per-minute",
            &per_minute,
        ]);
        assert!(
            out.status.success(),
            "limits set: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A small tmpfs mounted for one test; unmounted (lazily) on drop.
pub struct TinyDisk {
    /// Where it is mounted.
    pub mount: PathBuf,
}

impl TinyDisk {
    /// Mounts a tmpfs of `size` under `dir`, when this process may (root, `mount` present).
    pub fn mount(dir: &Path, size: &str) -> Option<TinyDisk> {
        let mount = dir.join("disk");
        std::fs::create_dir_all(&mount).ok()?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mount)
            .stderr(Stdio::null())
            .status()
            .ok()?;
        status.success().then_some(TinyDisk { mount })
    }
}

impl Drop for TinyDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

/// Merges the 2026-07-28 request `_meta` ([`modern_meta`]) into `params`, keeping any
/// entry `params` already has.
pub fn merge_modern_meta(params: &mut Value) {
    let meta = params
        .as_object_mut()
        .expect("params object")
        .entry("_meta")
        .or_insert_with(|| json!({}));
    let meta = meta.as_object_mut().expect("_meta object");
    for (k, v) in modern_meta().as_object().expect("meta") {
        meta.entry(k.clone()).or_insert(v.clone());
    }
}

/// One request a [`RestBackend`] received.
#[derive(Debug, Clone)]
pub struct ReceivedRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path with its query.
    pub target: String,
    /// Header names lower-cased, with their values.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl ReceivedRequest {
    /// The value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What a [`RestBackend`] answers: status, extra headers, body.
pub type RestAnswer = (u16, Vec<(String, String)>, Vec<u8>);

/// A REST backend served by the test on 127.0.0.1: every request is recorded and answered
/// by `answer`, one request per connection (`Connection: close`). It stops when dropped.
pub struct RestBackend {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    received: std::sync::Arc<std::sync::Mutex<Vec<ReceivedRequest>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl RestBackend {
    /// Starts serving; `answer` sees each request.
    pub fn start<F>(answer: F) -> RestBackend
    where
        F: Fn(&ReceivedRequest) -> RestAnswer + Send + Sync + 'static,
    {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let answer = std::sync::Arc::new(answer);
        let (seen, stopping) = (received.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (seen, answer) = (seen.clone(), answer.clone());
                        std::thread::spawn(move || serve_one(stream, &seen, answer.as_ref()));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        RestBackend {
            addr,
            received,
            stop,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<ReceivedRequest> {
        self.received.lock().expect("lock").clone()
    }
}

impl Drop for RestBackend {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

fn serve_one(
    stream: std::net::TcpStream,
    seen: &std::sync::Mutex<Vec<ReceivedRequest>>,
    answer: &(dyn Fn(&ReceivedRequest) -> RestAnswer + Send + Sync),
) {
    use std::io::Read;
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let mut reader = std::io::BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.trim_end().split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request = ReceivedRequest {
        method,
        target,
        headers,
        body,
    };
    let (status, extra, reply) = answer(&request);
    seen.lock().expect("lock").push(request);
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.len()
    );
    if !extra
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
    {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut stream = reader.into_inner();
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&reply);
}
