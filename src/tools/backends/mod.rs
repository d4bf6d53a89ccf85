//! The company's own systems behind the gate: every `[[backends]]` entry becomes a
//! [`Backend`] — a REST API described by an OpenAPI document ([`openapi`]) or an upstream
//! MCP server ([`upstream`]) — whose operations are offered as tools named
//! `<backend>_<operation>`, through the same guard chain as the built-in ones.
//!
//! The outbound side runs on one small tokio runtime ([`Backends`] owns it); a tool call,
//! which runs on a worker thread of a transport, waits for its backend call on it with the
//! backend's deadline, and gives up when the caller cancels. Every call of a backend's
//! tools is admitted first ([`admission`]): a bounded number in flight, a bounded queue
//! with a deadline, and a circuit breaker that stops forwarding to a backend that keeps
//! failing. A backend's failures become catalog entries, always `isError` results: the
//! model reads them and can act.
//!
//! Here: the [`Backend`] trait the two kinds implement, what an operation declares
//! ([`Operation`]), every backend opened together ([`Backends`]), what a backend left out
//! of its list of tools and why ([`ListingReport`]), and per-backend counters for
//! `/metrics`. The tool an operation becomes with the operator's overrides applied
//! ([`BackendTool`]: name, category, scope, idempotency) is in `tool`.

pub mod admission;
mod lane;
mod offered;
pub mod openapi;
pub mod pins;
mod tool;
pub mod upstream;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::catalog::McpError;
use crate::clock::Clock;
use crate::config::{BackendConfig, BackendKind};
use crate::tools::{Category, Tool, ToolContext, ToolOutput};

pub use admission::{Admission, AdmissionStatus, Circuit, Rejection};
pub use lane::passing;
pub use offered::{Offered, UPSTREAM_SCHEME, gate_uri, split_gate_uri};
pub use tool::{
    BackendTool, OPERATION_CATEGORIES, configured_scopes, snake_case, tool_name,
    unmatched_overrides,
};

/// `details.reason` of a call refused because its backend is known to be down (an upstream
/// reconnecting): the call never left the gate, so it says nothing new of the backend's
/// health and does not count towards opening its circuit.
pub const NOT_CONNECTED: &str = "not connected";

/// Why a backend's answer could not be read whole ([`read_capped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFailure {
    /// It is (or says it is) larger than the cap.
    TooLarge,
    /// The connection failed before its end.
    Lost,
}

/// The body of `response`, refused past `max` bytes (by its `Content-Length` before any of
/// it is read, else as it comes): the one way both kinds of backend read an answer.
pub(crate) async fn read_capped(
    response: &mut reqwest::Response,
    max: u64,
) -> Result<Vec<u8>, BodyFailure> {
    let length = response.content_length();
    if length.is_some_and(|n| n > max) {
        return Err(BodyFailure::TooLarge);
    }
    let mut body = Vec::with_capacity(length.unwrap_or(0) as usize);
    while let Some(chunk) = response.chunk().await.map_err(|_| BodyFailure::Lost)? {
        if (body.len() + chunk.len()) as u64 > max {
            return Err(BodyFailure::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// What one operation of a backend declares, before the operator's overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    /// The operation's name without the backend prefix, in snake case (an OpenAPI
    /// `operationId`, an upstream MCP tool's name).
    pub name: String,
    /// Its title, when the backend gives one.
    pub title: Option<String>,
    /// What it does, for a model.
    pub description: String,
    /// Its default rate category (GET/HEAD and `readOnlyHint` → read, DELETE and
    /// `destructiveHint` → destructive, the rest write).
    pub category: Category,
    /// JSON Schema of its arguments (`type: object`), without `idempotency_key`.
    pub input_schema: Value,
    /// JSON Schema of its `structuredContent`, when known.
    pub output_schema: Option<Value>,
}

/// A backend's state, for `/healthz` and `tollgate backends check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Calls can be forwarded.
    Ready,
    /// Not connected yet, or reconnecting after a failure (the reason).
    Connecting(String),
    /// Cannot be used (the reason); calls answer `backend_unavailable`.
    Down(String),
}

impl Health {
    /// `"ready"`, `"connecting"` or `"down"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Health::Ready => "ready",
            Health::Connecting(_) => "connecting",
            Health::Down(_) => "down",
        }
    }

    /// Why it is not ready.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Health::Ready => None,
            Health::Connecting(reason) | Health::Down(reason) => Some(reason),
        }
    }
}

