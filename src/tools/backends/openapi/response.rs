//! The backend's answer mapped into a result or a catalog error, always of the tool class
//! (an `isError` result the model reads):
//!
//! | answer | result |
//! |---|---|
//! | 2xx, a JSON object | `structuredContent` (and its text) |
//! | 2xx, other JSON (array, scalar) | a text result of the JSON |
//! | 2xx, empty (204) | a text result `<status> <reason>` |
//! | 2xx, not JSON | a text result of the body (lossy UTF-8, at most `max_response_bytes`) |
//! | 2xx, declared JSON that does not parse | `adapter_error`, reason `invalid_json` |
//! | 3xx | `adapter_error`, reason `redirect not followed` |
//! | 400, 422 | `business_rule_violation` with the backend's message and id |
//! | 401, 403 | `adapter_error` (the backend refused tollgate's credential) |
//! | 404 | `not_found` |
//! | 405, 501 | `not_implemented` |
//! | 409 | `conflict` |
//! | 429 | `rate_limited` with `retry_after` from `Retry-After` |
//! | 502, 503, 504 | `adapter_error`, retryable |
//! | other 4xx and 5xx | `adapter_error` |
//!
//! Every error carries `details.backend` and `details.status`; `details.original_error`
//! (the backend's own error id) and `details.message` (its own message, cut to 300
//! characters) when the error body is JSON and one of the configured pointers finds them.
//! A body that is not JSON gives the status's reason phrase as the message.

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use serde_json::Value;

use super::spec::is_json;
use crate::catalog::{ErrorKind, McpError};
use crate::tools::ToolOutput;

/// The longest backend message carried in `details.message`.
const MAX_MESSAGE_CHARS: usize = 300;

/// A backend's answer, its body read (within the size cap).
#[derive(Debug)]
pub(super) struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The response headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Vec<u8>,
}

/// How answers of one backend are read.
pub(super) struct Mapper<'a> {
    /// The backend's name (`details.backend`).
    pub backend: &'a str,
    /// Pointers to its own error id.
    pub id_pointers: &'a [String],
    /// Pointers to its own error message.
    pub message_pointers: &'a [String],
}

impl Mapper<'_> {
    /// The result or error `answer` stands for; `now` (Unix seconds) turns an HTTP-date
    /// `Retry-After` into seconds.
    pub(super) fn map(&self, answer: &Answer, now: i64) -> Result<ToolOutput, McpError> {
        let status = answer.status;
        if status.is_success() {
            return self.success(answer);
        }
        if status.is_redirection() {
            return Err(self
                .error(ErrorKind::AdapterError, status)
                .detail("reason", "redirect not followed"));
        }
        let kind = match status.as_u16() {
            400 | 422 => ErrorKind::BackendRejected,
            401 | 403 => ErrorKind::BackendCredentialRefused,
            404 => ErrorKind::BackendNotFound,
            405 | 501 => ErrorKind::NotImplemented,
            409 => ErrorKind::BackendConflict,
            429 => ErrorKind::BackendRateLimited,
            502..=504 => ErrorKind::AdapterErrorRetryable,
            _ => ErrorKind::AdapterError,
        };
        let mut err = self.error(kind, status);
        let found = self.read_error_body(answer);
        if let Some(id) = found.id {
            err = err.detail("original_error", id);
        }
        err = err.detail("message", found.message);
        if kind == ErrorKind::BackendRateLimited
            && let Some(seconds) = retry_after(&answer.headers, now)
        {
            err = err.with("retry_after", seconds);
        }
        Err(err)
    }

    /// An error of `kind` with the backend and the status.
    fn error(&self, kind: ErrorKind, status: StatusCode) -> McpError {
        McpError::new(kind)
            .detail("backend", self.backend)
            .detail("status", status.as_u16())
    }

    fn success(&self, answer: &Answer) -> Result<ToolOutput, McpError> {
        if answer.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(ToolOutput::text(status_line(answer.status)));
        }
        let declared_json = content_type(&answer.headers).is_some_and(is_json);
        match serde_json::from_slice::<Value>(&answer.body) {
            Ok(value @ Value::Object(_)) => Ok(ToolOutput::structured(value)),
            Ok(value) => Ok(ToolOutput::text(value.to_string())),
            Err(_) if declared_json => Err(self
                .error(ErrorKind::AdapterError, answer.status)
                .detail("reason", "invalid_json")),
            Err(_) => Ok(ToolOutput::text(
                String::from_utf8_lossy(&answer.body).into_owned(),
            )),
        }
    }

    /// The backend's own id and message in an error body.
    fn read_error_body(&self, answer: &Answer) -> Found {
        let Ok(body) = serde_json::from_slice::<Value>(&answer.body) else {
            return Found {
                id: None,
                message: reason_phrase(answer.status),
            };
        };
        let id = first_text(&body, self.id_pointers);
        let message = first_text(&body, self.message_pointers)
            .map(|m| cut(m.trim()))
            .unwrap_or_else(|| reason_phrase(answer.status));
        Found { id, message }
    }
}

