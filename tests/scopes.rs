//! Scopes as an operator meets them: `key create` and `client create` refuse a scope no
//! tool needs, with the closest known ones; a backend's scopes are known exactly while its
//! `[[backends]]` entry is configured; `tollgate tools` lists every tool with its scope,
//! category and plans, then every scope; and the help pages say all of this.

use serde_json::{Value, json};

use crate::util::{TestDb, free_port};

/// The exit code of a refused `key create` or `client create` (as for a malformed scope).
const REFUSED: i32 = 1;

fn write(db: &TestDb, name: &str, text: &str) -> String {
    let path = db.dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    path.to_str().expect("utf-8").to_owned()
}

/// An orders API: list (GET), create (POST), delete (DELETE). Opening it reads the
/// document only; nothing listens at its base URL.
fn orders_document() -> String {
    json!({
        "openapi": "3.0.3",
        "info": {"title": "Orders", "version": "1"},
        "paths": {
            "/orders": {
                "get": {"operationId": "listOrders", "summary": "List the orders.",
                        "responses": {"200": {"description": "ok"}}},
                "post": {"operationId": "createOrder", "summary": "Create an order.",
                         "responses": {"201": {"description": "made"}}}
            },
            "/orders/{id}": {
                "delete": {"operationId": "deleteOrder", "summary": "Delete an order.",
                           "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                           "responses": {"204": {"description": "gone"}}}
            }
        }
    })
    .to_string()
}

/// A configuration with the orders API as `crm` and, with `upstream`, an MCP server `up`
/// that nothing answers for.
fn backends_config(db: &TestDb, upstream: bool) -> String {
    write(db, "orders.json", &orders_document());
    let mut text = String::from(
        "[[backends]]\nname = \"crm\"\nkind = \"openapi\"\nspec = \"orders.json\"\nbase_url = \"http://127.0.0.1:9\"\n",
    );
    if upstream {
        text.push_str(&format!(
            "\n[[backends]]\nname = \"up\"\nkind = \"mcp\"\nurl = \"http://127.0.0.1:{}/mcp\"\ntimeout_ms = 2000\n",
            free_port()
        ));
    }
    write(db, "tollgate.toml", &text)
}

/// Runs a command that must fail with [`REFUSED`]; its stderr.
fn refused(db: &TestDb, args: &[&str]) -> String {
    let out = db.run(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(REFUSED), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?} printed {:?}", out.stdout);
    stderr
}

fn key_count(db: &TestDb) -> usize {
    db.run_json(&["key", "list", "--json"])
        .as_array()
        .expect("keys")
        .len()
}

fn stdout(db: &TestDb, args: &[&str]) -> String {
    let out = db.run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn a_mistyped_scope_is_refused_with_the_closest_known_one_and_nothing_is_created() {
    let db = TestDb::new();
    let before = key_count(&db);
    let raed = refused(
        &db,
        &[
            "key",
            "create",
            "--name",
            "typo",
            "--scopes",
            "invoices:raed",
        ],
    );
    assert_eq!(
        raed,
        "tollgate: unknown scope \"invoices:raed\": no tool needs it. Did you mean \
         invoices:read? Run `tollgate tools` to list every tool and its scope.\n"
    );
    let client = refused(
        &db,
        &[
            "key",
            "create",
            "--name",
            "typo",
            "--scopes",
            "invoices:read,client:read",
        ],
    );
    assert!(
        client.contains("unknown scope \"client:read\"") && client.contains("clients:read?"),
        "{client}"
    );
    assert!(!client.contains("No backend"), "{client}");
    assert_eq!(key_count(&db), before, "a refused key is not created");

    let oauth = refused(
        &db,
        &[
            "client",
            "create",
            "--name",
            "bot",
            "--scopes",
            "client:read",
        ],
    );
    assert!(oauth.contains("Did you mean clients:read?"), "{oauth}");
    let clients = db.run_json(&["client", "list", "--json"]);
    assert_eq!(clients, json!([]));
}

#[test]
fn every_known_scope_is_accepted() {
    let db = TestDb::new();
    let made = db.run_json(&[
        "key",
        "create",
        "--name",
        "clerk",
        "--scopes",
        "invoices:read,clients:write,invoices:void,reports:generate,admin",
        "--json",
    ]);
    assert_eq!(
        made["scopes"],
        json!([
            "invoices:read",
            "clients:write",
            "invoices:void",
            "reports:generate",
            "admin"
        ])
    );
    let all = db.run_json(&["key", "create", "--name", "all", "--scopes", "*", "--json"]);
    assert_eq!(all["scopes"], json!(["*"]));
    let client = db.run_json(&[
        "client",
        "create",
        "--name",
        "bot",
        "--scopes",
        "payments:write",
        "--json",
    ]);
    assert_eq!(client["allowed_scopes"], json!(["payments:write"]));
    // A malformed scope is still told how scopes look.
    let malformed = refused(
        &db,
        &["key", "create", "--name", "x", "--scopes", "invoices"],
    );
    assert!(malformed.contains("resource:action"), "{malformed}");
}

#[test]
fn a_backends_scopes_are_known_while_it_is_configured_and_refused_with_a_hint_otherwise() {
    let db = TestDb::new();
    let config = backends_config(&db, true);
    let unconfigured = refused(
        &db,
        &["key", "create", "--name", "crm", "--scopes", "crm:read"],
    );
    assert_eq!(
        unconfigured,
        "tollgate: unknown scope \"crm:read\": no tool needs it. No backend named \"crm\" is \
         configured: a backend's scopes are known once its [[backends]] entry is in the \
         configuration (--config FILE or TOLLGATE_CONFIG). Run `tollgate tools` to list every \
         tool and its scope.\n"
    );
    let made = db.run_json(&[
        "--config",
        &config,
        "key",
        "create",
        "--name",
        "crm",
        "--scopes",
        "crm:read,crm:destructive,up:write",
        "--json",
    ]);
    assert_eq!(
        made["scopes"],
        json!(["crm:read", "crm:destructive", "up:write"])
    );
    // Configured, a typo of the backend's scope is answered with it; a category no tool of
    // the backend has (no override makes one `send`) is unknown.
    let typo = refused(
        &db,
        &[
            "--config", &config, "key", "create", "--name", "x", "--scopes", "crm:raed",
        ],
    );
    assert!(typo.contains("Did you mean crm:read?"), "{typo}");
    assert!(!typo.contains("No backend"), "{typo}");
    let send = refused(
        &db,
        &[
            "--config", &config, "key", "create", "--name", "x", "--scopes", "crm:send",
        ],
    );
    assert!(send.contains("unknown scope \"crm:send\""), "{send}");
}

#[test]
fn tools_lists_the_built_in_tools_with_their_scope_category_and_plans() {
    let db = TestDb::new();
    let out = stdout(&db, &["tools"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "TOOL             SCOPE             CATEGORY     PLANS"
    );
    for row in [
        "create_invoice   invoices:write    write        free, starter, pro, enterprise",
        "export_invoices  reports:generate  generate     pro, enterprise",
        "send_invoice     invoices:send     send         starter, pro, enterprise",
        "void_invoice     invoices:void     destructive  free, starter, pro, enterprise",
        "list_payments    invoices:read     read         free, starter, pro, enterprise",
    ] {
        assert!(lines.contains(&row), "no line {row:?} in\n{out}");
    }
    // Sixteen built-in tools, then the scopes.
    assert_eq!(lines[17], "", "{out}");
    assert_eq!(lines[18], "SCOPE             GRANTS");
    assert_eq!(
        lines[19],
        "*                 every tool, built-in and backend, now and to come; not the console"
    );
    assert_eq!(
        lines[20],
        "admin             signs in to the operator console (/console); grants no tool, and * \
         does not include it"
    );
    assert!(
        lines.contains(&"invoices:read     get_invoice, list_payments, search_invoices"),
        "{out}"
    );
    // A plan that leaves a tool out no longer lists it.
    stdout(&db, &["plan", "exclude", "pro", "void_invoice"]);
    let out = stdout(&db, &["tools"]);
    assert!(
        out.lines()
            .any(|l| l
                == "void_invoice     invoices:void     destructive  free, starter, enterprise"),
        "{out}"
    );
}

#[test]
fn tools_lists_each_backends_tools_and_an_unreachable_backend_with_its_scopes() {
    let db = TestDb::new();
    let config = backends_config(&db, true);
    let out = db.run(&["--config", &config, "tools"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "TOOL              SCOPE             CATEGORY     PLANS"
    );
    for row in [
        "crm_list_orders   crm:read          read         free, starter, pro, enterprise",
        "crm_delete_order  crm:destructive   destructive  free, starter, pro, enterprise",
        "crm_create_order  crm:write         write        free, starter, pro, enterprise",
        "void_invoice      invoices:void     destructive  free, starter, pro, enterprise",
        "BACKEND  KIND     STATE  TOOLS  SCOPES",
        "crm      openapi  ready  3      crm:read, crm:write, crm:destructive",
        "up       mcp      down   0      up:read, up:write, up:destructive",
        "crm:read          crm_list_orders",
        "up:read           no tool now (the backend lists none that needs it)",
    ] {
        assert!(lines.contains(&row), "no line {row:?} in\n{text}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("backend up is down: ") && l.contains("no MCP server answered")),
        "{text}"
    );

    let listed: Value =
        serde_json::from_slice(&db.run(&["--config", &config, "tools", "--json"]).stdout)
            .expect("JSON");
    let tool = |name: &str| -> Value {
        listed["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {listed}"))
    };
    assert_eq!(
        tool("crm_list_orders"),
        json!({"name": "crm_list_orders", "scope": "crm:read", "category": "read",
               "plans": ["free", "starter", "pro", "enterprise"], "backend": "crm"})
    );
    assert_eq!(
        tool("send_invoice"),
        json!({"name": "send_invoice", "scope": "invoices:send", "category": "send",
               "plans": ["starter", "pro", "enterprise"], "backend": null})
    );
    assert_eq!(listed["tools"].as_array().map(Vec::len), Some(19));
    assert_eq!(
        listed["backends"][0],
        json!({"name": "crm", "kind": "openapi", "state": "ready", "reason": null, "tools": 3,
               "scopes": ["crm:read", "crm:write", "crm:destructive"]})
    );
    let up = &listed["backends"][1];
    assert_eq!(up["state"], "down");
    assert_eq!(up["tools"], 0);
    assert_eq!(
        up["scopes"],
        json!(["up:read", "up:write", "up:destructive"])
    );
    assert!(up["reason"].as_str().is_some_and(|r| !r.is_empty()), "{up}");
    let scopes = listed["scopes"].as_array().expect("scopes");
    assert_eq!(
        scopes[0],
        json!({"group": "special", "scope": "*",
               "meaning": "every tool, built-in and backend, now and to come; not the console"})
    );
    assert_eq!(scopes[1]["scope"], "admin");
    assert!(
        scopes.contains(&json!({"group": "built-in", "resource": "invoices",
                                "scope": "invoices:void", "tools": ["void_invoice"]})),
        "{listed}"
    );
    assert!(
        scopes.contains(
            &json!({"group": "backend", "backend": "up", "scope": "up:read",
                                "tools": []})
        ),
        "{listed}"
    );
}

#[test]
fn the_help_puts_global_options_apart_and_shows_examples() {
    let db = TestDb::new();
    let top = stdout(&db, &["--help"]);
    assert_eq!(top.matches("Global options:").count(), 1, "{top}");
    assert!(
        top.contains("--database <FILE|URL>") && top.contains("SQLite file or postgres:// URL"),
        "{top}"
    );
    assert!(
        top.contains("Manage API keys: create, list, revoke, rotate, set"),
        "{top}"
    );
    assert!(top.contains("\n  tools "), "{top}");

    let key = stdout(&db, &["key", "--help"]);
    assert!(key.contains("\n  set "), "{key}");
    assert!(
        key.contains("Manage API keys: create, list, revoke, rotate, set"),
        "{key}"
    );

    let create = stdout(&db, &["key", "create", "--help"]);
    assert_eq!(create.matches("Global options:").count(), 1, "{create}");
    let (own, global) = create.split_once("Global options:").expect("heading");
    assert!(
        own.contains("--scopes <SCOPES>") && !own.contains("--log-level"),
        "{create}"
    );
    assert!(global.contains("--config <FILE>"), "{create}");
    assert!(
        create.contains("Examples:\n  tollgate key create --name claude --scopes"),
        "{create}"
    );

    // This binary is built with the conformance pack (the test suite needs it), so `serve`
    // offers the flag; the unit test `ops::cli::tests` renders a build without it.
    let serve = stdout(&db, &["serve", "--help"]);
    assert_eq!(
        serve.contains("--conformance-pack"),
        tollgate::HAS_CONFORMANCE_PACK,
        "{serve}"
    );
    assert!(serve.contains("Examples:\n  tollgate serve"), "{serve}");
}
