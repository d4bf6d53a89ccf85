//! Who a `client_id` is: a client that registered itself (RFC 7591), or the HTTPS URL of
//! a client metadata document (fetched, checked, cached); and how a redirect URI is
//! matched against the client's: exactly, except that the port of a loopback redirect
//! (`http://127.0.0.1`, `http://[::1]`, `http://localhost`) may differ (RFC 8252 §7.3).

use std::time::Duration;

use super::client_document::{DocumentError, is_document_client_id};
use super::core::AuthorizationServer;

/// A client the authorization server deals with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// Its id.
    pub id: String,
    /// The name to show, if it gave one.
    pub name: Option<String>,
    /// Its redirect URIs.
    pub redirect_uris: Vec<String>,
    /// The grants it may use (`authorization_code`, `refresh_token`).
    pub grant_types: Vec<String>,
    /// How it authenticates at the token endpoint.
    pub auth: ClientAuth,
}

/// How a client authenticates at the token endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientAuth {
    /// A public client: its id in the form, PKCE proves the rest.
    None,
    /// A confidential client: the hex SHA-256 of its secret, and how it sends it.
    Secret {
        /// The hex SHA-256 of the secret.
        hash: String,
        /// `client_secret_basic` or `client_secret_post`.
        method: String,
    },
}

/// Why a `client_id` names no client.
#[derive(Debug)]
pub enum ClientRefusal {
    /// No registration has it, and it is not a document URL (or documents are off).
    Unknown,
    /// Its metadata document could not be used.
    Document(DocumentError),
    /// The store could not be read.
    Unavailable,
}

impl Client {
    /// The name to show: its own, else its id.
    pub fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.id.clone())
    }

    /// The registered redirect URI `presented` matches, if any.
    pub fn redirect_for(&self, presented: &str) -> Option<&str> {
        self.redirect_uris
            .iter()
            .find(|registered| redirect_matches(registered, presented))
            .map(String::as_str)
    }

    /// Whether every redirect URI is on the person's own computer.
    pub fn loopback_only(&self) -> bool {
        self.redirect_uris.iter().all(|uri| loopback(uri).is_some())
    }

    /// Whether the client may use `grant`.
    pub fn may_use(&self, grant: &str) -> bool {
        self.grant_types.iter().any(|g| g == grant)
    }
}

/// The loopback form of `uri` without its port, when it is a plain-HTTP loopback redirect.
fn loopback(uri: &str) -> Option<url::Url> {
    let mut url = url::Url::parse(uri).ok()?;
    let host_is_loopback = match url.host()? {
        url::Host::Domain(d) => d == "localhost",
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => ip.is_loopback(),
    };
    if url.scheme() != "http" || !host_is_loopback {
        return None;
    }
    url.set_port(None).ok()?;
    Some(url)
}

/// Exact string match, or the same loopback redirect on another port.
pub fn redirect_matches(registered: &str, presented: &str) -> bool {
    if registered == presented {
        return true;
    }
    match (loopback(registered), loopback(presented)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

impl AuthorizationServer {
    /// The client `client_id` names.
    pub fn client(&self, client_id: &str) -> Result<Client, ClientRefusal> {
        if is_document_client_id(client_id) {
            let Some(documents) = &self.documents else {
                return Err(ClientRefusal::Unknown);
            };
            let document = documents.get(client_id).map_err(ClientRefusal::Document)?;
            return Ok(Client {
                id: document.client_id.clone(),
                name: document.client_name.clone(),
                redirect_uris: document.redirect_uris.clone(),
                grant_types: document.grant_types.clone(),
                auth: ClientAuth::None,
            });
        }
        let unused_before = self.clock.unix_secs() - secs(self.config.unused_registration_ttl);
        let registration = self
            .store
            .registration(client_id, unused_before)
            .map_err(|e| {
                tracing::warn!(error = %e, "cannot read a registered client");
                ClientRefusal::Unavailable
            })?
            .ok_or(ClientRefusal::Unknown)?;
        Ok(Client {
            id: registration.client_id,
            name: registration.client_name,
            redirect_uris: registration.redirect_uris,
            grant_types: registration.grant_types,
            auth: match registration.secret_hash {
                Some(hash) => ClientAuth::Secret {
                    hash,
                    method: registration.auth_method,
                },
                None => ClientAuth::None,
            },
        })
    }
}

/// Whole seconds of `d`, as the store's times are.
pub(super) fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_match_exactly_except_a_loopback_port() {
        assert!(redirect_matches(
            "https://claude.ai/cb",
            "https://claude.ai/cb"
        ));
        assert!(!redirect_matches(
            "https://claude.ai/cb",
            "https://claude.ai/cb/"
        ));
        assert!(!redirect_matches(
            "https://claude.ai/cb",
            "https://claude.ai/cb?x=1"
        ));
        assert!(!redirect_matches(
            "https://claude.ai:443/cb",
            "https://claude.ai:8443/cb"
        ));
        assert!(redirect_matches(
            "http://127.0.0.1/callback",
            "http://127.0.0.1:53682/callback"
        ));
        assert!(redirect_matches(
            "http://127.0.0.1:3000/callback",
            "http://127.0.0.1:9/callback"
        ));
        assert!(redirect_matches("http://[::1]/cb", "http://[::1]:8080/cb"));
        assert!(redirect_matches(
            "http://localhost/cb",
            "http://localhost:1234/cb"
        ));
        assert!(!redirect_matches(
            "http://127.0.0.1/callback",
            "http://127.0.0.1:1/other"
        ));
        assert!(!redirect_matches(
            "http://127.0.0.1/cb",
            "http://localhost:80/cb"
        ));
        assert!(!redirect_matches(
            "http://127.0.0.1/cb",
            "https://127.0.0.1:8/cb"
        ));
        assert!(!redirect_matches(
            "http://evil.example/cb",
            "http://evil.example:81/cb"
        ));
    }
}
