//! A tool call posted straight to a Streamable HTTP upstream, on the session rmcp opened.
//!
//! rmcp's client passes every message through its service loop, its transport worker and
//! a blocking task that decodes the answer into the union of every server result, and puts
//! a progress token on every request. Measured on the forwarded `echo` call, that path
//! cost more CPU than all of tollgate's guards together. A call here is one POST on a
//! pooled client ([`Poster`]: keep-alive, `TCP_NODELAY`, as many connections as calls in
//! flight), its body written once from the caller's arguments,
//! its answer read into exactly what the gate keeps of it (content blocks, structured
//! content, `isError`, or the JSON-RPC error). A progress token is sent only when the
//! caller asked for progress.
//!
//! The answer may come as JSON or as an event stream; in a stream, the call's progress is
//! relayed, a `ping` from the upstream is answered, and any other request is refused
//! (tollgate declares no client capabilities). A session the upstream no longer knows
//! (404) is left to rmcp, which recovers it ([`Failure::SessionExpired`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use rmcp::model::{CallToolRequestParams, ProgressNotificationParam};
use serde::{Deserialize, Serialize, Serializer, ser::SerializeMap};
use serde_json::{Map, Value};
use sse_stream::SseStream;

use super::poster::{Endpoint, Poster, Reply};
use super::progress::{LatestProgress, Progress};
use super::session_client::SessionId;
use crate::telemetry::TraceFields;
use crate::tools::backends::BodyFailure;
use crate::tools::backends::lane::Lanes;

/// The largest answer read from the upstream, JSON or the whole event stream.
pub(super) const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;
/// The session header of Streamable HTTP.
const SESSION_HEADER: &str = "mcp-session-id";
/// The protocol revision header of Streamable HTTP.
const VERSION_HEADER: &str = "mcp-protocol-version";

/// How calls reach one connected Streamable HTTP upstream.
pub(super) struct Direct {
    /// The client for work on the outbound runtime.
    poster: Poster,
    /// A client of the same kind per calling thread, whose connections live on that
    /// thread ([`Lanes`]).
    pub(super) lanes: Lanes<Poster>,
    endpoint: Endpoint,
    /// The configured headers, the content type, what is accepted and the negotiated
    /// protocol revision.
    headers: HeaderMap,
    session: Arc<SessionId>,
    next_id: AtomicU64,
}

/// The upstream's answer to a call.
#[derive(Debug, PartialEq)]
pub(super) enum Answer {
    /// Its result.
    Result(CallResult),
    /// A JSON-RPC error.
    Rpc { code: i64, message: String },
}

/// What the gate keeps of a `tools/call` result.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub(super) struct CallResult {
    #[serde(default)]
    pub(super) content: Vec<Value>,
    #[serde(rename = "structuredContent", default)]
    pub(super) structured: Option<Value>,
    #[serde(rename = "isError", default)]
    pub(super) is_error: Option<bool>,
}

/// Why a call has no answer.
#[derive(Debug, PartialEq)]
pub(super) enum Failure {
    /// The upstream does not know the session any more (HTTP 404): rmcp recovers it.
    SessionExpired,
    /// The upstream answered with an HTTP failure status.
    Status(u16),
    /// The connection failed or ended before the answer.
    Lost,
    /// The answer was larger than [`MAX_ANSWER_BYTES`].
    TooLarge,
    /// The answer was not a JSON-RPC answer to the call.
    Malformed,
}

impl Failure {
    /// Whether the session itself is failing (the supervisor reconnects).
    pub(super) fn breaks_session(&self) -> bool {
        matches!(self, Failure::Lost)
    }
}

/// One JSON-RPC message from the upstream, read for what a call needs of it.
#[derive(Deserialize)]
struct Incoming {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default)]
    result: Option<CallResult>,
    #[serde(default)]
    error: Option<RpcError>,
}

#[derive(Deserialize)]
struct RpcError {
    code: i64,
    #[serde(default)]
    message: String,
}

/// The request a call posts.
#[derive(Serialize)]
struct Request<'a> {
    jsonrpc: &'static str,
    id: &'a str,
    method: &'static str,
    params: Params<'a>,
}

#[derive(Serialize)]
struct Params<'a> {
    name: &'a str,
    arguments: Arguments<'a>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<Meta<'a>>,
}

#[derive(Serialize)]
struct Meta<'a> {
    #[serde(rename = "progressToken", skip_serializing_if = "Option::is_none")]
    progress_token: Option<&'a str>,
    /// The trace context the call carries (`traceparent`, `tracestate`, `baggage`).
    #[serde(flatten)]
    trace: Trace<'a>,
}

