//! The console's pages: what each reads, what each form changes, and the templates.

use std::time::Duration;

use minijinja::Environment;
use serde_json::{Value, json};

use super::audit_log::{UserNames, audit, audit_csv, audit_json, row_page};
use super::backends::backends;
use super::charts::chart;
use super::credentials::{self, credential_failed, secret_page};
use super::i18n::texts;
use super::latency::latency;
use super::names::Names;
use super::{Console, Form, Method, Operator, Request, Response, form_status};
use super::{grants, users};
use crate::clock::format_time;
use crate::config::Locale;
use crate::guards::auth;
use crate::guards::ratelimit::{LimitChange, LimitsReport, usage};
use crate::store::audit::AuditFilter;
use crate::tools::Category;

/// Buckets the overview shows.
const TIGHTEST_BUCKETS: usize = 8;
/// Failures the overview lists.
const LAST_ERRORS: u32 = 10;

const TEMPLATES: &[(&str, &str)] = &[
    ("base.html", include_str!("templates/base.html")),
    ("sign_in.html", include_str!("templates/sign_in.html")),
    ("overview.html", include_str!("templates/overview.html")),
    (
        "credentials.html",
        include_str!("templates/credentials.html"),
    ),
    ("secret.html", include_str!("templates/secret.html")),
    ("confirm.html", include_str!("templates/confirm.html")),
    ("limits.html", include_str!("templates/limits.html")),
    ("audit.html", include_str!("templates/audit.html")),
    ("audit_row.html", include_str!("templates/audit_row.html")),
    ("backends.html", include_str!("templates/backends.html")),
    ("users.html", include_str!("templates/users.html")),
    ("grants.html", include_str!("templates/grants.html")),
    ("refused.html", include_str!("templates/refused.html")),
    ("front_door.html", include_str!("templates/front_door.html")),
    ("latency.html", include_str!("templates/latency.html")),
    ("approvals.html", include_str!("templates/approvals.html")),
];

/// The templates, parsed once (HTML-escaped by their `.html` names), with the words of
/// `locale` as the global `tr` and its code as `lang` (the server's locale is fixed when it
/// starts).
pub fn templates(locale: Locale) -> Environment<'static> {
    let mut env = Environment::new();
    env.add_global("lang", locale.as_str());
    env.add_global(
        "tr",
        minijinja::Value::from(minijinja::value::Serde(texts(locale).map())),
    );
    for (name, source) in TEMPLATES {
        if let Err(e) = env.add_template(name, source) {
            tracing::error!(template = name, error = %e, "a console template does not parse");
        }
    }
    env
}

/// The stylesheet and the script, by path: `(content type, body)`.
pub fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    match path {
        "/console/static/console.css" => Some((
            "text/css; charset=utf-8",
            include_str!("static/console.css"),
        )),
        "/console/static/console.js" => Some((
            "text/javascript; charset=utf-8",
            include_str!("static/console.js"),
        )),
        _ => None,
    }
}

/// The page a signed-in `GET` asks for; `None` for an unknown path.
pub fn get(console: &Console, request: &Request<'_>, op: &Operator) -> Option<Response> {
    let path = request.path;
    let page = match path {
        "/console" | "/console/" => overview(console, op),
        "/console/credentials" => credentials::page(console, op, None, None),
        "/console/limits" => limits(console, op, None),
        "/console/audit" => audit(console, request, op),
        "/console/audit.csv" => return Some(audit_csv(console, request)),
        "/console/backends" => backends(console, op),
        "/console/latency" => latency(console, op),
        "/console/users" => users::page(console, op),
        "/console/grants" => grants::page(console, op),
        _ if path.starts_with("/console/audit/") => return row_page(console, op, path),
        _ if path.starts_with("/console/users/") => return users::confirm_page(console, op, path),
        _ if path.starts_with("/console/grants/") => {
            return grants::confirm_page(console, op, path);
        }
        _ if path.starts_with(super::approvals::PATH) => {
            return super::approvals::get(console, op, path);
        }
        _ if path.starts_with("/console/backends/held/") => {
            return super::pins::confirm_page(console, op, path);
        }
        _ => return confirm_page(console, op, path),
    };
    Some(page)
}

