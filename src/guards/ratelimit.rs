//! Rate counters: three fixed-window buckets in SQLite, charged before any other check
//! (PRODUCT.md §5).
//!
//! | bucket name | key | window | limit |
//! |---|---|---|---|
//! | the category (`read`, `write`, `destructive`, `send`, `generate`) | credential public id | 60 s | the credential's override, else the company plan's per-category default |
//! | `plan` | the company's plan slug | 3600 s | the plan's `hourly_call_limit`; `NULL` (enterprise) skips the bucket |
//! | `client` | OAuth client id | 60 s | the client's `per_minute_limit`, else the plan's `client_per_minute` |
//!
//! The per-credential bucket is named after the category alone (`bucket: "write"` in a
//! `-32006`), because the credential is implied: it is the caller's own.
//!
//! **Charging** a call increments every bucket that applies (the counter is read, then
//! written back by `INSERT … ON CONFLICT DO UPDATE SET count = excluded.count`; see
//! [`increment`]) and *then* compares each count with the limit read in the same
//! `BEGIN IMMEDIATE` transaction, so a raised limit applies on the next
//! call and several processes on one file can never admit more than the limit. The
//! increment stays even when the call is refused: refused calls consume quota, by product
//! rule. Over any limit the call is `-32006 rate_limited` naming the exceeded bucket that
//! resets *last* (the caller cannot succeed before it does), with `limit`, `reset` (unix
//! seconds when that window ends) and `retry_after` (seconds until then, at least 1).
//!
//! **Group commit**: concurrent callers of one [`Limiter`] queue their charges; whichever
//! caller finds no batch running becomes the leader, drains up to [`BATCH_MAX`] queued
//! charges and applies them in one transaction, in queue order (the Nth charge of a
//! counter in a batch sees the count it would have seen alone), then hands every caller
//! its own outcome. [`ChargeMode::PerCall`] is the plain one-transaction-per-call path,
//! kept for comparison; both run the same [`charge_batch`] code.
//!
//! Windows older than [`RETENTION_SECS`] are deleted about once a minute, in small
//! separate transactions on one background thread, paced so that pruning (even a long
//! backlog) never holds up calls.
//!
//! The remaining budget travels as `_meta["dev.tollgate/ratelimit"]` ([`Budget::to_meta`]);
//! the HTTP transport renders it as rate-limit headers too.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use rusqlite::{OptionalExtension, Transaction};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::catalog::McpError;
use crate::clock::Clock;
use crate::guards::auth::Principal;
use crate::guards::metrics::{ChargeCounts, Metrics};
use crate::store::store_failure;
use crate::store::{Store, StoreError};
use crate::tools::Category;

/// Length of the per-credential and per-client windows, in seconds.
pub const MINUTE_WINDOW: i64 = 60;
/// Length of the per-plan window, in seconds.
pub const HOUR_WINDOW: i64 = 3600;
/// Most charges one group-commit transaction applies.
pub const BATCH_MAX: usize = 64;
/// Longest a leader waits for the charges it expects to share its transaction.
const GATHER_WAIT: std::time::Duration = std::time::Duration::from_micros(1000);
/// Counter windows that started longer ago than this are deleted.
pub const RETENTION_SECS: i64 = 2 * HOUR_WINDOW;
/// How often (at most) one process prunes expired windows.
const PRUNE_INTERVAL_SECS: i64 = 60;
/// Rows deleted per pruning transaction (keeps each one short).
const PRUNE_CHUNK: i64 = 100;
/// A pruner thread of this process is running.
static PRUNING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Pause between two pruning transactions: at most 2 000 windows a second are deleted,
/// well above what even a million live windows expire at (about 140 a second), while a
/// backlog never takes more than a few per cent of a busy server.
const PRUNE_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// Name of the per-plan bucket.
pub const PLAN_BUCKET: &str = "plan";
/// Name of the per-OAuth-client bucket.
pub const CLIENT_BUCKET: &str = "client";

/// Per-category defaults used only when the company or its plan row is missing (a
/// database without `tollgate init`); they match the schema's column defaults.
fn fallback_per_minute(category: Category) -> u64 {
    match category {
        Category::Read => 120,
        Category::Write => 60,
        Category::Destructive | Category::Send | Category::Generate => 10,
    }
}

/// Fallback per-client limit, as [`fallback_per_minute`].
const FALLBACK_CLIENT_PER_MINUTE: u64 = 1000;

/// Window length of a bucket, by its name (`plan` is hourly, every other one per minute).
pub fn window_secs(bucket: &str) -> i64 {
    if bucket == PLAN_BUCKET {
        HOUR_WINDOW
    } else {
        MINUTE_WINDOW
    }
}

/// One bucket as it stands right after a charge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BucketState {
    /// Bucket name: a category, `plan` or `client`.
    pub bucket: &'static str,
    /// Calls allowed per window.
    pub limit: u64,
    /// Calls counted in the current window, this one included.
    pub count: u64,
    /// Unix seconds when the current window ends.
    pub reset: i64,
    /// Window length in seconds.
    pub window_secs: i64,
}

impl BucketState {
    /// Calls left in the current window.
    pub fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.count)
    }

    fn exceeded(&self) -> bool {
        self.count > self.limit
    }
}

/// What is left in each bucket after a successful charge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Budget {
    buckets: Vec<BucketState>,
}

impl Budget {
    /// The buckets charged, in order: category, then `plan` and `client` when they apply.
    pub fn buckets(&self) -> &[BucketState] {
        &self.buckets
    }

    /// The bucket with the fewest calls left (on a tie, the one that resets last).
    pub fn tightest(&self) -> Option<&BucketState> {
        self.buckets
            .iter()
            .min_by_key(|b| (b.remaining(), std::cmp::Reverse(b.reset)))
    }

    /// The `_meta["dev.tollgate/ratelimit"]` value:
    /// `{"buckets":[{"bucket","limit","remaining","reset","window_secs"}…],"tightest":name}`.
    pub fn to_meta(&self) -> Value {
        let buckets: Vec<Value> = self
            .buckets
            .iter()
            .map(|b| {
                json!({
                    "bucket": b.bucket,
                    "limit": b.limit,
                    "remaining": b.remaining(),
                    "reset": b.reset,
                    "window_secs": b.window_secs,
                })
            })
            .collect();
        let mut meta = Map::with_capacity(2);
        meta.insert("buckets".into(), Value::Array(buckets));
        meta.insert("tightest".into(), self.tightest().map(|b| b.bucket).into());
        Value::Object(meta)
    }
}

impl Budget {
    /// The budget a [`Budget::to_meta`] value describes; `None` when `meta` is not one.
    /// Buckets of a name no limiter charges are left out.
    pub fn from_meta(meta: &Value) -> Option<Budget> {
        let known = |name: &str| {
            Category::ALL
                .iter()
                .map(|c| c.as_str())
                .chain([PLAN_BUCKET, CLIENT_BUCKET])
                .find(|known| *known == name)
        };
        let bucket = |b: &Value| {
            let limit = b.get("limit")?.as_u64()?;
            Some(BucketState {
                bucket: known(b.get("bucket")?.as_str()?)?,
                limit,
                count: limit.checked_sub(b.get("remaining")?.as_u64()?)?,
                reset: b.get("reset")?.as_i64()?,
                window_secs: b.get("window_secs")?.as_i64()?,
            })
        };
        let buckets = meta.get("buckets")?.as_array()?;
        Some(Budget {
            buckets: buckets.iter().filter_map(bucket).collect(),
        })
    }
}

/// How a [`Limiter`] turns charges into transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChargeMode {
    /// Concurrent charges share one transaction (up to [`BATCH_MAX`]); the default.
    GroupCommit,
    /// One transaction per charge.
    PerCall,
}

