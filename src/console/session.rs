//! Console sign-ins: the session a cookie names, its CSRF token and its expiry.
//!
//! A sign-in lives in this node's memory only: it ends when the process restarts, and
//! behind a load balancer the console wants stickiness (or one node reached directly; the
//! MCP endpoint needs none). A session ends after `console.idle_minutes` without a
//! request and in any case [`MAX_AGE`] after sign-in. One credential holds at most
//! [`PER_CREDENTIAL`] sign-ins (a new one ends the least recently used of *that*
//! credential), and at most [`CAPACITY`] live at once: past it a sign-in is refused rather
//! than ending another operator's. Every request checks the credential again
//! (`Console::operator`), so a revoked operator key ends its sessions at once.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use subtle::ConstantTimeEq;

use crate::clock::Clock;

/// Sign-ins kept at most; past it a new sign-in is refused ([`Started::Full`]).
pub const CAPACITY: usize = 256;
/// Sign-ins one credential keeps at most; its next one ends its least recently used.
pub const PER_CREDENTIAL: usize = 8;

/// What signing in gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// A new sign-in: the session id (the cookie's value) and what it gives.
    Session(String, Signed),
    /// [`CAPACITY`] sign-ins of other credentials are live: none of them is ended to make
    /// room, so this one is refused until one ends (signing out, or its idle time).
    Full,
}
/// A sign-in ends this long after it began, however busy.
pub const MAX_AGE: Duration = Duration::from_secs(12 * 3600);

/// What a live sign-in gives the request it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The operator's credential (public id).
    pub credential_id: String,
    /// The token every form of this sign-in carries.
    pub csrf: String,
}

struct Entry {
    signed: Signed,
    started_ms: i64,
    last_seen_ms: i64,
}

/// The sign-ins of this node.
pub struct Sessions {
    entries: Mutex<HashMap<String, Entry>>,
    clock: Clock,
    idle: Duration,
}

/// 32 random bytes as hex; `None` when the operating system's generator fails.
pub fn random_token() -> Option<String> {
    crate::guards::auth::random_hex::<32>().ok()
}

