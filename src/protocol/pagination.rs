//! Cursor pagination of the `*/list` results: pages of [`PAGE_SIZE`], behind a cursor
//! that is opaque to clients (the kind of list and an offset, base64url-encoded).

use serde_json::{Value, json};

use crate::catalog::McpError;
use crate::protocol::jsonrpc::Request;

/// Page size of `*/list` results.
const PAGE_SIZE: usize = 50;

/// Cuts one page out of `items`; the cursor is opaque to clients.
pub(crate) fn paginate(
    items: Vec<Value>,
    req: &Request,
    kind: &str,
) -> Result<(Vec<Value>, Option<String>), McpError> {
    let start = match req.params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(cursor)) => decode_cursor(cursor, kind)
            .filter(|&offset| offset <= items.len())
            .ok_or_else(|| McpError::invalid_params("cursor"))?,
        Some(_) => return Err(McpError::invalid_params("cursor")),
    };
    let end = (start + PAGE_SIZE).min(items.len());
    let next = (end < items.len()).then(|| encode_cursor(end, kind));
    Ok((items[start..end].to_vec(), next))
}

fn encode_cursor(offset: usize, kind: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{kind}:{offset}"))
}

fn decode_cursor(cursor: &str, kind: &str) -> Option<usize> {
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    text.strip_prefix(kind)?.strip_prefix(':')?.parse().ok()
}

pub(crate) fn with_cursor(mut result: Value, next: Option<String>) -> Value {
    if let Some(next) = next {
        result["nextCursor"] = json!(next);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let c = encode_cursor(50, "tools");
        assert_eq!(decode_cursor(&c, "tools"), Some(50));
        assert_eq!(decode_cursor(&c, "prompts"), None);
        assert_eq!(decode_cursor("!!!", "tools"), None);
    }
}
