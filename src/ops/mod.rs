//! The operator's side: the command line (`cli`, which only parses and hands each command
//! to its module), what assembles a server (`assemble`, with the registry of the packs and
//! backends in `registry`), the commands that serve (`stdio`, `serve` and `quickstart` in
//! `serve`), `init`, the operator's commands (keys, clients, plans, company, sandbox and
//! audit in `admin`; rate limits and usage in `usage`; backup and restore; `store copy`, the
//! move from an SQLite file to PostgreSQL, in `store_copy`; `tools`, every tool with its
//! scope, category and plans; the backends in `backends`), the health checks, how a command
//! ends (`exit`), and process logging. The top layer: it may use every other.

pub mod admin;
pub mod approvals;
pub mod assemble;
pub mod backends;
pub mod backup;
pub mod cli;
mod exit;
pub mod healthcheck;
mod init;
pub mod logging;
mod pins;
pub mod quickstart;
mod registry;
mod serve;
pub mod store_copy;
pub mod tools;
pub mod usage;

use std::process::ExitCode;

use crate::config::Config;
use crate::store::Store;

/// Opens the configured database (creating it when `create`), or says why it cannot and
/// gives the exit status.
pub(crate) fn open_store(config: &Config, create: bool) -> Result<Store, ExitCode> {
    Store::open_database(
        &config.database,
        &crate::store::StoreOptions::from_config(config, create),
    )
    .map_err(|e| {
        if e.is_refusal() {
            exit::refuse(&e.to_string())
        } else {
            exit::fail(&format!("cannot open the database: {e}"))
        }
    })
}
