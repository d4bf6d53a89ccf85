//! Connecting to an upstream MCP server with `rmcp` and keeping the connection up.
//!
//! A stdio upstream is a child process started with a clean environment (`PATH`, `HOME`,
//! `LANG`, `TZ` and the configured `env`) in a process group of its own, its stderr read
//! line by line into the log at debug level. A Streamable HTTP upstream is a session with
//! the configured headers; a secret header's value is read once from its file and marked
//! sensitive, so it is never printed.
//!
//! The supervisor connects, lists the tools (following `nextCursor`, within bounds), and
//! then watches the session, whose list a reader of its own reads again when the upstream
//! says it changed ([`super::relist`]): when the session ends (the child exited, the
//! connection failed, a call found the transport closed, or an HTTP ping went unanswered)
//! the backend answers `backend_unavailable` while the supervisor reconnects with
//! exponential backoff (0.5 s doubling to 30 s, back to 0.5 s after a session that stayed
//! up a minute).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::{HeaderName, HeaderValue as HttpHeaderValue};
use rmcp::model::{ClientRequest, PingRequest, ProtocolVersion, Tool as UpstreamTool};
use rmcp::service::{ClientInitializeError, PeerRequestOptions, QuitReason, RunningService};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{Peer, RoleClient, ServiceExt};
use tokio::io::AsyncReadExt;
use tokio::sync::{Notify, watch};

use super::poster::{Endpoint, Poster};
use crate::config::{HeaderValue, McpTransport, read_secret};
use crate::tools::backends::Health;
use crate::tools::backends::lane::Lanes;

use super::Shared;
use super::direct::Direct;
use super::handler::{Handler, ProgressRoutes};
use super::offer::{Offer, read_offer};
use super::relist::{self, ListChanges, Lists};
use super::session_client::{SessionClient, SessionId};

/// The longest one connection attempt (start, handshake, first list) may take.
const ATTEMPT_LIMIT: Duration = Duration::from_secs(15);
/// The first wait before reconnecting.
const BACKOFF_MIN: Duration = Duration::from_millis(500);
/// The longest wait between attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A session that stayed up this long resets the backoff.
const HEALTHY: Duration = Duration::from_secs(60);
/// How often an HTTP session is pinged while idle, and how long the answer may take.
const PING_EVERY: Duration = Duration::from_secs(10);
const PING_LIMIT: Duration = Duration::from_secs(5);
/// How long closing a session may take before its child is killed.
const CLOSE_LIMIT: Duration = Duration::from_secs(4);
/// The variables of tollgate's own environment a stdio upstream inherits.
const INHERITED_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TZ"];
/// The longest stderr line logged as it is.
const STDERR_LINE_MAX: usize = 2000;

/// How the upstream is reached, with secrets already read.
pub(super) enum Target {
    /// A child process spoken to over stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        url: String,
        headers: HashMap<HeaderName, HttpHeaderValue>,
    },
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Stdio { command, args, .. } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &"<redacted>")
                .finish(),
            Target::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// Headers the MCP transport sets itself.
const TRANSPORT_HEADERS: [&str; 4] = [
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

impl Target {
    /// The target of a configured transport; reads every secret header's file once.
    pub(super) fn from_config(transport: &McpTransport) -> Result<Target, String> {
        match transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => Ok(Target::Stdio {
                command: command.clone(),
                args: args.clone(),
                env: env.clone(),
                cwd: cwd.clone(),
            }),
            McpTransport::Http { url, headers } => {
                let mut read = HashMap::new();
                for (name, value) in headers {
                    let (header, value) = header_of(name, value)?;
                    read.insert(header, value);
                }
                Ok(Target::Http {
                    url: url.clone(),
                    headers: read,
                })
            }
        }
    }

    fn is_http(&self) -> bool {
        matches!(self, Target::Http { .. })
    }
}

