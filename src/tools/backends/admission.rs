//! Admission of the calls to one backend, around every forwarded call of either kind
//! ([`Admission::run`]): a bounded number in flight with a bounded queue and a deadline to
//! wait in it, and a circuit breaker that stops forwarding to a backend that keeps failing.
//!
//! **Calls in flight.** At most `max_in_flight` calls are forwarded at once. A call that
//! finds every slot taken waits in a queue of at most `queue` calls, first come first
//! served, for at most `queue_timeout`: a slot that frees is handed to the call at the head
//! of the queue, which is woken on a condition variable of its own. A full queue answers at
//! once, a wait past the deadline answers then (both [`ErrorKind::BackendBusy`]), and a
//! caller that cancels leaves the queue (its flag is looked at every [`CANCEL_POLL`]).
//!
//! **Circuit breaker.** Closed, it counts the consecutive calls whose outcome shows the
//! backend unhealthy ([`Sign::of`]): it could not be reached, it did not answer in time, or
//! it answered a temporary 502, 503 or 504. At `breaker_failures` of them the circuit opens:
//! calls fail fast with [`ErrorKind::BackendCircuitOpen`] without reaching the backend.
//! After `breaker_cooldown` one trial call goes through (half-open; the others still fail
//! fast): its success closes the circuit, its failure opens it for another cooldown. Any
//! answer of the backend — a result, a tool's own error, a 4xx rejection, its own rate
//! limit, a refused credential — shows it alive and resets the count; a caller's
//! cancellation says nothing about it.
//!
//! The cooldown reads the server's [`Clock`] (a manual one in tests, so an expiry is
//! reached without waiting); the queue's deadline is a measured wait on [`Instant`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::catalog::{Class, ErrorKind, McpError};
use crate::clock::Clock;
use crate::config::BackendLimits;
use crate::tools::backends::NOT_CONNECTED;

/// How long a queued call sleeps at most between looks at its caller's cancellation.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// The state of a backend's circuit, as `/healthz`, `/metrics` and the console show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Circuit {
    /// Calls are forwarded.
    Closed,
    /// Calls fail fast until the cooldown ends.
    Open,
    /// The cooldown ended: the next call (or the one under way) is the trial.
    HalfOpen,
}

impl Circuit {
    /// `"closed"`, `"open"` or `"half_open"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Circuit::Closed => "closed",
            Circuit::Open => "open",
            Circuit::HalfOpen => "half_open",
        }
    }
}

/// Why a call was not forwarded: `details.reason` of its error, and the `reason` label of
/// `tollgate_backend_rejected_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// Every slot was taken and the queue was full.
    QueueFull,
    /// It waited in the queue past `queue_timeout_ms`.
    QueueTimeout,
    /// The circuit was open.
    CircuitOpen,
}

impl Rejection {
    /// Every reason, in the order they are reported.
    pub const ALL: [Rejection; 3] = [
        Rejection::QueueFull,
        Rejection::QueueTimeout,
        Rejection::CircuitOpen,
    ];

    /// `"queue_full"`, `"queue_timeout"` or `"circuit_open"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::QueueFull => "queue_full",
            Rejection::QueueTimeout => "queue_timeout",
            Rejection::CircuitOpen => "circuit_open",
        }
    }

    fn index(self) -> usize {
        match self {
            Rejection::QueueFull => 0,
            Rejection::QueueTimeout => 1,
            Rejection::CircuitOpen => 2,
        }
    }
}

/// One backend's admission at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionStatus {
    /// Calls forwarded at once at most (`max_in_flight`).
    pub max_in_flight: usize,
    /// Calls being forwarded now.
    pub in_flight: usize,
    /// Calls waiting for a slot now.
    pub queued: usize,
    /// The circuit's state.
    pub circuit: Circuit,
    /// While the circuit is open: the seconds until a trial call goes through (at least 1).
    pub retry_after_secs: Option<u64>,
    /// Calls not forwarded so far, by reason, in the order of [`Rejection::ALL`].
    pub rejected: [u64; 3],
    /// Times the circuit opened so far (a failed trial reopening it included).
    pub circuit_opened: u64,
}

