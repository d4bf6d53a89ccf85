//! Authentication and access: who is calling, and which tools their scopes and the
//! company's plan let them see and call. Also the credential model the CLI and the OAuth
//! token endpoint manage: API keys, OAuth clients and their short-lived access tokens.
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

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use base64::Engine as _;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::catalog::{ErrorKind, McpError};
use crate::clock::Clock;
pub use crate::store::credentials::OAuthClient;
use crate::store::credentials::{self, NewClient, NewCredential, Revocable};
use crate::store::plans::{self, Plan};
use crate::store::store_failure;
use crate::store::{Conn, Store, StoreError, Tx};
use crate::tools::ToolSpec;

/// Prefix of live API keys.
pub const LIVE_PREFIX: &str = "tg_live_";
/// Prefix of test API keys (accepted only while the installation is in test mode).
pub const TEST_PREFIX: &str = "tg_test_";
/// Prefix of OAuth client secrets (never valid as a bearer token).
pub const CLIENT_SECRET_PREFIX: &str = "tg_cs_";
/// The super-scope: grants every tool.
pub const SUPER_SCOPE: &str = "*";
/// Failed authentications a source may make per window before it is throttled.
pub const AUTH_FAILURE_LIMIT: u32 = 10;
/// The throttle's fixed window, in seconds.
pub const AUTH_FAILURE_WINDOW_SECS: i64 = 60;
pub use crate::config::DEFAULT_ARGON2_PER_SECOND;

/// Random bytes of a public id (80 bits, 20 hex characters).
const PUBLIC_ID_BYTES: usize = 10;
/// Random bytes of a secret (256 bits, 43 base64url characters).
const SECRET_BYTES: usize = 32;
/// argon2id memory cost in KiB (OWASP: 19 MiB).
const ARGON2_MEMORY_KIB: u32 = 19_456;
/// argon2id iterations (OWASP: 2).
const ARGON2_ITERATIONS: u32 = 2;
/// argon2id lanes (OWASP: 1).
const ARGON2_LANES: u32 = 1;
/// Distinct sources the throttle tracks; beyond it new sources share one overflow slot,
/// so memory stays bounded and a flood from many sources still cannot burn the CPU.
const THROTTLE_MAX_SOURCES: usize = 10_000;
/// The shared slot of sources beyond [`THROTTLE_MAX_SOURCES`] (not a valid peer address).
const THROTTLE_OVERFLOW: &str = "\u{0}overflow";
/// Verified tokens kept in memory; the cache is emptied when full (re-verification costs
/// one argon2 run per live token).
const CACHE_MAX_ENTRIES: usize = 10_000;
/// `last_used_at` is written at most this often per credential.
const LAST_USED_INTERVAL_SECS: i64 = 60;
/// Expired OAuth access tokens are deleted this long after they expire.
const ACCESS_TOKEN_RETENTION_SECS: i64 = 86_400;
/// Stored form of an access token's secret: SHA-256 (the secret has 256 random bits).
const ACCESS_HASH_PREFIX: &str = "sha256$";
/// A well-formed PHC string (same parameters) with no known preimage: unknown public ids
/// are verified against it, so that their timing matches that of known ones.
const DUMMY_HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$9Qd8wJ2zGk5Kx1m7uJ1pYg$\
                          3Wl4ROgWJ9qgIYo3X7QTUkAxzn3lVJ4C3IYVhkqmC8M";

/// A secret value (a token, a client secret): its `Debug` is redacted so it cannot reach
/// a log by accident, and there is no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The secret itself, for printing it once to the operator or sending it to a client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl From<Mode> for crate::tools::Book {
    /// A credential's mode decides its book: test keys never see the live rows.
    fn from(mode: Mode) -> crate::tools::Book {
        match mode {
            Mode::Live => crate::tools::Book::Live,
            Mode::Test => crate::tools::Book::Test,
        }
    }
}

/// Whether a credential is a live or a test key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `tg_live_`: works on every installation.
    Live,
    /// `tg_test_`: works only while the installation is in test mode.
    Test,
}

impl Mode {
    /// `"live"` or `"test"`, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Live => "live",
            Mode::Test => "test",
        }
    }

    /// Parses `"live"` or `"test"`.
    pub fn parse(text: &str) -> Option<Mode> {
        match text {
            "live" => Some(Mode::Live),
            "test" => Some(Mode::Test),
            _ => None,
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Mode::Live => LIVE_PREFIX,
            Mode::Test => TEST_PREFIX,
        }
    }

    /// The schema's CHECK constraints keep stored values to the two known ones.
    fn from_stored(text: &str) -> Mode {
        Mode::parse(text).unwrap_or(Mode::Live)
    }
}

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

