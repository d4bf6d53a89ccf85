//! OAuth Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document, and
//! the MCP authorization specification's "Client ID Metadata Documents"): a client whose
//! `client_id` is an https URL registers nowhere; the JSON document at that URL describes
//! it, and its `redirect_uris` decide where the authorization server may send the user
//! back. [`DocumentFetcher::get`] turns such a `client_id` into a checked
//! [`ClientDocument`] or a [`DocumentError`] whose text is fit for an `error_description`.
//!
//! The URL is the client's choice, so every step is bounded and nothing private is
//! reachable through it:
//! - the URL itself (`https` only, a path, no fragment, no user name or password, no dot
//!   segments) is checked before anything is sent;
//! - the host must resolve to public addresses only ([`super::address::is_forbidden`]),
//!   and the connection goes to the very addresses that were checked, so a DNS answer
//!   that changes between the check and the connection cannot reach a private one; an
//!   operator lifts the address check for named hosts only (`allow_hosts`, for testing);
//! - no redirect is followed, no proxy is taken from the environment, the answer must be
//!   `200` with a JSON content type, its body is read a chunk at a time up to
//!   `max_bytes`, and the whole fetch has one deadline (`http`);
//! - the document must name its own URL as `client_id` and may hold no secret
//!   (`metadata`).
//!
//! Documents are cached by URL for as long as the answer's `Cache-Control` asks, held
//! between `cache_min` and `cache_max` and read on the injected [`Clock`]; at most
//! `max_cached` are kept. Concurrent first requests for one URL share one fetch. Failures
//! are not cached: the next request tries again.

mod http;
mod metadata;

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use url::{Host, Url};

use super::address::is_forbidden;
use crate::clock::Clock;

/// The longest `client_id` URL accepted, in bytes.
const MAX_CLIENT_ID_BYTES: usize = 2048;

/// How much longer than the fetch deadline a request waits for the fetch another request
/// of the same URL started before giving up.
const FOLLOWER_GRACE: Duration = Duration::from_secs(1);

/// How client ID metadata documents are fetched and cached (the operator's
/// `[oauth_server.client_documents]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentSettings {
    /// The largest document read, in bytes; a longer answer is refused (default 5 KiB).
    pub max_bytes: usize,
    /// The deadline of a whole fetch: resolving, connecting, TLS, the answer and its body
    /// (default 5 s).
    pub timeout: Duration,
    /// How long a document is kept when its answer sets no `max-age` (default 1 hour).
    pub cache_default: Duration,
    /// The shortest time a document is kept, whatever its answer asks: a `max-age` below
    /// it, `no-store` and `no-cache` all keep it this long (default 60 s), so that a
    /// client cannot make every authorization request fetch again.
    pub cache_min: Duration,
    /// The longest time a document is kept, whatever its answer asks (default 24 hours).
    pub cache_max: Duration,
    /// The most documents kept at once; past it, expired ones go first, then the oldest
    /// (default 1 000).
    pub max_cached: usize,
    /// Hosts, as `host` or `host:port`, that may resolve to private or loopback addresses
    /// (a test deployment's own client); empty by default. Only the address check is
    /// lifted: `https` and every other rule still hold.
    pub allow_hosts: Vec<String>,
    /// A PEM file of extra root certificates to trust besides the system's (a test
    /// server's own certificate authority).
    pub ca_file: Option<PathBuf>,
}

impl Default for DocumentSettings {
    fn default() -> DocumentSettings {
        DocumentSettings {
            max_bytes: 5 * 1024,
            timeout: Duration::from_secs(5),
            cache_default: Duration::from_secs(3600),
            cache_min: Duration::from_secs(60),
            cache_max: Duration::from_secs(24 * 3600),
            max_cached: 1000,
            allow_hosts: Vec::new(),
            ca_file: None,
        }
    }
}

/// A client as its metadata document describes it, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientDocument {
    /// The document's URL, which is the client's `client_id`.
    pub client_id: String,
    /// A name to show the user (at most 200 characters).
    pub client_name: Option<String>,
    /// The client's home page (an https URL).
    pub client_uri: Option<String>,
    /// The client's logo (an https URL).
    pub logo_uri: Option<String>,
    /// Where the authorization server may send the user back: absolute URIs without a
    /// fragment, at least one, compared exactly.
    pub redirect_uris: Vec<String>,
    /// The grants the client uses: `authorization_code`, and possibly `refresh_token`.
    pub grant_types: Vec<String>,
    /// The response types the client uses: `code`.
    pub response_types: Vec<String>,
    /// Always `none`: a public document can hold no shared secret.
    pub token_endpoint_auth_method: String,
    /// The scopes the client may ask for, space-separated, if it limits them.
    pub scope: Option<String>,
}

