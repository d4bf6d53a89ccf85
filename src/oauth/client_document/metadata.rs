//! A fetched document read as client metadata (the fields of RFC 7591 §2 that tollgate
//! uses) and checked: it names its own URL as `client_id`, lists where the user may be
//! sent back, and describes a public client. A document is public, so it can hold no
//! shared secret: `client_secret` is refused and the only client authentication is
//! `none`. Unknown fields are ignored; a field that is `null` counts as absent.
//!
//! Every refusal names the field in words of its own, never text of the document.

use serde_json::{Map, Value};
use url::Url;

use super::{ClientDocument, DocumentError};

/// The longest `client_name`, in characters.
const MAX_NAME_CHARS: usize = 200;
/// The longest URI (`redirect_uris`, `client_uri`, `logo_uri`), in bytes.
const MAX_URI_BYTES: usize = 2048;
/// The most `redirect_uris`.
const MAX_REDIRECT_URIS: usize = 20;
/// The longest `scope`, in characters.
const MAX_SCOPE_CHARS: usize = 1024;
/// The grants a document may name.
const GRANT_TYPES: &[&str] = &["authorization_code", "refresh_token"];
/// The response types a document may name.
const RESPONSE_TYPES: &[&str] = &["code"];
/// Fields that would carry a shared secret.
const SECRET_FIELDS: &[&str] = &["client_secret", "client_secret_expires_at"];

/// `body` as the checked metadata of the client `client_id`.
pub(super) fn parse(body: &[u8], client_id: &str) -> Result<ClientDocument, DocumentError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|_| invalid("the document is not JSON"))?;
    let Value::Object(fields) = value else {
        return Err(invalid("the document is not a JSON object"));
    };
    match fields.get("client_id") {
        Some(Value::String(named)) if named == client_id => {}
        Some(Value::String(_)) => return Err(DocumentError::WrongClientId),
        _ => return Err(invalid("client_id is missing or not a string")),
    }
    if let Some(field) = SECRET_FIELDS.iter().find(|f| present(&fields, f)) {
        return Err(invalid(&format!(
            "{field} is not allowed: a public document cannot hold a secret"
        )));
    }
    let token_endpoint_auth_method =
        text(&fields, "token_endpoint_auth_method", 64)?.unwrap_or_else(|| "none".to_owned());
    if token_endpoint_auth_method != "none" {
        return Err(invalid("token_endpoint_auth_method must be \"none\""));
    }
    let grant_types = words(&fields, "grant_types", GRANT_TYPES, "authorization_code")?;
    if !grant_types.iter().any(|g| g == "authorization_code") {
        return Err(invalid("grant_types must include authorization_code"));
    }
    Ok(ClientDocument {
        client_id: client_id.to_owned(),
        client_name: text(&fields, "client_name", MAX_NAME_CHARS)?,
        client_uri: https_uri(&fields, "client_uri")?,
        logo_uri: https_uri(&fields, "logo_uri")?,
        redirect_uris: redirect_uris(&fields)?,
        grant_types,
        response_types: words(&fields, "response_types", RESPONSE_TYPES, "code")?,
        token_endpoint_auth_method,
        scope: text(&fields, "scope", MAX_SCOPE_CHARS)?,
    })
}

fn invalid(why: &str) -> DocumentError {
    DocumentError::Invalid(why.to_owned())
}

/// Whether `name` is in the document with a value other than `null`.
fn present(fields: &Map<String, Value>, name: &str) -> bool {
    fields.get(name).is_some_and(|v| !v.is_null())
}

/// An optional string of at most `max_chars` characters, without control characters.
fn text(
    fields: &Map<String, Value>,
    name: &str,
    max_chars: usize,
) -> Result<Option<String>, DocumentError> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().count() > max_chars => Err(invalid(&format!(
            "{name} is longer than {max_chars} characters"
        ))),
        Some(Value::String(s)) if s.chars().any(char::is_control) => Err(invalid(&format!(
            "{name} must not contain control characters"
        ))),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(invalid(&format!("{name} must be a string"))),
    }
}

/// An optional array of strings, at most `max` of them.
fn strings(
    fields: &Map<String, Value>,
    name: &str,
    max: usize,
) -> Result<Option<Vec<String>>, DocumentError> {
    let items = match fields.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(invalid(&format!("{name} must be an array of strings"))),
    };
    if items.len() > max {
        return Err(invalid(&format!("{name} has more than {max} entries")));
    }
    items
        .iter()
        .map(|item| match item {
            Value::String(s) => Ok(s.clone()),
            _ => Err(invalid(&format!("{name} must be an array of strings"))),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// An optional, non-empty list of words from `allowed` (`[default]` when absent), each
/// once.
fn words(
    fields: &Map<String, Value>,
    name: &str,
    allowed: &[&str],
    default: &str,
) -> Result<Vec<String>, DocumentError> {
    // A list longer than the words allowed repeats one; a few repeats are harmless.
    let Some(listed) = strings(fields, name, allowed.len() * 4)? else {
        return Ok(vec![default.to_owned()]);
    };
    if listed.is_empty() {
        return Err(invalid(&format!("{name} must not be empty")));
    }
    let mut kept: Vec<String> = Vec::new();
    for word in listed {
        if !allowed.contains(&word.as_str()) {
            return Err(invalid(&format!(
                "{name} may only hold {}",
                allowed.join(", ")
            )));
        }
        if !kept.contains(&word) {
            kept.push(word);
        }
    }
    Ok(kept)
}

/// The required `redirect_uris`: absolute URIs without a fragment, kept as written (an
/// authorization request's `redirect_uri` must equal one of them exactly).
fn redirect_uris(fields: &Map<String, Value>) -> Result<Vec<String>, DocumentError> {
    let Some(uris) = strings(fields, "redirect_uris", MAX_REDIRECT_URIS)? else {
        return Err(invalid("redirect_uris is missing"));
    };
    if uris.is_empty() {
        return Err(invalid("redirect_uris must not be empty"));
    }
    for uri in &uris {
        let parsed = checked_uri(uri, "redirect_uris")?;
        if parsed.fragment().is_some() {
            return Err(invalid("redirect_uris must not contain a fragment"));
        }
    }
    Ok(uris)
}

/// An optional https URL to show the user (`client_uri`, `logo_uri`).
fn https_uri(fields: &Map<String, Value>, name: &str) -> Result<Option<String>, DocumentError> {
    let Some(uri) = text(fields, name, MAX_URI_BYTES)? else {
        return Ok(None);
    };
    if checked_uri(&uri, name)?.scheme() != "https" {
        return Err(invalid(&format!("{name} must be an https URL")));
    }
    Ok(Some(uri))
}

/// `uri` parsed as an absolute URI of at most [`MAX_URI_BYTES`], written without blanks
/// or control characters (which a parser would silently drop).
fn checked_uri(uri: &str, name: &str) -> Result<Url, DocumentError> {
    if uri.len() > MAX_URI_BYTES {
        return Err(invalid(&format!(
            "{name} holds a URI longer than {MAX_URI_BYTES} bytes"
        )));
    }
    if uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(&format!("{name} holds a URI with blanks")));
    }
    Url::parse(uri).map_err(|_| invalid(&format!("{name} holds a URI that is not absolute")))
}