/// A token as presented, split into its parts.
struct PresentedToken<'a> {
    mode: Mode,
    public_id: &'a str,
    secret: &'a str,
}

/// Splits `tg_<mode>_<public id>_<secret>`; anything else is malformed.
fn parse_token(token: &str) -> Result<PresentedToken<'_>, Failure> {
    if token.starts_with(CLIENT_SECRET_PREFIX) {
        return Err(Failure::WrongType("client_secret"));
    }
    let (mode, rest) = if let Some(rest) = token.strip_prefix(LIVE_PREFIX) {
        (Mode::Live, rest)
    } else if let Some(rest) = token.strip_prefix(TEST_PREFIX) {
        (Mode::Test, rest)
    } else {
        return Err(Failure::Invalid("malformed"));
    };
    let (public_id, secret) = rest.split_once('_').ok_or(Failure::Invalid("malformed"))?;
    let id_ok =
        (8..=64).contains(&public_id.len()) && public_id.bytes().all(|b| b.is_ascii_alphanumeric());
    let secret_ok = (16..=128).contains(&secret.len())
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !id_ok || !secret_ok {
        return Err(Failure::Invalid("malformed"));
    }
    Ok(PresentedToken {
        mode,
        public_id,
        secret,
    })
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

/// Failure counters per source, in fixed windows.
#[derive(Default)]
struct Throttle {
    sources: HashMap<String, FailureWindow>,
    /// Window start at which expired slots were last pruned.
    pruned_window: i64,
}

#[derive(Clone, Copy)]
struct FailureWindow {
    start: i64,
    count: u32,
}

/// One admitted attempt: refunded when it succeeds.
struct Ticket {
    key: String,
    start: i64,
}

impl Throttle {
    /// The slot `source` counts in: its own, or the overflow slot once the map is full.
    fn slot_key(&mut self, source: &str, start: i64) -> String {
        if self.sources.contains_key(source) || self.sources.len() < THROTTLE_MAX_SOURCES {
            return source.to_owned();
        }
        if self.pruned_window != start {
            self.sources.retain(|_, w| w.start == start);
            self.pruned_window = start;
        }
        if self.sources.len() < THROTTLE_MAX_SOURCES {
            source.to_owned()
        } else {
            THROTTLE_OVERFLOW.to_owned()
        }
    }

    fn window(&mut self, key: String, start: i64) -> &mut FailureWindow {
        let window = self
            .sources
            .entry(key)
            .or_insert(FailureWindow { start, count: 0 });
        if window.start != start {
            *window = FailureWindow { start, count: 0 };
        }
        window
    }

    /// Reserves one attempt, or refuses when the source used up its failures.
    fn admit(&mut self, source: &str, now: i64) -> Result<Ticket, McpError> {
        let start = now - now.rem_euclid(AUTH_FAILURE_WINDOW_SECS);
        let key = self.slot_key(source, start);
        let window = self.window(key.clone(), start);
        if window.count >= AUTH_FAILURE_LIMIT {
            let reset = start + AUTH_FAILURE_WINDOW_SECS;
            let retry_after = u64::try_from(reset - now).unwrap_or(1).max(1);
            return Err(McpError::rate_limited(
                "auth",
                u64::from(AUTH_FAILURE_LIMIT),
                u64::try_from(reset).unwrap_or(0),
                retry_after,
            ));
        }
        window.count += 1;
        Ok(Ticket { key, start })
    }

    /// Gives back the attempt of a success (or of a storage failure).
    fn refund(&mut self, ticket: Ticket) {
        if let Some(window) = self.sources.get_mut(&ticket.key)
            && window.start == ticket.start
        {
            window.count = window.count.saturating_sub(1);
        }
    }

    /// Counts a failure that needed no admission (a cached token that is now refused).
    fn record_failure(&mut self, source: &str, now: i64) {
        let start = now - now.rem_euclid(AUTH_FAILURE_WINDOW_SECS);
        let key = self.slot_key(source, start);
        let window = self.window(key, start);
        window.count = window.count.saturating_add(1);
    }
}

/// The server-wide ceiling on argon2 work: verifications started per second of the
/// clock, whatever their source. The per-source throttle bounds what one address can
/// spend; this bounds what many addresses together can.
struct Ceiling {
    per_second: AtomicU32,
    /// The second being counted and the verifications started in it.
    window: Mutex<(i64, u32)>,
}

impl Ceiling {
    fn new(per_second: u32) -> Ceiling {
        Ceiling {
            per_second: AtomicU32::new(per_second.max(1)),
            window: Mutex::new((i64::MIN, 0)),
        }
    }

