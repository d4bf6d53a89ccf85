//! `tollgate tools`: every tool this configuration offers — the built-in ones and each
//! configured backend's, opened as `tollgate backends check` opens them — with the scope a
//! credential needs for it, its rate category and the plans that include it; then each
//! backend's state and scopes, and every scope a credential can usefully hold. An
//! unreachable backend is listed with its state and the scopes its configuration gives,
//! and the command still succeeds.
//!
//! Three renderings: an aligned table (the default), JSON (`--json`) and the Markdown page
//! `docs/scopes.md` is (`--format markdown`).

use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use crate::clock::Clock;
use crate::config::Config;
use crate::guards::auth::{ADMIN_SCOPE, APPROVE_SCOPE, KnownScopes, SUPER_SCOPE, ScopeGroup};
use crate::store::{Plan, Store};

/// What `*` grants, in one line.
pub const SUPER_SCOPE_MEANING: &str =
    "every tool, built-in and backend, now and to come; not the console";
/// What `admin` grants, in one line.
pub const ADMIN_SCOPE_MEANING: &str =
    "signs in to the operator console (/console); grants no tool, and * does not include it";

/// What `approve` grants, in one line.
pub const APPROVE_SCOPE_MEANING: &str = "decides on the calls a require_approval policy rule holds (the console's approvals page); grants no tool, and * does not include it";

/// `tollgate tools`
#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// Output: an aligned table, JSON, or the Markdown page docs/scopes.md is made of.
    #[arg(long, value_enum, default_value_t = ToolsFormat::Table)]
    format: ToolsFormat,
    /// Print machine-readable JSON (the same as --format json).
    #[arg(long, conflicts_with = "format")]
    json: bool,
}

/// The renderings of `tollgate tools`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ToolsFormat {
    Table,
    Json,
    Markdown,
}

/// One tool's line.
struct ToolRow {
    name: String,
    scope: String,
    category: &'static str,
    /// The plans that include it, smallest first.
    plans: Vec<String>,
    /// Its backend; `None` for a built-in tool.
    backend: Option<String>,
}

/// One configured backend's line.
struct BackendRow {
    name: String,
    kind: &'static str,
    /// `ready`, `connecting` or `down`.
    state: &'static str,
    /// Why it is not ready.
    reason: Option<String>,
    tools: usize,
    /// The scopes its configuration gives its tools.
    scopes: Vec<String>,
}

/// Everything `tollgate tools` shows.
struct Listing {
    tools: Vec<ToolRow>,
    backends: Vec<BackendRow>,
    scopes: KnownScopes,
}

/// Runs `tollgate tools`.
pub fn tools(config: &Config, store: &Store, args: &ToolsArgs) -> ExitCode {
    let listing = match list(config, store) {
        Ok(listing) => listing,
        Err(message) => return crate::ops::exit::fail(&message),
    };
    let format = if args.json {
        ToolsFormat::Json
    } else {
        args.format
    };
    match format {
        ToolsFormat::Table => print!("{}", table(&listing)),
        ToolsFormat::Json => println!("{}", to_json(&listing)),
        ToolsFormat::Markdown => print!("{}", markdown(&listing)),
    }
    ExitCode::SUCCESS
}

fn plans_including(plans: &[Plan], tool: &str) -> Vec<String> {
    plans
        .iter()
        .filter(|p| !p.excludes(tool))
        .map(|p| p.slug.clone())
        .collect()
}

fn row(spec: &crate::tools::ToolSpec, plans: &[Plan], backend: Option<&str>) -> ToolRow {
    ToolRow {
        name: spec.name.to_string(),
        scope: spec.scope.to_string(),
        category: spec.category.as_str(),
        plans: plans_including(plans, &spec.name),
        backend: backend.map(str::to_owned),
    }
}

