//! Reading an OpenAPI 3.0 or 3.1 document (JSON or YAML) into the operations it offers:
//! for each, the [`Operation`] a tool is made of (name, category, description, input and
//! output schemas) and the [`Endpoint`] a call is sent to (method, path template, where each
//! argument goes).
//!
//! The document is read into the `oas3` model; a 3.0 document is first lifted to 3.1
//! ([`schema::lift_30`]), whose structure (paths, operations, parameters, bodies, responses,
//! components) is the same. Everything the document gets wrong is a message for the
//! operator naming the operation by method and path.

use std::collections::BTreeSet;
use std::path::Path;

use oas3::spec::{ObjectOrReference, Parameter, ParameterIn, ParameterStyle, RequestBody};
use reqwest::Method;
use serde_json::{Map, Value, json};

use super::schema::{self, Components, Defs};
use crate::tools::Category;
use crate::tools::backends::{Operation, snake_case};
use crate::tools::schema::KEY_ARGUMENT;

/// The longest description a tool gets from its operation's summary and description.
const MAX_DESCRIPTION_CHARS: usize = 2000;
/// The longest summary used as a tool's title.
const MAX_TITLE_CHARS: usize = 100;
/// The argument holding the request body when its properties cannot sit at the top level.
pub(super) const BODY_ARGUMENT: &str = "body";
/// Header parameters a caller never sets: HTTP and the backend credential own them.
const RESERVED_HEADERS: &[&str] = &["authorization", "content-type", "accept", "idempotency-key"];

/// Where a parameter goes in the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Location {
    /// Into the path template (`/pets/{id}`).
    Path,
    /// Into the query string.
    Query,
    /// Into a request header.
    Header,
}

/// One parameter of an operation: the argument of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Param {
    /// Its name in the document and as an argument.
    pub name: String,
    /// Where it goes.
    pub location: Location,
    /// Whether an array or object query value is sent as repeated pairs (`explode`, true by
    /// default for the `form` style) or comma-joined.
    pub explode: bool,
}

/// How the JSON request body is built from the arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Body {
    /// The operation takes no body.
    None,
    /// The body object's properties are arguments of their own, at the top level; an
    /// optional body none of whose properties is given is not sent.
    Merged {
        /// The properties.
        names: Vec<String>,
        /// Whether the body is sent even when empty.
        required: bool,
    },
    /// The whole body is the `body` argument.
    Wrapped,
}

/// Where and how one operation is called.
#[derive(Debug, Clone)]
pub(super) struct Endpoint {
    /// The HTTP method.
    pub method: Method,
    /// The path template, relative to the base URL.
    pub path: String,
    /// Its parameters.
    pub params: Vec<Param>,
    /// Its body.
    pub body: Body,
}

/// A document read: its operations and its first server URL.
#[derive(Debug)]
pub(super) struct Document {
    /// The first `servers[].url`, its variables set to their defaults.
    pub server_url: Option<String>,
    /// Every operation, in the document's order, but those an override disabled.
    pub operations: Vec<(Operation, Endpoint)>,
    /// The operations an override disabled (snake case), which were not read further.
    pub disabled: Vec<String>,
}

/// The text of the document file at `path`.
pub(super) fn read_file(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the OpenAPI document {}: {e}", path.display()))
}