    /// Reserves one verification in the second `now`, or refuses until the next second.
    fn admit(&self, now: i64) -> Result<(), McpError> {
        let limit = self.per_second.load(Ordering::Relaxed);
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        if window.0 != now {
            *window = (now, 0);
        }
        if window.1 >= limit {
            let reset = u64::try_from(now.saturating_add(1)).unwrap_or(0);
            return Err(McpError::rate_limited("auth", u64::from(limit), reset, 1)
                .detail("reason", "server_verification_ceiling"));
        }
        window.1 += 1;
        Ok(())
    }
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
        if self.argon2_verify(&row.secret_hash, secret) {
            return Some(fingerprint(&row.secret_hash));
        }
        let previous = row.active_previous(now)?;
        self.argon2_verify(previous, secret)
            .then(|| fingerprint(previous))
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

    /// Scope and plan check for one `tools/call`: the scope first (`insufficient_scope`),
    /// then the plan (`plan_upgrade_required` for an excluded tool, `plan_limit_exceeded`
    /// for a used-up allowance). The plan is read on every call, so a change made by
    /// `tollgate plan set` in another process applies to the next call.
    pub fn check_access(&self, principal: &Principal, tool: &ToolSpec) -> Result<(), McpError> {
        let facts = self.read_access_facts()?;
        self.check_access_with(principal, tool, &facts)
    }

    /// [`Authenticator::check_access`] on plan facts already read (inside the charging
    /// transaction, by [`AccessFacts::read_on`]).
    pub fn check_access_with(
        &self,
        principal: &Principal,
        tool: &ToolSpec,
        facts: &AccessFacts,
    ) -> Result<(), McpError> {
        check_scope(principal, tool)?;
        let Some(plan) = &facts.plan else {
            return Ok(());
        };
        if plan.excludes(tool.name) {
            return Err(self.upgrade_required(plan, tool.name));
        }
        self.check_allowances(plan, facts.active_keys)
    }

    /// The plan and, when the plan caps them, the active keys, read now.
    pub fn read_access_facts(&self) -> Result<AccessFacts, McpError> {
        let now = self.clock.unix_secs();
        self.store
            .with_conn(|conn| AccessFacts::read_on(conn, now))
            .map_err(|e| store_failure(e, false))
    }

    /// Whether `tool` appears in the principal's `tools/list`: its scope and its plan
    /// inclusion (allowances are not visibility: an over-allowance company still sees
    /// its tools, and each call says what to fix).
    pub fn can_see(&self, principal: &Principal, tool: &ToolSpec) -> bool {
        self.visibility(principal).can_see(tool)
    }

    /// What `principal` may see, with the plan read once for a whole `tools/list`.
    pub fn visibility<'p>(&self, principal: &'p Principal) -> Visibility<'p> {
        let plan = self.store.company_plan().map_err(|e| {
            tracing::warn!(cause = %e, "cannot read the plan; hiding the tools");
        });
        Visibility { principal, plan }
    }

    fn upgrade_required(&self, plan: &Plan, tool: &str) -> McpError {
        let err = McpError::new(ErrorKind::PlanUpgradeRequired)
            .detail("current_plan", plan.slug.clone())
            .detail("tool", tool);
        match self.store.plans() {
            Ok(plans) => match smallest_plan_above(&plans, plan.rank, |p| !p.excludes(tool)) {
                Some(slug) => err.with("required_plan", slug),
                None => err,
            },
            Err(e) => store_failure(e, false),
        }
    }

    fn check_allowances(&self, plan: &Plan, active: Option<i64>) -> Result<(), McpError> {
        let (Some(limit), Some(active)) = (plan.max_active_keys, active) else {
            return Ok(());
        };
        if active <= limit {
            return Ok(());
        }
        let plans = self.store.plans().map_err(|e| store_failure(e, false))?;
        let fits = |p: &Plan| p.max_active_keys.is_none_or(|max| max >= active);
        let err = McpError::new(ErrorKind::PlanLimitExceeded)
            .with("limit", limit)
            .detail("allowance", "active_keys")
            .detail("active", active)
            .detail("current_plan", plan.slug.clone());
        Err(match smallest_plan_above(&plans, plan.rank, fits) {
            Some(slug) => err.with("required_plan", slug),
            None => err,
        })
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

/// The tools one principal may see: its scopes and the company's plan, read once.
pub struct Visibility<'p> {
    principal: &'p Principal,
    /// The plan (`None`: no company yet); `Err` when it could not be read.
    plan: Result<Option<Plan>, ()>,
}

impl Visibility<'_> {
    /// Whether `tool` appears in the principal's `tools/list`.
    pub fn can_see(&self, tool: &ToolSpec) -> bool {
        if check_scope(self.principal, tool).is_err() {
            return false;
        }
        match &self.plan {
            Ok(Some(plan)) => !plan.excludes(tool.name),
            Ok(None) => true,
            Err(()) => false,
        }
    }
}

