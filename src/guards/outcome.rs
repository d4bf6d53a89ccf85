//! How a guarded call ends, typed: [`CallOutcome`] is what
//! [`Guards::call_tools`](crate::guards::Guards::call_tools) hands to the dispatcher, which
//! renders it once, and
//! [`Verdict`] is what the audit log and the metrics read from it (`ok` or the failure's
//! catalog entry, and whether a guard refused) — neither parses a rendered body.
//!
//! The class of the error's catalog entry decides which end a failure of a running tool
//! is: a tool-class entry is a tool failure, reported as an `isError` result; any other (a
//! server fault, a guard entry such as a lost idempotency lease, a protocol entry such as a
//! missing client capability) ends the call as a refusal.
//!
//! A refusal of a caller the chain knows is addressed ([`CallOutcome::addressed`]): it carries the
//! caller's [`GuardChannel`], its book and, once charged, its budget, so that the renderer
//! can answer a refusal the model can act on as an `isError` result when that channel is
//! `tool_result`. Either way the audit log and the metrics read the same [`Verdict`].

use serde_json::Value;

use crate::catalog::{Class, ErrorKind, McpError};
use crate::config::GuardChannel;
use crate::guards::ratelimit::Budget;
use crate::tools::{Book, ToolOutput};

/// The end of one `tools/call` that went through the chain.
pub enum CallOutcome {
    /// The call passed every guard, and its tool succeeded (or the result of an earlier
    /// call with the same idempotency key is replayed).
    Admitted {
        /// The tool's output.
        output: Output,
        /// The rate budget left after the call's charge.
        budget: Budget,
        /// The book that served it.
        book: Book,
    },
    /// The call passed every guard and its tool failed: an `isError` result.
    ToolFailed {
        /// The tool's error (of the tool class).
        error: McpError,
        /// The rate budget left after the call's charge.
        budget: Budget,
        /// The book that served it.
        book: Book,
    },
    /// A guard refused the call, or the server could not serve it. Once the caller is
    /// known the chain addresses the refusal ([`CallOutcome::addressed`]): it is then
    /// answered on the caller's guard channel when the model can act on it; otherwise, and
    /// for a caller never known, it is a JSON-RPC error.
    Rejected {
        /// The refusal (or the fault).
        error: McpError,
        /// Whom it goes to, once the caller is known.
        to: Option<Addressee>,
    },
}

/// The caller a refusal goes to, as far as its rendering needs.
#[derive(Debug, Clone)]
pub struct Addressee {
    /// The caller's guard channel (its credential's own, or the setting).
    pub channel: GuardChannel,
    /// The book of its credential.
    pub book: Book,
    /// The rate budget left after the call's charge, when it was charged.
    pub budget: Option<Budget>,
}

/// What an admitted call answers.
pub enum Output {
    /// What the tool returned just now.
    Fresh(ToolOutput),
    /// The result the idempotency ledger stored for a completed call with the same key.
    Replayed(Stored),
}

/// A result as the idempotency ledger keeps it: the tool result as first sent (without the
/// `_meta` entries of the call that sent it), replayed byte for byte.
pub struct Stored {
    /// The stored result object.
    pub result: Value,
    /// The tool failure it records, for an `isError` result.
    failure: Option<Verdict<'static>>,
}

impl Stored {
    /// A result read back from the ledger. The ledger holds rendered results (what a
    /// replay sends must be what was sent), so the code of a stored failure is read out of
    /// the record here, once, as it is loaded.
    pub fn new(result: Value) -> Stored {
        let failure = (result.get("isError") == Some(&Value::Bool(true))).then(|| {
            let code = result
                .pointer("/_meta/dev.tollgate~1error/code")
                .and_then(Value::as_str)
                .unwrap_or("");
            Verdict::Failed(tool_entry(code))
        });
        Stored { result, failure }
    }
}

/// The first tool-class entry whose code is `code` (the record keeps the code, not the
/// entry; twins of one code in the tool class share their class), or `None` for a code
/// the catalog does not hold.
fn tool_entry(code: &str) -> Option<ErrorKind> {
    ErrorKind::with_code(code).find(|kind| kind.spec().class == Class::Tool)
}

/// The code of a replayed tool failure whose code this build's catalog does not hold.
const UNKNOWN_TOOL_FAILURE: &str = "tool_error";

impl CallOutcome {
    /// The outcome of a tool that ran after every guard passed: its error's class decides
    /// between a tool failure and a JSON-RPC error.
    pub fn of_run(run: Result<ToolOutput, McpError>, budget: Budget, book: Book) -> CallOutcome {
        match run {
            Ok(output) => CallOutcome::Admitted {
                output: Output::Fresh(output),
                budget,
                book,
            },
            Err(error) if error.kind().spec().class == Class::Tool => CallOutcome::ToolFailed {
                error,
                budget,
                book,
            },
            Err(error) => CallOutcome::rejected(error),
        }
    }

