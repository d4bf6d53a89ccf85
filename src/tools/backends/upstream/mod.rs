//! `kind = "mcp"`: an MCP server the company already runs, put behind the gate. tollgate
//! is its client, through the official Rust MCP SDK (`rmcp`), over stdio (a child process
//! tollgate starts and restarts) or Streamable HTTP (a session it opens and reopens), in
//! the handshake era (`initialize`).
//!
//! Each tool the upstream lists becomes an [`Operation`] named after the upstream's own
//! name made safe for a tool name (`get-sum` → `get_sum`; the map back to the upstream's
//! name is kept); its category comes from its annotations (`readOnlyHint` → read,
//! `destructiveHint` → destructive, else write). How much of the list is offered is
//! bounded ([`listing`]: `max_tools`, name length, schema and description sizes). The list
//! is read again after the upstream sends `notifications/tools/list_changed`, at a pace
//! the gate sets ([`relist`]), and on every reconnect.
//!
//! Here: [`open`], the backend (`Upstream`) and the state its supervisor and its calls
//! share; [`session`] connects and supervises, [`call`] forwards one call and maps its
//! outcome into the catalog, [`progress`] paces the call's progress to the caller.

mod call;
mod direct;
mod handler;
mod listing;
mod offer;
mod poster;
mod progress;
mod relist;
mod requests;
mod session;
mod session_client;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use rmcp::model::Tool as UpstreamTool;
use serde_json::{Map, Value};

use crate::catalog::McpError;
use crate::config::{BackendConfig, BackendKind, Exposed};
use crate::tools::ToolOutput;
use crate::tools::backends::{
    Backend, BackendEnv, BackendProblem, Call, Change, Health, ListingReport, Operation, gate_uri,
};

use listing::{Limits, Listing, Logged, listing_of};

use crate::tools::backends::pins::{Pins, Presented};
use session::{Link, Target};

/// The longest `open` waits for the first connection: a little longer than one attempt may
/// take, so that the first attempt's outcome is nearly always known (a failure is reported
/// at start); an upstream still starting after that goes on connecting in the background.
/// The backend's per-call deadline does not shorten it: starting a server can take longer
/// than answering a call.
const FIRST_CONNECT_WAIT: Duration = Duration::from_secs(16);

/// The longest one read of one of the upstream's lists (all of its pages) may take.
const LIST_LIMIT: Duration = Duration::from_secs(15);

/// The most pages of one of the upstream's lists followed: an upstream whose cursors never
/// end is not followed forever.
const MAX_PAGES: usize = 64;