/// `insufficient_scope` unless the principal holds `*` or the tool's scope.
fn check_scope(principal: &Principal, tool: &ToolSpec) -> Result<(), McpError> {
    if grants(&principal.scopes, tool.scope) {
        Ok(())
    } else {
        Err(McpError::insufficient_scope(tool.scope, &principal.scopes))
    }
}

/// Whether `held` includes `required` (exactly, or through `*`).
pub fn grants(held: &[String], required: &str) -> bool {
    held.iter().any(|s| s == SUPER_SCOPE || s == required)
}

/// What the plan check of a call reads: the company's plan (`None` before `tollgate
/// init`) and, when that plan caps active keys, how many are active.
#[derive(Debug, Clone, Default)]
pub struct AccessFacts {
    plan: Option<Plan>,
    active_keys: Option<i64>,
}

impl AccessFacts {
    /// Reads the facts on `conn` at `now` (inside the charging transaction, for one).
    pub fn read_on(conn: &Conn<'_>, now: i64) -> Result<AccessFacts, StoreError> {
        let plan = plans::company_plan_on(conn)?;
        let active_keys = match plan.as_ref().and_then(|p| p.max_active_keys) {
            Some(_) => Some(credentials::count_active_keys(conn, now)?),
            None => None,
        };
        Ok(AccessFacts { plan, active_keys })
    }
}

/// The smallest plan above `rank` that `fits`; failing that, the smallest that fits at all.
fn smallest_plan_above(plans: &[Plan], rank: i64, fits: impl Fn(&Plan) -> bool) -> Option<String> {
    plans
        .iter()
        .find(|p| p.rank > rank && fits(p))
        .or_else(|| plans.iter().find(|p| fits(p)))
        .map(|p| p.slug.clone())
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

fn fingerprint(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

fn access_hash(secret: &str) -> String {
    format!(
        "{ACCESS_HASH_PREFIX}{}",
        hex(&Sha256::digest(secret.as_bytes()))
    )
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

// ---- Secrets and hashes ------------------------------------------------------------

fn random_bytes<const N: usize>() -> Result<[u8; N], CredentialError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| {
        CredentialError::Internal(format!(
            "the operating system's random generator failed: {e}"
        ))
    })?;
    Ok(bytes)
}

fn new_public_id() -> Result<String, CredentialError> {
    Ok(hex(&random_bytes::<PUBLIC_ID_BYTES>()?))
}

fn new_secret() -> Result<String, CredentialError> {
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random_bytes::<SECRET_BYTES>()?))
}

fn hasher() -> Result<Argon2<'static>, CredentialError> {
    let params = Params::new(ARGON2_MEMORY_KIB, ARGON2_ITERATIONS, ARGON2_LANES, None)
        .map_err(|e| CredentialError::Internal(format!("argon2 parameters: {e}")))?;
    Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
}

/// The argon2id PHC string of `secret` (OWASP parameters, random 128-bit salt).
pub fn hash_secret(secret: &Secret) -> Result<String, CredentialError> {
    let salt = SaltString::encode_b64(&random_bytes::<16>()?)
        .map_err(|e| CredentialError::Internal(format!("argon2 salt: {e}")))?;
    let hash = hasher()?
        .hash_password(secret.expose().as_bytes(), &salt)
        .map_err(|e| CredentialError::Internal(format!("argon2: {e}")))?;
    Ok(hash.to_string())
}

/// Whether `secret` matches the PHC string (its own parameters are used).
fn verify_phc(phc: &str, secret: &str) -> bool {
    PasswordHash::new(phc).is_ok_and(|hash| {
        Argon2::default()
            .verify_password(secret.as_bytes(), &hash)
            .is_ok()
    })
}

// ---- Scopes -----------------------------------------------------------------------

/// Parses one scope: `*`, or `resource:action` with each part lowercase letters, digits,
/// `_` or `-`, starting with a letter, at most 32 characters.
pub fn parse_scope(text: &str) -> Result<String, CredentialError> {
    let text = text.trim();
    if text == SUPER_SCOPE {
        return Ok(text.to_owned());
    }
    let part_ok = |p: &str| {
        (1..=32).contains(&p.len())
            && p.starts_with(|c: char| c.is_ascii_lowercase())
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    };
    match text.split_once(':') {
        Some((resource, action)) if part_ok(resource) && part_ok(action) => Ok(text.to_owned()),
        _ => Err(CredentialError::BadScope(text.to_owned())),
    }
}

