//! An upstream MCP server behind the gate: `tollgate stdio` itself (the binary under test,
//! with a database and a credential of its own) is the upstream of a `tollgate serve`.
//! Its tools are offered under the prefix, calls go through, its failures come back as
//! the catalog says, and a killed upstream is `backend_unavailable` until it is restarted.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{HttpServer, Key, TestDb, assert_tool_error, bin};

/// How long a test waits for the upstream to change state.
const STATE_WAIT: Duration = Duration::from_secs(30);

/// An id no client of the upstream has (it matches the id pattern, so it reaches it).
const NO_CLIENT: &str = "cli_00000000-0000-7000-8000-000000000000";

/// The upstream's database and credential, and the gate in front of it.
struct Gate {
    upstream: TestDb,
    upstream_key: Key,
    db: TestDb,
    server: HttpServer,
}

impl Gate {
    /// `tollgate serve` with `tollgate stdio` as the backend `up`.
    fn start() -> Gate {
        Self::start_with(|_| {})
    }

    /// [`Gate::start`], with `before` done to the upstream's database first.
    fn start_with(before: impl FnOnce(&TestDb)) -> Gate {
        // The upstream is another tollgate on a file of its own, whichever store the gate's
        // tests run on: moving the file away is how a test makes it fail.
        let upstream = TestDb::on_sqlite(&[]);
        let upstream_key = upstream.create_key("gate", "*", &[]);
        before(&upstream);
        let db = TestDb::new();
        let config = format!(
            r#"
[[backends]]
name = "up"
kind = "mcp"
command = "{bin}"
args = ["--database", "{updb}", "stdio"]
env = {{ TOLLGATE_TOKEN = "{token}", RUST_LOG = "warn" }}
timeout_ms = 10000
"#,
            bin = bin(),
            updb = upstream.path.display(),
            token = upstream_key.token,
        );
        let server = HttpServer::start_with_config(&db, &config, &[]);
        Gate {
            upstream,
            upstream_key,
            db,
            server,
        }
    }

    fn admin(&self) -> &str {
        self.db.admin_key.as_deref().expect("admin key")
    }

    fn call(&self, tool: &str, args: Value) -> Value {
        self.server
            .modern_tool_call(self.admin(), tool, &args)
            .json()
    }

    /// The backend's line in `/healthz`.
    fn health(&self) -> Value {
        let body = self.server.get("/healthz").json();
        body["backends"][0].clone()
    }

    /// Polls `/healthz` until the backend's state is one of `states`.
    fn wait_for_state(&self, states: &[&str]) -> Value {
        let deadline = Instant::now() + STATE_WAIT;
        loop {
            let line = self.health();
            if states.iter().any(|s| line["state"] == *s) {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "the backend never reached {states:?}: {line}; {}",
                self.server.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The pid of the upstream child (a child process of the gate, found through /proc).
    fn upstream_pid(&self) -> u32 {
        let gate = self.server.child.id();
        children_of(gate)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no upstream child of {gate}"))
    }
}

/// The pids whose parent is `parent`, from /proc.
fn children_of(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold spaces, so read after the last `)`.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) && !stat.contains(") Z ") {
            found.push(pid);
        }
    }
    found
}

fn kill(pid: u32) {
    let status = std::process::Command::new("kill")
        .arg("-KILL")
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -KILL {pid}");
}

fn rename(from: &Path, to: &PathBuf) {
    std::fs::rename(from, to).expect("rename the upstream database");
}

#[test]
fn the_upstream_tools_are_offered_under_the_prefix_and_calls_go_through() {
    let gate = Gate::start();
    let tools = gate.server.modern_tools_list(gate.admin());
    let find = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {tools:?}"))
    };
    assert_eq!(
        find("up_search_clients")["annotations"]["readOnlyHint"],
        true
    );
    assert_eq!(
        find("up_create_client")["annotations"]["readOnlyHint"],
        false
    );
    assert_eq!(
        find("up_delete_client")["annotations"]["destructiveHint"],
        true
    );
    let health = gate.health();
    assert_eq!(health["name"], "up");
    assert_eq!(health["kind"], "mcp");
    assert_eq!(health["state"], "ready");
    assert_eq!(health["tools"], 16);

    let found = gate.call("up_search_clients", json!({}));
    assert_eq!(found["result"]["isError"], false, "{found}");
    assert!(found["result"]["structuredContent"].is_object(), "{found}");
}

#[test]
fn an_upstream_tool_failure_is_an_adapter_error_with_the_upstream_text() {
    let gate = Gate::start();
    let failed = gate.call("up_get_client", json!({"client_id": NO_CLIENT}));
    assert_tool_error(&failed, "adapter_error", 502, 4001);
    let envelope = &failed["result"]["_meta"]["dev.tollgate/error"];
    assert_eq!(envelope["retryable"], false);
    assert_eq!(envelope["details"]["backend"], "up");
    assert!(
        envelope["details"].get("original_error").is_none(),
        "{failed}"
    );
    let upstream_text = format!(
        "No client has the id \"{NO_CLIENT}\" given in `client_id`; find the right one with search_clients."
    );
    assert_eq!(envelope["details"]["message"], upstream_text.as_str());
    assert_eq!(
        envelope["hint"],
        format!(
            "The business backend up answered with an error: {upstream_text}; the call did not complete."
        )
    );
}