/// The trace fields, written as entries of `_meta`.
struct Trace<'a>(&'a TraceFields);

impl Serialize for Trace<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (name, value) in self.0.iter() {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// The caller's arguments without tollgate's own idempotency key, written as they are.
struct Arguments<'a>(&'a Map<String, Value>);

impl Serialize for Arguments<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let forwarded = self
            .0
            .iter()
            .filter(|(name, _)| name.as_str() != crate::tools::schema::KEY_ARGUMENT);
        let mut map = serializer.serialize_map(None)?;
        for (name, value) in forwarded {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// A call ready to be posted: its id and its body.
pub(super) struct Prepared {
    pub(super) id: String,
    body: Bytes,
}

impl Direct {
    /// Calls on `endpoint` with the configured `headers`, on the session `session` notes, in
    /// the negotiated protocol revision `version`; `poster` serves the outbound runtime,
    /// `lanes` make the calling threads' own.
    pub(super) fn new(
        poster: Poster,
        lanes: Lanes<Poster>,
        endpoint: Endpoint,
        configured: &std::collections::HashMap<HeaderName, HeaderValue>,
        session: Arc<SessionId>,
        version: &str,
    ) -> Result<Direct, String> {
        let mut headers = HeaderMap::with_capacity(configured.len() + 3);
        for (name, value) in configured {
            headers.insert(name.clone(), value.clone());
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        let version = HeaderValue::from_str(version)
            .map_err(|_| format!("the protocol revision {version:?} is not a header value"))?;
        headers.insert(HeaderName::from_static(VERSION_HEADER), version);
        Ok(Direct {
            poster,
            lanes,
            endpoint,
            headers,
            session,
            next_id: AtomicU64::new(1),
        })
    }

    /// The request for `tools/call` of `name` with `arguments` (without tollgate's
    /// idempotency key), asking for progress when `progress`, carrying `trace`.
    pub(super) fn prepare(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
        progress: bool,
        trace: &TraceFields,
    ) -> Prepared {
        // A namespace of its own: rmcp numbers its requests on the same session.
        let id = format!("tg-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let request = Request {
            jsonrpc: "2.0",
            id: &id,
            method: "tools/call",
            params: Params {
                name,
                arguments: Arguments(arguments),
                meta: (progress || !trace.is_empty()).then_some(Meta {
                    progress_token: progress.then_some(id.as_str()),
                    trace: Trace(trace),
                }),
            },
        };
        // Writing a map of JSON values into a vector cannot fail.
        let body = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
        Prepared { id, body }
    }

    /// Posts `call` with `poster` (the outbound runtime's, or the calling thread's) and
    /// reads its answer, offering its progress to `latest`.
    pub(super) async fn call(
        &self,
        poster: &Poster,
        call: &Prepared,
        latest: Option<&LatestProgress>,
    ) -> Result<Answer, Failure> {
        let session = self.session.get();
        let reply = self
            .post(poster, session.as_deref(), call.body.clone())
            .await?;
        let status = reply.status;
        if status == StatusCode::NOT_FOUND && session.is_some() {
            return Err(Failure::SessionExpired);
        }
        if status.is_success() && reply.media.starts_with("text/event-stream") {
            return self.read_stream(poster, reply, &call.id, latest).await;
        }
        let refused = matches!(status.as_u16(), 401 | 403);
        if !status.is_success() && (refused || !reply.media.starts_with("application/json")) {
            return Err(Failure::Status(status.as_u16()));
        }
        // A server may send a JSON-RPC error with a failure status (429 with -32006, say):
        // the error is the answer, the status only its echo.
        let body =
            reply
                .read_capped(MAX_ANSWER_BYTES as u64)
                .await
                .map_err(|failure| match failure {
                    BodyFailure::TooLarge => Failure::TooLarge,
                    BodyFailure::Lost => Failure::Lost,
                })?;
        let answer = serde_json::from_slice::<Incoming>(&body)
            .ok()
            .and_then(|incoming| answer_of(incoming, &call.id));
        match answer {
            Some(answer) => Ok(answer),
            None if status.is_success() => Err(Failure::Malformed),
            None => Err(Failure::Status(status.as_u16())),
        }
    }

    /// The call's name and arguments, to send it through rmcp instead (a session being
    /// recovered).
    pub(super) fn params_of(&self, call: &Prepared) -> Option<CallToolRequestParams> {
        let mut request: Value = serde_json::from_slice(&call.body).ok()?;
        let params = request.get_mut("params")?.take();
        serde_json::from_value(params).ok()
    }

    /// Tells the upstream the call `id` is abandoned (`notifications/cancelled`).
    pub(super) async fn cancel(&self, id: &str, reason: &str) {
        let notification = serde_json::json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": reason},
        });
        let body = serde_json::to_vec(&notification).unwrap_or_default();
        let session = self.session.get();
        let _ = self
            .post(&self.poster, session.as_deref(), body.into())
            .await;
    }

    /// The client for work on the outbound runtime.
    pub(super) fn poster(&self) -> &Poster {
        &self.poster
    }

    async fn post(
        &self,
        poster: &Poster,
        session: Option<&str>,
        body: Bytes,
    ) -> Result<Reply, Failure> {
        let mut headers = self.headers.clone();
        if let Some(session) = session {
            // The upstream sent it as a header: it is a header value.
            let value = HeaderValue::from_str(session).map_err(|_| Failure::Lost)?;
            headers.insert(HeaderName::from_static(SESSION_HEADER), value);
        }
        poster
            .post(&self.endpoint, headers, body)
            .await
            .map_err(|()| Failure::Lost)
    }

    /// Reads an event stream until the answer to `id`, relaying its progress to `latest`
    /// and answering the upstream's own requests.
    async fn read_stream(
        &self,
        poster: &Poster,
        reply: Reply,
        id: &str,
        latest: Option<&LatestProgress>,
    ) -> Result<Answer, Failure> {
        let mut read = 0usize;
        let bytes = reply.into_chunks().map(move |chunk| {
            let chunk = chunk?;
            read += chunk.len();
            if read > MAX_ANSWER_BYTES {
                return Err(std::io::Error::other("too large"));
            }
            Ok::<Bytes, std::io::Error>(chunk)
        });
        let mut events = SseStream::from_bytes_stream(bytes);
        let mut total = 0usize;
        while let Some(event) = events.next().await {
            let event = event.map_err(|_| Failure::Lost)?;
            let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
                continue;
            };
            total += data.len();
            if total > MAX_ANSWER_BYTES {
                return Err(Failure::TooLarge);
            }
            let Ok(incoming) = serde_json::from_str::<Incoming>(&data) else {
                continue;
            };
            match (&incoming.method, &incoming.id) {
                (Some(method), None) => relay(method, incoming.params, id, latest),
                (Some(method), Some(request)) => {
                    self.answer(poster, method, request.clone()).await;
                }
                (None, _) => {
                    if let Some(answer) = answer_of(incoming, id) {
                        return Ok(answer);
                    }
                }
            }
        }
        Err(Failure::Lost)
    }

    /// Answers a request the upstream sends during a call: `ping` with an empty result,
    /// anything else as a method tollgate does not have.
    async fn answer(&self, poster: &Poster, method: &str, request: Value) {
        let reply = if method == "ping" {
            serde_json::json!({"jsonrpc": "2.0", "id": request, "result": {}})
        } else {
            serde_json::json!({
                "jsonrpc": "2.0",
                "id": request,
                "error": {"code": -32601, "message": "Method not found"},
            })
        };
        let body = serde_json::to_vec(&reply).unwrap_or_default();
        let session = self.session.get();
        let _ = self.post(poster, session.as_deref(), body.into()).await;
    }
}

