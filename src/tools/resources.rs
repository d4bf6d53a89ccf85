//! Resource declarations: what `resources/list` lists, what `resources/read` returns, and
//! the providers that serve them (fixed documents or a URI template).

use serde_json::Value;

/// A readable resource, listed by `resources/list`.
#[derive(Debug, Clone)]
pub struct ResourceSpec {
    /// The URI.
    pub uri: String,
    /// Short name.
    pub name: String,
    /// Human title.
    pub title: String,
    /// What it holds.
    pub description: String,
    /// MIME type of its contents.
    pub mime_type: String,
}

/// The contents of a resource as `resources/read` returns them.
#[derive(Debug, Clone)]
pub enum ResourceBody {
    /// UTF-8 text.
    Text(String),
    /// Binary, sent base64-encoded.
    Blob(Vec<u8>),
}

/// A source of resources: fixed documents or a URI template.
pub trait ResourceProvider: Send + Sync {
    /// The concrete resources it lists.
    fn list(&self) -> Vec<ResourceSpec>;
    /// URI templates it serves (`resources/templates/list` entries).
    fn templates(&self) -> Vec<Value> {
        Vec::new()
    }
    /// Reads `uri`; `None` when this provider does not serve it.
    fn read(&self, uri: &str) -> Option<(String, ResourceBody)>;
    /// The URIs of its resources that can change while the server runs (a tool changes
    /// them and calls [`crate::tools::ToolContext::resource_changed`]); the others never change.
    fn changing(&self) -> &[&'static str] {
        &[]
    }
}
