//! [`McpError`]: one occurrence of a catalog entry, with the optional fields that apply to
//! it (`param`, `required_scope`, `retry_after`, …), and its renderings — the one place an
//! error becomes a wire body: the `data` envelope ([`McpError::envelope`]), the JSON-RPC
//! `error` object, the `isError` tool result and a guard's refusal answered as one. The
//! hint is the entry's template (or a guardrail's sentence) filled in the company's locale.

use serde_json::{Map, Value, json};

use crate::config::Locale;

use super::entries::ErrorKind;
use super::guardrails;
use super::problems::{self, Expect, Problem};
use super::suggestions::Suggestion;
use super::template;

/// The envelope field of a refusal answered as an `isError` result that names the JSON-RPC
/// code it would have had.
pub const JSONRPC_CODE_FIELD: &str = "jsonrpc_code";

/// One occurrence of a catalog entry, with the optional fields that apply to it.
#[derive(Debug, Clone)]
pub struct McpError {
    kind: ErrorKind,
    fields: Map<String, Value>,
    suggestion: Option<Suggestion>,
}

impl McpError {
    /// An error of `kind` with no optional fields.
    pub fn new(kind: ErrorKind) -> Self {
        McpError {
            kind,
            fields: Map::new(),
            suggestion: None,
        }
    }

    /// The catalog entry.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The optional fields set on this occurrence.
    pub fn fields(&self) -> &Map<String, Value> {
        &self.fields
    }

    /// Adds an optional field. Only names documented in `ERRORS.md` are used by callers.
    pub fn with(mut self, name: &'static str, value: impl Into<Value>) -> Self {
        self.fields.insert(name.to_owned(), value.into());
        self
    }

    /// Adds one entry under `details`.
    pub fn detail(mut self, name: &'static str, value: impl Into<Value>) -> Self {
        let details = self
            .fields
            .entry("details")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(map) = details {
            map.insert(name.to_owned(), value.into());
        }
        self
    }

    /// Sets `suggestion`, rendered in the envelope's locale.
    pub fn suggest(mut self, suggestion: Suggestion) -> Self {
        self.suggestion = Some(suggestion);
        self
    }

    /// Sets `param`, the argument at fault.
    pub fn param(self, name: impl Into<String>) -> Self {
        self.with("param", name.into())
    }

    /// `-32700`: the message is not JSON.
    pub fn parse_error() -> Self {
        Self::new(ErrorKind::ParseError)
    }

    /// `-32600` with a short machine-readable reason in `details.reason`.
    pub fn invalid_request(reason: &'static str) -> Self {
        Self::new(ErrorKind::InvalidRequest).detail("reason", reason)
    }

