//! The operator's policy (`[[policy.rules]]`): which rule, if any, decides a call, and the
//! [`steps::Step::Policy`](crate::guards::steps::Step::Policy) step's refusal of a call a
//! `deny` rule covers.
//!
//! A rule applies to a call when one of its tool patterns covers the tool, the caller is
//! among those it names (everyone when it names nobody), and its condition — compiled once
//! when the configuration was loaded — holds on the call. The first rule in the order
//! written that applies decides. The condition reads three variables:
//!
//! - `args`: the call's arguments, as the tool receives them;
//! - `caller`: `id` (the key's public id, or the user's id), `kind` (`"key"` or `"user"`),
//!   `scopes`, `roles` (an identity provider's token's roles; none for a key), `client`
//!   (the OAuth client, or `null`) and `mode` (`"live"` or `"test"`);
//! - `tool`: `name` and `backend` (the backend it forwards to, or `null`).
//!
//! A `require_approval` rule holds the call until a person decides
//! ([`crate::guards::approvals`]).
//!
//! A condition that cannot be evaluated on a call (it reads an argument the call does not
//! have, or compares values of different kinds) counts as holding: a rule fails closed.
//! A condition on an optional argument says so with `has(args.x) && …`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use serde_json::{Map, Value, json};

use crate::catalog::McpError;
use crate::config::{Effect, PolicyConfig, PolicyRule};
use crate::guards::Guards;
use crate::guards::auth::Principal;
use crate::store::users::is_user_id;
use crate::tools::RegisteredTool;

/// The rules, ready to decide calls.
pub struct Policy {
    rules: Vec<PolicyRule>,
    /// Per rule: whether its condition reads `args` (else it depends on the caller and the
    /// tool alone, and its answer is remembered for them).
    reads_args: Vec<bool>,
    /// The variables the conditions that read `args` read.
    read_with_args: Variables,
    env: Arc<cel::Env>,
    remembered: Remembered,
    /// How long a held call waits for its decision.
    approval_ttl: std::time::Duration,
    /// Where an approval's page is: this and its id.
    approval_pages: String,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("rules", &self.rules.len())
            .finish()
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy::new(&PolicyConfig::default())
    }
}

impl Policy {
    /// The policy of `config`, whose conditions were compiled when it was loaded.
    pub fn new(config: &PolicyConfig) -> Policy {
        let read: Vec<Variables> = config
            .rules
            .iter()
            .map(|rule| {
                rule.condition
                    .as_ref()
                    .map_or(Variables::NONE, |c| Variables::read_by(c.program()))
            })
            .collect();
        let read_with_args = read
            .iter()
            .filter(|read| read.args)
            .fold(Variables::NONE, |all, read| all.and(*read));
        Policy {
            rules: config.rules.clone(),
            reads_args: read.iter().map(|read| read.args).collect(),
            read_with_args,
            env: Arc::new(cel::Env::stdlib()),
            remembered: Remembered::default(),
            approval_ttl: config.approval_ttl,
            approval_pages: "/console/approvals/".to_owned(),
        }
    }

    /// The first rule that applies to a call of `tool` by `principal` with `args`.
    pub fn rule_for(
        &self,
        principal: &Principal,
        tool: &RegisteredTool,
        args: &Map<String, Value>,
    ) -> Option<&PolicyRule> {
        let (name, backend) = (&*tool.spec().name, tool.tool.backend());
        // The variables are converted for the interpreter once per call, and only when a
        // rule's condition has to be read; the answers of conditions on the caller and
        // the tool alone are looked up once per call.
        let (mut of_args, mut of_all, mut answers) = (None, None, None);
        let mut holds_on_call = |index: usize, rule: &PolicyRule, program: &cel::Program| {
            if self.reads_args[index] {
                let context = of_args.get_or_insert_with(|| {
                    self.context(principal, tool, args, self.read_with_args)
                });
                return holds(rule, program, context);
            }
            let answers: &Arc<Answers> = answers.get_or_insert_with(|| {
                self.remembered
                    .answers(&facts(principal, tool), self.rules.len())
            });
            answers.get(index).unwrap_or_else(|| {
                let context = of_all
                    .get_or_insert_with(|| self.context(principal, tool, args, Variables::ALL));
                let holds = holds(rule, program, context);
                answers.set(index, holds);
                holds
            })
        };
        let index = self.rules.iter().enumerate().position(|(index, rule)| {
            rule.tools.iter().any(|t| t.covers(name, backend))
                && covers_caller(rule, principal)
                && rule
                    .condition
                    .as_ref()
                    .is_none_or(|c| holds_on_call(index, rule, c.program()))
        })?;
        self.rules.get(index)
    }

