//! tollgate: a self-hosted Model Context Protocol server whose every tool call passes a
//! fixed chain of guards (authentication, tool resolution, rate counters, scopes and plan,
//! fiscal guardrails, idempotency) and whose every failure comes from one error catalog.
//!
//! Data flows one way: transport → dispatch → guards → tools → store. See
//! `ARCHITECTURE.md` for the code map and the invariants of each layer.
//!
//! Only the modules the black-box tests and the benchmarks use are public; the others are
//! private to the crate, so the compiler reports what nothing uses.

pub mod catalog;
pub mod clock;
pub mod config;
pub mod console;
pub mod guards;
pub mod identity;
pub mod oauth;
pub mod ops;
pub mod protocol;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod transport;

/// Whether this build carries the conformance fixtures (the `conformance-pack` feature).
pub const HAS_CONFORMANCE_PACK: bool = cfg!(feature = "conformance-pack");