    /// `-32601` for `method`.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(ErrorKind::MethodNotFound).detail("method", method)
    }

    /// `-32602` naming the parameter at fault.
    pub fn invalid_params(param: &str) -> Self {
        Self::new(ErrorKind::InvalidParams).param(param)
    }

    /// `-32602 unknown_tool`.
    pub fn unknown_tool(name: &str) -> Self {
        Self::new(ErrorKind::UnknownTool).detail("name", name)
    }

    /// `-32602 tool_retired` with the name to call instead.
    pub fn tool_retired(name: &str, replacement: &str) -> Self {
        Self::new(ErrorKind::ToolRetired)
            .with("replacement", replacement)
            .detail("name", name)
    }

    /// `-32602 tool_under_review`: the backend tool `name` is held (`state`: `pending` or
    /// `rejected`) until an operator decides on its definition.
    pub fn tool_under_review(name: &str, state: &str) -> Self {
        Self::new(ErrorKind::ToolUnderReview)
            .detail("name", name)
            .detail("state", state)
    }

    /// `prompt_under_review`: the upstream's prompt `name` is held (`pending` or
    /// `rejected`) until an operator decides on its definition.
    pub fn prompt_under_review(name: &str, state: &str) -> Self {
        Self::new(ErrorKind::PromptUnderReview)
            .detail("name", name)
            .detail("state", state)
    }

    /// `-32602 resource_not_found` for `uri`.
    pub fn resource_not_found(uri: &str) -> Self {
        Self::new(ErrorKind::ResourceNotFound).detail("uri", uri)
    }

    /// `-32022` (2026-07-28) with the versions this server speaks.
    pub fn unsupported_version_modern(requested: &str, supported: &[&str]) -> Self {
        Self::new(ErrorKind::UnsupportedProtocolVersionModern)
            .with("supported", supported)
            .with("requested", requested)
    }

    /// `-32020`: the named header does not match the body.
    pub fn header_mismatch(header: &str) -> Self {
        Self::new(ErrorKind::HeaderMismatch).detail("header", header)
    }

    /// `-32021` with the capabilities the call needs.
    pub fn missing_client_capability(required: Value) -> Self {
        Self::new(ErrorKind::MissingClientCapability).with("requiredCapabilities", required)
    }

    /// `-32603 internal_error`; the cause is logged by the caller, never sent.
    pub fn internal() -> Self {
        Self::new(ErrorKind::InternalError)
    }

    /// `-32005` naming the scope needed and the scopes held.
    pub fn insufficient_scope(required: &str, provided: &[String]) -> Self {
        Self::new(ErrorKind::InsufficientScope)
            .with("required_scope", required)
            .with("provided_scopes", provided)
    }

    /// `-32009 policy_denied`: the policy rule `rule` refuses the call, for `reason` (the
    /// rule's own sentence, when it has one).
    pub fn policy_denied(rule: &str, reason: Option<&str>) -> Self {
        let error = Self::new(ErrorKind::PolicyDenied).with("rule_id", rule);
        match reason {
            Some(reason) => error.detail("reason", reason),
            None => error,
        }
    }

    /// `-32009 approval_required`: the rule `rule` holds the call as the approval `id`,
    /// decided at `url` until `expires_at` (RFC 3339); `key` is the call's idempotency key.
    pub fn approval_required(
        (rule, id): (&str, &str),
        url: &str,
        expires_at: &str,
        key: Option<&str>,
        retry_after: u64,
    ) -> Self {
        let error = Self::new(ErrorKind::ApprovalRequired)
            .with("rule_id", rule)
            .with("approval_id", id)
            .with("approval_url", url)
            .with("expires_at", expires_at)
            .with("retry_after", retry_after);
        match key {
            Some(key) => error.detail("idempotency_key", key),
            None => error,
        }
    }

    /// `-32009 approval_denied` or `approval_expired` (`kind`) of the approval `id` of the
    /// rule `rule`, which expires (or expired) at `expires_at`.
    pub fn approval_final(kind: ErrorKind, (rule, id): (&str, &str), expires_at: &str) -> Self {
        Self::new(kind)
            .with("rule_id", rule)
            .with("approval_id", id)
            .with("expires_at", expires_at)
    }

    /// `-32006` for one bucket.
    pub fn rate_limited(bucket: &str, limit: u64, reset: u64, retry_after: u64) -> Self {
        Self::new(ErrorKind::RateLimited)
            .with("retry_after", retry_after)
            .with("bucket", bucket)
            .with("limit", limit)
            .with("reset", reset)
    }

    /// `isError` `validation_error` on `param`: what is wrong (`reason`) and what would
    /// be accepted.
    pub fn validation(param: &str, reason: &'static str, expect: Expect) -> Self {
        Self::with_problems(
            ErrorKind::ValidationError,
            &[Problem::new(param, reason, expect)],
        )
    }

    /// `isError` `invalid_format` on `param`, whose `value` the caller sent.
    pub fn invalid_format(
        param: &str,
        reason: &'static str,
        expect: Expect,
        value: &Value,
    ) -> Self {
        Self::with_problems(
            ErrorKind::InvalidFormat,
            &[Problem::new(param, reason, expect).value(value)],
        )
    }

    /// `isError` `missing_required_field` on `param`.
    pub fn missing(param: &str, expect: Expect) -> Self {
        Self::with_problems(
            ErrorKind::MissingRequiredField,
            &[Problem::new(param, "missing", expect)],
        )
    }

    /// The validation failure of `problems` (at least one). The first decides the entry
    /// (`missing` → `missing_required_field`, `format`/`pattern` → `invalid_format`, any
    /// other → `validation_error`) and is `param`; `details.errors` lists them all (at
    /// most [`problems::PROBLEMS_IN_DETAILS`]; `details.error_count` says how many failed
    /// when there are more).
    pub fn invalid_arguments(problems: &[Problem]) -> Self {
        let kind = match problems.first().map(|p| p.reason) {
            Some("missing") => ErrorKind::MissingRequiredField,
            Some("format" | "pattern") => ErrorKind::InvalidFormat,
            _ => ErrorKind::ValidationError,
        };
        Self::with_problems(kind, problems)
    }

    fn with_problems(kind: ErrorKind, problems: &[Problem]) -> Self {
        let err = Self::new(kind);
        match problems.first() {
            Some(first) if problems.len() > problems::PROBLEMS_IN_DETAILS => err
                .param(first.param.clone())
                .detail("errors", problems::to_details(problems))
                .detail("error_count", problems.len()),
            Some(first) => err
                .param(first.param.clone())
                .detail("errors", problems::to_details(problems)),
            None => err,
        }
    }

    /// The `data` envelope of a JSON-RPC error, or `_meta["dev.tollgate/error"]` of an
    /// `isError` result: the fixed identities, the localized hint, then the optional fields.
    pub fn envelope(&self, locale: Locale) -> Value {
        self.envelope_with(self.hint(locale), locale)
    }

    /// [`McpError::envelope`] around an already rendered `hint`.
    fn envelope_with(&self, hint: String, locale: Locale) -> Value {
        let spec = self.kind.spec();
        let mut map = Map::with_capacity(6 + self.fields.len());
        map.insert("code".into(), spec.code.into());
        map.insert("http_status".into(), spec.http_status.into());
        map.insert("error_code".into(), spec.error_code.into());
        map.insert("retryable".into(), spec.retryable.into());
        map.insert("hint".into(), hint.into());
        for (name, value) in &self.fields {
            map.insert(name.clone(), value.clone());
        }
        if let Some(suggestion) = self.suggestion {
            map.insert("suggestion".into(), suggestion.text(locale).into());
        }
        Value::Object(map)
    }

    /// The template this occurrence's hint is rendered from: the entry's, or for a
    /// guardrail the sentence of its `subcode`.
    pub fn template(&self, locale: Locale) -> &'static str {
        let own = self
            .fields
            .get("subcode")
            .and_then(Value::as_str)
            .filter(|_| self.kind == ErrorKind::GuardrailViolation)
            .and_then(guardrails::sentence);
        let spec = self.kind.spec();
        match (own, locale) {
            (Some((en, _)), Locale::En) => en,
            (Some((_, es)), Locale::Es) => es,
            (None, Locale::En) => spec.hint_en,
            (None, Locale::Es) => spec.hint_es,
        }
    }

    /// The hint in `locale`: the template filled with this occurrence's fields.
    pub fn hint(&self, locale: Locale) -> String {
        template::render(self.template(locale), &self.fields, locale).text
    }

    /// The fields the hint's template names that this occurrence lacks (outside optional
    /// segments); empty when the sentence is complete.
    pub fn unfilled_placeholders(&self, locale: Locale) -> Vec<String> {
        template::render(self.template(locale), &self.fields, locale).missing
    }

    /// The JSON-RPC `error` object.
    pub fn to_jsonrpc_error(&self, locale: Locale) -> Value {
        let spec = self.kind.spec();
        json!({ "code": spec.rpc_code, "message": spec.code, "data": self.envelope(locale) })
    }

    /// The `isError: true` tool result (the hint rendered once, for the text and the
    /// envelope).
    pub fn to_tool_result(&self, locale: Locale) -> Value {
        let hint = self.hint(locale);
        json!({
            "isError": true,
            "content": [{ "type": "text", "text": hint }],
            "_meta": { "dev.tollgate/error": self.envelope_with(hint.clone(), locale) },
        })
    }

    /// A guard's refusal answered as an `isError` result (the `tool_result` guard
    /// channel): [`McpError::to_tool_result`] whose envelope also names, as
    /// [`JSONRPC_CODE_FIELD`], the JSON-RPC code the refusal would have had.
    pub fn to_refusal_result(&self, locale: Locale) -> Value {
        let hint = self.hint(locale);
        let mut envelope = self.envelope_with(hint.clone(), locale);
        if let Value::Object(map) = &mut envelope {
            map.insert(JSONRPC_CODE_FIELD.into(), self.kind.spec().rpc_code.into());
        }
        json!({
            "isError": true,
            "content": [{ "type": "text", "text": hint }],
            "_meta": { "dev.tollgate/error": envelope },
        })
    }
}

