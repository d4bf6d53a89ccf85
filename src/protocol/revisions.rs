//! MCP revisions, era selection and per-connection state.
//!
//! tollgate is dual-era: the handshake revisions (2024-11-05 … 2025-11-25) are negotiated
//! by `initialize` and scoped to a [`Session`] (the stdio process or one HTTP session); the
//! stateless 2026-07-28 revision is selected per request by its `_meta` and needs no state.
//! `select_era` decides which one serves a request, once, in the dispatcher; the other
//! functions here read what a request's era makes of its `_meta` and add what 2026-07-28
//! requires on every result.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use serde_json::{Map, Value, json};

use crate::catalog::McpError;
use crate::protocol::jsonrpc::Request;
use crate::tools::LogLevel;

/// Handshake revisions, oldest first.
pub const LEGACY_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// The revision offered when a client asks for one we do not speak.
pub const LATEST_LEGACY: &str = "2025-11-25";
/// Stateless revisions.
pub const MODERN_VERSIONS: [&str; 1] = ["2026-07-28"];
/// The only handshake revision that requires accepting JSON-RPC batches.
pub const BATCH_VERSION: &str = "2025-03-26";

/// `_meta` key carrying the stateless protocol revision.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key carrying the client's capabilities on stateless requests.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key carrying the requested log level on stateless requests.
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// `_meta` key carrying the server's identity on stateless results.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// Methods the 2026-07-28 revision removed; answered `-32601` on that era.
pub const REMOVED_IN_MODERN: [&str; 5] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// The revision a request is served under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// A handshake revision negotiated on the session.
    Legacy(&'static str),
    /// The stateless revision.
    Modern(&'static str),
}

impl Era {
    /// True for the stateless revision.
    pub fn is_modern(self) -> bool {
        matches!(self, Era::Modern(_))
    }
}

/// The handshake revision to answer for a requested one: the same when supported,
/// otherwise the latest (the handshake rules make this an answer, not an error).
pub fn negotiate_legacy(requested: &str) -> &'static str {
    LEGACY_VERSIONS
        .iter()
        .find(|v| **v == requested)
        .copied()
        .unwrap_or(LATEST_LEGACY)
}

/// The interned modern revision matching `requested`, if we speak it.
pub fn find_modern(requested: &str) -> Option<&'static str> {
    MODERN_VERSIONS.iter().find(|v| **v == requested).copied()
}

/// How long a client may cache list and read results (2026-07-28 `ttlMs`).
const CACHE_TTL_MS: u64 = 60_000;

/// The request's `_meta` object, if it has one.
pub(crate) fn meta(req: &Request) -> Option<&Map<String, Value>> {
    req.params.get("_meta").and_then(Value::as_object)
}

/// The protocol version a request's `_meta` names, which makes it a request of the
/// stateless revision (whatever the value: a wrong one is that revision's error).
pub(crate) fn stateless_version(req: &Request) -> Option<&Value> {
    meta(req).and_then(|m| m.get(META_PROTOCOL_VERSION))
}

/// Picks the era of one request: stateless when its `_meta` names a protocol version,
/// otherwise the session's negotiated handshake revision.
pub(crate) fn select_era(req: &Request, session: &Session) -> Result<Era, McpError> {
    if let Some(requested) = stateless_version(req) {
        let requested = requested
            .as_str()
            .ok_or_else(|| McpError::invalid_params(&format!("_meta.{}", META_PROTOCOL_VERSION)))?;
        let version = find_modern(requested)
            .ok_or_else(|| McpError::unsupported_version_modern(requested, &MODERN_VERSIONS))?;
        let caps = meta(req).and_then(|m| m.get(META_CLIENT_CAPABILITIES));
        if !caps.is_some_and(Value::is_object) {
            let param = format!("_meta.{}", META_CLIENT_CAPABILITIES);
            return Err(McpError::invalid_params(&param));
        }
        return Ok(Era::Modern(version));
    }
    if req.method == "initialize" || req.method == "ping" {
        return Ok(Era::Legacy(session.negotiated().unwrap_or(LATEST_LEGACY)));
    }
    match session.negotiated() {
        Some(version) => Ok(Era::Legacy(version)),
        None if req.is_notification() => Ok(Era::Legacy(LATEST_LEGACY)),
        // Neither a handshake nor the stateless `_meta`: both eras call this missing params.
        None => Err(
            McpError::invalid_params(&format!("_meta.{}", META_PROTOCOL_VERSION))
                .detail("reason", "no_session"),
        ),
    }
}

