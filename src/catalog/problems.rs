//! The failing arguments of a validation error: `details.errors`, one [`Problem`] each.
//!
//! Each item is `{"param", "reason", "expected"}` plus the machine-readable form of what
//! would be accepted (`allowed`, `pattern`, `format`, `minimum`, `maximum`, …) and, for a
//! scalar, the value sent (`value`). `expected` is the English phrase; the sentence of the
//! error is rendered in the company's locale from the machine-readable keys, so both read
//! the same expectation.

use serde_json::{Map, Value, json};

use crate::config::Locale;

use super::values::{QUOTE_MAX_CHARS, plain, quoted};

/// How many failing arguments `details.errors` carries at most.
pub const PROBLEMS_IN_DETAILS: usize = 20;

/// How many failing arguments a validation sentence lists before "and N more".
pub const PROBLEMS_IN_TEXT: usize = 5;

/// What an argument must be, in a form both locales can phrase.
#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    /// A JSON type (`"integer"`, `"string"`, …), or several.
    Type(Value),
    /// An integer number of cents.
    Cents,
    /// One of these values.
    OneOf(Vec<Value>),
    /// A string of this JSON Schema format (`date`, `email`, `date-time`, …).
    Format(String),
    /// A string matching this regular expression.
    Pattern(String),
    /// A number within these bounds (either may be absent).
    Range(Option<Value>, Option<Value>),
    /// A string of this many characters.
    Length(Option<u64>, Option<u64>),
    /// A list of this many items.
    Items(Option<u64>, Option<u64>),
    /// Left out: the tool's arguments are these.
    Arguments(Vec<String>),
    /// A named expectation of the invoicing tools (see [`NAMED`]).
    Named(&'static str),
}

/// The named expectations, with their phrases (English, Spanish).
pub const NAMED: &[(&str, &str, &str)] = &[
    (
        "tax_id",
        "a Spanish NIF (8 digits and a letter), NIE (X, Y or Z, 7 digits and a letter) or CIF (a letter, 7 digits and a control character) whose control character matches its digits",
        "un NIF español (8 dígitos y una letra), NIE (X, Y o Z, 7 dígitos y una letra) o CIF (una letra, 7 dígitos y un carácter de control) cuyo carácter de control corresponda a sus dígitos",
    ),
    (
        "client_id",
        "a client id as returned by search_clients (cli_…)",
        "un identificador de cliente como los que devuelve search_clients (cli_…)",
    ),
    (
        "invoice_id",
        "an invoice id as returned by search_invoices (inv_…)",
        "un identificador de factura como los que devuelve search_invoices (inv_…)",
    ),
    (
        "id",
        "an id as returned by the search tools",
        "un identificador como los que devuelven las herramientas de búsqueda",
    ),
    (
        "email",
        "an e-mail address such as name@example.com",
        "una dirección de correo como nombre@ejemplo.com",
    ),
    ("date", "a date YYYY-MM-DD", "una fecha AAAA-MM-DD"),
    (
        "path_segment",
        "a path segment other than \".\" or \"..\" (a path parameter cannot move the request to another path)",
        "un segmento de ruta distinto de \".\" o \"..\" (un parámetro de ruta no puede llevar la petición a otra ruta)",
    ),
    ("non_blank", "a text that is not blank", "un texto no vacío"),
    (
        "due_on_or_after_issue",
        "a date on or after the issue date",
        "una fecha igual o posterior a la de emisión",
    ),
    (
        "to_on_or_after_from",
        "a date on or after `from`",
        "una fecha igual o posterior a `from`",
    ),
    (
        "ordinary_series",
        "a series not reserved for rectifying invoices (not \"R\")",
        "una serie no reservada a facturas rectificativas (no \"R\")",
    ),
    (
        "amounts_in_range",
        "amounts whose totals fit in 15 digits of cents",
        "importes cuyos totales caben en 15 dígitos de céntimos",
    ),
    (
        "lines",
        "a list of at least one invoice line",
        "una lista de al menos una línea de factura",
    ),
];

/// One failing argument.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The argument's path, dotted (`lines.0.vat_rate`).
    pub param: String,
    /// A short word: missing, type, format, pattern, enum, range, length, …
    pub reason: &'static str,
    /// What would be accepted.
    pub expect: Expect,
    /// The value sent, when it is a scalar worth showing.
    pub value: Option<Value>,
}

impl Problem {
    /// A problem with no value shown.
    pub fn new(param: impl Into<String>, reason: &'static str, expect: Expect) -> Problem {
        Problem {
            param: param.into(),
            reason,
            expect,
            value: None,
        }
    }

