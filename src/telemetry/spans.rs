//! The spans: a request's SERVER span (its attributes, how it continues the caller's trace,
//! its outcome) and the CLIENT span of a call to a backend.

use opentelemetry::KeyValue;
use opentelemetry::trace::{Status, TraceContextExt};
use serde_json::{Map, Value};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::context::{HttpTrace, TraceFields, from_headers, from_meta};
use super::enabled;

/// Whether a tool call's arguments and result go on its span (`telemetry.record_arguments`).
static RECORD_ARGUMENTS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(super) fn record_arguments(on: bool) {
    RECORD_ARGUMENTS.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether the operator asked for a call's arguments and result on its span.
pub fn records_arguments() -> bool {
    enabled() && RECORD_ARGUMENTS.load(std::sync::atomic::Ordering::Relaxed)
}

/// What the SERVER span of one MCP request says of it.
#[derive(Debug, Default, Clone, Copy)]
pub struct ServerRequest<'a> {
    /// The JSON-RPC method.
    pub method: &'a str,
    /// The tool or prompt the request names, if any.
    pub target: Option<&'a str>,
    /// The JSON-RPC id.
    pub rpc_id: Option<&'a Value>,
    /// The request's `params._meta`.
    pub meta: Option<&'a Map<String, Value>>,
    /// The HTTP request's trace headers and address (`None` on stdio).
    pub http: Option<&'a HttpTrace<'a>>,
    /// The MCP session, when there is one.
    pub session_id: Option<&'a str>,
}

