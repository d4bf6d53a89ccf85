//! The registry of what the server offers: tools, resources, resource templates and
//! prompts, each declared with everything a client or a guard needs to know about it.
//!
//! Tools declare a category (which rate bucket they charge), the scope they need, their
//! idempotency policy and their schemas. Arguments are validated here, against the declared
//! input schema, before a tool runs; a failure is an `isError` result, never a JSON-RPC
//! error (SEP-1303: the model must be able to read it and correct itself).

#[cfg(feature = "conformance-pack")]
pub mod conformance;
pub mod invoicing;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value, json};

use crate::catalog::{ErrorKind, McpError};
use crate::clock::Clock;
use crate::config::Locale;
use crate::store::Store;

/// The rate-limit category of a tool: which per-minute bucket a call charges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    /// Reads state.
    Read,
    /// Creates or changes state that can be changed back.
    Write,
    /// Deletes or voids.
    Destructive,
    /// Sends something out.
    Send,
    /// Produces a large artefact (exports, reports).
    Generate,
}

impl Category {
    /// Every category, in bucket order.
    pub const ALL: [Category; 5] = [
        Category::Read,
        Category::Write,
        Category::Destructive,
        Category::Send,
        Category::Generate,
    ];

    /// The lowercase name used in config, buckets and docs.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Read => "read",
            Category::Write => "write",
            Category::Destructive => "destructive",
            Category::Send => "send",
            Category::Generate => "generate",
        }
    }
}

/// Which book of the business data a call reads and writes: the company's real books, or
/// the sandbox that `tg_test_` credentials work on. Same tables, separate rows: every
/// invoicing query is filtered by the caller's book, and numbering, uniqueness and the
/// fiscal rules hold within each book on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Book {
    /// The real books (`tg_live_` keys and OAuth access tokens).
    Live,
    /// The sandbox (`tg_test_` keys, accepted while the company is in test mode).
    Test,
}

impl Book {
    /// `"live"` or `"test"`: the value of the `book` column and of the result's
    /// `_meta["dev.tollgate/mode"]`.
    pub fn as_str(self) -> &'static str {
        match self {
            Book::Live => "live",
            Book::Test => "test",
        }
    }
}

/// Whether a tool takes an idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idempotency {
    /// The tool changes nothing; keys are ignored.
    NotApplicable,
    /// A key is accepted and honoured when given.
    Optional,
    /// The tool cannot be undone: a call without a key is refused.
    Required,
}

/// Everything declared about one tool.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// `<verb>_<noun>` name.
    pub name: &'static str,
    /// Human title.
    pub title: &'static str,
    /// Description written for a model.
    pub description: &'static str,
    /// Rate-limit category.
    pub category: Category,
    /// The scope a credential needs to see and call it.
    pub scope: &'static str,
    /// Idempotency policy.
    pub idempotency: Idempotency,
    /// JSON Schema of the arguments (`type: object`).
    pub input_schema: Value,
    /// JSON Schema of `structuredContent`, when the tool returns structured data.
    pub output_schema: Option<Value>,
}

impl ToolSpec {
    /// MCP tool annotations derived from the category.
    pub fn annotations(&self) -> Value {
        let (read_only, destructive, idempotent, open_world) = match self.category {
            Category::Read => (true, false, true, false),
            Category::Write => (false, false, false, false),
            Category::Destructive => (false, true, false, false),
            Category::Send => (false, false, false, true),
            Category::Generate => (true, false, true, false),
        };
        json!({
            "title": self.title,
            "readOnlyHint": read_only,
            "destructiveHint": destructive,
            "idempotentHint": idempotent,
            "openWorldHint": open_world,
        })
    }

    /// The entry of this tool in a `tools/list` result.
    pub fn to_list_entry(&self) -> Value {
        let mut entry = json!({
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": self.annotations(),
        });
        if let Some(schema) = &self.output_schema {
            entry["outputSchema"] = schema.clone();
        }
        entry
    }
}

/// How long a tool waits for the client to answer a sampling or elicitation request.
pub const CLIENT_ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Where a running tool sends progress and log notifications. Each transport implements
/// it for the stream of the request being served.
pub trait Notifier: Send + Sync {
    /// Sends one JSON-RPC notification related to the current request.
    fn notify(&self, message: Value);