/// What a signed-in form post changes; `None` for an unknown path.
pub fn post(
    console: &Console,
    request: &Request<'_>,
    op: &Operator,
    form: &Form,
) -> Option<Response> {
    debug_assert_eq!(request.method, Method::Post);
    let response = match request.path {
        "/console/credentials/keys" => credentials::create_key(console, request, op, form),
        "/console/credentials/clients" => credentials::create_client(console, request, op, form),
        "/console/limits/credential" => set_credential_limit(console, request, op, form),
        "/console/limits/plan" => set_plan_limit(console, request, op, form),
        path if path.starts_with("/console/users/") => {
            return users::post(console, request, op, path);
        }
        path if path.starts_with("/console/grants/") => {
            return grants::post(console, request, op, path);
        }
        path if path.starts_with(super::approvals::PATH) => {
            return super::approvals::post(console, request, op, path);
        }
        path if path.starts_with("/console/backends/held/") => {
            return super::pins::post(console, request, op, path);
        }
        path => {
            let (kind, id, action) = action_path(path)?;
            match (kind, action) {
                ("keys", "revoke") => revoke_key(console, request, op, id),
                ("keys", "rotate") => rotate_key(console, request, op, id, form),
                ("clients", "revoke") => revoke_client(console, request, op, id),
                _ => return None,
            }
        }
    };
    Some(response)
}

/// `/console/credentials/{keys|clients}/{id}/{revoke|rotate}` → its parts.
fn action_path(path: &str) -> Option<(&str, &str, &str)> {
    let rest = path.strip_prefix("/console/credentials/")?;
    let mut parts = rest.split('/');
    let (kind, id, action) = (parts.next()?, parts.next()?, parts.next()?);
    let id_ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (parts.next().is_none() && id_ok).then_some((kind, id, action))
}

// ---- Overview ---------------------------------------------------------------------

fn overview(console: &Console, op: &Operator) -> Response {
    let texts = console.texts();
    let store = console.server.store();
    let now_ms = console.server.clock().unix_millis();
    let minute = 60_000;
    let hour = 60 * minute;
    let (by_minute, by_hour) = match (
        store.calls_by_outcome(now_ms - hour, minute),
        store.calls_by_outcome(now_ms - 24 * hour, hour),
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return console.store_failed(op, e),
    };
    let charts = [
        chart(
            "calls-hour",
            texts.get("chart_hour").to_owned(),
            texts,
            &by_minute,
            now_ms,
            minute,
            60,
        ),
        chart(
            "calls-day",
            texts.get("chart_day").to_owned(),
            texts,
            &by_hour,
            now_ms,
            hour,
            24,
        ),
    ];
    let now = console.now_secs();
    let buckets = match usage(store, now) {
        Ok(rows) => {
            let mut limited: Vec<_> = rows.into_iter().filter(|r| r.limit.is_some()).collect();
            let fill = |r: &crate::guards::ratelimit::UsageRow| {
                r.count as f64 / r.limit.unwrap_or(1).max(1) as f64
            };
            limited.sort_by(|a, b| fill(b).total_cmp(&fill(a)));
            limited.truncate(TIGHTEST_BUCKETS);
            limited
        }
        Err(e) => return console.store_failed(op, e),
    };
    let keys: Vec<&str> = buckets.iter().map(|r| r.key.as_str()).collect();
    let names = match Names::read(store, &keys) {
        Ok(names) => names,
        Err(e) => return console.store_failed(op, e),
    };
    let buckets: Vec<Value> = buckets
        .iter()
        .map(|r| {
            let limit = r.limit.unwrap_or(0);
            json!({
                "bucket": r.bucket, "key": r.key, "who": names.any_json(&r.key),
                "count": r.count, "limit": limit, "window_secs": r.window_secs,
                "fill": bucket_fill(r.count, limit), "full": r.count >= limit,
                "reset_at": format_time(r.reset), "reset_in": (r.reset - now).max(0),
            })
        })
        .collect();
    let errors = store
        .audit_rows(&AuditFilter {
            failures_only: true,
            limit: LAST_ERRORS,
            ..AuditFilter::default()
        })
        .and_then(|rows| {
            let names = UserNames::of(store, &rows)?;
            Ok(rows
                .iter()
                .map(|r| audit_json(r, &names))
                .collect::<Vec<_>>())
        });
    let errors = match errors {
        Ok(errors) => errors,
        Err(e) => return console.store_failed(op, e),
    };
    let page = console.render(
        "overview.html",
        "overview",
        Some(op),
        json!({"charts": charts, "buckets": buckets, "errors": errors}),
    );
    Response::html(200, page)
}