/// What the client can answer: per request on 2026-07-28, from `initialize` before.
pub(crate) fn client_capabilities(req: &Request, era: Era, session: &Session) -> Value {
    match era {
        Era::Modern(_) => meta(req)
            .and_then(|m| m.get(META_CLIENT_CAPABILITIES))
            .cloned()
            .unwrap_or(Value::Null),
        Era::Legacy(_) => session.client_capabilities(),
    }
}

/// The level of the `notifications/message` a request may receive: the session's on the
/// handshake revisions, only what the request asks for on 2026-07-28.
pub(crate) fn call_log_level(req: &Request, era: Era, session: &Session) -> Option<LogLevel> {
    match era {
        Era::Legacy(_) => Some(session.log_level().unwrap_or(LogLevel::Info)),
        // 2026-07-28: no `notifications/message` unless the request asked for them.
        Era::Modern(_) => meta(req)
            .and_then(|m| m.get(META_LOG_LEVEL))
            .and_then(Value::as_str)
            .and_then(LogLevel::parse),
    }
}

/// The server's identity, in `initialize`, `server/discover` and 2026-07-28 results.
pub(crate) fn server_info() -> Value {
    json!({ "name": "tollgate", "title": "tollgate", "version": env!("CARGO_PKG_VERSION") })
}

/// Adds what the 2026-07-28 revision requires on every result.
pub(crate) fn finish_result(mut result: Value, era: Era, method: &str) -> Value {
    let Era::Modern(_) = era else {
        return result;
    };
    let Value::Object(map) = &mut result else {
        return result;
    };
    map.entry("resultType").or_insert_with(|| json!("complete"));
    let meta = map
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert(META_SERVER_INFO.into(), server_info());
    }
    let cacheable = matches!(
        method,
        "server/discover"
            | "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
    );
    if cacheable {
        map.insert("ttlMs".into(), json!(CACHE_TTL_MS));
        // Lists depend on the caller's scopes and plan, so no shared cache may keep them.
        let scope = if method == "server/discover" {
            "public"
        } else {
            "private"
        };
        map.insert("cacheScope".into(), json!(scope));
    }
    result
}

#[derive(Debug, Default)]
struct SessionState {
    negotiated: Option<&'static str>,
    client_capabilities: Value,
    log_level: Option<LogLevel>,
}

/// The resource subscriptions of one session, and the updates not sent to it yet.
#[derive(Debug, Default)]
struct Watch {
    /// Subscribed URIs (only resources that can change are recorded).
    uris: HashSet<String>,
    /// URIs that changed since the session was last told, each once.
    pending: Vec<String>,
    /// Whether [`Subscribers`] knows this session.
    registered: bool,
}

/// Every handshake-era session that subscribed to a resource, so that a change of that
/// resource reaches each of them as `notifications/resources/updated`.
///
/// A change is queued on each subscribed session and sent on the next stream of that
/// session that can carry it: the one of the request that made the change, when that
/// request is the session's own (always so on stdio, whose one session is the process), or
/// otherwise the response stream of the session's next successful request. Sessions are
/// held weakly: one that ends drops out.
#[derive(Debug, Default)]
pub struct Subscribers {
    sessions: Mutex<Vec<Weak<Mutex<Watch>>>>,
}

impl Subscribers {
    fn add(&self, watch: &Arc<Mutex<Watch>>) {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|w| w.strong_count() > 0);
        sessions.push(Arc::downgrade(watch));
    }

    /// Whether a live session is subscribed to `uri`.
    pub fn watched(&self, uri: &str) -> bool {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|w| w.strong_count() > 0);
        sessions
            .iter()
            .filter_map(Weak::upgrade)
            .any(|watch| lock(&watch).uris.contains(uri))
    }

    /// Records that the resource `uri` changed: every live session subscribed to it gets
    /// one update queued (changes made before it is sent add no second one).
    pub fn changed(&self, uri: &str) {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|w| w.strong_count() > 0);
        for watch in sessions.iter().filter_map(Weak::upgrade) {
            let mut watch = lock(&watch);
            if watch.uris.contains(uri) && !watch.pending.iter().any(|p| p == uri) {
                watch.pending.push(uri.to_owned());
            }
        }
    }
}

/// A session that has not looked at the registry generation yet.
const UNSEEN: u64 = u64::MAX;

/// State of one handshake-era connection: the stdio process, or one HTTP session.
#[derive(Debug)]
pub struct Session {
    state: Mutex<SessionState>,
    watch: Arc<Mutex<Watch>>,
    in_flight: Mutex<HashMap<String, Arc<AtomicBool>>>,
    outgoing: Mutex<HashMap<String, SyncSender<Value>>>,
    next_outgoing: AtomicU64,
    /// The generation of each list ([`Listed`]) this session was last told of (`u64::MAX`:
    /// not yet looked).
    seen: [AtomicU64; 3],
}