impl std::fmt::Display for McpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind.spec().code)
    }
}

impl std::error::Error for McpError {}

impl McpError {
    /// [`ErrorKind::model_can_act`] for this occurrence: the authentication throttle's
    /// `rate_limited` (bucket `auth`) is an authentication failure, not a rate limit of
    /// the call.
    pub fn model_can_act(&self) -> bool {
        let auth_throttle = self.kind == ErrorKind::RateLimited
            && self.fields.get("bucket").and_then(Value::as_str) == Some("auth");
        self.kind.model_can_act() && !auth_throttle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_carries_fixed_identities_then_fields() {
        let err = McpError::insufficient_scope("invoices:write", &["invoices:read".to_owned()]);
        let body = err.to_jsonrpc_error(Locale::En);
        assert_eq!(body["code"], -32005);
        assert_eq!(body["message"], "insufficient_scope");
        assert_eq!(body["data"]["code"], "insufficient_scope");
        assert_eq!(body["data"]["http_status"], 403);
        assert_eq!(body["data"]["error_code"], 1105);
        assert_eq!(body["data"]["retryable"], false);
        assert_eq!(body["data"]["required_scope"], "invoices:write");
        assert_eq!(body["data"]["provided_scopes"], json!(["invoices:read"]));
    }

    #[test]
    fn tool_result_puts_hint_in_text_and_envelope_in_meta() {
        let result = McpError::validation("amount", "range", Expect::Range(Some(1.into()), None))
            .to_tool_result(Locale::Es);
        assert_eq!(result["isError"], true);
        let hint = result["content"][0]["text"].as_str().unwrap_or_default();
        assert_eq!(
            hint,
            "Los argumentos no cumplen el esquema de entrada de la herramienta: `amount` está fuera de rango: debe ser un número de al menos 1."
        );
        assert_eq!(
            result["_meta"]["dev.tollgate/error"]["code"],
            "validation_error"
        );
        assert_eq!(result["_meta"]["dev.tollgate/error"]["param"], "amount");
        assert_eq!(result["_meta"]["dev.tollgate/error"]["hint"], hint);
    }

    #[test]
    fn every_guardrail_sentence_renders_with_its_rule_fields() {
        let base = McpError::new(ErrorKind::GuardrailViolation)
            .with("rule_id", "some-rule")
            .with("guardrail_uri", "tollgate://guardrails/some-rule")
            .param("lines.0.vat_rate");
        let details = json!({"vat_rate": 7, "allowed_rates": [21, 10, 4, 0], "country": "ES",
            "ceiling_cents": 40000, "total_with_vat_cents": 48400, "issue_date": "2026-01-01",
            "last_issue_date": "2026-02-01", "series": "A", "client_id": "cli_1",
            "invoice_id": "inv_1", "status": "issued"});
        for (subcode, en, es) in guardrails::SENTENCES {
            let mut err = base.clone().with("subcode", *subcode);
            err.fields.insert("details".into(), details.clone());
            assert_eq!(err.template(Locale::En), *en);
            assert_eq!(err.template(Locale::Es), *es);
            for locale in [Locale::En, Locale::Es] {
                assert!(err.unfilled_placeholders(locale).is_empty(), "{subcode}");
            }
        }
        let vat = McpError::example(ErrorKind::GuardrailViolation);
        assert_eq!(
            vat.hint(Locale::En),
            "The VAT rate 7 in `lines.0.vat_rate` is not a legal rate in ES; use one of 21, 10, 4, 0 (rule legal-vat-rates, guide tollgate://guardrails/legal-vat-rates)."
        );
    }

    #[test]
    fn a_suggestion_is_rendered_in_the_envelope_locale() {
        let err = McpError::new(ErrorKind::InvoiceNotIssued).suggest(Suggestion::IssueFirst);
        assert_eq!(
            err.envelope(Locale::Es)["suggestion"],
            "Emita antes la factura con issue_invoice."
        );
        assert_eq!(
            err.envelope(Locale::En)["suggestion"],
            "Issue the invoice with issue_invoice first."
        );
    }

    #[test]
    fn a_missing_field_is_reported_and_visible_in_a_debug_build() {
        let err = McpError::new(ErrorKind::RateLimited).with("bucket", "tool");
        assert_eq!(
            err.unfilled_placeholders(Locale::En),
            vec!["limit".to_owned(), "retry_after".to_owned()]
        );
        assert!(err.hint(Locale::En).contains("{retry_after:seconds}"));
    }
}