/// Why a client's metadata document was not accepted. Each variant's text is short, names
/// no address, and may be sent to the client as an `error_description`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocumentError {
    /// The `client_id` is not a URL a document may be fetched from; the text says why.
    BadUrl(&'static str),
    /// The host is, or resolves to, an address that is not public.
    ForbiddenAddress,
    /// The host could not be resolved or connected to, or its TLS certificate was not
    /// trusted.
    Unreachable,
    /// The fetch did not finish within the deadline.
    Timeout,
    /// The document is larger than `max_bytes`.
    TooLarge,
    /// The server answered with this status instead of `200` (a redirect is not followed).
    Status(u16),
    /// The answer's `Content-Type` is not JSON.
    NotJson,
    /// The document breaks a rule; the text names the field.
    Invalid(String),
    /// The document's `client_id` is not its own URL.
    WrongClientId,
}

impl fmt::Display for DocumentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DocumentError::BadUrl(why) => f.write_str(why),
            DocumentError::ForbiddenAddress => {
                f.write_str("the client_id host is not on a public address")
            }
            DocumentError::Unreachable => f.write_str("the client_id URL could not be reached"),
            DocumentError::Timeout => f.write_str("the client metadata document took too long"),
            DocumentError::TooLarge => f.write_str("the client metadata document is too large"),
            DocumentError::Status(status) if (300..400).contains(status) => write!(
                f,
                "the client_id URL answered HTTP {status}; redirects are not followed"
            ),
            DocumentError::Status(status) => {
                write!(f, "the client_id URL answered HTTP {status}, not 200")
            }
            DocumentError::NotJson => {
                f.write_str("the client metadata document is not served as JSON")
            }
            DocumentError::Invalid(why) => {
                write!(f, "the client metadata document is invalid: {why}")
            }
            DocumentError::WrongClientId => f.write_str(
                "the client metadata document's client_id is not the URL it was fetched from",
            ),
        }
    }
}

impl std::error::Error for DocumentError {}

/// Whether `client_id` names a client ID metadata document (it is an `https://` URL)
/// rather than a client registered with tollgate. Such a `client_id` is then checked in
/// full by [`DocumentFetcher::get`].
pub fn is_document_client_id(client_id: &str) -> bool {
    client_id.starts_with("https://")
}

/// Fetches, checks and caches client ID metadata documents. Send + Sync; share it in an
/// `Arc`.
pub struct DocumentFetcher {
    settings: DocumentSettings,
    clock: Clock,
    http: http::Http,
    cache: Mutex<Cache>,
}

// The authorization endpoints share one fetcher between their worker threads.
const _: () = {
    const fn shared_between_threads<T: Send + Sync>() {}
    shared_between_threads::<DocumentFetcher>();
};

impl DocumentFetcher {
    /// Starts the fetcher: a small runtime of its own (one worker thread, named
    /// "tollgate-client-documents") and its HTTP clients. Fails on settings that cannot
    /// work (a `cache_min` above `cache_max`, no bytes or no time allowed) and on a
    /// `ca_file` that cannot be read or holds no certificate.
    pub fn start(settings: DocumentSettings, clock: Clock) -> Result<DocumentFetcher, String> {
        if settings.cache_min > settings.cache_max {
            return Err("client documents: cache_min must not exceed cache_max".to_owned());
        }
        if settings.max_bytes == 0 || settings.timeout.is_zero() {
            return Err("client documents: max_bytes and timeout must be above zero".to_owned());
        }
        let settings = DocumentSettings {
            allow_hosts: settings
                .allow_hosts
                .iter()
                .map(|host| host.trim().to_ascii_lowercase())
                .filter(|host| !host.is_empty())
                .collect(),
            ..settings
        };
        let http = http::Http::start(settings.ca_file.as_deref())?;
        Ok(DocumentFetcher {
            settings,
            clock,
            http,
            cache: Mutex::new(Cache::default()),
        })
    }

    /// The checked document of the client `client_id`, from the cache while it is fresh,
    /// else fetched (blocking the calling thread, at most the fetch deadline). A request
    /// that finds another one fetching the same URL waits for that fetch and shares its
    /// outcome.
    pub fn get(&self, client_id: &str) -> Result<Arc<ClientDocument>, DocumentError> {
        let target = Target::parse(client_id, &self.settings.allow_hosts)?;
        let flight = {
            let mut cache = self.lock_cache();
            let now = self.clock.monotonic();
            if let Some(document) = cache.fresh(client_id, now) {
                return Ok(document);
            }
            if let Some(flight) = cache.flights.get(client_id) {
                let flight = Arc::clone(flight);
                drop(cache);
                return flight.wait(self.settings.timeout.saturating_add(FOLLOWER_GRACE));
            }
            let flight = Arc::new(Flight::default());
            cache
                .flights
                .insert(client_id.to_owned(), Arc::clone(&flight));
            flight
        };
        let mut landing = Landing {
            fetcher: self,
            client_id,
            flight,
            outcome: None,
        };
        let outcome = self.fetch(&target);
        landing.outcome = Some(outcome.clone());
        outcome
    }