/// Reads the document `text`, named `label` (its path or URL) in messages.
/// `credential_header` (lower-case) is left out of the arguments like `Authorization`;
/// `disabled` names operations (snake case) the operator turned off, which may use what
/// tollgate cannot send.
pub(super) fn load(
    text: &str,
    label: &str,
    credential_header: Option<&str>,
    disabled: &dyn Fn(&str) -> bool,
) -> Result<Document, String> {
    let spec = parse(text, label)?;
    let components = Components::of(&spec)?;
    let reader = Reader {
        spec: &spec,
        components: &components,
        credential_header,
    };
    let mut names = BTreeSet::new();
    let mut operations = Vec::new();
    let mut skipped = Vec::new();
    for (path, item) in spec.paths.iter().flatten() {
        for (method, op) in item.methods() {
            let Some(name) = op.operation_id.as_deref().map(snake_case) else {
                return Err(format!(
                    "operation {method} {path} has no operationId; add one to the document"
                ));
            };
            if name.is_empty() {
                return Err(format!(
                    "operation {method} {path}: operationId {:?} has no letter or digit",
                    op.operation_id.as_deref().unwrap_or_default()
                ));
            }
            if !names.insert(name.clone()) {
                return Err(format!(
                    "operation {method} {path}: another operation is also named {name} \
                     (operationIds must differ in snake case)"
                ));
            }
            if disabled(&name) {
                skipped.push(name);
                continue;
            }
            let read = reader
                .operation(path, &method, &item.parameters, op, &name)
                .map_err(|e| format!("operation {method} {path} ({name}): {e}"))?;
            operations.push(read);
        }
    }
    Ok(Document {
        server_url: spec.servers.first().map(server_url),
        operations,
        disabled: skipped,
    })
}

/// Parses the document, lifting a 3.0 one to 3.1; JSON when `label` ends in `.json` or
/// the text starts with `{`, YAML otherwise.
fn parse(text: &str, label: &str) -> Result<oas3::Spec, String> {
    let json = label.to_ascii_lowercase().ends_with(".json") || text.trim_start().starts_with('{');
    let mut value: Value = if json {
        serde_json::from_str(text).map_err(|e| e.to_string())
    } else {
        yaml_serde::from_str(text).map_err(|e| e.to_string())
    }
    .map_err(|e| format!("the OpenAPI document {label} is not valid: {e}"))?;
    let version = value
        .get("openapi")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if version.starts_with("3.0") {
        schema::lift_30(&mut value);
        value["openapi"] = json!("3.1.0");
    } else if !version.starts_with("3.1") {
        return Err(format!(
            "{label} is not an OpenAPI 3.0 or 3.1 document (its `openapi` is {version:?})"
        ));
    }
    serde_json::from_value(value)
        .map_err(|e| format!("the OpenAPI document {label} does not follow OpenAPI {version}: {e}"))
}

/// A server's URL with its variables replaced by their defaults.
fn server_url(server: &oas3::spec::Server) -> String {
    let mut url = server.url.clone();
    for (name, variable) in &server.variables {
        url = url.replace(&format!("{{{name}}}"), &variable.default);
    }
    url.trim_end_matches('/').to_owned()
}

/// Reads operations of one document.
struct Reader<'a> {
    spec: &'a oas3::Spec,
    components: &'a Components,
    credential_header: Option<&'a str>,
}

/// An operation's arguments as they are being collected.
struct Arguments {
    properties: Map<String, Value>,
    required: Vec<Value>,
}

impl Arguments {
    fn add(&mut self, name: &str, schema: Value, required: bool) -> Result<(), String> {
        if name == KEY_ARGUMENT {
            return Err(format!(
                "a parameter is named {name:?}, the argument tollgate's own idempotency key takes; rename it in the document"
            ));
        }
        if self.properties.insert(name.to_owned(), schema).is_some() {
            return Err(format!(
                "two of its parameters would both be the argument {name:?}"
            ));
        }
        if required {
            self.required.push(Value::String(name.to_owned()));
        }
        Ok(())
    }
}