/// Reads the plans, the built-in tools and every backend's.
fn list(config: &Config, store: &Store) -> Result<Listing, String> {
    let plans = store
        .plans()
        .map_err(|e| format!("cannot read the plans: {e}"))?;
    let registry = crate::ops::registry::build_registry(config, store, &Clock::System)?;
    let mut tools: Vec<ToolRow> = registry
        .tools()
        .iter()
        .map(|t| row(t.spec(), &plans, None))
        .collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    let mut backends = Vec::new();
    for checked in crate::ops::backends::open_each(&config.backends, config) {
        let name = checked.config.name.clone();
        let scopes = crate::tools::backends::configured_scopes(&checked.config);
        let kind = checked.config.kind.as_str();
        match checked.opened {
            Ok(opened) => {
                let mut own: Vec<ToolRow> = opened
                    .tools()
                    .iter()
                    .map(|t| row(t.spec(), &plans, Some(&name)))
                    .collect();
                own.sort_by(|a, b| a.name.cmp(&b.name));
                let health = opened.status().into_iter().next().map(|s| s.health);
                backends.push(BackendRow {
                    state: health.as_ref().map_or("down", |h| h.as_str()),
                    reason: health.as_ref().and_then(|h| h.reason()).map(str::to_owned),
                    tools: own.len(),
                    name,
                    kind,
                    scopes,
                });
                tools.extend(own);
                opened.shutdown();
            }
            Err(problems) => backends.push(BackendRow {
                name,
                kind,
                state: "down",
                reason: Some(
                    problems
                        .iter()
                        .map(|p| p.message.clone())
                        .collect::<Vec<_>>()
                        .join("; "),
                ),
                tools: 0,
                scopes,
            }),
        }
    }
    Ok(Listing {
        tools,
        backends,
        scopes: KnownScopes::new(&config.backends, config.tools.conformance_pack),
    })
}

/// The one-line meaning of a special scope.
fn special_meaning(scope: &str) -> &'static str {
    if scope == SUPER_SCOPE {
        SUPER_SCOPE_MEANING
    } else if scope == ADMIN_SCOPE {
        ADMIN_SCOPE_MEANING
    } else if scope == APPROVE_SCOPE {
        APPROVE_SCOPE_MEANING
    } else {
        ""
    }
}

impl Listing {
    /// The tools that need `scope`, by name.
    fn tools_needing(&self, scope: &str) -> Vec<&str> {
        self.tools
            .iter()
            .filter(|t| t.scope == scope)
            .map(|t| t.name.as_str())
            .collect()
    }

    /// What a scope grants, in words: the special scopes' meaning, or the tools needing it.
    fn grants(&self, scope: &str, group: &ScopeGroup) -> String {
        if *group == ScopeGroup::Special {
            return special_meaning(scope).to_owned();
        }
        let tools = self.tools_needing(scope);
        if tools.is_empty() {
            "no tool now (the backend lists none that needs it)".to_owned()
        } else {
            tools.join(", ")
        }
    }
}