/// Makes the fresh, not yet entered `request` span the SERVER span of `req`: parented on
/// the caller's context in `_meta` (or, without one, in the HTTP headers; both present
/// and different, the headers' context is linked), with the conventions' attributes, and
/// its `trace_id` and `span_id` recorded for the log lines. Nothing when telemetry is off.
pub fn continue_trace(span: &Span, req: &ServerRequest<'_>) {
    if !enabled() {
        return;
    }
    let header = from_headers(req.http);
    match (from_meta(req.meta), header) {
        (Some(parent), header) => {
            if let Some(header) = header {
                let linked = header.span().span_context().clone();
                if linked != *parent.span().span_context() {
                    span.add_link(linked);
                }
            }
            let _ = span.set_parent(parent);
        }
        (None, Some(parent)) => {
            let _ = span.set_parent(parent);
        }
        (None, None) => {}
    }
    // Set at once on the started span: one look-up of it, where the span's own
    // `set_attribute` makes one per attribute.
    let mut attributes = Vec::with_capacity(8);
    attributes.push(KeyValue::new("mcp.method.name", req.method.to_owned()));
    match (req.method, req.target) {
        ("tools/call", Some(name)) => {
            attributes.push(KeyValue::new("gen_ai.tool.name", name.to_owned()));
            attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        }
        ("prompts/get", Some(name)) => {
            attributes.push(KeyValue::new("gen_ai.prompt.name", name.to_owned()));
        }
        _ => {}
    }
    if let Some(id) = req.rpc_id {
        let id = match id {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        attributes.push(KeyValue::new("jsonrpc.request.id", id));
    }
    if let Some(session) = req.session_id {
        attributes.push(KeyValue::new("mcp.session.id", session.to_owned()));
    }
    match req.http {
        Some(http) => {
            attributes.push(KeyValue::new("network.transport", "tcp"));
            attributes.push(KeyValue::new("network.protocol.name", "http"));
            if let Some(local) = http.local {
                attributes.push(KeyValue::new("server.address", local.ip().to_string()));
                attributes.push(KeyValue::new("server.port", i64::from(local.port())));
            }
        }
        None => attributes.push(KeyValue::new("network.transport", "pipe")),
    }
    let cx = span.context();
    let started = cx.span();
    started.set_attributes(attributes);
    let ids = started.span_context();
    span.record("trace_id", tracing::field::display(ids.trace_id()));
    span.record("span_id", tracing::field::display(ids.span_id()));
}

/// Sets one more attribute on `span` (the protocol revision, the guards' decisions).
pub fn annotate(span: &Span, key: &'static str, value: impl Into<opentelemetry::Value>) {
    if enabled() {
        span.set_attribute(key, value);
    }
}

/// Sets several attributes on `span` at once: one look-up of its OpenTelemetry span, where
/// [`annotate`] makes one each.
pub fn annotate_all(
    span: &Span,
    attributes: impl IntoIterator<Item = (&'static str, opentelemetry::Value)>,
) {
    if enabled() {
        let attributes = attributes
            .into_iter()
            .map(|(key, value)| KeyValue::new(key, value));
        span.context().span().set_attributes(attributes);
    }
}

/// Marks `span` failed: `error_type` is the catalog's string code of a refusal or
/// `tool_error`; `rpc_code` the JSON-RPC error code of an error response.
pub fn record_failure(span: &Span, error_type: &str, rpc_code: Option<i64>, message: &str) {
    if !enabled() {
        return;
    }
    span.set_attribute("error.type", error_type.to_owned());
    if let Some(code) = rpc_code {
        span.set_attribute("rpc.response.status_code", code.to_string());
    }
    span.set_status(Status::error(message.to_owned()));
}

/// The trace id of the request being handled on this thread, for its audit row: its span's
/// with telemetry on, otherwise the one the caller sent in `meta`.
pub fn current_trace_id(meta: Option<&Map<String, Value>>) -> Option<String> {
    let cx = if enabled() {
        Span::current().context()
    } else {
        from_meta(meta)?
    };
    let span = cx.span();
    let ids = span.span_context();
    ids.is_valid().then(|| ids.trace_id().to_string())
}

/// The attributes of a CLIENT span, each with its type (`server.port` is an integer).
pub type SpanAttributes = Vec<(&'static str, opentelemetry::Value)>;

/// The CLIENT span of one call to a backend, and the trace fields the call carries.
pub struct ClientCall {
    span: Option<Span>,
    fields: TraceFields,
}

impl ClientCall {
    /// Starts the span `name` under the request being handled on this thread, with
    /// `attributes`. With telemetry off there is no span, and the caller's own context in
    /// `meta` is what goes on.
    pub fn start(
        describe: impl FnOnce() -> (String, SpanAttributes),
        meta: Option<&Map<String, Value>>,
    ) -> ClientCall {
        if !enabled() {
            let fields = TraceFields::continuing(meta);
            return ClientCall { span: None, fields };
        }
        let (name, attributes) = describe();
        let span = tracing::error_span!("backend call", otel.name = %name, otel.kind = "client");
        for (key, value) in attributes {
            span.set_attribute(key, value);
        }
        let fields = TraceFields::of(&span.context());
        ClientCall {
            span: Some(span),
            fields,
        }
    }

    /// What goes to the backend with the call.
    pub fn fields(&self) -> &TraceFields {
        &self.fields
    }

    /// Ends the span, failed with the catalog code `error_type` when the call failed.
    pub fn finish(self, error_type: Option<&str>) {
        if let (Some(span), Some(error_type)) = (&self.span, error_type) {
            record_failure(span, error_type, None, error_type);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Mutex};

    use opentelemetry::trace::{SpanKind, TracerProvider as _};
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
    use serde_json::json;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// Keeps what it is given.
    #[derive(Debug, Clone, Default)]
    struct Kept(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Kept {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.lock().expect("spans").extend(batch);
            Ok(())
        }
    }

    /// The spans `work` makes with a layer like the one `export::start` installs (one
    /// test at a time: the switch is the process's).
    fn spans_of(work: impl FnOnce()) -> Vec<SpanData> {
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
        let _turn = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let kept = Kept::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(kept.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
        let subscriber = tracing_subscriber::registry().with(layer);
        super::super::ENABLED.store(true, Ordering::Relaxed);
        tracing::subscriber::with_default(subscriber, work);
        super::super::ENABLED.store(false, Ordering::Relaxed);
        let _ = provider.force_flush();
        kept.0.lock().expect("spans").clone()
    }

    fn attribute(span: &SpanData, key: &str) -> Option<String> {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    }

    const CALLER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const CALLER_SPAN: &str = "b7ad6b7169203331";

    #[test]
    fn a_request_continues_the_callers_trace_and_its_backend_call_carries_it_on() {
        let meta = json!({"traceparent": format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")});
        let header = "00-11111111111111111111111111111111-2222222222222222-01";
        let http = HttpTrace {
            traceparent: Some(header),
            tracestate: None,
            local: Some("127.0.0.1:8787".parse().expect("address")),
        };
        let mut sent = TraceFields::default();
        let mut audited = None;
        let spans = spans_of(|| {
            let span = tracing::error_span!(
                "request",
                otel.name = "tools/call lookup",
                otel.kind = "server",
                trace_id = tracing::field::Empty,
                span_id = tracing::field::Empty,
            );
            continue_trace(
                &span,
                &ServerRequest {
                    method: "tools/call",
                    target: Some("lookup"),
                    rpc_id: Some(&json!(7)),
                    meta: meta.as_object(),
                    http: Some(&http),
                    session_id: Some("s-1"),
                },
            );
            let _entered = span.enter();
            let call = ClientCall::start(
                || {
                    (
                        "tools/call lookup".to_owned(),
                        vec![("tollgate.backend", "wh".into())],
                    )
                },
                None,
            );
            sent = call.fields().clone();
            call.finish(Some("backend_unavailable"));
            audited = current_trace_id(None);
            record_failure(&span, "tool_error", None, "backend_unavailable");
        });
        assert_eq!(spans.len(), 2, "{spans:?}");
        let client = spans
            .iter()
            .find(|s| s.span_kind == SpanKind::Client)
            .expect("client");
        let server = spans
            .iter()
            .find(|s| s.span_kind == SpanKind::Server)
            .expect("server");
        assert_eq!(server.name, "tools/call lookup");
        assert_eq!(server.span_context.trace_id().to_string(), CALLER_TRACE);
        assert_eq!(server.parent_span_id.to_string(), CALLER_SPAN);
        assert_eq!(
            server.links.links.len(),
            1,
            "the header's context is linked"
        );
        for (key, value) in [
            ("mcp.method.name", "tools/call"),
            ("gen_ai.tool.name", "lookup"),
            ("gen_ai.operation.name", "execute_tool"),
            ("jsonrpc.request.id", "7"),
            ("mcp.session.id", "s-1"),
            ("network.transport", "tcp"),
            ("server.address", "127.0.0.1"),
            ("server.port", "8787"),
            ("error.type", "tool_error"),
        ] {
            assert_eq!(attribute(server, key).as_deref(), Some(value), "{key}");
        }
        assert_eq!(server.status, Status::error("backend_unavailable"));
        assert_eq!(client.parent_span_id, server.span_context.span_id());
        assert_eq!(client.span_context.trace_id().to_string(), CALLER_TRACE);
        assert_eq!(
            attribute(client, "error.type").as_deref(),
            Some("backend_unavailable")
        );
        let traceparent = sent
            .iter()
            .find(|(k, _)| *k == "traceparent")
            .map(|(_, v)| v.to_owned())
            .expect("traceparent sent on");
        assert_eq!(
            traceparent,
            format!("00-{CALLER_TRACE}-{}-01", client.span_context.span_id())
        );
        assert_eq!(audited.as_deref(), Some(CALLER_TRACE));
    }

    #[test]
    fn without_a_caller_context_the_header_is_the_parent() {
        let header = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
        let http = HttpTrace {
            traceparent: Some(&header),
            tracestate: None,
            local: None,
        };
        let spans = spans_of(|| {
            let span = tracing::error_span!("request", otel.kind = "server");
            continue_trace(
                &span,
                &ServerRequest {
                    method: "tools/list",
                    http: Some(&http),
                    ..ServerRequest::default()
                },
            );
        });
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].span_context.trace_id().to_string(), CALLER_TRACE);
        assert_eq!(spans[0].parent_span_id.to_string(), CALLER_SPAN);
        assert!(spans[0].links.links.is_empty());
    }
}