/// How much of a bucket's bar is filled, in percent of its width: the count over the
/// limit, capped at the full width (a bucket past its limit is drawn full, in the warning
/// colour, and its text still says how far past it is).
fn bucket_fill(count: u64, limit: u64) -> f64 {
    if limit == 0 {
        return 100.0;
    }
    let share = (count as f64 / limit as f64).min(1.0);
    (share * 1000.0).round() / 10.0
}

// ---- Credentials ------------------------------------------------------------------

/// `GET …/{id}/{revoke|rotate}`: the confirmation the change needs.
fn confirm_page(console: &Console, op: &Operator, path: &str) -> Option<Response> {
    let (kind, id, action) = action_path(path)?;
    let texts = console.texts();
    let question = match (kind, action) {
        ("keys", "revoke") => texts.get("confirm_revoke_key"),
        ("keys", "rotate") => texts.get("confirm_rotate_key"),
        ("clients", "revoke") => texts.get("confirm_revoke_client"),
        _ => return None,
    };
    // The key or client by its name (its id when it has none, or when the names cannot
    // be read now: the question must still be asked).
    let names = Names::read(console.server.store(), &[]).unwrap_or_default();
    let shown = names.any(id).unwrap_or(id);
    Some(console.confirm(
        op,
        json!({
            "question": question.replace("{id}", shown), "action": path, "id": id,
            "rotate": action == "rotate",
        }),
    ))
}

fn revoke_key(console: &Console, request: &Request<'_>, op: &Operator, id: &str) -> Response {
    match auth::revoke_key(console.server.store(), id) {
        Ok(_) => {}
        Err(e) => return credential_failed(console, op, e, None),
    }
    if !console.record(&op.principal, "revoke_key", id, request.source) {
        return console.not_audited(op);
    }
    Response::redirect("/console/credentials")
}

fn rotate_key(
    console: &Console,
    request: &Request<'_>,
    op: &Operator,
    id: &str,
    form: &Form,
) -> Response {
    let grace = match form.get("grace") {
        "0" => Duration::ZERO,
        "24h" => Duration::from_secs(24 * 3600),
        _ => Duration::from_secs(3600),
    };
    let issued = match auth::rotate_key(console.server.store(), id, grace) {
        Ok(issued) => issued,
        Err(e) => return credential_failed(console, op, e, None),
    };
    if !console.record(&op.principal, "rotate_key", id, request.source) {
        return console.not_audited(op);
    }
    secret_page(
        console,
        op,
        "key_rotated",
        &issued.public_id,
        None,
        issued.token.expose(),
    )
}

fn revoke_client(console: &Console, request: &Request<'_>, op: &Operator, id: &str) -> Response {
    if let Err(e) = auth::revoke_client(console.server.store(), id) {
        return credential_failed(console, op, e, None);
    }
    if !console.record(&op.principal, "revoke_client", id, request.source) {
        return console.not_audited(op);
    }
    Response::redirect("/console/credentials")
}

// ---- Limits -----------------------------------------------------------------------

fn limits(console: &Console, op: &Operator, error: Option<String>) -> Response {
    let store = console.server.store();
    let report = match LimitsReport::load(store) {
        Ok(report) => report,
        Err(e) => return console.store_failed(op, e),
    };
    let keys = match auth::list_keys(store) {
        Ok(keys) => keys,
        Err(e) => return console.read_failed(op, e),
    };
    let now = console.now_secs();
    let categories: Vec<&str> = Category::ALL.iter().map(|c| c.as_str()).collect();
    let plans: Vec<Value> = report
        .plans
        .iter()
        .map(|p| {
            json!({
                "slug": p.slug, "name": p.name, "hourly": p.hourly_call_limit,
                "read": p.read_per_minute, "write": p.write_per_minute,
                "destructive": p.destructive_per_minute, "send": p.send_per_minute,
                "generate": p.generate_per_minute, "client": p.client_per_minute,
                "current": report.company_plan.as_deref() == Some(p.slug.as_str()),
            })
        })
        .collect();
    let overrides: Vec<Value> = report
        .credentials
        .iter()
        .flat_map(|c| {
            Category::ALL.iter().filter_map(move |cat| {
                c.per_minute.get(*cat).map(|n| {
                    json!({"credential": c.credential_id, "name": c.name,
                           "category": cat.as_str(), "per_minute": n})
                })
            })
        })
        .collect();
    let keys: Vec<Value> = keys
        .iter()
        .filter(|k| k.status(now) == "active")
        .map(|k| json!({"id": k.public_id, "name": k.name}))
        .collect();
    let status = form_status(&error);
    let page = console.render(
        "limits.html",
        "limits",
        Some(op),
        json!({"plans": plans, "overrides": overrides, "keys": keys,
               "categories": categories, "error": error}),
    );
    Response::html(status, page)
}

