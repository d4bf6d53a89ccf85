//! Building the HTTP request of one call from its arguments: the path template filled with
//! percent-encoded values, the query string (arrays and objects exploded into repeated pairs
//! unless the parameter says `explode: false`), header parameters, the JSON body, the
//! backend credential and the caller's idempotency key.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use serde_json::{Map, Value};

use super::spec::{BODY_ARGUMENT, Body, Endpoint, Location, Param};
use crate::catalog::McpError;
use crate::catalog::problems::{Expect, Problem};

/// What a path segment keeps unescaped (RFC 3986 unreserved characters).
const PATH_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A secret text (a credential, or the secret part of one) whose `Debug` prints nothing.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The backend credential: one header, marked sensitive so it is never printed, and the
/// secret texts it is made of, so a backend that repeats them is not repeated.
#[derive(Clone)]
pub(super) struct Credential {
    /// The header it is sent in.
    pub name: HeaderName,
    /// Its value.
    pub value: HeaderValue,
    /// The texts that must never leave towards a caller (the value, the token, the password).
    pub secrets: Vec<Secret>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credential({}: <redacted>)", self.name)
    }
}

impl Credential {
    /// `name: value`, the value marked sensitive, with the secret parts it is made of;
    /// `None` when either is not a valid header.
    pub(super) fn new(name: &str, value: &str, parts: &[&str]) -> Option<Credential> {
        let header = HeaderName::from_bytes(name.as_bytes()).ok()?;
        let mut sent = HeaderValue::from_str(value).ok()?;
        sent.set_sensitive(true);
        let mut secrets: Vec<Secret> = std::iter::once(value)
            .chain(parts.iter().copied())
            .filter(|s| s.len() >= 4)
            .map(|s| Secret(s.to_owned()))
            .collect();
        // The longest first, so a part inside a longer secret never leaves a remainder.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.0.len()));
        Some(Credential {
            name: header,
            value: sent,
            secrets,
        })
    }

    /// `text` with every secret replaced by `<redacted>`.
    pub(super) fn scrub(&self, text: &str) -> String {
        self.secrets
            .iter()
            .fold(text.to_owned(), |t, s| t.replace(&s.0, "<redacted>"))
    }

    /// Whether `text` holds one of the secrets.
    pub(super) fn appears_in(&self, text: &str) -> bool {
        self.secrets.iter().any(|s| text.contains(&s.0))
    }
}

/// The parts of one request, before it is sent.
#[derive(Debug)]
pub(super) struct Outgoing {
    /// The method.
    pub method: Method,
    /// The full URL, query included.
    pub url: Url,
    /// Every header to send.
    pub headers: HeaderMap,
    /// The JSON body, when the operation takes one and the arguments give it.
    pub body: Option<Vec<u8>>,
}

/// The request of `endpoint` called with `args` on `base_url`.
pub(super) fn build(
    base_url: &str,
    endpoint: &Endpoint,
    args: &Map<String, Value>,
    credential: Option<&Credential>,
    idempotency_key: Option<&str>,
) -> Result<Outgoing, McpError> {
    let mut path = endpoint.path.clone();
    let mut headers = HeaderMap::new();
    let mut pairs: Vec<(String, String)> = Vec::new();
    for param in &endpoint.params {
        let Some(value) = args.get(&param.name).filter(|v| !v.is_null()) else {
            continue;
        };
        match param.location {
            Location::Path => {
                let text = scalar_text(value);
                if is_dot_segment(&text) {
                    return Err(dot_segment(&param.name, value));
                }
                let text = utf8_percent_encode(&text, PATH_VALUE).to_string();
                path = path.replace(&format!("{{{}}}", param.name), &text);
            }
            Location::Query => query_pairs(param, value, &mut pairs),
            Location::Header => {
                let text = scalar_text(value);
                let name = HeaderName::from_bytes(param.name.as_bytes());
                let value_ok = HeaderValue::from_str(&text);
                match (name, value_ok) {
                    (Ok(name), Ok(v)) => {
                        headers.insert(name, v);
                    }
                    _ => return Err(unsendable(&param.name, value)),
                }
            }
        }
    }
    let mut url = Url::parse(&format!("{base_url}{path}"))
        .map_err(|_| unsendable(first_path_param(endpoint), &Value::Null))?;
    if !follows_template(base_url, &endpoint.path, &url) {
        return Err(dot_segment(first_path_param(endpoint), &Value::Null));
    }
    if !pairs.is_empty() {
        url.query_pairs_mut().extend_pairs(pairs);
    }
    let body = body_of(&endpoint.body, args)?;
    headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    if body.is_some() {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if let Some(key) = idempotency_key
        .filter(|_| endpoint.method != Method::GET && endpoint.method != Method::HEAD)
    {
        // The key passed the caller-side checks (printable, bounded), so it is a header value.
        if let Ok(value) = HeaderValue::from_str(key) {
            headers.insert(HeaderName::from_static("idempotency-key"), value);
        }
    }
    if let Some(credential) = credential {
        headers.insert(credential.name.clone(), credential.value.clone());
    }
    Ok(Outgoing {
        method: endpoint.method.clone(),
        url,
        headers,
        body,
    })
}

/// Adds the trace context the call carries (`traceparent`, `tracestate`, `baggage`) to its
/// headers; the caller's own headers of the same names are replaced.
pub(super) fn add_trace(headers: &mut HeaderMap, trace: &crate::telemetry::TraceFields) {
    for (name, value) in trace.iter() {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.insert(name, value);
        }
    }
}

