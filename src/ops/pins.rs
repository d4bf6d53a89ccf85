//! `tollgate backends pins|approve|reject`: the definitions of the upstream MCP servers'
//! tools, and the operator's decisions on the ones held for review. A decision is written
//! to the store (an audit row with it) and applies on every node at its next `tools/list`,
//! whose sessions are then told `notifications/tools/list_changed`.

use std::process::ExitCode;

use serde_json::{Value, json};

use crate::clock::{Clock, format_time_ms};
use crate::config::Config;
use crate::ops::admin::escape_for_terminal;
use crate::ops::exit::{fail, refuse};
use crate::store::Store;
use crate::store::pins::{Decided, Pin};

/// Every pinned definition, for `backends check` to name the held ones; none when the
/// database cannot be read from here (the check is about the backends).
pub(crate) fn held_definitions(config: &Config) -> Vec<Pin> {
    Store::open_database(
        &config.database,
        &crate::store::StoreOptions::from_config(config, false),
    )
    .ok()
    .and_then(|store| store.pins(None).ok())
    .unwrap_or_default()
}

/// `tollgate backends pins`: every definition of every upstream tool (of `backend` only
/// with one), its state and digest.
pub fn list(config: &Config, backend: Option<&str>, json: bool) -> ExitCode {
    let store = match super::open_store(config, false) {
        Ok(store) => store,
        Err(code) => return code,
    };
    let pins = match store.pins(backend) {
        Ok(pins) => pins,
        Err(e) => return fail(&format!("cannot read the pinned definitions: {e}")),
    };
    let shown: Vec<&Pin> = pins.iter().filter(|p| p.state != "replaced").collect();
    if json {
        let rows: Vec<Value> = shown
            .iter()
            .map(|p| {
                json!({"backend": p.backend, "tool": crate::tools::backends::pins::pinned_name(&p.backend, &p.tool),
                       "state": p.state, "digest": p.digest,
                       "definition": serde_json::from_str::<Value>(&p.definition).unwrap_or(Value::Null),
                       "seen_at": format_time_ms(p.seen_at),
                       "decided_at": p.decided_at.map(format_time_ms), "decided_by": p.decided_by})
            })
            .collect();
        println!("{}", Value::Array(rows));
        return ExitCode::SUCCESS;
    }
    if shown.is_empty() {
        println!("No upstream tool definitions are pinned yet.");
        return ExitCode::SUCCESS;
    }
    println!(
        "{:<40}  {:<9}  {:<16}  {:<24}  DECIDED BY",
        "TOOL", "STATE", "DIGEST", "SEEN"
    );
    for p in shown {
        println!(
            "{:<40}  {:<9}  {:<16}  {:<24}  {}",
            escape_for_terminal(&crate::tools::backends::pins::pinned_name(
                &p.backend, &p.tool
            )),
            p.state,
            &p.digest[..16.min(p.digest.len())],
            format_time_ms(p.seen_at),
            escape_for_terminal(p.decided_by.as_deref().unwrap_or("-"))
        );
    }
    ExitCode::SUCCESS
}

/// `tollgate backends approve|reject NAME`: decides on the held definition of the tool
/// `name` (`<backend>_<tool>`, as `tools/list` named it).
pub fn decide(config: &Config, name: &str, approve: bool) -> ExitCode {
    let store = match super::open_store(config, false) {
        Ok(store) => store,
        Err(code) => return code,
    };
    let pins = match store.pins(None) {
        Ok(pins) => pins,
        Err(e) => return fail(&format!("cannot read the pinned definitions: {e}")),
    };
    let Some((backend, tool)) = split(&pins, name) else {
        return refuse(&format!(
            "no upstream tool is named {}; `tollgate backends pins` lists them",
            escape_for_terminal(name)
        ));
    };
    let clock = Clock::System;
    let by = crate::ops::admin::cli_operator();
    let now = clock.unix_millis();
    let decided = if approve {
        store.approve_pin((&backend, &tool), &by, now)
    } else {
        store.reject_pin((&backend, &tool), &by, now)
    };
    match decided {
        Ok(Decided::NothingPending) => refuse(&format!(
            "{name} has no definition waiting for a decision; `tollgate backends pins --backend {backend}` shows its state"
        )),
        Ok(decided) => {
            let action = if approve {
                "approve_tool"
            } else {
                "reject_tool"
            };
            if let Err(e) =
                crate::ops::admin::record_cli_change(&store, action, name, Some(&backend))
            {
                return fail(&format!("decided, but the audit row was not written: {e}"));
            }
            match decided {
                Decided::Approved(digest) => println!(
                    "Approved {name} (definition {}); it is offered again at the next tools/list on every node.",
                    &digest[..16]
                ),
                _ => println!("Rejected the new definition of {name}; it stays held."),
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(&format!("cannot record the decision: {e}")),
    }
}

/// `name` (as `tools/list` names it) as the (backend, tool) of a pinned definition.
fn split(pins: &[Pin], name: &str) -> Option<(String, String)> {
    pins.iter()
        .find(|p| crate::tools::backends::pins::pinned_name(&p.backend, &p.tool) == name)
        .map(|p| (p.backend.clone(), p.tool.clone()))
}
