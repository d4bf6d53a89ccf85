//! What goes back: the reply type, the HTTP status of a JSON-RPC error response (the
//! catalog's rule for its entry) and the headers that go with it (`WWW-Authenticate`, the
//! rate-limit headers).
//!
//! The body is always JSON-RPC. The HTTP status follows `ERRORS.md`: in `compatible` mode
//! guard and tool-call errors travel with 200 (the official TypeScript clients drop the
//! body of any other status) and only `invalid_token` gets 401; `semantic` mode adds 403
//! and 429 for the guards that have them. Transport failures keep transport statuses.

use serde_json::Value;
use tiny_http::{Header, Request, Response, StatusCode};

use super::routes::App;
use crate::catalog::{Channel, ErrorKind, McpError};

/// What a handler answers: status, headers, body.
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
}

impl Reply {
    pub(super) fn json(status: u16, body: &Value) -> Reply {
        Reply {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: serde_json::to_vec(body).unwrap_or_default(),
        }
    }

    pub(super) fn empty(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub(super) fn header(mut self, name: &str, value: impl Into<String>) -> Reply {
        self.headers.push((name.to_owned(), value.into()));
        self
    }
}

impl App {
    pub(super) fn response_reply(&self, response: &Value, modern: bool) -> Reply {
        let error = response.get("error");
        let status = error.map_or(200, |e| self.status_for(e, modern));
        let mut reply = Reply::json(status, response);
        let limits = match error {
            Some(e) => e.get("data").cloned(),
            None => response
                .pointer("/result/_meta")
                .and_then(|m| m.get(crate::guards::META_RATELIMIT))
                .cloned(),
        };
        if let Some(limits) = limits {
            reply.headers.extend(crate::guards::ratelimit::http_headers(
                &limits,
                self.server.clock(),
            ));
        }
        if status == 401 {
            let base = self.base_url();
            reply = reply.header(
                "WWW-Authenticate",
                format!(
                    "Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\""
                ),
            );
        }
        if status == 403
            && let Some(scope) = error
                .and_then(|e| e.pointer("/data/required_scope"))
                .and_then(Value::as_str)
        {
            reply = reply.header(
                "WWW-Authenticate",
                format!("Bearer error=\"insufficient_scope\", scope=\"{scope}\""),
            );
        }
        reply
    }

    /// The HTTP status of a JSON-RPC error response: the catalog's rule for its entry
    /// ([`ErrorKind::mcp_http_status`]). A code no JSON-RPC entry has gets 200.
    pub(super) fn status_for(&self, error: &Value, modern: bool) -> u16 {
        let data = error.get("data");
        let code = data
            .and_then(|d| d.get("code"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let meta_param = data
            .and_then(|d| d.get("param"))
            .and_then(Value::as_str)
            .is_some_and(|p| p.starts_with("_meta"));
        ErrorKind::ALL
            .iter()
            .find(|k| k.spec().code == code && k.spec().channel == Channel::JsonRpc)
            .map_or(200, |k| k.mcp_http_status(self.mode, modern, meta_param))
    }

    pub(super) fn error_reply(
        &self,
        id: Option<Value>,
        err: &McpError,
        modern: Option<bool>,
    ) -> Reply {
        let body = self.server.error_body(id, err);
        let status = self.status_for(&body["error"], modern.unwrap_or(false));
        Reply::json(status, &body)
    }
}

pub(super) fn respond(request: Request, reply: Reply) {
    crate::guards::metrics::global().record_http_status(reply.status);
    if let Err(e) = request.respond(to_response(reply)) {
        tracing::debug!(error = %e, "client went away before the response was written");
    }
}

pub(super) fn to_response(reply: Reply) -> Response<std::io::Cursor<Vec<u8>>> {
    let mut response = Response::from_data(reply.body).with_status_code(StatusCode(reply.status));
    for (name, value) in reply.headers {
        if let Ok(header) = Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response.add_header(header);
        }
    }
    response
}
