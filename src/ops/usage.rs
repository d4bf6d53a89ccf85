//! The operator's side of the rate limits: `tollgate limits show|set` and `tollgate usage`.
//! A user of the identity provider is named as `tollgate users` names one
//! ([`crate::ops::admin::resolve_user`]); their names come from tokens and are printed
//! escaped.
//!
//! Argument definitions and printing live here; reading and changing the limits is
//! [`crate::guards::ratelimit::limits`]'s job (over the store's plans and credentials). A change takes effect on the next call of every process
//! sharing the database, because the limiter reads the limits inside each charge.

use std::process::ExitCode;

use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use serde_json::json;

use crate::guards::ratelimit::{self, CategoryLimits, LimitChange, LimitsReport, UsageRow};
use crate::ops::admin::{escape_for_terminal, resolve_user};
use crate::store::Store;
use crate::tools::Category;

/// `tollgate limits …`.
#[derive(Debug, Args)]
pub struct LimitsArgs {
    #[command(subcommand)]
    command: LimitsCommand,
}

#[derive(Debug, Subcommand)]
enum LimitsCommand {
    /// Show every plan's defaults and the per-credential, per-user and per-client overrides.
    #[command(after_help = "Example:
  tollgate limits show --json")]
    Show {
        /// Print machine-readable JSON.
        #[arg(long)]
        json: bool,
    },
    /// Change one limit: a plan default, a credential's, a user's or an OAuth client's
    /// override.
    #[command(after_help = "Examples:
  tollgate limits set --plan pro --category write --per-minute 30
  tollgate limits set --credential 3f9a0c2b7d41e8a5c6b0 --category read --per-minute 5
  tollgate limits set --user alice@acme.example --category send --per-minute 2
  tollgate limits set --plan free --per-hour 1000")]
    Set(SetArgs),
}

/// `tollgate limits set`: exactly one of --plan, --credential, --user, --client, then the
/// value.
///
/// Examples: `--plan pro --category write --per-minute 30`, `--plan free --per-hour 1000`,
/// `--plan pro --client-per-minute 500`, `--credential ID --category write --per-minute 5`,
/// `--user USER --category send --per-minute 2`, `--client ID --per-minute 100`,
/// `--credential ID --category write --inherit`, `--user USER --category send --inherit`.
#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("target")
        .required(true)
        .args(["plan", "credential", "user", "client"])
))]
struct SetArgs {
    /// The plan whose defaults change (free, starter, pro, enterprise).
    #[arg(long, value_name = "SLUG")]
    plan: Option<String>,
    /// The credential (public id) whose override changes.
    #[arg(long, value_name = "ID")]
    credential: Option<String>,
    /// The user of the identity provider whose override changes: its id, or a subject or
    /// display name that names exactly one user (`tollgate users list`).
    #[arg(long, value_name = "USER")]
    user: Option<String>,
    /// The OAuth client whose override changes.
    #[arg(long, value_name = "ID")]
    client: Option<String>,
    /// The tool category (with --plan, --credential or --user).
    #[arg(long, value_enum)]
    category: Option<CategoryArg>,
    /// Calls per minute.
    #[arg(long, value_name = "N")]
    per_minute: Option<u64>,
    /// Calls per hour for the whole company (with --plan): a number or `unlimited`.
    #[arg(long, value_name = "N|unlimited", value_parser = parse_per_hour)]
    per_hour: Option<HourlyLimit>,
    /// The plan's default per-OAuth-client limit, calls per minute (with --plan).
    #[arg(long, value_name = "N")]
    client_per_minute: Option<u64>,
    /// Remove the override, so the plan's default applies again (with --credential,
    /// --user or --client).
    #[arg(long, conflicts_with = "per_minute")]
    inherit: bool,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// `tollgate usage`.
#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CategoryArg {
    Read,
    Write,
    Destructive,
    Send,
    Generate,
}

impl From<CategoryArg> for Category {
    fn from(arg: CategoryArg) -> Category {
        match arg {
            CategoryArg::Read => Category::Read,
            CategoryArg::Write => Category::Write,
            CategoryArg::Destructive => Category::Destructive,
            CategoryArg::Send => Category::Send,
            CategoryArg::Generate => Category::Generate,
        }
    }
}

/// A `--per-hour` value: `None` is unlimited.
#[derive(Debug, Clone, Copy)]
struct HourlyLimit(Option<u64>);

fn parse_per_hour(text: &str) -> Result<HourlyLimit, String> {
    if text.eq_ignore_ascii_case("unlimited") {
        return Ok(HourlyLimit(None));
    }
    text.parse()
        .map(|n| HourlyLimit(Some(n)))
        .map_err(|_| format!("expected a whole number of calls or `unlimited`, got {text:?}"))
}

