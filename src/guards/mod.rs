//! The guard chain every `tools/call` passes: the steps of [`CHAIN`], in the order of the
//! product contract ([`steps`] has one type per step):
//!
//! 1. authenticate ([`crate::guards::auth`]),
//! 2. resolve the tool (the registry and the retired-names table),
//! 3. charge the rate counters ([`crate::guards::ratelimit`]) — before anything else is
//!    checked, so calls refused later still consume quota,
//! 4. access: scopes and plan ([`crate::guards::auth`]),
//!    then, on a test-mode installation only, the failures the operator rehearses
//!    ([`faults`]),
//! 5. replay the stored result of a completed call with the same idempotency key
//!    ([`crate::guards::idempotency`]),
//! 6. the operator's policy rules ([`policy`]),
//! 7. fiscal guardrails (each tool's [`Tool::guardrails`](crate::tools::Tool::guardrails)),
//! 8. claim the idempotency key, 9. validate the arguments and run the tool,
//! 10. audit ([`crate::guards::audit`]).
//!
//! The first step that ends a call decides its typed [`CallOutcome`] ([`outcome`]): a
//! refusal, a replay, or — once the tool ran — its output or its failure. The dispatcher
//! renders it; nothing here builds a wire body. Every call, admitted or not, is counted in
//! the [`metrics`] and audited: on a row of its own, or — a refusal of a caller who did
//! not authenticate — counted on its source's summary row. Who is calling is a [`Caller`],
//! which the protocol layer builds from what its transport knows.
//!
//! The other methods that read business data — a `prompts/get` whose messages read the
//! store, a `completion/complete` whose values do — pass the same steps 1, 3 and 4
//! ([`Guards::read_data`]) as the read tool serving the same data
//! ([`DataAccess`]): charged to the `read` buckets first, then scope and plan, then one
//! audit row named `<method> <what>` (e.g. `prompts/get chase_overdue_invoices`). They have
//! no guardrails and change nothing, so steps 5 to 7 do not apply.

pub mod approvals;
pub mod audit;
pub mod auth;
pub mod charging;
pub mod faults;
pub mod idempotency;
pub mod metrics;
pub mod outcome;
pub mod policy;
pub mod ratelimit;
mod reads;
pub mod steps;

pub use reads::{DataRead, ReadThrough, RunRead};

use std::sync::PoisonError;
use std::time::Instant;

use serde_json::{Map, Value};

use crate::catalog::McpError;
use crate::clock::Clock;
use crate::config::{GuardChannel, Locale};
use crate::guards::audit::{AuditEntry, Auditor};
use crate::guards::auth::{
    AccessFacts, Authenticator, CallAuth, CredentialRef, Principal, Recheck,
};
use crate::guards::charging::CallCharge;
use crate::guards::idempotency::{Ledger, Reservation};
use crate::guards::outcome::{Addressee, CallOutcome, Verdict};
use crate::guards::ratelimit::{Budget, ChargeRequest, Limiter};
#[cfg(feature = "bench-switches")]
use crate::guards::steps::Step;
use crate::guards::steps::{CHAIN, Chain, Cx, Passage};
use crate::store::Store;
use crate::tools::{Book, Category, CommitHook, RegisteredTool, Registry, ToolOutput};

/// `_meta` key of the remaining budget on successful results.
pub const META_RATELIMIT: &str = "dev.tollgate/ratelimit";
/// `_meta` key marking a result replayed from the idempotency ledger.
pub const META_REPLAY: &str = "dev.tollgate/idempotentReplay";
/// `_meta` key naming the book that served a `tools/call` result (`"live"` or `"test"`),
/// on every result: success, `isError` and replay.
pub const META_MODE: &str = "dev.tollgate/mode";

/// Who is calling, as the guards see it: what the transport knows about a request besides
/// its body. The dispatcher builds it for every request.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// The presented credential (stdio: from the environment; HTTP: the bearer token).
    pub token: Option<&'a str>,
    /// Development mode: the public id of the credential that requests without a token
    /// run as (HTTP on loopback only; never set by default).
    pub dev_credential: Option<&'a str>,
    /// Where the request comes from, for throttling failed authentication (`http:<peer
    /// address>`, `stdio:<pid>`).
    pub source: &'a str,
    /// An `Idempotency-Key` header, when the transport has one.
    pub idempotency_header: Option<&'a str>,
    /// The transport's name (`stdio`, `http`), recorded in the audit log.
    pub transport: &'static str,
}