/// One configured header, its value read from its file when it is a secret.
fn header_of(name: &str, value: &HeaderValue) -> Result<(HeaderName, HttpHeaderValue), String> {
    let header = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("headers: {name:?} is not a header name"))?;
    if TRANSPORT_HEADERS.contains(&header.as_str()) {
        return Err(format!(
            "headers: {name} is set by the MCP transport itself and cannot be configured"
        ));
    }
    let value = match value {
        HeaderValue::Plain(text) => HttpHeaderValue::from_str(text)
            .map_err(|_| format!("headers: the value of {name} is not a valid header value"))?,
        HeaderValue::File { file } => {
            let secret = read_secret(file).map_err(|e| format!("headers: {name}: {e}"))?;
            let mut value = HttpHeaderValue::from_str(&secret).map_err(|_| {
                format!(
                    "headers: the content of {} is not a valid value for {name}",
                    file.display()
                )
            })?;
            value.set_sensitive(true);
            value
        }
    };
    Ok((header, value))
}

/// A live session as calls use it.
#[derive(Clone)]
pub(super) struct Link {
    /// The upstream, as rmcp's peer.
    pub(super) peer: Peer<RoleClient>,
    /// Where the upstream's progress notifications go.
    pub(super) progress: Arc<ProgressRoutes>,
    /// Raised by a call that found the transport failing: the supervisor reconnects.
    broken: Arc<Notify>,
    /// How calls are posted straight to a Streamable HTTP upstream (none for stdio).
    pub(super) direct: Option<Arc<Direct>>,
}

impl Link {
    /// Tells the supervisor the session is failing.
    pub(super) fn break_off(&self) {
        self.broken.notify_one();
    }
}

/// A connected session with its first lists.
struct Session {
    running: RunningService<RoleClient, Handler>,
    pid: Option<u32>,
    link: Link,
    tools: Vec<UpstreamTool>,
    offer: Offer,
    changes: Arc<ListChanges>,
    offer_changes: Arc<ListChanges>,
}

/// The HTTP client of a Streamable HTTP upstream: redirects are not followed and no proxy
/// is taken from the environment (the configured URL is where calls go, as for a REST
/// backend; it also spares every request reqwest's proxy matching), a connection is given
/// up after [`PING_LIMIT`], small requests are sent at once.
fn upstream_client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(PING_LIMIT)
        .tcp_nodelay(true)
        .build()
}

/// Starts or connects to the upstream, does the handshake and lists its tools.
async fn connect(shared: &Arc<Shared>, target: &Target) -> Result<Session, String> {
    let progress = Arc::new(ProgressRoutes::default());
    let changes = Arc::new(ListChanges::new(Lists::Tools));
    let offer_changes = Arc::new(ListChanges::new(Lists::Offer));
    let handler = Handler {
        shared: Arc::downgrade(shared),
        progress: Arc::clone(&progress),
        changes: Arc::clone(&changes),
        offer_changes: Arc::clone(&offer_changes),
    };
    let (running, pid, direct) = match target {
        Target::Stdio { .. } => {
            let (running, pid) = start_child(shared, target, handler).await?;
            (running, pid, None)
        }
        Target::Http { url, headers } => {
            let client =
                upstream_client().map_err(|e| format!("no MCP server answered at {url}: {e}"))?;
            let session = Arc::new(SessionId::default());
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(headers.clone());
            let transport = StreamableHttpClientTransport::with_client(
                SessionClient {
                    inner: client.clone(),
                    session: Arc::clone(&session),
                },
                config,
            );
            let running = handler
                .serve(transport)
                .await
                .map_err(|e| format!("no MCP server answered at {url}: {}", cause_of(&e)))?;
            let version = running
                .peer()
                .peer_info()
                .map(|info| info.protocol_version.to_string())
                .unwrap_or_else(|| ProtocolVersion::LATEST_WITH_INITIALIZE.to_string());
            let endpoint = Endpoint::parse(url)?;
            let lanes = Lanes::new({
                let endpoint = endpoint.clone();
                move || Poster::for_endpoint(&endpoint, PING_LIMIT, upstream_client)
            });
            // The session's client is already made: nothing here can fail.
            let Ok(poster) = Poster::for_endpoint(&endpoint, PING_LIMIT, || {
                Ok::<_, std::convert::Infallible>(client)
            });
            let direct = Direct::new(poster, lanes, endpoint, headers, session, &version)?;
            (running, None, Some(Arc::new(direct)))
        }
    };
    let listed = if shared.exposed.tools {
        relist::read_tools(running.peer(), shared.limits.max_tools).await
    } else {
        Ok(Vec::new())
    };
    let tools = match listed {
        Ok(tools) => tools,
        Err(e) => {
            let _ = tokio::time::timeout(CLOSE_LIMIT, running.cancel()).await;
            kill_group(pid);
            return Err(format!("the upstream did not list its tools: {e}"));
        }
    };
    let offer = read_offer(&shared.name, running.peer(), shared.exposed).await;
    let link = Link {
        peer: running.peer().clone(),
        progress,
        broken: Arc::new(Notify::new()),
        direct,
    };
    Ok(Session {
        running,
        pid,
        link,
        tools,
        offer,
        changes,
        offer_changes,
    })
}