fn fail(message: &str) -> ExitCode {
    eprintln!("tollgate: {message}");
    ExitCode::FAILURE
}

/// Runs `tollgate limits show|set` on `store`.
pub fn limits(store: &Store, args: &LimitsArgs) -> ExitCode {
    match &args.command {
        LimitsCommand::Show { json } => show(store, *json),
        LimitsCommand::Set(set) => apply(store, set),
    }
}

fn show(store: &Store, as_json: bool) -> ExitCode {
    let report = match LimitsReport::load(store) {
        Ok(report) => report,
        Err(e) => return fail(&format!("cannot read the limits: {e}")),
    };
    if as_json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(e) => return fail(&format!("cannot print the limits: {e}")),
        }
    } else {
        print!("{}", render_report(&report));
    }
    ExitCode::SUCCESS
}

fn render_report(report: &LimitsReport) -> String {
    let mut out = format!(
        "Company plan: {}\n\nPlan defaults (per credential and category: calls/minute; \
         plan: calls/hour for the company; client: calls/minute per OAuth client)\n",
        report
            .company_plan
            .as_deref()
            .unwrap_or("(none; run `tollgate init`)")
    );
    out += &format!(
        "  {:<12} {:>10} {:>6} {:>6} {:>12} {:>6} {:>9} {:>7}\n",
        "plan", "per hour", "read", "write", "destructive", "send", "generate", "client"
    );
    for p in &report.plans {
        let hourly = p
            .hourly_call_limit
            .map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
        out += &format!(
            "  {:<12} {:>10} {:>6} {:>6} {:>12} {:>6} {:>9} {:>7}\n",
            p.slug,
            hourly,
            p.read_per_minute,
            p.write_per_minute,
            p.destructive_per_minute,
            p.send_per_minute,
            p.generate_per_minute,
            p.client_per_minute
        );
    }
    out += "\nCredential overrides (calls/minute):\n";
    if report.credentials.is_empty() {
        out += "  (none)\n";
    }
    for c in &report.credentials {
        let set = set_limits(&c.per_minute);
        out += &format!("  {} ({}): {set}\n", c.credential_id, c.name);
    }
    out += "\nUser overrides (calls/minute; names from the identity provider's tokens):\n";
    if report.users.is_empty() {
        out += "  (none)\n";
    }
    for u in &report.users {
        out += &format!(
            "  {} ({}): {}\n",
            u.user_id,
            escape_for_terminal(&u.name),
            set_limits(&u.per_minute)
        );
    }
    out += "\nOAuth client overrides (calls/minute, all the client's credentials together):\n";
    if report.clients.is_empty() {
        out += "  (none)\n";
    }
    for c in &report.clients {
        out += &format!("  {} ({}): {}\n", c.client_id, c.name, c.per_minute);
    }
    out
}

/// The overrides that are set, as `limits show` prints them: `write=5 send=1`.
fn set_limits(per_minute: &CategoryLimits<Option<u64>>) -> String {
    let set: Vec<String> = Category::ALL
        .iter()
        .filter_map(|&cat| per_minute.get(cat).map(|n| format!("{}={n}", cat.as_str())))
        .collect();
    set.join(" ")
}

/// Turns the flags into one change, or says which flags are missing or out of place.
fn change_from(args: &SetArgs) -> Result<LimitChange, String> {
    let category = args.category.map(Category::from);
    if let Some(plan) = &args.plan {
        if args.inherit {
            return Err(
                "--inherit applies to --credential, --user or --client; a plan always has \
                        its own limits (use --per-hour unlimited to lift the hourly one)"
                    .into(),
            );
        }
        let plan = plan.clone();
        return match (
            category,
            args.per_minute,
            args.per_hour,
            args.client_per_minute,
        ) {
            (Some(category), Some(per_minute), None, None) => Ok(LimitChange::PlanCategory {
                plan,
                category,
                per_minute,
            }),
            (None, None, Some(HourlyLimit(per_hour)), None) => {
                Ok(LimitChange::PlanHourly { plan, per_hour })
            }
            (None, None, None, Some(per_minute)) => {
                Ok(LimitChange::PlanClient { plan, per_minute })
            }
            _ => Err(
                "with --plan give one of: --category C --per-minute N, --per-hour \
                      N|unlimited, or --client-per-minute N"
                    .into(),
            ),
        };
    }
    if args.per_hour.is_some() || args.client_per_minute.is_some() {
        return Err("--per-hour and --client-per-minute apply to --plan only".into());
    }
    let per_minute = match (args.per_minute, args.inherit) {
        (Some(n), false) => Some(n),
        (None, true) => None,
        _ => return Err("give --per-minute N, or --inherit to remove the override".into()),
    };
    if let Some(credential_id) = &args.credential {
        let category = category.ok_or_else(|| category_needed("--credential"))?;
        return Ok(LimitChange::Credential {
            credential_id: credential_id.clone(),
            category,
            per_minute,
        });
    }
    if let Some(user) = &args.user {
        let category = category.ok_or_else(|| category_needed("--user"))?;
        // The user as named; `apply` resolves it to an id.
        return Ok(LimitChange::User {
            user_id: user.clone(),
            category,
            per_minute,
        });
    }
    match (&args.client, category) {
        (Some(client_id), None) => Ok(LimitChange::Client {
            client_id: client_id.clone(),
            per_minute,
        }),
        (Some(_), Some(_)) => {
            Err("an OAuth client has one limit for all categories; drop --category".into())
        }
        (None, _) => Err("give --plan, --credential, --user or --client".into()),
    }
}

