//! The company's own systems behind the gate: every `[[backends]]` entry becomes a
//! [`Backend`] — a REST API described by an OpenAPI document ([`openapi`]) or an upstream
//! MCP server ([`upstream`]) — whose operations are offered as tools named
//! `<backend>_<operation>`, through the same guard chain as the built-in ones.
//!
//! The outbound side runs on one small tokio runtime ([`Backends`] owns it); a tool call,
//! which runs on a worker thread of a transport, waits for its backend call on it with the
//! backend's deadline, and gives up when the caller cancels. A backend's failures become
//! catalog entries, always `isError` results: the model reads them and can act.
//!
//! Here: the [`Backend`] trait the two kinds implement, what an operation declares
//! ([`Operation`]), the tool an operation becomes with the operator's overrides applied
//! ([`BackendTool`]: name, category, scope, idempotency), what a backend left out of its
//! list of tools and why ([`ListingReport`]), and per-backend counters for `/metrics`.

pub mod openapi;
pub mod upstream;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::catalog::McpError;
use crate::clock::Clock;
use crate::config::{BackendConfig, BackendKind, IdempotencyPolicy, ToolOverride};
use crate::tools::{Category, Idempotency, Tool, ToolContext, ToolOutput, ToolSpec, schema};

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
    /// ([`schema::KEY_ARGUMENT`]), which is never forwarded as an argument (its value is
    /// [`Call::idempotency_key`]). Every failure is a catalog error of the tool class.
    fn call(
        &self,
        operation: &str,
        args: &Map<String, Value>,
        call: &Call<'_>,
    ) -> Result<ToolOutput, McpError>;

    /// Stops what it runs (child processes, sessions); called once at shutdown.
    fn shutdown(&self) {}
}

/// What a backend is opened with.
#[derive(Clone)]
pub struct BackendEnv {
    /// The outbound runtime.
    pub runtime: tokio::runtime::Handle,
    /// Called when the backend's list of operations changed (an upstream's
    /// `notifications/tools/list_changed`, a reconnect that listed other tools).
    pub changed: Arc<dyn Fn() + Send + Sync>,
    /// Whether a backend that cannot be reached at start is a problem (`backends check`),
    /// rather than connected in the background while the rest is served (`serve`,
    /// `stdio`: its tools appear once it answers).
    pub strict: bool,
    /// Where the last good copies of documents fetched from a URL are kept.
    pub copies: openapi::Copies,
    /// The server's clock (when a copy was fetched, how old it is).
    pub clock: Clock,
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
}

/// One backend with its configuration and counters.
struct Entry {
    config: BackendConfig,
    backend: Arc<dyn Backend>,
    counters: Arc<BackendCounters>,
}

/// What is called when a backend's list of tools changed.
pub type ChangeListener = Arc<dyn Fn() + Send + Sync>;

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
    /// What it left out of its list of tools, and how often it read the list again.
    pub listing: ListingReport,
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
        let changed: Arc<dyn Fn() + Send + Sync> = {
            let listener = Arc::clone(&listener);
            Arc::new(move || {
                let current = listener.lock().ok().and_then(|l| l.clone());
                if let Some(notify) = current {
                    notify();
                }
            })
        };
        let env = BackendEnv {
            runtime: runtime.handle().clone(),
            changed,
            strict: opening.strict,
            copies: opening.copies.clone(),
            clock: opening.clock.clone(),
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

    /// Calls `notify` whenever a backend's list of tools changed (the server then rebuilds
    /// its registry and tells its clients).
    pub fn on_change(&self, notify: Arc<dyn Fn() + Send + Sync>) {
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

    /// Every backend's state and tool count.
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
                    .filter(|op| enabled(&e.config, op))
                    .count(),
                listing: e.backend.listing_report(),
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

/// The full tool name of `operation` on `backend`.
pub fn tool_name(backend: &str, operation: &str) -> String {
    format!("{backend}_{operation}")
}

fn override_of<'c>(config: &'c BackendConfig, op: &Operation) -> Option<&'c ToolOverride> {
    config.tools.get(&tool_name(&config.name, &op.name))
}

fn enabled(config: &BackendConfig, op: &Operation) -> bool {
    override_of(config, op).and_then(|o| o.enabled) != Some(false)
}

fn category_named(word: &str) -> Option<Category> {
    Category::ALL.into_iter().find(|c| c.as_str() == word)
}

/// The categories an operation has before the operator's overrides: an OpenAPI method or
/// an upstream tool's hints make it `read`, `destructive` or `write`, never `send` or
/// `generate` (only an override gives those).
pub const OPERATION_CATEGORIES: [Category; 3] =
    [Category::Read, Category::Write, Category::Destructive];

