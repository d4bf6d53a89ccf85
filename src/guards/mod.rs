//! The guard chain every `tools/call` passes, in the order of the product contract:
//!
//! 1. authentication ([`crate::guards::auth`]),
//! 2. tool resolution (the registry and the retired-names table),
//! 3. rate counters ([`crate::guards::ratelimit`]) — charged before anything else is checked, so
//!    calls rejected later still consume quota,
//! 4. scopes and plan ([`crate::guards::auth`]),
//! 5. fiscal guardrails (each tool's [`Tool::guardrails`](crate::tools::Tool::guardrails)),
//! 6. idempotency ([`crate::guards::idempotency`]).
//!
//! The first guard that rejects ends the call with a JSON-RPC error. Then the arguments are
//! validated and the tool runs; its failures become `isError` results. Every call, admitted
//! or not, is audited ([`crate::guards::audit`]): on a row of its own, or — a refusal of a caller
//! who did not authenticate — counted on its source's summary row.
//!
//! The other methods that read business data — a `prompts/get` whose messages read the
//! store, a `completion/complete` whose values do — pass the same steps 1, 3 and 4
//! ([`Guards::read_data`]) as the read tool serving the same data
//! ([`DataAccess`]): charged to the `read` buckets first, then scope and plan, then one
//! audit row named `<method> <what>` (e.g. `prompts/get chase_overdue_invoices`). They have
//! no guardrails and change nothing, so steps 5 and 6 do not apply.

pub mod audit;
pub mod auth;
pub mod charging;
pub mod idempotency;
pub mod metrics;
pub mod ratelimit;

use std::sync::PoisonError;
use std::time::Instant;

use serde_json::{Map, Value};

use crate::catalog::McpError;
use crate::clock::Clock;
use crate::config::Locale;
use crate::guards::audit::{AuditEntry, Auditor};
use crate::guards::auth::{AccessFacts, Authenticator, CallAuth, Principal, Recheck};
use crate::guards::charging::CallCharge;
use crate::guards::idempotency::{Claim, Ledger};
use crate::guards::ratelimit::{Budget, ChargeRequest, Limiter};
use crate::protocol::dispatch::{Env, render_tool_outcome};
use crate::store::Store;
use crate::tools::{
    Book, Category, CommitHook, DataAccess, RegisteredTool, Registry, Resolution, ToolOutput,
};

/// `_meta` key of the remaining budget on successful results.
pub const META_RATELIMIT: &str = "dev.tollgate/ratelimit";
/// `_meta` key marking a result replayed from the idempotency ledger.
pub const META_REPLAY: &str = "dev.tollgate/idempotentReplay";
/// `_meta` key naming the book that served a `tools/call` result (`"live"` or `"test"`),
/// on every result: success, `isError` and replay.
pub const META_MODE: &str = "dev.tollgate/mode";

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

/// A request other than `tools/call` that reads business data, as the guards see it.
pub struct DataRead<'a> {
    /// What its audit row names: the method, a space, and what it reads through
    /// (`prompts/get chase_overdue_invoices`,
    /// `completion/complete issue_invoice_for_client.client`).
    pub audit_name: &'a str,
    /// The data it reads, and the read tool whose guards it passes.
    pub access: DataAccess,
    /// The request id, for the audit log.
    pub request_id: &'a Value,
}

/// Produces the result of an admitted [`DataRead`], as the principal admitted.
pub type RunRead<'r> = dyn Fn(&Principal) -> Result<Value, McpError> + 'r;

/// Runs one admitted call's tool, with the idempotency hook its write must commit with.
type RunAdmitted<'r> = dyn Fn(Option<&dyn CommitHook>) -> Result<ToolOutput, McpError> + 'r;

/// Takes the outcome of the call at an index of [`Guards::call_tools`]' calls.
pub type CallDone<'r> = dyn Fn(usize, Result<Value, McpError>) + Sync + 'r;

/// A call that passed the guards before the charge: who, and which tool.
struct ToCharge<'r> {
    index: usize,
    auth: CallAuth,
    tool: &'r RegisteredTool,
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
    skip: Skips,
    /// The principal reused when the `auth` bench switch is on.
    first_principal: std::sync::Mutex<Option<Principal>>,
}

