//! The MCP endpoint: `POST /mcp` (both eras), `DELETE /mcp` (end a handshake session),
//! and the session headers (`Mcp-Session-Id`, `MCP-Protocol-Version`, and the 2026-07-28
//! `Mcp-Method`/`Mcp-Name` that must repeat the body).

use std::sync::Arc;

use serde_json::Value;
use tiny_http::Method;

use super::HttpHead;
use super::app::App;
use super::sse::{Outgoing, Stream};
use super::status::Reply;
use crate::catalog::{ErrorKind, McpError};
use crate::protocol::client::Notifier;
use crate::protocol::inbound::{Headline, Message, MessageKind};
use crate::protocol::revisions::{self, Session};

impl App {
    /// `/mcp`, behind the `Host`/`Origin` policy: `POST` and `DELETE`.
    pub(super) fn mcp(&self, head: &HttpHead, stream: &Stream) -> Outgoing {
        if let Err(err) = self.origins.check(head) {
            return Outgoing::Reply(self.error_reply(None, err));
        }
        match head.method {
            Method::Post => self.mcp_post(head, stream),
            Method::Delete => Outgoing::Reply(self.mcp_delete(head)),
            _ => Outgoing::Reply(
                self.error_reply(None, McpError::new(ErrorKind::HttpMethodNotAllowed))
                    .header("Allow", "POST, DELETE"),
            ),
        }
    }

    /// Ends a session, on every node; only its owner's credential may (another credential
    /// gets the 404 of an unknown id, a request without a valid one its `invalid_token`).
    fn mcp_delete(&self, head: &HttpHead) -> Reply {
        let Some(id) = head.header("mcp-session-id") else {
            return self
                .error_reply(None, McpError::new(ErrorKind::HttpMethodNotAllowed))
                .header("Allow", "POST");
        };
        let err = match self.caller_with_refusal(head) {
            Ok((owner, refusal)) => match self.sessions.remove(id, &owner) {
                Ok(true) => return Reply::empty(204),
                Ok(false) => Self::not_the_callers(refusal),
                Err(err) => err,
            },
            Err(err) => err,
        };
        self.error_reply(None, err)
    }

    /// `POST /mcp`: the body is handed to the dispatcher as one [`Message`], in the session
    /// the message runs in.
    fn mcp_post(&self, head: &HttpHead, stream: &Stream) -> Outgoing {
        if let Err(err) = check_content_type(head).and_then(|()| check_accept(head)) {
            return Outgoing::Reply(self.error_reply(None, err));
        }
        let body = match stream.read_body(self.max_body) {
            Ok(body) => body,
            Err(err) => return Outgoing::Reply(self.error_reply(None, err)),
        };
        let message = Message::parse(&body);
        match self.session_for(head, &message) {
            Ok(session) => self.dispatch(head, message, session, stream),
            Err(err) => Outgoing::Reply(self.error_reply(message.request_id().cloned(), err)),
        }
    }

    /// The session `message` runs in: a fresh one for a message that needs none (an
    /// unreadable one, a stateless request whose headers repeat its body) or that opens one
    /// (`initialize`); otherwise the one `Mcp-Session-Id` names.
    fn session_for(&self, head: &HttpHead, message: &Message) -> Result<Arc<Session>, McpError> {
        match message.kind() {
            MessageKind::Unreadable | MessageKind::Initialize => Ok(Arc::new(Session::new())),
            MessageKind::Stateless(headline) => {
                check_modern_headers(head, &headline).map(|()| Arc::new(Session::new()))
            }
            MessageKind::ClientResponse | MessageKind::Batch | MessageKind::Handshake => {
                self.legacy_session(head)
            }
        }
    }

