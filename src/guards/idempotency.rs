//! Idempotency keys (the replay and claim steps of the chain, `guards::steps`): a retried
//! state-changing call never acts twice.
//!
//! **Where the key comes from** ([`extract_key`]): the `idempotency_key` argument (declared in
//! the input schema of every state-changing tool), `_meta["dev.tollgate/idempotencyKey"]`,
//! or the HTTP `Idempotency-Key` header, bare or as a quoted structured-field string
//! (draft-ietf-httpapi-idempotency-key-header). Several sources may carry it if they agree;
//! two different keys on one call are `idempotency_key_invalid`, as is a key that is empty,
//! longer than 255 characters or not printable ASCII.
//!
//! **What a key is bound to**: the credential that sent it (keys of different credentials
//! never meet) and a SHA-256 [`fingerprint`] of the tool name and its canonical arguments
//! (object keys sorted, the key itself left out). Records live in `idempotency_keys`, whose
//! SQL is [`crate::store::idempotency`]'s.
//!
//! **The life of a key** ([`Ledger::claim`], one `BEGIN IMMEDIATE` transaction, so two
//! processes on one file see each other):
//! - no record (or an expired one) → an `in_flight` record leased to this call for
//!   [`LEASE_SECS`] → [`Claim::Fresh`];
//! - a record with another tool or fingerprint → `idempotency_key_reused`;
//! - a `completed` record → [`Claim::Replay`] of the stored result (success or `isError`);
//! - an `in_flight` record within its lease → `idempotency_key_in_use` (retryable).
//!
//! **Exactly once**: the tool's writes and the `completed` record commit in one transaction
//! ([`Reservation`] is the tool context's [`CommitHook`]), so a crash leaves either both or
//! neither. A call that wrote nothing is settled afterwards ([`Ledger::settle`]): an
//! `isError` result is stored as completed (replayed like a success), except retryable ones
//! (`backend_unavailable`, `timeout`), which release the key like a JSON-RPC error does.
//! A call refused before its tool acted leaves no record: a guard's refusal comes before the
//! claim, and a refusal of the arguments — the input schema's, or the tool's own check of a
//! value ([`refuses_arguments`]) — releases the key, so the same key with corrected
//! arguments runs (Stripe's rule: a request that fails validation saves no idempotent
//! result). A tool that ran and failed on the business (not found, a rule broken) is an
//! answer to the operation, stored and replayed like a success.
//! A process killed mid-call leaves an `in_flight` record that blocks the key until its lease
//! ends, then anyone may take it over. Completed keys are kept [`RETENTION_SECS`] (24 h) and
//! pruned a few at a time by later claims.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::catalog::{ErrorKind, McpError};
use crate::clock::Clock;
use crate::guards::auth::Principal;
use crate::store::idempotency::{self as store, Held, IdempotencyRecord};
use crate::store::store_failure;
use crate::store::{Store, StoreError, Tx};
use crate::tools::{CommitHook, Idempotency, ToolSpec};

/// The argument that carries a key.
pub const ARGUMENT: &str = "idempotency_key";
/// The `_meta` entry that carries a key.
pub const META_KEY: &str = "dev.tollgate/idempotencyKey";
/// Longest accepted key.
pub const MAX_KEY_LEN: usize = 255;
/// How long a completed key replays its result (24 hours).
pub const RETENTION_SECS: i64 = 24 * 60 * 60;
/// How long an in-flight key stays reserved for the call holding it. Every built-in tool
/// finishes in milliseconds, and a call waits at most the store's busy timeout (5 s by
/// default) for the write lock, so 30 s is far past any live call; after it, the holder is
/// presumed dead (killed before committing) and the key may be taken over.
pub const LEASE_SECS: i64 = 30;
/// Expired records deleted per claim (bounded, so pruning never slows a call down much).
const PRUNE_BATCH: i64 = 32;
/// `retry_after` sent with `idempotency_key_in_use`, in seconds.
const IN_USE_RETRY_AFTER: u64 = 1;

/// The outcome of claiming a key for a call.
pub enum Claim {
    /// The tool takes no key, or none was given to an optional one.
    NotApplicable,
    /// The key is now reserved for this call.
    Fresh(Reservation),
    /// The key completed earlier: this is its stored result.
    Replay(Value),
}

