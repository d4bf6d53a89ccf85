//! Forwarding one call to the upstream and mapping its outcome into the catalog.
//!
//! A call to a Streamable HTTP upstream is posted from the tool's own thread, on its lane
//! ([`crate::tools::backends::lane`]); a call through rmcp (stdio upstreams, a session
//! being recovered, or a thread that cannot run it) runs on the outbound runtime. Either
//! way the tool's thread waits for it with the backend's deadline, relays the upstream's progress to the caller (rmcp puts a progress
//! token of its own on every request; its notifications are relayed when the caller asked
//! for progress) and watches the caller's cancellation. Past the deadline, or when the
//! caller cancels, the upstream is sent `notifications/cancelled` for the request.
//!
//! Progress is relayed at the gate's pace, not the upstream's ([`super::progress`]), and
//! the newest is passed on before the result when it was not yet. The deadline and the
//! cancellation are looked at on every turn of the wait, so nothing the upstream sends
//! keeps a call past them.
//!
//! Outcomes: the upstream's result is returned as it is (content blocks, and
//! `structuredContent`); its `isError: true` result is `adapter_error` whose
//! `details.message` is the upstream's own text (an MCP tool failure has no error id, so
//! there is no `details.original_error`); a JSON-RPC error is `adapter_error` with
//! `details.original_error = {code, message}`; a session that is not up, or that failed
//! during the call, is `backend_unavailable`; the deadline is `timeout`, and a cancellation
//! `timeout` with `details.reason = "cancelled"`.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, MetaObject, NumberOrString, ProgressToken, RequestMetaObject, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use crate::catalog::{ErrorKind, McpError};
use crate::tools::ToolOutput;
use crate::tools::backends::lane::{self, GaveUp};
use crate::tools::backends::{Call, NOT_CONNECTED};

use super::Shared;
use super::direct::{Answer, CallResult, Direct, Failure, Prepared};
use super::poster::Poster;
use super::progress::{LatestProgress, PROGRESS_EVERY, Progress, Relay, cut};
use super::session::Link;

/// How often the waiting thread looks at the deadline, the caller's cancellation and the
/// newest progress.
const POLL: Duration = Duration::from_millis(50);
/// How long a call that relays progress waits after its result for progress still on its way.
const PROGRESS_SETTLE: Duration = Duration::from_millis(10);
/// The call's outcome, as the tool returns it.
type Outcome = Result<ToolOutput, McpError>;

/// What a call's task needs to report its outcome.
struct Report {
    backend: Arc<str>,
    deadline: Duration,
    done: SyncSender<Outcome>,
}

/// Forwards `operation` with `args` and waits for the outcome.
pub(super) fn forward(
    shared: &Arc<Shared>,
    runtime: &tokio::runtime::Handle,
    operation: &str,
    args: &Map<String, Value>,
    call: &Call<'_>,
) -> Result<ToolOutput, McpError> {
    let backend: &str = &shared.name;
    let Some(upstream_name) = shared.upstream_name(operation) else {
        return Err(McpError::new(ErrorKind::NotImplemented).detail("backend", backend));
    };
    let Some(link) = shared.link() else {
        return Err(unavailable(backend, NOT_CONNECTED));
    };
    let latest = call
        .ctx
        .progress_token
        .is_some()
        .then(|| Arc::new(LatestProgress::default()));
    let Some(direct) = link.direct.clone() else {
        // rmcp's request owns its arguments: one copy, without tollgate's own
        // idempotency key.
        let mut arguments = args.clone();
        arguments.remove(crate::tools::schema::KEY_ARGUMENT);
        let mut params = CallToolRequestParams::new(upstream_name).with_arguments(arguments);
        if !call.trace.is_empty() {
            params.meta = Some(RequestMetaObject(MetaObject(call.trace.to_meta())));
        }
        return through_rmcp(runtime, link, params, latest, call, &shared.name);
    };
    // The body is written here, from the caller's arguments, once.
    let prepared = direct.prepare(&upstream_name, args, latest.is_some(), call.trace);
    let on_lane = direct.lanes.run(|poster| {
        let ends = Ends {
            backend,
            link: &link,
            direct: &direct,
            prepared: &prepared,
            latest: latest.as_ref(),
            call,
            runtime,
        };
        ends.run(poster)
    });
    match on_lane {
        Ok(Some(outcome)) => outcome,
        // The upstream no longer knows the session: rmcp recovers it and sends the call
        // again (the upstream did not take it).
        Ok(None) => match direct.params_of(&prepared) {
            Some(params) => through_rmcp(runtime, link, params, latest, call, &shared.name),
            None => Err(unavailable(backend, "session expired")),
        },
        // A thread that cannot run the call itself hands it to the outbound runtime.
        Err(_) => {
            let (report, done, give_up_tx, give_up) = report_to(&shared.name, call);
            let relayed = latest.clone();
            runtime.spawn(run_direct(link, direct, prepared, relayed, report, give_up));
            wait(backend, call, &done, latest.as_deref(), give_up_tx)
        }
    }
}

