//! JSON Schemas of the invoicing tools: the pieces their input schemas are built from and
//! the output schemas their `structuredContent` conforms to (a test checks it).
//!
//! Every input schema is a closed object (`additionalProperties: false`); every tool that
//! changes state declares the optional `idempotency_key` so a model can send one. Every
//! optional argument, at any depth, also admits `null` (its `type`, and its `enum` if it has
//! one, include `null`): the chain reads a `null` for an optional argument as absent
//! (`tools::absent`), and a model whose host makes every property required (OpenAI strict
//! mode) leaves an argument out by sending `null`. String keywords (`pattern`, `format`,
//! lengths) and number keywords apply only to values of their type, so they still hold.

use serde_json::{Map, Value, json};

use super::model::{InvoiceKind, InvoiceStatus, PaymentMethod, id_pattern};

/// Largest quantity on one line.
pub const MAX_QUANTITY: i64 = 1_000_000;
/// Largest unit price, in cents (100 million EUR).
pub const MAX_UNIT_PRICE_CENTS: i64 = 10_000_000_000;
/// Most lines on one invoice.
pub const MAX_LINES: usize = 200;
/// Largest single payment, in cents.
pub const MAX_PAYMENT_CENTS: i64 = 1_000_000_000_000_000;
/// Currencies accepted (the company's books are kept in euros).
pub const CURRENCIES: &[&str] = &["EUR"];

pub(crate) use crate::tools::schema::reuse_key;

/// A closed input object schema with these properties and required names; every optional
/// property, here and in the objects nested in it, admits `null`.
pub fn object(properties: Value, required: &[&str]) -> Value {
    let mut schema = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    crate::tools::schema::optional_admits_null(&mut schema);
    schema
}

/// `object` plus the optional `idempotency_key` of state-changing tools.
pub fn object_with_key(mut properties: Value, required: &[&str], required_key: bool) -> Value {
    if let Value::Object(map) = &mut properties {
        map.insert(
            crate::tools::schema::KEY_ARGUMENT.into(),
            crate::tools::schema::key_property(required_key),
        );
    }
    object(properties, required)
}

/// An id property of one type.
pub fn id(prefix: &str, description: &str) -> Value {
    json!({ "type": "string", "pattern": id_pattern(prefix), "description": description })
}

/// A `YYYY-MM-DD` date property.
pub fn date(description: &str) -> Value {
    json!({ "type": "string", "format": "date", "description": format!("{description} (YYYY-MM-DD).") })
}

/// A bounded text property.
pub fn text(max: usize, description: &str) -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": max, "description": description })
}

/// `limit` and `starting_after` of the cursor-paginated tools.
pub fn pagination(properties: &mut Map<String, Value>, prefix: &str) {
    properties.insert(
        "limit".into(),
        json!({ "type": "integer", "minimum": 1, "maximum": 100, "default": 20,
                "description": "Page size (1-100, default 20)." }),
    );
    properties.insert(
        "starting_after".into(),
        id(
            prefix,
            "Cursor: pass the previous page's `next_cursor` to get the next page.",
        ),
    );
}

/// The `tax_id` property.
pub fn tax_id() -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": 20,
            "description": "Spanish tax id: NIF (12345678Z), NIE (X1234567L) or CIF (B12345674). \
                            Checksum-validated; spaces, dashes and an ES prefix are ignored." })
}

/// The `lines` property of `create_invoice` / `update_invoice`.
pub fn lines() -> Value {
    json!({
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_LINES,
        "description": "Invoice lines. Amounts are integer cents; rates are whole percentages.",
        "items": {
            "type": "object",
            "additionalProperties": false,
            "required": ["description", "quantity", "unit_price_cents", "vat_rate"],
            "properties": {
                "description": text(500, "What is billed."),
                "quantity": { "type": "integer", "minimum": 1, "maximum": MAX_QUANTITY,
                              "description": "Whole units." },
                "unit_price_cents": { "type": "integer", "minimum": 0,
                                      "maximum": MAX_UNIT_PRICE_CENTS,
                                      "description": "Price of one unit before VAT, in cents (12.50 EUR = 1250)." },
                "discount_percent": { "type": "integer", "minimum": 0, "maximum": 100,
                                      "default": 0, "description": "Line discount, whole percent." },
                "vat_rate": { "type": "integer", "minimum": 0, "maximum": 100,
                              "description": "VAT, whole percent. Spain: 21 (general), 10 (reduced), 4 (super-reduced) or 0 (exempt)." },
                "withholding_rate": { "type": "integer", "minimum": 0, "maximum": 100,
                                      "default": 0,
                                      "description": "Income-tax withholding (IRPF), whole percent, e.g. 15 for professional services; 0 if none." },
            },
        },
    })
}

