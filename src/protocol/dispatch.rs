//! The dispatcher shared by every transport: the [`Message`]s of one read in
//! ([`Server::handle`], the one entry point of every transport and of the fuzzer), each
//! [`Response`] out as soon as it is ready.
//!
//! This module owns the [`Server`] and the sorting of what comes in: every `tools/call` takes
//! the one route of `tool_call` (the guard chain, then the typed outcome rendered once, in
//! `render_call_outcome`); a `tools/call` without an id is a notification MCP does not
//! define, so that route runs nothing for it and answers nothing. Every other message goes
//! through `route`, which selects the protocol era of each request (here only: a transport
//! asks a message what kind it is, [`Message::kind`], and never looks into it) and hands
//! each method to its handler: `lifecycle` (`initialize`, `ping`, `server/discover`, the
//! notifications), `listing` (the paged `*/list` methods), `resources` (read and
//! subscribe), `prompts` (`prompts/get` and `completion/complete`, which pass the guard
//! chain when what they answer reads business data) and `logging` (`logging/setLevel`).
//! Errors become wire bodies here ([`Server::error_response`]) and in `tool_call`.

mod lifecycle;
mod listing;
mod logging;
mod observed;
mod prompts;
mod resources;
mod route;
mod tool_call;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use serde_json::{Value, json};

use crate::catalog::McpError;
use crate::clock::Clock;
use crate::config::Locale;
use crate::guards::auth::Principal;
use crate::guards::ratelimit::Budget;
use crate::guards::{Caller, Guards};
use crate::protocol::client::Notifier;
use crate::protocol::inbound::{Message, Response};
use crate::protocol::jsonrpc::{self, Incoming, Parsed, RequestId};
use crate::protocol::revisions::{Listed, Subscribers};
use crate::store::Store;
use crate::tools::Registry;
use crate::tools::backends::Backends;
use crate::tools::request_state::StateKey;

/// Which transport a request arrived on (recorded in the audit log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Newline-delimited JSON on stdin/stdout.
    Stdio,
    /// Streamable HTTP.
    Http,
}

impl Transport {
    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }
}

/// What the transport knows about the request besides its body.
pub struct Env<'a> {
    /// The connection state (the stdio process or one HTTP session).
    pub session: &'a crate::protocol::revisions::Session,
    /// Where progress and log notifications of this request go.
    pub notifier: &'a dyn Notifier,
    /// The transport.
    pub transport: Transport,
    /// The presented credential (stdio: from the environment; HTTP: the bearer token).
    pub token: Option<&'a str>,
    /// Development mode: the public id of the credential that requests without a token
    /// run as (HTTP on loopback only; never set by default).
    pub dev_credential: Option<&'a str>,
    /// Who is asking, for throttling failed authentication (peer address, or `stdio:<pid>`).
    pub source: String,
    /// An `Idempotency-Key` header, when the transport has one.
    pub idempotency_header: Option<&'a str>,
    /// The HTTP request's trace headers and the listener's address (`None` on stdio).
    pub http: Option<crate::telemetry::HttpTrace<'a>>,
    /// The `Mcp-Session-Id` the request names, when it names one.
    pub session_id: Option<&'a str>,
}

impl Env<'_> {
    /// Who is calling, as the guard chain sees it.
    pub fn caller(&self) -> Caller<'_> {
        Caller {
            token: self.token,
            dev_credential: self.dev_credential,
            source: &self.source,
            idempotency_header: self.idempotency_header,
            transport: self.transport.as_str(),
        }
    }
}

/// The MCP server: registry, guards and store behind one entry point.
pub struct Server {
    /// What the server offers now: replaced whole when a backend's list of tools changes,
    /// so a request works on one snapshot from start to end.
    registry: RwLock<Arc<Registry>>,
    /// How many times each list changed ([`Listed`]: the registry was replaced, a backend's
    /// resources or prompts changed); a session told of an older one is sent
    /// `notifications/<list>/list_changed`.
    generations: [AtomicU64; 3],
    /// The company's systems behind the gate (none by default).
    backends: Arc<Backends>,
    store: Store,
    guards: Guards,
    locale: Locale,
    state_key: StateKey,
    clock: Clock,
    /// The sessions subscribed to resources that can change.
    subscribers: Subscribers,
}

impl Server {
    /// Assembles a server; `state_key` seals multi-round request states; `clock` is the
    /// one the guards were built with, handed to tools and transports.
    pub fn new(
        registry: Registry,
        store: Store,
        guards: Guards,
        locale: Locale,
        state_key: StateKey,
        clock: Clock,
    ) -> Server {
        Server {
            registry: RwLock::new(Arc::new(registry)),
            generations: Default::default(),
            backends: Arc::new(Backends::none()),
            store,
            guards,
            locale,
            state_key,
            clock,
            subscribers: Subscribers::default(),
        }
    }

    /// The server's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The same server, with the tools of `backends` already in its registry.
    pub fn with_backends(mut self, backends: Arc<Backends>) -> Server {
        self.backends = backends;
        self
    }

