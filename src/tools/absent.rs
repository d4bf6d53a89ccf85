//! `null` means absent: an explicit `null` for an argument the tool's input schema does not
//! require is read as if the argument had been left out.
//!
//! Agent hosts disagree on how to say "no value": some send `null` for every optional
//! argument they do not fill, and OpenAI strict-mode conversions make every property
//! required, so a model can only leave one out by sending `null`. The chain reads the
//! arguments through [`nulls_as_absent`] once, as soon as the tool is known, and everything
//! after it — the idempotency fingerprint, the guardrails, validation and the tool itself —
//! sees the same map: `{"x": null}` and `{}` are one operation.
//!
//! Which `null`s go is read from the schema, never guessed: a property the schema declares
//! and does not list in `required`, at the top level and in nested objects the schema
//! describes (`properties`, and the `items` of an array). A `null` for a required property,
//! or for a name the schema does not declare, stays, and validation judges it.

use std::borrow::Cow;

use serde_json::{Map, Value};

/// `args` without the `null`s that stand for optional arguments left out, as `schema` (a
/// tool's input schema) declares them. Borrows `args` untouched, allocating nothing, when
/// there is no such `null`.
pub fn nulls_as_absent<'a>(
    schema: &Value,
    args: &'a Map<String, Value>,
) -> Cow<'a, Map<String, Value>> {
    if !object_holds_absent(schema, args) {
        return Cow::Borrowed(args);
    }
    let mut normalized = args.clone();
    strip_object(schema, &mut normalized);
    Cow::Owned(normalized)
}

/// The properties `schema` declares, if it declares any.
fn properties(schema: &Value) -> Option<&Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

/// Whether `schema` leaves the property `name` optional.
fn is_optional(schema: &Value, name: &str) -> bool {
    !schema
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|required| required.iter().any(|r| r.as_str() == Some(name)))
}

/// Whether `value`, described by `schema`, holds a `null` for an optional property.
fn holds_absent(schema: &Value, value: &Value) -> bool {
    match value {
        Value::Object(map) => object_holds_absent(schema, map),
        Value::Array(items) => schema
            .get("items")
            .is_some_and(|item| items.iter().any(|v| holds_absent(item, v))),
        _ => false,
    }
}

fn object_holds_absent(schema: &Value, map: &Map<String, Value>) -> bool {
    let Some(declared) = properties(schema) else {
        return false;
    };
    map.iter().any(|(name, value)| match declared.get(name) {
        None => false,
        Some(_) if value.is_null() => is_optional(schema, name),
        Some(property) => holds_absent(property, value),
    })
}

/// Removes from `value` every `null` that stands for an optional property of `schema`.
fn strip(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => strip_object(schema, map),
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                items.iter_mut().for_each(|v| strip(item, v));
            }
        }
        _ => {}
    }
}

fn strip_object(schema: &Value, map: &mut Map<String, Value>) {
    let Some(declared) = properties(schema) else {
        return;
    };
    map.retain(|name, value| match declared.get(name) {
        None => true,
        Some(_) if value.is_null() => !is_optional(schema, name),
        Some(property) => {
            strip(property, value);
            true
        }
    });
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn map(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["client_id"],
            "properties": {
                "client_id": { "type": "string" },
                "notes": { "type": ["string", "null"] },
                "recipient": {
                    "type": "object",
                    "required": ["name"],
                    "properties": { "name": { "type": "string" }, "tax_id": { "type": "string" } },
                },
                "lines": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["quantity"],
                        "properties": {
                            "quantity": { "type": "integer" },
                            "discount_percent": { "type": "integer" },
                        },
                    },
                },
            },
        })
    }

    #[test]
    fn a_call_without_an_optional_null_is_borrowed_as_it_is() {
        let args = map(json!({ "client_id": "c", "lines": [{ "quantity": 1 }], "other": null }));
        assert!(matches!(
            nulls_as_absent(&schema(), &args),
            Cow::Borrowed(_)
        ));
        assert!(matches!(
            nulls_as_absent(&schema(), &Map::new()),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn optional_nulls_go_at_every_level_the_schema_describes() {
        let args = map(json!({
            "client_id": "c",
            "notes": null,
            "recipient": { "name": "A", "tax_id": null },
            "lines": [{ "quantity": 1, "discount_percent": null }, { "quantity": 2 }],
        }));
        let normalized = nulls_as_absent(&schema(), &args);
        assert_eq!(
            Value::Object(normalized.into_owned()),
            json!({
                "client_id": "c",
                "recipient": { "name": "A" },
                "lines": [{ "quantity": 1 }, { "quantity": 2 }],
            })
        );
    }

    #[test]
    fn required_and_undeclared_nulls_stay_for_validation_to_judge() {
        let args = map(json!({
            "client_id": null,
            "notes": null,
            "undeclared": null,
            "recipient": { "name": null },
            "lines": [{ "quantity": null, "discount_percent": null }],
        }));
        let normalized = nulls_as_absent(&schema(), &args);
        assert_eq!(
            Value::Object(normalized.into_owned()),
            json!({
                "client_id": null,
                "undeclared": null,
                "recipient": { "name": null },
                "lines": [{ "quantity": null }],
            })
        );
    }

    #[test]
    fn a_schema_without_properties_keeps_every_null() {
        let args = map(json!({ "x": null }));
        let open = json!({ "type": "object" });
        assert!(matches!(nulls_as_absent(&open, &args), Cow::Borrowed(_)));
        let optional_object = json!({ "properties": { "o": { "type": "object" } } });
        let nested = map(json!({ "o": { "x": null } }));
        assert!(matches!(
            nulls_as_absent(&optional_object, &nested),
            Cow::Borrowed(_)
        ));
    }
}