/// The answer `incoming` gives to the call `id`, if it is one.
fn answer_of(incoming: Incoming, id: &str) -> Option<Answer> {
    if incoming.id.as_ref().and_then(Value::as_str) != Some(id) {
        return None;
    }
    match (incoming.error, incoming.result) {
        (Some(error), _) => Some(Answer::Rpc {
            code: error.code,
            message: error.message,
        }),
        (None, Some(result)) => Some(Answer::Result(result)),
        (None, None) => None,
    }
}

/// Offers a progress notification of the call `id` to `latest`; other notifications are
/// the session's business, not the call's.
fn relay(method: &str, params: Option<Value>, id: &str, latest: Option<&LatestProgress>) {
    let (Some(latest), Some(params), "notifications/progress") = (latest, params, method) else {
        return;
    };
    let Ok(params) = serde_json::from_value::<ProgressNotificationParam>(params) else {
        return;
    };
    let ours = match &params.progress_token.0 {
        rmcp::model::NumberOrString::String(token) => &**token == id,
        rmcp::model::NumberOrString::Number(_) => false,
    };
    if ours {
        latest.offer(Progress::from(&params));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn direct() -> Direct {
        // As `Backends::open` does for the server.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let tls = || Ok::<_, String>(Poster::Tls(reqwest::Client::new()));
        Direct::new(
            Poster::Tls(reqwest::Client::new()),
            Lanes::new(tls),
            Endpoint::parse("http://127.0.0.1:9/mcp").expect("a URL"),
            &std::collections::HashMap::new(),
            Arc::new(SessionId::default()),
            "2025-06-18",
        )
        .expect("direct")
    }

    #[test]
    fn the_request_carries_the_arguments_without_the_idempotency_key() {
        let direct = direct();
        let mut args = Map::new();
        args.insert("text".into(), json!("hi"));
        args.insert(crate::tools::schema::KEY_ARGUMENT.into(), json!("k-1"));
        let call = direct.prepare("echo", &args, false, &TraceFields::default());
        let body: Value = serde_json::from_slice(&call.body).expect("json");
        assert_eq!(
            body,
            json!({"jsonrpc": "2.0", "id": call.id, "method": "tools/call",
                   "params": {"name": "echo", "arguments": {"text": "hi"}}})
        );
        let again = direct.prepare("echo", &args, true, &TraceFields::default());
        assert_ne!(again.id, call.id);
        let body: Value = serde_json::from_slice(&again.body).expect("json");
        assert_eq!(body["params"]["_meta"], json!({"progressToken": again.id}));
    }

    #[test]
    fn the_request_carries_the_trace_context_in_its_meta() {
        let direct = direct();
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let meta = json!({"traceparent": parent, "tracestate": "team=ops"});
        let trace = TraceFields::continuing(meta.as_object());
        let call = direct.prepare("echo", &Map::new(), false, &trace);
        let body: Value = serde_json::from_slice(&call.body).expect("json");
        assert_eq!(
            body["params"]["_meta"],
            json!({"traceparent": parent, "tracestate": "team=ops"})
        );
        let with_progress = direct.prepare("echo", &Map::new(), true, &trace);
        let body: Value = serde_json::from_slice(&with_progress.body).expect("json");
        assert_eq!(
            body["params"]["_meta"]["progressToken"],
            json!(with_progress.id)
        );
        assert_eq!(body["params"]["_meta"]["traceparent"], parent);
    }

    #[test]
    fn a_call_handed_to_rmcp_keeps_its_name_and_arguments() {
        let direct = direct();
        let mut args = Map::new();
        args.insert("text".into(), json!("hi"));
        let call = direct.prepare("echo", &args, true, &TraceFields::default());
        let params = direct.params_of(&call).expect("params");
        assert_eq!(params.name, "echo");
        assert_eq!(params.arguments, Some(args));
    }

    #[test]
    fn only_the_answer_to_the_call_is_taken() {
        let parse = |v: Value| serde_json::from_value::<Incoming>(v).expect("incoming");
        let result = parse(json!({"jsonrpc": "2.0", "id": "tg-1", "result": {
            "content": [{"type": "text", "text": "hi"}], "structuredContent": {"n": 1}}}));
        assert_eq!(
            answer_of(result, "tg-1"),
            Some(Answer::Result(CallResult {
                content: vec![json!({"type": "text", "text": "hi"})],
                structured: Some(json!({"n": 1})),
                is_error: None,
            }))
        );
        let other = parse(json!({"jsonrpc": "2.0", "id": "tg-2", "result": {"content": []}}));
        assert_eq!(answer_of(other, "tg-1"), None);
        let numeric = parse(json!({"jsonrpc": "2.0", "id": 1, "result": {"content": []}}));
        assert_eq!(answer_of(numeric, "tg-1"), None);
        let error = parse(json!({"jsonrpc": "2.0", "id": "tg-1",
                                 "error": {"code": -32602, "message": "Unknown tool"}}));
        assert_eq!(
            answer_of(error, "tg-1"),
            Some(Answer::Rpc {
                code: -32602,
                message: "Unknown tool".into()
            })
        );
    }

    #[test]
    fn only_the_call_s_own_progress_is_relayed() {
        let latest = LatestProgress::default();
        let params = |token: Value, progress: u32| {
            Some(json!({"progressToken": token, "progress": progress, "total": 10}))
        };
        relay(
            "notifications/progress",
            params(json!("tg-9"), 3),
            "tg-1",
            Some(&latest),
        );
        relay(
            "notifications/progress",
            params(json!(1), 4),
            "tg-1",
            Some(&latest),
        );
        relay(
            "notifications/message",
            params(json!("tg-1"), 5),
            "tg-1",
            Some(&latest),
        );
        assert_eq!(latest.take(), None);
        relay(
            "notifications/progress",
            params(json!("tg-1"), 6),
            "tg-1",
            Some(&latest),
        );
        assert_eq!(
            latest.take().map(|p| (p.progress, p.total)),
            Some((6.0, Some(10.0)))
        );
    }
}