/// Why a tool a backend lists is not offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LeftOutReason {
    /// Its name has no letter or digit to make a tool name of.
    NameUnusable,
    /// Another of the backend's tools already has its tool name.
    NameTaken,
    /// Its tool name, after the backend's prefix, is longer than [`TOOL_NAME_MAX_CHARS`].
    NameTooLong,
    /// Its input schema is not of type object.
    InputSchemaNotObject,
    /// Its input or output schema is larger than the backend's `max_schema_bytes`.
    SchemaTooLarge,
    /// It comes after the backend's first `max_tools` tools.
    TooManyTools,
}

impl LeftOutReason {
    /// Every reason, in the order they are reported.
    pub const ALL: [LeftOutReason; 6] = [
        LeftOutReason::NameUnusable,
        LeftOutReason::NameTaken,
        LeftOutReason::NameTooLong,
        LeftOutReason::InputSchemaNotObject,
        LeftOutReason::SchemaTooLarge,
        LeftOutReason::TooManyTools,
    ];

    /// Its word in `/healthz`, `/metrics` and `tollgate backends check`.
    pub fn as_str(self) -> &'static str {
        match self {
            LeftOutReason::NameUnusable => "name_unusable",
            LeftOutReason::NameTaken => "name_taken",
            LeftOutReason::NameTooLong => "name_too_long",
            LeftOutReason::InputSchemaNotObject => "input_schema_not_object",
            LeftOutReason::SchemaTooLarge => "schema_too_large",
            LeftOutReason::TooManyTools => "too_many_tools",
        }
    }
}

/// The longest tool name after the backend's prefix. MCP allows 128 characters in all, but
/// several hosts refuse a whole list of tools when one name is longer than 64.
pub const TOOL_NAME_MAX_CHARS: usize = 64;

/// What a backend left out of its list of tools now, and what it shortened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListingReport {
    /// How many tools were left out, by reason (reasons with none are absent).
    pub left_out: BTreeMap<LeftOutReason, usize>,
    /// The first tools left out for a reason of their own (not [`LeftOutReason::TooManyTools`]),
    /// by the backend's own name, shortened when long.
    pub left_out_tools: Vec<(String, LeftOutReason)>,
    /// How many tools' descriptions were cut to the length limit.
    pub descriptions_cut: usize,
    /// Times the list was read again after the backend said it changed.
    pub relists: u64,
    /// Notifications that the list changed, received.
    pub list_changed: u64,
    /// Of those, the ones folded into a re-read already due.
    pub list_changed_coalesced: u64,
    /// Tools held for review: pending an operator's decision, or rejected.
    pub held: usize,
}

impl ListingReport {
    /// How many tools were left out in all.
    pub fn left_out_total(&self) -> usize {
        self.left_out.values().sum()
    }
}

/// What a backend call gets besides its arguments.
pub struct Call<'a> {
    /// The running tool's context: progress to the caller, its cancellation, the locale.
    pub ctx: &'a ToolContext<'a>,
    /// The idempotency key the call holds (forwarded as `Idempotency-Key` on a REST call
    /// that is not a GET).
    pub idempotency_key: Option<&'a str>,
    /// The backend's deadline for this call.
    pub timeout: Duration,
    /// The trace context the call carries to the backend: HTTP headers to a REST API,
    /// `params._meta` to an upstream MCP server.
    pub trace: &'a crate::telemetry::TraceFields,
}

/// One configured backend, connected. Implementations keep the backend's credential to
/// themselves: it never reaches a result, an error, a log line or the audit log.
pub trait Backend: Send + Sync {
    /// Its configured name (the tool-name prefix).
    fn name(&self) -> &str;

    /// `"openapi"` or `"mcp"`.
    fn kind(&self) -> &'static str;

    /// The operations it offers now (an upstream MCP server's list can change).
    fn operations(&self) -> Vec<Operation>;

    /// The names of every operation it has now, those an override disabled included: an
    /// override naming one of them names a tool.
    fn operation_names(&self) -> Vec<String> {
        self.operations().into_iter().map(|op| op.name).collect()
    }

    /// What the operator should know about how it was opened (a document read from its
    /// last good copy), one sentence each; logged at start, printed by `backends check`.
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// Its state now.
    fn health(&self) -> Health;

    /// What it left out of its list of tools, and how often it read the list again
    /// (nothing, for a backend whose list is fixed and offered whole).
    fn listing_report(&self) -> ListingReport {
        ListingReport::default()
    }

