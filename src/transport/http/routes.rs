//! Routing of the HTTP transport: the state shared by its handlers ([`App`]), the parts of
//! a request they read ([`HttpHead`]), which handler serves which path, and the small
//! endpoints beside `/mcp` (health, metrics, the OAuth documents and token endpoint).

use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, OnceLock};

use serde_json::json;
use tiny_http::{Method, Request};

use super::mcp::accepts_sse;
use super::origin::OriginPolicy;
use super::sse::{Outgoing, Stream};
use super::status::{Body, Reply};
use crate::catalog::{ErrorKind, McpError};
use crate::config::{ClientAddressHeader, Config, ErrorStatusMode, ProxyRange};
use crate::protocol::dispatch::Server;
use crate::transport::http::sessions::Sessions;

/// The request-independent state of the HTTP transport.
pub(super) struct App {
    pub(super) server: Arc<Server>,
    pub(super) sessions: Sessions,
    pub(super) origins: OriginPolicy,
    pub(super) max_body: usize,
    pub(super) mode: ErrorStatusMode,
    pub(super) public_base_url: Option<String>,
    /// `http://<bound address>`, the base URL when no public one is configured.
    pub(super) listen_url: OnceLock<String>,
    /// Peers whose client-address header names the real client (`http.trusted_proxies`).
    pub(super) trusted_proxies: Vec<ProxyRange>,
    pub(super) client_address_header: ClientAddressHeader,
    pub(super) dev_credential: Option<String>,
    pub(super) oauth: crate::transport::http::oauth::Endpoints,
    /// `GET /metrics` is served (`http.metrics`).
    pub(super) metrics: Option<&'static crate::guards::metrics::Metrics>,
    /// The operator's console under `/console` (`console.enabled`).
    pub(super) console: Option<crate::console::Console>,
}

/// The parts of a request the handlers look at, read once.
pub struct HttpHead {
    /// `GET`, `POST`, …
    pub method: Method,
    /// Path without the query.
    pub path: String,
    /// The query, without `?` (empty when there is none).
    pub query: String,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
    /// The peer address.
    pub peer: Option<SocketAddr>,
}

impl HttpHead {
    /// The first header with this lowercase name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

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

impl App {
    /// The transport's state, from `[http]` and `[dev]`.
    pub(super) fn new(server: Arc<Server>, config: &Config) -> App {
        let clock = server.clock().clone();
        let store = server.store().clone();
        let console = crate::console::Console::new(Arc::clone(&server), config);
        App {
            server,
            sessions: Sessions::new(config.http.session_ttl, clock.clone(), store),
            origins: OriginPolicy::new(&config.http.allowed_hosts, &config.http.allowed_origins),
            max_body: config.http.max_body_bytes,
            mode: config.http.error_status,
            public_base_url: config.http.public_base_url.clone(),
            listen_url: OnceLock::new(),
            trusted_proxies: config.http.trusted_proxies.clone(),
            client_address_header: config.http.client_address_header,
            dev_credential: config.dev.unauthenticated_credential.clone(),
            oauth: crate::transport::http::oauth::Endpoints::new(clock),
            metrics: config.http.metrics.then(crate::guards::metrics::global),
            console,
        }
    }

    /// Serves one request whose body is read; a panic in a handler becomes a `-32603`.
    pub(super) fn handle(&self, request: Request, body: Result<Vec<u8>, McpError>) {
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
        let stream = Stream::new(request, accepts_sse(&head), body);
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
            (Method::Post, "/oauth/token") => self.oauth_token(head, stream),
            (_, "/mcp") => return self.mcp(head, stream),
            (_, p) if p == "/console" || p.starts_with("/console/") => match &self.console {
                Some(console) => self.console_page(console, head, stream),
                None => self.error_reply(None, McpError::new(ErrorKind::PathNotFound)),
            },
            _ => self.error_reply(None, McpError::new(ErrorKind::PathNotFound)),
        };
        Outgoing::Reply(reply)
    }

