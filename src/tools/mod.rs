//! What the server offers, declared: tools (the [`Tool`] trait and its [`ToolSpec`], the
//! rate [`Category`] a call charges, the scope it needs, its idempotency policy and its
//! schemas), resources and prompts, and the [`Registry`] that holds them all, built once at
//! start.
//!
//! The rest of the tools layer lives beside it: [`context`] (what a running tool sees, and
//! how it reaches the client), [`absent`] (an optional argument's `null` read as absent),
//! [`validate`] (arguments checked against the input schema before a tool runs), [`request_state`] (the sealed state of multi-round calls),
//! [`resources`] and [`prompts`] (their declarations), and the packs
//! [`invoicing`] and, with the `conformance-pack` feature, `conformance`.

pub mod absent;
pub mod backends;
#[cfg(feature = "conformance-pack")]
pub mod conformance;
pub mod context;
pub mod csv;
pub mod invoicing;
pub mod prompts;
pub mod request_state;
pub mod resources;
pub mod schema;
pub mod validate;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::catalog::McpError;
use crate::clock::Clock;
use crate::store::Store;

pub use context::{
    CLIENT_ANSWER_TIMEOUT, ClientLink, CommitHook, InputContext, InputRequired, LogLevel,
    ToolContext,
};
pub use prompts::{DataAccess, Prompt, PromptArgument, PromptReply, PromptSpec};
pub use resources::{ResourceBody, ResourceProvider, ResourceSpec};
pub use validate::RegisteredTool;

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

/// Everything declared about one tool. Its texts are borrowed literals for a built-in tool
/// (`"create_client".into()`, which costs nothing) and owned by the declaration for a
/// backend's tool, whose texts come from the backend and go when its tool does.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// `<verb>_<noun>` name.
    pub name: Cow<'static, str>,
    /// Human title.
    pub title: Cow<'static, str>,
    /// Description written for a model.
    pub description: Cow<'static, str>,
    /// Rate-limit category.
    pub category: Category,
    /// The scope a credential needs to see and call it.
    pub scope: Cow<'static, str>,
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

    /// Whether [`Tool::guardrails`] checks anything. A tool without guardrails has no rule
    /// a retry could trip, so the chain leaves its replay to the idempotency claim.
    fn has_guardrails(&self) -> bool {
        false
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

    /// The backend it forwards calls to (its configured name), for a tool of one of the
    /// company's own systems; `None` for a built-in tool.
    fn backend(&self) -> Option<&str> {
        None
    }

    /// Runs it with arguments already validated against the input schema.
    fn call(
        &self,
        ctx: &ToolContext<'_>,
        args: &Map<String, Value>,
    ) -> Result<ToolOutput, McpError>;
}

