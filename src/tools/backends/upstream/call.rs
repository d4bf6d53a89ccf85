//! Forwarding one call to the upstream and mapping its outcome into the catalog.
//!
//! The call runs on the outbound runtime; the tool's worker thread waits for it with the
//! backend's deadline, relays the upstream's progress to the caller (rmcp puts a progress
//! token of its own on every request; its notifications are relayed when the caller asked
//! for progress) and watches the caller's cancellation. Past the deadline, or when the
//! caller cancels, the upstream is sent `notifications/cancelled` for the request.
//!
//! Progress is relayed at the gate's pace, not the upstream's: the newest notification is
//! kept ([`LatestProgress`]) and passed on at most once per [`PROGRESS_EVERY`], only when
//! it is higher than the last one passed on, and the newest is passed on before the result
//! when it was not yet. The deadline and the cancellation are looked at on every turn of
//! the wait, so nothing the upstream sends keeps a call past them.
//!
//! Outcomes: the upstream's result is returned as it is (content blocks, and
//! `structuredContent`); its `isError: true` result is `adapter_error` whose
//! `details.message` is the upstream's own text (an MCP tool failure has no error id, so
//! there is no `details.original_error`); a JSON-RPC error is `adapter_error` with
//! `details.original_error = {code, message}`; a session that is not up, or that failed
//! during the call, is `backend_unavailable`; the deadline is `timeout`, and a cancellation
//! `timeout` with `details.reason = "cancelled"`.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, ProgressNotificationParam, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use crate::catalog::{ErrorKind, McpError};
use crate::tools::ToolOutput;
use crate::tools::backends::Call;

use super::Shared;
use super::session::Link;

/// How often the waiting thread looks at the deadline, the caller's cancellation and the
/// newest progress.
const POLL: Duration = Duration::from_millis(50);
/// The shortest time between two progress notifications relayed to the caller.
pub(super) const PROGRESS_EVERY: Duration = Duration::from_millis(250);
/// How long a call that relays progress waits after its result for progress still on its way.
const PROGRESS_SETTLE: Duration = Duration::from_millis(10);
/// How much of the upstream's own message `details.message` (and a progress message) keeps.
const MESSAGE_MAX_CHARS: usize = 300;

/// The upstream's answer to the call, or why there is none.
type Outcome = Result<ServerResult, ServiceError>;

/// One upstream progress notification, as relayed to the caller (its message cut to
/// [`MESSAGE_MAX_CHARS`]).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Progress {
    pub(super) progress: f64,
    total: Option<f64>,
    message: Option<String>,
}

impl From<&ProgressNotificationParam> for Progress {
    fn from(params: &ProgressNotificationParam) -> Progress {
        Progress {
            progress: params.progress,
            total: params.total,
            message: params.message.as_deref().map(cut),
        }
    }
}

/// The newest progress of one call not yet taken: the upstream's notifications replace it
/// as they come (on the runtime), the waiting thread takes it at its own pace.
#[derive(Debug, Default)]
pub(super) struct LatestProgress {
    newest: Mutex<Option<Progress>>,
}

