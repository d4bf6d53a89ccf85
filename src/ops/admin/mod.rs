//! The operator's commands: `key`, `client`, `plan`, `company`, `sandbox`, `faults`,
//! `users`, `oauth` and `audit`, with their arguments (here; `faults`, `users` and `oauth`
//! keep their own) and handlers (`credentials` for keys and clients, `company` for plans,
//! the company and the sandbox, `faults` for rehearsed failures, `users` for the identity
//! provider's users and how the operator names one, `oauth` for the front door's grants and
//! registered clients; `audit` here). `cli` routes to them; the credential
//! model they drive lives in [`crate::guards::auth`], the audit log's writer in
//! [`crate::guards::audit`], the rows (and the audit log's one read) in [`crate::store`].
//!
//! Output is human text by default and one JSON document with `--json`. A token or client
//! secret is printed exactly once, by the command that creates it, and never again. A
//! mistake (unknown id, bad scope, unknown plan) prints a message on stderr that says how
//! to fix it and exits non-zero.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::config::{Config, GuardChannel, Locale};
use crate::guards::auth::{
    self, CredentialError, IssuedKey, KeyInfo, KnownScopes, Mode, NewKey, OAuthClient,
};
use crate::store::audit::{AuditFilter, AuditRow};
use crate::store::{Store, StoreError};
use crate::tools::invoicing::demo::DemoError;
use crate::tools::invoicing::sandbox::{self, Filled, Seed};

mod changes;
mod company;
mod credentials;
mod faults;
mod oauth;
mod text;
mod users;

pub use changes::{cli_operator, record_cli_change};
use company::company_mode;
pub use company::{company, plan, sandbox};
pub use credentials::{client, first_admin_key, key};
pub use faults::{FaultsCommand, faults};
pub use oauth::{OAuthCommand, oauth};
use text::format_time_ms;
pub use text::{escape_for_terminal, format_time, parse_duration};
pub use users::{UsersCommand, resolve_user, users};

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
    #[command(after_help = "Examples:
  tollgate key create --name claude --scopes invoices:read,invoices:write,clients:read
  tollgate key create --name nightly-export --scopes reports:generate --expires-in 30d --json")]
    Create(KeyCreateArgs),
    /// List API keys and their status (never their secrets).
    #[command(after_help = "Example:
  tollgate key list --json")]
    List(JsonArg),
    /// Revoke a key: running servers refuse it from their next call.
    #[command(after_help = "Example:
  tollgate key revoke 3f9a0c2b7d41e8a5c6b0")]
    Revoke(KeyIdArgs),
    /// Give a key a new secret; the old secret keeps working for the grace period.
    #[command(after_help = "Example:
  tollgate key rotate 3f9a0c2b7d41e8a5c6b0 --grace 24h")]
    Rotate(KeyRotateArgs),
    /// Change a key's settings: running servers apply them from its next call.
    #[command(after_help = "Example:
  tollgate key set 3f9a0c2b7d41e8a5c6b0 --guard-channel tool_result")]
    Set(KeySetArgs),
}

