//! JSON-RPC 2.0 framing: turning raw bytes into typed messages, and responses into values.
//!
//! Parsing never panics and never recurses without bound (serde_json stops at 128 levels),
//! so a hostile body yields a catalog error, not a crash. This module knows nothing of MCP.

use serde_json::{Map, Value};

use crate::catalog::McpError;

/// A request id: JSON-RPC allows strings and numbers; MCP forbids `null`.
pub type RequestId = Value;

/// A client request (has an id) or notification (has none).
#[derive(Debug, Clone)]
pub struct Request {
    /// `Some` for a request, `None` for a notification.
    pub id: Option<RequestId>,
    /// The method name.
    pub method: String,
    /// The `params` object (an empty object when absent).
    pub params: Map<String, Value>,
}

impl Request {
    /// True for a notification, which never gets a response.
    pub fn is_notification(&self) -> bool {
        self.id.is_none()
    }
}

/// One parsed incoming message.
#[derive(Debug)]
pub enum Incoming {
    /// A request or notification.
    Request(Request),
    /// A client's response to a request the server sent (sampling, elicitation): its id
    /// and the whole message, `result` or `error`.
    Response(RequestId, Value),
    /// A message that is JSON but not a valid JSON-RPC message; answered with this error
    /// (the id is kept when one could be read).
    Invalid(Option<RequestId>, McpError),
}

/// A whole body or line: one message or a batch.
#[derive(Debug)]
pub enum Parsed {
    /// A single message.
    Single(Incoming),
    /// A JSON array of messages (only some revisions accept batches).
    Batch(Vec<Incoming>),
    /// Not JSON at all: answered with `-32700` and a null id.
    NotJson,
}

/// Parses one body or stdio line.
pub fn parse(bytes: &[u8]) -> Parsed {
    // serde_json rejects invalid UTF-8 and stops at 128 levels of nesting.
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Array(items)) if !items.is_empty() => {
            Parsed::Batch(items.into_iter().map(classify).collect())
        }
        Ok(Value::Array(_)) => Parsed::Single(Incoming::Invalid(
            None,
            McpError::invalid_request("empty_batch"),
        )),
        Ok(value) => Parsed::Single(classify(value)),
        Err(_) => Parsed::NotJson,
    }
}

/// Classifies one JSON value as a JSON-RPC message.
pub fn classify(value: Value) -> Incoming {
    let Value::Object(mut obj) = value else {
        return Incoming::Invalid(None, McpError::invalid_request("not_an_object"));
    };
    let id = obj.remove("id");
    let id_ok = matches!(&id, None | Some(Value::String(_)) | Some(Value::Number(_)));
    let echo_id = if id_ok { id.clone() } else { None };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Incoming::Invalid(echo_id, McpError::invalid_request("jsonrpc_version"));
    }
    if !id_ok {
        return Incoming::Invalid(None, McpError::invalid_request("id_type"));
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => return Incoming::Invalid(echo_id, McpError::invalid_request("method_type")),
        None if id.is_some() && (obj.contains_key("result") || obj.contains_key("error")) => {
            return Incoming::Response(id.unwrap_or(Value::Null), Value::Object(obj));
        }
        None => return Incoming::Invalid(echo_id, McpError::invalid_request("no_method")),
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => return Incoming::Invalid(echo_id, McpError::invalid_params("params")),
    };
    Incoming::Request(Request { id, method, params })
}

/// A success response.
pub fn success(id: RequestId, result: Value) -> Value {
    envelope([("id", id), ("result", result)])
}

/// An error response; `error` is a rendered JSON-RPC error object.
pub fn failure(id: Option<RequestId>, error: Value) -> Value {
    envelope([("id", id.unwrap_or(Value::Null)), ("error", error)])
}

/// A request sent by the server to the client.
pub fn request(id: RequestId, method: &str, params: Value) -> Value {
    envelope([("id", id), ("method", method.into()), ("params", params)])
}

/// A notification sent by the server.
pub fn notification(method: &str, params: Value) -> Value {
    envelope([("method", method.into()), ("params", params)])
}

/// `{"jsonrpc": "2.0", ...fields}`, moving the fields in. (`json!` would copy every value
/// it is given, a whole tool result included, through `serde_json::to_value`.)
fn envelope<const N: usize>(fields: [(&str, Value); N]) -> Value {
    let mut map = Map::with_capacity(N + 1);
    map.insert("jsonrpc".to_owned(), Value::from("2.0"));
    for (key, value) in fields {
        map.insert(key.to_owned(), value);
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ErrorKind;
    use serde_json::json;

    fn invalid_kind(parsed: Parsed) -> ErrorKind {
        match parsed {
            Parsed::Single(Incoming::Invalid(_, e)) => e.kind(),
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    #[test]
    fn request_and_notification_are_told_apart() {
        let Parsed::Single(Incoming::Request(r)) =
            parse(br#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#)
        else {
            panic!("not a request");
        };
        assert_eq!(r.id, Some(json!(3)));
        assert!(r.params.is_empty());
        let Parsed::Single(Incoming::Request(n)) =
            parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        else {
            panic!("not a notification");
        };
        assert!(n.is_notification());
    }

    #[test]
    fn malformed_shapes_get_invalid_request() {
        assert_eq!(invalid_kind(parse(b"42")), ErrorKind::InvalidRequest);
        assert_eq!(invalid_kind(parse(b"[]")), ErrorKind::InvalidRequest);
        assert_eq!(
            invalid_kind(parse(br#"{"id":1,"method":"ping"}"#)),
            ErrorKind::InvalidRequest
        );
        assert_eq!(
            invalid_kind(parse(br#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#)),
            ErrorKind::InvalidRequest
        );
        assert_eq!(
            invalid_kind(parse(
                br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#
            )),
            ErrorKind::InvalidParams
        );
    }

    #[test]
    fn deep_nesting_and_bad_utf8_are_not_json() {
        let deep = "[".repeat(100_000);
        assert!(matches!(parse(deep.as_bytes()), Parsed::NotJson));
        assert!(matches!(parse(b"{\"a\":\"\xff\"}"), Parsed::NotJson));
    }
}
