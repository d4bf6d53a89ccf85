//! The MCP endpoint: `POST /mcp` (both eras), `DELETE /mcp` (end a handshake session),
//! and the session headers (`Mcp-Session-Id`, `MCP-Protocol-Version`, and the 2026-07-28
//! `Mcp-Method`/`Mcp-Name` that must repeat the body).

use std::sync::Arc;

use serde_json::Value;
use tiny_http::Method;

use super::routes::{App, HttpHead};
use super::sse::{Outgoing, Stream};
use super::status::Reply;
use crate::catalog::{ErrorKind, McpError};
use crate::protocol::jsonrpc::{self, Incoming, Parsed};
use crate::protocol::revisions::{self, Session};
use crate::tools::Notifier;

impl App {
    pub(super) fn mcp(&self, head: &HttpHead, stream: &Stream) -> Outgoing {
        if let Err(err) = self.origins.check(head) {
            return Outgoing::Reply(self.error_reply(None, &err, None));
        }
        match head.method {
            Method::Post => self.mcp_post(head, stream),
            Method::Delete => Outgoing::Reply(self.mcp_delete(head)),
            _ => Outgoing::Reply(
                self.error_reply(None, &McpError::new(ErrorKind::HttpMethodNotAllowed), None)
                    .header("Allow", "POST, DELETE"),
            ),
        }
    }

    /// Ends a session; only its owner's credential may (another credential gets the 404 of
    /// an unknown id, a request without a valid one its `invalid_token`).
    pub(super) fn mcp_delete(&self, head: &HttpHead) -> Reply {
        let Some(id) = head.header("mcp-session-id") else {
            return self
                .error_reply(None, &McpError::new(ErrorKind::HttpMethodNotAllowed), None)
                .header("Allow", "POST");
        };
        let err = match self.caller_with_refusal(head) {
            Ok((owner, _)) if self.sessions.remove(id, &owner) => return Reply::empty(204),
            Ok((_, refusal)) => Self::not_the_callers(refusal),
            Err(err) => err,
        };
        self.session_error_reply(None, &err)
    }

    pub(super) fn mcp_post(&self, head: &HttpHead, stream: &Stream) -> Outgoing {
        if let Err(err) = check_content_type(head).and_then(|()| check_accept(head)) {
            return Outgoing::Reply(self.error_reply(None, &err, None));
        }
        let body = match stream.read_body(self.max_body) {
            Ok(body) => body,
            Err(err) => return Outgoing::Reply(self.error_reply(None, &err, None)),
        };
        let reply = match jsonrpc::parse(&body) {
            Parsed::NotJson => self.error_reply(None, &McpError::parse_error(), None),
            Parsed::Batch(items) => self.batch(head, items),
            Parsed::Single(Incoming::Invalid(id, err)) => self.error_reply(id, &err, None),
            Parsed::Single(Incoming::Response(id, message)) => match self.legacy_session(head) {
                Ok(session) => {
                    session.deliver(&id, message);
                    Reply::empty(202)
                }
                Err(err) => self.session_error_reply(None, &err),
            },
            Parsed::Single(Incoming::Request(req)) => return self.single(head, req, stream),
        };
        Outgoing::Reply(reply)
    }

    pub(super) fn batch(&self, head: &HttpHead, items: Vec<Incoming>) -> Reply {
        let session = match self.legacy_session(head) {
            Ok(session) => session,
            Err(err) => return self.session_error_reply(None, &err),
        };
        let notifier = Discard;
        let env = self.env(head, &session, &notifier);
        match self.server.handle_batch(items, &env) {
            // A refused batch is one error object (e.g. `batch_not_allowed`): a transport
            // failure, so it keeps its status like any other unacceptable body.
            Some(body) => {
                let status = body.get("error").map_or(200, |e| self.status_for(e, false));
                Reply::json(status, &body)
            }
            None => Reply::empty(202),
        }
    }

    pub(super) fn single(
        &self,
        head: &HttpHead,
        req: jsonrpc::Request,
        stream: &Stream,
    ) -> Outgoing {
        let id = req.id.clone();
        let modern = is_modern(&req);
        let session = if modern {
            if let Err(err) = check_modern_headers(head, &req) {
                return Outgoing::Reply(self.error_reply(id, &err, Some(true)));
            }
            Arc::new(Session::new())
        } else if req.method == "initialize" {
            Arc::new(Session::new())
        } else {
            match self.legacy_session(head) {
                Ok(session) => session,
                Err(err) => return Outgoing::Reply(self.session_error_reply(id, &err)),
            }
        };
        let env = self.env(head, &session, stream);
        let is_initialize = !modern && req.method == "initialize";
        // A session belongs to the credential of its `initialize`; one opened without a
        // credential is anonymous and lives in a pool of its own (see `sessions.rs`).
        let owner = if is_initialize {
            match self.caller(head) {
                Ok(owner) => Some(owner),
                Err(err) => return Outgoing::Reply(self.session_error_reply(id, &err)),
            }
        } else {
            None
        };
        let Some(response) = self.server.handle_incoming(Incoming::Request(req), &env) else {
            return Outgoing::Reply(Reply::empty(202));
        };
        if stream.is_streaming() {
            return Outgoing::Final(response);
        }
        let mut reply = self.response_reply(&response, modern);
        if let Some(owner) = owner
            && response.get("result").is_some()
        {
            match self.sessions.create(session, owner) {
                Ok(sid) => reply = reply.header("Mcp-Session-Id", sid),
                Err(e) => {
                    tracing::error!(error = %e, "cannot create a session id");
                    return Outgoing::Reply(self.error_reply(id, &McpError::internal(), None));
                }
            }
        }
        Outgoing::Reply(reply)
    }

