//! The Streamable HTTP transport on tiny_http: `POST /mcp` for both protocol eras,
//! `DELETE /mcp` to end a handshake session, `GET /healthz` for probes, `GET /metrics`
//! when enabled, and the OAuth metadata and token endpoints.
//!
//! This module owns the listener and its lifecycle: [`serve`], the signals, the worker
//! slots, the refusals the listener writes itself and the body read under its deadline.
//! It also owns [`HttpHead`], the parts of a request every handler reads. Beside it: `app`
//! (the handlers' shared state), `routes` (which handler serves which path, the small
//! endpoints), `mcp` (`/mcp` and its session headers), `sse` (responses that turn into
//! event streams), `origin` (DNS-rebinding protection), `client` (who is asking), `status`
//! (statuses and headers of replies), [`oauth`] and [`sessions`].
//!
//! Each connection is served on a thread of its own, at most `http.max_connections` of
//! them; a request is worked on once its body is in, at most `http.workers` at once (a
//! request waiting on a backend gives its slot up meanwhile). The
//! listener (the vendored tiny_http) enforces the connection cap, the head, body and idle
//! deadlines and the header caps, and asks `App::refusal` for the catalog body of each
//! refusal it writes. A panic while serving a request becomes a `-32603` for that request
//! and never kills a thread. SIGTERM or SIGINT stops taking new requests, lets the
//! in-flight ones finish, and returns; a listener that stops accepting ends `serve` with an
//! error, so that the service manager restarts the process.

mod app;
mod client;
mod mcp;
pub mod oauth;
mod origin;
mod ratelimit_headers;
mod routes;
pub mod sessions;
mod sse;
mod status;

use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tiny_http::{Method, Request};

use self::app::App;
use self::status::{Reply, to_response};
use crate::catalog::{ErrorKind, McpError};
use crate::config::Config;
use crate::protocol::dispatch::Server;

/// The parts of a request the handlers look at, read once.
pub struct HttpHead {
    /// `GET`, `POST`, …
    pub method: Method,
    /// Path without the query.
    pub path: String,
    /// The query, without `?` (empty when there is none).
    pub query: String,
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
    serve_then(server, config, |_| {})
}

