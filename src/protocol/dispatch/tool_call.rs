//! The one route of every `tools/call`: the requests taken apart ([`ToolRequest`]), run
//! through the guard chain together with their tool's context around each admitted call,
//! and each typed outcome rendered once ([`render_call_outcome`]): the one place that
//! decides whether a refusal travels as a JSON-RPC error or, on the `tool_result` guard
//! channel, as an `isError` result. A `tools/call` without an id is a notification, which
//! JSON-RPC never answers and MCP does not define: it runs nothing (no tool, no charge, no
//! audit row) and is answered with nothing.

use std::time::Instant;

use serde_json::{Map, Value};

use super::observed::note_era;
use super::{Answer, Env, Server};
use crate::catalog::McpError;
use crate::config::{GuardChannel, Locale};
use crate::guards::outcome::{Addressee, CallOutcome, Output, Verdict};
use crate::guards::ratelimit::Budget;
use crate::guards::{META_MODE, META_RATELIMIT, META_REPLAY, ToolCall};
use crate::protocol::client::RequestClient;
use crate::protocol::inbound::{Response, request_span};
use crate::protocol::jsonrpc::{Request, RequestId};
use crate::protocol::revisions::{
    Era, call_log_level, client_capabilities, finish_result, meta, select_era,
};
use crate::tools::{Book, CommitHook, InputContext, LogLevel, RegisteredTool, ToolContext};

impl Server {
    /// Runs the `tools/call` messages of one read through the guard chain together
    /// ([`Guards::call_tools`](crate::guards::Guards::call_tools)), handing each response
    /// to `respond` as soon as it is ready. The notifications among them run nothing.
    pub(super) fn call_tools(
        &self,
        calls: Vec<Request>,
        env: &Env<'_>,
        respond: &(dyn Fn(Response) + Sync),
    ) {
        let calls: Vec<(RequestId, Request)> = calls.into_iter().filter_map(answerable).collect();
        let mut requests = Vec::with_capacity(calls.len());
        for (id, req) in &calls {
            let started = Instant::now();
            let span = request_span(req, Some(&env.server_request(req)));
            let parsed = span.in_scope(|| {
                select_era(req, env.session)
                    .and_then(|era| ToolRequest::parse(req, id.clone(), era, env))
            });
            match parsed {
                Ok(request) => {
                    note_era(&span, Some(request.era));
                    requests.push(request.with_span(span, started));
                }
                Err(err) => {
                    let name = req.params.get("name").and_then(Value::as_str);
                    let verdict = Verdict::Rejected(&err);
                    self.observe_request(&span, ("tools/call", name), verdict, env, started);
                    respond(self.error_response(Some(id.clone()), err));
                }
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
                if let Some((span, started)) = &request.span {
                    let name = ("tools/call", Some(request.name));
                    self.observe_request(span, name, outcome.verdict(), env, *started);
                }
                if let CallOutcome::Rejected { error, .. } = &outcome {
                    offer_approval_url(error, request, env, self.locale);
                }
                let outcome = render_call_outcome(outcome, self.locale).map(|answer| Answer {
                    result: finish_result(answer.result, request.era, "tools/call"),
                    ..answer
                });
                if let Some((span, _)) = &request.span {
                    record_call_content(span, request.args, outcome.as_ref().ok());
                }
                self.send_updates(outcome.is_ok(), env);
                respond(
                    self.response(request.id.clone(), outcome)
                        .in_era(Some(request.era)),
                );
            },
        );
    }

    /// Runs an admitted tool in the context of its request.
    fn run_tool(
        &self,
        request: &ToolRequest<'_>,
        env: &Env<'_>,
        tool: &RegisteredTool,
        args: &Map<String, Value>,
        book: Book,
        hook: Option<&dyn CommitHook>,
    ) -> Result<crate::tools::ToolOutput, McpError> {
        let cancelled = env.session.begin(&request.id);
        let (responses, request_state) = request.input;
        let client = RequestClient {
            session: env.session,
            subscribers: &self.subscribers,
            notifier: env.notifier,
            era: request.era,
        };
        let ctx = ToolContext {
            store: &self.store,
            book,
            locale: self.locale,
            clock: &self.clock,
            progress_token: request.progress_token.clone(),
            log_level: request.log_level,
            client: &client,
            cancelled: &cancelled,
            commit_hook: hook,
            input: InputContext {
                responses,
                request_state,
                client_capabilities: &request.client_capabilities,
                state_key: &self.state_key,
            },
            meta: meta(request.req),
        };
        let outcome = tool.tool.call(&ctx, args);
        env.session.finish(&request.id);
        outcome
    }
}

