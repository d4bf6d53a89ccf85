//! The `tollgate` command line: argument definitions and the handler of each command.
//!
//! `main` only parses and calls [`run`]. Each handler loads the validated configuration,
//! opens the store when it needs one, and returns an [`ExitCode`]; operator mistakes get a
//! message on stderr that says how to fix them.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::catalog;
use crate::clock::Clock;
use crate::config::{Config, Locale, Overrides};
use crate::guards::Guards;
use crate::protocol::dispatch::Server;
use crate::store::{Company, Store, Unhealthy};
use crate::tools::Registry;

/// Exit code for a refused start: bad configuration or a database newer than the binary.
pub const EXIT_REFUSED: u8 = 2;

/// Why `--conformance-pack` (`tools.conformance_pack`, `TOLLGATE_CONFORMANCE_PACK`) is
/// refused by a build without the fixtures.
const NO_CONFORMANCE_PACK: &str = "the conformance pack was asked for (--conformance-pack, \
    tools.conformance_pack or TOLLGATE_CONFORMANCE_PACK), but this build of tollgate does not \
    carry it: it is compiled in only with `cargo build --features conformance-pack`, for \
    testing; release builds and the .deb never have it";

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
    Init(InitArgs),
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
    /// Show or change the rate limits (show, set): plan defaults, per-credential and
    /// per-client overrides.
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
    #[command(after_help = "Example:
  tollgate audit --tool send_invoice --outcome rate_limited --limit 20")]
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
    /// The REST APIs and MCP servers behind the gate: check what they yield.
    #[command(
        subcommand,
        after_help = "Example:
  tollgate backends check --config /etc/tollgate/tollgate.toml"
    )]
    Backends(crate::ops::backends::BackendsCommand),
    /// Move an installation to another store: copy an SQLite file into PostgreSQL.
    #[command(
        subcommand,
        after_help = "Example:
  tollgate store copy --from /var/lib/tollgate/tollgate.db --to postgres://tollgate@db.internal/tollgate"
    )]
    Store(crate::ops::store_copy::StoreCommand),
}

#[derive(Debug, Args)]
struct InitArgs {
    /// Company legal name.
    #[arg(long, default_value = "My Company")]
    company: String,
    /// Company tax id (NIF/CIF).
    #[arg(long)]
    tax_id: Option<String>,
    /// Plan: free, starter, pro or enterprise.
    #[arg(long, default_value = "pro")]
    plan: String,
    /// Language of error hints: en or es.
    #[arg(long, default_value = "en")]
    locale: String,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
    /// Fill the invoicing back office with sample clients, invoices and payments.
    #[arg(long)]
    demo: bool,
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
    let _log = crate::ops::logging::init(&config.log);
    match cli.command {
        Command::Init(args) => init(&config, &args),
        Command::Stdio(_) => stdio(&config),
        Command::Serve(_) => serve(&config),
        Command::Quickstart { .. } => quickstart(&config),
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
            None => healthcheck(&config),
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
        Command::Plan(command) => crate::ops::admin::plan(&config, &command),
        Command::Company(command) => crate::ops::admin::company(&config, &command),
        Command::Sandbox(command) => crate::ops::admin::sandbox(&config, &command),
        Command::Audit(args) => crate::ops::admin::audit(&config, &args),
        Command::Faults(command) => crate::ops::admin::faults(&config, &command),
        Command::Backends(command) => crate::ops::backends::backends(&config, &command),
        Command::Store(command) => crate::ops::store_copy::store(&config, &command),
    }
}

/// Says why a command is refused (the operator can fix it) and gives its exit status.
pub(super) fn refuse(message: &str) -> ExitCode {
    eprintln!("tollgate: {message}");
    ExitCode::from(EXIT_REFUSED)
}

/// Says why a command failed and gives its exit status.
pub(super) fn fail(message: &str) -> ExitCode {
    eprintln!("tollgate: {message}");
    ExitCode::FAILURE
}

fn open_store(config: &Config, create: bool) -> Result<Store, ExitCode> {
    Store::open_database(
        &config.database,
        &crate::store::StoreOptions::from_config(config, create),
    )
    .map_err(|e| {
        if e.is_refusal() {
            refuse(&e.to_string())
        } else {
            fail(&format!("cannot open the database: {e}"))
        }
    })
}