    /// A refusal not yet addressed to a caller.
    pub fn rejected(error: McpError) -> CallOutcome {
        CallOutcome::Rejected { error, to: None }
    }

    /// The same outcome addressed to a known caller: a refusal learns whom it goes to;
    /// any other outcome is unchanged.
    pub fn addressed(self, to: impl FnOnce() -> Addressee) -> CallOutcome {
        match self {
            CallOutcome::Rejected { error, .. } => CallOutcome::Rejected {
                error,
                to: Some(to()),
            },
            other => other,
        }
    }

    /// The rate budget left after the call's charge, for the rate-limit headers of an
    /// answered call; `None` for a refusal (whose headers come from its error).
    pub fn budget(&self) -> Option<&Budget> {
        match self {
            CallOutcome::Admitted { budget, .. } | CallOutcome::ToolFailed { budget, .. } => {
                Some(budget)
            }
            CallOutcome::Rejected { .. } => None,
        }
    }

    /// How the audit log and the metrics count it.
    pub fn verdict(&self) -> Verdict<'_> {
        match self {
            CallOutcome::Admitted {
                output: Output::Replayed(stored),
                ..
            } => stored.failure.unwrap_or(Verdict::Ok),
            CallOutcome::Admitted { .. } => Verdict::Ok,
            CallOutcome::ToolFailed { error, .. } => Verdict::Failed(Some(error.kind())),
            CallOutcome::Rejected { error, .. } => Verdict::Rejected(error),
        }
    }
}

/// How a finished call ended, as the audit log and the metrics record it.
#[derive(Debug, Clone, Copy)]
pub enum Verdict<'a> {
    /// It succeeded.
    Ok,
    /// Its tool failed (an `isError` result) with this catalog entry; `None` for a
    /// replayed failure whose code this build's catalog does not hold.
    Failed(Option<ErrorKind>),
    /// It ended as this JSON-RPC error: a guard's refusal, or a server fault.
    Rejected(&'a McpError),
}

impl<'a> Verdict<'a> {
    /// The verdict of a request that reads data through the guards (no tool failure there).
    pub fn of_read<T>(outcome: &'a Result<T, McpError>) -> Verdict<'a> {
        match outcome {
            Ok(_) => Verdict::Ok,
            Err(error) => Verdict::Rejected(error),
        }
    }

    /// `ok`, or the catalog code of the failure.
    pub fn code(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Failed(entry) => entry.map_or(UNKNOWN_TOOL_FAILURE, |k| k.spec().code),
            Verdict::Rejected(error) => error.kind().spec().code,
        }
    }

    /// The error, when a guard refused the call (not for a server fault): what the
    /// metrics count as a guard rejection.
    pub fn refusal(self) -> Option<&'a McpError> {
        match self {
            Verdict::Rejected(error) if error.kind().spec().class != Class::ServerFault => {
                Some(error)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Locale;
    use serde_json::json;

    #[test]
    fn the_class_of_a_tool_error_decides_its_channel() {
        let failed = CallOutcome::of_run(
            Err(McpError::new(ErrorKind::InvoiceNotFound)),
            Budget::default(),
            Book::Live,
        );
        assert!(matches!(
            failed.verdict(),
            Verdict::Failed(Some(ErrorKind::InvoiceNotFound))
        ));
        let fault = CallOutcome::of_run(Err(McpError::internal()), Budget::default(), Book::Live);
        assert!(matches!(fault.verdict(), Verdict::Rejected(_)));
        assert!(fault.verdict().refusal().is_none());
        let lost = McpError::new(ErrorKind::IdempotencyKeyInUse);
        let lost = CallOutcome::of_run(Err(lost), Budget::default(), Book::Live);
        assert_eq!(lost.verdict().code(), "idempotency_key_in_use");
        assert!(lost.verdict().refusal().is_some());
    }

    #[test]
    fn a_stored_failure_keeps_its_catalog_code() {
        let code = |result| Stored::new(result).failure.map(Verdict::code);
        let stored = McpError::new(ErrorKind::InvoiceNotFound).to_tool_result(Locale::En);
        assert_eq!(code(stored), Some("invoice_not_found"));
        assert_eq!(code(json!({"content": []})), None);
        let odd = json!({"isError": true, "_meta": {"dev.tollgate/error": {"code": "made_up"}}});
        assert_eq!(code(odd), Some("tool_error"));
        // A code a guard or the server shares names the tool's own entry.
        let entry = |result| match Stored::new(result).failure {
            Some(Verdict::Failed(entry)) => entry,
            _ => panic!("a failure"),
        };
        let unavailable =
            McpError::new(ErrorKind::ToolBackendUnavailable).to_tool_result(Locale::En);
        assert_eq!(entry(unavailable), Some(ErrorKind::ToolBackendUnavailable));
        let limited = McpError::new(ErrorKind::BackendRateLimited).to_tool_result(Locale::En);
        assert_eq!(entry(limited), Some(ErrorKind::BackendRateLimited));
    }
}
