//! `kind = "mcp"`: an MCP server the company already runs, put behind the gate. tollgate
//! is its client, through the official Rust MCP SDK (`rmcp`), over stdio (a child process
//! tollgate starts and restarts) or Streamable HTTP (a session it opens and reopens), in
//! the handshake era (`initialize`).
//!
//! Each tool the upstream lists becomes an [`Operation`] named after the upstream's own
//! name made safe for a tool name (`get-sum` → `get_sum`; the map back to the upstream's
//! name is kept); its category comes from its annotations (`readOnlyHint` → read,
//! `destructiveHint` → destructive, else write). The list is read again when the upstream
//! sends `notifications/tools/list_changed` and on every reconnect.
//!
//! Here: [`open`], the backend (`Upstream`) and the state its supervisor and its calls
//! share; [`session`] connects and supervises, [`call`] forwards one call and maps its
//! outcome into the catalog.

mod call;
mod session;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use rmcp::model::{Tool as UpstreamTool, ToolAnnotations};
use serde_json::{Map, Value};

use crate::catalog::McpError;
use crate::config::{BackendConfig, BackendKind};
use crate::tools::backends::{
    Backend, BackendEnv, BackendProblem, Call, Health, Operation, snake_case,
};
use crate::tools::{Category, ToolOutput};

use session::{Link, Target};

/// The longest `open` waits for the first connection: a little longer than one attempt may
/// take, so that the first attempt's outcome is nearly always known (a failure is reported
/// at start); an upstream still starting after that goes on connecting in the background.
/// The backend's per-call deadline does not shorten it: starting a server can take longer
/// than answering a call.
const FIRST_CONNECT_WAIT: Duration = Duration::from_secs(16);

/// The longest `shutdown` waits for the upstream to stop before killing what is left of it.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Starts or connects to the upstream MCP server `config` describes and lists its tools.
/// A first connection that fails is a problem naming what happened; one still pending
/// after a bounded wait goes on in the background (the backend is `connecting` meanwhile).
pub fn open(config: &BackendConfig, env: &BackendEnv) -> Result<Arc<dyn Backend>, BackendProblem> {
    let problem = |message: String| BackendProblem {
        backend: config.name.clone(),
        message,
    };
    let BackendKind::Mcp(transport) = &config.kind else {
        return Err(problem("this backend is not of kind \"mcp\"".into()));
    };
    let target = Target::from_config(transport).map_err(problem)?;
    let shared = Arc::new(Shared::new(&config.name, Arc::clone(&env.changed)));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    env.runtime.spawn(session::supervise(
        Arc::clone(&shared),
        target,
        stopped,
        (first_tx, !env.strict),
        done_tx,
    ));
    let upstream = Upstream {
        name: config.name.clone(),
        shared,
        runtime: env.runtime.clone(),
        stop,
        done: Mutex::new(Some(done_rx)),
        stopping: AtomicBool::new(false),
    };
    let wait = FIRST_CONNECT_WAIT;
    match first_rx.recv_timeout(wait) {
        Ok(Ok(())) => Ok(Arc::new(upstream)),
        Ok(Err(message)) if env.strict => {
            upstream.shutdown();
            Err(problem(message))
        }
        Ok(Err(message)) => {
            // The rest is served meanwhile; the upstream's tools appear once it answers.
            tracing::warn!(
                backend = %config.name,
                reason = %message,
                "upstream not reachable at start; connecting in the background"
            );
            Ok(Arc::new(upstream))
        }
        Err(RecvTimeoutError::Timeout) => {
            tracing::warn!(
                backend = %config.name,
                wait_ms = wait.as_millis() as u64,
                "upstream not connected yet; connecting in the background"
            );
            Ok(Arc::new(upstream))
        }
        Err(RecvTimeoutError::Disconnected) => {
            upstream.shutdown();
            Err(problem("the upstream could not be started".into()))
        }
    }
}

/// One upstream MCP server.
struct Upstream {
    name: String,
    shared: Arc<Shared>,
    runtime: tokio::runtime::Handle,
    stop: tokio::sync::watch::Sender<bool>,
    /// Disconnects when the supervisor has finished (its sender is dropped).
    done: Mutex<Option<Receiver<()>>>,
    stopping: AtomicBool,
}