fn init(config: &Config, args: &InitArgs) -> ExitCode {
    match create_installation(config, args) {
        Ok(_) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

/// Creates (or completes) the installation `args` describe and says what it made; the
/// first admin key's token when one was created.
fn create_installation(config: &Config, args: &InitArgs) -> Result<Option<String>, ExitCode> {
    let locale: Locale = match args.locale.parse() {
        Ok(locale) => locale,
        Err(e) => return Err(fail(&format!("--locale: {e}"))),
    };
    let store = open_store(config, true)?;
    match store.plan(&args.plan) {
        Ok(Some(_)) => {}
        Ok(None) => {
            return Err(fail(&format!(
                "--plan: unknown plan {:?}; run `tollgate plan list`",
                args.plan
            )));
        }
        Err(e) => return Err(fail(&e.to_string())),
    }
    let company = Company {
        name: args.company.clone(),
        tax_id: args.tax_id.clone(),
        plan_slug: args.plan.clone(),
        locale: locale.as_str().to_owned(),
        country: "ES".to_owned(),
    };
    if let Err(e) = store.set_company(&company) {
        return Err(fail(&format!("cannot save the company: {e}")));
    }
    // The first admin key (scopes `*` and `admin`: every tool and the console); `None` when init runs again on a database with keys.
    let admin_key = match crate::ops::admin::first_admin_key(&store) {
        Ok(key) => key,
        Err(e) => return Err(fail(&format!("cannot create the admin key: {e}"))),
    };
    let demo = match args
        .demo
        .then(|| crate::tools::invoicing::demo::seed(&store, crate::tools::Book::Live))
    {
        None => None,
        Some(Ok(seeded)) => Some(seeded),
        Some(Err(crate::tools::invoicing::demo::DemoError::NotEmpty)) => {
            eprintln!("tollgate: the database already has clients; --demo added nothing");
            None
        }
        Some(Err(e)) => return Err(fail(&e.to_string())),
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "database": config.database, "company": company.name, "plan": company.plan_slug,
                                "admin_key_id": admin_key.as_ref().map(|k| k.public_id.as_str()),
                                "admin_key": admin_key.as_ref().map(|k| k.token.expose()),
                                "demo": demo.map(|d| serde_json::json!({ "clients": d.clients, "invoices": d.invoices, "payments": d.payments })) })
        );
    } else {
        if let Some(d) = demo {
            println!(
                "Demo data: {} clients, {} invoices, {} payments.",
                d.clients, d.invoices, d.payments
            );
        }
        println!(
            "Created {} for {} on the {} plan.",
            config.database, company.name, company.plan_slug
        );
        match &admin_key {
            Some(key) => println!(
                "Admin key {} (scopes *, admin: every tool and the console), shown once; store it now, it cannot be shown again:\n{}",
                key.public_id,
                key.token.expose()
            ),
            None => println!("Keys already exist; create more with `tollgate key create`."),
        }
    }
    Ok(admin_key.map(|key| key.token.expose().to_owned()))
}

/// Builds the server for the configured database and tool packs, on the system clock — on
/// a PostgreSQL store corrected to the database server's clock, so that every node reads
/// one time ([`database_clock`]).
pub fn build_server(config: &Config, store: Store) -> Result<Server, String> {
    let clock = database_clock(&store);
    build_server_with_clock(config, store, clock)
}

