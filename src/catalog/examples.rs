//! A representative occurrence of every entry ([`McpError::example`]): plausible
//! values for every field its template names, for the catalog's own test, the generated
//! documentation and anyone who needs a sample error.

use serde_json::json;

use super::entries::ErrorKind as K;
use super::error::McpError;
use super::problems::{Expect, Problem};

impl McpError {
    /// A representative occurrence of `kind`, with plausible values for every field its
    /// template names.
    pub fn example(kind: K) -> McpError {
        example(kind)
    }
}

/// An occurrence of `kind` with sample fields.
fn example(kind: K) -> McpError {
    match kind {
        K::InvalidRequest => McpError::invalid_request("batch_not_allowed"),
        K::MethodNotFound => McpError::method_not_found("tools/run"),
        K::InvalidParams => McpError::invalid_params("cursor"),
        K::UnknownTool => McpError::unknown_tool("create_invoices"),
        K::ToolRetired => McpError::tool_retired("list_clients", "search_clients"),
        K::ToolUnderReview => McpError::tool_under_review("wh_lookup", "pending"),
        K::PromptUnderReview => McpError::prompt_under_review("wh_restock_plan", "pending"),
        K::ResourceNotFound => McpError::resource_not_found("tollgate://guardrails/none"),
        K::UnsupportedProtocolVersion => McpError::new(kind)
            .with("supported", ["2025-06-18", "2025-11-25"])
            .with("requested", "2024-01-01"),
        K::UnsupportedProtocolVersionModern => {
            McpError::unsupported_version_modern("2024-01-01", &["2026-07-28"])
        }
        K::HeaderMismatch => McpError::header_mismatch("Mcp-Method"),
        K::MissingClientCapability => {
            McpError::missing_client_capability(json!({ "elicitation": {} }))
        }
        K::PayloadTooLarge => McpError::new(kind).detail("max_bytes", 1_048_576),
        K::InvalidTokenType => McpError::new(kind).detail("reason", "test_key_on_live"),
        K::PlanUpgradeRequired => McpError::new(kind)
            .with("required_plan", "pro")
            .detail("current_plan", "starter")
            .detail("tool", "export_invoices"),
        K::PlanLimitExceeded => McpError::new(kind)
            .with("limit", 3)
            .with("required_plan", "pro")
            .detail("allowance", "active_keys")
            .detail("active", 4)
            .detail("current_plan", "starter"),
        K::InsufficientScope => {
            McpError::insufficient_scope("invoices:write", &["invoices:read".to_owned()])
        }
        K::RateLimited => McpError::rate_limited("tool", 60, 1_764_464_460, 17),
        K::IdempotencyKeyRequired => McpError::new(kind)
            .param("idempotency_key")
            .detail("tool", "issue_invoice"),
        K::IdempotencyKeyInvalid => McpError::new(kind)
            .detail("reason", "too_long")
            .detail("source", "arguments"),
        K::IdempotencyKeyReused => McpError::new(kind)
            .param("idempotency_key")
            .detail("tool", "create_invoice"),
        K::IdempotencyKeyInUse => McpError::new(kind).with("retry_after", 1),
        K::GuardrailViolation => McpError::new(kind)
            .with("rule_id", "legal-vat-rates")
            .with("subcode", "vat_rate_not_allowed")
            .with("guardrail_uri", "tollgate://guardrails/legal-vat-rates")
            .param("lines.0.vat_rate")
            .detail("vat_rate", 7)
            .detail("allowed_rates", [21, 10, 4, 0])
            .detail("country", "ES"),
        K::PolicyDenied => McpError::policy_denied(
            "large_payments",
            Some("payments over 10 000.00 EUR are recorded by the finance team"),
        ),
        K::ApprovalRequired => McpError::approval_required(
            ("large_payments", "apr_0f3a9c2e5b7d4e1f8a6b0c9d2e4f6a8b"),
            "https://mcp.example.com/console/approvals/apr_0f3a9c2e5b7d4e1f8a6b0c9d2e4f6a8b",
            "2026-12-05T10:00:00Z",
            Some("pay-2026-0042"),
            15,
        ),
        K::ApprovalDenied | K::ApprovalExpired => McpError::approval_final(
            kind,
            ("large_payments", "apr_0f3a9c2e5b7d4e1f8a6b0c9d2e4f6a8b"),
            "2026-12-05T10:00:00Z",
        ),
        K::ValidationError => McpError::invalid_arguments(&[
            Problem::new("lines.0.vat_rate", "type", Expect::Type("integer".into()))
                .value(&json!("21%")),
            Problem::new(
                "limit",
                "range",
                Expect::Range(Some(1.into()), Some(100.into())),
            )
            .value(&json!(500)),
        ]),
        K::MissingRequiredField => McpError::invalid_arguments(&[
            Problem::new("client_id", "missing", Expect::Named("client_id")),
            Problem::new("issue_date", "format", Expect::Format("date".into()))
                .value(&json!("2026-13-01")),
        ]),
        K::InvalidFormat => McpError::invalid_format(
            "tax_id",
            "checksum",
            Expect::Named("tax_id"),
            &json!("12345678A"),
        ),
        K::Timeout => McpError::new(kind).detail("waiting_for", "elicitation/create"),
        K::AdapterError => McpError::new(kind)
            .detail("backend", "erp")
            .detail("original_error", "ERP-504")
            .detail("message", "the ledger is closed"),
        K::UpstreamRpcError => McpError::new(kind)
            .detail("backend", "files")
            .detail(
                "original_error",
                json!({"code": -32602, "message": "Unknown tool: search"}),
            )
            .detail("message", "Unknown tool: search"),
        K::AdapterErrorRetryable => McpError::new(kind)
            .detail("backend", "erp")
            .detail("original_error", 503),
        K::BackendCredentialRefused => McpError::new(kind)
            .detail("backend", "crm")
            .detail("status", 401),
        K::ToolBackendUnavailable => McpError::new(kind)
            .detail("backend", "crm")
            .detail("reason", "connection refused"),
        K::BackendBusy => McpError::new(kind)
            .detail("backend", "crm")
            .detail("reason", "queue_full")
            .detail("max_in_flight", 64),
        K::BackendCircuitOpen => McpError::new(kind)
            .with("retry_after", 25)
            .detail("backend", "crm")
            .detail("reason", "circuit_open"),
        K::NotImplemented => McpError::new(kind)
            .detail("backend", "crm")
            .detail("status", 501),
        K::BackendNotFound => McpError::new(kind)
            .detail("backend", "crm")
            .detail("original_error", "order_not_found")
            .detail("message", "no order 42"),
        K::BackendConflict => McpError::new(kind)
            .detail("backend", "crm")
            .detail("original_error", "duplicate_sku")
            .detail("message", "an order with this reference exists"),
        K::BackendRejected => McpError::new(kind)
            .detail("backend", "crm")
            .detail("original_error", "quantity_too_large")
            .detail("message", "quantity must be at most 100"),
        K::BackendRateLimited => McpError::new(kind)
            .with("retry_after", 30)
            .detail("backend", "crm"),
        K::ClientNotFound => McpError::new(kind)
            .param("client_id")
            .detail("id", "cli_0000000000000000"),
        K::InvoiceNotFound => McpError::new(kind)
            .param("invoice_id")
            .detail("id", "inv_0000000000000000"),
        K::TaxIdAlreadyExists => McpError::new(kind)
            .param("tax_id")
            .detail("existing_resource_id", "cli_8f3a2b1c4d5e6f70"),
        K::InvoiceCannotBeModified => McpError::new(kind)
            .param("status")
            .detail("status", "issued")
            .detail("number", "A-2026-0007"),
        K::PaymentExceedsBalance => McpError::new(kind)
            .param("amount_cents")
            .detail("amount_cents", 150_000)
            .detail("balance_cents", 121_000),
        K::ClientHasInvoices => McpError::new(kind)
            .param("client_id")
            .detail("invoice_count", 3),
        K::RecipientHasNoEmail => McpError::new(kind)
            .param("to")
            .detail("client_id", "cli_8f3a2b1c4d5e6f70"),
        K::InvoiceNotIssued => McpError::new(kind)
            .param("invoice_id")
            .detail("status", "draft")
            .detail("invoice_id", "inv_8f3a2b1c4d5e6f70"),
        K::InvoiceVoid => McpError::new(kind)
            .param("invoice_id")
            .detail("invoice_id", "inv_8f3a2b1c4d5e6f70")
            .detail("rectified_by_id", "inv_1a2b3c4d5e6f7081"),
        _ => McpError::new(kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ErrorKind;
    use crate::config::Locale;

    #[test]
    fn every_entry_renders_its_example_without_a_gap_in_both_locales() {
        for kind in ErrorKind::ALL {
            let example = McpError::example(*kind);
            for locale in [Locale::En, Locale::Es] {
                let missing = example.unfilled_placeholders(locale);
                assert!(
                    missing.is_empty(),
                    "{:?} {locale:?} lacks {missing:?}",
                    kind
                );
                let hint = example.hint(locale);
                assert!(
                    !hint.contains('{') && !hint.contains('['),
                    "{kind:?}: {hint}"
                );
            }
        }
    }
}