impl LatestProgress {
    fn newest(&self) -> std::sync::MutexGuard<'_, Option<Progress>> {
        match self.newest.lock() {
            Ok(newest) => newest,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Keeps `progress` unless a higher one is already waiting (notifications are handled
    /// concurrently, so one may arrive behind a later one).
    pub(super) fn offer(&self, progress: Progress) {
        let mut newest = self.newest();
        if newest
            .as_ref()
            .is_none_or(|waiting| progress.progress > waiting.progress)
        {
            *newest = Some(progress);
        }
    }

    /// The progress waiting, if any.
    pub(super) fn take(&self) -> Option<Progress> {
        self.newest().take()
    }
}

/// What of a call's progress goes to the caller, and when.
struct Relay<'a> {
    latest: &'a LatestProgress,
    every: Duration,
    last_at: Option<Instant>,
    last_value: Option<f64>,
}

impl<'a> Relay<'a> {
    fn new(latest: &'a LatestProgress, every: Duration) -> Relay<'a> {
        Relay {
            latest,
            every,
            last_at: None,
            last_value: None,
        }
    }

    /// The progress to relay at `now`: the newest that came, when `every` has passed since
    /// the last one relayed and it is higher than that one.
    fn poll(&mut self, now: Instant) -> Option<Progress> {
        if self.last_at.is_some_and(|at| now < at + self.every) {
            return None;
        }
        let progress = self.higher(self.latest.take()?)?;
        self.last_at = Some(now);
        Some(progress)
    }

    /// The progress to relay before the result, however soon after the last one: the
    /// newest, when it is higher than the last one relayed.
    fn last(&mut self) -> Option<Progress> {
        self.higher(self.latest.take()?)
    }

    fn higher(&mut self, progress: Progress) -> Option<Progress> {
        if self
            .last_value
            .is_some_and(|last| progress.progress <= last)
        {
            return None;
        }
        self.last_value = Some(progress.progress);
        Some(progress)
    }
}

/// Why the waiting thread gave up.
enum GiveUp {
    Deadline,
    Cancelled,
}

/// Forwards `operation` with `args` and waits for the outcome.
pub(super) fn forward(
    shared: &Arc<Shared>,
    runtime: &tokio::runtime::Handle,
    operation: &str,
    args: &Map<String, Value>,
    call: &Call<'_>,
) -> Result<ToolOutput, McpError> {
    let backend = shared.name.as_str();
    let Some(upstream_name) = shared.upstream_name(operation) else {
        return Err(McpError::new(ErrorKind::NotImplemented).detail("backend", backend));
    };
    let Some(link) = shared.link() else {
        return Err(unavailable(backend, "not connected"));
    };
    let (done_tx, done) = std::sync::mpsc::channel();
    let (give_up_tx, give_up) = oneshot::channel();
    // The one copy of the arguments a call makes: rmcp's request owns them, without
    // tollgate's own idempotency key.
    let mut arguments = args.clone();
    arguments.remove(crate::tools::schema::KEY_ARGUMENT);
    let params = CallToolRequestParams::new(upstream_name).with_arguments(arguments);
    let latest = call
        .ctx
        .progress_token
        .is_some()
        .then(|| Arc::new(LatestProgress::default()));
    let relayed = latest.clone();
    runtime.spawn(run(link, params, call.timeout, relayed, done_tx, give_up));
    wait(backend, call, &done, latest.as_deref(), give_up_tx)
}

/// Waits on the tool's thread for the call's outcome until the deadline or the caller's
/// cancellation, relaying its progress meanwhile.
fn wait(
    backend: &str,
    call: &Call<'_>,
    done: &Receiver<Outcome>,
    latest: Option<&LatestProgress>,
    give_up: oneshot::Sender<GiveUp>,
) -> Result<ToolOutput, McpError> {
    let deadline = Instant::now() + call.timeout;
    let mut relay = latest.map(|latest| Relay::new(latest, PROGRESS_EVERY));
    let send = |p: Progress| call.ctx.progress(p.progress, p.total, p.message.as_deref());
    loop {
        let now = Instant::now();
        if call.ctx.is_cancelled() {
            let _ = give_up.send(GiveUp::Cancelled);
            return Err(McpError::new(ErrorKind::Timeout)
                .detail("backend", backend)
                .detail("reason", "cancelled"));
        }
        if now >= deadline {
            let _ = give_up.send(GiveUp::Deadline);
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
                return outcome_of(backend, call.timeout, outcome);
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(unavailable(backend, "connection lost"));
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// The call on the runtime: sends it, routes its progress to `latest` (when the caller
/// asked for progress), and sends `notifications/cancelled` when the waiting thread gives up.
async fn run(
    link: Link,
    params: CallToolRequestParams,
    deadline: Duration,
    latest: Option<Arc<LatestProgress>>,
    done: Sender<Outcome>,
    give_up: oneshot::Receiver<GiveUp>,
) {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    // rmcp's own timeout sends `notifications/cancelled` ("request timeout") when it fires.
    let options = PeerRequestOptions::with_timeout(deadline);
    let handle = match link.peer.send_request_with_option(request, options).await {
        Ok(handle) => handle,
        Err(e) => {
            if transport_failed(&e) {
                link.break_off();
            }
            let _ = done.send(Err(e));
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
            let reason = match why {
                Ok(GiveUp::Cancelled) => "cancelled by the client",
                Ok(GiveUp::Deadline) | Err(_) => "request timeout",
            };
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
    let _ = done.send(outcome);
}

/// Whether an error means the session itself is failing.
fn transport_failed(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
    )
}

/// The tool's outcome for the upstream's answer.
fn outcome_of(
    backend: &str,
    deadline: Duration,
    outcome: Result<ServerResult, ServiceError>,
) -> Result<ToolOutput, McpError> {
    match outcome {
        Ok(ServerResult::CallToolResult(result)) => result_of(backend, result),
        Ok(_) => Err(McpError::new(ErrorKind::AdapterError)
            .detail("backend", backend)
            .detail("original_error", "unexpected_response")),
        Err(e) => Err(error_of(backend, deadline, e)),
    }
}

/// The upstream's result as the tool's output; its `isError` result as `adapter_error`.
fn result_of(backend: &str, result: CallToolResult) -> Result<ToolOutput, McpError> {
    let content: Vec<Value> = result
        .content
        .iter()
        .filter_map(|block| serde_json::to_value(block).ok())
        .collect();
    if result.is_error == Some(true) {
        let text = content
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
        content,
        structured: result.structured_content,
        input_required: None,
    })
}

/// The catalog error of a failed request.
fn error_of(backend: &str, deadline: Duration, error: ServiceError) -> McpError {
    match error {
        ServiceError::McpError(data) => McpError::new(ErrorKind::UpstreamRpcError)
            .detail("backend", backend)
            .detail(
                "original_error",
                json!({ "code": data.code.0, "message": cut(&data.message) }),
            )
            .detail("message", cut(&data.message)),
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

fn unavailable(backend: &str, reason: &'static str) -> McpError {
    McpError::new(ErrorKind::ToolBackendUnavailable)
        .detail("backend", backend)
        .detail("reason", reason)
}

fn timeout(backend: &str, deadline: Duration) -> McpError {
    McpError::new(ErrorKind::Timeout)
        .detail("backend", backend)
        .detail("timeout_ms", deadline.as_millis() as u64)
}

/// `text` cut to [`MESSAGE_MAX_CHARS`] characters.
fn cut(text: &str) -> String {
    let mut out: String = text.chars().take(MESSAGE_MAX_CHARS).collect();
    if text.chars().count() > MESSAGE_MAX_CHARS {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Locale;
    use rmcp::model::{ErrorCode, ErrorData};

    fn result(value: Value) -> CallToolResult {
        serde_json::from_value(value).expect("a result")
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

    fn progress(value: f64) -> Progress {
        Progress {
            progress: value,
            total: Some(100.0),
            message: None,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_newest_progress_is_kept_unless_a_higher_one_waits() {
        let latest = LatestProgress::default();
        latest.offer(progress(1.0));
        latest.offer(progress(3.0));
        latest.offer(progress(2.0));
        assert_eq!(latest.take(), Some(progress(3.0)));
        assert_eq!(latest.take(), None);
        latest.offer(progress(1.0));
        assert_eq!(latest.take(), Some(progress(1.0)));
    }

    #[test]
    fn progress_is_relayed_at_most_once_per_interval_and_only_increasing() {
        let latest = LatestProgress::default();
        let mut relay = Relay::new(&latest, PROGRESS_EVERY);
        let start = Instant::now();
        assert_eq!(relay.poll(start), None, "nothing came yet");
        latest.offer(progress(1.0));
        assert_eq!(relay.poll(start), Some(progress(1.0)));
        latest.offer(progress(2.0));
        assert_eq!(relay.poll(start + ms(100)), None, "too soon");
        latest.offer(progress(5.0));
        assert_eq!(relay.poll(start + ms(250)), Some(progress(5.0)));
        // Lower than the last relayed: dropped, even when due.
        latest.offer(progress(4.0));
        assert_eq!(relay.poll(start + ms(600)), None);
        assert_eq!(latest.take(), None);
    }

    #[test]
    fn a_flood_is_relayed_a_few_times_a_second_and_its_last_value_before_the_result() {
        let latest = LatestProgress::default();
        let mut relay = Relay::new(&latest, PROGRESS_EVERY);
        let start = Instant::now();
        let mut relayed = Vec::new();
        // 100 notifications between two looks of the waiting thread, every 50 ms, for 2 s.
        let mut value = 0.0;
        for turn in 0..40 {
            for _ in 0..100 {
                value += 1.0;
                latest.offer(progress(value));
            }
            relayed.extend(relay.poll(start + ms(turn * 50)));
        }
        assert_eq!(relayed.len(), 8, "one per 250 ms over 2 s");
        assert!(relayed.windows(2).all(|w| w[0].progress < w[1].progress));
        assert_eq!(
            relay.last(),
            Some(progress(value)),
            "the newest, before the result"
        );
        assert_eq!(relay.last(), None, "and only once");
    }

    #[test]
    fn a_progress_message_is_cut() {
        let params: ProgressNotificationParam = serde_json::from_value(json!({
            "progressToken": 1, "progress": 1, "message": "m".repeat(10_000)
        }))
        .expect("params");
        let relayed = Progress::from(&params);
        assert_eq!(
            relayed.message.map(|m| m.chars().count()),
            Some(MESSAGE_MAX_CHARS + 1)
        );
    }

    #[test]
    fn long_messages_are_cut() {
        let long = "x".repeat(MESSAGE_MAX_CHARS + 10);
        let kept = cut(&long);
        assert_eq!(kept.chars().count(), MESSAGE_MAX_CHARS + 1);
        assert!(kept.ends_with('…'));
        assert_eq!(cut("short"), "short");
    }
}
