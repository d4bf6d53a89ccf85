//! Rehearsed failures: on a test-mode installation the operator can make chosen calls fail
//! on purpose (`tollgate faults add`), so that an agent's developer sees what the agent
//! does with each error before a real one happens.
//!
//! [`Step::Rehearse`](crate::guards::steps::Step::Rehearse) runs after the charge and the
//! scope and plan check, so a rehearsed failure is charged and audited like any call; it
//! comes before the idempotency ledger and the tool, which it never reaches. It reads the
//! faults of the call's tool only when the credential's row (read on every call anyway)
//! says the company is in test mode: a live installation pays nothing for it.
//!
//! A rehearsed failure is the catalog's own error, with the fields a real one would carry
//! in the call's context (the caller's bucket and reset for `rate_limited`, the tool's scope
//! and the credential's scopes for `insufficient_scope`, the tool's own guardrail rule, …)
//! plus `details.simulated: true`, and it is rendered exactly like the real one.

use std::sync::Arc;

use crate::catalog::{Class, ErrorKind, McpError};
use crate::guards::Guards;
use crate::guards::auth::Principal;
use crate::guards::idempotency;
use crate::guards::ratelimit::Budget;
use crate::store::faults::{self, Fault};
use crate::tools::RegisteredTool;

/// A source of random numbers in `[0, 1)`, rolled once per matching fault whose
/// probability is below 1 (tests hand in a fixed sequence).
pub type Dice = dyn Fn() -> f64 + Send + Sync;

/// The system's random source.
pub fn system_dice() -> Arc<Dice> {
    Arc::new(|| {
        let mut bytes = [0u8; 8];
        if getrandom::fill(&mut bytes).is_err() {
            // Without randomness a fault fires as if its probability were 1.
            return 0.0;
        }
        // The top 53 bits make an evenly spread double in [0, 1).
        (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
    })
}

/// The catalog entry with string code `code` that a rehearsal may answer with: any error
/// a `tools/call` can end with but the protocol, transport and authentication ones (for
/// `backend_unavailable`, the tool's entry).
pub fn rehearsable(code: &str) -> Option<ErrorKind> {
    ErrorKind::with_code(code).find(|kind| is_rehearsable(*kind))
}

/// Every code [`rehearsable`] accepts, each once, in catalog order.
pub fn rehearsable_codes() -> Vec<&'static str> {
    let mut codes: Vec<&'static str> = Vec::new();
    for kind in ErrorKind::ALL
        .iter()
        .copied()
        .filter(|k| is_rehearsable(*k))
    {
        if !codes.contains(&kind.spec().code) {
            codes.push(kind.spec().code);
        }
    }
    codes
}

fn is_rehearsable(kind: ErrorKind) -> bool {
    kind.model_can_act() || kind.spec().class == Class::Tool || kind == ErrorKind::InternalError
}

impl Guards {
    /// The failure rehearsed for this call of `tool` by `principal`, if a fault of its
    /// tool and credential fires (each fault in turn rolls its probability; one with a
    /// count uses up one firing). Only asked in test mode.
    pub(crate) fn rehearsed_failure(
        &self,
        principal: &Principal,
        tool: &RegisteredTool,
        budget: &Budget,
    ) -> Option<McpError> {
        let name = &tool.spec().name;
        let read = self
            .store
            .with_conn(|conn| faults::faults_for_call(conn, name, &principal.credential_id));
        let candidates = match read {
            Ok(candidates) => candidates,
            Err(e) => return Some(crate::store::store_failure(e, false)),
        };
        let fault = self.firing(candidates)?;
        let kind = rehearsable(&fault.code)?;
        Some(
            self.simulated(kind, &fault, principal, tool, budget)
                .detail("simulated", true),
        )
    }

    /// The first of `candidates` that fires.
    fn firing(&self, candidates: Vec<Fault>) -> Option<Fault> {
        candidates.into_iter().find(|fault| {
            let rolled = fault.probability >= 1.0 || (self.dice)() < fault.probability;
            rolled
                && (fault.remaining.is_none()
                    || self
                        .store
                        .in_transaction(|tx| faults::take_firing(tx, fault.id))
                        .unwrap_or_else(|e| {
                            tracing::warn!(cause = %e, fault = fault.id, "cannot use a fault's firing");
                            false
                        }))
        })
    }

