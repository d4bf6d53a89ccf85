//! The lifecycle methods, which need no credential: the handshake era's `initialize`
//! (version negotiation, once per session), `ping`, the stateless revision's
//! `server/discover`, the client's notifications (`initialized`, `cancelled`), and the
//! capabilities both `initialize` and `server/discover` announce.

use serde_json::{Value, json};

use super::Server;
use crate::catalog::McpError;
use crate::protocol::jsonrpc::Request;
use crate::protocol::revisions::{self, Era, Session, server_info};

/// What every client is told of this server in `initialize` and `server/discover`.
const INSTRUCTIONS: &str = "tollgate serves business tools behind guards. Errors carry a stable \
    `code` and a `hint`; guard rejections are JSON-RPC errors with the envelope in \
    `error.data`, tool failures are results with `isError: true` and the envelope in \
    `_meta[\"dev.tollgate/error\"]`. Read `retry_after` before retrying.";

impl Server {
    /// `initialize`: negotiates the handshake-era version and opens the session; a second
    /// `initialize` on the same session is refused.
    pub(super) fn initialize(&self, req: &Request, session: &Session) -> Result<Value, McpError> {
        let requested = req
            .params
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| McpError::invalid_params("protocolVersion"))?;
        let version = revisions::negotiate_legacy(requested);
        let client_caps = req
            .params
            .get("capabilities")
            .cloned()
            .unwrap_or(Value::Null);
        if !session.initialize(version, client_caps) {
            return Err(McpError::invalid_request("already_initialized"));
        }
        Ok(json!({
            "protocolVersion": version,
            "capabilities": self.capabilities(Era::Legacy(version)),
            "serverInfo": server_info(),
            "instructions": INSTRUCTIONS,
        }))
    }

    /// `ping`: an empty result.
    pub(super) fn ping() -> Value {
        json!({})
    }

    /// The client's notifications: `notifications/cancelled` cancels the request it names
    /// (if it still runs); `notifications/initialized` needs nothing.
    pub(super) fn notification(req: &Request, session: &Session) {
        if req.method == "notifications/cancelled"
            && let Some(id) = req.params.get("requestId")
        {
            session.cancel(id);
        }
    }

    /// `server/discover` (stateless revision): every version served, newest first, and
    /// what the newest announces.
    pub(super) fn discover(&self) -> Value {
        let mut supported: Vec<&str> = revisions::MODERN_VERSIONS.to_vec();
        supported.extend(revisions::LEGACY_VERSIONS.iter().rev());
        json!({
            "supportedVersions": supported,
            "capabilities": self.capabilities(Era::Modern(revisions::MODERN_VERSIONS[0])),
            "serverInfo": server_info(),
            "instructions": INSTRUCTIONS,
        })
    }

    /// What the server announces. Lists change while the process runs only when an
    /// upstream MCP server is behind the gate (its lists can change), so `listChanged` is
    /// announced only then, for each kind it exposes; `resources.subscribe` (handshake era
    /// only: 2026-07-28 removed the method) only when some resource can change (one of
    /// tollgate's, or an upstream's), for nothing else is ever updated; and `logging` only
    /// when some tool sends log messages, for otherwise a level would govern nothing.
    fn capabilities(&self, era: Era) -> Value {
        let registry = self.registry();
        let resources_change = self.backends.offers_resources();
        let resources = if !era.is_modern() && self.can_subscribe() {
            json!({ "subscribe": true, "listChanged": resources_change })
        } else {
            json!({ "listChanged": resources_change })
        };
        let mut capabilities = json!({
            "tools": { "listChanged": self.backends.tools_can_change() },
            "resources": resources,
            "prompts": { "listChanged": self.backends.offers_prompts() },
            "completions": {},
        });
        if registry.has_logging_tools() {
            capabilities["logging"] = json!({});
        }
        capabilities
    }
}

impl Server {
    /// Whether some resource can change, so that subscribing to it means something: one of
    /// tollgate's own, or an upstream's.
    pub(super) fn can_subscribe(&self) -> bool {
        self.registry().has_changing_resources() || self.backends.offers_resources()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::dispatch::testing::{Fixture, request};

    fn initialize(version: &str) -> Request {
        request(
            "initialize",
            json!({"protocolVersion": version, "capabilities": {"roots": {}}}),
        )
    }

    #[test]
    fn initialize_echoes_a_known_version_once_per_session() {
        let fx = Fixture::invoicing();
        let session = Session::new();
        let result = fx
            .server
            .initialize(&initialize("2025-06-18"), &session)
            .expect("initialized");
        assert_eq!(result["protocolVersion"], json!("2025-06-18"));
        assert_eq!(result["instructions"], json!(INSTRUCTIONS));
        assert_eq!(session.negotiated(), Some("2025-06-18"));
        assert!(session.client_supports("roots"));
        let again = fx
            .server
            .initialize(&initialize("2025-06-18"), &session)
            .expect_err("a second initialize");
        assert_eq!(
            again.fields()["details"]["reason"],
            json!("already_initialized")
        );
    }

    #[test]
    fn initialize_without_a_version_names_the_parameter() {
        let fx = Fixture::invoicing();
        let err = fx
            .server
            .initialize(&request("initialize", json!({})), &Session::new())
            .expect_err("no version");
        assert_eq!(err.fields()["param"], json!("protocolVersion"));
    }

    #[test]
    fn discover_lists_the_newest_version_first_and_every_legacy_one() {
        let fx = Fixture::invoicing();
        let found = fx.server.discover();
        let versions = found["supportedVersions"].as_array().expect("versions");
        assert_eq!(versions[0], json!(revisions::MODERN_VERSIONS[0]));
        assert_eq!(versions.len(), 1 + revisions::LEGACY_VERSIONS.len());
        assert_eq!(versions[1], json!(revisions::LATEST_LEGACY));
    }

    /// `(subscribe in the handshake era, subscribe in the stateless one, logging)`.
    fn announced(server: &Server) -> (bool, bool, bool) {
        let legacy = server.capabilities(Era::Legacy(revisions::LATEST_LEGACY));
        let modern = server.capabilities(Era::Modern(revisions::MODERN_VERSIONS[0]));
        assert_eq!(legacy["tools"]["listChanged"], json!(false), "no backends");
        (
            legacy["resources"].get("subscribe").is_some(),
            modern["resources"].get("subscribe").is_some(),
            legacy.get("logging").is_some(),
        )
    }

    #[test]
    fn without_changing_resources_or_logging_tools_neither_is_announced() {
        let fx = Fixture::invoicing();
        assert_eq!(announced(&fx.server), (false, false, false));
    }

    #[cfg(feature = "conformance-pack")]
    #[test]
    fn subscribe_is_announced_only_in_the_handshake_era_and_logging_when_a_tool_logs() {
        let fx = Fixture::conformance();
        assert_eq!(announced(&fx.server), (true, false, true));
    }

    #[test]
    fn a_cancellation_sets_the_flag_of_the_request_it_names() {
        let session = Session::new();
        let running = session.begin(&json!(7));
        let cancel = request("notifications/cancelled", json!({"requestId": 7}));
        Server::notification(&cancel, &session);
        assert!(Session::was_cancelled(&running));
    }
}
