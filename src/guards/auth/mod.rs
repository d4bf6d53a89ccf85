//! Authentication and access: who is calling, and which tools their scopes and the
//! company's plan let them see and call. This module is the [`Authenticator`]: verification,
//! the verified-token cache, the single flight per token, the argon2 gate, and the re-check
//! of a cached credential inside the charging transaction ([`CallChecks`]). Beside it:
//! `token` (the credential format, secrets and hashes), `throttle` (the failure throttle
//! and the argon2 ceiling), `access` (scopes, plans, visibility), `scopes` (the scopes a
//! credential can usefully hold and the closest of them to a mistyped one) and `keys` (the
//! credential model the CLI and the OAuth token endpoint manage: API keys, OAuth clients
//! and their short-lived access tokens, over [`crate::store::credentials`]).
//!
//! A credential is `tg_live_<public id>_<secret>` (or `tg_test_…`): the public id (80
//! random bits, lowercase hex) finds the row, the secret (256 random bits, base64url) is
//! checked against its argon2id PHC hash (OWASP parameters m=19 MiB, t=2, p=1). The secret
//! is shown once, at creation; only its hash is stored. OAuth client secrets look like
//! `tg_cs_<secret>` and are never accepted as bearer tokens (`invalid_token_type`).
//!
//! Verification of a presented token, in order:
//!
//! 1. missing → `invalid_token` (`reason: "missing"`);
//! 2. the token's SHA-256 is looked up in the verified-token cache; on a hit only the cheap
//!    row checks below run, never argon2 — so revocation by another process still applies
//!    to the very next call, and a rotated secret invalidates the cache entry;
//! 3. on a miss, the source's failure throttle is charged *before* any argon2 work
//!    (`rate_limited`, `bucket: "auth"`, after [`AUTH_FAILURE_LIMIT`] failures a minute);
//! 4. parse; then the server-wide ceiling on argon2 work is charged (at most
//!    `auth.argon2_per_second` verifications started per second across every source,
//!    beyond it `rate_limited`, `bucket: "auth"`, `retry_after: 1`), so that a flood from
//!    many addresses cannot buy more CPU than that while cached tokens keep working;
//! 5. look up by public id and verify the secret — one argon2 verification whatever the
//!    id is (unknown ids, and OAuth access tokens with a wrong secret, are verified
//!    against a dummy hash; a key inside its rotation grace period may take a second one
//!    for its previous secret) — and only then revoked / expired / OAuth client revoked /
//!    test key on a live installation. A caller who does not hold the secret therefore
//!    gets the same `invalid_token` (`reason: "unknown"`) after the same work for an
//!    unknown, a revoked, an expired or a test key: a public id reveals nothing.
//!
//! Test mode: the company row has a `mode` (`live` by default, `tollgate company set --mode
//! test` for a development installation). `tg_test_` keys are refused with
//! `invalid_token_type` unless the mode is `test`; live keys work in both modes.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::catalog::{ErrorKind, McpError};
use crate::clock::Clock;
use crate::config::GuardChannel;
pub use crate::store::credentials::OAuthClient;
use crate::store::credentials::{self, NewClient, NewCredential, Revocable};
use crate::store::plans::{self, Plan};
use crate::store::store_failure;
use crate::store::{Conn, Store, StoreError, Tx};
use crate::tools::ToolSpec;

mod access;
mod keys;
mod scopes;
mod throttle;
mod token;

pub use access::{
    ADMIN_SCOPE, AccessFacts, SUPER_SCOPE, Visibility, grants, is_operator, parse_scope,
    parse_scope_list,
};
pub use keys::{
    CredentialError, IssuedClient, IssuedKey, KeyInfo, NewKey, create_client, create_key,
    issue_access_token, list_clients, list_keys, revoke_client, revoke_key, rotate_key,
    set_guard_channel,
};
pub use scopes::{KnownScope, KnownScopes, MAX_SUGGESTIONS, ScopeGroup, UnknownScope};
pub use token::{
    CLIENT_SECRET_PREFIX, LIVE_PREFIX, Mode, Secret, TEST_PREFIX, hash_secret, random_hex,
};
use {throttle::*, token::*};
/// Failed authentications a source may make per window before it is throttled.
pub const AUTH_FAILURE_LIMIT: u32 = 10;
/// The throttle's fixed window, in seconds.
pub const AUTH_FAILURE_WINDOW_SECS: i64 = 60;
pub use crate::config::DEFAULT_ARGON2_PER_SECOND;
/// Verified tokens kept in memory; the cache is emptied when full (re-verification costs
/// one argon2 run per live token).
const CACHE_MAX_ENTRIES: usize = 10_000;
/// `last_used_at` is written at most this often per credential.
const LAST_USED_INTERVAL_SECS: i64 = 60;

/// The identity a request runs as, once authenticated.
#[derive(Debug, Clone)]
pub struct Principal {
    /// Public id of the credential.
    pub credential_id: String,
    /// The OAuth client the credential belongs to, if any.
    pub client_id: Option<String>,
    /// Granted scopes (`resource:action`, or `*`).
    pub scopes: Vec<String>,
    /// Whether it is a `tg_live_` or a `tg_test_` credential (OAuth access tokens are
    /// live): decides which book of the business data its calls work on.
    pub mode: Mode,
    /// The credential's own guard channel (`None`: the `[errors] guard_channel` setting).
    pub guard_channel: Option<GuardChannel>,
    /// The installation's mode when the credential was read: rehearsed failures are
    /// looked up only in test mode.
    pub installation: Mode,
}