/// The first revision with URL-mode elicitation.
const URL_ELICITATION_SINCE: &str = "2025-11-25";

/// For an `approval_required` refusal of a client that declared URL-mode elicitation
/// (`elicitation.url`, 2025-11-25 and later), sends the approval's page as an
/// `elicitation/create` of mode `url` on the request's stream before the refusal, so that
/// a host can open it for its user. The refusal does not wait for the answer (the person
/// decides in the console, and the model retries); the answer, when it comes, is dropped.
fn offer_approval_url(error: &McpError, request: &ToolRequest<'_>, env: &Env<'_>, locale: Locale) {
    let Era::Legacy(version) = request.era else {
        return;
    };
    let url_mode = request
        .client_capabilities
        .pointer("/elicitation/url")
        .is_some_and(|url| !url.is_null());
    if error.kind() != crate::catalog::ErrorKind::ApprovalRequired
        || version < URL_ELICITATION_SINCE
        || !url_mode
        || !env.notifier.delivers()
    {
        return;
    }
    let (Some(url), Some(id)) = (
        error.fields().get("approval_url").and_then(Value::as_str),
        error.fields().get("approval_id").and_then(Value::as_str),
    ) else {
        return;
    };
    let (request_id, _answer) = env.session.expect_response();
    env.session.abandon(&request_id);
    let params = serde_json::json!({
        "mode": "url", "elicitationId": id, "url": url, "message": error.hint(locale),
    });
    env.notifier.notify(crate::protocol::jsonrpc::request(
        request_id,
        "elicitation/create",
        params,
    ));
}

/// The longest arguments or result text put on a span.
const RECORDED_BYTES: usize = 4096;

/// Puts a call's arguments (without tollgate's idempotency key) and result on its span,
/// when the operator opted in (`telemetry.record_arguments`): they may hold personal data.
/// A backend's credential never appears in either.
fn record_call_content(span: &tracing::Span, args: &Map<String, Value>, answer: Option<&Answer>) {
    if !crate::telemetry::records_arguments() {
        return;
    }
    let clipped = |mut text: String| {
        if text.len() > RECORDED_BYTES {
            let cut = (0..=RECORDED_BYTES)
                .rev()
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(0);
            text.truncate(cut);
        }
        text
    };
    let mut forwarded = args.clone();
    forwarded.remove(crate::tools::schema::KEY_ARGUMENT);
    let arguments = Value::Object(forwarded).to_string();
    crate::telemetry::annotate(span, "gen_ai.tool.call.arguments", clipped(arguments));
    if let Some(answer) = answer {
        let result = answer.result.to_string();
        crate::telemetry::annotate(span, "gen_ai.tool.call.result", clipped(result));
    }
}

/// A `tools/call` to run and answer, with its id. One without an id is logged and
/// dropped: run, it would charge, audit and act in the name of a caller who can never learn
/// the outcome, and MCP defines no `tools/call` notification.
fn answerable(req: Request) -> Option<(RequestId, Request)> {
    match req.id.clone() {
        Some(id) => Some((id, req)),
        None => {
            request_span(&req, None).in_scope(|| {
                tracing::warn!(
                    "a tools/call without an id is a notification: not run, not answered"
                );
            });
            None
        }
    }
}

/// A `tools/call` request taken apart: the guard chain's view of it and what its tool
/// context needs.
struct ToolRequest<'q> {
    req: &'q Request,
    name: &'q str,
    args: &'q Map<String, Value>,
    id: RequestId,
    era: Era,
    progress_token: Option<Value>,
    log_level: Option<LogLevel>,
    input: InputParams<'q>,
    client_capabilities: Value,
    /// Its own log span (it is handled beside the others of its read), and when it
    /// started.
    span: Option<(tracing::Span, Instant)>,
}

