//! How much of tollgate one backend may take, and how long it is trusted while it fails:
//! the keys of a `[[backends]]` entry that bound its calls in flight, the calls waiting
//! for one of them, and its circuit breaker ([`BackendLimits`]), with their defaults and
//! their checks against the entry's own `timeout_ms`.

use std::time::Duration;

/// Calls forwarded to one backend at once unless configured (`max_in_flight`).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;
/// Calls that may wait for a slot unless configured (`queue`).
pub const DEFAULT_QUEUE: usize = 256;
/// The longest a call waits for a slot unless configured (`queue_timeout_ms`), and never
/// longer than the backend's `timeout_ms`.
pub const DEFAULT_QUEUE_TIMEOUT_MS: u64 = 5_000;
/// Consecutive failures that open the circuit unless configured (`breaker_failures`).
pub const DEFAULT_BREAKER_FAILURES: u32 = 5;
/// How long an open circuit refuses calls unless configured (`breaker_cooldown_ms`).
pub const DEFAULT_BREAKER_COOLDOWN_MS: u64 = 30_000;

/// The bounds each key is checked against.
const MAX_IN_FLIGHT_RANGE: (u64, u64) = (1, 4_096);
const QUEUE_RANGE: (u64, u64) = (0, 65_536);
const BREAKER_FAILURES_RANGE: (u64, u64) = (0, 1_000);
const BREAKER_COOLDOWN_RANGE_MS: (u64, u64) = (100, 3_600_000);

/// The admission limits of one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendLimits {
    /// Calls forwarded at once (`max_in_flight`).
    pub max_in_flight: usize,
    /// Calls that may wait for a slot, first come first served (`queue`; 0: none wait).
    pub queue: usize,
    /// The longest a call waits for a slot (`queue_timeout_ms`).
    pub queue_timeout: Duration,
    /// Consecutive failures that show the backend unhealthy and open its circuit
    /// (`breaker_failures`; 0: no circuit breaker).
    pub breaker_failures: u32,
    /// How long an open circuit refuses calls before one trial call goes through
    /// (`breaker_cooldown_ms`).
    pub breaker_cooldown: Duration,
}

impl Default for BackendLimits {
    fn default() -> BackendLimits {
        BackendLimits {
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            queue: DEFAULT_QUEUE,
            queue_timeout: Duration::from_millis(DEFAULT_QUEUE_TIMEOUT_MS),
            breaker_failures: DEFAULT_BREAKER_FAILURES,
            breaker_cooldown: Duration::from_millis(DEFAULT_BREAKER_COOLDOWN_MS),
        }
    }
}

/// The keys as an entry gives them (each may be left out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct RawLimits {
    pub(super) max_in_flight: Option<u64>,
    pub(super) queue: Option<u64>,
    pub(super) queue_timeout_ms: Option<u64>,
    pub(super) breaker_failures: Option<u64>,
    pub(super) breaker_cooldown_ms: Option<u64>,
}

/// `value` (or `default`) when it lies in `min..=max`; the error names `key`.
fn within(
    key: &str,
    value: Option<u64>,
    default: u64,
    (min, max): (u64, u64),
) -> Result<u64, String> {
    let value = value.unwrap_or(default);
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(format!("`{key}` must be between {min} and {max}"))
    }
}

