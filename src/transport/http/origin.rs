//! DNS-rebinding protection: the `Host` and `Origin` a request may carry.

use super::routes::HttpHead;
use crate::catalog::{ErrorKind, McpError};

/// DNS-rebinding protection: `Host` and `Origin` must name this server.
pub(super) struct OriginPolicy {
    pub(super) hosts: Vec<String>,
    pub(super) origins: Vec<String>,
}

impl OriginPolicy {
    pub(super) fn new(extra_hosts: &[String], extra_origins: &[String]) -> OriginPolicy {
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
        hosts.extend(extra_hosts.iter().map(|h| h.to_ascii_lowercase()));
        OriginPolicy {
            hosts,
            origins: extra_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
        }
    }

    pub(super) fn host_allowed(&self, authority: &str) -> bool {
        let host = strip_port(authority).to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    pub(super) fn check(&self, head: &HttpHead) -> Result<(), McpError> {
        let denied = || McpError::new(ErrorKind::OriginNotAllowed);
        if let Some(host) = head.header("host")
            && !self.host_allowed(host)
        {
            return Err(denied().detail("header", "Host"));
        }
        let Some(origin) = head.header("origin") else {
            return Ok(());
        };
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        if self.origins.contains(&origin) {
            return Ok(());
        }
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        match authority {
            Some(authority) if self.host_allowed(authority) => Ok(()),
            _ => Err(denied().detail("header", "Origin")),
        }
    }
}

/// `host:port`, `[v6]:port` or a bare host → the host.
pub(super) fn strip_port(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !host.contains(':') => {
            host
        }
        _ => authority,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::http::routes::test_head as head;

    #[test]
    fn loopback_hosts_and_origins_pass_and_others_do_not() {
        let policy = OriginPolicy::new(&[], &["https://app.example.com".into()]);
        assert!(policy.check(&head(&[("host", "127.0.0.1:8787")])).is_ok());
        assert!(policy.check(&head(&[("host", "[::1]:8787")])).is_ok());
        assert!(
            policy
                .check(&head(&[
                    ("host", "localhost"),
                    ("origin", "http://localhost:3000")
                ]))
                .is_ok()
        );
        assert!(
            policy
                .check(&head(&[("origin", "https://app.example.com")]))
                .is_ok()
        );
        assert!(
            policy
                .check(&head(&[("host", "evil.example.com")]))
                .is_err()
        );
        assert!(
            policy
                .check(&head(&[
                    ("host", "localhost"),
                    ("origin", "http://evil.example.com")
                ]))
                .is_err()
        );
        assert!(policy.check(&head(&[("origin", "null")])).is_err());
    }
}