    /// Shows `value` (only a string, number or boolean; anything else is left out).
    pub fn value(mut self, value: &Value) -> Problem {
        self.value = matches!(value, Value::String(_) | Value::Number(_) | Value::Bool(_))
            .then(|| value.clone());
        self
    }

    /// The `details.errors` item.
    pub fn to_value(&self) -> Value {
        let mut item = Map::new();
        item.insert("param".into(), self.param.clone().into());
        item.insert("reason".into(), self.reason.into());
        item.insert("expected".into(), phrase(&self.expect, Locale::En).into());
        for (key, value) in machine_keys(&self.expect) {
            item.insert(key.into(), value);
        }
        if let Some(value) = &self.value {
            item.insert("value".into(), quoted_value(value));
        }
        Value::Object(item)
    }
}

/// A string value cut like the sentence cuts it, so no long input is echoed back.
fn quoted_value(value: &Value) -> Value {
    match value {
        Value::String(s) if s.chars().count() > QUOTE_MAX_CHARS => {
            let q = quoted(value);
            Value::String(q.trim_matches('"').to_owned())
        }
        other => other.clone(),
    }
}

fn machine_keys(expect: &Expect) -> Vec<(&'static str, Value)> {
    let bounds = |a: &'static str, b: &'static str, lo: Option<Value>, hi: Option<Value>| {
        [(a, lo), (b, hi)]
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect()
    };
    match expect {
        Expect::Type(t) => vec![("type", t.clone())],
        Expect::Cents => vec![("type", "integer".into()), ("unit", "cents".into())],
        Expect::OneOf(values) => vec![("allowed", Value::from(values.clone()))],
        Expect::Format(f) => vec![("format", f.clone().into())],
        Expect::Pattern(p) => vec![("pattern", p.clone().into())],
        Expect::Range(lo, hi) => bounds("minimum", "maximum", lo.clone(), hi.clone()),
        Expect::Length(lo, hi) => bounds(
            "min_length",
            "max_length",
            lo.map(Into::into),
            hi.map(Into::into),
        ),
        Expect::Items(lo, hi) => bounds(
            "min_items",
            "max_items",
            lo.map(Into::into),
            hi.map(Into::into),
        ),
        Expect::Arguments(names) => vec![("accepted", json!(names))],
        Expect::Named(name) => vec![("expect", (*name).into())],
    }
}

/// Reads the expectation back from an item's machine keys.
fn expect_of(item: &Value) -> Option<Expect> {
    let u = |k: &str| item.get(k).and_then(Value::as_u64);
    let v = |k: &str| item.get(k).cloned();
    if let Some(name) = item.get("expect").and_then(Value::as_str) {
        return NAMED
            .iter()
            .find(|(n, ..)| *n == name)
            .map(|(n, ..)| Expect::Named(n));
    }
    if item.get("unit").and_then(Value::as_str) == Some("cents") {
        return Some(Expect::Cents);
    }
    let found = [
        v("allowed")
            .and_then(|a| a.as_array().cloned())
            .map(Expect::OneOf),
        v("accepted")
            .and_then(|a| serde_json::from_value(a).ok())
            .map(Expect::Arguments),
        item.get("format")
            .and_then(Value::as_str)
            .map(|f| Expect::Format(f.to_owned())),
        item.get("pattern")
            .and_then(Value::as_str)
            .map(|p| Expect::Pattern(p.to_owned())),
        (v("minimum").is_some() || v("maximum").is_some())
            .then(|| Expect::Range(v("minimum"), v("maximum"))),
        (u("min_length").is_some() || u("max_length").is_some())
            .then(|| Expect::Length(u("min_length"), u("max_length"))),
        (u("min_items").is_some() || u("max_items").is_some())
            .then(|| Expect::Items(u("min_items"), u("max_items"))),
        v("type").map(Expect::Type),
    ];
    found.into_iter().flatten().next()
}

