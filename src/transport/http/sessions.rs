//! Handshake-era HTTP sessions: `Mcp-Session-Id` → [`Session`], with an idle expiry, each
//! bound to the credential that opened it.
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
//! The table is bounded twice: one owner — the anonymous one included, so unauthenticated
//! sessions form a pool of their own — keeps at most [`MAX_SESSIONS_PER_OWNER`] (its least
//! recently used session goes first), and when the whole table is full the least recently
//! used session *of the owner with the most sessions* goes. A flood of sessions, with a
//! credential or without, therefore never pushes out another owner's sessions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::clock::Clock;
use crate::guards::auth::CredentialRef;
use crate::protocol::revisions::Session;

/// Sessions kept at most.
const MAX_SESSIONS: usize = 10_000;
/// Sessions one owner keeps at most.
pub const MAX_SESSIONS_PER_OWNER: usize = 1_000;

/// Who a session belongs to: the OAuth client of the credential that opened it, or that
/// credential itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionOwner(String);

impl SessionOwner {
    /// The owner of sessions opened without a valid credential.
    pub fn anonymous() -> SessionOwner {
        SessionOwner("anonymous".to_owned())
    }

    /// The owner of sessions opened with `credential`.
    pub fn of(credential: &CredentialRef) -> SessionOwner {
        match &credential.client_id {
            Some(client) => SessionOwner(format!("client:{client}")),
            None => SessionOwner(format!("key:{}", credential.credential_id)),
        }
    }
}

struct Entry {
    session: Arc<Session>,
    owner: SessionOwner,
    /// [`Clock::monotonic`] at its last use.
    last_seen: Duration,
}

/// The session table of one HTTP listener.
pub struct Sessions {
    ttl: Duration,
    clock: Clock,
    per_owner: usize,
    capacity: usize,
    table: Mutex<HashMap<String, Entry>>,
}

impl Sessions {
    /// An empty table whose sessions expire after `ttl` without traffic, by `clock`.
    pub fn new(ttl: Duration, clock: Clock) -> Sessions {
        Sessions::with_limits(ttl, clock, MAX_SESSIONS, MAX_SESSIONS_PER_OWNER)
    }

