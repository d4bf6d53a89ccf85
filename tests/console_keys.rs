//! The console's create-key form over HTTP, as a browser without JavaScript posts it: the
//! known scopes offered as checkboxes by group, the ticked ones and an expiry creating a
//! key, and the server refusing what the page does not offer (an unknown scope, with the
//! closest known ones; no scope; an expiry not in the list) with 422 and nothing created.

use serde_json::Value;

use crate::console::{Browser, text};
use crate::util::{HttpResponse, HttpServer, TestDb};

/// Posts the create-key form with the signed-in pages' token and `fields`.
fn create_key(browser: &mut Browser<'_>, fields: &[(&str, &str)]) -> HttpResponse {
    let csrf = browser.csrf();
    let mut all = vec![("csrf", csrf.as_str()), ("mode", "live")];
    all.extend_from_slice(fields);
    browser.post("/console/credentials/keys", &all)
}

/// The text of the element with `id` (up to its first inner tag or its end).
fn element_text(page: &str, id: &str) -> Option<String> {
    let at = page.find(&format!("id=\"{id}\""))?;
    let start = at + page[at..].find('>')? + 1;
    let end = start + page[start..].find('<')?;
    Some(page[start..end].to_owned())
}

fn keys(db: &TestDb) -> Vec<Value> {
    db.run_json(&["key", "list", "--json"])
        .as_array()
        .expect("keys")
        .clone()
}

/// The checkbox of `scope` as the page renders it (its id is the picker's own).
fn has_checkbox(page: &str, scope: &str, checked: bool) -> bool {
    page.split("<input ").any(|input| {
        let tag = input.split('>').next().unwrap_or_default();
        tag.starts_with("type=\"checkbox\"")
            && tag.contains("name=\"scopes\"")
            && tag.contains(&format!("value=\"{scope}\""))
            && tag.contains(" checked") == checked
    })
}

#[test]
fn the_form_offers_the_known_scopes_by_group_and_the_expiries() {
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    let mut browser = Browser::signed_in(&server, &db);
    let page = text(&browser.get("/console/credentials"));
    for scope in [
        "*",
        "admin",
        "clients:read",
        "invoices:void",
        "reports:generate",
    ] {
        assert!(has_checkbox(&page, scope, false), "no box for {scope}");
    }
    assert!(!page.contains("value=\"crm:read\""));
    assert!(page.contains("<fieldset id=\"scopes-special\""), "{page}");
    assert!(
        page.contains("<legend>Built-in tools: invoices</legend>"),
        "{page}"
    );
    for (value, label) in [
        ("never", "never"),
        ("1d", "in 1 day"),
        ("7d", "in 7 days"),
        ("30d", "in 30 days"),
        ("90d", "in 90 days"),
    ] {
        assert!(
            page.contains(&format!("<option value=\"{value}\"")) && page.contains(label),
            "no expiry {value}"
        );
    }
    assert!(page.contains("<option value=\"never\" selected>never</option>"));
}

#[test]
fn ticked_scopes_and_an_expiry_create_a_key_that_expires() {
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    let mut browser = Browser::signed_in(&server, &db);
    let made = create_key(
        &mut browser,
        &[
            ("name", "week reader"),
            ("scopes", "clients:read"),
            ("scopes", "invoices:read"),
            ("expires", "7d"),
            ("guard_channel", ""),
        ],
    );
    assert_eq!(made.status, 200, "{}", text(&made));
    let id = element_text(&text(&made), "public-id").expect("the id");
    let key = keys(&db)
        .into_iter()
        .find(|k| k["id"] == id.as_str())
        .expect("the new key");
    assert_eq!(
        key["scopes"],
        serde_json::json!(["clients:read", "invoices:read"])
    );
    let created = key["created_at"].as_i64().expect("created_at");
    let expires = created + 7 * 86_400;
    assert_eq!(key["expires_at"].as_i64(), Some(expires));
    // The list shows when it expires.
    let list = text(&browser.get("/console/credentials"));
    let row = &list[list.find(&format!("id=\"key-{id}\"")).expect("the row")..];
    assert!(
        row.contains(&format!(
            "<td class=\"expires\" data-label=\"Expires (UTC)\">{}</td>",
            tollgate::clock::format_time(expires)
        )),
        "{row}"
    );

    let forever = create_key(
        &mut browser,
        &[("name", "forever"), ("scopes", "*"), ("expires", "never")],
    );
    assert_eq!(forever.status, 200, "{}", text(&forever));
    let id = element_text(&text(&forever), "public-id").expect("the id");
    let key = keys(&db)
        .into_iter()
        .find(|k| k["id"] == id.as_str())
        .expect("the new key");
    assert_eq!(key["expires_at"], Value::Null);
    let list = text(&browser.get("/console/credentials"));
    let row = &list[list.find(&format!("id=\"key-{id}\"")).expect("the row")..];
    assert!(
        row.contains("<td class=\"expires\" data-label=\"Expires (UTC)\">never</td>"),
        "{row}"
    );
}