    /// Whether what [`Notifier::notify`] is given reaches the client: false for a request
    /// that cannot stream, which drops it.
    fn delivers(&self) -> bool {
        true
    }
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
    /// The stream of the current request.
    pub notifier: &'a dyn Notifier,
    /// Set when the caller cancels the request.
    pub cancelled: &'a AtomicBool,
    /// Work that must commit in the same transaction as the tool's own writes (the
    /// idempotency record of the call), so a crash never applies a call twice.
    pub commit_hook: Option<&'a dyn CommitHook>,
    /// The connection state (handshake era), for requests to the client.
    pub session: &'a crate::protocol::revisions::Session,
    /// The sessions subscribed to resources, told when a tool changes one.
    pub subscribers: &'a crate::protocol::revisions::Subscribers,
    /// The protocol era of the call.
    pub era: crate::protocol::revisions::Era,
    /// What the client sent back for an earlier `input_required` result (2026-07-28).
    pub input: InputContext<'a>,
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
    pub state_key: &'a crate::protocol::request_state::StateKey,
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
}

impl ToolContext<'_> {
    /// Reports progress when the caller asked for it; a no-op otherwise.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = &self.progress_token else {
            return;
        };
        let mut params = json!({ "progressToken": token, "progress": progress });
        if let Some(total) = total {
            params["total"] = json!(total);
        }
        if let Some(message) = message {
            params["message"] = json!(message);
        }
        self.notifier.notify(crate::protocol::jsonrpc::notification(
            "notifications/progress",
            params,
        ));
    }

    /// Tells every session subscribed to the resource `uri` that it changed (a tool calls
    /// this after changing a resource its provider declares as changing).
    pub fn resource_changed(&self, uri: &str) {
        self.subscribers.changed(uri);
    }

    /// Sends a log message when the caller enabled logging at `level` or below.
    pub fn log(&self, level: LogLevel, data: Value) {
        if self.log_level.is_some_and(|min| level >= min) {
            let mut params = json!({ "level": level.as_str(), "logger": "tollgate" });
            params["data"] = data;
            self.notifier.notify(crate::protocol::jsonrpc::notification(
                "notifications/message",
                params,
            ));
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
        let missing = || McpError::missing_client_capability(json!({ capability: {} }));
        if self.era.is_modern() || !self.session.client_supports(capability) {
            return Err(missing());
        }
        let (id, answer) = self.session.expect_response();
        self.notifier.notify(crate::protocol::jsonrpc::request(
            id.clone(),
            method,
            params,
        ));
        let deadline = std::time::Instant::now() + CLIENT_ANSWER_TIMEOUT;
        let outcome = loop {
            if self.is_cancelled() {
                break Err(McpError::new(ErrorKind::Timeout).detail("reason", "cancelled"));
            }
            match answer.recv_timeout(std::time::Duration::from_millis(100)) {
                Ok(message) => break Ok(message),
                Err(_) if std::time::Instant::now() >= deadline => {
                    break Err(McpError::new(ErrorKind::Timeout).detail("waiting_for", method));
                }
                Err(_) => {}
            }
        };
        self.session.abandon(&id);
        let message = outcome?;
        match message.get("result") {
            Some(result) => Ok(result.clone()),
            None => Err(McpError::new(ErrorKind::AdapterError).detail(
                "original_error",
                message
                    .pointer("/error/code")
                    .cloned()
                    .unwrap_or(Value::Null),
            )),
        }
    }

    /// True once the caller has cancelled the request.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
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

/// A successful tool result.
#[derive(Debug, Clone, Default)]
pub struct ToolOutput {
    /// Content blocks (`text`, `image`, `audio`, `resource`, …).
    pub content: Vec<Value>,
    /// Structured result, matching the tool's output schema.
    pub structured: Option<Value>,
    /// Set instead of content when the call needs more input from the client.
    pub input_required: Option<InputRequired>,
}

impl ToolOutput {
    /// A result with one text block.
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput {
            content: vec![text_block(text.into())],
            structured: None,
            input_required: None,
        }
    }

    /// A structured result, with its JSON text as the content for older clients.
    pub fn structured(value: Value) -> Self {
        ToolOutput {
            content: vec![text_block(value.to_string())],
            structured: Some(value),
            input_required: None,
        }
    }

    /// An outcome asking the client for more input (2026-07-28 only).
    pub fn input_required(request: InputRequired) -> Self {
        ToolOutput {
            input_required: Some(request),
            ..ToolOutput::default()
        }
    }

    /// The `tools/call` result object.
    pub fn into_result(self) -> Value {
        if let Some(request) = self.input_required {
            return request.into_result();
        }
        let mut result = Map::with_capacity(3);
        result.insert("content".into(), Value::Array(self.content));
        result.insert("isError".into(), Value::Bool(false));
        if let Some(structured) = self.structured {
            result.insert("structuredContent".into(), structured);
        }
        Value::Object(result)
    }
}