/// A request to run one tool, as parsed by the dispatcher.
pub struct ToolCall<'a> {
    /// The tool name as sent.
    pub name: &'a str,
    /// The arguments object.
    pub args: &'a Map<String, Value>,
    /// The request's `_meta`, if any.
    pub meta: Option<&'a Map<String, Value>>,
    /// The request id, for the audit log.
    pub request_id: &'a Value,
    /// The span this call's log lines go under, when the caller has not entered it
    /// already (calls handled together each have their own).
    pub span: Option<&'a tracing::Span>,
}

/// Runs an admitted call's tool on the caller's book, given the call's index among those
/// handed to the guards (0 for [`Guards::call_tool`]); the dispatcher builds the tool
/// context around it.
pub type RunTools<'r> = dyn Fn(
        usize,
        &RegisteredTool,
        &Map<String, Value>,
        Book,
        Option<&dyn CommitHook>,
    ) -> Result<ToolOutput, McpError>
    + Sync
    + 'r;

/// Receives the outcome of the call at an index of those handed to
/// [`Guards::call_tools`].
pub type CallDone<'r> = dyn Fn(usize, CallOutcome) + Sync + 'r;

/// A call that passed the steps before the charge: who, and which tool.
struct ToCharge {
    index: usize,
    auth: CallAuth,
    /// The category of the tool (or read) charged.
    category: Category,
}

/// The guard chain.
pub struct Guards {
    store: Store,
    locale: Locale,
    clock: Clock,
    auth: Authenticator,
    limiter: Limiter<CallCharge>,
    ledger: Ledger,
    auditor: Auditor,
    chain: Chain,
    /// The guard channel of credentials without one of their own.
    guard_channel: GuardChannel,
    /// What rehearsed faults with a probability below 1 roll.
    dice: std::sync::Arc<faults::Dice>,
    policy: policy::Policy,
    /// What a chain without [`Step::Authenticate`] runs as: the first caller,
    /// authenticated once.
    #[cfg(feature = "bench-switches")]
    stand_in: std::sync::OnceLock<Principal>,
}

impl Guards {
    /// Guards over `store`; hints are rendered in `locale`; every step reads the time
    /// from `clock`. A `bench-switches` build leaves out the steps that
    /// `TG_BENCH_SKIP_GUARDS` names.
    pub fn new(store: Store, locale: Locale, clock: Clock) -> Guards {
        let guards = Guards {
            store: store.clone(),
            locale,
            auth: Authenticator::new(store.clone(), clock.clone()),
            limiter: Limiter::with_batch(store.clone(), clock.clone()),
            ledger: Ledger::new(store.clone(), clock.clone()),
            auditor: Auditor::new(store, clock.clone()),
            clock,
            chain: Chain::of(&CHAIN),
            guard_channel: GuardChannel::JsonRpc,
            dice: faults::system_dice(),
            policy: policy::Policy::default(),
            #[cfg(feature = "bench-switches")]
            stand_in: std::sync::OnceLock::new(),
        };
        #[cfg(feature = "bench-switches")]
        let guards = guards.without(&bench::skipped_steps());
        guards
    }

    /// The same guards without `steps` (the load benchmark's measure of what a step
    /// costs). [`Step::Resolve`] and [`Step::Run`] cannot be left out.
    #[cfg(feature = "bench-switches")]
    pub fn without(mut self, steps: &[Step]) -> Guards {
        let kept: Vec<Step> = CHAIN
            .into_iter()
            .filter(|step| !steps.contains(step) || matches!(step, Step::Resolve | Step::Run))
            .collect();
        self.chain = Chain::of(&kept);
        self
    }

