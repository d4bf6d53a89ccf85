//! The users page: the people and service accounts of the company's identity provider who
//! have called (`store::users`), most recently seen first, each with its calls and
//! refusals of the last 24 hours counted from the audit log, whether it is blocked, and its
//! own per-minute limits (else the plan's defaults); and the block and unblock forms, each
//! behind a confirmation page as key revocation is. A block is read by every call inside
//! its charging transaction, so it applies to the user's next call on every node; like
//! every change made here, it is an audit row under the operator's credential.
//!
//! A refusal is a call a guard refused: its outcome's catalog entry is of the guard class,
//! told apart as the overview's charts tell them ([`class_of`]), so a backend's own 429 is
//! not one. Names and subjects come from the provider's tokens; the templates escape them.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::charts::class_of;
use super::{Console, Operator, Request, Response};
use crate::catalog::Class;
use crate::clock::format_time;
use crate::store::audit::UserOutcomeCalls;
use crate::store::users::{UserRow, is_user_id};
use crate::tools::Category;

/// The window the counts cover.
const WINDOW_MS: i64 = 24 * 3_600_000;
/// The path of one user's forms, before its id.
const USER_PATH: &str = "/console/users/";

/// What a user's form does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Block,
    Unblock,
}

impl Action {
    /// The audit row's action (`console:<action>`).
    fn audited_as(self) -> &'static str {
        match self {
            Action::Block => "block_user",
            Action::Unblock => "unblock_user",
        }
    }
}

/// `/console/users/{id}/{block|unblock}` → the user's id and the action; `None` for any
/// other path, or an id that is not a user's.
fn action_path(path: &str) -> Option<(&str, Action)> {
    let (id, action) = path.strip_prefix(USER_PATH)?.split_once('/')?;
    let action = match action {
        "block" => Action::Block,
        "unblock" => Action::Unblock,
        _ => return None,
    };
    is_user_id(id).then_some((id, action))
}

/// A user's calls and refusals in the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    calls: i64,
    refusals: i64,
}

/// The counts of each user, from the audit log's calls per user, outcome and entry.
fn counts_by_user(rows: &[UserOutcomeCalls]) -> HashMap<&str, Counts> {
    let mut counts: HashMap<&str, Counts> = HashMap::new();
    for row in rows {
        let user = counts.entry(row.user_id.as_str()).or_default();
        user.calls += row.calls;
        if row.outcome != "ok" && class_of(&row.outcome, row.entry) == Some(Class::Guard) {
            user.refusals += row.calls;
        }
    }
    counts
}

/// A user's own per-minute limits, by category (none: the plan's defaults apply).
fn buckets(user: &UserRow) -> Vec<Value> {
    Category::ALL
        .iter()
        .zip(user.per_minute)
        .filter_map(|(category, limit)| {
            limit.map(|n| json!({"category": category.as_str(), "per_minute": n}))
        })
        .collect()
}

/// One user for the template; `since` is the window's start as the audit filter takes it.
fn user_json(user: &UserRow, counts: Counts, since: &str) -> Value {
    let mut audit = form_urlencoded::Serializer::new(String::new());
    audit.append_pair("credential", &user.id);
    audit.append_pair("since", since);
    json!({
        "id": user.id, "name": user.label(), "subject": user.subject, "issuer": user.issuer,
        "client": user.client_id, "last_seen": format_time(user.last_seen_at),
        "calls": counts.calls, "refusals": counts.refusals,
        "calls_link": format!("/console/audit?{}", audit.finish()),
        "blocked": user.blocked_at.map(format_time), "buckets": buckets(user),
    })
}

/// `GET /console/users`.
pub(super) fn page(console: &Console, op: &Operator) -> Response {
    let store = console.server.store();
    let now_ms = console.server.clock().unix_millis();
    let since_ms = now_ms - WINDOW_MS;
    let read = store.users().and_then(|users| {
        let calls = store.user_calls_by_outcome(since_ms, now_ms.saturating_add(1))?;
        Ok((users, calls))
    });
    let (users, calls) = match read {
        Ok(read) => read,
        Err(e) => return console.store_failed(op, e),
    };
    let counts = counts_by_user(&calls);
    // The audit filter takes whole seconds, as a `datetime-local` value (UTC).
    let since = format_time(since_ms.div_euclid(1000))
        .trim_end_matches('Z')
        .to_owned();
    let users: Vec<Value> = users
        .iter()
        .map(|u| {
            let own = counts.get(u.id.as_str()).copied().unwrap_or_default();
            user_json(u, own, &since)
        })
        .collect();
    let page = console.render("users.html", "users", Some(op), json!({"users": users}));
    Response::html(200, page)
}

/// The user `id`, read again for a form; `Ok(None)` when there is none.
fn user(console: &Console, id: &str) -> Result<Option<UserRow>, crate::store::StoreError> {
    let found = console.server.store().find_users(id)?;
    Ok(found.into_iter().find(|u| u.id == id))
}

