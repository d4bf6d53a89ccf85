//! The charging transaction of the guard chain, composed of the steps' own store work:
//! for every call of a batch, the re-check of a cached credential (authentication: a
//! revoked key is refused before its counters move, so it charges nothing), then the
//! counters of the calls still standing (rate limits: refused calls still consume quota),
//! then the plan facts the access step decides on — all in the one transaction the
//! limiter's group commit shares among concurrent callers.

use crate::catalog::McpError;
use crate::guards::auth::{AccessFacts, CallChecks, CredentialRows};
use crate::guards::ratelimit::{Batch, ChargeOutcome, ChargeRequest, charge_in};
use crate::store::{StoreError, Tx};

/// One tool call in a charging transaction: what to charge, the re-check of its
/// credential, and what the transaction found.
pub struct CallCharge {
    /// What to charge.
    pub request: ChargeRequest,
    /// The re-check of a cached credential (a no-op for one verified just now).
    pub checks: CallChecks,
    /// The charge's outcome; `None` when the re-check refused the call uncharged.
    pub outcome: Option<ChargeOutcome>,
    /// The plan facts, read once the call was admitted.
    pub facts: Option<AccessFacts>,
}

impl CallCharge {
    /// A call to charge, with its re-check.
    pub fn new(request: ChargeRequest, checks: CallChecks) -> CallCharge {
        CallCharge {
            request,
            checks,
            outcome: None,
            facts: None,
        }
    }
}

impl Batch for CallCharge {
    fn run(tx: &Tx<'_>, calls: &mut [Self], now: i64) -> Result<(), StoreError> {
        let mut rows = CredentialRows::default();
        let mut standing = Vec::with_capacity(calls.len());
        for call in calls.iter_mut() {
            standing.push(call.checks.recheck_in(tx, &mut rows)?);
        }
        let requests: Vec<Option<&ChargeRequest>> = calls
            .iter()
            .zip(&standing)
            .map(|(call, &stands)| stands.then_some(&call.request))
            .collect();
        let outcomes = charge_in(tx, &requests, now)?;
        // A charge changes neither the plan nor the keys: the facts are read once.
        let mut facts: Option<AccessFacts> = None;
        for (call, outcome) in calls.iter_mut().zip(outcomes) {
            if matches!(outcome, Some(Ok(_))) {
                let read = match &facts {
                    Some(read) => read.clone(),
                    None => facts
                        .insert(AccessFacts::read_on(tx, call.checks.now())?)
                        .clone(),
                };
                call.facts = Some(read);
            }
            call.outcome = outcome;
        }
        Ok(())
    }

    fn fail(&mut self, err: McpError) {
        self.outcome = Some(Err(err));
    }
}
