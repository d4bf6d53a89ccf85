//! The audit log: one row per `tools/call` — who, which tool, outcome code, duration —
//! never a secret and never argument values.
//!
//! Refusals of callers who did not authenticate (`invalid_token`, `invalid_token_type`
//! without a principal, and `rate_limited` on the failure throttle's `auth` bucket) cost an
//! attacker nothing, so they are summarised: one row per source, outcome and
//! [`SUMMARY_WINDOW_MS`] window, whose `calls` says how many refusals it stands for and
//! `source` where they came from (`http:<address>`, `stdio:<pid>`; past [`SUMMARY_SOURCES`]
//! sources in a window, the rest share one row whose source is `*`). Its `tool` and
//! `request_id` are those of the first call (`*` when the calls named several tools).
//! A flood therefore adds a bounded number of rows; the metrics still count every call.
//!
//! Rows older than the retention (`[audit] retention_days`) are deleted by a background
//! thread ([`prune_in_background`]), a few hundred per short transaction. The rows' type
//! and SQL (writes, summaries, retention, the one read that `tollgate audit` and the
//! console share) are [`crate::store::audit`]'s.
//!
//! The outcome is `ok`, or the catalog `code` of the JSON-RPC error or of the tool failure,
//! with the failure's catalog entry beside it (the call's typed [`Verdict`], never read
//! back from a rendered result). Rows go into a buffer that one writer thread
//! empties every few milliseconds, in a single transaction (group commit), outside the call
//! path and outside any other transaction; a failed write is logged and never fails the call
//! it describes. Dropping the [`Auditor`] flushes every queued row, so a clean shutdown loses
//! nothing; a process killed outright can lose the rows of calls that finished in its last
//! moments — never business data or rate counters, which commit with the call.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;

use crate::catalog::ErrorKind;
use crate::clock::Clock;
use crate::guards::auth::Principal;
use crate::guards::outcome::Verdict;
use crate::store::audit::{self as store, AuditRow};
use crate::store::{Store, StoreError};

/// Longest request id or tool name kept (clients choose both; a row stays small).
const MAX_TEXT: usize = 200;

/// One finished call, as the guard chain hands it to [`Auditor::record`]. It is not an
/// [`AuditRow`]: it borrows from the call (its request id, principal and typed [`Verdict`],
/// with the error itself) only while `record` runs, and `record` makes the row from it —
/// stamped by the auditor's clock, client-chosen text cut to length, the verdict turned
/// into a code and a catalog entry — or, for a refusal of a caller who did not
/// authenticate, counts it on the summary row of its `source`.
pub struct AuditEntry<'a> {
    /// The JSON-RPC request id.
    pub request_id: &'a Value,
    /// Who called, when authentication succeeded.
    pub principal: Option<&'a Principal>,
    /// The tool name as sent.
    pub tool: &'a str,
    /// The backend the tool forwards to, when it is a backend tool.
    pub backend: Option<&'a str>,
    /// How it ended.
    pub outcome: Verdict<'a>,
    /// Time spent.
    pub duration: Duration,
    /// The transport's name (`stdio`, `http`).
    pub transport: &'static str,
    /// Who is asking, as the failure throttle sees it (`http:<address>`, `stdio:<pid>`);
    /// recorded only on summary rows.
    pub source: &'a str,
    /// The request's trace id, when it has one (never on a summary row).
    pub trace_id: Option<String>,
}

/// Length of a summary window, in milliseconds.
pub const SUMMARY_WINDOW_MS: i64 = 60_000;
/// Sources summarised each on their own row per window; any more share one row.
pub const SUMMARY_SOURCES: usize = 1024;
/// The `source` (and `tool`) of a summary row that stands for several.
pub const SEVERAL: &str = "*";

/// Rows deleted per pruning transaction (keeps each one short).
const PRUNE_CHUNK: i64 = 500;
/// Pause between two pruning transactions.
const PRUNE_PAUSE: Duration = Duration::from_millis(50);
/// How often the background pruner looks for expired rows.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

