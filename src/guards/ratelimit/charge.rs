//! What one charging transaction does with the counters: read the limits of each distinct
//! (credential, client, category), sum the increments per counter into one write, hand
//! the counts out in queue order, and decide each call (admitted with its budget, or the
//! `-32006` naming the exceeded bucket that resets last).

use super::{
    BucketState, Budget, CLIENT_BUCKET, ChargeOutcome, ChargeRequest, FALLBACK_CLIENT_PER_MINUTE,
    PLAN_BUCKET, fallback_per_minute, window_secs,
};
use crate::catalog::McpError;
use crate::store::plans::PerMinute;
use crate::store::{StoreError, Tx, counters};
use crate::tools::Category;

/// The limits that apply to one request, read inside the charging transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct AppliedLimits {
    pub(super) category_per_minute: u64,
    /// Plan slug and its hourly limit, when the plan bucket applies.
    pub(super) plan: Option<(String, u64)>,
    /// Client id and its per-minute limit, when the credential belongs to a client.
    pub(super) client: Option<(String, u64)>,
}

/// The store's column of a tool category's per-minute limit.
pub fn per_minute_of(category: Category) -> PerMinute {
    match category {
        Category::Read => PerMinute::Read,
        Category::Write => PerMinute::Write,
        Category::Destructive => PerMinute::Destructive,
        Category::Send => PerMinute::Send,
        Category::Generate => PerMinute::Generate,
    }
}

pub(super) fn read_limits(
    tx: &Tx<'_>,
    request: &ChargeRequest,
) -> Result<AppliedLimits, StoreError> {
    let stored = counters::limits_for(
        tx,
        &request.credential_id,
        request.client_id.as_deref(),
        per_minute_of(request.category),
    )?;
    let plan = match (stored.plan_slug, stored.hourly) {
        (Some(slug), Some(hourly)) => Some((slug, hourly)),
        _ => None,
    };
    Ok(AppliedLimits {
        category_per_minute: stored
            .per_minute
            .unwrap_or_else(|| fallback_per_minute(request.category)),
        plan,
        client: stored.client_id.map(|id| {
            let limit = stored
                .client_per_minute
                .unwrap_or(FALLBACK_CLIENT_PER_MINUTE);
            (id, limit)
        }),
    })
}

/// One counter increment a call needs: which bucket and key, and the call's limit there.
pub(super) struct Need {
    pub(super) bucket: &'static str,
    pub(super) key: String,
    pub(super) limit: u64,
}

/// Charges `requests` at time `now` inside `tx`, in order, and decides each one; a `None`
/// (a call its caller refused before charging) moves no counter and gets no outcome.
/// Every applicable counter is incremented, refused or not. Increments of one counter
/// within the batch are summed into a single write and handed out in queue order, so the
/// Nth charge of a counter sees exactly the count it would have seen charged alone.
/// Limits are read once per distinct (credential, client, category) — they cannot change
/// within the transaction.
pub fn charge_in(
    tx: &Tx<'_>,
    requests: &[Option<&ChargeRequest>],
    now: i64,
) -> Result<Vec<Option<ChargeOutcome>>, StoreError> {
    let mut seen: Vec<(&ChargeRequest, AppliedLimits)> = Vec::new();
    // Per request, the counters it moves (empty when it is not charged).
    let mut needs: Vec<Vec<Need>> = Vec::with_capacity(requests.len());
    for request in requests {
        let Some(request) = *request else {
            needs.push(Vec::new());
            continue;
        };
        let limits = match seen.iter().find(|(r, _)| *r == request) {
            Some((_, limits)) => limits.clone(),
            None => {
                let limits = read_limits(tx, request)?;
                seen.push((request, limits.clone()));
                limits
            }
        };
        let mut need = vec![Need {
            bucket: request.category.as_str(),
            key: request.credential_id.clone(),
            limit: limits.category_per_minute,
        }];
        if let Some((slug, limit)) = limits.plan {
            need.push(Need {
                bucket: PLAN_BUCKET,
                key: slug,
                limit,
            });
        }
        if let Some((client, limit)) = limits.client {
            need.push(Need {
                bucket: CLIENT_BUCKET,
                key: client,
                limit,
            });
        }
        needs.push(need);
    }
    // Sum the increments per counter, apply each once, and remember the first count of
    // the batch's range for that counter.
    let mut counters: Vec<(&'static str, &str, usize, u64)> = Vec::new();
    for need in needs.iter().flatten() {
        match counters
            .iter_mut()
            .find(|(b, k, _, _)| *b == need.bucket && *k == need.key)
        {
            Some(counter) => counter.2 += 1,
            None => counters.push((need.bucket, &need.key, 1, 0)),
        }
    }
    for (bucket, key, by, next) in &mut counters {
        let window = window_secs(bucket);
        let window_start = now - now.rem_euclid(window);
        let total = counters::increment(tx, bucket, key, window_start, *by)?;
        *next = (total + 1).saturating_sub(*by as u64);
    }
    let mut outcomes = Vec::with_capacity(needs.len());
    for need in &needs {
        if need.is_empty() {
            outcomes.push(None);
            continue;
        }
        let buckets = need
            .iter()
            .map(|n| {
                let counter = counters
                    .iter_mut()
                    .find(|(b, k, _, _)| *b == n.bucket && *k == n.key)
                    .map(|c| &mut c.3);
                let count = counter.map_or(0, |next| {
                    let count = *next;
                    *next += 1;
                    count
                });
                let window = window_secs(n.bucket);
                let window_start = now - now.rem_euclid(window);
                BucketState {
                    bucket: n.bucket,
                    limit: n.limit,
                    count,
                    reset: window_start + window,
                    window_secs: window,
                }
            })
            .collect();
        outcomes.push(Some(decide(buckets, now)));
    }
    Ok(outcomes)
}

/// Admits the call when no bucket is over its limit; otherwise refuses it naming the
/// exceeded bucket that resets last.
pub(super) fn decide(buckets: Vec<BucketState>, now: i64) -> ChargeOutcome {
    let binding = buckets
        .iter()
        .filter(|b| b.exceeded())
        .max_by_key(|b| (b.reset, std::cmp::Reverse(b.limit)));
    match binding {
        None => Ok(Budget { buckets }),
        Some(b) => {
            let retry_after = (b.reset - now).max(1);
            Err(McpError::rate_limited(
                b.bucket,
                b.limit,
                u64::try_from(b.reset).unwrap_or(0),
                u64::try_from(retry_after).unwrap_or(1),
            ))
        }
    }
}
