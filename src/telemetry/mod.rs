//! Traces by OpenTelemetry's MCP conventions: every MCP request is a SERVER span named
//! `{mcp.method.name} {target}` that continues the caller's trace (W3C trace context in
//! `params._meta`, the HTTP `traceparent` header linked), every call to a backend a CLIENT
//! span whose context goes on to the REST API (headers) or the upstream MCP server
//! (`params._meta`), exported over OTLP/HTTP when `[telemetry]` names an endpoint.
//!
//! The SERVER span is the `request` span every request already logs under: the
//! `tracing-opentelemetry` layer installed beside the log formatter turns it into an
//! OpenTelemetry span, so log lines and spans are one instrument and a JSON log line carries
//! the span's `trace_id` and `span_id`. With telemetry off no layer is installed and nothing
//! here costs more than an atomic load, except that a caller's own trace context is still
//! passed on to the backends unchanged and its trace id written in the audit row.
//!
//! - `context`: the W3C fields read from `_meta` and headers, and written onwards.
//! - `spans`: the SERVER span's attributes and outcome, and the CLIENT span of a backend call.
//! - `histogram`: the fixed-bucket latency histogram of `/metrics`.
//! - `export`: the SDK pipeline (sampler, resource, batching, the OTLP exporter) and the
//!   counts of exported and dropped spans.

use std::sync::atomic::{AtomicBool, Ordering};

mod context;
mod export;
mod histogram;
mod spans;

pub use context::{HttpTrace, TraceFields};
pub use export::{Exporting, SpanCounts, SpanLayer, span_counts, start};
pub use histogram::{Histogram, HistogramSnapshot, LATENCY_BUCKETS_MICROS};
pub use spans::{
    ClientCall, ServerRequest, SpanAttributes, annotate, annotate_all, continue_trace,
    current_trace_id, record_failure, records_arguments,
};

/// Whether spans are being recorded (an exporter is running).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are recorded and exported in this process now: configured, and not
/// paused because the collector could not take them.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed) && !export::paused()
}

/// Whether spans are exported in this process (paused or not).
pub fn configured() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Whether a request starting now gets a SERVER span: [`enabled`], and when it is not only
/// because recording is paused, the span it does not get is counted as dropped.
pub fn recording_request() -> bool {
    if !ENABLED.load(Ordering::Relaxed) {
        return false;
    }
    if export::paused() {
        export::count_unrecorded();
        return false;
    }
    true
}