fn category_needed(flag: &str) -> String {
    format!("with {flag} give --category (read, write, destructive, send or generate)")
}

/// `change` with its user, as the operator named them, resolved to their id.
fn with_user_resolved(store: &Store, change: LimitChange) -> Result<LimitChange, String> {
    match change {
        LimitChange::User {
            user_id,
            category,
            per_minute,
        } => Ok(LimitChange::User {
            user_id: resolve_user(store, &user_id)?.id,
            category,
            per_minute,
        }),
        other => Ok(other),
    }
}

fn apply(store: &Store, args: &SetArgs) -> ExitCode {
    let change = match change_from(args).and_then(|change| with_user_resolved(store, change)) {
        Ok(change) => change,
        Err(message) => return fail(&format!("limits set: {message}")),
    };
    if let Err(e) = change.apply(store) {
        let hint = match e {
            ratelimit::LimitChangeError::NotFound("plan", _) => "; see `tollgate limits show`",
            ratelimit::LimitChangeError::NotFound("user", _) => "; see `tollgate users list`",
            ratelimit::LimitChangeError::NotFound(..) => {
                "; check the id with `tollgate key list` or `tollgate client list`"
            }
            _ => "",
        };
        return fail(&format!("limits set: {e}{hint}"));
    }
    let (what, value) = describe(&change);
    if args.json {
        println!("{}", json!({ "changed": what, "limit": value }));
    } else {
        let value = value.map_or_else(|| "the default".to_owned(), |v| v.to_string());
        println!("{what} is now {value}; it applies from the next call.");
    }
    ExitCode::SUCCESS
}

/// A human name of the changed limit and its new value (`None` = default or unlimited).
fn describe(change: &LimitChange) -> (String, Option<u64>) {
    match change {
        LimitChange::PlanCategory {
            plan,
            category,
            per_minute,
        } => (
            format!(
                "plan {plan}: {} calls per minute per credential",
                category.as_str()
            ),
            Some(*per_minute),
        ),
        LimitChange::PlanHourly { plan, per_hour } => {
            (format!("plan {plan}: calls per hour"), *per_hour)
        }
        LimitChange::PlanClient { plan, per_minute } => (
            format!("plan {plan}: calls per minute per OAuth client"),
            Some(*per_minute),
        ),
        LimitChange::Credential {
            credential_id,
            category,
            per_minute,
        } => (
            format!(
                "credential {credential_id}: {} calls per minute",
                category.as_str()
            ),
            *per_minute,
        ),
        LimitChange::User {
            user_id,
            category,
            per_minute,
        } => (
            format!("user {user_id}: {} calls per minute", category.as_str()),
            *per_minute,
        ),
        LimitChange::Client {
            client_id,
            per_minute,
        } => (
            format!("OAuth client {client_id}: calls per minute"),
            *per_minute,
        ),
    }
}

/// Runs `tollgate usage` on `store`.
pub fn usage(store: &Store, args: &UsageArgs) -> ExitCode {
    let now = crate::clock::Clock::System.unix_secs();
    let rows = match ratelimit::usage(store, now) {
        Ok(rows) => rows,
        Err(e) => return fail(&format!("cannot read the counters: {e}")),
    };
    if args.json {
        println!("{}", json!({ "now": now, "counters": rows }));
    } else {
        print!("{}", render_usage(&rows, now));
    }
    ExitCode::SUCCESS
}

