//! The MCP protocol: JSON-RPC framing, the protocol revisions and their eras, what a
//! transport hands to the dispatcher and gets back, the dispatcher itself, and the
//! protocol side of a running tool's link to its client.

pub mod client;
pub mod dispatch;
pub mod inbound;
pub mod jsonrpc;
mod pagination;
pub mod revisions;
