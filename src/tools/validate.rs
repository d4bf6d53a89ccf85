//! Arguments checked against a tool's declared input schema before it runs. A failure is
//! an `isError` result, never a JSON-RPC error (SEP-1303: the model must be able to read it
//! and correct itself): `param` names the first failing argument and `details.errors` every
//! one, each with what it must be, read from its schema.

use std::sync::{Arc, OnceLock};

use serde_json::Value;

use jsonschema::ValidationError;
use jsonschema::error::ValidationErrorKind as K;

/// How many failing arguments are counted at most (the list holds
/// [`PROBLEMS_IN_DETAILS`](crate::catalog::problems::PROBLEMS_IN_DETAILS)).
const PROBLEMS_COUNTED: usize = 200;
use crate::catalog::{Expect, McpError, Problem};
use crate::tools::{Tool, ToolSpec};

/// A tool together with its input validator, compiled on the tool's first call.
pub struct RegisteredTool {
    /// The implementation.
    pub tool: Arc<dyn Tool>,
    validator: OnceLock<Result<jsonschema::Validator, String>>,
}

/// Compiles `tool`'s input schema.
fn compile(tool: &dyn Tool) -> Result<jsonschema::Validator, String> {
    jsonschema::options()
        .should_validate_formats(true)
        .build(&tool.spec().input_schema)
        .map_err(|e| format!("tool {}: {e}", tool.spec().name))
}

impl RegisteredTool {
    /// `tool`, its validator not compiled yet.
    pub fn new(tool: Arc<dyn Tool>) -> RegisteredTool {
        RegisteredTool {
            tool,
            validator: OnceLock::new(),
        }
    }

    /// Compiles the validator now, if it is not yet; the error names the tool.
    pub fn compile_now(&self) -> Result<(), String> {
        match self.validator.get_or_init(|| compile(self.tool.as_ref())) {
            Ok(_) => Ok(()),
            Err(cause) => Err(cause.clone()),
        }
    }

    /// The declaration.
    pub fn spec(&self) -> &ToolSpec {
        self.tool.spec()
    }

    /// Checks `args` against the input schema. Every failing argument is reported (at
    /// most [`PROBLEMS_IN_DETAILS`](crate::catalog::problems::PROBLEMS_IN_DETAILS)
    /// listed, up to 200 counted); the first decides the catalog entry and `param`.
    pub fn validate(&self, args: &Value) -> Result<(), McpError> {
        let validator = match self.validator.get_or_init(|| compile(self.tool.as_ref())) {
            Ok(validator) => validator,
            Err(cause) => {
                tracing::error!(%cause, "a tool's input schema does not compile");
                return Err(McpError::internal());
            }
        };
        let schema = &self.tool.spec().input_schema;
        let mut problems = Vec::new();
        let mut first_reason = None;
        for err in validator.iter_errors(args) {
            first_reason.get_or_insert_with(|| legacy_reason(&err));
            problems.extend(problems_of(&err, schema));
            // Counted past the list's cap so the text can say how many more failed.
            if problems.len() >= PROBLEMS_COUNTED {
                break;
            }
        }
        if problems.is_empty() {
            return Ok(());
        }
        let err = McpError::invalid_arguments(&problems);
        Err(match first_reason.flatten() {
            Some(reason) => err.detail("reason", reason),
            None => err,
        })
    }
}

/// `details.reason` as it has always been: `unexpected_argument`, or the failed keyword
/// (never the instance value); none for a missing argument or a format.
fn legacy_reason(err: &ValidationError<'_>) -> Option<String> {
    match &err.kind {
        K::Required { .. } | K::Format { .. } | K::Pattern { .. } => None,
        K::AdditionalProperties { .. } => Some("unexpected_argument".to_owned()),
        _ => err
            .schema_path
            .as_str()
            .rsplit('/')
            .next()
            .map(str::to_owned),
    }
}

