//! The review of upstream tools held because their definition changed (or is new under
//! manual pinning), on the backends page: for each, the definition approved until now and
//! the one presented, side by side — description and input schema, the lines that differ
//! marked — with approve and reject behind a confirmation. A decision is written to the
//! store (it applies on every node at its next `tools/list`; here at once, with
//! `notifications/tools/list_changed` to the sessions) and is an audit row under the
//! operator's credential. Definitions come from the upstream; the templates escape them.

use serde_json::{Value, json};

use super::{Console, Operator, Request, Response};
use crate::clock::format_time_ms;
use crate::store::StoreError;
use crate::store::pins::{APPROVED, Decided, PENDING, Pin, REJECTED, REPLACED};
use crate::tools::backends::pins::pinned_name as tool_name;

/// Where the forms of a held tool are: `{HELD_PATH}{backend}/{tool}/{approve|reject}`.
const HELD_PATH: &str = "/console/backends/held/";
/// Where a decision leads back to.
const BACKENDS_PATH: &str = "/console/backends";
/// The longest backend or tool name a form path may name.
const MAX_NAME_CHARS: usize = 128;

/// What a form decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Approve,
    Reject,
}

/// `{HELD_PATH}{backend}/{tool}/{approve|reject}` → its parts; `None` for any other path.
fn decision_path(path: &str) -> Option<(&str, &str, Decision)> {
    let rest = path.strip_prefix(HELD_PATH)?;
    let mut parts = rest.split('/');
    let (backend, tool, decision) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let decision = match decision {
        "approve" => Decision::Approve,
        "reject" => Decision::Reject,
        _ => return None,
    };
    let name_like = |name: &str| {
        !name.is_empty()
            && name.len() <= MAX_NAME_CHARS
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    // A prompt's pin is kept as `prompt:<name>`.
    let pinned = tool
        .strip_prefix(crate::tools::backends::pins::PROMPT_PIN)
        .unwrap_or(tool);
    (name_like(backend) && name_like(pinned)).then_some((backend, tool, decision))
}

/// A definition's parts a reviewer reads: its description, and its input schema as
/// indented JSON.
fn readable(definition: &str) -> (String, String) {
    let value: Value = serde_json::from_str(definition).unwrap_or(Value::Null);
    let description = value["description"].as_str().unwrap_or_default().to_owned();
    // A tool's input schema; a prompt's arguments.
    let input = match value.get("inputSchema") {
        Some(schema) => schema,
        None => &value["arguments"],
    };
    let schema = serde_json::to_string_pretty(input).unwrap_or_default();
    (description, schema)
}

/// `text`'s lines, each marked when `other` does not have it.
fn marked(text: &str, other: &str) -> Vec<Value> {
    let theirs: std::collections::HashSet<&str> = other.lines().collect();
    text.lines()
        .map(|line| json!({"text": line, "changed": !theirs.contains(line)}))
        .collect()
}

/// The held definitions of every backend, each with the one approved until now, for the
/// backends page; the newest presented first per tool.
pub(super) fn held(console: &Console) -> Result<Vec<Value>, StoreError> {
    let pins = console.server.store().pins(None)?;
    let mut shown = Vec::new();
    for pin in pins
        .iter()
        .filter(|p| p.state == PENDING || p.state == REJECTED)
    {
        let before = pins
            .iter()
            .filter(|p| p.backend == pin.backend && p.tool == pin.tool)
            .filter(|p| p.state == APPROVED || p.state == REPLACED)
            .max_by_key(|p| (p.state == APPROVED, p.decided_at));
        shown.push(held_json(pin, before));
    }
    Ok(shown)
}

fn held_json(pin: &Pin, before: Option<&Pin>) -> Value {
    let (description, schema) = readable(&pin.definition);
    let (old_description, old_schema) = before.map(|b| readable(&b.definition)).unwrap_or_default();
    json!({
        "name": tool_name(&pin.backend, &pin.tool),
        "backend": pin.backend, "tool": pin.tool, "state": pin.state,
        "digest": pin.digest, "seen": format_time_ms(pin.seen_at),
        "decided_by": pin.decided_by,
        "description": description, "schema": marked(&schema, &old_schema),
        "had_approved": before.is_some(),
        "is_prompt": pin.tool.starts_with(crate::tools::backends::pins::PROMPT_PIN),
        "old_description": old_description, "old_schema": marked(&old_schema, &schema),
        "description_changed": before.is_some() && description != old_description,
    })
}

/// `GET` of a decision's path: the confirmation it needs; `None` (the console's 404) for
/// a path that names no tool waiting for a decision.
pub(super) fn confirm_page(console: &Console, op: &Operator, path: &str) -> Option<Response> {
    let (backend, tool, decision) = decision_path(path)?;
    let waiting = match console.server.store().pins(Some(backend)) {
        Ok(pins) => pins.iter().any(|p| p.tool == tool && p.state == PENDING),
        Err(e) => return Some(console.store_failed(op, e)),
    };
    if !waiting {
        return None;
    }
    let key = match decision {
        Decision::Approve => "confirm_approve_tool",
        Decision::Reject => "confirm_reject_tool",
    };
    let question = console
        .texts()
        .get(key)
        .replace("{tool}", &tool_name(backend, tool));
    Some(console.confirm(
        op,
        json!({"question": question, "action": path, "back": BACKENDS_PATH}),
    ))
}

/// `POST` of a confirmation: the decision, its audit row, this node's tools read again,
/// then the backends page. `None` (the console's 404) when nothing waits for a decision.
pub(super) fn post(
    console: &Console,
    request: &Request<'_>,
    op: &Operator,
    path: &str,
) -> Option<Response> {
    let (backend, tool, decision) = decision_path(path)?;
    let store = console.server.store();
    let now = console.server.clock().unix_millis();
    let by = format!("console:{}", op.principal.credential_id);
    let decided = match decision {
        Decision::Approve => store.approve_pin((backend, tool), &by, now),
        Decision::Reject => store.reject_pin((backend, tool), &by, now),
    };
    match decided {
        Ok(Decided::NothingPending) => return None,
        Ok(_) => {}
        Err(e) => return Some(console.store_failed(op, e)),
    }
    let action = match decision {
        Decision::Approve => "approve_tool",
        Decision::Reject => "reject_tool",
    };
    if !console.record(
        &op.principal,
        action,
        &tool_name(backend, tool),
        request.source,
    ) {
        return Some(console.not_audited(op));
    }
    console.server.backends().review_pins();
    Some(Response::redirect(BACKENDS_PATH))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_path_names_a_backend_a_tool_and_the_decision() {
        assert_eq!(
            decision_path("/console/backends/held/wh/lookup/approve"),
            Some(("wh", "lookup", Decision::Approve))
        );
        assert_eq!(
            decision_path("/console/backends/held/wh/get_sum/reject"),
            Some(("wh", "get_sum", Decision::Reject))
        );
        for bad in [
            "/console/backends/held/wh/lookup/delete",
            "/console/backends/held/wh/lookup/approve/more",
            "/console/backends/held/wh//approve",
            "/console/backends/held//lookup/approve",
            "/console/backends/held/wh/look%2Fup/approve",
            "/console/backends/held/wh/approve",
            "/console/backends/wh/lookup/approve",
        ] {
            assert_eq!(decision_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_lines_that_differ_are_marked_on_both_sides() {
        let old = "{\n  \"sku\": \"string\"\n}";
        let new = "{\n  \"sku\": \"string\",\n  \"note\": \"string\"\n}";
        let changed = |lines: Vec<Value>| -> Vec<String> {
            lines
                .iter()
                .filter(|l| l["changed"] == true)
                .map(|l| l["text"].as_str().unwrap_or_default().to_owned())
                .collect()
        };
        assert_eq!(
            changed(marked(new, old)),
            ["  \"sku\": \"string\",", "  \"note\": \"string\""]
        );
        assert_eq!(changed(marked(old, new)), ["  \"sku\": \"string\""]);
        let (description, schema) =
            readable(r#"{"description":"Look up.","inputSchema":{"type":"object"}}"#);
        assert_eq!(description, "Look up.");
        assert_eq!(schema, "{\n  \"type\": \"object\"\n}");
    }
}
