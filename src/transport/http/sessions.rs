//! Handshake-era HTTP sessions: `Mcp-Session-Id` → [`Session`], with an idle expiry, each
//! bound to the credential that opened it, and shared by every node on the database.
//!
//! Ids are 128 random bits from the OS, hex-encoded (visible ASCII, as the transport
//! requires). An expired or deleted id answers 404 so the client re-initializes.
//!
//! A session belongs to the [`SessionOwner`] of its `initialize`: the credential it
//! presented (an OAuth access token: its client, so a refreshed token keeps the session),
//! or, when it presented none or a refused one, the anonymous owner — such a session can
//! only answer what needs no credential (`ping`, notifications), and every guarded request
//! on it is refused `invalid_token` as it would be anywhere. A request naming a session must
//! come from its owner; anyone else finds it exactly as an id that does not exist.
//!
//! **Across nodes.** A credentialed session is written to the store (`http_sessions`) when
//! its `initialize` succeeds — never before, so requests that fail or present no
//! credential write nothing — and every request naming it reads its row (one read by
//! primary key), so any node behind
//! a load balancer without stickiness answers it as the node that opened it would: same
//! owner, negotiated revision, client capabilities and `logging/setLevel` level; a DELETE on
//! one node ends it on all. This table is then the node's cache of the live [`Session`]
//! values, holding what cannot be shared: the response stream a request is answered on,
//! the server→client requests (sampling, elicitation, roots) waiting for the client's
//! answer — which must be POSTed to the node that asked, and is dropped elsewhere — the
//! cancellation flags of the requests running here, and resource subscriptions, whose
//! updates go out on this node's streams only. Anonymous sessions stay in this node's
//! memory alone; another node answers them as unknown, and the client re-initializes.
//!
//! **Expiry** is by the server's clock against the stored last-seen time, which a request
//! refreshes only when it is older than a quarter of the TTL, so a busy session writes at
//! most once per quarter TTL. A session therefore lives at least the TTL after its last
//! request, and at most a quarter more. A request that finds its session expired deletes
//! it, and new sessions prune a few expired rows each.
//!
//! **When the store fails** nothing panics and nothing is answered "unknown" that is not:
//! a lookup this node can answer from its cache (it holds the session and saw it within
//! the expiry) is served from memory; any other lookup, a DELETE or an `initialize` that
//! cannot be stored answers the store failure from the catalog — `backend_unavailable`
//! (503, retryable) for an outage or a lock held past its timeout, after which the client
//! retries with the same session id; `internal_error` for a damaged database. A refresh
//! or a log level that cannot be written is logged and retried on the next request.
//!
//! The table is bounded twice: one owner — the anonymous one included, so unauthenticated
//! sessions form a pool of their own — keeps at most [`MAX_SESSIONS_PER_OWNER`] (its least
//! recently used session goes first), and when the whole table is full the least recently
//! used session *of the owner with the most sessions* goes. A flood of sessions, with a
//! credential or without, therefore never pushes out another owner's sessions. The store
//! keeps the same bounds across all nodes for credentialed sessions; a session dropped
//! only from this node's cache is found again in the store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::catalog::McpError;
use crate::clock::Clock;
use crate::guards::auth::CredentialRef;
use crate::protocol::revisions::{LEGACY_VERSIONS, Session};
use crate::store::sessions::{SessionBounds, StoredSession};
use crate::store::{Store, StoreError, store_failure};
use crate::tools::LogLevel;

/// Sessions kept at most.
const MAX_SESSIONS: usize = 10_000;
/// Sessions one owner keeps at most.
pub const MAX_SESSIONS_PER_OWNER: usize = 1_000;

/// The owner of sessions opened without a valid credential, as text.
const ANONYMOUS: &str = "anonymous";

/// Who a session belongs to: the OAuth client of the credential that opened it, or that
/// credential itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionOwner(String);

impl SessionOwner {
    /// The owner of sessions opened without a valid credential.
    pub fn anonymous() -> SessionOwner {
        SessionOwner(ANONYMOUS.to_owned())
    }

