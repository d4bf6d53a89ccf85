//! W3C trace context as it travels: `traceparent`, `tracestate` and `baggage`, unprefixed in
//! an MCP request's `params._meta` (SEP-414) and as HTTP headers. Read and written by
//! OpenTelemetry's own propagators, never parsed here.

use std::net::SocketAddr;
use std::sync::OnceLock;

use opentelemetry::Context;
use opentelemetry::propagation::{
    Extractor, Injector, TextMapCompositePropagator, TextMapPropagator,
};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use serde_json::{Map, Value};

/// The trace context and address an HTTP request came with.
#[derive(Debug, Default, Clone, Copy)]
pub struct HttpTrace<'a> {
    /// The `traceparent` header.
    pub traceparent: Option<&'a str>,
    /// The `tracestate` header.
    pub tracestate: Option<&'a str>,
    /// The listener's address the request reached (`server.address`, `server.port`).
    pub local: Option<SocketAddr>,
}

/// The propagators of W3C Trace Context and Baggage, together.
fn propagator() -> &'static TextMapCompositePropagator {
    static PROPAGATOR: OnceLock<TextMapCompositePropagator> = OnceLock::new();
    PROPAGATOR.get_or_init(|| {
        TextMapCompositePropagator::new(vec![
            Box::new(TraceContextPropagator::new()),
            Box::new(BaggagePropagator::new()),
        ])
    })
}

/// A request's `_meta`, read as a carrier of the W3C fields.
struct MetaCarrier<'a>(&'a Map<String, Value>);

impl Extractor for MetaCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

impl Extractor for HttpTrace<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => self.traceparent,
            "tracestate" => self.tracestate,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// The caller's context in `meta`, when it names a valid remote span.
pub(super) fn from_meta(meta: Option<&Map<String, Value>>) -> Option<Context> {
    let meta = meta.filter(|m| m.contains_key("traceparent"))?;
    valid(propagator().extract(&MetaCarrier(meta)))
}

/// The context in an HTTP request's headers, when they name a valid remote span.
pub(super) fn from_headers(http: Option<&HttpTrace<'_>>) -> Option<Context> {
    let http = http.filter(|h| h.traceparent.is_some())?;
    valid(TraceContextPropagator::new().extract(http))
}

fn valid(cx: Context) -> Option<Context> {
    cx.span().span_context().is_valid().then_some(cx)
}

/// The W3C fields to send onwards: as headers to a REST API, in `params._meta` to an
/// upstream MCP server. Empty when there is no trace to continue.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TraceFields(Vec<(String, String)>);

impl TraceFields {
    /// The fields of `cx`'s span (and baggage).
    pub(super) fn of(cx: &Context) -> TraceFields {
        let mut fields = TraceFields::default();
        if cx.span().span_context().is_valid() {
            propagator().inject_context(cx, &mut fields);
        }
        fields
    }

    /// The caller's own context in `meta` (a request's `_meta`), passed on unchanged;
    /// empty when it names no valid span.
    pub fn continuing(meta: Option<&Map<String, Value>>) -> TraceFields {
        from_meta(meta)
            .map(|cx| TraceFields::of(&cx))
            .unwrap_or_default()
    }

    /// Each field's name and value.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The fields as entries of an upstream request's `_meta`.
    pub fn to_meta(&self) -> Map<String, Value> {
        self.iter()
            .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
            .collect()
    }
}

impl Injector for TraceFields {
    /// Keeps a field that says something: the trace-context propagator writes `tracestate`
    /// even when there is none, and an empty one is not sent on.
    fn set(&mut self, key: &str, value: String) {
        if !value.trim().is_empty() {
            self.0.push((key.to_owned(), value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn a_context_in_meta_passes_on_unchanged() {
        let meta = json!({"traceparent": PARENT, "tracestate": "vendor=1", "progressToken": 3});
        let cx = from_meta(meta.as_object()).expect("a valid parent");
        let fields = TraceFields::of(&cx);
        let sent: Vec<_> = fields.iter().collect();
        assert!(sent.contains(&("traceparent", PARENT)), "{sent:?}");
        assert!(sent.contains(&("tracestate", "vendor=1")), "{sent:?}");
        assert_eq!(fields.to_meta()["traceparent"], PARENT);
    }

    #[test]
    fn an_empty_tracestate_is_not_sent_on() {
        let meta = json!({"traceparent": PARENT});
        let fields = TraceFields::continuing(meta.as_object());
        let sent: Vec<_> = fields.iter().collect();
        assert_eq!(sent, vec![("traceparent", PARENT)]);
        assert_eq!(
            Value::Object(fields.to_meta()),
            json!({"traceparent": PARENT})
        );
    }

    #[test]
    fn an_invalid_or_missing_traceparent_is_no_context() {
        for meta in [
            json!({}),
            json!({"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"}),
            json!({"traceparent": "not a traceparent"}),
            json!({"traceparent": 7}),
        ] {
            assert!(from_meta(meta.as_object()).is_none(), "{meta}");
        }
        assert!(from_meta(None).is_none());
        assert!(TraceFields::of(&Context::new()).is_empty());
    }

    #[test]
    fn headers_are_read_like_meta() {
        let http = HttpTrace {
            traceparent: Some(PARENT),
            tracestate: None,
            local: None,
        };
        let cx = from_headers(Some(&http)).expect("valid");
        assert_eq!(
            cx.span().span_context().trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert!(from_headers(Some(&HttpTrace::default())).is_none());
    }
}
