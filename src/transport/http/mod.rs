//! The Streamable HTTP transport on tiny_http: `POST /mcp` for both protocol eras,
//! `DELETE /mcp` to end a handshake session, `GET /healthz` for probes, and the OAuth
//! metadata and token endpoints (see [`crate::transport::http::oauth`]).
//!
//! Each connection is served on a thread of its own, at most `http.max_connections` of
//! them; a request is worked on once its body is in, at most `http.workers` at once. The
//! listener (the vendored tiny_http) enforces the connection cap, the head, body and idle
//! deadlines and the header caps, and asks [`App::refusal`] for the catalog body of each
//! refusal it writes. A panic while serving a request becomes a `-32603` for that request
//! and never kills a thread. SIGTERM or SIGINT stops taking new requests, lets the
//! in-flight ones finish, and returns; a listener that stops accepting ends `serve` with an
//! error, so that the service manager restarts the process.
//!
//! The body is always JSON-RPC. The HTTP status follows `ERRORS.md`: in `compatible` mode
//! guard and tool-call errors travel with 200 (the official TypeScript clients drop the
//! body of any other status) and only `invalid_token` gets 401; `semantic` mode adds 403
//! and 429 for the guards that have them. Transport failures keep transport statuses.

pub mod oauth;
pub mod sessions;

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};
use tiny_http::{Header, Method, Request, Response, StatusCode};

use crate::catalog::{Channel, ErrorKind, McpError};
use crate::config::{ClientAddressHeader, Config, ErrorStatusMode, ProxyRange};
use crate::guards::auth::CredentialRef;
use crate::protocol::client::Notifier;
use crate::protocol::dispatch::{Env, Server, Transport};
use crate::protocol::jsonrpc::{self, Incoming, Parsed};
use crate::protocol::revisions::{self, Session};
use crate::transport::http::sessions::{SessionOwner, Sessions};

/// How often the main loop looks at the shutdown flag and the listener.
const POLL: Duration = Duration::from_millis(100);
/// Request heads are capped at this many bytes a line, lines, and bytes in all (431).
const MAX_HEADER_LINE: usize = 16 * 1024;
const MAX_HEADER_LINES: usize = 128;
const MAX_HEADER_BYTES: usize = 64 * 1024;
/// At most one log line per refusal kind in this window; the others are counted in it.
const REFUSAL_LOG_WINDOW: Duration = Duration::from_secs(10);

/// Serves HTTP until SIGTERM or SIGINT.
///
/// Each connection has a thread of its own (tiny_http's), and its requests are served on
/// that thread: no hand-off between threads on the way. A request's body is read first,
/// under the body deadline; then the request waits for one of the `http.workers` slots.
/// Slow senders therefore never hold a slot, and past `http.max_connections` the listener
/// closes the connection that has waited longest on its client to make room.
///
/// Returns an error when the listener stops accepting connections while no shutdown was
/// asked for: the process can no longer serve and must be restarted.
pub fn serve(server: Arc<Server>, config: &Config) -> std::io::Result<()> {
    let shutdown = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&shutdown))?;
    }
    let app = Arc::new(App::new(server, config));
    let slots = Arc::new(Slots::new(config.http.workers));
    let handler: tiny_http::Handler = {
        let (app, slots) = (Arc::clone(&app), Arc::clone(&slots));
        Arc::new(move |mut request| {
            let body = read_body(&mut request, app.max_body);
            let _slot = slots.enter();
            app.handle(request, body);
        })
    };
    let listener = tiny_http::Server::http_with_options(
        config.http.listen,
        handler,
        listener_options(&app, config),
    )
    .map_err(std::io::Error::other)?;
    app.set_listening(listener.server_addr().to_ip().unwrap_or(config.http.listen));
    let bound = listener
        .server_addr()
        .to_ip()
        .map_or_else(|| config.http.listen.to_string(), |a| a.to_string());
    if !config.http.listen.ip().is_loopback() {
        tracing::warn!(listen = %bound, "listening on a non-loopback address");
    }
    tracing::info!(
        listen = %bound,
        workers = config.http.workers,
        max_connections = config.http.max_connections,
        "serving MCP over HTTP at /mcp"
    );
    if let Some(id) = &config.dev.unauthenticated_credential {
        tracing::warn!(
            credential = %id,
            "DEVELOPMENT MODE: requests without a token run as this credential; never use this in production"
        );
    }
    crate::transport::systemd::ready();
    watch_until_shutdown(&listener, &shutdown)?;
    crate::transport::systemd::stopping();
    // No new connections; the requests being served finish (bounded by the socket
    // timeouts), then the process ends and the idle keep-alive connections with it.
    slots.close();
    drop(listener);
    slots.wait_idle(DRAIN_LIMIT);
    tracing::info!("HTTP listener stopped; in-flight requests finished");
    Ok(())
}

/// Waits for SIGTERM or SIGINT. A listener whose accept thread has ended (it panicked)
/// serves nothing any more: then this returns an error, `tollgate serve` exits non-zero
/// and the service manager (`Restart=on-failure`) starts a new process.
fn watch_until_shutdown(
    listener: &tiny_http::Server,
    shutdown: &AtomicBool,
) -> std::io::Result<()> {
    while !shutdown.load(Ordering::Relaxed) {
        if !listener.is_accepting() {
            tracing::error!("the HTTP listener stopped accepting connections; exiting");
            return Err(std::io::Error::other(
                "the HTTP listener stopped accepting connections",
            ));
        }
        std::thread::sleep(POLL);
    }
    Ok(())
}