/// Why a presented credential was refused (kept apart from [`McpError`] until the end so
/// the throttle can tell failures from storage trouble).
enum Failure {
    /// `invalid_token` with this `details.reason`.
    Invalid(&'static str),
    /// `client_revoked`.
    ClientRevoked,
    /// `invalid_token_type` with this `details.reason`.
    WrongType(&'static str),
    /// The database could not answer; not the caller's fault.
    Store(StoreError),
    /// The server-wide argon2 ceiling is reached; not counted against the caller.
    Busy(McpError),
}

impl Failure {
    /// Whether the attempt counts against the source's failure allowance.
    fn is_callers_fault(&self) -> bool {
        !matches!(self, Failure::Store(_) | Failure::Busy(_))
    }

    fn into_error(self) -> McpError {
        match self {
            Failure::Busy(err) => err,
            Failure::Invalid(reason) => invalid_token(reason),
            Failure::ClientRevoked => McpError::new(ErrorKind::ClientRevoked),
            Failure::WrongType(reason) => {
                McpError::new(ErrorKind::InvalidTokenType).detail("reason", reason)
            }
            Failure::Store(err) => store_failure(err, false),
        }
    }
}

/// `invalid_token` with a safe machine-readable reason.
fn invalid_token(reason: &'static str) -> McpError {
    McpError::new(ErrorKind::InvalidToken).detail("reason", reason)
}

/// What one indexed read tells about a credential, on every call.
struct CredentialRow {
    kind: String,
    mode: Mode,
    secret_hash: String,
    scopes: Vec<String>,
    client_id: Option<String>,
    expires_at: Option<i64>,
    revoked_at: Option<i64>,
    previous_hash: Option<String>,
    previous_expires_at: Option<i64>,
    last_used_at: Option<i64>,
    client_revoked_at: Option<i64>,
    installation_mode: Mode,
    guard_channel: Option<GuardChannel>,
}

impl CredentialRow {
    /// The rotated-out hash while its grace period lasts.
    fn active_previous(&self, now: i64) -> Option<&str> {
        match (&self.previous_hash, self.previous_expires_at) {
            (Some(hash), Some(until)) if now < until => Some(hash),
            _ => None,
        }
    }
}

impl From<credentials::CredentialRow> for CredentialRow {
    fn from(row: credentials::CredentialRow) -> CredentialRow {
        CredentialRow {
            kind: row.kind,
            mode: Mode::from_stored(&row.mode),
            secret_hash: row.secret_hash,
            scopes: row.scopes,
            client_id: row.client_id,
            expires_at: row.expires_at,
            revoked_at: row.revoked_at,
            previous_hash: row.previous_hash,
            previous_expires_at: row.previous_expires_at,
            last_used_at: row.last_used_at,
            client_revoked_at: row.client_revoked_at,
            installation_mode: Mode::from_stored(&row.installation_mode.unwrap_or_default()),
            guard_channel: row.guard_channel,
        }
    }
}

fn find_by_public_id(store: &Store, public_id: &str) -> Result<Option<CredentialRow>, StoreError> {
    Ok(store.credential(public_id)?.map(CredentialRow::from))
}

/// Revoked, expired, client revoked, test key on a live installation — in that order.
fn check_standing(row: &CredentialRow, now: i64) -> Result<(), Failure> {
    if row.revoked_at.is_some() {
        return Err(Failure::Invalid("revoked"));
    }
    if row.expires_at.is_some_and(|at| at <= now) {
        return Err(Failure::Invalid("expired"));
    }
    if row.client_revoked_at.is_some() {
        return Err(Failure::ClientRevoked);
    }
    if row.mode == Mode::Test && row.installation_mode == Mode::Live {
        return Err(Failure::WrongType("test_key_on_live_installation"));
    }
    Ok(())
}

/// How the caller of a tool call was identified before its charging transaction.
pub enum CallAuth {
    /// Verified now: argon2, or the development-mode credential.
    Verified(Principal),
    /// A token verified earlier; its credential row is re-checked in the transaction.
    Cached {
        /// SHA-256 of the token, the cache key.
        digest: [u8; 32],
        /// What the cache remembers of it.
        entry: CacheEntry,
    },
}

impl CallAuth {
    /// The public id of the credential, for the charge.
    pub fn credential_id(&self) -> &str {
        match self {
            CallAuth::Verified(principal) => &principal.credential_id,
            CallAuth::Cached { entry, .. } => &entry.public_id,
        }
    }

    /// The credential's OAuth client when already known (otherwise the charge reads it).
    pub fn client_id(&self) -> Option<&str> {
        match self {
            CallAuth::Verified(principal) => principal.client_id.as_deref(),
            CallAuth::Cached { .. } => None,
        }
    }
}

/// The outcome of re-checking a cached token ([`Authenticator::finish_recheck`]).
pub enum Recheck {
    /// The credential still stands.
    Admitted(Principal),
    /// Revoked, expired, or otherwise refused: the call ends with this error, uncharged.
    Refused(McpError),
    /// The secret changed since the token was cached: verify it afresh.
    Stale,
}

/// What a re-check inside the transaction found.
enum Identity {
    Admitted(Principal),
    Refused(Failure),
    Stale,
}

/// The re-check of a cached credential inside the charging transaction, before the
/// counters move (so a revoked key charges nothing): what [`Authenticator::call_checks`]
/// prepares, the transaction runs ([`CallChecks::recheck_in`]) and
/// [`Authenticator::finish_recheck`] reads.
pub struct CallChecks {
    now: i64,
    pending: Option<CacheEntry>,
    identity: Option<Identity>,
}

impl CallChecks {
    /// The time the checks were prepared at (what the plan facts of the call are read at).
    pub fn now(&self) -> i64 {
        self.now
    }

    /// Re-checks the cached credential, if there is one, inside `tx`; `Ok(false)` refuses
    /// the call *without* charging it (the checks keep why). `rows` holds the credential
    /// rows this transaction has read so far.
    pub fn recheck_in(
        &mut self,
        tx: &Tx<'_>,
        rows: &mut CredentialRows,
    ) -> Result<bool, StoreError> {
        let Some(entry) = &self.pending else {
            return Ok(true);
        };
        let now = self.now;
        let identity = match rows.credential(tx, &entry.public_id)? {
            None => Identity::Refused(Failure::Invalid("unknown")),
            Some(row) => match check_standing(row, now) {
                Err(failure) => Identity::Refused(failure),
                Ok(()) if !matches_entry(row, entry, now) => Identity::Stale,
                Ok(()) => {
                    if needs_touch(row, now) {
                        credentials::touch_last_used(tx, &entry.public_id, now)?;
                        row.last_used_at = Some(now);
                    }
                    Identity::Admitted(Principal {
                        credential_id: entry.public_id.clone(),
                        client_id: row.client_id.clone(),
                        scopes: row.scopes.clone(),
                        mode: row.mode,
                        guard_channel: row.guard_channel,
                        installation: row.installation_mode,
                    })
                }
            },
        };
        let admitted = matches!(identity, Identity::Admitted(_));
        self.identity = Some(identity);
        Ok(admitted)
    }
}

/// The credential rows one charging transaction has read, for all its calls (the calls of
/// a batch are mostly one credential's: its row is read once, not once a call), kept in
/// step with the `last_used_at` the transaction writes.
#[derive(Default)]
pub struct CredentialRows {
    rows: HashMap<String, Option<CredentialRow>>,
}

impl CredentialRows {
    fn credential(
        &mut self,
        tx: &Tx<'_>,
        public_id: &str,
    ) -> Result<Option<&mut CredentialRow>, StoreError> {
        if !self.rows.contains_key(public_id) {
            let row = credentials::credential_on(tx, public_id)?.map(CredentialRow::from);
            self.rows.insert(public_id.to_owned(), row);
        }
        Ok(self.rows.get_mut(public_id).and_then(Option::as_mut))
    }
}

/// Whether the row's current (or still valid previous) secret is the one `entry` was
/// verified against; compared in constant time.
fn matches_entry(row: &CredentialRow, entry: &CacheEntry, now: i64) -> bool {
    let current = fingerprint(&row.secret_hash).ct_eq(&entry.hash_fingerprint);
    let previous = row
        .active_previous(now)
        .map_or(subtle::Choice::from(0), |h| {
            fingerprint(h).ct_eq(&entry.hash_fingerprint)
        });
    bool::from(current | previous)
}

/// Whether `last_used_at` is due for an update (at most once a minute).
fn needs_touch(row: &CredentialRow, now: i64) -> bool {
    row.last_used_at
        .is_none_or(|at| now - at >= LAST_USED_INTERVAL_SECS)
}

/// A verified token remembered by the SHA-256 of its text.
#[derive(Clone)]
pub struct CacheEntry {
    public_id: String,
    /// The OAuth client of the credential (fixed for its lifetime).
    client_id: Option<String>,
    /// SHA-256 of the PHC string the secret was verified against: when the row's hash
    /// changes (rotation), the entry no longer matches and argon2 runs again.
    hash_fingerprint: [u8; 32],
}

/// Verifies credentials and decides access.
pub struct Authenticator {
    store: Store,
    clock: Clock,
    cache: Mutex<HashMap<[u8; 32], CacheEntry>>,
    throttle: Mutex<Throttle>,
    flights: Flights,
    argon2_runs: AtomicU64,
    argon2_gate: Gate,
    ceiling: Ceiling,
}

/// The credential a request presents, as far as binding a session to it needs: its
/// public id and its OAuth client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialRef {
    /// Public id of the credential.
    pub credential_id: String,
    /// The OAuth client it belongs to, if any.
    pub client_id: Option<String>,
}

impl From<&Principal> for CredentialRef {
    fn from(principal: &Principal) -> CredentialRef {
        CredentialRef {
            credential_id: principal.credential_id.clone(),
            client_id: principal.client_id.clone(),
        }
    }
}

/// argon2 verifications running at once at most: each holds 19 MiB and a core, so a burst
/// of first presentations (sixteen connections opening with the same new token) must queue
/// instead of multiplying memory.
const MAX_CONCURRENT_ARGON2: usize = 2;

/// A counting semaphore.
#[derive(Default)]
struct Gate {
    running: Mutex<usize>,
    freed: std::sync::Condvar,
}

impl Gate {
    fn enter(&self) -> GatePass<'_> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        while *running >= MAX_CONCURRENT_ARGON2 {
            running = self
                .freed
                .wait(running)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *running += 1;
        GatePass(self)
    }
}

