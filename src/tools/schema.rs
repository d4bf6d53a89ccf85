//! Schema pieces every tool pack shares: optional properties that admit `null` (read as
//! absent by [`crate::tools::absent`]), and the `idempotency_key` argument of tools that
//! change state, with the sentence that tells a model to reuse its key on a retry.

use serde_json::{Value, json};

/// The argument that carries an idempotency key.
pub const KEY_ARGUMENT: &str = "idempotency_key";

/// The sentence every key-taking tool's description, and its `idempotency_key` property,
/// tells the model: a model told only that a key is "unique" mints a new one on each retry,
/// and the retry then acts twice. A macro, so that descriptions can be `concat!`enated.
macro_rules! reuse_key {
    () => {
        "Reuse the same idempotency_key when you retry this same operation (after an error or \
         a timeout); use a new key only for a different operation."
    };
}
pub(crate) use reuse_key;

/// The `idempotency_key` property of a tool that changes state.
pub fn key_property(required: bool) -> Value {
    let description = if required {
        concat!(
            "Required. A key you choose for this operation (1-255 printable ASCII, e.g. a \
             UUID). ",
            reuse_key!(),
            " With the same key and arguments a retry returns the first result instead of \
             acting twice; the same key with other arguments is refused."
        )
    } else {
        concat!(
            "Optional. A key you choose for this operation (1-255 printable ASCII, e.g. a \
             UUID). ",
            reuse_key!(),
            " With the same key and arguments a retry returns the first result instead of \
             acting twice."
        )
    };
    json!({ "type": "string", "minLength": 1, "maxLength": 255, "description": description })
}

/// Makes every property `schema` does not require admit `null`, recursively through nested
/// objects' properties and arrays' items.
pub fn optional_admits_null(schema: &mut Value) {
    let required: Vec<String> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        for (name, property) in properties.iter_mut() {
            if !required.contains(name) {
                admit_null(property);
            }
            optional_admits_null(property);
        }
    }
    if let Some(items) = schema.get_mut("items") {
        optional_admits_null(items);
    }
}

/// Adds `null` to a property's `type` and `enum`.
fn admit_null(property: &mut Value) {
    match property.get_mut("type") {
        Some(Value::String(kind)) if kind != "null" => {
            let kind = std::mem::take(kind);
            property["type"] = json!([kind, "null"]);
        }
        Some(Value::Array(kinds)) if !kinds.contains(&json!("null")) => kinds.push(json!("null")),
        _ => {}
    }
    if let Some(Value::Array(values)) = property.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
}
