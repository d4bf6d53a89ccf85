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

/// A scratch directory holding a database created by `tollgate init`.
pub struct TestDb {
    /// The scratch directory (removed on drop).
    pub dir: tempfile::TempDir,
    /// The database file.
    pub path: PathBuf,
    /// The first admin key printed by `init`, when it prints one.
    pub admin_key: Option<String>,
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
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tollgate.db");
        let mut db = TestDb { dir, path, admin_key: None };
        let mut args = vec!["init", "--json", "--company", "Test Co"];
        args.extend_from_slice(extra);
        let out = db.run(&args);
        assert!(out.status.success(), "init failed: {}", String::from_utf8_lossy(&out.stderr));
        let printed: Value = serde_json::from_slice(&out.stdout).expect("init --json prints JSON");
        db.admin_key = printed.get("admin_key").and_then(Value::as_str).map(str::to_owned);
        db
    }

    /// Runs `tollgate --database <db> <args>`.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run tollgate")
    }

    /// A `tollgate --database <db> <args>` command, for custom stdio or env.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.arg("--database").arg(&self.path).args(args);
        cmd.env_remove("TOLLGATE_TOKEN").env_remove("TOLLGATE_CONFIG");
        cmd.env("RUST_LOG", "warn");
        cmd
    }

    /// Runs a command that must succeed and returns its stdout parsed as JSON.
    pub fn run_json(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("JSON output")
    }

    /// The database path as a string.
    pub fn path_str(&self) -> &str {
        self.path.to_str().expect("utf-8 path")
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

    /// Spawns a prepared command with piped stdio.
    pub fn spawn(mut cmd: Command) -> StdioServer {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn tollgate stdio");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        StdioServer { stdin: child.stdin.take(), child, lines: rx, next_id: 0, notifications: Vec::new() }
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
            Ok(line) => serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}")),
            Err(RecvTimeoutError::Timeout) => panic!("no message from the server within {READ_TIMEOUT:?}"),
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
        assert_eq!(response["id"], json!(id), "response id for {method}: {response}");
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
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts a JSON-RPC error response against a catalog entry.
pub fn assert_error(response: &Value, rpc_code: i64, code: &str, http_status: u64, error_code: u64, retryable: bool) {
    let error = &response["error"];
    assert_eq!(error["code"], json!(rpc_code), "code in {response}");
    assert_eq!(error["message"], json!(code), "message in {response}");
    assert_eq!(error["data"]["code"], json!(code), "data.code in {response}");
    assert_eq!(error["data"]["http_status"], json!(http_status), "http_status in {response}");
    assert_eq!(error["data"]["error_code"], json!(error_code), "error_code in {response}");
    assert_eq!(error["data"]["retryable"], json!(retryable), "retryable in {response}");
    assert!(error["data"]["hint"].as_str().is_some_and(|h| !h.is_empty()), "hint in {response}");
}

/// Asserts an `isError` tool result against a catalog code.
pub fn assert_tool_error(response: &Value, code: &str, http_status: u64, error_code: u64) {
    let result = &response["result"];
    assert_eq!(result["isError"], json!(true), "isError in {response}");
    let envelope = &result["_meta"]["dev.tollgate/error"];
    assert_eq!(envelope["code"], json!(code), "code in {response}");
    assert_eq!(envelope["http_status"], json!(http_status), "http_status in {response}");
    assert_eq!(envelope["error_code"], json!(error_code), "error_code in {response}");
    assert_eq!(result["content"][0]["text"], envelope["hint"], "hint text in {response}");
}

/// Whether `path` exists (helper for file assertions).
pub fn exists(path: &Path) -> bool {
    path.exists()
}