/// The argument path of `err`, dotted, with `child` appended when given.
fn param_of(err: &ValidationError<'_>, child: &str) -> String {
    let path = err
        .instance_path
        .as_str()
        .trim_start_matches('/')
        .replace('/', ".");
    match (path.is_empty(), child.is_empty()) {
        (true, _) => child.to_owned(),
        (false, true) => path,
        (false, false) => format!("{path}.{child}"),
    }
}

/// The schema object holding the keyword that failed.
fn keyword_parent<'s>(err: &ValidationError<'_>, schema: &'s Value) -> &'s Value {
    let path = err.schema_path.as_str();
    let parent = path.rsplit_once('/').map_or("", |(parent, _)| parent);
    schema.pointer(parent).unwrap_or(&Value::Null)
}

/// The failing arguments of one schema error (several for unexpected arguments).
fn problems_of(err: &ValidationError<'_>, schema: &Value) -> Vec<Problem> {
    let parent = keyword_parent(err, schema);
    let bound = |key: &str| parent.get(key).cloned();
    let count = |key: &str| parent.get(key).and_then(Value::as_u64);
    let at = |reason, expect| Problem::new(param_of(err, ""), reason, expect).value(&err.instance);
    let one = match &err.kind {
        K::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            let property_schema = parent.pointer(&format!("/properties/{name}"));
            let expect = expect_of(property_schema.unwrap_or(&Value::Null), name);
            Problem::new(param_of(err, name), "missing", expect)
        }
        K::AdditionalProperties { unexpected } => {
            let accepted: Vec<String> = parent
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
            return unexpected
                .iter()
                .map(|name| {
                    Problem::new(
                        param_of(err, name),
                        "unexpected_argument",
                        Expect::Arguments(accepted.clone()),
                    )
                })
                .collect();
        }
        K::Format { format } => at("format", Expect::Format(format.clone())),
        K::Pattern { pattern } => at("pattern", pattern_expect(pattern)),
        K::Enum { options } => at(
            "enum",
            Expect::OneOf(non_null(options.as_array().cloned().unwrap_or_default())),
        ),
        K::Constant { expected_value } => at("enum", Expect::OneOf(vec![expected_value.clone()])),
        K::Minimum { .. }
        | K::Maximum { .. }
        | K::ExclusiveMinimum { .. }
        | K::ExclusiveMaximum { .. } => {
            let lower = bound("minimum").or_else(|| bound("exclusiveMinimum"));
            let upper = bound("maximum").or_else(|| bound("exclusiveMaximum"));
            at("range", Expect::Range(lower, upper))
        }
        K::MinLength { .. } | K::MaxLength { .. } => at(
            "length",
            Expect::Length(count("minLength"), count("maxLength")),
        ),
        K::MinItems { .. } | K::MaxItems { .. } => Problem::new(
            param_of(err, ""),
            "items",
            Expect::Items(count("minItems"), count("maxItems")),
        ),
        K::Type { .. } => {
            let param = param_of(err, "");
            let name = param.rsplit('.').next().unwrap_or_default().to_owned();
            at("type", expect_of(parent, &name))
        }
        _ => {
            let param = param_of(err, "");
            let name = param.rsplit('.').next().unwrap_or_default().to_owned();
            at("schema", expect_of(parent, &name))
        }
    };
    vec![one]
}

