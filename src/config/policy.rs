//! `[policy]`: the operator's rules on how a tool may be called, beyond which tools a
//! credential may call (its scopes). Each `[[policy.rules]]` names the tools it covers
//! (names, `*` globs, `backend:<name>` for every tool of a backend), optionally whom it
//! covers (users, keys, roles or scopes) and a condition on the call written in the Common
//! Expression Language (CEL, by the `cel` crate), and its effect: `deny`, or
//! `require_approval` (a person decides before the call runs).
//!
//! Every condition is compiled here, once, when the configuration is loaded; a rule that
//! does not compile, or that reads a variable the gate does not provide, is a
//! [`ConfigError`] naming the rule, so `tollgate check-config` finds it before a call does.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, in_range};

/// The variables a condition may read: the call's arguments, who calls, and the tool.
pub const CONDITION_VARIABLES: [&str; 3] = ["args", "caller", "tool"];

/// How long an approval waits for its decision unless configured (24 hours).
pub const DEFAULT_APPROVAL_TTL_MINUTES: u64 = 24 * 60;
/// The longest a pending approval may wait (30 days).
const MAX_APPROVAL_TTL_MINUTES: u64 = 30 * 24 * 60;
/// The most rules a configuration may hold (every call of a covered tool reads them).
const MAX_RULES: usize = 256;

/// The typed `[policy]` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyConfig {
    /// The rules, in the order written: the first that applies to a call decides it.
    pub rules: Vec<PolicyRule>,
    /// How long a pending approval waits for a person's decision (`approval_ttl_minutes`).
    pub approval_ttl: Duration,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            rules: Vec::new(),
            approval_ttl: Duration::from_secs(DEFAULT_APPROVAL_TTL_MINUTES * 60),
        }
    }
}

/// One `[[policy.rules]]` entry, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRule {
    /// Its name (`[a-z0-9_-]`, unique): what a refusal and the audit name.
    pub name: String,
    /// The tools it covers.
    pub tools: Vec<ToolPattern>,
    /// Whom it covers; everyone when empty.
    pub who: Who,
    /// The condition on the call; always when `None`.
    pub condition: Option<Condition>,
    /// What it does to a call it applies to.
    pub effect: Effect,
    /// The sentence a refusal gives as the reason (the rule's name when unset).
    pub reason: Option<String>,
    /// Whether the caller may approve their own call (`require_approval` only).
    pub allow_self_approval: bool,
}

/// A tool (or tools) a rule covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolPattern {
    /// Exactly this name.
    Name(String),
    /// A name with `*` standing for any run of characters (`void_*`, `*_invoice`).
    Glob(String),
    /// Every tool of the backend of this name (`backend:crm`).
    Backend(String),
}