/// How long a stopping server waits for the requests it is serving.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// The listener's limits from `[http]`, and the catalog bodies of its refusals.
fn listener_options(app: &Arc<App>, config: &Config) -> tiny_http::ServerOptions {
    let app = Arc::clone(app);
    tiny_http::ServerOptions {
        limits: tiny_http::Limits {
            max_connections: config.http.max_connections,
            head_timeout: config.http.head_timeout,
            body_timeout: config.http.body_timeout,
            idle_timeout: config.http.idle_timeout,
            max_header_line: MAX_HEADER_LINE,
            max_header_lines: MAX_HEADER_LINES,
            max_header_bytes: MAX_HEADER_BYTES,
        },
        refusal_body: Some(Arc::new(move |refusal| to_response(app.refusal(refusal)))),
    }
}

/// The worker slots: how many requests are worked on at once.
struct Slots {
    max: usize,
    state: Mutex<SlotCount>,
    changed: Condvar,
}

#[derive(Default)]
struct SlotCount {
    busy: usize,
    closed: bool,
}

/// One taken worker slot, given back on drop.
struct Slot<'a>(&'a Slots);

impl Slots {
    fn new(max: usize) -> Slots {
        Slots {
            max: max.max(1),
            state: Mutex::new(SlotCount::default()),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotCount> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits for a free slot.
    fn enter(&self) -> Slot<'_> {
        let mut state = self.lock();
        while state.busy >= self.max {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        state.busy += 1;
        Slot(self)
    }

    /// Marks the server as stopping (for [`Slots::wait_idle`]).
    fn close(&self) {
        self.lock().closed = true;
    }

    /// Waits until no request is being worked on, at most `limit`.
    fn wait_idle(&self, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        let mut state = self.lock();
        while state.busy > 0 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    busy = state.busy,
                    "stopping with requests still being served"
                );
                return;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.busy -= 1;
        let stopping = state.closed;
        drop(state);
        if stopping {
            self.0.changed.notify_all();
        } else {
            self.0.changed.notify_one();
        }
    }
}

impl App {
    /// The reply of a refusal the listener writes itself, from the catalog; logged (at
    /// most once per kind in [`REFUSAL_LOG_WINDOW`]) and counted in `/metrics`.
    fn refusal(&self, refusal: tiny_http::Refusal) -> Reply {
        use tiny_http::Refusal;
        let error = match refusal {
            Refusal::TooManyConnections | Refusal::NoThread => McpError::new(ErrorKind::ServerBusy),
            Refusal::RequestTimeout => McpError::new(ErrorKind::RequestTimeout),
            Refusal::HeadersTooLarge => McpError::new(ErrorKind::HeadersTooLarge),
            Refusal::MalformedHead => McpError::invalid_request("malformed_request_head"),
            Refusal::BadFraming => McpError::invalid_request("ambiguous_request_framing"),
        };
        if let Some(suppressed) = REFUSAL_LOG.allow(refusal, std::time::Instant::now()) {
            log_refusal(refusal, suppressed);
        }
        let reply = self.error_reply(None, &error, None);
        crate::guards::metrics::global().record_http_status(reply.status);
        reply
    }
}

fn log_refusal(refusal: tiny_http::Refusal, suppressed: u64) {
    use tiny_http::Refusal;
    match refusal {
        Refusal::TooManyConnections => tracing::warn!(
            suppressed,
            "connection refused: the connection cap is reached and every connection is working"
        ),
        Refusal::NoThread => tracing::warn!(
            suppressed,
            "connection refused: no thread could be created and none could be freed"
        ),
        refusal => tracing::info!(?refusal, suppressed, "request refused by the listener"),
    }
}

/// The refusal log's throttle: one line per kind and window, with the count of the lines
/// left out since the last one.
struct RefusalLog {
    kinds: Mutex<Vec<(tiny_http::Refusal, std::time::Instant, u64)>>,
}

static REFUSAL_LOG: RefusalLog = RefusalLog {
    kinds: Mutex::new(Vec::new()),
};

impl RefusalLog {
    /// `Some(left out since the last line)` when a line may be written at `now`.
    fn allow(&self, refusal: tiny_http::Refusal, now: std::time::Instant) -> Option<u64> {
        let mut kinds = self
            .kinds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(entry) = kinds.iter_mut().find(|(kind, _, _)| *kind == refusal) else {
            kinds.push((refusal, now, 0));
            return Some(0);
        };
        if now.saturating_duration_since(entry.1) < REFUSAL_LOG_WINDOW {
            entry.2 += 1;
            return None;
        }
        entry.1 = now;
        Some(std::mem::take(&mut entry.2))
    }
}

/// The request-independent state of the HTTP transport.
struct App {
    server: Arc<Server>,
    sessions: Sessions,
    origins: OriginPolicy,
    max_body: usize,
    mode: ErrorStatusMode,
    public_base_url: Option<String>,
    /// `http://<bound address>`, the base URL when no public one is configured.
    listen_url: OnceLock<String>,
    /// Peers whose client-address header names the real client (`http.trusted_proxies`).
    trusted_proxies: Vec<ProxyRange>,
    client_address_header: ClientAddressHeader,
    dev_credential: Option<String>,
    oauth: crate::transport::http::oauth::Endpoints,
    /// `GET /metrics` is served (`http.metrics`).
    metrics: Option<&'static crate::guards::metrics::Metrics>,
}

/// What a handler answers: status, headers, body.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn json(status: u16, body: &Value) -> Reply {
        Reply {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: serde_json::to_vec(body).unwrap_or_default(),
        }
    }

    fn empty(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    fn header(mut self, name: &str, value: impl Into<String>) -> Reply {
        self.headers.push((name.to_owned(), value.into()));
        self
    }
}

