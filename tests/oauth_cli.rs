//! What the operator sees and does with the OAuth front door's grants and registered
//! clients, on the command line (`tollgate oauth grants|revoke-grant|clients|delete-client`)
//! and in the console's Grants page: a grant made by a person through the HTTP flow (key
//! sign-in, consent, code exchange) is listed with its person, application and scopes;
//! revoking it, or deleting its client, refuses its access token on the very next MCP call
//! as `invalid_token` with `details.reason` `revoked`, and its refresh token at the token
//! endpoint; an unknown id is refused with a message and a non-zero exit, and changes
//! nothing.

use serde_json::{Value, json};

use crate::console::{Browser, hidden_csrf, text};
use crate::oauth_server::{
    REDIRECT, VERIFIER, call, code_for, exchange, front_door, personal_key, refresh, register,
};
use crate::util::{HttpServer, TestDb};

/// The tokens of a whole sign-in of the holder of `key` to `client`: `(access, refresh)`.
fn tokens(server: &HttpServer, client: &str, key: &str) -> (String, String) {
    let code = code_for(server, client, REDIRECT, key, "invoices:read");
    let answer = exchange(server, client, &code, REDIRECT, VERIFIER);
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let answer = answer.json();
    (
        answer["access_token"].as_str().expect("access").to_owned(),
        answer["refresh_token"]
            .as_str()
            .expect("refresh")
            .to_owned(),
    )
}

/// Whether a call with `access` is admitted (a listing of invoices).
fn admitted(server: &HttpServer, access: &str) -> bool {
    call(server, access, "search_invoices", json!({}))["result"]["isError"] == json!(false)
}

/// Asserts that a call with `access` is refused as a revoked token's.
fn assert_refused_as_revoked(server: &HttpServer, access: &str) {
    let refused = call(server, access, "search_invoices", json!({}));
    assert_eq!(
        refused["error"]["data"]["code"], "invalid_token",
        "{refused}"
    );
    assert_eq!(
        refused["error"]["data"]["details"]["reason"], "revoked",
        "{refused}"
    );
}

fn grants(db: &TestDb) -> Vec<Value> {
    db.run_json(&["oauth", "grants", "--json"])
        .as_array()
        .expect("a list")
        .clone()
}

fn clients(db: &TestDb) -> Vec<Value> {
    db.run_json(&["oauth", "clients", "--json"])
        .as_array()
        .expect("a list")
        .clone()
}

/// Runs a command that must fail: its exit code and stderr.
fn failing(db: &TestDb, args: &[&str]) -> (Option<i32>, String) {
    let out = db.run(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_cli_lists_a_grant_made_through_the_front_door_and_revoking_it_refuses_its_tokens() {
    let db = TestDb::new();
    let (key_id, key) = personal_key(&db, "invoices:read");
    let server = front_door(&db);
    let client = register(&server, REDIRECT);
    let (access, refresh_token) = tokens(&server, &client, &key);
    assert!(admitted(&server, &access));

    let listed = grants(&db);
    assert_eq!(listed.len(), 1, "{listed:?}");
    let grant = &listed[0];
    let id = grant["id"].as_str().expect("id").to_owned();
    assert!(id.starts_with("g_"), "{id}");
    assert_eq!(grant["state"], "standing");
    assert_eq!(grant["person"], "Ana");
    assert_eq!(grant["principal_id"], json!(key_id));
    assert_eq!(grant["client_id"], json!(client));
    assert_eq!(grant["client_name"], "Test host");
    assert_eq!(grant["scopes"], json!(["invoices:read"]));
    assert!(grant["created_at"].is_i64());
    assert!(grant["last_used_at"].is_i64(), "used by the exchange");
    assert_eq!(grant["revoked_at"], Value::Null);
    let table = db.run(&["oauth", "grants"]);
    assert!(table.status.success());
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(table.starts_with("ID "), "{table}");
    let row = table.lines().find(|l| l.starts_with(&id)).expect("its row");
    for part in [
        "standing",
        &format!("Ana ({key_id})"),
        &format!("Test host ({client})"),
        "invoices:read",
    ] {
        assert!(row.contains(part), "{part}: {row}");
    }

    let revoked = db.run_json(&["oauth", "revoke-grant", &id, "--json"]);
    assert_eq!(revoked["id"], json!(id));
    assert_eq!(revoked["changed"], true);
    assert!(revoked["revoked_at"].is_i64());
    // The very next call, and the refresh token, are refused.
    assert_refused_as_revoked(&server, &access);
    let refreshed = refresh(&server, &client, &refresh_token);
    assert_eq!(
        (refreshed.status, refreshed.json()["error"].clone()),
        (400, json!("invalid_grant"))
    );
    let listed = grants(&db);
    assert_eq!(listed[0]["state"], "revoked");
    assert_eq!(listed[0]["revoked_at"], revoked["revoked_at"]);

    // Again: nothing to do, said so, success.
    let again = db.run(&["oauth", "revoke-grant", &id]);
    assert!(again.status.success());
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(
        said.starts_with(&format!(
            "Grant {id} of Ana to Test host ({client}) was already revoked, at "
        )),
        "{said}"
    );
    // An unknown id: a message that says what to do, exit 1.
    let (code, stderr) = failing(&db, &["oauth", "revoke-grant", "g_unknown"]);
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr.trim_end(),
        "tollgate: no grant has the id \"g_unknown\"; `tollgate oauth grants` lists them"
    );

    // The person is asked again and allows again: a new grant takes the revoked one's
    // place, and its tokens work.
    let (access, _) = tokens(&server, &client, &key);
    assert!(admitted(&server, &access));
    let listed = grants(&db);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["state"], "standing");
    assert_ne!(listed[0]["id"], json!(id));
}

