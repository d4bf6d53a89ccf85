//! `kind = "openapi"`: a REST API described by an OpenAPI 3.0 or 3.1 document, each of its
//! operations a tool ([`spec`] reads the document, [`schema`] makes its JSON Schemas).
//!
//! A call builds the HTTP request from the arguments ([`request`]), sends it with the
//! backend's `reqwest` client of the calling thread (its lane, with connections kept open
//! per thread; the outbound runtime's client from a thread that cannot) — redirects not
//! followed, no proxy from the environment — and waits for it with the backend's deadline,
//! checking the caller's cancellation every few milliseconds; the body is read up to
//! `max_response_bytes`. The answer becomes a result or a catalog error ([`response`]);
//! a backend that cannot be reached is `backend_unavailable`, one that does not answer in
//! time is `timeout`.
//!
//! The document is a file, or a URL fetched when the backend opens, its last good copy
//! kept for when a later fetch fails ([`fetch`]).
//!
//! The credential is read once, when the backend is opened, and kept in a header value
//! marked sensitive; no error, log line or `Debug` print carries it, nor the base URL, nor
//! a file path.
//!
//! Health: `ready` once the document is read (there is no connection to keep); after a
//! call that could not reach the backend, `down` with that reason, until a call reaches
//! it again.

mod fetch;
mod request;
mod response;
mod schema;
mod spec;

pub use fetch::{COPIES_DIR, Copies, FETCH_DEADLINE, MAX_DOCUMENT_BYTES};

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use reqwest::{Client, redirect};
use serde_json::{Map, Value};

use self::request::{Credential, Outgoing};
use self::response::{Answer, Mapper};
use self::spec::Endpoint;
use crate::catalog::{ErrorKind, McpError};
use crate::config::{
    BackendAuth, BackendConfig, BackendKind, OpenApiBackend, SpecSource, read_secret,
};
use crate::tools::ToolOutput;
use crate::tools::backends::lane::{self, GaveUp, Lanes};
use crate::tools::backends::{
    Backend, BackendEnv, BackendProblem, BodyFailure, Call, Health, Operation, read_capped,
    tool_name,
};

/// How often a waiting call looks at the caller's cancellation.
const CANCEL_POLL: Duration = Duration::from_millis(25);

/// One OpenAPI backend, its document read.
pub struct OpenApi {
    name: String,
    base_url: String,
    /// The client on the outbound runtime (fetching the document, and calls from a thread
    /// that cannot run them itself).
    client: Client,
    /// A client of the same configuration per calling thread ([`Lanes`]).
    lanes: Lanes,
    credential: Option<Credential>,
    operations: Vec<Operation>,
    endpoints: HashMap<String, Endpoint>,
    max_response_bytes: u64,
    id_pointers: Vec<String>,
    message_pointers: Vec<String>,
    runtime: tokio::runtime::Handle,
    last_failure: Mutex<Option<&'static str>>,
    /// The operations an override disabled (never read further, never offered).
    disabled: Vec<String>,
    /// What the operator should know about how it was opened.
    warnings: Vec<String>,
}

impl std::fmt::Debug for OpenApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenApi")
            .field("name", &self.name)
            .field("operations", &self.operations.len())
            .field("credential", &self.credential)
            .finish_non_exhaustive()
    }
}

/// Opens the backend `config` describes: reads its credential and its document.
pub fn open(config: &BackendConfig, env: &BackendEnv) -> Result<Arc<dyn Backend>, BackendProblem> {
    Ok(Arc::new(OpenApi::open(config, env)?))
}

