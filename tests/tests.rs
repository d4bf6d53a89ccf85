//! Black-box tests: each module drives the real `tollgate` binary over stdio or HTTP and
//! asserts the exact JSON-RPC codes and `data` fields of `shared/spec/ERRORS.md`.

mod util;

mod docs;
mod guards;
mod stdio_protocol;
mod ratelimit;
mod backup;
mod http;
mod invoicing;
mod fuzz;
mod faults;
mod floods;
