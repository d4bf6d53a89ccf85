//! The backends at start and while serving: opening them for `serve` and `stdio`, keeping
//! the server's registry in step with their tools (an upstream MCP server's list can
//! change), and `tollgate backends check`, which opens every configured backend (or the
//! one `--backend` names) and prints the bounds of its calls and the tools it yields, or
//! every problem found.
//!
//! Warnings do not stop a start or fail a check, and are logged at start and printed by
//! the check alike: a secret file every user of the machine can read, a document opened
//! from its last good copy, tools an upstream lists that are left out.

use std::process::ExitCode;
use std::sync::{Arc, Weak};

use clap::Subcommand;

use crate::clock::Clock;
use crate::config::{BackendConfig, Config, secret_file_warning};
use crate::protocol::dispatch::Server;
use crate::protocol::revisions::Listed;
use crate::store::Store;
use crate::tools::backends::openapi::Copies;
use crate::tools::backends::{
    BackendProblem, Backends, Change, LeftOutReason, ListingReport, Opening, TOOL_NAME_MAX_CHARS,
};
use crate::tools::{Idempotency, Tool};

/// `tollgate backends …`
#[derive(Debug, Subcommand)]
pub enum BackendsCommand {
    /// Open every configured backend, print its state, the bounds of its calls (deadline,
    /// calls at once, queue, circuit breaker) and the tools it yields (name, category,
    /// scope, idempotency); exit 1 with one line per problem found.
    #[command(after_help = "Example:
  tollgate backends check --config /etc/tollgate/tollgate.toml --json")]
    Check {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Check only the backend of this name (the others are not opened).
        #[arg(long, value_name = "NAME")]
        backend: Option<String>,
    },
    /// List the definitions of the upstream MCP servers' tools: approved (offered),
    /// pending (held until you decide: changed since approved, or new under
    /// `pinning = "manual"`) or rejected, with their digests.
    #[command(after_help = "Example:
  tollgate backends pins --backend wh --json")]
    Pins {
        /// Only the tools of this backend.
        #[arg(long, value_name = "NAME")]
        backend: Option<String>,
        /// Print JSON (with each definition) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Approve the pending definition of a tool held for review: it is offered again, as
    /// it is now, at the next tools/list on every node.
    #[command(after_help = "Example:
  tollgate backends approve wh_lookup")]
    Approve {
        /// The tool's name as tools/list shows it (`<backend>_<tool>`).
        name: String,
    },
    /// Reject the pending definition of a tool held for review: the tool stays out.
    #[command(after_help = "Example:
  tollgate backends reject wh_lookup")]
    Reject {
        /// The tool's name as tools/list shows it (`<backend>_<tool>`).
        name: String,
    },
}

fn problems_text(problems: &[BackendProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Opens the configured backends for `serve` and `stdio` (none: nothing is started),
/// keeping the last good copy of every document fetched, and logs what the operator
/// should know.
pub fn open(config: &Config, clock: &Clock, store: &Store) -> Result<Arc<Backends>, String> {
    for (backend, warning) in config.backends.iter().flat_map(secret_warnings) {
        tracing::warn!(backend = %backend, "{warning}");
    }
    let opening = Opening {
        strict: false,
        copies: Copies::beside(&config.state_dir(), true),
        clock: clock.clone(),
        store: Some(store.clone()),
    };
    let backends =
        Backends::open(&config.backends, &opening).map_err(|problems| problems_text(&problems))?;
    for (backend, warning) in backends.warnings() {
        tracing::warn!(backend = %backend, "{warning}");
    }
    Ok(Arc::new(backends))
}

/// A warning, as `(backend, warning)`, for each secret file of `backend` that every user
/// of the machine can read.
fn secret_warnings(backend: &BackendConfig) -> Vec<(String, String)> {
    backend
        .secret_files()
        .into_iter()
        .filter_map(secret_file_warning)
        .map(|warning| (backend.name.clone(), warning))
        .collect()
}

/// Follows what the backends offer: the server's registry is rebuilt whenever a backend's
/// list of tools changes (a list that cannot be registered, a new tool named like another,
/// is logged, and the last good registry stays); its sessions are told when a backend's
/// resources or prompts changed, and the sessions subscribed to a resource when it did.
pub fn follow_changes(server: &Arc<Server>, config: &Config) {
    if !server.backends().tools_can_change() {
        return;
    }
    let weak: Weak<Server> = Arc::downgrade(server);
    let config = config.clone();
    let follow: crate::tools::backends::ChangeListener = Arc::new(move |change| {
        let Some(server) = weak.upgrade() else {
            return;
        };
        match change {
            Change::Tools => rebuild_registry(&server, &config),
            Change::Resources => server.list_changed(Listed::Resources),
            Change::Prompts => server.list_changed(Listed::Prompts),
            Change::ResourceUpdated(uri) => server.resource_changed(&uri),
        }
    });
    server.backends().on_change(Arc::clone(&follow));
    // An upstream that finished connecting in the background between the server's build
    // and the line above changed its tools with no one listening: look once more.
    follow(Change::Tools);
}

/// Builds the registry anew from the backends' tools now, and puts it in place when its
/// tools differ from the current ones.
fn rebuild_registry(server: &Server, config: &Config) {
    let rebuilt = crate::ops::registry::build_registry_with(
        config,
        server.store(),
        server.clock(),
        server.backends().tools(),
    )
    .map(|registry| registry.with_held(server.backends().held()));
    match rebuilt {
        Ok(registry) => {
            let listed = |r: &crate::tools::Registry| -> Vec<serde_json::Value> {
                r.tools().iter().map(|t| t.spec().to_list_entry()).collect()
            };
            let current = server.registry();
            if listed(&registry) == listed(&current) && registry.held() == current.held() {
                return;
            }
            tracing::info!(tools = registry.tools().len(), "a backend's tools changed");
            server.replace_registry(registry);
        }
        Err(cause) => {
            tracing::warn!(%cause, "a backend's new list of tools cannot be registered; the previous one stays");
        }
    }
}

/// `tollgate backends …`
pub fn backends(config: &Config, command: &BackendsCommand) -> ExitCode {
    match command {
        BackendsCommand::Check { json, backend } => match chosen(config, backend.as_deref()) {
            Ok(chosen) => check(&chosen, config, *json),
            Err(message) => crate::ops::exit::refuse(&message),
        },
        BackendsCommand::Pins { backend, json } => {
            crate::ops::pins::list(config, backend.as_deref(), *json)
        }
        BackendsCommand::Approve { name } => crate::ops::pins::decide(config, name, true),
        BackendsCommand::Reject { name } => crate::ops::pins::decide(config, name, false),
    }
}

/// One configured backend opened on its own, as `backends check` and `tollgate tools`
/// find it.
pub(crate) struct Checked {
    /// Its configuration.
    pub(crate) config: BackendConfig,
    /// The backend, or what keeps it from opening.
    pub(crate) opened: Result<Backends, Vec<BackendProblem>>,
}

/// Opens each of `backends` on its own, strictly (an upstream that cannot be reached now
/// is a problem rather than connected in the background), so that one backend's problem
/// leaves the others' tools listed. Shut each opened one down after use. The command may
/// run as another user than the service: it reads the last good copies of fetched
/// documents but never writes them.
pub(crate) fn open_each(backends: &[BackendConfig], config: &Config) -> Vec<Checked> {
    let opening = Opening {
        strict: true,
        copies: Copies::beside(&config.state_dir(), false),
        clock: Clock::System,
        // A check offers nothing: it lists what the upstream has; the server decides.
        store: None,
    };
    backends
        .iter()
        .map(|backend| Checked {
            config: backend.clone(),
            opened: Backends::open(std::slice::from_ref(backend), &opening),
        })
        .collect()
}

fn idempotency_word(policy: Idempotency) -> &'static str {
    match policy {
        Idempotency::NotApplicable => "none",
        Idempotency::Optional => "optional",
        Idempotency::Required => "required",
    }
}

/// The backends to check: every configured one, or the one named `only`.
fn chosen(config: &Config, only: Option<&str>) -> Result<Vec<BackendConfig>, String> {
    let Some(name) = only else {
        return Ok(config.backends.clone());
    };
    match config.backends.iter().find(|b| b.name == name) {
        Some(backend) => Ok(vec![backend.clone()]),
        None if config.backends.is_empty() => Err(format!(
            "--backend {name}: no backends are configured ([[backends]] in the configuration file)"
        )),
        None => Err(format!(
            "--backend {name}: no backend has this name; the configured ones are {}",
            config
                .backends
                .iter()
                .map(|b| b.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn check(backends: &[BackendConfig], config: &Config, json: bool) -> ExitCode {
    if backends.is_empty() {
        println!("no backends are configured ([[backends]] in the configuration file)");
        return ExitCode::SUCCESS;
    }
    let checked = open_each(backends, config);
    // The definitions held for review, as the servers decided them (when the database
    // can be read from here).
    let pins = crate::ops::pins::held_definitions(config);
    let mut problems: Vec<String> = Vec::new();
    // What the operator should know but that does not fail the check: a secret file others
    // can read, a document opened from its last good copy, tools an upstream lists that
    // are left out (the upstream, not the configuration, decides those).
    let mut warnings: Vec<String> = Vec::new();
    // Every name already taken: the built-in tools, the retired names, then each
    // backend's tools in configuration order.
    let mut taken: std::collections::BTreeMap<String, String> = crate::tools::invoicing::tools()
        .iter()
        .map(|t| (t.spec().name.to_string(), "the built-in tools".to_owned()))
        .chain(
            crate::tools::invoicing::retired::RETIRED_TOOLS
                .iter()
                .map(|r| (r.name.to_owned(), "a retired built-in tool".to_owned())),
        )
        .collect();
    let mut report = Vec::new();
    for item in &checked {
        let name = &item.config.name;
        let named = |(backend, warning): (String, String)| format!("backend {backend}: {warning}");
        warnings.extend(secret_warnings(&item.config).into_iter().map(named));
        match &item.opened {
            Err(found) => {
                problems.extend(found.iter().map(ToString::to_string));
                report.push(serde_json::json!({
                    "name": name, "kind": item.config.kind.as_str(), "state": "down",
                    "problems": found.iter().map(|p| p.message.clone()).collect::<Vec<_>>(),
                    "limits": limits_json(&item.config),
                    "tools": [],
                }));
            }
            Ok(backends) => {
                warnings.extend(backends.warnings().into_iter().map(named));
                for (backend, tool) in backends.unmatched_overrides() {
                    problems.push(format!(
                        "backend {backend}: the override [backends.tools.{tool}] names no tool this backend yields; check the name against the list above"
                    ));
                }
                let tools: Vec<Arc<dyn Tool>> = backends.tools();
                for tool in &tools {
                    let spec = tool.spec();
                    if let Some(owner) =
                        taken.insert(spec.name.to_string(), format!("backend {name}"))
                    {
                        problems.push(format!(
                            "backend {name}: the tool {} is already named by {owner}; rename it with an override or disable one of them",
                            spec.name
                        ));
                    }
                }
                let status = backends.status();
                let state = status.first().map(|s| s.health.as_str()).unwrap_or("down");
                if let Some(reason) = status.first().and_then(|s| s.health.reason()) {
                    problems.push(format!("backend {name}: not ready ({state}): {reason}"));
                }
                let listing = status
                    .first()
                    .map(|s| s.listing.clone())
                    .unwrap_or_default();
                warnings.extend(left_out_warnings(name, &listing));
                let mut line = serde_json::json!({
                    "name": name, "kind": item.config.kind.as_str(), "state": state,
                    "limits": limits_json(&item.config),
                    "tools": tools.iter().map(|t| {
                        let spec = t.spec();
                        serde_json::json!({
                            "name": spec.name, "category": spec.category.as_str(),
                            "scope": spec.scope, "idempotency": idempotency_word(spec.idempotency),
                        })
                    }).collect::<Vec<_>>(),
                });
                add_listing(&mut line, &listing);
                if let Some(status) = status.first().filter(|s| s.kind == "mcp") {
                    let [resources, templates, prompts] = status.offered;
                    line["resources"] = resources.into();
                    line["resource_templates"] = templates.into();
                    line["prompts"] = prompts.into();
                }
                let held: Vec<&crate::store::pins::Pin> = pins
                    .iter()
                    .filter(|p| {
                        &p.backend == name && (p.state == "pending" || p.state == "rejected")
                    })
                    .collect();
                for pin in &held {
                    let tool = crate::tools::backends::pins::pinned_name(name, &pin.tool);
                    if pin.state == "pending" {
                        warnings.push(format!(
                            "backend {name}: the tool {tool} is held for review (its definition changed or is new); `tollgate backends pins --backend {name}` shows it, `tollgate backends approve {tool}` or `reject {tool}` decides"
                        ));
                    }
                }
                if !held.is_empty() {
                    line["held_for_review"] = held
                        .iter()
                        .map(|p| {
                            serde_json::json!({
                                "name": crate::tools::backends::pins::pinned_name(name, &p.tool),
                                "state": p.state, "digest": p.digest,
                            })
                        })
                        .collect::<Vec<_>>()
                        .into();
                }
                report.push(line);
            }
        }
    }
    for item in checked {
        if let Ok(backends) = item.opened {
            backends.shutdown();
        }
    }
    if json {
        println!(
            "{}",
            serde_json::json!({ "backends": report, "problems": problems, "warnings": warnings })
        );
    } else {
        print_table(&report);
        for warning in &warnings {
            eprintln!("warning: {warning}");
        }
        for problem in &problems {
            eprintln!("problem: {problem}");
        }
    }
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One line per tool an upstream lists that is left out (by name, for a reason of its
/// own), and one for those past `max_tools`.
fn left_out_warnings(backend: &str, listing: &ListingReport) -> Vec<String> {
    let mut lines: Vec<String> = listing
        .left_out_tools
        .iter()
        .map(|(tool, reason)| {
            format!(
                "backend {backend}: the upstream tool {tool:?} is left out ({}){}",
                reason.as_str(),
                match reason {
                    LeftOutReason::NameTooLong => format!(
                        ": its tool name after the prefix is longer than {TOOL_NAME_MAX_CHARS} characters"
                    ),
                    LeftOutReason::SchemaTooLarge => {
                        ": its input or output schema is larger than max_schema_bytes".to_owned()
                    }
                    _ => String::new(),
                }
            )
        })
        .collect();
    let named = listing.left_out_tools.len();
    let own_reasons = listing.left_out_total()
        - listing
            .left_out
            .get(&LeftOutReason::TooManyTools)
            .copied()
            .unwrap_or(0);
    if own_reasons > named {
        lines.push(format!(
            "backend {backend}: {} more upstream tools are left out (see /healthz or /metrics)",
            own_reasons - named
        ));
    }
    if let Some(n) = listing.left_out.get(&LeftOutReason::TooManyTools) {
        lines.push(format!(
            "backend {backend}: {n} upstream tools past max_tools are left out (raise max_tools to offer them)"
        ));
    }
    lines
}

/// The bounds of a backend's calls, as configured (or by default): its deadline, the calls
/// forwarded at once, the calls that may wait and for how long, and its circuit breaker.
fn limits_json(config: &BackendConfig) -> serde_json::Value {
    let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let limits = &config.limits;
    serde_json::json!({
        "timeout_ms": millis(config.timeout),
        "max_in_flight": limits.max_in_flight,
        "queue": limits.queue,
        "queue_timeout_ms": millis(limits.queue_timeout),
        "breaker_failures": limits.breaker_failures,
        "breaker_cooldown_ms": millis(limits.breaker_cooldown),
    })
}

/// The limits of a backend's JSON entry as one line of the table.
fn limits_line(limits: &serde_json::Value) -> String {
    let n = |key: &str| limits[key].as_u64().unwrap_or_default();
    let breaker = match n("breaker_failures") {
        0 => "no circuit breaker".to_owned(),
        failures => format!(
            "circuit opens after {failures} failures in a row, for {} ms",
            n("breaker_cooldown_ms")
        ),
    };
    format!(
        "  limits: {} ms a call; {} at once, {} more waiting up to {} ms; {breaker}",
        n("timeout_ms"),
        n("max_in_flight"),
        n("queue"),
        n("queue_timeout_ms"),
    )
}

/// Adds what the backend left out of its list, and the descriptions it cut, to its entry
/// of the JSON report (when there are any).
fn add_listing(line: &mut serde_json::Value, listing: &ListingReport) {
    if !listing.left_out.is_empty() {
        line["left_out"] = listing
            .left_out
            .iter()
            .map(|(reason, n)| (reason.as_str().to_owned(), serde_json::json!(n)))
            .collect::<serde_json::Map<_, _>>()
            .into();
        line["left_out_tools"] = listing
            .left_out_tools
            .iter()
            .map(|(tool, reason)| serde_json::json!({"name": tool, "reason": reason.as_str()}))
            .collect::<Vec<_>>()
            .into();
    }
    if listing.descriptions_cut > 0 {
        line["descriptions_cut"] = listing.descriptions_cut.into();
    }
}

fn print_table(report: &[serde_json::Value]) {
    for backend in report {
        let field = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        println!(
            "backend {} ({}): {}",
            field(&backend["name"]),
            field(&backend["kind"]),
            field(&backend["state"])
        );
        println!("{}", limits_line(&backend["limits"]));
        let tools = backend["tools"].as_array().cloned().unwrap_or_default();
        let width = tools
            .iter()
            .map(|t| field(&t["name"]).len())
            .max()
            .unwrap_or(4)
            .max(4);
        if !tools.is_empty() {
            println!(
                "  {:<width$}  {:<11}  {:<24}  idempotency",
                "tool", "category", "scope"
            );
        }
        for tool in tools {
            println!(
                "  {:<width$}  {:<11}  {:<24}  {}",
                field(&tool["name"]),
                field(&tool["category"]),
                field(&tool["scope"]),
                field(&tool["idempotency"])
            );
        }
        if let (Some(resources), Some(templates), Some(prompts)) = (
            backend["resources"].as_u64(),
            backend["resource_templates"].as_u64(),
            backend["prompts"].as_u64(),
        ) {
            println!(
                "  also offered: {resources} resources, {templates} resource templates, {prompts} prompts"
            );
        }
        if let Some(counts) = backend["left_out"].as_object() {
            let counts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
            println!("  left out: {}", counts.join(", "));
        }
        if let Some(cut) = backend["descriptions_cut"].as_u64() {
            println!("  descriptions cut: {cut}");
        }
    }
}