    /// The answer to a request naming a session that is not the caller's: an anonymous
    /// caller (no token, or one refused) gets the refusal of its credential, `-32001` with
    /// its 401 challenge, whether the session exists or not; a valid credential gets
    /// `session_not_found`, exactly what an unknown id gets. Neither tells a session apart
    /// from an unknown id.
    pub(super) fn not_the_callers(refusal: Option<McpError>) -> McpError {
        refusal.unwrap_or_else(|| McpError::new(ErrorKind::SessionNotFound))
    }

    /// A refusal from resolving the session or its credential: `invalid_token` gets its
    /// 401 challenge, the others their transport status.
    pub(super) fn session_error_reply(&self, id: Option<Value>, err: &McpError) -> Reply {
        let body = self.server.error_body(id, err);
        self.response_reply(&body, false)
    }

    /// The session named by `Mcp-Session-Id`; a request without one gets a fresh,
    /// uninitialized session (the dispatcher then asks for `initialize` or `_meta`).
    /// A named session must be the caller's: another credential's session answers
    /// `session_not_found` exactly like an unknown id; for a request without a valid
    /// credential, every session but an anonymous one answers that credential's
    /// `invalid_token` (see [`App::not_the_callers`]).
    pub(super) fn legacy_session(&self, head: &HttpHead) -> Result<Arc<Session>, McpError> {
        let Some(id) = head.header("mcp-session-id") else {
            return Ok(Arc::new(Session::new()));
        };
        let (owner, refusal) = self.caller_with_refusal(head)?;
        let session = self
            .sessions
            .get(id, &owner)
            .ok_or_else(|| Self::not_the_callers(refusal))?;
        if let Some(version) = head.header("mcp-protocol-version") {
            let known = revisions::LEGACY_VERSIONS.contains(&version);
            if !known || session.negotiated().is_some_and(|v| v != version) {
                return Err(McpError::new(ErrorKind::UnsupportedProtocolVersion)
                    .with(
                        "supported",
                        session
                            .negotiated()
                            .map_or_else(|| revisions::LEGACY_VERSIONS.to_vec(), |v| vec![v]),
                    )
                    .with("requested", version));
            }
        }
        Ok(session)
    }
}

/// A notifier for requests that cannot stream (batches): notifications are dropped.
pub(super) struct Discard;

impl Notifier for Discard {
    fn notify(&self, _message: Value) {}

    fn delivers(&self) -> bool {
        false
    }
}

pub(super) fn is_modern(req: &jsonrpc::Request) -> bool {
    req.params
        .get("_meta")
        .and_then(Value::as_object)
        .is_some_and(|m| m.contains_key(revisions::META_PROTOCOL_VERSION))
}

/// 2026-07-28: `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` must repeat the body.
pub(super) fn check_modern_headers(
    head: &HttpHead,
    req: &jsonrpc::Request,
) -> Result<(), McpError> {
    let meta_version = req
        .params
        .get("_meta")
        .and_then(|m| m.get(revisions::META_PROTOCOL_VERSION))
        .and_then(Value::as_str);
    if head.header("mcp-protocol-version").map(str::trim) != meta_version {
        return Err(McpError::header_mismatch("MCP-Protocol-Version"));
    }
    if head.header("mcp-method").map(str::trim) != Some(req.method.as_str()) {
        return Err(McpError::header_mismatch("Mcp-Method"));
    }
    let name_field = match req.method.as_str() {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    };
    if let Some(field) = name_field {
        let expected = req.params.get(field).and_then(Value::as_str);
        if head.header("mcp-name").map(decode_header_value).as_deref() != expected {
            return Err(McpError::header_mismatch("Mcp-Name"));
        }
    }
    Ok(())
}

/// Decodes the `=?base64?…?=` form a client uses for values that are not plain ASCII.
pub(super) fn decode_header_value(raw: &str) -> String {
    use base64::Engine as _;
    let raw = raw.trim();
    raw.strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_else(|| raw.to_owned())
}

pub(super) fn check_content_type(head: &HttpHead) -> Result<(), McpError> {
    let ok = head.header("content-type").is_some_and(|ct| {
        ct.split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
    });
    if ok {
        Ok(())
    } else {
        Err(McpError::new(ErrorKind::UnsupportedMediaType))
    }
}

pub(super) fn check_accept(head: &HttpHead) -> Result<(), McpError> {
    let Some(accept) = head.header("accept") else {
        return Ok(());
    };
    let ok = accept.split(',').any(|part| {
        let media = part
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        matches!(
            media.as_str(),
            "application/json" | "text/event-stream" | "application/*" | "*/*"
        )
    });
    if ok {
        Ok(())
    } else {
        Err(McpError::new(ErrorKind::NotAcceptable))
    }
}

pub(super) fn accepts_sse(head: &HttpHead) -> bool {
    head.header("accept")
        .is_some_and(|a| a.to_ascii_lowercase().contains("text/event-stream"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::http::routes::test_head as head;

    #[test]
    fn header_values_decode_the_base64_form() {
        assert_eq!(decode_header_value("=?base64?aMOpbGxv?="), "héllo");
        assert_eq!(decode_header_value(" plain "), "plain");
    }

    #[test]
    fn accept_and_content_type_rules() {
        assert!(check_accept(&head(&[("accept", "application/json, text/event-stream")])).is_ok());
        assert!(check_accept(&head(&[("accept", "text/html")])).is_err());
        assert!(
            check_content_type(&head(&[(
                "content-type",
                "application/json; charset=utf-8"
            )]))
            .is_ok()
        );
        assert!(check_content_type(&head(&[("content-type", "text/plain")])).is_err());
    }
}
