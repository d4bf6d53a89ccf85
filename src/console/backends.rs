//! The backends page: each configured backend's state, its calls in flight (of its
//! limit) and waiting now and its circuit, its tools with their scope and rate-limit
//! category, and per tool and per backend the calls and failures of the last 24 hours,
//! counted from the audit log (`Store::backend_calls_by_tool`).
//!
//! A failure is any outcome but `ok`: the backend's own errors and the refusals of calls
//! meant for it alike, as the audit log's failure filter counts them. A tool the backend
//! no longer yields still shows while the window holds calls of it, so that the tools add
//! up to their backend.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{Console, Operator, Response};
use crate::clock::format_time;
use crate::store::audit::ToolCalls;
use crate::tools::Registry;
use crate::tools::backends::BackendStatus;

/// The window the counts cover.
const WINDOW_MS: i64 = 24 * 3_600_000;

/// `GET /console/backends`.
pub(super) fn backends(console: &Console, op: &Operator) -> Response {
    let now_ms = console.server.clock().unix_millis();
    let since_ms = now_ms - WINDOW_MS;
    let counts = match console
        .server
        .store()
        .backend_calls_by_tool(since_ms, now_ms.saturating_add(1))
    {
        Ok(counts) => counts,
        Err(e) => return console.store_failed(op, e),
    };
    // The audit filter takes whole seconds, as a `datetime-local` value (UTC).
    let since = format_time(since_ms.div_euclid(1000))
        .trim_end_matches('Z')
        .to_owned();
    let registry = console.server.registry();
    let backends: Vec<Value> = console
        .server
        .backends()
        .status()
        .iter()
        .map(|b| backend_json(b, &registry, &counts, &since))
        .collect();
    let held = match super::pins::held(console) {
        Ok(held) => held,
        Err(e) => return console.store_failed(op, e),
    };
    let page = console.render(
        "backends.html",
        "backends",
        Some(op),
        json!({"backends": backends, "held": held}),
    );
    Response::html(200, page)
}

/// One backend for the template: its state, its tools and their counts, and its totals.
fn backend_json(
    b: &BackendStatus,
    registry: &Registry,
    counts: &[ToolCalls],
    since: &str,
) -> Value {
    let mine: Vec<&ToolCalls> = counts.iter().filter(|c| c.backend == b.name).collect();
    let counted = |tool: &str| {
        mine.iter()
            .find(|c| c.tool == tool)
            .map_or((0, 0), |c| (c.calls, c.failures))
    };
    let mut served = BTreeSet::new();
    let mut tools: Vec<Value> = registry
        .tools()
        .iter()
        .filter(|t| t.tool.backend() == Some(b.name.as_str()))
        .map(|t| {
            let spec = t.spec();
            served.insert(&*spec.name);
            let (calls, failures) = counted(&spec.name);
            tool_json(
                &spec.name,
                Some((&spec.scope, spec.category.as_str())),
                calls,
                failures,
                since,
            )
        })
        .collect();
    tools.extend(
        mine.iter()
            .filter(|c| !served.contains(c.tool.as_str()))
            .map(|c| tool_json(&c.tool, None, c.calls, c.failures, since)),
    );
    tools.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let mut line = json!({
        "name": b.name, "kind": b.kind, "state": b.health.as_str(),
        "reason": b.health.reason(), "tools": tools,
        "served": served.len(),
        "calls": mine.iter().map(|c| c.calls).sum::<i64>(),
        "failures": mine.iter().map(|c| c.failures).sum::<i64>(),
    });
    if let Some(fields) = line.as_object_mut() {
        fields.extend(b.admission.fields());
    }
    line
}

/// One tool for the template; `served` is its scope and category while the backend
/// yields it, `None` for a tool it no longer does. The counts link to their audit rows.
fn tool_json(
    name: &str,
    served: Option<(&str, &str)>,
    calls: i64,
    failures: i64,
    since: &str,
) -> Value {
    let audit = |failures_only: bool| {
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.append_pair("tool", name);
        if failures_only {
            query.append_pair("failures", "1");
        }
        query.append_pair("since", since);
        format!("/console/audit?{}", query.finish())
    };
    json!({
        "name": name, "served": served.is_some(),
        "scope": served.map(|s| s.0), "category": served.map(|s| s.1),
        "calls": calls, "failures": failures,
        "calls_link": audit(false), "failures_link": audit(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tools_counts_link_to_its_rows_in_the_audit_log() {
        let tool = tool_json(
            "crm_get_order",
            Some(("crm:read", "read")),
            7,
            2,
            "2026-03-01T10:00:00",
        );
        assert_eq!(
            tool["calls_link"],
            json!("/console/audit?tool=crm_get_order&since=2026-03-01T10%3A00%3A00")
        );
        assert_eq!(
            tool["failures_link"],
            json!("/console/audit?tool=crm_get_order&failures=1&since=2026-03-01T10%3A00%3A00")
        );
        assert_eq!(
            (tool["scope"].clone(), tool["category"].clone()),
            (json!("crm:read"), json!("read"))
        );
        let gone = tool_json("crm_old", None, 1, 0, "2026-03-01T10:00:00");
        assert_eq!(gone["served"], json!(false));
        assert_eq!(gone["scope"], Value::Null);
    }
}