/// The `kind` property.
pub fn invoice_kind() -> Value {
    json!({ "type": "string", "enum": [InvoiceKind::Full.as_str(), InvoiceKind::Simplified.as_str()],
            "description": "\"full\" (needs the client's tax id when issued) or \"simplified\" (up to 400.00 EUR with VAT)." })
}

/// The `status` filter property.
pub fn invoice_status() -> Value {
    json!({ "type": "string", "enum": InvoiceStatus::WORDS })
}

/// The `series` property.
pub fn series() -> Value {
    json!({ "type": "string", "pattern": "^[A-Z0-9]{1,10}$",
            "description": "Numbering series code (default F for full, S for simplified; R is reserved for rectifying invoices)." })
}

// ---- Output schemas -----------------------------------------------------------------------------

fn nullable(kind: &str) -> Value {
    json!({ "type": [kind, "null"] })
}

fn closed(properties: Value) -> Value {
    let required: Vec<String> = properties
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    json!({ "type": "object", "properties": properties, "required": required })
}

/// A client.
pub fn client_out() -> Value {
    closed(json!({
        "id": { "type": "string" },
        "name": { "type": "string" },
        "tax_id": nullable("string"),
        "tax_id_kind": { "enum": ["nif", "nie", "cif", null] },
        "email": nullable("string"),
        "address": nullable("string"),
    }))
}

/// A client with its activity (`get_client`).
pub fn client_detail_out() -> Value {
    let mut schema = client_out();
    schema["properties"]["invoice_count"] = json!({ "type": "integer" });
    schema["properties"]["outstanding_cents"] = json!({ "type": "integer" });
    add_required(&mut schema, &["invoice_count", "outstanding_cents"]);
    schema
}

fn add_required(schema: &mut Value, names: &[&str]) {
    if let Some(required) = schema["required"].as_array_mut() {
        required.extend(names.iter().map(|n| json!(n)));
    }
}

fn invoice_summary_properties() -> Value {
    json!({
        "id": { "type": "string" },
        "number": nullable("string"),
        "status": { "enum": InvoiceStatus::WORDS },
        "kind": { "enum": InvoiceKind::WORDS },
        "series": { "type": "string" },
        "client_id": { "type": "string" },
        "client_name": { "type": "string" },
        "issue_date": nullable("string"),
        "due_date": nullable("string"),
        "currency": { "type": "string" },
        "gross_cents": { "type": "integer" },
        "discount_cents": { "type": "integer" },
        "subtotal_cents": { "type": "integer" },
        "vat_cents": { "type": "integer" },
        "withholding_cents": { "type": "integer" },
        "total_cents": { "type": "integer" },
        "paid_cents": { "type": "integer" },
        "balance_cents": { "type": "integer" },
        "overdue": { "type": "boolean" },
        "rectifies_id": nullable("string"),
        "rectified_by_id": nullable("string"),
    })
}

/// An invoice without lines (list entries).
pub fn invoice_summary_out() -> Value {
    closed(invoice_summary_properties())
}

/// An invoice with its lines and VAT breakdown.
pub fn invoice_out() -> Value {
    let mut properties = invoice_summary_properties();
    let line = closed(json!({
        "position": { "type": "integer" },
        "description": { "type": "string" },
        "quantity": { "type": "integer" },
        "unit_price_cents": { "type": "integer" },
        "discount_percent": { "type": "integer" },
        "vat_rate": { "type": "integer" },
        "withholding_rate": { "type": "integer" },
        "gross_cents": { "type": "integer" },
        "discount_cents": { "type": "integer" },
        "net_cents": { "type": "integer" },
        "vat_cents": { "type": "integer" },
        "withholding_cents": { "type": "integer" },
        "total_cents": { "type": "integer" },
    }));
    let breakdown = closed(json!({
        "vat_rate": { "type": "integer" },
        "base_cents": { "type": "integer" },
        "vat_cents": { "type": "integer" },
    }));
    if let Value::Object(map) = &mut properties {
        map.insert("notes".into(), nullable("string"));
        map.insert("void_reason".into(), nullable("string"));
        map.insert(
            "recipient".into(),
            json!({ "type": ["object", "null"],
                    "properties": { "name": { "type": "string" }, "tax_id": nullable("string") } }),
        );
        map.insert("lines".into(), json!({ "type": "array", "items": line }));
        map.insert(
            "vat_breakdown".into(),
            json!({ "type": "array", "items": breakdown }),
        );
    }
    closed(properties)
}

/// The answer of `void_invoice`: the voided invoice and its rectifying invoice.
pub fn void_out() -> Value {
    closed(json!({ "invoice": invoice_out(), "rectifying_invoice": invoice_out() }))
}