/// [`serve`], calling `ready` with the bound address once the listener accepts
/// connections (before that, nothing may tell a person the server is up).
pub fn serve_then(
    server: Arc<Server>,
    config: &Config,
    ready: impl FnOnce(std::net::SocketAddr),
) -> std::io::Result<()> {
    let shutdown = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&shutdown))?;
    }
    let app = Arc::new(App::new(server, config).map_err(std::io::Error::other)?);
    let slots = Arc::new(Slots::new(config.http.workers));
    let handler: tiny_http::Handler = {
        let (app, slots) = (Arc::clone(&app), Arc::clone(&slots));
        Arc::new(move |mut request| {
            let body = read_body(&mut request, app.max_body);
            let _slot = slots.enter();
            app.handle(request, body, Some(Arc::clone(&slots)));
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
    ready(listener.server_addr().to_ip().unwrap_or(config.http.listen));
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

/// The worker slots: how many requests are worked on at once. A request that waits on
/// another system (a backend) gives its slot up meanwhile (the `step_away` and `step_back` of `sse::Stream`).
pub(super) struct Slots {
    max: usize,
    state: Mutex<SlotCount>,
    changed: Condvar,
}

#[derive(Default)]
struct SlotCount {
    /// Requests being worked on.
    busy: usize,
    /// Requests that gave their slot up while they wait on another system: still in
    /// flight, so a stopping server waits for them too.
    away: usize,
    /// Threads waiting on `changed` (for a slot, or for the server to go idle): a change
    /// wakes somebody only when somebody waits, since a wake-up is a system call whether
    /// or not a thread sleeps (two for every forwarded call, measured).
    waiting: usize,
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
        let mut state = self.wait_free();
        state.busy += 1;
        Slot(self)
    }

    /// The count once a slot is free.
    fn wait_free(&self) -> std::sync::MutexGuard<'_, SlotCount> {
        let mut state = self.lock();
        while state.busy >= self.max {
            state.waiting += 1;
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            state.waiting -= 1;
        }
        state
    }

    /// Gives up the slot of a request that is going to wait on another system; it stays
    /// in flight ([`Slots::step_back`] ends the wait).
    pub(super) fn step_away(&self) {
        let mut state = self.lock();
        state.busy = state.busy.saturating_sub(1);
        state.away += 1;
        self.changed_after(state);
    }

    /// Takes a slot again for a request whose wait ([`Slots::step_away`]) is over.
    pub(super) fn step_back(&self) {
        let mut state = self.wait_free();
        state.busy += 1;
        state.away = state.away.saturating_sub(1);
    }

    /// Wakes who waits for a slot (everyone once the server is stopping).
    fn changed_after(&self, state: std::sync::MutexGuard<'_, SlotCount>) {
        let (stopping, waiting) = (state.closed, state.waiting > 0);
        drop(state);
        if stopping {
            self.changed.notify_all();
        } else if waiting {
            self.changed.notify_one();
        }
    }

    /// Marks the server as stopping (for [`Slots::wait_idle`]).
    fn close(&self) {
        self.lock().closed = true;
    }

    /// Waits until no request is being worked on, at most `limit`.
    fn wait_idle(&self, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        let mut state = self.lock();
        while state.busy > 0 || state.away > 0 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    busy = state.busy,
                    waiting_on_backends = state.away,
                    "stopping with requests still being served"
                );
                return;
            }
            state.waiting += 1;
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
            state.waiting -= 1;
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.busy = state.busy.saturating_sub(1);
        self.0.changed_after(state);
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
        let reply = self.error_reply(None, error);
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

/// A `POST /mcp` head with these (lowercase) headers, for unit tests.
#[cfg(test)]
fn test_head(headers: &[(&str, &str)]) -> HttpHead {
    HttpHead {
        method: Method::Post,
        path: "/mcp".into(),
        query: String::new(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        peer: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// How long a test lets a thread take to do what it must; past it the test fails
    /// rather than hangs. (`wait_idle` below is given far longer, so that its returning
    /// within this says it was woken, not that it gave up.)
    const PROMPTLY: Duration = Duration::from_secs(30);

    /// Spins (yielding) until `n` threads wait on `slots`; fails past [`PROMPTLY`].
    fn until_waiting(slots: &Slots, n: usize) {
        let deadline = std::time::Instant::now() + PROMPTLY;
        while slots.lock().waiting != n {
            assert!(
                std::time::Instant::now() < deadline,
                "{n} thread(s) never waited"
            );
            std::thread::yield_now();
        }
    }

    /// Runs `f` on a thread of its own; the receiver hears when it has returned.
    fn on_thread(f: impl FnOnce() + Send + 'static) -> std::sync::mpsc::Receiver<()> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        rx
    }

    #[test]
    fn a_request_waiting_for_a_slot_gets_the_one_given_back() {
        let slots = Arc::new(Slots::new(1));
        let held = slots.enter();
        let entered = on_thread({
            let slots = Arc::clone(&slots);
            move || drop(slots.enter())
        });
        until_waiting(&slots, 1);
        assert!(entered.try_recv().is_err(), "entered past a full house");
        drop(held);
        entered
            .recv_timeout(PROMPTLY)
            .expect("the waiter entered once the slot was given back");
        let state = slots.lock();
        assert_eq!((state.busy, state.waiting), (0, 0));
    }

    #[test]
    fn a_slot_stepped_away_from_serves_another_request_and_is_waited_for_back() {
        let slots = Arc::new(Slots::new(1));
        let first = slots.enter();
        let entered = on_thread({
            let slots = Arc::clone(&slots);
            move || drop(slots.enter())
        });
        until_waiting(&slots, 1);
        // The first request waits on a backend: the second gets its slot meanwhile.
        slots.step_away();
        entered
            .recv_timeout(PROMPTLY)
            .expect("the waiter entered while the first was away");
        slots.step_back();
        slots.close();
        let idle = on_thread({
            let slots = Arc::clone(&slots);
            move || slots.wait_idle(PROMPTLY * 20)
        });
        until_waiting(&slots, 1);
        assert!(idle.try_recv().is_err(), "idle while a request was served");
        drop(first);
        idle.recv_timeout(PROMPTLY)
            .expect("woken as idle once the first request ended");
        let state = slots.lock();
        assert_eq!((state.busy, state.away, state.waiting), (0, 0, 0));
    }
}
