//! The state of the HTTP transport that outlives a request ([`App`]), built once from
//! `[http]` and `[dev]`: the server, the sessions, the `Host`/`Origin` policy, the OAuth
//! endpoints, the console, and the base URL every advertised link starts with. Its
//! handlers are implemented beside it, one file per concern (`routes`, `mcp`, `client`,
//! `status`).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use super::origin::OriginPolicy;
use super::sessions::Sessions;
use crate::config::{ClientAddressHeader, Config, ErrorStatusMode, ProxyRange};
use crate::protocol::dispatch::Server;

/// The request-independent state of the HTTP transport.
pub(super) struct App {
    pub(super) server: Arc<Server>,
    pub(super) sessions: Sessions,
    pub(super) origins: OriginPolicy,
    pub(super) max_body: usize,
    pub(super) mode: ErrorStatusMode,
    pub(super) public_base_url: Option<String>,
    /// `http://<bound address>`, the base URL when no public one is configured.
    pub(super) listen_url: OnceLock<String>,
    /// The bound address (`server.address` and `server.port` of the request spans).
    pub(super) listening: OnceLock<SocketAddr>,
    /// Peers whose client-address header names the real client (`http.trusted_proxies`).
    pub(super) trusted_proxies: Vec<ProxyRange>,
    pub(super) client_address_header: ClientAddressHeader,
    pub(super) dev_credential: Option<String>,
    /// tollgate's OAuth authorization server (`[oauth_server]`; its token endpoint serves
    /// machine clients even when the front door is off).
    pub(super) authorization: crate::oauth::AuthorizationServer,
    /// The pages people see at the front door.
    pub(super) front_door: crate::console::front_door::FrontDoor,
    /// The MCP endpoint of API-key clients while the front door is on
    /// (`oauth_server.key_path`).
    pub(super) key_path: Option<String>,
    /// `GET /metrics` is served (`http.metrics`).
    pub(super) metrics: Option<&'static crate::guards::metrics::Metrics>,
    /// The operator's console under `/console` (`console.enabled`).
    pub(super) console: Option<crate::console::Console>,
}

impl App {
    /// The transport's state, from `[http]` and `[dev]`.
    pub(super) fn new(server: Arc<Server>, config: &Config) -> Result<App, String> {
        let clock = server.clock().clone();
        let store = server.store().clone();
        let authorization = crate::oauth::AuthorizationServer::start(
            config.oauth_server.clone(),
            store.clone(),
            clock.clone(),
            server.guards().authenticator().shared_identity(),
        )?;
        let console = crate::console::Console::new(Arc::clone(&server), config);
        Ok(App {
            front_door: crate::console::front_door::FrontDoor::new(server.locale()),
            key_path: config
                .oauth_server
                .enabled
                .then(|| config.oauth_server.key_path.clone()),
            authorization,
            server,
            sessions: Sessions::new(config.http.session_ttl, clock.clone(), store),
            origins: OriginPolicy::new(&config.http.allowed_hosts, &config.http.allowed_origins),
            max_body: config.http.max_body_bytes,
            mode: config.http.error_status,
            public_base_url: config.http.public_base_url.clone(),
            listen_url: OnceLock::new(),
            listening: OnceLock::new(),
            trusted_proxies: config.http.trusted_proxies.clone(),
            client_address_header: config.http.client_address_header,
            dev_credential: config.dev.unauthenticated_credential.clone(),
            metrics: config.http.metrics.then(crate::guards::metrics::global),
            console,
        })
    }

    /// Records the address the listener is bound to (the base URL when no public one is
    /// configured). A wildcard address names nothing a client can reach, so it is said.
    pub(super) fn set_listening(&self, addr: SocketAddr) {
        if self.public_base_url.is_none() && addr.ip().is_unspecified() {
            tracing::warn!(
                listen = %addr,
                "http.public_base_url is not set and the listener is bound to a wildcard \
                 address; OAuth metadata will name it; set http.public_base_url"
            );
        }
        let _ = self.listen_url.set(format!("http://{addr}"));
        let _ = self.listening.set(addr);
    }

    /// The base of every URL this server advertises (OAuth metadata, the
    /// `WWW-Authenticate` challenge): `http.public_base_url`, otherwise the bound
    /// listening address — never the request's `Host`.
    pub(super) fn base_url(&self) -> String {
        match &self.public_base_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => self
                .listen_url
                .get()
                .cloned()
                .unwrap_or_else(|| "http://127.0.0.1:8787".to_owned()),
        }
    }
}
