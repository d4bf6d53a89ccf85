//! The `tollgate` command line: the argument definitions and [`run`], which loads the
//! validated configuration, starts logging and hands each command to the module that
//! handles it.
//!
//! `main` only parses and calls [`run`]. Each handler opens the store when it needs one and
//! returns an [`ExitCode`]; operator mistakes get a message on stderr that says how to fix
//! them.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use super::assemble::open_store;
use super::exit::refuse;
use super::registry::NO_CONFORMANCE_PACK;
use crate::catalog;
use crate::config::{Config, Overrides};

/// tollgate: an MCP server for business tools, with guards on every call.
#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version,
    about,
    propagate_version = true,
    after_help = "Examples:
  tollgate init --company \"ACME SL\" --tax-id B12345674 --demo
  tollgate key create --name claude --scopes invoices:read,clients:read
  tollgate tools
  tollgate serve --listen 127.0.0.1:8787"
)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// The options every command takes, shown under their own heading in every help page.
#[derive(Debug, Args)]
#[command(next_help_heading = GLOBAL_OPTIONS)]
struct GlobalArgs {
    /// Configuration file (TOML); its [[backends]] decide which backend scopes exist. Also
    /// `TOLLGATE_CONFIG`.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// SQLite file or postgres:// URL of the database (default: tollgate.db in the current
    /// directory). Also `TOLLGATE_DATABASE`.
    #[arg(long, global = true, value_name = "FILE|URL")]
    database: Option<PathBuf>,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, global = true)]
    log_level: Option<String>,
    /// Log format: human or json.
    #[arg(long, global = true)]
    log_format: Option<String>,
}