/// A call through rmcp's peer on the outbound runtime, waited for on this thread.
fn through_rmcp(
    runtime: &tokio::runtime::Handle,
    link: Link,
    params: CallToolRequestParams,
    latest: Option<Arc<LatestProgress>>,
    call: &Call<'_>,
    backend: &Arc<str>,
) -> Result<ToolOutput, McpError> {
    let (report, done, give_up_tx, give_up) = report_to(backend, call);
    runtime.spawn(run(link, params, latest.clone(), report, give_up));
    wait(backend, call, &done, latest.as_deref(), give_up_tx)
}

/// Where a call run on the outbound runtime reports its outcome, and how the waiting thread
/// tells it to give up.
fn report_to(
    backend: &Arc<str>,
    call: &Call<'_>,
) -> (
    Report,
    Receiver<Outcome>,
    oneshot::Sender<GaveUp>,
    oneshot::Receiver<GaveUp>,
) {
    // One outcome: a channel of one slot (an unbounded channel allocates and zeroes a block
    // of slots per call).
    let (done_tx, done) = std::sync::mpsc::sync_channel(1);
    let (give_up_tx, give_up) = oneshot::channel();
    let report = Report {
        backend: Arc::clone(backend),
        deadline: call.timeout,
        done: done_tx,
    };
    (report, done, give_up_tx, give_up)
}

/// A call posted straight to the upstream from the calling thread's lane, with what it
/// needs to end: the deadline, the caller's cancellation, its progress.
struct Ends<'a, 'c> {
    backend: &'a str,
    link: &'a Link,
    direct: &'a Arc<Direct>,
    prepared: &'a Prepared,
    latest: Option<&'a Arc<LatestProgress>>,
    call: &'a Call<'c>,
    /// The outbound runtime, where the upstream is told of a call given up.
    runtime: &'a tokio::runtime::Handle,
}

impl Ends<'_, '_> {
    /// Posts the call with `poster` and waits for its answer until the deadline or the
    /// caller's cancellation, relaying its progress meanwhile; `None` when the upstream no
    /// longer knows the session.
    async fn run(self, poster: Poster) -> Option<Outcome> {
        let backend = self.backend;
        let token = listen_for_progress(self.link, self.prepared, self.latest);
        let mut relay = self.latest.map(|latest| Relay::new(latest, PROGRESS_EVERY));
        let send = |p: Progress| {
            self.call
                .ctx
                .progress(p.progress, p.total, p.message.as_deref());
        };
        let exchange = self
            .direct
            .call(&poster, self.prepared, self.latest.map(|l| &**l));
        let answer = lane::supervise(exchange, self.call.timeout, POLL, |now| {
            if self.call.ctx.is_cancelled() {
                return true;
            }
            if let Some(progress) = relay.as_mut().and_then(|r| r.poll(now)) {
                send(progress);
            }
            false
        })
        .await;
        if let Some(token) = &token {
            self.link.progress.unregister(token);
        }
        let answer = match answer {
            Ok(answer) => answer,
            Err(why) => {
                tell_cancelled(self.runtime, self.direct, self.prepared, Ok(why));
                return Some(Err(given_up(backend, why, self.call.timeout)));
            }
        };
        if let Some(progress) = relay.as_mut().and_then(Relay::last) {
            send(progress);
        }
        answered(backend, self.link, answer)
    }
}

