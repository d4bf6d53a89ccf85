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
//! written back, by [`crate::store::counters::increment`]) and *then* compares each count
//! with the limit read in the same `BEGIN IMMEDIATE` transaction, so a raised limit applies
//! on the next call and several processes on one file can never admit more than the limit. The
//! increment stays even when the call is refused: refused calls consume quota, by product
//! rule. Over any limit the call is `-32006 rate_limited` naming the exceeded bucket that
//! resets *last* (the caller cannot succeed before it does), with `limit`, `reset` (unix
//! seconds when that window ends) and `retry_after` (seconds until then, at least 1).
//!
//! **Group commit**: concurrent callers of one [`Limiter`] queue their calls; whichever
//! caller finds no batch running becomes the leader, drains up to [`BATCH_MAX`] queued
//! calls and runs them in one transaction, in queue order (the Nth charge of a counter in
//! a batch sees the count it would have seen alone), then hands every caller its own
//! outcome. A leader that finds itself alone after a batch of one yields the processor
//! once first, and one that follows a batch of several waits briefly for as many (see
//! `lead_one_batch`): both let callers that are runnable but not yet running join the
//! transaction on a machine with fewer cores than calls in progress.
//! What one transaction does is the [`Batch`] the limiter is built for: the
//! counters alone ([`PlainCharge`], through [`charge_in`]), or what the guard chain
//! composes around them (the re-check of a cached credential before, the plan read after).
//! The limiter knows nothing of credentials or plans beyond the limits it reads; what one
//! transaction does with the counters is in `charge` ([`charge_in`]).
//!
//! Windows older than [`RETENTION_SECS`] are deleted about once a minute, in small
//! separate transactions on one background thread, paced so that pruning (even a long
//! backlog) never holds up calls.
//!
//! The remaining budget travels as `_meta["dev.tollgate/ratelimit"]` ([`Budget::to_meta`]);
//! the HTTP transport renders it as rate-limit headers too.
//! The operator's views and changes (`tollgate limits`, `tollgate usage`) are in [`limits`].

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::catalog::McpError;
use crate::clock::Clock;
use crate::store::{Store, StoreError, Tx, store_failure};
use crate::tools::Category;

mod charge;
pub mod limits;

pub use charge::{charge_in, per_minute_of};

pub use limits::{
    CategoryLimits, ClientOverride, CredentialOverrides, LimitChange, LimitChangeError,
    LimitsReport, UsageRow, usage,
};

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
    /// The budget of these buckets, in the order they were charged.
    pub fn new(buckets: Vec<BucketState>) -> Budget {
        Budget { buckets }
    }

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
        // Built at its final size (every successful call carries it).
        let buckets: Vec<Value> = self
            .buckets
            .iter()
            .map(|b| {
                let mut bucket = Map::with_capacity(5);
                bucket.insert("bucket".into(), b.bucket.into());
                bucket.insert("limit".into(), b.limit.into());
                bucket.insert("remaining".into(), b.remaining().into());
                bucket.insert("reset".into(), b.reset.into());
                bucket.insert("window_secs".into(), b.window_secs.into());
                Value::Object(bucket)
            })
            .collect();
        let mut meta = Map::with_capacity(2);
        meta.insert("buckets".into(), Value::Array(buckets));
        meta.insert("tightest".into(), self.tightest().map(|b| b.bucket).into());
        Value::Object(meta)
    }
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

/// The work of one charging transaction over the calls it holds, in queue order: the
/// counters alone ([`PlainCharge`]) or what a caller composes around [`charge_in`] (the
/// guard chain re-checks cached credentials before and reads the plan after, so they cost
/// no transaction of their own).
pub trait Batch: Send + Sized {
    /// Runs inside one write transaction at `now` (read once the write lock is held).
    fn run(tx: &Tx<'_>, calls: &mut [Self], now: i64) -> Result<(), StoreError>;

    /// The transaction failed (or panicked): this call ends with `err`.
    fn fail(&mut self, err: McpError);
}

/// A call charged on its own: the request and, once its transaction ran, its outcome.
#[derive(Debug, Clone)]
pub struct PlainCharge {
    /// What to charge.
    pub request: ChargeRequest,
    /// The outcome, once charged.
    pub outcome: Option<ChargeOutcome>,
}

impl Batch for PlainCharge {
    fn run(tx: &Tx<'_>, calls: &mut [Self], now: i64) -> Result<(), StoreError> {
        let requests: Vec<Option<&ChargeRequest>> =
            calls.iter().map(|c| Some(&c.request)).collect();
        let outcomes = charge_in(tx, &requests, now)?;
        for (call, outcome) in calls.iter_mut().zip(outcomes) {
            call.outcome = outcome;
        }
        Ok(())
    }

