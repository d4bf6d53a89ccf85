//! The credentials page and its two create forms: API keys (a scope picker of the known
//! scopes, grouped, and an expiry choice) and OAuth clients. Both forms are checked here,
//! on the server: an unknown scope is refused with the closest known ones, as the command
//! line refuses it, and the page comes back (422) with what the operator chose. Here too:
//! what any refused credential change shows, and the one page that shows a new secret
//! (a rotated key's as well).

use std::time::Duration;

use serde_json::{Value, json};

use super::i18n::Texts;
use super::{Console, Form, Operator, Request, Response, form_status};
use crate::clock::format_time;
use crate::config::GuardChannel;
use crate::guards::auth::{self, CredentialError, Mode, NewKey, ScopeGroup};

/// The expiries the key form offers: the field's value, its text's key, and the lifetime
/// (`None`: never expires).
const EXPIRIES: &[(&str, &str, Option<u64>)] = &[
    ("never", "expires_never", None),
    ("1d", "expires_1d", Some(1)),
    ("7d", "expires_7d", Some(7)),
    ("30d", "expires_30d", Some(30)),
    ("90d", "expires_90d", Some(90)),
];

/// The lifetime of the form's `expires` choice: `Ok(None)` for never (or no choice sent),
/// `Err` for a value the form does not offer.
fn expires_in(form: &Form) -> Result<Option<Duration>, ()> {
    match form.get("expires") {
        "" => Ok(None),
        value => EXPIRIES
            .iter()
            .find(|(v, _, _)| *v == value)
            .map(|(_, _, days)| days.map(|d| Duration::from_secs(d * 86_400)))
            .ok_or(()),
    }
}

/// The scopes a form sent: every `scopes` field (one per ticked box), each possibly a
/// comma-separated list as the command line takes them.
fn requested_scopes(form: &Form) -> String {
    form.all("scopes").join(",")
}

/// A refused scope list in the page's language: none chosen, malformed, or unknown with
/// the closest known scopes.
fn scope_error(texts: &Texts, e: &CredentialError) -> String {
    match e {
        CredentialError::BadScope(scope) if scope.is_empty() => texts.get("scope_none").to_owned(),
        CredentialError::BadScope(scope) => texts.get("scope_malformed").replace("{scope}", scope),
        CredentialError::UnknownScope(unknown) => {
            let mut text = texts
                .get("scope_unknown")
                .replace("{scope}", &unknown.scope);
            if !unknown.suggestions.is_empty() {
                text.push(' ');
                text.push_str(
                    &texts
                        .get("scope_did_you_mean")
                        .replace("{scopes}", &unknown.suggestions.join(", ")),
                );
            }
            if let Some(backend) = &unknown.unconfigured_backend {
                text.push(' ');
                text.push_str(&texts.get("scope_no_backend").replace("{backend}", backend));
            }
            text
        }
        other => other.to_string(),
    }
}