/// Registers `latest` for the progress the upstream sends on its own stream rather than the
/// call's (when the caller asked for progress): the token to unregister after the call.
fn listen_for_progress(
    link: &Link,
    prepared: &Prepared,
    latest: Option<&Arc<LatestProgress>>,
) -> Option<ProgressToken> {
    latest.map(|latest| {
        let token = ProgressToken(NumberOrString::String(prepared.id.as_str().into()));
        link.progress.register(token.clone(), Arc::clone(latest));
        token
    })
}

/// Sends the upstream `notifications/cancelled` for a call given up, on the outbound
/// `runtime` (the waiting thread does not wait for it).
fn tell_cancelled(
    runtime: &tokio::runtime::Handle,
    direct: &Arc<Direct>,
    prepared: &Prepared,
    why: Result<GaveUp, oneshot::error::RecvError>,
) {
    let direct = Arc::clone(direct);
    let id = prepared.id.clone();
    let reason = cancel_reason(why);
    runtime.spawn(async move { direct.cancel(&id, reason).await });
}

/// The outcome of a directly posted call's answer; `None` when the upstream no longer knows
/// the session (rmcp recovers it and sends the call again). A lost connection breaks the
/// session off, for the supervisor to reconnect.
fn answered(backend: &str, link: &Link, answer: Result<Answer, Failure>) -> Option<Outcome> {
    Some(match answer {
        Ok(Answer::Result(result)) => result_of(backend, result),
        Ok(Answer::Rpc { code, message }) => Err(rpc_error(backend, code, &message)),
        Err(Failure::SessionExpired) => return None,
        Err(failure) => {
            if failure.breaks_session() {
                link.break_off();
            }
            Err(failure_of(backend, failure))
        }
    })
}