/// `GET /console/users/{id}/{block|unblock}`: the confirmation the change needs. `None`
/// (the console's 404) for a path that names no user.
pub(super) fn confirm_page(console: &Console, op: &Operator, path: &str) -> Option<Response> {
    let (id, action) = action_path(path)?;
    let user = match user(console, id) {
        Ok(user) => user?,
        Err(e) => return Some(console.store_failed(op, e)),
    };
    let question = match action {
        Action::Block => console.texts().get("confirm_block_user"),
        Action::Unblock => console.texts().get("confirm_unblock_user"),
    };
    Some(console.confirm(
        op,
        json!({
            "question": question.replace("{name}", user.label()).replace("{id}", id),
            "action": path, "id": id, "back": "/console/users",
        }),
    ))
}

/// `POST /console/users/{id}/{block|unblock}`: the change, its audit row, then the list.
/// `None` (the console's 404) for a path that names no user.
pub(super) fn post(
    console: &Console,
    request: &Request<'_>,
    op: &Operator,
    path: &str,
) -> Option<Response> {
    let (id, action) = action_path(path)?;
    let at = (action == Action::Block).then(|| console.now_secs());
    match console.server.store().set_user_blocked(id, at) {
        Ok(true) => {}
        Ok(false) => return None,
        Err(e) => return Some(console.store_failed(op, e)),
    }
    if !console.record(&op.principal, action.audited_as(), id, request.source) {
        return Some(console.not_audited(op));
    }
    Some(Response::redirect("/console/users"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ErrorKind;
    use crate::store::users::user_id;

    #[test]
    fn a_form_path_names_a_user_and_an_action() {
        let id = user_id("https://idp.example.com", "alice");
        let block = format!("/console/users/{id}/block");
        let unblock = format!("/console/users/{id}/unblock");
        assert_eq!(action_path(&block), Some((id.as_str(), Action::Block)));
        assert_eq!(action_path(&unblock), Some((id.as_str(), Action::Unblock)));
        for bad in [
            format!("/console/users/{id}/delete"),
            format!("/console/users/{id}/block/more"),
            format!("/console/users/{id}"),
            "/console/users/0123456789abcdef0123/block".to_owned(),
            format!("/console/users/{}/block", id.to_uppercase()),
            format!("/console/credentials/keys/{id}/block"),
        ] {
            assert_eq!(action_path(&bad), None, "{bad}");
        }
    }

    fn calls(user: &str, outcome: &str, entry: Option<ErrorKind>, calls: i64) -> UserOutcomeCalls {
        UserOutcomeCalls {
            user_id: user.to_owned(),
            outcome: outcome.to_owned(),
            entry,
            calls,
        }
    }

    #[test]
    fn a_refusal_is_a_guards_and_every_outcome_is_a_call() {
        let rows = [
            calls("ua", "ok", None, 5),
            calls("ua", "rate_limited", Some(ErrorKind::RateLimited), 2),
            // A backend's own 429 is the tool's failure, not a refusal.
            calls("ua", "rate_limited", Some(ErrorKind::BackendRateLimited), 1),
            // A row naming no entry takes its code's first entry's class.
            calls("ua", "insufficient_scope", None, 1),
            calls("ub", "internal_error", Some(ErrorKind::InternalError), 1),
        ];
        let counts = counts_by_user(&rows);
        // Indexed, not looked up by a literal: the texts' test reads `get("…")` as a text.
        assert_eq!(
            counts["ua"],
            Counts {
                calls: 9,
                refusals: 3
            }
        );
        assert_eq!(
            counts["ub"],
            Counts {
                calls: 1,
                refusals: 0
            }
        );
    }

    #[test]
    fn a_user_shows_its_own_limits_its_block_and_its_calls_linked_to_the_audit_log() {
        let id = user_id("https://idp.example.com", "alice");
        let user = UserRow {
            id: id.clone(),
            issuer: "https://idp.example.com".into(),
            subject: "alice".into(),
            display_name: None,
            client_id: Some("portal".into()),
            first_seen_at: 0,
            last_seen_at: 60,
            blocked_at: Some(120),
            per_minute: [None, Some(3), None, None, Some(1)],
        };
        let shown = user_json(
            &user,
            Counts {
                calls: 4,
                refusals: 1,
            },
            "2026-03-01T10:00:00",
        );
        assert_eq!(shown["name"], json!("alice"));
        assert_eq!(shown["blocked"], json!("1970-01-01T00:02:00Z"));
        assert_eq!(
            shown["buckets"],
            json!([{"category": "write", "per_minute": 3}, {"category": "generate", "per_minute": 1}])
        );
        assert_eq!(
            shown["calls_link"],
            json!(format!(
                "/console/audit?credential={id}&since=2026-03-01T10%3A00%3A00"
            ))
        );
        let open = UserRow {
            blocked_at: None,
            per_minute: [None; 5],
            ..user
        };
        let shown = user_json(&open, Counts::default(), "2026-03-01T10:00:00");
        assert_eq!(shown["blocked"], Value::Null);
        assert_eq!(shown["buckets"], json!([]));
    }
}