/// Measures the database server's clock into `shared`, warning when this machine's clock
/// is more than [`CLOCK_SKEW_WARNING_MS`] off it and the skew moved; a failed measurement
/// keeps the last correction.
fn remeasure_clock(store: &Store, shared: &crate::clock::SharedClock) {
    match store.clock_offset_millis() {
        Ok(Some(offset)) => {
            if offset.abs() > CLOCK_SKEW_WARNING_MS
                && (offset - shared.offset_millis()).abs() > CLOCK_SKEW_WARNING_MS / 2
            {
                tracing::warn!(
                    offset_ms = offset,
                    "this machine's clock is off the database server's; tollgate follows the database's"
                );
            }
            shared.set_offset_millis(offset);
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(
            cause = %e,
            "cannot read the database server's clock; keeping the last correction"
        ),
    }
}

/// How often a node re-measures its clock against the database server's.
const CLOCK_REMEASURE: std::time::Duration = std::time::Duration::from_secs(60);

/// A node's skew beyond which it warns (windows and expiries follow the database anyway).
const CLOCK_SKEW_WARNING_MS: i64 = 1_000;

/// The system clock, or on a PostgreSQL store the system clock corrected to the database
/// server's: rate windows, leases and expiries of every node then start and end together
/// however far apart the machines' own clocks drift. The correction is measured at start
/// and again every [`CLOCK_REMEASURE`] on a thread of its own.
fn database_clock(store: &Store) -> Clock {
    if store.dialect() == crate::store::Dialect::Sqlite {
        return Clock::System;
    }
    let shared = crate::clock::SharedClock::default();
    remeasure_clock(store, &shared);
    let follow = shared.clone();
    let store = store.clone();
    let spawned = std::thread::Builder::new()
        .name("database-clock".to_owned())
        .spawn(move || {
            loop {
                std::thread::sleep(CLOCK_REMEASURE);
                remeasure_clock(&store, &follow);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(cause = %e, "cannot start the clock follower; the correction measured at start stays");
    }
    shared.clock()
}

/// Builds the server with every component reading the time from `clock` (tests drive
/// window edges and expiries with a [`crate::clock::ManualClock`]).
pub fn build_server_with_clock(
    config: &Config,
    store: Store,
    clock: Clock,
) -> Result<Server, String> {
    let backends = crate::ops::backends::open(config, &clock)?;
    let registry = build_registry_with(config, &store, &clock, backends.tools())?;
    let locale = match config.locale {
        Some(locale) => locale,
        None => company_locale(&store),
    };
    let state_key = store
        .server_secret("request_state")
        .map(crate::tools::request_state::StateKey::new)
        .map_err(|e| format!("cannot read the server secret: {e}"))?;
    let guards = Guards::new(store.clone(), locale, clock.clone())
        .with_guard_channel(config.errors.guard_channel);
    guards
        .authenticator()
        .limit_argon2_per_second(config.auth.argon2_per_second);
    Ok(Server::new(registry, store, guards, locale, state_key, clock).with_backends(backends))
}

/// The registry of the configured tool packs: the invoicing back office (the embedded
/// default, always registered) and, when configured, the conformance fixtures.
pub fn build_registry(config: &Config, store: &Store, clock: &Clock) -> Result<Registry, String> {
    build_registry_with(config, store, clock, Vec::new())
}

/// [`build_registry`] with the tools of the configured backends beside the packs'; a
/// backend tool named like another tool is refused by name.
pub fn build_registry_with(
    config: &Config,
    store: &Store,
    clock: &Clock,
    backend_tools: Vec<Arc<dyn crate::tools::Tool>>,
) -> Result<Registry, String> {
    let mut tools = crate::tools::invoicing::tools();
    let mut resources = crate::tools::invoicing::resources();
    let mut prompts = crate::tools::invoicing::prompts(store.clone(), clock.clone());
    if config.tools.conformance_pack {
        add_conformance_pack(&mut tools, &mut resources, &mut prompts)?;
    }
    tools.extend(backend_tools);
    Registry::new(
        tools,
        crate::tools::invoicing::retired::RETIRED_TOOLS,
        resources,
        prompts,
    )
    .map_err(|e| e.to_string())
}

/// The tools, resources and prompts of the official conformance suite's fixtures.
#[cfg(feature = "conformance-pack")]
fn add_conformance_pack(
    tools: &mut Vec<Arc<dyn crate::tools::Tool>>,
    resources: &mut Vec<Arc<dyn crate::tools::ResourceProvider>>,
    prompts: &mut Vec<Arc<dyn crate::tools::Prompt>>,
) -> Result<(), String> {
    tools.extend(crate::tools::conformance::tools());
    resources.extend(crate::tools::conformance::resources());
    prompts.extend(crate::tools::conformance::prompts());
    Ok(())
}

/// A build without the `conformance-pack` feature has no fixtures to add.
#[cfg(not(feature = "conformance-pack"))]
fn add_conformance_pack(
    _tools: &mut Vec<Arc<dyn crate::tools::Tool>>,
    _resources: &mut Vec<Arc<dyn crate::tools::ResourceProvider>>,
    _prompts: &mut Vec<Arc<dyn crate::tools::Prompt>>,
) -> Result<(), String> {
    Err(NO_CONFORMANCE_PACK.to_owned())
}

fn company_locale(store: &Store) -> Locale {
    store
        .company()
        .ok()
        .flatten()
        .and_then(|c| c.locale.parse().ok())
        .unwrap_or(Locale::En)
}

/// Opens the existing database and assembles the server for `stdio` and `serve`.
fn open_server(config: &Config) -> Result<Arc<Server>, ExitCode> {
    let store = open_store(config, false)?;
    // A server that cannot write refuses every call: say so, and why, before serving.
    store.ensure_writable().map_err(|e| {
        if e.is_refusal() {
            refuse(&e.to_string())
        } else {
            fail(&format!("cannot write to the database: {e}"))
        }
    })?;
    store.checkpoint_in_background();
    let server = Arc::new(build_server(config, store.clone()).map_err(|e| fail(&e))?);
    crate::guards::audit::prune_in_background(
        &store,
        config.audit.retention_days,
        server.clock().clone(),
    );
    crate::ops::backends::follow_changes(&server, config);
    Ok(server)
}

fn stdio(config: &Config) -> ExitCode {
    let server = match open_server(config) {
        Ok(server) => server,
        Err(code) => return code,
    };
    let token = match crate::transport::stdio::token_from_env() {
        Ok(token) => token,
        Err(e) => return fail(&e),
    };
    tracing::info!(database = %config.database, "serving MCP on stdio");
    let served =
        crate::transport::stdio::serve(Arc::clone(&server), token, config.stdio.max_line_bytes);
    server.backends().stop();
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&format!("stdin: {e}")),
    }
}

fn quickstart(config: &Config) -> ExitCode {
    // A busy address is found before anything is created, so trying again with another
    // `--listen` starts from the same clean state.
    if let Err(e) = std::net::TcpListener::bind(config.http.listen) {
        return refuse(&crate::ops::quickstart::busy_address(
            config.http.listen,
            &e,
        ));
    }
    let created = config.database.file().is_some_and(|path| !path.exists());
    let admin_key = if created {
        let args = InitArgs {
            company: "Demo Company SL".to_owned(),
            tax_id: None,
            plan: "pro".to_owned(),
            locale: "en".to_owned(),
            json: false,
            demo: true,
        };
        match create_installation(config, &args) {
            Ok(key) => key,
            Err(code) => return code,
        }
    } else {
        println!("Using the existing database {}.", config.database);
        None
    };
    serve_then(config, |addr| {
        print!(
            "{}",
            crate::ops::quickstart::ready_text(config, addr, admin_key.as_deref())
        );
    })
}

fn serve(config: &Config) -> ExitCode {
    serve_then(config, |_| {})
}

/// `serve`, calling `ready` once the listener accepts connections.
fn serve_then(config: &Config, ready: impl FnOnce(std::net::SocketAddr)) -> ExitCode {
    let server = match open_server(config) {
        Ok(server) => server,
        Err(code) => return code,
    };
    let served = crate::transport::http::serve_then(Arc::clone(&server), config, ready);
    // Idle keep-alive connections may still hold the server (and its audit writer).
    crate::guards::audit::flush_all();
    server.backends().stop();
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&format!("cannot serve HTTP: {e}")),
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

fn healthcheck(config: &Config) -> ExitCode {
    let store = match open_store(config, false) {
        Ok(store) => store,
        Err(code) => return code,
    };
    let healthy = store
        .health()
        .and_then(|version| quick_check(&store).map(|()| version));
    match healthy {
        Ok(version) => {
            println!("ok: {} (schema version {version})", config.database);
            ExitCode::SUCCESS
        }
        Err(reason) => fail(&format!(
            "unhealthy: {}: {reason} ({})",
            config.database,
            reason.code()
        )),
    }
}

/// `PRAGMA quick_check` of an SQLite store (a PostgreSQL server checks its own pages);
/// the problems it finds go to stderr.
fn quick_check(store: &Store) -> Result<(), Unhealthy> {
    if store.path().is_none() {
        return Ok(());
    }
    match store.quick_check() {
        Ok(found) if found == "ok" => Ok(()),
        Ok(found) => {
            eprintln!(
                "tollgate: PRAGMA quick_check of {}:\n{found}",
                store.location()
            );
            Err(Unhealthy::Corrupt)
        }
        Err(e) => {
            eprintln!(
                "tollgate: PRAGMA quick_check of {} failed: {e}",
                store.location()
            );
            Err(Unhealthy::Corrupt)
        }
    }
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
