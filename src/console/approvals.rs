//! The Approvals page: the calls a `require_approval` policy rule holds until a person
//! decides — the tool, its arguments (indented JSON, escaped by the templates), who asked,
//! when, the rule, until when — and each one's own page, which the refusal's
//! `approval_url` names, with approve and deny behind a confirmation. Open to a sign-in
//! holding `admin` or `approve`; a person cannot approve their own call unless the rule
//! allows it. A decision is written to the store (it applies on every node at the
//! caller's next identical call) and is an audit row under the approver's credential.

use serde_json::{Value, json};

use super::{Console, Operator, Request, Response};
use crate::clock::format_time_ms;
use crate::store::approvals::{Approval, Decision, Listing, PENDING};

/// Where the approvals are: the list, and `{PATH}/{id}[/approve|/deny]`.
pub(super) const PATH: &str = "/console/approvals";
/// The most approvals the page lists.
const LISTED: u32 = 200;

/// What a form decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Approve,
    Deny,
}

/// `{PATH}/{id}` → the id and no choice; `{PATH}/{id}/approve|deny` → both; `None` for
/// any other path.
fn parse_path(path: &str) -> Option<(&str, Option<Choice>)> {
    let rest = path.strip_prefix(PATH)?.strip_prefix('/')?;
    let (id, choice) = match rest.split_once('/') {
        None => (rest, None),
        Some((id, "approve")) => (id, Some(Choice::Approve)),
        Some((id, "deny")) => (id, Some(Choice::Deny)),
        Some(_) => return None,
    };
    let id_like =
        id.len() == 36 && id.starts_with("apr_") && id[4..].bytes().all(|b| b.is_ascii_hexdigit());
    id_like.then_some((id, choice))
}

/// One approval as the pages show it.
fn shown(a: &Approval, now: i64) -> Value {
    let arguments: Value = serde_json::from_str(&a.arguments).unwrap_or(Value::Null);
    json!({
        "id": a.id, "tool": a.tool, "caller": a.principal, "rule": a.rule,
        "state": a.state_at(now), "pending": a.state_at(now) == PENDING,
        "arguments": serde_json::to_string_pretty(&arguments).unwrap_or_default(),
        "key": a.idempotency_key,
        "created": format_time_ms(a.created_at), "expires": format_time_ms(a.expires_at),
        "decided": a.decided_at.map(format_time_ms), "decided_by": a.decided_by,
        "used": a.used_at.map(format_time_ms),
    })
}

/// `GET` under [`PATH`]: the list, an approval's page, or the confirmation of a decision.
pub(super) fn get(console: &Console, op: &Operator, path: &str) -> Option<Response> {
    let store = console.server.store();
    let now = console.server.clock().unix_millis();
    if path == PATH {
        let (pending, recent) = match (
            store.approvals(Listing::Pending, now, LISTED),
            store.approvals(Listing::All, now, LISTED),
        ) {
            (Ok(pending), Ok(all)) => (pending, all),
            (Err(e), _) | (_, Err(e)) => return Some(console.store_failed(op, e)),
        };
        let decided: Vec<Value> = recent
            .iter()
            .filter(|a| a.state_at(now) != PENDING)
            .map(|a| shown(a, now))
            .collect();
        let pending: Vec<Value> = pending.iter().map(|a| shown(a, now)).collect();
        let page = console.render(
            "approvals.html",
            "approvals",
            Some(op),
            json!({"pending": pending, "decided": decided}),
        );
        return Some(Response::html(200, page));
    }
    let (id, choice) = parse_path(path)?;
    let approval = match store.approval(id) {
        Ok(found) => found?,
        Err(e) => return Some(console.store_failed(op, e)),
    };
    let Some(choice) = choice else {
        return Some(approval_page(console, op, &approval, None, 200));
    };
    if approval.state_at(now) != PENDING {
        return Some(approval_page(console, op, &approval, None, 409));
    }
    let key = match choice {
        Choice::Approve => "confirm_approve_call",
        Choice::Deny => "confirm_deny_call",
    };
    let question = console
        .texts()
        .get(key)
        .replace("{tool}", &approval.tool)
        .replace("{caller}", &approval.principal);
    Some(console.confirm(
        op,
        json!({"question": question, "action": path, "back": format!("{PATH}/{id}")}),
    ))
}

/// An approval's own page, with `error` above it.
fn approval_page(
    console: &Console,
    op: &Operator,
    approval: &Approval,
    error: Option<&str>,
    status: u16,
) -> Response {
    let now = console.server.clock().unix_millis();
    let own = approval.principal == op.principal.credential_id && !approval.allow_self;
    let page = console.render(
        "approvals.html",
        "approval",
        Some(op),
        json!({"approval": shown(approval, now), "own": own, "error": error}),
    );
    Response::html(status, page)
}

/// `POST {PATH}/{id}/approve|deny`: the decision, its audit row, then the approval's page.
/// `None` (the console's 404) for a path that names no approval.
pub(super) fn post(
    console: &Console,
    request: &Request<'_>,
    op: &Operator,
    path: &str,
) -> Option<Response> {
    let (id, Some(choice)) = parse_path(path)? else {
        return None;
    };
    let store = console.server.store();
    let now = console.server.clock().unix_millis();
    let me = op.principal.credential_id.as_str();
    let caller = match store.approval(id) {
        Ok(found) => found?.principal,
        Err(e) => return Some(console.store_failed(op, e)),
    };
    let by = format!("console:{me}");
    let approve = choice == Choice::Approve;
    let decided = match store.decide_approval(id, approve, (&by, caller == me), now) {
        Ok(decided) => decided,
        Err(e) => return Some(console.store_failed(op, e)),
    };
    let texts = console.texts();
    let refused = |key: &str, status: u16| {
        let approval = store.approval(id).ok().flatten()?;
        Some(approval_page(
            console,
            op,
            &approval,
            Some(texts.get(key)),
            status,
        ))
    };
    match decided {
        Decision::Decided(_) => {}
        Decision::Unknown => return None,
        Decision::NotPending(_) => return refused("approval_not_pending", 409),
        Decision::OwnCall => return refused("approval_own_call", 403),
    }
    let action = if approve { "approve_call" } else { "deny_call" };
    if !console.record(&op.principal, action, id, request.source) {
        return Some(console.not_audited(op));
    }
    Some(Response::redirect(&format!("{PATH}/{id}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_names_an_approval_and_maybe_a_choice() {
        let id = "apr_0123456789abcdef0123456789abcdef";
        assert_eq!(parse_path(&format!("{PATH}/{id}")), Some((id, None)));
        assert_eq!(
            parse_path(&format!("{PATH}/{id}/approve")),
            Some((id, Some(Choice::Approve)))
        );
        assert_eq!(
            parse_path(&format!("{PATH}/{id}/deny")),
            Some((id, Some(Choice::Deny)))
        );
        for bad in [
            format!("{PATH}/{id}/delete"),
            format!("{PATH}/{id}/approve/more"),
            format!("{PATH}/apr_xyz"),
            format!("{PATH}/{}", &id[..35]),
            format!("{PATH}{id}"),
            PATH.to_owned(),
        ] {
            assert_eq!(parse_path(&bad), None, "{bad}");
        }
    }
}