/// The tokens being verified right now, by digest.
#[derive(Default)]
struct Flights {
    verifying: Mutex<std::collections::HashSet<[u8; 32]>>,
    done: std::sync::Condvar,
}

impl Flights {
    /// Waits until no other request is verifying `digest`, then marks it as this one's.
    fn join(&self, digest: [u8; 32]) -> Flight<'_> {
        let mut verifying = self
            .verifying
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while verifying.contains(&digest) {
            verifying = self
                .done
                .wait(verifying)
                .unwrap_or_else(PoisonError::into_inner);
        }
        verifying.insert(digest);
        Flight(self, digest)
    }
}

/// One request's turn to verify a token, ended on drop.
struct Flight<'a>(&'a Flights, [u8; 32]);

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.0
            .verifying
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.1);
        self.0.done.notify_all();
    }
}

/// A place inside the [`Gate`], given back on drop.
struct GatePass<'a>(&'a Gate);

impl Drop for GatePass<'_> {
    fn drop(&mut self) {
        *self
            .0
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner) -= 1;
        self.0.freed.notify_one();
    }
}

impl Authenticator {
    /// An authenticator over `store`, whose throttle windows and expiries follow `clock`.
    pub fn new(store: Store, clock: Clock) -> Authenticator {
        Authenticator {
            store,
            clock,
            cache: Mutex::new(HashMap::new()),
            throttle: Mutex::new(Throttle::default()),
            argon2_runs: AtomicU64::new(0),
            argon2_gate: Gate::default(),
            flights: Flights::default(),
            ceiling: Ceiling::new(DEFAULT_ARGON2_PER_SECOND),
        }
    }

    /// Sets the server-wide ceiling: argon2 verifications started per second across all
    /// sources (at least 1). Beyond it, tokens that are not cached are refused with
    /// `rate_limited` (`bucket: "auth"`, `retry_after: 1`) until the next second.
    pub fn limit_argon2_per_second(&self, per_second: u32) {
        self.ceiling
            .per_second
            .store(per_second.max(1), Ordering::Relaxed);
    }

    /// How many argon2 verifications this authenticator has run (dummy ones included).
    pub fn argon2_runs(&self) -> u64 {
        self.argon2_runs.load(Ordering::Relaxed)
    }

    /// The credential `token` belongs to, for binding a session to it: from the cache
    /// when the token was verified before (no read, no argon2; the request's own
    /// authentication re-checks its standing), otherwise verified now exactly like
    /// [`Authenticator::authenticate`].
    pub fn identify(&self, token: Option<&str>, source: &str) -> Result<CredentialRef, McpError> {
        if let Some(token) = token.filter(|t| !t.is_empty()) {
            let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            if let Some(entry) = self.cached(&digest) {
                return Ok(CredentialRef {
                    credential_id: entry.public_id,
                    client_id: entry.client_id,
                });
            }
        }
        self.authenticate(token, source)
            .map(|principal| CredentialRef::from(&principal))
    }