/// Parses a comma-separated list of scopes (at least one; duplicates dropped).
pub fn parse_scope_list(list: &str) -> Result<Vec<String>, CredentialError> {
    let mut scopes: Vec<String> = Vec::new();
    for part in list.split(',').filter(|p| !p.trim().is_empty()) {
        let scope = parse_scope(part)?;
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    if scopes.is_empty() {
        return Err(CredentialError::BadScope(String::new()));
    }
    Ok(scopes)
}

// ---- Managing credentials and clients ----------------------------------------------

/// Why a management operation (CLI, token endpoint) failed. `Display` says how to fix it
/// and never contains a secret.
#[derive(Debug)]
pub enum CredentialError {
    /// There is no company yet.
    NotInitialised,
    /// No API key or access token has this public id.
    UnknownKey(String),
    /// The key is revoked or expired and cannot be rotated.
    KeyNotActive {
        /// The key's public id.
        id: String,
        /// `revoked` or `expired`.
        status: &'static str,
    },
    /// The operation applies to API keys only (not to OAuth access tokens).
    NotAnApiKey(String),
    /// No OAuth client has this id.
    UnknownClient(String),
    /// The OAuth client is revoked.
    ClientRevoked(String),
    /// A scope is not `resource:action` or `*` (empty: no scope was given).
    BadScope(String),
    /// The OAuth client is not allowed this scope.
    ScopeNotAllowed {
        /// The scope asked for.
        scope: String,
        /// The client.
        client_id: String,
    },
    /// The plan's active-keys allowance is used up.
    PlanLimit {
        /// The company's plan.
        plan: String,
        /// Keys the plan allows.
        limit: i64,
        /// Keys active now.
        active: i64,
    },
    /// A name or duration is unusable.
    Invalid(String),
    /// The database failed.
    Store(StoreError),
    /// The random generator or the hasher failed.
    Internal(String),
}

impl fmt::Display for CredentialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotInitialised => f.write_str("no company yet; run `tollgate init` first"),
            Self::UnknownKey(id) => write!(f, "no key has the id {id:?}; run `tollgate key list` to see the ids"),
            Self::KeyNotActive { id, status } => write!(
                f,
                "key {id} is {status} and cannot be rotated; create a new one with `tollgate key create`"
            ),
            Self::NotAnApiKey(id) => write!(
                f,
                "{id} is an OAuth access token, not an API key; access tokens expire on their own \
                 (revoke it with `tollgate key revoke {id}`)"
            ),
            Self::UnknownClient(id) => write!(f, "no OAuth client has the id {id:?}; run `tollgate client list` to see the ids"),
            Self::ClientRevoked(id) => write!(f, "OAuth client {id} is revoked; create a new one with `tollgate client create`"),
            Self::BadScope(scope) if scope.is_empty() => f.write_str(
                "no scope given; pass --scopes with scopes like invoices:read,clients:write (or * for all)",
            ),
            Self::BadScope(scope) => write!(
                f,
                "invalid scope {scope:?}: scopes look like resource:action in lowercase \
                 (e.g. invoices:read, clients:write), or * for every tool; separate them with commas"
            ),
            Self::ScopeNotAllowed { scope, client_id } => write!(
                f,
                "OAuth client {client_id} is not allowed the scope {scope:?}; use a scope from its \
                 allowed scopes (`tollgate client list`)"
            ),
            Self::PlanLimit { plan, limit, active } => write!(
                f,
                "the {plan} plan allows {limit} active keys and {active} are active; revoke one \
                 (`tollgate key revoke ID`) or move to a larger plan (`tollgate plan set SLUG`)"
            ),
            Self::Invalid(message) | Self::Internal(message) => f.write_str(message),
            Self::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CredentialError {}

impl From<StoreError> for CredentialError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

/// Runs `f` in a write transaction, keeping its own error apart from storage errors.
fn write_tx<T>(
    store: &Store,
    f: impl FnOnce(&Tx<'_>) -> Result<T, CredentialError>,
) -> Result<T, CredentialError> {
    let mut own: Option<CredentialError> = None;
    let result = store.in_transaction(|tx| {
        f(tx).map_err(|e| match e {
            CredentialError::Store(e) => e,
            other => {
                own = Some(other);
                StoreError::RolledBack
            }
        })
    });
    result.map_err(|e| own.take().unwrap_or(CredentialError::Store(e)))
}

/// What `tollgate key create` asks for.
#[derive(Debug, Clone)]
pub struct NewKey {
    /// Operator-chosen label.
    pub name: String,
    /// Granted scopes (already parsed).
    pub scopes: Vec<String>,
    /// Lifetime; `None` = never expires.
    pub expires_in: Option<Duration>,
    /// The OAuth client the key belongs to, if any.
    pub client_id: Option<String>,
    /// Live or test key.
    pub mode: Mode,
}

/// A newly issued credential: its public id and the token, shown once.
#[derive(Debug)]
pub struct IssuedKey {
    /// Public id (what `key list`, `key revoke` and the audit log use).
    pub public_id: String,
    /// The whole token `tg_<mode>_<public id>_<secret>`.
    pub token: Secret,
    /// Expiry (unix seconds), if any.
    pub expires_at: Option<i64>,
}

fn compose_token(mode: Mode, public_id: &str, secret: &str) -> Secret {
    Secret::new(format!("{}{public_id}_{secret}", mode.prefix()))
}

fn check_name(name: &str) -> Result<String, CredentialError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(CredentialError::Invalid(
            "--name: give a short label of 1 to 100 printable characters".to_owned(),
        ));
    }
    Ok(name.to_owned())
}

