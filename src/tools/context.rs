//! What a tool sees and uses while it runs: the [`ToolContext`] (the store, the caller's
//! book, the clock, progress, log messages, requests to the client, the commit of its
//! writes together with the idempotency record), the multi-round inputs of a call
//! ([`InputContext`], sealed with [`crate::tools::request_state`]), and the MCP log levels.
//! The client is reached through [`ClientLink`], which the protocol layer implements.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value, json};

use crate::catalog::{ErrorKind, McpError};
use crate::clock::Clock;
use crate::config::Locale;
use crate::store::Store;
use crate::tools::{Book, ToolOutput};

/// How long a tool waits for the client to answer a sampling or elicitation request.
pub const CLIENT_ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// How a running tool reaches the client of its request. The protocol layer implements it
/// over the request's stream and connection, so that tools never build a protocol message
/// nor hold the connection state.
pub trait ClientLink: Send + Sync {
    /// Sends a progress notification for the request's `token`.
    fn progress(&self, token: &Value, progress: f64, total: Option<f64>, message: Option<&str>);

    /// Sends one log message at `level` (whether the caller wants it is decided by the
    /// [`ToolContext`]).
    fn log(&self, level: LogLevel, data: Value);

    /// Tells every session subscribed to the resource `uri` that it changed.
    fn resource_updated(&self, uri: &str);

    /// Whether the client can be sent a request that needs `capability` (`sampling`,
    /// `elicitation`): only in the handshake era, and only when it declared it.
    fn can_ask(&self, capability: &str) -> bool;

    /// Sends the request `method` with `params` to the client and waits for its answer,
    /// polling `give_up` meanwhile (its error ends the wait). The answer's `result`, or
    /// `adapter_error` naming the client's error code.
    fn ask(
        &self,
        method: &str,
        params: Value,
        give_up: &dyn Fn() -> Option<McpError>,
    ) -> Result<Value, McpError>;

    /// The request starts waiting on another system and gives up the transport's place for
    /// a request being worked on (see [`crate::protocol::client::Notifier::step_away`]).
    fn step_away(&self) {}

    /// The wait is over: the request takes a place again.
    fn step_back(&self) {}
}

/// What a tool can see and use while it runs.
pub struct ToolContext<'a> {
    /// The database.
    pub store: &'a Store,
    /// The book the caller's credential works on; every read and write of business data
    /// is confined to it.
    pub book: Book,
    /// The language of hints and texts.
    pub locale: Locale,
    /// The server's clock: "now" and "today" of the call.
    pub clock: &'a Clock,
    /// The request's `progressToken`, when the caller asked for progress.
    pub progress_token: Option<Value>,
    /// The minimum log level the caller asked for, when logging is enabled for the call.
    pub log_level: Option<LogLevel>,
    /// The client of the current request.
    pub client: &'a dyn ClientLink,
    /// Set when the caller cancels the request.
    pub cancelled: &'a AtomicBool,
    /// Work that must commit in the same transaction as the tool's own writes (the
    /// idempotency record of the call), so a crash never applies a call twice.
    pub commit_hook: Option<&'a dyn CommitHook>,
    /// What the client sent back for an earlier `input_required` result (2026-07-28).
    pub input: InputContext<'a>,
    /// The request's `params._meta`: its trace context goes on to a backend.
    pub meta: Option<&'a Map<String, Value>>,
}

/// The multi-round inputs of a call: the client's answers to the server's earlier
/// `inputRequests`, the echoed `requestState`, and what the client can answer.
#[derive(Clone, Copy)]
pub struct InputContext<'a> {
    /// `params.inputResponses`, keyed as the server asked.
    pub responses: Option<&'a Map<String, Value>>,
    /// `params.requestState`, still sealed.
    pub request_state: Option<&'a str>,
    /// The client's capabilities (per request on 2026-07-28, from `initialize` before).
    pub client_capabilities: &'a Value,
    /// The key that seals and opens request states.
    pub state_key: &'a crate::tools::request_state::StateKey,
}

impl InputContext<'_> {
    /// The client's answer to the request named `key`, when it sent one.
    pub fn response(&self, key: &str) -> Option<&Value> {
        self.responses.and_then(|r| r.get(key))
    }

    /// Whether the client declared `capability` (`sampling`, `elicitation`, `roots`).
    pub fn client_supports(&self, capability: &str) -> bool {
        self.client_capabilities
            .get(capability)
            .is_some_and(|c| !c.is_null())
    }

    /// Opens the echoed `requestState`; a missing one is `Ok(None)`, an altered one is
    /// `-32602` on `requestState` (never trusted, never asked again).
    pub fn state(&self) -> Result<Option<Value>, McpError> {
        match self.request_state {
            None => Ok(None),
            Some(sealed) => self.state_key.open(sealed).map(Some).ok_or_else(|| {
                McpError::invalid_params("requestState").detail("reason", "state_not_verified")
            }),
        }
    }

    /// An `input_required` outcome asking the client for `requests`, carrying `state`.
    pub fn ask(&self, requests: Map<String, Value>, state: Option<&Value>) -> InputRequired {
        InputRequired {
            requests,
            state: state.map(|s| self.state_key.seal(s)),
        }
    }
}

/// A result that asks the client for more input before the call can complete.
#[derive(Debug, Clone)]
pub struct InputRequired {
    /// `inputRequests`: key → `{method, params}`.
    pub requests: Map<String, Value>,
    /// The sealed `requestState`, when the next round needs one.
    pub state: Option<String>,
}

