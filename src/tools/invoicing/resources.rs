//! The guardrail guides as MCP resources: one markdown document per rule at its
//! `guardrail_uri`, listed by `resources/list` and returned by `resources/read`, so a model
//! that hit `-32008` can read why and correct its arguments.

use super::guardrails::{RULES, URI_PREFIX};
use crate::tools::{ResourceBody, ResourceProvider, ResourceSpec};

/// MIME type of the guides.
pub const GUIDE_MIME_TYPE: &str = "text/markdown";

/// Serves `tollgate://guardrails/<rule_id>`.
#[derive(Debug, Default)]
pub struct GuardrailGuides;

impl ResourceProvider for GuardrailGuides {
    fn list(&self) -> Vec<ResourceSpec> {
        RULES
            .iter()
            .map(|rule| ResourceSpec {
                uri: rule.uri(),
                name: format!("guardrail-{}", rule.id),
                title: rule.title.to_owned(),
                description: rule.summary.to_owned(),
                mime_type: GUIDE_MIME_TYPE.to_owned(),
            })
            .collect()
    }

    fn read(&self, uri: &str) -> Option<(String, ResourceBody)> {
        let id = uri.strip_prefix(URI_PREFIX)?;
        let rule = RULES.iter().find(|r| r.id == id)?;
        Some((
            GUIDE_MIME_TYPE.to_owned(),
            ResourceBody::Text(rule.guide.to_owned()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_guide_reads_back_as_markdown() {
        let guides = GuardrailGuides;
        let listed = guides.list();
        assert_eq!(listed.len(), RULES.len());
        for spec in listed {
            let (mime, body) = guides.read(&spec.uri).expect("listed guide reads");
            assert_eq!(mime, "text/markdown");
            assert!(matches!(body, ResourceBody::Text(text) if text.starts_with("# ")));
        }
        assert!(guides.read("tollgate://guardrails/nope").is_none());
        assert!(guides.read("test://static-text").is_none());
    }
}