fn seconds(duration: Duration) -> i64 {
    i64::try_from(duration.as_secs()).unwrap_or(i64::MAX)
}

/// Creates an API key; refuses one beyond the plan's active-keys allowance.
pub fn create_key(store: &Store, new: &NewKey) -> Result<IssuedKey, CredentialError> {
    let name = check_name(&new.name)?;
    if new.scopes.is_empty() {
        return Err(CredentialError::BadScope(String::new()));
    }
    let public_id = new_public_id()?;
    let secret = Secret::new(new_secret()?);
    let hash = hash_secret(&secret)?;
    let now = Clock::System.unix_secs();
    let expires_at = new.expires_in.map(|d| now.saturating_add(seconds(d)));
    write_tx(store, |tx| {
        check_key_allowance(tx, now)?;
        if let Some(client_id) = &new.client_id {
            check_client_grants(tx, client_id, &new.scopes)?;
        }
        credentials::insert_credential(
            tx,
            &NewCredential {
                public_id: &public_id,
                kind: "api_key",
                mode: new.mode.as_str(),
                name: &name,
                secret_hash: &hash,
                scopes: &new.scopes,
                client_id: new.client_id.as_deref(),
                expires_at,
                created_at: now,
            },
        )?;
        Ok(())
    })?;
    Ok(IssuedKey {
        token: compose_token(new.mode, &public_id, secret.expose()),
        public_id,
        expires_at,
    })
}

fn check_key_allowance(tx: &Tx<'_>, now: i64) -> Result<(), CredentialError> {
    let Some(plan) = plans::company_plan_on(tx)? else {
        return Err(CredentialError::NotInitialised);
    };
    let active = credentials::count_active_keys(tx, now)?;
    match plan.max_active_keys {
        Some(limit) if active >= limit => Err(CredentialError::PlanLimit {
            plan: plan.slug,
            limit,
            active,
        }),
        _ => Ok(()),
    }
}

fn check_client_grants(
    tx: &Tx<'_>,
    client_id: &str,
    scopes: &[String],
) -> Result<(), CredentialError> {
    let Some((client, _)) = credentials::client_on(tx, client_id)? else {
        return Err(CredentialError::UnknownClient(client_id.to_owned()));
    };
    if client.revoked {
        return Err(CredentialError::ClientRevoked(client_id.to_owned()));
    }
    match scopes.iter().find(|s| !grants(&client.allowed_scopes, s)) {
        Some(scope) => Err(CredentialError::ScopeNotAllowed {
            scope: scope.clone(),
            client_id: client_id.to_owned(),
        }),
        None => Ok(()),
    }
}

/// One API key as `tollgate key list` shows it (never its secret or hash).
#[derive(Debug, Clone)]
pub struct KeyInfo {
    /// Public id.
    pub public_id: String,
    /// Label.
    pub name: String,
    /// Live or test.
    pub mode: Mode,
    /// Granted scopes.
    pub scopes: Vec<String>,
    /// Owning OAuth client.
    pub client_id: Option<String>,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds, if it expires.
    pub expires_at: Option<i64>,
    /// Unix seconds, if revoked.
    pub revoked_at: Option<i64>,
    /// Unix seconds (updated at most once a minute).
    pub last_used_at: Option<i64>,
    /// Until when the rotated-out secret still works, if a rotation grace is running.
    pub previous_secret_until: Option<i64>,
}

impl KeyInfo {
    /// `active`, `revoked` or `expired`.
    pub fn status(&self, now: i64) -> &'static str {
        if self.revoked_at.is_some() {
            "revoked"
        } else if self.expires_at.is_some_and(|at| at <= now) {
            "expired"
        } else {
            "active"
        }
    }
}

/// Every API key, oldest first (OAuth access tokens are not listed).
pub fn list_keys(store: &Store) -> Result<Vec<KeyInfo>, CredentialError> {
    let keys = store.api_keys()?.into_iter().map(|row| KeyInfo {
        public_id: row.public_id,
        name: row.name,
        mode: Mode::from_stored(&row.mode),
        scopes: row.scopes,
        client_id: row.client_id,
        created_at: row.created_at,
        expires_at: row.expires_at,
        revoked_at: row.revoked_at,
        last_used_at: row.last_used_at,
        previous_secret_until: row.previous_secret_until,
    });
    Ok(keys.collect())
}