    /// The catalog error of `kind` with the fields a real one has in this call's context.
    fn simulated(
        &self,
        kind: ErrorKind,
        fault: &Fault,
        principal: &Principal,
        tool: &RegisteredTool,
        budget: &Budget,
    ) -> McpError {
        let spec = tool.spec();
        let retry_after = fault.retry_after.and_then(|s| u64::try_from(s).ok());
        let error = match kind {
            ErrorKind::RateLimited => return self.rate_limited(spec, budget, retry_after),
            ErrorKind::InsufficientScope => {
                McpError::insufficient_scope(&spec.scope, &principal.scopes)
            }
            ErrorKind::PlanUpgradeRequired | ErrorKind::PlanLimitExceeded => {
                self.auth.plan_refusal_of(kind, &spec.name)
            }
            ErrorKind::UnknownTool => McpError::unknown_tool(&spec.name),
            ErrorKind::ToolRetired => McpError::tool_retired(&spec.name, &spec.name),
            ErrorKind::ToolUnderReview => McpError::tool_under_review(&spec.name, "pending"),
            ErrorKind::GuardrailViolation => {
                crate::tools::invoicing::guardrails::example_violation(&spec.name)
                    .unwrap_or_else(|| McpError::new(kind))
            }
            ErrorKind::IdempotencyKeyRequired => idempotency::required(&spec.name),
            ErrorKind::IdempotencyKeyReused => idempotency::reused(&spec.name),
            ErrorKind::IdempotencyKeyInvalid => idempotency::invalid("too_long", "argument"),
            ErrorKind::IdempotencyKeyInUse => idempotency::in_use(),
            // A tool's own failure names what a real one would (the id not found, the
            // argument at fault, …): the catalog's sample occurrence.
            other => McpError::example(other),
        };
        match retry_after {
            Some(seconds) if kind.spec().retryable => error.with("retry_after", seconds),
            _ => error,
        }
    }