/// The scope of a backend tool of `category`: the override's own, or `<backend>:<category>`.
fn tool_scope(config: &BackendConfig, category: Category, over: &ToolOverride) -> String {
    match &over.scope {
        Some(scope) => scope.clone(),
        None => format!("{}:{}", config.name, category.as_str()),
    }
}

/// Every scope a tool of the backend `config` can need, from its configuration alone (no
/// connection): `<backend>:<category>` for each category an operation can have, and for
/// each override that keeps its tool enabled, the scope it sets or the category scope it
/// moves the tool to. Each once, the category scopes first in category order, then the
/// others by name.
pub fn configured_scopes(config: &BackendConfig) -> Vec<String> {
    let mut scopes: std::collections::BTreeSet<String> = OPERATION_CATEGORIES
        .iter()
        .map(|c| tool_scope(config, *c, &ToolOverride::default()))
        .collect();
    for over in config.tools.values().filter(|o| o.enabled != Some(false)) {
        let category = over.category.as_deref().and_then(category_named);
        match (&over.scope, category) {
            (Some(scope), _) => {
                scopes.insert(scope.clone());
            }
            (None, Some(category)) => {
                scopes.insert(tool_scope(config, category, over));
            }
            (None, None) => {}
        }
    }
    let rank = |scope: &str| {
        Category::ALL
            .iter()
            .position(|c| *scope == tool_scope(config, *c, &ToolOverride::default()))
            .unwrap_or(Category::ALL.len())
    };
    let mut scopes: Vec<String> = scopes.into_iter().collect();
    scopes.sort_by_key(|s| rank(s));
    scopes
}

/// A backend operation offered as a tool.
pub struct BackendTool {
    spec: ToolSpec,
    operation: String,
    backend: Arc<dyn Backend>,
    timeout: Duration,
    counters: Arc<BackendCounters>,
}

impl BackendTool {
    /// The tool `op` of `entry` becomes, or `None` when an override disables it.
    fn new(entry: &Entry, op: Operation) -> Option<BackendTool> {
        let config = &entry.config;
        let over = override_of(config, &op).cloned().unwrap_or_default();
        if over.enabled == Some(false) {
            return None;
        }
        let category = over
            .category
            .as_deref()
            .and_then(category_named)
            .unwrap_or(op.category);
        let idempotency = match over.idempotency {
            Some(IdempotencyPolicy::Required) => Idempotency::Required,
            Some(IdempotencyPolicy::Optional) => Idempotency::Optional,
            Some(IdempotencyPolicy::None) => Idempotency::NotApplicable,
            None if category == Category::Read => Idempotency::NotApplicable,
            None => Idempotency::Optional,
        };
        let name = tool_name(&config.name, &op.name);
        let scope = tool_scope(config, category, &over);
        let title = over
            .title
            .or(op.title)
            .unwrap_or_else(|| op.name.replace('_', " "));
        let mut description = over.description.unwrap_or(op.description);
        let mut input_schema = op.input_schema;
        if idempotency != Idempotency::NotApplicable {
            add_key_argument(&mut input_schema, idempotency == Idempotency::Required);
            if !description.is_empty() && !description.ends_with(['.', '\n']) {
                description.push('.');
            }
            if !description.is_empty() {
                description.push(' ');
            }
            description.push_str(schema::reuse_key!());
        }
        schema::optional_admits_null(&mut input_schema);
        Some(BackendTool {
            spec: ToolSpec {
                name: intern(&name),
                title: intern(&title),
                description: intern(&description),
                category,
                scope: intern(&scope),
                idempotency,
                input_schema,
                output_schema: op.output_schema,
            },
            operation: op.name,
            backend: Arc::clone(&entry.backend),
            timeout: config.timeout,
            counters: Arc::clone(&entry.counters),
        })
    }
}

/// Adds the `idempotency_key` argument to an object schema (required when `required`).
fn add_key_argument(input_schema: &mut Value, required: bool) {
    let Value::Object(object) = input_schema else {
        return;
    };
    let properties = object
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(properties) = properties {
        properties.insert(schema::KEY_ARGUMENT.into(), schema::key_property(required));
    }
    if required {
        let names = object
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(names) = names {
            names.push(schema::KEY_ARGUMENT.into());
        }
    }
}

impl Tool for BackendTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn backend(&self) -> Option<&str> {
        Some(self.backend.name())
    }

    /// A backend call waits on the network: it gets a worker of its own.
    fn waits(&self) -> bool {
        true
    }

    fn call(
        &self,
        ctx: &ToolContext<'_>,
        args: &Map<String, Value>,
    ) -> Result<ToolOutput, McpError> {
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        let call = Call {
            ctx,
            idempotency_key: ctx.idempotency_key(),
            timeout: self.timeout,
        };
        let outcome = self.backend.call(&self.operation, args, &call);
        if outcome.is_err() {
            self.counters.failures.fetch_add(1, Ordering::Relaxed);
        }
        outcome
    }
}