impl Backend for Upstream {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> &'static str {
        "mcp"
    }

    fn operations(&self) -> Vec<Operation> {
        self.shared.listing().operations.clone()
    }

    fn health(&self) -> Health {
        self.shared.state().health.clone()
    }

    fn call(
        &self,
        operation: &str,
        args: &Map<String, Value>,
        call: &Call<'_>,
    ) -> Result<ToolOutput, McpError> {
        call::forward(&self.shared, &self.runtime, operation, args, call)
    }

    /// Stops the supervisor, which closes the session (for stdio: closes the child's
    /// stdin, then SIGTERM, then SIGKILL, and reaps it), then kills whatever is left of
    /// the child's process group.
    fn shutdown(&self) {
        if self.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        let _ = self.stop.send(true);
        let done = self.done.lock().ok().and_then(|mut d| d.take());
        if let Some(done) = done {
            let _ = done.recv_timeout(SHUTDOWN_WAIT);
        }
        let pid = self.shared.state().pid.take();
        session::kill_group(pid);
        self.shared.set_health(Health::Down("stopped".into()));
    }
}

/// What the supervisor and the calls share.
pub(super) struct Shared {
    /// The backend's name.
    name: String,
    /// Tells the server the list of tools changed.
    changed: Arc<dyn Fn() + Send + Sync>,
    state: Mutex<State>,
    listing: RwLock<Listing>,
}

/// The connection's state.
struct State {
    health: Health,
    /// The live session, when there is one.
    link: Option<Link>,
    /// The stdio child's pid (also its process group).
    pid: Option<u32>,
}

/// The operations offered now, and the upstream's own name of each.
#[derive(Debug, Default, Clone, PartialEq)]
struct Listing {
    operations: Vec<Operation>,
    names: HashMap<String, String>,
}