    /// RFC 9728 and RFC 8414 documents. `Host`/`Origin` are checked as on `/mcp`, so a
    /// rebinding page cannot read them, and the URLs in them never come from the request.
    fn oauth_metadata(&self, head: &HttpHead) -> Reply {
        if let Err(err) = self.origins.check(head) {
            return self.error_reply(None, err);
        }
        let base = self.base_url();
        let mut backend_scopes: Vec<String> = self
            .server
            .registry()
            .tools()
            .iter()
            .filter(|t| t.tool.backend().is_some())
            .map(|t| t.spec().scope.to_string())
            .collect();
        backend_scopes.sort();
        backend_scopes.dedup();
        match head.path.as_str() {
            p if p.starts_with("/.well-known/oauth-protected-resource") => Reply::json(
                200,
                crate::transport::http::oauth::protected_resource_metadata(&base, &backend_scopes),
            ),
            "/.well-known/oauth-authorization-server" => Reply::json(
                200,
                crate::transport::http::oauth::authorization_server_metadata(
                    &base,
                    &backend_scopes,
                ),
            ),
            _ => self.error_reply(None, McpError::new(ErrorKind::PathNotFound)),
        }
    }

    /// `POST /oauth/token`, behind the same `Host`/`Origin` policy as `/mcp`.
    pub(super) fn oauth_token(&self, head: &HttpHead, stream: &Stream) -> Reply {
        if let Err(err) = self.origins.check(head) {
            return self.error_reply(None, err);
        }
        match stream.read_body(self.max_body) {
            Ok(body) => {
                let source = self.client_source(head);
                let (status, headers, body) = self.oauth.token(&self.server, head, &source, &body);
                let mut reply = Reply::json(status, body);
                reply.headers.extend(headers);
                reply.header("Cache-Control", "no-store")
            }
            Err(err) => self.error_reply(None, err),
        }
    }

    /// `GET /healthz`: 200 while the store can read and write; otherwise 503 with the
    /// catalog code `backend_unavailable` and the reason (`disk_full`,
    /// `database_unreachable`, …). Both name the store (`sqlite` or `postgres`). With
    /// backends, each one's state and tool count, and how many of its tools were left out
    /// by reason (`left_out`) and how many descriptions cut (`descriptions_cut`) when any.
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
                    body["backends"] = backends
                        .iter()
                        .map(|b| {
                            let mut line = json!({
                                "name": b.name, "kind": b.kind,
                                "state": b.health.as_str(), "tools": b.tools,
                            });
                            if let Some(reason) = b.health.reason() {
                                line["reason"] = reason.into();
                            }
                            // Counts only: tool names an upstream made up are not echoed
                            // on an unauthenticated page (`backends check` names them).
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
                            line
                        })
                        .collect();
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
                    crate::guards::metrics::render_backends(&mut page, self.server.backends());
                    page.into_bytes()
                }),
            },
            (Err(err), _) => self.error_reply(None, err),
            (Ok(()), None) => self.error_reply(None, McpError::new(ErrorKind::PathNotFound)),
        }
    }

    /// Records the address the listener is bound to (the base URL when no public one is
    /// configured). A wildcard address names nothing a client can reach, so it is said.
    pub(super) fn set_listening(&self, addr: SocketAddr) {
        if self.public_base_url.is_none() && addr.ip().is_unspecified() {
            tracing::warn!(
                listen = %addr,
                "http.public_base_url is not set and the listener is bound to a wildcard \
                 address; OAuth metadata will name it; set http.public_base_url"
            );
        }
        let _ = self.listen_url.set(format!("http://{addr}"));
    }

    /// The base of every URL this server advertises (OAuth metadata, the
    /// `WWW-Authenticate` challenge): `http.public_base_url`, otherwise the bound
    /// listening address — never the request's `Host`.
    pub(super) fn base_url(&self) -> String {
        match &self.public_base_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => self
                .listen_url
                .get()
                .cloned()
                .unwrap_or_else(|| "http://127.0.0.1:8787".to_owned()),
        }
    }
}

/// A `POST /mcp` head with these (lowercase) headers, for unit tests.
#[cfg(test)]
pub(super) fn test_head(headers: &[(&str, &str)]) -> HttpHead {
    HttpHead {
        method: Method::Post,
        path: "/mcp".into(),
        query: String::new(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        peer: None,
    }
}
