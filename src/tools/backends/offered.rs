//! What the backends offer besides tools: an upstream MCP server's resources, resource
//! templates and prompts, under the backend's prefix and behind the same guards.
//!
//! A resource's URI becomes `upstream://<backend>/<its own URI>` (a template's likewise), so
//! it cannot collide with tollgate's own `tollgate://` resources or another backend's, and
//! the backend is known from the URI alone; a prompt's name becomes `<backend>_<name>`
//! like a tool's. A read of either passes the guard chain as a read of its backend's
//! *subject* ([`Offered::subject`]): named `<backend>.resources` or `<backend>.prompts`
//! (what a plan excludes to leave them out), of category `read` (the `read` charge), with
//! the backend's `read_scope` (default `<backend>:read`). Every read forwarded passes the
//! backend's admission and counts in its `/metrics` counters, like a tool call.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde_json::{Map, Value};

use super::{Backends, Entry, tool_name};
use crate::catalog::McpError;
use crate::config::{BackendKind, Exposed};
use crate::tools::{Category, Idempotency, ToolSpec};

/// The scheme of the gate's URIs of upstream resources.
pub const UPSTREAM_SCHEME: &str = "upstream";

/// The gate's URI of the resource `uri` of `backend`.
pub fn gate_uri(backend: &str, uri: &str) -> String {
    format!("{UPSTREAM_SCHEME}://{backend}/{uri}")
}

/// The backend and its own URI of one of the gate's URIs of upstream resources.
pub fn split_gate_uri(uri: &str) -> Option<(&str, &str)> {
    let rest = uri.strip_prefix(UPSTREAM_SCHEME)?.strip_prefix("://")?;
    rest.split_once('/')
        .filter(|(backend, own)| !backend.is_empty() && !own.is_empty())
}

/// One entry a backend offers as the gate offers it, with the subject whose guards a read
/// of it passes.
#[derive(Debug, Clone)]
pub struct Offered {
    /// The backend's resources or prompts as a subject of the guards.
    pub subject: ToolSpec,
    /// The entry, with the gate's URI or name.
    pub entry: Value,
}

/// Which of an upstream's offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Resources,
    Prompts,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Resources => "resources",
            Kind::Prompts => "prompts",
        }
    }
}

/// What the backend of `entry` exposes.
fn exposed(entry: &Entry) -> Exposed {
    match &entry.config.kind {
        BackendKind::Mcp(mcp) => mcp.expose,
        BackendKind::OpenApi(_) => Exposed {
            tools: true,
            resources: false,
            prompts: false,
        },
    }
}

/// The subject a read of `entry`'s resources or prompts passes the guards as.
fn subject(entry: &Entry, kind: Kind) -> ToolSpec {
    let backend = &entry.config.name;
    let scope = match &entry.config.kind {
        BackendKind::Mcp(mcp) => mcp.read_scope.clone(),
        BackendKind::OpenApi(_) => None,
    }
    .unwrap_or_else(|| format!("{backend}:{}", Category::Read.as_str()));
    ToolSpec {
        name: Cow::Owned(format!("{backend}.{}", kind.word())),
        title: Cow::Owned(format!("{backend} {}", kind.word())),
        description: Cow::Borrowed(""),
        category: Category::Read,
        scope: Cow::Owned(scope),
        idempotency: Idempotency::NotApplicable,
        input_schema: Value::Object(Map::new()),
        output_schema: None,
    }
}

/// `entry` with its `key` (a URI or URI template) made the gate's.
fn with_gate_uri(backend: &str, mut entry: Value, key: &str) -> Value {
    if let Some(own) = entry.get(key).and_then(Value::as_str) {
        let uri = gate_uri(backend, own);
        entry[key] = Value::String(uri);
    }
    entry
}