/// Guards the load benchmark switches off one at a time, to show what each costs.
///
/// Only a binary built with the `bench-switches` feature reads them (from the
/// `TG_BENCH_SKIP_GUARDS` environment variable, a comma-separated list of `auth`,
/// `ratelimit`, `access`, `guardrails`, `idempotency`, `audit`); a normal build has every
/// guard on, always.
#[derive(Debug, Default, Clone, Copy)]
struct Skips {
    /// Authenticate the first call only and reuse its principal.
    auth: bool,
    ratelimit: bool,
    access: bool,
    guardrails: bool,
    idempotency: bool,
    audit: bool,
}

impl Skips {
    #[cfg(feature = "bench-switches")]
    fn from_env() -> Skips {
        let list = std::env::var("TG_BENCH_SKIP_GUARDS").unwrap_or_default();
        let mut skips = Skips::default();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "auth" => skips.auth = true,
                "ratelimit" => skips.ratelimit = true,
                "access" => skips.access = true,
                "guardrails" => skips.guardrails = true,
                "idempotency" => skips.idempotency = true,
                "audit" => skips.audit = true,
                other => panic!("TG_BENCH_SKIP_GUARDS: unknown guard {other:?}"),
            }
        }
        if !list.is_empty() {
            tracing::warn!(skipped = %list, "benchmark build: guards switched off");
        }
        skips
    }

    #[cfg(not(feature = "bench-switches"))]
    fn from_env() -> Skips {
        Skips::default()
    }
}

impl Guards {
    /// Guards over `store`; hints are rendered in `locale`; every step reads the time
    /// from `clock`.
    pub fn new(store: Store, locale: Locale, clock: Clock) -> Guards {
        Guards {
            store: store.clone(),
            locale,
            auth: Authenticator::new(store.clone(), clock.clone()),
            limiter: Limiter::with_batch(store.clone(), clock.clone()),
            ledger: Ledger::new(store.clone(), clock.clone()),
            auditor: Auditor::new(store, clock.clone()),
            clock,
            skip: Skips::from_env(),
            first_principal: std::sync::Mutex::new(None),
        }
    }

