//! Who is asking: the bearer token, the client address (behind trusted proxies), and the
//! owner of the sessions a request may use.

use std::net::{IpAddr, SocketAddr};

use super::HttpHead;
use super::app::App;
use crate::catalog::{ErrorKind, McpError};
use crate::config::{ClientAddressHeader, ProxyRange};
use crate::guards::Caller;
use crate::protocol::client::Notifier;
use crate::protocol::dispatch::{Env, Transport};
use crate::protocol::revisions::Session;
use crate::transport::http::sessions::SessionOwner;

impl App {
    /// What the dispatcher is told about a request besides its body.
    pub(super) fn env<'a>(
        &'a self,
        head: &'a HttpHead,
        session: &'a Session,
        notifier: &'a dyn Notifier,
    ) -> Env<'a> {
        let token = bearer_token(head);
        Env {
            session,
            notifier,
            transport: Transport::Http,
            token,
            dev_credential: self.dev_credential_for(token),
            source: self.client_source(head),
            idempotency_header: head.header("idempotency-key"),
            http: Some(crate::telemetry::HttpTrace {
                traceparent: head.header("traceparent"),
                tracestate: head.header("tracestate"),
                local: self.listening.get().copied(),
            }),
            session_id: head.header("mcp-session-id"),
        }
    }

    /// Development mode's credential, for a request that presents no token.
    fn dev_credential_for(&self, token: Option<&str>) -> Option<&str> {
        match token {
            None => self.dev_credential.as_deref(),
            Some(_) => None,
        }
    }

    /// Who is asking, for the failure throttles: `http:<address>` of the peer, or of the
    /// client a trusted proxy names (never a header of an untrusted peer).
    pub(super) fn client_source(&self, head: &HttpHead) -> String {
        let Some(peer) = head.peer.map(|p| p.ip().to_canonical()) else {
            return "http:unknown".to_owned();
        };
        let client = if self.trusted_proxies.iter().any(|r| r.contains(peer)) {
            forwarded_client(head, self.client_address_header, &self.trusted_proxies)
                .unwrap_or(peer)
        } else {
            peer
        };
        format!("http:{client}")
    }

    /// The owner of the sessions the request may use: the credential of the presented
    /// token (from the verified-token cache, or verified now), or development mode's
    /// credential for a request without one; and the refusal that made the request
    /// anonymous, if one did. A missing or refused credential makes the request
    /// anonymous; a throttled one, or a store that cannot answer, is an error (never
    /// mistaken for anonymity).
    pub(super) fn caller_with_refusal(
        &self,
        head: &HttpHead,
    ) -> Result<(SessionOwner, Option<McpError>), McpError> {
        let token = bearer_token(head);
        let source = self.client_source(head);
        let caller = Caller {
            token,
            dev_credential: self.dev_credential_for(token),
            source: &source,
            idempotency_header: None,
            transport: Transport::Http.as_str(),
        };
        match self.server.guards().credential_of(&caller) {
            Ok(credential) => Ok((SessionOwner::of(&credential), None)),
            Err(err) if is_credential_refusal(&err) => Ok((SessionOwner::anonymous(), Some(err))),
            Err(err) => Err(err),
        }
    }
}

/// Whether `err` refuses the credential itself (rather than throttling or failing).
fn is_credential_refusal(err: &McpError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::InvalidToken
            | ErrorKind::InvalidTokenType
            | ErrorKind::ClientRevoked
            | ErrorKind::UserBlocked
    )
}

/// The token of an `Authorization: Bearer <token>` header; the scheme is matched without
/// regard to case (RFC 9110 §11.1), so `bearer` and `BEARER` work too.
fn bearer_token(head: &HttpHead) -> Option<&str> {
    let value = head.header("authorization")?.trim_start();
    let (scheme, token) = value.split_once([' ', '\t'])?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// The client a trusted proxy names: walking the header's hops from the right (the one
/// the nearest proxy appended) past the trusted proxies, the first other address. A hop
/// that is not an address ends the walk without an answer (the peer is used).
fn forwarded_client(
    head: &HttpHead,
    header: ClientAddressHeader,
    trusted: &[ProxyRange],
) -> Option<IpAddr> {
    let hops: Vec<Option<IpAddr>> = match header {
        ClientAddressHeader::XForwardedFor => head
            .headers
            .iter()
            .filter(|(n, _)| n == "x-forwarded-for")
            .flat_map(|(_, v)| v.split(','))
            .map(|hop| parse_hop(hop.trim()))
            .collect(),
        ClientAddressHeader::Forwarded => head
            .headers
            .iter()
            .filter(|(n, _)| n == "forwarded")
            .flat_map(|(_, v)| v.split(','))
            .map(|element| {
                element
                    .split(';')
                    .filter_map(|pair| pair.trim().split_once('='))
                    .find(|(name, _)| name.trim().eq_ignore_ascii_case("for"))
                    .and_then(|(_, value)| parse_hop(value.trim().trim_matches('"')))
            })
            .collect(),
    };
    let mut last_trusted = None;
    for hop in hops.into_iter().rev() {
        let ip = hop?.to_canonical();
        if !trusted.iter().any(|r| r.contains(ip)) {
            return Some(ip);
        }
        last_trusted = Some(ip);
    }
    last_trusted
}

/// One hop of a forwarding header: `1.2.3.4`, `1.2.3.4:5678`, `[::1]`, `[::1]:5678`, `::1`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = hop.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    hop.parse::<SocketAddr>().ok().map(|a| a.ip())
}