impl OpenApi {
    fn open(config: &BackendConfig, env: &BackendEnv) -> Result<OpenApi, BackendProblem> {
        let problem = |message: String| BackendProblem {
            backend: config.name.clone(),
            message,
        };
        let BackendKind::OpenApi(openapi) = &config.kind else {
            return Err(problem("not an openapi backend".into()));
        };
        let credential = openapi
            .auth
            .as_ref()
            .map(credential_of)
            .transpose()
            .map_err(problem)?;
        let credential_header = credential.as_ref().map(|c| c.name.as_str().to_owned());
        let disabled = |operation: &str| {
            config
                .tools
                .get(&tool_name(&config.name, operation))
                .and_then(|o| o.enabled)
                == Some(false)
        };
        let client = client_of(env).map_err(problem)?;
        let read = |text: &str, label: &str| {
            spec::load(text, label, credential_header.as_deref(), &disabled)
        };
        let (document, warnings) = match &openapi.spec {
            SpecSource::File(path) => spec::read_file(path)
                .and_then(|text| read(&text, &path.display().to_string()))
                .map(|document| (document, Vec::new())),
            SpecSource::Url(url) => fetch::open_url(&config.name, url, &client, env, &|text| {
                read(text, url.as_str())
            }),
        }
        .map_err(problem)?;
        let base_url = base_url_of(openapi, document.server_url.as_deref()).map_err(problem)?;
        let (operations, endpoints) = document
            .operations
            .into_iter()
            .map(|(op, endpoint)| (op.clone(), (op.name, endpoint)))
            .unzip();
        Ok(OpenApi {
            name: config.name.clone(),
            base_url,
            client,
            lanes: Lanes::new(rest_client),
            credential,
            operations,
            endpoints,
            max_response_bytes: openapi.max_response_bytes,
            id_pointers: openapi.error_id_pointers.clone(),
            message_pointers: openapi.error_message_pointers.clone(),
            runtime: env.runtime.clone(),
            last_failure: Mutex::new(None),
            disabled: document.disabled,
            warnings,
        })
    }
}

/// The backend's HTTP client on the outbound runtime ([`rest_client`]).
fn client_of(env: &BackendEnv) -> Result<Client, String> {
    let _entered = env.runtime.enter();
    rest_client().map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// A REST backend's HTTP client: redirects are never followed and no proxy is taken from
/// the environment.
fn rest_client() -> Result<Client, reqwest::Error> {
    Client::builder()
        .redirect(redirect::Policy::none())
        .no_proxy()
        .build()
}

/// Runs `exchange` until it ends, `timeout` passes or `cancelled` says so (looked at every
/// [`CANCEL_POLL`]); an exchange given up has its connection closed before this returns.
async fn supervise(
    exchange: impl Future<Output = Result<Answer, Failure>>,
    timeout: Duration,
    cancelled: &dyn Fn() -> bool,
) -> Result<Answer, Failure> {
    match lane::supervise(exchange, timeout, CANCEL_POLL, |_| cancelled()).await {
        Ok(answer) => answer,
        Err(GaveUp::Deadline) => Err(Failure::TimedOut),
        Err(GaveUp::Cancelled) => Err(Failure::Cancelled),
    }
}

/// The header the credential is sent in, read from its file.
fn credential_of(auth: &BackendAuth) -> Result<Credential, String> {
    let (name, value, parts, file) = match auth {
        BackendAuth::Header { name, value_file } => (
            name.clone(),
            read_secret(value_file)?,
            Vec::new(),
            value_file,
        ),
        BackendAuth::Bearer { token_file } => {
            let token = read_secret(token_file)?;
            let value = format!("Bearer {token}");
            ("Authorization".to_owned(), value, vec![token], token_file)
        }
        BackendAuth::Basic { file } => {
            let pair = read_secret(file)?;
            let Some((_, password)) = pair.split_once(':') else {
                return Err(format!(
                    "the basic credential file {} must hold user:password",
                    file.display()
                ));
            };
            let password = password.to_owned();
            let encoded = base64::engine::general_purpose::STANDARD.encode(&pair);
            let value = format!("Basic {encoded}");
            (
                "Authorization".to_owned(),
                value,
                vec![pair, encoded, password],
                file,
            )
        }
    };
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    Credential::new(&name, &value, &parts).ok_or_else(|| {
        format!(
            "the credential in {} cannot be sent as an HTTP header (a line break or a control character?)",
            file.display()
        )
    })
}

/// The configured base URL, else the document's first server URL when it is absolute.
fn base_url_of(config: &OpenApiBackend, server_url: Option<&str>) -> Result<String, String> {
    if let Some(url) = &config.base_url {
        return Ok(url.clone());
    }
    match server_url {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
            Ok(url.to_owned())
        }
        Some(url) => Err(format!(
            "the document's first server URL {url:?} is relative; set base_url to where the API is served"
        )),
        None => Err("the document names no server; set base_url to where the API is served".into()),
    }
}

/// Why a call got no answer to map.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// No connection, or it broke before the whole answer came (the short reason).
    Unreachable(&'static str),
    /// The body is larger than `max_response_bytes`.
    TooLarge(u16),
    /// The deadline passed.
    TimedOut,
    /// The caller cancelled.
    Cancelled,
}

