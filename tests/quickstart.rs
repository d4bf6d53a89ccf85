//! `tollgate quickstart` as a new user meets it: a busy address refused before anything is
//! created, and once serving, the lines it prints are true — the listener already answers,
//! the paths are absolute and exist, and the stdio configuration it prints, with the key
//! it shows, starts a working server from another directory.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use serde_json::{Value, json};

use crate::util::{READ_TIMEOUT, bin, free_port, http_request};

/// A quickstart child, killed when dropped.
struct Quickstart {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Quickstart {
    /// `tollgate --config slow.toml quickstart` in `dir`: the configuration's one backend is
    /// an upstream that takes two seconds to fail, so the listener comes up only after the
    /// backends were opened — text printed before that would be printed too early.
    fn start(dir: &std::path::Path, addr: SocketAddr) -> Quickstart {
        std::fs::write(
            dir.join("slow.toml"),
            "[[backends]]\nname = \"slow\"\nkind = \"mcp\"\ncommand = \"sleep\"\nargs = [\"2\"]\n",
        )
        .expect("write config");
        let mut child = Command::new(bin())
            .current_dir(dir)
            .args([
                "--config",
                "slow.toml",
                "quickstart",
                "--listen",
                &addr.to_string(),
            ])
            .env("RUST_LOG", "warn")
            .env_remove("TOLLGATE_TEST_POSTGRES")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn quickstart");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Quickstart { child, lines }
    }

    /// Lines up to and including the first that starts with `last`.
    fn until(&self, last: &str) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let line = self
                .lines
                .recv_timeout(READ_TIMEOUT)
                .unwrap_or_else(|_| panic!("no line starting {last:?} in {seen:#?}"));
            let done = line.trim_start().starts_with(last);
            seen.push(line);
            if done {
                return seen;
            }
        }
    }
}

impl Drop for Quickstart {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value after `label` on the line that starts with it.
fn field<'a>(lines: &'a [String], label: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.trim_start().strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label:?} in {lines:#?}"))
        .trim()
}

#[test]
fn a_busy_address_is_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().expect("dir");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let out = Command::new(bin())
        .current_dir(dir.path())
        .args(["quickstart", "--listen", &addr.to_string()])
        .env_remove("TOLLGATE_TEST_POSTGRES")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
    assert!(stderr.contains("--listen 127.0.0.1:"), "{stderr}");
    assert!(
        std::fs::read_dir(dir.path()).expect("dir").next().is_none(),
        "nothing was created"
    );
}

#[test]
fn what_quickstart_prints_once_serving_is_true() {
    let dir = tempfile::tempdir().expect("dir");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let quickstart = Quickstart::start(dir.path(), addr);
    let lines = quickstart.until("Lost the admin key?");
    let key_line = lines
        .iter()
        .position(|l| l.starts_with("Admin key "))
        .expect("the admin key is announced");
    let key = lines[key_line + 1].trim().to_owned();
    assert!(key.starts_with("tg_live_"), "{lines:#?}");
    // Printed only once the listener answers: no waiting here (the slow backend kept the
    // listener down for two seconds after the database and the key were made).
    let health = http_request(addr, "GET", "/healthz", &[], b"");
    assert_eq!(health.status, 200);
    assert_eq!(field(&lines, "MCP endpoint"), format!("http://{addr}/mcp"));
    let console = field(&lines, "Console");
    assert!(
        console.starts_with(&format!("http://{addr}/console")),
        "{console}"
    );
    let database = std::path::PathBuf::from(field(&lines, "Database"));
    assert!(database.is_absolute() && database.exists(), "{database:?}");
    assert_eq!(
        std::fs::canonicalize(field(&lines, "Binary")).expect("binary"),
        std::fs::canonicalize(bin()).expect("binary")
    );

    // The stdio configuration, run as a client would run it, from another directory.
    let config_line = lines
        .iter()
        .find(|l| l.trim_start().starts_with("{\"mcpServers\""))
        .expect("a stdio configuration");
    let config: Value = serde_json::from_str(config_line.trim()).expect("json");
    let server = &config["mcpServers"]["tollgate"];
    assert_eq!(server["env"]["TOLLGATE_TOKEN"], json!(key));
    let elsewhere = tempfile::tempdir().expect("dir");
    let args: Vec<String> = server["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("arg").to_owned())
        .collect();
    let mut stdio = Command::new(server["command"].as_str().expect("command"))
        .current_dir(elsewhere.path())
        .args(&args)
        .env("TOLLGATE_TOKEN", &key)
        .env_remove("TOLLGATE_TEST_POSTGRES")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the stdio configuration");
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "newcomer", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "search_clients", "arguments": {}}}),
    ];
    {
        use std::io::Write;
        let mut stdin = stdio.stdin.take().expect("stdin");
        for request in &requests {
            writeln!(stdin, "{request}").expect("write");
        }
    }
    let output = stdio.wait_with_output().expect("stdio output");
    let answers: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON-RPC line"))
        .collect();
    let call = answers.iter().find(|a| a["id"] == 2).expect("the call");
    assert_eq!(call["result"]["isError"], json!(false), "{call}");
    // Five demo clients, as the quickstart's database has.
    assert_eq!(
        call["result"]["structuredContent"]["data"]
            .as_array()
            .map(Vec::len),
        Some(5),
        "{call}"
    );
}
