//! What a transport hands to the dispatcher and what it gets back.
//!
//! A transport reads bytes (a stdio line, an HTTP body) and turns them into a [`Message`]
//! with [`Message::parse`], the only JSON-RPC parse of the request path. Before handing the
//! message to [`Server::handle`](crate::protocol::dispatch::Server::handle) it may ask what
//! kind of message it is ([`Message::kind`]): which session it runs in, and, for the
//! stateless revision, what the HTTP headers must repeat. What comes back is a
//! [`Response`]: the body to send and, typed, what the transport needs to know of it (the
//! era, the error, a successful `initialize`, the rate budget), so that no transport reads
//! a rendered body back. Every request is handled inside its log span (`request_span`).

use serde_json::Value;

use crate::catalog::McpError;
use crate::guards::ratelimit::Budget;
use crate::protocol::jsonrpc::{self, Incoming, Parsed, Request, RequestId};
use crate::protocol::revisions::{Era, stateless_version};

/// One body or line, parsed once.
#[derive(Debug)]
pub struct Message(Parsed);

/// What kind of message a [`Message`] is, as far as its transport is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind<'m> {
    /// Not JSON, or not a JSON-RPC message: answered with its error, without a session.
    Unreadable,
    /// A client's answer to a request the server sent, for the session that sent it.
    ClientResponse,
    /// A batch (only the handshake revision that allows them accepts it).
    Batch,
    /// A handshake-era `initialize`: it runs in a session of its own, which it opens.
    Initialize,
    /// Another handshake-era request or notification: it runs in the session it names.
    Handshake,
    /// A request or notification of the stateless revision (its `_meta` names a protocol
    /// version): it needs no session.
    Stateless(Headline<'m>),
}

/// What the 2026-07-28 HTTP headers must repeat of a stateless request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headline<'m> {
    /// The protocol version its `_meta` names (`None` when that is not a string).
    pub protocol_version: Option<&'m str>,
    /// The method.
    pub method: &'m str,
    /// For the methods that name their target (`tools/call` and `prompts/get` by `name`,
    /// `resources/read` by `uri`): that parameter, `None` inside when it is not a string.
    pub name: Option<Option<&'m str>>,
}

impl Message {
    /// Parses one body or stdio line. Never fails: what is not a JSON-RPC message becomes a
    /// message answered with the catalog error that says why.
    pub fn parse(bytes: &[u8]) -> Message {
        Message(jsonrpc::parse(bytes))
    }

    /// What kind of message this is.
    pub fn kind(&self) -> MessageKind<'_> {
        match &self.0 {
            Parsed::NotJson | Parsed::Single(Incoming::Invalid(..)) => MessageKind::Unreadable,
            Parsed::Single(Incoming::Response(..)) => MessageKind::ClientResponse,
            Parsed::Batch(_) => MessageKind::Batch,
            Parsed::Single(Incoming::Request(req)) => match stateless_version(req) {
                Some(version) => MessageKind::Stateless(Headline {
                    protocol_version: version.as_str(),
                    method: &req.method,
                    name: target_name(req),
                }),
                None if req.method == "initialize" => MessageKind::Initialize,
                None => MessageKind::Handshake,
            },
        }
    }

    /// The parsed message, for the dispatcher.
    pub(crate) fn into_parsed(self) -> Parsed {
        self.0
    }

    /// The id of a single request (`None` for a notification, a batch, a client's answer
    /// or an unreadable message).
    pub fn request_id(&self) -> Option<&RequestId> {
        match &self.0 {
            Parsed::Single(Incoming::Request(req)) => req.id.as_ref(),
            _ => None,
        }
    }
}

/// The target a method names, for `Mcp-Name`.
fn target_name(req: &Request) -> Option<Option<&str>> {
    let field = match req.method.as_str() {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        _ => return None,
    };
    Some(req.params.get(field).and_then(Value::as_str))
}