    fn with_limits(ttl: Duration, clock: Clock, capacity: usize, per_owner: usize) -> Sessions {
        Sessions {
            ttl,
            clock,
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

    /// Starts a session owned by `owner` and returns its id.
    pub fn create(&self, session: Arc<Session>, owner: SessionOwner) -> std::io::Result<String> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let now = self.clock.monotonic();
        let mut table = self.lock();
        table.retain(|_, e| now.saturating_sub(e.last_seen) < self.ttl);
        self.make_room(&mut table, &owner);
        table.insert(
            id.clone(),
            Entry {
                session,
                owner,
                last_seen: now,
            },
        );
        Ok(id)
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
    /// is `None`, as an unknown or expired id is (and its expiry is not refreshed).
    pub fn get(&self, id: &str, owner: &SessionOwner) -> Option<Arc<Session>> {
        let now = self.clock.monotonic();
        let mut table = self.lock();
        match table.get_mut(id) {
            Some(entry) if now.saturating_sub(entry.last_seen) >= self.ttl => {
                table.remove(id);
                None
            }
            Some(entry) if entry.owner == *owner => {
                entry.last_seen = now;
                Some(Arc::clone(&entry.session))
            }
            _ => None,
        }
    }

    /// Ends a session of `owner`; false when it did not exist or is another owner's.
    pub fn remove(&self, id: &str, owner: &SessionOwner) -> bool {
        let mut table = self.lock();
        if table.get(id).is_some_and(|e| e.owner == *owner) {
            table.remove(id);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(id: &str) -> SessionOwner {
        SessionOwner::of(&CredentialRef {
            credential_id: id.to_owned(),
            client_id: None,
        })
    }

    #[test]
    fn sessions_resolve_until_removed_or_expired() {
        let sessions = Sessions::new(Duration::from_secs(60), Clock::System);
        let alice = owner("alice");
        let id = sessions
            .create(Arc::new(Session::new()), alice.clone())
            .expect("id");
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(sessions.get(&id, &alice).is_some());
        assert!(sessions.remove(&id, &alice));
        assert!(sessions.get(&id, &alice).is_none());

        let short = Sessions::new(Duration::ZERO, Clock::System);
        let id = short
            .create(Arc::new(Session::new()), alice.clone())
            .expect("id");
        assert!(short.get(&id, &alice).is_none());
    }

    #[test]
    fn an_idle_session_expires_exactly_after_its_ttl_and_use_keeps_it_alive() {
        let manual = crate::clock::ManualClock::at_unix_secs(1_800_000_000);
        let sessions = Sessions::new(Duration::from_secs(60), manual.clock());
        let alice = owner("alice");
        let id = sessions
            .create(Arc::new(Session::new()), alice.clone())
            .expect("id");
        let idle = sessions
            .create(Arc::new(Session::new()), alice.clone())
            .expect("id");
        // Used 59.999 s after it was last seen: alive, and its expiry starts again.
        manual.advance(Duration::from_millis(59_999));
        assert!(sessions.get(&id, &alice).is_some());
        assert!(sessions.get(&idle, &alice).is_some());
        manual.advance(Duration::from_secs(30));
        assert!(sessions.get(&id, &alice).is_some());
        // Exactly 60 s idle: gone, and it stays gone.
        manual.advance(Duration::from_secs(60));
        assert!(sessions.get(&idle, &alice).is_none());
        assert!(sessions.get(&id, &alice).is_none());
        manual.set_unix_secs(1_800_000_000);
        assert!(sessions.get(&id, &alice).is_none());
    }

    #[test]
    fn a_session_answers_only_its_owner() {
        let sessions = Sessions::new(Duration::from_secs(60), Clock::System);
        let (alice, mallory) = (owner("alice"), owner("mallory"));
        let id = sessions
            .create(Arc::new(Session::new()), alice.clone())
            .expect("id");
        assert!(sessions.get(&id, &mallory).is_none());
        assert!(!sessions.remove(&id, &mallory));
        assert!(sessions.get(&id, &alice).is_some());
        // Tokens of one OAuth client share its sessions (a refreshed token keeps them).
        let of_client = |credential: &str| {
            SessionOwner::of(&CredentialRef {
                credential_id: credential.to_owned(),
                client_id: Some("c1".to_owned()),
            })
        };
        let id = sessions
            .create(Arc::new(Session::new()), of_client("token1"))
            .expect("id");
        assert!(sessions.get(&id, &of_client("token2")).is_some());
        assert!(sessions.get(&id, &owner("token2")).is_none());
    }

    #[test]
    fn a_flood_from_one_owner_never_evicts_another_owners_sessions() {
        let sessions = Sessions::with_limits(Duration::from_secs(60), Clock::System, 20, 8);
        let (alice, bob, mallory) = (owner("alice"), owner("bob"), SessionOwner::anonymous());
        let new = || Arc::new(Session::new());
        let kept = sessions.create(new(), alice.clone()).expect("id");
        let bobs: Vec<String> = (0..7)
            .map(|_| sessions.create(new(), bob.clone()).expect("id"))
            .collect();
        let mut mallorys = Vec::new();
        for _ in 0..1_000 {
            mallorys.push(sessions.create(new(), mallory.clone()).expect("id"));
        }
        assert!(sessions.get(&kept, &alice).is_some());
        assert!(bobs.iter().all(|id| sessions.get(id, &bob).is_some()));
        // Mallory keeps only its newest sessions, up to its own cap.
        let live = mallorys
            .iter()
            .filter(|id| sessions.get(id, &mallory).is_some())
            .count();
        assert_eq!(live, 8);
        assert!(sessions.get(&mallorys[999], &mallory).is_some());

        // A full table gives way at the owner holding the most sessions.
        let carol = owner("carol");
        for _ in 0..5 {
            sessions.create(new(), carol.clone()).expect("id");
        }
        let live = mallorys
            .iter()
            .filter(|id| sessions.get(id, &mallory).is_some())
            .count();
        assert_eq!(live, 7);
        assert!(sessions.get(&kept, &alice).is_some());
        assert!(bobs.iter().all(|id| sessions.get(id, &bob).is_some()));
    }
}