impl<'q> ToolRequest<'q> {
    fn parse(
        req: &'q Request,
        id: RequestId,
        era: Era,
        env: &Env<'_>,
    ) -> Result<ToolRequest<'q>, McpError> {
        let (name, args) = name_and_arguments(req)?;
        Ok(ToolRequest {
            req,
            name,
            args,
            id,
            era,
            progress_token: meta(req).and_then(|m| m.get("progressToken")).cloned(),
            log_level: call_log_level(req, era, env.session),
            input: input_params(req)?,
            client_capabilities: client_capabilities(req, era, env.session),
            span: None,
        })
    }

    /// The same request, logging under its own `span` (it is handled beside others),
    /// started at `started`.
    fn with_span(self, span: tracing::Span, started: Instant) -> ToolRequest<'q> {
        ToolRequest {
            span: Some((span, started)),
            ..self
        }
    }

    fn call(&self) -> ToolCall<'_> {
        ToolCall {
            name: self.name,
            args: self.args,
            meta: meta(self.req),
            request_id: &self.id,
            span: self.span.as_ref().map(|(span, _)| span),
        }
    }
}

/// Renders the outcome of a `tools/call`: the tool's result (fresh, replayed as stored, or
/// the `isError` result of its failure) with the budget left and the book that served it in
/// `_meta`; for a refusal, a JSON-RPC error — or, when its caller's guard channel is
/// `tool_result` and the model can act on it ([`McpError::model_can_act`]), an `isError`
/// result whose envelope also names the JSON-RPC code it would have had.
fn render_call_outcome(outcome: CallOutcome, locale: Locale) -> Result<Answer, McpError> {
    let budget = outcome.budget().cloned();
    let (mut result, book) = match outcome {
        CallOutcome::Rejected { error, to: None } => return Err(error),
        CallOutcome::Rejected {
            error,
            to: Some(to),
        } => return render_refusal(error, to, locale),
        CallOutcome::Admitted {
            output: Output::Fresh(output),
            book,
            ..
        } => (output.into_result(), book),
        CallOutcome::Admitted {
            output: Output::Replayed(stored),
            book,
            ..
        } => {
            let mut result = stored.result;
            mark(&mut result, META_REPLAY, Value::Bool(true));
            (result, book)
        }
        CallOutcome::ToolFailed { error, book, .. } => (error.to_tool_result(locale), book),
    };
    mark_call(&mut result, budget.as_ref(), book);
    Ok(Answer {
        result,
        budget,
        refusal: None,
    })
}

/// A refusal of a known caller, on its guard channel. As an `isError` result it carries
/// what a tool failure carries (the budget when the call was charged, the book) and keeps
/// the error beside it for the transport's rate-limit headers.
fn render_refusal(error: McpError, to: Addressee, locale: Locale) -> Result<Answer, McpError> {
    if to.channel != GuardChannel::ToolResult || !error.model_can_act() {
        return Err(error);
    }
    let mut result = error.to_refusal_result(locale);
    mark_call(&mut result, to.budget.as_ref(), to.book);
    Ok(Answer {
        result,
        budget: None,
        refusal: Some(error),
    })
}

/// The `_meta` every answered `tools/call` carries: the budget left (when it was charged),
/// then the book.
fn mark_call(result: &mut Value, budget: Option<&Budget>, book: Book) {
    if let Some(budget) = budget {
        mark(result, META_RATELIMIT, budget.to_meta());
    }
    mark(result, META_MODE, Value::from(book.as_str()));
}

/// `inputResponses` and `requestState`, as sent.
type InputParams<'a> = (Option<&'a Map<String, Value>>, Option<&'a str>);

/// `inputResponses` and `requestState` of a multi-round call or prompt; a present but
/// malformed value (e.g. `null`) is `-32602`, never a silent first round.
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

/// Sets one `_meta` entry on a result object.
pub(super) fn mark(result: &mut Value, key: &str, value: Value) {
    if let Value::Object(map) = result {
        let meta = map
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(key.to_owned(), value);
        }
    }
}