    fn fail(&mut self, err: McpError) {
        self.outcome = Some(Err(err));
    }
}

/// How well group commit batches: calls charged, and the transactions that charged them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChargeCounts {
    /// Calls charged (refused ones included).
    pub charges: u64,
    /// Charging transactions run (attempted) for them.
    pub transactions: u64,
}

/// Where limiters count their calls and charging transactions: the process's
/// ([`ChargeCounters::process`], which `GET /metrics` renders) or counters of their own.
#[derive(Debug, Default)]
pub struct ChargeCounters {
    charges: AtomicU64,
    transactions: AtomicU64,
}

impl ChargeCounters {
    /// The counters of this process: every limiter built by [`Limiter::with_batch`] (or
    /// [`Limiter::new`]) counts here.
    pub fn process() -> &'static ChargeCounters {
        static PROCESS: ChargeCounters = ChargeCounters {
            charges: AtomicU64::new(0),
            transactions: AtomicU64::new(0),
        };
        &PROCESS
    }

    /// Calls charged and charging transactions run so far.
    pub fn counts(&self) -> ChargeCounts {
        ChargeCounts {
            charges: self.charges.load(Ordering::Relaxed),
            transactions: self.transactions.load(Ordering::Relaxed),
        }
    }

    /// Counts one charging transaction and the calls it charged.
    fn observe_batch(&self, calls: usize) {
        self.transactions.fetch_add(1, Ordering::Relaxed);
        self.charges
            .fetch_add(u64::try_from(calls).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

/// Charges calls against their buckets, many callers' calls in one transaction; `B` is
/// what one transaction does with them.
pub struct Limiter<B: Batch = PlainCharge> {
    store: Store,
    queue: Mutex<Queue<B>>,
    /// Wakes a gathering leader once the queue holds a full batch.
    gathered: Condvar,
    last_prune: AtomicI64,
    clock: Clock,
    /// Where its transactions and charges are counted.
    counters: &'static ChargeCounters,
}

/// Charges waiting for a transaction, and whether some caller is leading one.
struct Queue<B> {
    waiting: VecDeque<Queued<B>>,
    leader_active: bool,
    /// How many callers charging a single call the last batch held: how many charges a
    /// leader waits for (at most [`GATHER_WAIT`]) before it starts the next transaction.
    /// Calls charged in a group arrive together, so nobody waits for them.
    last_lone: usize,
    /// A leader is waiting for the queue to reach `last_lone`.
    gathering: bool,
}

impl<B> Default for Queue<B> {
    fn default() -> Self {
        Queue {
            waiting: VecDeque::new(),
            leader_active: false,
            last_lone: 0,
            gathering: false,
        }
    }
}

/// One call in the queue, with where its caller waits.
struct Queued<B> {
    item: B,
    slot: Arc<Slot<B>>,
    /// Its caller charges this call alone (not a group of calls).
    lone: bool,
}

/// Where one queued caller waits: for its outcome, or to be handed the leadership.
struct Slot<B> {
    state: Mutex<SlotState<B>>,
    changed: Condvar,
}

impl<B> Default for Slot<B> {
    fn default() -> Self {
        Slot {
            state: Mutex::new(SlotState::Waiting),
            changed: Condvar::new(),
        }
    }
}

enum SlotState<B> {
    Waiting,
    /// The previous leader finished and this caller is at the head of the queue.
    Lead,
    Done(B),
}

impl<B> Slot<B> {
    fn set(&self, state: SlotState<B>) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
        self.changed.notify_one();
    }

    /// Blocks until the slot is no longer `Waiting`; returns the outcome, or `None` when
    /// this caller must lead the next batch.
    fn wait(&self) -> Option<B> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match std::mem::replace(&mut *state, SlotState::Waiting) {
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

impl Limiter<PlainCharge> {
    /// A limiter charging plain calls over `store`, whose windows follow `clock`.
    pub fn new(store: Store, clock: Clock) -> Limiter<PlainCharge> {
        Limiter::with_batch(store, clock)
    }

    /// Charges one call to every bucket that applies.
    pub fn charge(&self, request: ChargeRequest) -> ChargeOutcome {
        let charged = self.charge_many(vec![PlainCharge {
            request,
            outcome: None,
        }]);
        charged
            .into_iter()
            .next()
            .and_then(|call| call.outcome)
            .unwrap_or_else(|| Err(McpError::internal()))
    }
}

impl<B: Batch> Limiter<B> {
    /// A limiter whose transactions run `B`, counted in the process's
    /// [`ChargeCounters::process`].
    pub fn with_batch(store: Store, clock: Clock) -> Limiter<B> {
        Limiter::counted_in(store, ChargeCounters::process(), clock)
    }

    /// A limiter counted in `counters` (tests give each limiter counters of its own).
    pub fn counted_in(store: Store, counters: &'static ChargeCounters, clock: Clock) -> Limiter<B> {
        Limiter {
            store,
            queue: Mutex::new(Queue::default()),
            gathered: Condvar::new(),
            last_prune: AtomicI64::new(0),
            clock,
            counters,
        }
    }

    /// How many calls and charging transactions have been counted so far (by every limiter
    /// counted in the same counters).
    pub fn stats(&self) -> ChargeCounts {
        self.counters.counts()
    }

    /// Charges several calls at once (the `tools/call`s of one stdio read): they are queued
    /// together, so they share transactions and their caller waits once, not once a call.
    /// The calls come back, run, in the order of `calls`.
    pub fn charge_many(&self, calls: Vec<B>) -> Vec<B> {
        self.charge_grouped(calls)
    }

    /// Queues `items` (in order, one behind the other) and waits for their outcomes. A
    /// caller that finds no batch running, or is handed the leadership, leads: its first
    /// unfinished item is then at the head of the queue, so the batch it drains always
    /// contains it. (Leadership only ever goes to the head of the queue, and a caller's
    /// items are finished in queue order, so waiting for them in that order never misses
    /// a hand-over.)
    fn charge_grouped(&self, items: Vec<B>) -> Vec<B> {
        if items.is_empty() {
            // Taking the leadership with nothing to charge would never hand it back.
            return items;
        }
        let lone = items.len() == 1;
        let slots: Vec<Arc<Slot<B>>> = items.iter().map(|_| Arc::default()).collect();
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
        let (mut batch, slots): (Vec<B>, Vec<Arc<Slot<B>>>) = {
            let mut queue = self.lock_queue();
            // A leader alone in the queue after a batch of one gives up the processor
            // once before it drains. On a server with fewer cores than calls in progress
            // (a forwarding gate whose threads mostly wait for their upstream, say), the
            // callers about to charge are runnable but not running while the leader is,
            // so batches of one would beget batches of one; the yield lets them reach the
            // queue, and the gathering below then keeps the batches as large as the load.
            // With nothing else runnable on its core it is one cheap system call.
            if queue.last_lone <= 1 && queue.waiting.len() == 1 {
                drop(queue);
                std::thread::yield_now();
                queue = self.lock_queue();
            }
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
                item.fail(McpError::internal());
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

    fn lock_queue(&self) -> MutexGuard<'_, Queue<B>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `batch` in one transaction, in order, setting every call's outcome.
    fn run_batch(&self, batch: &mut [B]) {
        self.counters.observe_batch(batch.len());
        let mut now = 0;
        let result = self.store.in_transaction(|tx| {
            // The clock is read once the write lock is held, so windows follow commit order.
            now = self.clock.unix_secs();
            B::run(tx, batch, now)
        });
        self.maybe_prune(now);
        if let Err(err) = result {
            let failure = store_failure(err, false);
            for item in batch {
                item.fail(failure.clone());
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

/// Deletes counter windows that started more than [`RETENTION_SECS`] before `now`, a
/// few hundred rows per short transaction. Returns how many rows went.
pub fn prune_expired(store: &Store, now: i64) -> Result<usize, StoreError> {
    let cutoff = now - RETENTION_SECS;
    let mut total = 0;
    loop {
        let deleted = store.prune_counters(cutoff, PRUNE_CHUNK)?;
        total += deleted;
        if deleted < usize::try_from(PRUNE_CHUNK).unwrap_or(usize::MAX) {
            return Ok(total);
        }
        // A long backlog (a server that was down for a while) is worked off between
        // calls rather than taking the write lock back to back.
        std::thread::sleep(PRUNE_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ErrorKind;
    use crate::store::{Company, StoreOptions};
    use serde_json::json;

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
        if let Some(client) = client
            && !store
                .clients()
                .expect("clients")
                .iter()
                .any(|c| c.client_id == client)
        {
            let new = crate::store::credentials::NewClient {
                client_id: client,
                name: "c",
                secret_hash: "$argon2id$x",
                allowed_scopes: &[],
                created_at: 0,
            };
            store.insert_client(&new).expect("client");
        }
        store
            .in_transaction(|tx| {
                let new = crate::store::credentials::NewCredential {
                    public_id: id,
                    kind: "api_key",
                    mode: "live",
                    name: "k",
                    secret_hash: "$argon2id$x",
                    scopes: &[],
                    client_id: client,
                    expires_at: None,
                    created_at: 0,
                    guard_channel: None,
                };
                crate::store::credentials::insert_credential(tx, &new)
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
            .in_transaction(|tx| {
                let requests: Vec<Option<&ChargeRequest>> = batch.iter().map(Some).collect();
                let outcomes = charge_in(tx, &requests, now)?;
                Ok(outcomes
                    .into_iter()
                    .map(|o| o.unwrap_or_else(|| Err(McpError::internal())))
                    .collect())
            })
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
            .sql_read(|conn| {
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

    /// A batch that refuses every call whose credential id ends in `x` before charging
    /// it, and counts what it saw before and after the counters.
    struct RefuseX {
        request: ChargeRequest,
        before: usize,
        after: usize,
        outcome: Option<ChargeOutcome>,
    }

    impl RefuseX {
        fn new(request: ChargeRequest) -> RefuseX {
            RefuseX {
                request,
                before: 0,
                after: 0,
                outcome: None,
            }
        }
    }

    impl Batch for RefuseX {
        fn run(tx: &Tx<'_>, calls: &mut [Self], now: i64) -> Result<(), StoreError> {
            for call in calls.iter_mut() {
                call.before += 1;
            }
            let requests: Vec<Option<&ChargeRequest>> = calls
                .iter()
                .map(|c| (!c.request.credential_id.ends_with('x')).then_some(&c.request))
                .collect();
            let outcomes = charge_in(tx, &requests, now)?;
            for (call, outcome) in calls.iter_mut().zip(outcomes) {
                if matches!(outcome, Some(Ok(_))) {
                    call.after += 1;
                }
                call.outcome = outcome;
            }
            Ok(())
        }

        fn fail(&mut self, err: McpError) {
            self.outcome = Some(Err(err));
        }
    }

    fn charge_one(limiter: &Limiter<RefuseX>, request: ChargeRequest) -> RefuseX {
        limiter
            .charge_many(vec![RefuseX::new(request)])
            .pop()
            .expect("one call in, one out")
    }

    #[test]
    fn checks_that_refuse_leave_the_counters_alone() {
        let f = fixture("pro");
        add_credential(&f.store, "key0000x", None);
        add_credential(&f.store, "key00001", None);
        let limiter: Limiter<RefuseX> = Limiter::with_batch(f.store.clone(), Clock::System);
        let seen = charge_one(&limiter, request("key0000x", Category::Read));
        assert!(seen.outcome.is_none());
        assert_eq!((seen.before, seen.after), (1, 0));
        assert!(counters(&f.store).is_empty());
        let seen = charge_one(&limiter, request("key00001", Category::Read));
        assert!(seen.outcome.expect("charged").is_ok());
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
    fn concurrent_callers_get_exactly_the_limit() {
        let f = fixture("enterprise");
        {
            let id = "key00001";
            add_credential(&f.store, id, None);
            limit_credential(&f.store, id, Category::Read, Some(100));
            let limiter: Limiter =
                Limiter::counted_in(f.store.clone(), Box::leak(Box::default()), fixed_clock());
            let admitted = std::sync::atomic::AtomicUsize::new(0);
            std::thread::scope(|s| {
                for _ in 0..8 {
                    s.spawn(|| {
                        for _ in 0..50 {
                            if limiter.charge(request(id, Category::Read)).is_ok() {
                                admitted.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                }
            });
            assert_eq!(admitted.load(Ordering::Relaxed), 100);
            let stats = limiter.stats();
            assert_eq!(stats.charges, 400);
            let count: i64 = f
                .store
                .sql_read(|c| {
                    c.query_row(
                        "SELECT count FROM rate_counters WHERE key = ?1",
                        [id],
                        |r| r.get(0),
                    )
                })
                .expect("count");
            assert_eq!(count, 400, "refused calls are charged too");
        }
    }

    #[test]
    fn charging_nothing_leaves_the_limiter_free() {
        let f = fixture("pro");
        add_credential(&f.store, "key00001", None);
        let limiter = Limiter::new(f.store.clone(), Clock::System);
        assert!(limiter.charge_many(Vec::new()).is_empty());
        let outcome = limiter.charge(request("key00001", Category::Read));
        assert!(outcome.is_ok(), "{outcome:?}");
    }

    #[test]
    fn a_group_that_fits_is_charged_in_one_transaction() {
        let f = fixture("pro");
        add_credential(&f.store, "key00001", None);
        let limiter: Limiter<RefuseX> =
            Limiter::counted_in(f.store.clone(), Box::leak(Box::default()), Clock::System);
        let group: Vec<RefuseX> = (0..BATCH_MAX)
            .map(|_| RefuseX::new(request("key00001", Category::Read)))
            .collect();
        let charged = limiter.charge_many(group);
        assert!(
            charged
                .iter()
                .all(|c| c.outcome.as_ref().is_some_and(Result::is_ok))
        );
        let stats = limiter.stats();
        assert_eq!((stats.charges, stats.transactions), (BATCH_MAX as u64, 1));
    }

    #[test]
    fn groups_charged_at_once_keep_their_order_and_the_exact_limit() {
        let f = fixture("enterprise");
        add_credential(&f.store, "key00001", None);
        limit_credential(&f.store, "key00001", Category::Read, Some(250));
        let limiter: Limiter<RefuseX> =
            Limiter::counted_in(f.store.clone(), Box::leak(Box::default()), fixed_clock());
        let checks = || RefuseX::new(request("key00001", Category::Read));
        // Four callers with groups larger than one transaction takes (BATCH_MAX), plus
        // callers charging one call at a time, all at once.
        let group = || (0..BATCH_MAX + 36).map(|_| checks()).collect::<Vec<_>>();
        let (groups, singles) = std::thread::scope(|s| {
            let groups: Vec<_> = (0..4)
                .map(|_| s.spawn(|| limiter.charge_many(group())))
                .collect();
            let singles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..25)
                            .map(|_| charge_one(&limiter, request("key00001", Category::Read)))
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
        let admitted = |charged: &[RefuseX]| -> Vec<bool> {
            charged
                .iter()
                .map(|seen| {
                    assert_eq!(seen.before, 1, "checked once before the charge");
                    let ok = seen.outcome.as_ref().expect("charged").is_ok();
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
                        let outcome = limiter.charge(request("key00001", Category::Destructive));
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
            .sql_read(|c| {
                c.query_row("SELECT min(window_start) FROM rate_counters", [], |r| {
                    r.get(0)
                })
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
    fn meta_describes_every_bucket_and_the_tightest() {
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
    }
}