fn first_path_param(endpoint: &Endpoint) -> &str {
    endpoint
        .params
        .iter()
        .find(|p| p.location == Location::Path)
        .map_or(BODY_ARGUMENT, |p| p.name.as_str())
}

/// Whether a path value would be read as a dot segment (`.` or `..`) and so move the
/// request to another path. Percent-encoding does not help: URL parsers resolve `%2e` and
/// `%2E` as dots too (WHATWG URL, RFC 3986 §6.2.2.2), so such a value is refused.
fn is_dot_segment(text: &str) -> bool {
    text == "." || text == ".."
}

/// A path value refused because it would change which path is requested.
fn dot_segment(param: &str, value: &Value) -> McpError {
    McpError::invalid_arguments(&[
        Problem::new(param, "reserved", Expect::Named("path_segment")).value(value),
    ])
}

/// Whether `url` is still the operation's path below the base URL: the same origin, the
/// same number of segments, and every segment that holds no parameter unchanged. The
/// template is filled twice with two different plain values; the segments that differ
/// between the two are the parameters' own, the rest must be found as they are in `url`.
/// Whatever a value did (dot segments made of several parameters side by side, a parser's
/// normalisation), a request that left the template is never sent.
fn follows_template(base_url: &str, template: &str, url: &Url) -> bool {
    let filled = |filler: &str| {
        let mut path = String::with_capacity(template.len());
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}') else {
                break;
            };
            path.push_str(&rest[..open]);
            path.push_str(filler);
            rest = &rest[open + close + 1..];
        }
        path.push_str(rest);
        Url::parse(&format!("{base_url}{path}")).ok()
    };
    let (Some(one), Some(two)) = (filled("a"), filled("b")) else {
        return false;
    };
    if one.origin() != url.origin() {
        return false;
    }
    let segments = |u: &Url| -> Vec<String> {
        u.path_segments()
            .map(|s| s.map(str::to_owned).collect())
            .unwrap_or_default()
    };
    let (one, two, sent) = (segments(&one), segments(&two), segments(url));
    one.len() == sent.len()
        && one
            .iter()
            .zip(&two)
            .zip(&sent)
            .all(|((a, b), s)| a != b || a == s)
}

/// An argument that cannot be put where its parameter goes (a line break in a header).
fn unsendable(param: &str, value: &Value) -> McpError {
    McpError::invalid_format(
        param,
        "pattern",
        Expect::Pattern("[^\\r\\n]*".into()),
        value,
    )
}

