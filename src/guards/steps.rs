//! The steps of the guard chain, each a type with one job, and their order: [`CHAIN`].
//!
//! A call passes the steps in that order; the first that ends it (a refusal, or a replay
//! of a completed call) decides its [`CallOutcome`], and [`Step::Audit`] records every
//! call however it ended. [`Step::Charge`] is the one step taken by a group of calls at
//! once (the calls of one stdio read share one rate-charging wait); the steps before it
//! run for each call as it is read, the steps after it for each call in turn.
//!
//! A `bench-switches` build can leave steps out (`Guards::without`) to show what each one
//! costs; every other build runs the whole list, always.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::catalog::McpError;
use crate::guards::auth::{AccessFacts, CallAuth, Mode, Principal};
use crate::guards::idempotency::{Claim as LedgerClaim, Reservation, extract_key};
use crate::guards::outcome::{CallOutcome, Output, Stored};
use crate::guards::ratelimit::Budget;
use crate::guards::{Caller, Guards, RunTools, ToolCall};
use crate::tools::absent::nulls_as_absent;
use crate::tools::{Book, CommitHook, RegisteredTool, Registry, Resolution, ToolOutput};

/// One step of the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Who is calling: the token, or the development-mode credential.
    Authenticate,
    /// Which tool: the registry, then the retired names. From here on the call's arguments
    /// are read with the `null` of an optional argument as absent
    /// ([`nulls_as_absent`]).
    Resolve,
    /// The rate counters, charged before anything else is checked, so that calls refused
    /// later still consume quota; the charging transaction also re-checks a cached
    /// credential and reads the plan.
    Charge,
    /// The scope and the plan the tool needs.
    Access,
    /// A failure the operator rehearses on a test-mode installation (`tollgate faults`),
    /// after the charge and the access check (so it is charged and audited like any call)
    /// and before the idempotency ledger and the tool, which it never reaches.
    Rehearse,
    /// A call whose idempotency key completed earlier is answered with the stored result,
    /// before the guardrails: a retry must not trip the rule its first call's own effects
    /// now trip (voiding an invoice twice, say).
    Replay,
    /// The operator's policy rules (`[[policy.rules]]`): a `deny` rule that covers the call
    /// refuses it; a `require_approval` rule holds it until a person approves it, then lets
    /// it run once (a retry after that is replayed by the ledger). After the scopes and the plan (a rule narrows what a caller may do, it
    /// never widens it) and before the guardrails.
    Policy,
    /// The tool's fiscal guardrails.
    Guardrails,
    /// The idempotency key reserved for this call (or refused: missing, reused, in use).
    Claim,
    /// The arguments validated against the input schema, then the tool run. A refusal of
    /// the arguments (by the schema or by the tool's own checks) releases the key instead of
    /// storing the refusal, so the same key with corrected arguments runs.
    Run,
    /// The audit row.
    Audit,
}

/// The chain, in order: the product contract's order of the guards.
pub const CHAIN: [Step; 11] = [
    Step::Authenticate,
    Step::Resolve,
    Step::Charge,
    Step::Access,
    Step::Rehearse,
    Step::Replay,
    Step::Policy,
    Step::Guardrails,
    Step::Claim,
    Step::Run,
    Step::Audit,
];

impl Step {
    /// The lowercase name (`TG_BENCH_SKIP_GUARDS` takes these).
    pub fn name(self) -> &'static str {
        match self {
            Step::Authenticate => "authenticate",
            Step::Resolve => "resolve",
            Step::Charge => "charge",
            Step::Access => "access",
            Step::Rehearse => "rehearse",
            Step::Replay => "replay",
            Step::Policy => "policy",
            Step::Guardrails => "guardrails",
            Step::Claim => "claim",
            Step::Run => "run",
            Step::Audit => "audit",
        }
    }

    /// The step named `name`.
    pub fn named(name: &str) -> Option<Step> {
        CHAIN.into_iter().find(|step| step.name() == name)
    }

    /// What the step does to one call; `None` for the group step and the audit.
    fn each_call(self) -> Option<&'static dyn CallStep> {
        match self {
            Step::Authenticate => Some(&Authenticate),
            Step::Resolve => Some(&Resolve),
            Step::Access => Some(&Access),
            Step::Rehearse => Some(&Rehearse),
            Step::Replay => Some(&Replay),
            Step::Policy => Some(&Policy),
            Step::Guardrails => Some(&Guardrails),
            Step::Claim => Some(&Claim),
            Step::Run => Some(&Run),
            Step::Charge | Step::Audit => None,
        }
    }
}