/// A tool's body: runs it with arguments already validated against the input schema.
pub type ToolFn = fn(&ToolContext<'_>, &Map<String, Value>) -> Result<ToolOutput, McpError>;
/// A tool's fiscal guardrails (see [`Tool::guardrails`]).
pub type GuardrailsFn = fn(&Store, Book, &Map<String, Value>, &Clock) -> Result<(), McpError>;

/// A tool made of its declaration and plain functions: the one [`Tool`] adapter of the
/// packs, whose tools are rows of a table.
pub struct FnTool {
    spec: ToolSpec,
    run: ToolFn,
    guardrails: Option<GuardrailsFn>,
    waits: bool,
    logs: bool,
}

impl FnTool {
    /// A tool declared by `spec` whose body is `run`; no guardrails, it neither waits nor
    /// logs.
    pub fn new(spec: ToolSpec, run: ToolFn) -> FnTool {
        FnTool {
            spec,
            run,
            guardrails: None,
            waits: false,
            logs: false,
        }
    }

    /// The same tool, checking `guardrails` before it runs.
    pub fn guarded_by(self, guardrails: Option<GuardrailsFn>) -> FnTool {
        FnTool { guardrails, ..self }
    }

    /// The same tool, declaring whether it waits ([`Tool::waits`]) and logs
    /// ([`Tool::logs`]).
    pub fn waiting_and_logging(self, waits: bool, logs: bool) -> FnTool {
        FnTool {
            waits,
            logs,
            ..self
        }
    }
}

impl Tool for FnTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn guardrails(
        &self,
        store: &Store,
        book: Book,
        args: &Map<String, Value>,
        clock: &Clock,
    ) -> Result<(), McpError> {
        self.guardrails
            .map_or(Ok(()), |guardrails| guardrails(store, book, args, clock))
    }

    fn has_guardrails(&self) -> bool {
        self.guardrails.is_some()
    }

    fn waits(&self) -> bool {
        self.waits
    }

    fn logs(&self) -> bool {
        self.logs
    }

    fn call(
        &self,
        ctx: &ToolContext<'_>,
        args: &Map<String, Value>,
    ) -> Result<ToolOutput, McpError> {
        (self.run)(ctx, args)
    }
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
    /// A backend's tool held until an operator decides on its definition (`pending` or
    /// `rejected`).
    Held(&'static str),
    /// Nothing by that name.
    Unknown,
}

/// Everything the server offers, built once at start.
pub struct Registry {
    tools: Vec<RegisteredTool>,
    /// Each tool's position in `tools`, by name: a call's lookup borrows the name it is
    /// given (no allocation); the key is shared with the declaration for a built-in tool
    /// and a copy for a backend's.
    by_name: HashMap<Cow<'static, str>, usize>,
    retired: &'static [RetiredTool],
    /// Backend tools held for review, by full name, with their state.
    held: HashMap<String, &'static str>,
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
        let mut registered: Vec<RegisteredTool> =
            tools.into_iter().map(RegisteredTool::new).collect();
        registered.sort_by(|a, b| a.spec().name.cmp(&b.spec().name));
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
            .map(|(i, t)| (t.spec().name.clone(), i))
            .collect();
        prompts.sort_by_key(|p| p.spec().name);
        let registry = Registry {
            tools: registered,
            by_name,
            retired,
            held: HashMap::new(),
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
            tool.compile_now().map_err(RegistryError)?;
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

    /// The same registry, with the backend tools `held` for review (full name, state).
    pub fn with_held(self, held: Vec<(String, &'static str)>) -> Registry {
        Registry {
            held: held.into_iter().collect(),
            ..self
        }
    }

    /// The backend tools held for review, by name.
    pub fn held(&self) -> &HashMap<String, &'static str> {
        &self.held
    }

    /// Resolves a `tools/call` name.
    pub fn resolve(&self, name: &str) -> Resolution<'_> {
        if let Some(&i) = self.by_name.get(name) {
            return Resolution::Tool(&self.tools[i]);
        }
        if let Some(state) = self.held.get(name) {
            return Resolution::Held(state);
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
        let name = tool.spec().name.clone();
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
    fn a_built_in_declaration_borrows_its_texts() {
        for tool in crate::tools::invoicing::tools() {
            let spec = tool.spec();
            for text in [&spec.name, &spec.title, &spec.description, &spec.scope] {
                assert!(matches!(text, Cow::Borrowed(_)), "{}: {text}", spec.name);
            }
        }
    }

    /// A built-in tool's text, which is a literal.
    fn literal(text: Cow<'static, str>) -> &'static str {
        match text {
            Cow::Borrowed(text) => text,
            Cow::Owned(_) => panic!("a built-in tool's texts are literals"),
        }
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
            scope: literal(read.scope.clone()),
            as_tool: literal(read.name.clone()),
        };
        assert!(build(fits).is_ok());
        let refused = [
            DataAccess {
                scope: "other:scope",
                ..fits
            },
            DataAccess {
                as_tool: literal(write.name.clone()),
                scope: literal(write.scope.clone()),
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