/// The heading of the options every command takes.
const GLOBAL_OPTIONS: &str = "Global options";

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the database and the company.
    #[command(after_help = "Examples:
  tollgate init --company \"ACME SL\" --tax-id B12345674 --plan pro --locale es
  tollgate --database /var/lib/tollgate/tollgate.db init --demo --json")]
    Init(crate::ops::init::InitArgs),
    /// Serve MCP over stdin/stdout; the credential comes from TOLLGATE_TOKEN or TOLLGATE_TOKEN_FILE.
    #[command(after_help = "Example:
  TOLLGATE_TOKEN_FILE=/etc/tollgate/agent.key tollgate stdio --database /var/lib/tollgate/tollgate.db")]
    Stdio(ServeArgs),
    /// Serve MCP over Streamable HTTP (POST /mcp), plus /healthz and the OAuth endpoints.
    #[command(after_help = "Examples:
  tollgate serve --listen 127.0.0.1:8787
  tollgate serve --config /etc/tollgate/tollgate.toml --database postgres://tollgate@db.internal/tollgate --listen 0.0.0.0:8787 --allow-non-loopback")]
    Serve(HttpArgs),
    /// Try tollgate: create a demo database if there is none, print an admin key, serve HTTP.
    #[command(after_help = "Example:
  tollgate quickstart --listen 127.0.0.1:9000")]
    Quickstart {
        /// Address to listen on (default 127.0.0.1:8787).
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
    },
    /// Print the error catalog.
    #[command(after_help = "Examples:
  tollgate errors > errors.md
  tollgate errors --format json")]
    Errors {
        /// Output format.
        #[arg(long, value_enum, default_value_t = CatalogFormat::Markdown)]
        format: CatalogFormat,
    },
    /// List every tool (built-in and backend) with its scope, category and plans, then
    /// every scope a credential can hold.
    #[command(after_help = "Examples:
  tollgate tools
  tollgate tools --config /etc/tollgate/tollgate.toml --json
  tollgate tools --format markdown > scopes.md")]
    Tools(crate::ops::tools::ToolsArgs),
    /// Validate the configuration and print the effective settings.
    #[command(after_help = "Example:
  tollgate check-config --config /etc/tollgate/tollgate.toml")]
    CheckConfig,
    /// Check that the database opens, its schema is tollgate's and current, it is writable
    /// and (SQLite) passes PRAGMA quick_check (exit 0 when healthy); with --url, probe a
    /// running server's /healthz over HTTP instead.
    #[command(after_help = "Examples:
  tollgate healthcheck --database /var/lib/tollgate/tollgate.db
  tollgate healthcheck --url http://127.0.0.1:8787/healthz --timeout 2")]
    Healthcheck(crate::ops::healthcheck::HealthcheckArgs),
    /// Write a consistent online copy of the database (safe while servers run).
    #[command(after_help = "Example:
  tollgate backup /var/backups/tollgate/tollgate-2025-06-30.db")]
    Backup(crate::ops::backup::BackupArgs),
    /// Replace the database with a checked backup (stop the service first).
    #[command(after_help = "Example:
  tollgate restore /var/backups/tollgate/tollgate-2025-06-30.db --force")]
    Restore(crate::ops::backup::RestoreArgs),
    /// Show or change the rate limits (show, set): plan defaults, per-credential,
    /// per-user and per-client overrides.
    #[command(after_help = "Examples:
  tollgate limits show
  tollgate limits set --plan pro --category write --per-minute 30")]
    Limits(crate::ops::usage::LimitsArgs),
    /// Show the current rate counters and what is left in each.
    #[command(after_help = "Example:
  tollgate usage --json")]
    Usage(crate::ops::usage::UsageArgs),
    /// Manage API keys: create, list, revoke, rotate, set.
    #[command(
        subcommand,
        after_help = "Examples:
  tollgate key create --name claude --scopes invoices:read,clients:read
  tollgate key list"
    )]
    Key(crate::ops::admin::KeyCommand),
    /// Manage OAuth clients: create, list, revoke.
    #[command(
        subcommand,
        after_help = "Examples:
  tollgate client create --name billing-bot --scopes invoices:read
  tollgate client list"
    )]
    Client(crate::ops::admin::ClientCommand),
    /// The users of the company's identity provider who have called: list, block,
    /// unblock.
    #[command(
        subcommand,
        after_help = "Examples:
  tollgate users list
  tollgate users block alice@acme.example"
    )]
    Users(crate::ops::admin::UsersCommand),
    /// The OAuth front door's grants and registered clients: grants, revoke-grant,
    /// clients, delete-client.
    #[command(
        subcommand,
        name = "oauth",
        after_help = "Examples:
  tollgate oauth grants
  tollgate oauth revoke-grant g_5e0d2a9c41b7f3e8d6a15e0d2a9c41b7"
    )]
    OAuth(crate::ops::admin::OAuthCommand),
    /// The plans: list, show, set (move the company to another), exclude and include
    /// (edit what a plan includes).
    #[command(
        subcommand,
        after_help = "Examples:
  tollgate plan list
  tollgate plan set starter"
    )]
    Plan(crate::ops::admin::PlanCommand),
    /// Show or change the company: show, set.
    #[command(
        subcommand,
        after_help = "Examples:
  tollgate company show
  tollgate company set --mode test"
    )]
    Company(crate::ops::admin::CompanyCommand),
    /// The sandbox, the test book of the business data that test keys use: show, reset.
    #[command(
        subcommand,
        after_help = "Examples:
  tollgate sandbox show
  tollgate sandbox reset --demo"
    )]
    Sandbox(crate::ops::admin::SandboxCommand),
    /// List recent tool calls from the audit log.
    #[command(after_help = "Examples:
  tollgate audit --tool send_invoice --outcome rate_limited --limit 20
  tollgate audit --user alice@acme.example")]
    Audit(crate::ops::admin::AuditArgs),
    /// Rehearse failures on a test-mode installation, making chosen calls fail on purpose:
    /// add, list, clear.
    #[command(
        subcommand,
        after_help = "Examples:
  tollgate faults add --tool send_invoice --error timeout --count 3
  tollgate faults clear"
    )]
    Faults(crate::ops::admin::FaultsCommand),
    /// The REST APIs and MCP servers behind the gate: check what they yield, list the
    /// pinned definitions of the upstream tools (pins), approve or reject a changed one.
    #[command(
        subcommand,
        after_help = "Example:
  tollgate backends check --config /etc/tollgate/tollgate.toml"
    )]
    Backends(crate::ops::backends::BackendsCommand),
    /// The calls a `require_approval` policy rule holds: list them, approve or deny one.
    #[command(
        subcommand,
        after_help = "Example:
  tollgate approvals list"
    )]
    Approvals(crate::ops::approvals::ApprovalsCommand),
    /// Move an installation to another store: copy an SQLite file into PostgreSQL.
    #[command(
        subcommand,
        after_help = "Example:
  tollgate store copy --from /var/lib/tollgate/tollgate.db --to postgres://tollgate@db.internal/tollgate"
    )]
    Store(crate::ops::store_copy::StoreCommand),
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Expose the MCP conformance-suite fixture tools, resources and prompts (only in a
    /// build with the `conformance-pack` feature: [`command`] hides it from any other's
    /// help).
    #[arg(long)]
    conformance_pack: bool,
}

