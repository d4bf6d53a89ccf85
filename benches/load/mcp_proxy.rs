//! mcp-proxy 0.6.0 (github.com/joshrotenberg/mcp-proxy, a Tower-based MCP reverse proxy in
//! Rust), the peer gateway the `backend` scenario measures tollgate against: found on the
//! machine (`TG_BENCH_MCP_PROXY`, else `PATH`, else `~/.cargo/bin`), never installed by the
//! bench. It is configured with bearer-token authentication and the upstream as its one
//! HTTP backend, `up`; it serves MCP at `/` with sessions (a client sends `initialize`, then
//! `notifications/initialized`, and carries the `Mcp-Session-Id` it was given) and names
//! the backend's tools `up/<tool>`.

use super::forwarding::last_line;
use super::*;

/// How to install the version the bench is written against.
pub(super) const INSTALL: &str = "cargo install mcp-proxy --version 0.6.0 --locked";
/// The variable that names the mcp-proxy binary to measure.
pub(super) const BIN_VAR: &str = "TG_BENCH_MCP_PROXY";
/// The protocol revision the load speaks to it (the last one with `initialize`).
const PROTOCOL: &str = "2025-11-25";
/// How long mcp-proxy may take to listen and answer a first call through its backend.
const READY_WAIT: Duration = Duration::from_secs(30);

/// The mcp-proxy binary: `TG_BENCH_MCP_PROXY`, else `mcp-proxy` on `PATH`, else in
/// `~/.cargo/bin`; `Err` with why the scenario goes on without it.
pub(super) fn find() -> Result<PathBuf, String> {
    if let Some(named) = std::env::var_os(BIN_VAR) {
        let path = PathBuf::from(named);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{BIN_VAR}={} is not a file", path.display()))
        };
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("mcp-proxy"));
    let in_cargo =
        std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo/bin/mcp-proxy"));
    on_path
        .chain(in_cargo)
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| format!("not installed; {INSTALL}"))
}

/// Writes mcp-proxy's configuration (listening on `addr`, the bearer `token`, the upstream
/// at `upstream_url` as the HTTP backend `backend`); returns its path.
fn write_config(
    dir: &Path,
    run: usize,
    addr: SocketAddr,
    token: &str,
    (backend, upstream_url): (&str, &str),
) -> PathBuf {
    let quoted = |text: &str| toml::Value::String(text.to_owned()).to_string();
    let config = format!(
        "[proxy]\nname = \"bench-proxy\"\n\n[proxy.listen]\nhost = \"127.0.0.1\"\nport = {port}\n\n\
         [auth]\ntype = \"bearer\"\ntokens = [{token}]\n\n[observability]\nlog_level = \"warn\"\n\n\
         [[backends]]\nname = {backend}\ntransport = \"http\"\nurl = {url}\n",
        port = addr.port(),
        token = quoted(token),
        backend = quoted(backend),
        url = quoted(upstream_url),
    );
    let path = dir.join(format!("mcp-proxy-{run}.toml"));
    std::fs::write(&path, config).expect("write mcp-proxy's configuration");
    path
}