    /// Verifies the presented token; `source` (`stdio:<pid>`, an HTTP peer address)
    /// identifies the caller for throttling repeated failures.
    pub fn authenticate(&self, token: Option<&str>, source: &str) -> Result<Principal, McpError> {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Err(invalid_token("missing"));
        };
        let now = self.clock.unix_secs();
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(outcome) = self.served_from_cache(&digest, source, now) {
            return outcome;
        }
        // Requests that bring the same new token at once verify it one at a time: the
        // first runs argon2, the others then find it cached. (Otherwise a client opening
        // with many requests in flight would spend its failure allowance on attempts that
        // were never failures.)
        let flight = self.flights.join(digest);
        if let Some(outcome) = self.served_from_cache(&digest, source, now) {
            return outcome;
        }
        let ticket = self.throttle().admit(source, now)?;
        let outcome = self.authenticate_uncached(token, digest, now);
        drop(flight);
        if outcome.as_ref().err().is_none_or(|f| !f.is_callers_fault()) {
            self.throttle().refund(ticket);
        }
        outcome.map_err(Failure::into_error)
    }

    /// The principal of a credential chosen by configuration rather than presented (the
    /// loopback-only development mode of the HTTP transport). Standing checks still apply.
    pub fn principal_for_public_id(&self, public_id: &str) -> Result<Principal, McpError> {
        let now = self.clock.unix_secs();
        let row = find_by_public_id(&self.store, public_id)
            .map_err(|e| store_failure(e, false))?
            .ok_or_else(|| invalid_token("unknown"))?;
        check_standing(&row, now).map_err(Failure::into_error)?;
        Ok(self.admit_principal(public_id, row, now))
    }

    /// Step 1 of a tool call. A token verified earlier comes back as
    /// [`CallAuth::Cached`]: its credential row is re-checked by [`CallChecks`] inside
    /// the charging transaction (no read of its own); anything else is verified now.
    pub fn authenticate_call(
        &self,
        token: Option<&str>,
        source: &str,
    ) -> Result<CallAuth, McpError> {
        if let Some(token) = token.filter(|t| !t.is_empty()) {
            let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            if let Some(entry) = self.cached(&digest) {
                return Ok(CallAuth::Cached { digest, entry });
            }
        }
        self.authenticate(token, source).map(CallAuth::Verified)
    }

    /// The checks a call runs inside its charging transaction.
    pub fn call_checks(&self, auth: &CallAuth) -> CallChecks {
        CallChecks {
            now: self.clock.unix_secs(),
            pending: match auth {
                CallAuth::Cached { entry, .. } => Some(entry.clone()),
                CallAuth::Verified(_) => None,
            },
            identity: None,
        }
    }

    /// What the re-check of a cached token in `checks` found: the principal, the refusal
    /// (counted against `source` like any failed token), or [`Recheck::Stale`] when the
    /// credential's secret changed since it was cached (the entry is forgotten; verify
    /// the token afresh).
    pub fn finish_recheck(
        &self,
        auth: &CallAuth,
        checks: &mut CallChecks,
        source: &str,
    ) -> Recheck {
        let (digest, entry) = match auth {
            CallAuth::Verified(principal) => return Recheck::Admitted(principal.clone()),
            CallAuth::Cached { digest, entry } => (digest, entry),
        };
        match checks.identity.take() {
            Some(Identity::Admitted(principal)) => Recheck::Admitted(principal),
            Some(Identity::Refused(failure)) => {
                self.throttle().record_failure(source, checks.now);
                Recheck::Refused(failure.into_error())
            }
            Some(Identity::Stale) => {
                self.forget(digest);
                Recheck::Stale
            }
            // The charging transaction failed before the row was read.
            None => {
                tracing::debug!(credential = %entry.public_id, "credential not re-checked");
                Recheck::Refused(McpError::internal())
            }
        }
    }

    /// The outcome for a cached token (a refusal counted against `source`), or `None` when
    /// the token is not cached or its entry went stale (then it is forgotten).
    fn served_from_cache(
        &self,
        digest: &[u8; 32],
        source: &str,
        now: i64,
    ) -> Option<Result<Principal, McpError>> {
        let entry = self.cached(digest)?;
        match self.authenticate_cached(&entry, now) {
            Some(Ok(principal)) => Some(Ok(principal)),
            Some(Err(failure)) => {
                if failure.is_callers_fault() {
                    self.throttle().record_failure(source, now);
                }
                Some(Err(failure.into_error()))
            }
            None => {
                self.forget(digest);
                None
            }
        }
    }

    /// A cache hit: only the row checks, no argon2. `None` when the entry is stale.
    fn authenticate_cached(
        &self,
        entry: &CacheEntry,
        now: i64,
    ) -> Option<Result<Principal, Failure>> {
        let row = match find_by_public_id(&self.store, &entry.public_id) {
            Ok(Some(row)) => row,
            Ok(None) => return Some(Err(Failure::Invalid("unknown"))),
            Err(e) => return Some(Err(Failure::Store(e))),
        };
        if let Err(failure) = check_standing(&row, now) {
            return Some(Err(failure));
        }
        if !matches_entry(&row, entry, now) {
            return None;
        }
        Some(Ok(self.admit_principal(&entry.public_id, row, now)))
    }

    fn authenticate_uncached(
        &self,
        token: &str,
        digest: [u8; 32],
        now: i64,
    ) -> Result<Principal, Failure> {
        let presented = parse_token(token)?;
        self.ceiling.admit(now).map_err(Failure::Busy)?;
        let pass = self.argon2_gate.enter();
        let verified = self.find_and_verify(&presented, now);
        drop(pass);
        let (row, matched) = verified?;
        // The standing is told only to whoever holds the secret (see the module header).
        check_standing(&row, now)?;
        // Access tokens need no argon2, but caching them too keeps a valid token working
        // from a source that the failure throttle currently refuses.
        self.remember(digest, presented.public_id, matched, row.client_id.clone());
        Ok(self.admit_principal(presented.public_id, row, now))
    }

    /// The row of the presented id and the fingerprint of the hash its secret matched;
    /// `unknown` after one argon2 verification when either is wrong.
    fn find_and_verify(
        &self,
        presented: &PresentedToken<'_>,
        now: i64,
    ) -> Result<(CredentialRow, [u8; 32]), Failure> {
        let row = find_by_public_id(&self.store, presented.public_id).map_err(Failure::Store)?;
        let Some(row) = row.filter(|r| r.mode == presented.mode) else {
            // Unknown ids cost the same argon2 run as known ones.
            self.argon2_verify(DUMMY_HASH, presented.secret);
            return Err(Failure::Invalid("unknown"));
        };
        match self.verify_secret(&row, presented.secret, now) {
            Some(matched) => Ok((row, matched)),
            None => Err(Failure::Invalid("unknown")),
        }
    }

    /// Checks the secret; returns the fingerprint of the hash it matched.
    fn verify_secret(&self, row: &CredentialRow, secret: &str, now: i64) -> Option<[u8; 32]> {
        if row.kind == "oauth_access" {
            let expected = access_hash(secret);
            let ok: bool = expected.as_bytes().ct_eq(row.secret_hash.as_bytes()).into();
            if !ok {
                // A wrong secret costs what it costs on an API key or an unknown id.
                self.argon2_verify(DUMMY_HASH, secret);
            }
            return ok.then(|| fingerprint(&row.secret_hash));
        }
        let previous = row.active_previous(now);
        let (matched, runs) = verify_current_or_previous(&row.secret_hash, previous, secret);
        self.argon2_runs.fetch_add(runs, Ordering::Relaxed);
        match matched? {
            Matched::Current => Some(fingerprint(&row.secret_hash)),
            Matched::Previous => previous.map(fingerprint),
        }
    }

    fn argon2_verify(&self, phc: &str, secret: &str) -> bool {
        self.argon2_runs.fetch_add(1, Ordering::Relaxed);
        verify_phc(phc, secret)
    }

    fn admit_principal(&self, public_id: &str, row: CredentialRow, now: i64) -> Principal {
        if needs_touch(&row, now) {
            touch_last_used(&self.store, public_id, now);
        }
        Principal {
            credential_id: public_id.to_owned(),
            client_id: row.client_id,
            scopes: row.scopes,
            mode: row.mode,
            guard_channel: row.guard_channel,
            installation: row.installation_mode,
        }
    }

    fn cached(&self, digest: &[u8; 32]) -> Option<CacheEntry> {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(digest)
            .cloned()
    }

    fn remember(
        &self,
        digest: [u8; 32],
        public_id: &str,
        hash_fingerprint: [u8; 32],
        client_id: Option<String>,
    ) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= CACHE_MAX_ENTRIES {
            cache.clear();
        }
        cache.insert(
            digest,
            CacheEntry {
                public_id: public_id.to_owned(),
                client_id,
                hash_fingerprint,
            },
        );
    }

    fn forget(&self, digest: &[u8; 32]) {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(digest);
    }

    fn throttle(&self) -> std::sync::MutexGuard<'_, Throttle> {
        self.throttle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Verifies an OAuth client's secret (the token endpoint's client authentication),
    /// throttled per `source` like bearer tokens. Unknown client ids spend one argon2 run.
    pub fn verify_client_secret(
        &self,
        client_id: &str,
        secret: &Secret,
        source: &str,
    ) -> Result<OAuthClient, McpError> {
        let now = self.clock.unix_secs();
        let ticket = self.throttle().admit(source, now)?;
        let outcome = self.check_client_secret(client_id, secret.expose(), now);
        if outcome.as_ref().err().is_none_or(|f| !f.is_callers_fault()) {
            self.throttle().refund(ticket);
        }
        outcome.map_err(Failure::into_error)
    }

    /// The secret first, then the client's standing (revealed only to its holder).
    fn check_client_secret(
        &self,
        client_id: &str,
        secret: &str,
        now: i64,
    ) -> Result<OAuthClient, Failure> {
        self.ceiling.admit(now).map_err(Failure::Busy)?;
        let pass = self.argon2_gate.enter();
        let found = self
            .store
            .client_with_hash(client_id)
            .map_err(Failure::Store);
        let verified = found.map(|found| match found {
            Some((client, hash)) => self.argon2_verify(&hash, secret).then_some(client),
            None => {
                self.argon2_verify(DUMMY_HASH, secret);
                None
            }
        });
        drop(pass);
        let client = verified?.ok_or(Failure::Invalid("unknown"))?;
        if client.revoked {
            return Err(Failure::ClientRevoked);
        }
        Ok(client)
    }
}

