//! Access: the scope a tool needs, the company's plan (excluded tools, the active-keys
//! allowance, the smallest plan that would do) and what a principal may see in a list.

use super::*;

/// The super-scope: grants every tool.
pub const SUPER_SCOPE: &str = "*";

/// The operator's scope: signs in to the console under `/console`. It grants no tool, and
/// `*` does not include it: a key an agent holds never opens the console by accident.
pub const ADMIN_SCOPE: &str = "admin";

/// The approver's scope: decides on the calls a `require_approval` policy rule holds, in
/// the console's approvals page (`admin` may too). It grants no tool, and `*` does not
/// include it.
pub const APPROVE_SCOPE: &str = "approve";

/// Whether `held` lets its holder decide on held calls: `approve` or `admin` (exactly).
pub fn is_approver(held: &[String]) -> bool {
    held.iter().any(|s| s == APPROVE_SCOPE || s == ADMIN_SCOPE)
}

/// Whether `held` includes the operator's scope (exactly; `*` does not).
pub fn is_operator(held: &[String]) -> bool {
    held.iter().any(|s| s == ADMIN_SCOPE)
}

/// The tools one principal may see: its scopes and the company's plan, read once.
pub struct Visibility<'p> {
    pub(super) principal: &'p Principal,
    /// The plan (`None`: no company yet); `Err` when it could not be read.
    pub(super) plan: Result<Option<Plan>, ()>,
}

impl Visibility<'_> {
    /// Whether `tool` appears in the principal's `tools/list`.
    pub fn can_see(&self, tool: &ToolSpec) -> bool {
        if check_scope(self.principal, tool).is_err() {
            return false;
        }
        match &self.plan {
            Ok(Some(plan)) => !plan.excludes(&tool.name),
            Ok(None) => true,
            Err(()) => false,
        }
    }
}

/// `insufficient_scope` unless the principal holds `*` or the tool's scope.
pub(super) fn check_scope(principal: &Principal, tool: &ToolSpec) -> Result<(), McpError> {
    if grants(&principal.scopes, &tool.scope) {
        Ok(())
    } else {
        Err(McpError::insufficient_scope(&tool.scope, &principal.scopes))
    }
}

/// Whether `held` includes `required` (exactly, or through `*`).
pub fn grants(held: &[String], required: &str) -> bool {
    held.iter().any(|s| s == SUPER_SCOPE || s == required)
}

/// What the plan check of a call reads: the company's plan (`None` before `tollgate
/// init`) and, when that plan caps active keys, how many are active.
#[derive(Debug, Clone, Default)]
pub struct AccessFacts {
    pub(super) plan: Option<Plan>,
    pub(super) active_keys: Option<i64>,
}

impl AccessFacts {
    /// Reads the facts on `conn` at `now` (inside the charging transaction, for one).
    pub fn read_on(conn: &Conn<'_>, now: i64) -> Result<AccessFacts, StoreError> {
        let plan = plans::company_plan_on(conn)?;
        let active_keys = match plan.as_ref().and_then(|p| p.max_active_keys) {
            Some(_) => Some(credentials::count_active_keys(conn, now)?),
            None => None,
        };
        Ok(AccessFacts { plan, active_keys })
    }
}

/// The smallest plan above `rank` that `fits`; failing that, the smallest that fits at all.
pub(super) fn smallest_plan_above(
    plans: &[Plan],
    rank: i64,
    fits: impl Fn(&Plan) -> bool,
) -> Option<String> {
    plans
        .iter()
        .find(|p| p.rank > rank && fits(p))
        .or_else(|| plans.iter().find(|p| fits(p)))
        .map(|p| p.slug.clone())
}

// ---- Scopes -----------------------------------------------------------------------

/// Parses one scope: `*`, or `resource:action` with each part lowercase letters, digits,
/// `_` or `-`, starting with a letter, at most 32 characters.
pub fn parse_scope(text: &str) -> Result<String, CredentialError> {
    let text = text.trim();
    if text == SUPER_SCOPE || text == ADMIN_SCOPE || text == APPROVE_SCOPE {
        return Ok(text.to_owned());
    }
    let part_ok = |p: &str| {
        (1..=32).contains(&p.len())
            && p.starts_with(|c: char| c.is_ascii_lowercase())
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    };
    match text.split_once(':') {
        Some((resource, action)) if part_ok(resource) && part_ok(action) => Ok(text.to_owned()),
        _ => Err(CredentialError::BadScope(text.to_owned())),
    }
}

