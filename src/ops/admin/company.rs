//! `tollgate plan …`, `tollgate company …` and `tollgate sandbox …`: the company's plan and
//! the plans' excluded tools, the company row and its mode, and the test book.

use super::*;

/// Runs `tollgate plan …`.
pub fn plan(config: &Config, command: &PlanCommand) -> ExitCode {
    finish(open(config).and_then(|store| match command {
        PlanCommand::List(args) => plan_list(&store, args.json),
        PlanCommand::Show(args) => plan_show(&store, args),
        PlanCommand::Set(args) => plan_set(&store, args),
        PlanCommand::Exclude(args) => plan_edit(&store, args, true),
        PlanCommand::Include(args) => plan_edit(&store, args, false),
    }))
}

pub(super) fn unknown_plan(slug: &str) -> Failed {
    Failed::from(format!(
        "unknown plan {slug:?}; run `tollgate plan list` to see the plans"
    ))
}

pub(super) fn plan_json(plan: &crate::store::Plan) -> Value {
    json!({
        "slug": plan.slug, "name": plan.name, "rank": plan.rank,
        "hourly_call_limit": plan.hourly_call_limit,
        "per_minute": { "read": plan.read_per_minute, "write": plan.write_per_minute,
                        "destructive": plan.destructive_per_minute, "send": plan.send_per_minute,
                        "generate": plan.generate_per_minute, "client": plan.client_per_minute },
        "max_active_keys": plan.max_active_keys,
        "excluded_tools": plan.excluded_tools,
    })
}

pub(super) fn limit_text(limit: Option<impl std::fmt::Display>) -> String {
    limit.map_or_else(|| "unlimited".to_owned(), |l| l.to_string())
}

pub(super) fn plan_list(store: &Store, as_json: bool) -> Result<(), Failed> {
    let plans = store.plans()?;
    let current = store.company()?.map(|c| c.plan_slug);
    if as_json {
        let list: Vec<Value> = plans.iter().map(plan_json).collect();
        println!("{}", json!({ "current": current, "plans": list }));
        return Ok(());
    }
    println!(
        "{:<2}{:<12}  {:<12}  {:<10}  {:<9}  EXCLUDED TOOLS",
        "", "SLUG", "NAME", "CALLS/HOUR", "MAX KEYS"
    );
    for p in &plans {
        let mark = if current.as_deref() == Some(p.slug.as_str()) {
            "*"
        } else {
            ""
        };
        let excluded = if p.excluded_tools.is_empty() {
            "-".to_owned()
        } else {
            p.excluded_tools.join(",")
        };
        println!(
            "{mark:<2}{:<12}  {:<12}  {:<10}  {:<9}  {excluded}",
            p.slug,
            p.name,
            limit_text(p.hourly_call_limit),
            limit_text(p.max_active_keys)
        );
    }
    Ok(())
}

pub(super) fn plan_show(store: &Store, args: &PlanSlugArgs) -> Result<(), Failed> {
    let plan = store
        .plan(&args.slug)?
        .ok_or_else(|| unknown_plan(&args.slug))?;
    let shown = plan_json(&plan);
    if args.json {
        println!("{shown}");
        return Ok(());
    }
    println!("{} ({}), rank {}", plan.name, plan.slug, plan.rank);
    println!(
        "  calls per hour:      {}",
        limit_text(plan.hourly_call_limit)
    );
    println!(
        "  per minute per key:  read {}, write {}, destructive {}, send {}, generate {}",
        plan.read_per_minute,
        plan.write_per_minute,
        plan.destructive_per_minute,
        plan.send_per_minute,
        plan.generate_per_minute
    );
    println!("  per minute per OAuth client: {}", plan.client_per_minute);
    println!(
        "  active API keys:     {}",
        limit_text(plan.max_active_keys)
    );
    let excluded = if plan.excluded_tools.is_empty() {
        "none".to_owned()
    } else {
        plan.excluded_tools.join(", ")
    };
    println!("  excluded tools:      {excluded}");
    Ok(())
}