impl AdmissionStatus {
    /// Calls not forwarded so far for `reason`.
    pub fn rejected(&self, reason: Rejection) -> u64 {
        self.rejected[reason.index()]
    }

    /// What `/healthz` and the console show of it: `in_flight` of `max_in_flight`,
    /// `queued`, the `circuit` and, while it is open, `retry_after` (seconds).
    pub fn fields(&self) -> serde_json::Map<String, Value> {
        let mut fields = serde_json::Map::new();
        fields.insert("in_flight".into(), self.in_flight.into());
        fields.insert("max_in_flight".into(), self.max_in_flight.into());
        fields.insert("queued".into(), self.queued.into());
        fields.insert("circuit".into(), self.circuit.as_str().into());
        if let Some(secs) = self.retry_after_secs {
            fields.insert("retry_after".into(), secs.into());
        }
        fields
    }
}

/// What a forwarded call's outcome says about the backend's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sign {
    /// It answered (whatever it answered).
    Alive,
    /// It could not be reached, did not answer in time, or answered a temporary error.
    Failing,
    /// Nothing: the caller cancelled, or the gate itself failed.
    Unknown,
}

impl Sign {
    /// The sign of `outcome`.
    fn of<T>(outcome: &Result<T, McpError>) -> Sign {
        let Err(error) = outcome else {
            return Sign::Alive;
        };
        match error.kind() {
            // Refused by the gate while it knows the backend is down (it is reconnecting):
            // counting these would keep the circuit open past the outage.
            ErrorKind::ToolBackendUnavailable if detail_reason(error) == Some(NOT_CONNECTED) => {
                Sign::Unknown
            }
            ErrorKind::ToolBackendUnavailable | ErrorKind::AdapterErrorRetryable => Sign::Failing,
            ErrorKind::Timeout if detail_reason(error) == Some("cancelled") => Sign::Unknown,
            ErrorKind::Timeout => Sign::Failing,
            ErrorKind::BackendBusy | ErrorKind::BackendCircuitOpen => Sign::Unknown,
            // Every other failure of the tool class is the backend's own answer: a
            // rejection, a conflict, its rate limit, a refused credential, an error result.
            kind if kind.spec().class == Class::Tool => Sign::Alive,
            _ => Sign::Unknown,
        }
    }
}

/// `details.reason` of `error`, when it has one.
fn detail_reason(error: &McpError) -> Option<&str> {
    error
        .fields()
        .get("details")
        .and_then(|details| details.get("reason"))
        .and_then(Value::as_str)
}

/// Where the breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Breaker {
    /// Calls go through; `failures` in a row showed the backend unhealthy.
    Closed { failures: u32 },
    /// Calls fail fast until `until` ([`Clock::monotonic`]).
    Open { until: Duration },
    /// The cooldown ended; `trial_out` while the trial call is under way.
    HalfOpen { trial_out: bool },
}

/// How a call passed the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// The circuit was closed (or there is no breaker).
    Closed,
    /// It is the half-open circuit's trial.
    Trial,
}

/// A call waiting in the queue: the slot handed to it, and what wakes it.
#[derive(Default)]
struct Waiter {
    /// Set (under the state's lock) when a freed slot is handed to it.
    granted: AtomicBool,
    wake: Condvar,
}

/// What the lock guards.
struct State {
    in_flight: usize,
    queue: VecDeque<Arc<Waiter>>,
    breaker: Breaker,
}

/// The admission of one backend's calls.
pub struct Admission {
    backend: String,
    limits: BackendLimits,
    clock: Clock,
    state: Mutex<State>,
    rejected: [AtomicU64; 3],
    opened: AtomicU64,
}

