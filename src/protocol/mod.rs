//! The MCP protocol: JSON-RPC framing, the protocol revisions and their eras, the
//! dispatcher every transport hands its messages to, and the sealed state of multi-round
//! requests.

pub mod dispatch;
pub mod jsonrpc;
pub mod request_state;
pub mod revisions;
