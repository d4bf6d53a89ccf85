//! The fetch of a client ID metadata document: two HTTP clients (rustls on the ring
//! provider, the system's roots plus the operator's `ca_file`, no proxy from the
//! environment, no redirect followed, no connection kept idle) on a small runtime of
//! their own, and one GET bounded in time and size.
//!
//! The address check lives in the DNS resolver of the `checked` client: it resolves the
//! host, refuses the answer when any address is forbidden, and hands the connector exactly
//! the addresses it checked, so that the connection can only go to one of them (a second
//! lookup that might answer differently never happens). Hosts given as IP addresses never
//! reach a resolver; `Target::parse` checked them. The `unchecked` client, with the
//! system's resolver, serves only the hosts the operator allows.

use std::error::Error as StdError;
use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{ACCEPT, CACHE_CONTROL, CONTENT_TYPE, HeaderMap};
use reqwest::{Certificate, Client, Response, redirect};

use super::{DocumentError, Target};
use crate::oauth::address::is_forbidden;

/// The most host-name lookups run at once (each on a blocking thread).
const MAX_LOOKUPS: usize = 16;

/// What a successful GET brought: the body (at most `max_bytes`) and its caching header.
pub(super) struct Fetched {
    pub(super) body: Vec<u8>,
    pub(super) cache_control: Option<String>,
}

/// The fetcher's runtime and its two HTTP clients.
pub(super) struct Http {
    /// Every address a host resolves to is checked.
    checked: Client,
    /// For the operator's `allow_hosts` only: addresses are not checked.
    unchecked: Client,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Http {
    /// Starts the runtime and builds the clients, trusting the roots of `ca_file` besides
    /// the system's.
    pub(super) fn start(ca_file: Option<&Path>) -> Result<Http, String> {
        // One process-wide crypto provider for every TLS connection; installing it a second
        // time (identity and the outbound backends do it too) is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let roots = match ca_file {
            Some(path) => read_roots(path)?,
            None => Vec::new(),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(MAX_LOOKUPS)
            .thread_name("tollgate-client-documents")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the client documents runtime: {e}"))?;
        let (checked, unchecked) = {
            let _entered = runtime.enter();
            (
                client(&roots, Some(CheckedResolver))?,
                client(&roots, None)?,
            )
        };
        Ok(Http {
            checked,
            unchecked,
            runtime: Some(runtime),
        })
    }

    /// Runs `work` on the fetcher's runtime and waits for it, at most `deadline`. Callers
    /// are plain threads; one that is itself inside a runtime (where waiting in place
    /// would panic) waits from a short-lived thread of its own instead.
    pub(super) fn wait<F>(&self, deadline: Duration, work: F) -> Result<F::Output, DocumentError>
    where
        F: Future + Send,
        F::Output: Send,
    {
        let Some(handle) = self.runtime.as_ref().map(|r| r.handle().clone()) else {
            return Err(DocumentError::Unreachable);
        };
        let bounded = async {
            tokio::time::timeout(deadline, work)
                .await
                .map_err(|_| DocumentError::Timeout)
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return handle.block_on(bounded);
        }
        std::thread::scope(|scope| {
            scope
                .spawn(|| handle.block_on(bounded))
                .join()
                .unwrap_or(Err(DocumentError::Unreachable))
        })
    }

    /// GETs the document at `target`: status 200, a JSON content type, at most
    /// `max_bytes` of body.
    pub(super) async fn fetch(
        &self,
        target: &Target,
        max_bytes: usize,
    ) -> Result<Fetched, DocumentError> {
        let client = if target.allowed {
            &self.unchecked
        } else {
            &self.checked
        };
        let response = client
            .get(target.url.clone())
            .header(ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| failure_of(&e, &target.client_id))?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(DocumentError::Status(status));
        }
        if !is_json(response.headers()) {
            return Err(DocumentError::NotJson);
        }
        let cache_control = joined(response.headers(), CACHE_CONTROL);
        let body = read_body(response, max_bytes, &target.client_id).await?;
        Ok(Fetched {
            body,
            cache_control,
        })
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        // Fetches under way belong to requests that have stopped waiting: nothing to keep.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The certificates of a PEM file, as roots to trust.
fn read_roots(path: &Path) -> Result<Vec<Certificate>, String> {
    let pem = std::fs::read(path)
        .map_err(|e| format!("cannot read the CA file {}: {e}", path.display()))?;
    let roots = Certificate::from_pem_bundle(&pem)
        .map_err(|e| format!("cannot read the CA file {}: {e}", path.display()))?;
    if roots.is_empty() {
        return Err(format!(
            "the CA file {} holds no certificate",
            path.display()
        ));
    }
    Ok(roots)
}

/// A client that follows no redirect, takes no proxy from the environment, speaks only
/// https and keeps no connection open between fetches (each fetch connects, and so is
/// checked, anew).
fn client(roots: &[Certificate], resolver: Option<CheckedResolver>) -> Result<Client, String> {
    let mut builder = Client::builder()
        .redirect(redirect::Policy::none())
        .no_proxy()
        .https_only(true)
        .pool_max_idle_per_host(0)
        .user_agent(concat!("tollgate/", env!("CARGO_PKG_VERSION")))
        .tls_certs_merge(roots.iter().cloned());
    if let Some(resolver) = resolver {
        builder = builder.dns_resolver(resolver);
    }
    builder
        .build()
        .map_err(|e| format!("cannot build the client documents' HTTP client: {e}"))
}

/// The resolver of the checked client: the system's lookup, refused when any address is
/// forbidden.
struct CheckedResolver;

/// The resolver's refusal, found again in the request's error.
#[derive(Debug)]
struct ForbiddenAnswer;

impl std::fmt::Display for ForbiddenAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the host resolves to an address that is not public")
    }
}