impl Admission {
    /// The admission of `backend`'s calls within `limits`, its cooldown on `clock`.
    pub fn new(backend: &str, limits: BackendLimits, clock: Clock) -> Admission {
        Admission {
            backend: backend.to_owned(),
            limits,
            clock,
            state: Mutex::new(State {
                in_flight: 0,
                queue: VecDeque::new(),
                breaker: Breaker::Closed { failures: 0 },
            }),
            rejected: Default::default(),
            opened: AtomicU64::new(0),
        }
    }

    /// Runs `forward` once the breaker and a slot admit the call, and learns from its
    /// outcome; otherwise answers the refusal without running it. `cancelled` is the
    /// caller's cancellation, looked at while the call waits for a slot.
    pub fn run<T>(
        &self,
        cancelled: &dyn Fn() -> bool,
        forward: impl FnOnce() -> Result<T, McpError>,
    ) -> Result<T, McpError> {
        let mut ticket = Ticket {
            admission: self,
            pass: self.pass()?,
            sign: Sign::Unknown,
        };
        let slot = self.slot(cancelled)?;
        let outcome = forward();
        drop(slot);
        ticket.sign = Sign::of(&outcome);
        outcome
    }

    /// Its state now.
    pub fn status(&self) -> AdmissionStatus {
        let now = self.clock.monotonic();
        let state = self.state();
        let (circuit, retry_after_secs) = match state.breaker {
            Breaker::Closed { .. } => (Circuit::Closed, None),
            Breaker::Open { until } if now < until => {
                (Circuit::Open, Some(whole_secs(until - now)))
            }
            Breaker::Open { .. } | Breaker::HalfOpen { .. } => (Circuit::HalfOpen, None),
        };
        AdmissionStatus {
            max_in_flight: self.limits.max_in_flight,
            in_flight: state.in_flight,
            queued: state.queue.len(),
            circuit,
            retry_after_secs,
            rejected: self.rejected.each_ref().map(|n| n.load(Ordering::Relaxed)),
            circuit_opened: self.opened.load(Ordering::Relaxed),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing that can panic runs under the lock; a poisoned one holds a whole state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lets the call through the breaker, or refuses it while the circuit is open.
    fn pass(&self) -> Result<Pass, McpError> {
        if self.limits.breaker_failures == 0 {
            return Ok(Pass::Closed);
        }
        let now = self.clock.monotonic();
        let mut state = self.state();
        match state.breaker {
            Breaker::Closed { .. } => Ok(Pass::Closed),
            Breaker::Open { until } if now < until => Err(self.open_refusal(until - now)),
            Breaker::Open { .. } | Breaker::HalfOpen { trial_out: false } => {
                state.breaker = Breaker::HalfOpen { trial_out: true };
                Ok(Pass::Trial)
            }
            Breaker::HalfOpen { trial_out: true } => Err(self.open_refusal(Duration::ZERO)),
        }
    }

    /// Takes a slot, waiting for one in the queue when every slot is taken.
    fn slot(&self, cancelled: &dyn Fn() -> bool) -> Result<Slot<'_>, McpError> {
        let mut state = self.state();
        if state.in_flight < self.limits.max_in_flight && state.queue.is_empty() {
            state.in_flight += 1;
            return Ok(Slot(self));
        }
        if state.queue.len() >= self.limits.queue {
            return Err(self.busy(Rejection::QueueFull));
        }
        let me = Arc::new(Waiter::default());
        state.queue.push_back(Arc::clone(&me));
        let deadline = Instant::now() + self.limits.queue_timeout;
        loop {
            if me.granted.load(Ordering::Relaxed) {
                return Ok(Slot(self));
            }
            let now = Instant::now();
            let gave_up = if cancelled() {
                Some(self.cancelled_wait())
            } else if now >= deadline {
                Some(self.busy(Rejection::QueueTimeout))
            } else {
                None
            };
            if let Some(refusal) = gave_up {
                state.queue.retain(|waiter| !Arc::ptr_eq(waiter, &me));
                return Err(refusal);
            }
            let wait = (deadline - now).min(CANCEL_POLL);
            state = match me.wake.wait_timeout(state, wait) {
                Ok((state, _)) => state,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// Gives a freed slot to the call at the head of the queue, or back.
    fn free_slot(&self) {
        let mut state = self.state();
        match state.queue.pop_front() {
            Some(next) => {
                next.granted.store(true, Ordering::Relaxed);
                next.wake.notify_one();
            }
            None => state.in_flight = state.in_flight.saturating_sub(1),
        }
    }

    /// Moves the breaker on the outcome of a call that passed it as `pass`. An outcome of
    /// a call forwarded before the circuit opened says nothing more.
    fn settle(&self, pass: Pass, sign: Sign) {
        if self.limits.breaker_failures == 0 {
            return;
        }
        let now = self.clock.monotonic();
        let mut state = self.state();
        state.breaker = match (pass, state.breaker, sign) {
            // A trial that ended without a sign hands the trial to the next call.
            (Pass::Trial, Breaker::HalfOpen { .. }, Sign::Unknown) => {
                Breaker::HalfOpen { trial_out: false }
            }
            (_, breaker, Sign::Unknown) => breaker,
            (Pass::Closed, Breaker::Closed { .. }, Sign::Alive) => Breaker::Closed { failures: 0 },
            (Pass::Closed, Breaker::Closed { failures }, Sign::Failing) => {
                let failures = failures.saturating_add(1);
                if failures >= self.limits.breaker_failures {
                    self.open(now, failures)
                } else {
                    Breaker::Closed { failures }
                }
            }
            (Pass::Trial, Breaker::HalfOpen { .. }, Sign::Alive) => {
                tracing::info!(backend = %self.backend, "the trial call succeeded: the backend's circuit is closed");
                Breaker::Closed { failures: 0 }
            }
            (Pass::Trial, Breaker::HalfOpen { .. }, Sign::Failing) => self.open(now, 1),
            (_, breaker, _) => breaker,
        };
    }

    /// The open breaker, from `now` for a cooldown (counted and logged).
    fn open(&self, now: Duration, failures: u32) -> Breaker {
        self.opened.fetch_add(1, Ordering::Relaxed);
        let cooldown_ms =
            u64::try_from(self.limits.breaker_cooldown.as_millis()).unwrap_or(u64::MAX);
        tracing::warn!(
            backend = %self.backend,
            failures,
            cooldown_ms,
            "the backend keeps failing: its circuit is open, calls are refused without reaching it until a trial call after the cooldown succeeds"
        );
        Breaker::Open {
            until: now.saturating_add(self.limits.breaker_cooldown),
        }
    }

    /// Counts a refusal for `reason`.
    fn count(&self, reason: Rejection) {
        self.rejected[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// The refusal of a call while every slot is taken.
    fn busy(&self, reason: Rejection) -> McpError {
        self.count(reason);
        McpError::new(ErrorKind::BackendBusy)
            .detail("backend", self.backend.as_str())
            .detail("reason", reason.as_str())
            .detail("max_in_flight", self.limits.max_in_flight)
    }

    /// The refusal of a call while the circuit is open for `left` more.
    fn open_refusal(&self, left: Duration) -> McpError {
        self.count(Rejection::CircuitOpen);
        McpError::new(ErrorKind::BackendCircuitOpen)
            .with("retry_after", whole_secs(left))
            .detail("backend", self.backend.as_str())
            .detail("reason", Rejection::CircuitOpen.as_str())
    }

    /// The end of a wait the caller cancelled (as a forwarded call it cancels ends).
    fn cancelled_wait(&self) -> McpError {
        McpError::new(ErrorKind::Timeout)
            .detail("backend", self.backend.as_str())
            .detail("reason", "cancelled")
    }
}

/// `left` in whole seconds, rounded up, at least 1: when to try again.
fn whole_secs(left: Duration) -> u64 {
    left.as_millis()
        .div_ceil(1000)
        .clamp(1, u128::from(u64::MAX)) as u64
}

/// A slot taken; freed (and handed on) when dropped, whatever ended the call.
struct Slot<'a>(&'a Admission);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.free_slot();
    }
}

/// A call that passed the breaker; its outcome settles the breaker when dropped, so a
/// call that ends early (refused a slot, or unwinding) leaves it as it found it.
struct Ticket<'a> {
    admission: &'a Admission,
    pass: Pass,
    sign: Sign,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.admission.settle(self.pass, self.sign);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;

    use serde_json::json;

    use super::*;
    use crate::clock::ManualClock;
    use crate::tools::ToolOutput;

    /// A minute and hour boundary (unix seconds).
    const T0: i64 = 1_800_000_000;

    fn limits(max_in_flight: usize, queue: usize, queue_timeout_ms: u64) -> BackendLimits {
        BackendLimits {
            max_in_flight,
            queue,
            queue_timeout: Duration::from_millis(queue_timeout_ms),
            breaker_failures: 0,
            breaker_cooldown: Duration::from_secs(30),
        }
    }

    fn breaker(failures: u32) -> (Admission, ManualClock) {
        let clock = ManualClock::at_unix_secs(T0);
        let limits = BackendLimits {
            breaker_failures: failures,
            ..limits(8, 8, 1_000)
        };
        (Admission::new("crm", limits, clock.clock()), clock)
    }

    fn never_cancelled() -> bool {
        false
    }

    fn ok() -> Result<ToolOutput, McpError> {
        Ok(ToolOutput::text("ok"))
    }

    fn unreachable() -> Result<ToolOutput, McpError> {
        Err(McpError::new(ErrorKind::ToolBackendUnavailable)
            .detail("backend", "crm")
            .detail("reason", "connection refused"))
    }

    fn rejected() -> Result<ToolOutput, McpError> {
        Err(McpError::new(ErrorKind::BackendRejected).detail("backend", "crm"))
    }

    fn cancelled() -> Result<ToolOutput, McpError> {
        Err(McpError::new(ErrorKind::Timeout)
            .detail("backend", "crm")
            .detail("reason", "cancelled"))
    }

    /// `details.reason` of a refusal, with its entry.
    fn refusal(outcome: Result<ToolOutput, McpError>) -> (ErrorKind, String) {
        let error = outcome.expect_err("a refusal");
        let reason = detail_reason(&error).unwrap_or_default().to_owned();
        (error.kind(), reason)
    }

    /// Runs `outcome` through `admission`, counting the calls that reached the backend.
    fn call(
        admission: &Admission,
        reached: &AtomicUsize,
        outcome: fn() -> Result<ToolOutput, McpError>,
    ) -> Result<ToolOutput, McpError> {
        admission.run(&never_cancelled, || {
            reached.fetch_add(1, Ordering::SeqCst);
            outcome()
        })
    }

    /// Waits (a bounded time) until `admission`'s state says `done`: another thread's call
    /// has reached the point the test needs.
    fn until(admission: &Admission, done: impl Fn(&AdmissionStatus) -> bool) {
        let give_up = Instant::now() + Duration::from_secs(10);
        while !done(&admission.status()) {
            assert!(Instant::now() < give_up, "{:?}", admission.status());
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A call held inside the backend until `release` gets a message (or is dropped).
    fn held(admission: &Admission, release: mpsc::Receiver<()>) -> Result<ToolOutput, McpError> {
        admission.run(&never_cancelled, || {
            let _ = release.recv();
            ok()
        })
    }

    #[test]
    fn a_full_queue_answers_at_once_without_reaching_the_backend() {
        let admission = Admission::new("crm", limits(1, 0, 60_000), Clock::System);
        let reached = AtomicUsize::new(0);
        let (release, hold) = mpsc::channel();
        std::thread::scope(|s| {
            let first = s.spawn(|| held(&admission, hold));
            until(&admission, |st| st.in_flight == 1);
            let busy = call(&admission, &reached, ok).expect_err("busy");
            assert_eq!(busy.kind(), ErrorKind::BackendBusy);
            assert_eq!(
                busy.fields()["details"],
                json!({"backend": "crm", "reason": "queue_full", "max_in_flight": 1})
            );
            assert_eq!(reached.load(Ordering::SeqCst), 0);
            release.send(()).expect("release");
            assert!(first.join().expect("first").is_ok());
        });
        let status = admission.status();
        assert_eq!((status.in_flight, status.queued), (0, 0));
        assert_eq!(status.rejected(Rejection::QueueFull), 1);
        assert!(call(&admission, &reached, ok).is_ok(), "the slot came back");
    }

    #[test]
    fn a_call_waiting_past_the_queue_deadline_answers_queue_timeout() {
        let admission = Admission::new("crm", limits(1, 1, 20), Clock::System);
        let reached = AtomicUsize::new(0);
        let (release, hold) = mpsc::channel();
        std::thread::scope(|s| {
            let first = s.spawn(|| held(&admission, hold));
            until(&admission, |st| st.in_flight == 1);
            assert_eq!(
                refusal(call(&admission, &reached, ok)),
                (ErrorKind::BackendBusy, "queue_timeout".to_owned())
            );
            assert_eq!(admission.status().queued, 0, "it left the queue");
            release.send(()).expect("release");
            assert!(first.join().expect("first").is_ok());
        });
        assert_eq!(reached.load(Ordering::SeqCst), 0);
        assert_eq!(admission.status().rejected(Rejection::QueueTimeout), 1);
    }

    #[test]
    fn a_freed_slot_goes_to_the_call_that_waited_longest() {
        let admission = Admission::new("crm", limits(1, 3, 60_000), Clock::System);
        let order = Mutex::new(Vec::new());
        let (release, hold) = mpsc::channel();
        std::thread::scope(|s| {
            let first = s.spawn(|| held(&admission, hold));
            until(&admission, |st| st.in_flight == 1);
            let waiting: Vec<_> = ["b", "c", "d"]
                .into_iter()
                .enumerate()
                .map(|(ahead, name)| {
                    let (admission, order) = (&admission, &order);
                    let waiter = s.spawn(move || {
                        admission.run(&never_cancelled, || {
                            order.lock().expect("order").push(name);
                            ok()
                        })
                    });
                    until(admission, |st| st.queued == ahead + 1);
                    waiter
                })
                .collect();
            assert_eq!(
                refusal(admission.run(&never_cancelled, ok)),
                (ErrorKind::BackendBusy, "queue_full".to_owned())
            );
            release.send(()).expect("release");
            assert!(first.join().expect("first").is_ok());
            for waiter in waiting {
                assert!(waiter.join().expect("waiter").is_ok());
            }
        });
        assert_eq!(*order.lock().expect("order"), ["b", "c", "d"]);
        assert_eq!(
            (admission.status().in_flight, admission.status().queued),
            (0, 0)
        );
    }

    #[test]
    fn a_caller_that_cancels_while_waiting_leaves_the_queue() {
        let admission = Admission::new("crm", limits(1, 1, 60_000), Clock::System);
        let gone = AtomicBool::new(false);
        let (release, hold) = mpsc::channel();
        std::thread::scope(|s| {
            let first = s.spawn(|| held(&admission, hold));
            until(&admission, |st| st.in_flight == 1);
            let waiter = s.spawn(|| admission.run(&|| gone.load(Ordering::SeqCst), ok));
            until(&admission, |st| st.queued == 1);
            gone.store(true, Ordering::SeqCst);
            assert_eq!(
                refusal(waiter.join().expect("waiter")),
                (ErrorKind::Timeout, "cancelled".to_owned())
            );
            assert_eq!(admission.status().queued, 0);
            release.send(()).expect("release");
            assert!(first.join().expect("first").is_ok());
        });
        assert_eq!(admission.status().rejected, [0, 0, 0], "not a refusal");
    }

    #[test]
    fn the_circuit_opens_after_n_failures_in_a_row_and_fails_fast_while_open() {
        let (admission, clock) = breaker(3);
        let reached = AtomicUsize::new(0);
        for _ in 0..2 {
            assert!(call(&admission, &reached, unreachable).is_err());
        }
        assert_eq!(admission.status().circuit, Circuit::Closed);
        assert!(call(&admission, &reached, unreachable).is_err());
        let status = admission.status();
        assert_eq!(
            (
                status.circuit,
                status.retry_after_secs,
                status.circuit_opened
            ),
            (Circuit::Open, Some(30), 1)
        );
        let open = call(&admission, &reached, ok).expect_err("open");
        assert_eq!(open.kind(), ErrorKind::BackendCircuitOpen);
        assert_eq!(open.fields()["retry_after"], 30);
        assert_eq!(
            open.fields()["details"],
            json!({"backend": "crm", "reason": "circuit_open"})
        );
        assert_eq!(
            reached.load(Ordering::SeqCst),
            3,
            "the backend was not reached"
        );
        clock.advance(Duration::from_millis(10_500));
        let open = call(&admission, &reached, ok).expect_err("still open");
        assert_eq!(open.fields()["retry_after"], 20, "the rest, rounded up");
        assert_eq!(admission.status().retry_after_secs, Some(20));
        assert_eq!(admission.status().rejected(Rejection::CircuitOpen), 2);
        assert_eq!(reached.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn only_failures_in_a_row_open_it_and_an_answer_of_the_backend_resets_the_count() {
        let (admission, _clock) = breaker(3);
        let reached = AtomicUsize::new(0);
        for outcome in [
            unreachable,
            unreachable,
            rejected,
            unreachable,
            unreachable,
            ok,
        ] {
            let _ = call(&admission, &reached, outcome);
        }
        assert_eq!(admission.status().circuit, Circuit::Closed);
        // A caller's cancellation says nothing: the failures on either side of it add up.
        for outcome in [unreachable, unreachable, cancelled, unreachable] {
            let _ = call(&admission, &reached, outcome);
        }
        assert_eq!(admission.status().circuit, Circuit::Open);
    }

    #[test]
    fn what_each_outcome_says_about_the_backend() {
        let failing = |kind| Err::<ToolOutput, _>(McpError::new(kind).detail("backend", "crm"));
        let timed_out = Err::<ToolOutput, _>(
            McpError::new(ErrorKind::Timeout)
                .detail("backend", "crm")
                .detail("timeout_ms", 300),
        );
        assert_eq!(Sign::of(&ok()), Sign::Alive);
        assert_eq!(Sign::of(&timed_out), Sign::Failing);
        assert_eq!(Sign::of(&cancelled()), Sign::Unknown);
        let not_connected = Err::<ToolOutput, _>(
            McpError::new(ErrorKind::ToolBackendUnavailable)
                .detail("backend", "crm")
                .detail("reason", NOT_CONNECTED),
        );
        assert_eq!(Sign::of(&not_connected), Sign::Unknown);
        let lost = Err::<ToolOutput, _>(
            McpError::new(ErrorKind::ToolBackendUnavailable)
                .detail("backend", "crm")
                .detail("reason", "connection lost"),
        );
        assert_eq!(Sign::of(&lost), Sign::Failing);
        for kind in [
            ErrorKind::ToolBackendUnavailable,
            ErrorKind::AdapterErrorRetryable,
        ] {
            assert_eq!(Sign::of(&failing(kind)), Sign::Failing, "{kind:?}");
        }
        for kind in [
            ErrorKind::AdapterError,
            ErrorKind::UpstreamRpcError,
            ErrorKind::BackendCredentialRefused,
            ErrorKind::NotImplemented,
            ErrorKind::BackendNotFound,
            ErrorKind::BackendConflict,
            ErrorKind::BackendRejected,
            ErrorKind::BackendRateLimited,
            ErrorKind::ValidationError,
        ] {
            assert_eq!(Sign::of(&failing(kind)), Sign::Alive, "{kind:?}");
        }
        for kind in [
            ErrorKind::InternalError,
            ErrorKind::BackendUnavailable,
            ErrorKind::BackendBusy,
            ErrorKind::BackendCircuitOpen,
        ] {
            assert_eq!(Sign::of(&failing(kind)), Sign::Unknown, "{kind:?}");
        }
    }

    /// Opens `admission`'s circuit (threshold 2) and lets its cooldown pass.
    fn cooled_down(admission: &Admission, clock: &ManualClock, reached: &AtomicUsize) {
        for _ in 0..2 {
            let _ = call(admission, reached, unreachable);
        }
        assert_eq!(admission.status().circuit, Circuit::Open);
        clock.advance(Duration::from_secs(30));
        assert_eq!(admission.status().circuit, Circuit::HalfOpen);
    }

    #[test]
    fn half_open_lets_exactly_one_trial_through_and_its_success_closes_the_circuit() {
        let (admission, clock) = breaker(2);
        let reached = AtomicUsize::new(0);
        cooled_down(&admission, &clock, &reached);
        let (release, hold) = mpsc::channel();
        std::thread::scope(|s| {
            let trial = s.spawn(|| held(&admission, hold));
            until(&admission, |st| st.in_flight == 1);
            let meanwhile = call(&admission, &reached, ok).expect_err("fails fast");
            assert_eq!(meanwhile.kind(), ErrorKind::BackendCircuitOpen);
            assert_eq!(meanwhile.fields()["retry_after"], 1);
            release.send(()).expect("release");
            assert!(trial.join().expect("trial").is_ok());
        });
        assert_eq!(admission.status().circuit, Circuit::Closed);
        assert!(call(&admission, &reached, ok).is_ok());
        assert_eq!(
            reached.load(Ordering::SeqCst),
            3,
            "two failures, then one call"
        );
    }

    #[test]
    fn a_failed_trial_opens_the_circuit_for_another_cooldown() {
        let (admission, clock) = breaker(2);
        let reached = AtomicUsize::new(0);
        cooled_down(&admission, &clock, &reached);
        assert!(call(&admission, &reached, unreachable).is_err());
        let status = admission.status();
        assert_eq!(
            (
                status.circuit,
                status.retry_after_secs,
                status.circuit_opened
            ),
            (Circuit::Open, Some(30), 2)
        );
        assert_eq!(
            call(&admission, &reached, ok).map_err(|e| e.kind()).err(),
            Some(ErrorKind::BackendCircuitOpen)
        );
        clock.advance(Duration::from_secs(30));
        assert!(call(&admission, &reached, ok).is_ok(), "the next trial");
        assert_eq!(admission.status().circuit, Circuit::Closed);
    }

    #[test]
    fn a_trial_that_says_nothing_hands_the_trial_to_the_next_call() {
        let (admission, clock) = breaker(2);
        let reached = AtomicUsize::new(0);
        cooled_down(&admission, &clock, &reached);
        assert!(call(&admission, &reached, cancelled).is_err());
        assert_eq!(admission.status().circuit, Circuit::HalfOpen);
        assert!(call(&admission, &reached, ok).is_ok());
        assert_eq!(admission.status().circuit, Circuit::Closed);
    }

    #[test]
    fn no_breaker_when_breaker_failures_is_zero() {
        let (admission, _clock) = breaker(0);
        let reached = AtomicUsize::new(0);
        for _ in 0..20 {
            let _ = call(&admission, &reached, unreachable);
        }
        assert_eq!(admission.status().circuit, Circuit::Closed);
        assert_eq!(reached.load(Ordering::SeqCst), 20);
    }
}