/// A `text` content block holding `text` (moved in, not copied as `json!` would).
pub fn text_block(text: String) -> Value {
    let mut block = Map::with_capacity(2);
    block.insert("type".into(), "text".into());
    block.insert("text".into(), Value::String(text));
    Value::Object(block)
}

/// A tool implementation.
pub trait Tool: Send + Sync {
    /// Its declaration.
    fn spec(&self) -> &ToolSpec;
    /// Checks the fiscal guardrails on the arguments and the current state, before the
    /// tool runs; a violation is `-32008 mcp_guardrail_violation`. Arguments are not
    /// validated yet here: a rule that finds a field missing or mistyped lets it pass
    /// and leaves the report to schema validation. "Today" is the date of `clock`.
    fn guardrails(
        &self,
        _store: &Store,
        _book: Book,
        _args: &Map<String, Value>,
        _clock: &Clock,
    ) -> Result<(), McpError> {
        Ok(())
    }

    /// Whether a call may wait (pause between steps, or ask the client and wait for the
    /// answer) rather than only compute and use the database. Calls read together are run
    /// one after the other, except such a call, which gets a thread of its own.
    fn waits(&self) -> bool {
        false
    }

    /// Whether it may send log messages ([`ToolContext::log`]): the server announces the
    /// `logging` capability, and answers `logging/setLevel`, only when some tool does.
    fn logs(&self) -> bool {
        false
    }

    /// Runs it with arguments already validated against the input schema.
    fn call(
        &self,
        ctx: &ToolContext<'_>,
        args: &Map<String, Value>,
    ) -> Result<ToolOutput, McpError>;
}

/// A readable resource, listed by `resources/list`.
#[derive(Debug, Clone)]
pub struct ResourceSpec {
    /// The URI.
    pub uri: String,
    /// Short name.
    pub name: String,
    /// Human title.
    pub title: String,
    /// What it holds.
    pub description: String,
    /// MIME type of its contents.
    pub mime_type: String,
}

/// The contents of a resource as `resources/read` returns them.
#[derive(Debug, Clone)]
pub enum ResourceBody {
    /// UTF-8 text.
    Text(String),
    /// Binary, sent base64-encoded.
    Blob(Vec<u8>),
}

/// A source of resources: fixed documents or a URI template.
pub trait ResourceProvider: Send + Sync {
    /// The concrete resources it lists.
    fn list(&self) -> Vec<ResourceSpec>;
    /// URI templates it serves (`resources/templates/list` entries).
    fn templates(&self) -> Vec<Value> {
        Vec::new()
    }
    /// Reads `uri`; `None` when this provider does not serve it.
    fn read(&self, uri: &str) -> Option<(String, ResourceBody)>;
    /// The URIs of its resources that can change while the server runs (a tool changes
    /// them and calls [`ToolContext::resource_changed`]); the others never change.
    fn changing(&self) -> &[&'static str] {
        &[]
    }
}

/// The business data a prompt's messages, or the completions of one of its arguments, read:
/// the data the read tool `as_tool` serves, under its `scope`.
///
/// Such a `prompts/get` or `completion/complete` passes the guard chain as a call of
/// `as_tool` would: it charges the `read` rate buckets, needs `scope` and a plan that
/// includes `as_tool`, and leaves an audit row ([`crate::guards::Guards::read_data`]). The
/// registry refuses a declaration whose `as_tool` is not a registered read tool of that
/// scope, so the two cannot drift apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataAccess {
    /// The scope the data needs (the scope of `as_tool`).
    pub scope: &'static str,
    /// The read tool serving the same data; the plan check looks for this name.
    pub as_tool: &'static str,
}