/// What an argument named `name` with `schema` must be, from its keywords.
fn expect_of(schema: &Value, name: &str) -> Expect {
    let get = |key: &str| schema.get(key);
    let count = |key: &str| get(key).and_then(Value::as_u64);
    let types = get("type").cloned().unwrap_or(Value::Null);
    let is = |t: &str| types == t || types.as_array().is_some_and(|a| a.iter().any(|x| x == t));
    if let Some(options) = get("enum").and_then(Value::as_array) {
        return Expect::OneOf(non_null(options.clone()));
    }
    if let Some(format) = get("format").and_then(Value::as_str) {
        return Expect::Format(format.to_owned());
    }
    if let Some(pattern) = get("pattern").and_then(Value::as_str) {
        return pattern_expect(pattern);
    }
    if is("integer") && name.ends_with("_cents") {
        return Expect::Cents;
    }
    if (is("integer") || is("number")) && (get("minimum").is_some() || get("maximum").is_some()) {
        return Expect::Range(get("minimum").cloned(), get("maximum").cloned());
    }
    if is("string") && (count("minLength").is_some() || count("maxLength").is_some()) {
        return Expect::Length(count("minLength"), count("maxLength"));
    }
    if is("array") && (count("minItems").is_some() || count("maxItems").is_some()) {
        return Expect::Items(count("minItems"), count("maxItems"));
    }
    if types.is_null() {
        return Expect::Type("string".into());
    }
    Expect::Type(types)
}

/// The allowed values but `null`, which stands for leaving an optional argument out.
fn non_null(mut options: Vec<Value>) -> Vec<Value> {
    options.retain(|o| !o.is_null());
    options
}

/// A pattern as an expectation: an id's pattern reads as the kind of id it is.
fn pattern_expect(pattern: &str) -> Expect {
    if pattern.starts_with("^cli_") {
        Expect::Named("client_id")
    } else if pattern.starts_with("^inv_") {
        Expect::Named("invoice_id")
    } else {
        Expect::Pattern(pattern.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::Locale;

    fn problems(schema: &Value, args: &Value) -> Vec<Problem> {
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(schema)
            .expect("schema compiles");
        validator
            .iter_errors(args)
            .flat_map(|err| problems_of(&err, schema))
            .collect()
    }

    #[test]
    fn every_failing_argument_is_reported_with_what_it_must_be() {
        let schema = json!({"type": "object", "additionalProperties": false,
            "required": ["quantity", "client_id"],
            "properties": {
                "quantity": {"type": "integer", "minimum": 1, "maximum": 10},
                "issue_date": {"type": "string", "format": "date"},
                "kind": {"type": ["string", "null"], "enum": ["full", "simplified", null]},
                "client_id": {"type": "string", "pattern": "^cli_[0-9a-f]+$"},
                "amount_cents": {"type": "integer"}}});
        let args = json!({"quantity": 50, "issue_date": "2026-13-01", "kind": "big",
                          "amount_cents": 1.5, "extra": true});
        let found: Vec<(String, &str, String)> = problems(&schema, &args)
            .iter()
            .map(|p| {
                (
                    p.param.clone(),
                    p.reason,
                    crate::catalog::problems::phrase(&p.expect, Locale::En),
                )
            })
            .collect();
        let expect = |p: &str, r: &'static str, e: &str| (p.to_owned(), r, e.to_owned());
        for item in [
            expect("quantity", "range", "a number of 1 to 10"),
            expect("issue_date", "format", "a date YYYY-MM-DD"),
            expect("kind", "enum", "one of \"full\", \"simplified\""),
            expect("amount_cents", "type", "an integer number of cents"),
            expect(
                "client_id",
                "missing",
                "a client id as returned by search_clients (cli_…)",
            ),
            expect(
                "extra",
                "unexpected_argument",
                "left out (the tool's arguments are quantity, issue_date, kind, client_id, amount_cents)",
            ),
        ] {
            assert!(found.contains(&item), "{item:?} not in {found:?}");
        }
        assert_eq!(found.len(), 6, "{found:?}");
    }

    #[test]
    fn the_first_failure_decides_the_entry_and_param() {
        let err = McpError::invalid_arguments(&[
            Problem::new("client_id", "missing", Expect::Named("client_id")),
            Problem::new("limit", "range", Expect::Range(Some(1.into()), None)),
        ]);
        assert_eq!(err.kind(), crate::catalog::ErrorKind::MissingRequiredField);
        assert_eq!(err.fields()["param"], json!("client_id"));
        assert_eq!(
            err.fields()["details"]["errors"][1]["param"],
            json!("limit")
        );
    }
}