/// A key reserved for one running call (an `in_flight` record this process holds).
#[derive(Debug)]
pub struct Reservation {
    credential_id: String,
    key: String,
    owner: String,
    /// Set once the tool's transaction recorded the result (spares `settle` a write).
    recorded: AtomicBool,
    /// The ledger's clock (the retention of the completed record counts from it).
    clock: Clock,
}

impl Reservation {
    /// Whether the tool's transaction already recorded the result (then a success needs
    /// no settling).
    pub fn is_recorded(&self) -> bool {
        self.recorded.load(Ordering::Relaxed)
    }
}

impl CommitHook for Reservation {
    /// Marks the key completed with `result` inside the tool's own transaction. If the lease
    /// was lost meanwhile (expired and taken over), the tool's writes are rolled back and the
    /// call answers `idempotency_key_in_use`.
    fn on_commit(&self, tx: &Tx<'_>, result: &Value) -> Result<(), McpError> {
        match complete(tx, self, result) {
            Ok(true) => {
                // Only read by `settle` after a successful outcome, i.e. after this
                // transaction committed.
                self.recorded.store(true, Ordering::Relaxed);
                Ok(())
            }
            Ok(false) => Err(in_use()),
            Err(e) => Err(store_failure(e, true)),
        }
    }

    fn key(&self) -> Option<&str> {
        Some(&self.key)
    }
}

/// Identifies this process's reservations: `<pid>:<random>:<counter>`.
static PROCESS_TAG: LazyLock<String> = LazyLock::new(|| {
    let mut random = [0u8; 6];
    if getrandom::fill(&mut random).is_err() {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        random[..4].copy_from_slice(&nanos.to_be_bytes());
    }
    format!("{}:{}", std::process::id(), hex::encode(random))
});
static RESERVATIONS: AtomicU64 = AtomicU64::new(0);

fn new_owner() -> String {
    let n = RESERVATIONS.fetch_add(1, Ordering::Relaxed);
    format!("{}:{n}", *PROCESS_TAG)
}

/// `idempotency_key_required` for a call of `tool` without a key.
pub(crate) fn required(tool: &str) -> McpError {
    McpError::new(ErrorKind::IdempotencyKeyRequired)
        .param(ARGUMENT)
        .detail("tool", tool)
}

/// `idempotency_key_reused`: the key was first used with `first_tool` (or other arguments).
pub(crate) fn reused(first_tool: &str) -> McpError {
    McpError::new(ErrorKind::IdempotencyKeyReused)
        .param(ARGUMENT)
        .detail("tool", first_tool)
}

pub(crate) fn in_use() -> McpError {
    McpError::new(ErrorKind::IdempotencyKeyInUse).with("retry_after", IN_USE_RETRY_AFTER)
}

/// The idempotency records.
pub struct Ledger {
    store: Store,
    clock: Clock,
}

impl Ledger {
    /// A ledger over `store`, whose leases and retention follow `clock`.
    pub fn new(store: Store, clock: Clock) -> Ledger {
        Ledger { store, clock }
    }

    /// Reserves `key` for this call, or answers from the record it already has.
    pub fn claim(
        &self,
        principal: &Principal,
        tool: &ToolSpec,
        args: &Map<String, Value>,
        key: Option<String>,
    ) -> Result<Claim, McpError> {
        let key = match (tool.idempotency, key) {
            (Idempotency::NotApplicable, _) | (Idempotency::Optional, None) => {
                return Ok(Claim::NotApplicable);
            }
            (Idempotency::Required, None) => {
                return Err(required(&tool.name));
            }
            (_, Some(key)) => key,
        };
        let fingerprint = fingerprint(&tool.name, args);
        let credential_id = principal.credential_id.clone();
        let decided = self.store.in_transaction(|tx| {
            let now = self.clock.unix_secs();
            store::prune(tx, now, PRUNE_BATCH)?;
            let record = store::find(tx, &credential_id, &key)?;
            match record {
                Some(r) if r.expires_at > now => Ok(decide_existing(r, &tool.name, &fingerprint)),
                _ => {
                    let owner = new_owner();
                    let held = Held {
                        credential_id: &credential_id,
                        key: &key,
                        owner: &owner,
                    };
                    store::reserve(tx, held, &tool.name, &fingerprint, now, now + LEASE_SECS)?;
                    Ok(Ok(Claim::Fresh(Reservation {
                        credential_id: credential_id.clone(),
                        key: key.clone(),
                        owner,
                        recorded: AtomicBool::new(false),
                        clock: self.clock.clone(),
                    })))
                }
            }
        });
        decided.map_err(|e| store_failure(e, false))?
    }