#[test]
fn deleting_a_client_revokes_its_grants_and_an_unknown_client_is_refused() {
    let db = TestDb::new();
    let (_, key) = personal_key(&db, "invoices:read");
    let server = front_door(&db);
    let client = register(&server, REDIRECT);
    let other = register(&server, REDIRECT);
    let (access, refresh_token) = tokens(&server, &client, &key);
    let (other_access, _) = tokens(&server, &other, &key);

    let listed = clients(&db);
    assert_eq!(listed.len(), 2, "{listed:?}");
    let shown = listed
        .iter()
        .find(|c| c["client_id"] == json!(client))
        .expect("the client");
    assert_eq!(shown["client_name"], "Test host");
    assert_eq!(shown["redirect_uris"], json!([REDIRECT]));
    assert_eq!(shown["auth_method"], "none");
    assert!(shown["created_at"].is_i64());
    assert!(shown["last_used_at"].is_i64(), "it obtained a token");
    assert!(
        shown.get("secret_hash").is_none(),
        "no secret's digest: {shown}"
    );
    let table = String::from_utf8_lossy(&db.run(&["oauth", "clients"]).stdout).into_owned();
    let row = table
        .lines()
        .find(|l| l.starts_with(&client))
        .expect("its row");
    assert!(row.contains("Test host") && row.contains("none") && row.contains(REDIRECT));

    let deleted = db.run_json(&["oauth", "delete-client", &client, "--json"]);
    assert_eq!(
        deleted,
        json!({"client_id": client, "deleted": true, "grants_revoked": 1})
    );
    assert_refused_as_revoked(&server, &access);
    let refreshed = refresh(&server, &client, &refresh_token);
    assert_eq!(
        (refreshed.status, refreshed.json()["error"].clone()),
        (401, json!("invalid_client")),
        "the client is gone"
    );
    // The other client's grant is untouched.
    assert!(admitted(&server, &other_access));
    let left: Vec<Value> = clients(&db)
        .iter()
        .map(|c| c["client_id"].clone())
        .collect();
    assert_eq!(left, [json!(other)]);
    let states: Vec<(Value, Value)> = grants(&db)
        .iter()
        .map(|g| (g["client_id"].clone(), g["state"].clone()))
        .collect();
    assert!(
        states.contains(&(json!(client), json!("revoked"))),
        "{states:?}"
    );
    assert!(
        states.contains(&(json!(other), json!("standing"))),
        "{states:?}"
    );

    // Gone: a second delete is refused, and so is an id nobody registered.
    for id in [client.as_str(), "https://host.example/client.json"] {
        let (code, stderr) = failing(&db, &["oauth", "delete-client", id]);
        assert_eq!(code, Some(1), "{id}");
        assert!(
            stderr.starts_with(&format!(
                "tollgate: no registered client has the id \"{id}\"; `tollgate oauth clients` lists them"
            )),
            "{stderr}"
        );
    }
    // The client cannot start a sign-in any more.
    let start = crate::oauth_server::authorize(
        &server,
        &[
            ("response_type", "code"),
            ("client_id", &client),
            ("redirect_uri", REDIRECT),
            ("code_challenge", &crate::oauth_server::challenge(VERIFIER)),
            ("code_challenge_method", "S256"),
        ],
    );
    assert_eq!(start.status, 400);
    assert!(start.header("location").is_none());
}

