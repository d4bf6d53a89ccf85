//! `tollgate store copy`: moving a whole installation from its SQLite file to a PostgreSQL
//! database, for a company that outgrows one node.
//!
//! The source is opened as the store opens it: a file older than this binary is brought up
//! to date first (its migrations run, as `serve` would run them), a newer one is refused.
//! Then the source is only read, in one snapshot. The target is created or migrated like
//! any PostgreSQL store; one that already holds an installation is refused unless
//! `--replace` is given. The copy itself and its verification (row counts and a SHA-256
//! per table, on both sides) are `store::copy`'s; this module reads the arguments, opens
//! the two stores and prints the report.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::config::{Config, Database};
use crate::ops::exit::{fail, refuse};
use crate::store::copy::{CopyError, CopyReport, copy_installation};
use crate::store::{Store, StoreOptions};

/// `tollgate store …`
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy a whole installation from an SQLite file into a PostgreSQL database, in one
    /// transaction, and verify it (rows and a SHA-256 checksum per table). Stop the
    /// servers using the file first, or copy from a `tollgate backup` of it.
    #[command(after_help = "Example:
  tollgate store copy --from /var/lib/tollgate/tollgate.db --to postgres://tollgate@db.internal/tollgate --json")]
    Copy(CopyArgs),
}

