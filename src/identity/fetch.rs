//! The HTTP side of identity: one client (rustls on the ring provider, no proxy taken from
//! the environment, no redirect followed) on the identity runtime, a GET of a JSON
//! document and a form POST, each under a deadline and a cap on the body, read a chunk at a
//! time and refused past the cap. Also how a blocking caller waits for that runtime.
//!
//! A form POST is answered whatever its status ([`Posted`]): a token endpoint's refusal
//! (RFC 6749 §5.2) is an answer to read, not a provider that cannot be reached.

use std::future::Future;
use std::time::Duration;

use base64::Engine as _;
use reqwest::{Client, Response, redirect};
use serde_json::Value;

/// The longest a fetch (metadata, keys, an introspection call) may take, whole.
pub(super) const FETCH_DEADLINE: Duration = Duration::from_secs(3);
/// The longest the connection of a fetch may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest metadata, key set or introspection answer read.
pub(super) const MAX_BODY_BYTES: usize = 512 * 1024;

/// The identity runtime's handle and its HTTP client.
pub(super) struct Http {
    client: Client,
    handle: tokio::runtime::Handle,
    /// The longest a fetch may take, whole: [`FETCH_DEADLINE`] (shorter in tests).
    deadline: Duration,
}

/// The answer to a form POST, of any status.
pub(super) struct Posted {
    /// The HTTP status.
    pub(super) status: u16,
    /// The body read as JSON, or why it could not be (too large, cut off, not JSON).
    pub(super) body: Result<Value, String>,
}

impl Http {
    /// The client, built on the runtime of `handle`, each fetch bounded by `deadline`.
    pub(super) fn new(handle: tokio::runtime::Handle, deadline: Duration) -> Result<Http, String> {
        // One process-wide crypto provider for every TLS connection; installing it a second
        // time (the outbound backends do it too) is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = {
            let _entered = handle.enter();
            Client::builder()
                .redirect(redirect::Policy::none())
                .no_proxy()
                .connect_timeout(CONNECT_TIMEOUT.min(deadline))
                .timeout(deadline)
                .build()
                .map_err(|e| format!("cannot build the HTTP client: {e}"))?
        };
        Ok(Http {
            client,
            handle,
            deadline,
        })
    }

    /// Runs `work` on the identity runtime and waits for it, at most the fetch deadline.
    /// Callers are plain threads; one that is itself inside a runtime (where waiting in
    /// place would panic) waits from a short-lived thread of its own instead.
    pub(super) fn wait<F>(&self, work: F) -> Result<F::Output, String>
    where
        F: Future + Send,
        F::Output: Send,
    {
        let deadline = self.deadline;
        let bounded = async move {
            tokio::time::timeout(deadline, work)
                .await
                .map_err(|_| format!("no answer within {}", seconds(deadline)))
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return self.handle.block_on(bounded);
        }
        std::thread::scope(|scope| {
            scope
                .spawn(|| self.handle.block_on(bounded))
                .join()
                .unwrap_or_else(|_| Err("the fetch stopped unexpectedly".to_owned()))
        })
    }

    /// GETs `url` and reads its body as JSON.
    pub(super) async fn get_json(&self, url: &str) -> Result<Value, String> {
        let response = self
            .client
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| format!("GET {url}: {}", cause_of(&e.without_url())))?;
        json_body(response, url).await
    }

    /// POSTs `form` to `url` with HTTP Basic client authentication (RFC 6749 §2.3.1: both
    /// parts form-encoded first) and reads the answer as JSON. No part of the form appears
    /// in an error.
    pub(super) async fn post_form_json(
        &self,
        url: &str,
        form: &[(&str, &str)],
        client: (&str, &str),
    ) -> Result<Value, String> {
        let posted = self.post_form(url, form, Some(client)).await?;
        if !(200..300).contains(&posted.status) {
            return Err(format!("{url} answered HTTP {}", posted.status));
        }
        posted.body
    }

    /// POSTs `form` to `url`, with HTTP Basic client authentication when `basic` names the
    /// client and its secret (RFC 6749 §2.3.1: both parts form-encoded first), and reads
    /// the answer, whatever its status. An error only when no answer came. No part of the
    /// form appears in an error.
    pub(super) async fn post_form(
        &self,
        url: &str,
        form: &[(&str, &str)],
        basic: Option<(&str, &str)>,
    ) -> Result<Posted, String> {
        let body: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let mut request = self
            .client
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json");
        if let Some((client_id, secret)) = basic {
            let encode =
                |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            let pair = format!("{}:{}", encode(client_id), encode(secret));
            let basic = base64::engine::general_purpose::STANDARD.encode(pair);
            request = request.header("authorization", format!("Basic {basic}"));
        }
        let response = request
            .body(body)
            .send()
            .await
            .map_err(|e| format!("POST {url}: {}", cause_of(&e.without_url())))?;
        let status = response.status().as_u16();
        let body = match bounded_body(response, url).await {
            Ok(bytes) => json_of(&bytes, url),
            Err(cause) => Err(cause),
        };
        Ok(Posted { status, body })
    }
}

/// The body of a successful answer, read up to [`MAX_BODY_BYTES`], as JSON.
async fn json_body(response: Response, url: &str) -> Result<Value, String> {
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{url} answered HTTP {}", status.as_u16()));
    }
    json_of(&bounded_body(response, url).await?, url)
}

/// The body of an answer, read a chunk at a time and refused past [`MAX_BODY_BYTES`].
async fn bounded_body(mut response: Response, url: &str) -> Result<Vec<u8>, String> {
    if response
        .content_length()
        .is_some_and(|n| n > MAX_BODY_BYTES as u64)
    {
        return Err(too_large(url));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("{url}: reading the answer: {}", cause_of(&e.without_url())))?
    {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(too_large(url));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn json_of(body: &[u8], url: &str) -> Result<Value, String> {
    serde_json::from_slice(body).map_err(|e| format!("{url} answered something not JSON: {e}"))
}

/// A deadline as the operator reads it: whole seconds ("3 s"), else milliseconds.
fn seconds(deadline: Duration) -> String {
    if deadline.subsec_millis() == 0 {
        format!("{} s", deadline.as_secs())
    } else {
        format!("{} ms", deadline.as_millis())
    }
}

fn too_large(url: &str) -> String {
    format!("{url} answered more than {} KiB", MAX_BODY_BYTES / 1024)
}

/// An error and its causes, one sentence (reqwest's own message says little).
fn cause_of(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