/// Starts the stdio child and does the handshake.
async fn start_child(
    shared: &Arc<Shared>,
    target: &Target,
    handler: Handler,
) -> Result<(RunningService<RoleClient, Handler>, Option<u32>), String> {
    let Target::Stdio {
        command,
        args,
        env,
        cwd,
    } = target
    else {
        return Err("not a stdio upstream".into());
    };
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args)
        .env_clear()
        .kill_on_drop(true)
        .process_group(0);
    for name in INHERITED_ENV {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    cmd.envs(env);
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    let (child, stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("the upstream did not start: {command}: {e}"))?;
    let pid = child.id();
    if let Some(stderr) = stderr {
        tokio::spawn(drain_stderr(shared.name.to_string(), stderr));
    }
    match handler.serve(child).await {
        Ok(running) => Ok((running, pid)),
        Err(e) => {
            kill_group(pid);
            Err(format!(
                "the upstream did not start: {command}: {}",
                cause_of(&e)
            ))
        }
    }
}

/// What went wrong at the bottom of `error`'s chain (a refused connection, a closed pipe),
/// without the layers of the transport above it.
fn cause_of(error: &ClientInitializeError) -> String {
    if let ClientInitializeError::ConnectionClosed(_) = error {
        return "it exited or closed its output before answering initialize".into();
    }
    let mut cause: &dyn std::error::Error = match error {
        ClientInitializeError::TransportError { error, .. } => error.error.as_ref(),
        other => other,
    };
    loop {
        // The HTTP client's own error is held, not chained, by the transport's error.
        if let Some(StreamableHttpError::Client(client)) =
            cause.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            cause = client;
            continue;
        }
        match cause.source() {
            Some(source) => cause = source,
            // Writing `initialize` to a child that already exited fails before reading
            // its closed output would: the same event, said the same way.
            None if cause
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
            {
                return "it exited or closed its output before answering initialize".into();
            }
            None => return cause.to_string(),
        }
    }
}

/// Reads the child's stderr into the log at debug level, line by line, until it closes.
async fn drain_stderr(backend: String, mut stderr: tokio::process::ChildStderr) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let read = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        buffer.extend_from_slice(&chunk[..read]);
        while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            log_stderr(&backend, &line);
        }
        if buffer.len() > STDERR_LINE_MAX {
            log_stderr(&backend, &buffer);
            buffer.clear();
        }
    }
    if !buffer.is_empty() {
        log_stderr(&backend, &buffer);
    }
}

fn log_stderr(backend: &str, line: &[u8]) {
    let text = String::from_utf8_lossy(line);
    let text: String = text.trim_end().chars().take(STDERR_LINE_MAX).collect();
    if !text.is_empty() {
        tracing::debug!(backend, line = %text, "upstream stderr");
    }
}

/// Kills what is left of a stdio upstream's process group (its own children included).
pub(super) fn kill_group(pid: Option<u32>) {
    let Some(pid) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    else {
        return;
    };
    // ESRCH (nothing left) is the usual answer.
    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
}

/// The backoff between attempts.
struct Backoff {
    next: Duration,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff { next: BACKOFF_MIN }
    }

    /// The wait before the next attempt (and doubles the one after).
    fn next(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        wait
    }

    /// Whether the waits have reached their longest.
    fn at_cap(&self) -> bool {
        self.next >= BACKOFF_MAX
    }

    fn reset(&mut self) {
        self.next = BACKOFF_MIN;
    }
}