#[test]
fn an_unknown_scope_is_refused_with_the_closest_known_one_and_nothing_is_created() {
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    let mut browser = Browser::signed_in(&server, &db);
    let before = keys(&db).len();
    let refused = create_key(
        &mut browser,
        &[
            ("name", "typo"),
            ("scopes", "clients:read"),
            ("scopes", "invoices:raed"),
            ("expires", "30d"),
        ],
    );
    assert_eq!(refused.status, 422, "{}", text(&refused));
    let page = text(&refused);
    assert_eq!(
        element_text(&page, "form-error").as_deref(),
        Some("Unknown scope: invoices:raed. Did you mean invoices:read?")
    );
    // The form comes back as it was sent.
    assert!(page.contains("value=\"typo\""), "{page}");
    assert!(has_checkbox(&page, "clients:read", true), "{page}");
    assert!(has_checkbox(&page, "invoices:read", false), "{page}");
    assert!(page.contains("<option value=\"30d\" selected>"), "{page}");

    let backend = create_key(&mut browser, &[("name", "crm"), ("scopes", "crm:read")]);
    assert_eq!(backend.status, 422);
    let message = element_text(&text(&backend), "form-error").expect("the error");
    assert!(
        message.starts_with("Unknown scope: crm:read. No backend named crm is configured"),
        "{message}"
    );
    let none = create_key(&mut browser, &[("name", "nothing")]);
    assert_eq!(none.status, 422);
    assert_eq!(
        element_text(&text(&none), "form-error").as_deref(),
        Some("Choose at least one scope.")
    );
    let forever = create_key(
        &mut browser,
        &[
            ("name", "odd"),
            ("scopes", "clients:read"),
            ("expires", "365d"),
        ],
    );
    assert_eq!(forever.status, 422);
    assert_eq!(
        element_text(&text(&forever), "form-error").as_deref(),
        Some("Choose an expiry from the list.")
    );
    let csrf = browser.csrf();
    let client = browser.post(
        "/console/credentials/clients",
        &[("csrf", &csrf), ("name", "bot"), ("scopes", "client:read")],
    );
    assert_eq!(client.status, 422);
    assert_eq!(
        element_text(&text(&client), "form-error").as_deref(),
        Some("Unknown scope: client:read. Did you mean clients:read?")
    );
    assert_eq!(keys(&db).len(), before, "nothing was created");
    assert_eq!(
        db.run_json(&["client", "list", "--json"]),
        serde_json::json!([])
    );
}

#[test]
fn a_configured_backends_scopes_are_offered_and_accepted() {
    let db = TestDb::new();
    let spec = serde_json::json!({
        "openapi": "3.0.3",
        "info": {"title": "Orders", "version": "1"},
        "paths": {"/orders": {"get": {"operationId": "listOrders", "summary": "List the orders.",
                                      "responses": {"200": {"description": "ok"}}}}}
    });
    std::fs::write(db.dir.path().join("orders.json"), spec.to_string()).expect("write spec");
    let config = "[[backends]]\nname = \"crm\"\nkind = \"openapi\"\nspec = \"orders.json\"\nbase_url = \"http://127.0.0.1:9\"\n";
    let server = HttpServer::start_with_config(&db, config, &[]);
    let mut browser = Browser::signed_in(&server, &db);
    let page = text(&browser.get("/console/credentials"));
    assert!(page.contains("<legend>Backend crm</legend>"), "{page}");
    for scope in ["crm:read", "crm:write", "crm:destructive"] {
        assert!(has_checkbox(&page, scope, false), "no box for {scope}");
    }
    assert!(
        page.contains("crm_list_orders"),
        "the tools a scope opens: {page}"
    );
    let made = create_key(
        &mut browser,
        &[("name", "crm reader"), ("scopes", "crm:read")],
    );
    assert_eq!(made.status, 200, "{}", text(&made));
}