/// Whether two tokens are equal, in time that does not depend on where they differ.
pub fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Sessions {
    /// No sign-ins yet; each ends after `idle` without a request.
    pub fn new(clock: Clock, idle: Duration) -> Sessions {
        Sessions {
            entries: Mutex::new(HashMap::new()),
            clock,
            idle,
        }
    }

    /// How long a sign-in lasts without a request (the cookie's `Max-Age`).
    pub fn idle(&self) -> Duration {
        self.idle
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Signs `credential_id` in. `None` when the operating system's generator fails.
    pub fn start(&self, credential_id: &str) -> Option<Started> {
        let id = random_token()?;
        let signed = Signed {
            credential_id: credential_id.to_owned(),
            csrf: random_token()?,
        };
        let now = self.clock.unix_millis();
        let mut entries = self.lock();
        self.forget_expired(&mut entries, now);
        let own: Vec<(&String, i64)> = entries
            .iter()
            .filter(|(_, e)| e.signed.credential_id == credential_id)
            .map(|(k, e)| (k, e.last_seen_ms))
            .collect();
        let full = entries.len() >= CAPACITY;
        if own.len() >= PER_CREDENTIAL || (full && !own.is_empty()) {
            // This credential's own least recently used sign-in makes room.
            if let Some(oldest) = own
                .iter()
                .min_by_key(|(_, seen)| *seen)
                .map(|(k, _)| (*k).clone())
            {
                entries.remove(&oldest);
            }
        } else if full {
            return Some(Started::Full);
        }
        entries.insert(
            id.clone(),
            Entry {
                signed: signed.clone(),
                started_ms: now,
                last_seen_ms: now,
            },
        );
        Some(Started::Session(id, signed))
    }

    /// [`Sessions::start`] for tests: the session, which must have started.
    #[cfg(test)]
    fn started(&self, credential_id: &str) -> (String, Signed) {
        match self.start(credential_id) {
            Some(Started::Session(id, signed)) => (id, signed),
            other => panic!("not started: {other:?}"),
        }
    }

    /// The live sign-in `id` names, its idle time restarted; `None` when there is none
    /// (unknown, expired or ended).
    pub fn get(&self, id: &str) -> Option<Signed> {
        let now = self.clock.unix_millis();
        let mut entries = self.lock();
        let entry = entries.get_mut(id)?;
        if self.expired(entry, now) {
            entries.remove(id);
            return None;
        }
        entry.last_seen_ms = now;
        Some(entry.signed.clone())
    }

    /// Ends sign-in `id` (signing out, or a credential that lost its standing).
    pub fn end(&self, id: &str) {
        self.lock().remove(id);
    }

    /// How many sign-ins are live.
    pub fn len(&self) -> usize {
        let now = self.clock.unix_millis();
        let mut entries = self.lock();
        self.forget_expired(&mut entries, now);
        entries.len()
    }

    /// Whether no sign-in is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn expired(&self, entry: &Entry, now: i64) -> bool {
        now.saturating_sub(entry.last_seen_ms) >= millis(self.idle)
            || now.saturating_sub(entry.started_ms) >= millis(MAX_AGE)
    }

    fn forget_expired(&self, entries: &mut HashMap<String, Entry>, now: i64) {
        entries.retain(|_, e| !self.expired(e, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn sessions() -> (ManualClock, Sessions) {
        let clock = ManualClock::at_unix_secs(1_700_000_000);
        let sessions = Sessions::new(clock.clock(), Duration::from_secs(900));
        (clock, sessions)
    }

    #[test]
    fn a_sign_in_lasts_while_used_and_ends_after_its_idle_time() {
        let (clock, sessions) = sessions();
        let (id, signed) = sessions.started("Abc123");
        assert_eq!(signed.credential_id, "Abc123");
        assert_eq!(signed.csrf.len(), 64);
        assert_ne!(id, signed.csrf);
        clock.advance(Duration::from_secs(899));
        assert_eq!(sessions.get(&id), Some(signed.clone()));
        clock.advance(Duration::from_secs(899));
        assert_eq!(sessions.get(&id), Some(signed));
        clock.advance(Duration::from_secs(900));
        assert_eq!(sessions.get(&id), None);
        assert!(sessions.is_empty());
    }

    #[test]
    fn a_busy_sign_in_still_ends_at_its_maximum_age() {
        let (clock, sessions) = sessions();
        let (id, _) = sessions.started("Abc123");
        let step = Duration::from_secs(600);
        let mut used = Duration::ZERO;
        while used + step < MAX_AGE {
            clock.advance(step);
            used += step;
            assert!(sessions.get(&id).is_some(), "after {used:?}");
        }
        clock.advance(MAX_AGE - used);
        assert_eq!(sessions.get(&id), None);
    }

    #[test]
    fn signing_out_ends_only_that_sign_in_and_unknown_ids_give_nothing() {
        let (_, sessions) = sessions();
        let (one, _) = sessions.started("A");
        let (two, _) = sessions.started("A");
        sessions.end(&one);
        assert_eq!(sessions.get(&one), None);
        assert!(sessions.get(&two).is_some());
        assert_eq!(sessions.get("0".repeat(64).as_str()), None);
        assert_eq!(sessions.get(""), None);
    }

    #[test]
    fn one_credential_signing_in_again_and_again_ends_only_its_own_oldest() {
        let (clock, sessions) = sessions();
        let (other, _) = sessions.started("Other");
        let mine: Vec<String> = (0..300)
            .map(|_| {
                clock.advance(Duration::from_millis(1));
                sessions.started("Busy").0
            })
            .collect();
        assert!(sessions.get(&other).is_some(), "another operator stays");
        assert_eq!(sessions.len(), 1 + PER_CREDENTIAL);
        let live: Vec<&String> = mine
            .iter()
            .filter(|id| sessions.get(id).is_some())
            .collect();
        assert_eq!(
            live,
            mine[mine.len() - PER_CREDENTIAL..]
                .iter()
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn past_the_capacity_a_sign_in_is_refused_and_nobody_else_is_ended() {
        let (clock, sessions) = sessions();
        let ids: Vec<String> = (0..CAPACITY)
            .map(|i| {
                clock.advance(Duration::from_millis(1));
                sessions.started(&format!("K{i}")).0
            })
            .collect();
        assert_eq!(sessions.start("late"), Some(Started::Full));
        assert_eq!(sessions.len(), CAPACITY);
        assert!(ids.iter().all(|id| sessions.get(id).is_some()));
        // A credential that already holds a sign-in may still replace its own...
        for _ in 0..PER_CREDENTIAL {
            sessions.started("K0");
        }
        assert_eq!(sessions.len(), CAPACITY);
        // ...and once one ends, there is room again.
        sessions.end(&ids[1]);
        sessions.started("late");
        assert_eq!(sessions.len(), CAPACITY);
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "abcd"));
        assert!(!same_token("", "a"));
    }
}