/// An invoice with its payments (`get_invoice`).
pub fn invoice_detail_out() -> Value {
    let mut schema = invoice_out();
    schema["properties"]["payments"] = json!({ "type": "array", "items": payment_out() });
    add_required(&mut schema, &["payments"]);
    schema
}

/// A payment.
pub fn payment_out() -> Value {
    closed(json!({
        "id": { "type": "string" },
        "invoice_id": { "type": "string" },
        "amount_cents": { "type": "integer" },
        "currency": { "type": "string" },
        "paid_on": { "type": "string" },
        "method": { "enum": PaymentMethod::WORDS },
        "reference": nullable("string"),
    }))
}

/// A page of `item`s.
pub fn page_out(item: Value) -> Value {
    closed(json!({
        "data": { "type": "array", "items": item },
        "has_more": { "type": "boolean" },
        "next_cursor": nullable("string"),
    }))
}

/// The answer of a delete.
pub fn deleted_out() -> Value {
    closed(json!({ "id": { "type": "string" }, "deleted": { "const": true } }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Idempotency;

    /// Every property declared in `schema` at any depth: its path, its schema and whether
    /// its object requires it.
    fn properties(schema: &Value, path: &str, out: &mut Vec<(String, Value, bool)>) {
        let required = |name: &str| {
            schema["required"]
                .as_array()
                .is_some_and(|names| names.iter().any(|n| n == name))
        };
        if let Some(declared) = schema["properties"].as_object() {
            for (name, property) in declared {
                let at = format!("{path}.{name}");
                out.push((at.clone(), property.clone(), required(name)));
                properties(property, &at, out);
            }
        }
        if schema.get("items").is_some() {
            properties(&schema["items"], &format!("{path}[]"), out);
        }
    }

    #[test]
    fn every_optional_argument_admits_null_and_no_required_one_does() {
        let tools = crate::tools::invoicing::tools();
        assert_eq!(tools.len(), 16);
        let mut optional = 0;
        for tool in &tools {
            let spec = tool.spec();
            let mut found = Vec::new();
            properties(&spec.input_schema, &spec.name, &mut found);
            for (path, schema, required) in found {
                let validator = jsonschema::validator_for(&schema).expect("compiles");
                assert_eq!(
                    validator.is_valid(&Value::Null),
                    !required,
                    "{path}: {schema}"
                );
                optional += usize::from(!required);
            }
        }
        // 50 optional arguments, and the two optional fields of an invoice line in
        // create_invoice and update_invoice.
        assert_eq!(optional, 54);
    }

    #[test]
    fn string_and_number_keywords_still_hold_for_a_nullable_argument() {
        let create = crate::tools::invoicing::tools()
            .into_iter()
            .find(|t| t.spec().name == "create_invoice")
            .expect("create_invoice");
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&create.spec().input_schema);
        let validator = validator.expect("compiles");
        let line =
            json!({ "description": "x", "quantity": 1, "unit_price_cents": 1, "vat_rate": 21 });
        let client = "cli_0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
        let valid = json!({ "client_id": client, "lines": [line], "due_date": null, "kind": null });
        assert!(validator.is_valid(&valid));
        for (name, bad) in [
            ("due_date", json!("2025-13-01")),
            ("series", json!("lower")),
            ("kind", json!("other")),
            ("notes", json!("")),
        ] {
            let mut args = valid.clone();
            args[name] = bad;
            assert!(!validator.is_valid(&args), "{name}");
        }
        let mut args = valid.clone();
        args["lines"][0]["discount_percent"] = json!(101);
        assert!(!validator.is_valid(&args));
        args["lines"][0]["discount_percent"] = Value::Null;
        assert!(validator.is_valid(&args));
    }

    #[test]
    fn every_key_taking_tool_tells_the_model_to_reuse_its_key() {
        for tool in crate::tools::invoicing::tools() {
            let spec = tool.spec();
            let key = &spec.input_schema["properties"]["idempotency_key"];
            if spec.idempotency == Idempotency::NotApplicable {
                assert!(key.is_null(), "{}", spec.name);
                continue;
            }
            assert!(spec.description.ends_with(reuse_key!()), "{}", spec.name);
            let described = key["description"].as_str().unwrap_or_default();
            assert!(described.contains(reuse_key!()), "{}", spec.name);
        }
    }

    #[test]
    fn output_schemas_are_built_without_the_nulls_of_optional_arguments() {
        // Output properties are all required: only the ones declared nullable admit null.
        let out = client_out();
        assert_eq!(out["properties"]["name"], json!({ "type": "string" }));
        assert_eq!(
            out["properties"]["email"],
            json!({ "type": ["string", "null"] })
        );
        assert!(out.get("additionalProperties").is_none());
    }
}
