//! The transports: newline-delimited JSON on stdin/stdout, and Streamable HTTP with its
//! sessions and OAuth endpoints. A transport hands each body or line to the dispatcher as
//! a [`Message`](crate::protocol::inbound::Message) (parsed there, once) and writes back
//! the bodies of its [`Response`](crate::protocol::inbound::Response)s, reading only the
//! typed facts beside them (era, error, `initialize`, rate budget); it decides nothing
//! about a call.

pub mod http;
pub mod stdio;
pub mod systemd;