/// A prompt argument declaration.
#[derive(Debug, Clone)]
pub struct PromptArgument {
    /// Name.
    pub name: &'static str,
    /// What to pass.
    pub description: &'static str,
    /// Whether `prompts/get` refuses a call without it.
    pub required: bool,
    /// The business data its completions read (`None`: they read none, e.g. a fixed list
    /// of choices, and need only authentication).
    pub completes_from: Option<DataAccess>,
}

/// Everything declared about one prompt.
#[derive(Debug, Clone)]
pub struct PromptSpec {
    /// Name.
    pub name: &'static str,
    /// Human title.
    pub title: &'static str,
    /// What the workflow does.
    pub description: &'static str,
    /// The business data its messages read (`None`: pure text, which needs only
    /// authentication and is listed to every credential).
    pub reads: Option<DataAccess>,
    /// Its arguments.
    pub arguments: Vec<PromptArgument>,
}

/// A prompt implementation.
pub trait Prompt: Send + Sync {
    /// Its declaration.
    fn spec(&self) -> &PromptSpec;
    /// The messages for these arguments (required ones are checked before this runs),
    /// with the business data of `book` where the text quotes it.
    fn messages(&self, book: Book, args: &Map<String, Value>) -> Vec<Value>;
    /// The prompt for these arguments; a prompt that needs more input from the client
    /// (2026-07-28) answers `Ok(PromptReply::InputRequired(..))`.
    fn get(
        &self,
        book: Book,
        args: &Map<String, Value>,
        _input: &InputContext<'_>,
    ) -> Result<PromptReply, McpError> {
        Ok(PromptReply::Messages(self.messages(book, args)))
    }

    /// Completion values for one argument, given its partial value, from `book`.
    fn complete(&self, _book: Book, _argument: &str, _value: &str) -> Vec<String> {
        Vec::new()
    }
}

/// What `prompts/get` answers.
pub enum PromptReply {
    /// The prompt's messages.
    Messages(Vec<Value>),
    /// A request for more input first.
    InputRequired(InputRequired),
}

/// A tool name that was retired, with what to call instead.
#[derive(Debug, Clone, Copy)]
pub struct RetiredTool {
    /// The old name.
    pub name: &'static str,
    /// The tool to call instead.
    pub replacement: &'static str,
    /// The version that retired it.
    pub since: &'static str,
}

/// How a tool name resolves.
pub enum Resolution<'a> {
    /// A live tool.
    Tool(&'a RegisteredTool),
    /// A retired name.
    Retired(&'a RetiredTool),
    /// Nothing by that name.
    Unknown,
}

/// A tool together with its input validator, compiled on the tool's first call.
pub struct RegisteredTool {
    /// The implementation.
    pub tool: Arc<dyn Tool>,
    validator: OnceLock<Result<jsonschema::Validator, String>>,
}

/// Compiles `tool`'s input schema.
fn compile(tool: &dyn Tool) -> Result<jsonschema::Validator, String> {
    jsonschema::options()
        .should_validate_formats(true)
        .build(&tool.spec().input_schema)
        .map_err(|e| format!("tool {}: {e}", tool.spec().name))
}

impl RegisteredTool {
    /// The declaration.
    pub fn spec(&self) -> &ToolSpec {
        self.tool.spec()
    }

    /// Checks `args` against the input schema; the first failure becomes an `isError`
    /// catalog error naming the argument at fault.
    pub fn validate(&self, args: &Value) -> Result<(), McpError> {
        let validator = match self.validator.get_or_init(|| compile(self.tool.as_ref())) {
            Ok(validator) => validator,
            Err(cause) => {
                tracing::error!(%cause, "a tool's input schema does not compile");
                return Err(McpError::internal());
            }
        };
        match validator.iter_errors(args).next() {
            None => Ok(()),
            Some(err) => Err(schema_error_to_catalog(&err)),
        }
    }
}

fn schema_error_to_catalog(err: &jsonschema::ValidationError<'_>) -> McpError {
    use jsonschema::error::ValidationErrorKind as K;
    let path = err.instance_path.as_str().trim_start_matches('/');
    let param = |child: &str| match (path.is_empty(), child.is_empty()) {
        (true, _) => child.to_owned(),
        (false, true) => path.replace('/', "."),
        (false, false) => format!("{}.{child}", path.replace('/', ".")),
    };
    match &err.kind {
        K::Required { property } => McpError::new(ErrorKind::MissingRequiredField)
            .param(param(property.as_str().unwrap_or_default())),
        K::AdditionalProperties { unexpected } => McpError::validation(&param(
            unexpected.first().map(String::as_str).unwrap_or_default(),
        ))
        .detail("reason", "unexpected_argument"),
        K::Format { .. } | K::Pattern { .. } => {
            McpError::new(ErrorKind::InvalidFormat).param(param(""))
        }
        _ => McpError::validation(&param("")).detail("reason", err.kind_name()),
    }
}

trait KindName {
    fn kind_name(&self) -> String;
}

impl KindName for jsonschema::ValidationError<'_> {
    /// A short, safe description of the failed keyword (never the instance value).
    fn kind_name(&self) -> String {
        self.schema_path
            .as_str()
            .rsplit('/')
            .next()
            .unwrap_or("schema")
            .to_owned()
    }
}