    /// `rate_limited` on the caller's tightest bucket as this call left it, waiting
    /// `retry_after` seconds (default: until the bucket resets).
    fn rate_limited(
        &self,
        spec: &crate::tools::ToolSpec,
        budget: &Budget,
        retry_after: Option<u64>,
    ) -> McpError {
        let now = self.clock.unix_secs();
        let (bucket, limit, reset) = match budget.tightest() {
            Some(b) => (b.bucket, b.limit, b.reset),
            None => (spec.category.as_str(), 0, now + 60),
        };
        let until_reset = u64::try_from((reset - now).max(1)).unwrap_or(1);
        McpError::rate_limited(
            bucket,
            limit,
            u64::try_from(reset).unwrap_or(0),
            retry_after.unwrap_or(until_reset),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rehearsable_codes_leave_out_protocol_transport_and_authentication() {
        let codes = rehearsable_codes();
        for code in [
            "rate_limited",
            "timeout",
            "backend_unavailable",
            "adapter_error",
            "not_implemented",
            "mcp_guardrail_violation",
            "idempotency_key_in_use",
            "insufficient_scope",
            "plan_upgrade_required",
            "plan_limit_exceeded",
            "unknown_tool",
            "tool_retired",
            "internal_error",
            "invoice_not_found",
        ] {
            assert!(codes.contains(&code), "{code}");
        }
        for code in [
            "invalid_token",
            "client_revoked",
            "parse_error",
            "origin_not_allowed",
        ] {
            assert!(rehearsable(code).is_none(), "{code}");
        }
        assert_eq!(
            rehearsable("backend_unavailable"),
            Some(ErrorKind::ToolBackendUnavailable)
        );
    }

    fn fault(id: i64, probability: f64) -> Fault {
        Fault {
            id,
            tool: "search_clients".to_owned(),
            credential_id: None,
            code: "timeout".to_owned(),
            probability,
            remaining: None,
            retry_after: None,
            created_at: 0,
        }
    }

    #[test]
    fn a_fault_fires_when_the_dice_roll_below_its_probability() {
        let (_dir, store) = crate::guards::auth::testing::fresh("pro");
        let rolls = std::sync::Mutex::new(vec![0.7, 0.5, 0.5].into_iter());
        let dice: Arc<Dice> = Arc::new(move || {
            rolls
                .lock()
                .map(|mut r| r.next().unwrap_or(1.0))
                .unwrap_or(1.0)
        });
        let guards = Guards::new(
            store,
            crate::config::Locale::En,
            crate::clock::Clock::System,
        )
        .with_fault_dice(dice);
        // 0.7 misses the first (0.6); 0.5 hits the second (0.55).
        let fired = guards.firing(vec![fault(1, 0.6), fault(2, 0.55), fault(3, 1.0)]);
        assert_eq!(fired.map(|f| f.id), Some(2));
        // 0.5 misses 0.25; a probability of 1 needs no roll.
        let fired = guards.firing(vec![fault(4, 0.25), fault(5, 1.0)]);
        assert_eq!(fired.map(|f| f.id), Some(5));
        assert!(guards.firing(vec![fault(6, 0.1)]).is_none());
    }

    /// Every rehearsable error as a call of `tool` would get it, with and without a wait.
    fn every_simulated(tool_for: impl Fn(ErrorKind) -> &'static str, budget: &Budget) {
        use crate::config::Locale;
        let (_dir, store) = crate::guards::auth::testing::fresh("pro");
        let clock = crate::clock::Clock::System;
        let registry = crate::tools::Registry::new(
            crate::tools::invoicing::tools(),
            crate::tools::invoicing::retired::RETIRED_TOOLS,
            crate::tools::invoicing::resources(),
            crate::tools::invoicing::prompts(store.clone(), clock.clone()),
        )
        .expect("registry");
        let guards = Guards::new(store, Locale::En, clock);
        let principal = Principal {
            credential_id: "abc".into(),
            client_id: None,
            scopes: vec!["invoices:read".into()],
            mode: crate::guards::auth::Mode::Test,
            guard_channel: None,
            installation: crate::guards::auth::Mode::Test,
            roles: Vec::new(),
        };
        for code in rehearsable_codes() {
            let kind = rehearsable(code).expect("rehearsable");
            let crate::tools::Resolution::Tool(tool) = registry.resolve(tool_for(kind)) else {
                panic!("a registered tool for {code}");
            };
            for retry_after in [None, Some(17)] {
                let fault = Fault {
                    code: code.to_owned(),
                    retry_after,
                    ..fault(1, 1.0)
                };
                let error = guards
                    .simulated(kind, &fault, &principal, tool, budget)
                    .detail("simulated", true);
                assert_eq!(error.kind(), kind, "{code}");
                for locale in [Locale::En, Locale::Es] {
                    assert_eq!(
                        error.unfilled_placeholders(locale),
                        Vec::<String>::new(),
                        "{code} in {locale:?}: {}",
                        error.hint(locale)
                    );
                }
            }
        }
    }

    #[test]
    fn every_simulated_error_fills_every_field_of_its_hint() {
        let charged = Budget::new(vec![crate::guards::ratelimit::BucketState {
            bucket: "read",
            limit: 120,
            count: 120,
            reset: 1_800_000_060,
            window_secs: 60,
        }]);
        let tool_for = |kind| match kind {
            ErrorKind::GuardrailViolation => "create_invoice",
            _ => "get_invoice",
        };
        every_simulated(tool_for, &charged);
        // Each tool with guardrails has a violation of its own to rehearse.
        for tool in [
            "update_invoice",
            "issue_invoice",
            "delete_invoice",
            "void_invoice",
        ] {
            every_simulated(|_| tool, &Budget::default());
        }
    }

    #[test]
    fn the_system_dice_roll_within_zero_and_one() {
        let dice = system_dice();
        for _ in 0..100 {
            let roll = dice();
            assert!((0.0..1.0).contains(&roll), "{roll}");
        }
    }
}
