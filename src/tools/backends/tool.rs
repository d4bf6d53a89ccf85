//! The tool a backend operation becomes: its name (`<backend>_<operation>`), and the
//! operator's overrides applied to it — enabled or not, category, scope, idempotency policy
//! (an `idempotency_key` argument added to its schema when it takes one), title and
//! description — plus the scopes a backend's tools can need, known from its configuration
//! alone. The declaration owns its texts: when a backend lists its tools again, the old
//! tools and their texts go once nothing holds them. Every call of the tool passes its
//! backend's admission (`admission`) before it is forwarded.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::admission::Admission;
use super::{Backend, BackendCounters, Call, Entry, Operation};
use crate::catalog::McpError;
use crate::config::{BackendConfig, IdempotencyPolicy, ToolOverride};
use crate::telemetry::ClientCall;
use crate::tools::{Category, Idempotency, Tool, ToolContext, ToolOutput, ToolSpec, schema};

/// The full tool name of `operation` on `backend`.
pub fn tool_name(backend: &str, operation: &str) -> String {
    format!("{backend}_{operation}")
}

fn override_of<'c>(config: &'c BackendConfig, op: &Operation) -> Option<&'c ToolOverride> {
    config.tools.get(&tool_name(&config.name, &op.name))
}

pub(super) fn enabled(config: &BackendConfig, op: &Operation) -> bool {
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
/// connection): `<backend>:<category>` for each category an operation can have, an
/// upstream's `read_scope`, and for each override that keeps its tool enabled, the scope it
/// sets or the category scope it moves the tool to. Each once, the category scopes first in category order, then the
/// others by name.
pub fn configured_scopes(config: &BackendConfig) -> Vec<String> {
    let mut scopes: BTreeSet<String> = OPERATION_CATEGORIES
        .iter()
        .map(|c| tool_scope(config, *c, &ToolOverride::default()))
        .collect();
    // The scope reading an upstream's resources or prompts needs, when the operator named
    // one of its own.
    if let crate::config::BackendKind::Mcp(mcp) = &config.kind
        && (mcp.expose.resources || mcp.expose.prompts)
        && let Some(scope) = &mcp.read_scope
    {
        scopes.insert(scope.clone());
    }
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
    admission: Arc<Admission>,
}

impl BackendTool {
    /// The tool `op` of `entry` becomes, or `None` when an override disables it.
    pub(super) fn new(entry: &Entry, op: Operation) -> Option<BackendTool> {
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
        let idempotency = idempotency_of(over.idempotency, category);
        let scope = tool_scope(config, category, &over);
        let title = over
            .title
            .or(op.title)
            .unwrap_or_else(|| op.name.replace('_', " "));
        let mut description = over.description.unwrap_or(op.description);
        let mut input_schema = op.input_schema;
        if idempotency != Idempotency::NotApplicable {
            add_key_argument(&mut input_schema, idempotency == Idempotency::Required);
            describe_key(&mut description);
        }
        schema::optional_admits_null(&mut input_schema);
        Some(BackendTool {
            spec: ToolSpec {
                name: tool_name(&config.name, &op.name).into(),
                title: title.into(),
                description: description.into(),
                category,
                scope: scope.into(),
                idempotency,
                input_schema,
                output_schema: op.output_schema,
            },
            operation: op.name,
            backend: Arc::clone(&entry.backend),
            timeout: config.timeout,
            counters: Arc::clone(&entry.counters),
            admission: Arc::clone(&entry.admission),
        })
    }
}

/// The idempotency policy of a tool of `category`: the override's, or none for a read and
/// an optional key for the rest.
fn idempotency_of(policy: Option<IdempotencyPolicy>, category: Category) -> Idempotency {
    match policy {
        Some(IdempotencyPolicy::Required) => Idempotency::Required,
        Some(IdempotencyPolicy::Optional) => Idempotency::Optional,
        Some(IdempotencyPolicy::None) => Idempotency::NotApplicable,
        None if category == Category::Read => Idempotency::NotApplicable,
        None => Idempotency::Optional,
    }
}

/// Ends a description with the sentence on reusing an idempotency key.
fn describe_key(description: &mut String) {
    if !description.is_empty() && !description.ends_with(['.', '\n']) {
        description.push('.');
    }
    if !description.is_empty() {
        description.push(' ');
    }
    description.push_str(schema::reuse_key!());
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
        // The CLIENT span of the call (with traces exported), under the request's.
        let traced = ClientCall::start(|| self.backend.describe_call(&self.operation), ctx.meta);
        let call = Call {
            ctx,
            idempotency_key: ctx.idempotency_key(),
            timeout: self.timeout,
            trace: traced.fields(),
        };
        let started = Instant::now();
        // Every forwarded call of either kind passes the backend's admission; a refused
        // one never reaches the backend and is not counted as forwarded. Waiting for a
        // place and for the backend's answer holds none of the transport's workers.
        let outcome = ctx.off_worker(|| {
            self.admission.run(&|| ctx.is_cancelled(), || {
                self.counters.calls.fetch_add(1, Ordering::Relaxed);
                let outcome = self.backend.call(&self.operation, args, &call);
                if outcome.is_err() {
                    self.counters.failures.fetch_add(1, Ordering::Relaxed);
                }
                outcome
            })
        });
        self.counters.durations.observe(started.elapsed());
        traced.finish(outcome.as_ref().err().map(|e| e.kind().spec().code));
        outcome
    }
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

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::sync::{Mutex, Weak};

    use serde_json::json;

    use super::super::{Backends, Health};
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
    use crate::config::BackendKind;

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
                pinning: crate::config::Pinning::FirstUse,
                expose: crate::config::Exposed::ALL,
                read_scope: None,
            }),
            timeout: Duration::from_secs(1),
            limits: crate::config::BackendLimits::default(),
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
        let mut docs = crm(&[]);
        if let BackendKind::Mcp(mcp) = &mut docs.kind {
            mcp.read_scope = Some("docs:read".to_owned());
        }
        assert_eq!(
            configured_scopes(&docs),
            ["crm:read", "crm:write", "crm:destructive", "docs:read"]
        );
        if let BackendKind::Mcp(mcp) = &mut docs.kind {
            mcp.expose = crate::config::Exposed::of(&["tools".to_owned()]).expect("tools");
        }
        assert_eq!(
            configured_scopes(&docs),
            ["crm:read", "crm:write", "crm:destructive"],
            "a read scope nothing exposed needs is no scope"
        );
    }

    #[test]
    fn the_key_argument_is_added_and_required_when_the_policy_says_so() {
        let mut schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        add_key_argument(&mut schema, true);
        assert_eq!(schema["required"], json!(["idempotency_key"]));
        assert_eq!(schema["properties"]["idempotency_key"]["maxLength"], 255);
    }

    /// A backend whose list of operations the test changes, as an upstream's changes.
    struct Relisting {
        operations: Mutex<Vec<Operation>>,
    }

    impl Backend for Relisting {
        fn name(&self) -> &str {
            "crm"
        }
        fn kind(&self) -> &'static str {
            "mcp"
        }
        fn operations(&self) -> Vec<Operation> {
            self.operations.lock().expect("operations").clone()
        }
        fn health(&self) -> Health {
            Health::Ready
        }
        fn call(
            &self,
            _: &str,
            _: &Map<String, Value>,
            _: &Call<'_>,
        ) -> Result<ToolOutput, McpError> {
            Err(McpError::internal())
        }
    }

    fn find_order(description: &str) -> Operation {
        Operation {
            name: "find_order".to_owned(),
            title: None,
            description: description.to_owned(),
            category: Category::Read,
            input_schema: json!({"type": "object"}),
            output_schema: None,
        }
    }

    #[test]
    fn a_relisted_tool_frees_the_declaration_and_texts_it_replaces() {
        let upstream = Arc::new(Relisting {
            operations: Mutex::new(vec![find_order("Finds an order.")]),
        });
        let backends = Backends {
            runtime: None,
            entries: vec![Entry {
                config: crm(&[]),
                backend: Arc::clone(&upstream) as Arc<dyn Backend>,
                counters: Arc::default(),
                admission: Arc::new(Admission::new(
                    "crm",
                    crate::config::BackendLimits::default(),
                    crate::clock::Clock::System,
                )),
            }],
            listener: Arc::new(Mutex::new(None)),
        };
        let listed = backends.tools();
        let spec = listed[0].spec();
        for text in [&spec.name, &spec.title, &spec.description, &spec.scope] {
            assert!(matches!(text, Cow::Owned(_)), "{text} is the tool's own");
        }
        let replaced: Weak<dyn Tool> = Arc::downgrade(&listed[0]);
        *upstream.operations.lock().expect("operations") =
            vec![find_order("Finds one order by its number.")];
        let relisted = backends.tools();
        assert_eq!(
            relisted[0].spec().description,
            "Finds one order by its number."
        );
        drop(listed);
        assert!(
            replaced.upgrade().is_none(),
            "nothing keeps the old declaration, nor so its texts"
        );
    }
}
