//! The transports: newline-delimited JSON on stdin/stdout, and Streamable HTTP with its
//! sessions and OAuth endpoints. A transport turns bytes into messages for the dispatcher
//! and its answers back into bytes; it decides nothing about a call.

pub mod http;
pub mod stdio;
pub mod systemd;