/// One call to charge: who, and which category.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargeRequest {
    /// Public id of the calling credential.
    pub credential_id: String,
    /// The OAuth client the credential belongs to, when the caller knows it (otherwise it
    /// is read from the credential's row).
    pub client_id: Option<String>,
    /// The tool's category.
    pub category: Category,
}

/// The outcome of one charge: the budget left, or the `-32006` refusal.
pub type ChargeOutcome = Result<Budget, McpError>;

/// Reads and writes a caller needs inside its charging transaction besides the counters,
/// so that they cost no transaction of their own (the guard chain re-checks a cached
/// credential and reads the plan here).
pub trait TxChecks: std::any::Any + Send {
    /// Runs before this call's counters move. `Ok(false)` refuses the call *without*
    /// charging it (the implementation keeps why); an `Err` fails the whole batch.
    fn before_charge(
        &mut self,
        conn: &rusqlite::Connection,
        now: i64,
        memo: &mut TxMemo,
    ) -> Result<bool, StoreError>;

    /// Runs after this call's counters moved and admitted it.
    fn after_charge(
        &mut self,
        conn: &rusqlite::Connection,
        now: i64,
        memo: &mut TxMemo,
    ) -> Result<(), StoreError>;
}

/// What the checks of one transaction may keep for the next call's checks in the same
/// transaction (the calls of a batch are mostly one credential's: its row and the plan
/// are read once, not once a call). It starts empty with every transaction; the checks
/// decide what it holds, and must keep it true of the transaction's own writes.
pub type TxMemo = Option<Box<dyn std::any::Any + Send>>;

/// One queued charge: the request, the caller's checks, and where its outcome goes.
struct Item {
    request: ChargeRequest,
    checks: Option<Box<dyn TxChecks>>,
    /// `None` when the checks refused the call before it was charged.
    outcome: Option<ChargeOutcome>,
}

/// Charges calls against their buckets.
pub struct Limiter {
    store: Store,
    mode: ChargeMode,
    queue: Mutex<Queue>,
    /// Wakes a gathering leader once the queue holds a full batch.
    gathered: Condvar,
    last_prune: AtomicI64,
    clock: Clock,
    /// Where its transactions and charges are counted.
    metrics: &'static Metrics,
}

/// Charges waiting for a transaction, and whether some caller is leading one.
#[derive(Default)]
struct Queue {
    waiting: VecDeque<Queued>,
    leader_active: bool,
    /// How many callers charging a single call the last batch held: how many charges a
    /// leader waits for (at most [`GATHER_WAIT`]) before it starts the next transaction.
    /// Calls charged in a group arrive together, so nobody waits for them.
    last_lone: usize,
    /// A leader is waiting for the queue to reach `last_lone`.
    gathering: bool,
}

/// One charge in the queue, with where its caller waits.
struct Queued {
    item: Item,
    slot: Arc<Slot>,
    /// Its caller charges this call alone (not a group of calls).
    lone: bool,
}

/// Where one queued caller waits: for its outcome, or to be handed the leadership.
#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    changed: Condvar,
}

#[derive(Default)]
enum SlotState {
    #[default]
    Waiting,
    /// The previous leader finished and this caller is at the head of the queue.
    Lead,
    Done(Item),
}

impl Slot {
    fn set(&self, state: SlotState) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
        self.changed.notify_one();
    }

    /// Blocks until the slot is no longer `Waiting`; returns the outcome, or `None` when
    /// this caller must lead the next batch.
    fn wait(&self) -> Option<Item> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match std::mem::take(&mut *state) {
                SlotState::Waiting => {
                    state = self
                        .changed
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                SlotState::Lead => return None,
                SlotState::Done(item) => return Some(item),
            }
        }
    }
}

impl Limiter {
    /// A group-committing limiter over `store`, whose windows follow `clock`.
    pub fn new(store: Store, clock: Clock) -> Limiter {
        Limiter::with_mode(store, ChargeMode::GroupCommit, clock)
    }

    /// A limiter over `store` that commits as `mode` says, counted in the process's
    /// [`metrics::global`](crate::guards::metrics::global).
    pub fn with_mode(store: Store, mode: ChargeMode, clock: Clock) -> Limiter {
        Limiter::counted_in(store, mode, crate::guards::metrics::global(), clock)
    }

    /// A limiter counted in `metrics` (tests give each limiter counters of its own).
    pub fn counted_in(
        store: Store,
        mode: ChargeMode,
        metrics: &'static Metrics,
        clock: Clock,
    ) -> Limiter {
        Limiter {
            store,
            mode,
            queue: Mutex::new(Queue::default()),
            gathered: Condvar::new(),
            last_prune: AtomicI64::new(0),
            clock,
            metrics,
        }
    }

    /// How many calls and charging transactions have been counted so far (by every limiter
    /// counted in the same metrics).
    pub fn stats(&self) -> ChargeCounts {
        self.metrics.charge_counts()
    }

    /// Charges one call of `category` to every bucket that applies.
    pub fn charge(&self, principal: &Principal, category: Category) -> Result<Budget, McpError> {
        self.charge_request(ChargeRequest {
            credential_id: principal.credential_id.clone(),
            client_id: principal.client_id.clone(),
            category,
        })
    }

    /// Charges one prepared request (what [`Limiter::charge`] does after copying the
    /// principal's ids).
    pub fn charge_request(&self, request: ChargeRequest) -> ChargeOutcome {
        self.charge_item(Item {
            request,
            checks: None,
            outcome: None,
        })
        .outcome
        .unwrap_or_else(|| Err(McpError::internal()))
    }

    /// Charges `request` with `checks` run inside the same transaction. Returns the
    /// outcome — `None` when the checks refused the call uncharged — and the checks.
    pub fn charge_checked<C: TxChecks>(
        &self,
        request: ChargeRequest,
        checks: C,
    ) -> (Option<ChargeOutcome>, C) {
        match self.charge_checked_many(vec![(request, checks)]).pop() {
            Some(charged) => charged,
            None => unreachable!("one call in, one outcome out"),
        }
    }

    /// Charges several calls at once (the `tools/call`s of one stdio read): they are queued
    /// together, so they share transactions and their caller waits once, not once a call.
    /// Outcomes and checks come back in the order of `calls`.
    pub fn charge_checked_many<C: TxChecks>(
        &self,
        calls: Vec<(ChargeRequest, C)>,
    ) -> Vec<(Option<ChargeOutcome>, C)> {
        let items = calls
            .into_iter()
            .map(|(request, checks)| Item {
                request,
                checks: Some(Box::new(checks)),
                outcome: None,
            })
            .collect();
        self.charge_items(items)
            .into_iter()
            .map(|item| {
                let any: Box<dyn std::any::Any> = match item.checks {
                    Some(checks) => checks,
                    None => unreachable!("a charge always gives its checks back"),
                };
                match any.downcast::<C>() {
                    Ok(checks) => (item.outcome, *checks),
                    Err(_) => unreachable!("the checks come back as the type they went in as"),
                }
            })
            .collect()
    }

    fn charge_item(&self, item: Item) -> Item {
        match self.charge_items(vec![item]).pop() {
            Some(item) => item,
            None => unreachable!("one item in, one item out"),
        }
    }

    fn charge_items(&self, mut items: Vec<Item>) -> Vec<Item> {
        match self.mode {
            ChargeMode::PerCall => {
                for item in &mut items {
                    self.run_batch(std::slice::from_mut(item));
                }
                items
            }
            ChargeMode::GroupCommit => self.charge_grouped(items),
        }
    }

