//! Black-box tests: each module drives the real `tollgate` binary over stdio or HTTP and
//! asserts the exact JSON-RPC codes and `data` fields of `shared/spec/ERRORS.md`.

mod util;

mod backup;
mod docs;
mod faults;
mod floods;
mod fuzz;
mod golden;
mod guards;
mod hardening_auth;
mod hardening_store;
mod http;
mod invoicing;
mod listener;
mod ratelimit;
mod sandbox;
mod side_doors;
mod stdio_protocol;
