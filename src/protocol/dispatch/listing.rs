//! The `*/list` methods, paged behind an opaque cursor: `tools/list` (the tools the caller
//! may see, by scope and plan), `resources/list`, `resources/templates/list` and
//! `prompts/list` (the prompts whose data the caller may read). An upstream MCP server's
//! resources, templates and prompts follow tollgate's own, listed to a caller who may read
//! them (its backend's read scope and the plan).

use serde_json::{Value, json};

use super::Server;
use crate::catalog::McpError;
use crate::guards::auth::Principal;
use crate::protocol::jsonrpc::Request;
use crate::protocol::pagination::{paginate, with_cursor};

impl Server {
    /// `tools/list`: the tools `principal` may call (its scopes and its plan).
    pub(super) fn list_tools(
        &self,
        req: &Request,
        principal: &Principal,
    ) -> Result<Value, McpError> {
        // An operator's decision on an upstream tool's definition, made on any node,
        // applies from the next listing on.
        self.backends.review_pins();
        let visibility = self.guards.visibility(principal);
        let visible: Vec<Value> = self
            .registry()
            .tools()
            .iter()
            .filter(|t| visibility.can_see(t.spec()))
            .map(|t| t.spec().to_list_entry())
            .collect();
        let (page, next) = paginate(visible, req, "tools")?;
        Ok(with_cursor(json!({ "tools": page }), next))
    }

    /// `resources/list`: every resource, sorted by URI.
    pub(super) fn list_resources(
        &self,
        req: &Request,
        principal: &Principal,
    ) -> Result<Value, McpError> {
        let mut all: Vec<Value> = self
            .registry()
            .resources()
            .into_iter()
            .map(|r| {
                json!({ "uri": r.uri, "name": r.name, "title": r.title,
                        "description": r.description, "mimeType": r.mime_type })
            })
            .collect();
        all.extend(self.visible(self.backends.resources(), principal));
        let (page, next) = paginate(all, req, "resources")?;
        Ok(with_cursor(json!({ "resources": page }), next))
    }

    /// `resources/templates/list`.
    pub(super) fn list_resource_templates(
        &self,
        req: &Request,
        principal: &Principal,
    ) -> Result<Value, McpError> {
        let mut templates = self.registry().resource_templates();
        templates.extend(self.visible(self.backends.resource_templates(), principal));
        let (page, next) = paginate(templates, req, "templates")?;
        Ok(with_cursor(json!({ "resourceTemplates": page }), next))
    }

    /// The prompts `principal` may get: those that read no business data, and those whose
    /// data's read tool it would see in `tools/list`.
    pub(super) fn list_prompts(
        &self,
        req: &Request,
        principal: &Principal,
    ) -> Result<Value, McpError> {
        let visibility = self.guards.visibility(principal);
        let registry = self.registry();
        let all: Vec<Value> = registry
            .prompts()
            .iter()
            .filter(|p| {
                p.spec().reads.is_none_or(|access| {
                    registry
                        .reader(&access)
                        .is_some_and(|tool| visibility.can_see(tool.spec()))
                })
            })
            .map(|p| {
                let s = p.spec();
                let args: Vec<Value> = s
                    .arguments
                    .iter()
                    .map(|a| json!({ "name": a.name, "description": a.description, "required": a.required }))
                    .collect();
                json!({ "name": s.name, "title": s.title, "description": s.description, "arguments": args })
            })
            .collect();
        // An operator's decision on an upstream prompt's definition applies from the next
        // listing on.
        self.backends.review_pins();
        let mut all = all;
        all.extend(self.visible(self.backends.prompts(), principal));
        let (page, next) = paginate(all, req, "prompts")?;
        Ok(with_cursor(json!({ "prompts": page }), next))
    }
}

impl Server {
    /// The entries of `offered` whose backend's subject `principal` may see.
    fn visible(
        &self,
        offered: Vec<crate::tools::backends::Offered>,
        principal: &Principal,
    ) -> Vec<Value> {
        if offered.is_empty() {
            return Vec::new();
        }
        let visibility = self.guards.visibility(principal);
        offered
            .into_iter()
            .filter(|o| visibility.can_see(&o.subject))
            .map(|o| o.entry)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::dispatch::testing::{Fixture, request};

    fn names(result: &Value, list: &str) -> Vec<String> {
        result[list]
            .as_array()
            .unwrap_or_else(|| panic!("{list} in {result}"))
            .iter()
            .map(|entry| entry["name"].as_str().expect("a name").to_owned())
            .collect()
    }

    #[test]
    fn tools_list_shows_only_the_tools_of_the_callers_scopes() {
        let fx = Fixture::invoicing();
        let list = request("tools/list", json!({}));
        let everything = fx
            .server
            .list_tools(&list, &fx.principal(&["*"]))
            .expect("listed");
        let readers = fx
            .server
            .list_tools(&list, &fx.principal(&["clients:read"]))
            .expect("listed");
        let readers = names(&readers, "tools");
        assert!(
            readers.contains(&"search_clients".to_owned()),
            "{readers:?}"
        );
        assert!(
            !readers.contains(&"create_client".to_owned()),
            "{readers:?}"
        );
        assert!(names(&everything, "tools").len() > readers.len());
    }

    #[test]
    fn a_cursor_of_another_list_or_of_another_kind_is_invalid_params() {
        let fx = Fixture::invoicing();
        let principal = fx.principal(&["*"]);
        for cursor in [json!("not a cursor"), json!(7)] {
            let list = request("tools/list", json!({ "cursor": cursor }));
            let err = fx
                .server
                .list_tools(&list, &principal)
                .expect_err("refused");
            assert_eq!(err.fields()["param"], json!("cursor"), "{cursor}");
        }
        let null = request("prompts/list", json!({ "cursor": null }));
        assert!(fx.server.list_prompts(&null, &principal).is_ok());
    }

    #[test]
    fn a_prompt_that_reads_data_is_listed_only_for_a_caller_who_may_read_it() {
        let fx = Fixture::invoicing();
        let list = request("prompts/list", json!({}));
        let all = fx
            .server
            .list_prompts(&list, &fx.principal(&["*"]))
            .expect("listed");
        let none = fx
            .server
            .list_prompts(&list, &fx.principal(&["no:such"]))
            .expect("listed");
        let reading: Vec<String> = fx
            .server
            .registry()
            .prompts()
            .iter()
            .filter(|p| p.spec().reads.is_some())
            .map(|p| p.spec().name.to_owned())
            .collect();
        assert!(
            !reading.is_empty(),
            "the built-in prompts read business data"
        );
        let all = names(&all, "prompts");
        let none = names(&none, "prompts");
        assert!(reading.iter().all(|name| all.contains(name)), "{all:?}");
        assert!(reading.iter().all(|name| !none.contains(name)), "{none:?}");
    }

    #[test]
    fn resources_are_listed_in_the_order_of_their_uris() {
        let fx = Fixture::invoicing();
        let listed = fx
            .server
            .list_resources(&request("resources/list", json!({})), &fx.principal(&["*"]))
            .expect("listed");
        let uris: Vec<&str> = listed["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .map(|r| r["uri"].as_str().expect("a uri"))
            .collect();
        let mut sorted = uris.clone();
        sorted.sort_unstable();
        assert!(!uris.is_empty());
        assert_eq!(uris, sorted);
        assert_eq!(listed.get("nextCursor"), None, "one page");
    }
}
