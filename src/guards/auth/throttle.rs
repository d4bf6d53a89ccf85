//! The limits on argon2 work: the per-source failure throttle (charged before any
//! verification, refunded on success), the server-wide ceiling on verifications started
//! per second, and the gate on verifications running at once.

use super::*;

/// Distinct sources the throttle tracks; beyond it new sources share one overflow slot,
/// so memory stays bounded and a flood from many sources still cannot burn the CPU.
pub(super) const THROTTLE_MAX_SOURCES: usize = 10_000;
/// The shared slot of sources beyond [`THROTTLE_MAX_SOURCES`] (not a valid peer address).
pub(super) const THROTTLE_OVERFLOW: &str = "\u{0}overflow";

/// Failure counters per source, in fixed windows.
#[derive(Default)]
pub(super) struct Throttle {
    pub(super) sources: HashMap<String, FailureWindow>,
    /// Window start at which expired slots were last pruned.
    pub(super) pruned_window: i64,
}

#[derive(Clone, Copy)]
pub(super) struct FailureWindow {
    pub(super) start: i64,
    pub(super) count: u32,
}

/// One admitted attempt: refunded when it succeeds.
pub(super) struct Ticket {
    pub(super) key: String,
    pub(super) start: i64,
}

impl Throttle {
    /// The slot `source` counts in: its own, or the overflow slot once the map is full.
    pub(super) fn slot_key(&mut self, source: &str, start: i64) -> String {
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

    pub(super) fn window(&mut self, key: String, start: i64) -> &mut FailureWindow {
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
    pub(super) fn admit(&mut self, source: &str, now: i64) -> Result<Ticket, McpError> {
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
    pub(super) fn refund(&mut self, ticket: Ticket) {
        if let Some(window) = self.sources.get_mut(&ticket.key)
            && window.start == ticket.start
        {
            window.count = window.count.saturating_sub(1);
        }
    }

    /// Counts a failure that needed no admission (a cached token that is now refused).
    pub(super) fn record_failure(&mut self, source: &str, now: i64) {
        let start = now - now.rem_euclid(AUTH_FAILURE_WINDOW_SECS);
        let key = self.slot_key(source, start);
        let window = self.window(key, start);
        window.count = window.count.saturating_add(1);
    }
}

/// The server-wide ceiling on argon2 work: verifications started per second of the
/// clock, whatever their source. The per-source throttle bounds what one address can
/// spend; this bounds what many addresses together can.
pub(super) struct Ceiling {
    pub(super) per_second: AtomicU32,
    /// The second being counted and the verifications started in it.
    pub(super) window: Mutex<(i64, u32)>,
}

impl Ceiling {
    pub(super) fn new(per_second: u32) -> Ceiling {
        Ceiling {
            per_second: AtomicU32::new(per_second.max(1)),
            window: Mutex::new((i64::MIN, 0)),
        }
    }

    /// Reserves one verification in the second `now`, or refuses until the next second.
    pub(super) fn admit(&self, now: i64) -> Result<(), McpError> {
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

/// argon2 verifications running at once at most: each holds 19 MiB and a core, so a burst
/// of first presentations (sixteen connections opening with the same new token) must queue
/// instead of multiplying memory.
const MAX_CONCURRENT_ARGON2: usize = 2;

/// A counting semaphore.
#[derive(Default)]
pub(super) struct Gate {
    running: Mutex<usize>,
    freed: std::sync::Condvar,
}

impl Gate {
    /// Waits for a place among the [`MAX_CONCURRENT_ARGON2`] verifications running at once.
    pub(super) fn enter(&self) -> GatePass<'_> {
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

/// A place inside the [`Gate`], given back on drop.
pub(super) struct GatePass<'a>(&'a Gate);

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
