//! The Streamable HTTP transport (tiny_http): `POST /mcp` for both protocol eras,
//! `GET /healthz`, and the OAuth metadata and token endpoints.

use std::sync::Arc;

use crate::config::Config;
use crate::dispatch::Server;

/// Serves HTTP until SIGTERM or SIGINT.
pub fn serve(_server: Arc<Server>, _config: &Config) -> std::io::Result<()> {
    Err(std::io::Error::other("the HTTP transport is being built"))
}