pub(super) fn plan_set(store: &Store, args: &PlanSlugArgs) -> Result<(), Failed> {
    let Some(plan) = store.plan(&args.slug)? else {
        return Err(unknown_plan(&args.slug));
    };
    if !store.set_company_plan(&args.slug)? {
        return Err(CredentialError::NotInitialised.into());
    }
    let now = crate::clock::Clock::System.unix_secs();
    let active = auth::list_keys(store)?
        .iter()
        .filter(|k| k.status(now) == "active")
        .count();
    let limit = plan.max_active_keys;
    let over = limit.filter(|&l| i64::try_from(active).unwrap_or(i64::MAX) > l);
    if args.json {
        println!(
            "{}",
            json!({ "plan": args.slug, "active_keys": active, "max_active_keys": limit })
        );
    } else {
        println!("The company is now on the {} plan.", args.slug);
    }
    if let Some(limit) = over {
        eprintln!(
            "tollgate: warning: {active} API keys are active and the {} plan allows {limit}; tool \
             calls answer plan_limit_exceeded until you revoke some (`tollgate key list`, \
             `tollgate key revoke ID`)",
            args.slug
        );
    }
    Ok(())
}

pub(super) fn check_tool_name(tool: &str) -> Result<(), Failed> {
    let ok = (1..=64).contains(&tool.len())
        && tool
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Failed::from(format!(
            "invalid tool name {tool:?}: tool names are letters, digits and _ (e.g. send_invoice)"
        )))
    }
}

pub(super) fn plan_edit(store: &Store, args: &PlanToolArgs, exclude: bool) -> Result<(), Failed> {
    check_tool_name(&args.tool)?;
    let plan = store
        .plan(&args.slug)?
        .ok_or_else(|| unknown_plan(&args.slug))?;
    let mut excluded = plan.excluded_tools;
    let present = excluded.iter().any(|t| t == &args.tool);
    match (exclude, present) {
        (true, true) => {
            println!("The {} plan already excludes {}.", args.slug, args.tool);
            return Ok(());
        }
        (false, false) => {
            println!("The {} plan already includes {}.", args.slug, args.tool);
            return Ok(());
        }
        (true, false) => excluded.push(args.tool.clone()),
        (false, true) => excluded.retain(|t| t != &args.tool),
    }
    store.set_excluded_tools(&args.slug, &excluded)?;
    let verb = if exclude { "excludes" } else { "includes" };
    println!("The {} plan now {verb} {}.", args.slug, args.tool);
    Ok(())
}

/// Runs `tollgate company …`.
pub fn company(config: &Config, command: &CompanyCommand) -> ExitCode {
    finish(open(config).and_then(|store| match command {
        CompanyCommand::Show(args) => company_show(&store, args.json),
        CompanyCommand::Set(args) => company_set(&store, args),
    }))
}

pub(super) fn company_mode(store: &Store) -> Result<Mode, StoreError> {
    let mode = store.company_mode()?;
    Ok(mode.as_deref().and_then(Mode::parse).unwrap_or(Mode::Live))
}

pub(super) fn company_show(store: &Store, as_json: bool) -> Result<(), Failed> {
    let company = store.company()?.ok_or(CredentialError::NotInitialised)?;
    let mode = company_mode(store)?;
    if as_json {
        println!(
            "{}",
            json!({ "name": company.name, "tax_id": company.tax_id, "plan": company.plan_slug,
                    "locale": company.locale, "country": company.country, "mode": mode.as_str() })
        );
        return Ok(());
    }
    println!("name:     {}", company.name);
    println!(
        "tax id:   {}",
        company.tax_id.as_deref().unwrap_or("(not set)")
    );
    println!("plan:     {}", company.plan_slug);
    println!("locale:   {}", company.locale);
    println!("country:  {}", company.country);
    println!("mode:     {}", mode.as_str());
    Ok(())
}