impl InputRequired {
    /// The result object.
    pub fn into_result(self) -> Value {
        let mut result = Map::new();
        result.insert("resultType".into(), "input_required".into());
        result.insert("inputRequests".into(), Value::Object(self.requests));
        if let Some(state) = self.state {
            result.insert("requestState".into(), state.into());
        }
        Value::Object(result)
    }
}

/// Something that must be written atomically with a tool's effects.
pub trait CommitHook: Send + Sync {
    /// Called inside the tool's write transaction with the result about to be returned.
    fn on_commit(&self, tx: &crate::store::Tx<'_>, result: &Value) -> Result<(), McpError>;

    /// The idempotency key the call holds, which a tool forwarding the call to another
    /// system passes on (as the `Idempotency-Key` header of a REST backend).
    fn key(&self) -> Option<&str> {
        None
    }
}

impl ToolContext<'_> {
    /// Reports progress when the caller asked for it; a no-op otherwise.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if let Some(token) = &self.progress_token {
            self.client.progress(token, progress, total, message);
        }
    }

    /// Tells every session subscribed to the resource `uri` that it changed (a tool calls
    /// this after changing a resource its provider declares as changing).
    pub fn resource_changed(&self, uri: &str) {
        self.client.resource_updated(uri);
    }

    /// Sends a log message when the caller enabled logging at `level` or below.
    pub fn log(&self, level: LogLevel, data: Value) {
        if self.log_level.is_some_and(|min| level >= min) {
            self.client.log(level, data);
        }
    }

    /// Runs the tool's writes and builds its result in one `BEGIN IMMEDIATE` transaction,
    /// together with the commit hook (the idempotency record), so both commit or neither.
    pub fn commit<F>(&self, work: F) -> Result<ToolOutput, McpError>
    where
        F: FnOnce(&crate::store::Tx<'_>) -> Result<ToolOutput, McpError>,
    {
        let mut outcome: Option<Result<ToolOutput, McpError>> = None;
        let written = self.store.in_transaction(|tx| {
            let output = match work(tx) {
                Ok(output) => output,
                Err(err) => {
                    outcome = Some(Err(err));
                    return Err(crate::store::StoreError::RolledBack);
                }
            };
            if let Some(hook) = self.commit_hook
                && let Err(err) = hook.on_commit(tx, &output.clone().into_result())
            {
                outcome = Some(Err(err));
                return Err(crate::store::StoreError::RolledBack);
            }
            outcome = Some(Ok(output));
            Ok(())
        });
        match (written, outcome) {
            (Ok(()), Some(outcome)) => outcome,
            (Err(crate::store::StoreError::RolledBack), Some(Err(err))) => Err(err),
            (Err(err), _) => Err(crate::store::store_failure(err, true)),
            (Ok(()), None) => Err(McpError::internal()),
        }
    }

    /// Sends a request to the client (`sampling/createMessage`, `elicitation/create`) on the
    /// stream of the current call and waits for its answer. Only the handshake era has
    /// server-to-client requests; on 2026-07-28 a tool asks with an `input_required` result.
    pub fn ask_client(
        &self,
        method: &str,
        capability: &str,
        params: Value,
    ) -> Result<Value, McpError> {
        if !self.client.can_ask(capability) {
            return Err(McpError::missing_client_capability(
                json!({ capability: {} }),
            ));
        }
        let deadline = std::time::Instant::now() + CLIENT_ANSWER_TIMEOUT;
        let give_up = || {
            if self.is_cancelled() {
                Some(McpError::new(ErrorKind::Timeout).detail("reason", "cancelled"))
            } else if std::time::Instant::now() >= deadline {
                Some(McpError::new(ErrorKind::Timeout).detail("waiting_for", method))
            } else {
                None
            }
        };
        self.client.ask(method, params, &give_up)
    }

    /// The idempotency key of the call, when it holds one.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.commit_hook.and_then(|hook| hook.key())
    }

    /// True once the caller has cancelled the request.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// `wait()`, a wait on another system (a backend), run without holding the transport's
    /// place for a request being worked on; the place is taken again after it, even when
    /// it unwinds.
    pub fn off_worker<R>(&self, wait: impl FnOnce() -> R) -> R {
        self.client.step_away();
        let _back = StepBack(self.client);
        wait()
    }
}

/// Takes the request's place back when dropped ([`ToolContext::off_worker`]).
struct StepBack<'a>(&'a dyn ClientLink);

impl Drop for StepBack<'_> {
    fn drop(&mut self) {
        self.0.step_back();
    }
}

/// RFC 5424 severities used by MCP logging, in increasing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[allow(missing_docs)] // the RFC 5424 names say it all
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    const NAMES: [(&'static str, LogLevel); 8] = [
        ("debug", LogLevel::Debug),
        ("info", LogLevel::Info),
        ("notice", LogLevel::Notice),
        ("warning", LogLevel::Warning),
        ("error", LogLevel::Error),
        ("critical", LogLevel::Critical),
        ("alert", LogLevel::Alert),
        ("emergency", LogLevel::Emergency),
    ];

    /// Parses an MCP level name.
    pub fn parse(name: &str) -> Option<LogLevel> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, l)| *l)
    }

    /// The MCP level name.
    pub fn as_str(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, l)| *l == self)
            .map_or("info", |(n, _)| n)
    }
}
