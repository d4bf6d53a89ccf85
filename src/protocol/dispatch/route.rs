//! The route of every message but `tools/call`: an unreadable message or batch is answered
//! with its error, a client's answer reaches the request that waits for it, and a request
//! or notification gets its protocol era and is handed to the handler of its method. The
//! methods that may pass the guard chain (`prompts/get`, `completion/complete`,
//! `resources/read`) answer with the rate budget; the others are never charged.

use serde_json::Value;

use super::logging::set_log_level;
use super::observed::note_era;
use super::{Answer, Env, Server};
use crate::catalog::McpError;
use crate::guards::outcome::Verdict;
use crate::protocol::inbound::{Response, request_span};
use crate::protocol::jsonrpc::{Incoming, Parsed, Request};
use crate::protocol::revisions::{self, Era, finish_result, select_era};

impl Server {
    /// The response to one body or line that is not a single `tools/call`, if it has one.
    pub(super) fn handle_parsed(&self, parsed: Parsed, env: &Env<'_>) -> Option<Response> {
        match parsed {
            Parsed::NotJson => Some(self.error_response(None, McpError::parse_error())),
            Parsed::Single(incoming) => self.handle_incoming(incoming, env),
            Parsed::Batch(items) => self.handle_batch(items, env),
        }
    }

    /// Handles a JSON-RPC batch (accepted only on the revision that allows batches). A
    /// refused batch is answered with one error; an accepted one with the array of its
    /// responses in the order of its items, or with nothing when it held only
    /// notifications and answers. Its items are handled one after the other, each
    /// `tools/call` on the route of every `tools/call`.
    fn handle_batch(&self, items: Vec<Incoming>, env: &Env<'_>) -> Option<Response> {
        if env.session.negotiated() != Some(revisions::BATCH_VERSION) {
            let err = McpError::invalid_request("batch_not_allowed");
            return Some(self.error_response(None, err));
        }
        let mut responses = Vec::with_capacity(items.len());
        for item in items {
            match item {
                Incoming::Request(req) if req.method == "initialize" => responses.push(
                    self.error_body(req.id, &McpError::invalid_request("initialize_in_batch")),
                ),
                Incoming::Request(req) if req.method == "tools/call" => {
                    let answered = std::sync::Mutex::new(None);
                    self.call_tools(vec![req], env, &|response| {
                        *answered
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) =
                            Some(response.body);
                    });
                    responses.extend(
                        answered
                            .into_inner()
                            .unwrap_or_else(std::sync::PoisonError::into_inner),
                    );
                }
                other => responses.extend(self.handle_incoming(other, env).map(|r| r.body)),
            }
        }
        (!responses.is_empty()).then(|| Response::of(Value::Array(responses)))
    }

    /// Handles one parsed message.
    fn handle_incoming(&self, incoming: Incoming, env: &Env<'_>) -> Option<Response> {
        match incoming {
            Incoming::Response(id, message) => {
                env.session.deliver(&id, message);
                None
            }
            Incoming::Invalid(id, err) => Some(self.error_response(id, err)),
            Incoming::Request(req) => self.handle_request(req, env),
        }
    }

    /// Handles a request or notification in the era it selects. A notification is never
    /// answered; only the `notifications/*` methods are run in that form: any other method
    /// sent without an id (a `prompts/get` that would be charged and audited, an
    /// `initialize` that would set up a session) is logged and dropped, like a `tools/call`.
    fn handle_request(&self, req: Request, env: &Env<'_>) -> Option<Response> {
        let started = std::time::Instant::now();
        // Every log line of this request carries its id (never its params or token).
        let span = request_span(&req, Some(&env.server_request(&req)));
        let _entered = span.enter();
        if req.id.is_none() && !req.method.starts_with("notifications/") {
            tracing::warn!(
                method = %req.method,
                "a request without an id is a notification: not run, not answered"
            );
            return None;
        }
        let era = select_era(&req, env.session);
        let served = era.as_ref().ok().copied();
        if req.method != "initialize" {
            note_era(&span, served);
        }
        let outcome = era.and_then(|era| {
            self.route(&req, era, env).map(|answer| Answer {
                result: finish_result(answer.result, era, &req.method),
                ..answer
            })
        });
        let initialized = (req.method == "initialize" && outcome.is_ok())
            .then(|| env.session.negotiated())
            .flatten();
        if let Some(version) = initialized {
            crate::telemetry::annotate(&span, "mcp.protocol.version", version);
        }
        let id = req.id.clone()?;
        self.observe_request(
            &span,
            (&req.method, None),
            Verdict::of_read(&outcome),
            env,
            started,
        );
        self.send_updates(outcome.is_ok(), env);
        let response = self.response(id, outcome).in_era(served);
        Some(Response {
            initialized,
            ..response
        })
    }

    fn route(&self, req: &Request, era: Era, env: &Env<'_>) -> Result<Answer, McpError> {
        let method = req.method.as_str();
        if era.is_modern() && revisions::REMOVED_IN_MODERN.contains(&method) {
            return Err(McpError::method_not_found(method));
        }
        match method {
            // The methods that can pass the guard chain, whose answer carries the budget.
            "prompts/get" => self.get_prompt(req, era, env),
            "completion/complete" => self.complete(req, env),
            "resources/read" => self.read_resource(req, env),
            _ => self.route_uncharged(req, era, env).map(Answer::uncharged),
        }
    }

    /// The methods that are never charged to the rate counters.
    fn route_uncharged(&self, req: &Request, era: Era, env: &Env<'_>) -> Result<Value, McpError> {
        match req.method.as_str() {
            "initialize" => self.initialize(req, env.session),
            "ping" => Ok(Server::ping()),
            "notifications/initialized" | "notifications/cancelled" => {
                Server::notification(req, env.session);
                Ok(Value::Null)
            }
            "server/discover" if era.is_modern() => Ok(self.discover()),
            "logging/setLevel" if self.registry().has_logging_tools() => {
                self.authenticate(env)?;
                set_log_level(req, env.session)
            }
            "tools/list" => {
                let principal = self.authenticate(env)?;
                self.list_tools(req, &principal)
            }
            "resources/list" => {
                let principal = self.authenticate(env)?;
                self.list_resources(req, &principal)
            }
            "resources/templates/list" => {
                let principal = self.authenticate(env)?;
                self.list_resource_templates(req, &principal)
            }
            // Announced, and answered, only when some resource can change.
            "resources/subscribe" | "resources/unsubscribe" if self.can_subscribe() => {
                self.subscription(req, env)
            }
            "prompts/list" => {
                let principal = self.authenticate(env)?;
                self.list_prompts(req, &principal)
            }
            other => Err(McpError::method_not_found(other)),
        }
    }
}