/// What `expect` asks for, as a phrase in `locale` ("one of 0, 4, 10, 21").
pub fn phrase(expect: &Expect, locale: Locale) -> String {
    let es = locale == Locale::Es;
    let pick = |en: &str, sp: &str| if es { sp.to_owned() } else { en.to_owned() };
    match expect {
        Expect::Type(t) => type_phrase(t, locale),
        Expect::Cents => pick("an integer number of cents", "un número entero de céntimos"),
        Expect::OneOf(values) => {
            let list = values.iter().map(quoted).collect::<Vec<_>>().join(", ");
            if es {
                format!("uno de {list}")
            } else {
                format!("one of {list}")
            }
        }
        Expect::Format(f) => format_phrase(f, locale),
        Expect::Pattern(p) => pick(
            &format!("a text matching {p}"),
            &format!("un texto que cumpla {p}"),
        ),
        Expect::Range(lo, hi) => bounded(
            locale,
            "a number",
            "un número",
            lo.as_ref().map(|v| plain(v, locale)),
            hi.as_ref().map(|v| plain(v, locale)),
            "",
        ),
        Expect::Length(lo, hi) => bounded(
            locale,
            "a text",
            "un texto",
            lo.map(|n| n.to_string()),
            hi.map(|n| n.to_string()),
            if es { " caracteres" } else { " characters" },
        ),
        Expect::Items(lo, hi) => bounded(
            locale,
            "a list",
            "una lista",
            lo.map(|n| n.to_string()),
            hi.map(|n| n.to_string()),
            if es { " elementos" } else { " items" },
        ),
        Expect::Arguments(names) => {
            let list = names.join(", ");
            pick(
                &format!("left out (the tool's arguments are {list})"),
                &format!("omitido (los argumentos de la herramienta son {list})"),
            )
        }
        Expect::Named(name) => NAMED
            .iter()
            .find(|(n, ..)| n == name)
            .map(|(_, en, sp)| pick(en, sp))
            .unwrap_or_default(),
    }
}

fn bounded(
    locale: Locale,
    en: &str,
    es: &str,
    lo: Option<String>,
    hi: Option<String>,
    unit: &str,
) -> String {
    let spanish = locale == Locale::Es;
    let what = if spanish { es } else { en };
    match (lo, hi, spanish) {
        (Some(lo), Some(hi), false) => format!("{what} of {lo} to {hi}{unit}"),
        (Some(lo), Some(hi), true) => format!("{what} de {lo} a {hi}{unit}"),
        (Some(lo), None, false) => format!("{what} of at least {lo}{unit}"),
        (Some(lo), None, true) => format!("{what} de al menos {lo}{unit}"),
        (None, Some(hi), false) => format!("{what} of at most {hi}{unit}"),
        (None, Some(hi), true) => format!("{what} de como mucho {hi}{unit}"),
        (None, None, _) => what.to_owned(),
    }
}

fn type_phrase(t: &Value, locale: Locale) -> String {
    let one = |name: &str| -> &'static str {
        match (name, locale) {
            ("integer", Locale::En) => "an integer",
            ("integer", Locale::Es) => "un número entero",
            ("number", Locale::En) => "a number",
            ("number", Locale::Es) => "un número",
            ("string", Locale::En) => "a text",
            ("string", Locale::Es) => "un texto",
            ("boolean", Locale::En) => "true or false",
            ("boolean", Locale::Es) => "true o false",
            ("array", Locale::En) => "a list",
            ("array", Locale::Es) => "una lista",
            ("object", Locale::En) => "an object",
            ("object", Locale::Es) => "un objeto",
            (_, Locale::En) => "null (or left out)",
            (_, Locale::Es) => "null (u omitido)",
        }
    };
    let names: Vec<&str> = match t {
        Value::Array(items) => items
            .iter()
            .filter_map(Value::as_str)
            .filter(|n| *n != "null")
            .collect(),
        other => other.as_str().into_iter().collect(),
    };
    let joined = names.iter().map(|n| one(n)).collect::<Vec<_>>();
    match locale {
        Locale::En => joined.join(" or "),
        Locale::Es => joined.join(" o "),
    }
}

fn format_phrase(format: &str, locale: Locale) -> String {
    let named = match format {
        "date" => "date",
        "email" => "email",
        _ => "",
    };
    if !named.is_empty() {
        return phrase(&Expect::Named(named), locale);
    }
    match locale {
        Locale::En => format!("a text in the {format} format"),
        Locale::Es => format!("un texto con el formato {format}"),
    }
}

