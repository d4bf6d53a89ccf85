//! A call a `require_approval` policy rule covers: held until a person decides, then run
//! once. The call is bound to who made it, the tool, the SHA-256 of its canonical
//! arguments (the idempotency ledger's [`fingerprint`]) and its idempotency key; the store
//! decides, in one transaction, whether it is new (recorded, refused `approval_required`),
//! a retry of a pending one (the same approval), approved (it runs, and the approval is
//! used), already run (the ledger replays it), denied or expired (final).

use std::time::Duration;

use serde_json::{Map, Value};

use crate::catalog::{ErrorKind, McpError};
use crate::clock::format_time;
use crate::config::PolicyRule;
use crate::guards::Guards;
use crate::guards::auth::Principal;
use crate::guards::idempotency::fingerprint;
use crate::store::approvals::{Approval, Binding, Gate, PENDING};
use crate::store::store_failure;
use crate::tools::RegisteredTool;

/// How long the caller is told to wait before asking again (`retry_after`), in seconds.
pub const RETRY_AFTER_SECS: u64 = 15;

/// The idempotency key's argument: not part of the arguments a person reads.
const KEY_ARGUMENT: &str = "idempotency_key";

/// A call a `require_approval` rule covers.
pub(crate) struct Held<'a> {
    pub(crate) rule: &'a PolicyRule,
    pub(crate) principal: &'a Principal,
    pub(crate) tool: &'a RegisteredTool,
    pub(crate) args: &'a Map<String, Value>,
    pub(crate) key: Option<&'a str>,
}

impl Guards {
    /// Whether `held` may run: `Ok` once approved (and then once), else the refusal that
    /// says where it stands. A new approval waits `ttl`; its page is `pages` and its id.
    pub(crate) fn hold_for_approval(
        &self,
        held: &Held<'_>,
        ttl: Duration,
        pages: &str,
    ) -> Result<(), McpError> {
        let now = self.clock.unix_millis();
        let tool = held.tool.spec().name.as_ref();
        let digest = fingerprint(tool, held.args);
        let binding = Binding {
            principal: &held.principal.credential_id,
            tool,
            digest: &digest,
            idempotency_key: held.key.unwrap_or_default(),
        };
        let fresh = fresh_approval(held, binding, now, ttl)?;
        let gate = self
            .store
            .gate_call(binding, &fresh, now)
            .map_err(|e| store_failure(e, false))?;
        let expiry = |a: &Approval| format_time(a.expires_at.div_euclid(1000));
        match gate {
            Gate::Run | Gate::Ran => Ok(()),
            Gate::Pending(approval) => Err(McpError::approval_required(
                (&approval.rule, &approval.id),
                &format!("{pages}{}", approval.id),
                &expiry(&approval),
                held.key,
                RETRY_AFTER_SECS,
            )),
            Gate::Denied(approval) => Err(McpError::approval_final(
                ErrorKind::ApprovalDenied,
                (&approval.rule, &approval.id),
                &expiry(&approval),
            )),
            Gate::Expired(approval) => Err(McpError::approval_final(
                ErrorKind::ApprovalExpired,
                (&approval.rule, &approval.id),
                &expiry(&approval),
            )),
        }
    }
}

/// The approval recorded for `held` if none waits for it yet.
fn fresh_approval(
    held: &Held<'_>,
    binding: Binding<'_>,
    now: i64,
    ttl: Duration,
) -> Result<Approval, McpError> {
    let readable: Map<String, Value> = held
        .args
        .iter()
        .filter(|(name, _)| name.as_str() != KEY_ARGUMENT)
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    Ok(Approval {
        id: new_approval_id()?,
        principal: binding.principal.to_owned(),
        tool: binding.tool.to_owned(),
        digest: binding.digest.to_owned(),
        idempotency_key: binding.idempotency_key.to_owned(),
        rule: held.rule.name.clone(),
        arguments: serde_json::to_string(&readable).map_err(|_| McpError::internal())?,
        allow_self: held.rule.allow_self_approval,
        state: PENDING.to_owned(),
        created_at: now,
        expires_at: now.saturating_add(ttl_ms),
        decided_at: None,
        decided_by: None,
        used_at: None,
    })
}

/// `apr_` and 32 random hex digits.
fn new_approval_id() -> Result<String, McpError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        tracing::error!(cause = %e, "no random bytes for an approval id");
        McpError::internal()
    })?;
    Ok(format!("apr_{}", hex::encode(bytes)))
}

/// Appends the approvals' family to `page`: how many held calls are in each state
/// (`pending`, `approved` — run or not —, `denied`, `expired`), read from the store, so
/// every node shows the same counts. Nothing when the store cannot be read.
pub fn render_approvals(page: &mut String, store: &crate::store::Store, now_ms: i64) {
    let counts = match store.approval_counts(now_ms) {
        Ok(counts) => counts,
        Err(e) => {
            tracing::warn!(cause = %e, "the approvals could not be counted for /metrics");
            return;
        }
    };
    let name = "tollgate_approvals";
    crate::guards::metrics::header(
        page,
        name,
        "gauge",
        "Calls held by a require_approval policy rule, by state: pending, approved, denied, expired.",
    );
    for (state, count) in counts {
        let count = u64::try_from(count).unwrap_or(0);
        crate::guards::metrics::sample(page, name, &[("state", state)], count);
    }
}