/// The `name` and `arguments` of a `tools/call` or `prompts/get` (absent or `null`
/// arguments are none), or the `invalid_params` error naming the field at fault.
pub(super) fn name_and_arguments(req: &Request) -> Result<(&str, &Map<String, Value>), McpError> {
    static NO_ARGUMENTS: std::sync::LazyLock<Map<String, Value>> =
        std::sync::LazyLock::new(Map::new);
    let name = req
        .params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::invalid_params("name"))?;
    let args = match req.params.get("arguments") {
        None | Some(Value::Null) => &*NO_ARGUMENTS,
        Some(Value::Object(map)) => map,
        Some(_) => return Err(McpError::invalid_params("arguments")),
    };
    Ok((name, args))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;
    use crate::protocol::dispatch::testing::{Fixture, request};
    use crate::protocol::inbound::Message;
    use crate::protocol::revisions::{LATEST_LEGACY, Session};

    /// The responses `fx` gives to `messages` (each a JSON-RPC message) read together.
    fn handled(fx: &Fixture, session: &Session, messages: &[Value]) -> Vec<Value> {
        let messages = messages
            .iter()
            .map(|m| Message::parse(&serde_json::to_vec(m).expect("serialize")))
            .collect();
        let responses = Mutex::new(Vec::new());
        fx.server
            .handle(messages, &fx.env(session, Some(&fx.token)), &|r| {
                responses.lock().expect("lock").push(r.body);
            });
        responses.into_inner().expect("lock")
    }

    fn call(id: Option<i64>, name: &str, arguments: Value) -> Value {
        let mut call = json!({"jsonrpc": "2.0", "method": "tools/call",
                              "params": {"name": name, "arguments": arguments}});
        if let Some(id) = id {
            call["id"] = json!(id);
        }
        call
    }

    #[test]
    fn a_call_without_an_id_runs_nothing_and_is_not_answered() {
        let fx = Fixture::invoicing();
        let session = Session::new();
        assert!(session.initialize(LATEST_LEGACY, json!({})));
        let ghost = json!({"name": "Ghost SL"});
        let responses = handled(
            &fx,
            &session,
            &[
                call(None, "create_client", ghost.clone()),
                call(Some(2), "search_clients", json!({"query": "Ghost"})),
            ],
        );
        assert_eq!(responses.len(), 1, "{responses:?}");
        let search = &responses[0];
        assert_eq!(search["id"], json!(2), "{search}");
        assert_eq!(
            search["result"]["structuredContent"]["data"],
            json!([]),
            "{search}"
        );
        // The search is the first call its buckets counted: the notification charged none.
        let buckets = &search["result"]["_meta"][META_RATELIMIT]["buckets"];
        for bucket in buckets.as_array().expect("buckets") {
            let used = bucket["limit"].as_u64().expect("limit")
                - bucket["remaining"].as_u64().expect("remaining");
            assert_eq!(used, 1, "{bucket}");
        }
    }

    #[test]
    fn a_call_in_an_unknown_era_is_refused_with_its_id() {
        let fx = Fixture::invoicing();
        let responses = handled(
            &fx,
            &Session::new(),
            &[call(Some(5), "search_clients", json!({}))],
        );
        assert_eq!(responses.len(), 1, "{responses:?}");
        assert_eq!(responses[0]["id"], json!(5));
        assert!(responses[0]["error"].is_object(), "{}", responses[0]);
    }

    #[test]
    fn name_and_arguments_take_absent_or_null_arguments_as_none() {
        for params in [
            json!({"name": "t"}),
            json!({"name": "t", "arguments": null}),
        ] {
            let req = request("tools/call", params);
            let (name, args) = name_and_arguments(&req).expect("parsed");
            assert_eq!((name, args.len()), ("t", 0));
        }
        let no_name = request("tools/call", json!({"arguments": {}}));
        let err = name_and_arguments(&no_name).expect_err("no name");
        assert_eq!(err.fields()["param"], json!("name"));
        let list = request("tools/call", json!({"name": "t", "arguments": []}));
        let err = name_and_arguments(&list).expect_err("not an object");
        assert_eq!(err.fields()["param"], json!("arguments"));
    }

    #[test]
    fn malformed_multi_round_parameters_are_refused_never_a_first_round() {
        let first = request("tools/call", json!({"name": "t"}));
        assert_eq!(input_params(&first).expect("first round"), (None, None));
        let state = request("tools/call", json!({"name": "t", "requestState": "s"}));
        assert_eq!(input_params(&state).expect("later round").1, Some("s"));
        for (field, value) in [("inputResponses", json!(null)), ("requestState", json!(1))] {
            let req = request("tools/call", json!({"name": "t", field: value}));
            let err = input_params(&req).expect_err("malformed");
            assert_eq!(err.fields()["param"], json!(field));
        }
    }

    #[test]
    fn mark_sets_one_meta_entry_and_keeps_the_others() {
        let mut result = json!({"content": [], "_meta": {"a": 1}});
        mark(&mut result, "b", json!(2));
        assert_eq!(result["_meta"], json!({"a": 1, "b": 2}));
        let mut bare = json!({});
        mark(&mut bare, "c", json!(true));
        assert_eq!(bare, json!({"_meta": {"c": true}}));
    }
}