    /// The stored result of a **completed** call with this key, tool and arguments, read
    /// without reserving anything. For the guard chain: a replay must win over a guardrail
    /// that the first call's own effects now trip (voiding an invoice twice, say).
    pub fn completed_result(
        &self,
        principal: &Principal,
        tool: &ToolSpec,
        args: &Map<String, Value>,
        key: &str,
    ) -> Option<Value> {
        if tool.idempotency == Idempotency::NotApplicable {
            return None;
        }
        let fingerprint = fingerprint(&tool.name, args);
        let record = self
            .store
            .with_conn(|c| store::find(c, &principal.credential_id, key))
            .ok()
            .flatten()?;
        let matches = record.completed
            && record.expires_at > self.clock.unix_secs()
            && record.tool == tool.name
            && record.fingerprint == fingerprint;
        matches
            .then(|| stored_result(record.result.as_deref()).ok())
            .flatten()
    }

    /// Records the final outcome of a reserved call. A success was already recorded by the
    /// tool's transaction (this is then a no-op); a non-retryable `isError` result is stored
    /// as completed; a retryable one, or a JSON-RPC error (the call faulted or its lease was
    /// lost), releases the key so a retry runs afresh.
    pub fn settle(&self, reservation: Reservation, outcome: &Result<Value, McpError>) {
        let store_it = match outcome {
            Ok(_) if reservation.recorded.load(Ordering::Relaxed) => return,
            Ok(result) => !is_retryable_error(result),
            Err(_) => false,
        };
        let written = self.store.in_transaction(|tx| {
            match outcome {
                Ok(result) if store_it => {
                    complete(tx, &reservation, result)?;
                }
                _ => store::release(tx, reservation.held())?,
            }
            Ok(())
        });
        if let Err(e) = written {
            // The record stays in flight until its lease ends; the key is then reusable.
            tracing::warn!(cause = %e, "could not settle an idempotency key");
        }
    }
}

fn decide_existing(
    record: IdempotencyRecord,
    tool: &str,
    fingerprint: &str,
) -> Result<Claim, McpError> {
    if record.tool != tool || record.fingerprint != fingerprint {
        return Err(reused(&record.tool));
    }
    if !record.completed {
        return Err(in_use());
    }
    stored_result(record.result.as_deref()).map(Claim::Replay)
}

fn stored_result(text: Option<&str>) -> Result<Value, McpError> {
    text.and_then(|t| serde_json::from_str(t).ok())
        .ok_or_else(|| {
            tracing::error!("a completed idempotency record holds no readable result");
            McpError::internal()
        })
}

/// Whether a tool failure refused the call's arguments — they fail the input schema, or the
/// tool's own check of a value (a tax id's check letter, a malformed id or date) — rather
/// than answering the operation. Such a failure is not stored under the call's key.
pub fn refuses_arguments(error: &McpError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::ValidationError | ErrorKind::MissingRequiredField | ErrorKind::InvalidFormat
    )
}

fn is_retryable_error(result: &Value) -> bool {
    result.get("isError") == Some(&Value::Bool(true))
        && result
            .pointer("/_meta/dev.tollgate~1error/retryable")
            .and_then(Value::as_bool)
            .unwrap_or(false)
}

impl Reservation {
    fn held(&self) -> Held<'_> {
        Held {
            credential_id: &self.credential_id,
            key: &self.key,
            owner: &self.owner,
        }
    }
}