impl ToolPattern {
    fn parse(text: &str) -> Result<ToolPattern, String> {
        let text = text.trim();
        if let Some(backend) = text.strip_prefix("backend:") {
            return match super::valid_backend_name(backend) {
                true => Ok(ToolPattern::Backend(backend.to_owned())),
                false => Err(format!("{text:?} does not name a backend (backend:<name>)")),
            };
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || "_-.*".contains(c);
        if text.is_empty() || !text.chars().all(allowed) {
            return Err(format!(
                "{text:?} is not a tool name, a `*` glob or backend:<name>"
            ));
        }
        Ok(match text.contains('*') {
            true => ToolPattern::Glob(text.to_owned()),
            false => ToolPattern::Name(text.to_owned()),
        })
    }

    /// Whether the tool `name` (of `backend`, if it forwards to one) is covered.
    pub fn covers(&self, name: &str, backend: Option<&str>) -> bool {
        match self {
            ToolPattern::Name(exact) => exact == name,
            ToolPattern::Glob(glob) => glob_matches(glob, name),
            ToolPattern::Backend(wanted) => backend == Some(wanted.as_str()),
        }
    }

    fn to_raw(&self) -> String {
        match self {
            ToolPattern::Name(text) | ToolPattern::Glob(text) => text.clone(),
            ToolPattern::Backend(name) => format!("backend:{name}"),
        }
    }
}

/// Whether `name` matches `glob`, where `*` stands for any run of characters.
fn glob_matches(glob: &str, name: &str) -> bool {
    let mut parts = glob.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Whom a rule covers: a caller matching any of the lists (everyone when all are empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Who {
    /// The identity provider's users, by their id (`tollgate users list`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// API keys, by their public id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// Callers whose identity provider's token names any of these roles (the values of
    /// the issuer's `role_claims`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// Callers holding any of these scopes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

impl Who {
    /// Whether it covers everyone.
    pub fn is_everyone(&self) -> bool {
        self.users.is_empty()
            && self.keys.is_empty()
            && self.roles.is_empty()
            && self.scopes.is_empty()
    }
}

/// What a rule does to a call it applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The call is refused (`policy_denied`).
    Deny,
    /// The call runs only once a person approved it.
    RequireApproval,
}

/// A rule's condition: its CEL source and the program compiled from it at load.
#[derive(Clone)]
pub struct Condition {
    source: String,
    program: Arc<cel::Program>,
}

impl Condition {
    /// Compiles `source`; the error says what is wrong with it.
    pub fn compile(source: &str) -> Result<Condition, String> {
        let program = cel::Program::compile(source)
            .map_err(|e| format!("does not compile: {}", one_line(&e.to_string())))?;
        let references = program.references();
        if let Some(unknown) = references
            .variables()
            .into_iter()
            .find(|v| !CONDITION_VARIABLES.contains(v))
        {
            return Err(format!(
                "reads the variable {unknown:?}, which is not provided (a condition reads {})",
                CONDITION_VARIABLES.join(", ")
            ));
        }
        Ok(Condition {
            source: source.to_owned(),
            program: Arc::new(program),
        })
    }

    /// Its source, as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The compiled program.
    pub fn program(&self) -> &cel::Program {
        &self.program
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl fmt::Debug for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Condition").field(&self.source).finish()
    }
}

impl PartialEq for Condition {
    fn eq(&self, other: &Condition) -> bool {
        self.source == other.source
    }
}

impl Eq for Condition {}

/// `[policy]` as the file writes it.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    approval_ttl_minutes: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    rules: Vec<RawRule>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Option<String>,
    #[serde(default)]
    tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Who::is_everyone")]
    who: Who,
    condition: Option<String>,
    effect: Option<Effect>,
    reason: Option<String>,
    allow_self_approval: Option<bool>,
}

/// `[policy]` checked: every rule's name, tools, and condition compiled.
pub(super) fn validate_policy(raw: RawPolicy) -> Result<PolicyConfig, ConfigError> {
    let minutes = in_range(
        "policy.approval_ttl_minutes",
        None,
        raw.approval_ttl_minutes,
        DEFAULT_APPROVAL_TTL_MINUTES,
        (1, MAX_APPROVAL_TTL_MINUTES),
    )?;
    if raw.rules.len() > MAX_RULES {
        return Err(ConfigError::new(format!(
            "policy.rules holds {} rules; at most {MAX_RULES} are allowed",
            raw.rules.len()
        )));
    }
    let mut rules: Vec<PolicyRule> = Vec::with_capacity(raw.rules.len());
    for (index, rule) in raw.rules.into_iter().enumerate() {
        let label = format!(
            "policy.rules[{index}]{}",
            rule.name
                .as_deref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        );
        let checked = validate_rule(rule).map_err(|e| ConfigError::new(format!("{label}: {e}")))?;
        if rules.iter().any(|r| r.name == checked.name) {
            return Err(ConfigError::new(format!(
                "{label}: another rule is already named {:?}; names must be unique",
                checked.name
            )));
        }
        rules.push(checked);
    }
    Ok(PolicyConfig {
        rules,
        approval_ttl: Duration::from_secs(minutes * 60),
    })
}

fn validate_rule(raw: RawRule) -> Result<PolicyRule, String> {
    let name = raw.name.ok_or("`name` is required")?;
    let name_ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-".contains(c);
    if name.is_empty() || name.len() > 64 || !name.chars().all(name_ok) {
        return Err(format!(
            "the name {name:?} must be 1 to 64 lowercase letters, digits, `_` or `-`"
        ));
    }
    if raw.tools.is_empty() {
        return Err("`tools` must name at least one tool, glob or backend:<name>".into());
    }
    let tools = raw
        .tools
        .iter()
        .map(|t| ToolPattern::parse(t).map_err(|e| format!("tools: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let effect = raw
        .effect
        .ok_or("`effect` is required: \"deny\" or \"require_approval\"")?;
    let condition = match raw.condition.as_deref().map(str::trim) {
        Some("") => return Err("the condition is empty; leave it out to cover every call".into()),
        Some(source) => Some(Condition::compile(source).map_err(|e| format!("condition {e}"))?),
        None => None,
    };
    if let Some(reason) = &raw.reason
        && (reason.trim().is_empty() || reason.chars().count() > 300)
    {
        return Err("the reason must be 1 to 300 characters".into());
    }
    if raw.allow_self_approval.is_some() && effect != Effect::RequireApproval {
        return Err("allow_self_approval applies only to effect = \"require_approval\"".into());
    }
    Ok(PolicyRule {
        name,
        tools,
        who: raw.who,
        condition,
        effect,
        reason: raw.reason,
        allow_self_approval: raw.allow_self_approval.unwrap_or(false),
    })
}

/// A `require_approval` rule gives callers the URL of an approval's page in the console:
/// with the console off, that page would not exist, so such a rule is refused.
pub(super) fn check_approvals_have_a_console(config: &super::Config) -> Result<(), ConfigError> {
    if config.console.enabled {
        return Ok(());
    }
    match config
        .policy
        .rules
        .iter()
        .enumerate()
        .find(|(_, rule)| rule.effect == Effect::RequireApproval)
    {
        Some((index, rule)) => Err(ConfigError::new(format!(
            "policy.rules[{index}] ({}): effect = \"require_approval\" needs the console, \
             where a person approves the call (its approval_url is a console page), but the \
             console is off; set console.enabled = true (reach it through an SSH tunnel or \
             behind your reverse proxy)",
            rule.name
        ))),
        None => Ok(()),
    }
}

impl PolicyConfig {
    /// The settings as written back (`check-config`).
    pub(super) fn to_raw(&self) -> RawPolicy {
        RawPolicy {
            approval_ttl_minutes: Some(self.approval_ttl.as_secs() / 60),
            rules: self
                .rules
                .iter()
                .map(|rule| RawRule {
                    name: Some(rule.name.clone()),
                    tools: rule.tools.iter().map(ToolPattern::to_raw).collect(),
                    who: rule.who.clone(),
                    condition: rule.condition.as_ref().map(|c| c.source.clone()),
                    effect: Some(rule.effect),
                    reason: rule.reason.clone(),
                    allow_self_approval: (rule.effect == Effect::RequireApproval)
                        .then_some(rule.allow_self_approval),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(toml_text: &str) -> Result<PolicyConfig, String> {
        let raw: RawPolicy = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        validate_policy(raw).map_err(|e| e.message().to_owned())
    }

    #[test]
    fn a_rule_is_read_with_its_condition_compiled() {
        let checked = policy(
            "[[rules]]\nname = \"big_payments\"\ntools = [\"record_payment\", \"void_*\", \
             \"backend:crm\"]\ncondition = \"args.amount_cents > 1000000\"\neffect = \"deny\"\n",
        )
        .expect("valid");
        let rule = &checked.rules[0];
        assert_eq!(rule.name, "big_payments");
        assert_eq!(
            rule.tools,
            [
                ToolPattern::Name("record_payment".into()),
                ToolPattern::Glob("void_*".into()),
                ToolPattern::Backend("crm".into())
            ]
        );
        assert_eq!(
            rule.condition.as_ref().map(Condition::source),
            Some("args.amount_cents > 1000000")
        );
        assert_eq!(checked.approval_ttl, Duration::from_secs(86_400));
    }

    #[test]
    fn a_condition_that_does_not_compile_names_the_rule() {
        let err = policy("[[rules]]\nname = \"r1\"\ntools = [\"x\"]\ncondition = \"args.a >\"\neffect = \"deny\"\n")
            .expect_err("refused");
        assert!(
            err.starts_with("policy.rules[0] (r1): condition does not compile:"),
            "{err}"
        );
    }

    #[test]
    fn a_condition_reading_an_unknown_variable_is_refused() {
        let err = policy("[[rules]]\nname = \"r1\"\ntools = [\"x\"]\ncondition = \"amount > 3\"\neffect = \"deny\"\n")
            .expect_err("refused");
        assert!(err.contains("reads the variable \"amount\""), "{err}");
    }

    #[test]
    fn names_tools_and_effect_are_checked() {
        for (rule, expect) in [
            ("tools = [\"x\"]\neffect = \"deny\"", "`name` is required"),
            (
                "name = \"Big\"\ntools = [\"x\"]\neffect = \"deny\"",
                "must be 1 to 64",
            ),
            ("name = \"r\"\neffect = \"deny\"", "`tools` must name"),
            (
                "name = \"r\"\ntools = [\"a b\"]\neffect = \"deny\"",
                "is not a tool name",
            ),
            (
                "name = \"r\"\ntools = [\"backend:\"]\neffect = \"deny\"",
                "does not name a backend",
            ),
            ("name = \"r\"\ntools = [\"x\"]", "`effect` is required"),
            (
                "name = \"r\"\ntools = [\"x\"]\neffect = \"deny\"\nallow_self_approval = true",
                "applies only to",
            ),
        ] {
            let err = policy(&format!("[[rules]]\n{rule}\n")).expect_err("refused");
            assert!(err.contains(expect), "{rule}: {err}");
        }
        let twice = "[[rules]]\nname = \"r\"\ntools = [\"x\"]\neffect = \"deny\"\n";
        let err = policy(&format!("{twice}{twice}")).expect_err("refused");
        assert!(
            err.starts_with("policy.rules[1] (r): another rule"),
            "{err}"
        );
    }

    #[test]
    fn describe_round_trips_the_rules() {
        use crate::config::{Config, Overrides};
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tollgate.toml");
        std::fs::write(
            &path,
            "[policy]\napproval_ttl_minutes = 90\n[[policy.rules]]\nname = \"r\"\n\
             tools = [\"backend:crm\", \"x_*\"]\nwho = { scopes = [\"invoices:write\"] }\n\
             condition = \"caller.kind == 'key'\"\neffect = \"deny\"\nreason = \"no\"\n",
        )
        .expect("write");
        let config = Config::load(Some(&path), &[], &Overrides::default()).expect("load");
        assert_eq!(config.policy.approval_ttl, Duration::from_secs(90 * 60));
        std::fs::write(&path, config.describe()).expect("write");
        let reloaded = Config::load(Some(&path), &[], &Overrides::default()).expect("reload");
        assert_eq!(reloaded.policy, config.policy);
    }

    #[test]
    fn approvals_need_the_console() {
        use crate::config::{Config, Overrides};
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tollgate.toml");
        let rule =
            "[[policy.rules]]\nname = \"held\"\ntools = [\"x\"]\neffect = \"require_approval\"\n";
        std::fs::write(&path, format!("[console]\nenabled = false\n{rule}")).expect("write");
        let err = Config::load(Some(&path), &[], &Overrides::default()).expect_err("refused");
        assert!(
            err.message().starts_with(
                "policy.rules[0] (held): effect = \"require_approval\" needs the console"
            ),
            "{err}"
        );
        std::fs::write(&path, rule).expect("write");
        assert!(Config::load(Some(&path), &[], &Overrides::default()).is_ok());
    }

    #[test]
    fn globs_match_any_run_of_characters() {
        for (glob, name, expect) in [
            ("void_*", "void_invoice", true),
            ("void_*", "avoid_invoice", false),
            ("*_invoice", "void_invoice", true),
            ("*_invoice", "void_invoices", false),
            ("crm_*_account", "crm_delete_account", true),
            ("crm_*_account", "crm_account", false),
            ("*", "anything", true),
        ] {
            assert_eq!(glob_matches(glob, name), expect, "{glob} {name}");
        }
        let backend = ToolPattern::Backend("crm".into());
        assert!(backend.covers("crm_delete_account", Some("crm")));
        assert!(!backend.covers("crm_delete_account", None));
    }
}