/// `tollgate key set`
#[derive(Debug, Args)]
pub struct KeySetArgs {
    /// The key's id, as `tollgate key list` shows it.
    id: String,
    /// How the guard refusals of its calls that a model can act on are answered:
    /// `tool_result`, `jsonrpc`, or `default` to follow `[errors] guard_channel`.
    #[arg(long, value_name = "CHANNEL")]
    guard_channel: String,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// `tollgate key create`
#[derive(Debug, Args)]
pub struct KeyCreateArgs {
    /// A label: who or what uses the key.
    #[arg(long)]
    name: String,
    /// Comma-separated scopes: a built-in tool's `resource:action` (invoices:read), a
    /// backend's `<backend>:<category>` (crm:read), `*` for every tool, `admin` for the
    /// console. `tollgate tools` lists them all; an unknown one is refused.
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
    /// How the guard refusals of its calls that a model can act on are answered,
    /// `tool_result` or `jsonrpc` (default: follow `[errors] guard_channel`).
    #[arg(long, value_name = "CHANNEL")]
    guard_channel: Option<String>,
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
    #[command(after_help = "Example:
  tollgate client create --name billing-bot --scopes invoices:read,payments:write")]
    Create(ClientCreateArgs),
    /// List OAuth clients (never their secrets).
    #[command(after_help = "Example:
  tollgate client list --json")]
    List(JsonArg),
    /// Revoke a client: every call with its credentials answers `client_revoked`.
    #[command(after_help = "Example:
  tollgate client revoke client5e0d2a9c41b7f3e8d6a1")]
    Revoke(ClientIdArgs),
}

/// `tollgate client create`
#[derive(Debug, Args)]
pub struct ClientCreateArgs {
    /// A label for the client.
    #[arg(long)]
    name: String,
    /// Comma-separated scopes its tokens may carry (as `key create --scopes`, but not
    /// `admin`); `tollgate tools` lists them all.
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
    #[command(after_help = "Example:
  tollgate plan list")]
    List(JsonArg),
    /// Show one plan: limits, active-keys allowance, excluded tools.
    #[command(after_help = "Example:
  tollgate plan show free --json")]
    Show(PlanSlugArgs),
    /// Move the company to another plan (applies to the next call of every server).
    #[command(after_help = "Example:
  tollgate plan set enterprise")]
    Set(PlanSlugArgs),
    /// Exclude a tool from a plan: hidden from tools/list, `plan_upgrade_required` if called.
    #[command(after_help = "Example:
  tollgate plan exclude starter send_invoice")]
    Exclude(PlanToolArgs),
    /// Include an excluded tool in a plan again.
    #[command(after_help = "Example:
  tollgate plan include starter send_invoice")]
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
    #[command(after_help = "Example:
  tollgate company show")]
    Show(JsonArg),
    /// Change the company's name, tax id, locale or mode.
    #[command(after_help = "Example:
  tollgate company set --name \"ACME Iberia SL\" --locale es")]
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
    #[command(after_help = "Example:
  tollgate sandbox show --json")]
    Show(JsonArg),
    /// Empty the sandbox and fill it again: with a copy of the live book (the default), the
    /// demo data, or nothing. The live book is never touched.
    #[command(after_help = "Examples:
  tollgate sandbox reset
  tollgate sandbox reset --empty")]
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

/// Rows `tollgate audit` shows unless `--limit` says otherwise.
const AUDIT_DEFAULT_LIMIT: u32 = 50;

/// `tollgate audit`
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only calls made with this credential (its id).
    #[arg(long, value_name = "ID")]
    credential: Option<String>,
    /// Only calls of this user of the identity provider: its id, or a subject or display
    /// name that names exactly one user (`tollgate users list`).
    #[arg(long, value_name = "USER", conflicts_with = "credential")]
    user: Option<String>,
    /// Only calls of this tool.
    #[arg(long, value_name = "NAME")]
    tool: Option<String>,
    /// Only this outcome: ok, or an error code such as insufficient_scope.
    #[arg(long, value_name = "CODE")]
    outcome: Option<String>,
    /// Show at most this many rows, newest first.
    #[arg(long, value_name = "N", default_value_t = AUDIT_DEFAULT_LIMIT)]
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
    Store::open_database(
        &config.database,
        &crate::store::StoreOptions::from_config(config, false),
    )
    .map_err(|e| {
        if e.is_refusal() {
            Failed {
                message: e.to_string(),
                code: ExitCode::from(crate::ops::exit::EXIT_REFUSED),
            }
        } else {
            Failed::from(format!("cannot open the database: {e}"))
        }
    })
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
    let credential_id = match &args.user {
        Some(wanted) => Some(resolve_user(store, wanted)?.id),
        None => args.credential.clone(),
    };
    let filter = AuditFilter {
        credential_id,
        tool: args.tool.clone(),
        outcome: args.outcome.clone(),
        limit: args.limit,
        ..AuditFilter::default()
    };
    let rows = store.audit_rows(&filter)?;
    let names = users::user_names(store, &rows)?;
    let name_of = |r: &AuditRow| r.credential_id.as_ref().and_then(|id| names.get(id));
    if args.json {
        let list: Vec<Value> = rows
            .iter()
            .map(|r| {
                json!({ "id": r.id, "at": format_time_ms(r.at_ms), "at_ms": r.at_ms,
                        "request_id": r.request_id, "credential_id": r.credential_id,
                        "client_id": r.client_id, "tool": r.tool, "outcome": r.outcome,
                        "duration_us": r.duration_us, "transport": r.transport,
                        "calls": r.calls, "source": r.source, "backend": r.backend,
                        "trace_id": r.trace_id, "user_name": name_of(r) })
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
        // Clients choose tool names and request ids, and a provider's tokens the names of
        // its users: escaped, a name cannot forge a row or send escape codes to the
        // operator's terminal.
        let mut credential = escape_for_terminal(r.credential_id.as_deref().unwrap_or("-"));
        if let Some(name) = name_of(r) {
            credential = format!("{credential} ({})", escape_for_terminal(name));
        }
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