impl Backends {
    fn offering(&self, kind: Kind) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(move |e| {
            let exposed = exposed(e);
            match kind {
                Kind::Resources => exposed.resources,
                Kind::Prompts => exposed.prompts,
            }
        })
    }

    fn upstream(&self, backend: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.config.name == backend)
    }

    /// Whether some backend may offer resources (an upstream MCP server exposing them):
    /// then the server announces `resources.listChanged` and `resources.subscribe`.
    pub fn offers_resources(&self) -> bool {
        self.offering(Kind::Resources)
            .any(|e| e.backend.kind() == "mcp")
    }

    /// Whether some backend may offer prompts: then the server announces
    /// `prompts.listChanged`.
    pub fn offers_prompts(&self) -> bool {
        self.offering(Kind::Prompts)
            .any(|e| e.backend.kind() == "mcp")
    }

    /// The subjects of the backends that may offer resources (`prompts` false) or prompts:
    /// who may see at least one of them may be told their lists changed.
    pub fn offer_subjects(&self, prompts: bool) -> Vec<ToolSpec> {
        let kind = if prompts {
            Kind::Prompts
        } else {
            Kind::Resources
        };
        self.offering(kind).map(|e| subject(e, kind)).collect()
    }

    /// Every backend's resources, by the gate's URIs.
    pub fn resources(&self) -> Vec<Offered> {
        self.listed(Kind::Resources, |e| e.backend.resources(), "uri")
    }

    /// Every backend's resource templates, by the gate's URIs.
    pub fn resource_templates(&self) -> Vec<Offered> {
        self.listed(
            Kind::Resources,
            |e| e.backend.resource_templates(),
            "uriTemplate",
        )
    }

    fn listed(&self, kind: Kind, of: impl Fn(&Entry) -> Vec<Value>, key: &str) -> Vec<Offered> {
        self.offering(kind)
            .flat_map(|e| {
                let subject = subject(e, kind);
                of(e).into_iter().map(move |entry| Offered {
                    subject: subject.clone(),
                    entry: with_gate_uri(&e.config.name, entry, key),
                })
            })
            .collect()
    }

    /// Every backend's prompts offered now, by their full names.
    pub fn prompts(&self) -> Vec<Offered> {
        self.offering(Kind::Prompts)
            .flat_map(|e| {
                let subject = subject(e, Kind::Prompts);
                e.backend.prompts().into_iter().map(move |(op, mut entry)| {
                    entry["name"] = Value::String(tool_name(&e.config.name, &op));
                    Offered {
                        subject: subject.clone(),
                        entry,
                    }
                })
            })
            .collect()
    }

    /// The subject of the resource the gate's `uri` names, when a backend exposing
    /// resources has that prefix.
    pub fn resource_subject(&self, uri: &str) -> Option<ToolSpec> {
        let (backend, _) = split_gate_uri(uri)?;
        self.offering(Kind::Resources)
            .find(|e| e.config.name == backend)
            .map(|e| subject(e, Kind::Resources))
    }

    /// The prompt `name` of a backend exposing prompts: its subject, the backend's name for
    /// it, and whether it is held for review (`pending` or `rejected`).
    pub fn prompt(&self, name: &str) -> Option<(ToolSpec, String, Option<&'static str>)> {
        self.offering(Kind::Prompts).find_map(|e| {
            let op = name
                .strip_prefix(e.config.name.as_str())?
                .strip_prefix('_')?;
            let held = e
                .backend
                .held_prompts()
                .into_iter()
                .find(|(held, _)| held == op)
                .map(|(_, state)| state);
            let offered = e.backend.prompts().iter().any(|(o, _)| o == op);
            (offered || held.is_some()).then(|| (subject(e, Kind::Prompts), op.to_owned(), held))
        })
    }

    /// Reads the resource the gate's `uri` names from its backend (through the backend's
    /// admission): the `resources/read` result, its contents by the gate's URIs.
    pub fn read_resource(&self, uri: &str) -> Result<Value, McpError> {
        let not_found = || McpError::resource_not_found(uri).with("uri", uri);
        let (backend, own) = split_gate_uri(uri).ok_or_else(not_found)?;
        let entry = self.upstream(backend).ok_or_else(not_found)?;
        let mut result = forwarded(entry, || {
            entry.backend.read_resource(own, entry.config.timeout)
        })
        .map_err(|e| gate_not_found(e, not_found))?;
        if let Some(contents) = result.get_mut("contents").and_then(Value::as_array_mut) {
            for content in contents {
                *content = with_gate_uri(backend, std::mem::take(content), "uri");
            }
        }
        Ok(result)
    }

    /// Gets the prompt `operation` of `backend` with `args` (through the backend's
    /// admission): the `prompts/get` result.
    pub fn get_prompt(
        &self,
        backend: &str,
        operation: &str,
        args: &Map<String, Value>,
    ) -> Result<Value, McpError> {
        let entry = self.upstream(backend).ok_or_else(McpError::internal)?;
        forwarded(entry, || {
            entry
                .backend
                .get_prompt(operation, args, entry.config.timeout)
        })
    }

    /// The values the prompt `operation` of `backend` completes `argument` (partly
    /// `value`) with (through the backend's admission).
    pub fn complete_prompt(
        &self,
        backend: &str,
        operation: &str,
        argument: (&str, &str),
    ) -> Result<Vec<String>, McpError> {
        let entry = self.upstream(backend).ok_or_else(McpError::internal)?;
        forwarded(entry, || {
            entry
                .backend
                .complete_prompt(operation, argument, entry.config.timeout)
        })
    }

    /// Follows (`on`) or stops following the updates of the resource the gate's `uri`
    /// names; false when its backend sends none.
    pub fn subscribe(&self, uri: &str, on: bool) -> Result<bool, McpError> {
        let not_found = || McpError::resource_not_found(uri).with("uri", uri);
        let (backend, own) = split_gate_uri(uri).ok_or_else(not_found)?;
        let entry = self.upstream(backend).ok_or_else(not_found)?;
        entry
            .backend
            .subscribe(own, on, entry.config.timeout)
            .map_err(|e| gate_not_found(e, not_found))
    }
}

/// `error`, with a resource the backend does not have named by the gate's URI.
fn gate_not_found(error: McpError, not_found: impl Fn() -> McpError) -> McpError {
    match error.kind() {
        crate::catalog::ErrorKind::ResourceNotFound => not_found(),
        _ => error,
    }
}

/// Runs one request to `entry`'s backend through its admission, counted in its counters.
fn forwarded<T>(
    entry: &Entry,
    request: impl FnOnce() -> Result<T, McpError>,
) -> Result<T, McpError> {
    let started = Instant::now();
    let outcome = entry.admission.run(&|| false, || {
        entry.counters.calls.fetch_add(1, Ordering::Relaxed);
        let outcome = request();
        if outcome.is_err() {
            entry.counters.failures.fetch_add(1, Ordering::Relaxed);
        }
        outcome
    });
    entry.counters.durations.observe(started.elapsed());
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_uri_names_its_backend_and_keeps_the_upstream_uri_whole() {
        let uri = gate_uri("ev", "demo://resource/static/document/a b.md?x=1#y");
        assert_eq!(
            uri,
            "upstream://ev/demo://resource/static/document/a b.md?x=1#y"
        );
        assert_eq!(
            split_gate_uri(&uri),
            Some(("ev", "demo://resource/static/document/a b.md?x=1#y"))
        );
        for foreign in [
            "tollgate://guardrails",
            "upstream://",
            "upstream://ev",
            "upstream://ev/",
            "upstream:///x",
            "upstreams://ev/x",
        ] {
            assert_eq!(split_gate_uri(foreign), None, "{foreign}");
        }
    }
}