pub(super) fn company_set(store: &Store, args: &CompanySetArgs) -> Result<(), Failed> {
    if args.name.is_none() && args.tax_id.is_none() && args.locale.is_none() && args.mode.is_none()
    {
        return Err(Failed::from(
            "nothing to change; pass --name, --tax-id, --locale or --mode".to_owned(),
        ));
    }
    let mut company = store.company()?.ok_or(CredentialError::NotInitialised)?;
    if let Some(name) = &args.name {
        if name.trim().is_empty() {
            return Err(Failed::from(
                "--name: the company name cannot be empty".to_owned(),
            ));
        }
        company.name = name.trim().to_owned();
    }
    if let Some(tax_id) = &args.tax_id {
        company.tax_id = Some(tax_id.trim().to_owned()).filter(|t| !t.is_empty());
    }
    if let Some(locale) = &args.locale {
        let locale: Locale = locale.parse().map_err(|e| format!("--locale: {e}"))?;
        company.locale = locale.as_str().to_owned();
    }
    let mode = match &args.mode {
        Some(text) => Some(
            Mode::parse(text.trim())
                .ok_or_else(|| format!("--mode: invalid mode {text:?}: expected live or test"))?,
        ),
        None => None,
    };
    store.set_company(&company)?;
    if let Some(mode) = mode {
        set_mode(store, mode)?;
    }
    company_show(store, args.json)
}

/// Changes the company's mode; entering test mode (from live) fills an empty sandbox in
/// the same transaction, so test keys never find a test mode without one. A sandbox the
/// operator emptied on purpose while in test mode stays empty.
pub(super) fn set_mode(store: &Store, mode: Mode) -> Result<(), Failed> {
    let filled = sandbox::write(store, |tx| {
        let changed = crate::store::plans::set_company_mode(tx, mode.as_str())?;
        match mode {
            Mode::Test if changed => sandbox::fill_if_empty(tx),
            _ => Ok(None),
        }
    })?;
    if let Some(filled) = filled {
        eprintln!(
            "tollgate: note: test keys work on the sandbox, now filled with {} ({}); \
             reset it with `tollgate sandbox reset [--from-live | --demo | --empty]`",
            filled.seed.describe(),
            filled.summary()
        );
    }
    Ok(())
}

/// Runs `tollgate sandbox …`.
pub fn sandbox(config: &Config, command: &SandboxCommand) -> ExitCode {
    finish(open(config).and_then(|store| match command {
        SandboxCommand::Show(args) => sandbox_show(&store, args.json),
        SandboxCommand::Reset(args) => sandbox_reset(&store, args),
    }))
}

pub(super) fn sandbox_show(store: &Store, as_json: bool) -> Result<(), Failed> {
    let mode = company_mode(store)?;
    let (live, test) = sandbox::counts(store)?;
    if as_json {
        let rows = |counts: &[(&str, i64)]| -> Value {
            counts
                .iter()
                .map(|(t, n)| ((*t).to_owned(), json!(n)))
                .collect()
        };
        println!(
            "{}",
            json!({ "mode": mode.as_str(), "live": rows(&live), "test": rows(&test) })
        );
        return Ok(());
    }
    println!("company mode: {}", mode.as_str());
    println!("{:<16}  {:>10}  {:>10}", "TABLE", "LIVE", "TEST");
    for ((table, live), (_, test)) in live.iter().zip(&test) {
        println!("{table:<16}  {live:>10}  {test:>10}");
    }
    Ok(())
}

pub(super) fn sandbox_reset(store: &Store, args: &SandboxResetArgs) -> Result<(), Failed> {
    let seed = if args.demo {
        Seed::Demo
    } else if args.empty {
        Seed::Empty
    } else {
        Seed::FromLive
    };
    let filled: Filled = sandbox::reset(store, seed)?;
    if args.json {
        let counts: serde_json::Map<String, Value> = filled
            .counts
            .iter()
            .map(|(t, n)| ((*t).to_owned(), json!(n)))
            .collect();
        let seed = match filled.seed {
            Seed::FromLive => "from_live",
            Seed::Demo => "demo",
            Seed::Empty => "empty",
        };
        println!("{}", json!({ "seed": seed, "test": counts }));
        return Ok(());
    }
    println!(
        "The sandbox now holds {}: {}.",
        filled.seed.describe(),
        filled.summary()
    );
    if company_mode(store)? == Mode::Live {
        println!(
            "The company is in live mode: test keys are refused until `tollgate company set --mode test`."
        );
    }
    Ok(())
}
