//! Patched for tollgate: what one connection is doing, shared by its thread (which moves
//! it from phase to phase and reads under its deadline) and the connection registry (which
//! evicts connections that are waiting on their client).

use std::convert::TryFrom;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A connection's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    /// Between two requests of a keep-alive connection.
    Idle = 0,
    /// Receiving a request head.
    Head = 1,
    /// Receiving a request body.
    Body = 2,
    /// The request is being worked on and answered: never evicted.
    Working = 3,
    /// Refused or finished: draining what the client still sends, then closing.
    Closing = 4,
    /// Shut down by the registry to make room.
    Evicted = 5,
}

impl Phase {
    fn from_u8(value: u8) -> Phase {
        match value {
            0 => Phase::Idle,
            1 => Phase::Head,
            2 => Phase::Body,
            3 => Phase::Working,
            4 => Phase::Closing,
            _ => Phase::Evicted,
        }
    }

    /// Whether the connection is waiting on its client, so that closing it loses no work.
    pub(crate) fn evictable(self) -> bool {
        matches!(
            self,
            Phase::Idle | Phase::Head | Phase::Body | Phase::Closing
        )
    }
}

/// Nanoseconds since the first use in this process (0 is never a deadline).
fn now_nanos() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_nanos())
        .unwrap_or(u64::MAX)
        .max(1)
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The shared state of one connection.
#[derive(Debug)]
pub(crate) struct ConnState {
    phase: AtomicU8,
    /// When the current phase began (for choosing whom to evict).
    since: AtomicU64,
    /// When the current phase must end; 0 = no deadline.
    deadline: AtomicU64,
    /// The connection must not carry another request (its framing is lost).
    close_after: AtomicBool,
    /// How long the connection may then wait for its next request.
    idle_timeout: Duration,
}

impl ConnState {
    /// A new connection, receiving its first request head under `head_timeout`, waiting
    /// at most `idle_timeout` between requests.
    pub(crate) fn new(head_timeout: Duration, idle_timeout: Duration) -> ConnState {
        let now = now_nanos();
        ConnState {
            phase: AtomicU8::new(Phase::Head as u8),
            since: AtomicU64::new(now),
            deadline: AtomicU64::new(now.saturating_add(nanos(head_timeout))),
            close_after: AtomicBool::new(false),
            idle_timeout,
        }
    }

    /// The response of the request being worked on has been sent: the connection waits for
    /// its next request (and may be evicted, since no work of it is lost).
    pub(crate) fn responded(&self) -> bool {
        self.advance(Phase::Working, Phase::Idle, Some(self.idle_timeout))
    }

    pub(crate) fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    /// When the current phase began, in this module's clock.
    pub(crate) fn since(&self) -> u64 {
        self.since.load(Ordering::Acquire)
    }

    /// Moves from `from` to `to` with a new deadline (`None`: none). Fails when the
    /// connection is no longer in `from` (it was evicted).
    pub(crate) fn advance(&self, from: Phase, to: Phase, limit: Option<Duration>) -> bool {
        let now = now_nanos();
        // The deadline is set first so that a reader never sees the new phase with the
        // old deadline; a failed move leaves an evicted connection, which reads nothing.
        let deadline = limit.map_or(0, |l| now.saturating_add(nanos(l)));
        self.deadline.store(deadline, Ordering::Release);
        self.since.store(now, Ordering::Release);
        self.phase
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Moves to `to` from whatever phase the connection is in, unless it was evicted.
    pub(crate) fn enter(&self, to: Phase, limit: Option<Duration>) -> bool {
        let current = self.phase();
        current != Phase::Evicted && self.advance(current, to, limit)
    }

    /// Marks the connection evicted if it is still in the evictable phase `seen`.
    pub(crate) fn evict(&self, seen: Phase) -> bool {
        seen.evictable()
            && self
                .phase
                .compare_exchange(
                    seen as u8,
                    Phase::Evicted as u8,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
    }

    /// Time left before the deadline: `Ok(None)` without one, `Err` once it has passed.
    pub(crate) fn remaining(&self) -> Result<Option<Duration>, ()> {
        match self.deadline.load(Ordering::Acquire) {
            0 => Ok(None),
            deadline => {
                let now = now_nanos();
                if now >= deadline {
                    Err(())
                } else {
                    Ok(Some(Duration::from_nanos(deadline - now)))
                }
            }
        }
    }

    /// The connection must close after the current response.
    pub(crate) fn close_after(&self) {
        self.close_after.store(true, Ordering::Release);
    }

    pub(crate) fn must_close(&self) -> bool {
        self.close_after.load(Ordering::Acquire) || self.phase() == Phase::Evicted
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn phases_move_and_evicted_connections_stay_evicted() {
        let state = ConnState::new(Duration::from_secs(10), Duration::from_secs(60));
        assert_eq!(state.phase(), Phase::Head);
        assert!(state.advance(Phase::Head, Phase::Body, Some(Duration::from_secs(1))));
        assert!(matches!(state.remaining(), Ok(Some(_))));
        assert!(!state.evict(Phase::Head), "a stale view evicts nothing");
        assert!(state.advance(Phase::Body, Phase::Working, None));
        assert!(!state.evict(Phase::Working), "work is never evicted");
        assert_eq!(state.remaining(), Ok(None));
        assert!(state.enter(Phase::Idle, Some(Duration::ZERO)));
        assert_eq!(state.remaining(), Err(()));
        assert!(state.evict(Phase::Idle));
        assert!(!state.enter(Phase::Head, None));
        assert!(state.must_close());
    }
}