/// Every entry of one of the upstream's paginated lists (`what`: its tools, its
/// resources, …), following `nextCursor` until the last page, [`MAX_PAGES`] pages or more
/// than `keep` entries (what is past `keep` is left out anyway), within [`LIST_LIMIT`].
async fn read_pages<T, F, Fut>(what: &str, keep: usize, mut page: F) -> Result<Vec<T>, String>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>), rmcp::ServiceError>>,
{
    let pages = async {
        let mut all = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_PAGES {
            let (entries, next) = page(cursor).await?;
            all.extend(entries);
            cursor = next;
            if cursor.is_none() || all.len() > keep {
                break;
            }
        }
        Ok::<_, rmcp::ServiceError>(all)
    };
    match tokio::time::timeout(LIST_LIMIT, pages).await {
        Ok(Ok(all)) => Ok(all),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "the upstream did not list its {what} within {} s",
            LIST_LIMIT.as_secs()
        )),
    }
}

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
    let BackendKind::Mcp(mcp) = &config.kind else {
        return Err(problem("this backend is not of kind \"mcp\"".into()));
    };
    let target = Target::from_config(&mcp.transport).map_err(problem)?;
    let mut shared = Shared::new(&config.name, Arc::clone(&env.changed), Limits::of(mcp));
    shared.exposed = mcp.expose;
    shared.pins = env.store.clone().map(|store| Pins {
        store,
        backend: config.name.clone(),
        pinning: mcp.pinning,
        clock: env.clock.clone(),
    });
    let shared = Arc::new(shared);
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

    fn listing_report(&self) -> ListingReport {
        self.shared.report()
    }

    fn held(&self) -> Vec<(String, &'static str)> {
        self.shared.listing().held.clone()
    }

    fn review_pins(&self) {
        self.shared.review_pins();
    }

    fn resources(&self) -> Vec<Value> {
        self.shared.offer().resources.clone()
    }

    fn resource_templates(&self) -> Vec<Value> {
        self.shared.offer().templates.clone()
    }

    fn prompts(&self) -> Vec<(String, Value)> {
        self.shared.offer().prompts.clone()
    }

    fn held_prompts(&self) -> Vec<(String, &'static str)> {
        self.shared.offer().held.clone()
    }

    /// Reads a resource it lists, or one of its templates makes; any other URI is not
    /// asked for (an upstream's URIs are not a way to its file system).
    fn read_resource(&self, uri: &str, timeout: Duration) -> Result<Value, McpError> {
        if !self.shared.offer().may_read(uri) {
            return Err(McpError::resource_not_found(uri).with("uri", uri));
        }
        requests::read_resource(&self.shared, &self.runtime, uri, timeout)
    }

    fn get_prompt(
        &self,
        operation: &str,
        args: &Map<String, Value>,
        timeout: Duration,
    ) -> Result<Value, McpError> {
        let Some(name) = self
            .shared
            .offer()
            .upstream_prompt(operation)
            .map(str::to_owned)
        else {
            return Err(McpError::invalid_params("name").detail("reason", "unknown_prompt"));
        };
        requests::get_prompt(&self.shared, &self.runtime, &name, args, timeout)
    }

    /// The values the upstream completes its prompt's argument with (none when it does not
    /// complete).
    fn complete_prompt(
        &self,
        operation: &str,
        (argument, value): (&str, &str),
        timeout: Duration,
    ) -> Result<Vec<String>, McpError> {
        let (name, completes) = {
            let offer = self.shared.offer();
            (
                offer.upstream_prompt(operation).map(str::to_owned),
                offer.completes,
            )
        };
        let Some(name) = name else {
            return Err(McpError::invalid_params("ref.name"));
        };
        if !completes {
            return Ok(Vec::new());
        }
        requests::complete(
            &self.shared,
            &self.runtime,
            &name,
            (argument, value),
            timeout,
        )
    }

    /// Subscribes upstream on the first subscription to `uri` (and again on every new
    /// session); unsubscribes when asked. False when the upstream sends no updates.
    fn subscribe(&self, uri: &str, on: bool, timeout: Duration) -> Result<bool, McpError> {
        {
            let offer = self.shared.offer();
            if on && !offer.may_read(uri) {
                return Err(McpError::resource_not_found(uri).with("uri", uri));
            }
            if !offer.subscribe {
                return Ok(false);
            }
        }
        let first = {
            let mut subscribed = self.shared.subscribed_uris();
            if on {
                subscribed.insert(uri.to_owned())
            } else {
                subscribed.remove(uri)
            }
        };
        if first {
            let sent = requests::subscription(&self.shared, &self.runtime, uri, on, timeout);
            if let Err(e) = sent {
                if on {
                    self.shared.subscribed_uris().remove(uri);
                }
                return Err(e);
            }
        }
        Ok(true)
    }

    fn call(
        &self,
        operation: &str,
        args: &Map<String, Value>,
        call: &Call<'_>,
    ) -> Result<ToolOutput, McpError> {
        let mut output = call::forward(&self.shared, &self.runtime, operation, args, call)?;
        if self.shared.exposed.resources {
            gate_uris(&self.name, &mut output.content);
        }
        Ok(output)
    }

    /// `tools/call {tool}`, by the MCP conventions of a client's span.
    fn describe_call(&self, operation: &str) -> (String, crate::telemetry::SpanAttributes) {
        let attributes = vec![
            ("mcp.method.name", "tools/call".into()),
            ("gen_ai.tool.name", operation.to_owned().into()),
            ("gen_ai.operation.name", "execute_tool".into()),
            ("tollgate.backend", self.name.clone().into()),
        ];
        (format!("tools/call {operation}"), attributes)
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

/// Gives the resources a result's `content` links to or embeds (`resource_link` and
/// `resource` blocks) the gate's URIs, by which a caller reads them.
fn gate_uris(backend: &str, content: &mut [Value]) {
    for block in content {
        let uri = match block.get("type").and_then(Value::as_str) {
            Some("resource_link") => block.get_mut("uri"),
            Some("resource") => block.get_mut("resource").and_then(|r| r.get_mut("uri")),
            _ => None,
        };
        if let Some(uri) = uri
            && let Some(own) = uri.as_str()
        {
            *uri = Value::String(gate_uri(backend, own));
        }
    }
}

/// What the supervisor and the calls share.
pub(super) struct Shared {
    /// The backend's name.
    name: Arc<str>,
    /// Tells the server what it offers changed.
    changed: Arc<dyn Fn(Change) + Send + Sync>,
    /// Which of what the upstream offers is put behind the gate.
    exposed: Exposed,
    /// Its resources, resource templates and prompts, as offered now.
    offer: RwLock<offer::Offer>,
    /// The upstream URIs subscribed to (on every new session too).
    subscribed: Mutex<std::collections::HashSet<String>>,
    /// How much of the upstream's list is offered.
    limits: Limits,
    state: Mutex<State>,
    listing: RwLock<Listing>,
    /// What was logged about tools left out.
    logged: Mutex<Logged>,
    /// How often the list was read again.
    counts: RelistCounts,
    /// The approved definitions of its tools (`None`: every tool is offered as listed).
    pins: Option<Pins>,
}

/// How often an upstream's list was read again, for `/metrics`.
#[derive(Debug, Default)]
struct RelistCounts {
    /// Reads after `notifications/tools/list_changed`.
    relists: AtomicU64,
    /// `notifications/tools/list_changed` received.
    list_changed: AtomicU64,
    /// Of those, the ones folded into a read already due.
    coalesced: AtomicU64,
}

/// The connection's state.
struct State {
    health: Health,
    /// The live session, when there is one.
    link: Option<Link>,
    /// The stdio child's pid (also its process group).
    pid: Option<u32>,
}

impl Shared {
    fn new(name: &str, changed: Arc<dyn Fn(Change) + Send + Sync>, limits: Limits) -> Shared {
        Shared {
            name: Arc::from(name),
            changed,
            exposed: Exposed::ALL,
            offer: RwLock::new(offer::Offer::default()),
            subscribed: Mutex::default(),
            limits,
            state: Mutex::new(State {
                health: Health::Connecting("starting".into()),
                link: None,
                pid: None,
            }),
            listing: RwLock::new(Listing::default()),
            logged: Mutex::new(Logged::default()),
            counts: RelistCounts::default(),
            pins: None,
        }
    }

    /// What the listing left out now, and how often the list was read again.
    fn report(&self) -> ListingReport {
        let listing = self.listing();
        ListingReport {
            left_out: listing.left_out.clone(),
            left_out_tools: listing.left_out_tools.clone(),
            descriptions_cut: listing.descriptions_cut,
            relists: self.counts.relists.load(Ordering::Relaxed),
            list_changed: self.counts.list_changed.load(Ordering::Relaxed),
            list_changed_coalesced: self.counts.coalesced.load(Ordering::Relaxed),
            held: listing.held.len() + self.offer().held.len(),
        }
    }

    fn offer(&self) -> std::sync::RwLockReadGuard<'_, offer::Offer> {
        match self.offer.read() {
            Ok(offer) => offer,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn subscribed_uris(&self) -> MutexGuard<'_, std::collections::HashSet<String>> {
        match self.subscribed.lock() {
            Ok(subscribed) => subscribed,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The upstream URIs subscribed to now.
    fn subscribed(&self) -> Vec<String> {
        self.subscribed_uris().iter().cloned().collect()
    }

    /// The upstream says its resource `uri` changed: the sessions subscribed to it are told.
    fn resource_updated(&self, uri: &str) {
        if self.exposed.resources {
            (self.changed)(Change::ResourceUpdated(gate_uri(&self.name, uri)));
        }
    }

    /// Puts what the upstream offers besides tools in place (its prompts pinned), telling
    /// the server which lists differ from the ones offered until now.
    fn replace_offer(&self, mut offer: offer::Offer) {
        if let Some(pins) = &self.pins {
            offer.pin(pins);
        }
        self.put_offer(offer);
    }

    fn put_offer(&self, offer: offer::Offer) {
        let (resources, prompts) = {
            let mut current = match self.offer.write() {
                Ok(current) => current,
                Err(poisoned) => poisoned.into_inner(),
            };
            let resources =
                current.resources != offer.resources || current.templates != offer.templates;
            let prompts = current.prompts != offer.prompts || current.held != offer.held;
            *current = offer;
            (resources, prompts)
        };
        if resources {
            (self.changed)(Change::Resources);
        }
        if prompts {
            (self.changed)(Change::Prompts);
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

    /// A session is up: calls go to `link`, the operations are `tools`, and the rest of
    /// what it offers is `offer`.
    fn connected(&self, link: Link, pid: Option<u32>, tools: &[UpstreamTool], offer: offer::Offer) {
        {
            let mut state = self.state();
            state.link = Some(link);
            state.pid = pid;
            state.health = Health::Ready;
        }
        self.replace_tools(tools);
        self.replace_offer(offer);
    }

    /// The session ended: calls answer `backend_unavailable` until the next one.
    fn disconnected(&self, health: Health) {
        let mut state = self.state();
        state.link = None;
        state.pid = None;
        state.health = health;
    }

    /// Replaces the operations with those of `tools` (within the limits; what is left out
    /// is logged once), and tells the server when they differ from the ones offered until
    /// now.
    fn replace_tools(&self, tools: &[UpstreamTool]) {
        let mut listing = listing_of(tools, self.limits);
        if let Some(pins) = &self.pins {
            listing.pin(tools, pins);
        }
        match self.logged.lock() {
            Ok(mut logged) => logged.log_new(&self.name, &listing, self.limits),
            Err(poisoned) => poisoned
                .into_inner()
                .log_new(&self.name, &listing, self.limits),
        }
        self.put(listing);
    }

    /// The operators' decisions read again (on every `tools/list`): the same candidates,
    /// sorted anew only when a decision changed how.
    fn review_pins(&self) {
        let Some(pins) = &self.pins else {
            return;
        };
        // One read of the decisions for the tools and the prompts together.
        let (tool_holds, prompt_holds) = {
            let (listing, offer) = (self.listing(), self.offer());
            let presented: Vec<&Presented> = listing.presented().chain(offer.presented()).collect();
            let mut holds = listing::holds_of(pins, &presented);
            let prompt_holds = holds.split_off(listing.candidates.len().min(holds.len()));
            (
                (!listing.sorted_by(&holds)).then_some(holds),
                (!offer.sorted_by(&prompt_holds)).then_some(prompt_holds),
            )
        };
        if let Some(holds) = prompt_holds {
            let mut offer = self.offer().clone();
            offer.sort(holds);
            self.put_offer(offer);
        }
        if let Some(holds) = tool_holds {
            let mut listing = self.listing().clone();
            listing.sort(holds);
            self.put(listing);
        }
    }

    /// Puts `listing` in place, telling the server when it differs from the one before.
    fn put(&self, listing: Listing) {
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
            (self.changed)(Change::Tools);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::backends::LeftOutReason;
    use serde_json::json;

    fn tool(value: Value) -> UpstreamTool {
        serde_json::from_value(value).expect("a tool")
    }

    const LIMITS: Limits = Limits {
        max_tools: 256,
        max_schema_bytes: 16 * 1024,
    };

    fn counted() -> (Shared, Arc<std::sync::atomic::AtomicUsize>) {
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&count);
        let shared = Shared::new(
            "files",
            Arc::new(move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
            }),
            LIMITS,
        );
        (shared, count)
    }

    #[test]
    fn the_resources_a_result_links_to_or_embeds_get_the_gate_uris() {
        let mut content = vec![
            json!({"type": "text", "text": "see demo://a"}),
            json!({"type": "resource_link", "uri": "demo://a", "name": "a"}),
            json!({"type": "resource", "resource": {"uri": "demo://b", "text": "b"}}),
        ];
        gate_uris("ev", &mut content);
        assert_eq!(content[0]["text"], "see demo://a");
        assert_eq!(content[1]["uri"], "upstream://ev/demo://a");
        assert_eq!(content[2]["resource"]["uri"], "upstream://ev/demo://b");
    }

    #[test]
    fn a_new_listing_tells_the_server_only_when_it_differs() {
        let (shared, count) = counted();
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

    #[test]
    fn the_report_says_what_the_listing_left_out_and_how_often_it_was_read_again() {
        let (shared, _) = counted();
        let long = "x".repeat(100);
        shared.replace_tools(&[
            tool(json!({"name": "echo", "inputSchema": {"type": "object"}})),
            tool(json!({"name": long, "inputSchema": {"type": "object"}})),
        ]);
        shared.counts.relists.fetch_add(2, Ordering::Relaxed);
        shared.counts.list_changed.fetch_add(9, Ordering::Relaxed);
        shared.counts.coalesced.fetch_add(7, Ordering::Relaxed);
        let report = shared.report();
        assert_eq!(
            report.left_out,
            std::collections::BTreeMap::from([(LeftOutReason::NameTooLong, 1)])
        );
        assert_eq!(report.left_out_total(), 1);
        assert_eq!(report.left_out_tools[0].1, LeftOutReason::NameTooLong);
        assert_eq!(
            (
                report.relists,
                report.list_changed,
                report.list_changed_coalesced
            ),
            (2, 9, 7)
        );
    }
}
