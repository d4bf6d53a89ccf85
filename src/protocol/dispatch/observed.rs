//! What an answered request leaves besides its response: the outcome on its SERVER span
//! (`error.type`, the JSON-RPC code, an error status) and its time in the
//! `mcp_server_operation_duration_seconds` histogram.

use std::borrow::Cow;
use std::time::Instant;

use serde_json::Value;

use super::{Env, Server, Transport};
use crate::guards::metrics::{self, operations::Operation};
use crate::guards::outcome::Verdict;
use crate::protocol::jsonrpc::Request;
use crate::protocol::revisions::Era;
use crate::telemetry::ServerRequest;
use crate::tools::Resolution;

/// The `error.type` of a tool's own failure (an `isError` result), by the conventions.
const TOOL_ERROR: &str = "tool_error";

impl<'a> Env<'a> {
    /// What the SERVER span of `req` says of it.
    pub(super) fn server_request<'r>(&'r self, req: &'r Request) -> ServerRequest<'r> {
        let target = match req.method.as_str() {
            "tools/call" | "prompts/get" => req.params.get("name").and_then(Value::as_str),
            _ => None,
        };
        ServerRequest {
            method: &req.method,
            target,
            rpc_id: req.id.as_ref(),
            meta: crate::protocol::revisions::meta(req),
            http: self.http.as_ref(),
            session_id: self.session_id,
        }
    }
}

impl Server {
    /// Records how the request `method` (naming the tool `tool`) ended, `verdict`, on
    /// `span` and in the histogram.
    pub(super) fn observe_request(
        &self,
        span: &tracing::Span,
        (method, tool): (&str, Option<&str>),
        verdict: Verdict<'_>,
        env: &Env<'_>,
        started: Instant,
    ) {
        let error_type = match verdict {
            Verdict::Ok => "",
            Verdict::Failed(kind) => {
                let code = kind.map_or("unknown", |k| k.spec().code);
                crate::telemetry::annotate(span, "tollgate.error.code", code);
                crate::telemetry::record_failure(span, TOOL_ERROR, None, code);
                TOOL_ERROR
            }
            Verdict::Rejected(error) => {
                let spec = error.kind().spec();
                crate::telemetry::record_failure(span, spec.code, Some(spec.rpc_code), spec.code);
                spec.code
            }
        };
        let tool = tool.map(|name| match self.registry().resolve(name) {
            Resolution::Tool(tool) => tool.spec().name.clone(),
            Resolution::Retired(_) | Resolution::Held(_) | Resolution::Unknown => {
                Cow::Borrowed(metrics::UNKNOWN_TOOL)
            }
        });
        let operation = Operation {
            method: Operation::method_label(method),
            tool: tool.unwrap_or(Cow::Borrowed("")),
            error_type,
            transport: match env.transport {
                Transport::Http => "tcp",
                Transport::Stdio => "pipe",
            },
        };
        metrics::global().observe_operation(operation, started.elapsed());
    }
}

/// Puts the revision a request is served under on its span.
pub(super) fn note_era(span: &tracing::Span, era: Option<Era>) {
    if let Some(Era::Legacy(version) | Era::Modern(version)) = era {
        crate::telemetry::annotate(span, "mcp.protocol.version", version);
    }
}