    /// The owner of sessions opened with `credential`.
    pub fn of(credential: &CredentialRef) -> SessionOwner {
        match &credential.client_id {
            Some(client) => SessionOwner(format!("client:{client}")),
            None => SessionOwner(format!("key:{}", credential.credential_id)),
        }
    }

    fn is_anonymous(&self) -> bool {
        self.0 == ANONYMOUS
    }
}

/// Where a session lives besides this table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kept {
    /// Nowhere: an anonymous session, of this node alone.
    Here,
    /// In the store, whose row last held this log level.
    Stored { log_level: Option<LogLevel> },
}

struct Entry {
    session: Arc<Session>,
    owner: SessionOwner,
    /// [`Clock::monotonic`] at its last use on this node.
    last_seen: Duration,
    kept: Kept,
}

/// A copy of what the table holds of one session, taken without holding its lock across
/// a store call.
struct Cached {
    session: Arc<Session>,
    owner: SessionOwner,
    last_seen: Duration,
}

/// The session table of one HTTP listener, over the store every node shares.
pub struct Sessions {
    ttl: Duration,
    clock: Clock,
    store: Store,
    per_owner: usize,
    capacity: usize,
    table: Mutex<HashMap<String, Entry>>,
}

/// Whole milliseconds of `d`.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// 128 random bits, hex-encoded.
fn new_id() -> Result<String, McpError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        tracing::error!(error = %e, "cannot create a session id");
        McpError::internal()
    })?;
    Ok(hex::encode(bytes))
}

impl Sessions {
    /// An empty table whose sessions expire after `ttl` without traffic, by `clock`, and
    /// whose credentialed sessions are shared through `store`.
    pub fn new(ttl: Duration, clock: Clock, store: Store) -> Sessions {
        Sessions::with_limits(ttl, clock, store, MAX_SESSIONS, MAX_SESSIONS_PER_OWNER)
    }