/// Why a session ended.
enum Ended {
    /// `shutdown` asked it to.
    Stopped,
    /// It failed (the reason, for the operator).
    Lost(String),
}

/// Keeps the upstream connected until `stop` is set. The first attempt's outcome goes
/// to `first` (while `open` still waits for it), and a first attempt that fails ends the
/// supervisor unless `keep_trying`; `done` is dropped when it returns.
pub(super) async fn supervise(
    shared: Arc<Shared>,
    target: Target,
    mut stop: watch::Receiver<bool>,
    (first, keep_trying): (std::sync::mpsc::Sender<Result<(), String>>, bool),
    done: std::sync::mpsc::Sender<()>,
) {
    let mut first = Some(first);
    let mut backoff = Backoff::new();
    loop {
        let attempt = tokio::select! {
            attempt = tokio::time::timeout(ATTEMPT_LIMIT, connect(&shared, &target)) => attempt
                .unwrap_or_else(|_| Err(format!(
                    "the upstream did not answer within {} s", ATTEMPT_LIMIT.as_secs()
                ))),
            _ = stop.changed() => break,
        };
        let reason = match attempt {
            Ok(mut session) => {
                // The tools are in place before `open` returns: the server builds its
                // first registry from them.
                shared.connected(
                    session.link.clone(),
                    session.pid,
                    &session.tools,
                    std::mem::take(&mut session.offer),
                );
                if let Some(first) = first.take() {
                    let _ = first.send(Ok(()));
                }
                let started = Instant::now();
                match watch_session(&shared, session, target.is_http(), &mut stop).await {
                    Ended::Stopped => break,
                    Ended::Lost(reason) => {
                        if started.elapsed() >= HEALTHY {
                            backoff.reset();
                        }
                        reason
                    }
                }
            }
            Err(reason) => {
                if let Some(first) = first.take()
                    && first.send(Err(reason.clone())).is_ok()
                    && !keep_trying
                {
                    // `open` reports it and stops the backend.
                    break;
                }
                reason
            }
        };
        let wait = backoff.next();
        tracing::warn!(backend = %shared.name, reason, wait_ms = wait.as_millis() as u64, "upstream unavailable; reconnecting");
        let health = if backoff.at_cap() {
            Health::Down(format!(
                "{reason}; next attempt in {} s",
                wait.as_secs().max(1)
            ))
        } else {
            Health::Connecting(format!("{reason}; reconnecting in {} ms", wait.as_millis()))
        };
        shared.disconnected(health);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => break,
        }
    }
    shared.disconnected(Health::Down("stopped".into()));
    drop(done);
}

/// Serves calls over `session` until it ends or `stop` is set, then closes it.
async fn watch_session(
    shared: &Arc<Shared>,
    session: Session,
    is_http: bool,
    stop: &mut watch::Receiver<bool>,
) -> Ended {
    let Session {
        running,
        pid,
        link,
        tools,
        changes,
        offer_changes,
        ..
    } = session;
    tracing::info!(backend = %shared.name, tools = tools.len(), "upstream connected");
    // The session's readers of its lists end with it.
    let _reader = AbortOnDrop(tokio::spawn(relist::follow(
        Arc::downgrade(shared),
        link.peer.clone(),
        changes,
    )));
    let _offer_reader = AbortOnDrop(tokio::spawn(relist::follow(
        Arc::downgrade(shared),
        link.peer.clone(),
        offer_changes,
    )));
    // The resources the gate's sessions follow are followed on the new session too.
    for uri in shared.subscribed() {
        let peer = link.peer.clone();
        tokio::spawn(async move {
            #[expect(
                deprecated,
                reason = "the handshake era's subscription is the one upstreams take"
            )]
            let subscribed = peer
                .subscribe(rmcp::model::SubscribeRequestParams::new(uri))
                .await;
            if let Err(e) = subscribed {
                tracing::warn!(error = %e, "a resource could not be subscribed to again");
            }
        });
    }
    let cancel = running.cancellation_token();
    let mut waiting = Box::pin(running.waiting());
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    let ended = loop {
        tokio::select! {
            quit = &mut waiting => {
                shared.disconnected(Health::Connecting("reconnecting".into()));
                kill_group(pid);
                return Ended::Lost(quit_reason(is_http, quit));
            }
            _ = link.broken.notified() => break Ended::Lost("the connection to the upstream failed".into()),
            _ = stop.changed() => break Ended::Stopped,
            _ = ping.tick(), if is_http => {
                if let Err(reason) = ping_once(&link.peer).await {
                    break Ended::Lost(reason);
                }
            }
        }
    };
    shared.disconnected(Health::Connecting("reconnecting".into()));
    cancel.cancel();
    let _ = tokio::time::timeout(CLOSE_LIMIT, waiting).await;
    kill_group(pid);
    ended
}