    /// Fetches and checks the document at `target`, and caches it.
    fn fetch(&self, target: &Target) -> Result<Arc<ClientDocument>, DocumentError> {
        let outcome = self
            .http
            .wait(
                self.settings.timeout,
                self.http.fetch(target, self.settings.max_bytes),
            )
            .and_then(|fetched| fetched)
            .and_then(|fetched| {
                let document = metadata::parse(&fetched.body, &target.client_id)?;
                Ok((document, fetched.cache_control))
            });
        let (document, cache_control) = outcome.inspect_err(|error| {
            tracing::info!(client_id = %target.client_id, "client metadata document refused: {error}");
        })?;
        let document = Arc::new(document);
        let lifetime = cache_lifetime(cache_control.as_deref(), &self.settings);
        let now = self.clock.monotonic();
        self.lock_cache().store(
            &target.client_id,
            Arc::clone(&document),
            now,
            now.saturating_add(lifetime),
            self.settings.max_cached,
        );
        Ok(document)
    }

    fn lock_cache(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A `client_id` checked as a URL a document may be fetched from.
struct Target {
    /// The `client_id` as the client wrote it (the document must repeat it exactly).
    client_id: String,
    /// It, parsed.
    url: Url,
    /// Whether the operator allows this host on any address (`allow_hosts`).
    allowed: bool,
}

impl Target {
    /// Checks `client_id` against the rules for a client identifier URL, and an IP-address
    /// host against the forbidden addresses (unless allowed). A host name is checked when
    /// it is resolved, on the connection's way.
    fn parse(client_id: &str, allow_hosts: &[String]) -> Result<Target, DocumentError> {
        check_raw_url(client_id)?;
        let url = Url::parse(client_id)
            .map_err(|_| DocumentError::BadUrl("the client_id is not a valid URL"))?;
        if url.scheme() != "https" {
            return Err(DocumentError::BadUrl("the client_id must be an https URL"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(DocumentError::BadUrl(
                "the client_id URL must not contain a user name or password",
            ));
        }
        if url.fragment().is_some() {
            return Err(DocumentError::BadUrl(
                "the client_id URL must not contain a fragment",
            ));
        }
        if url.path() == "/" {
            return Err(DocumentError::BadUrl("the client_id URL must have a path"));
        }
        let allowed = is_allowed(&url, allow_hosts);
        let literal = match url.host() {
            Some(Host::Ipv4(ip)) => Some(std::net::IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => Some(std::net::IpAddr::V6(ip)),
            Some(Host::Domain(_)) => None,
            None => return Err(DocumentError::BadUrl("the client_id URL has no host")),
        };
        if literal.is_some_and(is_forbidden) && !allowed {
            return Err(DocumentError::ForbiddenAddress);
        }
        Ok(Target {
            client_id: client_id.to_owned(),
            url,
            allowed,
        })
    }
}

/// The rules checked on the text as written, before the URL parser normalises it away: a
/// length, the scheme, no blanks or control characters, no user information, no `.` or
/// `..` segment (also percent-encoded, and with `\`, which the parser reads as `/`).
fn check_raw_url(client_id: &str) -> Result<(), DocumentError> {
    if client_id.len() > MAX_CLIENT_ID_BYTES {
        return Err(DocumentError::BadUrl("the client_id URL is too long"));
    }
    let Some(rest) = client_id.strip_prefix("https://") else {
        return Err(DocumentError::BadUrl("the client_id must be an https URL"));
    };
    if client_id
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(DocumentError::BadUrl(
            "the client_id URL must not contain spaces or control characters",
        ));
    }
    let authority_end = rest.find(['/', '\\', '?', '#']).unwrap_or(rest.len());
    let (authority, rest) = rest.split_at(authority_end);
    if authority.is_empty() {
        return Err(DocumentError::BadUrl("the client_id URL has no host"));
    }
    if authority.contains('@') {
        return Err(DocumentError::BadUrl(
            "the client_id URL must not contain a user name or password",
        ));
    }
    let path = &rest[..rest.find(['?', '#']).unwrap_or(rest.len())];
    let dot_segment = path.split(['/', '\\']).any(|segment| {
        let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
        decoded == "." || decoded == ".."
    });
    if dot_segment {
        return Err(DocumentError::BadUrl(
            "the client_id URL must not contain . or .. path segments",
        ));
    }
    Ok(())
}

/// Whether the operator allows `url`'s host on any address: `allow_hosts` names it, alone
/// or with the URL's port.
fn is_allowed(url: &Url, allow_hosts: &[String]) -> bool {
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return false;
    };
    let with_port = format!("{host}:{port}");
    allow_hosts
        .iter()
        .any(|allowed| *allowed == host || *allowed == with_port)
}

/// How long a document is kept: its answer's `max-age` (or `cache_default` without one;
/// `cache_min` for `no-store` or `no-cache`), held between `cache_min` and `cache_max`.
fn cache_lifetime(cache_control: Option<&str>, settings: &DocumentSettings) -> Duration {
    let mut no_store = false;
    let mut max_age = None;
    for directive in cache_control.unwrap_or_default().split(',') {
        let (name, value) = match directive.split_once('=') {
            Some((name, value)) => (name.trim(), Some(value.trim().trim_matches('"'))),
            None => (directive.trim(), None),
        };
        if name.eq_ignore_ascii_case("no-store") || name.eq_ignore_ascii_case("no-cache") {
            no_store = true;
        } else if name.eq_ignore_ascii_case("max-age") {
            // RFC 9111 §1.2.2: a delta-seconds too large to hold is read as very large.
            max_age = value
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .map(|v| Duration::from_secs(v.parse().unwrap_or(u64::MAX)));
        }
    }
    let wanted = match (no_store, max_age) {
        (true, _) => settings.cache_min,
        (false, Some(max_age)) => max_age,
        (false, None) => settings.cache_default,
    };
    wanted.max(settings.cache_min).min(settings.cache_max)
}

/// The documents kept, and the fetches under way, by URL.
#[derive(Default)]
struct Cache {
    entries: HashMap<String, Cached>,
    flights: HashMap<String, Arc<Flight>>,
}

/// A document kept, with when it was stored and until when it is fresh (readings of
/// [`Clock::monotonic`]).
struct Cached {
    document: Arc<ClientDocument>,
    stored_at: Duration,
    expires_at: Duration,
}

impl Cache {
    /// The document kept for `client_id`, if still fresh at `now`.
    fn fresh(&self, client_id: &str, now: Duration) -> Option<Arc<ClientDocument>> {
        self.entries
            .get(client_id)
            .filter(|cached| now < cached.expires_at)
            .map(|cached| Arc::clone(&cached.document))
    }

    /// Keeps `document` until `expires_at`; when `max` are kept already, the expired ones
    /// are dropped first, then the oldest.
    fn store(
        &mut self,
        client_id: &str,
        document: Arc<ClientDocument>,
        now: Duration,
        expires_at: Duration,
        max: usize,
    ) {
        if max == 0 {
            return;
        }
        if !self.entries.contains_key(client_id) && self.entries.len() >= max {
            self.entries.retain(|_, cached| now < cached.expires_at);
            while self.entries.len() >= max {
                let oldest = self
                    .entries
                    .iter()
                    .min_by_key(|(_, cached)| cached.stored_at)
                    .map(|(key, _)| key.clone());
                match oldest {
                    Some(key) => self.entries.remove(&key),
                    None => break,
                };
            }
        }
        self.entries.insert(
            client_id.to_owned(),
            Cached {
                document,
                stored_at: now,
                expires_at,
            },
        );
    }
}

type Outcome = Result<Arc<ClientDocument>, DocumentError>;

/// One fetch under way, whose outcome the requests that arrive meanwhile wait for.
#[derive(Default)]
struct Flight {
    outcome: Mutex<Option<Outcome>>,
    landed: Condvar,
}

impl Flight {
    /// The fetch's outcome, waiting at most `limit` for it.
    fn wait(&self, limit: Duration) -> Outcome {
        let started = Instant::now();
        let mut outcome = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(landed) = outcome.as_ref() {
                return landed.clone();
            }
            let left = limit.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(DocumentError::Timeout);
            }
            outcome = self
                .landed
                .wait_timeout(outcome, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// Ends the flight of the request that fetches: removes it from the cache and hands its
/// outcome to the requests waiting on it, also when the fetch unwinds.
struct Landing<'a> {
    fetcher: &'a DocumentFetcher,
    client_id: &'a str,
    flight: Arc<Flight>,
    outcome: Option<Outcome>,
}

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        self.fetcher.lock_cache().flights.remove(self.client_id);
        let outcome = self
            .outcome
            .take()
            .unwrap_or(Err(DocumentError::Unreachable));
        *self
            .flight
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(outcome);
        self.flight.landed.notify_all();
    }
}

#[cfg(test)]
mod tests;