impl Reader<'_> {
    fn operation(
        &self,
        path: &str,
        method: &Method,
        shared: &[ObjectOrReference<Parameter>],
        op: &oas3::spec::Operation,
        name: &str,
    ) -> Result<(Operation, Endpoint), String> {
        let mut defs = Defs::new(self.components);
        let mut args = Arguments {
            properties: Map::new(),
            required: Vec::new(),
        };
        let params = self.parameters(shared, &op.parameters, &mut defs, &mut args)?;
        if let Some(unfilled) = template_names(path).find(|name| {
            !params
                .iter()
                .any(|p| p.location == Location::Path && p.name == *name)
        }) {
            return Err(format!(
                "its path names {{{unfilled}}}, which no path parameter declares; declare it in the document"
            ));
        }
        let body = self.body(op, &mut defs, &mut args)?;
        let mut input_schema = json!({
            "type": "object",
            "properties": Value::Object(args.properties),
            "additionalProperties": false,
        });
        if !args.required.is_empty() {
            input_schema["required"] = Value::Array(args.required);
        }
        defs.attach(&mut input_schema)?;
        let output_schema = self.output_schema(op)?;
        let operation = Operation {
            name: name.to_owned(),
            title: title(op),
            description: description(op, method, path),
            category: category(method),
            input_schema,
            output_schema,
        };
        let endpoint = Endpoint {
            method: method.clone(),
            path: path.to_owned(),
            params,
            body,
        };
        Ok((operation, endpoint))
    }

    /// The path item's parameters overridden by the operation's own (same name and place).
    fn parameters(
        &self,
        shared: &[ObjectOrReference<Parameter>],
        own: &[ObjectOrReference<Parameter>],
        defs: &mut Defs<'_>,
        args: &mut Arguments,
    ) -> Result<Vec<Param>, String> {
        let mut all: Vec<Parameter> = Vec::new();
        for reference in shared.iter().chain(own) {
            let param = reference.resolve(self.spec).map_err(|e| e.to_string())?;
            all.retain(|p| !(p.name == param.name && p.location == param.location));
            all.push(param);
        }
        let mut params = Vec::new();
        for param in all {
            let location = match param.location {
                ParameterIn::Path => Location::Path,
                ParameterIn::Query => Location::Query,
                ParameterIn::Header if self.is_reserved(&param.name) => continue,
                ParameterIn::Header => Location::Header,
                // Cookies are the client's business, never an argument of a tool.
                ParameterIn::Cookie => continue,
            };
            let mut property = match &param.schema {
                Some(schema) => {
                    defs.rewrite(&serde_json::to_value(schema).map_err(|e| e.to_string())?)?
                }
                None => json!({}),
            };
            if let (Some(text), Value::Object(object)) = (&param.description, &mut property)
                && !object.contains_key("description")
            {
                object.insert("description".into(), json!(text.trim()));
            }
            let required = location == Location::Path || param.required == Some(true);
            args.add(&param.name, property, required)?;
            let form = matches!(param.style, None | Some(ParameterStyle::Form));
            params.push(Param {
                explode: param.explode.unwrap_or(form),
                name: param.name,
                location,
            });
        }
        Ok(params)
    }

    fn is_reserved(&self, header: &str) -> bool {
        let lower = header.to_ascii_lowercase();
        RESERVED_HEADERS.contains(&lower.as_str()) || self.credential_header == Some(&lower)
    }

    /// The request body's arguments.
    fn body(
        &self,
        op: &oas3::spec::Operation,
        defs: &mut Defs<'_>,
        args: &mut Arguments,
    ) -> Result<Body, String> {
        let Some(reference) = &op.request_body else {
            return Ok(Body::None);
        };
        let body: RequestBody = reference.resolve(self.spec).map_err(|e| e.to_string())?;
        let Some(media) = json_media(&body.content) else {
            let types: Vec<&str> = body.content.keys().map(String::as_str).collect();
            return Err(format!(
                "its request body is {}, and only JSON bodies can be sent; disable the tool \
                 with enabled = false in its [backends.tools] entry, or add an \
                 application/json body to the document",
                types.join(", ")
            ));
        };
        let required = body.required == Some(true);
        let declared = match &media.schema {
            Some(schema) => serde_json::to_value(schema).map_err(|e| e.to_string())?,
            None => json!({}),
        };
        let target = self.components.follow(&declared)?;
        let properties = target.get("properties").and_then(Value::as_object);
        let open = matches!(
            target.get("additionalProperties"),
            Some(Value::Bool(true) | Value::Object(_))
        );
        if let Some(properties) = properties.filter(|p| {
            schema::is_object(target)
                && !open
                && !p.is_empty()
                && !p
                    .keys()
                    .any(|k| args.properties.contains_key(k) || k == KEY_ARGUMENT)
        }) {
            let body_required: Vec<&str> = target
                .get("required")
                .and_then(Value::as_array)
                .map(|names| names.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut names = Vec::new();
            for (name, property) in properties {
                let property = defs.rewrite(property)?;
                args.add(
                    name,
                    property,
                    required && body_required.contains(&name.as_str()),
                )?;
                names.push(name.clone());
            }
            return Ok(Body::Merged { names, required });
        }
        let mut property = defs.rewrite(&declared)?;
        if let (Some(text), Value::Object(object)) = (&body.description, &mut property)
            && !object.contains_key("description")
        {
            object.insert("description".into(), json!(text.trim()));
        }
        args.add(BODY_ARGUMENT, property, required)?;
        Ok(Body::Wrapped)
    }

    /// The schema of the first 2xx JSON response, when it describes an object.
    fn output_schema(&self, op: &oas3::spec::Operation) -> Result<Option<Value>, String> {
        let mut responses: Vec<(&String, &ObjectOrReference<oas3::spec::Response>)> = op
            .responses
            .iter()
            .flatten()
            .filter(|(code, _)| code.starts_with('2'))
            .collect();
        responses.sort_by(|a, b| a.0.cmp(b.0));
        for (code, reference) in responses {
            let response = reference
                .resolve(self.spec)
                .map_err(|e| format!("response {code}: {e}"))?;
            let Some(media) = json_media(&response.content) else {
                continue;
            };
            let Some(declared) = &media.schema else {
                return Ok(None);
            };
            let declared = serde_json::to_value(declared).map_err(|e| e.to_string())?;
            let target = self.components.follow(&declared)?;
            if !schema::is_object(target) {
                return Ok(None);
            }
            let mut defs = Defs::new(self.components);
            let mut root = defs.rewrite(target)?;
            root["type"] = json!("object");
            defs.attach(&mut root)?;
            return Ok(Some(root));
        }
        Ok(None)
    }
}

