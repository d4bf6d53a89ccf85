//! Patched for tollgate: the limits of a listener and the refusals it writes itself.
//!
//! A server made with [`crate::Server::http_with_options`] keeps at most
//! [`Limits::max_connections`] connections open, gives each request head and each request
//! body one deadline for the whole of it (not one per read), closes keep-alive connections
//! idle for longer than [`Limits::idle_timeout`], and caps request heads. When it has to
//! answer a request itself (a refusal), it asks the application for the response through
//! a [`RefusalBody`] callback, so that the application's own error bodies are used.

use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use crate::Response;

/// The limits of a listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at most. At the cap a new connection evicts the connection that
    /// has waited longest while idle or receiving its request (never one whose request is
    /// being worked on); when none can be evicted the newcomer is refused
    /// ([`Refusal::TooManyConnections`]).
    pub max_connections: usize,
    /// The deadline for a request's whole head, from its first byte (or from the
    /// connection's accept, for its first request).
    pub head_timeout: Duration,
    /// The deadline for a request's whole body, from the end of its head.
    pub body_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// The longest request or header line, in bytes.
    pub max_header_line: usize,
    /// The most header lines of a request.
    pub max_header_lines: usize,
    /// The most bytes of a request head in all.
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 512,
            head_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_header_line: 16 * 1024,
            max_header_lines: 128,
            max_header_bytes: 64 * 1024,
        }
    }
}

/// Why the listener answered a request (or a connection) itself and closed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The connection cap was reached and no open connection could be evicted (503).
    TooManyConnections,
    /// No thread could be created for the connection and none could be freed (503).
    NoThread,
    /// A request's head or body did not arrive before its deadline (408).
    RequestTimeout,
    /// A request or header line, the number of header lines or the whole head is over its
    /// cap (431).
    HeadersTooLarge,
    /// The request line or a header line is not HTTP (400).
    MalformedHead,
    /// The message framing is ambiguous or unsupported (RFC 9112 §6): `Content-Length`
    /// together with `Transfer-Encoding`, differing or non-numeric `Content-Length`
    /// values, or a `Transfer-Encoding` other than `chunked` (400).
    BadFraming,
}

impl Refusal {
    /// The HTTP status the listener answers with.
    pub fn status(self) -> u16 {
        match self {
            Refusal::TooManyConnections | Refusal::NoThread => 503,
            Refusal::RequestTimeout => 408,
            Refusal::HeadersTooLarge => 431,
            Refusal::MalformedHead | Refusal::BadFraming => 400,
        }
    }
}

/// Builds the response of a refusal. The listener adds `Connection: close` and closes the
/// connection after writing it. Called on the listener's threads: it must not block.
pub type RefusalBody = Arc<dyn Fn(Refusal) -> Response<Cursor<Vec<u8>>> + Send + Sync + 'static>;

/// How [`crate::Server::http_with_options`] serves.
#[derive(Clone, Default)]
pub struct ServerOptions {
    /// The limits.
    pub limits: Limits,
    /// The responses of refusals; without it a refusal has an empty body.
    pub refusal_body: Option<RefusalBody>,
}

impl ServerOptions {
    /// The response of `refusal`, from the callback or empty.
    pub(crate) fn refusal_response(&self, refusal: Refusal) -> Response<Cursor<Vec<u8>>> {
        match &self.refusal_body {
            Some(body) => body(refusal),
            None => Response::from_data(Vec::new())
                .with_status_code(crate::StatusCode(refusal.status())),
        }
    }
}