    /// Queues `items` (in order, one behind the other) and waits for their outcomes. A
    /// caller that finds no batch running, or is handed the leadership, leads: its first
    /// unfinished item is then at the head of the queue, so the batch it drains always
    /// contains it. (Leadership only ever goes to the head of the queue, and a caller's
    /// items are finished in queue order, so waiting for them in that order never misses
    /// a hand-over.)
    fn charge_grouped(&self, items: Vec<Item>) -> Vec<Item> {
        if items.is_empty() {
            // Taking the leadership with nothing to charge would never hand it back.
            return items;
        }
        let lone = items.len() == 1;
        let slots: Vec<Arc<Slot>> = items.iter().map(|_| Arc::default()).collect();
        let mut lead = {
            let mut queue = self.lock_queue();
            for (item, slot) in items.into_iter().zip(&slots) {
                let slot = Arc::clone(slot);
                queue.waiting.push_back(Queued { item, slot, lone });
            }
            if queue.gathering && queue.waiting.len() >= queue.last_lone {
                self.gathered.notify_one();
            }
            !std::mem::replace(&mut queue.leader_active, true)
        };
        let mut done = Vec::with_capacity(slots.len());
        for slot in &slots {
            loop {
                if std::mem::take(&mut lead) {
                    self.lead_one_batch();
                }
                match slot.wait() {
                    Some(item) => break done.push(item),
                    None => lead = true,
                }
            }
        }
        done
    }