/// A task that is aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One ping with a short deadline.
async fn ping_once(peer: &Peer<RoleClient>) -> Result<(), String> {
    let request = ClientRequest::PingRequest(PingRequest::default());
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::with_timeout(PING_LIMIT))
        .await
        .map_err(|e| format!("the upstream did not answer a ping: {e}"))?;
    handle
        .await_response()
        .await
        .map(|_| ())
        .map_err(|e| format!("the upstream did not answer a ping: {e}"))
}

fn quit_reason(is_http: bool, quit: Result<QuitReason, tokio::task::JoinError>) -> String {
    match (quit, is_http) {
        (Ok(QuitReason::Closed), false) => "the upstream exited".into(),
        (Ok(QuitReason::Closed), true) => "the upstream closed the connection".into(),
        (Ok(other), _) => format!("the session with the upstream ended ({other:?})"),
        (Err(e), _) => format!("the session with the upstream failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_to_its_cap_and_resets() {
        let mut backoff = Backoff::new();
        let waits: Vec<u64> = (0..9).map(|_| backoff.next().as_millis() as u64).collect();
        assert_eq!(
            waits,
            [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]
        );
        assert!(backoff.at_cap());
        backoff.reset();
        assert_eq!(backoff.next(), BACKOFF_MIN);
    }

    #[test]
    fn a_secret_header_is_read_once_and_never_printed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("token");
        std::fs::write(&file, "Bearer s3cret-value\n").expect("write");
        let transport = McpTransport::Http {
            url: "http://127.0.0.1:9/mcp".into(),
            headers: BTreeMap::from([
                (
                    "Authorization".to_owned(),
                    HeaderValue::File { file: file.clone() },
                ),
                ("X-Tenant".to_owned(), HeaderValue::Plain("acme".into())),
            ]),
        };
        let target = Target::from_config(&transport).expect("target");
        let printed = format!("{target:?}");
        assert!(!printed.contains("s3cret"), "{printed}");
        let Target::Http { headers, .. } = &target else {
            panic!("http")
        };
        let auth = &headers[&HeaderName::from_static("authorization")];
        assert!(auth.is_sensitive());
        assert!(!format!("{auth:?}").contains("s3cret"));
        assert_eq!(auth.to_str().expect("ascii"), "Bearer s3cret-value");
    }

    #[test]
    fn a_missing_secret_file_or_a_transport_header_is_a_problem() {
        let missing = McpTransport::Http {
            url: "http://127.0.0.1:9/mcp".into(),
            headers: BTreeMap::from([(
                "Authorization".to_owned(),
                HeaderValue::File {
                    file: PathBuf::from("/nonexistent/token"),
                },
            )]),
        };
        let err = Target::from_config(&missing).expect_err("missing file");
        assert!(
            err.contains("cannot read the secret file /nonexistent/token"),
            "{err}"
        );
        let reserved = McpTransport::Http {
            url: "http://127.0.0.1:9/mcp".into(),
            headers: BTreeMap::from([(
                "Mcp-Session-Id".to_owned(),
                HeaderValue::Plain("x".into()),
            )]),
        };
        let err = Target::from_config(&reserved).expect_err("reserved");
        assert!(err.contains("set by the MCP transport itself"), "{err}");
    }
}
