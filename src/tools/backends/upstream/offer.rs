//! An upstream's resources, resource templates and prompts: read when a session starts and
//! again after `notifications/resources/list_changed` or `notifications/prompts/list_changed`
//! (at the gate's pace, [`super::relist`]), each kind only when the backend exposes it
//! (`expose`) and the upstream declared it at the handshake.
//!
//! The lists are kept as the upstream presents them (its own URIs and names); the gate's
//! URIs and names are made where they are offered ([`crate::tools::backends`]). A prompt is
//! offered under its name made safe (`args-prompt` → `args_prompt`; the map back is kept),
//! and is pinned like a tool ([`crate::tools::backends::pins`]): a prompt whose definition
//! differs from the approved one is held, absent from `prompts/list` and refused by
//! `prompts/get`. At most [`MAX_ENTRIES`] of each kind are offered; the rest are counted.

use std::collections::HashMap;
use std::future::Future;

use rmcp::model::PaginatedRequestParams;
use rmcp::{Peer, RoleClient, ServiceError};
use serde_json::Value;

use super::listing::{holds_of, safe_name};
use super::read_pages;
use crate::config::Exposed;
use crate::tools::backends::TOOL_NAME_MAX_CHARS;
use crate::tools::backends::pins::{Hold, Pins, Presented};

/// The most resources, resource templates or prompts of one upstream offered, each.
pub(super) const MAX_ENTRIES: usize = 1024;

/// What an upstream offers besides its tools, as the gate offers it now.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Offer {
    /// Its resources, as it lists them.
    pub(super) resources: Vec<Value>,
    /// Its resource templates, as it lists them.
    pub(super) templates: Vec<Value>,
    /// Its prompts offered now: the name after the backend's prefix, and the entry as the
    /// upstream lists it.
    pub(super) prompts: Vec<(String, Value)>,
    /// Every prompt within the limits with its definition, the held ones included.
    candidates: Vec<(String, Value, Presented)>,
    /// The prompts held until an operator decides, with their state.
    pub(super) held: Vec<(String, &'static str)>,
    /// Whether it takes `resources/subscribe`.
    pub(super) subscribe: bool,
    /// Whether it answers `completion/complete`.
    pub(super) completes: bool,
    /// Entries left out: past [`MAX_ENTRIES`], or a prompt whose name cannot be offered.
    pub(super) left_out: usize,
}

impl Offer {
    /// The upstream's own name of the prompt offered as `operation`.
    pub(super) fn upstream_prompt(&self, operation: &str) -> Option<&str> {
        self.prompts
            .iter()
            .find(|(op, _)| op == operation)
            .and_then(|(_, entry)| entry.get("name").and_then(Value::as_str))
    }

    /// Whether its resource `uri` is listed, or matches none of its templates' fixed
    /// beginnings: what a read may ask for.
    pub(super) fn may_read(&self, uri: &str) -> bool {
        self.resources
            .iter()
            .any(|r| r.get("uri").and_then(Value::as_str) == Some(uri))
            || self.templates.iter().any(|t| {
                t.get("uriTemplate")
                    .and_then(Value::as_str)
                    .and_then(|template| template.split('{').next())
                    .is_some_and(|fixed| !fixed.is_empty() && uri.starts_with(fixed))
            })
    }

    /// Notes each prompt's definition, then offers only those `pins` approve.
    pub(super) fn pin(&mut self, pins: &Pins) {
        self.candidates = self
            .prompts
            .iter()
            .map(|(op, entry)| (op.clone(), entry.clone(), Presented::of_prompt(op, entry)))
            .collect();
        let holds = self.holds(pins);
        self.sort(holds);
    }

    /// What the decisions in the store say of each candidate now (all held when the store
    /// cannot be read).
    pub(super) fn holds(&self, pins: &Pins) -> Vec<Hold> {
        holds_of(pins, &self.presented().collect::<Vec<_>>())
    }

    /// Each candidate prompt's definition as presented, in order.
    pub(super) fn presented(&self) -> impl Iterator<Item = &Presented> {
        self.candidates.iter().map(|(_, _, p)| p)
    }

    /// Whether `holds` are the ones the prompts are sorted by now.
    pub(super) fn sorted_by(&self, holds: &[Hold]) -> bool {
        let expected =
            self.candidates
                .iter()
                .zip(holds)
                .filter_map(|((op, _, _), hold)| match hold {
                    Hold::Offered => None,
                    Hold::Held(state) => Some((op.as_str(), *state)),
                });
        expected.eq(self.held.iter().map(|(op, state)| (op.as_str(), *state)))
    }

    /// Offers the candidates `holds` says are offered and holds the others.
    pub(super) fn sort(&mut self, holds: Vec<Hold>) {
        self.prompts.clear();
        self.held.clear();
        for ((op, entry, _), hold) in self.candidates.iter().zip(holds) {
            match hold {
                Hold::Offered => self.prompts.push((op.clone(), entry.clone())),
                Hold::Held(state) => self.held.push((op.clone(), state)),
            }
        }
    }
}