/// Marks a reservation completed with `result`; false when it is no longer held.
fn complete(tx: &Tx<'_>, r: &Reservation, result: &Value) -> Result<bool, StoreError> {
    let keep_until = r.clock.unix_secs() + RETENTION_SECS;
    store::complete(tx, r.held(), &result.to_string(), keep_until)
}

/// SHA-256 (hex) of the tool name and its canonical arguments, without the key itself.
pub fn fingerprint(tool: &str, args: &Map<String, Value>) -> String {
    let mut text = String::with_capacity(128);
    text.push_str(tool);
    text.push('\n');
    let mut names: Vec<&String> = args.keys().filter(|k| k.as_str() != ARGUMENT).collect();
    names.sort();
    text.push('{');
    for (i, name) in names.into_iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        canonical(&Value::String(name.clone()), &mut text);
        text.push(':');
        canonical(&args[name], &mut text);
    }
    text.push('}');
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Writes `value` as JSON with object keys sorted, recursively.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut names: Vec<&String> = map.keys().collect();
            names.sort();
            out.push('{');
            for (i, name) in names.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(name.clone()).to_string());
                out.push(':');
                canonical(&map[name], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

pub(crate) fn invalid(reason: &'static str, source: &'static str) -> McpError {
    McpError::new(ErrorKind::IdempotencyKeyInvalid)
        .detail("reason", reason)
        .detail("source", source)
}

fn validate(key: String, source: &'static str) -> Result<String, McpError> {
    if key.is_empty() {
        Err(invalid("empty", source))
    } else if key.len() > MAX_KEY_LEN {
        Err(invalid("too_long", source))
    } else if !key.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        Err(invalid("not_printable_ascii", source))
    } else {
        Ok(key)
    }
}

/// A key sent as a JSON value (argument or `_meta`): a string; `null` counts as absent.
fn from_json(value: Option<&Value>, source: &'static str) -> Option<Result<String, McpError>> {
    match value? {
        Value::Null => None,
        Value::String(key) => Some(validate(key.clone(), source)),
        _ => Some(Err(invalid("not_a_string", source))),
    }
}

/// The `Idempotency-Key` header: a bare value, or a structured-field string (`"..."` with
/// `\"` and `\\` escapes).
fn from_header(raw: &str) -> Result<String, McpError> {
    let value = raw.trim_matches([' ', '\t']);
    let Some(inner) = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .filter(|_| value.len() >= 2)
    else {
        if value.contains('"') {
            return Err(invalid("malformed_header", "header"));
        }
        return validate(value.to_owned(), "header");
    };
    let mut key = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped @ ('"' | '\\')) => key.push(escaped),
                _ => return Err(invalid("malformed_header", "header")),
            },
            '"' => return Err(invalid("malformed_header", "header")),
            other => key.push(other),
        }
    }
    validate(key, "header")
}