/// Interns a backend tool's texts: a tool's declaration holds `&'static str`s, and an
/// upstream's list is re-read on every change, so each distinct text is kept once for the
/// life of the process instead of once per listing.
pub fn intern(text: &str) -> &'static str {
    static TEXTS: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let texts = TEXTS.get_or_init(|| Mutex::new(HashSet::new()));
    let mut texts = match texts.lock() {
        Ok(texts) => texts,
        Err(poisoned) => poisoned.into_inner(),
    };
    if let Some(&known) = texts.get(text) {
        return known;
    }
    let leaked: &'static str = Box::leak(text.to_owned().into_boxed_str());
    texts.insert(leaked);
    leaked
}

/// Snake case of an identifier (`createOrder`, `create-order`, `Create Order` →
/// `create_order`): the default tool name of an OpenAPI `operationId`.
pub fn snake_case(id: &str) -> String {
    let mut out = String::with_capacity(id.len() + 4);
    let mut prev_lower_or_digit = false;
    for c in id.chars() {
        if c.is_ascii_uppercase() {
            if prev_lower_or_digit && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            prev_lower_or_digit = false;
        } else if c.is_ascii_alphanumeric() {
            out.push(c);
            prev_lower_or_digit = true;
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
            prev_lower_or_digit = false;
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    out
}

/// Overrides that name none of a backend's operations (`operations`, their names): the
/// operator most likely mistyped a name.
pub fn unmatched_overrides(config: &BackendConfig, operations: &[String]) -> Vec<String> {
    let names: HashSet<String> = operations
        .iter()
        .map(|op| tool_name(&config.name, op))
        .collect();
    config
        .tools
        .keys()
        .filter(|name| !names.contains(*name))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_become_snake_case_names() {
        for (id, name) in [
            ("createOrder", "create_order"),
            ("listPetsByTag", "list_pets_by_tag"),
            ("get-user", "get_user"),
            ("Create Order", "create_order"),
            ("already_snake", "already_snake"),
            ("getV2Items", "get_v2_items"),
            ("HTTPStatus", "httpstatus"),
        ] {
            assert_eq!(snake_case(id), name, "{id}");
        }
    }

    fn crm(tools: &[(&str, ToolOverride)]) -> BackendConfig {
        BackendConfig {
            name: "crm".to_owned(),
            kind: BackendKind::Mcp(crate::config::McpBackend {
                transport: crate::config::McpTransport::Http {
                    url: "http://127.0.0.1:1/mcp".to_owned(),
                    headers: Default::default(),
                },
                max_tools: crate::config::DEFAULT_MAX_TOOLS,
                max_schema_bytes: crate::config::DEFAULT_MAX_SCHEMA_BYTES,
            }),
            timeout: Duration::from_secs(1),
            tools: tools
                .iter()
                .map(|(name, over)| ((*name).to_owned(), over.clone()))
                .collect(),
        }
    }

    #[test]
    fn a_backends_scopes_come_from_its_configuration() {
        assert_eq!(
            configured_scopes(&crm(&[])),
            ["crm:read", "crm:write", "crm:destructive"]
        );
        let overrides = [
            (
                "crm_send_mail",
                ToolOverride {
                    category: Some("send".to_owned()),
                    ..ToolOverride::default()
                },
            ),
            (
                "crm_export",
                ToolOverride {
                    scope: Some("crm:export".to_owned()),
                    category: Some("generate".to_owned()),
                    ..ToolOverride::default()
                },
            ),
            (
                "crm_purge",
                ToolOverride {
                    scope: Some("crm:purge".to_owned()),
                    enabled: Some(false),
                    ..ToolOverride::default()
                },
            ),
        ];
        assert_eq!(
            configured_scopes(&crm(&overrides)),
            [
                "crm:read",
                "crm:write",
                "crm:destructive",
                "crm:send",
                "crm:export"
            ]
        );
    }

    #[test]
    fn interned_texts_are_kept_once() {
        let a = intern("crm_create_order");
        let b = intern(&String::from("crm_create_order"));
        assert!(std::ptr::eq(a, b));
    }

    #[test]
    fn the_key_argument_is_added_and_required_when_the_policy_says_so() {
        let mut schema =
            serde_json::json!({"type": "object", "properties": {"a": {"type": "string"}}});
        add_key_argument(&mut schema, true);
        assert_eq!(schema["required"], serde_json::json!(["idempotency_key"]));
        assert_eq!(schema["properties"]["idempotency_key"]["maxLength"], 255);
    }
}
