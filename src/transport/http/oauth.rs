//! The OAuth endpoints on the listener: the discovery documents (RFC 9728, RFC 8414) and
//! the endpoints of tollgate's authorization server ([`crate::oauth`]): authorize, the
//! person's sign-in and consent forms, the identity provider's return, token, registration
//! and revocation. Each sits behind the same `Host`/`Origin` policy as `/mcp`; the URLs in
//! the documents never come from the request. Pages come from the console's front door.
//!
//! Errors here are RFC 6749 bodies (`{"error": "invalid_client", …}`), not JSON-RPC: these
//! are not MCP endpoints.

use tiny_http::Method;

use super::HttpHead;
use super::app::App;
use super::sse::Stream;
use super::status::{Body, Reply};
use crate::catalog::{ErrorKind, McpError};
use crate::oauth::{Context, MAX_REGISTRATION_BYTES};

/// The protected resource metadata of `/mcp`: at the root and at the resource's own path.
const PRM_PATHS: &[&str] = &[
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-protected-resource/mcp",
];

impl App {
    /// Every scope tollgate knows: the built-in tools' and the backends', each once.
    fn known_scopes(&self) -> Vec<String> {
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
        crate::oauth::supported_scopes(&backend_scopes)
    }

    /// The issuers of the company's identity providers, for the metadata's
    /// `authorization_servers`.
    fn identity_issuers(&self) -> Vec<String> {
        self.server
            .guards()
            .authenticator()
            .identity()
            .map(crate::identity::Identity::issuer_urls)
            .unwrap_or_default()
    }

    /// RFC 9728 and RFC 8414 documents (`None`: not one of them, the caller answers 404).
    pub(super) fn oauth_metadata(&self, head: &HttpHead) -> Reply {
        if let Err(err) = self.origins.check(head) {
            return self.error_reply(None, err);
        }
        let base = self.base_url();
        let scopes = self.known_scopes();
        let path = head.path.as_str();
        if PRM_PATHS.contains(&path) {
            return Reply::json(
                200,
                self.authorization.protected_resource_metadata(
                    &base,
                    &scopes,
                    &self.identity_issuers(),
                ),
            );
        }
        if path == "/.well-known/oauth-authorization-server" {
            return Reply::json(
                200,
                self.authorization
                    .authorization_server_metadata(&base, &scopes),
            );
        }
        self.error_reply(None, McpError::new(ErrorKind::PathNotFound))
    }

    /// An endpoint under `/oauth/`, or `None` when the path is not one that is served.
    pub(super) fn oauth_endpoint(&self, head: &HttpHead, stream: &Stream) -> Option<Reply> {
        let enabled = self.authorization.enabled();
        let is_post = head.method == Method::Post;
        let served = match (head.method.clone(), head.path.as_str()) {
            (Method::Post, "/oauth/token") => true,
            (Method::Post, "/oauth/register") => self.authorization.registration_open(),
            (Method::Get | Method::Head, "/oauth/authorize" | "/oauth/callback") => enabled,
            (Method::Post, "/oauth/sign-in" | "/oauth/consent" | "/oauth/revoke") => enabled,
            (Method::Get | Method::Head, p) if p.starts_with("/oauth/static/") => {
                return enabled.then(|| self.front_door_asset(p));
            }
            _ => false,
        };
        if !served {
            return None;
        }
        if let Err(err) = self.origins.check(head) {
            return Some(self.error_reply(None, err));
        }
        let body = if is_post {
            let limit = if head.path == "/oauth/register" {
                MAX_REGISTRATION_BYTES
            } else {
                self.max_body
            };
            match stream.read_body(limit.min(self.max_body)) {
                Ok(body) => body,
                Err(err) => return Some(self.error_reply(None, err)),
            }
        } else {
            Vec::new()
        };
        let base = self.base_url();
        let source = self.client_source(head);
        let scopes = self.known_scopes();
        let ctx = Context {
            issuer: &base,
            source: &source,
            auth: self.server.guards().authenticator(),
            locale: self.server.locale(),
            scopes: &scopes,
            headers: &head.headers,
        };
        let server = &self.authorization;
        let (endpoint, reply) = match head.path.as_str() {
            "/oauth/token" => ("token", server.token(&ctx, &body)),
            "/oauth/register" => ("register", server.register(&ctx, &body)),
            "/oauth/revoke" => ("revoke", server.revoke(&ctx, &body)),
            "/oauth/authorize" => ("authorize", server.authorize(&ctx, &head.query)),
            "/oauth/callback" => ("callback", server.callback(&ctx, &head.query)),
            "/oauth/sign-in" => ("sign_in", server.sign_in(&ctx, &body)),
            _ => ("consent", server.consent(&ctx, &body)),
        };
        server.count(endpoint, &reply);
        Some(self.oauth_reply(reply))
    }

    /// The listener's reply of an authorization server's answer.
    fn oauth_reply(&self, reply: crate::oauth::Reply) -> Reply {
        if let crate::oauth::Reply::Json {
            status,
            body,
            headers,
        } = reply
        {
            let mut out = Reply::json(status, body);
            out.headers.extend(headers);
            return out;
        }
        match self.front_door.response(&reply) {
            Some(page) => Reply {
                status: page.status,
                headers: page.headers,
                body: Body::Bytes(page.body),
            },
            None => self.error_reply(None, McpError::internal()),
        }
    }

    /// The front door's stylesheet.
    fn front_door_asset(&self, path: &str) -> Reply {
        match crate::console::front_door::asset(path) {
            Some((content_type, body)) => Reply {
                status: 200,
                headers: vec![
                    ("Content-Type".to_owned(), content_type.to_owned()),
                    (
                        "Cache-Control".to_owned(),
                        "private, max-age=300".to_owned(),
                    ),
                    ("X-Content-Type-Options".to_owned(), "nosniff".to_owned()),
                ],
                body: Body::Bytes(body.as_bytes().to_vec()),
            },
            None => self.error_reply(None, McpError::new(ErrorKind::PathNotFound)),
        }
    }
}
