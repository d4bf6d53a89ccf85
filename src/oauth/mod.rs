//! tollgate's OAuth authorization server: what it needs to let MCP hosts (Claude, ChatGPT
//! and others) sign their users in. `address` decides which network addresses may never be
//! fetched from on a client's behalf; `client_document` fetches, checks and caches the
//! client ID metadata document of a client whose `client_id` is an https URL.

pub mod address;
pub mod client_document;