/// The steps a [`Guards`] runs: [`CHAIN`], or (bench builds) [`CHAIN`] without some.
#[derive(Debug, Clone)]
pub(crate) struct Chain {
    /// The steps before the charge, per call.
    before: Vec<&'static dyn CallStep>,
    charges: bool,
    /// The steps after the charge, per call.
    after: Vec<&'static dyn CallStep>,
    audits: bool,
}

impl Chain {
    /// The chain of `steps`, in [`CHAIN`] order.
    pub(crate) fn of(steps: &[Step]) -> Chain {
        let charge_at = CHAIN
            .iter()
            .position(|step| *step == Step::Charge)
            .unwrap_or(0);
        let kept = |range: &[Step]| -> Vec<&'static dyn CallStep> {
            range
                .iter()
                .filter(|step| steps.contains(step))
                .filter_map(|step| step.each_call())
                .collect()
        };
        #[cfg_attr(not(feature = "bench-switches"), allow(unused_mut))]
        let mut before = kept(&CHAIN[..charge_at]);
        #[cfg(feature = "bench-switches")]
        if !steps.contains(&Step::Authenticate) {
            before.insert(0, &StandIn);
        }
        Chain {
            before,
            charges: steps.contains(&Step::Charge),
            after: kept(&CHAIN[charge_at + 1..]),
            audits: steps.contains(&Step::Audit),
        }
    }

    /// Whether it charges the rate counters.
    pub(crate) fn charges(&self) -> bool {
        self.charges
    }

    /// Whether it writes audit rows.
    pub(crate) fn audits(&self) -> bool {
        self.audits
    }

    /// Takes `passage` through the steps before the charge; `Some` when one ended it.
    pub(crate) fn before_charge<'r>(
        &self,
        guards: &Guards,
        passage: &mut Passage<'_, 'r>,
        cx: &Cx<'_, 'r>,
    ) -> Option<CallOutcome> {
        pass(&self.before, guards, passage, cx)
    }

    /// Takes a charged `passage` through the steps after the charge, to its outcome.
    pub(crate) fn after_charge<'r>(
        &self,
        guards: &Guards,
        passage: &mut Passage<'_, 'r>,
        cx: &Cx<'_, 'r>,
    ) -> CallOutcome {
        pass(&self.after, guards, passage, cx)
            .unwrap_or_else(|| CallOutcome::rejected(McpError::internal()))
    }
}

fn pass<'r>(
    steps: &[&'static dyn CallStep],
    guards: &Guards,
    passage: &mut Passage<'_, 'r>,
    cx: &Cx<'_, 'r>,
) -> Option<CallOutcome> {
    steps
        .iter()
        .find_map(|step| match step.pass(guards, passage, cx) {
            Flow::Next => None,
            Flow::End(outcome) => Some(outcome),
        })
}

/// What every step of a group of calls shares.
pub(crate) struct Cx<'a, 'r> {
    pub(crate) registry: &'r Registry,
    pub(crate) caller: &'a Caller<'a>,
    pub(crate) run: &'a RunTools<'a>,
}

/// One call on its way through the chain: what the steps so far learnt about it.
pub(crate) struct Passage<'c, 'r> {
    /// Its index among the calls handed to the chain.
    pub(crate) index: usize,
    pub(crate) call: &'c ToolCall<'c>,
    /// The call's arguments as every step after [`Step::Resolve`] reads them: without the
    /// `null`s of optional arguments (borrowed from `call` when it sent none).
    args: Cow<'c, Map<String, Value>>,
    pub(crate) auth: Option<CallAuth>,
    /// Who is calling, as soon as it is known (the audit row names it even when a later
    /// step refuses the call).
    pub(crate) principal: Option<Principal>,
    pub(crate) tool: Option<&'r RegisteredTool>,
    pub(crate) budget: Budget,
    /// The plan facts read in the charging transaction.
    pub(crate) facts: Option<AccessFacts>,
    /// The idempotency key, once read.
    key: Option<Result<Option<String>, McpError>>,
    reservation: Option<Reservation>,
}

