//! Authentication and access: who is calling, and which tools their scopes and the
//! company's plan let them see and call.

use crate::catalog::McpError;
use crate::registry::ToolSpec;
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

/// Verifies credentials and decides access.
pub struct Authenticator {
    store: Store,
}

impl Authenticator {
    /// An authenticator over `store`.
    pub fn new(store: Store) -> Authenticator {
        Authenticator { store }
    }

    /// Verifies the presented token (`source` identifies the caller for throttling).
    pub fn authenticate(&self, _token: Option<&str>, _source: &str) -> Result<Principal, McpError> {
        let _ = &self.store;
        Ok(Principal {
            credential_id: String::new(),
            client_id: None,
            scopes: vec!["*".to_owned()],
        })
    }

    /// Scope and plan check for one tool.
    pub fn check_access(&self, _principal: &Principal, _tool: &ToolSpec) -> Result<(), McpError> {
        Ok(())
    }
}