    /// Step 1 alone, for the methods other than `tools/call` that need a credential.
    pub fn authenticate(&self, env: &Env<'_>) -> Result<Principal, McpError> {
        match (env.token, env.dev_credential) {
            // Development mode: a request without a token runs as the configured credential
            // (still charged and audited like any other call).
            (None, Some(public_id)) => self.auth.principal_for_public_id(public_id),
            (token, _) => self.auth.authenticate(token, &env.source),
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
        env: &Env<'_>,
        run: &RunTools<'_>,
    ) -> Result<Value, McpError> {
        let outcome = std::sync::Mutex::new(None);
        self.call_tools(
            registry,
            std::slice::from_ref(call),
            env,
            run,
            &|_, done| *outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(done),
        );
        let outcome = outcome.into_inner().unwrap_or_else(PoisonError::into_inner);
        outcome.unwrap_or_else(|| Err(McpError::internal()))
    }

    /// Runs several `tools/call`s (those of one stdio read) through the chain: each passes
    /// the same guards in the same order as a call on its own, and is audited on its own,
    /// but their rate charges share one wait (one transaction while they fit in one). The
    /// tools then run one after the other on this thread, except a tool that
    /// [waits](crate::tools::Tool::waits), which gets a thread of its own so that it
    /// holds up none of the others. Each outcome goes to `done` as soon as it is known.
    pub fn call_tools(
        &self,
        registry: &Registry,
        calls: &[ToolCall<'_>],
        env: &Env<'_>,
        run: &RunTools<'_>,
        done: &CallDone<'_>,
    ) {
        let started = Instant::now();
        let mut principals: Vec<Option<Principal>> = vec![None; calls.len()];
        let mut to_charge = Vec::with_capacity(calls.len());
        for (index, call) in calls.iter().enumerate() {
            let _span = call.span.map(tracing::Span::enter);
            match self.before_charge(registry, call, env, &mut principals[index]) {
                Ok((auth, tool)) => to_charge.push(ToCharge { index, auth, tool }),
                Err(err) => {
                    let principal = principals[index].take();
                    done(
                        index,
                        self.finish(registry, call, env, started, principal.as_ref(), Err(err)),
                    );
                }
            }
        }
        let charged = self.charge_many(&to_charge, env, &mut principals);
        let finish_admitted = |call: ToCharge<'_>, charge, principal: Option<Principal>| {
            let c = &calls[call.index];
            let _span = c.span.map(tracing::Span::enter);
            let outcome = match (charge, principal.as_ref()) {
                (Ok(charged), Some(p)) => {
                    let book = Book::from(p.mode);
                    let run_it = |hook: Option<&dyn CommitHook>| {
                        run(call.index, call.tool, c.args, book, hook)
                    };
                    self.after_charge(call.tool, c, env, &run_it, p, charged)
                }
                (Ok(_), None) => Err(McpError::internal()),
                (Err(err), _) => Err(err),
            };
            done(
                call.index,
                self.finish(registry, c, env, started, principal.as_ref(), outcome),
            );
        };
        let admitted = to_charge.into_iter().zip(charged).map(|(call, charge)| {
            let principal = principals[call.index].take();
            (call, charge, principal)
        });
        if calls.len() == 1 {
            admitted.for_each(|(call, charge, principal)| finish_admitted(call, charge, principal));
            return;
        }
        std::thread::scope(|scope| {
            for (call, charge, principal) in admitted {
                if call.tool.tool.waits() {
                    scope.spawn(move || finish_admitted(call, charge, principal));
                } else {
                    finish_admitted(call, charge, principal);
                }
            }
        });
    }

    /// Runs a request that reads business data through steps 1, 3 and 4 as a call of the
    /// read tool serving that data would (authentication, the `read` charge, scope and
    /// plan), then `run`, and audits it under its [`DataRead::audit_name`]. The result
    /// carries the remaining budget in `_meta`, like a tool result.
    pub fn read_data(
        &self,
        registry: &Registry,
        read: &DataRead<'_>,
        env: &Env<'_>,
        run: &RunRead<'_>,
    ) -> Result<Value, McpError> {
        let started = Instant::now();
        let mut principal = [None];
        let outcome = self.guard_read(registry, read, env, &mut principal, run);
        crate::guards::metrics::global().observe_data_read(
            read.audit_name,
            &outcome,
            started.elapsed(),
        );
        let principal = principal[0].take();
        self.audit(
            read.request_id,
            read.audit_name,
            env,
            started,
            principal.as_ref(),
            &outcome,
        );
        outcome
    }

    /// The steps of [`Guards::read_data`] before its audit row; sets the principal as soon
    /// as it is known.
    fn guard_read(
        &self,
        registry: &Registry,
        read: &DataRead<'_>,
        env: &Env<'_>,
        principal: &mut [Option<Principal>; 1],
        run: &RunRead<'_>,
    ) -> Result<Value, McpError> {
        let auth = self.identify_into(env, &mut principal[0])?;
        // The registry only accepts a declaration that names a registered read tool.
        let tool = registry
            .reader(&read.access)
            .ok_or_else(McpError::internal)?;
        let to_charge = ToCharge {
            index: 0,
            auth,
            tool,
        };
        let charged = self
            .charge_many(std::slice::from_ref(&to_charge), env, principal)
            .into_iter()
            .next()
            .unwrap_or_else(|| Err(McpError::internal()));
        let (budget, facts) = charged?;
        let admitted = principal[0].as_ref().ok_or_else(McpError::internal)?;
        self.check_access(admitted, tool, &facts)?;
        let mut result = run(admitted)?;
        mark(&mut result, META_RATELIMIT, budget.to_meta());
        Ok(result)
    }

    /// Counts a finished call in the metrics and writes its audit row; gives the outcome
    /// back.
    fn finish(
        &self,
        registry: &Registry,
        call: &ToolCall<'_>,
        env: &Env<'_>,
        started: Instant,
        principal: Option<&Principal>,
        outcome: Result<Value, McpError>,
    ) -> Result<Value, McpError> {
        crate::guards::metrics::global().observe_tool_call(
            registry,
            call.name,
            &outcome,
            started.elapsed(),
        );
        self.audit(
            call.request_id,
            call.name,
            env,
            started,
            principal,
            &outcome,
        );
        outcome
    }

    /// Writes the audit row of a finished call named `name` (unless the `audit` bench
    /// switch is on).
    fn audit(
        &self,
        request_id: &Value,
        name: &str,
        env: &Env<'_>,
        started: Instant,
        principal: Option<&Principal>,
        outcome: &Result<Value, McpError>,
    ) {
        if !self.skip.audit {
            self.auditor.record(&AuditEntry {
                request_id,
                principal,
                tool: name,
                outcome,
                duration: started.elapsed(),
                transport: env.transport,
                source: &env.source,
            });
        }
    }

    /// Step 1 for a tool call. A cached token is only re-checked later, inside the
    /// charging transaction (with the `auth` bench switch, the first call's principal is
    /// reused without any check).
    fn identify(&self, env: &Env<'_>) -> Result<CallAuth, McpError> {
        if self.skip.auth {
            let mut first = self
                .first_principal
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if first.is_none() {
                *first = Some(self.authenticate(env)?);
            }
            return Ok(CallAuth::Verified(
                first.clone().ok_or_else(McpError::internal)?,
            ));
        }
        match (env.token, env.dev_credential) {
            (None, Some(_)) => self.authenticate(env).map(CallAuth::Verified),
            (token, _) => self.auth.authenticate_call(token, &env.source),
        }
    }

    /// Steps 3 and the reads of step 4 for each call of `calls`: charges them, re-checking
    /// a cached credential and reading the plan in the same transaction. Gives the budget
    /// and the plan facts of each call, in order, and sets its principal.
    fn charge_many(
        &self,
        calls: &[ToCharge<'_>],
        env: &Env<'_>,
        principals: &mut [Option<Principal>],
    ) -> Vec<Result<(Budget, AccessFacts), McpError>> {
        if self.skip.ratelimit {
            return calls
                .iter()
                .map(|call| {
                    let principal = self.confirm(&call.auth, env)?;
                    principals[call.index] = Some(principal);
                    Ok((Budget::default(), self.auth.read_access_facts()?))
                })
                .collect();
        }
        let requests = calls
            .iter()
            .map(|call| {
                let request = charge_request(&call.auth, call.tool.spec().category);
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
                    .finish_recheck(&call.auth, &mut charged.checks, &env.source)
                {
                    Recheck::Admitted(principal) => *principal_out = Some(principal),
                    Recheck::Refused(err) => {
                        return Err(outcome.and_then(Result::err).unwrap_or(err));
                    }
                    Recheck::Stale => {
                        // The secret changed since the token was cached: verify it afresh.
                        let principal = self.authenticate(env)?;
                        let again = ToCharge {
                            index: 0,
                            auth: CallAuth::Verified(principal),
                            tool: call.tool,
                        };
                        let mut principal = [None];
                        let charged =
                            self.charge_many(std::slice::from_ref(&again), env, &mut principal);
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
    fn confirm(&self, auth: &CallAuth, env: &Env<'_>) -> Result<Principal, McpError> {
        match auth {
            CallAuth::Verified(principal) => Ok(principal.clone()),
            CallAuth::Cached { .. } => self.authenticate(env),
        }
    }

    /// Step 1, setting the principal as soon as it is known.
    fn identify_into(
        &self,
        env: &Env<'_>,
        principal_out: &mut Option<Principal>,
    ) -> Result<CallAuth, McpError> {
        let auth = self.identify(env)?;
        if let CallAuth::Verified(principal) = &auth {
            *principal_out = Some(principal.clone());
        }
        Ok(auth)
    }

    /// Steps 1 and 2: who is calling, and which tool. Sets the principal as soon as it is
    /// known (the audit row names it even when a later step refuses the call).
    fn before_charge<'r>(
        &self,
        registry: &'r Registry,
        call: &ToolCall<'_>,
        env: &Env<'_>,
        principal_out: &mut Option<Principal>,
    ) -> Result<(CallAuth, &'r RegisteredTool), McpError> {
        let auth = self.identify_into(env, principal_out)?;
        match registry.resolve(call.name) {
            Resolution::Tool(tool) => Ok((auth, tool)),
            unresolved => {
                *principal_out = Some(self.confirm(&auth, env)?);
                Err(match unresolved {
                    Resolution::Retired(r) => McpError::tool_retired(r.name, r.replacement),
                    _ => McpError::unknown_tool(call.name),
                })
            }
        }
    }

    /// Step 4: the scope and plan of `tool` (unless the `access` bench switch is on).
    fn check_access(
        &self,
        principal: &Principal,
        tool: &RegisteredTool,
        facts: &AccessFacts,
    ) -> Result<(), McpError> {
        if self.skip.access {
            return Ok(());
        }
        self.auth.check_access_with(principal, tool.spec(), facts)
    }

    /// Steps 4 to 6 for a charged call, then the tool itself. Every result says which
    /// book served it.
    fn after_charge(
        &self,
        tool: &RegisteredTool,
        call: &ToolCall<'_>,
        env: &Env<'_>,
        run: &RunAdmitted<'_>,
        principal: &Principal,
        charged: (Budget, AccessFacts),
    ) -> Result<Value, McpError> {
        let mut result = self.guard_and_run(tool, call, env, run, principal, charged)?;
        mark(
            &mut result,
            META_MODE,
            Value::from(Book::from(principal.mode).as_str()),
        );
        Ok(result)
    }

    fn guard_and_run(
        &self,
        tool: &RegisteredTool,
        call: &ToolCall<'_>,
        env: &Env<'_>,
        run: &RunAdmitted<'_>,
        principal: &Principal,
        (budget, facts): (Budget, AccessFacts),
    ) -> Result<Value, McpError> {
        self.check_access(principal, tool, &facts)?;
        let guardrails = if self.skip.guardrails {
            Ok(())
        } else {
            let book = Book::from(principal.mode);
            tool.tool
                .guardrails(&self.store, book, call.args, &self.clock)
        };
        if let Err(violation) = guardrails {
            // A retry of a call that already completed (e.g. a second `void_invoice` with the
            // same key) replays its stored result instead of tripping the rule it caused.
            let key = crate::guards::idempotency::extract_key(
                call.args,
                call.meta,
                env.idempotency_header,
            );
            let stored = key.ok().flatten().and_then(|key| {
                self.ledger
                    .completed_result(principal, tool.spec(), call.args, &key)
            });
            let Some(mut stored) = stored else {
                return Err(violation);
            };
            mark(&mut stored, META_REPLAY, Value::Bool(true));
            mark(&mut stored, META_RATELIMIT, budget.to_meta());
            return Ok(stored);
        }
        let key = if self.skip.idempotency {
            None
        } else {
            crate::guards::idempotency::extract_key(call.args, call.meta, env.idempotency_header)?
        };
        let reservation = match self.ledger.claim(principal, tool.spec(), call.args, key)? {
            Claim::Replay(mut stored) => {
                mark(&mut stored, META_REPLAY, Value::Bool(true));
                mark(&mut stored, META_RATELIMIT, budget.to_meta());
                return Ok(stored);
            }
            Claim::Fresh(reservation) => Some(reservation),
            Claim::NotApplicable => None,
        };
        let hook = reservation.as_ref().map(|r| r as &dyn CommitHook);
        let outcome = match tool.validate(&Value::Object(call.args.clone())) {
            Ok(()) => run(hook),
            Err(err) => Err(err),
        };
        let rendered = render_tool_outcome(outcome, self.locale);
        if let Some(reservation) = reservation {
            self.ledger.settle(reservation, &rendered);
        }
        let mut result = rendered?;
        mark(&mut result, META_RATELIMIT, budget.to_meta());
        Ok(result)
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

/// Sets one `_meta` entry on a result object.
fn mark(result: &mut Value, key: &str, value: Value) {
    if let Value::Object(map) = result {
        let meta = map
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(key.to_owned(), value);
        }
    }
}