impl<'c, 'r> Passage<'c, 'r> {
    pub(crate) fn new(index: usize, call: &'c ToolCall<'c>) -> Passage<'c, 'r> {
        Passage {
            index,
            call,
            args: Cow::Borrowed(call.args),
            auth: None,
            principal: None,
            tool: None,
            budget: Budget::default(),
            facts: None,
            key: None,
            reservation: None,
        }
    }

    fn principal(&self) -> Result<&Principal, McpError> {
        self.principal.as_ref().ok_or_else(McpError::internal)
    }

    fn tool(&self) -> Result<&'r RegisteredTool, McpError> {
        self.tool.ok_or_else(McpError::internal)
    }

    fn book(&self) -> Result<Book, McpError> {
        self.principal().map(|p| Book::from(p.mode))
    }

    /// The call's idempotency key, read once.
    fn key(&mut self, caller: &Caller<'_>) -> &Result<Option<String>, McpError> {
        let (args, meta) = (&self.args, self.call.meta);
        self.key
            .get_or_insert_with(|| extract_key(args, meta, caller.idempotency_header))
    }
}

/// Whether a call goes on to the next step.
// Each call ends exactly once, so boxing the outcome would only add an allocation per call.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Flow {
    Next,
    End(CallOutcome),
}

impl From<Result<(), McpError>> for Flow {
    fn from(result: Result<(), McpError>) -> Flow {
        match result {
            Ok(()) => Flow::Next,
            Err(err) => Flow::End(CallOutcome::rejected(err)),
        }
    }
}

/// A step taken by each call on its own.
pub(crate) trait CallStep: Send + Sync + std::fmt::Debug {
    fn pass<'r>(&self, guards: &Guards, passage: &mut Passage<'_, 'r>, cx: &Cx<'_, 'r>) -> Flow;
}

/// [`Step::Authenticate`]. A cached token is only re-checked later, inside the charging
/// transaction.
#[derive(Debug)]
struct Authenticate;

impl CallStep for Authenticate {
    fn pass<'r>(&self, guards: &Guards, passage: &mut Passage<'_, 'r>, cx: &Cx<'_, 'r>) -> Flow {
        let identified = guards.identify(cx.caller).map(|auth| {
            if let CallAuth::Verified(principal) = &auth {
                passage.principal = Some(principal.clone());
            }
            passage.auth = Some(auth);
        });
        Flow::from(identified)
    }
}

/// What a chain without [`Step::Authenticate`] (a `bench-switches` build) does in its
/// place: the first caller is authenticated once, and every call runs as it.
#[cfg(feature = "bench-switches")]
#[derive(Debug)]
struct StandIn;

#[cfg(feature = "bench-switches")]
impl CallStep for StandIn {
    fn pass<'r>(&self, guards: &Guards, passage: &mut Passage<'_, 'r>, cx: &Cx<'_, 'r>) -> Flow {
        Flow::from(guards.stand_in(cx.caller).map(|principal| {
            passage.principal = Some(principal.clone());
            passage.auth = Some(CallAuth::Verified(principal));
        }))
    }
}

/// [`Step::Resolve`]. An unknown or retired name, or a backend tool held for review, is
/// refused once the caller is confirmed: a held tool never reaches its backend.
#[derive(Debug)]
struct Resolve;

impl CallStep for Resolve {
    fn pass<'r>(&self, guards: &Guards, passage: &mut Passage<'_, 'r>, cx: &Cx<'_, 'r>) -> Flow {
        let refusal = match cx.registry.resolve(passage.call.name) {
            Resolution::Tool(tool) => {
                passage.tool = Some(tool);
                passage.args = nulls_as_absent(&tool.spec().input_schema, passage.call.args);
                return Flow::Next;
            }
            Resolution::Retired(r) => McpError::tool_retired(r.name, r.replacement),
            Resolution::Held(state) => McpError::tool_under_review(passage.call.name, state),
            Resolution::Unknown => McpError::unknown_tool(passage.call.name),
        };
        let confirmed = match &passage.auth {
            Some(auth) => guards.confirm(auth, cx.caller),
            None => Err(McpError::internal()),
        };
        Flow::from(confirmed.and_then(|principal| {
            passage.principal = Some(principal);
            Err(refusal)
        }))
    }
}

/// [`Step::Access`]: the scope and plan of the tool, against the plan facts the charging
/// transaction read (read now when the chain does not charge).
#[derive(Debug)]
struct Access;