#[test]
fn the_console_grants_page_lists_and_revokes_a_grant_behind_its_confirmation_and_audits_it() {
    let db = TestDb::new();
    let (key_id, key) = personal_key(&db, "invoices:read");
    let server = front_door(&db);
    let client = register(&server, REDIRECT);
    let (access, _) = tokens(&server, &client, &key);
    let id = grants(&db)[0]["id"].as_str().expect("id").to_owned();

    let mut browser = Browser::signed_in(&server, &db);
    let page = browser.get("/console/grants");
    assert_eq!(page.status, 200);
    let html = text(&page);
    assert!(html.contains("aria-current=\"page\">Grants<"), "{html}");
    let row = &html[html.find(&format!("id=\"grant-{id}\"")).expect("the row")..];
    let row = &row[..row.find("</tr>").expect("its end")];
    assert!(
        row.contains(&format!("title=\"{key_id}\">Ana</th>")),
        "{row}"
    );
    assert!(
        row.contains(&format!(
            "<span class=\"client-name\" title=\"{client}\">Test host</span>"
        )),
        "{row}"
    );
    assert!(row.contains("<code>invoices:read</code>"), "{row}");
    assert!(
        row.contains(&format!("href=\"/console/grants/{id}/revoke\"")),
        "{row}"
    );
    assert!(
        html.contains(&format!("id=\"client-{client}\"")),
        "the registered client"
    );
    assert!(!html.contains("id=\"front-door-off\""));

    let path = format!("/console/grants/{id}/revoke");
    let confirm = browser.get(&path);
    assert_eq!(confirm.status, 200);
    let confirm = text(&confirm);
    assert!(
        confirm.contains("Revoke the grant of Ana to Test host?"),
        "{confirm}"
    );
    let csrf = hidden_csrf(&confirm);
    // Without its token: refused, nothing changes.
    assert_eq!(browser.post(&path, &[]).status, 403);
    assert!(admitted(&server, &access));
    let revoked = browser.post(&path, &[("csrf", &csrf)]);
    assert_eq!(revoked.status, 303, "{}", text(&revoked));
    assert_eq!(revoked.header("location"), Some("/console/grants"));
    assert_refused_as_revoked(&server, &access);
    let html = text(&browser.get("/console/grants"));
    let row = &html[html.find(&format!("id=\"grant-{id}\"")).expect("the row")..];
    let row = &row[..row.find("</tr>").expect("its end")];
    assert!(row.contains("revoked since"), "{row}");
    assert!(!row.contains("/revoke\""), "no revoke link: {row}");
    // A revoked grant, or none, has nothing to confirm or post.
    assert_eq!(browser.get(&path).status, 404);
    assert_eq!(browser.post(&path, &[("csrf", &csrf)]).status, 404);
    assert_eq!(
        browser
            .get("/console/grants/clients/tgc_unknown/delete")
            .status,
        404
    );

    let rows = db.run_json(&["audit", "--json", "--tool", "console:revoke_grant"]);
    let rows = rows.as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["credential_id"], json!(db.admin_key_id()));
    assert_eq!(rows[0]["request_id"], json!(format!("\"{id}\"")));

    // Deleting the registered client, the same way.
    let path = format!("/console/grants/clients/{client}/delete");
    let confirm = text(&browser.get(&path));
    assert!(
        confirm.contains(&format!("Delete the registration of Test host ({client})?")),
        "{confirm}"
    );
    assert_eq!(browser.post(&path, &[("csrf", &csrf)]).status, 303);
    assert!(clients(&db).is_empty());
    let rows = db.run_json(&["audit", "--json", "--tool", "console:delete_oauth_client"]);
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
}

#[test]
fn the_grants_page_says_when_the_front_door_is_off() {
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    let mut browser = Browser::signed_in(&server, &db);
    let html = text(&browser.get("/console/grants"));
    assert!(html.contains("id=\"front-door-off\""), "{html}");
    assert!(html.contains("No person has allowed an application yet."));
    assert!(html.contains("No application has registered itself."));
}