    /// Forwards one call of `operation` with `args`, already validated against the
    /// operation's input schema. `args` may hold tollgate's own `idempotency_key`
    /// ([`crate::tools::schema::KEY_ARGUMENT`]), which is never forwarded as an argument (its value is
    /// [`Call::idempotency_key`]). Every failure is a catalog error of the tool class.
    fn call(
        &self,
        operation: &str,
        args: &Map<String, Value>,
        call: &Call<'_>,
    ) -> Result<ToolOutput, McpError>;

    /// The name and attributes of the CLIENT span of a call of `operation`, by
    /// OpenTelemetry's conventions for the backend's protocol.
    fn describe_call(&self, operation: &str) -> (String, crate::telemetry::SpanAttributes) {
        (operation.to_owned(), Vec::new())
    }

    /// Its tools held until an operator decides on their definitions, as (operation,
    /// `pending` or `rejected`) ([`pins`]).
    fn held(&self) -> Vec<(String, &'static str)> {
        Vec::new()
    }

    /// Reads the operators' decisions on its tools' definitions again, telling the server
    /// when what it offers changed.
    fn review_pins(&self) {}

    /// Its resources, as it lists them (its own URIs).
    fn resources(&self) -> Vec<Value> {
        Vec::new()
    }

    /// Its resource templates, as it lists them.
    fn resource_templates(&self) -> Vec<Value> {
        Vec::new()
    }

    /// Its prompts offered now: the name after the backend's prefix, and the entry as it
    /// lists it.
    fn prompts(&self) -> Vec<(String, Value)> {
        Vec::new()
    }

    /// Its prompts held until an operator decides on their definitions, as (name after
    /// the prefix, `pending` or `rejected`).
    fn held_prompts(&self) -> Vec<(String, &'static str)> {
        Vec::new()
    }

    /// Reads its resource `uri` (its own URI): the `resources/read` result it answers.
    fn read_resource(&self, uri: &str, _timeout: Duration) -> Result<Value, McpError> {
        Err(McpError::resource_not_found(uri).with("uri", uri))
    }

    /// Gets its prompt `operation` with `args`: the `prompts/get` result it answers.
    fn get_prompt(
        &self,
        _operation: &str,
        _args: &Map<String, Value>,
        _timeout: Duration,
    ) -> Result<Value, McpError> {
        Err(McpError::invalid_params("name").detail("reason", "unknown_prompt"))
    }

    /// The values it completes the argument `argument` (partly `value`) of its prompt
    /// `operation` with.
    fn complete_prompt(
        &self,
        _operation: &str,
        _argument: (&str, &str),
        _timeout: Duration,
    ) -> Result<Vec<String>, McpError> {
        Ok(Vec::new())
    }

    /// Follows (`on`) or stops following the updates of its resource `uri`; false when it
    /// sends none.
    fn subscribe(&self, _uri: &str, _on: bool, _timeout: Duration) -> Result<bool, McpError> {
        Ok(false)
    }

    /// Stops what it runs (child processes, sessions); called once at shutdown.
    fn shutdown(&self) {}
}

/// What a backend is opened with.
#[derive(Clone)]
pub struct BackendEnv {
    /// The outbound runtime.
    pub runtime: tokio::runtime::Handle,
    /// Called when what the backend offers changed (an upstream's
    /// `notifications/tools/list_changed`, a reconnect that listed other tools, a resource
    /// it updated).
    pub changed: Arc<dyn Fn(Change) + Send + Sync>,
    /// Whether a backend that cannot be reached at start is a problem (`backends check`),
    /// rather than connected in the background while the rest is served (`serve`,
    /// `stdio`: its tools appear once it answers).
    pub strict: bool,
    /// Where the last good copies of documents fetched from a URL are kept.
    pub copies: openapi::Copies,
    /// The server's clock (when a copy was fetched, how old it is).
    pub clock: Clock,
    /// Where the approved definitions of upstream tools are kept (`None`: every tool is
    /// offered as listed, for a command that serves no calls).
    pub store: Option<crate::store::Store>,
}

/// How [`Backends::open`] opens the backends.
#[derive(Debug, Clone)]
pub struct Opening {
    /// Whether an upstream that cannot be reached is a problem ([`BackendEnv::strict`]).
    pub strict: bool,
    /// Where the last good copies of fetched documents are kept ([`BackendEnv::copies`]).
    pub copies: openapi::Copies,
    /// The server's clock.
    pub clock: Clock,
    /// Where the approved definitions of upstream tools are kept ([`BackendEnv::store`]).
    pub store: Option<crate::store::Store>,
}