/// Finds the call's idempotency key in the arguments, `_meta` or the HTTP header; all the
/// sources that carry one must agree.
pub fn extract_key(
    args: &Map<String, Value>,
    meta: Option<&Map<String, Value>>,
    header: Option<&str>,
) -> Result<Option<String>, McpError> {
    let sources = [
        from_json(args.get(ARGUMENT), "argument"),
        from_json(meta.and_then(|m| m.get(META_KEY)), "_meta"),
        header.map(from_header),
    ];
    let mut found: Option<String> = None;
    for key in sources.into_iter().flatten() {
        let key = key?;
        match &found {
            Some(previous) if *previous != key => {
                return Err(McpError::new(ErrorKind::IdempotencyKeyInvalid)
                    .detail("reason", "conflicting_keys"));
            }
            Some(_) => {}
            None => found = Some(key),
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::clock::ManualClock;
    use crate::store::StoreOptions;
    use crate::tools::Category;

    fn args(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    fn reason(err: &McpError) -> Value {
        err.fields()["details"]["reason"].clone()
    }

    #[test]
    fn key_sources_agree_or_conflict() {
        let a = args(json!({ "idempotency_key": "k-1" }));
        let meta = args(json!({ META_KEY: "k-1" }));
        assert_eq!(
            extract_key(&a, Some(&meta), Some("\"k-1\"")).ok(),
            Some(Some("k-1".into()))
        );
        assert_eq!(
            extract_key(&Map::new(), Some(&meta), None).ok(),
            Some(Some("k-1".into()))
        );
        assert_eq!(
            extract_key(&Map::new(), None, Some("k-1")).ok(),
            Some(Some("k-1".into()))
        );
        assert_eq!(extract_key(&Map::new(), None, None).ok(), Some(None));
        let other = args(json!({ META_KEY: "k-2" }));
        let err = extract_key(&a, Some(&other), None).expect_err("two keys");
        assert_eq!(err.kind(), ErrorKind::IdempotencyKeyInvalid);
        assert_eq!(reason(&err), "conflicting_keys");
        let err = extract_key(&a, None, Some("k-2")).expect_err("header disagrees");
        assert_eq!(reason(&err), "conflicting_keys");
    }

    #[test]
    fn keys_are_1_to_255_printable_ascii() {
        let cases = [
            (json!(""), "empty"),
            (json!("x".repeat(256)), "too_long"),
            (json!("clé"), "not_printable_ascii"),
            (json!("tab\there"), "not_printable_ascii"),
            (json!(42), "not_a_string"),
        ];
        for (key, want) in cases {
            let err = extract_key(&args(json!({ "idempotency_key": key })), None, None)
                .expect_err("invalid");
            assert_eq!(err.kind(), ErrorKind::IdempotencyKeyInvalid);
            assert_eq!(reason(&err), want);
        }
        let longest = "x".repeat(255);
        assert_eq!(
            extract_key(
                &args(json!({ "idempotency_key": longest.clone() })),
                None,
                None
            )
            .ok(),
            Some(Some(longest))
        );
        assert_eq!(
            extract_key(&args(json!({ "idempotency_key": null })), None, None).ok(),
            Some(None)
        );
    }

    #[test]
    fn header_takes_bare_or_quoted_values() {
        assert_eq!(from_header("abc-123").ok(), Some("abc-123".into()));
        assert_eq!(
            from_header(" \"8e03978e-40d5\" ").ok(),
            Some("8e03978e-40d5".into())
        );
        assert_eq!(from_header(r#""a\"b\\c""#).ok(), Some(r#"a"b\c"#.into()));
        for bad in [r#""open"#, r#"a"b"#, r#""bad\escape""#, r#""in"side""#] {
            assert_eq!(
                from_header(bad).map_err(|e| reason(&e)).err(),
                Some(json!("malformed_header")),
                "{bad}"
            );
        }
        assert_eq!(
            from_header("\"\"").map_err(|e| reason(&e)).err(),
            Some(json!("empty"))
        );
    }

    #[test]
    fn fingerprint_ignores_key_order_and_the_key_itself() {
        let a = args(json!({ "b": 1, "a": { "y": [1, 2], "x": "s" }, "idempotency_key": "k1" }));
        let b = args(json!({ "a": { "x": "s", "y": [1, 2] }, "b": 1, "idempotency_key": "k2" }));
        assert_eq!(fingerprint("t", &a), fingerprint("t", &b));
        assert_ne!(fingerprint("t", &a), fingerprint("u", &a));
        let c = args(json!({ "a": { "x": "s", "y": [2, 1] }, "b": 1 }));
        assert_ne!(fingerprint("t", &a), fingerprint("t", &c));
        assert_eq!(fingerprint("t", &a).len(), 64);
    }

    /// When the ledgers of these tests start.
    const T0: i64 = 1_800_000_000;

    fn ledger() -> (tempfile::TempDir, Store, Ledger) {
        let (dir, store, ledger, _) = ledger_at(T0);
        (dir, store, ledger)
    }

    /// A ledger on a manual clock standing at `start`.
    fn ledger_at(start: i64) -> (tempfile::TempDir, Store, Ledger, ManualClock) {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = StoreOptions {
            create: true,
            ..StoreOptions::default()
        };
        let store = Store::open(&dir.path().join("ledger.db"), &opts).expect("open");
        let clock = ManualClock::at_unix_secs(start);
        let ledger = Ledger::new(store.clone(), clock.clock());
        (dir, store, ledger, clock)
    }

    fn principal(id: &str) -> Principal {
        Principal {
            credential_id: id.to_owned(),
            client_id: None,
            scopes: vec!["*".to_owned()],
            mode: crate::guards::auth::Mode::Live,
            guard_channel: None,
            installation: crate::guards::auth::Mode::Live,
            roles: Vec::new(),
        }
    }

    fn spec(policy: Idempotency) -> ToolSpec {
        ToolSpec {
            name: "record_payment".into(),
            title: "t".into(),
            description: "d".into(),
            category: Category::Write,
            scope: "payments:write".into(),
            idempotency: policy,
            input_schema: json!({ "type": "object" }),
            output_schema: None,
        }
    }

    fn fresh(claim: Result<Claim, McpError>) -> Reservation {
        match claim {
            Ok(Claim::Fresh(r)) => r,
            Ok(Claim::Replay(v)) => panic!("unexpected replay {v}"),
            Ok(Claim::NotApplicable) => panic!("unexpected not applicable"),
            Err(e) => panic!("unexpected {e}"),
        }
    }

    fn error_kind(claim: Result<Claim, McpError>) -> ErrorKind {
        match claim {
            Err(e) => e.kind(),
            Ok(_) => panic!("expected an error"),
        }
    }

    fn commit_result(
        store: &Store,
        reservation: &Reservation,
        result: &Value,
    ) -> Result<(), McpError> {
        let mut hook_outcome = Ok(());
        let _ = store.in_transaction(|tx| {
            hook_outcome = reservation.on_commit(tx, result);
            Ok(())
        });
        hook_outcome
    }

    #[test]
    fn policies_decide_whether_a_key_is_needed() {
        let (_dir, _store, ledger) = ledger();
        let p = principal("cred1");
        let a = args(json!({ "amount_cents": 100 }));
        assert!(matches!(
            ledger.claim(&p, &spec(Idempotency::NotApplicable), &a, Some("k".into())),
            Ok(Claim::NotApplicable)
        ));
        assert!(matches!(
            ledger.claim(&p, &spec(Idempotency::Optional), &a, None),
            Ok(Claim::NotApplicable)
        ));
        let err = ledger
            .claim(&p, &spec(Idempotency::Required), &a, None)
            .err()
            .expect("required");
        assert_eq!(err.kind(), ErrorKind::IdempotencyKeyRequired);
    }

    #[test]
    fn fresh_then_in_use_then_replay_or_reused() {
        let (_dir, store, ledger) = ledger();
        let (p, tool) = (principal("cred1"), spec(Idempotency::Required));
        let a = args(json!({ "amount_cents": 100 }));
        let reservation = fresh(ledger.claim(&p, &tool, &a, Some("k".into())));
        assert_eq!(
            error_kind(ledger.claim(&p, &tool, &a, Some("k".into()))),
            ErrorKind::IdempotencyKeyInUse
        );
        let other = args(json!({ "amount_cents": 200 }));
        assert_eq!(
            error_kind(ledger.claim(&p, &tool, &other, Some("k".into()))),
            ErrorKind::IdempotencyKeyReused
        );
        let result = json!({ "content": [], "isError": false });
        commit_result(&store, &reservation, &result).expect("commit");
        ledger.settle(reservation, &Ok(result.clone()));
        match ledger.claim(&p, &tool, &a, Some("k".into())) {
            Ok(Claim::Replay(stored)) => assert_eq!(stored, result),
            _ => panic!("expected a replay"),
        }
        assert_eq!(ledger.completed_result(&p, &tool, &a, "k"), Some(result));
        assert_eq!(ledger.completed_result(&p, &tool, &other, "k"), None);
        assert_eq!(
            error_kind(ledger.claim(&p, &tool, &other, Some("k".into()))),
            ErrorKind::IdempotencyKeyReused
        );
        // Another credential's key of the same name is its own.
        let _ = fresh(ledger.claim(&principal("cred2"), &tool, &a, Some("k".into())));
    }

    #[test]
    fn errors_are_stored_unless_retryable_or_faults() {
        let (_dir, _store, ledger) = ledger();
        let (p, tool) = (principal("cred1"), spec(Idempotency::Required));
        let a = args(json!({ "amount_cents": 100 }));
        let business =
            McpError::new(ErrorKind::InvoiceNotFound).to_tool_result(crate::config::Locale::En);
        let r = fresh(ledger.claim(&p, &tool, &a, Some("biz".into())));
        ledger.settle(r, &Ok(business.clone()));
        assert!(
            matches!(ledger.claim(&p, &tool, &a, Some("biz".into())), Ok(Claim::Replay(v)) if v == business)
        );
        let transient = McpError::new(ErrorKind::ToolBackendUnavailable)
            .to_tool_result(crate::config::Locale::En);
        let r = fresh(ledger.claim(&p, &tool, &a, Some("busy".into())));
        ledger.settle(r, &Ok(transient));
        let _ = fresh(ledger.claim(&p, &tool, &a, Some("busy".into())));
        let r = fresh(ledger.claim(&p, &tool, &a, Some("fault".into())));
        ledger.settle(r, &Err(McpError::internal()));
        let _ = fresh(ledger.claim(&p, &tool, &a, Some("fault".into())));
    }

    #[test]
    fn only_the_argument_failures_refuse_the_arguments() {
        for kind in [
            ErrorKind::ValidationError,
            ErrorKind::MissingRequiredField,
            ErrorKind::InvalidFormat,
        ] {
            assert!(refuses_arguments(&McpError::new(kind)), "{kind:?}");
        }
        for kind in [
            ErrorKind::InvoiceNotFound,
            ErrorKind::PaymentExceedsBalance,
            ErrorKind::ToolBackendUnavailable,
            ErrorKind::GuardrailViolation,
        ] {
            assert!(!refuses_arguments(&McpError::new(kind)), "{kind:?}");
        }
    }

    #[test]
    fn an_expired_lease_is_taken_over_and_the_old_holder_cannot_commit() {
        let (_dir, store, ledger, clock) = ledger_at(T0);
        let (p, tool) = (principal("cred1"), spec(Idempotency::Required));
        let a = args(json!({ "amount_cents": 100 }));
        let crashed = fresh(ledger.claim(&p, &tool, &a, Some("k".into())));
        // The lease holds to its last second and ends exactly LEASE_SECS after the claim.
        clock.set_unix_secs(T0 + LEASE_SECS - 1);
        assert_eq!(
            error_kind(ledger.claim(&p, &tool, &a, Some("k".into()))),
            ErrorKind::IdempotencyKeyInUse
        );
        clock.set_unix_secs(T0 + LEASE_SECS);
        let taker = fresh(ledger.claim(&p, &tool, &a, Some("k".into())));
        let result = json!({ "content": [], "isError": false });
        let err = commit_result(&store, &crashed, &result).expect_err("lease lost");
        assert_eq!(err.kind(), ErrorKind::IdempotencyKeyInUse);
        commit_result(&store, &taker, &result).expect("the new holder commits");
    }

    #[test]
    fn a_completed_key_replays_for_its_retention_then_runs_afresh() {
        let (_dir, store, ledger, clock) = ledger_at(T0);
        let (p, tool) = (principal("cred1"), spec(Idempotency::Required));
        let a = args(json!({ "amount_cents": 100 }));
        let first = fresh(ledger.claim(&p, &tool, &a, Some("k".into())));
        let result = json!({ "content": [], "isError": false });
        clock.advance(std::time::Duration::from_secs(5));
        commit_result(&store, &first, &result).expect("commit");
        ledger.settle(first, &Ok(result.clone()));
        // Kept RETENTION_SECS from its completion (T0 + 5), not from its claim.
        clock.set_unix_secs(T0 + 5 + RETENTION_SECS - 1);
        assert!(matches!(
            ledger.claim(&p, &tool, &a, Some("k".into())),
            Ok(Claim::Replay(stored)) if stored == result
        ));
        assert_eq!(ledger.completed_result(&p, &tool, &a, "k"), Some(result));
        clock.set_unix_secs(T0 + 5 + RETENTION_SECS);
        assert_eq!(ledger.completed_result(&p, &tool, &a, "k"), None);
        let _ = fresh(ledger.claim(&p, &tool, &a, Some("k".into())));
    }
}