/// Records use at most once a minute, and never waits for another writer: on contention
/// the update is simply skipped (the next call tries again).
fn touch_last_used(store: &Store, public_id: &str, now: i64) {
    if let Err(e) = store.touch_last_used_unless_busy(public_id, now)
        && !e.is_transient()
    {
        tracing::warn!(cause = %e, "cannot record when a credential was last used");
    }
}

/// Fixtures the unit tests of the guards share: a fresh database with a company on a plan,
/// and a live key on it.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use crate::store::{Company, StoreOptions};

    /// A new database in a temporary directory, its company on `plan`.
    pub(crate) fn fresh(plan: &str) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = StoreOptions {
            create: true,
            ..StoreOptions::default()
        };
        let store = Store::open(&dir.path().join("t.db"), &opts).expect("open");
        let company = Company {
            name: "Acme".into(),
            tax_id: None,
            plan_slug: plan.into(),
            locale: "en".into(),
            country: "ES".into(),
        };
        store.set_company(&company).expect("company");
        (dir, store)
    }

    /// A live key with `scopes`, no expiry, no client.
    pub(crate) fn key(store: &Store, scopes: &[&str]) -> IssuedKey {
        let new = NewKey {
            name: "k".into(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            expires_in: None,
            client_id: None,
            mode: Mode::Live,
            guard_channel: None,
        };
        create_key(store, &new).expect("create key")
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{fresh, key};
    use super::*;
    use crate::clock::ManualClock;
    use crate::tools::{Category, Idempotency};

    fn tool(name: &'static str, scope: &'static str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            title: name.into(),
            description: "".into(),
            category: Category::Read,
            scope: scope.into(),
            idempotency: Idempotency::NotApplicable,
            input_schema: serde_json::json!({"type": "object"}),
            output_schema: None,
        }
    }

    fn reason(err: &McpError) -> serde_json::Value {
        err.fields()["details"]["reason"].clone()
    }

    #[test]
    fn dummy_hash_is_a_valid_phc_with_the_owasp_parameters() {
        let hash = argon2::password_hash::PasswordHash::new(DUMMY_HASH).expect("phc");
        assert_eq!(hash.algorithm.as_str(), "argon2id");
        let params = argon2::Params::try_from(&hash).expect("params");
        assert_eq!(
            (params.m_cost(), params.t_cost(), params.p_cost()),
            (19_456, 2, 1)
        );
    }

    #[test]
    fn token_format_and_parsing() {
        let (_dir, store) = fresh("pro");
        let issued = key(&store, &["*"]);
        let token = issued.token.expose();
        assert!(token.starts_with("tg_live_"));
        let parsed = parse_token(token).ok().expect("parses");
        assert_eq!(parsed.public_id, issued.public_id);
        assert_eq!(parsed.public_id.len(), 20);
        assert_eq!(parsed.secret.len(), 43);
        for bad in [
            "tg_live_",
            "tg_live_abc_def",
            "bearer x",
            "tg_live_abcdefgh12",
            "tg_live_abcd!fgh_0123456789abcdefgh",
        ] {
            assert!(
                matches!(parse_token(bad), Err(Failure::Invalid("malformed"))),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_token("tg_cs_abc"),
            Err(Failure::WrongType("client_secret"))
        ));
        assert_eq!(format!("{:?}", issued.token), "Secret(<redacted>)");
    }

    #[test]
    fn argon2_runs_once_per_token_and_revocation_applies_next_call() {
        let (_dir, store) = fresh("pro");
        let issued = key(&store, &["invoices:read"]);
        let auth = Authenticator::new(store.clone(), Clock::System);
        for _ in 0..5 {
            let p = auth
                .authenticate(Some(issued.token.expose()), "s")
                .expect("valid");
            assert_eq!(p.scopes, vec!["invoices:read".to_owned()]);
        }
        assert_eq!(auth.argon2_runs(), 1);
        assert!(revoke_key(&store, &issued.public_id).expect("revoke"));
        let err = auth
            .authenticate(Some(issued.token.expose()), "s")
            .expect_err("revoked");
        assert_eq!(err.kind(), ErrorKind::InvalidToken);
        assert_eq!(reason(&err), "revoked");
        assert!(!revoke_key(&store, &issued.public_id).expect("again"));
        assert_eq!(auth.argon2_runs(), 1);
    }

    #[test]
    fn rotation_keeps_the_old_secret_for_the_grace_only() {
        let (_dir, store) = fresh("pro");
        let old = key(&store, &["*"]);
        let auth = Authenticator::new(store.clone(), Clock::System);
        auth.authenticate(Some(old.token.expose()), "s")
            .expect("old valid");
        let new = rotate_key(&store, &old.public_id, Duration::from_secs(3600)).expect("rotate");
        assert_eq!(new.public_id, old.public_id);
        auth.authenticate(Some(old.token.expose()), "s")
            .expect("old valid in grace");
        auth.authenticate(Some(new.token.expose()), "s")
            .expect("new valid");
        let newest = rotate_key(&store, &old.public_id, Duration::ZERO).expect("rotate again");
        let err = auth
            .authenticate(Some(old.token.expose()), "s")
            .expect_err("old gone");
        assert_eq!(reason(&err), "unknown");
        let err = auth
            .authenticate(Some(new.token.expose()), "s")
            .expect_err("no grace");
        assert_eq!(reason(&err), "unknown");
        auth.authenticate(Some(newest.token.expose()), "s")
            .expect("newest valid");
    }

    #[test]
    fn unknown_ids_spend_one_dummy_verification() {
        let (_dir, store) = fresh("pro");
        let auth = Authenticator::new(store, Clock::System);
        let token = format!("tg_live_0123456789abcdef0123_{}", "A".repeat(43));
        let err = auth.authenticate(Some(&token), "s").expect_err("unknown");
        assert_eq!(reason(&err), "unknown");
        assert_eq!(auth.argon2_runs(), 1);
        let err = auth.authenticate(None, "s").expect_err("missing");
        assert_eq!(reason(&err), "missing");
        assert_eq!(auth.argon2_runs(), 1);
    }

    #[test]
    fn throttle_refuses_before_argon2_and_resets_with_the_window() {
        let (_dir, store) = fresh("pro");
        let (auth, now) = clocked(store, 1_000_045);
        let token = format!("tg_live_0123456789abcdef0123_{}", "B".repeat(43));
        for _ in 0..AUTH_FAILURE_LIMIT {
            auth.authenticate(Some(&token), "peer")
                .expect_err("unknown");
        }
        let err = auth
            .authenticate(Some(&token), "peer")
            .expect_err("throttled");
        assert_eq!(err.kind(), ErrorKind::RateLimited);
        assert_eq!(err.fields()["bucket"], "auth");
        assert_eq!(err.fields()["limit"], 10);
        // The window started at 1_000_020 (a multiple of 60) and ends a minute later.
        assert_eq!(err.fields()["reset"], 1_000_080);
        assert_eq!(err.fields()["retry_after"], 35);
        assert_eq!(auth.argon2_runs(), u64::from(AUTH_FAILURE_LIMIT));
        now.advance(Duration::from_secs(60));
        let err = auth
            .authenticate(Some(&token), "peer")
            .expect_err("new window");
        assert_eq!(err.kind(), ErrorKind::InvalidToken);
    }

    /// An authenticator on a settable clock.
    fn clocked(store: Store, start: i64) -> (Authenticator, ManualClock) {
        let now = ManualClock::at_unix_secs(start);
        (Authenticator::new(store, now.clock()), now)
    }

    fn envelope(err: &McpError) -> String {
        serde_json::to_string(&err.envelope(crate::config::Locale::En)).expect("serialize")
    }

    #[test]
    fn the_argon2_ceiling_holds_across_sources_and_spares_cached_tokens() {
        let (_dir, store) = fresh("pro");
        let (valid, later) = (key(&store, &["*"]), key(&store, &["*"]));
        let (auth, now) = clocked(store, 2_000_000);
        auth.limit_argon2_per_second(5);
        auth.authenticate(Some(valid.token.expose()), "http:10.0.0.1")
            .expect("verified and cached");
        now.advance(Duration::from_secs(1));
        let before = auth.argon2_runs();
        let (mut unknown, mut ceiling) = (0, 0);
        for i in 0..200 {
            let token = format!("tg_live_{:020x}_{}", i, "C".repeat(43));
            let source = format!("http:10.1.{}.{}", i / 250, i % 250);
            let err = auth.authenticate(Some(&token), &source).expect_err("bad");
            match err.kind() {
                ErrorKind::InvalidToken => unknown += 1,
                ErrorKind::RateLimited => {
                    ceiling += 1;
                    assert_eq!(err.fields()["bucket"], "auth");
                    assert_eq!(err.fields()["limit"], 5);
                    assert_eq!(err.fields()["retry_after"], 1);
                    assert_eq!(err.fields()["reset"], 2_000_002);
                    assert_eq!(reason(&err), "server_verification_ceiling");
                }
                other => panic!("unexpected {other:?}"),
            }
            // The cached key keeps working in the middle of the flood, without argon2.
            auth.authenticate(Some(valid.token.expose()), "http:10.0.0.1")
                .expect("cached key works");
        }
        assert_eq!((unknown, ceiling), (5, 195));
        assert_eq!(auth.argon2_runs() - before, 5);
        // A valid key not yet verified waits for the next second like everyone else…
        let err = auth
            .authenticate(Some(later.token.expose()), "http:10.0.0.2")
            .expect_err("ceiling");
        assert_eq!(err.kind(), ErrorKind::RateLimited);
        // …and refusals by the ceiling are not charged to their source's allowance.
        let token = format!("tg_live_{:020x}_{}", 7, "D".repeat(43));
        for _ in 0..(2 * AUTH_FAILURE_LIMIT) {
            let err = auth
                .authenticate(Some(&token), "http:10.9.9.9")
                .expect_err("bad");
            assert_eq!(reason(&err), "server_verification_ceiling");
        }
        now.advance(Duration::from_secs(1));
        auth.authenticate(Some(later.token.expose()), "http:10.0.0.2")
            .expect("next second");
        let err = auth
            .authenticate(Some(&token), "http:10.9.9.9")
            .expect_err("bad");
        assert_eq!(err.kind(), ErrorKind::InvalidToken);
        assert_eq!(auth.argon2_runs() - before, 7);
    }

    #[test]
    fn a_stranger_learns_nothing_about_a_public_id() {
        let (_dir, store) = fresh("pro");
        let new_key = |mode, expires_in| NewKey {
            name: "e".into(),
            scopes: vec!["*".into()],
            expires_in,
            client_id: None,
            mode,
            guard_channel: None,
        };
        let revoked = key(&store, &["*"]);
        assert!(revoke_key(&store, &revoked.public_id).expect("revoke"));
        let minute = Some(Duration::from_secs(60));
        let expired = create_key(&store, &new_key(Mode::Live, minute)).expect("key");
        let test_key = create_key(&store, &new_key(Mode::Test, None)).expect("key");
        let fresh_key = key(&store, &["*"]);
        // Rotated with an hour of grace: two secrets work, and a wrong one must still cost
        // what it costs everywhere else.
        let rotated = key(&store, &["*"]);
        let rotated_out = rotated.token.clone();
        let rotated =
            rotate_key(&store, &rotated.public_id, Duration::from_secs(3600)).expect("rotate");
        let client = create_client(&store, "agent", &["*".to_owned()]).expect("client");
        let principal = auth_client(&store, &client);
        let access = issue_access_token(
            &store,
            &principal,
            &[],
            Duration::from_secs(7200),
            &Clock::System,
        )
        .expect("access token");
        // Two minutes on, the expiring key has expired.
        let (auth, _now) = clocked(store, Clock::System.unix_secs() + 120);
        // The same prefix and public id, another secret.
        let wrong = |token: &Secret| {
            let parts: Vec<&str> = token.expose().splitn(4, '_').collect();
            format!("{}_{}_{}_{}", parts[0], parts[1], parts[2], "W".repeat(43))
        };
        let mut answers = Vec::new();
        let unknown = format!("tg_live_{}_{}", "0".repeat(20), "W".repeat(43));
        for (i, token) in [
            unknown,
            wrong(&revoked.token),
            wrong(&expired.token),
            wrong(&test_key.token),
            wrong(&access.token),
            wrong(&fresh_key.token),
            wrong(&rotated.token),
        ]
        .iter()
        .enumerate()
        {
            let before = auth.argon2_runs();
            let source = format!("s{i}");
            let err = auth.authenticate(Some(token), &source).expect_err("wrong");
            assert_eq!(auth.argon2_runs() - before, 1, "{token}");
            answers.push(envelope(&err));
        }
        assert!(answers.iter().all(|a| *a == answers[0]), "{answers:#?}");
        assert!(
            answers[0].contains("\"reason\":\"unknown\""),
            "{}",
            answers[0]
        );
        // Only the holder of the secret learns the standing, after the same work.
        for (token, expected) in [
            (&revoked.token, "revoked"),
            (&expired.token, "expired"),
            (&test_key.token, "test_key_on_live_installation"),
        ] {
            let before = auth.argon2_runs();
            let err = auth
                .authenticate(Some(token.expose()), "holder")
                .expect_err("standing");
            assert_eq!(auth.argon2_runs() - before, 1);
            assert_eq!(reason(&err), expected);
        }
        // Both secrets of the rotated key work in its grace hour, each after one run.
        for token in [&rotated.token, &rotated_out] {
            let before = auth.argon2_runs();
            auth.authenticate(Some(token.expose()), "holder")
                .expect("in its grace period");
            assert_eq!(auth.argon2_runs() - before, 1);
        }
    }

    #[test]
    fn a_rotated_secret_shares_its_salt_and_one_run_decides_both() {
        let old = Secret::new("old-secret".into());
        let new = Secret::new("new-secret".into());
        let old_hash = hash_secret(&old).expect("hash");
        let new_hash = hash_secret_beside(&new, Some(&old_hash)).expect("hash");
        let salt = |phc: &str| phc.rsplit('$').nth(1).map(str::to_owned);
        assert_eq!(salt(&old_hash), salt(&new_hash));
        assert_ne!(old_hash, new_hash);
        let check = |secret: &str| verify_current_or_previous(&new_hash, Some(&old_hash), secret);
        assert_eq!(check("new-secret"), (Some(Matched::Current), 1));
        assert_eq!(check("old-secret"), (Some(Matched::Previous), 1));
        assert_eq!(check("wrong"), (None, 1));
        // A pair hashed under different salts (rotated before salts were shared) still
        // works, at one run per hash.
        let unrelated = hash_secret(&new).expect("hash");
        assert_ne!(salt(&unrelated), salt(&old_hash));
        let legacy = |secret: &str| verify_current_or_previous(&unrelated, Some(&old_hash), secret);
        assert_eq!(legacy("new-secret"), (Some(Matched::Current), 1));
        assert_eq!(legacy("old-secret"), (Some(Matched::Previous), 2));
        assert_eq!(legacy("wrong"), (None, 2));
        // A sibling of other parameters lends nothing.
        let other = "$argon2id$v=19$m=8192,t=1,p=1$9Qd8wJ2zGk5Kx1m7uJ1pYg$\
                     3Wl4ROgWJ9qgIYo3X7QTUkAxzn3lVJ4C3IYVhkqmC8M";
        let fresh = hash_secret_beside(&new, Some(other)).expect("hash");
        assert_ne!(salt(&fresh), salt(other));
    }

    fn auth_client(store: &Store, issued: &IssuedClient) -> OAuthClient {
        Authenticator::new(store.clone(), Clock::System)
            .verify_client_secret(&issued.client_id, &issued.secret, "s")
            .expect("client")
    }

    #[test]
    fn a_revoked_client_is_told_only_to_the_holder_of_its_secret() {
        let (_dir, store) = fresh("pro");
        let issued = create_client(&store, "agent", &["*".to_owned()]).expect("client");
        assert!(revoke_client(&store, &issued.client_id).expect("revoke"));
        let auth = Authenticator::new(store, Clock::System);
        let wrong = Secret::new(format!("tg_cs_{}", "W".repeat(43)));
        let stranger = auth
            .verify_client_secret(&issued.client_id, &wrong, "a")
            .expect_err("wrong");
        let unknown = auth
            .verify_client_secret("no-such-client", &wrong, "b")
            .expect_err("unknown");
        assert_eq!(envelope(&stranger), envelope(&unknown));
        assert_eq!(auth.argon2_runs(), 2);
        let holder = auth
            .verify_client_secret(&issued.client_id, &issued.secret, "c")
            .expect_err("revoked");
        assert_eq!(holder.kind(), ErrorKind::ClientRevoked);
        assert_eq!(auth.argon2_runs(), 3);
    }

    #[test]
    fn throttle_memory_is_bounded() {
        let mut throttle = Throttle::default();
        for i in 0..(THROTTLE_MAX_SOURCES + 500) {
            let _ = throttle.admit(&format!("peer-{i}"), 120);
        }
        assert!(throttle.sources.len() <= THROTTLE_MAX_SOURCES + 1);
        assert_eq!(throttle.sources[THROTTLE_OVERFLOW].count, 10);
        // A new window frees the slots of the old one.
        throttle.admit("late", 180).expect("admitted");
        assert!(throttle.sources.contains_key("late"));
    }

    #[test]
    fn scopes_then_plan_then_allowance() {
        let (_dir, store) = fresh("free");
        let auth = Authenticator::new(store.clone(), Clock::System);
        let reader = Principal {
            credential_id: "x".into(),
            client_id: None,
            scopes: vec!["invoices:read".into()],
            mode: Mode::Live,
            guard_channel: None,
            installation: crate::guards::auth::Mode::Live,
        };
        let err = auth
            .check_access(&reader, &tool("create_invoice", "invoices:write"))
            .expect_err("scope");
        assert_eq!(err.fields()["required_scope"], "invoices:write");
        assert_eq!(
            err.fields()["provided_scopes"],
            serde_json::json!(["invoices:read"])
        );
        let admin = Principal {
            scopes: vec!["*".into()],
            ..reader.clone()
        };
        let err = auth
            .check_access(&admin, &tool("send_invoice", "invoices:send"))
            .expect_err("plan");
        assert_eq!(err.kind(), ErrorKind::PlanUpgradeRequired);
        assert_eq!(err.fields()["required_plan"], "starter");
        let err = auth
            .check_access(&admin, &tool("export_invoices", "reports:generate"))
            .expect_err("plan");
        assert_eq!(err.fields()["required_plan"], "pro");
        assert!(!auth.can_see(&admin, &tool("send_invoice", "invoices:send")));
        assert!(auth.can_see(&admin, &tool("get_invoice", "invoices:read")));
        for _ in 0..3 {
            key(&store, &["*"]);
        }
        let err = create_key(
            &store,
            &NewKey {
                name: "fourth".into(),
                scopes: vec!["*".into()],
                expires_in: None,
                client_id: None,
                mode: Mode::Live,
                guard_channel: None,
            },
        )
        .expect_err("allowance");
        assert!(
            matches!(
                err,
                CredentialError::PlanLimit {
                    limit: 3,
                    active: 3,
                    ..
                }
            ),
            "{err}"
        );
        auth.check_access(&admin, &tool("get_invoice", "invoices:read"))
            .expect("within allowance");
        store
            .sql_write(|tx| {
                tx.execute(
                    "UPDATE plans SET max_active_keys = 2 WHERE slug = 'free'",
                    [],
                )
            })
            .expect("downgrade");
        let err = auth
            .check_access(&admin, &tool("get_invoice", "invoices:read"))
            .expect_err("over");
        assert_eq!(err.kind(), ErrorKind::PlanLimitExceeded);
        assert_eq!(err.fields()["limit"], 2);
        assert_eq!(err.fields()["required_plan"], "starter");
        assert!(auth.can_see(&admin, &tool("get_invoice", "invoices:read")));
    }

    #[test]
    fn scope_syntax() {
        assert_eq!(
            parse_scope_list("invoices:read, *,invoices:read").expect("ok"),
            vec!["invoices:read", "*"]
        );
        for bad in [
            "invoices",
            "Invoices:read",
            ":read",
            "invoices:",
            "a:b:c",
            "in voices:read",
        ] {
            assert!(
                matches!(parse_scope(bad), Err(CredentialError::BadScope(_))),
                "{bad}"
            );
        }
        assert!(
            matches!(parse_scope_list(" , "), Err(CredentialError::BadScope(s)) if s.is_empty())
        );
    }

    #[test]
    fn clients_and_access_tokens() {
        let (_dir, store) = fresh("pro");
        let issued = create_client(&store, "agent", &["invoices:read".to_owned()]).expect("client");
        assert!(issued.secret.expose().starts_with("tg_cs_"));
        let auth = Authenticator::new(store.clone(), Clock::System);
        let err = auth
            .authenticate(Some(issued.secret.expose()), "s")
            .expect_err("not a bearer");
        assert_eq!(err.kind(), ErrorKind::InvalidTokenType);
        let client = auth
            .verify_client_secret(&issued.client_id, &issued.secret, "s")
            .expect("secret ok");
        let wrong = Secret::new("tg_cs_nope".into());
        assert_eq!(
            auth.verify_client_secret(&issued.client_id, &wrong, "s")
                .expect_err("bad")
                .kind(),
            ErrorKind::InvalidToken
        );
        let denied = issue_access_token(
            &store,
            &client,
            &["invoices:write".to_owned()],
            Duration::from_secs(600),
            &Clock::System,
        );
        assert!(matches!(
            denied,
            Err(CredentialError::ScopeNotAllowed { .. })
        ));
        let token = issue_access_token(
            &store,
            &client,
            &[],
            Duration::from_secs(600),
            &Clock::System,
        )
        .expect("token");
        let runs = auth.argon2_runs();
        let p = auth
            .authenticate(Some(token.token.expose()), "s")
            .expect("access token");
        assert_eq!(p.client_id.as_deref(), Some(issued.client_id.as_str()));
        assert_eq!(p.scopes, vec!["invoices:read".to_owned()]);
        assert_eq!(auth.argon2_runs(), runs, "access tokens need no argon2");
        assert!(revoke_client(&store, &issued.client_id).expect("revoke"));
        let err = auth
            .authenticate(Some(token.token.expose()), "s")
            .expect_err("client revoked");
        assert_eq!(err.kind(), ErrorKind::ClientRevoked);
    }

    #[test]
    fn test_keys_need_test_mode_and_expiry_is_enforced() {
        let (_dir, store) = fresh("pro");
        let new = NewKey {
            name: "t".into(),
            scopes: vec!["*".into()],
            expires_in: Some(Duration::from_secs(60)),
            client_id: None,
            mode: Mode::Test,
            guard_channel: None,
        };
        let issued = create_key(&store, &new).expect("test key");
        assert!(issued.token.expose().starts_with("tg_test_"));
        let auth = Authenticator::new(store.clone(), Clock::System);
        let err = auth
            .authenticate(Some(issued.token.expose()), "s")
            .expect_err("live installation");
        assert_eq!(err.kind(), ErrorKind::InvalidTokenType);
        store
            .sql_write(|tx| tx.execute("UPDATE company SET mode = 'test'", []))
            .expect("test mode");
        auth.authenticate(Some(issued.token.expose()), "s")
            .expect("test mode accepts");
        store
            .sql_write(|tx| tx.execute("UPDATE credentials SET expires_at = 1", []))
            .expect("expire");
        let err = auth
            .authenticate(Some(issued.token.expose()), "s")
            .expect_err("expired");
        assert_eq!(reason(&err), "expired");
    }
}
