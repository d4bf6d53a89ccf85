//! The MCP protocol: JSON-RPC framing, the protocol revisions and their eras, what a
//! transport hands to the dispatcher and gets back, the dispatcher itself, and the sealed
//! state of multi-round requests.

pub mod dispatch;
pub mod inbound;
pub mod jsonrpc;
mod pagination;
pub mod request_state;
pub mod revisions;
