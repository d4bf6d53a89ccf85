//! The dispatcher shared by every transport: the [`Message`]s of one read in
//! ([`Server::handle`], the one entry point of every transport and of the fuzzer), each
//! [`Response`] out as soon as it is ready.
//!
//! It selects the protocol era of each request (here only: a transport asks a message what
//! kind it is, [`Message::kind`], and never looks into it), routes the MCP methods, runs
//! `tools/call` through the guard chain — and `prompts/get` and `completion/complete` too
//! when what they answer reads business data (the prompt's [`DataAccess`] declarations;
//! the other methods read only the registry and static documents). Errors become wire
//! bodies in this module and its `tool_call` child (the `tools/call` handler): the typed
//! [`CallOutcome`](crate::guards::outcome::CallOutcome) of the guard chain is rendered
//! once, in `render_call_outcome` — a guard refusal or a server fault as a JSON-RPC
//! error, a tool failure as an `isError` result, a success or a replay as the tool's
//! result — with the `_meta` of the call (the rate budget, the replay mark, the book).

mod tool_call;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use serde_json::{Map, Value, json};

use crate::catalog::McpError;
use crate::clock::Clock;
use crate::config::Locale;
use crate::guards::auth::Principal;
use crate::guards::ratelimit::Budget;
use crate::guards::{Caller, DataRead, Guards, META_RATELIMIT, RunRead, ToolCall};
use crate::protocol::client::Notifier;
use crate::protocol::dispatch::tool_call::{ToolRequest, mark, render_call_outcome};
use crate::protocol::inbound::{Message, Response, request_span};
use crate::protocol::jsonrpc::{self, Incoming, Parsed, Request, RequestId};
use crate::protocol::pagination::{paginate, with_cursor};
use crate::protocol::revisions::{
    self, Era, Session, Subscribers, client_capabilities, finish_result, select_era, server_info,
};
use crate::store::Store;
use crate::tools::backends::Backends;
use crate::tools::request_state::StateKey;
use crate::tools::{Book, DataAccess, InputContext, LogLevel, PromptReply, PromptSpec, Registry};

/// Which transport a request arrived on (recorded in the audit log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Newline-delimited JSON on stdin/stdout.
    Stdio,
    /// Streamable HTTP.
    Http,
}

impl Transport {
    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }
}

/// What the transport knows about the request besides its body.
pub struct Env<'a> {
    /// The connection state (the stdio process or one HTTP session).
    pub session: &'a Session,
    /// Where progress and log notifications of this request go.
    pub notifier: &'a dyn Notifier,
    /// The transport.
    pub transport: Transport,
    /// The presented credential (stdio: from the environment; HTTP: the bearer token).
    pub token: Option<&'a str>,
    /// Development mode: the public id of the credential that requests without a token
    /// run as (HTTP on loopback only; never set by default).
    pub dev_credential: Option<&'a str>,
    /// Who is asking, for throttling failed authentication (peer address, or `stdio:<pid>`).
    pub source: String,
    /// An `Idempotency-Key` header, when the transport has one.
    pub idempotency_header: Option<&'a str>,
}

impl Env<'_> {
    /// Who is calling, as the guard chain sees it.
    pub fn caller(&self) -> Caller<'_> {
        Caller {
            token: self.token,
            dev_credential: self.dev_credential,
            source: &self.source,
            idempotency_header: self.idempotency_header,
            transport: self.transport.as_str(),
        }
    }
}

/// The MCP server: registry, guards and store behind one entry point.
pub struct Server {
    /// What the server offers now: replaced whole when a backend's list of tools changes,
    /// so a request works on one snapshot from start to end.
    registry: RwLock<Arc<Registry>>,
    /// How many times the registry was replaced; a session told of an older one is sent
    /// `notifications/tools/list_changed`.
    generation: AtomicU64,
    /// The company's systems behind the gate (none by default).
    backends: Arc<Backends>,
    store: Store,
    guards: Guards,
    locale: Locale,
    instructions: String,
    state_key: StateKey,
    clock: Clock,
    /// The sessions subscribed to resources that can change.
    subscribers: Subscribers,
}