/// The `request` span of one JSON-RPC request: `id`, a per-process sequence number;
/// `rpc_id`, the client's JSON-RPC id as JSON text (control characters escaped); and the
/// `method`. Client-chosen text is cut at 64 characters. The span is at ERROR level so that
/// no log filter drops it: at `--log-level warn` the warnings still carry the request id.
///
/// With traces exported and `trace` given, it is also the request's SERVER span: named
/// `{method} {tool or prompt}`, continuing the caller's trace
/// ([`crate::telemetry::continue_trace`]), its `trace_id` and `span_id` on every log line.
pub(crate) fn request_span(
    req: &Request,
    trace: Option<&crate::telemetry::ServerRequest<'_>>,
) -> tracing::Span {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    fn clip(text: &str) -> &str {
        text.char_indices()
            .nth(64)
            .map_or(text, |(cut, _)| &text[..cut])
    }
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let rpc_id = req
        .id
        .as_ref()
        .map_or_else(|| "null".to_owned(), Value::to_string);
    let Some(trace) = trace.filter(|_| crate::telemetry::recording_request()) else {
        return tracing::error_span!(
            "request",
            id,
            rpc_id = %clip(&rpc_id),
            method = clip(&req.method)
        );
    };
    let name = match trace.target {
        Some(target) => format!("{} {}", clip(&req.method), clip(target)),
        None => clip(&req.method).to_owned(),
    };
    let span = tracing::error_span!(
        "request",
        id,
        rpc_id = %clip(&rpc_id),
        method = clip(&req.method),
        otel.name = %name,
        otel.kind = "server",
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
    );
    crate::telemetry::continue_trace(&span, trace);
    span
}

/// A response to send, with what its transport needs to know of it.
#[derive(Debug)]
pub struct Response {
    /// The JSON-RPC response, or the array of responses to a batch.
    pub body: Value,
    /// The revision the request was served under; `None` when none was selected (an
    /// unreadable message, a batch, or a request whose era was refused).
    pub era: Option<Era>,
    /// The error of an error response (a batch's own responses are not looked into).
    pub error: Option<McpError>,
    /// The negotiated revision, when this answers a successful `initialize`.
    pub initialized: Option<&'static str>,
    /// What is left of the caller's rate budget, when the request was charged.
    pub budget: Option<Budget>,
    /// A guard refusal answered as an `isError` result (the `tool_result` guard channel):
    /// the body is a result and the status 200, but a rate limit's headers still go out.
    pub refusal: Option<McpError>,
}

impl Response {
    /// A response with nothing known about it but its body.
    pub(crate) fn of(body: Value) -> Response {
        Response {
            body,
            era: None,
            error: None,
            initialized: None,
            budget: None,
            refusal: None,
        }
    }

    /// The same response, served under `era`.
    pub(crate) fn in_era(self, era: Option<Era>) -> Response {
        Response { era, ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_of(body: &str) -> String {
        format!("{:?}", Message::parse(body.as_bytes()).kind())
    }

    #[test]
    fn messages_are_told_apart_by_what_their_transport_needs() {
        assert_eq!(kind_of("{"), "Unreadable");
        assert_eq!(kind_of(r#"{"id":1,"method":"ping"}"#), "Unreadable");
        assert_eq!(
            kind_of(r#"{"jsonrpc":"2.0","id":"tollgate-1","result":{}}"#),
            "ClientResponse"
        );
        assert_eq!(
            kind_of(r#"[{"jsonrpc":"2.0","method":"ping","id":1}]"#),
            "Batch"
        );
        assert_eq!(
            kind_of(r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#),
            "Initialize"
        );
        assert_eq!(
            kind_of(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            "Handshake"
        );
    }

    #[test]
    fn a_stateless_request_says_what_its_headers_must_repeat() {
        let body = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x",
            "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let message = Message::parse(body.as_bytes());
        assert_eq!(
            message.kind(),
            MessageKind::Stateless(Headline {
                protocol_version: Some("2026-07-28"),
                method: "tools/call",
                name: Some(Some("x")),
            })
        );
        assert_eq!(message.request_id(), Some(&Value::from(7)));
        let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "_meta":{"io.modelcontextprotocol/protocolVersion":5}}}"#;
        let message = Message::parse(initialize.as_bytes());
        let MessageKind::Stateless(headline) = message.kind() else {
            panic!("a stateless initialize is stateless");
        };
        assert_eq!((headline.protocol_version, headline.name), (None, None));
    }
}
