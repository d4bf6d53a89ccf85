//! tollgate: a self-hosted Model Context Protocol server whose every tool call passes a
//! fixed chain of guards (authentication, tool resolution, rate counters, scopes and plan,
//! fiscal guardrails, idempotency) and whose every failure comes from one error catalog.
//!
//! Data flows one way: transport → dispatch → guards → tools → store. See
//! `ARCHITECTURE.md` for the code map and the invariants of each layer.

pub mod admin;
pub mod audit;
pub mod auth;
pub mod backup;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod config;
pub mod conformance;
pub mod conformance_input;

pub mod dispatch;
pub mod guards;
pub mod http;
pub mod idempotency;
pub mod invoicing;
pub mod jsonrpc;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod oauth;
pub mod probe;
pub mod protocol;
pub mod quota;
pub mod ratelimit;
pub mod registry;
pub mod retired;
pub mod sessions;
pub mod state;
pub mod stdio;
pub mod store;
