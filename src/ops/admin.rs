//! The operator's commands: `key`, `client`, `plan`, `company`, `sandbox` and `audit`, with
//! their arguments and handlers. `cli` routes to them; the credential model they drive lives in
//! [`crate::guards::auth`], the audit log in [`crate::guards::audit`].
//!
//! Output is human text by default and one JSON document with `--json`. A token or client
//! secret is printed exactly once, by the command that creates it, and never again. A
//! mistake (unknown id, bad scope, unknown plan) prints a message on stderr that says how
//! to fix it and exits non-zero.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::config::{Config, Locale};
use crate::guards::audit::{self, AuditFilter};
use crate::guards::auth::{self, CredentialError, IssuedKey, KeyInfo, Mode, NewKey, OAuthClient};
use crate::store::{Store, StoreError};
use crate::tools::invoicing::demo::DemoError;
use crate::tools::invoicing::sandbox::{self, Filled, Seed};

/// `--json` alone.
#[derive(Debug, Args)]
pub struct JsonArg {
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// `tollgate key …`
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Create an API key and print its token once.
    Create(KeyCreateArgs),
    /// List API keys and their status (never their secrets).
    List(JsonArg),
    /// Revoke a key: running servers refuse it from their next call.
    Revoke(KeyIdArgs),
    /// Give a key a new secret; the old secret keeps working for the grace period.
    Rotate(KeyRotateArgs),
}