/// Left-aligned columns two spaces apart; the last one is not padded.
fn aligned(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn plans_text(plans: &[String]) -> String {
    if plans.is_empty() {
        "none".to_owned()
    } else {
        plans.join(", ")
    }
}

/// The aligned table: tools, then backends (when configured), then scopes.
fn table(listing: &Listing) -> String {
    let text = crate::ops::admin::escape_for_terminal;
    let mut rows = vec![vec![
        "TOOL".to_owned(),
        "SCOPE".to_owned(),
        "CATEGORY".to_owned(),
        "PLANS".to_owned(),
    ]];
    rows.extend(listing.tools.iter().map(|t| {
        vec![
            text(&t.name),
            text(&t.scope),
            t.category.to_owned(),
            plans_text(&t.plans),
        ]
    }));
    let mut out = aligned(&rows);
    if !listing.backends.is_empty() {
        let mut rows = vec![
            ["BACKEND", "KIND", "STATE", "TOOLS", "SCOPES"]
                .map(str::to_owned)
                .to_vec(),
        ];
        rows.extend(listing.backends.iter().map(|b| {
            vec![
                b.name.clone(),
                b.kind.to_owned(),
                b.state.to_owned(),
                b.tools.to_string(),
                text(&b.scopes.join(", ")),
            ]
        }));
        out.push('\n');
        out.push_str(&aligned(&rows));
        for b in &listing.backends {
            if let Some(reason) = &b.reason {
                out.push_str(&format!(
                    "backend {} is {}: {}\n",
                    b.name,
                    b.state,
                    text(reason)
                ));
            }
        }
    }
    let mut rows = vec![vec!["SCOPE".to_owned(), "GRANTS".to_owned()]];
    rows.extend(
        listing
            .scopes
            .all()
            .iter()
            .map(|k| vec![text(&k.scope), text(&listing.grants(&k.scope, &k.group))]),
    );
    out.push('\n');
    out.push_str(&aligned(&rows));
    out
}

fn group_json(group: &ScopeGroup) -> Value {
    match group {
        ScopeGroup::Special => json!({"group": "special"}),
        ScopeGroup::BuiltIn(resource) => json!({"group": "built-in", "resource": resource}),
        ScopeGroup::Backend(name) => json!({"group": "backend", "backend": name}),
    }
}

fn to_json(listing: &Listing) -> Value {
    let tools: Vec<Value> = listing
        .tools
        .iter()
        .map(|t| {
            json!({"name": t.name, "scope": t.scope, "category": t.category,
                   "plans": t.plans, "backend": t.backend})
        })
        .collect();
    let backends: Vec<Value> = listing
        .backends
        .iter()
        .map(|b| {
            json!({"name": b.name, "kind": b.kind, "state": b.state, "reason": b.reason,
                   "tools": b.tools, "scopes": b.scopes})
        })
        .collect();
    let scopes: Vec<Value> = listing
        .scopes
        .all()
        .iter()
        .map(|k| {
            let mut entry = group_json(&k.group);
            entry["scope"] = json!(k.scope);
            if k.group == ScopeGroup::Special {
                entry["meaning"] = json!(special_meaning(&k.scope));
            } else {
                entry["tools"] = json!(listing.tools_needing(&k.scope));
            }
            entry
        })
        .collect();
    json!({"tools": tools, "backends": backends, "scopes": scopes})
}

/// The explanation at the head of the Markdown page.
const MARKDOWN_HEAD: &str = "# Scopes and tools

<!-- Generated by `tollgate tools --format markdown` on a fresh database with no backends
configured; regenerate it rather than edit it (tests/docs.rs checks it). -->

A credential — an API key, or an OAuth client's access token — holds scopes. A tool is
listed in its `tools/list` and may be called only when the credential holds the tool's
scope or `*`; the company's plan then decides whether the tool is included.

- `*`: every tool, built-in and backend, including tools added later. It does not open
  the console.
- `admin`: signs an operator in to the console under `/console`. It grants no tool, and
  `*` does not include it: a key an agent holds never opens the console by accident.
- **Built-in tools have one scope per resource and action**: `clients:read`,
  `clients:write`, `clients:delete`, `invoices:read`, `invoices:write`, `invoices:void`,
  `invoices:send`, `payments:write`, `reports:generate` (the table below says which tool
  needs which).
- **Backend tools have one scope per backend and rate category**: `<backend>:read`,
  `<backend>:write` and `<backend>:destructive` (an operation's category comes from its
  HTTP method or its MCP hints: GET/HEAD or read-only is `read`, DELETE or destructive is
  `destructive`, the rest `write`), unless an override in the backend's configuration gives
  a tool another category (`<backend>:send`, `<backend>:generate`) or its own `scope`.
- No other wildcard exists: `invoices:*` is not a scope.

`tollgate key create`, `tollgate client create` and the console refuse a scope that no tool
needs, naming the closest known ones (`invoices:raed` → `invoices:read`). A backend's
scopes are known once its `[[backends]]` entry is in the configuration the command reads
(`--config FILE` or `TOLLGATE_CONFIG`). `tollgate tools` lists the tools and scopes of the
configuration it is given, backends included.

The plans column lists the plans that include each tool, as a new installation has them;
`tollgate plan exclude` and `tollgate plan include` change that.
";

/// A Markdown table cell: code, with `|` escaped.
fn code(text: &str) -> String {
    format!("`{}`", text.replace('|', "\\|"))
}

/// The Markdown page (`docs/scopes.md` with the built-in tools alone).
fn markdown(listing: &Listing) -> String {
    let mut out = String::from(MARKDOWN_HEAD);
    out.push_str("\n## Tools\n\n| tool | scope | category | plans |\n|---|---|---|---|\n");
    for t in &listing.tools {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            code(&t.name),
            code(&t.scope),
            t.category,
            plans_text(&t.plans)
        ));
    }
    if !listing.backends.is_empty() {
        out.push_str("\n## Backends\n\n| backend | kind | state | scopes |\n|---|---|---|---|\n");
        for b in &listing.backends {
            let scopes: Vec<String> = b.scopes.iter().map(|s| code(s)).collect();
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                code(&b.name),
                b.kind,
                b.state,
                scopes.join(", ")
            ));
        }
    }
    out.push_str("\n## Scopes\n\n| scope | grants |\n|---|---|\n");
    for k in listing.scopes.all() {
        let grants = listing.grants(&k.scope, &k.group).replace('|', "\\|");
        out.push_str(&format!("| {} | {} |\n", code(&k.scope), grants));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_and_the_last_is_not_padded() {
        let rows = vec![
            vec!["A".to_owned(), "BB".to_owned(), "C".to_owned()],
            vec!["long".to_owned(), "x".to_owned(), "tail".to_owned()],
        ];
        assert_eq!(aligned(&rows), "A     BB  C\nlong  x   tail\n");
    }
}