/// Parses a comma-separated list of scopes (at least one; duplicates dropped).
pub fn parse_scope_list(list: &str) -> Result<Vec<String>, CredentialError> {
    let mut scopes: Vec<String> = Vec::new();
    for part in list.split(',').filter(|p| !p.trim().is_empty()) {
        let scope = parse_scope(part)?;
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    if scopes.is_empty() {
        return Err(CredentialError::BadScope(String::new()));
    }
    Ok(scopes)
}

impl Authenticator {
    /// Scope and plan check for one `tools/call`: the scope first (`insufficient_scope`),
    /// then the plan (`plan_upgrade_required` for an excluded tool, `plan_limit_exceeded`
    /// for a used-up allowance). The plan is read on every call, so a change made by
    /// `tollgate plan set` in another process applies to the next call.
    pub fn check_access(&self, principal: &Principal, tool: &ToolSpec) -> Result<(), McpError> {
        let facts = self.read_access_facts()?;
        self.check_access_with(principal, tool, &facts)
    }

    /// [`Authenticator::check_access`] on plan facts already read (inside the charging
    /// transaction, by [`AccessFacts::read_on`]).
    pub fn check_access_with(
        &self,
        principal: &Principal,
        tool: &ToolSpec,
        facts: &AccessFacts,
    ) -> Result<(), McpError> {
        check_scope(principal, tool)?;
        let Some(plan) = &facts.plan else {
            return Ok(());
        };
        if plan.excludes(&tool.name) {
            return Err(self.upgrade_required(plan, &tool.name));
        }
        self.check_allowances(plan, facts.active_keys)
    }

    /// The plan and, when the plan caps them, the active keys, read now.
    pub fn read_access_facts(&self) -> Result<AccessFacts, McpError> {
        let now = self.clock.unix_secs();
        self.store
            .with_conn(|conn| AccessFacts::read_on(conn, now))
            .map_err(|e| store_failure(e, false))
    }

    /// Whether `tool` appears in the principal's `tools/list`: its scope and its plan
    /// inclusion (allowances are not visibility: an over-allowance company still sees
    /// its tools, and each call says what to fix).
    pub fn can_see(&self, principal: &Principal, tool: &ToolSpec) -> bool {
        self.visibility(principal).can_see(tool)
    }

    /// What `principal` may see, with the plan read once for a whole `tools/list`.
    pub fn visibility<'p>(&self, principal: &'p Principal) -> Visibility<'p> {
        let plan = self.store.company_plan().map_err(|e| {
            tracing::warn!(cause = %e, "cannot read the plan; hiding the tools");
        });
        Visibility { principal, plan }
    }

    pub(super) fn upgrade_required(&self, plan: &Plan, tool: &str) -> McpError {
        let err = McpError::new(ErrorKind::PlanUpgradeRequired)
            .detail("current_plan", plan.slug.clone())
            .detail("tool", tool);
        match self.store.plans() {
            Ok(plans) => match smallest_plan_above(&plans, plan.rank, |p| !p.excludes(tool)) {
                Some(slug) => err.with("required_plan", slug),
                None => err,
            },
            Err(e) => store_failure(e, false),
        }
    }

    /// A plan refusal of `kind` (`plan_upgrade_required` or `plan_limit_exceeded`) for a
    /// call of `tool`, with the fields a real one has on the company's plan now, whether or
    /// not the plan refuses it: what a rehearsed plan failure answers (for the allowance,
    /// one key more than the plan allows).
    pub fn plan_refusal_of(&self, kind: ErrorKind, tool: &str) -> McpError {
        let plan = match self.read_access_facts() {
            Ok(AccessFacts {
                plan: Some(plan), ..
            }) => plan,
            Ok(_) => return McpError::new(kind),
            Err(err) => return err,
        };
        if kind == ErrorKind::PlanUpgradeRequired {
            return self.upgrade_required(&plan, tool);
        }
        let limit = plan.max_active_keys.unwrap_or(1);
        self.limit_exceeded(&plan, limit, limit + 1)
    }

    pub(super) fn check_allowances(
        &self,
        plan: &Plan,
        active: Option<i64>,
    ) -> Result<(), McpError> {
        let (Some(limit), Some(active)) = (plan.max_active_keys, active) else {
            return Ok(());
        };
        if active <= limit {
            return Ok(());
        }
        Err(self.limit_exceeded(plan, limit, active))
    }

    /// `plan_limit_exceeded`: `active` keys where `plan` allows `limit`, naming the smallest
    /// larger plan that allows them.
    fn limit_exceeded(&self, plan: &Plan, limit: i64, active: i64) -> McpError {
        let plans = match self.store.plans() {
            Ok(plans) => plans,
            Err(e) => return store_failure(e, false),
        };
        let fits = |p: &Plan| p.max_active_keys.is_none_or(|max| max >= active);
        let err = McpError::new(ErrorKind::PlanLimitExceeded)
            .with("limit", limit)
            .detail("allowance", "active_keys")
            .detail("active", active)
            .detail("current_plan", plan.slug.clone());
        match smallest_plan_above(&plans, plan.rank, fits) {
            Some(slug) => err.with("required_plan", slug),
            None => err,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::guards::auth::testing::{fresh, key};
    use crate::tools::{Category, Idempotency};

    fn tool(name: &'static str, scope: &'static str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            title: name.into(),
            description: "".into(),
            category: Category::Read,
            scope: scope.into(),
            idempotency: Idempotency::NotApplicable,
            input_schema: serde_json::json!({"type": "object"}),
            output_schema: None,
        }
    }

    #[test]
    fn scopes_then_plan_then_allowance() {
        let (_dir, store) = fresh("free");
        let auth = Authenticator::new(store.clone(), Clock::System);
        let reader = Principal {
            credential_id: "x".into(),
            client_id: None,
            scopes: vec!["invoices:read".into()],
            mode: Mode::Live,
            guard_channel: None,
            installation: crate::guards::auth::Mode::Live,
            roles: Vec::new(),
        };
        let err = auth
            .check_access(&reader, &tool("create_invoice", "invoices:write"))
            .expect_err("scope");
        assert_eq!(err.fields()["required_scope"], "invoices:write");
        assert_eq!(
            err.fields()["provided_scopes"],
            serde_json::json!(["invoices:read"])
        );
        let admin = Principal {
            scopes: vec!["*".into()],
            ..reader.clone()
        };
        let err = auth
            .check_access(&admin, &tool("send_invoice", "invoices:send"))
            .expect_err("plan");
        assert_eq!(err.kind(), ErrorKind::PlanUpgradeRequired);
        assert_eq!(err.fields()["required_plan"], "starter");
        let err = auth
            .check_access(&admin, &tool("export_invoices", "reports:generate"))
            .expect_err("plan");
        assert_eq!(err.fields()["required_plan"], "pro");
        assert!(!auth.can_see(&admin, &tool("send_invoice", "invoices:send")));
        assert!(auth.can_see(&admin, &tool("get_invoice", "invoices:read")));
        for _ in 0..3 {
            key(&store, &["*"]);
        }
        let err = create_key(
            &store,
            &NewKey {
                name: "fourth".into(),
                scopes: vec!["*".into()],
                expires_in: None,
                client_id: None,
                mode: Mode::Live,
                guard_channel: None,
            },
        )
        .expect_err("allowance");
        assert!(
            matches!(
                err,
                CredentialError::PlanLimit {
                    limit: 3,
                    active: 3,
                    ..
                }
            ),
            "{err}"
        );
        auth.check_access(&admin, &tool("get_invoice", "invoices:read"))
            .expect("within allowance");
        store
            .sql_write(|tx| {
                tx.execute(
                    "UPDATE plans SET max_active_keys = 2 WHERE slug = 'free'",
                    [],
                )
            })
            .expect("downgrade");
        let err = auth
            .check_access(&admin, &tool("get_invoice", "invoices:read"))
            .expect_err("over");
        assert_eq!(err.kind(), ErrorKind::PlanLimitExceeded);
        assert_eq!(err.fields()["limit"], 2);
        assert_eq!(err.fields()["required_plan"], "starter");
        assert!(auth.can_see(&admin, &tool("get_invoice", "invoices:read")));
    }

    #[test]
    fn scope_syntax() {
        assert_eq!(
            parse_scope_list("invoices:read, *,invoices:read").expect("ok"),
            vec!["invoices:read", "*"]
        );
        for bad in [
            "invoices",
            "Invoices:read",
            ":read",
            "invoices:",
            "a:b:c",
            "in voices:read",
        ] {
            assert!(
                matches!(parse_scope(bad), Err(CredentialError::BadScope(_))),
                "{bad}"
            );
        }
        assert!(
            matches!(parse_scope_list(" , "), Err(CredentialError::BadScope(s)) if s.is_empty())
        );
    }
}