impl Server {
    /// Assembles a server; `state_key` seals multi-round request states; `clock` is the
    /// one the guards were built with, handed to tools and transports.
    pub fn new(
        registry: Registry,
        store: Store,
        guards: Guards,
        locale: Locale,
        state_key: StateKey,
        clock: Clock,
    ) -> Server {
        let instructions = "tollgate serves business tools behind guards. Errors carry a stable \
            `code` and a `hint`; guard rejections are JSON-RPC errors with the envelope in \
            `error.data`, tool failures are results with `isError: true` and the envelope in \
            `_meta[\"dev.tollgate/error\"]`. Read `retry_after` before retrying."
            .to_owned();
        Server {
            registry: RwLock::new(Arc::new(registry)),
            generation: AtomicU64::new(0),
            backends: Arc::new(Backends::none()),
            store,
            guards,
            locale,
            instructions,
            state_key,
            clock,
            subscribers: Subscribers::default(),
        }
    }

    /// The server's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The same server, with the tools of `backends` already in its registry.
    pub fn with_backends(mut self, backends: Arc<Backends>) -> Server {
        self.backends = backends;
        self
    }

    /// The registry now (a snapshot: a later change replaces it, never alters it).
    pub fn registry(&self) -> Arc<Registry> {
        match self.registry.read() {
            Ok(current) => Arc::clone(&current),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Replaces the registry (a backend's list of tools changed); every session is told
    /// with `notifications/tools/list_changed` on its next stream that can carry it.
    pub fn replace_registry(&self, registry: Registry) {
        let mut current = match self.registry.write() {
            Ok(current) => current,
            Err(poisoned) => poisoned.into_inner(),
        };
        *current = Arc::new(registry);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The backends behind the gate.
    pub fn backends(&self) -> &Backends {
        &self.backends
    }

    /// The guard chain.
    pub fn guards(&self) -> &Guards {
        &self.guards
    }

    /// The database.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The locale of hints.
    pub fn locale(&self) -> Locale {
        self.locale
    }

    /// Handles the messages of one read (one HTTP body, or several stdio lines that
    /// arrived together), each as if on its own, handing every response to `respond` as
    /// soon as it is ready. This is the entry point of every transport. The `tools/call`
    /// requests among them go through the guard chain together ([`Guards::call_tools`]),
    /// so that they share one rate-charging wait; the other messages are handled first.
    /// (So a `notifications/cancelled` read together with the call it names finds that
    /// call not started yet, and nothing to cancel: MCP lets a server ignore a
    /// cancellation; the call runs and is answered.)
    pub fn handle(
        &self,
        messages: Vec<Message>,
        env: &Env<'_>,
        respond: &(dyn Fn(Response) + Sync),
    ) {
        let mut calls = Vec::with_capacity(messages.len());
        for message in messages {
            match message.into_parsed() {
                Parsed::Single(Incoming::Request(req))
                    if req.method == "tools/call" && req.id.is_some() =>
                {
                    calls.push(req);
                }
                parsed => self
                    .handle_parsed(parsed, env)
                    .into_iter()
                    .for_each(respond),
            }
        }
        let mut requests = Vec::with_capacity(calls.len());
        for req in &calls {
            let span = request_span(req);
            let parsed = span.in_scope(|| {
                select_era(req, env.session).and_then(|era| ToolRequest::parse(req, era, env))
            });
            match parsed {
                Ok(request) => requests.push(request.with_span(span)),
                Err(err) => respond(self.error_response(req.id.clone(), err)),
            }
        }
        let tool_calls: Vec<ToolCall<'_>> = requests.iter().map(ToolRequest::call).collect();
        self.guards.call_tools(
            &self.registry(),
            &tool_calls,
            &env.caller(),
            &|i, tool, args, book, hook| self.run_tool(&requests[i], env, tool, args, book, hook),
            &|i, outcome| {
                let request = &requests[i];
                let outcome = render_call_outcome(outcome, self.locale).map(|answer| Answer {
                    result: finish_result(answer.result, request.era, "tools/call"),
                    ..answer
                });
                self.send_updates(outcome.is_ok(), env);
                respond(
                    self.response(request.id.clone(), outcome)
                        .in_era(Some(request.era)),
                );
            },
        );
    }

    /// [`Server::handle`] for a single message (an HTTP body): its response, if it has one.
    pub fn handle_one(&self, message: Message, env: &Env<'_>) -> Option<Response> {
        let response = std::sync::Mutex::new(None);
        self.handle(vec![message], env, &|r| {
            *response.lock().unwrap_or_else(PoisonError::into_inner) = Some(r);
        });
        response
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The error response to the request `id`. Transports use it for failures they detect
    /// themselves (an oversized line, a bad header).
    pub fn error_response(&self, id: Option<RequestId>, err: McpError) -> Response {
        let body = self.error_body(id, &err);
        Response {
            error: Some(err),
            ..Response::of(body)
        }
    }

    fn handle_parsed(&self, parsed: Parsed, env: &Env<'_>) -> Option<Response> {
        match parsed {
            Parsed::NotJson => Some(self.error_response(None, McpError::parse_error())),
            Parsed::Single(incoming) => self.handle_incoming(incoming, env),
            Parsed::Batch(items) => self.handle_batch(items, env),
        }
    }

    /// A JSON-RPC error response body.
    fn error_body(&self, id: Option<RequestId>, err: &McpError) -> Value {
        jsonrpc::failure(id, err.to_jsonrpc_error(self.locale))
    }

    /// Handles a JSON-RPC batch (accepted only on the revision that allows batches). A
    /// refused batch is answered with one error; an accepted one with the array of its
    /// responses, or with nothing when it held only notifications and answers.
    fn handle_batch(&self, items: Vec<Incoming>, env: &Env<'_>) -> Option<Response> {
        if env.session.negotiated() != Some(revisions::BATCH_VERSION) {
            let err = McpError::invalid_request("batch_not_allowed");
            return Some(self.error_response(None, err));
        }
        let responses: Vec<Value> = items
            .into_iter()
            .filter_map(|item| match item {
                Incoming::Request(req) if req.method == "initialize" => {
                    Some(self.error_body(req.id, &McpError::invalid_request("initialize_in_batch")))
                }
                other => self.handle_incoming(other, env).map(|r| r.body),
            })
            .collect();
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

    fn handle_request(&self, req: Request, env: &Env<'_>) -> Option<Response> {
        // Every log line of this request carries its id (never its params or token).
        let _span = request_span(&req).entered();
        let era = select_era(&req, env.session);
        let served = era.as_ref().ok().copied();
        let outcome = era.and_then(|era| {
            self.route(&req, era, env).map(|answer| Answer {
                result: finish_result(answer.result, era, &req.method),
                ..answer
            })
        });
        let initialized = (req.method == "initialize" && outcome.is_ok())
            .then(|| env.session.negotiated())
            .flatten();
        let id = req.id?;
        self.send_updates(outcome.is_ok(), env);
        let response = self.response(id, outcome).in_era(served);
        Some(Response {
            initialized,
            ..response
        })
    }

    /// The response to the request `id`.
    fn response(&self, id: RequestId, outcome: Result<Answer, McpError>) -> Response {
        match outcome {
            Ok(answer) => Response {
                budget: answer.budget,
                refusal: answer.refusal,
                ..Response::of(jsonrpc::success(id, answer.result))
            },
            Err(err) => self.error_response(Some(id), err),
        }
    }

    fn route(&self, req: &Request, era: Era, env: &Env<'_>) -> Result<Answer, McpError> {
        let method = req.method.as_str();
        if era.is_modern() && revisions::REMOVED_IN_MODERN.contains(&method) {
            return Err(McpError::method_not_found(method));
        }
        match method {
            // The methods that can pass the guard chain, whose answer carries the budget.
            "tools/call" => self.call_tool(req, era, env),
            "prompts/get" => self.get_prompt(req, era, env),
            "completion/complete" => self.complete(req, env),
            _ => self.route_uncharged(req, era, env).map(Answer::uncharged),
        }
    }

    /// The methods that are never charged to the rate counters.
    fn route_uncharged(&self, req: &Request, era: Era, env: &Env<'_>) -> Result<Value, McpError> {
        match req.method.as_str() {
            "initialize" => self.initialize(req, env.session),
            "ping" => Ok(json!({})),
            "notifications/initialized" | "notifications/cancelled" => {
                self.notification(req, env.session);
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
                self.authenticate(env)?;
                self.list_resources(req)
            }
            "resources/templates/list" => {
                self.authenticate(env)?;
                let templates = self.registry().resource_templates();
                let (page, next) = paginate(templates, req, "templates")?;
                Ok(with_cursor(json!({ "resourceTemplates": page }), next))
            }
            "resources/read" => {
                self.authenticate(env)?;
                self.read_resource(req)
            }
            // Announced, and answered, only when some resource can change.
            "resources/subscribe" | "resources/unsubscribe"
                if self.registry().has_changing_resources() =>
            {
                self.authenticate(env)?;
                self.subscription(req, env.session)
            }
            "prompts/list" => {
                let principal = self.authenticate(env)?;
                self.list_prompts(req, &principal)
            }
            other => Err(McpError::method_not_found(other)),
        }
    }

    fn authenticate(&self, env: &Env<'_>) -> Result<Principal, McpError> {
        self.guards.authenticate(&env.caller())
    }

    fn initialize(&self, req: &Request, session: &Session) -> Result<Value, McpError> {
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
            "instructions": self.instructions,
        }))
    }

    fn notification(&self, req: &Request, session: &Session) {
        if req.method == "notifications/cancelled"
            && let Some(id) = req.params.get("requestId")
        {
            session.cancel(id);
        }
    }

    fn discover(&self) -> Value {
        let mut supported: Vec<&str> = revisions::MODERN_VERSIONS.to_vec();
        supported.extend(revisions::LEGACY_VERSIONS.iter().rev());
        json!({
            "supportedVersions": supported,
            "capabilities": self.capabilities(Era::Modern(revisions::MODERN_VERSIONS[0])),
            "serverInfo": server_info(),
            "instructions": self.instructions,
        })
    }

    fn list_tools(&self, req: &Request, principal: &Principal) -> Result<Value, McpError> {
        let visibility = self.guards.visibility(principal);
        let visible: Vec<Value> = self
            .registry()
            .tools()
            .iter()
            .filter(|t| visibility.can_see(t.spec()))
            .map(|t| t.spec().to_list_entry())
            .collect();
        let (page, next) = paginate(visible, req, "tools")?;
        Ok(with_cursor(json!({ "tools": page }), next))
    }

    fn list_resources(&self, req: &Request) -> Result<Value, McpError> {
        let all: Vec<Value> = self
            .registry()
            .resources()
            .into_iter()
            .map(|r| {
                json!({ "uri": r.uri, "name": r.name, "title": r.title,
                        "description": r.description, "mimeType": r.mime_type })
            })
            .collect();
        let (page, next) = paginate(all, req, "resources")?;
        Ok(with_cursor(json!({ "resources": page }), next))
    }

    fn read_resource(&self, req: &Request) -> Result<Value, McpError> {
        let uri = req
            .params
            .get("uri")
            .and_then(Value::as_str)
            .ok_or_else(|| McpError::invalid_params("uri"))?;
        let (mime, body) = self
            .registry()
            .read_resource(uri)
            .ok_or_else(|| McpError::resource_not_found(uri).with("uri", uri))?;
        let mut content = json!({ "uri": uri, "mimeType": mime });
        match body {
            crate::tools::ResourceBody::Text(text) => content["text"] = json!(text),
            crate::tools::ResourceBody::Blob(bytes) => {
                use base64::Engine as _;
                content["blob"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
            }
        }
        Ok(json!({ "contents": [content] }))
    }

    fn subscription(&self, req: &Request, session: &Session) -> Result<Value, McpError> {
        let uri = req
            .params
            .get("uri")
            .and_then(Value::as_str)
            .ok_or_else(|| McpError::invalid_params("uri"))?;
        if req.method == "resources/subscribe" {
            if self.registry().read_resource(uri).is_none() {
                return Err(McpError::resource_not_found(uri).with("uri", uri));
            }
            // A resource that never changes will never be updated: nothing to record.
            if self.registry().resource_changes(uri) {
                session.subscribe(uri, &self.subscribers);
            }
        } else {
            session.unsubscribe(uri);
        }
        Ok(json!({}))
    }

    /// The prompts `principal` may get: those that read no business data, and those whose
    /// data's read tool it would see in `tools/list`.
    fn list_prompts(&self, req: &Request, principal: &Principal) -> Result<Value, McpError> {
        let visibility = self.guards.visibility(principal);
        let registry = self.registry();
        let all: Vec<Value> = registry
            .prompts()
            .iter()
            .filter(|p| {
                p.spec().reads.is_none_or(|access| {
                    registry
                        .reader(&access)
                        .is_some_and(|tool| visibility.can_see(tool.spec()))
                })
            })
            .map(|p| {
                let s = p.spec();
                let args: Vec<Value> = s
                    .arguments
                    .iter()
                    .map(|a| json!({ "name": a.name, "description": a.description, "required": a.required }))
                    .collect();
                json!({ "name": s.name, "title": s.title, "description": s.description, "arguments": args })
            })
            .collect();
        let (page, next) = paginate(all, req, "prompts")?;
        Ok(with_cursor(json!({ "prompts": page }), next))
    }

    /// `prompts/get`. A prompt whose messages read business data passes the guard chain
    /// ([`Guards::read_data`]); any other (or an unknown name) needs only authentication.
    /// Required arguments are checked once the caller is admitted, as a tool's arguments
    /// are validated after its guards.
    fn get_prompt(&self, req: &Request, era: Era, env: &Env<'_>) -> Result<Answer, McpError> {
        let (name, args) = tool_call::name_and_arguments(req)?;
        let args = args.clone();
        let (responses, request_state) = input_params(req)?;
        let client_capabilities = client_capabilities(req, era, env.session);
        let registry = self.registry();
        let prompt = registry.prompt(name);
        let render = |principal: &Principal| {
            let prompt = prompt.ok_or_else(|| {
                McpError::invalid_params("name").detail("reason", "unknown_prompt")
            })?;
            check_required_arguments(prompt.spec(), &args)?;
            let input = InputContext {
                responses,
                request_state,
                client_capabilities: &client_capabilities,
                state_key: &self.state_key,
            };
            let book = Book::from(principal.mode);
            Ok(match prompt.get(book, &args, &input)? {
                PromptReply::Messages(messages) => json!({
                    "description": prompt.spec().description,
                    "messages": messages,
                }),
                PromptReply::InputRequired(request) => request.into_result(),
            })
        };
        match prompt.and_then(|p| p.spec().reads) {
            Some(access) => {
                self.read_data(req, &format!("prompts/get {name}"), access, env, &render)
            }
            None => render(&self.authenticate(env)?).map(Answer::uncharged),
        }
    }

    /// `completion/complete`. Values are offered only for arguments the prompt declares;
    /// an argument whose completions read business data passes the guard chain
    /// ([`Guards::read_data`]); any other, and `ref/resource` (no resource here has
    /// completable parameters), needs only authentication.
    fn complete(&self, req: &Request, env: &Env<'_>) -> Result<Answer, McpError> {
        let reference = req
            .params
            .get("ref")
            .and_then(Value::as_object)
            .ok_or_else(|| McpError::invalid_params("ref"))?;
        let argument = req
            .params
            .get("argument")
            .and_then(Value::as_object)
            .ok_or_else(|| McpError::invalid_params("argument"))?;
        let arg_name = argument.get("name").and_then(Value::as_str).unwrap_or("");
        let arg_value = argument.get("value").and_then(Value::as_str).unwrap_or("");
        match reference.get("type").and_then(Value::as_str) {
            Some("ref/prompt") => {}
            Some("ref/resource") => {
                self.authenticate(env)?;
                return Ok(Answer::uncharged(completion_result(Vec::new())));
            }
            _ => return Err(McpError::invalid_params("ref.type")),
        }
        let name = reference.get("name").and_then(Value::as_str).unwrap_or("");
        let registry = self.registry();
        let prompt = registry.prompt(name);
        let declared = prompt.and_then(|p| p.spec().arguments.iter().find(|a| a.name == arg_name));
        let values = |principal: &Principal| {
            let prompt = prompt.ok_or_else(|| McpError::invalid_params("ref.name"))?;
            let values = match declared {
                Some(_) => prompt.complete(Book::from(principal.mode), arg_name, arg_value),
                None => Vec::new(),
            };
            Ok(completion_result(values))
        };
        match declared.and_then(|a| a.completes_from) {
            Some(access) => {
                let audit_name = format!("completion/complete {name}.{arg_name}");
                self.read_data(req, &audit_name, access, env, &values)
            }
            None => values(&self.authenticate(env)?).map(Answer::uncharged),
        }
    }

    /// Runs a request that reads business data through the guard chain.
    fn read_data(
        &self,
        req: &Request,
        audit_name: &str,
        access: DataAccess,
        env: &Env<'_>,
        run: &RunRead<'_>,
    ) -> Result<Answer, McpError> {
        let request_id = req.id.clone().unwrap_or(Value::Null);
        let read = DataRead {
            audit_name,
            access,
            request_id: &request_id,
        };
        let (mut result, budget) =
            self.guards
                .read_data(&self.registry(), &read, &env.caller(), run)?;
        mark(&mut result, META_RATELIMIT, budget.to_meta());
        Ok(Answer {
            result,
            budget: Some(budget),
            refusal: None,
        })
    }
}

/// `invalid_params` naming the first required argument of `spec` that `args` lacks.
fn check_required_arguments(spec: &PromptSpec, args: &Map<String, Value>) -> Result<(), McpError> {
    for arg in spec.arguments.iter().filter(|a| a.required) {
        if !args.get(arg.name).is_some_and(Value::is_string) {
            return Err(McpError::invalid_params(arg.name).detail("reason", "missing_argument"));
        }
    }
    Ok(())
}

/// A `completion/complete` result: the first 100 values, and how many there are.
fn completion_result(values: Vec<String>) -> Value {
    let total = values.len();
    let values: Vec<String> = values.into_iter().take(100).collect();
    json!({ "completion": { "values": values, "total": total, "hasMore": total > 100 } })
}

/// `inputResponses` and `requestState`, as sent.
pub(super) type InputParams<'a> = (Option<&'a Map<String, Value>>, Option<&'a str>);

/// `inputResponses` and `requestState` of a multi-round call; a present but malformed
/// value (e.g. `null`) is `-32602`, never a silent first round.
pub(super) fn input_params(req: &Request) -> Result<InputParams<'_>, McpError> {
    let responses = match req.params.get("inputResponses") {
        None => None,
        Some(Value::Object(map)) => Some(map),
        Some(_) => return Err(McpError::invalid_params("inputResponses")),
    };
    let state = match req.params.get("requestState") {
        None => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(McpError::invalid_params("requestState")),
    };
    Ok((responses, state))
}

fn set_log_level(req: &Request, session: &Session) -> Result<Value, McpError> {
    let level = req
        .params
        .get("level")
        .and_then(Value::as_str)
        .and_then(LogLevel::parse)
        .ok_or_else(|| McpError::invalid_params("level"))?;
    session.set_log_level(level);
    Ok(json!({}))
}

impl Server {
    /// What the server announces. Tools change while the process runs only when an
    /// upstream MCP server is behind the gate (its list can change), so `tools.listChanged`
    /// is announced only then; nothing else changes its list; `resources.subscribe`
    /// (handshake era only: 2026-07-28 removed the method) only when some resource can
    /// change, for nothing else is ever updated; and `logging` only when some tool sends log
    /// messages, for otherwise a level would govern nothing.
    fn capabilities(&self, era: Era) -> Value {
        let registry = self.registry();
        let resources = if !era.is_modern() && registry.has_changing_resources() {
            json!({ "subscribe": true, "listChanged": false })
        } else {
            json!({ "listChanged": false })
        };
        let mut capabilities = json!({
            "tools": { "listChanged": self.backends.tools_can_change() },
            "resources": resources,
            "prompts": { "listChanged": false },
            "completions": {},
        });
        if registry.has_logging_tools() {
            capabilities["logging"] = json!({});
        }
        capabilities
    }

    /// Sends the session's queued `notifications/resources/updated`, and
    /// `notifications/tools/list_changed` when the registry was replaced since the session
    /// was last told, ahead of a successful response, on a stream that can carry them;
    /// otherwise they wait for a later one (an error keeps its plain reply and HTTP status).
    fn send_updates(&self, succeeded: bool, env: &Env<'_>) {
        if succeeded && env.notifier.delivers() {
            for update in env.session.take_updates() {
                env.notifier.notify(update);
            }
            let generation = self.generation.load(Ordering::Acquire);
            if env.session.tools_changed_since(generation) {
                env.notifier.notify(jsonrpc::notification(
                    "notifications/tools/list_changed",
                    json!({}),
                ));
            }
        }
    }
}

/// The result of a request, with what is left of the caller's rate budget when the
/// request was charged (typed for the transport's headers, never read back from the body).
pub(super) struct Answer {
    pub(super) result: Value,
    pub(super) budget: Option<Budget>,
    /// A guard refusal answered as an `isError` result (the `tool_result` guard channel):
    /// the transport sends its rate-limit headers, not a status of its own.
    pub(super) refusal: Option<McpError>,
}

impl Answer {
    /// The result of a request that charged nothing.
    fn uncharged(result: Value) -> Answer {
        Answer {
            result,
            budget: None,
            refusal: None,
        }
    }
}