/// Revokes a key (or access token). Returns `false` when it was already revoked. Running
/// servers refuse it on their next call: they read the row on every call.
pub fn revoke_key(store: &Store, public_id: &str) -> Result<bool, CredentialError> {
    let now = Clock::System.unix_secs();
    write_tx(store, |tx| {
        credentials::revoke(tx, Revocable::Credential, public_id, now)?
            .ok_or_else(|| CredentialError::UnknownKey(public_id.to_owned()))
    })
}

/// Issues a new secret for an active API key. The previous secret keeps working for
/// `grace` (zero: not at all); a secret rotated out earlier stops working at once.
pub fn rotate_key(
    store: &Store,
    public_id: &str,
    grace: Duration,
) -> Result<IssuedKey, CredentialError> {
    let secret = Secret::new(new_secret()?);
    let hash = hash_secret(&secret)?;
    let now = Clock::System.unix_secs();
    let until = (!grace.is_zero()).then(|| now.saturating_add(seconds(grace)));
    let (mode, expires_at) = write_tx(store, |tx| {
        let Some(standing) = credentials::key_standing(tx, public_id)? else {
            return Err(CredentialError::UnknownKey(public_id.to_owned()));
        };
        let credentials::KeyStanding {
            kind,
            mode,
            revoked_at,
            expires_at,
        } = standing;
        let status = match (revoked_at, expires_at) {
            (Some(_), _) => Some("revoked"),
            (None, Some(at)) if at <= now => Some("expired"),
            _ => None,
        };
        if let Some(status) = status {
            return Err(CredentialError::KeyNotActive {
                id: public_id.to_owned(),
                status,
            });
        }
        if kind != "api_key" {
            return Err(CredentialError::NotAnApiKey(public_id.to_owned()));
        }
        credentials::replace_secret(tx, public_id, &hash, until)?;
        Ok((Mode::from_stored(&mode), expires_at))
    })?;
    Ok(IssuedKey {
        token: compose_token(mode, public_id, secret.expose()),
        public_id: public_id.to_owned(),
        expires_at,
    })
}

/// A newly created OAuth client: its id and its secret, shown once.
#[derive(Debug)]
pub struct IssuedClient {
    /// Client id.
    pub client_id: String,
    /// `tg_cs_<secret>`.
    pub secret: Secret,
}

/// Creates an OAuth client allowed `scopes`.
pub fn create_client(
    store: &Store,
    name: &str,
    scopes: &[String],
) -> Result<IssuedClient, CredentialError> {
    let name = check_name(name)?;
    if scopes.is_empty() {
        return Err(CredentialError::BadScope(String::new()));
    }
    let client_id = format!("client{}", new_public_id()?);
    let secret = Secret::new(format!("{CLIENT_SECRET_PREFIX}{}", new_secret()?));
    let hash = hash_secret(&secret)?;
    let now = Clock::System.unix_secs();
    store.insert_client(&NewClient {
        client_id: &client_id,
        name: &name,
        secret_hash: &hash,
        allowed_scopes: scopes,
        created_at: now,
    })?;
    Ok(IssuedClient { client_id, secret })
}

/// Every OAuth client, oldest first.
pub fn list_clients(store: &Store) -> Result<Vec<OAuthClient>, CredentialError> {
    Ok(store.clients()?)
}

/// Revokes a client: every call with one of its credentials then answers
/// `client_revoked`. Returns `false` when it was already revoked.
pub fn revoke_client(store: &Store, client_id: &str) -> Result<bool, CredentialError> {
    let now = Clock::System.unix_secs();
    write_tx(store, |tx| {
        credentials::revoke(tx, Revocable::Client, client_id, now)?
            .ok_or_else(|| CredentialError::UnknownClient(client_id.to_owned()))
    })
}

