//! `tollgate approvals list|approve|deny`: the calls a `require_approval` policy rule holds,
//! and a person's decision on one. A decision is written to the store (it applies on every
//! node: the caller's next identical call runs, once, or is refused `approval_denied`) and
//! is an audit row (`cli:approve_call`, `cli:deny_call`) under the machine's user.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::{Value, json};

use crate::clock::{Clock, format_time_ms};
use crate::config::Config;
use crate::ops::admin::escape_for_terminal;
use crate::ops::exit::{fail, refuse};
use crate::store::approvals::{Approval, Decision, Listing};

/// The most approvals one listing shows.
const LISTED: u32 = 500;

/// `tollgate approvals …`
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List the calls waiting for a decision (every approval, newest first, with --all):
    /// id, tool, who called, the policy rule, when, until when, and the arguments.
    #[command(after_help = "Example:
  tollgate approvals list --json")]
    List {
        /// Every approval, decided and expired ones too.
        #[arg(long)]
        all: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Approve a held call: the caller's next identical call (same arguments, same
    /// idempotency key) runs, once.
    #[command(after_help = "Example:
  tollgate approvals approve apr_0f3a9c2e5b7d4e1f8a6b0c9d2e4f6a8b")]
    Approve {
        /// The approval's id (`apr_…`), as the refusal and `approvals list` name it.
        id: String,
    },
    /// Deny a held call, for good: the caller's retries are refused `approval_denied`.
    #[command(after_help = "Example:
  tollgate approvals deny apr_0f3a9c2e5b7d4e1f8a6b0c9d2e4f6a8b")]
    Deny {
        /// The approval's id (`apr_…`).
        id: String,
    },
}

/// Runs an `approvals` command.
pub fn approvals(config: &Config, command: &ApprovalsCommand) -> ExitCode {
    match command {
        ApprovalsCommand::List { all, json } => list(config, *all, *json),
        ApprovalsCommand::Approve { id } => decide(config, id, true),
        ApprovalsCommand::Deny { id } => decide(config, id, false),
    }
}

fn list(config: &Config, all: bool, as_json: bool) -> ExitCode {
    let store = match super::open_store(config, false) {
        Ok(store) => store,
        Err(code) => return code,
    };
    let now = Clock::System.unix_millis();
    let listing = if all { Listing::All } else { Listing::Pending };
    let approvals = match store.approvals(listing, now, LISTED) {
        Ok(approvals) => approvals,
        Err(e) => return fail(&format!("cannot read the approvals: {e}")),
    };
    if as_json {
        let rows: Vec<Value> = approvals.iter().map(|a| shown(a, now)).collect();
        println!("{}", Value::Array(rows));
        return ExitCode::SUCCESS;
    }
    if approvals.is_empty() {
        println!("No call is waiting for a decision.");
        return ExitCode::SUCCESS;
    }
    println!(
        "{:<36}  {:<8}  {:<24}  {:<20}  {:<20}  {:<24}  ARGUMENTS",
        "ID", "STATE", "TOOL", "CALLER", "RULE", "EXPIRES"
    );
    for a in &approvals {
        println!(
            "{:<36}  {:<8}  {:<24}  {:<20}  {:<20}  {:<24}  {}",
            a.id,
            a.state_at(now),
            escape_for_terminal(&a.tool),
            escape_for_terminal(&a.principal),
            escape_for_terminal(&a.rule),
            format_time_ms(a.expires_at),
            escape_for_terminal(&a.arguments)
        );
    }
    ExitCode::SUCCESS
}

/// One approval as `list --json` prints it.
fn shown(a: &Approval, now: i64) -> Value {
    json!({
        "id": a.id, "state": a.state_at(now), "tool": a.tool, "caller": a.principal,
        "rule": a.rule, "idempotency_key": a.idempotency_key,
        "arguments": serde_json::from_str::<Value>(&a.arguments).unwrap_or(Value::Null),
        "created_at": format_time_ms(a.created_at), "expires_at": format_time_ms(a.expires_at),
        "decided_at": a.decided_at.map(format_time_ms), "decided_by": a.decided_by,
        "used_at": a.used_at.map(format_time_ms),
    })
}

fn decide(config: &Config, id: &str, approve: bool) -> ExitCode {
    let store = match super::open_store(config, false) {
        Ok(store) => store,
        Err(code) => return code,
    };
    let by = crate::ops::admin::cli_operator();
    let now = Clock::System.unix_millis();
    let decided = match store.decide_approval(id, approve, (&by, false), now) {
        Ok(decided) => decided,
        Err(e) => return fail(&format!("cannot record the decision: {e}")),
    };
    let approval = match decided {
        Decision::Decided(approval) => approval,
        Decision::Unknown => {
            return refuse(&format!(
                "no approval has the id {}; `tollgate approvals list` shows the calls waiting",
                escape_for_terminal(id)
            ));
        }
        Decision::NotPending(state) => {
            return refuse(&format!(
                "{} is {state}, not waiting for a decision",
                escape_for_terminal(id)
            ));
        }
        // The command line decides as the machine's user, never as a caller.
        Decision::OwnCall => return fail("the approval was refused as the caller's own"),
    };
    let action = if approve { "approve_call" } else { "deny_call" };
    if let Err(e) = crate::ops::admin::record_cli_change(&store, action, id, None) {
        return fail(&format!("decided, but the audit row was not written: {e}"));
    }
    if approve {
        println!(
            "Approved {id} ({} by {}, rule {}): the same call with the same idempotency key now runs, once.",
            escape_for_terminal(&approval.tool),
            escape_for_terminal(&approval.principal),
            escape_for_terminal(&approval.rule)
        );
    } else {
        println!(
            "Denied {id} ({} by {}): the caller's retries are refused.",
            escape_for_terminal(&approval.tool),
            escape_for_terminal(&approval.principal)
        );
    }
    ExitCode::SUCCESS
}
