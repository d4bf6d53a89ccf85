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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::guards::auth::testing::{fresh, key};
    use crate::guards::auth::{self, Authenticator, CallAuth, Recheck};
    use crate::guards::ratelimit::Limiter;
    use crate::tools::Category;

    fn reason(err: &McpError) -> serde_json::Value {
        err.fields()["details"]["reason"].clone()
    }

    #[test]
    fn one_charging_transaction_rechecks_each_cached_credential_on_its_own() {
        let (_dir, store) = fresh("pro");
        let (a, b) = (
            key(&store, &["invoices:read"]),
            key(&store, &["clients:read"]),
        );
        let auth = Authenticator::new(store.clone(), Clock::System);
        for issued in [&a, &b] {
            auth.authenticate(Some(issued.token.expose()), "t")
                .expect("first call verifies");
        }
        assert!(auth::revoke_key(&store, &b.public_id).expect("revoke"));
        store
            .sql_write(|tx| tx.execute("UPDATE credentials SET last_used_at = NULL", []))
            .expect("forget last use");
        let calls: Vec<CallAuth> = [&a, &b, &a]
            .iter()
            .map(|k| {
                auth.authenticate_call(Some(k.token.expose()), "t")
                    .expect("cached")
            })
            .collect();
        assert!(calls.iter().all(|c| matches!(c, CallAuth::Cached { .. })));
        let limiter: Limiter<CallCharge> = Limiter::with_batch(store.clone(), Clock::System);
        let group = calls
            .iter()
            .map(|call| {
                let request = ChargeRequest {
                    credential_id: call.credential_id().to_owned(),
                    client_id: None,
                    category: Category::Read,
                };
                CallCharge::new(request, auth.call_checks(call))
            })
            .collect();
        let charged = limiter.charge_many(group);
        let rechecked: Vec<Result<Vec<String>, serde_json::Value>> = calls
            .iter()
            .zip(charged)
            .map(
                |(call, mut charged)| match auth.finish_recheck(call, &mut charged.checks, "t") {
                    Recheck::Admitted(p) => {
                        assert_eq!(p.credential_id, call.credential_id());
                        assert!(charged.facts.is_some(), "plan read for an admitted call");
                        Ok(p.scopes)
                    }
                    Recheck::Refused(err) => Err(reason(&err)),
                    Recheck::Stale => panic!("nothing rotated"),
                },
            )
            .collect();
        assert_eq!(
            rechecked,
            [
                Ok(vec!["invoices:read".to_owned()]),
                Err(serde_json::json!("revoked")),
                Ok(vec!["invoices:read".to_owned()]),
            ]
        );
        let touched: Option<i64> = store
            .sql_read(|c| {
                c.query_row(
                    "SELECT last_used_at FROM credentials WHERE public_id = ?1",
                    [&a.public_id],
                    |r| r.get(0),
                )
            })
            .expect("row");
        assert!(
            touched.is_some(),
            "last use recorded in the charging transaction"
        );
    }
}