impl OpenApi {
    /// One call of `operation`; `cancelled` is looked at while it waits, `now` (Unix
    /// seconds) reads an HTTP-date `Retry-After`.
    fn invoke(
        &self,
        operation: &str,
        args: &Map<String, Value>,
        call: Invocation<'_>,
        cancelled: &dyn Fn() -> bool,
        now: i64,
    ) -> Result<ToolOutput, McpError> {
        let Invocation {
            idempotency_key,
            timeout,
            trace,
        } = call;
        let endpoint = self
            .endpoints
            .get(operation)
            .ok_or_else(|| McpError::unknown_tool(&tool_name(&self.name, operation)))?;
        let mut outgoing = request::build(
            &self.base_url,
            endpoint,
            args,
            self.credential.as_ref(),
            idempotency_key,
        )?;
        request::add_trace(&mut outgoing.headers, trace);
        let waited = self.wait(outgoing, timeout, cancelled);
        self.note(&waited);
        match waited {
            Ok(answer) => {
                let mapped = Mapper {
                    backend: &self.name,
                    id_pointers: &self.id_pointers,
                    message_pointers: &self.message_pointers,
                }
                .map(&answer, now);
                self.scrubbed(mapped)
            }
            Err(failure) => Err(self.failure_error(failure, timeout)),
        }
    }

    /// A result or error with the credential taken out of whatever the backend repeated of
    /// it (a backend that echoes its key must not make the gate leak it).
    fn scrubbed(&self, mapped: Result<ToolOutput, McpError>) -> Result<ToolOutput, McpError> {
        let Some(credential) = &self.credential else {
            return mapped;
        };
        match mapped {
            Ok(output) => Ok(response::scrub_output(
                output,
                &|t| credential.scrub(t),
                &|t| credential.appears_in(t),
            )),
            Err(err) => Err(response::scrub_error(err, &|t| credential.scrub(t))),
        }
    }

    /// Sends `outgoing` and waits for the answer until it is read, the deadline passes or
    /// the caller cancels (dropping the exchange then closes the connection): on the
    /// calling thread's lane, else on the outbound runtime.
    fn wait(
        &self,
        outgoing: Outgoing,
        timeout: Duration,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Answer, Failure> {
        let supervised =
            |client: Client| supervise(self.exchange(client, outgoing), timeout, cancelled);
        match self.lanes.run(supervised) {
            Ok(waited) => waited,
            Err(supervised) => self.runtime.block_on(supervised(self.client.clone())),
        }
    }

    /// Sends the request and reads the body within the size cap.
    async fn exchange(&self, client: Client, outgoing: Outgoing) -> Result<Answer, Failure> {
        let mut builder = client
            .request(outgoing.method, outgoing.url)
            .headers(outgoing.headers);
        if let Some(body) = outgoing.body {
            builder = builder.body(body);
        }
        let mut response = builder
            .send()
            .await
            .map_err(|e| Failure::Unreachable(unreachable_reason(&e)))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = read_capped(&mut response, self.max_response_bytes)
            .await
            .map_err(|failure| match failure {
                BodyFailure::TooLarge => Failure::TooLarge(status.as_u16()),
                BodyFailure::Lost => Failure::Unreachable("connection closed during the response"),
            })?;
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    /// Remembers whether the backend was reached, for [`Backend::health`].
    fn note(&self, waited: &Result<Answer, Failure>) {
        let failure = match waited {
            Err(Failure::Unreachable(reason)) => Some(*reason),
            Ok(_) | Err(Failure::TooLarge(_)) => None,
            Err(Failure::TimedOut | Failure::Cancelled) => return,
        };
        if let Ok(mut last) = self.last_failure.lock() {
            *last = failure;
        }
        if let Some(reason) = failure {
            tracing::warn!(backend = %self.name, reason, "backend call could not reach the backend");
        }
    }

    fn failure_error(&self, failure: Failure, timeout: Duration) -> McpError {
        let err = |kind| McpError::new(kind).detail("backend", self.name.as_str());
        match failure {
            Failure::Unreachable(reason) => {
                err(ErrorKind::ToolBackendUnavailable).detail("reason", reason)
            }
            Failure::TooLarge(status) => err(ErrorKind::AdapterError)
                .detail("status", status)
                .detail("reason", "response_too_large"),
            Failure::TimedOut => err(ErrorKind::Timeout).detail(
                "timeout_ms",
                u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            ),
            Failure::Cancelled => err(ErrorKind::Timeout).detail("reason", "cancelled"),
        }
    }
}

/// A short reason for a request that got no answer: what failed, never the URL.
fn unreachable_reason(err: &reqwest::Error) -> &'static str {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    let mut texts = Vec::new();
    while let Some(cause) = source {
        if let Some(reason) = cause.downcast_ref::<std::io::Error>().and_then(io_reason) {
            return reason;
        }
        if cause.downcast_ref::<rustls::Error>().is_some() {
            return "TLS handshake failed";
        }
        texts.push(cause.to_string().to_ascii_lowercase());
        source = cause.source();
    }
    let said = |what: &str| texts.iter().any(|t| t.contains(what));
    if said("dns error") || said("failed to lookup address") {
        "host name not resolved"
    } else if said("certificate") || said("tls") {
        "TLS handshake failed"
    } else if err.is_connect() {
        "connection failed"
    } else {
        "connection closed before the response"
    }
}

/// The reason an I/O error stands for, looking through the errors it wraps (an I/O
/// error's `source` skips the one it holds; TLS failures come wrapped twice).
fn io_reason(io: &std::io::Error) -> Option<&'static str> {
    let inner = io.get_ref();
    if inner.is_some_and(|e| e.downcast_ref::<rustls::Error>().is_some()) {
        return Some("TLS handshake failed");
    }
    match io.kind() {
        std::io::ErrorKind::ConnectionRefused => return Some("connection refused"),
        std::io::ErrorKind::ConnectionReset
        | std::io::ErrorKind::ConnectionAborted
        | std::io::ErrorKind::BrokenPipe
        | std::io::ErrorKind::UnexpectedEof => {
            return Some("connection closed before the response");
        }
        _ => {}
    }
    inner
        .and_then(|e| e.downcast_ref::<std::io::Error>())
        .and_then(io_reason)
}