/// `tollgate store copy --from <file> --to <url>`
#[derive(Debug, Args)]
pub struct CopyArgs {
    /// The SQLite database to copy (a path or `sqlite:<path>`).
    #[arg(long, value_name = "FILE")]
    from: String,
    /// The PostgreSQL database to copy into (`postgres://user:password@host:port/name`):
    /// an existing database (`createdb`); tollgate's schema is created in it if missing.
    #[arg(long, value_name = "URL")]
    to: String,
    /// Delete everything the target holds first (in the same transaction as the copy).
    #[arg(long)]
    replace: bool,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// Runs a `tollgate store` command.
pub fn store(config: &Config, command: &StoreCommand) -> ExitCode {
    match command {
        StoreCommand::Copy(args) => copy(config, args),
    }
}

fn copy(config: &Config, args: &CopyArgs) -> ExitCode {
    let (from, to) = match databases(args) {
        Ok(pair) => pair,
        Err(message) => return refuse(&message),
    };
    let source = match open(&from, &StoreOptions::from_config(config, false), "--from") {
        Ok(store) => store,
        Err(code) => return code,
    };
    let target = match open(&to, &StoreOptions::from_config(config, true), "--to") {
        Ok(store) => store,
        Err(code) => return code,
    };
    match copy_installation(&source, &target, args.replace) {
        Ok(report) => print_report(&from, &to, &report, args.json),
        Err(refused @ CopyError::TargetNotEmpty(_)) => refuse(&format!("{to}: {refused}")),
        Err(CopyError::Store(e)) => fail(&format!(
            "the copy failed and nothing was committed to {to}: {e}"
        )),
    }
}

/// The two databases of the command line: an SQLite source, a PostgreSQL target.
fn databases(args: &CopyArgs) -> Result<(Database, Database), String> {
    let from = Database::parse(&args.from).map_err(|e| format!("--from: {e}"))?;
    let to = Database::parse(&args.to).map_err(|e| format!("--to: {e}"))?;
    if !matches!(from, Database::Sqlite(_)) {
        return Err(format!(
            "--from: {from} is not an SQLite file; store copy moves an installation from \
             its SQLite file to PostgreSQL"
        ));
    }
    if !matches!(to, Database::Postgres(_)) {
        return Err(format!(
            "--to: {to} is not a PostgreSQL URL (postgres://…); to copy an SQLite file, \
             use `tollgate backup`"
        ));
    }
    Ok((from, to))
}

fn open(database: &Database, opts: &StoreOptions, flag: &str) -> Result<Store, ExitCode> {
    Store::open_database(database, opts).map_err(|e| {
        if e.is_refusal() {
            refuse(&format!("{flag} {database}: {e}"))
        } else {
            fail(&format!("{flag}: cannot open {database}: {e}"))
        }
    })
}

fn print_report(from: &Database, to: &Database, report: &CopyReport, json: bool) -> ExitCode {
    if json {
        println!("{}", report_json(from, to, report));
    } else {
        print!("{}", report_text(from, to, report));
    }
    let differing: Vec<&str> = report
        .tables
        .iter()
        .filter(|t| !t.matches())
        .map(|t| t.table)
        .collect();
    if differing.is_empty() {
        return ExitCode::SUCCESS;
    }
    fail(&format!(
        "verification failed: {} differ between {from} and {to}. The copy was committed; \
         stop every process writing to {from} (or copy from a `tollgate backup` of it) and \
         run the copy again with --replace",
        differing.join(", ")
    ))
}

/// The report as JSON: the databases, whether the target was replaced, whether every
/// table matches, and each table's rows and checksums on both sides.
fn report_json(from: &Database, to: &Database, report: &CopyReport) -> serde_json::Value {
    let tables: Vec<serde_json::Value> = report
        .tables
        .iter()
        .map(|t| {
            serde_json::json!({
                "table": t.table,
                "source_rows": t.source_rows,
                "target_rows": t.target_rows,
                "source_sha256": t.source_sha256,
                "target_sha256": t.target_sha256,
                "matches": t.matches(),
            })
        })
        .collect();
    serde_json::json!({
        "from": from,
        "to": to,
        "replaced": report.replaced,
        "verified": report.verified(),
        "tables": tables,
    })
}

/// The report as a table: rows on each side, the first 16 hex digits of the checksum
/// (the source's, and the target's too where it differs).
fn report_text(from: &Database, to: &Database, report: &CopyReport) -> String {
    let mut out = format!(
        "Copied {from} to {to}{}.\n{:<18} {:>10} {:>10}  {:<16}  check\n",
        if report.replaced {
            " (its earlier contents deleted)"
        } else {
            ""
        },
        "table",
        "source",
        "target",
        "sha256"
    );
    for t in &report.tables {
        let sha = if t.source_sha256 == t.target_sha256 {
            t.source_sha256[..16].to_owned()
        } else {
            format!("{} / {}", &t.source_sha256[..16], &t.target_sha256[..16])
        };
        let check = if t.matches() { "ok" } else { "DIFFERS" };
        out.push_str(&format!(
            "{:<18} {:>10} {:>10}  {sha:<16}  {check}\n",
            t.table, t.source_rows, t.target_rows
        ));
    }
    if report.verified() {
        out.push_str("Verified: every table holds the same rows on both sides.\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::copy::TableCheck;

    fn check(table: &'static str, rows: (u64, u64), sha: (char, char)) -> TableCheck {
        TableCheck {
            table,
            source_rows: rows.0,
            target_rows: rows.1,
            source_sha256: sha.0.to_string().repeat(64),
            target_sha256: sha.1.to_string().repeat(64),
        }
    }

    fn pair() -> (Database, Database) {
        (
            Database::parse("/srv/tollgate.db").expect("path"),
            Database::parse("postgres://tg:secret@db:5432/tollgate").expect("url"),
        )
    }

    #[test]
    fn the_text_report_shows_counts_checksums_and_what_differs() {
        let (from, to) = pair();
        let report = CopyReport {
            replaced: true,
            tables: vec![
                check("company", (1, 1), ('a', 'a')),
                check("audit_log", (12, 11), ('b', 'c')),
            ],
        };
        assert_eq!(
            report_text(&from, &to, &report),
            "Copied /srv/tollgate.db to postgres://tg:***@db:5432/tollgate (its earlier \
             contents deleted).\n\
             table                  source     target  sha256            check\n\
             company                     1          1  aaaaaaaaaaaaaaaa  ok\n\
             audit_log                  12         11  bbbbbbbbbbbbbbbb / cccccccccccccccc  DIFFERS\n"
        );
    }

    #[test]
    fn the_json_report_says_whether_each_table_matches() {
        let (from, to) = pair();
        let report = CopyReport {
            replaced: false,
            tables: vec![check("plans", (4, 4), ('d', 'd'))],
        };
        assert_eq!(
            report_json(&from, &to, &report),
            serde_json::json!({
                "from": "/srv/tollgate.db",
                "to": "postgres://tg:***@db:5432/tollgate",
                "replaced": false,
                "verified": true,
                "tables": [{
                    "table": "plans", "source_rows": 4, "target_rows": 4,
                    "source_sha256": "d".repeat(64), "target_sha256": "d".repeat(64),
                    "matches": true,
                }],
            })
        );
    }

    #[test]
    fn the_source_must_be_sqlite_and_the_target_postgres() {
        let args = |from: &str, to: &str| CopyArgs {
            from: from.to_owned(),
            to: to.to_owned(),
            replace: false,
            json: false,
        };
        assert_eq!(
            databases(&args("a.db", "b.db")).expect_err("sqlite target"),
            "--to: b.db is not a PostgreSQL URL (postgres://…); to copy an SQLite file, use \
             `tollgate backup`"
        );
        assert_eq!(
            databases(&args("postgres://h/x", "postgres://h/y")).expect_err("pg source"),
            "--from: postgres://h/x is not an SQLite file; store copy moves an installation \
             from its SQLite file to PostgreSQL"
        );
        assert!(databases(&args("sqlite:a.db", "postgresql://h/y")).is_ok());
    }
}