/// `tollgate key create`
#[derive(Debug, Args)]
pub struct KeyCreateArgs {
    /// A label: who or what uses the key.
    #[arg(long)]
    name: String,
    /// Comma-separated scopes, `resource:action` (e.g. invoices:read,clients:write), or `*`.
    #[arg(long)]
    scopes: String,
    /// Lifetime, e.g. 30d, 12h, 15m, 90s (default: never expires).
    #[arg(long, value_name = "DURATION")]
    expires_in: Option<String>,
    /// Bind the key to an OAuth client: revoking the client disables the key.
    #[arg(long, value_name = "CLIENT_ID")]
    client: Option<String>,
    /// Create a `tg_test_` key (accepted only while the company is in test mode).
    #[arg(long)]
    test: bool,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// A key's public id.
#[derive(Debug, Args)]
pub struct KeyIdArgs {
    /// The key's id, as `tollgate key list` shows it.
    id: String,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// `tollgate key rotate`
#[derive(Debug, Args)]
pub struct KeyRotateArgs {
    /// The key's id, as `tollgate key list` shows it.
    id: String,
    /// How long the old secret keeps working, e.g. 24h, 30m, or 0 to stop it at once.
    #[arg(long, value_name = "DURATION", default_value = "1h")]
    grace: String,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// `tollgate client …`
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Create an OAuth client and print its secret once.
    Create(ClientCreateArgs),
    /// List OAuth clients (never their secrets).
    List(JsonArg),
    /// Revoke a client: every call with its credentials answers `client_revoked`.
    Revoke(ClientIdArgs),
}

/// `tollgate client create`
#[derive(Debug, Args)]
pub struct ClientCreateArgs {
    /// A label for the client.
    #[arg(long)]
    name: String,
    /// Comma-separated scopes its tokens may carry, `resource:action`, or `*`.
    #[arg(long)]
    scopes: String,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// A client id.
#[derive(Debug, Args)]
pub struct ClientIdArgs {
    /// The client's id, as `tollgate client list` shows it.
    id: String,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// `tollgate plan …`
#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// List the plans, smallest first.
    List(JsonArg),
    /// Show one plan: limits, active-keys allowance, excluded tools.
    Show(PlanSlugArgs),
    /// Move the company to another plan (applies to the next call of every server).
    Set(PlanSlugArgs),
    /// Exclude a tool from a plan: hidden from tools/list, `plan_upgrade_required` if called.
    Exclude(PlanToolArgs),
    /// Include an excluded tool in a plan again.
    Include(PlanToolArgs),
}

/// A plan slug.
#[derive(Debug, Args)]
pub struct PlanSlugArgs {
    /// free, starter, pro or enterprise (see `tollgate plan list`).
    slug: String,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// A plan and a tool.
#[derive(Debug, Args)]
pub struct PlanToolArgs {
    /// The plan (see `tollgate plan list`).
    slug: String,
    /// The tool name, e.g. send_invoice.
    tool: String,
}

/// `tollgate company …`
#[derive(Debug, Subcommand)]
pub enum CompanyCommand {
    /// Show the company: name, tax id, plan, locale, mode.
    Show(JsonArg),
    /// Change the company's name, tax id, locale or mode.
    Set(CompanySetArgs),
}

/// `tollgate company set`
#[derive(Debug, Args)]
pub struct CompanySetArgs {
    /// Legal name.
    #[arg(long)]
    name: Option<String>,
    /// Tax id (NIF/CIF); an empty value clears it.
    #[arg(long)]
    tax_id: Option<String>,
    /// Language of error hints: en or es.
    #[arg(long)]
    locale: Option<String>,
    /// live, or test for a development installation (accepts tg_test_ keys, which work on
    /// the sandbox: filled on entering test mode when it is empty).
    #[arg(long)]
    mode: Option<String>,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// `tollgate sandbox …`: the test book that `tg_test_` keys work on.
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Show how many rows each book holds (live and test).
    Show(JsonArg),
    /// Empty the sandbox and fill it again: with a copy of the live book (the default), the
    /// demo data, or nothing. The live book is never touched.
    Reset(SandboxResetArgs),
}

/// `tollgate sandbox reset`
#[derive(Debug, Args)]
pub struct SandboxResetArgs {
    /// Fill it with a copy of the live book (clients with their personal data, series,
    /// invoices, payments; not the outbox). The default.
    #[arg(long, conflicts_with_all = ["demo", "empty"])]
    from_live: bool,
    /// Fill it with the demo data instead (no live client data in the sandbox).
    #[arg(long, conflicts_with = "empty")]
    demo: bool,
    /// Leave it empty.
    #[arg(long)]
    empty: bool,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// `tollgate audit`
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only calls made with this credential (its id).
    #[arg(long, value_name = "ID")]
    credential: Option<String>,
    /// Only calls of this tool.
    #[arg(long, value_name = "NAME")]
    tool: Option<String>,
    /// Only this outcome: ok, or an error code such as insufficient_scope.
    #[arg(long, value_name = "CODE")]
    outcome: Option<String>,
    /// Show at most this many rows, newest first.
    #[arg(long, value_name = "N", default_value_t = audit::DEFAULT_LIMIT)]
    limit: u32,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// A failed command: the message for stderr and the exit code.
struct Failed {
    message: String,
    code: ExitCode,
}

impl From<String> for Failed {
    fn from(message: String) -> Self {
        Failed {
            message,
            code: ExitCode::FAILURE,
        }
    }
}

impl From<CredentialError> for Failed {
    fn from(e: CredentialError) -> Self {
        Failed::from(e.to_string())
    }
}

impl From<StoreError> for Failed {
    fn from(e: StoreError) -> Self {
        Failed::from(e.to_string())
    }
}

impl From<DemoError> for Failed {
    fn from(e: DemoError) -> Self {
        match e {
            DemoError::Store(e) => Failed::from(format!("cannot fill the sandbox: {e}")),
            other => Failed::from(other.to_string()),
        }
    }
}

fn finish(outcome: Result<(), Failed>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failed) => {
            eprintln!("tollgate: {}", failed.message);
            failed.code
        }
    }
}

fn open(config: &Config) -> Result<Store, Failed> {
    Store::open(
        &config.database,
        &crate::store::StoreOptions::from_config(config, false),
    )
    .map_err(|e| match e {
        StoreError::TooNew { .. } | StoreError::Missing(_) | StoreError::Foreign(_) => Failed {
            message: e.to_string(),
            code: ExitCode::from(crate::ops::cli::EXIT_REFUSED),
        },
        other => Failed::from(format!("cannot open the database: {other}")),
    })
}

/// Runs `tollgate key …`.
pub fn key(config: &Config, command: &KeyCommand) -> ExitCode {
    finish(open(config).and_then(|store| match command {
        KeyCommand::Create(args) => key_create(&store, args),
        KeyCommand::List(args) => key_list(&store, args.json),
        KeyCommand::Revoke(args) => key_revoke(&store, args),
        KeyCommand::Rotate(args) => key_rotate(&store, args),
    }))
}

/// Creates the first admin key (scopes `*`) when the installation has no active API key;
/// `None` when it already has one (`tollgate init` run again).
pub fn first_admin_key(store: &Store) -> Result<Option<IssuedKey>, CredentialError> {
    let now = crate::clock::Clock::System.unix_secs();
    if auth::list_keys(store)?
        .iter()
        .any(|k| k.status(now) == "active")
    {
        return Ok(None);
    }
    let new = NewKey {
        name: "admin".to_owned(),
        scopes: vec![auth::SUPER_SCOPE.to_owned()],
        expires_in: None,
        client_id: None,
        mode: Mode::Live,
    };
    auth::create_key(store, &new).map(Some)
}

fn key_create(store: &Store, args: &KeyCreateArgs) -> Result<(), Failed> {
    let scopes = auth::parse_scope_list(&args.scopes)?;
    let expires_in = match &args.expires_in {
        Some(text) => Some(parse_duration(text).map_err(|e| format!("--expires-in: {e}"))?),
        None => None,
    };
    let mode = if args.test { Mode::Test } else { Mode::Live };
    let new = NewKey {
        name: args.name.clone(),
        scopes,
        expires_in,
        client_id: args.client.clone(),
        mode,
    };
    let issued = auth::create_key(store, &new)?;
    if mode == Mode::Test && company_mode(store)? == Mode::Live {
        eprintln!(
            "tollgate: note: the company is in live mode, so this test key is refused \
             (invalid_token_type) until `tollgate company set --mode test`"
        );
    }
    if args.json {
        println!(
            "{}",
            json!({ "id": issued.public_id, "token": issued.token.expose(), "name": new.name.trim(),
                    "scopes": new.scopes, "mode": mode.as_str(), "client_id": new.client_id,
                    "expires_at": issued.expires_at })
        );
    } else {
        println!(
            "Created key {} ({}), scopes {}.",
            issued.public_id,
            new.name.trim(),
            new.scopes.join(",")
        );
        if let Some(at) = issued.expires_at {
            println!("It expires at {}.", format_time(at));
        }
        println!("Token (shown once; store it now, it cannot be shown again):");
        println!("{}", issued.token.expose());
    }
    Ok(())
}

fn key_json(key: &KeyInfo, now: i64) -> Value {
    json!({
        "id": key.public_id, "name": key.name, "status": key.status(now), "mode": key.mode.as_str(),
        "scopes": key.scopes, "client_id": key.client_id, "created_at": key.created_at,
        "expires_at": key.expires_at, "revoked_at": key.revoked_at,
        "last_used_at": key.last_used_at, "previous_secret_until": key.previous_secret_until,
    })
}

fn key_list(store: &Store, as_json: bool) -> Result<(), Failed> {
    let keys = auth::list_keys(store)?;
    let now = crate::clock::Clock::System.unix_secs();
    if as_json {
        let list: Vec<Value> = keys.iter().map(|k| key_json(k, now)).collect();
        println!("{}", Value::Array(list));
        return Ok(());
    }
    if keys.is_empty() {
        println!("No keys. Create one with `tollgate key create --name NAME --scopes SCOPES`.");
        return Ok(());
    }
    println!(
        "{:<20}  {:<8}  {:<4}  {:<20}  {:<20}  {:<20}  SCOPES",
        "ID", "STATUS", "MODE", "NAME", "EXPIRES", "LAST USED"
    );
    for k in &keys {
        let expires = k.expires_at.map_or_else(|| "never".to_owned(), format_time);
        let used = k
            .last_used_at
            .map_or_else(|| "never".to_owned(), format_time);
        let client = k
            .client_id
            .as_deref()
            .map(|c| format!(" (client {c})"))
            .unwrap_or_default();
        println!(
            "{:<20}  {:<8}  {:<4}  {:<20}  {:<20}  {:<20}  {}{client}",
            k.public_id,
            k.status(now),
            k.mode.as_str(),
            k.name,
            expires,
            used,
            k.scopes.join(",")
        );
    }
    Ok(())
}

fn key_revoke(store: &Store, args: &KeyIdArgs) -> Result<(), Failed> {
    let newly = auth::revoke_key(store, &args.id)?;
    if args.json {
        println!(
            "{}",
            json!({ "id": args.id, "revoked": true, "already_revoked": !newly })
        );
    } else if newly {
        println!("Revoked key {}; its next call is refused.", args.id);
    } else {
        println!("Key {} was already revoked.", args.id);
    }
    Ok(())
}

fn key_rotate(store: &Store, args: &KeyRotateArgs) -> Result<(), Failed> {
    let grace = parse_duration(&args.grace).map_err(|e| format!("--grace: {e}"))?;
    let issued = auth::rotate_key(store, &args.id, grace)?;
    let until = (!grace.is_zero()).then(|| {
        crate::clock::Clock::System
            .unix_secs()
            .saturating_add(i64::try_from(grace.as_secs()).unwrap_or(i64::MAX))
    });
    if args.json {
        println!(
            "{}",
            json!({ "id": issued.public_id, "token": issued.token.expose(), "previous_secret_until": until })
        );
    } else {
        match until {
            Some(at) => println!(
                "Rotated key {}; the old secret works until {}.",
                issued.public_id,
                format_time(at)
            ),
            None => println!(
                "Rotated key {}; the old secret no longer works.",
                issued.public_id
            ),
        }
        println!("New token (shown once; store it now, it cannot be shown again):");
        println!("{}", issued.token.expose());
    }
    Ok(())
}

/// Runs `tollgate client …`.
pub fn client(config: &Config, command: &ClientCommand) -> ExitCode {
    finish(open(config).and_then(|store| match command {
        ClientCommand::Create(args) => client_create(&store, args),
        ClientCommand::List(args) => client_list(&store, args.json),
        ClientCommand::Revoke(args) => client_revoke(&store, args),
    }))
}

fn client_create(store: &Store, args: &ClientCreateArgs) -> Result<(), Failed> {
    let scopes = auth::parse_scope_list(&args.scopes)?;
    let issued = auth::create_client(store, &args.name, &scopes)?;
    if args.json {
        println!(
            "{}",
            json!({ "client_id": issued.client_id, "client_secret": issued.secret.expose(),
                    "name": args.name.trim(), "allowed_scopes": scopes })
        );
    } else {
        println!(
            "Created OAuth client {} ({}), allowed scopes {}.",
            issued.client_id,
            args.name.trim(),
            scopes.join(",")
        );
        println!("Client secret (shown once; store it now, it cannot be shown again):");
        println!("{}", issued.secret.expose());
    }
    Ok(())
}

fn client_json(client: &OAuthClient) -> Value {
    json!({
        "client_id": client.client_id, "name": client.name, "allowed_scopes": client.allowed_scopes,
        "per_minute_limit": client.per_minute_limit, "created_at": client.created_at,
        "status": if client.revoked { "revoked" } else { "active" },
    })
}

fn client_list(store: &Store, as_json: bool) -> Result<(), Failed> {
    let clients = auth::list_clients(store)?;
    if as_json {
        println!(
            "{}",
            Value::Array(clients.iter().map(client_json).collect())
        );
        return Ok(());
    }
    if clients.is_empty() {
        println!(
            "No OAuth clients. Create one with `tollgate client create --name NAME --scopes SCOPES`."
        );
        return Ok(());
    }
    println!(
        "{:<26}  {:<8}  {:<20}  {:<20}  ALLOWED SCOPES",
        "CLIENT ID", "STATUS", "NAME", "CREATED"
    );
    for c in &clients {
        let status = if c.revoked { "revoked" } else { "active" };
        println!(
            "{:<26}  {:<8}  {:<20}  {:<20}  {}",
            c.client_id,
            status,
            c.name,
            format_time(c.created_at),
            c.allowed_scopes.join(",")
        );
    }
    Ok(())
}

fn client_revoke(store: &Store, args: &ClientIdArgs) -> Result<(), Failed> {
    let newly = auth::revoke_client(store, &args.id)?;
    if args.json {
        println!(
            "{}",
            json!({ "client_id": args.id, "revoked": true, "already_revoked": !newly })
        );
    } else if newly {
        println!(
            "Revoked OAuth client {}; calls with its credentials now answer client_revoked.",
            args.id
        );
    } else {
        println!("OAuth client {} was already revoked.", args.id);
    }
    Ok(())
}

/// Runs `tollgate plan …`.
pub fn plan(config: &Config, command: &PlanCommand) -> ExitCode {
    finish(open(config).and_then(|store| match command {
        PlanCommand::List(args) => plan_list(&store, args.json),
        PlanCommand::Show(args) => plan_show(&store, args),
        PlanCommand::Set(args) => plan_set(&store, args),
        PlanCommand::Exclude(args) => plan_edit(&store, args, true),
        PlanCommand::Include(args) => plan_edit(&store, args, false),
    }))
}

fn unknown_plan(slug: &str) -> Failed {
    Failed::from(format!(
        "unknown plan {slug:?}; run `tollgate plan list` to see the plans"
    ))
}

fn plan_json(plan: &crate::store::Plan) -> Value {
    json!({
        "slug": plan.slug, "name": plan.name, "rank": plan.rank,
        "hourly_call_limit": plan.hourly_call_limit,
        "per_minute": { "read": plan.read_per_minute, "write": plan.write_per_minute,
                        "destructive": plan.destructive_per_minute, "send": plan.send_per_minute,
                        "generate": plan.generate_per_minute, "client": plan.client_per_minute },
        "max_active_keys": plan.max_active_keys,
        "excluded_tools": plan.excluded_tools,
    })
}

fn limit_text(limit: Option<impl std::fmt::Display>) -> String {
    limit.map_or_else(|| "unlimited".to_owned(), |l| l.to_string())
}

fn plan_list(store: &Store, as_json: bool) -> Result<(), Failed> {
    let plans = store.plans()?;
    let current = store.company()?.map(|c| c.plan_slug);
    if as_json {
        let list: Vec<Value> = plans.iter().map(plan_json).collect();
        println!("{}", json!({ "current": current, "plans": list }));
        return Ok(());
    }
    println!(
        "{:<2}{:<12}  {:<12}  {:<10}  {:<9}  EXCLUDED TOOLS",
        "", "SLUG", "NAME", "CALLS/HOUR", "MAX KEYS"
    );
    for p in &plans {
        let mark = if current.as_deref() == Some(p.slug.as_str()) {
            "*"
        } else {
            ""
        };
        let excluded = if p.excluded_tools.is_empty() {
            "-".to_owned()
        } else {
            p.excluded_tools.join(",")
        };
        println!(
            "{mark:<2}{:<12}  {:<12}  {:<10}  {:<9}  {excluded}",
            p.slug,
            p.name,
            limit_text(p.hourly_call_limit),
            limit_text(p.max_active_keys)
        );
    }
    Ok(())
}

fn plan_show(store: &Store, args: &PlanSlugArgs) -> Result<(), Failed> {
    let plan = store
        .plan(&args.slug)?
        .ok_or_else(|| unknown_plan(&args.slug))?;
    let shown = plan_json(&plan);
    if args.json {
        println!("{shown}");
        return Ok(());
    }
    println!("{} ({}), rank {}", plan.name, plan.slug, plan.rank);
    println!(
        "  calls per hour:      {}",
        limit_text(plan.hourly_call_limit)
    );
    println!(
        "  per minute per key:  read {}, write {}, destructive {}, send {}, generate {}",
        plan.read_per_minute,
        plan.write_per_minute,
        plan.destructive_per_minute,
        plan.send_per_minute,
        plan.generate_per_minute
    );
    println!("  per minute per OAuth client: {}", plan.client_per_minute);
    println!(
        "  active API keys:     {}",
        limit_text(plan.max_active_keys)
    );
    let excluded = if plan.excluded_tools.is_empty() {
        "none".to_owned()
    } else {
        plan.excluded_tools.join(", ")
    };
    println!("  excluded tools:      {excluded}");
    Ok(())
}

fn plan_set(store: &Store, args: &PlanSlugArgs) -> Result<(), Failed> {
    let Some(plan) = store.plan(&args.slug)? else {
        return Err(unknown_plan(&args.slug));
    };
    if !store.set_company_plan(&args.slug)? {
        return Err(CredentialError::NotInitialised.into());
    }
    let now = crate::clock::Clock::System.unix_secs();
    let active = auth::list_keys(store)?
        .iter()
        .filter(|k| k.status(now) == "active")
        .count();
    let limit = plan.max_active_keys;
    let over = limit.filter(|&l| i64::try_from(active).unwrap_or(i64::MAX) > l);
    if args.json {
        println!(
            "{}",
            json!({ "plan": args.slug, "active_keys": active, "max_active_keys": limit })
        );
    } else {
        println!("The company is now on the {} plan.", args.slug);
    }
    if let Some(limit) = over {
        eprintln!(
            "tollgate: warning: {active} API keys are active and the {} plan allows {limit}; tool \
             calls answer plan_limit_exceeded until you revoke some (`tollgate key list`, \
             `tollgate key revoke ID`)",
            args.slug
        );
    }
    Ok(())
}

fn check_tool_name(tool: &str) -> Result<(), Failed> {
    let ok = (1..=64).contains(&tool.len())
        && tool
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Failed::from(format!(
            "invalid tool name {tool:?}: tool names are letters, digits and _ (e.g. send_invoice)"
        )))
    }
}

fn plan_edit(store: &Store, args: &PlanToolArgs, exclude: bool) -> Result<(), Failed> {
    check_tool_name(&args.tool)?;
    let plan = store
        .plan(&args.slug)?
        .ok_or_else(|| unknown_plan(&args.slug))?;
    let mut excluded = plan.excluded_tools;
    let present = excluded.iter().any(|t| t == &args.tool);
    match (exclude, present) {
        (true, true) => {
            println!("The {} plan already excludes {}.", args.slug, args.tool);
            return Ok(());
        }
        (false, false) => {
            println!("The {} plan already includes {}.", args.slug, args.tool);
            return Ok(());
        }
        (true, false) => excluded.push(args.tool.clone()),
        (false, true) => excluded.retain(|t| t != &args.tool),
    }
    store.set_excluded_tools(&args.slug, &excluded)?;
    let verb = if exclude { "excludes" } else { "includes" };
    println!("The {} plan now {verb} {}.", args.slug, args.tool);
    Ok(())
}

/// Runs `tollgate company …`.
pub fn company(config: &Config, command: &CompanyCommand) -> ExitCode {
    finish(open(config).and_then(|store| match command {
        CompanyCommand::Show(args) => company_show(&store, args.json),
        CompanyCommand::Set(args) => company_set(&store, args),
    }))
}

fn company_mode(store: &Store) -> Result<Mode, StoreError> {
    let mode = store.company_mode()?;
    Ok(mode.as_deref().and_then(Mode::parse).unwrap_or(Mode::Live))
}

fn company_show(store: &Store, as_json: bool) -> Result<(), Failed> {
    let company = store.company()?.ok_or(CredentialError::NotInitialised)?;
    let mode = company_mode(store)?;
    if as_json {
        println!(
            "{}",
            json!({ "name": company.name, "tax_id": company.tax_id, "plan": company.plan_slug,
                    "locale": company.locale, "country": company.country, "mode": mode.as_str() })
        );
        return Ok(());
    }
    println!("name:     {}", company.name);
    println!(
        "tax id:   {}",
        company.tax_id.as_deref().unwrap_or("(not set)")
    );
    println!("plan:     {}", company.plan_slug);
    println!("locale:   {}", company.locale);
    println!("country:  {}", company.country);
    println!("mode:     {}", mode.as_str());
    Ok(())
}

fn company_set(store: &Store, args: &CompanySetArgs) -> Result<(), Failed> {
    if args.name.is_none() && args.tax_id.is_none() && args.locale.is_none() && args.mode.is_none()
    {
        return Err(Failed::from(
            "nothing to change; pass --name, --tax-id, --locale or --mode".to_owned(),
        ));
    }
    let mut company = store.company()?.ok_or(CredentialError::NotInitialised)?;
    if let Some(name) = &args.name {
        if name.trim().is_empty() {
            return Err(Failed::from(
                "--name: the company name cannot be empty".to_owned(),
            ));
        }
        company.name = name.trim().to_owned();
    }
    if let Some(tax_id) = &args.tax_id {
        company.tax_id = Some(tax_id.trim().to_owned()).filter(|t| !t.is_empty());
    }
    if let Some(locale) = &args.locale {
        let locale: Locale = locale.parse().map_err(|e| format!("--locale: {e}"))?;
        company.locale = locale.as_str().to_owned();
    }
    let mode = match &args.mode {
        Some(text) => Some(
            Mode::parse(text.trim())
                .ok_or_else(|| format!("--mode: invalid mode {text:?}: expected live or test"))?,
        ),
        None => None,
    };
    store.set_company(&company)?;
    if let Some(mode) = mode {
        set_mode(store, mode)?;
    }
    company_show(store, args.json)
}

/// Changes the company's mode; entering test mode (from live) fills an empty sandbox in
/// the same transaction, so test keys never find a test mode without one. A sandbox the
/// operator emptied on purpose while in test mode stays empty.
fn set_mode(store: &Store, mode: Mode) -> Result<(), Failed> {
    let filled = sandbox::write(store, |tx| {
        let changed = crate::store::plans::set_company_mode(tx, mode.as_str())?;
        match mode {
            Mode::Test if changed => sandbox::fill_if_empty(tx),
            _ => Ok(None),
        }
    })?;
    if let Some(filled) = filled {
        eprintln!(
            "tollgate: note: test keys work on the sandbox, now filled with {} ({}); \
             reset it with `tollgate sandbox reset [--from-live | --demo | --empty]`",
            filled.seed.describe(),
            filled.summary()
        );
    }
    Ok(())
}

/// Runs `tollgate sandbox …`.
pub fn sandbox(config: &Config, command: &SandboxCommand) -> ExitCode {
    finish(open(config).and_then(|store| match command {
        SandboxCommand::Show(args) => sandbox_show(&store, args.json),
        SandboxCommand::Reset(args) => sandbox_reset(&store, args),
    }))
}

fn sandbox_show(store: &Store, as_json: bool) -> Result<(), Failed> {
    let mode = company_mode(store)?;
    let (live, test) = sandbox::counts(store)?;
    if as_json {
        let rows = |counts: &[(&str, i64)]| -> Value {
            counts
                .iter()
                .map(|(t, n)| ((*t).to_owned(), json!(n)))
                .collect()
        };
        println!(
            "{}",
            json!({ "mode": mode.as_str(), "live": rows(&live), "test": rows(&test) })
        );
        return Ok(());
    }
    println!("company mode: {}", mode.as_str());
    println!("{:<16}  {:>10}  {:>10}", "TABLE", "LIVE", "TEST");
    for ((table, live), (_, test)) in live.iter().zip(&test) {
        println!("{table:<16}  {live:>10}  {test:>10}");
    }
    Ok(())
}

fn sandbox_reset(store: &Store, args: &SandboxResetArgs) -> Result<(), Failed> {
    let seed = if args.demo {
        Seed::Demo
    } else if args.empty {
        Seed::Empty
    } else {
        Seed::FromLive
    };
    let filled: Filled = sandbox::reset(store, seed)?;
    if args.json {
        let counts: serde_json::Map<String, Value> = filled
            .counts
            .iter()
            .map(|(t, n)| ((*t).to_owned(), json!(n)))
            .collect();
        let seed = match filled.seed {
            Seed::FromLive => "from_live",
            Seed::Demo => "demo",
            Seed::Empty => "empty",
        };
        println!("{}", json!({ "seed": seed, "test": counts }));
        return Ok(());
    }
    println!(
        "The sandbox now holds {}: {}.",
        filled.seed.describe(),
        filled.summary()
    );
    if company_mode(store)? == Mode::Live {
        println!(
            "The company is in live mode: test keys are refused until `tollgate company set --mode test`."
        );
    }
    Ok(())
}

/// Runs `tollgate audit`.
pub fn audit(config: &Config, args: &AuditArgs) -> ExitCode {
    finish(open(config).and_then(|store| audit_list(&store, args)))
}

fn audit_list(store: &Store, args: &AuditArgs) -> Result<(), Failed> {
    if args.limit == 0 || args.limit > 10_000 {
        return Err(Failed::from(
            "--limit: give a number from 1 to 10000".to_owned(),
        ));
    }
    let filter = AuditFilter {
        credential_id: args.credential.clone(),
        tool: args.tool.clone(),
        outcome: args.outcome.clone(),
        limit: args.limit,
    };
    let rows = audit::recent(store, &filter)?;
    if args.json {
        let list: Vec<Value> = rows
            .iter()
            .map(|r| {
                json!({ "id": r.id, "at": format_time_ms(r.at_ms), "at_ms": r.at_ms,
                        "request_id": r.request_id, "credential_id": r.credential_id,
                        "client_id": r.client_id, "tool": r.tool, "outcome": r.outcome,
                        "duration_us": r.duration_us, "transport": r.transport,
                        "calls": r.calls, "source": r.source })
            })
            .collect();
        println!("{}", Value::Array(list));
        return Ok(());
    }
    if rows.is_empty() {
        println!("No audited calls match.");
        return Ok(());
    }
    println!(
        "{:<24}  {:<20}  {:<28}  {:<24}  {:>6}  {:>10}  {:<9}  SOURCE",
        "TIME", "CREDENTIAL", "TOOL", "OUTCOME", "CALLS", "DURATION", "TRANSPORT"
    );
    for r in &rows {
        // Clients choose tool names and request ids: escaped, a name cannot forge a row
        // or send escape codes to the operator's terminal.
        let credential = escape_for_terminal(r.credential_id.as_deref().unwrap_or("-"));
        let duration = format!("{:.1}ms", r.duration_us as f64 / 1000.0);
        println!(
            "{:<24}  {:<20}  {:<28}  {:<24}  {:>6}  {:>10}  {:<9}  {}",
            format_time_ms(r.at_ms),
            credential,
            escape_for_terminal(&r.tool),
            escape_for_terminal(&r.outcome),
            r.calls,
            duration,
            escape_for_terminal(&r.transport),
            escape_for_terminal(r.source.as_deref().unwrap_or("-"))
        );
    }
    Ok(())
}

/// `text` with every character that is not printable — controls (newline, escape, …),
/// and the invisible format characters that reorder or hide text (bidi overrides,
/// zero-width marks) — written as a Rust-style escape (`\n`, `\u{1b}`), and `\` as `\\`.
pub fn escape_for_terminal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || is_invisible_format(c) => {
                out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out
}

/// Unicode format characters (category Cf) that change how a line reads without showing.
fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{ad}' | '\u{61c}' | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}')
}