/// A list whose changes a session is told of with `notifications/<list>/list_changed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    /// `tools/list`.
    Tools = 0,
    /// `resources/list` and `resources/templates/list`.
    Resources = 1,
    /// `prompts/list`.
    Prompts = 2,
}

impl Listed {
    /// Every list.
    pub const ALL: [Listed; 3] = [Listed::Tools, Listed::Resources, Listed::Prompts];

    /// The notification a session is sent when the list changed.
    pub fn notification(self) -> &'static str {
        match self {
            Listed::Tools => "notifications/tools/list_changed",
            Listed::Resources => "notifications/resources/list_changed",
            Listed::Prompts => "notifications/prompts/list_changed",
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks cannot leave the plain data inconsistent.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Default for Session {
    fn default() -> Session {
        Session {
            state: Mutex::default(),
            watch: Arc::default(),
            in_flight: Mutex::default(),
            outgoing: Mutex::default(),
            next_outgoing: AtomicU64::new(0),
            seen: [
                AtomicU64::new(UNSEEN),
                AtomicU64::new(UNSEEN),
                AtomicU64::new(UNSEEN),
            ],
        }
    }
}

impl Session {
    /// A new, uninitialized session.
    pub fn new() -> Session {
        Session::default()
    }

    /// The negotiated handshake revision, once `initialize` succeeded.
    pub fn negotiated(&self) -> Option<&'static str> {
        lock(&self.state).negotiated
    }

    /// Records the negotiated revision and the client's capabilities; false when the
    /// session was already initialized.
    pub fn initialize(&self, version: &'static str, client_capabilities: Value) -> bool {
        let mut state = lock(&self.state);
        if state.negotiated.is_some() {
            return false;
        }
        state.negotiated = Some(version);
        state.client_capabilities = client_capabilities;
        true
    }

    /// The capabilities the client declared at `initialize`.
    pub fn client_capabilities(&self) -> Value {
        lock(&self.state).client_capabilities.clone()
    }

    /// Whether the client declared `capability` (e.g. `sampling`) at `initialize`.
    pub fn client_supports(&self, capability: &str) -> bool {
        lock(&self.state)
            .client_capabilities
            .get(capability)
            .is_some_and(|c| !c.is_null())
    }

    /// Registers a request the server is about to send to the client; returns its id and
    /// the receiver its response will arrive on.
    pub fn expect_response(&self) -> (Value, Receiver<Value>) {
        let n = self.next_outgoing.fetch_add(1, Ordering::Relaxed);
        let id = format!("tollgate-{n}");
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        lock(&self.outgoing).insert(id.clone(), tx);
        (Value::String(id), rx)
    }

    /// Hands a client's response to the request that waits for it; unknown ids (late or
    /// forged responses) are dropped.
    pub fn deliver(&self, id: &Value, response: Value) {
        let key = id.as_str().unwrap_or_default();
        if let Some(tx) = lock(&self.outgoing).remove(key) {
            let _ = tx.try_send(response);
        }
    }

    /// Forgets a server request that will not be waited for any longer.
    pub fn abandon(&self, id: &Value) {
        lock(&self.outgoing).remove(id.as_str().unwrap_or_default());
    }

    /// The level set by `logging/setLevel`, if any.
    pub fn log_level(&self) -> Option<LogLevel> {
        lock(&self.state).log_level
    }

    /// Sets the level for `notifications/message`.
    pub fn set_log_level(&self, level: LogLevel) {
        lock(&self.state).log_level = Some(level);
    }

    /// Subscribes to the updates of `uri`, a resource that can change; the first
    /// subscription makes the session known to `subscribers`.
    pub fn subscribe(&self, uri: &str, subscribers: &Subscribers) {
        let mut watch = lock(&self.watch);
        watch.uris.insert(uri.to_owned());
        let first = !std::mem::replace(&mut watch.registered, true);
        drop(watch);
        if first {
            subscribers.add(&self.watch);
        }
    }

    /// Drops a subscription, and an update of `uri` not sent yet.
    pub fn unsubscribe(&self, uri: &str) {
        let mut watch = lock(&self.watch);
        watch.uris.remove(uri);
        watch.pending.retain(|p| p != uri);
    }

    /// Whether `list` changed since this session last looked (`generation` is the
    /// server's now); the first look only records it.
    pub fn changed_since(&self, list: Listed, generation: u64) -> bool {
        let seen = self.seen[list as usize].swap(generation, Ordering::AcqRel);
        seen != UNSEEN && seen != generation
    }

    /// Takes the queued `notifications/resources/updated` messages of this session.
    pub fn take_updates(&self) -> Vec<Value> {
        let pending = std::mem::take(&mut lock(&self.watch).pending);
        pending
            .into_iter()
            .map(|uri| {
                crate::protocol::jsonrpc::notification(
                    "notifications/resources/updated",
                    json!({ "uri": uri }),
                )
            })
            .collect()
    }

    /// Registers an in-flight request and returns its cancellation flag.
    pub fn begin(&self, id: &Value) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        lock(&self.in_flight).insert(id.to_string(), Arc::clone(&flag));
        flag
    }