impl StdError for ForbiddenAnswer {}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = tokio::task::spawn_blocking(move || lookup(&host)).await??;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

pub(super) type BoxError = Box<dyn StdError + Send + Sync>;

/// The addresses of `host` (port 0: the connector puts the URL's), all of them public.
pub(super) fn lookup(host: &str) -> Result<Vec<SocketAddr>, BoxError> {
    let addrs: Vec<SocketAddr> = (host, 0).to_socket_addrs()?.collect();
    if addrs.is_empty() {
        return Err("the host has no address".into());
    }
    if addrs.iter().any(|addr| is_forbidden(addr.ip())) {
        return Err(Box::new(ForbiddenAnswer));
    }
    Ok(addrs)
}

/// What a failed request becomes; the cause goes to the log, never to the client.
fn failure_of(error: &reqwest::Error, client_id: &str) -> DocumentError {
    if error.is_timeout() {
        return DocumentError::Timeout;
    }
    let mut source: Option<&(dyn StdError + 'static)> = Some(error);
    let mut cause = String::new();
    while let Some(current) = source {
        if current.is::<ForbiddenAnswer>() {
            return DocumentError::ForbiddenAddress;
        }
        cause.push_str(": ");
        cause.push_str(&current.to_string());
        source = current.source();
    }
    tracing::debug!(client_id, "cannot fetch a client metadata document{cause}");
    DocumentError::Unreachable
}

/// Whether the answer is JSON: `application/json` or an `application/…+json` type.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Every value of the header `name`, joined by commas (as RFC 9110 §5.3 allows).
fn joined(headers: &HeaderMap, name: reqwest::header::HeaderName) -> Option<String> {
    let values: Vec<&str> = headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// The body, a chunk at a time, refused as soon as it passes `max_bytes` (whatever its
/// `Content-Length` said).
async fn read_body(
    mut response: Response,
    max_bytes: usize,
    client_id: &str,
) -> Result<Vec<u8>, DocumentError> {
    if response
        .content_length()
        .is_some_and(|length| length > max_bytes as u64)
    {
        return Err(DocumentError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| failure_of(&e, client_id))?
    {
        if body.len() + chunk.len() > max_bytes {
            return Err(DocumentError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