/// Issues a short-lived OAuth access token (a credential of kind `oauth_access` bound to
/// `client`) carrying `scopes` — all of the client's allowed scopes when empty. Its secret
/// is stored as a SHA-256 digest (256 random bits need no slow hash); it expires `ttl`
/// after the time of `clock`. Access tokens that expired more than a day ago are deleted
/// on the way.
pub fn issue_access_token(
    store: &Store,
    client: &OAuthClient,
    scopes: &[String],
    ttl: Duration,
    clock: &Clock,
) -> Result<IssuedKey, CredentialError> {
    if ttl.is_zero() {
        return Err(CredentialError::Invalid(
            "an access token needs a lifetime above zero".to_owned(),
        ));
    }
    let scopes = if scopes.is_empty() {
        client.allowed_scopes.clone()
    } else {
        scopes.to_vec()
    };
    let public_id = new_public_id()?;
    let secret = new_secret()?;
    let now = clock.unix_secs();
    let expires_at = now.saturating_add(seconds(ttl));
    write_tx(store, |tx| {
        check_client_grants(tx, &client.client_id, &scopes)?;
        credentials::delete_access_tokens_expired_before(tx, now - ACCESS_TOKEN_RETENTION_SECS)?;
        credentials::insert_credential(
            tx,
            &NewCredential {
                public_id: &public_id,
                kind: "oauth_access",
                mode: "live",
                name: &format!("access token of {}", client.client_id),
                secret_hash: &access_hash(&secret),
                scopes: &scopes,
                client_id: Some(&client.client_id),
                expires_at: Some(expires_at),
                created_at: now,
            },
        )?;
        Ok(())
    })?;
    Ok(IssuedKey {
        token: compose_token(Mode::Live, &public_id, &secret),
        public_id,
        expires_at: Some(expires_at),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::{Company, StoreOptions};
    use crate::tools::{Category, Idempotency};

    fn fresh(plan: &str) -> (tempfile::TempDir, Store) {
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

    fn key(store: &Store, scopes: &[&str]) -> IssuedKey {
        let new = NewKey {
            name: "k".into(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            expires_in: None,
            client_id: None,
            mode: Mode::Live,
        };
        create_key(store, &new).expect("create key")
    }

    fn tool(name: &'static str, scope: &'static str) -> ToolSpec {
        ToolSpec {
            name,
            title: name,
            description: "",
            category: Category::Read,
            scope,
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
        let hash = PasswordHash::new(DUMMY_HASH).expect("phc");
        assert_eq!(hash.algorithm.as_str(), "argon2id");
        let params = Params::try_from(&hash).expect("params");
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
        assert!(revoke_key(&store, &b.public_id).expect("revoke"));
        store
            .sql_write(|tx| Ok(tx.execute("UPDATE credentials SET last_used_at = NULL", [])?))
            .expect("forget last use");
        let calls: Vec<CallAuth> = [&a, &b, &a]
            .iter()
            .map(|k| {
                auth.authenticate_call(Some(k.token.expose()), "t")
                    .expect("cached")
            })
            .collect();
        assert!(calls.iter().all(|c| matches!(c, CallAuth::Cached { .. })));
        let limiter: crate::guards::ratelimit::Limiter<crate::guards::charging::CallCharge> =
            crate::guards::ratelimit::Limiter::with_batch(store.clone(), Clock::System);
        let group = calls
            .iter()
            .map(|call| {
                let request = crate::guards::ratelimit::ChargeRequest {
                    credential_id: call.credential_id().to_owned(),
                    client_id: None,
                    category: Category::Read,
                };
                crate::guards::charging::CallCharge::new(request, auth.call_checks(call))
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
                Ok(c.query_row(
                    "SELECT last_used_at FROM credentials WHERE public_id = ?1",
                    [&a.public_id],
                    |r| r.get(0),
                )?)
            })
            .expect("row");
        assert!(
            touched.is_some(),
            "last use recorded in the charging transaction"
        );
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
        };
        let revoked = key(&store, &["*"]);
        assert!(revoke_key(&store, &revoked.public_id).expect("revoke"));
        let minute = Some(Duration::from_secs(60));
        let expired = create_key(&store, &new_key(Mode::Live, minute)).expect("key");
        let test_key = create_key(&store, &new_key(Mode::Test, None)).expect("key");
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
                Ok(tx.execute(
                    "UPDATE plans SET max_active_keys = 2 WHERE slug = 'free'",
                    [],
                )?)
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
        };
        let issued = create_key(&store, &new).expect("test key");
        assert!(issued.token.expose().starts_with("tg_test_"));
        let auth = Authenticator::new(store.clone(), Clock::System);
        let err = auth
            .authenticate(Some(issued.token.expose()), "s")
            .expect_err("live installation");
        assert_eq!(err.kind(), ErrorKind::InvalidTokenType);
        store
            .sql_write(|tx| Ok(tx.execute("UPDATE company SET mode = 'test'", [])?))
            .expect("test mode");
        auth.authenticate(Some(issued.token.expose()), "s")
            .expect("test mode accepts");
        store
            .sql_write(|tx| Ok(tx.execute("UPDATE credentials SET expires_at = 1", [])?))
            .expect("expire");
        let err = auth
            .authenticate(Some(issued.token.expose()), "s")
            .expect_err("expired");
        assert_eq!(reason(&err), "expired");
    }
}
