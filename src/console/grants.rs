//! The grants page: what the OAuth front door ([`crate::oauth`]) keeps, for the operator.
//! First the grants — each a person's consent to an application, under which the
//! application's tokens act as that person — standing ones first, most recently used
//! first, each with its person, its application (by name, its id in the title), its scopes,
//! when it was given and last used, and its state; then the applications that registered
//! themselves (RFC 7591).
//!
//! A standing grant can be revoked, a registration deleted (which revokes its grants), each
//! behind a confirmation page as key revocation is. Every call with a token issued under a
//! grant re-reads the grant inside its charging transaction, so the change applies to the
//! tokens' next call on every node; like every change made here, it is an audit row under
//! the operator's credential. Names of people and applications come from outside (a
//! provider's token, a registration, a client metadata document); the templates escape
//! them.

use serde_json::{Value, json};

use super::{Console, Operator, Request, Response};
use crate::clock::format_time;
use crate::store::StoreError;
use crate::store::oauth::{Grant, Registration};

/// The path of the page; a grant's form is `{GRANTS_PATH}/{id}/revoke`.
const GRANTS_PATH: &str = "/console/grants";
/// The path of a registered application's form, before its id: `…/{id}/delete`.
const CLIENT_PATH: &str = "/console/grants/clients/";
/// The longest id a form path may name (grant ids have 34 characters, registered clients'
/// 36).
const MAX_ID_CHARS: usize = 64;

/// What a form of the page changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Revoke the grant of the id.
    RevokeGrant,
    /// Delete the registration of the id and revoke its grants.
    DeleteClient,
}

impl Action {
    /// The audit row's action (`console:<action>`).
    fn audited_as(self) -> &'static str {
        match self {
            Action::RevokeGrant => "revoke_grant",
            Action::DeleteClient => "delete_oauth_client",
        }
    }
}

