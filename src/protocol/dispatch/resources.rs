//! `resources/read` (text or base64 blob contents) and the handshake era's
//! `resources/subscribe` and `resources/unsubscribe`, which record only resources that can
//! change. A resource of an upstream MCP server (`upstream://<backend>/…`) is read through
//! the guard chain as a read of its backend's resources (charged, scoped, planned and
//! audited), and a subscription to it needs what a read needs and is passed on upstream.

use serde_json::{Value, json};

use super::{Answer, Env, Server};
use crate::catalog::McpError;
use crate::guards::ReadThrough;
use crate::guards::auth::Principal;
use crate::protocol::jsonrpc::Request;
use crate::tools::ResourceBody;

impl Server {
    /// `resources/read`: the contents of the resource `uri` names.
    pub(super) fn read_resource(&self, req: &Request, env: &Env<'_>) -> Result<Answer, McpError> {
        let uri = uri_param(req)?;
        if let Some(subject) = self.backends().resource_subject(uri) {
            let read = |_: &Principal| self.backends().read_resource(uri);
            let audit_name = format!("resources/read {uri}");
            return self.read_data(req, &audit_name, ReadThrough::Subject(&subject), env, &read);
        }
        self.authenticate(env)?;
        self.own_resource(req).map(Answer::uncharged)
    }

    /// `resources/read` of one of tollgate's own resources.
    pub(super) fn own_resource(&self, req: &Request) -> Result<Value, McpError> {
        let uri = uri_param(req)?;
        let (mime, body) = self
            .registry()
            .read_resource(uri)
            .ok_or_else(|| McpError::resource_not_found(uri).with("uri", uri))?;
        let mut content = json!({ "uri": uri, "mimeType": mime });
        match body {
            ResourceBody::Text(text) => content["text"] = json!(text),
            ResourceBody::Blob(bytes) => {
                use base64::Engine as _;
                content["blob"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
            }
        }
        Ok(json!({ "contents": [content] }))
    }

    /// `resources/subscribe` (of a resource that exists) and `resources/unsubscribe`.
    pub(super) fn subscription(&self, req: &Request, env: &Env<'_>) -> Result<Value, McpError> {
        let principal = self.authenticate(env)?;
        let uri = uri_param(req)?;
        let session = env.session;
        if let Some(subject) = self.backends().resource_subject(uri) {
            let on = req.method == "resources/subscribe";
            if on {
                self.guards
                    .authenticator()
                    .check_access(&principal, &subject)?;
                if self.backends().subscribe(uri, true)? {
                    session.subscribe(uri, &self.subscribers);
                }
            } else {
                session.unsubscribe(uri);
                // The upstream is told once no session follows the resource any more.
                if !self.subscribers.watched(uri) {
                    self.backends().subscribe(uri, false)?;
                }
            }
            return Ok(json!({}));
        }
        if req.method == "resources/subscribe" {
            if self.registry().read_resource(uri).is_none() {
                return Err(McpError::resource_not_found(uri).with("uri", uri));
            }
            // A resource that never changes will never be updated: nothing to record.
            if self.registry().resource_changes(uri) {
                session.subscribe(uri, &self.subscribers);
            }
        } else {
            session.unsubscribe(uri);
        }
        Ok(json!({}))
    }
}

/// The `uri` parameter, or `invalid_params` naming it.
fn uri_param(req: &Request) -> Result<&str, McpError> {
    req.params
        .get("uri")
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::invalid_params("uri"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ErrorKind;
    use crate::protocol::dispatch::testing::{Fixture, request};
    use crate::protocol::revisions::Session;

    #[test]
    fn a_resource_is_read_with_its_uri_and_mime_type() {
        let fx = Fixture::invoicing();
        let first = fx.server.registry().resources()[0].clone();
        let read = request("resources/read", json!({ "uri": first.uri }));
        let result = fx.server.own_resource(&read).expect("read");
        let content = &result["contents"][0];
        assert_eq!(content["uri"], json!(first.uri));
        assert_eq!(content["mimeType"], json!(first.mime_type));
        assert!(content["text"].is_string() || content["blob"].is_string());
    }

    #[test]
    fn an_unknown_or_missing_uri_is_refused_by_name() {
        let fx = Fixture::invoicing();
        let unknown = request("resources/read", json!({ "uri": "tollgate://nothing" }));
        let err = fx.server.own_resource(&unknown).expect_err("unknown");
        assert_eq!(err.kind(), ErrorKind::ResourceNotFound);
        assert_eq!(err.fields()["uri"], json!("tollgate://nothing"));
        let missing = request("resources/read", json!({ "uri": 1 }));
        let err = fx.server.own_resource(&missing).expect_err("not a string");
        assert_eq!(err.fields()["param"], json!("uri"));
        let subscribe = request(
            "resources/subscribe",
            json!({ "uri": "tollgate://nothing" }),
        );
        let err = fx
            .server
            .subscription(&subscribe, &fx.env(&Session::new(), Some(&fx.token)))
            .expect_err("unknown");
        assert_eq!(err.kind(), ErrorKind::ResourceNotFound);
    }

    #[test]
    fn subscribing_to_a_resource_that_never_changes_records_nothing() {
        let fx = Fixture::invoicing();
        let registry = fx.server.registry();
        let still = registry
            .resources()
            .into_iter()
            .find(|r| !registry.resource_changes(&r.uri))
            .expect("a resource that never changes");
        let session = Session::new();
        let subscribe = request("resources/subscribe", json!({ "uri": still.uri }));
        assert_eq!(
            fx.server
                .subscription(&subscribe, &fx.env(&session, Some(&fx.token)))
                .expect("ok"),
            json!({})
        );
        fx.server.subscribers.changed(&still.uri);
        assert!(session.take_updates().is_empty());
    }
}