/// The names a path template leaves to fill (`/pets/{petId}` → `petId`).
fn template_names(path: &str) -> impl Iterator<Item = &str> {
    path.split('{')
        .skip(1)
        .filter_map(|part| part.split_once('}').map(|(name, _)| name))
}

/// The JSON media type of a content map (`application/json`, `…+json`), if any.
fn json_media(
    content: &oas3::Map<String, oas3::spec::MediaType>,
) -> Option<&oas3::spec::MediaType> {
    content
        .iter()
        .find(|(kind, _)| is_json(kind))
        .map(|(_, media)| media)
}

/// Whether a media type (parameters allowed) is JSON.
pub(super) fn is_json(media_type: &str) -> bool {
    let essence = media_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// GET and HEAD read, DELETE destroys, the rest write.
fn category(method: &Method) -> Category {
    match *method {
        Method::GET | Method::HEAD => Category::Read,
        Method::DELETE => Category::Destructive,
        _ => Category::Write,
    }
}

fn title(op: &oas3::spec::Operation) -> Option<String> {
    op.summary
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.chars().count() <= MAX_TITLE_CHARS && !s.contains('\n'))
        .map(str::to_owned)
}

/// Summary and description, trimmed and bounded; `METHOD /path` when it has neither.
fn description(op: &oas3::spec::Operation, method: &Method, path: &str) -> String {
    let parts: Vec<&str> = [op.summary.as_deref(), op.description.as_deref()]
        .into_iter()
        .flatten()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let mut text = match parts.as_slice() {
        [] => format!("{method} {path}"),
        [one] => (*one).to_owned(),
        [summary, rest @ ..] if rest.iter().all(|r| r == summary) => (*summary).to_owned(),
        many => many.join("\n\n"),
    };
    if let Some((cut, _)) = text.char_indices().nth(MAX_DESCRIPTION_CHARS) {
        text.truncate(cut);
        text.push('…');
    }
    text
}