/// The parts of a request the handlers look at, read once.
pub struct HttpHead {
    /// `GET`, `POST`, …
    pub method: Method,
    /// Path without the query.
    pub path: String,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
    /// The peer address.
    pub peer: Option<SocketAddr>,
}

impl HttpHead {
    /// The first header with this lowercase name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl App {
    fn new(server: Arc<Server>, config: &Config) -> App {
        let clock = server.clock().clone();
        App {
            server,
            sessions: Sessions::new(config.http.session_ttl, clock.clone()),
            origins: OriginPolicy::new(&config.http.allowed_hosts, &config.http.allowed_origins),
            max_body: config.http.max_body_bytes,
            mode: config.http.error_status,
            public_base_url: config.http.public_base_url.clone(),
            listen_url: OnceLock::new(),
            trusted_proxies: config.http.trusted_proxies.clone(),
            client_address_header: config.http.client_address_header,
            dev_credential: config.dev.unauthenticated_credential.clone(),
            oauth: crate::transport::http::oauth::Endpoints::new(clock),
            metrics: config.http.metrics.then(crate::guards::metrics::global),
        }
    }

    fn handle(&self, request: Request, body: Result<Vec<u8>, McpError>) {
        let head = HttpHead {
            method: request.method().clone(),
            path: request.url().split('?').next().unwrap_or("/").to_owned(),
            headers: request
                .headers()
                .iter()
                .map(|h| {
                    (
                        h.field.as_str().as_str().to_ascii_lowercase(),
                        h.value.as_str().to_owned(),
                    )
                })
                .collect(),
            peer: request.remote_addr().copied(),
        };
        let stream = Stream::new(request, accepts_sse(&head), body);
        let reply =
            catch_unwind(AssertUnwindSafe(|| self.route(&head, &stream))).unwrap_or_else(|_| {
                tracing::error!(path = %head.path, "a request handler panicked");
                Outgoing::Reply(self.error_reply(None, &McpError::internal(), None))
            });
        stream.finish(reply);
    }

    fn route(&self, head: &HttpHead, stream: &Stream) -> Outgoing {
        let reply = match (&head.method, head.path.as_str()) {
            (Method::Get, "/healthz") => self.healthz(),
            (Method::Get, "/metrics") if self.metrics.is_some() => self.metrics_page(head),
            (Method::Get, p) if p.starts_with("/.well-known/") => self.oauth_metadata(head),
            (Method::Post, "/oauth/token") => self.oauth_token(head, stream),
            (_, "/mcp") => return self.mcp(head, stream),
            _ => self.error_reply(None, &McpError::new(ErrorKind::PathNotFound), None),
        };
        Outgoing::Reply(reply)
    }

    /// RFC 9728 and RFC 8414 documents. `Host`/`Origin` are checked as on `/mcp`, so a
    /// rebinding page cannot read them, and the URLs in them never come from the request.
    fn oauth_metadata(&self, head: &HttpHead) -> Reply {
        if let Err(err) = self.origins.check(head) {
            return self.error_reply(None, &err, None);
        }
        let base = self.base_url();
        match head.path.as_str() {
            p if p.starts_with("/.well-known/oauth-protected-resource") => Reply::json(
                200,
                &crate::transport::http::oauth::protected_resource_metadata(&base),
            ),
            "/.well-known/oauth-authorization-server" => Reply::json(
                200,
                &crate::transport::http::oauth::authorization_server_metadata(&base),
            ),
            _ => self.error_reply(None, &McpError::new(ErrorKind::PathNotFound), None),
        }
    }

    /// `POST /oauth/token`, behind the same `Host`/`Origin` policy as `/mcp`.
    fn oauth_token(&self, head: &HttpHead, stream: &Stream) -> Reply {
        if let Err(err) = self.origins.check(head) {
            return self.error_reply(None, &err, None);
        }
        match stream.read_body(self.max_body) {
            Ok(body) => {
                let source = self.client_source(head);
                let (status, headers, body) = self.oauth.token(&self.server, head, &source, &body);
                let mut reply = Reply::json(status, &body);
                reply.headers.extend(headers);
                reply.header("Cache-Control", "no-store")
            }
            Err(err) => self.error_reply(None, &err, None),
        }
    }

    /// `GET /healthz`: 200 while the store can read and write; otherwise 503 with the
    /// catalog code `backend_unavailable` and the reason (`disk_full`, …).
    fn healthz(&self) -> Reply {
        match self.server.store().health() {
            Ok(version) => Reply::json(200, &json!({"status": "ok", "schema_version": version})),
            Err(reason) => {
                tracing::warn!(reason = reason.code(), "health check failed: {reason}");
                let code = ErrorKind::BackendUnavailable.spec().code;
                Reply::json(
                    503,
                    &json!({"status": "unavailable", "code": code, "reason": reason.code()}),
                )
            }
        }
    }

    /// The Prometheus page; `Host`/`Origin` are checked as on `/mcp` (DNS rebinding).
    fn metrics_page(&self, head: &HttpHead) -> Reply {
        match (self.origins.check(head), self.metrics) {
            (Ok(()), Some(metrics)) => Reply {
                status: 200,
                headers: vec![(
                    "Content-Type".into(),
                    crate::guards::metrics::CONTENT_TYPE.into(),
                )],
                body: metrics.render().into_bytes(),
            },
            (Err(err), _) => self.error_reply(None, &err, None),
            (Ok(()), None) => self.error_reply(None, &McpError::new(ErrorKind::PathNotFound), None),
        }
    }