/// Rows buffered at most; past it callers wait for the writer (back-pressure), rows are
/// never dropped.
const QUEUE: usize = 65_536;
/// Rows inserted per transaction at most; a buffer this full wakes the writer at once.
const BATCH: usize = 1_024;
/// How often the writer looks at the buffer. Calls never wake it one by one: a wake-up
/// per call cost more than the insert itself.
const FLUSH_EVERY: Duration = Duration::from_millis(5);

/// Which summary row a refusal counts on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SummaryKey {
    /// Start of the window, unix milliseconds.
    window: i64,
    source: String,
    outcome: &'static str,
}

/// Refusals counted for one summary row since the writer last looked.
struct Pending {
    /// The first of them (its time, request id and tool go on a new row).
    first: AuditRow,
    calls: i64,
    /// They named more than one tool.
    several_tools: bool,
}

/// Rows waiting for the writer, and whether the auditor is shutting down.
#[derive(Default)]
struct Buffer {
    rows: Vec<AuditRow>,
    summaries: HashMap<SummaryKey, Pending>,
    /// The window `sources` belong to.
    window: i64,
    /// Sources summarised on their own row in this window (at most [`SUMMARY_SOURCES`]).
    sources: HashSet<String>,
    closing: bool,
    /// The writer thread has written everything and returned.
    stopped: bool,
}

impl Buffer {
    /// Counts a refusal on its source's summary row of the current window.
    fn summarise(&mut self, row: AuditRow, outcome: &'static str, source: &str) {
        let window = row.at_ms - row.at_ms.rem_euclid(SUMMARY_WINDOW_MS);
        if window != self.window {
            self.window = window;
            self.sources.clear();
        }
        let source = truncate(source);
        let source = if self.sources.contains(&source) || self.sources.len() < SUMMARY_SOURCES {
            self.sources.insert(source.clone());
            source
        } else {
            SEVERAL.to_owned()
        };
        let key = SummaryKey {
            window,
            source,
            outcome,
        };
        match self.summaries.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut pending) => {
                let pending = pending.get_mut();
                pending.calls += 1;
                pending.several_tools |= pending.first.tool != row.tool;
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(Pending {
                    first: row,
                    calls: 1,
                    several_tools: false,
                });
            }
        }
    }
}

/// The buffer shared by callers and the writer thread.
#[derive(Default)]
struct Shared {
    buffer: Mutex<Buffer>,
    /// Signals the writer (a full batch, or shutdown) and waiting callers (room again).
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Buffer> {
        self.buffer.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Every auditor of this process, for [`flush_all`].
static AUDITORS: Mutex<Vec<std::sync::Weak<Shared>>> = Mutex::new(Vec::new());

/// How long [`flush_all`] waits for a writer.
const FLUSH_WAIT: Duration = Duration::from_secs(10);

/// Writes out every row queued in this process and stops the writers, for a server that
/// is about to exit while a connection thread may still hold its [`Auditor`] (which then
/// is never dropped). Rows recorded afterwards are not written.
pub fn flush_all() {
    let auditors: Vec<Arc<Shared>> = AUDITORS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter_map(std::sync::Weak::upgrade)
        .collect();
    for shared in auditors {
        let deadline = std::time::Instant::now() + FLUSH_WAIT;
        let mut buffer = shared.lock();
        buffer.closing = true;
        shared.changed.notify_all();
        while !buffer.stopped {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                tracing::warn!("the audit writer did not finish in time; rows may be lost");
                break;
            }
            buffer = shared
                .changed
                .wait_timeout(buffer, left)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner().0);
        }
    }
}

/// Writes audit rows through one group-committing writer thread.
pub struct Auditor {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
    clock: Clock,
}

