//! The operator's side of backends: mistakes in `[[backends]]` refused before anything
//! starts, `tollgate backends check` reporting each tool or each problem (of every backend,
//! or of the one `--backend` names), a server that refuses to start on a name clash instead
//! of shadowing a tool, a secret file every user can read warned about, and the
//! documentation's example (`docs/examples/`) passing the check as written.

use serde_json::{Value, json};

use crate::util::{RestBackend, TestDb};

fn write(db: &TestDb, name: &str, text: &str) -> String {
    let path = db.dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    path.to_str().expect("utf-8").to_owned()
}

/// A one-operation document whose operation is `operation_id` at GET /thing.
fn document(operation_id: &str) -> String {
    json!({
        "openapi": "3.0.3",
        "info": {"title": "T", "version": "1"},
        "paths": {"/thing": {"get": {"operationId": operation_id, "summary": "Read the thing.",
            "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}}}}
    })
    .to_string()
}

#[test]
fn a_mistake_in_a_backend_entry_is_refused_with_what_to_fix() {
    let db = TestDb::new();
    let cases = [
        (
            "[[backends]]\nname = \"crm\"\nkind = \"openapi\"\nspec = \"x.json\"\nauth = { header = \"X-Key\", value = \"inline-secret\" }\n",
            "unknown field `value`",
        ),
        (
            "[[backends]]\nname = \"crm\"\nkind = \"grpc\"\n",
            "`kind` \"grpc\" is not one of openapi, mcp",
        ),
        (
            "[[backends]]\nname = \"crm\"\nkind = \"mcp\"\n",
            "`command` (stdio) or `url` (Streamable HTTP) is required",
        ),
        (
            "[[backends]]\nname = \"crm\"\nkind = \"mcp\"\ncommand = \"x\"\n[backends.tools.other_tool]\nenabled = false\n",
            "starts with `crm_`",
        ),
        (
            "[[backends]]\nname = \"crm\"\nkind = \"openapi\"\nspec = \"x.json\"\ntimeout_ms = 2000\nqueue_timeout_ms = 5000\n",
            "backends[0] (crm): `queue_timeout_ms` must be between 1 and the backend's `timeout_ms` (2000)",
        ),
        (
            "[[backends]]\nname = \"crm\"\nkind = \"mcp\"\ncommand = \"x\"\nmax_in_flight = 0\n",
            "backends[0] (crm): `max_in_flight` must be between 1 and 4096",
        ),
    ];
    for (text, expected) in cases {
        let config = write(&db, "bad.toml", text);
        let out = db.run(&["--config", &config, "check-config"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {stderr}");
        assert!(stderr.contains(expected), "{text}: {stderr}");
        assert!(!stderr.contains("inline-secret"), "{stderr}");
    }
}

#[test]
fn backends_check_lists_each_tool_with_its_category_scope_and_idempotency() {
    let db = TestDb::new();
    let backend = RestBackend::start(|_| (200, vec![], b"{}".to_vec()));
    write(&db, "t.json", &document("getThing"));
    let config = write(
        &db,
        "t.toml",
        &format!(
            "[[backends]]\nname = \"inv\"\nkind = \"openapi\"\nspec = \"t.json\"\nbase_url = \"{}\"\n[backends.tools.inv_get_thing]\nscope = \"inv:things\"\n",
            backend.url()
        ),
    );
    let out = db.run(&["--config", &config, "backends", "check", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["problems"], json!([]));
    assert_eq!(
        report["backends"][0]["tools"],
        json!([{"name": "inv_get_thing", "category": "read", "scope": "inv:things", "idempotency": "none"}])
    );
    assert_eq!(
        report["backends"][0]["limits"],
        json!({"timeout_ms": 30000, "max_in_flight": 64, "queue": 256, "queue_timeout_ms": 5000,
               "breaker_failures": 5, "breaker_cooldown_ms": 30000})
    );
    assert!(backend.received().is_empty(), "checking calls no operation");
    let out = db.run(&["--config", &config, "backends", "check"]);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains(
            "backend inv (openapi): ready\n  limits: 30000 ms a call; 64 at once, 256 more \
             waiting up to 5000 ms; circuit opens after 5 failures in a row, for 30000 ms\n"
        ),
        "{printed}"
    );
}

#[test]
fn a_tool_named_like_a_built_in_one_fails_the_check_and_the_start() {
    let db = TestDb::new();
    let backend = RestBackend::start(|_| (200, vec![], b"{}".to_vec()));
    // Backend `create` with operation `client`: `create_client` is a built-in tool.
    write(&db, "t.json", &document("client"));
    let config = write(
        &db,
        "t.toml",
        &format!(
            "[[backends]]\nname = \"create\"\nkind = \"openapi\"\nspec = \"t.json\"\nbase_url = \"{}\"\n[backends.tools.create_nothing]\nenabled = false\n",
            backend.url()
        ),
    );
    let out = db.run(&["--config", &config, "backends", "check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "problem: backend create: the tool create_client is already named by the built-in tools"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("the override [backends.tools.create_nothing] names no tool"),
        "{stderr}"
    );
    let out = db.run(&["--config", &config, "serve", "--listen", "127.0.0.1:0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("create_client"), "{stderr}");
}

#[test]
fn a_backend_that_cannot_be_opened_is_a_problem_and_the_server_does_not_start() {
    let db = TestDb::new();
    let config = write(
        &db,
        "t.toml",
        "[[backends]]\nname = \"crm\"\nkind = \"openapi\"\nspec = \"missing.json\"\nbase_url = \"http://127.0.0.1:9\"\n",
    );
    let out = db.run(&["--config", &config, "backends", "check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("problem: backend crm:"), "{stderr}");
    let out = db.run(&["--config", &config, "serve", "--listen", "127.0.0.1:0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("backend crm"));
}

#[test]
fn a_secret_file_every_user_can_read_is_warned_about_at_start_and_by_the_check() {
    use std::os::unix::fs::PermissionsExt;
    let db = TestDb::new();
    let backend = RestBackend::start(|_| (200, vec![], b"{}".to_vec()));
    write(&db, "t.json", &document("getThing"));
    let key = write(&db, "inv.key", "k-1\n");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let config = write(
        &db,
        "t.toml",
        &format!(
            "[[backends]]\nname = \"inv\"\nkind = \"openapi\"\nspec = \"t.json\"\nbase_url = \"{}\"\nauth = {{ header = \"X-Key\", value_file = \"inv.key\" }}\n",
            backend.url()
        ),
    );
    let warning = format!(
        "backend inv: the secret file {key} can be read by every user of this machine (mode 0644); \
         make it private: `chmod 600 {key}` (owned by the user tollgate runs as), or \
         `chown root:tollgate {key}` and `chmod 640 {key}` for the packaged service"
    );
    let out = db.run(&["--config", &config, "backends", "check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "a warning does not fail the check: {stderr}"
    );
    assert!(stderr.contains(&format!("warning: {warning}")), "{stderr}");
    let out = db.run(&["--config", &config, "backends", "check", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["warnings"], json!([warning]));
    assert_eq!(report["problems"], json!([]));
    let server = crate::util::HttpServer::start_with_env(&db, &["--config", &config], &[]);
    let logged = warning.trim_start_matches("backend inv: ");
    let log = server.log_once_it_contains(logged);
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains(logged)),
        "{log}"
    );
    drop(server);
    for private in [0o600, 0o640] {
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(private)).expect("chmod");
        let out = db.run(&["--config", &config, "backends", "check", "--json"]);
        let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(report["warnings"], json!([]), "{private:o}");
    }
}

#[test]
fn the_documented_example_passes_the_check_as_written() {
    use std::os::unix::fs::PermissionsExt;
    let db = TestDb::new();
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples");
    for file in ["backends.toml", "erp-openapi.yaml"] {
        std::fs::copy(examples.join(file), db.dir.path().join(file)).expect("copy the example");
    }
    let config_path = db.dir.path().join("backends.toml");
    let config = tollgate::config::Config::load(
        Some(&config_path),
        &[],
        &tollgate::config::Overrides::default(),
    )
    .expect("the example is a valid configuration");
    let names: Vec<&str> = config.backends.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["erp", "files", "vendor"]);
    // The secret files it names, private as it asks.
    for secret in config.backends.iter().flat_map(|b| b.secret_files()) {
        std::fs::write(secret, "example-secret\n").expect("write a secret");
        std::fs::set_permissions(secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let config_arg = config_path.to_str().expect("utf-8");
    let out = db.run(&["--config", config_arg, "check-config"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The two MCP servers are the reader's own (a Node server, a vendor's): the check of
    // the REST backend is what the example's document and overrides must pass.
    let out = db.run(&[
        "--config",
        config_arg,
        "backends",
        "check",
        "--backend",
        "erp",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["problems"], json!([]));
    assert_eq!(report["warnings"], json!([]));
    assert_eq!(report["backends"].as_array().map(Vec::len), Some(1));
    let tool = |name: &str, category: &str, scope: &str, idempotency: &str| json!({"name": name, "category": category, "scope": scope, "idempotency": idempotency});
    assert_eq!(
        report["backends"][0]["tools"],
        json!([
            tool("erp_list_orders", "read", "erp:read", "none"),
            tool("erp_create_order", "write", "erp:write", "optional"),
            tool("erp_get_order", "read", "erp:read", "none"),
            tool(
                "erp_delete_order",
                "destructive",
                "erp:destructive",
                "required"
            ),
            tool("erp_export_ledger", "generate", "erp:finance", "optional"),
        ]),
        "every override names a tool of the document; erp_reset_database is disabled"
    );
}

#[test]
fn the_check_of_one_backend_names_the_configured_ones_when_it_finds_none() {
    let db = TestDb::new();
    let config = write(
        &db,
        "t.toml",
        "[[backends]]\nname = \"crm\"\nkind = \"openapi\"\nspec = \"missing.json\"\n\n[[backends]]\nname = \"erp\"\nkind = \"openapi\"\nspec = \"missing.json\"\n",
    );
    let out = db.run(&["--config", &config, "backends", "check", "--backend", "hr"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--backend hr: no backend has this name; the configured ones are crm, erp"),
        "{stderr}"
    );
    let out = db.run(&["--config", &config, "backends", "check", "--backend", "erp"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("problem: backend erp:"), "{stderr}");
    assert!(
        !stderr.contains("backend crm"),
        "only erp is opened: {stderr}"
    );
}
