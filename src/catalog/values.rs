//! How a field's value reads inside a sentence: written as it is ([`plain`]: strings
//! bare, lists joined), or — a value the caller sent — quoted and cut to
//! [`QUOTE_MAX_CHARS`] characters ([`quoted`]). The hint templates and the phrases of a
//! validation's failing arguments both write values this way.

use serde_json::Value;

use crate::config::Locale;

/// How many characters of a quoted value are kept.
pub const QUOTE_MAX_CHARS: usize = 60;

/// A value written as it is: strings bare, lists joined, objects as their keys.
pub(crate) fn plain(value: &Value, locale: Locale) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) if items.is_empty() => none(locale).to_owned(),
        Value::Array(items) => items
            .iter()
            .map(|v| plain(v, locale))
            .collect::<Vec<_>>()
            .join(", "),
        Value::Object(map) if map.is_empty() => none(locale).to_owned(),
        Value::Object(map) => map.keys().cloned().collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// A value the caller sent, quoted and cut short: a string in double quotes, the rest as
/// JSON (also cut).
pub(crate) fn quoted(value: &Value) -> String {
    match value {
        Value::String(s) => format!("\"{}\"", truncate(s)),
        other => truncate(&other.to_string()),
    }
}

fn truncate(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(QUOTE_MAX_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().count() > QUOTE_MAX_CHARS {
        out.push('…');
    }
    out
}

fn none(locale: Locale) -> &'static str {
    match locale {
        Locale::En => "none",
        Locale::Es => "ninguno",
    }
}
