//! The discovery documents: Protected Resource Metadata (RFC 9728) for the MCP endpoint and
//! Authorization Server Metadata (RFC 8414) for tollgate's own authorization server.

use serde_json::{Value, json};

use super::core::AuthorizationServer;

/// The built-in tools' scopes, in the order the metadata documents advertise them (by
/// resource, then read before write). A unit test holds the list to exactly the scopes the
/// invoicing tools declare, so it cannot drift from them.
pub const SCOPES: &[&str] = &[
    "clients:read",
    "clients:write",
    "clients:delete",
    "invoices:read",
    "invoices:write",
    "invoices:void",
    "invoices:send",
    "payments:write",
    "reports:generate",
];

/// The scopes the metadata names: the built-in ones, then those of the backend tools
/// (`extra`), each once.
pub fn supported_scopes(extra: &[String]) -> Vec<String> {
    let mut all: Vec<String> = SCOPES.iter().map(|s| (*s).to_owned()).collect();
    for scope in extra {
        if !all.contains(scope) {
            all.push(scope.clone());
        }
    }
    all
}

impl AuthorizationServer {
    /// RFC 9728 metadata for the MCP endpoint at `base`/mcp; `scopes` from
    /// [`supported_scopes`]. The authorization servers: with the front door on,
    /// tollgate's own first (hosts sign people in there), then the company's identity
    /// providers (`issuers`) for clients that bring their tokens; otherwise the providers,
    /// then tollgate's token endpoint for machine clients.
    pub fn protected_resource_metadata(
        &self,
        base: &str,
        scopes: &[String],
        issuers: &[String],
    ) -> Value {
        let mut servers: Vec<&str> = issuers.iter().map(String::as_str).collect();
        if self.config.enabled {
            servers.insert(0, base);
        } else {
            servers.push(base);
        }
        json!({
            "resource": format!("{base}/mcp"),
            "authorization_servers": servers,
            "scopes_supported": scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "tollgate",
        })
    }

    /// RFC 8414 metadata of the built-in authorization server.
    pub fn authorization_server_metadata(&self, base: &str, scopes: &[String]) -> Value {
        if !self.config.enabled {
            return json!({
                "issuer": base,
                "token_endpoint": format!("{base}/oauth/token"),
                "grant_types_supported": ["client_credentials"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
                "scopes_supported": scopes,
                "response_types_supported": [],
            });
        }
        let auth_methods = ["none", "client_secret_basic", "client_secret_post"];
        let mut metadata = json!({
            "issuer": base,
            "authorization_endpoint": format!("{base}/oauth/authorize"),
            "token_endpoint": format!("{base}/oauth/token"),
            "revocation_endpoint": format!("{base}/oauth/revoke"),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
            "token_endpoint_auth_methods_supported": auth_methods,
            "revocation_endpoint_auth_methods_supported": auth_methods,
            "code_challenge_methods_supported": ["S256"],
            "scopes_supported": scopes,
            "authorization_response_iss_parameter_supported": true,
            "client_id_metadata_document_supported": self.documents.is_some(),
        });
        if self.registration_open() {
            metadata["registration_endpoint"] = json!(format!("{base}/oauth/register"));
        }
        metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advertised_scopes_are_exactly_the_built_in_tools_scopes() {
        let mut declared: Vec<_> = crate::tools::invoicing::tools()
            .iter()
            .map(|t| t.spec().scope.clone())
            .collect();
        declared.sort_unstable();
        declared.dedup();
        let mut advertised = SCOPES.to_vec();
        advertised.sort_unstable();
        assert_eq!(advertised, declared);
        let extra = ["crm:read".to_owned(), "invoices:read".to_owned()];
        let all = supported_scopes(&extra);
        assert_eq!(all.len(), SCOPES.len() + 1);
        assert_eq!(all[SCOPES.len()], "crm:read");
    }
}
