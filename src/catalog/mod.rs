//! The error catalog: every failure tollgate can report, with all of its identities.
//!
//! `shared/spec/ERRORS.md` is the contract this module implements. Each [`ErrorKind`] is
//! one catalog entry; [`ErrorKind::spec`] is the single exhaustive `match` that decides its
//! JSON-RPC code, string code, HTTP status, numeric category, retryability and hints
//! (`entries`). An [`McpError`] is a kind plus the optional fields that apply to one
//! occurrence (`param`, `required_scope`, `retry_after`, …). Turning an error into a wire
//! body happens in `error` ([`McpError::envelope`], the `data` object, and the JSON-RPC
//! error and `isError` result around it) and in `dispatch`, nowhere else.
//!
//! Beside them: the hint templates and their renderer ([`template`], with `values` for how
//! a field's value reads in a sentence), the failing arguments of a validation
//! ([`problems`]), the guardrail sentences (`guardrails`), the closed list of suggestions
//! (`suggestions`), a sample occurrence of every entry (`examples`) and the catalog as
//! documentation (`docs`: `docs/errors.md` and `tollgate errors`).

mod docs;
mod entries;
mod error;
mod examples;
mod guardrails;
pub mod problems;
mod suggestions;
pub mod template;
mod values;

pub use docs::{render_json, render_markdown};
pub use entries::{Channel, Class, EntrySpec, ErrorKind, StatusRule};
pub use error::{JSONRPC_CODE_FIELD, McpError};
pub use problems::{Expect, Problem};
pub use suggestions::Suggestion;
