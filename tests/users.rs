//! The operator's commands for the users of the company's identity provider, against the
//! real binary: `tollgate users list|block|unblock`, `limits set --user` and `limits show`,
//! and `tollgate audit` naming a user's rows and filtering by user. No provider runs here:
//! the users are written straight into the database the test created, as the server
//! records them the first time one of their tokens is verified.

use std::process::Output;

use serde_json::{Value, json};

use tollgate::store::users::user_id;

use crate::util::{TestDb, unix_now};

/// The provider the seeded users come from.
pub(crate) const ISSUER: &str = "https://login.acme.example";

/// `text` as an SQL string literal.
fn sql_text(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Writes the user `subject` (with its display `name`, last seen `last_seen`) into `db` as
/// the server records it; returns its id.
pub(crate) fn seed_user(db: &TestDb, subject: &str, name: Option<&str>, last_seen: i64) -> String {
    let id = user_id(ISSUER, subject);
    db.sql(&format!(
        "INSERT INTO users (id, issuer, subject, display_name, client_id, first_seen_at, \
         last_seen_at) VALUES ('{id}', {}, {}, {}, 'portal', {}, {last_seen})",
        sql_text(ISSUER),
        sql_text(subject),
        name.map_or_else(|| "NULL".to_owned(), sql_text),
        last_seen - 3600,
    ));
    id
}

/// Writes an audit row of a call by `caller` at `at_ms`, as the audit writer does.
pub(crate) fn seed_call(db: &TestDb, caller: &str, at_ms: i64, outcome: &str, entry: &str) {
    let entry = if entry.is_empty() {
        "NULL".to_owned()
    } else {
        sql_text(entry)
    };
    db.sql(&format!(
        "INSERT INTO audit_log (at, request_id, credential_id, tool, outcome, duration_us, \
         transport, entry) VALUES ({at_ms}, '1', '{caller}', 'search_clients', \
         {}, 1000, 'http', {entry})",
        sql_text(outcome)
    ));
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs a command that must succeed; its stdout.
fn run_ok(db: &TestDb, args: &[&str]) -> String {
    let out = db.run(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stdout(&out)
}

/// Runs a command that must fail as the operator's mistakes do (exit 1, nothing on
/// stdout); its stderr.
fn run_refused(db: &TestDb, args: &[&str]) -> String {
    let out = db.run(args);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stdout(&out));
    assert_eq!(stdout(&out), "", "{args:?}");
    stderr(&out)
}

fn listed(db: &TestDb) -> Vec<Value> {
    db.run_json(&["users", "list", "--json"])
        .as_array()
        .expect("users")
        .clone()
}

fn listed_user(db: &TestDb, id: &str) -> Value {
    listed(db)
        .into_iter()
        .find(|u| u["id"] == id)
        .unwrap_or_else(|| panic!("{id} is not listed"))
}

#[test]
fn users_are_listed_with_their_names_escaped_and_no_users_says_how_one_appears() {
    let db = TestDb::new();
    let none = run_ok(&db, &["users", "list"]);
    assert!(none.starts_with("No users yet."), "{none}");
    assert_eq!(listed(&db), Vec::<Value>::new());

    let now = unix_now();
    let alice = seed_user(&db, "alice", Some("Alice A."), now);
    let eve = seed_user(&db, "eve", Some("Eve\u{1b}[2J\nroot"), now - 60);
    let text = run_ok(&db, &["users", "list"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "a header and one line a user: {text}");
    assert!(lines[0].starts_with("ID "), "{text}");
    assert!(
        lines[1].starts_with(&alice),
        "most recently seen first: {text}"
    );
    for part in ["active", "Alice A.", ISSUER, "portal"] {
        assert!(lines[1].contains(part), "{part}: {text}");
    }
    assert!(
        lines[2].contains("Eve\\u{1b}[2J\\nroot"),
        "a name from a token cannot write to the terminal: {text}"
    );
    assert!(!text.contains('\u{1b}'), "{text}");

    let shown = listed_user(&db, &eve);
    assert_eq!(shown["name"], "Eve\u{1b}[2J\nroot");
    assert_eq!(shown["subject"], "eve");
    assert_eq!(shown["issuer"], ISSUER);
    assert_eq!(shown["client_id"], "portal");
    assert_eq!(shown["last_seen_at"], json!(now - 60));
    assert_eq!(shown["first_seen_at"], json!(now - 3660));
    assert_eq!(shown["blocked"], json!(false));
    assert_eq!(
        shown["per_minute"],
        json!({"read": null, "write": null, "destructive": null, "send": null, "generate": null})
    );
    // A user without a display name is named by its subject.
    let bob = seed_user(&db, "bob@acme.example", None, now - 120);
    assert_eq!(listed_user(&db, &bob)["name"], "bob@acme.example");
}

#[test]
fn a_user_is_blocked_by_name_or_id_and_unblocked_and_a_name_must_name_exactly_one() {
    let db = TestDb::new();
    let now = unix_now();
    let alice = seed_user(&db, "alice", Some("Alice A."), now);
    let sam_one = seed_user(&db, "sam", None, now);
    let sam_two = seed_user(&db, "samuel", Some("sam"), now);

    let blocked = run_ok(&db, &["users", "block", "Alice A."]);
    assert_eq!(
        blocked,
        format!(
            "Blocked user {alice} (Alice A.): their next call is refused, on every node, until \
             `tollgate users unblock {alice}`.\n"
        )
    );
    let shown = listed_user(&db, &alice);
    assert_eq!(shown["blocked"], json!(true));
    let at = shown["blocked_at"].as_i64().expect("blocked_at");
    assert!((now..now + 600).contains(&at), "{at} from {now}");
    let text = run_ok(&db, &["users", "list"]);
    let line = text.lines().find(|l| l.starts_with(&alice)).expect("alice");
    assert!(line.contains(" blocked "), "{line}");
    // The change is an audit row, with who ran the command as its source.
    let audited = db.run_json(&["audit", "--json", "--tool", "cli:block_user"]);
    assert_eq!(audited.as_array().map(Vec::len), Some(1), "{audited}");
    assert_eq!(
        audited[0]["request_id"],
        json!(format!("\"{alice}\"")),
        "{audited}"
    );
    assert!(
        audited[0]["source"]
            .as_str()
            .is_some_and(|s| s.starts_with("cli:")),
        "{audited}"
    );

    // By id, again: nothing changes and it says so; the first block's time is kept.
    let again = run_ok(&db, &["users", "block", &alice]);
    assert!(
        again.starts_with(&format!(
            "User {alice} (Alice A.) was already blocked, since "
        )),
        "{again}"
    );
    let json = db.run_json(&["users", "block", &alice, "--json"]);
    assert_eq!(
        json,
        json!({"id": alice, "name": "Alice A.", "blocked": true, "changed": false})
    );
    assert_eq!(listed_user(&db, &alice)["blocked_at"], json!(at));

    // "sam" is one user's subject and another's display name.
    let ambiguous = run_refused(&db, &["users", "block", "sam"]);
    let (first, second) = if sam_one < sam_two {
        (&sam_one, &sam_two)
    } else {
        (&sam_two, &sam_one)
    };
    assert_eq!(
        ambiguous,
        format!(
            "tollgate: \"sam\" names 2 users ({first}, {second}); give the id of the one you \
             mean\n"
        )
    );
    assert_eq!(listed_user(&db, &sam_one)["blocked"], json!(false));
    assert_eq!(listed_user(&db, &sam_two)["blocked"], json!(false));
    // Its id names one.
    run_ok(&db, &["users", "block", &sam_two]);
    assert_eq!(listed_user(&db, &sam_two)["blocked"], json!(true));
    assert_eq!(listed_user(&db, &sam_one)["blocked"], json!(false));

    let unknown = run_refused(&db, &["users", "unblock", "nobody"]);
    assert!(
        unknown.starts_with("tollgate: no user is named \"nobody\";")
            && unknown.contains("`tollgate users list`"),
        "{unknown}"
    );

    // By subject.
    let unblocked = run_ok(&db, &["users", "unblock", "alice"]);
    assert_eq!(
        unblocked,
        format!(
            "Unblocked user {alice} (Alice A.): their next call is admitted again, on every \
             node.\n"
        )
    );
    assert_eq!(listed_user(&db, &alice)["blocked_at"], Value::Null);
    let twice = run_ok(&db, &["users", "unblock", &alice]);
    assert_eq!(twice, format!("User {alice} (Alice A.) was not blocked.\n"));
}

#[test]
fn a_users_own_limit_is_set_by_name_listed_and_cleared() {
    let db = TestDb::new();
    let alice = seed_user(&db, "alice", Some("Alice\u{7}A."), unix_now());
    let set = run_ok(
        &db,
        &[
            "limits",
            "set",
            "--user",
            "alice",
            "--category",
            "send",
            "--per-minute",
            "2",
        ],
    );
    assert_eq!(
        set,
        format!("user {alice}: send calls per minute is now 2; it applies from the next call.\n")
    );
    let shown = db.run_json(&["limits", "show", "--json"]);
    assert_eq!(
        shown["users"],
        json!([{"user_id": alice, "name": "Alice\u{7}A.", "per_minute":
            {"read": null, "write": null, "destructive": null, "send": 2, "generate": null}}])
    );
    let text = run_ok(&db, &["limits", "show"]);
    assert!(
        text.contains(&format!("\n  {alice} (Alice\\u{{7}}A.): send=2\n")),
        "{text}"
    );
    assert_eq!(listed_user(&db, &alice)["per_minute"]["send"], json!(2));
    let line = run_ok(&db, &["users", "list"]);
    assert!(line.contains(" send=2"), "{line}");

    let cleared = db.run_json(&[
        "limits",
        "set",
        "--user",
        &alice,
        "--category",
        "send",
        "--inherit",
        "--json",
    ]);
    assert_eq!(
        cleared,
        json!({"changed": format!("user {alice}: send calls per minute"), "limit": null})
    );
    assert_eq!(
        db.run_json(&["limits", "show", "--json"])["users"],
        json!([])
    );
    let text = run_ok(&db, &["limits", "show"]);
    assert!(
        text.contains(
            "User overrides (calls/minute; names from the identity provider's tokens):\n  (none)\n"
        ),
        "{text}"
    );

    let unknown = run_refused(
        &db,
        &[
            "limits",
            "set",
            "--user",
            "nobody",
            "--category",
            "read",
            "--per-minute",
            "1",
        ],
    );
    assert!(
        unknown.starts_with("tollgate: limits set: no user is named \"nobody\";"),
        "{unknown}"
    );
    let no_category = run_refused(
        &db,
        &["limits", "set", "--user", &alice, "--per-minute", "1"],
    );
    assert_eq!(
        no_category,
        "tollgate: limits set: with --user give --category (read, write, destructive, send or \
         generate)\n"
    );
}

#[test]
fn the_audit_log_names_a_users_rows_and_filters_by_user() {
    let db = TestDb::new();
    let now = unix_now();
    let alice = seed_user(&db, "alice", Some("Alice A."), now);
    let sam_one = seed_user(&db, "sam", None, now);
    seed_user(&db, "samuel", Some("sam"), now);
    let key = db.admin_key_id();
    seed_call(&db, &alice, now * 1000, "ok", "");
    seed_call(&db, &key, now * 1000 + 1, "ok", "");
    seed_call(&db, &alice, now * 1000 + 2, "rate_limited", "RateLimited");
    seed_call(&db, &sam_one, now * 1000 + 3, "ok", "");

    let rows = db.run_json(&["audit", "--json"]);
    let names: Vec<(Value, Value)> = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| (r["credential_id"].clone(), r["user_name"].clone()))
        .collect();
    assert_eq!(
        names,
        [
            (json!(sam_one), json!("sam")),
            (json!(alice), json!("Alice A.")),
            (json!(key), Value::Null),
            (json!(alice), json!("Alice A.")),
        ]
    );
    let text = run_ok(&db, &["audit"]);
    assert_eq!(
        text.matches(&format!("{alice} (Alice A.)")).count(),
        2,
        "{text}"
    );
    assert!(text.contains(&format!("{sam_one} (sam)")), "{text}");

    for named in ["Alice A.", "alice", alice.as_str()] {
        let hers = db.run_json(&["audit", "--json", "--user", named]);
        let outcomes: Vec<&Value> = hers
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| &r["outcome"])
            .collect();
        assert_eq!(outcomes, [&json!("rate_limited"), &json!("ok")], "{named}");
    }
    let ambiguous = run_refused(&db, &["audit", "--user", "sam"]);
    assert!(ambiguous.contains("\"sam\" names 2 users"), "{ambiguous}");
    let both = db.run(&["audit", "--user", "alice", "--credential", &key]);
    assert_eq!(both.status.code(), Some(2), "clap refuses the pair");
}