fn render_usage(rows: &[UsageRow], now: i64) -> String {
    if rows.is_empty() {
        return "No calls counted in the current windows.\n".to_owned();
    }
    let mut out = format!(
        "{:<12} {:<24} {:>8} {:>10} {:>10} {:>10}\n",
        "bucket", "key", "used", "limit", "left", "resets in"
    );
    for r in rows {
        let limit = r
            .limit
            .map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
        let left = r
            .remaining
            .map_or_else(|| "-".to_owned(), |n| n.to_string());
        out += &format!(
            "{:<12} {:<24} {:>8} {:>10} {:>10} {:>9}s\n",
            r.bucket,
            r.key,
            r.count,
            limit,
            left,
            (r.reset - now).max(0)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Probe {
        #[command(subcommand)]
        command: LimitsCommand,
    }

    fn parse(args: &[&str]) -> Result<LimitChange, String> {
        let mut argv = vec!["probe", "set"];
        argv.extend_from_slice(args);
        match Probe::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .command
        {
            LimitsCommand::Set(set) => change_from(&set),
            LimitsCommand::Show { .. } => Err("show".into()),
        }
    }

    #[test]
    fn each_documented_form_parses_to_its_change() {
        assert_eq!(
            parse(&["--plan", "pro", "--category", "write", "--per-minute", "5"]),
            Ok(LimitChange::PlanCategory {
                plan: "pro".into(),
                category: Category::Write,
                per_minute: 5
            })
        );
        assert_eq!(
            parse(&["--plan", "free", "--per-hour", "unlimited"]),
            Ok(LimitChange::PlanHourly {
                plan: "free".into(),
                per_hour: None
            })
        );
        assert_eq!(
            parse(&["--plan", "free", "--client-per-minute", "9"]),
            Ok(LimitChange::PlanClient {
                plan: "free".into(),
                per_minute: 9
            })
        );
        assert_eq!(
            parse(&["--credential", "abc", "--category", "read", "--inherit"]),
            Ok(LimitChange::Credential {
                credential_id: "abc".into(),
                category: Category::Read,
                per_minute: None
            })
        );
        assert_eq!(
            parse(&["--client", "c1", "--per-minute", "100"]),
            Ok(LimitChange::Client {
                client_id: "c1".into(),
                per_minute: Some(100)
            })
        );
    }

    #[test]
    fn incomplete_or_mixed_flags_are_refused() {
        assert!(parse(&["--plan", "pro", "--per-minute", "5"]).is_err());
        assert!(parse(&["--credential", "abc", "--per-minute", "5"]).is_err());
        assert!(parse(&["--client", "c1", "--category", "read", "--per-minute", "5"]).is_err());
        assert!(parse(&["--client", "c1", "--per-hour", "5"]).is_err());
        assert!(parse(&["--plan", "pro", "--client", "c1", "--per-minute", "5"]).is_err());
        assert!(parse(&["--plan", "pro", "--per-hour", "lots"]).is_err());
        assert!(parse(&["--client", "c1"]).is_err());
    }

    #[test]
    fn a_users_override_is_set_and_cleared_by_the_name_given() {
        assert_eq!(
            parse(&[
                "--user",
                "alice@acme.example",
                "--category",
                "send",
                "--per-minute",
                "2"
            ]),
            Ok(LimitChange::User {
                user_id: "alice@acme.example".into(),
                category: Category::Send,
                per_minute: Some(2)
            })
        );
        assert_eq!(
            parse(&["--user", "alice", "--category", "send", "--inherit"]),
            Ok(LimitChange::User {
                user_id: "alice".into(),
                category: Category::Send,
                per_minute: None
            })
        );
        assert_eq!(
            parse(&["--user", "alice", "--per-minute", "2"]),
            Err(category_needed("--user"))
        );
        assert!(
            parse(&[
                "--user",
                "a",
                "--credential",
                "b",
                "--category",
                "read",
                "--inherit"
            ])
            .is_err()
        );
    }

    #[test]
    fn the_report_lists_users_overrides_with_their_names_escaped() {
        let report = LimitsReport {
            company_plan: None,
            plans: Vec::new(),
            credentials: Vec::new(),
            clients: Vec::new(),
            users: vec![ratelimit::limits::UserOverrides {
                user_id: "u0123456789abcdef01234567".into(),
                name: "Eve\u{1b}[31m".into(),
                per_minute: CategoryLimits {
                    send: Some(2),
                    ..CategoryLimits::default()
                },
            }],
        };
        let text = render_report(&report);
        assert!(
            text.contains("User overrides (calls/minute; names from the identity provider's tokens):\n  u0123456789abcdef01234567 (Eve\\u{1b}[31m): send=2\n"),
            "{text}"
        );
    }
}