impl CallStep for Access {
    fn pass<'r>(&self, guards: &Guards, passage: &mut Passage<'_, 'r>, _: &Cx<'_, 'r>) -> Flow {
        let checked = (|| {
            let facts = match passage.facts.take() {
                Some(facts) => facts,
                None => guards.auth.read_access_facts()?,
            };
            let tool = passage.tool()?;
            guards
                .auth
                .check_access_with(passage.principal()?, tool.spec(), &facts)
        })();
        Flow::from(checked)
    }
}

/// [`Step::Rehearse`]: a fault of the call's tool and credential, looked up only while the
/// company is in test mode, ends the call with its catalog error (a tool failure for a
/// tool-class entry).
#[derive(Debug)]
struct Rehearse;

impl CallStep for Rehearse {
    fn pass<'r>(&self, guards: &Guards, passage: &mut Passage<'_, 'r>, _: &Cx<'_, 'r>) -> Flow {
        let (Ok(principal), Ok(tool), Ok(book)) =
            (passage.principal(), passage.tool(), passage.book())
        else {
            return Flow::End(CallOutcome::rejected(McpError::internal()));
        };
        if principal.installation != Mode::Test {
            return Flow::Next;
        }
        match guards.rehearsed_failure(principal, tool, &passage.budget) {
            None => Flow::Next,
            Some(error) => Flow::End(CallOutcome::of_run(
                Err(error),
                passage.budget.clone(),
                book,
            )),
        }
    }
}

/// [`Step::Replay`]: the stored result of a completed call with the same key, tool and
/// arguments, read without reserving anything, for a tool with guardrails (for any other
/// the claim replays it). A malformed key is left to the claim.
#[derive(Debug)]
struct Replay;

impl CallStep for Replay {
    fn pass<'r>(&self, guards: &Guards, passage: &mut Passage<'_, 'r>, cx: &Cx<'_, 'r>) -> Flow {
        let Ok(Some(key)) = passage.key(cx.caller).clone() else {
            return Flow::Next;
        };
        let (Ok(principal), Ok(tool)) = (passage.principal(), passage.tool()) else {
            return Flow::End(CallOutcome::rejected(McpError::internal()));
        };
        // Without guardrails nothing stands between here and the claim, which replays a
        // completed key itself: looking the key up here too would read it twice.
        if !tool.tool.has_guardrails() {
            return Flow::Next;
        }
        let stored = guards
            .ledger
            .completed_result(principal, tool.spec(), &passage.args, &key);
        match stored {
            Some(stored) => Flow::End(replayed(passage, stored)),
            None => Flow::Next,
        }
    }
}

/// The outcome of a call answered from the ledger.
fn replayed(passage: &mut Passage<'_, '_>, stored: Value) -> CallOutcome {
    match passage.book() {
        Ok(book) => CallOutcome::Admitted {
            output: Output::Replayed(Stored::new(stored)),
            budget: std::mem::take(&mut passage.budget),
            book,
        },
        Err(err) => CallOutcome::rejected(err),
    }
}

/// [`Step::Policy`]: the first of the operator's rules that applies to the call decides it.
#[derive(Debug)]
struct Policy;

impl CallStep for Policy {
    fn pass<'r>(&self, guards: &Guards, passage: &mut Passage<'_, 'r>, cx: &Cx<'_, 'r>) -> Flow {
        let checked = (|| {
            let tool = passage.tool()?;
            let (args, meta) = (&passage.args, passage.call.meta);
            let key = || extract_key(args, meta, cx.caller.idempotency_header);
            guards.check_policy(passage.principal()?, tool, args, &key)
        })();
        Flow::from(checked)
    }
}

/// [`Step::Guardrails`]: the tool's fiscal rules, on the arguments and the caller's book.
#[derive(Debug)]
struct Guardrails;

impl CallStep for Guardrails {
    fn pass<'r>(&self, guards: &Guards, passage: &mut Passage<'_, 'r>, _: &Cx<'_, 'r>) -> Flow {
        let checked = (|| {
            let tool = passage.tool()?;
            tool.tool
                .guardrails(&guards.store, passage.book()?, &passage.args, &guards.clock)
        })();
        Flow::from(checked)
    }
}

/// [`Step::Claim`]: reserves the call's idempotency key, refuses a call that needs one
/// and has none, or answers from the record the key already has.
#[derive(Debug)]
struct Claim;