/// Everything the server offers, built once at start.
pub struct Registry {
    tools: Vec<RegisteredTool>,
    by_name: HashMap<&'static str, usize>,
    retired: &'static [RetiredTool],
    resources: Vec<Arc<dyn ResourceProvider>>,
    prompts: Vec<Arc<dyn Prompt>>,
}

/// A registry that could not be built (a tool's schema does not compile).
#[derive(Debug)]
pub struct RegistryError(pub String);

impl std::fmt::Display for RegistryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RegistryError {}

impl Registry {
    /// Builds the registry; tools and prompts are kept sorted by name so listings are stable.
    pub fn new(
        tools: Vec<Arc<dyn Tool>>,
        retired: &'static [RetiredTool],
        resources: Vec<Arc<dyn ResourceProvider>>,
        mut prompts: Vec<Arc<dyn Prompt>>,
    ) -> Result<Registry, RegistryError> {
        let mut registered: Vec<RegisteredTool> = tools
            .into_iter()
            .map(|tool| RegisteredTool {
                tool,
                validator: OnceLock::new(),
            })
            .collect();
        registered.sort_by_key(|t| t.spec().name);
        if let Some(dup) = registered
            .windows(2)
            .find(|w| w[0].spec().name == w[1].spec().name)
        {
            return Err(RegistryError(format!(
                "tool {} is registered twice",
                dup[0].spec().name
            )));
        }
        // Validators are compiled on a tool's first call, not here: compiling all of them
        // takes longer than the rest of start-up together, and a validator costs memory
        // (megabytes for the first schema of a JSON Schema dialect) that tools nobody
        // calls should not.
        let by_name = registered
            .iter()
            .enumerate()
            .map(|(i, t)| (t.spec().name, i))
            .collect();
        prompts.sort_by_key(|p| p.spec().name);
        let registry = Registry {
            tools: registered,
            by_name,
            retired,
            resources,
            prompts,
        };
        registry.check_data_access()?;
        Ok(registry)
    }

    /// Refuses a prompt whose declared data access does not name a registered read tool
    /// of the declared scope.
    fn check_data_access(&self) -> Result<(), RegistryError> {
        for prompt in &self.prompts {
            let spec = prompt.spec();
            let declared = spec.reads.iter().map(|a| (spec.name, a)).chain(
                spec.arguments
                    .iter()
                    .filter_map(|arg| arg.completes_from.as_ref().map(|a| (arg.name, a))),
            );
            for (what, access) in declared {
                if self.reader(access).is_none() {
                    return Err(RegistryError(format!(
                        "prompt {}: {what} reads as {}, which is not a registered read tool \
                         of scope {}",
                        spec.name, access.as_tool, access.scope
                    )));
                }
            }
        }
        Ok(())
    }

    /// The read tool whose guards a read of `access` passes: `as_tool`, when it is a
    /// registered tool of category `read` and of the declared scope.
    pub fn reader(&self, access: &DataAccess) -> Option<&RegisteredTool> {
        let &i = self.by_name.get(access.as_tool)?;
        let tool = &self.tools[i];
        (tool.spec().category == Category::Read && tool.spec().scope == access.scope)
            .then_some(tool)
    }

    /// Compiles every tool's input validator now; the first schema that does not compile
    /// is the error. (A server compiles each on the tool's first call.)
    pub fn compile_all(&self) -> Result<(), RegistryError> {
        for tool in &self.tools {
            if let Err(cause) = tool.validator.get_or_init(|| compile(tool.tool.as_ref())) {
                return Err(RegistryError(cause.clone()));
            }
        }
        Ok(())
    }

