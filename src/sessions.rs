//! Handshake-era HTTP sessions: `Mcp-Session-Id` → [`Session`], with an idle expiry.
//!
//! Ids are 128 random bits from the OS, hex-encoded (visible ASCII, as the transport
//! requires). An expired or deleted id answers 404 so the client re-initializes. The table
//! is bounded: when full, the least recently used session is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::protocol::Session;

/// Sessions kept at most; beyond it the least recently used one is dropped.
const MAX_SESSIONS: usize = 10_000;

struct Entry {
    session: Arc<Session>,
    last_seen: Instant,
}

/// The session table of one HTTP listener.
pub struct Sessions {
    ttl: Duration,
    table: Mutex<HashMap<String, Entry>>,
}

/// Why a session id did not resolve.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// No such id, or it expired.
    Gone,
}

impl Sessions {
    /// An empty table whose sessions expire after `ttl` without traffic.
    pub fn new(ttl: Duration) -> Sessions {
        Sessions {
            ttl,
            table: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a session and returns its id.
    pub fn create(&self, session: Arc<Session>) -> std::io::Result<String> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let now = Instant::now();
        let mut table = self.lock();
        table.retain(|_, e| now.duration_since(e.last_seen) < self.ttl);
        if table.len() >= MAX_SESSIONS
            && let Some(oldest) = table
                .iter()
                .min_by_key(|(_, e)| e.last_seen)
                .map(|(k, _)| k.clone())
        {
            table.remove(&oldest);
        }
        table.insert(
            id.clone(),
            Entry {
                session,
                last_seen: now,
            },
        );
        Ok(id)
    }

    /// Finds a live session and refreshes its expiry.
    pub fn get(&self, id: &str) -> Result<Arc<Session>, Lookup> {
        let now = Instant::now();
        let mut table = self.lock();
        match table.get_mut(id) {
            Some(entry) if now.duration_since(entry.last_seen) < self.ttl => {
                entry.last_seen = now;
                Ok(Arc::clone(&entry.session))
            }
            Some(_) => {
                table.remove(id);
                Err(Lookup::Gone)
            }
            None => Err(Lookup::Gone),
        }
    }

    /// Ends a session; false when it did not exist.
    pub fn remove(&self, id: &str) -> bool {
        self.lock().remove(id).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_resolve_until_removed_or_expired() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let id = sessions.create(Arc::new(Session::new())).expect("id");
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(sessions.get(&id).is_ok());
        assert!(sessions.remove(&id));
        assert_eq!(sessions.get(&id).err(), Some(Lookup::Gone));

        let short = Sessions::new(Duration::ZERO);
        let id = short.create(Arc::new(Session::new())).expect("id");
        assert_eq!(short.get(&id).err(), Some(Lookup::Gone));
    }
}
