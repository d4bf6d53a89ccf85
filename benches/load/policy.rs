//! The `policy` scenario: what the operator's policy rules cost a call. The guarded HTTP
//! load of `http` (`tools/call test_simple_text`, every guard on, the admin key) on two
//! `tollgate serve --conformance-pack --config FILE` gates whose files differ only in their
//! `[[policy.rules]]`: none, and [`TEN_RULES`] — ten rules that all cover the tool called (by name, by glob,
//! by `*`) and whose conditions all evaluate, and are false, on every call: the most a
//! call that no rule refuses pays for ten rules. Each run starts both gates afresh on a
//! fresh database, one at a time, in an order that alternates from run to run. Prints
//! calls/s, p50, p99 and server CPU per call of each, and the goal: ten rules' CPU per
//! call over no rules' (target ≤ 1.05). Any refused call shows as errors.

use super::*;

/// Ten rules' CPU per call may be this much of no rules' at most.
pub(super) const TARGET_POLICY_CPU_RATIO: f64 = 1.05;

/// Ten rules covering `test_simple_text`, none of which applies to the bench's calls.
const TEN_RULES: &str = r#"
[[policy.rules]]
name = "large_amounts"
tools = ["test_simple_text"]
condition = "has(args.amount_cents) && args.amount_cents > 1000000"
effect = "deny"

[[policy.rules]]
name = "people_only"
tools = ["test_*"]
condition = "caller.kind == 'user'"
effect = "deny"

[[policy.rules]]
name = "test_mode"
tools = ["*"]
condition = "caller.mode == 'test'"
effect = "deny"

[[policy.rules]]
name = "many_arguments"
tools = ["test_simple_text"]
condition = "size(args) > 5"
effect = "deny"

[[policy.rules]]
name = "blocked_scope"
tools = ["*_text"]
condition = "'blocked' in caller.scopes"
effect = "deny"

[[policy.rules]]
name = "crm_tools"
tools = ["test_simple_*"]
condition = "tool.name.startsWith('crm_')"
effect = "deny"

[[policy.rules]]
name = "dry_run_only"
tools = ["test_simple_text"]
condition = "has(args.dry_run) && !args.dry_run"
effect = "deny"

[[policy.rules]]
name = "long_names"
tools = ["*"]
condition = "size(tool.name) > 60"
effect = "deny"

[[policy.rules]]
name = "other_keys"
tools = ["test_simple_text"]
condition = "caller.id == 'not-this-key'"
effect = "deny"

[[policy.rules]]
name = "bulk_exports"
tools = ["test_*", "export_*"]
condition = "has(args.limit) && args.limit > 1000"
effect = "deny"
"#;

/// The medians of both gates.
pub(super) struct PolicyFigures {
    none: RunFigures,
    ten: RunFigures,
}

impl PolicyFigures {
    /// Ten rules' server CPU per call over no rules'.
    fn cpu_ratio(&self) -> Option<f64> {
        let none = self.none.cpu_us.filter(|us| *us > 0.0)?;
        Some(self.ten.cpu_us? / none)
    }

    /// The summary's row.
    pub(super) fn goal(&self) -> [String; 4] {
        let ratio = self.cpu_ratio();
        let ok = self.ten.errors == 0
            && self.none.errors == 0
            && ratio.is_some_and(|r| r <= TARGET_POLICY_CPU_RATIO);
        [
            "HTTP, guarded tools/call through ten policy rules (none applies): server CPU per call, to no rules'".to_owned(),
            format!(
                "{} ({} µs vs {} µs; {} vs {} calls/s; p99 {:.3} vs {:.3} ms){}",
                ratio.map_or_else(|| "–".to_owned(), |r| format!("×{r:.3}")),
                us_or_dash(self.ten.cpu_us),
                us_or_dash(self.none.cpu_us),
                thousands(self.ten.calls_per_sec),
                thousands(self.none.calls_per_sec),
                ms(self.ten.p99),
                ms(self.none.p99),
                errors_note(&self.ten)
            ),
            format!("≤ ×{TARGET_POLICY_CPU_RATIO:.2}"),
            met(ok).to_owned(),
        ]
    }
}

pub(super) fn policy_scenario(dir: &Path, s: &Settings) -> PolicyFigures {
    println!(
        "\n== policy: tollgate serve --conformance-pack without policy rules and with ten \
         (none applies; every condition evaluated); {} keep-alive connections; {}",
        s.connections,
        s.timing()
    );
    // Both gates read a configuration file, so that they differ in their rules alone.
    let configs = [
        ("policy-no-rules.toml", ""),
        ("policy-ten-rules.toml", TEN_RULES),
    ]
    .map(|(name, rules)| {
        let path = dir.join(name);
        std::fs::write(&path, rules).expect("write the rules");
        path.to_str().expect("utf-8 path").to_owned()
    });
    let mut series = [
        Series::new("tools/call, no policy rules"),
        Series::new("tools/call, ten policy rules"),
    ];
    let mut per_run = Vec::new();
    for run in 1..=s.runs {
        let mut cpu = [None, None];
        let order = if run % 2 == 1 { [0, 1] } else { [1, 0] };
        for i in order {
            let db = dir.join(format!("policy-{run}-{i}.db"));
            let admin = prepare_database(&db);
            let args = ["--conformance-pack", "--config", configs[i].as_str()];
            let server = HttpServer::start_env(&db, &args, None, &[], s);
            let figures =
                http_load(&server, &Requests::fixed(&admin.token, &guarded_call()), s).summarise();
            cpu[i] = figures.cpu_us;
            series[i].record(figures);
            drop(server);
            remove_database(&db);
        }
        per_run.push(cpu);
    }
    for one in &series {
        one.print_median();
    }
    let figures = PolicyFigures {
        none: series[0].median(),
        ten: series[1].median(),
    };
    let runs: Vec<String> = per_run
        .iter()
        .map(|cpu| match cpu {
            [Some(none), Some(ten)] if *none > 0.0 => format!("{:.3}", ten / none),
            _ => "–".to_owned(),
        })
        .collect();
    if let Some(ratio) = figures.cpu_ratio() {
        println!(
            "  ten rules / no rules, server CPU per call: {ratio:.3} (target ≤ \
             {TARGET_POLICY_CPU_RATIO:.2}); by run: {}",
            runs.join(", ")
        );
    }
    figures
}
