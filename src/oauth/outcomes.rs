//! What the front door answered, counted for `/metrics`: requests by endpoint and outcome
//! (`ok`, a page shown, or the OAuth error word of a refusal). Both labels come from closed
//! sets — the endpoints, and the error words this server writes — so the family stays
//! bounded whatever clients send.

use std::sync::PoisonError;

use serde_json::Value;

use super::core::{AuthorizationServer, Page, Reply};

/// The endpoints counted.
pub const ENDPOINTS: &[&str] = &[
    "authorize",
    "sign_in",
    "callback",
    "consent",
    "token",
    "register",
    "revoke",
];

/// The outcome words beside the refusals' `error` values.
const OK: &str = "ok";
const PAGE: &str = "page";

/// The outcome word of `reply`: `ok` for a success or a redirect carrying a code, `page`
/// for a sign-in or consent page, otherwise the refusal's OAuth `error`.
fn outcome_of(reply: &Reply) -> &'static str {
    let error = match reply {
        Reply::Json { status, body, .. } if *status < 400 => return OK,
        Reply::Json { body, .. } => body.get("error").and_then(Value::as_str).map(str::to_owned),
        Reply::Redirect { location, .. } => url::Url::parse(location).ok().and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == "error")
                .map(|(_, v)| v.into_owned())
        }),
        Reply::Page {
            page: Page::Error { error, .. },
            ..
        } => Some((*error).to_owned()),
        Reply::Page { .. } => return PAGE,
    };
    match error {
        None => OK,
        Some(word) => known_error(&word),
    }
}

/// `word` when it is one of the errors this server writes, else `other`.
fn known_error(word: &str) -> &'static str {
    const ERRORS: &[&str] = &[
        "invalid_request",
        "invalid_client",
        "invalid_grant",
        "unauthorized_client",
        "unsupported_grant_type",
        "unsupported_response_type",
        "invalid_scope",
        "invalid_target",
        "access_denied",
        "temporarily_unavailable",
        "invalid_redirect_uri",
        "invalid_client_metadata",
        "rate_limited",
    ];
    ERRORS
        .iter()
        .copied()
        .find(|e| *e == word)
        .unwrap_or("other")
}

impl AuthorizationServer {
    /// Counts what `endpoint` answered (an endpoint outside [`ENDPOINTS`] is not counted).
    pub fn count(&self, endpoint: &str, reply: &Reply) {
        let Some(endpoint) = ENDPOINTS.iter().copied().find(|e| *e == endpoint) else {
            return;
        };
        let mut counts = self
            .outcomes
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *counts.entry((endpoint, outcome_of(reply))).or_default() += 1;
    }

    /// Appends `tollgate_oauth_requests_total{endpoint, outcome}` to a `/metrics` page;
    /// nothing while the front door is off.
    pub fn render_metrics(&self, page: &mut String) {
        if !self.config.enabled {
            return;
        }
        let name = "tollgate_oauth_requests_total";
        crate::guards::metrics::header(
            page,
            name,
            "counter",
            "Requests to the OAuth front door, by endpoint and outcome: ok, page (sign-in or consent shown), or the OAuth error of a refusal.",
        );
        let counts = self
            .outcomes
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for ((endpoint, outcome), count) in counts.iter() {
            crate::guards::metrics::sample(
                page,
                name,
                &[("endpoint", endpoint), ("outcome", outcome)],
                *count,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn outcomes_are_words_of_closed_sets() {
        let ok = Reply::json(200, json!({"access_token": "x"}));
        assert_eq!(outcome_of(&ok), "ok");
        let refused = Reply::json(400, json!({"error": "invalid_grant"}));
        assert_eq!(outcome_of(&refused), "invalid_grant");
        let made_up = Reply::json(400, json!({"error": "<script>"}));
        assert_eq!(outcome_of(&made_up), "other");
        let code = Reply::Redirect {
            location: "http://127.0.0.1:9/cb?code=c&state=s".into(),
            cookie: None,
        };
        assert_eq!(outcome_of(&code), "ok");
        let denied = Reply::Redirect {
            location: "http://127.0.0.1:9/cb?error=access_denied".into(),
            cookie: None,
        };
        assert_eq!(outcome_of(&denied), "access_denied");
        assert_eq!(
            outcome_of(&Reply::error_page(400, "invalid_client", "x")),
            "invalid_client"
        );
    }
}