/// Reads what `peer` offers besides tools, of the kinds `exposed` names and the upstream
/// declared. A list that cannot be read is left empty and logged: the tools still work.
pub(super) async fn read_offer(backend: &str, peer: &Peer<RoleClient>, exposed: Exposed) -> Offer {
    let declared = peer.peer_info().map(|info| info.capabilities.clone());
    let resources = declared.as_ref().and_then(|c| c.resources.clone());
    let prompts = declared.as_ref().is_some_and(|c| c.prompts.is_some());
    let mut offer = Offer {
        subscribe: resources
            .as_ref()
            .is_some_and(|r| r.subscribe == Some(true)),
        completes: declared.as_ref().is_some_and(|c| c.completions.is_some()),
        ..Offer::default()
    };
    let failed = |what: &str, e: String| {
        tracing::warn!(backend, error = %e, "the upstream's {what} could not be listed");
    };
    if exposed.resources && resources.is_some() {
        match read_some(|cursor| async move {
            let page = peer.list_resources(Some(params(cursor))).await?;
            Ok((values(&page.resources), page.next_cursor))
        })
        .await
        {
            Ok((listed, cut)) => (offer.resources, offer.left_out) = (listed, cut),
            Err(e) => failed("resources", e),
        }
        match read_some(|cursor| async move {
            let page = peer.list_resource_templates(Some(params(cursor))).await?;
            Ok((values(&page.resource_templates), page.next_cursor))
        })
        .await
        {
            Ok((listed, cut)) => {
                offer.templates = listed;
                offer.left_out += cut;
            }
            Err(e) => failed("resource templates", e),
        }
    }
    if exposed.prompts && prompts {
        match read_some(|cursor| async move {
            let page = peer.list_prompts(Some(params(cursor))).await?;
            Ok((values(&page.prompts), page.next_cursor))
        })
        .await
        {
            Ok((listed, cut)) => {
                let (named, unnamed) = named_prompts(listed);
                offer.prompts = named;
                offer.left_out += cut + unnamed;
            }
            Err(e) => failed("prompts", e),
        }
    }
    offer
}

/// The first [`MAX_ENTRIES`] entries of a list ([`read_pages`]), and how many more were
/// read.
async fn read_some<F, Fut>(page: F) -> Result<(Vec<Value>, usize), String>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<(Vec<Value>, Option<String>), ServiceError>>,
{
    let mut all = read_pages("entries", MAX_ENTRIES, page).await?;
    let cut = all.len().saturating_sub(MAX_ENTRIES);
    all.truncate(MAX_ENTRIES);
    Ok((all, cut))
}

fn params(cursor: Option<String>) -> PaginatedRequestParams {
    PaginatedRequestParams::default().with_cursor(cursor)
}

fn values<T: serde::Serialize>(items: &[T]) -> Vec<Value> {
    items
        .iter()
        .filter_map(|item| serde_json::to_value(item).ok())
        .collect()
}

/// The prompts offered under a safe name (the first of two with the same safe name), and
/// how many could not be.
fn named_prompts(listed: Vec<Value>) -> (Vec<(String, Value)>, usize) {
    let mut taken: HashMap<String, ()> = HashMap::new();
    let mut named = Vec::new();
    let mut unnamed = 0;
    for entry in listed {
        let safe = entry
            .get("name")
            .and_then(Value::as_str)
            .and_then(safe_name)
            .filter(|name| name.chars().count() <= TOOL_NAME_MAX_CHARS);
        match safe {
            Some(name) if taken.insert(name.clone(), ()).is_none() => named.push((name, entry)),
            _ => unnamed += 1,
        }
    }
    (named, unnamed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prompts_are_offered_under_safe_names_once_each() {
        let (named, unnamed) = named_prompts(vec![
            json!({"name": "args-prompt"}),
            json!({"name": "args_prompt"}),
            json!({"name": "---"}),
            json!({"name": "simple"}),
            json!({"title": "no name"}),
        ]);
        let names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["args_prompt", "simple"]);
        assert_eq!(unnamed, 3);
    }

    #[test]
    fn a_read_may_ask_for_a_listed_resource_or_one_a_template_makes() {
        let offer = Offer {
            resources: vec![json!({"uri": "demo://static/1", "name": "one"})],
            templates: vec![
                json!({"uriTemplate": "demo://dynamic/text/{id}", "name": "text"}),
                json!({"uriTemplate": "{whole}", "name": "anything"}),
            ],
            ..Offer::default()
        };
        assert!(offer.may_read("demo://static/1"));
        assert!(offer.may_read("demo://dynamic/text/7"));
        assert!(!offer.may_read("demo://static/2"));
        assert!(!offer.may_read("file:///etc/passwd"));
    }
}