impl Auditor {
    /// An auditor over `store` that stamps its rows by `clock`; starts its writer thread.
    pub fn new(store: Store, clock: Clock) -> Auditor {
        let shared = Arc::new(Shared::default());
        let mut auditors = AUDITORS.lock().unwrap_or_else(PoisonError::into_inner);
        auditors.retain(|weak| weak.strong_count() > 0);
        auditors.push(Arc::downgrade(&shared));
        drop(auditors);
        let theirs = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("audit-writer".to_owned())
            .spawn(move || {
                write_loop(&store, &theirs);
                theirs.lock().stopped = true;
                theirs.changed.notify_all();
            })
            .map_err(|e| {
                tracing::error!(error = %e, "cannot start the audit writer");
                shared.lock().stopped = true;
            })
            .ok();
        Auditor {
            shared,
            writer,
            clock,
        }
    }

    /// Records one call. Failures are logged (without the row's content) and swallowed.
    pub fn record(&self, entry: &AuditEntry<'_>) {
        if self.writer.is_none() {
            tracing::warn!("the audit writer is not running; a tool call was not audited");
            return;
        }
        let row = AuditRow {
            id: 0,
            at_ms: self.clock.unix_millis(),
            request_id: truncate(&entry.request_id.to_string()),
            credential_id: entry.principal.map(|p| p.credential_id.clone()),
            client_id: entry.principal.and_then(|p| p.client_id.clone()),
            tool: truncate(entry.tool),
            outcome: entry.outcome.code().to_owned(),
            entry: failure_entry(entry.outcome),
            duration_us: i64::try_from(entry.duration.as_micros()).unwrap_or(i64::MAX),
            transport: entry.transport.to_owned(),
            calls: 1,
            source: None,
            backend: entry.backend.map(str::to_owned),
            trace_id: None,
        };
        let mut buffer = self.shared.lock();
        if let Some(outcome) = summarised(entry) {
            buffer.summarise(row, outcome, entry.source);
            return;
        }
        let row = AuditRow {
            trace_id: entry.trace_id.clone(),
            ..row
        };
        while buffer.rows.len() >= QUEUE {
            buffer = self
                .shared
                .changed
                .wait(buffer)
                .unwrap_or_else(PoisonError::into_inner);
        }
        buffer.rows.push(row);
        if buffer.rows.len() == BATCH {
            self.shared.changed.notify_all();
        }
    }
}