    /// The interpreter's context of a call: `args`, `caller` and `tool`.
    fn context(
        &self,
        principal: &Principal,
        tool: &RegisteredTool,
        args: &Map<String, Value>,
        wanted: Variables,
    ) -> cel::Context<'static, 'static> {
        let mut context = cel::Context::with_env(self.env.clone());
        // JSON always serializes into a CEL value; `null` stands in should that change.
        let null = |_| cel::Value::Null;
        if wanted.args {
            context.add_variable_from_value("args", cel::to_value(args).unwrap_or_else(null));
        }
        if wanted.caller {
            let kind = if is_user_id(&principal.credential_id) {
                "user"
            } else {
                "key"
            };
            let caller = json!({
                "id": principal.credential_id,
                "kind": kind,
                "scopes": principal.scopes,
                "roles": principal.roles,
                "client": principal.client_id,
                "mode": principal.mode.as_str(),
            });
            context.add_variable_from_value("caller", cel::to_value(caller).unwrap_or_else(null));
        }
        if wanted.tool {
            let tool = json!({"name": tool.spec().name, "backend": tool.tool.backend()});
            context.add_variable_from_value("tool", cel::to_value(tool).unwrap_or_else(null));
        }
        context
    }
}

/// Whether `program` holds in `context`; a condition that cannot be evaluated, or gives
/// something other than a boolean, holds (the rule fails closed).
fn holds(rule: &PolicyRule, program: &cel::Program, context: &cel::Context<'_, '_>) -> bool {
    match program.execute(context) {
        Ok(cel::Value::Bool(holds)) => holds,
        Ok(other) => {
            tracing::warn!(rule = %rule.name, value = ?other, "a policy condition gave no boolean; the rule applies");
            true
        }
        Err(cause) => {
            tracing::warn!(rule = %rule.name, %cause, "a policy condition could not be evaluated; the rule applies");
            true
        }
    }
}

/// Which of the variables a condition reads.
#[derive(Debug, Clone, Copy)]
struct Variables {
    args: bool,
    caller: bool,
    tool: bool,
}

impl Variables {
    const NONE: Variables = Variables {
        args: false,
        caller: false,
        tool: false,
    };
    const ALL: Variables = Variables {
        args: true,
        caller: true,
        tool: true,
    };

    fn read_by(program: &cel::Program) -> Variables {
        let references = program.references();
        Variables {
            args: references.has_variable("args"),
            caller: references.has_variable("caller"),
            tool: references.has_variable("tool"),
        }
    }

    fn and(self, other: Variables) -> Variables {
        Variables {
            args: self.args || other.args,
            caller: self.caller || other.caller,
            tool: self.tool || other.tool,
        }
    }
}

/// Everything a condition that does not read `args` can read, as one text: the key under
/// which its answers are remembered.
fn facts(principal: &Principal, tool: &RegisteredTool) -> String {
    format!(
        "{}\n{}\n{}\n{}\n{}\n{}\n{}",
        principal.credential_id,
        principal.scopes.join(" "),
        principal.roles.join(" "),
        principal.client_id.as_deref().unwrap_or_default(),
        principal.mode.as_str(),
        tool.spec().name,
        tool.tool.backend().unwrap_or_default()
    )
}