    /// Every tool, sorted by name.
    pub fn tools(&self) -> &[RegisteredTool] {
        &self.tools
    }

    /// Whether some tool may send log messages (see [`Tool::logs`]).
    pub fn has_logging_tools(&self) -> bool {
        self.tools.iter().any(|t| t.tool.logs())
    }

    /// Resolves a `tools/call` name.
    pub fn resolve(&self, name: &str) -> Resolution<'_> {
        if let Some(&i) = self.by_name.get(name) {
            return Resolution::Tool(&self.tools[i]);
        }
        match self.retired.iter().find(|r| r.name == name) {
            Some(retired) => Resolution::Retired(retired),
            None => Resolution::Unknown,
        }
    }

    /// Every concrete resource, sorted by URI.
    pub fn resources(&self) -> Vec<ResourceSpec> {
        let mut all: Vec<ResourceSpec> = self.resources.iter().flat_map(|p| p.list()).collect();
        all.sort_by(|a, b| a.uri.cmp(&b.uri));
        all
    }

    /// Every resource template.
    pub fn resource_templates(&self) -> Vec<Value> {
        self.resources.iter().flat_map(|p| p.templates()).collect()
    }

    /// Reads a resource by URI.
    pub fn read_resource(&self, uri: &str) -> Option<(String, ResourceBody)> {
        self.resources.iter().find_map(|p| p.read(uri))
    }

    /// Whether the resource `uri` can change while the server runs.
    pub fn resource_changes(&self, uri: &str) -> bool {
        self.resources.iter().any(|p| p.changing().contains(&uri))
    }

    /// Whether any resource can change while the server runs: only then is there anything
    /// to subscribe to (`resources/subscribe` and the `resources.subscribe` capability).
    pub fn has_changing_resources(&self) -> bool {
        self.resources.iter().any(|p| !p.changing().is_empty())
    }

    /// Every prompt, sorted by name.
    pub fn prompts(&self) -> &[Arc<dyn Prompt>] {
        &self.prompts
    }

    /// Finds a prompt by name.
    pub fn prompt(&self, name: &str) -> Option<&Arc<dyn Prompt>> {
        self.prompts.iter().find(|p| p.spec().name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_registered_twice_is_refused_by_name() {
        let tool = Arc::clone(&crate::tools::invoicing::tools()[0]);
        let name = tool.spec().name;
        let err = Registry::new(vec![Arc::clone(&tool), tool], &[], Vec::new(), Vec::new())
            .err()
            .expect("a duplicate name is refused");
        assert_eq!(err.to_string(), format!("tool {name} is registered twice"));
    }

    /// A prompt declaring a read through `access`.
    struct Reads(PromptSpec);

    impl Prompt for Reads {
        fn spec(&self) -> &PromptSpec {
            &self.0
        }
        fn messages(&self, _: Book, _: &Map<String, Value>) -> Vec<Value> {
            Vec::new()
        }
    }

    fn reading(access: DataAccess) -> Arc<dyn Prompt> {
        Arc::new(Reads(PromptSpec {
            name: "p",
            title: "P",
            description: "reads",
            reads: Some(access),
            arguments: Vec::new(),
        }))
    }

    #[test]
    fn a_prompt_must_read_through_a_registered_read_tool_of_its_scope() {
        let tools = crate::tools::invoicing::tools();
        let read = tools
            .iter()
            .find(|t| t.spec().category == Category::Read)
            .expect("a read fixture")
            .spec()
            .clone();
        let write = tools
            .iter()
            .find(|t| t.spec().category != Category::Read)
            .expect("a fixture that is not a read")
            .spec()
            .clone();
        let build = |access| Registry::new(tools.clone(), &[], Vec::new(), vec![reading(access)]);
        let fits = DataAccess {
            scope: read.scope,
            as_tool: read.name,
        };
        assert!(build(fits).is_ok());
        let refused = [
            DataAccess {
                scope: "other:scope",
                ..fits
            },
            DataAccess {
                as_tool: write.name,
                scope: write.scope,
            },
            DataAccess {
                as_tool: "no_such_tool",
                ..fits
            },
        ];
        for access in refused {
            let err = build(access).err().expect("refused");
            assert!(
                err.to_string()
                    .starts_with(&format!("prompt p: p reads as {}", access.as_tool)),
                "{err}"
            );
        }
    }
}