    /// Records the address the listener is bound to (the base URL when no public one is
    /// configured). A wildcard address names nothing a client can reach, so it is said.
    fn set_listening(&self, addr: SocketAddr) {
        if self.public_base_url.is_none() && addr.ip().is_unspecified() {
            tracing::warn!(
                listen = %addr,
                "http.public_base_url is not set and the listener is bound to a wildcard \
                 address; OAuth metadata will name it; set http.public_base_url"
            );
        }
        let _ = self.listen_url.set(format!("http://{addr}"));
    }

    /// The base of every URL this server advertises (OAuth metadata, the
    /// `WWW-Authenticate` challenge): `http.public_base_url`, otherwise the bound
    /// listening address — never the request's `Host`.
    fn base_url(&self) -> String {
        match &self.public_base_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => self
                .listen_url
                .get()
                .cloned()
                .unwrap_or_else(|| "http://127.0.0.1:8787".to_owned()),
        }
    }

    fn mcp(&self, head: &HttpHead, stream: &Stream) -> Outgoing {
        if let Err(err) = self.origins.check(head) {
            return Outgoing::Reply(self.error_reply(None, &err, None));
        }
        match head.method {
            Method::Post => self.mcp_post(head, stream),
            Method::Delete => Outgoing::Reply(self.mcp_delete(head)),
            _ => Outgoing::Reply(
                self.error_reply(None, &McpError::new(ErrorKind::HttpMethodNotAllowed), None)
                    .header("Allow", "POST, DELETE"),
            ),
        }
    }

    /// Ends a session; only its owner's credential may (another credential gets the 404 of
    /// an unknown id, a request without a valid one its `invalid_token`).
    fn mcp_delete(&self, head: &HttpHead) -> Reply {
        let Some(id) = head.header("mcp-session-id") else {
            return self
                .error_reply(None, &McpError::new(ErrorKind::HttpMethodNotAllowed), None)
                .header("Allow", "POST");
        };
        let err = match self.caller_with_refusal(head) {
            Ok((owner, _)) if self.sessions.remove(id, &owner) => return Reply::empty(204),
            Ok((_, refusal)) => Self::not_the_callers(refusal),
            Err(err) => err,
        };
        self.session_error_reply(None, &err)
    }

    fn mcp_post(&self, head: &HttpHead, stream: &Stream) -> Outgoing {
        if let Err(err) = check_content_type(head).and_then(|()| check_accept(head)) {
            return Outgoing::Reply(self.error_reply(None, &err, None));
        }
        let body = match stream.read_body(self.max_body) {
            Ok(body) => body,
            Err(err) => return Outgoing::Reply(self.error_reply(None, &err, None)),
        };
        let reply = match jsonrpc::parse(&body) {
            Parsed::NotJson => self.error_reply(None, &McpError::parse_error(), None),
            Parsed::Batch(items) => self.batch(head, items),
            Parsed::Single(Incoming::Invalid(id, err)) => self.error_reply(id, &err, None),
            Parsed::Single(Incoming::Response(id, message)) => match self.legacy_session(head) {
                Ok(session) => {
                    session.deliver(&id, message);
                    Reply::empty(202)
                }
                Err(err) => self.session_error_reply(None, &err),
            },
            Parsed::Single(Incoming::Request(req)) => return self.single(head, req, stream),
        };
        Outgoing::Reply(reply)
    }

    fn batch(&self, head: &HttpHead, items: Vec<Incoming>) -> Reply {
        let session = match self.legacy_session(head) {
            Ok(session) => session,
            Err(err) => return self.session_error_reply(None, &err),
        };
        let notifier = Discard;
        let env = self.env(head, &session, &notifier);
        match self.server.handle_batch(items, &env) {
            // A refused batch is one error object (e.g. `batch_not_allowed`): a transport
            // failure, so it keeps its status like any other unacceptable body.
            Some(body) => {
                let status = body.get("error").map_or(200, |e| self.status_for(e, false));
                Reply::json(status, &body)
            }
            None => Reply::empty(202),
        }
    }

    fn single(&self, head: &HttpHead, req: jsonrpc::Request, stream: &Stream) -> Outgoing {
        let id = req.id.clone();
        let modern = is_modern(&req);
        let session = if modern {
            if let Err(err) = check_modern_headers(head, &req) {
                return Outgoing::Reply(self.error_reply(id, &err, Some(true)));
            }
            Arc::new(Session::new())
        } else if req.method == "initialize" {
            Arc::new(Session::new())
        } else {
            match self.legacy_session(head) {
                Ok(session) => session,
                Err(err) => return Outgoing::Reply(self.session_error_reply(id, &err)),
            }
        };
        let env = self.env(head, &session, stream);
        let is_initialize = !modern && req.method == "initialize";
        // A session belongs to the credential of its `initialize`; one opened without a
        // credential is anonymous and lives in a pool of its own (see `sessions.rs`).
        let owner = if is_initialize {
            match self.caller(head) {
                Ok(owner) => Some(owner),
                Err(err) => return Outgoing::Reply(self.session_error_reply(id, &err)),
            }
        } else {
            None
        };
        let Some(response) = self.server.handle_incoming(Incoming::Request(req), &env) else {
            return Outgoing::Reply(Reply::empty(202));
        };
        if stream.is_streaming() {
            return Outgoing::Final(response);
        }
        let mut reply = self.response_reply(&response, modern);
        if let Some(owner) = owner
            && response.get("result").is_some()
        {
            match self.sessions.create(session, owner) {
                Ok(sid) => reply = reply.header("Mcp-Session-Id", sid),
                Err(e) => {
                    tracing::error!(error = %e, "cannot create a session id");
                    return Outgoing::Reply(self.error_reply(id, &McpError::internal(), None));
                }
            }
        }
        Outgoing::Reply(reply)
    }

    fn env<'a>(
        &'a self,
        head: &'a HttpHead,
        session: &'a Session,
        notifier: &'a dyn Notifier,
    ) -> Env<'a> {
        let token = bearer_token(head);
        Env {
            session,
            notifier,
            transport: Transport::Http,
            token,
            dev_credential: self.dev_credential_for(token),
            source: self.client_source(head),
            idempotency_header: head.header("idempotency-key"),
        }
    }

    /// Development mode's credential, for a request that presents no token.
    fn dev_credential_for(&self, token: Option<&str>) -> Option<&str> {
        match token {
            None => self.dev_credential.as_deref(),
            Some(_) => None,
        }
    }

    /// Who is asking, for the failure throttles: `http:<address>` of the peer, or of the
    /// client a trusted proxy names (never a header of an untrusted peer).
    fn client_source(&self, head: &HttpHead) -> String {
        let Some(peer) = head.peer.map(|p| p.ip().to_canonical()) else {
            return "http:unknown".to_owned();
        };
        let client = if self.trusted_proxies.iter().any(|r| r.contains(peer)) {
            forwarded_client(head, self.client_address_header, &self.trusted_proxies)
                .unwrap_or(peer)
        } else {
            peer
        };
        format!("http:{client}")
    }

    /// The owner of the sessions the request may use: the credential of the presented
    /// token (from the verified-token cache, or verified now), or development mode's
    /// credential for a request without one. A missing or refused credential makes the
    /// request anonymous; a throttled one, or a store that cannot answer, is an error
    /// (never mistaken for anonymity).
    fn caller(&self, head: &HttpHead) -> Result<SessionOwner, McpError> {
        self.caller_with_refusal(head).map(|(owner, _)| owner)
    }

    /// [`App::caller`], with the refusal that made the request anonymous, if one did.
    fn caller_with_refusal(
        &self,
        head: &HttpHead,
    ) -> Result<(SessionOwner, Option<McpError>), McpError> {
        let token = bearer_token(head);
        let auth = self.server.guards().authenticator();
        let credential = match self.dev_credential_for(token) {
            Some(public_id) => auth
                .principal_for_public_id(public_id)
                .map(|p| CredentialRef::from(&p)),
            None => auth.identify(token, &self.client_source(head)),
        };
        match credential {
            Ok(credential) => Ok((SessionOwner::of(&credential), None)),
            Err(err) if is_credential_refusal(&err) => Ok((SessionOwner::anonymous(), Some(err))),
            Err(err) => Err(err),
        }
    }

    /// The answer to a request naming a session that is not the caller's: an anonymous
    /// caller (no token, or one refused) gets the refusal of its credential, `-32001` with
    /// its 401 challenge, whether the session exists or not; a valid credential gets
    /// `session_not_found`, exactly what an unknown id gets. Neither tells a session apart
    /// from an unknown id.
    fn not_the_callers(refusal: Option<McpError>) -> McpError {
        refusal.unwrap_or_else(|| McpError::new(ErrorKind::SessionNotFound))
    }

    /// A refusal from resolving the session or its credential: `invalid_token` gets its
    /// 401 challenge, the others their transport status.
    fn session_error_reply(&self, id: Option<Value>, err: &McpError) -> Reply {
        let body = self.server.error_body(id, err);
        self.response_reply(&body, false)
    }

    /// The session named by `Mcp-Session-Id`; a request without one gets a fresh,
    /// uninitialized session (the dispatcher then asks for `initialize` or `_meta`).
    /// A named session must be the caller's: another credential's session answers
    /// `session_not_found` exactly like an unknown id; for a request without a valid
    /// credential, every session but an anonymous one answers that credential's
    /// `invalid_token` (see [`App::not_the_callers`]).
    fn legacy_session(&self, head: &HttpHead) -> Result<Arc<Session>, McpError> {
        let Some(id) = head.header("mcp-session-id") else {
            return Ok(Arc::new(Session::new()));
        };
        let (owner, refusal) = self.caller_with_refusal(head)?;
        let session = self
            .sessions
            .get(id, &owner)
            .ok_or_else(|| Self::not_the_callers(refusal))?;
        if let Some(version) = head.header("mcp-protocol-version") {
            let known = revisions::LEGACY_VERSIONS.contains(&version);
            if !known || session.negotiated().is_some_and(|v| v != version) {
                return Err(McpError::new(ErrorKind::UnsupportedProtocolVersion)
                    .with(
                        "supported",
                        session
                            .negotiated()
                            .map_or_else(|| revisions::LEGACY_VERSIONS.to_vec(), |v| vec![v]),
                    )
                    .with("requested", version));
            }
        }
        Ok(session)
    }

    fn response_reply(&self, response: &Value, modern: bool) -> Reply {
        let error = response.get("error");
        let status = error.map_or(200, |e| self.status_for(e, modern));
        let mut reply = Reply::json(status, response);
        let limits = match error {
            Some(e) => e.get("data").cloned(),
            None => response
                .pointer("/result/_meta")
                .and_then(|m| m.get(crate::guards::META_RATELIMIT))
                .cloned(),
        };
        if let Some(limits) = limits {
            reply.headers.extend(crate::guards::ratelimit::http_headers(
                &limits,
                self.server.clock(),
            ));
        }
        if status == 401 {
            let base = self.base_url();
            reply = reply.header(
                "WWW-Authenticate",
                format!(
                    "Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\""
                ),
            );
        }
        if status == 403
            && let Some(scope) = error
                .and_then(|e| e.pointer("/data/required_scope"))
                .and_then(Value::as_str)
        {
            reply = reply.header(
                "WWW-Authenticate",
                format!("Bearer error=\"insufficient_scope\", scope=\"{scope}\""),
            );
        }
        reply
    }

    /// The HTTP status of a JSON-RPC error response: the catalog's rule for its entry
    /// ([`ErrorKind::mcp_http_status`]). A code no JSON-RPC entry has gets 200.
    fn status_for(&self, error: &Value, modern: bool) -> u16 {
        let data = error.get("data");
        let code = data
            .and_then(|d| d.get("code"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let meta_param = data
            .and_then(|d| d.get("param"))
            .and_then(Value::as_str)
            .is_some_and(|p| p.starts_with("_meta"));
        ErrorKind::ALL
            .iter()
            .find(|k| k.spec().code == code && k.spec().channel == Channel::JsonRpc)
            .map_or(200, |k| k.mcp_http_status(self.mode, modern, meta_param))
    }

    fn error_reply(&self, id: Option<Value>, err: &McpError, modern: Option<bool>) -> Reply {
        let body = self.server.error_body(id, err);
        let status = self.status_for(&body["error"], modern.unwrap_or(false));
        Reply::json(status, &body)
    }
}

/// What a handler produced: a complete reply, or the final message of a response that
/// is already streaming as server-sent events.
enum Outgoing {
    Reply(Reply),
    Final(Value),
}

/// A notifier for requests that cannot stream (batches): notifications are dropped.
struct Discard;

impl Notifier for Discard {
    fn notify(&self, _message: Value) {}

    fn delivers(&self) -> bool {
        false
    }
}

/// The response side of one HTTP request. It starts as a plain reply; the first
/// notification or server-to-client request of a tool call turns it into an SSE stream
/// (status 200, sent at once), on which the final response then arrives as the last event.
/// Guard rejections therefore keep their JSON body and HTTP status.
struct Stream {
    state: Mutex<StreamState>,
    sse_allowed: bool,
    /// The body, read before the request took its worker slot.
    body: Mutex<Option<Result<Vec<u8>, McpError>>>,
}

enum StreamState {
    Pending(Option<Request>),
    Streaming {
        events: std::sync::mpsc::Sender<Vec<u8>>,
        writer: std::thread::JoinHandle<()>,
    },
}

impl Stream {
    fn new(request: Request, sse_allowed: bool, body: Result<Vec<u8>, McpError>) -> Stream {
        Stream {
            state: Mutex::new(StreamState::Pending(Some(request))),
            sse_allowed,
            body: Mutex::new(Some(body)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StreamState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn is_streaming(&self) -> bool {
        matches!(*self.lock(), StreamState::Streaming { .. })
    }

    /// The body (read once, at most `cap` bytes).
    fn read_body(&self, cap: usize) -> Result<Vec<u8>, McpError> {
        let body = self
            .body
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .unwrap_or_else(|| Err(McpError::internal()))?;
        if body.len() > cap {
            return Err(McpError::new(ErrorKind::PayloadTooLarge).detail("max_bytes", cap));
        }
        Ok(body)
    }

    /// Sends the reply, or ends the stream with the final message.
    fn finish(&self, outgoing: Outgoing) {
        let state = std::mem::replace(&mut *self.lock(), StreamState::Pending(None));
        match (state, outgoing) {
            (StreamState::Pending(Some(request)), Outgoing::Reply(reply)) => {
                respond(request, reply)
            }
            (StreamState::Pending(Some(request)), Outgoing::Final(message)) => {
                respond(request, Reply::json(200, &message));
            }
            (StreamState::Streaming { events, writer }, outgoing) => {
                let last = match outgoing {
                    Outgoing::Final(message) => message,
                    Outgoing::Reply(reply) => {
                        serde_json::from_slice(&reply.body).unwrap_or(Value::Null)
                    }
                };
                let _ = events.send(sse_event(&last, false));
                drop(events);
                let _ = writer.join();
            }
            (StreamState::Pending(None), _) => {}
        }
    }
}

impl Notifier for Stream {
    fn delivers(&self) -> bool {
        self.sse_allowed
    }

    fn notify(&self, message: Value) {
        if !self.sse_allowed {
            return;
        }
        let mut state = self.lock();
        if let StreamState::Pending(request) = &mut *state {
            let Some(request) = request.take() else {
                return;
            };
            let (events, rx) = std::sync::mpsc::channel();
            let response = Response::new(
                StatusCode(200),
                sse_headers(),
                EventReader {
                    rx,
                    pending: Vec::new(),
                    offset: 0,
                },
                None,
                None,
            );
            let (hand_over, taken) = std::sync::mpsc::sync_channel::<Request>(1);
            let spawned = std::thread::Builder::new()
                .name("http-sse".into())
                .spawn(move || {
                    if let Ok(request) = taken.recv()
                        && let Err(e) = request.respond(response)
                    {
                        tracing::debug!(error = %e, "client closed the event stream");
                    }
                });
            // Without a thread for the stream the call goes on, its notifications are
            // dropped, and its final response is sent as a plain reply.
            let writer = match spawned {
                Ok(writer) => writer,
                Err(e) => {
                    tracing::warn!(error = %e, "no thread for an event stream; notifications dropped");
                    *state = StreamState::Pending(Some(request));
                    return;
                }
            };
            if let Err(std::sync::mpsc::SendError(request)) = hand_over.send(request) {
                *state = StreamState::Pending(Some(request));
                return;
            }
            crate::guards::metrics::global().record_http_status(200);
            *state = StreamState::Streaming { events, writer };
        }
        if let StreamState::Streaming { events, .. } = &*state {
            let _ = events.send(sse_event(&message, true));
        }
    }
}

/// The size of the chunks tiny_http's chunked encoder sends.
const CHUNK: usize = 8192;

/// One SSE event. tiny_http's chunked encoder only sends a chunk once its 8 KiB buffer
/// overflows, so a mid-stream event is padded with an SSE comment to one byte past a
/// chunk boundary: the event leaves at once and only the comment's final newline waits.
fn sse_event(message: &Value, flush: bool) -> Vec<u8> {
    let mut event = b"event: message\ndata: ".to_vec();
    event.extend_from_slice(&serde_json::to_vec(message).unwrap_or_default());
    event.extend_from_slice(b"\n\n");
    if flush {
        let padded = (event.len() + 3).div_ceil(CHUNK) * CHUNK + 1;
        event.push(b':');
        event.resize(padded - 1, b' ');
        event.push(b'\n');
    }
    event
}

fn sse_headers() -> Vec<Header> {
    [
        ("Content-Type", "text/event-stream"),
        ("Cache-Control", "no-cache"),
        ("X-Accel-Buffering", "no"),
    ]
    .iter()
    .filter_map(|(n, v)| Header::from_bytes(n.as_bytes(), v.as_bytes()).ok())
    .collect()
}

/// Feeds queued SSE events to tiny_http until the sender is dropped.
struct EventReader {
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    pending: Vec<u8>,
    offset: usize,
}

impl Read for EventReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.offset == self.pending.len() {
            match self.rx.recv() {
                Ok(next) => {
                    self.pending = next;
                    self.offset = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.pending.len() - self.offset);
        buf[..n].copy_from_slice(&self.pending[self.offset..self.offset + n]);
        self.offset += n;
        Ok(n)
    }
}

fn respond(request: Request, reply: Reply) {
    crate::guards::metrics::global().record_http_status(reply.status);
    if let Err(e) = request.respond(to_response(reply)) {
        tracing::debug!(error = %e, "client went away before the response was written");
    }
}

fn to_response(reply: Reply) -> Response<std::io::Cursor<Vec<u8>>> {
    let mut response = Response::from_data(reply.body).with_status_code(StatusCode(reply.status));
    for (name, value) in reply.headers {
        if let Ok(header) = Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response.add_header(header);
        }
    }
    response
}

/// Reads the body, refusing more than `cap` bytes without buffering them. The listener
/// ends the read at the body deadline (`http.body_timeout_ms`): `request_timeout`.
fn read_body(request: &mut Request, cap: usize) -> Result<Vec<u8>, McpError> {
    let too_large = || McpError::new(ErrorKind::PayloadTooLarge).detail("max_bytes", cap);
    if request.body_length().is_some_and(|len| len > cap) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    request
        .as_reader()
        .take(limit)
        .read_to_end(&mut body)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                McpError::new(ErrorKind::RequestTimeout)
            }
            _ => McpError::invalid_request("body_unreadable"),
        })?;
    if body.len() > cap {
        return Err(too_large());
    }
    Ok(body)
}