    /// The registry now (a snapshot: a later change replaces it, never alters it).
    pub fn registry(&self) -> Arc<Registry> {
        match self.registry.read() {
            Ok(current) => Arc::clone(&current),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Replaces the registry (a backend's list of tools changed); every session is told
    /// with `notifications/tools/list_changed` on its next stream that can carry it.
    pub fn replace_registry(&self, registry: Registry) {
        let mut current = match self.registry.write() {
            Ok(current) => current,
            Err(poisoned) => poisoned.into_inner(),
        };
        *current = Arc::new(registry);
        self.list_changed(Listed::Tools);
    }

    /// Every session is told that `list` changed, on its next stream that can carry it.
    pub fn list_changed(&self, list: Listed) {
        self.generations[list as usize].fetch_add(1, Ordering::Release);
    }

    /// The sessions subscribed to the resource `uri` are told it changed, on their next
    /// stream that can carry it.
    pub fn resource_changed(&self, uri: &str) {
        self.subscribers.changed(uri);
    }

    /// The backends behind the gate.
    pub fn backends(&self) -> &Backends {
        &self.backends
    }

    /// The guard chain.
    pub fn guards(&self) -> &Guards {
        &self.guards
    }

    /// The database.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The locale of hints.
    pub fn locale(&self) -> Locale {
        self.locale
    }

    /// Handles the messages of one read (one HTTP body, or several stdio lines that
    /// arrived together), each as if on its own, handing every response to `respond` as
    /// soon as it is ready. This is the entry point of every transport. The `tools/call`
    /// requests among them go through the guard chain together ([`Guards::call_tools`]),
    /// so that they share one rate-charging wait; the other messages are handled first.
    /// (So a `notifications/cancelled` read together with the call it names finds that
    /// call not started yet, and nothing to cancel: MCP lets a server ignore a
    /// cancellation; the call runs and is answered.)
    pub fn handle(
        &self,
        messages: Vec<Message>,
        env: &Env<'_>,
        respond: &(dyn Fn(Response) + Sync),
    ) {
        let mut calls = Vec::with_capacity(messages.len());
        for message in messages {
            match message.into_parsed() {
                Parsed::Single(Incoming::Request(req)) if req.method == "tools/call" => {
                    calls.push(req);
                }
                parsed => self
                    .handle_parsed(parsed, env)
                    .into_iter()
                    .for_each(respond),
            }
        }
        self.call_tools(calls, env, respond);
    }

    /// [`Server::handle`] for a single message (an HTTP body): its response, if it has one.
    pub fn handle_one(&self, message: Message, env: &Env<'_>) -> Option<Response> {
        let response = std::sync::Mutex::new(None);
        self.handle(vec![message], env, &|r| {
            *response.lock().unwrap_or_else(PoisonError::into_inner) = Some(r);
        });
        response
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The error response to the request `id`. Transports use it for failures they detect
    /// themselves (an oversized line, a bad header).
    pub fn error_response(&self, id: Option<RequestId>, err: McpError) -> Response {
        let body = self.error_body(id, &err);
        Response {
            error: Some(err),
            ..Response::of(body)
        }
    }

    /// A JSON-RPC error response body.
    fn error_body(&self, id: Option<RequestId>, err: &McpError) -> Value {
        jsonrpc::failure(id, err.to_jsonrpc_error(self.locale))
    }

    /// The response to the request `id`.
    fn response(&self, id: RequestId, outcome: Result<Answer, McpError>) -> Response {
        match outcome {
            Ok(answer) => Response {
                budget: answer.budget,
                refusal: answer.refusal,
                ..Response::of(jsonrpc::success(id, answer.result))
            },
            Err(err) => self.error_response(Some(id), err),
        }
    }

    /// Who the caller is; every method past the handshake needs it.
    fn authenticate(&self, env: &Env<'_>) -> Result<Principal, McpError> {
        self.guards.authenticate(&env.caller())
    }

    /// Sends the session's queued `notifications/resources/updated`, and
    /// `notifications/tools/list_changed` when the registry was replaced since the session
    /// was last told, ahead of a successful response, on a stream that can carry them;
    /// otherwise they wait for a later one (an error keeps its plain reply and HTTP status).
    fn send_updates(&self, succeeded: bool, env: &Env<'_>) {
        if succeeded && env.notifier.delivers() {
            for update in env.session.take_updates() {
                env.notifier.notify(update);
            }
            for list in Listed::ALL {
                let generation = self.generations[list as usize].load(Ordering::Acquire);
                if env.session.changed_since(list, generation) && self.may_see(list, env) {
                    env.notifier
                        .notify(jsonrpc::notification(list.notification(), json!({})));
                }
            }
        }
    }
}

impl Server {
    /// Whether the session's caller may see what changed in `list`: every caller sees the
    /// tools' list change (its own view of it may have changed); a backend's resources or
    /// prompts only a caller who may read some backend's.
    fn may_see(&self, list: Listed, env: &Env<'_>) -> bool {
        let subjects = match list {
            Listed::Tools => return true,
            Listed::Resources => self.backends.offer_subjects(false),
            Listed::Prompts => self.backends.offer_subjects(true),
        };
        let Ok(principal) = self.guards.authenticate(&env.caller()) else {
            return false;
        };
        let visibility = self.guards.visibility(&principal);
        subjects.iter().any(|subject| visibility.can_see(subject))
    }
}

/// The result of a request, with what is left of the caller's rate budget when the
/// request was charged (typed for the transport's headers, never read back from the body).
struct Answer {
    result: Value,
    budget: Option<Budget>,
    /// A guard refusal answered as an `isError` result (the `tool_result` guard channel):
    /// the transport sends its rate-limit headers, not a status of its own.
    refusal: Option<McpError>,
}

impl Answer {
    /// The result of a request that charged nothing.
    fn uncharged(result: Value) -> Answer {
        Answer {
            result,
            budget: None,
            refusal: None,
        }
    }
}

#[cfg(test)]
mod testing;
