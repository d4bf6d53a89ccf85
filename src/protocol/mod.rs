//! The MCP protocol: JSON-RPC framing, the protocol revisions and their eras, the
//! dispatcher every transport hands its messages to, and the protocol side of a running
//! tool's link to its client.

pub mod client;
pub mod dispatch;
pub mod jsonrpc;
pub mod revisions;
