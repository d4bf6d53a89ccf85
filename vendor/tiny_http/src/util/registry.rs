//! Patched for tollgate: the open connections of a listener, at most `max` of them.
//!
//! At the cap, a new connection takes the place of the connection that has waited longest
//! on its client (idle between requests, or still sending its request head or body, or
//! being drained after a refusal); that one is shut down, which ends the blocking read of
//! its thread. A connection whose request is being worked on is never evicted, so slow
//! clients can delay new connections but never stop a valid request from being answered.

use std::net::Shutdown;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::connection::Connection;
use crate::util::conn_state::ConnState;

struct Entry {
    id: u64,
    state: Arc<ConnState>,
    socket: Arc<Connection>,
}

pub(crate) struct Registry {
    max: usize,
    entries: Mutex<Vec<Entry>>,
    next_id: AtomicU64,
}

/// A connection's place in the registry, given back on drop.
pub(crate) struct Ticket {
    registry: Arc<Registry>,
    id: u64,
}

impl Registry {
    pub(crate) fn new(max: usize) -> Arc<Registry> {
        Arc::new(Registry {
            max: max.max(1),
            entries: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Entry>> {
        // A panic elsewhere must not make every later connection fail.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a connection, evicting another at the cap; `None` when the cap is
    /// reached and no connection can be evicted.
    pub(crate) fn admit(
        self: &Arc<Self>,
        state: &Arc<ConnState>,
        socket: &Arc<Connection>,
    ) -> Option<Ticket> {
        let mut entries = self.lock();
        if entries.len() >= self.max && !evict_oldest(&mut entries) {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        entries.push(Entry {
            id,
            state: Arc::clone(state),
            socket: Arc::clone(socket),
        });
        Some(Ticket {
            registry: Arc::clone(self),
            id,
        })
    }

    /// Evicts one connection waiting on its client, whatever the count (to free its thread).
    pub(crate) fn evict_one(&self) -> bool {
        evict_oldest(&mut self.lock())
    }

    /// How many connections are open.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Shuts down the evictable connection that entered its phase first and forgets it.
fn evict_oldest(entries: &mut Vec<Entry>) -> bool {
    loop {
        let oldest = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, e.state.phase(), e.state.since()))
            .filter(|(_, phase, _)| phase.evictable())
            .min_by_key(|(_, _, since)| *since);
        let Some((index, phase, _)) = oldest else {
            return false;
        };
        // The phase may have changed since it was read (the request reached its worker):
        // then look again.
        if entries[index].state.evict(phase) {
            let entry = entries.swap_remove(index);
            let _ = entry.socket.shutdown(Shutdown::Both);
            return true;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut entries = self.registry.lock();
        if let Some(index) = entries.iter().position(|e| e.id == self.id) {
            entries.swap_remove(index);
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::util::Phase;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    /// A server-side connection and the client's end of it.
    fn pair(listener: &TcpListener) -> (Arc<Connection>, TcpStream) {
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        (Arc::new(Connection::from(server)), client)
    }

    fn state() -> Arc<ConnState> {
        Arc::new(ConnState::new(
            Duration::from_secs(60),
            Duration::from_secs(60),
        ))
    }

    #[test]
    fn at_the_cap_the_oldest_waiting_connection_makes_room_and_work_is_never_evicted() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let registry = Registry::new(2);
        let (working, working_state) = (pair(&listener), state());
        let _a = registry.admit(&working_state, &working.0).unwrap();
        assert!(working_state.advance(Phase::Head, Phase::Body, None));
        assert!(working_state.advance(Phase::Body, Phase::Working, None));
        let (slow, slow_state) = (pair(&listener), state());
        let _b = registry.admit(&slow_state, &slow.0).unwrap();

        let (new, new_state) = (pair(&listener), state());
        let _c = registry.admit(&new_state, &new.0).expect("room is made");
        assert_eq!(slow_state.phase(), Phase::Evicted);
        let mut slow_client = slow.1;
        assert_eq!(slow_client.read(&mut [0u8; 8]).unwrap(), 0, "shut down");
        assert_eq!(working_state.phase(), Phase::Working);
        assert_eq!(registry.len(), 2);

        assert!(new_state.advance(Phase::Head, Phase::Working, None));
        let (last, last_state) = (pair(&listener), state());
        assert!(
            registry.admit(&last_state, &last.0).is_none(),
            "all working"
        );
        drop(_c);
        assert!(
            registry.admit(&last_state, &last.0).is_some(),
            "a ticket gives back its place"
        );
    }
}