/// A backend that could not be opened: what is wrong, for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendProblem {
    /// The backend's name.
    pub backend: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl std::fmt::Display for BackendProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "backend {}: {}", self.backend, self.message)
    }
}

/// Calls and failures that reached one backend, for `/metrics`.
#[derive(Debug, Default)]
pub struct BackendCounters {
    /// Calls forwarded.
    pub calls: AtomicU64,
    /// Of those, the ones that failed (any catalog error).
    pub failures: AtomicU64,
    /// How long they took, the wait for admission included.
    pub durations: crate::telemetry::Histogram,
}

/// One backend's [`BackendCounters`] read at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendCount {
    /// The backend's name.
    pub name: String,
    /// Calls forwarded.
    pub calls: u64,
    /// Of those, the ones that failed.
    pub failures: u64,
    /// How long they took.
    pub durations: crate::telemetry::HistogramSnapshot,
}

/// One backend with its configuration, counters and the admission of its calls.
struct Entry {
    config: BackendConfig,
    backend: Arc<dyn Backend>,
    counters: Arc<BackendCounters>,
    admission: Arc<Admission>,
}

/// What changed in what a backend offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Its list of tools (or of the tools held for review).
    Tools,
    /// Its list of resources or resource templates.
    Resources,
    /// Its list of prompts (or of the prompts held for review).
    Prompts,
    /// One of its resources, by the gate's URI: the sessions subscribed to it are told.
    ResourceUpdated(String),
}

/// What is called when what a backend offers changed.
pub type ChangeListener = Arc<dyn Fn(Change) + Send + Sync>;

/// Every configured backend, connected, with the runtime they run on.
pub struct Backends {
    runtime: Option<tokio::runtime::Runtime>,
    entries: Vec<Entry>,
    listener: Arc<Mutex<Option<ChangeListener>>>,
}

/// One backend's line in `/healthz` and `tollgate backends check`.
#[derive(Debug, Clone)]
pub struct BackendStatus {
    /// Its name.
    pub name: String,
    /// `openapi` or `mcp`.
    pub kind: &'static str,
    /// Its state.
    pub health: Health,
    /// How many tools it yields now.
    pub tools: usize,
    /// How many resources, resource templates and prompts it offers now (none from a
    /// backend that does not expose them).
    pub offered: [usize; 3],
    /// What it left out of its list of tools, and how often it read the list again.
    pub listing: ListingReport,
    /// Its calls in flight and waiting, its circuit, and the calls it refused.
    pub admission: AdmissionStatus,
}

impl Backends {
    /// No backends (the embedded default): no runtime is started.
    pub fn none() -> Backends {
        Backends {
            runtime: None,
            entries: Vec::new(),
            listener: Arc::new(Mutex::new(None)),
        }
    }

    /// Starts the outbound runtime and opens every configured backend: an OpenAPI
    /// document is read (or fetched, else taken from its last good copy) and its
    /// operations listed; an upstream MCP server is started or connected (waiting a
    /// bounded time for its first list of tools, then connecting in the background).
    /// Every backend that cannot be opened is a problem; all are reported together. With
    /// `opening.strict`, so is an upstream that cannot be reached at start; otherwise it
    /// is connected in the background (see [`BackendEnv::strict`]).
    pub fn open(
        configs: &[BackendConfig],
        opening: &Opening,
    ) -> Result<Backends, Vec<BackendProblem>> {
        if configs.is_empty() {
            return Ok(Backends::none());
        }
        // One process-wide crypto provider for every TLS connection made on the runtime;
        // installing it twice (a second `open` in one process) is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tollgate-outbound")
            .enable_all()
            .build()
            .map_err(|e| {
                vec![BackendProblem {
                    backend: configs[0].name.clone(),
                    message: format!("cannot start the outbound runtime: {e}"),
                }]
            })?;
        let listener: Arc<Mutex<Option<ChangeListener>>> = Arc::new(Mutex::new(None));
        let changed: ChangeListener = {
            let listener = Arc::clone(&listener);
            Arc::new(move |change| {
                let current = listener.lock().ok().and_then(|l| l.clone());
                if let Some(notify) = current {
                    notify(change);
                }
            })
        };
        let env = BackendEnv {
            runtime: runtime.handle().clone(),
            changed,
            strict: opening.strict,
            copies: opening.copies.clone(),
            clock: opening.clock.clone(),
            store: opening.store.clone(),
        };
        let mut entries = Vec::new();
        let mut problems = Vec::new();
        for config in configs {
            let opened = match &config.kind {
                BackendKind::OpenApi(_) => openapi::open(config, &env),
                BackendKind::Mcp(_) => upstream::open(config, &env),
            };
            match opened {
                Ok(backend) => entries.push(Entry {
                    config: config.clone(),
                    backend,
                    counters: Arc::default(),
                    admission: Arc::new(Admission::new(
                        &config.name,
                        config.limits,
                        opening.clock.clone(),
                    )),
                }),
                Err(problem) => problems.push(problem),
            }
        }
        let backends = Backends {
            runtime: Some(runtime),
            entries,
            listener,
        };
        if problems.is_empty() {
            Ok(backends)
        } else {
            backends.shutdown();
            Err(problems)
        }
    }

