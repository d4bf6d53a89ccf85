//! `mcp_server_operation_duration_seconds`: OpenTelemetry's MCP histogram of the time to
//! answer each request, by method, tool, error type and transport, in Prometheus form.
//! Every label value is bounded: a method of the fixed list below (else `other`), a tool
//! of the registry (else `unknown`), a catalog code or `tool_error`, `tcp` or `pipe`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use super::{header, histogram};
use crate::telemetry::Histogram;

/// The MCP methods named in the `mcp_method_name` label; any other is `other`.
const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "notifications/initialized",
    "notifications/cancelled",
];

/// One operation's labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Operation {
    /// `mcp_method_name`.
    pub method: &'static str,
    /// `gen_ai_tool_name`: a registry name, `unknown`, or empty for a method without one.
    pub tool: Cow<'static, str>,
    /// `error_type`: empty on success, a catalog code, or `tool_error`.
    pub error_type: &'static str,
    /// `network_transport`: `tcp` (HTTP) or `pipe` (stdio).
    pub transport: &'static str,
}

impl Operation {
    /// The label of `method`: itself when it is an MCP method, else `other`.
    pub fn method_label(method: &str) -> &'static str {
        METHODS
            .iter()
            .find(|known| **known == method)
            .copied()
            .unwrap_or("other")
    }
}

/// The histograms of the operations seen so far.
#[derive(Default)]
pub struct Operations {
    by_labels: RwLock<HashMap<Operation, Arc<Histogram>>>,
}

impl Operations {
    /// Counts one answered request.
    pub fn observe(&self, operation: Operation, elapsed: Duration) {
        let found = self
            .by_labels
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&operation)
            .cloned();
        let histogram = match found {
            Some(histogram) => histogram,
            None => Arc::clone(
                self.by_labels
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(operation)
                    .or_default(),
            ),
        };
        histogram.observe(elapsed);
    }

    /// Appends the family to `page`.
    pub fn render(&self, page: &mut String) {
        let name = "mcp_server_operation_duration_seconds";
        header(
            page,
            name,
            "histogram",
            "Time to answer an MCP request (OpenTelemetry's mcp.server.operation.duration), by method, tool, error type and transport.",
        );
        let mut all: Vec<(Operation, Arc<Histogram>)> = self
            .by_labels
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect();
        all.sort_by(|(a, _), (b, _)| a.cmp(b));
        for (op, h) in all {
            let labels = [
                ("mcp_method_name", op.method),
                ("gen_ai_tool_name", &*op.tool),
                ("error_type", op.error_type),
                ("network_transport", op.transport),
            ];
            histogram(page, name, &labels, &h.snapshot());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_label_set_is_a_histogram_of_its_own() {
        let ops = Operations::default();
        let call = |error_type| Operation {
            method: Operation::method_label("tools/call"),
            tool: Cow::Borrowed("list_invoices"),
            error_type,
            transport: "tcp",
        };
        ops.observe(call(""), Duration::from_micros(300));
        ops.observe(call(""), Duration::from_millis(30));
        ops.observe(call("insufficient_scope"), Duration::from_micros(100));
        let mut page = String::new();
        ops.render(&mut page);
        assert!(page.contains(
            "mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\",gen_ai_tool_name=\"list_invoices\",error_type=\"\",network_transport=\"tcp\"} 2"
        ), "{page}");
        assert!(page.contains(
            "mcp_server_operation_duration_seconds_bucket{mcp_method_name=\"tools/call\",gen_ai_tool_name=\"list_invoices\",error_type=\"insufficient_scope\",network_transport=\"tcp\",le=\"0.0005\"} 1"
        ), "{page}");
        assert!(page.contains(
            "mcp_server_operation_duration_seconds_sum{mcp_method_name=\"tools/call\",gen_ai_tool_name=\"list_invoices\",error_type=\"\",network_transport=\"tcp\"} 0.0303"
        ), "{page}");
        assert_eq!(Operation::method_label("made/up"), "other");
    }
}