impl Shared {
    fn new(name: &str, changed: Arc<dyn Fn() + Send + Sync>) -> Shared {
        Shared {
            name: name.to_owned(),
            changed,
            state: Mutex::new(State {
                health: Health::Connecting("starting".into()),
                link: None,
                pid: None,
            }),
            listing: RwLock::new(Listing::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn listing(&self) -> std::sync::RwLockReadGuard<'_, Listing> {
        match self.listing.read() {
            Ok(listing) => listing,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn set_health(&self, health: Health) {
        self.state().health = health;
    }

    /// The live session, if any.
    fn link(&self) -> Option<Link> {
        self.state().link.clone()
    }

    /// The upstream's own name of `operation`.
    fn upstream_name(&self, operation: &str) -> Option<String> {
        self.listing().names.get(operation).cloned()
    }

    /// A session is up: calls go to `link`, the operations are `tools`.
    fn connected(&self, link: Link, pid: Option<u32>, tools: &[UpstreamTool]) {
        {
            let mut state = self.state();
            state.link = Some(link);
            state.pid = pid;
            state.health = Health::Ready;
        }
        self.replace_tools(tools);
    }

    /// The session ended: calls answer `backend_unavailable` until the next one.
    fn disconnected(&self, health: Health) {
        let mut state = self.state();
        state.link = None;
        state.pid = None;
        state.health = health;
    }

    /// Replaces the operations with those of `tools`, and tells the server when they
    /// differ from the ones offered until now.
    fn replace_tools(&self, tools: &[UpstreamTool]) {
        let listing = listing_of(&self.name, tools);
        let differs = {
            let mut current = match self.listing.write() {
                Ok(current) => current,
                Err(poisoned) => poisoned.into_inner(),
            };
            let differs = *current != listing;
            *current = listing;
            differs
        };
        if differs {
            (self.changed)();
        }
    }
}

/// The operations of an upstream's `tools`. A tool whose name cannot be made safe, whose
/// safe name another tool already took, or whose input schema is not an object is left
/// out, with a warning for the operator.
fn listing_of(backend: &str, tools: &[UpstreamTool]) -> Listing {
    let mut listing = Listing::default();
    for tool in tools {
        let Some(name) = safe_name(&tool.name) else {
            tracing::warn!(backend, tool = %tool.name, "upstream tool left out: its name has no letter or digit");
            continue;
        };
        if listing.names.contains_key(&name) {
            tracing::warn!(backend, tool = %tool.name, name, "upstream tool left out: another tool already has this name");
            continue;
        }
        let input_schema = Value::Object(tool.input_schema.as_ref().clone());
        if input_schema.get("type").and_then(Value::as_str) != Some("object") {
            tracing::warn!(backend, tool = %tool.name, "upstream tool left out: its input schema is not of type object");
            continue;
        }
        listing.operations.push(Operation {
            name: name.clone(),
            title: tool
                .title
                .clone()
                .or_else(|| tool.annotations.as_ref().and_then(|a| a.title.clone())),
            description: tool.description.as_deref().unwrap_or_default().to_owned(),
            category: category_of(tool.annotations.as_ref()),
            input_schema,
            output_schema: tool
                .output_schema
                .as_ref()
                .map(|s| Value::Object(s.as_ref().clone())),
        });
        listing.names.insert(name, tool.name.to_string());
    }
    listing
}

/// An upstream tool's name as a tool-name suffix: as it is when it is already lower-case
/// letters, digits and `_`, otherwise in snake case; `None` when nothing is left.
fn safe_name(name: &str) -> Option<String> {
    let safe = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    let name = if safe {
        name.to_owned()
    } else {
        snake_case(name)
    };
    (!name.is_empty()).then_some(name)
}

/// The default category of an upstream tool: `readOnlyHint` → read, `destructiveHint` →
/// destructive, anything else write.
fn category_of(annotations: Option<&ToolAnnotations>) -> Category {
    match annotations {
        Some(a) if a.read_only_hint == Some(true) => Category::Read,
        Some(a) if a.destructive_hint == Some(true) => Category::Destructive,
        _ => Category::Write,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(value: Value) -> UpstreamTool {
        serde_json::from_value(value).expect("a tool")
    }

    #[test]
    fn names_are_made_safe_and_kept_when_they_already_are() {
        for (given, safe) in [
            ("echo", Some("echo")),
            ("get_sum_2", Some("get_sum_2")),
            ("get-sum", Some("get_sum")),
            (
                "trigger-long-running-operation",
                Some("trigger_long_running_operation"),
            ),
            ("listFiles", Some("list_files")),
            ("fs.read", Some("fs_read")),
            ("---", None),
        ] {
            assert_eq!(safe_name(given).as_deref(), safe, "{given}");
        }
    }

    #[test]
    fn the_category_comes_from_the_annotations() {
        let hints =
            |value: Value| -> ToolAnnotations { serde_json::from_value(value).expect("hints") };
        assert_eq!(category_of(None), Category::Write);
        assert_eq!(
            category_of(Some(&hints(json!({"readOnlyHint": true})))),
            Category::Read
        );
        assert_eq!(
            category_of(Some(&hints(
                json!({"readOnlyHint": true, "destructiveHint": true})
            ))),
            Category::Read
        );
        assert_eq!(
            category_of(Some(&hints(json!({"destructiveHint": true})))),
            Category::Destructive
        );
        assert_eq!(
            category_of(Some(&hints(
                json!({"readOnlyHint": false, "destructiveHint": false})
            ))),
            Category::Write
        );
    }

    #[test]
    fn a_listing_maps_back_to_the_upstream_names_and_leaves_out_what_cannot_be_offered() {
        let tools = [
            tool(
                json!({"name": "get-sum", "title": "Get Sum", "description": "Adds.",
                "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}}},
                "outputSchema": {"type": "object"},
                "annotations": {"readOnlyHint": true}}),
            ),
            tool(json!({"name": "get_sum", "inputSchema": {"type": "object"}})),
            tool(json!({"name": "odd", "inputSchema": {"type": "array"}})),
            tool(json!({"name": "wipe", "inputSchema": {"type": "object"},
                "annotations": {"title": "Wipe it", "destructiveHint": true}})),
        ];
        let listing = listing_of("files", &tools);
        let names: Vec<_> = listing.operations.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["get_sum", "wipe"]);
        assert_eq!(listing.names["get_sum"], "get-sum");
        let sum = &listing.operations[0];
        assert_eq!(sum.title.as_deref(), Some("Get Sum"));
        assert_eq!(sum.description, "Adds.");
        assert_eq!(sum.category, Category::Read);
        assert_eq!(sum.output_schema, Some(json!({"type": "object"})));
        assert_eq!(listing.operations[1].title.as_deref(), Some("Wipe it"));
        assert_eq!(listing.operations[1].category, Category::Destructive);
    }

    #[test]
    fn a_new_listing_tells_the_server_only_when_it_differs() {
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&count);
        let shared = Shared::new(
            "files",
            Arc::new(move || {
                counted.fetch_add(1, Ordering::SeqCst);
            }),
        );
        let one = [tool(
            json!({"name": "echo", "inputSchema": {"type": "object"}}),
        )];
        shared.replace_tools(&one);
        shared.replace_tools(&one);
        assert_eq!(count.load(Ordering::SeqCst), 1);
        shared.replace_tools(&[]);
        assert_eq!(count.load(Ordering::SeqCst), 2);
        assert_eq!(shared.upstream_name("echo"), None);
    }
}
