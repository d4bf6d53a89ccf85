//! The `tollgate` command line: argument definitions and the handler of each command.
//!
//! `main` only parses and calls [`run`]. Each handler loads the validated configuration,
//! opens the store when it needs one, and returns an [`ExitCode`]; operator mistakes get a
//! message on stderr that says how to fix them.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::catalog;
use crate::config::{Config, Locale, Overrides};
use crate::dispatch::Server;
use crate::guards::Guards;
use crate::registry::Registry;
use crate::store::{Company, Store, StoreError};

/// Exit code for a refused start: bad configuration or a database newer than the binary.
pub const EXIT_REFUSED: u8 = 2;

/// tollgate: an MCP server for business tools, with guards on every call.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct GlobalArgs {
    /// Configuration file (TOML). Also `TOLLGATE_CONFIG`.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// SQLite database file (default: tollgate.db in the current directory).
    #[arg(long, global = true, value_name = "FILE")]
    database: Option<PathBuf>,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, global = true)]
    log_level: Option<String>,
    /// Log format: human or json.
    #[arg(long, global = true)]
    log_format: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the database and the company.
    Init(InitArgs),
    /// Serve MCP over stdin/stdout; the credential comes from TOLLGATE_TOKEN or TOLLGATE_TOKEN_FILE.
    Stdio(ServeArgs),
    /// Serve MCP over Streamable HTTP (POST /mcp), plus /healthz and the OAuth endpoints.
    Serve(HttpArgs),
    /// Print the error catalog.
    Errors {
        /// Output format.
        #[arg(long, value_enum, default_value_t = CatalogFormat::Markdown)]
        format: CatalogFormat,
    },
    /// Validate the configuration and print the effective settings.
    CheckConfig,
    /// Check that the database opens and its schema is current (exit 0 when healthy).
    Healthcheck,
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
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Expose the MCP conformance-suite fixture tools, resources and prompts.
    #[arg(long)]
    conformance_pack: bool,
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
        Command::Serve(args) => {
            if args.serve.conformance_pack {
                overrides.conformance_pack = Some(true);
            }
            overrides.listen = args.listen.clone();
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
    crate::logging::init(&config.log);
    match cli.command {
        Command::Init(args) => init(&config, &args),
        Command::Stdio(_) => stdio(&config),
        Command::Serve(_) => serve(&config),
        Command::Errors { format } => errors(format),
        Command::CheckConfig => {
            println!("configuration is valid\n{}", config.describe());
            ExitCode::SUCCESS
        }
        Command::Healthcheck => healthcheck(&config),
    }
}

fn refuse(message: &str) -> ExitCode {
    eprintln!("tollgate: {message}");
    ExitCode::from(EXIT_REFUSED)
}

fn fail(message: &str) -> ExitCode {
    eprintln!("tollgate: {message}");
    ExitCode::FAILURE
}

fn open_store(config: &Config, create: bool) -> Result<Store, ExitCode> {
    Store::open(&config.database, &config.store_options(create)).map_err(|e| match e {
        StoreError::TooNew { .. } | StoreError::Missing(_) => refuse(&e.to_string()),
        other => fail(&format!("cannot open the database: {other}")),
    })
}

fn init(config: &Config, args: &InitArgs) -> ExitCode {
    let locale: Locale = match args.locale.parse() {
        Ok(locale) => locale,
        Err(e) => return fail(&format!("--locale: {e}")),
    };
    let store = match open_store(config, true) {
        Ok(store) => store,
        Err(code) => return code,
    };
    match store.plan(&args.plan) {
        Ok(Some(_)) => {}
        Ok(None) => return fail(&format!("--plan: unknown plan {:?}; run `tollgate plan list`", args.plan)),
        Err(e) => return fail(&e.to_string()),
    }
    let company = Company {
        name: args.company.clone(),
        tax_id: args.tax_id.clone(),
        plan_slug: args.plan.clone(),
        locale: locale.as_str().to_owned(),
        country: "ES".to_owned(),
    };
    if let Err(e) = store.set_company(&company) {
        return fail(&format!("cannot save the company: {e}"));
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "database": config.database, "company": company.name, "plan": company.plan_slug })
        );
    } else {
        println!(
            "Created {} for {} on the {} plan.",
            config.database.display(),
            company.name,
            company.plan_slug
        );
    }
    ExitCode::SUCCESS
}

/// Builds the server for the configured database and tool packs.
pub fn build_server(config: &Config, store: Store) -> Result<Server, String> {
    let mut tools = Vec::new();
    let mut resources = Vec::new();
    let mut prompts = Vec::new();
    if config.tools.conformance_pack {
        tools.extend(crate::conformance::tools());
        resources.extend(crate::conformance::resources());
        prompts.extend(crate::conformance::prompts());
    }
    let registry = Registry::new(tools, crate::retired::RETIRED_TOOLS, resources, prompts)
        .map_err(|e| e.to_string())?;
    let locale = match config.locale {
        Some(locale) => locale,
        None => company_locale(&store),
    };
    Ok(Server::new(registry, store.clone(), Guards::new(store, locale), locale))
}

fn company_locale(store: &Store) -> Locale {
    store
        .company()
        .ok()
        .flatten()
        .and_then(|c| c.locale.parse().ok())
        .unwrap_or(Locale::En)
}

fn stdio(config: &Config) -> ExitCode {
    let store = match open_store(config, true) {
        Ok(store) => store,
        Err(code) => return code,
    };
    let server = match build_server(config, store) {
        Ok(server) => Arc::new(server),
        Err(e) => return fail(&e),
    };
    let token = match crate::stdio::token_from_env() {
        Ok(token) => token,
        Err(e) => return fail(&e),
    };
    tracing::info!(database = %config.database.display(), "serving MCP on stdio");
    match crate::stdio::serve(server, token, config.stdio.max_line_bytes) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&format!("stdin: {e}")),
    }
}

fn serve(config: &Config) -> ExitCode {
    let store = match open_store(config, true) {
        Ok(store) => store,
        Err(code) => return code,
    };
    let server = match build_server(config, store) {
        Ok(server) => Arc::new(server),
        Err(e) => return fail(&e),
    };
    match crate::http::serve(server, config) {
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
    match store.schema_version() {
        Ok(version) => {
            println!("ok: {} (schema version {version})", config.database.display());
            ExitCode::SUCCESS
        }
        Err(e) => fail(&format!("unhealthy: {e}")),
    }
}