/// Whether `err` refuses the credential itself (rather than throttling or failing).
fn is_credential_refusal(err: &McpError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::InvalidToken | ErrorKind::InvalidTokenType | ErrorKind::ClientRevoked
    )
}

/// The token of an `Authorization: Bearer <token>` header; the scheme is matched without
/// regard to case (RFC 9110 §11.1), so `bearer` and `BEARER` work too.
fn bearer_token(head: &HttpHead) -> Option<&str> {
    let value = head.header("authorization")?.trim_start();
    let (scheme, token) = value.split_once([' ', '\t'])?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// The client a trusted proxy names: walking the header's hops from the right (the one
/// the nearest proxy appended) past the trusted proxies, the first other address. A hop
/// that is not an address ends the walk without an answer (the peer is used).
fn forwarded_client(
    head: &HttpHead,
    header: ClientAddressHeader,
    trusted: &[ProxyRange],
) -> Option<IpAddr> {
    let hops: Vec<Option<IpAddr>> = match header {
        ClientAddressHeader::XForwardedFor => head
            .headers
            .iter()
            .filter(|(n, _)| n == "x-forwarded-for")
            .flat_map(|(_, v)| v.split(','))
            .map(|hop| parse_hop(hop.trim()))
            .collect(),
        ClientAddressHeader::Forwarded => head
            .headers
            .iter()
            .filter(|(n, _)| n == "forwarded")
            .flat_map(|(_, v)| v.split(','))
            .map(|element| {
                element
                    .split(';')
                    .filter_map(|pair| pair.trim().split_once('='))
                    .find(|(name, _)| name.trim().eq_ignore_ascii_case("for"))
                    .and_then(|(_, value)| parse_hop(value.trim().trim_matches('"')))
            })
            .collect(),
    };
    let mut last_trusted = None;
    for hop in hops.into_iter().rev() {
        let ip = hop?.to_canonical();
        if !trusted.iter().any(|r| r.contains(ip)) {
            return Some(ip);
        }
        last_trusted = Some(ip);
    }
    last_trusted
}

/// One hop of a forwarding header: `1.2.3.4`, `1.2.3.4:5678`, `[::1]`, `[::1]:5678`, `::1`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = hop.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    hop.parse::<SocketAddr>().ok().map(|a| a.ip())
}