/// The answers remembered for the conditions that do not read `args`, per caller and
/// tool ([`facts`]); forgotten all at once past [`REMEMBERED`] callers and tools.
#[derive(Default)]
struct Remembered {
    by_facts: RwLock<HashMap<String, Arc<Answers>>>,
}

/// How many callers and tools the answers are remembered for at most.
const REMEMBERED: usize = 4096;

impl Remembered {
    /// The answers for `facts`, with room for `rules` rules.
    fn answers(&self, facts: &str, rules: usize) -> Arc<Answers> {
        let known = self.by_facts.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(answers) = known.get(facts) {
            return Arc::clone(answers);
        }
        drop(known);
        let mut known = self
            .by_facts
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if known.len() >= REMEMBERED {
            known.clear();
        }
        let answers = known
            .entry(facts.to_owned())
            .or_insert_with(|| Arc::new(Answers::new(rules)));
        Arc::clone(answers)
    }
}

/// A condition's answer per rule: not known yet, false or true.
struct Answers(Vec<AtomicU8>);

impl Answers {
    const UNKNOWN: u8 = 0;
    const FALSE: u8 = 1;
    const TRUE: u8 = 2;

    fn new(rules: usize) -> Answers {
        Answers(
            (0..rules)
                .map(|_| AtomicU8::new(Answers::UNKNOWN))
                .collect(),
        )
    }

    fn get(&self, index: usize) -> Option<bool> {
        match self.0.get(index)?.load(Ordering::Relaxed) {
            Answers::FALSE => Some(false),
            Answers::TRUE => Some(true),
            _ => None,
        }
    }

    fn set(&self, index: usize, holds: bool) {
        if let Some(answer) = self.0.get(index) {
            let value = if holds { Answers::TRUE } else { Answers::FALSE };
            answer.store(value, Ordering::Relaxed);
        }
    }
}

/// Whether `rule` covers `principal`: it names nobody, or the principal's user or key id,
/// one of its scopes or one of its roles.
fn covers_caller(rule: &PolicyRule, principal: &Principal) -> bool {
    let who = &rule.who;
    if who.is_everyone() {
        return true;
    }
    let id = &principal.credential_id;
    let listed = if is_user_id(id) {
        &who.users
    } else {
        &who.keys
    };
    listed.contains(id)
        || principal.scopes.iter().any(|s| who.scopes.contains(s))
        || principal.roles.iter().any(|r| who.roles.contains(r))
}

impl Guards {
    /// The same guards deciding calls by the rules of `config` (`[policy]`); the page of
    /// an approval is `<console>/approvals/<id>` (`console`: the console's address).
    pub fn with_policy(mut self, config: &PolicyConfig, console: &str) -> Guards {
        self.policy = Policy::new(config);
        self.policy.approval_pages = format!("{}/approvals/", console.trim_end_matches('/'));
        self
    }

    /// [`Step::Policy`](crate::guards::steps::Step::Policy): the refusal of a call of
    /// `tool` by `principal` with `args` that a `deny` rule covers, or that a
    /// `require_approval` rule holds until a person approves it (`key` reads the call's
    /// idempotency key, only then); `Ok` when no rule applies or the call was approved.
    pub(crate) fn check_policy(
        &self,
        principal: &Principal,
        tool: &RegisteredTool,
        args: &Map<String, Value>,
        key: &dyn Fn() -> Result<Option<String>, McpError>,
    ) -> Result<(), McpError> {
        match self.policy.rule_for(principal, tool, args) {
            Some(rule) if rule.effect == Effect::Deny => {
                Err(McpError::policy_denied(&rule.name, rule.reason.as_deref()))
            }
            Some(rule) => {
                let key = key()?;
                let held = crate::guards::approvals::Held {
                    rule,
                    principal,
                    tool,
                    args,
                    key: key.as_deref(),
                };
                self.hold_for_approval(&held, self.policy.approval_ttl, &self.policy.approval_pages)
            }
            None => Ok(()),
        }
    }
}
