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

use super::app::App;
use super::ratelimit_headers;
use crate::catalog::McpError;
use crate::protocol::inbound;

/// What a handler answers: status, headers, body.
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Body,
}

/// The body of a [`Reply`], serialized only when it is sent.
pub(super) enum Body {
    /// A JSON document (kept as a value, so that a reply that ends an event stream is sent
    /// as its last event without being read back).
    Json(Value),
    /// Other bytes (the Prometheus page; nothing for an empty reply).
    Bytes(Vec<u8>),
}

impl Reply {
    /// A JSON reply.
    pub(super) fn json(status: u16, body: Value) -> Reply {
        Reply {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: Body::Json(body),
        }
    }

    /// A reply without a body (`202`, `204`).
    pub(super) fn empty(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Body::Bytes(Vec::new()),
        }
    }

    /// The same reply with one more header.
    pub(super) fn header(mut self, name: &str, value: impl Into<String>) -> Reply {
        self.headers.push((name.to_owned(), value.into()));
        self
    }
}

impl App {
    /// The reply carrying a dispatcher's response: its status from the typed error, the
    /// rate-limit headers from the typed budget or refusal (also a refusal answered as an
    /// `isError` result, whose status is 200), and the `WWW-Authenticate`
    /// challenge of a 401 or of a 403 for a missing scope.
    pub(super) fn response_reply(&self, response: inbound::Response) -> Reply {
        let modern = response.era.is_some_and(|era| era.is_modern());
        let status = response
            .error
            .as_ref()
            .map_or(200, |err| self.status_of(err, modern));
        let refusal = response.error.as_ref().or(response.refusal.as_ref());
        let mut headers = match (refusal, &response.budget) {
            (Some(err), _) => ratelimit_headers::refusal(err),
            (None, Some(budget)) => {
                ratelimit_headers::budget(budget, self.server.clock().unix_secs())
            }
            (None, None) => Vec::new(),
        };
        if let Some(challenge) = self.challenge(status, response.error.as_ref()) {
            headers.push(("WWW-Authenticate".to_owned(), challenge));
        }
        let mut reply = Reply::json(status, response.body);
        reply.headers.extend(headers);
        reply
    }

    /// The `WWW-Authenticate` value of a reply with `status`, if it has one.
    fn challenge(&self, status: u16, error: Option<&McpError>) -> Option<String> {
        match status {
            401 => {
                let base = self.base_url();
                Some(format!(
                    "Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\""
                ))
            }
            403 => {
                let scope = error?.fields().get("required_scope")?.as_str()?;
                Some(format!(
                    "Bearer error=\"insufficient_scope\", scope=\"{scope}\""
                ))
            }
            _ => None,
        }
    }

    /// The HTTP status of a JSON-RPC error response: the catalog's rule for its entry
    /// ([`ErrorKind::mcp_http_status`](crate::catalog::ErrorKind::mcp_http_status)) in this
    /// server's status mode. `modern` says the request was of the stateless revision.
    fn status_of(&self, err: &McpError, modern: bool) -> u16 {
        let meta_param = err
            .fields()
            .get("param")
            .and_then(Value::as_str)
            .is_some_and(|p| p.starts_with("_meta"));
        err.kind().mcp_http_status(self.mode, modern, meta_param)
    }

    /// The reply to a failure the transport detects itself; `id` is the request's, when
    /// one was read.
    pub(super) fn error_reply(&self, id: Option<Value>, err: McpError) -> Reply {
        self.response_reply(self.server.error_response(id, err))
    }
}

/// Sends `reply`, counting its status in `/metrics`.
pub(super) fn respond(request: Request, reply: Reply) {
    crate::guards::metrics::global().record_http_status(reply.status);
    if let Err(e) = request.respond(to_response(reply)) {
        tracing::debug!(error = %e, "client went away before the response was written");
    }
}

/// The tiny_http response of `reply`; a header tiny_http cannot carry is left out.
pub(super) fn to_response(reply: Reply) -> Response<std::io::Cursor<Vec<u8>>> {
    let body = match reply.body {
        Body::Json(value) => serde_json::to_vec(&value).unwrap_or_default(),
        Body::Bytes(bytes) => bytes,
    };
    let mut response = Response::from_data(body).with_status_code(StatusCode(reply.status));
    for (name, value) in reply.headers {
        if let Ok(header) = Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response.add_header(header);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use crate::catalog::{Class, ErrorKind};
    use crate::config::ErrorStatusMode;

    fn of_class(class: Class) -> impl Iterator<Item = ErrorKind> {
        ErrorKind::ALL
            .iter()
            .copied()
            .filter(move |k| k.spec().class == class)
    }

    #[test]
    fn transport_failures_keep_their_status_in_both_modes() {
        for kind in of_class(Class::Transport) {
            for mode in [ErrorStatusMode::Compatible, ErrorStatusMode::Semantic] {
                let status = kind.mcp_http_status(mode, false, false);
                assert_eq!(status, kind.spec().http_status, "{}", kind.spec().code);
            }
        }
    }

    #[test]
    fn in_compatible_mode_only_invalid_token_of_the_guards_leaves_200() {
        for kind in of_class(Class::Guard) {
            let status = kind.mcp_http_status(ErrorStatusMode::Compatible, false, false);
            let expected = if kind == ErrorKind::InvalidToken {
                401
            } else {
                200
            };
            assert_eq!(status, expected, "{}", kind.spec().code);
        }
        let semantic =
            ErrorKind::RateLimited.mcp_http_status(ErrorStatusMode::Semantic, false, false);
        assert_eq!(semantic, 429);
    }

    #[test]
    fn the_stateless_revision_answers_unknown_methods_and_meta_params_with_their_status() {
        let mode = ErrorStatusMode::Compatible;
        assert_eq!(
            ErrorKind::MethodNotFound.mcp_http_status(mode, false, false),
            200
        );
        assert_eq!(
            ErrorKind::MethodNotFound.mcp_http_status(mode, true, false),
            404
        );
        assert_eq!(
            ErrorKind::InvalidParams.mcp_http_status(mode, false, false),
            200
        );
        assert_eq!(
            ErrorKind::InvalidParams.mcp_http_status(mode, false, true),
            400
        );
    }
}