    /// Whether any backend is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether some backend's list of tools can change while the server runs (an
    /// upstream MCP server's): then the server announces `tools.listChanged`.
    pub fn tools_can_change(&self) -> bool {
        self.entries.iter().any(|e| e.backend.kind() == "mcp")
    }

    /// Calls `notify` whenever what a backend offers changed (the server then rebuilds its
    /// registry, or tells its clients).
    pub fn on_change(&self, notify: ChangeListener) {
        if let Ok(mut listener) = self.listener.lock() {
            *listener = Some(notify);
        }
    }

    /// The tools every backend yields now, with the operator's overrides applied; a tool
    /// an override disables is left out.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.entries
            .iter()
            .flat_map(|entry| {
                entry
                    .backend
                    .operations()
                    .into_iter()
                    .filter_map(|op| BackendTool::new(entry, op))
                    .map(|tool| Arc::new(tool) as Arc<dyn Tool>)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The tools held for review, by full name, with their state (`pending` or
    /// `rejected`).
    pub fn held(&self) -> Vec<(String, &'static str)> {
        self.entries
            .iter()
            .flat_map(|entry| {
                entry
                    .backend
                    .held()
                    .into_iter()
                    .map(|(op, state)| (tool_name(&entry.config.name, &op), state))
            })
            .collect()
    }

    /// Reads the operators' decisions on the upstreams' tool definitions again (on every
    /// `tools/list`, so a decision made on any node applies here).
    pub fn review_pins(&self) {
        for entry in &self.entries {
            entry.backend.review_pins();
        }
    }

    /// The overrides that name no tool their backend yields (most likely a mistyped
    /// name), as `(backend, tool name)`.
    pub fn unmatched_overrides(&self) -> Vec<(String, String)> {
        self.entries
            .iter()
            .flat_map(|e| {
                unmatched_overrides(&e.config, &e.backend.operation_names())
                    .into_iter()
                    .map(|name| (e.config.name.clone(), name))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// What the operator should know about how each backend was opened, as
    /// `(backend, warning)`.
    pub fn warnings(&self) -> Vec<(String, String)> {
        self.entries
            .iter()
            .flat_map(|e| {
                e.backend
                    .warnings()
                    .into_iter()
                    .map(|warning| (e.config.name.clone(), warning))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Every backend's state, tool count and admission.
    pub fn status(&self) -> Vec<BackendStatus> {
        self.entries
            .iter()
            .map(|e| BackendStatus {
                name: e.config.name.clone(),
                kind: e.backend.kind(),
                health: e.backend.health(),
                tools: e
                    .backend
                    .operations()
                    .iter()
                    .filter(|op| tool::enabled(&e.config, op))
                    .count(),
                offered: [
                    e.backend.resources().len(),
                    e.backend.resource_templates().len(),
                    e.backend.prompts().len(),
                ],
                listing: e.backend.listing_report(),
                admission: e.admission.status(),
            })
            .collect()
    }

    /// Every backend's calls and failures so far.
    pub fn counters(&self) -> Vec<BackendCount> {
        self.entries
            .iter()
            .map(|e| BackendCount {
                name: e.config.name.clone(),
                calls: e.counters.calls.load(Ordering::Relaxed),
                failures: e.counters.failures.load(Ordering::Relaxed),
                durations: e.counters.durations.snapshot(),
            })
            .collect()
    }

    /// Stops what every backend runs (child processes, sessions); the server calls it as
    /// it stops.
    pub fn stop(&self) {
        for entry in &self.entries {
            entry.backend.shutdown();
        }
    }

    /// Stops every backend, then the runtime, waiting for it a little.
    pub fn shutdown(mut self) {
        self.stop();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

impl Drop for Backends {
    fn drop(&mut self) {
        self.stop();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
