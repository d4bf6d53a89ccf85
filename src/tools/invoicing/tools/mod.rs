//! The invoicing tools: one table row per tool (declaration, guardrails, body), grouped by
//! what they act on. Helpers shared by the bodies live here: catalog errors of the domain
//! and the result shape (`structuredContent`, a line of text for people, and the JSON text
//! for clients that only read text). The bodies read their arguments through
//! [`Args`](super::args::Args).

mod clients;
mod invoices;
mod outbound;
mod payments;

pub(crate) use invoices::rectifying_for;

use std::sync::Arc;

use serde_json::{Value, json};

use super::args::{Args, invalid_format};
use super::date::Date;
use crate::catalog::{ErrorKind, McpError};
use crate::clock::Clock;
use crate::store::StoreError;
use crate::store::store_failure;
use crate::tools::{FnTool, GuardrailsFn, Tool, ToolFn, ToolOutput, ToolSpec};

fn tool(spec: ToolSpec, guard: Option<GuardrailsFn>, run: ToolFn) -> Arc<dyn Tool> {
    Arc::new(FnTool::new(spec, run).guarded_by(guard))
}

/// Every invoicing tool.
pub fn all() -> Vec<Arc<dyn Tool>> {
    let mut tools = clients::tools();
    tools.extend(invoices::tools());
    tools.extend(payments::tools());
    tools.extend(outbound::tools());
    tools
}

// ---- Errors -----------------------------------------------------------------------------------

/// A storage failure inside a tool (an `isError` result when transient).
fn db_failure(err: StoreError) -> McpError {
    store_failure(err, true)
}

/// `<entity>_not_found` naming the argument.
fn not_found(kind: ErrorKind, param: &str, id: &str) -> McpError {
    McpError::new(kind).param(param).detail("id", id)
}

// ---- Results ----------------------------------------------------------------------------------

/// A result: `structuredContent`, a sentence for people, and the JSON as text.
fn output(summary: String, value: Value) -> ToolOutput {
    let mut out = ToolOutput::structured(value);
    out.content.insert(0, crate::tools::text_block(summary));
    out
}

/// A page of a cursor-paginated list: `limit + 1` rows were fetched to know `has_more`.
fn page<T>(
    mut rows: Vec<T>,
    limit: usize,
    id_of: fn(&T) -> &str,
    render: impl Fn(&T) -> Value,
) -> Value {
    let has_more = rows.len() > limit;
    rows.truncate(limit);
    let next_cursor = if has_more {
        rows.last().map(id_of)
    } else {
        None
    };
    json!({
        "data": rows.iter().map(render).collect::<Vec<_>>(),
        "has_more": has_more,
        "next_cursor": next_cursor,
    })
}

/// Today's UTC date by `clock`, as text.
fn today(clock: &Clock) -> String {
    Date::today(clock).to_string()
}
