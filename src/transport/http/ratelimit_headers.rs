//! The rate-limit headers of a reply: from the typed [`Budget`] of a charged request, or
//! from the refusal of one (a `-32006`, or another error that says when to retry).
//!
//! Syntax (draft-ietf-httpapi-ratelimit-headers-10, structured fields; one list member
//! per bucket, the policy name is the bucket name):
//!
//! ```text
//! RateLimit-Policy: "read";q=120;w=60, "plan";q=50000;w=3600
//! RateLimit: "read";r=119;t=42, "plan";r=49990;t=1800
//! X-RateLimit-Limit: 120          (tightest bucket: fewest calls left)
//! X-RateLimit-Remaining: 119
//! X-RateLimit-Reset: 1764464400   (unix seconds when its window ends, as GitHub does)
//! ```
//!
//! `q` is the limit, `w` the window in seconds, `r` the calls left and `t` the seconds
//! until the window resets. On a refusal the exceeded bucket is reported with `r=0`, plus
//! `Retry-After: <retry_after>` (delay-seconds). A bucket whose window is unknown (e.g.
//! `auth`) gets no `w`.

use serde_json::Value;

use crate::catalog::McpError;
use crate::guards::ratelimit::{Budget, CLIENT_BUCKET, PLAN_BUCKET, window_secs};
use crate::tools::Category;

/// The headers of a charged request: every bucket of `budget`, the tightest one in the
/// `X-RateLimit-*` trio; `t` counts from `now` (unix seconds). No bucket, no headers.
pub(super) fn budget(budget: &Budget, now: i64) -> Vec<(String, String)> {
    let Some(tight) = budget.tightest() else {
        return Vec::new();
    };
    // Written straight into the two list values (every successful call carries them).
    let mut policy = String::with_capacity(32 * budget.buckets().len());
    let mut state = String::with_capacity(32 * budget.buckets().len());
    for b in budget.buckets() {
        push_policy(&mut policy, b.bucket, b.limit, Some(b.window_secs));
        push_state(
            &mut state,
            b.bucket,
            b.remaining(),
            u64::try_from(b.reset - now).unwrap_or(0),
        );
    }
    vec![
        ("RateLimit-Policy".to_owned(), policy),
        ("RateLimit".to_owned(), state),
        ("X-RateLimit-Limit".to_owned(), tight.limit.to_string()),
        (
            "X-RateLimit-Remaining".to_owned(),
            tight.remaining().to_string(),
        ),
        ("X-RateLimit-Reset".to_owned(), tight.reset.to_string()),
    ]
}

/// The headers of a refusal: `Retry-After` when the error says when to retry, and the
/// exceeded bucket when it names one (`bucket`, `limit`, `reset`). Other errors get none.
pub(super) fn refusal(err: &McpError) -> Vec<(String, String)> {
    let fields = err.fields();
    let Some(retry_after) = fields.get("retry_after").and_then(Value::as_u64) else {
        return Vec::new();
    };
    let mut headers = vec![("Retry-After".to_owned(), retry_after.to_string())];
    let bucket = fields.get("bucket").and_then(Value::as_str);
    let limit = fields.get("limit").and_then(Value::as_u64);
    let reset = fields.get("reset").and_then(Value::as_i64);
    if let (Some(name), Some(limit), Some(reset)) = (bucket, limit, reset) {
        let window = matches!(name, PLAN_BUCKET | CLIENT_BUCKET)
            || Category::ALL.iter().any(|c| c.as_str() == name);
        let mut policy = String::new();
        push_policy(&mut policy, name, limit, window.then(|| window_secs(name)));
        let mut state = String::new();
        push_state(&mut state, name, 0, retry_after);
        headers.push(("RateLimit-Policy".to_owned(), policy));
        headers.push(("RateLimit".to_owned(), state));
        headers.push(("X-RateLimit-Limit".to_owned(), limit.to_string()));
        headers.push(("X-RateLimit-Remaining".to_owned(), "0".to_owned()));
        headers.push(("X-RateLimit-Reset".to_owned(), reset.to_string()));
    }
    headers
}

/// Appends one member to a `RateLimit-Policy` list: `"name";q=limit;w=window` (no `w` for a
/// bucket whose window is unknown).
fn push_policy(out: &mut String, name: &str, limit: u64, window: Option<i64>) {
    use std::fmt::Write as _;
    push_member(out, name);
    // Writing into a String cannot fail.
    let _ = write!(out, ";q={limit}");
    if let Some(window) = window {
        let _ = write!(out, ";w={window}");
    }
}

/// Appends one member to a `RateLimit` list: `"name";r=remaining;t=seconds`.
fn push_state(out: &mut String, name: &str, remaining: u64, seconds: u64) {
    use std::fmt::Write as _;
    push_member(out, name);
    let _ = write!(out, ";r={remaining};t={seconds}");
}

/// Starts a list member named `name`: the separator after an earlier member, then the name.
fn push_member(out: &mut String, name: &str) {
    if !out.is_empty() {
        out.push_str(", ");
    }
    push_sf_string(out, name);
}

/// Appends a structured-field string (RFC 9651 §3.3.3): quoted, `\` and `"` escaped, and
/// anything outside printable ASCII dropped.
fn push_sf_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars().filter(|c| (' '..='~').contains(c)) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guards::ratelimit::BucketState;

    const T0: i64 = 1_764_464_400; // a minute and hour boundary

    fn pairs(headers: &[(String, String)]) -> Vec<(&str, &str)> {
        headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn a_budget_shows_every_bucket_and_the_tightest() {
        let charged = Budget::new(vec![
            BucketState {
                bucket: "write",
                limit: 60,
                count: 1,
                reset: T0 + 60,
                window_secs: 60,
            },
            BucketState {
                bucket: "plan",
                limit: 500,
                count: 499,
                reset: T0 + 3600,
                window_secs: 3600,
            },
        ]);
        assert_eq!(
            pairs(&budget(&charged, T0 + 20)),
            [
                (
                    "RateLimit-Policy",
                    "\"write\";q=60;w=60, \"plan\";q=500;w=3600"
                ),
                ("RateLimit", "\"write\";r=59;t=40, \"plan\";r=1;t=3580"),
                ("X-RateLimit-Limit", "500"),
                ("X-RateLimit-Remaining", "1"),
                ("X-RateLimit-Reset", "1764468000"),
            ]
        );
        assert!(budget(&Budget::default(), T0).is_empty());
    }

    #[test]
    fn refusal_headers_carry_retry_after() {
        let err = McpError::rate_limited("client", 100, 1_764_464_460, 17);
        assert_eq!(
            pairs(&refusal(&err)),
            [
                ("Retry-After", "17"),
                ("RateLimit-Policy", "\"client\";q=100;w=60"),
                ("RateLimit", "\"client\";r=0;t=17"),
                ("X-RateLimit-Limit", "100"),
                ("X-RateLimit-Remaining", "0"),
                ("X-RateLimit-Reset", "1764464460"),
            ]
        );
        let auth = McpError::rate_limited("auth", 10, 99, 5);
        assert_eq!(refusal(&auth)[1].1, "\"auth\";q=10");
        assert!(refusal(&McpError::internal()).is_empty());
        let mut quoted = String::new();
        push_sf_string(&mut quoted, "a\"b\\c\u{e9}");
        assert_eq!(quoted, "\"a\\\"b\\\\c\"");
    }
}
