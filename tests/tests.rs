//! Black-box tests: each module drives the real `tollgate` binary over stdio or HTTP and
//! asserts the exact JSON-RPC codes and `data` fields of `shared/spec/ERRORS.md`.
//!
//! Tests that need the conformance fixtures (`--conformance-pack`) are compiled only with
//! the `conformance-pack` feature (`cargo test --features conformance-pack`), as are the
//! two modules made of nothing else (`fuzz`, `ratelimit`).

mod multinode;
mod postgres_faults;
mod util;

mod approvals;
mod architecture;
mod backends_config;
mod backends_guards;
mod backends_openapi;
mod backends_resilience;
mod backends_spec_url;
mod backends_upstream;
mod backends_upstream_http;
mod backup;
mod call_notifications;
mod capabilities;
mod clock;
mod console;
mod console_keys;
mod docs;
mod faults;
mod floods;
#[cfg(feature = "conformance-pack")]
mod fuzz;
mod golden;
mod guard_channel;
mod guards;
mod hardening_auth;
mod hardening_store;
mod hints;
mod http;
mod http_sessions_shared;
mod identity;
mod identity_login;
mod idp;
mod invoicing;
mod listener;
mod oauth_cli;
mod oauth_provider;
mod oauth_server;
mod optional_args;
mod packaging_unit;
mod policy;
mod quickstart;
#[cfg(feature = "conformance-pack")]
mod ratelimit;
mod rehearsal;
mod sandbox;
mod scopes;
mod side_doors;
mod stdio_protocol;
mod store_copy;
mod store_file;
mod telemetry;
mod users;