/// Parses `90s`, `15m`, `12h`, `30d`, `2w` (or `0`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let help = || {
        format!(
            "invalid duration {text:?}: write a number and a unit, e.g. 90s, 15m, 12h, 30d or 2w"
        )
    };
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(help)?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| help())?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(help()),
    };
    number
        .checked_mul(unit_secs)
        .map(Duration::from_secs)
        .ok_or_else(help)
}

/// `YYYY-MM-DDTHH:MM:SSZ` for unix seconds.
pub fn format_time(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn format_time_ms(ms: i64) -> String {
    let base = format_time(ms.div_euclid(1000));
    format!("{}.{:03}Z", base.trim_end_matches('Z'), ms.rem_euclid(1000))
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "h", "10", "5y", "-1d", "1.5h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn terminal_output_escapes_what_is_not_printable() {
        assert_eq!(
            escape_for_terminal("x\nFAKE ROW\u{1b}[5m"),
            "x\\nFAKE ROW\\u{1b}[5m"
        );
        assert_eq!(escape_for_terminal("a\\b\tc\r"), "a\\\\b\\tc\\r");
        assert_eq!(
            escape_for_terminal("abc\u{202e}gpj.exe"),
            "abc\\u{202e}gpj.exe"
        );
        assert_eq!(escape_for_terminal("crear_factura_ñ"), "crear_factura_ñ");
        assert_eq!(escape_for_terminal("\u{7f}\u{9b}"), "\\u{7f}\\u{9b}");
    }

    #[test]
    fn times() {
        assert_eq!(format_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_time(1_709_210_096), "2024-02-29T12:34:56Z");
        assert_eq!(
            format_time_ms(1_709_210_096_789),
            "2024-02-29T12:34:56.789Z"
        );
    }
}