    /// Drains up to [`BATCH_MAX`] queued charges, commits them in one transaction, hands
    /// each caller its outcome, then passes the leadership to the next queued caller (or
    /// clears it when nobody waits). Only one caller leads at a time.
    fn lead_one_batch(&self) {
        let (mut batch, slots): (Vec<Item>, Vec<Arc<Slot>>) = {
            let mut queue = self.lock_queue();
            // Under steady load as many lone charges as the last batch held are on their
            // way: wait (briefly) for them, so they share this transaction. Without the
            // wait, a server with fewer cores than calls in progress runs one transaction
            // per call, because the other callers are runnable but not running while the
            // leader is. After a batch of one (light load), or of groups, nobody waits.
            let want = queue.last_lone.min(BATCH_MAX);
            if queue.waiting.len() < want {
                let deadline = Instant::now() + GATHER_WAIT;
                queue.gathering = true;
                while queue.waiting.len() < want {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    queue = self
                        .gathered
                        .wait_timeout(queue, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                queue.gathering = false;
            }
            let take = queue.waiting.len().min(BATCH_MAX);
            let mut lone = 0;
            let drained = queue.waiting.drain(..take).map(|q| {
                lone += usize::from(q.lone);
                (q.item, q.slot)
            });
            let drained = drained.unzip();
            queue.last_lone = lone;
            drained
        };
        // A panic must not strand the callers of this batch or the leadership; it becomes
        // an internal error for this batch instead.
        if std::panic::catch_unwind(AssertUnwindSafe(|| self.run_batch(&mut batch))).is_err() {
            for item in &mut batch {
                item.outcome = Some(Err(McpError::internal()));
            }
        }
        for (item, slot) in batch.into_iter().zip(&slots) {
            slot.set(SlotState::Done(item));
        }
        let mut queue = self.lock_queue();
        match queue.waiting.front() {
            Some(next) => next.slot.set(SlotState::Lead),
            None => queue.leader_active = false,
        }
    }

    fn lock_queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `batch` in one transaction, in order, setting every item's outcome.
    fn run_batch(&self, batch: &mut [Item]) {
        self.metrics.observe_charge_batch(batch.len());
        let mut now = 0;
        let result = self.store.write(|tx| {
            // The clock is read once the write lock is held, so windows follow commit order.
            now = self.clock.unix_secs();
            charge_items(tx, batch, now)
        });
        self.maybe_prune(now);
        if let Err(err) = result {
            let failure = store_failure(err, false);
            for item in batch {
                item.outcome = Some(Err(failure.clone()));
            }
        }
    }

    /// Starts a background prune when the last one is more than a minute old.
    fn maybe_prune(&self, now: i64) {
        let last = self.last_prune.load(Ordering::Relaxed);
        if now < last + PRUNE_INTERVAL_SECS
            || self
                .last_prune
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        // One pruner at a time: a long backlog is still being worked off.
        if PRUNING.swap(true, Ordering::AcqRel) {
            return;
        }
        let store = self.store.clone();
        let spawned = std::thread::Builder::new()
            .name("rate-prune".to_owned())
            .spawn(move || {
                if let Err(e) = prune_expired(&store, now) {
                    tracing::warn!(cause = %e, "pruning expired rate windows failed");
                }
                PRUNING.store(false, Ordering::Release);
            });
        if let Err(e) = spawned {
            PRUNING.store(false, Ordering::Release);
            tracing::warn!(cause = %e, "cannot start the rate-window pruner");
        }
    }
}

/// The limits that apply to one request, read inside the charging transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AppliedLimits {
    category_per_minute: u64,
    /// Plan slug and its hourly limit, when the plan bucket applies.
    plan: Option<(String, u64)>,
    /// Client id and its per-minute limit, when the credential belongs to a client.
    client: Option<(String, u64)>,
}

const LIMITS_SQL: &str = "\
    SELECT p.slug, p.hourly_call_limit,
           CASE ?3 WHEN 'read'        THEN COALESCE(c.read_per_minute, p.read_per_minute)
                   WHEN 'write'       THEN COALESCE(c.write_per_minute, p.write_per_minute)
                   WHEN 'destructive' THEN COALESCE(c.destructive_per_minute,
                                                    p.destructive_per_minute)
                   WHEN 'send'        THEN COALESCE(c.send_per_minute, p.send_per_minute)
                   WHEN 'generate'    THEN COALESCE(c.generate_per_minute,
                                                    p.generate_per_minute)
           END,
           COALESCE(?2, c.client_id),
           COALESCE(oc.per_minute_limit, p.client_per_minute)
      FROM (SELECT 1) AS one
      LEFT JOIN company co ON co.id = 1
      LEFT JOIN plans p ON p.slug = co.plan_slug
      LEFT JOIN credentials c ON c.public_id = ?1
      LEFT JOIN oauth_clients oc ON oc.client_id = COALESCE(?2, c.client_id)";

fn read_limits(tx: &Transaction<'_>, request: &ChargeRequest) -> Result<AppliedLimits, StoreError> {
    let mut stmt = tx.prepare_cached(LIMITS_SQL)?;
    let row = stmt.query_row(
        rusqlite::params![
            request.credential_id,
            request.client_id,
            request.category.as_str()
        ],
        |row| {
            Ok((
                row.get::<_, Option<String>>(0)?,
                row.get::<_, Option<i64>>(1)?,
                row.get::<_, Option<i64>>(2)?,
                row.get::<_, Option<String>>(3)?,
                row.get::<_, Option<i64>>(4)?,
            ))
        },
    )?;
    let (plan_slug, hourly, per_minute, client_id, client_limit) = row;
    let plan = match (plan_slug, hourly) {
        (Some(slug), Some(hourly)) => Some((slug, to_limit(hourly))),
        _ => None,
    };
    Ok(AppliedLimits {
        category_per_minute: per_minute.map_or(fallback_per_minute(request.category), to_limit),
        plan,
        client: client_id.map(|id| {
            let limit = client_limit.map_or(FALLBACK_CLIENT_PER_MINUTE, to_limit);
            (id, limit)
        }),
    })
}

fn to_limit(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

// Two statements rather than one upsert with `RETURNING`: SQLite buffers the rows a
// `RETURNING` clause returns in a temporary table, which it creates (a page-sized
// allocation) on every run. The counter is read and written inside the caller's write
// transaction, so nothing moves in between.
const COUNTER_SQL: &str =
    "SELECT count FROM rate_counters WHERE bucket = ?1 AND key = ?2 AND window_start = ?3";
const SET_COUNTER_SQL: &str = "\
    INSERT INTO rate_counters (bucket, key, window_start, count) VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (bucket, key, window_start) DO UPDATE SET count = excluded.count";

/// Adds `by` to one counter; returns its new count.
fn increment(
    tx: &Transaction<'_>,
    bucket: &str,
    key: &str,
    window_start: i64,
    by: usize,
) -> Result<u64, StoreError> {
    let by = i64::try_from(by).unwrap_or(i64::MAX);
    let count: i64 = tx
        .prepare_cached(COUNTER_SQL)?
        .query_row(rusqlite::params![bucket, key, window_start], |row| {
            row.get::<_, i64>(0)
        })
        .optional()?
        .unwrap_or(0)
        .saturating_add(by);
    tx.prepare_cached(SET_COUNTER_SQL)?
        .execute(rusqlite::params![bucket, key, window_start, count])?;
    Ok(to_limit(count))
}

/// Charges every request of `batch` at time `now` inside `tx`, in order, and decides each
/// one. Every applicable counter is incremented, refused or not.
pub fn charge_batch(
    tx: &Transaction<'_>,
    batch: &[ChargeRequest],
    now: i64,
) -> Result<Vec<ChargeOutcome>, StoreError> {
    let mut items: Vec<Item> = batch
        .iter()
        .map(|request| Item {
            request: request.clone(),
            checks: None,
            outcome: None,
        })
        .collect();
    charge_items(tx, &mut items, now)?;
    Ok(items
        .into_iter()
        .map(|item| item.outcome.unwrap_or_else(|| Err(McpError::internal())))
        .collect())
}

/// One counter increment a call needs: which bucket and key, and the call's limit there.
struct Need {
    bucket: &'static str,
    key: String,
    limit: u64,
}

/// Charges `items` in order: each item's checks run first (a refusal leaves its counters
/// alone), then its counters move. Increments of one counter within the batch are summed
/// into a single upsert and handed out in queue order, so the Nth charge of a counter
/// sees exactly the count it would have seen charged alone. Limits are read once per
/// distinct (credential, client, category) — they cannot change within the transaction.
fn charge_items(tx: &Transaction<'_>, items: &mut [Item], now: i64) -> Result<(), StoreError> {
    let mut seen: Vec<(ChargeRequest, AppliedLimits)> = Vec::new();
    let mut memo: TxMemo = None;
    // Per item, the counters it moves (empty when its checks refused it).
    let mut needs: Vec<Vec<Need>> = Vec::with_capacity(items.len());
    for item in items.iter_mut() {
        if let Some(checks) = &mut item.checks
            && !checks.before_charge(tx, now, &mut memo)?
        {
            needs.push(Vec::new());
            continue;
        }
        let limits = match seen.iter().find(|(r, _)| *r == item.request) {
            Some((_, limits)) => limits.clone(),
            None => {
                let limits = read_limits(tx, &item.request)?;
                seen.push((item.request.clone(), limits.clone()));
                limits
            }
        };
        let mut need = vec![Need {
            bucket: item.request.category.as_str(),
            key: item.request.credential_id.clone(),
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
        let total = increment(tx, bucket, key, window_start, *by)?;
        *next = (total + 1).saturating_sub(*by as u64);
    }
    for (item, need) in items.iter_mut().zip(&needs) {
        if need.is_empty() {
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
        let outcome = decide(buckets, now);
        if outcome.is_ok()
            && let Some(checks) = &mut item.checks
        {
            checks.after_charge(tx, now, &mut memo)?;
        }
        item.outcome = Some(outcome);
    }
    Ok(())
}

/// Admits the call when no bucket is over its limit; otherwise refuses it naming the
/// exceeded bucket that resets last.
fn decide(buckets: Vec<BucketState>, now: i64) -> ChargeOutcome {
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

/// Deletes counter windows that started more than [`RETENTION_SECS`] before `now`, a
/// few hundred rows per short transaction. Returns how many rows went.
pub fn prune_expired(store: &Store, now: i64) -> Result<usize, StoreError> {
    let cutoff = now - RETENTION_SECS;
    let mut total = 0;
    loop {
        let deleted = store.write(|tx| {
            let mut stmt = tx.prepare_cached(
                "DELETE FROM rate_counters WHERE (bucket, key, window_start) IN (
                     SELECT bucket, key, window_start FROM rate_counters
                      WHERE window_start < ?1 LIMIT ?2)",
            )?;
            Ok(stmt.execute(rusqlite::params![cutoff, PRUNE_CHUNK])?)
        })?;
        total += deleted;
        if deleted < usize::try_from(PRUNE_CHUNK).unwrap_or(usize::MAX) {
            return Ok(total);
        }
        // A long backlog (a server that was down for a while) is worked off between
        // calls rather than taking the write lock back to back.
        std::thread::sleep(PRUNE_PAUSE);
    }
}

// ---------------------------------------------------------------------------------------
// Operator views and changes (`tollgate limits`, `tollgate usage`)

/// Per-category per-minute limits; `None` in an override means "inherit".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CategoryLimits<T> {
    /// `read` tools.
    pub read: T,
    /// `write` tools.
    pub write: T,
    /// `destructive` tools.
    pub destructive: T,
    /// `send` tools.
    pub send: T,
    /// `generate` tools.
    pub generate: T,
}

impl<T: Copy> CategoryLimits<T> {
    /// The value for `category`.
    pub fn get(&self, category: Category) -> T {
        match category {
            Category::Read => self.read,
            Category::Write => self.write,
            Category::Destructive => self.destructive,
            Category::Send => self.send,
            Category::Generate => self.generate,
        }
    }
}

/// A plan's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanLimits {
    /// Plan slug.
    pub slug: String,
    /// Calls per hour for the whole company; `None` = unlimited (bucket skipped).
    pub per_hour: Option<u64>,
    /// Per-credential defaults, calls per minute.
    pub per_minute: CategoryLimits<u64>,
    /// Default per-client limit, calls per minute.
    pub client_per_minute: u64,
}

/// A credential's overrides (only credentials with at least one are listed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CredentialOverrides {
    /// Public id.
    pub credential_id: String,
    /// Display name.
    pub name: String,
    /// Overrides; `None` = the plan's default.
    pub per_minute: CategoryLimits<Option<u64>>,
}

/// An OAuth client's override (only clients with one are listed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientOverride {
    /// Client id.
    pub client_id: String,
    /// Display name.
    pub name: String,
    /// Calls per minute for all the client's credentials together.
    pub per_minute: u64,
}

/// Everything `tollgate limits show` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitsReport {
    /// The company's plan, once `tollgate init` has run.
    pub company_plan: Option<String>,
    /// Every plan, smallest first.
    pub plans: Vec<PlanLimits>,
    /// Credentials with overrides.
    pub credentials: Vec<CredentialOverrides>,
    /// OAuth clients with an override.
    pub clients: Vec<ClientOverride>,
}

impl LimitsReport {
    /// Loads the report.
    pub fn load(store: &Store) -> Result<LimitsReport, StoreError> {
        store.read(|conn| {
            let company_plan = conn
                .query_row("SELECT plan_slug FROM company WHERE id = 1", [], |r| {
                    r.get(0)
                })
                .optional()?;
            Ok(LimitsReport {
                company_plan,
                plans: load_plan_limits(conn)?,
                credentials: load_credential_overrides(conn)?,
                clients: load_client_overrides(conn)?,
            })
        })
    }