/// Starts `bin` pinned to CPU 0 (unless `--no-pin`) in front of the upstream at
/// `upstream_url` as `backend`, and waits until a call of `probe` through it succeeds;
/// `Err` (why, with the last line it logged) otherwise.
pub(super) fn start(
    bin: &Path,
    dir: &Path,
    run: usize,
    (backend, upstream_url): (&str, &str),
    probe: &SessionCalls,
    s: &Settings,
) -> Result<HttpServer, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let config = write_config(dir, run, addr, &probe.token, (backend, upstream_url));
    let log = dir.join(format!("mcp-proxy-{run}.log"));
    let stderr = std::fs::File::create(&log).expect("create mcp-proxy's log");
    let mut cmd = if s.pin {
        let mut cmd = Command::new("/usr/bin/taskset");
        cmd.args(["-c", "0"]).arg(bin);
        cmd
    } else {
        Command::new(bin)
    };
    cmd.arg("--config")
        .arg(&config)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::from(
            stderr.try_clone().expect("share mcp-proxy's log"),
        ))
        .stderr(Stdio::from(stderr));
    let mut server = HttpServer {
        process: Running(cmd.spawn().map_err(|e| format!("{}: {e}", bin.display()))?),
        addr,
    };
    let said = || last_line(&log).unwrap_or_else(|| "it logged nothing".into());
    let deadline = Instant::now() + READY_WAIT;
    loop {
        if let Some(status) = server.exited() {
            return Err(format!("it exited at start ({status}): {}", said()));
        }
        match probe.once(addr) {
            Ok(()) => return Ok(server),
            Err(why) if Instant::now() > deadline => {
                return Err(format!(
                    "no call through it succeeded within {} s ({why}); it logged: {}",
                    READY_WAIT.as_secs(),
                    said()
                ));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// A `tools/call` on an mcp-proxy session: what each connection sends to open its session,
/// and the call it then repeats with the session's id.
pub(super) struct SessionCalls {
    token: String,
    /// Request line and headers of every request but the session's id.
    head: String,
    initialize: Vec<u8>,
    call: String,
}

impl SessionCalls {
    /// `tools/call` of `tool` with `arguments`, authenticated with the bearer `token`.
    pub(super) fn new(token: &str, tool: &str, arguments: &Value) -> SessionCalls {
        let head = format!(
            "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nAuthorization: Bearer {token}\r\n"
        );
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name": "tollgate-bench", "version": "0"}}});
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": tool, "arguments": arguments}});
        SessionCalls {
            token: token.to_owned(),
            initialize: with_body(&head, &initialize.to_string()),
            head,
            call: call.to_string(),
        }
    }

    /// Opens a session on `stream`; returns the call to repeat on it, or `None` (and says
    /// why) when the session could not be opened.
    pub(super) fn open(
        &self,
        stream: &mut TcpStream,
        reader: &mut BufReader<TcpStream>,
        line: &mut String,
    ) -> Option<Requests> {
        match self.handshake(stream, reader, line) {
            Ok(head) => Some(Requests::Fixed(with_body(&head, &self.call))),
            Err(why) => {
                println!("  warning: no mcp-proxy session on this connection: {why}");
                None
            }
        }
    }

    /// `initialize` and `notifications/initialized` on `stream`: the head of the session's
    /// requests.
    fn handshake(
        &self,
        stream: &mut TcpStream,
        reader: &mut BufReader<TcpStream>,
        line: &mut String,
    ) -> Result<String, String> {
        let broken = || "the connection ended".to_owned();
        stream
            .write_all(&self.initialize)
            .map_err(|e| e.to_string())?;
        let head = read_head(reader, line).ok_or_else(broken)?;
        let body = read_body(reader, line, &head).ok_or_else(broken)?;
        let session = match (head.status_ok, head.session_id) {
            (true, Some(session)) => session,
            (ok, _) => {
                return Err(format!(
                    "initialize answered {} without a session: {}",
                    if ok { "200" } else { "an error status" },
                    String::from_utf8_lossy(&body)
                ));
            }
        };
        let head = format!(
            "{}Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: {PROTOCOL}\r\n",
            self.head
        );
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        stream
            .write_all(&with_body(&head, &initialized.to_string()))
            .map_err(|e| e.to_string())?;
        let answer = read_head(reader, line).ok_or_else(broken)?;
        read_body(reader, line, &answer).ok_or_else(broken)?;
        Ok(head)
    }

    /// One session and one call on a new connection to `addr`: `Ok` when the call succeeded.
    fn once(&self, addr: SocketAddr) -> Result<(), String> {
        let mut stream = TcpStream::connect(addr).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
        let mut line = String::new();
        let head = self.handshake(&mut stream, &mut reader, &mut line)?;
        stream
            .write_all(&with_body(&head, &self.call))
            .map_err(|e| e.to_string())?;
        match read_response(&mut reader, &mut line) {
            Some((true, body)) if answered_ok(&body) => Ok(()),
            Some((_, body)) => Err(format!(
                "the call answered {}",
                String::from_utf8_lossy(&body)
            )),
            None => Err("the connection ended".to_owned()),
        }
    }
}
