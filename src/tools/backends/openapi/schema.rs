//! The JSON Schemas of an OpenAPI backend's tools: a schema of the document (a parameter's,
//! a request or response body's) becomes a standalone JSON Schema 2020-12 — every
//! `#/components/schemas/X` it reaches is carried under `$defs` and referenced as
//! `#/$defs/X`, so a validator compiles it without the document.
//!
//! A 3.0 document is lifted to 3.1 before it is read ([`lift_30`]): `nullable: true` becomes
//! `null` in `type` (and `enum`), and the boolean `exclusiveMinimum`/`exclusiveMaximum` take
//! the bound's number, as JSON Schema 2020-12 writes them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

/// Where a document's reusable schemas are referenced from.
const COMPONENT_SCHEMAS: &str = "#/components/schemas/";

/// Rewrites the 3.0 schema keywords of a whole document into their 3.1 (JSON Schema 2020-12)
/// form. Only boolean `nullable`/`exclusive*` are touched, so a property that happens to be
/// named like a keyword (an object value) is left alone.
pub(super) fn lift_30(value: &mut Value) {
    match value {
        Value::Object(object) => {
            lift_nullable(object);
            lift_exclusive(object, "exclusiveMinimum", "minimum");
            lift_exclusive(object, "exclusiveMaximum", "maximum");
            for child in object.values_mut() {
                lift_30(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(lift_30),
        _ => {}
    }
}

fn lift_nullable(object: &mut Map<String, Value>) {
    let Some(Value::Bool(nullable)) = object.get("nullable") else {
        return;
    };
    let nullable = *nullable;
    object.remove("nullable");
    if !nullable {
        return;
    }
    match object.get_mut("type") {
        Some(Value::String(kind)) => {
            let kind = std::mem::take(kind);
            object.insert("type".into(), json!([kind, "null"]));
        }
        Some(Value::Array(kinds)) if !kinds.contains(&json!("null")) => kinds.push(json!("null")),
        _ => {}
    }
    if let Some(Value::Array(values)) = object.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
}

fn lift_exclusive(object: &mut Map<String, Value>, keyword: &str, bound: &str) {
    let Some(Value::Bool(exclusive)) = object.get(keyword) else {
        return;
    };
    let exclusive = *exclusive;
    object.remove(keyword);
    if exclusive && let Some(limit) = object.remove(bound) {
        object.insert(keyword.to_owned(), limit);
    }
}

/// The reusable schemas of a document (`components.schemas`), as JSON.
#[derive(Debug, Default)]
pub(super) struct Components {
    schemas: BTreeMap<String, Value>,
}

impl Components {
    /// The components of `spec`.
    pub(super) fn of(spec: &oas3::Spec) -> Result<Components, String> {
        let mut schemas = BTreeMap::new();
        if let Some(components) = &spec.components {
            for (name, schema) in &components.schemas {
                let value = serde_json::to_value(schema)
                    .map_err(|e| format!("components.schemas.{name}: {e}"))?;
                schemas.insert(name.clone(), value);
            }
        }
        Ok(Components { schemas })
    }

    /// `schema` with a top-level `$ref` followed to the component it names (chains too).
    pub(super) fn follow<'a>(&'a self, mut schema: &'a Value) -> Result<&'a Value, String> {
        for _ in 0..16 {
            match schema.get("$ref").and_then(Value::as_str) {
                Some(reference) => schema = self.named(reference)?.1,
                None => return Ok(schema),
            }
        }
        Err("a chain of $ref that does not end".into())
    }

    fn named<'a>(&'a self, reference: &str) -> Result<(&'a str, &'a Value), String> {
        let Some(token) = reference.strip_prefix(COMPONENT_SCHEMAS) else {
            return Err(format!(
                "$ref {reference:?} does not point into #/components/schemas of this document"
            ));
        };
        let name = token.replace("~1", "/").replace("~0", "~");
        self.schemas
            .get_key_value(&name)
            .map(|(k, v)| (k.as_str(), v))
            .ok_or_else(|| format!("$ref {reference:?} names no schema of the document"))
    }
}

/// The components one tool's schema reaches, collected while its parts are rewritten.
pub(super) struct Defs<'c> {
    components: &'c Components,
    used: BTreeSet<String>,
}

impl<'c> Defs<'c> {
    /// An empty collection over `components`.
    pub(super) fn new(components: &'c Components) -> Defs<'c> {
        Defs {
            components,
            used: BTreeSet::new(),
        }
    }

    /// `schema` with its component references pointing at `#/$defs/…`, remembering each.
    pub(super) fn rewrite(&mut self, schema: &Value) -> Result<Value, String> {
        match schema {
            Value::Object(object) => {
                let mut out = Map::with_capacity(object.len());
                for (key, value) in object {
                    if key == "$ref"
                        && let Some(reference) = value.as_str()
                    {
                        let (name, _) = self.components.named(reference)?;
                        self.used.insert(name.to_owned());
                        out.insert(key.clone(), Value::String(def_ref(name)));
                    } else {
                        out.insert(key.clone(), self.rewrite(value)?);
                    }
                }
                Ok(Value::Object(out))
            }
            Value::Array(items) => items.iter().map(|item| self.rewrite(item)).collect(),
            other => Ok(other.clone()),
        }
    }

    /// Adds `$defs` to `root` with every component reached, transitively.
    pub(super) fn attach(mut self, root: &mut Value) -> Result<(), String> {
        let mut defs = Map::new();
        let mut pending: Vec<String> = self.used.iter().cloned().collect();
        while let Some(name) = pending.pop() {
            if defs.contains_key(&name) {
                continue;
            }
            let (_, schema) = self
                .components
                .named(&format!("{COMPONENT_SCHEMAS}{name}"))?;
            let before = self.used.clone();
            let rewritten = self.rewrite(schema)?;
            pending.extend(self.used.difference(&before).cloned());
            defs.insert(name, rewritten);
        }
        if !defs.is_empty()
            && let Value::Object(object) = root
        {
            object.insert("$defs".into(), Value::Object(defs));
        }
        Ok(())
    }
}

fn def_ref(name: &str) -> String {
    format!("#/$defs/{}", name.replace('~', "~0").replace('/', "~1"))
}

/// Whether `schema` (its top-level reference followed) describes an object: `type` is
/// `"object"`, or there is no `type` and it lists `properties`.
pub(super) fn is_object(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(kind)) => kind == "object",
        None => schema.get("properties").is_some_and(Value::is_object),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn components(schemas: Value) -> Components {
        let Value::Object(map) = schemas else {
            panic!("object")
        };
        Components {
            schemas: map.into_iter().collect(),
        }
    }

    #[test]
    fn a_30_schema_is_lifted_to_json_schema_2020_12() {
        let mut doc = json!({
            "type": "string", "nullable": true, "enum": ["a"],
            "properties": {"nullable": {"type": "boolean"}},
            "items": {"type": "integer", "minimum": 0, "exclusiveMinimum": true,
                      "maximum": 9, "exclusiveMaximum": false}
        });
        lift_30(&mut doc);
        assert_eq!(
            doc,
            json!({
                "type": ["string", "null"], "enum": ["a", null],
                "properties": {"nullable": {"type": "boolean"}},
                "items": {"type": "integer", "exclusiveMinimum": 0, "maximum": 9}
            })
        );
    }

    #[test]
    fn references_are_carried_under_defs_transitively() {
        let components = components(json!({
            "Pet": {"type": "object", "properties": {"category": {"$ref": "#/components/schemas/Category"},
                                                       "parent": {"$ref": "#/components/schemas/Pet"}}},
            "Category": {"type": "object", "properties": {"name": {"type": "string"}}},
            "Unused": {"type": "string"}
        }));
        let mut defs = Defs::new(&components);
        let mut root = json!({"type": "object", "properties": {
            "pet": defs.rewrite(&json!({"$ref": "#/components/schemas/Pet"})).expect("rewrite")
        }});
        defs.attach(&mut root).expect("attach");
        assert_eq!(root["properties"]["pet"], json!({"$ref": "#/$defs/Pet"}));
        assert_eq!(
            root["$defs"]["Pet"]["properties"]["category"],
            json!({"$ref": "#/$defs/Category"})
        );
        assert!(root["$defs"]["Category"].is_object());
        assert!(root["$defs"].get("Unused").is_none());
        let validator = jsonschema::validator_for(&root).expect("compiles");
        assert!(validator.is_valid(&json!({"pet": {"category": {"name": "dogs"}}})));
        assert!(!validator.is_valid(&json!({"pet": {"category": {"name": 3}}})));
    }

    #[test]
    fn an_unresolvable_or_foreign_reference_is_named() {
        let components = components(json!({}));
        let mut defs = Defs::new(&components);
        let err = defs
            .rewrite(&json!({"$ref": "#/components/schemas/Gone"}))
            .expect_err("gone");
        assert!(err.contains("names no schema"), "{err}");
        let err = defs
            .rewrite(&json!({"items": {"$ref": "other.yaml#/Pet"}}))
            .expect_err("foreign");
        assert!(
            err.contains("does not point into #/components/schemas"),
            "{err}"
        );
    }

    #[test]
    fn objects_are_recognised_through_a_reference() {
        let components = components(json!({"Pet": {"properties": {"id": {"type": "integer"}}}}));
        let pet = json!({"$ref": "#/components/schemas/Pet"});
        assert!(is_object(components.follow(&pet).expect("follow")));
        assert!(!is_object(&json!({"type": "array"})));
        assert!(!is_object(&json!({"type": ["object", "null"]})));
    }
}