/// Which create form a refused post came from, with what it sent.
#[derive(Clone, Copy)]
pub(super) enum Posted<'f> {
    /// The key form.
    Key(&'f Form),
    /// The OAuth client form.
    Client(&'f Form),
}

/// The key form's fields as the page shows them again: what was posted, or the defaults.
fn key_form(posted: Option<Posted<'_>>) -> Value {
    match posted {
        Some(Posted::Key(form)) => json!({
            "name": form.get("name"), "scopes": requested_scopes(form).split(',')
                .map(str::trim).filter(|s| !s.is_empty()).collect::<Vec<_>>(),
            "mode": form.get("mode"),
            "guard_channel": form.get("guard_channel"), "expires": form.get("expires"),
        }),
        _ => {
            json!({"name": "", "scopes": [], "mode": "live", "guard_channel": "", "expires": "never"})
        }
    }
}

/// The client form's fields as the page shows them again.
fn client_form(posted: Option<Posted<'_>>) -> Value {
    match posted {
        Some(Posted::Client(form)) => {
            json!({"name": form.get("name"), "scopes": form.get("scopes")})
        }
        _ => json!({"name": "", "scopes": ""}),
    }
}

/// The scope picker: the known scopes by group, each with what it grants (the special
/// scopes' meaning, or the tools of the server's registry that need it) and whether it is
/// ticked.
fn scope_groups(console: &Console, ticked: &Value) -> Vec<Value> {
    let texts = console.texts();
    let registry = console.server.registry();
    let is_ticked = |scope: &str| {
        ticked
            .as_array()
            .is_some_and(|all| all.iter().any(|t| t.as_str() == Some(scope)))
    };
    let mut groups: Vec<Value> = Vec::new();
    for (index, known) in console.scopes.all().iter().enumerate() {
        let (id, legend) = match &known.group {
            ScopeGroup::Special => ("special".to_owned(), texts.get("scopes_special").to_owned()),
            ScopeGroup::BuiltIn(resource) => (
                format!("builtin-{resource}"),
                texts.get("scopes_builtin").replace("{resource}", resource),
            ),
            ScopeGroup::Backend(name) => (
                format!("backend-{name}"),
                texts.get("scopes_backend").replace("{backend}", name),
            ),
        };
        let note = match known.scope.as_str() {
            auth::SUPER_SCOPE => texts.get("scope_super").to_owned(),
            auth::ADMIN_SCOPE => texts.get("scope_admin").to_owned(),
            auth::APPROVE_SCOPE => texts.get("scope_approve").to_owned(),
            scope => {
                let tools: Vec<&str> = registry
                    .tools()
                    .iter()
                    .filter(|t| t.spec().scope == scope)
                    .map(|t| &*t.spec().name)
                    .collect();
                if tools.is_empty() {
                    texts.get("scope_no_tools_now").to_owned()
                } else {
                    tools.join(", ")
                }
            }
        };
        let entry = json!({
            "scope": known.scope, "id": format!("key-scope-{index}"), "note": note,
            "checked": is_ticked(&known.scope),
        });
        match groups.last_mut() {
            Some(group) if group["id"] == json!(id) => {
                if let Some(scopes) = group["scopes"].as_array_mut() {
                    scopes.push(entry);
                }
            }
            _ => groups.push(json!({"id": id, "legend": legend, "scopes": [entry]})),
        }
    }
    groups
}

/// The expiry choices, with their texts.
fn expiries(texts: &Texts) -> Vec<Value> {
    EXPIRIES
        .iter()
        .map(|(value, text, _)| json!({"value": value, "label": texts.get(text)}))
        .collect()
}

/// The credentials page; with `error`, the refusal of the form `posted` (422), that form
/// filled in again.
pub(super) fn page(
    console: &Console,
    op: &Operator,
    error: Option<String>,
    posted: Option<Posted<'_>>,
) -> Response {
    let store = console.server.store();
    let now = console.now_secs();
    let keys = match auth::list_keys(store) {
        Ok(keys) => keys,
        Err(e) => return console.read_failed(op, e),
    };
    let clients = match auth::list_clients(store) {
        Ok(clients) => clients,
        Err(e) => return console.read_failed(op, e),
    };
    let plan = store.company().ok().flatten().map(|c| c.plan_slug);
    let keys: Vec<Value> = keys
        .iter()
        .map(|k| {
            json!({
                "id": k.public_id, "name": k.name, "mode": k.mode, "scopes": k.scopes.join(", "),
                "client": k.client_id, "status": k.status(now),
                "created": format_time(k.created_at),
                "expires": k.expires_at.map(format_time),
                "last_used": k.last_used_at.map(format_time),
                "guard_channel": k.guard_channel.map(|c| c.as_str()),
                "active": k.status(now) == "active",
            })
        })
        .collect();
    let clients: Vec<Value> = clients
        .iter()
        .map(|c| {
            json!({
                "id": c.client_id, "name": c.name, "scopes": c.allowed_scopes.join(", "),
                "per_minute": c.per_minute_limit, "created": format_time(c.created_at),
                "revoked": c.revoked,
            })
        })
        .collect();
    let key_form = key_form(posted);
    let status = form_status(&error);
    let rendered = console.render(
        "credentials.html",
        "credentials",
        Some(op),
        json!({"keys": keys, "clients": clients, "plan": plan, "error": error,
               "scope_groups": scope_groups(console, &key_form["scopes"]),
               "expiries": expiries(console.texts()), "key_form": key_form,
               "client_form": client_form(posted)}),
    );
    Response::html(status, rendered)
}

/// A refused credential change: the operator's mistakes back on the form (the one
/// `posted`, filled in again), the store's failures as such.
pub(super) fn credential_failed(
    console: &Console,
    op: &Operator,
    e: CredentialError,
    posted: Option<Posted<'_>>,
) -> Response {
    match e {
        CredentialError::Store(_) | CredentialError::Internal(_) => console.read_failed(op, e),
        e => page(console, op, Some(e.to_string()), posted),
    }
}

/// The one page that shows a new secret.
pub(super) fn secret_page(
    console: &Console,
    op: &Operator,
    what: &str,
    public_id: &str,
    client_id: Option<&str>,
    secret: &str,
) -> Response {
    let page = console.render(
        "secret.html",
        what,
        Some(op),
        json!({"public_id": public_id, "client_id": client_id, "secret": secret}),
    );
    Response::html(200, page)
}

/// `POST /console/credentials/keys`.
pub(super) fn create_key(
    console: &Console,
    request: &Request<'_>,
    op: &Operator,
    form: &Form,
) -> Response {
    let refused = |message: String| page(console, op, Some(message), Some(Posted::Key(form)));
    let scopes = match console.scopes.parse_list(&requested_scopes(form)) {
        Ok(scopes) => scopes,
        Err(e) => return refused(scope_error(console.texts(), &e)),
    };
    let Ok(expires_in) = expires_in(form) else {
        return refused(console.texts().get("expires_unknown").to_owned());
    };
    let guard_channel = match form.get("guard_channel") {
        "" => None,
        word => match word.parse::<GuardChannel>() {
            Ok(channel) => Some(channel),
            Err(e) => return refused(e.to_string()),
        },
    };
    let mode = if form.get("mode") == "test" {
        Mode::Test
    } else {
        Mode::Live
    };
    let new = NewKey {
        name: form.get("name").to_owned(),
        scopes,
        expires_in,
        client_id: None,
        mode,
        guard_channel,
    };
    let issued = match auth::create_key(console.server.store(), &new) {
        Ok(issued) => issued,
        Err(e) => return credential_failed(console, op, e, Some(Posted::Key(form))),
    };
    if !console.record(
        &op.principal,
        "create_key",
        &issued.public_id,
        request.source,
    ) {
        return console.not_audited(op);
    }
    secret_page(
        console,
        op,
        "key_created",
        &issued.public_id,
        None,
        issued.token.expose(),
    )
}

/// `POST /console/credentials/clients`.
pub(super) fn create_client(
    console: &Console,
    request: &Request<'_>,
    op: &Operator,
    form: &Form,
) -> Response {
    let scopes = match console.scopes.parse_list(&requested_scopes(form)) {
        Ok(scopes) => scopes,
        Err(e) => {
            let message = scope_error(console.texts(), &e);
            return page(console, op, Some(message), Some(Posted::Client(form)));
        }
    };
    let issued = match auth::create_client(console.server.store(), form.get("name"), &scopes) {
        Ok(issued) => issued,
        Err(e) => return credential_failed(console, op, e, Some(Posted::Client(form))),
    };
    if !console.record(
        &op.principal,
        "create_client",
        &issued.client_id,
        request.source,
    ) {
        return console.not_audited(op);
    }
    secret_page(
        console,
        op,
        "client_created",
        "",
        Some(&issued.client_id),
        issued.secret.expose(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(fields: &[(&str, &str)]) -> Form {
        Form(
            fields
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn the_expiry_is_one_of_the_offered_choices() {
        let days = |n: u64| Ok(Some(Duration::from_secs(n * 86_400)));
        assert_eq!(expires_in(&form(&[])), Ok(None));
        assert_eq!(expires_in(&form(&[("expires", "never")])), Ok(None));
        assert_eq!(expires_in(&form(&[("expires", "1d")])), days(1));
        assert_eq!(expires_in(&form(&[("expires", "7d")])), days(7));
        assert_eq!(expires_in(&form(&[("expires", "30d")])), days(30));
        assert_eq!(expires_in(&form(&[("expires", "90d")])), days(90));
        for bad in ["2d", "forever", "-1d", "30"] {
            assert_eq!(expires_in(&form(&[("expires", bad)])), Err(()), "{bad}");
        }
    }

    #[test]
    fn every_ticked_box_and_every_listed_scope_is_requested() {
        let posted = form(&[
            ("scopes", "clients:read"),
            ("name", "x"),
            ("scopes", "invoices:read,payments:write"),
        ]);
        assert_eq!(
            requested_scopes(&posted),
            "clients:read,invoices:read,payments:write"
        );
    }

    #[test]
    fn a_refused_scope_is_said_in_the_pages_language() {
        let known = auth::KnownScopes::new(&[], false);
        let es = super::super::i18n::texts(crate::config::Locale::Es);
        let unknown = known.parse_list("invoices:raed").expect_err("unknown");
        assert_eq!(
            scope_error(es, &unknown),
            "Ámbito desconocido: invoices:raed. ¿Quería decir invoices:read?"
        );
        let en = super::super::i18n::texts(crate::config::Locale::En);
        let backend = known.parse_list("crm:read").expect_err("unknown");
        assert!(
            scope_error(en, &backend).contains("No backend named crm is configured"),
            "{}",
            scope_error(en, &backend)
        );
        let none = known.parse_list("").expect_err("none");
        assert_eq!(scope_error(en, &none), en.get("scope_none"));
    }
}
