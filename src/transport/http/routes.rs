//! Routing of the HTTP transport: the head of a request read once, which handler serves
//! which path, and the small endpoints beside `/mcp` (health, metrics, the OAuth documents
//! and token endpoint, the operator's console).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use serde_json::json;
use tiny_http::{Method, Request};

use super::app::App;
use super::mcp::accepts_sse;
use super::sse::{Outgoing, Stream};
use super::status::{Body, Reply};
use super::{HttpHead, Slots};
use crate::catalog::{ErrorKind, McpError};
use crate::tools::backends::BackendStatus;

/// Whether the request names one host (RFC 9112 §3.2): exactly one non-empty `Host`, or
/// none on HTTP/1.0. Two `Host` lines could be read differently by a proxy in front and by
/// the origin check here, so such a request is refused before anything looks at it.
fn host_is_unambiguous(head: &HttpHead, version: tiny_http::HTTPVersion) -> bool {
    let mut hosts = head.headers.iter().filter(|(name, _)| name == "host");
    match (hosts.next(), hosts.next()) {
        (Some((_, value)), None) => !value.trim().is_empty(),
        (None, _) => (version.0, version.1) < (1, 1),
        (Some(_), Some(_)) => false,
    }
}

/// A reply of the API-key endpoint: its challenge names no protected resource metadata,
/// so that a host configured with a header keeps sending it instead of starting OAuth.
fn without_discovery(mut reply: Reply) -> Reply {
    for (name, value) in &mut reply.headers {
        if name.eq_ignore_ascii_case("WWW-Authenticate") && value.contains("resource_metadata") {
            *value = "Bearer realm=\"tollgate\"".to_owned();
        }
    }
    reply
}