/// A value as the text of a path segment, a header or one query value.
fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        Value::Array(items) => items.iter().map(scalar_text).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// The query pairs of one parameter (form style: `?a=1&a=2` exploded, `?a=1,2` not).
fn query_pairs(param: &Param, value: &Value, pairs: &mut Vec<(String, String)>) {
    match value {
        Value::Array(items) if param.explode => {
            pairs.extend(
                items
                    .iter()
                    .map(|item| (param.name.clone(), scalar_text(item))),
            );
        }
        Value::Object(object) if param.explode => {
            pairs.extend(object.iter().map(|(k, v)| (k.clone(), scalar_text(v))));
        }
        Value::Object(object) => {
            let joined: Vec<String> = object
                .iter()
                .flat_map(|(k, v)| [k.clone(), scalar_text(v)])
                .collect();
            pairs.push((param.name.clone(), joined.join(",")));
        }
        other => pairs.push((param.name.clone(), scalar_text(other))),
    }
}

/// The JSON body the arguments give, if any.
fn body_of(body: &Body, args: &Map<String, Value>) -> Result<Option<Vec<u8>>, McpError> {
    let value = match body {
        Body::None => return Ok(None),
        Body::Wrapped => match args.get(BODY_ARGUMENT) {
            Some(value) => value.clone(),
            None => return Ok(None),
        },
        Body::Merged { names, required } => {
            let given: Map<String, Value> = names
                .iter()
                .filter_map(|name| args.get(name).map(|v| (name.clone(), v.clone())))
                .collect();
            if given.is_empty() && !required {
                return Ok(None);
            }
            Value::Object(given)
        }
    };
    serde_json::to_vec(&value)
        .map(Some)
        .map_err(|_| unsendable(BODY_ARGUMENT, &Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn endpoint(method: Method, path: &str, params: Vec<Param>, body: Body) -> Endpoint {
        Endpoint {
            method,
            path: path.into(),
            params,
            body,
        }
    }

    fn param(name: &str, location: Location, explode: bool) -> Param {
        Param {
            name: name.into(),
            location,
            explode,
        }
    }

    fn args(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => panic!("object"),
        }
    }

    #[test]
    fn path_values_are_percent_encoded_and_arrays_exploded() {
        let ep = endpoint(
            Method::GET,
            "/pets/{id}/tags",
            vec![
                param("id", Location::Path, false),
                param("status", Location::Query, true),
                param("fields", Location::Query, false),
                param("X-Trace", Location::Header, false),
            ],
            Body::None,
        );
        let out = build(
            "http://127.0.0.1:9/api",
            &ep,
            &args(json!({"id": "a b/c", "status": ["sold", "pending"], "fields": ["x", "y"], "X-Trace": 7})),
            None,
            Some("key-1"),
        )
        .expect("built");
        assert_eq!(
            out.url.as_str(),
            "http://127.0.0.1:9/api/pets/a%20b%2Fc/tags?status=sold&status=pending&fields=x%2Cy"
        );
        assert_eq!(out.headers["x-trace"], "7");
        assert!(
            out.headers.get("idempotency-key").is_none(),
            "never on a GET"
        );
        assert!(out.body.is_none());
    }

    #[test]
    fn a_write_sends_its_json_body_the_key_and_the_credential() {
        let ep = endpoint(
            Method::POST,
            "/pets",
            vec![],
            Body::Merged {
                names: vec!["name".into(), "tag".into()],
                required: true,
            },
        );
        let credential = Credential::new("X-Api-Key", "s3cret", &[]).expect("valid");
        assert_eq!(credential.scrub("key s3cret!"), "key <redacted>!");
        let out = build(
            "http://h",
            &ep,
            &args(json!({"name": "Rex"})),
            Some(&credential),
            Some("key-1"),
        )
        .expect("built");
        assert_eq!(out.body.as_deref(), Some(br#"{"name":"Rex"}"#.as_slice()));
        assert_eq!(out.headers["idempotency-key"], "key-1");
        assert_eq!(out.headers["content-type"], "application/json");
        assert!(out.headers["x-api-key"].is_sensitive());
        assert!(!format!("{credential:?}").contains("s3cret"));
        let optional = endpoint(
            Method::PATCH,
            "/pets",
            vec![],
            Body::Merged {
                names: vec!["tag".into()],
                required: false,
            },
        );
        let out = build("http://h", &optional, &Map::new(), None, None).expect("built");
        assert!(out.body.is_none() && out.headers.get("content-type").is_none());
        let wrapped = endpoint(Method::PUT, "/tags", vec![], Body::Wrapped);
        let out = build(
            "http://h",
            &wrapped,
            &args(json!({"body": [1, 2]})),
            None,
            None,
        )
        .expect("built");
        assert_eq!(out.body.as_deref(), Some(b"[1,2]".as_slice()));
    }

    #[test]
    fn a_dot_segment_is_refused_and_never_leaves_the_template() {
        let ep = endpoint(
            Method::DELETE,
            "/files/{a}/{b}/{c}",
            vec![
                param("a", Location::Path, false),
                param("b", Location::Path, false),
                param("c", Location::Path, false),
            ],
            Body::None,
        );
        for (args_given, param_at_fault) in [
            (json!({"a": "..", "b": "..", "c": "admin"}), "a"),
            (json!({"a": "x", "b": ".", "c": "admin"}), "b"),
            (json!({"a": "x", "b": "y", "c": ".."}), "c"),
        ] {
            let err = build("http://h/api", &ep, &args(args_given), None, None)
                .expect_err("a dot segment is refused");
            assert_eq!(err.kind(), crate::catalog::ErrorKind::ValidationError);
            assert_eq!(err.fields()["param"], param_at_fault);
        }
        // Dots that are not a whole segment, and encoded dots, stay inside their segment.
        let out = build(
            "http://h/api",
            &ep,
            &args(json!({"a": "...", "b": "%2e%2e", "c": ".hidden"})),
            None,
            None,
        )
        .expect("built");
        assert_eq!(out.url.path(), "/api/files/.../%252e%252e/.hidden");
    }

    #[test]
    fn dots_beside_another_parameter_stay_in_their_segment() {
        let ep = endpoint(
            Method::GET,
            "/users/{first}{second}/avatar",
            vec![
                param("first", Location::Path, false),
                param("second", Location::Path, false),
            ],
            Body::None,
        );
        let err = build(
            "http://h/api",
            &ep,
            &args(json!({"first": "a", "second": "."})),
            None,
            None,
        )
        .expect_err("a lone dot is refused wherever it goes");
        assert_eq!(err.fields()["param"], "second");
        let out = build(
            "http://h/api",
            &ep,
            &args(json!({"first": "a", "second": ".."})),
            None,
            None,
        );
        assert!(out.is_err(), "two dots are refused too");
        let out = build(
            "http://h/api",
            &ep,
            &args(json!({"first": "a.", "second": "."})),
            None,
            None,
        );
        assert!(out.is_err());
        let out = build(
            "http://h/api",
            &ep,
            &args(json!({"first": ".", "second": "b"})),
            None,
            None,
        );
        assert_eq!(out.expect_err("refused").fields()["param"], "first");
        let out = build(
            "http://h/api",
            &ep,
            &args(json!({"first": "a.", "second": ".b"})),
            None,
            None,
        )
        .expect("built");
        assert_eq!(out.url.path(), "/api/users/a..b/avatar");
    }

    #[test]
    fn the_template_check_sees_a_changed_segment_count_or_literal() {
        let url = |s: &str| Url::parse(s).expect("url");
        let template = "/users/{user}/avatar";
        assert!(follows_template(
            "http://h/api",
            template,
            &url("http://h/api/users/x/avatar")
        ));
        assert!(!follows_template(
            "http://h/api",
            template,
            &url("http://h/api/avatar")
        ));
        assert!(!follows_template(
            "http://h/api",
            template,
            &url("http://h/api/users/x/banner")
        ));
        assert!(!follows_template(
            "http://h/api",
            template,
            &url("http://other/api/users/x/avatar")
        ));
    }

    #[test]
    fn a_header_value_with_a_line_break_is_refused_as_an_argument() {
        let ep = endpoint(
            Method::GET,
            "/x",
            vec![param("X-Note", Location::Header, false)],
            Body::None,
        );
        let err = build(
            "http://h",
            &ep,
            &args(json!({"X-Note": "a\r\nb"})),
            None,
            None,
        )
        .expect_err("refused");
        assert_eq!(err.fields()["param"], "X-Note");
    }
}
