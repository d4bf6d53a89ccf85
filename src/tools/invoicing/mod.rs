//! The built-in invoicing back office, the embedded default tool pack: clients, numbering
//! series, invoices with lines and VAT, payments, an outbox for sending, and CSV exports,
//! stored in the same SQLite file as everything else (`schema.sql`, last section).
//!
//! What it registers (always on, unlike the conformance pack):
//! - **tools** ([`tools`]) — read, write, destructive, send and generate tools named
//!   `<verb>_<noun>`, each with its scope, category, idempotency policy and schemas; business
//!   rules inside them fail as `isError` results with catalog codes;
//! - **fiscal guardrails** ([`guardrails`]) — checked before a tool runs (`-32008`);
//! - **resources** ([`resources`](mod@resources)) — one markdown guide per guardrail at its `guardrail_uri`;
//! - **prompts** ([`prompts`](mod@prompts)) — guided workflows.
//!
//! Money is integer cents with one rounding rule ([`money`]); tax ids are checksum-validated
//! ([`taxid`]); dates are `YYYY-MM-DD` ([`date`]). [`demo`] fills a sandbox company.
//!
//! Books: every table holds two books of rows, `live` and `test` ([`crate::tools::Book`]);
//! a call works on its credential's book only ([`crate::store::invoicing`] filters every
//! statement by it), and [`sandbox`] fills and resets the test book.
//!
//! The model (ids, clients, invoices, lines, payments) is the store's
//! ([`crate::store::invoicing::model`]): the tools work on the very types the tables are
//! read into. [`model`] re-exports it and renders it in tool results.
//!
//! Scopes: `clients:read|write|delete`, `invoices:read|write|void|send`, `payments:write`,
//! `reports:generate`. `delete_invoice` needs `invoices:write`, not `invoices:void`: it only
//! deletes drafts, which carry no legal effect; cancelling an issued invoice is the
//! privileged act. `list_payments` needs `invoices:read` (payments belong to an invoice's
//! record).

mod args;
pub mod date;
pub mod demo;
pub mod guardrails;
pub mod model;
pub mod money;
pub mod prompts;
pub mod resources;
pub mod retired;
pub mod sandbox;
pub mod schemas;
pub mod taxid;
mod tools;

use std::sync::Arc;

use crate::store::Store;
use crate::tools::{Prompt, ResourceProvider, Tool};

/// Read clients.
pub const SCOPE_CLIENTS_READ: &str = "clients:read";
/// Create and change clients.
pub const SCOPE_CLIENTS_WRITE: &str = "clients:write";
/// Delete clients.
pub const SCOPE_CLIENTS_DELETE: &str = "clients:delete";
/// Read invoices and their payments.
pub const SCOPE_INVOICES_READ: &str = "invoices:read";
/// Create, change, issue and delete (draft) invoices.
pub const SCOPE_INVOICES_WRITE: &str = "invoices:write";
/// Void issued invoices.
pub const SCOPE_INVOICES_VOID: &str = "invoices:void";
/// Send invoices.
pub const SCOPE_INVOICES_SEND: &str = "invoices:send";
/// Record payments.
pub const SCOPE_PAYMENTS_WRITE: &str = "payments:write";
/// Generate exports and reports.
pub const SCOPE_REPORTS_GENERATE: &str = "reports:generate";

/// The invoicing tools.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    tools::all()
}

/// The guardrail guides.
pub fn resources() -> Vec<Arc<dyn ResourceProvider>> {
    vec![Arc::new(resources::GuardrailGuides)]
}

/// The guided workflows (they read `store` for completions and figures, `clock` for the date).
pub fn prompts(store: Store, clock: crate::clock::Clock) -> Vec<Arc<dyn Prompt>> {
    prompts::all(store, clock)
}