/// One backend's line in `/healthz`: its state (with the reason when not ready) and tool
/// count (an upstream MCP server's resource, template and prompt counts too); its calls in flight (of `max_in_flight`) and waiting for a slot; its circuit
/// (`closed`, `open`, `half_open`) and, while open, the seconds until a trial call
/// (`retry_after`); how many of its tools were left out by reason (`left_out`) and how
/// many descriptions cut (`descriptions_cut`) and tools held for review
/// (`held_for_review`) when any.
fn backend_health(b: &BackendStatus) -> serde_json::Value {
    let mut line = json!({
        "name": b.name, "kind": b.kind,
        "state": b.health.as_str(), "tools": b.tools,
    });
    let [resources, templates, prompts] = b.offered;
    if b.kind == "mcp" {
        line["resources"] = resources.into();
        line["resource_templates"] = templates.into();
        line["prompts"] = prompts.into();
    }
    if let Some(reason) = b.health.reason() {
        line["reason"] = reason.into();
    }
    if let Some(fields) = line.as_object_mut() {
        fields.extend(b.admission.fields());
    }
    // Counts only: tool names an upstream made up are not echoed on an unauthenticated
    // page (`backends check` names them).
    if !b.listing.left_out.is_empty() {
        line["left_out"] = b
            .listing
            .left_out
            .iter()
            .map(|(reason, n)| (reason.as_str().to_owned(), json!(n)))
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    if b.listing.descriptions_cut > 0 {
        line["descriptions_cut"] = b.listing.descriptions_cut.into();
    }
    if b.listing.held > 0 {
        line["held_for_review"] = b.listing.held.into();
    }
    line
}

impl App {
    /// Serves one request whose body is read; a panic in a handler becomes a `-32603`.
    pub(super) fn handle(
        &self,
        request: Request,
        body: Result<Vec<u8>, McpError>,
        slots: Option<Arc<Slots>>,
    ) {
        let (path, query) = request.url().split_once('?').unwrap_or((request.url(), ""));
        let head = HttpHead {
            method: request.method().clone(),
            path: path.to_owned(),
            query: query.to_owned(),
            headers: request
                .headers()
                .iter()
                .map(|h| {
                    (
                        h.field.as_str().as_str().to_ascii_lowercase(),
                        h.value.as_str().to_owned(),
                    )
                })
                .collect(),
            peer: request.remote_addr().copied(),
        };
        let one_host = host_is_unambiguous(&head, request.http_version().clone());
        let stream = Stream::new(request, accepts_sse(&head), body, slots);
        if !one_host {
            let reply = self.error_reply(None, McpError::new(ErrorKind::HostHeaderInvalid));
            stream.finish(Outgoing::Reply(reply));
            return;
        }
        let reply =
            catch_unwind(AssertUnwindSafe(|| self.route(&head, &stream))).unwrap_or_else(|_| {
                tracing::error!(path = %head.path, "a request handler panicked");
                Outgoing::Reply(self.error_reply(None, McpError::internal()))
            });
        stream.finish(reply);
    }

    /// Which handler serves the request.
    fn route(&self, head: &HttpHead, stream: &Stream) -> Outgoing {
        let reply = match (&head.method, head.path.as_str()) {
            (Method::Get, "/healthz") => self.healthz(),
            (Method::Get, "/metrics") if self.metrics.is_some() => self.metrics_page(head),
            (Method::Get, p) if p.starts_with("/.well-known/") => self.oauth_metadata(head),
            (_, "/mcp") => return self.mcp(head, stream),
            (_, p) if self.key_path.as_deref() == Some(p) => {
                return match self.mcp(head, stream) {
                    Outgoing::Reply(reply) => Outgoing::Reply(without_discovery(reply)),
                    streaming => streaming,
                };
            }
            (_, p) if p.starts_with("/oauth/") => match self.oauth_endpoint(head, stream) {
                Some(reply) => reply,
                None => self.error_reply(None, McpError::new(ErrorKind::PathNotFound)),
            },
            (_, p) if p == "/console" || p.starts_with("/console/") => match &self.console {
                Some(console) => self.console_page(console, head, stream),
                None => self.error_reply(None, McpError::new(ErrorKind::PathNotFound)),
            },
            _ => self.error_reply(None, McpError::new(ErrorKind::PathNotFound)),
        };
        Outgoing::Reply(reply)
    }

    /// `GET /healthz`: 200 while the store can read and write; otherwise 503 with the
    /// catalog code `backend_unavailable` and the reason (`disk_full`,
    /// `database_unreachable`, …). Both name the store (`sqlite` or `postgres`). With
    /// backends, each one's line ([`backend_health`]); a backend never changes the status.
    pub(super) fn healthz(&self) -> Reply {
        let store = self.server.store();
        let engine = match store.dialect() {
            crate::store::Dialect::Sqlite => "sqlite",
            crate::store::Dialect::Postgres => "postgres",
        };
        match store.health() {
            Ok(version) => {
                let mut body = json!({"status": "ok", "store": engine, "schema_version": version});
                let backends = self.server.backends().status();
                if !backends.is_empty() {
                    body["backends"] = backends.iter().map(backend_health).collect();
                }
                Reply::json(200, body)
            }
            Err(reason) => {
                tracing::warn!(reason = reason.code(), "health check failed: {reason}");
                let code = ErrorKind::BackendUnavailable.spec().code;
                Reply::json(
                    503,
                    json!({"status": "unavailable", "store": engine, "code": code,
                           "reason": reason.code()}),
                )
            }
        }
    }

    /// A page of the operator's console, behind the same `Host`/`Origin` policy as `/mcp`.
    fn console_page(
        &self,
        console: &crate::console::Console,
        head: &HttpHead,
        stream: &Stream,
    ) -> Reply {
        if let Err(err) = self.origins.check(head) {
            return self.error_reply(None, err);
        }
        let method = match head.method {
            Method::Get | Method::Head => crate::console::Method::Get,
            Method::Post => crate::console::Method::Post,
            _ => crate::console::Method::Other,
        };
        let body = if method == crate::console::Method::Post {
            match stream.read_body(self.max_body) {
                Ok(body) => body,
                Err(err) => return self.error_reply(None, err),
            }
        } else {
            Vec::new()
        };
        let source = self.client_source(head);
        let response = console.handle(&crate::console::Request {
            method,
            path: &head.path,
            query: &head.query,
            headers: &head.headers,
            body: &body,
            source: &source,
        });
        Reply {
            status: response.status,
            headers: response.headers,
            body: Body::Bytes(response.body),
        }
    }

    /// The Prometheus page; `Host`/`Origin` are checked as on `/mcp` (DNS rebinding).
    fn metrics_page(&self, head: &HttpHead) -> Reply {
        match (self.origins.check(head), self.metrics) {
            (Ok(()), Some(metrics)) => Reply {
                status: 200,
                headers: vec![(
                    "Content-Type".into(),
                    crate::guards::metrics::CONTENT_TYPE.into(),
                )],
                body: Body::Bytes({
                    let mut page = metrics.render();
                    crate::guards::metrics::backends::render_backends(
                        &mut page,
                        self.server.backends(),
                    );
                    crate::guards::metrics::render_identity(
                        &mut page,
                        self.server.guards().authenticator().identity(),
                    );
                    self.authorization.render_metrics(&mut page);
                    crate::guards::approvals::render_approvals(
                        &mut page,
                        self.server.store(),
                        self.server.clock().unix_millis(),
                    );
                    page.into_bytes()
                }),
            },
            (Err(err), _) => self.error_reply(None, err),
            (Ok(()), None) => self.error_reply(None, McpError::new(ErrorKind::PathNotFound)),
        }
    }
}