impl Drop for Auditor {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.changed.notify_all();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// Every [`FLUSH_EVERY`] (or at once for a full batch) inserts what has been buffered, in
/// transactions of up to [`BATCH`] rows; on shutdown, flushes everything and returns.
fn write_loop(store: &Store, shared: &Shared) {
    // The summary rows written in the current and the previous window, by key.
    let mut summary_rows: HashMap<SummaryKey, i64> = HashMap::new();
    loop {
        let (batch, summaries, closing) = {
            let mut buffer = shared.lock();
            if buffer.rows.len() < BATCH && !buffer.closing {
                buffer = shared
                    .changed
                    .wait_timeout(buffer, FLUSH_EVERY)
                    .map(|(guard, _)| guard)
                    .unwrap_or_else(|poisoned| poisoned.into_inner().0);
            }
            let take = buffer.rows.len().min(BATCH);
            let batch: Vec<AuditRow> = buffer.rows.drain(..take).collect();
            let summaries = std::mem::take(&mut buffer.summaries);
            (batch, summaries, buffer.closing && buffer.rows.is_empty())
        };
        if !batch.is_empty() || !summaries.is_empty() {
            shared.changed.notify_all();
            let rows = batch.len() + summaries.len();
            if let Err(e) = insert(store, &batch, summaries, &mut summary_rows) {
                tracing::warn!(cause = %e, rows, "cannot write audit rows");
            }
        }
        if closing {
            return;
        }
    }
}

/// Inserts `batch` and adds `summaries` to their rows (inserting those not yet written)
/// in one transaction; `summary_rows` learns the new rows once it commits.
fn insert(
    store: &Store,
    batch: &[AuditRow],
    summaries: HashMap<SummaryKey, Pending>,
    summary_rows: &mut HashMap<SummaryKey, i64>,
) -> Result<(), StoreError> {
    let created = store.in_transaction(|tx| {
        for row in batch {
            store::insert_row(tx, row)?;
        }
        let mut created = Vec::new();
        for (key, pending) in summaries {
            let added = match summary_rows.get(&key) {
                Some(&id) => {
                    let tool = &pending.first.tool;
                    store::add_to_summary(tx, id, pending.calls, pending.several_tools, tool)?
                }
                None => false,
            };
            // A row not written yet (or pruned since) gets written now.
            if !added {
                let mut first = pending.first;
                if pending.several_tools {
                    SEVERAL.clone_into(&mut first.tool);
                }
                first.calls = pending.calls;
                first.source = Some(key.source.clone());
                let id = store::insert_row(tx, &first)?;
                created.push((key, id));
            }
        }
        Ok(created)
    })?;
    let newest = created.iter().map(|(key, _)| key.window).max();
    summary_rows.extend(created);
    if let Some(newest) = newest {
        summary_rows.retain(|key, _| key.window >= newest - SUMMARY_WINDOW_MS);
    }
    Ok(())
}

/// The catalog entry of a call that did not succeed: its tool failure's, or its refusal's.
fn failure_entry(verdict: Verdict<'_>) -> Option<ErrorKind> {
    match verdict {
        Verdict::Ok => None,
        Verdict::Failed(entry) => entry,
        Verdict::Rejected(error) => Some(error.kind()),
    }
}

/// The outcome code under which `entry` is summarised rather than written on its own
/// row: a refusal of a caller who did not authenticate.
fn summarised(entry: &AuditEntry<'_>) -> Option<&'static str> {
    let Verdict::Rejected(err) = entry.outcome else {
        return None;
    };
    if entry.principal.is_some() {
        return None;
    }
    let throttled = || err.fields().get("bucket").and_then(Value::as_str) == Some("auth");
    match err.kind() {
        ErrorKind::InvalidToken | ErrorKind::InvalidTokenType => Some(err.kind().spec().code),
        ErrorKind::RateLimited if throttled() => Some(err.kind().spec().code),
        _ => None,
    }
}

/// Starts a thread that deletes audit rows older than `retention_days` before the time of
/// `clock` (0: keep them forever, and start nothing) now and then every hour.
pub fn prune_in_background(store: &Store, retention_days: u32, clock: Clock) {
    if retention_days == 0 {
        return;
    }
    let store = store.clone();
    let spawned = std::thread::Builder::new()
        .name("audit-prune".to_owned())
        .spawn(move || {
            loop {
                match prune_expired(&store, retention_days, clock.unix_millis()) {
                    Ok(0) => {}
                    Ok(rows) => tracing::info!(rows, retention_days, "pruned old audit rows"),
                    Err(e) => tracing::warn!(cause = %e, "pruning old audit rows failed"),
                }
                std::thread::sleep(PRUNE_EVERY);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(cause = %e, "cannot start the audit pruner; old rows are kept");
    }
}

/// Deletes the rows older than `retention_days` before `now_ms` (unix milliseconds: the
/// caller's clock), `PRUNE_CHUNK` rows per transaction, oldest first. Rows are appended
/// in time order, so it walks up the ids and stops at the first chunk with nothing to
/// delete. The approvals settled as long ago go too (a held call's arguments are kept no
/// longer than the audit rows). Returns how many audit rows went.
pub fn prune_expired(store: &Store, retention_days: u32, now_ms: i64) -> Result<usize, StoreError> {
    let cutoff = now_ms.saturating_sub(i64::from(retention_days).saturating_mul(DAY_MS));
    match store.prune_approvals(cutoff) {
        Ok(0) => {}
        Ok(rows) => tracing::info!(rows, retention_days, "pruned old approvals"),
        Err(e) => tracing::warn!(cause = %e, "pruning old approvals failed"),
    }
    let mut after = 0;
    let mut total = 0;
    loop {
        let (deleted, last, seen) = store.prune_audit_chunk(after, cutoff, PRUNE_CHUNK)?;
        total += deleted;
        match last {
            Some(last) if deleted > 0 && seen == PRUNE_CHUNK as usize => after = last,
            _ => return Ok(total),
        }
        std::thread::sleep(PRUNE_PAUSE);
    }
}

fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_TEXT) {
        Some((cut, _)) => text[..cut].to_owned(),
        None => text.to_owned(),
    }
}

/// Writes, at once and in its own transaction, the row of a change an operator made in
/// the console: `action` as its tool (`console:revoke_key`), the operator's credential,
/// what was changed as its request id (a JSON string), and where the operator was
/// (`source`). The row is committed when this returns `Ok`.
pub fn record_operator_change(
    db: &Store,
    clock: &Clock,
    operator: &Principal,
    action: &str,
    target: &str,
    source: &str,
) -> Result<(), StoreError> {
    let row = AuditRow {
        id: 0,
        at_ms: clock.unix_millis(),
        request_id: truncate(&Value::from(target).to_string()),
        credential_id: Some(operator.credential_id.clone()),
        client_id: operator.client_id.clone(),
        tool: truncate(action),
        outcome: "ok".to_owned(),
        entry: None,
        duration_us: 0,
        transport: "http".to_owned(),
        calls: 1,
        source: Some(source.to_owned()),
        backend: None,
        trace_id: None,
    };
    db.in_transaction(|tx| store::insert_row(tx, &row))
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ErrorKind;
    use crate::catalog::McpError;
    use crate::store::StoreOptions;
    use crate::store::audit::AuditFilter;
    use serde_json::json;

    #[test]
    fn records_and_filters_without_arguments() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store_in(&dir);
        let auditor = Auditor::new(store.clone(), Clock::System);
        let principal = principal();
        let limited = McpError::new(ErrorKind::RateLimited);
        for (id, outcome) in [(1, Verdict::Ok), (2, Verdict::Rejected(&limited))] {
            auditor.record(&AuditEntry {
                request_id: &json!(id),
                principal: Some(&principal),
                tool: "test_simple_text",
                backend: None,
                outcome,
                duration: Duration::from_micros(1500),
                transport: "stdio",
                source: "stdio:1",
                trace_id: None,
            });
        }
        // Dropping the auditor flushes its queue.
        drop(auditor);
        let all = store
            .audit_rows(&AuditFilter {
                limit: 10,
                ..AuditFilter::default()
            })
            .expect("rows");
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].outcome, "rate_limited");
        assert_eq!(all[0].request_id, "2");
        assert_eq!(all[1].duration_us, 1500);
        let filter = AuditFilter {
            outcome: Some("ok".into()),
            limit: 10,
            ..AuditFilter::default()
        };
        let ok = store.audit_rows(&filter).expect("rows");
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].credential_id.as_deref(), Some("abc123abc123"));
    }

    #[test]
    fn a_failure_is_recorded_with_its_catalog_entry_beside_its_code() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store_in(&dir);
        let auditor = Auditor::new(store.clone(), Clock::System);
        let principal = principal();
        let ours = McpError::rate_limited("cred", 10, 0, 60);
        let scope = McpError::new(ErrorKind::InsufficientScope);
        // The backend's own 429 and our limit share the code `rate_limited`.
        for (id, outcome) in [
            (1, Verdict::Failed(Some(ErrorKind::BackendRateLimited))),
            (2, Verdict::Rejected(&ours)),
            (3, Verdict::Rejected(&scope)),
            (4, Verdict::Failed(None)),
            (5, Verdict::Ok),
        ] {
            auditor.record(&AuditEntry {
                request_id: &json!(id),
                principal: Some(&principal),
                tool: "crm_get_order",
                backend: Some("crm"),
                outcome,
                duration: Duration::from_micros(10),
                transport: "http",
                source: "http:10.0.0.1",
                trace_id: None,
            });
        }
        drop(auditor);
        let mut rows: Vec<(String, String, Option<ErrorKind>)> = all(&store)
            .into_iter()
            .map(|r| (r.request_id, r.outcome, r.entry))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            rows,
            [
                (
                    "1".into(),
                    "rate_limited".into(),
                    Some(ErrorKind::BackendRateLimited)
                ),
                (
                    "2".into(),
                    "rate_limited".into(),
                    Some(ErrorKind::RateLimited)
                ),
                (
                    "3".into(),
                    "insufficient_scope".into(),
                    Some(ErrorKind::InsufficientScope)
                ),
                ("4".into(), "tool_error".into(), None),
                ("5".into(), "ok".into(), None),
            ]
        );
    }

    /// A live credential with no scopes, as the chain hands it to the auditor.
    fn principal() -> Principal {
        Principal {
            credential_id: "abc123abc123".into(),
            client_id: None,
            scopes: vec![],
            mode: crate::guards::auth::Mode::Live,
            guard_channel: None,
            installation: crate::guards::auth::Mode::Live,
            roles: Vec::new(),
        }
    }

    fn store_in(dir: &tempfile::TempDir) -> Store {
        let opts = StoreOptions {
            create: true,
            ..StoreOptions::default()
        };
        Store::open(&dir.path().join("a.db"), &opts).expect("open")
    }

    fn refusal<'a>(
        request_id: &'a Value,
        tool: &'a str,
        outcome: &'a Result<Value, McpError>,
        source: &'a str,
    ) -> AuditEntry<'a> {
        let outcome = Verdict::of_read(outcome);
        AuditEntry {
            request_id,
            principal: None,
            tool,
            backend: None,
            outcome,
            duration: Duration::from_micros(10),
            transport: "http",
            source,
            trace_id: None,
        }
    }

    fn all(store: &Store) -> Vec<AuditRow> {
        let filter = AuditFilter {
            limit: 10_000,
            ..AuditFilter::default()
        };
        store.audit_rows(&filter).expect("rows")
    }

    #[test]
    fn unauthenticated_refusals_are_summarised_per_source_and_outcome() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store_in(&dir);
        // Mid-window, so every refusal of the loop falls in one summary window.
        let clock = crate::clock::ManualClock::at_unix_secs(1_800_000_030);
        let auditor = Auditor::new(store.clone(), clock.clock());
        let missing = Err(McpError::new(ErrorKind::InvalidToken));
        let throttled = Err(McpError::rate_limited("auth", 10, 0, 60));
        let id = json!(1);
        for i in 0..500 {
            auditor.record(&refusal(&id, "search_clients", &missing, "http:10.0.0.1"));
            let tool = if i == 7 {
                "other_tool"
            } else {
                "search_clients"
            };
            auditor.record(&refusal(&id, tool, &throttled, "http:10.0.0.1"));
            auditor.record(&refusal(&id, "search_clients", &missing, "http:10.0.0.2"));
        }
        // A refusal of an authenticated caller keeps its own row.
        let principal = principal();
        let scope = Err(McpError::new(ErrorKind::InsufficientScope));
        let mut entry = refusal(&id, "search_clients", &scope, "http:10.0.0.1");
        entry.principal = Some(&principal);
        auditor.record(&entry);
        auditor.record(&entry);
        // The last millisecond of the window still counts on its rows; the next window
        // starts rows of its own.
        clock.set_unix_millis(1_800_000_059_999);
        auditor.record(&refusal(&id, "search_clients", &missing, "http:10.0.0.2"));
        clock.set_unix_millis(1_800_000_060_000);
        auditor.record(&refusal(&id, "search_clients", &missing, "http:10.0.0.2"));
        drop(auditor);
        let rows = all(&store);
        let total: i64 = rows.iter().map(|r| r.calls).sum();
        assert_eq!(total, 1_504, "{rows:?}");
        // One row per source and outcome in each window.
        let (summaries, next): (Vec<&AuditRow>, Vec<&AuditRow>) = rows
            .iter()
            .filter(|r| r.source.is_some())
            .partition(|r| r.at_ms < 1_800_000_060_000);
        assert_eq!(summaries.len(), 3, "{summaries:?}");
        assert_eq!(next.len(), 1, "{next:?}");
        assert_eq!(next[0].calls, 1);
        assert_eq!(rows.len() - summaries.len() - next.len(), 2);
        for (source, outcome, tool) in [
            ("http:10.0.0.1", "invalid_token", "search_clients"),
            ("http:10.0.0.1", "rate_limited", "*"),
            ("http:10.0.0.2", "invalid_token", "search_clients"),
        ] {
            let mine: Vec<_> = summaries
                .iter()
                .filter(|r| r.source.as_deref() == Some(source) && r.outcome == outcome)
                .collect();
            let calls = if source == "http:10.0.0.2" { 501 } else { 500 };
            assert_eq!(mine.len(), 1, "{mine:?}");
            assert_eq!(mine[0].calls, calls, "{mine:?}");
            assert_eq!(mine[0].tool, tool);
            assert_eq!(mine[0].credential_id, None);
        }
    }

    #[test]
    fn sources_past_the_cap_share_one_row() {
        let mut buffer = Buffer::default();
        let row = |at| AuditRow {
            id: 0,
            at_ms: at,
            request_id: "1".into(),
            credential_id: None,
            client_id: None,
            tool: "t".into(),
            outcome: "invalid_token".into(),
            entry: Some(ErrorKind::InvalidToken),
            duration_us: 0,
            transport: "http".into(),
            calls: 1,
            source: None,
            backend: None,
            trace_id: None,
        };
        for i in 0..SUMMARY_SOURCES + 50 {
            buffer.summarise(row(60_000), "invalid_token", &format!("http:10.0.{i}"));
        }
        assert_eq!(buffer.summaries.len(), SUMMARY_SOURCES + 1);
        let several = buffer
            .summaries
            .iter()
            .find(|(key, _)| key.source == SEVERAL)
            .map(|(_, p)| p.calls);
        assert_eq!(several, Some(50));
        // A new window starts a new list of sources.
        buffer.summarise(row(120_000), "invalid_token", "http:10.0.9999");
        assert!(
            buffer
                .summaries
                .keys()
                .any(|k| k.window == 120_000 && k.source != SEVERAL)
        );
    }

    #[test]
    fn retention_prunes_older_rows_and_keeps_newer_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store_in(&dir);
        let now: i64 = 1_800_000_000_000;
        store
            .sql_write(|tx| {
                let mut stmt = tx.prepare(
                    "INSERT INTO audit_log (at, request_id, tool, outcome, duration_us, transport) \
                     VALUES (?1, '1', 'search_clients', 'ok', 1, 'stdio')",
                )?;
                // 1 200 rows past 90 days (more than two pruning chunks), then 30 within.
                for i in 0..1_200 {
                    stmt.execute([now - 100 * DAY_MS + i])?;
                }
                for i in 0..30 {
                    stmt.execute([now - 89 * DAY_MS + i])?;
                }
                Ok(())
            })
            .expect("seed");
        assert_eq!(prune_expired(&store, 90, now).expect("prune"), 1_200);
        let left = all(&store);
        assert_eq!(left.len(), 30);
        assert!(left.iter().all(|r| r.at_ms >= now - 89 * DAY_MS));
        assert_eq!(prune_expired(&store, 90, now).expect("again"), 0);
        // A day later, by the same clock, the rest is past 90 days too.
        assert_eq!(
            prune_expired(&store, 90, now + 2 * DAY_MS).expect("later"),
            30
        );
    }
}
