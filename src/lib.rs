//! tollgate: a self-hosted Model Context Protocol server whose every tool call passes a
//! fixed chain of guards (authentication, tool resolution, rate counters, scopes and plan,
//! fiscal guardrails, idempotency) and whose every failure comes from one error catalog.
//!
//! Data flows one way: transport → dispatch → guards → tools → store. See
//! `ARCHITECTURE.md` for the code map and the invariants of each layer.
//!
//! Only the modules the black-box tests and the benchmarks use are public; the others are
//! private to the crate, so the compiler reports what nothing uses.

pub mod audit;
pub mod auth;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod config;
pub mod dispatch;
pub mod http;
pub mod idempotency;
pub mod invoicing;
pub mod oauth;
pub mod protocol;
pub mod ratelimit;
pub mod registry;
pub mod store;

mod admin;
mod backup;
mod guards;
mod jsonrpc;
mod logging;
mod metrics;
mod notify;
mod probe;
mod quota;
mod retired;
mod sessions;
mod state;
mod stdio;

// The fixtures of the official MCP conformance suite (`--conformance-pack`): compiled in
// only with the `conformance-pack` feature, so release builds do not carry them.
#[cfg(feature = "conformance-pack")]
pub mod conformance;
#[cfg(feature = "conformance-pack")]
mod conformance_input;

/// Whether this build carries the conformance fixtures (the `conformance-pack` feature).
pub const HAS_CONFORMANCE_PACK: bool = cfg!(feature = "conformance-pack");