    /// The same guards answering the refusals of credentials without a guard channel of
    /// their own on `channel` (`[errors] guard_channel`; [`GuardChannel::JsonRpc`] unless
    /// set).
    pub fn with_guard_channel(mut self, channel: GuardChannel) -> Guards {
        self.guard_channel = channel;
        self
    }

    /// The same guards also accepting the tokens of the identity providers `identity`
    /// trusts (`[[auth.issuers]]`).
    pub fn with_identity(mut self, identity: std::sync::Arc<crate::identity::Identity>) -> Guards {
        self.auth = self.auth.with_identity(identity);
        self
    }

    /// The same guards rolling `dice` for rehearsed faults with a probability below 1 (the
    /// system's random source unless set).
    pub fn with_fault_dice(mut self, dice: std::sync::Arc<faults::Dice>) -> Guards {
        self.dice = dice;
        self
    }

    /// Authentication alone, for the methods other than `tools/call` that need a
    /// credential.
    pub fn authenticate(&self, caller: &Caller<'_>) -> Result<Principal, McpError> {
        match (caller.token, caller.dev_credential) {
            // Development mode: a request without a token runs as the configured credential
            // (still charged and audited like any other call).
            (None, Some(public_id)) => self.auth.principal_for_public_id(public_id),
            (token, _) => self.auth.authenticate(token, caller.source),
        }
    }

    /// Which credential a caller is, for binding a handshake session to it: the verified
    /// cache answers a token it holds without a verification; development mode's rule is
    /// [`Guards::authenticate`]'s.
    pub fn credential_of(&self, caller: &Caller<'_>) -> Result<CredentialRef, McpError> {
        match (caller.token, caller.dev_credential) {
            (None, Some(_)) => self.authenticate(caller).map(|p| CredentialRef::from(&p)),
            (token, _) => self.auth.identify(token, caller.source),
        }
    }

    /// The authenticator (the token endpoint verifies OAuth clients with it).
    pub fn authenticator(&self) -> &Authenticator {
        &self.auth
    }