/// What is wrong, by reason word (English, Spanish).
const REASONS: &[(&str, &str, &str)] = &[
    ("missing", "is missing", "falta"),
    ("type", "has the wrong type", "tiene un tipo incorrecto"),
    ("format", "is malformed", "está mal formado"),
    (
        "pattern",
        "does not match the pattern",
        "no cumple el patrón",
    ),
    (
        "enum",
        "is not one of the allowed values",
        "no es uno de los valores permitidos",
    ),
    ("range", "is out of range", "está fuera de rango"),
    (
        "length",
        "has the wrong length",
        "tiene una longitud incorrecta",
    ),
    (
        "items",
        "has the wrong number of items",
        "tiene un número de elementos incorrecto",
    ),
    (
        "unexpected_argument",
        "is not an argument of this tool",
        "no es un argumento de esta herramienta",
    ),
    (
        "checksum",
        "has a control character that does not match its digits",
        "tiene un carácter de control que no corresponde a sus dígitos",
    ),
    ("blank", "is blank", "está vacío"),
    ("order", "is out of order", "no respeta el orden"),
    ("reserved", "is reserved", "está reservado"),
    ("overflow", "is too large", "es demasiado grande"),
];

fn reason_phrase(reason: &str, locale: Locale) -> &'static str {
    let (en, es) = REASONS
        .iter()
        .find(|(r, ..)| *r == reason)
        .map_or(("is not valid", "no es válido"), |(_, en, es)| (*en, *es));
    if locale == Locale::Es { es } else { en }
}

/// One item as a clause: "`lines.0.vat_rate` (7) is out of range: it must be …".
fn clause(item: &Value, locale: Locale) -> Option<String> {
    let param = item.get("param")?.as_str()?;
    let reason = item.get("reason").and_then(Value::as_str).unwrap_or("");
    let value = item
        .get("value")
        .map(|v| format!(" ({})", quoted(v)))
        .unwrap_or_default();
    let expected = expect_of(item).map(|e| phrase(&e, locale)).or_else(|| {
        item.get("expected")
            .and_then(Value::as_str)
            .map(str::to_owned)
    })?;
    let what = reason_phrase(reason, locale);
    Some(match locale {
        Locale::En => format!("`{param}`{value} {what}: it must be {expected}"),
        Locale::Es => format!("`{param}`{value} {what}: debe ser {expected}"),
    })
}

/// The list of `details.errors` in a sentence: the first few clauses, then "and N more".
/// `total` is how many failed when the list holds fewer.
pub(crate) fn list_in_text(items: &[Value], total: Option<u64>, locale: Locale) -> Option<String> {
    let clauses: Vec<String> = items.iter().filter_map(|i| clause(i, locale)).collect();
    if clauses.is_empty() {
        return None;
    }
    let shown = clauses.len().min(PROBLEMS_IN_TEXT);
    let mut text = clauses[..shown].join("; ");
    let total = total.map_or(clauses.len(), |t| usize::try_from(t).unwrap_or(usize::MAX));
    let more = total.max(clauses.len()) - shown;
    if more > 0 {
        text.push_str(&match locale {
            Locale::En => format!("; and {more} more"),
            Locale::Es => format!("; y {more} más"),
        });
    }
    Some(text)
}

/// `details.errors` of `problems`, at most [`PROBLEMS_IN_DETAILS`].
pub(crate) fn to_details(problems: &[Problem]) -> Value {
    Value::Array(
        problems
            .iter()
            .take(PROBLEMS_IN_DETAILS)
            .map(Problem::to_value)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_carries_the_english_phrase_and_its_machine_form() {
        let p = Problem::new(
            "lines.0.vat_rate",
            "enum",
            Expect::OneOf(vec![0.into(), 4.into()]),
        )
        .value(&json!(7));
        assert_eq!(
            p.to_value(),
            json!({"param": "lines.0.vat_rate", "reason": "enum", "expected": "one of 0, 4",
                   "allowed": [0, 4], "value": 7})
        );
    }

    #[test]
    fn the_text_lists_five_then_counts_the_rest() {
        let items: Vec<Value> = (0..7)
            .map(|i| Problem::new(format!("a{i}"), "missing", Expect::Cents).to_value())
            .collect();
        let text = list_in_text(&items, None, Locale::En).unwrap_or_default();
        assert!(text.starts_with("`a0` is missing: it must be an integer number of cents; "));
        assert!(
            text.ends_with("`a4` is missing: it must be an integer number of cents; and 2 more")
        );
        let counted = list_in_text(&items, Some(30), Locale::En).unwrap_or_default();
        assert!(counted.ends_with("; and 25 more"), "{counted}");
        let es = list_in_text(&items[..1], None, Locale::Es).unwrap_or_default();
        assert_eq!(es, "`a0` falta: debe ser un número entero de céntimos");
    }

    #[test]
    fn every_named_expectation_reads_back() {
        for (name, ..) in NAMED {
            let item = Problem::new("x", "format", Expect::Named(name)).to_value();
            assert_eq!(expect_of(&item), Some(Expect::Named(name)));
        }
    }
}