    fn with_limits(
        ttl: Duration,
        clock: Clock,
        store: Store,
        capacity: usize,
        per_owner: usize,
    ) -> Sessions {
        Sessions {
            ttl,
            clock,
            store,
            per_owner: per_owner.max(1),
            capacity: capacity.max(1),
            table: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How stale a stored last-seen time may get before a request refreshes it.
    fn refresh_interval(&self) -> Duration {
        self.ttl / 4
    }

    /// How long a session may go unused: the TTL, and for a stored session also the
    /// refresh interval (its last use may be that much later than its stored last-seen).
    fn lifetime(&self, kept: Kept) -> Duration {
        match kept {
            Kept::Here => self.ttl,
            Kept::Stored { .. } => self.ttl.saturating_add(self.refresh_interval()),
        }
    }

    /// A stored session last seen at or before this (unix milliseconds) has expired.
    fn expired_at_or_before(&self, now_ms: i64) -> i64 {
        let lifetime = self.lifetime(Kept::Stored { log_level: None });
        now_ms.saturating_sub(millis(lifetime))
    }

    fn bounds(&self, now_ms: i64) -> SessionBounds {
        SessionBounds {
            per_owner: i64::try_from(self.per_owner).unwrap_or(i64::MAX),
            capacity: i64::try_from(self.capacity).unwrap_or(i64::MAX),
            expired_at_or_before_ms: self.expired_at_or_before(now_ms),
        }
    }

    /// Starts a session owned by `owner` and returns its id: stored for every node unless
    /// its owner is anonymous. A store that cannot take it is the store's failure.
    pub fn create(&self, session: Arc<Session>, owner: SessionOwner) -> Result<String, McpError> {
        let id = new_id()?;
        let kept = if owner.is_anonymous() {
            Kept::Here
        } else {
            self.store_new(&id, &session, &owner)?;
            Kept::Stored {
                log_level: session.log_level(),
            }
        };
        let now = self.clock.monotonic();
        let mut table = self.lock();
        table.retain(|_, e| now.saturating_sub(e.last_seen) < self.lifetime(e.kept));
        self.make_room(&mut table, &owner);
        table.insert(
            id.clone(),
            Entry {
                session,
                owner,
                last_seen: now,
                kept,
            },
        );
        Ok(id)
    }

    /// Writes a new session's row (within the store's bounds) and drops from this table a
    /// session the store ended to make room.
    fn store_new(&self, id: &str, session: &Session, owner: &SessionOwner) -> Result<(), McpError> {
        let Some(version) = session.negotiated() else {
            tracing::error!("a session was to be stored before its initialize succeeded");
            return Err(McpError::internal());
        };
        let now_ms = self.clock.unix_millis();
        let row = StoredSession {
            id: id.to_owned(),
            owner: owner.0.clone(),
            protocol_version: version.to_owned(),
            client_capabilities: session.client_capabilities().to_string(),
            log_level: session.log_level().map(|l| l.as_str().to_owned()),
            created_at_ms: now_ms,
            last_seen_at_ms: now_ms,
        };
        let evicted = self
            .store
            .insert_http_session(&row, self.bounds(now_ms))
            .map_err(|e| store_failure(e, false))?;
        if let Some(gone) = evicted {
            self.lock().remove(&gone);
        }
        Ok(())
    }

    /// Drops one session when `owner` is at its own cap or the table is full: the least
    /// recently used one of `owner`, or of the owner holding the most sessions.
    fn make_room(&self, table: &mut HashMap<String, Entry>, owner: &SessionOwner) {
        let mut counts: HashMap<&SessionOwner, usize> = HashMap::new();
        for entry in table.values() {
            *counts.entry(&entry.owner).or_default() += 1;
        }
        let victim_owner = if counts.get(owner).copied().unwrap_or(0) >= self.per_owner {
            owner.clone()
        } else if table.len() >= self.capacity {
            match counts.into_iter().max_by_key(|(_, n)| *n) {
                Some((busiest, _)) => busiest.clone(),
                None => return,
            }
        } else {
            return;
        };
        let oldest = table
            .iter()
            .filter(|(_, e)| e.owner == victim_owner)
            .min_by_key(|(_, e)| e.last_seen)
            .map(|(k, _)| k.clone());
        if let Some(oldest) = oldest {
            table.remove(&oldest);
        }
    }

    /// Finds a live session of `owner` and refreshes its expiry. Another owner's session
    /// is `None`, as an unknown or expired id is (and its expiry is not refreshed); a store
    /// that cannot say, for a session this node cannot answer alone, is an error.
    pub fn get(&self, id: &str, owner: &SessionOwner) -> Result<Option<Arc<Session>>, McpError> {
        if owner.is_anonymous() {
            return Ok(self.get_kept_here(id, owner));
        }
        let cached = self.cached(id);
        if cached.as_ref().is_some_and(|c| c.owner != *owner) {
            return Ok(None);
        }
        let now_ms = self.clock.unix_millis();
        let row = match self.store.find_http_session(id) {
            Ok(row) => row,
            Err(err) => return self.without_store(id, cached, err),
        };
        let cutoff = self.expired_at_or_before(now_ms);
        let row = match row {
            Some(row) if row.owner != owner.0 => return Ok(None),
            Some(row) if row.last_seen_at_ms > cutoff => row,
            expired => {
                self.forget(id, expired.is_some().then_some(cutoff));
                return Ok(None);
            }
        };
        let Some(session) = cached.map(|c| c.session).or_else(|| restore(&row)) else {
            return Ok(None);
        };
        let level = row.log_level.as_deref().and_then(LogLevel::parse);
        let session = self.remember(id, session, owner, level);
        if let Some(level) = level
            && session.log_level() != Some(level)
        {
            session.set_log_level(level);
        }
        self.refresh(id, row.last_seen_at_ms, now_ms);
        Ok(Some(session))
    }

    /// Drops `id` from this table and, when the store holds it expired (last seen at or
    /// before `expired_cutoff`), from the store too, so that it stays gone.
    fn forget(&self, id: &str, expired_cutoff: Option<i64>) {
        self.lock().remove(id);
        if let Some(cutoff) = expired_cutoff
            && let Err(err) = self.store.delete_expired_http_session(id, cutoff)
        {
            tracing::warn!(cause = %err, "cannot delete an expired session; pruned later");
        }
    }

    /// Records a use of `id` at `now_ms` when the stored one is a refresh interval old.
    fn refresh(&self, id: &str, stored_ms: i64, now_ms: i64) {
        if now_ms.saturating_sub(stored_ms) >= millis(self.refresh_interval())
            && let Err(err) = self.store.touch_http_session(id, now_ms)
        {
            tracing::warn!(cause = %err, "cannot refresh a session's last use; retried on its next request");
        }
    }

    /// An anonymous session, which only this node's memory holds.
    fn get_kept_here(&self, id: &str, owner: &SessionOwner) -> Option<Arc<Session>> {
        let now = self.clock.monotonic();
        let mut table = self.lock();
        match table.get_mut(id) {
            Some(entry) if entry.owner != *owner => None,
            Some(entry) if now.saturating_sub(entry.last_seen) >= self.ttl => {
                table.remove(id);
                None
            }
            Some(entry) => {
                entry.last_seen = now;
                Some(Arc::clone(&entry.session))
            }
            None => None,
        }
    }

    /// What this table holds of `id`.
    fn cached(&self, id: &str) -> Option<Cached> {
        self.lock().get(id).map(|e| Cached {
            session: Arc::clone(&e.session),
            owner: e.owner.clone(),
            last_seen: e.last_seen,
        })
    }

    /// A lookup the store could not answer: the session this node holds, when it saw it
    /// within its lifetime; otherwise the store's failure (never "unknown").
    fn without_store(
        &self,
        id: &str,
        cached: Option<Cached>,
        err: StoreError,
    ) -> Result<Option<Arc<Session>>, McpError> {
        let now = self.clock.monotonic();
        let lifetime = self.lifetime(Kept::Stored { log_level: None });
        match cached {
            Some(Cached {
                session, last_seen, ..
            }) if now.saturating_sub(last_seen) < lifetime => {
                tracing::warn!(cause = %err, "the session store cannot be read; answering from this node's memory");
                if let Some(entry) = self.lock().get_mut(id) {
                    entry.last_seen = now;
                }
                Ok(Some(session))
            }
            _ => Err(store_failure(err, false)),
        }
    }

    /// Keeps `session` (read from the store) in this table, or the one it already holds.
    fn remember(
        &self,
        id: &str,
        session: Arc<Session>,
        owner: &SessionOwner,
        log_level: Option<LogLevel>,
    ) -> Arc<Session> {
        let now = self.clock.monotonic();
        let kept = Kept::Stored { log_level };
        let mut table = self.lock();
        if let Some(entry) = table.get_mut(id) {
            entry.last_seen = now;
            entry.kept = kept;
            return Arc::clone(&entry.session);
        }
        self.make_room(&mut table, owner);
        table.insert(
            id.to_owned(),
            Entry {
                session: Arc::clone(&session),
                owner: owner.clone(),
                last_seen: now,
                kept,
            },
        );
        session
    }

    /// After a request on session `id`: writes the level `logging/setLevel` set on
    /// `session`, when it is this table's stored session and the store has another.
    pub fn record_log_level(&self, id: &str, session: &Session) {
        let Some(level) = session.log_level() else {
            return;
        };
        let stale = self.lock().get(id).is_some_and(|e| {
            std::ptr::eq(Arc::as_ptr(&e.session), session)
                && matches!(e.kept, Kept::Stored { log_level } if log_level != Some(level))
        });
        if !stale {
            return;
        }
        match self.store.set_http_session_log_level(id, level.as_str()) {
            Ok(_) => {
                if let Some(entry) = self.lock().get_mut(id) {
                    entry.kept = Kept::Stored {
                        log_level: Some(level),
                    };
                }
            }
            Err(err) => tracing::warn!(
                cause = %err,
                "cannot record a session's log level; it applies on this node until it is"
            ),
        }
    }

    /// Ends a session of `owner`, on every node; false when it did not exist, expired or
    /// is another owner's.
    pub fn remove(&self, id: &str, owner: &SessionOwner) -> Result<bool, McpError> {
        let removed = if owner.is_anonymous() {
            self.lock().get(id).is_some_and(|e| e.owner == *owner)
        } else {
            let cutoff = self.expired_at_or_before(self.clock.unix_millis());
            self.store
                .delete_http_session(id, &owner.0, cutoff)
                .map_err(|e| store_failure(e, false))?
        };
        let mut table = self.lock();
        if table.get(id).is_some_and(|e| e.owner == *owner) {
            table.remove(id);
        }
        Ok(removed)
    }
}

/// The session a stored row describes, as a node that did not open it serves it; `None`
/// (answered as unknown, so the client re-initializes) for a row this binary cannot read:
/// a revision it does not speak, or damaged capabilities.
fn restore(row: &StoredSession) -> Option<Arc<Session>> {
    let Some(version) = LEGACY_VERSIONS
        .iter()
        .find(|v| **v == row.protocol_version)
        .copied()
    else {
        tracing::warn!(revision = %row.protocol_version, "a stored session names a revision this node does not speak");
        return None;
    };
    let capabilities = match serde_json::from_str(&row.client_capabilities) {
        Ok(capabilities) => capabilities,
        Err(err) => {
            tracing::warn!(cause = %err, "a stored session's client capabilities are damaged");
            return None;
        }
    };
    let session = Session::new();
    session.initialize(version, capabilities);
    Some(Arc::new(session))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::catalog::ErrorKind;
    use crate::clock::ManualClock;
    use crate::store::testing::{Scratch, stores};

    fn owner(id: &str) -> SessionOwner {
        SessionOwner::of(&CredentialRef {
            credential_id: id.to_owned(),
            client_id: None,
        })
    }

    /// A session as a successful `initialize` leaves it.
    fn initialized() -> Arc<Session> {
        let session = Session::new();
        assert!(session.initialize("2025-06-18", json!({"sampling": {}})));
        Arc::new(session)
    }

    fn sqlite() -> Scratch {
        stores().swap_remove(0)
    }

    fn stored_last_seen(store: &Store, id: &str) -> i64 {
        store
            .find_http_session(id)
            .expect("find")
            .expect("stored")
            .last_seen_at_ms
    }

    #[test]
    fn sessions_resolve_until_removed_or_expired() {
        let scratch = sqlite();
        let sessions = Sessions::new(
            Duration::from_secs(60),
            Clock::System,
            scratch.store.clone(),
        );
        let alice = owner("alice");
        let id = sessions.create(initialized(), alice.clone()).expect("id");
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(sessions.get(&id, &alice).expect("get").is_some());
        assert!(sessions.remove(&id, &alice).expect("remove"));
        assert!(sessions.get(&id, &alice).expect("get").is_none());
        assert!(!sessions.remove(&id, &alice).expect("remove"));

        let short = Sessions::new(Duration::ZERO, Clock::System, scratch.store.clone());
        let id = short.create(initialized(), alice.clone()).expect("id");
        assert!(short.get(&id, &alice).expect("get").is_none());
    }

    #[test]
    fn an_anonymous_session_expires_exactly_after_its_ttl_and_is_never_stored() {
        let scratch = sqlite();
        let manual = ManualClock::at_unix_secs(1_800_000_000);
        let ttl = Duration::from_secs(60);
        let sessions = Sessions::new(ttl, manual.clock(), scratch.store.clone());
        let other_node = Sessions::new(ttl, manual.clock(), scratch.store.clone());
        let anonymous = SessionOwner::anonymous();
        let id = sessions
            .create(initialized(), anonymous.clone())
            .expect("id");
        let idle = sessions
            .create(initialized(), anonymous.clone())
            .expect("id");
        assert_eq!(scratch.store.find_http_session(&id).expect("find"), None);
        assert!(other_node.get(&id, &anonymous).expect("get").is_none());
        // Used 59.999 s after it was last seen: alive, and its expiry starts again.
        manual.advance(Duration::from_millis(59_999));
        assert!(sessions.get(&id, &anonymous).expect("get").is_some());
        assert!(sessions.get(&idle, &anonymous).expect("get").is_some());
        manual.advance(Duration::from_secs(30));
        assert!(sessions.get(&id, &anonymous).expect("get").is_some());
        // Exactly 60 s idle: gone, and it stays gone.
        manual.advance(Duration::from_secs(60));
        assert!(sessions.get(&idle, &anonymous).expect("get").is_none());
        assert!(sessions.get(&id, &anonymous).expect("get").is_none());
        manual.set_unix_secs(1_800_000_000);
        assert!(sessions.get(&id, &anonymous).expect("get").is_none());
    }

    #[test]
    fn a_stored_session_lives_its_ttl_after_its_last_use_and_refreshes_once_per_quarter() {
        for scratch in stores() {
            let store = &scratch.store;
            let manual = ManualClock::at_unix_secs(1_800_000_000);
            let start = manual.unix_millis();
            let ttl = Duration::from_secs(60);
            let a = Sessions::new(ttl, manual.clock(), store.clone());
            let b = Sessions::new(ttl, manual.clock(), store.clone());
            let alice = owner("alice");
            let id = a.create(initialized(), alice.clone()).expect("id");
            assert_eq!(stored_last_seen(store, &id), start);

            // Uses within a quarter of the TTL of the stored time write nothing.
            manual.advance(Duration::from_millis(14_999));
            assert!(b.get(&id, &alice).expect("get").is_some());
            assert!(a.get(&id, &alice).expect("get").is_some());
            assert_eq!(stored_last_seen(store, &id), start);
            // The first use a quarter later refreshes it, on whichever node.
            manual.advance(Duration::from_millis(1));
            assert!(b.get(&id, &alice).expect("get").is_some());
            let refreshed = start + 15_000;
            assert_eq!(stored_last_seen(store, &id), refreshed);

            // A last use 14.999 s after the refresh was not written, yet the session
            // still lives a whole TTL after it: until 75 s after the stored time.
            manual.advance(Duration::from_millis(14_999));
            assert!(a.get(&id, &alice).expect("get").is_some());
            assert_eq!(stored_last_seen(store, &id), refreshed);
            manual.set_unix_millis(refreshed + 74_999);
            assert!(b.get(&id, &alice).expect("get").is_some());
            // Idle 75 s from the stored time: gone on every node, and it stays gone.
            manual.set_unix_millis(refreshed + 74_999 + 75_000);
            assert!(a.get(&id, &alice).expect("get").is_none());
            assert!(b.get(&id, &alice).expect("get").is_none());
            manual.set_unix_millis(refreshed);
            assert!(a.get(&id, &alice).expect("get").is_none());
        }
    }

    #[test]
    fn another_node_serves_a_stored_session_as_the_first_one_would() {
        for scratch in stores() {
            let store = &scratch.store;
            let ttl = Duration::from_secs(60);
            let a = Sessions::new(ttl, Clock::System, store.clone());
            let b = Sessions::new(ttl, Clock::System, store.clone());
            let (alice, mallory) = (owner("alice"), owner("mallory"));
            let opened = initialized();
            let id = a.create(Arc::clone(&opened), alice.clone()).expect("id");

            assert!(b.get(&id, &mallory).expect("get").is_none());
            assert!(!b.remove(&id, &mallory).expect("remove"));
            let on_b = b.get(&id, &alice).expect("get").expect("found on b");
            assert_eq!(on_b.negotiated(), Some("2025-06-18"));
            assert_eq!(on_b.client_capabilities(), json!({"sampling": {}}));
            assert!(on_b.log_level().is_none());
            // B keeps its own session value for later requests.
            let again = b.get(&id, &alice).expect("get").expect("found");
            assert!(Arc::ptr_eq(&on_b, &again));

            // `logging/setLevel` on B reaches A's cached session on its next request.
            on_b.set_log_level(LogLevel::Debug);
            b.record_log_level(&id, &on_b);
            let on_a = a.get(&id, &alice).expect("get").expect("found on a");
            assert!(Arc::ptr_eq(&on_a, &opened));
            assert_eq!(on_a.log_level(), Some(LogLevel::Debug));

            // A DELETE on B ends it on A too, whose cache held it.
            assert!(b.remove(&id, &alice).expect("remove"));
            assert!(a.get(&id, &alice).expect("get").is_none());
            assert!(!a.remove(&id, &alice).expect("remove"));
        }
    }

    #[test]
    fn a_session_answers_only_its_owner() {
        let scratch = sqlite();
        let sessions = Sessions::new(
            Duration::from_secs(60),
            Clock::System,
            scratch.store.clone(),
        );
        let (alice, mallory) = (owner("alice"), owner("mallory"));
        let id = sessions.create(initialized(), alice.clone()).expect("id");
        assert!(sessions.get(&id, &mallory).expect("get").is_none());
        assert!(!sessions.remove(&id, &mallory).expect("remove"));
        assert!(
            sessions
                .get(&id, &SessionOwner::anonymous())
                .expect("get")
                .is_none()
        );
        assert!(sessions.get(&id, &alice).expect("get").is_some());
        // Tokens of one OAuth client share its sessions (a refreshed token keeps them).
        let of_client = |credential: &str| {
            SessionOwner::of(&CredentialRef {
                credential_id: credential.to_owned(),
                client_id: Some("c1".to_owned()),
            })
        };
        let id = sessions
            .create(initialized(), of_client("token1"))
            .expect("id");
        assert!(
            sessions
                .get(&id, &of_client("token2"))
                .expect("get")
                .is_some()
        );
        assert!(sessions.get(&id, &owner("token2")).expect("get").is_none());
        // An anonymous session is no credential's.
        let anonymous = sessions
            .create(initialized(), SessionOwner::anonymous())
            .expect("id");
        assert!(sessions.get(&anonymous, &alice).expect("get").is_none());
        assert!(!sessions.remove(&anonymous, &alice).expect("remove"));
    }

    #[test]
    fn a_flood_from_one_owner_never_evicts_another_owners_sessions() {
        let scratch = sqlite();
        let sessions = Sessions::with_limits(
            Duration::from_secs(60),
            Clock::System,
            scratch.store.clone(),
            20,
            8,
        );
        let (alice, bob, mallory) = (owner("alice"), owner("bob"), SessionOwner::anonymous());
        let kept = sessions.create(initialized(), alice.clone()).expect("id");
        let bobs: Vec<String> = (0..7)
            .map(|_| sessions.create(initialized(), bob.clone()).expect("id"))
            .collect();
        let mut mallorys = Vec::new();
        for _ in 0..1_000 {
            mallorys.push(sessions.create(initialized(), mallory.clone()).expect("id"));
        }
        let live = |owner: &SessionOwner, ids: &[String]| {
            ids.iter()
                .filter(|id| sessions.get(id, owner).expect("get").is_some())
                .count()
        };
        assert_eq!(live(&alice, std::slice::from_ref(&kept)), 1);
        assert_eq!(live(&bob, &bobs), 7);
        // Mallory keeps only its newest sessions, up to its own cap.
        assert_eq!(live(&mallory, &mallorys), 8);
        assert!(
            sessions
                .get(&mallorys[999], &mallory)
                .expect("get")
                .is_some()
        );

        // A full table gives way at the owner holding the most sessions.
        let carol = owner("carol");
        for _ in 0..5 {
            sessions.create(initialized(), carol.clone()).expect("id");
        }
        assert_eq!(live(&mallory, &mallorys), 7);
        assert_eq!(live(&alice, std::slice::from_ref(&kept)), 1);
        assert_eq!(live(&bob, &bobs), 7);
    }

    #[test]
    fn an_owners_cap_holds_across_nodes() {
        for scratch in stores() {
            let ttl = Duration::from_secs(60);
            let manual = ManualClock::at_unix_secs(1_800_000_000);
            let node = || Sessions::with_limits(ttl, manual.clock(), scratch.store.clone(), 100, 3);
            let (a, b) = (node(), node());
            let alice = owner("alice");
            let mut ids = Vec::new();
            for n in [&a, &a, &b, &b] {
                ids.push(n.create(initialized(), alice.clone()).expect("id"));
                manual.advance(Duration::from_millis(1));
            }
            // Alice's fourth session ended her first, on the node that held it as well.
            for n in [&a, &b] {
                assert!(n.get(&ids[0], &alice).expect("get").is_none());
                for id in &ids[1..] {
                    assert!(n.get(id, &alice).expect("get").is_some());
                }
            }
        }
    }

    #[test]
    fn a_failing_store_is_answered_from_the_catalog_or_from_memory() {
        for scratch in stores() {
            let store = &scratch.store;
            let ttl = Duration::from_secs(60);
            let a = Sessions::new(ttl, Clock::System, store.clone());
            let b = Sessions::new(ttl, Clock::System, store.clone());
            let alice = owner("alice");
            let id = a.create(initialized(), alice.clone()).expect("id");
            crate::store::sessions::break_table(store, true);

            // The node that holds the session answers from memory; another cannot.
            assert!(a.get(&id, &alice).expect("from memory").is_some());
            fn kind<T: std::fmt::Debug>(r: Result<T, McpError>) -> ErrorKind {
                r.expect_err("store failure").kind()
            }
            assert_eq!(kind(b.get(&id, &alice)), ErrorKind::InternalError);
            assert_eq!(kind(b.remove(&id, &alice)), ErrorKind::InternalError);
            assert_eq!(
                kind(a.create(initialized(), alice.clone())),
                ErrorKind::InternalError
            );
            // A refresh or a level that cannot be written is no failure of the request.
            let held = a.get(&id, &alice).expect("get").expect("held");
            held.set_log_level(LogLevel::Error);
            a.record_log_level(&id, &held);
            // Anonymous sessions do not touch the store.
            let anonymous = SessionOwner::anonymous();
            let local = a.create(initialized(), anonymous.clone()).expect("id");
            assert!(a.get(&local, &anonymous).expect("get").is_some());

            crate::store::sessions::break_table(store, false);
            let on_b = b.get(&id, &alice).expect("get").expect("stored");
            assert!(on_b.log_level().is_none(), "the failed write left no level");
            // The level is written on the next request that finds it unrecorded.
            a.record_log_level(&id, &held);
            let on_b = b.get(&id, &alice).expect("get").expect("stored");
            assert_eq!(on_b.log_level(), Some(LogLevel::Error));
        }
    }

    #[test]
    fn a_row_this_node_cannot_read_is_an_unknown_session() {
        let scratch = sqlite();
        let b = Sessions::new(
            Duration::from_secs(60),
            Clock::System,
            scratch.store.clone(),
        );
        let now = Clock::System.unix_millis();
        for (id, version, capabilities) in [
            ("newer", "2099-01-01", "{}"),
            ("damaged", "2025-06-18", "{not json"),
        ] {
            let row = StoredSession {
                id: id.to_owned(),
                owner: owner("alice").0,
                protocol_version: version.to_owned(),
                client_capabilities: capabilities.to_owned(),
                log_level: None,
                created_at_ms: now,
                last_seen_at_ms: now,
            };
            scratch
                .store
                .insert_http_session(&row, b.bounds(now))
                .expect("insert");
            assert!(b.get(id, &owner("alice")).expect("get").is_none());
        }
    }
}