    /// What `principal` may see in `tools/list`, with the plan read once for the list.
    pub fn visibility<'p>(&self, principal: &'p Principal) -> crate::guards::auth::Visibility<'p> {
        self.auth.visibility(principal)
    }

    /// Runs a whole `tools/call` through the chain and the tool, and audits it.
    pub fn call_tool(
        &self,
        registry: &Registry,
        call: &ToolCall<'_>,
        caller: &Caller<'_>,
        run: &RunTools<'_>,
    ) -> CallOutcome {
        let outcome = std::sync::Mutex::new(None);
        self.call_tools(
            registry,
            std::slice::from_ref(call),
            caller,
            run,
            &|_, done| *outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(done),
        );
        let outcome = outcome.into_inner().unwrap_or_else(PoisonError::into_inner);
        outcome.unwrap_or_else(|| CallOutcome::rejected(McpError::internal()))
    }

    /// Runs several `tools/call`s (those of one stdio read) through the chain: each passes
    /// the same steps in the same order as a call on its own, and is audited on its own,
    /// but their rate charges share one wait (one transaction while they fit in one). The
    /// tools then run one after the other on this thread, except a tool that
    /// [waits](crate::tools::Tool::waits), which gets a thread of its own so that it
    /// holds up none of the others. Each outcome goes to `done` as soon as it is known.
    pub fn call_tools<'r>(
        &self,
        registry: &'r Registry,
        calls: &[ToolCall<'_>],
        caller: &Caller<'_>,
        run: &RunTools<'_>,
        done: &CallDone<'_>,
    ) {
        let started = Instant::now();
        let cx = Cx {
            registry,
            caller,
            run,
        };
        let mut open = Vec::with_capacity(calls.len());
        for (index, call) in calls.iter().enumerate() {
            let _span = call.span.map(tracing::Span::enter);
            let mut passage = Passage::new(index, call);
            match self.chain.before_charge(self, &mut passage, &cx) {
                None => open.push(passage),
                Some(outcome) => self.finish(&cx, &passage, started, outcome, done),
            }
        }
        let charged = self.charge_group(open, caller);
        let finish_charged = |mut passage: Passage<'_, 'r>, charge: Result<(), McpError>| {
            let _span = passage.call.span.map(tracing::Span::enter);
            let outcome = match charge {
                Ok(()) => self.chain.after_charge(self, &mut passage, &cx),
                Err(err) => CallOutcome::rejected(err),
            };
            self.finish(&cx, &passage, started, outcome, done);
        };
        // Calls that wait on the network run side by side: every one but the last on a
        // thread of its own (which forwards through the shared outbound runtime rather than
        // set up a lane for one call), the last on this one. A single call (nearly every
        // request) never starts a thread: that would cost more than forwarding it.
        let mut waiting = Vec::new();
        for (passage, charge) in charged {
            if charge.is_ok() && passage.tool.is_some_and(|tool| tool.tool.waits()) {
                waiting.push((passage, charge));
            } else {
                finish_charged(passage, charge);
            }
        }
        let Some((last, last_charge)) = waiting.pop() else {
            return;
        };
        std::thread::scope(|scope| {
            for (passage, charge) in waiting {
                scope.spawn(move || {
                    crate::tools::backends::passing(|| finish_charged(passage, charge));
                });
            }
            finish_charged(last, last_charge);
        });
    }

    /// [`steps::Step::Charge`] for the calls still open: sets the principal, budget and plan
    /// facts of each, and gives each back, in order, with the charge's refusal if it was
    /// refused. A chain without the step only confirms each caller.
    fn charge_group<'c, 'r>(
        &self,
        mut open: Vec<Passage<'c, 'r>>,
        caller: &Caller<'_>,
    ) -> Vec<(Passage<'c, 'r>, Result<(), McpError>)> {
        let charged = if self.chain.charges() {
            self.charge_passages(&mut open, caller)
        } else {
            open.iter_mut()
                .map(|passage| {
                    let auth = passage.auth.as_ref().ok_or_else(McpError::internal)?;
                    passage.principal = Some(self.confirm(auth, caller)?);
                    Ok((Budget::default(), None))
                })
                .collect()
        };
        open.into_iter()
            .zip(charged)
            .map(|(mut passage, charge)| {
                let charge = charge.map(|(budget, facts)| {
                    passage.budget = budget;
                    passage.facts = facts;
                });
                (passage, charge)
            })
            .collect()
    }

    /// The charge of each of `open` (one group through [`Guards::charge_many`]), in order.
    fn charge_passages(
        &self,
        open: &mut [Passage<'_, '_>],
        caller: &Caller<'_>,
    ) -> Vec<Result<(Budget, Option<AccessFacts>), McpError>> {
        let mut principals: Vec<Option<Principal>> =
            open.iter_mut().map(|p| p.principal.take()).collect();
        // Every call past the steps before the charge knows its caller and its tool.
        let mut to_charge = Vec::with_capacity(open.len());
        let mut lost = vec![false; open.len()];
        for (index, p) in open.iter_mut().enumerate() {
            match (p.auth.take(), p.tool) {
                (Some(auth), Some(tool)) => to_charge.push(ToCharge {
                    index,
                    auth,
                    category: tool.spec().category,
                }),
                _ => lost[index] = true,
            }
        }
        let mut charged = self
            .charge_many(&to_charge, caller, &mut principals)
            .into_iter();
        for (passage, principal) in open.iter_mut().zip(principals) {
            passage.principal = principal;
        }
        lost.iter()
            .map(|&lost| {
                if lost {
                    return Err(McpError::internal());
                }
                let charge = charged.next().unwrap_or_else(|| Err(McpError::internal()));
                charge.map(|(budget, facts)| (budget, Some(facts)))
            })
            .collect()
    }

    /// Counts a finished call in the metrics, writes its audit row, and hands its outcome
    /// to `done`.
    fn finish(
        &self,
        cx: &Cx<'_, '_>,
        passage: &Passage<'_, '_>,
        started: Instant,
        outcome: CallOutcome,
        done: &CallDone<'_>,
    ) {
        let call = passage.call;
        let outcome = match &passage.principal {
            Some(principal) => outcome.addressed(|| self.addressee(principal, &passage.budget)),
            None => outcome,
        };
        let verdict = outcome.verdict();
        metrics::global().observe_tool_call(cx.registry, call.name, verdict, started.elapsed());
        if crate::telemetry::enabled() {
            annotate_decisions(passage, &outcome);
        }
        self.audit(
            (call.request_id, call.meta),
            (call.name, passage.tool.and_then(|t| t.tool.backend())),
            cx.caller,
            started,
            passage.principal.as_ref(),
            verdict,
        );
        done(passage.index, outcome);
    }

    /// Where a refusal of `principal`'s call goes: its credential's guard channel (or the
    /// setting), its book, and the budget left when the call was charged.
    fn addressee(&self, principal: &Principal, budget: &Budget) -> Addressee {
        Addressee {
            channel: principal.guard_channel.unwrap_or(self.guard_channel),
            book: Book::from(principal.mode),
            budget: (!budget.buckets().is_empty()).then(|| budget.clone()),
        }
    }

    /// [`steps::Step::Audit`]: the audit row of a finished call of the tool `name`, with
    /// the backend it forwards to, and the trace of the request (`meta`, its `_meta`).
    fn audit(
        &self,
        (request_id, meta): (&Value, Option<&Map<String, Value>>),
        (name, backend): (&str, Option<&str>),
        caller: &Caller<'_>,
        started: Instant,
        principal: Option<&Principal>,
        outcome: Verdict<'_>,
    ) {
        if self.chain.audits() {
            let trace_id = crate::telemetry::current_trace_id(meta);
            self.auditor.record(&AuditEntry {
                request_id,
                principal,
                tool: name,
                backend,
                outcome,
                duration: started.elapsed(),
                transport: caller.transport,
                source: caller.source,
                trace_id,
            });
        }
    }

    /// [`steps::Step::Authenticate`] for a tool call: who is calling. A cached token is only
    /// re-checked later, inside the charging transaction.
    fn identify(&self, caller: &Caller<'_>) -> Result<CallAuth, McpError> {
        match (caller.token, caller.dev_credential) {
            (None, Some(_)) => self.authenticate(caller).map(CallAuth::Verified),
            (token, _) => self.auth.authenticate_call(token, caller.source),
        }
    }

    /// The principal a chain without [`Step::Authenticate`] runs as: the first caller's.
    #[cfg(feature = "bench-switches")]
    pub(crate) fn stand_in(&self, caller: &Caller<'_>) -> Result<Principal, McpError> {
        if let Some(principal) = self.stand_in.get() {
            return Ok(principal.clone());
        }
        let principal = self.authenticate(caller)?;
        Ok(self.stand_in.get_or_init(|| principal).clone())
    }

    /// Records the final outcome of a call that holds an idempotency key (see
    /// [`Ledger::settle`]): the ledger keeps the tool result as it was first sent.
    fn settle(&self, reservation: Reservation, outcome: &CallOutcome) {
        if reservation.is_recorded() && matches!(outcome, CallOutcome::Admitted { .. }) {
            return;
        }
        let record = match steps::ledger_record(outcome, self) {
            Some(result) => Ok(result),
            None => match outcome {
                CallOutcome::Rejected { error, .. } => Err(error.clone()),
                _ => Err(McpError::internal()),
            },
        };
        self.ledger.settle(reservation, &record);
    }

    /// [`steps::Step::Charge`] for each call of `calls`: charges them, re-checking a cached
    /// credential and reading the plan (for [`steps::Step::Access`]) in the same
    /// transaction. Gives the budget and the plan facts of each call, in order, and sets its
    /// principal.
    fn charge_many(
        &self,
        calls: &[ToCharge],
        caller: &Caller<'_>,
        principals: &mut [Option<Principal>],
    ) -> Vec<Result<(Budget, AccessFacts), McpError>> {
        let requests = calls
            .iter()
            .map(|call| {
                let request = charge_request(&call.auth, call.category);
                CallCharge::new(request, self.auth.call_checks(&call.auth))
            })
            .collect();
        let charged = self.limiter.charge_many(requests);
        calls
            .iter()
            .zip(charged)
            .map(|(call, mut charged)| {
                let principal_out = &mut principals[call.index];
                let outcome = charged.outcome.take();
                match self
                    .auth
                    .finish_recheck(&call.auth, &mut charged.checks, caller.source)
                {
                    Recheck::Admitted(principal) => *principal_out = Some(principal),
                    Recheck::Refused(err) => {
                        return Err(outcome.and_then(Result::err).unwrap_or(err));
                    }
                    Recheck::Stale => {
                        // The secret changed since the token was cached: verify it afresh.
                        let principal = self.authenticate(caller)?;
                        let again = ToCharge {
                            index: 0,
                            auth: CallAuth::Verified(principal),
                            category: call.category,
                        };
                        let mut principal = [None];
                        let charged =
                            self.charge_many(std::slice::from_ref(&again), caller, &mut principal);
                        *principal_out = principal[0].take();
                        return charged
                            .into_iter()
                            .next()
                            .unwrap_or_else(|| Err(McpError::internal()));
                    }
                }
                let budget = outcome.ok_or_else(McpError::internal)??;
                Ok((budget, charged.facts.unwrap_or_default()))
            })
            .collect()
    }

    /// The principal of `auth`, re-checking a cached token on its own (for calls that end
    /// before the charging transaction).
    fn confirm(&self, auth: &CallAuth, caller: &Caller<'_>) -> Result<Principal, McpError> {
        match auth {
            CallAuth::Verified(principal) => Ok(principal.clone()),
            CallAuth::Cached { .. } => self.authenticate(caller),
        }
    }
}

