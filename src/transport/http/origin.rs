//! DNS-rebinding protection: the `Host` and `Origin` a request may carry.

use super::HttpHead;
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

    fn host_allowed(&self, authority: &str) -> bool {
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
fn strip_port(authority: &str) -> &str {
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
    use crate::transport::http::test_head as head;

    /// `Ok` when the policy lets the headers pass, otherwise the header it names.
    fn verdict(policy: &OriginPolicy, headers: &[(&str, &str)]) -> Result<(), String> {
        policy.check(&head(headers)).map_err(|err| {
            assert_eq!(err.kind(), ErrorKind::OriginNotAllowed);
            err.fields()["details"]["header"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
    }

    #[test]
    fn loopback_hosts_and_origins_pass_and_others_do_not() {
        let policy = OriginPolicy::new(&[], &["https://app.example.com".into()]);
        assert_eq!(verdict(&policy, &[("host", "127.0.0.1:8787")]), Ok(()));
        assert_eq!(verdict(&policy, &[("host", "[::1]:8787")]), Ok(()));
        let local_page = [("host", "localhost"), ("origin", "http://localhost:3000")];
        assert_eq!(verdict(&policy, &local_page), Ok(()));
        let listed = [("origin", "https://app.example.com")];
        assert_eq!(verdict(&policy, &listed), Ok(()));
        let rebound = [("host", "evil.example.com")];
        assert_eq!(verdict(&policy, &rebound), Err("Host".to_owned()));
        let foreign_page = [("host", "localhost"), ("origin", "http://evil.example.com")];
        assert_eq!(verdict(&policy, &foreign_page), Err("Origin".to_owned()));
        assert_eq!(
            verdict(&policy, &[("origin", "null")]),
            Err("Origin".to_owned())
        );
    }

    #[test]
    fn configured_hosts_are_allowed_without_regard_to_case_or_port() {
        let policy = OriginPolicy::new(&["MCP.Example.com".into()], &[]);
        assert_eq!(verdict(&policy, &[("host", "mcp.example.com:443")]), Ok(()));
        let page = [
            ("host", "mcp.example.com"),
            ("origin", "https://MCP.example.com/"),
        ];
        assert_eq!(verdict(&policy, &page), Ok(()));
        assert_eq!(strip_port("[::1]:8787"), "::1");
        assert_eq!(strip_port("::1"), "::1");
    }
}