/// What an error body says of itself.
struct Found {
    id: Option<String>,
    message: String,
}

/// `output` with `scrub` applied to every string it holds, when `found` sees a secret in it.
pub(super) fn scrub_output(
    mut output: ToolOutput,
    scrub: &dyn Fn(&str) -> String,
    found: &dyn Fn(&str) -> bool,
) -> ToolOutput {
    let text = serde_json::to_string(&(&output.content, &output.structured)).unwrap_or_default();
    if !found(&text) {
        return output;
    }
    output
        .content
        .iter_mut()
        .for_each(|block| scrub_strings(block, scrub));
    if let Some(structured) = output.structured.as_mut() {
        scrub_strings(structured, scrub);
    }
    output
}

/// `err` with `scrub` applied to what the backend said of itself.
pub(super) fn scrub_error(err: McpError, scrub: &dyn Fn(&str) -> String) -> McpError {
    let said = |name: &str| {
        err.fields()
            .get("details")
            .and_then(|d| d.get(name))
            .and_then(Value::as_str)
            .map(scrub)
    };
    let (message, original) = (said("message"), said("original_error"));
    let err = match message {
        Some(message) => err.detail("message", message),
        None => err,
    };
    match original {
        Some(original) => err.detail("original_error", original),
        None => err,
    }
}

fn scrub_strings(value: &mut Value, scrub: &dyn Fn(&str) -> String) {
    match value {
        Value::String(text) => *text = scrub(text),
        Value::Array(items) => items.iter_mut().for_each(|v| scrub_strings(v, scrub)),
        Value::Object(object) => object.values_mut().for_each(|v| scrub_strings(v, scrub)),
        _ => {}
    }
}

fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok())
}

/// `204 No Content`.
fn status_line(status: StatusCode) -> String {
    format!(
        "{} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or_default()
    )
    .trim_end()
    .to_owned()
}

fn reason_phrase(status: StatusCode) -> String {
    status
        .canonical_reason()
        .map_or_else(|| format!("HTTP {}", status.as_u16()), str::to_owned)
}

/// The first pointer that finds a string or a number, as text.
pub(super) fn first_text(body: &Value, pointers: &[String]) -> Option<String> {
    pointers
        .iter()
        .find_map(|pointer| match body.pointer(pointer) {
            Some(Value::String(text)) if !text.trim().is_empty() => Some(text.clone()),
            Some(Value::Number(number)) => Some(number.to_string()),
            _ => None,
        })
}

fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// `Retry-After` in seconds: delta-seconds, or an HTTP date counted from `now` (a date
/// already past is 0). Absent or unreadable: `None`.
pub(super) fn retry_after(headers: &HeaderMap, now: i64) -> Option<u64> {
    let text = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(seconds);
    }
    let at = httpdate::parse_http_date(text).ok()?;
    let at = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    let now = u64::try_from(now).unwrap_or(0);
    Some(at.saturating_sub(now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;
    use serde_json::json;

    fn pointers(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn defaults() -> (Vec<String>, Vec<String>) {
        (
            pointers(crate::config::DEFAULT_ERROR_ID_POINTERS),
            pointers(crate::config::DEFAULT_ERROR_MESSAGE_POINTERS),
        )
    }

    fn answer(status: u16, body: &str, headers: &[(&'static str, &'static str)]) -> Answer {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, HeaderValue::from_static(value));
        }
        Answer {
            status: StatusCode::from_u16(status).expect("status"),
            headers: map,
            body: body.as_bytes().to_vec(),
        }
    }

    fn map(a: &Answer) -> Result<ToolOutput, McpError> {
        let (ids, messages) = defaults();
        Mapper {
            backend: "crm",
            id_pointers: &ids,
            message_pointers: &messages,
        }
        .map(a, 1_000)
    }

    #[test]
    fn the_backends_own_id_and_message_are_found_by_the_default_pointers() {
        let (ids, messages) = defaults();
        for (body, id, message) in [
            (
                json!({"error": {"code": "E_DUP", "message": "already there"}}),
                Some("E_DUP"),
                Some("already there"),
            ),
            (
                json!({"detail": [{"type": "missing", "msg": "Field required"}]}),
                Some("missing"),
                Some("Field required"),
            ),
            (
                json!({"detail": "Pet not found"}),
                None,
                Some("Pet not found"),
            ),
            (
                json!({"code": 4711, "message": "no"}),
                Some("4711"),
                Some("no"),
            ),
            (
                json!({"title": "Bad", "type": "about:blank"}),
                Some("about:blank"),
                Some("Bad"),
            ),
            (json!([1]), None, None),
        ] {
            assert_eq!(first_text(&body, &ids).as_deref(), id, "{body}");
            assert_eq!(first_text(&body, &messages).as_deref(), message, "{body}");
        }
    }

    #[test]
    fn retry_after_is_read_as_seconds_or_as_a_date() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers, 0), None);
        headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&headers, 0), Some(7));
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Thu, 01 Jan 1970 00:01:40 GMT"),
        );
        assert_eq!(retry_after(&headers, 40), Some(60));
        assert_eq!(retry_after(&headers, 400), Some(0));
        headers.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&headers, 0), None);
    }

    #[test]
    fn every_status_maps_to_its_catalog_entry() {
        let body = r#"{"error":{"code":"E1","message":"its own words"}}"#;
        for (status, kind) in [
            (400, ErrorKind::BackendRejected),
            (422, ErrorKind::BackendRejected),
            (401, ErrorKind::BackendCredentialRefused),
            (403, ErrorKind::BackendCredentialRefused),
            (404, ErrorKind::BackendNotFound),
            (405, ErrorKind::NotImplemented),
            (501, ErrorKind::NotImplemented),
            (409, ErrorKind::BackendConflict),
            (429, ErrorKind::BackendRateLimited),
            (502, ErrorKind::AdapterErrorRetryable),
            (503, ErrorKind::AdapterErrorRetryable),
            (504, ErrorKind::AdapterErrorRetryable),
            (500, ErrorKind::AdapterError),
            (418, ErrorKind::AdapterError),
        ] {
            let err = map(&answer(status, body, &[])).expect_err("error");
            assert_eq!(err.kind(), kind, "{status}");
            let details = &err.fields()["details"];
            assert_eq!(details["backend"], "crm");
            assert_eq!(details["status"], status);
            assert_eq!(details["original_error"], "E1");
            assert_eq!(details["message"], "its own words");
        }
    }

    #[test]
    fn a_rate_limit_carries_retry_after_only_when_the_backend_sent_one() {
        let err = map(&answer(429, "{}", &[("retry-after", "12")])).expect_err("429");
        assert_eq!(err.fields()["retry_after"], 12);
        let err = map(&answer(429, "{}", &[])).expect_err("429");
        assert!(err.fields().get("retry_after").is_none());
    }

    #[test]
    fn a_non_json_error_body_gives_the_status_text() {
        let err = map(&answer(500, "<html>boom</html>", &[])).expect_err("500");
        assert_eq!(err.fields()["details"]["message"], "Internal Server Error");
        assert!(err.fields()["details"].get("original_error").is_none());
        let err = map(&answer(302, "", &[("location", "http://elsewhere/")])).expect_err("302");
        assert_eq!(err.kind(), ErrorKind::AdapterError);
        assert_eq!(err.fields()["details"]["reason"], "redirect not followed");
    }

    #[test]
    fn successes_are_structured_text_or_a_status_line() {
        let json = [("content-type", "application/json")];
        let out = map(&answer(200, r#"{"id":1}"#, &json)).expect("ok");
        assert_eq!(out.structured, Some(json!({"id": 1})));
        let out = map(&answer(200, "[1,2]", &json)).expect("ok");
        assert_eq!(
            (out.structured, out.content[0]["text"].clone()),
            (None, json!("[1,2]"))
        );
        let out = map(&answer(204, "", &[])).expect("ok");
        assert_eq!(out.content[0]["text"], "204 No Content");
        let out = map(&answer(
            200,
            "plain words",
            &[("content-type", "text/plain")],
        ))
        .expect("ok");
        assert_eq!(out.content[0]["text"], "plain words");
        let err = map(&answer(200, "{oops", &json)).expect_err("invalid");
        assert_eq!(err.fields()["details"]["reason"], "invalid_json");
    }

    #[test]
    fn a_long_message_is_cut() {
        let long = "x".repeat(1000);
        let body = json!({"message": long}).to_string();
        let err = map(&answer(422, &body, &[])).expect_err("422");
        let message = err.fields()["details"]["message"]
            .as_str()
            .expect("text")
            .to_owned();
        assert_eq!(message.chars().count(), MAX_MESSAGE_CHARS + 1);
    }
}