/// The charge of a call by `auth` to a tool of `category`.
fn charge_request(auth: &CallAuth, category: Category) -> ChargeRequest {
    ChargeRequest {
        credential_id: auth.credential_id().to_owned(),
        client_id: auth.client_id().map(str::to_owned),
        category,
    }
}

/// What `TG_BENCH_SKIP_GUARDS` selects in a `bench-switches` build.
#[cfg(feature = "bench-switches")]
mod bench {
    use super::Step;

    /// The steps named in `TG_BENCH_SKIP_GUARDS` (a comma-separated list of step names,
    /// [`Step::name`]); an unknown name stops the benchmark build at start.
    pub(super) fn skipped_steps() -> Vec<Step> {
        let list = std::env::var("TG_BENCH_SKIP_GUARDS").unwrap_or_default();
        let steps: Vec<Step> = list
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|name| {
                Step::named(name)
                    .unwrap_or_else(|| panic!("TG_BENCH_SKIP_GUARDS: unknown step {name:?}"))
            })
            .collect();
        if !steps.is_empty() {
            tracing::warn!(skipped = %list, "benchmark build: guard steps left out");
        }
        steps
    }
}

/// Puts the chain's decisions on the call's span: who called, the tightest bucket charged
/// and what is left of it, and whether the result was an idempotent replay.
fn annotate_decisions(passage: &Passage<'_, '_>, outcome: &CallOutcome) {
    let mut decisions: crate::telemetry::SpanAttributes = Vec::with_capacity(6);
    if let Some(principal) = &passage.principal {
        decisions.push(("tollgate.principal", principal.credential_id.clone().into()));
        if let Some(client) = &principal.client_id {
            decisions.push(("tollgate.client", client.clone().into()));
        }
    }
    // An answered call's budget has moved into its outcome; a refusal's is the passage's.
    if let Some(bucket) = outcome.budget().unwrap_or(&passage.budget).tightest() {
        decisions.push(("tollgate.rate.bucket", bucket.bucket.into()));
        let left = i64::try_from(bucket.remaining()).unwrap_or(i64::MAX);
        decisions.push(("tollgate.rate.remaining", left.into()));
    }
    if let Some(backend) = passage.tool.and_then(|t| t.tool.backend()) {
        decisions.push(("tollgate.backend", backend.to_owned().into()));
    }
    let replayed = matches!(
        outcome,
        CallOutcome::Admitted {
            output: outcome::Output::Replayed(_),
            ..
        }
    );
    decisions.push(("tollgate.idempotent_replay", replayed.into()));
    crate::telemetry::annotate_all(&tracing::Span::current(), decisions);
}
