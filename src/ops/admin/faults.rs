//! `tollgate faults …`: rehearsed failures on a test-mode installation, over
//! [`crate::store::faults`]. Running servers see a change on their next call; the chain's
//! rehearsal step ([`crate::guards::faults`]) answers with the catalog error a fault names.

use super::*;
use crate::clock::Clock;
use crate::guards::faults::{rehearsable, rehearsable_codes};
use crate::store::faults::{Fault, NewFault};
use crate::tools::Resolution;

/// `tollgate faults …`
#[derive(Debug, Subcommand)]
pub enum FaultsCommand {
    /// Make calls of a tool fail on purpose with a catalog error (test mode only).
    #[command(after_help = "Examples:
  tollgate faults add --tool create_invoice --error rate_limited --probability 0.2
  tollgate faults add --tool send_invoice --error timeout --count 3")]
    Add(FaultAddArgs),
    /// List the rehearsed failures and the firings each has left.
    #[command(after_help = "Example:
  tollgate faults list")]
    List(JsonArg),
    /// Remove one rehearsed failure, or all of them.
    #[command(after_help = "Examples:
  tollgate faults clear 2
  tollgate faults clear")]
    Clear(FaultClearArgs),
}

/// `tollgate faults add`
#[derive(Debug, Args)]
pub struct FaultAddArgs {
    /// The tool whose calls fail.
    #[arg(long, value_name = "NAME")]
    tool: String,
    /// Only the calls of this credential (a key's id, as `tollgate key list` shows it).
    #[arg(long, value_name = "ID")]
    credential: Option<String>,
    /// The catalog code to answer with, e.g. rate_limited, timeout, mcp_guardrail_violation.
    #[arg(long, value_name = "CODE")]
    error: String,
    /// The chance that a matching call fails, above 0 and at most 1.
    #[arg(long, value_name = "P", default_value_t = 1.0)]
    probability: f64,
    /// Fail this many calls, then stop (default: until cleared).
    #[arg(long, value_name = "N")]
    count: Option<i64>,
    /// The `retry_after` to report, in seconds (retryable errors; for rate_limited the
    /// default is the time until the caller's bucket resets).
    #[arg(long, value_name = "SECONDS")]
    retry_after: Option<i64>,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// `tollgate faults clear`
#[derive(Debug, Args)]
pub struct FaultClearArgs {
    /// The fault's id, as `tollgate faults list` shows it (default: every fault).
    id: Option<i64>,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `tollgate faults …`.
pub fn faults(config: &Config, command: &FaultsCommand) -> ExitCode {
    finish(open(config).and_then(|store| match command {
        FaultsCommand::Add(args) => fault_add(config, &store, args),
        FaultsCommand::List(args) => fault_list(&store, args.json),
        FaultsCommand::Clear(args) => fault_clear(&store, args),
    }))
}

fn fault_add(config: &Config, store: &Store, args: &FaultAddArgs) -> Result<(), Failed> {
    if store.company()?.is_none() {
        return Err(CredentialError::NotInitialised.into());
    }
    if company_mode(store)? != Mode::Test {
        return Err(Failed {
            message: "faults can only be added while the company is in test mode (a live \
                      installation never rehearses failures); switch with \
                      `tollgate company set --mode test`"
                .to_owned(),
            code: ExitCode::from(crate::ops::exit::EXIT_REFUSED),
        });
    }
    let kind = rehearsable(&args.error).ok_or_else(|| {
        Failed::from(format!(
            "--error: {:?} cannot be rehearsed; give one of: {}",
            args.error,
            rehearsable_codes().join(", ")
        ))
    })?;
    check_tool(config, store, &args.tool, kind)?;
    check_numbers(args, kind)?;
    if let Some(id) = &args.credential {
        let exists =
            store.with_conn(|conn| crate::store::credentials::credential_exists(conn, id))?;
        if !exists {
            return Err(CredentialError::UnknownKey(id.clone()).into());
        }
    }
    let new = NewFault {
        tool: &args.tool,
        credential_id: args.credential.as_deref(),
        code: kind.spec().code,
        probability: args.probability,
        count: args.count,
        retry_after: args.retry_after,
        created_at: Clock::System.unix_secs(),
    };
    let id = store.in_transaction(|tx| crate::store::faults::insert_fault(tx, &new))?;
    if args.json {
        println!("{}", fault_json(&stored(id, &new)));
    } else {
        println!("Added fault {id}: {}.", describe(&stored(id, &new)));
    }
    Ok(())
}

/// The fault as the store now holds it.
fn stored(id: i64, new: &NewFault<'_>) -> Fault {
    Fault {
        id,
        tool: new.tool.to_owned(),
        credential_id: new.credential_id.map(str::to_owned),
        code: new.code.to_owned(),
        probability: new.probability,
        remaining: new.count,
        retry_after: new.retry_after,
        created_at: new.created_at,
    }
}

/// The tool must be one the chain reaches its rehearsal step with: a registered tool (a
/// retired name is refused before it); a guardrail failure needs a tool with guardrails.
fn check_tool(
    config: &Config,
    store: &Store,
    name: &str,
    kind: crate::catalog::ErrorKind,
) -> Result<(), Failed> {
    let registry = crate::ops::registry::build_registry(config, store, &Clock::System)?;
    match registry.resolve(name) {
        Resolution::Tool(tool) => {
            if kind == crate::catalog::ErrorKind::GuardrailViolation && !tool.tool.has_guardrails()
            {
                return Err(Failed::from(format!(
                    "--error mcp_guardrail_violation: {name} has no guardrails; rehearse it on \
                     a tool that has (e.g. create_invoice, issue_invoice, void_invoice)"
                )));
            }
            Ok(())
        }
        Resolution::Retired(retired) => Err(Failed::from(format!(
            "--tool: {name} is retired, and every call of it already answers tool_retired \
             (replacement {}); rehearse on a registered tool",
            retired.replacement
        ))),
        Resolution::Held(_) | Resolution::Unknown => Err(Failed::from(format!(
            "--tool: no tool is named {name:?}; the tools are: {}",
            registry
                .tools()
                .iter()
                .map(|t| &*t.spec().name)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

fn check_numbers(args: &FaultAddArgs, kind: crate::catalog::ErrorKind) -> Result<(), Failed> {
    if !(args.probability > 0.0 && args.probability <= 1.0) {
        return Err(Failed::from(
            "--probability: give a number above 0 and at most 1 (e.g. 0.25)".to_owned(),
        ));
    }
    if args.count.is_some_and(|n| n < 1) {
        return Err(Failed::from(
            "--count: give a whole number of calls, at least 1 (leave it out to fail every call)"
                .to_owned(),
        ));
    }
    match args.retry_after {
        Some(s) if s < 0 => Err(Failed::from(
            "--retry-after: give a whole number of seconds, 0 or more".to_owned(),
        )),
        Some(_) if !kind.spec().retryable => Err(Failed::from(format!(
            "--retry-after: {} is not retryable, so it reports no retry_after",
            kind.spec().code
        ))),
        _ => Ok(()),
    }
}

fn fault_json(fault: &Fault) -> Value {
    json!({
        "id": fault.id, "tool": fault.tool, "credential_id": fault.credential_id,
        "error": fault.code, "probability": fault.probability, "remaining": fault.remaining,
        "retry_after": fault.retry_after, "created_at": fault.created_at,
    })
}

/// One line about a fault: which calls, which error, how often.
fn describe(fault: &Fault) -> String {
    let who = fault.credential_id.as_deref().map_or_else(
        || "any credential".to_owned(),
        |id| format!("credential {id}"),
    );
    let times = fault.remaining.map_or_else(
        || "until cleared".to_owned(),
        |n| format!("{n} firing(s) left"),
    );
    let wait = fault
        .retry_after
        .map(|s| format!(", retry_after {s}s"))
        .unwrap_or_default();
    format!(
        "calls of {} by {who} fail with {} (probability {}{wait}), {times}",
        fault.tool, fault.code, fault.probability
    )
}

fn fault_list(store: &Store, as_json: bool) -> Result<(), Failed> {
    let faults = store.faults()?;
    if as_json {
        println!("{}", Value::Array(faults.iter().map(fault_json).collect()));
        return Ok(());
    }
    if faults.is_empty() {
        println!(
            "No rehearsed failures. Add one with `tollgate faults add --tool NAME --error CODE`."
        );
        return Ok(());
    }
    for fault in &faults {
        println!("{:>4}  {}", fault.id, describe(fault));
    }
    Ok(())
}

fn fault_clear(store: &Store, args: &FaultClearArgs) -> Result<(), Failed> {
    let cleared = store.clear_faults(args.id)?;
    if let (Some(id), 0) = (args.id, cleared) {
        return Err(Failed::from(format!(
            "no fault has the id {id}; run `tollgate faults list` to see the ids"
        )));
    }
    if args.json {
        println!("{}", json!({ "cleared": cleared }));
    } else {
        println!("Cleared {cleared} rehearsed failure(s).");
    }
    Ok(())
}