    fn plan(&self, slug: &str) -> Option<&PlanLimits> {
        self.plans.iter().find(|p| p.slug == slug)
    }

    fn company_plan(&self) -> Option<&PlanLimits> {
        self.company_plan
            .as_deref()
            .and_then(|slug| self.plan(slug))
    }

    /// The effective limit of a counter row, as the charging code would compute it now.
    fn effective_limit(&self, bucket: &str, key: &str) -> Option<u64> {
        if bucket == PLAN_BUCKET {
            return self.plan(key).and_then(|p| p.per_hour);
        }
        if bucket == CLIENT_BUCKET {
            let own = self
                .clients
                .iter()
                .find(|c| c.client_id == key)
                .map(|c| c.per_minute);
            return own.or(Some(
                self.company_plan()
                    .map_or(FALLBACK_CLIENT_PER_MINUTE, |p| p.client_per_minute),
            ));
        }
        let category = *Category::ALL.iter().find(|c| c.as_str() == bucket)?;
        let own = self
            .credentials
            .iter()
            .find(|c| c.credential_id == key)
            .and_then(|c| c.per_minute.get(category));
        own.or(Some(
            self.company_plan()
                .map_or(fallback_per_minute(category), |p| {
                    p.per_minute.get(category)
                }),
        ))
    }
}

fn opt_limit(value: Option<i64>) -> Option<u64> {
    value.map(to_limit)
}

fn load_plan_limits(conn: &rusqlite::Connection) -> Result<Vec<PlanLimits>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT slug, hourly_call_limit, read_per_minute, write_per_minute,
                destructive_per_minute, send_per_minute, generate_per_minute, client_per_minute
           FROM plans ORDER BY rank",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(PlanLimits {
            slug: r.get(0)?,
            per_hour: opt_limit(r.get(1)?),
            per_minute: CategoryLimits {
                read: to_limit(r.get(2)?),
                write: to_limit(r.get(3)?),
                destructive: to_limit(r.get(4)?),
                send: to_limit(r.get(5)?),
                generate: to_limit(r.get(6)?),
            },
            client_per_minute: to_limit(r.get(7)?),
        })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

fn load_credential_overrides(
    conn: &rusqlite::Connection,
) -> Result<Vec<CredentialOverrides>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT public_id, name, read_per_minute, write_per_minute, destructive_per_minute,
                send_per_minute, generate_per_minute
           FROM credentials
          WHERE COALESCE(read_per_minute, write_per_minute, destructive_per_minute,
                         send_per_minute, generate_per_minute) IS NOT NULL
          ORDER BY public_id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(CredentialOverrides {
            credential_id: r.get(0)?,
            name: r.get(1)?,
            per_minute: CategoryLimits {
                read: opt_limit(r.get(2)?),
                write: opt_limit(r.get(3)?),
                destructive: opt_limit(r.get(4)?),
                send: opt_limit(r.get(5)?),
                generate: opt_limit(r.get(6)?),
            },
        })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

fn load_client_overrides(conn: &rusqlite::Connection) -> Result<Vec<ClientOverride>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT client_id, name, per_minute_limit FROM oauth_clients
          WHERE per_minute_limit IS NOT NULL ORDER BY client_id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(ClientOverride {
            client_id: r.get(0)?,
            name: r.get(1)?,
            per_minute: to_limit(r.get(2)?),
        })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// One change made by `tollgate limits set`. `None` limits mean "inherit" for overrides
/// and "unlimited" for a plan's hourly limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitChange {
    /// A plan's per-credential default for one category.
    PlanCategory {
        /// Plan slug.
        plan: String,
        /// Category.
        category: Category,
        /// Calls per minute.
        per_minute: u64,
    },
    /// A plan's hourly company-wide limit.
    PlanHourly {
        /// Plan slug.
        plan: String,
        /// Calls per hour; `None` = unlimited.
        per_hour: Option<u64>,
    },
    /// A plan's default per-client limit.
    PlanClient {
        /// Plan slug.
        plan: String,
        /// Calls per minute.
        per_minute: u64,
    },
    /// One credential's override for one category.
    Credential {
        /// Public id.
        credential_id: String,
        /// Category.
        category: Category,
        /// Calls per minute; `None` = back to the plan's default.
        per_minute: Option<u64>,
    },
    /// One OAuth client's override.
    Client {
        /// Client id.
        client_id: String,
        /// Calls per minute; `None` = back to the plan's default.
        per_minute: Option<u64>,
    },
}

/// Why a limit change was not made.
#[derive(Debug)]
pub enum LimitChangeError {
    /// No such plan, credential or client; the `&str` says which kind.
    NotFound(&'static str, String),
    /// The limit does not fit SQLite's integers.
    TooLarge(u64),
    /// The store failed.
    Store(StoreError),
}

impl std::fmt::Display for LimitChangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotFound(kind, id) => write!(f, "no {kind} {id:?}"),
            Self::TooLarge(n) => write!(f, "limit {n} is too large (max {})", i64::MAX),
            Self::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for LimitChangeError {}

impl From<StoreError> for LimitChangeError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

fn sql_limit(value: Option<u64>) -> Result<Option<i64>, LimitChangeError> {
    value
        .map(|n| i64::try_from(n).map_err(|_| LimitChangeError::TooLarge(n)))
        .transpose()
}

impl LimitChange {
    /// Applies the change; it takes effect on the next charge of every process.
    pub fn apply(&self, store: &Store) -> Result<(), LimitChangeError> {
        let (sql, value, id, kind) = match self {
            Self::PlanCategory {
                plan,
                category,
                per_minute,
            } => (
                format!(
                    "UPDATE plans SET {}_per_minute = ?1 WHERE slug = ?2",
                    category.as_str()
                ),
                Some(*per_minute),
                plan,
                "plan",
            ),
            Self::PlanHourly { plan, per_hour } => (
                "UPDATE plans SET hourly_call_limit = ?1 WHERE slug = ?2".to_owned(),
                *per_hour,
                plan,
                "plan",
            ),
            Self::PlanClient { plan, per_minute } => (
                "UPDATE plans SET client_per_minute = ?1 WHERE slug = ?2".to_owned(),
                Some(*per_minute),
                plan,
                "plan",
            ),
            Self::Credential {
                credential_id,
                category,
                per_minute,
            } => (
                format!(
                    "UPDATE credentials SET {}_per_minute = ?1 WHERE public_id = ?2",
                    category.as_str()
                ),
                *per_minute,
                credential_id,
                "credential",
            ),
            Self::Client {
                client_id,
                per_minute,
            } => (
                "UPDATE oauth_clients SET per_minute_limit = ?1 WHERE client_id = ?2".to_owned(),
                *per_minute,
                client_id,
                "OAuth client",
            ),
        };
        let value = sql_limit(value)?;
        let changed = store.write(|tx| Ok(tx.execute(&sql, rusqlite::params![value, id])?))?;
        if changed == 0 {
            return Err(LimitChangeError::NotFound(kind, id.clone()));
        }
        Ok(())
    }
}

/// One live counter, for `tollgate usage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsageRow {
    /// Bucket name.
    pub bucket: String,
    /// Whose counter: credential public id, plan slug or client id.
    pub key: String,
    /// Calls counted in the current window (refused ones included).
    pub count: u64,
    /// The limit that applies now; `None` when the bucket is unlimited or not a quota
    /// bucket.
    pub limit: Option<u64>,
    /// Calls left in the window, when limited.
    pub remaining: Option<u64>,
    /// Unix seconds when the window ends.
    pub reset: i64,
    /// Window length in seconds.
    pub window_secs: i64,
}