#[test]
fn an_upstream_json_rpc_error_keeps_its_code_and_message() {
    let gate = Gate::start();
    gate.upstream
        .limit_per_minute(&gate.upstream_key.id, "read", 1);
    let first = gate.call("up_search_clients", json!({}));
    assert_eq!(first["result"]["isError"], false, "{first}");
    let refused = gate.call("up_search_clients", json!({}));
    assert_tool_error(&refused, "adapter_error", 502, 4001);
    let envelope = &refused["result"]["_meta"]["dev.tollgate/error"];
    assert_eq!(envelope["retryable"], false);
    assert_eq!(
        envelope["details"]["original_error"],
        json!({"code": -32006, "message": "rate_limited"})
    );
    assert_eq!(envelope["details"]["message"], "rate_limited");
    assert_eq!(
        envelope["hint"],
        "The business backend up answered with error -32006: rate_limited; the call did not complete."
    );
}

#[test]
fn a_killed_upstream_is_unavailable_until_it_is_restarted() {
    let gate = Gate::start();
    let first_pid = gate.upstream_pid();
    // While its database is away, the upstream cannot start again: the outage lasts
    // until the test puts it back.
    let away = gate.upstream.dir.path().join("away.db");
    rename(&gate.upstream.path, &away);
    kill(first_pid);
    let down = gate.wait_for_state(&["connecting", "down"]);
    assert!(down["reason"].is_string(), "{down}");

    let refused = gate.call("up_search_clients", json!({}));
    assert_tool_error(&refused, "backend_unavailable", 503, 4002);
    let envelope = &refused["result"]["_meta"]["dev.tollgate/error"];
    assert_eq!(envelope["retryable"], true);
    assert_eq!(
        envelope["details"],
        json!({"backend": "up", "reason": "not connected"})
    );
    assert_eq!(
        envelope["hint"],
        "The business backend up cannot be reached right now (not connected); retry with backoff."
    );

    rename(&away, &gate.upstream.path);
    gate.wait_for_state(&["ready"]);
    let again = gate.call("up_search_clients", json!({}));
    assert_eq!(again["result"]["isError"], false, "{again}");
    assert_ne!(gate.upstream_pid(), first_pid);
}

#[test]
fn an_upstream_down_at_start_leaves_the_rest_served_and_its_tools_appear_once_it_answers() {
    // The upstream cannot start while its database is away.
    let gate = Gate::start_with(|upstream| {
        rename(&upstream.path, &upstream.dir.path().join("away.db"));
    });
    let away = gate.upstream.dir.path().join("away.db");
    let down = gate.wait_for_state(&["connecting", "down"]);
    assert!(down["reason"].is_string(), "{down}");
    let upstream_tools = |tools: &[Value]| {
        tools
            .iter()
            .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("up_")))
            .count()
    };
    let tools = gate.server.modern_tools_list(gate.admin());
    assert!(tools.iter().any(|t| t["name"] == "search_clients"));
    assert_eq!(upstream_tools(&tools), 0);
    let builtin = gate.call("search_clients", json!({}));
    assert_eq!(builtin["result"]["isError"], false, "{builtin}");

    rename(&away, &gate.upstream.path);
    gate.wait_for_state(&["ready"]);
    let deadline = Instant::now() + STATE_WAIT;
    while upstream_tools(&gate.server.modern_tools_list(gate.admin())) == 0 {
        assert!(Instant::now() < deadline, "{}", gate.server.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let forwarded = gate.call("up_search_clients", json!({}));
    assert_eq!(forwarded["result"]["isError"], false, "{forwarded}");
}

#[test]
fn stopping_the_gate_stops_the_upstream() {
    let mut gate = Gate::start();
    let pid = gate.upstream_pid();
    gate.server.terminate();
    let deadline = Instant::now() + STATE_WAIT;
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            Instant::now() < deadline,
            "upstream {pid} outlived the gate"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_upstream_that_cannot_be_reached_is_a_problem_saying_what_happened() {
    let db = TestDb::new();
    let port = crate::util::free_port();
    let config = format!(
        r#"
[[backends]]
name = "gone"
kind = "mcp"
command = "/nonexistent/mcp-server"

[[backends]]
name = "quits"
kind = "mcp"
command = "sh"
args = ["-c", "exit 3"]

[[backends]]
name = "web"
kind = "mcp"
url = "http://127.0.0.1:{port}/mcp"
"#
    );
    let path = db.dir.path().join("tollgate.toml");
    std::fs::write(&path, config).expect("write config");
    let out = db.run(&[
        "--config",
        path.to_str().expect("utf-8"),
        "backends",
        "check",
    ]);
    assert!(!out.status.success());
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "backend gone: the upstream did not start: /nonexistent/mcp-server: No such file or directory".to_owned(),
        "backend quits: the upstream did not start: sh: it exited or closed its output before answering initialize".to_owned(),
        format!("backend web: no MCP server answered at http://127.0.0.1:{port}/mcp: Connection refused"),
    ] {
        assert!(printed.contains(&expected), "{expected} in {printed}");
    }
}