fn is_modern(req: &jsonrpc::Request) -> bool {
    req.params
        .get("_meta")
        .and_then(Value::as_object)
        .is_some_and(|m| m.contains_key(revisions::META_PROTOCOL_VERSION))
}

/// 2026-07-28: `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` must repeat the body.
fn check_modern_headers(head: &HttpHead, req: &jsonrpc::Request) -> Result<(), McpError> {
    let meta_version = req
        .params
        .get("_meta")
        .and_then(|m| m.get(revisions::META_PROTOCOL_VERSION))
        .and_then(Value::as_str);
    if head.header("mcp-protocol-version").map(str::trim) != meta_version {
        return Err(McpError::header_mismatch("MCP-Protocol-Version"));
    }
    if head.header("mcp-method").map(str::trim) != Some(req.method.as_str()) {
        return Err(McpError::header_mismatch("Mcp-Method"));
    }
    let name_field = match req.method.as_str() {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    };
    if let Some(field) = name_field {
        let expected = req.params.get(field).and_then(Value::as_str);
        if head.header("mcp-name").map(decode_header_value).as_deref() != expected {
            return Err(McpError::header_mismatch("Mcp-Name"));
        }
    }
    Ok(())
}

/// Decodes the `=?base64?…?=` form a client uses for values that are not plain ASCII.
fn decode_header_value(raw: &str) -> String {
    use base64::Engine as _;
    let raw = raw.trim();
    raw.strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_else(|| raw.to_owned())
}

