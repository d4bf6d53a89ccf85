//! The hint templates and their renderer.
//!
//! A template is one sentence with named fields of the occurrence:
//!
//! - `{name}` is a top-level field (`{param}`, `{retry_after}`), `{details.name}` one
//!   under `details`. Strings are written as they are, numbers and booleans as JSON, lists
//!   joined with ", " (an empty list reads "none"), objects as their keys.
//! - `{name:q}` quotes a value the caller sent: a string in double quotes, cut to
//!   60 characters (`values::QUOTE_MAX_CHARS`), control characters replaced by spaces.
//! - `{name:seconds}` writes a count of seconds with its unit ("1 second", "30 seconds").
//! - `{name:problems}` lists `details.errors` (the failing arguments of a validation), at
//!   most [`PROBLEMS_IN_TEXT`](super::problems::PROBLEMS_IN_TEXT) of them, then "and N
//!   more" (counting `details.error_count` when more failed than the list holds).
//! - `[ … ]` is an optional segment: it is dropped when a field it names is absent (or
//!   null), so one template reads well with or without an optional field.
//!
//! A field outside an optional segment is required. `render` reports the required fields
//! an occurrence lacks; the catalog's tests and [`super::McpError::unfilled_placeholders`]
//! use that to make sure every error carries what its sentence names.

use serde_json::{Map, Value};

use crate::config::Locale;

use super::problems;
use super::values::{plain, quoted};

/// A rendered template: the sentence and the required fields that were absent.
pub(crate) struct Rendered {
    pub text: String,
    pub missing: Vec<String>,
}

/// Renders `template` with `fields` in `locale`.
pub(crate) fn render(template: &str, fields: &Map<String, Value>, locale: Locale) -> Rendered {
    let mut out = Rendered {
        text: String::with_capacity(template.len() + 32),
        missing: Vec::new(),
    };
    let mut rest = template;
    while let Some(at) = rest.find(['[', '{']) {
        out.text.push_str(&rest[..at]);
        rest = &rest[at..];
        if rest.starts_with('[') {
            let end = rest.find(']').unwrap_or(rest.len());
            let inner = render_plain(&rest[1..end], fields, locale);
            if inner.missing.is_empty() {
                out.text.push_str(&inner.text);
            }
            rest = rest.get(end + 1..).unwrap_or("");
        } else {
            let end = rest.find('}').unwrap_or(rest.len());
            placeholder(&rest[1..end], fields, locale, &mut out);
            rest = rest.get(end + 1..).unwrap_or("");
        }
    }
    out.text.push_str(rest);
    out
}

/// Renders a segment without optional parts (the inside of `[ … ]`).
fn render_plain(segment: &str, fields: &Map<String, Value>, locale: Locale) -> Rendered {
    let mut out = Rendered {
        text: String::new(),
        missing: Vec::new(),
    };
    let mut rest = segment;
    while let Some(at) = rest.find('{') {
        out.text.push_str(&rest[..at]);
        let end = rest[at..].find('}').map_or(rest.len(), |e| at + e);
        placeholder(&rest[at + 1..end], fields, locale, &mut out);
        rest = rest.get(end + 1..).unwrap_or("");
    }
    out.text.push_str(rest);
    out
}

/// Writes one `{path[:format]}` into `out`, or records its path as missing.
fn placeholder(spec: &str, fields: &Map<String, Value>, locale: Locale, out: &mut Rendered) {
    let (path, format) = spec.split_once(':').unwrap_or((spec, ""));
    let counted = |path: &str| {
        let count_path = match path.rsplit_once('.') {
            Some((parent, _)) => format!("{parent}.error_count"),
            None => "error_count".to_owned(),
        };
        lookup(fields, &count_path).and_then(Value::as_u64)
    };
    let formatted = lookup(fields, path).map(|value| match format {
        "problems" => problems::list_in_text(value.as_array()?, counted(path), locale),
        _ => format_value(value, format, locale),
    });
    match formatted {
        Some(Some(text)) => out.text.push_str(&text),
        _ => {
            out.missing.push(path.to_owned());
            // A debug build shows the gap so that a test asserting the text catches it; a
            // release build never shows template syntax to a model.
            if cfg!(debug_assertions) {
                out.text.push_str(&format!("{{{spec}}}"));
            } else {
                out.text.push('?');
            }
        }
    }
}

/// The value at a dotted `path`, if it is present and not null.
fn lookup<'a>(fields: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    let mut parts = path.split('.');
    let mut value = fields.get(parts.next()?)?;
    for part in parts {
        value = value.get(part)?;
    }
    (!value.is_null()).then_some(value)
}

/// A value as text in `format`; `None` when it cannot fill the placeholder.
fn format_value(value: &Value, format: &str, locale: Locale) -> Option<String> {
    match format {
        "q" => Some(quoted(value)),
        "seconds" => value.as_u64().map(|n| seconds(n, locale)),
        _ => Some(plain(value, locale)),
    }
}

/// A count of seconds with its unit, singular for one.
fn seconds(n: u64, locale: Locale) -> String {
    match (locale, n) {
        (Locale::En, 1) => "1 second".to_owned(),
        (Locale::En, n) => format!("{n} seconds"),
        (Locale::Es, 1) => "1 segundo".to_owned(),
        (Locale::Es, n) => format!("{n} segundos"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::values::QUOTE_MAX_CHARS;
    use serde_json::json;

    fn fields(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn fills_top_level_and_detail_fields_and_joins_lists() {
        let f = fields(json!({"bucket": "tool", "details": {"allowed": [0, 4, 21]}}));
        let r = render("{bucket}: {details.allowed}.", &f, Locale::En);
        assert_eq!(r.text, "tool: 0, 4, 21.");
        assert!(r.missing.is_empty());
    }

    #[test]
    fn drops_an_optional_segment_whose_field_is_absent_or_null() {
        let f = fields(json!({"a": 1, "b": null}));
        let r = render("x[ a={a}][ b={b}].", &f, Locale::En);
        assert_eq!(r.text, "x a=1.");
        assert!(r.missing.is_empty());
    }

    #[test]
    fn reports_a_required_field_that_is_absent() {
        let r = render("wait {retry_after} s", &Map::new(), Locale::En);
        assert_eq!(r.missing, vec!["retry_after".to_owned()]);
    }

    #[test]
    fn quotes_and_cuts_values_the_caller_sent() {
        let long = "é".repeat(70);
        let f = fields(json!({"v": long, "n": 7, "c": "a\nb"}));
        let r = render("{v:q} {n:q} {c:q}", &f, Locale::En);
        assert_eq!(
            r.text,
            format!("\"{}…\" 7 \"a b\"", "é".repeat(QUOTE_MAX_CHARS))
        );
    }

    #[test]
    fn an_empty_list_reads_none_in_the_locale() {
        let f = fields(json!({"s": []}));
        assert_eq!(render("{s}", &f, Locale::Es).text, "ninguno");
    }
}