/// Whether `id` may be an id of the front door's: a grant's (`g_…`) or a registered
/// client's (`tgc_…`), letters, digits and `_` only, so that it stands in a path as is.
fn id_like(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_CHARS
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `/console/grants/{id}/revoke` or `/console/grants/clients/{id}/delete` → the id and
/// the action; `None` for any other path.
fn action_path(path: &str) -> Option<(&str, Action)> {
    let (id, action) = match path.strip_prefix(CLIENT_PATH) {
        Some(rest) => (rest.strip_suffix("/delete")?, Action::DeleteClient),
        None => {
            let rest = path.strip_prefix(GRANTS_PATH)?.strip_prefix('/')?;
            (rest.strip_suffix("/revoke")?, Action::RevokeGrant)
        }
    };
    id_like(id).then_some((id, action))
}

/// An application's name, or its id when it gave none.
fn client_label<'a>(id: &'a str, name: Option<&'a str>) -> &'a str {
    name.filter(|n| !n.trim().is_empty()).unwrap_or(id)
}

/// One grant for the template.
fn grant_json(grant: &Grant) -> Value {
    json!({
        "id": grant.id, "person": grant.principal_label, "principal_id": grant.principal_id,
        "client": client_label(&grant.client_id, grant.client_name.as_deref()),
        "client_id": grant.client_id, "scopes": grant.scopes,
        "created": format_time(grant.created_at),
        "last_used": grant.last_used_at.map(format_time),
        "revoked": grant.revoked_at.map(format_time),
    })
}

/// One registered application for the template.
fn client_json(client: &Registration) -> Value {
    json!({
        "id": client.client_id, "name": client.client_name,
        "redirect_uris": client.redirect_uris, "auth_method": client.auth_method,
        "created": format_time(client.created_at),
        "last_used": client.last_used_at.map(format_time),
    })
}

/// `GET /console/grants`.
pub(super) fn page(console: &Console, op: &Operator) -> Response {
    let store = console.server.store();
    let read = store
        .grants()
        .and_then(|grants| Ok((grants, store.registrations()?)));
    let (grants, clients) = match read {
        Ok(read) => read,
        Err(e) => return console.store_failed(op, e),
    };
    let page = console.render(
        "grants.html",
        "grants",
        Some(op),
        json!({
            "grants": grants.iter().map(grant_json).collect::<Vec<_>>(),
            "clients": clients.iter().map(client_json).collect::<Vec<_>>(),
            "front_door_off": !console.front_door,
        }),
    );
    Response::html(200, page)
}

/// The registered application `id`, read for its confirmation.
fn registration(console: &Console, id: &str) -> Result<Option<Registration>, StoreError> {
    let all = console.server.store().registrations()?;
    Ok(all.into_iter().find(|r| r.client_id == id))
}

/// The question of the confirmation of `action` on `id`: `Ok(None)` when there is nothing
/// to confirm (no such grant or registration, or a grant revoked already).
fn question(console: &Console, id: &str, action: Action) -> Result<Option<String>, StoreError> {
    let texts = console.texts();
    Ok(match action {
        Action::RevokeGrant => console
            .server
            .store()
            .grant(id)?
            .filter(|g| g.revoked_at.is_none())
            .map(|g| {
                texts
                    .get("confirm_revoke_grant")
                    .replace("{person}", &g.principal_label)
                    .replace(
                        "{client}",
                        client_label(&g.client_id, g.client_name.as_deref()),
                    )
            }),
        Action::DeleteClient => registration(console, id)?.map(|r| {
            texts
                .get("confirm_delete_client")
                .replace("{client}", client_label(id, r.client_name.as_deref()))
                .replace("{id}", id)
        }),
    })
}

/// `GET /console/grants/{id}/revoke`, `GET /console/grants/clients/{id}/delete`: the
/// confirmation the change needs. `None` (the console's 404) for a path that names no
/// standing grant or registered application.
pub(super) fn confirm_page(console: &Console, op: &Operator, path: &str) -> Option<Response> {
    let (id, action) = action_path(path)?;
    let question = match question(console, id, action) {
        Ok(question) => question?,
        Err(e) => return Some(console.store_failed(op, e)),
    };
    Some(console.confirm(
        op,
        json!({"question": question, "action": path, "id": id, "back": GRANTS_PATH}),
    ))
}

/// `POST` of a confirmation: the change, its audit row, then the page. `None` (the
/// console's 404) for a path that names no standing grant or registered application.
pub(super) fn post(
    console: &Console,
    request: &Request<'_>,
    op: &Operator,
    path: &str,
) -> Option<Response> {
    let (id, action) = action_path(path)?;
    let store = console.server.store();
    let now = console.now_secs();
    let changed = match action {
        Action::RevokeGrant => store.revoke_grant(id, now),
        Action::DeleteClient => store.delete_registration(id, now).map(|d| d.is_some()),
    };
    match changed {
        Ok(true) => {}
        Ok(false) => return None,
        Err(e) => return Some(console.store_failed(op, e)),
    }
    if !console.record(&op.principal, action.audited_as(), id, request.source) {
        return Some(console.not_audited(op));
    }
    Some(Response::redirect(GRANTS_PATH))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRANT: &str = "g_5e0d2a9c41b7f3e8d6a15e0d2a9c41b7";
    const CLIENT: &str = "tgc_3f9a0c2b7d41e8a5c6b03f9a0c2b7d41";

    #[test]
    fn a_form_path_names_a_grant_or_a_registered_client_and_its_action() {
        assert_eq!(
            action_path(&format!("/console/grants/{GRANT}/revoke")),
            Some((GRANT, Action::RevokeGrant))
        );
        assert_eq!(
            action_path(&format!("/console/grants/clients/{CLIENT}/delete")),
            Some((CLIENT, Action::DeleteClient))
        );
        let long = "g".repeat(MAX_ID_CHARS + 1);
        for bad in [
            format!("/console/grants/{GRANT}/delete"),
            format!("/console/grants/clients/{CLIENT}/revoke"),
            format!("/console/grants/{GRANT}/revoke/more"),
            format!("/console/grants/{GRANT}"),
            "/console/grants//revoke".to_owned(),
            "/console/grants/a%2Fb/revoke".to_owned(),
            "/console/grants/a/b/revoke".to_owned(),
            "/console/grants/clients//delete".to_owned(),
            format!("/console/grants/{long}/revoke"),
            format!("/console/grantsx/{GRANT}/revoke"),
            format!("/console/users/{GRANT}/revoke"),
        ] {
            assert_eq!(action_path(&bad), None, "{bad}");
        }
        // The longest id passes, one more character does not.
        let longest = "g".repeat(MAX_ID_CHARS);
        assert!(action_path(&format!("/console/grants/{longest}/revoke")).is_some());
    }

    fn grant() -> Grant {
        Grant {
            id: GRANT.into(),
            principal_id: "u0123456789abcdef01234567".into(),
            principal_label: "Ana García".into(),
            client_id: "https://claude.ai/oauth/client.json".into(),
            client_name: Some("Claude".into()),
            scopes: vec!["invoices:read".into(), "clients:read".into()],
            created_at: 60,
            updated_at: 60,
            last_used_at: None,
            revoked_at: None,
        }
    }

    #[test]
    fn a_grant_shows_its_person_its_application_by_name_and_its_state() {
        let shown = grant_json(&grant());
        assert_eq!(shown["person"], "Ana García");
        assert_eq!(shown["client"], "Claude");
        assert_eq!(shown["client_id"], "https://claude.ai/oauth/client.json");
        assert_eq!(shown["scopes"], json!(["invoices:read", "clients:read"]));
        assert_eq!(shown["created"], "1970-01-01T00:01:00Z");
        assert_eq!(shown["last_used"], Value::Null);
        assert_eq!(shown["revoked"], Value::Null);
        let revoked = Grant {
            client_name: Some("  ".into()),
            last_used_at: Some(120),
            revoked_at: Some(180),
            ..grant()
        };
        let shown = grant_json(&revoked);
        assert_eq!(
            shown["client"], "https://claude.ai/oauth/client.json",
            "a blank name shows the id"
        );
        assert_eq!(shown["last_used"], "1970-01-01T00:02:00Z");
        assert_eq!(shown["revoked"], "1970-01-01T00:03:00Z");
    }

    #[test]
    fn a_registered_client_shows_its_redirects_and_how_it_authenticates() {
        let client = Registration {
            client_id: CLIENT.into(),
            secret_hash: Some("ab".into()),
            client_name: None,
            client_uri: None,
            redirect_uris: vec!["http://127.0.0.1/callback".into()],
            grant_types: vec!["authorization_code".into()],
            auth_method: "client_secret_basic".into(),
            application_type: None,
            created_at: 0,
            last_used_at: Some(60),
        };
        let shown = client_json(&client);
        assert_eq!(shown["id"], CLIENT);
        assert_eq!(shown["name"], Value::Null);
        assert_eq!(shown["redirect_uris"], json!(["http://127.0.0.1/callback"]));
        assert_eq!(shown["auth_method"], "client_secret_basic");
        assert_eq!(shown["last_used"], "1970-01-01T00:01:00Z");
        // Keys checked on the map: the texts' test reads a quoted get( as a text's key.
        let fields = shown.as_object().expect("an object");
        assert!(!fields.contains_key("secret_hash"), "no secret's digest");
        assert_eq!(Action::RevokeGrant.audited_as(), "revoke_grant");
        assert_eq!(Action::DeleteClient.audited_as(), "delete_oauth_client");
    }
}
