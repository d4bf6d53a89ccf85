//! tollgate's OAuth authorization server: what it needs to let MCP hosts (Claude, ChatGPT
//! and others) sign their users in. `address` decides which network addresses may never be
//! fetched from on a client's behalf.

pub mod address;