/// Waits on the tool's thread for the call's outcome until the deadline or the caller's
/// cancellation, relaying its progress meanwhile.
fn wait(
    backend: &str,
    call: &Call<'_>,
    done: &Receiver<Outcome>,
    latest: Option<&LatestProgress>,
    give_up: oneshot::Sender<GaveUp>,
) -> Result<ToolOutput, McpError> {
    let deadline = Instant::now() + call.timeout;
    let mut relay = latest.map(|latest| Relay::new(latest, PROGRESS_EVERY));
    let send = |p: Progress| call.ctx.progress(p.progress, p.total, p.message.as_deref());
    loop {
        let now = Instant::now();
        if call.ctx.is_cancelled() {
            let _ = give_up.send(GaveUp::Cancelled);
            return Err(given_up(backend, GaveUp::Cancelled, call.timeout));
        }
        if now >= deadline {
            let _ = give_up.send(GaveUp::Deadline);
            return Err(timeout(backend, call.timeout));
        }
        if let Some(progress) = relay.as_mut().and_then(|r| r.poll(now)) {
            send(progress);
        }
        match done.recv_timeout((deadline - now).min(POLL)) {
            Ok(outcome) => {
                if let Some(progress) = relay.as_mut().and_then(Relay::last) {
                    send(progress);
                }
                return outcome;
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(unavailable(backend, "connection lost"));
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// The reason sent with `notifications/cancelled` when the waiting thread gives up.
fn cancel_reason(why: Result<GaveUp, oneshot::error::RecvError>) -> &'static str {
    match why {
        Ok(GaveUp::Cancelled) => "cancelled by the client",
        Ok(GaveUp::Deadline) | Err(_) => "request timeout",
    }
}

/// A call posted straight to a Streamable HTTP upstream ([`super::direct`]); a session the
/// upstream no longer knows is handed to rmcp, which recovers it and sends the call again
/// (the upstream did not take it).
async fn run_direct(
    link: Link,
    direct: Arc<Direct>,
    prepared: Prepared,
    latest: Option<Arc<LatestProgress>>,
    report: Report,
    mut give_up: oneshot::Receiver<GaveUp>,
) {
    let token = listen_for_progress(&link, &prepared, latest.as_ref());
    let answer = tokio::select! {
        answer = direct.call(direct.poster(), &prepared, latest.as_deref()) => Some(answer),
        why = &mut give_up => {
            tell_cancelled(&tokio::runtime::Handle::current(), &direct, &prepared, why);
            None
        }
    };
    if let Some(token) = &token {
        link.progress.unregister(token);
    }
    let Some(answer) = answer else {
        return;
    };
    let Some(outcome) = answered(&report.backend, &link, answer) else {
        let Some(params) = direct.params_of(&prepared) else {
            let _ = report
                .done
                .send(Err(unavailable(&report.backend, "session expired")));
            return;
        };
        return run(link, params, latest, report, give_up).await;
    };
    let _ = report.done.send(outcome);
}

/// The call through rmcp's peer (stdio upstreams, and a session being recovered): sends
/// it, routes its progress to `latest` (when the caller asked for progress), and sends
/// `notifications/cancelled` when the waiting thread gives up.
async fn run(
    link: Link,
    params: CallToolRequestParams,
    latest: Option<Arc<LatestProgress>>,
    report: Report,
    give_up: oneshot::Receiver<GaveUp>,
) {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    // rmcp's own timeout sends `notifications/cancelled` ("request timeout") when it fires.
    let options = PeerRequestOptions::with_timeout(report.deadline);
    let handle = match link.peer.send_request_with_option(request, options).await {
        Ok(handle) => handle,
        Err(e) => {
            if transport_failed(&e) {
                link.break_off();
            }
            let _ = report
                .done
                .send(outcome_of(&report.backend, report.deadline, Err(e)));
            return;
        }
    };
    let id = handle.id.clone();
    let token = handle.progress_token.clone();
    if let Some(latest) = &latest {
        link.progress.register(token.clone(), Arc::clone(latest));
    }
    let outcome = tokio::select! {
        outcome = handle.await_response() => outcome,
        why = give_up => {
            let reason = cancel_reason(why);
            let cancel = CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
            let _ = link.peer.notify_cancelled(cancel).await;
            Err(ServiceError::Cancelled { reason: Some(reason.to_owned()) })
        }
    };
    if latest.is_some() {
        // rmcp hands each notification to a task of its own, so the last progress
        // notification, sent before the result, may still be on its way: give it a moment
        // to reach the caller ahead of the result.
        if outcome.is_ok() {
            tokio::time::sleep(PROGRESS_SETTLE).await;
        }
        link.progress.unregister(&token);
    }
    if let Err(e) = &outcome
        && transport_failed(e)
    {
        link.break_off();
    }
    let _ = report
        .done
        .send(outcome_of(&report.backend, report.deadline, outcome));
}

/// Whether an error means the session itself is failing.
pub(super) fn transport_failed(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
    )
}

/// The tool's outcome for the upstream's answer through rmcp.
fn outcome_of(
    backend: &str,
    deadline: Duration,
    outcome: Result<ServerResult, ServiceError>,
) -> Result<ToolOutput, McpError> {
    match outcome {
        Ok(ServerResult::CallToolResult(result)) => result_of(backend, kept_of(result)),
        Ok(_) => Err(McpError::new(ErrorKind::AdapterError)
            .detail("backend", backend)
            .detail("original_error", "unexpected_response")),
        Err(e) => Err(error_of(backend, deadline, e)),
    }
}

/// What the gate keeps of rmcp's result.
fn kept_of(result: CallToolResult) -> CallResult {
    CallResult {
        content: result
            .content
            .iter()
            .filter_map(|block| serde_json::to_value(block).ok())
            .collect(),
        structured: result.structured_content,
        is_error: result.is_error,
    }
}

/// The upstream's result as the tool's output; its `isError` result as `adapter_error`.
fn result_of(backend: &str, result: CallResult) -> Result<ToolOutput, McpError> {
    if result.is_error == Some(true) {
        let text = result
            .content
            .iter()
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n");
        let err = McpError::new(ErrorKind::AdapterError).detail("backend", backend);
        return Err(match text.trim() {
            "" => err,
            text => err.detail("message", cut(text)),
        });
    }
    Ok(ToolOutput {
        content: result.content,
        structured: result.structured,
        input_required: None,
    })
}

/// The catalog error of the upstream's JSON-RPC error.
pub(super) fn rpc_error(backend: &str, code: i64, message: &str) -> McpError {
    McpError::new(ErrorKind::UpstreamRpcError)
        .detail("backend", backend)
        .detail(
            "original_error",
            json!({ "code": code, "message": cut(message) }),
        )
        .detail("message", cut(message))
}

/// The catalog error of a failed request through rmcp.
pub(super) fn error_of(backend: &str, deadline: Duration, error: ServiceError) -> McpError {
    match error {
        ServiceError::McpError(data) => rpc_error(backend, i64::from(data.code.0), &data.message),
        ServiceError::Timeout { .. } => timeout(backend, deadline),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
            unavailable(backend, "connection lost")
        }
        ServiceError::Cancelled { .. } => unavailable(backend, "cancelled by the upstream"),
        _ => McpError::new(ErrorKind::AdapterError)
            .detail("backend", backend)
            .detail("original_error", "unexpected_response"),
    }
}

/// The catalog error of a call posted straight to the upstream that has no answer.
fn failure_of(backend: &str, failure: Failure) -> McpError {
    match failure {
        Failure::Status(status @ (401 | 403)) => McpError::new(ErrorKind::BackendCredentialRefused)
            .detail("backend", backend)
            .detail("status", status),
        Failure::Status(429) => {
            McpError::new(ErrorKind::BackendRateLimited).detail("backend", backend)
        }
        Failure::Status(status @ 502..=504) => McpError::new(ErrorKind::AdapterErrorRetryable)
            .detail("backend", backend)
            .detail("original_error", format!("HTTP {status}")),
        Failure::Status(status) => McpError::new(ErrorKind::AdapterError)
            .detail("backend", backend)
            .detail("original_error", format!("HTTP {status}")),
        Failure::Lost | Failure::SessionExpired => unavailable(backend, "connection lost"),
        // Said as a REST backend's answer past its cap is.
        Failure::TooLarge => McpError::new(ErrorKind::AdapterError)
            .detail("backend", backend)
            .detail("reason", "response_too_large"),
        Failure::Malformed => McpError::new(ErrorKind::AdapterError)
            .detail("backend", backend)
            .detail("original_error", "unexpected_response"),
    }
}

pub(super) fn unavailable(backend: &str, reason: &'static str) -> McpError {
    McpError::new(ErrorKind::ToolBackendUnavailable)
        .detail("backend", backend)
        .detail("reason", reason)
}

/// The catalog error of a call the waiting thread gave up: `timeout`, with
/// `details.reason = "cancelled"` when its caller cancelled it.
fn given_up(backend: &str, why: GaveUp, deadline: Duration) -> McpError {
    match why {
        GaveUp::Deadline => timeout(backend, deadline),
        GaveUp::Cancelled => McpError::new(ErrorKind::Timeout)
            .detail("backend", backend)
            .detail("reason", "cancelled"),
    }
}

pub(super) fn timeout(backend: &str, deadline: Duration) -> McpError {
    McpError::new(ErrorKind::Timeout)
        .detail("backend", backend)
        .detail("timeout_ms", deadline.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Locale;
    use rmcp::model::{ErrorCode, ErrorData};

    fn result(value: Value) -> CallResult {
        kept_of(serde_json::from_value::<CallToolResult>(value).expect("a result"))
    }

    #[test]
    fn a_result_is_returned_as_the_upstream_gave_it() {
        let output = result_of(
            "files",
            result(json!({
                "content": [{"type": "text", "text": "3"}, {"type": "image", "data": "AA==", "mimeType": "image/png"}],
                "structuredContent": {"sum": 3}
            })),
        )
        .expect("ok");
        assert_eq!(output.content.len(), 2);
        assert_eq!(output.content[0], json!({"type": "text", "text": "3"}));
        assert_eq!(output.content[1]["mimeType"], "image/png");
        assert_eq!(output.structured, Some(json!({"sum": 3})));
    }

    #[test]
    fn an_is_error_result_is_an_adapter_error_with_the_upstream_text() {
        let err = result_of(
            "files",
            result(json!({"isError": true, "content": [{"type": "text", "text": "disk on fire"}]})),
        )
        .expect_err("is an error");
        assert_eq!(err.kind(), ErrorKind::AdapterError);
        let envelope = err.envelope(Locale::En);
        assert_eq!(envelope["code"], "adapter_error");
        assert_eq!(envelope["error_code"], 4001);
        assert_eq!(envelope["retryable"], false);
        assert_eq!(
            envelope["details"],
            json!({"backend": "files", "message": "disk on fire"})
        );
        assert_eq!(
            err.hint(Locale::En),
            "The business backend files answered with an error: disk on fire; the call did not complete."
        );
        assert!(err.unfilled_placeholders(Locale::Es).is_empty());
    }

    #[test]
    fn a_json_rpc_error_keeps_its_code_and_message() {
        let data = ErrorData::new(ErrorCode(-32602), "Unknown tool: nope", None);
        let err = error_of(
            "files",
            Duration::from_secs(5),
            ServiceError::McpError(data),
        );
        assert_eq!(err.kind(), ErrorKind::UpstreamRpcError);
        let envelope = err.envelope(Locale::En);
        assert_eq!(envelope["code"], "adapter_error");
        assert_eq!(envelope["error_code"], 4001);
        assert_eq!(
            envelope["details"]["original_error"],
            json!({"code": -32602, "message": "Unknown tool: nope"})
        );
        assert_eq!(
            err.hint(Locale::En),
            "The business backend files answered with error -32602: Unknown tool: nope; the call did not complete."
        );
        assert!(err.unfilled_placeholders(Locale::Es).is_empty());
    }

    #[test]
    fn a_direct_call_without_an_answer_maps_to_its_entry() {
        let refused = failure_of("files", Failure::Status(401));
        assert_eq!(refused.kind(), ErrorKind::BackendCredentialRefused);
        assert_eq!(
            refused.envelope(Locale::En)["details"],
            json!({"backend": "files", "status": 401})
        );
        assert_eq!(
            failure_of("files", Failure::Status(429)).kind(),
            ErrorKind::BackendRateLimited
        );
        let busy = failure_of("files", Failure::Status(503));
        assert_eq!(busy.kind(), ErrorKind::AdapterErrorRetryable);
        assert_eq!(
            busy.envelope(Locale::En)["details"]["original_error"],
            "HTTP 503"
        );
        assert_eq!(
            failure_of("files", Failure::Status(418)).kind(),
            ErrorKind::AdapterError
        );
        let lost = failure_of("files", Failure::Lost);
        assert_eq!(lost.kind(), ErrorKind::ToolBackendUnavailable);
        assert_eq!(
            lost.envelope(Locale::En)["details"]["reason"],
            "connection lost"
        );
        assert_eq!(
            failure_of("files", Failure::TooLarge).envelope(Locale::En)["details"]["reason"],
            "response_too_large"
        );
        for failure in [
            Failure::Status(401),
            Failure::Status(429),
            Failure::Status(503),
            Failure::Lost,
            Failure::TooLarge,
            Failure::Malformed,
        ] {
            let err = failure_of("files", failure);
            assert!(err.unfilled_placeholders(Locale::En).is_empty(), "{err:?}");
            assert!(err.unfilled_placeholders(Locale::Es).is_empty(), "{err:?}");
        }
    }

    #[test]
    fn transport_failures_and_deadlines_map_to_their_entries() {
        let closed = error_of(
            "files",
            Duration::from_secs(5),
            ServiceError::TransportClosed,
        );
        assert_eq!(closed.kind(), ErrorKind::ToolBackendUnavailable);
        assert_eq!(
            closed.envelope(Locale::En)["details"]["reason"],
            "connection lost"
        );
        let late = error_of(
            "files",
            Duration::from_millis(1500),
            ServiceError::Timeout {
                timeout: Duration::from_millis(1500),
            },
        );
        assert_eq!(late.kind(), ErrorKind::Timeout);
        assert_eq!(
            late.envelope(Locale::En)["details"],
            json!({"backend": "files", "timeout_ms": 1500})
        );
        assert!(late.unfilled_placeholders(Locale::En).is_empty());
    }
}
