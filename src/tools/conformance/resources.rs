//! The conformance pack's resources: the fixed documents the suite reads
//! (`test://static-text`, `test://static-binary`, `test://watched-resource`) and the two
//! the fixture tools embed in their results, and the template `test://template/{id}/data`.
//! One can change: `test_update_watched_resource` gives `test://watched-resource` a new
//! revision ([`WATCHED_REVISION`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::media::PNG_1X1;
use crate::tools::{ResourceBody, ResourceProvider, ResourceSpec};

/// The contents of a fixed document.
enum Body {
    Text(&'static str),
    Blob(&'static [u8]),
}

/// A fixed, readable document of the pack.
pub(super) struct Document {
    /// Its URI.
    pub(super) uri: &'static str,
    name: &'static str,
    title: &'static str,
    description: &'static str,
    mime_type: &'static str,
    body: Body,
}

const STATIC_TEXT: Document = Document {
    uri: "test://static-text",
    name: "static-text",
    title: "Static Text Resource",
    description: "A static text resource for conformance testing.",
    mime_type: "text/plain",
    body: Body::Text("This is the content of the static text resource."),
};

const STATIC_BINARY: Document = Document {
    uri: "test://static-binary",
    name: "static-binary",
    title: "Static Binary Resource",
    description: "A static binary resource (a 1x1 PNG image) for conformance testing.",
    mime_type: "image/png",
    body: Body::Blob(PNG_1X1),
};

/// How many times `test_update_watched_resource` changed `test://watched-resource` in this
/// process (its text names the revision from the first change on).
pub(super) static WATCHED_REVISION: AtomicU64 = AtomicU64::new(0);

/// The text of `test://watched-resource` at its current revision.
fn watched_text() -> String {
    match WATCHED_REVISION.load(Ordering::Relaxed) {
        0 => "Watched resource content".to_owned(),
        n => format!("Watched resource content (revision {n})"),
    }
}

pub(super) const WATCHED: Document = Document {
    uri: "test://watched-resource",
    name: "watched-resource",
    title: "Watched Resource",
    description: "A text resource clients may subscribe to, for conformance testing; \
                  test_update_watched_resource changes it.",
    mime_type: "text/plain",
    // Read through `watched_text`, which follows the revision.
    body: Body::Text("Watched resource content"),
};

pub(super) const EMBEDDED: Document = Document {
    uri: "test://embedded-resource",
    name: "embedded-resource",
    title: "Embedded Resource",
    description: "The text resource that test_embedded_resource embeds in its result.",
    mime_type: "text/plain",
    body: Body::Text("This is an embedded resource content."),
};

pub(super) const MIXED: Document = Document {
    uri: "test://mixed-content-resource",
    name: "mixed-content-resource",
    title: "Mixed Content Resource",
    description: "The JSON resource that test_multiple_content_types embeds in its result.",
    mime_type: "application/json",
    body: Body::Text(r#"{"test":"data","value":123}"#),
};

static DOCUMENTS: [&Document; 5] = [&STATIC_TEXT, &STATIC_BINARY, &WATCHED, &EMBEDDED, &MIXED];

impl Document {
    fn spec(&self) -> ResourceSpec {
        ResourceSpec {
            uri: self.uri.to_owned(),
            name: self.name.to_owned(),
            title: self.title.to_owned(),
            description: self.description.to_owned(),
            mime_type: self.mime_type.to_owned(),
        }
    }

    fn resource_body(&self) -> ResourceBody {
        match self.body {
            Body::Text(text) => ResourceBody::Text(text.to_owned()),
            Body::Blob(bytes) => ResourceBody::Blob(bytes.to_vec()),
        }
    }

    /// The document as a `resource` content block (embedded resource).
    pub(super) fn embedded_block(&self) -> Value {
        let mut resource = json!({ "uri": self.uri, "mimeType": self.mime_type });
        match self.body {
            Body::Text(text) => resource["text"] = json!(text),
            Body::Blob(bytes) => resource["blob"] = json!(STANDARD.encode(bytes)),
        }
        json!({ "type": "resource", "resource": resource })
    }
}

/// The fixed documents: `test://static-text`, `test://static-binary`,
/// `test://watched-resource` and the two resources the tools embed.
struct FixtureDocuments;

impl ResourceProvider for FixtureDocuments {
    fn list(&self) -> Vec<ResourceSpec> {
        DOCUMENTS.iter().map(|doc| doc.spec()).collect()
    }

    fn read(&self, uri: &str) -> Option<(String, ResourceBody)> {
        let doc = DOCUMENTS.iter().find(|doc| doc.uri == uri)?;
        let body = match doc.uri {
            uri if uri == WATCHED.uri => ResourceBody::Text(watched_text()),
            _ => doc.resource_body(),
        };
        Some((doc.mime_type.to_owned(), body))
    }

    fn changing(&self) -> &[&'static str] {
        &[WATCHED.uri]
    }
}

const TEMPLATE_URI: &str = "test://template/{id}/data";
const TEMPLATE_PREFIX: &str = "test://template/";
const TEMPLATE_SUFFIX: &str = "/data";

/// The resource template `test://template/{id}/data`, readable for any single-segment id.
struct DataTemplate;

impl DataTemplate {
    /// The `{id}` of a concrete URI of this template, when `uri` is one.
    fn id_of(uri: &str) -> Option<&str> {
        let id = uri
            .strip_prefix(TEMPLATE_PREFIX)?
            .strip_suffix(TEMPLATE_SUFFIX)?;
        let single_segment = !id.is_empty() && !id.contains(['/', '?', '#']);
        single_segment.then_some(id)
    }
}

impl ResourceProvider for DataTemplate {
    fn list(&self) -> Vec<ResourceSpec> {
        Vec::new()
    }

    fn templates(&self) -> Vec<Value> {
        vec![json!({
            "uriTemplate": TEMPLATE_URI,
            "name": "template",
            "title": "Resource Template",
            "description": "A resource template with parameter substitution: reading \
                            test://template/<id>/data returns a JSON document naming <id>.",
            "mimeType": "application/json",
        })]
    }

    fn read(&self, uri: &str) -> Option<(String, ResourceBody)> {
        let id = Self::id_of(uri)?;
        // The suite compares this text; keys stay in this order (serde_json preserve_order).
        let text = json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") })
            .to_string();
        Some(("application/json".to_owned(), ResourceBody::Text(text)))
    }
}

/// The fixture documents and the `test://template/{id}/data` template.
pub fn resources() -> Vec<Arc<dyn ResourceProvider>> {
    vec![Arc::new(FixtureDocuments), Arc::new(DataTemplate)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Registry;

    fn registry() -> Registry {
        Registry::new(Vec::new(), &[], resources(), Vec::new()).expect("resources only")
    }

    #[test]
    fn resources_list_the_fixture_documents() {
        let uris: Vec<String> = registry().resources().into_iter().map(|r| r.uri).collect();
        assert_eq!(
            uris,
            [
                "test://embedded-resource",
                "test://mixed-content-resource",
                "test://static-binary",
                "test://static-text",
                "test://watched-resource",
            ]
        );
        for spec in registry().resources() {
            assert!(!spec.name.is_empty() && !spec.description.is_empty());
            assert!(!spec.title.is_empty() && !spec.mime_type.is_empty());
        }
    }

    fn read_text(uri: &str) -> (String, String) {
        match registry().read_resource(uri) {
            Some((mime, ResourceBody::Text(text))) => (mime, text),
            other => panic!("{uri}: expected text, got {:?}", other.map(|(m, _)| m)),
        }
    }

    #[test]
    fn static_resources_read_with_the_suite_contents() {
        let text = read_text("test://static-text");
        assert_eq!(text.0, "text/plain");
        assert_eq!(text.1, "This is the content of the static text resource.");
        let watched = read_text("test://watched-resource");
        assert_eq!(watched.0, "text/plain");
        assert!(
            watched.1.starts_with("Watched resource content"),
            "{}",
            watched.1
        );
        match registry().read_resource("test://static-binary") {
            Some((mime, ResourceBody::Blob(bytes))) => {
                assert_eq!(mime, "image/png");
                assert_eq!(bytes, PNG_1X1);
            }
            _ => panic!("static-binary is not a blob"),
        }
        assert!(registry().read_resource("test://nonexistent").is_none());
    }

    #[test]
    fn template_read_for_id_123_is_the_exact_json() {
        let (mime, text) = read_text("test://template/123/data");
        assert_eq!(mime, "application/json");
        assert_eq!(
            text,
            r#"{"id":"123","templateTest":true,"data":"Data for ID: 123"}"#
        );
        for bad in [
            "test://template//data",
            "test://template/1/2/data",
            "test://template/123",
            "test://template/123/data/x",
        ] {
            assert!(registry().read_resource(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn template_is_listed_with_all_fields() {
        let templates = registry().resource_templates();
        assert_eq!(templates.len(), 1);
        let t = &templates[0];
        assert_eq!(t["uriTemplate"], "test://template/{id}/data");
        assert_eq!(t["name"], "template");
        assert_eq!(t["mimeType"], "application/json");
        assert!(t["title"].is_string() && t["description"].is_string());
    }
}