    /// Hands `message` to the dispatcher; a successful `initialize` opens its session.
    fn dispatch(
        &self,
        head: &HttpHead,
        message: Message,
        session: Arc<Session>,
        stream: &Stream,
    ) -> Outgoing {
        let id = message.request_id().cloned();
        let kind = message.kind();
        let (batch, opens_session) = (kind == MessageKind::Batch, kind == MessageKind::Initialize);
        // A batch's response is one JSON array: it cannot stream.
        let notifier: &dyn Notifier = if batch { &Discard } else { stream };
        let env = self.env(head, &session, notifier);
        // A session belongs to the credential of its `initialize`; one opened without a
        // credential is anonymous and lives in a pool of its own (see `sessions.rs`).
        let owner = if opens_session {
            match self.caller_with_refusal(head) {
                // With the front door on, `/mcp` is where hosts sign people in: a session
                // is never opened without a credential there, or a host that learns of
                // OAuth only from a 401 would go on with an anonymous session it can no
                // longer use once signed in. (The key endpoint keeps anonymous sessions.)
                Ok((_, Some(refusal))) if self.signs_people_in(head) => {
                    return Outgoing::Reply(self.error_reply(id, refusal));
                }
                Ok((owner, _)) => Some(owner),
                Err(err) => return Outgoing::Reply(self.error_reply(id, err)),
            }
        } else {
            None
        };
        let handled = self.server.handle_one(message, &env);
        // A `logging/setLevel` may have changed the session: every node must see it.
        if let Some(sid) = head.header("mcp-session-id") {
            self.sessions.record_log_level(sid, &session);
        }
        let Some(response) = handled else {
            return Outgoing::Reply(Reply::empty(202));
        };
        if stream.is_streaming() {
            return Outgoing::Final(response.body);
        }
        let initialized = response.initialized.is_some();
        let mut reply = self.response_reply(response);
        if let Some(owner) = owner
            && initialized
        {
            match self.sessions.create(session, owner) {
                Ok(sid) => reply = reply.header("Mcp-Session-Id", sid),
                Err(err) => return Outgoing::Reply(self.error_reply(id, err)),
            }
        }
        Outgoing::Reply(reply)
    }

    /// Whether the request came to the endpoint where hosts sign people in: `/mcp` with
    /// the OAuth front door on.
    fn signs_people_in(&self, head: &HttpHead) -> bool {
        self.authorization.enabled() && head.path == "/mcp"
    }

    /// The answer to a request naming a session that is not the caller's: an anonymous
    /// caller (no token, or one refused) gets the refusal of its credential, `-32001` with
    /// its 401 challenge, whether the session exists or not; a valid credential gets
    /// `session_not_found`, exactly what an unknown id gets. Neither tells a session apart
    /// from an unknown id.
    fn not_the_callers(refusal: Option<McpError>) -> McpError {
        refusal.unwrap_or_else(|| McpError::new(ErrorKind::SessionNotFound))
    }

    /// The session named by `Mcp-Session-Id`; a request without one gets a fresh,
    /// uninitialized session (the dispatcher then asks for `initialize` or `_meta`).
    /// A named session must be the caller's: another credential's session answers
    /// `session_not_found` exactly like an unknown id; for a request without a valid
    /// credential, every session but an anonymous one answers that credential's
    /// `invalid_token` (see [`App::not_the_callers`]). A session store that cannot answer
    /// is its failure (`backend_unavailable` when it may pass), never "unknown".
    fn legacy_session(&self, head: &HttpHead) -> Result<Arc<Session>, McpError> {
        let Some(id) = head.header("mcp-session-id") else {
            return Ok(Arc::new(Session::new()));
        };
        let (owner, refusal) = self.caller_with_refusal(head)?;
        let session = self
            .sessions
            .get(id, &owner)?
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

/// 2026-07-28: `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` must repeat the body.
fn check_modern_headers(head: &HttpHead, headline: &Headline<'_>) -> Result<(), McpError> {
    if head.header("mcp-protocol-version").map(str::trim) != headline.protocol_version {
        return Err(McpError::header_mismatch("MCP-Protocol-Version"));
    }
    if head.header("mcp-method").map(str::trim) != Some(headline.method) {
        return Err(McpError::header_mismatch("Mcp-Method"));
    }
    if let Some(expected) = headline.name
        && head.header("mcp-name").map(decode_header_value).as_deref() != expected
    {
        return Err(McpError::header_mismatch("Mcp-Name"));
    }
    Ok(())
}

/// Decodes the `=?base64?…?=` form a client uses for values that are not plain ASCII.
fn decode_header_value(raw: &str) -> String {
    use base64::Engine as _;
    let raw = raw.trim();
    raw.strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_else(|| raw.to_owned())
}

fn check_content_type(head: &HttpHead) -> Result<(), McpError> {
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

fn check_accept(head: &HttpHead) -> Result<(), McpError> {
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
    use crate::transport::http::test_head as head;

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