impl CallStep for Claim {
    fn pass<'r>(&self, guards: &Guards, passage: &mut Passage<'_, 'r>, cx: &Cx<'_, 'r>) -> Flow {
        let claimed = (|| {
            let key = passage.key(cx.caller).clone()?;
            let tool = passage.tool()?;
            guards
                .ledger
                .claim(passage.principal()?, tool.spec(), &passage.args, key)
        })();
        match claimed {
            Ok(LedgerClaim::Replay(stored)) => Flow::End(replayed(passage, stored)),
            Ok(LedgerClaim::Fresh(reservation)) => {
                passage.reservation = Some(reservation);
                Flow::Next
            }
            Ok(LedgerClaim::NotApplicable) => Flow::Next,
            Err(err) => Flow::End(CallOutcome::rejected(err)),
        }
    }
}

/// [`Step::Run`]: validates the arguments and runs the tool on the caller's book (with
/// the key's reservation as its commit hook), then settles the key with the outcome.
#[derive(Debug)]
struct Run;

impl CallStep for Run {
    fn pass<'r>(&self, guards: &Guards, passage: &mut Passage<'_, 'r>, cx: &Cx<'_, 'r>) -> Flow {
        let (tool, book) = match (passage.tool(), passage.book()) {
            (Ok(tool), Ok(book)) => (tool, book),
            (Err(err), _) | (_, Err(err)) => return Flow::End(CallOutcome::rejected(err)),
        };
        let args: &Map<String, Value> = &passage.args;
        let hook = passage.reservation.as_ref().map(|r| r as &dyn CommitHook);
        let ran = match tool.validate(&Value::Object(args.clone())) {
            Ok(()) => (cx.run)(passage.index, tool, args, book, hook),
            Err(err) => Err(err),
        };
        let budget = std::mem::take(&mut passage.budget);
        let outcome = CallOutcome::of_run(ran, budget, book);
        if let Some(reservation) = passage.reservation.take() {
            guards.settle(reservation, &outcome);
        }
        Flow::End(outcome)
    }
}

/// The tool result the ledger stores for an outcome: the tool's own result, without the
/// `_meta` entries of this call. `None` — the key is released — for a JSON-RPC error, and
/// for a refusal of the arguments
/// ([`refuses_arguments`](crate::guards::idempotency::refuses_arguments)): that is no
/// answer to the operation, and the same key with corrected arguments must run.
pub(crate) fn ledger_record(outcome: &CallOutcome, guards: &Guards) -> Option<Value> {
    use crate::guards::idempotency::refuses_arguments;
    if matches!(outcome, CallOutcome::ToolFailed { error, .. } if refuses_arguments(error)) {
        return None;
    }
    match outcome {
        CallOutcome::Admitted {
            output: Output::Fresh(output),
            ..
        } => Some(ToolOutput::clone(output).into_result()),
        CallOutcome::Admitted {
            output: Output::Replayed(stored),
            ..
        } => Some(stored.result.clone()),
        CallOutcome::ToolFailed { error, .. } => Some(error.to_tool_result(guards.locale)),
        CallOutcome::Rejected { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The step types' names, lowercase: what [`Step::name`] calls them.
    fn names(steps: &[&'static dyn CallStep]) -> Vec<String> {
        steps
            .iter()
            .map(|step| format!("{step:?}").to_lowercase())
            .collect()
    }

    #[test]
    fn the_whole_chain_charges_between_resolve_and_access_and_audits() {
        let chain = Chain::of(&CHAIN);
        assert_eq!(names(&chain.before), ["authenticate", "resolve"]);
        assert_eq!(
            names(&chain.after),
            [
                "access",
                "rehearse",
                "replay",
                "policy",
                "guardrails",
                "claim",
                "run"
            ]
        );
        assert!(chain.charges() && chain.audits());
    }

    #[test]
    fn a_chain_of_fewer_steps_keeps_the_declared_order() {
        let chain = Chain::of(&[
            Step::Run,
            Step::Guardrails,
            Step::Resolve,
            Step::Authenticate,
        ]);
        assert_eq!(names(&chain.before), ["authenticate", "resolve"]);
        assert_eq!(names(&chain.after), ["guardrails", "run"]);
        assert!(!chain.charges() && !chain.audits());
    }

    #[test]
    fn every_step_is_found_by_its_name() {
        for step in CHAIN {
            assert_eq!(Step::named(step.name()), Some(step));
        }
        assert_eq!(Step::named("auth"), None);
    }
}