    /// Forgets a finished request.
    pub fn finish(&self, id: &Value) {
        lock(&self.in_flight).remove(&id.to_string());
    }

    /// Cancels an in-flight request; unknown or finished ids are ignored.
    pub fn cancel(&self, id: &Value) {
        if let Some(flag) = lock(&self.in_flight).get(&id.to_string()) {
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// True when the request was cancelled (its response must then not be sent).
    pub fn was_cancelled(flag: &AtomicBool) -> bool {
        flag.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_echoes_known_and_offers_latest_otherwise() {
        assert_eq!(negotiate_legacy("2025-03-26"), "2025-03-26");
        assert_eq!(negotiate_legacy("1900-01-01"), LATEST_LEGACY);
        assert_eq!(negotiate_legacy("2026-07-28"), LATEST_LEGACY);
    }

    #[test]
    fn a_session_initializes_once() {
        let s = Session::new();
        assert!(s.initialize("2025-06-18", serde_json::json!({"sampling": {}})));
        assert!(!s.initialize("2025-11-25", Value::Null));
        assert!(s.client_supports("sampling"));
        assert!(!s.client_supports("elicitation"));
        assert_eq!(s.negotiated(), Some("2025-06-18"));
    }

    #[test]
    fn responses_reach_the_request_that_waits_for_them() {
        let s = Session::new();
        let (id, rx) = s.expect_response();
        s.deliver(&Value::from("tollgate-999"), Value::from(1));
        s.deliver(&id, Value::from(2));
        assert_eq!(rx.try_recv().ok(), Some(Value::from(2)));
    }

    #[test]
    fn a_change_reaches_each_subscribed_session_once_until_it_is_taken() {
        let subscribers = Subscribers::default();
        let (a, b, other) = (Session::new(), Session::new(), Session::new());
        a.subscribe("test://w", &subscribers);
        a.subscribe("test://x", &subscribers);
        b.subscribe("test://w", &subscribers);
        other.subscribe("test://x", &subscribers);
        subscribers.changed("test://w");
        subscribers.changed("test://w");
        let updated = json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                             "params": {"uri": "test://w"}});
        assert_eq!(a.take_updates(), vec![updated.clone()]);
        assert_eq!(a.take_updates(), Vec::<Value>::new());
        assert!(other.take_updates().is_empty());
        b.unsubscribe("test://w");
        assert!(
            b.take_updates().is_empty(),
            "unsubscribing drops what was queued"
        );
        subscribers.changed("test://w");
        assert!(b.take_updates().is_empty());
        assert_eq!(a.take_updates(), vec![updated]);
    }

    #[test]
    fn an_ended_session_drops_out_of_the_subscribers() {
        let subscribers = Subscribers::default();
        {
            let gone = Session::new();
            gone.subscribe("test://w", &subscribers);
        }
        let kept = Session::new();
        kept.subscribe("test://w", &subscribers);
        subscribers.changed("test://w");
        assert_eq!(lock(&subscribers.sessions).len(), 1);
        assert_eq!(kept.take_updates().len(), 1);
    }

    #[test]
    fn cancel_sets_the_flag_of_that_request_only() {
        let s = Session::new();
        let a = s.begin(&Value::from(1));
        let b = s.begin(&Value::from("1"));
        s.cancel(&Value::from(1));
        assert!(Session::was_cancelled(&a));
        assert!(!Session::was_cancelled(&b));
    }

    #[test]
    fn modern_results_get_result_type_and_cache_hints() {
        let out = finish_result(
            json!({"tools": []}),
            Era::Modern("2026-07-28"),
            "tools/list",
        );
        assert_eq!(out["resultType"], "complete");
        assert_eq!(out["ttlMs"], CACHE_TTL_MS);
        assert_eq!(out["cacheScope"], "private");
        assert_eq!(out["_meta"][META_SERVER_INFO]["name"], "tollgate");
        let legacy = finish_result(json!({}), Era::Legacy("2025-11-25"), "tools/list");
        assert!(legacy.get("resultType").is_none());
    }
}