/// How one call is made, besides its operation and arguments.
#[derive(Clone, Copy)]
struct Invocation<'a> {
    /// The idempotency key the call holds.
    idempotency_key: Option<&'a str>,
    /// The backend's deadline for it.
    timeout: Duration,
    /// The trace context it carries.
    trace: &'a crate::telemetry::TraceFields,
}

impl Backend for OpenApi {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> &'static str {
        "openapi"
    }

    fn operations(&self) -> Vec<Operation> {
        self.operations.clone()
    }

    fn operation_names(&self) -> Vec<String> {
        self.operations
            .iter()
            .map(|op| op.name.clone())
            .chain(self.disabled.iter().cloned())
            .collect()
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    fn health(&self) -> Health {
        match self.last_failure.lock().ok().and_then(|last| *last) {
            Some(reason) => Health::Down(reason.to_owned()),
            None => Health::Ready,
        }
    }

    fn call(
        &self,
        operation: &str,
        args: &Map<String, Value>,
        call: &Call<'_>,
    ) -> Result<ToolOutput, McpError> {
        self.invoke(
            operation,
            args,
            Invocation {
                idempotency_key: call.idempotency_key,
                timeout: call.timeout,
                trace: call.trace,
            },
            &|| call.ctx.is_cancelled(),
            call.ctx.clock.unix_secs(),
        )
    }

    /// `{METHOD} {path template}`, with the HTTP client conventions' attributes.
    fn describe_call(&self, operation: &str) -> (String, crate::telemetry::SpanAttributes) {
        let Some(endpoint) = self.endpoints.get(operation) else {
            return (operation.to_owned(), Vec::new());
        };
        let method = endpoint.method.as_str().to_owned();
        let mut attributes = vec![
            ("http.request.method", method.clone().into()),
            ("url.template", endpoint.path.clone().into()),
            ("tollgate.backend", self.name.clone().into()),
        ];
        if let Ok(url) = reqwest::Url::parse(&self.base_url) {
            if let Some(host) = url.host_str() {
                attributes.push(("server.address", host.to_owned().into()));
            }
            if let Some(port) = url.port_or_known_default() {
                attributes.push(("server.port", i64::from(port).into()));
            }
        }
        (format!("{method} {}", endpoint.path), attributes)
    }
}

#[cfg(test)]
mod tests;