impl RawLimits {
    /// Checks the keys of an entry whose call deadline is `timeout_ms`: the queue's
    /// deadline defaults to [`DEFAULT_QUEUE_TIMEOUT_MS`] or `timeout_ms`, whichever is
    /// shorter, and may not be longer than `timeout_ms`.
    pub(super) fn check(self, timeout_ms: u64) -> Result<BackendLimits, String> {
        let max_in_flight = within(
            "max_in_flight",
            self.max_in_flight,
            DEFAULT_MAX_IN_FLIGHT as u64,
            MAX_IN_FLIGHT_RANGE,
        )?;
        let queue = within("queue", self.queue, DEFAULT_QUEUE as u64, QUEUE_RANGE)?;
        let queue_timeout_ms = self
            .queue_timeout_ms
            .unwrap_or(DEFAULT_QUEUE_TIMEOUT_MS.min(timeout_ms));
        if !(1..=timeout_ms).contains(&queue_timeout_ms) {
            return Err(format!(
                "`queue_timeout_ms` must be between 1 and the backend's `timeout_ms` ({timeout_ms}): \
                 a call never waits for a slot longer than it may take"
            ));
        }
        let breaker_failures = within(
            "breaker_failures",
            self.breaker_failures,
            u64::from(DEFAULT_BREAKER_FAILURES),
            BREAKER_FAILURES_RANGE,
        )?;
        let breaker_cooldown_ms = within(
            "breaker_cooldown_ms",
            self.breaker_cooldown_ms,
            DEFAULT_BREAKER_COOLDOWN_MS,
            BREAKER_COOLDOWN_RANGE_MS,
        )?;
        // Every value was checked against a range that fits the target type.
        Ok(BackendLimits {
            max_in_flight: max_in_flight as usize,
            queue: queue as usize,
            queue_timeout: Duration::from_millis(queue_timeout_ms),
            breaker_failures: breaker_failures as u32,
            breaker_cooldown: Duration::from_millis(breaker_cooldown_ms),
        })
    }
}

impl From<&BackendLimits> for RawLimits {
    /// The keys that give `limits` (for the effective configuration).
    fn from(limits: &BackendLimits) -> RawLimits {
        let millis = |d: Duration| Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        RawLimits {
            max_in_flight: Some(limits.max_in_flight as u64),
            queue: Some(limits.queue as u64),
            queue_timeout_ms: millis(limits.queue_timeout),
            breaker_failures: Some(u64::from(limits.breaker_failures)),
            breaker_cooldown_ms: millis(limits.breaker_cooldown),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn left_out_keys_take_their_defaults_and_the_queue_never_outwaits_the_call() {
        assert_eq!(
            RawLimits::default().check(30_000),
            Ok(BackendLimits::default())
        );
        let short = RawLimits::default().check(300).expect("valid");
        assert_eq!(short.queue_timeout, Duration::from_millis(300));
        let given = RawLimits {
            max_in_flight: Some(1),
            queue: Some(0),
            queue_timeout_ms: Some(200),
            breaker_failures: Some(0),
            breaker_cooldown_ms: Some(100),
        };
        let limits = given.check(1_000).expect("valid");
        assert_eq!(RawLimits::from(&limits), given);
    }

    #[test]
    fn each_key_out_of_its_range_is_named() {
        let cases = [
            (
                RawLimits {
                    max_in_flight: Some(0),
                    ..RawLimits::default()
                },
                "`max_in_flight` must be between 1 and 4096",
            ),
            (
                RawLimits {
                    queue: Some(70_000),
                    ..RawLimits::default()
                },
                "`queue` must be between 0 and 65536",
            ),
            (
                RawLimits {
                    queue_timeout_ms: Some(30_001),
                    ..RawLimits::default()
                },
                "`queue_timeout_ms` must be between 1 and the backend's `timeout_ms` (30000)",
            ),
            (
                RawLimits {
                    queue_timeout_ms: Some(0),
                    ..RawLimits::default()
                },
                "`queue_timeout_ms` must be between 1",
            ),
            (
                RawLimits {
                    breaker_failures: Some(1_001),
                    ..RawLimits::default()
                },
                "`breaker_failures` must be between 0 and 1000",
            ),
            (
                RawLimits {
                    breaker_cooldown_ms: Some(10),
                    ..RawLimits::default()
                },
                "`breaker_cooldown_ms` must be between 100 and 3600000",
            ),
        ];
        for (raw, expected) in cases {
            let message = raw.check(30_000).expect_err(expected);
            assert!(message.starts_with(expected), "{message}");
        }
    }
}
