//! The `tools/call` handler: a request taken apart ([`ToolRequest`]), run through the guard
//! chain with its tool's context around the admitted call, and its typed outcome rendered
//! once ([`render_call_outcome`]): the one place that decides whether a refusal travels as
//! a JSON-RPC error or, on the `tool_result` guard channel, as an `isError` result.

use serde_json::{Map, Value};

use crate::catalog::McpError;
use crate::config::{GuardChannel, Locale};
use crate::guards::outcome::{Addressee, CallOutcome, Output};
use crate::guards::ratelimit::Budget;
use crate::guards::{META_MODE, META_RATELIMIT, META_REPLAY, ToolCall};
use crate::protocol::client::RequestClient;
use crate::protocol::dispatch::{Answer, Env, InputParams, Server, input_params};
use crate::protocol::jsonrpc::{Request, RequestId};
use crate::protocol::revisions::{Era, call_log_level, client_capabilities, meta};
use crate::tools::{Book, CommitHook, InputContext, LogLevel, RegisteredTool, ToolContext};

impl Server {
    pub(super) fn call_tool(
        &self,
        req: &Request,
        era: Era,
        env: &Env<'_>,
    ) -> Result<Answer, McpError> {
        let request = ToolRequest::parse(req, era, env)?;
        let outcome = self.guards.call_tool(
            &self.registry(),
            &request.call(),
            &env.caller(),
            &|_, tool, args, book, hook| self.run_tool(&request, env, tool, args, book, hook),
        );
        render_call_outcome(outcome, self.locale)
    }

    /// Runs an admitted tool in the context of its request.
    pub(super) fn run_tool(
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
        };
        let outcome = tool.tool.call(&ctx, args);
        env.session.finish(&request.id);
        outcome
    }
}

/// A `tools/call` request taken apart: the guard chain's view of it and what its tool
/// context needs.
pub(super) struct ToolRequest<'q> {
    req: &'q Request,
    name: &'q str,
    args: &'q Map<String, Value>,
    pub(super) id: RequestId,
    pub(super) era: Era,
    progress_token: Option<Value>,
    log_level: Option<LogLevel>,
    input: InputParams<'q>,
    client_capabilities: Value,
    /// Its own log span when it is handled beside others (a request handled alone runs
    /// inside the span of [`Server::handle_request`]).
    span: Option<tracing::Span>,
}

impl<'q> ToolRequest<'q> {
    pub(super) fn parse(
        req: &'q Request,
        era: Era,
        env: &Env<'_>,
    ) -> Result<ToolRequest<'q>, McpError> {
        let (name, args) = name_and_arguments(req)?;
        Ok(ToolRequest {
            req,
            name,
            args,
            id: req.id.clone().unwrap_or(Value::Null),
            era,
            progress_token: meta(req).and_then(|m| m.get("progressToken")).cloned(),
            log_level: call_log_level(req, era, env.session),
            input: input_params(req)?,
            client_capabilities: client_capabilities(req, era, env.session),
            span: None,
        })
    }

    /// The same request, logging under its own `span` (it is handled beside others).
    pub(super) fn with_span(self, span: tracing::Span) -> ToolRequest<'q> {
        ToolRequest {
            span: Some(span),
            ..self
        }
    }

    pub(super) fn call(&self) -> ToolCall<'_> {
        ToolCall {
            name: self.name,
            args: self.args,
            meta: meta(self.req),
            request_id: &self.id,
            span: self.span.as_ref(),
        }
    }
}

/// Renders the outcome of a `tools/call`: the tool's result (fresh, replayed as stored, or
/// the `isError` result of its failure) with the budget left and the book that served it in
/// `_meta`; for a refusal, a JSON-RPC error — or, when its caller's guard channel is
/// `tool_result` and the model can act on it ([`McpError::model_can_act`]), an `isError`
/// result whose envelope also names the JSON-RPC code it would have had.
pub(super) fn render_call_outcome(
    outcome: CallOutcome,
    locale: Locale,
) -> Result<Answer, McpError> {
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