fn check_content_type(head: &HttpHead) -> Result<(), McpError> {
    let ok = head.header("content-type").is_some_and(|ct| {
        ct.split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
    });
    if ok {
        Ok(())
    } else {
        Err(McpError::new(ErrorKind::UnsupportedMediaType))
    }
}

fn check_accept(head: &HttpHead) -> Result<(), McpError> {
    let Some(accept) = head.header("accept") else {
        return Ok(());
    };
    let ok = accept.split(',').any(|part| {
        let media = part
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        matches!(
            media.as_str(),
            "application/json" | "text/event-stream" | "application/*" | "*/*"
        )
    });
    if ok {
        Ok(())
    } else {
        Err(McpError::new(ErrorKind::NotAcceptable))
    }
}

fn accepts_sse(head: &HttpHead) -> bool {
    head.header("accept")
        .is_some_and(|a| a.to_ascii_lowercase().contains("text/event-stream"))
}

/// DNS-rebinding protection: `Host` and `Origin` must name this server.
struct OriginPolicy {
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl OriginPolicy {
    fn new(extra_hosts: &[String], extra_origins: &[String]) -> OriginPolicy {
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
        hosts.extend(extra_hosts.iter().map(|h| h.to_ascii_lowercase()));
        OriginPolicy {
            hosts,
            origins: extra_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
        }
    }

    fn host_allowed(&self, authority: &str) -> bool {
        let host = strip_port(authority).to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    fn check(&self, head: &HttpHead) -> Result<(), McpError> {
        let denied = || McpError::new(ErrorKind::OriginNotAllowed);
        if let Some(host) = head.header("host")
            && !self.host_allowed(host)
        {
            return Err(denied().detail("header", "Host"));
        }
        let Some(origin) = head.header("origin") else {
            return Ok(());
        };
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        if self.origins.contains(&origin) {
            return Ok(());
        }
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        match authority {
            Some(authority) if self.host_allowed(authority) => Ok(()),
            _ => Err(denied().detail("header", "Origin")),
        }
    }
}

/// `host:port`, `[v6]:port` or a bare host → the host.
fn strip_port(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !host.contains(':') => {
            host
        }
        _ => authority,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(headers: &[(&str, &str)]) -> HttpHead {
        HttpHead {
            method: Method::Post,
            path: "/mcp".into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            peer: None,
        }
    }

    #[test]
    fn loopback_hosts_and_origins_pass_and_others_do_not() {
        let policy = OriginPolicy::new(&[], &["https://app.example.com".into()]);
        assert!(policy.check(&head(&[("host", "127.0.0.1:8787")])).is_ok());
        assert!(policy.check(&head(&[("host", "[::1]:8787")])).is_ok());
        assert!(
            policy
                .check(&head(&[
                    ("host", "localhost"),
                    ("origin", "http://localhost:3000")
                ]))
                .is_ok()
        );
        assert!(
            policy
                .check(&head(&[("origin", "https://app.example.com")]))
                .is_ok()
        );
        assert!(
            policy
                .check(&head(&[("host", "evil.example.com")]))
                .is_err()
        );
        assert!(
            policy
                .check(&head(&[
                    ("host", "localhost"),
                    ("origin", "http://evil.example.com")
                ]))
                .is_err()
        );
        assert!(policy.check(&head(&[("origin", "null")])).is_err());
    }

    #[test]
    fn refusal_log_lines_are_one_per_kind_and_window() {
        use tiny_http::Refusal;
        let log = RefusalLog {
            kinds: Mutex::new(Vec::new()),
        };
        let start = std::time::Instant::now();
        assert_eq!(log.allow(Refusal::TooManyConnections, start), Some(0));
        for _ in 0..1000 {
            assert_eq!(log.allow(Refusal::TooManyConnections, start), None);
        }
        assert_eq!(
            log.allow(Refusal::HeadersTooLarge, start),
            Some(0),
            "per kind"
        );
        let later = start + REFUSAL_LOG_WINDOW;
        assert_eq!(log.allow(Refusal::TooManyConnections, later), Some(1000));
        assert_eq!(log.allow(Refusal::TooManyConnections, later), None);
    }

    #[test]
    fn header_values_decode_the_base64_form() {
        assert_eq!(decode_header_value("=?base64?aMOpbGxv?="), "héllo");
        assert_eq!(decode_header_value(" plain "), "plain");
    }

    #[test]
    fn accept_and_content_type_rules() {
        assert!(check_accept(&head(&[("accept", "application/json, text/event-stream")])).is_ok());
        assert!(check_accept(&head(&[("accept", "text/html")])).is_err());
        assert!(
            check_content_type(&head(&[(
                "content-type",
                "application/json; charset=utf-8"
            )]))
            .is_ok()
        );
        assert!(check_content_type(&head(&[("content-type", "text/plain")])).is_err());
    }
}