/// The counters of the windows still running at `now`, with their effective limits.
/// Other users of `rate_counters` (e.g. the `auth` throttle) are left out.
pub fn usage(store: &Store, now: i64) -> Result<Vec<UsageRow>, StoreError> {
    let report = LimitsReport::load(store)?;
    let rows: Vec<(String, String, i64, i64)> = store.read(|conn| {
        let mut stmt = conn.prepare_cached(
            "SELECT bucket, key, window_start, count FROM rate_counters
              WHERE window_start > ?1 ORDER BY bucket, key, window_start",
        )?;
        let rows = stmt.query_map([now - HOUR_WINDOW], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    })?;
    let quota_bucket = |b: &str| {
        b == PLAN_BUCKET || b == CLIENT_BUCKET || Category::ALL.iter().any(|c| c.as_str() == b)
    };
    Ok(rows
        .into_iter()
        .filter(|(bucket, _, start, _)| quota_bucket(bucket) && start + window_secs(bucket) > now)
        .map(|(bucket, key, start, count)| {
            let window = window_secs(&bucket);
            let limit = report.effective_limit(&bucket, &key);
            let count = to_limit(count);
            UsageRow {
                remaining: limit.map(|l| l.saturating_sub(count)),
                limit,
                count,
                reset: start + window,
                window_secs: window,
                bucket,
                key,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ErrorKind;
    use crate::store::{Company, StoreOptions};

    const T0: i64 = 1_764_464_400; // a minute and hour boundary

    struct Fixture {
        _dir: tempfile::TempDir,
        store: Store,
    }

    fn fixture(plan: &str) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = StoreOptions {
            create: true,
            ..StoreOptions::default()
        };
        let store = Store::open(&dir.path().join("t.db"), &opts).expect("open");
        store
            .set_company(&Company {
                name: "Acme".into(),
                tax_id: None,
                plan_slug: plan.into(),
                locale: "en".into(),
                country: "ES".into(),
            })
            .expect("company");
        Fixture { _dir: dir, store }
    }

    /// Keys `key00001` and `key00002` on the `starter` plan, limited to `per_hour` calls.
    fn two_keys_on_starter(per_hour: u64) -> Fixture {
        let f = fixture("starter");
        add_credential(&f.store, "key00001", None);
        add_credential(&f.store, "key00002", None);
        set(
            &f.store,
            LimitChange::PlanHourly {
                plan: "starter".into(),
                per_hour: Some(per_hour),
            },
        );
        f
    }

    fn add_credential(store: &Store, id: &str, client: Option<&str>) {
        store
            .write(|tx| {
                if let Some(client) = client {
                    tx.execute(
                        "INSERT OR IGNORE INTO oauth_clients (client_id, name, secret_hash, created_at)
                         VALUES (?1, 'c', '$argon2id$x', 0)",
                        [client],
                    )?;
                }
                tx.execute(
                    "INSERT INTO credentials (public_id, name, secret_hash, client_id, created_at)
                     VALUES (?1, 'k', '$argon2id$x', ?2, 0)",
                    rusqlite::params![id, client],
                )?;
                Ok(())
            })
            .expect("credential");
    }

    fn request(id: &str, category: Category) -> ChargeRequest {
        ChargeRequest {
            credential_id: id.into(),
            client_id: None,
            category,
        }
    }

    fn charge_at(store: &Store, batch: &[ChargeRequest], now: i64) -> Vec<ChargeOutcome> {
        store
            .write(|tx| charge_batch(tx, batch, now))
            .expect("charge")
    }

    fn set(store: &Store, change: LimitChange) {
        change.apply(store).expect("set limit");
    }

    fn limit_credential(store: &Store, id: &str, category: Category, per_minute: Option<u64>) {
        set(
            store,
            LimitChange::Credential {
                credential_id: id.into(),
                category,
                per_minute,
            },
        );
    }

    fn refusal(outcome: &ChargeOutcome) -> (ErrorKind, Value) {
        let err = outcome.as_ref().expect_err("refused");
        (err.kind(), Value::Object(err.fields().clone()))
    }

    /// The counters a test database holds, ordered.
    fn counters(store: &Store) -> Vec<(String, String, i64, i64)> {
        store
            .read(|conn| {
                let mut stmt = conn.prepare(
                    "SELECT bucket, key, window_start, count FROM rate_counters ORDER BY 1, 2, 3",
                )?;
                let rows = stmt
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .expect("counters")
    }

    #[test]
    fn one_batch_decides_exactly_as_one_transaction_per_call() {
        let batch: Vec<ChargeRequest> = ["key00001", "key00002", "key00001", "key00001"]
            .iter()
            .cycle()
            .take(12)
            .zip(
                [Category::Read, Category::Write, Category::Read]
                    .iter()
                    .cycle(),
            )
            .map(|(id, category)| request(id, *category))
            .collect();
        let run = |grouped: bool| {
            let f = two_keys_on_starter(9);
            limit_credential(&f.store, "key00001", Category::Read, Some(4));
            let outcomes: Vec<ChargeOutcome> = if grouped {
                charge_at(&f.store, &batch, T0)
            } else {
                batch
                    .iter()
                    .flat_map(|r| charge_at(&f.store, std::slice::from_ref(r), T0))
                    .collect()
            };
            (outcomes, counters(&f.store))
        };
        let (grouped, grouped_counters) = run(true);
        let (alone, alone_counters) = run(false);
        let decided = |outcomes: &[ChargeOutcome]| -> Vec<Result<Budget, Value>> {
            outcomes
                .iter()
                .map(|o| match o {
                    Ok(budget) => Ok(budget.clone()),
                    Err(err) => Err(Value::Object(err.fields().clone())),
                })
                .collect()
        };
        assert_eq!(decided(&grouped), decided(&alone));
        assert_eq!(grouped_counters, alone_counters);
        let admitted = grouped.iter().filter(|o| o.is_ok()).count();
        assert_eq!(admitted, 8, "{grouped:?}");
        assert!(grouped_counters.contains(&("plan".into(), "starter".into(), T0, 12)));
    }

    /// Refuses every call whose credential id ends in `x`, and counts what it saw.
    struct RefuseX {
        id: String,
        before: usize,
        after: usize,
    }

    impl TxChecks for RefuseX {
        fn before_charge(
            &mut self,
            _conn: &rusqlite::Connection,
            _now: i64,
            _memo: &mut TxMemo,
        ) -> Result<bool, StoreError> {
            self.before += 1;
            Ok(!self.id.ends_with('x'))
        }

        fn after_charge(
            &mut self,
            _conn: &rusqlite::Connection,
            _now: i64,
            _memo: &mut TxMemo,
        ) -> Result<(), StoreError> {
            self.after += 1;
            Ok(())
        }
    }

    #[test]
    fn checks_that_refuse_leave_the_counters_alone() {
        let f = fixture("pro");
        add_credential(&f.store, "key0000x", None);
        add_credential(&f.store, "key00001", None);
        let limiter = Limiter::new(f.store.clone(), Clock::System);
        let checks = |id: &str| RefuseX {
            id: id.into(),
            before: 0,
            after: 0,
        };
        let (outcome, seen) =
            limiter.charge_checked(request("key0000x", Category::Read), checks("key0000x"));
        assert!(outcome.is_none());
        assert_eq!((seen.before, seen.after), (1, 0));
        assert!(counters(&f.store).is_empty());
        let (outcome, seen) =
            limiter.charge_checked(request("key00001", Category::Read), checks("key00001"));
        assert!(outcome.expect("charged").is_ok());
        assert_eq!((seen.before, seen.after), (1, 1));
        assert_eq!(counters(&f.store).len(), 2, "read and plan buckets");
    }

    #[test]
    fn the_call_past_the_limit_is_refused_with_the_bucket_and_its_reset() {
        let f = fixture("pro");
        add_credential(&f.store, "key00001", None);
        limit_credential(&f.store, "key00001", Category::Write, Some(5));
        let batch = vec![request("key00001", Category::Write); 7];
        let outcomes = charge_at(&f.store, &batch, T0 + 15);
        let remaining: Vec<u64> = outcomes[..5]
            .iter()
            .map(|o| o.as_ref().expect("admitted").buckets()[0].remaining())
            .collect();
        assert_eq!(remaining, [4, 3, 2, 1, 0]);
        for outcome in &outcomes[5..] {
            let (kind, fields) = refusal(outcome);
            assert_eq!(kind, ErrorKind::RateLimited);
            assert_eq!(
                fields,
                json!({"retry_after": 45, "bucket": "write", "limit": 5, "reset": T0 + 60})
            );
        }
    }

    #[test]
    fn a_new_window_starts_from_zero() {
        let f = fixture("pro");
        add_credential(&f.store, "key00001", None);
        limit_credential(&f.store, "key00001", Category::Read, Some(1));
        let one = [request("key00001", Category::Read)];
        assert!(charge_at(&f.store, &one, T0 + 59)[0].is_ok());
        assert!(charge_at(&f.store, &one, T0 + 59)[0].is_err());
        assert!(charge_at(&f.store, &one, T0 + 60)[0].is_ok());
    }

    #[test]
    fn a_raised_limit_applies_to_a_counter_already_past_the_old_one() {
        let f = fixture("pro");
        add_credential(&f.store, "key00001", None);
        let limit = |n| LimitChange::Credential {
            credential_id: "key00001".into(),
            category: Category::Send,
            per_minute: Some(n),
        };
        set(&f.store, limit(2));
        let batch = vec![request("key00001", Category::Send); 4];
        let outcomes = charge_at(&f.store, &batch, T0);
        assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 2);
        set(&f.store, limit(10));
        let next = charge_at(&f.store, &batch[..1], T0 + 1);
        assert_eq!(
            next[0].as_ref().expect("admitted").buckets()[0].remaining(),
            5
        );
    }

    #[test]
    fn the_plan_bucket_refuses_on_its_own_and_enterprise_skips_it() {
        let f = two_keys_on_starter(3);
        let batch = [
            request("key00001", Category::Read),
            request("key00002", Category::Write),
            request("key00001", Category::Send),
            request("key00002", Category::Read),
        ];
        let outcomes = charge_at(&f.store, &batch, T0 + 600);
        let plan = &outcomes[2].as_ref().expect("third admitted").buckets()[1];
        assert_eq!((plan.bucket, plan.limit, plan.remaining()), ("plan", 3, 0));
        let (_, fields) = refusal(&outcomes[3]);
        assert_eq!(
            fields,
            json!({"retry_after": 3000, "bucket": "plan", "limit": 3, "reset": T0 + 3600})
        );
        set(
            &f.store,
            LimitChange::PlanHourly {
                plan: "starter".into(),
                per_hour: None,
            },
        );
        let budget = charge_at(&f.store, &batch[..1], T0 + 601)
            .remove(0)
            .expect("admitted");
        assert_eq!(budget.buckets().len(), 1);
    }

    #[test]
    fn the_client_bucket_counts_all_its_credentials_together() {
        let f = fixture("enterprise");
        add_credential(&f.store, "key00001", Some("client-a"));
        add_credential(&f.store, "key00002", Some("client-a"));
        set(
            &f.store,
            LimitChange::Client {
                client_id: "client-a".into(),
                per_minute: Some(2),
            },
        );
        let batch = [
            request("key00001", Category::Read),
            request("key00002", Category::Read),
            request("key00001", Category::Read),
        ];
        let outcomes = charge_at(&f.store, &batch, T0 + 30);
        let client = &outcomes[1].as_ref().expect("admitted").buckets()[1];
        assert_eq!(
            (client.bucket, client.limit, client.remaining()),
            ("client", 2, 0)
        );
        let (_, fields) = refusal(&outcomes[2]);
        assert_eq!(
            fields,
            json!({"retry_after": 30, "bucket": "client", "limit": 2, "reset": T0 + 60})
        );
        set(
            &f.store,
            LimitChange::Client {
                client_id: "client-a".into(),
                per_minute: None,
            },
        );
        set(
            &f.store,
            LimitChange::PlanClient {
                plan: "enterprise".into(),
                per_minute: 7,
            },
        );
        let budget = charge_at(&f.store, &batch[..1], T0 + 31)
            .remove(0)
            .expect("admitted");
        assert_eq!(budget.buckets()[1].limit, 7);
    }

    #[test]
    fn the_refusal_names_the_exceeded_bucket_that_resets_last() {
        let f = fixture("free");
        add_credential(&f.store, "key00001", None);
        set(
            &f.store,
            LimitChange::PlanHourly {
                plan: "free".into(),
                per_hour: Some(1),
            },
        );
        set(
            &f.store,
            LimitChange::PlanCategory {
                plan: "free".into(),
                category: Category::Read,
                per_minute: 1,
            },
        );
        let batch = vec![request("key00001", Category::Read); 2];
        let outcomes = charge_at(&f.store, &batch, T0 + 1800);
        let (_, fields) = refusal(&outcomes[1]);
        assert_eq!(fields["bucket"], "plan");
        assert_eq!(fields["retry_after"], 1800);
    }

    #[test]
    fn unknown_credentials_and_missing_company_fall_back_to_defaults() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = StoreOptions {
            create: true,
            ..StoreOptions::default()
        };
        let store = Store::open(&dir.path().join("t.db"), &opts).expect("open");
        let budget = charge_at(&store, &[request("", Category::Generate)], T0).remove(0);
        let budget = budget.expect("admitted");
        assert_eq!(budget.buckets().len(), 1);
        assert_eq!(budget.buckets()[0].limit, 10);
    }

    fn fixed_clock() -> Clock {
        crate::clock::ManualClock::at_unix_secs(T0 + 30).clock()
    }

    #[test]
    fn concurrent_callers_get_exactly_the_limit_in_both_modes() {
        let f = fixture("enterprise");
        for (id, mode) in [
            ("key00001", ChargeMode::GroupCommit),
            ("key00002", ChargeMode::PerCall),
        ] {
            add_credential(&f.store, id, None);
            limit_credential(&f.store, id, Category::Read, Some(100));
            let limiter = Limiter::counted_in(
                f.store.clone(),
                mode,
                Box::leak(Box::default()),
                fixed_clock(),
            );
            let admitted = std::sync::atomic::AtomicUsize::new(0);
            std::thread::scope(|s| {
                for _ in 0..8 {
                    s.spawn(|| {
                        for _ in 0..50 {
                            if limiter.charge_request(request(id, Category::Read)).is_ok() {
                                admitted.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                }
            });
            assert_eq!(admitted.load(Ordering::Relaxed), 100, "{mode:?}");
            let stats = limiter.stats();
            assert_eq!(stats.charges, 400);
            if mode == ChargeMode::PerCall {
                assert_eq!(stats.transactions, 400);
            }
            let count: i64 = f
                .store
                .read(|c| {
                    Ok(c.query_row(
                        "SELECT count FROM rate_counters WHERE key = ?1",
                        [id],
                        |r| r.get(0),
                    )?)
                })
                .expect("count");
            assert_eq!(count, 400, "{mode:?}: refused calls are charged too");
        }
    }

    #[test]
    fn charging_nothing_leaves_the_limiter_free() {
        let f = fixture("pro");
        add_credential(&f.store, "key00001", None);
        let limiter = Limiter::new(f.store.clone(), Clock::System);
        let none: Vec<(ChargeRequest, RefuseX)> = Vec::new();
        assert!(limiter.charge_checked_many(none).is_empty());
        let outcome = limiter.charge_request(request("key00001", Category::Read));
        assert!(outcome.is_ok(), "{outcome:?}");
    }

    #[test]
    fn a_group_that_fits_is_charged_in_one_transaction() {
        let f = fixture("pro");
        add_credential(&f.store, "key00001", None);
        let limiter = Limiter::counted_in(
            f.store.clone(),
            ChargeMode::GroupCommit,
            Box::leak(Box::default()),
            Clock::System,
        );
        let group: Vec<(ChargeRequest, RefuseX)> = (0..BATCH_MAX)
            .map(|_| {
                let checks = RefuseX {
                    id: "key00001".into(),
                    before: 0,
                    after: 0,
                };
                (request("key00001", Category::Read), checks)
            })
            .collect();
        let charged = limiter.charge_checked_many(group);
        assert!(
            charged
                .iter()
                .all(|(o, _)| o.as_ref().is_some_and(Result::is_ok))
        );
        let stats = limiter.stats();
        assert_eq!((stats.charges, stats.transactions), (BATCH_MAX as u64, 1));
    }

    #[test]
    fn groups_charged_at_once_keep_their_order_and_the_exact_limit() {
        let f = fixture("enterprise");
        add_credential(&f.store, "key00001", None);
        limit_credential(&f.store, "key00001", Category::Read, Some(250));
        let limiter = Limiter::counted_in(
            f.store.clone(),
            ChargeMode::GroupCommit,
            Box::leak(Box::default()),
            fixed_clock(),
        );
        let checks = || RefuseX {
            id: "key00001".into(),
            before: 0,
            after: 0,
        };
        // Four callers with groups larger than one transaction takes (BATCH_MAX), plus
        // callers charging one call at a time, all at once.
        let group = || {
            (0..BATCH_MAX + 36)
                .map(|_| (request("key00001", Category::Read), checks()))
                .collect::<Vec<_>>()
        };
        let (groups, singles) = std::thread::scope(|s| {
            let groups: Vec<_> = (0..4)
                .map(|_| s.spawn(|| limiter.charge_checked_many(group())))
                .collect();
            let singles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..25)
                            .map(|_| {
                                limiter
                                    .charge_checked(request("key00001", Category::Read), checks())
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let join = |h: std::thread::ScopedJoinHandle<'_, Vec<_>>| h.join().expect("caller");
            (
                groups.into_iter().map(join).collect::<Vec<_>>(),
                singles.into_iter().map(join).collect::<Vec<_>>(),
            )
        });
        let admitted = |charged: &[(Option<ChargeOutcome>, RefuseX)]| -> Vec<bool> {
            charged
                .iter()
                .map(|(outcome, seen)| {
                    assert_eq!(seen.before, 1, "checked once before the charge");
                    let ok = outcome.as_ref().expect("charged").is_ok();
                    assert_eq!(
                        seen.after,
                        usize::from(ok),
                        "checked after an admitted charge"
                    );
                    ok
                })
                .collect()
        };
        let mut total = 0;
        for charged in groups.iter().chain(&singles) {
            let flags = admitted(charged);
            // Within one caller's calls, once one is refused every later one is too: the
            // calls were charged in the caller's order.
            let first_refused = flags.iter().position(|ok| !ok).unwrap_or(flags.len());
            assert!(flags[first_refused..].iter().all(|ok| !ok), "{flags:?}");
            total += first_refused;
        }
        assert_eq!(total, 250, "exactly the limit is admitted");
        assert_eq!(limiter.stats().charges, 4 * (BATCH_MAX as u64 + 36) + 100);
    }

    #[test]
    fn group_commit_refusals_follow_queue_order_exactly() {
        let f = fixture("enterprise");
        add_credential(&f.store, "key00001", None);
        limit_credential(&f.store, "key00001", Category::Destructive, Some(0));
        let limiter = Limiter::new(f.store.clone(), Clock::System);
        let refused = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..10 {
                        let outcome =
                            limiter.charge_request(request("key00001", Category::Destructive));
                        if outcome.is_err_and(|e| e.kind() == ErrorKind::RateLimited) {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(refused.load(Ordering::Relaxed), 80);
    }

    #[test]
    fn pruning_removes_only_expired_windows() {
        let f = fixture("pro");
        add_credential(&f.store, "key00001", None);
        let one = [request("key00001", Category::Read)];
        for minute in 0..180 {
            charge_at(&f.store, &one, T0 + minute * 60);
        }
        let now = T0 + 180 * 60;
        let deleted = prune_expired(&f.store, now).expect("prune");
        // 180 minute windows + 3 hour windows; windows starting before now - 2 h go.
        assert_eq!(deleted, 60 + 1);
        let oldest: i64 = f
            .store
            .read(|c| {
                Ok(
                    c.query_row("SELECT min(window_start) FROM rate_counters", [], |r| {
                        r.get(0)
                    })?,
                )
            })
            .expect("min");
        assert_eq!(oldest, now - RETENTION_SECS);
    }

    #[test]
    fn usage_reports_live_windows_with_effective_limits() {
        let f = fixture("pro");
        add_credential(&f.store, "key00001", Some("client-a"));
        limit_credential(&f.store, "key00001", Category::Write, Some(5));
        let batch = vec![request("key00001", Category::Write); 2];
        charge_at(&f.store, &batch, T0 - 120);
        charge_at(&f.store, &batch, T0 + 1);
        let rows = usage(&f.store, T0 + 2).expect("usage");
        let summary: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.bucket.as_str(),
                    r.key.as_str(),
                    r.count,
                    r.limit,
                    r.remaining,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("client", "client-a", 2, Some(1000), Some(998)),
                ("plan", "pro", 2, Some(50_000), Some(49_998)),
                ("write", "key00001", 2, Some(5), Some(3)),
            ]
        );
    }

    #[test]
    fn limit_changes_on_unknown_targets_are_refused() {
        let f = fixture("pro");
        let err = LimitChange::PlanHourly {
            plan: "gold".into(),
            per_hour: Some(1),
        }
        .apply(&f.store)
        .expect_err("unknown plan");
        assert!(
            matches!(err, LimitChangeError::NotFound("plan", _)),
            "{err:?}"
        );
        let err = LimitChange::Credential {
            credential_id: "nope0000".into(),
            category: Category::Read,
            per_minute: Some(1),
        }
        .apply(&f.store)
        .expect_err("unknown credential");
        assert!(
            matches!(err, LimitChangeError::NotFound("credential", _)),
            "{err:?}"
        );
        let err = LimitChange::PlanClient {
            plan: "pro".into(),
            per_minute: u64::MAX,
        }
        .apply(&f.store)
        .expect_err("too large");
        assert!(matches!(err, LimitChangeError::TooLarge(_)), "{err:?}");
    }

    #[test]
    fn meta_describes_every_bucket_and_the_tightest_and_reads_back() {
        let budget = Budget {
            buckets: vec![
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
            ],
        };
        let meta = budget.to_meta();
        assert_eq!(
            meta,
            json!({"buckets": [
                {"bucket": "write", "limit": 60, "remaining": 59, "reset": T0 + 60, "window_secs": 60},
                {"bucket": "plan", "limit": 500, "remaining": 1, "reset": T0 + 3600, "window_secs": 3600}
            ], "tightest": "plan"})
        );
        assert_eq!(Budget::from_meta(&meta), Some(budget));
        assert_eq!(Budget::from_meta(&json!({})), None);
    }
}