/// The command line's definition, `--conformance-pack` of `serve` and `stdio` shown only
/// when `has_conformance_pack` (a build without the fixtures refuses the flag, so its help
/// does not offer it).
pub fn command(has_conformance_pack: bool) -> clap::Command {
    let shown = |c: clap::Command| c.mut_arg("conformance_pack", |a| a.hide(!has_conformance_pack));
    Cli::command()
        .mut_subcommand("serve", shown)
        .mut_subcommand("stdio", shown)
}

/// Parses this process's arguments, with the help of this build (see [`command`]); a
/// mistake or `--help` prints and exits, as clap does.
pub fn parse() -> Cli {
    let matches = command(crate::HAS_CONFORMANCE_PACK).get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

#[derive(Debug, Args)]
struct HttpArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// Address to listen on (default 127.0.0.1:8787).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Allow listening on a non-loopback address.
    #[arg(long)]
    allow_non_loopback: bool,
    /// Development mode: requests without a token run as this credential (its public id).
    /// Loopback only; never use it in production.
    #[arg(long, value_name = "PUBLIC_ID")]
    dev_credential: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CatalogFormat {
    Markdown,
    Json,
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    let mut overrides = Overrides {
        database: cli.global.database.clone(),
        log_level: cli.global.log_level.clone(),
        log_format: cli.global.log_format.clone(),
        ..Overrides::default()
    };
    match &cli.command {
        Command::Stdio(args) if args.conformance_pack => overrides.conformance_pack = Some(true),
        Command::Quickstart { listen } => overrides.listen = listen.clone(),
        Command::Serve(args) => {
            if args.serve.conformance_pack {
                overrides.conformance_pack = Some(true);
            }
            overrides.listen = args.listen.clone();
            overrides.dev_credential = args.dev_credential.clone();
            if args.allow_non_loopback {
                overrides.allow_non_loopback = Some(true);
            }
        }
        _ => {}
    }
    let config = match Config::from_process(cli.global.config.as_deref(), &overrides) {
        Ok(config) => config,
        Err(e) => return refuse(&format!("configuration error: {e}")),
    };
    if config.tools.conformance_pack && !crate::HAS_CONFORMANCE_PACK {
        return refuse(NO_CONFORMANCE_PACK);
    }
    // Held until the command returns: dropping it flushes the queued log lines.
    // Spans are exported by the commands that serve MCP requests.
    let serves = matches!(
        cli.command,
        Command::Stdio(_) | Command::Serve(_) | Command::Quickstart { .. }
    );
    let _log = crate::ops::logging::init(&config.log, serves.then_some(&config.telemetry));
    match cli.command {
        Command::Init(args) => crate::ops::init::init(&config, &args),
        Command::Stdio(_) => crate::ops::serve::stdio(&config),
        Command::Serve(_) => crate::ops::serve::serve(&config),
        Command::Quickstart { .. } => crate::ops::serve::quickstart(&config),
        Command::Errors { format } => errors(format),
        Command::Tools(args) => match open_store(&config, false) {
            Ok(store) => crate::ops::tools::tools(&config, &store, &args),
            Err(code) => code,
        },
        Command::CheckConfig => {
            println!("configuration is valid\n{}", config.describe());
            ExitCode::SUCCESS
        }
        Command::Healthcheck(args) => match &args.url {
            Some(url) => crate::ops::healthcheck::healthcheck_url(url, args.timeout),
            None => crate::ops::healthcheck::healthcheck_database(&config),
        },
        Command::Backup(args) => match open_store(&config, false) {
            Ok(store) => crate::ops::backup::backup(&store, &args),
            Err(code) => code,
        },
        Command::Restore(args) => crate::ops::backup::restore(&config, &args),
        Command::Limits(args) => match open_store(&config, false) {
            Ok(store) => crate::ops::usage::limits(&store, &args),
            Err(code) => code,
        },
        Command::Usage(args) => match open_store(&config, false) {
            Ok(store) => crate::ops::usage::usage(&store, &args),
            Err(code) => code,
        },
        Command::Key(command) => crate::ops::admin::key(&config, &command),
        Command::Client(command) => crate::ops::admin::client(&config, &command),
        Command::Users(command) => crate::ops::admin::users(&config, &command),
        Command::OAuth(command) => crate::ops::admin::oauth(&config, &command),
        Command::Plan(command) => crate::ops::admin::plan(&config, &command),
        Command::Company(command) => crate::ops::admin::company(&config, &command),
        Command::Sandbox(command) => crate::ops::admin::sandbox(&config, &command),
        Command::Audit(args) => crate::ops::admin::audit(&config, &args),
        Command::Faults(command) => crate::ops::admin::faults(&config, &command),
        Command::Backends(command) => crate::ops::backends::backends(&config, &command),
        Command::Approvals(command) => crate::ops::approvals::approvals(&config, &command),
        Command::Store(command) => crate::ops::store_copy::store(&config, &command),
    }
}

fn errors(format: CatalogFormat) -> ExitCode {
    match format {
        CatalogFormat::Markdown => print!("{}", catalog::render_markdown()),
        CatalogFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&catalog::render_json()).unwrap_or_default()
        ),
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command below the top one, with its path (`key create`).
    fn every_command(command: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
        for sub in command.get_subcommands() {
            let sub_path = format!("{path} {}", sub.get_name()).trim().to_owned();
            out.push((sub_path.clone(), sub.clone()));
            every_command(sub, &sub_path, out);
        }
    }

    fn help_of(mut command: clap::Command, path: &[&str]) -> String {
        command.build();
        let mut at = &mut command;
        for name in path {
            at = at.find_subcommand_mut(name).expect("a subcommand");
        }
        at.render_long_help().to_string()
    }

    #[test]
    fn the_definition_holds_together() {
        command(true).debug_assert();
        command(false).debug_assert();
    }

    #[test]
    fn every_command_has_an_example() {
        let mut all = Vec::new();
        every_command(&command(true), "", &mut all);
        assert!(all.len() > 40, "{}", all.len());
        for (path, command) in all {
            let after = command.get_after_help().map(ToString::to_string);
            assert!(
                after.as_deref().is_some_and(
                    |a| a.starts_with("Example") && a.contains(&format!("tollgate {path}"))
                ),
                "`tollgate {path}` has no example of itself: {after:?}"
            );
        }
    }

    #[test]
    fn a_parents_summary_names_each_of_its_commands() {
        let mut all = vec![(String::new(), command(true))];
        every_command(&command(true), "", &mut all);
        for (path, parent) in all.iter().filter(|(path, _)| !path.is_empty()) {
            let about = parent
                .get_about()
                .map(ToString::to_string)
                .unwrap_or_default();
            for child in parent.get_subcommands() {
                assert!(
                    about.contains(child.get_name()),
                    "the summary of `tollgate {path}` does not name `{}`: {about}",
                    child.get_name()
                );
            }
        }
    }

    #[test]
    fn the_global_options_have_a_heading_of_their_own() {
        for path in [
            &[][..],
            &["key", "create"][..],
            &["serve"][..],
            &["tools"][..],
        ] {
            let help = help_of(command(true), path);
            assert_eq!(
                help.matches("Global options:").count(),
                1,
                "{path:?}: {help}"
            );
            let (own, global) = help.split_once("Global options:").expect("the heading");
            assert!(global.contains("--database <FILE|URL>"), "{path:?}: {help}");
            assert!(global.contains("postgres:// URL"), "{path:?}: {help}");
            assert!(!own.contains("--database"), "{path:?}: {help}");
            assert!(!own.contains("--log-level"), "{path:?}: {help}");
        }
    }

    #[test]
    fn the_conformance_flag_is_offered_only_by_a_build_that_has_the_pack() {
        for name in ["serve", "stdio"] {
            assert!(
                !help_of(command(false), &[name]).contains("--conformance-pack"),
                "{name}"
            );
            assert!(
                help_of(command(true), &[name]).contains("--conformance-pack"),
                "{name}"
            );
        }
    }
}