fn category(form: &Form) -> Result<Category, String> {
    let word = form.get("category");
    Category::ALL
        .iter()
        .copied()
        .find(|c| c.as_str() == word)
        .ok_or_else(|| format!("unknown category {word:?}"))
}

/// A per-minute limit from the form: a whole number of at least 1, or empty for "the
/// plan's default" where `empty_ok`.
fn per_minute(console: &Console, form: &Form, empty_ok: bool) -> Result<Option<u64>, String> {
    match form.get("per_minute") {
        "" if empty_ok => Ok(None),
        text => match text.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(console.texts().get("bad_per_minute").to_owned()),
        },
    }
}

fn set_credential_limit(
    console: &Console,
    request: &Request<'_>,
    op: &Operator,
    form: &Form,
) -> Response {
    let change = match (category(form), per_minute(console, form, true)) {
        (Ok(category), Ok(per_minute)) => LimitChange::Credential {
            credential_id: form.get("credential").to_owned(),
            category,
            per_minute,
        },
        (Err(e), _) | (_, Err(e)) => return limits(console, op, Some(e)),
    };
    apply_limit(
        console,
        request,
        op,
        &change,
        "set_limit",
        &format!(
            "{} {}={}",
            form.get("credential"),
            form.get("category"),
            form.get("per_minute")
        ),
    )
}

fn set_plan_limit(
    console: &Console,
    request: &Request<'_>,
    op: &Operator,
    form: &Form,
) -> Response {
    let change = match (category(form), per_minute(console, form, false)) {
        (Ok(category), Ok(Some(per_minute))) => LimitChange::PlanCategory {
            plan: form.get("plan").to_owned(),
            category,
            per_minute,
        },
        (Err(e), _) | (_, Err(e)) => return limits(console, op, Some(e)),
        (Ok(_), Ok(None)) => {
            return limits(
                console,
                op,
                Some(console.texts().get("bad_per_minute").to_owned()),
            );
        }
    };
    apply_limit(
        console,
        request,
        op,
        &change,
        "set_plan_limit",
        &format!(
            "{} {}={}",
            form.get("plan"),
            form.get("category"),
            form.get("per_minute")
        ),
    )
}

fn apply_limit(
    console: &Console,
    request: &Request<'_>,
    op: &Operator,
    change: &LimitChange,
    action: &str,
    target: &str,
) -> Response {
    if let Err(e) = change.apply(console.server.store()) {
        return match e {
            crate::guards::ratelimit::LimitChangeError::Store(e) => console.store_failed(op, e),
            other => limits(console, op, Some(other.to_string())),
        };
    }
    if !console.record(&op.principal, action, target, request.source) {
        return console.not_audited(op);
    }
    Response::redirect("/console/limits")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_paths_name_a_kind_an_id_and_an_action() {
        assert_eq!(
            action_path("/console/credentials/keys/Ab12/revoke"),
            Some(("keys", "Ab12", "revoke"))
        );
        assert_eq!(
            action_path("/console/credentials/clients/client0f/revoke"),
            Some(("clients", "client0f", "revoke"))
        );
        for bad in [
            "/console/credentials/keys//revoke",
            "/console/credentials/keys/a/revoke/more",
            "/console/credentials/keys/a%2F/revoke",
            "/console/credentials/keys/a",
            "/console/other/keys/a/revoke",
        ] {
            assert_eq!(action_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_bucket_bar_fills_with_its_count_and_stops_at_full_width() {
        assert_eq!(bucket_fill(0, 10), 0.0);
        assert_eq!(bucket_fill(1, 3), 33.3);
        assert_eq!(bucket_fill(9, 10), 90.0);
        assert_eq!(bucket_fill(10, 10), 100.0);
        // Past the limit (2 / 1): the full width, never more.
        assert_eq!(bucket_fill(2, 1), 100.0);
        assert_eq!(bucket_fill(0, 0), 100.0);
    }

    #[test]
    fn every_template_parses() {
        let env = templates(Locale::Es);
        for (name, _) in TEMPLATES {
            assert!(env.get_template(name).is_ok(), "{name}");
        }
    }
}
