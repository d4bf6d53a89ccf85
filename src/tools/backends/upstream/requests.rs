//! The upstream's resources and prompts, one request each: `resources/read`, `prompts/get`,
//! `resources/subscribe` and `resources/unsubscribe`, sent through rmcp's peer on the
//! outbound runtime while the caller's thread waits with the backend's deadline. Failures
//! map into the catalog as a tool call's do ([`super::call`]); an upstream that says it has
//! no such resource (`-32002`) is `resource_not_found`.

use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use rmcp::model::{
    ArgumentInfo, ClientRequest, CompleteRequest, CompleteRequestParams, GetPromptRequest,
    GetPromptRequestParams, ReadResourceRequest, ReadResourceRequestParams, Reference,
    ServerResult, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::PeerRequestOptions;
use serde_json::{Map, Value};

use super::Shared;
use super::call::{error_of, rpc_error, timeout, transport_failed, unavailable};
use crate::catalog::{ErrorKind, McpError};
use crate::tools::backends::NOT_CONNECTED;

/// MCP's code for a resource the server does not have.
const RESOURCE_NOT_FOUND: i32 = -32002;

/// `resources/read` of the upstream's `uri`: its result (`contents`) as it sent it.
pub(super) fn read_resource(
    shared: &Arc<Shared>,
    runtime: &tokio::runtime::Handle,
    uri: &str,
    deadline: Duration,
) -> Result<Value, McpError> {
    let params = ReadResourceRequestParams::new(uri);
    let request = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params));
    match send(shared, runtime, request, deadline) {
        Ok(ServerResult::ReadResourceResult(result)) => to_value(&shared.name, &result),
        Ok(_) => Err(unexpected(&shared.name)),
        Err(Failed::Rpc(code, _)) if code == RESOURCE_NOT_FOUND => {
            Err(McpError::resource_not_found(uri).with("uri", uri))
        }
        Err(failed) => Err(failed.into_error(&shared.name, deadline)),
    }
}

/// `prompts/get` of the upstream's prompt `name` with `arguments`: its result
/// (`description`, `messages`) as it sent it.
pub(super) fn get_prompt(
    shared: &Arc<Shared>,
    runtime: &tokio::runtime::Handle,
    name: &str,
    arguments: &Map<String, Value>,
    deadline: Duration,
) -> Result<Value, McpError> {
    let mut params = GetPromptRequestParams::new(name);
    if !arguments.is_empty() {
        params = params.with_arguments(arguments.clone());
    }
    let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
    match send(shared, runtime, request, deadline) {
        Ok(ServerResult::GetPromptResult(result)) => to_value(&shared.name, &result),
        Ok(_) => Err(unexpected(&shared.name)),
        Err(failed) => Err(failed.into_error(&shared.name, deadline)),
    }
}

/// `completion/complete` of the argument `argument` (partly `value`) of the upstream's
/// prompt `name`: the values it offers.
pub(super) fn complete(
    shared: &Arc<Shared>,
    runtime: &tokio::runtime::Handle,
    name: &str,
    (argument, value): (&str, &str),
    deadline: Duration,
) -> Result<Vec<String>, McpError> {
    let params = CompleteRequestParams::new(
        Reference::for_prompt(name),
        ArgumentInfo::new(argument, value),
    );
    let request = ClientRequest::CompleteRequest(CompleteRequest::new(params));
    match send(shared, runtime, request, deadline) {
        Ok(ServerResult::CompleteResult(result)) => Ok(result.completion.values),
        Ok(_) => Err(unexpected(&shared.name)),
        Err(failed) => Err(failed.into_error(&shared.name, deadline)),
    }
}

/// `resources/subscribe` (or, `on` false, `resources/unsubscribe`) of the upstream's `uri`.
#[expect(
    deprecated,
    reason = "the handshake era's subscription is the one an upstream in that era takes"
)]
pub(super) fn subscription(
    shared: &Arc<Shared>,
    runtime: &tokio::runtime::Handle,
    uri: &str,
    on: bool,
    deadline: Duration,
) -> Result<(), McpError> {
    let request = if on {
        ClientRequest::SubscribeRequest(rmcp::model::SubscribeRequest::new(
            SubscribeRequestParams::new(uri),
        ))
    } else {
        ClientRequest::UnsubscribeRequest(rmcp::model::UnsubscribeRequest::new(
            UnsubscribeRequestParams::new(uri),
        ))
    };
    match send(shared, runtime, request, deadline) {
        Ok(_) => Ok(()),
        Err(Failed::Rpc(code, _)) if code == RESOURCE_NOT_FOUND => {
            Err(McpError::resource_not_found(uri).with("uri", uri))
        }
        Err(failed) => Err(failed.into_error(&shared.name, deadline)),
    }
}

/// Why a request has no result.
enum Failed {
    /// The upstream answered with a JSON-RPC error (code, message).
    Rpc(i32, String),
    /// It failed otherwise (already a catalog error).
    Other(rmcp::ServiceError),
    /// No session is up.
    NotConnected,
    /// The deadline passed.
    Deadline,
    /// The task sending it ended without an outcome.
    Lost,
}

impl Failed {
    fn into_error(self, backend: &str, deadline: Duration) -> McpError {
        match self {
            Failed::Rpc(code, message) => rpc_error(backend, i64::from(code), &message),
            Failed::Other(e) => error_of(backend, deadline, e),
            Failed::NotConnected => unavailable(backend, NOT_CONNECTED),
            Failed::Deadline => timeout(backend, deadline),
            Failed::Lost => unavailable(backend, "connection lost"),
        }
    }
}

/// Sends `request` on the live session and waits for its answer until `deadline`; rmcp
/// sends `notifications/cancelled` when the deadline passes first.
fn send(
    shared: &Arc<Shared>,
    runtime: &tokio::runtime::Handle,
    request: ClientRequest,
    deadline: Duration,
) -> Result<ServerResult, Failed> {
    let link = shared.link().ok_or(Failed::NotConnected)?;
    let (done_tx, done) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let options = PeerRequestOptions::with_timeout(deadline);
        let outcome = match link.peer.send_request_with_option(request, options).await {
            Ok(handle) => handle.await_response().await,
            Err(e) => Err(e),
        };
        if let Err(e) = &outcome
            && transport_failed(e)
        {
            link.break_off();
        }
        let _ = done_tx.send(outcome);
    });
    // A little past the deadline: rmcp's own timeout answers first.
    match done.recv_timeout(deadline + Duration::from_millis(250)) {
        Ok(Ok(result)) => Ok(result),
        Ok(Err(rmcp::ServiceError::McpError(data))) => {
            Err(Failed::Rpc(data.code.0, data.message.into_owned()))
        }
        Ok(Err(rmcp::ServiceError::Timeout { .. })) => Err(Failed::Deadline),
        Ok(Err(e)) => Err(Failed::Other(e)),
        Err(RecvTimeoutError::Timeout) => Err(Failed::Deadline),
        Err(RecvTimeoutError::Disconnected) => Err(Failed::Lost),
    }
}

fn to_value<T: serde::Serialize>(backend: &str, result: &T) -> Result<Value, McpError> {
    serde_json::to_value(result).map_err(|_| unexpected(backend))
}

fn unexpected(backend: &str) -> McpError {
    McpError::new(ErrorKind::AdapterError)
        .detail("backend", backend)
        .detail("original_error", "unexpected_response")
}
